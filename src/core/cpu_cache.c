/* cpu_cache.c - reuse of large host buffers (see storage.h).
 *
 * glibc serves blocks this large with mmap and returns them with munmap, so
 * every training step paid for its activations again: a page fault per 4 KiB
 * on first touch and the kernel zeroing each page (ResNet-50 at batch 8: 54k
 * faults, about a fifth of the step).  Freed blocks of at least
 * DL_CPU_CACHE_MIN bytes are kept here instead, sorted by size, and a request
 * takes the smallest one that fits within an eighth of slack (the newest of
 * equal sizes, whose lines are likeliest still in cache).  A training loop
 * repeats its sizes every step and stops missing after the first.
 *
 * Bound: the cache holds at most the most bytes ever in use at once (or
 * DL_CPU_CACHE_FLOOR, if more), releasing the oldest blocks beyond that, so
 * a workload whose sizes keep changing holds at most about twice its peak.
 * Bounding by the bytes in use now instead released the activations of a
 * training step after every backward pass (they outweigh the parameters).  Releasing on every miss
 * instead (cache + live never above the peak demand) made ResNet-50 training miss 340 times a step:
 * tensors freed by the collector a little late made the next step miss, and each miss released
 * blocks that later requests of the step needed.
 *
 * New blocks of DL_HUGE_MIN bytes or more start on a 2 MiB boundary and are
 * advised to the kernel as transparent-huge-page backed (MADV_HUGEPAGE, which
 * the usual "madvise" THP setting asks for): one streaming pass over a
 * 64 MiB tensor spent a third of its time in TLB misses on 4 KiB pages on the
 * virtual machines measured here.  The threshold keeps the rounding of the
 * last huge page under a quarter of the block.  DLUA_HUGEPAGES=0 turns it off. */
#include "storage.h"

#include <pthread.h>
#include <stdint.h>
#include <sys/mman.h>
#include <stdlib.h>
#include <string.h>

#if defined(__SANITIZE_ADDRESS__)
#define DL_CACHE_DEFAULT 0 /* keep use-after-free visible to AddressSanitizer */
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define DL_CACHE_DEFAULT 0
#endif
#endif
#ifndef DL_CACHE_DEFAULT
#define DL_CACHE_DEFAULT 1
#endif

typedef struct {
    void *p;
    size_t size;    /* rounded size the block was allocated with */
    uint64_t stamp; /* when it was freed: eviction takes the oldest */
} block;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static block *blocks; /* sorted by size; among equal sizes, newest first */
static size_t n_blocks, cap_blocks;
/* bytes in the cache; handed out (cacheable sizes), and its high-water mark */
static int64_t cached_bytes, out_bytes, peak_out;
#define DL_CPU_CACHE_FLOOR ((int64_t)256 << 20)
static uint64_t clock_;
/* every block handed out and not yet freed, cached size or not, and the most
 * at once since the last dl_cpu_reset_peak (atomics: the small sizes take no
 * lock) */
static int64_t in_use, peak_in_use;
static int enabled = -1; /* -1: not decided yet (DLUA_CPU_CACHE, then the default) */

static size_t round_size(size_t n) {
    if (n < DL_CPU_CACHE_MIN) return (n + 63) & ~(size_t)63;
    return (n + 4095) & ~(size_t)4095;
}

static int is_enabled(void) {
    int on = __atomic_load_n(&enabled, __ATOMIC_RELAXED);
    if (on < 0) {
        const char *e = getenv("DLUA_CPU_CACHE");
        on = e && *e ? strcmp(e, "0") != 0 : DL_CACHE_DEFAULT;
        int unset = -1; /* a concurrent dl_cpu_cache_set_enabled wins */
        if (!__atomic_compare_exchange_n(&enabled, &unset, on, 0, __ATOMIC_RELAXED,
                                         __ATOMIC_RELAXED))
            on = unset;
    }
    return on;
}

#define DL_HUGE_PAGE ((size_t)2 << 20)
#define DL_HUGE_MIN ((size_t)8 << 20)

static int huge_enabled(void) {
    static int on = -1;
    int v = __atomic_load_n(&on, __ATOMIC_RELAXED);
    if (v < 0) {
        const char *e = getenv("DLUA_HUGEPAGES");
        v = !(e && strcmp(e, "0") == 0);
        __atomic_store_n(&on, v, __ATOMIC_RELAXED);
    }
    return v;
}

/* A new block of n bytes (see the header comment for the huge pages). */
static void *fresh(size_t n) {
    if (n < DL_HUGE_MIN || !huge_enabled()) return aligned_alloc(64, n);
    size_t whole = (n + DL_HUGE_PAGE - 1) & ~(DL_HUGE_PAGE - 1);
    void *p = aligned_alloc(DL_HUGE_PAGE, whole);
#ifdef MADV_HUGEPAGE
    if (p) (void)madvise(p, whole, MADV_HUGEPAGE); /* advice only: a refusal changes nothing */
#endif
    return p;
}

/* First index whose size is >= n. */
static size_t lower_bound(size_t n) {
    size_t lo = 0, hi = n_blocks;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (blocks[mid].size < n)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static void remove_at(size_t i) {
    cached_bytes -= (int64_t)blocks[i].size;
    memmove(blocks + i, blocks + i + 1, (n_blocks - i - 1) * sizeof *blocks);
    n_blocks--;
}

/* Releases the oldest cached blocks while the cache holds more than its
 * bound.  Called with the lock held. */
static void trim(void) {
    int64_t bound = peak_out > DL_CPU_CACHE_FLOOR ? peak_out : DL_CPU_CACHE_FLOOR;
    while (n_blocks && cached_bytes > bound) {
        size_t old = 0;
        for (size_t i = 1; i < n_blocks; i++)
            if (blocks[i].stamp < blocks[old].stamp) old = i;
        void *p = blocks[old].p;
        remove_at(old);
        free(p);
    }
}

static void count_in(size_t n) {
    int64_t now = __atomic_add_fetch(&in_use, (int64_t)n, __ATOMIC_RELAXED);
    int64_t peak = __atomic_load_n(&peak_in_use, __ATOMIC_RELAXED);
    while (now > peak && !__atomic_compare_exchange_n(&peak_in_use, &peak, now, 1, __ATOMIC_RELAXED,
                                                      __ATOMIC_RELAXED)) {
    }
}

static void *take(size_t nbytes) {
    size_t n = round_size(nbytes ? nbytes : 1);
    if (n < DL_CPU_CACHE_MIN || !is_enabled()) return aligned_alloc(64, n);
    pthread_mutex_lock(&lock);
    size_t i = lower_bound(n);
    if (i < n_blocks && blocks[i].size <= n + n / 8) {
        void *p = blocks[i].p;
        remove_at(i);
        out_bytes += (int64_t)n;
        if (out_bytes > peak_out) peak_out = out_bytes;
        pthread_mutex_unlock(&lock);
        return p;
    }
    pthread_mutex_unlock(&lock);
    void *p = fresh(n);
    if (p) {
        pthread_mutex_lock(&lock);
        out_bytes += (int64_t)n;
        if (out_bytes > peak_out) peak_out = out_bytes;
        pthread_mutex_unlock(&lock);
    }
    return p;
}

void *dl_cpu_alloc(size_t nbytes) {
    void *p = take(nbytes);
    if (p) count_in(round_size(nbytes ? nbytes : 1));
    return p;
}

void dl_cpu_free(void *p, size_t nbytes) {
    if (!p) return;
    size_t n = round_size(nbytes ? nbytes : 1);
    __atomic_sub_fetch(&in_use, (int64_t)n, __ATOMIC_RELAXED);
    if (n < DL_CPU_CACHE_MIN || !is_enabled()) {
        free(p);
        return;
    }
    /* A block served with slack is filed under this smaller size: still
     * true (the block is at least that large), only less often matched. */
    pthread_mutex_lock(&lock);
    out_bytes -= (int64_t)n;
    if (n_blocks == cap_blocks) {
        size_t c = cap_blocks ? cap_blocks * 2 : 64;
        block *b = realloc(blocks, c * sizeof *b);
        if (!b) {
            pthread_mutex_unlock(&lock);
            free(p);
            return;
        }
        blocks = b;
        cap_blocks = c;
    }
    size_t i = lower_bound(n);
    memmove(blocks + i + 1, blocks + i, (n_blocks - i) * sizeof *blocks);
    blocks[i] = (block){p, n, ++clock_};
    n_blocks++;
    cached_bytes += (int64_t)n;
    trim();
    pthread_mutex_unlock(&lock);
}

int64_t dl_cpu_cache_empty(void) {
    pthread_mutex_lock(&lock);
    int64_t released = cached_bytes;
    for (size_t i = 0; i < n_blocks; i++) free(blocks[i].p);
    n_blocks = 0;
    cached_bytes = 0;
    pthread_mutex_unlock(&lock);
    return released;
}

int64_t dl_cpu_cached_bytes(void) {
    pthread_mutex_lock(&lock);
    int64_t b = cached_bytes;
    pthread_mutex_unlock(&lock);
    return b;
}

int dl_cpu_cache_set_enabled(int on) {
    int was = is_enabled();
    __atomic_store_n(&enabled, on != 0, __ATOMIC_RELAXED);
    if (!on) dl_cpu_cache_empty();
    return was;
}

int64_t dl_cpu_bytes_in_use(void) {
    return __atomic_load_n(&in_use, __ATOMIC_RELAXED);
}

int64_t dl_cpu_peak_bytes(void) {
    return __atomic_load_n(&peak_in_use, __ATOMIC_RELAXED);
}

void dl_cpu_reset_peak(void) {
    __atomic_store_n(&peak_in_use, __atomic_load_n(&in_use, __ATOMIC_RELAXED), __ATOMIC_RELAXED);
}
