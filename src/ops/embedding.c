/* ops/embedding.c - the embedding family (see embedding.h): checks, the
 * bags' limits, dispatch to the CPU kernels (cpu/embedding.c) or the CUDA
 * ones (cuda/embedding.cu), and the autograd nodes at the end.
 *
 * Invariants: every id is checked against the weight's rows before a kernel
 * reads it (the kernels trust them); operands are never modified except the
 * weight by max_norm's renormalisation, as in PyTorch; every temporary is
 * released on every path. */
#include "ops/embedding.h"
#include "autograd/autograd.h"
#include "core/error.h"
#include "cpu/embedding.h"
#include "kernels/index.h"
#include "ops/op_util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Whether the CUDA table has entry fn. */
#define HAVE(fn) (dl_cuda_embedding != NULL && dl_cuda_embedding->fn != NULL)

dl_embedding_params dl_embedding_default_params(void) {
    dl_embedding_params p = {-1, 0, 2, false, DL_BAG_MEAN, false};
    return p;
}

/* --- checks ---------------------------------------------------------------------- */

static int check_weight(const char *op, const dl_tensor *w) {
    char b[96];
    if (w->ndim != 2)
        return dl_error("%s: weight must be 2-D (num_embeddings, embedding_dim), got %s", op,
                        dl_op_shape_str(w, b, sizeof b));
    return 0;
}

static int check_int64(const char *op, const char *what, const dl_tensor *t) {
    if (t->dtype != DL_DTYPE_I64)
        return dl_error("%s: %s must be an int64 tensor, got %s", op, what,
                        dl_dtype_name(t->dtype));
    return 0;
}

/* An id i is shown as the user wrote it: i + 1. */
static long long shown(int64_t i) {
    return i == INT64_MAX ? (long long)i : (long long)(i + 1);
}

static int check_id_values(const char *op, const char *what, const int64_t *p, int64_t n,
                           int64_t num) {
    for (int64_t k = 0; k < n; k++)
        if (p[k] < 0 || p[k] >= num)
            return dl_error("%s: %s has id %lld (element %lld), out of range for %lld embeddings "
                            "(ids are 1..%lld)",
                            op, what, shown(p[k]), (long long)(k + 1), (long long)num,
                            (long long)num);
    return 0;
}

/* Every id of a contiguous int64 tensor (any device) in [0, num): a CUDA one
 * by its range on the device (a synchronisation), then on a host copy to
 * name the first bad id. */
static int check_ids(const char *op, const char *what, dl_tensor *ids, int64_t num) {
    int64_t n = dl_tensor_numel(ids);
    if (n == 0) return 0;
    if (!dl_op_on_cuda(ids)) return check_id_values(op, what, dl_op_data(ids), n, num);
    if (!dl_cuda_index || !dl_cuda_index->index_range) return dl_cuda_missing(op);
    int64_t lo, hi;
    if (dl_cuda_index->index_range(ids, &lo, &hi)) return -1;
    if (lo >= 0 && hi < num) return 0;
    dl_tensor *h = dl_tensor_to_device(ids, DL_CPU);
    int rc = h ? check_id_values(op, what, dl_op_data(h), n, num) : -1;
    dl_tensor_release(h);
    if (rc == 0)
        rc = dl_error("%s: %s has ids from %lld to %lld, out of range for %lld embeddings", op,
                      what, shown(lo), shown(hi), (long long)num);
    return rc;
}

static int check_padding(const char *op, int64_t padding_idx, int64_t num) {
    if (padding_idx < -1 || padding_idx >= num)
        return dl_error("%s: padding_idx %lld is out of range for %lld embeddings", op,
                        shown(padding_idx), (long long)num);
    return 0;
}

/* The compute dtype and, on CUDA, whether kernels read dt as it is. */
static dl_dtype kernel_dtype(dl_dtype dt, dl_device dev) {
    return dl_op_is_cuda(dev) ? dt : dl_op_float_dtype(dt);
}

/* --- lookups ---------------------------------------------------------------------- */

dl_tensor *dl_embedding_forward(dl_tensor *weight, dl_tensor *ids) {
    const char *op = "embedding";
    dl_device dev;
    dl_tensor *all[2] = {weight, ids};
    if (check_weight(op, weight) || check_int64(op, "input", ids) ||
        dl_op_device(op, 2, all, HAVE(gather), &dev))
        return NULL;
    if (ids->ndim + 1 > DL_MAX_DIMS) {
        dl_error("%s: input has %d dims, at most %d are supported", op, ids->ndim, DL_MAX_DIMS - 1);
        return NULL;
    }
    dl_emb_shape s = {dl_tensor_numel(ids), weight->shape[0], weight->shape[1], 0};
    int64_t shape[DL_MAX_DIMS];
    for (int i = 0; i < ids->ndim; i++) shape[i] = ids->shape[i];
    shape[ids->ndim] = s.dim;
    /* in: ids weight; out */
    dl_tensor *t[3] = {dl_op_dense(ids, DL_DTYPE_I64), NULL, NULL}, *y = NULL;
    if (!t[0] || check_ids(op, "input", t[0], s.num) || !(t[1] = dl_tensor_contiguous(weight)) ||
        !(t[2] = dl_tensor_empty(ids->ndim + 1, shape, weight->dtype, dev)))
        goto done;
    if (s.n * s.dim > 0) {
        size_t esz = dl_tensor_itemsize(weight);
        if (dl_op_is_cuda(dev)) {
            if (dl_cuda_embedding->gather(dl_op_data(t[2]), dl_op_data(t[1]), esz, dl_op_data(t[0]),
                                          &s))
                goto done;
        } else {
            dl_cpu_embedding_gather(dl_op_data(t[2]), dl_op_data(t[1]), esz, dl_op_data(t[0]), &s);
        }
    }
    y = t[2];
    t[2] = NULL;
done:
    dl_op_release_all(t, 3);
    return y;
}

/* The weight gradient of a lookup, in gy's compute dtype; ids already
 * checked when checked. */
static dl_tensor *lookup_backward(dl_tensor *gy, dl_tensor *ids, int64_t num, int64_t padding_idx,
                                  bool by_freq, bool checked) {
    const char *op = "embedding_backward";
    char a[96], b[96];
    dl_device dev;
    dl_tensor *all[2] = {gy, ids};
    if (dl_op_need_floating(op, "grad_output", gy) || check_int64(op, "input", ids) ||
        check_padding(op, padding_idx, num) || dl_op_device(op, 2, all, HAVE(backward), &dev))
        return NULL;
    bool ok = gy->ndim == ids->ndim + 1;
    for (int i = 0; ok && i < ids->ndim; i++) ok = gy->shape[i] == ids->shape[i];
    if (!ok) {
        dl_error("%s: grad_output has shape %s, expected the input's %s and one more dim", op,
                 dl_op_shape_str(gy, a, sizeof a), dl_op_shape_str(ids, b, sizeof b));
        return NULL;
    }
    if (num < 0) {
        dl_error("%s: num_weights must be non-negative, got %lld", op, (long long)num);
        return NULL;
    }
    dl_emb_shape s = {dl_tensor_numel(ids), num, gy->shape[gy->ndim - 1], 0};
    dl_dtype ct = dl_op_float_dtype(gy->dtype);
    int64_t wshape[2] = {s.num, s.dim};
    dl_tensor *t[3] = {dl_op_dense(ids, DL_DTYPE_I64), dl_op_dense_on(gy, ct, dev), NULL};
    dl_tensor *gw = NULL;
    if (!t[0] || !t[1] || (!checked && check_ids(op, "input", t[0], num)) ||
        !(t[2] = dl_tensor_zeros(2, wshape, ct, dev)))
        goto done;
    if (s.n * s.dim > 0 && s.num > 0) {
        void *gw_ = dl_op_data(t[2]);
        const void *gy_ = dl_op_data(t[1]);
        const int64_t *ids_ = dl_op_data(t[0]);
        if (dl_op_is_cuda(dev) ? dl_cuda_embedding->backward(ct, gw_, gy_, ids_, NULL, NULL, NULL,
                                                             &s, padding_idx, by_freq)
                               : dl_cpu_embedding_backward(ct, gw_, gy_, ids_, NULL, NULL, NULL, &s,
                                                           padding_idx, by_freq))
            goto done;
    }
    gw = t[2];
    t[2] = NULL;
done:
    dl_op_release_all(t, 3);
    return gw;
}

dl_tensor *dl_embedding_backward(dl_tensor *gy, dl_tensor *ids, int64_t num, int64_t padding_idx,
                                 bool by_freq) {
    return dl_op_finish_as(lookup_backward(gy, ids, num, padding_idx, by_freq, false), gy->dtype);
}

int dl_embedding_renorm_(dl_tensor *weight, dl_tensor *ids, double max_norm, double norm_type) {
    const char *op = "embedding_renorm_";
    dl_device dev;
    dl_tensor *all[2] = {weight, ids};
    if (check_weight(op, weight) || dl_op_need_floating(op, "weight", weight) ||
        check_int64(op, "input", ids) || dl_op_device(op, 2, all, HAVE(renorm), &dev))
        return -1;
    if (!(max_norm > 0)) return dl_error("%s: max_norm must be positive, got %g", op, max_norm);
    if (!(norm_type > 0)) return dl_error("%s: norm_type must be positive, got %g", op, norm_type);
    dl_emb_shape s = {dl_tensor_numel(ids), weight->shape[0], weight->shape[1], 0};
    dl_dtype kt = kernel_dtype(weight->dtype, dev);
    /* in place when weight is dense in the kernel dtype, else on a copy
     * written back */
    dl_tensor *t[2] = {dl_op_dense(ids, DL_DTYPE_I64), NULL};
    int rc = -1;
    if (!t[0] || check_ids(op, "input", t[0], s.num) || !(t[1] = dl_op_dense(weight, kt)))
        goto done;
    if (s.n * s.dim > 0) {
        if (dl_op_is_cuda(dev) ? dl_cuda_embedding->renorm(kt, dl_op_data(t[1]), dl_op_data(t[0]),
                                                           &s, max_norm, norm_type)
                               : dl_cpu_embedding_renorm(kt, dl_op_data(t[1]), dl_op_data(t[0]), &s,
                                                         max_norm, norm_type))
            goto done;
        if (t[1] != weight && dl_tensor_copy_(weight, t[1])) goto done;
        dl_tensor_bump_version(weight);
    }
    rc = 0;
done:
    dl_op_release_all(t, 2);
    return rc;
}

/* --- bags --------------------------------------------------------------------------- */

void dl_embedding_bag_result_release(dl_embedding_bag_result *r) {
    dl_tensor **ts[6] = {&r->out, &r->ids, &r->bounds, &r->bag_of, &r->bag_size, &r->argmax};
    for (int i = 0; i < 6; i++) {
        dl_tensor_release(*ts[i]);
        *ts[i] = NULL;
    }
}

/* The bags' limits (bags + 1) on the host from 2-D ids (len each) or from
 * offsets; a new int64 tensor on the CPU, *bags set. */
static dl_tensor *bag_bounds(const char *op, dl_tensor *ids, dl_tensor *offsets, bool last,
                             int64_t *bags) {
    int64_t n = dl_tensor_numel(ids);
    dl_tensor *h = NULL, *bounds = NULL;
    const int64_t *off = NULL;
    int64_t noff = 0;
    if (offsets) {
        dl_tensor *d = dl_op_dense(offsets, DL_DTYPE_I64);
        h = d && dl_op_on_cuda(d) ? dl_tensor_to_device(d, DL_CPU) : dl_tensor_retain(d);
        dl_tensor_release(d);
        if (!h) return NULL;
        off = dl_op_data(h);
        noff = dl_tensor_numel(h);
        if (last && noff == 0) {
            dl_error("%s: with include_last_offset, offsets needs at least one entry", op);
            goto done;
        }
        *bags = last ? noff - 1 : noff;
    } else {
        *bags = ids->shape[0];
    }
    int64_t B = *bags, one = B + 1;
    if (!(bounds = dl_tensor_empty(1, &one, DL_DTYPE_I64, DL_CPU))) goto done;
    int64_t *bp = dl_op_data(bounds);
    if (!offsets) {
        for (int64_t b = 0; b <= B; b++) bp[b] = b * ids->shape[1];
        goto done;
    }
    for (int64_t i = 0; i < noff; i++) {
        if (i == 0 && off[0] != 0) {
            dl_error("%s: offsets[1] must be 1 (the first bag starts at the first id), got %lld",
                     op, shown(off[0]));
        } else if (i > 0 && off[i] < off[i - 1]) {
            dl_error("%s: offsets must be non-decreasing, got %lld after %lld (offsets[%lld])", op,
                     shown(off[i]), shown(off[i - 1]), (long long)(i + 1));
        } else if (off[i] > n) {
            dl_error("%s: offsets[%lld] is %lld, past the end of input (%lld ids)", op,
                     (long long)(i + 1), shown(off[i]), (long long)n);
        } else if (last && i == noff - 1 && off[i] != n) {
            dl_error("%s: with include_last_offset, the last offset must be %lld (the number of "
                     "ids + 1), got %lld",
                     op, shown(n), shown(off[i]));
        } else {
            bp[i] = off[i];
            continue;
        }
        dl_tensor_release(bounds);
        bounds = NULL;
        goto done;
    }
    bp[B] = n;
done:
    dl_tensor_release(h);
    return bounds;
}

int dl_embedding_bag_forward(dl_tensor *weight, dl_tensor *ids, dl_tensor *offsets, dl_tensor *psw,
                             const dl_embedding_params *p, dl_embedding_bag_result *r) {
    const char *op = "embedding_bag";
    char a[96], b[96];
    dl_device dev;
    memset(r, 0, sizeof *r);
    dl_tensor *all[4] = {weight, ids, offsets, psw};
    if (check_weight(op, weight) || dl_op_need_floating(op, "weight", weight) ||
        check_int64(op, "input", ids) || (offsets && check_int64(op, "offsets", offsets)) ||
        dl_op_device(op, 4, all, HAVE(bag_forward), &dev))
        return -1;
    int64_t num = weight->shape[0], dim = weight->shape[1];
    if (check_padding(op, p->padding_idx, num)) return -1;
    if (ids->ndim == 2 && offsets)
        return dl_error("%s: offsets must be nil when input is 2-D (bags of equal length)", op);
    if (ids->ndim == 1 && !offsets)
        return dl_error("%s: offsets are required when input is 1-D", op);
    if (ids->ndim != 1 && ids->ndim != 2)
        return dl_error("%s: input must be 1-D (with offsets) or 2-D, got %s", op,
                        dl_op_shape_str(ids, a, sizeof a));
    if (offsets && offsets->ndim != 1)
        return dl_error("%s: offsets must be 1-D, got %s", op,
                        dl_op_shape_str(offsets, a, sizeof a));
    if (psw) {
        if (p->mode != DL_BAG_SUM)
            return dl_error("%s: per_sample_weights is only supported for mode 'sum'", op);
        if (!dl_shape_equal(psw, ids))
            return dl_error("%s: per_sample_weights has shape %s, expected the input's %s", op,
                            dl_op_shape_str(psw, a, sizeof a), dl_op_shape_str(ids, b, sizeof b));
        if (psw->dtype != weight->dtype)
            return dl_error("%s: per_sample_weights (%s) must have the weight's dtype (%s)", op,
                            dl_dtype_name(psw->dtype), dl_dtype_name(weight->dtype));
    }
    if (p->scale_grad_by_freq && p->mode == DL_BAG_MAX)
        return dl_error("%s: scale_grad_by_freq is not supported with mode 'max'", op);
    int64_t n = dl_tensor_numel(ids), B = 0;
    dl_dtype kt = kernel_dtype(weight->dtype, dev);
    /* in: weight psw; out: r's */
    dl_tensor *t[2] = {NULL, NULL};
    int rc = -1;
    if (!(r->ids = dl_op_dense(ids, DL_DTYPE_I64)) || check_ids(op, "input", r->ids, num) ||
        !(r->bounds = bag_bounds(op, ids, offsets, p->include_last_offset, &B)) ||
        !(r->bounds = dl_op_onto(r->bounds, dev)))
        goto done;
    dl_tensor *flat = dl_tensor_reshape(r->ids, 1, &n);
    dl_tensor_release(r->ids);
    if (!(r->ids = flat)) goto done;
    int64_t oshape[2] = {B, dim};
    if (!(t[0] = dl_op_dense(weight, kt)) || (psw && !(t[1] = dl_op_dense(psw, kt))) ||
        !(r->out = dl_tensor_empty(2, oshape, kt, dev)) ||
        !(r->bag_of = dl_tensor_empty(1, &n, DL_DTYPE_I64, dev)) ||
        !(r->bag_size = dl_tensor_zeros(1, &B, DL_DTYPE_I64, dev)) ||
        (p->mode == DL_BAG_MAX && !(r->argmax = dl_tensor_empty(2, oshape, DL_DTYPE_I64, dev))))
        goto done;
    dl_emb_shape s = {n, num, dim, B};
    if (B > 0 && dim > 0) {
        void *out_ = dl_op_data(r->out);
        int64_t *bag_of = dl_op_data(r->bag_of), *bag_size = dl_op_data(r->bag_size),
                *argmax = dl_op_data(r->argmax);
        const void *w_ = dl_op_data(t[0]), *psw_ = dl_op_data(t[1]);
        const int64_t *ids_ = dl_op_data(r->ids), *bounds_ = dl_op_data(r->bounds);
        if (dl_op_is_cuda(dev)
                ? dl_cuda_embedding->bag_forward(kt, p->mode, out_, bag_of, bag_size, argmax, w_,
                                                 ids_, bounds_, psw_, &s, p->padding_idx)
                : dl_cpu_embedding_bag_forward(kt, p->mode, out_, bag_of, bag_size, argmax, w_,
                                               ids_, bounds_, psw_, &s, p->padding_idx))
            goto done;
    } else if (n > 0 && dl_tensor_fill_(r->bag_of, -1)) { /* no bag holds an entry */
        goto done;
    }
    if (!(r->out = dl_op_finish_as(r->out, weight->dtype))) goto done;
    rc = 0;
done:
    dl_op_release_all(t, 2);
    if (rc) dl_embedding_bag_result_release(r);
    return rc;
}

int dl_embedding_bag_backward(dl_tensor *gy, dl_tensor *weight, int64_t num,
                              const dl_embedding_bag_result *r, dl_tensor *psw,
                              const dl_embedding_params *p, const bool need[2], dl_tensor **gweight,
                              dl_tensor **gpsw) {
    const char *op = "embedding_bag_backward";
    char a[96];
    dl_device dev;
    *gweight = *gpsw = NULL;
    bool want_p = need[1] && psw && p->mode == DL_BAG_SUM;
    dl_tensor *all[7] = {gy, want_p ? weight : NULL, r->ids, r->bag_of, r->bag_size, r->argmax,
                         psw};
    if (want_p && !weight) return dl_error("%s: per_sample_weights' gradient needs the weight", op);
    if (dl_op_need_floating(op, "grad_output", gy) || (want_p && check_weight(op, weight)) ||
        dl_op_device(op, 7, all, HAVE(backward) && HAVE(bag_max_backward) && HAVE(psw_backward),
                     &dev))
        return -1;
    int64_t B = r->bag_size->shape[0], dim = gy->ndim == 2 ? gy->shape[1] : -1;
    int64_t n = dl_tensor_numel(r->ids);
    if (gy->ndim != 2 || gy->shape[0] != B || (want_p && weight->shape[1] != dim) ||
        (want_p && weight->shape[0] != num))
        return dl_error("%s: grad_output has shape %s, expected [%lld, embedding_dim]", op,
                        dl_op_shape_str(gy, a, sizeof a), (long long)B);
    if (p->mode == DL_BAG_MAX && !r->argmax)
        return dl_error("%s: mode 'max' needs the forward's argmax", op);
    dl_emb_shape s = {n, num, dim, B};
    dl_dtype ct = dl_op_float_dtype(gy->dtype);
    dl_dtype wt = want_p ? kernel_dtype(weight->dtype, dev) : ct;
    int64_t wshape[2] = {num, dim};
    bool cuda = dl_op_is_cuda(dev);
    /* in: gy psw weight; out: gw gpsw */
    dl_tensor *t[5] = {dl_op_dense(gy, ct), dl_op_dense(psw, ct),
                       want_p ? dl_op_dense(weight, wt) : NULL,
                       need[0] ? dl_tensor_zeros(2, wshape, ct, dev) : NULL,
                       want_p ? dl_tensor_empty(1, &n, ct, dev) : NULL};
    int rc = -1;
    if (!t[0] || (psw && !t[1]) || (want_p && (!t[2] || !t[4])) || (need[0] && !t[3])) goto done;
    const int64_t *ids_ = dl_op_data(r->ids), *bag_of = dl_op_data(r->bag_of),
                  *bag_size = dl_op_data(r->bag_size), *argmax = dl_op_data(r->argmax);
    if (need[0] && n * dim > 0 && num > 0) {
        void *gw_ = dl_op_data(t[3]);
        const void *gy_ = dl_op_data(t[0]), *psw_ = dl_op_data(t[1]);
        const int64_t *bs = p->mode == DL_BAG_MEAN ? bag_size : NULL;
        int k;
        if (p->mode == DL_BAG_MAX)
            k = cuda ? dl_cuda_embedding->bag_max_backward(ct, gw_, gy_, ids_, argmax, &s)
                     : (dl_cpu_embedding_bag_max_backward(ct, gw_, gy_, ids_, argmax, &s), 0);
        else
            k = cuda ? dl_cuda_embedding->backward(ct, gw_, gy_, ids_, bag_of, psw_, bs, &s,
                                                   p->padding_idx, p->scale_grad_by_freq)
                     : dl_cpu_embedding_backward(ct, gw_, gy_, ids_, bag_of, psw_, bs, &s,
                                                 p->padding_idx, p->scale_grad_by_freq);
        if (k) goto done;
    }
    if (want_p && n > 0) {
        void *g_ = dl_op_data(t[4]);
        const void *gy_ = dl_op_data(t[0]), *w_ = dl_op_data(t[2]);
        if (cuda) {
            if (dl_cuda_embedding->psw_backward(ct, wt, g_, gy_, w_, ids_, bag_of, &s)) goto done;
        } else {
            dl_cpu_embedding_psw_backward(ct, g_, gy_, w_, ids_, bag_of, &s);
        }
    }
    if ((t[3] && !(t[3] = dl_op_finish_as(t[3], gy->dtype))) ||
        (t[4] && dl_op_finish_view(&t[4], psw->dtype, psw->ndim, psw->shape)))
        goto done;
    rc = 0;
    *gweight = t[3];
    *gpsw = t[4];
    t[3] = t[4] = NULL;
done:
    dl_op_release_all(t, 5);
    return rc;
}

/* --- with autograd -------------------------------------------------------------------- */

/* a lookup's node: saved ids; the weight's rows and the options */
typedef struct {
    int64_t num, padding_idx;
    bool by_freq;
} lookup_ctx;

static int lookup_node_backward(dl_node *n, dl_tensor *const *gout, dl_tensor **gin) {
    const lookup_ctx *c = n->ctx;
    dl_tensor *ids = dl_node_saved(n, 0);
    if (!ids) return -1;
    gin[0] =
        dl_op_finish_as(lookup_backward(gout[0], ids, c->num, c->padding_idx, c->by_freq, true),
                        n->input_meta[0].dtype);
    return gin[0] ? 0 : -1;
}

dl_tensor *dl_embedding(dl_tensor *weight, dl_tensor *ids, const dl_embedding_params *p) {
    if (check_weight("embedding", weight) ||
        check_padding("embedding", p->padding_idx, weight->shape[0]))
        return NULL;
    if (p->max_norm > 0 && dl_embedding_renorm_(weight, ids, p->max_norm, p->norm_type))
        return NULL;
    dl_tensor *y = dl_embedding_forward(weight, ids);
    if (!y || !dl_dtype_is_floating(weight->dtype)) return y;
    lookup_ctx c = {weight->shape[0], p->padding_idx, p->scale_grad_by_freq};
    return dl_op_record(y, "EmbeddingBackward", lookup_node_backward, 1, &weight, 1, &ids, &c,
                        sizeof c);
}

/* a bag's node: saved ids, bag_of, bag_size, argmax, weight (when psw
 * wants a gradient), psw; the options and the weight's rows */
typedef struct {
    dl_embedding_params p;
    int64_t num;
} bag_ctx;

static int bag_node_backward(dl_node *n, dl_tensor *const *gout, dl_tensor **gin) {
    const bag_ctx *c = n->ctx;
    dl_tensor *s[6] = {NULL};
    for (int i = 0; i < 6; i++)
        if (n->saved[i].t && !(s[i] = dl_node_saved(n, i))) return -1;
    dl_embedding_bag_result r = {NULL, s[0], NULL, s[1], s[2], s[3]};
    bool need[2] = {dl_node_needs_grad(n, 0), dl_node_needs_grad(n, 1)};
    if (dl_embedding_bag_backward(gout[0], s[4], c->num, &r, s[5], &c->p, need, &gin[0], &gin[1]))
        return -1;
    /* the weight's gradient in the weight's dtype */
    if (gin[0] && gin[0]->dtype != n->input_meta[0].dtype &&
        !(gin[0] = dl_op_finish_as(gin[0], n->input_meta[0].dtype)))
        return -1;
    return 0;
}

dl_tensor *dl_embedding_bag(dl_tensor *weight, dl_tensor *ids, dl_tensor *offsets, dl_tensor *psw,
                            const dl_embedding_params *p) {
    if (p->max_norm > 0 && dl_embedding_renorm_(weight, ids, p->max_norm, p->norm_type))
        return NULL;
    dl_embedding_bag_result r;
    if (dl_embedding_bag_forward(weight, ids, offsets, psw, p, &r)) return NULL;
    dl_tensor *in[2] = {weight, psw};
    bool psw_grad = psw && dl_needs_grad1(psw);
    dl_tensor *save[6] = {r.ids, r.bag_of, r.bag_size, r.argmax, psw_grad ? weight : NULL, psw};
    bag_ctx c = {*p, weight->shape[0]};
    dl_tensor *y = dl_op_record(r.out, "EmbeddingBagBackward", bag_node_backward, 2, in, 6, save,
                                &c, sizeof c);
    r.out = NULL;
    dl_embedding_bag_result_release(&r);
    return y;
}
