// linalg.cu - matrix products on CUDA (see src/kernels/linalg.h): the
// floating dtypes through cuBLAS, the integer dtypes through a plain kernel of
// our own.  The table also carries the cuDNN convolutions of conv.cu.
//
// cuBLAS is column-major.  Our row-major (M,N) result C is, read
// column-major, the (N,M) matrix C^T = B^T A^T, so cuBLAS gets our operands
// swapped: its first operand is our B, its second our A.  A row-major operand
// readable in place (dl_cpu_gemm_readable) has either unit column stride
// (row-major with leading dimension rs: cuBLAS reads it as the transposed
// matrix it needs, op N) or unit row stride (column-major with leading
// dimension cs: op T).
// Invariants: host code never dereferences device memory (batch offsets are
// host arrays, copied to the device only for the integer kernel); every
// CUDA/cuBLAS call is checked; every size cuBLAS takes as int is checked
// against INT_MAX first; a batch is split into chunks of at most 65535.
#include "common.cuh"

#include <limits.h>
#include <type_traits>

extern "C" {
#include "kernels/cuda.h"
#include "kernels/linalg.h"
}

// conv.cu

// Makes CUDA device d current (shared with conv.cu).
int dl_cuda_la_use_device(int d) {
    int cur = -1;
    DL_CUDA_CHECK(cudaGetDevice(&cur));
    if (cur != d) DL_CUDA_CHECK(cudaSetDevice(d));
    return 0;
}

namespace {

// --- kernels ----------------------------------------------------------------------------

// Values in wrap-around arithmetic: every integer dtype widened to uint64
// (sign-extended), products and sums mod 2^64, truncated on store, which is
// exact mod 2^bits of the dtype.
template <typename T> __device__ inline uint64_t widen(T v) {
    return (uint64_t)(int64_t)v;
}
template <typename T> __device__ inline T narrow(uint64_t v) {
    using U = typename std::make_unsigned<T>::type;
    return (T)(U)v;
}

// out is (batch,M,N) contiguous; a's element (b,i,k) is at a[aoff[b] + i*ars + k*acs]
// (aoff NULL: offset 0), b's element (b,k,j) at b[boff[b] + k*brs + j*bcs].
// out = alpha * a@b + beta * out (beta only when read_out).  One thread per
// output element, grid-stride.
template <typename T>
__global__ void gemm_int_kernel(T *out, const T *a, const T *b, const int64_t *aoff,
                                const int64_t *boff, int64_t batch, int64_t M, int64_t N, int64_t K,
                                int64_t ars, int64_t acs, int64_t brs, int64_t bcs, uint64_t alpha,
                                uint64_t beta, bool read_out) {
    int64_t total = batch * M * N;
    for (int64_t idx = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; idx < total;
         idx += (int64_t)gridDim.x * blockDim.x) {
        int64_t j = idx % N, t = idx / N;
        int64_t i = t % M, bi = t / M;
        const T *pa = a + (aoff ? aoff[bi] : 0) + i * ars;
        const T *pb = b + (boff ? boff[bi] : 0) + j * bcs;
        uint64_t acc = 0;
        for (int64_t k = 0; k < K; k++) acc += widen(pa[k * acs]) * widen(pb[k * brs]);
        uint64_t v = alpha * acc;
        if (read_out) v += widen(out[idx]) * beta;
        out[idx] = narrow<T>(v);
    }
}

template <typename T> __device__ inline double to_double(T v) {
    return (double)v;
}
template <> __device__ inline double to_double<__half>(__half v) {
    return __half2float(v);
}
template <> __device__ inline double to_double<__nv_bfloat16>(__nv_bfloat16 v) {
    return __bfloat162float(v);
}
template <typename T> __device__ inline T from_double(double v) {
    return (T)v;
}
template <> __device__ inline __half from_double<__half>(double v) {
    return __float2half_rn((float)v);
}
template <> __device__ inline __nv_bfloat16 from_double<__nv_bfloat16>(double v) {
    return __float2bfloat16_rn((float)v);
}

// out[0..n) *= beta (the floating types; float32 and the half types in float)
template <typename T> __global__ void scale_kernel(T *out, int64_t n, double beta) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        if constexpr (std::is_same<T, double>::value)
            out[i] = from_double<T>(to_double(out[i]) * beta);
        else
            out[i] = from_double<T>((double)((float)to_double(out[i]) * (float)beta));
    }
}

// --- launchers --------------------------------------------------------------------------

// cuBLAS's view of a row-major (rows, cols) operand with strides (rs, cs):
// false when it is not readable in place (the op layer copies such operands).
bool blas_layout(int64_t rows, int64_t cols, int64_t rs, int64_t cs, cublasOperation_t *op,
                 int64_t *ld) {
    int64_t min_n = cols > 1 ? cols : 1, min_t = rows > 1 ? rows : 1;
    if (cs == 1 || cols == 1) {
        int64_t l = rows == 1 ? min_n : rs;
        if (l >= min_n && l <= INT_MAX) {
            *op = CUBLAS_OP_N;
            *ld = l;
            return true;
        }
    }
    if (rs == 1 || rows == 1) {
        int64_t l = cols == 1 ? min_t : cs;
        if (l >= min_t && l <= INT_MAX) {
            *op = CUBLAS_OP_T;
            *ld = l;
            return true;
        }
    }
    return false;
}

// Whether boff (batch entries) is base + b*stride for every b; fills both.
bool uniform_offsets(const int64_t *boff, int64_t batch, int64_t *base, int64_t *stride) {
    *base = boff ? boff[0] : 0;
    *stride = boff && batch > 1 ? boff[1] - boff[0] : 0;
    if (!boff) return true;
    for (int64_t b = 1; b < batch; b++)
        if (boff[b] != *base + b * *stride) return false;
    return true;
}

int scale_out(dl_dtype dt, int64_t n, void *out, double beta) {
    if (beta == 1 || n == 0) return 0;
    cudaStream_t st = dl_cuda_stream();
    if (beta == 0) {
        DL_CUDA_CHECK(cudaMemsetAsync(out, 0, (size_t)n * dl_dtype_size(dt), st));
        return 0;
    }
    unsigned g = dl_cuda_blocks(n, 256);
    switch (dt) {
    case DL_DTYPE_F32: scale_kernel<<<g, 256, 0, st>>>((float *)out, n, beta); break;
    case DL_DTYPE_F64: scale_kernel<<<g, 256, 0, st>>>((double *)out, n, beta); break;
    case DL_DTYPE_F16: scale_kernel<<<g, 256, 0, st>>>((__half *)out, n, beta); break;
    case DL_DTYPE_BF16: scale_kernel<<<g, 256, 0, st>>>((__nv_bfloat16 *)out, n, beta); break;
    default: return dl_error("matmul: internal error: scale of %s", dl_dtype_name(dt));
    }
    DL_CUDA_LAUNCHED();
    return 0;
}

template <typename T>
int gemm_int(int64_t batch, int64_t M, int64_t N, int64_t K, double alpha, const dl_gemm_matrix *A,
             const dl_gemm_matrix *B, double beta, void *out) {
    // offsets to the device: [A's batch offsets | B's batch offsets]
    int64_t *doff = nullptr;
    size_t na = A->boff ? (size_t)batch : 0, nb = B->boff ? (size_t)batch : 0;
    if (na + nb) {
        doff = (int64_t *)dl_cuda_malloc(sizeof(int64_t) * (na + nb));
        if (!doff) return -1;
        const char *why = "integer matmul's batch offsets";
        int rc = 0;
        if (na)
            rc = dl_cuda_memcpy_sync(doff, A->boff, sizeof(int64_t) * na, cudaMemcpyHostToDevice,
                                     why);
        if (!rc && nb)
            rc = dl_cuda_memcpy_sync(doff + na, B->boff, sizeof(int64_t) * nb,
                                     cudaMemcpyHostToDevice, why);
        if (rc) {
            dl_cuda_free(doff);
            return -1;
        }
    }
    int64_t total = batch * M * N;
    cudaStream_t st = dl_cuda_stream();
    gemm_int_kernel<T><<<dl_cuda_blocks(total, 256), 256, 0, st>>>(
        (T *)out, (const T *)A->data, (const T *)B->data, na ? doff : nullptr,
        nb ? doff + na : nullptr, batch, M, N, K, A->rs, A->cs, B->rs, B->cs,
        (uint64_t)(int64_t)alpha, (uint64_t)(int64_t)beta, beta != 0);
    cudaError_t e = cudaGetLastError();
    if (doff) dl_cuda_free(doff);
    if (e != cudaSuccess)
        return dl_cuda_fail("gemm_int_kernel", cudaGetErrorString(e), __FILE__, __LINE__);
    return 0;
}

int gemm_blas(dl_dtype dt, int64_t batch, int64_t M, int64_t N, int64_t K, double alpha,
              const dl_gemm_matrix *A, const dl_gemm_matrix *B, double beta, void *out) {
    if (M > INT_MAX || N > INT_MAX || K > INT_MAX)
        return dl_error("matmul: sizes %lld x %lld x %lld are too large for cuBLAS (each must "
                        "be below 2^31)",
                        (long long)M, (long long)K, (long long)N);
    cublasOperation_t opa, opb; // cuBLAS's first operand is our B, its second our A
    int64_t lda, ldb;
    if (!blas_layout(K, N, B->rs, B->cs, &opa, &lda) ||
        !blas_layout(M, K, A->rs, A->cs, &opb, &ldb))
        return dl_error("matmul: internal error: operand strides not readable by cuBLAS");
    cudaDataType_t type;
    cublasComputeType_t compute;
    switch (dt) {
    case DL_DTYPE_F32:
        type = CUDA_R_32F;
        compute = dl_flags.allow_tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
        break;
    case DL_DTYPE_F64:
        type = CUDA_R_64F;
        compute = CUBLAS_COMPUTE_64F;
        break;
    case DL_DTYPE_F16:
        type = CUDA_R_16F;
        compute = CUBLAS_COMPUTE_32F;
        break;
    case DL_DTYPE_BF16:
        type = CUDA_R_16BF;
        compute = CUBLAS_COMPUTE_32F;
        break;
    default: return dl_error("matmul: internal error: cuBLAS given %s", dl_dtype_name(dt));
    }
    // scaling factors in the compute type
    float af = (float)alpha, bf = (float)beta;
    const void *pa = dt == DL_DTYPE_F64 ? (const void *)&alpha : (const void *)&af;
    const void *pb = dt == DL_DTYPE_F64 ? (const void *)&beta : (const void *)&bf;
    cublasHandle_t h = dl_cuda_cublas();
    if (!h) return -1;
    DL_CUBLAS_CHECK(DL_CUBLAS_FN(cublasSetStream)(h, dl_cuda_stream()));
    DL_CUBLAS_CHECK(DL_CUBLAS_FN(cublasSetPointerMode)(h, CUBLAS_POINTER_MODE_HOST));
    size_t isz = dl_dtype_size(dt);
    const char *a0 = (const char *)A->data, *b0 = (const char *)B->data;
    char *c0 = (char *)out;
    int64_t abase, astride, bbase, bstride;
    bool uniform = uniform_offsets(A->boff, batch, &abase, &astride) &&
                   uniform_offsets(B->boff, batch, &bbase, &bstride);
    if (uniform) {
        const int64_t chunk = 65535;
        for (int64_t b = 0; b < batch; b += chunk) {
            int64_t n = batch - b < chunk ? batch - b : chunk;
            DL_CUBLAS_CHECK(DL_CUBLAS_FN_AS(cublasGemmStridedBatchedEx, dl_cublas_gemm_strided_t)(
                h, opa, opb, (int)N, (int)M, (int)K, pa, b0 + (bbase + b * bstride) * (int64_t)isz,
                type, (int)lda, (long long)bstride, a0 + (abase + b * astride) * (int64_t)isz, type,
                (int)ldb, (long long)astride, pb, c0 + b * M * N * (int64_t)isz, type, (int)N,
                (long long)(M * N), (int)n, compute, CUBLAS_GEMM_DEFAULT));
        }
        return 0;
    }
    for (int64_t b = 0; b < batch; b++)
        DL_CUBLAS_CHECK(DL_CUBLAS_FN_AS(cublasGemmEx, dl_cublas_gemm_ex_t)(
            h, opa, opb, (int)N, (int)M, (int)K, pa, b0 + B->boff[b] * (int64_t)isz, type, (int)lda,
            a0 + A->boff[b] * (int64_t)isz, type, (int)ldb, pb, c0 + b * M * N * (int64_t)isz, type,
            (int)N, compute, CUBLAS_GEMM_DEFAULT));
    return 0;
}

int la_gemm(int device, dl_dtype dt, int64_t batch, int64_t M, int64_t N, int64_t K, double alpha,
            const dl_gemm_matrix *A, const dl_gemm_matrix *B, double beta, void *out) {
    if (dl_cuda_la_use_device(device)) return -1;
    if (batch <= 0 || M <= 0 || N <= 0) return 0;
    switch (dt) {
    case DL_DTYPE_I64: return gemm_int<int64_t>(batch, M, N, K, alpha, A, B, beta, out);
    case DL_DTYPE_I32: return gemm_int<int32_t>(batch, M, N, K, alpha, A, B, beta, out);
    case DL_DTYPE_U8: return gemm_int<uint8_t>(batch, M, N, K, alpha, A, B, beta, out);
    case DL_DTYPE_F32:
    case DL_DTYPE_F64:
    case DL_DTYPE_F16:
    case DL_DTYPE_BF16:
        // nothing to sum: out = beta * out (cuBLAS is not asked about k == 0)
        if (K == 0) return scale_out(dt, batch * M * N, out, beta);
        return gemm_blas(dt, batch, M, N, K, alpha, A, B, beta, out);
    default: return dl_error("matmul: %s tensors cannot be multiplied on CUDA", dl_dtype_name(dt));
    }
}

} // namespace

DL_CUDA_TABLE(linalg) = {
    .family = "linalg",
    .gemm = la_gemm,
};
