// random.cu - CUDA kernels of random fills and fused optimizer steps (see
// src/ops/cuda_random.h).
#include "common.cuh"

extern "C" {
#include "ops/cuda_random.h"
}

extern const dl_cuda_random_kernels dl_cuda_random_table;
const dl_cuda_random_kernels dl_cuda_random_table = {
    "random",
};
