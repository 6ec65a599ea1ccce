/* kernels/batchnorm.h - the kernel interface of the batchnorm family
 * (ops/batchnorm.c): the (N,C,S) shape and the CUDA table (cpu/batchnorm.h
 * has the CPU twins).
 * Shared by ops/, cpu/ and cuda/; the table's contract is in kernels/cuda.h.
 *
 * The CUDA table mirrors cpu/batchnorm.h, plus a layout and mixed precision:
 *  - dt is the dtype of x, y, gx, gy: F32, F64, F16 or BF16.  The per-channel
 *    vectors (w, b, mean, var, gw, gb) are F64 when dt is F64 and F32
 *    otherwise (a half input keeps float32 parameters and statistics).
 *  - channels_last false: x, y, gx, gy are contiguous (N,C,S); true: they are
 *    contiguous (N,S,C) (C fastest).  Vectors are contiguous (C).
 *  - w and b may be NULL (1 and 0); gx, gw, gb may each be NULL.
 *  - s->N * s->S >= 1 and s->C >= 1 (the op layer skips empty work). */
#ifndef DL_KERNELS_BATCHNORM_H
#define DL_KERNELS_BATCHNORM_H

#include "core/dtype.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct dl_bn_shape {
    int64_t N, C, S;
} dl_bn_shape;

typedef struct dl_cuda_batchnorm_kernels {
    const char *family;
    int (*batch_norm_forward_train)(dl_dtype dt, bool channels_last, const dl_bn_shape *s,
                                    double eps, void *y, void *mean, void *var, const void *x,
                                    const void *w, const void *b);
    int (*batch_norm_forward_eval)(dl_dtype dt, bool channels_last, const dl_bn_shape *s,
                                   double eps, void *y, const void *x, const void *mean,
                                   const void *var, const void *w, const void *b);
    int (*batch_norm_backward)(dl_dtype dt, bool channels_last, const dl_bn_shape *s, double eps,
                               bool training, void *gx, void *gw, void *gb, const void *gy,
                               const void *x, const void *mean, const void *var, const void *w);
    /* out = (1 - m) * running + m * stat * factor; all F64, contiguous (C). */
    int (*batch_norm_update_running)(int64_t C, double *out, const double *running,
                                     const double *stat, double m, double factor);
    /* out = 1 / sqrt(v + eps) (to_invstd) or 1 / v^2 - eps, computed in double;
     * out and v contiguous (C) of dtype dt (F32 or F64). */
    int (*batch_norm_var_transform)(dl_dtype dt, int64_t C, void *out, const void *v, double eps,
                                    bool to_invstd);
} dl_cuda_batchnorm_kernels;

extern const dl_cuda_batchnorm_kernels *dl_cuda_batchnorm;

#endif
