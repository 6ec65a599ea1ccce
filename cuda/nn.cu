// nn.cu - CUDA kernels of the nn family (see src/ops/cuda_nn.h).
#include "common.cuh"

extern "C" {
#include "ops/cuda_nn.h"
}

extern const dl_cuda_nn_kernels dl_cuda_nn_table;
const dl_cuda_nn_kernels dl_cuda_nn_table = {
    "nn",
};
