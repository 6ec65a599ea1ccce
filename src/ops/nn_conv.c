/* nn_conv.c - the convolution, batch-norm and pooling op family (see
 * nn_conv.h): argument checks, shape inference, allocation and dispatch to
 * the CPU kernels (cpu/conv.c, cpu/batchnorm.c, cpu/pool.c).
 *
 * Every op follows one pattern: check everything first; bring the operands
 * to the compute dtype (float32 for float16/bfloat16) and to contiguous
 * memory (`prep`); allocate results in the compute dtype; run the kernel;
 * round results back to the caller's dtype.  An unbatched (C,H,W) operand is
 * viewed as (1,C,H,W) and results are viewed back.
 * Invariants: operands are never modified (batch norm's running stats
 * excepted); every temporary is released on every path; kernels only see
 * validated sizes, so they never read or write out of bounds. */
#include "ops/nn_conv.h"
#include "ops/views.h"
#include "ops/elementwise.h"
#include "core/error.h"
#include "cpu/activation.h"
#include "cpu/batchnorm.h"
#include "cpu/conv.h"
#include "cpu/dnnl_util.h"
#include "cpu/pool.h"
#include "ops/cuda_nn.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* --- shared helpers -------------------------------------------------------------- */

/* The dtype kernels compute in: float32 for the half types. */
static dl_dtype compute_dtype(dl_dtype dt) {
    return (dt == DL_DTYPE_F16 || dt == DL_DTYPE_BF16) ? DL_DTYPE_F32 : dt;
}

/* t in dtype dt, contiguous: a new reference (t itself when it already is). */
static dl_tensor *prep(dl_tensor *t, dl_dtype dt) {
    if (!t) return NULL;
    dl_tensor *a = dl_tensor_to_dtype(t, dt);
    if (!a) return NULL;
    dl_tensor *c = dl_tensor_contiguous(a);
    dl_tensor_release(a);
    return c;
}

/* Converts *t (a result in the compute dtype) to dt in place of the pointer,
 * and views it with shape (ndim, shape) (unbatched results).  Returns 0/-1;
 * on failure *t is released and NULL. */
static int finish(dl_tensor **t, dl_dtype dt, int ndim, const int64_t *shape) {
    if (!*t) return 0;
    dl_tensor *r = dl_tensor_to_dtype(*t, dt);
    dl_tensor_release(*t);
    *t = NULL;
    if (!r) return -1;
    dl_tensor *v = dl_tensor_view(r, ndim, shape);
    dl_tensor_release(r);
    if (!v) return -1;
    *t = v;
    return 0;
}

static void release_all(dl_tensor **ts, int n) {
    for (int i = 0; i < n; i++) {
        dl_tensor_release(ts[i]);
        ts[i] = NULL;
    }
}

/* "[2, 3, 4]" of t */
static const char *shape_of(const dl_tensor *t, char *buf, size_t n) {
    return dl_shape_str(t->ndim, t->shape, buf, n);
}

/* --- conv2d ----------------------------------------------------------------------
 * On CUDA (cuDNN, cuda/conv.cu) the operands keep their dtype (float16 and
 * bfloat16 compute in float32 inside cuDNN) and one of two memory layouts:
 * channels-last when the input is channels-last (NHWC strides on an NCHW
 * shape) and not float64, else contiguous NCHW; the weight, grad_output and
 * every result follow that layout, except the weight's gradient, which takes
 * the weight's own layout. */
#include "ops/cuda_linalg.h"

/* conv2d's operand checks: floating, on one device (checked by the caller). */
static int conv_check_float(const char *op, const char *what, const dl_tensor *t) {
    if (!dl_dtype_is_floating(t->dtype))
        return dl_error("%s: %s must be a floating-point tensor, got %s", op, what,
                        dl_dtype_name(t->dtype));
    return 0;
}

dl_conv2d_params dl_conv2d_default_params(void) {
    dl_conv2d_params p = {{1, 1}, {0, 0}, {1, 1}, 1};
    return p;
}

/* Sizes beyond this are refused, so that no size arithmetic overflows. */
#define SIZE_LIMIT ((int64_t)1 << 31)

static int check_limit(const char *op, const char *what, const int64_t *v, int n) {
    for (int i = 0; i < n; i++)
        if (v[i] >= SIZE_LIMIT || v[i] <= -SIZE_LIMIT)
            return dl_error("%s: %s %lld is too large", op, what, (long long)v[i]);
    return 0;
}

static int check_conv_params(const char *op, const dl_conv2d_params *p) {
    if (check_limit(op, "stride", p->stride, 2) || check_limit(op, "padding", p->padding, 2) ||
        check_limit(op, "dilation", p->dilation, 2) || check_limit(op, "groups", &p->groups, 1))
        return -1;
    for (int i = 0; i < 2; i++) {
        if (p->stride[i] < 1)
            return dl_error("%s: stride must be positive, got (%lld, %lld)", op,
                            (long long)p->stride[0], (long long)p->stride[1]);
        if (p->padding[i] < 0)
            return dl_error("%s: padding must be non-negative, got (%lld, %lld)", op,
                            (long long)p->padding[0], (long long)p->padding[1]);
        if (p->dilation[i] < 1)
            return dl_error("%s: dilation must be positive, got (%lld, %lld)", op,
                            (long long)p->dilation[0], (long long)p->dilation[1]);
    }
    if (p->groups < 1)
        return dl_error("%s: groups must be positive, got %lld", op, (long long)p->groups);
    return 0;
}

/* Checks x (N,C,H,W)/(C,H,W), w (O,C/g,KH,KW), b (O) and the params; fills s. */
static int conv_geometry(const char *op, const dl_tensor *x, const dl_tensor *w, const dl_tensor *b,
                         const dl_conv2d_params *p, dl_conv2d_shape *s) {
    char sx[96], sw[96];
    if (conv_check_float(op, "input", x) || conv_check_float(op, "weight", w)) return -1;
    if (check_conv_params(op, p)) return -1;
    if (x->ndim != 3 && x->ndim != 4)
        return dl_error("%s: expected a 3-D (C,H,W) or 4-D (N,C,H,W) input, got %d-D %s", op,
                        x->ndim, shape_of(x, sx, sizeof sx));
    if (w->ndim != 4)
        return dl_error("%s: expected a 4-D (out_channels, in_channels/groups, kH, kW) weight, "
                        "got %d-D %s",
                        op, w->ndim, shape_of(w, sw, sizeof sw));
    if (x->dtype != w->dtype)
        return dl_error("%s: input (%s) and weight (%s) must have the same dtype", op,
                        dl_dtype_name(x->dtype), dl_dtype_name(w->dtype));
    int o = x->ndim - 3;
    s->N = o ? x->shape[0] : 1;
    s->C = x->shape[o];
    s->H = x->shape[o + 1];
    s->W = x->shape[o + 2];
    s->O = w->shape[0];
    s->KH = w->shape[2];
    s->KW = w->shape[3];
    s->groups = p->groups;
    if (s->C != w->shape[1] * p->groups)
        return dl_error("%s: input has %lld channels, weight %s expects %lld (groups=%lld)", op,
                        (long long)s->C, shape_of(w, sw, sizeof sw),
                        (long long)(w->shape[1] * p->groups), (long long)p->groups);
    if (s->O % p->groups != 0)
        return dl_error("%s: out_channels (%lld) must be divisible by groups (%lld)", op,
                        (long long)s->O, (long long)p->groups);
    if (b) {
        if (conv_check_float(op, "bias", b)) return -1;
        if (b->dtype != x->dtype)
            return dl_error("%s: bias (%s) must have the input's dtype (%s)", op,
                            dl_dtype_name(b->dtype), dl_dtype_name(x->dtype));
        if (b->ndim != 1 || b->shape[0] != s->O)
            return dl_error("%s: expected a bias of shape [%lld], got %s", op, (long long)s->O,
                            shape_of(b, sx, sizeof sx));
    }
    s->sh = p->stride[0];
    s->sw = p->stride[1];
    s->ph = p->padding[0];
    s->pw = p->padding[1];
    s->dh = p->dilation[0];
    s->dw = p->dilation[1];
    int64_t eh = s->dh * (s->KH - 1) + 1, ew = s->dw * (s->KW - 1) + 1;
    int64_t hp = s->H + 2 * s->ph, wp = s->W + 2 * s->pw;
    if (eh > hp || ew > wp)
        return dl_error("%s: kernel size %lldx%lld (dilated %lldx%lld) is larger than the padded "
                        "input %lldx%lld",
                        op, (long long)s->KH, (long long)s->KW, (long long)eh, (long long)ew,
                        (long long)hp, (long long)wp);
    s->OH = (hp - eh) / s->sh + 1;
    s->OW = (wp - ew) / s->sw + 1;
    return 0;
}

/* y = bias (or 0) everywhere: the result when nothing is summed (C == 0 or
 * an empty input plane). y is (N,O,S) contiguous in the compute dtype. */
static int fill_bias(dl_tensor *y, dl_tensor *b) {
    if (!b) return dl_tensor_fill_(y, 0);
    int64_t shape[3] = {1, b->shape[0], 1};
    dl_tensor *bv = dl_tensor_view(b, 3, shape);
    int64_t ys[3] = {y->shape[0], y->shape[1], y->shape[2] * y->shape[3]};
    dl_tensor *yv = bv ? dl_tensor_view(y, 3, ys) : NULL;
    int rc = yv ? dl_tensor_copy_(yv, bv) : -1;
    dl_tensor_release(yv);
    dl_tensor_release(bv);
    return rc;
}

bool dl_conv2d_winograd(int on) {
    bool old = dl_cpu_conv_get_winograd();
    if (on >= 0) dl_cpu_conv_set_winograd(on != 0);
    return old;
}

const char *dl_conv2d_layout(const char *name) {
    static const char *const names[] = {"plain", "any", "auto"};
    const char *old = names[dl_cpu_conv_get_layout()];
    if (!name) return old;
    for (int i = 0; i < 3; i++)
        if (strcmp(name, names[i]) == 0) {
            dl_cpu_conv_set_layout((dl_conv_layout)i);
            return old;
        }
    dl_error("conv2d_layout: unknown layout '%s' (expected plain, any or auto)", name);
    return NULL;
}

int dl_nn_conv_cache_size(void) {
    return dl_dnnl_cache_size();
}

int dl_nn_conv_cache_capacity(void) {
    return DL_DNNL_CACHE_CAPACITY;
}

/* Whether t (4-D) is channels-last: dense NHWC strides (dims of size 1 aside). */
static bool conv_channels_last(const dl_tensor *t) {
    static const int inner_first[4] = {1, 3, 2, 0}; /* C, W, H, N */
    if (t->ndim != 4) return false;
    int64_t expect = 1;
    for (int i = 0; i < 4; i++) {
        int d = inner_first[i];
        if (t->shape[d] != 1 && t->strides[d] != expect) return false;
        expect *= t->shape[d];
    }
    return true;
}

/* The layout CUDA computes in for a 4-D input x: channels-last when x is (and
 * is not also plain contiguous) and cuDNN supports it for the dtype. */
static bool conv_nhwc(const dl_tensor *x) {
    return x->dtype != DL_DTYPE_F64 && !dl_tensor_is_contiguous(x) && conv_channels_last(x);
}

static const int to_nhwc[4] = {0, 2, 3, 1}, to_nchw[4] = {0, 3, 1, 2};

/* t (4-D) laid out channels-last (nhwc) or contiguous NCHW: t itself
 * (retained) when it already is, else a copy. */
static dl_tensor *conv_layout(dl_tensor *t, bool nhwc) {
    if (!nhwc) return dl_tensor_contiguous(t);
    if (conv_channels_last(t)) return dl_tensor_retain(t);
    dl_tensor *p = dl_tensor_permute(t, to_nhwc);
    dl_tensor *c = p ? dl_tensor_clone(p) : NULL;
    dl_tensor *r = c ? dl_tensor_permute(c, to_nchw) : NULL;
    dl_tensor_release(p);
    dl_tensor_release(c);
    return r;
}

/* A new tensor of the 4-D shape, laid out channels-last (nhwc) or NCHW. */
static dl_tensor *conv_empty(const int64_t *shape, dl_dtype dt, dl_device dev, bool nhwc) {
    if (!nhwc) return dl_tensor_empty(4, shape, dt, dev);
    int64_t perm[4] = {shape[0], shape[2], shape[3], shape[1]};
    dl_tensor *e = dl_tensor_empty(4, perm, dt, dev);
    dl_tensor *r = e ? dl_tensor_permute(e, to_nchw) : NULL;
    dl_tensor_release(e);
    return r;
}

/* 4-D view of an (N,C,H,W) or unbatched (C,H,W) operand. */
static dl_tensor *conv_batched(dl_tensor *t) {
    return t->ndim == 3 ? dl_tensor_unsqueeze(t, 0) : dl_tensor_retain(t);
}

/* Whether CUDA would compute x's convolution channels-last. */
static bool conv_channels_last_input(dl_tensor *x) {
    dl_tensor *x4 = conv_batched(x);
    bool r = x4 && conv_nhwc(x4);
    dl_tensor_release(x4);
    return r;
}

/* conv2d's forward on CUDA: operands in the compute layout (channels-last
 * only when nhwc_ok), y in it too. */
static dl_tensor *conv2d_forward_cuda_in(const dl_conv2d_shape *s, dl_tensor *x, dl_tensor *w,
                                         dl_tensor *b, dl_device dev, bool nhwc_ok) {
    dl_dtype dt = x->dtype;
    dl_tensor *x4 = conv_batched(x);
    if (!x4) return NULL;
    bool nhwc = nhwc_ok && conv_nhwc(x4);
    int64_t yshape[4] = {s->N, s->O, s->OH, s->OW};
    dl_tensor *t[4] = {conv_layout(x4, nhwc), conv_layout(w, nhwc),
                       b ? dl_tensor_contiguous(b) : NULL, conv_empty(yshape, dt, dev, nhwc)};
    dl_tensor_release(x4);
    dl_tensor *y = NULL;
    if (!t[0] || !t[1] || (b && !t[2]) || !t[3]) goto done;
    int rc;
    if (s->N == 0 || s->O == 0)
        rc = 0;
    else if (s->C == 0 || s->H == 0 || s->W == 0)
        rc = fill_bias(t[3], t[2]);
    else
        rc = dl_cuda_la->conv2d_forward(dev.index, dt, s, nhwc, dl_tensor_data_ptr(t[3]),
                                        dl_tensor_data_ptr(t[0]), dl_tensor_data_ptr(t[1]),
                                        t[2] ? dl_tensor_data_ptr(t[2]) : NULL);
    if (rc) goto done;
    y = x->ndim == 4 ? dl_tensor_retain(t[3]) : dl_tensor_select(t[3], 0, 0);
done:
    release_all(t, 4);
    return y;
}

/* conv2d's backward on CUDA: gx in the compute layout (x's, when nhwc_ok),
 * gw in w's own. */
static int conv2d_backward_cuda_in(const dl_conv2d_shape *s, dl_tensor *gy, dl_tensor *x,
                                   dl_tensor *w, const bool need[3], dl_device dev, bool nhwc_ok,
                                   dl_tensor **gx, dl_tensor **gw, dl_tensor **gb) {
    dl_dtype dt = x->dtype;
    dl_tensor *x4 = conv_batched(x), *gy4 = conv_batched(gy);
    bool nhwc = nhwc_ok && x4 && conv_nhwc(x4);
    bool w_nhwc = !dl_tensor_is_contiguous(w) && conv_channels_last(w);
    int64_t xshape[4] = {s->N, s->C, s->H, s->W};
    /* in: gy x w; out: gx gw gb */
    dl_tensor *t[6] = {gy4 ? conv_layout(gy4, nhwc) : NULL,
                       need[1] && x4 ? conv_layout(x4, nhwc) : NULL,
                       need[0] ? conv_layout(w, nhwc) : NULL,
                       need[0] ? conv_empty(xshape, dt, dev, nhwc) : NULL,
                       need[1] ? conv_empty(w->shape, dt, dev, nhwc) : NULL,
                       need[2] ? dl_tensor_empty(1, &s->O, dt, dev) : NULL};
    dl_tensor_release(x4);
    dl_tensor_release(gy4);
    int rc = -1;
    if (!t[0] || (need[1] && (!t[1] || !t[4])) || (need[0] && (!t[2] || !t[3])) ||
        (need[2] && !t[5]))
        goto done;
    if (dl_tensor_numel(t[0]) == 0 || s->C == 0 || s->H == 0 || s->W == 0) {
        /* nothing flows: zero gradients, gb the (possibly empty) sum */
        rc = 0;
        for (int i = 3; i < 6 && rc == 0; i++)
            if (t[i]) rc = dl_tensor_fill_(t[i], 0);
        if (rc == 0 && t[5] && dl_tensor_numel(t[0]) > 0)
            rc = dl_cuda_la->conv2d_backward(dev.index, dt, s, nhwc, NULL, NULL,
                                             dl_tensor_data_ptr(t[5]), dl_tensor_data_ptr(t[0]),
                                             NULL, NULL);
    } else {
        rc = dl_cuda_la->conv2d_backward(
            dev.index, dt, s, nhwc, t[3] ? dl_tensor_data_ptr(t[3]) : NULL,
            t[4] ? dl_tensor_data_ptr(t[4]) : NULL, t[5] ? dl_tensor_data_ptr(t[5]) : NULL,
            dl_tensor_data_ptr(t[0]), t[1] ? dl_tensor_data_ptr(t[1]) : NULL,
            t[2] ? dl_tensor_data_ptr(t[2]) : NULL);
    }
    if (rc) goto done;
    rc = -1;
    if (t[3] && x->ndim == 3) { /* unbatched */
        dl_tensor *v = dl_tensor_select(t[3], 0, 0);
        if (!v) goto done;
        dl_tensor_release(t[3]);
        t[3] = v;
    }
    if (t[4] && w_nhwc != nhwc) {
        dl_tensor *g = conv_layout(t[4], w_nhwc);
        if (!g) goto done;
        dl_tensor_release(t[4]);
        t[4] = g;
    }
    rc = 0;
    *gx = t[3];
    *gw = t[4];
    *gb = t[5];
    t[3] = t[4] = t[5] = NULL;
done:
    release_all(t, 6);
    return rc;
}

/* The CPU kernels' operand layouts (DL_CONV_FMT_*) for float32 x and w:
 * channels-last activations when x (4-D) is channels-last and not also plain
 * contiguous, OHWI weights when w is; float64 and the half types run NCHW. */
static int cpu_conv_fmt(const dl_tensor *x, const dl_tensor *w) {
    if (x->dtype != DL_DTYPE_F32 || w->dtype != DL_DTYPE_F32) return 0;
    int fmt = 0;
    if (x->ndim == 4 && conv_nhwc(x)) fmt |= DL_CONV_FMT_NHWC;
    if (!dl_tensor_is_contiguous(w) && conv_channels_last(w)) fmt |= DL_CONV_FMT_W_OHWI;
    return fmt;
}

/* t in the compute dtype ct and laid out channels-last (cl) or contiguous. */
static dl_tensor *prep_conv(dl_tensor *t, dl_dtype ct, bool cl) {
    if (!cl) return prep(t, ct);
    return conv_layout(t, true); /* cl implies float32 = ct */
}

/* The CUDA paths: channels-last first where x is; should cuDNN refuse that
 * layout for this shape and dtype, contiguous NCHW (same values, results in
 * NCHW). */
static dl_tensor *conv2d_forward_cuda(const dl_conv2d_shape *s, dl_tensor *x, dl_tensor *w,
                                      dl_tensor *b, dl_device dev) {
    if (!dl_cuda_la || !dl_cuda_la->conv2d_forward) {
        dl_cuda_missing("conv2d");
        return NULL;
    }
    dl_tensor *y = conv2d_forward_cuda_in(s, x, w, b, dev, true);
    if (!y && conv_channels_last_input(x)) y = conv2d_forward_cuda_in(s, x, w, b, dev, false);
    return y;
}

static int conv2d_backward_cuda(const dl_conv2d_shape *s, dl_tensor *gy, dl_tensor *x, dl_tensor *w,
                                const bool need[3], dl_device dev, dl_tensor **gx, dl_tensor **gw,
                                dl_tensor **gb) {
    if (!dl_cuda_la || !dl_cuda_la->conv2d_backward) return dl_cuda_missing("conv2d_backward");
    int rc = conv2d_backward_cuda_in(s, gy, x, w, need, dev, true, gx, gw, gb);
    if (rc && conv_channels_last_input(x))
        rc = conv2d_backward_cuda_in(s, gy, x, w, need, dev, false, gx, gw, gb);
    return rc;
}

/* The forward; inference: no gradient will be taken through it (the CPU may
 * then pick faster, slightly less exact kernels: Winograd, see conv.c). */
static dl_tensor *conv2d_forward(dl_tensor *x, dl_tensor *w, dl_tensor *b,
                                 const dl_conv2d_params *p, bool inference) {
    const char *op = "conv2d";
    dl_conv2d_shape s;
    dl_device dev;
    dl_tensor *ts[3] = {x, w, b};
    if (dl_common_device(op, 3, ts, &dev) || conv_geometry(op, x, w, b, p, &s)) return NULL;
    if (dev.type == DL_DEVICE_CUDA) return conv2d_forward_cuda(&s, x, w, b, dev);
    dl_dtype dt = x->dtype, ct = compute_dtype(dt);
    int64_t yshape[4] = {s.N, s.O, s.OH, s.OW};
    int fmt = cpu_conv_fmt(x, w);
    bool nhwc = fmt & DL_CONV_FMT_NHWC;
    dl_tensor *t[4] = {prep_conv(x, ct, nhwc), prep_conv(w, ct, fmt & DL_CONV_FMT_W_OHWI),
                       b ? prep(b, ct) : NULL, conv_empty(yshape, ct, DL_CPU, nhwc)};
    if (inference) fmt |= DL_CONV_INFERENCE;
    dl_tensor *y = NULL;
    if (!t[0] || !t[1] || (b && !t[2]) || !t[3]) goto done;
    int rc;
    if (s.N == 0 || s.O == 0)
        rc = 0;
    else if (s.C == 0 || s.H == 0 || s.W == 0)
        rc = fill_bias(t[3], t[2]);
    else
        rc = dl_cpu_conv2d_forward(ct, &s, fmt, 0, dl_tensor_data_ptr(t[3]),
                                   dl_tensor_data_ptr(t[0]), dl_tensor_data_ptr(t[1]),
                                   t[2] ? dl_tensor_data_ptr(t[2]) : NULL);
    if (rc) goto done;
    y = t[3];
    t[3] = NULL;
    /* (a channels-last y is float32 and 4-D already) */
    if (!nhwc && finish(&y, dt, x->ndim, x->ndim == 4 ? yshape : yshape + 1)) y = NULL;
done:
    release_all(t, 4);
    return y;
}

dl_tensor *dl_conv2d_forward(dl_tensor *x, dl_tensor *w, dl_tensor *b, const dl_conv2d_params *p) {
    return conv2d_forward(x, w, b, p, false);
}

/* y = relu?(conv2d(x, w, b) + add?) with the add and ReLU done by oneDNN as
 * post-ops of a float32 CPU convolution (4-D x); otherwise by the plain ops. */
dl_tensor *dl_conv2d_forward_post(dl_tensor *x, dl_tensor *w, dl_tensor *b,
                                  const dl_conv2d_params *p, dl_tensor *add, bool relu) {
    const char *op = "conv2d";
    dl_conv2d_shape s;
    dl_device dev;
    dl_tensor *ts[4] = {x, w, b, add};
    if (dl_common_device(op, 4, ts, &dev) || conv_geometry(op, x, w, b, p, &s)) return NULL;
    int64_t yshape[4] = {s.N, s.O, s.OH, s.OW};
    if (add && (add->ndim != x->ndim || memcmp(add->shape, x->ndim == 4 ? yshape : yshape + 1,
                                               sizeof(int64_t) * (size_t)x->ndim) != 0)) {
        char a[96], e[96];
        dl_error("%s: the tensor to add has shape %s, expected the output's %s", op,
                 shape_of(add, a, sizeof a),
                 dl_shape_str(x->ndim, x->ndim == 4 ? yshape : yshape + 1, e, sizeof e));
        return NULL;
    }
    bool fused = dev.type == DL_DEVICE_CPU && x->ndim == 4 && x->dtype == DL_DTYPE_F32 &&
                 w->dtype == DL_DTYPE_F32 && (!b || b->dtype == DL_DTYPE_F32) &&
                 (!add || add->dtype == DL_DTYPE_F32) && s.N * s.O * s.C * s.H * s.W > 0;
    if (!fused) {
        dl_tensor *y = conv2d_forward(x, w, b, p, true);
        if (y && add) {
            dl_tensor *z = dl_add(y, add, 1.0);
            dl_tensor_release(y);
            y = z;
        }
        if (y && relu) {
            dl_tensor *zero = dl_tensor_zeros(0, NULL, y->dtype, DL_CPU);
            dl_tensor *z = zero ? dl_maximum(y, zero) : NULL;
            dl_tensor_release(zero);
            dl_tensor_release(y);
            y = z;
        }
        return y;
    }
    int fmt = cpu_conv_fmt(x, w);
    bool nhwc = fmt & DL_CONV_FMT_NHWC;
    dl_tensor *t[4] = {
        prep_conv(x, DL_DTYPE_F32, nhwc), prep_conv(w, DL_DTYPE_F32, fmt & DL_CONV_FMT_W_OHWI),
        b ? prep(b, DL_DTYPE_F32) : NULL, conv_empty(yshape, DL_DTYPE_F32, DL_CPU, nhwc)};
    dl_tensor *y = NULL;
    /* Where oneDNN runs its post-ops at full speed, the bias, the add (sum)
     * and the ReLU go inside the convolution.  On its GEMM path (1x1 NCHW)
     * they cost a slow separate pass each (the bias alone added ~15% to
     * ResNet-50's 1x1 layers), so there they are one pass of our own. */
    bool own = !dl_cpu_conv2d_sum_fast(&s, fmt), sum = add && !own;
    dl_tensor *a = own && add ? prep(add, DL_DTYPE_F32) : NULL;
    if (!t[0] || !t[1] || (b && !t[2]) || !t[3] || (own && add && !a) ||
        (sum && dl_tensor_copy_(t[3], add)))
        goto done;
    int post = own ? 0 : (sum ? DL_CONV_POST_SUM : 0) | (relu ? DL_CONV_POST_RELU : 0);
    if (dl_cpu_conv2d_forward(DL_DTYPE_F32, &s, fmt | DL_CONV_INFERENCE, post,
                              dl_tensor_data_ptr(t[3]), dl_tensor_data_ptr(t[0]),
                              dl_tensor_data_ptr(t[1]),
                              t[2] && !own ? dl_tensor_data_ptr(t[2]) : NULL))
        goto done;
    if (own && (t[2] || a || relu))
        dl_cpu_bias_add_relu_planes(dl_tensor_data_ptr(t[3]),
                                    t[2] ? dl_tensor_data_ptr(t[2]) : NULL,
                                    a ? dl_tensor_data_ptr(a) : NULL, s.N, s.O, s.OH * s.OW, relu);
    y = t[3];
    t[3] = NULL;
done:
    dl_tensor_release(a);
    release_all(t, 4);
    return y;
}

int dl_conv2d_backward(dl_tensor *gy, dl_tensor *x, dl_tensor *w, const dl_conv2d_params *p,
                       const bool need[3], dl_tensor **gx, dl_tensor **gw, dl_tensor **gb) {
    const char *op = "conv2d_backward";
    dl_conv2d_shape s;
    dl_device dev;
    dl_tensor *ts[3] = {gy, x, w};
    *gx = *gw = *gb = NULL;
    if (dl_common_device(op, 3, ts, &dev) || conv_geometry(op, x, w, NULL, p, &s) ||
        conv_check_float(op, "grad_output", gy))
        return -1;
    int64_t yshape[4] = {s.N, s.O, s.OH, s.OW};
    const int64_t *ys = x->ndim == 4 ? yshape : yshape + 1;
    if (gy->ndim != x->ndim || memcmp(gy->shape, ys, sizeof(int64_t) * (size_t)x->ndim) != 0) {
        char a[96], e[96];
        return dl_error("%s: grad_output has shape %s, expected the output's %s", op,
                        shape_of(gy, a, sizeof a), dl_shape_str(x->ndim, ys, e, sizeof e));
    }
    if (gy->dtype != x->dtype)
        return dl_error("%s: grad_output (%s) must have the input's dtype (%s)", op,
                        dl_dtype_name(gy->dtype), dl_dtype_name(x->dtype));
    if (dev.type == DL_DEVICE_CUDA)
        return conv2d_backward_cuda(&s, gy, x, w, need, dev, gx, gw, gb);
    dl_dtype dt = x->dtype, ct = compute_dtype(dt);
    int64_t xshape[4] = {s.N, s.C, s.H, s.W};
    /* gy, x and gx channels-last when x is; w and gw in w's layout */
    int fmt = gy->dtype == DL_DTYPE_F32 ? cpu_conv_fmt(x, w) : 0;
    bool nhwc = fmt & DL_CONV_FMT_NHWC, ohwi = fmt & DL_CONV_FMT_W_OHWI;
    /* in: gy x w; out: gx gw gb */
    dl_tensor *t[6] = {prep_conv(gy, ct, nhwc),
                       need[1] ? prep_conv(x, ct, nhwc) : NULL,
                       need[0] ? prep_conv(w, ct, ohwi) : NULL,
                       need[0] ? conv_empty(xshape, ct, DL_CPU, nhwc) : NULL,
                       need[1] ? conv_empty(w->shape, ct, DL_CPU, ohwi) : NULL,
                       need[2] ? dl_tensor_empty(1, &s.O, ct, DL_CPU) : NULL};
    int rc = -1;
    if (!t[0] || (need[1] && (!t[1] || !t[4])) || (need[0] && (!t[2] || !t[3])) ||
        (need[2] && !t[5]))
        goto done;
    if (dl_tensor_numel(t[0]) == 0 || s.C == 0 || s.H == 0 || s.W == 0) {
        /* nothing flows: zero gradients, gb the (possibly empty) sum */
        rc = 0;
        for (int i = 3; i < 6 && rc == 0; i++)
            if (t[i]) rc = dl_tensor_fill_(t[i], 0);
        if (rc == 0 && t[5] && dl_tensor_numel(t[0]) > 0) {
            dl_conv2d_shape s1 = s;
            s1.C = s1.groups; /* only gb is computed: no input read */
            rc = dl_cpu_conv2d_backward(ct, &s1, fmt, NULL, NULL, dl_tensor_data_ptr(t[5]),
                                        dl_tensor_data_ptr(t[0]), NULL, NULL);
        }
    } else {
        rc = dl_cpu_conv2d_backward(
            ct, &s, fmt, t[3] ? dl_tensor_data_ptr(t[3]) : NULL,
            t[4] ? dl_tensor_data_ptr(t[4]) : NULL, t[5] ? dl_tensor_data_ptr(t[5]) : NULL,
            dl_tensor_data_ptr(t[0]), t[1] ? dl_tensor_data_ptr(t[1]) : NULL,
            t[2] ? dl_tensor_data_ptr(t[2]) : NULL);
    }
    if (rc) goto done;
    /* (channels-last gx and OHWI gw are float32 and 4-D already) */
    if ((!nhwc && finish(&t[3], dt, x->ndim, x->ndim == 4 ? xshape : xshape + 1)) ||
        (!ohwi && finish(&t[4], dt, 4, w->shape)) || finish(&t[5], dt, 1, &s.O)) {
        rc = -1;
        goto done;
    }
    *gx = t[3];
    *gw = t[4];
    *gb = t[5];
    t[3] = t[4] = t[5] = NULL;
done:
    release_all(t, 6);
    return rc;
}

/* --- CUDA helpers of batch norm and pooling ---------------------------------------------
 * On CUDA, batch norm keeps half data in its dtype (the kernels compute in
 * float32) and keeps a channels-last input channels-last; pooling computes
 * in float32 on contiguous NCHW (see keep_channels_last). */

/* Like check_float, for ops whose operands may be on CUDA (the device is
 * checked by dl_common_device). */
static int float_operand(const char *op, const char *what, const dl_tensor *t) {
    if (!dl_dtype_is_floating(t->dtype))
        return dl_error("%s: %s must be a floating-point tensor, got %s", op, what,
                        dl_dtype_name(t->dtype));
    return 0;
}

/* 0 when the nn table has the kernel (have) for op, with dev made current;
 * else -1 with the error. */
static int nn_cuda_ready(const char *op, dl_device dev, bool have) {
    if (!have) return dl_cuda_missing(op);
    return dl_cuda_rt->set_device(dev.index);
}

/* True when t (N,C,*spatial) is dense with C fastest ((N,*spatial,C) in
 * memory) but not plain contiguous. */
static bool is_channels_last(const dl_tensor *t) {
    if (t->ndim < 3 || dl_tensor_is_contiguous(t)) return false;
    int64_t expect = t->shape[1];
    if (t->shape[1] != 1 && t->strides[1] != 1) return false;
    for (int d = t->ndim - 1; d >= 2; d--) {
        if (t->shape[d] != 1 && t->strides[d] != expect) return false;
        expect *= t->shape[d];
    }
    return t->shape[0] == 1 || t->strides[0] == expect;
}

/* An uninitialised tensor of shape on dev; with cl, channels-last: an
 * (N,*spatial,C) tensor viewed as (N,C,*spatial). */
static dl_tensor *empty_layout(int ndim, const int64_t *shape, dl_dtype dt, dl_device dev,
                               bool cl) {
    if (!cl) return dl_tensor_empty(ndim, shape, dt, dev);
    int64_t ps[DL_MAX_DIMS];
    int perm[DL_MAX_DIMS];
    ps[0] = shape[0];
    ps[ndim - 1] = shape[1];
    perm[0] = 0;
    perm[1] = ndim - 1;
    for (int d = 2; d < ndim; d++) {
        ps[d - 1] = shape[d];
        perm[d] = d - 1;
    }
    dl_tensor *e = dl_tensor_empty(ndim, ps, dt, dev);
    if (!e) return NULL;
    dl_tensor *v = dl_tensor_permute(e, perm);
    dl_tensor_release(e);
    return v;
}

/* t in dtype dt, contiguous or (cl) channels-last dense: a new reference. */
static dl_tensor *prep_layout(dl_tensor *t, dl_dtype dt, bool cl) {
    if (!cl) return prep(t, dt);
    if (t->dtype == dt && is_channels_last(t)) return dl_tensor_retain(t);
    dl_tensor *r = empty_layout(t->ndim, t->shape, dt, dl_tensor_device(t), true);
    if (r && dl_tensor_copy_(r, t)) {
        dl_tensor_release(r);
        r = NULL;
    }
    return r;
}

/* --- batch_norm -------------------------------------------------------------------- */

/* The device of batch norm's n operands (NULLs skipped); on CUDA also checks
 * that the kernel (have) and the statistics helpers exist and makes the
 * device current. */
static int bn_device(const char *op, int n, dl_tensor *const *ts, bool have, dl_device *dev) {
    if (dl_common_device(op, n, ts, dev)) return -1;
    if (dev->type != DL_DEVICE_CUDA) return 0;
    return nn_cuda_ready(op, *dev,
                         have && dl_cuda_nn->batch_norm_update_running &&
                             dl_cuda_nn->batch_norm_var_transform);
}

dl_batch_norm_params dl_batch_norm_default_params(void) {
    dl_batch_norm_params p = {0.1, false, 0, 1e-5};
    return p;
}

/* Checks x and the per-channel tensors (each may be NULL); fills s. */
static int bn_check(const char *op, const dl_tensor *x, dl_tensor *const *vecs,
                    const char *const *names, int nvec, dl_bn_shape *s) {
    char sb[96];
    if (float_operand(op, "input", x)) return -1;
    if (x->ndim < 2 || x->ndim > 4)
        return dl_error("%s: expected a 2-D (N,C), 3-D (N,C,L) or 4-D (N,C,H,W) input, got "
                        "%d-D %s",
                        op, x->ndim, shape_of(x, sb, sizeof sb));
    s->N = x->shape[0];
    s->C = x->shape[1];
    s->S = 1;
    for (int d = 2; d < x->ndim; d++) s->S *= x->shape[d];
    bool half = compute_dtype(x->dtype) != x->dtype;
    for (int i = 0; i < nvec; i++) {
        const dl_tensor *v = vecs[i];
        if (!v) continue;
        if (float_operand(op, names[i], v)) return -1;
        if (v->dtype != x->dtype && !(half && v->dtype == DL_DTYPE_F32))
            return dl_error("%s: %s (%s) must have the input's dtype (%s)%s", op, names[i],
                            dl_dtype_name(v->dtype), dl_dtype_name(x->dtype),
                            half ? " or float32" : "");
        if (v->ndim != 1 || v->shape[0] != s->C)
            return dl_error("%s: %s must have shape [%lld] (one value per channel), got %s", op,
                            names[i], (long long)s->C, shape_of(v, sb, sizeof sb));
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
    dl_tensor *r = prep(running, DL_DTYPE_F64), *st = prep(stat, DL_DTYPE_F64);
    int64_t C = running->shape[0];
    dl_device dev = dl_tensor_device(running);
    dl_tensor *out = dl_tensor_empty(1, &C, DL_DTYPE_F64, dev);
    int rc = -1;
    if (r && st && out) {
        const double *rp = dl_tensor_data_ptr(r), *sp = dl_tensor_data_ptr(st);
        double *op = dl_tensor_data_ptr(out);
        if (dev.type == DL_DEVICE_CUDA) {
            rc = dl_cuda_nn->batch_norm_update_running(C, op, rp, sp, m, factor);
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
        if (dl_cuda_nn->batch_norm_var_transform(v->dtype, v->shape[0], dl_tensor_data_ptr(r),
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
    if (bn_device(op, 5, all, dl_cuda_nn && dl_cuda_nn->batch_norm_forward_train, &dev)) return -1;
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
                        op, shape_of(x, sb, sizeof sb));
    }
    dl_dtype dt = x->dtype, ct = compute_dtype(dt);
    /* x and y in the kernel dtype kt (CUDA: x's; CPU: float32 for the half
     * types) and, on CUDA or for a float32/float64 CPU input, x's
     * (channels-last) layout */
    bool cuda = dev.type == DL_DEVICE_CUDA;
    dl_dtype kt = cuda ? dt : ct;
    bool cl = is_channels_last(x) && kt == dt;
    /* in: x w b; out: y mean var invstd */
    dl_tensor *t[7] = {prep_layout(x, kt, cl),
                       prep(weight, ct),
                       prep(bias, ct),
                       empty_layout(x->ndim, x->shape, kt, dev, cl),
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
                 ? dl_cuda_nn->batch_norm_forward_train(dt, cl, &s, p->eps, y_, mean_, var_, x_, w_,
                                                        b_)
                 : dl_cpu_batch_norm_forward_train(ct, cl, &s, p->eps, y_, mean_, var_, x_, w_, b_);
        if (rc == 0 && running_mean)
            rc = update_running(running_mean, t[4], m, 1.0) ||
                 update_running(running_var, t[5], m, (double)M / (double)(M - 1));
    }
    if (rc) goto done;
    /* (y already has x's shape, and x's dtype unless computed in float32) */
    if (!(t[6] = var_transform(t[5], p->eps, true)) ||
        (kt != dt && finish(&t[3], dt, x->ndim, x->shape))) {
        rc = -1;
        goto done;
    }
    *y = t[3];
    *save_mean = t[4];
    *save_invstd = t[6];
    t[3] = t[4] = t[6] = NULL;
done:
    release_all(t, 7);
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
        bn_device(op, 5, all, dl_cuda_nn && dl_cuda_nn->batch_norm_forward_eval, &dev))
        return NULL;
    if (!running_mean || !running_var) {
        dl_error("%s: running_mean and running_var are required in evaluation mode", op);
        return NULL;
    }
    if (!(eps >= 0)) {
        dl_error("%s: eps must be non-negative, got %g", op, eps);
        return NULL;
    }
    dl_dtype dt = x->dtype, ct = compute_dtype(dt);
    /* x and y: kernel dtype and layout as in dl_batch_norm_forward_train */
    bool cuda = dev.type == DL_DEVICE_CUDA;
    dl_dtype kt = cuda ? dt : ct;
    bool cl = is_channels_last(x) && kt == dt;
    dl_tensor *t[6] = {prep_layout(x, kt, cl), prep(weight, ct),
                       prep(bias, ct),         prep(running_mean, ct),
                       prep(running_var, ct),  empty_layout(x->ndim, x->shape, kt, dev, cl)};
    dl_tensor *y = NULL;
    if (!t[0] || (weight && !t[1]) || (bias && !t[2]) || !t[3] || !t[4] || !t[5]) goto done;
    if (s.N * s.C * s.S > 0) {
        void *y_ = dl_tensor_data_ptr(t[5]);
        const void *x_ = dl_tensor_data_ptr(t[0]), *m_ = dl_tensor_data_ptr(t[3]),
                   *v_ = dl_tensor_data_ptr(t[4]), *w_ = t[1] ? dl_tensor_data_ptr(t[1]) : NULL,
                   *b_ = t[2] ? dl_tensor_data_ptr(t[2]) : NULL;
        if (cuda ? dl_cuda_nn->batch_norm_forward_eval(dt, cl, &s, eps, y_, x_, m_, v_, w_, b_)
                 : dl_cpu_batch_norm_forward_eval(ct, cl, &s, eps, y_, x_, m_, v_, w_, b_))
            goto done;
    }
    y = t[5];
    t[5] = NULL;
    if (kt != dt && finish(&y, dt, x->ndim, x->shape)) y = NULL;
done:
    release_all(t, 6);
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
    if (bn_check(op, x, vecs, names, 5, &s) || float_operand(op, "grad_output", gy) ||
        bn_device(op, 7, all, dl_cuda_nn && dl_cuda_nn->batch_norm_backward, &dev))
        return -1;
    if (!dl_shape_equal(gy, x)) {
        char a[96], b[96];
        return dl_error("%s: grad_output has shape %s, expected the input's %s", op,
                        shape_of(gy, a, sizeof a), shape_of(x, b, sizeof b));
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
    dl_dtype dt = x->dtype, ct = compute_dtype(dt);
    /* gy, x and gx: kernel dtype and layout as in dl_batch_norm_forward_train,
     * the layout x's: a gy in the other layout is the one copied */
    bool cuda = dev.type == DL_DEVICE_CUDA;
    dl_dtype kt = cuda ? dt : ct;
    bool cl = is_channels_last(x) && kt == dt;
    dl_tensor *gx0 = need[0] ? empty_layout(x->ndim, x->shape, kt, dev, cl) : NULL;
    /* in: gy x w mean stat var; out: gx gw gb */
    dl_tensor *t[9] = {prep_layout(gy, kt, cl),
                       prep_layout(x, kt, cl),
                       prep(weight, ct),
                       prep(mean, ct),
                       prep(stat, ct),
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
        rc = cuda ? dl_cuda_nn->batch_norm_backward(dt, cl, &s, eps, training, gx_, gw_, gb_, gy_,
                                                    x_, m_, v_, w_)
                  : dl_cpu_batch_norm_backward(ct, cl, &s, eps, training, gx_, gw_, gb_, gy_, x_,
                                               m_, v_, w_);
    }
    if (rc) goto done;
    /* gweight/gbias take the weight's dtype (float32 for a half input) */
    dl_dtype pdt = weight ? weight->dtype : dt;
    if ((kt != dt && finish(&t[6], dt, x->ndim, x->shape)) || finish(&t[7], pdt, 1, &s.C) ||
        finish(&t[8], pdt, 1, &s.C)) {
        rc = -1;
        goto done;
    }
    *gx = t[6];
    *gweight = t[7];
    *gbias = t[8];
    t[6] = t[7] = t[8] = NULL;
done:
    release_all(t, 9);
    return rc;
}

/* --- pooling ------------------------------------------------------------------------ */

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
    if (float_operand(op, "input", x)) return -1;
    if (x->ndim != 3 && x->ndim != 4)
        return dl_error("%s: expected a 3-D (C,H,W) or 4-D (N,C,H,W) input, got %d-D %s", op,
                        x->ndim, shape_of(x, sb, sizeof sb));
    for (int d = x->ndim - 3; d < x->ndim; d++)
        if (x->shape[d] == 0)
            return dl_error("%s: expected non-zero channel and spatial sizes, got input %s", op,
                            shape_of(x, sb, sizeof sb));
    return 0;
}

static int pool_geometry(const char *op, const dl_tensor *x, const dl_pool2d_params *p, bool avg,
                         dl_pool2d_shape *s) {
    if (pool_input(op, x)) return -1;
    const int64_t *k = p->kernel, *st = p->stride, *pd = p->padding, *dl = p->dilation;
    if (check_limit(op, "kernel_size", k, 2) || check_limit(op, "stride", st, 2) ||
        check_limit(op, "padding", pd, 2) || check_limit(op, "dilation", dl, 2) ||
        check_limit(op, "divisor_override", &p->divisor_override, 1))
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
    if (float_operand(op, "grad_output", gy)) return -1;
    if (gy->ndim != x->ndim || memcmp(gy->shape, shape, sizeof(int64_t) * (size_t)x->ndim) != 0)
        return dl_error("%s: grad_output has shape %s, expected the output's %s", op,
                        shape_of(gy, a, sizeof a), dl_shape_str(x->ndim, shape, b, sizeof b));
    if (gy->dtype != x->dtype)
        return dl_error("%s: grad_output (%s) must have the input's dtype (%s)", op,
                        dl_dtype_name(gy->dtype), dl_dtype_name(x->dtype));
    if (ind) {
        if (ind->dtype != DL_DTYPE_I64)
            return dl_error("%s: indices must be an int64 tensor, got %s", op,
                            dl_dtype_name(ind->dtype));
        if (!dl_shape_equal(ind, gy))
            return dl_error("%s: indices have shape %s, expected %s", op,
                            shape_of(ind, a, sizeof a), shape_of(gy, b, sizeof b));
    }
    return 0;
}

typedef enum { POOL_MAX, POOL_AVG, POOL_ADAPTIVE_AVG, POOL_ADAPTIVE_MAX } pool_kind;

/* Whether the CUDA nn table has the kernel of kind (forward or backward). */
static bool pool_cuda_has(pool_kind kind, bool backward) {
    const dl_cuda_nn_kernels *k = dl_cuda_nn;
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
    if (dl_tensor_device(x).type != DL_DEVICE_CUDA || x->ndim != 4 || !is_channels_last(x))
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
    return dev.type == DL_DEVICE_CPU && x->ndim == 4 && is_channels_last(x);
}

/* An operand of a channels-last (cl) pooling kernel in dtype dt: t itself
 * when it is already dense channels-last (size-1 dims aside), else a
 * channels-last copy; without cl, as prep.  A new reference. */
static dl_tensor *pool_operand(dl_tensor *t, dl_dtype dt, bool cl) {
    if (cl && t->dtype == dt && dl_is_channels_last(t)) return dl_tensor_retain(t);
    return prep_layout(t, dt, cl);
}

/* finish() for a pooling result; a channels-last one (4-D) keeps its
 * layout through the dtype conversion. */
static int pool_finish(dl_tensor **t, dl_dtype dt, int ndim, const int64_t *shape, bool cl) {
    if (!cl) return finish(t, dt, ndim, shape);
    if (!*t || (*t)->dtype == dt) return 0;
    dl_tensor *r = prep_layout(*t, dt, true);
    dl_tensor_release(*t);
    *t = r;
    return r ? 0 : -1;
}

/* The forward of every pooling op: y (and indices for max kinds), on x's
 * device.  A channels-last CPU x is read in place and gives channels-last
 * results; on CUDA it is made contiguous and the results converted back. */
static int pool_forward(const char *op, pool_kind kind, dl_tensor *x,
                        const dl_pool2d_shape *shape_in, dl_tensor **y, dl_tensor **ind) {
    dl_dtype dt = x->dtype, ct = compute_dtype(dt);
    int64_t shape[4];
    pooled_shape(x, shape_in->OH, shape_in->OW, shape);
    dl_device dev = dl_tensor_device(x);
    bool cuda = dev.type == DL_DEVICE_CUDA, cl = pool_cl(x, dev);
    if (cuda && nn_cuda_ready(op, dev, pool_cuda_has(kind, false))) return -1;
    dl_pool2d_shape sv = *shape_in, *s = &sv;
    s->C = cl ? x->shape[1] : 0;
    bool with_ind = kind == POOL_MAX || kind == POOL_ADAPTIVE_MAX;
    dl_tensor *t[3] = {pool_operand(x, ct, cl), empty_layout(x->ndim, shape, ct, dev, cl),
                       with_ind ? empty_layout(x->ndim, shape, DL_DTYPE_I64, dev, cl) : NULL};
    int rc = -1;
    if (!t[0] || !t[1] || (with_ind && !t[2])) goto done;
    rc = 0;
    if (dl_tensor_numel(t[1]) > 0 && cuda) {
        const dl_cuda_nn_kernels *k = dl_cuda_nn;
        void *yp = dl_tensor_data_ptr(t[1]);
        const void *xp = dl_tensor_data_ptr(t[0]);
        int64_t *ip = with_ind ? dl_tensor_data_ptr(t[2]) : NULL;
        switch (kind) {
        case POOL_MAX: rc = k->max_pool2d_forward(ct, s, yp, ip, xp); break;
        case POOL_AVG: rc = k->avg_pool2d_forward(ct, s, yp, xp); break;
        case POOL_ADAPTIVE_AVG: rc = k->adaptive_avg_pool2d_forward(ct, s, yp, xp); break;
        case POOL_ADAPTIVE_MAX: rc = k->adaptive_max_pool2d_forward(ct, s, yp, ip, xp); break;
        }
    } else if (dl_tensor_numel(t[1]) > 0) {
        void *yp = dl_tensor_data_ptr(t[1]);
        const void *xp = dl_tensor_data_ptr(t[0]);
        int64_t *ip = with_ind ? dl_tensor_data_ptr(t[2]) : NULL;
        switch (kind) {
        case POOL_MAX: rc = dl_cpu_max_pool2d_forward(ct, s, yp, ip, xp); break;
        case POOL_AVG: rc = dl_cpu_avg_pool2d_forward(ct, s, yp, xp); break;
        case POOL_ADAPTIVE_AVG: rc = dl_cpu_adaptive_avg_pool2d_forward(ct, s, yp, xp); break;
        case POOL_ADAPTIVE_MAX: rc = dl_cpu_adaptive_max_pool2d_forward(ct, s, yp, ip, xp); break;
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
    release_all(t, 3);
    return rc;
}

/* The backward of every pooling op: gx (like x, on its device and, for a
 * channels-last x, in its layout; gy and the indices are brought to x's
 * layout, never x to theirs). */
static dl_tensor *pool_backward(const char *op, pool_kind kind, dl_tensor *gy, dl_tensor *x,
                                dl_tensor *ind, const dl_pool2d_shape *shape_in) {
    dl_dtype dt = x->dtype, ct = compute_dtype(dt);
    int64_t xshape[4];
    pooled_shape(x, shape_in->H, shape_in->W, xshape);
    dl_device dev;
    dl_tensor *ops[3] = {gy, x, ind};
    if (dl_common_device(op, 3, ops, &dev)) return NULL;
    bool cuda = dev.type == DL_DEVICE_CUDA, cl = pool_cl(x, dev);
    if (cuda && nn_cuda_ready(op, dev, pool_cuda_has(kind, true))) return NULL;
    dl_pool2d_shape sv = *shape_in, *s = &sv;
    s->C = cl ? x->shape[1] : 0;
    dl_tensor *t[3] = {pool_operand(gy, ct, cl), ind ? pool_operand(ind, DL_DTYPE_I64, cl) : NULL,
                       empty_layout(x->ndim, xshape, ct, dev, cl)};
    dl_tensor *gx = NULL;
    int rc = -1;
    if (!t[0] || (ind && !t[1]) || !t[2]) goto done;
    rc = 0;
    if (dl_tensor_numel(t[2]) > 0 && cuda) {
        const dl_cuda_nn_kernels *k = dl_cuda_nn;
        void *gp = dl_tensor_data_ptr(t[2]);
        const void *yp = dl_tensor_data_ptr(t[0]);
        switch (kind) {
        case POOL_MAX:
        case POOL_ADAPTIVE_MAX:
            rc = k->pool2d_scatter_backward(ct, s->P, s->H * s->W, s->OH * s->OW, gp, yp,
                                            dl_tensor_data_ptr(t[1]));
            break;
        case POOL_AVG: rc = k->avg_pool2d_backward(ct, s, gp, yp); break;
        case POOL_ADAPTIVE_AVG: rc = k->adaptive_avg_pool2d_backward(ct, s, gp, yp); break;
        }
    } else if (dl_tensor_numel(t[2]) > 0) {
        void *gp = dl_tensor_data_ptr(t[2]);
        const void *yp = dl_tensor_data_ptr(t[0]);
        switch (kind) {
        case POOL_MAX:
        case POOL_ADAPTIVE_MAX:
            rc = dl_cpu_pool2d_scatter_backward(ct, s->P, s->H * s->W, s->OH * s->OW, s->C, gp, yp,
                                                dl_tensor_data_ptr(t[1]));
            break;
        case POOL_AVG: rc = dl_cpu_avg_pool2d_backward(ct, s, gp, yp); break;
        case POOL_ADAPTIVE_AVG: rc = dl_cpu_adaptive_avg_pool2d_backward(ct, s, gp, yp); break;
        }
    }
    if (rc) goto done;
    gx = t[2];
    t[2] = NULL;
    if (pool_finish(&gx, dt, x->ndim, xshape, cl) || keep_channels_last(x, &gx)) gx = NULL;
done:
    release_all(t, 3);
    return gx;
}

int dl_max_pool2d_forward(dl_tensor *x, const dl_pool2d_params *p, dl_tensor **y,
                          dl_tensor **indices) {
    dl_pool2d_shape s;
    *y = *indices = NULL;
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
    if (check_limit(op, "output_size", osize, 2)) return -1;
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
                        shape_of(gy, a, sizeof a));
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

/* --- with autograd ---------------------------------------------------------------------------
 * One node per op; it saves the forward's inputs (and pooling indices, batch
 * statistics) and calls the matching backward above. */
#include "autograd/autograd.h"

typedef struct {
    dl_conv2d_params conv;
    dl_pool2d_params pool;
    bool training;
    double eps;
} nnc_ctx;

static dl_tensor *nnc_abort(dl_node *n, dl_tensor *out) {
    dl_node_release(n);
    dl_tensor_release(out);
    return NULL;
}

static int conv_bw(dl_node *n, dl_tensor *const *gout, dl_tensor **gin) {
    const nnc_ctx *c = n->ctx;
    dl_tensor *x = dl_node_saved(n, 0), *w = dl_node_saved(n, 1);
    if (!x || !w) return -1;
    bool need[3] = {dl_node_needs_grad(n, 0), dl_node_needs_grad(n, 1), dl_node_needs_grad(n, 2)};
    return dl_conv2d_backward(gout[0], x, w, &c->conv, need, &gin[0], &gin[1], &gin[2]);
}

dl_tensor *dl_conv2d(dl_tensor *x, dl_tensor *w, dl_tensor *b, const dl_conv2d_params *p) {
    dl_tensor *in[3] = {x, w, b};
    bool record = dl_autograd_needed(3, in);
    dl_tensor *y = conv2d_forward(x, w, b, p, !record);
    if (!y || !record) return y;
    dl_node *n = dl_node_new("ConvolutionBackward", conv_bw, 3, in, 1, sizeof(nnc_ctx));
    if (!n || dl_node_save(n, x) < 0 || dl_node_save(n, w) < 0) return nnc_abort(n, y);
    ((nnc_ctx *)n->ctx)->conv = *p;
    return dl_node_finish(n, y);
}

/* saved: x, weight, running_mean, running_var, save_mean, save_invstd */
static int bn_bw(dl_node *n, dl_tensor *const *gout, dl_tensor **gin) {
    const nnc_ctx *c = n->ctx;
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
    dl_node *n = NULL;
    if (dl_autograd_needed(3, in)) {
        n = dl_node_new("NativeBatchNormBackward", bn_bw, 3, in, 1, sizeof(nnc_ctx));
        if (!n || dl_node_save(n, x) < 0 || dl_node_save(n, weight) < 0 ||
            dl_node_save(n, training ? NULL : running_mean) < 0 ||
            dl_node_save(n, training ? NULL : running_var) < 0 || dl_node_save(n, mean) < 0 ||
            dl_node_save(n, invstd) < 0) {
            y = nnc_abort(n, y);
            n = NULL;
        } else {
            nnc_ctx *c = n->ctx;
            c->training = training;
            c->eps = p->eps;
            y = dl_node_finish(n, y);
        }
    }
    dl_tensor_release(mean);
    dl_tensor_release(invstd);
    return y;
}

static int maxpool_bw(dl_node *n, dl_tensor *const *gout, dl_tensor **gin) {
    const nnc_ctx *c = n->ctx;
    dl_tensor *x = dl_node_saved(n, 0), *ind = dl_node_saved(n, 1);
    if (!x || !ind) return -1;
    gin[0] = strcmp(n->name, "MaxPool2DWithIndicesBackward") == 0
                 ? dl_max_pool2d_backward(gout[0], x, ind, &c->pool)
                 : dl_adaptive_max_pool2d_backward(gout[0], x, ind);
    return gin[0] ? 0 : -1;
}

static dl_tensor *record_maxpool(const char *name, dl_tensor *x, dl_tensor *y, dl_tensor *ind,
                                 const dl_pool2d_params *p, dl_tensor **indices) {
    if (dl_needs_grad1(x)) {
        dl_node *n = dl_node_new(name, maxpool_bw, 1, &x, 1, sizeof(nnc_ctx));
        if (!n || dl_node_save(n, x) < 0 || dl_node_save(n, ind) < 0) {
            dl_tensor_release(ind);
            return nnc_abort(n, y);
        }
        if (p) ((nnc_ctx *)n->ctx)->pool = *p;
        y = dl_node_finish(n, y);
    }
    if (indices)
        *indices = ind;
    else
        dl_tensor_release(ind);
    return y;
}

dl_tensor *dl_max_pool2d(dl_tensor *x, const dl_pool2d_params *p, dl_tensor **indices) {
    dl_tensor *y, *ind;
    if (dl_max_pool2d_forward(x, p, &y, &ind)) return NULL;
    return record_maxpool("MaxPool2DWithIndicesBackward", x, y, ind, p, indices);
}

dl_tensor *dl_adaptive_max_pool2d(dl_tensor *x, int64_t oh, int64_t ow, dl_tensor **indices) {
    dl_tensor *y, *ind;
    if (dl_adaptive_max_pool2d_forward(x, oh, ow, &y, &ind)) return NULL;
    return record_maxpool("AdaptiveMaxPool2DBackward", x, y, ind, NULL, indices);
}

static int avgpool_bw(dl_node *n, dl_tensor *const *gout, dl_tensor **gin) {
    const nnc_ctx *c = n->ctx;
    dl_tensor *x = dl_node_saved(n, 0);
    if (!x) return -1;
    gin[0] = strcmp(n->name, "AvgPool2DBackward") == 0
                 ? dl_avg_pool2d_backward(gout[0], x, &c->pool)
                 : dl_adaptive_avg_pool2d_backward(gout[0], x);
    return gin[0] ? 0 : -1;
}

static dl_tensor *record_avgpool(const char *name, dl_tensor *x, dl_tensor *y,
                                 const dl_pool2d_params *p) {
    if (!y || !dl_needs_grad1(x)) return y;
    dl_node *n = dl_node_new(name, avgpool_bw, 1, &x, 1, sizeof(nnc_ctx));
    if (!n || dl_node_save(n, x) < 0) return nnc_abort(n, y);
    if (p) ((nnc_ctx *)n->ctx)->pool = *p;
    return dl_node_finish(n, y);
}

dl_tensor *dl_avg_pool2d(dl_tensor *x, const dl_pool2d_params *p) {
    return record_avgpool("AvgPool2DBackward", x, dl_avg_pool2d_forward(x, p), p);
}

dl_tensor *dl_adaptive_avg_pool2d(dl_tensor *x, int64_t oh, int64_t ow) {
    return record_avgpool("AdaptiveAvgPool2DBackward", x, dl_adaptive_avg_pool2d_forward(x, oh, ow),
                          NULL);
}
