/* l_dropout.c - Lua bindings of the dropout family (src/ops/dropout.h), in
 * dl._nn (shared with the other nn families) and dl._F:
 *   dropout_forward(x [, p=0.5 [, training=true]]) -> out, mask (nil when not training)
 *   dropout_backward(gy, mask, p)
 *   dl._F.dropout(x [, p [, training]]) -> out
 * Every argument is checked before any tensor is made; dims are 1-based
 * (negatives from the end). */
#include "l_bind.h"
#include "ops/dropout.h"

/* --- dropout ------------------------------------------------------------------------ */

static double check_p(lua_State *L, int idx, const char *op, double def) {
    if (lua_isnoneornil(L, idx)) return def;
    if (!lua_isnumber(L, idx))
        luaL_error(L, "%s: p must be a number, got %s", op, luaL_typename(L, idx));
    return lua_tonumber(L, idx);
}

static int l_dropout_forward(lua_State *L) {
    const char *op = "dropout";
    dl_tensor *x = dlL_checktensor(L, 1);
    double p = check_p(L, 2, op, 0.5);
    int training = 1;
    if (!lua_isnoneornil(L, 3)) {
        if (!lua_isboolean(L, 3))
            luaL_error(L, "%s: training must be a boolean, got %s", op, luaL_typename(L, 3));
        training = lua_toboolean(L, 3);
    }
    dlL_nomore(L, 3, op);
    dl_tensor *out, *mask;
    if (dl_dropout(x, p, training, &out, &mask)) return dlL_fail(L);
    dlL_pushtensor(L, out);
    dlL_pushopttensor(L, mask);
    return 2;
}

static int l_dropout_backward(lua_State *L) {
    const char *op = "dropout_backward";
    dl_tensor *gy = dlL_checktensor(L, 1);
    dl_tensor *mask = lua_isnil(L, 2) ? NULL : dlL_checktensor(L, 2);
    if (lua_isnoneornil(L, 3)) luaL_error(L, "%s: p (the forward's probability) is required", op);
    double p = check_p(L, 3, op, 0.5);
    dlL_nomore(L, 3, op);
    return dlL_pushtensor(L, dl_dropout_backward(gy, mask, p));
}

/* --- dl._F --------------------------------------------------------------------------- */

/* F.dropout(x, p=0.5, training=true) -> output only */
static int F_dropout(lua_State *L) {
    l_dropout_forward(L);
    lua_pop(L, 1);
    return 1;
}

void dlL_open_dropout(lua_State *L) {
    static const luaL_Reg nn[] = {{"dropout_forward", l_dropout_forward},
                                  {"dropout_backward", l_dropout_backward},
                                  {NULL, NULL}};
    static const luaL_Reg F[] = {{"dropout", F_dropout}, {NULL, NULL}};
    dlL_register_nn(L, nn, F);
}
