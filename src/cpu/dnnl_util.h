/* dnnl_util.h - what the oneDNN-backed CPU kernels (conv, batch norm, pool)
 * share: the CPU engine and a per-thread stream, status checking that names
 * the failing call and its location, and a cache of primitives keyed by a
 * string (op + shapes + parameters + dtype + layout), bounded with LRU
 * eviction.
 *
 * Invariants: no Lua here; every failure returns -1 (or NULL) with
 * dl_last_error() set, never exits.  A cache entry is reference counted:
 * dl_dnnl_cache_get hands out a reference that the caller returns with
 * dl_dnnl_cache_put, so eviction never frees an entry another thread is
 * executing.  Primitives use a user-managed scratchpad that dl_dnnl_execute
 * takes from a per-thread buffer, so any thread may execute any cached
 * primitive, concurrently with others. */
#ifndef DL_CPU_DNNL_UTIL_H
#define DL_CPU_DNNL_UTIL_H

#include <oneapi/dnnl/dnnl.h>

#include <stddef.h>
#include <stdint.h>

/* The process-wide CPU engine, created on first use (NULL + error on failure). */
dnnl_engine_t dl_dnnl_engine(void);
/* This thread's stream on that engine, created on first use. */
dnnl_stream_t dl_dnnl_stream(void);

/* 0 when st is dnnl_success, else -1 with an error naming the call and place:
 * "oneDNN: dnnl_primitive_desc_create(...) failed: unimplemented (conv.c:120)". */
int dl_dnnl_check(dnnl_status_t st, const char *call, const char *file, int line);
#define DL_DNNL(call) dl_dnnl_check((call), #call, __FILE__, __LINE__)

/* A plain f32 memory descriptor with the given dims and format tag. */
int dl_dnnl_md(dnnl_memory_desc_t *md, int ndims, const int64_t *dims, dnnl_format_tag_t tag);

/* --- the primitive cache -------------------------------------------------- */

#define DL_DNNL_MAX_PRIMS 12
#define DL_DNNL_KEY_LEN 192
#define DL_DNNL_CACHE_CAPACITY 512

/* One cached set of primitives for one op configuration.  A builder fills
 * pd[i]/prim[i] (either may stay NULL) and may keep its own data in `user`
 * (freed with free_user when the entry dies). */
typedef struct dl_dnnl_entry {
    char key[DL_DNNL_KEY_LEN];
    dnnl_primitive_desc_t pd[DL_DNNL_MAX_PRIMS];
    dnnl_primitive_t prim[DL_DNNL_MAX_PRIMS];
    void *user;
    void (*free_user)(void *);
    /* cache bookkeeping */
    uint64_t last_use;
    int refs;
} dl_dnnl_entry;

/* Fills e (zeroed, key set); returns 0 or -1 with dl_last_error set (what it
 * created so far is freed by the cache). */
typedef int (*dl_dnnl_build_fn)(dl_dnnl_entry *e, const void *ctx);

/* The entry for key, built with build(e, ctx) on a miss; NULL with an error
 * when building fails.  Return it with dl_dnnl_cache_put.  The current
 * thread count (dl_get_num_threads) is part of the key: oneDNN sizes a
 * primitive's work split and scratch for the threads it was created for. */
dl_dnnl_entry *dl_dnnl_cache_get(const char *key, dl_dnnl_build_fn build, const void *ctx);
void dl_dnnl_cache_put(dl_dnnl_entry *e);
/* Entries currently cached. */
int dl_dnnl_cache_size(void);

/* Creates pd from an op descriptor and the primitive from it, storing both in
 * slot i of e.  hint may be NULL (forward).  make_prim false creates the pd
 * only (a forward pd kept as the hint of backward ones). */
int dl_dnnl_entry_add(dl_dnnl_entry *e, int i, const_dnnl_op_desc_t desc,
                      const_dnnl_primitive_desc_t hint, int make_prim);
/* dl_dnnl_entry_add with post-ops: the result is added to the destination's
 * previous contents (sum), then passed through ReLU (relu), in that order. */
int dl_dnnl_entry_add_post(dl_dnnl_entry *e, int i, const_dnnl_op_desc_t desc,
                           const_dnnl_primitive_desc_t hint, int make_prim, int sum, int relu);
/* A reorder from md `from` to md `to` in slot i (both f32 descriptors). */
int dl_dnnl_entry_add_reorder(dl_dnnl_entry *e, int i, const dnnl_memory_desc_t *from,
                              const dnnl_memory_desc_t *to);

/* --- execution ------------------------------------------------------------ */

#define DL_DNNL_MAX_ARGS 12

/* The arguments of one execution: memories wrap caller buffers (md[i] is
 * the descriptor a[i].memory was made or re-pointed for). */
typedef struct dl_dnnl_args {
    int n;
    dnnl_exec_arg_t a[DL_DNNL_MAX_ARGS];
    const dnnl_memory_desc_t *md[DL_DNNL_MAX_ARGS];
} dl_dnnl_args;

/* Adds argument `arg` bound to data with descriptor md.  Returns 0 or -1. */
int dl_dnnl_args_add(dl_dnnl_args *args, int arg, const dnnl_memory_desc_t *md, void *data);
/* Executes prim on this thread's stream and waits; releases the memories in
 * args (not the data; see dl_dnnl_args_free) whatever happens. */
int dl_dnnl_execute(dnnl_primitive_t prim, dl_dnnl_args *args);
/* Releases the memories of args without executing: each is kept as this
 * thread's spare for its descriptor (or destroyed), for the next
 * dl_dnnl_args_add of that descriptor to re-point. */
void dl_dnnl_args_free(dl_dnnl_args *args);

/* Runs the reorder prim from `from` (data src) to `to` (data dst). */
int dl_dnnl_reorder(dnnl_primitive_t prim, const dnnl_memory_desc_t *from, const void *src,
                    const dnnl_memory_desc_t *to, void *dst);

/* Bytes a memory descriptor spans. */
size_t dl_dnnl_md_size(const dnnl_memory_desc_t *md);
/* 64-byte aligned scratch buffer from dl_cpu_alloc; NULL with an error.  Free
 * it with dl_cpu_free(p, bytes). */
void *dl_dnnl_alloc(size_t bytes, const char *op);

#endif
