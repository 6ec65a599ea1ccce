/* cuda_index.h - the CUDA kernels of the indexing family (src/ops/index.c): index_select/add, gather,
 * scatter, sort/topk, masked ops, nonzero, one_hot, triangles; and padding.
 * The table is filled in by cuda/index.cu; see cuda_backend.h for the contract
 * (entry points mirror their CPU twins and return 0 or -1 with an error). */
#ifndef DL_OPS_CUDA_INDEX_H
#define DL_OPS_CUDA_INDEX_H

#include "cuda_backend.h"

typedef struct dl_cuda_index_kernels {
    const char *family;
} dl_cuda_index_kernels;

#endif
