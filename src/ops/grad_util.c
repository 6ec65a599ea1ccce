/* grad_util.c - shared pieces of backward formulas, and the gradient
 * addition the engine uses (registered when the library loads). */
#include "grad_util.h"
#include "elementwise.h"
#include "reduce.h"

static dl_tensor *grad_add(dl_tensor *a, dl_tensor *b) {
    return dl_add(a, b, 1.0);
}

__attribute__((constructor)) static void register_grad_add(void) {
    dl_autograd_set_add(grad_add);
}

dl_tensor *dl_sum_to_shape(dl_tensor *g, int ndim, const int64_t *shape) {
    int lead = g->ndim - ndim;
    if (lead < 0) {
        dl_error("autograd: gradient has fewer dimensions than its input (internal)");
        return NULL;
    }
    int dims[DL_MAX_DIMS], nd = 0;
    for (int i = 0; i < g->ndim; i++) {
        if (i < lead)
            dims[nd++] = i;
        else if (shape[i - lead] == 1 && g->shape[i] != 1)
            dims[nd++] = i;
    }
    if (nd == 0) return dl_tensor_retain(g);
    dl_tensor *s = dl_sum(g, nd, dims, true, g->dtype);
    if (!s) return NULL;
    dl_tensor *r = dl_tensor_reshape(s, ndim, shape);
    dl_tensor_release(s);
    return r;
}

dl_tensor *dl_grad_for_input(dl_tensor *g, const dl_tensor_meta *m) {
    dl_tensor *c = dl_tensor_to_dtype(g, m->dtype);
    if (!c) return NULL;
    dl_tensor *r = dl_sum_to_meta(c, m);
    dl_tensor_release(c);
    return r;
}

int dl_grad_give_input(dl_node *n, dl_tensor **gin, int i, dl_tensor *g) {
    gin[i] = g ? dl_grad_for_input(g, &n->input_meta[i]) : NULL;
    dl_tensor_release(g);
    return gin[i] ? 0 : -1;
}

int dl_check_inplace(const char *op, dl_tensor *self) {
    if (dl_grad_enabled() && self->requires_grad && !self->grad_fn)
        return dl_error("%s: a leaf tensor that requires grad is used in an in-place operation "
                        "(wrap it in dl.no_grad, or work on a clone)",
                        op);
    return 0;
}

dl_tensor *dl_zeros_meta(const dl_tensor_meta *m) {
    return dl_tensor_zeros(m->ndim, m->shape, m->dtype, m->device);
}
