/* optim.c - CPU kernels of the fused optimizer steps (see optim.h for the
 * formulas).  One loop per optimizer and dtype, one rounded operation per
 * statement, in the order of the Lua tensor-op updates (the build, like the
 * elementwise kernels', emits no fused multiply-add), so the results equal
 * the Lua step's.  Tensors are walked one after another, each split over
 * OpenMP threads when large. */
#include "optim.h"
#include "core/parallel.h"

#include <math.h>

static void *data_or_null(dl_tensor *t) {
    return t ? dl_tensor_data_ptr(t) : NULL;
}

/* --- SGD ------------------------------------------------------------------- */

static void sgd_f32(const dl_optim_tensors *t, const dl_sgd_coeffs *c) {
    float *p = dl_tensor_data_ptr(t->param), *buf = data_or_null(t->buf); // p, buf are (len,)
    const float *g = dl_tensor_data_ptr(t->grad);                         // g is (len,)
    const float neg_lr = (float)c->neg_lr, mom = (float)c->momentum;
    const float omd = (float)c->one_minus_damp, wd = (float)c->weight_decay;
    const int use_wd = c->weight_decay != 0, use_mom = c->momentum != 0;
    const int fresh = t->fresh, nesterov = c->nesterov, maximize = c->maximize;
    int64_t len = dl_tensor_numel(t->param);
#pragma omp parallel for num_threads(dl_get_num_threads()) if (len >= DL_PARALLEL_GRAIN)
    for (int64_t i = 0; i < len; i++) {
        float d = maximize ? -g[i] : g[i];
        if (use_wd) {
            float x = wd * p[i];
            d = d + x;
        }
        if (use_mom) {
            float b = d;
            if (!fresh) {
                float b1 = buf[i] * mom, x = omd * d;
                b = b1 + x;
            }
            buf[i] = b;
            if (nesterov) {
                float x = mom * b;
                d = d + x;
            } else {
                d = b;
            }
        }
        float x = neg_lr * d;
        p[i] = p[i] + x;
    }
}

static void sgd_f64(const dl_optim_tensors *t, const dl_sgd_coeffs *c) {
    double *p = dl_tensor_data_ptr(t->param), *buf = data_or_null(t->buf); // p, buf are (len,)
    const double *g = dl_tensor_data_ptr(t->grad);                         // g is (len,)
    const double neg_lr = c->neg_lr, mom = c->momentum;
    const double omd = c->one_minus_damp, wd = c->weight_decay;
    const int use_wd = c->weight_decay != 0, use_mom = c->momentum != 0;
    const int fresh = t->fresh, nesterov = c->nesterov, maximize = c->maximize;
    int64_t len = dl_tensor_numel(t->param);
#pragma omp parallel for num_threads(dl_get_num_threads()) if (len >= DL_PARALLEL_GRAIN)
    for (int64_t i = 0; i < len; i++) {
        double d = maximize ? -g[i] : g[i];
        if (use_wd) {
            double x = wd * p[i];
            d = d + x;
        }
        if (use_mom) {
            double b = d;
            if (!fresh) {
                double b1 = buf[i] * mom, x = omd * d;
                b = b1 + x;
            }
            buf[i] = b;
            if (nesterov) {
                double x = mom * b;
                d = d + x;
            } else {
                d = b;
            }
        }
        double x = neg_lr * d;
        p[i] = p[i] + x;
    }
}

void dl_cpu_sgd_step(int n, const dl_optim_tensors *ts, const dl_sgd_coeffs *c) {
    for (int k = 0; k < n; k++) {
        if (ts[k].param->dtype == DL_DTYPE_F64)
            sgd_f64(&ts[k], c);
        else
            sgd_f32(&ts[k], c);
    }
}

/* --- Adam / AdamW ------------------------------------------------------------- */

/* PyTorch's maximum: NaN wins. */
static inline float max_nan_f32(float x, float y) {
    return x != x ? x : y != y ? y : x < y ? y : x;
}
static inline double max_nan_f64(double x, double y) {
    return x != x ? x : y != y ? y : x < y ? y : x;
}

static void adam_f32(const dl_optim_tensors *t, const dl_adam_coeffs *c) {
    float *p = dl_tensor_data_ptr(t->param);      // p is (len,)
    const float *g = dl_tensor_data_ptr(t->grad); // g is (len,)
    float *m = dl_tensor_data_ptr(t->exp_avg);    // m is (len,)
    float *v = dl_tensor_data_ptr(t->exp_avg_sq); // v is (len,)
    float *mx = data_or_null(t->max_exp_avg_sq);  // mx is (len,) or NULL
    const float b1 = (float)c->beta1, omb1 = (float)c->one_minus_beta1;
    const float b2 = (float)c->beta2, omb2 = (float)c->one_minus_beta2;
    const float eps = (float)c->eps, wd = (float)c->weight_decay, decay = (float)c->decay;
    const float nss = (float)t->neg_step_size, bc2s = (float)t->bc2_sqrt;
    const int decoupled = c->decoupled, use_wd = c->weight_decay != 0;
    const int amsgrad = c->amsgrad && mx, maximize = c->maximize;
    int64_t len = dl_tensor_numel(t->param);
#pragma omp parallel for num_threads(dl_get_num_threads()) if (len >= DL_PARALLEL_GRAIN)
    for (int64_t i = 0; i < len; i++) {
        float gi = maximize ? -g[i] : g[i], pi = p[i];
        if (decoupled) {
            pi = pi * decay;
        } else if (use_wd) {
            float x = wd * pi;
            gi = gi + x;
        }
        float m1 = m[i] * b1, x1 = omb1 * gi;
        float mi = m1 + x1;
        float v1 = v[i] * b2, x2 = gi * omb2;
        float x3 = x2 * gi;
        float vi = v1 + x3;
        m[i] = mi;
        v[i] = vi;
        float s = vi;
        if (amsgrad) {
            s = max_nan_f32(mx[i], vi);
            mx[i] = s;
        }
        float d1 = sqrtf(s), d2 = d1 / bc2s;
        float denom = d2 + eps;
        float u1 = mi * nss, u = u1 / denom;
        p[i] = pi + u;
    }
}

static void adam_f64(const dl_optim_tensors *t, const dl_adam_coeffs *c) {
    double *p = dl_tensor_data_ptr(t->param);      // p is (len,)
    const double *g = dl_tensor_data_ptr(t->grad); // g is (len,)
    double *m = dl_tensor_data_ptr(t->exp_avg);    // m is (len,)
    double *v = dl_tensor_data_ptr(t->exp_avg_sq); // v is (len,)
    double *mx = data_or_null(t->max_exp_avg_sq);  // mx is (len,) or NULL
    const double b1 = c->beta1, omb1 = c->one_minus_beta1;
    const double b2 = c->beta2, omb2 = c->one_minus_beta2;
    const double eps = c->eps, wd = c->weight_decay, decay = c->decay;
    const double nss = t->neg_step_size, bc2s = t->bc2_sqrt;
    const int decoupled = c->decoupled, use_wd = c->weight_decay != 0;
    const int amsgrad = c->amsgrad && mx, maximize = c->maximize;
    int64_t len = dl_tensor_numel(t->param);
#pragma omp parallel for num_threads(dl_get_num_threads()) if (len >= DL_PARALLEL_GRAIN)
    for (int64_t i = 0; i < len; i++) {
        double gi = maximize ? -g[i] : g[i], pi = p[i];
        if (decoupled) {
            pi = pi * decay;
        } else if (use_wd) {
            double x = wd * pi;
            gi = gi + x;
        }
        double m1 = m[i] * b1, x1 = omb1 * gi;
        double mi = m1 + x1;
        double v1 = v[i] * b2, x2 = gi * omb2;
        double x3 = x2 * gi;
        double vi = v1 + x3;
        m[i] = mi;
        v[i] = vi;
        double s = vi;
        if (amsgrad) {
            s = max_nan_f64(mx[i], vi);
            mx[i] = s;
        }
        double d1 = sqrt(s), d2 = d1 / bc2s;
        double denom = d2 + eps;
        double u1 = mi * nss, u = u1 / denom;
        p[i] = pi + u;
    }
}

void dl_cpu_adam_step(int n, const dl_optim_tensors *ts, const dl_adam_coeffs *c) {
    for (int k = 0; k < n; k++) {
        if (ts[k].param->dtype == DL_DTYPE_F64)
            adam_f64(&ts[k], c);
        else
            adam_f32(&ts[k], c);
    }
}
