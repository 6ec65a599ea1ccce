/* kernels/layernorm.h - the kernel interface of the layernorm family
 * (ops/layernorm.c): layer norm and RMS norm over the trailing dims of a
 * tensor, seen as a (rows, cols) matrix normalised row by row; the shape and
 * the CUDA table (cpu/layernorm.h has the CPU twins).
 * Shared by ops/, cpu/ and cuda/; the table's contract is in kernels/cuda.h.
 *
 * Buffers:
 *  - dt is the dtype of x, y, gx, gy, all contiguous (rows, cols): F32 or F64
 *    on the CPU, also F16 and BF16 on CUDA (computed in float32).
 *  - w, b, gw, gb are contiguous (cols); mean and rstd contiguous (rows); all
 *    of the compute dtype: F64 for F64 data, F32 otherwise.
 *  - rms: RMS norm, y = x * rstd * w with rstd = 1/sqrt(mean(x^2) + eps);
 *    mean is then unused (NULL).  Otherwise layer norm,
 *    y = (x - mean) * rstd * w + b with rstd = 1/sqrt(biased var + eps).
 *  - w is never NULL (the op layer passes ones for an absent weight); b
 *    may be NULL (0); gx, gw, gb may each be NULL (not needed).
 *  - rows >= 1 and cols >= 1 (the op layer skips empty work). */
#ifndef DL_KERNELS_LAYERNORM_H
#define DL_KERNELS_LAYERNORM_H

#include "core/dtype.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct dl_ln_shape {
    int64_t rows, cols;
} dl_ln_shape;

typedef struct dl_cuda_layernorm_kernels {
    const char *family;
    /* y, mean (NULL when rms), rstd from x, w, b. */
    int (*forward)(dl_dtype dt, const dl_ln_shape *s, double eps, bool rms, void *y, void *mean,
                   void *rstd, const void *x, const void *w, const void *b);
    /* gx, gw, gb (each may be NULL) from gy, x, the saved mean (NULL when rms)
     * and rstd, and w; gb is unused when rms. */
    int (*backward)(dl_dtype dt, const dl_ln_shape *s, bool rms, void *gx, void *gw, void *gb,
                    const void *gy, const void *x, const void *mean, const void *rstd,
                    const void *w);
} dl_cuda_layernorm_kernels;

extern const dl_cuda_layernorm_kernels *dl_cuda_layernorm;

#endif
