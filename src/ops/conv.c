/* ops/conv.c - the conv family (see conv.h): conv2d's argument checks, shape
 * inference, allocation and dispatch to the CPU kernels (cpu/conv.c, oneDNN)
 * or the CUDA ones (cuda/conv.cu, cuDNN); the autograd node at the end.
 *
 * Every path checks everything first; brings the operands to the compute
 * dtype (float32 for float16/bfloat16 on the CPU) and layout; allocates
 * results; runs the kernel; rounds results back to the caller's dtype.  An
 * unbatched (C,H,W) operand is viewed as (1,C,H,W) and results are viewed
 * back.  Invariants: operands are never modified; every temporary is
 * released on every path; kernels only see validated sizes. */
#include "ops/conv.h"
#include "autograd/autograd.h"
#include "core/error.h"
#include "cpu/activation.h"
#include "cpu/conv.h"
#include "cpu/dnnl_util.h"
#include "kernels/conv.h"
#include "ops/elementwise.h"
#include "ops/op_util.h"
#include "ops/views.h"

#include <stdio.h>
#include <string.h>

/* --- conv2d ----------------------------------------------------------------------
 * The op states the layout facts (whether x and w are channels-last: NHWC
 * strides on an NCHW shape) and the backend answers which formats it binds
 * (conv_plan_for): the CPU runs float32 channels-last operands in place and
 * computes float64 itself and the half types in float32; cuDNN keeps the
 * dtype and computes channels-last when x is (its weight following), and
 * itself falls back to NCHW copies where it refuses that layout.  y, gx and
 * gy follow x's computed layout, gw is returned in w's own layout. */

static int check_conv_params(const char *op, const dl_conv2d_params *p) {
    if (dl_op_check_limit(op, "stride", p->stride, 2) ||
        dl_op_check_limit(op, "padding", p->padding, 2) ||
        dl_op_check_limit(op, "dilation", p->dilation, 2) ||
        dl_op_check_limit(op, "groups", &p->groups, 1))
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
    if (dl_op_need_floating(op, "input", x) || dl_op_need_floating(op, "weight", w)) return -1;
    if (check_conv_params(op, p)) return -1;
    if (x->ndim != 3 && x->ndim != 4)
        return dl_error("%s: expected a 3-D (C,H,W) or 4-D (N,C,H,W) input, got %d-D %s", op,
                        x->ndim, dl_op_shape_str(x, sx, sizeof sx));
    if (w->ndim != 4)
        return dl_error("%s: expected a 4-D (out_channels, in_channels/groups, kH, kW) weight, "
                        "got %d-D %s",
                        op, w->ndim, dl_op_shape_str(w, sw, sizeof sw));
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
                        (long long)s->C, dl_op_shape_str(w, sw, sizeof sw),
                        (long long)(w->shape[1] * p->groups), (long long)p->groups);
    if (s->O % p->groups != 0)
        return dl_error("%s: out_channels (%lld) must be divisible by groups (%lld)", op,
                        (long long)s->O, (long long)p->groups);
    if (b) {
        if (dl_op_need_floating(op, "bias", b)) return -1;
        if (b->dtype != x->dtype)
            return dl_error("%s: bias (%s) must have the input's dtype (%s)", op,
                            dl_dtype_name(b->dtype), dl_dtype_name(x->dtype));
        if (b->ndim != 1 || b->shape[0] != s->O)
            return dl_error("%s: expected a bias of shape [%lld], got %s", op, (long long)s->O,
                            dl_op_shape_str(b, sx, sizeof sx));
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

int dl_conv2d_cache_size(void) {
    return dl_dnnl_cache_size();
}

void dl_conv2d_plan_stats(dl_conv_plan_stats *out) {
    memset(out, 0, sizeof *out);
    if (dl_cuda_conv && dl_cuda_conv->plan_stats) dl_cuda_conv->plan_stats(out);
}

int dl_conv2d_cache_capacity(void) {
    return DL_DNNL_CACHE_CAPACITY;
}

/* 4-D view of an (N,C,H,W) or unbatched (C,H,W) operand. */
static dl_tensor *conv_batched(dl_tensor *t) {
    return t->ndim == 3 ? dl_tensor_unsqueeze(t, 0) : dl_tensor_retain(t);
}

/* How dev's backend runs a convolution of x4 (4-D) and w: its kernels, in
 * the compute dtype ct (the CPU computes the half types in float32, cuDNN in
 * their own) with the operand formats fmt (DL_CONV_FMT_*).  The op states the
 * facts -- whether x4 and w are channels-last (and not also plain contiguous)
 * -- and the backend (cpu/conv.c, cuda/conv.cu) answers which layouts it
 * binds. */
typedef struct conv_plan {
    dl_dtype ct;
    int fmt;
    dl_conv2d_forward_fn forward;
    dl_conv2d_backward_fn backward;
} conv_plan;

static conv_plan conv_plan_for(dl_device dev, const dl_tensor *x4, const dl_tensor *w) {
    bool cuda = dl_op_is_cuda(dev);
    dl_conv2d_formats_fn formats = cuda ? dl_cuda_conv->conv2d_formats : dl_cpu_conv2d_formats;
    conv_plan p = {cuda ? x4->dtype : dl_op_float_dtype(x4->dtype),
                   formats(x4->dtype, dl_op_is_channels_last(x4), dl_op_is_channels_last(w)),
                   cuda ? dl_cuda_conv->conv2d_forward : dl_cpu_conv2d_forward,
                   cuda ? dl_cuda_conv->conv2d_backward : dl_cpu_conv2d_backward};
    return p;
}

/* Whether the CUDA table has the conv kernels (the CPU always has them). */
static bool conv_have(void) {
    return dl_cuda_conv && dl_cuda_conv->conv2d_formats && dl_cuda_conv->conv2d_forward &&
           dl_cuda_conv->conv2d_backward;
}

/* *t (a 4-D result in the compute dtype) as the caller gets it: dtype dt,
 * channels-last (cl) or plain, and 3-D when unbatched.  0/-1; on failure *t
 * is released and NULL.  A NULL *t passes. */
static int conv_finish(dl_tensor **t, dl_dtype dt, bool cl, bool unbatched) {
    if (!*t) return 0;
    dl_tensor *r = dl_op_dense_layout(*t, dt, cl);
    dl_tensor_release(*t);
    *t = r && unbatched ? dl_tensor_select(r, 0, 0) : r;
    if (unbatched) dl_tensor_release(r);
    return *t ? 0 : -1;
}

/* The storage the CPU kernel may keep w's prepacked copy on: w's own when
 * the kernel reads w in place (bound is w, or a view of its storage), NULL
 * when it reads a converted copy (packing that would be redone per call). */
static dl_storage *packable_storage(const dl_tensor *bound, const dl_tensor *w) {
    return bound->storage == w->storage ? w->storage : NULL;
}

/* The forward; inference: no gradient will be taken through it (the CPU may
 * then pick faster, slightly less exact kernels: Winograd, see conv.c).
 * Operands and results are laid out as the backend's formats say; y comes
 * back in x's dtype, channels-last when it was computed so. */
static dl_tensor *conv2d_forward(dl_tensor *x, dl_tensor *w, dl_tensor *b,
                                 const dl_conv2d_params *p, bool inference) {
    const char *op = "conv2d";
    dl_conv2d_shape s;
    dl_device dev;
    dl_tensor *ts[3] = {x, w, b};
    if (dl_op_device(op, 3, ts, conv_have(), &dev) || conv_geometry(op, x, w, b, p, &s))
        return NULL;
    dl_tensor *x4 = conv_batched(x);
    if (!x4) return NULL;
    conv_plan pl = conv_plan_for(dev, x4, w);
    bool nhwc = pl.fmt & DL_CONV_FMT_NHWC;
    int64_t yshape[4] = {s.N, s.O, s.OH, s.OW};
    dl_tensor *t[4] = {dl_op_dense_layout(x4, pl.ct, nhwc),
                       dl_op_dense_layout(w, pl.ct, pl.fmt & DL_CONV_FMT_W_OHWI),
                       dl_op_dense(b, pl.ct), dl_op_empty_layout(4, yshape, pl.ct, dev, nhwc)};
    dl_tensor_release(x4);
    dl_tensor *y = NULL;
    if (!t[0] || !t[1] || (b && !t[2]) || !t[3]) goto done;
    int rc;
    if (s.N == 0 || s.O == 0)
        rc = 0;
    else if (s.C == 0 || s.H == 0 || s.W == 0)
        rc = fill_bias(t[3], t[2]);
    else if (inference && dev.type == DL_DEVICE_CPU && pl.ct == DL_DTYPE_F32)
        rc = dl_cpu_conv2d_forward_packed(&s, pl.fmt, 0, dl_op_data(t[3]), dl_op_data(t[0]),
                                          dl_op_data(t[1]), dl_op_data(t[2]),
                                          packable_storage(t[1], w));
    else
        rc = pl.forward(pl.ct, &s, pl.fmt | (inference ? DL_CONV_INFERENCE : 0), 0,
                        dl_op_data(t[3]), dl_op_data(t[0]), dl_op_data(t[1]), dl_op_data(t[2]));
    if (rc) goto done;
    y = t[3];
    t[3] = NULL;
    if (conv_finish(&y, x->dtype, nhwc, x->ndim == 3)) y = NULL;
done:
    dl_op_release_all(t, 4);
    return y;
}

dl_tensor *dl_conv2d_forward(dl_tensor *x, dl_tensor *w, dl_tensor *b, const dl_conv2d_params *p) {
    return conv2d_forward(x, w, b, p, false);
}

/* y = relu?(conv2d(x, w, b) + add?) with the add and ReLU done by oneDNN as
 * post-ops of a float32 CPU convolution (4-D x); otherwise by the plain ops. */
dl_tensor *dl_conv2d_forward_post(dl_tensor *x, dl_tensor *w, dl_tensor *b,
                                  const dl_conv2d_params *p, dl_tensor *add, bool relu,
                                  bool reuse_add) {
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
                 dl_op_shape_str(add, a, sizeof a),
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
    conv_plan pl = conv_plan_for(dev, x, w);
    int fmt = pl.fmt;
    bool nhwc = fmt & DL_CONV_FMT_NHWC;
    bool own = !dl_cpu_conv2d_sum_fast(&s, fmt), sum = add && !own;
    /* the sum post-op accumulates into y: into add itself when the caller
     * gives it up and nothing else shares its bytes (else a copy of add) */
    dl_tensor *into = NULL;
    if (sum && reuse_add && add->refcount == 1 && add->storage->refcount == 1 &&
        add->storage->derived == NULL && add->storage != x->storage && add->storage != w->storage &&
        (!b || add->storage != b->storage)) {
        into = dl_op_dense_layout(add, DL_DTYPE_F32, nhwc);
        if (into != add) {
            dl_tensor_release(into);
            into = NULL;
        }
    }
    dl_tensor *t[4] = {dl_op_dense_layout(x, DL_DTYPE_F32, nhwc),
                       dl_op_dense_layout(w, DL_DTYPE_F32, fmt & DL_CONV_FMT_W_OHWI),
                       dl_op_dense(b, DL_DTYPE_F32),
                       into ? into : dl_op_empty_layout(4, yshape, DL_DTYPE_F32, DL_CPU, nhwc)};
    dl_tensor *y = NULL;
    /* Where oneDNN runs its post-ops at full speed, the bias, the add (sum)
     * and the ReLU go inside the convolution.  On its GEMM path (1x1 NCHW)
     * they cost a slow separate pass each (the bias alone added ~15% to
     * ResNet-50's 1x1 layers), so there they are one pass of our own. */
    dl_tensor *a = own && add ? dl_op_dense(add, DL_DTYPE_F32) : NULL;
    if (!t[0] || !t[1] || (b && !t[2]) || !t[3] || (own && add && !a) ||
        (sum && !into && dl_tensor_copy_(t[3], add)))
        goto done;
    if (into) dl_tensor_bump_version(into);
    int post = own ? 0 : (sum ? DL_CONV_POST_SUM : 0) | (relu ? DL_CONV_POST_RELU : 0);
    if (dl_cpu_conv2d_forward_packed(&s, fmt, post, dl_op_data(t[3]), dl_op_data(t[0]),
                                     dl_op_data(t[1]), own ? NULL : dl_op_data(t[2]),
                                     packable_storage(t[1], w)))
        goto done;
    if (own && (t[2] || a || relu))
        dl_cpu_bias_add_relu_planes(dl_tensor_data_ptr(t[3]),
                                    t[2] ? dl_tensor_data_ptr(t[2]) : NULL,
                                    a ? dl_tensor_data_ptr(a) : NULL, s.N, s.O, s.OH * s.OW, relu);
    y = t[3];
    t[3] = NULL;
done:
    dl_tensor_release(a);
    dl_op_release_all(t, 4);
    return y;
}

int dl_conv2d_backward(dl_tensor *gy, dl_tensor *x, dl_tensor *w, const dl_conv2d_params *p,
                       const bool need[3], dl_tensor **gx, dl_tensor **gw, dl_tensor **gb) {
    const char *op = "conv2d_backward";
    dl_conv2d_shape s;
    dl_device dev;
    dl_tensor *ts[3] = {gy, x, w};
    *gx = *gw = *gb = NULL;
    if (dl_op_device(op, 3, ts, conv_have(), &dev) || conv_geometry(op, x, w, NULL, p, &s) ||
        dl_op_need_floating(op, "grad_output", gy))
        return -1;
    int64_t yshape[4] = {s.N, s.O, s.OH, s.OW};
    const int64_t *ys = x->ndim == 4 ? yshape : yshape + 1;
    if (gy->ndim != x->ndim || memcmp(gy->shape, ys, sizeof(int64_t) * (size_t)x->ndim) != 0) {
        char a[96], e[96];
        return dl_error("%s: grad_output has shape %s, expected the output's %s", op,
                        dl_op_shape_str(gy, a, sizeof a), dl_shape_str(x->ndim, ys, e, sizeof e));
    }
    if (gy->dtype != x->dtype)
        return dl_error("%s: grad_output (%s) must have the input's dtype (%s)", op,
                        dl_dtype_name(gy->dtype), dl_dtype_name(x->dtype));
    dl_tensor *x4 = conv_batched(x), *gy4 = conv_batched(gy);
    if (!x4 || !gy4) {
        dl_tensor_release(x4);
        dl_tensor_release(gy4);
        return -1;
    }
    conv_plan pl = conv_plan_for(dev, x4, w);
    dl_dtype ct = pl.ct;
    bool nhwc = pl.fmt & DL_CONV_FMT_NHWC, ohwi = pl.fmt & DL_CONV_FMT_W_OHWI;
    int64_t xshape[4] = {s.N, s.C, s.H, s.W};
    /* gy, x and gx in x's computed layout; w and gw in w's */
    /* in: gy x w; out: gx gw gb */
    dl_tensor *t[6] = {dl_op_dense_layout(gy4, ct, nhwc),
                       need[1] ? dl_op_dense_layout(x4, ct, nhwc) : NULL,
                       need[0] ? dl_op_dense_layout(w, ct, ohwi) : NULL,
                       need[0] ? dl_op_empty_layout(4, xshape, ct, dev, nhwc) : NULL,
                       need[1] ? dl_op_empty_layout(4, w->shape, ct, dev, ohwi) : NULL,
                       need[2] ? dl_tensor_empty(1, &s.O, ct, dev) : NULL};
    dl_tensor_release(x4);
    dl_tensor_release(gy4);
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
            rc = pl.backward(ct, &s1, pl.fmt, NULL, NULL, dl_op_data(t[5]), dl_op_data(t[0]), NULL,
                             NULL);
        }
    } else {
        rc = pl.backward(ct, &s, pl.fmt, dl_op_data(t[3]), dl_op_data(t[4]), dl_op_data(t[5]),
                         dl_op_data(t[0]), dl_op_data(t[1]), dl_op_data(t[2]));
    }
    if (rc) goto done;
    /* gx in x's dtype and computed layout; gw in w's own layout */
    if (conv_finish(&t[3], x->dtype, nhwc, x->ndim == 3) ||
        conv_finish(&t[4], w->dtype, dl_op_is_channels_last(w), false) ||
        conv_finish(&t[5], x->dtype, false, false)) {
        rc = -1;
        goto done;
    }
    dl_op_take3(&t[3], gx, gw, gb);
done:
    dl_op_release_all(t, 6);
    return rc;
}

/* --- with autograd ----------------------------------------------------------------
 * The node saves x and w; its parameters (ctx) are the dl_conv2d_params. */

static int conv_backward(dl_node *n, dl_tensor *const *gout, dl_tensor **gin) {
    const dl_conv2d_params *p = n->ctx;
    dl_tensor *x = dl_node_saved(n, 0), *w = dl_node_saved(n, 1);
    if (!x || !w) return -1;
    bool need[3] = {dl_node_needs_grad(n, 0), dl_node_needs_grad(n, 1), dl_node_needs_grad(n, 2)};
    return dl_conv2d_backward(gout[0], x, w, p, need, &gin[0], &gin[1], &gin[2]);
}

dl_tensor *dl_conv2d(dl_tensor *x, dl_tensor *w, dl_tensor *b, const dl_conv2d_params *p) {
    dl_tensor *in[3] = {x, w, b}, *save[2] = {x, w};
    bool inference = !dl_autograd_needed(3, in);
    dl_tensor *y = conv2d_forward(x, w, b, p, inference);
    if (inference) return y;
    return dl_op_record(y, "ConvolutionBackward", conv_backward, 3, in, 2, save, p, sizeof *p);
}
