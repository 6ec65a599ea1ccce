/* gemm.h - CPU matrix-multiply kernels: a batch of C = alpha * A @ B + beta * C.
 * float32 runs on oneDNN's row-major sgemm (which reads a transposed operand
 * in place through its leading dimension); float64 and the integer types run
 * on our own blocked loops (integers in wrap-around two's complement
 * arithmetic, so results are exact modulo 2^bits, as PyTorch's).
 * The output is always a fresh contiguous (batch, M, N) buffer; operands are
 * strided views described by dl_gemm_matrix.  No Lua, no shape checks: the
 * op layer (src/ops/linalg.c) validates and allocates. */
#ifndef DL_CPU_GEMM_H
#define DL_CPU_GEMM_H

#include "kernels/linalg.h"
#include "core/dtype.h"

#include <stdbool.h>
#include <stdint.h>

/* True when sgemm can read a (rows, cols) float32 matrix with strides
 * (rs, cs) in place: one unit stride and a leading dimension large enough. */
bool dl_cpu_gemm_readable(int64_t rows, int64_t cols, int64_t rs, int64_t cs);

/* out[b] = alpha * A[b] @ B[b] + beta * out[b] for b in [0, batch).
 * out is (batch, M, N) contiguous; A[b] is (M, K); B[b] is (K, N); all of
 * dtype dt (F32, F64, I64, I32 or U8).  beta == 0 writes out without reading
 * it.  For integer dtypes alpha and beta must be integral.  float32 operands
 * must be dl_cpu_gemm_readable.  Returns 0, or -1 with dl_last_error set. */
int dl_cpu_gemm(dl_dtype dt, int64_t batch, int64_t M, int64_t N, int64_t K, double alpha,
                const dl_gemm_matrix *A, const dl_gemm_matrix *B, double beta, void *out);

#endif
