/* ops/nn_func.c - the functional nn op family (see nn_func.h): checks
 * arguments, infers result shapes and dtypes, brings operands into the dense
 * layouts the CPU kernels read, and dispatches on the compute dtype.
 *
 * Dtypes: every floating operand is converted to the compute dtype (float64
 * for float64, float32 for float32/float16/bfloat16) and made contiguous
 * (no copy when it already is); results are computed there and converted
 * back to the input's dtype, so half types round once per element.
 * Class losses view input as (N, C, S) and targets as (N, S) (see
 * src/cpu/loss.h); targets are checked here, before any kernel runs.
 * Sums over samples accumulate in double and are rounded once. */
#include "ops/nn_func.h"
#include "core/iter.h"
#include "cpu/activation.h"
#include "cpu/loss.h"
#include "cpu/pad.h"
#include "ops/cuda_index.h"
#include "cpu/softmax.h"
#include "ops/cuda_elementwise.h"
#include "ops/cuda_reduce.h"
#include "ops/random.h"
#include "ops/reduce.h"
#include "ops/views.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* --- shared helpers ----------------------------------------------------------------------- */

static int check_reduction(const char *op, dl_reduction r) {
    if (r != DL_REDUCTION_NONE && r != DL_REDUCTION_MEAN && r != DL_REDUCTION_SUM)
        return dl_error("%s: invalid reduction %d", op, (int)r);
    return 0;
}

static int check_same_shape(const char *op, const char *wa, const dl_tensor *a, const char *wb,
                            const dl_tensor *b) {
    if (dl_shape_equal(a, b)) return 0;
    char s1[128], s2[128];
    return dl_error("%s: %s of shape %s does not match %s of shape %s", op, wa,
                    dl_shape_str(a->ndim, a->shape, s1, sizeof s1), wb,
                    dl_shape_str(b->ndim, b->shape, s2, sizeof s2));
}

static dl_dtype compute_dtype(dl_dtype t) {
    return t == DL_DTYPE_F64 ? DL_DTYPE_F64 : DL_DTYPE_F32;
}

/* t in dtype cdt and contiguous (t itself, retained, when it already is). */
static dl_tensor *dense(dl_tensor *t, dl_dtype cdt) {
    dl_tensor *a = dl_tensor_to_dtype(t, cdt);
    if (!a) return NULL;
    dl_tensor *b = dl_tensor_contiguous(a);
    dl_tensor_release(a);
    return b;
}

/* out (a compute-dtype result, consumed) as dtype dt. */
static dl_tensor *finish(dl_tensor *out, dl_dtype dt) {
    if (!out || out->dtype == dt) return out;
    dl_tensor *r = dl_tensor_to_dtype(out, dt);
    dl_tensor_release(out);
    return r;
}

static void release_all(dl_tensor **ts, int n) {
    for (int i = 0; i < n; i++) {
        dl_tensor_release(ts[i]);
        ts[i] = NULL;
    }
}

/* Typed data pointers of a compute-dtype tensor (NULL for a NULL tensor). */
static float *f32p(const dl_tensor *t) {
    return t ? (float *)dl_tensor_data_ptr(t) : NULL;
}
static double *f64p(const dl_tensor *t) {
    return t ? (double *)dl_tensor_data_ptr(t) : NULL;
}

/* The value of a one-element gradient, checked. */
static int scalar_grad(const char *op, dl_tensor *g, double *out) {
    if (dl_tensor_numel(g) != 1) {
        char s[128];
        return dl_error("%s: the gradient of a reduced loss must have one element, got shape %s",
                        op, dl_shape_str(g->ndim, g->shape, s, sizeof s));
    }
    return dl_tensor_item(g, out);
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

const char *dl_reduction_name(dl_reduction r) {
    switch (r) {
    case DL_REDUCTION_NONE: return "none";
    case DL_REDUCTION_MEAN: return "mean";
    case DL_REDUCTION_SUM: return "sum";
    }
    return "?";
}

/* --- devices (softmax and the losses) ------------------------------------------------------
 * A CUDA operand runs the CUDA twins of the kernels (cuda_reduce.h) on its
 * device: results and scratch live there, and the host reads device values
 * only through dl_tensor_item (the loss gradient's factor, the mean's
 * denominator). */

/* The device the n operands (NULLs skipped) share: the CPU, or a CUDA device
 * (made current) whose reduce-family kernels are present. */
static int op_device(const char *op, int n, dl_tensor *const *ts, dl_device *dev) {
    if (dl_common_device(op, n, ts, dev)) return -1;
    if (dev->type == DL_DEVICE_CPU) return 0;
    if (dev->type != DL_DEVICE_CUDA || !dl_cuda_red || !dl_cuda_rt) return dl_cuda_missing(op);
    return dl_cuda_rt->set_device(dev->index) < 0 ? -1 : 0;
}

static bool on_cuda(dl_device dev) {
    return dev.type == DL_DEVICE_CUDA;
}

/* t must be floating point (op_device checks where it lives). */
static int need_floating(const char *op, const char *what, const dl_tensor *t) {
    if (!dl_dtype_is_floating(t->dtype))
        return dl_error("%s: %s must be a floating-point tensor, got %s", op, what,
                        dl_dtype_name(t->dtype));
    return 0;
}

/* t (consumed) on dev: moved when it is elsewhere (a 0-dim CPU operand
 * beside CUDA ones, or a gradient from another device). */
static dl_tensor *onto(dl_tensor *t, dl_device dev) {
    if (!t || dl_device_equal(dl_tensor_device(t), dev)) return t;
    dl_tensor *m = dl_tensor_to_device(t, dev);
    dl_tensor_release(t);
    return m;
}

/* dense() on dev */
static dl_tensor *dense_on(dl_tensor *t, dl_dtype cdt, dl_device dev) {
    return onto(dense(t, cdt), dev);
}

static void *vp(const dl_tensor *t) {
    return t ? dl_tensor_data_ptr(t) : NULL;
}

/* Runs CUDA entry fn of the reduce family, or refuses when this build lacks it. */
#define CUDA_RUN(op, fn, ...) (dl_cuda_red->fn ? dl_cuda_red->fn(__VA_ARGS__) : dl_cuda_missing(op))

/* Per-sample losses `per` (compute dtype, contiguous; consumed) as the op's
 * result: none -> reshaped to shape; sum and mean (divided by denom) -> a
 * 0-dim tensor.  The result has dtype dt and per's device. */
static dl_tensor *reduce_loss(dl_tensor *per, dl_reduction r, double denom, int ndim,
                              const int64_t *shape, dl_dtype dt) {
    if (!per) return NULL;
    if (r == DL_REDUCTION_NONE) {
        dl_tensor *v = dl_tensor_view(per, ndim, shape);
        dl_tensor_release(per);
        return finish(v, dt);
    }
    int64_t n = dl_tensor_numel(per);
    dl_device dev = dl_tensor_device(per);
    if (on_cuda(dev)) { /* the sum and the division on the device */
        const char *op = "loss reduction";
        dl_tensor *acc = dl_tensor_empty(0, NULL, DL_DTYPE_F64, dev);
        int rc = acc ? CUDA_RUN(op, sum, vp(per), per->dtype, n, vp(acc)) : -1;
        if (!rc && r == DL_REDUCTION_MEAN)
            rc = CUDA_RUN(op, reduce_finish, DL_FIN_DIV, vp(acc), 1, denom, NULL);
        dl_tensor_release(per);
        dl_tensor *res = rc ? NULL : dl_tensor_to_dtype(acc, dt);
        dl_tensor_release(acc);
        return res;
    }
    double s =
        per->dtype == DL_DTYPE_F64 ? dl_cpu_sum_f64(f64p(per), n) : dl_cpu_sum_f32(f32p(per), n);
    dl_tensor_release(per);
    if (r == DL_REDUCTION_MEAN) s /= denom;
    return dl_tensor_scalar(s, dt);
}

/* --- softmax ------------------------------------------------------------------------------ */

/* (outer, D, inner) of a shape around dim d (a 0-dim tensor is (1, 1, 1)). */
static void split3(const dl_tensor *t, int d, int64_t *outer, int64_t *D, int64_t *inner) {
    *outer = *inner = *D = 1;
    if (t->ndim == 0) return;
    for (int i = 0; i < d; i++) *outer *= t->shape[i];
    *D = t->shape[d];
    for (int i = d + 1; i < t->ndim; i++) *inner *= t->shape[i];
}

static dl_tensor *softmax_fwd(const char *op, dl_tensor *x, int dim, bool log) {
    dl_device dev;
    if (need_floating(op, "input", x) || op_device(op, 1, &x, &dev)) return NULL;
    int d = dl_wrap_dim(op, dim, x->ndim);
    if (d < 0) return NULL;
    dl_dtype cdt = compute_dtype(x->dtype);
    dl_tensor *xc = dense(x, cdt);
    if (!xc) return NULL;
    dl_tensor *y = dl_tensor_empty(x->ndim, x->shape, cdt, dev);
    if (y) {
        int64_t outer, D, inner;
        split3(x, d, &outer, &D, &inner);
        if (on_cuda(dev)) {
            if (CUDA_RUN(op, softmax, vp(y), vp(xc), cdt, outer, D, inner, log)) {
                dl_tensor_release(y);
                y = NULL;
            }
        } else if (cdt == DL_DTYPE_F64) {
            dl_cpu_softmax_f64(f64p(y), f64p(xc), outer, D, inner, log);
        } else {
            dl_cpu_softmax_f32(f32p(y), f32p(xc), outer, D, inner, log);
        }
    }
    dl_tensor_release(xc);
    return finish(y, x->dtype);
}

static dl_tensor *softmax_bwd(const char *op, dl_tensor *gy, dl_tensor *y, int dim, bool log) {
    dl_device dev;
    dl_tensor *ts[2] = {gy, y};
    if (need_floating(op, "grad", gy) || need_floating(op, "output", y) ||
        op_device(op, 2, ts, &dev))
        return NULL;
    if (check_same_shape(op, "grad", gy, "output", y)) return NULL;
    int d = dl_wrap_dim(op, dim, y->ndim);
    if (d < 0) return NULL;
    dl_dtype cdt = compute_dtype(dl_promote_types(gy->dtype, y->dtype));
    dl_tensor *gyc = dense_on(gy, cdt, dev), *yc = gyc ? dense_on(y, cdt, dev) : NULL;
    dl_tensor *gx = yc ? dl_tensor_empty(y->ndim, y->shape, cdt, dev) : NULL;
    if (gx) {
        int64_t outer, D, inner;
        split3(y, d, &outer, &D, &inner);
        if (on_cuda(dev)) {
            if (CUDA_RUN(op, softmax_backward, vp(gx), vp(gyc), vp(yc), cdt, outer, D, inner,
                         log)) {
                dl_tensor_release(gx);
                gx = NULL;
            }
        } else if (cdt == DL_DTYPE_F64) {
            dl_cpu_softmax_backward_f64(f64p(gx), f64p(gyc), f64p(yc), outer, D, inner, log);
        } else {
            dl_cpu_softmax_backward_f32(f32p(gx), f32p(gyc), f32p(yc), outer, D, inner, log);
        }
    }
    dl_tensor_release(gyc);
    dl_tensor_release(yc);
    return finish(gx, y->dtype);
}

dl_tensor *dl_softmax_forward(dl_tensor *x, int dim) {
    return softmax_fwd("softmax", x, dim, false);
}
dl_tensor *dl_log_softmax_forward(dl_tensor *x, int dim) {
    return softmax_fwd("log_softmax", x, dim, true);
}
dl_tensor *dl_softmax_backward(dl_tensor *gy, dl_tensor *y, int dim) {
    return softmax_bwd("softmax_backward", gy, y, dim, false);
}
dl_tensor *dl_log_softmax_backward(dl_tensor *gy, dl_tensor *y, int dim) {
    return softmax_bwd("log_softmax_backward", gy, y, dim, true);
}

/* --- class losses: layout and checks ------------------------------------------------------- */

typedef struct {
    int64_t N, C, S;
    int ndim; /* per-sample result: target's shape (input's without the class dim) */
    int64_t shape[DL_MAX_DIMS];
    dl_device dev; /* the operands' device */
} class_layout;

/* Checks input x (C), (N, C) or (N, C, d...), the target's shape (probs: x's
 * shape; else x's without the class dim, int64), weight, and that they share
 * a device. */
static int class_check(const char *op, dl_tensor *x, dl_tensor *target, dl_tensor *weight,
                       bool probs, class_layout *L) {
    char s1[128], s2[128], s3[128];
    if (x->ndim == 0)
        return dl_error("%s: input must have a class dimension, got a 0-dim tensor", op);
    L->C = x->ndim == 1 ? x->shape[0] : x->shape[1];
    L->N = x->ndim == 1 ? 1 : x->shape[0];
    L->S = 1;
    for (int i = 2; i < x->ndim; i++) L->S *= x->shape[i];
    L->ndim = 0;
    for (int i = 0; i < x->ndim; i++)
        if (i != (x->ndim == 1 ? 0 : 1)) L->shape[L->ndim++] = x->shape[i];
    dl_tensor *ts[3] = {x, target, weight};
    if (op_device(op, 3, ts, &L->dev)) return -1;
    if (probs) {
        if (check_same_shape(op, "probability target", target, "input", x)) return -1;
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
        if (need_floating(op, "weight", weight)) return -1;
        if (weight->ndim != 1 || weight->shape[0] != L->C)
            return dl_error("%s: weight must be 1-D with one entry per class (%lld), got shape %s",
                            op, (long long)L->C,
                            dl_shape_str(weight->ndim, weight->shape, s1, sizeof s1));
    }
    return 0;
}

/* The first target (dense int64 t on CUDA) that is neither ignore_index nor
 * in [0, C): its position in *bad (-1 when none) and its value in *value. */
static int cuda_first_bad(const char *op, dl_tensor *t, int64_t C, int64_t ignore_index,
                          int64_t *bad, int64_t *value) {
    int64_t n = dl_tensor_numel(t), first = n;
    dl_tensor *fb = dl_tensor_empty(0, NULL, DL_DTYPE_I64, dl_tensor_device(t));
    int rc = fb ? CUDA_RUN(op, target_check, vp(t), n, C, ignore_index, vp(fb)) : -1;
    if (!rc) rc = dl_tensor_item_i64(fb, &first);
    dl_tensor_release(fb);
    *bad = -1;
    if (rc || first >= n) return rc;
    *bad = first;
    dl_tensor *v = dl_tensor_as_strided(t, 0, NULL, NULL, t->offset + first);
    rc = v ? dl_tensor_item_i64(v, value) : -1;
    dl_tensor_release(v);
    return rc;
}

/* The target as a dense int64 tensor on dev whose entries were all checked
 * to be ignore_index or in [0, C). */
static dl_tensor *checked_target(const char *op, dl_tensor *target, int64_t C, int64_t ignore_index,
                                 dl_device dev) {
    dl_tensor *t = onto(dl_tensor_contiguous(target), dev);
    if (!t) return NULL;
    int64_t n = dl_tensor_numel(t), bad = -1, value = 0;
    if (on_cuda(dev)) {
        if (cuda_first_bad(op, t, C, ignore_index, &bad, &value)) {
            dl_tensor_release(t);
            return NULL;
        }
    } else {
        const int64_t *d = dl_tensor_data_ptr(t);
        for (int64_t i = 0; i < n && bad < 0; i++)
            if (d[i] != ignore_index && (d[i] < 0 || d[i] >= C)) bad = i, value = d[i];
    }
    if (bad >= 0) {
        dl_error("%s: target %lld is out of bounds for %lld classes (0-based; ignore_index is "
                 "%lld)",
                 op, (long long)value, (long long)C, (long long)ignore_index);
        dl_tensor_release(t);
        return NULL;
    }
    return t;
}

/* *out = the sum of the weights of the non-ignored targets (t and w dense, on dev). */
static int class_weight_sum(const char *op, const dl_tensor *t, const dl_tensor *w, dl_dtype cdt,
                            int64_t ignore_index, dl_device dev, double *out) {
    const int64_t *td = dl_tensor_data_ptr(t);
    int64_t n = dl_tensor_numel(t);
    if (on_cuda(dev)) {
        dl_tensor *acc = dl_tensor_empty(0, NULL, DL_DTYPE_F64, dev);
        int rc =
            acc ? CUDA_RUN(op, class_weight_sum, td, vp(w), cdt, n, ignore_index, vp(acc)) : -1;
        if (!rc) rc = dl_tensor_item(acc, out);
        dl_tensor_release(acc);
        return rc;
    }
    *out = cdt == DL_DTYPE_F64 ? dl_cpu_class_weight_sum_f64(td, f64p(w), n, ignore_index)
                               : dl_cpu_class_weight_sum_f32(td, f32p(w), n, ignore_index);
    return 0;
}

/* Reads the loss gradient: per-sample (none: a dense compute-dtype tensor of
 * the per-sample shape on dev in *g) or one factor g0 = gloss / denom. */
static int loss_grad(const char *op, dl_tensor *gloss, dl_reduction r, int ndim,
                     const int64_t *shape, dl_dtype cdt, double denom, dl_device dev, dl_tensor **g,
                     double *g0) {
    *g = NULL;
    *g0 = 0;
    if (need_floating(op, "grad", gloss)) return -1;
    if (r == DL_REDUCTION_NONE) {
        bool ok = gloss->ndim == ndim;
        for (int i = 0; ok && i < ndim; i++) ok = gloss->shape[i] == shape[i];
        if (!ok) {
            char s1[128], s2[128];
            return dl_error("%s: expected grad of shape %s (reduction 'none'), got %s", op,
                            dl_shape_str(ndim, shape, s1, sizeof s1),
                            dl_shape_str(gloss->ndim, gloss->shape, s2, sizeof s2));
        }
        *g = dense_on(gloss, cdt, dev);
        return *g ? 0 : -1;
    }
    double v;
    if (scalar_grad(op, gloss, &v)) return -1;
    *g0 = r == DL_REDUCTION_MEAN ? v / denom : v;
    return 0;
}

/* --- nll_loss ----------------------------------------------------------------------------- */

dl_tensor *dl_nll_loss_forward(dl_tensor *logp, dl_tensor *target, dl_tensor *weight,
                               int64_t ignore_index, dl_reduction reduction) {
    const char *op = "nll_loss";
    class_layout L;
    if (need_floating(op, "input", logp) || check_reduction(op, reduction) ||
        class_check(op, logp, target, weight, false, &L))
        return NULL;
    dl_dtype cdt = compute_dtype(logp->dtype);
    int64_t R = L.N * L.S;
    dl_tensor *h[4] = {NULL, NULL, NULL, NULL}; /* target, logp, weight, per */
    if (!(h[0] = checked_target(op, target, L.C, ignore_index, L.dev))) return NULL;
    if (!(h[1] = dense(logp, cdt)) || (weight && !(h[2] = dense(weight, cdt))) ||
        !(h[3] = dl_tensor_empty(1, &R, cdt, L.dev))) {
        release_all(h, 4);
        return NULL;
    }
    const int64_t *td = dl_tensor_data_ptr(h[0]);
    int rc = 0;
    if (on_cuda(L.dev))
        rc = CUDA_RUN(op, nll_loss, vp(h[3]), vp(h[1]), td, vp(h[2]), cdt, L.N, L.C, L.S,
                      ignore_index);
    else if (cdt == DL_DTYPE_F64)
        dl_cpu_nll_loss_f64(f64p(h[3]), f64p(h[1]), td, f64p(h[2]), L.N, L.C, L.S, ignore_index);
    else
        dl_cpu_nll_loss_f32(f32p(h[3]), f32p(h[1]), td, f32p(h[2]), L.N, L.C, L.S, ignore_index);
    double W = 1;
    if (!rc && reduction == DL_REDUCTION_MEAN)
        rc = class_weight_sum(op, h[0], h[2], cdt, ignore_index, L.dev, &W);
    if (rc) {
        release_all(h, 4);
        return NULL;
    }
    dl_tensor *per = h[3];
    h[3] = NULL;
    release_all(h, 3);
    return reduce_loss(per, reduction, W, L.ndim, L.shape, logp->dtype);
}

dl_tensor *dl_nll_loss_backward(dl_tensor *gloss, dl_tensor *logp, dl_tensor *target,
                                dl_tensor *weight, int64_t ignore_index, dl_reduction reduction) {
    const char *op = "nll_loss_backward";
    class_layout L;
    if (need_floating(op, "input", logp) || check_reduction(op, reduction) ||
        class_check(op, logp, target, weight, false, &L))
        return NULL;
    dl_dtype cdt = compute_dtype(logp->dtype);
    dl_tensor *h[4] = {NULL, NULL, NULL, NULL}; /* target, weight, g, gx */
    if (!(h[0] = checked_target(op, target, L.C, ignore_index, L.dev)) ||
        (weight && !(h[1] = dense(weight, cdt)))) {
        release_all(h, 4);
        return NULL;
    }
    double W = 1, g0;
    if ((reduction == DL_REDUCTION_MEAN &&
         class_weight_sum(op, h[0], h[1], cdt, ignore_index, L.dev, &W)) ||
        loss_grad(op, gloss, reduction, L.ndim, L.shape, cdt, W, L.dev, &h[2], &g0) ||
        !(h[3] = dl_tensor_empty(logp->ndim, logp->shape, cdt, L.dev))) {
        release_all(h, 4);
        return NULL;
    }
    const int64_t *td = dl_tensor_data_ptr(h[0]);
    if (on_cuda(L.dev)) {
        if (CUDA_RUN(op, nll_loss_backward, vp(h[3]), vp(h[2]), g0, td, vp(h[1]), cdt, L.N, L.C,
                     L.S, ignore_index)) {
            release_all(h, 4);
            return NULL;
        }
    } else if (cdt == DL_DTYPE_F64) {
        dl_cpu_nll_loss_backward_f64(f64p(h[3]), f64p(h[2]), g0, td, f64p(h[1]), L.N, L.C, L.S,
                                     ignore_index);
    } else {
        dl_cpu_nll_loss_backward_f32(f32p(h[3]), f32p(h[2]), (float)g0, td, f32p(h[1]), L.N, L.C,
                                     L.S, ignore_index);
    }
    dl_tensor *gx = h[3];
    h[3] = NULL;
    release_all(h, 3);
    return finish(gx, logp->dtype);
}

/* --- cross_entropy ------------------------------------------------------------------------ */

static int ce_check(const char *op, dl_tensor *x, dl_tensor *target, dl_tensor *weight,
                    dl_reduction reduction, double eps, bool *probs, class_layout *L) {
    if (need_floating(op, "input", x) || check_reduction(op, reduction)) return -1;
    *probs = dl_dtype_is_floating(target->dtype);
    if (!*probs && target->dtype != DL_DTYPE_I64)
        return dl_error("%s: target must be int64 class indices or floating-point class "
                        "probabilities, got %s",
                        op, dl_dtype_name(target->dtype));
    if (!(eps >= 0 && eps <= 1))
        return dl_error("%s: label_smoothing must be in [0, 1], got %g", op, eps);
    return class_check(op, x, target, weight, *probs, L);
}

/* The target of a cross entropy on L's device: dense probabilities in the
 * compute dtype, or checked class indices. */
static dl_tensor *ce_target(const char *op, dl_tensor *target, bool probs, dl_dtype cdt,
                            int64_t ignore_index, const class_layout *L) {
    return probs ? dense_on(target, cdt, L->dev)
                 : checked_target(op, target, L->C, ignore_index, L->dev);
}

/* Runs the forward kernel of a cross entropy into per (h: target, x, weight). */
static int ce_forward_kernels(const char *op, dl_tensor *const *h, dl_tensor *per, bool probs,
                              dl_dtype cdt, const class_layout *L, int64_t ignore_index,
                              double eps) {
    int64_t N = L->N, C = L->C, S = L->S;
    if (on_cuda(L->dev))
        return probs ? CUDA_RUN(op, cross_entropy_prob, vp(per), vp(h[1]), vp(h[0]), vp(h[2]), cdt,
                                N, C, S, eps)
                     : CUDA_RUN(op, cross_entropy, vp(per), vp(h[1]), vp(h[0]), vp(h[2]), cdt, N, C,
                                S, ignore_index, eps);
    if (probs) {
        if (cdt == DL_DTYPE_F64)
            dl_cpu_cross_entropy_prob_f64(f64p(per), f64p(h[1]), f64p(h[0]), f64p(h[2]), N, C, S,
                                          eps);
        else
            dl_cpu_cross_entropy_prob_f32(f32p(per), f32p(h[1]), f32p(h[0]), f32p(h[2]), N, C, S,
                                          eps);
        return 0;
    }
    const int64_t *td = dl_tensor_data_ptr(h[0]);
    if (cdt == DL_DTYPE_F64)
        dl_cpu_cross_entropy_f64(f64p(per), f64p(h[1]), td, f64p(h[2]), N, C, S, ignore_index, eps);
    else
        dl_cpu_cross_entropy_f32(f32p(per), f32p(h[1]), td, f32p(h[2]), N, C, S, ignore_index, eps);
    return 0;
}

dl_tensor *dl_cross_entropy_forward(dl_tensor *x, dl_tensor *target, dl_tensor *weight,
                                    int64_t ignore_index, dl_reduction reduction,
                                    double label_smoothing) {
    const char *op = "cross_entropy";
    class_layout L;
    bool probs;
    if (ce_check(op, x, target, weight, reduction, label_smoothing, &probs, &L)) return NULL;
    dl_dtype cdt = compute_dtype(x->dtype);
    int64_t R = L.N * L.S;
    dl_tensor *h[4] = {NULL, NULL, NULL, NULL}; /* target, x, weight, per */
    h[0] = ce_target(op, target, probs, cdt, ignore_index, &L);
    if (!h[0] || !(h[1] = dense(x, cdt)) || (weight && !(h[2] = dense(weight, cdt))) ||
        !(h[3] = dl_tensor_empty(1, &R, cdt, L.dev))) {
        release_all(h, 4);
        return NULL;
    }
    double denom = (double)R;
    int rc = ce_forward_kernels(op, h, h[3], probs, cdt, &L, ignore_index, label_smoothing);
    if (!rc && !probs && reduction == DL_REDUCTION_MEAN)
        rc = class_weight_sum(op, h[0], h[2], cdt, ignore_index, L.dev, &denom);
    if (rc) {
        release_all(h, 4);
        return NULL;
    }
    dl_tensor *per = h[3];
    h[3] = NULL;
    release_all(h, 3);
    return reduce_loss(per, reduction, denom, L.ndim, L.shape, x->dtype);
}

/* Runs the backward kernel of a cross entropy (h: target, x, weight, g, gx, gtarget). */
static int ce_backward_kernels(const char *op, dl_tensor *const *h, double g0, bool probs,
                               dl_dtype cdt, const class_layout *L, int64_t ignore_index,
                               double eps) {
    int64_t N = L->N, C = L->C, S = L->S;
    if (on_cuda(L->dev))
        return probs ? CUDA_RUN(op, cross_entropy_prob_backward, vp(h[4]), vp(h[5]), vp(h[3]), g0,
                                vp(h[1]), vp(h[0]), vp(h[2]), cdt, N, C, S, eps)
                     : CUDA_RUN(op, cross_entropy_backward, vp(h[4]), vp(h[3]), g0, vp(h[1]),
                                vp(h[0]), vp(h[2]), cdt, N, C, S, ignore_index, eps);
    if (probs) {
        if (cdt == DL_DTYPE_F64)
            dl_cpu_cross_entropy_prob_backward_f64(f64p(h[4]), f64p(h[5]), f64p(h[3]), g0,
                                                   f64p(h[1]), f64p(h[0]), f64p(h[2]), N, C, S,
                                                   eps);
        else
            dl_cpu_cross_entropy_prob_backward_f32(f32p(h[4]), f32p(h[5]), f32p(h[3]), (float)g0,
                                                   f32p(h[1]), f32p(h[0]), f32p(h[2]), N, C, S,
                                                   eps);
        return 0;
    }
    const int64_t *td = dl_tensor_data_ptr(h[0]);
    if (cdt == DL_DTYPE_F64)
        dl_cpu_cross_entropy_backward_f64(f64p(h[4]), f64p(h[3]), g0, f64p(h[1]), td, f64p(h[2]), N,
                                          C, S, ignore_index, eps);
    else
        dl_cpu_cross_entropy_backward_f32(f32p(h[4]), f32p(h[3]), (float)g0, f32p(h[1]), td,
                                          f32p(h[2]), N, C, S, ignore_index, eps);
    return 0;
}

int dl_cross_entropy_backward(dl_tensor *gloss, dl_tensor *x, dl_tensor *target, dl_tensor *weight,
                              int64_t ignore_index, dl_reduction reduction, double label_smoothing,
                              dl_tensor **gx, dl_tensor **gtarget) {
    const char *op = "cross_entropy_backward";
    *gx = NULL;
    if (gtarget) *gtarget = NULL;
    class_layout L;
    bool probs;
    if (ce_check(op, x, target, weight, reduction, label_smoothing, &probs, &L)) return -1;
    dl_dtype cdt = compute_dtype(x->dtype);
    bool want_gt = probs && gtarget;
    dl_tensor *h[6] = {NULL}; /* target, x, weight, g, gx, gtarget */
    h[0] = ce_target(op, target, probs, cdt, ignore_index, &L);
    if (!h[0] || !(h[1] = dense(x, cdt)) || (weight && !(h[2] = dense(weight, cdt)))) {
        release_all(h, 6);
        return -1;
    }
    double denom = probs ? (double)(L.N * L.S) : 1, g0;
    if ((!probs && reduction == DL_REDUCTION_MEAN &&
         class_weight_sum(op, h[0], h[2], cdt, ignore_index, L.dev, &denom)) ||
        loss_grad(op, gloss, reduction, L.ndim, L.shape, cdt, denom, L.dev, &h[3], &g0) ||
        !(h[4] = dl_tensor_empty(x->ndim, x->shape, cdt, L.dev)) ||
        (want_gt && !(h[5] = dl_tensor_empty(x->ndim, x->shape, cdt, L.dev))) ||
        ce_backward_kernels(op, h, g0, probs, cdt, &L, ignore_index, label_smoothing)) {
        release_all(h, 6);
        return -1;
    }
    dl_tensor *rx = h[4], *rt = h[5];
    h[4] = h[5] = NULL;
    release_all(h, 4);
    *gx = finish(rx, x->dtype);
    if (!*gx) {
        dl_tensor_release(rt);
        return -1;
    }
    if (want_gt) {
        *gtarget = finish(rt, target->dtype);
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
    release_all(ts, 4);
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
    dl_tensor *d = dense_on(e, a->cdt, a->dev);
    dl_tensor_release(e);
    return d;
}

/* same_shape: y must have x's shape (BCE); else x and y broadcast. */
static int pw_prepare(const char *op, dl_tensor *x, dl_tensor *y, dl_tensor *w, dl_tensor *pw,
                      dl_reduction r, bool same_shape, pw_args *a) {
    memset(a, 0, sizeof *a);
    if (need_floating(op, "input", x) || need_floating(op, "target", y) || check_reduction(op, r))
        return -1;
    if (w && need_floating(op, "weight", w)) return -1;
    if (pw && need_floating(op, "pos_weight", pw)) return -1;
    dl_tensor *ts[4] = {x, y, w, pw};
    if (op_device(op, 4, ts, &a->dev)) return -1;
    if (same_shape) {
        if (check_same_shape(op, "target", y, "input", x)) return -1;
        a->ndim = x->ndim;
        memcpy(a->shape, x->shape, sizeof a->shape);
    } else {
        a->ndim = dl_broadcast_shapes(op, x->ndim, x->shape, y->ndim, y->shape, a->shape);
        if (a->ndim < 0) return -1;
    }
    a->n = 1;
    for (int i = 0; i < a->ndim; i++) a->n *= a->shape[i];
    a->dt = dl_promote_types(x->dtype, y->dtype);
    a->cdt = compute_dtype(a->dt);
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
    if (per && on_cuda(a.dev)) {
        if (CUDA_RUN(op, pointwise_loss, vp(per), vp(a.x), vp(a.y), vp(a.w), vp(a.pw), a.cdt, a.n,
                     kind)) {
            dl_tensor_release(per);
            per = NULL;
        }
    } else if (per) {
        if (a.cdt == DL_DTYPE_F64)
            dl_cpu_pointwise_loss_f64(f64p(per), f64p(a.x), f64p(a.y), f64p(a.w), f64p(a.pw), a.n,
                                      kind);
        else
            dl_cpu_pointwise_loss_f32(f32p(per), f32p(a.x), f32p(a.y), f32p(a.w), f32p(a.pw), a.n,
                                      kind);
    }
    pw_release(&a);
    return reduce_loss(per, r, (double)a.n, a.ndim, a.shape, a.dt);
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
    int rc = loss_grad(op, gloss, r, a.ndim, a.shape, a.cdt, (double)a.n, a.dev, &g, &g0);
    if (!rc && gx && !(rx = dl_tensor_empty(a.ndim, a.shape, a.cdt, a.dev))) rc = -1;
    if (!rc && gy && !(ry = dl_tensor_empty(a.ndim, a.shape, a.cdt, a.dev))) rc = -1;
    if (!rc && on_cuda(a.dev))
        rc = CUDA_RUN(op, pointwise_loss_backward, vp(rx), vp(ry), vp(g), g0, vp(a.x), vp(a.y),
                      vp(a.w), vp(a.pw), a.cdt, a.n, kind);
    else if (!rc && a.cdt == DL_DTYPE_F64)
        dl_cpu_pointwise_loss_backward_f64(f64p(rx), f64p(ry), f64p(g), g0, f64p(a.x), f64p(a.y),
                                           f64p(a.w), f64p(a.pw), a.n, kind);
    else if (!rc)
        dl_cpu_pointwise_loss_backward_f32(f32p(rx), f32p(ry), f32p(g), (float)g0, f32p(a.x),
                                           f32p(a.y), f32p(a.w), f32p(a.pw), a.n, kind);
    dl_tensor_release(g);
    pw_release(&a);
    if (rc) {
        dl_tensor_release(rx);
        dl_tensor_release(ry);
        return -1;
    }
    if (gx && !(*gx = finish(sum_to(rx, x->ndim, x->shape), x->dtype))) {
        dl_tensor_release(ry);
        return -1;
    }
    if (gy && !(*gy = finish(sum_to(ry, y->ndim, y->shape), y->dtype))) {
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

/* --- relu --------------------------------------------------------------------------------- */

/* relu_backward and dropout run on the CPU or CUDA (the elementwise family's
 * kernels, cuda/elementwise.cu): their tensors need a floating dtype on one
 * device (a 0-dim CPU tensor may stand beside CUDA ones). */
static int check_floating(const char *op, const char *what, const dl_tensor *t) {
    if (dl_dtype_is_floating(t->dtype)) return 0;
    return dl_error("%s: %s must be a floating-point tensor, got %s", op, what,
                    dl_dtype_name(t->dtype));
}

dl_tensor *dl_relu_backward(dl_tensor *gy, dl_tensor *y) {
    const char *op = "relu_backward";
    dl_tensor *ts[2] = {gy, y};
    dl_device dev;
    if (check_floating(op, "grad", gy) || check_floating(op, "output", y) ||
        check_same_shape(op, "grad", gy, "output", y) || dl_common_device(op, 2, ts, &dev))
        return NULL;
    dl_tensor *g = dl_tensor_to_dtype(gy, y->dtype);
    /* a channels-last y gives a channels-last gradient (no layout change
     * between the convolutions of a channels-last network) */
    bool keep = dl_is_channels_last(y) && !dl_tensor_is_contiguous(y);
    dl_tensor *gx = !g     ? NULL
                    : keep ? dl_tensor_empty_like_layout(y, y->dtype, dev)
                           : dl_tensor_empty(y->ndim, y->shape, y->dtype, dev);
    int rc = 0;
    if (gx && dev.type != DL_DEVICE_CUDA)
        dl_cpu_threshold_backward(gx, g, y, 0.0);
    else if (gx)
        rc = dl_cuda_ew && dl_cuda_ew->threshold_backward
                 ? dl_cuda_ew->threshold_backward(gx, g, y, 0.0)
                 : dl_cuda_missing(op);
    dl_tensor_release(g);
    if (rc) {
        dl_tensor_release(gx);
        return NULL;
    }
    return gx;
}

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
    if (!dl_cuda_ew || !dl_cuda_ew->mask_scale) return dl_cuda_missing(op);
    return dl_cuda_ew->mask_scale(out, x, mask, scale);
}

int dl_dropout_forward(dl_tensor *x, double p, bool training, dl_generator *g, dl_tensor **out,
                       dl_tensor **mask) {
    const char *op = "dropout";
    *out = NULL;
    if (mask) *mask = NULL;
    if (check_floating(op, "input", x) || check_p(op, p)) return -1;
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
    if (check_floating(op, "grad", gy) || check_p(op, p)) return NULL;
    if (!mask) return dl_tensor_retain(gy);
    dl_tensor *ts[2] = {gy, mask};
    dl_device dev;
    if (dl_common_device(op, 2, ts, &dev)) return NULL;
    if (mask->dtype != DL_DTYPE_BOOL) {
        dl_error("%s: mask must be bool, got %s", op, dl_dtype_name(mask->dtype));
        return NULL;
    }
    if (check_same_shape(op, "grad", gy, "mask", mask)) return NULL;
    dl_tensor *gx = dl_tensor_empty(gy->ndim, gy->shape, gy->dtype, dev);
    if (gx && mask_scale(op, gx, gy, mask, dropout_scale(p))) {
        dl_tensor_release(gx);
        return NULL;
    }
    return gx;
}

/* --- pad ---------------------------------------------------------------------------------- */

int dl_pad_mode_parse(const char *op, const char *name, dl_pad_mode *out) {
    static const char *const names[] = {"constant", "reflect", "replicate", "circular"};
    for (int i = 0; i < 4; i++)
        if (name && strcmp(name, names[i]) == 0) {
            *out = (dl_pad_mode)i;
            return 0;
        }
    return dl_error("%s: unknown padding mode '%s' (expected 'constant', 'reflect', 'replicate' "
                    "or 'circular')",
                    op, name ? name : "(null)");
}

static const char *pad_mode_name(dl_pad_mode m) {
    switch (m) {
    case DL_PAD_CONSTANT: return "constant";
    case DL_PAD_REFLECT: return "reflect";
    case DL_PAD_REPLICATE: return "replicate";
    case DL_PAD_CIRCULAR: return "circular";
    }
    return "?";
}

/* Checks pads against an input shape and writes the output shape. */
static int pad_check(const char *op, int ndim, const int64_t *shape, int npads, const int64_t *pads,
                     dl_pad_mode mode, int64_t *oshape) {
    if (mode < DL_PAD_CONSTANT || mode > DL_PAD_CIRCULAR)
        return dl_error("%s: invalid padding mode %d", op, (int)mode);
    if (npads < 0 || npads % 2)
        return dl_error("%s: the padding list must have an even length ({left, right, top, "
                        "bottom, ...}), got %d",
                        op, npads);
    int k = npads / 2;
    if (k > ndim)
        return dl_error("%s: %d pads pad %d dims, but the input has only %d", op, npads, k, ndim);
    if (mode != DL_PAD_CONSTANT && k > 3)
        return dl_error("%s: %s padding pads the last 1 to 3 dims only, got %d pads", op,
                        pad_mode_name(mode), npads);
    memcpy(oshape, shape, (size_t)ndim * sizeof *oshape);
    for (int j = 0; j < k; j++) {
        int d = ndim - 1 - j;
        int64_t b = pads[2 * j], a = pads[2 * j + 1], in = shape[d];
        oshape[d] = in + b + a;
        if (oshape[d] < 0)
            return dl_error("%s: padding (%lld, %lld) of dimension %d (size %lld) gives a "
                            "negative size %lld",
                            op, (long long)b, (long long)a, d + 1, (long long)in,
                            (long long)oshape[d]);
        if (mode == DL_PAD_REFLECT && ((b > 0 && b >= in) || (a > 0 && a >= in)))
            return dl_error("%s: reflect padding (%lld, %lld) must be less than the size %lld of "
                            "dimension %d",
                            op, (long long)b, (long long)a, (long long)in, d + 1);
        if (mode == DL_PAD_REPLICATE && in == 0 && oshape[d] > 0)
            return dl_error("%s: replicate padding of dimension %d, which is empty", op, d + 1);
        if (mode == DL_PAD_CIRCULAR && (b < 0 || a < 0 || b > in || a > in))
            return dl_error("%s: circular padding (%lld, %lld) of dimension %d must lie in [0, "
                            "%lld] (its size)",
                            op, (long long)b, (long long)a, d + 1, (long long)in);
    }
    return 0;
}

/* Narrows t's last k dims to [start[j], start[j] + len[j]) (j counts from the
 * last dim); a new view. */
static dl_tensor *narrow_last(dl_tensor *t, int k, const int64_t *start, const int64_t *len) {
    dl_tensor *v = dl_tensor_retain(t);
    for (int j = 0; j < k && v; j++) {
        dl_tensor *n = dl_tensor_narrow(v, t->ndim - 1 - j, start[j], len[j]);
        dl_tensor_release(v);
        v = n;
    }
    return v;
}

/* Constant mode: the input region kept and where it lands in the output.
 * Returns false when nothing of the input survives the crops. */
static bool pad_regions(int ndim, const int64_t *shape, int npads, const int64_t *pads,
                        int64_t *in_start, int64_t *out_start, int64_t *len) {
    bool any = true;
    for (int j = 0; j < npads / 2; j++) {
        int64_t b = pads[2 * j], a = pads[2 * j + 1], in = shape[ndim - 1 - j];
        in_start[j] = b < 0 ? -b : 0;
        out_start[j] = b > 0 ? b : 0;
        len[j] = in - in_start[j] - (a < 0 ? -a : 0);
        if (len[j] <= 0) any = false;
    }
    return any;
}

/* The index map of one padded dim: output index o reads input index map[o]. */
static int pad_map(const char *op, int64_t *map, int64_t osz, int64_t isz, int64_t before,
                   dl_pad_mode mode) {
    for (int64_t o = 0; o < osz; o++) {
        int64_t i = o - before;
        switch (mode) {
        case DL_PAD_REFLECT:
            if (i < 0) i = -i;
            if (i >= isz) i = 2 * (isz - 1) - i;
            break;
        case DL_PAD_REPLICATE: i = i < 0 ? 0 : (i >= isz ? isz - 1 : i); break;
        case DL_PAD_CIRCULAR: i = ((i % isz) + isz) % isz; break;
        default: break;
        }
        if (i < 0 || i >= isz)
            return dl_error("%s: %s padding of a dimension of size %lld is too large", op,
                            pad_mode_name(mode), (long long)isz);
        map[o] = i;
    }
    return 0;
}

/* The (outer, D2, D1, D0) view and index maps of a non-constant pad. */
typedef struct {
    int64_t outer, osz[3], isz[3];
    int64_t *buf; /* all three maps */
    const int64_t *map[3];
} pad_plan;

static int pad_plan_make(const char *op, int ndim, const int64_t *shape, const int64_t *oshape,
                         int npads, const int64_t *pads, dl_pad_mode mode, pad_plan *p) {
    int k = npads / 2;
    p->outer = 1;
    for (int i = 0; i < ndim - k; i++) p->outer *= shape[i];
    for (int j = 0; j < 3; j++) {
        p->osz[j] = j < k ? oshape[ndim - 1 - j] : 1;
        p->isz[j] = j < k ? shape[ndim - 1 - j] : 1;
    }
    p->buf = malloc((size_t)(p->osz[0] + p->osz[1] + p->osz[2] + 1) * sizeof *p->buf);
    if (!p->buf) return dl_error("%s: out of memory for the index maps", op);
    int64_t *m = p->buf;
    for (int j = 0; j < 3; j++) {
        p->map[j] = m;
        if (j < k ? pad_map(op, m, p->osz[j], p->isz[j], pads[2 * j], mode) : (m[0] = 0, 0)) {
            free(p->buf);
            return -1;
        }
        m += p->osz[j];
    }
    return 0;
}

dl_tensor *dl_pad_forward(dl_tensor *x, int npads, const int64_t *pads, dl_pad_mode mode,
                          double value) {
    const char *op = "pad";
    int64_t oshape[DL_MAX_DIMS];
    if (pad_check(op, x->ndim, x->shape, npads, pads, mode, oshape)) return NULL;
    dl_device dev = dl_tensor_device(x);
    if (mode == DL_PAD_CONSTANT) {
        dl_tensor *out = dl_tensor_full(x->ndim, oshape, value, x->dtype, dev);
        int64_t is[DL_MAX_DIMS], os[DL_MAX_DIMS], len[DL_MAX_DIMS];
        if (!out || !pad_regions(x->ndim, x->shape, npads, pads, is, os, len)) return out;
        dl_tensor *src = narrow_last(x, npads / 2, is, len);
        dl_tensor *dst = src ? narrow_last(out, npads / 2, os, len) : NULL;
        int rc = dst ? dl_tensor_copy_(dst, src) : -1;
        dl_tensor_release(src);
        dl_tensor_release(dst);
        if (rc) {
            dl_tensor_release(out);
            return NULL;
        }
        return out;
    }
    pad_plan p;
    if (pad_plan_make(op, x->ndim, x->shape, oshape, npads, pads, mode, &p)) return NULL;
    dl_tensor *xc = dl_tensor_contiguous(x);
    dl_tensor *out = xc ? dl_tensor_empty(x->ndim, oshape, x->dtype, dev) : NULL;
    if (out && dev.type == DL_DEVICE_CUDA) {
        if (!dl_cuda_idx || !dl_cuda_idx->pad_gather
                ? dl_cuda_missing(op)
                : dl_cuda_idx->pad_gather(out, xc, p.outer, p.osz, p.isz, p.map)) {
            dl_tensor_release(out);
            out = NULL;
        }
    } else if (out) {
        dl_cpu_pad_gather(dl_tensor_data_ptr(out), dl_tensor_data_ptr(xc), dl_dtype_size(x->dtype),
                          p.outer, p.osz, p.isz, p.map);
    }
    free(p.buf);
    dl_tensor_release(xc);
    return out;
}

dl_tensor *dl_pad_backward(dl_tensor *gy, int ndim, const int64_t *shape, int npads,
                           const int64_t *pads, dl_pad_mode mode) {
    const char *op = "pad_backward";
    int64_t oshape[DL_MAX_DIMS];
    if (!dl_dtype_is_floating(gy->dtype)) {
        dl_error("%s: grad must be a floating-point tensor, got %s", op, dl_dtype_name(gy->dtype));
        return NULL;
    }
    dl_device dev = dl_tensor_device(gy);
    if (ndim < 0 || ndim > DL_MAX_DIMS) {
        dl_error("%s: invalid input rank %d", op, ndim);
        return NULL;
    }
    for (int i = 0; i < ndim; i++)
        if (shape[i] < 0) {
            dl_error("%s: negative size %lld in the input shape", op, (long long)shape[i]);
            return NULL;
        }
    if (pad_check(op, ndim, shape, npads, pads, mode, oshape)) return NULL;
    bool ok = gy->ndim == ndim;
    for (int i = 0; ok && i < ndim; i++) ok = gy->shape[i] == oshape[i];
    if (!ok) {
        char s1[128], s2[128];
        dl_error("%s: expected grad of the padded shape %s, got %s", op,
                 dl_shape_str(ndim, oshape, s1, sizeof s1),
                 dl_shape_str(gy->ndim, gy->shape, s2, sizeof s2));
        return NULL;
    }
    if (mode == DL_PAD_CONSTANT) {
        dl_tensor *gx = dl_tensor_zeros(ndim, shape, gy->dtype, dev);
        int64_t is[DL_MAX_DIMS], os[DL_MAX_DIMS], len[DL_MAX_DIMS];
        if (!gx || !pad_regions(ndim, shape, npads, pads, is, os, len)) return gx;
        dl_tensor *src = narrow_last(gy, npads / 2, os, len);
        dl_tensor *dst = src ? narrow_last(gx, npads / 2, is, len) : NULL;
        int rc = dst ? dl_tensor_copy_(dst, src) : -1;
        dl_tensor_release(src);
        dl_tensor_release(dst);
        if (rc) {
            dl_tensor_release(gx);
            return NULL;
        }
        return gx;
    }
    pad_plan p;
    if (pad_plan_make(op, ndim, shape, oshape, npads, pads, mode, &p)) return NULL;
    dl_dtype cdt = compute_dtype(gy->dtype);
    dl_tensor *gyc = dense(gy, cdt);
    dl_tensor *gx = gyc ? dl_tensor_empty(ndim, shape, cdt, dev) : NULL;
    if (gx && dev.type == DL_DEVICE_CUDA) {
        if (!dl_cuda_idx || !dl_cuda_idx->pad_scatter
                ? dl_cuda_missing(op)
                : dl_cuda_idx->pad_scatter(gx, gyc, p.outer, p.osz, p.isz, p.map)) {
            dl_tensor_release(gx);
            gx = NULL;
        }
    } else if (gx) {
        if (cdt == DL_DTYPE_F64)
            dl_cpu_pad_scatter_f64(f64p(gx), f64p(gyc), p.outer, p.osz, p.isz, p.map);
        else
            dl_cpu_pad_scatter_f32(f32p(gx), f32p(gyc), p.outer, p.osz, p.isz, p.map);
    }
    free(p.buf);
    dl_tensor_release(gyc);
    return finish(gx, gy->dtype);
}

/* --- with autograd -----------------------------------------------------------------------------
 * Each op records one node holding what its *_backward needs: saved tensors
 * (version-checked) and the op's parameters in the ctx. */
#include "autograd/autograd.h"
#include "ops/grad_util.h"

typedef struct {
    int dim;
    int64_t ignore_index;
    dl_reduction reduction;
    double label_smoothing, p;
    dl_pad_mode mode;
    int npads;
    int64_t pads[2 * DL_MAX_DIMS];
} nnf_ctx;

static dl_node *nnf_node(const char *name, dl_backward_fn fn, int n_in, dl_tensor *const *in) {
    return dl_node_new(name, fn, n_in, in, 1, sizeof(nnf_ctx));
}

/* Finishes a recording that failed part-way: drops the node and the output. */
static dl_tensor *nnf_abort(dl_node *n, dl_tensor *out) {
    dl_node_release(n);
    dl_tensor_release(out);
    return NULL;
}

static int softmax_bw(dl_node *n, dl_tensor *const *gout, dl_tensor **gin) {
    const nnf_ctx *c = n->ctx;
    dl_tensor *y = dl_node_saved(n, 0);
    if (!y) return -1;
    gin[0] = strcmp(n->name, "SoftmaxBackward") == 0 ? dl_softmax_backward(gout[0], y, c->dim)
                                                     : dl_log_softmax_backward(gout[0], y, c->dim);
    return gin[0] ? 0 : -1;
}

static dl_tensor *softmax_common(dl_tensor *x, int dim, bool log) {
    dl_tensor *y = log ? dl_log_softmax_forward(x, dim) : dl_softmax_forward(x, dim);
    if (!y || !dl_needs_grad1(x)) return y;
    dl_node *n = nnf_node(log ? "LogSoftmaxBackward" : "SoftmaxBackward", softmax_bw, 1, &x);
    if (!n || dl_node_save(n, y) < 0) return nnf_abort(n, y);
    ((nnf_ctx *)n->ctx)->dim = dim;
    return dl_node_finish(n, y);
}

dl_tensor *dl_softmax(dl_tensor *x, int dim) {
    return softmax_common(x, dim, false);
}
dl_tensor *dl_log_softmax(dl_tensor *x, int dim) {
    return softmax_common(x, dim, true);
}

/* inputs: 0 = x/logp, 1 = target, 2 = weight; saved: x, target, weight */
static int nll_bw(dl_node *n, dl_tensor *const *gout, dl_tensor **gin) {
    const nnf_ctx *c = n->ctx;
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
    dl_tensor *in[1] = {logp};
    dl_node *n = nnf_node("NllLossBackward", nll_bw, 1, in);
    if (!n || dl_node_save(n, logp) < 0 || dl_node_save(n, target) < 0 ||
        dl_node_save(n, weight) < 0)
        return nnf_abort(n, out);
    nnf_ctx *c = n->ctx;
    c->ignore_index = ignore_index;
    c->reduction = reduction;
    return dl_node_finish(n, out);
}

static int ce_bw(dl_node *n, dl_tensor *const *gout, dl_tensor **gin) {
    const nnf_ctx *c = n->ctx;
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
    dl_node *n = nnf_node("CrossEntropyBackward", ce_bw, 2, in);
    if (!n || dl_node_save(n, x) < 0 || dl_node_save(n, target) < 0 || dl_node_save(n, weight) < 0)
        return nnf_abort(n, out);
    nnf_ctx *c = n->ctx;
    c->ignore_index = ignore_index;
    c->reduction = reduction;
    c->label_smoothing = label_smoothing;
    return dl_node_finish(n, out);
}

typedef int (*pair_bw_fn)(dl_tensor *, dl_tensor *, dl_tensor *, dl_reduction, dl_tensor **,
                          dl_tensor **);

static int pair_bw(dl_node *n, dl_tensor *const *gout, dl_tensor **gin, pair_bw_fn fn) {
    const nnf_ctx *c = n->ctx;
    dl_tensor *x = dl_node_saved(n, 0), *y = dl_node_saved(n, 1);
    if (!x || !y) return -1;
    return fn(gout[0], x, y, c->reduction, dl_node_needs_grad(n, 0) ? &gin[0] : NULL,
              dl_node_needs_grad(n, 1) ? &gin[1] : NULL);
}

static int mse_bw(dl_node *n, dl_tensor *const *g, dl_tensor **gin) {
    return pair_bw(n, g, gin, dl_mse_loss_backward);
}
static int l1_bw(dl_node *n, dl_tensor *const *g, dl_tensor **gin) {
    return pair_bw(n, g, gin, dl_l1_loss_backward);
}

static dl_tensor *pair_loss(const char *name, dl_backward_fn bw, dl_tensor *out, dl_tensor *x,
                            dl_tensor *y, dl_reduction reduction) {
    if (!out || !dl_needs_grad2(x, y)) return out;
    dl_tensor *in[2] = {x, y};
    dl_node *n = nnf_node(name, bw, 2, in);
    if (!n || dl_node_save(n, x) < 0 || dl_node_save(n, y) < 0) return nnf_abort(n, out);
    ((nnf_ctx *)n->ctx)->reduction = reduction;
    return dl_node_finish(n, out);
}

dl_tensor *dl_mse_loss(dl_tensor *x, dl_tensor *y, dl_reduction reduction) {
    return pair_loss("MseLossBackward", mse_bw, dl_mse_loss_forward(x, y, reduction), x, y,
                     reduction);
}

dl_tensor *dl_l1_loss(dl_tensor *x, dl_tensor *y, dl_reduction reduction) {
    return pair_loss("L1LossBackward", l1_bw, dl_l1_loss_forward(x, y, reduction), x, y, reduction);
}

static int bce_bw(dl_node *n, dl_tensor *const *gout, dl_tensor **gin) {
    const nnf_ctx *c = n->ctx;
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
    dl_tensor *in[2] = {x, y};
    dl_node *n = nnf_node("BinaryCrossEntropyWithLogitsBackward", bce_bw, 2, in);
    if (!n || dl_node_save(n, x) < 0 || dl_node_save(n, y) < 0 || dl_node_save(n, weight) < 0 ||
        dl_node_save(n, pos_weight) < 0)
        return nnf_abort(n, out);
    ((nnf_ctx *)n->ctx)->reduction = reduction;
    return dl_node_finish(n, out);
}

static int dropout_bw(dl_node *n, dl_tensor *const *gout, dl_tensor **gin) {
    const nnf_ctx *c = n->ctx;
    dl_tensor *mask = n->saved[0].t;
    gin[0] = dl_dropout_backward(gout[0], mask, c->p);
    return gin[0] ? 0 : -1;
}

int dl_dropout(dl_tensor *x, double p, bool training, dl_tensor **out, dl_tensor **mask) {
    dl_tensor *m = NULL;
    if (dl_dropout_forward(x, p, training, NULL, out, &m)) return -1;
    if (training && dl_needs_grad1(x)) {
        dl_node *n = nnf_node("DropoutBackward", dropout_bw, 1, &x);
        if (!n || dl_node_save(n, m) < 0) {
            dl_node_release(n);
            dl_tensor_release(*out);
            dl_tensor_release(m);
            *out = NULL;
            return -1;
        }
        ((nnf_ctx *)n->ctx)->p = p;
        dl_node_finish(n, *out);
    }
    if (mask)
        *mask = m;
    else
        dl_tensor_release(m);
    return 0;
}

static int pad_bw(dl_node *n, dl_tensor *const *gout, dl_tensor **gin) {
    const nnf_ctx *c = n->ctx;
    const dl_tensor_meta *m = &n->input_meta[0];
    gin[0] = dl_pad_backward(gout[0], m->ndim, m->shape, c->npads, c->pads, c->mode);
    return gin[0] ? 0 : -1;
}

dl_tensor *dl_pad(dl_tensor *x, int npads, const int64_t *pads, dl_pad_mode mode, double value) {
    dl_tensor *out = dl_pad_forward(x, npads, pads, mode, value);
    if (!out || !dl_needs_grad1(x)) return out;
    dl_node *n = nnf_node("PadBackward", pad_bw, 1, &x);
    if (!n) return nnf_abort(n, out);
    nnf_ctx *c = n->ctx;
    c->mode = mode;
    c->npads = npads;
    memcpy(c->pads, pads, sizeof(int64_t) * (size_t)npads);
    return dl_node_finish(n, out);
}
