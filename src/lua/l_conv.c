/* l_conv.c - Lua bindings of the conv family (src/ops/conv.h): the kernel
 * pair in the table dl._nn (shared with the other nn families: created when
 * absent, never replaced) and the recording entry point in dl._F (what
 * dl.nn.functional exposes):
 *
 *   dl._nn.conv2d_forward(x, w, b_or_nil, {stride=, padding=, dilation=, groups=})
 *   dl._nn.conv2d_backward(gy, x, w, {..., need={gx, gw, gb}}) -> gx, gw, gb
 *   dl._nn.conv2d_fused(x, w, b_or_nil, {..., add=t, relu=bool, reuse_add=bool})
 *       -> relu(conv + add) (inference only: an error when a gradient would be
 *       needed); reuse_add: t is not read again, the result may take its memory
 *   dl._nn.conv2d_layout([name]) -> the previous float32 conv layout (benchmarks)
 *   dl._nn.conv2d_winograd([on]) -> whether Winograd was on (benchmarks, tests)
 *   dl._nn.primitive_cache() -> oneDNN primitives cached, the cache's bound
 *   dl._nn.conv2d_plans() -> the cuDNN plan cache's statistics (a table)
 *   dl._F.conv2d(x, w, b_or_nil, opts)
 *
 * Sizes (stride, padding, dilation) are a number or an {h, w} pair.
 * Absent tensors are nil.  Options are checked (unknown keys are errors)
 * before any tensor is created. */
#include "l_bind.h"
#include "autograd/autograd.h"
#include "ops/conv.h"

/* --- conv2d ------------------------------------------------------------------------ */

static const int64_t one2[2] = {1, 1}, zero2[2] = {0, 0};

static dl_conv2d_params conv_opts(lua_State *L, int opts, const char *op, bool backward) {
    static const char *const fwd_keys[] = {"stride", "padding", "dilation", "groups", NULL};
    static const char *const bwd_keys[] = {"stride", "padding", "dilation", "groups", "need", NULL};
    dlL_checkoptions(L, opts, op, backward ? bwd_keys : fwd_keys);
    dl_conv2d_params p;
    dlL_optpair(L, opts, op, "stride", one2, p.stride);
    dlL_optpair(L, opts, op, "padding", zero2, p.padding);
    dlL_optpair(L, opts, op, "dilation", one2, p.dilation);
    p.groups = dlL_optinteger(L, opts, "groups", 1);
    return p;
}

static int l_conv2d_forward(lua_State *L) {
    dl_tensor *x = dlL_checktensor(L, 1);
    dl_tensor *w = dlL_checktensor(L, 2);
    dl_tensor *b = dlL_opttensor(L, 3);
    dl_conv2d_params p = conv_opts(L, 4, "conv2d", false);
    return dlL_pushtensor(L, dl_conv2d(x, w, b, &p));
}

static int l_conv2d_fused(lua_State *L) {
    static const char *const keys[] = {"stride", "padding", "dilation",  "groups",
                                       "add",    "relu",    "reuse_add", NULL};
    dl_tensor *x = dlL_checktensor(L, 1);
    dl_tensor *w = dlL_checktensor(L, 2);
    dl_tensor *b = dlL_opttensor(L, 3);
    dlL_checkoptions(L, 4, "conv2d_fused", keys);
    dl_conv2d_params p;
    dlL_optpair(L, 4, "conv2d_fused", "stride", one2, p.stride);
    dlL_optpair(L, 4, "conv2d_fused", "padding", zero2, p.padding);
    dlL_optpair(L, 4, "conv2d_fused", "dilation", one2, p.dilation);
    p.groups = dlL_optinteger(L, 4, "groups", 1);
    bool relu = dlL_optboolean(L, 4, "relu", 0);
    bool reuse = dlL_optboolean(L, 4, "reuse_add", 0);
    dl_tensor *add = NULL;
    if (dlL_optfield(L, 4, "add") != LUA_TNIL) add = dlL_checktensor(L, -1);
    lua_pop(L, 1); /* the tensor stays referenced by the options table */
    if (dl_grad_enabled() && (x->requires_grad || w->requires_grad || (b && b->requires_grad) ||
                              (add && add->requires_grad)))
        return luaL_error(L, "conv2d_fused: computes no gradient; call it under dl.no_grad or "
                             "with tensors that do not require grad");
    dl_tensor *y = dl_conv2d_forward_post(x, w, b, &p, add, relu, reuse);
    if (y && y == add) {
        /* the result took add's memory: hand back add's own value, so one
         * Lua value holds the tensor (a later reuse checks that) */
        dl_tensor_release(y);
        lua_getfield(L, 4, "add");
        return 1;
    }
    return dlL_pushtensor(L, y);
}

static int l_conv2d_backward(lua_State *L) {
    dl_tensor *gy = dlL_checktensor(L, 1);
    dl_tensor *x = dlL_checktensor(L, 2);
    dl_tensor *w = dlL_checktensor(L, 3);
    dl_conv2d_params p = conv_opts(L, 4, "conv2d_backward", true);
    bool need[3];
    dlL_optneed(L, 4, "conv2d_backward", need);
    dl_tensor *gx, *gw, *gb;
    if (dl_conv2d_backward(gy, x, w, &p, need, &gx, &gw, &gb)) return dlL_fail(L);
    return dlL_pushtensor3(L, gx, gw, gb);
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

/* dl._nn.conv2d_plans() -> {size=, capacity=, hits=, misses=, evictions=,
 * executed=, built=, no_plan=, timed=}: the cuDNN plan cache (cuda/conv_plan.cu) */
static int l_conv2d_plans(lua_State *L) {
    dl_conv_plan_stats st;
    dl_conv2d_plan_stats(&st);
    const char *names[] = {"size",     "capacity", "hits",    "misses", "evictions",
                           "executed", "built",    "no_plan", "timed"};
    const int64_t values[] = {st.size,     st.capacity, st.hits,    st.misses, st.evictions,
                              st.executed, st.built,    st.no_plan, st.timed};
    lua_createtable(L, 0, 9);
    for (int i = 0; i < 9; i++) {
        lua_pushinteger(L, (lua_Integer)values[i]);
        lua_setfield(L, -2, names[i]);
    }
    return 1;
}

void dlL_open_conv(lua_State *L) {
    static const luaL_Reg nn[] = {
        {"conv2d_forward", l_conv2d_forward},   {"conv2d_backward", l_conv2d_backward},
        {"conv2d_fused", l_conv2d_fused},       {"conv2d_layout", l_conv2d_layout},
        {"conv2d_winograd", l_conv2d_winograd}, {"primitive_cache", l_primitive_cache},
        {"conv2d_plans", l_conv2d_plans},       {NULL, NULL}};
    static const luaL_Reg F[] = {{"conv2d", l_conv2d_forward}, {NULL, NULL}};
    dlL_register_nn(L, nn, F);
}
