/* tokenizer_train.c - training the tokenizers of tokenizer.h.
 *
 * BPE: feeding a text cuts out the special tokens, pre-tokenizes the rest and
 * counts each distinct piece.  finish() lays the distinct pieces (two bytes
 * or more) end to end as linked lists of symbols, counts every adjacent pair
 * (weighted by its piece's count) and remembers where each pair occurs; a
 * max-heap of (count, left, right) entries picks the next merge.  A merge
 * visits only the recorded places of its pair (in text order, so "aaa" gives
 * "aa a"), rewrites them and updates the counts of the neighbouring pairs;
 * every pair whose count changed gets a fresh heap entry, and an entry whose
 * count no longer matches is dropped when popped.  Nothing is recounted.
 *
 * Characters: the set of code points fed (a bitmap), in code-point order. */
#include "tokenizer_impl.h"
#include "core/error.h"
#include "io/json.h"

#include <stdlib.h>
#include <string.h>

struct dl_tok_trainer {
    dl_tok_train_opts o;
    char *what;
    dl_tokenizer *spec; /* the special tokens alone, for cutting them out */
    int64_t nfed;
    /* BPE: distinct pieces */
    dl_smap pieces;
    int64_t *count;
    size_t *poff;
    uint32_t *plen;
    size_t npieces, pcap;
    char *pbytes;
    size_t pbytes_n, pbytes_cap;
    /* CHAR: code points seen */
    uint8_t *seen;
};

void dl_tok_trainer_free(dl_tok_trainer *tr) {
    if (!tr) return;
    free(tr->what);
    dl_tokenizer_free(tr->spec);
    dl_smap_free(&tr->pieces);
    free(tr->count);
    free(tr->poff);
    free(tr->plen);
    free(tr->pbytes);
    free(tr->seen);
    free(tr);
}

dl_tok_trainer *dl_tok_trainer_new(const dl_tok_train_opts *o, const char *what) {
    if (o->n_special < 0) {
        dl_error("%s: negative number of special tokens", what);
        return NULL;
    }
    for (int i = 0; i < o->n_special; i++) {
        size_t bad;
        if (o->special_len[i] == 0) {
            dl_error("%s: special token %d is empty", what, i + 1);
            return NULL;
        }
        if (!dl_utf8_valid(o->special[i], o->special_len[i], &bad)) {
            dl_error("%s: special token %d is not valid UTF-8 (byte %zu)", what, i + 1, bad + 1);
            return NULL;
        }
        for (int j = 0; j < i; j++)
            if (o->special_len[j] == o->special_len[i] &&
                memcmp(o->special[j], o->special[i], o->special_len[i]) == 0) {
                dl_error("%s: special token %d repeats special token %d", what, i + 1, j + 1);
                return NULL;
            }
    }
    if (o->kind == DL_TOK_BPE) {
        if (o->vocab_size < 256 + (int64_t)o->n_special) {
            dl_error("%s: vocab_size %lld is smaller than the 256 bytes + %d special tokens", what,
                     (long long)o->vocab_size, o->n_special);
            return NULL;
        }
        if (o->vocab_size > INT32_MAX - 1) {
            dl_error("%s: vocab_size %lld is too large", what, (long long)o->vocab_size);
            return NULL;
        }
        if (o->min_frequency < 1) {
            dl_error("%s: min_frequency must be at least 1", what);
            return NULL;
        }
    } else if (o->unk < -1 || o->unk >= o->n_special) {
        dl_error("%s: the unk token must be one of the special tokens", what);
        return NULL;
    }
    dl_tok_trainer *tr = dl_zalloc(sizeof *tr, "%s: out of memory", what);
    if (!tr) return NULL;
    tr->o = *o;
    tr->o.special = NULL;
    tr->o.special_len = NULL;
    tr->what = strdup(what);
    tr->spec = dl_tok_alloc(DL_TOK_CHAR);
    if (!tr->what || !tr->spec) goto oom;
    for (int i = 0; i < o->n_special; i++)
        if (dl_tok_add(tr->spec, o->special[i], o->special_len[i],
                       DL_TOKF_ADDED | DL_TOKF_SPECIAL) < 0)
            goto oom;
    if (dl_tok_finish(tr->spec, what)) goto fail;
    if (o->kind == DL_TOK_CHAR && !(tr->seen = calloc(0x110000 / 8, 1))) goto oom;
    return tr;
oom:
    dl_error("%s: out of memory", what);
fail:
    dl_tok_trainer_free(tr);
    return NULL;
}

static int count_piece(dl_tok_trainer *tr, const char *s, size_t n) {
    if (n < 2) return 0; /* a single byte has no pair */
    int64_t *v = dl_smap_get(&tr->pieces, s, n);
    if (v) {
        tr->count[*v]++;
        return 0;
    }
    if (n > UINT32_MAX) return dl_error("%s: a piece of %zu bytes is too long", tr->what, n);
    if (tr->npieces == tr->pcap) {
        size_t cap = tr->pcap ? tr->pcap * 2 : 4096;
        int64_t *c = realloc(tr->count, sizeof *c * cap);
        if (c) tr->count = c;
        size_t *po = realloc(tr->poff, sizeof *po * cap);
        if (po) tr->poff = po;
        uint32_t *pl = realloc(tr->plen, sizeof *pl * cap);
        if (pl) tr->plen = pl;
        if (!c || !po || !pl) return dl_error("%s: out of memory", tr->what);
        tr->pcap = cap;
    }
    if (tr->pbytes_n + n > tr->pbytes_cap) {
        size_t cap = tr->pbytes_cap ? tr->pbytes_cap : 65536;
        while (cap < tr->pbytes_n + n) cap *= 2;
        char *b = realloc(tr->pbytes, cap);
        if (!b) return dl_error("%s: out of memory", tr->what);
        tr->pbytes = b;
        tr->pbytes_cap = cap;
    }
    memcpy(tr->pbytes + tr->pbytes_n, s, n);
    if (dl_smap_put(&tr->pieces, s, n, (int64_t)tr->npieces))
        return dl_error("%s: out of memory", tr->what);
    tr->poff[tr->npieces] = tr->pbytes_n;
    tr->plen[tr->npieces] = (uint32_t)n;
    tr->count[tr->npieces++] = 1;
    tr->pbytes_n += n;
    return 0;
}

static int feed_segment(dl_tok_trainer *tr, const char *s, size_t n) {
    if (tr->o.kind == DL_TOK_CHAR) {
        size_t bad;
        if (!dl_utf8_valid(s, n, &bad))
            return dl_error("%s: training text %lld is not valid UTF-8 (byte 0x%02x)", tr->what,
                            (long long)tr->nfed, (uint8_t)s[bad]);
        for (size_t i = 0; i < n;) {
            size_t l;
            int32_t cp = dl_utf8_next((const uint8_t *)s, n, i, &l);
            tr->seen[cp >> 3] |= (uint8_t)(1u << (cp & 7));
            i += l;
        }
        return 0;
    }
    if (tr->o.pretok == DL_PRETOK_NONE) return count_piece(tr, s, n);
    for (size_t i = 0; i < n;) {
        size_t j = dl_pretok_next(s, n, i);
        if (count_piece(tr, s + i, j - i)) return -1;
        i = j;
    }
    return 0;
}

int dl_tok_trainer_feed(dl_tok_trainer *tr, const char *s, size_t n) {
    tr->nfed++;
    size_t start = 0;
    if (tr->spec->n_added)
        for (size_t i = 0; i < n; i++) {
            size_t len;
            if (!tr->spec->added_first[(uint8_t)s[i]] ||
                dl_tok_match_added(tr->spec, s, n, i, &len) < 0)
                continue;
            if (feed_segment(tr, s + start, i - start)) return -1;
            i += len - 1;
            start = i + 1;
        }
    return feed_segment(tr, s + start, n - start);
}

/* --- BPE merges ------------------------------------------------------------------------ */

typedef struct {
    int32_t a, b;
    int64_t count;
    int32_t *occ; /* positions of the left symbol (may hold stale ones) */
    int32_t nocc, cap;
    uint32_t stamp; /* last merge that touched it */
} pair;

typedef struct {
    int64_t count;
    int32_t a, b;
} heap_entry;

typedef struct {
    dl_tokenizer *t;
    const char *what;
    int32_t *sym, *nxt, *prv, *piece;
    const int64_t *weight; /* per piece */
    pair *pairs;
    size_t npairs, pairs_cap;
    dl_pmap index; /* (a, b) -> pair */
    heap_entry *heap;
    size_t nheap, heap_cap;
    int32_t *touched;
    size_t ntouched, touched_cap;
    uint32_t stamp;
} bpe_state;

/* Doubles the array p of *cap elements of `size` bytes (to `first` when
 * empty); the new array, or NULL (p kept, *cap unchanged) when out of memory. */
static void *grow(void *p, size_t *cap, size_t size, size_t first) {
    size_t n = *cap ? *cap * 2 : first;
    void *q = realloc(p, size * n);
    if (q) *cap = n;
    return q;
}

/* a before b in the heap: the larger count, then the smaller (left, right) */
static inline int heap_before(const heap_entry *x, const heap_entry *y) {
    if (x->count != y->count) return x->count > y->count;
    if (x->a != y->a) return x->a < y->a;
    return x->b < y->b;
}

static int heap_push(bpe_state *st, heap_entry e) {
    if (st->nheap == st->heap_cap) {
        heap_entry *h = grow(st->heap, &st->heap_cap, sizeof *h, 4096);
        if (!h) return -1;
        st->heap = h;
    }
    size_t i = st->nheap++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!heap_before(&e, &st->heap[p])) break;
        st->heap[i] = st->heap[p];
        i = p;
    }
    st->heap[i] = e;
    return 0;
}

static heap_entry heap_pop(bpe_state *st) {
    heap_entry top = st->heap[0], v = st->heap[--st->nheap];
    size_t i = 0, n = st->nheap;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && heap_before(&st->heap[c + 1], &st->heap[c])) c++;
        if (!heap_before(&st->heap[c], &v)) break;
        st->heap[i] = st->heap[c];
        i = c;
    }
    if (n) st->heap[i] = v;
    return top;
}

/* The pair (a, b), created with count 0 when new; -1 when out of memory. */
static int64_t get_pair(bpe_state *st, int32_t a, int32_t b) {
    int64_t k = dl_pmap_get(&st->index, a, b);
    if (k >= 0) return k;
    if (st->npairs == st->pairs_cap) {
        pair *p = grow(st->pairs, &st->pairs_cap, sizeof *p, 4096);
        if (!p) return -1;
        st->pairs = p;
    }
    k = (int64_t)st->npairs;
    if (dl_pmap_put(&st->index, a, b, k)) return -1;
    st->pairs[st->npairs++] = (pair){a, b, 0, NULL, 0, 0, 0};
    return k;
}

static int touch(bpe_state *st, int64_t k) {
    pair *p = &st->pairs[k];
    if (p->stamp == st->stamp) return 0;
    p->stamp = st->stamp;
    if (st->ntouched == st->touched_cap) {
        int32_t *t = grow(st->touched, &st->touched_cap, sizeof *t, 1024);
        if (!t) return -1;
        st->touched = t;
    }
    st->touched[st->ntouched++] = (int32_t)k;
    return 0;
}

/* count of (a, b) += w; pos (when >= 0) is recorded as a place of it */
static int add_pair(bpe_state *st, int32_t a, int32_t b, int64_t w, int32_t pos) {
    int64_t k = get_pair(st, a, b);
    if (k < 0 || touch(st, k)) return -1;
    pair *p = &st->pairs[k];
    p->count += w;
    if (pos < 0) return 0;
    if (p->nocc == p->cap) {
        int32_t cap = p->cap ? p->cap * 2 : 4;
        int32_t *o = realloc(p->occ, sizeof *o * (size_t)cap);
        if (!o) return -1;
        p->occ = o;
        p->cap = cap;
    }
    p->occ[p->nocc++] = pos;
    return 0;
}

static int cmp_i32(const void *x, const void *y) {
    int32_t a = *(const int32_t *)x, b = *(const int32_t *)y;
    return a < b ? -1 : a > b;
}

/* Applies merge (a, b) -> c at every recorded place of pair k. */
static int apply_merge(bpe_state *st, int64_t k, int32_t c) {
    int32_t a = st->pairs[k].a, b = st->pairs[k].b;
    int32_t *occ = st->pairs[k].occ, nocc = st->pairs[k].nocc;
    st->pairs[k].occ = NULL; /* taken: the loop below may move st->pairs */
    st->pairs[k].nocc = st->pairs[k].cap = 0;
    qsort(occ, (size_t)nocc, sizeof *occ, cmp_i32);
    int rc = 0;
    for (int32_t i = 0; i < nocc && !rc; i++) {
        int32_t pos = occ[i];
        if (i > 0 && occ[i - 1] == pos) continue;
        if (st->sym[pos] != a) continue;
        int32_t nx = st->nxt[pos];
        if (nx < 0 || st->sym[nx] != b) continue;
        int64_t w = st->weight[st->piece[pos]];
        int32_t L = st->prv[pos], R = st->nxt[nx];
        if (L >= 0) rc = add_pair(st, st->sym[L], a, -w, -1) || add_pair(st, st->sym[L], c, w, L);
        if (!rc && R >= 0)
            rc = add_pair(st, b, st->sym[R], -w, -1) || add_pair(st, c, st->sym[R], w, pos);
        if (!rc) rc = add_pair(st, a, b, -w, -1);
        st->sym[pos] = c;
        st->sym[nx] = -1;
        st->nxt[pos] = R;
        if (R >= 0) st->prv[R] = pos;
    }
    free(occ);
    return rc;
}

static int push_touched(bpe_state *st) {
    for (size_t i = 0; i < st->ntouched; i++) {
        pair *p = &st->pairs[st->touched[i]];
        if (p->count > 0 && heap_push(st, (heap_entry){p->count, p->a, p->b})) return -1;
        if (p->count <= 0) { /* gone: its places are stale */
            free(p->occ);
            p->occ = NULL;
            p->nocc = p->cap = 0;
        }
    }
    st->ntouched = 0;
    return 0;
}

static int train_bpe(dl_tok_trainer *tr, dl_tokenizer *t) {
    const char *what = tr->what;
    bpe_state st = {.t = t, .what = what, .weight = tr->count};
    int rc = -1;
    char *buf = NULL;
    size_t total = 0;
    for (size_t i = 0; i < tr->npieces; i++) total += tr->plen[i];
    if (total >= INT32_MAX) {
        dl_error("%s: the distinct training text is too large (%zu bytes; at most 2 GiB)", what,
                 total);
        return -1;
    }
    size_t m = total ? total : 1;
    st.sym = malloc(sizeof(int32_t) * m);
    st.nxt = malloc(sizeof(int32_t) * m);
    st.prv = malloc(sizeof(int32_t) * m);
    st.piece = malloc(sizeof(int32_t) * m);
    if (!st.sym || !st.nxt || !st.prv || !st.piece) goto oom;
    st.stamp = 1;
    size_t pos = 0;
    for (size_t i = 0; i < tr->npieces; i++) {
        const uint8_t *s = (const uint8_t *)tr->pbytes + tr->poff[i];
        size_t n = tr->plen[i];
        for (size_t k = 0; k < n; k++, pos++) {
            st.sym[pos] = t->byte_id[s[k]];
            st.piece[pos] = (int32_t)i;
            st.prv[pos] = k ? (int32_t)pos - 1 : -1;
            st.nxt[pos] = k + 1 < n ? (int32_t)pos + 1 : -1;
            if (k && add_pair(&st, st.sym[pos - 1], st.sym[pos], tr->count[i], (int32_t)pos - 1))
                goto oom;
        }
    }
    if (push_touched(&st)) goto oom;
    size_t bufcap = 0;
    while (t->n < tr->o.vocab_size && st.nheap) {
        heap_entry e = heap_pop(&st);
        int64_t k = dl_pmap_get(&st.index, e.a, e.b);
        if (st.pairs[k].count != e.count) continue; /* stale entry */
        if (e.count < tr->o.min_frequency) break;
        size_t la = t->len[e.a], lb = t->len[e.b];
        if (la + lb > bufcap) {
            bufcap = (la + lb) * 2;
            char *nb = realloc(buf, bufcap);
            if (!nb) goto oom;
            buf = nb;
        }
        memcpy(buf, dl_tok_bytes(t, e.a), la);
        memcpy(buf + la, dl_tok_bytes(t, e.b), lb);
        int64_t *have = dl_smap_get(&t->vocab, buf, la + lb);
        int32_t c = have ? (int32_t)*have : dl_tok_add(t, buf, la + lb, 0);
        if (c < 0) goto fail;
        if (!have && dl_smap_put(&t->vocab, buf, la + lb, c)) goto oom;
        if (dl_tok_add_merge(t, e.a, e.b, c)) goto fail;
        st.stamp++;
        if (apply_merge(&st, k, c) || push_touched(&st)) goto oom;
    }
    rc = 0;
    goto done;
oom:
    dl_error("%s: out of memory", what);
fail:
    rc = -1;
done:
    free(buf);
    free(st.sym);
    free(st.nxt);
    free(st.prv);
    free(st.piece);
    for (size_t i = 0; i < st.npairs; i++) free(st.pairs[i].occ);
    free(st.pairs);
    dl_pmap_free(&st.index);
    free(st.heap);
    free(st.touched);
    return rc;
}

dl_tokenizer *dl_tok_trainer_finish(dl_tok_trainer *tr) {
    const dl_tok_train_opts *o = &tr->o;
    dl_tokenizer *t = dl_tok_alloc(o->kind);
    if (!t) return NULL;
    t->pretok = o->pretok;
    for (int i = 0; i < tr->spec->n; i++)
        if (dl_tok_add(t, dl_tok_bytes(tr->spec, i), tr->spec->len[i],
                       DL_TOKF_ADDED | DL_TOKF_SPECIAL) < 0)
            goto fail;
    if (o->kind == DL_TOK_BPE) {
        for (int b = 0; b < 256; b++) {
            char c = (char)b;
            int32_t id = dl_tok_add(t, &c, 1, 0);
            if (id < 0 || dl_smap_put(&t->vocab, &c, 1, id)) goto fail;
            t->byte_id[b] = id;
        }
        if (train_bpe(tr, t)) goto fail;
    } else {
        t->unk = o->unk;
        for (int32_t cp = 0; cp < 0x110000; cp++) {
            if (!(tr->seen[cp >> 3] & (1u << (cp & 7)))) continue;
            char u[4];
            size_t l = dl_utf8_put(u, (uint32_t)cp);
            if (dl_tok_add(t, u, l, 0) < 0) goto fail;
        }
    }
    if (dl_tok_finish(t, tr->what)) goto fail;
    return t;
fail:
    dl_tokenizer_free(t);
    return NULL;
}
