/* l_pad.c - Lua bindings of the pad family (src/ops/pad.h), in dl._nn
 * (shared with the other nn families) and dl._F:
 *   pad_forward(x, pads [, mode="constant" [, value=0]])   or (x, pads, {mode=, value=})
 *   pad_backward(gy, input_shape, pads [, mode | {mode=}])
 * Every argument is checked before any tensor is made; dims are 1-based
 * (negatives from the end). */
#include "l_bind.h"
#include "ops/pad.h"

#include <string.h>

/* --- pad ---------------------------------------------------------------------------------------
 */

#define MAX_PADS (2 * DL_MAX_DIMS)

/* Reads the pads table at idx; returns its length. */
static int read_pads(lua_State *L, int idx, const char *op, int64_t *pads) {
    if (!lua_istable(L, idx))
        luaL_error(L,
                   "%s: pads must be a table of integers {left, right, top, bottom, ...}, got %s",
                   op, luaL_typename(L, idx));
    lua_Integer n = (lua_Integer)lua_rawlen(L, idx);
    if (n > MAX_PADS) luaL_error(L, "%s: at most %d pads, got %I", op, MAX_PADS, n);
    for (lua_Integer i = 1; i <= n; i++) {
        lua_rawgeti(L, idx, i);
        if (!lua_isinteger(L, -1))
            luaL_error(L, "%s: pad %I must be an integer, got %s", op, i, luaL_typename(L, -1));
        pads[i - 1] = lua_tointeger(L, -1);
        lua_pop(L, 1);
    }
    return (int)n;
}

static dl_pad_mode read_mode(lua_State *L, int idx, const char *op) {
    if (!lua_isstring(L, idx) || lua_isnumber(L, idx))
        luaL_error(L, "%s: mode must be a string, got %s", op, luaL_typename(L, idx));
    dl_pad_mode m;
    if (dl_pad_mode_parse(op, lua_tostring(L, idx), &m)) dlL_fail(L);
    return m;
}

static const char *const keys_pad[] = {"mode", "value", NULL};

static int l_pad_forward(lua_State *L) {
    const char *op = "pad";
    dl_tensor *x = dlL_checktensor(L, 1);
    int64_t pads[MAX_PADS];
    int npads = read_pads(L, 2, op, pads);
    dl_pad_mode mode = DL_PAD_CONSTANT;
    double value = 0;
    if (lua_istable(L, 3)) {
        dlL_nomore(L, 3, op);
        dlL_checkoptions(L, 3, op, keys_pad);
        if (dlL_optfield(L, 3, "mode") != LUA_TNIL) mode = read_mode(L, -1, op);
        lua_pop(L, 1);
        value = dlL_optnumber(L, 3, "value", 0);
    } else {
        if (!lua_isnoneornil(L, 3)) mode = read_mode(L, 3, op);
        if (!lua_isnoneornil(L, 4)) {
            if (!lua_isnumber(L, 4))
                luaL_error(L, "%s: value must be a number, got %s", op, luaL_typename(L, 4));
            value = lua_tonumber(L, 4);
        }
        dlL_nomore(L, 4, op);
    }
    return dlL_pushtensor(L, dl_pad(x, npads, pads, mode, value));
}

static int l_pad_backward(lua_State *L) {
    const char *op = "pad_backward";
    dl_tensor *gy = dlL_checktensor(L, 1);
    if (!lua_istable(L, 2))
        luaL_error(L, "%s: input_shape must be a table of sizes, got %s", op, luaL_typename(L, 2));
    int64_t shape[DL_MAX_DIMS], pads[MAX_PADS];
    int next, ndim = dlL_checkshape(L, 2, shape, &next);
    int npads = read_pads(L, 3, op, pads);
    dl_pad_mode mode = DL_PAD_CONSTANT;
    if (lua_istable(L, 4)) {
        dlL_checkoptions(L, 4, op, keys_pad);
        if (dlL_optfield(L, 4, "mode") != LUA_TNIL) mode = read_mode(L, -1, op);
        lua_pop(L, 1);
    } else if (!lua_isnoneornil(L, 4)) {
        mode = read_mode(L, 4, op);
    }
    dlL_nomore(L, 4, op);
    return dlL_pushtensor(L, dl_pad_backward(gy, ndim, shape, npads, pads, mode));
}

void dlL_open_pad(lua_State *L) {
    static const luaL_Reg nn[] = {
        {"pad_forward", l_pad_forward}, {"pad_backward", l_pad_backward}, {NULL, NULL}};
    static const luaL_Reg F[] = {{"pad", l_pad_forward}, {NULL, NULL}};
    dlL_register_nn(L, nn, F);
}
