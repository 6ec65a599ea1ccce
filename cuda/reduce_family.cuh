// reduce_family.cuh - what the files of the reduce family share (reduce.cu,
// softmax.cu, loss.cu): warp and block reductions and dl_cuda_reduce_acc (which
// loss.cu sums with); each file defines its family's table.  Included by those files only.
//
// Invariants: block helpers are called by every thread of a block whose size
// is a multiple of 32 (at most 1024), from code that is uniform across the
// block; they return the same value to every thread and end with a barrier,
// so their shared memory may be reused at once.
#pragma once

#include "common.cuh"

extern "C" {
#include "kernels/cuda.h"
#include "kernels/loss.h"
#include "kernels/reduce.h"
#include "kernels/softmax.h"
}

#define DL_RED_THREADS 256
#define DL_RED_FULL_MASK 0xffffffffu

// --- warp shuffles for the accumulator types ----------------------------------------------
__device__ inline double dl_shfl_xor(double v, int o) {
    return __shfl_xor_sync(DL_RED_FULL_MASK, v, o);
}
__device__ inline float dl_shfl_xor(float v, int o) {
    return __shfl_xor_sync(DL_RED_FULL_MASK, v, o);
}
__device__ inline unsigned dl_shfl_xor(unsigned v, int o) {
    return __shfl_xor_sync(DL_RED_FULL_MASK, v, o);
}
__device__ inline long long dl_shfl_xor(long long v, int o) {
    return __shfl_xor_sync(DL_RED_FULL_MASK, v, o);
}
__device__ inline unsigned long long dl_shfl_xor(unsigned long long v, int o) {
    return __shfl_xor_sync(DL_RED_FULL_MASK, v, o);
}

// All-reduce of v over the block with f (associative); every thread gets the
// result, combined in one fixed order.
template <typename A, typename F> __device__ A dl_block_allreduce(A v, F f) {
    __shared__ A part[32];
    for (int o = 16; o > 0; o >>= 1) v = f(v, dl_shfl_xor(v, o));
    if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = v;
    __syncthreads();
    A r = part[0];
    for (int w = 1; w < (int)(blockDim.x >> 5); w++) r = f(r, part[w]);
    __syncthreads();
    return r;
}

__device__ inline double dl_add_d(double a, double b) {
    return a + b;
}

// Grid size for a kernel with a grid-stride loop over n items, one block each.
static inline unsigned dl_red_grid(int64_t n) {
    if (n < 1) return 1;
    return n > 65535LL * 32 ? 65535u * 32 : (unsigned)n;
}

// Checks the last launch; frees scratch (may be NULL) on failure.
#define DL_RED_LAUNCHED_FREE(scratch)                                                              \
    do {                                                                                           \
        cudaError_t e_ = cudaGetLastError();                                                       \
        if (e_ != cudaSuccess) {                                                                   \
            dl_cuda_free(scratch);                                                                 \
            return dl_cuda_fail("kernel launch", cudaGetErrorString(e_), __FILE__, __LINE__);      \
        }                                                                                          \
    } while (0)

// --- entry points (reduce.cu) ---------------------------------------------------------------
int dl_cuda_reduce_acc(dl_acc_kind kind, const void *x, dl_dtype dt, const dl_rshape *s, double p,
                       const double *shift, double *out);

// --- entry points (softmax.cu) --------------------------------------------------------------
