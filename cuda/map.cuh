// map.cuh - the elementwise map machinery that the elementwise, activation
// and dropout families' CUDA files (elementwise.cu, activation.cu,
// dropout.cu) share: operand descriptions (Out, In<C>) read and written in a
// compute type C, the one grid-stride kernel (map_kernel) that runs a
// functor once per element and its launcher, and the host-side operand
// checks.  C++; included by those files only.
//
// Invariants: the host checks every operand (device, dtype, shape) before a
// launch and never dereferences device memory; a CPU operand holds one value,
// read on the host and passed by value; indices and sizes are int64.
#pragma once

#include "common.cuh"

#include <string.h>

namespace dl_map {

const int kThreads = 256;

// --- operands ---------------------------------------------------------------------------

// The output: elements of `size` bytes and storage dtype dt at p in layout l (dense:
// element i sits at offset i).
struct Out {
    char *p;
    dl_cuda_layout l;
    int dt, size;
    bool dense;
};

// An input read in compute type C: device data at p in layout l, or, when p is null, the
// value s (a CPU scalar).
template <typename C> struct In {
    const char *p;
    dl_cuda_layout l;
    int dt, size;
    bool dense;
    C s;
};

__device__ inline int64_t offset_of(const dl_cuda_layout &l, bool dense, int64_t i) {
    return dense ? i : dl_cuda_offset(l, i);
}

// Element loads and stores in compute type C.  float also reads and writes float16 and
// bfloat16 storage; bool reads any nonzero byte as true; other types are plain words
// (where and masked_fill move unsigned words of the element's size).
template <typename C> __device__ inline C load(const char *p, int) {
    return *(const C *)p;
}
template <> __device__ inline float load<float>(const char *p, int dt) {
    switch (dt) {
    case DL_DTYPE_F16: return __half2float(*(const __half *)p);
    case DL_DTYPE_BF16: return __bfloat162float(*(const __nv_bfloat16 *)p);
    default: return *(const float *)p;
    }
}
template <> __device__ inline bool load<bool>(const char *p, int) {
    return *(const uint8_t *)p != 0;
}

template <typename C> __device__ inline void store(char *p, int, C v) {
    *(C *)p = v;
}
template <> __device__ inline void store<float>(char *p, int dt, float v) {
    switch (dt) {
    case DL_DTYPE_F16: *(__half *)p = __float2half_rn(v); break;
    case DL_DTYPE_BF16: *(__nv_bfloat16 *)p = __float2bfloat16_rn(v); break;
    default: *(float *)p = v;
    }
}
template <> __device__ inline void store<bool>(char *p, int, bool v) {
    *(uint8_t *)p = v ? 1 : 0;
}

template <typename C> __device__ inline C get(const In<C> &a, int64_t i) {
    if (!a.p) return a.s;
    return load<C>(a.p + offset_of(a.l, a.dense, i) * a.size, a.dt);
}

__device__ inline char *at(const Out &o, int64_t i) {
    return o.p + offset_of(o.l, o.dense, i) * o.size;
}

// --- the one kernel --------------------------------------------------------------------------

template <typename F> __global__ void map_kernel(F f, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        f(i);
}

// Queues f over indices 0 .. n-1 on the compute stream.
template <typename F> int launch(const F &f, int64_t n) {
    if (n <= 0) return 0;
    map_kernel<F><<<dl_cuda_blocks(n, kThreads), kThreads, 0, dl_cuda_stream()>>>(f, n);
    DL_CUDA_LAUNCHED();
    return 0;
}

// --- host-side operand checks -----------------------------------------------------------

// Whether compute type C reads and writes storage dtype dt.
template <typename C> bool readable(int dt) {
    return dl_dtype_size((dl_dtype)dt) == sizeof(C);
}
template <> inline bool readable<float>(int dt) {
    return dt == DL_DTYPE_F32 || dt == DL_DTYPE_F16 || dt == DL_DTYPE_BF16;
}
template <> inline bool readable<double>(int dt) {
    return dt == DL_DTYPE_F64;
}
template <> inline bool readable<int64_t>(int dt) {
    return dt == DL_DTYPE_I64;
}
template <> inline bool readable<bool>(int dt) {
    return dt == DL_DTYPE_BOOL || dt == DL_DTYPE_U8;
}

// The value of a one-element CPU tensor as C (host memory: safe to read here).
template <typename C> C host_value(const dl_tensor *t) {
    C v;
    memcpy(&v, dl_tensor_data_ptr(t), sizeof v);
    return v;
}
template <> inline float host_value<float>(const dl_tensor *t) {
    return (float)dl_load_f64(dl_tensor_data_ptr(t), t->dtype);
}
template <> inline double host_value<double>(const dl_tensor *t) {
    return dl_load_f64(dl_tensor_data_ptr(t), t->dtype);
}
template <> inline int64_t host_value<int64_t>(const dl_tensor *t) {
    return dl_load_i64(dl_tensor_data_ptr(t), t->dtype);
}
template <> inline bool host_value<bool>(const dl_tensor *t) {
    return dl_load_f64(dl_tensor_data_ptr(t), t->dtype) != 0;
}

// One element repeated: every dim has size 1 or stride 0 (an expanded 0-dim tensor).
inline bool single_value(const dl_tensor *t) {
    for (int d = 0; d < t->ndim; d++)
        if (t->shape[d] != 1 && t->strides[d] != 0) return false;
    return true;
}

inline bool dense(const dl_cuda_layout &l) {
    return l.ndim == 0 || (l.ndim == 1 && l.strides[0] == 1);
}

// Checks out (on CUDA) and its k inputs (out's shape; on out's device, or a one-element
// CPU tensor), makes out's device current and computes the layouts: ls[0] out's, ls[1+j]
// in[j]'s.  -1 with an error naming op otherwise.
inline int begin(const char *op, dl_tensor *out, int k, dl_tensor *const *in, dl_cuda_layout *ls) {
    if (!out || out->storage->device.type != DL_DEVICE_CUDA)
        return dl_error("%s: the CUDA kernel was given an output that is not on a CUDA device "
                        "(internal)",
                        op);
    const dl_tensor *ts[8] = {out};
    for (int j = 0; j < k; j++) {
        const dl_tensor *t = in[j];
        char b1[128], b2[128];
        if (!t) return dl_error("%s: operand %d is missing (internal)", op, j + 1);
        if (!dl_shape_equal(t, out))
            return dl_error("%s: operand %d has shape %s but the output has %s (internal)", op,
                            j + 1, dl_shape_str(t->ndim, t->shape, b1, sizeof b1),
                            dl_shape_str(out->ndim, out->shape, b2, sizeof b2));
        dl_device d = t->storage->device;
        if (d.type == DL_DEVICE_CUDA && d.index != out->storage->device.index)
            return dl_error("%s: operand %d is on cuda:%d but the output is on cuda:%d", op, j + 1,
                            d.index, out->storage->device.index);
        if (d.type != DL_DEVICE_CUDA && !single_value(t))
            return dl_error("%s: operand %d is a CPU tensor with more than one value; the "
                            "output is on cuda:%d (internal)",
                            op, j + 1, out->storage->device.index);
        ts[1 + j] = t;
    }
    if (dl_cuda_use(out)) return -1;
    dl_cuda_layouts_any_order(k + 1, ts, ls); // each element is independent
    return 0;
}

inline int bad_dtype(const char *op, const char *what, int dt) {
    return dl_error("%s: the CUDA kernel does not take a %s %s here (internal)", op,
                    dl_dtype_name((dl_dtype)dt), what);
}

// out's description; ok: the kernel writes out's dtype.
inline int make_out(const char *op, dl_tensor *out, const dl_cuda_layout &l, bool ok, Out *o) {
    if (!ok) return bad_dtype(op, "output", out->dtype);
    *o =
        Out{(char *)dl_tensor_data_ptr(out), l, out->dtype, (int)dl_tensor_itemsize(out), dense(l)};
    return 0;
}

// Input t's description in compute type C.
template <typename C>
int make_in(const char *op, const dl_tensor *t, const dl_cuda_layout &l, In<C> *in) {
    if (!readable<C>(t->dtype)) return bad_dtype(op, "input", t->dtype);
    *in = In<C>{};
    in->dt = t->dtype;
    in->size = (int)dl_tensor_itemsize(t);
    if (t->storage->device.type == DL_DEVICE_CUDA) {
        in->p = (const char *)dl_tensor_data_ptr(t);
        in->l = l;
        in->dense = dense(l);
    } else {
        in->p = nullptr;
        in->s = host_value<C>(t);
    }
    return 0;
}

// The compute type a dtype reads as: 0 float, 1 double, 2 int64, 3 bool, -1 none.
inline int compute_kind(int dt) {
    switch (dt) {
    case DL_DTYPE_F32:
    case DL_DTYPE_F16:
    case DL_DTYPE_BF16: return 0;
    case DL_DTYPE_F64: return 1;
    case DL_DTYPE_I64: return 2;
    case DL_DTYPE_BOOL:
    case DL_DTYPE_U8: return 3;
    default: return -1;
    }
}

inline int no_kernel(const char *op, int dt) {
    return dl_error("%s: no CUDA kernel for %s tensors", op, dl_dtype_name((dl_dtype)dt));
}

} // namespace dl_map
