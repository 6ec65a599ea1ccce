// loss.cu - CUDA kernels of the loss functions, forward and backward (see
// src/cpu/loss.h for the layouts and formulas, which these mirror operation
// for operation: float32 computes in float, float64 in double, sums over
// classes accumulate in double); the loss family's table
// (src/kernels/loss.h) ends this file.
//
// Class losses: a thread per sample r = n*S + s, whose class c lies at
// (n*C + c)*S + s, looping over the C classes.  Targets are checked on the
// device (dl_cuda_target_check, reported at the next synchronisation), and
// the kernels never read at a bad one: its loss is NaN, its gradient zero,
// its weight left out of the mean.  Pointwise losses: a thread per element.  Sums over
// samples (the op layer's mean and sum) go through dl_cuda_reduce_acc.
#include "reduce_family.cuh"

#include <math.h>

namespace {

__device__ inline float ex(float v) {
    return expf(v);
}
__device__ inline double ex(double v) {
    return exp(v);
}
__device__ inline float absval(float v) {
    return fabsf(v);
}
__device__ inline double absval(double v) {
    return fabs(v);
}

// softplus(-x) = log(1 + exp(-x)), stable for any x.
__device__ inline float softplus_neg(float x) {
    return fmaxf(-x, 0.0f) + log1pf(expf(-fabsf(x)));
}
__device__ inline double softplus_neg(double x) {
    return fmax(-x, 0.0) + log1p(exp(-fabs(x)));
}

__device__ inline int64_t sample_base(int64_t r, int64_t C, int64_t S) {
    return (r / S) * C * S + r % S;
}

// log(sum(exp(x))) of one sample's C scores, S apart.
template <typename T> __device__ T lse_of(const T *xs, int64_t C, int64_t S) {
    T m = -INFINITY;
    for (int64_t c = 0; c < C; c++) m = xs[c * S] > m ? xs[c * S] : m;
    double sum = 0;
    for (int64_t c = 0; c < C; c++) sum += (double)ex((T)(xs[c * S] - m));
    return m + (T)log(sum);
}

template <typename T> __device__ inline T wt(const T *weight, int64_t c) {
    return weight ? weight[c] : (T)1;
}

// A target that is not a class (reported by the check; skipped here).
__device__ inline bool bad_class(int64_t t, int64_t C) {
    return t < 0 || t >= C;
}

// A row whose target t adds no class term: *out = 0 for ignore_index, NaN
// for a class out of range, and true; false (out untouched) for a valid t.
template <typename T>
__device__ inline bool no_loss_term(int64_t t, int64_t ignore_index, int64_t C, T *out) {
    if (t == ignore_index) {
        *out = 0;
        return true;
    }
    if (bad_class(t, C)) {
        *out = (T)NAN;
        return true;
    }
    return false;
}

#define GRID_STRIDE(i, n)                                                                          \
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < (n);                      \
         i += (int64_t)gridDim.x * blockDim.x)

// --- kernels: sums and checks ------------------------------------------------------------------

// *out = sum of weight[target[i]] over the non-ignored targets; one block.
template <typename T>
__global__ void class_weight_sum_kernel(const int64_t *target, const T *weight, int64_t n,
                                        int64_t C, int64_t ignore_index, double *out) {
    double s = 0;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
        if (target[i] != ignore_index && !bad_class(target[i], C))
            s += (double)wt(weight, target[i]);
    s = dl_block_allreduce(s, [](double a, double b) { return a + b; });
    if (threadIdx.x == 0) *out = s;
}

__global__ void set_i64_kernel(int64_t *p, int64_t v) {
    *p = v;
}

__global__ void target_check_kernel(const int64_t *target, int64_t n, int64_t C,
                                    int64_t ignore_index, int64_t *first_bad) {
    GRID_STRIDE(i, n) {
        int64_t t = target[i];
        if (t != ignore_index && (t < 0 || t >= C)) atomicMin((long long *)first_bad, (long long)i);
    }
}

// --- kernels: nll
// ----------------------------------------------------------------------------------

// out is (N,S), logp is (N,C,S), target is (N,S), weight is (C) or NULL.
template <typename T>
__global__ void nll_kernel(T *out, const T *logp, const int64_t *target, const T *weight, int64_t N,
                           int64_t C, int64_t S, int64_t ignore_index) {
    GRID_STRIDE(r, N * S) {
        int64_t t = target[r];
        if (no_loss_term(t, ignore_index, C, &out[r])) continue;
        out[r] = -wt(weight, t) * logp[sample_base(r, C, S) + t * S];
    }
}

// gx is (N,C,S) and already zero; g is (N,S) or NULL.
template <typename T>
__global__ void nll_backward_kernel(T *gx, const T *g, T g0, const int64_t *target, const T *weight,
                                    int64_t N, int64_t C, int64_t S, int64_t ignore_index) {
    GRID_STRIDE(r, N * S) {
        int64_t t = target[r];
        if (t == ignore_index || bad_class(t, C)) continue;
        gx[sample_base(r, C, S) + t * S] = -wt(weight, t) * (g ? g[r] : g0);
    }
}

// --- kernels: cross entropy, class indices
// ------------------------------------------------------------

// out is (N,S), x is (N,C,S), target is (N,S).
template <typename T>
__global__ void ce_kernel(T *out, const T *x, const int64_t *target, const T *weight, int64_t N,
                          int64_t C, int64_t S, int64_t ignore_index, double eps) {
    const T keep = (T)(1.0 - eps), spread = (T)(eps / (double)C);
    GRID_STRIDE(r, N * S) {
        int64_t t = target[r];
        if (no_loss_term(t, ignore_index, C, &out[r])) continue;
        const T *xs = x + sample_base(r, C, S); // xs is (C), stride S
        T lse = lse_of(xs, C, S);
        T loss = wt(weight, t) * (lse - xs[t * S]);
        if (eps > 0) {
            double smooth = 0;
            for (int64_t c = 0; c < C; c++) smooth += (double)wt(weight, c) * (lse - xs[c * S]);
            loss = keep * loss + spread * (T)smooth;
        }
        out[r] = loss;
    }
}

// gx, x are (N,C,S), g is (N,S) or NULL.
template <typename T>
__global__ void ce_backward_kernel(T *gx, const T *g, T g0, const T *x, const int64_t *target,
                                   const T *weight, int64_t N, int64_t C, int64_t S,
                                   int64_t ignore_index, double eps) {
    const T keep = (T)(1.0 - eps), spread = (T)(eps / (double)C);
    GRID_STRIDE(r, N * S) {
        int64_t t = target[r], b = sample_base(r, C, S);
        const T *xs = x + b; // xs, gs are (C), stride S
        T *gs = gx + b;
        if (t == ignore_index || bad_class(t, C)) {
            for (int64_t c = 0; c < C; c++) gs[c * S] = 0;
            continue;
        }
        double wsum = 0; // the sum of the class weights (C without weights)
        if (weight)
            for (int64_t c = 0; c < C; c++) wsum += weight[c];
        else
            wsum = (double)C;
        const T wall = (T)wsum;
        T G = g ? g[r] : g0;
        T lse = lse_of(xs, C, S);
        T w_t = wt(weight, t);
        T coef = keep * w_t + spread * wall;
        for (int64_t c = 0; c < C; c++) {
            T v = ex((T)(xs[c * S] - lse)) * coef;
            if (eps > 0) v = v - spread * wt(weight, c);
            gs[c * S] = G * v;
        }
        gs[t * S] -= G * keep * w_t;
    }
}

// --- kernels: cross entropy, class probabilities
// -------------------------------------------------------

// q = (1-eps) * target + eps/C (target itself when eps is 0)
template <typename T> __device__ inline T smoothed(T tv, double eps, T keep, T spread) {
    return eps > 0 ? tv * keep + spread : tv;
}

// out is (N,S), x and target are (N,C,S).
template <typename T>
__global__ void ce_prob_kernel(T *out, const T *x, const T *target, const T *weight, int64_t N,
                               int64_t C, int64_t S, double eps) {
    const T keep = (T)(1.0 - eps), spread = (T)(eps / (double)C);
    GRID_STRIDE(r, N * S) {
        int64_t b = sample_base(r, C, S);
        const T *xs = x + b, *ts = target + b; // (C), stride S
        T lse = lse_of(xs, C, S);
        double acc = 0;
        for (int64_t c = 0; c < C; c++) {
            T q = smoothed(ts[c * S], eps, keep, spread);
            acc += (double)(wt(weight, c) * q) * (xs[c * S] - lse);
        }
        out[r] = (T)-acc;
    }
}

// gx, gtarget (either may be NULL), x, target are (N,C,S), g is (N,S) or NULL.
template <typename T>
__global__ void ce_prob_backward_kernel(T *gx, T *gtarget, const T *g, T g0, const T *x,
                                        const T *target, const T *weight, int64_t N, int64_t C,
                                        int64_t S, double eps) {
    const T keep = (T)(1.0 - eps), spread = (T)(eps / (double)C);
    GRID_STRIDE(r, N * S) {
        int64_t b = sample_base(r, C, S);
        const T *xs = x + b, *ts = target + b; // (C), stride S
        T G = g ? g[r] : g0;
        T lse = lse_of(xs, C, S);
        if (gx) {
            double acc = 0;
            for (int64_t c = 0; c < C; c++)
                acc += (double)wt(weight, c) * smoothed(ts[c * S], eps, keep, spread);
            T swq = (T)acc;
            for (int64_t c = 0; c < C; c++) {
                T q = smoothed(ts[c * S], eps, keep, spread);
                gx[b + c * S] = G * (ex((T)(xs[c * S] - lse)) * swq - wt(weight, c) * q);
            }
        }
        if (gtarget)
            for (int64_t c = 0; c < C; c++)
                gtarget[b + c * S] = -G * keep * wt(weight, c) * (xs[c * S] - lse);
    }
}

// --- kernels: pointwise losses
// ---------------------------------------------------------------------------

template <typename T>
__device__ inline T pw_loss(T x, T y, const T *w, const T *pw, int64_t i, int op) {
    switch (op) {
    case DL_POINTWISE_MSE: return (x - y) * (x - y);
    case DL_POINTWISE_L1: return absval(x - y);
    case DL_POINTWISE_BCE_LOGITS: {
        T lw = pw ? (T)1 + (pw[i] - (T)1) * y : (T)1;
        T l = ((T)1 - y) * x + lw * softplus_neg(x);
        return w ? l * w[i] : l;
    }
    }
    return 0;
}

// out, x, y, w, pw are (n); w and pw may be NULL.
template <typename T>
__global__ void pw_kernel(T *out, const T *x, const T *y, const T *w, const T *pw, int64_t n,
                          int op) {
    GRID_STRIDE(i, n) out[i] = pw_loss(x[i], y[i], w, pw, i, op);
}

// gx, gy (either may be NULL), g (NULL: g0), x, y, w, pw are (n).
template <typename T>
__global__ void pw_backward_kernel(T *gx, T *gy, const T *g, T g0, const T *x, const T *y,
                                   const T *w, const T *pw, int64_t n, int op) {
    GRID_STRIDE(i, n) {
        T G = g ? g[i] : g0, xv = x[i], yv = y[i], dx = 0, dy = 0;
        switch (op) {
        case DL_POINTWISE_MSE:
            dx = (T)2 * (xv - yv) * G;
            dy = -dx;
            break;
        case DL_POINTWISE_L1: {
            T d = xv - yv;
            dx = (T)((d > 0) - (d < 0)) * G;
            dy = -dx;
            break;
        }
        case DL_POINTWISE_BCE_LOGITS: {
            T s = (T)1 / ((T)1 + ex(-xv));
            T gw = w ? G * w[i] : G;
            if (pw) {
                T t = pw[i] * yv;
                dx = ((t + (T)1 - yv) * s - t) * gw;
                dy = (-xv + (pw[i] - (T)1) * softplus_neg(xv)) * gw;
            } else {
                dx = (s - yv) * gw;
                dy = -xv * gw;
            }
            break;
        }
        }
        if (gx) gx[i] = dx;
        if (gy) gy[i] = dy;
    }
}

#undef GRID_STRIDE

// --- launchers
// ----------------------------------------------------------------------------------------------

unsigned blocks(int64_t n) {
    return dl_cuda_blocks(n, DL_RED_THREADS);
}

int float_only(const char *op, dl_dtype dt) {
    if (dt == DL_DTYPE_F32 || dt == DL_DTYPE_F64) return 0;
    return dl_error("%s: CUDA kernels take float32 or float64, got %s", op, dl_dtype_name(dt));
}

int class_dims(const char *op, int64_t N, int64_t C, int64_t S) {
    if (N < 0 || C < 0 || S < 0) return dl_error("%s: internal error: negative shape", op);
    return 0;
}

// Runs a (kernel<float>, kernel<double>) pair with the same arguments; F is
// a generic lambda taking a type tag.
template <typename F> int by_dtype(dl_dtype dt, F launch) {
    if (dt == DL_DTYPE_F64)
        launch((double)0);
    else
        launch((float)0);
    DL_CUDA_LAUNCHED();
    return 0;
}

// Queues launch(tag, blocks, stream) -- tag a float or double value for dt --
// over the N*S samples of a class loss, after the checks every class entry
// point makes; nothing to do without samples.
template <typename F>
int class_launch(const char *op, dl_dtype dt, const dl_class_loss_shape *s, F launch) {
    if (float_only(op, dt) || class_dims(op, s->N, s->C, s->S)) return -1;
    int64_t n = s->N * s->S;
    if (n == 0) return 0;
    unsigned b = blocks(n);
    cudaStream_t st = dl_cuda_stream();
    return by_dtype(dt, [&](auto tag) { launch(tag, b, st); });
}

} // namespace

int dl_cuda_loss_sum(dl_dtype dt, int64_t n, double *out, const void *v) {
    if (float_only("loss sum", dt)) return -1;
    dl_rshape s = {1, 1, n, 1};
    return dl_cuda_reduce_acc(DL_ACC_SUM, v, dt, &s, 0, NULL, out);
}

int dl_cuda_class_weight_sum(dl_dtype dt, const dl_class_loss_shape *s, double *out,
                             const int64_t *target, const void *weight) {
    int64_t n = s->N * s->S;
    if (float_only("class weight sum", dt)) return -1;
    if (n < 0) return dl_error("class weight sum: internal error: negative size");
    cudaStream_t st = dl_cuda_stream();
    return by_dtype(dt, [&](auto tag) {
        typedef decltype(tag) T;
        class_weight_sum_kernel<T><<<1, DL_RED_THREADS, 0, st>>>(target, (const T *)weight, n, s->C,
                                                                 s->ignore_index, out);
    });
}

int dl_cuda_target_check(const dl_class_loss_shape *s, int64_t *first_bad, const int64_t *target) {
    int64_t n = s->N * s->S;
    if (n < 0) return dl_error("target check: internal error: negative size");
    cudaStream_t st = dl_cuda_stream();
    set_i64_kernel<<<1, 1, 0, st>>>(first_bad, n);
    DL_CUDA_LAUNCHED();
    if (n == 0) return 0;
    target_check_kernel<<<blocks(n), DL_RED_THREADS, 0, st>>>(target, n, s->C, s->ignore_index,
                                                              first_bad);
    DL_CUDA_LAUNCHED();
    return 0;
}

int dl_cuda_nll_loss(dl_dtype dt, const dl_class_loss_shape *s, void *out, const void *logp,
                     const int64_t *target, const void *weight) {
    return class_launch("nll_loss", dt, s, [&](auto tag, unsigned b, cudaStream_t st) {
        typedef decltype(tag) T;
        nll_kernel<T><<<b, DL_RED_THREADS, 0, st>>>((T *)out, (const T *)logp, target,
                                                    (const T *)weight, s->N, s->C, s->S,
                                                    s->ignore_index);
    });
}

int dl_cuda_nll_loss_backward(dl_dtype dt, const dl_class_loss_shape *s, void *gx, const void *g,
                              double g0, const int64_t *target, const void *weight) {
    const char *op = "nll_loss_backward";
    if (float_only(op, dt) || class_dims(op, s->N, s->C, s->S)) return -1;
    int64_t total = s->N * s->C * s->S;
    if (total == 0) return 0;
    DL_CUDA_CHECK(cudaMemsetAsync(gx, 0, (size_t)total * dl_dtype_size(dt), dl_cuda_stream()));
    return class_launch(op, dt, s, [&](auto tag, unsigned b, cudaStream_t st) {
        typedef decltype(tag) T;
        nll_backward_kernel<T><<<b, DL_RED_THREADS, 0, st>>>((T *)gx, (const T *)g, (T)g0, target,
                                                             (const T *)weight, s->N, s->C, s->S,
                                                             s->ignore_index);
    });
}

int dl_cuda_cross_entropy(dl_dtype dt, const dl_class_loss_shape *s, void *out, const void *x,
                          const int64_t *target, const void *weight) {
    return class_launch("cross_entropy", dt, s, [&](auto tag, unsigned b, cudaStream_t st) {
        typedef decltype(tag) T;
        ce_kernel<T><<<b, DL_RED_THREADS, 0, st>>>((T *)out, (const T *)x, target,
                                                   (const T *)weight, s->N, s->C, s->S,
                                                   s->ignore_index, s->eps);
    });
}

int dl_cuda_cross_entropy_backward(dl_dtype dt, const dl_class_loss_shape *s, void *gx,
                                   const void *g, double g0, const void *x, const int64_t *target,
                                   const void *weight) {
    return class_launch("cross_entropy_backward", dt, s,
                        [&](auto tag, unsigned b, cudaStream_t st) {
                            typedef decltype(tag) T;
                            ce_backward_kernel<T><<<b, DL_RED_THREADS, 0, st>>>(
                                (T *)gx, (const T *)g, (T)g0, (const T *)x, target,
                                (const T *)weight, s->N, s->C, s->S, s->ignore_index, s->eps);
                        });
}

int dl_cuda_cross_entropy_prob(dl_dtype dt, const dl_class_loss_shape *s, void *out, const void *x,
                               const void *target, const void *weight) {
    return class_launch("cross_entropy", dt, s, [&](auto tag, unsigned b, cudaStream_t st) {
        typedef decltype(tag) T;
        ce_prob_kernel<T><<<b, DL_RED_THREADS, 0, st>>>(
            (T *)out, (const T *)x, (const T *)target, (const T *)weight, s->N, s->C, s->S, s->eps);
    });
}

int dl_cuda_cross_entropy_prob_backward(dl_dtype dt, const dl_class_loss_shape *s, void *gx,
                                        void *gtarget, const void *g, double g0, const void *x,
                                        const void *target, const void *weight) {
    return class_launch("cross_entropy_backward", dt, s,
                        [&](auto tag, unsigned b, cudaStream_t st) {
                            typedef decltype(tag) T;
                            ce_prob_backward_kernel<T><<<b, DL_RED_THREADS, 0, st>>>(
                                (T *)gx, (T *)gtarget, (const T *)g, (T)g0, (const T *)x,
                                (const T *)target, (const T *)weight, s->N, s->C, s->S, s->eps);
                        });
}

int dl_cuda_pointwise_loss(dl_dtype dt, dl_pointwise_loss op, int64_t n, void *out, const void *x,
                           const void *y, const void *w, const void *pw) {
    if (float_only("pointwise loss", dt)) return -1;
    if (n <= 0) return 0;
    cudaStream_t st = dl_cuda_stream();
    return by_dtype(dt, [&](auto tag) {
        typedef decltype(tag) T;
        pw_kernel<T><<<blocks(n), DL_RED_THREADS, 0, st>>>((T *)out, (const T *)x, (const T *)y,
                                                           (const T *)w, (const T *)pw, n, (int)op);
    });
}

int dl_cuda_pointwise_loss_backward(dl_dtype dt, dl_pointwise_loss op, int64_t n, void *gx,
                                    void *gy, const void *g, double g0, const void *x,
                                    const void *y, const void *w, const void *pw) {
    if (float_only("pointwise loss backward", dt)) return -1;
    if (n <= 0) return 0;
    cudaStream_t st = dl_cuda_stream();
    return by_dtype(dt, [&](auto tag) {
        typedef decltype(tag) T;
        pw_backward_kernel<T><<<blocks(n), DL_RED_THREADS, 0, st>>>(
            (T *)gx, (T *)gy, (const T *)g, (T)g0, (const T *)x, (const T *)y, (const T *)w,
            (const T *)pw, n, (int)op);
    });
}

DL_CUDA_TABLE(loss) = {
    .family = "loss",
    .sum = dl_cuda_loss_sum,
    .class_weight_sum = dl_cuda_class_weight_sum,
    .target_check = dl_cuda_target_check,
    .nll_loss = dl_cuda_nll_loss,
    .nll_loss_backward = dl_cuda_nll_loss_backward,
    .cross_entropy = dl_cuda_cross_entropy,
    .cross_entropy_backward = dl_cuda_cross_entropy_backward,
    .cross_entropy_prob = dl_cuda_cross_entropy_prob,
    .cross_entropy_prob_backward = dl_cuda_cross_entropy_prob_backward,
    .pointwise_loss = dl_cuda_pointwise_loss,
    .pointwise_loss_backward = dl_cuda_pointwise_loss_backward,
};
