/* ops/loss.c - the loss family (see loss.h): nll, cross entropy (class
 * indices or probabilities, label smoothing), mse, l1 and binary cross
 * entropy with logits, forward and backward, on the CPU (cpu/loss.c) or CUDA
 * (cuda/loss.cu); the autograd nodes at the end.
 *
 * Dtypes: every floating operand is converted to the compute dtype (float64
 * for float64, float32 for float32/float16/bfloat16) and made contiguous;
 * results are converted back, so half types round once per element.  Class
 * losses view input as (N, C, S) and targets as (N, S) (see cpu/loss.h);
 * targets are checked here, before any kernel runs.  Sums over samples
 * accumulate in double and are rounded once.  On CUDA, results, scratch and
 * every scalar in between (the mean's denominator, the gradient's factor)
 * stay on the device and the host reads nothing: class targets are checked
 * on the device and a bad one is reported at the next synchronisation
 * (dl_cuda_rt->check_first_bad; the kernels skip it meanwhile). */
#include "ops/loss.h"
#include "autograd/autograd.h"
#include "core/iter.h"
#include "cpu/loss.h"
#include "kernels/cuda.h"
#include "kernels/loss.h"
#include "kernels/reduce.h"
#include "ops/elementwise.h"
#include "ops/op_util.h"
#include "ops/reduce.h"
#include "ops/views.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Runs a loss kernel on dev: the CPU's cpu_fn, or the CUDA table's entry fn
 * (refused when this build lacks it).  Both take the same arguments, of the
 * one signature in kernels/loss.h. */
#define LOSS_RUN(op, dev, fn, cpu_fn, ...)                                                         \
    (!dl_op_is_cuda(dev) ? cpu_fn(__VA_ARGS__)                                                     \
     : dl_cuda_loss->fn  ? dl_cuda_loss->fn(__VA_ARGS__)                                           \
                         : dl_cuda_missing(op))

static int check_reduction(const char *op, dl_reduction r) {
    if (r != DL_REDUCTION_NONE && r != DL_REDUCTION_MEAN && r != DL_REDUCTION_SUM)
        return dl_error("%s: invalid reduction %d", op, (int)r);
    return 0;
}

/* *out = the one element of g (out NULL: only the check). */
static int scalar_grad(const char *op, dl_tensor *g, double *out) {
    if (dl_tensor_numel(g) != 1) {
        char s[128];
        return dl_error("%s: the gradient of a reduced loss must have one element, got shape %s",
                        op, dl_shape_str(g->ndim, g->shape, s, sizeof s));
    }
    return out ? dl_tensor_item(g, out) : 0;
}

int dl_reduction_parse(const char *op, const char *name, dl_reduction *out) {
    if (name && strcmp(name, "none") == 0)
        *out = DL_REDUCTION_NONE;
    else if (name && strcmp(name, "mean") == 0)
        *out = DL_REDUCTION_MEAN;
    else if (name && strcmp(name, "sum") == 0)
        *out = DL_REDUCTION_SUM;
    else
        return dl_error("%s: unknown reduction '%s' (expected 'none', 'mean' or 'sum')", op,
                        name ? name : "(null)");
    return 0;
}

/* Per-sample losses `per` (compute dtype, contiguous; consumed) as the op's
 * result: none -> reshaped to shape; sum and mean (divided by denom, or on
 * CUDA by the 0-dim float64 device tensor denom_t when set) -> a 0-dim
 * tensor.  The result has dtype dt and per's device. */
static dl_tensor *reduce_loss(dl_tensor *per, dl_reduction r, double denom, dl_tensor *denom_t,
                              int ndim, const int64_t *shape, dl_dtype dt) {
    if (!per) return NULL;
    if (r == DL_REDUCTION_NONE) {
        dl_tensor *v = dl_tensor_view(per, ndim, shape);
        dl_tensor_release(per);
        return dl_op_finish_as(v, dt);
    }
    const char *op = "loss reduction";
    int64_t n = dl_tensor_numel(per);
    dl_device dev = dl_tensor_device(per);
    if (dl_op_is_cuda(dev)) { /* the sum and the division on the device */
        dl_tensor *acc = dl_tensor_empty(0, NULL, DL_DTYPE_F64, dev);
        int rc = acc ? LOSS_RUN(op, dev, sum, dl_cpu_loss_sum, per->dtype, n, dl_op_data(acc),
                                dl_op_data(per))
                     : -1;
        if (!rc && r == DL_REDUCTION_MEAN && denom_t)
            rc = dl_binary_(DL_BINARY_DIV, acc, denom_t, 1);
        else if (!rc && r == DL_REDUCTION_MEAN)
            rc = dl_cuda_reduce->reduce_finish
                     ? dl_cuda_reduce->reduce_finish(DL_FIN_DIV, dl_op_data(acc), 1, denom, NULL)
                     : dl_cuda_missing(op);
        dl_tensor_release(per);
        dl_tensor *res = rc ? NULL : dl_tensor_to_dtype(acc, dt);
        dl_tensor_release(acc);
        return res;
    }
    double s;
    int rc = dl_cpu_loss_sum(per->dtype, n, &s, dl_op_data(per));
    dl_tensor_release(per);
    if (rc) return NULL;
    if (r == DL_REDUCTION_MEAN) s /= denom;
    return dl_tensor_scalar(s, dt);
}

/* --- class losses: layout and checks ------------------------------------------------------- */

typedef struct {
    dl_class_loss_shape s; /* N, C, S; the op sets ignore_index and eps */
    int ndim;              /* per-sample result: target's shape (input's without the class dim) */
    int64_t shape[DL_MAX_DIMS];
    dl_device dev; /* the operands' device */
} class_layout;

/* The end of a class loss's forward: h holds its 4 operands with the
 * per-sample losses in h[3]; rc is the kernels' status; the mean divides by
 * denom (or the device tensor denom_t; consumed).  Releases h and returns the
 * reduced loss in dtype dt (NULL on failure). */
static dl_tensor *class_loss_result(dl_tensor **h, int rc, dl_reduction reduction, double denom,
                                    dl_tensor *denom_t, const class_layout *L, dl_dtype dt) {
    if (rc) {
        dl_op_release_all(h, 4);
        dl_tensor_release(denom_t);
        return NULL;
    }
    dl_tensor *per = h[3];
    h[3] = NULL;
    dl_op_release_all(h, 3);
    dl_tensor *res = reduce_loss(per, reduction, denom, denom_t, L->ndim, L->shape, dt);
    dl_tensor_release(denom_t);
    return res;
}

/* Checks input x (C), (N, C) or (N, C, d...), the target's shape (probs: x's
 * shape; else x's without the class dim, int64), weight, and that they share
 * a device. */
static int class_check(const char *op, dl_tensor *x, dl_tensor *target, dl_tensor *weight,
                       bool probs, int64_t ignore_index, double eps, class_layout *L) {
    char s1[128], s2[128], s3[128];
    if (x->ndim == 0)
        return dl_error("%s: input must have a class dimension, got a 0-dim tensor", op);
    dl_class_loss_shape *cs = &L->s;
    memset(cs, 0, sizeof *cs);
    cs->C = x->ndim == 1 ? x->shape[0] : x->shape[1];
    cs->N = x->ndim == 1 ? 1 : x->shape[0];
    cs->S = 1;
    for (int i = 2; i < x->ndim; i++) cs->S *= x->shape[i];
    cs->ignore_index = ignore_index;
    cs->eps = eps;
    L->ndim = 0;
    for (int i = 0; i < x->ndim; i++)
        if (i != (x->ndim == 1 ? 0 : 1)) L->shape[L->ndim++] = x->shape[i];
    dl_tensor *ts[3] = {x, target, weight};
    if (dl_op_device(op, 3, ts, dl_cuda_loss != NULL, &L->dev)) return -1;
    if (probs) {
        if (dl_op_check_same_shape(op, "probability target", target, "input", x)) return -1;
    } else {
        if (target->dtype != DL_DTYPE_I64)
            return dl_error("%s: class-index target must be int64, got %s", op,
                            dl_dtype_name(target->dtype));
        bool ok = target->ndim == L->ndim;
        for (int i = 0; ok && i < L->ndim; i++) ok = target->shape[i] == L->shape[i];
        if (!ok)
            return dl_error("%s: expected target of shape %s for input of shape %s, got %s", op,
                            dl_shape_str(L->ndim, L->shape, s1, sizeof s1),
                            dl_shape_str(x->ndim, x->shape, s2, sizeof s2),
                            dl_shape_str(target->ndim, target->shape, s3, sizeof s3));
    }
    if (weight) {
        if (dl_op_need_floating(op, "weight", weight)) return -1;
        if (weight->ndim != 1 || weight->shape[0] != cs->C)
            return dl_error("%s: weight must be 1-D with one entry per class (%lld), got shape %s",
                            op, (long long)cs->C,
                            dl_shape_str(weight->ndim, weight->shape, s1, sizeof s1));
    }
    return 0;
}

/* Queues the device check of the N*S targets t (dense int64 on CUDA, s's
 * layout): the first that is neither s->ignore_index nor in [0, C) is
 * reported at the next synchronisation as `kind` (the kernels skip it
 * meanwhile), so the host reads nothing.  op: a string literal. */
static int cuda_check_targets(const char *op, const dl_class_loss_shape *s, dl_tensor *t,
                              int kind) {
    if (!dl_cuda_rt || !dl_cuda_rt->check_first_bad || !dl_cuda_loss || !dl_cuda_loss->target_check)
        return dl_cuda_missing(op);
    dl_tensor *fb = dl_tensor_empty(0, NULL, DL_DTYPE_I64, dl_tensor_device(t));
    int rc = fb ? dl_cuda_loss->target_check(s, dl_op_data(fb), dl_op_data(t)) : -1;
    if (!rc)
        rc = dl_cuda_rt->check_first_bad(op, kind, dl_op_data(fb), dl_op_data(t), s->N * s->S, s->C,
                                         s->ignore_index);
    dl_tensor_release(fb); /* stream-ordered: the check kernels were queued first */
    return rc;
}

dl_tensor *dl_class_labels_to_targets(const char *op, dl_tensor *target, int64_t C,
                                      int64_t ignore) {
    if (target->dtype != DL_DTYPE_I64) {
        dl_error("%s: class-index target must be int64 (labels 1..C), got %s", op,
                 dl_dtype_name(target->dtype));
        return NULL;
    }
    dl_device dev = dl_tensor_device(target);
    if (dl_op_is_cuda(dev)) { /* on the device: no host read */
        dl_tensor *one = dl_tensor_scalar(1, DL_DTYPE_I64);
        dl_tensor *t = one ? dl_binary(DL_BINARY_SUB, target, one, 1) : NULL;
        dl_tensor_release(one);
        if (!t || C < 0) return t;
        dl_class_loss_shape s = {1, C, dl_tensor_numel(t), ignore - 1, 0};
        if (cuda_check_targets(op, &s, t, DL_CHECK_CLASS_LABEL)) {
            dl_tensor_release(t);
            return NULL;
        }
        return t;
    }
    dl_tensor *t = dl_tensor_contiguous(target);
    dl_tensor *c = t ? dl_tensor_clone(t) : NULL;
    dl_tensor_release(t);
    if (!c) return NULL;
    int64_t *d = dl_tensor_data_ptr(c), n = dl_tensor_numel(c);
    for (int64_t i = 0; i < n; i++) {
        int64_t v = d[i];
        if (C >= 0 && v != ignore && (v < 1 || v > C)) {
            dl_error("%s: target label %lld is out of range for %lld classes (labels are 1..%lld; "
                     "ignore_index is %lld)",
                     op, (long long)v, (long long)C, (long long)C, (long long)ignore);
            dl_tensor_release(c);
            return NULL;
        }
        d[i] = (int64_t)((uint64_t)v - 1u);
    }
    return c;
}

/* The target as a dense int64 tensor on L's device whose entries were all
 * checked (the target_check kernel) to be ignore_index or in [0, C); on
 * CUDA the check is queued and reported at the next synchronisation. */
static dl_tensor *checked_target(const char *op, dl_tensor *target, const class_layout *L) {
    dl_tensor *t = dl_op_onto(dl_tensor_contiguous(target), L->dev);
    if (!t) return NULL;
    if (dl_op_is_cuda(L->dev)) {
        if (cuda_check_targets(op, &L->s, t, DL_CHECK_CLASS_TARGET)) {
            dl_tensor_release(t);
            return NULL;
        }
        return t;
    }
    /* on the host: the first bad target and its value are read directly */
    const int64_t *td = dl_tensor_data_ptr(t);
    int64_t first = 0;
    int rc = dl_cpu_loss_target_check(&L->s, &first, td);
    if (!rc && first < dl_tensor_numel(t))
        rc = dl_error("%s: target %lld is out of bounds for %lld classes (0-based; "
                      "ignore_index is %lld)",
                      op, (long long)td[first], (long long)L->s.C, (long long)L->s.ignore_index);
    return dl_op_result(t, rc);
}

/* The sum of the weights of the non-ignored targets (t and w dense, on L's
 * device): in *out on the CPU; on CUDA in *out_t, a new 0-dim float64 device
 * tensor (the host reads nothing). */
static int class_weight_sum(const char *op, const class_layout *L, dl_dtype cdt, const dl_tensor *t,
                            const dl_tensor *w, double *out, dl_tensor **out_t) {
    *out_t = NULL;
    dl_tensor *acc = dl_tensor_empty(0, NULL, DL_DTYPE_F64, L->dev);
    int rc = acc ? LOSS_RUN(op, L->dev, class_weight_sum, dl_cpu_class_weight_sum, cdt, &L->s,
                            dl_op_data(acc), dl_op_data(t), dl_op_data(w))
                 : -1;
    if (!rc && dl_op_is_cuda(L->dev)) {
        *out_t = acc;
        return 0;
    }
    if (!rc) rc = dl_tensor_item(acc, out);
    dl_tensor_release(acc);
    return rc;
}

/* CUDA: the gradient of a reduced loss as a dense per-sample tensor of
 * (ndim, shape) in cdt on dev, every element gloss (one element) divided by
 * the mean's denominator (denom_t, a 0-dim float64 device tensor, when set,
 * else denom; 1 for a sum) -- computed on the device, so the host reads no
 * value (the kernels take it as their per-sample gradient). */
static dl_tensor *cuda_grad_per_sample(dl_tensor *gloss, double denom, dl_tensor *denom_t, int ndim,
                                       const int64_t *shape, dl_dtype cdt, dl_device dev) {
    /* g0: a new 0-dim float64 device tensor (divided in place below) */
    dl_tensor *gv = dl_tensor_view(gloss, 0, NULL);
    dl_tensor *g0 = gv ? dl_tensor_empty(0, NULL, DL_DTYPE_F64, dev) : NULL;
    int rc = g0 ? dl_tensor_copy_(g0, gv) : -1;
    dl_tensor_release(gv);
    if (rc) {
        dl_tensor_release(g0);
        return NULL;
    }
    if (denom_t) {
        rc = dl_binary_(DL_BINARY_DIV, g0, denom_t, 1);
    } else if (denom != 1) {
        dl_tensor *d = dl_tensor_scalar(denom, DL_DTYPE_F64);
        rc = d ? dl_binary_(DL_BINARY_DIV, g0, d, 1) : -1;
        dl_tensor_release(d);
    }
    dl_tensor *c = rc ? NULL : dl_tensor_to_dtype(g0, cdt);
    dl_tensor_release(g0);
    dl_tensor *e = c ? dl_tensor_expand(c, ndim, shape) : NULL;
    dl_tensor_release(c);
    dl_tensor *r = e ? dl_tensor_contiguous(e) : NULL;
    dl_tensor_release(e);
    return r;
}

/* Reads the loss gradient: per-sample (none: a dense compute-dtype tensor of
 * the per-sample shape on dev in *g) or one factor g0 = gloss / denom (on
 * CUDA, where the host reads nothing, as a per-sample *g too; denom_t, when
 * set, is the device denominator). */
static int loss_grad(const char *op, dl_tensor *gloss, dl_reduction r, int ndim,
                     const int64_t *shape, dl_dtype cdt, double denom, dl_tensor *denom_t,
                     dl_device dev, dl_tensor **g, double *g0) {
    *g = NULL;
    *g0 = 0;
    if (dl_op_need_floating(op, "grad", gloss)) return -1;
    if (r == DL_REDUCTION_NONE) {
        bool ok = gloss->ndim == ndim;
        for (int i = 0; ok && i < ndim; i++) ok = gloss->shape[i] == shape[i];
        if (!ok) {
            char s1[128], s2[128];
            return dl_error("%s: expected grad of shape %s (reduction 'none'), got %s", op,
                            dl_shape_str(ndim, shape, s1, sizeof s1),
                            dl_shape_str(gloss->ndim, gloss->shape, s2, sizeof s2));
        }
        *g = dl_op_dense_on(gloss, cdt, dev);
        return *g ? 0 : -1;
    }
    if (dl_op_is_cuda(dev)) {
        if (dl_tensor_numel(gloss) != 1) return scalar_grad(op, gloss, NULL);
        bool mean = r == DL_REDUCTION_MEAN;
        *g = cuda_grad_per_sample(gloss, mean ? denom : 1, mean ? denom_t : NULL, ndim, shape, cdt,
                                  dev);
        return *g ? 0 : -1;
    }
    double v;
    if (scalar_grad(op, gloss, &v)) return -1;
    *g0 = r == DL_REDUCTION_MEAN ? v / denom : v;
    return 0;
}

/* --- nll_loss ----------------------------------------------------------------------------- */

/* nll's operand checks (forward and backward); fills L. */
static int nll_check(const char *op, dl_tensor *logp, dl_tensor *target, dl_tensor *weight,
                     int64_t ignore_index, dl_reduction reduction, class_layout *L) {
    if (dl_op_need_floating(op, "input", logp) || check_reduction(op, reduction)) return -1;
    return class_check(op, logp, target, weight, false, ignore_index, 0, L);
}

dl_tensor *dl_nll_loss_forward(dl_tensor *logp, dl_tensor *target, dl_tensor *weight,
                               int64_t ignore_index, dl_reduction reduction) {
    const char *op = "nll_loss";
    class_layout L;
    if (nll_check(op, logp, target, weight, ignore_index, reduction, &L)) return NULL;
    dl_dtype cdt = dl_op_float_dtype(logp->dtype);
    int64_t R = L.s.N * L.s.S;
    dl_tensor *h[4] = {NULL, NULL, NULL, NULL}; /* target, logp, weight, per */
    if (!(h[0] = checked_target(op, target, &L))) return NULL;
    if (!(h[1] = dl_op_dense(logp, cdt)) || (weight && !(h[2] = dl_op_dense(weight, cdt))) ||
        !(h[3] = dl_tensor_empty(1, &R, cdt, L.dev))) {
        dl_op_release_all(h, 4);
        return NULL;
    }
    int rc = LOSS_RUN(op, L.dev, nll_loss, dl_cpu_nll_loss, cdt, &L.s, dl_op_data(h[3]),
                      dl_op_data(h[1]), dl_op_data(h[0]), dl_op_data(h[2]));
    double W = 1;
    dl_tensor *W_t = NULL;
    if (!rc && reduction == DL_REDUCTION_MEAN)
        rc = class_weight_sum(op, &L, cdt, h[0], h[2], &W, &W_t);
    return class_loss_result(h, rc, reduction, W, W_t, &L, logp->dtype);
}

dl_tensor *dl_nll_loss_backward(dl_tensor *gloss, dl_tensor *logp, dl_tensor *target,
                                dl_tensor *weight, int64_t ignore_index, dl_reduction reduction) {
    const char *op = "nll_loss_backward";
    class_layout L;
    if (nll_check(op, logp, target, weight, ignore_index, reduction, &L)) return NULL;
    dl_dtype cdt = dl_op_float_dtype(logp->dtype);
    dl_tensor *h[4] = {NULL, NULL, NULL, NULL}; /* target, weight, g, gx */
    if (!(h[0] = checked_target(op, target, &L)) ||
        (weight && !(h[1] = dl_op_dense(weight, cdt)))) {
        dl_op_release_all(h, 4);
        return NULL;
    }
    double W = 1, g0;
    dl_tensor *W_t = NULL;
    if ((reduction == DL_REDUCTION_MEAN && class_weight_sum(op, &L, cdt, h[0], h[1], &W, &W_t)) ||
        loss_grad(op, gloss, reduction, L.ndim, L.shape, cdt, W, W_t, L.dev, &h[2], &g0) ||
        !(h[3] = dl_tensor_empty(logp->ndim, logp->shape, cdt, L.dev)) ||
        LOSS_RUN(op, L.dev, nll_loss_backward, dl_cpu_nll_loss_backward, cdt, &L.s,
                 dl_op_data(h[3]), dl_op_data(h[2]), g0, dl_op_data(h[0]), dl_op_data(h[1]))) {
        dl_tensor_release(W_t);
        dl_op_release_all(h, 4);
        return NULL;
    }
    dl_tensor_release(W_t); /* stream-ordered: the kernels reading it were queued */
    dl_tensor *gx = h[3];
    h[3] = NULL;
    dl_op_release_all(h, 3);
    return dl_op_finish_as(gx, logp->dtype);
}

/* --- cross_entropy ------------------------------------------------------------------------ */

static int ce_check(const char *op, dl_tensor *x, dl_tensor *target, dl_tensor *weight,
                    int64_t ignore_index, dl_reduction reduction, double eps, bool *probs,
                    class_layout *L) {
    if (dl_op_need_floating(op, "input", x) || check_reduction(op, reduction)) return -1;
    *probs = dl_dtype_is_floating(target->dtype);
    if (!*probs && target->dtype != DL_DTYPE_I64)
        return dl_error("%s: target must be int64 class indices or floating-point class "
                        "probabilities, got %s",
                        op, dl_dtype_name(target->dtype));
    if (!(eps >= 0 && eps <= 1))
        return dl_error("%s: label_smoothing must be in [0, 1], got %g", op, eps);
    return class_check(op, x, target, weight, *probs, ignore_index, eps, L);
}

/* The target of a cross entropy on L's device: dense probabilities in the
 * compute dtype, or checked class indices. */
static dl_tensor *ce_target(const char *op, dl_tensor *target, bool probs, dl_dtype cdt,
                            const class_layout *L) {
    return probs ? dl_op_dense_on(target, cdt, L->dev) : checked_target(op, target, L);
}

/* Runs the forward kernel of a cross entropy into per (h: target, x, weight). */
static int ce_forward_kernels(const char *op, dl_tensor *const *h, dl_tensor *per, bool probs,
                              dl_dtype cdt, const class_layout *L) {
    void *out = dl_op_data(per), *x = dl_op_data(h[1]), *t = dl_op_data(h[0]),
         *w = dl_op_data(h[2]);
    return probs ? LOSS_RUN(op, L->dev, cross_entropy_prob, dl_cpu_cross_entropy_prob, cdt, &L->s,
                            out, x, t, w)
                 : LOSS_RUN(op, L->dev, cross_entropy, dl_cpu_cross_entropy, cdt, &L->s, out, x, t,
                            w);
}

dl_tensor *dl_cross_entropy_forward(dl_tensor *x, dl_tensor *target, dl_tensor *weight,
                                    int64_t ignore_index, dl_reduction reduction,
                                    double label_smoothing) {
    const char *op = "cross_entropy";
    class_layout L;
    bool probs;
    if (ce_check(op, x, target, weight, ignore_index, reduction, label_smoothing, &probs, &L))
        return NULL;
    dl_dtype cdt = dl_op_float_dtype(x->dtype);
    int64_t R = L.s.N * L.s.S;
    dl_tensor *h[4] = {NULL, NULL, NULL, NULL}; /* target, x, weight, per */
    h[0] = ce_target(op, target, probs, cdt, &L);
    if (!h[0] || !(h[1] = dl_op_dense(x, cdt)) || (weight && !(h[2] = dl_op_dense(weight, cdt))) ||
        !(h[3] = dl_tensor_empty(1, &R, cdt, L.dev))) {
        dl_op_release_all(h, 4);
        return NULL;
    }
    double denom = (double)R;
    dl_tensor *denom_t = NULL;
    int rc = ce_forward_kernels(op, h, h[3], probs, cdt, &L);
    if (!rc && !probs && reduction == DL_REDUCTION_MEAN)
        rc = class_weight_sum(op, &L, cdt, h[0], h[2], &denom, &denom_t);
    return class_loss_result(h, rc, reduction, denom, denom_t, &L, x->dtype);
}

/* Runs the backward kernel of a cross entropy (h: target, x, weight, g, gx, gtarget). */
static int ce_backward_kernels(const char *op, dl_tensor *const *h, double g0, bool probs,
                               dl_dtype cdt, const class_layout *L) {
    void *gx = dl_op_data(h[4]), *g = dl_op_data(h[3]), *x = dl_op_data(h[1]),
         *t = dl_op_data(h[0]), *w = dl_op_data(h[2]);
    return probs ? LOSS_RUN(op, L->dev, cross_entropy_prob_backward,
                            dl_cpu_cross_entropy_prob_backward, cdt, &L->s, gx, dl_op_data(h[5]), g,
                            g0, x, t, w)
                 : LOSS_RUN(op, L->dev, cross_entropy_backward, dl_cpu_cross_entropy_backward, cdt,
                            &L->s, gx, g, g0, x, t, w);
}

int dl_cross_entropy_backward(dl_tensor *gloss, dl_tensor *x, dl_tensor *target, dl_tensor *weight,
                              int64_t ignore_index, dl_reduction reduction, double label_smoothing,
                              dl_tensor **gx, dl_tensor **gtarget) {
    const char *op = "cross_entropy_backward";
    *gx = NULL;
    if (gtarget) *gtarget = NULL;
    class_layout L;
    bool probs;
    if (ce_check(op, x, target, weight, ignore_index, reduction, label_smoothing, &probs, &L))
        return -1;
    dl_dtype cdt = dl_op_float_dtype(x->dtype);
    bool want_gt = probs && gtarget;
    dl_tensor *h[6] = {NULL}; /* target, x, weight, g, gx, gtarget */
    h[0] = ce_target(op, target, probs, cdt, &L);
    if (!h[0] || !(h[1] = dl_op_dense(x, cdt)) || (weight && !(h[2] = dl_op_dense(weight, cdt)))) {
        dl_op_release_all(h, 6);
        return -1;
    }
    double denom = probs ? (double)(L.s.N * L.s.S) : 1, g0;
    dl_tensor *denom_t = NULL;
    if ((!probs && reduction == DL_REDUCTION_MEAN &&
         class_weight_sum(op, &L, cdt, h[0], h[2], &denom, &denom_t)) ||
        loss_grad(op, gloss, reduction, L.ndim, L.shape, cdt, denom, denom_t, L.dev, &h[3], &g0) ||
        !(h[4] = dl_tensor_empty(x->ndim, x->shape, cdt, L.dev)) ||
        (want_gt && !(h[5] = dl_tensor_empty(x->ndim, x->shape, cdt, L.dev))) ||
        ce_backward_kernels(op, h, g0, probs, cdt, &L)) {
        dl_tensor_release(denom_t);
        dl_op_release_all(h, 6);
        return -1;
    }
    dl_tensor_release(denom_t);
    dl_tensor *rx = h[4], *rt = h[5];
    h[4] = h[5] = NULL;
    dl_op_release_all(h, 4);
    *gx = dl_op_finish_as(rx, x->dtype);
    if (!*gx) {
        dl_tensor_release(rt);
        return -1;
    }
    if (want_gt) {
        *gtarget = dl_op_finish_as(rt, target->dtype);
        if (!*gtarget) {
            dl_tensor_release(*gx);
            *gx = NULL;
            return -1;
        }
    }
    return 0;
}

/* --- pointwise losses --------------------------------------------------------------------- */

typedef struct {
    int ndim; /* the common (broadcast) shape */
    int64_t shape[DL_MAX_DIMS];
    int64_t n;
    dl_dtype dt, cdt;
    dl_device dev;
    dl_tensor *x, *y, *w,
        *pw; /* dense, compute dtype, the common shape, on dev; w, pw may be NULL */
} pw_args;

static void pw_release(pw_args *a) {
    dl_tensor *ts[4] = {a->x, a->y, a->w, a->pw};
    dl_op_release_all(ts, 4);
    a->x = a->y = a->w = a->pw = NULL;
}

/* An operand broadcast to the common shape, dense in the compute dtype, on a's device. */
static dl_tensor *pw_operand(const char *op, const char *what, dl_tensor *t, const pw_args *a) {
    dl_tensor *e = dl_tensor_expand(t, a->ndim, a->shape);
    if (!e) {
        char s1[128], s2[128];
        dl_error("%s: %s of shape %s cannot be broadcast to shape %s", op, what,
                 dl_shape_str(t->ndim, t->shape, s1, sizeof s1),
                 dl_shape_str(a->ndim, a->shape, s2, sizeof s2));
        return NULL;
    }
    dl_tensor *d = dl_op_dense_on(e, a->cdt, a->dev);
    dl_tensor_release(e);
    return d;
}

/* same_shape: y must have x's shape (BCE); else x and y broadcast. */
static int pw_prepare(const char *op, dl_tensor *x, dl_tensor *y, dl_tensor *w, dl_tensor *pw,
                      dl_reduction r, bool same_shape, pw_args *a) {
    memset(a, 0, sizeof *a);
    if (dl_op_need_floating(op, "input", x) || dl_op_need_floating(op, "target", y) ||
        check_reduction(op, r))
        return -1;
    if (w && dl_op_need_floating(op, "weight", w)) return -1;
    if (pw && dl_op_need_floating(op, "pos_weight", pw)) return -1;
    dl_tensor *ts[4] = {x, y, w, pw};
    if (dl_op_device(op, 4, ts, dl_cuda_loss != NULL, &a->dev)) return -1;
    if (same_shape) {
        if (dl_op_check_same_shape(op, "target", y, "input", x)) return -1;
        a->ndim = x->ndim;
        memcpy(a->shape, x->shape, sizeof a->shape);
    } else {
        a->ndim = dl_broadcast_shapes(op, x->ndim, x->shape, y->ndim, y->shape, a->shape);
        if (a->ndim < 0) return -1;
    }
    a->n = 1;
    for (int i = 0; i < a->ndim; i++) a->n *= a->shape[i];
    a->dt = dl_promote_types(x->dtype, y->dtype);
    a->cdt = dl_op_float_dtype(a->dt);
    if (!(a->x = pw_operand(op, "input", x, a)) || !(a->y = pw_operand(op, "target", y, a)) ||
        (w && !(a->w = pw_operand(op, "weight", w, a))) ||
        (pw && !(a->pw = pw_operand(op, "pos_weight", pw, a)))) {
        pw_release(a);
        return -1;
    }
    return 0;
}

static dl_tensor *pw_forward(const char *op, dl_tensor *x, dl_tensor *y, dl_tensor *w,
                             dl_tensor *pw, dl_reduction r, dl_pointwise_loss kind) {
    pw_args a;
    if (pw_prepare(op, x, y, w, pw, r, kind == DL_POINTWISE_BCE_LOGITS, &a)) return NULL;
    dl_tensor *per = dl_tensor_empty(a.ndim, a.shape, a.cdt, a.dev);
    if (per && LOSS_RUN(op, a.dev, pointwise_loss, dl_cpu_pointwise_loss, a.cdt, kind, a.n,
                        dl_op_data(per), dl_op_data(a.x), dl_op_data(a.y), dl_op_data(a.w),
                        dl_op_data(a.pw))) {
        dl_tensor_release(per);
        per = NULL;
    }
    pw_release(&a);
    return reduce_loss(per, r, (double)a.n, NULL, a.ndim, a.shape, a.dt);
}

/* t (the common shape; consumed) summed over broadcast dims back to (ndim, shape). */
static dl_tensor *sum_to(dl_tensor *t, int ndim, const int64_t *shape) {
    if (!t) return NULL;
    int lead = t->ndim - ndim, dims[DL_MAX_DIMS], nd = 0;
    for (int i = 0; i < lead; i++) dims[nd++] = i;
    for (int i = 0; i < ndim; i++)
        if (shape[i] == 1 && t->shape[lead + i] != 1) dims[nd++] = lead + i;
    if (nd == 0) return t;
    dl_tensor *s = dl_sum(t, nd, dims, true, DL_REDUCE_DTYPE_NONE);
    dl_tensor_release(t);
    if (!s) return NULL;
    dl_tensor *r = dl_tensor_reshape(s, ndim, shape);
    dl_tensor_release(s);
    return r;
}

static int pw_backward(const char *op, dl_tensor *gloss, dl_tensor *x, dl_tensor *y, dl_tensor *w,
                       dl_tensor *pw, dl_reduction r, dl_pointwise_loss kind, dl_tensor **gx,
                       dl_tensor **gy) {
    if (gx) *gx = NULL;
    if (gy) *gy = NULL;
    pw_args a;
    if (pw_prepare(op, x, y, w, pw, r, kind == DL_POINTWISE_BCE_LOGITS, &a)) return -1;
    dl_tensor *g = NULL, *rx = NULL, *ry = NULL;
    double g0;
    int rc = loss_grad(op, gloss, r, a.ndim, a.shape, a.cdt, (double)a.n, NULL, a.dev, &g, &g0);
    if (!rc && gx && !(rx = dl_tensor_empty(a.ndim, a.shape, a.cdt, a.dev))) rc = -1;
    if (!rc && gy && !(ry = dl_tensor_empty(a.ndim, a.shape, a.cdt, a.dev))) rc = -1;
    if (!rc)
        rc = LOSS_RUN(op, a.dev, pointwise_loss_backward, dl_cpu_pointwise_loss_backward, a.cdt,
                      kind, a.n, dl_op_data(rx), dl_op_data(ry), dl_op_data(g), g0, dl_op_data(a.x),
                      dl_op_data(a.y), dl_op_data(a.w), dl_op_data(a.pw));
    dl_tensor_release(g);
    pw_release(&a);
    if (rc) {
        dl_tensor_release(rx);
        dl_tensor_release(ry);
        return -1;
    }
    if (gx && !(*gx = dl_op_finish_as(sum_to(rx, x->ndim, x->shape), x->dtype))) {
        dl_tensor_release(ry);
        return -1;
    }
    if (gy && !(*gy = dl_op_finish_as(sum_to(ry, y->ndim, y->shape), y->dtype))) {
        if (gx) {
            dl_tensor_release(*gx);
            *gx = NULL;
        }
        return -1;
    }
    return 0;
}

dl_tensor *dl_mse_loss_forward(dl_tensor *x, dl_tensor *y, dl_reduction reduction) {
    return pw_forward("mse_loss", x, y, NULL, NULL, reduction, DL_POINTWISE_MSE);
}

dl_tensor *dl_l1_loss_forward(dl_tensor *x, dl_tensor *y, dl_reduction reduction) {
    return pw_forward("l1_loss", x, y, NULL, NULL, reduction, DL_POINTWISE_L1);
}

int dl_mse_loss_backward(dl_tensor *gloss, dl_tensor *x, dl_tensor *y, dl_reduction reduction,
                         dl_tensor **gx, dl_tensor **gy) {
    return pw_backward("mse_loss_backward", gloss, x, y, NULL, NULL, reduction, DL_POINTWISE_MSE,
                       gx, gy);
}

int dl_l1_loss_backward(dl_tensor *gloss, dl_tensor *x, dl_tensor *y, dl_reduction reduction,
                        dl_tensor **gx, dl_tensor **gy) {
    return pw_backward("l1_loss_backward", gloss, x, y, NULL, NULL, reduction, DL_POINTWISE_L1, gx,
                       gy);
}

dl_tensor *dl_binary_cross_entropy_with_logits_forward(dl_tensor *x, dl_tensor *y,
                                                       dl_tensor *weight, dl_tensor *pos_weight,
                                                       dl_reduction reduction) {
    return pw_forward("binary_cross_entropy_with_logits", x, y, weight, pos_weight, reduction,
                      DL_POINTWISE_BCE_LOGITS);
}

int dl_binary_cross_entropy_with_logits_backward(dl_tensor *gloss, dl_tensor *x, dl_tensor *y,
                                                 dl_tensor *weight, dl_tensor *pos_weight,
                                                 dl_reduction reduction, dl_tensor **gx,
                                                 dl_tensor **gy) {
    return pw_backward("binary_cross_entropy_with_logits_backward", gloss, x, y, weight, pos_weight,
                       reduction, DL_POINTWISE_BCE_LOGITS, gx, gy);
}

/* --- with autograd ----------------------------------------------------------------
 * Each loss records one node saving what its *_backward reads and the
 * loss's parameters. */

typedef struct {
    int64_t ignore_index;
    dl_reduction reduction;
    double label_smoothing;
} loss_ctx;

/* inputs: 0 = x/logp, 1 = target, 2 = weight; saved: x, target, weight */
static int nll_backward(dl_node *n, dl_tensor *const *gout, dl_tensor **gin) {
    const loss_ctx *c = n->ctx;
    dl_tensor *x = dl_node_saved(n, 0), *t = dl_node_saved(n, 1);
    if (!x || !t) return -1;
    dl_tensor *w = n->saved[2].t;
    gin[0] = dl_nll_loss_backward(gout[0], x, t, w, c->ignore_index, c->reduction);
    return gin[0] ? 0 : -1;
}

dl_tensor *dl_nll_loss(dl_tensor *logp, dl_tensor *target, dl_tensor *weight, int64_t ignore_index,
                       dl_reduction reduction) {
    dl_tensor *out = dl_nll_loss_forward(logp, target, weight, ignore_index, reduction);
    if (!out || !dl_needs_grad1(logp)) return out;
    dl_tensor *save[3] = {logp, target, weight};
    loss_ctx c = {.ignore_index = ignore_index, .reduction = reduction};
    return dl_op_record(out, "NllLossBackward", nll_backward, 1, &logp, 3, save, &c, sizeof c);
}

static int ce_backward(dl_node *n, dl_tensor *const *gout, dl_tensor **gin) {
    const loss_ctx *c = n->ctx;
    dl_tensor *x = dl_node_saved(n, 0), *t = dl_node_saved(n, 1);
    if (!x || !t) return -1;
    dl_tensor *gx = NULL, *gt = NULL;
    if (dl_cross_entropy_backward(gout[0], x, t, n->saved[2].t, c->ignore_index, c->reduction,
                                  c->label_smoothing, &gx, dl_node_needs_grad(n, 1) ? &gt : NULL))
        return -1;
    gin[0] = gx;
    gin[1] = gt;
    return 0;
}

dl_tensor *dl_cross_entropy(dl_tensor *x, dl_tensor *target, dl_tensor *weight,
                            int64_t ignore_index, dl_reduction reduction, double label_smoothing) {
    dl_tensor *out =
        dl_cross_entropy_forward(x, target, weight, ignore_index, reduction, label_smoothing);
    bool target_grad = dl_dtype_is_floating(target->dtype);
    dl_tensor *in[2] = {x, target_grad ? target : NULL};
    if (!out || !dl_autograd_needed(2, in)) return out;
    dl_tensor *save[3] = {x, target, weight};
    loss_ctx c = {ignore_index, reduction, label_smoothing};
    return dl_op_record(out, "CrossEntropyBackward", ce_backward, 2, in, 3, save, &c, sizeof c);
}

typedef int (*pair_backward_fn)(dl_tensor *, dl_tensor *, dl_tensor *, dl_reduction, dl_tensor **,
                                dl_tensor **);

static int pair_backward(dl_node *n, dl_tensor *const *gout, dl_tensor **gin, pair_backward_fn fn) {
    const loss_ctx *c = n->ctx;
    dl_tensor *x = dl_node_saved(n, 0), *y = dl_node_saved(n, 1);
    if (!x || !y) return -1;
    return fn(gout[0], x, y, c->reduction, dl_node_needs_grad(n, 0) ? &gin[0] : NULL,
              dl_node_needs_grad(n, 1) ? &gin[1] : NULL);
}

static int mse_backward(dl_node *n, dl_tensor *const *g, dl_tensor **gin) {
    return pair_backward(n, g, gin, dl_mse_loss_backward);
}
static int l1_backward(dl_node *n, dl_tensor *const *g, dl_tensor **gin) {
    return pair_backward(n, g, gin, dl_l1_loss_backward);
}

static dl_tensor *pair_loss(const char *name, dl_backward_fn bw, dl_tensor *out, dl_tensor *x,
                            dl_tensor *y, dl_reduction reduction) {
    if (!out || !dl_needs_grad2(x, y)) return out;
    dl_tensor *in[2] = {x, y};
    loss_ctx c = {.reduction = reduction};
    return dl_op_record(out, name, bw, 2, in, 2, in, &c, sizeof c);
}

dl_tensor *dl_mse_loss(dl_tensor *x, dl_tensor *y, dl_reduction reduction) {
    return pair_loss("MseLossBackward", mse_backward, dl_mse_loss_forward(x, y, reduction), x, y,
                     reduction);
}

dl_tensor *dl_l1_loss(dl_tensor *x, dl_tensor *y, dl_reduction reduction) {
    return pair_loss("L1LossBackward", l1_backward, dl_l1_loss_forward(x, y, reduction), x, y,
                     reduction);
}

static int bce_backward(dl_node *n, dl_tensor *const *gout, dl_tensor **gin) {
    const loss_ctx *c = n->ctx;
    dl_tensor *x = dl_node_saved(n, 0), *y = dl_node_saved(n, 1);
    if (!x || !y) return -1;
    return dl_binary_cross_entropy_with_logits_backward(
        gout[0], x, y, n->saved[2].t, n->saved[3].t, c->reduction,
        dl_node_needs_grad(n, 0) ? &gin[0] : NULL, dl_node_needs_grad(n, 1) ? &gin[1] : NULL);
}

dl_tensor *dl_binary_cross_entropy_with_logits(dl_tensor *x, dl_tensor *y, dl_tensor *weight,
                                               dl_tensor *pos_weight, dl_reduction reduction) {
    dl_tensor *out =
        dl_binary_cross_entropy_with_logits_forward(x, y, weight, pos_weight, reduction);
    if (!out || !dl_needs_grad2(x, y)) return out;
    dl_tensor *in[2] = {x, y}, *save[4] = {x, y, weight, pos_weight};
    loss_ctx c = {.reduction = reduction};
    return dl_op_record(out, "BinaryCrossEntropyWithLogitsBackward", bce_backward, 2, in, 4, save,
                        &c, sizeof c);
}
