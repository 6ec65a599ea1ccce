// softmax.cu - CUDA kernels of softmax and log_softmax, forward and backward
// (see src/cpu/softmax.h for the (outer, D, inner) layout and the formulas);
// the softmax family's table (src/kernels/softmax.h) ends this file.
//
// Two shapes: inner == 1 with long rows -> a block per row (max, sum of
// exponentials, outputs, each a block all-reduce); otherwise a thread per
// (outer, inner) column looping over D.  As on the CPU: exponentials in the
// buffer's type, the sum of exponentials (and the backward's sums) in double,
// the max ignores NaN (which then spreads through the sum).  Each output is
// written by the thread that read its input, so y may alias x and gx gy.
#include "reduce_family.cuh"

#include <math.h>

namespace {

__device__ inline float ex(float v) {
    return expf(v);
}
__device__ inline double ex(double v) {
    return exp(v);
}

template <typename T> __device__ inline T max_keep(T m, T v) {
    return v > m ? v : m;
}

// --- kernels ------------------------------------------------------------------------------

// y, x are (outer, D): a block per row.
template <typename T>
__global__ void softmax_rows_kernel(T *y, const T *x, int64_t outer, int64_t D, bool is_log) {
    for (int64_t o = blockIdx.x; o < outer; o += gridDim.x) {
        const T *xr = x + o * D;
        T *yr = y + o * D;
        T m = -INFINITY;
        for (int64_t d = threadIdx.x; d < D; d += blockDim.x) m = max_keep(m, xr[d]);
        m = dl_block_allreduce(m, [](T a, T b) { return max_keep(a, b); });
        double s = 0;
        for (int64_t d = threadIdx.x; d < D; d += blockDim.x) s += (double)ex((T)(xr[d] - m));
        s = dl_block_allreduce(s, [](double a, double b) { return a + b; });
        if (is_log) {
            T lse = m + (T)log(s);
            for (int64_t d = threadIdx.x; d < D; d += blockDim.x) yr[d] = xr[d] - lse;
        } else {
            T inv = (T)(1.0 / s);
            for (int64_t d = threadIdx.x; d < D; d += blockDim.x) yr[d] = ex((T)(xr[d] - m)) * inv;
        }
    }
}

// y, x are (outer, D, inner): a thread per (o, i).
template <typename T>
__global__ void softmax_cols_kernel(T *y, const T *x, int64_t outer, int64_t D, int64_t inner,
                                    bool is_log) {
    for (int64_t t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; t < outer * inner;
         t += (int64_t)gridDim.x * blockDim.x) {
        int64_t o = t / inner, i = t - o * inner, base = o * D * inner + i;
        T m = -INFINITY;
        for (int64_t d = 0; d < D; d++) m = max_keep(m, x[base + d * inner]);
        double s = 0;
        for (int64_t d = 0; d < D; d++) s += (double)ex((T)(x[base + d * inner] - m));
        if (is_log) {
            T lse = m + (T)log(s);
            for (int64_t d = 0; d < D; d++) y[base + d * inner] = x[base + d * inner] - lse;
        } else {
            T inv = (T)(1.0 / s);
            for (int64_t d = 0; d < D; d++)
                y[base + d * inner] = ex((T)(x[base + d * inner] - m)) * inv;
        }
    }
}

// gx, gy, y are (outer, D): a block per row.
//   softmax: gx = y * (gy - sum(gy * y));  log_softmax: gx = gy - exp(y) * sum(gy)
template <typename T>
__global__ void softmax_backward_rows_kernel(T *gx, const T *gy, const T *y, int64_t outer,
                                             int64_t D, bool is_log) {
    for (int64_t o = blockIdx.x; o < outer; o += gridDim.x) {
        const T *gr = gy + o * D, *yr = y + o * D;
        T *xr = gx + o * D;
        double acc = 0;
        for (int64_t d = threadIdx.x; d < D; d += blockDim.x)
            acc += is_log ? (double)gr[d] : (double)(gr[d] * yr[d]);
        acc = dl_block_allreduce(acc, [](double a, double b) { return a + b; });
        T s = (T)acc;
        for (int64_t d = threadIdx.x; d < D; d += blockDim.x)
            xr[d] = is_log ? gr[d] - ex(yr[d]) * s : yr[d] * (gr[d] - s);
    }
}

// gx, gy, y are (outer, D, inner): a thread per (o, i).
template <typename T>
__global__ void softmax_backward_cols_kernel(T *gx, const T *gy, const T *y, int64_t outer,
                                             int64_t D, int64_t inner, bool is_log) {
    for (int64_t t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; t < outer * inner;
         t += (int64_t)gridDim.x * blockDim.x) {
        int64_t o = t / inner, i = t - o * inner, base = o * D * inner + i;
        double acc = 0;
        for (int64_t d = 0; d < D; d++) {
            int64_t k = base + d * inner;
            acc += is_log ? (double)gy[k] : (double)(gy[k] * y[k]);
        }
        T s = (T)acc;
        for (int64_t d = 0; d < D; d++) {
            int64_t k = base + d * inner;
            gx[k] = is_log ? gy[k] - ex(y[k]) * s : y[k] * (gy[k] - s);
        }
    }
}

// --- launchers ----------------------------------------------------------------------------

bool use_rows(int64_t D, int64_t inner) {
    return inner == 1 && D >= 64;
}

template <typename T>
int softmax_typed(T *y, const T *x, int64_t outer, int64_t D, int64_t inner, bool is_log) {
    cudaStream_t st = dl_cuda_stream();
    if (use_rows(D, inner))
        softmax_rows_kernel<T>
            <<<dl_red_grid(outer), DL_RED_THREADS, 0, st>>>(y, x, outer, D, is_log);
    else
        softmax_cols_kernel<T>
            <<<dl_cuda_blocks(outer * inner, DL_RED_THREADS), DL_RED_THREADS, 0, st>>>(
                y, x, outer, D, inner, is_log);
    DL_CUDA_LAUNCHED();
    return 0;
}

template <typename T>
int softmax_backward_typed(T *gx, const T *gy, const T *y, int64_t outer, int64_t D, int64_t inner,
                           bool is_log) {
    cudaStream_t st = dl_cuda_stream();
    if (use_rows(D, inner))
        softmax_backward_rows_kernel<T>
            <<<dl_red_grid(outer), DL_RED_THREADS, 0, st>>>(gx, gy, y, outer, D, is_log);
    else
        softmax_backward_cols_kernel<T>
            <<<dl_cuda_blocks(outer * inner, DL_RED_THREADS), DL_RED_THREADS, 0, st>>>(
                gx, gy, y, outer, D, inner, is_log);
    DL_CUDA_LAUNCHED();
    return 0;
}

int check_shape(const char *op, int64_t outer, int64_t D, int64_t inner) {
    if (outer < 0 || D < 0 || inner < 0) return dl_error("%s: internal error: negative shape", op);
    return 0;
}

} // namespace

int dl_cuda_softmax_forward(dl_dtype dt, const dl_softmax_shape *s, void *y, const void *x) {
    int64_t outer = s->outer, D = s->D, inner = s->inner;
    if (check_shape("softmax", outer, D, inner)) return -1;
    if (outer * D * inner == 0) return 0;
    if (dt == DL_DTYPE_F32)
        return softmax_typed((float *)y, (const float *)x, outer, D, inner, s->log);
    if (dt == DL_DTYPE_F64)
        return softmax_typed((double *)y, (const double *)x, outer, D, inner, s->log);
    return dl_error("softmax: CUDA kernels take float32 or float64, got %s", dl_dtype_name(dt));
}

int dl_cuda_softmax_backward(dl_dtype dt, const dl_softmax_shape *s, void *gx, const void *gy,
                             const void *y) {
    int64_t outer = s->outer, D = s->D, inner = s->inner;
    if (check_shape("softmax_backward", outer, D, inner)) return -1;
    if (outer * D * inner == 0) return 0;
    if (dt == DL_DTYPE_F32)
        return softmax_backward_typed((float *)gx, (const float *)gy, (const float *)y, outer, D,
                                      inner, s->log);
    if (dt == DL_DTYPE_F64)
        return softmax_backward_typed((double *)gx, (const double *)gy, (const double *)y, outer, D,
                                      inner, s->log);
    return dl_error("softmax_backward: CUDA kernels take float32 or float64, got %s",
                    dl_dtype_name(dt));
}

DL_CUDA_TABLE(softmax) = {
    .family = "softmax",
    .softmax = dl_cuda_softmax_forward,
    .softmax_backward = dl_cuda_softmax_backward,
};
