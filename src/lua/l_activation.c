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

/* F.relu(x [, {inplace=}]) */
static int F_relu(lua_State *L) {
    dl_tensor *x = dlL_checktensor(L, 1);
    static const char *const keys[] = {"inplace", NULL};
    dlL_checkoptions(L, 2, "relu", keys);
    dlL_nomore(L, 2, "relu");
    if (dlL_optboolean(L, 2, "inplace", 0)) {
        if (dl_unary_(DL_UNARY_RELU, x)) return dlL_fail(L);
        lua_settop(L, 1);
        return 1;
    }
    return dlL_pushtensor(L, dl_unary(DL_UNARY_RELU, x));
}

/* F.gelu(x [, {approximate="none"|"tanh"}]) */
static int F_gelu(lua_State *L) {
    dl_tensor *x = dlL_checktensor(L, 1);
    static const char *const keys[] = {"approximate", NULL};
    dlL_checkoptions(L, 2, "gelu", keys);
    dlL_nomore(L, 2, "gelu");
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

/* F.silu(x [, {inplace=}]) */
static int F_silu(lua_State *L) {
    dl_tensor *x = dlL_checktensor(L, 1);
    static const char *const keys[] = {"inplace", NULL};
    dlL_checkoptions(L, 2, "silu", keys);
    dlL_nomore(L, 2, "silu");
    if (dlL_optboolean(L, 2, "inplace", 0)) {
        if (dl_unary_(DL_UNARY_SILU, x)) return dlL_fail(L);
        lua_settop(L, 1);
        return 1;
    }
    return dlL_pushtensor(L, dl_unary(DL_UNARY_SILU, x));
}

void dlL_open_activation(lua_State *L) {
    static const luaL_Reg nn[] = {
        {"relu_forward", l_relu_forward}, {"relu_backward", l_relu_backward}, {NULL, NULL}};
    static const luaL_Reg F[] = {
        {"relu", F_relu}, {"gelu", F_gelu}, {"silu", F_silu}, {NULL, NULL}};
    dlL_register_nn(L, nn, F);
}
