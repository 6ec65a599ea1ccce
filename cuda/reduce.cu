// reduce.cu - CUDA kernels of the reduce family (see src/ops/cuda_reduce.h).
#include "common.cuh"

extern "C" {
#include "ops/cuda_reduce.h"
}

extern const dl_cuda_reduce_kernels dl_cuda_reduce_table;
const dl_cuda_reduce_kernels dl_cuda_reduce_table = {
    "reduce",
};
