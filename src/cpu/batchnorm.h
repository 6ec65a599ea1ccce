/* batchnorm.h - CPU batch-normalization kernels, forward (training and
 * evaluation) and backward.
 *
 * Both dtypes run OpenMP loops, float32 with its sums in double.  All buffers
 * are dense and of one dtype (F32 or F64): x, y, gx, gy are (N,C,S), with S
 * the product of the spatial sizes (1 for (N,C) input), or with cl
 * (channels-last) (N,S,C); the per-channel vectors are (C).  w (scale) and b
 * (shift) may be NULL (1 and 0).  Sizes were validated by the op layer
 * (src/ops/batchnorm.c): N*S >= 1 and C >= 1.  Both layouts use the same
 * per-element formulas; only the order of the per-channel sums differs. */
#ifndef DL_CPU_BATCHNORM_H
#define DL_CPU_BATCHNORM_H

#include "kernels/batchnorm.h"
#include "core/dtype.h"

#include <stdbool.h>
#include <stdint.h>

/* Training forward: mean and var (biased, over N and S) of each channel of x,
 * y = (x - mean) / sqrt(var + eps) * w + b.
 * y and x are (N,C,S) (cl: (N,S,C)), mean and var are (C), w and b are (C)
 * or NULL. */
int dl_cpu_batch_norm_forward_train(dl_dtype dt, bool cl, const dl_bn_shape *s, double eps, void *y,
                                    void *mean, void *var, const void *x, const void *w,
                                    const void *b);

/* Evaluation forward with given statistics (mean, var are (C)). */
int dl_cpu_batch_norm_forward_eval(dl_dtype dt, bool cl, const dl_bn_shape *s, double eps, void *y,
                                   const void *x, const void *mean, const void *var, const void *w,
                                   const void *b);

/* Backward.  training: mean/var are the batch's (from the training forward)
 * and gx follows the batch-statistics formula; otherwise they are fixed
 * (running) statistics.  gx (N,C,S), gw (C), gb (C) may each be NULL.
 * gy and x are (N,C,S) (cl: gx, gy and x are (N,S,C)), w is (C) or NULL. */
int dl_cpu_batch_norm_backward(dl_dtype dt, bool cl, const dl_bn_shape *s, double eps,
                               bool training, void *gx, void *gw, void *gb, const void *gy,
                               const void *x, const void *mean, const void *var, const void *w);

/* The fused ReLU of batch_norm_relu and batch_norm_add_relu (see dl_bn_act
 * in kernels/batchnorm.h; act non-NULL, act->impl ignored): the forward
 * (training, or evaluation with mean and var given) with act->res added
 * before the ReLU and act->mask written when set; the backward through the
 * mask (required), writing act->gres when set. */
int dl_cpu_batch_norm_act_forward(dl_dtype dt, bool cl, const dl_bn_shape *s, double eps,
                                  bool training, void *y, void *mean, void *var, const void *x,
                                  const void *w, const void *b, const dl_bn_act *act);
int dl_cpu_batch_norm_act_backward(dl_dtype dt, bool cl, const dl_bn_shape *s, double eps,
                                   bool training, void *gx, void *gw, void *gb, const void *gy,
                                   const void *x, const void *mean, const void *var, const void *w,
                                   const dl_bn_act *act);

#endif
