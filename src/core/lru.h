/* lru.h - a bounded least-recently-used cache keyed by bytes: at most
 * `capacity` entries, each a copy of its key (any length) and a value pointer
 * the cache owns (freed through the free_value callback when evicted,
 * replaced, cleared or when the cache is freed).  A get that hits makes the
 * entry the most recent; a put beyond capacity evicts the least recent.
 * Plain C, no locking: the caller serialises access (cuda/conv_plan.cu keeps
 * its cuDNN execution plans here under a mutex).  Lookups hash the key
 * (FNV-1a) into chained buckets, so both get and put are O(key length). */
#ifndef DL_LRU_H
#define DL_LRU_H

#include <stddef.h>
#include <stdint.h>

typedef struct dl_lru dl_lru;

/* Frees a value the cache drops; ctx is the one given to dl_lru_new. */
typedef void (*dl_lru_free_fn)(void *value, void *ctx);

typedef struct {
    size_t size, capacity;
    int64_t hits, misses, evictions; /* evictions: entries dropped for room */
} dl_lru_stats;

/* A cache of at most capacity (>= 1) entries; NULL with an error. */
dl_lru *dl_lru_new(size_t capacity, dl_lru_free_fn free_value, void *ctx);
/* Frees every value, then the cache (NULL is fine). */
void dl_lru_free(dl_lru *c);
/* The value under the n bytes at key (now the most recent), or NULL when
 * absent (a miss); counts the hit or miss. */
void *dl_lru_get(dl_lru *c, const void *key, size_t n);
/* Stores value under key as the most recent entry: an entry with an equal
 * key is replaced (its old value freed), the least recent one evicted when
 * the cache is full (putting an entry's own value again only refreshes it).
 * 0, or -1 with an error when out of memory (the value is then freed too, so
 * the caller never keeps half an entry). */
int dl_lru_put(dl_lru *c, const void *key, size_t n, void *value);
/* Drops every entry (values freed); statistics are kept. */
void dl_lru_clear(dl_lru *c);
void dl_lru_get_stats(const dl_lru *c, dl_lru_stats *out);
/* The key of the i-th most recent entry (0: the most recent) and its length
 * in *n; NULL past the last.  For tests and diagnostics (O(i)). */
const void *dl_lru_key_at(const dl_lru *c, size_t i, size_t *n);

#endif
