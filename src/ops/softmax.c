/* ops/softmax.c - the softmax family (see softmax.h): softmax and
 * log_softmax along a dim, forward and backward, on the CPU (cpu/softmax.c)
 * or CUDA (cuda/softmax.cu); the autograd node at the end.
 *
 * Operands are made contiguous in the compute dtype: float64 for float64;
 * float16/bfloat16 stay in their own dtype on the CPU (its kernels widen to
 * float32 in registers and round once per element, the float32 path's result
 * rounded); float32 otherwise (CUDA's half inputs, mixed dtypes), the result
 * converted back to the input's dtype, so half types round once per element
 * either way.  The tensor is seen as (outer, D, inner) around the dim. */
#include "ops/softmax.h"
#include "autograd/autograd.h"
#include "cpu/softmax.h"
#include "kernels/softmax.h"
#include "ops/op_util.h"

/* --- softmax ------------------------------------------------------------------------------ */

/* The (outer, D, inner) view of a shape around dim d (a 0-dim tensor is
 * (1, 1, 1)), for softmax or log_softmax. */
static dl_softmax_shape softmax_shape(const dl_tensor *t, int d, bool log) {
    dl_softmax_shape s = {1, 1, 1, log};
    if (t->ndim == 0) return s;
    for (int i = 0; i < d; i++) s.outer *= t->shape[i];
    s.D = t->shape[d];
    for (int i = d + 1; i < t->ndim; i++) s.inner *= t->shape[i];
    return s;
}

/* The kernels of dev (one signature for both backends, kernels/softmax.h);
 * NULL with the error when this build's CUDA table lacks one. */
static dl_softmax_fn forward_kernel(const char *op, dl_device dev) {
    dl_softmax_fn f = dl_op_is_cuda(dev) ? dl_cuda_softmax->softmax : dl_cpu_softmax;
    if (!f) dl_cuda_missing(op);
    return f;
}

static dl_softmax_backward_fn backward_kernel(const char *op, dl_device dev) {
    dl_softmax_backward_fn f =
        dl_op_is_cuda(dev) ? dl_cuda_softmax->softmax_backward : dl_cpu_softmax_backward;
    if (!f) dl_cuda_missing(op);
    return f;
}

/* The compute dtype for operands of dtype dt on dev (see the header). */
static dl_dtype compute_dtype(dl_dtype dt, dl_device dev) {
    bool half = dt == DL_DTYPE_F16 || dt == DL_DTYPE_BF16;
    return half && !dl_op_is_cuda(dev) ? dt : dl_op_float_dtype(dt);
}

static dl_tensor *softmax_forward_any(const char *op, dl_tensor *x, int dim, bool log) {
    dl_device dev;
    if (dl_op_need_floating(op, "input", x) ||
        dl_op_device(op, 1, &x, dl_cuda_softmax != NULL, &dev))
        return NULL;
    int d = dl_wrap_dim(op, dim, x->ndim);
    dl_softmax_fn kernel = d < 0 ? NULL : forward_kernel(op, dev);
    if (!kernel) return NULL;
    dl_dtype cdt = compute_dtype(x->dtype, dev);
    dl_softmax_shape s = softmax_shape(x, d, log);
    dl_tensor *xc = dl_op_dense(x, cdt);
    dl_tensor *y = xc ? dl_tensor_empty(x->ndim, x->shape, cdt, dev) : NULL;
    if (y && kernel(cdt, &s, dl_op_data(y), dl_op_data(xc))) {
        dl_tensor_release(y);
        y = NULL;
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
    dl_softmax_backward_fn kernel = d < 0 ? NULL : backward_kernel(op, dev);
    if (!kernel) return NULL;
    dl_dtype cdt = compute_dtype(dl_promote_types(gy->dtype, y->dtype), dev);
    dl_softmax_shape s = softmax_shape(y, d, log);
    dl_tensor *gyc = dl_op_dense_on(gy, cdt, dev), *yc = gyc ? dl_op_dense_on(y, cdt, dev) : NULL;
    dl_tensor *gx = yc ? dl_tensor_empty(y->ndim, y->shape, cdt, dev) : NULL;
    if (gx && kernel(cdt, &s, dl_op_data(gx), dl_op_data(gyc), dl_op_data(yc))) {
        dl_tensor_release(gx);
        gx = NULL;
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
