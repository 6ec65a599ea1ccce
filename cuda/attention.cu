// attention.cu - fused CUDA kernels of scaled dot-product attention, forward
// and backward (src/kernels/attention.h has the layouts, the mask descriptor,
// the convention for fully masked rows and the dropout stream; the CPU twins
// are in src/cpu/attention.c); the attention family's table ends this file.
//
// No (L, S) matrix is ever formed.  Every kernel works in tiles of 32 rows
// held in shared memory, one row per lane of a warp, so a tile's 32 dot
// products are computed in parallel and its 32 weights are then broadcast
// with warp shuffles while each lane accumulates its own slice (dims
// lane, lane + 32, ...) of an output row in registers.
//  - forward: a block takes BQ = 16 query rows of one batch entry (4 rows per
//    warp); it walks the key tiles (K and V staged in shared memory) with an
//    online softmax (running max m and sum l per row), and writes
//    out = acc / l and lse = m + log(l).  Under is_causal the key tiles past
//    the block's last row are skipped.
//  - backward: D = rowsum(dO * O) first (a warp per row); then one kernel
//    takes 16 key rows per block and walks the query tiles for dK and dV, and
//    one takes 16 query rows per block and walks the key tiles for dQ.  Both
//    recompute the weights from lse; no atomics, so results are the same on
//    every run.
// The half types are read into float and accumulate in float (double for
// float64); lse is float (double).  Head dims up to 256 (registers hold
// ceil(dim/32) values per row and lane); the shared memory a block needs must
// fit the device (checked, with a clear error).
#include "common.cuh"
#include "philox.cuh"

extern "C" {
#include "kernels/attention.h"
#include "kernels/cuda.h"
}

#include <math.h>

namespace {

constexpr int KT = 32;       // rows of a shared tile: one per lane
constexpr int NW = 4;        // warps per block
constexpr int RPW = 4;       // rows a warp owns
constexpr int BQ = NW * RPW; // rows a block owns
constexpr int MAXD = 256;    // largest head dim
constexpr unsigned FULL = 0xffffffffu;

// --- arithmetic in the accumulator type ----------------------------------------------------

template <typename T> struct acc_of { using type = float; };
template <> struct acc_of<double> { using type = double; };

// element conversions: common.cuh's for the float accumulator, none for double
template <typename A, typename T> __device__ inline A load(T v) {
    return dl_to_float<T>(v);
}
template <> __device__ inline double load<double, double>(double v) {
    return v;
}
template <typename T, typename A> __device__ inline T store(A v) {
    return dl_from_float<T>(v);
}
template <> __device__ inline double store<double, double>(double v) {
    return v;
}

__device__ inline int64_t min64(int64_t a, int64_t b) {
    return a < b ? a : b;
}

__device__ inline float ex(float v) {
    return expf(v);
}
__device__ inline double ex(double v) {
    return exp(v);
}

// max and sum over the warp; NaN is ignored by the max (it then spreads
// through the exponentials), as on the CPU
template <typename A> __device__ inline A warp_max(A v) {
    for (int o = 16; o > 0; o >>= 1) v = fmax(v, __shfl_xor_sync(FULL, v, o));
    return v;
}
template <typename A> __device__ inline A warp_sum(A v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(FULL, v, o);
    return v;
}

// --- masks and dropout ---------------------------------------------------------------------

// Offset of mask element (b, i, 0).
__device__ inline int64_t mask_row(const dl_attn_mask &m, int64_t b, int64_t i) {
    int64_t off = i * m.rs;
    for (int d = m.nb - 1; d >= 0; d--) {
        int64_t s = m.bshape[d], q = b / s;
        off += (b - q * s) * m.bstride[d];
        b = q;
    }
    return off;
}

// Score s of query i against key j of batch entry b with the causal limit or
// the mask applied: -inf when j does not take part.
template <typename A, typename T>
__device__ inline A masked(A s, const dl_attn_params &p, int64_t b, int64_t i, int64_t j) {
    if (p.causal && j > i) return -INFINITY;
    if (p.mask.data) {
        int64_t off = mask_row(p.mask, b, i) + j * p.mask.cs;
        if (p.mask.dtype == DL_DTYPE_BOOL) {
            if (!((const uint8_t *)p.mask.data)[off]) return -INFINITY;
        } else {
            s += load<A>(((const T *)p.mask.data)[off]);
        }
    }
    return s;
}

// What weight (b, i, j) is multiplied by after dropout: inv when kept, else 0
// (the stream of kernels/attention.h); 1 without dropout.
template <typename A>
__device__ inline A dropout_mult(const dl_attn_params &p, float thr, A inv, int64_t b, int64_t i,
                                 int64_t j) {
    if (!(p.dropout_p > 0)) return 1;
    uint32_t r[4];
    uint64_t cpr = (uint64_t)((p.S + 3) / 4);
    dl_philox4x32_10(p.seed, p.offset + (uint64_t)(b * p.L + i) * cpr + (uint64_t)(j / 4), r);
    return dl_unit_float(r[j % 4]) < thr ? inv : (A)0;
}

// --- kernels -------------------------------------------------------------------------------

// Stages rows r0 .. r0 + rows - 1 of src (n valid rows of dim values, those
// of one batch entry) times mul into dst (row stride ld); zeros past row n.
// Called by the whole block.
template <typename A, typename T>
__device__ inline void stage(A *dst, int ld, const T *src, int64_t r0, int64_t n, int rows, int dim,
                             A mul) {
    for (int x = threadIdx.x; x < rows * dim; x += blockDim.x) {
        int r = x / dim, e = x - r * dim;
        dst[r * ld + e] = r0 + r < n ? load<A>(src[(r0 + r) * dim + e]) * mul : (A)0;
    }
}

// Shared memory is one untyped block carved per kernel; tiles read by lane
// (row = lane) have a padded row stride (dim + 1) against bank conflicts.

// acc[c] += sum over the 32 rows jj of tile of (lane jj's w) * tile[jj][lane + 32c]
// (dims below dim): a weighted sum of a tile's rows, each lane its slice.
template <typename A, int NC>
__device__ __forceinline__ void add_rows(A (&acc)[NC], A w, const A *tile, int ld, int dim,
                                         int lane) {
    for (int jj = 0; jj < KT; jj++) {
        const A wj = __shfl_sync(FULL, w, jj);
        const A *row = tile + jj * ld;
#pragma unroll
        for (int c = 0; c < NC; c++)
            if (lane + 32 * c < dim) acc[c] += wj * row[lane + 32 * c];
    }
}

// dst[lane + 32c] = acc[c] * mul for the dims below dim: one row written by a warp.
template <typename T, typename A, int NC>
__device__ __forceinline__ void put_row(T *dst, const A (&acc)[NC], A mul, int dim, int lane) {
#pragma unroll
    for (int c = 0; c < NC; c++)
        if (lane + 32 * c < dim) dst[lane + 32 * c] = store<T>(acc[c] * mul);
}

// out (B,L,Ev), lse (B,L); q (B,L,E), k (B,S,E), v (B,S,Ev).  Block: BQ query
// rows of one batch entry (blockIdx.x = b * nblk + block).
template <typename T, int NC>
__global__ void __launch_bounds__(NW * 32)
    forward_kernel(T *out, typename acc_of<T>::type *lse, const T *q, const T *k, const T *v,
                   const dl_attn_params p, int64_t nblk, float thr, typename acc_of<T>::type inv) {
    using A = typename acc_of<T>::type;
    extern __shared__ __align__(16) unsigned char smem[];
    const int E = (int)p.E, Ev = (int)p.Ev, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int64_t L = p.L, S = p.S, b = blockIdx.x / nblk, i0 = (blockIdx.x % nblk) * BQ;
    A *Qs = (A *)smem;         // (BQ, E), scaled
    A *Ks = Qs + BQ * E;       // (KT, E + 1)
    A *Vs = Ks + KT * (E + 1); // (KT, Ev)
    stage(Qs, E, q + b * L * E, i0, L, BQ, E, (A)p.scale);
    A o[RPW][NC], m[RPW], l[RPW];
#pragma unroll
    for (int t = 0; t < RPW; t++) {
        m[t] = -INFINITY;
        l[t] = 0;
#pragma unroll
        for (int c = 0; c < NC; c++) o[t][c] = 0;
    }
    const int64_t jend = p.causal ? min64(S, i0 + BQ) : S;
    for (int64_t j0 = 0; j0 < jend; j0 += KT) {
        __syncthreads(); // the previous tile is consumed (and Qs is written)
        stage(Ks, E + 1, k + b * S * E, j0, jend, KT, E, (A)1);
        stage(Vs, Ev, v + b * S * Ev, j0, jend, KT, Ev, (A)1);
        __syncthreads();
#pragma unroll
        for (int t = 0; t < RPW; t++) {
            const int r = warp * RPW + t;
            const int64_t i = i0 + r, j = j0 + lane;
            if (i >= L) continue; // uniform over the warp
            A s = -INFINITY;
            if (j < jend) {
                const A *qr = Qs + r * E, *kr = Ks + lane * (E + 1);
                A d = 0;
                for (int e = 0; e < E; e++) d += qr[e] * kr[e];
                s = masked<A, T>(d, p, b, i, j);
            }
            const A mn = fmax(m[t], warp_max(s));
            A w = 0, corr = 1;
            if (mn != -INFINITY) {
                w = ex(s - mn);
                corr = ex(m[t] - mn);
            }
            l[t] = l[t] * corr + warp_sum(w);
            m[t] = mn;
            if (j < jend) w *= dropout_mult<A>(p, thr, inv, b, i, j);
#pragma unroll
            for (int c = 0; c < NC; c++) o[t][c] *= corr;
            add_rows(o[t], w, Vs, Ev, Ev, lane);
        }
    }
#pragma unroll
    for (int t = 0; t < RPW; t++) {
        const int64_t i = i0 + warp * RPW + t;
        if (i >= L) continue;
        put_row(out + (b * L + i) * Ev, o[t], l[t] > 0 ? (A)1 / l[t] : (A)0, Ev, lane);
        if (lane == 0) lse[b * L + i] = l[t] > 0 ? m[t] + log(l[t]) : (A)INFINITY;
    }
}

// D[r] = sum_e g[r, e] * o[r, e] over rows (B*L); a warp per row.
template <typename T>
__global__ void rowdot_kernel(typename acc_of<T>::type *D, const T *g, const T *o, int64_t rows,
                              int Ev) {
    using A = typename acc_of<T>::type;
    const int lane = threadIdx.x & 31;
    for (int64_t r = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) >> 5; r < rows;
         r += ((int64_t)gridDim.x * blockDim.x) >> 5) {
        A s = 0;
        for (int e = lane; e < Ev; e += 32) s += load<A>(g[r * Ev + e]) * load<A>(o[r * Ev + e]);
        s = warp_sum(s);
        if (lane == 0) D[r] = s;
    }
}

// dq (B,L,E) from gout (B,L,Ev), q, k, v, lse and D: BQ query rows per block,
// walking the key tiles.
template <typename T, int NC>
__global__ void __launch_bounds__(NW * 32)
    dq_kernel(T *dq, const T *gout, const T *q, const T *k, const T *v,
              const typename acc_of<T>::type *lse, const typename acc_of<T>::type *D,
              const dl_attn_params p, int64_t nblk, float thr, typename acc_of<T>::type inv) {
    using A = typename acc_of<T>::type;
    extern __shared__ __align__(16) unsigned char smem[];
    const int E = (int)p.E, Ev = (int)p.Ev, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int64_t L = p.L, S = p.S, b = blockIdx.x / nblk, i0 = (blockIdx.x % nblk) * BQ;
    A *Qs = (A *)smem;         // (BQ, E), scaled
    A *Gs = Qs + BQ * E;       // (BQ, Ev)
    A *Ks = Gs + BQ * Ev;      // (KT, E + 1)
    A *Vs = Ks + KT * (E + 1); // (KT, Ev + 1)
    stage(Qs, E, q + b * L * E, i0, L, BQ, E, (A)p.scale);
    stage(Gs, Ev, gout + b * L * Ev, i0, L, BQ, Ev, (A)1);
    A acc[RPW][NC], lr[RPW], Dr[RPW];
#pragma unroll
    for (int t = 0; t < RPW; t++) {
        const int64_t i = i0 + warp * RPW + t;
        lr[t] = i < L ? lse[b * L + i] : (A)INFINITY;
        Dr[t] = i < L ? D[b * L + i] : (A)0;
#pragma unroll
        for (int c = 0; c < NC; c++) acc[t][c] = 0;
    }
    const int64_t jend = p.causal ? min64(S, i0 + BQ) : S;
    for (int64_t j0 = 0; j0 < jend; j0 += KT) {
        __syncthreads();
        stage(Ks, E + 1, k + b * S * E, j0, jend, KT, E, (A)1);
        stage(Vs, Ev + 1, v + b * S * Ev, j0, jend, KT, Ev, (A)1);
        __syncthreads();
#pragma unroll
        for (int t = 0; t < RPW; t++) {
            const int r = warp * RPW + t;
            const int64_t i = i0 + r, j = j0 + lane;
            if (i >= L) continue;
            A ds = 0;
            if (j < jend) {
                const A *qr = Qs + r * E, *kr = Ks + lane * (E + 1);
                const A *gr = Gs + r * Ev, *vr = Vs + lane * (Ev + 1);
                A s = 0, dp = 0;
                for (int e = 0; e < E; e++) s += qr[e] * kr[e];
                for (int e = 0; e < Ev; e++) dp += gr[e] * vr[e];
                const A w = ex(masked<A, T>(s, p, b, i, j) - lr[t]);
                ds = w * (dp * dropout_mult<A>(p, thr, inv, b, i, j) - Dr[t]);
            }
            add_rows(acc[t], ds, Ks, E + 1, E, lane);
        }
    }
#pragma unroll
    for (int t = 0; t < RPW; t++) {
        const int64_t i = i0 + warp * RPW + t;
        if (i >= L) continue;
        put_row(dq + (b * L + i) * E, acc[t], (A)p.scale, E, lane);
    }
}

// dk (B,S,E), dv (B,S,Ev): BQ key rows per block (blockIdx.x = b * nblk +
// block), walking the query tiles.
template <typename T, int NC>
__global__ void __launch_bounds__(NW * 32)
    dkv_kernel(T *dk, T *dv, const T *gout, const T *q, const T *k, const T *v,
               const typename acc_of<T>::type *lse, const typename acc_of<T>::type *D,
               const dl_attn_params p, int64_t nblk, float thr, typename acc_of<T>::type inv) {
    using A = typename acc_of<T>::type;
    extern __shared__ __align__(16) unsigned char smem[];
    const int E = (int)p.E, Ev = (int)p.Ev, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int64_t L = p.L, S = p.S, b = blockIdx.x / nblk, j0 = (blockIdx.x % nblk) * BQ;
    A *Kr = (A *)smem;          // (BQ, E)
    A *Vr = Kr + BQ * E;        // (BQ, Ev)
    A *Qs = Vr + BQ * Ev;       // (KT, E + 1), scaled
    A *Gs = Qs + KT * (E + 1);  // (KT, Ev + 1)
    A *Ls = Gs + KT * (Ev + 1); // (KT) lse
    A *Ds = Ls + KT;            // (KT) D
    stage(Kr, E, k + b * S * E, j0, S, BQ, E, (A)1);
    stage(Vr, Ev, v + b * S * Ev, j0, S, BQ, Ev, (A)1);
    A gk[RPW][NC], gv[RPW][NC];
#pragma unroll
    for (int t = 0; t < RPW; t++)
#pragma unroll
        for (int c = 0; c < NC; c++) gk[t][c] = gv[t][c] = 0;
    // under is_causal no query before j0 sees this block's keys
    const int64_t istart = p.causal ? (j0 / KT) * KT : 0;
    for (int64_t q0 = istart; q0 < L; q0 += KT) {
        __syncthreads();
        stage(Qs, E + 1, q + b * L * E, q0, L, KT, E, (A)p.scale);
        stage(Gs, Ev + 1, gout + b * L * Ev, q0, L, KT, Ev, (A)1);
        for (int x = threadIdx.x; x < KT; x += blockDim.x) {
            int64_t i = q0 + x;
            Ls[x] = i < L ? lse[b * L + i] : (A)INFINITY;
            Ds[x] = i < L ? D[b * L + i] : (A)0;
        }
        __syncthreads();
#pragma unroll
        for (int t = 0; t < RPW; t++) {
            const int r = warp * RPW + t;
            const int64_t j = j0 + r, i = q0 + lane;
            if (j >= S) continue;
            A ds = 0, wd = 0;
            if (i < L) {
                const A *qr = Qs + lane * (E + 1), *kr = Kr + r * E;
                const A *gr = Gs + lane * (Ev + 1), *vr = Vr + r * Ev;
                A s = 0, dp = 0;
                for (int e = 0; e < E; e++) s += qr[e] * kr[e];
                for (int e = 0; e < Ev; e++) dp += gr[e] * vr[e];
                const A w = ex(masked<A, T>(s, p, b, i, j) - Ls[lane]);
                const A mult = dropout_mult<A>(p, thr, inv, b, i, j);
                wd = w * mult;
                ds = w * (dp * mult - Ds[lane]);
            }
            add_rows(gv[t], wd, Gs, Ev + 1, Ev, lane);
            add_rows(gk[t], ds, Qs, E + 1, E, lane);
        }
    }
#pragma unroll
    for (int t = 0; t < RPW; t++) {
        const int64_t j = j0 + warp * RPW + t;
        if (j >= S) continue;
        put_row(dk + (b * S + j) * E, gk[t], (A)1, E, lane);
        put_row(dv + (b * S + j) * Ev, gv[t], (A)1, Ev, lane);
    }
}

// --- launchers -----------------------------------------------------------------------------

// Registers per row and lane: ceil(max(E, Ev) / 32) rounded up to 1, 2, 4 or 8.
int chunks(const dl_attn_params *p) {
    int64_t d = p->E > p->Ev ? p->E : p->Ev;
    return d <= 32 ? 1 : d <= 64 ? 2 : d <= 128 ? 4 : 8;
}

// Lets kernel use bytes of dynamic shared memory (above the default 48 KiB
// only by opting in), or errors when the device has less.
int allow_smem(const void *kernel, size_t bytes, const dl_attn_params *p, const char *op) {
    int dev = dl_cuda_device(), optin = 0;
    DL_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    if (bytes > (size_t)optin)
        return dl_error("%s: head dims E=%lld, Ev=%lld need %zu bytes of shared memory per block, "
                        "this GPU has %d",
                        op, (long long)p->E, (long long)p->Ev, bytes, optin);
    if (bytes > 48 * 1024)
        DL_CUDA_CHECK(
            cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
    return 0;
}

// Blocks of BQ rows over n rows of each of B entries; an error above the grid limit.
int grid_of(int64_t B, int64_t n, int64_t *nblk, unsigned *grid, const char *op) {
    *nblk = (n + BQ - 1) / BQ;
    int64_t total = B * *nblk;
    if (total > 0x7fffffffLL)
        return dl_error("%s: %lld blocks exceed the CUDA grid", op, (long long)total);
    *grid = (unsigned)(total > 0 ? total : 1);
    return 0;
}

template <typename T, int NC>
int forward_nc(T *out, typename acc_of<T>::type *lse, const T *q, const T *k, const T *v,
               const dl_attn_params *p) {
    using A = typename acc_of<T>::type;
    const char *op = "scaled_dot_product_attention";
    size_t smem = (size_t)(BQ * p->E + KT * (p->E + 1) + KT * p->Ev) * sizeof(A);
    auto kern = forward_kernel<T, NC>;
    int64_t nblk = 1;
    unsigned grid = 1;
    if (allow_smem((const void *)kern, smem, p, op) || grid_of(p->B, p->L, &nblk, &grid, op))
        return -1;
    float thr = (float)(1.0 - p->dropout_p);
    A inv = p->dropout_p < 1 ? (A)(1.0 / (1.0 - p->dropout_p)) : (A)0;
    kern<<<grid, NW * 32, smem, dl_cuda_stream()>>>(out, lse, q, k, v, *p, nblk, thr, inv);
    DL_CUDA_LAUNCHED();
    return 0;
}

template <typename T, int NC>
int backward_nc(T *dq, T *dk, T *dv, const T *gout, const T *q, const T *k, const T *v,
                const T *out, const typename acc_of<T>::type *lse, const dl_attn_params *p) {
    using A = typename acc_of<T>::type;
    const char *op = "scaled_dot_product_attention_backward";
    size_t sq = (size_t)(BQ * p->E + BQ * p->Ev + KT * (p->E + 1) + KT * (p->Ev + 1)) * sizeof(A);
    size_t skv = sq + (size_t)(2 * KT) * sizeof(A);
    auto kq = dq_kernel<T, NC>;
    auto kkv = dkv_kernel<T, NC>;
    int64_t nq = 1, nkv = 1;
    unsigned gq = 1, gkv = 1;
    if (allow_smem((const void *)kq, sq, p, op) || allow_smem((const void *)kkv, skv, p, op) ||
        grid_of(p->B, p->L, &nq, &gq, op) || grid_of(p->B, p->S, &nkv, &gkv, op))
        return -1;
    float thr = (float)(1.0 - p->dropout_p);
    A inv = p->dropout_p < 1 ? (A)(1.0 / (1.0 - p->dropout_p)) : (A)0;
    const int64_t rows = p->B * p->L;
    A *D = (A *)dl_cuda_malloc((size_t)(rows > 0 ? rows : 1) * sizeof(A));
    if (!D) return -1;
    cudaStream_t st = dl_cuda_stream();
    if (rows > 0) {
        rowdot_kernel<T>
            <<<dl_cuda_blocks(rows * 32, 256), 256, 0, st>>>(D, gout, out, rows, (int)p->Ev);
        kq<<<gq, NW * 32, sq, st>>>(dq, gout, q, k, v, lse, D, *p, nq, thr, inv);
    }
    if (p->B * p->S > 0)
        kkv<<<gkv, NW * 32, skv, st>>>(dk, dv, gout, q, k, v, lse, D, *p, nkv, thr, inv);
    cudaError_t e = cudaGetLastError();
    dl_cuda_free(D);
    if (e != cudaSuccess)
        return dl_cuda_fail("attention kernels", cudaGetErrorString(e), __FILE__, __LINE__);
    return 0;
}

template <typename T>
int forward_typed(void *out, void *lse, const void *q, const void *k, const void *v,
                  const dl_attn_params *p) {
    using A = typename acc_of<T>::type;
    T *o = (T *)out;
    A *l = (A *)lse;
    const T *a = (const T *)q, *b = (const T *)k, *c = (const T *)v;
    switch (chunks(p)) {
    case 1: return forward_nc<T, 1>(o, l, a, b, c, p);
    case 2: return forward_nc<T, 2>(o, l, a, b, c, p);
    case 4: return forward_nc<T, 4>(o, l, a, b, c, p);
    default: return forward_nc<T, 8>(o, l, a, b, c, p);
    }
}

template <typename T>
int backward_typed(void *dq, void *dk, void *dv, const void *gout, const void *q, const void *k,
                   const void *v, const void *out, const void *lse, const dl_attn_params *p) {
    using A = typename acc_of<T>::type;
    T *a = (T *)dq, *b = (T *)dk, *c = (T *)dv;
    const T *g = (const T *)gout, *x = (const T *)q, *y = (const T *)k, *z = (const T *)v;
    const T *o = (const T *)out;
    const A *l = (const A *)lse;
    switch (chunks(p)) {
    case 1: return backward_nc<T, 1>(a, b, c, g, x, y, z, o, l, p);
    case 2: return backward_nc<T, 2>(a, b, c, g, x, y, z, o, l, p);
    case 4: return backward_nc<T, 4>(a, b, c, g, x, y, z, o, l, p);
    default: return backward_nc<T, 8>(a, b, c, g, x, y, z, o, l, p);
    }
}

int check(const dl_attn_params *p, dl_dtype dt, const char *op) {
    if (p->E > MAXD || p->Ev > MAXD)
        return dl_error("%s: the CUDA kernel takes head dims up to %d, got E=%lld, Ev=%lld", op,
                        MAXD, (long long)p->E, (long long)p->Ev);
    if (dt != DL_DTYPE_F32 && dt != DL_DTYPE_F64 && dt != DL_DTYPE_F16 && dt != DL_DTYPE_BF16)
        return dl_error("%s: CUDA kernels take float32, float64, float16 or bfloat16, got %s", op,
                        dl_dtype_name(dt));
    return 0;
}

} // namespace

int dl_cuda_attention_forward(void *out, void *lse, const void *q, const void *k, const void *v,
                              dl_dtype dt, const dl_attn_params *p) {
    if (check(p, dt, "scaled_dot_product_attention")) return -1;
    if (p->B * p->L == 0) return 0;
    switch (dt) {
    case DL_DTYPE_F32: return forward_typed<float>(out, lse, q, k, v, p);
    case DL_DTYPE_F64: return forward_typed<double>(out, lse, q, k, v, p);
    case DL_DTYPE_F16: return forward_typed<__half>(out, lse, q, k, v, p);
    default: return forward_typed<__nv_bfloat16>(out, lse, q, k, v, p);
    }
}

int dl_cuda_attention_backward(void *dq, void *dk, void *dv, const void *gout, const void *q,
                               const void *k, const void *v, const void *out, const void *lse,
                               dl_dtype dt, const dl_attn_params *p) {
    if (check(p, dt, "scaled_dot_product_attention_backward")) return -1;
    switch (dt) {
    case DL_DTYPE_F32: return backward_typed<float>(dq, dk, dv, gout, q, k, v, out, lse, p);
    case DL_DTYPE_F64: return backward_typed<double>(dq, dk, dv, gout, q, k, v, out, lse, p);
    case DL_DTYPE_F16: return backward_typed<__half>(dq, dk, dv, gout, q, k, v, out, lse, p);
    default: return backward_typed<__nv_bfloat16>(dq, dk, dv, gout, q, k, v, out, lse, p);
    }
}

DL_CUDA_TABLE(attention) = {
    .family = "attention",
    .forward = dl_cuda_attention_forward,
    .backward = dl_cuda_attention_backward,
};
