/* l_dist.c - bindings of the process group and the DDP reducer
 * (src/dist), for lua/dl/distributed.lua and lua/dl/nn/parallel.lua (not a
 * public API):
 *   dl._dist.init(backend, timeout_s)        dl._dist.destroy()
 *   dl._dist.is_initialized() rank() world_size() local_rank() backend()
 *   dl._dist.all_reduce(t, op)  op: "sum" | "avg" | "max" | "min"
 *   dl._dist.broadcast(t, src)  dl._dist.all_gather(list, t)  dl._dist.barrier()
 *   dl._dist.wait_seconds()  dl._dist.report_failure(message)
 *   dl._dist.reducer(params, names, cap_bytes, first_cap_bytes, find_unused)
 *     -> userdata with :prepare(), :stats(), :bucket(b) (1-based indices), :close()
 * Ranks are 0-based here as in the public API.  The reducer userdata is
 * created before the C reducer, so __gc always finds a valid slot. */
#include "dist/dist.h"
#include "dist/reducer.h"
#include "l_bind.h"

#include <stdlib.h>
#include <string.h>

#define REDUCER_MT "dl.dist.Reducer"

static int l_init(lua_State *L) {
    const char *backend = luaL_checkstring(L, 1);
    double timeout = luaL_checknumber(L, 2);
    return dlL_done(L, dl_dist_init(backend, timeout));
}

static int l_destroy(lua_State *L) {
    return dlL_done(L, dl_dist_destroy());
}

static int l_is_initialized(lua_State *L) {
    lua_pushboolean(L, dl_dist_is_initialized());
    return 1;
}

/* rank(), world_size(), local_rank(): an error before init */
static int push_int(lua_State *L, const char *fn, int v) {
    if (!dl_dist_is_initialized())
        return luaL_error(L,
                          "dist.%s: the process group is not initialized (call "
                          "dist.init_process_group first)",
                          fn);
    lua_pushinteger(L, v);
    return 1;
}
static int l_rank(lua_State *L) {
    return push_int(L, "get_rank", dl_dist_rank());
}
static int l_world_size(lua_State *L) {
    return push_int(L, "get_world_size", dl_dist_world_size());
}
static int l_local_rank(lua_State *L) {
    return push_int(L, "get_local_rank", dl_dist_local_rank());
}
static int l_backend(lua_State *L) {
    lua_pushstring(L, dl_dist_backend()); /* NULL: nil */
    return 1;
}
static int l_wait_seconds(lua_State *L) {
    lua_pushnumber(L, dl_dist_wait_seconds());
    return 1;
}

static int l_report_failure(lua_State *L) {
    dl_dist_report_failure(luaL_checkstring(L, 1));
    return 0;
}

static int l_all_reduce(lua_State *L) {
    dl_tensor *t = dlL_checktensor(L, 1);
    static const char *const ops[] = {"sum", "avg", "max", "min", NULL};
    int op = luaL_checkoption(L, 2, "sum", ops);
    return dlL_pushself(L, dl_dist_all_reduce(t, (dl_reduce_op)op));
}

static int l_broadcast(lua_State *L) {
    dl_tensor *t = dlL_checktensor(L, 1);
    lua_Integer src = luaL_checkinteger(L, 2);
    if (src < 0 || src > 1 << 30)
        return luaL_error(L, "dist.broadcast: src rank %d is out of range (ranks are 0-based)",
                          (int)src);
    return dlL_pushself(L, dl_dist_broadcast(t, (int)src));
}

static int l_all_gather(lua_State *L) {
    luaL_checktype(L, 1, LUA_TTABLE);
    dl_tensor *t = dlL_checktensor(L, 2);
    if (!dl_dist_is_initialized())
        return luaL_error(L, "dist.all_gather: the process group is not initialized (call "
                             "dist.init_process_group first)");
    int n = dl_dist_world_size();
    if (luaL_len(L, 1) != n)
        return luaL_error(L, "dist.all_gather: tensor_list has %d entries, the world size is %d",
                          (int)luaL_len(L, 1), n);
    dl_tensor **out = lua_newuserdatauv(L, (size_t)n * sizeof *out, 0);
    for (int i = 0; i < n; i++) {
        lua_geti(L, 1, i + 1);
        out[i] = dlL_totensor(L, -1);
        if (!out[i])
            return luaL_error(L, "dist.all_gather: tensor_list[%d] is not a tensor", i + 1);
        lua_pop(L, 1); /* the list keeps it alive */
    }
    return dlL_pushself(L, dl_dist_all_gather(out, t));
}

static int l_barrier(lua_State *L) {
    return dlL_done(L, dl_dist_barrier());
}

/* --- the reducer ---------------------------------------------------------------- */

static dl_reducer **check_reducer(lua_State *L) {
    dl_reducer **r = luaL_checkudata(L, 1, REDUCER_MT);
    if (!*r) luaL_error(L, "DistributedDataParallel: the reducer is closed");
    return r;
}

static int l_reducer(lua_State *L) {
    luaL_checktype(L, 1, LUA_TTABLE);
    luaL_checktype(L, 2, LUA_TTABLE);
    lua_Integer cap = luaL_checkinteger(L, 3), first = luaL_checkinteger(L, 4);
    int find_unused = lua_toboolean(L, 5), as_view = lua_toboolean(L, 6);
    int n = (int)luaL_len(L, 1);
    if (n < 0 || n > 1 << 24 || luaL_len(L, 2) != n)
        return luaL_error(L, "DistributedDataParallel: params and names differ in length");
    dl_reducer **slot = lua_newuserdatauv(L, sizeof *slot, 0);
    *slot = NULL;
    luaL_setmetatable(L, REDUCER_MT);
    int ud = lua_gettop(L);
    dl_tensor **ps = lua_newuserdatauv(L, (size_t)(n ? n : 1) * sizeof *ps, 0);
    const char **names = lua_newuserdatauv(L, (size_t)(n ? n : 1) * sizeof *names, 0);
    for (int i = 0; i < n; i++) {
        lua_geti(L, 1, i + 1);
        ps[i] = dlL_totensor(L, -1);
        lua_pop(L, 1);
        if (!ps[i])
            return luaL_error(L, "DistributedDataParallel: params[%d] is not a tensor", i + 1);
        lua_geti(L, 2, i + 1);
        names[i] = lua_tostring(L, -1);
        lua_pop(L, 1); /* the names table keeps the string */
        if (!names[i])
            return luaL_error(L, "DistributedDataParallel: names[%d] is not a string", i + 1);
    }
    *slot = dl_reducer_new(n, ps, names, cap, first, find_unused, as_view);
    if (!*slot) return dlL_fail(L);
    lua_settop(L, ud);
    return 1;
}

static int l_reducer_prepare(lua_State *L) {
    dl_reducer_prepare(*check_reducer(L));
    return 0;
}

static int l_reducer_stats(lua_State *L) {
    dl_reducer_stats s;
    dl_reducer_get_stats(*check_reducer(L), &s);
    lua_createtable(L, 0, 5);
    lua_pushinteger(L, s.n_buckets);
    lua_setfield(L, -2, "buckets");
    lua_pushboolean(L, s.rebuilt);
    lua_setfield(L, -2, "rebuilt");
    lua_pushinteger(L, s.iterations);
    lua_setfield(L, -2, "iterations");
    lua_pushnumber(L, s.wait_s);
    lua_setfield(L, -2, "wait_s");
    lua_pushnumber(L, s.copy_s);
    lua_setfield(L, -2, "copy_s");
    return 1;
}

/* bucket(b): the 1-based parameter indices of bucket b (1-based), or nil */
static int l_reducer_bucket(lua_State *L) {
    dl_reducer *r = *check_reducer(L);
    int b = (int)luaL_checkinteger(L, 2) - 1;
    int n = dl_reducer_bucket(r, b, NULL, 0);
    if (n == 0) return 0;
    int *idx = lua_newuserdatauv(L, (size_t)n * sizeof *idx, 0);
    dl_reducer_bucket(r, b, idx, n);
    lua_createtable(L, n, 0);
    for (int i = 0; i < n; i++) {
        lua_pushinteger(L, idx[i] + 1);
        lua_rawseti(L, -2, i + 1);
    }
    return 1;
}

static int l_reducer_close(lua_State *L) {
    dl_reducer **r = luaL_checkudata(L, 1, REDUCER_MT);
    dl_reducer_free(*r);
    *r = NULL;
    return 0;
}

void dlL_open_dist(lua_State *L) {
    static const luaL_Reg fns[] = {
        {"init", l_init},
        {"destroy", l_destroy},
        {"is_initialized", l_is_initialized},
        {"rank", l_rank},
        {"world_size", l_world_size},
        {"local_rank", l_local_rank},
        {"backend", l_backend},
        {"wait_seconds", l_wait_seconds},
        {"report_failure", l_report_failure},
        {"all_reduce", l_all_reduce},
        {"broadcast", l_broadcast},
        {"all_gather", l_all_gather},
        {"barrier", l_barrier},
        {"reducer", l_reducer},
        {NULL, NULL},
    };
    dlL_register_in(L, "_dist", fns);
    static const luaL_Reg meta[] = {
        {"__gc", l_reducer_close},
        {"__close", l_reducer_close},
        {NULL, NULL},
    };
    static const luaL_Reg methods[] = {
        {"prepare", l_reducer_prepare},
        {"stats", l_reducer_stats},
        {"bucket", l_reducer_bucket},
        {"close", l_reducer_close},
        {NULL, NULL},
    };
    dlL_newclass(L, REDUCER_MT, meta, methods);
}
