/* kernels/softmax.h - the kernel interface of the softmax family
 * (ops/softmax.c): the (outer, D, inner) shape, the kernels' one signature
 * and the CUDA table of softmax and log_softmax (cpu/softmax.h has the CPU
 * twins).
 *
 * Shared by ops/, cpu/ and cuda/; the table's contract is in kernels/cuda.h. */
#ifndef DL_KERNELS_SOFTMAX_H
#define DL_KERNELS_SOFTMAX_H

#include "core/dtype.h"

#include <stdbool.h>
#include <stdint.h>

/* softmax (or log_softmax, log) along D of a dense buffer viewed as (outer,
 * D, inner): element (o, d, i) is at (o*D + d)*inner + i. */
typedef struct dl_softmax_shape {
    int64_t outer, D, inner;
    bool log;
} dl_softmax_shape;

/* The kernels' signatures, one for both backends (cpu/softmax.h, the table
 * below; host pointers on the CPU, device pointers on the current CUDA
 * device): dt is F32 or F64, on the CPU also F16 or BF16 (computed in
 * float32, rounded once per element).
 *   forward:  y = softmax(x) or log_softmax(x); y and x are (outer,D,inner),
 *             y may alias x.
 *   backward from the forward's output y:
 *             softmax:     gx = y * (gy - sum_d(gy * y))
 *             log_softmax: gx = gy - exp(y) * sum_d(gy)
 *             gx, gy, y are (outer,D,inner); gx may alias gy. */
typedef int (*dl_softmax_fn)(dl_dtype dt, const dl_softmax_shape *s, void *y, const void *x);
typedef int (*dl_softmax_backward_fn)(dl_dtype dt, const dl_softmax_shape *s, void *gx,
                                      const void *gy, const void *y);

typedef struct dl_cuda_softmax_kernels {
    const char *family;
    dl_softmax_fn softmax;
    dl_softmax_backward_fn softmax_backward;
} dl_cuda_softmax_kernels;

extern const dl_cuda_softmax_kernels *dl_cuda_softmax;

#endif
