// common.cuh - what every CUDA file of the backend shares: checked calls that
// report the call, file and line through dl_error (never exit), the compute
// stream and the cuBLAS/cuDNN handles of the current device, temporary device
// memory from the caching allocator, strided index arithmetic and element
// conversions.  C++; included by cuda/*.cu only.
//
// Invariants: all kernels of a device run on its one compute stream (the
// legacy default stream; while a CUDA graph is captured, the capture's side
// stream, which dl_cuda_stream() returns then), so a block the caching
// allocator hands out is free for any work queued after the allocation; a
// function returning int returns 0, or -1 with dl_last_error() set; nothing
// here synchronises unless it says so, and whatever does goes through the
// dl_cuda_sync_* calls below.
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <cudnn.h>
#include <stdint.h>

#include <type_traits>

extern "C" {
#include "core/error.h"
#include "core/tensor.h"
}

// --- cuBLAS, opened on first use ----------------------------------------------
// cuBLAS is not linked but opened (dlopen) the first time a handle is made:
// loading libcublasLt alone makes about 150 MB resident (its relocations and
// static initialisers), which every run on the CPU would otherwise pay.
// dl_cublas_load() opens it once (thread-safe) and returns false with
// dl_last_error() set when it cannot; DL_CUBLAS_FN(fn) is the library's fn
// with its exact type (NULL before a successful load: call it only after).
bool dl_cublas_load(void);
void *dl_cublas_symbol(const char *name);
#define DL_STR_(x) #x
#define DL_STR(x) DL_STR_(x) /* after macro expansion: cublasCreate -> cublasCreate_v2 */
#define DL_CUBLAS_FN(fn) DL_CUBLAS_FN_AS(fn, decltype(&::fn))
// The same for a function C++ overloads (cublasGemmEx): T picks the C
// declaration; the unevaluated static_cast fails to compile unless T is
// exactly one of its types.
#define DL_CUBLAS_FN_AS(fn, T)                                                                     \
    ([]() {                                                                                        \
        using p_t = decltype(static_cast<T>(&::fn));                                               \
        static p_t p_ = reinterpret_cast<p_t>(dl_cublas_symbol(DL_STR(fn)));                       \
        return p_;                                                                                 \
    }())
using dl_cublas_gemm_ex_t = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t,
                                               int, int, int, const void *, const void *,
                                               cudaDataType, int, const void *, cudaDataType, int,
                                               const void *, void *, cudaDataType, int,
                                               cublasComputeType_t, cublasGemmAlgo_t);
using dl_cublas_gemm_strided_t = cublasStatus_t (*)(
    cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void *, const void *,
    cudaDataType, int, long long, const void *, cudaDataType, int, long long, const void *, void *,
    cudaDataType, int, long long, int, cublasComputeType_t, cublasGemmAlgo_t);

// --- checked calls ------------------------------------------------------------
// Each sets "CUDA error in <call> (<file>:<line>): <message>" and returns -1.
int dl_cuda_fail(const char *call, const char *msg, const char *file, int line);

#define DL_CUDA_CHECK(call)                                                                        \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess)                                                                     \
            return dl_cuda_fail(#call, cudaGetErrorString(e_), __FILE__, __LINE__);                \
    } while (0)
#define DL_CUBLAS_CHECK(call)                                                                      \
    do {                                                                                           \
        cublasStatus_t s_ = (call);                                                                \
        if (s_ != CUBLAS_STATUS_SUCCESS)                                                           \
            return dl_cuda_fail(#call, DL_CUBLAS_FN(cublasGetStatusString)(s_), __FILE__,          \
                                __LINE__);                                                         \
    } while (0)
#define DL_CUDNN_CHECK(call)                                                                       \
    do {                                                                                           \
        cudnnStatus_t s_ = (call);                                                                 \
        if (s_ != CUDNN_STATUS_SUCCESS)                                                            \
            return dl_cuda_fail(#call, cudnnGetErrorString(s_), __FILE__, __LINE__);               \
    } while (0)
// After a kernel launch: reports a bad launch configuration at once.
#define DL_CUDA_LAUNCHED() DL_CUDA_CHECK(cudaGetLastError())
// The same as an expression, 0 or -1 with the error, for code that frees
// scratch memory before it returns.
static inline int dl_cuda_launch_status(const char *file, int line) {
    cudaError_t e = cudaGetLastError();
    return e == cudaSuccess ? 0 : dl_cuda_fail("kernel launch", cudaGetErrorString(e), file, line);
}
#define DL_CUDA_LAUNCH_STATUS() dl_cuda_launch_status(__FILE__, __LINE__)

// --- a family's kernel table ------------------------------------------------------
// DL_CUDA_TABLE(pool) = {.family = "pool", ...}; defines dl_cuda_pool_table,
// the dl_cuda_pool_kernels (kernels/pool.h) that cuda/backend.cu installs.  The
// extern declaration in front gives the const object external linkage (C++
// makes a namespace-scope const internal otherwise).
#define DL_CUDA_TABLE(fam)                                                                         \
    extern const dl_cuda_##fam##_kernels dl_cuda_##fam##_table;                                    \
    const dl_cuda_##fam##_kernels dl_cuda_##fam##_table

// --- device, stream, handles ----------------------------------------------------
int dl_cuda_device(void);          // current device (0-based)
cudaStream_t dl_cuda_stream(void); // compute stream of the current device (see above)
cudaStream_t dl_cuda_copy_stream(void);
cublasHandle_t dl_cuda_cublas(void);         // bound to the compute stream; NULL + error
cublasLtHandle_t dl_cuda_cublaslt(void);     // NULL + error
cudnnHandle_t dl_cuda_cudnn(void);           // bound to the compute stream; NULL + error
cudnnHandle_t dl_cuda_cudnn_on_stream(void); // dl_cuda_cudnn, set to dl_cuda_stream() now
int dl_cuda_sm_count(void);
int dl_cuda_cc_major(void); // compute capability of the current device

// Makes the tensor's device current (tensors may live on cuda:1).
int dl_cuda_use(const dl_tensor *t);

// --- host synchronisation (runtime.cu) ------------------------------------------------
// Every call that makes the host wait for the GPU goes through these, so that
// dl.cuda.sync_count() sees each one and none runs while a CUDA graph is being
// captured (a capture cannot wait; each refuses then, naming `why`).  After the
// wait, a check recorded on the device (dl_cuda_rt->check_first_bad) is
// reported as the call's error.  0, or -1 with dl_last_error() set.
int dl_cuda_sync_stream(cudaStream_t s, const char *why);
int dl_cuda_sync_device(const char *why);
int dl_cuda_sync_event(cudaEvent_t e, const char *why);
// dl_cuda_sync_event for internal timing: a check recorded on the device is
// left for the next synchronisation to report.
int dl_cuda_wait_event(cudaEvent_t e, const char *why);
// n bytes of device memory at src into host memory at dst, on the compute
// stream, waiting for it.
int dl_cuda_read_device(void *dst, const void *src, size_t n, const char *why);
// A cudaMemcpy with a host side: device-to-host waits for the copy, and
// host-to-device from pageable memory waits for the stream before it starts.
int dl_cuda_memcpy_sync(void *dst, const void *src, size_t n, cudaMemcpyKind kind, const char *why);
// Whether the current device is capturing a CUDA graph now; an error naming
// `op` (and -1) when it is, for work that cannot be captured.
bool dl_cuda_capturing(void);
int dl_cuda_refuse_in_capture(const char *op);

// --- CUDA graph capture (runtime.cu, for graph.cu) -----------------------------------
// dl_cuda_capture_enter makes `s` the compute stream of device d and opens a
// private pool for what is allocated until dl_cuda_capture_leave; it returns
// the pool's id (> 0), or -1 with an error.  Blocks of a live private pool
// serve only that pool; dl_cuda_pool_release hands its free blocks to the
// device's general pool (blocks still in use follow when they are freed).
int dl_cuda_capture_enter(int d, cudaStream_t s);
void dl_cuda_capture_leave(int d);
void dl_cuda_pool_release(int d, int pool);
cudaStream_t dl_cuda_capture_stream(int d); // the device's side stream; NULL + error

// --- memory -----------------------------------------------------------------------
// Temporary device memory from the caching allocator (stream-ordered on the
// compute stream: free it as soon as the last kernel using it is queued).
void *dl_cuda_malloc(size_t nbytes); // NULL + error (sizes in the message)
void dl_cuda_free(void *p);
// One shared, growing workspace per device (cuDNN, cuBLASLt): valid until the
// next call; do not hold two at once.  NULL + error.
void *dl_cuda_workspace(size_t nbytes);

// --- launch sizing ---------------------------------------------------------------
static inline unsigned dl_cuda_blocks(int64_t n, int threads) {
    int64_t b = (n + threads - 1) / threads;
    if (b < 1) b = 1;
    if (b > 65535LL * 32) b = 65535LL * 32; // kernels use grid-stride loops
    return (unsigned)b;
}

// --- strided index arithmetic ----------------------------------------------------
// A view's shape and strides (in elements), dims of size 1 dropped and
// contiguous neighbours merged, so the common cases take few divisions.
struct dl_cuda_layout {
    int ndim;
    int64_t shape[DL_MAX_DIMS];
    int64_t strides[DL_MAX_DIMS];
};
// The layout of t (its own shape and strides).
dl_cuda_layout dl_cuda_layout_of(const dl_tensor *t);
// Layouts of n tensors of one shape (out first), with dims merged only where
// every tensor allows it.  ls[i] describes ts[i].
void dl_cuda_layouts(int n, const dl_tensor *const *ts, dl_cuda_layout *ls);
// The same for work whose element order does not matter (elementwise maps,
// copies): the i-th element is the i-th in ts[0]'s memory order, so tensors
// that share a permuted dense layout (channels-last) read as one dense run.
void dl_cuda_layouts_any_order(int n, const dl_tensor *const *ts, dl_cuda_layout *ls);

// Element offset of the i-th element (row-major order) of a layout.
__host__ __device__ inline int64_t dl_cuda_offset(const dl_cuda_layout &l, int64_t i) {
    int64_t off = 0;
    for (int d = l.ndim - 1; d >= 0; d--) {
        int64_t s = l.shape[d];
        int64_t q = i / s;
        off += (i - q * s) * l.strides[d];
        i = q;
    }
    return off;
}

// --- element conversions (compute in float for the half types) ----------------------
template <typename T> __device__ inline float dl_to_float(T v) {
    return (float)v;
}
template <> __device__ inline float dl_to_float<__half>(__half v) {
    return __half2float(v);
}
template <> __device__ inline float dl_to_float<__nv_bfloat16>(__nv_bfloat16 v) {
    return __bfloat162float(v);
}
template <typename T> __device__ inline T dl_from_float(float v) {
    return (T)v;
}
template <> __device__ inline __half dl_from_float<__half>(float v) {
    return __float2half_rn(v);
}
template <> __device__ inline __nv_bfloat16 dl_from_float<__nv_bfloat16>(float v) {
    return __float2bfloat16_rn(v);
}

// Element type T read as accumulator type A, and back: the half types
// through float, the others by a plain conversion (so double stays double).
template <typename T>
constexpr bool dl_is_half_v = std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>;
template <typename A, typename T> __device__ inline A dl_load(T v) {
    if constexpr (dl_is_half_v<T>)
        return (A)dl_to_float(v);
    else
        return (A)v;
}
template <typename T, typename A> __device__ inline T dl_store(A v) {
    if constexpr (dl_is_half_v<T>)
        return dl_from_float<T>((float)v);
    else
        return (T)v;
}

// f(T{}, A{}) for a floating dtype: its element type T and accumulator type A
// (double for F64, float otherwise); any other dtype is an error naming op.
template <typename F> int dl_float_dispatch(const char *op, dl_dtype dt, F f) {
    switch (dt) {
    case DL_DTYPE_F32: return f(float{}, float{});
    case DL_DTYPE_F64: return f(double{}, double{});
    case DL_DTYPE_F16: return f(__half{}, float{});
    case DL_DTYPE_BF16: return f(__nv_bfloat16{}, float{});
    default: return dl_error("%s: no CUDA kernel for %s", op, dl_dtype_name(dt));
    }
}

// Fills t (CUDA, any strides) with value converted to t's dtype.
int dl_cuda_fill(dl_tensor *t, double value);
