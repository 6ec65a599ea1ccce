/* fuzz_onnx.c - the ONNX reader (src/io/onnx.c, src/lua/l_onnx.c) and the
 * graph builder (lua/dl/onnx/graph.lua, ops.lua) on arbitrary bytes: the
 * input is decoded as a TensorProto and as a ModelProto, then built into a
 * module with dl.onnx.load(bytes, {bytes = true, fold = false}) - every
 * check that runs at load, no op runs (fold = false), so a tiny file cannot
 * ask for a huge computation.  One Lua state is kept for the whole run
 * (collected every 64 inputs); errors are normal outcomes. */
#include "fuzz.h"

#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>

int luaopen_dl(lua_State *L);

static lua_State *L;

static const char *const program = "local bytes = ...\n"
                                   "pcall(dl._onnx.decode_tensor, bytes)\n"
                                   "pcall(dl.onnx.load, bytes, {bytes = true, fold = false})\n";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static unsigned count;
    static int ref = LUA_NOREF;
    if (!L) {
        L = luaL_newstate();
        luaL_openlibs(L);
        luaL_requiref(L, "dl", luaopen_dl, 1);
        lua_pop(L, 1);
        if (luaL_loadstring(L, program) != LUA_OK) return 0;
        ref = luaL_ref(L, LUA_REGISTRYINDEX);
    }
    lua_settop(L, 0);
    lua_rawgeti(L, LUA_REGISTRYINDEX, ref);
    lua_pushlstring(L, (const char *)data, size);
    lua_pcall(L, 1, 0, 0);
    lua_settop(L, 0);
    if (++count % 64 == 0) lua_gc(L, LUA_GCCOLLECT);
    return 0;
}
