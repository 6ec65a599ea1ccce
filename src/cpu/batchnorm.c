/* batchnorm.c - CPU batch-normalization kernels (see batchnorm.h).
 *
 * (N,C,S) input: both dtypes run OpenMP loops parallel over channels (a
 * channel is written by one thread only).  Channels-last (N,S,C) input runs
 * the same formulas along rows of channels (see "channels-last: tiles").
 *
 * float32: per channel, sums in double over 16 lanes (vectorised; clones for
 * AVX-512, Haswell's AVX2 + FMA and baseline x86-64, built without implicit
 * FMA contraction so they round alike): the training forward takes the sums
 * of x - x0 and its square (x0 the channel's first element) in one pass and
 * stores mean and biased variance as float.
 * y = fmaf(x, a, b) with a = w / sqrt(var + eps) and b = bias - mean * a
 * rounded to float: PyTorch's vectorised CPU formula, so the roundings (and
 * the ReLU boundaries after them) fall as PyTorch's do; the golden ResNet-50
 * test shows it (y = (x - mean) * a + bias lands at 2.4x PyTorch's error).  The
 * backward takes sum(gy) and sum(gy * (x - mean)) in double, then
 *   gx = (gy - mean(gy) - (x - mean) * k) * w * invstd,
 *   k = mean(gy * (x - mean)) * invstd^2                       (training)
 *   gx = gy * w * invstd                                       (evaluation)
 * in float, as PyTorch.
 *
 * float64: statistics in two passes (mean, then the sum of squared
 * deviations), the backward as PyTorch's:
 *   gx = w*invstd * (gy - mean(gy) - xhat * mean(gy * xhat))   (training)
 *   gx = w*invstd * gy                                        (evaluation)
 *   gw = sum(gy * xhat), gb = sum(gy).
 *
 * The fused ReLU (batch_norm_relu, batch_norm_add_relu; dl_bn_act): float32
 * runs it inside the same passes, so the fused ops cost a pass less than
 * batch norm, add and relu one by one and round the same way (the results
 * are bit-equal): the forward's last pass adds the residual, applies the ReLU
 * and writes the mask, 32 elements (one word) at a time; the backward's sums
 * and its last pass read gy through the mask, and the last pass writes the
 * residual's gradient beside gx.  float64 runs a separate pass after the
 * forward and before the backward. */
#include "batchnorm.h"
#include "core/error.h"
#include "core/parallel.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* --- float32: loops ---------------------------------------------------------------- */

/* Channel c's rows: x + n*C*S + c*S for n < N, each S floats long.  A
 * channel's N*S floats (at most a few hundred KB in a ResNet) stay in the
 * core's cache between the passes over it, so the passes cost one read from
 * memory, not three.  Sums run in double over NACC independent lanes (the
 * compiler turns the lane array into vector registers) and are added lane by
 * lane at the end: the order is written out, so every clone gives the same
 * sums. */
#define NACC 16

/* sum over the channel of x, and of (x - m)^2 */
DL_CPU_CLONES
static void f32_moments(const dl_bn_shape *s, const float *x, double m, double *sum, double *sq) {
    double a[NACC] = {0}, b[NACC] = {0};
    double ta = 0, tb = 0;
    for (int64_t n = 0; n < s->N; n++) {
        const float *r = x + n * s->C * s->S;
        int64_t i = 0;
        for (; i + NACC <= s->S; i += NACC)
            for (int j = 0; j < NACC; j++) {
                double d = (double)r[i + j] - m;
                a[j] += d;
                b[j] += d * d;
            }
        for (; i < s->S; i++) {
            double d = (double)r[i] - m;
            ta += d;
            tb += d * d;
        }
    }
    for (int j = 0; j < NACC; j++) {
        ta += a[j];
        tb += b[j];
    }
    *sum = ta;
    *sq = tb;
}

/* the mask bit of element i of a unit whose words start at w */
static inline uint32_t bit_of(const uint32_t *w, int64_t i) {
    return (w[i >> 5] >> (i & 31)) & 1u;
}

/* g where bit (0 or 1) is set, else +0: a bitwise and, as the ReLU's sign is
 * data and a branch on it would mispredict half the time */
static inline float masked(float g, uint32_t bit) {
    uint32_t u;
    memcpy(&u, &g, sizeof u);
    u &= 0u - bit;
    memcpy(&g, &u, sizeof g);
    return g;
}

/* sum over the channel of gz, and of gz * (x - m): gz = gy, or with the fused
 * ReLU's mask mk (channel c's first word; see f32_affine_relu)
 * gz = (mask ? gy : 0) */
DL_CPU_CLONES
static void f32_grad_sums(const dl_bn_shape *s, const float *gy, const float *x, const uint32_t *mk,
                          double m, double *sdy, double *sdyx) {
    double a[NACC] = {0}, b[NACC] = {0};
    double ta = 0, tb = 0;
    int64_t W = (s->S + 31) / 32;
    for (int64_t n = 0; n < s->N; n++) {
        const float *g = gy + n * s->C * s->S, *r = x + n * s->C * s->S;
        const uint32_t *mr = mk ? mk + n * s->C * W : NULL;
        int64_t i = 0;
        for (; i + NACC <= s->S; i += NACC) {
            float gz[NACC];
            if (mr) {
                /* NACC divides 32: the block's bits are in one word */
                uint32_t w = mr[i >> 5] >> (i & 31);
                for (int j = 0; j < NACC; j++) gz[j] = masked(g[i + j], (w >> j) & 1u);
            } else {
                for (int j = 0; j < NACC; j++) gz[j] = g[i + j];
            }
            for (int j = 0; j < NACC; j++) {
                double d = (double)gz[j];
                a[j] += d;
                b[j] += d * ((double)r[i + j] - m);
            }
        }
        for (; i < s->S; i++) {
            double d = (double)masked(g[i], mr ? bit_of(mr, i) : 1u);
            ta += d;
            tb += d * ((double)r[i] - m);
        }
    }
    for (int j = 0; j < NACC; j++) {
        ta += a[j];
        tb += b[j];
    }
    *sdy = ta;
    *sdyx = tb;
}

/* y = x * a + b over the channel, one rounding (PyTorch's) */
DL_CPU_CLONES
static void f32_affine(const dl_bn_shape *s, float *y, const float *x, float a, float b) {
    for (int64_t n = 0; n < s->N; n++) {
        const float *r = x + n * s->C * s->S;
        float *o = y + n * s->C * s->S;
        for (int64_t i = 0; i < s->S; i++) o[i] = fmaf(r[i], a, b);
    }
}

/* gx = (gy - mdy - (x - m) * k) * a over the channel, in float */
DL_CPU_CLONES
static void f32_grad_input(const dl_bn_shape *s, float *gx, const float *gy, const float *x,
                           float m, float mdy, float k, float a) {
    for (int64_t n = 0; n < s->N; n++) {
        const float *g = gy + n * s->C * s->S, *r = x + n * s->C * s->S;
        float *o = gx + n * s->C * s->S;
        for (int64_t i = 0; i < s->S; i++) o[i] = (g[i] - mdy - (r[i] - m) * k) * a;
    }
}

/* --- float32: the fused ReLU's loops ------------------------------------------------
 * A channel's N planes are N units of the mask (kernels/batchnorm.h): plane n
 * of channel c is unit n*C + c, its W = ceil(S/32) words at m + n*C*W when m
 * points at channel c's first.  The loops run 32 elements (one word) at a
 * time and round exactly as the unfused ops: y = fmaf(x, a, b), then + r,
 * then the ReLU. */

/* y = relu(fmaf(x, a, b) + r) over the channel (r may be NULL), its mask
 * into m (may be NULL) */
DL_CPU_CLONES
static void f32_affine_relu(const dl_bn_shape *s, float *y, const float *x, float a, float b,
                            const float *r, uint32_t *m) {
    int64_t W = (s->S + 31) / 32;
    for (int64_t n = 0; n < s->N; n++) {
        int64_t off = n * s->C * s->S;
        const float *xr = x + off, *rr = r ? r + off : NULL;
        float *o = y + off;
        for (int64_t w = 0; w < W; w++) {
            int64_t i0 = w * 32, len = s->S - i0 < 32 ? s->S - i0 : 32;
            float v[32];
            for (int64_t j = 0; j < len; j++) v[j] = fmaf(xr[i0 + j], a, b);
            if (rr)
                for (int64_t j = 0; j < len; j++) v[j] += rr[i0 + j];
            uint32_t bits = 0;
            for (int64_t j = 0; j < len; j++) {
                bits |= (uint32_t) !(v[j] <= 0.0f) << j;
                o[i0 + j] = v[j] < 0.0f ? 0.0f : v[j];
            }
            if (m) m[n * s->C * W + w] = bits;
        }
    }
}

/* gz = (mask ? gy : 0) over the channel into gr (may be NULL), and gx (may
 * be NULL) = (gz - mdy - (x - m) * k) * a (training) or fmaf(gz, a, 0) */
DL_CPU_CLONES
static void f32_grad_input_relu(const dl_bn_shape *s, bool training, float *gx, float *gr,
                                const float *gy, const float *x, const uint32_t *mk, float m,
                                float mdy, float k, float a) {
    int64_t W = (s->S + 31) / 32;
    for (int64_t n = 0; n < s->N; n++) {
        int64_t off = n * s->C * s->S;
        const float *g = gy + off, *r = x + off;
        const uint32_t *mr = mk + n * s->C * W;
        for (int64_t w = 0; w < W; w++) {
            int64_t i0 = w * 32, len = s->S - i0 < 32 ? s->S - i0 : 32;
            uint32_t bits = mr[w];
            float gz[32];
            for (int64_t j = 0; j < len; j++) gz[j] = masked(g[i0 + j], (bits >> j) & 1u);
            if (gr)
                for (int64_t j = 0; j < len; j++) gr[off + i0 + j] = gz[j];
            if (gx && training)
                for (int64_t j = 0; j < len; j++)
                    gx[off + i0 + j] = (gz[j] - mdy - (r[i0 + j] - m) * k) * a;
            else if (gx)
                for (int64_t j = 0; j < len; j++) gx[off + i0 + j] = fmaf(gz[j], a, 0.0f);
        }
    }
}

/* Training statistics of a channel from the sums of d = x - x0 and d^2 over
 * its M elements (shifted by x0, one of them): in double the cancellation
 * stays below float resolution unless x0 lies some 10^4 standard deviations
 * from the mean. */
static void f32_stats(double sum, double sq, double x0, double M, double *m, double *v) {
    *m = x0 + sum / M;
    *v = (sq - sum * sum / M) / M;
    if (*v < 0) *v = 0;
}

/* The channel's y = x * a + sh coefficients (PyTorch's, rounded to float). */
static void f32_coeffs(double m, double v, double eps, double wc, double bc, float *a, float *sh) {
    *a = (float)(wc / sqrt(v + eps));
    *sh = (float)(bc - m * (double)*a);
}

static int forward_f32(const dl_bn_shape *s, double eps, bool training, float *y, float *mean,
                       float *var, const float *x, const float *w, const float *b,
                       const dl_bn_act *act) {
    double M = (double)(s->N * s->S);
    int64_t W = (s->S + 31) / 32; /* the ReLU mask's words per unit */
#pragma omp parallel for num_threads(dl_get_num_threads()) if (s->N * s->S * s->C >=               \
                                                               DL_PARALLEL_GRAIN)
    for (int64_t c = 0; c < s->C; c++) {
        const float *xc = x + c * s->S;
        double m, v;
        if (training) {
            /* one pass, shifted by the channel's first element */
            double sum, sq, x0 = xc[0];
            f32_moments(s, xc, x0, &sum, &sq);
            f32_stats(sum, sq, x0, M, &m, &v);
            mean[c] = (float)m;
            var[c] = (float)v;
        } else {
            m = mean[c];
            v = var[c];
        }
        float a, sh;
        f32_coeffs(m, v, eps, w ? w[c] : 1.0, b ? b[c] : 0.0, &a, &sh);
        if (act)
            f32_affine_relu(s, y + c * s->S, xc, a, sh,
                            act->res ? (const float *)act->res + c * s->S : NULL,
                            act->mask ? (uint32_t *)act->mask + c * W : NULL);
        else
            f32_affine(s, y + c * s->S, xc, a, sh);
    }
    return 0;
}

/* The channel's gx coefficients from the sums of gy and gy * (x - m) over
 * its M elements, in float as PyTorch: q = {m, mean(gy), k, a} of
 * gx = (gy - mean(gy) - (x - m) * k) * a. */
static void f32_grad_coeffs(double m, double invstd, double wc, double sdy, double sdyx, double M,
                            float q[4]) {
    q[0] = (float)m;
    q[1] = (float)(sdy / M);
    q[2] = (float)(sdyx / M * invstd * invstd);
    q[3] = (float)(invstd * wc);
}

static int backward_f32(const dl_bn_shape *s, double eps, bool training, float *gx, float *gw,
                        float *gb, const float *gy, const float *x, const float *mean,
                        const float *var, const float *w, const dl_bn_act *act) {
    double M = (double)(s->N * s->S);
    int64_t W = (s->S + 31) / 32;
    float *gr = act ? (float *)act->gres : NULL;
#pragma omp parallel for num_threads(dl_get_num_threads()) if (s->N * s->S * s->C >=               \
                                                               DL_PARALLEL_GRAIN)
    for (int64_t c = 0; c < s->C; c++) {
        double m = mean[c], invstd = 1.0 / sqrt((double)var[c] + eps), sdy, sdyx;
        int64_t off = c * s->S;
        const uint32_t *mk = act ? (const uint32_t *)act->mask + c * W : NULL;
        f32_grad_sums(s, gy + off, x + off, mk, m, &sdy, &sdyx);
        if (gb) gb[c] = (float)sdy;
        if (gw) gw[c] = (float)(sdyx * invstd);
        if (!gx && !gr) continue;
        float q[4];
        f32_grad_coeffs(m, invstd, w ? w[c] : 1.0, sdy, sdyx, M, q);
        if (mk)
            f32_grad_input_relu(s, training, gx ? gx + off : NULL, gr ? gr + off : NULL, gy + off,
                                x + off, mk, q[0], q[1], q[2], q[3]);
        else if (training)
            f32_grad_input(s, gx + off, gy + off, x + off, q[0], q[1], q[2], q[3]);
        else
            f32_affine(s, gx + off, gy + off, q[3], 0.0f); /* gy * a */
    }
    return 0;
}

/* --- float64: loops ---------------------------------------------------------------- */

static int forward_f64(const dl_bn_shape *s, double eps, bool training, double *y, double *mean,
                       double *var, const double *x, const double *w, const double *b) {
    int64_t M = s->N * s->S, CS = s->C * s->S;
#pragma omp parallel for num_threads(dl_get_num_threads()) if (M * s->C >= DL_PARALLEL_GRAIN)
    for (int64_t c = 0; c < s->C; c++) {
        double m, v;
        if (training) {
            double sum = 0, sq = 0;
            for (int64_t n = 0; n < s->N; n++)
                for (int64_t i = 0; i < s->S; i++) sum += x[n * CS + c * s->S + i];
            m = sum / (double)M;
            for (int64_t n = 0; n < s->N; n++)
                for (int64_t i = 0; i < s->S; i++) {
                    double d = x[n * CS + c * s->S + i] - m;
                    sq += d * d;
                }
            v = sq / (double)M;
            mean[c] = m;
            var[c] = v;
        } else {
            m = mean[c];
            v = var[c];
        }
        double scale = (w ? w[c] : 1.0) / sqrt(v + eps), shift = b ? b[c] : 0.0;
        for (int64_t n = 0; n < s->N; n++)
            for (int64_t i = 0; i < s->S; i++) {
                int64_t k = n * CS + c * s->S + i;
                y[k] = (x[k] - m) * scale + shift;
            }
    }
    return 0;
}

static int backward_f64(const dl_bn_shape *s, double eps, bool training, double *gx, double *gw,
                        double *gb, const double *gy, const double *x, const double *mean,
                        const double *var, const double *w) {
    int64_t M = s->N * s->S, CS = s->C * s->S;
#pragma omp parallel for num_threads(dl_get_num_threads()) if (M * s->C >= DL_PARALLEL_GRAIN)
    for (int64_t c = 0; c < s->C; c++) {
        double m = mean[c], invstd = 1.0 / sqrt(var[c] + eps), sum_dy = 0, sum_dy_xmu = 0;
        for (int64_t n = 0; n < s->N; n++)
            for (int64_t i = 0; i < s->S; i++) {
                int64_t k = n * CS + c * s->S + i;
                sum_dy += gy[k];
                sum_dy_xmu += gy[k] * (x[k] - m);
            }
        if (gb) gb[c] = sum_dy;
        if (gw) gw[c] = sum_dy_xmu * invstd;
        if (!gx) continue;
        double wc = w ? w[c] : 1.0;
        if (training) {
            /* gy - mean(gy) - (x - m) * invstd^2 * mean(gy * (x - m)) */
            double mdy = sum_dy / (double)M, k2 = sum_dy_xmu / (double)M * invstd * invstd;
            for (int64_t n = 0; n < s->N; n++)
                for (int64_t i = 0; i < s->S; i++) {
                    int64_t k = n * CS + c * s->S + i;
                    gx[k] = (gy[k] - mdy - (x[k] - m) * k2) * invstd * wc;
                }
        } else {
            for (int64_t n = 0; n < s->N; n++)
                for (int64_t i = 0; i < s->S; i++) {
                    int64_t k = n * CS + c * s->S + i;
                    gx[k] = gy[k] * invstd * wc;
                }
        }
    }
    return 0;
}

/* --- channels-last: tiles --------------------------------------------------------- */

/* Here x, y, gy and gx are (N,S,C): R = N*S rows of C contiguous channels.
 * The loops run along a row, so they vectorise across channels with one
 * double accumulator per channel.  A reduction splits the (R x C) plane into
 * tiles of CL_CBLK channels (their 16 KB of accumulators stay in L1) by one of K
 * chunks of rows, with K set by the shape alone (about CL_TILES tiles, never
 * the thread count).  A tile sums its rows in order into its chunk's partial
 * sums, and the partials are then added chunk after chunk: each channel's
 * sum has one order whatever the number of threads and their timing.  That
 * order is not the (N,C,S) kernels' 16 lanes, so the double sums may differ
 * in their last bits and a float result that follows from them (statistics,
 * training y and gx, gw, gb) by an ulp; with fixed statistics (evaluation) y
 * and gx are bit-equal to the (N,C,S) path's. */
#define CL_CBLK 1024
#define CL_TILES 16

typedef struct cl_plan {
    int64_t R, C, K, B; /* rows, channels, row chunks, channel blocks */
} cl_plan;

static cl_plan cl_plan_of(const dl_bn_shape *s) {
    cl_plan p = {s->N * s->S, s->C, 1, (s->C + CL_CBLK - 1) / CL_CBLK};
    p.K = CL_TILES / (p.B > 0 ? p.B : 1);
    if (p.K > p.R) p.K = p.R;
    if (p.K < 1) p.K = 1;
    return p;
}

/* What a tile sums (into a, b) or a map writes, per element */
typedef enum cl_kind {
    CL_F32_MOMENTS,     /* a += x - m, b += (x - m)^2 (m: x0, the shift) */
    CL_F32_GRAD_SUMS,   /* a += gy, b += gy * (x - m) (gy masked by mk when set) */
    CL_F64_SUM,         /* a += x */
    CL_F64_SQDEV,       /* b += (x - m)^2 */
    CL_F64_GRAD_SUMS,   /* a += gy, b += gy * (x - m) */
    CL_F32_AFFINE,      /* out = fmaf(x, q0, q1) */
    CL_F32_GRAD_IN,     /* out = (gy - q1 - (x - q0) * q2) * q3 */
    CL_F64_AFFINE,      /* out = (x - q0) * q1 + q2 */
    CL_F64_GRAD_IN,     /* out = (gy - q1 - (x - q0) * q2) * q3 * q4 */
    CL_F64_GRAD_EVAL,   /* out = gy * q3 * q4 */
    CL_F32_AFFINE_RELU, /* out = relu(fmaf(x, q0, q1) + res), mask into mko */
    CL_F32_GRAD_RELU    /* gz = mk ? gy : 0 into out2, out = gx of CL_F32_GRAD_IN or
                           fmaf(gz, q3, 0) (evaluation) from gz */
} cl_kind;

typedef struct cl_job {
    cl_kind kind;
    const void *x, *gy; /* (R,C) */
    void *out;          /* (R,C), maps only */
    const double *m;    /* (C), sums only */
    const void *q[5];   /* (C) each, maps only: float for F32, double for F64 */
    /* the fused ReLU: the residual and its gradient (R,C), NULL when absent;
     * the mask's words, read (mk) or written (mko), W per row */
    const float *res;
    float *out2;
    const uint32_t *mk;
    uint32_t *mko;
    bool training;
} cl_job;

/* float32 sums over rows of a tile: n channels, rows ld apart */
DL_CPU_CLONES
static void f32_moments_cl(int64_t ld, int64_t rows, int64_t n, const float *restrict x,
                           const double *restrict m, double *restrict a, double *restrict b) {
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < n; j++) {
            double d = (double)x[r * ld + j] - m[j];
            a[j] += d;
            b[j] += d * d;
        }
}

DL_CPU_CLONES
static void f32_grad_sums_cl(int64_t ld, int64_t rows, int64_t n, const float *restrict gy,
                             const float *restrict x, const double *restrict m, double *restrict a,
                             double *restrict b) {
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < n; j++) {
            double g = (double)gy[r * ld + j];
            a[j] += g;
            b[j] += g * ((double)x[r * ld + j] - m[j]);
        }
}

/* float32 maps over whole rows */
DL_CPU_CLONES
static void f32_affine_cl(int64_t C, int64_t rows, float *restrict y, const float *restrict x,
                          const float *restrict a, const float *restrict b) {
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < C; c++) y[r * C + c] = fmaf(x[r * C + c], a[c], b[c]);
}

DL_CPU_CLONES
static void f32_grad_input_cl(int64_t C, int64_t rows, float *restrict gx, const float *restrict gy,
                              const float *restrict x, const float *restrict m,
                              const float *restrict mdy, const float *restrict k,
                              const float *restrict a) {
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < C; c++) {
            int64_t i = r * C + c;
            gx[i] = (gy[i] - mdy[c] - (x[i] - m[c]) * k[c]) * a[c];
        }
}

/* The fused ReLU along rows: row r is unit r of the mask, its W = ceil(C/32)
 * words at mk + r*W; the loops take 32 channels (one word) at a time. */

/* CL_F32_GRAD_SUMS under a mask, for a tile of n channels starting at a word
 * (mk: the tile's first row's first word) */
DL_CPU_CLONES
static void f32_grad_sums_relu_cl(int64_t ld, int64_t W, int64_t rows, int64_t n,
                                  const float *restrict gy, const float *restrict x,
                                  const uint32_t *restrict mk, const double *restrict m,
                                  double *restrict a, double *restrict b) {
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j0 = 0; j0 < n; j0 += 32) {
            uint32_t w = mk[r * W + j0 / 32];
            int64_t len = n - j0 < 32 ? n - j0 : 32;
            for (int64_t jj = 0; jj < len; jj++) {
                int64_t j = j0 + jj;
                double g = (double)masked(gy[r * ld + j], (w >> jj) & 1u);
                a[j] += g;
                b[j] += g * ((double)x[r * ld + j] - m[j]);
            }
        }
}

/* CL_F32_AFFINE_RELU over whole rows (res, mk may be NULL) */
DL_CPU_CLONES
static void f32_affine_relu_cl(int64_t C, int64_t rows, float *restrict y, const float *restrict x,
                               const float *restrict a, const float *restrict b,
                               const float *restrict res, uint32_t *restrict mk) {
    int64_t W = (C + 31) / 32;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t w = 0; w < W; w++) {
            int64_t c0 = w * 32, len = C - c0 < 32 ? C - c0 : 32;
            const float *xr = x + r * C + c0;
            float v[32];
            for (int64_t j = 0; j < len; j++) v[j] = fmaf(xr[j], a[c0 + j], b[c0 + j]);
            if (res)
                for (int64_t j = 0; j < len; j++) v[j] += res[r * C + c0 + j];
            uint32_t bits = 0;
            for (int64_t j = 0; j < len; j++) {
                bits |= (uint32_t) !(v[j] <= 0.0f) << j;
                y[r * C + c0 + j] = v[j] < 0.0f ? 0.0f : v[j];
            }
            if (mk) mk[r * W + w] = bits;
        }
}

/* CL_F32_GRAD_RELU over whole rows (gx, gr may be NULL) */
DL_CPU_CLONES
static void f32_grad_input_relu_cl(int64_t C, int64_t rows, bool training, float *restrict gx,
                                   float *restrict gr, const float *restrict gy,
                                   const float *restrict x, const uint32_t *restrict mk,
                                   const float *restrict m, const float *restrict mdy,
                                   const float *restrict k, const float *restrict a) {
    int64_t W = (C + 31) / 32;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t w = 0; w < W; w++) {
            int64_t c0 = w * 32, len = C - c0 < 32 ? C - c0 : 32;
            uint32_t bits = mk[r * W + w];
            const float *g = gy + r * C + c0, *xr = x + r * C + c0;
            float gz[32];
            for (int64_t j = 0; j < len; j++) gz[j] = masked(g[j], (bits >> j) & 1u);
            if (gr)
                for (int64_t j = 0; j < len; j++) gr[r * C + c0 + j] = gz[j];
            if (gx && training)
                for (int64_t j = 0; j < len; j++) {
                    int64_t c = c0 + j;
                    gx[r * C + c] = (gz[j] - mdy[c] - (xr[j] - m[c]) * k[c]) * a[c];
                }
            else if (gx)
                for (int64_t j = 0; j < len; j++) gx[r * C + c0 + j] = fmaf(gz[j], a[c0 + j], 0.0f);
        }
}

/* Sums of the job over rows [r0, r1) and channels [c0, c1) into a, b
 * (zeroed here), a and b pointing at channel c0. */
static void cl_sum_tile(const cl_job *j, int64_t C, int64_t r0, int64_t r1, int64_t c0, int64_t c1,
                        double *a, double *b) {
    int64_t n = c1 - c0, rows = r1 - r0, off = r0 * C + c0;
    for (int64_t i = 0; i < n; i++) a[i] = b[i] = 0;
    const double *m = j->m + c0;
    const float *xf = (const float *)j->x + off, *gf = (const float *)j->gy + off;
    const double *xd = (const double *)j->x + off, *gd = (const double *)j->gy + off;
    switch (j->kind) {
    case CL_F32_MOMENTS: f32_moments_cl(C, rows, n, xf, m, a, b); break;
    case CL_F32_GRAD_SUMS:
        if (j->mk) {
            int64_t W = (C + 31) / 32; /* c0 is a multiple of CL_CBLK, so of 32 */
            f32_grad_sums_relu_cl(C, W, rows, n, gf, xf, j->mk + r0 * W + c0 / 32, m, a, b);
        } else {
            f32_grad_sums_cl(C, rows, n, gf, xf, m, a, b);
        }
        break;
    case CL_F64_SUM:
        for (int64_t r = 0; r < rows; r++)
            for (int64_t i = 0; i < n; i++) a[i] += xd[r * C + i];
        break;
    case CL_F64_SQDEV:
        for (int64_t r = 0; r < rows; r++)
            for (int64_t i = 0; i < n; i++) {
                double d = xd[r * C + i] - m[i];
                b[i] += d * d;
            }
        break;
    case CL_F64_GRAD_SUMS:
        for (int64_t r = 0; r < rows; r++)
            for (int64_t i = 0; i < n; i++) {
                double g = gd[r * C + i];
                a[i] += g;
                b[i] += g * (xd[r * C + i] - m[i]);
            }
        break;
    default: break;
    }
}

/* sa, sb (C) = the job's sums over all rows, from the partials in part
 * (2*K*C doubles). */
static void cl_reduce(const cl_job *j, const cl_plan *p, double *part, double *sa, double *sb) {
    int64_t C = p->C, K = p->K, B = p->B;
#pragma omp parallel num_threads(dl_get_num_threads()) if (p->R * C >= DL_PARALLEL_GRAIN)
    {
#pragma omp for schedule(static)
        for (int64_t t = 0; t < K * B; t++) {
            int64_t k = t / B, c0 = t % B * CL_CBLK, c1 = c0 + CL_CBLK < C ? c0 + CL_CBLK : C;
            double *a = part + 2 * k * C;
            cl_sum_tile(j, C, p->R * k / K, p->R * (k + 1) / K, c0, c1, a + c0, a + C + c0);
        }
#pragma omp for schedule(static)
        for (int64_t c = 0; c < C; c++) {
            double a = 0, b = 0;
            for (int64_t k = 0; k < K; k++) {
                a += part[2 * k * C + c];
                b += part[(2 * k + 1) * C + c];
            }
            sa[c] = a;
            sb[c] = b;
        }
    }
}

/* The job's map over rows [r0, r1) */
static void cl_map_rows(const cl_job *j, int64_t C, int64_t r0, int64_t r1) {
    int64_t rows = r1 - r0, off = r0 * C;
    const float *const *qf = (const float *const *)j->q;
    const double *const *qd = (const double *const *)j->q;
    switch (j->kind) {
    case CL_F32_AFFINE:
        f32_affine_cl(C, rows, (float *)j->out + off, (const float *)j->x + off, qf[0], qf[1]);
        break;
    case CL_F32_GRAD_IN:
        f32_grad_input_cl(C, rows, (float *)j->out + off, (const float *)j->gy + off,
                          (const float *)j->x + off, qf[0], qf[1], qf[2], qf[3]);
        break;
    case CL_F32_AFFINE_RELU: {
        int64_t W = (C + 31) / 32;
        f32_affine_relu_cl(C, rows, (float *)j->out + off, (const float *)j->x + off, qf[0], qf[1],
                           j->res ? j->res + off : NULL, j->mko ? j->mko + r0 * W : NULL);
        break;
    }
    case CL_F32_GRAD_RELU: {
        int64_t W = (C + 31) / 32;
        f32_grad_input_relu_cl(C, rows, j->training, j->out ? (float *)j->out + off : NULL,
                               j->out2 ? j->out2 + off : NULL, (const float *)j->gy + off,
                               (const float *)j->x + off, j->mk + r0 * W, qf[0], qf[1], qf[2],
                               qf[3]);
        break;
    }
    case CL_F64_AFFINE: {
        double *y = (double *)j->out + off;
        const double *x = (const double *)j->x + off;
        for (int64_t r = 0; r < rows; r++)
            for (int64_t c = 0; c < C; c++)
                y[r * C + c] = (x[r * C + c] - qd[0][c]) * qd[1][c] + qd[2][c];
        break;
    }
    case CL_F64_GRAD_IN:
    case CL_F64_GRAD_EVAL: {
        double *gx = (double *)j->out + off;
        const double *gy = (const double *)j->gy + off, *x = (const double *)j->x + off;
        bool train = j->kind == CL_F64_GRAD_IN;
        for (int64_t r = 0; r < rows; r++)
            for (int64_t c = 0; c < C; c++) {
                int64_t i = r * C + c;
                gx[i] =
                    train ? (gy[i] - qd[1][c] - (x[i] - qd[0][c]) * qd[2][c]) * qd[3][c] * qd[4][c]
                          : gy[i] * qd[3][c] * qd[4][c];
            }
        break;
    }
    default: break;
    }
}

static void cl_map(const cl_job *j, const cl_plan *p) {
    int64_t nb = p->R < 4 * CL_TILES ? p->R : 4 * CL_TILES;
#pragma omp parallel for num_threads(dl_get_num_threads())                                         \
    schedule(static) if (p->R * p->C >= DL_PARALLEL_GRAIN)
    for (int64_t k = 0; k < nb; k++) cl_map_rows(j, p->C, p->R * k / nb, p->R * (k + 1) / nb);
}

/* A channels-last kernel's plan and scratch: 8 (C) vectors of doubles, then
 * the reduction's 2*K*C partial sums. */
typedef struct cl_run {
    cl_plan p;
    double M; /* rows, the count each channel's statistics run over */
    double *buf, *part;
} cl_run;

static int cl_open(const char *op, const dl_bn_shape *s, cl_run *k) {
    k->p = cl_plan_of(s);
    k->M = (double)k->p.R;
    k->buf = malloc(sizeof(double) * (size_t)((8 + 2 * k->p.K) * k->p.C));
    if (!k->buf)
        return dl_error("%s: out of memory for %lld channels' partial sums", op, (long long)s->C);
    k->part = k->buf + 8 * k->p.C;
    return 0;
}

/* Runs the final map e (if any) and frees the scratch. */
static int cl_close(cl_run *k, const cl_job *e) {
    if (e) cl_map(e, &k->p);
    free(k->buf);
    return 0;
}

/* --- channels-last: kernels -------------------------------------------------------- */

static int forward_f32_cl(const dl_bn_shape *s, double eps, bool training, float *y, float *mean,
                          float *var, const float *x, const float *w, const float *b,
                          const dl_bn_act *act) {
    cl_run k;
    if (cl_open("batch_norm", s, &k)) return -1;
    int64_t C = s->C;
    double *buf = k.buf, M = k.M;
    double *x0 = buf, *sa = buf + C, *sb = buf + 2 * C;
    float *a = (float *)(buf + 3 * C), *sh = (float *)(buf + 4 * C);
    if (training) {
        /* shifted by each channel's first element, as the (N,C,S) path */
        for (int64_t c = 0; c < C; c++) x0[c] = x[c];
        cl_job j = {.kind = CL_F32_MOMENTS, .x = x, .m = x0};
        cl_reduce(&j, &k.p, k.part, sa, sb);
    }
    for (int64_t c = 0; c < C; c++) {
        double m, v;
        if (training) {
            f32_stats(sa[c], sb[c], x0[c], M, &m, &v);
            mean[c] = (float)m;
            var[c] = (float)v;
        } else {
            m = mean[c];
            v = var[c];
        }
        f32_coeffs(m, v, eps, w ? w[c] : 1.0, b ? b[c] : 0.0, &a[c], &sh[c]);
    }
    cl_job e = {.kind = CL_F32_AFFINE, .x = x, .out = y, .q = {a, sh}};
    if (act) {
        e.kind = CL_F32_AFFINE_RELU;
        e.res = act->res;
        e.mko = act->mask;
    }
    return cl_close(&k, &e);
}

static int backward_f32_cl(const dl_bn_shape *s, double eps, bool training, float *gx, float *gw,
                           float *gb, const float *gy, const float *x, const float *mean,
                           const float *var, const float *w, const dl_bn_act *act) {
    cl_run k;
    if (cl_open("batch_norm_backward", s, &k)) return -1;
    int64_t C = s->C;
    double *buf = k.buf, M = k.M;
    double *md = buf, *sa = buf + C, *sb = buf + 2 * C;
    float *q[4], *zero = (float *)(buf + 7 * C);
    for (int i = 0; i < 4; i++) q[i] = (float *)(buf + (3 + i) * C);
    /* evaluation's gx alone needs no sums */
    bool sums = training || gw || gb;
    for (int64_t c = 0; c < C; c++) {
        md[c] = mean[c];
        sa[c] = sb[c] = 0;
        zero[c] = 0.0f;
    }
    if (sums) {
        cl_job j = {.kind = CL_F32_GRAD_SUMS, .x = x, .gy = gy, .m = md};
        if (act) j.mk = act->mask;
        cl_reduce(&j, &k.p, k.part, sa, sb);
    }
    for (int64_t c = 0; c < C; c++) {
        double invstd = 1.0 / sqrt((double)var[c] + eps);
        if (gb) gb[c] = (float)sa[c];
        if (gw) gw[c] = (float)(sb[c] * invstd);
        float qc[4];
        f32_grad_coeffs(md[c], invstd, w ? w[c] : 1.0, sa[c], sb[c], M, qc);
        for (int i = 0; i < 4; i++) q[i][c] = qc[i];
    }
    /* evaluation: gx = fmaf(gy, a, 0), as the (N,C,S) path */
    cl_job e = training ? (cl_job){.kind = CL_F32_GRAD_IN,
                                   .x = x,
                                   .gy = gy,
                                   .out = gx,
                                   .q = {q[0], q[1], q[2], q[3]}}
                        : (cl_job){.kind = CL_F32_AFFINE, .x = gy, .out = gx, .q = {q[3], zero}};
    if (act) {
        /* the masked gy, into the residual's gradient and through gx's formula */
        e = (cl_job){.kind = CL_F32_GRAD_RELU,
                     .x = x,
                     .gy = gy,
                     .out = gx,
                     .out2 = act->gres,
                     .mk = act->mask,
                     .training = training,
                     .q = {q[0], q[1], q[2], q[3]}};
        return cl_close(&k, gx || act->gres ? &e : NULL);
    }
    return cl_close(&k, gx ? &e : NULL);
}

static int forward_f64_cl(const dl_bn_shape *s, double eps, bool training, double *y, double *mean,
                          double *var, const double *x, const double *w, const double *b) {
    cl_run k;
    if (cl_open("batch_norm", s, &k)) return -1;
    int64_t C = s->C;
    double *buf = k.buf, M = k.M;
    double *md = buf, *sa = buf + C, *sb = buf + 2 * C, *scale = buf + 3 * C, *shift = buf + 4 * C;
    if (training) {
        /* two passes, as the (N,C,S) path: the mean, then squared deviations */
        cl_job j = {.kind = CL_F64_SUM, .x = x, .m = md};
        cl_reduce(&j, &k.p, k.part, sa, sb);
        for (int64_t c = 0; c < C; c++) md[c] = sa[c] / M;
        j.kind = CL_F64_SQDEV;
        cl_reduce(&j, &k.p, k.part, sa, sb);
    }
    for (int64_t c = 0; c < C; c++) {
        double v;
        if (training) {
            v = sb[c] / M;
            mean[c] = md[c];
            var[c] = v;
        } else {
            md[c] = mean[c];
            v = var[c];
        }
        scale[c] = (w ? w[c] : 1.0) / sqrt(v + eps);
        shift[c] = b ? b[c] : 0.0;
    }
    cl_job e = {.kind = CL_F64_AFFINE, .x = x, .out = y, .q = {md, scale, shift}};
    return cl_close(&k, &e);
}

static int backward_f64_cl(const dl_bn_shape *s, double eps, bool training, double *gx, double *gw,
                           double *gb, const double *gy, const double *x, const double *mean,
                           const double *var, const double *w) {
    cl_run k;
    if (cl_open("batch_norm_backward", s, &k)) return -1;
    int64_t C = s->C;
    double *buf = k.buf, M = k.M;
    double *md = buf, *sa = buf + C, *sb = buf + 2 * C, *mdy = buf + 3 * C, *k2 = buf + 4 * C,
           *invstd = buf + 5 * C, *wc = buf + 6 * C;
    for (int64_t c = 0; c < C; c++) md[c] = mean[c];
    cl_job j = {.kind = CL_F64_GRAD_SUMS, .x = x, .gy = gy, .m = md};
    cl_reduce(&j, &k.p, k.part, sa, sb);
    for (int64_t c = 0; c < C; c++) {
        invstd[c] = 1.0 / sqrt(var[c] + eps);
        wc[c] = w ? w[c] : 1.0;
        if (gb) gb[c] = sa[c];
        if (gw) gw[c] = sb[c] * invstd[c];
        mdy[c] = sa[c] / M;
        k2[c] = sb[c] / M * invstd[c] * invstd[c];
    }
    cl_job e = {.kind = training ? CL_F64_GRAD_IN : CL_F64_GRAD_EVAL,
                .x = x,
                .gy = gy,
                .out = gx,
                .q = {md, mdy, k2, invstd, wc}};
    return cl_close(&k, gx ? &e : NULL);
}

/* --- the fused ReLU around the float64 kernels -------------------------------------
 * float64 (gradient checks, not speed) runs the plain kernels with one pass
 * after the forward (the ReLU and its mask) or before the backward (the
 * masked gy), unit by unit (kernels/batchnorm.h): element j of unit u is
 * element u*L + j of the dense data in either layout. */

typedef struct units {
    int64_t U, L, W; /* units, elements per unit, mask words per unit */
} units;

static units units_of(bool cl, const dl_bn_shape *s) {
    bool rows = dl_bn_mask_rows(cl, s);
    units u = {rows ? s->N * s->S : s->N * s->C, rows ? s->C : s->S, 0};
    u.W = (u.L + 31) / 32;
    return u;
}

/* y = relu(y + res) in place (res may be NULL), the mask into m (may be NULL) */
static void f64_relu_after(const units *n, double *y, const double *res, uint32_t *m) {
#pragma omp parallel for num_threads(dl_get_num_threads()) if (n->U * n->L >= DL_PARALLEL_GRAIN)
    for (int64_t u = 0; u < n->U; u++)
        for (int64_t w = 0; w < n->W; w++) {
            uint32_t bits = 0;
            for (int64_t j = w * 32; j < n->L && j < w * 32 + 32; j++) {
                int64_t k = u * n->L + j;
                double v = res ? y[k] + res[k] : y[k];
                bits |= (uint32_t) !(v <= 0.0) << (j & 31);
                y[k] = v < 0.0 ? 0.0 : v;
            }
            if (m) m[u * n->W + w] = bits;
        }
}

/* gz = (mask ? gy : 0) */
static void f64_relu_before(const units *n, double *gz, const double *gy, const uint32_t *m) {
#pragma omp parallel for num_threads(dl_get_num_threads()) if (n->U * n->L >= DL_PARALLEL_GRAIN)
    for (int64_t u = 0; u < n->U; u++)
        for (int64_t j = 0; j < n->L; j++) {
            int64_t k = u * n->L + j;
            gz[k] = bit_of(m + u * n->W, j) ? gy[k] : 0.0; /* (float64: not for speed) */
        }
}

/* --- entry points ------------------------------------------------------------------ */

int dl_cpu_batch_norm_forward_train(dl_dtype dt, bool cl, const dl_bn_shape *s, double eps, void *y,
                                    void *mean, void *var, const void *x, const void *w,
                                    const void *b) {
    switch (dt) {
    case DL_DTYPE_F32:
        return (cl ? forward_f32_cl : forward_f32)(s, eps, true, y, mean, var, x, w, b, NULL);
    case DL_DTYPE_F64:
        return (cl ? forward_f64_cl : forward_f64)(s, eps, true, y, mean, var, x, w, b);
    default: return dl_error("batch_norm: no CPU kernel for %s", dl_dtype_name(dt));
    }
}

int dl_cpu_batch_norm_forward_eval(dl_dtype dt, bool cl, const dl_bn_shape *s, double eps, void *y,
                                   const void *x, const void *mean, const void *var, const void *w,
                                   const void *b) {
    /* (evaluation only reads mean and var) */
    switch (dt) {
    case DL_DTYPE_F32:
        return (cl ? forward_f32_cl : forward_f32)(s, eps, false, y, (float *)mean, (float *)var, x,
                                                   w, b, NULL);
    case DL_DTYPE_F64:
        return (cl ? forward_f64_cl : forward_f64)(s, eps, false, y, (double *)mean, (double *)var,
                                                   x, w, b);
    default: return dl_error("batch_norm: no CPU kernel for %s", dl_dtype_name(dt));
    }
}

int dl_cpu_batch_norm_backward(dl_dtype dt, bool cl, const dl_bn_shape *s, double eps,
                               bool training, void *gx, void *gw, void *gb, const void *gy,
                               const void *x, const void *mean, const void *var, const void *w) {
    switch (dt) {
    case DL_DTYPE_F32:
        return (cl ? backward_f32_cl : backward_f32)(s, eps, training, gx, gw, gb, gy, x, mean, var,
                                                     w, NULL);
    case DL_DTYPE_F64:
        return (cl ? backward_f64_cl : backward_f64)(s, eps, training, gx, gw, gb, gy, x, mean, var,
                                                     w);
    default: return dl_error("batch_norm_backward: no CPU kernel for %s", dl_dtype_name(dt));
    }
}

/* The fused ReLU.  float32 runs it inside the passes, along the mask's units:
 * rows when dl_bn_mask_rows (channels-last, or S == 1), else planes. */
int dl_cpu_batch_norm_act_forward(dl_dtype dt, bool cl, const dl_bn_shape *s, double eps,
                                  bool training, void *y, void *mean, void *var, const void *x,
                                  const void *w, const void *b, const dl_bn_act *act) {
    bool rows = dl_bn_mask_rows(cl, s);
    switch (dt) {
    case DL_DTYPE_F32:
        return (rows ? forward_f32_cl : forward_f32)(s, eps, training, y, mean, var, x, w, b, act);
    case DL_DTYPE_F64: {
        if ((cl ? forward_f64_cl : forward_f64)(s, eps, training, y, mean, var, x, w, b)) return -1;
        units n = units_of(cl, s);
        f64_relu_after(&n, y, act->res, act->mask);
        return 0;
    }
    default: return dl_error("batch_norm_relu: no CPU kernel for %s", dl_dtype_name(dt));
    }
}

int dl_cpu_batch_norm_act_backward(dl_dtype dt, bool cl, const dl_bn_shape *s, double eps,
                                   bool training, void *gx, void *gw, void *gb, const void *gy,
                                   const void *x, const void *mean, const void *var, const void *w,
                                   const dl_bn_act *act) {
    bool rows = dl_bn_mask_rows(cl, s);
    switch (dt) {
    case DL_DTYPE_F32:
        return (rows ? backward_f32_cl : backward_f32)(s, eps, training, gx, gw, gb, gy, x, mean,
                                                       var, w, act);
    case DL_DTYPE_F64: {
        units n = units_of(cl, s);
        double *gz = act->gres;
        if (!gz && !(gz = malloc(sizeof(double) * (size_t)(n.U * n.L))))
            return dl_error("batch_norm_relu_backward: out of memory for %lld elements",
                            (long long)(n.U * n.L));
        f64_relu_before(&n, gz, gy, act->mask);
        int rc = (cl ? backward_f64_cl : backward_f64)(s, eps, training, gx, gw, gb, gz, x, mean,
                                                       var, w);
        if (gz != act->gres) free(gz);
        return rc;
    }
    default: return dl_error("batch_norm_relu_backward: no CPU kernel for %s", dl_dtype_name(dt));
    }
}
