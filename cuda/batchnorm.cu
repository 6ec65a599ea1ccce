// batchnorm.cu - CUDA batch normalization (forward in training and
// evaluation, backward) and the batchnorm family's kernel table (see
// src/kernels/batchnorm.h).
//
// Our own kernels, not cuDNN's batch-norm API, so the semantics are the CPU's
// (src/cpu/batchnorm.c): biased batch variance, the running-stat update left
// to the op layer, PyTorch's backward formulas.
//
// Data x, y, gx, gy are element type T (float, double, __half, bf16) in one
// of two layouts: "planes" (N,C,S) contiguous, or "rows" (M,C) contiguous with
// M = N*S (channels-last; (N,C,S) with S == 1 is also rows).  Per-channel
// vectors and all arithmetic are the accumulator type A: double for double
// data, float otherwise.
//
// Statistics are computed in two passes (mean, then the sum of squared
// deviations) by a two-level reduction: blocks reduce a chunk of rows of a
// channel into part (splits,2,C), then one thread per channel sums the chunks
// in a fixed order.  No atomics: results are deterministic.
//
// Invariants: the op layer has validated sizes (N*S >= 1, C >= 1), made the
// operands contiguous in the layout it names and made their device current;
// every launch is checked; temporary memory is freed right after the last
// kernel using it is queued (the allocator is stream-ordered).
#include "common.cuh"

#include <type_traits>

extern "C" {
#include "kernels/batchnorm.h"
#include "kernels/cuda.h"
}

namespace {

// --- element access -----------------------------------------------------------------

__device__ inline float ld(float v) {
    return v;
}
__device__ inline double ld(double v) {
    return v;
}
__device__ inline float ld(__half v) {
    return __half2float(v);
}
__device__ inline float ld(__nv_bfloat16 v) {
    return __bfloat162float(v);
}

template <typename T, typename A> __device__ inline T st(A v) {
    if constexpr (std::is_same_v<T, __half>)
        return __float2half_rn((float)v);
    else if constexpr (std::is_same_v<T, __nv_bfloat16>)
        return __float2bfloat16_rn((float)v);
    else
        return (T)v;
}

// What a reduction sums per element: x; (x - mean)^2; or gy and gy * (x - mean).
enum { R_SUM = 0, R_SQDEV = 1, R_GRAD = 2 };

template <int MODE, typename A> __device__ inline void accum(A xv, A gv, A m, A &s0, A &s1) {
    if constexpr (MODE == R_SUM) {
        s0 += xv;
    } else if constexpr (MODE == R_SQDEV) {
        A d = xv - m;
        s0 += d * d;
    } else {
        s0 += gv;
        s1 += gv * (xv - m);
    }
}

const int kThreads = 256;
const int kRowsX = 32, kRowsY = 8; // block shape of the rows reduction

// --- kernels ----------------------------------------------------------------------------

// Rows layout.  x, gy are (M,C); mean is (C) (unused for R_SUM); part is
// (splits,2,C): block (bx, by) sums rows [by*chunk, by*chunk + chunk) of
// channels bx*32 .. bx*32+31.  threadIdx.x picks the channel (coalesced),
// threadIdx.y strides the rows.  gy is read for R_GRAD only.
template <typename T, typename A, int MODE>
__global__ void bn_reduce_rows(A *part, const T *x, const T *gy, const A *mean, int64_t M,
                               int64_t C, int64_t chunk) {
    __shared__ A sh[2][kRowsY][kRowsX];
    int tx = threadIdx.x, ty = threadIdx.y;
    int64_t c = (int64_t)blockIdx.x * kRowsX + tx;
    int64_t r0 = (int64_t)blockIdx.y * chunk, r1 = r0 + chunk < M ? r0 + chunk : M;
    A s0 = 0, s1 = 0;
    if (c < C) {
        A m = 0;
        if constexpr (MODE != R_SUM) m = mean[c];
        for (int64_t r = r0 + ty; r < r1; r += kRowsY) {
            int64_t k = r * C + c;
            A gv = 0;
            if constexpr (MODE == R_GRAD) gv = ld(gy[k]);
            accum<MODE>((A)ld(x[k]), gv, m, s0, s1);
        }
    }
    sh[0][ty][tx] = s0;
    sh[1][ty][tx] = s1;
    __syncthreads();
    if (ty == 0 && c < C) {
        A t0 = 0, t1 = 0;
        for (int j = 0; j < kRowsY; j++) {
            t0 += sh[0][j][tx];
            t1 += sh[1][j][tx];
        }
        part[((int64_t)blockIdx.y * 2) * C + c] = t0;
        part[((int64_t)blockIdx.y * 2 + 1) * C + c] = t1;
    }
}

// Planes layout.  x, gy are (N,C,S); block (c, by) sums elements
// [by*chunk, by*chunk + chunk) of channel c's N*S elements (element r is
// x[r / S][c][r % S]) into part (splits,2,C).  kThreads threads per block.
template <typename T, typename A, int MODE>
__global__ void bn_reduce_planes(A *part, const T *x, const T *gy, const A *mean, int64_t M,
                                 int64_t C, int64_t S, int64_t chunk) {
    __shared__ A sh[2][kThreads];
    int t = threadIdx.x;
    int64_t c = blockIdx.x;
    int64_t r0 = (int64_t)blockIdx.y * chunk, r1 = r0 + chunk < M ? r0 + chunk : M;
    A m = 0, s0 = 0, s1 = 0;
    if constexpr (MODE != R_SUM) m = mean[c];
    for (int64_t r = r0 + t; r < r1; r += kThreads) {
        int64_t n = r / S, i = r - n * S;
        int64_t k = (n * C + c) * S + i;
        A gv = 0;
        if constexpr (MODE == R_GRAD) gv = ld(gy[k]);
        accum<MODE>((A)ld(x[k]), gv, m, s0, s1);
    }
    sh[0][t] = s0;
    sh[1][t] = s1;
    __syncthreads();
    for (int w = kThreads / 2; w > 0; w >>= 1) {
        if (t < w) {
            sh[0][t] += sh[0][t + w];
            sh[1][t] += sh[1][t + w];
        }
        __syncthreads();
    }
    if (t == 0) {
        part[((int64_t)blockIdx.y * 2) * C + c] = sh[0][0];
        part[((int64_t)blockIdx.y * 2 + 1) * C + c] = sh[1][0];
    }
}

// out0[c] = (sum over k of part[k][0][c]) / div, out1 likewise from part[k][1]
// (out1 may be NULL); chunks are summed in order.  part is (splits,2,C).
template <typename A>
__global__ void bn_sum_parts(A *out0, A *out1, const A *part, int64_t splits, int64_t C, A div) {
    for (int64_t c = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; c < C;
         c += (int64_t)gridDim.x * blockDim.x) {
        A t0 = 0, t1 = 0;
        for (int64_t k = 0; k < splits; k++) {
            t0 += part[(k * 2) * C + c];
            t1 += part[(k * 2 + 1) * C + c];
        }
        out0[c] = t0 / div;
        if (out1) out1[c] = t1 / div;
    }
}

// scale = w / sqrt(var + eps), shift = b (w, b may be NULL: 1 and 0); all (C).
template <typename A>
__global__ void bn_forward_coefs(A *scale, A *shift, const A *var, const A *w, const A *b, A eps,
                                 int64_t C) {
    for (int64_t c = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; c < C;
         c += (int64_t)gridDim.x * blockDim.x) {
        A invstd = (A)1 / sqrt(var[c] + eps);
        scale[c] = (w ? w[c] : (A)1) * invstd;
        shift[c] = b ? b[c] : (A)0;
    }
}

// y = (x - mean) * scale + shift per channel; x, y are n elements, the
// channel of element k is (k / S) % C (S = 1 in the rows layout).
template <typename T, typename A>
__global__ void bn_normalize(T *y, const T *x, const A *mean, const A *scale, const A *shift,
                             int64_t n, int64_t C, int64_t S) {
    for (int64_t k = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; k < n;
         k += (int64_t)gridDim.x * blockDim.x) {
        int64_t c = (k / S) % C;
        y[k] = st<T>(((A)ld(x[k]) - mean[c]) * scale[c] + shift[c]);
    }
}

// Per channel, from sum_dy and sum_dy_xmu (sums, (2,C); unused when NULL):
// gb = sum_dy, gw = sum_dy_xmu * invstd (each may be NULL), and the input
// gradient's coefficients sc = w * invstd, mdy = sum_dy / M,
// k2 = sum_dy_xmu / M * invstd^2 (the last two for training only).
template <typename A>
__global__ void bn_backward_coefs(A *gw, A *gb, A *sc, A *mdy, A *k2, const A *sums, const A *var,
                                  const A *w, A eps, A M, int64_t C) {
    for (int64_t c = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; c < C;
         c += (int64_t)gridDim.x * blockDim.x) {
        A invstd = (A)1 / sqrt(var[c] + eps);
        A sdy = sums ? sums[c] : (A)0, sdyx = sums ? sums[C + c] : (A)0;
        if (gb) gb[c] = sdy;
        if (gw) gw[c] = sdyx * invstd;
        if (sc) sc[c] = (w ? w[c] : (A)1) * invstd;
        if (mdy) mdy[c] = sdy / M;
        if (k2) k2[c] = sdyx / M * invstd * invstd;
    }
}

// gx = (gy - mdy - (x - mean) * k2) * sc (TRAIN) or gy * sc; channel of
// element k as in bn_normalize.
template <typename T, typename A, bool TRAIN>
__global__ void bn_grad_input(T *gx, const T *gy, const T *x, const A *mean, const A *sc,
                              const A *mdy, const A *k2, int64_t n, int64_t C, int64_t S) {
    for (int64_t k = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; k < n;
         k += (int64_t)gridDim.x * blockDim.x) {
        int64_t c = (k / S) % C;
        A g = ld(gy[k]);
        if constexpr (TRAIN) g = g - mdy[c] - ((A)ld(x[k]) - mean[c]) * k2[c];
        gx[k] = st<T>(g * sc[c]);
    }
}

// --- launchers --------------------------------------------------------------------------

// 0 after a good launch, else -1 with the error (for use inside expressions).
int launched() {
    DL_CUDA_LAUNCHED();
    return 0;
}

// How the per-channel reductions split the M = N*S elements of a channel.
struct Plan {
    bool rows;      // rows layout (channels-last, or S == 1)
    int64_t M;      // elements per channel
    int64_t splits; // chunks per channel (grid.y)
    int64_t chunk;  // elements per chunk
    int64_t S;      // elements in one (n, c) plane; 1 in the rows layout
};

Plan make_plan(bool channels_last, const dl_bn_shape *s) {
    Plan p;
    p.rows = channels_last || s->S == 1;
    p.M = s->N * s->S;
    p.S = p.rows ? 1 : s->S;
    int64_t cblocks = p.rows ? (s->C + kRowsX - 1) / kRowsX : s->C;
    int64_t want = 4 * (int64_t)dl_cuda_sm_count(); // enough blocks to fill the device
    int64_t splits = (want + cblocks - 1) / cblocks;
    int64_t most = (p.M + 1023) / 1024; // at least ~1024 elements per chunk
    if (splits > most) splits = most;
    if (splits > 65535) splits = 65535;
    if (splits < 1) splits = 1;
    p.chunk = (p.M + splits - 1) / splits;
    p.splits = (p.M + p.chunk - 1) / p.chunk;
    return p;
}

// part (splits,2,C) = chunk sums of MODE over x (and gy).
template <typename T, typename A, int MODE>
int reduce(const Plan &p, int64_t C, A *part, const T *x, const T *gy, const A *mean) {
    cudaStream_t st = dl_cuda_stream();
    if (p.rows) {
        dim3 grid((unsigned)((C + kRowsX - 1) / kRowsX), (unsigned)p.splits);
        dim3 block(kRowsX, kRowsY);
        bn_reduce_rows<T, A, MODE><<<grid, block, 0, st>>>(part, x, gy, mean, p.M, C, p.chunk);
    } else {
        dim3 grid((unsigned)C, (unsigned)p.splits);
        bn_reduce_planes<T, A, MODE>
            <<<grid, kThreads, 0, st>>>(part, x, gy, mean, p.M, C, p.S, p.chunk);
    }
    DL_CUDA_LAUNCHED();
    return 0;
}

template <typename A>
int sum_parts(const Plan &p, int64_t C, A *out0, A *out1, const A *part, A div) {
    bn_sum_parts<A><<<dl_cuda_blocks(C, kThreads), kThreads, 0, dl_cuda_stream()>>>(
        out0, out1, part, p.splits, C, div);
    DL_CUDA_LAUNCHED();
    return 0;
}

// Checks the sizes the launches rely on (the op layer validated them).
int check_shape(const char *op, const dl_bn_shape *s) {
    if (s->N < 1 || s->S < 1 || s->C < 1 || s->C > INT32_MAX)
        return dl_error("%s: bad CUDA batch-norm shape (N %lld, C %lld, S %lld)", op,
                        (long long)s->N, (long long)s->C, (long long)s->S);
    return 0;
}

// y from x with mean/var either computed here (training: written to mean and
// var) or given (evaluation).  y, x are (N,C,S) or (N*S,C); the rest (C).
template <typename T, typename A>
int forward(bool training, bool channels_last, const dl_bn_shape *s, double eps, T *y, A *mean,
            A *var, const T *x, const A *w, const A *b) {
    Plan p = make_plan(channels_last, s);
    int64_t C = s->C;
    // scratch: part (splits,2,C) when training, scale and shift (C each)
    size_t nscr = (size_t)((training ? p.splits * 2 * C : 0) + 2 * C);
    A *scr = (A *)dl_cuda_malloc(nscr * sizeof(A));
    if (!scr) return -1;
    A *scale = scr, *shift = scr + C, *part = scr + 2 * C;
    int rc = 0;
    if (training)
        rc = (reduce<T, A, R_SUM>(p, C, part, x, nullptr, nullptr) ||
              sum_parts<A>(p, C, mean, nullptr, part, (A)p.M) ||
              reduce<T, A, R_SQDEV>(p, C, part, x, nullptr, mean) ||
              sum_parts<A>(p, C, var, nullptr, part, (A)p.M))
                 ? -1
                 : 0;
    if (rc == 0) {
        bn_forward_coefs<A><<<dl_cuda_blocks(C, kThreads), kThreads, 0, dl_cuda_stream()>>>(
            scale, shift, var, w, b, (A)eps, C);
        rc = launched();
    }
    if (rc == 0) {
        int64_t n = s->N * C * s->S;
        bn_normalize<T, A><<<dl_cuda_blocks(n, kThreads), kThreads, 0, dl_cuda_stream()>>>(
            y, x, mean, scale, shift, n, C, p.S);
        rc = launched();
    }
    dl_cuda_free(scr);
    return rc;
}

template <typename T, typename A>
int backward(bool training, bool channels_last, const dl_bn_shape *s, double eps, T *gx, A *gw,
             A *gb, const T *gy, const T *x, const A *mean, const A *var, const A *w) {
    Plan p = make_plan(channels_last, s);
    int64_t C = s->C;
    bool need_sums = gw || gb || (gx && training);
    // scratch: sums (2,C) and part (splits,2,C) when summing; sc, mdy, k2 (C each)
    size_t nscr = (size_t)((need_sums ? 2 * C + p.splits * 2 * C : 0) + 3 * C);
    A *scr = (A *)dl_cuda_malloc(nscr * sizeof(A));
    if (!scr) return -1;
    A *sc = scr, *mdy = scr + C, *k2 = scr + 2 * C;
    A *sums = need_sums ? scr + 3 * C : nullptr, *part = need_sums ? scr + 5 * C : nullptr;
    int rc = 0;
    if (need_sums)
        rc = (reduce<T, A, R_GRAD>(p, C, part, x, gy, mean) ||
              sum_parts<A>(p, C, sums, sums + C, part, (A)1))
                 ? -1
                 : 0;
    if (rc == 0) {
        bn_backward_coefs<A><<<dl_cuda_blocks(C, kThreads), kThreads, 0, dl_cuda_stream()>>>(
            gw, gb, sc, training ? mdy : nullptr, training ? k2 : nullptr, sums, var, w, (A)eps,
            (A)p.M, C);
        rc = launched();
    }
    if (rc == 0 && gx) {
        int64_t n = s->N * C * s->S;
        unsigned nb = dl_cuda_blocks(n, kThreads);
        if (training)
            bn_grad_input<T, A, true>
                <<<nb, kThreads, 0, dl_cuda_stream()>>>(gx, gy, x, mean, sc, mdy, k2, n, C, p.S);
        else
            bn_grad_input<T, A, false>
                <<<nb, kThreads, 0, dl_cuda_stream()>>>(gx, gy, x, mean, sc, mdy, k2, n, C, p.S);
        rc = launched();
    }
    dl_cuda_free(scr);
    return rc;
}

__global__ void bn_update_running(double *out, const double *running, const double *stat, double m,
                                  double factor, int64_t C) {
    for (int64_t c = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; c < C;
         c += (int64_t)gridDim.x * blockDim.x)
        out[c] = (1 - m) * running[c] + m * stat[c] * factor;
}

template <typename A>
__global__ void bn_var_transform(A *out, const A *v, double eps, bool to_invstd, int64_t C) {
    for (int64_t c = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; c < C;
         c += (int64_t)gridDim.x * blockDim.x) {
        double a = (double)v[c];
        out[c] = (A)(to_invstd ? 1.0 / sqrt(a + eps) : 1.0 / (a * a) - eps);
    }
}

} // namespace

// --- entry points ---------------------------------------------------------------------

#define BN_DISPATCH(op, dt, CALL)                                                                  \
    switch (dt) {                                                                                  \
    case DL_DTYPE_F32: {                                                                           \
        typedef float T;                                                                           \
        typedef float A;                                                                           \
        return CALL;                                                                               \
    }                                                                                              \
    case DL_DTYPE_F64: {                                                                           \
        typedef double T;                                                                          \
        typedef double A;                                                                          \
        return CALL;                                                                               \
    }                                                                                              \
    case DL_DTYPE_F16: {                                                                           \
        typedef __half T;                                                                          \
        typedef float A;                                                                           \
        return CALL;                                                                               \
    }                                                                                              \
    case DL_DTYPE_BF16: {                                                                          \
        typedef __nv_bfloat16 T;                                                                   \
        typedef float A;                                                                           \
        return CALL;                                                                               \
    }                                                                                              \
    default: return dl_error("%s: no CUDA kernel for %s", op, dl_dtype_name(dt));                  \
    }

static int bn_forward_train(dl_dtype dt, bool cl, const dl_bn_shape *s, double eps, void *y,
                            void *mean, void *var, const void *x, const void *w, const void *b) {
    if (check_shape("batch_norm", s)) return -1;
    BN_DISPATCH("batch_norm", dt,
                (forward<T, A>(true, cl, s, eps, (T *)y, (A *)mean, (A *)var, (const T *)x,
                               (const A *)w, (const A *)b)))
}

static int bn_forward_eval(dl_dtype dt, bool cl, const dl_bn_shape *s, double eps, void *y,
                           const void *x, const void *mean, const void *var, const void *w,
                           const void *b) {
    if (check_shape("batch_norm", s)) return -1;
    BN_DISPATCH("batch_norm", dt,
                (forward<T, A>(false, cl, s, eps, (T *)y, (A *)mean, (A *)var, (const T *)x,
                               (const A *)w, (const A *)b)))
}

static int bn_backward(dl_dtype dt, bool cl, const dl_bn_shape *s, double eps, bool training,
                       void *gx, void *gw, void *gb, const void *gy, const void *x,
                       const void *mean, const void *var, const void *w) {
    if (check_shape("batch_norm_backward", s)) return -1;
    BN_DISPATCH("batch_norm_backward", dt,
                (backward<T, A>(training, cl, s, eps, (T *)gx, (A *)gw, (A *)gb, (const T *)gy,
                                (const T *)x, (const A *)mean, (const A *)var, (const A *)w)))
}

static int bn_running(int64_t C, double *out, const double *running, const double *stat, double m,
                      double factor) {
    if (C < 1) return 0;
    bn_update_running<<<dl_cuda_blocks(C, kThreads), kThreads, 0, dl_cuda_stream()>>>(
        out, running, stat, m, factor, C);
    DL_CUDA_LAUNCHED();
    return 0;
}

static int bn_transform(dl_dtype dt, int64_t C, void *out, const void *v, double eps,
                        bool to_invstd) {
    if (C < 1) return 0;
    unsigned nb = dl_cuda_blocks(C, kThreads);
    if (dt == DL_DTYPE_F32)
        bn_var_transform<float><<<nb, kThreads, 0, dl_cuda_stream()>>>(
            (float *)out, (const float *)v, eps, to_invstd, C);
    else if (dt == DL_DTYPE_F64)
        bn_var_transform<double><<<nb, kThreads, 0, dl_cuda_stream()>>>(
            (double *)out, (const double *)v, eps, to_invstd, C);
    else
        return dl_error("batch_norm: no CUDA kernel for %s statistics", dl_dtype_name(dt));
    DL_CUDA_LAUNCHED();
    return 0;
}

extern const dl_cuda_batchnorm_kernels dl_cuda_batchnorm_table;
const dl_cuda_batchnorm_kernels dl_cuda_batchnorm_table = {
    .family = "batchnorm",
    .batch_norm_forward_train = bn_forward_train,
    .batch_norm_forward_eval = bn_forward_eval,
    .batch_norm_backward = bn_backward,
    .batch_norm_update_running = bn_running,
    .batch_norm_var_transform = bn_transform,
};
