/* ops/activation.h - the activation family: the backwards of activations
 * whose forwards are elementwise unary ops (ops/elementwise.h).
 * Conventions: ops/op_util.h. */
#ifndef DL_OPS_ACTIVATION_H
#define DL_OPS_ACTIVATION_H

#include "core/tensor.h"
#include "kernels/elementwise.h"

/* --- relu_backward -------------------------------------------------------------------------------
 */

/* relu's backward from its output: gx = (y > 0) ? gy : 0 (threshold_backward). */
dl_tensor *dl_relu_backward(dl_tensor *gy, dl_tensor *y);

/* The backward of GELU (both forms), SiLU, sigmoid or tanh in one pass:
 * gx = gy * op'(s), s the op's input (GELU, SiLU) or its result (sigmoid,
 * tanh); PyTorch's formulas.  gx has s's dtype; CPU tensors only (CUDA
 * composes the backward from elementwise ops). */
dl_tensor *dl_act_backward(dl_unary_op op, dl_tensor *gy, dl_tensor *s);

#endif
