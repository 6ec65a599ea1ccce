/* l_activation.c - Lua bindings of the activation family
 * (src/ops/activation.h; relu's forward is the elementwise unary op), in
 * dl._nn (shared with the other nn families) and dl._F:
 *   relu_forward(x)                     relu_backward(gy, y)
 *   dl._F.relu(x [, {inplace=}])
 *   dl._F.gelu(x [, {approximate="none"|"tanh"}])   dl._F.silu(x [, {inplace=}])
 * (gelu and silu are elementwise unary ops too; their backwards are the
 * elementwise family's formulas)
 * Every argument is checked before any tensor is made; dims are 1-based
 * (negatives from the end). */
#include "l_bind.h"
#include "ops/activation.h"
#include "ops/elementwise.h"

#include <string.h>

/* --- relu --------------------------------------------------------------------------- */

static int l_relu_forward(lua_State *L) {
    dl_tensor *x = dlL_checktensor(L, 1);
    dlL_nomore(L, 1, "relu");
    return dlL_pushtensor(L, dl_unary(DL_UNARY_RELU, x));
}

static int l_relu_backward(lua_State *L) {
    dl_tensor *gy = dlL_checktensor(L, 1), *y = dlL_checktensor(L, 2);
    dlL_nomore(L, 2, "relu_backward");
    return dlL_pushtensor(L, dl_relu_backward(gy, y));
}

/* --- dl._F --------------------------------------------------------------------------- */

/* x at 1 and the options table at 2 (only `keys`), nothing after it */
static dl_tensor *check_x_opts(lua_State *L, const char *op, const char *const *keys) {
    dl_tensor *x = dlL_checktensor(L, 1);
    dlL_checkoptions(L, 2, op, keys);
    dlL_nomore(L, 2, op);
    return x;
}

/* F.relu / F.silu(x [, {inplace=}]): the elementwise unary op u, in place when asked */
static int unary_inplace_opt(lua_State *L, const char *op, dl_unary_op u) {
    static const char *const keys[] = {"inplace", NULL};
    dl_tensor *x = check_x_opts(L, op, keys);
    if (dlL_optboolean(L, 2, "inplace", 0)) {
        return dlL_pushself(L, dl_unary_(u, x));
    }
    return dlL_pushtensor(L, dl_unary(u, x));
}

static int F_relu(lua_State *L) {
    return unary_inplace_opt(L, "relu", DL_UNARY_RELU);
}

static int F_silu(lua_State *L) {
    return unary_inplace_opt(L, "silu", DL_UNARY_SILU);
}

/* F.gelu(x [, {approximate="none"|"tanh"}]) */
static int F_gelu(lua_State *L) {
    static const char *const keys[] = {"approximate", NULL};
    dl_tensor *x = check_x_opts(L, "gelu", keys);
    dl_unary_op op = DL_UNARY_GELU;
    int ty = dlL_optfield(L, 2, "approximate");
    if (ty != LUA_TNIL) {
        const char *a = ty == LUA_TSTRING ? lua_tostring(L, -1) : NULL;
        if (!a)
            return luaL_error(L, "gelu: option 'approximate' must be a string, got %s",
                              luaL_typename(L, -1));
        if (strcmp(a, "tanh") == 0)
            op = DL_UNARY_GELU_TANH;
        else if (strcmp(a, "none") != 0)
            return luaL_error(L, "gelu: approximate must be 'none' or 'tanh', got '%s'", a);
    }
    lua_pop(L, 1);
    return dlL_pushtensor(L, dl_unary(op, x));
}

void dlL_open_activation(lua_State *L) {
    static const luaL_Reg nn[] = {
        {"relu_forward", l_relu_forward}, {"relu_backward", l_relu_backward}, {NULL, NULL}};
    static const luaL_Reg F[] = {
        {"relu", F_relu}, {"gelu", F_gelu}, {"silu", F_silu}, {NULL, NULL}};
    dlL_register_nn(L, nn, F);
}
