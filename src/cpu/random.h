/* random.h - CPU kernels of the random op family: fills of a contiguous
 * buffer from the counter-based Philox4x32-10 stream (seed, base).
 *
 * Which counter block and which 32-bit lanes element i of an n-element fill
 * uses (so that any thread count, and the CUDA backend, give the same values):
 *  - 32-bit draws (uniform and bernoulli in float32/float16/bfloat16, bernoulli
 *    of any dtype): block base + i/4, lane i%4.
 *  - normal in float32/float16/bfloat16: Box-Muller on the pair of elements
 *    (2k, 2k+1): block base + i/4; the pair uses lanes 0,1 (i%4 < 2) or 2,3;
 *    the even element is r*cos(theta), the odd one r*sin(theta), with
 *    r = sqrt(-2 ln(1 - u(lane 0|2))) and theta = 2*pi*u(lane 1|3).
 *  - 64-bit draws (uniform in float64, integers, randperm): block base + i/2,
 *    lanes 2*(i%2) (high word) and 2*(i%2)+1 (low word).
 *  - normal in float64: the pair (2k, 2k+1) uses block base + k, u1 from
 *    lanes 0,1 and u2 from lanes 2,3 as 53-bit doubles; cos for the even
 *    element, sin for the odd one.
 * dl_cpu_random_blocks gives the number of blocks a fill consumes; the caller
 * reserves them from the generator first. */
#ifndef DL_CPU_RANDOM_H
#define DL_CPU_RANDOM_H

#include "kernels/random.h"
#include "core/dtype.h"

#include <stdint.h>

uint64_t dl_cpu_random_blocks(const dl_random_params *p, dl_dtype dtype, int64_t n);
/* out is (n,) contiguous of dtype.  The parameters were checked by the op
 * (bounds fit the dtype, a <= b, probabilities in [0, 1]).  Returns 0, or -1
 * with an error when randperm cannot get its scratch memory. */
int dl_cpu_random_fill(void *out, dl_dtype dtype, int64_t n, const dl_random_params *p,
                       uint64_t seed, uint64_t base);

#endif
