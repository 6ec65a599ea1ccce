/* l_io.c - file bindings: dl.save(path, {name = tensor, ...} [, metadata]) and
 * dl.load(path [, {device=}]) -> {name = tensor, ...}, metadata, over the
 * safetensors reader/writer of src/io/safetensors.h.
 * Every argument is checked before the C call; the loaded set is held by a
 * userdata with __gc while the result table is built, so a Lua error half-way
 * (out of memory, a failed device copy) leaks nothing. */
#include "l_bind.h"
#include "io/safetensors.h"

#include <string.h>

#define DL_ST_RESULT_MT "dl.safetensors_result"

/* A scratch array owned by a userdata (freed by the collector on errors). */
static void *scratch(lua_State *L, size_t n, size_t size) {
    return lua_newuserdatauv(L, (n ? n : 1) * size, 0);
}

/* Counts the table's entries; raises unless every key is a string. */
static size_t count_entries(lua_State *L, int idx, const char *what) {
    size_t n = 0;
    lua_pushnil(L);
    while (lua_next(L, idx)) {
        if (lua_type(L, -2) != LUA_TSTRING) {
            if (lua_type(L, -2) == LUA_TNUMBER) {
                lua_pushvalue(L, -2); /* tostring on a copy: lua_next needs the key intact */
                luaL_error(L, "save: %s must be strings (got the number key %s)", what,
                           lua_tostring(L, -1));
            }
            luaL_error(L, "save: %s must be strings (got a %s key)", what, luaL_typename(L, -2));
        }
        lua_pop(L, 1);
        n++;
    }
    return n;
}

/* dl.save(path, tensors [, metadata]) */
static int l_save(lua_State *L) {
    const char *path = luaL_checkstring(L, 1);
    if (!lua_istable(L, 2))
        return luaL_argerror(L, 2,
                             lua_pushfstring(L, "save: table of name -> tensor expected, got %s",
                                             luaL_typename(L, 2)));
    if (!lua_isnoneornil(L, 3) && !lua_istable(L, 3))
        return luaL_argerror(L, 3,
                             lua_pushfstring(L, "save: metadata table of strings expected, got %s",
                                             luaL_typename(L, 3)));
    if (!lua_isnone(L, 4)) return luaL_argerror(L, 4, "save: unexpected argument");
    lua_settop(L, 3);

    size_t n = count_entries(L, 2, "tensor names");
    const char **names = scratch(L, n, sizeof *names);
    size_t *name_lens = scratch(L, n, sizeof *name_lens);
    dl_tensor **tensors = scratch(L, n, sizeof *tensors);
    size_t i = 0;
    lua_pushnil(L);
    while (lua_next(L, 2)) {
        names[i] = lua_tolstring(L, -2, &name_lens[i]); /* anchored in the table */
        tensors[i] = dlL_totensor(L, -1);
        if (!tensors[i])
            return luaL_error(L, "save: value for '%s' is a %s, not a tensor", names[i],
                              luaL_typename(L, -1));
        lua_pop(L, 1);
        i++;
    }

    size_t nmeta = 0;
    const char **keys = NULL, **values = NULL;
    size_t *key_lens = NULL, *value_lens = NULL;
    if (lua_istable(L, 3)) {
        nmeta = count_entries(L, 3, "metadata keys");
        keys = scratch(L, nmeta, sizeof *keys);
        values = scratch(L, nmeta, sizeof *values);
        key_lens = scratch(L, nmeta, sizeof *key_lens);
        value_lens = scratch(L, nmeta, sizeof *value_lens);
        i = 0;
        lua_pushnil(L);
        while (lua_next(L, 3)) {
            keys[i] = lua_tolstring(L, -2, &key_lens[i]);
            if (lua_type(L, -1) != LUA_TSTRING)
                return luaL_error(L, "save: metadata value for '%s' is a %s, not a string", keys[i],
                                  luaL_typename(L, -1));
            values[i] = lua_tolstring(L, -1, &value_lens[i]);
            lua_pop(L, 1);
            i++;
        }
    }
    return dlL_done(L, dl_safetensors_save(path, n, names, name_lens, tensors, nmeta, keys,
                                           key_lens, values, value_lens));
}

static int result_gc(lua_State *L) {
    dl_safetensors **box = luaL_checkudata(L, 1, DL_ST_RESULT_MT);
    dl_safetensors_free(*box);
    *box = NULL;
    return 0;
}

/* dl.load(path [, {device=}]) -> tensors, metadata */
static int l_load(lua_State *L) {
    static const char *const keys[] = {"device", NULL};
    const char *path = luaL_checkstring(L, 1);
    dlL_checkoptions(L, 2, "load", keys);
    if (!lua_isnone(L, 3)) return luaL_argerror(L, 3, "load: unexpected argument");
    dl_device dev = DL_CPU;
    if (dlL_optfield(L, 2, "device") != LUA_TNIL) {
        if (lua_type(L, -1) != LUA_TSTRING)
            return luaL_error(L, "load: option 'device' must be a string, got %s",
                              luaL_typename(L, -1));
        dev = dlL_checkdevice(L, -1);
    }
    lua_pop(L, 1);

    dl_safetensors **box = lua_newuserdatauv(L, sizeof *box, 0);
    *box = NULL;
    luaL_setmetatable(L, DL_ST_RESULT_MT);
    int boxidx = lua_gettop(L);
    dl_safetensors *st = dl_safetensors_load(path);
    if (!st) return dlL_fail(L);
    *box = st;

    lua_createtable(L, 0, (int)st->ntensors);
    for (size_t i = 0; i < st->ntensors; i++) {
        dl_st_tensor *e = &st->tensors[i];
        if (dev.type != DL_DEVICE_CPU) {
            dl_tensor *d = dl_tensor_to_device(e->tensor, dev);
            if (!d) {
                dl_error("load: %s: tensor '%s': %s", path, e->name, dl_last_error());
                return dlL_fail(L);
            }
            dl_tensor_release(e->tensor);
            e->tensor = d;
        }
        lua_pushlstring(L, e->name, e->name_len);
        dl_tensor *t = e->tensor;
        e->tensor = NULL;
        dlL_pushtensor(L, t);
        lua_rawset(L, -3);
    }
    lua_createtable(L, 0, (int)st->nmeta);
    for (size_t i = 0; i < st->nmeta; i++) {
        lua_pushlstring(L, st->meta[i].key, st->meta[i].key_len);
        lua_pushlstring(L, st->meta[i].value, st->meta[i].value_len);
        lua_rawset(L, -3);
    }
    dl_safetensors_free(st);
    *(dl_safetensors **)lua_touserdata(L, boxidx) = NULL;
    return 2;
}

void dlL_open_io(lua_State *L) {
    static const luaL_Reg result_meta[] = {{"__gc", result_gc}, {NULL, NULL}};
    dlL_newclass(L, DL_ST_RESULT_MT, result_meta, NULL);
    static const luaL_Reg functions[] = {
        {"save", l_save},
        {"load", l_load},
        {NULL, NULL},
    };
    dlL_register(L, functions, NULL);
}
