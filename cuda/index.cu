// index.cu - CUDA kernels of the index family (see src/ops/cuda_index.h).
#include "common.cuh"

extern "C" {
#include "ops/cuda_index.h"
}

extern const dl_cuda_index_kernels dl_cuda_index_table;
const dl_cuda_index_kernels dl_cuda_index_table = {
    "index",
};
