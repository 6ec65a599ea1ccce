/* cpu/loss.c - CPU kernels of the loss functions (see loss.h for the
 * layouts and formulas).
 *
 * Layout: block sums; nll; cross entropy (class indices, then class
 * probabilities); the pointwise losses with one scalar function per loss.
 * Each is written once and instantiated for float32 and float64.  Per-sample loops run in
 * parallel over samples (each sample is written by one thread); every sum goes
 * through fixed blocks whose size depends only on n. */
#include "cpu/loss.h"
#include "core/error.h"
#include "core/parallel.h"
#include "cpu/softmax.h" /* dl_cpu_expf */

#include <string.h>

/* Each kernel below is written once, as a DEFINE_<kernel>(name, T) macro,
 * and instantiated for T = float and double by name (grep finds
 * nll_loss_f32 at its DEFINE line).  Arithmetic stays in T as two
 * hand-written copies had it: constants are (T) casts, sums that the
 * float32 kernels accumulate in double do so in both, and the math that
 * differs by type goes through the _Generic helpers here: FAST_EXP is
 * dl_cpu_expf for float and libm's exp for double; LSE picks lse_f32 (SIMD,
 * a double sum) or lse_f64; tgmath.h makes exp, fabs, fmax and log1p follow
 * their argument's type. */
#include <tgmath.h>

static inline double exp_f64(double x) {
    return exp(x);
}
#define FAST_EXP(x) _Generic((x), float : dl_cpu_expf, default : exp_f64)(x)

/* --- sums ------------------------------------------------------------------------------- */

#define SUM_MAX_BLOCKS 1024

/* Block length for n elements: at least 4096, at most SUM_MAX_BLOCKS blocks. */
static int64_t sum_block(int64_t n) {
    int64_t b = (n + SUM_MAX_BLOCKS - 1) / SUM_MAX_BLOCKS;
    return b < 4096 ? 4096 : b;
}

#define DEFINE_SUM(name, T)                                                                        \
    static double name(const T *v, int64_t n) { /* v is (n) */                                     \
        int64_t B = sum_block(n), nb = (n + B - 1) / B;                                            \
        double part[SUM_MAX_BLOCKS];                                                               \
        DL_PARALLEL_FOR(n >= DL_PARALLEL_GRAIN)                                                    \
        for (int64_t b = 0; b < nb; b++) {                                                         \
            int64_t lo = b * B, hi = lo + B < n ? lo + B : n;                                      \
            double s = 0;                                                                          \
            for (int64_t i = lo; i < hi; i++) s += v[i];                                           \
            part[b] = s;                                                                           \
        }                                                                                          \
        double s = 0;                                                                              \
        for (int64_t b = 0; b < nb; b++) s += part[b];                                             \
        return s;                                                                                  \
    }
DEFINE_SUM(sum_f32, float)
DEFINE_SUM(sum_f64, double)

/* target is (n), weight is (C) */
#define DEFINE_CLASS_WEIGHT_SUM(name, T)                                                           \
    static double name(const int64_t *target, const T *weight, int64_t n, int64_t ignore_index) {  \
        double s = 0;                                                                              \
        for (int64_t i = 0; i < n; i++)                                                            \
            if (target[i] != ignore_index) s += weight ? weight[target[i]] : (T)1;                 \
        return s;                                                                                  \
    }
DEFINE_CLASS_WEIGHT_SUM(class_weight_sum_f32, float)
DEFINE_CLASS_WEIGHT_SUM(class_weight_sum_f64, double)

/* --- nll ---------------------------------------------------------------------------------- */

/* Sample r = n*S + s; its class c lies at (n*C + c)*S + s. */
#define SAMPLE_BASE(r) (((r) / S) * C * S + (r) % S)

/* out is (N,S), logp is (N,C,S) */
#define DEFINE_NLL_LOSS(name, T)                                                                   \
    static void name(T *out, const T *logp, const int64_t *target, const T *weight, int64_t N,     \
                     int64_t C, int64_t S, int64_t ignore_index) {                                 \
        int64_t R = N * S;                                                                         \
        DL_PARALLEL_FOR(R >= DL_PARALLEL_GRAIN)                                                    \
        for (int64_t r = 0; r < R; r++) {                                                          \
            int64_t t = target[r];                                                                 \
            if (t == ignore_index) {                                                               \
                out[r] = 0;                                                                        \
                continue;                                                                          \
            }                                                                                      \
            T w = weight ? weight[t] : (T)1;                                                       \
            out[r] = -w * logp[SAMPLE_BASE(r) + t * S];                                            \
        }                                                                                          \
    }
DEFINE_NLL_LOSS(nll_loss_f32, float)
DEFINE_NLL_LOSS(nll_loss_f64, double)

/* gx is (N,C,S), g is (N,S) */
#define DEFINE_NLL_LOSS_BACKWARD(name, T)                                                          \
    static void name(T *gx, const T *g, T g0, const int64_t *target, const T *weight, int64_t N,   \
                     int64_t C, int64_t S, int64_t ignore_index) {                                 \
        int64_t R = N * S;                                                                         \
        memset(gx, 0, (size_t)(R * C) * sizeof *gx);                                               \
        DL_PARALLEL_FOR(R >= DL_PARALLEL_GRAIN)                                                    \
        for (int64_t r = 0; r < R; r++) {                                                          \
            int64_t t = target[r];                                                                 \
            if (t == ignore_index) continue;                                                       \
            T w = weight ? weight[t] : (T)1;                                                       \
            gx[SAMPLE_BASE(r) + t * S] = -w * (g ? g[r] : g0);                                     \
        }                                                                                          \
    }
DEFINE_NLL_LOSS_BACKWARD(nll_loss_backward_f32, float)
DEFINE_NLL_LOSS_BACKWARD(nll_loss_backward_f64, double)

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

#define LSE(x, C, S) _Generic((x), const float * : lse_f32, const double * : lse_f64)(x, C, S)

/* Sum of the class weights (C without weights). */
#define DEFINE_WEIGHT_TOTAL(name, T)                                                               \
    static double name(const T *weight, int64_t C) {                                               \
        if (!weight) return (double)C;                                                             \
        double s = 0;                                                                              \
        for (int64_t c = 0; c < C; c++) s += weight[c];                                            \
        return s;                                                                                  \
    }
DEFINE_WEIGHT_TOTAL(weight_total_f32, float)
DEFINE_WEIGHT_TOTAL(weight_total_f64, double)

/* --- cross entropy: class indices ----------------------------------------------------------- */

/* out is (N,S), x is (N,C,S) */
#define DEFINE_CROSS_ENTROPY(name, T)                                                              \
    static void name(T *out, const T *x, const int64_t *target, const T *weight, int64_t N,        \
                     int64_t C, int64_t S, int64_t ignore_index, double eps) {                     \
        int64_t R = N * S;                                                                         \
        const T keep = (T)(1.0 - eps), spread = (T)(eps / (double)C);                              \
        DL_PARALLEL_FOR(R *C >= DL_PARALLEL_GRAIN)                                                 \
        for (int64_t r = 0; r < R; r++) {                                                          \
            int64_t t = target[r];                                                                 \
            if (t == ignore_index) {                                                               \
                out[r] = 0;                                                                        \
                continue;                                                                          \
            }                                                                                      \
            const T *xs = x + SAMPLE_BASE(r); /* xs is (C), stride S */                            \
            T lse = LSE(xs, C, S);                                                                 \
            T w = weight ? weight[t] : (T)1;                                                       \
            T loss = w * (lse - xs[t * S]);                                                        \
            if (eps > 0) {                                                                         \
                double smooth = 0;                                                                 \
                for (int64_t c = 0; c < C; c++)                                                    \
                    smooth += (double)(weight ? weight[c] : (T)1) * (lse - xs[c * S]);             \
                loss = keep * loss + spread * (T)smooth;                                           \
            }                                                                                      \
            out[r] = loss;                                                                         \
        }                                                                                          \
    }
DEFINE_CROSS_ENTROPY(cross_entropy_f32, float)
DEFINE_CROSS_ENTROPY(cross_entropy_f64, double)

/* gx, x are (N,C,S), g is (N,S) */
#define DEFINE_CROSS_ENTROPY_BACKWARD(name, T, weight_total)                                       \
    static void name(T *gx, const T *g, T g0, const T *x, const int64_t *target, const T *weight,  \
                     int64_t N, int64_t C, int64_t S, int64_t ignore_index, double eps) {          \
        int64_t R = N * S;                                                                         \
        const T keep = (T)(1.0 - eps), spread = (T)(eps / (double)C);                              \
        const T wall = (T)weight_total(weight, C);                                                 \
        DL_PARALLEL_FOR(R *C >= DL_PARALLEL_GRAIN)                                                 \
        for (int64_t r = 0; r < R; r++) {                                                          \
            int64_t t = target[r];                                                                 \
            const T *xs = x + SAMPLE_BASE(r); /* xs, gs are (C), stride S */                       \
            T *gs = gx + SAMPLE_BASE(r);                                                           \
            if (t == ignore_index) {                                                               \
                for (int64_t c = 0; c < C; c++) gs[c * S] = 0;                                     \
                continue;                                                                          \
            }                                                                                      \
            T G = g ? g[r] : g0;                                                                   \
            T lse = LSE(xs, C, S);                                                                 \
            T wt = weight ? weight[t] : (T)1;                                                      \
            T coef = keep * wt + spread * wall;                                                    \
            if (eps > 0) {                                                                         \
                for (int64_t c = 0; c < C; c++) {                                                  \
                    T v = FAST_EXP(xs[c * S] - lse) * coef;                                        \
                    gs[c * S] = G * (v - spread * (weight ? weight[c] : (T)1));                    \
                }                                                                                  \
            } else {                                                                               \
                _Pragma("omp simd") for (int64_t c = 0; c < C; c++) gs[c * S] =                    \
                    G * (FAST_EXP(xs[c * S] - lse) * coef);                                        \
            }                                                                                      \
            gs[t * S] -= G * keep * wt;                                                            \
        }                                                                                          \
    }
DEFINE_CROSS_ENTROPY_BACKWARD(cross_entropy_backward_f32, float, weight_total_f32)
DEFINE_CROSS_ENTROPY_BACKWARD(cross_entropy_backward_f64, double, weight_total_f64)

/* --- cross entropy: class probabilities ------------------------------------------------------ */

/* out is (N,S), x, target are (N,C,S) */
#define DEFINE_CROSS_ENTROPY_PROB(name, T)                                                         \
    static void name(T *out, const T *x, const T *target, const T *weight, int64_t N, int64_t C,   \
                     int64_t S, double eps) {                                                      \
        int64_t R = N * S;                                                                         \
        const T keep = (T)(1.0 - eps), spread = (T)(eps / (double)C);                              \
        DL_PARALLEL_FOR(R *C >= DL_PARALLEL_GRAIN)                                                 \
        for (int64_t r = 0; r < R; r++) {                                                          \
            const T *xs = x + SAMPLE_BASE(r), *ts = target + SAMPLE_BASE(r); /* (C), stride S */   \
            T lse = LSE(xs, C, S);                                                                 \
            double acc = 0;                                                                        \
            for (int64_t c = 0; c < C; c++) {                                                      \
                T q = eps > 0 ? ts[c * S] * keep + spread : ts[c * S];                             \
                T w = weight ? weight[c] : (T)1;                                                   \
                acc += (double)(w * q) * (xs[c * S] - lse);                                        \
            }                                                                                      \
            out[r] = (T)-acc;                                                                      \
        }                                                                                          \
    }
DEFINE_CROSS_ENTROPY_PROB(cross_entropy_prob_f32, float)
DEFINE_CROSS_ENTROPY_PROB(cross_entropy_prob_f64, double)

/* gx, gtarget, x, target are (N,C,S), g is (N,S) */
#define DEFINE_CROSS_ENTROPY_PROB_BACKWARD(name, T)                                                \
    static void name(T *gx, T *gtarget, const T *g, T g0, const T *x, const T *target,             \
                     const T *weight, int64_t N, int64_t C, int64_t S, double eps) {               \
        int64_t R = N * S;                                                                         \
        const T keep = (T)(1.0 - eps), spread = (T)(eps / (double)C);                              \
        DL_PARALLEL_FOR(R *C >= DL_PARALLEL_GRAIN)                                                 \
        for (int64_t r = 0; r < R; r++) {                                                          \
            int64_t b = SAMPLE_BASE(r);                                                            \
            const T *xs = x + b, *ts = target + b; /* (C), stride S */                             \
            T G = g ? g[r] : g0;                                                                   \
            T lse = LSE(xs, C, S);                                                                 \
            if (gx) {                                                                              \
                double acc = 0;                                                                    \
                for (int64_t c = 0; c < C; c++) {                                                  \
                    T q = eps > 0 ? ts[c * S] * keep + spread : ts[c * S];                         \
                    acc += (double)(weight ? weight[c] : (T)1) * q;                                \
                }                                                                                  \
                T swq = (T)acc;                                                                    \
                for (int64_t c = 0; c < C; c++) {                                                  \
                    T q = eps > 0 ? ts[c * S] * keep + spread : ts[c * S];                         \
                    T w = weight ? weight[c] : (T)1;                                               \
                    gx[b + c * S] = G * (FAST_EXP(xs[c * S] - lse) * swq - w * q);                 \
                }                                                                                  \
            }                                                                                      \
            if (gtarget)                                                                           \
                for (int64_t c = 0; c < C; c++) {                                                  \
                    T w = weight ? weight[c] : (T)1;                                               \
                    gtarget[b + c * S] = -G * keep * w * (xs[c * S] - lse);                        \
                }                                                                                  \
        }                                                                                          \
    }
DEFINE_CROSS_ENTROPY_PROB_BACKWARD(cross_entropy_prob_backward_f32, float)
DEFINE_CROSS_ENTROPY_PROB_BACKWARD(cross_entropy_prob_backward_f64, double)

/* --- pointwise losses ------------------------------------------------------------------------ */

/* softplus(-x) = log(1 + exp(-x)), stable for any x (T by tgmath.h). */
#define DEFINE_SOFTPLUS_NEG(name, T)                                                               \
    static inline T name(T x) {                                                                    \
        return fmax(-x, (T)0) + log1p(exp(-fabs(x)));                                              \
    }
DEFINE_SOFTPLUS_NEG(softplus_neg_f32, float)
DEFINE_SOFTPLUS_NEG(softplus_neg_f64, double)
#define SOFTPLUS_NEG(x) _Generic((x), float : softplus_neg_f32, double : softplus_neg_f64)(x)

/* The loss at one element. */
#define DEFINE_LOSS_AT(name, T)                                                                    \
    static inline T name(T x, T y, const T *w, const T *pw, int64_t i, dl_pointwise_loss op) {     \
        switch (op) {                                                                              \
        case DL_POINTWISE_MSE: return (x - y) * (x - y);                                           \
        case DL_POINTWISE_L1: return fabs(x - y);                                                  \
        case DL_POINTWISE_BCE_LOGITS: {                                                            \
            T lw = pw ? (T)1 + (pw[i] - (T)1) * y : (T)1;                                          \
            T l = ((T)1 - y) * x + lw * SOFTPLUS_NEG(x);                                           \
            return w ? l * w[i] : l;                                                               \
        }                                                                                          \
        }                                                                                          \
        return 0;                                                                                  \
    }
DEFINE_LOSS_AT(loss_f32, float)
DEFINE_LOSS_AT(loss_f64, double)

/* d loss / dx and d loss / dy at one element, times G. */
#define DEFINE_GRAD_AT(name, T)                                                                    \
    static inline void name(T *dx, T *dy, T x, T y, const T *w, const T *pw, int64_t i, T G,       \
                            dl_pointwise_loss op) {                                                \
        switch (op) {                                                                              \
        case DL_POINTWISE_MSE:                                                                     \
            *dx = (T)2 * (x - y) * G;                                                              \
            *dy = -*dx;                                                                            \
            return;                                                                                \
        case DL_POINTWISE_L1: {                                                                    \
            T d = x - y;                                                                           \
            *dx = (T)((d > 0) - (d < 0)) * G;                                                      \
            *dy = -*dx;                                                                            \
            return;                                                                                \
        }                                                                                          \
        case DL_POINTWISE_BCE_LOGITS: {                                                            \
            T s = (T)1 / ((T)1 + exp(-x));                                                         \
            T gw = w ? G * w[i] : G;                                                               \
            if (pw) {                                                                              \
                T t = pw[i] * y;                                                                   \
                *dx = ((t + (T)1 - y) * s - t) * gw;                                               \
                *dy = (-x + (pw[i] - (T)1) * SOFTPLUS_NEG(x)) * gw;                                \
            } else {                                                                               \
                *dx = (s - y) * gw;                                                                \
                *dy = -x * gw;                                                                     \
            }                                                                                      \
            return;                                                                                \
        }                                                                                          \
        }                                                                                          \
    }
DEFINE_GRAD_AT(grad_f32, float)
DEFINE_GRAD_AT(grad_f64, double)

/* all (n) */
#define DEFINE_POINTWISE_LOSS(name, T, loss_at)                                                    \
    static void name(T *out, const T *x, const T *y, const T *w, const T *pw, int64_t n,           \
                     dl_pointwise_loss op) {                                                       \
        DL_PARALLEL_FOR(n >= DL_PARALLEL_GRAIN)                                                    \
        for (int64_t i = 0; i < n; i++) out[i] = loss_at(x[i], y[i], w, pw, i, op);                \
    }
DEFINE_POINTWISE_LOSS(pointwise_loss_f32, float, loss_f32)
DEFINE_POINTWISE_LOSS(pointwise_loss_f64, double, loss_f64)

/* all (n) */
#define DEFINE_POINTWISE_LOSS_BACKWARD(name, T, grad_at)                                           \
    static void name(T *gx, T *gy, const T *g, T g0, const T *x, const T *y, const T *w,           \
                     const T *pw, int64_t n, dl_pointwise_loss op) {                               \
        DL_PARALLEL_FOR(n >= DL_PARALLEL_GRAIN)                                                    \
        for (int64_t i = 0; i < n; i++) {                                                          \
            T dx = 0, dy = 0;                                                                      \
            grad_at(&dx, &dy, x[i], y[i], w, pw, i, g ? g[i] : g0, op);                            \
            if (gx) gx[i] = dx;                                                                    \
            if (gy) gy[i] = dy;                                                                    \
        }                                                                                          \
    }
DEFINE_POINTWISE_LOSS_BACKWARD(pointwise_loss_backward_f32, float, grad_f32)
DEFINE_POINTWISE_LOSS_BACKWARD(pointwise_loss_backward_f64, double, grad_f64)

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
