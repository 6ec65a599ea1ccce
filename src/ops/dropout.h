/* ops/dropout.h - the dropout family: forward (mask drawn from a
 * generator), backward and the node-recording entry point.
 * Conventions: ops/op_util.h. */
#ifndef DL_OPS_DROPOUT_H
#define DL_OPS_DROPOUT_H

#include "core/rng.h"
#include "core/tensor.h"

#include <stdbool.h>

/* --- dropout ---------------------------------------------------------------------------- */

/* training: *mask = bernoulli(1 - p) (bool, x's shape, drawn from g or the
 * default generator, so dl_manual_seed reproduces it) and
 * *out = x * mask / (1 - p) (zeros when p == 1; p == 0 still draws its
 * all-true mask).  Not training: *out is x itself (a new reference) and
 * *mask is NULL.  p must lie in [0, 1]; mask may be NULL when not wanted. */
int dl_dropout_forward(dl_tensor *x, double p, bool training, dl_generator *g, dl_tensor **out,
                       dl_tensor **mask);
/* gx = gy * mask / (1 - p); mask NULL (evaluation) gives gy itself. */
dl_tensor *dl_dropout_backward(dl_tensor *gy, dl_tensor *mask, double p);

/* Recording a node when training and x requires grad; out (and *mask when
 * mask is not NULL) as dl_dropout_forward with the default generator. */
int dl_dropout(dl_tensor *x, double p, bool training, dl_tensor **out, dl_tensor **mask);

#endif
