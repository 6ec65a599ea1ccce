// elementwise.cu - CUDA kernels of the elementwise family (see src/ops/cuda_elementwise.h).
#include "common.cuh"

extern "C" {
#include "ops/cuda_elementwise.h"
}

extern const dl_cuda_elementwise_kernels dl_cuda_elementwise_table;
const dl_cuda_elementwise_kernels dl_cuda_elementwise_table = {
    "elementwise",
};
