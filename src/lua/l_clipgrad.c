/* l_clipgrad.c - Lua bindings of the clipgrad family (src/ops/clipgrad.h) in
 * dl._nn, for dl.nn.utils (lua/dl/nn/init.lua):
 *
 *   dl._nn.grads_total_norm(tensors, norm_type) -> 0-dim total norm
 *   dl._nn.grads_scale_by_norm_(tensors, total_norm, max_norm)
 *   dl._nn.grads_clamp_(tensors, clip_value)
 *
 * tensors is an array of tensors; they are changed in place and nothing is
 * returned by the last two.  Every argument is checked before any tensor is
 * made. */
#include "l_bind.h"
#include "ops/clipgrad.h"

/* The tensors at 1, once the arguments 2..last have been read: nothing may
 * follow last. */
static dl_tensor **check_grads(lua_State *L, const char *op, int last, int *n) {
    dlL_nomore(L, last, op);
    return dlL_checktensors(L, 1, op, "tensors", n);
}

static int l_grads_total_norm(lua_State *L) {
    double p = luaL_checknumber(L, 2);
    int n;
    dl_tensor **ts = check_grads(L, "clip_grad_norm_", 2, &n);
    return dlL_pushtensor(L, dl_grads_total_norm(n, ts, p));
}

static int l_grads_scale_by_norm_(lua_State *L) {
    dl_tensor *total = dlL_checktensor(L, 2);
    double max_norm = luaL_checknumber(L, 3);
    int n;
    dl_tensor **ts = check_grads(L, "clip_grads_with_norm_", 3, &n);
    return dlL_done(L, dl_grads_scale_by_norm_(n, ts, total, max_norm));
}

static int l_grads_clamp_(lua_State *L) {
    double v = luaL_checknumber(L, 2);
    int n;
    dl_tensor **ts = check_grads(L, "clip_grad_value_", 2, &n);
    return dlL_done(L, dl_grads_clamp_(n, ts, v));
}

void dlL_open_clipgrad(lua_State *L) {
    static const luaL_Reg nn[] = {{"grads_total_norm", l_grads_total_norm},
                                  {"grads_scale_by_norm_", l_grads_scale_by_norm_},
                                  {"grads_clamp_", l_grads_clamp_},
                                  {NULL, NULL}};
    dlL_register_nn(L, nn, NULL);
}
