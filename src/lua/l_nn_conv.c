/* l_nn_conv.c - test bindings of the convolution, batch-norm and pooling
 * kernels (src/ops/nn_conv.h), in the table dl._nn (shared with other
 * families: created when absent, never replaced).  These are the
 * forward/backward pairs autograd is built on (the forwards record a node
 * when an input requires grad); dl._F, below, is what dl.nn.functional
 * exposes:
 *
 *   dl._nn.conv2d_forward(x, w, b_or_nil, {stride=, padding=, dilation=, groups=})
 *   dl._nn.conv2d_backward(gy, x, w, {..., need={gx, gw, gb}}) -> gx, gw, gb
 *   dl._nn.conv2d_fused(x, w, b_or_nil, {..., add=t, relu=bool}) -> relu(conv + add)
 *       (inference only: an error when a gradient would be needed)
 *   dl._nn.batch_norm_forward(x, w, b, rm, rv, {training=, momentum=, eps=,
 *                             cumulative=, num_batches_tracked=})
 *       -> y, save_mean, save_invstd (training) | y (evaluation)
 *   dl._nn.batch_norm_backward(gy, x, w, rm, rv, save_mean, save_invstd,
 *                              {training=, eps=, need=}) -> gx, gw, gb
 *   dl._nn.max_pool2d_forward(x, kernel_size, {stride=, padding=, dilation=,
 *                             ceil_mode=}) -> y, indices
 *   dl._nn.max_pool2d_backward(gy, x, indices, kernel_size, {same options}) -> gx
 *   dl._nn.avg_pool2d_forward(x, kernel_size, {stride=, padding=, ceil_mode=,
 *                             count_include_pad=, divisor_override=}) -> y
 *   dl._nn.avg_pool2d_backward(gy, x, kernel_size, {same options}) -> gx
 *   dl._nn.adaptive_avg_pool2d_forward(x, output_size) -> y
 *   dl._nn.adaptive_avg_pool2d_backward(gy, x) -> gx
 *   dl._nn.adaptive_max_pool2d_forward(x, output_size) -> y, indices
 *   dl._nn.adaptive_max_pool2d_backward(gy, x, indices) -> gx
 *
 *   dl._nn.conv2d_layout([name]) -> the previous float32 conv layout (benchmarks)
 *   dl._nn.conv2d_winograd([on]) -> whether Winograd was on (benchmarks, tests)
 *   dl._nn.primitive_cache() -> oneDNN primitives cached, the cache's bound
 *
 * Sizes (kernel_size, stride, padding, ..., output_size) are a number or an
 * {h, w} pair; the pooling stride defaults to the kernel size.
 * Pooling indices are an opaque int64 tensor holding 0-BASED flat positions
 * within each (H,W) plane (PyTorch's values): they are internal, only ever
 * fed back to the matching backward, so they are not converted to 1-based.
 * Absent tensors (no bias, no running stats) are nil.  Options are checked
 * (unknown keys are errors) before any tensor is created. */
#include "lbind.h"
#include "autograd/autograd.h"
#include "ops/batchnorm.h"
#include "ops/conv.h"
#include "ops/pool.h"

/* An optional tensor argument: nil -> NULL. */
static dl_tensor *opttensor(lua_State *L, int idx) {
    return lua_isnoneornil(L, idx) ? NULL : dlL_checktensor(L, idx);
}

/* One integer from the value at the top of the stack (popped). */
static int64_t pop_integer(lua_State *L, const char *op, const char *key) {
    int isint = 0;
    lua_Integer v = lua_tointegerx(L, -1, &isint);
    if (!isint)
        luaL_error(L, "%s: %s must be an integer or a pair of integers, got %s", op, key,
                   luaL_typename(L, -1));
    lua_pop(L, 1);
    return (int64_t)v;
}

/* opts[key]: a number n -> {n, n}; a table {h, w}; absent -> def. */
static void opt_pair(lua_State *L, int opts, const char *op, const char *key, const int64_t def[2],
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

/* A number or {h, w} at a plain argument position. */
static void arg_pair(lua_State *L, int idx, const char *op, const char *what, int64_t out[2]) {
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

/* opts.need = {bool, bool, bool} (default all true). */
static void opt_need(lua_State *L, int opts, const char *op, bool need[3]) {
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

/* Pushes up to three results (nil for NULL); takes ownership. */
static int push3(lua_State *L, dl_tensor *a, dl_tensor *b, dl_tensor *c) {
    dl_tensor *t[3] = {a, b, c};
    for (int i = 0; i < 3; i++) {
        if (t[i])
            dlL_pushtensor(L, t[i]);
        else
            lua_pushnil(L);
    }
    return 3;
}

/* --- conv2d ------------------------------------------------------------------------ */

static const int64_t one2[2] = {1, 1}, zero2[2] = {0, 0};

static dl_conv2d_params conv_opts(lua_State *L, int opts, const char *op, bool backward) {
    static const char *const fwd_keys[] = {"stride", "padding", "dilation", "groups", NULL};
    static const char *const bwd_keys[] = {"stride", "padding", "dilation", "groups", "need", NULL};
    dlL_checkoptions(L, opts, op, backward ? bwd_keys : fwd_keys);
    dl_conv2d_params p;
    opt_pair(L, opts, op, "stride", one2, p.stride);
    opt_pair(L, opts, op, "padding", zero2, p.padding);
    opt_pair(L, opts, op, "dilation", one2, p.dilation);
    p.groups = dlL_optinteger(L, opts, "groups", 1);
    return p;
}

static int l_conv2d_forward(lua_State *L) {
    dl_tensor *x = dlL_checktensor(L, 1);
    dl_tensor *w = dlL_checktensor(L, 2);
    dl_tensor *b = opttensor(L, 3);
    dl_conv2d_params p = conv_opts(L, 4, "conv2d", false);
    return dlL_pushtensor(L, dl_conv2d(x, w, b, &p));
}

static int l_conv2d_fused(lua_State *L) {
    static const char *const keys[] = {"stride", "padding", "dilation", "groups",
                                       "add",    "relu",    NULL};
    dl_tensor *x = dlL_checktensor(L, 1);
    dl_tensor *w = dlL_checktensor(L, 2);
    dl_tensor *b = opttensor(L, 3);
    dlL_checkoptions(L, 4, "conv2d_fused", keys);
    dl_conv2d_params p;
    opt_pair(L, 4, "conv2d_fused", "stride", one2, p.stride);
    opt_pair(L, 4, "conv2d_fused", "padding", zero2, p.padding);
    opt_pair(L, 4, "conv2d_fused", "dilation", one2, p.dilation);
    p.groups = dlL_optinteger(L, 4, "groups", 1);
    bool relu = dlL_optboolean(L, 4, "relu", 0);
    dl_tensor *add = NULL;
    if (dlL_optfield(L, 4, "add") != LUA_TNIL) add = dlL_checktensor(L, -1);
    lua_pop(L, 1); /* the tensor stays referenced by the options table */
    if (dl_grad_enabled() && (x->requires_grad || w->requires_grad || (b && b->requires_grad) ||
                              (add && add->requires_grad)))
        return luaL_error(L, "conv2d_fused: computes no gradient; call it under dl.no_grad or "
                             "with tensors that do not require grad");
    return dlL_pushtensor(L, dl_conv2d_forward_post(x, w, b, &p, add, relu));
}

static int l_conv2d_backward(lua_State *L) {
    dl_tensor *gy = dlL_checktensor(L, 1);
    dl_tensor *x = dlL_checktensor(L, 2);
    dl_tensor *w = dlL_checktensor(L, 3);
    dl_conv2d_params p = conv_opts(L, 4, "conv2d_backward", true);
    bool need[3];
    opt_need(L, 4, "conv2d_backward", need);
    dl_tensor *gx, *gw, *gb;
    if (dl_conv2d_backward(gy, x, w, &p, need, &gx, &gw, &gb)) return dlL_fail(L);
    return push3(L, gx, gw, gb);
}

/* --- batch_norm --------------------------------------------------------------------- */

/* batch_norm_forward(x, w, b, rm, rv, {training=false, momentum=0.1, eps=1e-5,
 *                    cumulative=false, num_batches_tracked=}) */
static int l_batch_norm_forward(lua_State *L) {
    static const char *const keys[] = {
        "training", "momentum", "eps", "cumulative", "num_batches_tracked", NULL};
    const char *op = "batch_norm";
    dl_tensor *x = dlL_checktensor(L, 1);
    dl_tensor *w = opttensor(L, 2), *b = opttensor(L, 3);
    dl_tensor *rm = opttensor(L, 4), *rv = opttensor(L, 5);
    dlL_checkoptions(L, 6, op, keys);
    bool training = dlL_optboolean(L, 6, "training", 0);
    dl_batch_norm_params p = dl_batch_norm_default_params();
    p.momentum = dlL_optnumber(L, 6, "momentum", p.momentum);
    p.eps = dlL_optnumber(L, 6, "eps", p.eps);
    p.cumulative = dlL_optboolean(L, 6, "cumulative", 0);
    p.num_batches_tracked = dlL_optinteger(L, 6, "num_batches_tracked", 0);
    if (!training) return dlL_pushtensor(L, dl_batch_norm_forward_eval(x, w, b, rm, rv, p.eps));
    dl_tensor *y, *mean, *invstd;
    if (dl_batch_norm_forward_train(x, w, b, rm, rv, &p, &y, &mean, &invstd)) return dlL_fail(L);
    return push3(L, y, mean, invstd);
}

/* batch_norm_backward(gy, x, w, rm, rv, save_mean, save_invstd,
 *                     {training=false, eps=1e-5, need=}) -> gx, gw, gb */
static int l_batch_norm_backward(lua_State *L) {
    static const char *const keys[] = {"training", "eps", "need", NULL};
    const char *op = "batch_norm_backward";
    dl_tensor *gy = dlL_checktensor(L, 1);
    dl_tensor *x = dlL_checktensor(L, 2);
    dl_tensor *w = opttensor(L, 3), *rm = opttensor(L, 4), *rv = opttensor(L, 5);
    dl_tensor *sm = opttensor(L, 6), *si = opttensor(L, 7);
    dlL_checkoptions(L, 8, op, keys);
    bool training = dlL_optboolean(L, 8, "training", 0);
    double eps = dlL_optnumber(L, 8, "eps", 1e-5);
    bool need[3];
    opt_need(L, 8, op, need);
    dl_tensor *gx, *gw, *gb;
    if (dl_batch_norm_backward(gy, x, w, rm, rv, sm, si, training, eps, need, &gx, &gw, &gb))
        return dlL_fail(L);
    return push3(L, gx, gw, gb);
}

/* --- pooling ------------------------------------------------------------------------ */

/* Pooling options at opts after the kernel size at kidx. */
static dl_pool2d_params pool_opts(lua_State *L, int kidx, int opts, const char *op, bool avg) {
    static const char *const max_keys[] = {"stride", "padding", "dilation", "ceil_mode", NULL};
    static const char *const avg_keys[] = {
        "stride", "padding", "ceil_mode", "count_include_pad", "divisor_override", NULL};
    if (lua_isnoneornil(L, kidx)) luaL_error(L, "%s: kernel_size expected", op);
    int64_t k[2];
    arg_pair(L, kidx, op, "kernel_size", k);
    dlL_checkoptions(L, opts, op, avg ? avg_keys : max_keys);
    dl_pool2d_params p = dl_pool2d_default_params(k[0], k[1]);
    opt_pair(L, opts, op, "stride", k, p.stride);
    opt_pair(L, opts, op, "padding", zero2, p.padding);
    if (!avg) opt_pair(L, opts, op, "dilation", one2, p.dilation);
    p.ceil_mode = dlL_optboolean(L, opts, "ceil_mode", 0);
    if (avg) {
        p.count_include_pad = dlL_optboolean(L, opts, "count_include_pad", 1);
        p.divisor_override = dlL_optinteger(L, opts, "divisor_override", 0);
        if (dlL_optfield(L, opts, "divisor_override") != LUA_TNIL && p.divisor_override == 0)
            luaL_error(L, "%s: divisor_override must be non-zero", op);
        lua_pop(L, 1);
    }
    return p;
}

/* max_pool2d_forward(x, kernel_size, {stride=, padding=, dilation=, ceil_mode=})
 * -> y, indices (0-based, opaque: see the header comment) */
static int l_max_pool2d_forward(lua_State *L) {
    dl_tensor *x = dlL_checktensor(L, 1);
    dl_pool2d_params p = pool_opts(L, 2, 3, "max_pool2d", false);
    dl_tensor *y, *ind;
    if (dl_max_pool2d_forward(x, &p, &y, &ind)) return dlL_fail(L);
    dlL_pushtensor(L, y);
    dlL_pushtensor(L, ind);
    return 2;
}

/* max_pool2d_backward(gy, x, indices, kernel_size, {same options}) -> gx */
static int l_max_pool2d_backward(lua_State *L) {
    dl_tensor *gy = dlL_checktensor(L, 1);
    dl_tensor *x = dlL_checktensor(L, 2);
    dl_tensor *ind = dlL_checktensor(L, 3);
    dl_pool2d_params p = pool_opts(L, 4, 5, "max_pool2d_backward", false);
    return dlL_pushtensor(L, dl_max_pool2d_backward(gy, x, ind, &p));
}

/* avg_pool2d_forward(x, kernel_size, {stride=, padding=, ceil_mode=,
 *                    count_include_pad=true, divisor_override=}) -> y */
static int l_avg_pool2d_forward(lua_State *L) {
    dl_tensor *x = dlL_checktensor(L, 1);
    dl_pool2d_params p = pool_opts(L, 2, 3, "avg_pool2d", true);
    return dlL_pushtensor(L, dl_avg_pool2d(x, &p));
}

/* avg_pool2d_backward(gy, x, kernel_size, {same options}) -> gx */
static int l_avg_pool2d_backward(lua_State *L) {
    dl_tensor *gy = dlL_checktensor(L, 1);
    dl_tensor *x = dlL_checktensor(L, 2);
    dl_pool2d_params p = pool_opts(L, 3, 4, "avg_pool2d_backward", true);
    return dlL_pushtensor(L, dl_avg_pool2d_backward(gy, x, &p));
}

/* adaptive_avg_pool2d_forward(x, output_size) -> y */
static int l_adaptive_avg_pool2d_forward(lua_State *L) {
    dl_tensor *x = dlL_checktensor(L, 1);
    int64_t o[2];
    luaL_checkany(L, 2);
    arg_pair(L, 2, "adaptive_avg_pool2d", "output_size", o);
    return dlL_pushtensor(L, dl_adaptive_avg_pool2d(x, o[0], o[1]));
}

/* adaptive_avg_pool2d_backward(gy, x) -> gx */
static int l_adaptive_avg_pool2d_backward(lua_State *L) {
    dl_tensor *gy = dlL_checktensor(L, 1);
    dl_tensor *x = dlL_checktensor(L, 2);
    return dlL_pushtensor(L, dl_adaptive_avg_pool2d_backward(gy, x));
}

/* adaptive_max_pool2d_forward(x, output_size) -> y, indices (0-based, opaque) */
static int l_adaptive_max_pool2d_forward(lua_State *L) {
    dl_tensor *x = dlL_checktensor(L, 1);
    int64_t o[2];
    luaL_checkany(L, 2);
    arg_pair(L, 2, "adaptive_max_pool2d", "output_size", o);
    dl_tensor *y, *ind;
    if (dl_adaptive_max_pool2d_forward(x, o[0], o[1], &y, &ind)) return dlL_fail(L);
    dlL_pushtensor(L, y);
    dlL_pushtensor(L, ind);
    return 2;
}

/* adaptive_max_pool2d_backward(gy, x, indices) -> gx */
static int l_adaptive_max_pool2d_backward(lua_State *L) {
    dl_tensor *gy = dlL_checktensor(L, 1);
    dl_tensor *x = dlL_checktensor(L, 2);
    dl_tensor *ind = dlL_checktensor(L, 3);
    return dlL_pushtensor(L, dl_adaptive_max_pool2d_backward(gy, x, ind));
}

/* dl._nn.conv2d_layout(["plain" | "any" | "auto"]) -> the layout float32
 * convolutions hand to oneDNN (before the change); for benchmarks. */
static int l_conv2d_layout(lua_State *L) {
    const char *old = dl_conv2d_layout(luaL_optstring(L, 1, NULL));
    if (!old) return dlL_fail(L);
    lua_pushstring(L, old);
    return 1;
}

/* dl._nn.conv2d_winograd([on]) -> whether eligible float32 3x3 convolutions
 * ran Winograd before the change. */
static int l_conv2d_winograd(lua_State *L) {
    int on = lua_isnoneornil(L, 1) ? -1 : lua_toboolean(L, 1);
    lua_pushboolean(L, dl_conv2d_winograd(on));
    return 1;
}

/* dl._nn.primitive_cache() -> entries cached, capacity */
static int l_primitive_cache(lua_State *L) {
    lua_pushinteger(L, dl_conv2d_cache_size());
    lua_pushinteger(L, dl_conv2d_cache_capacity());
    return 2;
}

/* --- dl._F: the functional entry points (record autograd) ---------------------------- */

/* F.batch_norm(x, running_mean, running_var, weight, bias, training=false,
 *              momentum=0.1, eps=1e-5)  (PyTorch's argument order) */
static int F_batch_norm(lua_State *L) {
    dl_tensor *x = dlL_checktensor(L, 1);
    dl_tensor *rm = opttensor(L, 2), *rv = opttensor(L, 3);
    dl_tensor *w = opttensor(L, 4), *b = opttensor(L, 5);
    bool training = lua_toboolean(L, 6);
    dl_batch_norm_params p = dl_batch_norm_default_params();
    p.momentum = luaL_optnumber(L, 7, p.momentum);
    p.eps = luaL_optnumber(L, 8, p.eps);
    if (!training && (!rm || !rv))
        return luaL_error(L, "batch_norm: running_mean and running_var are required when not "
                             "training");
    return dlL_pushtensor(L, dl_batch_norm(x, w, b, rm, rv, training, &p));
}

/* F.max_pool2d(x, kernel_size, {stride=, padding=, dilation=, ceil_mode=}) */
static int F_max_pool2d(lua_State *L) {
    dl_tensor *x = dlL_checktensor(L, 1);
    dl_pool2d_params p = pool_opts(L, 2, 3, "max_pool2d", false);
    return dlL_pushtensor(L, dl_max_pool2d(x, &p, NULL));
}

static int F_adaptive_max_pool2d(lua_State *L) {
    dl_tensor *x = dlL_checktensor(L, 1);
    int64_t o[2];
    luaL_checkany(L, 2);
    arg_pair(L, 2, "adaptive_max_pool2d", "output_size", o);
    return dlL_pushtensor(L, dl_adaptive_max_pool2d(x, o[0], o[1], NULL));
}

void dlL_open_nn_conv(lua_State *L) {
    static const luaL_Reg fns[] = {
        {"conv2d_forward", l_conv2d_forward},
        {"conv2d_layout", l_conv2d_layout},
        {"conv2d_winograd", l_conv2d_winograd},
        {"primitive_cache", l_primitive_cache},
        {"batch_norm_forward", l_batch_norm_forward},
        {"batch_norm_backward", l_batch_norm_backward},
        {"max_pool2d_forward", l_max_pool2d_forward},
        {"max_pool2d_backward", l_max_pool2d_backward},
        {"avg_pool2d_forward", l_avg_pool2d_forward},
        {"avg_pool2d_backward", l_avg_pool2d_backward},
        {"adaptive_avg_pool2d_forward", l_adaptive_avg_pool2d_forward},
        {"adaptive_avg_pool2d_backward", l_adaptive_avg_pool2d_backward},
        {"adaptive_max_pool2d_forward", l_adaptive_max_pool2d_forward},
        {"adaptive_max_pool2d_backward", l_adaptive_max_pool2d_backward},
        {"conv2d_backward", l_conv2d_backward},
        {"conv2d_fused", l_conv2d_fused},
        {NULL, NULL},
    };
    dlL_register_in(L, "_nn", fns); /* shared with other families */
    static const luaL_Reg F[] = {
        {"conv2d", l_conv2d_forward},
        {"batch_norm", F_batch_norm},
        {"max_pool2d", F_max_pool2d},
        {"avg_pool2d", l_avg_pool2d_forward},
        {"adaptive_avg_pool2d", l_adaptive_avg_pool2d_forward},
        {"adaptive_max_pool2d", F_adaptive_max_pool2d},
        {NULL, NULL},
    };
    dlL_register_in(L, "_F", F);
}
