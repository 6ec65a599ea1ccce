/* l_dl.c - luaopen_dl: builds the `dl` module table, opens every binding
 * family, finds the Lua half of the library (lua/dl/) next to this binary and
 * puts it on package.path, and loads submodules (dl.nn, dl.optim, ...) lazily
 * on first access.  The same entry serves stock lua5.4 (require "dl" loads
 * dl.so) and the dlua executable (which preloads it). */
#include "l_bind.h"
#include "core/parallel.h"
#include "core/rng.h"
#include "ops/device.h"

#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

int luaopen_dl(lua_State *L);
void dlL_open_cuda(lua_State *L); /* l_cuda.c */

static int l_clock(lua_State *L) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    lua_pushnumber(L, (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9);
    return 1;
}

static int l_set_num_threads(lua_State *L) {
    lua_Integer n = luaL_checkinteger(L, 1);
    if (n < 1) return luaL_argerror(L, 1, "set_num_threads: need at least 1 thread");
    dl_set_num_threads((int)n);
    return 0;
}

static int l_get_num_threads(lua_State *L) {
    lua_pushinteger(L, dl_get_num_threads());
    return 1;
}

static int l_manual_seed(lua_State *L) {
    lua_Integer s = luaL_checkinteger(L, 1);
    dl_manual_seed((uint64_t)s);
    return 0;
}

static int l_initial_seed(lua_State *L) {
    lua_pushinteger(L, (lua_Integer)dl_default_generator()->seed);
    return 1;
}

static int l_memory_allocated(lua_State *L) {
    lua_pushinteger(L, dl_mem_live_bytes());
    return 1;
}

/* Host bytes held: tensors alive plus freed buffers kept for reuse. */
static int l_memory_reserved(lua_State *L) {
    lua_pushinteger(L, dl_mem_live_bytes() + dl_cpu_cached_bytes());
    return 1;
}

/* dl.max_memory_allocated(): the most host bytes held at once by tensors
 * and the CPU kernels' scratch buffers since the start or the last
 * dl.reset_peak_memory_stats() (the CPU twin of dl.cuda's). */
static int l_max_memory_allocated(lua_State *L) {
    lua_pushinteger(L, dl_cpu_peak_bytes());
    return 1;
}

static int l_reset_peak_memory_stats(lua_State *L) {
    (void)L;
    dl_cpu_reset_peak();
    return 0;
}

/* dl.empty_cache(): returns the cached host buffers to the system; the
 * bytes released. */
static int l_empty_cache(lua_State *L) {
    lua_pushinteger(L, dl_cpu_cache_empty());
    return 1;
}

/* Low-memory handler.  Every state with dl open is listed with the thread
 * that owns it (the one that opened it, or the last one that entered it
 * through dl_state_*); an allocation that fails collects the states the
 * failing thread owns - never a state another thread may be running.  A
 * state leaves the list when it is closed (the __gc of a registry sentinel). */
typedef struct state_owner {
    lua_State *L; /* the main thread of the state */
    pthread_t thread;
    struct state_owner *next;
} state_owner;
static pthread_mutex_t owners_lock = PTHREAD_MUTEX_INITIALIZER;
static state_owner *owners;
static const char owner_key = 'o'; /* registry key of the sentinel */

static void low_memory(void *ud) {
    (void)ud;
    lua_State *mine[16];
    int n = 0;
    pthread_mutex_lock(&owners_lock);
    for (state_owner *o = owners; o && n < 16; o = o->next)
        if (pthread_equal(o->thread, pthread_self())) mine[n++] = o->L;
    pthread_mutex_unlock(&owners_lock);
    /* only this thread runs these states, so none can close meanwhile */
    for (int i = 0; i < n; i++) lua_gc(mine[i], LUA_GCCOLLECT);
}

static lua_State *main_thread(lua_State *L) {
    lua_rawgeti(L, LUA_REGISTRYINDEX, LUA_RIDX_MAINTHREAD);
    lua_State *m = lua_tothread(L, -1);
    lua_pop(L, 1);
    return m;
}

void dlL_adopt_state(lua_State *L) {
    L = main_thread(L);
    pthread_mutex_lock(&owners_lock);
    for (state_owner *o = owners; o; o = o->next)
        if (o->L == L) o->thread = pthread_self();
    pthread_mutex_unlock(&owners_lock);
}

static int owner_gc(lua_State *L) {
    lua_State *m = main_thread(L);
    pthread_mutex_lock(&owners_lock);
    for (state_owner **p = &owners; *p; p = &(*p)->next)
        if ((*p)->L == m) {
            state_owner *dead = *p;
            *p = dead->next;
            free(dead);
            break;
        }
    pthread_mutex_unlock(&owners_lock);
    return 0;
}

/* Lists L's state as owned by this thread until the state closes. */
static void set_handler(void) {
    dl_set_low_memory_handler(low_memory, NULL);
}

static void register_owner(lua_State *L) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, set_handler);
    /* the sentinel first (it may raise a memory error): its __gc unlists */
    lua_newuserdatauv(L, 1, 0);
    lua_createtable(L, 0, 1);
    lua_pushcfunction(L, owner_gc);
    lua_setfield(L, -2, "__gc");
    lua_setmetatable(L, -2);
    lua_rawsetp(L, LUA_REGISTRYINDEX, &owner_key);
    state_owner *o = malloc(sizeof *o);
    if (!o) return; /* no low-memory collection for this state: not fatal */
    o->L = main_thread(L);
    o->thread = pthread_self();
    pthread_mutex_lock(&owners_lock);
    o->next = owners;
    owners = o;
    pthread_mutex_unlock(&owners_lock);
}

static int is_dir(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

/* Finds lua/dl relative to the binary holding this code; pushes the root
 * folder (the one containing dl/) or nil. */
static void push_lua_root(lua_State *L) {
    const char *env = getenv("DLUA_LUA_PATH");
    if (env && is_dir(env)) {
        lua_pushstring(L, env);
        return;
    }
    Dl_info info;
    char self[PATH_MAX], real[PATH_MAX];
    if (!dladdr((void *)luaopen_dl, &info) || !info.dli_fname) {
        lua_pushnil(L);
        return;
    }
    /* in an executable, dli_fname may be argv[0]; prefer /proc/self/exe then */
    snprintf(self, sizeof self, "%s", info.dli_fname);
    if (!strchr(self, '/')) {
        ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
        self[n > 0 ? n : 0] = '\0';
    }
    if (!realpath(self, real)) {
        lua_pushnil(L);
        return;
    }
    char *slash = strrchr(real, '/');
    if (slash) *slash = '\0';
    static const char *const candidates[] = {
        "/lua",                        /* beside the binary: any build tree links it */
        "/../lua",                     /* build/dl.so, build/dlua -> source tree */
        "/../share/dlua/lua",          /* bin/dlua, lib/libdlua.so */
        "/../../../share/dlua/lua",    /* lib/lua/5.4/dl.so */
        "/../../share/dlua/lua",       /* lib/x86_64-linux-gnu/libdlua.so */
        "/../../../../share/dlua/lua", /* lib/x86_64-linux-gnu/lua/5.4/dl.so */
        "/../../../share/lua/5.4",     /* a LuaRocks tree: lib/lua/5.4/dl.so */
        "/../share/lua/5.4",           /* a LuaRocks tree: bin/dlua */
    };
    for (size_t i = 0; i < sizeof candidates / sizeof candidates[0]; i++) {
        char p[PATH_MAX + 64], d[PATH_MAX + 128];
        snprintf(p, sizeof p, "%s%s", real, candidates[i]);
        snprintf(d, sizeof d, "%s/dl", p);
        if (is_dir(d)) {
            char rp[PATH_MAX];
            lua_pushstring(L, realpath(p, rp) ? rp : p);
            return;
        }
    }
    lua_pushnil(L);
}

/* Lazy submodules: dl.nn -> require "dl.nn" on first access. */
static int module_index(lua_State *L) {
    const char *k = lua_tostring(L, 2);
    if (!k) return 0;
    static const char *const lazy[] = {"nn",          "optim", "data",     "transforms", "models",
                                       "util",        "image", "autograd", "amp",        "utils",
                                       "distributed", "text",  NULL};
    for (int i = 0; lazy[i]; i++)
        if (strcmp(k, lazy[i]) == 0) {
            lua_getglobal(L, "require");
            lua_pushfstring(L, "dl.%s", k);
            lua_call(L, 1, 1);
            lua_pushvalue(L, -1);
            lua_setfield(L, 1, k); /* rawset would bypass nothing: no __newindex */
            return 1;
        }
    /* mixed precision lives in dl.amp; its entry points are also dl's */
    static const char *const amp[] = {"autocast",           "autocast_enter",
                                      "autocast_exit",      "is_autocast_enabled",
                                      "get_autocast_dtype", NULL};
    for (int i = 0; amp[i]; i++)
        if (strcmp(k, amp[i]) == 0) {
            lua_getglobal(L, "require");
            lua_pushliteral(L, "dl.amp");
            lua_call(L, 1, 1);
            lua_getfield(L, -1, k);
            return 1;
        }
    return 0;
}

int luaopen_dl(lua_State *L) {
    dl_backends_init();
    lua_getfield(L, LUA_REGISTRYINDEX, DL_MODULE_KEY);
    if (lua_istable(L, -1)) return 1; /* already open in this state */
    lua_pop(L, 1);

    lua_newtable(L);
    lua_pushvalue(L, -1);
    lua_setfield(L, LUA_REGISTRYINDEX, DL_MODULE_KEY);
    int mod = lua_gettop(L);

    register_owner(L);

    dlL_open_tensor(L);
    dlL_open_create(L);
    dlL_open_elementwise(L);
    dlL_open_reduce(L);
    dlL_open_linalg(L);
    dlL_open_index(L);
    dlL_open_random(L);
    dlL_open_print(L);
    dlL_open_autograd(L);
    dlL_open_io(L);
    dlL_open_softmax(L);
    dlL_open_attention(L);
    dlL_open_loss(L);
    dlL_open_activation(L);
    dlL_open_dropout(L);
    dlL_open_pad(L);
    dlL_open_image(L);
    dlL_open_data(L);
    dlL_open_conv(L);
    dlL_open_batchnorm(L);
    dlL_open_layernorm(L);
    dlL_open_embedding(L);
    dlL_open_clipgrad(L);
    dlL_open_pool(L);
    dlL_open_train(L);
    dlL_open_optim(L);
    dlL_open_tensorboard(L);
    dlL_open_dist(L); /* l_dist.c: dl._dist (process group, DDP reducer) */
    dlL_open_text(L); /* l_text.c: dl._text (tokenizers) */

    static const luaL_Reg functions[] = {
        {"clock", l_clock},
        {"set_num_threads", l_set_num_threads},
        {"get_num_threads", l_get_num_threads},
        {"manual_seed", l_manual_seed},
        {"initial_seed", l_initial_seed},
        {"memory_allocated", l_memory_allocated},
        {"memory_reserved", l_memory_reserved},
        {"empty_cache", l_empty_cache},
        {"max_memory_allocated", l_max_memory_allocated},
        {"reset_peak_memory_stats", l_reset_peak_memory_stats},
        {NULL, NULL},
    };
    luaL_setfuncs(L, functions, 0);

    dlL_open_cuda(L); /* dl.cuda, dl.backends, device methods */

    lua_pushliteral(L, DL_VERSION);
    lua_setfield(L, mod, "__version__");

    /* the Lua half of the library */
    push_lua_root(L);
    if (lua_isstring(L, -1)) {
        const char *root = lua_tostring(L, -1);
        lua_pushvalue(L, -1);
        lua_setfield(L, mod, "_lua_root");
        lua_getglobal(L, "package");
        lua_getfield(L, -1, "path");
        const char *old = lua_tostring(L, -1);
        lua_pushfstring(L, "%s/?.lua;%s/?/init.lua;%s", root, root, old ? old : "");
        lua_setfield(L, -3, "path");
        lua_pop(L, 2);
    }
    lua_pop(L, 1);

    lua_createtable(L, 0, 1);
    lua_pushcfunction(L, module_index);
    lua_setfield(L, -2, "__index");
    lua_setmetatable(L, mod);

    /* let `require "dl"` inside dl's own Lua files find this table */
    luaL_getsubtable(L, LUA_REGISTRYINDEX, LUA_LOADED_TABLE);
    lua_pushvalue(L, mod);
    lua_setfield(L, -2, "dl");
    lua_pop(L, 1);

    /* Lua-side additions (lua/dl/base.lua), when the Lua library was found */
    lua_getglobal(L, "package");
    lua_getfield(L, -1, "searchpath");
    lua_pushliteral(L, "dl.base");
    lua_getfield(L, -3, "path");
    lua_call(L, 2, 1);
    int found = lua_isstring(L, -1);
    lua_pop(L, 2);
    if (found) {
        lua_getglobal(L, "require");
        lua_pushliteral(L, "dl.base");
        lua_call(L, 1, 1);
        if (lua_isfunction(L, -1)) {
            lua_pushvalue(L, mod);
            lua_call(L, 1, 0);
        } else {
            lua_pop(L, 1);
        }
    }
    lua_settop(L, mod);
    return 1;
}
