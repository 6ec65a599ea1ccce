/* cuda_nn.h - the CUDA kernels of the batch normalization and pooling (src/ops/nn_conv.c).
 * The table is filled in by cuda/nn.cu and cuda/pool.cu; see cuda_backend.h for the
 * contract (entry points mirror their CPU twins and return 0 or -1 with an error).
 *
 * Batch norm (mirrors cpu/batchnorm.h, plus a layout and mixed precision):
 *  - dt is the dtype of x, y, gx, gy: F32, F64, F16 or BF16.  The per-channel
 *    vectors (w, b, mean, var, gw, gb) are F64 when dt is F64 and F32
 *    otherwise (a half input keeps float32 parameters and statistics).
 *  - channels_last false: x, y, gx, gy are contiguous (N,C,S); true: they are
 *    contiguous (N,S,C) (C fastest).  Vectors are contiguous (C).
 *  - w and b may be NULL (1 and 0); gx, gw, gb may each be NULL.
 *  - s->N * s->S >= 1 and s->C >= 1 (the op layer skips empty work).
 * Pooling (mirrors cpu/pool.h): F32 and F64 only (the op layer computes half
 * inputs in float32, as on the CPU); buffers contiguous (P,H,W)/(P,OH,OW). */
#ifndef DL_OPS_CUDA_NN_H
#define DL_OPS_CUDA_NN_H

#include "cpu/batchnorm.h"
#include "cpu/pool.h"
#include "cuda_backend.h"

typedef struct dl_cuda_nn_kernels {
    const char *family;

    /* --- batch norm ---------------------------------------------------------------- */
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

    /* --- pooling ------------------------------------------------------------------- */
    int (*max_pool2d_forward)(dl_dtype dt, const dl_pool2d_shape *s, void *y, int64_t *ind,
                              const void *x);
    /* An index outside [0, HW) is an error, as on the CPU (this one waits for
     * the device to learn whether there was one). */
    int (*pool2d_scatter_backward)(dl_dtype dt, int64_t P, int64_t HW, int64_t OHW, void *gx,
                                   const void *gy, const int64_t *ind);
    int (*avg_pool2d_forward)(dl_dtype dt, const dl_pool2d_shape *s, void *y, const void *x);
    int (*avg_pool2d_backward)(dl_dtype dt, const dl_pool2d_shape *s, void *gx, const void *gy);
    int (*adaptive_avg_pool2d_forward)(dl_dtype dt, const dl_pool2d_shape *s, void *y,
                                       const void *x);
    int (*adaptive_avg_pool2d_backward)(dl_dtype dt, const dl_pool2d_shape *s, void *gx,
                                        const void *gy);
    int (*adaptive_max_pool2d_forward)(dl_dtype dt, const dl_pool2d_shape *s, void *y, int64_t *ind,
                                       const void *x);
} dl_cuda_nn_kernels;

#endif
