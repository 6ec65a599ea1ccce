/* ops/activation.h - the activation family: the backwards of activations
 * whose forwards are elementwise unary ops (ops/elementwise.h).
 * Conventions: ops/op_util.h. */
#ifndef DL_OPS_ACTIVATION_H
#define DL_OPS_ACTIVATION_H

#include "core/tensor.h"

/* --- relu_backward -------------------------------------------------------------------------------
 */

/* relu's backward from its output: gx = (y > 0) ? gy : 0 (threshold_backward). */
dl_tensor *dl_relu_backward(dl_tensor *gy, dl_tensor *y);

#endif
