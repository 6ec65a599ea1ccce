/* philox.h - Philox4x32-10, written once for the host (dl_philox4x32 of
 * rng.c, which the CPU kernels call) and the device (cuda/random.cu,
 * cuda/attention.cu's dropout), so both backends draw the very same words
 * for a (seed, counter) pair.  The stream layout is in rng.h. */
#ifndef DL_CORE_PHILOX_H
#define DL_CORE_PHILOX_H

#include "core/hostdev.h"

#include <stdint.h>

/* One block: 4 random 32-bit words for (key = seed, counter). */
static inline DL_HD void dl_philox4x32_10(uint64_t seed, uint64_t counter, uint32_t out[4]) {
    const uint32_t M0 = 0xD2511F53u, M1 = 0xCD9E8D57u, W0 = 0x9E3779B9u, W1 = 0xBB67AE85u;
    uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
    uint32_t c0 = (uint32_t)counter, c1 = (uint32_t)(counter >> 32), c2 = 0, c3 = 0;
    for (int r = 0; r < 10; r++) {
        uint64_t p0 = (uint64_t)M0 * c0, p1 = (uint64_t)M1 * c2;
        uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0, n1 = (uint32_t)p1;
        uint32_t n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1, n3 = (uint32_t)p0;
        c0 = n0;
        c1 = n1;
        c2 = n2;
        c3 = n3;
        k0 += W0;
        k1 += W1;
    }
    out[0] = c0;
    out[1] = c1;
    out[2] = c2;
    out[3] = c3;
}

#endif
