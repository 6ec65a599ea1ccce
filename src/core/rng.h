/* rng.h - the default generator: Philox4x32-10, counter based, so the CUDA
 * backend can produce the same streams.  A stream is (seed, offset): element i
 * of a fill of 32-bit draws uses counter block offset + i/4, lane i%4 (fills
 * that need 64-bit draws - float64, integers - use block offset + i/2; the
 * full map is in src/cpu/random.h), and the fill then advances the offset
 * past the blocks it used. */
#ifndef DL_RNG_H
#define DL_RNG_H

#include <stdint.h>

typedef struct {
    uint64_t seed;
    uint64_t offset; /* next unused 128-bit counter block */
} dl_generator;

/* The generator random ops use when given none: the calling thread's
 * override when one is set, else the process-wide one.  dl_manual_seed seeds
 * that same generator. */
dl_generator *dl_default_generator(void);
void dl_manual_seed(uint64_t seed);
/* Makes g (NULL: none) this thread's default generator and returns the
 * previous override.  An embedded Lua state (dl_state_*) sets its own
 * generator around each call, so states in one process draw independent,
 * reproducible streams; `dlua` and stock lua5.4 use the process-wide one. */
dl_generator *dl_set_thread_generator(dl_generator *g);
/* The seed every fresh generator starts from (PyTorch's default seed). */
#define DL_DEFAULT_SEED 67280421310721ULL
/* Reserves n blocks of 4 x uint32 and returns the first block's counter. */
uint64_t dl_generator_reserve(dl_generator *g, uint64_t nblocks);
/* One Philox4x32-10 block: 4 random 32-bit words for (key=seed, counter). */
void dl_philox4x32(uint64_t seed, uint64_t counter, uint32_t out[4]);
/* uint32 -> uniform float in [0, 1) with 24 bits, and double in [0, 1) from two words. */
static inline float dl_u32_to_unit_float(uint32_t x) {
    return (float)(x >> 8) * (1.0f / 16777216.0f);
}
static inline double dl_u64_to_unit_double(uint32_t hi, uint32_t lo) {
    return (double)((((uint64_t)hi << 32) | lo) >> 11) * (1.0 / 9007199254740992.0);
}

#endif
