// philox.cuh - Philox4x32-10 on the device, the twin of dl_philox4x32
// (src/core/rng.c), and its 24-bit unit float: the CUDA files that draw
// random numbers (random.cu, attention.cu's dropout) get the very words the
// CPU gets for a (seed, counter) pair.  Included by cuda/*.cu only.
#pragma once

#include <stdint.h>

// One Philox4x32-10 block: 4 random 32-bit words for (key = seed, counter).
__device__ inline void dl_philox(uint64_t seed, uint64_t counter, uint32_t out[4]) {
    const uint32_t M0 = 0xD2511F53u, M1 = 0xCD9E8D57u, W0 = 0x9E3779B9u, W1 = 0xBB67AE85u;
    uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
    uint32_t c0 = (uint32_t)counter, c1 = (uint32_t)(counter >> 32), c2 = 0, c3 = 0;
    for (int r = 0; r < 10; r++) {
        uint32_t hi0 = __umulhi(M0, c0), lo0 = M0 * c0;
        uint32_t hi1 = __umulhi(M1, c2), lo1 = M1 * c2;
        uint32_t n0 = hi1 ^ c1 ^ k0, n2 = hi0 ^ c3 ^ k1;
        c0 = n0;
        c1 = lo1;
        c2 = n2;
        c3 = lo0;
        k0 += W0;
        k1 += W1;
    }
    out[0] = c0;
    out[1] = c1;
    out[2] = c2;
    out[3] = c3;
}

// 24 bits -> [0, 1): exact in float (dl_u32_to_unit_float).
__device__ inline float dl_unit_float(uint32_t x) {
    return __fmul_rn((float)(x >> 8), 1.0f / 16777216.0f);
}
