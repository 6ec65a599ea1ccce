/* views.h - view, copy and conversion ops with autograd: the core's
 * dl_tensor_* functions (which never record) plus a node when an input
 * requires grad.  Dims are 0-based, negatives from the end. */
#ifndef DL_OPS_VIEWS_H
#define DL_OPS_VIEWS_H

#include "core/tensor.h"

dl_tensor *dl_view(dl_tensor *t, int ndim, const int64_t *shape);
dl_tensor *dl_reshape(dl_tensor *t, int ndim, const int64_t *shape);
dl_tensor *dl_transpose(dl_tensor *t, int d0, int d1);
dl_tensor *dl_permute(dl_tensor *t, const int *dims);
dl_tensor *dl_squeeze(dl_tensor *t, int dim);
dl_tensor *dl_squeeze_all(dl_tensor *t);
dl_tensor *dl_unsqueeze(dl_tensor *t, int dim);
dl_tensor *dl_flatten(dl_tensor *t, int start, int end);
dl_tensor *dl_narrow(dl_tensor *t, int dim, int64_t start, int64_t length);
dl_tensor *dl_select(dl_tensor *t, int dim, int64_t index);
dl_tensor *dl_expand(dl_tensor *t, int ndim, const int64_t *shape);
dl_tensor *dl_contiguous(dl_tensor *t);
/* A copy in t's own layout when t is dense (channels-last stays
 * channels-last, a transposed matrix stays transposed), contiguous
 * otherwise: PyTorch's clone (preserve_format). */
dl_tensor *dl_clone(dl_tensor *t);
/* Conversions: t itself when nothing changes, else a copy that records a
 * node (backward converts the gradient back to t's dtype and device).  A
 * channels-last 4-D tensor keeps its layout; anything else comes out
 * contiguous. */
dl_tensor *dl_to_dtype(dl_tensor *t, dl_dtype dtype);
dl_tensor *dl_to_device(dl_tensor *t, dl_device dev);
/* Channels-last (NHWC in memory, NCHW logical shape) for 4-D tensors:
 * whether t is laid out so (size-1 dims aside, as PyTorch), and t itself or a
 * copy laid out so (recording a node).  -1/NULL with an error for other ranks. */
bool dl_is_channels_last(const dl_tensor *t);
dl_tensor *dl_contiguous_channels_last(dl_tensor *t);
/* PyTorch's `t.data = src`: t keeps its identity (every Lua value and graph
 * edge that holds it) but now views src's storage with src's shape, strides
 * and dtype.  t's gradient is dropped when it no longer matches; its
 * requires_grad stays.  Refused for a non-leaf t. */
int dl_set_data(dl_tensor *t, dl_tensor *src);
/* dst <- src (broadcast, converted); records when src requires grad. */
int dl_copy_(dl_tensor *dst, dl_tensor *src);
/* t[index] = src along dimension 0 (index 0-based, negative from the end),
 * recorded as an in-place op on t itself: its history continues, and src
 * gets the written slice's gradient.  0, or -1 with an error. */
int dl_select_assign_(dl_tensor *t, int64_t index, dl_tensor *src);
/* A new tensor sharing t's storage, without autograd history. */
dl_tensor *dl_detach(dl_tensor *t);
/* Fills t (in place; ends its autograd history). */
int dl_fill_(dl_tensor *t, double value);

#endif
