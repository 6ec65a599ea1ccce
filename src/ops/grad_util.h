/* grad_util.h - helpers the ops' backward formulas share. */
#ifndef DL_OPS_GRAD_UTIL_H
#define DL_OPS_GRAD_UTIL_H

#include "autograd/autograd.h"

/* g summed over the dimensions that broadcasting added or expanded, so that
 * it has `shape` (what an input of that shape contributed to).  A new
 * reference (g itself, retained, when the shapes already agree). */
dl_tensor *dl_sum_to_shape(dl_tensor *g, int ndim, const int64_t *shape);
static inline dl_tensor *dl_sum_to_meta(dl_tensor *g, const dl_tensor_meta *m) {
    return dl_sum_to_shape(g, m->ndim, m->shape);
}

/* g converted to the dtype of an input (gradients flow back in the dtype
 * each input had), then summed to its shape. */
dl_tensor *dl_grad_for_input(dl_tensor *g, const dl_tensor_meta *m);

/* gin[i] = dl_grad_for_input(g, input i's meta) for node n; g (NULL after
 * a failure upstream) is consumed.  0, or -1 when g is NULL or that fails. */
int dl_grad_give_input(dl_node *n, dl_tensor **gin, int i, dl_tensor *g);

/* Errors for an in-place op on a leaf that requires grad while grad mode is
 * on (its gradient would be wrong); 0 otherwise. */
int dl_check_inplace(const char *op, dl_tensor *self);

/* Zeros of an input's shape and dtype. */
dl_tensor *dl_zeros_meta(const dl_tensor_meta *m);

#endif
