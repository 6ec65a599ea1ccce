/* cuda_elementwise.h - the CUDA kernels of the elementwise family (src/ops/elementwise.c), activation helpers,
 * dropout masks, random fills (src/ops/random.c) and fused optimizer steps.
 * The table is filled in by cuda/elementwise.cu; see cuda_backend.h for the contract
 * (entry points mirror their CPU twins and return 0 or -1 with an error). */
#ifndef DL_OPS_CUDA_ELEMENTWISE_H
#define DL_OPS_CUDA_ELEMENTWISE_H

#include "cuda_backend.h"

typedef struct dl_cuda_elementwise_kernels {
    const char *family;
} dl_cuda_elementwise_kernels;

#endif
