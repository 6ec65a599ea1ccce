/* dnnl_util.c - oneDNN engine, streams, status checks and the primitive cache
 * (see dnnl_util.h).
 *
 * The cache is a small array scanned linearly under a mutex: entries are few
 * (one per distinct layer configuration) and a lookup is negligible next to
 * the primitive it guards.  When full, the least recently used entry that no
 * thread holds is evicted; if every entry is held the new one is still added
 * (the array grows past the capacity only in that rare case).
 * Invariants: entries are created and destroyed only under the mutex; an
 * entry's primitives are destroyed when it is neither cached nor held; every
 * primitive takes its scratchpad from the executing thread (see below). */
#include "dnnl_util.h"
#include "core/error.h"
#include "core/parallel.h"
#include "core/storage.h"

#include <oneapi/dnnl/dnnl_debug.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* --- engine and streams ---------------------------------------------------- */

static dnnl_engine_t engine;
static dnnl_status_t engine_status = dnnl_success;
static pthread_once_t engine_once = PTHREAD_ONCE_INIT;

static void engine_init(void) {
    engine_status = dnnl_engine_create(&engine, dnnl_cpu, 0);
    if (engine_status != dnnl_success) engine = NULL;
}

dnnl_engine_t dl_dnnl_engine(void) {
    pthread_once(&engine_once, engine_init);
    if (!engine) DL_DNNL(engine_status);
    return engine;
}

/* One stream per thread, kept for the thread's life (a few hundred bytes). */
static _Thread_local dnnl_stream_t thread_stream;

dnnl_stream_t dl_dnnl_stream(void) {
    if (thread_stream) return thread_stream;
    dnnl_engine_t e = dl_dnnl_engine();
    if (!e) return NULL;
    if (DL_DNNL(dnnl_stream_create(&thread_stream, e, dnnl_stream_default_flags))) {
        thread_stream = NULL;
        return NULL;
    }
    return thread_stream;
}

int dl_dnnl_check(dnnl_status_t st, const char *call, const char *file, int line) {
    if (st == dnnl_success) return 0;
    const char *base = strrchr(file, '/');
    base = base ? base + 1 : file;
    /* the call text can be long: keep its function name only */
    char fn[64];
    size_t n = strcspn(call, "(");
    if (n >= sizeof fn) n = sizeof fn - 1;
    memcpy(fn, call, n);
    fn[n] = '\0';
    return dl_error("oneDNN: %s failed: %s (%s:%d)", fn, dnnl_status2str(st), base, line);
}

int dl_dnnl_md(dnnl_memory_desc_t *md, int ndims, const int64_t *dims, dnnl_format_tag_t tag) {
    dnnl_dims_t d;
    for (int i = 0; i < ndims; i++) d[i] = dims[i];
    return DL_DNNL(dnnl_memory_desc_init_by_tag(md, ndims, d, dnnl_f32, tag));
}

/* --- the cache ------------------------------------------------------------------ */

static pthread_mutex_t cache_mu = PTHREAD_MUTEX_INITIALIZER;
static dl_dnnl_entry **cache;
static int cache_n, cache_cap;
static uint64_t cache_tick;

static void entry_destroy(dl_dnnl_entry *e) {
    if (!e) return;
    for (int i = 0; i < DL_DNNL_MAX_PRIMS; i++) {
        if (e->prim[i]) dnnl_primitive_destroy(e->prim[i]);
        if (e->pd[i]) dnnl_primitive_desc_destroy(e->pd[i]);
    }
    if (e->user && e->free_user) e->free_user(e->user);
    free(e);
}

/* Removes the least recently used entry nobody holds; false when none. */
static int evict_one(void) {
    int victim = -1;
    for (int i = 0; i < cache_n; i++)
        if (cache[i]->refs == 0 && (victim < 0 || cache[i]->last_use < cache[victim]->last_use))
            victim = i;
    if (victim < 0) return 0;
    entry_destroy(cache[victim]);
    cache[victim] = cache[--cache_n];
    return 1;
}

dl_dnnl_entry *dl_dnnl_cache_get(const char *op_key, dl_dnnl_build_fn build, const void *ctx) {
    /* primitives size their scratch for the threads they were made for */
    char key[DL_DNNL_KEY_LEN];
    if (snprintf(key, sizeof key, "%s t%d", op_key, dl_get_num_threads()) >= (int)sizeof key) {
        dl_error("oneDNN: primitive cache key too long (%s)", op_key);
        return NULL;
    }
    pthread_mutex_lock(&cache_mu);
    for (int i = 0; i < cache_n; i++)
        if (strcmp(cache[i]->key, key) == 0) {
            dl_dnnl_entry *e = cache[i];
            e->refs++;
            e->last_use = ++cache_tick;
            pthread_mutex_unlock(&cache_mu);
            return e;
        }
    /* a miss: build under the lock (simple; builds are rare) */
    dl_dnnl_entry *e = calloc(1, sizeof *e);
    if (!e) {
        pthread_mutex_unlock(&cache_mu);
        dl_error("oneDNN: out of memory for a cache entry");
        return NULL;
    }
    strcpy(e->key, key);
    if (build(e, ctx)) {
        entry_destroy(e);
        pthread_mutex_unlock(&cache_mu);
        return NULL;
    }
    while (cache_n >= DL_DNNL_CACHE_CAPACITY && evict_one()) {
    }
    if (cache_n == cache_cap) {
        int cap = cache_cap ? cache_cap * 2 : DL_DNNL_CACHE_CAPACITY;
        dl_dnnl_entry **c = realloc(cache, sizeof *c * (size_t)cap);
        if (!c) {
            entry_destroy(e);
            pthread_mutex_unlock(&cache_mu);
            dl_error("oneDNN: out of memory growing the primitive cache");
            return NULL;
        }
        cache = c;
        cache_cap = cap;
    }
    e->refs = 1;
    e->last_use = ++cache_tick;
    cache[cache_n++] = e;
    pthread_mutex_unlock(&cache_mu);
    return e;
}

void dl_dnnl_cache_put(dl_dnnl_entry *e) {
    if (!e) return;
    pthread_mutex_lock(&cache_mu);
    e->refs--;
    pthread_mutex_unlock(&cache_mu);
}

int dl_dnnl_cache_size(void) {
    pthread_mutex_lock(&cache_mu);
    int n = cache_n;
    pthread_mutex_unlock(&cache_mu);
    return n;
}

/* --- scratchpads ----------------------------------------------------------------
 * Every primitive is created with a user-managed scratchpad that
 * dl_dnnl_execute supplies from a buffer of the executing thread.  oneDNN's
 * default (library-managed) scratchpad is tied to thread-local storage of the
 * thread that created the primitive, so a cached primitive executed by two
 * threads at once (two embedded Lua states, data-loader threads) shared or
 * missed it and crashed. */

static pthread_key_t scratch_key;
static int scratch_key_ok;
static pthread_once_t scratch_once = PTHREAD_ONCE_INIT;
static _Thread_local void *scratch_buf;
static _Thread_local size_t scratch_size;

static void scratch_key_init(void) {
    scratch_key_ok = pthread_key_create(&scratch_key, free) == 0;
}

/* This thread's scratch buffer of at least n bytes (freed when the thread
 * ends).  Long-lived and freed with free(), so not from the block cache. */
static void *thread_scratch(size_t n) {
    if (n <= scratch_size) return scratch_buf;
    pthread_once(&scratch_once, scratch_key_init);
    void *p = aligned_alloc(64, (n + 63) & ~(size_t)63);
    if (!p) {
        dl_error("oneDNN scratchpad: out of memory (%zu bytes)", n);
        return NULL;
    }
    free(scratch_buf);
    scratch_buf = p;
    scratch_size = n;
    if (scratch_key_ok) pthread_setspecific(scratch_key, p); /* else kept until exit */
    return p;
}

/* An attribute asking for a user-managed scratchpad; NULL with an error. */
static dnnl_primitive_attr_t user_scratchpad_attr(void) {
    dnnl_primitive_attr_t attr;
    if (DL_DNNL(dnnl_primitive_attr_create(&attr))) return NULL;
    if (DL_DNNL(dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user))) {
        dnnl_primitive_attr_destroy(attr);
        return NULL;
    }
    return attr;
}

/* Appends to attr the post-ops sum (scale 1) when sum, then ReLU when relu. */
static int set_post_ops(dnnl_primitive_attr_t attr, int sum, int relu) {
    if (!sum && !relu) return 0;
    dnnl_post_ops_t po;
    if (DL_DNNL(dnnl_post_ops_create(&po))) return -1;
    int rc = (sum && DL_DNNL(dnnl_post_ops_append_sum(po, 1.0f))) ||
             (relu && DL_DNNL(dnnl_post_ops_append_eltwise(po, 1.0f, dnnl_eltwise_relu, 0, 0))) ||
             DL_DNNL(dnnl_primitive_attr_set_post_ops(attr, po));
    dnnl_post_ops_destroy(po);
    return rc ? -1 : 0;
}

int dl_dnnl_entry_add(dl_dnnl_entry *e, int i, const_dnnl_op_desc_t desc,
                      const_dnnl_primitive_desc_t hint, int make_prim) {
    return dl_dnnl_entry_add_post(e, i, desc, hint, make_prim, 0, 0);
}

int dl_dnnl_entry_add_post(dl_dnnl_entry *e, int i, const_dnnl_op_desc_t desc,
                           const_dnnl_primitive_desc_t hint, int make_prim, int sum, int relu) {
    dnnl_engine_t eng = dl_dnnl_engine();
    if (!eng) return -1;
    dnnl_primitive_attr_t attr = user_scratchpad_attr();
    if (!attr) return -1;
    if (set_post_ops(attr, sum, relu)) {
        dnnl_primitive_attr_destroy(attr);
        return -1;
    }
    dnnl_status_t st = dnnl_primitive_desc_create(&e->pd[i], desc, attr, eng, hint);
    dnnl_primitive_attr_destroy(attr);
    if (DL_DNNL(st)) {
        e->pd[i] = NULL;
        return -1;
    }
    if (make_prim && DL_DNNL(dnnl_primitive_create(&e->prim[i], e->pd[i]))) {
        e->prim[i] = NULL;
        return -1;
    }
    return 0;
}

int dl_dnnl_entry_add_reorder(dl_dnnl_entry *e, int i, const dnnl_memory_desc_t *from,
                              const dnnl_memory_desc_t *to) {
    dnnl_engine_t eng = dl_dnnl_engine();
    if (!eng) return -1;
    dnnl_primitive_attr_t attr = user_scratchpad_attr();
    if (!attr) return -1;
    dnnl_status_t st = dnnl_reorder_primitive_desc_create(&e->pd[i], from, eng, to, eng, attr);
    dnnl_primitive_attr_destroy(attr);
    if (DL_DNNL(st)) {
        e->pd[i] = NULL;
        return -1;
    }
    if (DL_DNNL(dnnl_primitive_create(&e->prim[i], e->pd[i]))) {
        e->prim[i] = NULL;
        return -1;
    }
    return 0;
}

/* --- execution: memory objects ---------------------------------------------
 * Every execution wraps each buffer in a dnnl_memory_t (ResNet-50 at batch
 * 1: about 300 a forward, 0.6 us each made and destroyed).  A thread keeps
 * the last one made for a descriptor (slots by the descriptor's address:
 * mostly a cache entry's or a primitive's, stable while it lives) and
 * re-points it at the next buffer.  An address may have been reused by
 * another descriptor since (an entry evicted, a descriptor on a caller's
 * stack): the memory's own descriptor is compared before reuse.  The spares
 * die with their thread. */

#define SPARES 1024 /* a slot per descriptor of a whole model's layers */
typedef struct {
    const dnnl_memory_desc_t *md;
    dnnl_memory_t m;
} spare_mem;

static _Thread_local spare_mem spares[SPARES];
static _Thread_local bool spares_registered; /* with spares_key, for the thread's exit */
static pthread_key_t spares_key;
static int spares_key_ok;
static pthread_once_t spares_once = PTHREAD_ONCE_INIT;

static void spares_free(void *v) {
    spare_mem *sp = v;
    for (int i = 0; i < SPARES; i++) {
        if (sp[i].m) dnnl_memory_destroy(sp[i].m);
        sp[i].m = NULL;
        sp[i].md = NULL;
    }
}

static void spares_key_init(void) {
    spares_key_ok = pthread_key_create(&spares_key, spares_free) == 0;
}

static spare_mem *spare_slot(const dnnl_memory_desc_t *md) {
    uint64_t h =
        (uint64_t)(uintptr_t)md * 0x9E3779B97F4A7C15u; /* descriptors lie a fixed size apart */
    return &spares[h >> 54];
}

/* A memory object for md over data: this thread's spare when it has one for
 * md, else a new one.  NULL with an error on failure. */
static dnnl_memory_t take_memory(const dnnl_memory_desc_t *md, void *data) {
    spare_mem *sp = spare_slot(md);
    if (sp->m && sp->md == md) {
        dnnl_memory_t m = sp->m;
        const dnnl_memory_desc_t *own;
        sp->m = NULL;
        if (dnnl_memory_get_memory_desc(m, &own) == dnnl_success &&
            dnnl_memory_desc_equal(own, md) && dnnl_memory_set_data_handle(m, data) == dnnl_success)
            return m;
        dnnl_memory_destroy(m);
    }
    dnnl_engine_t eng = dl_dnnl_engine();
    if (!eng) return NULL;
    dnnl_memory_t m;
    if (DL_DNNL(dnnl_memory_create(&m, md, eng, data))) return NULL;
    return m;
}

/* Keeps m (made for md) as this thread's spare for md, or destroys it. */
static void give_memory(const dnnl_memory_desc_t *md, dnnl_memory_t m) {
    spare_mem *sp = spare_slot(md);
    if (sp->m) dnnl_memory_destroy(sp->m);
    if (!spares_registered) {
        pthread_once(&spares_once, spares_key_init);
        if (spares_key_ok) pthread_setspecific(spares_key, spares);
        spares_registered = true;
    }
    sp->md = md;
    sp->m = m;
}

int dl_dnnl_args_add(dl_dnnl_args *args, int arg, const dnnl_memory_desc_t *md, void *data) {
    if (args->n >= DL_DNNL_MAX_ARGS) return dl_error("oneDNN: too many primitive arguments");
    dnnl_memory_t m = take_memory(md, data);
    if (!m) return -1;
    args->a[args->n].arg = arg;
    args->a[args->n].memory = m;
    args->md[args->n] = md;
    args->n++;
    return 0;
}

void dl_dnnl_args_free(dl_dnnl_args *args) {
    for (int i = 0; i < args->n; i++) give_memory(args->md[i], args->a[i].memory);
    args->n = 0;
}

/* Adds the primitive's scratchpad (from this thread's buffer) to args. */
static int add_scratchpad(dnnl_primitive_t prim, dl_dnnl_args *args) {
    const_dnnl_primitive_desc_t pd;
    if (DL_DNNL(dnnl_primitive_get_primitive_desc(prim, &pd))) return -1;
    const dnnl_memory_desc_t *md = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    size_t n = md ? dnnl_memory_desc_get_size(md) : 0;
    if (n == 0) return 0;
    void *buf = thread_scratch(n);
    return buf ? dl_dnnl_args_add(args, DNNL_ARG_SCRATCHPAD, md, buf) : -1;
}

int dl_dnnl_execute(dnnl_primitive_t prim, dl_dnnl_args *args) {
    dnnl_stream_t s = dl_dnnl_stream();
    int rc = -1;
    if (s && !add_scratchpad(prim, args) &&
        !DL_DNNL(dnnl_primitive_execute(prim, s, args->n, args->a)))
        rc = DL_DNNL(dnnl_stream_wait(s));
    dl_dnnl_args_free(args);
    return rc;
}

int dl_dnnl_reorder(dnnl_primitive_t prim, const dnnl_memory_desc_t *from, const void *src,
                    const dnnl_memory_desc_t *to, void *dst) {
    dl_dnnl_args a = {0};
    if (dl_dnnl_args_add(&a, DNNL_ARG_FROM, from, (void *)src) ||
        dl_dnnl_args_add(&a, DNNL_ARG_TO, to, dst)) {
        dl_dnnl_args_free(&a);
        return -1;
    }
    return dl_dnnl_execute(prim, &a);
}

size_t dl_dnnl_md_size(const dnnl_memory_desc_t *md) {
    return dnnl_memory_desc_get_size(md);
}

void *dl_dnnl_alloc(size_t bytes, const char *op) {
    void *p = dl_cpu_alloc(bytes);
    if (!p && dl_cpu_cache_empty() > 0) p = dl_cpu_alloc(bytes);
    if (!p) {
        dl_error("%s: out of memory (%zu bytes of scratch)", op, bytes);
        return NULL;
    }
    return p;
}
