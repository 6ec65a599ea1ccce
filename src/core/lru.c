/* lru.c - the bounded LRU cache of lru.h.
 *
 * Entries live in one doubly linked list, most recent at the head, and in a
 * table of hash buckets (singly linked chains) sized to twice the capacity
 * rounded up to a power of two, so chains stay short.  Invariants: every
 * entry is in exactly one chain and in the list; size == list length <=
 * capacity; an entry owns a copy of its key and its value. */
#include "lru.h"
#include "error.h"

#include <stdlib.h>
#include <string.h>

typedef struct entry {
    struct entry *prev, *next; /* the recency list */
    struct entry *chain;       /* the bucket's next entry */
    uint64_t hash;
    size_t n;
    void *value;
    unsigned char key[]; /* n bytes */
} entry;

struct dl_lru {
    entry **buckets;
    size_t nbuckets; /* a power of two */
    entry *head, *tail;
    size_t size, capacity;
    int64_t hits, misses, evictions;
    dl_lru_free_fn free_value;
    void *ctx;
};

static uint64_t hash_bytes(const void *key, size_t n) {
    const unsigned char *p = key;
    uint64_t h = 1469598103934665603ULL; /* FNV-1a */
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 1099511628211ULL;
    }
    return h;
}

dl_lru *dl_lru_new(size_t capacity, dl_lru_free_fn free_value, void *ctx) {
    if (capacity < 1 || capacity > ((size_t)1 << 24)) {
        dl_error("lru: capacity must be in 1..2^24, got %zu", capacity);
        return NULL;
    }
    dl_lru *c = calloc(1, sizeof *c);
    size_t nb = 2;
    while (nb < 2 * capacity) nb *= 2;
    if (c) c->buckets = calloc(nb, sizeof *c->buckets);
    if (!c || !c->buckets) {
        free(c);
        dl_error("lru: out of memory for a cache of %zu entries", capacity);
        return NULL;
    }
    c->nbuckets = nb;
    c->capacity = capacity;
    c->free_value = free_value;
    c->ctx = ctx;
    return c;
}

static entry *find(const dl_lru *c, const void *key, size_t n, uint64_t h) {
    for (entry *e = c->buckets[h & (c->nbuckets - 1)]; e; e = e->chain)
        if (e->hash == h && e->n == n && memcmp(e->key, key, n) == 0) return e;
    return NULL;
}

static void list_unlink(dl_lru *c, entry *e) {
    if (e->prev)
        e->prev->next = e->next;
    else
        c->head = e->next;
    if (e->next)
        e->next->prev = e->prev;
    else
        c->tail = e->prev;
    e->prev = e->next = NULL;
}

static void list_push_front(dl_lru *c, entry *e) {
    e->prev = NULL;
    e->next = c->head;
    if (c->head) c->head->prev = e;
    c->head = e;
    if (!c->tail) c->tail = e;
}

static void chain_unlink(dl_lru *c, entry *e) {
    entry **p = &c->buckets[e->hash & (c->nbuckets - 1)];
    while (*p != e) p = &(*p)->chain;
    *p = e->chain;
}

/* Removes e from the cache and frees it with its value. */
static void drop(dl_lru *c, entry *e) {
    list_unlink(c, e);
    chain_unlink(c, e);
    c->size--;
    if (c->free_value) c->free_value(e->value, c->ctx);
    free(e);
}

void dl_lru_free(dl_lru *c) {
    if (!c) return;
    dl_lru_clear(c);
    free(c->buckets);
    free(c);
}

void *dl_lru_get(dl_lru *c, const void *key, size_t n) {
    entry *e = find(c, key, n, hash_bytes(key, n));
    if (!e) {
        c->misses++;
        return NULL;
    }
    c->hits++;
    list_unlink(c, e);
    list_push_front(c, e);
    return e->value;
}

int dl_lru_put(dl_lru *c, const void *key, size_t n, void *value) {
    uint64_t h = hash_bytes(key, n);
    entry *old = find(c, key, n, h);
    if (old && old->value == value) { /* the same value again: only its recency changes */
        list_unlink(c, old);
        list_push_front(c, old);
        return 0;
    }
    if (old) drop(c, old);
    entry *e = malloc(sizeof *e + (n ? n : 1));
    if (!e) {
        if (c->free_value) c->free_value(value, c->ctx);
        return dl_error("lru: out of memory for an entry of %zu key bytes", n);
    }
    if (c->size == c->capacity) {
        drop(c, c->tail);
        c->evictions++;
    }
    memcpy(e->key, key, n);
    e->n = n;
    e->hash = h;
    e->value = value;
    e->chain = c->buckets[h & (c->nbuckets - 1)];
    c->buckets[h & (c->nbuckets - 1)] = e;
    list_push_front(c, e);
    c->size++;
    return 0;
}

void dl_lru_clear(dl_lru *c) {
    while (c->head) drop(c, c->head);
}

void dl_lru_get_stats(const dl_lru *c, dl_lru_stats *out) {
    out->size = c->size;
    out->capacity = c->capacity;
    out->hits = c->hits;
    out->misses = c->misses;
    out->evictions = c->evictions;
}

const void *dl_lru_key_at(const dl_lru *c, size_t i, size_t *n) {
    entry *e = c->head;
    while (e && i > 0) {
        e = e->next;
        i--;
    }
    if (!e) return NULL;
    *n = e->n;
    return e->key;
}
