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
 *   gw = sum(gy * xhat), gb = sum(gy). */
#include "batchnorm.h"
#include "core/error.h"
#include "core/parallel.h"

#include <math.h>
#include <stdlib.h>

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
DL_TARGET_CLONES("avx512f", "arch=haswell", "default")
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

/* sum over the channel of gy, and of gy * (x - m) */
DL_TARGET_CLONES("avx512f", "arch=haswell", "default")
static void f32_grad_sums(const dl_bn_shape *s, const float *gy, const float *x, double m,
                          double *sdy, double *sdyx) {
    double a[NACC] = {0}, b[NACC] = {0};
    double ta = 0, tb = 0;
    for (int64_t n = 0; n < s->N; n++) {
        const float *g = gy + n * s->C * s->S, *r = x + n * s->C * s->S;
        int64_t i = 0;
        for (; i + NACC <= s->S; i += NACC)
            for (int j = 0; j < NACC; j++) {
                double d = (double)g[i + j];
                a[j] += d;
                b[j] += d * ((double)r[i + j] - m);
            }
        for (; i < s->S; i++) {
            double d = (double)g[i];
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
DL_TARGET_CLONES("avx512f", "arch=haswell", "default")
static void f32_affine(const dl_bn_shape *s, float *y, const float *x, float a, float b) {
    for (int64_t n = 0; n < s->N; n++) {
        const float *r = x + n * s->C * s->S;
        float *o = y + n * s->C * s->S;
        for (int64_t i = 0; i < s->S; i++) o[i] = fmaf(r[i], a, b);
    }
}

/* gx = (gy - mdy - (x - m) * k) * a over the channel, in float */
DL_TARGET_CLONES("avx512f", "arch=haswell", "default")
static void f32_grad_input(const dl_bn_shape *s, float *gx, const float *gy, const float *x,
                           float m, float mdy, float k, float a) {
    for (int64_t n = 0; n < s->N; n++) {
        const float *g = gy + n * s->C * s->S, *r = x + n * s->C * s->S;
        float *o = gx + n * s->C * s->S;
        for (int64_t i = 0; i < s->S; i++) o[i] = (g[i] - mdy - (r[i] - m) * k) * a;
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
                       float *var, const float *x, const float *w, const float *b) {
    double M = (double)(s->N * s->S);
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
                        const float *var, const float *w) {
    double M = (double)(s->N * s->S);
#pragma omp parallel for num_threads(dl_get_num_threads()) if (s->N * s->S * s->C >=               \
                                                               DL_PARALLEL_GRAIN)
    for (int64_t c = 0; c < s->C; c++) {
        double m = mean[c], invstd = 1.0 / sqrt((double)var[c] + eps), sdy, sdyx;
        int64_t off = c * s->S;
        f32_grad_sums(s, gy + off, x + off, m, &sdy, &sdyx);
        if (gb) gb[c] = (float)sdy;
        if (gw) gw[c] = (float)(sdyx * invstd);
        if (!gx) continue;
        float q[4];
        f32_grad_coeffs(m, invstd, w ? w[c] : 1.0, sdy, sdyx, M, q);
        if (training)
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
    CL_F32_MOMENTS,   /* a += x - m, b += (x - m)^2 (m: x0, the shift) */
    CL_F32_GRAD_SUMS, /* a += gy, b += gy * (x - m) */
    CL_F64_SUM,       /* a += x */
    CL_F64_SQDEV,     /* b += (x - m)^2 */
    CL_F64_GRAD_SUMS, /* a += gy, b += gy * (x - m) */
    CL_F32_AFFINE,    /* out = fmaf(x, q0, q1) */
    CL_F32_GRAD_IN,   /* out = (gy - q1 - (x - q0) * q2) * q3 */
    CL_F64_AFFINE,    /* out = (x - q0) * q1 + q2 */
    CL_F64_GRAD_IN,   /* out = (gy - q1 - (x - q0) * q2) * q3 * q4 */
    CL_F64_GRAD_EVAL  /* out = gy * q3 * q4 */
} cl_kind;

typedef struct cl_job {
    cl_kind kind;
    const void *x, *gy; /* (R,C) */
    void *out;          /* (R,C), maps only */
    const double *m;    /* (C), sums only */
    const void *q[5];   /* (C) each, maps only: float for F32, double for F64 */
} cl_job;

/* float32 sums over rows of a tile: n channels, rows ld apart */
DL_TARGET_CLONES("avx512f", "arch=haswell", "default")
static void f32_moments_cl(int64_t ld, int64_t rows, int64_t n, const float *restrict x,
                           const double *restrict m, double *restrict a, double *restrict b) {
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < n; j++) {
            double d = (double)x[r * ld + j] - m[j];
            a[j] += d;
            b[j] += d * d;
        }
}

DL_TARGET_CLONES("avx512f", "arch=haswell", "default")
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
DL_TARGET_CLONES("avx512f", "arch=haswell", "default")
static void f32_affine_cl(int64_t C, int64_t rows, float *restrict y, const float *restrict x,
                          const float *restrict a, const float *restrict b) {
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < C; c++) y[r * C + c] = fmaf(x[r * C + c], a[c], b[c]);
}

DL_TARGET_CLONES("avx512f", "arch=haswell", "default")
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
    case CL_F32_GRAD_SUMS: f32_grad_sums_cl(C, rows, n, gf, xf, m, a, b); break;
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
                          float *var, const float *x, const float *w, const float *b) {
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
    return cl_close(&k, &e);
}

static int backward_f32_cl(const dl_bn_shape *s, double eps, bool training, float *gx, float *gw,
                           float *gb, const float *gy, const float *x, const float *mean,
                           const float *var, const float *w) {
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

/* --- entry points ------------------------------------------------------------------ */

int dl_cpu_batch_norm_forward_train(dl_dtype dt, bool cl, const dl_bn_shape *s, double eps, void *y,
                                    void *mean, void *var, const void *x, const void *w,
                                    const void *b) {
    switch (dt) {
    case DL_DTYPE_F32:
        return (cl ? forward_f32_cl : forward_f32)(s, eps, true, y, mean, var, x, w, b);
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
                                                   w, b);
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
                                                     w);
    case DL_DTYPE_F64:
        return (cl ? backward_f64_cl : backward_f64)(s, eps, training, gx, gw, gb, gy, x, mean, var,
                                                     w);
    default: return dl_error("batch_norm_backward: no CPU kernel for %s", dl_dtype_name(dt));
    }
}
