// copy.cu - copies that involve a CUDA tensor: host to device, device to host,
// device to device (strided, with dtype conversion, broadcast sources), and
// fills.  dl_cuda_copy is the core's dl_copy_across_devices hook: dst and src
// have one shape (src already expanded), any strides, any dtypes.
//
// Conversions follow the CPU's copy exactly: floating sources go through
// double (float for the half types), integer sources through int64; a float
// to integer conversion saturates and sends NaN to INT64_MIN before wrapping
// to the narrower type; anything non-zero is true.
#include "common.cuh"

#include <string.h>

// --- layouts ----------------------------------------------------------------------------

dl_cuda_layout dl_cuda_layout_of(const dl_tensor *t) {
    const dl_tensor *ts[1] = {t};
    dl_cuda_layout l;
    dl_cuda_layouts(1, ts, &l);
    return l;
}

// Layouts of n tensors of one shape, walking ts[0]'s dims in the order
// given (size-1 dims skipped) and merging neighbours wherever every tensor
// allows it.
static void layouts_in_order(int n, const dl_tensor *const *ts, const int *order, int norder,
                             dl_cuda_layout *ls) {
    const dl_tensor *t0 = ts[0];
    int nd = 0;
    int64_t shape[DL_MAX_DIMS];
    int64_t st[8][DL_MAX_DIMS];
    for (int j = 0; j < norder; j++) {
        int d = order[j];
        if (t0->shape[d] == 1) continue; // size-1 dims never move the offset
        bool merge = nd > 0;
        for (int k = 0; k < n && merge; k++)
            merge = st[k][nd - 1] == ts[k]->strides[d] * t0->shape[d];
        if (merge) {
            shape[nd - 1] *= t0->shape[d];
            for (int k = 0; k < n; k++) st[k][nd - 1] = ts[k]->strides[d];
        } else {
            shape[nd] = t0->shape[d];
            for (int k = 0; k < n; k++) st[k][nd] = ts[k]->strides[d];
            nd++;
        }
    }
    for (int k = 0; k < n; k++) {
        ls[k].ndim = nd;
        for (int d = 0; d < nd; d++) {
            ls[k].shape[d] = shape[d];
            ls[k].strides[d] = st[k][d];
        }
    }
}

void dl_cuda_layouts(int n, const dl_tensor *const *ts, dl_cuda_layout *ls) {
    int order[DL_MAX_DIMS];
    for (int d = 0; d < ts[0]->ndim; d++) order[d] = d;
    layouts_in_order(n, ts, order, ts[0]->ndim, ls);
}

void dl_cuda_layouts_any_order(int n, const dl_tensor *const *ts, dl_cuda_layout *ls) {
    const dl_tensor *t0 = ts[0];
    int order[DL_MAX_DIMS];
    for (int d = 0; d < t0->ndim; d++) order[d] = d;
    // ts[0]'s memory order: strides descending (stable), so tensors sharing a
    // permuted layout (channels-last) merge into one dense run
    for (int i = 1; i < t0->ndim; i++)
        for (int j = i; j > 0 && t0->strides[order[j - 1]] < t0->strides[order[j]]; j--) {
            int t = order[j];
            order[j] = order[j - 1];
            order[j - 1] = t;
        }
    layouts_in_order(n, ts, order, t0->ndim, ls);
}

// --- element conversion (mirrors src/core/dtype.c) ----------------------------------------

namespace {

__device__ inline bool is_float_dt(int dt) {
    return dt == DL_DTYPE_F32 || dt == DL_DTYPE_F64 || dt == DL_DTYPE_F16 || dt == DL_DTYPE_BF16;
}

__device__ inline double load_f64(const char *p, int dt) {
    switch (dt) {
    case DL_DTYPE_F32: return *(const float *)p;
    case DL_DTYPE_F64: return *(const double *)p;
    case DL_DTYPE_F16: return __half2float(*(const __half *)p);
    case DL_DTYPE_BF16: return __bfloat162float(*(const __nv_bfloat16 *)p);
    case DL_DTYPE_I64: return (double)*(const int64_t *)p;
    case DL_DTYPE_I32: return *(const int32_t *)p;
    case DL_DTYPE_U8: return *(const uint8_t *)p;
    default: return *(const uint8_t *)p ? 1.0 : 0.0;
    }
}

__device__ inline int64_t f64_to_i64(double d) {
    if (d != d) return INT64_MIN;
    if (d >= 9.2233720368547758e18) return INT64_MAX;
    if (d <= -9.2233720368547758e18) return INT64_MIN;
    return (int64_t)d;
}

__device__ inline int64_t load_i64(const char *p, int dt) {
    switch (dt) {
    case DL_DTYPE_I64: return *(const int64_t *)p;
    case DL_DTYPE_I32: return *(const int32_t *)p;
    case DL_DTYPE_U8: return *(const uint8_t *)p;
    case DL_DTYPE_BOOL: return *(const uint8_t *)p ? 1 : 0;
    default: return f64_to_i64(load_f64(p, dt));
    }
}

__device__ inline void store_i64(char *p, int dt, int64_t v);

__device__ inline void store_f64(char *p, int dt, double v) {
    switch (dt) {
    case DL_DTYPE_F32: *(float *)p = (float)v; break;
    case DL_DTYPE_F64: *(double *)p = v; break;
    case DL_DTYPE_F16: *(__half *)p = __float2half_rn((float)v); break;
    case DL_DTYPE_BF16: *(__nv_bfloat16 *)p = __float2bfloat16_rn((float)v); break;
    case DL_DTYPE_BOOL: *(uint8_t *)p = v != 0; break;
    default: store_i64(p, dt, f64_to_i64(v));
    }
}

__device__ inline void store_i64(char *p, int dt, int64_t v) {
    switch (dt) {
    case DL_DTYPE_I64: *(int64_t *)p = v; break;
    case DL_DTYPE_I32: *(int32_t *)p = (int32_t)(uint32_t)v; break;
    case DL_DTYPE_U8: *(uint8_t *)p = (uint8_t)v; break;
    case DL_DTYPE_BOOL: *(uint8_t *)p = v != 0; break;
    default: store_f64(p, dt, (double)v);
    }
}

// --- kernels -------------------------------------------------------------------------------

// dst[i] = convert(src[i]) for the i-th element of each layout.
__global__ void convert_kernel(char *dst, dl_cuda_layout dl, int ddt, int dsz, const char *src,
                               dl_cuda_layout sl, int sdt, int ssz, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        char *d = dst + dl_cuda_offset(dl, i) * dsz;
        const char *s = src + dl_cuda_offset(sl, i) * ssz;
        if (is_float_dt(sdt))
            store_f64(d, ddt, load_f64(s, sdt));
        else
            store_i64(d, ddt, load_i64(s, sdt));
    }
}

// Same dtype, element size T: a strided gather/scatter of words.
template <typename T>
__global__ void move_kernel(T *dst, dl_cuda_layout dl, const T *src, dl_cuda_layout sl, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        dst[dl_cuda_offset(dl, i)] = src[dl_cuda_offset(sl, i)];
}

template <typename T> __global__ void fill_kernel(T *dst, dl_cuda_layout dl, T v, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        dst[dl_cuda_offset(dl, i)] = v;
}

template <typename T> __global__ void fill_dense_kernel(T *dst, T v, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        dst[i] = v;
}

const int kThreads = 256;

// dst (CUDA) = src (CUDA, same device), any layouts and dtypes.
int device_copy(dl_tensor *dst, dl_tensor *src) {
    int64_t n = dl_tensor_numel(dst);
    if (n == 0) return 0;
    const dl_tensor *ts[2] = {dst, src};
    dl_cuda_layout l[2];
    dl_cuda_layouts_any_order(2, ts, l);
    char *d = (char *)dl_tensor_data_ptr(dst);
    const char *s = (const char *)dl_tensor_data_ptr(src);
    size_t isz = dl_tensor_itemsize(dst);
    unsigned blocks = dl_cuda_blocks(n, kThreads);
    if (dst->dtype == src->dtype) {
        if (l[0].ndim <= 1 && l[1].ndim <= 1 &&
            (l[0].ndim == 0 || (l[0].strides[0] == 1 && l[1].strides[0] == 1))) {
            DL_CUDA_CHECK(
                cudaMemcpyAsync(d, s, (size_t)n * isz, cudaMemcpyDeviceToDevice, dl_cuda_stream()));
            return 0;
        }
        switch (isz) {
        case 1:
            move_kernel<uint8_t><<<blocks, kThreads, 0, dl_cuda_stream()>>>(
                (uint8_t *)d, l[0], (const uint8_t *)s, l[1], n);
            break;
        case 2:
            move_kernel<uint16_t><<<blocks, kThreads, 0, dl_cuda_stream()>>>(
                (uint16_t *)d, l[0], (const uint16_t *)s, l[1], n);
            break;
        case 4:
            move_kernel<uint32_t><<<blocks, kThreads, 0, dl_cuda_stream()>>>(
                (uint32_t *)d, l[0], (const uint32_t *)s, l[1], n);
            break;
        default:
            move_kernel<uint64_t><<<blocks, kThreads, 0, dl_cuda_stream()>>>(
                (uint64_t *)d, l[0], (const uint64_t *)s, l[1], n);
        }
    } else {
        convert_kernel<<<blocks, kThreads, 0, dl_cuda_stream()>>>(
            d, l[0], dst->dtype, (int)isz, s, l[1], src->dtype, (int)dl_tensor_itemsize(src), n);
    }
    DL_CUDA_LAUNCHED();
    return 0;
}

// Every element of dst (CUDA) = the bytes at v (one element of dst's dtype).
int device_fill(dl_tensor *dst, const void *v) {
    int64_t n = dl_tensor_numel(dst);
    if (n == 0) return 0;
    const dl_tensor *ts[1] = {dst};
    dl_cuda_layout l;
    dl_cuda_layouts_any_order(1, ts, &l); // a fill writes every element once, in any order
    bool dense = l.ndim == 0 || (l.ndim == 1 && l.strides[0] == 1);
    void *d = dl_tensor_data_ptr(dst);
    unsigned blocks = dl_cuda_blocks(n, kThreads);
    cudaStream_t st = dl_cuda_stream();
    switch (dl_tensor_itemsize(dst)) {
    case 1: {
        uint8_t x;
        memcpy(&x, v, 1);
        if (dense) {
            DL_CUDA_CHECK(cudaMemsetAsync(d, x, (size_t)n, st));
            return 0;
        }
        fill_kernel<uint8_t><<<blocks, kThreads, 0, st>>>((uint8_t *)d, l, x, n);
        break;
    }
    case 2: {
        uint16_t x;
        memcpy(&x, v, 2);
        if (dense)
            fill_dense_kernel<uint16_t><<<blocks, kThreads, 0, st>>>((uint16_t *)d, x, n);
        else
            fill_kernel<uint16_t><<<blocks, kThreads, 0, st>>>((uint16_t *)d, l, x, n);
        break;
    }
    case 4: {
        uint32_t x;
        memcpy(&x, v, 4);
        if (dense && x == 0) {
            DL_CUDA_CHECK(cudaMemsetAsync(d, 0, (size_t)n * 4, st));
            return 0;
        }
        if (dense)
            fill_dense_kernel<uint32_t><<<blocks, kThreads, 0, st>>>((uint32_t *)d, x, n);
        else
            fill_kernel<uint32_t><<<blocks, kThreads, 0, st>>>((uint32_t *)d, l, x, n);
        break;
    }
    default: {
        uint64_t x;
        memcpy(&x, v, 8);
        if (dense && x == 0) {
            DL_CUDA_CHECK(cudaMemsetAsync(d, 0, (size_t)n * 8, st));
            return 0;
        }
        if (dense)
            fill_dense_kernel<uint64_t><<<blocks, kThreads, 0, st>>>((uint64_t *)d, x, n);
        else
            fill_kernel<uint64_t><<<blocks, kThreads, 0, st>>>((uint64_t *)d, l, x, n);
    }
    }
    DL_CUDA_LAUNCHED();
    return 0;
}

bool all_strides_zero(const dl_tensor *t) {
    for (int d = 0; d < t->ndim; d++)
        if (t->strides[d] != 0 && t->shape[d] != 1) return false;
    return true;
}

// A contiguous tensor of t's shape and dtype on dev holding t's values
// (t itself, retained, when it is already that).
dl_tensor *dense_on(dl_tensor *t, dl_device dev) {
    if (dl_device_equal(t->storage->device, dev) && dl_tensor_is_contiguous(t))
        return dl_tensor_retain(t);
    dl_tensor *c = dl_tensor_empty(t->ndim, t->shape, t->dtype, dev);
    if (!c) return nullptr;
    int rc = dev.type == DL_DEVICE_CUDA ? device_copy(c, t) : dl_tensor_copy_(c, t);
    if (rc) {
        dl_tensor_release(c);
        return nullptr;
    }
    return c;
}

} // namespace

// --- the core's hook ---------------------------------------------------------------------

int dl_cuda_copy(dl_tensor *dst, dl_tensor *src) {
    bool dcuda = dst->storage->device.type == DL_DEVICE_CUDA;
    bool scuda = src->storage->device.type == DL_DEVICE_CUDA;
    int64_t n = dl_tensor_numel(dst);
    if (n == 0) return 0;
    if (dcuda && dl_cuda_use(dst)) return -1;
    if (!dcuda && dl_cuda_use(src)) return -1;

    if (dcuda && scuda) {
        if (dst->storage->device.index == src->storage->device.index) return device_copy(dst, src);
        // across GPUs: pack on the source device, move, then convert in place
        dl_tensor *a = nullptr, *b = nullptr;
        int rc = -1;
        if (dl_cuda_use(src) == 0 && (a = dense_on(src, src->storage->device)) &&
            (b = dl_tensor_empty(src->ndim, src->shape, src->dtype, dst->storage->device))) {
            cudaError_t e = cudaMemcpyPeer(dl_tensor_data_ptr(b), dst->storage->device.index,
                                           dl_tensor_data_ptr(a), src->storage->device.index,
                                           (size_t)n * dl_tensor_itemsize(a));
            rc = e == cudaSuccess
                     ? 0
                     : dl_cuda_fail("cudaMemcpyPeer", cudaGetErrorString(e), __FILE__, __LINE__);
            if (rc == 0) rc = dl_cuda_use(dst) || device_copy(dst, b) ? -1 : 0;
        }
        dl_tensor_release(a);
        dl_tensor_release(b);
        return rc;
    }

    if (dcuda) { // host -> device
        if (all_strides_zero(src)) {
            // a broadcast value: convert it on the host, then fill
            uint64_t bytes = 0;
            const void *p = dl_tensor_data_ptr(src);
            if (dl_dtype_is_floating(src->dtype))
                dl_store_f64(&bytes, dst->dtype, dl_load_f64(p, src->dtype));
            else
                dl_store_i64(&bytes, dst->dtype, dl_load_i64(p, src->dtype));
            return device_fill(dst, &bytes);
        }
        dl_tensor *h = dense_on(src, DL_CPU);
        if (!h) return -1;
        int rc = 0;
        size_t nbytes = (size_t)n * dl_tensor_itemsize(h);
        const char *why = "a copy from host memory to the GPU";
        if (dst->dtype == src->dtype && dl_tensor_is_contiguous(dst)) {
            rc = dl_cuda_memcpy_sync(dl_tensor_data_ptr(dst), dl_tensor_data_ptr(h), nbytes,
                                     cudaMemcpyHostToDevice, why);
        } else {
            dl_tensor *t = dl_tensor_empty(h->ndim, h->shape, h->dtype, dst->storage->device);
            if (!t) {
                rc = -1;
            } else {
                rc = dl_cuda_memcpy_sync(dl_tensor_data_ptr(t), dl_tensor_data_ptr(h), nbytes,
                                         cudaMemcpyHostToDevice, why);
                if (!rc) rc = device_copy(dst, t);
                dl_tensor_release(t);
            }
        }
        dl_tensor_release(h);
        return rc;
    }

    // device -> host
    dl_tensor *dsrc = dense_on(src, src->storage->device);
    if (!dsrc) return -1;
    size_t nbytes = (size_t)n * dl_tensor_itemsize(dsrc);
    int rc = 0;
    const char *why = "a copy from the GPU to host memory";
    if (dst->dtype == src->dtype && dl_tensor_is_contiguous(dst)) {
        rc = dl_cuda_memcpy_sync(dl_tensor_data_ptr(dst), dl_tensor_data_ptr(dsrc), nbytes,
                                 cudaMemcpyDeviceToHost, why);
    } else {
        dl_tensor *h = dl_tensor_empty(dsrc->ndim, dsrc->shape, dsrc->dtype, DL_CPU);
        if (!h) {
            rc = -1;
        } else {
            rc = dl_cuda_memcpy_sync(dl_tensor_data_ptr(h), dl_tensor_data_ptr(dsrc), nbytes,
                                     cudaMemcpyDeviceToHost, why);
            if (!rc) rc = dl_tensor_copy_(dst, h);
            dl_tensor_release(h);
        }
    }
    dl_tensor_release(dsrc);
    return rc;
}

// Fills t (CUDA) with value converted to t's dtype (for ops that need a fill
// without a host tensor).
int dl_cuda_fill(dl_tensor *t, double value) {
    if (dl_cuda_use(t)) return -1;
    uint64_t bytes = 0;
    dl_store_f64(&bytes, t->dtype, value);
    return device_fill(t, &bytes);
}
