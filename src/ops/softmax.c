/* ops/softmax.c - the softmax family (see softmax.h): softmax and
 * log_softmax along a dim, forward and backward, on the CPU (cpu/softmax.c)
 * or CUDA (cuda/softmax.cu); the autograd node at the end.
 *
 * Operands are converted to the compute dtype (float64 for float64, float32
 * otherwise) and made contiguous; the result is converted back to the
 * input's dtype, so half types round once per element.  The tensor is seen as
 * (outer, D, inner) around the dim. */
#include "ops/softmax.h"
#include "autograd/autograd.h"
#include "cpu/softmax.h"
#include "kernels/softmax.h"
#include "ops/op_util.h"

/* Runs CUDA entry fn of the softmax table, or refuses when this build lacks it. */
#define CUDA_RUN(op, fn, ...)                                                                      \
    (dl_cuda_softmax->fn ? dl_cuda_softmax->fn(__VA_ARGS__) : dl_cuda_missing(op))

/* --- softmax ------------------------------------------------------------------------------ */

/* (outer, D, inner) of a shape around dim d (a 0-dim tensor is (1, 1, 1)). */
static void split3(const dl_tensor *t, int d, int64_t *outer, int64_t *D, int64_t *inner) {
    *outer = *inner = *D = 1;
    if (t->ndim == 0) return;
    for (int i = 0; i < d; i++) *outer *= t->shape[i];
    *D = t->shape[d];
    for (int i = d + 1; i < t->ndim; i++) *inner *= t->shape[i];
}

static dl_tensor *softmax_forward_any(const char *op, dl_tensor *x, int dim, bool log) {
    dl_device dev;
    if (dl_op_need_floating(op, "input", x) ||
        dl_op_device(op, 1, &x, dl_cuda_softmax != NULL, &dev))
        return NULL;
    int d = dl_wrap_dim(op, dim, x->ndim);
    if (d < 0) return NULL;
    dl_dtype cdt = dl_op_float_dtype(x->dtype);
    dl_tensor *xc = dl_op_dense(x, cdt);
    if (!xc) return NULL;
    dl_tensor *y = dl_tensor_empty(x->ndim, x->shape, cdt, dev);
    if (y) {
        int64_t outer, D, inner;
        split3(x, d, &outer, &D, &inner);
        if (dl_op_is_cuda(dev)) {
            if (CUDA_RUN(op, softmax, dl_op_data(y), dl_op_data(xc), cdt, outer, D, inner, log)) {
                dl_tensor_release(y);
                y = NULL;
            }
        } else if (cdt == DL_DTYPE_F64) {
            dl_cpu_softmax_f64(dl_op_f64p(y), dl_op_f64p(xc), outer, D, inner, log);
        } else {
            dl_cpu_softmax_f32(dl_op_f32p(y), dl_op_f32p(xc), outer, D, inner, log);
        }
    }
    dl_tensor_release(xc);
    return dl_op_finish_as(y, x->dtype);
}

static dl_tensor *softmax_backward_any(const char *op, dl_tensor *gy, dl_tensor *y, int dim,
                                       bool log) {
    dl_device dev;
    dl_tensor *ts[2] = {gy, y};
    if (dl_op_need_floating(op, "grad", gy) || dl_op_need_floating(op, "output", y) ||
        dl_op_device(op, 2, ts, dl_cuda_softmax != NULL, &dev))
        return NULL;
    if (dl_op_check_same_shape(op, "grad", gy, "output", y)) return NULL;
    int d = dl_wrap_dim(op, dim, y->ndim);
    if (d < 0) return NULL;
    dl_dtype cdt = dl_op_float_dtype(dl_promote_types(gy->dtype, y->dtype));
    dl_tensor *gyc = dl_op_dense_on(gy, cdt, dev), *yc = gyc ? dl_op_dense_on(y, cdt, dev) : NULL;
    dl_tensor *gx = yc ? dl_tensor_empty(y->ndim, y->shape, cdt, dev) : NULL;
    if (gx) {
        int64_t outer, D, inner;
        split3(y, d, &outer, &D, &inner);
        if (dl_op_is_cuda(dev)) {
            if (CUDA_RUN(op, softmax_backward, dl_op_data(gx), dl_op_data(gyc), dl_op_data(yc), cdt,
                         outer, D, inner, log)) {
                dl_tensor_release(gx);
                gx = NULL;
            }
        } else if (cdt == DL_DTYPE_F64) {
            dl_cpu_softmax_backward_f64(dl_op_f64p(gx), dl_op_f64p(gyc), dl_op_f64p(yc), outer, D,
                                        inner, log);
        } else {
            dl_cpu_softmax_backward_f32(dl_op_f32p(gx), dl_op_f32p(gyc), dl_op_f32p(yc), outer, D,
                                        inner, log);
        }
    }
    dl_tensor_release(gyc);
    dl_tensor_release(yc);
    return dl_op_finish_as(gx, y->dtype);
}

dl_tensor *dl_softmax_forward(dl_tensor *x, int dim) {
    return softmax_forward_any("softmax", x, dim, false);
}
dl_tensor *dl_log_softmax_forward(dl_tensor *x, int dim) {
    return softmax_forward_any("log_softmax", x, dim, true);
}
dl_tensor *dl_softmax_backward(dl_tensor *gy, dl_tensor *y, int dim) {
    return softmax_backward_any("softmax_backward", gy, y, dim, false);
}
dl_tensor *dl_log_softmax_backward(dl_tensor *gy, dl_tensor *y, int dim) {
    return softmax_backward_any("log_softmax_backward", gy, y, dim, true);
}

/* --- with autograd ----------------------------------------------------------------
 * The node saves the output y; log says which backward runs. */

typedef struct {
    int dim;
    bool log;
} softmax_ctx;

static int softmax_backward(dl_node *n, dl_tensor *const *gout, dl_tensor **gin) {
    const softmax_ctx *c = n->ctx;
    dl_tensor *y = dl_node_saved(n, 0);
    if (!y) return -1;
    gin[0] = c->log ? dl_log_softmax_backward(gout[0], y, c->dim)
                    : dl_softmax_backward(gout[0], y, c->dim);
    return gin[0] ? 0 : -1;
}

static dl_tensor *softmax_common(dl_tensor *x, int dim, bool log) {
    dl_tensor *y = log ? dl_log_softmax_forward(x, dim) : dl_softmax_forward(x, dim);
    softmax_ctx c = {dim, log};
    return dl_op_record(y, log ? "LogSoftmaxBackward" : "SoftmaxBackward", softmax_backward, 1, &x,
                        1, &y, &c, sizeof c);
}

dl_tensor *dl_softmax(dl_tensor *x, int dim) {
    return softmax_common(x, dim, false);
}
dl_tensor *dl_log_softmax(dl_tensor *x, int dim) {
    return softmax_common(x, dim, true);
}
