/* cuda_reduce.h - the CUDA kernels of the reductions and scans (src/ops/reduce.c), softmax and the losses
 * (src/ops/nn_func.c).
 * The table is filled in by cuda/reduce.cu; see cuda_backend.h for the contract
 * (entry points mirror their CPU twins and return 0 or -1 with an error). */
#ifndef DL_OPS_CUDA_REDUCE_H
#define DL_OPS_CUDA_REDUCE_H

#include "cuda_backend.h"

typedef struct dl_cuda_reduce_kernels {
    const char *family;
} dl_cuda_reduce_kernels;

#endif
