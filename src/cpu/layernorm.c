/* cpu/layernorm.c - CPU kernels of layer norm and RMS norm (see
 * layernorm.h).  Rows run in parallel; each row is one fused pass for its
 * statistics and one for its outputs, while it sits in the core's cache.
 *
 * float32: sums in double over NACC lanes (vectorised; clones for AVX-512,
 * Haswell's AVX2 and baseline x86-64, built without FMA contraction, and the
 * lanes added in a written order, so every clone gives the same bits).
 *  - forward: the sums of x - x0 and its square (x0 the row's first element;
 *    0 for RMS norm, which wants the mean square) give mean and variance in
 *    one pass; y = (x * a + c) * w + b with a = rstd, c = -mean * rstd
 *    rounded to float, PyTorch's vectorised formula.
 *  - backward: with g = gy * w and xhat = (x - mean) * rstd (float), the sums
 *    of g and g * xhat in double, then
 *      gx = (g - mean(g) - xhat * mean(g * xhat)) * rstd
 *    (RMS norm: without the mean(g) term).
 * float64: two passes for the statistics (mean, then squared deviations),
 * the same formulas in double.
 *
 * Weight gradients, gw = sum over rows of gy * xhat and gb = sum of gy, are
 * summed in double per chunk of rows while the rows' gx is computed, then
 * chunk by chunk in order; the chunks depend on the shape alone, so the
 * result does not depend on the thread count. */
#include "cpu/layernorm.h"
#include "core/error.h"
#include "core/parallel.h"

#include <math.h>
#include <stdlib.h>

#define NACC 16
#define LN_CLONES DL_TARGET_CLONES("avx512f", "arch=haswell", "default")

/* --- float32: one row -------------------------------------------------------------- */

/* s1 = sum of x - k, s2 = sum of (x - k)^2 over the row x (D) */
LN_CLONES static void f32_moments(const float *x, int64_t D, double k, double *s1, double *s2) {
    double a[NACC] = {0}, b[NACC] = {0};
    double ta = 0, tb = 0;
    int64_t i = 0;
    for (; i + NACC <= D; i += NACC)
        for (int j = 0; j < NACC; j++) {
            double d = (double)x[i + j] - k;
            a[j] += d;
            b[j] += d * d;
        }
    for (; i < D; i++) {
        double d = (double)x[i] - k;
        ta += d;
        tb += d * d;
    }
    for (int j = 0; j < NACC; j++) {
        ta += a[j];
        tb += b[j];
    }
    *s1 = ta;
    *s2 = tb;
}

/* y = (x * a + c) * w + b over the row (b NULL: 0); y, x, w, b are (D) */
LN_CLONES static void f32_affine(float *y, const float *x, const float *w, const float *b,
                                 int64_t D, float a, float c) {
    if (b) {
        for (int64_t i = 0; i < D; i++) y[i] = (x[i] * a + c) * w[i] + b[i];
    } else {
        for (int64_t i = 0; i < D; i++) y[i] = (x[i] * a + c) * w[i];
    }
}

static void f32_row_forward(float *y, float *mean, float *rstd, const float *x, const float *w,
                            const float *b, int64_t D, double eps, bool rms) {
    double k = rms ? 0 : x[0], s1, s2;
    f32_moments(x, D, k, &s1, &s2);
    double mu = s1 / (double)D, var = s2 / (double)D;
    if (!rms) var -= mu * mu;
    if (var < 0) var = 0; /* rounding; NaN stays */
    double m = rms ? 0 : k + mu, r = 1 / sqrt(var + eps);
    if (mean) *mean = (float)m;
    *rstd = (float)r;
    f32_affine(y, x, w, b, D, (float)r, (float)(-m * r));
}

/* sg = sum of g, sgx = sum of g * xhat over the row, g = gy * w and
 * xhat = (x - m) * r in float */
LN_CLONES static void f32_grad_sums(const float *gy, const float *x, const float *w, int64_t D,
                                    float m, float r, double *sg, double *sgx) {
    double a[NACC] = {0}, b[NACC] = {0};
    double ta = 0, tb = 0;
    int64_t i = 0;
    for (; i + NACC <= D; i += NACC)
        for (int j = 0; j < NACC; j++) {
            float g = gy[i + j] * w[i + j];
            a[j] += g;
            b[j] += (double)g * ((x[i + j] - m) * r);
        }
    for (; i < D; i++) {
        float g = gy[i] * w[i];
        ta += g;
        tb += (double)g * ((x[i] - m) * r);
    }
    for (int j = 0; j < NACC; j++) {
        ta += a[j];
        tb += b[j];
    }
    *sg = ta;
    *sgx = tb;
}

/* gx = (g - mg - xhat * mgx) * r over the row */
LN_CLONES static void f32_grad_input(float *gx, const float *gy, const float *x, const float *w,
                                     int64_t D, float m, float r, float mg, float mgx) {
    for (int64_t i = 0; i < D; i++) gx[i] = (gy[i] * w[i] - mg - ((x[i] - m) * r) * mgx) * r;
}

/* pw += gy * xhat, pb += gy (pb may be NULL) over the row, in double */
LN_CLONES static void f32_grad_weight(double *pw, double *pb, const float *gy, const float *x,
                                      int64_t D, float m, float r) {
    for (int64_t i = 0; i < D; i++) pw[i] += (double)gy[i] * ((x[i] - m) * r);
    if (pb)
        for (int64_t i = 0; i < D; i++) pb[i] += gy[i];
}

/* rows [0, n) of the backward: gy, x (n,D), mean (n; NULL: RMS norm), rstd (n) */
static void f32_rows_backward(int64_t n, int64_t D, float *gx, double *pw, double *pb,
                              const float *gy, const float *x, const float *mean, const float *rstd,
                              const float *w) {
    for (int64_t r = 0; r < n; r++) {
        const float *g = gy + r * D, *xr = x + r * D;
        float m = mean ? mean[r] : 0, rs = rstd[r];
        if (gx) {
            double sg, sgx;
            f32_grad_sums(g, xr, w, D, m, rs, &sg, &sgx);
            float mg = mean ? (float)(sg / (double)D) : 0, mgx = (float)(sgx / (double)D);
            f32_grad_input(gx + r * D, g, xr, w, D, m, rs, mg, mgx);
        }
        if (pw) f32_grad_weight(pw, pb, g, xr, D, m, rs);
    }
}

/* --- float64: one row -------------------------------------------------------------- */

static void f64_row_forward(double *y, double *mean, double *rstd, const double *x, const double *w,
                            const double *b, int64_t D, double eps, bool rms) {
    double m = 0, v = 0;
    if (!rms) {
        for (int64_t i = 0; i < D; i++) m += x[i];
        m /= (double)D;
    }
    for (int64_t i = 0; i < D; i++) v += (x[i] - m) * (x[i] - m);
    double r = 1 / sqrt(v / (double)D + eps);
    if (mean) *mean = m;
    *rstd = r;
    for (int64_t i = 0; i < D; i++) y[i] = (x[i] - m) * r * w[i] + (b ? b[i] : 0);
}

static void f64_rows_backward(int64_t n, int64_t D, double *gx, double *pw, double *pb,
                              const double *gy, const double *x, const double *mean,
                              const double *rstd, const double *w) {
    for (int64_t r = 0; r < n; r++) {
        const double *g = gy + r * D, *xr = x + r * D;
        double m = mean ? mean[r] : 0, rs = rstd[r];
        if (gx) {
            double sg = 0, sgx = 0;
            for (int64_t i = 0; i < D; i++) {
                sg += g[i] * w[i];
                sgx += g[i] * w[i] * ((xr[i] - m) * rs);
            }
            double mg = mean ? sg / (double)D : 0, mgx = sgx / (double)D;
            for (int64_t i = 0; i < D; i++)
                gx[r * D + i] = (g[i] * w[i] - mg - ((xr[i] - m) * rs) * mgx) * rs;
        }
        if (pw)
            for (int64_t i = 0; i < D; i++) {
                pw[i] += g[i] * ((xr[i] - m) * rs);
                if (pb) pb[i] += g[i];
            }
    }
}

/* --- entry points ------------------------------------------------------------------ */

int dl_cpu_layer_norm_forward(dl_dtype dt, const dl_ln_shape *s, double eps, bool rms, void *y,
                              void *mean, void *rstd, const void *x, const void *w, const void *b) {
    const int64_t R = s->rows, D = s->cols;
    if (dt != DL_DTYPE_F32 && dt != DL_DTYPE_F64)
        return dl_error("layer_norm: CPU kernels take float32 or float64, got %s",
                        dl_dtype_name(dt));
#pragma omp parallel for num_threads(dl_get_num_threads()) if (R * D >= DL_PARALLEL_GRAIN)
    for (int64_t r = 0; r < R; r++) {
        if (dt == DL_DTYPE_F64)
            f64_row_forward((double *)y + r * D, mean ? (double *)mean + r : NULL,
                            (double *)rstd + r, (const double *)x + r * D, w, b, D, eps, rms);
        else
            f32_row_forward((float *)y + r * D, mean ? (float *)mean + r : NULL, (float *)rstd + r,
                            (const float *)x + r * D, w, b, D, eps, rms);
    }
    return 0;
}

/* Chunks of rows whose weight-gradient sums are kept apart: up to 64, fewer
 * when the partial sums (2 * cols doubles a chunk) would pass 8 MB. */
static int64_t weight_chunks(const dl_ln_shape *s) {
    int64_t n = ((int64_t)1 << 19) / s->cols;
    if (n > 64) n = 64;
    if (n > s->rows) n = s->rows;
    return n < 1 ? 1 : n;
}

int dl_cpu_layer_norm_backward(dl_dtype dt, const dl_ln_shape *s, bool rms, void *gx, void *gw,
                               void *gb, const void *gy, const void *x, const void *mean,
                               const void *rstd, const void *w) {
    const int64_t R = s->rows, D = s->cols;
    if (dt != DL_DTYPE_F32 && dt != DL_DTYPE_F64)
        return dl_error("layer_norm_backward: CPU kernels take float32 or float64, got %s",
                        dl_dtype_name(dt));
    if (rms) mean = NULL, gb = NULL;
    bool wgrad = gw || gb;
    /* without weight gradients every row is a chunk of its own */
    int64_t per = wgrad ? (R + weight_chunks(s) - 1) / weight_chunks(s) : 1;
    int64_t nch = (R + per - 1) / per;
    double *part = NULL;
    if (wgrad && !(part = calloc((size_t)(nch * 2 * D), sizeof *part)))
        return dl_error("layer_norm_backward: out of memory for %lld partial sums",
                        (long long)(nch * 2 * D));
    const size_t esz = dt == DL_DTYPE_F64 ? sizeof(double) : sizeof(float);
#pragma omp parallel for num_threads(dl_get_num_threads()) if (R * D >= DL_PARALLEL_GRAIN)
    for (int64_t c = 0; c < nch; c++) {
        int64_t r0 = c * per, n = R - r0 < per ? R - r0 : per;
        double *pw = part ? part + c * 2 * D : NULL, *pb = pw && gb ? pw + D : NULL;
        char *gxr = gx ? (char *)gx + (size_t)(r0 * D) * esz : NULL;
        const char *gyr = (const char *)gy + (size_t)(r0 * D) * esz,
                   *xr = (const char *)x + (size_t)(r0 * D) * esz,
                   *mr = mean ? (const char *)mean + (size_t)r0 * esz : NULL,
                   *rr = (const char *)rstd + (size_t)r0 * esz;
        if (dt == DL_DTYPE_F64)
            f64_rows_backward(n, D, (double *)gxr, pw, pb, (const double *)gyr, (const double *)xr,
                              (const double *)mr, (const double *)rr, w);
        else
            f32_rows_backward(n, D, (float *)gxr, pw, pb, (const float *)gyr, (const float *)xr,
                              (const float *)mr, (const float *)rr, w);
    }
    if (wgrad) {
        for (int64_t i = 0; i < D; i++) {
            double sw = 0, sb = 0;
            for (int64_t c = 0; c < nch; c++) {
                sw += part[c * 2 * D + i];
                sb += part[c * 2 * D + D + i];
            }
            if (dt == DL_DTYPE_F64) {
                if (gw) ((double *)gw)[i] = sw;
                if (gb) ((double *)gb)[i] = sb;
            } else {
                if (gw) ((float *)gw)[i] = (float)sw;
                if (gb) ((float *)gb)[i] = (float)sb;
            }
        }
        free(part);
    }
    return 0;
}
