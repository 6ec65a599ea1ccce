/* fuzz_nested_table.c - dl.tensor(nested table) (src/lua/l_create.c) on
 * tables built from the bytes through the Lua C API.
 *
 * Byte 0 picks the dtype option (none or one of eight).  The rest is a
 * program: each byte's low 3 bits are an operation on a stack of open tables
 * (depth <= 12) - open a child table, close it into its parent, append an
 * integer or a double (the next 8 bytes, any bit pattern: NaN, inf,
 * denormals, huge integers), a boolean, a string, leave a hole (skip an
 * index), or set a non-integer key.  Open tables are closed at the end.  One
 * Lua state is kept for the whole run (collected every 256 inputs). */
#include "fuzz.h"

#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>
#include <string.h>

int luaopen_dl(lua_State *L);

static lua_State *L;

static size_t take(const uint8_t *d, size_t n, size_t *i, void *out, size_t want) {
    size_t k = n - *i < want ? n - *i : want;
    memset(out, 0, want);
    memcpy(out, d + *i, k);
    *i += k;
    return k;
}

/* Appends the value on top of the stack to the table below it, at the next
 * index of that level. */
static void append(lua_Integer *next, int depth) {
    lua_rawseti(L, -2, next[depth]++);
}

static int build_and_convert(lua_State *Ls) {
    size_t n;
    const uint8_t *d = (const uint8_t *)lua_tolstring(Ls, 1, &n);
    static const char *const dtypes[] = {"float32", "float64", "int64",   "int32",
                                         "uint8",   "bool",    "float16", "bfloat16"};
    lua_Integer next[13];
    int depth = 0;
    lua_getglobal(Ls, "dl");
    lua_getfield(Ls, -1, "tensor");
    lua_newtable(Ls);
    next[0] = 1;
    size_t i = 1;
    while (i < n) {
        uint8_t op = d[i++];
        switch (op & 7) {
        case 0:
            if (depth < 12) {
                lua_newtable(Ls);
                next[++depth] = 1;
            }
            break;
        case 1:
            if (depth > 0) append(next, --depth);
            break;
        case 2: {
            int64_t v;
            take(d, n, &i, &v, 8);
            lua_pushinteger(Ls, (lua_Integer)v);
            append(next, depth);
            break;
        }
        case 3: {
            double v;
            take(d, n, &i, &v, 8);
            lua_pushnumber(Ls, v);
            append(next, depth);
            break;
        }
        case 4:
            lua_pushboolean(Ls, op & 8);
            append(next, depth);
            break;
        case 5:
            lua_pushlstring(Ls, (const char *)d + i - 1, 1);
            append(next, depth);
            break;
        case 6: next[depth] += 1 + (op >> 6); break;
        default:
            lua_pushinteger(Ls, op);
            lua_setfield(Ls, -2, (op & 8) ? "x" : "n");
            break;
        }
    }
    while (depth > 0) append(next, --depth);
    int nargs = 1;
    uint8_t sel = n ? d[0] : 0;
    if (sel & 8) {
        lua_newtable(Ls);
        lua_getfield(Ls, -4, dtypes[sel & 7]);
        lua_setfield(Ls, -2, "dtype");
        nargs = 2;
    }
    lua_call(Ls, nargs, 1);
    return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static unsigned count;
    if (!L) {
        L = luaL_newstate();
        luaL_openlibs(L);
        luaL_requiref(L, "dl", luaopen_dl, 1);
        lua_pop(L, 1);
    }
    lua_settop(L, 0);
    lua_pushcfunction(L, build_and_convert);
    lua_pushlstring(L, (const char *)data, size);
    lua_pcall(L, 1, 1, 0);
    lua_settop(L, 0);
    if (++count % 256 == 0) lua_gc(L, LUA_GCCOLLECT);
    return 0;
}
