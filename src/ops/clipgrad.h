/* ops/clipgrad.h - the clipgrad family: gradient clipping over a list of
 * tensors in one pass (PyTorch's torch.nn.utils.clip_grad_norm_,
 * get_total_norm, clip_grads_with_norm_ and clip_grad_value_).  Dispatches to
 * cpu/clipgrad.c or cuda/clipgrad.cu.
 *
 * The tensors (typically gradients) are floating, any layout, all on one
 * device; NULL entries are skipped.  Nothing here records autograd: the
 * tensors are changed in place (their versions bumped), as under PyTorch's
 * no_grad.  On CUDA nothing waits for the device: the total norm stays a
 * device scalar and the scaling reads it there.
 * Conventions: ops/op_util.h. */
#ifndef DL_OPS_CLIPGRAD_H
#define DL_OPS_CLIPGRAD_H

#include "core/tensor.h"

/* The norm_type-norm of all elements of the n tensors together (norm_type
 * > 0, 0 or +-inf), a 0-dim tensor on their device of their promoted dtype;
 * 0 (float32, CPU) when there are none. */
dl_tensor *dl_grads_total_norm(int n, dl_tensor *const *ts, double norm_type);

/* Scales every tensor in place by min(max_norm / (total_norm + 1e-6), 1)
 * (PyTorch's coefficient, in total_norm's precision); total_norm is a 0-dim
 * floating tensor (moved to the tensors' device when it is elsewhere). */
int dl_grads_scale_by_norm_(int n, dl_tensor *const *ts, dl_tensor *total_norm, double max_norm);

/* Clamps every tensor in place to [-clip_value, clip_value]. */
int dl_grads_clamp_(int n, dl_tensor *const *ts, double clip_value);

#endif
