/* ops/layernorm.c - the layernorm family (see layernorm.h): layer norm's and
 * RMS norm's checks and dispatch to the CPU kernels (cpu/layernorm.c) or the
 * CUDA ones (cuda/layernorm.cu); the autograd node at the end.
 *
 * x is made contiguous and seen as (rows, cols); the kernels get a weight
 * always (ones when absent).  On CUDA half data keeps its dtype (the kernels
 * compute in float32); on the CPU it is converted to float32 and the result
 * rounded back.  Invariants: operands are never modified; every temporary is
 * released on every path. */
#include "ops/layernorm.h"
#include "autograd/autograd.h"
#include "core/error.h"
#include "cpu/layernorm.h"
#include "kernels/layernorm.h"
#include "ops/op_util.h"

#include <float.h>
#include <math.h>
#include <string.h>

/* --- checks ---------------------------------------------------------------------- */

int dl_norm_params_init(dl_norm_params *p, const char *op, int nd, const int64_t *shape, double eps,
                        bool rms) {
    memset(p, 0, sizeof *p);
    if (nd < 1 || nd > DL_MAX_DIMS)
        return dl_error("%s: normalized_shape must have 1 to %d sizes, got %d", op, DL_MAX_DIMS,
                        nd);
    for (int i = 0; i < nd; i++) {
        if (shape[i] < 0)
            return dl_error("%s: normalized_shape has a negative size %lld", op,
                            (long long)shape[i]);
        p->shape[i] = shape[i];
    }
    p->nd = nd;
    p->eps = eps;
    p->rms = rms;
    return 0;
}

double dl_rms_norm_default_eps(dl_dtype dt) {
    return dt == DL_DTYPE_F64 ? DBL_EPSILON : FLT_EPSILON;
}

static const char *norm_op(const dl_norm_params *p) {
    return p->rms ? "rms_norm" : "layer_norm";
}

/* "[2, 3]" of normalized_shape */
static const char *norm_shape_str(const dl_norm_params *p, char *buf, size_t n) {
    return dl_shape_str(p->nd, p->shape, buf, n);
}

/* Checks x against p and fills s (rows, cols). */
static int check_input(const char *op, const char *what, const dl_tensor *x,
                       const dl_norm_params *p, dl_ln_shape *s) {
    char a[128], b[128], c[128];
    if (dl_op_need_floating(op, what, x)) return -1;
    int lead = x->ndim - p->nd;
    bool ok = lead >= 0;
    for (int i = 0; ok && i < p->nd; i++) ok = x->shape[lead + i] == p->shape[i];
    if (!ok)
        return dl_error("%s: normalized_shape is %s, expected %s of shape [*, %s, got %s", op,
                        norm_shape_str(p, a, sizeof a), what, norm_shape_str(p, b, sizeof b) + 1,
                        dl_op_shape_str(x, c, sizeof c));
    s->rows = s->cols = 1;
    for (int i = 0; i < lead; i++) s->rows *= x->shape[i];
    for (int i = 0; i < p->nd; i++) s->cols *= p->shape[i];
    if (!(p->eps >= 0)) return dl_error("%s: eps must be non-negative, got %g", op, p->eps);
    return 0;
}

/* Checks a weight or bias (NULL passes): floating, x's dtype (or float32
 * for a half x), shape normalized_shape. */
static int check_param(const char *op, const char *what, const dl_tensor *v, const dl_tensor *x,
                       const dl_norm_params *p) {
    char a[128], b[128];
    if (!v) return 0;
    if (dl_op_need_floating(op, what, v)) return -1;
    bool half = dl_op_float_dtype(x->dtype) != x->dtype;
    if (v->dtype != x->dtype && !(half && v->dtype == DL_DTYPE_F32))
        return dl_error("%s: %s (%s) must have the input's dtype (%s)%s", op, what,
                        dl_dtype_name(v->dtype), dl_dtype_name(x->dtype),
                        half ? " or float32" : "");
    bool ok = v->ndim == p->nd;
    for (int i = 0; ok && i < p->nd; i++) ok = v->shape[i] == p->shape[i];
    if (!ok)
        return dl_error("%s: %s must have shape %s (normalized_shape), got %s", op, what,
                        norm_shape_str(p, a, sizeof a), dl_op_shape_str(v, b, sizeof b));
    return 0;
}

/* The shape of mean and rstd: x's leading dims, then nd ones. */
static void stat_shape(const dl_tensor *x, const dl_norm_params *p, int64_t *shape) {
    int lead = x->ndim - p->nd;
    for (int i = 0; i < x->ndim; i++) shape[i] = i < lead ? x->shape[i] : 1;
}

/* The weight the kernels read: w in the compute dtype, or ones (cols). */
static dl_tensor *kernel_weight(dl_tensor *w, const dl_ln_shape *s, dl_dtype ct, dl_device dev) {
    return w ? dl_op_dense(w, ct) : dl_tensor_full(1, &s->cols, 1.0, ct, dev);
}

/* --- forward and backward --------------------------------------------------------- */

int dl_layer_norm_forward(dl_tensor *x, dl_tensor *weight, dl_tensor *bias, const dl_norm_params *p,
                          dl_tensor **y, dl_tensor **mean, dl_tensor **rstd) {
    const char *op = norm_op(p);
    dl_ln_shape s;
    dl_device dev;
    *y = *rstd = NULL;
    if (mean) *mean = NULL;
    if (p->rms && bias) return dl_error("%s: takes no bias", op);
    dl_tensor *all[3] = {x, weight, bias};
    if (check_input(op, "input", x, p, &s) || check_param(op, "weight", weight, x, p) ||
        check_param(op, "bias", bias, x, p) ||
        dl_op_device(op, 3, all, dl_cuda_layernorm && dl_cuda_layernorm->forward, &dev))
        return -1;
    bool cuda = dl_op_is_cuda(dev);
    dl_dtype dt = x->dtype, ct = dl_op_float_dtype(dt), kt = cuda ? dt : ct;
    int64_t sshape[DL_MAX_DIMS];
    stat_shape(x, p, sshape);
    /* in: x w b; out: y mean rstd */
    dl_tensor *t[6] = {dl_op_dense(x, kt),
                       kernel_weight(weight, &s, ct, dev),
                       dl_op_dense(bias, ct),
                       dl_tensor_empty(x->ndim, x->shape, kt, dev),
                       p->rms ? NULL : dl_tensor_empty(x->ndim, sshape, ct, dev),
                       dl_tensor_empty(x->ndim, sshape, ct, dev)};
    int rc = -1;
    if (!t[0] || !t[1] || (bias && !t[2]) || !t[3] || (!p->rms && !t[4]) || !t[5]) goto done;
    if (s.rows > 0 && s.cols == 0) {
        /* PyTorch: empty rows have mean 0 and rstd NaN */
        if ((t[4] && dl_tensor_fill_(t[4], 0)) || dl_tensor_fill_(t[5], NAN)) goto done;
    } else if (s.rows > 0) {
        void *y_ = dl_op_data(t[3]), *m_ = dl_op_data(t[4]), *r_ = dl_op_data(t[5]);
        const void *x_ = dl_op_data(t[0]), *w_ = dl_op_data(t[1]), *b_ = dl_op_data(t[2]);
        if (cuda ? dl_cuda_layernorm->forward(kt, &s, p->eps, p->rms, y_, m_, r_, x_, w_, b_)
                 : dl_cpu_layer_norm_forward(kt, &s, p->eps, p->rms, y_, m_, r_, x_, w_, b_))
            goto done;
    }
    if (kt != dt && !(t[3] = dl_op_finish_as(t[3], dt))) goto done;
    rc = 0;
    *y = t[3];
    if (mean) *mean = t[4];
    *rstd = t[5];
    t[3] = t[5] = NULL;
    if (mean) t[4] = NULL;
done:
    dl_op_release_all(t, 6);
    return rc;
}

int dl_layer_norm_backward(dl_tensor *gy, dl_tensor *x, dl_tensor *mean, dl_tensor *rstd,
                           dl_tensor *weight, const dl_norm_params *p, const bool need[3],
                           dl_tensor **gx, dl_tensor **gweight, dl_tensor **gbias) {
    const char *op = p->rms ? "rms_norm_backward" : "layer_norm_backward";
    char a[128], b[128];
    dl_ln_shape s, sg;
    dl_device dev;
    *gx = *gweight = *gbias = NULL;
    dl_tensor *all[5] = {gy, x, mean, rstd, weight};
    if (check_input(op, "input", x, p, &s) || check_input(op, "grad_output", gy, p, &sg) ||
        check_param(op, "weight", weight, x, p) ||
        dl_op_device(op, 5, all, dl_cuda_layernorm && dl_cuda_layernorm->backward, &dev))
        return -1;
    if (!dl_shape_equal(gy, x))
        return dl_error("%s: grad_output has shape %s, expected the input's %s", op,
                        dl_op_shape_str(gy, a, sizeof a), dl_op_shape_str(x, b, sizeof b));
    if (!p->rms && !mean) return dl_error("%s: mean is required", op);
    dl_tensor *stats[2] = {p->rms ? NULL : mean, rstd};
    const char *names[2] = {"mean", "rstd"};
    for (int i = 0; i < 2; i++) {
        if (!stats[i]) continue;
        if (dl_op_need_floating(op, names[i], stats[i])) return -1;
        if (dl_tensor_numel(stats[i]) != s.rows)
            return dl_error("%s: %s has %lld elements (shape %s), expected one per row: %lld", op,
                            names[i], (long long)dl_tensor_numel(stats[i]),
                            dl_op_shape_str(stats[i], a, sizeof a), (long long)s.rows);
    }
    bool cuda = dl_op_is_cuda(dev);
    dl_dtype dt = x->dtype, ct = dl_op_float_dtype(dt), kt = cuda ? dt : ct;
    bool nb = need[2] && !p->rms;
    /* in: gy x mean rstd w; out: gx gw gb */
    dl_tensor *t[8] = {dl_op_dense(gy, kt),
                       dl_op_dense(x, kt),
                       p->rms ? NULL : dl_op_dense(mean, ct),
                       dl_op_dense(rstd, ct),
                       kernel_weight(weight, &s, ct, dev),
                       need[0] ? dl_tensor_empty(x->ndim, x->shape, kt, dev) : NULL,
                       need[1] ? dl_tensor_zeros(p->nd, p->shape, ct, dev) : NULL,
                       nb ? dl_tensor_zeros(p->nd, p->shape, ct, dev) : NULL};
    int rc = -1;
    if (!t[0] || !t[1] || (!p->rms && !t[2]) || !t[3] || !t[4] || (need[0] && !t[5]) ||
        (need[1] && !t[6]) || (nb && !t[7]))
        goto done;
    if (s.rows * s.cols > 0 && (need[0] || need[1] || nb)) {
        void *gx_ = dl_op_data(t[5]), *gw_ = dl_op_data(t[6]), *gb_ = dl_op_data(t[7]);
        const void *gy_ = dl_op_data(t[0]), *x_ = dl_op_data(t[1]), *m_ = dl_op_data(t[2]),
                   *r_ = dl_op_data(t[3]), *w_ = dl_op_data(t[4]);
        if (cuda ? dl_cuda_layernorm->backward(kt, &s, p->rms, gx_, gw_, gb_, gy_, x_, m_, r_, w_)
                 : dl_cpu_layer_norm_backward(kt, &s, p->rms, gx_, gw_, gb_, gy_, x_, m_, r_, w_))
            goto done;
    }
    /* gx in x's dtype; gweight/gbias in the weight's (x's when absent, float32
     * for a half x) */
    dl_dtype pdt = weight ? weight->dtype : ct;
    if ((kt != dt && t[5] && !(t[5] = dl_op_finish_as(t[5], dt))) ||
        (t[6] && !(t[6] = dl_op_finish_as(t[6], pdt))) ||
        (t[7] && !(t[7] = dl_op_finish_as(t[7], pdt))))
        goto done;
    rc = 0;
    dl_op_take3(&t[5], gx, gweight, gbias);
done:
    dl_op_release_all(t, 8);
    return rc;
}

/* --- with autograd -------------------------------------------------------------------
 * saved: x, weight, mean, rstd; the parameters are the node's context. */

static int ln_backward(dl_node *n, dl_tensor *const *gout, dl_tensor **gin) {
    const dl_norm_params *p = n->ctx;
    dl_tensor *s[4] = {NULL, NULL, NULL, NULL};
    for (int i = 0; i < 4; i++)
        if (i == 0 || n->saved[i].t)
            if (!(s[i] = dl_node_saved(n, i))) return -1;
    bool need[3] = {dl_node_needs_grad(n, 0), dl_node_needs_grad(n, 1),
                    !p->rms && dl_node_needs_grad(n, 2)};
    dl_tensor *gb = NULL;
    if (dl_layer_norm_backward(gout[0], s[0], s[2], s[3], s[1], p, need, &gin[0], &gin[1], &gb))
        return -1;
    /* gb has the weight's dtype: the bias's may differ (a half x, one of
     * them float32) */
    if (gb && gb->dtype != n->input_meta[2].dtype &&
        !(gb = dl_op_finish_as(gb, n->input_meta[2].dtype)))
        return -1;
    if (!p->rms) gin[2] = gb;
    return 0;
}

static dl_tensor *norm_common(dl_tensor *x, dl_tensor *weight, dl_tensor *bias,
                              const dl_norm_params *p) {
    dl_tensor *y, *mean, *rstd;
    if (dl_layer_norm_forward(x, weight, bias, p, &y, p->rms ? NULL : &mean, &rstd)) return NULL;
    if (p->rms) mean = NULL;
    dl_tensor *in[3] = {x, weight, bias};
    dl_tensor *save[4] = {x, weight, mean, rstd};
    y = dl_op_record(y, p->rms ? "RmsNormBackward" : "NativeLayerNormBackward", ln_backward,
                     p->rms ? 2 : 3, in, 4, save, p, sizeof *p);
    dl_tensor_release(mean);
    dl_tensor_release(rstd);
    return y;
}

dl_tensor *dl_layer_norm(dl_tensor *x, dl_tensor *weight, dl_tensor *bias,
                         const dl_norm_params *p) {
    if (p->rms) {
        dl_error("layer_norm: the parameters are RMS norm's");
        return NULL;
    }
    return norm_common(x, weight, bias, p);
}

dl_tensor *dl_rms_norm(dl_tensor *x, dl_tensor *weight, const dl_norm_params *p) {
    if (!p->rms) {
        dl_error("rms_norm: the parameters are layer norm's");
        return NULL;
    }
    return norm_common(x, weight, NULL, p);
}
