/* l_print.c - bindings of printing: Tensor.__tostring (so print(t), tostring(t)
 * and the REPL's echo), dl.set_printoptions{...} and dl.get_printoptions().
 * The formatting itself is src/ops/print.c.  A closed tensor prints as
 * "tensor(<closed>)" rather than raising, so printing never fails on it. */
#include "l_bind.h"
#include "ops/print.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static int t_tostring(lua_State *L) {
    dl_tensor **box = luaL_checkudata(L, 1, DL_TENSOR_MT);
    if (!*box) {
        lua_pushliteral(L, "tensor(<closed>)");
        return 1;
    }
    char *s = dl_tensor_format(*box);
    if (!s) return dlL_fail(L);
    lua_pushstring(L, s);
    free(s);
    return 1;
}

/* Out-of-range integers saturate, so the C check reports them. */
static int clamp_int(lua_Integer v) {
    return v > 1000000000 ? 1000000000 : v < -1000000000 ? -1000000000 : (int)v;
}

/* dl.set_printoptions{precision=, threshold=, edgeitems=, linewidth=,
 * sci_mode=, profile=}: as torch.set_printoptions, a profile is applied
 * first, then the single options; sci_mode is reset to automatic unless
 * given (true/false). */
static int l_set_printoptions(lua_State *L) {
    static const char *const keys[] = {"precision", "threshold", "edgeitems", "linewidth",
                                       "sci_mode",  "profile",   NULL};
    if (!lua_isnoneornil(L, 1) && !lua_istable(L, 1))
        return luaL_argerror(L, 1, "set_printoptions: options table expected");
    dlL_checkoptions(L, 1, "set_printoptions", keys);
    dl_print_options o;
    dl_print_options_get(&o);
    if (dlL_optfield(L, 1, "profile") != LUA_TNIL) {
        if (lua_type(L, -1) != LUA_TSTRING)
            return luaL_error(L, "set_printoptions: profile must be a string");
        if (dl_print_options_profile(lua_tostring(L, -1), &o)) return dlL_fail(L);
    }
    lua_pop(L, 1);
    o.precision = clamp_int(dlL_optinteger(L, 1, "precision", o.precision));
    o.edgeitems = clamp_int(dlL_optinteger(L, 1, "edgeitems", o.edgeitems));
    o.linewidth = clamp_int(dlL_optinteger(L, 1, "linewidth", o.linewidth));
    o.threshold = dlL_optnumber(L, 1, "threshold", o.threshold);
    int ty = dlL_optfield(L, 1, "sci_mode");
    if (ty == LUA_TNIL)
        o.sci_mode = -1;
    else if (ty == LUA_TBOOLEAN)
        o.sci_mode = lua_toboolean(L, -1);
    else
        return luaL_error(L, "set_printoptions: sci_mode must be a boolean or nil");
    lua_pop(L, 1);
    return dlL_done(L, dl_print_options_set(&o));
}

static int l_get_printoptions(lua_State *L) {
    dl_print_options o;
    dl_print_options_get(&o);
    lua_createtable(L, 0, 5);
    lua_pushinteger(L, o.precision);
    lua_setfield(L, -2, "precision");
    if (isinf(o.threshold) || o.threshold != floor(o.threshold) || o.threshold > 1e18)
        lua_pushnumber(L, o.threshold);
    else
        lua_pushinteger(L, (lua_Integer)o.threshold);
    lua_setfield(L, -2, "threshold");
    lua_pushinteger(L, o.edgeitems);
    lua_setfield(L, -2, "edgeitems");
    lua_pushinteger(L, o.linewidth);
    lua_setfield(L, -2, "linewidth");
    if (o.sci_mode >= 0) {
        lua_pushboolean(L, o.sci_mode);
        lua_setfield(L, -2, "sci_mode");
    }
    return 1;
}

void dlL_open_print(lua_State *L) {
    static const luaL_Reg functions[] = {
        {"set_printoptions", l_set_printoptions},
        {"get_printoptions", l_get_printoptions},
        {NULL, NULL},
    };
    dlL_register(L, functions, NULL);
    luaL_getmetatable(L, DL_TENSOR_MT);
    lua_pushcfunction(L, t_tostring);
    lua_setfield(L, -2, "__tostring");
    lua_pop(L, 1);
}
