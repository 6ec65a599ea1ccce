/* views.c - views, copies and conversions that record autograd (see
 * views.h).  Each backward maps the output gradient back onto the input's
 * shape: reshape it, transpose or permute it back, sum what expand repeated,
 * or place it into zeros where narrow/select took a slice. */
#include "views.h"
#include "autograd/autograd.h"
#include "grad_util.h"
#include "op_util.h"

#include <string.h>

typedef enum {
    VIEW_RESHAPE, /* view, reshape, flatten, squeeze, unsqueeze */
    VIEW_TRANSPOSE,
    VIEW_PERMUTE,
    VIEW_EXPAND,
    VIEW_NARROW,
    VIEW_SELECT,
    VIEW_IDENTITY, /* contiguous, clone */
    VIEW_TO,       /* dtype or device conversion */
} view_kind;

typedef struct {
    view_kind kind;
    int d0, d1; /* transpose dims; narrow/select dim in d0 */
    int perm[DL_MAX_DIMS];
    int64_t start, len; /* narrow start/length, select index in start */
} view_ctx;

static int view_backward(dl_node *n, dl_tensor *const *gout, dl_tensor **gin) {
    const view_ctx *c = n->ctx;
    const dl_tensor_meta *m = &n->input_meta[0];
    dl_tensor *g = gout[0], *r = NULL;
    switch (c->kind) {
    case VIEW_RESHAPE: r = dl_tensor_reshape(g, m->ndim, m->shape); break;
    case VIEW_TRANSPOSE: r = dl_tensor_transpose(g, c->d0, c->d1); break;
    case VIEW_PERMUTE: {
        int inv[DL_MAX_DIMS];
        for (int i = 0; i < m->ndim; i++) inv[c->perm[i]] = i;
        r = dl_tensor_permute(g, inv);
        break;
    }
    case VIEW_EXPAND: r = dl_sum_to_meta(g, m); break;
    case VIEW_NARROW:
    case VIEW_SELECT: {
        r = dl_tensor_zeros(m->ndim, m->shape, g->dtype, m->device);
        dl_tensor *slot = !r                       ? NULL
                          : c->kind == VIEW_NARROW ? dl_tensor_narrow(r, c->d0, c->start, c->len)
                                                   : dl_tensor_select(r, c->d0, c->start);
        if (!slot || dl_tensor_copy_(slot, g)) {
            dl_tensor_release(r);
            r = NULL;
        }
        dl_tensor_release(slot);
        break;
    }
    case VIEW_IDENTITY: r = dl_tensor_retain(g); break;
    case VIEW_TO: {
        dl_tensor *a = dl_tensor_to_dtype(g, m->dtype);
        r = a ? dl_tensor_to_device(a, m->device) : NULL;
        dl_tensor_release(a);
        break;
    }
    }
    gin[0] = r;
    return r ? 0 : -1;
}

static const char *const view_names[] = {
    [VIEW_RESHAPE] = "ViewBackward",    [VIEW_TRANSPOSE] = "TransposeBackward",
    [VIEW_PERMUTE] = "PermuteBackward", [VIEW_EXPAND] = "ExpandBackward",
    [VIEW_NARROW] = "NarrowBackward",   [VIEW_SELECT] = "SelectBackward",
    [VIEW_IDENTITY] = "CloneBackward",  [VIEW_TO] = "ToCopyBackward",
};

/* Records out = kind(t) when t requires grad; consumes nothing, returns out
 * (NULL and releases out on failure). */
static dl_tensor *record(dl_tensor *t, dl_tensor *out, const view_ctx *c) {
    if (out == t) return out; /* contiguous/to on an already-suitable tensor */
    return dl_op_record(out, view_names[c->kind], view_backward, 1, &t, 0, NULL, c, sizeof *c);
}

dl_tensor *dl_view(dl_tensor *t, int ndim, const int64_t *shape) {
    return record(t, dl_tensor_view(t, ndim, shape), &(view_ctx){.kind = VIEW_RESHAPE});
}

dl_tensor *dl_reshape(dl_tensor *t, int ndim, const int64_t *shape) {
    return record(t, dl_tensor_reshape(t, ndim, shape), &(view_ctx){.kind = VIEW_RESHAPE});
}

dl_tensor *dl_transpose(dl_tensor *t, int d0, int d1) {
    dl_tensor *out = dl_tensor_transpose(t, d0, d1);
    if (!out) return NULL;
    view_ctx c = {.kind = VIEW_TRANSPOSE};
    c.d0 = dl_wrap_dim("transpose", d0, t->ndim);
    c.d1 = dl_wrap_dim("transpose", d1, t->ndim);
    return record(t, out, &c);
}

dl_tensor *dl_permute(dl_tensor *t, const int *dims) {
    dl_tensor *out = dl_tensor_permute(t, dims);
    if (!out) return NULL;
    view_ctx c = {.kind = VIEW_PERMUTE};
    for (int i = 0; i < t->ndim; i++) c.perm[i] = dl_wrap_dim("permute", dims[i], t->ndim);
    return record(t, out, &c);
}

dl_tensor *dl_squeeze(dl_tensor *t, int dim) {
    return record(t, dl_tensor_squeeze(t, dim), &(view_ctx){.kind = VIEW_RESHAPE});
}

dl_tensor *dl_squeeze_all(dl_tensor *t) {
    return record(t, dl_tensor_squeeze_all(t), &(view_ctx){.kind = VIEW_RESHAPE});
}

dl_tensor *dl_unsqueeze(dl_tensor *t, int dim) {
    return record(t, dl_tensor_unsqueeze(t, dim), &(view_ctx){.kind = VIEW_RESHAPE});
}

dl_tensor *dl_flatten(dl_tensor *t, int start, int end) {
    return record(t, dl_tensor_flatten(t, start, end), &(view_ctx){.kind = VIEW_RESHAPE});
}

dl_tensor *dl_narrow(dl_tensor *t, int dim, int64_t start, int64_t length) {
    dl_tensor *out = dl_tensor_narrow(t, dim, start, length);
    if (!out) return NULL;
    view_ctx c = {.kind = VIEW_NARROW, .len = length};
    c.d0 = dl_wrap_dim("narrow", dim, t->ndim);
    c.start = start < 0 ? start + t->shape[c.d0] : start;
    return record(t, out, &c);
}

dl_tensor *dl_select(dl_tensor *t, int dim, int64_t index) {
    dl_tensor *out = dl_tensor_select(t, dim, index);
    if (!out) return NULL;
    view_ctx c = {.kind = VIEW_SELECT};
    c.d0 = dl_wrap_dim("select", dim, t->ndim);
    c.start = index < 0 ? index + t->shape[c.d0] : index;
    return record(t, out, &c);
}

dl_tensor *dl_expand(dl_tensor *t, int ndim, const int64_t *shape) {
    return record(t, dl_tensor_expand(t, ndim, shape), &(view_ctx){.kind = VIEW_EXPAND});
}

dl_tensor *dl_contiguous(dl_tensor *t) {
    return record(t, dl_tensor_contiguous(t), &(view_ctx){.kind = VIEW_IDENTITY});
}

/* A copy of t as dtype on dev in t's own layout when t is dense, contiguous
 * otherwise. */
static dl_tensor *copy_like(dl_tensor *t, dl_dtype dtype, dl_device dev) {
    dl_tensor *c = dl_tensor_empty_like_layout(t, dtype, dev);
    if (c && dl_tensor_copy_(c, t)) {
        dl_tensor_release(c);
        return NULL;
    }
    return c;
}

dl_tensor *dl_clone(dl_tensor *t) {
    return record(t, copy_like(t, t->dtype, dl_tensor_device(t)),
                  &(view_ctx){.kind = VIEW_IDENTITY});
}

bool dl_is_channels_last(const dl_tensor *t) {
    return t->ndim == 4 && dl_op_dense_channels_last(t);
}

/* A channels-last tensor that is not also plainly contiguous: the layout a
 * conversion keeps. */
static bool keeps_layout(const dl_tensor *t) {
    return dl_is_channels_last(t) && !dl_tensor_is_contiguous(t);
}

/* t converted to dtype on dev (t itself, retained, when it already is). */
static dl_tensor *convert(dl_tensor *t, dl_dtype dtype, dl_device dev) {
    if (t->dtype == dtype && dl_device_equal(dl_tensor_device(t), dev)) return dl_tensor_retain(t);
    if (!keeps_layout(t)) {
        if (t->dtype == dtype) return dl_tensor_to_device(t, dev);
        dl_tensor *a = dl_tensor_to_dtype(t, dtype);
        dl_tensor *b = a ? dl_tensor_to_device(a, dev) : NULL;
        dl_tensor_release(a);
        return b;
    }
    return copy_like(t, dtype, dev);
}

dl_tensor *dl_to_dtype(dl_tensor *t, dl_dtype dtype) {
    if (t->requires_grad && !dl_dtype_is_floating(dtype) && dl_grad_enabled()) {
        /* integer results carry no gradient, as in PyTorch */
        dl_tensor *d = dl_tensor_detached(t);
        dl_tensor *r = d ? convert(d, dtype, dl_tensor_device(t)) : NULL;
        dl_tensor_release(d);
        return r;
    }
    return record(t, convert(t, dtype, dl_tensor_device(t)), &(view_ctx){.kind = VIEW_TO});
}

dl_tensor *dl_to_device(dl_tensor *t, dl_device dev) {
    return record(t, convert(t, t->dtype, dev), &(view_ctx){.kind = VIEW_TO});
}

dl_tensor *dl_contiguous_channels_last(dl_tensor *t) {
    if (t->ndim != 4) {
        dl_error("contiguous: channels_last needs a 4-dimensional (N, C, H, W) tensor, got %d "
                 "dimensions",
                 t->ndim);
        return NULL;
    }
    if (dl_is_channels_last(t)) return dl_tensor_retain(t);
    const int64_t *s = t->shape;
    int64_t st[4] = {s[1] * s[2] * s[3], 1, s[3] * s[1], s[1]};
    int64_t numel = dl_tensor_numel(t);
    dl_tensor *c = dl_tensor_empty(1, &numel, t->dtype, dl_tensor_device(t));
    dl_tensor *v = c ? dl_tensor_as_strided(c, 4, s, st, 0) : NULL;
    dl_tensor_release(c);
    if (v && dl_tensor_copy_(v, t)) {
        dl_tensor_release(v);
        v = NULL;
    }
    return record(t, v, &(view_ctx){.kind = VIEW_IDENTITY});
}

int dl_set_data(dl_tensor *t, dl_tensor *src) {
    if (t->grad_fn)
        return dl_error("data: cannot replace the data of a tensor computed by an operation "
                        "(%s); only of a leaf",
                        t->grad_fn->name);
    if (t == src) return 0;
    dl_storage_retain(src->storage);
    dl_storage_release(t->storage);
    t->storage = src->storage;
    t->offset = src->offset;
    t->ndim = src->ndim;
    memcpy(t->shape, src->shape, sizeof t->shape);
    memcpy(t->strides, src->strides, sizeof t->strides);
    t->dtype = src->dtype;
    dl_tensor *g = t->grad;
    if (g && (!dl_shape_equal(g, t) || g->dtype != t->dtype ||
              !dl_device_equal(dl_tensor_device(g), dl_tensor_device(t)))) {
        t->grad = NULL;
        dl_tensor_release(g);
    }
    return 0;
}

dl_tensor *dl_detach(dl_tensor *t) {
    return dl_tensor_new_view(t->storage, t->offset, t->ndim, t->shape, t->strides, t->dtype);
}

/* copy_: the destination's old values are overwritten, so only src gets a
 * gradient (summed over what broadcasting repeated). */
static int copy_backward(dl_node *n, dl_tensor *const *gout, dl_tensor **gin) {
    gin[1] = NULL;
    if (!dl_node_needs_grad(n, 1)) return 0;
    gin[1] = dl_grad_for_input(gout[0], &n->input_meta[1]);
    return gin[1] ? 0 : -1;
}

int dl_copy_(dl_tensor *dst, dl_tensor *src) {
    if (dl_check_inplace("copy_", dst)) return -1;
    bool rec = dl_grad_enabled() && (src->requires_grad || dst->requires_grad);
    if (dl_tensor_copy_(dst, src)) return -1;
    if (!rec) return 0;
    dl_tensor *ins[2] = {NULL, src};
    dl_node *n = dl_op_inplace_node("CopyBackward", copy_backward, 2, ins, 0, NULL, false, NULL, 0);
    return n ? dl_op_inplace_end(n, dst, 0, false) : -1;
}

/* t[index] = src along dim 0, in place on t itself: the written slice's old
 * values get no gradient, src gets the slice's (summed over what
 * broadcasting repeated), the rest of t passes through. */
typedef struct {
    int64_t index;
} select_assign_ctx;

static int select_assign_backward(dl_node *n, dl_tensor *const *gout, dl_tensor **gin) {
    int64_t i = ((select_assign_ctx *)n->ctx)->index;
    gin[0] = gin[1] = NULL;
    if (dl_node_needs_grad(n, 1)) {
        if (dl_grad_give_input(n, gin, 1, dl_tensor_select(gout[0], 0, i))) return -1;
    }
    if (dl_node_needs_grad(n, 0)) {
        dl_tensor *g = dl_tensor_clone(gout[0]);
        dl_tensor *slice = g ? dl_tensor_select(g, 0, i) : NULL;
        int rc = slice ? dl_tensor_fill_(slice, 0) : -1;
        dl_tensor_release(slice);
        if (rc) {
            dl_tensor_release(g);
            return -1;
        }
        gin[0] = g;
    }
    return 0;
}

int dl_select_assign_(dl_tensor *t, int64_t index, dl_tensor *src) {
    const char *op = "tensor assignment";
    if (t->ndim == 0) return dl_error("%s: cannot index a 0-dimensional tensor", op);
    if (dl_check_inplace(op, t)) return -1;
    int64_t i = index < 0 ? index + t->shape[0] : index;
    dl_tensor *dst = dl_tensor_select(t, 0, i);
    if (!dst) return -1;
    bool rec = dl_grad_enabled() && (src->requires_grad || t->requires_grad);
    int rc = dl_tensor_copy_(dst, src);
    dl_tensor_release(dst);
    if (rc || !rec) return rc;
    dl_tensor *ins[2] = {t, src};
    select_assign_ctx c = {i};
    dl_node *n = dl_op_inplace_node("SelectAssignBackward", select_assign_backward, 2, ins, 0, NULL,
                                    false, &c, sizeof c);
    return n ? dl_op_inplace_end(n, t, 0, false) : -1;
}

static int no_inputs_backward(dl_node *n, dl_tensor *const *gout, dl_tensor **gin) {
    (void)n;
    (void)gout;
    (void)gin;
    return 0;
}

int dl_fill_(dl_tensor *t, double value) {
    if (dl_check_inplace("fill_", t)) return -1;
    if (dl_tensor_fill_(t, value)) return -1;
    if (!(dl_grad_enabled() && t->grad_fn)) return 0;
    /* the old values are gone: the history ends here */
    dl_node *n =
        dl_op_inplace_node("FillBackward", no_inputs_backward, 0, NULL, 0, NULL, false, NULL, 0);
    return n ? dl_op_inplace_end(n, t, 0, false) : -1;
}
