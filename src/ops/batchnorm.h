/* ops/batchnorm.h - the batchnorm family: batch normalization's training
 * and evaluation forwards, its backward, and the node-recording dl_batch_norm.
 * Dispatches to cpu/batchnorm.c or cuda/batchnorm.cu.
 *
 * Dtypes: float32 and float64 compute natively (float16/bfloat16 compute in
 * float32 and round back once); the parameters and running statistics share
 * x's dtype, or are float32 for a float16/bfloat16 x.  Training updates the
 * running statistics in place, as PyTorch does.  Conventions: ops/op_util.h. */
#ifndef DL_OPS_BATCHNORM_H
#define DL_OPS_BATCHNORM_H

#include "core/tensor.h"

#include <stdbool.h>

/* --- batch_norm ----------------------------------------------------------------
 * x is (N,C), (N,C,L) or (N,C,H,W); weight, bias, running_mean, running_var,
 * save_mean, save_invstd are (C).  weight/bias NULL mean 1 and 0. */

typedef struct dl_batch_norm_params {
    double momentum; /* running = (1 - m) * running + m * batch statistic */
    /* PyTorch's momentum=None: a cumulative average, m = 1/num_batches_tracked
     * (the count including this batch, >= 1); momentum is then ignored. */
    bool cumulative;
    int64_t num_batches_tracked;
    double eps; /* >= 0 */
} dl_batch_norm_params;

/* momentum 0.1, eps 1e-5, not cumulative */
dl_batch_norm_params dl_batch_norm_default_params(void);

/* Training: normalises with the batch's statistics over (N, spatial).
 * Outputs y (like x), save_mean and save_invstd = 1/sqrt(biased var + eps)
 * (x's dtype; float32 for a float16/bfloat16 x).  running_mean/running_var,
 * when given, are updated in place (running_var with the unbiased variance).
 * A single value per channel (N*spatial == 1) is an error, as in PyTorch; an
 * empty batch passes through (y empty, running stats untouched, save_mean 0
 * and save_invstd 1/sqrt(eps)). */
int dl_batch_norm_forward_train(dl_tensor *x, dl_tensor *weight, dl_tensor *bias,
                                dl_tensor *running_mean, dl_tensor *running_var,
                                const dl_batch_norm_params *p, dl_tensor **y, dl_tensor **save_mean,
                                dl_tensor **save_invstd);

/* Evaluation: y = (x - running_mean) / sqrt(running_var + eps) * weight + bias. */
dl_tensor *dl_batch_norm_forward_eval(dl_tensor *x, dl_tensor *weight, dl_tensor *bias,
                                      dl_tensor *running_mean, dl_tensor *running_var, double eps);

/* Gradients given gy (like x).  training: the batch-statistics formula with
 * save_mean/save_invstd from the training forward (running stats unused, may
 * be NULL); otherwise the running-statistics one (save_* unused, may be NULL).
 * gx like x; gweight, gbias (C) (computed even when weight is NULL). */
int dl_batch_norm_backward(dl_tensor *gy, dl_tensor *x, dl_tensor *weight, dl_tensor *running_mean,
                           dl_tensor *running_var, dl_tensor *save_mean, dl_tensor *save_invstd,
                           bool training, double eps, const bool need[3], dl_tensor **gx,
                           dl_tensor **gweight, dl_tensor **gbias);

/* Records a node when an input requires grad.  training: batch statistics,
 * running stats (when given) updated in place with p->momentum; otherwise the
 * running statistics. */
dl_tensor *dl_batch_norm(dl_tensor *x, dl_tensor *weight, dl_tensor *bias, dl_tensor *running_mean,
                         dl_tensor *running_var, bool training, const dl_batch_norm_params *p);

/* --- batch_norm_relu, batch_norm_add_relu -----------------------------------------------
 * y = relu(batch_norm(x) + residual) in one pass (residual NULL:
 * batch_norm_relu), equal to the unfused ops to float rounding: batch norm's
 * output rounded to x's dtype, the residual added, then relu (NaN kept).
 * residual is like x (any strides).  The forward returns batch norm's outputs
 * (save_* NULL in evaluation), the ReLU mask (an opaque uint8 vector, NULL
 * unless keep_mask) and *impl, the implementation that wrote it
 * (kernels/batchnorm.h, dl_bn_impl); the backward takes both back, with the
 * forward's y (read by DL_BN_IMPL_CUDNN only; NULL otherwise), mean and stat
 * the statistics the forward used (training: save_mean, save_invstd; else
 * running_mean, running_var), and need[] for x, weight, bias, residual. */
int dl_batch_norm_relu_forward(dl_tensor *x, dl_tensor *residual, dl_tensor *weight,
                               dl_tensor *bias, dl_tensor *running_mean, dl_tensor *running_var,
                               bool training, const dl_batch_norm_params *p, bool keep_mask,
                               dl_tensor **y, dl_tensor **save_mean, dl_tensor **save_invstd,
                               dl_tensor **mask, int *impl);

int dl_batch_norm_relu_backward(dl_tensor *gy, dl_tensor *x, dl_tensor *y, dl_tensor *weight,
                                dl_tensor *bias, dl_tensor *mean, dl_tensor *stat, dl_tensor *mask,
                                int impl, bool residual, bool training, double eps,
                                const bool need[4], dl_tensor **gx, dl_tensor **gweight,
                                dl_tensor **gbias, dl_tensor **gresidual);

/* One node (inputs x, weight, bias, residual) when an input requires grad;
 * the running statistics are updated as dl_batch_norm's. */
dl_tensor *dl_batch_norm_relu(dl_tensor *x, dl_tensor *residual, dl_tensor *weight, dl_tensor *bias,
                              dl_tensor *running_mean, dl_tensor *running_var, bool training,
                              const dl_batch_norm_params *p);

/* The CUDA training implementation (kernels/batchnorm.h, dl_bn_impl):
 * "auto", "native" or "cudnn"; DLUA_BN_IMPL sets it at start-up.  set:
 * 0, or -1 with an error for another name. */
const char *dl_batch_norm_impl_get(void);
int dl_batch_norm_impl_set(const char *name);

#endif
