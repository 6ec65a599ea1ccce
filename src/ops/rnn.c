/* ops/rnn.c - the rnn family (see rnn.h): one LSTM or GRU layer in one
 * direction, forward and backward through time, on the CPU (cpu/rnn.c) or
 * CUDA (cuda/rnn.cu); the autograd node at the end.
 *
 * Every operand is checked against the sizes the input and weight_hh fix
 * (B from the batch, H from weight_hh), converted to the compute dtype
 * (float64 stays, the rest compute in float32) and made dense; absent
 * initial states become zeros.  A padded batch is the packed layout with
 * every batch size B, so the kernels see one layout.  Results come back in
 * the input's dtype; the workspace stays in the compute dtype. */
#include "ops/rnn.h"
#include "autograd/autograd.h"
#include "cpu/rnn.h"
#include "ops/op_util.h"

#include <stdlib.h>

/* --- checks --------------------------------------------------------------------------------- */

/* The sizes of one call, checked. */
typedef struct {
    const char *op;
    dl_rnn_shape s;
    int64_t *sizes; /* s.batch_sizes, owned (malloc) */
    dl_dtype cdt;
    dl_device dev;
} plan;

static void plan_free(plan *p) {
    free(p->sizes);
    p->sizes = NULL;
}

static int check_dims(const char *op, const char *what, const dl_tensor *t, int ndim,
                      const int64_t *want) {
    if (!t) return 0;
    bool ok = t->ndim == ndim;
    for (int d = 0; ok && d < ndim; d++) ok = t->shape[d] == want[d];
    if (ok) return 0;
    char a[128], b[128];
    return dl_error("%s: %s has shape %s, expected %s", op, what, dl_op_shape_str(t, a, sizeof a),
                    dl_shape_str(ndim, want, b, sizeof b));
}

static int check_dtype(const char *op, const char *what, const dl_tensor *t, dl_dtype dt) {
    if (!t || t->dtype == dt) return 0;
    return dl_error("%s: %s is %s but the input is %s", op, what, dl_dtype_name(t->dtype),
                    dl_dtype_name(dt));
}

/* The batch sizes: a packed batch's, checked against its rows, or T times B. */
static int plan_sizes(plan *p, const dl_tensor *x, const dl_tensor *bs) {
    const char *op = p->op;
    char b[128];
    if (!bs) {
        if (x->ndim != 3)
            return dl_error("%s: input must be 3-D (seq_len, batch, input_size), got shape %s", op,
                            dl_op_shape_str(x, b, sizeof b));
        p->s.T = x->shape[0];
        p->s.B = x->shape[1];
        if (p->s.T < 1) return dl_error("%s: expected sequence length to be larger than 0", op);
    } else {
        if (bs->dtype != DL_DTYPE_I64 || bs->ndim != 1 || bs->shape[0] < 1 ||
            dl_tensor_device(bs).type != DL_DEVICE_CPU)
            return dl_error("%s: batch_sizes must be a non-empty 1-D int64 CPU tensor, got %s "
                            "of shape %s",
                            op, dl_dtype_name(bs->dtype), dl_op_shape_str(bs, b, sizeof b));
        if (x->ndim != 2)
            return dl_error("%s: packed input must be 2-D (rows, input_size), got shape %s", op,
                            dl_op_shape_str(x, b, sizeof b));
        p->s.T = bs->shape[0];
    }
    p->sizes = malloc(sizeof(int64_t) * (size_t)p->s.T);
    if (!p->sizes) return dl_error("%s: out of memory", op);
    p->s.batch_sizes = p->sizes;
    if (!bs) {
        for (int64_t t = 0; t < p->s.T; t++) p->sizes[t] = p->s.B;
        p->s.N = p->s.T * p->s.B;
        return 0;
    }
    const int64_t *v = dl_tensor_data_ptr(bs);
    int64_t sum = 0;
    for (int64_t t = 0; t < p->s.T; t++) {
        int64_t n = v[t * bs->strides[0]];
        if (n < 1 || (t > 0 && n > p->sizes[t - 1]))
            return dl_error("%s: batch_sizes must be positive and nonincreasing, got %lld at "
                            "step %lld after %lld",
                            op, (long long)n, (long long)t, (long long)(t ? p->sizes[t - 1] : 0));
        p->sizes[t] = n;
        sum += n;
    }
    if (sum != x->shape[0])
        return dl_error("%s: batch_sizes sum to %lld but the packed input has %lld rows", op,
                        (long long)sum, (long long)x->shape[0]);
    p->s.B = p->sizes[0];
    p->s.N = sum;
    return 0;
}

/* Checks a's operands and fills p (free it with plan_free, also on failure). */
static int plan_make(plan *p, const dl_rnn_args *a) {
    *p = (plan){.op = a->mode == DL_RNN_GRU ? "gru" : "lstm"};
    const char *op = p->op;
    char b[128];
    if (a->mode != DL_RNN_LSTM && a->mode != DL_RNN_GRU)
        return dl_error("rnn: unknown mode %d", (int)a->mode);
    if (!a->x || !a->w_ih || !a->w_hh)
        return dl_error("%s: input, weight_ih and weight_hh are required", op);
    if (a->c0 && a->mode != DL_RNN_LSTM) return dl_error("%s: a GRU has no cell state c0", op);
    dl_tensor *ts[7] = {a->x, a->h0, a->c0, a->w_ih, a->w_hh, a->b_ih, a->b_hh};
    if (dl_op_need_floating(op, "input", a->x) ||
        dl_op_device(op, 7, ts, dl_cuda_rnn != NULL, &p->dev) ||
        plan_sizes(p, a->x, a->batch_sizes))
        return -1;
    const char *names[7] = {"input", "h0", "c0", "weight_ih", "weight_hh", "bias_ih", "bias_hh"};
    for (int i = 1; i < 7; i++)
        if (check_dtype(op, names[i], ts[i], a->x->dtype)) return -1;
    const int64_t G = dl_rnn_gates(a->mode);
    if (a->w_hh->ndim != 2 || a->w_hh->shape[1] < 1 || a->w_hh->shape[0] != G * a->w_hh->shape[1])
        return dl_error("%s: weight_hh must have shape [%lld * hidden_size, hidden_size], got %s",
                        op, (long long)G, dl_op_shape_str(a->w_hh, b, sizeof b));
    p->s.mode = a->mode;
    p->s.reverse = a->reverse;
    p->s.H = a->w_hh->shape[1];
    p->s.I = a->x->shape[a->x->ndim - 1];
    const int64_t GH = G * p->s.H, wih[2] = {GH, p->s.I}, state[2] = {p->s.B, p->s.H};
    if (check_dims(op, "weight_ih", a->w_ih, 2, wih) ||
        check_dims(op, "bias_ih", a->b_ih, 1, &GH) || check_dims(op, "bias_hh", a->b_hh, 1, &GH) ||
        check_dims(op, "h0", a->h0, 2, state) || check_dims(op, "c0", a->c0, 2, state))
        return -1;
    const int64_t lim[3] = {p->s.N, p->s.I, GH};
    if (dl_op_check_limit(op, "size", lim, 3)) return -1;
    p->cdt = dl_op_float_dtype(a->x->dtype);
    return 0;
}

/* t dense in the compute dtype, or zeros of (B, H) for an absent state. */
static dl_tensor *dense_state(const plan *p, dl_tensor *t) {
    if (t) return dl_op_dense(t, p->cdt);
    int64_t sh[2] = {p->s.B, p->s.H};
    return dl_tensor_zeros(2, sh, p->cdt, p->dev);
}

/* --- forward ---------------------------------------------------------------------------------- */

/* Runs a backend's entry, or refuses when this build lacks it. */
#define CUDA_RUN(op, fn, ...) (dl_cuda_rnn->fn ? dl_cuda_rnn->fn(__VA_ARGS__) : dl_cuda_missing(op))

int dl_rnn_forward(const dl_rnn_args *a, dl_tensor **y, dl_tensor **hn, dl_tensor **cn,
                   dl_tensor **ws) {
    plan p;
    if (plan_make(&p, a)) {
        plan_free(&p);
        return -1;
    }
    const bool lstm = a->mode == DL_RNN_LSTM;
    const int64_t state[2] = {p.s.B, p.s.H}, wsn = dl_rnn_ws_numel(&p.s);
    int64_t ysh[DL_MAX_DIMS];
    for (int d = 0; d < a->x->ndim; d++) ysh[d] = a->x->shape[d];
    ysh[a->x->ndim - 1] = p.s.H;
    /* operands 0..6 as in dl_rnn_in, results 7..10 as in dl_rnn_out */
    dl_tensor *t[11] = {dl_op_dense(a->x, p.cdt),
                        dense_state(&p, a->h0),
                        lstm ? dense_state(&p, a->c0) : NULL,
                        dl_op_dense(a->w_ih, p.cdt),
                        dl_op_dense(a->w_hh, p.cdt),
                        dl_op_dense(a->b_ih, p.cdt),
                        dl_op_dense(a->b_hh, p.cdt),
                        dl_tensor_empty(a->x->ndim, ysh, p.cdt, p.dev),
                        dl_tensor_empty(2, state, p.cdt, p.dev),
                        lstm ? dl_tensor_empty(2, state, p.cdt, p.dev) : NULL,
                        dl_tensor_empty(1, &wsn, p.cdt, p.dev)};
    int rc = -1;
    if (!t[0] || !t[1] || (lstm && !t[2]) || !t[3] || !t[4] || (a->b_ih && !t[5]) ||
        (a->b_hh && !t[6]) || !t[7] || !t[8] || (lstm && !t[9]) || !t[10])
        goto done;
    dl_rnn_in in = {dl_op_data(t[0]), dl_op_data(t[1]), dl_op_data(t[2]), dl_op_data(t[3]),
                    dl_op_data(t[4]), dl_op_data(t[5]), dl_op_data(t[6])};
    dl_rnn_out out = {dl_op_data(t[7]), dl_op_data(t[8]), dl_op_data(t[9]), dl_op_data(t[10])};
    if (p.s.N == 0) /* an empty batch: empty results */
        rc = 0;
    else if (dl_op_is_cuda(p.dev))
        rc = CUDA_RUN(p.op, forward, p.cdt, &p.s, &in, &out);
    else
        rc = dl_cpu_rnn_forward(p.cdt, &p.s, &in, &out);
    if (rc) goto done;
    dl_dtype dt = a->x->dtype;
    *y = dl_op_finish_as(t[7], dt);
    *hn = dl_op_finish_as(t[8], dt);
    *cn = dl_op_finish_as(t[9], dt);
    *ws = t[10];
    t[7] = t[8] = t[9] = t[10] = NULL;
    if (!*y || !*hn || (lstm && !*cn)) {
        dl_tensor *r[4] = {*y, *hn, *cn, *ws};
        dl_op_release_all(r, 4);
        *y = *hn = *cn = *ws = NULL;
        rc = -1;
    }
done:
    dl_op_release_all(t, 11);
    plan_free(&p);
    return rc;
}

/* --- backward --------------------------------------------------------------------------------- */

int dl_rnn_backward(const dl_rnn_args *a, dl_tensor *y, dl_tensor *ws, dl_tensor *dy,
                    dl_tensor *dhn, dl_tensor *dcn, const bool need[DL_RNN_NGRADS],
                    dl_tensor *grads[DL_RNN_NGRADS]) {
    plan p;
    if (plan_make(&p, a)) {
        plan_free(&p);
        return -1;
    }
    const char *op = p.op;
    const bool lstm = a->mode == DL_RNN_LSTM;
    const int64_t H = p.s.H, GH = dl_rnn_gates(a->mode) * H, state[2] = {p.s.B, H},
                  wsn = dl_rnn_ws_numel(&p.s);
    int64_t ysh[DL_MAX_DIMS];
    for (int d = 0; d < a->x->ndim; d++) ysh[d] = a->x->shape[d];
    ysh[a->x->ndim - 1] = H;
    dl_tensor *more[5] = {y, ws, dy, dhn, dcn};
    dl_device dev;
    int rc = -1;
    if (!y || !ws) {
        dl_error("%s_backward: the forward's output and workspace are required", op);
        goto fail;
    }
    if (check_dims(op, "output", y, a->x->ndim, ysh) || check_dims(op, "workspace", ws, 1, &wsn) ||
        check_dims(op, "output gradient", dy, a->x->ndim, ysh) ||
        check_dims(op, "h_n gradient", dhn, 2, state) ||
        check_dims(op, "c_n gradient", lstm ? dcn : NULL, 2, state) ||
        dl_common_device(op, 5, more, &dev))
        goto fail;
    /* the gradients' shapes, in dl_rnn_grad's order */
    const int64_t wih[2] = {GH, p.s.I}, whh[2] = {GH, H};
    const int nd[DL_RNN_NGRADS] = {a->x->ndim, 2, 2, 2, 2, 1, 1};
    const int64_t *shapes[DL_RNN_NGRADS] = {a->x->shape, state, state, wih, whh, &GH, &GH};
    dl_tensor *ops[DL_RNN_NGRADS] = {a->x, a->h0, a->c0, a->w_ih, a->w_hh, a->b_ih, a->b_hh};
    /* 0..6 the gradients, 7..16 x, h0, c0, w_ih, w_hh, y, ws, dy, dhn, dcn */
    dl_tensor *t[17] = {NULL};
    bool want[DL_RNN_NGRADS];
    for (int i = 0; i < DL_RNN_NGRADS; i++) {
        want[i] = need[i] && (i != DL_RNN_GC0 || lstm);
        if (want[i] &&
            !(t[i] = (p.s.N ? dl_tensor_empty : dl_tensor_zeros)(nd[i], shapes[i], p.cdt, p.dev)))
            goto done;
    }
    t[7] = dl_op_dense(a->x, p.cdt);
    t[8] = dense_state(&p, a->h0);
    t[9] = lstm ? dense_state(&p, a->c0) : NULL;
    t[10] = dl_op_dense(a->w_ih, p.cdt);
    t[11] = dl_op_dense(a->w_hh, p.cdt);
    t[12] = dl_op_dense_on(y, p.cdt, p.dev);
    t[13] = dl_op_dense_on(ws, p.cdt, p.dev);
    t[14] = dl_op_dense_on(dy, p.cdt, p.dev);
    t[15] = dl_op_dense_on(dhn, p.cdt, p.dev);
    t[16] = lstm ? dl_op_dense_on(dcn, p.cdt, p.dev) : NULL;
    if (!t[7] || !t[8] || (lstm && !t[9]) || !t[10] || !t[11] || !t[12] || !t[13] ||
        (dy && !t[14]) || (dhn && !t[15]) || (lstm && dcn && !t[16]))
        goto done;
    dl_rnn_in in = {dl_op_data(t[7]),
                    dl_op_data(t[8]),
                    dl_op_data(t[9]),
                    dl_op_data(t[10]),
                    dl_op_data(t[11]),
                    NULL,
                    NULL};
    dl_rnn_saved sv = {dl_op_data(t[12]), dl_op_data(t[13]), dl_op_data(t[14]), dl_op_data(t[15]),
                       dl_op_data(t[16])};
    dl_rnn_grad g = {dl_op_data(t[0]), dl_op_data(t[1]), dl_op_data(t[2]), dl_op_data(t[3]),
                     dl_op_data(t[4]), dl_op_data(t[5]), dl_op_data(t[6])};
    if (p.s.N == 0)
        rc = 0;
    else if (dl_op_is_cuda(p.dev))
        rc = CUDA_RUN(op, backward, p.cdt, &p.s, &in, &sv, &g);
    else
        rc = dl_cpu_rnn_backward(p.cdt, &p.s, &in, &sv, &g);
    if (rc) goto done;
    for (int i = 0; i < DL_RNN_NGRADS; i++) {
        grads[i] = want[i] ? dl_op_finish_as(t[i], ops[i] ? ops[i]->dtype : a->x->dtype) : NULL;
        t[i] = NULL;
        if (want[i] && !grads[i]) rc = -1;
    }
    if (rc) dl_op_release_all(grads, DL_RNN_NGRADS);
done:
    dl_op_release_all(t, 17);
fail:
    plan_free(&p);
    return rc;
}

/* --- with autograd ------------------------------------------------------------------------------
 * One node per layer and direction, outputs y, hn (and cn); saved: x,
 * batch_sizes, h0, c0, w_ih, w_hh, y, ws.  The biases' values are not needed
 * by the backward. */

typedef struct {
    dl_rnn_mode mode;
    bool reverse;
} rnn_ctx;

/* Saved slot i, NULL when nothing was saved there; *rc = -1 when the saved
 * tensor can no longer be used (the error is set). */
static dl_tensor *saved_or_null(dl_node *n, int i, int *rc) {
    if (!n->saved[i].t) return NULL;
    dl_tensor *t = dl_node_saved(n, i);
    if (!t) *rc = -1;
    return t;
}

static int rnn_node_backward(dl_node *n, dl_tensor *const *gout, dl_tensor **gin) {
    const rnn_ctx *c = n->ctx;
    int rc = 0;
    dl_rnn_args a = {.mode = c->mode, .reverse = c->reverse};
    a.x = dl_node_saved(n, 0);
    if (!a.x) return -1;
    a.batch_sizes = saved_or_null(n, 1, &rc);
    a.h0 = saved_or_null(n, 2, &rc);
    a.c0 = saved_or_null(n, 3, &rc);
    a.w_ih = saved_or_null(n, 4, &rc);
    a.w_hh = saved_or_null(n, 5, &rc);
    dl_tensor *y = saved_or_null(n, 6, &rc), *ws = saved_or_null(n, 7, &rc);
    if (rc) return -1;
    bool need[DL_RNN_NGRADS];
    for (int i = 0; i < DL_RNN_NGRADS; i++) need[i] = dl_node_needs_grad(n, i);
    return dl_rnn_backward(&a, y, ws, gout[0], gout[1], n->n_outputs > 2 ? gout[2] : NULL, need,
                           gin);
}

int dl_rnn(const dl_rnn_args *a, dl_tensor **y, dl_tensor **hn, dl_tensor **cn) {
    dl_tensor *ws = NULL;
    if (dl_rnn_forward(a, y, hn, cn, &ws)) return -1;
    dl_tensor *in[DL_RNN_NGRADS] = {a->x, a->h0, a->c0, a->w_ih, a->w_hh, a->b_ih, a->b_hh};
    if (!dl_autograd_needed(DL_RNN_NGRADS, in)) {
        dl_tensor_release(ws);
        return 0;
    }
    const bool lstm = a->mode == DL_RNN_LSTM;
    dl_tensor *save[8] = {a->x, a->batch_sizes, a->h0, a->c0, a->w_ih, a->w_hh, *y, ws};
    rnn_ctx c = {a->mode, a->reverse};
    dl_node *n = dl_op_node_new(lstm ? "LstmBackward" : "GruBackward", rnn_node_backward,
                                DL_RNN_NGRADS, in, lstm ? 3 : 2, 8, save, &c, sizeof c);
    dl_tensor_release(ws);
    if (!n) {
        dl_tensor *r[3] = {*y, *hn, *cn};
        dl_op_release_all(r, 3);
        *y = *hn = *cn = NULL;
        return -1;
    }
    dl_node_set_output(n, 0, *y);
    dl_node_set_output(n, 1, *hn);
    if (lstm) dl_node_set_output(n, 2, *cn);
    dl_node_release(n);
    return 0;
}
