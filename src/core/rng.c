/* rng.c - Philox4x32-10, the process-wide default generator and the
 * per-thread override embedded states install. */
#include "rng.h"
#include "core/philox.h"

static dl_generator default_gen = {DL_DEFAULT_SEED, 0};
static _Thread_local dl_generator *thread_gen;

dl_generator *dl_default_generator(void) {
    return thread_gen ? thread_gen : &default_gen;
}

dl_generator *dl_set_thread_generator(dl_generator *g) {
    dl_generator *prev = thread_gen;
    thread_gen = g;
    return prev;
}

void dl_manual_seed(uint64_t seed) {
    dl_generator *g = dl_default_generator();
    g->seed = seed;
    g->offset = 0;
}

uint64_t dl_generator_reserve(dl_generator *g, uint64_t nblocks) {
    return __atomic_fetch_add(&g->offset, nblocks, __ATOMIC_RELAXED);
}

void dl_philox4x32(uint64_t seed, uint64_t counter, uint32_t out[4]) {
    dl_philox4x32_10(seed, counter, out);
}
