/* l_reduce.c - Lua bindings of the reduction family (src/ops/reduce.h).
 * Each function is both a method and a module function: t:sum(2) and
 * dl.sum(t, 2).  Dims are 1-based (negatives from the end); returned indices
 * are 1-based.  Call forms, PyTorch's argument order, options last:
 *   sum mean prod     (t [, dim|{dims}] [, keepdim] [, {dim=, keepdim=, dtype=}])
 *   amax amin all any logsumexp
 *                     (t [, dim|{dims}] [, keepdim] [, {dim=, keepdim=}])
 *   var std           (t [, dim|{dims}] [, unbiased [, keepdim]]
 *                        [, {dim=, keepdim=, unbiased=, correction=}]), or (t, unbiased)
 *   norm              (t [, p] [, dim|{dims}] [, keepdim] [, {p=, dim=, keepdim=}]);
 *                     p: a number (math.huge for inf) or "fro"; default 2
 *   max min median    (t) -> 0-dim; (t, dim [, keepdim] [, {keepdim=}]) -> values, indices;
 *                     max/min (t, other) -> dl.maximum/dl.minimum when available
 *   argmax argmin     (t [, dim] [, keepdim] [, {dim=, keepdim=}])
 *   cumsum cumprod    (t, dim [, dtype | {dtype=}])
 * Every argument is checked before any tensor is made; a surplus argument
 * or an unknown option is an error. */
#include "l_bind.h"
#include "ops/reduce.h"

#include <math.h>
#include <string.h>

/* --- argument parsing ------------------------------------------------------------------- */

typedef struct {
    int ndims;
    int dims[DL_MAX_DIMS];
    bool has_dim;
    int nb; /* positional booleans after the dims */
    bool b[2];
    int opts; /* stack index of the options table, 0 when none */
} rargs;

/* A Lua dim value -> C (0-based, negatives kept); the C op checks the range. */
static int dim_value(lua_State *L, const char *op, lua_Integer d) {
    if (d == 0)
        luaL_error(L, "%s: dimension 0 is invalid (dimensions are 1-based; -1 is the last)", op);
    if (d > 64 || d < -64) luaL_error(L, "%s: dimension %I out of range", op, d);
    return d > 0 ? (int)(d - 1) : (int)d;
}

/* A table whose entries are all at integer keys 1..n (n > 0): a list of dims. */
static bool is_dimlist(lua_State *L, int idx) {
    return lua_istable(L, idx) && lua_rawlen(L, idx) > 0;
}

/* Reads a dim or a list of dims at idx. */
static void read_dims(lua_State *L, int idx, const char *op, bool list_ok, rargs *a) {
    idx = lua_absindex(L, idx);
    a->has_dim = true;
    if (lua_isinteger(L, idx)) {
        a->ndims = 1;
        a->dims[0] = dim_value(L, op, lua_tointeger(L, idx));
        return;
    }
    if (lua_istable(L, idx) && !list_ok)
        luaL_error(L, "%s: expects a single dimension, got a table", op);
    if (!lua_istable(L, idx))
        luaL_error(L, "%s: dim must be an integer%s, got %s", op,
                   list_ok ? " or a table of integers" : "",
                   lua_isnumber(L, idx) ? "a non-integer number" : luaL_typename(L, idx));
    lua_Integer n = (lua_Integer)lua_rawlen(L, idx);
    if (n > DL_MAX_DIMS) luaL_error(L, "%s: at most %d dims, got %I", op, DL_MAX_DIMS, n);
    lua_pushnil(L);
    while (lua_next(L, idx)) {
        lua_pop(L, 1);
        if (!lua_isinteger(L, -1) || lua_tointeger(L, -1) < 1 || lua_tointeger(L, -1) > n)
            luaL_error(L,
                       "%s: a table of dims holds integers only (options go in a table of "
                       "their own)",
                       op);
    }
    for (lua_Integer i = 1; i <= n; i++) {
        lua_rawgeti(L, idx, i);
        if (!lua_isinteger(L, -1))
            luaL_error(L, "%s: dims must be integers, got %s", op, luaL_typename(L, -1));
        a->dims[i - 1] = dim_value(L, op, lua_tointeger(L, -1));
        lua_pop(L, 1);
    }
    a->ndims = (int)n;
}

/* Parses (dims?, booleans (at most maxb)?, options?) from stack index start.
 * At `start`: nil or an absent dim, an integer, a list of dims, or (when
 * it is not a list) the options table. */
static void parse_args(lua_State *L, const char *op, int start, bool list_ok, int maxb,
                       const char *const *keys, rargs *a) {
    int top = lua_gettop(L), i = start;
    memset(a, 0, sizeof *a);
    if (i <= top) {
        int ty = lua_type(L, i);
        if (ty == LUA_TNIL)
            i++;
        else if (ty == LUA_TNUMBER || (ty == LUA_TTABLE && is_dimlist(L, i)))
            read_dims(L, i++, op, list_ok, a);
        else if (ty != LUA_TTABLE && ty != LUA_TBOOLEAN)
            luaL_error(L, "%s: dim must be an integer%s, got %s", op,
                       list_ok ? " or a table of integers" : "", luaL_typename(L, i));
    }
    while (i <= top && lua_type(L, i) == LUA_TBOOLEAN && a->nb < maxb)
        a->b[a->nb++] = lua_toboolean(L, i++);
    if (i <= top && lua_istable(L, i) && !is_dimlist(L, i))
        a->opts = i++;
    else if (i <= top && lua_isnil(L, i))
        i++;
    if (i <= top) luaL_error(L, "%s: unexpected argument %d (%s)", op, i, luaL_typename(L, i));
    if (!a->opts) return;
    dlL_checkoptions(L, a->opts, op, keys);
    if (dlL_optfield(L, a->opts, "dim") != LUA_TNIL) {
        if (a->has_dim) luaL_error(L, "%s: dim given both as an argument and as an option", op);
        read_dims(L, -1, op, list_ok, a);
    }
    lua_pop(L, 1);
}

/* keepdim: the option, else positional boolean number bpos, else false. */
static bool get_keepdim(lua_State *L, const rargs *a, int bpos) {
    bool k = a->nb > bpos && a->b[bpos];
    return a->opts ? dlL_optboolean(L, a->opts, "keepdim", k) : k;
}

static dl_dtype get_dtype(lua_State *L, const rargs *a) {
    if (!a->opts || dlL_optfield(L, a->opts, "dtype") == LUA_TNIL) {
        if (a->opts) lua_pop(L, 1);
        return DL_REDUCE_DTYPE_NONE;
    }
    dl_dtype t = dlL_checkdtype(L, lua_absindex(L, -1));
    lua_pop(L, 1);
    return t;
}

/* Makes a fresh int64 index tensor 1-based, in place. */
static int push_indices(lua_State *L, dl_tensor *idx) {
    if (idx && !dl_tensor_is_contiguous(idx)) {
        dl_tensor *c = dl_tensor_contiguous(idx);
        dl_tensor_release(idx);
        idx = c;
    }
    /* a device tensor is shifted on a host copy, then copied back */
    dl_tensor *h = idx && dl_tensor_device(idx).type != DL_DEVICE_CPU
                       ? dl_tensor_to_device(idx, DL_CPU)
                       : dl_tensor_retain(idx);
    if (idx && !h) {
        dl_tensor_release(idx);
        idx = NULL;
    }
    if (h) {
        int64_t *d = dl_tensor_data_ptr(h), n = dl_tensor_numel(h);
        for (int64_t i = 0; i < n; i++) d[i] += 1;
        if (h != idx && dl_tensor_copy_(idx, h)) {
            dl_tensor_release(idx);
            idx = NULL;
        }
    }
    dl_tensor_release(h);
    return dlL_pushtensor(L, idx);
}

static const char *const keys_dtype[] = {"dim", "keepdim", "dtype", NULL};
static const char *const keys_plain[] = {"dim", "keepdim", NULL};

/* --- sum, mean, prod -------------------------------------------------------------------------- */

typedef dl_tensor *(*sum_like_fn)(dl_tensor *, int, const int *, bool, dl_dtype);

static int sum_like(lua_State *L, const char *op, sum_like_fn fn) {
    dl_tensor *x = dlL_checktensor(L, 1);
    rargs a;
    parse_args(L, op, 2, true, 1, keys_dtype, &a);
    bool keepdim = get_keepdim(L, &a, 0);
    dl_dtype dt = get_dtype(L, &a);
    return dlL_pushtensor(L, fn(x, a.ndims, a.dims, keepdim, dt));
}

static int l_sum(lua_State *L) {
    return sum_like(L, "sum", dl_sum);
}
static int l_mean(lua_State *L) {
    return sum_like(L, "mean", dl_mean);
}
static int l_prod(lua_State *L) {
    return sum_like(L, "prod", dl_prod);
}

/* --- amax, amin, all, any, logsumexp -----------------------------------------------------------
 */

typedef dl_tensor *(*plain_fn)(dl_tensor *, int, const int *, bool);

static int plain(lua_State *L, const char *op, plain_fn fn) {
    dl_tensor *x = dlL_checktensor(L, 1);
    rargs a;
    parse_args(L, op, 2, true, 1, keys_plain, &a);
    bool keepdim = get_keepdim(L, &a, 0);
    return dlL_pushtensor(L, fn(x, a.ndims, a.dims, keepdim));
}

static int l_amax(lua_State *L) {
    return plain(L, "amax", dl_amax);
}
static int l_amin(lua_State *L) {
    return plain(L, "amin", dl_amin);
}
static int l_all(lua_State *L) {
    return plain(L, "all", dl_all);
}
static int l_any(lua_State *L) {
    return plain(L, "any", dl_any);
}
static int l_logsumexp(lua_State *L) {
    return plain(L, "logsumexp", dl_logsumexp);
}

/* --- var, std ------------------------------------------------------------------------------------
 */

typedef dl_tensor *(*var_fn)(dl_tensor *, int, const int *, double, bool);

static int var_like(lua_State *L, const char *op, var_fn fn) {
    static const char *const keys[] = {"dim", "keepdim", "unbiased", "correction", NULL};
    dl_tensor *x = dlL_checktensor(L, 1);
    rargs a;
    parse_args(L, op, 2, true, 2, keys, &a);
    bool unbiased = a.nb > 0 ? a.b[0] : true;
    double correction = unbiased ? 1 : 0;
    if (a.opts) {
        int has_unb = dlL_optfield(L, a.opts, "unbiased") != LUA_TNIL;
        int has_corr = dlL_optfield(L, a.opts, "correction") != LUA_TNIL;
        lua_pop(L, 2);
        if (has_corr && (has_unb || a.nb > 0))
            luaL_error(L, "%s: give either unbiased or correction, not both", op);
        if (has_unb) correction = dlL_optboolean(L, a.opts, "unbiased", 1) ? 1 : 0;
        if (has_corr) {
            correction = dlL_optnumber(L, a.opts, "correction", 1);
            if (!(correction >= 0)) luaL_error(L, "%s: correction must be >= 0", op);
        }
    }
    bool keepdim = get_keepdim(L, &a, 1);
    return dlL_pushtensor(L, fn(x, a.ndims, a.dims, correction, keepdim));
}

static int l_var(lua_State *L) {
    return var_like(L, "var", dl_var);
}
static int l_std(lua_State *L) {
    return var_like(L, "std", dl_std);
}

/* --- norm
 * ------------------------------------------------------------------------------------------ */

/* p at idx: a number or "fro"/"inf"/"-inf". */
static double norm_p(lua_State *L, int idx) {
    if (lua_type(L, idx) == LUA_TNUMBER) {
        double p = lua_tonumber(L, idx);
        if (p != p) luaL_error(L, "norm: p must be a number, got nan");
        return p;
    }
    if (lua_type(L, idx) == LUA_TSTRING) {
        const char *s = lua_tostring(L, idx);
        if (strcmp(s, "fro") == 0) return 2;
        if (strcmp(s, "inf") == 0) return INFINITY;
        if (strcmp(s, "-inf") == 0) return -INFINITY;
        if (strcmp(s, "nuc") == 0) luaL_error(L, "norm: the nuclear norm ('nuc') is not supported");
        luaL_error(L, "norm: p must be a number or 'fro', got '%s'", s);
    }
    luaL_error(L, "norm: p must be a number or 'fro', got %s", luaL_typename(L, idx));
    return 0;
}

static int l_norm(lua_State *L) {
    static const char *const keys[] = {"p", "dim", "keepdim", NULL};
    dl_tensor *x = dlL_checktensor(L, 1);
    double p = 2;
    bool has_p = false;
    int start = 2;
    int ty = lua_type(L, 2);
    if (ty == LUA_TNUMBER || ty == LUA_TSTRING) {
        p = norm_p(L, 2);
        has_p = true;
        start = 3;
    } else if (ty == LUA_TNIL) {
        start = 3;
    } else if (ty != LUA_TTABLE && ty != LUA_TNONE) {
        luaL_error(L, "norm: p must be a number or 'fro', got %s", luaL_typename(L, 2));
    }
    rargs a;
    parse_args(L, "norm", start, true, 1, keys, &a);
    if (a.opts && dlL_optfield(L, a.opts, "p") != LUA_TNIL) {
        if (has_p) luaL_error(L, "norm: p given both as an argument and as an option");
        p = norm_p(L, lua_absindex(L, -1));
    }
    if (a.opts) lua_pop(L, 1);
    bool keepdim = get_keepdim(L, &a, 0);
    return dlL_pushtensor(L, dl_norm(x, p, a.ndims, a.dims, keepdim));
}

/* --- max, min, median, argmax, argmin
 * ------------------------------------------------------------- */

typedef int (*dim_pair_fn)(dl_tensor *, int, bool, dl_tensor **, dl_tensor **);

/* Calls dl.<name>(t, other) for the elementwise form of max/min. */
static int call_elementwise(lua_State *L, const char *op, const char *name) {
    if (lua_gettop(L) > 2) luaL_error(L, "%s: the elementwise form takes two tensors only", op);
    lua_getfield(L, LUA_REGISTRYINDEX, DL_MODULE_KEY);
    if (lua_getfield(L, -1, name) != LUA_TFUNCTION)
        luaL_error(L, "%s: the elementwise form needs dl.%s, which is not available", op, name);
    lua_pushvalue(L, 1);
    lua_pushvalue(L, 2);
    lua_call(L, 2, 1);
    return 1;
}

static int pair_op(lua_State *L, const char *op, dl_tensor *(*all)(dl_tensor *), dim_pair_fn fn,
                   const char *elementwise) {
    dl_tensor *x = dlL_checktensor(L, 1);
    if (elementwise && dlL_totensor(L, 2)) return call_elementwise(L, op, elementwise);
    rargs a;
    parse_args(L, op, 2, false, 1, keys_plain, &a);
    bool keepdim = get_keepdim(L, &a, 0);
    if (!a.has_dim) {
        if (keepdim) luaL_error(L, "%s: keepdim needs a dim", op);
        return dlL_pushtensor(L, all(x));
    }
    dl_tensor *vals, *idx;
    if (fn(x, a.dims[0], keepdim, &vals, &idx)) return dlL_fail(L);
    dlL_pushtensor(L, vals);
    push_indices(L, idx);
    return 2;
}

static int l_max(lua_State *L) {
    return pair_op(L, "max", dl_max_all, dl_max_dim, "maximum");
}
static int l_min(lua_State *L) {
    return pair_op(L, "min", dl_min_all, dl_min_dim, "minimum");
}
static int l_median(lua_State *L) {
    return pair_op(L, "median", dl_median_all, dl_median_dim, NULL);
}

static int arg_op(lua_State *L, const char *op, dl_tensor *(*fn)(dl_tensor *, const int *, bool)) {
    dl_tensor *x = dlL_checktensor(L, 1);
    rargs a;
    parse_args(L, op, 2, false, 1, keys_plain, &a);
    bool keepdim = get_keepdim(L, &a, 0);
    return push_indices(L, fn(x, a.has_dim ? a.dims : NULL, keepdim));
}

static int l_argmax(lua_State *L) {
    return arg_op(L, "argmax", dl_argmax);
}
static int l_argmin(lua_State *L) {
    return arg_op(L, "argmin", dl_argmin);
}

/* --- cumsum, cumprod ----------------------------------------------------------------------------
 */

static int scan_op(lua_State *L, const char *op, dl_tensor *(*fn)(dl_tensor *, int, dl_dtype)) {
    static const char *const keys[] = {"dim", "dtype", NULL};
    dl_tensor *x = dlL_checktensor(L, 1);
    dl_dtype dt = DL_REDUCE_DTYPE_NONE;
    rargs a;
    /* a dtype may come as the third argument */
    if (lua_gettop(L) >= 3 && !lua_isnil(L, 3) &&
        (lua_type(L, 3) == LUA_TSTRING ||
         (lua_istable(L, 3) && luaL_getmetafield(L, 3, "__name") != LUA_TNIL &&
          (lua_pop(L, 1), true)))) {
        dt = dlL_checkdtype(L, 3);
        if (lua_gettop(L) > 3) luaL_error(L, "%s: unexpected argument 4", op);
        lua_settop(L, 2);
    }
    parse_args(L, op, 2, false, 0, keys, &a);
    if (!a.has_dim) luaL_error(L, "%s: dim is required (e.g. t:%s(1))", op, op);
    if (a.opts) {
        dl_dtype o = get_dtype(L, &a);
        if (o != DL_REDUCE_DTYPE_NONE) dt = o;
    }
    return dlL_pushtensor(L, fn(x, a.dims[0], dt));
}

static int l_cumsum(lua_State *L) {
    return scan_op(L, "cumsum", dl_cumsum);
}
static int l_cumprod(lua_State *L) {
    return scan_op(L, "cumprod", dl_cumprod);
}

void dlL_open_reduce(lua_State *L) {
    static const luaL_Reg fns[] = {
        {"sum", l_sum},       {"mean", l_mean},           {"prod", l_prod},
        {"amax", l_amax},     {"amin", l_amin},           {"all", l_all},
        {"any", l_any},       {"logsumexp", l_logsumexp}, {"var", l_var},
        {"std", l_std},       {"norm", l_norm},           {"max", l_max},
        {"min", l_min},       {"median", l_median},       {"argmax", l_argmax},
        {"argmin", l_argmin}, {"cumsum", l_cumsum},       {"cumprod", l_cumprod},
        {NULL, NULL},
    };
    dlL_register(L, fns, fns);
}
