// linalg.cu - CUDA kernels of the linalg family (see src/ops/cuda_linalg.h).
#include "common.cuh"

extern "C" {
#include "ops/cuda_linalg.h"
}

extern const dl_cuda_linalg_kernels dl_cuda_linalg_table;
const dl_cuda_linalg_kernels dl_cuda_linalg_table = {
    "linalg",
};
