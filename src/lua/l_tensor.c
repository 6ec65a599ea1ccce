/* l_tensor.c - the tensor userdata and the binding helpers of l_bind.h: checks,
 * the metatable (__gc, __close, __index, __newindex, __len), properties
 * (shape, dtype, device, ndim), views and conversions.
 * A userdata holds one reference (dl_tensor *) or NULL once closed.  Pushing
 * a tensor counts its bytes; after enough bytes the collector runs, so loops
 * making temporaries never pile up storage waiting for Lua's own pacing. */
#include "l_bind.h"
#include "core/iter.h"
#include "autograd/autograd.h"
#include "ops/views.h"

#include <string.h>

/* --- userdata ------------------------------------------------------------ */

/* registry[&tensor_mt_key] is the tensor metatable (also registry[DL_TENSOR_MT]):
 * found by address, where luaL_testudata looks the name up as a string on
 * every call (interning it: 13% of a small in-place add in `perf`) */
static const char tensor_mt_key = 0;

dl_tensor *dlL_totensor(lua_State *L, int idx) {
    dl_tensor **box = lua_touserdata(L, idx);
    if (!box || !lua_getmetatable(L, idx)) return NULL;
    lua_rawgetp(L, LUA_REGISTRYINDEX, &tensor_mt_key);
    int ours = lua_rawequal(L, -1, -2);
    lua_pop(L, 2);
    if (!ours) return NULL;
    if (!*box) luaL_error(L, "tensor used after it was closed");
    return *box;
}

dl_tensor *dlL_checktensor(lua_State *L, int idx) {
    dl_tensor *t = dlL_totensor(L, idx);
    if (!t) {
        const char *tn = luaL_typename(L, idx);
        luaL_argerror(L, idx, lua_pushfstring(L, "tensor expected, got %s", tn));
    }
    return t;
}

int dlL_fail(lua_State *L) {
    const char *msg = dl_last_error();
    return luaL_error(L, "%s", msg[0] ? msg : "unknown error");
}

int dlL_pushself(lua_State *L, int rc) {
    if (rc) return dlL_fail(L);
    lua_settop(L, 1);
    return 1;
}

int dlL_done(lua_State *L, int rc) {
    return rc ? dlL_fail(L) : 0;
}

/* Collection pacing: a full collection whenever the bytes of storage alive
 * (in the process) have grown since their lowest point after this state's
 * last one by more than the larger of 64 MB and an eighth of the bytes alive
 * after it.  Garbage tensors then add at most about 1/8 to the memory in use
 * (a training loop's RSS stays flat), while a collection, which only walks
 * the Lua heap, stays rare next to the tensor work it follows.  Tensors
 * freed at once (<close>, an inference plan's intermediates) do not count:
 * a loop that closes what it makes, and whose tensors alive at once stay
 * under that bound, is not interrupted (paced on bytes allocated instead, an
 * imported ResNet-50 at batch 1 collected its 1 MB Lua heap, 0.13 ms, every
 * other forward).  As a backstop for garbage these bytes do not see (storage
 * wrapped around a host's or a decoder's buffer, pinned blocks), a
 * collection also runs once 8 times the bound has been allocated since the
 * last.  The counters live in each state's registry, so states on different
 * threads never share them. */
#define GC_MIN_BYTES ((int64_t)64 << 20)
typedef struct {
    int64_t low;        /* bytes alive at their lowest since the last collection */
    int64_t threshold;  /* growth above low that collects */
    int64_t mark_total; /* bytes allocated by the process at the last collection */
} gc_pacing;
static const char gc_pacing_key = 'g'; /* its address keys the registry entry */

static void maybe_collect(lua_State *L) {
    lua_rawgetp(L, LUA_REGISTRYINDEX, &gc_pacing_key);
    gc_pacing *p = lua_touserdata(L, -1);
    lua_pop(L, 1);
    if (!p) return;
    int64_t live = dl_mem_live_bytes();
    if (live < p->low) p->low = live;
    if (live - p->low < p->threshold && dl_mem_total_allocated() - p->mark_total < 8 * p->threshold)
        return;
    lua_gc(L, LUA_GCCOLLECT);
    p->low = dl_mem_live_bytes();
    p->threshold = p->low / 8 > GC_MIN_BYTES ? p->low / 8 : GC_MIN_BYTES;
    p->mark_total = dl_mem_total_allocated();
}

/* The spare box: an empty tensor userdata made ahead of time (registry key
 * &spare_key), so that dlL_pushtensor anchors t in a userdata before it
 * allocates anything.  Should making the next spare raise a memory error, t
 * is already owned by a box on the stack and __gc releases it: no leak. */
static const char spare_key = 0;

static void new_spare(lua_State *L) {
    dl_tensor **box = lua_newuserdatauv(L, sizeof *box, 1);
    *box = NULL;
    luaL_setmetatable(L, DL_TENSOR_MT);
    lua_rawsetp(L, LUA_REGISTRYINDEX, &spare_key);
}

int dlL_pushtensor(lua_State *L, dl_tensor *t) {
    if (!t) return dlL_fail(L);
    if (lua_rawgetp(L, LUA_REGISTRYINDEX, &spare_key) == LUA_TUSERDATA) {
        dl_tensor **box = lua_touserdata(L, -1);
        *box = t;
        new_spare(L);
    } else { /* no spare yet (dlL_open_tensor makes the first) */
        lua_pop(L, 1);
        dl_tensor **box = lua_newuserdatauv(L, sizeof *box, 1);
        *box = t;
        luaL_setmetatable(L, DL_TENSOR_MT);
    }
    /* collect after the new tensor is anchored on the stack */
    maybe_collect(L);
    return 1;
}

static int t_gc(lua_State *L) {
    dl_tensor **box = luaL_checkudata(L, 1, DL_TENSOR_MT);
    dl_tensor_release(*box);
    *box = NULL;
    return 0;
}

/* --- argument helpers ---------------------------------------------------- */

int dlL_isscalar(lua_State *L, int idx) {
    int t = lua_type(L, idx);
    return t == LUA_TNUMBER || t == LUA_TBOOLEAN;
}

dl_tensor *dlL_checktensorish(lua_State *L, int idx, const dl_tensor *like) {
    dl_tensor *t = dlL_totensor(L, idx);
    if (t) return dl_tensor_retain(t);
    int ty = lua_type(L, idx);
    dl_tensor *s = NULL;
    if (ty == LUA_TBOOLEAN) {
        dl_dtype dt = like ? dl_promote_with_scalar(like->dtype, false, true) : DL_DTYPE_BOOL;
        s = dl_tensor_scalar(lua_toboolean(L, idx), dt);
    } else if (ty == LUA_TNUMBER) {
        int isint = lua_isinteger(L, idx);
        dl_dtype dt = like ? dl_promote_with_scalar(like->dtype, !isint, false)
                           : (isint ? DL_DTYPE_I64 : DL_DTYPE_F32);
        if (isint && !dl_dtype_is_floating(dt)) {
            s = dl_tensor_empty(0, NULL, dt, DL_CPU);
            if (s) dl_store_i64(s->storage->data, dt, lua_tointeger(L, idx));
        } else {
            s = dl_tensor_scalar(lua_tonumber(L, idx), dt);
        }
    } else {
        luaL_argerror(
            L, idx, lua_pushfstring(L, "tensor or number expected, got %s", luaL_typename(L, idx)));
    }
    if (!s) dlL_fail(L);
    return s;
}

int dlL_dimvalue(lua_State *L, lua_Integer d, int argidx) {
    if (d == 0)
        luaL_argerror(L, argidx, "dimension 0 is invalid (dimensions are 1-based; -1 is the last)");
    if (d > DL_MAX_DIMS + 1 || d < -(DL_MAX_DIMS + 1))
        luaL_argerror(L, argidx, lua_pushfstring(L, "dimension %d out of range", (int)d));
    return d > 0 ? (int)(d - 1) : (int)d;
}

int dlL_checkdim(lua_State *L, int idx) {
    if (!lua_isinteger(L, idx))
        luaL_argerror(
            L, idx,
            lua_pushfstring(L, "dimension (integer) expected, got %s",
                            lua_isnumber(L, idx) ? "non-integer number" : luaL_typename(L, idx)));
    return dlL_dimvalue(L, lua_tointeger(L, idx), idx);
}

int64_t dlL_checkindex(lua_State *L, int idx) {
    if (!lua_isinteger(L, idx))
        luaL_argerror(
            L, idx,
            lua_pushfstring(L, "index (integer) expected, got %s",
                            lua_isnumber(L, idx) ? "non-integer number" : luaL_typename(L, idx)));
    lua_Integer i = lua_tointeger(L, idx);
    if (i == 0) luaL_argerror(L, idx, "index 0 is invalid (indices are 1-based; -1 is the last)");
    return i > 0 ? i - 1 : i;
}

static const char *const dtype_registry_key = "dl.dtypes";

void dlL_pushdtype(lua_State *L, dl_dtype t) {
    lua_getfield(L, LUA_REGISTRYINDEX, dtype_registry_key);
    lua_rawgeti(L, -1, (lua_Integer)t + 1);
    lua_remove(L, -2);
}

dl_dtype dlL_checkdtype(lua_State *L, int idx) {
    dl_dtype out;
    if (lua_type(L, idx) == LUA_TSTRING) {
        if (dl_dtype_parse(lua_tostring(L, idx), &out)) {
            if (idx < 0) luaL_error(L, "%s", dl_last_error()); /* an option field */
            luaL_argerror(L, idx, dl_last_error());
        }
        return out;
    }
    if (lua_type(L, idx) == LUA_TTABLE && luaL_getmetafield(L, idx, "__name") != LUA_TNIL) {
        int isdt = strcmp(lua_tostring(L, -1), "dl.dtype") == 0;
        lua_pop(L, 1);
        if (isdt) {
            lua_getfield(L, idx, "name");
            const char *n = lua_tostring(L, -1);
            int rc = n ? dl_dtype_parse(n, &out) : -1;
            lua_pop(L, 1);
            if (rc == 0) return out;
        }
    }
    luaL_argerror(
        L, idx,
        lua_pushfstring(L, "dtype expected (dl.float32 or a name), got %s", luaL_typename(L, idx)));
    return DL_DTYPE_F32;
}

dl_dtype dlL_optdtype(lua_State *L, int idx, dl_dtype def) {
    return lua_isnoneornil(L, idx) ? def : dlL_checkdtype(L, idx);
}

dl_device dlL_checkdevice(lua_State *L, int idx) {
    dl_device d;
    const char *s = luaL_checkstring(L, idx);
    if (dl_device_parse(s, &d)) {
        if (idx < 0) luaL_error(L, "%s", dl_last_error()); /* an option field */
        luaL_argerror(L, idx, dl_last_error());
    }
    return d;
}

int dlL_checkshape(lua_State *L, int idx, int64_t *shape, int *next) {
    int n = 0;
    if (lua_istable(L, idx)) {
        lua_Integer len = luaL_len(L, idx);
        if (len > DL_MAX_DIMS)
            luaL_argerror(L, idx, lua_pushfstring(L, "at most %d dimensions", DL_MAX_DIMS));
        for (lua_Integer i = 1; i <= len; i++) {
            lua_geti(L, idx, i);
            if (!lua_isinteger(L, -1))
                luaL_argerror(L, idx,
                              lua_pushfstring(L, "size %d of the shape is not an integer", (int)i));
            shape[n++] = lua_tointeger(L, -1);
            lua_pop(L, 1);
        }
        if (next) *next = idx + 1;
        return n;
    }
    int top = lua_gettop(L), i = idx;
    for (; i <= top && lua_type(L, i) == LUA_TNUMBER; i++) {
        if (!lua_isinteger(L, i)) luaL_argerror(L, i, "size must be an integer");
        if (n == DL_MAX_DIMS)
            luaL_argerror(L, i, lua_pushfstring(L, "at most %d dimensions", DL_MAX_DIMS));
        shape[n++] = lua_tointeger(L, i);
    }
    if (next) *next = i;
    return n;
}

void dlL_checkoptions(lua_State *L, int idx, const char *op, const char *const *allowed) {
    if (lua_isnoneornil(L, idx)) return;
    if (!lua_istable(L, idx))
        luaL_argerror(
            L, idx,
            lua_pushfstring(L, "%s: options table expected, got %s", op, luaL_typename(L, idx)));
    idx = lua_absindex(L, idx);
    lua_pushnil(L);
    while (lua_next(L, idx)) {
        lua_pop(L, 1);
        if (lua_type(L, -1) != LUA_TSTRING) {
            lua_pop(L, 1);
            luaL_error(L, "%s: option names must be strings", op);
        }
        const char *k = lua_tostring(L, -1);
        int ok = 0;
        for (int i = 0; allowed && allowed[i]; i++)
            if (strcmp(k, allowed[i]) == 0) ok = 1;
        if (!ok) {
            luaL_Buffer b;
            luaL_buffinit(L, &b);
            for (int i = 0; allowed && allowed[i]; i++) {
                if (i) luaL_addstring(&b, ", ");
                luaL_addstring(&b, allowed[i]);
            }
            luaL_pushresult(&b);
            luaL_error(L, "%s: unknown option '%s' (expected: %s)", op, k, lua_tostring(L, -1));
        }
    }
}

int dlL_optfield(lua_State *L, int idx, const char *key) {
    if (!lua_istable(L, idx)) {
        lua_pushnil(L);
        return LUA_TNIL;
    }
    return lua_getfield(L, idx, key);
}

/* --- the nn families' argument readers ------------------------------------------- */

dl_tensor *dlL_opttensor(lua_State *L, int idx) {
    return lua_isnoneornil(L, idx) ? NULL : dlL_checktensor(L, idx);
}

/* One integer from the value at the top of the stack (popped), for the pair
 * readers below. */
static int64_t pop_integer(lua_State *L, const char *op, const char *key) {
    int isint = 0;
    lua_Integer v = lua_tointegerx(L, -1, &isint);
    if (!isint)
        luaL_error(L, "%s: %s must be an integer or a pair of integers, got %s", op, key,
                   luaL_typename(L, -1));
    lua_pop(L, 1);
    return (int64_t)v;
}

void dlL_optpair(lua_State *L, int opts, const char *op, const char *key, const int64_t def[2],
                 int64_t out[2]) {
    int t = dlL_optfield(L, opts, key);
    if (t == LUA_TNIL) {
        lua_pop(L, 1);
        out[0] = def[0];
        out[1] = def[1];
    } else if (t == LUA_TTABLE) {
        int top = lua_gettop(L);
        if (luaL_len(L, top) != 2)
            luaL_error(L, "%s: %s must be a number or a pair {h, w}", op, key);
        lua_geti(L, top, 1);
        out[0] = pop_integer(L, op, key);
        lua_geti(L, top, 2);
        out[1] = pop_integer(L, op, key);
        lua_pop(L, 1);
    } else {
        out[0] = out[1] = pop_integer(L, op, key);
    }
}

void dlL_checkpair(lua_State *L, int idx, const char *op, const char *what, int64_t out[2]) {
    if (lua_istable(L, idx)) {
        if (luaL_len(L, idx) != 2)
            luaL_error(L, "%s: %s must be a number or a pair {h, w}", op, what);
        lua_geti(L, idx, 1);
        out[0] = pop_integer(L, op, what);
        lua_geti(L, idx, 2);
        out[1] = pop_integer(L, op, what);
    } else {
        lua_pushvalue(L, idx);
        out[0] = out[1] = pop_integer(L, op, what);
    }
}

void dlL_optneed(lua_State *L, int opts, const char *op, bool need[3]) {
    need[0] = need[1] = need[2] = true;
    int t = dlL_optfield(L, opts, "need");
    if (t == LUA_TTABLE) {
        int top = lua_gettop(L);
        for (int i = 0; i < 3; i++) {
            lua_geti(L, top, i + 1);
            if (!lua_isnil(L, -1) && !lua_isboolean(L, -1))
                luaL_error(L, "%s: need must be a table of 3 booleans", op);
            need[i] = lua_isnil(L, -1) || lua_toboolean(L, -1);
            lua_pop(L, 1);
        }
    } else if (t != LUA_TNIL) {
        luaL_error(L, "%s: need must be a table of 3 booleans, got %s", op, luaL_typename(L, -1));
    }
    lua_pop(L, 1);
}

int dlL_pushopttensor(lua_State *L, dl_tensor *t) {
    if (!t) {
        lua_pushnil(L);
        return 1;
    }
    return dlL_pushtensor(L, t);
}

int dlL_pushtensor3(lua_State *L, dl_tensor *a, dl_tensor *b, dl_tensor *c) {
    dlL_pushopttensor(L, a);
    dlL_pushopttensor(L, b);
    dlL_pushopttensor(L, c);
    return 3;
}

void dlL_nomore(lua_State *L, int last, const char *op) {
    if (lua_gettop(L) > last)
        luaL_error(L, "%s: unexpected argument %d (%s)", op, last + 1, luaL_typename(L, last + 1));
}

dl_tensor **dlL_checktensors(lua_State *L, int idx, const char *op, const char *what, int *n) {
    idx = lua_absindex(L, idx);
    if (!lua_istable(L, idx) || dlL_totensor(L, idx))
        luaL_error(L, "%s: %s must be an array of tensors, got %s", op, what,
                   dlL_totensor(L, idx) ? "a tensor" : luaL_typename(L, idx));
    lua_Integer len = luaL_len(L, idx);
    if (len > 1 << 24) luaL_error(L, "%s: too many %s (%d)", op, what, (int)len);
    dl_tensor **ts = lua_newuserdatauv(L, (size_t)(len > 0 ? len : 1) * sizeof *ts, 0);
    for (lua_Integer i = 1; i <= len; i++) {
        lua_geti(L, idx, i);
        if (!(ts[i - 1] = dlL_totensor(L, -1)))
            luaL_error(L, "%s: %s[%d] is a %s, expected a tensor", op, what, (int)i,
                       luaL_typename(L, -1));
        lua_pop(L, 1);
    }
    *n = (int)len;
    return ts;
}

dlL_createopts dlL_checkcreateopts(lua_State *L, int idx, const char *op, dl_dtype def_dtype,
                                   dl_device def_device) {
    static const char *const keys[] = {"dtype", "device", "requires_grad", NULL};
    dlL_createopts o = {def_dtype, def_device, 0};
    if (lua_isnoneornil(L, idx)) return o;
    dlL_checkoptions(L, idx, op, keys);
    if (dlL_optfield(L, idx, "dtype") != LUA_TNIL) o.dtype = dlL_checkdtype(L, -1);
    lua_pop(L, 1);
    if (dlL_optfield(L, idx, "device") != LUA_TNIL) o.device = dlL_checkdevice(L, -1);
    lua_pop(L, 1);
    o.requires_grad = dlL_optboolean(L, idx, "requires_grad", 0);
    return o;
}

/* Pushes option key of the table at idx (nil when absent); true when present,
 * where it must be of Lua type `want` (else an error: it must be `what`). */
static bool opt_present(lua_State *L, int idx, const char *key, int want, const char *what) {
    int ty = dlL_optfield(L, idx, key);
    if (ty != LUA_TNIL && ty != want)
        luaL_error(L, "option '%s' must be %s, got %s", key, what, lua_typename(L, ty));
    return ty != LUA_TNIL;
}

lua_Number dlL_optnumber(lua_State *L, int idx, const char *key, lua_Number def) {
    lua_Number v = opt_present(L, idx, key, LUA_TNUMBER, "a number") ? lua_tonumber(L, -1) : def;
    lua_pop(L, 1);
    return v;
}

lua_Integer dlL_optinteger(lua_State *L, int idx, const char *key, lua_Integer def) {
    int ty = dlL_optfield(L, idx, key);
    lua_Integer v = def;
    if (ty == LUA_TNUMBER && lua_isinteger(L, -1))
        v = lua_tointeger(L, -1);
    else if (ty != LUA_TNIL)
        luaL_error(L, "option '%s' must be an integer", key);
    lua_pop(L, 1);
    return v;
}

int dlL_optboolean(lua_State *L, int idx, const char *key, int def) {
    int v = opt_present(L, idx, key, LUA_TBOOLEAN, "a boolean") ? lua_toboolean(L, -1) : def;
    lua_pop(L, 1);
    return v;
}

/* Adds the functions of regs and the closures of kinds (either may be NULL)
 * to the dl module table, or (methods) to the Tensor methods table. */
static void register_into(lua_State *L, bool methods, const luaL_Reg *regs,
                          const dlL_KindReg *kinds) {
    if (!regs && !kinds) return;
    if (methods) {
        luaL_getmetatable(L, DL_TENSOR_MT);
        lua_getfield(L, -1, "methods");
    } else {
        lua_getfield(L, LUA_REGISTRYINDEX, DL_MODULE_KEY);
    }
    if (regs) luaL_setfuncs(L, regs, 0);
    for (const dlL_KindReg *k = kinds; k && k->name; k++) {
        lua_pushinteger(L, k->kind);
        lua_pushstring(L, k->name);
        lua_pushcclosure(L, k->func, 2);
        lua_setfield(L, -2, k->name);
    }
    lua_pop(L, methods ? 2 : 1);
}

void dlL_register(lua_State *L, const luaL_Reg *functions, const luaL_Reg *methods) {
    register_into(L, false, functions, NULL);
    register_into(L, true, methods, NULL);
}

void dlL_register_kinds(lua_State *L, const dlL_KindReg *functions, const dlL_KindReg *methods) {
    register_into(L, false, NULL, functions);
    register_into(L, true, NULL, methods);
}

int dlL_kind(lua_State *L) {
    return (int)lua_tointeger(L, lua_upvalueindex(1));
}

const char *dlL_opname(lua_State *L) {
    return lua_tostring(L, lua_upvalueindex(2));
}

void dlL_newclass(lua_State *L, const char *name, const luaL_Reg *meta, const luaL_Reg *methods) {
    luaL_newmetatable(L, name);
    luaL_setfuncs(L, meta, 0);
    if (methods) {
        lua_newtable(L);
        luaL_setfuncs(L, methods, 0);
        lua_setfield(L, -2, "__index");
    }
    lua_pop(L, 1);
}

void *dlL_checkbox(lua_State *L, int idx, const char *mt, const char *closed) {
    void **box = luaL_checkudata(L, idx, mt);
    if (!*box) luaL_error(L, "%s", closed);
    return *box;
}

void dlL_register_in(lua_State *L, const char *name, const luaL_Reg *functions) {
    lua_getfield(L, LUA_REGISTRYINDEX, DL_MODULE_KEY);
    if (lua_getfield(L, -1, name) != LUA_TTABLE) {
        lua_pop(L, 1);
        lua_newtable(L);
        lua_pushvalue(L, -1);
        lua_setfield(L, -3, name);
    }
    luaL_setfuncs(L, functions, 0);
    lua_pop(L, 2);
}

void dlL_register_nn(lua_State *L, const luaL_Reg *nn, const luaL_Reg *F) {
    if (nn) dlL_register_in(L, "_nn", nn);
    if (F) dlL_register_in(L, "_F", F);
}

/* --- properties and indexing ---------------------------------------------- */

static void push_shape(lua_State *L, const dl_tensor *t) {
    lua_createtable(L, t->ndim, 0);
    for (int i = 0; i < t->ndim; i++) {
        lua_pushinteger(L, t->shape[i]);
        lua_rawseti(L, -2, i + 1);
    }
}

static int t_index(lua_State *L) {
    dl_tensor *t = dlL_checktensor(L, 1);
    if (lua_isinteger(L, 2)) {
        if (t->ndim == 0) return luaL_error(L, "cannot index a 0-dimensional tensor");
        int64_t i = dlL_checkindex(L, 2);
        return dlL_pushtensor(L, dl_select(t, 0, i));
    }
    if (lua_type(L, 2) != LUA_TSTRING)
        return luaL_error(L, "tensor index must be an integer or a method name, got %s",
                          luaL_typename(L, 2));
    const char *k = lua_tostring(L, 2);
    lua_getmetatable(L, 1);
    lua_getfield(L, -1, "methods");
    if (lua_getfield(L, -1, k) != LUA_TNIL) return 1;
    lua_pop(L, 3);
    if (strcmp(k, "shape") == 0) {
        push_shape(L, t);
    } else if (strcmp(k, "dtype") == 0) {
        dlL_pushdtype(L, t->dtype);
    } else if (strcmp(k, "device") == 0) {
        char b[32];
        lua_pushstring(L, dl_device_name(dl_tensor_device(t), b, sizeof b));
    } else if (strcmp(k, "ndim") == 0) {
        lua_pushinteger(L, t->ndim);
    } else if (strcmp(k, "requires_grad") == 0) {
        lua_pushboolean(L, t->requires_grad);
    } else if (strcmp(k, "grad") == 0) {
        dlL_pushopttensor(L, dl_tensor_retain(t->grad));
    } else if (strcmp(k, "data") == 0) {
        dlL_pushtensor(L, dl_detach(t));
    } else if (strcmp(k, "is_leaf") == 0) {
        lua_pushboolean(L, t->grad_fn == NULL);
    } else if (strcmp(k, "grad_fn") == 0) {
        if (t->grad_fn)
            lua_pushstring(L, t->grad_fn->name);
        else
            lua_pushnil(L);
    } else {
        lua_pushnil(L);
    }
    return 1;
}

/* t.grad = tensor|nil, t.requires_grad = bool, t.data = tensor */
static int set_property(lua_State *L, dl_tensor *t, const char *k) {
    if (strcmp(k, "data") == 0) {
        dl_tensor *src = dlL_totensor(L, 3);
        if (!src) return luaL_error(L, "data must be a tensor, got %s", luaL_typename(L, 3));
        return dlL_done(L, dl_set_data(t, src));
    }
    if (strcmp(k, "grad") == 0) {
        dl_tensor *g = lua_isnil(L, 3) ? NULL : dlL_totensor(L, 3);
        if (!g && !lua_isnil(L, 3))
            return luaL_error(L, "grad must be a tensor or nil, got %s", luaL_typename(L, 3));
        if (g && (!dl_shape_equal(g, t) || g->dtype != t->dtype)) {
            char b1[128], b2[128];
            dl_error("grad: assigned gradient has shape %s and dtype %s, the tensor has shape %s "
                     "and dtype %s",
                     dl_shape_str(g->ndim, g->shape, b1, sizeof b1), dl_dtype_name(g->dtype),
                     dl_shape_str(t->ndim, t->shape, b2, sizeof b2), dl_dtype_name(t->dtype));
            return dlL_fail(L);
        }
        dl_tensor_release(t->grad);
        t->grad = dl_tensor_retain(g);
        return 0;
    }
    if (strcmp(k, "requires_grad") == 0) {
        lua_getfield(L, 1, "requires_grad_");
        lua_pushvalue(L, 1);
        lua_pushboolean(L, lua_toboolean(L, 3));
        lua_call(L, 2, 0);
        return 0;
    }
    return luaL_error(L, "cannot set field '%s' of a tensor (settable: grad, requires_grad, data)",
                      k);
}

static int t_newindex(lua_State *L) {
    dl_tensor *t = dlL_checktensor(L, 1);
    if (lua_type(L, 2) == LUA_TSTRING) return set_property(L, t, lua_tostring(L, 2));
    if (!lua_isinteger(L, 2))
        return luaL_error(L, "tensor assignment needs an integer index, got %s",
                          luaL_typename(L, 2));
    if (t->ndim == 0) return luaL_error(L, "cannot index a 0-dimensional tensor");
    int64_t i = dlL_checkindex(L, 2);
    dl_tensor *src = dlL_checktensorish(L, 3, t);
    int rc = dl_select_assign_(t, i, src);
    dl_tensor_release(src);
    return dlL_done(L, rc);
}

static int t_len(lua_State *L) {
    dl_tensor *t = dlL_checktensor(L, 1);
    if (t->ndim == 0) return luaL_error(L, "len() of a 0-dimensional tensor");
    lua_pushinteger(L, t->shape[0]);
    return 1;
}

/* --- view methods ---------------------------------------------------------- */

static int t_view(lua_State *L) {
    dl_tensor *t = dlL_checktensor(L, 1);
    int64_t shape[DL_MAX_DIMS];
    int n = dlL_checkshape(L, 2, shape, NULL);
    return dlL_pushtensor(L, dl_view(t, n, shape));
}

static int t_reshape(lua_State *L) {
    dl_tensor *t = dlL_checktensor(L, 1);
    int64_t shape[DL_MAX_DIMS];
    int n = dlL_checkshape(L, 2, shape, NULL);
    return dlL_pushtensor(L, dl_reshape(t, n, shape));
}

static int t_transpose(lua_State *L) {
    dl_tensor *t = dlL_checktensor(L, 1);
    int d0 = dlL_checkdim(L, 2), d1 = dlL_checkdim(L, 3);
    return dlL_pushtensor(L, dl_transpose(t, d0, d1));
}

static int t_t(lua_State *L) {
    dl_tensor *t = dlL_checktensor(L, 1);
    if (t->ndim > 2)
        return luaL_error(L,
                          "t: expects a tensor with at most 2 dimensions, got %d (use "
                          "transpose)",
                          t->ndim);
    if (t->ndim < 2) return dlL_pushtensor(L, dl_tensor_retain(t));
    return dlL_pushtensor(L, dl_transpose(t, 0, 1));
}

static int t_permute(lua_State *L) {
    dl_tensor *t = dlL_checktensor(L, 1);
    int64_t dims64[DL_MAX_DIMS];
    int n = dlL_checkshape(L, 2, dims64, NULL);
    if (n != t->ndim)
        return luaL_error(L, "permute: %d dimensions given for a %d-dimensional tensor", n,
                          t->ndim);
    int dims[DL_MAX_DIMS];
    for (int i = 0; i < n; i++) dims[i] = dlL_dimvalue(L, dims64[i], 2 + i);
    return dlL_pushtensor(L, dl_permute(t, dims));
}

static int t_squeeze(lua_State *L) {
    dl_tensor *t = dlL_checktensor(L, 1);
    if (lua_isnoneornil(L, 2)) return dlL_pushtensor(L, dl_squeeze_all(t));
    return dlL_pushtensor(L, dl_squeeze(t, dlL_checkdim(L, 2)));
}

static int t_unsqueeze(lua_State *L) {
    dl_tensor *t = dlL_checktensor(L, 1);
    return dlL_pushtensor(L, dl_unsqueeze(t, dlL_checkdim(L, 2)));
}

static int t_flatten(lua_State *L) {
    dl_tensor *t = dlL_checktensor(L, 1);
    int s = lua_isnoneornil(L, 2) ? 0 : dlL_checkdim(L, 2);
    int e = lua_isnoneornil(L, 3) ? -1 : dlL_checkdim(L, 3);
    return dlL_pushtensor(L, dl_flatten(t, s, e));
}

static int t_narrow(lua_State *L) {
    dl_tensor *t = dlL_checktensor(L, 1);
    int d = dlL_checkdim(L, 2);
    int64_t start = dlL_checkindex(L, 3);
    lua_Integer len = luaL_checkinteger(L, 4);
    return dlL_pushtensor(L, dl_narrow(t, d, start, len));
}

static int t_select(lua_State *L) {
    dl_tensor *t = dlL_checktensor(L, 1);
    int d = dlL_checkdim(L, 2);
    int64_t i = dlL_checkindex(L, 3);
    return dlL_pushtensor(L, dl_select(t, d, i));
}

static int t_expand(lua_State *L) {
    dl_tensor *t = dlL_checktensor(L, 1);
    int64_t shape[DL_MAX_DIMS];
    int n = dlL_checkshape(L, 2, shape, NULL);
    return dlL_pushtensor(L, dl_expand(t, n, shape));
}

static int t_expand_as(lua_State *L) {
    dl_tensor *t = dlL_checktensor(L, 1), *o = dlL_checktensor(L, 2);
    return dlL_pushtensor(L, dl_expand(t, o->ndim, o->shape));
}

static int t_view_as(lua_State *L) {
    dl_tensor *t = dlL_checktensor(L, 1), *o = dlL_checktensor(L, 2);
    return dlL_pushtensor(L, dl_view(t, o->ndim, o->shape));
}

/* The memory_format asked for at idx (a string, or {memory_format=}):
 * true for channels_last, false for contiguous_format (the default). */
static bool want_channels_last(lua_State *L, int idx, const char *op) {
    if (lua_isnoneornil(L, idx)) return false;
    if (lua_istable(L, idx)) {
        static const char *const opts[] = {"memory_format", NULL};
        dlL_checkoptions(L, idx, op, opts);
        lua_getfield(L, idx, "memory_format");
    } else {
        lua_pushvalue(L, idx);
    }
    const char *s = lua_tostring(L, -1);
    bool cl = s && strcmp(s, "channels_last") == 0;
    if (!cl && !lua_isnil(L, -1) && (!s || strcmp(s, "contiguous_format") != 0))
        luaL_error(L,
                   "%s: memory_format must be \"channels_last\" or \"contiguous_format\", got %s",
                   op, s ? s : luaL_typename(L, -1));
    lua_pop(L, 1);
    return cl;
}

/* t:contiguous([{memory_format="channels_last"}]) */
static int t_contiguous(lua_State *L) {
    dl_tensor *t = dlL_checktensor(L, 1);
    if (want_channels_last(L, 2, "contiguous"))
        return dlL_pushtensor(L, dl_contiguous_channels_last(t));
    return dlL_pushtensor(L, dl_contiguous(t));
}

static int t_clone(lua_State *L) {
    return dlL_pushtensor(L, dl_clone(dlL_checktensor(L, 1)));
}

static int t_detach(lua_State *L) {
    dl_tensor *t = dlL_checktensor(L, 1);
    return dlL_pushtensor(L, dl_detach(t));
}

static int t_is_contiguous(lua_State *L) {
    dl_tensor *t = dlL_checktensor(L, 1);
    if (want_channels_last(L, 2, "is_contiguous"))
        lua_pushboolean(L, dl_is_channels_last(t));
    else
        lua_pushboolean(L, dl_tensor_is_contiguous(t));
    return 1;
}

/* --- conversion and inspection ---------------------------------------------- */

static int convert_to(lua_State *L, dl_dtype dt) {
    return dlL_pushtensor(L, dl_to_dtype(dlL_checktensor(L, 1), dt));
}
static int t_float(lua_State *L) {
    return convert_to(L, DL_DTYPE_F32);
}
static int t_double(lua_State *L) {
    return convert_to(L, DL_DTYPE_F64);
}
static int t_half(lua_State *L) {
    return convert_to(L, DL_DTYPE_F16);
}
static int t_bfloat16(lua_State *L) {
    return convert_to(L, DL_DTYPE_BF16);
}
static int t_long(lua_State *L) {
    return convert_to(L, DL_DTYPE_I64);
}
static int t_int(lua_State *L) {
    return convert_to(L, DL_DTYPE_I32);
}
static int t_byte(lua_State *L) {
    return convert_to(L, DL_DTYPE_U8);
}
static int t_bool(lua_State *L) {
    return convert_to(L, DL_DTYPE_BOOL);
}
/* Pushes one element as a Lua value of the natural type. */
static void push_element(lua_State *L, const void *p, dl_dtype dt) {
    if (dt == DL_DTYPE_BOOL)
        lua_pushboolean(L, *(const uint8_t *)p != 0);
    else if (dl_dtype_is_floating(dt))
        lua_pushnumber(L, dl_load_f64(p, dt));
    else
        lua_pushinteger(L, dl_load_i64(p, dt));
}

static int t_item(lua_State *L) {
    dl_tensor *t = dlL_checktensor(L, 1);
    double v;
    if (dl_tensor_item(t, &v)) return dlL_fail(L);
    dl_tensor *c = dl_to_device(t, DL_CPU);
    if (!c) return dlL_fail(L);
    push_element(L, dl_tensor_data_ptr(c), c->dtype);
    dl_tensor_release(c);
    return 1;
}

static void push_list(lua_State *L, const dl_tensor *t, int dim, int64_t off) {
    size_t isz = dl_dtype_size(t->dtype);
    if (dim == t->ndim) {
        push_element(L, (const char *)t->storage->data + off * (int64_t)isz, t->dtype);
        return;
    }
    lua_createtable(L, (int)t->shape[dim], 0);
    for (int64_t i = 0; i < t->shape[dim]; i++) {
        push_list(L, t, dim + 1, off + i * t->strides[dim]);
        lua_rawseti(L, -2, i + 1);
    }
}

static int t_tolist(lua_State *L) {
    dl_tensor *t = dlL_checktensor(L, 1);
    dl_tensor *c = dl_to_device(t, DL_CPU);
    if (!c) return dlL_fail(L);
    luaL_checkstack(L, c->ndim + 4, "tolist");
    push_list(L, c, 0, c->offset);
    dl_tensor_release(c);
    return 1;
}

static int t_numel(lua_State *L) {
    lua_pushinteger(L, dl_tensor_numel(dlL_checktensor(L, 1)));
    return 1;
}

static int t_dim(lua_State *L) {
    lua_pushinteger(L, dlL_checktensor(L, 1)->ndim);
    return 1;
}

static int t_size(lua_State *L) {
    dl_tensor *t = dlL_checktensor(L, 1);
    if (lua_isnoneornil(L, 2)) {
        push_shape(L, t);
        return 1;
    }
    int d = dl_wrap_dim("size", dlL_checkdim(L, 2), t->ndim);
    if (d < 0) return dlL_fail(L);
    lua_pushinteger(L, t->ndim ? t->shape[d] : 1);
    return 1;
}

static int t_stride(lua_State *L) {
    dl_tensor *t = dlL_checktensor(L, 1);
    if (lua_isnoneornil(L, 2)) {
        lua_createtable(L, t->ndim, 0);
        for (int i = 0; i < t->ndim; i++) {
            lua_pushinteger(L, t->strides[i]);
            lua_rawseti(L, -2, i + 1);
        }
        return 1;
    }
    int d = dl_wrap_dim("stride", dlL_checkdim(L, 2), t->ndim);
    if (d < 0) return dlL_fail(L);
    lua_pushinteger(L, t->ndim ? t->strides[d] : 1);
    return 1;
}

static int t_type(lua_State *L) {
    dl_tensor *t = dlL_checktensor(L, 1);
    if (lua_isnoneornil(L, 2)) {
        lua_pushstring(L, dl_dtype_name(t->dtype));
        return 1;
    }
    return convert_to(L, dlL_checkdtype(L, 2));
}

static int t_copy_(lua_State *L) {
    dl_tensor *t = dlL_checktensor(L, 1);
    dl_tensor *src = dlL_checktensorish(L, 2, t);
    int rc = dl_copy_(t, src);
    dl_tensor_release(src);
    return dlL_pushself(L, rc);
}

static int t_fill_(lua_State *L) {
    dl_tensor *t = dlL_checktensor(L, 1);
    if (lua_isboolean(L, 2)) {
        if (dl_fill_(t, lua_toboolean(L, 2))) return dlL_fail(L);
    } else if (lua_isinteger(L, 2) && !dl_dtype_is_floating(t->dtype)) {
        dl_tensor *s = dl_tensor_empty(0, NULL, t->dtype, DL_CPU);
        if (!s) return dlL_fail(L);
        dl_store_i64(s->storage->data, t->dtype, lua_tointeger(L, 2));
        int rc = dl_copy_(t, s);
        dl_tensor_release(s);
        if (rc) return dlL_fail(L);
    } else {
        if (dl_fill_(t, luaL_checknumber(L, 2))) return dlL_fail(L);
    }
    lua_settop(L, 1);
    return 1;
}

static int t_zero_(lua_State *L) {
    return dlL_pushself(L, dl_fill_(dlL_checktensor(L, 1), 0));
}

static int t_storage_offset(lua_State *L) {
    lua_pushinteger(L, dlL_checktensor(L, 1)->offset);
    return 1;
}

static int t_element_size(lua_State *L) {
    lua_pushinteger(L, (lua_Integer)dl_tensor_itemsize(dlL_checktensor(L, 1)));
    return 1;
}

static int t_is_floating_point(lua_State *L) {
    lua_pushboolean(L, dl_dtype_is_floating(dlL_checktensor(L, 1)->dtype));
    return 1;
}

static int dl_is_tensor(lua_State *L) {
    lua_pushboolean(L, luaL_testudata(L, 1, DL_TENSOR_MT) != NULL);
    return 1;
}

void dlL_open_tensor(lua_State *L) {
    gc_pacing *pacing = lua_newuserdatauv(L, sizeof *pacing, 0);
    pacing->low = dl_mem_live_bytes();
    pacing->mark_total = dl_mem_total_allocated();
    pacing->threshold = GC_MIN_BYTES;
    lua_rawsetp(L, LUA_REGISTRYINDEX, &gc_pacing_key);
    static const luaL_Reg meta[] = {
        {"__gc", t_gc},   {"__close", t_gc}, {"__index", t_index}, {"__newindex", t_newindex},
        {"__len", t_len}, {NULL, NULL},
    };
    static const luaL_Reg methods[] = {
        {"view", t_view},
        {"reshape", t_reshape},
        {"transpose", t_transpose},
        {"t", t_t},
        {"permute", t_permute},
        {"squeeze", t_squeeze},
        {"unsqueeze", t_unsqueeze},
        {"flatten", t_flatten},
        {"narrow", t_narrow},
        {"select", t_select},
        {"expand", t_expand},
        {"expand_as", t_expand_as},
        {"view_as", t_view_as},
        {"contiguous", t_contiguous},
        {"clone", t_clone},
        {"detach", t_detach},
        {"is_contiguous", t_is_contiguous},
        {"float", t_float},
        {"double", t_double},
        {"half", t_half},
        {"bfloat16", t_bfloat16},
        {"long", t_long},
        {"int", t_int},
        {"byte", t_byte},
        {"bool", t_bool},
        {"item", t_item},
        {"tolist", t_tolist},
        {"numel", t_numel},
        {"dim", t_dim},
        {"size", t_size},
        {"stride", t_stride},
        {"type", t_type},
        {"copy_", t_copy_},
        {"fill_", t_fill_},
        {"zero_", t_zero_},
        {"storage_offset", t_storage_offset},
        {"element_size", t_element_size},
        {"is_floating_point", t_is_floating_point},
        {NULL, NULL},
    };
    static const luaL_Reg functions[] = {
        {"is_tensor", dl_is_tensor}, {"reshape", t_reshape}, {"transpose", t_transpose},
        {"permute", t_permute},      {"squeeze", t_squeeze}, {"unsqueeze", t_unsqueeze},
        {"flatten", t_flatten},      {"narrow", t_narrow},   {"select", t_select},
        {"clone", t_clone},          {"numel", t_numel},     {NULL, NULL},
    };
    luaL_newmetatable(L, DL_TENSOR_MT);
    lua_pushvalue(L, -1);
    lua_rawsetp(L, LUA_REGISTRYINDEX, &tensor_mt_key);
    luaL_setfuncs(L, meta, 0);
    lua_newtable(L);
    lua_setfield(L, -2, "methods");
    lua_pop(L, 1);
    new_spare(L);
    dlL_register(L, functions, methods);

    /* dtype objects: dl.float32 ... with tostring "dl.float32" */
    lua_createtable(L, DL_DTYPE_COUNT, 0);
    luaL_newmetatable(L, "dl.dtype");
    lua_pushliteral(L, "dl.dtype");
    lua_setfield(L, -2, "__name");
    luaL_dostring(L, "return function(d) return 'dl.' .. d.name end");
    lua_setfield(L, -2, "__tostring");
    lua_pop(L, 1);
    lua_getfield(L, LUA_REGISTRYINDEX, DL_MODULE_KEY);
    for (int i = 0; i < DL_DTYPE_COUNT; i++) {
        lua_createtable(L, 0, 2);
        lua_pushstring(L, dl_dtype_name((dl_dtype)i));
        lua_setfield(L, -2, "name");
        lua_pushboolean(L, dl_dtype_is_floating((dl_dtype)i));
        lua_setfield(L, -2, "is_floating_point");
        luaL_setmetatable(L, "dl.dtype");
        lua_pushvalue(L, -1);
        lua_setfield(L, -3, dl_dtype_name((dl_dtype)i)); /* dl.float32 = obj */
        lua_rawseti(L, -3, i + 1);
    }
    /* memory formats, as PyTorch's torch.channels_last ... (plain strings) */
    lua_pushliteral(L, "channels_last");
    lua_setfield(L, -2, "channels_last");
    lua_pushliteral(L, "contiguous_format");
    lua_setfield(L, -2, "contiguous_format");
    lua_pushliteral(L, "preserve_format");
    lua_setfield(L, -2, "preserve_format");
    lua_pop(L, 1);
    lua_setfield(L, LUA_REGISTRYINDEX, dtype_registry_key);
}
