// index.cuh - what the index family's CUDA files (index.cu, sort.cu) and
// pad.cu share: a tensor's per-dim shape and strides passed by value to
// kernels, the row-major offset through them, and a dispatch on element size.
// C++; included by cuda/index.cu, cuda/sort.cu and cuda/pad.cu only.
#pragma once

#include "common.cuh"

namespace dl_idx {

constexpr int kThreads = 256;

// Shape and strides (in elements) per dim, not merged.
struct Dims {
    int nd;
    int64_t shape[DL_MAX_DIMS];
    int64_t strides[DL_MAX_DIMS];
};

// Element offset of row-major position i of d's shape.
__device__ inline int64_t dims_offset(const Dims &d, int64_t i) {
    int64_t off = 0;
    for (int k = d.nd - 1; k >= 0; k--) {
        int64_t q = i / d.shape[k];
        off += (i - q * d.shape[k]) * d.strides[k];
        i = q;
    }
    return off;
}

// Calls f with a value of the unsigned integer type that moves one element
// of `size` bytes (1, 2, 4 or 8), so one kernel serves every dtype.
template <typename F> inline void by_size(size_t size, F f) {
    switch (size) {
    case 1: f(uint8_t{}); break;
    case 2: f(uint16_t{}); break;
    case 4: f(uint32_t{}); break;
    default: f(uint64_t{}); break;
    }
}

} // namespace dl_idx
