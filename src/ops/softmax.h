/* ops/softmax.h - the softmax family: softmax and log_softmax along a dim
 * (0-based, negatives from the end), forward, backward and the
 * node-recording entry points.  Floating inputs only; float16/bfloat16
 * compute in float32 and round back; inputs may be any strided view, 0-dim
 * or empty.
 * Conventions: ops/op_util.h. */
#ifndef DL_OPS_SOFTMAX_H
#define DL_OPS_SOFTMAX_H

#include "core/tensor.h"

/* --- softmax ---------------------------------------------------------------------------- */

/* softmax / log_softmax along dim, numerically stable (the max is subtracted). */
dl_tensor *dl_softmax_forward(dl_tensor *x, int dim);
dl_tensor *dl_log_softmax_forward(dl_tensor *x, int dim);
/* Backward from the forward's output y (gy and y of one shape):
 * softmax: gx = y * (gy - sum(gy * y, dim)); log_softmax: gx = gy - exp(y) * sum(gy, dim). */
dl_tensor *dl_softmax_backward(dl_tensor *gy, dl_tensor *y, int dim);
dl_tensor *dl_log_softmax_backward(dl_tensor *gy, dl_tensor *y, int dim);

/* Recording a node when x requires grad; the backward reads the output. */
dl_tensor *dl_softmax(dl_tensor *x, int dim);
dl_tensor *dl_log_softmax(dl_tensor *x, int dim);

#endif
