/* l_softmax.c - Lua bindings of the softmax family (src/ops/softmax.h), in
 * dl._nn (shared with the other nn families; created when absent) and dl._F:
 *   softmax_forward(x, dim)             softmax_backward(gy, y, dim)
 *   log_softmax_forward(x, dim)         log_softmax_backward(gy, y, dim)
 * Every argument is checked before any tensor is made; dims are 1-based
 * (negatives from the end). */
#include "l_bind.h"
#include "ops/softmax.h"

/* --- softmax -------------------------------------------------------------------------------- */

static int softmax_forward_any(lua_State *L, const char *op, dl_tensor *(*fn)(dl_tensor *, int)) {
    dl_tensor *x = dlL_checktensor(L, 1);
    int dim = dlL_checkdim(L, 2);
    dlL_nomore(L, 2, op);
    return dlL_pushtensor(L, fn(x, dim));
}

static int softmax_backward_any(lua_State *L, const char *op,
                                dl_tensor *(*fn)(dl_tensor *, dl_tensor *, int)) {
    dl_tensor *gy = dlL_checktensor(L, 1), *y = dlL_checktensor(L, 2);
    int dim = dlL_checkdim(L, 3);
    dlL_nomore(L, 3, op);
    return dlL_pushtensor(L, fn(gy, y, dim));
}

static int l_softmax_forward(lua_State *L) {
    return softmax_forward_any(L, "softmax", dl_softmax);
}
static int l_log_softmax_forward(lua_State *L) {
    return softmax_forward_any(L, "log_softmax", dl_log_softmax);
}
static int l_softmax_backward(lua_State *L) {
    return softmax_backward_any(L, "softmax_backward", dl_softmax_backward);
}
static int l_log_softmax_backward(lua_State *L) {
    return softmax_backward_any(L, "log_softmax_backward", dl_log_softmax_backward);
}

void dlL_open_softmax(lua_State *L) {
    static const luaL_Reg nn[] = {{"softmax_forward", l_softmax_forward},
                                  {"softmax_backward", l_softmax_backward},
                                  {"log_softmax_forward", l_log_softmax_forward},
                                  {"log_softmax_backward", l_log_softmax_backward},
                                  {NULL, NULL}};
    static const luaL_Reg F[] = {
        {"softmax", l_softmax_forward}, {"log_softmax", l_log_softmax_forward}, {NULL, NULL}};
    dlL_register_nn(L, nn, F);
}
