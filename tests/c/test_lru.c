/* test_lru.c - the bounded LRU cache (src/core/lru.c) and the cuDNN plan
 * cache's keys (src/kernels/conv.h), in plain C on any machine: hits and
 * misses, recency order, eviction of the least recent entry at capacity,
 * replacement of an equal key, every value freed exactly once (evicted,
 * replaced, cleared, freed with the cache, or refused), keys of different
 * lengths, many keys in few buckets; and that plan keys are equal exactly
 * when every fact a plan depends on is (alignment classes, layout strides,
 * TF32 only for float32).  Prints "N passed, N failed"; exit 1 on failure. */
#include "core/lru.h"
#include "kernels/conv.h"

#include <stdio.h>
#include <string.h>

static int passed, failed;

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (cond) {                                                                                \
            passed++;                                                                              \
        } else {                                                                                   \
            failed++;                                                                              \
            fprintf(stderr, "FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond);                        \
        }                                                                                          \
    } while (0)

/* Values are ints in this array; freeing one counts it. */
static int values[4096];
static int freed[4096];

static void free_value(void *v, void *ctx) {
    int *count = ctx;
    (*count)++;
    freed[(int *)v - values]++;
}

static void *val(int i) {
    return &values[i];
}

/* The key "k<i>" (string bytes, no terminator). */
static const char *key(int i, char *buf, size_t n) {
    snprintf(buf, n, "k%d", i);
    return buf;
}

static int get_i(dl_lru *c, int i) {
    char b[32];
    key(i, b, sizeof b);
    int *v = dl_lru_get(c, b, strlen(b));
    return v ? *v : -1;
}

static void put_i(dl_lru *c, int i) {
    char b[32];
    key(i, b, sizeof b);
    CHECK(dl_lru_put(c, b, strlen(b), val(i)) == 0);
}

static void test_basic(void) {
    int nfree = 0;
    for (int i = 0; i < 4096; i++) values[i] = i, freed[i] = 0;
    dl_lru *c = dl_lru_new(3, free_value, &nfree);
    CHECK(c != NULL);
    CHECK(get_i(c, 1) == -1); /* a miss */
    put_i(c, 1);
    put_i(c, 2);
    put_i(c, 3);
    CHECK(get_i(c, 1) == 1); /* 1 becomes the most recent: order 1 3 2 */
    size_t n = 0;
    const char *k0 = dl_lru_key_at(c, 0, &n);
    CHECK(k0 && n == 2 && memcmp(k0, "k1", 2) == 0);
    const char *k2 = dl_lru_key_at(c, 2, &n);
    CHECK(k2 && memcmp(k2, "k2", 2) == 0);
    CHECK(dl_lru_key_at(c, 3, &n) == NULL);
    put_i(c, 4); /* full: evicts the least recent, 2 */
    CHECK(get_i(c, 2) == -1);
    CHECK(freed[2] == 1 && nfree == 1);
    CHECK(get_i(c, 3) == 3 && get_i(c, 4) == 4 && get_i(c, 1) == 1);
    dl_lru_stats st;
    dl_lru_get_stats(c, &st);
    CHECK(st.size == 3 && st.capacity == 3);
    CHECK(st.hits == 4 && st.misses == 2 && st.evictions == 1);
    /* an equal key replaces the entry (the old value freed, no eviction) */
    char b[32];
    key(3, b, sizeof b);
    CHECK(dl_lru_put(c, b, strlen(b), val(33)) == 0);
    CHECK(freed[3] == 1 && get_i(c, 3) == 33);
    dl_lru_get_stats(c, &st);
    CHECK(st.size == 3 && st.evictions == 1);
    /* putting an entry's own value again only refreshes it */
    CHECK(dl_lru_put(c, b, strlen(b), val(33)) == 0);
    CHECK(freed[33] == 0 && get_i(c, 3) == 33);
    dl_lru_clear(c);
    dl_lru_get_stats(c, &st);
    CHECK(st.size == 0 && st.hits > 0);
    CHECK(freed[1] == 1 && freed[4] == 1 && freed[33] == 1 && nfree == 5);
    CHECK(get_i(c, 1) == -1);
    put_i(c, 7);
    dl_lru_free(c); /* frees 7 */
    CHECK(freed[7] == 1 && nfree == 6);
    dl_lru_free(NULL);
}

static void test_keys(void) {
    int nfree = 0;
    dl_lru *c = dl_lru_new(8, free_value, &nfree);
    /* keys that share a prefix, an empty key and binary bytes are distinct */
    const unsigned char a[] = {0, 1, 2}, ab[] = {0, 1, 2, 0};
    CHECK(dl_lru_put(c, a, sizeof a, val(10)) == 0);
    CHECK(dl_lru_put(c, ab, sizeof ab, val(11)) == 0);
    CHECK(dl_lru_put(c, "", 0, val(12)) == 0);
    CHECK(dl_lru_get(c, a, sizeof a) == val(10));
    CHECK(dl_lru_get(c, ab, sizeof ab) == val(11));
    CHECK(dl_lru_get(c, "", 0) == val(12));
    CHECK(dl_lru_get(c, a, 2) == NULL);
    dl_lru_free(c);
    CHECK(nfree == 3);
    /* capacity 1, and many keys through a small cache: only the last stay */
    nfree = 0;
    c = dl_lru_new(1, free_value, &nfree);
    put_i(c, 1);
    put_i(c, 2);
    CHECK(get_i(c, 1) == -1 && get_i(c, 2) == 2 && nfree == 1);
    dl_lru_free(c);
    nfree = 0;
    for (int i = 0; i < 4096; i++) freed[i] = 0;
    c = dl_lru_new(100, free_value, &nfree);
    for (int i = 0; i < 4000; i++) put_i(c, i);
    int present = 0;
    for (int i = 0; i < 4000; i++) present += get_i(c, i) == i;
    CHECK(present == 100);
    CHECK(get_i(c, 3999) == 3999 && get_i(c, 3900) == 3900 && get_i(c, 3899) == -1);
    dl_lru_stats st;
    dl_lru_get_stats(c, &st);
    CHECK(st.evictions == 3900 && nfree == 3900);
    dl_lru_free(c);
    int once = 1;
    for (int i = 0; i < 4000; i++) once &= freed[i] == 1;
    CHECK(once && nfree == 4000);
    /* bad capacity */
    CHECK(dl_lru_new(0, free_value, &nfree) == NULL);
}

static dl_conv2d_shape shape(void) {
    dl_conv2d_shape s = {8, 64, 56, 56, 128, 3, 3, 28, 28, 2, 2, 1, 1, 1, 1, 1};
    return s;
}

static void test_plan_keys(void) {
    static _Alignas(64) unsigned char buf[256];
    dl_conv2d_shape s = shape();
    dl_conv_plan_key a, b;
    const void *x = buf, *w = buf + 64, *y = buf + 128;
    dl_conv_plan_key_make(&a, DL_CONV_PLAN_FWD, 0, DL_DTYPE_F32, &s, false, false, false, x, w, y);
    dl_conv_plan_key_make(&b, DL_CONV_PLAN_FWD, 0, DL_DTYPE_F32, &s, false, false, false, x, w, y);
    CHECK(memcmp(&a, &b, sizeof a) == 0);
    CHECK(a.align[0] == 16 && a.align[1] == 16 && a.align[2] == 16);
    /* alignment classes of an offset pointer */
    CHECK(dl_conv_plan_align(buf + 2) == 2 && dl_conv_plan_align(buf + 4) == 4);
    CHECK(dl_conv_plan_align(buf + 8) == 8 && dl_conv_plan_align(buf + 1) == 1);
    CHECK(dl_conv_plan_align(buf + 32) == 16 && dl_conv_plan_align(buf + 48) == 16);
    /* strides: NCHW and channels-last */
    CHECK(a.strides[0] == 64 * 56 * 56 && a.strides[1] == 56 * 56 && a.strides[2] == 56);
    CHECK(a.strides[3] == 1);
    CHECK(a.strides[4] == 64 * 9 && a.strides[8] == 128 * 28 * 28);
    dl_conv_plan_key_make(&b, DL_CONV_PLAN_FWD, 0, DL_DTYPE_F32, &s, true, false, false, x, w, y);
    CHECK(b.nhwc == 1 && b.strides[1] == 1 && b.strides[3] == 64 && b.strides[2] == 56 * 64);
    CHECK(b.strides[5] == 1 && b.strides[7] == 64 && b.strides[9] == 1 && b.strides[11] == 128);
    CHECK(memcmp(&a, &b, sizeof a) != 0);
    /* every other fact makes a different key */
    dl_conv_plan_key k;
#define DIFFERS(...)                                                                               \
    do {                                                                                           \
        dl_conv_plan_key_make(&k, __VA_ARGS__);                                                    \
        CHECK(memcmp(&a, &k, sizeof a) != 0);                                                      \
    } while (0)
    DIFFERS(DL_CONV_PLAN_BWD_DATA, 0, DL_DTYPE_F32, &s, false, false, false, x, w, y);
    DIFFERS(DL_CONV_PLAN_BWD_FILTER, 0, DL_DTYPE_F32, &s, false, false, false, x, w, y);
    DIFFERS(DL_CONV_PLAN_FWD, 1, DL_DTYPE_F32, &s, false, false, false, x, w, y);
    DIFFERS(DL_CONV_PLAN_FWD, 0, DL_DTYPE_BF16, &s, false, false, false, x, w, y);
    DIFFERS(DL_CONV_PLAN_FWD, 0, DL_DTYPE_F32, &s, false, true, false, x, w, y);
    DIFFERS(DL_CONV_PLAN_FWD, 0, DL_DTYPE_F32, &s, false, false, true, x, w, y);
    DIFFERS(DL_CONV_PLAN_FWD, 0, DL_DTYPE_F32, &s, false, false, false, buf + 2, w, y);
    DIFFERS(DL_CONV_PLAN_FWD, 0, DL_DTYPE_F32, &s, false, false, false, x, buf + 8, y);
    DIFFERS(DL_CONV_PLAN_FWD, 0, DL_DTYPE_F32, &s, false, false, false, x, w, buf + 4);
    _Static_assert(sizeof(dl_conv2d_shape) == 16 * sizeof(int64_t), "16 int64 fields");
    for (int f = 0; f < 16; f++) {
        dl_conv2d_shape t = shape();
        int64_t fields[16];
        memcpy(fields, &t, sizeof fields);
        fields[f] += 1;
        memcpy(&t, fields, sizeof fields);
        DIFFERS(DL_CONV_PLAN_FWD, 0, DL_DTYPE_F32, &t, false, false, false, x, w, y);
    }
#undef DIFFERS
    /* another address of the same alignment is the same key */
    dl_conv_plan_key_make(&b, DL_CONV_PLAN_FWD, 0, DL_DTYPE_F32, &s, false, false, false, buf + 16,
                          buf + 80, buf + 144);
    CHECK(memcmp(&a, &b, sizeof a) == 0);
    /* TF32 splits float32 keys only */
    dl_conv_plan_key_make(&a, DL_CONV_PLAN_FWD, 0, DL_DTYPE_F16, &s, true, false, false, x, w, y);
    dl_conv_plan_key_make(&b, DL_CONV_PLAN_FWD, 0, DL_DTYPE_F16, &s, true, true, false, x, w, y);
    CHECK(memcmp(&a, &b, sizeof a) == 0);
    /* plan keys in the LRU */
    int nfree = 0;
    dl_lru *c = dl_lru_new(2, free_value, &nfree);
    CHECK(dl_lru_put(c, &a, sizeof a, val(1)) == 0);
    CHECK(dl_lru_get(c, &b, sizeof b) == val(1));
    dl_conv_plan_key_make(&b, DL_CONV_PLAN_BWD_DATA, 0, DL_DTYPE_F16, &s, true, false, false, x, w,
                          y);
    CHECK(dl_lru_get(c, &b, sizeof b) == NULL);
    dl_lru_free(c);
}

int main(void) {
    test_basic();
    test_keys();
    test_plan_keys();
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
