/* tokenizer_impl.h - what tokenizer.c, tokenizer_train.c and tokenizer_json.c
 * share and nothing else sees: the tokenizer struct, a byte-string hash map
 * and a pair hash map.
 *
 * Invariants: token bytes live in one arena (t->bytes at t->off[id], length
 * t->len[id]); t->vocab maps the bytes of every ordinary token to its id
 * (added tokens are listed in t->added, longest first, and are in t->vocab
 * only when no ordinary token has their bytes); BPE: t->byte_id[b] is the id
 * of byte b, t->merge_map maps (left << 32 | right) to the merge's rank.
 * Maps never delete single keys (only clear all). */
#ifndef DL_DATA_TOKENIZER_IMPL_H
#define DL_DATA_TOKENIZER_IMPL_H

#include "tokenizer.h"

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

/* --- maps ---------------------------------------------------------------------- */

static inline uint64_t dl_tok_hash(const void *p, size_t n) {
    const uint8_t *s = p;
    uint64_t h = 0x9E3779B97F4A7C15ull ^ (uint64_t)n;
    while (n >= 8) {
        uint64_t v;
        memcpy(&v, s, 8);
        h = (h ^ v) * 0xFF51AFD7ED558CCDull;
        h ^= h >> 32;
        s += 8;
        n -= 8;
    }
    uint64_t v = 0;
    memcpy(&v, s, n);
    h = (h ^ v) * 0xC4CEB9FE1A85EC53ull;
    h ^= h >> 29;
    h *= 0x9E3779B97F4A7C15ull;
    return h ^ (h >> 32);
}

/* bytes -> int64; keys are copied into the map's own arena */
typedef struct {
    uint64_t hash;
    size_t off; /* SIZE_MAX: empty slot */
    size_t len;
    int64_t val;
} dl_smap_slot;

typedef struct {
    dl_smap_slot *slots;
    size_t cap, n; /* cap: a power of two (0 before the first put) */
    char *keys;
    size_t klen, kcap;
} dl_smap;

int64_t *dl_smap_get(const dl_smap *m, const char *s, size_t n);
/* Inserts (or overwrites) s -> val; -1 when out of memory. */
int dl_smap_put(dl_smap *m, const char *s, size_t n, int64_t val);
void dl_smap_clear(dl_smap *m);
void dl_smap_free(dl_smap *m);

/* (uint32, uint32) -> int64 */
typedef struct {
    uint64_t *keys; /* UINT64_MAX: empty */
    int64_t *vals;
    size_t cap, n;
} dl_pmap;

static inline uint64_t dl_pair_key(int32_t a, int32_t b) {
    return (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
}
static inline size_t dl_pmap_slot(uint64_t key, size_t cap) {
    uint64_t h = key * 0x9E3779B97F4A7C15ull;
    return (size_t)(h ^ (h >> 29)) & (cap - 1);
}
static inline int64_t dl_pmap_get(const dl_pmap *m, int32_t a, int32_t b) {
    if (!m->cap) return -1;
    uint64_t key = dl_pair_key(a, b);
    for (size_t i = dl_pmap_slot(key, m->cap);; i = (i + 1) & (m->cap - 1)) {
        if (m->keys[i] == key) return m->vals[i];
        if (m->keys[i] == UINT64_MAX) return -1;
    }
}
/* Inserts (or overwrites); -1 when out of memory. */
int dl_pmap_put(dl_pmap *m, int32_t a, int32_t b, int64_t val);
void dl_pmap_free(dl_pmap *m);

/* --- the tokenizer ----------------------------------------------------------------- */

#define DL_TOKF_ADDED 1   /* matched in the text before anything else */
#define DL_TOKF_SPECIAL 2 /* skipped by decode(skip_special) */

struct dl_tokenizer {
    dl_tok_kind kind;
    dl_pretok pretok;
    int32_t n, cap; /* ids 0..n-1 */
    size_t *off;
    uint32_t *len;
    uint8_t *flags;
    char *bytes;
    size_t nbytes, bytes_cap;
    dl_smap vocab; /* ordinary tokens' bytes -> id */
    /* added tokens, longest first */
    int32_t *added;
    int n_added;
    bool added_first[256]; /* first bytes of added tokens */
    /* BPE */
    int32_t byte_id[256];
    int32_t (*merges)[3]; /* rank -> left, right, result */
    int32_t n_merges, merges_cap;
    dl_pmap merge_map; /* (left, right) -> rank */
    /* CHAR */
    int32_t unk;
    int32_t ascii_id[128]; /* -1: not in the vocabulary */
    /* encode cache (BPE): piece bytes -> (offset << 8 | count) into cache_ids */
    dl_smap cache;
    int32_t *cache_ids;
    size_t cache_n, cache_cap;
};

dl_tokenizer *dl_tok_alloc(dl_tok_kind kind);
/* Appends a token; its id, or -1 when out of memory. */
int32_t dl_tok_add(dl_tokenizer *t, const char *s, size_t n, uint8_t flags);
/* After all tokens and merges are in: fills vocab, added, byte_id (BPE),
 * ascii_id (CHAR).  Fails on duplicate ordinary tokens and, for BPE, on a
 * missing byte.  `what` prefixes messages. */
int dl_tok_finish(dl_tokenizer *t, const char *what);
/* Appends merge (a, b) -> r with the next rank; -1 when out of memory. */
int dl_tok_add_merge(dl_tokenizer *t, int32_t a, int32_t b, int32_t r);

static inline const char *dl_tok_bytes(const dl_tokenizer *t, int32_t id) {
    return t->bytes + t->off[id];
}

/* The added token that starts at s[i] (longest), or -1; *len its length. */
int32_t dl_tok_match_added(const dl_tokenizer *t, const char *s, size_t n, size_t i, size_t *len);

/* Decodes one UTF-8 character at s[i]: its code point and length, or -1 and
 * length 1 for a byte that does not start a valid character. */
int32_t dl_utf8_next(const uint8_t *s, size_t n, size_t i, size_t *len);

#endif
