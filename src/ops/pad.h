/* ops/pad.h - the pad family: F.pad's modes, forward, backward and the
 * node-recording entry point.
 * Conventions: ops/op_util.h. */
#ifndef DL_OPS_PAD_H
#define DL_OPS_PAD_H

#include "core/tensor.h"

#include <stdint.h>

/* --- pad -------------------------------------------------------------------------------- */

typedef enum { DL_PAD_CONSTANT = 0, DL_PAD_REFLECT, DL_PAD_REPLICATE, DL_PAD_CIRCULAR } dl_pad_mode;

/* "constant", "reflect", "replicate", "circular" -> the enum. */
int dl_pad_mode_parse(const char *op, const char *name, dl_pad_mode *out);

/* F.pad: pads = {before, after} for the last dim, then the one before it, ...
 * (npads even, npads/2 <= ndim; at most 3 dims for the non-constant modes).
 * Negative pads crop.  constant fills with value; reflect mirrors without
 * repeating the edge (each pad < that dim's size); replicate repeats the
 * edge; circular wraps around (pads in [0, size]). */
dl_tensor *dl_pad_forward(dl_tensor *x, int npads, const int64_t *pads, dl_pad_mode mode,
                          double value);
/* gx of the input shape (ndim, shape): the sum of gy over the output
 * positions that read each input element. */
dl_tensor *dl_pad_backward(dl_tensor *gy, int ndim, const int64_t *shape, int npads,
                           const int64_t *pads, dl_pad_mode mode);

/* Recording a node when x requires grad. */
dl_tensor *dl_pad(dl_tensor *x, int npads, const int64_t *pads, dl_pad_mode mode, double value);

#endif
