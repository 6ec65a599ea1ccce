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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* --- the implementation switch (kernels/batchnorm.h) ------------------------------ */

dl_bn_impl dl_bn_impl_choice = DL_BN_IMPL_AUTO;

static const char *const impl_names[] = {"auto", "native", "cudnn"};

static int impl_of(const char *name) {
    for (int i = 0; i < 3; i++)
        if (strcmp(name, impl_names[i]) == 0) return i;
    return -1;
}

/* DLUA_BN_IMPL, read once (a bad value warns once and keeps auto). */
static void impl_init(void) {
    static bool done;
    if (done) return;
    done = true;
    const char *e = getenv("DLUA_BN_IMPL");
    if (!e || !*e) return;
    int i = impl_of(e);
    if (i < 0)
        fprintf(stderr,
                "dlua: warning: DLUA_BN_IMPL=%s is not one of auto, native, cudnn; "
                "using auto\n",
                e);
    else
        dl_bn_impl_choice = (dl_bn_impl)i;
}

const char *dl_batch_norm_impl_get(void) {
    impl_init();
    return impl_names[dl_bn_impl_choice];
}

int dl_batch_norm_impl_set(const char *name) {
    impl_init();
    int i = impl_of(name);
    if (i < 0)
        return dl_error("batch_norm_impl: expected \"auto\", \"native\" or \"cudnn\", got \"%s\"",
                        name);
    dl_bn_impl_choice = (dl_bn_impl)i;
    return 0;
}

/* --- one forward, one backward ------------------------------------------------------
 * Batch norm's and the fused ReLU's (act 0: plain; 1: ReLU; 2: add and ReLU)
 * forwards and backwards share their checks, operand preparation and
 * dispatch here. */

enum { ACT_NONE = 0, ACT_RELU = 1, ACT_ADD_RELU = 2 };

static const char *const fwd_names[] = {"batch_norm", "batch_norm_relu", "batch_norm_add_relu"};
static const char *const bwd_names[] = {"batch_norm_backward", "batch_norm_relu_backward",
                                        "batch_norm_add_relu_backward"};

/* The residual: x's shape and dtype (its device is checked with the rest). */
static int check_residual(const char *op, const dl_tensor *x, const dl_tensor *r) {
    if (dl_op_check_same_shape(op, "residual", r, "input", x)) return -1;
    if (r->dtype != x->dtype)
        return dl_error("%s: residual (%s) must have the input's dtype (%s)", op,
                        dl_dtype_name(r->dtype), dl_dtype_name(x->dtype));
    return 0;
}

typedef struct bn_fwd {
    int act;
    dl_tensor *x, *res, *weight, *bias, *rm, *rv;
    bool training, keep_mask;
    const dl_batch_norm_params *p;
    /* results: y; training: save_mean, save_invstd; act: mask (when kept),
     * impl (the implementation that ran) */
    dl_tensor *y, *mean, *invstd, *mask;
    int impl;
} bn_fwd;

/* Checks what only a training forward needs; *m: the running average's
 * momentum. */
static int check_training(const char *op, const dl_tensor *x, dl_tensor *rm, dl_tensor *rv,
                          const dl_batch_norm_params *p, const dl_bn_shape *s, double *m) {
    if (!(p->eps >= 0)) return dl_error("%s: eps must be non-negative, got %g", op, p->eps);
    if ((rm == NULL) != (rv == NULL))
        return dl_error("%s: running_mean and running_var must be given together", op);
    if (rm && (dl_op_check_writable(op, "running_mean", rm) ||
               dl_op_check_writable(op, "running_var", rv)))
        return -1;
    *m = p->momentum;
    if (p->cumulative) {
        if (p->num_batches_tracked < 1)
            return dl_error("%s: a cumulative average needs num_batches_tracked >= 1, got %lld", op,
                            (long long)p->num_batches_tracked);
        *m = 1.0 / (double)p->num_batches_tracked;
    }
    if (s->N * s->S == 1) {
        char sb[96];
        return dl_error("%s: expected more than 1 value per channel when training, got input "
                        "size %s",
                        op, dl_op_shape_str(x, sb, sizeof sb));
    }
    return 0;
}

static int bn_forward(bn_fwd *f) {
    const char *op = fwd_names[f->act];
    static const char *const names[] = {"weight", "bias", "running_mean", "running_var"};
    dl_tensor *x = f->x, *rm = f->rm, *rv = f->rv;
    dl_tensor *vecs[4] = {f->weight, f->bias, rm, rv};
    dl_tensor *all[6] = {x, f->weight, f->bias, rm, rv, f->res};
    const dl_cuda_batchnorm_kernels *k = dl_cuda_batchnorm;
    bool have = k && (f->act        ? k->batch_norm_act_forward && k->batch_norm_plan
                      : f->training ? k->batch_norm_forward_train != NULL
                                    : k->batch_norm_forward_eval != NULL);
    const dl_batch_norm_params *p = f->p;
    dl_bn_shape s;
    dl_device dev;
    double m = 0;
    f->y = f->mean = f->invstd = f->mask = NULL;
    f->impl = DL_BN_IMPL_NATIVE;
    if (bn_check(op, x, vecs, names, 4, &s) || bn_device(op, 6, all, have, &dev)) return -1;
    if (f->act == ACT_ADD_RELU && check_residual(op, x, f->res)) return -1;
    if (f->training) {
        if (check_training(op, x, rm, rv, p, &s, &m)) return -1;
    } else {
        if (!rm || !rv)
            return dl_error("%s: running_mean and running_var are required in evaluation mode", op);
        if (!(p->eps >= 0)) return dl_error("%s: eps must be non-negative, got %g", op, p->eps);
    }
    int64_t M = s.N * s.S;
    bool work = M > 0 && s.C > 0;
    dl_dtype dt = x->dtype, ct = dl_op_float_dtype(dt);
    /* x and y in the kernel dtype kt (CUDA: x's; CPU: float32 for the half
     * types) and, on CUDA or for a float32/float64 CPU input, x's
     * (channels-last) layout */
    bool cuda = dev.type == DL_DEVICE_CUDA;
    dl_dtype kt = cuda ? dt : ct;
    bool cl = dl_op_is_channels_last(x) && kt == dt;
    /* the fused ReLU's implementation and mask: CUDA training asks the
     * backend; everything else is native */
    dl_bn_plan plan = {DL_BN_IMPL_NATIVE, 4 * dl_bn_mask_words(cl, &s)};
    if (cuda) impl_init();
    if (f->act && cuda && f->training && work && k->batch_norm_plan(dt, cl, &s, f->act, &plan))
        return -1;
    /* cuDNN writes its reserve space whether or not it is kept */
    bool mask = f->act && work && (f->keep_mask || plan.impl == DL_BN_IMPL_CUDNN);
    /* in: x w b res; out: y mean var invstd mask (evaluation: mean, var in) */
    dl_tensor *t[9] = {dl_op_dense_layout(x, kt, cl),
                       dl_op_dense(f->weight, ct),
                       dl_op_dense(f->bias, ct),
                       f->res ? dl_op_dense_layout(f->res, kt, cl) : NULL,
                       dl_op_empty_layout(x->ndim, x->shape, kt, dev, cl),
                       f->training ? dl_tensor_zeros(1, &s.C, ct, dev) : dl_op_dense(rm, ct),
                       f->training ? dl_tensor_zeros(1, &s.C, ct, dev) : dl_op_dense(rv, ct),
                       NULL,
                       mask ? dl_tensor_empty(1, &plan.mask_bytes, DL_DTYPE_U8, dev) : NULL};
    int rc = -1;
    if (!t[0] || (f->weight && !t[1]) || (f->bias && !t[2]) || (f->res && !t[3]) || !t[4] ||
        !t[5] || !t[6] || (mask && !t[8]))
        goto done;
    rc = 0;
    if (work) {
        /* (an empty batch passes through, statistics untouched, as PyTorch) */
        void *y_ = dl_tensor_data_ptr(t[4]), *mean_ = dl_tensor_data_ptr(t[5]),
             *var_ = dl_tensor_data_ptr(t[6]);
        const void *x_ = dl_tensor_data_ptr(t[0]), *w_ = dl_op_data(t[1]), *b_ = dl_op_data(t[2]);
        double eps = p->eps;
        if (f->act) {
            dl_bn_act a = {.res = dl_op_data(t[3]),
                           .mask = dl_op_data(t[8]),
                           .mask_bytes = mask ? plan.mask_bytes : 0,
                           .add = f->res != NULL,
                           .impl = plan.impl};
            rc = cuda ? k->batch_norm_act_forward(dt, cl, &s, eps, f->training, y_, mean_, var_, x_,
                                                  w_, b_, &a)
                      : dl_cpu_batch_norm_act_forward(ct, cl, &s, eps, f->training, y_, mean_, var_,
                                                      x_, w_, b_, &a);
            f->impl = a.impl;
        } else if (f->training) {
            rc = cuda ? k->batch_norm_forward_train(dt, cl, &s, eps, y_, mean_, var_, x_, w_, b_)
                      : dl_cpu_batch_norm_forward_train(ct, cl, &s, eps, y_, mean_, var_, x_, w_,
                                                        b_);
        } else {
            rc = cuda
                     ? k->batch_norm_forward_eval(dt, cl, &s, eps, y_, x_, mean_, var_, w_, b_)
                     : dl_cpu_batch_norm_forward_eval(ct, cl, &s, eps, y_, x_, mean_, var_, w_, b_);
        }
        if (rc == 0 && f->training && rm)
            rc = update_running(rm, t[5], m, 1.0) ||
                 update_running(rv, t[6], m, (double)M / (double)(M - 1));
    }
    if (rc) goto done;
    /* (y already has x's shape, and x's dtype unless computed in float32) */
    if ((f->training && !(t[7] = var_transform(t[6], p->eps, true))) ||
        (kt != dt && dl_op_finish_view(&t[4], dt, x->ndim, x->shape))) {
        rc = -1;
        goto done;
    }
    f->y = t[4];
    t[4] = NULL;
    if (f->training) {
        f->mean = t[5];
        f->invstd = t[7];
        t[5] = t[7] = NULL;
    }
    if (f->keep_mask) {
        f->mask = t[8];
        t[8] = NULL;
    }
done:
    dl_op_release_all(t, 9);
    return rc;
}

/* The arguments of a plain batch norm forward (no activation). */
static bn_fwd bn_fwd_of(dl_tensor *x, dl_tensor *weight, dl_tensor *bias, dl_tensor *rm,
                        dl_tensor *rv, bool training, const dl_batch_norm_params *p) {
    return (bn_fwd){
        .x = x, .weight = weight, .bias = bias, .rm = rm, .rv = rv, .training = training, .p = p};
}

/* bn_forward, its results handed out (NULL on failure). */
static int bn_forward_out(bn_fwd *f, dl_tensor **y, dl_tensor **save_mean,
                          dl_tensor **save_invstd) {
    int rc = bn_forward(f);
    *y = f->y;
    *save_mean = f->mean;
    *save_invstd = f->invstd;
    return rc;
}

int dl_batch_norm_forward_train(dl_tensor *x, dl_tensor *weight, dl_tensor *bias,
                                dl_tensor *running_mean, dl_tensor *running_var,
                                const dl_batch_norm_params *p, dl_tensor **y, dl_tensor **save_mean,
                                dl_tensor **save_invstd) {
    bn_fwd f = bn_fwd_of(x, weight, bias, running_mean, running_var, true, p);
    return bn_forward_out(&f, y, save_mean, save_invstd);
}

dl_tensor *dl_batch_norm_forward_eval(dl_tensor *x, dl_tensor *weight, dl_tensor *bias,
                                      dl_tensor *running_mean, dl_tensor *running_var, double eps) {
    dl_batch_norm_params p = dl_batch_norm_default_params();
    p.eps = eps;
    bn_fwd f = bn_fwd_of(x, weight, bias, running_mean, running_var, false, &p);
    return bn_forward(&f) ? NULL : f.y;
}

int dl_batch_norm_relu_forward(dl_tensor *x, dl_tensor *residual, dl_tensor *weight,
                               dl_tensor *bias, dl_tensor *running_mean, dl_tensor *running_var,
                               bool training, const dl_batch_norm_params *p, bool keep_mask,
                               dl_tensor **y, dl_tensor **save_mean, dl_tensor **save_invstd,
                               dl_tensor **mask, int *impl) {
    bn_fwd f = bn_fwd_of(x, weight, bias, running_mean, running_var, training, p);
    f.act = residual ? ACT_ADD_RELU : ACT_RELU;
    f.res = residual;
    f.keep_mask = keep_mask;
    int rc = bn_forward_out(&f, y, save_mean, save_invstd);
    *mask = f.mask;
    *impl = f.impl;
    return rc;
}

typedef struct bn_bwd {
    int act;
    dl_tensor *gy, *x, *weight, *bias;
    dl_tensor *mean, *stat; /* training: save_mean, save_invstd; else running mean, var */
    dl_tensor *y, *mask;    /* act: the forward's output (cuDNN's) and the mask */
    int impl;
    bool training;
    double eps;
    bool need[4];                /* x, weight, bias, residual */
    const char *mean_n, *stat_n; /* the statistics' names in messages */
    dl_tensor *gx, *gw, *gb, *gres;
} bn_bwd;

/* The mask a backward reads: bytes from the forward (uint8, 1-D, at least
 * the native mask's size when that implementation wrote it). */
static int check_mask(const char *op, const dl_tensor *mask, int impl, bool cl,
                      const dl_bn_shape *s) {
    if (!mask) return dl_error("%s: the ReLU mask is required", op);
    int64_t need = impl == DL_BN_IMPL_CUDNN ? 1 : 4 * dl_bn_mask_words(cl, s);
    if (mask->dtype != DL_DTYPE_U8 || mask->ndim != 1 || !dl_tensor_is_contiguous(mask) ||
        mask->shape[0] < need)
        return dl_error("%s: the ReLU mask must be a contiguous uint8 vector of at least %lld "
                        "bytes",
                        op, (long long)need);
    if (impl != DL_BN_IMPL_NATIVE && impl != DL_BN_IMPL_CUDNN)
        return dl_error("%s: unknown implementation %d", op, impl);
    return 0;
}

static int bn_backward(bn_bwd *b) {
    const char *op = bwd_names[b->act];
    const char *names[4] = {"weight", "bias", b->mean_n, b->stat_n};
    dl_tensor *x = b->x, *gy = b->gy;
    dl_tensor *vecs[4] = {b->weight, b->bias, b->mean, b->stat};
    dl_tensor *all[8] = {gy, x, b->weight, b->bias, b->mean, b->stat, b->y, b->mask};
    const dl_cuda_batchnorm_kernels *k = dl_cuda_batchnorm;
    bool have = k && (b->act ? k->batch_norm_act_backward != NULL : k->batch_norm_backward != NULL);
    dl_bn_shape s;
    dl_device dev;
    b->gx = b->gw = b->gb = b->gres = NULL;
    if (bn_check(op, x, vecs, names, 4, &s) || dl_op_need_floating(op, "grad_output", gy) ||
        bn_device(op, 8, all, have, &dev))
        return -1;
    if (!dl_shape_equal(gy, x)) {
        char sa[96], sb[96];
        return dl_error("%s: grad_output has shape %s, expected the input's %s", op,
                        dl_op_shape_str(gy, sa, sizeof sa), dl_op_shape_str(x, sb, sizeof sb));
    }
    if (gy->dtype != x->dtype)
        return dl_error("%s: grad_output (%s) must have the input's dtype (%s)", op,
                        dl_dtype_name(gy->dtype), dl_dtype_name(x->dtype));
    if (!b->mean || !b->stat)
        return dl_error("%s: %s", op,
                        b->training ? "save_mean and save_invstd are required in training mode"
                                    : "running_mean and running_var are required in evaluation "
                                      "mode");
    if (!(b->eps >= 0)) return dl_error("%s: eps must be non-negative, got %g", op, b->eps);
    dl_dtype dt = x->dtype, ct = dl_op_float_dtype(dt);
    /* gy, x and gx: kernel dtype and layout as in bn_forward, the layout x's:
     * a gy in the other layout is the one copied */
    bool cuda = dev.type == DL_DEVICE_CUDA;
    dl_dtype kt = cuda ? dt : ct;
    bool cl = dl_op_is_channels_last(x) && kt == dt;
    bool work = s.N * s.C * s.S > 0;
    if (b->act && work && check_mask(op, b->mask, b->impl, cl, &s)) return -1;
    if (b->act && work && b->impl == DL_BN_IMPL_CUDNN && !b->y)
        return dl_error("%s: cuDNN's backward needs the forward's output", op);
    if (cuda) impl_init();
    const bool *need = b->need;
    /* in: gy x w mean stat var b y; out: gx gw gb gres */
    dl_tensor *t[12] = {dl_op_dense_layout(gy, kt, cl),
                        dl_op_dense_layout(x, kt, cl),
                        dl_op_dense(b->weight, ct),
                        dl_op_dense(b->mean, ct),
                        dl_op_dense(b->stat, ct),
                        NULL,
                        dl_op_dense(b->bias, ct),
                        b->y ? dl_op_dense_layout(b->y, kt, cl) : NULL,
                        need[0] ? dl_op_empty_layout(x->ndim, x->shape, kt, dev, cl) : NULL,
                        need[1] ? dl_tensor_zeros(1, &s.C, ct, dev) : NULL,
                        need[2] ? dl_tensor_zeros(1, &s.C, ct, dev) : NULL,
                        b->act && need[3] ? dl_op_empty_layout(x->ndim, x->shape, kt, dev, cl)
                                          : NULL};
    int rc = -1;
    if (!t[0] || !t[1] || (b->weight && !t[2]) || !t[3] || !t[4] || (b->bias && !t[6]) ||
        (b->y && !t[7]))
        goto done;
    for (int i = 0; i < 4; i++)
        if ((i < 3 || b->act) && need[i] && !t[8 + i]) goto done;
    /* the kernels take the variance; training passes invstd */
    if (!(t[5] = b->training ? var_transform(t[4], b->eps, false) : dl_tensor_retain(t[4])))
        goto done;
    rc = 0;
    if (work && (need[0] || need[1] || need[2] || (b->act && need[3]))) {
        void *gx_ = dl_op_data(t[8]), *gw_ = dl_op_data(t[9]), *gb_ = dl_op_data(t[10]);
        const void *gy_ = dl_tensor_data_ptr(t[0]), *x_ = dl_tensor_data_ptr(t[1]),
                   *m_ = dl_tensor_data_ptr(t[3]), *v_ = dl_tensor_data_ptr(t[5]),
                   *w_ = dl_op_data(t[2]);
        if (b->act) {
            dl_bn_act a = {.mask = dl_op_data(b->mask),
                           .mask_bytes = b->mask->shape[0],
                           .gres = dl_op_data(t[11]),
                           .y = dl_op_data(t[7]),
                           .add = b->act == ACT_ADD_RELU,
                           .impl = b->impl};
            rc = cuda ? k->batch_norm_act_backward(dt, cl, &s, b->eps, b->training, gx_, gw_, gb_,
                                                   gy_, x_, m_, v_, w_, dl_op_data(t[6]), &a)
                      : dl_cpu_batch_norm_act_backward(ct, cl, &s, b->eps, b->training, gx_, gw_,
                                                       gb_, gy_, x_, m_, v_, w_, &a);
        } else {
            rc = cuda ? k->batch_norm_backward(dt, cl, &s, b->eps, b->training, gx_, gw_, gb_, gy_,
                                               x_, m_, v_, w_)
                      : dl_cpu_batch_norm_backward(ct, cl, &s, b->eps, b->training, gx_, gw_, gb_,
                                                   gy_, x_, m_, v_, w_);
        }
    }
    if (rc) goto done;
    /* gweight/gbias take the weight's dtype (float32 for a half input) */
    dl_dtype pdt = b->weight ? b->weight->dtype : dt;
    if ((kt != dt && (dl_op_finish_view(&t[8], dt, x->ndim, x->shape) ||
                      dl_op_finish_view(&t[11], dt, x->ndim, x->shape))) ||
        dl_op_finish_view(&t[9], pdt, 1, &s.C) || dl_op_finish_view(&t[10], pdt, 1, &s.C)) {
        rc = -1;
        goto done;
    }
    dl_op_take3(&t[8], &b->gx, &b->gw, &b->gb);
    b->gres = t[11];
    t[11] = NULL;
done:
    dl_op_release_all(t, 12);
    return rc;
}

int dl_batch_norm_backward(dl_tensor *gy, dl_tensor *x, dl_tensor *weight, dl_tensor *running_mean,
                           dl_tensor *running_var, dl_tensor *save_mean, dl_tensor *save_invstd,
                           bool training, double eps, const bool need[3], dl_tensor **gx,
                           dl_tensor **gweight, dl_tensor **gbias) {
    bn_bwd b = {.gy = gy,
                .x = x,
                .weight = weight,
                .mean = training ? save_mean : running_mean,
                .stat = training ? save_invstd : running_var,
                .training = training,
                .eps = eps,
                .need = {need[0], need[1], need[2], false},
                .mean_n = training ? "save_mean" : "running_mean",
                .stat_n = training ? "save_invstd" : "running_var"};
    /* the statistics this mode does not use are still checked */
    static const char *const names[] = {"running_mean", "running_var", "save_mean", "save_invstd"};
    dl_tensor *other[2] = {training ? running_mean : save_mean,
                           training ? running_var : save_invstd};
    dl_bn_shape s;
    *gx = *gweight = *gbias = NULL;
    if (bn_check("batch_norm_backward", x, other, names + (training ? 0 : 2), 2, &s)) return -1;
    int rc = bn_backward(&b);
    *gx = b.gx;
    *gweight = b.gw;
    *gbias = b.gb;
    return rc;
}

int dl_batch_norm_relu_backward(dl_tensor *gy, dl_tensor *x, dl_tensor *y, dl_tensor *weight,
                                dl_tensor *bias, dl_tensor *mean, dl_tensor *stat, dl_tensor *mask,
                                int impl, bool residual, bool training, double eps,
                                const bool need[4], dl_tensor **gx, dl_tensor **gweight,
                                dl_tensor **gbias, dl_tensor **gresidual) {
    bn_bwd b = {.act = residual ? ACT_ADD_RELU : ACT_RELU,
                .gy = gy,
                .x = x,
                .weight = weight,
                .bias = bias,
                .mean = mean,
                .stat = stat,
                .y = y,
                .mask = mask,
                .impl = impl,
                .training = training,
                .eps = eps,
                .need = {need[0], need[1], need[2], residual && need[3]},
                .mean_n = training ? "save_mean" : "running_mean",
                .stat_n = training ? "save_invstd" : "running_var"};
    int rc = bn_backward(&b);
    *gx = b.gx;
    *gweight = b.gw;
    *gbias = b.gb;
    *gresidual = b.gres;
    return rc;
}

/* --- with autograd ----------------------------------------------------------------
 * batch_norm saves x, weight, running_mean, running_var, save_mean,
 * save_invstd; the fused ReLU saves x, weight, bias, the statistics (batch
 * or running: mean, invstd or var), the mask and (cuDNN's) y. */

typedef struct {
    bool training;
    double eps;
} bn_ctx;

static int bn_node_backward(dl_node *n, dl_tensor *const *gout, dl_tensor **gin) {
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
    y = dl_op_record(y, "NativeBatchNormBackward", bn_node_backward, 3, in, 6, save, &c, sizeof c);
    dl_tensor_release(mean);
    dl_tensor_release(invstd);
    return y;
}

typedef struct {
    bool training, residual;
    int impl;
    double eps;
} bn_relu_ctx;

static int bn_relu_node_backward(dl_node *n, dl_tensor *const *gout, dl_tensor **gin) {
    const bn_relu_ctx *c = n->ctx;
    dl_tensor *s[7]; /* absent entries: no weight, bias, mask (empty batch) or y */
    for (int i = 0; i < 7; i++) {
        s[i] = n->saved[i].t;
        if ((s[i] || n->released) && !(s[i] = dl_node_saved(n, i))) return -1;
    }
    bool need[4] = {dl_node_needs_grad(n, 0), dl_node_needs_grad(n, 1), dl_node_needs_grad(n, 2),
                    c->residual && dl_node_needs_grad(n, 3)};
    return dl_batch_norm_relu_backward(gout[0], s[0], s[6], s[1], s[2], s[3], s[4], s[5], c->impl,
                                       c->residual, c->training, c->eps, need, &gin[0], &gin[1],
                                       &gin[2], &gin[3]);
}

dl_tensor *dl_batch_norm_relu(dl_tensor *x, dl_tensor *residual, dl_tensor *weight, dl_tensor *bias,
                              dl_tensor *running_mean, dl_tensor *running_var, bool training,
                              const dl_batch_norm_params *p) {
    dl_tensor *in[4] = {x, weight, bias, residual};
    bool grad = dl_autograd_needed(4, in);
    dl_tensor *y, *mean, *invstd, *mask;
    int impl;
    if (dl_batch_norm_relu_forward(x, residual, weight, bias, running_mean, running_var, training,
                                   p, grad, &y, &mean, &invstd, &mask, &impl))
        return NULL;
    if (grad) {
        dl_tensor *save[7] = {x,
                              weight,
                              bias,
                              training ? mean : running_mean,
                              training ? invstd : running_var,
                              mask,
                              impl == DL_BN_IMPL_CUDNN ? y : NULL};
        bn_relu_ctx c = {training, residual != NULL, impl, p->eps};
        y = dl_op_record(
            y, residual ? "NativeBatchNormAddReluBackward" : "NativeBatchNormReluBackward",
            bn_relu_node_backward, 4, in, 7, save, &c, sizeof c);
    }
    dl_tensor_release(mean);
    dl_tensor_release(invstd);
    dl_tensor_release(mask);
    return y;
}
