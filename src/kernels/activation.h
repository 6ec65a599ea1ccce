/* kernels/activation.h - the kernel interface of the activation family
 * (ops/activation.c): the CUDA table of the activations' backwards
 * (cpu/activation.h has the CPU twins).
 *
 * Shared by ops/, cpu/ and cuda/; the table's contract is in kernels/cuda.h. */
#ifndef DL_KERNELS_ACTIVATION_H
#define DL_KERNELS_ACTIVATION_H

#include "core/tensor.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct dl_cuda_activation_kernels {
    const char *family;
    /* dl_cpu_threshold_backward: gx = (y <= threshold) ? 0 : gy. */
    int (*threshold_backward)(dl_tensor *gx, dl_tensor *gy, dl_tensor *y, double threshold);
} dl_cuda_activation_kernels;

extern const dl_cuda_activation_kernels *dl_cuda_activation;

#endif
