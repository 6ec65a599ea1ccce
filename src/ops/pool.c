/* ops/pool.c - the pool family (see pool.h): max, average and adaptive
 * pooling's checks, shape inference and dispatch to the CPU kernels
 * (cpu/pool.c) or the CUDA ones (cuda/pool.cu); the autograd nodes at the end.
 *
 * Half inputs compute in float32 on both backends.  A channels-last CPU input
 * is read in place by the channels-last kernels; on CUDA the kernels read
 * NCHW and a channels-last input's results are handed back channels-last --
 * except max pooling, which reads channels-last CUDA data in place and in its
 * own dtype (the _nhwc kernels) while dl_pool_nhwc is on (the default;
 * DLUA_POOL_NHWC=0 or dl_pool_set_nhwc(false) for the planar path).
 * Invariants: operands are never modified; every temporary is released on
 * every path; kernels only see validated sizes. */
#include "ops/pool.h"
#include "autograd/autograd.h"
#include "core/error.h"
#include "cpu/pool.h"
#include "kernels/pool.h"
#include "ops/op_util.h"
#include "ops/views.h"

#include <stdlib.h>
#include <string.h>

/* --- pooling ------------------------------------------------------------------------ */

bool dl_pool_nhwc = true;

/* dl_pool_nhwc, with DLUA_POOL_NHWC=0 read once first */
static bool nhwc_on(void) {
    static bool read;
    if (!read) {
        read = true;
        const char *e = getenv("DLUA_POOL_NHWC");
        if (e && strcmp(e, "0") == 0) dl_pool_nhwc = false;
    }
    return dl_pool_nhwc;
}

bool dl_pool_set_nhwc(bool on) {
    bool was = nhwc_on();
    dl_pool_nhwc = on;
    return was;
}

/* Whether max pooling of x (on CUDA) runs the channels-last kernels in x's
 * dtype: a 4-D channels-last x, the switch on, the kernels there. */
static bool max_nhwc(const dl_tensor *x, bool cuda) {
    return cuda && x->ndim == 4 && dl_op_is_channels_last(x) && nhwc_on() &&
           dl_cuda_pool->max_pool2d_forward_nhwc && dl_cuda_pool->max_pool2d_backward_nhwc;
}

dl_pool2d_params dl_pool2d_default_params(int64_t kh, int64_t kw) {
    dl_pool2d_params p = {{kh, kw}, {kh, kw}, {0, 0}, {1, 1}, false, true, 0};
    return p;
}

int64_t dl_pool_output_size(int64_t in, int64_t k, int64_t pad, int64_t stride, int64_t dilation,
                            bool ceil_mode) {
    int64_t num = in + 2 * pad - dilation * (k - 1) - 1 + (ceil_mode ? stride - 1 : 0);
    /* floor division (num may be negative) */
    int64_t q = num >= 0 ? num / stride : -((-num + stride - 1) / stride);
    int64_t out = q + 1;
    /* the last window must start inside the input or the left padding */
    if (ceil_mode && (out - 1) * stride >= in + pad) out--;
    return out;
}

/* Checks x (N,C,H,W)/(C,H,W) for a pooling op: floating, non-empty planes
 * (an empty batch is fine). */
static int pool_input(const char *op, const dl_tensor *x) {
    char sb[96];
    if (dl_op_need_floating(op, "input", x)) return -1;
    if (x->ndim != 3 && x->ndim != 4)
        return dl_error("%s: expected a 3-D (C,H,W) or 4-D (N,C,H,W) input, got %d-D %s", op,
                        x->ndim, dl_op_shape_str(x, sb, sizeof sb));
    for (int d = x->ndim - 3; d < x->ndim; d++)
        if (x->shape[d] == 0)
            return dl_error("%s: expected non-zero channel and spatial sizes, got input %s", op,
                            dl_op_shape_str(x, sb, sizeof sb));
    return 0;
}

static int pool_geometry(const char *op, const dl_tensor *x, const dl_pool2d_params *p, bool avg,
                         dl_pool2d_shape *s) {
    if (pool_input(op, x)) return -1;
    const int64_t *k = p->kernel, *st = p->stride, *pd = p->padding, *dl = p->dilation;
    if (dl_op_check_limit(op, "kernel_size", k, 2) || dl_op_check_limit(op, "stride", st, 2) ||
        dl_op_check_limit(op, "padding", pd, 2) || dl_op_check_limit(op, "dilation", dl, 2) ||
        dl_op_check_limit(op, "divisor_override", &p->divisor_override, 1))
        return -1;
    if (k[0] < 1 || k[1] < 1)
        return dl_error("%s: kernel_size must be positive, got (%lld, %lld)", op, (long long)k[0],
                        (long long)k[1]);
    if (st[0] < 1 || st[1] < 1)
        return dl_error("%s: stride must be positive, got (%lld, %lld)", op, (long long)st[0],
                        (long long)st[1]);
    if (dl[0] < 1 || dl[1] < 1)
        return dl_error("%s: dilation must be positive, got (%lld, %lld)", op, (long long)dl[0],
                        (long long)dl[1]);
    if (avg && (dl[0] != 1 || dl[1] != 1))
        return dl_error("%s: dilation is not supported for average pooling", op);
    if (pd[0] < 0 || pd[1] < 0 || pd[0] > k[0] / 2 || pd[1] > k[1] / 2)
        return dl_error("%s: padding must be between 0 and half the kernel size, got padding "
                        "(%lld, %lld) for kernel (%lld, %lld)",
                        op, (long long)pd[0], (long long)pd[1], (long long)k[0], (long long)k[1]);
    int o = x->ndim - 3;
    s->P = (o ? x->shape[0] : 1) * x->shape[o];
    s->H = x->shape[o + 1];
    s->W = x->shape[o + 2];
    s->kh = k[0];
    s->kw = k[1];
    s->sh = st[0];
    s->sw = st[1];
    s->ph = pd[0];
    s->pw = pd[1];
    s->dh = dl[0];
    s->dw = dl[1];
    s->count_include_pad = p->count_include_pad;
    s->divisor_override = p->divisor_override;
    s->C = 0;
    s->OH = dl_pool_output_size(s->H, k[0], pd[0], st[0], dl[0], p->ceil_mode);
    s->OW = dl_pool_output_size(s->W, k[1], pd[1], st[1], dl[1], p->ceil_mode);
    if (s->OH < 1 || s->OW < 1)
        return dl_error("%s: input plane %lldx%lld is too small for kernel (%lld, %lld) with "
                        "dilation (%lld, %lld) and padding (%lld, %lld): output %lldx%lld",
                        op, (long long)s->H, (long long)s->W, (long long)k[0], (long long)k[1],
                        (long long)dl[0], (long long)dl[1], (long long)pd[0], (long long)pd[1],
                        (long long)s->OH, (long long)s->OW);
    return 0;
}

/* x's shape with the spatial sizes replaced by (oh, ow). */
static void pooled_shape(const dl_tensor *x, int64_t oh, int64_t ow, int64_t *shape) {
    memcpy(shape, x->shape, sizeof(int64_t) * (size_t)x->ndim);
    shape[x->ndim - 2] = oh;
    shape[x->ndim - 1] = ow;
}

/* gy (and indices, when given) must have shape (x's leading dims, oh, ow). */
static int check_grad(const char *op, const dl_tensor *gy, const dl_tensor *x, const dl_tensor *ind,
                      int64_t oh, int64_t ow) {
    int64_t shape[4];
    char a[96], b[96];
    pooled_shape(x, oh, ow, shape);
    if (dl_op_need_floating(op, "grad_output", gy)) return -1;
    if (gy->ndim != x->ndim || memcmp(gy->shape, shape, sizeof(int64_t) * (size_t)x->ndim) != 0)
        return dl_error("%s: grad_output has shape %s, expected the output's %s", op,
                        dl_op_shape_str(gy, a, sizeof a),
                        dl_shape_str(x->ndim, shape, b, sizeof b));
    if (gy->dtype != x->dtype)
        return dl_error("%s: grad_output (%s) must have the input's dtype (%s)", op,
                        dl_dtype_name(gy->dtype), dl_dtype_name(x->dtype));
    if (ind) {
        if (ind->dtype != DL_DTYPE_I64)
            return dl_error("%s: indices must be an int64 tensor, got %s", op,
                            dl_dtype_name(ind->dtype));
        if (!dl_shape_equal(ind, gy))
            return dl_error("%s: indices have shape %s, expected %s", op,
                            dl_op_shape_str(ind, a, sizeof a), dl_op_shape_str(gy, b, sizeof b));
    }
    return 0;
}

typedef enum { POOL_MAX, POOL_AVG, POOL_ADAPTIVE_AVG, POOL_ADAPTIVE_MAX } pool_kind;

/* Whether the CUDA nn table has the kernel of kind (forward or backward). */
static bool pool_cuda_has(pool_kind kind, bool backward) {
    const dl_cuda_pool_kernels *k = dl_cuda_pool;
    if (!k) return false;
    switch (kind) {
    case POOL_MAX:
        return backward ? k->pool2d_scatter_backward != NULL : k->max_pool2d_forward != NULL;
    case POOL_AVG: return backward ? k->avg_pool2d_backward != NULL : k->avg_pool2d_forward != NULL;
    case POOL_ADAPTIVE_AVG:
        return backward ? k->adaptive_avg_pool2d_backward != NULL
                        : k->adaptive_avg_pool2d_forward != NULL;
    case POOL_ADAPTIVE_MAX:
        return backward ? k->pool2d_scatter_backward != NULL
                        : k->adaptive_max_pool2d_forward != NULL;
    }
    return false;
}

/* On CUDA, a pooling result (*t, contiguous NCHW) of a channels-last x is
 * handed back channels-last, so a channels-last network stays so after its
 * pooling layers (the kernels themselves read NCHW).  *t is replaced; on
 * failure it is released, set to NULL, and -1 returned. */
static int keep_channels_last(const dl_tensor *x, dl_tensor **t) {
    if (dl_tensor_device(x).type != DL_DEVICE_CUDA || x->ndim != 4 || !dl_op_is_channels_last(x))
        return 0;
    dl_tensor *c = dl_contiguous_channels_last(*t);
    dl_tensor_release(*t);
    *t = c;
    return c ? 0 : -1;
}

/* Whether pooling of x runs on the CPU's channels-last kernels: a 4-D
 * channels-last CPU x.  (CUDA's kernels read planar buffers; see
 * keep_channels_last.) */
static bool pool_cl(const dl_tensor *x, dl_device dev) {
    return dev.type == DL_DEVICE_CPU && x->ndim == 4 && dl_op_is_channels_last(x);
}

/* How a pooling op of this kind runs on x (on dev, whose CUDA table is
 * ready): *s = *shape_in with C set for a channels-last layout (*cl); *ct
 * becomes x's dtype for CUDA's channels-last max pooling, whose use it
 * returns. */
static bool pool_layout(pool_kind kind, const dl_tensor *x, dl_device dev,
                        const dl_pool2d_shape *shape_in, dl_pool2d_shape *s, bool *cl,
                        dl_dtype *ct) {
    *cl = pool_cl(x, dev);
    /* CUDA's channels-last max pooling: x's dtype and layout */
    bool nhwc = kind == POOL_MAX && max_nhwc(x, dev.type == DL_DEVICE_CUDA);
    if (nhwc) {
        *cl = true;
        *ct = x->dtype;
    }
    *s = *shape_in;
    s->C = *cl ? x->shape[1] : 0;
    return nhwc;
}

/* finish() for a pooling result; a channels-last one (4-D) keeps its
 * layout through the dtype conversion. */
static int pool_finish(dl_tensor **t, dl_dtype dt, int ndim, const int64_t *shape, bool cl) {
    if (!cl) return dl_op_finish_view(t, dt, ndim, shape);
    if (!*t || (*t)->dtype == dt) return 0;
    dl_tensor *r = dl_op_dense_layout(*t, dt, true);
    dl_tensor_release(*t);
    *t = r;
    return r ? 0 : -1;
}

/* The forward of every pooling op: y (and indices for max kinds), on x's
 * device.  A channels-last CPU x is read in place and gives channels-last
 * results; on CUDA it is made contiguous and the results converted back. */
static int pool_forward(const char *op, pool_kind kind, dl_tensor *x,
                        const dl_pool2d_shape *shape_in, dl_tensor **y, dl_tensor **ind) {
    dl_dtype dt = x->dtype, ct = dl_op_float_dtype(dt);
    int64_t shape[4];
    pooled_shape(x, shape_in->OH, shape_in->OW, shape);
    dl_device dev = dl_tensor_device(x);
    bool cuda = dev.type == DL_DEVICE_CUDA, cl;
    if (cuda && dl_op_cuda_ready(op, dev, pool_cuda_has(kind, false))) return -1;
    dl_pool2d_shape sv, *s = &sv;
    bool nhwc = pool_layout(kind, x, dev, shape_in, s, &cl, &ct);
    /* the CPU's float32 channels-last max pooling skips the indices when
     * nobody wants them (ind NULL: inference) */
    bool values_only = !ind && !cuda && kind == POOL_MAX && ct == DL_DTYPE_F32 && s->C;
    bool with_ind = (kind == POOL_MAX || kind == POOL_ADAPTIVE_MAX) && !values_only;
    dl_tensor *t[3] = {dl_op_dense_layout(x, ct, cl),
                       dl_op_empty_layout(x->ndim, shape, ct, dev, cl),
                       with_ind ? dl_op_empty_layout(x->ndim, shape, DL_DTYPE_I64, dev, cl) : NULL};
    int rc = -1;
    if (!t[0] || !t[1] || (with_ind && !t[2])) goto done;
    rc = 0;
    if (dl_tensor_numel(t[1]) > 0) {
        void *yp = dl_tensor_data_ptr(t[1]);
        const void *xp = dl_tensor_data_ptr(t[0]);
        int64_t *ip = with_ind ? dl_tensor_data_ptr(t[2]) : NULL;
        if (nhwc) {
            rc = dl_cuda_pool->max_pool2d_forward_nhwc(dt, s, yp, ip, xp);
        } else if (cuda) {
            const dl_cuda_pool_kernels *k = dl_cuda_pool;
            switch (kind) {
            case POOL_MAX: rc = k->max_pool2d_forward(ct, s, yp, ip, xp); break;
            case POOL_AVG: rc = k->avg_pool2d_forward(ct, s, yp, xp); break;
            case POOL_ADAPTIVE_AVG: rc = k->adaptive_avg_pool2d_forward(ct, s, yp, xp); break;
            case POOL_ADAPTIVE_MAX: rc = k->adaptive_max_pool2d_forward(ct, s, yp, ip, xp); break;
            }
        } else {
            switch (kind) {
            case POOL_MAX: rc = dl_cpu_max_pool2d_forward(ct, s, yp, ip, xp); break;
            case POOL_AVG: rc = dl_cpu_avg_pool2d_forward(ct, s, yp, xp); break;
            case POOL_ADAPTIVE_AVG: rc = dl_cpu_adaptive_avg_pool2d_forward(ct, s, yp, xp); break;
            case POOL_ADAPTIVE_MAX:
                rc = dl_cpu_adaptive_max_pool2d_forward(ct, s, yp, ip, xp);
                break;
            }
        }
    }
    if (rc || pool_finish(&t[1], dt, x->ndim, shape, cl) || keep_channels_last(x, &t[1])) {
        rc = -1;
        goto done;
    }
    *y = t[1];
    t[1] = NULL;
    if (ind) {
        *ind = t[2];
        t[2] = NULL;
    }
done:
    dl_op_release_all(t, 3);
    return rc;
}

/* The backward of every pooling op: gx (like x, on its device and, for a
 * channels-last x, in its layout; gy and the indices are brought to x's
 * layout, never x to theirs). */
static dl_tensor *pool_backward(const char *op, pool_kind kind, dl_tensor *gy, dl_tensor *x,
                                dl_tensor *ind, const dl_pool2d_shape *shape_in) {
    dl_dtype dt = x->dtype, ct = dl_op_float_dtype(dt);
    int64_t xshape[4];
    pooled_shape(x, shape_in->H, shape_in->W, xshape);
    dl_device dev;
    dl_tensor *ops[3] = {gy, x, ind};
    if (dl_common_device(op, 3, ops, &dev)) return NULL;
    bool cuda = dev.type == DL_DEVICE_CUDA, cl;
    if (cuda && dl_op_cuda_ready(op, dev, pool_cuda_has(kind, true))) return NULL;
    dl_pool2d_shape sv, *s = &sv;
    bool nhwc = pool_layout(kind, x, dev, shape_in, s, &cl, &ct);
    dl_tensor *t[3] = {dl_op_dense_layout(gy, ct, cl),
                       ind ? dl_op_dense_layout(ind, DL_DTYPE_I64, cl) : NULL,
                       dl_op_empty_layout(x->ndim, xshape, ct, dev, cl)};
    dl_tensor *gx = NULL;
    int rc = -1;
    if (!t[0] || (ind && !t[1]) || !t[2]) goto done;
    rc = 0;
    if (dl_tensor_numel(t[2]) > 0) {
        void *gp = dl_tensor_data_ptr(t[2]);
        const void *yp = dl_tensor_data_ptr(t[0]);
        const int64_t *ip = t[1] ? dl_tensor_data_ptr(t[1]) : NULL; /* max pooling only */
        if (nhwc) {
            rc = dl_cuda_pool->max_pool2d_backward_nhwc(dt, s, gp, yp, ip);
        } else if (cuda) {
            const dl_cuda_pool_kernels *k = dl_cuda_pool;
            switch (kind) {
            case POOL_MAX:
            case POOL_ADAPTIVE_MAX:
                rc = k->pool2d_scatter_backward(ct, s->P, s->H * s->W, s->OH * s->OW, gp, yp, ip);
                break;
            case POOL_AVG: rc = k->avg_pool2d_backward(ct, s, gp, yp); break;
            case POOL_ADAPTIVE_AVG: rc = k->adaptive_avg_pool2d_backward(ct, s, gp, yp); break;
            }
        } else {
            switch (kind) {
            case POOL_MAX:
            case POOL_ADAPTIVE_MAX:
                rc = dl_cpu_pool2d_scatter_backward(ct, s->P, s->H * s->W, s->OH * s->OW, s->C, gp,
                                                    yp, ip);
                break;
            case POOL_AVG: rc = dl_cpu_avg_pool2d_backward(ct, s, gp, yp); break;
            case POOL_ADAPTIVE_AVG: rc = dl_cpu_adaptive_avg_pool2d_backward(ct, s, gp, yp); break;
            }
        }
    }
    if (rc) goto done;
    gx = t[2];
    t[2] = NULL;
    if (pool_finish(&gx, dt, x->ndim, xshape, cl) || keep_channels_last(x, &gx)) gx = NULL;
done:
    dl_op_release_all(t, 3);
    return gx;
}

int dl_max_pool2d_forward(dl_tensor *x, const dl_pool2d_params *p, dl_tensor **y,
                          dl_tensor **indices) {
    dl_pool2d_shape s;
    *y = NULL;
    if (indices) *indices = NULL;
    if (pool_geometry("max_pool2d", x, p, false, &s)) return -1;
    return pool_forward("max_pool2d", POOL_MAX, x, &s, y, indices);
}

dl_tensor *dl_max_pool2d_backward(dl_tensor *gy, dl_tensor *x, dl_tensor *indices,
                                  const dl_pool2d_params *p) {
    const char *op = "max_pool2d_backward";
    dl_pool2d_shape s;
    if (pool_geometry(op, x, p, false, &s) || check_grad(op, gy, x, indices, s.OH, s.OW))
        return NULL;
    return pool_backward(op, POOL_MAX, gy, x, indices, &s);
}

dl_tensor *dl_avg_pool2d_forward(dl_tensor *x, const dl_pool2d_params *p) {
    dl_pool2d_shape s;
    dl_tensor *y = NULL;
    if (pool_geometry("avg_pool2d", x, p, true, &s)) return NULL;
    pool_forward("avg_pool2d", POOL_AVG, x, &s, &y, NULL);
    return y;
}

dl_tensor *dl_avg_pool2d_backward(dl_tensor *gy, dl_tensor *x, const dl_pool2d_params *p) {
    const char *op = "avg_pool2d_backward";
    dl_pool2d_shape s;
    if (pool_geometry(op, x, p, true, &s) || check_grad(op, gy, x, NULL, s.OH, s.OW)) return NULL;
    return pool_backward(op, POOL_AVG, gy, x, NULL, &s);
}

/* The geometry of adaptive pooling of x to (oh, ow). */
static int adaptive_geometry(const char *op, const dl_tensor *x, int64_t oh, int64_t ow,
                             dl_pool2d_shape *s) {
    if (pool_input(op, x)) return -1;
    int64_t osize[2] = {oh, ow};
    if (dl_op_check_limit(op, "output_size", osize, 2)) return -1;
    if (oh < 0 || ow < 0)
        return dl_error("%s: output_size must be non-negative, got (%lld, %lld)", op, (long long)oh,
                        (long long)ow);
    memset(s, 0, sizeof *s);
    int o = x->ndim - 3;
    s->P = (o ? x->shape[0] : 1) * x->shape[o];
    s->H = x->shape[o + 1];
    s->W = x->shape[o + 2];
    s->OH = oh;
    s->OW = ow;
    return 0;
}

dl_tensor *dl_adaptive_avg_pool2d_forward(dl_tensor *x, int64_t oh, int64_t ow) {
    dl_pool2d_shape s;
    dl_tensor *y = NULL;
    if (adaptive_geometry("adaptive_avg_pool2d", x, oh, ow, &s)) return NULL;
    pool_forward("adaptive_avg_pool2d", POOL_ADAPTIVE_AVG, x, &s, &y, NULL);
    return y;
}

/* gy's spatial sizes are the output size; check_grad checks the rest. */
static int adaptive_backward_geometry(const char *op, const dl_tensor *gy, const dl_tensor *x,
                                      const dl_tensor *ind, dl_pool2d_shape *s) {
    char a[96];
    if (gy->ndim < 2)
        return dl_error("%s: grad_output must be 3-D or 4-D, got %s", op,
                        dl_op_shape_str(gy, a, sizeof a));
    int64_t oh = gy->shape[gy->ndim - 2], ow = gy->shape[gy->ndim - 1];
    return adaptive_geometry(op, x, oh, ow, s) || check_grad(op, gy, x, ind, oh, ow);
}

dl_tensor *dl_adaptive_avg_pool2d_backward(dl_tensor *gy, dl_tensor *x) {
    dl_pool2d_shape s;
    const char *op = "adaptive_avg_pool2d_backward";
    if (adaptive_backward_geometry(op, gy, x, NULL, &s)) return NULL;
    return pool_backward(op, POOL_ADAPTIVE_AVG, gy, x, NULL, &s);
}

int dl_adaptive_max_pool2d_forward(dl_tensor *x, int64_t oh, int64_t ow, dl_tensor **y,
                                   dl_tensor **indices) {
    dl_pool2d_shape s;
    *y = *indices = NULL;
    if (adaptive_geometry("adaptive_max_pool2d", x, oh, ow, &s)) return -1;
    return pool_forward("adaptive_max_pool2d", POOL_ADAPTIVE_MAX, x, &s, y, indices);
}

dl_tensor *dl_adaptive_max_pool2d_backward(dl_tensor *gy, dl_tensor *x, dl_tensor *indices) {
    dl_pool2d_shape s;
    const char *op = "adaptive_max_pool2d_backward";
    if (adaptive_backward_geometry(op, gy, x, indices, &s)) return NULL;
    return pool_backward(op, POOL_ADAPTIVE_MAX, gy, x, indices, &s);
}

/* --- with autograd ----------------------------------------------------------------
 * One node per op; it saves x (and the indices of the max kinds) and says in
 * its parameters which backward runs. */

typedef struct {
    bool adaptive; /* the adaptive backward (no window parameters) */
    dl_pool2d_params p;
} pool_ctx;

static int maxpool_backward(dl_node *n, dl_tensor *const *gout, dl_tensor **gin) {
    const pool_ctx *c = n->ctx;
    dl_tensor *x = dl_node_saved(n, 0), *ind = dl_node_saved(n, 1);
    if (!x || !ind) return -1;
    gin[0] = c->adaptive ? dl_adaptive_max_pool2d_backward(gout[0], x, ind)
                         : dl_max_pool2d_backward(gout[0], x, ind, &c->p);
    return gin[0] ? 0 : -1;
}

/* p NULL: the adaptive kind.  ind is consumed: handed to *indices or released. */
static dl_tensor *record_maxpool(const char *name, dl_tensor *x, dl_tensor *y, dl_tensor *ind,
                                 const dl_pool2d_params *p, dl_tensor **indices) {
    pool_ctx c = {.adaptive = p == NULL, .p = p ? *p : dl_pool2d_default_params(1, 1)};
    dl_tensor *save[2] = {x, ind};
    y = dl_op_record(y, name, maxpool_backward, 1, &x, 2, save, &c, sizeof c);
    if (y && indices)
        *indices = ind;
    else
        dl_tensor_release(ind);
    return y;
}

dl_tensor *dl_max_pool2d(dl_tensor *x, const dl_pool2d_params *p, dl_tensor **indices) {
    dl_tensor *y, *ind = NULL;
    if (!indices && !dl_autograd_needed(1, &x)) {
        /* nothing will read the indices: kernels may skip them */
        if (dl_max_pool2d_forward(x, p, &y, NULL)) return NULL;
        return y;
    }
    if (dl_max_pool2d_forward(x, p, &y, &ind)) return NULL;
    return record_maxpool("MaxPool2DWithIndicesBackward", x, y, ind, p, indices);
}

dl_tensor *dl_adaptive_max_pool2d(dl_tensor *x, int64_t oh, int64_t ow, dl_tensor **indices) {
    dl_tensor *y, *ind;
    if (dl_adaptive_max_pool2d_forward(x, oh, ow, &y, &ind)) return NULL;
    return record_maxpool("AdaptiveMaxPool2DBackward", x, y, ind, NULL, indices);
}

static int avgpool_backward(dl_node *n, dl_tensor *const *gout, dl_tensor **gin) {
    const pool_ctx *c = n->ctx;
    dl_tensor *x = dl_node_saved(n, 0);
    if (!x) return -1;
    gin[0] = c->adaptive ? dl_adaptive_avg_pool2d_backward(gout[0], x)
                         : dl_avg_pool2d_backward(gout[0], x, &c->p);
    return gin[0] ? 0 : -1;
}

/* p NULL: the adaptive kind. */
static dl_tensor *record_avgpool(const char *name, dl_tensor *x, dl_tensor *y,
                                 const dl_pool2d_params *p) {
    pool_ctx c = {.adaptive = p == NULL, .p = p ? *p : dl_pool2d_default_params(1, 1)};
    return dl_op_record(y, name, avgpool_backward, 1, &x, 1, &x, &c, sizeof c);
}

dl_tensor *dl_avg_pool2d(dl_tensor *x, const dl_pool2d_params *p) {
    return record_avgpool("AvgPool2DBackward", x, dl_avg_pool2d_forward(x, p), p);
}

dl_tensor *dl_adaptive_avg_pool2d(dl_tensor *x, int64_t oh, int64_t ow) {
    return record_avgpool("AdaptiveAvgPool2DBackward", x, dl_adaptive_avg_pool2d_forward(x, oh, ow),
                          NULL);
}
