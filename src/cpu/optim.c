/* optim.c - CPU kernels of the fused optimizer steps (see optim.h for the
 * formulas).  One loop per optimizer, written once for float and double,
 * one rounded operation per statement, in the order of the Lua tensor-op
 * updates (the build, like the elementwise kernels', emits no fused
 * multiply-add), so the results equal the Lua step's.  Tensors are walked
 * one after another, each split over OpenMP threads when large. */
#include "optim.h"
#include "core/parallel.h"

#include <tgmath.h>

static void *data_or_null(dl_tensor *t) {
    return t ? dl_tensor_data_ptr(t) : NULL;
}

/* One step's kernel on one tensor set; c is the step's coefficients. */
typedef void (*step_fn)(const dl_optim_tensors *t, const void *c);

/* Runs the float32 or float64 kernel, by each parameter's dtype, on the n
 * tensor sets one after another. */
static void each_tensor(int n, const dl_optim_tensors *ts, const void *c, step_fn f32,
                        step_fn f64) {
    for (int k = 0; k < n; k++) (ts[k].param->dtype == DL_DTYPE_F64 ? f64 : f32)(&ts[k], c);
}

/* --- SGD ------------------------------------------------------------------- */

/* Each step is written once as DEFINE_<step>(name, T) and instantiated for
 * float and double by name; coefficients are rounded to T once, as the Lua
 * step's scalars are, and tgmath.h makes sqrt follow T. */
#define DEFINE_SGD(name, T)                                                                        \
    static void name(const dl_optim_tensors *t, const void *vc) {                                  \
        const dl_sgd_coeffs *c = vc;                                                               \
        T *p = dl_tensor_data_ptr(t->param), *buf = data_or_null(t->buf); /* p, buf are (len,) */  \
        const T *g = dl_tensor_data_ptr(t->grad);                         /* g is (len,) */        \
        const T neg_lr = (T)c->neg_lr, mom = (T)c->momentum;                                       \
        const T omd = (T)c->one_minus_damp, wd = (T)c->weight_decay;                               \
        const int use_wd = c->weight_decay != 0, use_mom = c->momentum != 0;                       \
        const int fresh = t->fresh, nesterov = c->nesterov, maximize = c->maximize;                \
        int64_t len = dl_tensor_numel(t->param);                                                   \
        DL_PARALLEL_FOR(len >= DL_PARALLEL_GRAIN)                                                  \
        for (int64_t i = 0; i < len; i++) {                                                        \
            T d = maximize ? -g[i] : g[i];                                                         \
            if (use_wd) {                                                                          \
                T x = wd * p[i];                                                                   \
                d = d + x;                                                                         \
            }                                                                                      \
            if (use_mom) {                                                                         \
                T b = d;                                                                           \
                if (!fresh) {                                                                      \
                    T b1 = buf[i] * mom, x = omd * d;                                              \
                    b = b1 + x;                                                                    \
                }                                                                                  \
                buf[i] = b;                                                                        \
                if (nesterov) {                                                                    \
                    T x = mom * b;                                                                 \
                    d = d + x;                                                                     \
                } else {                                                                           \
                    d = b;                                                                         \
                }                                                                                  \
            }                                                                                      \
            T x = neg_lr * d;                                                                      \
            p[i] = p[i] + x;                                                                       \
        }                                                                                          \
    }
DEFINE_SGD(sgd_f32, float)
DEFINE_SGD(sgd_f64, double)

void dl_cpu_sgd_step(int n, const dl_optim_tensors *ts, const dl_sgd_coeffs *c) {
    each_tensor(n, ts, c, sgd_f32, sgd_f64);
}

/* --- Adam / AdamW ------------------------------------------------------------- */

/* PyTorch's maximum: NaN wins. */
#define DEFINE_MAX_NAN(name, T)                                                                    \
    static inline T name(T x, T y) {                                                               \
        return x != x ? x : y != y ? y : x < y ? y : x;                                            \
    }
DEFINE_MAX_NAN(max_nan_f32, float)
DEFINE_MAX_NAN(max_nan_f64, double)

#define DEFINE_ADAM(name, T, max_nan)                                                              \
    static void name(const dl_optim_tensors *t, const void *vc) {                                  \
        const dl_adam_coeffs *c = vc;                                                              \
        T *p = dl_tensor_data_ptr(t->param);      /* p is (len,) */                                \
        const T *g = dl_tensor_data_ptr(t->grad); /* g is (len,) */                                \
        T *m = dl_tensor_data_ptr(t->exp_avg);    /* m is (len,) */                                \
        T *v = dl_tensor_data_ptr(t->exp_avg_sq); /* v is (len,) */                                \
        T *mx = data_or_null(t->max_exp_avg_sq);  /* mx is (len,) or NULL */                       \
        const T b1 = (T)c->beta1, omb1 = (T)c->one_minus_beta1;                                    \
        const T b2 = (T)c->beta2, omb2 = (T)c->one_minus_beta2;                                    \
        const T eps = (T)c->eps, wd = (T)c->weight_decay, decay = (T)c->decay;                     \
        const T nss = (T)t->neg_step_size, bc2s = (T)t->bc2_sqrt;                                  \
        const int decoupled = c->decoupled, use_wd = c->weight_decay != 0;                         \
        const int amsgrad = c->amsgrad && mx, maximize = c->maximize;                              \
        int64_t len = dl_tensor_numel(t->param);                                                   \
        DL_PARALLEL_FOR(len >= DL_PARALLEL_GRAIN)                                                  \
        for (int64_t i = 0; i < len; i++) {                                                        \
            T gi = maximize ? -g[i] : g[i], pi = p[i];                                             \
            if (decoupled) {                                                                       \
                pi = pi * decay;                                                                   \
            } else if (use_wd) {                                                                   \
                T x = wd * pi;                                                                     \
                gi = gi + x;                                                                       \
            }                                                                                      \
            T m1 = m[i] * b1, x1 = omb1 * gi;                                                      \
            T mi = m1 + x1;                                                                        \
            T v1 = v[i] * b2, x2 = gi * omb2;                                                      \
            T x3 = x2 * gi;                                                                        \
            T vi = v1 + x3;                                                                        \
            m[i] = mi;                                                                             \
            v[i] = vi;                                                                             \
            T s = vi;                                                                              \
            if (amsgrad) {                                                                         \
                s = max_nan(mx[i], vi);                                                            \
                mx[i] = s;                                                                         \
            }                                                                                      \
            T d1 = sqrt(s), d2 = d1 / bc2s;                                                        \
            T denom = d2 + eps;                                                                    \
            T u1 = mi * nss, u = u1 / denom;                                                       \
            p[i] = pi + u;                                                                         \
        }                                                                                          \
    }
DEFINE_ADAM(adam_f32, float, max_nan_f32)
DEFINE_ADAM(adam_f64, double, max_nan_f64)

void dl_cpu_adam_step(int n, const dl_optim_tensors *ts, const dl_adam_coeffs *c) {
    each_tensor(n, ts, c, adam_f32, adam_f64);
}
