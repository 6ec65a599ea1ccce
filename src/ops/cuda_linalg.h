/* cuda_linalg.h - the CUDA kernels of the matrix products through cuBLAS (src/ops/linalg.c) and
 * convolutions through cuDNN (src/ops/nn_conv.c).
 * The table is filled in by cuda/linalg.cu; see cuda_backend.h for the contract
 * (entry points mirror their CPU twins and return 0 or -1 with an error). */
#ifndef DL_OPS_CUDA_LINALG_H
#define DL_OPS_CUDA_LINALG_H

#include "cuda_backend.h"

typedef struct dl_cuda_linalg_kernels {
    const char *family;
} dl_cuda_linalg_kernels;

#endif
