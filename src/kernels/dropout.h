/* kernels/dropout.h - the kernel interface of the dropout family
 * (ops/dropout.c): the CUDA table of dropout's mask-and-scale kernel
 * (dl_cpu_mask_scale, cpu/dropout.h, is the CPU twin).
 *
 * Shared by ops/, cpu/ and cuda/; the table's contract is in kernels/cuda.h. */
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

extern const dl_cuda_dropout_kernels *dl_cuda_dropout;

#endif
