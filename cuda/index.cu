// index.cu - CUDA kernels of the index family (see src/kernels/index.h):
// index_select/index_add, gather/scatter, one_hot, count_nonzero/nonzero,
// masked_select/masked_scatter, tril/triu and the index range check.
// Sorting lives in sort.cu; all of them are entries of the one
// dl_cuda_index_table defined at the end of this file.
//
// Invariants: the op layer has checked every index, so kernels trust them;
// all loops are grid-stride loops over int64 element numbers; elements are
// moved as unsigned integers of their size (one kernel per size serves every
// dtype); only the adding kernels look at values, and they use atomics, so
// sums of repeated positions may differ from the CPU's in float rounding.
// Data-dependent outputs (nonzero, masked ops) place elements with an
// exclusive scan (CUB) of int64 flags in row-major order, so their order is
// the CPU's.
#include "index.cuh"

#include <cub/device/device_scan.cuh>

extern "C" {
#include "kernels/index.h"
}

// Defined in sort.cu.
int dl_cuda_sort(const dl_tensor *x, int dim, bool descending, int64_t k, dl_tensor *values,
                 dl_tensor *indices);

namespace {

using dl_idx::by_size;
using dl_idx::Dims;
using dl_idx::kThreads;

// A tensor's own shape and strides (in elements), dims not merged, a 0-dim
// tensor seen as [1]: kernels that need coordinates per dim use this.
Dims dims_of(const dl_tensor *t) {
    Dims d;
    if (t->ndim == 0) {
        d.nd = 1;
        d.shape[0] = 1;
        d.strides[0] = 0;
        return d;
    }
    d.nd = t->ndim;
    for (int k = 0; k < t->ndim; k++) {
        d.shape[k] = t->shape[k];
        d.strides[k] = t->strides[k];
    }
    return d;
}

// Row-major position i of `shape` split into coordinates.
__device__ inline void coords_of(const Dims &s, int64_t i, int64_t *c) {
    for (int d = s.nd - 1; d >= 0; d--) {
        int64_t q = i / s.shape[d];
        c[d] = i - q * s.shape[d];
        i = q;
    }
}

// The unsigned integer type that moves one element of `size` bytes.
template <int S> struct Word;
template <> struct Word<1> { using T = uint8_t; };
template <> struct Word<2> { using T = uint16_t; };
template <> struct Word<4> { using T = uint32_t; };
template <> struct Word<8> { using T = uint64_t; };

// Whether the element at p (dtype dt) is non-zero; NaN is.
__device__ inline bool nonzero_at(const char *p, int dt) {
    switch (dt) {
    case DL_DTYPE_F32: return *(const float *)p != 0.0f;
    case DL_DTYPE_F64: return *(const double *)p != 0.0;
    case DL_DTYPE_F16:
    case DL_DTYPE_BF16: return (*(const uint16_t *)p & 0x7fff) != 0;
    case DL_DTYPE_I64: return *(const int64_t *)p != 0;
    case DL_DTYPE_I32: return *(const int32_t *)p != 0;
    default: return *(const uint8_t *)p != 0;
    }
}

// q += v as one atomic operation, in q's type.
__device__ inline void atomic_add(float *q, float v) {
    atomicAdd(q, v);
}
__device__ inline void atomic_add(double *q, double v) {
    atomicAdd(q, v);
}
__device__ inline void atomic_add(int64_t *q, int64_t v) {
    atomicAdd((unsigned long long *)q, (unsigned long long)v); // wraps like the CPU's
}
__device__ inline void atomic_add(int32_t *q, int32_t v) {
    atomicAdd(q, v);
}
__device__ inline void atomic_add(__half *q, __half v) {
    atomicAdd(q, v);
}
__device__ inline void atomic_add(__nv_bfloat16 *q, __nv_bfloat16 v) {
    atomicAdd(q, v);
}
// bool: an OR; only 1s are ever written, so racing writers agree.
__device__ inline void atomic_add(bool *q, bool v) {
    if (v) *(volatile uint8_t *)q = 1;
}

// --- kernels -----------------------------------------------------------------------------

// Element i of an (outer, nidx, inner) tensor sits, in an (outer, size,
// inner) one, at the offset this returns (its row k replaced by idx[k]).
__device__ inline int64_t selected_offset(int64_t i, const int64_t *idx, int64_t nidx, int64_t size,
                                          int64_t inner) {
    int64_t c = i % inner, r = i / inner;
    int64_t k = r % nidx, o = r / nidx;
    return (o * size + idx[k]) * inner + c;
}

// out is (outer, nidx, inner), x is (outer, size, inner), idx is (nidx).
template <typename W>
__global__ void index_select_kernel(W *out, const W *x, const int64_t *idx, int64_t n, int64_t nidx,
                                    int64_t size, int64_t inner) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        out[i] = x[selected_offset(i, idx, nidx, size, inner)];
}

// out is (outer, size, inner), src is (outer, nidx, inner), idx is (nidx).
template <typename T>
__global__ void index_add_kernel(T *out, const T *src, const int64_t *idx, int64_t n, int64_t nidx,
                                 int64_t size, int64_t inner) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        atomic_add(&out[selected_offset(i, idx, nidx, size, inner)], src[i]);
}

// out and idx are contiguous of shape ix.shape; x is read through xs (x's
// strides, ix's rank) with coordinate dim replaced by the index.
template <typename W>
__global__ void gather_kernel(W *out, const W *x, const int64_t *idx, Dims ix, Dims xs, int dim,
                              int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t c[DL_MAX_DIMS];
        coords_of(ix, i, c);
        c[dim] = idx[i];
        int64_t off = 0;
        for (int d = 0; d < ix.nd; d++) off += c[d] * xs.strides[d];
        out[i] = x[off];
    }
}

// self[coords with dim replaced by idx[i]] = (or +=) src[coords of i].
template <typename T, bool Add>
__global__ void scatter_kernel(T *self, const T *src, const int64_t *idx, Dims ix, Dims ss, Dims rs,
                               int dim, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t c[DL_MAX_DIMS];
        coords_of(ix, i, c);
        int64_t soff = 0;
        for (int d = 0; d < ix.nd; d++) soff += c[d] * rs.strides[d];
        c[dim] = idx[i];
        int64_t doff = 0;
        for (int d = 0; d < ix.nd; d++) doff += c[d] * ss.strides[d];
        if constexpr (Add)
            atomic_add(&self[doff], src[soff]);
        else
            self[doff] = src[soff];
    }
}

// out is (n, classes) int64, zeroed; labels is (n).
__global__ void one_hot_kernel(int64_t *out, const int64_t *labels, int64_t n, int64_t classes) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        out[i * classes + labels[i]] = 1;
}

// *count += number of non-zero elements (x through layout l, elements of isz bytes).
__global__ void count_kernel(unsigned long long *count, const char *x, dl_cuda_layout l,
                             int64_t isz, int dt, int64_t n) {
    unsigned long long c = 0;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        c += nonzero_at(x + dl_cuda_offset(l, i) * isz, dt);
    for (int s = 16; s > 0; s >>= 1) c += __shfl_down_sync(0xffffffffu, c, s);
    if ((threadIdx.x & 31) == 0 && c) atomicAdd(count, c);
}

// flags[i] = whether element i (row-major) of p is non-zero.
__global__ void flags_kernel(int64_t *flags, const char *p, dl_cuda_layout l, int64_t isz, int dt,
                             int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        flags[i] = nonzero_at(p + dl_cuda_offset(l, i) * isz, dt);
}

// out is (count, nd): the coordinates of the non-zero elements, row pos[i].
__global__ void nonzero_kernel(int64_t *out, const int64_t *pos, const char *x, dl_cuda_layout l,
                               Dims shape, int64_t isz, int dt, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        if (!nonzero_at(x + dl_cuda_offset(l, i) * isz, dt)) continue;
        int64_t c[DL_MAX_DIMS];
        coords_of(shape, i, c);
        for (int d = 0; d < shape.nd; d++) out[pos[i] * shape.nd + d] = c[d];
    }
}

// The masked ops move elements between a strided tensor (layout ls) and a
// dense 1-D one, in row-major order of the mask: masked_select
// (ToDense: dense[pos[i]] = strided[i]) and masked_scatter (strided[i] =
// dense[pos[i]]), for the elements i where the mask is true.
template <typename W, bool ToDense>
__global__ void masked_move_kernel(W *strided, dl_cuda_layout ls, const uint8_t *mask,
                                   dl_cuda_layout lm, const int64_t *pos, W *dense, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        if (!mask[dl_cuda_offset(lm, i)]) continue;
        if constexpr (ToDense)
            dense[pos[i]] = strided[dl_cuda_offset(ls, i)];
        else
            strided[dl_cuda_offset(ls, i)] = dense[pos[i]];
    }
}

// Zeroes the elements of x (shape s, last two dims rows x cols) outside the
// kept triangle: j - r <= diagonal (lower) or j - r >= diagonal (upper).
template <typename W>
__global__ void tri_kernel(W *x, Dims s, int64_t diagonal, bool upper, int64_t n) {
    int64_t rows = s.shape[s.nd - 2], cols = s.shape[s.nd - 1];
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t j = i % cols, r = (i / cols) % rows;
        bool keep = upper ? j - r >= diagonal : j - r <= diagonal;
        if (!keep) x[dl_idx::dims_offset(s, i)] = 0;
    }
}

__global__ void range_init_kernel(long long *r) {
    r[0] = INT64_MAX;
    r[1] = INT64_MIN;
}

// r[0] = min, r[1] = max of idx (n > 0).
__global__ void range_kernel(long long *r, const int64_t *idx, int64_t n) {
    long long lo = INT64_MAX, hi = INT64_MIN;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        long long v = idx[i];
        lo = v < lo ? v : lo;
        hi = v > hi ? v : hi;
    }
    for (int s = 16; s > 0; s >>= 1) {
        long long a = __shfl_down_sync(0xffffffffu, lo, s);
        long long b = __shfl_down_sync(0xffffffffu, hi, s);
        lo = a < lo ? a : lo;
        hi = b > hi ? b : hi;
    }
    if ((threadIdx.x & 31) == 0) {
        atomicMin(&r[0], lo);
        atomicMax(&r[1], hi);
    }
}

// t[i] += delta (+1 or -1), held at the int64 limits.
__global__ void shift_kernel(int64_t *t, int64_t delta, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t v = t[i];
        if (delta < 0)
            t[i] = v == INT64_MIN ? v : v - 1;
        else
            t[i] = v == INT64_MAX ? v : v + 1;
    }
}

// --- launchers -------------------------------------------------------------------------------

int refuse_dtype(const char *op, dl_dtype dt) {
    return dl_error("%s: no CUDA kernel for %s tensors", op, dl_dtype_name(dt));
}

// Sizes (outer, size, inner) of t around dim (a 0-dim t is [1]).
void split3(const dl_tensor *t, int dim, int64_t *outer, int64_t *size, int64_t *inner) {
    *outer = *inner = 1;
    *size = t->ndim ? t->shape[dim] : 1;
    for (int d = 0; d < dim; d++) *outer *= t->shape[d];
    for (int d = dim + 1; d < t->ndim; d++) *inner *= t->shape[d];
}

int index_select(dl_tensor *out, const dl_tensor *x, int dim, const int64_t *idx, int64_t nidx) {
    if (dl_cuda_use(out)) return -1;
    int64_t outer, size, inner, n = dl_tensor_numel(out);
    split3(x, dim, &outer, &size, &inner);
    if (n == 0) return 0;
    unsigned blocks = dl_cuda_blocks(n, kThreads);
    cudaStream_t st = dl_cuda_stream();
    void *o = dl_tensor_data_ptr(out);
    const void *p = dl_tensor_data_ptr(x);
    by_size(dl_dtype_size(x->dtype), [&](auto w) {
        using W = decltype(w);
        index_select_kernel<<<blocks, kThreads, 0, st>>>((W *)o, (const W *)p, idx, n, nidx, size,
                                                         inner);
    });
    DL_CUDA_LAUNCHED();
    return 0;
}

template <typename T>
int index_add_as(dl_tensor *out, const dl_tensor *src, const int64_t *idx, int64_t n, int64_t nidx,
                 int64_t size, int64_t inner) {
    index_add_kernel<<<dl_cuda_blocks(n, kThreads), kThreads, 0, dl_cuda_stream()>>>(
        (T *)dl_tensor_data_ptr(out), (const T *)dl_tensor_data_ptr(src), idx, n, nidx, size,
        inner);
    DL_CUDA_LAUNCHED();
    return 0;
}

int index_add(dl_tensor *out, int dim, const int64_t *idx, int64_t nidx, const dl_tensor *src) {
    if (dl_cuda_use(out)) return -1;
    int64_t outer, size, inner, n = dl_tensor_numel(src);
    split3(out, dim, &outer, &size, &inner);
    if (n == 0) return 0;
    switch (out->dtype) {
    case DL_DTYPE_F32: return index_add_as<float>(out, src, idx, n, nidx, size, inner);
    case DL_DTYPE_F64: return index_add_as<double>(out, src, idx, n, nidx, size, inner);
    case DL_DTYPE_F16: return index_add_as<__half>(out, src, idx, n, nidx, size, inner);
    case DL_DTYPE_BF16: return index_add_as<__nv_bfloat16>(out, src, idx, n, nidx, size, inner);
    case DL_DTYPE_I64: return index_add_as<int64_t>(out, src, idx, n, nidx, size, inner);
    case DL_DTYPE_I32: return index_add_as<int32_t>(out, src, idx, n, nidx, size, inner);
    default: return refuse_dtype("index_add", out->dtype);
    }
}

int gather(dl_tensor *out, const dl_tensor *x, int dim, const dl_tensor *index) {
    if (dl_cuda_use(out)) return -1;
    int64_t n = dl_tensor_numel(index);
    if (n == 0) return 0;
    Dims ix = dims_of(index), xs = dims_of(x);
    unsigned blocks = dl_cuda_blocks(n, kThreads);
    cudaStream_t st = dl_cuda_stream();
    void *o = dl_tensor_data_ptr(out);
    const void *p = dl_tensor_data_ptr(x);
    const int64_t *idx = (const int64_t *)dl_tensor_data_ptr(index);
    by_size(dl_dtype_size(x->dtype), [&](auto w) {
        using W = decltype(w);
        gather_kernel<<<blocks, kThreads, 0, st>>>((W *)o, (const W *)p, idx, ix, xs, dim, n);
    });
    DL_CUDA_LAUNCHED();
    return 0;
}

template <typename T, bool Add>
int scatter_as(dl_tensor *self, int dim, const dl_tensor *index, const dl_tensor *src) {
    int64_t n = dl_tensor_numel(index);
    scatter_kernel<T, Add><<<dl_cuda_blocks(n, kThreads), kThreads, 0, dl_cuda_stream()>>>(
        (T *)dl_tensor_data_ptr(self), (const T *)dl_tensor_data_ptr(src),
        (const int64_t *)dl_tensor_data_ptr(index), dims_of(index), dims_of(self), dims_of(src),
        dim, n);
    DL_CUDA_LAUNCHED();
    return 0;
}

int scatter(dl_tensor *self, int dim, const dl_tensor *index, const dl_tensor *src, bool add) {
    if (dl_cuda_use(self)) return -1;
    if (dl_tensor_numel(index) == 0) return 0;
    if (!add) {
        int rc = 0;
        by_size(dl_dtype_size(self->dtype),
                [&](auto w) { rc = scatter_as<decltype(w), false>(self, dim, index, src); });
        return rc;
    }
    switch (self->dtype) {
    case DL_DTYPE_F32: return scatter_as<float, true>(self, dim, index, src);
    case DL_DTYPE_F64: return scatter_as<double, true>(self, dim, index, src);
    case DL_DTYPE_F16: return scatter_as<__half, true>(self, dim, index, src);
    case DL_DTYPE_BF16: return scatter_as<__nv_bfloat16, true>(self, dim, index, src);
    case DL_DTYPE_I64: return scatter_as<int64_t, true>(self, dim, index, src);
    case DL_DTYPE_I32: return scatter_as<int32_t, true>(self, dim, index, src);
    case DL_DTYPE_BOOL: return scatter_as<bool, true>(self, dim, index, src);
    default: return refuse_dtype("scatter_add", self->dtype);
    }
}

int one_hot(dl_tensor *out, const dl_tensor *labels) {
    if (dl_cuda_use(out)) return -1;
    int64_t n = dl_tensor_numel(labels), c = out->shape[out->ndim - 1];
    if (n == 0 || c == 0) return 0;
    one_hot_kernel<<<dl_cuda_blocks(n, kThreads), kThreads, 0, dl_cuda_stream()>>>(
        (int64_t *)dl_tensor_data_ptr(out), (const int64_t *)dl_tensor_data_ptr(labels), n, c);
    DL_CUDA_LAUNCHED();
    return 0;
}

int count_nonzero(const dl_tensor *x, int64_t *count) {
    *count = 0;
    if (dl_cuda_use(x)) return -1;
    int64_t n = dl_tensor_numel(x);
    if (n == 0) return 0;
    if (dl_cuda_refuse_in_capture("count_nonzero (a data-dependent size)")) return -1;
    cudaStream_t st = dl_cuda_stream();
    unsigned long long *d = (unsigned long long *)dl_cuda_malloc(sizeof *d);
    if (!d) return -1;
    unsigned long long h = 0;
    cudaError_t e = cudaMemsetAsync(d, 0, sizeof *d, st);
    if (e == cudaSuccess) {
        count_kernel<<<dl_cuda_blocks(n, kThreads), kThreads, 0, st>>>(
            d, (const char *)dl_tensor_data_ptr(x), dl_cuda_layout_of(x),
            (int64_t)dl_dtype_size(x->dtype), (int)x->dtype, n);
        e = cudaGetLastError();
    }
    int rc = e != cudaSuccess
                 ? dl_cuda_fail("count_nonzero", cudaGetErrorString(e), __FILE__, __LINE__)
                 : dl_cuda_read_device(&h, d, sizeof h, "count_nonzero");
    dl_cuda_free(d);
    if (rc) return -1;
    *count = (int64_t)h;
    return 0;
}

// flags[i] = element i of p (layout l) is non-zero, then the exclusive scan
// in place: pos[i] = number of non-zero elements before i.  The caller frees
// *pos (dl_cuda_free) once its last kernel is queued.
int positions(const char *p, dl_cuda_layout l, dl_dtype dt, int64_t n, int64_t **pos) {
    cudaStream_t st = dl_cuda_stream();
    int64_t *f = (int64_t *)dl_cuda_malloc(sizeof(int64_t) * (size_t)n);
    if (!f) return -1;
    flags_kernel<<<dl_cuda_blocks(n, kThreads), kThreads, 0, st>>>(
        f, p, l, (int64_t)dl_dtype_size(dt), (int)dt, n);
    cudaError_t e = cudaGetLastError();
    size_t tmp_bytes = 0;
    if (e == cudaSuccess) e = cub::DeviceScan::ExclusiveSum(nullptr, tmp_bytes, f, f, n, st);
    void *tmp = nullptr;
    if (e == cudaSuccess) {
        tmp = dl_cuda_malloc(tmp_bytes ? tmp_bytes : 1);
        if (!tmp) {
            dl_cuda_free(f);
            return -1;
        }
        e = cub::DeviceScan::ExclusiveSum(tmp, tmp_bytes, f, f, n, st);
        dl_cuda_free(tmp);
    }
    if (e != cudaSuccess) {
        dl_cuda_free(f);
        return dl_cuda_fail("cub::DeviceScan::ExclusiveSum", cudaGetErrorString(e), __FILE__,
                            __LINE__);
    }
    *pos = f;
    return 0;
}

int nonzero(dl_tensor *out, const dl_tensor *x) {
    if (dl_cuda_use(out)) return -1;
    int64_t n = dl_tensor_numel(x);
    if (n == 0 || x->ndim == 0 || dl_tensor_numel(out) == 0) return 0;
    dl_cuda_layout l = dl_cuda_layout_of(x);
    const char *p = (const char *)dl_tensor_data_ptr(x);
    int64_t *pos;
    if (positions(p, l, x->dtype, n, &pos)) return -1;
    nonzero_kernel<<<dl_cuda_blocks(n, kThreads), kThreads, 0, dl_cuda_stream()>>>(
        (int64_t *)dl_tensor_data_ptr(out), pos, p, l, dims_of(x), (int64_t)dl_dtype_size(x->dtype),
        (int)x->dtype, n);
    cudaError_t e = cudaGetLastError();
    dl_cuda_free(pos);
    if (e != cudaSuccess)
        return dl_cuda_fail("nonzero_kernel", cudaGetErrorString(e), __FILE__, __LINE__);
    return 0;
}

// Moves elements between strided (the mask's shape) and dense (1-D,
// contiguous, one element per true mask element), see masked_move_kernel.
int masked_move(const char *op, dl_tensor *strided, const dl_tensor *mask, dl_tensor *dense,
                bool to_dense) {
    if (dl_cuda_use(strided)) return -1;
    int64_t n = dl_tensor_numel(strided);
    if (n == 0 || dl_tensor_numel(dense) == 0) return 0;
    const dl_tensor *ts[2] = {strided, mask};
    dl_cuda_layout ls[2];
    dl_cuda_layouts(2, ts, ls);
    int64_t *pos;
    if (positions((const char *)dl_tensor_data_ptr(mask), ls[1], mask->dtype, n, &pos)) return -1;
    void *sp = dl_tensor_data_ptr(strided), *dp = dl_tensor_data_ptr(dense);
    const uint8_t *mp = (const uint8_t *)dl_tensor_data_ptr(mask);
    by_size(dl_dtype_size(strided->dtype), [&](auto w) {
        using W = decltype(w);
        unsigned blocks = dl_cuda_blocks(n, kThreads);
        if (to_dense)
            masked_move_kernel<W, true><<<blocks, kThreads, 0, dl_cuda_stream()>>>(
                (W *)sp, ls[0], mp, ls[1], pos, (W *)dp, n);
        else
            masked_move_kernel<W, false><<<blocks, kThreads, 0, dl_cuda_stream()>>>(
                (W *)sp, ls[0], mp, ls[1], pos, (W *)dp, n);
    });
    cudaError_t e = cudaGetLastError();
    dl_cuda_free(pos);
    if (e != cudaSuccess) return dl_cuda_fail(op, cudaGetErrorString(e), __FILE__, __LINE__);
    return 0;
}

int masked_select(dl_tensor *out, const dl_tensor *x, const dl_tensor *mask) {
    // x is only read: the kernel's strided side is written in masked_scatter alone
    return masked_move("masked_select_kernel", (dl_tensor *)x, mask, out, true);
}

int masked_scatter(dl_tensor *out, const dl_tensor *mask, const dl_tensor *src) {
    return masked_move("masked_scatter_kernel", out, mask, (dl_tensor *)src, false);
}

int tri_(dl_tensor *x, int64_t diagonal, bool upper) {
    if (dl_cuda_use(x)) return -1;
    int64_t n = dl_tensor_numel(x);
    if (n == 0) return 0;
    Dims s = dims_of(x);
    unsigned blocks = dl_cuda_blocks(n, kThreads);
    cudaStream_t st = dl_cuda_stream();
    void *p = dl_tensor_data_ptr(x);
    by_size(dl_dtype_size(x->dtype), [&](auto w) {
        using W = decltype(w);
        tri_kernel<<<blocks, kThreads, 0, st>>>((W *)p, s, diagonal, upper, n);
    });
    DL_CUDA_LAUNCHED();
    return 0;
}

int index_range(const dl_tensor *idx, int64_t *lo, int64_t *hi) {
    if (dl_cuda_use(idx)) return -1;
    int64_t n = dl_tensor_numel(idx);
    *lo = 0;
    *hi = -1;
    if (n == 0) return 0;
    if (dl_cuda_refuse_in_capture("an index range check")) return -1;
    cudaStream_t st = dl_cuda_stream();
    long long *d = (long long *)dl_cuda_malloc(2 * sizeof *d);
    if (!d) return -1;
    long long h[2] = {0, -1};
    range_init_kernel<<<1, 1, 0, st>>>(d);
    cudaError_t e = cudaGetLastError();
    if (e == cudaSuccess) {
        range_kernel<<<dl_cuda_blocks(n, kThreads), kThreads, 0, st>>>(
            d, (const int64_t *)dl_tensor_data_ptr(idx), n);
        e = cudaGetLastError();
    }
    int rc = e != cudaSuccess
                 ? dl_cuda_fail("index_range", cudaGetErrorString(e), __FILE__, __LINE__)
                 : dl_cuda_read_device(h, d, sizeof h, "an index range check");
    dl_cuda_free(d);
    if (rc) return -1;
    *lo = h[0];
    *hi = h[1];
    return 0;
}

int shift_i64(dl_tensor *t, int64_t delta) {
    if (dl_cuda_use(t)) return -1;
    int64_t n = dl_tensor_numel(t);
    if (n == 0) return 0;
    shift_kernel<<<dl_cuda_blocks(n, kThreads), kThreads, 0, dl_cuda_stream()>>>(
        (int64_t *)dl_tensor_data_ptr(t), delta, n);
    DL_CUDA_LAUNCHED();
    return 0;
}

} // namespace

DL_CUDA_TABLE(index) = {
    .family = "index",
    .index_select = index_select,
    .index_add = index_add,
    .gather = gather,
    .scatter = scatter,
    .sort = dl_cuda_sort,
    .one_hot = one_hot,
    .count_nonzero = count_nonzero,
    .nonzero = nonzero,
    .masked_select = masked_select,
    .masked_scatter = masked_scatter,
    .tri_ = tri_,
    .index_range = index_range,
    .shift_i64 = shift_i64,
};
