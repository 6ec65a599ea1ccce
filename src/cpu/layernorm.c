/* cpu/layernorm.c - CPU kernels of layer norm and RMS norm (see
 * layernorm.h).  Rows run in parallel; each row is one fused pass for its
 * statistics and one for its outputs, while it sits in the core's cache.
 *
 * float32 (vectorised; clones for AVX-512, AVX2 and baseline x86-64,
 * built without FMA contraction, every sum over NACC lanes added in
 * a written order, so every clone gives the same bits):
 *  - forward: the sums of d = x - k and d^2, in float lanes added into
 *    double every FLUSH steps (in double throughout for a row where those
 *    overflow), give mean and variance: k = 0 first; a row whose mean is
 *    large against its spread is summed again, from the cache, with k =
 *    that mean (so s2 / D - mean^2 does not cancel); y = (x * a + c) * w + b
 * with a = rstd, c = -mean * rstd rounded to float, PyTorch's vectorised formula.
 *  - backward: with g = gy * w and xhat = (x - mean) * rstd (float), the sums
 *    of g and g * xhat, then
 *      gx = (g - mean(g) - xhat * mean(g * xhat)) * rstd
 *    (RMS norm: without the mean(g) term), in the same pass over the row as
 *    the weight gradients' sums.  These sums run in float lanes that are
 *    added into double every FLUSH terms (rows, for the weight gradients), so
 *    no float sum is longer than FLUSH terms.
 * float64: two passes for the statistics (mean, then squared deviations),
 * the same formulas in double.
 *
 * Weight gradients, gw = sum over rows of gy * xhat and gb = sum of gy, are
 * summed per chunk of rows while the rows' gx is computed, then chunk by
 * chunk in order; the chunks depend on the shape alone, so the result does
 * not depend on the thread count. */
#include "cpu/layernorm.h"
#include "core/error.h"
#include "core/parallel.h"
#include "cpu/vec8.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define NACC 16  /* lanes of a sum */
#define FLUSH 32 /* float terms a lane adds before they go into double */
#define LN_CLONES DL_CPU_CLONES

/* --- float32: one row -------------------------------------------------------------- */

/* s1 = sum of d, s2 = sum of d^2, d = x - k over the row x (D): d, d^2 and
 * their sums in NACC float lanes (two named 256-bit vectors each, kept in
 * registers by every clone), added into double every FLUSH steps; k is 0,
 * or the row's mean where s2 / D - (s1 / D)^2 would cancel (f32_row_forward). */
LN_CLONES static void f32_moments(const float *x, int64_t D, float k, double *s1, double *s2) {
    double a[NACC] = {0}, b[NACC] = {0};
    double ta = 0, tb = 0;
    const int64_t steps = D / NACC;
    for (int64_t k0 = 0; k0 < steps; k0 += FLUSH) {
        const int64_t k1 = steps - k0 < FLUSH ? steps : k0 + FLUSH;
        v8f a0 = {0}, a1 = {0}, b0 = {0}, b1 = {0}, x0, x1;
        for (int64_t s = k0; s < k1; s++) {
            memcpy(&x0, x + s * NACC, sizeof x0);
            memcpy(&x1, x + s * NACC + 8, sizeof x1);
            x0 -= k;
            x1 -= k;
            a0 += x0;
            a1 += x1;
            b0 += x0 * x0;
            b1 += x1 * x1;
        }
        dl_cpu_flush8(a, &a0, 0), dl_cpu_flush8(a + 8, &a1, 0);
        dl_cpu_flush8(b, &b0, 0), dl_cpu_flush8(b + 8, &b1, 0);
    }
    for (int64_t i = steps * NACC; i < D; i++) {
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

/* f32_moments in double throughout: rows whose float sums overflow (|x - k|
 * beyond ~1e18) or hold inf/NaN, which then give what double gives */
static void f64_moments(const float *x, int64_t D, double k, double *s1, double *s2) {
    double a = 0, b = 0;
    for (int64_t i = 0; i < D; i++) {
        double d = (double)x[i] - k;
        a += d;
        b += d * d;
    }
    *s1 = a;
    *s2 = b;
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

/* s1, s2 of x - k over the row (f32_moments; in double where the float
 * sums overflow) */
static void row_moments(const float *x, int64_t D, float k, double *s1, double *s2) {
    f32_moments(x, D, k, s1, s2);
    if (!isfinite(*s1) || !isfinite(*s2)) f64_moments(x, D, k, s1, s2);
}

static void f32_row_forward(float *y, float *mean, float *rstd, const float *x, const float *w,
                            const float *b, int64_t D, double eps, bool rms) {
    /* one pass with k = 0; when the mean is large against the spread
     * (mu^2 > var / 4, so s2 / D - mu^2 would lose more than a bit or two)
     * a second pass from the cache with k = that mean */
    float k = 0;
    double s1, s2;
    row_moments(x, D, 0, &s1, &s2);
    double mu = s1 / (double)D, var = s2 / (double)D;
    if (!rms) {
        var -= mu * mu;
        if (mu * mu > 0.25 * var) {
            k = (float)mu;
            row_moments(x, D, k, &s1, &s2);
            mu = s1 / (double)D;
            var = s2 / (double)D - mu * mu;
        }
    }
    if (var < 0) var = 0; /* rounding; NaN stays */
    double m = rms ? 0 : k + mu, r = 1 / sqrt(var + eps);
    if (mean) *mean = (float)m;
    *rstd = (float)r;
    f32_affine(y, x, w, b, D, (float)r, (float)(-m * r));
}

/* sg = sum of g, sgx = sum of g * xhat over the row, g = gy * w and
 * xhat = (x - m) * r in float: NACC float lanes, added into double every
 * FLUSH steps (so a float sum never runs over more than FLUSH terms). */
LN_CLONES static void f32_grad_sums(const float *gy, const float *x, const float *w, int64_t D,
                                    float m, float r, double *sg, double *sgx) {
    double ta = 0, tb = 0;
    const int64_t steps = D / NACC;
    for (int64_t k0 = 0; k0 < steps; k0 += FLUSH) {
        float a[NACC] = {0}, b[NACC] = {0};
        const int64_t k1 = steps - k0 < FLUSH ? steps : k0 + FLUSH;
        for (int64_t k = k0; k < k1; k++)
            for (int j = 0; j < NACC; j++) {
                int64_t i = k * NACC + j;
                float g = gy[i] * w[i];
                a[j] += g;
                b[j] += g * ((x[i] - m) * r);
            }
        for (int j = 0; j < NACC; j++) {
            ta += a[j];
            tb += b[j];
        }
    }
    for (int64_t i = steps * NACC; i < D; i++) {
        float g = gy[i] * w[i];
        ta += g;
        tb += g * ((x[i] - m) * r);
    }
    *sg = ta;
    *sgx = tb;
}

/* Over the row: gx = (g - mg - xhat * mgx) * r (gx may be NULL) and, when
 * pw is given, the weight-gradient sums pw += gy * xhat, pb += gy; one loop
 * either way. */
LN_CLONES static void f32_grad_row(float *restrict gx, float *restrict pw, float *restrict pb,
                                   const float *gy, const float *x, const float *w, int64_t D,
                                   float m, float r, float mg, float mgx) {
    if (gx && pw) {
        for (int64_t i = 0; i < D; i++) {
            float xh = (x[i] - m) * r;
            gx[i] = (gy[i] * w[i] - mg - xh * mgx) * r;
            pw[i] += gy[i] * xh;
            pb[i] += gy[i];
        }
    } else if (gx) {
        for (int64_t i = 0; i < D; i++) gx[i] = (gy[i] * w[i] - mg - ((x[i] - m) * r) * mgx) * r;
    } else {
        for (int64_t i = 0; i < D; i++) {
            pw[i] += gy[i] * ((x[i] - m) * r);
            pb[i] += gy[i];
        }
    }
}

/* p += q, q = 0 over n elements */
LN_CLONES static void f32_flush(double *p, float *q, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        p[i] += q[i];
        q[i] = 0;
    }
}

/* rows [0, n) of the backward: gy, x (n,D), mean (n; NULL: RMS norm), rstd
 * (n); part (2,D) the chunk's weight-gradient sums (NULL: none), which
 * FLUSH rows at a time sum in float into scratch (2,D, zeroed). */
static void f32_rows_backward(int64_t n, int64_t D, float *gx, double *part, float *scratch,
                              const float *gy, const float *x, const float *mean, const float *rstd,
                              const float *w) {
    for (int64_t r = 0; r < n; r++) {
        const float *g = gy + r * D, *xr = x + r * D;
        float m = mean ? mean[r] : 0, rs = rstd[r], mg = 0, mgx = 0;
        if (gx) {
            double sg, sgx;
            f32_grad_sums(g, xr, w, D, m, rs, &sg, &sgx);
            mg = mean ? (float)(sg / (double)D) : 0;
            mgx = (float)(sgx / (double)D);
        }
        f32_grad_row(gx ? gx + r * D : NULL, part ? scratch : NULL, part ? scratch + D : NULL, g,
                     xr, w, D, m, rs, mg, mgx);
        if (part && (r % FLUSH == FLUSH - 1 || r == n - 1)) f32_flush(part, scratch, 2 * D);
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
                pb[i] += g[i];
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
 * when their sums (2 * cols doubles and floats a chunk) would pass 12 MB. */
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
    bool wgrad = gw || gb, f64 = dt == DL_DTYPE_F64;
    /* without weight gradients every row is a chunk of its own */
    int64_t per = wgrad ? (R + weight_chunks(s) - 1) / weight_chunks(s) : 1;
    int64_t nch = (R + per - 1) / per;
    /* the chunks' sums (nch,2,D) in double, then (float32) their float
     * scratch (nch,2,D) */
    size_t nsum = wgrad ? (size_t)(nch * 2 * D) : 0;
    double *part = NULL;
    if (wgrad && !(part = calloc(1, nsum * (sizeof(double) + (f64 ? 0 : sizeof(float))))))
        return dl_error("layer_norm_backward: out of memory for %lld partial sums",
                        (long long)nsum);
    float *scratch = part && !f64 ? (float *)(part + nsum) : NULL;
    const size_t esz = f64 ? sizeof(double) : sizeof(float);
#pragma omp parallel for num_threads(dl_get_num_threads()) if (R * D >= DL_PARALLEL_GRAIN)
    for (int64_t c = 0; c < nch; c++) {
        int64_t r0 = c * per, n = R - r0 < per ? R - r0 : per;
        double *pc = part ? part + c * 2 * D : NULL;
        char *gxr = gx ? (char *)gx + (size_t)(r0 * D) * esz : NULL;
        const char *gyr = (const char *)gy + (size_t)(r0 * D) * esz,
                   *xr = (const char *)x + (size_t)(r0 * D) * esz,
                   *mr = mean ? (const char *)mean + (size_t)r0 * esz : NULL,
                   *rr = (const char *)rstd + (size_t)r0 * esz;
        if (f64)
            f64_rows_backward(n, D, (double *)gxr, pc, pc ? pc + D : NULL, (const double *)gyr,
                              (const double *)xr, (const double *)mr, (const double *)rr, w);
        else
            f32_rows_backward(n, D, (float *)gxr, pc, scratch ? scratch + c * 2 * D : NULL,
                              (const float *)gyr, (const float *)xr, (const float *)mr,
                              (const float *)rr, w);
    }
    if (wgrad) {
        for (int64_t i = 0; i < D; i++) {
            double sw = 0, sb = 0;
            for (int64_t c = 0; c < nch; c++) {
                sw += part[c * 2 * D + i];
                sb += part[c * 2 * D + D + i];
            }
            if (f64) {
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
