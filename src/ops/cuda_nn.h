/* cuda_nn.h - the CUDA kernels of the batch normalization and pooling (src/ops/nn_conv.c).
 * The table is filled in by cuda/nn.cu; see cuda_backend.h for the contract
 * (entry points mirror their CPU twins and return 0 or -1 with an error). */
#ifndef DL_OPS_CUDA_NN_H
#define DL_OPS_CUDA_NN_H

#include "cuda_backend.h"

typedef struct dl_cuda_nn_kernels {
    const char *family;
} dl_cuda_nn_kernels;

#endif
