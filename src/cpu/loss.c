/* cpu/loss.c - CPU kernels of the loss functions (see loss.h for the
 * layouts and formulas).
 *
 * Layout: block sums; nll; cross entropy (class indices, then class
 * probabilities), each a float32 and a float64 version; the pointwise losses
 * with one scalar function per loss and dtype.  Per-sample loops run in
 * parallel over samples (each sample is written by one thread); every sum goes
 * through fixed blocks whose size depends only on n. */
#include "cpu/loss.h"
#include "core/error.h"
#include "core/parallel.h"
#include "cpu/softmax.h" /* dl_cpu_expf */

#include <math.h>
#include <string.h>

/* --- sums ------------------------------------------------------------------------------- */

#define SUM_MAX_BLOCKS 1024

/* Block length for n elements: at least 4096, at most SUM_MAX_BLOCKS blocks. */
static int64_t sum_block(int64_t n) {
    int64_t b = (n + SUM_MAX_BLOCKS - 1) / SUM_MAX_BLOCKS;
    return b < 4096 ? 4096 : b;
}

static double sum_f32(const float *v, int64_t n) { // v is (n)
    int64_t B = sum_block(n), nb = (n + B - 1) / B;
    double part[SUM_MAX_BLOCKS];
#pragma omp parallel for num_threads(dl_get_num_threads()) if (n >= DL_PARALLEL_GRAIN)
    for (int64_t b = 0; b < nb; b++) {
        int64_t lo = b * B, hi = lo + B < n ? lo + B : n;
        double s = 0;
        for (int64_t i = lo; i < hi; i++) s += v[i];
        part[b] = s;
    }
    double s = 0;
    for (int64_t b = 0; b < nb; b++) s += part[b];
    return s;
}

static double sum_f64(const double *v, int64_t n) { // v is (n)
    int64_t B = sum_block(n), nb = (n + B - 1) / B;
    double part[SUM_MAX_BLOCKS];
#pragma omp parallel for num_threads(dl_get_num_threads()) if (n >= DL_PARALLEL_GRAIN)
    for (int64_t b = 0; b < nb; b++) {
        int64_t lo = b * B, hi = lo + B < n ? lo + B : n;
        double s = 0;
        for (int64_t i = lo; i < hi; i++) s += v[i];
        part[b] = s;
    }
    double s = 0;
    for (int64_t b = 0; b < nb; b++) s += part[b];
    return s;
}

static double class_weight_sum_f32(const int64_t *target, const float *weight, int64_t n,
                                   int64_t ignore_index) { // target is (n), weight is (C)
    double s = 0;
    for (int64_t i = 0; i < n; i++)
        if (target[i] != ignore_index) s += weight ? weight[target[i]] : 1.0f;
    return s;
}

static double class_weight_sum_f64(const int64_t *target, const double *weight, int64_t n,
                                   int64_t ignore_index) { // target is (n), weight is (C)
    double s = 0;
    for (int64_t i = 0; i < n; i++)
        if (target[i] != ignore_index) s += weight ? weight[target[i]] : 1.0;
    return s;
}

/* --- nll ---------------------------------------------------------------------------------- */

/* Sample r = n*S + s; its class c lies at (n*C + c)*S + s. */
#define SAMPLE_BASE(r) (((r) / S) * C * S + (r) % S)

static void nll_loss_f32(float *out, const float *logp, const int64_t *target, const float *weight,
                         int64_t N, int64_t C, int64_t S,
                         int64_t ignore_index) { // out is (N,S), logp is (N,C,S)
    int64_t R = N * S;
#pragma omp parallel for num_threads(dl_get_num_threads()) if (R >= DL_PARALLEL_GRAIN)
    for (int64_t r = 0; r < R; r++) {
        int64_t t = target[r];
        if (t == ignore_index) {
            out[r] = 0;
            continue;
        }
        float w = weight ? weight[t] : 1.0f;
        out[r] = -w * logp[SAMPLE_BASE(r) + t * S];
    }
}

static void nll_loss_f64(double *out, const double *logp, const int64_t *target,
                         const double *weight, int64_t N, int64_t C, int64_t S,
                         int64_t ignore_index) { // out is (N,S), logp is (N,C,S)
    int64_t R = N * S;
#pragma omp parallel for num_threads(dl_get_num_threads()) if (R >= DL_PARALLEL_GRAIN)
    for (int64_t r = 0; r < R; r++) {
        int64_t t = target[r];
        if (t == ignore_index) {
            out[r] = 0;
            continue;
        }
        double w = weight ? weight[t] : 1.0;
        out[r] = -w * logp[SAMPLE_BASE(r) + t * S];
    }
}

static void nll_loss_backward_f32(float *gx, const float *g, float g0, const int64_t *target,
                                  const float *weight, int64_t N, int64_t C, int64_t S,
                                  int64_t ignore_index) { // gx is (N,C,S), g is (N,S)
    int64_t R = N * S;
    memset(gx, 0, (size_t)(R * C) * sizeof *gx);
#pragma omp parallel for num_threads(dl_get_num_threads()) if (R >= DL_PARALLEL_GRAIN)
    for (int64_t r = 0; r < R; r++) {
        int64_t t = target[r];
        if (t == ignore_index) continue;
        float w = weight ? weight[t] : 1.0f;
        gx[SAMPLE_BASE(r) + t * S] = -w * (g ? g[r] : g0);
    }
}

static void nll_loss_backward_f64(double *gx, const double *g, double g0, const int64_t *target,
                                  const double *weight, int64_t N, int64_t C, int64_t S,
                                  int64_t ignore_index) { // gx is (N,C,S), g is (N,S)
    int64_t R = N * S;
    memset(gx, 0, (size_t)(R * C) * sizeof *gx);
#pragma omp parallel for num_threads(dl_get_num_threads()) if (R >= DL_PARALLEL_GRAIN)
    for (int64_t r = 0; r < R; r++) {
        int64_t t = target[r];
        if (t == ignore_index) continue;
        double w = weight ? weight[t] : 1.0;
        gx[SAMPLE_BASE(r) + t * S] = -w * (g ? g[r] : g0);
    }
}

/* --- cross entropy: shared pieces ---------------------------------------------------------- */

/* log(sum(exp(x))) of one sample's C scores, S apart. */
static inline float lse_f32(const float *x, int64_t C, int64_t S) {
    float m = -INFINITY;
#pragma omp simd reduction(max : m)
    for (int64_t c = 0; c < C; c++) m = x[c * S] > m ? x[c * S] : m;
    double sum = 0;
#pragma omp simd reduction(+ : sum)
    for (int64_t c = 0; c < C; c++) sum += dl_cpu_expf(x[c * S] - m);
    return m + (float)log(sum);
}

static inline double lse_f64(const double *x, int64_t C, int64_t S) {
    double m = -INFINITY;
    for (int64_t c = 0; c < C; c++) m = fmax(m, x[c * S]);
    double sum = 0;
    for (int64_t c = 0; c < C; c++) sum += exp(x[c * S] - m);
    return m + log(sum);
}

/* Sum of the class weights (C without weights). */
static double weight_total_f32(const float *weight, int64_t C) {
    if (!weight) return (double)C;
    double s = 0;
    for (int64_t c = 0; c < C; c++) s += weight[c];
    return s;
}

static double weight_total_f64(const double *weight, int64_t C) {
    if (!weight) return (double)C;
    double s = 0;
    for (int64_t c = 0; c < C; c++) s += weight[c];
    return s;
}

/* --- cross entropy: class indices ----------------------------------------------------------- */

static void cross_entropy_f32(float *out, const float *x, const int64_t *target,
                              const float *weight, int64_t N, int64_t C, int64_t S,
                              int64_t ignore_index, double eps) { // out is (N,S), x is (N,C,S)
    int64_t R = N * S;
    const float keep = (float)(1.0 - eps), spread = (float)(eps / (double)C);
#pragma omp parallel for num_threads(dl_get_num_threads()) if (R * C >= DL_PARALLEL_GRAIN)
    for (int64_t r = 0; r < R; r++) {
        int64_t t = target[r];
        if (t == ignore_index) {
            out[r] = 0;
            continue;
        }
        const float *xs = x + SAMPLE_BASE(r); // xs is (C), stride S
        float lse = lse_f32(xs, C, S);
        float w = weight ? weight[t] : 1.0f;
        float loss = w * (lse - xs[t * S]);
        if (eps > 0) {
            double smooth = 0;
            for (int64_t c = 0; c < C; c++)
                smooth += (double)(weight ? weight[c] : 1.0f) * (lse - xs[c * S]);
            loss = keep * loss + spread * (float)smooth;
        }
        out[r] = loss;
    }
}

static void cross_entropy_f64(double *out, const double *x, const int64_t *target,
                              const double *weight, int64_t N, int64_t C, int64_t S,
                              int64_t ignore_index, double eps) { // out is (N,S), x is (N,C,S)
    int64_t R = N * S;
    const double keep = 1.0 - eps, spread = eps / (double)C;
#pragma omp parallel for num_threads(dl_get_num_threads()) if (R * C >= DL_PARALLEL_GRAIN)
    for (int64_t r = 0; r < R; r++) {
        int64_t t = target[r];
        if (t == ignore_index) {
            out[r] = 0;
            continue;
        }
        const double *xs = x + SAMPLE_BASE(r); // xs is (C), stride S
        double lse = lse_f64(xs, C, S);
        double w = weight ? weight[t] : 1.0;
        double loss = w * (lse - xs[t * S]);
        if (eps > 0) {
            double smooth = 0;
            for (int64_t c = 0; c < C; c++)
                smooth += (weight ? weight[c] : 1.0) * (lse - xs[c * S]);
            loss = keep * loss + spread * smooth;
        }
        out[r] = loss;
    }
}

static void cross_entropy_backward_f32(float *gx, const float *g, float g0, const float *x,
                                       const int64_t *target, const float *weight, int64_t N,
                                       int64_t C, int64_t S, int64_t ignore_index,
                                       double eps) { // gx, x are (N,C,S), g is (N,S)
    int64_t R = N * S;
    const float keep = (float)(1.0 - eps), spread = (float)(eps / (double)C);
    const float wall = (float)weight_total_f32(weight, C);
#pragma omp parallel for num_threads(dl_get_num_threads()) if (R * C >= DL_PARALLEL_GRAIN)
    for (int64_t r = 0; r < R; r++) {
        int64_t t = target[r];
        const float *xs = x + SAMPLE_BASE(r); // xs, gs are (C), stride S
        float *gs = gx + SAMPLE_BASE(r);
        if (t == ignore_index) {
            for (int64_t c = 0; c < C; c++) gs[c * S] = 0;
            continue;
        }
        float G = g ? g[r] : g0;
        float lse = lse_f32(xs, C, S);
        float wt = weight ? weight[t] : 1.0f;
        float coef = keep * wt + spread * wall;
        if (eps > 0) {
            for (int64_t c = 0; c < C; c++) {
                float v = dl_cpu_expf(xs[c * S] - lse) * coef;
                gs[c * S] = G * (v - spread * (weight ? weight[c] : 1.0f));
            }
        } else {
#pragma omp simd
            for (int64_t c = 0; c < C; c++) gs[c * S] = G * (dl_cpu_expf(xs[c * S] - lse) * coef);
        }
        gs[t * S] -= G * keep * wt;
    }
}

static void cross_entropy_backward_f64(double *gx, const double *g, double g0, const double *x,
                                       const int64_t *target, const double *weight, int64_t N,
                                       int64_t C, int64_t S, int64_t ignore_index,
                                       double eps) { // gx, x are (N,C,S), g is (N,S)
    int64_t R = N * S;
    const double keep = 1.0 - eps, spread = eps / (double)C;
    const double wall = weight_total_f64(weight, C);
#pragma omp parallel for num_threads(dl_get_num_threads()) if (R * C >= DL_PARALLEL_GRAIN)
    for (int64_t r = 0; r < R; r++) {
        int64_t t = target[r];
        const double *xs = x + SAMPLE_BASE(r); // xs, gs are (C), stride S
        double *gs = gx + SAMPLE_BASE(r);
        if (t == ignore_index) {
            for (int64_t c = 0; c < C; c++) gs[c * S] = 0;
            continue;
        }
        double G = g ? g[r] : g0;
        double lse = lse_f64(xs, C, S);
        double wt = weight ? weight[t] : 1.0;
        double coef = keep * wt + spread * wall;
        for (int64_t c = 0; c < C; c++) {
            double v = exp(xs[c * S] - lse) * coef;
            if (eps > 0) v -= spread * (weight ? weight[c] : 1.0);
            gs[c * S] = G * v;
        }
        gs[t * S] -= G * keep * wt;
    }
}

/* --- cross entropy: class probabilities ------------------------------------------------------ */

static void cross_entropy_prob_f32(float *out, const float *x, const float *target,
                                   const float *weight, int64_t N, int64_t C, int64_t S,
                                   double eps) { // out is (N,S), x, target are (N,C,S)
    int64_t R = N * S;
    const float keep = (float)(1.0 - eps), spread = (float)(eps / (double)C);
#pragma omp parallel for num_threads(dl_get_num_threads()) if (R * C >= DL_PARALLEL_GRAIN)
    for (int64_t r = 0; r < R; r++) {
        const float *xs = x + SAMPLE_BASE(r), *ts = target + SAMPLE_BASE(r); // (C), stride S
        float lse = lse_f32(xs, C, S);
        double acc = 0;
        for (int64_t c = 0; c < C; c++) {
            float q = eps > 0 ? ts[c * S] * keep + spread : ts[c * S];
            float w = weight ? weight[c] : 1.0f;
            acc += (double)(w * q) * (xs[c * S] - lse);
        }
        out[r] = (float)-acc;
    }
}

static void cross_entropy_prob_f64(double *out, const double *x, const double *target,
                                   const double *weight, int64_t N, int64_t C, int64_t S,
                                   double eps) { // out is (N,S), x, target are (N,C,S)
    int64_t R = N * S;
    const double keep = 1.0 - eps, spread = eps / (double)C;
#pragma omp parallel for num_threads(dl_get_num_threads()) if (R * C >= DL_PARALLEL_GRAIN)
    for (int64_t r = 0; r < R; r++) {
        const double *xs = x + SAMPLE_BASE(r), *ts = target + SAMPLE_BASE(r); // (C), stride S
        double lse = lse_f64(xs, C, S);
        double acc = 0;
        for (int64_t c = 0; c < C; c++) {
            double q = eps > 0 ? ts[c * S] * keep + spread : ts[c * S];
            acc += (weight ? weight[c] : 1.0) * q * (xs[c * S] - lse);
        }
        out[r] = -acc;
    }
}

static void cross_entropy_prob_backward_f32(float *gx, float *gtarget, const float *g, float g0,
                                            const float *x, const float *target,
                                            const float *weight, int64_t N, int64_t C, int64_t S,
                                            double eps) { // gx, gtarget, x, target are (N,C,S)
    int64_t R = N * S;
    const float keep = (float)(1.0 - eps), spread = (float)(eps / (double)C);
#pragma omp parallel for num_threads(dl_get_num_threads()) if (R * C >= DL_PARALLEL_GRAIN)
    for (int64_t r = 0; r < R; r++) {
        int64_t b = SAMPLE_BASE(r);
        const float *xs = x + b, *ts = target + b; // (C), stride S
        float G = g ? g[r] : g0;
        float lse = lse_f32(xs, C, S);
        if (gx) {
            double acc = 0;
            for (int64_t c = 0; c < C; c++) {
                float q = eps > 0 ? ts[c * S] * keep + spread : ts[c * S];
                acc += (double)(weight ? weight[c] : 1.0f) * q;
            }
            float swq = (float)acc;
            for (int64_t c = 0; c < C; c++) {
                float q = eps > 0 ? ts[c * S] * keep + spread : ts[c * S];
                float w = weight ? weight[c] : 1.0f;
                gx[b + c * S] = G * (dl_cpu_expf(xs[c * S] - lse) * swq - w * q);
            }
        }
        if (gtarget)
            for (int64_t c = 0; c < C; c++) {
                float w = weight ? weight[c] : 1.0f;
                gtarget[b + c * S] = -G * keep * w * (xs[c * S] - lse);
            }
    }
}

static void cross_entropy_prob_backward_f64(double *gx, double *gtarget, const double *g, double g0,
                                            const double *x, const double *target,
                                            const double *weight, int64_t N, int64_t C, int64_t S,
                                            double eps) { // all are (N,C,S)
    int64_t R = N * S;
    const double keep = 1.0 - eps, spread = eps / (double)C;
#pragma omp parallel for num_threads(dl_get_num_threads()) if (R * C >= DL_PARALLEL_GRAIN)
    for (int64_t r = 0; r < R; r++) {
        int64_t b = SAMPLE_BASE(r);
        const double *xs = x + b, *ts = target + b; // (C), stride S
        double G = g ? g[r] : g0;
        double lse = lse_f64(xs, C, S);
        if (gx) {
            double swq = 0;
            for (int64_t c = 0; c < C; c++) {
                double q = eps > 0 ? ts[c * S] * keep + spread : ts[c * S];
                swq += (weight ? weight[c] : 1.0) * q;
            }
            for (int64_t c = 0; c < C; c++) {
                double q = eps > 0 ? ts[c * S] * keep + spread : ts[c * S];
                double w = weight ? weight[c] : 1.0;
                gx[b + c * S] = G * (exp(xs[c * S] - lse) * swq - w * q);
            }
        }
        if (gtarget)
            for (int64_t c = 0; c < C; c++) {
                double w = weight ? weight[c] : 1.0;
                gtarget[b + c * S] = -G * keep * w * (xs[c * S] - lse);
            }
    }
}

/* --- pointwise losses ------------------------------------------------------------------------ */

/* softplus(-x) = log(1 + exp(-x)), stable for any x. */
static inline float softplus_neg_f32(float x) {
    return fmaxf(-x, 0.0f) + log1pf(expf(-fabsf(x)));
}
static inline double softplus_neg_f64(double x) {
    return fmax(-x, 0.0) + log1p(exp(-fabs(x)));
}

static inline float loss_f32(float x, float y, const float *w, const float *pw, int64_t i,
                             dl_pointwise_loss op) {
    switch (op) {
    case DL_POINTWISE_MSE: return (x - y) * (x - y);
    case DL_POINTWISE_L1: return fabsf(x - y);
    case DL_POINTWISE_BCE_LOGITS: {
        float lw = pw ? 1.0f + (pw[i] - 1.0f) * y : 1.0f;
        float l = (1.0f - y) * x + lw * softplus_neg_f32(x);
        return w ? l * w[i] : l;
    }
    }
    return 0;
}

static inline double loss_f64(double x, double y, const double *w, const double *pw, int64_t i,
                              dl_pointwise_loss op) {
    switch (op) {
    case DL_POINTWISE_MSE: return (x - y) * (x - y);
    case DL_POINTWISE_L1: return fabs(x - y);
    case DL_POINTWISE_BCE_LOGITS: {
        double lw = pw ? 1.0 + (pw[i] - 1.0) * y : 1.0;
        double l = (1.0 - y) * x + lw * softplus_neg_f64(x);
        return w ? l * w[i] : l;
    }
    }
    return 0;
}

/* d loss / dx and d loss / dy at one element, times G. */
static inline void grad_f32(float *dx, float *dy, float x, float y, const float *w, const float *pw,
                            int64_t i, float G, dl_pointwise_loss op) {
    switch (op) {
    case DL_POINTWISE_MSE:
        *dx = 2.0f * (x - y) * G;
        *dy = -*dx;
        return;
    case DL_POINTWISE_L1: {
        float d = x - y;
        *dx = (float)((d > 0) - (d < 0)) * G;
        *dy = -*dx;
        return;
    }
    case DL_POINTWISE_BCE_LOGITS: {
        float s = 1.0f / (1.0f + expf(-x));
        float gw = w ? G * w[i] : G;
        if (pw) {
            float t = pw[i] * y;
            *dx = ((t + 1.0f - y) * s - t) * gw;
            *dy = (-x + (pw[i] - 1.0f) * softplus_neg_f32(x)) * gw;
        } else {
            *dx = (s - y) * gw;
            *dy = -x * gw;
        }
        return;
    }
    }
}

static inline void grad_f64(double *dx, double *dy, double x, double y, const double *w,
                            const double *pw, int64_t i, double G, dl_pointwise_loss op) {
    switch (op) {
    case DL_POINTWISE_MSE:
        *dx = 2.0 * (x - y) * G;
        *dy = -*dx;
        return;
    case DL_POINTWISE_L1: {
        double d = x - y;
        *dx = (double)((d > 0) - (d < 0)) * G;
        *dy = -*dx;
        return;
    }
    case DL_POINTWISE_BCE_LOGITS: {
        double s = 1.0 / (1.0 + exp(-x));
        double gw = w ? G * w[i] : G;
        if (pw) {
            double t = pw[i] * y;
            *dx = ((t + 1.0 - y) * s - t) * gw;
            *dy = (-x + (pw[i] - 1.0) * softplus_neg_f64(x)) * gw;
        } else {
            *dx = (s - y) * gw;
            *dy = -x * gw;
        }
        return;
    }
    }
}

static void pointwise_loss_f32(float *out, const float *x, const float *y, const float *w,
                               const float *pw, int64_t n, dl_pointwise_loss op) { // all (n)
#pragma omp parallel for num_threads(dl_get_num_threads()) if (n >= DL_PARALLEL_GRAIN)
    for (int64_t i = 0; i < n; i++) out[i] = loss_f32(x[i], y[i], w, pw, i, op);
}

static void pointwise_loss_f64(double *out, const double *x, const double *y, const double *w,
                               const double *pw, int64_t n, dl_pointwise_loss op) { // all (n)
#pragma omp parallel for num_threads(dl_get_num_threads()) if (n >= DL_PARALLEL_GRAIN)
    for (int64_t i = 0; i < n; i++) out[i] = loss_f64(x[i], y[i], w, pw, i, op);
}

static void pointwise_loss_backward_f32(float *gx, float *gy, const float *g, float g0,
                                        const float *x, const float *y, const float *w,
                                        const float *pw, int64_t n,
                                        dl_pointwise_loss op) { // all (n)
#pragma omp parallel for num_threads(dl_get_num_threads()) if (n >= DL_PARALLEL_GRAIN)
    for (int64_t i = 0; i < n; i++) {
        float dx = 0, dy = 0;
        grad_f32(&dx, &dy, x[i], y[i], w, pw, i, g ? g[i] : g0, op);
        if (gx) gx[i] = dx;
        if (gy) gy[i] = dy;
    }
}

static void pointwise_loss_backward_f64(double *gx, double *gy, const double *g, double g0,
                                        const double *x, const double *y, const double *w,
                                        const double *pw, int64_t n,
                                        dl_pointwise_loss op) { // all (n)
#pragma omp parallel for num_threads(dl_get_num_threads()) if (n >= DL_PARALLEL_GRAIN)
    for (int64_t i = 0; i < n; i++) {
        double dx = 0, dy = 0;
        grad_f64(&dx, &dy, x[i], y[i], w, pw, i, g ? g[i] : g0, op);
        if (gx) gx[i] = dx;
        if (gy) gy[i] = dy;
    }
}

/* --- entry points (kernels/loss.h has their contract) ------------------------------------- */

static int float_only(const char *op, dl_dtype dt) {
    if (dt == DL_DTYPE_F32 || dt == DL_DTYPE_F64) return 0;
    return dl_error("%s: CPU kernels take float32 or float64, got %s", op, dl_dtype_name(dt));
}

int dl_cpu_loss_sum(dl_dtype dt, int64_t n, double *out, const void *v) {
    if (float_only("loss sum", dt)) return -1;
    *out = dt == DL_DTYPE_F64 ? sum_f64(v, n) : sum_f32(v, n);
    return 0;
}

int dl_cpu_class_weight_sum(dl_dtype dt, const dl_class_loss_shape *s, double *out,
                            const int64_t *target, const void *weight) {
    if (float_only("class weight sum", dt)) return -1;
    int64_t n = s->N * s->S;
    *out = dt == DL_DTYPE_F64 ? class_weight_sum_f64(target, weight, n, s->ignore_index)
                              : class_weight_sum_f32(target, weight, n, s->ignore_index);
    return 0;
}

int dl_cpu_loss_target_check(const dl_class_loss_shape *s, int64_t *first_bad,
                             const int64_t *target) {
    int64_t n = s->N * s->S, i = 0;
    for (; i < n; i++)
        if (target[i] != s->ignore_index && (target[i] < 0 || target[i] >= s->C)) break;
    *first_bad = i;
    return 0;
}

int dl_cpu_nll_loss(dl_dtype dt, const dl_class_loss_shape *s, void *out, const void *logp,
                    const int64_t *target, const void *weight) {
    if (float_only("nll_loss", dt)) return -1;
    if (dt == DL_DTYPE_F64)
        nll_loss_f64(out, logp, target, weight, s->N, s->C, s->S, s->ignore_index);
    else
        nll_loss_f32(out, logp, target, weight, s->N, s->C, s->S, s->ignore_index);
    return 0;
}

int dl_cpu_nll_loss_backward(dl_dtype dt, const dl_class_loss_shape *s, void *gx, const void *g,
                             double g0, const int64_t *target, const void *weight) {
    if (float_only("nll_loss_backward", dt)) return -1;
    if (dt == DL_DTYPE_F64)
        nll_loss_backward_f64(gx, g, g0, target, weight, s->N, s->C, s->S, s->ignore_index);
    else
        nll_loss_backward_f32(gx, g, (float)g0, target, weight, s->N, s->C, s->S, s->ignore_index);
    return 0;
}

int dl_cpu_cross_entropy(dl_dtype dt, const dl_class_loss_shape *s, void *out, const void *x,
                         const int64_t *target, const void *weight) {
    if (float_only("cross_entropy", dt)) return -1;
    if (dt == DL_DTYPE_F64)
        cross_entropy_f64(out, x, target, weight, s->N, s->C, s->S, s->ignore_index, s->eps);
    else
        cross_entropy_f32(out, x, target, weight, s->N, s->C, s->S, s->ignore_index, s->eps);
    return 0;
}

int dl_cpu_cross_entropy_backward(dl_dtype dt, const dl_class_loss_shape *s, void *gx,
                                  const void *g, double g0, const void *x, const int64_t *target,
                                  const void *weight) {
    if (float_only("cross_entropy_backward", dt)) return -1;
    if (dt == DL_DTYPE_F64)
        cross_entropy_backward_f64(gx, g, g0, x, target, weight, s->N, s->C, s->S, s->ignore_index,
                                   s->eps);
    else
        cross_entropy_backward_f32(gx, g, (float)g0, x, target, weight, s->N, s->C, s->S,
                                   s->ignore_index, s->eps);
    return 0;
}

int dl_cpu_cross_entropy_prob(dl_dtype dt, const dl_class_loss_shape *s, void *out, const void *x,
                              const void *target, const void *weight) {
    if (float_only("cross_entropy", dt)) return -1;
    if (dt == DL_DTYPE_F64)
        cross_entropy_prob_f64(out, x, target, weight, s->N, s->C, s->S, s->eps);
    else
        cross_entropy_prob_f32(out, x, target, weight, s->N, s->C, s->S, s->eps);
    return 0;
}

int dl_cpu_cross_entropy_prob_backward(dl_dtype dt, const dl_class_loss_shape *s, void *gx,
                                       void *gtarget, const void *g, double g0, const void *x,
                                       const void *target, const void *weight) {
    if (float_only("cross_entropy_backward", dt)) return -1;
    if (dt == DL_DTYPE_F64)
        cross_entropy_prob_backward_f64(gx, gtarget, g, g0, x, target, weight, s->N, s->C, s->S,
                                        s->eps);
    else
        cross_entropy_prob_backward_f32(gx, gtarget, g, (float)g0, x, target, weight, s->N, s->C,
                                        s->S, s->eps);
    return 0;
}

int dl_cpu_pointwise_loss(dl_dtype dt, dl_pointwise_loss op, int64_t n, void *out, const void *x,
                          const void *y, const void *w, const void *pw) {
    if (float_only("pointwise loss", dt)) return -1;
    if (dt == DL_DTYPE_F64)
        pointwise_loss_f64(out, x, y, w, pw, n, op);
    else
        pointwise_loss_f32(out, x, y, w, pw, n, op);
    return 0;
}

int dl_cpu_pointwise_loss_backward(dl_dtype dt, dl_pointwise_loss op, int64_t n, void *gx, void *gy,
                                   const void *g, double g0, const void *x, const void *y,
                                   const void *w, const void *pw) {
    if (float_only("pointwise loss backward", dt)) return -1;
    if (dt == DL_DTYPE_F64)
        pointwise_loss_backward_f64(gx, gy, g, g0, x, y, w, pw, n, op);
    else
        pointwise_loss_backward_f32(gx, gy, g, (float)g0, x, y, w, pw, n, op);
    return 0;
}
