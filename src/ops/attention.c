/* ops/attention.c - the attention family (see attention.h): scaled
 * dot-product attention, forward and backward, on the CPU (cpu/attention.c)
 * or CUDA (cuda/attention.cu); the autograd node at the end.
 *
 * The op checks the operands, broadcasts the batch dims of q, k and v
 * (expanding and copying only an operand that broadcasts), and hands the
 * kernels dense (B, L, E)-style buffers in the compute dtype.  The mask is
 * never expanded in memory: the kernels read it through a strided
 * descriptor (kernels/attention.h), so a (L, S) mask shared by every batch
 * entry and head stays (L, S).  Gradients of broadcast operands are summed
 * back to their shapes. */
#include "ops/attention.h"
#include "autograd/autograd.h"
#include "cpu/attention.h"
#include "kernels/attention.h"
#include "ops/grad_util.h"
#include "ops/op_util.h"

#include <math.h>
#include <string.h>

#define OP "scaled_dot_product_attention"
#define OP_BACKWARD "scaled_dot_product_attention_backward"

/* --- checks and shapes -------------------------------------------------------------------- */

/* The shapes of one call: the broadcast batch dims and the four sizes. */
typedef struct {
    int nb; /* batch dims */
    int64_t batch[DL_MAX_DIMS];
    int64_t B, L, S, E, Ev;
} sdpa_shape;

/* shape (batch..., a, b) into out; returns its ndim */
static int full_shape(const sdpa_shape *sh, int64_t a, int64_t b, int64_t *out) {
    for (int i = 0; i < sh->nb; i++) out[i] = sh->batch[i];
    out[sh->nb] = a;
    out[sh->nb + 1] = b;
    return sh->nb + 2;
}

/* PyTorch's broadcast of shapes a (na dims) and b into out: its ndim, or -1. */
static int broadcast(int na, const int64_t *a, int nb, const int64_t *b, int64_t *out) {
    int n = na > nb ? na : nb;
    for (int i = 0; i < n; i++) {
        int64_t x = i - (n - na) >= 0 ? a[i - (n - na)] : 1,
                y = i - (n - nb) >= 0 ? b[i - (n - nb)] : 1;
        if (x != y && x != 1 && y != 1) return -1;
        out[i] = x == 1 ? y : x;
    }
    return n;
}

static int check_operand(const char *op, const char *what, const dl_tensor *t) {
    if (!t) return dl_error("%s: %s is missing", op, what);
    if (dl_op_need_floating(op, what, t)) return -1;
    if (t->ndim < 2) {
        char b[128];
        return dl_error("%s: %s must have at least 2 dims (..., length, embedding), got shape %s",
                        op, what, dl_op_shape_str(t, b, sizeof b));
    }
    return 0;
}

/* Checks q, k, v and fills sh. */
static int check_qkv(const char *op, dl_tensor *q, dl_tensor *k, dl_tensor *v, sdpa_shape *sh) {
    if (check_operand(op, "query", q) || check_operand(op, "key", k) ||
        check_operand(op, "value", v))
        return -1;
    if (q->dtype != k->dtype || q->dtype != v->dtype)
        return dl_error("%s: query, key and value must have one dtype, got %s, %s and %s", op,
                        dl_dtype_name(q->dtype), dl_dtype_name(k->dtype), dl_dtype_name(v->dtype));
    char b1[128], b2[128], b3[128];
    sh->L = q->shape[q->ndim - 2];
    sh->E = q->shape[q->ndim - 1];
    sh->S = k->shape[k->ndim - 2];
    sh->Ev = v->shape[v->ndim - 1];
    if (k->shape[k->ndim - 1] != sh->E)
        return dl_error("%s: query has embedding size %lld (last dim of %s), key has %lld (%s)", op,
                        (long long)sh->E, dl_op_shape_str(q, b1, sizeof b1),
                        (long long)k->shape[k->ndim - 1], dl_op_shape_str(k, b2, sizeof b2));
    if (v->shape[v->ndim - 2] != sh->S)
        return dl_error("%s: key has %lld positions (dim -2 of %s), value has %lld (%s)", op,
                        (long long)sh->S, dl_op_shape_str(k, b1, sizeof b1),
                        (long long)v->shape[v->ndim - 2], dl_op_shape_str(v, b2, sizeof b2));
    if (sh->S == 0)
        return dl_error("%s: key and value have no positions (an empty key sequence, shape %s)", op,
                        dl_op_shape_str(k, b1, sizeof b1));
    if (sh->E == 0)
        return dl_error("%s: query and key have embedding size 0 (shape %s)", op,
                        dl_op_shape_str(q, b1, sizeof b1));
    int64_t t1[DL_MAX_DIMS], t2[DL_MAX_DIMS];
    int n1 = broadcast(q->ndim - 2, q->shape, k->ndim - 2, k->shape, t1);
    int n2 = n1 < 0 ? -1 : broadcast(n1, t1, v->ndim - 2, v->shape, t2);
    if (n2 < 0)
        return dl_error("%s: the batch dims of query %s, key %s and value %s do not broadcast", op,
                        dl_shape_str(q->ndim - 2, q->shape, b1, sizeof b1),
                        dl_shape_str(k->ndim - 2, k->shape, b2, sizeof b2),
                        dl_shape_str(v->ndim - 2, v->shape, b3, sizeof b3));
    sh->nb = n2;
    sh->B = 1;
    for (int i = 0; i < n2; i++) sh->batch[i] = t2[i], sh->B *= t2[i];
    int64_t sizes[5] = {sh->B, sh->L, sh->S, sh->E, sh->Ev};
    return dl_op_check_limit(op, "size", sizes, 5);
}

static int check_mask(const char *op, const dl_tensor *m, bool is_causal, const sdpa_shape *sh) {
    if (!m) return 0;
    if (is_causal)
        return dl_error("%s: is_causal=true and an explicit attn_mask cannot be combined "
                        "(give one of them)",
                        op);
    if (m->dtype != DL_DTYPE_BOOL && !dl_dtype_is_floating(m->dtype))
        return dl_error("%s: attn_mask must be bool or floating point, got %s", op,
                        dl_dtype_name(m->dtype));
    int64_t want[DL_MAX_DIMS];
    int nd = full_shape(sh, sh->L, sh->S, want);
    bool ok = m->ndim <= nd;
    for (int i = 0; ok && i < m->ndim; i++) {
        int64_t s = m->shape[m->ndim - 1 - i];
        ok = s == 1 || s == want[nd - 1 - i];
    }
    if (!ok) {
        char b1[128], b2[128];
        return dl_error("%s: attn_mask of shape %s does not broadcast to the attention weights' "
                        "shape %s (batch..., L, S)",
                        op, dl_op_shape_str(m, b1, sizeof b1),
                        dl_shape_str(nd, want, b2, sizeof b2));
    }
    return 0;
}

/* --- operands ----------------------------------------------------------------------------- */

/* t expanded to (batch..., rows, cols) and made dense in dt (a copy only
 * when t broadcasts or is not already so). */
static dl_tensor *dense_full(dl_tensor *t, const sdpa_shape *sh, dl_dtype dt) {
    int64_t shape[DL_MAX_DIMS];
    int nd = full_shape(sh, t->shape[t->ndim - 2], t->shape[t->ndim - 1], shape);
    dl_tensor *e = dl_tensor_expand(t, nd, shape);
    if (!e) return NULL;
    dl_tensor *d = dl_op_dense(e, dt);
    dl_tensor_release(e);
    return d;
}

/* The mask as the kernels read it: *held is the tensor the descriptor points
 * into (NULL without a mask), a floating mask converted to dt. */
static int mask_desc(dl_tensor *m, const sdpa_shape *sh, dl_dtype dt, dl_attn_mask *desc,
                     dl_tensor **held) {
    memset(desc, 0, sizeof *desc);
    *held = NULL;
    if (!m) return 0;
    dl_tensor *c = m->dtype == DL_DTYPE_BOOL ? dl_tensor_retain(m) : dl_tensor_to_dtype(m, dt);
    if (!c) return -1;
    int64_t shape[DL_MAX_DIMS];
    int nd = full_shape(sh, sh->L, sh->S, shape);
    dl_tensor *e = dl_tensor_expand(c, nd, shape);
    dl_tensor_release(c);
    if (!e) return -1;
    desc->data = dl_tensor_data_ptr(e);
    desc->dtype = e->dtype;
    desc->nb = sh->nb;
    for (int i = 0; i < sh->nb; i++)
        desc->bshape[i] = e->shape[i], desc->bstride[i] = e->strides[i];
    desc->rs = e->strides[nd - 2];
    desc->cs = e->strides[nd - 1];
    *held = e;
    return 0;
}

/* The dtype the kernels compute in on dev. */
static dl_dtype compute_dtype(dl_dtype dt, dl_device dev) {
    if (dl_op_is_cuda(dev) && (dt == DL_DTYPE_F16 || dt == DL_DTYPE_BF16)) return dt;
    return dl_op_float_dtype(dt);
}

static dl_dtype lse_dtype(dl_dtype cdt) {
    return cdt == DL_DTYPE_F64 ? DL_DTYPE_F64 : DL_DTYPE_F32;
}

static void params_of(const sdpa_shape *sh, const dl_sdpa_state *st, dl_attn_params *p) {
    memset(p, 0, sizeof *p);
    p->B = sh->B, p->L = sh->L, p->S = sh->S, p->E = sh->E, p->Ev = sh->Ev;
    p->scale = st->scale;
    p->causal = st->is_causal;
    p->dropout_p = st->dropout_p;
    p->seed = st->seed;
    p->offset = st->offset;
}

/* --- forward ------------------------------------------------------------------------------ */

int dl_sdpa_forward(dl_tensor *q, dl_tensor *k, dl_tensor *v, const dl_sdpa_options *o,
                    dl_tensor **out, dl_tensor **lse, dl_sdpa_state *st) {
    *out = *lse = NULL;
    sdpa_shape sh;
    dl_device dev;
    if (check_qkv(OP, q, k, v, &sh) || check_mask(OP, o->attn_mask, o->is_causal, &sh)) return -1;
    if (!(o->dropout_p >= 0 && o->dropout_p <= 1))
        return dl_error("%s: dropout_p must be in [0, 1], got %g", OP, o->dropout_p);
    if (o->has_scale && !isfinite(o->scale))
        return dl_error("%s: scale must be a finite number, got %g", OP, o->scale);
    dl_tensor *ts[4] = {q, k, v, o->attn_mask};
    if (dl_op_device(OP, 4, ts, dl_cuda_attention && dl_cuda_attention->forward, &dev)) return -1;

    st->scale = o->has_scale ? o->scale : 1 / sqrt((double)sh.E);
    st->is_causal = o->is_causal;
    st->dropout_p = o->dropout_p;
    st->seed = st->offset = 0;
    dl_attn_params p;
    params_of(&sh, st, &p);
    if (o->dropout_p > 0) {
        dl_generator *g = o->gen ? o->gen : dl_default_generator();
        st->seed = p.seed = g->seed;
        st->offset = p.offset = dl_generator_reserve(g, dl_attn_dropout_blocks(&p));
    }

    dl_dtype cdt = compute_dtype(q->dtype, dev);
    dl_tensor *tmp[6] = {dense_full(q, &sh, cdt)};
    tmp[1] = tmp[0] ? dense_full(k, &sh, cdt) : NULL;
    tmp[2] = tmp[1] ? dense_full(v, &sh, cdt) : NULL;
    int64_t shape[DL_MAX_DIMS];
    int nd = full_shape(&sh, sh.L, sh.Ev, shape);
    tmp[3] = tmp[2] ? dl_tensor_empty(nd, shape, cdt, dev) : NULL;
    tmp[4] = tmp[3] ? dl_tensor_empty(nd - 1, shape, lse_dtype(cdt), dev) : NULL;
    int rc = tmp[4] ? mask_desc(o->attn_mask, &sh, cdt, &p.mask, &tmp[5]) : -1;
    if (rc == 0) {
        void *po = dl_op_data(tmp[3]), *pl = dl_op_data(tmp[4]);
        const void *pq = dl_op_data(tmp[0]), *pk = dl_op_data(tmp[1]), *pv = dl_op_data(tmp[2]);
        if (dl_op_is_cuda(dev))
            rc = dl_cuda_attention->forward(po, pl, pq, pk, pv, cdt, &p);
        else if (cdt == DL_DTYPE_F64)
            rc = dl_cpu_attention_forward_f64(po, pl, pq, pk, pv, &p);
        else
            rc = dl_cpu_attention_forward_f32(po, pl, pq, pk, pv, &p);
    }
    if (rc == 0) {
        *out = dl_op_finish_as(tmp[3], q->dtype);
        *lse = tmp[4];
        tmp[3] = tmp[4] = NULL;
        rc = *out ? 0 : -1;
        if (rc) {
            dl_tensor_release(*lse);
            *lse = NULL;
        }
    }
    dl_op_release_all(tmp, 6);
    return rc;
}

/* --- backward ----------------------------------------------------------------------------- */

/* g (consumed), a gradient of shape (batch..., rows, cols), as the gradient
 * of input t: summed over the batch dims t broadcast along, in t's dtype. */
static dl_tensor *grad_as(dl_tensor *g, const dl_tensor *t) {
    if (!g) return NULL;
    dl_tensor *s = dl_sum_to_shape(g, t->ndim, t->shape);
    dl_tensor_release(g);
    return dl_op_finish_as(s, t->dtype);
}

int dl_sdpa_backward(dl_tensor *gout, dl_tensor *q, dl_tensor *k, dl_tensor *v,
                     dl_tensor *attn_mask, dl_tensor *out, dl_tensor *lse, const dl_sdpa_state *st,
                     dl_tensor **dq, dl_tensor **dk, dl_tensor **dv) {
    *dq = *dk = *dv = NULL;
    sdpa_shape sh;
    dl_device dev;
    if (check_qkv(OP_BACKWARD, q, k, v, &sh) ||
        check_mask(OP_BACKWARD, attn_mask, st->is_causal, &sh))
        return -1;
    if (!gout || !out || !lse) return dl_error("%s: grad, out and lse are required", OP_BACKWARD);
    int64_t shape[DL_MAX_DIMS];
    int nd = full_shape(&sh, sh.L, sh.Ev, shape);
    bool ok = gout->ndim == nd && out->ndim == nd && lse->ndim == nd - 1;
    for (int i = 0; ok && i < nd; i++) ok = gout->shape[i] == shape[i] && out->shape[i] == shape[i];
    for (int i = 0; ok && i < nd - 1; i++) ok = lse->shape[i] == shape[i];
    if (!ok) {
        char b1[128], b2[128];
        return dl_error("%s: grad of shape %s does not match the output's %s (or out/lse differ)",
                        OP_BACKWARD, dl_op_shape_str(gout, b1, sizeof b1),
                        dl_shape_str(nd, shape, b2, sizeof b2));
    }
    dl_tensor *ts[7] = {gout, q, k, v, attn_mask, out, lse};
    if (dl_op_device(OP_BACKWARD, 7, ts, dl_cuda_attention && dl_cuda_attention->backward, &dev))
        return -1;
    dl_dtype cdt = compute_dtype(q->dtype, dev);
    dl_attn_params p;
    params_of(&sh, st, &p);

    /* dense operands, then the three gradients */
    dl_tensor *t[10] = {dense_full(q, &sh, cdt)};
    t[1] = t[0] ? dense_full(k, &sh, cdt) : NULL;
    t[2] = t[1] ? dense_full(v, &sh, cdt) : NULL;
    t[3] = t[2] ? dl_op_dense(gout, cdt) : NULL;
    t[4] = t[3] ? dl_op_dense(out, cdt) : NULL;
    t[5] = t[4] ? dl_op_dense(lse, lse_dtype(cdt)) : NULL;
    int64_t sq[DL_MAX_DIMS], sk[DL_MAX_DIMS], sv[DL_MAX_DIMS];
    full_shape(&sh, sh.L, sh.E, sq);
    full_shape(&sh, sh.S, sh.E, sk);
    full_shape(&sh, sh.S, sh.Ev, sv);
    t[6] = t[5] ? dl_tensor_empty(nd, sq, cdt, dev) : NULL;
    t[7] = t[6] ? dl_tensor_empty(nd, sk, cdt, dev) : NULL;
    t[8] = t[7] ? dl_tensor_empty(nd, sv, cdt, dev) : NULL;
    int rc = t[8] ? mask_desc(attn_mask, &sh, cdt, &p.mask, &t[9]) : -1;
    if (rc == 0) {
        void *g[3] = {dl_op_data(t[6]), dl_op_data(t[7]), dl_op_data(t[8])};
        const void *a[6];
        for (int i = 0; i < 6; i++) a[i] = dl_op_data(t[i]);
        if (dl_op_is_cuda(dev))
            rc = dl_cuda_attention->backward(g[0], g[1], g[2], a[3], a[0], a[1], a[2], a[4], a[5],
                                             cdt, &p);
        else if (cdt == DL_DTYPE_F64)
            rc = dl_cpu_attention_backward_f64(g[0], g[1], g[2], a[3], a[0], a[1], a[2], a[4], a[5],
                                               &p);
        else
            rc = dl_cpu_attention_backward_f32(g[0], g[1], g[2], a[3], a[0], a[1], a[2], a[4], a[5],
                                               &p);
    }
    if (rc == 0) {
        *dq = grad_as(t[6], q);
        *dk = grad_as(t[7], k);
        *dv = grad_as(t[8], v);
        t[6] = t[7] = t[8] = NULL;
        if (!*dq || !*dk || !*dv) {
            dl_tensor *r[3] = {*dq, *dk, *dv};
            dl_op_release_all(r, 3);
            *dq = *dk = *dv = NULL;
            rc = -1;
        }
    }
    dl_op_release_all(t, 10);
    return rc;
}

/* --- with autograd ----------------------------------------------------------------
 * The node saves q, k, v, the mask (or absent), out and lse; its parameters
 * are the forward's dl_sdpa_state. */

static int sdpa_backward_node(dl_node *n, dl_tensor *const *gout, dl_tensor **gin) {
    const dl_sdpa_state *st = n->ctx;
    dl_tensor *s[6];
    for (int i = 0; i < 6; i++) { /* slot 3, the mask, may be absent */
        s[i] = i == 3 && !n->saved[i].t ? NULL : dl_node_saved(n, i);
        if (!s[i] && (i != 3 || n->saved[i].t)) return -1;
    }
    if (!gout[0]) return 0;
    dl_tensor *g[3];
    if (dl_sdpa_backward(gout[0], s[0], s[1], s[2], s[3], s[4], s[5], st, &g[0], &g[1], &g[2]))
        return -1;
    for (int i = 0; i < 3; i++) {
        if (dl_node_needs_grad(n, i))
            gin[i] = g[i];
        else
            dl_tensor_release(g[i]);
    }
    return 0;
}

dl_tensor *dl_scaled_dot_product_attention(dl_tensor *q, dl_tensor *k, dl_tensor *v,
                                           const dl_sdpa_options *o) {
    dl_tensor *m = o->attn_mask;
    if (m && m->requires_grad && dl_grad_enabled())
        return dl_error("%s: an attn_mask that requires grad is not supported (no gradient "
                        "flows into the mask; detach it)",
                        OP),
               NULL;
    dl_tensor *out, *lse;
    dl_sdpa_state st;
    if (dl_sdpa_forward(q, k, v, o, &out, &lse, &st)) return NULL;
    dl_tensor *in[3] = {q, k, v}, *save[6] = {q, k, v, m, out, lse};
    out = dl_op_record(out, "ScaledDotProductAttentionBackward", sdpa_backward_node, 3, in, 6, save,
                       &st, sizeof st);
    dl_tensor_release(lse);
    return out;
}
