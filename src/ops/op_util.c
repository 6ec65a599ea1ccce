/* op_util.c - the op families' shared toolkit (see op_util.h).  Plain
 * helpers over the core's tensor functions; nothing here dispatches to a
 * backend or records autograd. */
#include "ops/op_util.h"
#include "core/error.h"

#include <string.h>

dl_dtype dl_op_compute_dtype(dl_dtype result) {
    if (result == DL_DTYPE_F64) return DL_DTYPE_F64;
    if (dl_dtype_is_floating(result)) return DL_DTYPE_F32;
    return DL_DTYPE_I64;
}

dl_dtype dl_op_float_dtype(dl_dtype dt) {
    return dt == DL_DTYPE_F64 ? DL_DTYPE_F64 : DL_DTYPE_F32;
}

int dl_op_need_floating(const char *op, const char *what, const dl_tensor *t) {
    if (!dl_dtype_is_floating(t->dtype))
        return dl_error("%s: %s must be a floating-point tensor, got %s", op, what,
                        dl_dtype_name(t->dtype));
    return 0;
}

int dl_op_check_limit(const char *op, const char *what, const int64_t *v, int n) {
    const int64_t limit = (int64_t)1 << 31;
    for (int i = 0; i < n; i++)
        if (v[i] >= limit || v[i] <= -limit)
            return dl_error("%s: %s %lld is too large", op, what, (long long)v[i]);
    return 0;
}

dl_tensor *dl_op_dense(dl_tensor *t, dl_dtype dt) {
    if (!t) return NULL;
    dl_tensor *a = dl_tensor_to_dtype(t, dt);
    if (!a) return NULL;
    dl_tensor *c = dl_tensor_contiguous(a);
    dl_tensor_release(a);
    return c;
}

dl_tensor *dl_op_finish_as(dl_tensor *out, dl_dtype dt) {
    if (!out || out->dtype == dt) return out;
    dl_tensor *r = dl_tensor_to_dtype(out, dt);
    dl_tensor_release(out);
    return r;
}

void dl_op_release_all(dl_tensor **ts, int n) {
    for (int i = 0; i < n; i++) {
        dl_tensor_release(ts[i]);
        ts[i] = NULL;
    }
}

int dl_op_finish_view(dl_tensor **t, dl_dtype dt, int ndim, const int64_t *shape) {
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

int dl_op_cuda_ready(const char *op, dl_device dev, bool have) {
    if (!have) return dl_cuda_missing(op);
    return dl_cuda_rt->set_device(dev.index);
}

int dl_op_check_same_shape(const char *op, const char *wa, const dl_tensor *a, const char *wb,
                           const dl_tensor *b) {
    if (dl_shape_equal(a, b)) return 0;
    char s1[128], s2[128];
    return dl_error("%s: %s of shape %s does not match %s of shape %s", op, wa,
                    dl_shape_str(a->ndim, a->shape, s1, sizeof s1), wb,
                    dl_shape_str(b->ndim, b->shape, s2, sizeof s2));
}

dl_tensor *dl_op_result(dl_tensor *out, int rc) {
    if (rc == 0) return out;
    dl_tensor_release(out);
    return NULL;
}

int dl_op_check_writable(const char *op, const char *what, const dl_tensor *t) {
    for (int d = 0; d < t->ndim; d++)
        if (t->strides[d] == 0 && t->shape[d] > 1)
            return dl_error("%s: %s is an expanded view and cannot be updated in place (its "
                            "elements overlap; clone() it first)",
                            op, what);
    return 0;
}

dl_tensor *dl_op_onto(dl_tensor *t, dl_device dev) {
    if (!t || dl_device_equal(dl_tensor_device(t), dev)) return t;
    dl_tensor *m = dl_tensor_to_device(t, dev);
    dl_tensor_release(t);
    return m;
}

dl_tensor *dl_op_dense_on(dl_tensor *t, dl_dtype dt, dl_device dev) {
    return dl_op_onto(dl_op_dense(t, dt), dev);
}

int dl_op_device(const char *op, int n, dl_tensor *const *ts, bool have, dl_device *dev) {
    if (dl_common_device(op, n, ts, dev)) return -1;
    if (dev->type == DL_DEVICE_CPU) return 0;
    if (dev->type != DL_DEVICE_CUDA || !have || !dl_cuda_rt) return dl_cuda_missing(op);
    return dl_cuda_rt->set_device(dev->index) < 0 ? -1 : 0;
}

void dl_op_take3(dl_tensor **ts, dl_tensor **a, dl_tensor **b, dl_tensor **c) {
    *a = ts[0];
    *b = ts[1];
    *c = ts[2];
    ts[0] = ts[1] = ts[2] = NULL;
}

const char *dl_op_shape_str(const dl_tensor *t, char *buf, size_t n) {
    return dl_shape_str(t->ndim, t->shape, buf, n);
}

bool dl_op_dense_channels_last(const dl_tensor *t) {
    if (t->ndim < 3) return false;
    /* C fastest, then the spatial dims from the last, then N */
    int64_t expect = 1;
    for (int k = 0; k < t->ndim; k++) {
        int d = k == 0 ? 1 : k == t->ndim - 1 ? 0 : t->ndim - k;
        if (t->shape[d] == 1) continue;
        if (t->strides[d] != expect) return false;
        expect *= t->shape[d];
    }
    return true;
}

bool dl_op_is_channels_last(const dl_tensor *t) {
    return !dl_tensor_is_contiguous(t) && dl_op_dense_channels_last(t);
}

dl_tensor *dl_op_empty_layout(int ndim, const int64_t *shape, dl_dtype dt, dl_device dev, bool cl) {
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

dl_tensor *dl_op_dense_layout(dl_tensor *t, dl_dtype dt, bool cl) {
    if (!cl) return dl_op_dense(t, dt);
    if (t->dtype == dt && dl_op_dense_channels_last(t)) return dl_tensor_retain(t);
    dl_tensor *r = dl_op_empty_layout(t->ndim, t->shape, dt, dl_tensor_device(t), true);
    if (r && dl_tensor_copy_(r, t)) {
        dl_tensor_release(r);
        r = NULL;
    }
    return r;
}

dl_node *dl_op_node_new(const char *name, dl_backward_fn fn, int n_in, dl_tensor *const *in,
                        int n_out, int n_save, dl_tensor *const *save, const void *ctx,
                        size_t ctx_size) {
    dl_node *n = dl_node_new(name, fn, n_in, in, n_out, ctx_size);
    if (!n) return NULL;
    if (ctx_size) memcpy(n->ctx, ctx, ctx_size);
    for (int i = 0; i < n_save; i++)
        if (dl_node_save(n, save[i]) < 0) {
            dl_node_release(n);
            return NULL;
        }
    return n;
}

dl_tensor *dl_op_record(dl_tensor *out, const char *name, dl_backward_fn fn, int n_in,
                        dl_tensor *const *in, int n_save, dl_tensor *const *save, const void *ctx,
                        size_t ctx_size) {
    if (!out || !dl_autograd_needed(n_in, in)) return out;
    dl_node *n = dl_op_node_new(name, fn, n_in, in, 1, n_save, save, ctx, ctx_size);
    if (!n) return dl_op_abort(NULL, out);
    return dl_node_finish(n, out);
}

dl_tensor *dl_op_abort(dl_node *n, dl_tensor *out) {
    dl_node_release(n);
    dl_tensor_release(out);
    return NULL;
}

dl_node *dl_op_inplace_node(const char *name, dl_backward_fn fn, int n_in, dl_tensor *const *in,
                            int n_save, dl_tensor *const *save, bool save_old, const void *ctx,
                            size_t ctx_size) {
    if (!save_old) return dl_op_node_new(name, fn, n_in, in, 1, n_save, save, ctx, ctx_size);
    dl_tensor *saves[DL_NODE_MAX_SAVED];
    if (n_save < 1 || n_save > DL_NODE_MAX_SAVED) {
        dl_error("%s: %d saved tensors (internal)", name, n_save);
        return NULL;
    }
    memcpy(saves, save, sizeof *saves * (size_t)n_save);
    dl_tensor *old = saves[0] = dl_tensor_clone(in[0]);
    dl_node *n = old ? dl_op_node_new(name, fn, n_in, in, 1, n_save, saves, ctx, ctx_size) : NULL;
    dl_tensor_release(old);
    return n;
}

int dl_op_inplace_end(dl_node *n, dl_tensor *self, int rc, bool save_self) {
    if (n && rc == 0 && save_self && dl_node_save(n, self) < 0) rc = -1;
    if (n && rc == 0) dl_node_set_output(n, 0, self);
    dl_node_release(n);
    return rc ? -1 : 0;
}

dl_tensor *dl_op_keep(dl_op_pool *p, dl_tensor *t) {
    if (t && p->n == DL_OP_POOL_MAX) {
        dl_tensor_release(t);
        dl_error("autograd: too many intermediates in a backward formula (internal)");
        t = NULL;
    }
    if (!t) {
        p->failed = true;
        return NULL;
    }
    return p->t[p->n++] = t;
}

void dl_op_pool_free(dl_op_pool *p) {
    dl_op_release_all(p->t, p->n);
    p->n = 0;
}
