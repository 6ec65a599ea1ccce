// embedding.cu - CUDA kernels of the embedding family and its table (see
// src/kernels/embedding.h for the buffers; src/cpu/embedding.c is the
// reference they follow).
//
//  - gather: a thread per output element, copying elements of the weight's
//    size (any dtype; the element-size dispatch of index.cuh).
//  - bags: a block per bag, threads over the columns, each walking the bag's
//    entries in order (sums in the accumulator type: double for double
//    data, float otherwise; half weights are read as they are).
//  - the weight gradient is sort-based and deterministic: the entries'
//    (id, position) pairs are sorted by id with CUB's stable radix sort, then
//    the first entry of each run of one id sums the run's gradient rows in
//    entry order (a block per run, threads over the columns) and writes the
//    id's row.  No atomics, so results repeat exactly.
//  - max mode's gradient adds each bag's winners with atomicAdd (one add per
//    element; when one id wins the same column of several bags the order of
//    those adds, and so the last bits of the sum, may vary from run to run).
//  - per_sample_weights' gradient: a warp per entry, a dot product.
//  - max_norm: a block per entry; the first block to claim a row (an
//    atomic flag per row) renormalises it.
//
// Invariants: the op layer checked every id and limit, made the operands
// contiguous and their device current; every launch is checked; scratch
// memory is freed right after its last kernel is queued.
#include "common.cuh"
#include "index.cuh"

#include <cub/device/device_radix_sort.cuh>

extern "C" {
#include "kernels/cuda.h"
#include "kernels/embedding.h"
}

namespace {

constexpr int kThreads = 256;
constexpr unsigned kFull = 0xffffffffu;

// Grid size for a grid-stride loop with one block per item.
unsigned per_item(int64_t n) {
    return n < 1 ? 1u : n > 65535LL * 32 ? 65535u * 32 : (unsigned)n;
}

// --- kernels ----------------------------------------------------------------------------

// out (n, D) = weight[ids]; E is an element-sized word.
template <typename E>
__global__ void gather_kernel(E *out, const E *weight, const int64_t *ids, int64_t n, int64_t D) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n * D;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t k = i / D, j = i - k * D;
        out[i] = weight[ids[k] * D + j];
    }
}

// A block per bag b: out (B, D), bag_of (n), bag_size (B), argmax (B, D; max).
template <typename T, typename A>
__global__ void bag_forward_kernel(T *out, int64_t *bag_of, int64_t *bag_size, int64_t *argmax,
                                   const T *weight, const int64_t *ids, const int64_t *bounds,
                                   const T *psw, int64_t B, int64_t D, int64_t pad, int mode) {
    for (int64_t b = blockIdx.x; b < B; b += gridDim.x) {
        int64_t k0 = bounds[b], k1 = bounds[b + 1];
        for (int64_t k = k0 + threadIdx.x; k < k1; k += blockDim.x)
            bag_of[k] = ids[k] == pad ? -1 : b;
        for (int64_t j = threadIdx.x; j < D; j += blockDim.x) {
            A acc = 0;
            int64_t cnt = 0, win = -1;
            for (int64_t k = k0; k < k1; k++) {
                if (ids[k] == pad) continue;
                A v = dl_load<A>(weight[ids[k] * D + j]);
                if (mode == DL_BAG_MAX) {
                    if (cnt == 0 || v > acc) { // the first entry, then a strictly larger one
                        acc = v;
                        win = k;
                    }
                } else {
                    acc += psw ? v * dl_load<A>(psw[k]) : v;
                }
                cnt++;
            }
            if (mode == DL_BAG_MEAN && cnt > 0) acc /= (A)cnt;
            out[b * D + j] = dl_store<T>(acc);
            if (mode == DL_BAG_MAX) argmax[b * D + j] = win;
            if (j == 0) bag_size[b] = cnt;
        }
    }
}

__global__ void iota_kernel(int64_t *p, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        p[i] = i;
}

// A block per sorted entry t: when t starts a run of one id (and the id is
// not padding), the run's rows are summed in entry order into gw[id].
// skey/spos are the sorted ids and their entries.
template <typename A>
__global__ void grad_runs_kernel(A *gw, const A *gy, const uint64_t *skey, const int64_t *spos,
                                 const int64_t *bag_of, const A *psw, const int64_t *bag_size,
                                 int64_t n, int64_t D, int64_t pad, bool by_freq) {
    for (int64_t t = blockIdx.x; t < n; t += gridDim.x) {
        int64_t id = (int64_t)skey[t];
        if ((t > 0 && skey[t - 1] == skey[t]) || id == pad) continue;
        int64_t e = t + 1;
        while (e < n && skey[e] == skey[t]) e++;
        for (int64_t j = threadIdx.x; j < D; j += blockDim.x) {
            A acc = 0;
            int64_t cnt = 0;
            for (int64_t u = t; u < e; u++) {
                int64_t k = spos[u], row = bag_of ? bag_of[k] : k;
                if (row < 0) continue; // a padding entry of a bag
                A c = psw ? psw[k] : (A)1;
                if (bag_size) c /= (A)bag_size[row];
                acc += c * gy[row * D + j];
                cnt++;
            }
            if (by_freq && cnt > 0) acc /= (A)cnt;
            gw[id * D + j] = acc;
        }
    }
}

// max mode: gw[ids[argmax]] += gy, a thread per (bag, column).
template <typename A>
__global__ void max_grad_kernel(A *gw, const A *gy, const int64_t *ids, const int64_t *argmax,
                                int64_t B, int64_t D) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < B * D;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t k = argmax[i];
        if (k >= 0) atomicAdd(&gw[ids[k] * D + i % D], gy[i]);
    }
}

// gpsw[k] = dot(gy[bag_of[k]], weight[ids[k]]): a warp per entry.
template <typename A, typename W>
__global__ void psw_grad_kernel(A *gpsw, const A *gy, const W *weight, const int64_t *ids,
                                const int64_t *bag_of, int64_t n, int64_t D) {
    int lane = threadIdx.x & 31, per = blockDim.x >> 5;
    for (int64_t k = (int64_t)blockIdx.x * per + (threadIdx.x >> 5); k < n;
         k += (int64_t)gridDim.x * per) {
        A d = 0;
        int64_t b = bag_of[k];
        if (b >= 0)
            for (int64_t j = lane; j < D; j += 32)
                d += gy[b * D + j] * dl_load<A>(weight[ids[k] * D + j]);
        for (int o = 16; o > 0; o >>= 1) d += __shfl_xor_sync(kFull, d, o);
        if (lane == 0) gpsw[k] = d;
    }
}

// A block per entry k: the first to claim row ids[k] scales it by
// max_norm / (norm + 1e-7) when its p-norm passes max_norm.
template <typename T, typename A>
__global__ void renorm_kernel(T *weight, int *claimed, const int64_t *ids, int64_t n, int64_t D,
                              double max_norm, double p) {
    __shared__ bool mine;
    __shared__ double part[kThreads];
    for (int64_t k = blockIdx.x; k < n; k += gridDim.x) {
        int64_t v = ids[k];
        if (threadIdx.x == 0) mine = atomicExch(&claimed[v], 1) == 0;
        __syncthreads();
        if (mine) {
            T *row = weight + v * D;
            double s = 0;
            for (int64_t j = threadIdx.x; j < D; j += blockDim.x) {
                double a = fabs((double)dl_load<A>(row[j]));
                s = isinf(p) ? fmax(s, a) : s + pow(a, p);
            }
            part[threadIdx.x] = s;
            __syncthreads();
            for (int w = blockDim.x / 2; w > 0; w >>= 1) {
                if ((int)threadIdx.x < w)
                    part[threadIdx.x] = isinf(p) ? fmax(part[threadIdx.x], part[threadIdx.x + w])
                                                 : part[threadIdx.x] + part[threadIdx.x + w];
                __syncthreads();
            }
            double norm = isinf(p) ? part[0] : pow(part[0], 1.0 / p);
            if (norm > max_norm) {
                double scale = max_norm / (norm + 1e-7);
                for (int64_t j = threadIdx.x; j < D; j += blockDim.x)
                    row[j] = dl_store<T>((A)((double)dl_load<A>(row[j]) * scale));
            }
        }
        __syncthreads();
    }
}

// --- launchers --------------------------------------------------------------------------

template <typename E>
int gather(void *out, const void *w, const int64_t *ids, const dl_emb_shape *s) {
    gather_kernel<E><<<dl_cuda_blocks(s->n * s->dim, kThreads), kThreads, 0, dl_cuda_stream()>>>(
        (E *)out, (const E *)w, ids, s->n, s->dim);
    return DL_CUDA_LAUNCH_STATUS();
}

// gw from the sorted runs of ids (see grad_runs_kernel).
template <typename A>
int grad_runs(A *gw, const A *gy, const int64_t *ids, const int64_t *bag_of, const A *psw,
              const int64_t *bag_size, const dl_emb_shape *s, int64_t pad, bool by_freq) {
    int64_t n = s->n;
    int bits = 1;
    while (bits < 63 && ((int64_t)1 << bits) < s->num) bits++;
    cudaStream_t st = dl_cuda_stream();
    // scratch: sorted keys (n), positions in and out (n each), then CUB's
    size_t tmp_bytes = 0;
    const uint64_t *kin = (const uint64_t *)ids; // ids are >= 0: the same order
    cudaError_t e = cub::DeviceRadixSort::SortPairs(nullptr, tmp_bytes, kin, (uint64_t *)nullptr,
                                                    (const int64_t *)nullptr, (int64_t *)nullptr, n,
                                                    0, bits, st);
    if (e != cudaSuccess)
        return dl_cuda_fail("cub::DeviceRadixSort::SortPairs", cudaGetErrorString(e), __FILE__,
                            __LINE__);
    size_t words = 3 * (size_t)n + (tmp_bytes + 7) / 8;
    uint64_t *scr = (uint64_t *)dl_cuda_malloc(words * sizeof(uint64_t));
    if (!scr) return -1;
    uint64_t *kout = scr;
    int64_t *pin = (int64_t *)(scr + n), *pout = (int64_t *)(scr + 2 * n);
    void *tmp = scr + 3 * n;
    iota_kernel<<<dl_cuda_blocks(n, kThreads), kThreads, 0, st>>>(pin, n);
    int rc = DL_CUDA_LAUNCH_STATUS();
    if (rc == 0) {
        e = cub::DeviceRadixSort::SortPairs(tmp, tmp_bytes, kin, kout, pin, pout, n, 0, bits, st);
        if (e != cudaSuccess)
            rc = dl_cuda_fail("cub::DeviceRadixSort::SortPairs", cudaGetErrorString(e), __FILE__,
                              __LINE__);
    }
    if (rc == 0) {
        int threads = s->dim < kThreads ? (int)((s->dim + 31) / 32 * 32) : kThreads;
        grad_runs_kernel<A><<<per_item(n), threads, 0, st>>>(gw, gy, kout, pout, bag_of, psw,
                                                             bag_size, n, s->dim, pad, by_freq);
        rc = DL_CUDA_LAUNCH_STATUS();
    }
    dl_cuda_free(scr);
    return rc;
}

} // namespace

// --- entry points ---------------------------------------------------------------------

static int emb_gather(void *out, const void *weight, size_t esz, const int64_t *ids,
                      const dl_emb_shape *s) {
    if (esz != 1 && esz != 2 && esz != 4 && esz != 8)
        return dl_error("embedding: no CUDA kernel for %zu-byte elements", esz);
    int rc = 0;
    dl_idx::by_size(esz, [&](auto e) { rc = gather<decltype(e)>(out, weight, ids, s); });
    return rc;
}

static int emb_bag_forward(dl_dtype dt, dl_bag_mode mode, void *out, int64_t *bag_of,
                           int64_t *bag_size, int64_t *argmax, const void *weight,
                           const int64_t *ids, const int64_t *bounds, const void *psw,
                           const dl_emb_shape *s, int64_t padding_idx) {
    return dl_float_dispatch("embedding_bag", dt, [&](auto t, auto a) {
        using T = decltype(t);
        using A = decltype(a);
        int threads = s->dim < kThreads ? (int)((s->dim + 31) / 32 * 32) : kThreads;
        bag_forward_kernel<T, A><<<per_item(s->bags), threads, 0, dl_cuda_stream()>>>(
            (T *)out, bag_of, bag_size, argmax, (const T *)weight, ids, bounds, (const T *)psw,
            s->bags, s->dim, padding_idx, (int)mode);
        return DL_CUDA_LAUNCH_STATUS();
    });
}

static int emb_backward(dl_dtype dt, void *gw, const void *gy, const int64_t *ids,
                        const int64_t *bag_of, const void *psw, const int64_t *bag_size,
                        const dl_emb_shape *s, int64_t padding_idx, bool by_freq) {
    if (dt == DL_DTYPE_F32)
        return grad_runs<float>((float *)gw, (const float *)gy, ids, bag_of, (const float *)psw,
                                bag_size, s, padding_idx, by_freq);
    if (dt == DL_DTYPE_F64)
        return grad_runs<double>((double *)gw, (const double *)gy, ids, bag_of, (const double *)psw,
                                 bag_size, s, padding_idx, by_freq);
    return dl_error("embedding_backward: CUDA kernels take float32 or float64, got %s",
                    dl_dtype_name(dt));
}

static int emb_bag_max_backward(dl_dtype dt, void *gw, const void *gy, const int64_t *ids,
                                const int64_t *argmax, const dl_emb_shape *s) {
    unsigned grid = dl_cuda_blocks(s->bags * s->dim, kThreads);
    if (dt == DL_DTYPE_F32)
        max_grad_kernel<float><<<grid, kThreads, 0, dl_cuda_stream()>>>(
            (float *)gw, (const float *)gy, ids, argmax, s->bags, s->dim);
    else if (dt == DL_DTYPE_F64)
        max_grad_kernel<double><<<grid, kThreads, 0, dl_cuda_stream()>>>(
            (double *)gw, (const double *)gy, ids, argmax, s->bags, s->dim);
    else
        return dl_error("embedding_bag_backward: CUDA kernels take float32 or float64, got %s",
                        dl_dtype_name(dt));
    return DL_CUDA_LAUNCH_STATUS();
}

static int emb_psw_backward(dl_dtype dt, dl_dtype wdt, void *gpsw, const void *gy,
                            const void *weight, const int64_t *ids, const int64_t *bag_of,
                            const dl_emb_shape *s) {
    const char *op = "embedding_bag_backward";
    if (dt != DL_DTYPE_F32 && dt != DL_DTYPE_F64)
        return dl_error("%s: CUDA kernels take float32 or float64 gradients, got %s", op,
                        dl_dtype_name(dt));
    return dl_float_dispatch(op, wdt, [&](auto t, auto a) {
        using W = decltype(t);
        using A = decltype(a);
        if ((dt == DL_DTYPE_F64) != std::is_same_v<A, double>)
            return dl_error("%s: gradient %s with a %s weight", op, dl_dtype_name(dt),
                            dl_dtype_name(wdt));
        int per = kThreads / 32;
        psw_grad_kernel<A, W><<<dl_cuda_blocks(s->n, per), kThreads, 0, dl_cuda_stream()>>>(
            (A *)gpsw, (const A *)gy, (const W *)weight, ids, bag_of, s->n, s->dim);
        return DL_CUDA_LAUNCH_STATUS();
    });
}

static int emb_renorm(dl_dtype dt, void *weight, const int64_t *ids, const dl_emb_shape *s,
                      double max_norm, double norm_type) {
    int *claimed = (int *)dl_cuda_malloc(sizeof(int) * (size_t)s->num);
    if (!claimed) return -1;
    cudaError_t e = cudaMemsetAsync(claimed, 0, sizeof(int) * (size_t)s->num, dl_cuda_stream());
    int rc = e == cudaSuccess
                 ? 0
                 : dl_cuda_fail("cudaMemsetAsync", cudaGetErrorString(e), __FILE__, __LINE__);
    if (rc == 0)
        rc = dl_float_dispatch("embedding_renorm_", dt, [&](auto t, auto a) {
            using T = decltype(t);
            using A = decltype(a);
            renorm_kernel<T, A><<<per_item(s->n), kThreads, 0, dl_cuda_stream()>>>(
                (T *)weight, claimed, ids, s->n, s->dim, max_norm, norm_type);
            return DL_CUDA_LAUNCH_STATUS();
        });
    dl_cuda_free(claimed);
    return rc;
}

DL_CUDA_TABLE(embedding) = {
    .family = "embedding",
    .gather = emb_gather,
    .bag_forward = emb_bag_forward,
    .backward = emb_backward,
    .bag_max_backward = emb_bag_max_backward,
    .psw_backward = emb_psw_backward,
    .renorm = emb_renorm,
};
