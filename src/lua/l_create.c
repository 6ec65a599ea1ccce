/* l_create.c - creation functions: empty zeros ones full arange linspace eye,
 * the *_like forms, and dl.tensor(nested table) with PyTorch's type
 * inference (Lua integers -> int64, any float -> float32, booleans -> bool). */
#include "l_bind.h"
#include "ops/views.h"

#include <math.h>
#include <string.h>

static int finish(lua_State *L, dl_tensor *t, const dlL_createopts *o) {
    if (t && o->requires_grad) {
        if (!dl_dtype_is_floating(t->dtype)) {
            dl_tensor_release(t);
            return luaL_error(L,
                              "requires_grad: only floating-point tensors can require "
                              "gradients (dtype %s)",
                              dl_dtype_name(o->dtype));
        }
        t->requires_grad = true;
    }
    return dlL_pushtensor(L, t);
}

/* finish for t, filled on the CPU: moved to the device asked for first */
static int finish_on_device(lua_State *L, dl_tensor *t, const dlL_createopts *o) {
    if (t && o->device.type != DL_DEVICE_CPU) {
        dl_tensor *d = dl_tensor_to_device(t, o->device);
        dl_tensor_release(t);
        t = d;
    }
    return finish(L, t, o);
}

/* empty / zeros / full(shape... [, value], opts); kind (has_value): -1
 * empty, 0 zeros, 1 full (a value follows the shape) */
static int create_filled(lua_State *L) {
    const char *op = dlL_opname(L);
    int has_value = dlL_kind(L);
    int64_t shape[DL_MAX_DIMS];
    int next, n = dlL_checkshape(L, 1, shape, &next);
    double value = 0;
    int value_idx = 0;
    if (has_value == 1) {
        value_idx = next++;
        if (!dlL_isscalar(L, value_idx))
            return luaL_argerror(L, value_idx, "fill value (number) expected");
        value =
            lua_isboolean(L, value_idx) ? lua_toboolean(L, value_idx) : lua_tonumber(L, value_idx);
    }
    dl_dtype def = DL_DTYPE_F32;
    if (has_value == 1 && lua_isinteger(L, value_idx)) def = DL_DTYPE_I64;
    if (has_value == 1 && lua_isboolean(L, value_idx)) def = DL_DTYPE_BOOL;
    dlL_createopts o = dlL_checkcreateopts(L, next, op, def, DL_CPU);
    if (!lua_isnone(L, next + 1)) return luaL_argerror(L, next + 1, "unexpected argument");
    dl_tensor *t;
    if (has_value == -1)
        t = dl_tensor_empty(n, shape, o.dtype, o.device);
    else if (value == 0)
        t = dl_tensor_zeros(n, shape, o.dtype, o.device);
    else if (has_value == 1 && lua_isinteger(L, value_idx) && !dl_dtype_is_floating(o.dtype)) {
        t = dl_tensor_empty(n, shape, o.dtype, o.device);
        dl_tensor *s = t ? dl_tensor_empty(0, NULL, o.dtype, DL_CPU) : NULL;
        if (s) {
            dl_store_i64(s->storage->data, o.dtype, lua_tointeger(L, value_idx));
            if (dl_tensor_copy_(t, s)) {
                dl_tensor_release(t);
                t = NULL;
            }
        } else {
            dl_tensor_release(t);
            t = NULL;
        }
        dl_tensor_release(s);
    } else
        t = dl_tensor_full(n, shape, value, o.dtype, o.device);
    return finish(L, t, &o);
}

static int l_ones(lua_State *L) {
    int64_t shape[DL_MAX_DIMS];
    int next, n = dlL_checkshape(L, 1, shape, &next);
    dlL_createopts o = dlL_checkcreateopts(L, next, "ones", DL_DTYPE_F32, DL_CPU);
    return finish(L, dl_tensor_full(n, shape, 1, o.dtype, o.device), &o);
}

/* x_like(t [, value], opts); kind: -1 empty, 0 zeros, 1 ones, 2 full (a
 * value follows t) */
static int create_like(lua_State *L) {
    const char *op = dlL_opname(L);
    int kind = dlL_kind(L);
    dl_tensor *t = dlL_checktensor(L, 1);
    int next = 2;
    double value = kind == 1 ? 1 : 0;
    if (kind == 2) {
        if (!dlL_isscalar(L, 2)) return luaL_argerror(L, 2, "fill value (number) expected");
        value = lua_isboolean(L, 2) ? lua_toboolean(L, 2) : lua_tonumber(L, 2);
        next = 3;
    }
    dlL_createopts o = dlL_checkcreateopts(L, next, op, t->dtype, dl_tensor_device(t));
    /* a channels-last t gives a channels-last result (PyTorch's preserve_format) */
    bool keep = dl_is_channels_last(t) && !dl_tensor_is_contiguous(t);
    dl_tensor *r = keep ? dl_tensor_empty_like_layout(t, o.dtype, o.device)
                        : dl_tensor_empty(t->ndim, t->shape, o.dtype, o.device);
    if (r && kind != -1 && dl_tensor_fill_(r, value)) {
        dl_tensor_release(r);
        r = NULL;
    }
    return finish(L, r, &o);
}

/* arange(end) | arange(start, end [, step]) [, opts]; end exclusive as in PyTorch */
static int l_arange(lua_State *L) {
    int nnum = 0;
    while (nnum < 3 && lua_type(L, nnum + 1) == LUA_TNUMBER) nnum++;
    if (nnum == 0) return luaL_argerror(L, 1, "arange: end (number) expected");
    int allint = 1;
    for (int i = 1; i <= nnum; i++) allint &= lua_isinteger(L, i);
    double start = 0, end, step = 1;
    if (nnum == 1)
        end = lua_tonumber(L, 1);
    else {
        start = lua_tonumber(L, 1);
        end = lua_tonumber(L, 2);
        if (nnum == 3) step = lua_tonumber(L, 3);
    }
    dlL_createopts o =
        dlL_checkcreateopts(L, nnum + 1, "arange", allint ? DL_DTYPE_I64 : DL_DTYPE_F32, DL_CPU);
    if (step == 0) return luaL_error(L, "arange: step must be nonzero");
    if (!isfinite(start) || !isfinite(end) || !isfinite(step))
        return luaL_error(L, "arange: start, end and step must be finite");
    if ((end - start) / step < 0)
        return luaL_error(L, "arange: upper bound and larger bound inconsistent with step sign");
    double nd = ceil((end - start) / step);
    if (nd > 1e12) return luaL_error(L, "arange: too many elements (%f)", nd);
    int64_t n = (int64_t)nd;
    dl_tensor *t = dl_tensor_empty(1, &n, o.dtype, DL_CPU);
    if (!t) return dlL_fail(L);
    size_t isz = dl_dtype_size(o.dtype);
    char *p = t->storage->data;
    if (allint && !dl_dtype_is_floating(o.dtype)) {
        lua_Integer s0 = nnum == 1 ? 0 : lua_tointeger(L, 1),
                    st = nnum == 3 ? lua_tointeger(L, 3) : 1;
        for (int64_t i = 0; i < n; i++) dl_store_i64(p + i * isz, o.dtype, s0 + i * st);
    } else {
        for (int64_t i = 0; i < n; i++)
            dl_store_f64(p + i * isz, o.dtype, start + (double)i * step);
    }
    return finish_on_device(L, t, &o);
}

/* linspace(start, end, steps [, opts]) */
static int l_linspace(lua_State *L) {
    double a = luaL_checknumber(L, 1), b = luaL_checknumber(L, 2);
    lua_Integer n = luaL_checkinteger(L, 3);
    if (n < 0) return luaL_argerror(L, 3, "linspace: number of steps must be non-negative");
    dlL_createopts o = dlL_checkcreateopts(L, 4, "linspace", DL_DTYPE_F32, DL_CPU);
    int64_t len = n;
    dl_tensor *t = dl_tensor_empty(1, &len, o.dtype, DL_CPU);
    if (!t) return dlL_fail(L);
    size_t isz = dl_dtype_size(o.dtype);
    char *p = t->storage->data;
    double step = n > 1 ? (b - a) / (double)(n - 1) : 0;
    /* PyTorch fills the first half from the start and the second from the end */
    int64_t half = n / 2;
    for (int64_t i = 0; i < n; i++) {
        double v = i < half ? a + step * (double)i : b - step * (double)(n - 1 - i);
        dl_store_f64(p + i * isz, o.dtype, v);
    }
    return finish_on_device(L, t, &o);
}

/* eye(n [, m] [, opts]) */
static int l_eye(lua_State *L) {
    lua_Integer n = luaL_checkinteger(L, 1), m = n;
    int next = 2;
    if (lua_type(L, 2) == LUA_TNUMBER) {
        m = luaL_checkinteger(L, 2);
        next = 3;
    }
    if (n < 0 || m < 0) return luaL_error(L, "eye: sizes must be non-negative");
    dlL_createopts o = dlL_checkcreateopts(L, next, "eye", DL_DTYPE_F32, DL_CPU);
    int64_t shape[2] = {n, m};
    dl_tensor *t = dl_tensor_zeros(2, shape, o.dtype, DL_CPU);
    if (!t) return dlL_fail(L);
    size_t isz = dl_dtype_size(o.dtype);
    for (int64_t i = 0; i < n && i < m; i++)
        dl_store_f64((char *)t->storage->data + (i * m + i) * isz, o.dtype, 1);
    return finish_on_device(L, t, &o);
}

/* --- dl.tensor ------------------------------------------------------------- */

typedef struct {
    int ndim;
    int64_t shape[DL_MAX_DIMS];
    int has_float, has_int, has_bool;
} nest_info;

/* First pass: shape from the first elements, then a full walk that checks
 * every table has the same length at each depth and finds the element kinds. */
static void nest_shape(lua_State *L, int idx, nest_info *ni) {
    ni->ndim = 0;
    lua_pushvalue(L, idx);
    while (lua_istable(L, -1)) {
        if (ni->ndim == DL_MAX_DIMS)
            luaL_error(L, "tensor: more than %d nesting levels", DL_MAX_DIMS);
        lua_Integer len = luaL_len(L, -1);
        ni->shape[ni->ndim++] = len;
        if (len == 0) break;
        lua_geti(L, -1, 1);
        lua_remove(L, -2);
    }
    lua_pop(L, 1);
}

static void nest_check(lua_State *L, int idx, nest_info *ni, int depth, char *path, size_t plen) {
    luaL_checkstack(L, 4, "tensor: nesting too deep");
    if (depth == ni->ndim) {
        int ty = lua_type(L, idx);
        if (ty == LUA_TNUMBER) {
            if (lua_isinteger(L, idx))
                ni->has_int = 1;
            else
                ni->has_float = 1;
        } else if (ty == LUA_TBOOLEAN) {
            ni->has_bool = 1;
        } else if (ty == LUA_TTABLE) {
            luaL_error(L,
                       "tensor: ragged nested table: element %s is a table where a number "
                       "was expected",
                       path[0] ? path : "[]");
        } else {
            luaL_error(L, "tensor: element %s is a %s, expected a number or boolean",
                       path[0] ? path : "[]", luaL_typename(L, idx));
        }
        return;
    }
    if (!lua_istable(L, idx))
        luaL_error(L,
                   "tensor: ragged nested table: element %s is a %s where a table of %I "
                   "was expected",
                   path[0] ? path : "[]", luaL_typename(L, idx), (lua_Integer)ni->shape[depth]);
    lua_Integer len = luaL_len(L, idx);
    if (len != ni->shape[depth])
        luaL_error(L, "tensor: ragged nested table: element %s has %I entries, expected %I",
                   path[0] ? path : "[]", (lua_Integer)len, (lua_Integer)ni->shape[depth]);
    size_t n = strlen(path);
    for (lua_Integer i = 1; i <= len; i++) {
        lua_geti(L, idx, i);
        snprintf(path + n, plen - n, "[%lld]", (long long)i);
        nest_check(L, lua_gettop(L), ni, depth + 1, path, plen);
        lua_pop(L, 1);
    }
    path[n] = '\0';
}

static void nest_fill(lua_State *L, int idx, const nest_info *ni, int depth, char **p,
                      dl_dtype dt) {
    if (depth == ni->ndim) {
        size_t isz = dl_dtype_size(dt);
        if (lua_isboolean(L, idx))
            dl_store_i64(*p, dt, lua_toboolean(L, idx));
        else if (lua_isinteger(L, idx) && !dl_dtype_is_floating(dt))
            dl_store_i64(*p, dt, lua_tointeger(L, idx));
        else
            dl_store_f64(*p, dt, lua_tonumber(L, idx));
        *p += isz;
        return;
    }
    for (lua_Integer i = 1; i <= ni->shape[depth]; i++) {
        lua_geti(L, idx, i);
        nest_fill(L, lua_gettop(L), ni, depth + 1, p, dt);
        lua_pop(L, 1);
    }
}

static int l_tensor(lua_State *L) {
    dl_tensor *src = dlL_totensor(L, 1);
    if (src) { /* dl.tensor(t [, opts]): a copy */
        dlL_createopts o = dlL_checkcreateopts(L, 2, "tensor", src->dtype, dl_tensor_device(src));
        dl_tensor *a = dl_tensor_to_dtype(src, o.dtype);
        dl_tensor *b = a ? (a == src ? dl_tensor_clone(a) : dl_tensor_retain(a)) : NULL;
        dl_tensor_release(a);
        dl_tensor *c = b ? dl_tensor_to_device(b, o.device) : NULL;
        dl_tensor_release(b);
        return finish(L, c, &o);
    }
    int ty = lua_type(L, 1);
    if (ty != LUA_TTABLE && ty != LUA_TNUMBER && ty != LUA_TBOOLEAN)
        return luaL_argerror(L, 1,
                             lua_pushfstring(L,
                                             "tensor: table, number or tensor expected, "
                                             "got %s",
                                             luaL_typename(L, 1)));
    nest_info ni = {0};
    nest_shape(L, 1, &ni);
    char path[256] = "";
    nest_check(L, 1, &ni, 0, path, sizeof path);
    dl_dtype def = ni.has_float  ? DL_DTYPE_F32
                   : ni.has_int  ? DL_DTYPE_I64
                   : ni.has_bool ? DL_DTYPE_BOOL
                                 : DL_DTYPE_F32;
    dlL_createopts o = dlL_checkcreateopts(L, 2, "tensor", def, DL_CPU);
    dl_tensor *t = dl_tensor_empty(ni.ndim, ni.shape, o.dtype, DL_CPU);
    if (!t) return dlL_fail(L);
    char *p = t->storage->data;
    nest_fill(L, 1, &ni, 0, &p, o.dtype);
    return finish_on_device(L, t, &o);
}

void dlL_open_create(lua_State *L) {
    static const luaL_Reg functions[] = {
        {"ones", l_ones}, {"arange", l_arange}, {"linspace", l_linspace},
        {"eye", l_eye},   {"tensor", l_tensor}, {NULL, NULL},
    };
    dlL_register(L, functions, NULL);
    static const dlL_KindReg kinds[] = {
        {"empty", create_filled, -1},   {"zeros", create_filled, 0},
        {"full", create_filled, 1},     {"empty_like", create_like, -1},
        {"zeros_like", create_like, 0}, {"ones_like", create_like, 1},
        {"full_like", create_like, 2},  {NULL, NULL, 0},
    };
    dlL_register_kinds(L, kinds, NULL);
}
