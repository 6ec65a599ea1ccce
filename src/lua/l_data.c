/* l_data.c - bindings for data loading: the hidden dl._data table that
 * lua/dl/data.lua builds on - ImageFolder file indexes, the threaded loader,
 * epoch permutations and IDX files.
 *
 * Lua sees 1-based sample positions and class labels; the C side (src/data)
 * is 0-based and the conversion happens here.  A loader userdata is created
 * before the C loader, so __gc always runs; __gc, __close and close() stop
 * and join the worker threads. */
#include "l_bind.h"
#include "core/rng.h"
#include "data/folder.h"
#include "data/loader.h"
#include "io/codec.h"
#include "io/idx.h"
#include "io/pipeline.h"

#include <stdlib.h>
#include <string.h>

#define DL_INDEX_MT "dl.FileIndex"
#define DL_LOADER_MT "dl.Loader"

/* --- file indexes --------------------------------------------------------------- */

static dl_file_index *check_index(lua_State *L, int idx) {
    return dlL_checkbox(L, idx, DL_INDEX_MT, "dataset index used after it was freed");
}

static void push_index(lua_State *L, dl_file_index *ix) {
    dl_file_index **box = lua_newuserdatauv(L, sizeof *box, 0);
    *box = ix;
    luaL_setmetatable(L, DL_INDEX_MT);
}

static int ix_gc(lua_State *L) {
    dl_file_index **box = luaL_checkudata(L, 1, DL_INDEX_MT);
    dl_file_index_release(*box);
    *box = NULL;
    return 0;
}

/* _data.scan(root, {".jpg", ...}) */
static int l_scan(lua_State *L) {
    const char *root = luaL_checkstring(L, 1);
    luaL_checktype(L, 2, LUA_TTABLE);
    int n = (int)luaL_len(L, 2);
    if (n < 1 || n > 64) return luaL_error(L, "ImageFolder: extensions must list 1 to 64 entries");
    const char *exts[64];
    for (int i = 0; i < n; i++) {
        lua_geti(L, 2, i + 1);
        exts[i] = lua_tostring(L, -1);
        if (!exts[i]) return luaL_error(L, "ImageFolder: extensions must be strings");
        lua_pop(L, 1); /* the string stays alive in the table */
    }
    dl_file_index *ix = dl_folder_scan(root, n, exts);
    if (!ix) return dlL_fail(L);
    push_index(L, ix);
    return 1;
}

/* _data.files({path, ...}, {label, ...}) - labels 1-based */
static int l_files(lua_State *L) {
    luaL_checktype(L, 1, LUA_TTABLE);
    luaL_checktype(L, 2, LUA_TTABLE);
    lua_Integer n = luaL_len(L, 1);
    if (luaL_len(L, 2) != n)
        return luaL_error(L, "dataset: %d paths but %d labels", (int)n, (int)luaL_len(L, 2));
    const char **paths = lua_newuserdatauv(L, sizeof(char *) * (size_t)(n ? n : 1), 0);
    int64_t *labels = lua_newuserdatauv(L, sizeof(int64_t) * (size_t)(n ? n : 1), 0);
    for (lua_Integer i = 0; i < n; i++) {
        lua_geti(L, 1, i + 1);
        paths[i] = lua_tostring(L, -1);
        if (!paths[i]) return luaL_error(L, "dataset: path %d is not a string", (int)i + 1);
        lua_pop(L, 1);
        lua_geti(L, 2, i + 1);
        if (!lua_isinteger(L, -1))
            return luaL_error(L, "dataset: label %d is not an integer", (int)i + 1);
        labels[i] = (int64_t)lua_tointeger(L, -1) - 1;
        lua_pop(L, 1);
    }
    dl_file_index *ix = dl_file_index_new(n, paths, labels);
    if (!ix) return dlL_fail(L);
    push_index(L, ix);
    return 1;
}

static int ix_len(lua_State *L) {
    lua_pushinteger(L, check_index(L, 1)->n);
    return 1;
}

static int64_t check_pos(lua_State *L, dl_file_index *ix, int arg) {
    lua_Integer i = luaL_checkinteger(L, arg);
    if (i < 1 || i > ix->n)
        return luaL_error(L, "dataset: index %d out of range (dataset of %d samples)", (int)i,
                          (int)ix->n);
    return (int64_t)i - 1;
}

static int ix_path(lua_State *L) {
    dl_file_index *ix = check_index(L, 1);
    lua_pushstring(L, ix->paths[check_pos(L, ix, 2)]);
    return 1;
}

static int ix_label(lua_State *L) {
    dl_file_index *ix = check_index(L, 1);
    lua_pushinteger(L, ix->labels[check_pos(L, ix, 2)] + 1);
    return 1;
}

static int ix_classes(lua_State *L) {
    dl_file_index *ix = check_index(L, 1);
    lua_createtable(L, ix->nclasses, 0);
    for (int i = 0; i < ix->nclasses; i++) {
        lua_pushstring(L, ix->classes[i]);
        lua_rawseti(L, -2, i + 1);
    }
    return 1;
}

/* ix:labels() -> int64 tensor of 1-based labels */
static int ix_labels(lua_State *L) {
    dl_file_index *ix = check_index(L, 1);
    dl_tensor *t = dl_tensor_empty(1, &ix->n, DL_DTYPE_I64, DL_CPU);
    if (!t) return dlL_fail(L);
    for (int64_t i = 0; i < ix->n; i++) ((int64_t *)t->storage->data)[i] = ix->labels[i] + 1;
    return dlL_pushtensor(L, t);
}

/* ix:load(i [, pipe [, channels]]) -> the sample's image, on this thread */
static int ix_load(lua_State *L) {
    dl_file_index *ix = check_index(L, 1);
    int64_t i = check_pos(L, ix, 2);
    dl_pipeline *p = lua_isnoneornil(L, 3) ? NULL : dlL_topipeline(L, 3);
    if (!lua_isnoneornil(L, 3) && !p) return luaL_argerror(L, 3, "transform pipeline expected");
    int channels = (int)luaL_optinteger(L, 4, 3);
    if (channels != 1 && channels != 3) return luaL_argerror(L, 4, "channels must be 1 or 3");
    uint8_t *buf;
    size_t n;
    if (dl_file_read(ix->paths[i], &buf, &n)) return dlL_fail(L);
    dl_tensor *out = NULL;
    int rc;
    if (p) {
        dl_sample_rng rng;
        dl_sample_rng_from_generator(&rng, dl_default_generator());
        rc = dl_pipeline_run_encoded(p, buf, n, ix->paths[i], channels, &rng, NULL, NULL, &out);
        dl_sample_rng_free(&rng);
    } else {
        dl_pipeline *empty = dl_pipeline_new(0, NULL);
        dl_sample_rng rng;
        dl_sample_rng_from_generator(&rng, dl_default_generator());
        rc = empty ? dl_pipeline_run_encoded(empty, buf, n, ix->paths[i], channels, &rng, NULL,
                                             NULL, &out)
                   : -1;
        dl_pipeline_release(empty);
    }
    free(buf);
    if (rc) return dlL_fail(L);
    return dlL_pushtensor(L, out);
}

/* --- loaders ----------------------------------------------------------------------- */

typedef struct {
    dl_loader *l;
} loader_box;

static loader_box *check_loader(lua_State *L, int idx) {
    loader_box *b = luaL_checkudata(L, idx, DL_LOADER_MT);
    if (!b->l) luaL_error(L, "DataLoader used after it was closed");
    return b;
}

static int ld_close(lua_State *L) {
    loader_box *b = luaL_checkudata(L, 1, DL_LOADER_MT);
    if (b->l) {
        dl_loader_free(b->l);
        b->l = NULL;
    }
    return 0;
}

/* _data.loader(index, opts) */
static int l_loader(lua_State *L) {
    dl_file_index *ix = check_index(L, 1);
    static const char *const keys[] = {"map",     "pipe",        "channels", "batch_size",
                                       "shuffle", "drop_last",   "skip_bad", "per_sample",
                                       "seed",    "num_workers", "prefetch", NULL};
    luaL_checktype(L, 2, LUA_TTABLE);
    dlL_checkoptions(L, 2, "DataLoader", keys);
    dl_loader_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.index = ix;
    cfg.n = ix->n;
    cfg.channels = (int)dlL_optinteger(L, 2, "channels", 3);
    cfg.batch_size = dlL_optinteger(L, 2, "batch_size", 1);
    cfg.shuffle = dlL_optboolean(L, 2, "shuffle", 0);
    cfg.drop_last = dlL_optboolean(L, 2, "drop_last", 0);
    cfg.skip_bad = dlL_optboolean(L, 2, "skip_bad", 0);
    cfg.per_sample = dlL_optboolean(L, 2, "per_sample", 0);
    cfg.seed = (uint64_t)dlL_optinteger(L, 2, "seed", 0);
    lua_Integer nw = dlL_optinteger(L, 2, "num_workers", 0),
                pf = dlL_optinteger(L, 2, "prefetch", 2);
    if (nw < 0 || nw > 256)
        return luaL_error(L, "DataLoader: num_workers must be in 0..256, got %d", (int)nw);
    if (pf < 1 || pf > 1024)
        return luaL_error(L, "DataLoader: prefetch must be in 1..1024, got %d", (int)pf);
    cfg.num_workers = (int)nw;
    cfg.prefetch = (int)pf;
    if (dlL_optfield(L, 2, "pipe") != LUA_TNIL) {
        cfg.pipe = dlL_topipeline(L, -1);
        if (!cfg.pipe) return luaL_error(L, "DataLoader: pipe must be a transform pipeline");
    }
    lua_pop(L, 1);
    int64_t *map = NULL;
    if (dlL_optfield(L, 2, "map") != LUA_TNIL) {
        luaL_checktype(L, -1, LUA_TTABLE);
        lua_Integer n = luaL_len(L, -1);
        map = lua_newuserdatauv(L, sizeof(int64_t) * (size_t)(n ? n : 1), 0);
        for (lua_Integer i = 0; i < n; i++) {
            lua_geti(L, -2, i + 1);
            if (!lua_isinteger(L, -1))
                return luaL_error(L, "DataLoader: subset indices must be integers");
            map[i] = (int64_t)lua_tointeger(L, -1) - 1;
            lua_pop(L, 1);
        }
        cfg.map = map;
        cfg.n = n;
    }
    loader_box *b = lua_newuserdatauv(L, sizeof *b, 0);
    b->l = NULL;
    luaL_setmetatable(L, DL_LOADER_MT);
    b->l = dl_loader_new(&cfg);
    if (!b->l) return dlL_fail(L);
    return 1;
}

static int ld_start(lua_State *L) {
    loader_box *b = check_loader(L, 1);
    lua_Integer e = luaL_checkinteger(L, 2);
    return dlL_done(L, dl_loader_start(b->l, (uint64_t)e));
}

static int ld_stop(lua_State *L) {
    loader_box *b = luaL_checkudata(L, 1, DL_LOADER_MT);
    if (b->l) dl_loader_stop(b->l);
    return 0;
}

static int ld_num_batches(lua_State *L) {
    lua_pushinteger(L, dl_loader_num_batches(check_loader(L, 1)->l));
    return 1;
}

static void add_one(dl_tensor *t) {
    if (!t) return;
    int64_t n = dl_tensor_numel(t);
    int64_t *p = t->storage->data;
    for (int64_t i = 0; i < n; i++) p[i] += 1;
}

/* ld:next() -> batch_number, data|items, labels, indices, warnings | nil */
static int ld_next(lua_State *L) {
    loader_box *b = check_loader(L, 1);
    dl_loader_batch bt;
    int rc = dl_loader_next(b->l, &bt);
    if (rc < 0) return dlL_fail(L);
    if (rc == 0) {
        lua_pushnil(L);
        return 1;
    }
    /* move everything onto the Lua stack before anything can raise */
    lua_pushinteger(L, bt.index + 1);
    if (bt.items) {
        lua_createtable(L, (int)bt.nitems, 0);
        for (int64_t i = 0; i < bt.nitems; i++) {
            dlL_pushtensor(L, bt.items[i]);
            bt.items[i] = NULL;
            lua_rawseti(L, -2, i + 1);
        }
    } else if (bt.data) {
        dlL_pushtensor(L, bt.data);
        bt.data = NULL;
    } else {
        lua_pushnil(L); /* every sample of the batch was skipped */
    }
    add_one(bt.labels);
    add_one(bt.indices);
    dl_tensor *labels = bt.labels, *indices = bt.indices;
    bt.labels = bt.indices = NULL;
    int nwarn = bt.nwarn;
    char **warn = bt.warnings;
    bt.warnings = NULL;
    bt.nwarn = 0;
    dl_loader_batch_clear(&bt);
    lua_createtable(L, nwarn, 0);
    for (int i = 0; i < nwarn; i++) {
        lua_pushstring(L, warn[i]);
        lua_rawseti(L, -2, i + 1);
        free(warn[i]);
    }
    free(warn);
    int wt = lua_gettop(L);
    dlL_pushtensor(L, labels);
    dlL_pushtensor(L, indices);
    lua_pushvalue(L, wt);
    lua_remove(L, wt);
    return 5;
}

/* _data.randperm(n, seed, epoch) -> int64 tensor of 1..n in the loader's order */
static int l_randperm(lua_State *L) {
    lua_Integer n = luaL_checkinteger(L, 1);
    lua_Integer seed = luaL_checkinteger(L, 2), epoch = luaL_checkinteger(L, 3);
    if (n < 0) return luaL_error(L, "randperm: n must be non-negative");
    int64_t nn = n;
    dl_tensor *t = dl_tensor_empty(1, &nn, DL_DTYPE_I64, DL_CPU);
    if (!t) return dlL_fail(L);
    dl_loader_permutation(nn, (uint64_t)seed, (uint64_t)epoch, t->storage->data);
    add_one(t);
    return dlL_pushtensor(L, t);
}

/* _data.seed() -> a seed drawn from the default generator */
static int l_seed(lua_State *L) {
    dl_generator *g = dl_default_generator();
    uint32_t w[4];
    dl_philox4x32(g->seed, dl_generator_reserve(g, 1), w);
    lua_pushinteger(L, (lua_Integer)(((uint64_t)w[0] << 31) ^ w[1]));
    return 1;
}

static int l_idx_read(lua_State *L) {
    return dlL_pushtensor(L, dl_idx_read(luaL_checkstring(L, 1)));
}

static int l_idx_write(lua_State *L) {
    const char *path = luaL_checkstring(L, 1);
    dl_tensor *t = dlL_checktensor(L, 2);
    return dlL_done(L, dl_idx_write(path, t, lua_toboolean(L, 3)));
}

/* _data.listdir(path) -> {folder names}, {other names}, both sorted */
static int l_listdir(lua_State *L) {
    const char *dir = luaL_checkstring(L, 1);
    char **d, **f;
    int64_t nd, nf;
    if (dl_folder_list(dir, "listdir", &d, &nd, &f, &nf)) return dlL_fail(L);
    if (!lua_checkstack(L, 4)) {
        dl_folder_list_free(d, nd);
        dl_folder_list_free(f, nf);
        return luaL_error(L, "listdir: out of stack");
    }
    char **lists[2] = {d, f};
    int64_t counts[2] = {nd, nf};
    for (int k = 0; k < 2; k++) {
        lua_createtable(L, 0, 0); /* a memory error here leaks the names, as any OOM */
        for (int64_t i = 0; i < counts[k]; i++) {
            lua_pushstring(L, lists[k][i]);
            lua_rawseti(L, -2, (lua_Integer)i + 1);
        }
    }
    dl_folder_list_free(d, nd);
    dl_folder_list_free(f, nf);
    return 2;
}

void dlL_open_data(lua_State *L) {
    lua_getfield(L, LUA_REGISTRYINDEX, DL_MODULE_KEY);
    int mod = lua_gettop(L);

    static const luaL_Reg ixmeta[] = {{"__gc", ix_gc}, {"__len", ix_len}, {NULL, NULL}};
    static const luaL_Reg ixmethods[] = {{"path", ix_path},       {"label", ix_label},
                                         {"classes", ix_classes}, {"labels", ix_labels},
                                         {"load", ix_load},       {NULL, NULL}};
    dlL_newclass(L, DL_INDEX_MT, ixmeta, ixmethods);

    static const luaL_Reg ldmeta[] = {{"__gc", ld_close}, {"__close", ld_close}, {NULL, NULL}};
    static const luaL_Reg ldmethods[] = {{"start", ld_start},
                                         {"next", ld_next},
                                         {"stop", ld_stop},
                                         {"close", ld_close},
                                         {"num_batches", ld_num_batches},
                                         {NULL, NULL}};
    dlL_newclass(L, DL_LOADER_MT, ldmeta, ldmethods);

    static const luaL_Reg fns[] = {
        {"scan", l_scan},           {"files", l_files},     {"loader", l_loader},
        {"randperm", l_randperm},   {"seed", l_seed},       {"idx_read", l_idx_read},
        {"idx_write", l_idx_write}, {"listdir", l_listdir}, {NULL, NULL},
    };
    luaL_newlib(L, fns);
    lua_setfield(L, mod, "_data");
    lua_pop(L, 1);
}
