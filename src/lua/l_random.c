/* l_random.c - bindings of the random op family:
 *   dl.rand(shape..., opts)  dl.randn(shape..., opts)   floating dtypes
 *   dl.randint([low,] high, shape_table, opts)           values in [low, high)
 *   dl.randperm(n, opts)   a permutation of 1..n (int64 by default).  PyTorch
 *                          returns 0..n-1; dlua's indices are 1-based, so a
 *                          permutation is one of 1..n here, ready to index with.
 *   dl.rand_like(t, opts)  dl.randn_like  dl.randint_like(t, [low,] high, opts)
 *   dl.bernoulli(p)        0/1 samples with probabilities p (also p:bernoulli())
 *   dl.normal(mean, std, size_table, opts)   numbers: a new tensor, like randn
 *   dl.normal(mean, std)   mean and/or std tensors (the other may be a number):
 *                          the broadcast shape, on the tensors' device, each
 *                          element z * std + mean with z standard normal
 *   t:uniform_(a=0, b=1)  t:normal_(mean=0, std=1)  t:random_([low,] high)
 *   t:bernoulli_(p=0.5)   p a number or a tensor broadcast to t
 * opts are {dtype=, device=, requires_grad=}; a CUDA device fills on the
 * GPU with the CPU's values (src/ops/random.h).  All draw from the default
 * generator, which dl.manual_seed(s) (in l_dl.c) resets; there is one
 * generator for both devices. */
#include "l_bind.h"
#include "ops/elementwise.h"
#include "ops/random.h"

/* Reads {dtype=, device=, requires_grad=} at idx and checks nothing follows. */
static dlL_createopts read_opts(lua_State *L, int idx, const char *op, dl_dtype dtype,
                                dl_device device) {
    if (!lua_isnone(L, idx + 1) || (!lua_isnoneornil(L, idx) && !lua_istable(L, idx))) {
        int bad = lua_isnone(L, idx + 1) ? idx : idx + 1;
        luaL_argerror(L, bad,
                      lua_pushfstring(L,
                                      "%s: unexpected argument (%s); options go in "
                                      "a trailing table",
                                      op, luaL_typename(L, bad)));
    }
    dlL_createopts o = dlL_checkcreateopts(L, idx, op, dtype, device);
    if (o.requires_grad && !dl_dtype_is_floating(o.dtype))
        luaL_error(L, "%s: only floating-point tensors can require gradients (dtype %s)", op,
                   dl_dtype_name(o.dtype));
    return o;
}

static void need_floating(lua_State *L, const char *op, dl_dtype dt) {
    if (!dl_dtype_is_floating(dt))
        luaL_error(L, "%s: expected a floating-point dtype, got %s", op, dl_dtype_name(dt));
}

static int push_new(lua_State *L, dl_tensor *t, const dlL_createopts *o) {
    if (t && o->requires_grad) t->requires_grad = true;
    return dlL_pushtensor(L, t);
}

/* --- creation ----------------------------------------------------------- */

/* rand / randn(shape..., opts); kind: 1 for randn */
static int rand_or_randn(lua_State *L) {
    const char *op = dlL_opname(L);
    int64_t shape[DL_MAX_DIMS];
    int next, n = dlL_checkshape(L, 1, shape, &next);
    dlL_createopts o = read_opts(L, next, op, DL_DTYPE_F32, DL_CPU);
    need_floating(L, op, o.dtype);
    dl_tensor *t = dlL_kind(L) == 1 ? dl_randn(n, shape, o.dtype, o.device, NULL)
                                    : dl_rand(n, shape, o.dtype, o.device, NULL);
    return push_new(L, t, &o);
}

/* [low,] high at idx: returns the index after them. */
static int read_range(lua_State *L, int idx, const char *op, lua_Integer *low, lua_Integer *high) {
    if (lua_type(L, idx) != LUA_TNUMBER)
        luaL_argerror(
            L, idx,
            lua_pushfstring(L, "%s: high (integer) expected, got %s", op, luaL_typename(L, idx)));
    if (lua_type(L, idx + 1) == LUA_TNUMBER) {
        *low = luaL_checkinteger(L, idx);
        *high = luaL_checkinteger(L, idx + 1);
        return idx + 2;
    }
    *low = 0;
    *high = luaL_checkinteger(L, idx);
    return idx + 1;
}

static int l_randint(lua_State *L) {
    lua_Integer low, high;
    int sidx = read_range(L, 1, "randint", &low, &high);
    if (!lua_istable(L, sidx))
        return luaL_argerror(L, sidx,
                             lua_pushfstring(L,
                                             "randint: size table (such as {2, 3}) "
                                             "expected, got %s",
                                             luaL_typename(L, sidx)));
    int64_t shape[DL_MAX_DIMS];
    int n = dlL_checkshape(L, sidx, shape, NULL);
    dlL_createopts o = read_opts(L, sidx + 1, "randint", DL_DTYPE_I64, DL_CPU);
    return push_new(L, dl_randint(low, high, n, shape, o.dtype, o.device, NULL), &o);
}

static int l_randperm(lua_State *L) {
    lua_Integer n = luaL_checkinteger(L, 1);
    dlL_createopts o = read_opts(L, 2, "randperm", DL_DTYPE_I64, DL_CPU);
    return push_new(L, dl_randperm(n, 1, o.dtype, o.device, NULL), &o);
}

/* rand_like / randn_like(t, opts), randint_like(t, [low,] high, opts); kind:
 * 0, 1, 2 in that order */
static int like(lua_State *L) {
    const char *op = dlL_opname(L);
    int kind = dlL_kind(L);
    dl_tensor *t = dlL_checktensor(L, 1);
    lua_Integer low = 0, high = 0;
    int next = kind == 2 ? read_range(L, 2, op, &low, &high) : 2;
    dlL_createopts o = read_opts(L, next, op, t->dtype, dl_tensor_device(t));
    if (kind == 2)
        return push_new(L, dl_randint(low, high, t->ndim, t->shape, o.dtype, o.device, NULL), &o);
    need_floating(L, op, o.dtype);
    dl_tensor *r = kind == 1 ? dl_randn(t->ndim, t->shape, o.dtype, o.device, NULL)
                             : dl_rand(t->ndim, t->shape, o.dtype, o.device, NULL);
    return push_new(L, r, &o);
}

static int l_bernoulli(lua_State *L) {
    dl_tensor *p = dlL_checktensor(L, 1);
    if (!lua_isnone(L, 2)) return luaL_argerror(L, 2, "bernoulli: unexpected argument");
    return dlL_pushtensor(L, dl_bernoulli(p, NULL));
}

/* normal(mean, std, size [, opts]) or normal(mean, std) with tensors. */
static int l_normal(lua_State *L) {
    const char *op = "normal";
    dl_tensor *mt = dlL_totensor(L, 1), *st = dlL_totensor(L, 2);
    if (!mt && !st) {
        double mean = luaL_checknumber(L, 1), sd = luaL_checknumber(L, 2);
        if (!lua_istable(L, 3))
            return luaL_argerror(L, 3,
                                 lua_pushfstring(L,
                                                 "normal: size table (such as {2, 3}) expected "
                                                 "when mean and std are numbers, got %s",
                                                 luaL_typename(L, 3)));
        int64_t shape[DL_MAX_DIMS];
        int n = dlL_checkshape(L, 3, shape, NULL);
        dlL_createopts o = read_opts(L, 4, op, DL_DTYPE_F32, DL_CPU);
        need_floating(L, op, o.dtype);
        dl_tensor *t = dl_tensor_empty(n, shape, o.dtype, o.device);
        if (!t) return dlL_fail(L);
        if (dl_normal_(t, mean, sd, NULL)) {
            dl_tensor_release(t);
            return dlL_fail(L);
        }
        return push_new(L, t, &o);
    }
    if (!lua_isnone(L, 3))
        return luaL_argerror(L, 3, "normal: no size or options when mean or std is a tensor");
    need_floating(L, op, (mt ? mt : st)->dtype);
    dl_tensor *m = dlL_checktensorish(L, 1, st);
    dl_tensor *s = dlL_checktensorish(L, 2, mt);
    /* the broadcast of mean and std gives the shape, dtype and device */
    dl_tensor *shape = dl_add(m, s, 1);
    dl_tensor *z =
        shape ? dl_randn(shape->ndim, shape->shape, shape->dtype, dl_tensor_device(shape), NULL)
              : NULL;
    dl_tensor *zs = z ? dl_mul(z, s) : NULL;
    dl_tensor *r = zs ? dl_add(zs, m, 1) : NULL;
    dl_tensor_release(zs);
    dl_tensor_release(z);
    dl_tensor_release(shape);
    dl_tensor_release(s);
    dl_tensor_release(m);
    return dlL_pushtensor(L, r);
}

/* --- in place ------------------------------------------------------------- */

static int t_uniform_(lua_State *L) {
    dl_tensor *t = dlL_checktensor(L, 1);
    double a = luaL_optnumber(L, 2, 0), b = luaL_optnumber(L, 3, 1);
    return dlL_pushself(L, dl_uniform_(t, a, b, NULL));
}

static int t_normal_(lua_State *L) {
    dl_tensor *t = dlL_checktensor(L, 1);
    double mean = luaL_optnumber(L, 2, 0), std = luaL_optnumber(L, 3, 1);
    return dlL_pushself(L, dl_normal_(t, mean, std, NULL));
}

static int t_random_(lua_State *L) {
    dl_tensor *t = dlL_checktensor(L, 1);
    lua_Integer low, high;
    read_range(L, 2, "random_", &low, &high);
    return dlL_pushself(L, dl_random_(t, low, high, NULL));
}

static int t_bernoulli_(lua_State *L) {
    dl_tensor *t = dlL_checktensor(L, 1);
    dl_tensor *p = dlL_totensor(L, 2);
    if (p) return dlL_pushself(L, dl_bernoulli_tensor_(t, p, NULL));
    if (!lua_isnoneornil(L, 2) && lua_type(L, 2) != LUA_TNUMBER)
        return luaL_argerror(L, 2,
                             lua_pushfstring(L,
                                             "bernoulli_: probability (number or "
                                             "tensor) expected, got %s",
                                             luaL_typename(L, 2)));
    return dlL_pushself(L, dl_bernoulli_(t, luaL_optnumber(L, 2, 0.5), NULL));
}

void dlL_open_random(lua_State *L) {
    static const luaL_Reg functions[] = {
        {"randint", l_randint},
        {"randperm", l_randperm},
        {"bernoulli", l_bernoulli},
        {"normal", l_normal},
        {NULL, NULL},
    };
    static const luaL_Reg methods[] = {
        {"uniform_", t_uniform_},     {"normal_", t_normal_},     {"random_", t_random_},
        {"bernoulli_", t_bernoulli_}, {"bernoulli", l_bernoulli}, {NULL, NULL},
    };
    dlL_register(L, functions, methods);
    static const dlL_KindReg kinds[] = {
        {"rand", rand_or_randn, 0}, {"randn", rand_or_randn, 1}, {"rand_like", like, 0},
        {"randn_like", like, 1},    {"randint_like", like, 2},   {NULL, NULL, 0},
    };
    dlL_register_kinds(L, kinds, NULL);
}
