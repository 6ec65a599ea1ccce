/* ops/batchnorm.c - the batchnorm family (see batchnorm.h): batch norm's
 * checks, statistics updates and dispatch to the CPU kernels
 * (cpu/batchnorm.c) or the CUDA ones (cuda/batchnorm.cu); the autograd node at
 * the end.
 *
 * On CUDA, half data keeps its dtype (the kernels compute in float32); on
 * both backends a channels-last input stays channels-last.  Invariants:
 * operands are never modified except the running statistics, which training
 * updates in place as PyTorch does; every temporary is released on every
 * path. */
#include "ops/batchnorm.h"
#include "autograd/autograd.h"
#include "core/error.h"
#include "cpu/batchnorm.h"
#include "kernels/batchnorm.h"
#include "ops/op_util.h"

#include <math.h>

/* --- batch_norm -------------------------------------------------------------------- */

/* The device of batch norm's n operands (NULLs skipped); on CUDA also checks
 * that the kernel (have) and the statistics helpers exist and makes the
 * device current. */
static int bn_device(const char *op, int n, dl_tensor *const *ts, bool have, dl_device *dev) {
    if (dl_common_device(op, n, ts, dev)) return -1;
    if (dev->type != DL_DEVICE_CUDA) return 0;
    return dl_op_cuda_ready(op, *dev,
                            have && dl_cuda_batchnorm->batch_norm_update_running &&
                                dl_cuda_batchnorm->batch_norm_var_transform);
}

dl_batch_norm_params dl_batch_norm_default_params(void) {
    dl_batch_norm_params p = {0.1, false, 0, 1e-5};
    return p;
}

/* Checks x and the per-channel tensors (each may be NULL); fills s. */
static int bn_check(const char *op, const dl_tensor *x, dl_tensor *const *vecs,
                    const char *const *names, int nvec, dl_bn_shape *s) {
    char sb[96];
    if (dl_op_need_floating(op, "input", x)) return -1;
    if (x->ndim < 2 || x->ndim > 4)
        return dl_error("%s: expected a 2-D (N,C), 3-D (N,C,L) or 4-D (N,C,H,W) input, got "
                        "%d-D %s",
                        op, x->ndim, dl_op_shape_str(x, sb, sizeof sb));
    s->N = x->shape[0];
    s->C = x->shape[1];
    s->S = 1;
    for (int d = 2; d < x->ndim; d++) s->S *= x->shape[d];
    bool half = dl_op_float_dtype(x->dtype) != x->dtype;
    for (int i = 0; i < nvec; i++) {
        const dl_tensor *v = vecs[i];
        if (!v) continue;
        if (dl_op_need_floating(op, names[i], v)) return -1;
        if (v->dtype != x->dtype && !(half && v->dtype == DL_DTYPE_F32))
            return dl_error("%s: %s (%s) must have the input's dtype (%s)%s", op, names[i],
                            dl_dtype_name(v->dtype), dl_dtype_name(x->dtype),
                            half ? " or float32" : "");
        if (v->ndim != 1 || v->shape[0] != s->C)
            return dl_error("%s: %s must have shape [%lld] (one value per channel), got %s", op,
                            names[i], (long long)s->C, dl_op_shape_str(v, sb, sizeof sb));
    }
    return 0;
}

static int check_writable(const char *op, const char *what, const dl_tensor *t) {
    for (int d = 0; d < t->ndim; d++)
        if (t->strides[d] == 0 && t->shape[d] > 1)
            return dl_error("%s: %s is an expanded view and cannot be updated in place", op, what);
    return 0;
}

/* running = (1 - m) * running + m * stat * factor, in place (any dtype/layout;
 * running and stat on one device, made current by the caller when CUDA). */
static int update_running(dl_tensor *running, dl_tensor *stat, double m, double factor) {
    dl_tensor *r = dl_op_dense(running, DL_DTYPE_F64), *st = dl_op_dense(stat, DL_DTYPE_F64);
    int64_t C = running->shape[0];
    dl_device dev = dl_tensor_device(running);
    dl_tensor *out = dl_tensor_empty(1, &C, DL_DTYPE_F64, dev);
    int rc = -1;
    if (r && st && out) {
        const double *rp = dl_tensor_data_ptr(r), *sp = dl_tensor_data_ptr(st);
        double *op = dl_tensor_data_ptr(out);
        if (dev.type == DL_DEVICE_CUDA) {
            rc = dl_cuda_batchnorm->batch_norm_update_running(C, op, rp, sp, m, factor);
        } else {
            for (int64_t c = 0; c < C; c++) op[c] = (1 - m) * rp[c] + m * sp[c] * factor;
            rc = 0;
        }
        if (rc == 0) rc = dl_tensor_copy_(running, out);
        if (rc == 0) dl_tensor_bump_version(running);
    }
    dl_tensor_release(r);
    dl_tensor_release(st);
    dl_tensor_release(out);
    return rc;
}

/* invstd = 1 / sqrt(var + eps) (to_invstd) or var = 1 / invstd^2 - eps, a
 * new (C) tensor of v's dtype and device (v contiguous, F32 or F64). */
static dl_tensor *var_transform(dl_tensor *v, double eps, bool to_invstd) {
    dl_tensor *r = dl_tensor_empty(1, v->shape, v->dtype, dl_tensor_device(v));
    if (!r) return NULL;
    if (dl_tensor_device(v).type == DL_DEVICE_CUDA) {
        if (dl_cuda_batchnorm->batch_norm_var_transform(v->dtype, v->shape[0],
                                                        dl_tensor_data_ptr(r),
                                                        dl_tensor_data_ptr(v), eps, to_invstd)) {
            dl_tensor_release(r);
            return NULL;
        }
        return r;
    }
    for (int64_t c = 0; c < v->shape[0]; c++) {
        double a = v->dtype == DL_DTYPE_F32 ? ((const float *)dl_tensor_data_ptr(v))[c]
                                            : ((const double *)dl_tensor_data_ptr(v))[c];
        double b = to_invstd ? 1.0 / sqrt(a + eps) : 1.0 / (a * a) - eps;
        if (v->dtype == DL_DTYPE_F32)
            ((float *)dl_tensor_data_ptr(r))[c] = (float)b;
        else
            ((double *)dl_tensor_data_ptr(r))[c] = b;
    }
    return r;
}

int dl_batch_norm_forward_train(dl_tensor *x, dl_tensor *weight, dl_tensor *bias,
                                dl_tensor *running_mean, dl_tensor *running_var,
                                const dl_batch_norm_params *p, dl_tensor **y, dl_tensor **save_mean,
                                dl_tensor **save_invstd) {
    const char *op = "batch_norm";
    static const char *const names[] = {"weight", "bias", "running_mean", "running_var"};
    dl_tensor *vecs[4] = {weight, bias, running_mean, running_var};
    dl_bn_shape s;
    *y = *save_mean = *save_invstd = NULL;
    dl_device dev;
    if (bn_check(op, x, vecs, names, 4, &s)) return -1;
    dl_tensor *all[5] = {x, weight, bias, running_mean, running_var};
    if (bn_device(op, 5, all, dl_cuda_batchnorm && dl_cuda_batchnorm->batch_norm_forward_train,
                  &dev))
        return -1;
    if (!(p->eps >= 0)) return dl_error("%s: eps must be non-negative, got %g", op, p->eps);
    if ((running_mean == NULL) != (running_var == NULL))
        return dl_error("%s: running_mean and running_var must be given together", op);
    if (running_mean && (check_writable(op, "running_mean", running_mean) ||
                         check_writable(op, "running_var", running_var)))
        return -1;
    double m = p->momentum;
    if (p->cumulative) {
        if (p->num_batches_tracked < 1)
            return dl_error("%s: a cumulative average needs num_batches_tracked >= 1, got %lld", op,
                            (long long)p->num_batches_tracked);
        m = 1.0 / (double)p->num_batches_tracked;
    }
    int64_t M = s.N * s.S;
    if (M == 1) {
        char sb[96];
        return dl_error("%s: expected more than 1 value per channel when training, got input "
                        "size %s",
                        op, dl_op_shape_str(x, sb, sizeof sb));
    }
    dl_dtype dt = x->dtype, ct = dl_op_float_dtype(dt);
    /* x and y in the kernel dtype kt (CUDA: x's; CPU: float32 for the half
     * types) and, on CUDA or for a float32/float64 CPU input, x's
     * (channels-last) layout */
    bool cuda = dev.type == DL_DEVICE_CUDA;
    dl_dtype kt = cuda ? dt : ct;
    bool cl = dl_op_is_channels_last(x) && kt == dt;
    /* in: x w b; out: y mean var invstd */
    dl_tensor *t[7] = {dl_op_dense_layout(x, kt, cl),
                       dl_op_dense(weight, ct),
                       dl_op_dense(bias, ct),
                       dl_op_empty_layout(x->ndim, x->shape, kt, dev, cl),
                       dl_tensor_zeros(1, &s.C, ct, dev),
                       dl_tensor_zeros(1, &s.C, ct, dev),
                       NULL};
    int rc = -1;
    if (!t[0] || (weight && !t[1]) || (bias && !t[2]) || !t[3] || !t[4] || !t[5]) goto done;
    if (M == 0 || s.C == 0) {
        /* PyTorch: an empty batch passes through, statistics untouched */
        rc = 0;
    } else {
        void *y_ = dl_tensor_data_ptr(t[3]), *mean_ = dl_tensor_data_ptr(t[4]),
             *var_ = dl_tensor_data_ptr(t[5]);
        const void *x_ = dl_tensor_data_ptr(t[0]), *w_ = t[1] ? dl_tensor_data_ptr(t[1]) : NULL,
                   *b_ = t[2] ? dl_tensor_data_ptr(t[2]) : NULL;
        rc = cuda
                 ? dl_cuda_batchnorm->batch_norm_forward_train(dt, cl, &s, p->eps, y_, mean_, var_,
                                                               x_, w_, b_)
                 : dl_cpu_batch_norm_forward_train(ct, cl, &s, p->eps, y_, mean_, var_, x_, w_, b_);
        if (rc == 0 && running_mean)
            rc = update_running(running_mean, t[4], m, 1.0) ||
                 update_running(running_var, t[5], m, (double)M / (double)(M - 1));
    }
    if (rc) goto done;
    /* (y already has x's shape, and x's dtype unless computed in float32) */
    if (!(t[6] = var_transform(t[5], p->eps, true)) ||
        (kt != dt && dl_op_finish_view(&t[3], dt, x->ndim, x->shape))) {
        rc = -1;
        goto done;
    }
    *y = t[3];
    *save_mean = t[4];
    *save_invstd = t[6];
    t[3] = t[4] = t[6] = NULL;
done:
    dl_op_release_all(t, 7);
    return rc;
}

dl_tensor *dl_batch_norm_forward_eval(dl_tensor *x, dl_tensor *weight, dl_tensor *bias,
                                      dl_tensor *running_mean, dl_tensor *running_var, double eps) {
    const char *op = "batch_norm";
    static const char *const names[] = {"weight", "bias", "running_mean", "running_var"};
    dl_tensor *vecs[4] = {weight, bias, running_mean, running_var};
    dl_bn_shape s;
    dl_device dev;
    dl_tensor *all[5] = {x, weight, bias, running_mean, running_var};
    if (bn_check(op, x, vecs, names, 4, &s) ||
        bn_device(op, 5, all, dl_cuda_batchnorm && dl_cuda_batchnorm->batch_norm_forward_eval,
                  &dev))
        return NULL;
    if (!running_mean || !running_var) {
        dl_error("%s: running_mean and running_var are required in evaluation mode", op);
        return NULL;
    }
    if (!(eps >= 0)) {
        dl_error("%s: eps must be non-negative, got %g", op, eps);
        return NULL;
    }
    dl_dtype dt = x->dtype, ct = dl_op_float_dtype(dt);
    /* x and y: kernel dtype and layout as in dl_batch_norm_forward_train */
    bool cuda = dev.type == DL_DEVICE_CUDA;
    dl_dtype kt = cuda ? dt : ct;
    bool cl = dl_op_is_channels_last(x) && kt == dt;
    dl_tensor *t[6] = {
        dl_op_dense_layout(x, kt, cl), dl_op_dense(weight, ct),
        dl_op_dense(bias, ct),         dl_op_dense(running_mean, ct),
        dl_op_dense(running_var, ct),  dl_op_empty_layout(x->ndim, x->shape, kt, dev, cl)};
    dl_tensor *y = NULL;
    if (!t[0] || (weight && !t[1]) || (bias && !t[2]) || !t[3] || !t[4] || !t[5]) goto done;
    if (s.N * s.C * s.S > 0) {
        void *y_ = dl_tensor_data_ptr(t[5]);
        const void *x_ = dl_tensor_data_ptr(t[0]), *m_ = dl_tensor_data_ptr(t[3]),
                   *v_ = dl_tensor_data_ptr(t[4]), *w_ = t[1] ? dl_tensor_data_ptr(t[1]) : NULL,
                   *b_ = t[2] ? dl_tensor_data_ptr(t[2]) : NULL;
        if (cuda ? dl_cuda_batchnorm->batch_norm_forward_eval(dt, cl, &s, eps, y_, x_, m_, v_, w_,
                                                              b_)
                 : dl_cpu_batch_norm_forward_eval(ct, cl, &s, eps, y_, x_, m_, v_, w_, b_))
            goto done;
    }
    y = t[5];
    t[5] = NULL;
    if (kt != dt && dl_op_finish_view(&y, dt, x->ndim, x->shape)) y = NULL;
done:
    dl_op_release_all(t, 6);
    return y;
}

int dl_batch_norm_backward(dl_tensor *gy, dl_tensor *x, dl_tensor *weight, dl_tensor *running_mean,
                           dl_tensor *running_var, dl_tensor *save_mean, dl_tensor *save_invstd,
                           bool training, double eps, const bool need[3], dl_tensor **gx,
                           dl_tensor **gweight, dl_tensor **gbias) {
    const char *op = "batch_norm_backward";
    static const char *const names[] = {"weight", "running_mean", "running_var", "save_mean",
                                        "save_invstd"};
    dl_tensor *vecs[5] = {weight, running_mean, running_var, save_mean, save_invstd};
    dl_bn_shape s;
    dl_device dev;
    *gx = *gweight = *gbias = NULL;
    dl_tensor *all[7] = {gy, x, weight, running_mean, running_var, save_mean, save_invstd};
    if (bn_check(op, x, vecs, names, 5, &s) || dl_op_need_floating(op, "grad_output", gy) ||
        bn_device(op, 7, all, dl_cuda_batchnorm && dl_cuda_batchnorm->batch_norm_backward, &dev))
        return -1;
    if (!dl_shape_equal(gy, x)) {
        char a[96], b[96];
        return dl_error("%s: grad_output has shape %s, expected the input's %s", op,
                        dl_op_shape_str(gy, a, sizeof a), dl_op_shape_str(x, b, sizeof b));
    }
    if (gy->dtype != x->dtype)
        return dl_error("%s: grad_output (%s) must have the input's dtype (%s)", op,
                        dl_dtype_name(gy->dtype), dl_dtype_name(x->dtype));
    dl_tensor *mean = training ? save_mean : running_mean;
    dl_tensor *stat = training ? save_invstd : running_var;
    if (!mean || !stat)
        return dl_error("%s: %s", op,
                        training ? "save_mean and save_invstd are required in training mode"
                                 : "running_mean and running_var are required in evaluation "
                                   "mode");
    if (!(eps >= 0)) return dl_error("%s: eps must be non-negative, got %g", op, eps);
    dl_dtype dt = x->dtype, ct = dl_op_float_dtype(dt);
    /* gy, x and gx: kernel dtype and layout as in dl_batch_norm_forward_train,
     * the layout x's: a gy in the other layout is the one copied */
    bool cuda = dev.type == DL_DEVICE_CUDA;
    dl_dtype kt = cuda ? dt : ct;
    bool cl = dl_op_is_channels_last(x) && kt == dt;
    dl_tensor *gx0 = need[0] ? dl_op_empty_layout(x->ndim, x->shape, kt, dev, cl) : NULL;
    /* in: gy x w mean stat var; out: gx gw gb */
    dl_tensor *t[9] = {dl_op_dense_layout(gy, kt, cl),
                       dl_op_dense_layout(x, kt, cl),
                       dl_op_dense(weight, ct),
                       dl_op_dense(mean, ct),
                       dl_op_dense(stat, ct),
                       NULL,
                       gx0,
                       need[1] ? dl_tensor_zeros(1, &s.C, ct, dev) : NULL,
                       need[2] ? dl_tensor_zeros(1, &s.C, ct, dev) : NULL};
    int rc = -1;
    if (!t[0] || !t[1] || (weight && !t[2]) || !t[3] || !t[4] || (need[0] && !t[6]) ||
        (need[1] && !t[7]) || (need[2] && !t[8]))
        goto done;
    /* the kernels take the variance; training passes invstd */
    if (!(t[5] = training ? var_transform(t[4], eps, false) : dl_tensor_retain(t[4]))) goto done;
    rc = 0;
    if (s.N * s.C * s.S > 0 && (need[0] || need[1] || need[2])) {
        void *gx_ = t[6] ? dl_tensor_data_ptr(t[6]) : NULL,
             *gw_ = t[7] ? dl_tensor_data_ptr(t[7]) : NULL,
             *gb_ = t[8] ? dl_tensor_data_ptr(t[8]) : NULL;
        const void *gy_ = dl_tensor_data_ptr(t[0]), *x_ = dl_tensor_data_ptr(t[1]),
                   *m_ = dl_tensor_data_ptr(t[3]), *v_ = dl_tensor_data_ptr(t[5]),
                   *w_ = t[2] ? dl_tensor_data_ptr(t[2]) : NULL;
        rc = cuda ? dl_cuda_batchnorm->batch_norm_backward(dt, cl, &s, eps, training, gx_, gw_, gb_,
                                                           gy_, x_, m_, v_, w_)
                  : dl_cpu_batch_norm_backward(ct, cl, &s, eps, training, gx_, gw_, gb_, gy_, x_,
                                               m_, v_, w_);
    }
    if (rc) goto done;
    /* gweight/gbias take the weight's dtype (float32 for a half input) */
    dl_dtype pdt = weight ? weight->dtype : dt;
    if ((kt != dt && dl_op_finish_view(&t[6], dt, x->ndim, x->shape)) ||
        dl_op_finish_view(&t[7], pdt, 1, &s.C) || dl_op_finish_view(&t[8], pdt, 1, &s.C)) {
        rc = -1;
        goto done;
    }
    dl_op_take3(&t[6], gx, gweight, gbias);
done:
    dl_op_release_all(t, 9);
    return rc;
}

/* --- with autograd ----------------------------------------------------------------
 * saved: x, weight, running_mean, running_var, save_mean, save_invstd. */

typedef struct {
    bool training;
    double eps;
} bn_ctx;

static int bn_backward(dl_node *n, dl_tensor *const *gout, dl_tensor **gin) {
    const bn_ctx *c = n->ctx;
    dl_tensor *x = dl_node_saved(n, 0);
    if (!x) return -1;
    dl_tensor *s[6];
    for (int i = 1; i < 6; i++) s[i] = n->saved[i].t;
    if (!c->training && (!dl_node_saved(n, 2) || !dl_node_saved(n, 3))) return -1;
    bool need[3] = {dl_node_needs_grad(n, 0), dl_node_needs_grad(n, 1), dl_node_needs_grad(n, 2)};
    return dl_batch_norm_backward(gout[0], x, s[1], s[2], s[3], s[4], s[5], c->training, c->eps,
                                  need, &gin[0], &gin[1], &gin[2]);
}

dl_tensor *dl_batch_norm(dl_tensor *x, dl_tensor *weight, dl_tensor *bias, dl_tensor *running_mean,
                         dl_tensor *running_var, bool training, const dl_batch_norm_params *p) {
    dl_tensor *y = NULL, *mean = NULL, *invstd = NULL;
    if (training) {
        if (dl_batch_norm_forward_train(x, weight, bias, running_mean, running_var, p, &y, &mean,
                                        &invstd))
            return NULL;
    } else {
        y = dl_batch_norm_forward_eval(x, weight, bias, running_mean, running_var, p->eps);
        if (!y) return NULL;
    }
    dl_tensor *in[3] = {x, weight, bias};
    dl_tensor *save[6] = {
        x, weight, training ? NULL : running_mean, training ? NULL : running_var, mean, invstd};
    bn_ctx c = {training, p->eps};
    y = dl_op_record(y, "NativeBatchNormBackward", bn_backward, 3, in, 6, save, &c, sizeof c);
    dl_tensor_release(mean);
    dl_tensor_release(invstd);
    return y;
}
