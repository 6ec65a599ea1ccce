// sort.cu - sort/argsort/topk on CUDA (the `sort` entry of the index table,
// see src/kernels/index.h), mirroring dl_cpu_sort.
//
// Every value becomes a uint64 key whose unsigned order is the wanted order,
// exactly as the CPU builds them: floats by their IEEE bits (sign-folded, -0
// taken as +0, NaN above +inf), integers with the sign bit flipped, and
// descending complements the key.  The keys of each slice along dim are laid
// out contiguously with their positions 0..n-1 as values and sorted with
// CUB's radix sort, which is stable: equal keys keep ascending positions in
// both directions, as on the CPU.  The first k of each slice are then written
// out (indices, and values read back from x).
//
// Invariants: outputs are contiguous with x's shape and size k along dim;
// CUB's segmented sort counts items in int, so slices are sorted in batches
// of at most INT32_MAX items (a slice longer than that alone, with the 64-bit
// single-range sort).
#include "index.cuh"

#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_segmented_radix_sort.cuh>

#include <limits.h>

int dl_cuda_sort(const dl_tensor *x, int dim, bool descending, int64_t k, dl_tensor *values,
                 dl_tensor *indices);

namespace {

using dl_idx::by_size;
using dl_idx::kThreads;

// The dims of x other than the sort dim (slices run over them, row-major).
using Slices = dl_idx::Dims;

__device__ inline int64_t slice_offset(const Slices &s, int64_t i) {
    return dl_idx::dims_offset(s, i);
}

__device__ inline uint64_t key_of_double(double v) {
    if (v != v) return UINT64_MAX;
    if (v == 0) v = 0; // -0 == +0
    uint64_t u = (uint64_t)__double_as_longlong(v);
    return (u >> 63) ? ~u : u | (1ull << 63);
}

__device__ inline uint64_t key_of_int(int64_t v) {
    return (uint64_t)v ^ (1ull << 63);
}

__device__ inline uint64_t key_at(const char *p, int dt) {
    switch (dt) {
    case DL_DTYPE_F32: return key_of_double(*(const float *)p);
    case DL_DTYPE_F64: return key_of_double(*(const double *)p);
    case DL_DTYPE_F16: return key_of_double(__half2float(*(const __half *)p));
    case DL_DTYPE_BF16: return key_of_double(__bfloat162float(*(const __nv_bfloat16 *)p));
    case DL_DTYPE_I64: return key_of_int(*(const int64_t *)p);
    case DL_DTYPE_I32: return key_of_int(*(const int32_t *)p);
    default: return key_of_int(*(const uint8_t *)p); // uint8, bool
    }
}

// --- kernels -----------------------------------------------------------------------------

// keys/pos are (nseg, n): the key of x's element i of slice s, and i.
__global__ void keys_kernel(uint64_t *keys, int64_t *pos, const char *x, Slices sl, int64_t n,
                            int64_t step, int64_t isz, int dt, uint64_t flip, int64_t total) {
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < total;
         e += (int64_t)gridDim.x * blockDim.x) {
        int64_t s = e / n, i = e - s * n;
        keys[e] = key_at(x + (slice_offset(sl, s) + i * step) * isz, dt) ^ flip;
        pos[e] = i;
    }
}

// Segment starts i * n for i in [0, count].
__global__ void offsets_kernel(int *off, int64_t count, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i <= count;
         i += (int64_t)gridDim.x * blockDim.x)
        off[i] = (int)(i * n);
}

// The first k of each sorted slice: indices (and values, when vals) are
// contiguous (outer, k, inner); pos is (nseg, n) sorted positions.
template <typename W>
__global__ void write_kernel(int64_t *indices, W *vals, const int64_t *pos, const W *x, Slices sl,
                             int64_t n, int64_t k, int64_t inner, int64_t step, int64_t total) {
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < total;
         e += (int64_t)gridDim.x * blockDim.x) {
        int64_t s = e / k, i = e - s * k;
        int64_t o = (s / inner) * k * inner + s % inner + i * inner;
        int64_t p = pos[s * n + i];
        indices[o] = p;
        if (vals) vals[o] = x[slice_offset(sl, s) + p * step];
    }
}

// --- launchers -------------------------------------------------------------------------------

int cub_fail(const char *call, cudaError_t e, int line) {
    return dl_cuda_fail(call, cudaGetErrorString(e), __FILE__, line);
}

// Sorts (keys, pos) pairs of nseg slices of n items: one range at a time when
// a slice alone is too long for the segmented sort, else batches of slices.
int sort_pairs(const uint64_t *kin, uint64_t *kout, const int64_t *pin, int64_t *pout, int64_t nseg,
               int64_t n) {
    cudaStream_t st = dl_cuda_stream();
    int64_t per = n > INT_MAX ? 0 : INT_MAX / n; // slices per segmented batch
    if (per > nseg) per = nseg;
    bool single = nseg == 1 || per == 0;
    size_t tmp_bytes = 0;
    cudaError_t e;
    int *off = nullptr;
    if (single) {
        e = cub::DeviceRadixSort::SortPairs(nullptr, tmp_bytes, kin, kout, pin, pout, n, 0, 64, st);
        if (e != cudaSuccess) return cub_fail("cub::DeviceRadixSort::SortPairs", e, __LINE__);
    } else {
        off = (int *)dl_cuda_malloc(sizeof(int) * (size_t)(per + 1));
        if (!off) return -1;
        offsets_kernel<<<dl_cuda_blocks(per + 1, kThreads), kThreads, 0, st>>>(off, per, n);
        e = cudaGetLastError();
        if (e == cudaSuccess)
            e = cub::DeviceSegmentedRadixSort::SortPairs(nullptr, tmp_bytes, kin, kout, pin, pout,
                                                         (int)(per * n), (int)per, off, off + 1, 0,
                                                         64, st);
        if (e != cudaSuccess) {
            dl_cuda_free(off);
            return cub_fail("cub::DeviceSegmentedRadixSort::SortPairs", e, __LINE__);
        }
    }
    void *tmp = dl_cuda_malloc(tmp_bytes ? tmp_bytes : 1);
    if (!tmp) {
        dl_cuda_free(off);
        return -1;
    }
    e = cudaSuccess;
    if (single) {
        for (int64_t s = 0; s < nseg && e == cudaSuccess; s++)
            e = cub::DeviceRadixSort::SortPairs(tmp, tmp_bytes, kin + s * n, kout + s * n,
                                                pin + s * n, pout + s * n, n, 0, 64, st);
    } else {
        for (int64_t s = 0; s < nseg && e == cudaSuccess; s += per) {
            int64_t m = nseg - s < per ? nseg - s : per;
            // the offsets of the first m slices serve every batch
            e = cub::DeviceSegmentedRadixSort::SortPairs(tmp, tmp_bytes, kin + s * n, kout + s * n,
                                                         pin + s * n, pout + s * n, (int)(m * n),
                                                         (int)m, off, off + 1, 0, 64, st);
        }
    }
    dl_cuda_free(tmp);
    dl_cuda_free(off);
    if (e != cudaSuccess) return cub_fail("cub radix sort", e, __LINE__);
    return 0;
}

template <typename W>
void launch_write(dl_tensor *indices, dl_tensor *values, const int64_t *pos, const dl_tensor *x,
                  const Slices &sl, int64_t n, int64_t k, int64_t inner, int64_t step,
                  int64_t total) {
    write_kernel<<<dl_cuda_blocks(total, kThreads), kThreads, 0, dl_cuda_stream()>>>(
        (int64_t *)dl_tensor_data_ptr(indices), values ? (W *)dl_tensor_data_ptr(values) : nullptr,
        pos, (const W *)dl_tensor_data_ptr(x), sl, n, k, inner, step, total);
}

} // namespace

int dl_cuda_sort(const dl_tensor *x, int dim, bool descending, int64_t k, dl_tensor *values,
                 dl_tensor *indices) {
    if (dl_cuda_use(indices)) return -1;
    int64_t n = x->shape[dim], total_out = dl_tensor_numel(indices);
    if (total_out == 0 || k <= 0 || n <= 0) return 0;
    int64_t nseg = total_out / k, inner = 1, step = x->strides[dim];
    for (int d = dim + 1; d < x->ndim; d++) inner *= x->shape[d];
    Slices sl;
    sl.nd = 0;
    for (int d = 0; d < x->ndim; d++)
        if (d != dim) {
            sl.shape[sl.nd] = x->shape[d];
            sl.strides[sl.nd++] = x->strides[d];
        }
    int64_t total = nseg * n;
    size_t isz = dl_dtype_size(x->dtype);
    cudaStream_t st = dl_cuda_stream();
    // one block: keys in, keys out, positions in, positions out
    char *buf = (char *)dl_cuda_malloc((size_t)total * 32);
    if (!buf) return -1;
    uint64_t *kin = (uint64_t *)buf, *kout = kin + total;
    int64_t *pin = (int64_t *)(kout + total), *pout = pin + total;
    keys_kernel<<<dl_cuda_blocks(total, kThreads), kThreads, 0, st>>>(
        kin, pin, (const char *)dl_tensor_data_ptr(x), sl, n, step, (int64_t)isz, (int)x->dtype,
        descending ? UINT64_MAX : 0, total);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) {
        dl_cuda_free(buf);
        return cub_fail("keys_kernel", e, __LINE__);
    }
    if (sort_pairs(kin, kout, pin, pout, nseg, n)) {
        dl_cuda_free(buf);
        return -1;
    }
    int64_t wtotal = nseg * k;
    by_size(isz, [&](auto w) {
        launch_write<decltype(w)>(indices, values, pout, x, sl, n, k, inner, step, wtotal);
    });
    e = cudaGetLastError();
    dl_cuda_free(buf);
    if (e != cudaSuccess) return cub_fail("write_kernel", e, __LINE__);
    return 0;
}
