/* cpu/activation.h - CPU kernels of the activation backward passes:
 * elementwise loops over strided tensors (dl_iter_foreach), so no operand
 * needs to be contiguous.  The ops layer (src/ops/activation.c) has checked
 * shapes and dtypes: every tensor is on the CPU and has out's shape; out and
 * the data operands share one floating dtype (float32, float64, float16,
 * bfloat16; half types compute in float32 and round per element).  Also
 * conv's fused bias-add-ReLU over planes (dl_cpu_bias_add_relu_planes), a
 * loop compiled with these kernels' flags. */
#ifndef DL_CPU_ACTIVATION_H
#define DL_CPU_ACTIVATION_H

#include "core/tensor.h"
#include "kernels/elementwise.h"

#include <stdbool.h>

/* gx = (y <= threshold) ? 0 : gy  (NaN in y passes gy through, as PyTorch's
 * threshold_backward).  gx, gy, y share a floating dtype. */
void dl_cpu_threshold_backward(dl_tensor *gx, dl_tensor *gy, dl_tensor *y, double threshold);

/* gx = gy * op'(s), PyTorch's formulas: op is DL_UNARY_GELU, _GELU_TANH or
 * _SILU with s their input, or _SIGMOID or _TANH with s their result.
 * gx, gy, s share a floating dtype. */
void dl_cpu_act_backward(dl_unary_op op, dl_tensor *gx, dl_tensor *gy, dl_tensor *s);

/* y = relu?(y + b[o] + a) in place over N*O contiguous float32 planes of S
 * elements (plane n*O + o takes b[o]); b and a may be NULL.  The sums in that
 * order, NaN kept by the ReLU: the values of oneDNN's bias followed by
 * a separate add and ReLU. */
void dl_cpu_bias_add_relu_planes(float *y, const float *b, const float *a, int64_t N, int64_t O,
                                 int64_t S, bool relu);

#endif
