/* ops/dropout.c - the dropout family (see dropout.h): the mask is drawn by
 * dl_bernoulli_ (ops/random.c, so dl_manual_seed reproduces it) and applied
 * by the mask-scale kernel of the input's device (cpu/dropout.c or
 * cuda/dropout.cu); the autograd node at the end saves the mask. */
#include "ops/dropout.h"
#include "autograd/autograd.h"
#include "cpu/dropout.h"
#include "kernels/dropout.h"
#include "ops/op_util.h"
#include "ops/random.h"

/* --- dropout ------------------------------------------------------------------------------ */

static int check_p(const char *op, double p) {
    if (!(p >= 0 && p <= 1))
        return dl_error("%s: dropout probability has to be between 0 and 1, but got %g", op, p);
    return 0;
}

static double dropout_scale(double p) {
    return p >= 1 ? 0.0 : 1.0 / (1.0 - p);
}

/* out = x * (mask ? scale : 0) by the kernel of out's device.  0 or -1. */
static int mask_scale(const char *op, dl_tensor *out, dl_tensor *x, dl_tensor *mask, double scale) {
    if (dl_tensor_device(out).type != DL_DEVICE_CUDA) {
        dl_cpu_mask_scale(out, x, mask, scale);
        return 0;
    }
    if (!dl_cuda_dropout || !dl_cuda_dropout->mask_scale) return dl_cuda_missing(op);
    return dl_cuda_dropout->mask_scale(out, x, mask, scale);
}

int dl_dropout_forward(dl_tensor *x, double p, bool training, dl_generator *g, dl_tensor **out,
                       dl_tensor **mask) {
    const char *op = "dropout";
    *out = NULL;
    if (mask) *mask = NULL;
    if (dl_op_need_floating(op, "input", x) || check_p(op, p)) return -1;
    if (!training) {
        *out = dl_tensor_retain(x);
        return 0;
    }
    dl_device dev = dl_tensor_device(x);
    dl_tensor *m = dl_tensor_empty(x->ndim, x->shape, DL_DTYPE_BOOL, dev);
    if (!m || dl_bernoulli_(m, 1.0 - p, g)) {
        dl_tensor_release(m);
        return -1;
    }
    dl_tensor *o = dl_tensor_empty(x->ndim, x->shape, x->dtype, dev);
    if (!o || mask_scale(op, o, x, m, dropout_scale(p))) {
        dl_tensor_release(o);
        dl_tensor_release(m);
        return -1;
    }
    *out = o;
    if (mask)
        *mask = m;
    else
        dl_tensor_release(m);
    return 0;
}

dl_tensor *dl_dropout_backward(dl_tensor *gy, dl_tensor *mask, double p) {
    const char *op = "dropout_backward";
    if (dl_op_need_floating(op, "grad", gy) || check_p(op, p)) return NULL;
    if (!mask) return dl_tensor_retain(gy);
    dl_tensor *ts[2] = {gy, mask};
    dl_device dev;
    if (dl_common_device(op, 2, ts, &dev)) return NULL;
    if (mask->dtype != DL_DTYPE_BOOL) {
        dl_error("%s: mask must be bool, got %s", op, dl_dtype_name(mask->dtype));
        return NULL;
    }
    if (dl_op_check_same_shape(op, "grad", gy, "mask", mask)) return NULL;
    dl_tensor *gx = dl_tensor_empty(gy->ndim, gy->shape, gy->dtype, dev);
    if (gx && mask_scale(op, gx, gy, mask, dropout_scale(p))) {
        dl_tensor_release(gx);
        return NULL;
    }
    return gx;
}

/* --- with autograd ----------------------------------------------------------------
 * The node saves the mask; its parameter (ctx) is p, a double. */

static int dropout_backward(dl_node *n, dl_tensor *const *gout, dl_tensor **gin) {
    const double *p = n->ctx;
    dl_tensor *mask = n->saved[0].t;
    gin[0] = dl_dropout_backward(gout[0], mask, *p);
    return gin[0] ? 0 : -1;
}

int dl_dropout(dl_tensor *x, double p, bool training, dl_tensor **out, dl_tensor **mask) {
    dl_tensor *m = NULL;
    if (dl_dropout_forward(x, p, training, NULL, out, &m)) return -1;
    if (training && dl_needs_grad1(x)) {
        dl_node *n = dl_node_new("DropoutBackward", dropout_backward, 1, &x, 1, sizeof(double));
        if (!n || dl_node_save(n, m) < 0) {
            dl_node_release(n);
            dl_tensor_release(*out);
            dl_tensor_release(m);
            *out = NULL;
            return -1;
        }
        *(double *)n->ctx = p;
        dl_node_finish(n, *out);
    }
    if (mask)
        *mask = m;
    else
        dl_tensor_release(m);
    return 0;
}
