/* kernels/linalg.h - the kernel interface of the linalg family
 * (ops/linalg.c): the strided matrix operand of the GEMM kernels and the CUDA
 * table (cuBLAS and an exact integer kernel; cpu/gemm.h has the CPU twin).
 * Shared by ops/, cpu/ and cuda/; the table's contract is in kernels/cuda.h.
 * Every pointer to tensor data in the table is a device pointer on CUDA
 * device `device` (0-based), which each entry point makes current. */
#ifndef DL_KERNELS_LINALG_H
#define DL_KERNELS_LINALG_H

#include "core/dtype.h"

#include <stdbool.h>
#include <stdint.h>

/* One operand: element (b, i, j) lives at data + (boff[b] + i*rs + j*cs)
 * elements.  boff == NULL means every batch entry uses offset 0. */
typedef struct dl_gemm_matrix {
    const void *data;
    const int64_t *boff;
    int64_t rs, cs; /* row and column strides, in elements */
} dl_gemm_matrix;

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
} dl_cuda_linalg_kernels;

extern const dl_cuda_linalg_kernels *dl_cuda_linalg;

#endif
