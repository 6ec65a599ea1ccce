/* ops/pad.c - the pad family (see pad.h): F.pad's constant, reflect,
 * replicate and circular modes, forward and backward.  Constant padding is a
 * fill and a copy into a narrowed view; the other modes build an index map
 * per padded dim and gather (forward) or scatter-add (backward) with the
 * kernels of cpu/pad.c or CUDA.  The autograd node at the end keeps the
 * pads and the mode. */
#include "ops/pad.h"
#include "autograd/autograd.h"
#include "core/iter.h"
#include "cpu/pad.h"
#include "kernels/pad.h"
#include "ops/op_util.h"
#include "ops/views.h"

#include <stdlib.h>
#include <string.h>

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

/* Constant mode: copies the kept input region between src and dst (a new
 * result, consumed), one of them the (ndim, shape) input side, the other the
 * padded side (to_padded says which is dst).  Returns dst, or NULL. */
static dl_tensor *copy_region(dl_tensor *dst, dl_tensor *src, bool to_padded, int ndim,
                              const int64_t *shape, int npads, const int64_t *pads) {
    int64_t is[DL_MAX_DIMS], os[DL_MAX_DIMS], len[DL_MAX_DIMS];
    if (!dst || !pad_regions(ndim, shape, npads, pads, is, os, len)) return dst;
    dl_tensor *s = narrow_last(src, npads / 2, to_padded ? is : os, len);
    dl_tensor *d = s ? narrow_last(dst, npads / 2, to_padded ? os : is, len) : NULL;
    int rc = d ? dl_tensor_copy_(d, s) : -1;
    dl_tensor_release(s);
    dl_tensor_release(d);
    return dl_op_result(dst, rc);
}

/* The (outer, D2, D1, D0) view and index maps of a non-constant pad (the
 * kernels' dl_pad_shape) and the buffer holding the maps. */
typedef struct {
    dl_pad_shape s;
    int64_t *buf; /* all three maps */
} pad_plan;

static int pad_plan_make(const char *op, int ndim, const int64_t *shape, const int64_t *oshape,
                         int npads, const int64_t *pads, dl_pad_mode mode, pad_plan *p) {
    int k = npads / 2;
    dl_pad_shape *s = &p->s;
    s->outer = 1;
    for (int i = 0; i < ndim - k; i++) s->outer *= shape[i];
    for (int j = 0; j < 3; j++) {
        s->osz[j] = j < k ? oshape[ndim - 1 - j] : 1;
        s->isz[j] = j < k ? shape[ndim - 1 - j] : 1;
    }
    p->buf = malloc((size_t)(s->osz[0] + s->osz[1] + s->osz[2] + 1) * sizeof *p->buf);
    if (!p->buf) return dl_error("%s: out of memory for the index maps", op);
    int64_t *m = p->buf;
    for (int j = 0; j < 3; j++) {
        s->map[j] = m;
        if (j < k ? pad_map(op, m, s->osz[j], s->isz[j], pads[2 * j], mode) : (m[0] = 0, 0)) {
            free(p->buf);
            return -1;
        }
        m += s->osz[j];
    }
    return 0;
}

/* The kernel of dev (one signature for both backends, kernels/pad.h): the
 * CPU's, or the CUDA table's entry with dev made current; NULL with the error
 * when this build's table lacks it. */
static dl_pad_gather_fn gather_kernel(const char *op, dl_device dev) {
    if (!dl_op_is_cuda(dev)) return dl_cpu_pad_gather;
    dl_pad_gather_fn f = dl_cuda_pad ? dl_cuda_pad->pad_gather : NULL;
    return dl_op_cuda_ready(op, dev, f != NULL) ? NULL : f;
}

static dl_pad_scatter_fn scatter_kernel(const char *op, dl_device dev) {
    if (!dl_op_is_cuda(dev)) return dl_cpu_pad_scatter;
    dl_pad_scatter_fn f = dl_cuda_pad ? dl_cuda_pad->pad_scatter : NULL;
    return dl_op_cuda_ready(op, dev, f != NULL) ? NULL : f;
}

dl_tensor *dl_pad_forward(dl_tensor *x, int npads, const int64_t *pads, dl_pad_mode mode,
                          double value) {
    const char *op = "pad";
    int64_t oshape[DL_MAX_DIMS];
    if (pad_check(op, x->ndim, x->shape, npads, pads, mode, oshape)) return NULL;
    dl_device dev = dl_tensor_device(x);
    if (mode == DL_PAD_CONSTANT)
        return copy_region(dl_tensor_full(x->ndim, oshape, value, x->dtype, dev), x, true, x->ndim,
                           x->shape, npads, pads);
    pad_plan p;
    dl_pad_gather_fn gather = gather_kernel(op, dev);
    if (!gather || pad_plan_make(op, x->ndim, x->shape, oshape, npads, pads, mode, &p)) return NULL;
    dl_tensor *xc = dl_tensor_contiguous(x);
    dl_tensor *out = xc ? dl_tensor_empty(x->ndim, oshape, x->dtype, dev) : NULL;
    if (out && gather(x->dtype, &p.s, dl_op_data(out), dl_op_data(xc))) {
        dl_tensor_release(out);
        out = NULL;
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
    if (mode == DL_PAD_CONSTANT)
        return copy_region(dl_tensor_zeros(ndim, shape, gy->dtype, dev), gy, false, ndim, shape,
                           npads, pads);
    pad_plan p;
    dl_pad_scatter_fn scatter = scatter_kernel(op, dev);
    if (!scatter || pad_plan_make(op, ndim, shape, oshape, npads, pads, mode, &p)) return NULL;
    dl_dtype cdt = dl_op_float_dtype(gy->dtype);
    dl_tensor *gyc = dl_op_dense(gy, cdt);
    dl_tensor *gx = gyc ? dl_tensor_empty(ndim, shape, cdt, dev) : NULL;
    if (gx && scatter(cdt, &p.s, dl_op_data(gx), dl_op_data(gyc))) {
        dl_tensor_release(gx);
        gx = NULL;
    }
    free(p.buf);
    dl_tensor_release(gyc);
    return dl_op_finish_as(gx, gy->dtype);
}

/* --- with autograd ---------------------------------------------------------------- */

typedef struct {
    dl_pad_mode mode;
    int npads;
    int64_t pads[2 * DL_MAX_DIMS];
} pad_ctx;

static int pad_backward(dl_node *n, dl_tensor *const *gout, dl_tensor **gin) {
    const pad_ctx *c = n->ctx;
    const dl_tensor_meta *m = &n->input_meta[0];
    gin[0] = dl_pad_backward(gout[0], m->ndim, m->shape, c->npads, c->pads, c->mode);
    return gin[0] ? 0 : -1;
}

dl_tensor *dl_pad(dl_tensor *x, int npads, const int64_t *pads, dl_pad_mode mode, double value) {
    pad_ctx c = {.mode = mode, .npads = npads};
    memcpy(c.pads, pads, sizeof(int64_t) * (size_t)npads);
    return dl_op_record(dl_pad_forward(x, npads, pads, mode, value), "PadBackward", pad_backward, 1,
                        &x, 0, NULL, &c, sizeof c);
}
