/* l_cuda.c - the CUDA face of dl: the dl.cuda table (devices, synchronize,
 * seeding, memory statistics, events), dl.backends (flags the kernels read),
 * and the tensor methods that move data between devices: to, cuda, cpu,
 * is_cuda, pin_memory, is_pinned.
 *
 * Also dl.cuda.sync_count() (host synchronisations so far) and
 * dl.cuda.CUDAGraph (capture, replay; graph() and graphed() are Lua, in
 * lua/dl/cuda_graphs.lua).
 *
 * Invariants:
 *  - Devices use PyTorch's numbering: cuda:0 is the first GPU, and every
 *    function taking a device takes 0-based integers or "cuda:N" strings.
 *  - Without a GPU (or in a build without CUDA) dl_cuda_rt is NULL: every
 *    dl.cuda function but is_available, device_count and compiled raises one
 *    error naming the reason, and nothing here touches a CUDA pointer.
 *  - Pinned (page-locked) CPU tensors own a block from a small process-wide
 *    cache; a block that served a non_blocking copy keeps the event its copy
 *    records and is reused only once that event is done (a block whose copy
 *    is still in flight is passed over; one freed for good waits for it), so
 *    a copy in flight never sees its source overwritten and a data loader's
 *    steady state never waits for the GPU. */
#include "l_bind.h"
#include "autograd/autograd.h"
#include "core/rng.h"
#include "kernels/cuda.h"
#include "ops/device.h"
#include "ops/op_util.h"
#include "ops/views.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* --- availability -------------------------------------------------------- */

static const char *no_cuda_reason(void) {
    return dl_cuda_compiled() ? "no GPU on this machine" : "CUDA is not in this build";
}

/* The runtime table, or a Lua error "<op>: <reason>". */
static const dl_cuda_runtime *need_rt(lua_State *L, const char *op) {
    if (!dl_cuda_rt) luaL_error(L, "%s: %s", op, no_cuda_reason());
    return dl_cuda_rt;
}

/* Raises unless dev can hold tensors here. */
static void check_device(lua_State *L, const char *op, dl_device dev) {
    if (dev.type != DL_DEVICE_CUDA) return;
    char name[32];
    dl_device_name(dev, name, sizeof name);
    if (!dl_cuda_rt) luaL_error(L, "%s: cannot use %s: %s", op, name, no_cuda_reason());
    int n = dl_cuda_rt->device_count();
    if (dev.index >= n)
        luaL_error(L, "%s: no device %s (this machine has %d GPU%s, cuda:0 to cuda:%d)", op, name,
                   n, n == 1 ? "" : "s", n - 1);
}

/* The device a string names; plain "cuda" is the current CUDA device, as in
 * PyTorch.  -1 with an error for a bad name. */
static int parse_device(const char *s, dl_device *out) {
    if (dl_device_parse(s, out)) return -1;
    if (strcmp(s, "cuda") == 0 && dl_cuda_rt) out->index = dl_cuda_rt->current_device();
    return 0;
}

/* A device ordinal (0-based) from an integer or "cuda:N" at idx; the
 * current device when idx is 0 or the value there is nil. */
static int opt_ordinal(lua_State *L, int idx, const char *op) {
    const dl_cuda_runtime *rt = need_rt(L, op);
    int d;
    if (idx == 0 || lua_isnoneornil(L, idx)) return rt->current_device();
    if (lua_isinteger(L, idx)) {
        lua_Integer i = lua_tointeger(L, idx);
        if (i < 0 || i > 1024)
            return luaL_argerror(L, idx, lua_pushfstring(L, "%s: invalid device %d", op, (int)i));
        d = (int)i;
    } else if (lua_type(L, idx) == LUA_TSTRING) {
        dl_device dev;
        if (dl_device_parse(lua_tostring(L, idx), &dev)) return dlL_fail(L);
        if (dev.type != DL_DEVICE_CUDA)
            return luaL_argerror(L, idx, lua_pushfstring(L, "%s: a CUDA device expected", op));
        d = dev.index;
    } else {
        return luaL_argerror(L, idx,
                             lua_pushfstring(L,
                                             "%s: device (integer or \"cuda:N\") expected, got %s",
                                             op, luaL_typename(L, idx)));
    }
    check_device(L, op, (dl_device){DL_DEVICE_CUDA, d});
    return d;
}

/* --- dl.cuda ------------------------------------------------------------- */

static int l_is_available(lua_State *L) {
    lua_pushboolean(L, dl_cuda_available_devices() > 0);
    return 1;
}

static int l_device_count(lua_State *L) {
    lua_pushinteger(L, dl_cuda_available_devices());
    return 1;
}

static int l_get_device_name(lua_State *L) {
    char buf[256];
    int d = opt_ordinal(L, 1, "cuda.get_device_name");
    if (!dl_cuda_name(d, buf, sizeof buf))
        return luaL_error(L, "cuda.get_device_name: no device %d", d);
    lua_pushstring(L, buf);
    return 1;
}

static int l_set_device(lua_State *L) {
    if (lua_isnoneornil(L, 1)) return luaL_argerror(L, 1, "cuda.set_device: a device is required");
    int d = opt_ordinal(L, 1, "cuda.set_device");
    return dlL_done(L, dl_cuda_rt->set_device(d));
}

static int l_current_device(lua_State *L) {
    lua_pushinteger(L, need_rt(L, "cuda.current_device")->current_device());
    return 1;
}

static int l_synchronize(lua_State *L) {
    int d = opt_ordinal(L, 1, "cuda.synchronize");
    return dlL_done(L, dl_cuda_rt->synchronize(d));
}

/* One Philox generator serves both devices: seeding CUDA seeds it. */
static int l_manual_seed(lua_State *L) {
    lua_Integer s = luaL_checkinteger(L, 1);
    need_rt(L, "cuda.manual_seed");
    dl_manual_seed((uint64_t)s);
    return 0;
}

static int l_memory_allocated(lua_State *L) {
    int d = opt_ordinal(L, 1, "cuda.memory_allocated");
    lua_pushinteger(L, dl_cuda_rt->memory_allocated(d));
    return 1;
}

static int l_memory_reserved(lua_State *L) {
    int d = opt_ordinal(L, 1, "cuda.memory_reserved");
    lua_pushinteger(L, dl_cuda_rt->memory_reserved(d));
    return 1;
}

static int l_max_memory_allocated(lua_State *L) {
    int d = opt_ordinal(L, 1, "cuda.max_memory_allocated");
    lua_pushinteger(L, dl_cuda_rt->max_memory_allocated(d));
    return 1;
}

static int l_reset_peak_memory_stats(lua_State *L) {
    int d = opt_ordinal(L, 1, "cuda.reset_peak_memory_stats");
    dl_cuda_rt->reset_peak_memory_stats(d);
    return 0;
}

static void host_cache_clear(void);

static int l_empty_cache(lua_State *L) {
    const dl_cuda_runtime *rt = need_rt(L, "cuda.empty_cache");
    lua_gc(L, LUA_GCCOLLECT); /* unreachable tensors give their blocks back first */
    host_cache_clear();
    return dlL_done(L, rt->empty_cache());
}

/* --- events ---------------------------------------------------------------- */

#define EVENT_MT "dl.cuda.Event"

typedef struct {
    void *ev;
    int device;
    bool recorded;
} event_box;

static event_box *check_event(lua_State *L, int idx) {
    return luaL_checkudata(L, idx, EVENT_MT);
}

/* dl.cuda.Event({enable_timing=true}): events always time. */
static int l_event_new(lua_State *L) {
    static const char *const opts[] = {"enable_timing", "blocking", "interprocess", NULL};
    dlL_checkoptions(L, 1, "cuda.Event", opts);
    const dl_cuda_runtime *rt = need_rt(L, "cuda.Event");
    event_box *b = lua_newuserdatauv(L, sizeof *b, 0);
    b->ev = NULL;
    b->recorded = false;
    b->device = rt->current_device();
    luaL_setmetatable(L, EVENT_MT);
    b->ev = rt->event_new();
    if (!b->ev) return dlL_fail(L);
    return 1;
}

static int event_gc(lua_State *L) {
    event_box *b = check_event(L, 1);
    if (b->ev && dl_cuda_rt) dl_cuda_rt->event_free(b->ev);
    b->ev = NULL;
    return 0;
}

static int event_record(lua_State *L) {
    event_box *b = check_event(L, 1);
    if (dl_cuda_rt->current_device() != b->device)
        return luaL_error(L,
                          "Event:record: the event belongs to cuda:%d, the current device is "
                          "cuda:%d",
                          b->device, dl_cuda_rt->current_device());
    if (dl_cuda_rt->event_record(b->ev)) return dlL_fail(L);
    b->recorded = true;
    lua_settop(L, 1);
    return 1;
}

static int event_synchronize(lua_State *L) {
    event_box *b = check_event(L, 1);
    return dlL_done(L, b->recorded && dl_cuda_rt->event_synchronize(b->ev));
}

/* start:elapsed_time(stop): milliseconds between two recorded events. */
static int event_elapsed(lua_State *L) {
    event_box *a = check_event(L, 1), *b = check_event(L, 2);
    if (!a->recorded || !b->recorded)
        return luaL_error(L, "Event:elapsed_time: both events must be recorded first");
    double ms = 0;
    if (dl_cuda_rt->event_synchronize(b->ev) || dl_cuda_rt->event_elapsed_ms(a->ev, b->ev, &ms))
        return dlL_fail(L);
    lua_pushnumber(L, ms);
    return 1;
}

static int event_tostring(lua_State *L) {
    event_box *b = check_event(L, 1);
    lua_pushfstring(L, "dl.cuda.Event(device=cuda:%d%s)", b->device,
                    b->recorded ? ", recorded" : "");
    return 1;
}

/* --- synchronisation ---------------------------------------------------------- */

/* dl.cuda.sync_count(): host synchronisations so far (every device). */
static int l_sync_count(lua_State *L) {
    lua_pushinteger(L, (lua_Integer)need_rt(L, "cuda.sync_count")->sync_count());
    return 1;
}

/* dl.cuda._sync_reasons(): why the last synchronisations happened, latest
 * first (up to 16 strings). */
static int l_sync_reasons(lua_State *L) {
    const dl_cuda_runtime *rt = need_rt(L, "cuda._sync_reasons");
    lua_newtable(L);
    for (int i = 0; i < 16; i++) {
        const char *why = rt->sync_reason(i);
        if (!why) break;
        lua_pushstring(L, why);
        lua_rawseti(L, -2, i + 1);
    }
    return 1;
}

static int l_is_capturing(lua_State *L) {
    lua_pushboolean(L, need_rt(L, "cuda.is_current_stream_capturing")->capturing());
    return 1;
}

/* --- CUDA graphs ----------------------------------------------------------------
 * A CUDAGraph userdata owns one runtime graph; its user value is the array of
 * replay hooks (functions run before each replay, e.g. an optimizer copying
 * its learning rate into the device scalar the captured step reads).  While
 * it captures, the registry's CAPTURING key holds it, so Lua code can find the
 * graph being captured (dl.cuda._capturing_graph()). */

#define GRAPH_MT "dl.cuda.CUDAGraph"
#define CAPTURING "dl.cuda.capturing"

typedef struct {
    void *g;
    bool capturing;
} graph_box;

static graph_box *check_graph(lua_State *L, int idx) {
    graph_box *b = luaL_checkudata(L, idx, GRAPH_MT);
    if (!b->g) luaL_error(L, "CUDAGraph: this graph was freed");
    return b;
}

static void set_capturing(lua_State *L, int idx) {
    if (idx)
        lua_pushvalue(L, idx);
    else
        lua_pushnil(L);
    lua_setfield(L, LUA_REGISTRYINDEX, CAPTURING);
}

static void new_hooks(lua_State *L, int idx) {
    lua_newtable(L);
    lua_setiuservalue(L, idx, 1);
}

/* dl.cuda.CUDAGraph() */
static int l_graph_new(lua_State *L) {
    const dl_cuda_runtime *rt = need_rt(L, "cuda.CUDAGraph");
    graph_box *b = lua_newuserdatauv(L, sizeof *b, 1);
    b->g = NULL;
    b->capturing = false;
    luaL_setmetatable(L, GRAPH_MT);
    new_hooks(L, lua_gettop(L));
    b->g = rt->graph_new();
    if (!b->g) return dlL_fail(L);
    return 1;
}

static int graph_gc(lua_State *L) {
    graph_box *b = luaL_checkudata(L, 1, GRAPH_MT);
    if (b->capturing) set_capturing(L, 0);
    if (b->g && dl_cuda_rt) dl_cuda_rt->graph_free(b->g);
    b->g = NULL;
    b->capturing = false;
    return 0;
}

static int graph_capture_begin(lua_State *L) {
    graph_box *b = check_graph(L, 1);
    lua_getfield(L, LUA_REGISTRYINDEX, CAPTURING);
    bool busy = !lua_isnil(L, -1);
    lua_pop(L, 1);
    if (busy) return luaL_error(L, "CUDAGraph:capture_begin: another graph is capturing");
    new_hooks(L, 1);
    if (dl_cuda_rt->graph_capture_begin(b->g)) return dlL_fail(L);
    b->capturing = true;
    set_capturing(L, 1);
    return 0;
}

static int graph_capture_end(lua_State *L) {
    graph_box *b = check_graph(L, 1);
    if (!b->capturing) return luaL_error(L, "CUDAGraph:capture_end: the graph is not capturing");
    b->capturing = false;
    set_capturing(L, 0);
    return dlL_done(L, dl_cuda_rt->graph_capture_end(b->g));
}

/* g:replay(): the hooks, then one launch of the captured work. */
static int graph_replay(lua_State *L) {
    graph_box *b = check_graph(L, 1);
    if (b->capturing) return luaL_error(L, "CUDAGraph:replay: the graph is still capturing");
    lua_getiuservalue(L, 1, 1);
    lua_Integer n = luaL_len(L, -1);
    for (lua_Integer i = 1; i <= n; i++) {
        lua_geti(L, -1, i);
        lua_call(L, 0, 0);
    }
    lua_pop(L, 1);
    return dlL_done(L, dl_cuda_rt->graph_replay(b->g));
}

/* g:reset(): drops the capture (and its memory pool); the graph can capture again. */
static int graph_reset(lua_State *L) {
    graph_box *b = check_graph(L, 1);
    if (b->capturing) set_capturing(L, 0);
    b->capturing = false;
    dl_cuda_rt->graph_free(b->g);
    b->g = dl_cuda_rt->graph_new();
    new_hooks(L, 1);
    return dlL_done(L, !b->g);
}

static int graph_add_hook(lua_State *L) {
    check_graph(L, 1);
    luaL_checktype(L, 2, LUA_TFUNCTION);
    lua_getiuservalue(L, 1, 1);
    lua_pushvalue(L, 2);
    lua_seti(L, -2, luaL_len(L, -2) + 1);
    return 0;
}

static int graph_tostring(lua_State *L) {
    graph_box *b = luaL_checkudata(L, 1, GRAPH_MT);
    lua_pushfstring(L, "dl.cuda.CUDAGraph(%s)",
                    !b->g          ? "freed"
                    : b->capturing ? "capturing"
                                   : "ready");
    return 1;
}

/* dl.cuda._capturing_graph(): the CUDAGraph capturing now, or nil. */
static int l_capturing_graph(lua_State *L) {
    lua_getfield(L, LUA_REGISTRYINDEX, CAPTURING);
    return 1;
}

/* --- dl.backends ------------------------------------------------------------ */

/* The flag a dl.backends key names, or NULL; `sub` is "cudnn" inside
 * dl.backends.cudnn, "cuda" inside dl.backends.cuda, else NULL. */
static bool *flag_of(const char *sub, const char *key) {
    bool cudnn = sub && strcmp(sub, "cudnn") == 0, cuda = sub && strcmp(sub, "cuda") == 0;
    if (!cuda && strcmp(key, "allow_tf32") == 0) return &dl_flags.allow_tf32;
    if (cudnn && strcmp(key, "benchmark") == 0) return &dl_flags.cudnn_benchmark;
    if (cudnn && strcmp(key, "graph") == 0) return &dl_flags.cudnn_graph;
    if (cuda && strcmp(key, "sync_checks") == 0) return &dl_flags.cuda_sync_checks;
    return NULL;
}

/* The keys settable in `sub`, for error messages. */
static const char *flag_names(const char *sub) {
    if (!sub) return "allow_tf32, cudnn.benchmark, cudnn.graph, cuda.sync_checks";
    if (strcmp(sub, "cudnn") == 0) return "allow_tf32, benchmark, graph";
    return "sync_checks";
}

static const char *backends_sub(lua_State *L) {
    lua_pushliteral(L, "_name");
    lua_rawget(L, 1); /* raw: a miss must not come back to __index */
    const char *s = lua_tostring(L, -1);
    lua_pop(L, 1);
    return s;
}

static int backends_index(lua_State *L) {
    const char *k = luaL_checkstring(L, 2);
    bool *f = flag_of(backends_sub(L), k);
    if (!f) return 0;
    lua_pushboolean(L, *f);
    return 1;
}

static int backends_newindex(lua_State *L) {
    const char *k = luaL_checkstring(L, 2);
    const char *sub = backends_sub(L);
    bool *f = flag_of(sub, k);
    if (!f)
        return luaL_error(L, "dl.backends%s%s: no switch '%s' (settable: %s)", sub ? "." : "",
                          sub ? sub : "", k, flag_names(sub));
    if (!lua_isboolean(L, 3))
        return luaL_error(L, "dl.backends: %s must be true or false, got %s", k,
                          luaL_typename(L, 3));
    *f = lua_toboolean(L, 3);
    return 0;
}

/* Pushes a proxy table whose reads and writes go to dl_flags. */
static void push_backends_table(lua_State *L, const char *sub) {
    lua_newtable(L);
    if (sub) {
        lua_pushstring(L, sub);
        lua_setfield(L, -2, "_name");
    }
    lua_createtable(L, 0, 2);
    lua_pushcfunction(L, backends_index);
    lua_setfield(L, -2, "__index");
    lua_pushcfunction(L, backends_newindex);
    lua_setfield(L, -2, "__newindex");
    lua_setmetatable(L, -2);
}

/* --- pinned host memory ------------------------------------------------------ */

typedef struct {
    void *p;
    size_t size;
    void *done; /* the event of the last non_blocking copy that read it, or NULL */
} host_block;

#define HOST_CACHE_BLOCKS 16
#define HOST_CACHE_BYTES ((size_t)2 << 30)

static pthread_mutex_t host_lock = PTHREAD_MUTEX_INITIALIZER;
static host_block *host_cache[HOST_CACHE_BLOCKS];
static int host_cached;
static size_t host_cached_bytes;

/* Whether no copy can still read b (its copy's event is done). */
static bool host_ready(host_block *b) {
    return !b->done || !dl_cuda_rt || dl_cuda_rt->event_query(b->done) != 0;
}

/* Waits until no copy can still read b (a wait only while its copy runs). */
static void host_settle(host_block *b) {
    if (b->done && dl_cuda_rt) {
        if (dl_cuda_rt->event_query(b->done) == 0) dl_cuda_rt->event_synchronize(b->done);
        dl_cuda_rt->event_free(b->done);
    }
    b->done = NULL;
}

static void host_block_free(host_block *b) {
    host_settle(b);
    if (dl_cuda_rt) dl_cuda_rt->host_free(b->p);
    free(b);
}

/* A block of at least n bytes: the smallest cached one that wastes under a
 * quarter and that no copy still reads, else a new one.  NULL with an error. */
static host_block *host_get(size_t n) {
    host_block *b = NULL;
    pthread_mutex_lock(&host_lock);
    int best = -1;
    for (int i = 0; i < host_cached; i++) {
        size_t s = host_cache[i]->size;
        if (s >= n && s - n <= n / 4 + 4096 && (best < 0 || s < host_cache[best]->size) &&
            host_ready(host_cache[i]))
            best = i;
    }
    if (best >= 0) {
        b = host_cache[best];
        host_cache[best] = host_cache[--host_cached];
        host_cached_bytes -= b->size;
    }
    pthread_mutex_unlock(&host_lock);
    if (b) {
        host_settle(b);
        return b;
    }
    b = dl_zalloc(sizeof *b, "pin_memory: out of memory");
    if (!b) return NULL;
    b->size = n ? n : 1;
    b->p = dl_cuda_rt->host_alloc(b->size);
    if (!b->p) {
        free(b);
        return NULL;
    }
    return b;
}

/* The storage deleter: back into the cache, or freed when it is full. */
static void host_put(void *data, void *ctx) {
    (void)data;
    host_block *b = ctx;
    pthread_mutex_lock(&host_lock);
    bool keep = host_cached < HOST_CACHE_BLOCKS && host_cached_bytes + b->size <= HOST_CACHE_BYTES;
    if (keep) {
        host_cache[host_cached++] = b;
        host_cached_bytes += b->size;
    }
    pthread_mutex_unlock(&host_lock);
    if (!keep) host_block_free(b);
}

static void host_cache_clear(void) {
    pthread_mutex_lock(&host_lock);
    int n = host_cached;
    host_block *blocks[HOST_CACHE_BLOCKS];
    memcpy(blocks, host_cache, sizeof blocks);
    host_cached = 0;
    host_cached_bytes = 0;
    pthread_mutex_unlock(&host_lock);
    for (int i = 0; i < n; i++) host_block_free(blocks[i]);
}

static bool is_pinned(const dl_tensor *t) {
    return t->storage->device.type == DL_DEVICE_CPU && t->storage->deleter == host_put;
}

/* A contiguous copy of the CPU tensor t in pinned memory. */
static dl_tensor *pin(dl_tensor *t) {
    size_t nbytes = (size_t)dl_tensor_numel(t) * dl_tensor_itemsize(t);
    host_block *b = host_get(nbytes);
    if (!b) return NULL;
    dl_storage *s = dl_storage_wrap(b->p, nbytes, DL_CPU, host_put, b);
    if (!s) {
        host_put(b->p, b);
        return NULL;
    }
    int64_t strides[DL_MAX_DIMS];
    dl_contiguous_strides(t->ndim, t->shape, strides);
    dl_tensor *p = dl_tensor_new_view(s, 0, t->ndim, t->shape, strides, t->dtype);
    dl_storage_release(s);
    if (p && dl_tensor_copy_(p, t)) {
        dl_tensor_release(p);
        return NULL;
    }
    return p;
}

static int t_pin_memory(lua_State *L) {
    dl_tensor *t = dlL_checktensor(L, 1);
    need_rt(L, "pin_memory");
    if (dl_tensor_device(t).type != DL_DEVICE_CPU) {
        char name[32];
        return luaL_error(L, "pin_memory: only CPU tensors can be pinned, this one is on %s",
                          dl_device_name(dl_tensor_device(t), name, sizeof name));
    }
    if (is_pinned(t)) {
        lua_settop(L, 1);
        return 1;
    }
    dl_tensor *p = pin(t);
    if (!p) return dlL_fail(L);
    /* pinning is a copy that keeps the graph, as PyTorch's */
    if (dl_needs_grad1(t)) {
        dl_tensor *c = dl_clone(t); /* records CloneBackward */
        int rc = c ? dl_set_data(c, p) : -1;
        dl_tensor_release(p);
        if (rc) {
            dl_tensor_release(c);
            return dlL_fail(L);
        }
        p = c;
    }
    return dlL_pushtensor(L, p);
}

static int t_is_pinned(lua_State *L) {
    lua_pushboolean(L, is_pinned(dlL_checktensor(L, 1)));
    return 1;
}

/* --- moving tensors ------------------------------------------------------------ */

typedef struct {
    dl_dtype dtype;
    dl_device dev;
    bool non_blocking;
    bool channels_last; /* memory_format = "channels_last" */
} to_spec;

/* memory_format: "channels_last", "contiguous_format" or "preserve_format";
 * sets *cl for channels_last. */
static void check_memory_format(lua_State *L, int idx, const char *op, bool *cl) {
    const char *s = lua_tostring(L, idx);
    if (s && strcmp(s, "channels_last") == 0)
        *cl = true;
    else if (!s || (strcmp(s, "contiguous_format") != 0 && strcmp(s, "preserve_format") != 0))
        luaL_error(L,
                   "%s: memory_format must be \"channels_last\", \"contiguous_format\" or "
                   "\"preserve_format\", got %s",
                   op, s ? s : luaL_typename(L, idx));
}

/* Reads to()'s arguments from index 2 on: to(dtype) | to(device [, dtype]
 * [, non_blocking]) | to(tensor) | to{device=, dtype=, non_blocking=,
 * memory_format=}. */
static to_spec parse_to(lua_State *L, dl_tensor *t) {
    to_spec s = {t->dtype, dl_tensor_device(t), false, false};
    for (int i = 2; i <= lua_gettop(L); i++) {
        if (lua_isnil(L, i)) continue;
        if (lua_isboolean(L, i)) {
            s.non_blocking = lua_toboolean(L, i);
        } else if (lua_type(L, i) == LUA_TSTRING) {
            dl_device d;
            if (parse_device(lua_tostring(L, i), &d) == 0)
                s.dev = d;
            else
                s.dtype = dlL_checkdtype(L, i);
        } else if (lua_istable(L, i) && luaL_getmetafield(L, i, "__name") == LUA_TSTRING) {
            lua_pop(L, 1);
            s.dtype = dlL_checkdtype(L, i);
        } else if (lua_istable(L, i)) {
            static const char *const opts[] = {"dtype",         "device", "non_blocking",
                                               "memory_format", "copy",   NULL};
            dlL_checkoptions(L, i, "to", opts);
            if (dlL_optfield(L, i, "dtype") != LUA_TNIL) s.dtype = dlL_checkdtype(L, -1);
            lua_pop(L, 1);
            if (dlL_optfield(L, i, "device") != LUA_TNIL) {
                dl_device d;
                const char *name = lua_tostring(L, -1);
                if (!name || lua_type(L, -1) != LUA_TSTRING)
                    luaL_error(L, "to: option 'device' must be a string such as \"cuda:0\"");
                if (parse_device(name, &d)) dlL_fail(L);
                s.dev = d;
            }
            lua_pop(L, 1);
            if (dlL_optfield(L, i, "memory_format") != LUA_TNIL)
                check_memory_format(L, -1, "to", &s.channels_last);
            lua_pop(L, 1);
            s.non_blocking = dlL_optboolean(L, i, "non_blocking", s.non_blocking);
        } else if (dlL_totensor(L, i)) {
            dl_tensor *o = dlL_totensor(L, i);
            s.dtype = o->dtype;
            s.dev = dl_tensor_device(o);
        } else {
            luaL_argerror(L, i, "dtype, device or options table expected");
        }
    }
    return s;
}

/* A pinned, contiguous CPU tensor without a graph, copied to a CUDA device
 * on the copy stream: the host goes on at once. */
static dl_tensor *copy_async(dl_tensor *t, dl_device dev) {
    dl_tensor *out = dl_tensor_empty(t->ndim, t->shape, t->dtype, dev);
    if (!out) return NULL;
    void *done = NULL;
    if (dl_tensor_numel(t) > 0 && dl_cuda_rt->copy_async(out, t, &done)) {
        dl_tensor_release(out);
        return NULL;
    }
    host_block *b = t->storage->deleter_ctx;
    /* an earlier copy from the same block ends before this one (one copy stream) */
    if (b->done) dl_cuda_rt->event_free(b->done);
    b->done = done;
    return out;
}

/* t as the spec says; a new reference (t itself when nothing changes). */
static dl_tensor *apply_to(lua_State *L, const char *op, dl_tensor *t, const to_spec *s) {
    check_device(L, op, s->dev);
    dl_tensor *a;
    bool async = s->non_blocking && s->dev.type == DL_DEVICE_CUDA && is_pinned(t) &&
                 dl_tensor_is_contiguous(t) && !dl_needs_grad1(t);
    if (async) {
        dl_tensor *m = copy_async(t, s->dev);
        a = m ? dl_to_dtype(m, s->dtype) : NULL;
        dl_tensor_release(m);
    } else if (dl_tensor_device(t).type == DL_DEVICE_CPU && s->dev.type == DL_DEVICE_CUDA &&
               dl_tensor_itemsize(t) < dl_dtype_size(s->dtype)) {
        /* widening (uint8 images to float): move the narrow type, convert there */
        dl_tensor *m = dl_to_device(t, s->dev);
        a = m ? dl_to_dtype(m, s->dtype) : NULL;
        dl_tensor_release(m);
    } else {
        dl_tensor *m = dl_to_dtype(t, s->dtype);
        a = m ? dl_to_device(m, s->dev) : NULL;
        dl_tensor_release(m);
    }
    if (a && s->channels_last) {
        dl_tensor *c = dl_contiguous_channels_last(a);
        dl_tensor_release(a);
        a = c;
    }
    return a;
}

static int t_to(lua_State *L) {
    dl_tensor *t = dlL_checktensor(L, 1);
    to_spec s = parse_to(L, t);
    return dlL_pushtensor(L, apply_to(L, "to", t, &s));
}

/* t:cuda([device] [, {non_blocking=}]): device an ordinal or "cuda:N", the
 * current one when absent. */
static int t_cuda(lua_State *L) {
    dl_tensor *t = dlL_checktensor(L, 1);
    int top = lua_gettop(L), dev_arg = 0, opt_arg = 0;
    if (top >= 2 && lua_istable(L, 2)) {
        opt_arg = 2;
    } else if (top >= 2) {
        dev_arg = lua_isnil(L, 2) ? 0 : 2;
        opt_arg = top >= 3 ? 3 : 0;
    }
    static const char *const names[] = {"non_blocking", "device", NULL};
    if (opt_arg) dlL_checkoptions(L, opt_arg, "cuda", names);
    to_spec s = {t->dtype, DL_CPU, false, false};
    s.non_blocking = opt_arg && dlL_optboolean(L, opt_arg, "non_blocking", 0);
    if (opt_arg && !dev_arg && dlL_optfield(L, opt_arg, "device") != LUA_TNIL)
        dev_arg = lua_gettop(L); /* the field's value, left on the stack */
    s.dev = (dl_device){DL_DEVICE_CUDA, opt_ordinal(L, dev_arg, "cuda")};
    return dlL_pushtensor(L, apply_to(L, "cuda", t, &s));
}

static int t_cpu(lua_State *L) {
    dl_tensor *t = dlL_checktensor(L, 1);
    return dlL_pushtensor(L, dl_to_device(t, DL_CPU));
}

static int t_is_cuda(lua_State *L) {
    lua_pushboolean(L, dl_tensor_device(dlL_checktensor(L, 1)).type == DL_DEVICE_CUDA);
    return 1;
}

/* dl.cuda's __index: graph and graphed from "dl.cuda_graphs". */
static int cuda_index(lua_State *L) {
    const char *k = lua_tostring(L, 2);
    if (!k || (strcmp(k, "graph") != 0 && strcmp(k, "graphed") != 0)) return 0;
    lua_getglobal(L, "require");
    lua_pushliteral(L, "dl.cuda_graphs");
    lua_call(L, 1, 1);
    lua_getfield(L, -1, k);
    return 1;
}

/* --- registration ---------------------------------------------------------------- */

void dlL_open_cuda(lua_State *L);

void dlL_open_cuda(lua_State *L) {
    static const luaL_Reg methods[] = {
        {"to", t_to},
        {"cuda", t_cuda},
        {"cpu", t_cpu},
        {"is_cuda", t_is_cuda},
        {"pin_memory", t_pin_memory},
        {"is_pinned", t_is_pinned},
        {NULL, NULL},
    };
    dlL_register(L, NULL, methods);

    static const luaL_Reg event_methods[] = {
        {"record", event_record},
        {"synchronize", event_synchronize},
        {"elapsed_time", event_elapsed},
        {NULL, NULL},
    };
    static const luaL_Reg event_meta[] = {
        {"__gc", event_gc},
        {"__tostring", event_tostring},
        {NULL, NULL},
    };
    dlL_newclass(L, EVENT_MT, event_meta, event_methods);

    static const luaL_Reg cuda[] = {
        {"is_available", l_is_available},
        {"device_count", l_device_count},
        {"get_device_name", l_get_device_name},
        {"set_device", l_set_device},
        {"current_device", l_current_device},
        {"synchronize", l_synchronize},
        {"manual_seed", l_manual_seed},
        {"manual_seed_all", l_manual_seed},
        {"memory_allocated", l_memory_allocated},
        {"memory_reserved", l_memory_reserved},
        {"max_memory_allocated", l_max_memory_allocated},
        {"reset_peak_memory_stats", l_reset_peak_memory_stats},
        {"empty_cache", l_empty_cache},
        {"Event", l_event_new},
        {"sync_count", l_sync_count},
        {"_sync_reasons", l_sync_reasons},
        {"is_current_stream_capturing", l_is_capturing},
        {"CUDAGraph", l_graph_new},
        {"_capturing_graph", l_capturing_graph},
        {NULL, NULL},
    };
    static const luaL_Reg graph_methods[] = {
        {"capture_begin", graph_capture_begin},
        {"capture_end", graph_capture_end},
        {"replay", graph_replay},
        {"reset", graph_reset},
        {"_add_replay_hook", graph_add_hook},
        {NULL, NULL},
    };
    static const luaL_Reg graph_meta[] = {
        {"__gc", graph_gc},
        {"__tostring", graph_tostring},
        {NULL, NULL},
    };
    dlL_newclass(L, GRAPH_MT, graph_meta, graph_methods);

    lua_getfield(L, LUA_REGISTRYINDEX, DL_MODULE_KEY);
    luaL_newlib(L, cuda);
    lua_pushboolean(L, dl_cuda_compiled());
    lua_setfield(L, -2, "compiled");
    /* graph() and graphed() are Lua (lua/dl/cuda_graphs.lua), loaded on first use */
    lua_createtable(L, 0, 1);
    lua_pushcfunction(L, cuda_index);
    lua_setfield(L, -2, "__index");
    lua_setmetatable(L, -2);
    lua_setfield(L, -2, "cuda");

    push_backends_table(L, NULL);
    lua_pushliteral(L, "cudnn");
    push_backends_table(L, "cudnn");
    lua_rawset(L, -3); /* raw: past __newindex */
    lua_pushliteral(L, "cuda");
    push_backends_table(L, "cuda");
    lua_rawset(L, -3);
    lua_setfield(L, -2, "backends");
    lua_pop(L, 1);
}
