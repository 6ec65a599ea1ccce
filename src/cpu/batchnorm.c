/* batchnorm.c - CPU batch-normalization kernels (see batchnorm.h).
 *
 * Both dtypes run OpenMP loops parallel over channels (a channel is written
 * by one thread only).
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

/* --- float32: loops ---------------------------------------------------------------- */

/* Channel c's rows: x + n*C*S + c*S for n < N, each S floats long.  A
 * channel's N*S floats (at most a few hundred KB in a ResNet) stay in the
 * core's cache between the passes over it, so the passes cost one read from
 * memory, not three.  Sums run in double over NACC independent lanes (the
 * compiler turns the lane array into vector registers) and are added lane by
 * lane at the end: the order is written out, so every clone gives the same
 * sums. */
#define NACC 16
#define BN_CLONES __attribute__((target_clones("avx512f", "arch=haswell", "default")))

/* sum over the channel of x, and of (x - m)^2 */
BN_CLONES static void f32_moments(const dl_bn_shape *s, const float *x, double m, double *sum,
                                  double *sq) {
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
BN_CLONES static void f32_grad_sums(const dl_bn_shape *s, const float *gy, const float *x, double m,
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
BN_CLONES static void f32_affine(const dl_bn_shape *s, float *y, const float *x, float a, float b) {
    for (int64_t n = 0; n < s->N; n++) {
        const float *r = x + n * s->C * s->S;
        float *o = y + n * s->C * s->S;
        for (int64_t i = 0; i < s->S; i++) o[i] = fmaf(r[i], a, b);
    }
}

/* gx = (gy - mdy - (x - m) * k) * a over the channel, in float */
BN_CLONES static void f32_grad_input(const dl_bn_shape *s, float *gx, const float *gy,
                                     const float *x, float m, float mdy, float k, float a) {
    for (int64_t n = 0; n < s->N; n++) {
        const float *g = gy + n * s->C * s->S, *r = x + n * s->C * s->S;
        float *o = gx + n * s->C * s->S;
        for (int64_t i = 0; i < s->S; i++) o[i] = (g[i] - mdy - (r[i] - m) * k) * a;
    }
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
            /* one pass, shifted by the channel's first element: with d = x - x0,
             * mean = x0 + sum(d)/M, var = (sum(d^2) - sum(d)^2/M) / M; in
             * double the cancellation stays below float resolution unless x0
             * lies some 10^4 standard deviations from the mean */
            double sum, sq, x0 = xc[0];
            f32_moments(s, xc, x0, &sum, &sq);
            m = x0 + sum / M;
            v = (sq - sum * sum / M) / M;
            if (v < 0) v = 0;
            mean[c] = (float)m;
            var[c] = (float)v;
        } else {
            m = mean[c];
            v = var[c];
        }
        float a = (float)((w ? w[c] : 1.0) / sqrt(v + eps));
        float sh = (float)((b ? b[c] : 0.0) - m * (double)a);
        f32_affine(s, y + c * s->S, xc, a, sh);
    }
    return 0;
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
        double a = invstd * (w ? w[c] : 1.0);
        if (training)
            f32_grad_input(s, gx + off, gy + off, x + off, (float)m, (float)(sdy / M),
                           (float)(sdyx / M * invstd * invstd), (float)a);
        else
            f32_affine(s, gx + off, gy + off, (float)a, 0.0f); /* gy * a */
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

/* --- entry points ------------------------------------------------------------------ */

int dl_cpu_batch_norm_forward_train(dl_dtype dt, const dl_bn_shape *s, double eps, void *y,
                                    void *mean, void *var, const void *x, const void *w,
                                    const void *b) {
    switch (dt) {
    case DL_DTYPE_F32: return forward_f32(s, eps, true, y, mean, var, x, w, b);
    case DL_DTYPE_F64: return forward_f64(s, eps, true, y, mean, var, x, w, b);
    default: return dl_error("batch_norm: no CPU kernel for %s", dl_dtype_name(dt));
    }
}

int dl_cpu_batch_norm_forward_eval(dl_dtype dt, const dl_bn_shape *s, double eps, void *y,
                                   const void *x, const void *mean, const void *var, const void *w,
                                   const void *b) {
    switch (dt) {
    case DL_DTYPE_F32: return forward_f32(s, eps, false, y, (float *)mean, (float *)var, x, w, b);
    case DL_DTYPE_F64: return forward_f64(s, eps, false, y, (double *)mean, (double *)var, x, w, b);
    default: return dl_error("batch_norm: no CPU kernel for %s", dl_dtype_name(dt));
    }
}

int dl_cpu_batch_norm_backward(dl_dtype dt, const dl_bn_shape *s, double eps, bool training,
                               void *gx, void *gw, void *gb, const void *gy, const void *x,
                               const void *mean, const void *var, const void *w) {
    switch (dt) {
    case DL_DTYPE_F32: return backward_f32(s, eps, training, gx, gw, gb, gy, x, mean, var, w);
    case DL_DTYPE_F64: return backward_f64(s, eps, training, gx, gw, gb, gy, x, mean, var, w);
    default: return dl_error("batch_norm_backward: no CPU kernel for %s", dl_dtype_name(dt));
    }
}
