/* cuda_random.h - the CUDA kernels of random fills (src/ops/random.c), dropout
 * masks (a bernoulli fill of a bool tensor) and fused optimizer steps
 * (src/ops/optim.c).  The table is filled in by cuda/random.cu (fills) and
 * cuda/optim.cu (steps); see cuda_backend.h for the contract (entry points
 * mirror their CPU twins and return 0 or -1 with an error).
 *
 * There is one generator for both devices (src/core/rng.h): the op layer
 * reserves counter blocks from it exactly as for a CPU fill and hands the
 * kernel (seed, base), so a CUDA fill draws the same Philox words as the CPU
 * fill would and leaves the generator in the same state. */
#ifndef DL_OPS_CUDA_RANDOM_H
#define DL_OPS_CUDA_RANDOM_H

#include "cpu/optim.h"
#include "cpu/random.h"
#include "cuda_backend.h"

typedef struct dl_cuda_random_kernels {
    const char *family;
    /* dl_cpu_random_fill on a contiguous CUDA tensor out (numel n, any dtype).
     * p->probs, when not NULL, is a device pointer to n doubles (row-major).
     * p->kind must not be DL_RANDOM_PERM (sequential: the op builds a
     * permutation on the CPU and copies it). */
    int (*random_fill)(dl_tensor *out, const dl_random_params *p, uint64_t seed, uint64_t base);
    /* dl_cpu_sgd_step / dl_cpu_adam_step on n float32 CUDA tensors of one
     * device, each contiguous (see src/cpu/optim.h for the arguments). */
    int (*sgd_step)(int n, const dl_optim_tensors *ts, const dl_sgd_coeffs *c);
    int (*adam_step)(int n, const dl_optim_tensors *ts, const dl_adam_coeffs *c);
} dl_cuda_random_kernels;

#endif
