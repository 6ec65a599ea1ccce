/* batchnorm.c - CPU batch-normalization kernels (see batchnorm.h).
 *
 * float32: oneDNN batch_normalization primitives on x viewed as (N,C,S,1)
 * NCHW, with scale and shift always bound (ones/zeros when the layer has no
 * weight/bias) so one primitive serves both; the primitives are cached per
 * (N,C,S, eps, kind).  oneDNN's training forward returns the biased variance
 * we pass on; its backward takes (mean, variance) and recomputes
 * 1/sqrt(var + eps) itself.
 *
 * float64: loops parallel over channels; statistics in two passes (mean,
 * then the sum of squared deviations), the backward as PyTorch's:
 *   gx = w*invstd * (gy - mean(gy) - xhat * mean(gy * xhat))   (training)
 *   gx = w*invstd * gy                                        (evaluation)
 *   gw = sum(gy * xhat), gb = sum(gy). */
#include "batchnorm.h"
#include "core/error.h"
#include "core/parallel.h"
#include "dnnl_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

/* --- float32: oneDNN ---------------------------------------------------------------- */

enum { BN_TRAIN, BN_EVAL, BN_BWD_TRAIN, BN_BWD_EVAL };
/* slots: the primitive, and for backward the forward pd used as its hint */
enum { S_PRIM = 0, S_HINT = 1 };

typedef struct {
    const dl_bn_shape *s;
    float eps;
    int kind;
} bn_ctx;

static int bn_md(const dl_bn_shape *s, dnnl_memory_desc_t *data, dnnl_memory_desc_t *vec) {
    int64_t dims[4] = {s->N, s->C, s->S, 1};
    return dl_dnnl_md(data, 4, dims, dnnl_nchw) || dl_dnnl_md(vec, 1, &s->C, dnnl_x);
}

static int build_bn(dl_dnnl_entry *e, const void *vctx) {
    const bn_ctx *c = vctx;
    dnnl_memory_desc_t data, vec;
    if (bn_md(c->s, &data, &vec)) return -1;
    unsigned flags = dnnl_use_scale | dnnl_use_shift;
    dnnl_batch_normalization_desc_t d, fd;
    switch (c->kind) {
    case BN_TRAIN:
    case BN_EVAL:
        if (DL_DNNL(dnnl_batch_normalization_forward_desc_init(
                &d, c->kind == BN_TRAIN ? dnnl_forward_training : dnnl_forward_inference, &data,
                c->eps, c->kind == BN_TRAIN ? flags : flags | dnnl_use_global_stats)))
            return -1;
        return dl_dnnl_entry_add(e, S_PRIM, &d, NULL, 1);
    default: {
        unsigned f = c->kind == BN_BWD_TRAIN ? flags : flags | dnnl_use_global_stats;
        if (DL_DNNL(dnnl_batch_normalization_forward_desc_init(&fd, dnnl_forward_training, &data,
                                                               c->eps, f)) ||
            dl_dnnl_entry_add(e, S_HINT, &fd, NULL, 0))
            return -1;
        if (DL_DNNL(dnnl_batch_normalization_backward_desc_init(&d, dnnl_backward, &data, &data,
                                                                c->eps, f)))
            return -1;
        return dl_dnnl_entry_add(e, S_PRIM, &d, e->pd[S_HINT], 1);
    }
    }
}

static dl_dnnl_entry *bn_entry(const dl_bn_shape *s, double eps, int kind) {
    static const char *const names[] = {"train", "eval", "bwd_train", "bwd_eval"};
    bn_ctx c = {s, (float)eps, kind};
    char key[DL_DNNL_KEY_LEN];
    snprintf(key, sizeof key, "batch_norm_%s f32 %lld,%lld,%lld eps%.9g", names[kind],
             (long long)s->N, (long long)s->C, (long long)s->S, (double)c.eps);
    return dl_dnnl_cache_get(key, build_bn, &c);
}

/* Scale and shift vectors: w/b, or ones/zeros in tmp (2*C floats). */
static int scale_shift(const dl_bn_shape *s, const float *w, const float *b, const float **sc,
                       const float **sh, float **tmp) {
    *tmp = NULL;
    if (!w || !b) {
        if (!(*tmp = malloc(sizeof(float) * 2 * (size_t)s->C)))
            return dl_error("batch_norm: out of memory");
        for (int64_t c = 0; c < s->C; c++) {
            (*tmp)[c] = 1.0f;
            (*tmp)[s->C + c] = 0.0f;
        }
    }
    *sc = w ? w : *tmp;
    *sh = b ? b : *tmp + s->C;
    return 0;
}

static int forward_f32(const dl_bn_shape *s, double eps, bool training, float *y, float *mean,
                       float *var, const float *x, const float *w, const float *b) {
    dnnl_memory_desc_t data, vec;
    if (bn_md(s, &data, &vec)) return -1;
    const float *sc = NULL, *sh = NULL;
    float *tmp = NULL;
    if (scale_shift(s, w, b, &sc, &sh, &tmp)) return -1;
    dl_dnnl_entry *e = bn_entry(s, eps, training ? BN_TRAIN : BN_EVAL);
    int rc = -1;
    if (e) {
        dl_dnnl_args a = {0};
        if (dl_dnnl_args_add(&a, DNNL_ARG_SRC, &data, (void *)x) ||
            dl_dnnl_args_add(&a, DNNL_ARG_DST, &data, y) ||
            dl_dnnl_args_add(&a, DNNL_ARG_MEAN, &vec, mean) ||
            dl_dnnl_args_add(&a, DNNL_ARG_VARIANCE, &vec, var) ||
            dl_dnnl_args_add(&a, DNNL_ARG_SCALE, &vec, (void *)sc) ||
            dl_dnnl_args_add(&a, DNNL_ARG_SHIFT, &vec, (void *)sh))
            dl_dnnl_args_free(&a);
        else
            rc = dl_dnnl_execute(e->prim[S_PRIM], &a);
        dl_dnnl_cache_put(e);
    }
    free(tmp);
    return rc;
}

static int backward_f32(const dl_bn_shape *s, double eps, bool training, float *gx, float *gw,
                        float *gb, const float *gy, const float *x, const float *mean,
                        const float *var, const float *w) {
    dnnl_memory_desc_t data, vec;
    if (bn_md(s, &data, &vec)) return -1;
    /* scratch for outputs nobody wants; ones for a missing weight, and a
     * shift: oneDNN's backward takes one, though it does not enter the
     * gradients */
    int64_t n = s->N * s->C * s->S;
    float *ones = NULL, *sgx = NULL, *sgw = NULL;
    const float *sc = w;
    int rc = -1;
    if (!(ones = malloc(sizeof(float) * 2 * (size_t)s->C))) goto oom;
    for (int64_t c = 0; c < s->C; c++) {
        ones[c] = 1.0f;
        ones[s->C + c] = 0.0f;
    }
    if (!w) sc = ones;
    if (!gx && !(gx = sgx = malloc(sizeof(float) * (size_t)n))) goto oom;
    if (!gw || !gb) {
        if (!(sgw = malloc(sizeof(float) * 2 * (size_t)s->C))) goto oom;
        if (!gw) gw = sgw;
        if (!gb) gb = sgw + s->C;
    }
    dl_dnnl_entry *e = bn_entry(s, eps, training ? BN_BWD_TRAIN : BN_BWD_EVAL);
    if (e) {
        dl_dnnl_args a = {0};
        if (dl_dnnl_args_add(&a, DNNL_ARG_SRC, &data, (void *)x) ||
            dl_dnnl_args_add(&a, DNNL_ARG_MEAN, &vec, (void *)mean) ||
            dl_dnnl_args_add(&a, DNNL_ARG_VARIANCE, &vec, (void *)var) ||
            dl_dnnl_args_add(&a, DNNL_ARG_DIFF_DST, &data, (void *)gy) ||
            dl_dnnl_args_add(&a, DNNL_ARG_SCALE, &vec, (void *)sc) ||
            dl_dnnl_args_add(&a, DNNL_ARG_SHIFT, &vec, ones + s->C) ||
            dl_dnnl_args_add(&a, DNNL_ARG_DIFF_SRC, &data, gx) ||
            dl_dnnl_args_add(&a, DNNL_ARG_DIFF_SCALE, &vec, gw) ||
            dl_dnnl_args_add(&a, DNNL_ARG_DIFF_SHIFT, &vec, gb))
            dl_dnnl_args_free(&a);
        else
            rc = dl_dnnl_execute(e->prim[S_PRIM], &a);
        dl_dnnl_cache_put(e);
    }
    goto done;
oom:
    dl_error("batch_norm_backward: out of memory");
done:
    free(ones);
    free(sgx);
    free(sgw);
    return rc;
}

/* --- float64: loops ---------------------------------------------------------------- */

static int forward_f64(const dl_bn_shape *s, double eps, bool training, double *y, double *mean,
                       double *var, const double *x, const double *w, const double *b) {
    int64_t M = s->N * s->S, CS = s->C * s->S;
#pragma omp parallel for num_threads(dl_get_num_threads()) if (M * s->C >= DL_PARALLEL_GRAIN)
    for (int64_t c = 0; c < s->C; c++) {
        double m, v;
        if (training) {
            double sum = 0, sq = 0;
            for (int64_t n = 0; n < s->N; n++)
                for (int64_t i = 0; i < s->S; i++) sum += x[n * CS + c * s->S + i];
            m = sum / (double)M;
            for (int64_t n = 0; n < s->N; n++)
                for (int64_t i = 0; i < s->S; i++) {
                    double d = x[n * CS + c * s->S + i] - m;
                    sq += d * d;
                }
            v = sq / (double)M;
            mean[c] = m;
            var[c] = v;
        } else {
            m = mean[c];
            v = var[c];
        }
        double scale = (w ? w[c] : 1.0) / sqrt(v + eps), shift = b ? b[c] : 0.0;
        for (int64_t n = 0; n < s->N; n++)
            for (int64_t i = 0; i < s->S; i++) {
                int64_t k = n * CS + c * s->S + i;
                y[k] = (x[k] - m) * scale + shift;
            }
    }
    return 0;
}

static int backward_f64(const dl_bn_shape *s, double eps, bool training, double *gx, double *gw,
                        double *gb, const double *gy, const double *x, const double *mean,
                        const double *var, const double *w) {
    int64_t M = s->N * s->S, CS = s->C * s->S;
#pragma omp parallel for num_threads(dl_get_num_threads()) if (M * s->C >= DL_PARALLEL_GRAIN)
    for (int64_t c = 0; c < s->C; c++) {
        double m = mean[c], invstd = 1.0 / sqrt(var[c] + eps), sum_dy = 0, sum_dy_xmu = 0;
        for (int64_t n = 0; n < s->N; n++)
            for (int64_t i = 0; i < s->S; i++) {
                int64_t k = n * CS + c * s->S + i;
                sum_dy += gy[k];
                sum_dy_xmu += gy[k] * (x[k] - m);
            }
        if (gb) gb[c] = sum_dy;
        if (gw) gw[c] = sum_dy_xmu * invstd;
        if (!gx) continue;
        double wc = w ? w[c] : 1.0;
        if (training) {
            /* gy - mean(gy) - (x - m) * invstd^2 * mean(gy * (x - m)) */
            double mdy = sum_dy / (double)M, k2 = sum_dy_xmu / (double)M * invstd * invstd;
            for (int64_t n = 0; n < s->N; n++)
                for (int64_t i = 0; i < s->S; i++) {
                    int64_t k = n * CS + c * s->S + i;
                    gx[k] = (gy[k] - mdy - (x[k] - m) * k2) * invstd * wc;
                }
        } else {
            for (int64_t n = 0; n < s->N; n++)
                for (int64_t i = 0; i < s->S; i++) {
                    int64_t k = n * CS + c * s->S + i;
                    gx[k] = gy[k] * invstd * wc;
                }
        }
    }
    return 0;
}

/* --- entry points ------------------------------------------------------------------ */

int dl_cpu_batch_norm_forward_train(dl_dtype dt, const dl_bn_shape *s, double eps, void *y,
                                    void *mean, void *var, const void *x, const void *w,
                                    const void *b) {
    switch (dt) {
    case DL_DTYPE_F32: return forward_f32(s, eps, true, y, mean, var, x, w, b);
    case DL_DTYPE_F64: return forward_f64(s, eps, true, y, mean, var, x, w, b);
    default: return dl_error("batch_norm: no CPU kernel for %s", dl_dtype_name(dt));
    }
}

int dl_cpu_batch_norm_forward_eval(dl_dtype dt, const dl_bn_shape *s, double eps, void *y,
                                   const void *x, const void *mean, const void *var, const void *w,
                                   const void *b) {
    switch (dt) {
    case DL_DTYPE_F32: return forward_f32(s, eps, false, y, (float *)mean, (float *)var, x, w, b);
    case DL_DTYPE_F64: return forward_f64(s, eps, false, y, (double *)mean, (double *)var, x, w, b);
    default: return dl_error("batch_norm: no CPU kernel for %s", dl_dtype_name(dt));
    }
}

int dl_cpu_batch_norm_backward(dl_dtype dt, const dl_bn_shape *s, double eps, bool training,
                               void *gx, void *gw, void *gb, const void *gy, const void *x,
                               const void *mean, const void *var, const void *w) {
    switch (dt) {
    case DL_DTYPE_F32: return backward_f32(s, eps, training, gx, gw, gb, gy, x, mean, var, w);
    case DL_DTYPE_F64: return backward_f64(s, eps, training, gx, gw, gb, gy, x, mean, var, w);
    default: return dl_error("batch_norm_backward: no CPU kernel for %s", dl_dtype_name(dt));
    }
}
