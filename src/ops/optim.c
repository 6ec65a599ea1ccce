/* optim.c - the fused optimizer steps (see optim.h): checks the tensor lists,
 * turns the options into the scalars the Lua update computes (in double, the
 * same expressions in the same order), and dispatches to the CPU kernel
 * (src/cpu/optim.c) or the CUDA one (cuda/optim.cu). */
#include "optim.h"
#include "cpu/optim.h"
#include "kernels/cuda.h"
#include "kernels/optim.h"
#include "ops/op_util.h"
#include "views.h"

#include <math.h>
#include <stdlib.h>

/* Lua 5.4's a ^ b (luai_numpow): a * a when b == 2, else pow. */
static double lua_pow(double a, double b) {
    return b == 2 ? a * a : pow(a, b);
}

/* Checks that t (state `what` of parameter i, 0-based) matches the parameter. */
/* t's elements lie in the same order as p's (equal strides wherever a size
 * is above 1), so both are read as flat arrays from their first element. */
static bool same_layout(const dl_tensor *t, const dl_tensor *p) {
    if (t->ndim != p->ndim) return false;
    for (int d = 0; d < t->ndim; d++)
        if (t->shape[d] > 1 && t->strides[d] != p->strides[d]) return false;
    return true;
}

static int check_like(const char *op, const char *what, int i, dl_tensor *t, dl_tensor *p) {
    char b1[64], b2[64], d1[16], d2[16];
    if (!t) return dl_error("%s: parameter %d has no %s", op, i + 1, what);
    if (t->dtype != p->dtype)
        return dl_error("%s: %s of parameter %d is %s but the parameter is %s", op, what, i + 1,
                        dl_dtype_name(t->dtype), dl_dtype_name(p->dtype));
    dl_device dt = dl_tensor_device(t), dp = dl_tensor_device(p);
    if (dt.type != dp.type || dt.index != dp.index)
        return dl_error("%s: %s of parameter %d is on %s but the parameter is on %s", op, what,
                        i + 1, dl_device_name(dt, d1, sizeof d1),
                        dl_device_name(dp, d2, sizeof d2));
    int same = t->ndim == p->ndim;
    for (int d = 0; same && d < t->ndim; d++) same = t->shape[d] == p->shape[d];
    if (!same)
        return dl_error("%s: %s of parameter %d has shape %s but the parameter has %s", op, what,
                        i + 1, dl_shape_str(t->ndim, t->shape, b1, sizeof b1),
                        dl_shape_str(p->ndim, p->shape, b2, sizeof b2));
    if (!same_layout(t, p))
        return dl_error("%s: %s of parameter %d is not laid out as the parameter (both must be "
                        "contiguous or both channels-last)",
                        op, what, i + 1);
    if (t != p && t->storage == p->storage)
        return dl_error("%s: %s of parameter %d shares its storage with the parameter", op, what,
                        i + 1);
    return 0;
}

/* The parameters: one dtype (float32, or float64 on the CPU), one device,
 * contiguous.  Sets *dev. */
static int check_params(const char *op, int n, dl_tensor *const *params, dl_device *dev) {
    char d1[16], d2[16];
    if (n < 0) return dl_error("%s: negative parameter count %d", op, n);
    for (int i = 0; i < n; i++) {
        dl_tensor *p = params[i];
        if (!p) return dl_error("%s: parameter %d is missing", op, i + 1);
        if (i == 0) *dev = dl_tensor_device(p);
        dl_device d = dl_tensor_device(p);
        if (d.type != dev->type || d.index != dev->index)
            return dl_error("%s: parameter %d is on %s but parameter 1 is on %s", op, i + 1,
                            dl_device_name(d, d1, sizeof d1), dl_device_name(*dev, d2, sizeof d2));
        if (p->dtype != params[0]->dtype)
            return dl_error("%s: parameter %d is %s but parameter 1 is %s", op, i + 1,
                            dl_dtype_name(p->dtype), dl_dtype_name(params[0]->dtype));
        if (p->dtype != DL_DTYPE_F32 && p->dtype != DL_DTYPE_F64)
            return dl_error("%s: parameters must be float32 or float64, parameter %d is %s", op,
                            i + 1, dl_dtype_name(p->dtype));
        if (p->dtype == DL_DTYPE_F64 && d.type == DL_DEVICE_CUDA)
            return dl_error("%s: float64 parameters are stepped on the CPU only (parameter %d is "
                            "on %s)",
                            op, i + 1, dl_device_name(d, d1, sizeof d1));
        if (!dl_tensor_is_contiguous(p) && !dl_is_channels_last(p))
            return dl_error("%s: parameter %d is neither contiguous nor channels-last", op, i + 1);
    }
    return 0;
}

/* The kernels' view of n parameters and their gradients (the state slots
 * NULL, filled in by the caller); NULL with an error when out of memory. */
static dl_optim_tensors *new_tensors(const char *op, int n, dl_tensor *const *params,
                                     dl_tensor *const *grads) {
    dl_optim_tensors *ts = calloc((size_t)n, sizeof *ts);
    if (!ts) {
        dl_error("%s: out of memory for %d parameters", op, n);
        return NULL;
    }
    for (int i = 0; i < n; i++) {
        ts[i].param = params[i];
        ts[i].grad = grads[i];
    }
    return ts;
}

/* Runs the step (SGD when sc is set, else Adam) on dev's kernel, bumps the
 * versions of the tensors written and frees ts.  rc: the checks' status. */
static int dispatch(int rc, const char *op, dl_device dev, int n, dl_optim_tensors *ts,
                    const dl_sgd_coeffs *sc, const dl_adam_coeffs *ac) {
    if (rc == 0 && dev.type == DL_DEVICE_CUDA) {
        if (!dl_cuda_optim || (sc ? !dl_cuda_optim->sgd_step : !dl_cuda_optim->adam_step))
            rc = dl_cuda_missing(op);
        else
            rc = sc ? dl_cuda_optim->sgd_step(n, ts, sc) : dl_cuda_optim->adam_step(n, ts, ac);
    } else if (rc == 0) {
        if (sc)
            dl_cpu_sgd_step(n, ts, sc);
        else
            dl_cpu_adam_step(n, ts, ac);
    }
    for (int i = 0; rc == 0 && i < n; i++) {
        dl_tensor *w[5] = {ts[i].param, ts[i].buf, ts[i].exp_avg, ts[i].exp_avg_sq,
                           ts[i].max_exp_avg_sq};
        for (int k = 0; k < 5; k++)
            if (w[k]) dl_tensor_bump_version(w[k]);
    }
    free(ts);
    return rc;
}

/* Checks an optional 0-dim scalar option t (dtype dt, on dev). */
static int check_scalar_opt(const char *op, const char *what, const dl_tensor *t, dl_dtype dt,
                            dl_device dev) {
    char d1[16], d2[16];
    if (!t) return 0;
    if (t->ndim != 0 || t->dtype != dt)
        return dl_error("%s: %s must be a 0-dim %s tensor, got a %d-dim %s one", op, what,
                        dl_dtype_name(dt), t->ndim, dl_dtype_name(t->dtype));
    dl_device d = dl_tensor_device(t);
    if (d.type != dev.type || d.index != dev.index)
        return dl_error("%s: %s is on %s but the parameters are on %s", op, what,
                        dl_device_name(d, d1, sizeof d1), dl_device_name(dev, d2, sizeof d2));
    return 0;
}

int dl_sgd_step(int n, dl_tensor *const *params, dl_tensor *const *grads, dl_tensor *const *bufs,
                const bool *fresh, const dl_sgd_options *o) {
    const char *op = "sgd_step";
    dl_device dev = DL_CPU;
    if (check_params(op, n, params, &dev)) return -1;
    if (n > 0 && (check_scalar_opt(op, "lr_tensor", o->lr_tensor, DL_DTYPE_F32, dev) ||
                  check_scalar_opt(op, "skip_if", o->skip_if, DL_DTYPE_BOOL, dev)))
        return -1;
    bool on_cuda = dev.type == DL_DEVICE_CUDA;
    double lr = o->lr;
    if (!on_cuda && o->lr_tensor && dl_tensor_item(o->lr_tensor, &lr)) return -1;
    if (!on_cuda && o->skip_if) {
        double skip = 0;
        if (dl_tensor_item(o->skip_if, &skip)) return -1;
        if (skip != 0) return 0;
    }
    if (!(lr >= 0) || !(o->momentum >= 0) || !(o->weight_decay >= 0))
        return dl_error("%s: lr, momentum and weight_decay must be >= 0 (got %g, %g, %g)", op, lr,
                        o->momentum, o->weight_decay);
    if (o->momentum != 0 && (!bufs || !fresh))
        return dl_error("%s: momentum %g needs momentum buffers", op, o->momentum);
    if (n <= 0) return 0;
    dl_optim_tensors *ts = new_tensors(op, n, params, grads);
    if (!ts) return -1;
    int rc = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        rc = check_like(op, "grad", i, grads[i], params[i]);
        if (rc == 0 && o->momentum != 0) {
            ts[i].buf = bufs[i];
            ts[i].fresh = fresh[i];
            rc = check_like(op, "momentum_buffer", i, bufs[i], params[i]);
        }
    }
    /* the scalars of SGD:_update_group */
    dl_sgd_coeffs c = {.neg_lr = -lr,
                       .momentum = o->momentum,
                       .one_minus_damp = 1 - o->dampening,
                       .weight_decay = o->weight_decay,
                       .nesterov = o->nesterov,
                       .maximize = o->maximize,
                       .lr = on_cuda && o->lr_tensor ? dl_tensor_data_ptr(o->lr_tensor) : NULL,
                       .skip = on_cuda && o->skip_if ? dl_tensor_data_ptr(o->skip_if) : NULL};
    return dispatch(rc, op, dev, n, ts, &c, NULL);
}

int dl_adam_step(int n, dl_tensor *const *params, dl_tensor *const *grads,
                 dl_tensor *const *exp_avgs, dl_tensor *const *exp_avg_sqs,
                 dl_tensor *const *max_exp_avg_sqs, const int64_t *steps,
                 const dl_adam_options *o) {
    const char *op = "adam_step";
    dl_device dev = DL_CPU;
    if (check_params(op, n, params, &dev)) return -1;
    if (o->amsgrad && !max_exp_avg_sqs)
        return dl_error("%s: amsgrad needs the max_exp_avg_sq tensors", op);
    if (n <= 0) return 0;
    dl_optim_tensors *ts = new_tensors(op, n, params, grads);
    if (!ts) return -1;
    int rc = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        ts[i].exp_avg = exp_avgs[i];
        ts[i].exp_avg_sq = exp_avg_sqs[i];
        rc = check_like(op, "grad", i, grads[i], params[i]);
        if (rc == 0) rc = check_like(op, "exp_avg", i, exp_avgs[i], params[i]);
        if (rc == 0) rc = check_like(op, "exp_avg_sq", i, exp_avg_sqs[i], params[i]);
        if (rc == 0 && o->amsgrad) {
            ts[i].max_exp_avg_sq = max_exp_avg_sqs[i];
            rc = check_like(op, "max_exp_avg_sq", i, max_exp_avg_sqs[i], params[i]);
        }
        if (rc == 0 && steps[i] < 1)
            rc = dl_error("%s: step of parameter %d is %lld, expected >= 1", op, i + 1,
                          (long long)steps[i]);
        if (rc == 0) {
            /* the scalars of adam_update, per parameter (its own step count) */
            double step = (double)steps[i];
            double bias_correction1 = 1 - lua_pow(o->beta1, step);
            double bias_correction2 = 1 - lua_pow(o->beta2, step);
            double step_size = o->lr / bias_correction1;
            ts[i].neg_step_size = -step_size;
            ts[i].bc2_sqrt = sqrt(bias_correction2);
        }
    }
    dl_adam_coeffs c = {.beta1 = o->beta1,
                        .one_minus_beta1 = 1 - o->beta1,
                        .beta2 = o->beta2,
                        .one_minus_beta2 = 1 - o->beta2,
                        .eps = o->eps,
                        .weight_decay = o->weight_decay,
                        .decay = 1 - o->lr * o->weight_decay,
                        .decoupled = o->decoupled,
                        .amsgrad = o->amsgrad,
                        .maximize = o->maximize};
    return dispatch(rc, op, dev, n, ts, NULL, &c);
}
