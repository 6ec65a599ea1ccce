/* ops/loss.h - the loss family: nll, cross entropy, mse, l1 and binary
 * cross entropy with logits; each a forward, a backward and a node-recording
 * entry point.
 *
 * Conventions (C side, PyTorch 1.13 semantics):
 *  - Dims are 0-based, negatives count from the end.  Class indices in
 *    targets are 0-based int64 (the Lua bindings convert from 1-based labels
 *    and compare ignore_index there); a target that is neither ignore_index
 *    nor in [0, C) is an error, never an out-of-bounds read.
 *  - Class losses take input (C), (N, C) or (N, C, d1, ...) and targets (),
 *    (N) or (N, d1, ...); weight is (C) or NULL.
 *  - Floating inputs only: float32 and float64 compute in their own type;
 *    float16 and bfloat16 compute in float32 and round the results back.
 *    A result has its input's dtype; gradients have the dtype of the tensor
 *    they belong to.
 *  - Inputs may be any strided view, 0-dim or empty (as PyTorch allows).
 *  - A mean over nothing is NaN (0/0), as in PyTorch.
 *  - Returns and errors: ops/op_util.h; outputs passed by pointer are set
 *    to NULL on failure. */
#ifndef DL_OPS_LOSS_H
#define DL_OPS_LOSS_H

#include "core/tensor.h"

#include <stdbool.h>
#include <stdint.h>

typedef enum { DL_REDUCTION_NONE = 0, DL_REDUCTION_MEAN, DL_REDUCTION_SUM } dl_reduction;

/* "none", "mean", "sum" -> the enum; -1 with an error naming op otherwise. */
int dl_reduction_parse(const char *op, const char *name, dl_reduction *out);

/* --- nll_loss --------------------------------------------------------------------------- */

/* loss[i] = -weight[t_i] * logp[i, t_i] (0 where t_i == ignore_index).
 * none: shape of target; sum: their sum; mean: sum / (sum of weight[t_i] over
 * non-ignored i). */
dl_tensor *dl_nll_loss_forward(dl_tensor *logp, dl_tensor *target, dl_tensor *weight,
                               int64_t ignore_index, dl_reduction reduction);
/* gloss: the target's shape (none) or one element (mean, sum).  Returns gx
 * (logp's shape and dtype). */
dl_tensor *dl_nll_loss_backward(dl_tensor *gloss, dl_tensor *logp, dl_tensor *target,
                                dl_tensor *weight, int64_t ignore_index, dl_reduction reduction);

/* --- cross_entropy ---------------------------------------------------------------------- */

/* log_softmax over the class dim (dim 1, or 0 for a (C) input) followed by
 * nll, fused.  target: int64 class indices (as nll_loss), or floating class
 * probabilities of x's shape (ignore_index is then unused; the mean divides
 * by the number of samples, numel / C).  label_smoothing in [0, 1] mixes in
 * the uniform distribution as PyTorch 1.13 does: for class indices
 * (1-e) * nll + e/C * sum_c weight[c] * -logp[c], with the same mean
 * denominator as nll; for probabilities the target becomes (1-e) t + e/C. */
dl_tensor *dl_cross_entropy_forward(dl_tensor *x, dl_tensor *target, dl_tensor *weight,
                                    int64_t ignore_index, dl_reduction reduction,
                                    double label_smoothing);
/* gx = scale * (softmax(x) * ... - smoothed one-hot), see src/cpu/loss.h.
 * *gtarget (when gtarget is not NULL) gets the gradient with respect to a
 * probability target, or NULL for class indices. */
int dl_cross_entropy_backward(dl_tensor *gloss, dl_tensor *x, dl_tensor *target, dl_tensor *weight,
                              int64_t ignore_index, dl_reduction reduction, double label_smoothing,
                              dl_tensor **gx, dl_tensor **gtarget);

/* --- pointwise losses ------------------------------------------------------------------- */

/* (x - y)^2 and |x - y|; x and y broadcast (PyTorch allows it); the result
 * dtype is their promoted type. */
dl_tensor *dl_mse_loss_forward(dl_tensor *x, dl_tensor *y, dl_reduction reduction);
dl_tensor *dl_l1_loss_forward(dl_tensor *x, dl_tensor *y, dl_reduction reduction);
/* gloss: the broadcast shape (none) or one element.  *gx / *gy (either
 * pointer may be NULL) come summed back to x's / y's shape. */
int dl_mse_loss_backward(dl_tensor *gloss, dl_tensor *x, dl_tensor *y, dl_reduction reduction,
                         dl_tensor **gx, dl_tensor **gy);
int dl_l1_loss_backward(dl_tensor *gloss, dl_tensor *x, dl_tensor *y, dl_reduction reduction,
                        dl_tensor **gx, dl_tensor **gy);

/* loss = w * ((1 - y) x + (1 + (pos_weight - 1) y) * log(1 + exp(-x))),
 * computed stably.  y has x's shape; weight and pos_weight (NULL for none)
 * broadcast to it. */
dl_tensor *dl_binary_cross_entropy_with_logits_forward(dl_tensor *x, dl_tensor *y,
                                                       dl_tensor *weight, dl_tensor *pos_weight,
                                                       dl_reduction reduction);
int dl_binary_cross_entropy_with_logits_backward(dl_tensor *gloss, dl_tensor *x, dl_tensor *y,
                                                 dl_tensor *weight, dl_tensor *pos_weight,
                                                 dl_reduction reduction, dl_tensor **gx,
                                                 dl_tensor **gy);

/* Class labels numbered from 1 (the Lua face's) as the 0-based targets the
 * class losses take: a new int64 tensor on target's device, every entry minus
 * one (ignore's too, so equality with ignore - 1 is kept).  A label outside
 * 1..C that is not `ignore` is an error naming it; on CUDA the labels are
 * checked on the device and a bad one is reported at the next
 * synchronisation.  C < 0 skips the range check (the op refuses the input).
 * op must be a string literal. */
dl_tensor *dl_class_labels_to_targets(const char *op, dl_tensor *target, int64_t C, int64_t ignore);

/* --- with autograd ---------------------------------------------------------------
 * Recording a node when an input requires grad; targets are 0-based as
 * above; the backward is the matching *_backward. */
dl_tensor *dl_nll_loss(dl_tensor *logp, dl_tensor *target, dl_tensor *weight, int64_t ignore_index,
                       dl_reduction reduction);
dl_tensor *dl_cross_entropy(dl_tensor *x, dl_tensor *target, dl_tensor *weight,
                            int64_t ignore_index, dl_reduction reduction, double label_smoothing);
dl_tensor *dl_mse_loss(dl_tensor *x, dl_tensor *y, dl_reduction reduction);
dl_tensor *dl_l1_loss(dl_tensor *x, dl_tensor *y, dl_reduction reduction);
dl_tensor *dl_binary_cross_entropy_with_logits(dl_tensor *x, dl_tensor *y, dl_tensor *weight,
                                               dl_tensor *pos_weight, dl_reduction reduction);

#endif
