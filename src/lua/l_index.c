/* l_index.c - Lua bindings of the joining and indexing family (ops/index.h):
 * dl.cat/stack, split/chunk/unbind, index_select, gather, scatter(_add),
 * index_fill/index_copy, sort/argsort/topk, one_hot, masked_select, nonzero,
 * flip, roll, tril/triu.
 *
 * Invariants: indices are 1-based in Lua and 0-based in C.  An index tensor
 * from Lua is turned into a converted int64 copy (value - 1; negatives kept
 * where the op wraps them) before the op runs, and index tensors the ops
 * return (sort, argsort, topk, nonzero) get + 1 in place; they are fresh
 * tensors nobody else holds.  All arguments are checked before any tensor is
 * made; tensors held when a C call fails are released before dlL_fail.
 * Index tensors on CUDA are converted on the device (those whose negatives
 * wrap on a host copy, moved back), so the op sees them on the data's device. */
#include "l_bind.h"
#include "ops/index.h"

#include <string.h>

/* --- helpers --------------------------------------------------------------------- */

/* The tensors of the table at idx, in a userdata-backed array (freed by the
 * collector, so a Lua error never leaks it); borrowed references kept alive
 * by the table. */
static dl_tensor **check_tensor_list(lua_State *L, int idx, const char *op, int *n) {
    if (!lua_istable(L, idx))
        luaL_error(L, "%s: expected a table of tensors, got %s", op, luaL_typename(L, idx));
    lua_Integer len = luaL_len(L, idx);
    if (len == 0) luaL_error(L, "%s: expected a non-empty table of tensors", op);
    if (len > 1 << 20) luaL_error(L, "%s: too many tensors (%I)", op, len);
    dl_tensor **ts = lua_newuserdatauv(L, sizeof(dl_tensor *) * (size_t)len, 0);
    for (lua_Integer i = 1; i <= len; i++) {
        lua_geti(L, idx, i);
        ts[i - 1] = dlL_totensor(L, -1);
        if (!ts[i - 1])
            luaL_error(L, "%s: element %d of the table is a %s, expected a tensor", op, (int)i,
                       luaL_typename(L, -1));
        lua_pop(L, 1);
    }
    *n = (int)len;
    return ts; /* the userdata stays on the stack */
}

/* A Lua index tensor at idx -> a new contiguous int64 tensor of 0-based
 * indices.  Only int64 (and int32 when allow_i32) is accepted.  With
 * allow_negative, negatives are kept (C wraps them) and 0 is an error;
 * otherwise every value v becomes v - 1 and C reports what is out of range. */
static dl_tensor *check_index(lua_State *L, int idx, const char *op, int allow_i32,
                              int allow_negative) {
    dl_tensor *t = dlL_totensor(L, idx);
    if (!t) luaL_error(L, "%s: index must be a tensor (int64), got %s", op, luaL_typename(L, idx));
    if (t->dtype != DL_DTYPE_I64 && !(allow_i32 && t->dtype == DL_DTYPE_I32))
        luaL_error(L, "%s: index must be an int64 tensor%s, got %s", op,
                   allow_i32 ? " (or int32)" : "", dl_dtype_name(t->dtype));
    dl_device dev = dl_tensor_device(t);
    if (dev.type != DL_DEVICE_CPU && !allow_negative) { /* converted on the device */
        dl_tensor *c = dl_tensor_empty(t->ndim, t->shape, DL_DTYPE_I64, dev);
        if (!c || dl_tensor_copy_(c, t) || dl_index_shift_(c, -1)) {
            dl_tensor_release(c);
            dlL_fail(L);
        }
        return c;
    }
    dl_tensor *h = NULL; /* the host copy of a CUDA index whose negatives wrap */
    if (dev.type != DL_DEVICE_CPU && !(t = h = dl_tensor_to_device(t, DL_CPU))) dlL_fail(L);
    dl_tensor *c = dl_tensor_empty(t->ndim, t->shape, DL_DTYPE_I64, DL_CPU);
    if (!c) {
        dl_tensor_release(h);
        dlL_fail(L);
    }
    int64_t *p = dl_tensor_data_ptr(c), n = dl_tensor_numel(c);
    if (t->dtype == DL_DTYPE_I64 && dl_tensor_is_contiguous(t)) { /* one pass */
        const int64_t *s = dl_tensor_data_ptr(t);
        for (int64_t i = 0; i < n; i++) p[i] = s[i];
    } else if (dl_tensor_copy_(c, t)) {
        dl_tensor_release(c);
        dl_tensor_release(h);
        dlL_fail(L);
    }
    dl_tensor_release(h);
    int64_t zero_at = -1;
    if (allow_negative) {
        for (int64_t i = 0; i < n; i++) {
            if (p[i] == 0 && zero_at < 0) zero_at = i;
            p[i] -= p[i] > 0;
        }
    } else {
        for (int64_t i = 0; i < n; i++) p[i] -= p[i] != INT64_MIN;
    }
    if (zero_at >= 0) {
        dl_tensor_release(c);
        luaL_error(L, "%s: index 0 is invalid (indices are 1-based; -1 is the last)", op);
    }
    if (dev.type == DL_DEVICE_CPU) return c;
    dl_tensor *d = dl_tensor_to_device(c, dev);
    dl_tensor_release(c);
    if (!d) dlL_fail(L);
    return d;
}

/* Turns a fresh 0-based int64 result into 1-based, in place on its device
 * (NULL, t released, on error). */
static dl_tensor *one_based(dl_tensor *t) {
    if (t && dl_index_shift_(t, 1)) {
        dl_tensor_release(t);
        return NULL;
    }
    return t;
}

/* Optional dim argument (Lua 1-based) at idx; def is a C dim. */
static int opt_dim(lua_State *L, int idx, int def) {
    return lua_isnoneornil(L, idx) ? def : dlL_checkdim(L, idx);
}

/* Pushes a list returned by a splitter as a Lua array; frees the list. */
static int push_list(lua_State *L, int n, dl_tensor **list) {
    if (n < 0) return dlL_fail(L);
    lua_createtable(L, n, 0);
    for (int i = 0; i < n; i++) {
        dlL_pushtensor(L, list[i]);
        list[i] = NULL;
        lua_rawseti(L, -2, i + 1);
    }
    dl_tensors_free(n, list);
    return 1;
}

/* Value for scatter/index_fill: a tensor, number or boolean (as self's type). */
static void check_value(lua_State *L, int idx, const char *op) {
    if (!dlL_totensor(L, idx) && !dlL_isscalar(L, idx))
        luaL_error(L, "%s: src/value must be a tensor or a number, got %s", op,
                   luaL_typename(L, idx));
}

/* A number/boolean at idx as a 0-dim tensor of t's dtype (an integer keeps
 * its exact value); a tensor is retained.  NULL (error set) when out of
 * memory; never raises, so callers can release what they hold. */
static dl_tensor *value_tensor(lua_State *L, int idx, const dl_tensor *t) {
    dl_tensor *v = dlL_totensor(L, idx);
    if (v) return dl_tensor_retain(v);
    dl_tensor *s = dl_tensor_empty(0, NULL, t->dtype, DL_CPU);
    if (!s) return NULL;
    if (lua_isboolean(L, idx))
        dl_store_i64(s->storage->data, t->dtype, lua_toboolean(L, idx));
    else if (lua_isinteger(L, idx))
        dl_store_i64(s->storage->data, t->dtype, lua_tointeger(L, idx));
    else
        dl_store_f64(s->storage->data, t->dtype, lua_tonumber(L, idx));
    return s;
}

/* --- joining and splitting ------------------------------------------------------------- */

/* dl.cat(tensors, dim = 1) */
static int l_cat(lua_State *L) {
    int n, dim = opt_dim(L, 2, 0);
    lua_settop(L, 2);
    dl_tensor **ts = check_tensor_list(L, 1, "cat", &n);
    return dlL_pushtensor(L, dl_cat(n, ts, dim));
}

/* dl.stack(tensors, dim = 1) */
static int l_stack(lua_State *L) {
    int n, dim = opt_dim(L, 2, 0);
    lua_settop(L, 2);
    dl_tensor **ts = check_tensor_list(L, 1, "stack", &n);
    return dlL_pushtensor(L, dl_stack(n, ts, dim));
}

/* t:split(split_size | {sizes...}, dim = 1) -> {views} */
static int l_split(lua_State *L) {
    dl_tensor *t = dlL_checktensor(L, 1);
    int dim = opt_dim(L, 3, 0);
    dl_tensor **list = NULL;
    if (lua_isinteger(L, 2)) {
        int n = dl_split(t, lua_tointeger(L, 2), dim, &list);
        return push_list(L, n, list);
    }
    if (!lua_istable(L, 2))
        return luaL_error(L, "split: split size (integer) or table of sizes expected, got %s",
                          luaL_typename(L, 2));
    lua_Integer len = luaL_len(L, 2);
    if (len > 1 << 20) return luaL_error(L, "split: too many sizes");
    int64_t *sizes = lua_newuserdatauv(L, sizeof(int64_t) * (size_t)(len ? len : 1), 0);
    for (lua_Integer i = 1; i <= len; i++) {
        if (lua_geti(L, 2, i) != LUA_TNUMBER || !lua_isinteger(L, -1))
            return luaL_error(L, "split: size %d is not an integer", (int)i);
        sizes[i - 1] = lua_tointeger(L, -1);
        lua_pop(L, 1);
    }
    int n = dl_split_with_sizes(t, (int)len, sizes, dim, &list);
    return push_list(L, n, list);
}

/* t:chunk(chunks, dim = 1) -> {views} */
static int l_chunk(lua_State *L) {
    dl_tensor *t = dlL_checktensor(L, 1);
    lua_Integer chunks = luaL_checkinteger(L, 2);
    int dim = opt_dim(L, 3, 0);
    dl_tensor **list = NULL;
    int n = dl_chunk(t, chunks, dim, &list);
    return push_list(L, n, list);
}

/* t:unbind(dim = 1) -> {views} */
static int l_unbind(lua_State *L) {
    dl_tensor *t = dlL_checktensor(L, 1);
    int dim = opt_dim(L, 2, 0);
    dl_tensor **list = NULL;
    int n = dl_unbind(t, dim, &list);
    return push_list(L, n, list);
}

/* --- gathering and scattering ------------------------------------------------------------ */

/* t:index_select(dim, index) (kind 1; int32 indices too) / t:gather(dim, index) */
static int l_index_read(lua_State *L) {
    int select = dlL_kind(L);
    dl_tensor *t = dlL_checktensor(L, 1);
    int dim = dlL_checkdim(L, 2);
    dl_tensor *idx = check_index(L, 3, dlL_opname(L), select, 0);
    dl_tensor *r = select ? dl_index_select(t, dim, idx) : dl_gather(t, dim, idx);
    dl_tensor_release(idx);
    return dlL_pushtensor(L, r);
}

/* The arguments scatter, index_fill and index_copy share: self at 1, dim at
 * 2, the index at 3 (negatives allowed when allow_negative) and a src tensor
 * (src_only) or src/value at 4.  Returns the index (a new reference: every
 * other argument has been checked by then). */
static dl_tensor *check_write_args(lua_State *L, const char *op, int src_only, int allow_negative,
                                   dl_tensor **t, int *dim) {
    *t = dlL_checktensor(L, 1);
    *dim = dlL_checkdim(L, 2);
    if (src_only && !dlL_totensor(L, 4))
        luaL_error(L, "%s: src must be a tensor, got %s", op, luaL_typename(L, 4));
    check_value(L, 4, op);
    return check_index(L, 3, op, 0, allow_negative);
}

/* The kinds of the index writes (flags): in place; src must be a tensor
 * (scatter_add, index_copy). */
enum { WRITE_INPLACE = 1, WRITE_SRC = 2 };

/* t:scatter(dim, index, src | value) (scatter_add: WRITE_SRC), in place or not */
static int l_scatter(lua_State *L) {
    const char *op = dlL_opname(L);
    int inplace = dlL_kind(L) & WRITE_INPLACE, add = dlL_kind(L) & WRITE_SRC;
    dl_tensor *t;
    int dim;
    dl_tensor *idx = check_write_args(L, op, add, 0, &t, &dim);
    dl_tensor *src = dlL_totensor(L, 4);
    dl_tensor *val = src ? NULL : value_tensor(L, 4, t);
    if (!src && !val) {
        dl_tensor_release(idx);
        return dlL_fail(L);
    }
    int rc = 0;
    dl_tensor *r = NULL;
    if (inplace) {
        rc = add   ? dl_scatter_add_(t, dim, idx, src)
             : src ? dl_scatter_(t, dim, idx, src)
                   : dl_scatter_value_(t, dim, idx, val);
    } else {
        r = add   ? dl_scatter_add(t, dim, idx, src)
            : src ? dl_scatter(t, dim, idx, src)
                  : dl_scatter_value(t, dim, idx, val);
    }
    dl_tensor_release(val);
    dl_tensor_release(idx);
    return inplace ? dlL_pushself(L, rc) : dlL_pushtensor(L, r);
}

/* t:index_fill(dim, index, value) / t:index_copy(dim, index, src) (WRITE_SRC),
 * in place or not */
static int l_index_write(lua_State *L) {
    const char *op = dlL_opname(L);
    int inplace = dlL_kind(L) & WRITE_INPLACE, copy = dlL_kind(L) & WRITE_SRC;
    dl_tensor *t;
    int dim;
    dl_tensor *idx = check_write_args(L, op, copy, !copy, &t, &dim);
    dl_tensor *val = value_tensor(L, 4, t);
    if (!val) {
        dl_tensor_release(idx);
        return dlL_fail(L);
    }
    int rc = 0;
    dl_tensor *r = NULL;
    if (inplace)
        rc = copy ? dl_index_copy_(t, dim, idx, val) : dl_index_fill_(t, dim, idx, val);
    else
        r = copy ? dl_index_copy(t, dim, idx, val) : dl_index_fill(t, dim, idx, val);
    dl_tensor_release(val);
    dl_tensor_release(idx);
    return inplace ? dlL_pushself(L, rc) : dlL_pushtensor(L, r);
}

/* --- ordering ----------------------------------------------------------------------------- */

typedef struct {
    int dim;
    int flag;   /* descending (sort) / largest (topk) */
    int stable; /* sort: stable; topk: sorted */
} order_args;

/* Reads [dim] [flag] [options] from idx on: t:sort(dim, descending, {...}),
 * t:sort{dim=, descending=, stable=}, t:topk(k, dim, largest, {...}). */
static order_args read_order_args(lua_State *L, int idx, const char *op, const char *flag_key,
                                  const char *stable_key, int flag_def, int stable_def) {
    order_args a = {-1, flag_def, stable_def};
    int i = idx;
    if (lua_type(L, i) == LUA_TNUMBER)
        a.dim = dlL_checkdim(L, i++);
    else if (lua_isnil(L, i) && !lua_isnone(L, i + 1))
        i++;
    if (lua_isboolean(L, i)) a.flag = lua_toboolean(L, i++);
    if (!lua_isnoneornil(L, i)) {
        const char *keys[] = {"dim", flag_key, stable_key, NULL};
        dlL_checkoptions(L, i, op, keys);
        if (dlL_optfield(L, i, "dim") != LUA_TNIL) {
            if (!lua_isinteger(L, -1)) luaL_error(L, "%s: option 'dim' must be an integer", op);
            a.dim = dlL_dimvalue(L, lua_tointeger(L, -1), i);
        }
        lua_pop(L, 1);
        a.flag = dlL_optboolean(L, i, flag_key, a.flag);
        a.stable = dlL_optboolean(L, i, stable_key, a.stable);
        i++;
    }
    if (!lua_isnone(L, i))
        luaL_error(L, "%s: unexpected argument %d (%s)", op, i, luaL_typename(L, i));
    return a;
}

static int push_values_indices(lua_State *L, int rc, dl_tensor *v, dl_tensor *i) {
    if (rc) return dlL_fail(L);
    dlL_pushtensor(L, v);
    dlL_pushtensor(L, one_based(i));
    return 2;
}

/* t:sort([dim] [, descending] [, {dim=, descending=, stable=}]) -> values, indices */
static int l_sort(lua_State *L) {
    dl_tensor *t = dlL_checktensor(L, 1);
    order_args a = read_order_args(L, 2, "sort", "descending", "stable", 0, 0);
    dl_tensor *v, *i;
    int rc = dl_sort(t, a.dim, a.flag, a.stable, &v, &i);
    return push_values_indices(L, rc, v, i);
}

/* t:argsort(...) like sort -> indices */
static int l_argsort(lua_State *L) {
    dl_tensor *t = dlL_checktensor(L, 1);
    order_args a = read_order_args(L, 2, "argsort", "descending", "stable", 0, 0);
    return dlL_pushtensor(L, one_based(dl_argsort(t, a.dim, a.flag, a.stable)));
}

/* t:topk(k [, dim] [, largest] [, {dim=, largest=, sorted=}]) -> values, indices */
static int l_topk(lua_State *L) {
    dl_tensor *t = dlL_checktensor(L, 1);
    if (!lua_isinteger(L, 2))
        return luaL_error(L, "topk: k must be an integer, got %s",
                          lua_isnumber(L, 2) ? "a non-integer number" : luaL_typename(L, 2));
    lua_Integer k = lua_tointeger(L, 2);
    order_args a = read_order_args(L, 3, "topk", "largest", "sorted", 1, 1);
    dl_tensor *v, *i;
    int rc = dl_topk(t, k, a.dim, a.flag, a.stable, &v, &i);
    return push_values_indices(L, rc, v, i);
}

/* --- masks, labels, rearrangement ---------------------------------------------------------- */

/* dl.one_hot(labels, num_classes = max label): labels 1..C -> columns 1..C */
static int l_one_hot(lua_State *L) {
    dl_tensor *labels = dlL_checktensor(L, 1);
    lua_Integer c = -1;
    if (!lua_isnoneornil(L, 2)) {
        if (!lua_isinteger(L, 2))
            return luaL_error(L, "one_hot: num_classes must be an integer, got %s",
                              luaL_typename(L, 2));
        c = lua_tointeger(L, 2);
        if (c < 0) return luaL_error(L, "one_hot: num_classes must be non-negative, got %I", c);
    }
    if (labels->dtype != DL_DTYPE_I64)
        return luaL_error(L, "one_hot: labels must be an int64 tensor, got %s",
                          dl_dtype_name(labels->dtype));
    dl_tensor *lab = check_index(L, 1, "one_hot", 0, 0);
    dl_tensor *r = dl_one_hot(lab, c);
    dl_tensor_release(lab);
    return dlL_pushtensor(L, r);
}

/* t:masked_select(mask) */
static int l_masked_select(lua_State *L) {
    dl_tensor *t = dlL_checktensor(L, 1), *mask = dlL_checktensor(L, 2);
    return dlL_pushtensor(L, dl_masked_select(t, mask));
}

/* t:nonzero([{as_tuple=}]) -> (n, ndim) 1-based indices, or a table of columns */
static int l_nonzero(lua_State *L) {
    dl_tensor *t = dlL_checktensor(L, 1);
    static const char *const keys[] = {"as_tuple", NULL};
    dlL_checkoptions(L, 2, "nonzero", keys);
    int as_tuple = dlL_optboolean(L, 2, "as_tuple", 0);
    dl_tensor *nz = one_based(dl_nonzero(t));
    if (!nz) return dlL_fail(L);
    if (!as_tuple) return dlL_pushtensor(L, nz);
    int cols = t->ndim ? t->ndim : 1;
    lua_createtable(L, cols, 0);
    for (int d = 0; d < cols; d++) {
        dl_tensor *c;
        if (t->ndim == 0)
            c = dl_tensor_full(1, nz->shape, 1, DL_DTYPE_I64, dl_tensor_device(nz));
        else {
            dl_tensor *s = dl_tensor_select(nz, 1, d);
            c = s ? dl_tensor_contiguous(s) : NULL;
            dl_tensor_release(s);
        }
        if (!c) {
            dl_tensor_release(nz);
            return dlL_fail(L);
        }
        dlL_pushtensor(L, c);
        lua_rawseti(L, -2, d + 1);
    }
    dl_tensor_release(nz);
    return 1;
}

/* Dims as one table or integers from idx on (1-based -> C). */
static int read_dims(lua_State *L, int idx, const char *op, int *dims) {
    int n = 0;
    if (lua_istable(L, idx)) {
        lua_Integer len = luaL_len(L, idx);
        if (len > DL_MAX_DIMS) luaL_error(L, "%s: at most %d dimensions", op, DL_MAX_DIMS);
        for (lua_Integer i = 1; i <= len; i++) {
            lua_geti(L, idx, i);
            if (!lua_isinteger(L, -1))
                luaL_error(L, "%s: dimension %d is not an integer", op, (int)i);
            dims[n++] = dlL_dimvalue(L, lua_tointeger(L, -1), idx);
            lua_pop(L, 1);
        }
        if (!lua_isnone(L, idx + 1)) luaL_error(L, "%s: unexpected argument after the dims", op);
        return n;
    }
    for (int i = idx; !lua_isnone(L, i); i++) {
        if (n == DL_MAX_DIMS) luaL_error(L, "%s: at most %d dimensions", op, DL_MAX_DIMS);
        dims[n++] = dlL_checkdim(L, i);
    }
    return n;
}

/* t:flip(dims) with dims a table or integers */
static int l_flip(lua_State *L) {
    dl_tensor *t = dlL_checktensor(L, 1);
    int dims[DL_MAX_DIMS];
    if (lua_isnone(L, 2)) return luaL_error(L, "flip: dims expected");
    int n = read_dims(L, 2, "flip", dims);
    return dlL_pushtensor(L, dl_flip(t, n, dims));
}

/* t:roll(shifts [, dims]) with shifts and dims integers or tables */
static int l_roll(lua_State *L) {
    dl_tensor *t = dlL_checktensor(L, 1);
    int64_t shifts[DL_MAX_DIMS];
    int dims[DL_MAX_DIMS], ns = 0, nd = 0;
    if (lua_isinteger(L, 2)) {
        shifts[ns++] = lua_tointeger(L, 2);
    } else if (lua_istable(L, 2)) {
        lua_Integer len = luaL_len(L, 2);
        if (len > DL_MAX_DIMS) return luaL_error(L, "roll: at most %d shifts", DL_MAX_DIMS);
        for (lua_Integer i = 1; i <= len; i++) {
            lua_geti(L, 2, i);
            if (!lua_isinteger(L, -1))
                return luaL_error(L, "roll: shift %d is not an integer", (int)i);
            shifts[ns++] = lua_tointeger(L, -1);
            lua_pop(L, 1);
        }
    } else {
        return luaL_error(L, "roll: shifts (integer or table) expected, got %s",
                          luaL_typename(L, 2));
    }
    if (!lua_isnoneornil(L, 3)) nd = read_dims(L, 3, "roll", dims);
    return dlL_pushtensor(L, dl_roll(t, ns, shifts, nd, dims));
}

static lua_Integer opt_diagonal(lua_State *L, const char *op) {
    if (lua_isnoneornil(L, 2)) return 0;
    if (!lua_isinteger(L, 2))
        luaL_error(L, "%s: diagonal must be an integer, got %s", op, luaL_typename(L, 2));
    return lua_tointeger(L, 2);
}

/* The kinds of tril/triu (flags): the upper triangle; in place. */
enum { TRI_UPPER = 1, TRI_INPLACE = 2 };

/* t:tril / triu([diagonal]), in place or not */
static int l_tri(lua_State *L) {
    int kind = dlL_kind(L);
    dl_tensor *t = dlL_checktensor(L, 1);
    lua_Integer d = opt_diagonal(L, dlL_opname(L));
    if (kind & TRI_INPLACE)
        return dlL_pushself(L, kind & TRI_UPPER ? dl_triu_(t, d) : dl_tril_(t, d));
    return dlL_pushtensor(L, kind & TRI_UPPER ? dl_triu(t, d) : dl_tril(t, d));
}

void dlL_open_index(lua_State *L) {
    static const luaL_Reg functions[] = {
        {"cat", l_cat},
        {"concat", l_cat},
        {"stack", l_stack},
        {"split", l_split},
        {"chunk", l_chunk},
        {"unbind", l_unbind},
        {"sort", l_sort},
        {"argsort", l_argsort},
        {"topk", l_topk},
        {"one_hot", l_one_hot},
        {"masked_select", l_masked_select},
        {"nonzero", l_nonzero},
        {"flip", l_flip},
        {"roll", l_roll},
        {NULL, NULL},
    };
    static const luaL_Reg methods[] = {
        {"split", l_split},     {"chunk", l_chunk},
        {"unbind", l_unbind},   {"sort", l_sort},
        {"argsort", l_argsort}, {"topk", l_topk},
        {"one_hot", l_one_hot}, {"masked_select", l_masked_select},
        {"nonzero", l_nonzero}, {"flip", l_flip},
        {"roll", l_roll},       {NULL, NULL},
    };
    dlL_register(L, functions, methods);
    static const dlL_KindReg kind_functions[] = {
        {"index_select", l_index_read, 1},
        {"gather", l_index_read, 0},
        {"scatter", l_scatter, 0},
        {"scatter_add", l_scatter, WRITE_SRC},
        {"index_fill", l_index_write, 0},
        {"index_copy", l_index_write, WRITE_SRC},
        {"tril", l_tri, 0},
        {"triu", l_tri, TRI_UPPER},
        {NULL, NULL, 0},
    };
    static const dlL_KindReg kind_methods[] = {
        {"index_select", l_index_read, 1},
        {"gather", l_index_read, 0},
        {"scatter", l_scatter, 0},
        {"scatter_", l_scatter, WRITE_INPLACE},
        {"scatter_add", l_scatter, WRITE_SRC},
        {"scatter_add_", l_scatter, WRITE_SRC | WRITE_INPLACE},
        {"index_fill", l_index_write, 0},
        {"index_fill_", l_index_write, WRITE_INPLACE},
        {"index_copy", l_index_write, WRITE_SRC},
        {"index_copy_", l_index_write, WRITE_SRC | WRITE_INPLACE},
        {"tril", l_tri, 0},
        {"triu", l_tri, TRI_UPPER},
        {"tril_", l_tri, TRI_INPLACE},
        {"triu_", l_tri, TRI_UPPER | TRI_INPLACE},
        {NULL, NULL, 0},
    };
    dlL_register_kinds(L, kind_functions, kind_methods);
}
