/* kernels/dropout.h - the kernel interface of the dropout family
 * (ops/dropout.c): the CUDA table of dropout's mask-and-scale kernel
 * (dl_cpu_mask_scale, cpu/activation.h, is the CPU twin).
 *
 * Included alike by ops/ (which calls the kernels), cpu/ and cuda/ (which
 * implement them); it includes only core headers.  The CUDA table is filled in
 * by cuda/ at start-up (kernels/cuda.h states the contract) and is NULL
 * without a GPU. */
#ifndef DL_KERNELS_DROPOUT_H
#define DL_KERNELS_DROPOUT_H

#include "core/tensor.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct dl_cuda_dropout_kernels {
    const char *family;
    /* dl_cpu_mask_scale: out = x * (mask ? scale : 0); mask is bool. */
    int (*mask_scale)(dl_tensor *out, dl_tensor *x, dl_tensor *mask, double scale);
} dl_cuda_dropout_kernels;

/* Set by the CUDA backend when a GPU is present (cuda/backend.cu); NULL otherwise. */
extern const dl_cuda_dropout_kernels *dl_cuda_dropout;

#endif
