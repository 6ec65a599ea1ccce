/* cpu/attention.c - CPU kernels of scaled dot-product attention (see
 * attention.h), in the manner of flash attention: memory stays linear in the
 * sequence lengths.
 *
 * Forward: a work item is one batch entry b and a block of up to BR query
 * rows.  It walks the keys in tiles of BC: scores S = scale * Q K^T for the
 * tile (one small GEMM), the mask, then an online softmax that keeps each
 * row's running max m and sum l, rescales the row's partial output by
 * exp(m_old - m_new) and adds (weights @ V) (a second GEMM).  The partial
 * output lives in the output rows themselves; at the end each row is divided
 * by l and lse = m + log(l) is kept for the backward.  Under is_causal the
 * key tiles past the block's last row are skipped.
 *
 * Backward: per tile pair (query block i, key block j) the weights are
 * recomputed as P = exp(S - lse) and
 *   dV_j += Pd^T dO_i,  dP = dO_i V_j^T,  dS = P * (dP * keep/(1-p) - D_i),
 *   dK_j += scale * dS^T Q_i,  dQ_i += scale * dS K_j,
 * with Pd the dropped-out weights and D_i = rowsum(dO_i * O_i).  With enough
 * batch entries each thread takes whole entries (all five products per tile
 * pair); with few (one long sequence) the work is split in two passes so
 * that both keep every thread busy without two threads adding into one
 * block: key blocks in parallel (dK, dV), then query blocks in parallel
 * (dQ).  Either way dQ_i sums over j, and dK_j, dV_j over i, in ascending
 * order with identical tiles, so the results are the same bits.
 *
 * Block products go through dl_cpu_gemm (oneDNN's sgemm for float32, the
 * own blocked loops for float64), which runs single-threaded inside the
 * parallel regions here; the per-row work (masking, exponentials, sums) is
 * vectorised with dl_cpu_expf.  Tiles are per-thread scratch from
 * dl_cpu_alloc: a few (BR, BC) blocks per thread, whatever L and S are. */
#include "cpu/attention.h"
#include "core/error.h"
#include "core/parallel.h"
#include "core/rng.h"
#include "core/storage.h"
#include "cpu/gemm.h"
#include "cpu/softmax.h"

#include <math.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

/* Query rows and keys per tile.  Measured with float32, head dim 64, on 2
 * threads: 64 x 64 tiles ran T = 256 causal within 10% of 128 x 128 and
 * keep the scratch (and the skipped causal area) small. */
enum { BR = 64, BC = 64 };

/* the float32 row loops in AVX-512, AVX2 and baseline builds, picked at load
 * time (no FMA contraction in this file, so every variant rounds alike) */
#define ATTN_CLONES DL_CPU_CLONES

static int64_t min64(int64_t a, int64_t b) {
    return a < b ? a : b;
}

/* --- one tile row: masks and dropout ------------------------------------------------------ */

/* Per-thread scratch: three (BR, BC) tiles of the compute dtype, the
 * dropout flags of a tile, and each row's running max and sum. */
typedef struct {
    void *s, *dp, *pd;
    uint8_t *keep;
    double *m, *l;
} scratch;

/* Where a query row's mask starts: element (b, i, j0) of the mask. */
static const char *mask_row(const dl_attn_params *p, int64_t b, int64_t i, int64_t j0) {
    const dl_attn_mask *m = &p->mask;
    if (!m->data) return NULL;
    int64_t off = dl_attn_mask_boff(m, b) + i * m->rs + j0 * m->cs;
    return (const char *)m->data + off * (int64_t)dl_dtype_size(m->dtype);
}

/* Keys of the tile at j0 (nc of them) that query i may see under is_causal:
 * the first lim; all nc without it. */
static int64_t causal_limit(const dl_attn_params *p, int64_t i, int64_t j0, int64_t nc) {
    if (!p->causal) return nc;
    int64_t lim = i - j0 + 1;
    return lim < 0 ? 0 : lim > nc ? nc : lim;
}

/* keep[c] = whether weight (b, i, j0 + c) survives dropout (the stream of
 * kernels/attention.h); thr is (float)(1 - p). */
static void dropout_keep(uint8_t *keep, int64_t nc, const dl_attn_params *p, int64_t b, int64_t i,
                         int64_t j0, float thr) {
    uint64_t base = p->offset + (uint64_t)(b * p->L + i) * (uint64_t)((p->S + 3) / 4);
    uint32_t r[4];
    int64_t have = -1;
    for (int64_t c = 0; c < nc; c++) {
        int64_t j = j0 + c;
        if (j / 4 != have) {
            have = j / 4;
            dl_philox4x32(p->seed, base + (uint64_t)have, r);
        }
        keep[c] = dl_u32_to_unit_float(r[j % 4]) < thr;
    }
}

/* --- float32 rows ------------------------------------------------------------------------- */

/* name(s, nc, lim, m, mrow): s (nc) are query i's scores (type T) against
 * a key tile: keys past lim, and those the mask (mrow, column stride cs)
 * takes out, become -inf; a floating mask (of the scores' type) is added.
 * ATTRS: the function's attributes (the float32 one is cloned per ISA). */
#define DEFINE_MASK(name, T, ATTRS)                                                                \
    ATTRS static void name(T *s, int64_t nc, int64_t lim, const dl_attn_mask *m,                   \
                           const char *mrow) {                                                     \
        for (int64_t c = lim; c < nc; c++) s[c] = -INFINITY;                                       \
        if (!mrow) return;                                                                         \
        int64_t cs = m->cs;                                                                        \
        if (m->dtype == DL_DTYPE_BOOL) {                                                           \
            const uint8_t *mb = (const uint8_t *)mrow;                                             \
            for (int64_t c = 0; c < lim; c++)                                                      \
                if (!mb[c * cs]) s[c] = -INFINITY;                                                 \
        } else {                                                                                   \
            const T *mf = (const T *)mrow;                                                         \
            _Pragma("omp simd") for (int64_t c = 0; c < lim; c++) s[c] += mf[c * cs];              \
        }                                                                                          \
    }
DEFINE_MASK(mask_f32, float, ATTN_CLONES)

/* The online softmax step of one row: s (nc) masked scores become the
 * weights exp(s - m_new) (then zeroed where dropped, scaled by inv where
 * kept, when keep is given); *m and *l are updated.  Returns the factor the
 * row's partial output must be multiplied by. */
ATTN_CLONES static float online_f32(float *s, int64_t nc, double *m, double *l, const uint8_t *keep,
                                    float inv) {
    float mx = -INFINITY;
#pragma omp simd reduction(max : mx)
    for (int64_t c = 0; c < nc; c++) mx = s[c] > mx ? s[c] : mx;
    float mo = (float)*m, mn = mx > mo ? mx : mo;
    if (mn == -INFINITY) { /* nothing seen yet: the row stays empty */
        for (int64_t c = 0; c < nc; c++) s[c] = 0;
        return 1;
    }
    double sum = 0;
#pragma omp simd reduction(+ : sum)
    for (int64_t c = 0; c < nc; c++) {
        float e = dl_cpu_expf(s[c] - mn);
        s[c] = e;
        sum += e;
    }
    float corr = dl_cpu_expf(mo - mn); /* 0 when mo is -inf */
    *l = *l * corr + sum;
    *m = mn;
    if (keep) {
#pragma omp simd
        for (int64_t c = 0; c < nc; c++) s[c] = keep[c] ? s[c] * inv : 0.0f;
    }
    return corr;
}

ATTN_CLONES static void scale_row_f32(float *o, int64_t n, float f) {
#pragma omp simd
    for (int64_t e = 0; e < n; e++) o[e] *= f;
}

/* Weights of a recomputed row: s (nc) masked scores -> exp(s - lse). */
ATTN_CLONES static void weights_f32(float *s, int64_t nc, float lse) {
#pragma omp simd
    for (int64_t c = 0; c < nc; c++) s[c] = dl_cpu_expf(s[c] - lse);
}

/* pd = weights after dropout: P * keep * inv. */
ATTN_CLONES static void dropped_f32(float *pd, const float *P, int64_t nc, const uint8_t *keep,
                                    float inv) {
#pragma omp simd
    for (int64_t c = 0; c < nc; c++) pd[c] = keep[c] ? P[c] * inv : 0.0f;
}

/* dp (nc) = dO_i . V_j becomes dS = P * (dp * keep * inv - D) (keep NULL: no dropout). */
ATTN_CLONES static void dscore_f32(float *dp, const float *P, int64_t nc, float D,
                                   const uint8_t *keep, float inv) {
    if (keep) {
#pragma omp simd
        for (int64_t c = 0; c < nc; c++) dp[c] = P[c] * ((keep[c] ? dp[c] * inv : 0.0f) - D);
    } else {
#pragma omp simd
        for (int64_t c = 0; c < nc; c++) dp[c] = P[c] * (dp[c] - D);
    }
}

/* --- float64 rows (the same steps; libm's exp) --------------------------------------------- */

DEFINE_MASK(mask_f64, double, )

static double online_f64(double *s, int64_t nc, double *m, double *l, const uint8_t *keep,
                         double inv) {
    double mx = -INFINITY;
    for (int64_t c = 0; c < nc; c++) mx = s[c] > mx ? s[c] : mx;
    double mn = mx > *m ? mx : *m;
    if (mn == -INFINITY) {
        for (int64_t c = 0; c < nc; c++) s[c] = 0;
        return 1;
    }
    double sum = 0;
    for (int64_t c = 0; c < nc; c++) {
        s[c] = exp(s[c] - mn);
        sum += s[c];
    }
    double corr = exp(*m - mn);
    *l = *l * corr + sum;
    *m = mn;
    if (keep)
        for (int64_t c = 0; c < nc; c++) s[c] = keep[c] ? s[c] * inv : 0.0;
    return corr;
}

static void dscore_f64(double *dp, const double *P, int64_t nc, double D, const uint8_t *keep,
                       double inv) {
    for (int64_t c = 0; c < nc; c++)
        dp[c] = P[c] * ((keep ? (keep[c] ? dp[c] * inv : 0.0) : dp[c]) - D);
}

/* --- tiles -------------------------------------------------------------------------------- */

/* What every tile of one call shares. */
typedef struct {
    dl_dtype dt;
    size_t isz;
    const dl_attn_params *p;
    float thr;  /* (float)(1 - p): a weight is kept when its draw is below */
    double inv; /* 1 / (1 - p) */
    bool dropout;
} attn_ctx;

static dl_gemm_matrix mat(const void *data, int64_t rs, int64_t cs) {
    return (dl_gemm_matrix){data, NULL, rs, cs};
}

/* out (M, N) contiguous = alpha * A @ B + beta * out; 0 or nonzero. */
static int mm(const attn_ctx *c, int64_t M, int64_t N, int64_t K, double alpha, dl_gemm_matrix a,
              dl_gemm_matrix b, double beta, void *out) {
    return dl_cpu_gemm(c->dt, 1, M, N, K, alpha, &a, &b, beta, out);
}

/* Element i of a typed buffer, as a pointer. */
static const char *at(const attn_ctx *c, const void *base, int64_t i) {
    return (const char *)base + (size_t)i * c->isz;
}

/* Forward of query rows i0.. (up to BR) of batch entry b. */
static int forward_block(const attn_ctx *c, void *out, void *lse, const void *q, const void *k,
                         const void *v, int64_t b, int64_t i0, scratch *w) {
    const dl_attn_params *p = c->p;
    const int64_t L = p->L, S = p->S, E = p->E, Ev = p->Ev;
    const int64_t nr = min64(BR, L - i0);
    const char *qb = at(c, q, (b * L + i0) * E);
    char *ob = (char *)at(c, out, (b * L + i0) * Ev);
    memset(ob, 0, (size_t)(nr * Ev) * c->isz);
    for (int64_t r = 0; r < nr; r++) w->m[r] = -INFINITY, w->l[r] = 0;
    const int64_t jend = p->causal ? min64(S, i0 + nr) : S;
    for (int64_t j0 = 0; j0 < jend; j0 += BC) {
        const int64_t nc = min64(BC, jend - j0);
        const char *kb = at(c, k, (b * S + j0) * E), *vb = at(c, v, (b * S + j0) * Ev);
        if (mm(c, nr, nc, E, p->scale, mat(qb, E, 1), mat(kb, 1, E), 0, w->s)) return -1;
        for (int64_t r = 0; r < nr; r++) {
            const int64_t i = i0 + r, lim = causal_limit(p, i, j0, nc);
            const uint8_t *keep = NULL;
            if (c->dropout) {
                dropout_keep(w->keep, nc, p, b, i, j0, c->thr);
                keep = w->keep;
            }
            if (c->dt == DL_DTYPE_F32) {
                float *s = (float *)w->s + r * nc;
                mask_f32(s, nc, lim, &p->mask, mask_row(p, b, i, j0));
                float corr = online_f32(s, nc, &w->m[r], &w->l[r], keep, (float)c->inv);
                if (corr != 1) scale_row_f32((float *)ob + r * Ev, Ev, corr);
            } else {
                double *s = (double *)w->s + r * nc, *o = (double *)ob + r * Ev;
                mask_f64(s, nc, lim, &p->mask, mask_row(p, b, i, j0));
                double corr = online_f64(s, nc, &w->m[r], &w->l[r], keep, c->inv);
                if (corr != 1)
                    for (int64_t e = 0; e < Ev; e++) o[e] *= corr;
            }
        }
        if (mm(c, nr, Ev, nc, 1, mat(w->s, nc, 1), mat(vb, Ev, 1), 1, ob)) return -1;
    }
    for (int64_t r = 0; r < nr; r++) {
        double l = w->l[r], f = l > 0 ? 1 / l : 0;
        double g = l > 0 ? w->m[r] + log(l) : INFINITY;
        if (c->dt == DL_DTYPE_F32) {
            scale_row_f32((float *)ob + r * Ev, Ev, (float)f);
            ((float *)lse)[b * L + i0 + r] = (float)g;
        } else {
            double *o = (double *)ob + r * Ev;
            for (int64_t e = 0; e < Ev; e++) o[e] *= f;
            ((double *)lse)[b * L + i0 + r] = g;
        }
    }
    return 0;
}

/* The backward's operands. */
typedef struct {
    void *dq, *dk, *dv;
    const void *gout, *q, *k, *v, *lse, *D;
} bwd_args;

/* Whether the tile pair (query block at i0, key block at j0) has a weight
 * that is not causally masked. */
static bool tile_live(const dl_attn_params *p, int64_t i0, int64_t j0) {
    return !p->causal || j0 <= min64(p->L, i0 + BR) - 1;
}

/* The backward of one tile pair of batch entry b: dK_j and dV_j (kv) and dQ_i
 * (qg) accumulate into the gradients. */
static int backward_tile(const attn_ctx *c, const bwd_args *a, int64_t b, int64_t i0, int64_t j0,
                         bool kv, bool qg, scratch *w) {
    const dl_attn_params *p = c->p;
    const int64_t L = p->L, S = p->S, E = p->E, Ev = p->Ev;
    const int64_t nr = min64(BR, L - i0), nc = min64(BC, S - j0);
    const char *qb = at(c, a->q, (b * L + i0) * E), *kb = at(c, a->k, (b * S + j0) * E);
    const char *vb = at(c, a->v, (b * S + j0) * Ev), *gb = at(c, a->gout, (b * L + i0) * Ev);
    const bool f32 = c->dt == DL_DTYPE_F32;
    /* S -> P, the weights, in w->s; w->keep holds the tile's dropout flags */
    if (mm(c, nr, nc, E, p->scale, mat(qb, E, 1), mat(kb, 1, E), 0, w->s)) return -1;
    for (int64_t r = 0; r < nr; r++) {
        const int64_t i = i0 + r, lim = causal_limit(p, i, j0, nc);
        if (c->dropout) dropout_keep(w->keep + r * nc, nc, p, b, i, j0, c->thr);
        if (f32) {
            float *s = (float *)w->s + r * nc;
            mask_f32(s, nc, lim, &p->mask, mask_row(p, b, i, j0));
            weights_f32(s, nc, ((const float *)a->lse)[b * L + i]);
        } else {
            double *s = (double *)w->s + r * nc, g = ((const double *)a->lse)[b * L + i];
            mask_f64(s, nc, lim, &p->mask, mask_row(p, b, i, j0));
            for (int64_t cc = 0; cc < nc; cc++) s[cc] = exp(s[cc] - g);
        }
    }
    if (kv) { /* dV_j += Pd^T dO_i */
        const void *pd = w->s;
        if (c->dropout) {
            for (int64_t r = 0; r < nr; r++) {
                const uint8_t *keep = w->keep + r * nc;
                if (f32) {
                    dropped_f32((float *)w->pd + r * nc, (const float *)w->s + r * nc, nc, keep,
                                (float)c->inv);
                } else {
                    double *d = (double *)w->pd + r * nc;
                    const double *P = (const double *)w->s + r * nc;
                    for (int64_t cc = 0; cc < nc; cc++) d[cc] = keep[cc] ? P[cc] * c->inv : 0.0;
                }
            }
            pd = w->pd;
        }
        void *dvb = (char *)a->dv + (size_t)((b * S + j0) * Ev) * c->isz;
        if (mm(c, nc, Ev, nr, 1, mat(pd, 1, nc), mat(gb, Ev, 1), 1, dvb)) return -1;
    }
    /* dP = dO_i V_j^T, then dS in w->dp */
    if (mm(c, nr, nc, Ev, 1, mat(gb, Ev, 1), mat(vb, 1, Ev), 0, w->dp)) return -1;
    for (int64_t r = 0; r < nr; r++) {
        const uint8_t *keep = c->dropout ? w->keep + r * nc : NULL;
        if (f32) {
            float D = ((const float *)a->D)[b * L + i0 + r];
            dscore_f32((float *)w->dp + r * nc, (const float *)w->s + r * nc, nc, D, keep,
                       (float)c->inv);
        } else {
            double D = ((const double *)a->D)[b * L + i0 + r];
            dscore_f64((double *)w->dp + r * nc, (const double *)w->s + r * nc, nc, D, keep,
                       c->inv);
        }
    }
    if (kv) { /* dK_j += scale * dS^T Q_i */
        void *dkb = (char *)a->dk + (size_t)((b * S + j0) * E) * c->isz;
        if (mm(c, nc, E, nr, p->scale, mat(w->dp, 1, nc), mat(qb, E, 1), 1, dkb)) return -1;
    }
    if (qg) { /* dQ_i += scale * dS K_j */
        void *dqb = (char *)a->dq + (size_t)((b * L + i0) * E) * c->isz;
        if (mm(c, nr, E, nc, p->scale, mat(w->dp, nc, 1), mat(kb, E, 1), 1, dqb)) return -1;
    }
    return 0;
}

/* --- entry points ------------------------------------------------------------------------- */

/* nt threads' scratch in one block (NULL with an error). */
static void *scratch_new(const attn_ctx *c, int nt, scratch *ws, size_t *bytes) {
    size_t tile = (size_t)(BR * BC) * c->isz;
    size_t per = 3 * tile + (size_t)(BR * BC) + 2 * BR * sizeof(double);
    per = (per + 63) & ~(size_t)63;
    *bytes = per * (size_t)nt;
    char *blk = dl_cpu_alloc(*bytes);
    if (!blk) {
        dl_error("scaled_dot_product_attention: out of memory for %zu bytes of tiles", *bytes);
        return NULL;
    }
    for (int t = 0; t < nt; t++) {
        char *b = blk + per * (size_t)t;
        ws[t].m = (double *)b;
        ws[t].l = ws[t].m + BR;
        ws[t].s = b + 2 * BR * sizeof(double);
        ws[t].dp = (char *)ws[t].s + tile;
        ws[t].pd = (char *)ws[t].dp + tile;
        ws[t].keep = (uint8_t *)ws[t].pd + tile;
    }
    return blk;
}

static int thread_id(void) {
#ifdef _OPENMP
    return omp_get_thread_num();
#else
    return 0;
#endif
}

static attn_ctx ctx_of(dl_dtype dt, const dl_attn_params *p) {
    attn_ctx c = {dt, dl_dtype_size(dt), p, (float)(1.0 - p->dropout_p), 0, p->dropout_p > 0};
    c.inv = p->dropout_p < 1 ? 1 / (1.0 - p->dropout_p) : 0;
    return c;
}

static int forward_any(dl_dtype dt, void *out, void *lse, const void *q, const void *k,
                       const void *v, const dl_attn_params *p) {
    if (p->B * p->L == 0) return 0;
    const attn_ctx c = ctx_of(dt, p);
    int nt = dl_get_num_threads();
    if (nt < 1) nt = 1;
    scratch ws[nt];
    size_t bytes;
    void *blk = scratch_new(&c, nt, ws, &bytes);
    if (!blk) return -1;
    const int64_t nblk = (p->L + BR - 1) / BR, work = p->B * nblk;
    int failed = 0;
#pragma omp parallel for num_threads(nt) schedule(dynamic) if (work > 1)
    for (int64_t w = 0; w < work; w++) {
        if (forward_block(&c, out, lse, q, k, v, w / nblk, (w % nblk) * BR, &ws[thread_id()])) {
#pragma omp atomic write
            failed = 1;
        }
    }
    dl_cpu_free(blk, bytes);
    if (failed) return dl_error("scaled_dot_product_attention: a tile's matrix product failed");
    return 0;
}

int dl_cpu_attention_forward_f32(float *out, float *lse, const float *q, const float *k,
                                 const float *v, const dl_attn_params *p) {
    return forward_any(DL_DTYPE_F32, out, lse, q, k, v, p);
}

int dl_cpu_attention_forward_f64(double *out, double *lse, const double *q, const double *k,
                                 const double *v, const dl_attn_params *p) {
    return forward_any(DL_DTYPE_F64, out, lse, q, k, v, p);
}

/* D[r] = sum_e gout[r, e] * out[r, e] over the B*L rows. */
static void rowdots(const attn_ctx *c, void *D, const void *gout, const void *out, int nt) {
    const int64_t rows = c->p->B * c->p->L, Ev = c->p->Ev;
#pragma omp parallel for num_threads(nt) if (rows * Ev >= DL_PARALLEL_GRAIN)
    for (int64_t r = 0; r < rows; r++) {
        double acc = 0;
        if (c->dt == DL_DTYPE_F32) {
            const float *g = (const float *)gout + r * Ev, *o = (const float *)out + r * Ev;
            for (int64_t e = 0; e < Ev; e++) acc += (double)g[e] * o[e];
            ((float *)D)[r] = (float)acc;
        } else {
            const double *g = (const double *)gout + r * Ev, *o = (const double *)out + r * Ev;
            for (int64_t e = 0; e < Ev; e++) acc += g[e] * o[e];
            ((double *)D)[r] = acc;
        }
    }
}

/* Whole batch entries per thread (one pass), or key blocks then query blocks
 * (two passes) when there are too few entries to share out evenly. */
static bool one_pass(int64_t B, int nt) {
    return nt == 1 || B >= 4 * nt || B % nt == 0;
}

/* One pass of the two-pass backward: a task per (batch entry, key tile j)
 * for dK_j and dV_j (kv), or per (batch entry, query tile i) for dQ_i (!kv),
 * each running its live tile pairs along the other axis, in parallel.
 * Returns 1 when a tile failed, else 0. */
static int backward_pass(const attn_ctx *c, const bwd_args *a, scratch *ws, int nt, int64_t ni,
                         int64_t nj, bool kv) {
    const dl_attn_params *p = c->p;
    const int64_t n = kv ? nj : ni, m = kv ? ni : nj; /* tasks per entry, pairs per task */
    int failed = 0;
#pragma omp parallel for num_threads(nt) schedule(dynamic)
    for (int64_t e = 0; e < p->B * n; e++) {
        scratch *w = &ws[thread_id()];
        int64_t b = e / n, t = e % n;
        for (int64_t u = 0; u < m; u++) {
            int64_t i = kv ? u : t, j = kv ? t : u;
            if (!tile_live(p, i * BR, j * BC)) continue;
            if (backward_tile(c, a, b, i * BR, j * BC, kv, !kv, w)) {
#pragma omp atomic write
                failed = 1;
            }
        }
    }
    return failed;
}

static int backward_any(dl_dtype dt, void *dq, void *dk, void *dv, const void *gout, const void *q,
                        const void *k, const void *v, const void *out, const void *lse,
                        const dl_attn_params *p) {
    const attn_ctx c = ctx_of(dt, p);
    const int64_t B = p->B, L = p->L, S = p->S;
    memset(dq, 0, (size_t)(B * L * p->E) * c.isz);
    memset(dk, 0, (size_t)(B * S * p->E) * c.isz);
    memset(dv, 0, (size_t)(B * S * p->Ev) * c.isz);
    if (B * L == 0 || S == 0) return 0;
    int nt = dl_get_num_threads();
    if (nt < 1) nt = 1;
    scratch ws[nt];
    size_t bytes, dbytes = (size_t)(B * L) * c.isz;
    void *D = dl_cpu_alloc(dbytes);
    if (!D) return dl_error("scaled_dot_product_attention_backward: out of memory");
    void *blk = scratch_new(&c, nt, ws, &bytes);
    if (!blk) {
        dl_cpu_free(D, dbytes);
        return -1;
    }
    rowdots(&c, D, gout, out, nt);
    const bwd_args a = {dq, dk, dv, gout, q, k, v, lse, D};
    const int64_t ni = (L + BR - 1) / BR, nj = (S + BC - 1) / BC;
    int failed = 0;
    if (one_pass(B, nt)) {
#pragma omp parallel for num_threads(nt) schedule(dynamic) if (B > 1)
        for (int64_t b = 0; b < B; b++) {
            scratch *w = &ws[thread_id()];
            for (int64_t j = 0; j < nj; j++)
                for (int64_t i = 0; i < ni; i++) {
                    if (!tile_live(p, i * BR, j * BC)) continue;
                    if (backward_tile(&c, &a, b, i * BR, j * BC, true, true, w)) {
#pragma omp atomic write
                        failed = 1;
                    }
                }
        }
    } else { /* dK and dV first, then dQ */
        failed = backward_pass(&c, &a, ws, nt, ni, nj, true);
        if (backward_pass(&c, &a, ws, nt, ni, nj, false)) failed = 1;
    }
    dl_cpu_free(blk, bytes);
    dl_cpu_free(D, dbytes);
    if (failed)
        return dl_error("scaled_dot_product_attention_backward: a tile's matrix product failed");
    return 0;
}

int dl_cpu_attention_backward_f32(float *dq, float *dk, float *dv, const float *gout,
                                  const float *q, const float *k, const float *v, const float *out,
                                  const float *lse, const dl_attn_params *p) {
    return backward_any(DL_DTYPE_F32, dq, dk, dv, gout, q, k, v, out, lse, p);
}

int dl_cpu_attention_backward_f64(double *dq, double *dk, double *dv, const double *gout,
                                  const double *q, const double *k, const double *v,
                                  const double *out, const double *lse, const dl_attn_params *p) {
    return backward_any(DL_DTYPE_F64, dq, dk, dv, gout, q, k, v, out, lse, p);
}
