/* cuda_random.h - the CUDA kernels of random fills (src/ops/random.c), dropout
 * masks and fused optimizer steps.  The table is filled in by cuda/random.cu;
 * see cuda_backend.h for the contract (entry points mirror their CPU twins
 * and return 0 or -1 with an error). */
#ifndef DL_OPS_CUDA_RANDOM_H
#define DL_OPS_CUDA_RANDOM_H

#include "cuda_backend.h"

typedef struct dl_cuda_random_kernels {
    const char *family;
} dl_cuda_random_kernels;

#endif
