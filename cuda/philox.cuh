// philox.cuh - random words on the device: dl_philox4x32_10 of
// src/core/philox.h (one definition for both backends, so the CUDA files that
// draw random numbers - random.cu, attention.cu's dropout - get the very words
// the CPU gets for a (seed, counter) pair) and its 24-bit unit float.
// Included by cuda/*.cu only.
#pragma once

#include <stdint.h>

#include "core/philox.h"

// 24 bits -> [0, 1): exact in float (dl_u32_to_unit_float).
__device__ inline float dl_unit_float(uint32_t x) {
    return __fmul_rn((float)(x >> 8), 1.0f / 16777216.0f);
}
