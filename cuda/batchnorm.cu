// batchnorm.cu - CUDA batch normalization (forward in training and
// evaluation, backward), its fused ReLU (batch_norm_relu,
// batch_norm_add_relu) and the batchnorm family's kernel table (see
// src/kernels/batchnorm.h).
//
// Two implementations of training (dl_bn_impl): our own kernels ("native",
// the semantics of the CPU's src/cpu/batchnorm.c: biased batch variance,
// PyTorch's backward formulas) and cuDNN's cudnnBatchNormalization*Ex
// (persistent NHWC kernels, the fused BN+ReLU and BN+add+ReLU ops).  A plan
// per configuration picks one (the user's choice; "auto" times both once and
// keeps the faster), and a failing cuDNN call falls back to ours with a
// one-time warning.  The running-stat update is the op layer's either way.
// Evaluation is always ours (one elementwise pass).
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

#include <atomic>
#include <limits.h>
#include <mutex>
#include <stdio.h>
#include <string.h>
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

// The fused ReLU's mask bit of element j of unit u (W words per unit; see
// kernels/batchnorm.h).
__device__ inline bool mask_bit(const uint32_t *mask, int64_t u, int64_t j, int64_t W) {
    return (mask[u * W + (j >> 5)] >> (j & 31)) & 1u;
}

// Rows layout.  x, gy are (M,C); mean is (C) (unused for R_SUM); part is
// (splits,2,C): block (bx, by) sums rows [by*chunk, by*chunk + chunk) of
// channels bx*32 .. bx*32+31.  threadIdx.x picks the channel (coalesced),
// threadIdx.y strides the rows.  gy is read for R_GRAD only, through the
// fused ReLU's mask when mask is set (rows are its units, W words each).
template <typename T, typename A, int MODE>
__global__ void bn_reduce_rows(A *part, const T *x, const T *gy, const A *mean, int64_t M,
                               int64_t C, int64_t chunk, const uint32_t *mask, int64_t W) {
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
            if constexpr (MODE == R_GRAD) {
                if (!mask || mask_bit(mask, r, c, W)) gv = ld(gy[k]);
            }
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
// The mask as in bn_reduce_rows, its units the (n, c) planes.
template <typename T, typename A, int MODE>
__global__ void bn_reduce_planes(A *part, const T *x, const T *gy, const A *mean, int64_t M,
                                 int64_t C, int64_t S, int64_t chunk, const uint32_t *mask,
                                 int64_t W) {
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
        if constexpr (MODE == R_GRAD) {
            if (!mask || mask_bit(mask, n * C + c, i, W)) gv = ld(gy[k]);
        }
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

// --- the fused ReLU ---------------------------------------------------------------------
// Elements come in units (kernels/batchnorm.h): U units of L elements,
// rows (unit r holds channels 0..C-1 of row r) or planes (unit n*C + c
// holds the S elements of plane (n, c)); element j of unit u is element
// u*L + j of the dense data.  The mask gives each unit W = ceil(L/32) words.
// The forward runs over slots: unit u's L elements padded to Lp = 32*W,
// slot t = u*Lp + j.  A warp takes 32 consecutive slots starting at a
// multiple of 32, which are one mask word, and writes it from one ballot:
// no atomics, no races.  I is the index type: int when every index stays
// below 2^30 (the launchers check), else int64_t.

// y = relu(st(bn(x)) + res) with st the rounding to T, as the unfused ops
// (bn_normalize, then the add, then relu) round; res may be NULL, mask may
// be NULL (not kept).  relu keeps NaN; the mask bit is !(z <= 0).
template <typename T, typename A, typename I>
__global__ void bn_normalize_relu(T *y, uint32_t *mask, const T *x, const T *res, const A *mean,
                                  const A *scale, const A *shift, I U, I L, I Lp, I C, bool rows) {
    const I lane = (I)(threadIdx.x & 31u);
    const I nslots = U * Lp, stride = (I)gridDim.x * (I)blockDim.x;
    // base is the warp's first slot: the same in all its lanes, so every lane
    // takes the same trips and reaches the ballot
    for (I base = (I)blockIdx.x * (I)blockDim.x + (I)threadIdx.x - lane; base < nslots;
         base += stride) {
        I t = base + lane, u = t / Lp, j = t - u * Lp;
        bool pass = false;
        if (j < L) {
            I k = u * L + j, c = rows ? j : u % C;
            T z = st<T>(((A)ld(x[k]) - mean[c]) * scale[c] + shift[c]);
            if (res) z = st<T>((A)ld(z) + (A)ld(res[k]));
            A v = ld(z);
            pass = !(v <= (A)0);
            y[k] = v < (A)0 ? st<T>((A)0) : z;
        }
        unsigned bits = __ballot_sync(0xffffffffu, pass);
        if (mask && lane == 0) mask[base / 32] = bits;
    }
}

// The mask of a ReLU's output y (bits !(y <= 0)), slots as bn_normalize_relu.
template <typename T, typename I>
__global__ void bn_mask_of(uint32_t *mask, const T *y, I U, I L, I Lp) {
    const I lane = (I)(threadIdx.x & 31u);
    const I nslots = U * Lp, stride = (I)gridDim.x * (I)blockDim.x;
    for (I base = (I)blockIdx.x * (I)blockDim.x + (I)threadIdx.x - lane; base < nslots;
         base += stride) {
        I t = base + lane, u = t / Lp, j = t - u * Lp;
        bool pass = j < L && !(ld(y[u * L + j]) <= 0);
        unsigned bits = __ballot_sync(0xffffffffu, pass);
        if (lane == 0) mask[base / 32] = bits;
    }
}

// gz = (mask ? gy : 0) into gres (may be NULL) and gx (may be NULL) from gz
// as bn_grad_input (TRAIN or not); n elements, units of L, W words each.
template <typename T, typename A, bool TRAIN, typename I>
__global__ void bn_grad_input_relu(T *gx, T *gres, const uint32_t *mask, const T *gy, const T *x,
                                   const A *mean, const A *sc, const A *mdy, const A *k2, I n, I L,
                                   I W, I C, bool rows) {
    const I stride = (I)gridDim.x * (I)blockDim.x;
    for (I k = (I)blockIdx.x * (I)blockDim.x + (I)threadIdx.x; k < n; k += stride) {
        I u = k / L, j = k - u * L, c = rows ? j : u % C;
        T g = (mask[u * W + j / 32] >> (j & 31)) & 1u ? gy[k] : st<T>((A)0);
        if (gres) gres[k] = g;
        if (gx) {
            A v = ld(g);
            if constexpr (TRAIN) v = v - mdy[c] - ((A)ld(x[k]) - mean[c]) * k2[c];
            gx[k] = st<T>(v * sc[c]);
        }
    }
}

// var = 1 / invstd^2 - eps (cuDNN saves invstd; the table returns var)
__global__ void bn_invstd_to_var(float *var, const float *invstd, double eps, int64_t C) {
    for (int64_t c = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; c < C;
         c += (int64_t)gridDim.x * blockDim.x) {
        double v = (double)invstd[c];
        var[c] = (float)(1.0 / (v * v) - eps);
    }
}

// v[i] = a + b * h(i), h a hash of i in [-1, 1): inputs for timing
template <typename T> __global__ void bn_fill_hash(T *v, int64_t n, float a, float b) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        uint32_t h = (uint32_t)i * 2654435761u;
        h ^= h >> 16;
        h *= 2246822519u;
        h ^= h >> 13;
        v[i] = st<T>(a + b * ((float)(h >> 8) * (2.0f / 16777216.0f) - 1.0f));
    }
}

// v[0..C) = 1, v[C..2C) = 0
__global__ void bn_fill_ones_zeros(float *v, int64_t C) {
    for (int64_t c = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; c < C;
         c += (int64_t)gridDim.x * blockDim.x) {
        v[c] = 1.0f;
        v[C + c] = 0.0f;
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

// The fused ReLU's mask words per unit (kernels/batchnorm.h): units are rows
// of C exactly when the plan's layout is rows.
int64_t mask_words_per_unit(const Plan &p, int64_t C) {
    return ((p.rows ? C : p.S) + 31) / 32;
}

// part (splits,2,C) = chunk sums of MODE over x (and gy, through mask when
// set).
template <typename T, typename A, int MODE>
int reduce(const Plan &p, int64_t C, A *part, const T *x, const T *gy, const A *mean,
           const uint32_t *mask = nullptr) {
    cudaStream_t st = dl_cuda_stream();
    int64_t W = mask_words_per_unit(p, C);
    if (p.rows) {
        dim3 grid((unsigned)((C + kRowsX - 1) / kRowsX), (unsigned)p.splits);
        dim3 block(kRowsX, kRowsY);
        bn_reduce_rows<T, A, MODE>
            <<<grid, block, 0, st>>>(part, x, gy, mean, p.M, C, p.chunk, mask, W);
    } else {
        dim3 grid((unsigned)C, (unsigned)p.splits);
        bn_reduce_planes<T, A, MODE>
            <<<grid, kThreads, 0, st>>>(part, x, gy, mean, p.M, C, p.S, p.chunk, mask, W);
    }
    DL_CUDA_LAUNCHED();
    return 0;
}

// Units of the fused ReLU for plan p (see "the fused ReLU" above).
struct Units {
    int64_t U, L, W;
};
Units units_of(const Plan &p, const dl_bn_shape *s) {
    Units u;
    u.U = p.rows ? p.M : s->N * s->C;
    u.L = p.rows ? s->C : s->S;
    u.W = (u.L + 31) / 32;
    return u;
}
const int64_t kSmallIndex = (int64_t)1 << 30; // int indices below this (with the grid stride)

// y = relu(bn(x) + res) and its mask (res, mask may be NULL).
template <typename T, typename A>
int normalize_relu(const Plan &p, const dl_bn_shape *s, T *y, uint32_t *mask, const T *x,
                   const T *res, const A *mean, const A *scale, const A *shift) {
    Units n = units_of(p, s);
    int64_t Lp = n.W * 32, nslots = n.U * Lp;
    unsigned nb = dl_cuda_blocks(nslots, kThreads);
    cudaStream_t st = dl_cuda_stream();
    if (nslots < kSmallIndex)
        bn_normalize_relu<T, A, int><<<nb, kThreads, 0, st>>>(
            y, mask, x, res, mean, scale, shift, (int)n.U, (int)n.L, (int)Lp, (int)s->C, p.rows);
    else
        bn_normalize_relu<T, A, int64_t><<<nb, kThreads, 0, st>>>(
            y, mask, x, res, mean, scale, shift, n.U, n.L, Lp, s->C, p.rows);
    DL_CUDA_LAUNCHED();
    return 0;
}

// mask = the bits of y > 0 (a ReLU's output), for plan p.
template <typename T> int mask_of(const Plan &p, const dl_bn_shape *s, uint32_t *mask, const T *y) {
    Units n = units_of(p, s);
    int64_t Lp = n.W * 32, nslots = n.U * Lp;
    unsigned nb = dl_cuda_blocks(nslots, kThreads);
    cudaStream_t st = dl_cuda_stream();
    if (nslots < kSmallIndex)
        bn_mask_of<T, int><<<nb, kThreads, 0, st>>>(mask, y, (int)n.U, (int)n.L, (int)Lp);
    else
        bn_mask_of<T, int64_t><<<nb, kThreads, 0, st>>>(mask, y, n.U, n.L, Lp);
    DL_CUDA_LAUNCHED();
    return 0;
}

// gres and gx through the mask (bn_grad_input_relu).
template <typename T, typename A, bool TRAIN, typename I>
void launch_grad_relu(const Plan &p, const dl_bn_shape *s, T *gx, T *gres, const uint32_t *mask,
                      const T *gy, const T *x, const A *mean, const A *sc, const A *mdy,
                      const A *k2) {
    Units n = units_of(p, s);
    int64_t total = s->N * s->C * s->S;
    bn_grad_input_relu<T, A, TRAIN, I>
        <<<dl_cuda_blocks(total, kThreads), kThreads, 0, dl_cuda_stream()>>>(
            gx, gres, mask, gy, x, mean, sc, mdy, k2, (I)total, (I)n.L, (I)n.W, (I)s->C, p.rows);
}

template <typename T, typename A>
int grad_input_relu(bool training, const Plan &p, const dl_bn_shape *s, T *gx, T *gres,
                    const uint32_t *mask, const T *gy, const T *x, const A *mean, const A *sc,
                    const A *mdy, const A *k2) {
    bool small = s->N * s->C * s->S < kSmallIndex;
    if (training && small)
        launch_grad_relu<T, A, true, int>(p, s, gx, gres, mask, gy, x, mean, sc, mdy, k2);
    else if (training)
        launch_grad_relu<T, A, true, int64_t>(p, s, gx, gres, mask, gy, x, mean, sc, mdy, k2);
    else if (small)
        launch_grad_relu<T, A, false, int>(p, s, gx, gres, mask, gy, x, mean, sc, mdy, k2);
    else
        launch_grad_relu<T, A, false, int64_t>(p, s, gx, gres, mask, gy, x, mean, sc, mdy, k2);
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
// relu: the fused ReLU, with res (like x) and mask each NULL or set.
template <typename T, typename A>
int forward(bool training, bool channels_last, const dl_bn_shape *s, double eps, T *y, A *mean,
            A *var, const T *x, const A *w, const A *b, bool relu = false, const T *res = nullptr,
            uint32_t *mask = nullptr) {
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
    if (rc == 0 && relu) {
        rc = normalize_relu<T, A>(p, s, y, mask, x, res, mean, scale, shift);
    } else if (rc == 0) {
        int64_t n = s->N * C * s->S;
        bn_normalize<T, A><<<dl_cuda_blocks(n, kThreads), kThreads, 0, dl_cuda_stream()>>>(
            y, x, mean, scale, shift, n, C, p.S);
        rc = launched();
    }
    dl_cuda_free(scr);
    return rc;
}

// The gradients; with mask (the fused ReLU), gy passes through it first and
// gres (may be NULL) receives it.
template <typename T, typename A>
int backward(bool training, bool channels_last, const dl_bn_shape *s, double eps, T *gx, A *gw,
             A *gb, const T *gy, const T *x, const A *mean, const A *var, const A *w,
             const uint32_t *mask = nullptr, T *gres = nullptr) {
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
        rc = (reduce<T, A, R_GRAD>(p, C, part, x, gy, mean, mask) ||
              sum_parts<A>(p, C, sums, sums + C, part, (A)1))
                 ? -1
                 : 0;
    if (rc == 0) {
        bn_backward_coefs<A><<<dl_cuda_blocks(C, kThreads), kThreads, 0, dl_cuda_stream()>>>(
            gw, gb, sc, training ? mdy : nullptr, training ? k2 : nullptr, sums, var, w, (A)eps,
            (A)p.M, C);
        rc = launched();
    }
    if (rc == 0 && mask && (gx || gres)) {
        rc = grad_input_relu<T, A>(training, p, s, gx, gres, mask, gy, x, mean, sc,
                                   training ? mdy : nullptr, training ? k2 : nullptr);
    } else if (rc == 0 && gx) {
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

// --- cuDNN: cudnnBatchNormalization*Ex ------------------------------------------------------
// Training only (evaluation is one elementwise pass of ours).  The data is
// described as 4-D (N, C, S, 1): NHWC for the rows layout (channels-last, or
// S == 1), where cuDNN's persistent kernels run (CUDNN_BATCHNORM_SPATIAL_
// PERSISTENT) and where its fused ops (BN_ACTIVATION, BN_ADD_ACTIVATION) are
// offered; NCHW otherwise (CUDNN_BATCHNORM_SPATIAL, plain batch norm only).
// The per-channel vectors are float (cuDNN's derived descriptor for float,
// half and bfloat16 data).  The running statistics stay the op layer's:
// cuDNN updates a scratch pair.  It saves invstd; the table's contract
// returns the biased variance, so var = 1/invstd^2 - eps (and the backward
// turns it back).  The reserve space is the fused ReLU's mask (act->mask):
// its size comes from cudnnGetBatchNormalizationTrainingExReserveSpaceSize.

struct BnDescs {
    cudnnTensorDescriptor_t x = nullptr, bn = nullptr;
    cudnnActivationDescriptor_t act = nullptr;
    BnDescs() = default;
    BnDescs(const BnDescs &) = delete;
    BnDescs &operator=(const BnDescs &) = delete;
    ~BnDescs() {
        if (x) cudnnDestroyTensorDescriptor(x);
        if (bn) cudnnDestroyTensorDescriptor(bn);
        if (act) cudnnDestroyActivationDescriptor(act);
    }
};

// act: 0 plain, 1 ReLU, 2 add and ReLU (the table's numbering)
cudnnBatchNormOps_t cudnn_ops(int act) {
    return act == 2   ? CUDNN_BATCHNORM_OPS_BN_ADD_ACTIVATION
           : act == 1 ? CUDNN_BATCHNORM_OPS_BN_ACTIVATION
                      : CUDNN_BATCHNORM_OPS_BN;
}

bool rows_layout(bool channels_last, const dl_bn_shape *s) {
    return channels_last || s->S == 1;
}

cudnnBatchNormMode_t cudnn_mode(bool rows) {
    return rows ? CUDNN_BATCHNORM_SPATIAL_PERSISTENT : CUDNN_BATCHNORM_SPATIAL;
}

// Whether cuDNN is worth asking at all: its dtypes, int sizes, and the fused
// ops only in NHWC with channels a multiple of 4 (cuDNN's documented case).
bool cudnn_candidate(dl_dtype dt, bool channels_last, const dl_bn_shape *s, int act) {
    if (dt != DL_DTYPE_F32 && dt != DL_DTYPE_F16 && dt != DL_DTYPE_BF16) return false;
    if (s->N > INT_MAX || s->C > INT_MAX || s->S > INT_MAX || s->N * s->C * s->S > INT_MAX)
        return false;
    if (act && (!rows_layout(channels_last, s) || s->C % 4 != 0)) return false;
    return true;
}

int cudnn_descs(BnDescs &d, dl_dtype dt, bool channels_last, const dl_bn_shape *s, int act) {
    cudnnDataType_t data = dt == DL_DTYPE_F16    ? CUDNN_DATA_HALF
                           : dt == DL_DTYPE_BF16 ? CUDNN_DATA_BFLOAT16
                                                 : CUDNN_DATA_FLOAT;
    bool rows = rows_layout(channels_last, s);
    DL_CUDNN_CHECK(cudnnCreateTensorDescriptor(&d.x));
    DL_CUDNN_CHECK(cudnnCreateTensorDescriptor(&d.bn));
    DL_CUDNN_CHECK(cudnnSetTensor4dDescriptor(d.x, rows ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW,
                                              data, (int)s->N, (int)s->C, (int)s->S, 1));
    DL_CUDNN_CHECK(cudnnDeriveBNTensorDescriptor(d.bn, d.x, cudnn_mode(rows)));
    if (act) {
        DL_CUDNN_CHECK(cudnnCreateActivationDescriptor(&d.act));
        DL_CUDNN_CHECK(
            cudnnSetActivationDescriptor(d.act, CUDNN_ACTIVATION_RELU, CUDNN_PROPAGATE_NAN, 0.0));
    }
    return 0;
}

// The reserve space cuDNN's training forward wants.
int cudnn_reserve(dl_dtype dt, bool channels_last, const dl_bn_shape *s, int act, size_t *bytes) {
    cudnnHandle_t h = dl_cuda_cudnn();
    if (!h) return -1;
    BnDescs d;
    if (cudnn_descs(d, dt, channels_last, s, act)) return -1;
    DL_CUDNN_CHECK(cudnnGetBatchNormalizationTrainingExReserveSpaceSize(
        h, cudnn_mode(rows_layout(channels_last, s)), cudnn_ops(act), d.act, d.x, bytes));
    return 0;
}

const size_t kAlign = 256;
size_t round_up(size_t n) {
    return (n + kAlign - 1) / kAlign * kAlign;
}

// cuDNN's workspace (never NULL: cuDNN runs its NHWC kernels only with one),
// then floats: 1s and 0s for an absent weight and bias and nf more, then
// `big` more bytes.  One block from the caching allocator, each part on a
// 256-byte boundary: ws, fl[0..C) 1s, fl[C..2C) 0s, fl + 2C the rest, more.
struct Scratch {
    char *p = nullptr;
    void *ws = nullptr;
    float *fl = nullptr;
    char *more = nullptr;
    Scratch() = default;
    Scratch(const Scratch &) = delete;
    Scratch &operator=(const Scratch &) = delete;
    ~Scratch() {
        if (p) dl_cuda_free(p);
    }
    int get(size_t nb, int64_t C, int64_t nf, size_t big = 0) {
        size_t wsb = round_up(nb > 0 ? nb : 1),
               flb = round_up(sizeof(float) * (size_t)(2 * C + nf));
        p = (char *)dl_cuda_malloc(wsb + flb + big);
        if (!p) return -1;
        ws = p;
        fl = (float *)(p + wsb);
        more = p + wsb + flb;
        bn_fill_ones_zeros<<<dl_cuda_blocks(C, kThreads), kThreads, 0, dl_cuda_stream()>>>(fl, C);
        DL_CUDA_LAUNCHED();
        return 0;
    }
};

// The training forward through cuDNN: y, mean, var (float, (C)) from x, w, b
// (float or NULL), res (act 2), writing the reserve space (reserve_bytes).
int cudnn_forward(dl_dtype dt, bool channels_last, const dl_bn_shape *s, double eps, int act,
                  void *y, float *mean, float *var, const void *x, const float *w, const float *b,
                  const void *res, void *reserve, size_t reserve_bytes) {
    cudnnHandle_t h = dl_cuda_cudnn();
    if (!h) return -1;
    if (eps < CUDNN_BN_MIN_EPSILON)
        return dl_error("batch_norm: cuDNN takes eps >= %g, got %g", (double)CUDNN_BN_MIN_EPSILON,
                        eps);
    BnDescs d;
    if (cudnn_descs(d, dt, channels_last, s, act)) return -1;
    cudnnBatchNormMode_t mode = cudnn_mode(rows_layout(channels_last, s));
    cudnnBatchNormOps_t ops = cudnn_ops(act);
    cudnnTensorDescriptor_t z = act == 2 ? d.x : nullptr;
    size_t ws = 0, rs = 0;
    DL_CUDNN_CHECK(cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize(h, mode, ops, d.x, z,
                                                                            d.x, d.bn, d.act, &ws));
    DL_CUDNN_CHECK(
        cudnnGetBatchNormalizationTrainingExReserveSpaceSize(h, mode, ops, d.act, d.x, &rs));
    if (rs > reserve_bytes || (rs > 0 && !reserve))
        return dl_error("batch_norm: cuDNN wants %zu bytes of reserve space, %zu given", rs,
                        reserve_bytes);
    int64_t C = s->C;
    Scratch sc; // then: invstd, running mean, running var
    if (sc.get(ws, C, 3 * C)) return -1;
    float *invstd = sc.fl + 2 * C, *rmean = sc.fl + 3 * C, *rvar = sc.fl + 4 * C;
    DL_CUDA_CHECK(cudaMemsetAsync(rmean, 0, sizeof(float) * (size_t)(2 * C), dl_cuda_stream()));
    const float one = 1.0f, zero = 0.0f;
    DL_CUDNN_CHECK(cudnnBatchNormalizationForwardTrainingEx(
        h, mode, ops, &one, &zero, d.x, x, z, act == 2 ? res : nullptr, d.x, y, d.bn, w ? w : sc.fl,
        b ? b : sc.fl + C, 1.0, rmean, rvar, eps, mean, invstd, d.act, sc.ws, ws,
        rs > 0 ? reserve : nullptr, rs));
    bn_invstd_to_var<<<dl_cuda_blocks(C, kThreads), kThreads, 0, dl_cuda_stream()>>>(var, invstd,
                                                                                     eps, C);
    DL_CUDA_LAUNCHED();
    return 0;
}

// The training backward through cuDNN.  gx, gw, gb, gres may each be NULL
// (cuDNN writes them all: scratch then); y (the forward's output) and
// reserve are read by the fused ops (act 1, 2).
int cudnn_backward(dl_dtype dt, bool channels_last, const dl_bn_shape *s, double eps, int act,
                   void *gx, float *gw, float *gb, void *gres, const void *gy, const void *x,
                   const void *y, const float *mean, const float *var, const float *w,
                   const float *b, void *reserve, size_t reserve_bytes) {
    cudnnHandle_t h = dl_cuda_cudnn();
    if (!h) return -1;
    if (eps < CUDNN_BN_MIN_EPSILON)
        return dl_error("batch_norm_backward: cuDNN takes eps >= %g, got %g",
                        (double)CUDNN_BN_MIN_EPSILON, eps);
    if (act && (!y || !reserve))
        return dl_error("batch_norm_backward: cuDNN's fused backward needs y and its reserve "
                        "space");
    BnDescs d;
    if (cudnn_descs(d, dt, channels_last, s, act)) return -1;
    cudnnBatchNormMode_t mode = cudnn_mode(rows_layout(channels_last, s));
    cudnnBatchNormOps_t ops = cudnn_ops(act);
    cudnnTensorDescriptor_t dz = act == 2 ? d.x : nullptr;
    size_t ws = 0;
    DL_CUDNN_CHECK(cudnnGetBatchNormalizationBackwardExWorkspaceSize(h, mode, ops, d.x, d.x, d.x,
                                                                     dz, d.x, d.bn, d.act, &ws));
    int64_t C = s->C, n = s->N * s->C * s->S;
    // scratch: floats invstd, gw and gb (when absent); gx and gres when
    // absent (cuDNN writes them all)
    size_t nb = round_up((size_t)n * (dt == DL_DTYPE_F32 ? 4 : 2));
    bool gx_scr = !gx, gres_scr = act == 2 && !gres;
    Scratch sc;
    if (sc.get(ws, C, 3 * C, (gx_scr ? nb : 0) + (gres_scr ? nb : 0))) return -1;
    float *invstd = sc.fl + 2 * C;
    if (!gw) gw = sc.fl + 3 * C;
    if (!gb) gb = sc.fl + 4 * C;
    if (gx_scr) gx = sc.more;
    if (gres_scr) gres = sc.more + (gx_scr ? nb : 0);
    bn_var_transform<float>
        <<<dl_cuda_blocks(C, kThreads), kThreads, 0, dl_cuda_stream()>>>(invstd, var, eps, true, C);
    DL_CUDA_LAUNCHED();
    const float one = 1.0f, zero = 0.0f;
    DL_CUDNN_CHECK(cudnnBatchNormalizationBackwardEx(
        h, mode, ops, &one, &zero, &one, &zero, d.x, x, act ? d.x : nullptr, act ? y : nullptr, d.x,
        gy, dz, act == 2 ? gres : nullptr, d.x, gx, d.bn, w ? w : sc.fl, b ? b : sc.fl + C, gw, gb,
        eps, mean, invstd, d.act, sc.ws, ws, act ? reserve : nullptr, act ? reserve_bytes : 0));
    return 0;
}

// --- choosing the implementation (kernels/batchnorm.h, dl_bn_plan) --------------------------
// Per (device, dtype, layout, shape, act, the user's choice): native or
// cuDNN, and cuDNN's reserve size, in a small table (round-robin
// replacement; a configuration whose cuDNN call failed is set to native).
// With DL_BN_IMPL_AUTO a new configuration is timed once: forward then
// backward of each implementation on scratch data of its shape, the faster
// kept -- but not while the stream is being captured into a CUDA graph (no
// timing there: native, not remembered).

struct PlanKey {
    int64_t v[8];
};
struct PlanEntry {
    PlanKey key;
    int impl;
    size_t reserve;
    bool used;
};
const int kPlans = 128;
PlanEntry g_plans[kPlans];
int g_plan_next = 0;
std::mutex g_plan_mu;

PlanKey plan_key(dl_dtype dt, bool channels_last, const dl_bn_shape *s, int act) {
    PlanKey k = {{dl_cuda_device(), (int64_t)dt, channels_last, s->N, s->C, s->S, act,
                  (int64_t)dl_bn_impl_choice}};
    return k;
}

bool plan_get(const PlanKey &k, PlanEntry *e) {
    std::lock_guard<std::mutex> lock(g_plan_mu);
    for (int i = 0; i < kPlans; i++)
        if (g_plans[i].used && memcmp(&g_plans[i].key, &k, sizeof k) == 0) {
            *e = g_plans[i];
            return true;
        }
    return false;
}

void plan_put(const PlanKey &k, int impl, size_t reserve) {
    std::lock_guard<std::mutex> lock(g_plan_mu);
    for (int i = 0; i < kPlans; i++)
        if (g_plans[i].used && memcmp(&g_plans[i].key, &k, sizeof k) == 0) {
            g_plans[i].impl = impl;
            g_plans[i].reserve = reserve;
            return;
        }
    g_plans[g_plan_next] = PlanEntry{k, impl, reserve, true};
    g_plan_next = (g_plan_next + 1) % kPlans;
}

// A cuDNN call failed where our kernels can stand in: say so once, and use
// ours for this configuration from now on.
void cudnn_failed(const char *what, dl_dtype dt, bool channels_last, const dl_bn_shape *s,
                  int act) {
    static std::atomic<bool> said{false};
    if (!said.exchange(true))
        fprintf(stderr,
                "dlua: warning: cuDNN's batch norm %s failed (%s); dlua's kernels run this "
                "configuration instead (this warning is shown once)\n",
                what, dl_last_error());
    plan_put(plan_key(dt, channels_last, s, act), DL_BN_IMPL_NATIVE, 0);
}

bool capturing() {
    cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(dl_cuda_stream(), &st) != cudaSuccess) {
        cudaGetLastError(); // (cleared: not capturing is the safe answer)
        return false;
    }
    return st != cudaStreamCaptureStatusNone;
}

struct Events {
    cudaEvent_t a = nullptr, b = nullptr;
    Events() = default;
    Events(const Events &) = delete;
    Events &operator=(const Events &) = delete;
    ~Events() {
        if (a) cudaEventDestroy(a);
        if (b) cudaEventDestroy(b);
    }
};

// One training forward and backward of implementation impl on scratch
// buffers (see bench).
struct BenchBufs {
    void *x, *y, *gy, *gx, *res, *gres;
    float *w, *b, *mean, *var, *gw, *gb;
    void *mask;
    size_t mask_bytes;
};

template <typename T>
int bench_step(int impl, dl_dtype dt, bool cl, const dl_bn_shape *s, int act, const BenchBufs &u) {
    const double eps = 1e-5;
    if (impl == DL_BN_IMPL_CUDNN)
        return cudnn_forward(dt, cl, s, eps, act, u.y, u.mean, u.var, u.x, u.w, u.b, u.res, u.mask,
                             u.mask_bytes) ||
               cudnn_backward(dt, cl, s, eps, act, u.gx, u.gw, u.gb, u.gres, u.gy, u.x, u.y, u.mean,
                              u.var, u.w, u.b, u.mask, u.mask_bytes);
    uint32_t *m = act ? (uint32_t *)u.mask : nullptr;
    return forward<T, float>(true, cl, s, eps, (T *)u.y, u.mean, u.var, (const T *)u.x, u.w, u.b,
                             act != 0, (const T *)u.res, m) ||
           backward<T, float>(true, cl, s, eps, (T *)u.gx, u.gw, u.gb, (const T *)u.gy,
                              (const T *)u.x, u.mean, u.var, u.w, m, (T *)u.gres);
}

// Milliseconds of one step of impl (the best of 3 after a warm-up), or -1
// when it fails (error set).
template <typename T>
int bench_time(int impl, dl_dtype dt, bool cl, const dl_bn_shape *s, int act, const BenchBufs &u,
               float *ms) {
    Events ev;
    DL_CUDA_CHECK(cudaEventCreate(&ev.a));
    DL_CUDA_CHECK(cudaEventCreate(&ev.b));
    if (bench_step<T>(impl, dt, cl, s, act, u)) return -1;
    *ms = 1e30f;
    for (int i = 0; i < 3; i++) {
        DL_CUDA_CHECK(cudaEventRecord(ev.a, dl_cuda_stream()));
        if (bench_step<T>(impl, dt, cl, s, act, u)) return -1;
        DL_CUDA_CHECK(cudaEventRecord(ev.b, dl_cuda_stream()));
        DL_CUDA_CHECK(cudaEventSynchronize(ev.b));
        float t = 0;
        DL_CUDA_CHECK(cudaEventElapsedTime(&t, ev.a, ev.b));
        if (t < *ms) *ms = t;
    }
    return 0;
}

// Times both implementations on scratch data of the configuration (4 or 6
// buffers of its size): *impl the faster (native when cuDNN fails).  -1 when
// the native one cannot run or the scratch cannot be had.
template <typename T>
int bench(dl_dtype dt, bool cl, const dl_bn_shape *s, int act, size_t reserve, int *impl) {
    int64_t n = s->N * s->C * s->S, C = s->C;
    size_t nb = sizeof(T) * (size_t)n, vb = round_up(sizeof(float) * (size_t)C);
    size_t mb = (size_t)(4 * dl_bn_mask_words(cl, s));
    if (reserve > mb) mb = reserve;
    int nbuf = act == 2 ? 6 : 4;
    size_t total = nbuf * round_up(nb) + 6 * vb + round_up(mb);
    char *p = (char *)dl_cuda_malloc(total);
    if (!p) return -1;
    BenchBufs u;
    char *q = p;
    void **bufs[6] = {&u.x, &u.y, &u.gy, &u.gx, &u.res, &u.gres};
    u.res = u.gres = nullptr;
    for (int i = 0; i < nbuf; i++, q += round_up(nb)) *bufs[i] = q;
    float **vecs[6] = {&u.w, &u.b, &u.mean, &u.var, &u.gw, &u.gb};
    for (int i = 0; i < 6; i++, q += vb) *vecs[i] = (float *)q;
    u.mask = q;
    u.mask_bytes = mb;
    unsigned g = dl_cuda_blocks(n, kThreads), gc = dl_cuda_blocks(C, kThreads);
    cudaStream_t st = dl_cuda_stream();
    bn_fill_hash<T><<<g, kThreads, 0, st>>>((T *)u.x, n, 0.5f, 2.0f);
    bn_fill_hash<T><<<g, kThreads, 0, st>>>((T *)u.gy, n, 0.0f, 1.0f);
    if (u.res) bn_fill_hash<T><<<g, kThreads, 0, st>>>((T *)u.res, n, 0.0f, 1.0f);
    bn_fill_hash<float><<<gc, kThreads, 0, st>>>(u.w, C, 1.0f, 0.2f);
    bn_fill_hash<float><<<gc, kThreads, 0, st>>>(u.b, C, 0.0f, 0.2f);
    int rc = launched();
    float tn = 0, tc = 0;
    if (rc == 0) rc = bench_time<T>(DL_BN_IMPL_NATIVE, dt, cl, s, act, u, &tn);
    if (rc == 0) {
        *impl = DL_BN_IMPL_NATIVE;
        if (bench_time<T>(DL_BN_IMPL_CUDNN, dt, cl, s, act, u, &tc) == 0 && tc < tn)
            *impl = DL_BN_IMPL_CUDNN;
        cudaGetLastError(); // (a refused cuDNN call leaves no sticky error)
    }
    dl_cuda_free(p);
    return rc;
}

int bench_dispatch(dl_dtype dt, bool cl, const dl_bn_shape *s, int act, size_t reserve, int *impl) {
    switch (dt) {
    case DL_DTYPE_F32: return bench<float>(dt, cl, s, act, reserve, impl);
    case DL_DTYPE_F16: return bench<__half>(dt, cl, s, act, reserve, impl);
    case DL_DTYPE_BF16: return bench<__nv_bfloat16>(dt, cl, s, act, reserve, impl);
    default: *impl = DL_BN_IMPL_NATIVE; return 0;
    }
}

// The plan of a training configuration (the table's batch_norm_plan).
int plan_of(dl_dtype dt, bool cl, const dl_bn_shape *s, int act, dl_bn_plan *out) {
    int64_t native_bytes = act ? 4 * dl_bn_mask_words(cl, s) : 0;
    out->impl = DL_BN_IMPL_NATIVE;
    out->mask_bytes = native_bytes;
    dl_bn_impl choice = dl_bn_impl_choice;
    if (choice == DL_BN_IMPL_NATIVE || !cudnn_candidate(dt, cl, s, act)) return 0;
    PlanKey key = plan_key(dt, cl, s, act);
    PlanEntry e;
    if (!plan_get(key, &e)) {
        size_t rs = 0;
        e.impl = DL_BN_IMPL_NATIVE;
        if (cudnn_reserve(dt, cl, s, act, &rs)) {
            cudnn_failed("reserve-space query", dt, cl, s, act);
            return 0;
        }
        if (act == 0 && rs > 0) {
            /* plain batch norm keeps no reserve space */
        } else if (choice == DL_BN_IMPL_CUDNN) {
            e.impl = DL_BN_IMPL_CUDNN;
        } else if (capturing()) {
            return 0; // no timing inside a graph capture; not remembered
        } else if (bench_dispatch(dt, cl, s, act, rs, &e.impl)) {
            e.impl = DL_BN_IMPL_NATIVE; // (the timing could not run, e.g. no memory for it)
        }
        e.reserve = rs;
        plan_put(key, e.impl, rs);
    }
    out->impl = e.impl;
    if (e.impl == DL_BN_IMPL_CUDNN && (int64_t)e.reserve > native_bytes)
        out->mask_bytes = (int64_t)e.reserve;
    return 0;
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

// Plain batch norm in training asks the plan too (act 0): cuDNN when it is
// the choice, our kernels when cuDNN fails.  (Its backward needs nothing the
// forward kept, so either implementation's backward follows either forward.)
static int bn_forward_train(dl_dtype dt, bool cl, const dl_bn_shape *s, double eps, void *y,
                            void *mean, void *var, const void *x, const void *w, const void *b) {
    if (check_shape("batch_norm", s)) return -1;
    dl_bn_plan plan;
    if (plan_of(dt, cl, s, 0, &plan)) return -1;
    if (plan.impl == DL_BN_IMPL_CUDNN) {
        if (cudnn_forward(dt, cl, s, eps, 0, y, (float *)mean, (float *)var, x, (const float *)w,
                          (const float *)b, nullptr, nullptr, 0) == 0)
            return 0;
        cudnn_failed("forward", dt, cl, s, 0);
    }
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
    dl_bn_plan plan = {DL_BN_IMPL_NATIVE, 0};
    if (training && plan_of(dt, cl, s, 0, &plan)) return -1;
    if (plan.impl == DL_BN_IMPL_CUDNN) {
        if (cudnn_backward(dt, cl, s, eps, 0, gx, (float *)gw, (float *)gb, nullptr, gy, x, nullptr,
                           (const float *)mean, (const float *)var, (const float *)w, nullptr,
                           nullptr, 0) == 0)
            return 0;
        cudnn_failed("backward", dt, cl, s, 0);
    }
    BN_DISPATCH("batch_norm_backward", dt,
                (backward<T, A>(training, cl, s, eps, (T *)gx, (A *)gw, (A *)gb, (const T *)gy,
                                (const T *)x, (const A *)mean, (const A *)var, (const A *)w)))
}

static int bn_plan(dl_dtype dt, bool cl, const dl_bn_shape *s, int act, dl_bn_plan *plan) {
    if (check_shape("batch_norm", s)) return -1;
    if (act < 0 || act > 2) return dl_error("batch_norm: bad fused-ReLU kind %d", act);
    return plan_of(dt, cl, s, act, plan);
}

// The fused ReLU (act->res set: with the add).  Training with the plan's
// cuDNN: cudnnBatchNormalizationForwardTrainingEx, the mask its reserve
// space; when that fails, our kernels (act->impl says which ran; the mask
// has room for either).  Evaluation: ours.
static int bn_act_forward(dl_dtype dt, bool cl, const dl_bn_shape *s, double eps, bool training,
                          void *y, void *mean, void *var, const void *x, const void *w,
                          const void *b, dl_bn_act *act) {
    if (check_shape("batch_norm_relu", s)) return -1;
    int kind = act->res ? 2 : 1;
    if (training && act->impl == DL_BN_IMPL_CUDNN) {
        if (act->mask &&
            cudnn_forward(dt, cl, s, eps, kind, y, (float *)mean, (float *)var, x, (const float *)w,
                          (const float *)b, act->res, act->mask, (size_t)act->mask_bytes) == 0)
            return 0;
        cudnn_failed("forward", dt, cl, s, kind);
    }
    act->impl = DL_BN_IMPL_NATIVE;
    if (act->mask && act->mask_bytes < 4 * dl_bn_mask_words(cl, s))
        return dl_error("batch_norm_relu: the mask has %lld bytes, %lld needed",
                        (long long)act->mask_bytes, (long long)(4 * dl_bn_mask_words(cl, s)));
    BN_DISPATCH("batch_norm_relu", dt,
                (forward<T, A>(training, cl, s, eps, (T *)y, (A *)mean, (A *)var, (const T *)x,
                               (const A *)w, (const A *)b, true, (const T *)act->res,
                               (uint32_t *)act->mask)))
}

// Our backward through a mask of bits rebuilt from the forward's output
// (after cuDNN's backward failed on its own reserve space).
template <typename T, typename A>
int backward_from_y(bool training, bool cl, const dl_bn_shape *s, double eps, T *gx, A *gw, A *gb,
                    const T *gy, const T *x, const A *mean, const A *var, const A *w, const T *y,
                    T *gres) {
    if (!y) return dl_error("batch_norm_relu_backward: no forward output to rebuild the mask");
    Plan p = make_plan(cl, s);
    uint32_t *bits = (uint32_t *)dl_cuda_malloc(sizeof(uint32_t) * (size_t)dl_bn_mask_words(cl, s));
    if (!bits) return -1;
    int rc = mask_of<T>(p, s, bits, y) ||
             backward<T, A>(training, cl, s, eps, gx, gw, gb, gy, x, mean, var, w, bits, gres);
    dl_cuda_free(bits);
    return rc ? -1 : 0;
}

static int bn_act_backward(dl_dtype dt, bool cl, const dl_bn_shape *s, double eps, bool training,
                           void *gx, void *gw, void *gb, const void *gy, const void *x,
                           const void *mean, const void *var, const void *w, const void *b,
                           const dl_bn_act *act) {
    if (check_shape("batch_norm_relu_backward", s)) return -1;
    if (!act->mask) return dl_error("batch_norm_relu_backward: the ReLU mask is required");
    int kind = act->add ? 2 : 1;
    if (act->impl == DL_BN_IMPL_CUDNN) {
        if (training &&
            cudnn_backward(dt, cl, s, eps, kind, gx, (float *)gw, (float *)gb, act->gres, gy, x,
                           act->y, (const float *)mean, (const float *)var, (const float *)w,
                           (const float *)b, act->mask, (size_t)act->mask_bytes) == 0)
            return 0;
        cudnn_failed("backward", dt, cl, s, kind);
        BN_DISPATCH(
            "batch_norm_relu_backward", dt,
            (backward_from_y<T, A>(training, cl, s, eps, (T *)gx, (A *)gw, (A *)gb, (const T *)gy,
                                   (const T *)x, (const A *)mean, (const A *)var, (const A *)w,
                                   (const T *)act->y, (T *)act->gres)))
    }
    if (act->mask_bytes < 4 * dl_bn_mask_words(cl, s))
        return dl_error("batch_norm_relu_backward: the mask has %lld bytes, %lld needed",
                        (long long)act->mask_bytes, (long long)(4 * dl_bn_mask_words(cl, s)));
    BN_DISPATCH("batch_norm_relu_backward", dt,
                (backward<T, A>(training, cl, s, eps, (T *)gx, (A *)gw, (A *)gb, (const T *)gy,
                                (const T *)x, (const A *)mean, (const A *)var, (const A *)w,
                                (const uint32_t *)act->mask, (T *)act->gres)))
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

DL_CUDA_TABLE(batchnorm) = {
    .family = "batchnorm",
    .batch_norm_forward_train = bn_forward_train,
    .batch_norm_forward_eval = bn_forward_eval,
    .batch_norm_backward = bn_backward,
    .batch_norm_update_running = bn_running,
    .batch_norm_var_transform = bn_transform,
    .batch_norm_plan = bn_plan,
    .batch_norm_act_forward = bn_act_forward,
    .batch_norm_act_backward = bn_act_backward,
};
