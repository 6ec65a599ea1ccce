/* l_pool.c - Lua bindings of the pool family (src/ops/pool.h): the kernel
 * pairs in dl._nn (shared with the other nn families) and the recording entry
 * points in dl._F:
 *
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
 *   dl._F.max_pool2d, avg_pool2d, adaptive_avg_pool2d, adaptive_max_pool2d
 *   dl._nn.max_pool2d_nhwc([on]) -> whether CUDA max pooling reads
 *       channels-last input in place in its dtype (before the call; sets it
 *       when given)
 *
 * Sizes (kernel_size, stride, padding, ..., output_size) are a number or an
 * {h, w} pair; the stride defaults to the kernel size.  Pooling indices are an
 * opaque int64 tensor holding 0-BASED flat positions within each (H,W) plane
 * (PyTorch's values): they are internal, only ever fed back to the matching
 * backward, so they are not converted to 1-based.
 * Absent tensors are nil.  Options are checked (unknown keys are errors)
 * before any tensor is created. */
#include "l_bind.h"
#include "ops/pool.h"

static const int64_t one2[2] = {1, 1}, zero2[2] = {0, 0};

/* The results of a max kind's forward (rc its status): y and the indices. */
static int push_y_ind(lua_State *L, int rc, dl_tensor *y, dl_tensor *ind) {
    if (rc) return dlL_fail(L);
    dlL_pushtensor(L, y);
    dlL_pushtensor(L, ind);
    return 2;
}

/* --- pooling ------------------------------------------------------------------------ */

/* Pooling options at opts after the kernel size at kidx. */
static dl_pool2d_params pool_opts(lua_State *L, int kidx, int opts, const char *op, bool avg) {
    static const char *const max_keys[] = {"stride", "padding", "dilation", "ceil_mode", NULL};
    static const char *const avg_keys[] = {
        "stride", "padding", "ceil_mode", "count_include_pad", "divisor_override", NULL};
    if (lua_isnoneornil(L, kidx)) luaL_error(L, "%s: kernel_size expected", op);
    int64_t k[2];
    dlL_checkpair(L, kidx, op, "kernel_size", k);
    dlL_checkoptions(L, opts, op, avg ? avg_keys : max_keys);
    dl_pool2d_params p = dl_pool2d_default_params(k[0], k[1]);
    dlL_optpair(L, opts, op, "stride", k, p.stride);
    dlL_optpair(L, opts, op, "padding", zero2, p.padding);
    if (!avg) dlL_optpair(L, opts, op, "dilation", one2, p.dilation);
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
    int rc = dl_max_pool2d_forward(x, &p, &y, &ind);
    return push_y_ind(L, rc, y, ind);
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
    dlL_checkpair(L, 2, "adaptive_avg_pool2d", "output_size", o);
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
    dlL_checkpair(L, 2, "adaptive_max_pool2d", "output_size", o);
    dl_tensor *y, *ind;
    int rc = dl_adaptive_max_pool2d_forward(x, o[0], o[1], &y, &ind);
    return push_y_ind(L, rc, y, ind);
}

/* adaptive_max_pool2d_backward(gy, x, indices) -> gx */
static int l_adaptive_max_pool2d_backward(lua_State *L) {
    dl_tensor *gy = dlL_checktensor(L, 1);
    dl_tensor *x = dlL_checktensor(L, 2);
    dl_tensor *ind = dlL_checktensor(L, 3);
    return dlL_pushtensor(L, dl_adaptive_max_pool2d_backward(gy, x, ind));
}

/* --- dl._F ----------------------------------------------------------------------- */

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
    dlL_checkpair(L, 2, "adaptive_max_pool2d", "output_size", o);
    return dlL_pushtensor(L, dl_adaptive_max_pool2d(x, o[0], o[1], NULL));
}

/* max_pool2d_nhwc([on]) -> the setting before the call */
static int l_max_pool2d_nhwc(lua_State *L) {
    if (lua_isnoneornil(L, 1)) {
        bool was = dl_pool_set_nhwc(true);
        dl_pool_set_nhwc(was);
        lua_pushboolean(L, was);
        return 1;
    }
    luaL_checktype(L, 1, LUA_TBOOLEAN);
    lua_pushboolean(L, dl_pool_set_nhwc(lua_toboolean(L, 1)));
    return 1;
}

void dlL_open_pool(lua_State *L) {
    static const luaL_Reg nn[] = {{"max_pool2d_nhwc", l_max_pool2d_nhwc},
                                  {"max_pool2d_forward", l_max_pool2d_forward},
                                  {"max_pool2d_backward", l_max_pool2d_backward},
                                  {"avg_pool2d_forward", l_avg_pool2d_forward},
                                  {"avg_pool2d_backward", l_avg_pool2d_backward},
                                  {"adaptive_avg_pool2d_forward", l_adaptive_avg_pool2d_forward},
                                  {"adaptive_avg_pool2d_backward", l_adaptive_avg_pool2d_backward},
                                  {"adaptive_max_pool2d_forward", l_adaptive_max_pool2d_forward},
                                  {"adaptive_max_pool2d_backward", l_adaptive_max_pool2d_backward},
                                  {NULL, NULL}};
    static const luaL_Reg F[] = {{"max_pool2d", F_max_pool2d},
                                 {"avg_pool2d", l_avg_pool2d_forward},
                                 {"adaptive_avg_pool2d", l_adaptive_avg_pool2d_forward},
                                 {"adaptive_max_pool2d", F_adaptive_max_pool2d},
                                 {NULL, NULL}};
    dlL_register_nn(L, nn, F);
}
