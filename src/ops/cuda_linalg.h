/* cuda_linalg.h - the CUDA kernels of the matrix products through cuBLAS (src/ops/linalg.c) and
 * convolutions through cuDNN (src/ops/nn_conv.c).
 * The table is filled in by cuda/linalg.cu (gemm) and cuda/conv.cu (conv2d); see
 * cuda_backend.h for the contract (entry points mirror their CPU twins and return 0 or -1
 * with an error).  Every pointer to tensor data below is a device pointer on CUDA device
 * `device` (0-based), which each entry point makes current before it queues work. */
#ifndef DL_OPS_CUDA_LINALG_H
#define DL_OPS_CUDA_LINALG_H

#include "cpu/conv.h"
#include "cpu/gemm.h"
#include "cuda_backend.h"

#include <stdbool.h>

typedef struct dl_cuda_linalg_kernels {
    const char *family;
    /* out[b] = alpha * A[b] @ B[b] + beta * out[b] for b in [0, batch), as dl_cpu_gemm
     * (src/cpu/gemm.h): out is (batch, M, N) contiguous; A, B are strided views whose
     * data are device pointers and whose boff arrays (may be NULL) live in host memory.
     * dt is F32, F64, F16, BF16 (cuBLAS; the half types accumulate in float32; float32
     * uses TF32 only when dl_flags.allow_tf32) or I64, I32, U8 (an exact wrap-around
     * kernel of our own, any strides).  Floating operands must be dl_cpu_gemm_readable
     * with leading dimensions below 2^31.  beta == 0 never reads out. */
    int (*gemm)(int device, dl_dtype dt, int64_t batch, int64_t M, int64_t N, int64_t K,
                double alpha, const dl_gemm_matrix *A, const dl_gemm_matrix *B, double beta,
                void *out);
    /* Convolutions through cuDNN, as dl_cpu_conv2d_forward/backward (src/cpu/conv.h),
     * with dt F32, F64, F16 or BF16 (the half types compute in float32).  nhwc false:
     * x, y, gx, gy are contiguous (N,C,H,W) and w, gw contiguous (O,C/g,KH,KW); nhwc
     * true: all of them are channels-last (NHWC and OHWI memory), which float64 does
     * not support.  Outputs are written in full; in the backward each of gx, gw, gb may
     * be NULL, x is read only for gw and w only for gx.  Every size of s is positive
     * except that the backward accepts C == 0 when only gb is wanted. */
    int (*conv2d_forward)(int device, dl_dtype dt, const dl_conv2d_shape *s, bool nhwc, void *y,
                          const void *x, const void *w, const void *b);
    int (*conv2d_backward)(int device, dl_dtype dt, const dl_conv2d_shape *s, bool nhwc, void *gx,
                           void *gw, void *gb, const void *gy, const void *x, const void *w);
} dl_cuda_linalg_kernels;

#endif
