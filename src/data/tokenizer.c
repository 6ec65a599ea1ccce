/* tokenizer.c - encoding and decoding of the tokenizers of tokenizer.h: the
 * maps, the vocabulary, GPT-2 pre-tokenization, added-token matching, BPE
 * merging of one piece (a small-piece loop and a heap for long pieces, same
 * rule: lowest rank, leftmost first) with a cache of recent pieces, and the
 * character lookup.  Training is in tokenizer_train.c, files in
 * tokenizer_json.c. */
#include "tokenizer_impl.h"
#include "tokenizer_unicode.h"
#include "core/error.h"

#include <stdlib.h>
#include <string.h>

/* --- maps ------------------------------------------------------------------------- */

static int smap_grow(dl_smap *m) {
    size_t cap = m->cap ? m->cap * 2 : 64;
    dl_smap_slot *s = malloc(sizeof *s * cap);
    if (!s) return -1;
    for (size_t i = 0; i < cap; i++) s[i].off = SIZE_MAX;
    for (size_t i = 0; i < m->cap; i++) {
        if (m->slots[i].off == SIZE_MAX) continue;
        size_t k = (size_t)m->slots[i].hash & (cap - 1);
        while (s[k].off != SIZE_MAX) k = (k + 1) & (cap - 1);
        s[k] = m->slots[i];
    }
    free(m->slots);
    m->slots = s;
    m->cap = cap;
    return 0;
}

static dl_smap_slot *smap_find(const dl_smap *m, const char *s, size_t n, uint64_t h) {
    if (!m->cap) return NULL;
    for (size_t k = (size_t)h & (m->cap - 1);; k = (k + 1) & (m->cap - 1)) {
        dl_smap_slot *e = &m->slots[k];
        if (e->off == SIZE_MAX) return e;
        if (e->hash == h && e->len == n && memcmp(m->keys + e->off, s, n) == 0) return e;
    }
}

int64_t *dl_smap_get(const dl_smap *m, const char *s, size_t n) {
    dl_smap_slot *e = smap_find(m, s, n, dl_tok_hash(s, n));
    return e && e->off != SIZE_MAX ? &e->val : NULL;
}

int dl_smap_put(dl_smap *m, const char *s, size_t n, int64_t val) {
    uint64_t h = dl_tok_hash(s, n);
    dl_smap_slot *e = smap_find(m, s, n, h);
    if (e && e->off != SIZE_MAX) {
        e->val = val;
        return 0;
    }
    if ((m->n + 1) * 2 > m->cap) {
        if (smap_grow(m)) return -1;
        e = smap_find(m, s, n, h);
    }
    if (m->klen + n > m->kcap) {
        size_t cap = m->kcap ? m->kcap : 256;
        while (cap < m->klen + n) cap *= 2;
        char *k = realloc(m->keys, cap);
        if (!k) return -1;
        m->keys = k;
        m->kcap = cap;
    }
    if (n) memcpy(m->keys + m->klen, s, n);
    *e = (dl_smap_slot){h, m->klen, n, val};
    m->klen += n;
    m->n++;
    return 0;
}

void dl_smap_clear(dl_smap *m) {
    for (size_t i = 0; i < m->cap; i++) m->slots[i].off = SIZE_MAX;
    m->n = 0;
    m->klen = 0;
}

void dl_smap_free(dl_smap *m) {
    free(m->slots);
    free(m->keys);
    memset(m, 0, sizeof *m);
}

int dl_pmap_put(dl_pmap *m, int32_t a, int32_t b, int64_t val) {
    if ((m->n + 1) * 2 > m->cap) {
        size_t cap = m->cap ? m->cap * 2 : 1024;
        uint64_t *keys = malloc(sizeof *keys * cap);
        int64_t *vals = malloc(sizeof *vals * cap);
        if (!keys || !vals) {
            free(keys);
            free(vals);
            return -1;
        }
        for (size_t i = 0; i < cap; i++) keys[i] = UINT64_MAX;
        for (size_t i = 0; i < m->cap; i++) {
            if (m->keys[i] == UINT64_MAX) continue;
            size_t k = dl_pmap_slot(m->keys[i], cap);
            while (keys[k] != UINT64_MAX) k = (k + 1) & (cap - 1);
            keys[k] = m->keys[i];
            vals[k] = m->vals[i];
        }
        free(m->keys);
        free(m->vals);
        m->keys = keys;
        m->vals = vals;
        m->cap = cap;
    }
    uint64_t key = dl_pair_key(a, b);
    size_t k = dl_pmap_slot(key, m->cap);
    while (m->keys[k] != UINT64_MAX && m->keys[k] != key) k = (k + 1) & (m->cap - 1);
    if (m->keys[k] == UINT64_MAX) m->n++;
    m->keys[k] = key;
    m->vals[k] = val;
    return 0;
}

void dl_pmap_free(dl_pmap *m) {
    free(m->keys);
    free(m->vals);
    memset(m, 0, sizeof *m);
}

void dl_tok_ids_free(dl_tok_ids *v) {
    free(v->ids);
    memset(v, 0, sizeof *v);
}

static int ids_reserve(dl_tok_ids *v, size_t more) {
    if (v->n + more <= v->cap) return 0;
    size_t cap = v->cap ? v->cap : 256;
    while (cap < v->n + more) cap *= 2;
    int32_t *p = realloc(v->ids, sizeof *p * cap);
    if (!p) return dl_error("tokenizer: out of memory");
    v->ids = p;
    v->cap = cap;
    return 0;
}

int dl_tok_ids_push(dl_tok_ids *v, int32_t id) {
    if (v->n == v->cap && ids_reserve(v, 1)) return -1;
    v->ids[v->n++] = id;
    return 0;
}

/* --- the vocabulary ------------------------------------------------------------------ */

dl_tokenizer *dl_tok_alloc(dl_tok_kind kind) {
    dl_tokenizer *t = dl_zalloc(sizeof *t, "tokenizer: out of memory");
    if (!t) return NULL;
    t->kind = kind;
    t->pretok = DL_PRETOK_GPT2;
    t->unk = -1;
    for (int b = 0; b < 256; b++) t->byte_id[b] = -1;
    for (int b = 0; b < 128; b++) t->ascii_id[b] = -1;
    return t;
}

void dl_tokenizer_free(dl_tokenizer *t) {
    if (!t) return;
    free(t->off);
    free(t->len);
    free(t->flags);
    free(t->bytes);
    dl_smap_free(&t->vocab);
    free(t->added);
    free(t->merges);
    dl_pmap_free(&t->merge_map);
    dl_smap_free(&t->cache);
    free(t->cache_ids);
    free(t);
}

int32_t dl_tok_add(dl_tokenizer *t, const char *s, size_t n, uint8_t flags) {
    if (t->n == INT32_MAX - 1 || n > UINT32_MAX) {
        dl_error("tokenizer: vocabulary too large");
        return -1;
    }
    if (t->n == t->cap) {
        int32_t cap = t->cap ? (t->cap > INT32_MAX / 2 ? INT32_MAX - 1 : t->cap * 2) : 512;
        size_t *off = realloc(t->off, sizeof *off * (size_t)cap);
        if (off) t->off = off;
        uint32_t *len = realloc(t->len, sizeof *len * (size_t)cap);
        if (len) t->len = len;
        uint8_t *fl = realloc(t->flags, (size_t)cap);
        if (fl) t->flags = fl;
        if (!off || !len || !fl) {
            dl_error("tokenizer: out of memory");
            return -1;
        }
        t->cap = cap;
    }
    if (t->nbytes + n > t->bytes_cap) {
        size_t cap = t->bytes_cap ? t->bytes_cap : 4096;
        while (cap < t->nbytes + n) cap *= 2;
        char *b = realloc(t->bytes, cap);
        if (!b) {
            dl_error("tokenizer: out of memory");
            return -1;
        }
        t->bytes = b;
        t->bytes_cap = cap;
    }
    if (n) memcpy(t->bytes + t->nbytes, s, n);
    t->off[t->n] = t->nbytes;
    t->len[t->n] = (uint32_t)n;
    t->flags[t->n] = flags;
    t->nbytes += n;
    return t->n++;
}

int dl_tok_add_merge(dl_tokenizer *t, int32_t a, int32_t b, int32_t r) {
    if (t->n_merges == t->merges_cap) {
        int32_t cap = t->merges_cap ? t->merges_cap * 2 : 1024;
        int32_t(*m)[3] = realloc(t->merges, sizeof *m * (size_t)cap);
        if (!m) return dl_error("tokenizer: out of memory");
        t->merges = m;
        t->merges_cap = cap;
    }
    if (dl_pmap_put(&t->merge_map, a, b, t->n_merges)) return dl_error("tokenizer: out of memory");
    t->merges[t->n_merges][0] = a;
    t->merges[t->n_merges][1] = b;
    t->merges[t->n_merges][2] = r;
    t->n_merges++;
    return 0;
}

typedef struct {
    uint32_t len;
    int32_t id;
} len_id;

static int cmp_len_id(const void *pa, const void *pb) { /* longest first, then by id */
    const len_id *a = pa, *b = pb;
    if (a->len != b->len) return a->len > b->len ? -1 : 1;
    return a->id < b->id ? -1 : a->id > b->id;
}

int dl_tok_finish(dl_tokenizer *t, const char *what) {
    dl_smap_clear(&t->vocab);
    free(t->added);
    t->added = NULL;
    t->n_added = 0;
    for (int32_t id = 0; id < t->n; id++) {
        if (t->flags[id] & DL_TOKF_ADDED) {
            t->n_added++;
            continue;
        }
        const char *s = dl_tok_bytes(t, id);
        if (dl_smap_get(&t->vocab, s, t->len[id]))
            return dl_error("%s: token %d repeats the bytes of token %d", what, (int)id,
                            (int)*dl_smap_get(&t->vocab, s, t->len[id]));
        if (dl_smap_put(&t->vocab, s, t->len[id], id)) return dl_error("%s: out of memory", what);
    }
    t->added = malloc(sizeof(int32_t) * (size_t)(t->n_added ? t->n_added : 1));
    if (!t->added) return dl_error("%s: out of memory", what);
    memset(t->added_first, 0, sizeof t->added_first);
    int k = 0;
    for (int32_t id = 0; id < t->n; id++) {
        if (!(t->flags[id] & DL_TOKF_ADDED)) continue;
        if (t->len[id] == 0) return dl_error("%s: added token %d is empty", what, (int)id);
        t->added[k++] = id;
        const char *s = dl_tok_bytes(t, id);
        t->added_first[(uint8_t)s[0]] = true;
        if (!dl_smap_get(&t->vocab, s, t->len[id]) && dl_smap_put(&t->vocab, s, t->len[id], id))
            return dl_error("%s: out of memory", what);
    }
    len_id *order = malloc(sizeof *order * (size_t)(t->n_added ? t->n_added : 1));
    if (!order) return dl_error("%s: out of memory", what);
    for (int i = 0; i < t->n_added; i++) order[i] = (len_id){t->len[t->added[i]], t->added[i]};
    qsort(order, (size_t)t->n_added, sizeof *order, cmp_len_id);
    for (int i = 0; i < t->n_added; i++) t->added[i] = order[i].id;
    free(order);
    for (int i = 1; i < t->n_added; i++) {
        int32_t a = t->added[i - 1], b = t->added[i];
        if (t->len[a] == t->len[b] &&
            memcmp(dl_tok_bytes(t, a), dl_tok_bytes(t, b), t->len[a]) == 0)
            return dl_error("%s: added tokens %d and %d are the same text", what, (int)a, (int)b);
    }
    for (int b = 0; b < 256; b++) {
        char c = (char)b;
        int64_t *id = dl_smap_get(&t->vocab, &c, 1);
        int32_t v = id && !(t->flags[*id] & DL_TOKF_ADDED) ? (int32_t)*id : -1;
        if (t->kind == DL_TOK_BPE) {
            if (v < 0)
                return dl_error("%s: byte 0x%02x has no token (not a byte-level BPE)", what, b);
            t->byte_id[b] = v;
        } else if (b < 128) {
            t->ascii_id[b] = v;
        }
    }
    return 0;
}

int32_t dl_tok_match_added(const dl_tokenizer *t, const char *s, size_t n, size_t i, size_t *len) {
    if (!t->added_first[(uint8_t)s[i]]) return -1;
    for (int k = 0; k < t->n_added; k++) { /* longest first */
        int32_t id = t->added[k];
        size_t l = t->len[id];
        if (l <= n - i && memcmp(s + i, dl_tok_bytes(t, id), l) == 0) {
            *len = l;
            return id;
        }
    }
    return -1;
}

/* --- UTF-8 and the GPT-2 pieces ------------------------------------------------------- */

int32_t dl_utf8_next(const uint8_t *s, size_t n, size_t i, size_t *len) {
    uint32_t c = s[i];
    *len = 1;
    if (c < 0x80) return (int32_t)c;
    size_t l;
    uint32_t cp, min;
    if ((c & 0xE0) == 0xC0)
        l = 2, cp = c & 0x1F, min = 0x80;
    else if ((c & 0xF0) == 0xE0)
        l = 3, cp = c & 0x0F, min = 0x800;
    else if ((c & 0xF8) == 0xF0)
        l = 4, cp = c & 0x07, min = 0x10000;
    else
        return -1;
    if (n - i < l) return -1;
    for (size_t k = 1; k < l; k++) {
        if ((s[i + k] & 0xC0) != 0x80) return -1;
        cp = cp << 6 | (s[i + k] & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return -1;
    *len = l;
    return (int32_t)cp;
}

enum { CL_LETTER, CL_NUMBER, CL_SPACE, CL_OTHER };

static bool in_ranges(uint32_t cp, const uint32_t (*r)[2], size_t n) {
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (cp < r[mid][0])
            hi = mid;
        else if (cp > r[mid][1])
            lo = mid + 1;
        else
            return true;
    }
    return false;
}

#define NRANGES(a) (sizeof(a) / sizeof(a[0]))

/* the classes of the ASCII characters (L letter, N digit, S space, O other) */
#define L CL_LETTER
#define N CL_NUMBER
#define S CL_SPACE
#define O CL_OTHER
static const uint8_t ascii_class[128] = {
    O, O, O, O, O, O, O, O, O, S, S, S, S, S, O, O, O, O, O, O, O, O, O, O, O, O, O, O, O, O, O, O,
    S, O, O, O, O, O, O, O, O, O, O, O, O, O, O, O, N, N, N, N, N, N, N, N, N, N, O, O, O, O, O, O,
    O, L, L, L, L, L, L, L, L, L, L, L, L, L, L, L, L, L, L, L, L, L, L, L, L, L, L, O, O, O, O, O,
    O, L, L, L, L, L, L, L, L, L, L, L, L, L, L, L, L, L, L, L, L, L, L, L, L, L, L, O, O, O, O, O,
};
#undef L
#undef N
#undef S
#undef O

/* The class of the character at s[i] and its length. */
static inline int char_class(const uint8_t *s, size_t n, size_t i, size_t *len) {
    if (s[i] < 0x80) {
        *len = 1;
        return ascii_class[s[i]];
    }
    int32_t cp = dl_utf8_next(s, n, i, len);
    if (cp < 0) return CL_OTHER;
    uint32_t u = (uint32_t)cp;
    if (in_ranges(u, dl_uni_space, NRANGES(dl_uni_space))) return CL_SPACE;
    if (in_ranges(u, dl_uni_letter, NRANGES(dl_uni_letter))) return CL_LETTER;
    if (in_ranges(u, dl_uni_number, NRANGES(dl_uni_number))) return CL_NUMBER;
    return CL_OTHER;
}

/* The end of the run of class `cl` that starts at i. */
static size_t run_end(const uint8_t *s, size_t n, size_t i, int cl) {
    while (i < n) {
        size_t l;
        if (s[i] < 0x80) {
            if (ascii_class[s[i]] != cl) break;
            i++;
            continue;
        }
        if (char_class(s, n, i, &l) != cl) break;
        i += l;
    }
    return i;
}

/* 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+ */
size_t dl_pretok_next(const char *str, size_t n, size_t i) {
    const uint8_t *s = (const uint8_t *)str;
    if (s[i] == '\'' && i + 1 < n) {
        uint8_t c = s[i + 1];
        if (c == 's' || c == 't' || c == 'm' || c == 'd') return i + 2;
        if (i + 2 < n) {
            uint8_t d = s[i + 2];
            if ((c == 'r' && d == 'e') || (c == 'v' && d == 'e') || (c == 'l' && d == 'l'))
                return i + 3;
        }
    }
    size_t l;
    if (s[i] == ' ' && i + 1 < n) {
        int cl = char_class(s, n, i + 1, &l);
        if (cl != CL_SPACE) return run_end(s, n, i + 1 + l, cl);
    }
    int cl = char_class(s, n, i, &l);
    if (cl != CL_SPACE) return run_end(s, n, i + l, cl);
    size_t j = run_end(s, n, i + l, CL_SPACE);
    if (j == n) return j;
    /* \s+(?!\S): leave the last space for the word after it */
    if (j > i + l) {
        /* step back one character (spaces may be multi-byte) */
        size_t k = j - 1;
        while (k > i && (s[k] & 0xC0) == 0x80) k--;
        return k;
    }
    return j;
}

/* --- BPE ------------------------------------------------------------------------------- */

#define SMALL_PIECE 64 /* pieces up to this many bytes: array loop, cached */
#define CACHE_ENTRIES (1u << 17)
#define CACHE_IDS (1u << 22)

static inline int32_t rank_of(const dl_tokenizer *t, int32_t a, int32_t b) {
    int64_t r = dl_pmap_get(&t->merge_map, a, b);
    return r < 0 ? INT32_MAX : (int32_t)r;
}

/* Merges sym[0..m) in place; returns the new length. */
static size_t bpe_small(const dl_tokenizer *t, int32_t *sym, size_t m) {
    int32_t rank[SMALL_PIECE];
    for (size_t k = 0; k + 1 < m; k++) rank[k] = rank_of(t, sym[k], sym[k + 1]);
    while (m > 1) {
        int32_t best = INT32_MAX;
        size_t pos = 0;
        for (size_t k = 0; k + 1 < m; k++)
            if (rank[k] < best) best = rank[k], pos = k;
        if (best == INT32_MAX) break;
        sym[pos] = t->merges[best][2];
        memmove(sym + pos + 1, sym + pos + 2, sizeof *sym * (m - pos - 2));
        if (pos + 2 < m) memmove(rank + pos + 1, rank + pos + 2, sizeof *rank * (m - pos - 2));
        m--;
        if (pos + 1 < m) rank[pos] = rank_of(t, sym[pos], sym[pos + 1]);
        if (pos > 0) rank[pos - 1] = rank_of(t, sym[pos - 1], sym[pos]);
    }
    return m;
}

/* min-heap of rank << 32 | position */
static void heap_push(uint64_t *h, size_t *n, uint64_t v) {
    size_t i = (*n)++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (h[p] <= v) break;
        h[i] = h[p];
        i = p;
    }
    h[i] = v;
}

static uint64_t heap_pop(uint64_t *h, size_t *n) {
    uint64_t top = h[0], v = h[--*n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n) break;
        if (c + 1 < *n && h[c + 1] < h[c]) c++;
        if (h[c] >= v) break;
        h[i] = h[c];
        i = c;
    }
    if (*n) h[i] = v;
    return top;
}

/* Long pieces: a linked list and a heap, O(m log m).  Appends to out. */
static int bpe_long(const dl_tokenizer *t, const uint8_t *p, size_t m, dl_tok_ids *out) {
    if (m > INT32_MAX) return dl_error("tokenizer: a piece of %zu bytes is too long", m);
    int32_t *sym = malloc(sizeof *sym * m), *nxt = malloc(sizeof *nxt * m),
            *prv = malloc(sizeof *prv * m);
    uint64_t *heap = malloc(sizeof *heap * m * 2);
    int rc = -1;
    if (!sym || !nxt || !prv || !heap) {
        dl_error("tokenizer: out of memory");
        goto done;
    }
    size_t hn = 0;
    for (size_t k = 0; k < m; k++) {
        sym[k] = t->byte_id[p[k]];
        nxt[k] = k + 1 < m ? (int32_t)(k + 1) : -1;
        prv[k] = (int32_t)k - 1;
    }
    for (size_t k = 0; k + 1 < m; k++) {
        int32_t r = rank_of(t, sym[k], sym[k + 1]);
        if (r != INT32_MAX) heap_push(heap, &hn, (uint64_t)r << 32 | k);
    }
    /* each merge pushes at most 2 entries and removes one symbol: hn stays < 2m */
    while (hn) {
        uint64_t e = heap_pop(heap, &hn);
        int32_t r = (int32_t)(e >> 32), pos = (int32_t)(e & 0xFFFFFFFFu);
        if (sym[pos] < 0) continue;
        int32_t nx = nxt[pos];
        if (nx < 0 || rank_of(t, sym[pos], sym[nx]) != r) continue;
        int32_t res = t->merges[r][2], R = nxt[nx];
        sym[pos] = res;
        sym[nx] = -1;
        nxt[pos] = R;
        if (R >= 0) prv[R] = pos;
        if (prv[pos] >= 0) {
            int32_t r2 = rank_of(t, sym[prv[pos]], res);
            if (r2 != INT32_MAX) heap_push(heap, &hn, (uint64_t)r2 << 32 | (uint32_t)prv[pos]);
        }
        if (R >= 0) {
            int32_t r3 = rank_of(t, res, sym[R]);
            if (r3 != INT32_MAX) heap_push(heap, &hn, (uint64_t)r3 << 32 | (uint32_t)pos);
        }
    }
    size_t cnt = 0;
    for (int32_t k = 0; k >= 0; k = nxt[k]) cnt++;
    if (ids_reserve(out, cnt)) goto done;
    for (int32_t k = 0; k >= 0; k = nxt[k]) out->ids[out->n++] = sym[k];
    rc = 0;
done:
    free(sym);
    free(nxt);
    free(prv);
    free(heap);
    return rc;
}

static int bpe_piece(dl_tokenizer *t, const uint8_t *p, size_t m, dl_tok_ids *out) {
    if (m == 0) return 0;
    if (m == 1) return dl_tok_ids_push(out, t->byte_id[p[0]]);
    if (m > SMALL_PIECE) return bpe_long(t, p, m, out);
    int64_t *hit = dl_smap_get(&t->cache, (const char *)p, m);
    if (hit) {
        size_t off = (size_t)(*hit >> 8), cnt = (size_t)(*hit & 0xFF);
        if (ids_reserve(out, cnt)) return -1;
        memcpy(out->ids + out->n, t->cache_ids + off, sizeof(int32_t) * cnt);
        out->n += cnt;
        return 0;
    }
    int32_t sym[SMALL_PIECE];
    for (size_t k = 0; k < m; k++) sym[k] = t->byte_id[p[k]];
    size_t cnt = bpe_small(t, sym, m);
    if (ids_reserve(out, cnt)) return -1;
    memcpy(out->ids + out->n, sym, sizeof(int32_t) * cnt);
    out->n += cnt;
    /* remember it (a full cache starts over; a failed allocation only skips) */
    if (t->cache.n >= CACHE_ENTRIES || t->cache_n + cnt > CACHE_IDS) {
        dl_smap_clear(&t->cache);
        t->cache_n = 0;
    }
    if (t->cache_n + cnt > t->cache_cap) {
        size_t cap = t->cache_cap ? t->cache_cap * 2 : 65536;
        int32_t *c = realloc(t->cache_ids, sizeof *c * cap);
        if (!c) return 0;
        t->cache_ids = c;
        t->cache_cap = cap;
    }
    if (dl_smap_put(&t->cache, (const char *)p, m, (int64_t)(t->cache_n << 8 | cnt)) == 0) {
        memcpy(t->cache_ids + t->cache_n, sym, sizeof(int32_t) * cnt);
        t->cache_n += cnt;
    }
    return 0;
}

/* --- characters ---------------------------------------------------------------------- */

static int char_segment(dl_tokenizer *t, const uint8_t *s, size_t n, size_t base, dl_tok_ids *out) {
    if (ids_reserve(out, n)) return -1;
    for (size_t i = 0; i < n;) {
        int32_t id;
        size_t l = 1;
        if (s[i] < 0x80) {
            id = t->ascii_id[s[i]];
        } else {
            int32_t cp = dl_utf8_next(s, n, i, &l);
            int64_t *v = cp < 0 ? NULL : dl_smap_get(&t->vocab, (const char *)s + i, l);
            id = v && !(t->flags[*v] & DL_TOKF_ADDED) ? (int32_t)*v : -1;
        }
        if (id < 0) {
            if (t->unk < 0) {
                size_t l2;
                int32_t cp = dl_utf8_next(s, n, i, &l2);
                if (cp < 0)
                    return dl_error("CharTokenizer: byte 0x%02x at byte %zu is not valid UTF-8 "
                                    "(and there is no unk_token)",
                                    s[i], base + i + 1);
                return dl_error("CharTokenizer: character '%.*s' (U+%04X) at byte %zu is not in "
                                "the vocabulary (and there is no unk_token)",
                                (int)l2, (const char *)s + i, (unsigned)cp, base + i + 1);
            }
            id = t->unk;
        }
        out->ids[out->n++] = id;
        i += l;
    }
    return 0;
}

/* --- encode / decode ----------------------------------------------------------------- */

static int encode_segment(dl_tokenizer *t, const uint8_t *s, size_t n, size_t base,
                          dl_tok_ids *out) {
    if (t->kind == DL_TOK_CHAR) return char_segment(t, s, n, base, out);
    if (t->pretok == DL_PRETOK_NONE) return bpe_piece(t, s, n, out);
    for (size_t i = 0; i < n;) {
        size_t j = dl_pretok_next((const char *)s, n, i);
        if (bpe_piece(t, s + i, j - i, out)) return -1;
        i = j;
    }
    return 0;
}

int dl_tokenizer_encode(dl_tokenizer *t, const char *str, size_t n, int allow_special,
                        dl_tok_ids *out) {
    const uint8_t *s = (const uint8_t *)str;
    size_t start = 0;
    if (allow_special && t->n_added) {
        for (size_t i = 0; i < n; i++) {
            if (!t->added_first[s[i]]) continue; /* the common case, without a call */
            size_t len;
            int32_t id = dl_tok_match_added(t, str, n, i, &len);
            if (id < 0) continue;
            if (encode_segment(t, s + start, i - start, start, out) || dl_tok_ids_push(out, id))
                return -1;
            i += len - 1;
            start = i + 1;
        }
    }
    return encode_segment(t, s + start, n - start, start, out);
}

char *dl_tokenizer_decode(const dl_tokenizer *t, const int64_t *ids, size_t n, int skip_special,
                          size_t *len) {
    size_t total = 0;
    for (size_t k = 0; k < n; k++) {
        if (ids[k] < 0 || ids[k] >= t->n) {
            dl_error("decode: an id is out of range (vocabulary of %d)", (int)t->n);
            return NULL;
        }
        if (!(skip_special && (t->flags[ids[k]] & DL_TOKF_SPECIAL))) total += t->len[ids[k]];
    }
    char *buf = malloc(total + 1);
    if (!buf) {
        dl_error("decode: out of memory");
        return NULL;
    }
    size_t o = 0;
    for (size_t k = 0; k < n; k++) {
        int32_t id = (int32_t)ids[k];
        if (skip_special && (t->flags[id] & DL_TOKF_SPECIAL)) continue;
        memcpy(buf + o, dl_tok_bytes(t, id), t->len[id]);
        o += t->len[id];
    }
    buf[o] = '\0';
    *len = o;
    return buf;
}

/* --- accessors ------------------------------------------------------------------------ */

dl_tok_kind dl_tokenizer_kind(const dl_tokenizer *t) {
    return t->kind;
}
dl_pretok dl_tokenizer_pretok(const dl_tokenizer *t) {
    return t->pretok;
}
int32_t dl_tokenizer_size(const dl_tokenizer *t) {
    return t->n;
}

const char *dl_tokenizer_token(const dl_tokenizer *t, int32_t id, size_t *len) {
    if (id < 0 || id >= t->n) return NULL;
    *len = t->len[id];
    return dl_tok_bytes(t, id);
}

int32_t dl_tokenizer_token_id(const dl_tokenizer *t, const char *s, size_t n) {
    int64_t *v = dl_smap_get(&t->vocab, s, n);
    return v ? (int32_t)*v : -1;
}

int dl_tokenizer_is_special(const dl_tokenizer *t, int32_t id) {
    return id >= 0 && id < t->n && (t->flags[id] & DL_TOKF_SPECIAL);
}

int dl_tokenizer_num_special(const dl_tokenizer *t) {
    return t->n_added;
}

int32_t dl_tokenizer_special(const dl_tokenizer *t, int k) {
    /* in id order (t->added is longest first) */
    int seen = 0;
    for (int32_t id = 0; id < t->n; id++)
        if ((t->flags[id] & DL_TOKF_ADDED) && seen++ == k) return id;
    return -1;
}

int32_t dl_tokenizer_unk(const dl_tokenizer *t) {
    return t->unk;
}
int32_t dl_tokenizer_num_merges(const dl_tokenizer *t) {
    return t->n_merges;
}

void dl_tokenizer_merge(const dl_tokenizer *t, int32_t k, int32_t out[3]) {
    memcpy(out, t->merges[k], sizeof(int32_t) * 3);
}
