/* cpu/activation.h - CPU kernels of the activation backward passes and of
 * dropout's masking: elementwise loops over strided tensors (dl_iter_foreach),
 * so no operand needs to be contiguous.  The ops layer (src/ops/nn_func.c)
 * has checked shapes and dtypes: every tensor is on the CPU and has out's
 * shape; out and the data operands share one floating dtype (float32,
 * float64, float16, bfloat16; half types compute in float32 and round per
 * element). */
#ifndef DL_CPU_ACTIVATION_H
#define DL_CPU_ACTIVATION_H

#include "core/tensor.h"

/* gx = (y <= threshold) ? 0 : gy  (NaN in y passes gy through, as PyTorch's
 * threshold_backward).  gx, gy, y share a floating dtype. */
void dl_cpu_threshold_backward(dl_tensor *gx, dl_tensor *gy, dl_tensor *y, double threshold);

/* out = x * (mask ? scale : 0): a dropped NaN or inf gives NaN, as PyTorch's
 * x * mask * scale.  out and x share a floating dtype; mask is bool. */
void dl_cpu_mask_scale(dl_tensor *out, dl_tensor *x, dl_tensor *mask, double scale);

/* y = relu(y + a), in place (inference fusion of a residual add): NaN stays
 * NaN, as the separate add and ReLU.  float32; a has y's shape. */
void dl_cpu_add_relu_(dl_tensor *y, dl_tensor *a);

#endif
