/* cpu/reduce.c - CPU kernels of the reduction family (see cpu/reduce.h).
 *
 * Layout: x is a dense (RO, O, R, I) block reduced over ro and r.
 *  - I == 1, long rows: a row is folded into LANES independent accumulators
 *    (the row seen as (n/LANES, LANES) columns plus a tail), which the
 *    compiler vectorises; then the lanes are combined.
 *  - I == 1, short rows (R <= SHORT_ROW): an item folds up to COL_BLOCK
 *    neighbouring rows side by side, one accumulator per row, so per-row
 *    overheads vanish (argmax over 10 classes of a million rows).
 *  - I > 1 (columns): COL_BLOCK neighbouring columns are folded together row
 *    after row, so memory is read in order and the inner loop vectorises.
 *  - RO > 1: the same item folds the rows of every ro into its accumulators.
 * Every block fold addresses element (r, c) as x[off + r*ld + c*xcs].
 * Work items are (o, column block, row chunk) and run in parallel with
 * OpenMP.  Rows are cut into chunks only when there are few (o, block) items;
 * chunk partials are then combined in chunk order.  The cut depends on the
 * shape alone, so a result never depends on the thread count.
 * Float kernels take float32 or float64 and accumulate in double; one
 * always-inline body serves both through a constant `f64` flag, and small
 * non-inline wrappers (_f32/_f64, _lanes/_cols) pin the constants.
 * float32 sums, sums of squares and of |x|, products and extremes have their
 * own folds (ffold_item): float vector lanes (64 along a row, in eight
 * 8-float chains for the sums and four 16-float ones for the extremes; a register tile of 64
 * columns across rows) take FBLK rows at a time and are then flushed into double accumulators, so a
 * float rounding error spans at most FBLK terms (PyTorch's float cascade spans more); extremes stay
 * in float to the end (exact), NaN lanes noted on the way.  Columns come in WIDE_COLS blocks so
 * each row is read in long runs. max/min with indices along a row scan MM_CHUNK elements for their
 * extreme (and any NaN) in vector lanes, then look up its first index only when the chunk beats the
 * best so far. */
#include "cpu/reduce.h"
#include "core/error.h"
#include "core/parallel.h"
#include "cpu/vec8.h"
#include "core/storage.h"
#include "cpu/half.h"
#include "cpu/vecmath.h"

#include <math.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>

#define LANES 8         /* accumulators along a contiguous row (general kinds) */
#define FLANES 64       /* float32 sums, max/min scans: lanes along a contiguous row */
#define MM_CHUNK 1024   /* max/min with indices: elements scanned per chunk of a row */
#define LSE_CHUNK 1024  /* logsumexp along rows: elements per max-then-exp step */
#define LSE_SUPER 16384 /* logsumexp over inner dims: elements per max-then-exp step */
#define COL_BLOCK 256   /* columns (or short rows) folded together */
#define WIDE_COLS 2048  /* columns folded together by the float32 folds */
#define PF_DIST 2048    /* row folds: floats ahead a cache line is prefetched (8 KiB) */
#define FBLK 8          /* float32 sums and products: rows of lanes or columns per flush */
#define SHORT_ROW 32    /* rows this short are folded side by side */
#define MIN_CHUNK 16384 /* elements in a row chunk, at least */
#define FEW_ITEMS 64    /* fewer (o, block) items than this: cut rows into chunks */

#define ALWAYS_INLINE static inline __attribute__((always_inline))
/* a prefetch of the line PF_DIST floats past p (in integer arithmetic: the
 * address may lie past the array's end, harmless for a prefetch) */
#define PREFETCH_AHEAD(p)                                                                          \
    __builtin_prefetch((const void *)((uintptr_t)(p) + PF_DIST * sizeof(float)))
/* the block folds built for AVX-512 and AVX2 too, picked at load time (the
 * sums' order is fixed by LANES and COL_BLOCK, not by the vector width:
 * every accumulator is its own chain) */
#define REDUCE_CLONES DL_CPU_CLONES
/* the float32 row folds in 256-bit vectors: AVX-512 took 15-25% longer over
 * a 64 MiB tensor on the Zen 4 cores measured, against what was then the
 * plain x86-64 clone (an "arch=haswell" clone is never picked on AMD, see
 * core/parallel.h); memory bound either way, the order of the sums is the same */
#define REDUCE_ROW_CLONES DL_TARGET_CLONES("arch=x86-64-v3", "default")

/* --- splitting the work ------------------------------------------------------ */

typedef struct {
    int64_t RO, O, R, I;
    bool group;         /* short rows: an item takes bsize outputs side by side */
    int64_t bsize, nb;  /* columns (or grouped outputs) per item, number of blocks */
    int64_t csize, nch; /* rows per chunk, number of chunks */
} split;

static void split_init(split *s, const dl_rshape *sh, bool chunk_rows, bool group_ok,
                       int64_t cols) {
    int64_t O = sh->O, R = sh->R, I = sh->I;
    s->RO = sh->RO;
    s->O = O;
    s->R = R;
    s->I = I;
    s->nch = 1;
    s->csize = R;
    s->group = group_ok && I == 1 && R <= SHORT_ROW && O > 1;
    if (s->group) {
        s->bsize = O < COL_BLOCK ? O : COL_BLOCK;
        s->nb = (O + s->bsize - 1) / s->bsize;
        return;
    }
    s->bsize = I < cols ? I : cols;
    s->nb = (I + s->bsize - 1) / s->bsize;
    int64_t items = O * s->nb;
    if (chunk_rows && items < FEW_ITEMS) {
        int64_t want = (FEW_ITEMS + items - 1) / items;
        int64_t most = s->RO * R * s->bsize / MIN_CHUNK;
        if (most > R) most = R;
        if (want > most) want = most;
        if (want > 1) s->nch = want;
    }
    s->csize = (R + s->nch - 1) / s->nch;
    s->nch = (R + s->csize - 1) / s->csize; /* no empty chunk */
}

/* One work item: rows [r0, r0+nr) of columns [c0, c0+nc) of block o (for
 * every ro); its results go to partial slot `slot` (= o*nch + chunk).  In
 * group mode it is the nc outputs o.. with c0 = r0 = 0, nr = R, slot = o. */
typedef void (*item_fn)(void *ctx, int64_t o, int64_t c0, int64_t nc, int64_t r0, int64_t nr,
                        int64_t slot);

static void split_run(const split *s, item_fn fn, void *ctx) {
    int64_t items = s->group ? s->nb : s->O * s->nb * s->nch;
    int nthr = s->RO * s->O * s->R * s->I >= DL_PARALLEL_GRAIN ? dl_get_num_threads() : 1;
    if (nthr > items) nthr = (int)items;
#pragma omp parallel for num_threads(nthr) schedule(static) if (nthr > 1)
    for (int64_t it = 0; it < items; it++) {
        if (s->group) {
            int64_t o = it * s->bsize, n = s->O - o < s->bsize ? s->O - o : s->bsize;
            fn(ctx, o, 0, n, 0, s->R, o);
            continue;
        }
        int64_t ch = it % s->nch, ob = it / s->nch;
        int64_t b = ob % s->nb, o = ob / s->nb;
        int64_t c0 = b * s->bsize, r0 = ch * s->csize;
        int64_t nc = s->I - c0 < s->bsize ? s->I - c0 : s->bsize;
        int64_t nr = s->R - r0 < s->csize ? s->R - r0 : s->csize;
        fn(ctx, o, c0, nc, r0, nr, o * s->nch + ch);
    }
}

static int no_memory(const char *what) {
    return dl_error("%s: out of memory for the reduction's scratch space", what);
}

/* --- float accumulations ------------------------------------------------------ */

ALWAYS_INLINE double ldx(const void *x, int64_t i, bool f64) {
    return f64 ? ((const double *)x)[i] : (double)((const float *)x)[i];
}

/* max/min where a NaN on either side wins */
static inline double nan_max(double a, double v) {
    return (v > a || v != v) ? v : a;
}
static inline double nan_min(double a, double v) {
    return (v < a || v != v) ? v : a;
}

ALWAYS_INLINE double acc_identity(dl_acc_kind k) {
    switch (k) {
    case DL_ACC_PROD: return 1;
    case DL_ACC_MAX: return -INFINITY;
    case DL_ACC_MIN:
    case DL_ACC_MINABS: return INFINITY;
    default: return 0;
    }
}

ALWAYS_INLINE double acc_combine(dl_acc_kind k, double a, double b) {
    switch (k) {
    case DL_ACC_PROD: return a * b;
    case DL_ACC_MAX:
    case DL_ACC_MAXABS: return nan_max(a, b);
    case DL_ACC_MIN:
    case DL_ACC_MINABS: return nan_min(a, b);
    default: return a + b;
    }
}

/* t[0..n) = exp(t) (float64 when f64, else float32) through the vector exp
 * of the elementwise family (libm's exp/expf where that is unavailable) */
static void vexp(void *t, int64_t n, bool f64) {
    char *d[2] = {t, t};
    const int64_t st[2] = {f64 ? 8 : 4, f64 ? 8 : 4};
    if (f64 ? dl_cpu_vec_unary_f64(DL_UNARY_EXP, d, st, n)
            : dl_cpu_vec_unary_f32(DL_UNARY_EXP, d, st, n))
        return;
    for (int64_t i = 0; i < n; i++)
        if (f64)
            ((double *)t)[i] = exp(((double *)t)[i]);
        else
            ((float *)t)[i] = expf(((float *)t)[i]);
}

/* Folds nr rows of nc columns into acc[nc]; element (r, c) is at
 * off + r*ld + c*xcs; sh[nc] is the per-column shift of SUMEXP and SQDEV. */
ALWAYS_INLINE void acc_block(dl_acc_kind k, const void *x, bool f64, int64_t off, int64_t nr,
                             int64_t ld, int64_t nc, int64_t xcs, double *restrict acc,
                             const double *restrict sh, double p) {
/* STEP (of acc[c] and the element v) over the rows and columns, vectorised */
#define ACC_LOOP(STEP)                                                                             \
    for (int64_t r = 0, b = off; r < nr; r++, b += ld) DL_PRAGMA(omp simd)                         \
    for (int64_t c = 0; c < nc; c++) {                                                             \
        double v = ldx(x, b + c * xcs, f64);                                                       \
        STEP;                                                                                      \
    }
    switch (k) {
    case DL_ACC_SUM: ACC_LOOP(acc[c] += v) break;
    case DL_ACC_SUMSQ: ACC_LOOP(acc[c] += v * v) break;
    case DL_ACC_SUMABS: ACC_LOOP(acc[c] += fabs(v)) break;
    case DL_ACC_SUMPOW:
        for (int64_t r = 0, b = off; r < nr; r++, b += ld)
            for (int64_t c = 0; c < nc; c++) acc[c] += pow(fabs(ldx(x, b + c * xcs, f64)), p);
        break;
    case DL_ACC_COUNTNZ: ACC_LOOP(acc[c] += v != 0 ? 1.0 : 0.0) break;
    case DL_ACC_PROD: ACC_LOOP(acc[c] *= v) break;
    case DL_ACC_MAX: ACC_LOOP(acc[c] = nan_max(acc[c], v)) break;
    case DL_ACC_MIN: ACC_LOOP(acc[c] = nan_min(acc[c], v)) break;
    case DL_ACC_MAXABS: ACC_LOOP(acc[c] = nan_max(acc[c], fabs(v))) break;
    case DL_ACC_MINABS: ACC_LOOP(acc[c] = nan_min(acc[c], fabs(v))) break;
    case DL_ACC_SUMEXP:
        if (!f64 && xcs == 1 && nc <= COL_BLOCK) { /* a row of columns through the vector exp */
            float t[COL_BLOCK];
            for (int64_t r = 0, b = off; r < nr; r++, b += ld) {
                for (int64_t c = 0; c < nc; c++) t[c] = (float)(ldx(x, b + c, false) - sh[c]);
                vexp(t, nc, false);
                for (int64_t c = 0; c < nc; c++) acc[c] += t[c];
            }
            break;
        }
        for (int64_t r = 0, b = off; r < nr; r++, b += ld)
            for (int64_t c = 0; c < nc; c++) {
                double d = ldx(x, b + c * xcs, f64) - sh[c];
                acc[c] += f64 ? exp(d) : (double)expf((float)d); /* float32: exp in float */
            }
        break;
    case DL_ACC_SQDEV: ACC_LOOP(acc[c] += (v - sh[c]) * (v - sh[c])) break;
    }
#undef ACC_LOOP
}

/* rows of LANES contiguous elements */
REDUCE_CLONES static void acc_lanes_f32(dl_acc_kind k, const void *x, int64_t off, int64_t rows,
                                        double *a, const double *sh, double p) {
    acc_block(k, x, false, off, rows, LANES, LANES, 1, a, sh, p);
}
REDUCE_CLONES static void acc_lanes_f64(dl_acc_kind k, const void *x, int64_t off, int64_t rows,
                                        double *a, const double *sh, double p) {
    acc_block(k, x, true, off, rows, LANES, LANES, 1, a, sh, p);
}
/* rows of nc contiguous columns, ld apart */
REDUCE_CLONES static void acc_cols_f32(dl_acc_kind k, const void *x, int64_t off, int64_t nr,
                                       int64_t ld, int64_t nc, double *acc, const double *sh,
                                       double p) {
    acc_block(k, x, false, off, nr, ld, nc, 1, acc, sh, p);
}
REDUCE_CLONES static void acc_cols_f64(dl_acc_kind k, const void *x, int64_t off, int64_t nr,
                                       int64_t ld, int64_t nc, double *acc, const double *sh,
                                       double p) {
    acc_block(k, x, true, off, nr, ld, nc, 1, acc, sh, p);
}
/* nc short contiguous rows of nr elements side by side (xcs = nr) */
REDUCE_CLONES static void acc_group_f32(dl_acc_kind k, const void *x, int64_t off, int64_t nr,
                                        int64_t nc, double *acc, const double *sh, double p) {
    acc_block(k, x, false, off, nr, 1, nc, nr, acc, sh, p);
}
REDUCE_CLONES static void acc_group_f64(dl_acc_kind k, const void *x, int64_t off, int64_t nr,
                                        int64_t nc, double *acc, const double *sh, double p) {
    acc_block(k, x, true, off, nr, 1, nc, nr, acc, sh, p);
}

typedef struct {
    dl_acc_kind k;
    const void *x;
    bool f64, group;
    int64_t RO, O, R, I;
    double p;
    const double *shift; /* (O,I) or NULL */
    double *part;        /* (O,nch,I) */
    dl_dtype dt;         /* float16/bfloat16: see acc_item_half */
    bool ffold;          /* float32 and a kind of the float folds (ffold_item) */
} acc_ctx;

/* --- float32 folds ------------------------------------------------------------------ */

typedef float v16f __attribute__((vector_size(64)));
typedef int32_t v16i __attribute__((vector_size(64)));

/* The kinds folded in float32 lanes: the extremes throughout (exact), the
 * sums and the product over FBLK rows at a time, then in double. */
static bool ffold_kind(dl_acc_kind k) {
    switch (k) {
    case DL_ACC_SUM:
    case DL_ACC_SUMSQ:
    case DL_ACC_SUMABS:
    case DL_ACC_PROD:
    case DL_ACC_MAX:
    case DL_ACC_MIN:
    case DL_ACC_MAXABS:
    case DL_ACC_MINABS: return true;
    default: return false;
    }
}

ALWAYS_INLINE bool fext(dl_acc_kind k) {
    return k == DL_ACC_MAX || k == DL_ACC_MIN || k == DL_ACC_MAXABS || k == DL_ACC_MINABS;
}

ALWAYS_INLINE bool fabs_kind(dl_acc_kind k) {
    return k == DL_ACC_SUMABS || k == DL_ACC_MAXABS || k == DL_ACC_MINABS;
}

/* (no vector passed by value: the default clone would change the ABI) */
ALWAYS_INLINE void ld16(v16f *v, const float *p) {
    memcpy(v, p, sizeof *v);
}

/* The extremes' step: *a = *a folded with the 16 elements *v (NaN lanes
 * noted in *nn).  Element by element, which every clone vectorises (a
 * vector select written with masks was scalarised on AVX2). */
ALWAYS_INLINE void fstep(dl_acc_kind k, v16f *a, v16i *nn, const v16f *v) {
    float *pa = (float *)a;
    int32_t *pn = (int32_t *)nn;
    const float *pv = (const float *)v;
    const bool mx = k == DL_ACC_MAX || k == DL_ACC_MAXABS;
#pragma omp simd
    for (int j = 0; j < 16; j++) {
        float t = fabs_kind(k) ? fabsf(pv[j]) : pv[j];
        pn[j] |= t != t;
        pa[j] = mx ? (t > pa[j] ? t : pa[j]) : (t < pa[j] ? t : pa[j]);
    }
}

/* The sums' and product's step on 8 lanes: *a folded with *v */
ALWAYS_INLINE void fstep8(dl_acc_kind k, v8f *a, const v8f *v) {
    v8f t = *v;
    if (fabs_kind(k)) t = (v8f)((v8i)t & 0x7fffffff);
    switch (k) {
    case DL_ACC_SUM:
    case DL_ACC_SUMABS: *a += t; break;
    case DL_ACC_SUMSQ: *a += t * t; break;
    case DL_ACC_PROD: *a *= t; break;
    default: break;
    }
}

/* the 8 doubles at d folded with the 8 floats of *f in double: added, or
 * multiplied for the product */
ALWAYS_INLINE void fflush8(dl_acc_kind k, double *d, const v8f *f) {
    dl_cpu_flush8(d, f, k == DL_ACC_PROD);
}

/* 8 floats from p */
ALWAYS_INLINE void ld8(v8f *v, const float *p) {
    memcpy(v, p, sizeof *v);
}

/* the eight accumulators a[0..8) folded with the 64 floats at p; unrolled,
 * so a stays in registers */
ALWAYS_INLINE void fstep64(dl_acc_kind k, v8f *a, const float *p) {
#pragma GCC unroll 8
    for (int q = 0; q < 8; q++) {
        v8f v;
        ld8(&v, p + 8 * q);
        fstep8(k, &a[q], &v);
    }
}

/* One element's term, in double (the tails) */
ALWAYS_INLINE double fterm(dl_acc_kind k, float v) {
    double d = fabs_kind(k) ? fabs((double)v) : (double)v;
    return k == DL_ACC_SUMSQ ? d * d : d;
}

/* Folds the n floats at x into the FLANES double lanes acc: x[i] goes to
 * lane i % FLANES for the whole rows of FLANES (independent vector chains:
 * eight of 8 floats for the sums and the product, four of 16 for the
 * extremes), the tail to lanes 0... */
ALWAYS_INLINE void frow(dl_acc_kind k, const float *restrict x, int64_t n, double *restrict acc) {
    const float id = (float)acc_identity(k);
    int64_t i = 0, rows = n / FLANES;
    if (!fext(k)) {
        /* eight 8-float accumulators (lane j of a[q] takes element 8q + j
         * of each FLANES): 256-bit vectors stay in AVX2's registers,
         * where 512-bit generic vectors went through the stack on every
         * add; the double lanes are touched only at the flushes */
        for (int64_t r0 = 0; r0 < rows; r0 += FBLK) {
            int64_t nr = rows - r0 < FBLK ? rows - r0 : FBLK;
            v8f a[8];
            for (int q = 0; q < 8; q++) a[q] = (v8f){0} + id;
            for (int64_t r = 0; r < nr; r++, i += FLANES) {
                for (int q = 0; q < 4; q++) PREFETCH_AHEAD(x + i + 16 * q);
                fstep64(k, a, x + i);
            }
            for (int q = 0; q < 8; q++) fflush8(k, acc + 8 * q, &a[q]);
        }
    } else {
        v16f a[4];
        v16i nn[4];
        for (int q = 0; q < 4; q++) {
            a[q] = (v16f){0} + id;
            nn[q] = (v16i){0};
        }
        for (; i < rows * FLANES; i += FLANES)
            for (int q = 0; q < 4; q++) {
                v16f v;
                PREFETCH_AHEAD(x + i + 16 * q);
                ld16(&v, x + i + 16 * q);
                fstep(k, &a[q], &nn[q], &v);
            }
        float e[FLANES];
        int32_t m[FLANES];
        memcpy(e, a, sizeof e);
        memcpy(m, nn, sizeof m);
        for (int j = 0; j < FLANES; j++) acc[j] = acc_combine(k, acc[j], m[j] ? NAN : e[j]);
    }
    for (int j = 0; i < n; i++, j++) acc[j] = acc_combine(k, acc[j], fterm(k, x[i]));
}

/* Folds rows [r0, r0+n) (ld apart) of the 16*nv columns at x into registers,
 * then into the columns' state: acc (double) for the sums and the product,
 * fe/fn (float extreme, NaN seen) for the extremes. */
ALWAYS_INLINE void fcols_tile(dl_acc_kind k, const float *restrict x, int64_t n, int64_t ld, int nv,
                              double *restrict acc, float *restrict fe, int32_t *restrict fn) {
    const float id = (float)acc_identity(k);
    if (!fext(k)) {
        /* the sums and the product in 8-float vectors, which the AVX2 clone
         * keeps in registers (see frow; named here: frow's array form was
         * 15% slower on sum(1)); the extremes below stay in 16-float lanes,
         * which the AVX-512 clone runs as vmaxps/vminps */
        v8f a0 = (v8f){0} + id, a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0, v;
        for (int64_t r = 0; r < n; r++) {
            const float *p = x + r * ld;
            ld8(&v, p);
            fstep8(k, &a0, &v);
            ld8(&v, p + 8);
            fstep8(k, &a1, &v);
            if (nv == 4) {
                ld8(&v, p + 16);
                fstep8(k, &a2, &v);
                ld8(&v, p + 24);
                fstep8(k, &a3, &v);
                ld8(&v, p + 32);
                fstep8(k, &a4, &v);
                ld8(&v, p + 40);
                fstep8(k, &a5, &v);
                ld8(&v, p + 48);
                fstep8(k, &a6, &v);
                ld8(&v, p + 56);
                fstep8(k, &a7, &v);
            }
        }
        fflush8(k, acc, &a0);
        fflush8(k, acc + 8, &a1);
        if (nv == 4) {
            fflush8(k, acc + 16, &a2);
            fflush8(k, acc + 24, &a3);
            fflush8(k, acc + 32, &a4);
            fflush8(k, acc + 40, &a5);
            fflush8(k, acc + 48, &a6);
            fflush8(k, acc + 56, &a7);
        }
        return;
    }
    v16f a[4];
    v16i nn[4];
    for (int q = 0; q < nv; q++) {
        a[q] = (v16f){0} + id;
        nn[q] = (v16i){0};
    }
    for (int64_t r = 0; r < n; r++)
        for (int q = 0; q < nv; q++) {
            v16f v;
            ld16(&v, x + r * ld + 16 * q);
            fstep(k, &a[q], &nn[q], &v);
        }
    for (int q = 0; q < nv; q++) { /* the block's extreme against the state so far */
        v16f e;
        v16i m;
        memcpy(&e, fe + 16 * q, sizeof e);
        memcpy(&m, fn + 16 * q, sizeof m);
        m |= nn[q];
        fstep(k, &e, &m, &a[q]);
        memcpy(fe + 16 * q, &e, sizeof e);
        memcpy(fn + 16 * q, &m, sizeof m);
    }
}

/* Folds nr rows (ld apart) of nc contiguous floats into acc[nc]: FBLK rows at
 * a time, in tiles of 64 (then 16) columns held in registers, so the block's
 * rows are read side by side in order; the last nc % 16 columns fold in
 * double.  fe, fn: scratch of nc for the extremes. */
ALWAYS_INLINE void fcols(dl_acc_kind k, const float *restrict x, int64_t nr, int64_t ld, int64_t nc,
                         double *restrict acc, float *restrict fe, int32_t *restrict fn) {
    const bool ext = fext(k);
    int64_t n64 = nc / 64 * 64, n16 = nc / 16 * 16;
    if (ext)
        for (int64_t c = 0; c < n16; c++) {
            fe[c] = (float)acc_identity(k);
            fn[c] = 0;
        }
    for (int64_t r0 = 0; r0 < nr; r0 += FBLK) {
        int64_t n = nr - r0 < FBLK ? nr - r0 : FBLK;
        const float *xr = x + r0 * ld;
        for (int64_t c = 0; c < n64; c += 64)
            fcols_tile(k, xr + c, n, ld, 4, acc + c, fe + c, fn + c);
        for (int64_t c = n64; c < n16; c += 16)
            fcols_tile(k, xr + c, n, ld, 1, acc + c, fe + c, fn + c);
        for (int64_t r = 0; r < n; r++)
            for (int64_t c = n16; c < nc; c++)
                acc[c] = acc_combine(k, acc[c], fterm(k, xr[r * ld + c]));
    }
    if (ext)
        for (int64_t c = 0; c < n16; c++) acc[c] = acc_combine(k, acc[c], fn[c] ? NAN : fe[c]);
}

/* one clone per kind, so each kind's loops are compiled with their constant:
 * the sums and the product, the extremes, or all of them */
#define KIND_SWITCH(k, CALL, K1, K2, K3, K4)                                                       \
    switch (k) {                                                                                   \
    case K1: CALL(K1); break;                                                                      \
    case K2: CALL(K2); break;                                                                      \
    case K3: CALL(K3); break;                                                                      \
    case K4: CALL(K4); break;                                                                      \
    default: break;                                                                                \
    }
#define FSUM_SWITCH(k, CALL)                                                                       \
    KIND_SWITCH(k, CALL, DL_ACC_SUM, DL_ACC_SUMSQ, DL_ACC_SUMABS, DL_ACC_PROD)
#define FEXT_SWITCH(k, CALL)                                                                       \
    KIND_SWITCH(k, CALL, DL_ACC_MAX, DL_ACC_MIN, DL_ACC_MAXABS, DL_ACC_MINABS)
#define FFOLD_SWITCH(k, CALL)                                                                      \
    if (fext(k)) {                                                                                 \
        FEXT_SWITCH(k, CALL)                                                                       \
    } else {                                                                                       \
        FSUM_SWITCH(k, CALL)                                                                       \
    }

/* the FLANES lanes of a row fold combined pairwise, in a fixed order */
ALWAYS_INLINE double lanes_combine(dl_acc_kind k, double *a) {
    for (int w = FLANES / 2; w > 0; w /= 2)
        for (int j = 0; j < w; j++) a[j] = acc_combine(k, a[j], a[j + w]);
    return a[0];
}

/* lanes_combine for a kind known at run time only: the switch taken once,
 * not per pair (the same operations in the same order) */
static double lanes_combine_any(dl_acc_kind k, double *a) {
    double r = 0;
#define LCOMB(K) r = lanes_combine(K, a)
    FFOLD_SWITCH(k, LCOMB);
#undef LCOMB
    return r;
}

/* a float32 row folded into the FLANES lanes acc: the sums and the product
 * in 256-bit vectors (see REDUCE_ROW_CLONES), the extremes in the widest */
REDUCE_ROW_CLONES static void frow_sum_f32(dl_acc_kind k, const float *x, int64_t n, double *acc) {
#define FROW(K) frow(K, x, n, acc)
    FSUM_SWITCH(k, FROW);
}
REDUCE_CLONES static void frow_ext_f32(dl_acc_kind k, const float *x, int64_t n, double *acc) {
    FEXT_SWITCH(k, FROW);
#undef FROW
}
static void frow_f32(dl_acc_kind k, const float *x, int64_t n, double *acc) {
    if (fext(k))
        frow_ext_f32(k, x, n, acc);
    else
        frow_sum_f32(k, x, n, acc);
}

/* The fold of RO rows of n floats (step apart) from x, lanes combined, in
 * one clone (rows may be short: no call or lane round trip per row) */
ALWAYS_INLINE double frows(dl_acc_kind k, const float *x, int64_t n, int64_t RO, int64_t step) {
    double a[FLANES];
    for (int j = 0; j < FLANES; j++) a[j] = acc_identity(k);
    for (int64_t ro = 0; ro < RO; ro++, x += step) frow(k, x, n, a);
    return lanes_combine(k, a);
}
#define FROWS(K) r = frows(K, x, n, RO, step)
REDUCE_ROW_CLONES static double frows_sum_f32(dl_acc_kind k, const float *x, int64_t n, int64_t RO,
                                              int64_t step) {
    double r = 0;
    FSUM_SWITCH(k, FROWS);
    return r;
}
REDUCE_CLONES static double frows_ext_f32(dl_acc_kind k, const float *x, int64_t n, int64_t RO,
                                          int64_t step) {
    double r = 0;
    FEXT_SWITCH(k, FROWS);
    return r;
}
#undef FROWS

REDUCE_CLONES static void fcols_f32(dl_acc_kind k, const float *x, int64_t nr, int64_t ld,
                                    int64_t nc, double *acc) {
    float fe[WIDE_COLS];
    int32_t fn[WIDE_COLS];
#define FCOLS(K) fcols(K, x, nr, ld, nc, acc, fe, fn)
    FFOLD_SWITCH(k, FCOLS);
#undef FCOLS
}

/* acc_item for the float32 folds (not short rows side by side): rows (I == 1)
 * in FLANES lanes, else up to WIDE_COLS columns */
static void ffold_item(const acc_ctx *c, int64_t o, int64_t c0, int64_t nc, int64_t r0, int64_t nr,
                       int64_t slot) {
    const float *x = c->x;
    int64_t off = (o * c->R + r0) * c->I + c0, step = c->O * c->R * c->I;
    if (c->I == 1) {
        c->part[slot] = fext(c->k) ? frows_ext_f32(c->k, x + off, nr, c->RO, step)
                                   : frows_sum_f32(c->k, x + off, nr, c->RO, step);
        return;
    }
    double id = acc_identity(c->k), acc[WIDE_COLS];
    for (int64_t j = 0; j < nc; j++) acc[j] = id;
    for (int64_t ro = 0; ro < c->RO; ro++, off += step) fcols_f32(c->k, x + off, nr, c->I, nc, acc);
    memcpy(c->part + slot * c->I + c0, acc, (size_t)nc * sizeof(double));
}

/* --- float16/bfloat16: the float32 folds on blocks converted on the way ------------- */

#define HBUF (COL_BLOCK * SHORT_ROW) /* floats of converted input per step (32 KiB) */

ALWAYS_INLINE bool is_half(dl_dtype dt) {
    return dt == DL_DTYPE_F16 || dt == DL_DTYPE_BF16;
}

/* n contiguous half values at x as floats into t */
REDUCE_CLONES static void half_block(dl_dtype dt, const uint16_t *x, int64_t n, float *t) {
    dl_cpu_widen(t, x, n, dt == DL_DTYPE_BF16);
}

/* nr rows of nc contiguous half values (ld apart) as nr*nc floats into t */
static void half_rows(dl_dtype dt, const uint16_t *x, int64_t ld, int64_t nr, int64_t nc,
                      float *t) {
    for (int64_t r = 0; r < nr; r++) half_block(dt, x + r * ld, nc, t + r * nc);
}

static int64_t min64(int64_t a, int64_t b) {
    return a < b ? a : b;
}

/* acc_item for float16/bfloat16 input, without a float32 copy: the float32
 * item's folds in its order on blocks converted on the way (exact), so every
 * kind gives the float32 copy's result bit for bit.  The block edges keep
 * the folds' own: rows go HBUF elements at a time (whole FBLK blocks of
 * lanes), columns whole FBLK blocks of rows (the float folds; 256-column
 * slices, whole register tiles) or any rows (the others), short rows side by
 * side all at once; extremes of split blocks combine as one fold would. */
static void acc_item_half(void *vc, int64_t o, int64_t c0, int64_t nc, int64_t r0, int64_t nr,
                          int64_t slot) {
    const acc_ctx *c = vc;
    const uint16_t *x = c->x;
    const dl_acc_kind k = c->k;
    const double id = acc_identity(k);
    float t[HBUF];
    int64_t off = (o * c->R + r0) * c->I + c0, step = c->O * c->R * c->I;
    if (c->I == 1 && !c->group) {
        double a[FLANES], sh[LANES];
        for (int j = 0; j < FLANES; j++) a[j] = id;
        for (int j = 0; j < LANES; j++) sh[j] = c->shift ? c->shift[o] : 0;
        for (int64_t ro = 0; ro < c->RO; ro++, off += step)
            for (int64_t i = 0; i < nr; i += HBUF) {
                int64_t n = min64(nr - i, HBUF), rows = n / LANES;
                half_block(c->dt, x + off + i, n, t);
                if (c->ffold) {
                    frow_f32(k, t, n, a);
                } else {
                    acc_lanes_f32(k, t, 0, rows, a, sh, c->p);
                    acc_cols_f32(k, t, rows * LANES, 1, 0, n - rows * LANES, a, sh, c->p);
                }
            }
        double r = a[0];
        for (int j = 1; j < LANES && !c->ffold; j++) r = acc_combine(k, r, a[j]);
        c->part[slot] = c->ffold ? lanes_combine_any(k, a) : r;
        return;
    }
    double acc[WIDE_COLS];
    for (int64_t j = 0; j < nc; j++) acc[j] = id;
    const double *sh = c->shift ? c->shift + o * c->I + c0 : NULL;
    for (int64_t ro = 0; ro < c->RO; ro++, off += step) {
        if (c->group) { /* nc rows of nr (nc*nr <= HBUF) */
            half_block(c->dt, x + off, nc * nr, t);
            acc_group_f32(k, t, 0, nr, nc, acc, sh, c->p);
            continue;
        }
        for (int64_t b = 0; b < nc; b += COL_BLOCK) {
            int64_t w = min64(nc - b, COL_BLOCK), per = HBUF / w;
            if (c->ffold) per = per / FBLK * FBLK;
            for (int64_t r = 0; r < nr; r += per) {
                int64_t n = min64(nr - r, per);
                half_rows(c->dt, x + off + r * c->I + b, c->I, n, w, t);
                if (c->ffold)
                    fcols_f32(k, t, n, w, w, acc + b);
                else
                    acc_cols_f32(k, t, 0, n, w, w, acc + b, sh ? sh + b : NULL, c->p);
            }
        }
    }
    memcpy(c->part + slot * c->I + c0, acc, (size_t)nc * sizeof(double));
}

static void acc_item(void *vc, int64_t o, int64_t c0, int64_t nc, int64_t r0, int64_t nr,
                     int64_t slot) {
    const acc_ctx *c = vc;
    if (c->ffold && !c->group) {
        ffold_item(c, o, c0, nc, r0, nr, slot);
        return;
    }
    int64_t off = (o * c->R + r0) * c->I + c0, step = c->O * c->R * c->I;
    double id = acc_identity(c->k);
    if (c->I == 1 && !c->group) {
        double a[LANES], sh[LANES];
        for (int j = 0; j < LANES; j++) {
            a[j] = id;
            sh[j] = c->shift ? c->shift[o] : 0;
        }
        int64_t rows = nr / LANES, tail = nr - rows * LANES;
        for (int64_t ro = 0; ro < c->RO; ro++, off += step) {
            if (c->f64) {
                acc_lanes_f64(c->k, c->x, off, rows, a, sh, c->p);
                acc_cols_f64(c->k, c->x, off + rows * LANES, 1, 0, tail, a, sh, c->p);
            } else {
                acc_lanes_f32(c->k, c->x, off, rows, a, sh, c->p);
                acc_cols_f32(c->k, c->x, off + rows * LANES, 1, 0, tail, a, sh, c->p);
            }
        }
        double r = a[0];
        for (int j = 1; j < LANES; j++) r = acc_combine(c->k, r, a[j]);
        c->part[slot] = r;
        return;
    }
    double acc[COL_BLOCK];
    for (int64_t j = 0; j < nc; j++) acc[j] = id;
    /* the shifts of these columns (group: of these outputs) */
    const double *sh = c->shift ? c->shift + o * c->I + c0 : NULL;
    for (int64_t ro = 0; ro < c->RO; ro++, off += step) {
        if (c->group && c->f64)
            acc_group_f64(c->k, c->x, off, nr, nc, acc, sh, c->p);
        else if (c->group)
            acc_group_f32(c->k, c->x, off, nr, nc, acc, sh, c->p);
        else if (c->f64)
            acc_cols_f64(c->k, c->x, off, nr, c->I, nc, acc, sh, c->p);
        else
            acc_cols_f32(c->k, c->x, off, nr, c->I, nc, acc, sh, c->p);
    }
    memcpy(c->part + slot * c->I + c0, acc, (size_t)nc * sizeof(double));
}

int dl_cpu_reduce_acc(dl_acc_kind kind, const void *x, dl_dtype dt, const dl_rshape *sh, double p,
                      const double *shift, double *out) {
    int64_t O = sh->O, I = sh->I, n = O * I;
    if (n == 0) return 0;
    if (sh->R * sh->RO == 0) {
        double id = acc_identity(kind);
        for (int64_t i = 0; i < n; i++) out[i] = id;
        return 0;
    }
    bool ffold = (dt == DL_DTYPE_F32 || is_half(dt)) && ffold_kind(kind);
    split s;
    split_init(&s, sh, true, true, ffold ? WIDE_COLS : COL_BLOCK);
    /* the chunks' partials: from the host block cache (no fresh pages per call) */
    size_t part_bytes = sizeof(double) * (size_t)(n * s.nch);
    double *part = out, few[FEW_ITEMS];
    if (s.nch > 1 && n * s.nch <= FEW_ITEMS)
        part = few;
    else if (s.nch > 1 && !(part = dl_cpu_alloc(part_bytes)))
        return no_memory("reduce");
    acc_ctx c = {kind, x,    dt == DL_DTYPE_F64, s.group, sh->RO, O, sh->R, I, p, shift, part,
                 dt,   ffold};
    split_run(&s, is_half(dt) ? acc_item_half : acc_item, &c);
    if (part != out) {
        for (int64_t o = 0; o < O; o++)
            for (int64_t i = 0; i < I; i++) {
                double a = part[o * s.nch * I + i];
                for (int64_t ch = 1; ch < s.nch; ch++)
                    a = acc_combine(kind, a, part[(o * s.nch + ch) * I + i]);
                out[o * I + i] = a;
            }
        if (part != few) dl_cpu_free(part, part_bytes);
    }
    return 0;
}

/* --- integer reductions: int64 sums and products, all/any of bool bytes ----------------
 * One body for both: pre##_run(flag, x, shape, out) folds with
 * STEP(flag, a, v) from ID(flag) (rows in LANES lanes, columns and short
 * rows side by side as the float kernels), chunk partials combined in
 * order. */

/* name(flag, x, off, nr, ld, nc, xcs, acc): folds nr rows of nc columns of x
 * into acc[nc] (element (r, c) at off + r*ld + c*xcs) */
#define BLOCK_FOLD(name, TX, TA, STEP)                                                             \
    ALWAYS_INLINE void name(bool flag, const TX *x, int64_t off, int64_t nr, int64_t ld,           \
                            int64_t nc, int64_t xcs, TA *restrict acc) {                           \
        for (int64_t r = 0, b = off; r < nr; r++, b += ld)                                         \
            if (flag) {                                                                            \
                DL_PRAGMA(omp simd)                                                                \
                for (int64_t c = 0; c < nc; c++) acc[c] = STEP(true, acc[c], x[b + c * xcs]);      \
            } else {                                                                               \
                DL_PRAGMA(omp simd)                                                                \
                for (int64_t c = 0; c < nc; c++) acc[c] = STEP(false, acc[c], x[b + c * xcs]);     \
            }                                                                                      \
    }

#define INT_REDUCE(pre, TX, TA, STEP, ID, WHAT)                                                    \
    BLOCK_FOLD(pre##_block, TX, TA, STEP)                                                          \
    typedef struct {                                                                               \
        bool flag, group;                                                                          \
        const TX *x;                                                                               \
        int64_t RO, O, R, I;                                                                       \
        TA *part;                                                                                  \
    } pre##_ctx;                                                                                   \
    static void pre##_item(void *vc, int64_t o, int64_t c0, int64_t nc, int64_t r0, int64_t nr,    \
                           int64_t slot) {                                                         \
        const pre##_ctx *c = vc;                                                                   \
        int64_t off = (o * c->R + r0) * c->I + c0, step = c->O * c->R * c->I;                      \
        int64_t rows = nr / LANES, I = c->I;                                                       \
        bool lanes = I == 1 && !c->group;                                                          \
        TA acc[COL_BLOCK > LANES ? COL_BLOCK : LANES];                                             \
        for (int64_t j = 0; j < (lanes ? LANES : nc); j++) acc[j] = ID(c->flag);                   \
        for (int64_t ro = 0; ro < c->RO; ro++, off += step) {                                      \
            if (lanes) {                                                                           \
                pre##_block(c->flag, c->x, off, rows, LANES, LANES, 1, acc);                       \
                pre##_block(c->flag, c->x, off + rows * LANES, 1, 0, nr - rows * LANES, 1, acc);   \
            } else if (c->group) {                                                                 \
                pre##_block(c->flag, c->x, off, nr, 1, nc, nr, acc);                               \
            } else {                                                                               \
                pre##_block(c->flag, c->x, off, nr, I, nc, 1, acc);                                \
            }                                                                                      \
        }                                                                                          \
        if (lanes)                                                                                 \
            for (int j = 1; j < LANES; j++) acc[0] = STEP(c->flag, acc[0], acc[j]);                \
        memcpy(c->part + slot * I + c0, acc, (size_t)(lanes ? 1 : nc) * sizeof(TA));               \
    }                                                                                              \
    static int pre##_run(bool flag, const TX *x, const dl_rshape *sh, TA *out) {                   \
        int64_t O = sh->O, I = sh->I, n = O * I;                                                   \
        if (n == 0) return 0;                                                                      \
        if (sh->R * sh->RO == 0) {                                                                 \
            for (int64_t i = 0; i < n; i++) out[i] = ID(flag);                                     \
            return 0;                                                                              \
        }                                                                                          \
        split s;                                                                                   \
        split_init(&s, sh, true, true, COL_BLOCK);                                                 \
        TA *part = out;                                                                            \
        if (s.nch > 1 && !(part = malloc(sizeof(TA) * (size_t)(n * s.nch))))                       \
            return no_memory(WHAT);                                                                \
        pre##_ctx c = {flag, s.group, x, sh->RO, O, sh->R, I, part};                               \
        split_run(&s, pre##_item, &c);                                                             \
        if (part == out) return 0;                                                                 \
        for (int64_t o = 0; o < O; o++)                                                            \
            for (int64_t i = 0; i < I; i++) {                                                      \
                TA a = part[o * s.nch * I + i];                                                    \
                for (int64_t ch = 1; ch < s.nch; ch++)                                             \
                    a = STEP(flag, a, part[(o * s.nch + ch) * I + i]);                             \
                out[o * I + i] = a;                                                                \
            }                                                                                      \
        free(part);                                                                                \
        return 0;                                                                                  \
    }

/* int64 sums (flag false) and products in unsigned arithmetic: overflow
 * wraps around instead of being undefined */
#define I64_STEP(prod, a, v) ((prod) ? (a) * (uint64_t)(v) : (a) + (uint64_t)(v))
#define I64_ID(prod) (uint64_t)((prod) ? 1 : 0)
INT_REDUCE(i64, int64_t, uint64_t, I64_STEP, I64_ID, "reduce")

int dl_cpu_reduce_acc_i64(bool prod, const int64_t *x, const dl_rshape *sh, int64_t *out) {
    return i64_run(prod, x, sh, (uint64_t *)out);
}

/* all (flag true) or any of bool bytes */
#define AA_STEP(all, a, v) (uint8_t)((all) ? (a) & ((v) != 0) : (a) | ((v) != 0))
#define AA_ID(all) (uint8_t)(all)
INT_REDUCE(aa, uint8_t, uint8_t, AA_STEP, AA_ID, "all/any")

int dl_cpu_reduce_allany(bool is_all, const uint8_t *x, const dl_rshape *sh, uint8_t *out) {
    return aa_run(is_all, x, sh, out);
}

/* --- max / min with indices --------------------------------------------------------- */

/* Should (v, i) replace the best so far (bv, bi)?  NaN beats numbers; among
 * equals (and among NaNs) the smaller index wins. */
static bool mm_better(bool mx, double v, int64_t i, double bv, int64_t bi) {
    if (bv != bv) return v != v && i < bi;
    if (v != v) return true;
    if (v == bv) return i < bi;
    return mx ? v > bv : v < bv;
}

static bool mm_better_i64(bool mx, int64_t v, int64_t i, int64_t bv, int64_t bi) {
    if (v == bv) return i < bi;
    return mx ? v > bv : v < bv;
}

/* name(mx, x, f64, off, nr, ld, nc, xcs, bv, bi, i0, rs, cs): folds nr rows
 * of nc columns into (bv, bi); element (r, c) is at off + r*ld + c*xcs
 * (LOAD(x, i, f64) reads it as T) and has index i0 + r*rs + c*cs.  Rows come
 * in increasing index order, so a strict comparison keeps the first
 * occurrence; a NaN (never in int64) beats a number. */
#define MM_BLOCK(name, T, LOAD)                                                                    \
    ALWAYS_INLINE void name(bool mx, const void *x, bool f64, int64_t off, int64_t nr, int64_t ld, \
                            int64_t nc, int64_t xcs, T *restrict bv, int64_t *restrict bi,         \
                            int64_t i0, int64_t rs, int64_t cs) {                                  \
        for (int64_t r = 0, b = off; r < nr; r++, b += ld) {                                       \
            int64_t ir = i0 + r * rs;                                                              \
            DL_PRAGMA(omp simd)                                                                    \
            for (int64_t c = 0; c < nc; c++) {                                                     \
                T v = LOAD(x, b + c * xcs, f64), cur = bv[c];                                      \
                bool take = (mx ? v > cur : v < cur) || (v != v && cur == cur);                    \
                bv[c] = take ? v : cur;                                                            \
                bi[c] = take ? ir + c * cs : bi[c];                                                \
            }                                                                                      \
        }                                                                                          \
    }
#define LDI64(x, i, f64) ((void)(f64), ((const int64_t *)(x))[i])
MM_BLOCK(mm_block, double, ldx)
MM_BLOCK(mm_block_int, int64_t, LDI64)

/* general strides */
REDUCE_CLONES static void mm_any_f32(bool mx, const void *x, int64_t off, int64_t nr, int64_t ld,
                                     int64_t nc, int64_t xcs, double *bv, int64_t *bi, int64_t i0,
                                     int64_t rs, int64_t cs) {
    mm_block(mx, x, false, off, nr, ld, nc, xcs, bv, bi, i0, rs, cs);
}
REDUCE_CLONES static void mm_any_f64(bool mx, const void *x, int64_t off, int64_t nr, int64_t ld,
                                     int64_t nc, int64_t xcs, double *bv, int64_t *bi, int64_t i0,
                                     int64_t rs, int64_t cs) {
    mm_block(mx, x, true, off, nr, ld, nc, xcs, bv, bi, i0, rs, cs);
}
REDUCE_CLONES static void mm_any_i64(bool mx, const int64_t *x, int64_t off, int64_t nr, int64_t ld,
                                     int64_t nc, int64_t xcs, int64_t *bv, int64_t *bi, int64_t i0,
                                     int64_t rs, int64_t cs) {
    mm_block_int(mx, x, false, off, nr, ld, nc, xcs, bv, bi, i0, rs, cs);
}
/* rows of LANES contiguous elements, element (r, c) at index i0 + r*LANES + c */
static void mm_lanes_f32(bool mx, const void *x, int64_t off, int64_t rows, double *bv, int64_t *bi,
                         int64_t i0) {
    mm_block(mx, x, false, off, rows, LANES, LANES, 1, bv, bi, i0, LANES, 1);
}
static void mm_lanes_f64(bool mx, const void *x, int64_t off, int64_t rows, double *bv, int64_t *bi,
                         int64_t i0) {
    mm_block(mx, x, true, off, rows, LANES, LANES, 1, bv, bi, i0, LANES, 1);
}
static void mm_lanes_i64(bool mx, const int64_t *x, int64_t off, int64_t rows, int64_t *bv,
                         int64_t *bi, int64_t i0) {
    mm_block_int(mx, x, false, off, rows, LANES, LANES, 1, bv, bi, i0, LANES, 1);
}

typedef struct {
    bool mx, group;
    const void *x;
    dl_dtype dt;
    int64_t RO, O, R, I;
    void *pv;    /* (O,nch,I) values: double, or int64 for int64 input */
    int64_t *pi; /* (O,nch,I) indices */
} mm_ctx;

/* Starting point of a fold: the identity with the index of the first element
 * (an element equal to the identity is then reported at the right index). */
static void mm_init(const mm_ctx *c, int64_t n, double *dv, int64_t *iv, int64_t *bi, int64_t i0,
                    int64_t cs) {
    for (int64_t j = 0; j < n; j++) {
        dv[j] = c->mx ? -INFINITY : INFINITY;
        iv[j] = c->mx ? INT64_MIN : INT64_MAX;
        bi[j] = i0 + j * cs;
    }
}

static void mm_fold(const mm_ctx *c, int64_t off, int64_t nr, int64_t ld, int64_t nc, int64_t xcs,
                    double *dv, int64_t *iv, int64_t *bi, int64_t i0, int64_t rs, int64_t cs) {
    switch (c->dt) {
    case DL_DTYPE_F32: mm_any_f32(c->mx, c->x, off, nr, ld, nc, xcs, dv, bi, i0, rs, cs); break;
    case DL_DTYPE_F64: mm_any_f64(c->mx, c->x, off, nr, ld, nc, xcs, dv, bi, i0, rs, cs); break;
    default: mm_any_i64(c->mx, c->x, off, nr, ld, nc, xcs, iv, bi, i0, rs, cs); break;
    }
}

static void mm_fold_lanes(const mm_ctx *c, int64_t off, int64_t rows, double *dv, int64_t *iv,
                          int64_t *bi, int64_t i0) {
    switch (c->dt) {
    case DL_DTYPE_F32: mm_lanes_f32(c->mx, c->x, off, rows, dv, bi, i0); break;
    case DL_DTYPE_F64: mm_lanes_f64(c->mx, c->x, off, rows, dv, bi, i0); break;
    default: mm_lanes_i64(c->mx, c->x, off, rows, iv, bi, i0); break;
    }
}

/* The extreme (max when mx, else min) of the n doubles at x (float64 rows), NaNs left out,
 * in FLANES vector lanes; *nan: whether there was a NaN. */
ALWAYS_INLINE double mm_ext(bool mx, const double *x, int64_t n, bool *nan) {
    double e[FLANES];
    int nn[FLANES];
    for (int j = 0; j < FLANES; j++) {
        e[j] = mx ? -INFINITY : INFINITY;
        nn[j] = 0;
    }
    int64_t i = 0;
    for (; i + FLANES <= n; i += FLANES)
#pragma omp simd
        for (int j = 0; j < FLANES; j++) {
            double v = x[i + j];
            e[j] = mx ? (v > e[j] ? v : e[j]) : (v < e[j] ? v : e[j]);
            nn[j] |= v != v;
        }
    for (int j = 0; i < n; i++, j++) {
        double v = x[i];
        e[j] = mx ? (v > e[j] ? v : e[j]) : (v < e[j] ? v : e[j]);
        nn[j] |= v != v;
    }
    double r = e[0];
    int any = nn[0];
    for (int j = 1; j < FLANES; j++) {
        r = mx ? (e[j] > r ? e[j] : r) : (e[j] < r ? e[j] : r);
        any |= nn[j];
    }
    *nan = any;
    return r;
}

/* mm_ext for float32: in float vector lanes (comparisons are exact) */
ALWAYS_INLINE double mm_ext_float(dl_acc_kind k, const float *x, int64_t n, bool *nan) {
    const float id = (float)acc_identity(k);
    v16f a[4];
    v16i nn[4];
    for (int q = 0; q < 4; q++) {
        a[q] = (v16f){0} + id;
        nn[q] = (v16i){0};
    }
    int64_t i = 0;
    for (; i + FLANES <= n; i += FLANES)
        for (int q = 0; q < 4; q++) {
            v16f v;
            ld16(&v, x + i + 16 * q);
            fstep(k, &a[q], &nn[q], &v);
        }
    float e[FLANES];
    int32_t m[FLANES];
    memcpy(e, a, sizeof e);
    memcpy(m, nn, sizeof m);
    bool mx = k == DL_ACC_MAX, any = false;
    double r = id;
    for (int j = 0; j < FLANES; j++) {
        r = mx ? (e[j] > r ? e[j] : r) : (e[j] < r ? e[j] : r);
        any |= m[j] != 0;
    }
    for (; i < n; i++) {
        double v = x[i];
        r = mx ? (v > r ? v : r) : (v < r ? v : r);
        any |= v != v;
    }
    *nan = any;
    return r;
}

REDUCE_CLONES static double mm_ext_f32(bool mx, const float *x, int64_t n, bool *nan) {
    return mx ? mm_ext_float(DL_ACC_MAX, x, n, nan) : mm_ext_float(DL_ACC_MIN, x, n, nan);
}
REDUCE_CLONES static double mm_ext_f64(bool mx, const double *x, int64_t n, bool *nan) {
    return mx ? mm_ext(true, x, n, nan) : mm_ext(false, x, n, nan);
}

/* Folds the n floats at x (indices i0..) into the best (*bv, *bi) so far,
 * MM_CHUNK at a time: a chunk is searched for its first extreme only when
 * it beats *bv (strictly: the first occurrence stays), for its first NaN
 * when it has one. */
static void mm_row(bool mx, const void *x, bool f64, int64_t n, int64_t i0, double *bv,
                   int64_t *bi) {
    for (int64_t c0 = 0; c0 < n && *bv == *bv; c0 += MM_CHUNK) {
        int64_t m = n - c0 < MM_CHUNK ? n - c0 : MM_CHUNK;
        const void *p = f64 ? (const void *)((const double *)x + c0) : (const float *)x + c0;
        bool nan;
        double e = f64 ? mm_ext_f64(mx, p, m, &nan) : mm_ext_f32(mx, p, m, &nan);
        if (!nan && !(mx ? e > *bv : e < *bv)) continue;
        int64_t j = 0;
        while (nan ? ldx(p, j, f64) == ldx(p, j, f64) : ldx(p, j, f64) != e) j++;
        *bv = ldx(p, j, f64);
        *bi = i0 + c0 + j;
    }
}

/* mm_item for float16/bfloat16 input: the float32 item's scans on blocks
 * converted on the way (rows MM_CHUNK at a time, as mm_row goes; columns
 * any rows at a time; short rows side by side all at once). */
static void mm_item_half(void *vc, int64_t o, int64_t c0, int64_t nc, int64_t r0, int64_t nr,
                         int64_t slot) {
    const mm_ctx *c = vc;
    const uint16_t *x = c->x;
    float t[HBUF];
    int64_t off = (o * c->R + r0) * c->I + c0, step = c->O * c->R * c->I;
    if (c->I == 1 && !c->group) {
        double bv = c->mx ? -INFINITY : INFINITY;
        int64_t bi = r0;
        for (int64_t ro = 0; ro < c->RO; ro++, off += step)
            for (int64_t i = 0; i < nr && bv == bv; i += MM_CHUNK) {
                int64_t n = min64(nr - i, MM_CHUNK);
                half_block(c->dt, x + off + i, n, t);
                mm_row(c->mx, t, false, n, r0 + i, &bv, &bi);
            }
        ((double *)c->pv)[slot] = bv;
        c->pi[slot] = bi;
        return;
    }
    double dv[COL_BLOCK];
    int64_t iv[COL_BLOCK], bi[COL_BLOCK];
    mm_init(c, nc, dv, iv, bi, r0, 0);
    for (int64_t ro = 0; ro < c->RO; ro++, off += step) {
        if (c->group) { /* nc rows of nr (nc*nr <= HBUF) side by side */
            half_block(c->dt, x + off, nc * nr, t);
            mm_any_f32(c->mx, t, 0, nr, 1, nc, nr, dv, bi, 0, 1, 0);
            continue;
        }
        for (int64_t r = 0, per = HBUF / nc; r < nr; r += per) {
            int64_t n = min64(nr - r, per);
            half_rows(c->dt, x + off + r * c->I, c->I, n, nc, t);
            mm_any_f32(c->mx, t, 0, n, nc, nc, 1, dv, bi, r0 + r, 1, 0);
        }
    }
    int64_t at = slot * c->I + c0;
    memcpy((double *)c->pv + at, dv, (size_t)nc * sizeof(double));
    memcpy(c->pi + at, bi, (size_t)nc * sizeof(int64_t));
}

static void mm_item(void *vc, int64_t o, int64_t c0, int64_t nc, int64_t r0, int64_t nr,
                    int64_t slot) {
    const mm_ctx *c = vc;
    bool isint = c->dt == DL_DTYPE_I64;
    int64_t off = (o * c->R + r0) * c->I + c0, step = c->O * c->R * c->I;
    if (c->I == 1 && !c->group && !isint) {
        bool f64 = c->dt == DL_DTYPE_F64;
        double bv = c->mx ? -INFINITY : INFINITY;
        int64_t bi = r0;
        for (int64_t ro = 0; ro < c->RO; ro++, off += step)
            mm_row(c->mx,
                   f64 ? (const void *)((const double *)c->x + off) : (const float *)c->x + off,
                   f64, nr, r0, &bv, &bi);
        ((double *)c->pv)[slot] = bv;
        c->pi[slot] = bi;
        return;
    }
    if (c->I == 1 && !c->group) {
        double dv[LANES];
        int64_t iv[LANES], bi[LANES];
        mm_init(c, LANES, dv, iv, bi, r0, 1);
        int64_t rows = nr / LANES;
        for (int64_t ro = 0; ro < c->RO; ro++, off += step) {
            mm_fold_lanes(c, off, rows, dv, iv, bi, r0);
            mm_fold(c, off + rows * LANES, 1, 0, nr - rows * LANES, 1, dv, iv, bi,
                    r0 + rows * LANES, 0, 1);
        }
        int best = 0;
        for (int j = 1; j < LANES; j++) {
            bool b = isint ? mm_better_i64(c->mx, iv[j], bi[j], iv[best], bi[best])
                           : mm_better(c->mx, dv[j], bi[j], dv[best], bi[best]);
            if (b) best = j;
        }
        if (isint)
            ((int64_t *)c->pv)[slot] = iv[best];
        else
            ((double *)c->pv)[slot] = dv[best];
        c->pi[slot] = bi[best];
        return;
    }
    double dv[COL_BLOCK];
    int64_t iv[COL_BLOCK], bi[COL_BLOCK];
    mm_init(c, nc, dv, iv, bi, r0, 0);
    for (int64_t ro = 0; ro < c->RO; ro++, off += step) {
        if (c->group) /* nc rows of nr side by side; index = position in the row */
            mm_fold(c, off, nr, 1, nc, nr, dv, iv, bi, 0, 1, 0);
        else
            mm_fold(c, off, nr, c->I, nc, 1, dv, iv, bi, r0, 1, 0);
    }
    int64_t at = slot * c->I + c0;
    if (isint)
        memcpy((int64_t *)c->pv + at, iv, (size_t)nc * sizeof(int64_t));
    else
        memcpy((double *)c->pv + at, dv, (size_t)nc * sizeof(double));
    memcpy(c->pi + at, bi, (size_t)nc * sizeof(int64_t));
}

int dl_cpu_reduce_minmax(bool is_max, const void *x, dl_dtype dt, const dl_rshape *sh, void *vals,
                         int64_t *idx) {
    int64_t O = sh->O, I = sh->I, n = O * I;
    if (n == 0) return 0;
    if (sh->R * sh->RO <= 0) return dl_error("max/min: cannot reduce over an empty dimension");
    split s;
    split_init(&s, sh, true, true, COL_BLOCK);
    bool isint = dt == DL_DTYPE_I64;
    void *pv = vals;
    int64_t *pi = idx;
    if (s.nch > 1) pv = malloc(8 * (size_t)(n * s.nch));
    if (s.nch > 1 || !idx) pi = malloc(sizeof(int64_t) * (size_t)(n * s.nch));
    if (!pv || !pi) {
        if (pv != vals) free(pv);
        if (pi != idx) free(pi);
        return no_memory("max/min");
    }
    mm_ctx c = {is_max, s.group, x, dt, sh->RO, O, sh->R, I, pv, pi};
    split_run(&s, is_half(dt) ? mm_item_half : mm_item, &c);
    if (s.nch > 1) {
        for (int64_t o = 0; o < O; o++)
            for (int64_t i = 0; i < I; i++) {
                int64_t at = o * s.nch * I + i, bi = pi[at];
                double bd = isint ? 0 : ((double *)pv)[at];
                int64_t bn = isint ? ((int64_t *)pv)[at] : 0;
                for (int64_t ch = 1; ch < s.nch; ch++) {
                    int64_t a2 = (o * s.nch + ch) * I + i;
                    if (isint ? mm_better_i64(is_max, ((int64_t *)pv)[a2], pi[a2], bn, bi)
                              : mm_better(is_max, ((double *)pv)[a2], pi[a2], bd, bi)) {
                        bi = pi[a2];
                        if (isint)
                            bn = ((int64_t *)pv)[a2];
                        else
                            bd = ((double *)pv)[a2];
                    }
                }
                if (isint)
                    ((int64_t *)vals)[o * I + i] = bn;
                else
                    ((double *)vals)[o * I + i] = bd;
                if (idx) idx[o * I + i] = bi;
            }
    }
    if (pv != vals) free(pv);
    if (pi != idx) free(pi);
    return 0;
}

/* --- scans (cumsum, cumprod) ------------------------------------------------------- */

ALWAYS_INLINE void stx(void *out, int64_t i, bool f64, double v) {
    if (f64)
        ((double *)out)[i] = v;
    else
        ((float *)out)[i] = (float)v;
}

/* Scans nr rows of nc columns (row r at off + r*ld) carrying acc[nc]. */
ALWAYS_INLINE void scan_block(bool prod, const void *x, void *out, bool f64, int64_t off,
                              int64_t nr, int64_t ld, int64_t nc, double *restrict acc) {
    if (nc == 1) { /* one column (I == 1): a plain running loop */
        double a = acc[0];
        for (int64_t r = 0, b = off; r < nr; r++, b += ld) {
            a = prod ? a * ldx(x, b, f64) : a + ldx(x, b, f64);
            stx(out, b, f64, a);
        }
        acc[0] = a;
        return;
    }
    for (int64_t r = 0, b = off; r < nr; r++, b += ld) {
        if (prod) {
#pragma omp simd
            for (int64_t c = 0; c < nc; c++) {
                acc[c] *= ldx(x, b + c, f64);
                stx(out, b + c, f64, acc[c]);
            }
        } else {
#pragma omp simd
            for (int64_t c = 0; c < nc; c++) {
                acc[c] += ldx(x, b + c, f64);
                stx(out, b + c, f64, acc[c]);
            }
        }
    }
}

static void scan_block_f32(bool prod, const void *x, void *out, int64_t off, int64_t nr, int64_t ld,
                           int64_t nc, double *acc) {
    scan_block(prod, x, out, false, off, nr, ld, nc, acc);
}
static void scan_block_f64(bool prod, const void *x, void *out, int64_t off, int64_t nr, int64_t ld,
                           int64_t nc, double *acc) {
    scan_block(prod, x, out, true, off, nr, ld, nc, acc);
}

static void scan_block_i64(bool prod, const int64_t *x, int64_t *out, int64_t off, int64_t nr,
                           int64_t ld, int64_t nc, uint64_t *restrict acc) {
    for (int64_t r = 0, b = off; r < nr; r++, b += ld)
        for (int64_t c = 0; c < nc; c++) {
            acc[c] = prod ? acc[c] * (uint64_t)x[b + c] : acc[c] + (uint64_t)x[b + c];
            out[b + c] = (int64_t)acc[c];
        }
}

typedef struct {
    bool prod;
    const void *x;
    void *out;
    dl_dtype dt;
    int64_t R, I;
} scan_ctx;

static void scan_item(void *vc, int64_t o, int64_t c0, int64_t nc, int64_t r0, int64_t nr,
                      int64_t slot) {
    (void)slot;
    const scan_ctx *c = vc;
    int64_t off = (o * c->R + r0) * c->I + c0;
    if (c->dt == DL_DTYPE_I64) {
        uint64_t acc[COL_BLOCK];
        for (int64_t j = 0; j < nc; j++) acc[j] = c->prod ? 1 : 0;
        scan_block_i64(c->prod, c->x, c->out, off, nr, c->I, nc, acc);
        return;
    }
    double acc[COL_BLOCK];
    for (int64_t j = 0; j < nc; j++) acc[j] = c->prod ? 1 : 0;
    if (c->dt == DL_DTYPE_F64)
        scan_block_f64(c->prod, c->x, c->out, off, nr, c->I, nc, acc);
    else
        scan_block_f32(c->prod, c->x, c->out, off, nr, c->I, nc, acc);
}

int dl_cpu_scan(bool prod, const void *x, dl_dtype dt, int64_t O, int64_t R, int64_t I, void *out) {
    if (O * R * I == 0) return 0;
    split s;
    dl_rshape sh = {1, O, R, I};
    split_init(&s, &sh, false, false, COL_BLOCK);
    scan_ctx c = {prod, x, out, dt, R, I};
    split_run(&s, scan_item, &c);
    return 0;
}

/* --- median ------------------------------------------------------------------------ */

typedef struct {
    double v;
    int64_t i;
} pair_f;

typedef struct {
    int64_t v;
    int64_t i;
} pair_i;

static int cmp_pair_f(const void *a, const void *b) {
    const pair_f *p = a, *q = b;
    if (p->v != q->v) return p->v < q->v ? -1 : 1;
    return (p->i > q->i) - (p->i < q->i);
}

static int cmp_pair_i(const void *a, const void *b) {
    const pair_i *p = a, *q = b;
    if (p->v != q->v) return p->v < q->v ? -1 : 1;
    return (p->i > q->i) - (p->i < q->i);
}

typedef struct {
    const void *x;
    dl_dtype dt;
    int64_t R, I;
    void *vals;
    int64_t *idx;
    int failed;
} med_ctx;

static void med_item(void *vc, int64_t o, int64_t c0, int64_t nc, int64_t r0, int64_t nr,
                     int64_t slot) {
    (void)r0;
    (void)slot;
    med_ctx *c = vc;
    bool isint = c->dt == DL_DTYPE_I64;
    void *buf = malloc((size_t)nr * (isint ? sizeof(pair_i) : sizeof(pair_f)));
    if (!buf) {
#pragma omp atomic write
        c->failed = 1;
        return;
    }
    int64_t k = (nr - 1) / 2;
    for (int64_t j = c0; j < c0 + nc; j++) {
        int64_t base = o * c->R * c->I + j, at = o * c->I + j;
        if (isint) {
            pair_i *p = buf;
            const int64_t *x = c->x;
            for (int64_t r = 0; r < nr; r++) p[r] = (pair_i){x[base + r * c->I], r};
            qsort(p, (size_t)nr, sizeof *p, cmp_pair_i);
            ((int64_t *)c->vals)[at] = p[k].v;
            c->idx[at] = p[k].i;
            continue;
        }
        pair_f *p = buf;
        bool f64 = c->dt == DL_DTYPE_F64;
        int64_t nan_at = -1;
        for (int64_t r = 0; r < nr; r++) {
            double v = ldx(c->x, base + r * c->I, f64);
            if (v != v) {
                nan_at = r;
                break;
            }
            p[r] = (pair_f){v, r};
        }
        if (nan_at >= 0) {
            ((double *)c->vals)[at] = NAN;
            c->idx[at] = nan_at;
            continue;
        }
        qsort(p, (size_t)nr, sizeof *p, cmp_pair_f);
        ((double *)c->vals)[at] = p[k].v;
        c->idx[at] = p[k].i;
    }
    free(buf);
}

int dl_cpu_median(const void *x, dl_dtype dt, int64_t O, int64_t R, int64_t I, void *vals,
                  int64_t *idx) {
    if (O * I == 0) return 0;
    if (R <= 0) return dl_error("median: cannot reduce over an empty dimension");
    split s;
    dl_rshape sh = {1, O, R, I};
    split_init(&s, &sh, false, false, COL_BLOCK);
    med_ctx c = {x, dt, R, I, vals, idx, 0};
    split_run(&s, med_item, &c);
    return c.failed ? no_memory("median") : 0;
}

/* --- finishing ------------------------------------------------------------------------ */

/* --- logsumexp along contiguous rows (RO == 1, I == 1) -----------------------------------
 * One pass over memory: a row goes LSE_CHUNK elements at a time, each
 * chunk's max found first (in L1 after that), then exp(x - m) through the
 * vector exp into a buffer and summed in double lanes; when a chunk raises
 * the running max m, the sum so far is rescaled by exp(m_old - m_new).
 * Items are (row, chunk of the row) as in the other reductions; their
 * (m, s) pairs are merged in chunk order. */

typedef struct {
    const void *x;
    dl_dtype dt; /* float32, float64, or float16/bfloat16 (converted by chunk) */
    int64_t R;
    double *pm, *ps; /* (O, nch) running max and sum of each item */
} lse_ctx;

/* sum of exp(x[i] - m) over the n values at x (float32: in float) */
static double sumexp_chunk(const void *x, bool f64, int64_t n, double m) {
    double a[FLANES] = {0}, td[LSE_CHUNK];
    float tf[LSE_CHUNK], mf = (float)m;
    if (f64)
        for (int64_t i = 0; i < n; i++) td[i] = ((const double *)x)[i] - m;
    else
        for (int64_t i = 0; i < n; i++) tf[i] = ((const float *)x)[i] - mf;
    vexp(f64 ? (void *)td : (void *)tf, n, f64);
    if (f64)
        for (int64_t i = 0; i < n; i++) a[i % FLANES] += td[i];
    else
        frow_sum_f32(DL_ACC_SUM, tf, n, a);
    return lanes_combine(DL_ACC_SUM, a);
}

static void lse_item(void *vc, int64_t o, int64_t c0, int64_t nc, int64_t r0, int64_t nr,
                     int64_t slot) {
    const lse_ctx *c = vc;
    (void)c0, (void)nc;
    const bool f64 = c->dt == DL_DTYPE_F64;
    float t[LSE_CHUNK];
    double m = -INFINITY, sum = 0;
    for (int64_t i = 0; i < nr; i += LSE_CHUNK) {
        int64_t k = nr - i < LSE_CHUNK ? nr - i : LSE_CHUNK, at = o * c->R + r0 + i;
        const void *p = f64 ? (const void *)((const double *)c->x + at)
                            : (const void *)((const float *)c->x + at);
        if (is_half(c->dt)) {
            half_block(c->dt, (const uint16_t *)c->x + at, k, t);
            p = t;
        }
        bool nan;
        double mc = f64 ? mm_ext_f64(true, p, k, &nan) : mm_ext_f32(true, p, k, &nan);
        if (nan) {
            m = NAN;
            break;
        }
        if (mc > m) {
            sum = m == -INFINITY ? 0 : sum * exp(m - mc);
            m = mc;
        }
        if (isinf(m)) continue; /* -inf: nothing yet; +inf: the result is +inf */
        sum += sumexp_chunk(p, f64, k, m);
    }
    c->pm[slot] = m;
    c->ps[slot] = sum;
}

/* --- logsumexp over inner dims (I > 1, or split reduced dims) ---------------------------
 * One pass as well: an item (o, up to COL_BLOCK columns, a chunk of rows)
 * keeps per column a running max m and the sum s of exp(x - m).  Blocks of
 * rows (LSE_CHUNK elements at most, in L1 after the first read) give their
 * column maxima first; where a block raises m, s is rescaled by
 * exp(m_old - m_new); then the block's x - m go through the vector exp and
 * are added, column by column in double.  An infinite m subtracts nothing
 * (the result is m itself, s unused); a NaN is noted and wins. */

typedef struct {
    const void *x;
    dl_dtype dt; /* float32, float64, or float16/bfloat16 (converted by block) */
    int64_t RO, O, R, I;
    double *pm, *ps; /* (O, nch, I) running max (NaN: a NaN was seen) and sum */
} lsec_ctx;

/* rows [r, r+n) (ld apart) of nc columns of x (dtype dt) as T, with their
 * ld in *lo: in place, or float16/bfloat16 converted into xb */
static const float *lse_rows_f32(const void *x, dl_dtype dt, int64_t r, int64_t ld, int64_t n,
                                 int64_t nc, float *xb, int64_t *lo) {
    *lo = is_half(dt) ? nc : ld;
    if (!is_half(dt)) return (const float *)x + r * ld;
    half_rows(dt, (const uint16_t *)x + r * ld, ld, n, nc, xb);
    return xb;
}
static const double *lse_rows_f64(const void *x, dl_dtype dt, int64_t r, int64_t ld, int64_t n,
                                  int64_t nc, double *xb, int64_t *lo) {
    (void)dt, (void)n, (void)nc, (void)xb;
    *lo = ld;
    return (const double *)x + r * ld;
}

/* Folds n rows (ld apart; a super-block, in L2 after its first read) of nc
 * columns at x into (m, s, nn): the rows' column maxima first (LSE_CHUNK
 * elements at a time), s rescaled by exp(m_old - m_new) (both finite) where
 * they raise m, then exp(x - m) of blocks through the vector exp, added in
 * double.  An infinite m subtracts nothing. */
#define LSE_COLS(name, T, ROWS)                                                                    \
    REDUCE_CLONES static void name(const void *x, dl_dtype dt, int64_t ld, int64_t n, int64_t nc,  \
                                   T *restrict m, double *restrict s, int32_t *restrict nn) {      \
        T bm[COL_BLOCK], ms[COL_BLOCK], t[LSE_CHUNK], xb[LSE_CHUNK];                               \
        double e[COL_BLOCK];                                                                       \
        int64_t lb = LSE_CHUNK / nc, lr;                                                           \
        int32_t raised = 0;                                                                        \
        for (int64_t c = 0; c < nc; c++) bm[c] = m[c];                                             \
        for (int64_t r = 0; r < n; r += lb) {                                                      \
            int64_t k = min64(n - r, lb);                                                          \
            const T *xr = ROWS(x, dt, r, ld, k, nc, xb, &lr);                                      \
            for (int64_t q = 0; q < k; q++) DL_PRAGMA(omp simd)                                    \
            for (int64_t c = 0; c < nc; c++) {                                                     \
                T v = xr[q * lr + c];                                                              \
                nn[c] |= v != v;                                                                   \
                bm[c] = v > bm[c] ? v : bm[c];                                                     \
            }                                                                                      \
        }                                                                                          \
        for (int64_t c = 0; c < nc; c++) raised |= bm[c] > m[c];                                   \
        if (raised) {                                                                              \
            for (int64_t c = 0; c < nc; c++)                                                       \
                e[c] = isfinite(m[c]) && isfinite(bm[c]) ? (double)m[c] - (double)bm[c] : 0.0;     \
            vexp(e, nc, true);                                                                     \
            for (int64_t c = 0; c < nc; c++) {                                                     \
                s[c] *= e[c];                                                                      \
                m[c] = bm[c];                                                                      \
            }                                                                                      \
        }                                                                                          \
        for (int64_t c = 0; c < nc; c++) ms[c] = isinf(m[c]) ? 0 : m[c];                           \
        for (int64_t r = 0; r < n; r += lb) {                                                      \
            int64_t k = min64(n - r, lb);                                                          \
            const T *xr = ROWS(x, dt, r, ld, k, nc, xb, &lr);                                      \
            for (int64_t q = 0; q < k; q++) DL_PRAGMA(omp simd)                                    \
            for (int64_t c = 0; c < nc; c++) t[q * nc + c] = xr[q * lr + c] - ms[c];               \
            vexp(t, k *nc, sizeof(T) == 8);                                                        \
            for (int64_t q = 0; q < k; q++) DL_PRAGMA(omp simd)                                    \
            for (int64_t c = 0; c < nc; c++) s[c] += t[q * nc + c];                                \
        }                                                                                          \
    }

LSE_COLS(lse_cols_f32, float, lse_rows_f32)
LSE_COLS(lse_cols_f64, double, lse_rows_f64)

static void lsec_item(void *vc, int64_t o, int64_t c0, int64_t nc, int64_t r0, int64_t nr,
                      int64_t slot) {
    const lsec_ctx *c = vc;
    const bool f64 = c->dt == DL_DTYPE_F64;
    const size_t es = f64 ? 8 : c->dt == DL_DTYPE_F32 ? 4 : 2;
    double s[COL_BLOCK], md[COL_BLOCK];
    float mf[COL_BLOCK];
    int32_t nn[COL_BLOCK];
    int64_t sb = LSE_SUPER / nc, I = c->I;
    for (int64_t j = 0; j < nc; j++) {
        s[j] = 0;
        nn[j] = 0;
        md[j] = mf[j] = -INFINITY;
    }
    for (int64_t ro = 0; ro < c->RO; ro++)
        for (int64_t r = 0; r < nr; r += sb) {
            int64_t n = min64(nr - r, sb), at = ((ro * c->O + o) * c->R + r0 + r) * I + c0;
            const char *p = (const char *)c->x + (size_t)at * es;
            if (f64)
                lse_cols_f64(p, c->dt, I, n, nc, md, s, nn);
            else
                lse_cols_f32(p, c->dt, I, n, nc, mf, s, nn);
        }
    for (int64_t j = 0; j < nc; j++) {
        c->pm[slot * I + c0 + j] = nn[j] ? NAN : f64 ? md[j] : mf[j];
        c->ps[slot * I + c0 + j] = s[j];
    }
}

/* The logsumexp of n partial (max, sum) pairs (stride apart), merged in
 * order: NaN if a max is NaN, the max if it is infinite. */
static double lse_merge(const double *m, const double *s, int64_t n, int64_t stride) {
    double M = -INFINITY, S = 0;
    bool nan = false;
    for (int64_t k = 0; k < n; k++) {
        double v = m[k * stride];
        nan |= v != v;
        if (v > M) M = v;
    }
    if (nan || isinf(M)) return nan ? NAN : M;
    for (int64_t k = 0; k < n; k++) S += s[k * stride] * exp(m[k * stride] - M);
    return M + log(S);
}

int dl_cpu_reduce_logsumexp(const void *x, dl_dtype dt, const dl_rshape *sh, double *out) {
    int64_t O = sh->O, I = sh->I, n = O * I;
    if (n == 0) return 0;
    if (sh->R * sh->RO == 0) {
        for (int64_t k = 0; k < n; k++) out[k] = -INFINITY;
        return 0;
    }
    split s;
    split_init(&s, sh, true, false, COL_BLOCK);
    int64_t np = n * s.nch;
    double *pm = malloc(sizeof(double) * (size_t)(2 * np));
    if (!pm) return no_memory("logsumexp");
    if (sh->RO == 1 && I == 1) {
        lse_ctx c = {x, dt, sh->R, pm, pm + np};
        split_run(&s, lse_item, &c);
    } else {
        lsec_ctx c = {x, dt, sh->RO, O, sh->R, I, pm, pm + np};
        split_run(&s, lsec_item, &c);
    }
    for (int64_t o = 0; o < O; o++)
        for (int64_t i = 0; i < I; i++) {
            int64_t at = o * s.nch * I + i;
            out[o * I + i] = lse_merge(pm + at, pm + np + at, s.nch, I);
        }
    free(pm);
    return 0;
}

void dl_cpu_reduce_finish(dl_fin_kind kind, double *a, int64_t n, double c, const double *shift) {
    switch (kind) {
    case DL_FIN_DIV:
        for (int64_t i = 0; i < n; i++) a[i] /= c;
        break;
    case DL_FIN_SQRT_DIV:
        for (int64_t i = 0; i < n; i++) a[i] = sqrt(a[i] / c);
        break;
    case DL_FIN_POW:
        for (int64_t i = 0; i < n; i++) a[i] = pow(a[i], c);
        break;
    case DL_FIN_LOG_SHIFT:
        for (int64_t i = 0; i < n; i++) a[i] = log(a[i]) + shift[i];
        break;
    }
}
