// layernorm.cu - CUDA layer norm and RMS norm, forward and backward, and the
// layernorm family's kernel table (see src/kernels/layernorm.h for the
// buffers and src/cpu/layernorm.c for the formulas, which are the same).
//
// Data x, y, gx, gy are element type T (float, double, __half, bf16); the
// weights, statistics and all arithmetic are the accumulator type A: double
// for double data, float otherwise (half data is read and written as half,
// computed in float).
//
// Row kernels: a row of up to 1024 elements is one warp's (several rows a
// block), a longer row a block's; its statistics take two passes (mean, then
// squared deviations; RMS norm: the mean square), each a group reduction of
// the threads' partial sums in a fixed order.  The input gradient needs the
// row sums of g = gy * w and g * xhat, one paired reduction.  Weight
// gradients are column sums over the rows: blocks of 32 columns by a chunk
// of rows write partial sums (splits,2,cols), summed chunk by chunk in order
// by a second kernel.  No atomics: results are deterministic.
//
// Invariants: the op layer validated sizes (rows, cols >= 1), made the
// operands contiguous and their device current; every launch is checked;
// scratch memory is freed right after its last kernel is queued (the
// allocator is stream-ordered).
#include "common.cuh"

extern "C" {
#include "kernels/cuda.h"
#include "kernels/layernorm.h"
}

namespace {

// --- group reductions ---------------------------------------------------------------

constexpr unsigned kFull = 0xffffffffu;
constexpr int kWarpRows = 4;       // rows of a block in warp mode (4 warps)
constexpr int kBlockThreads = 256; // threads of a block in block mode
constexpr int kWarpMaxCols = 1024; // longer rows take a block each

template <typename A> __device__ inline void warp_sum2(A &a, A &b) {
    for (int o = 16; o > 0; o >>= 1) {
        a += __shfl_xor_sync(kFull, a, o);
        b += __shfl_xor_sync(kFull, b, o);
    }
}

// a and b summed over the row's group (BLOCK: the block, else the warp);
// every thread of the group gets the sums.  Called by every thread of the
// group; in block mode it ends with a barrier, so it may be called again.
template <bool BLOCK, typename A> __device__ inline void group_sum2(A &a, A &b) {
    warp_sum2(a, b);
    if constexpr (BLOCK) {
        __shared__ A sh[2][32];
        int w = threadIdx.x >> 5, l = threadIdx.x & 31, nw = blockDim.x >> 5;
        if (l == 0) {
            sh[0][w] = a;
            sh[1][w] = b;
        }
        __syncthreads();
        a = l < nw ? sh[0][l] : (A)0;
        b = l < nw ? sh[1][l] : (A)0;
        warp_sum2(a, b);
        __syncthreads();
    }
}

// The thread's lane in its row group, the group's size, its first row and
// the row stride of the grid-stride loop.
template <bool BLOCK> struct Group {
    int lane, lanes;
    int64_t row0, step;
    __device__ Group() {
        if constexpr (BLOCK) {
            lane = threadIdx.x;
            lanes = blockDim.x;
            row0 = blockIdx.x;
            step = gridDim.x;
        } else {
            int per = blockDim.x >> 5;
            lane = threadIdx.x & 31;
            lanes = 32;
            row0 = (int64_t)blockIdx.x * per + (threadIdx.x >> 5);
            step = (int64_t)gridDim.x * per;
        }
    }
};

// --- kernels ----------------------------------------------------------------------------

// y, x are (rows, D); mean (NULL for RMS norm), rstd are (rows); w is (D),
// b is (D) or NULL.
template <typename T, typename A, bool BLOCK>
__global__ void ln_forward_kernel(T *y, A *mean, A *rstd, const T *x, const A *w, const A *b,
                                  int64_t rows, int64_t D, A eps, bool rms) {
    Group<BLOCK> g;
    for (int64_t r = g.row0; r < rows; r += g.step) {
        const T *xr = x + r * D;
        T *yr = y + r * D;
        A m = 0, s = 0, unused = 0;
        if (!rms) {
            for (int64_t i = g.lane; i < D; i += g.lanes) s += dl_load<A>(xr[i]);
            group_sum2<BLOCK>(s, unused);
            m = s / (A)D;
            s = 0;
        }
        for (int64_t i = g.lane; i < D; i += g.lanes) {
            A d = dl_load<A>(xr[i]) - m;
            s += d * d;
        }
        group_sum2<BLOCK>(s, unused);
        A rs = (A)1 / sqrt(s / (A)D + eps);
        if (g.lane == 0) {
            if (mean) mean[r] = m;
            rstd[r] = rs;
        }
        for (int64_t i = g.lane; i < D; i += g.lanes) {
            A o = (dl_load<A>(xr[i]) - m) * rs * w[i];
            if (b) o += b[i];
            yr[i] = dl_store<T>(o);
        }
    }
}

// gx, gy, x are (rows, D); mean (NULL for RMS norm), rstd (rows); w (D).
//   gx = (g - mean(g) - xhat * mean(g * xhat)) * rstd, g = gy * w
// (RMS norm: without mean(g)).
template <typename T, typename A, bool BLOCK>
__global__ void ln_grad_input_kernel(T *gx, const T *gy, const T *x, const A *mean, const A *rstd,
                                     const A *w, int64_t rows, int64_t D) {
    Group<BLOCK> g;
    for (int64_t r = g.row0; r < rows; r += g.step) {
        const T *gr = gy + r * D, *xr = x + r * D;
        A m = mean ? mean[r] : (A)0, rs = rstd[r], sg = 0, sgx = 0;
        for (int64_t i = g.lane; i < D; i += g.lanes) {
            A gv = dl_load<A>(gr[i]) * w[i];
            sg += gv;
            sgx += gv * ((dl_load<A>(xr[i]) - m) * rs);
        }
        group_sum2<BLOCK>(sg, sgx);
        A mg = mean ? sg / (A)D : (A)0, mgx = sgx / (A)D;
        for (int64_t i = g.lane; i < D; i += g.lanes) {
            A gv = dl_load<A>(gr[i]) * w[i];
            gx[r * D + i] = dl_store<T>((gv - mg - ((dl_load<A>(xr[i]) - m) * rs) * mgx) * rs);
        }
    }
}

constexpr int kColsX = 32, kColsY = 8; // block shape of the weight-gradient sums

// part is (splits,2,D): block (bx, by) sums, over rows [by*chunk,
// by*chunk + chunk), gy * xhat and gy for columns bx*32 .. bx*32+31.
// threadIdx.x picks the column (coalesced), threadIdx.y strides the rows.
template <typename T, typename A>
__global__ void ln_weight_partials(A *part, const T *gy, const T *x, const A *mean, const A *rstd,
                                   int64_t rows, int64_t D, int64_t chunk) {
    __shared__ A sh[2][kColsY][kColsX];
    int tx = threadIdx.x, ty = threadIdx.y;
    int64_t c = (int64_t)blockIdx.x * kColsX + tx;
    int64_t r0 = (int64_t)blockIdx.y * chunk, r1 = r0 + chunk < rows ? r0 + chunk : rows;
    A sw = 0, sb = 0;
    if (c < D)
        for (int64_t r = r0 + ty; r < r1; r += kColsY) {
            A gv = dl_load<A>(gy[r * D + c]), m = mean ? mean[r] : (A)0;
            sw += gv * ((dl_load<A>(x[r * D + c]) - m) * rstd[r]);
            sb += gv;
        }
    sh[0][ty][tx] = sw;
    sh[1][ty][tx] = sb;
    __syncthreads();
    if (ty == 0 && c < D) {
        A tw = 0, tb = 0;
        for (int j = 0; j < kColsY; j++) {
            tw += sh[0][j][tx];
            tb += sh[1][j][tx];
        }
        part[((int64_t)blockIdx.y * 2) * D + c] = tw;
        part[((int64_t)blockIdx.y * 2 + 1) * D + c] = tb;
    }
}

// gw[c], gb[c] (either may be NULL) = the chunks' partial sums, in order.
template <typename A>
__global__ void ln_weight_sum(A *gw, A *gb, const A *part, int64_t splits, int64_t D) {
    for (int64_t c = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; c < D;
         c += (int64_t)gridDim.x * blockDim.x) {
        A tw = 0, tb = 0;
        for (int64_t k = 0; k < splits; k++) {
            tw += part[(k * 2) * D + c];
            tb += part[(k * 2 + 1) * D + c];
        }
        if (gw) gw[c] = tw;
        if (gb) gb[c] = tb;
    }
}

// --- launchers --------------------------------------------------------------------------

// Launches a row kernel: a warp per row for short rows, a block per row else.
template <typename Warp, typename Block> int launch_rows(int64_t rows, int64_t D, Warp w, Block b) {
    cudaStream_t st = dl_cuda_stream();
    if (D <= kWarpMaxCols)
        w(dl_cuda_blocks(rows, kWarpRows), kWarpRows * 32, st);
    else
        b(rows > 65535LL * 32 ? 65535u * 32 : (unsigned)rows, kBlockThreads, st);
    DL_CUDA_LAUNCHED();
    return 0;
}

template <typename T, typename A>
int forward(const dl_ln_shape *s, double eps, bool rms, T *y, A *mean, A *rstd, const T *x,
            const A *w, const A *b) {
    int64_t R = s->rows, D = s->cols;
    return launch_rows(
        R, D,
        [&](unsigned grid, int threads, cudaStream_t st) {
            ln_forward_kernel<T, A, false>
                <<<grid, threads, 0, st>>>(y, mean, rstd, x, w, b, R, D, (A)eps, rms);
        },
        [&](unsigned grid, int threads, cudaStream_t st) {
            ln_forward_kernel<T, A, true>
                <<<grid, threads, 0, st>>>(y, mean, rstd, x, w, b, R, D, (A)eps, rms);
        });
}

// gw/gb: partial column sums over chunks of rows, then the chunks in order.
template <typename T, typename A>
int weight_grads(const dl_ln_shape *s, A *gw, A *gb, const T *gy, const T *x, const A *mean,
                 const A *rstd) {
    int64_t R = s->rows, D = s->cols;
    int64_t cblocks = (D + kColsX - 1) / kColsX;
    int64_t want = 4 * (int64_t)dl_cuda_sm_count(); // enough blocks to fill the device
    int64_t splits = (want + cblocks - 1) / cblocks, most = (R + 63) / 64;
    if (splits > most) splits = most;
    if (splits > 65535) splits = 65535;
    if (splits < 1) splits = 1;
    int64_t chunk = (R + splits - 1) / splits;
    splits = (R + chunk - 1) / chunk;
    A *part = (A *)dl_cuda_malloc((size_t)(splits * 2 * D) * sizeof(A));
    if (!part) return -1;
    cudaStream_t st = dl_cuda_stream();
    dim3 grid((unsigned)cblocks, (unsigned)splits), block(kColsX, kColsY);
    ln_weight_partials<T, A><<<grid, block, 0, st>>>(part, gy, x, mean, rstd, R, D, chunk);
    cudaError_t e = cudaGetLastError();
    if (e == cudaSuccess) {
        ln_weight_sum<A>
            <<<dl_cuda_blocks(D, kBlockThreads), kBlockThreads, 0, st>>>(gw, gb, part, splits, D);
        e = cudaGetLastError();
    }
    dl_cuda_free(part);
    if (e != cudaSuccess)
        return dl_cuda_fail("layer_norm_backward launch", cudaGetErrorString(e), __FILE__,
                            __LINE__);
    return 0;
}

template <typename T, typename A>
int backward(const dl_ln_shape *s, bool rms, T *gx, A *gw, A *gb, const T *gy, const T *x,
             const A *mean, const A *rstd, const A *w) {
    int64_t R = s->rows, D = s->cols;
    if (rms) mean = nullptr, gb = nullptr;
    if (gx && launch_rows(
                  R, D,
                  [&](unsigned grid, int threads, cudaStream_t st) {
                      ln_grad_input_kernel<T, A, false>
                          <<<grid, threads, 0, st>>>(gx, gy, x, mean, rstd, w, R, D);
                  },
                  [&](unsigned grid, int threads, cudaStream_t st) {
                      ln_grad_input_kernel<T, A, true>
                          <<<grid, threads, 0, st>>>(gx, gy, x, mean, rstd, w, R, D);
                  }))
        return -1;
    if ((gw || gb) && weight_grads<T, A>(s, gw, gb, gy, x, mean, rstd)) return -1;
    return 0;
}

int check_shape(const char *op, const dl_ln_shape *s) {
    if (s->rows < 1 || s->cols < 1)
        return dl_error("%s: bad CUDA layer-norm shape (rows %lld, cols %lld)", op,
                        (long long)s->rows, (long long)s->cols);
    return 0;
}

} // namespace

// --- entry points ---------------------------------------------------------------------

static int ln_forward(dl_dtype dt, const dl_ln_shape *s, double eps, bool rms, void *y, void *mean,
                      void *rstd, const void *x, const void *w, const void *b) {
    const char *op = rms ? "rms_norm" : "layer_norm";
    if (check_shape(op, s)) return -1;
    return dl_float_dispatch(op, dt, [&](auto t, auto a) {
        using T = decltype(t);
        using A = decltype(a);
        return forward<T, A>(s, eps, rms, (T *)y, (A *)mean, (A *)rstd, (const T *)x, (const A *)w,
                             (const A *)b);
    });
}

static int ln_backward(dl_dtype dt, const dl_ln_shape *s, bool rms, void *gx, void *gw, void *gb,
                       const void *gy, const void *x, const void *mean, const void *rstd,
                       const void *w) {
    const char *op = rms ? "rms_norm_backward" : "layer_norm_backward";
    if (check_shape(op, s)) return -1;
    return dl_float_dispatch(op, dt, [&](auto t, auto a) {
        using T = decltype(t);
        using A = decltype(a);
        return backward<T, A>(s, rms, (T *)gx, (A *)gw, (A *)gb, (const T *)gy, (const T *)x,
                              (const A *)mean, (const A *)rstd, (const A *)w);
    });
}

DL_CUDA_TABLE(layernorm) = {
    .family = "layernorm",
    .forward = ln_forward,
    .backward = ln_backward,
};
