// backend.cu - hands the kernel families' tables to the op layer (called by
// dl_cuda_init once a GPU has been found).  Each table is defined beside its
// kernels, in cuda/<family>.cu.
extern "C" {
#include "ops/cuda_backend.h"
#include "ops/cuda_elementwise.h"
#include "ops/cuda_index.h"
#include "ops/cuda_linalg.h"
#include "ops/cuda_nn.h"
#include "ops/cuda_random.h"
#include "ops/cuda_reduce.h"
}

extern const dl_cuda_elementwise_kernels dl_cuda_elementwise_table;
extern const dl_cuda_reduce_kernels dl_cuda_reduce_table;
extern const dl_cuda_index_kernels dl_cuda_index_table;
extern const dl_cuda_linalg_kernels dl_cuda_linalg_table;
extern const dl_cuda_nn_kernels dl_cuda_nn_table;
extern const dl_cuda_random_kernels dl_cuda_random_table;

void dl_cuda_register_kernels(void) {
    dl_cuda_ew = &dl_cuda_elementwise_table;
    dl_cuda_red = &dl_cuda_reduce_table;
    dl_cuda_idx = &dl_cuda_index_table;
    dl_cuda_la = &dl_cuda_linalg_table;
    dl_cuda_nn = &dl_cuda_nn_table;
    dl_cuda_rnd = &dl_cuda_random_table;
}
