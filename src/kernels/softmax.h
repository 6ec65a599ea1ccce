/* kernels/softmax.h - the kernel interface of the softmax family
 * (ops/softmax.c): the CUDA table of softmax and log_softmax over (outer, D,
 * inner) buffers (cpu/softmax.h has the CPU twins).
 *
 * Shared by ops/, cpu/ and cuda/; the table's contract is in kernels/cuda.h. */
#ifndef DL_KERNELS_SOFTMAX_H
#define DL_KERNELS_SOFTMAX_H

#include "core/dtype.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct dl_cuda_softmax_kernels {
    const char *family;
    int (*softmax)(void *y, const void *x, dl_dtype dt, int64_t outer, int64_t D, int64_t inner,
                   bool is_log);
    int (*softmax_backward)(void *gx, const void *gy, const void *y, dl_dtype dt, int64_t outer,
                            int64_t D, int64_t inner, bool is_log);
} dl_cuda_softmax_kernels;

extern const dl_cuda_softmax_kernels *dl_cuda_softmax;

#endif
