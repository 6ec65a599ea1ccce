/* kernels/random.h - the kernel interface of the random family
 * (ops/random.c): the distribution parameters and the CUDA table of random
 * fills (cpu/random.h has the CPU twin).
 *
 * Shared by ops/, cpu/ and cuda/; the table's contract is in kernels/cuda.h. */
#ifndef DL_KERNELS_RANDOM_H
#define DL_KERNELS_RANDOM_H

#include "core/tensor.h"

#include <stdbool.h>
#include <stdint.h>

typedef enum {
    DL_RANDOM_UNIFORM,   /* [a, b) */
    DL_RANDOM_NORMAL,    /* mean a, standard deviation b */
    DL_RANDOM_INT,       /* low + [0, range) */
    DL_RANDOM_BERNOULLI, /* 1 with probability a (or probs[i]), else 0 */
    DL_RANDOM_PERM,      /* a permutation of low .. low + n - 1 */
} dl_random_kind;

typedef struct {
    dl_random_kind kind;
    double a, b;
    int64_t low;
    uint64_t range;
    const double *probs; /* bernoulli: n probabilities, or NULL to use a */
} dl_random_params;

typedef struct dl_cuda_random_kernels {
    const char *family;
    /* dl_cpu_random_fill on a contiguous CUDA tensor out (numel n, any dtype).
     * p->probs, when not NULL, is a device pointer to n doubles (row-major).
     * p->kind must not be DL_RANDOM_PERM (sequential: the op builds a
     * permutation on the CPU and copies it). */
    int (*random_fill)(dl_tensor *out, const dl_random_params *p, uint64_t seed, uint64_t base);
} dl_cuda_random_kernels;

extern const dl_cuda_random_kernels *dl_cuda_random;

#endif
