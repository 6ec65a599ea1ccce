/* cpu/rnn.c - CPU kernels of the rnn family (see rnn.h): one LSTM or GRU
 * layer in one direction, forward and backward through time.
 *
 * Forward: one GEMM projects every row's input (x @ W_ih^T + b_ih, all time
 * steps at once) into the gate block of the workspace; then per step one
 * GEMM of the active rows' hidden states (h @ W_hh^T + b_hh; float32 on a
 * copy of W_hh packed once per call, see "step GEMMs") and a fused
 * row loop that adds the two, applies the gates' functions (SLEEF vector
 * sigmoid and tanh from cpu/vecmath.c, libm without AVX2), updates the state
 * in place in hn/cn and writes y.  The activated gates (and the LSTM's cell
 * state, the GRU's W_hn h + b_hn) stay in the workspace for the backward.
 *
 * Backward, steps in the opposite order: a row loop turns the incoming
 * gradient (dy plus what flowed back from the following step) into the
 * gradients of the gates' pre-activations, kept for all rows; one GEMM per
 * step carries them back to the previous hidden state.  After the loop,
 * four big GEMMs give dx, dW_ih, dW_hh and (times a row of ones) the bias
 * gradients.
 *
 * Invariants: within a step every row is independent, so rows run in
 * parallel and the results do not depend on the thread count (the GEMMs
 * aside, which are oneDNN's for float32).  The states of sequences not
 * active at a step are left untouched, which is what makes each sequence's
 * final state the one after its last real step. */
#include "cpu/rnn.h"
#include "core/error.h"
#include "core/parallel.h"
#include "core/storage.h"
#include "cpu/dnnl_util.h"
#include "cpu/gemm.h"
#include "cpu/vecmath.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* --- helpers ----------------------------------------------------------------------------- */

/* out (M, N) = A (M, K) @ B (K, N) + beta * out, A and B given by their row
 * and column strides; K == 0 gives beta * out. */
static int mm(dl_dtype dt, int64_t M, int64_t N, int64_t K, const void *a, int64_t ars, int64_t acs,
              const void *b, int64_t brs, int64_t bcs, double beta, void *out) {
    if (M == 0 || N == 0) return 0;
    if (K == 0) {
        if (beta == 0) memset(out, 0, (size_t)(M * N) * dl_dtype_size(dt));
        return 0; /* beta is 0 or 1 here */
    }
    dl_gemm_matrix A = {a, NULL, ars, acs}, B = {b, NULL, brs, bcs};
    return dl_cpu_gemm(dt, 1, M, N, K, 1.0, &A, &B, beta, out);
}

/* rows (n, len) with every row a copy of v (len elements of isz bytes) */
static void fill_rows(void *rows, const void *v, int64_t n, int64_t len, size_t isz) {
    for (int64_t r = 0; r < n; r++) memcpy((char *)rows + (size_t)(r * len) * isz, v, len * isz);
}

/* Scratch buffers of one call, freed together. */
enum { MAX_SCRATCH = 8 };
typedef struct {
    void *p[MAX_SCRATCH];
    size_t n[MAX_SCRATCH];
    int used;
} scratch;

static void *scratch_get(scratch *s, size_t bytes) {
    void *p = dl_cpu_alloc(bytes ? bytes : 1);
    if (!p) {
        dl_error("rnn: out of memory (%zu bytes of scratch)", bytes);
        return NULL;
    }
    s->p[s->used] = p;
    s->n[s->used++] = bytes ? bytes : 1;
    return p;
}

static void scratch_free(scratch *s) {
    for (int i = 0; i < s->used; i++) dl_cpu_free(s->p[i], s->n[i]);
    s->used = 0;
}

/* out = op(in) for n elements, op sigmoid or tanh (out may be in) */
static void act(dl_dtype dt, dl_unary_op op, void *out, const void *in, int64_t n) {
    size_t isz = dl_dtype_size(dt);
    char *data[2] = {out, (char *)in};
    int64_t st[2] = {(int64_t)isz, (int64_t)isz};
    if (dt == DL_DTYPE_F32) {
        if (dl_cpu_vec_unary_f32(op, data, st, n)) return;
        float *o = out;
        const float *x = in;
        for (int64_t i = 0; i < n; i++)
            o[i] = op == DL_UNARY_TANH ? tanhf(x[i]) : 1.0f / (1.0f + expf(-x[i]));
    } else {
        if (dl_cpu_vec_unary_f64(op, data, st, n)) return;
        double *o = out;
        const double *x = in;
        for (int64_t i = 0; i < n; i++)
            o[i] = op == DL_UNARY_TANH ? tanh(x[i]) : 1.0 / (1.0 + exp(-x[i]));
    }
}

/* --- step GEMMs on weights packed once (float32) ---------------------------------------------
 * Each step multiplies its active rows by W_hh: h @ W_hh^T + b_hh forward,
 * dG @ W_hh (+ dh, the GRU's direct part) backward.  sgemm would repack
 * W_hh at every step; a oneDNN matmul whose weights are reordered once per
 * call into the format it prefers does not (one thread, 512 x 2048 weights:
 * 20% faster at 64 rows, 3x at 16).  The primitives are cached by shape;
 * the rows of a packed batch shrink from step to step, so each row count
 * gets its own primitive, all reading the one packed copy (built for the
 * full batch's format).  Small steps (below STEP_MM_MIN_WORK multiply-adds)
 * keep to sgemm, which runs them on one thread: the matmul spreads even
 * tiny products over every thread, and waking them costs more than the
 * product (on a busy machine, milliseconds per step).
 * DLUA_RNN_STEP_GEMM=sgemm in the environment turns the packed path off
 * (plain GEMMs every step), for A/B measurements. */
#define STEP_MM_MIN_WORK ((int64_t)1 << 18)

typedef struct {
    bool on;                /* false: the plain GEMMs of mm() */
    int64_t M0, K, N;       /* out (M, N) = a (M, K) @ W, M <= M0 */
    bool trans, bias, sum;  /* W given as (N, K) row-major; a bias row added; out added to */
    dnnl_memory_desc_t wmd; /* the packed copy's format */
    void *w;                /* the packed copy */
    size_t wbytes;
} step_mm;

typedef struct {
    const step_mm *p;
    int64_t M;
} step_mm_ctx;

static void step_mm_key(char *key, const step_mm *p, int64_t M) {
    snprintf(key, DL_DNNL_KEY_LEN, "rnn_step_mm %lld of %lld,%lld,%lld t%d b%d s%d", (long long)M,
             (long long)p->M0, (long long)p->K, (long long)p->N, p->trans, p->bias, p->sum);
}

/* slot 0: the matmul for M rows (the full batch's picks the weights' format);
 * slot 1 (full batch only): the reorder of the weights into it */
static int step_mm_build(dl_dnnl_entry *e, const void *vctx) {
    const step_mm_ctx *c = vctx;
    const step_mm *p = c->p;
    const bool first = c->M == p->M0;
    const int64_t sd[2] = {c->M, p->K}, wd[2] = {p->K, p->N}, bd[2] = {1, p->N},
                  dd[2] = {c->M, p->N};
    dnnl_memory_desc_t src, w, bias, dst;
    if (dl_dnnl_md(&src, 2, sd, dnnl_ab) || dl_dnnl_md(&bias, 2, bd, dnnl_ab) ||
        dl_dnnl_md(&dst, 2, dd, dnnl_ab) || dl_dnnl_md(&w, 2, wd, dnnl_format_tag_any))
        return -1;
    dnnl_matmul_desc_t md;
    if (DL_DNNL(
            dnnl_matmul_desc_init(&md, &src, first ? &w : &p->wmd, p->bias ? &bias : NULL, &dst)) ||
        dl_dnnl_entry_add_post(e, 0, &md, NULL, 1, p->sum, 0))
        return -1;
    if (!first) return 0;
    dnnl_memory_desc_t user;
    return dl_dnnl_md(&user, 2, wd, p->trans ? dnnl_ba : dnnl_ab) ||
           dl_dnnl_entry_add_reorder(
               e, 1, &user, dnnl_primitive_desc_query_md(e->pd[0], dnnl_query_weights_md, 0));
}

/* Packs w for step GEMMs of up to M0 rows; p->on false (and 0) when the
 * plain GEMMs are to run instead (float64, small steps, switched off, or no
 * matmul primitive for the shape). */
static int step_mm_prepare(step_mm *p, dl_dtype dt, int64_t M0, int64_t K, int64_t N, bool trans,
                           bool bias, bool sum, const void *w) {
    const char *env = getenv("DLUA_RNN_STEP_GEMM");
    *p = (step_mm){.M0 = M0, .K = K, .N = N, .trans = trans, .bias = bias, .sum = sum};
    if (dt != DL_DTYPE_F32 || M0 < 1 || K < 1 || M0 * K * N < STEP_MM_MIN_WORK ||
        (env && strcmp(env, "sgemm") == 0))
        return 0;
    char key[DL_DNNL_KEY_LEN];
    step_mm_key(key, p, M0);
    step_mm_ctx c = {p, M0};
    dl_dnnl_entry *e = dl_dnnl_cache_get(key, step_mm_build, &c);
    if (!e) { /* no such matmul in this oneDNN: the plain GEMMs run */
        dl_clear_error();
        return 0;
    }
    p->wmd = *dnnl_primitive_desc_query_md(e->pd[0], dnnl_query_weights_md, 0);
    p->wbytes = dl_dnnl_md_size(&p->wmd);
    p->w = dl_dnnl_alloc(p->wbytes, "rnn");
    dnnl_memory_desc_t user;
    const int64_t wd[2] = {K, N};
    int rc = !p->w || dl_dnnl_md(&user, 2, wd, trans ? dnnl_ba : dnnl_ab) ||
             dl_dnnl_reorder(e->prim[1], &user, w, &p->wmd, p->w);
    dl_dnnl_cache_put(e);
    p->on = rc == 0;
    return rc ? -1 : 0;
}

static void step_mm_free(step_mm *p) {
    if (p->w) dl_cpu_free(p->w, p->wbytes);
    p->w = NULL;
}

/* out (M, N) = a (M, K) @ W (+ bias) (+ out) on the packed copy. */
static int step_mm_run(const step_mm *p, int64_t M, const void *a, const void *bias, void *out) {
    if (M == 0) return 0;
    char key[DL_DNNL_KEY_LEN];
    step_mm_key(key, p, M);
    step_mm_ctx c = {p, M};
    dl_dnnl_entry *e = dl_dnnl_cache_get(key, step_mm_build, &c);
    if (!e) return -1;
    const int64_t sd[2] = {M, p->K}, bd[2] = {1, p->N}, dd[2] = {M, p->N};
    dnnl_memory_desc_t src, bmd, dst;
    dl_dnnl_args args = {0};
    int rc = -1;
    if (!dl_dnnl_md(&src, 2, sd, dnnl_ab) && !dl_dnnl_md(&bmd, 2, bd, dnnl_ab) &&
        !dl_dnnl_md(&dst, 2, dd, dnnl_ab) &&
        !dl_dnnl_args_add(&args, DNNL_ARG_SRC, &src, (void *)a) &&
        !dl_dnnl_args_add(&args, DNNL_ARG_WEIGHTS, &p->wmd, p->w) &&
        !(p->bias && dl_dnnl_args_add(&args, DNNL_ARG_BIAS, &bmd, (void *)bias)) &&
        !dl_dnnl_args_add(&args, DNNL_ARG_DST, &dst, out))
        rc = dl_dnnl_execute(e->prim[0], &args);
    else
        dl_dnnl_args_free(&args);
    dl_dnnl_cache_put(e);
    return rc;
}

/* The steps in the direction's order: the k-th step run is t. */
static int64_t step_at(const dl_rnn_shape *s, int64_t k) {
    return s->reverse ? s->T - 1 - k : k;
}

/* off[t]: the first row of step t (off has T + 1 entries). */
static void step_offsets(const dl_rnn_shape *s, int64_t *off) {
    off[0] = 0;
    for (int64_t t = 0; t < s->T; t++) off[t + 1] = off[t] + s->batch_sizes[t];
}

/* --- one row of a step ---------------------------------------------------------------------
 * g: the row's gates (x projections in, activated gates out); hw: the row's
 * W_hh h + b_hh; h, c: the sequence's state (in and out); y: the row's
 * output; ex: the row's extra workspace (LSTM c', GRU W_hn h + b_hn).
 * Each row function is written once as DEFINE_<row>(name, T, DT) and
 * instantiated by name for float (DL_DTYPE_F32) and double (DL_DTYPE_F64). */

#define DEFINE_LSTM_FWD_ROW(name, T, DT)                                                           \
    static void name(T *g, const T *hw, T *h, T *c, T *y, T *ex, int64_t H) {                      \
        for (int64_t j = 0; j < 4 * H; j++) g[j] += hw[j];                                         \
        act(DT, DL_UNARY_SIGMOID, g, g, 2 * H);                                                    \
        act(DT, DL_UNARY_TANH, g + 2 * H, g + 2 * H, H);                                           \
        act(DT, DL_UNARY_SIGMOID, g + 3 * H, g + 3 * H, H);                                        \
        for (int64_t j = 0; j < H; j++) {                                                          \
            T v = g[H + j] * c[j] + g[j] * g[2 * H + j];                                           \
            c[j] = v;                                                                              \
            ex[j] = v;                                                                             \
        }                                                                                          \
        act(DT, DL_UNARY_TANH, y, ex, H);                                                          \
        for (int64_t j = 0; j < H; j++) {                                                          \
            T v = g[3 * H + j] * y[j];                                                             \
            y[j] = v;                                                                              \
            h[j] = v;                                                                              \
        }                                                                                          \
    }
DEFINE_LSTM_FWD_ROW(lstm_fwd_row_f32, float, DL_DTYPE_F32)
DEFINE_LSTM_FWD_ROW(lstm_fwd_row_f64, double, DL_DTYPE_F64)

#define DEFINE_GRU_FWD_ROW(name, T, DT)                                                            \
    static void name(T *g, const T *hw, T *h, T *y, T *ex, int64_t H) {                            \
        for (int64_t j = 0; j < 2 * H; j++) g[j] += hw[j];                                         \
        act(DT, DL_UNARY_SIGMOID, g, g, 2 * H);                                                    \
        for (int64_t j = 0; j < H; j++) {                                                          \
            ex[j] = hw[2 * H + j];                                                                 \
            g[2 * H + j] += g[j] * hw[2 * H + j];                                                  \
        }                                                                                          \
        act(DT, DL_UNARY_TANH, g + 2 * H, g + 2 * H, H);                                           \
        for (int64_t j = 0; j < H; j++) {                                                          \
            T n = g[2 * H + j], v = (h[j] - n) * g[H + j] + n;                                     \
            y[j] = v;                                                                              \
            h[j] = v;                                                                              \
        }                                                                                          \
    }
DEFINE_GRU_FWD_ROW(gru_fwd_row_f32, float, DL_DTYPE_F32)
DEFINE_GRU_FWD_ROW(gru_fwd_row_f64, double, DL_DTYPE_F64)

/* Backward of one row.  dh, dc: the gradient reaching the row's state from
 * the following step (the LSTM's dc is replaced by the one for the previous
 * cell state; the GRU's dh by its direct part d * z, which the step's GEMM
 * then adds to); dy: the row's output gradient (NULL: zeros); dg (LSTM) or
 * dgx, dgh (GRU, the input and hidden sides, which differ in n): the
 * gradients of the gates' pre-activations; hp, cp: the previous state. */
#define DEFINE_LSTM_BWD_ROW(name, T, DT)                                                           \
    static void name(T *dg, const T *dh, T *dc, const T *dy, const T *g, const T *ex, const T *cp, \
                     int64_t H) {                                                                  \
        T *tc = dg + 3 * H; /* tanh(c') first, then the o gradient over it */                      \
        act(DT, DL_UNARY_TANH, tc, ex, H);                                                         \
        for (int64_t j = 0; j < H; j++) {                                                          \
            T i = g[j], f = g[H + j], gg = g[2 * H + j], o = g[3 * H + j], t = tc[j];              \
            T d = dy ? dh[j] + dy[j] : dh[j];                                                      \
            T dct = dc[j] + d * o * (1 - t * t);                                                   \
            dg[j] = dct * gg * i * (1 - i);                                                        \
            dg[H + j] = dct * cp[j] * f * (1 - f);                                                 \
            dg[2 * H + j] = dct * i * (1 - gg * gg);                                               \
            dg[3 * H + j] = d * t * o * (1 - o);                                                   \
            dc[j] = dct * f;                                                                       \
        }                                                                                          \
    }
DEFINE_LSTM_BWD_ROW(lstm_bwd_row_f32, float, DL_DTYPE_F32)
DEFINE_LSTM_BWD_ROW(lstm_bwd_row_f64, double, DL_DTYPE_F64)

#define DEFINE_GRU_BWD_ROW(name, T)                                                                \
    static void name(T *dgx, T *dgh, T *dh, const T *dy, const T *g, const T *ex, const T *hp,     \
                     int64_t H) {                                                                  \
        for (int64_t j = 0; j < H; j++) {                                                          \
            T r = g[j], z = g[H + j], n = g[2 * H + j];                                            \
            T d = dy ? dh[j] + dy[j] : dh[j];                                                      \
            T dan = d * (1 - z) * (1 - n * n);                                                     \
            T dar = dan * ex[j] * r * (1 - r), daz = d * (hp[j] - n) * z * (1 - z);                \
            dgx[j] = dgh[j] = dar;                                                                 \
            dgx[H + j] = dgh[H + j] = daz;                                                         \
            dgx[2 * H + j] = dan;                                                                  \
            dgh[2 * H + j] = dan * r;                                                              \
            dh[j] = d * z;                                                                         \
        }                                                                                          \
    }
DEFINE_GRU_BWD_ROW(gru_bwd_row_f32, float)
DEFINE_GRU_BWD_ROW(gru_bwd_row_f64, double)

/* --- forward -----------------------------------------------------------------------------------
 */

/* Row b of step t: gates and hw are the step's (bs, G*H) blocks. */
static void fwd_row(dl_dtype dt, const dl_rnn_shape *s, char *gates, const char *hw, char *h,
                    char *c, char *y, char *ex, int64_t b) {
    const int64_t H = s->H, GH = dl_rnn_gates(s->mode) * H;
    const size_t isz = dl_dtype_size(dt), rg = (size_t)(b * GH) * isz, rh = (size_t)(b * H) * isz;
    if (dt == DL_DTYPE_F32) {
        if (s->mode == DL_RNN_LSTM)
            lstm_fwd_row_f32((float *)(gates + rg), (const float *)(hw + rg), (float *)(h + rh),
                             (float *)(c + rh), (float *)(y + rh), (float *)(ex + rh), H);
        else
            gru_fwd_row_f32((float *)(gates + rg), (const float *)(hw + rg), (float *)(h + rh),
                            (float *)(y + rh), (float *)(ex + rh), H);
    } else {
        if (s->mode == DL_RNN_LSTM)
            lstm_fwd_row_f64((double *)(gates + rg), (const double *)(hw + rg), (double *)(h + rh),
                             (double *)(c + rh), (double *)(y + rh), (double *)(ex + rh), H);
        else
            gru_fwd_row_f64((double *)(gates + rg), (const double *)(hw + rg), (double *)(h + rh),
                            (double *)(y + rh), (double *)(ex + rh), H);
    }
}

int dl_cpu_rnn_forward(dl_dtype dt, const dl_rnn_shape *s, const dl_rnn_in *in,
                       const dl_rnn_out *out) {
    const int64_t H = s->H, GH = dl_rnn_gates(s->mode) * H, N = s->N, B = s->B;
    const size_t isz = dl_dtype_size(dt);
    const int nt = dl_get_num_threads();
    char *gates = out->ws, *extra = gates + (size_t)(N * GH) * isz;
    scratch sc = {0};
    step_mm wh = {0};
    int64_t *off = scratch_get(&sc, sizeof(int64_t) * (size_t)(s->T + 1));
    char *hw = off ? scratch_get(&sc, (size_t)(B * GH) * isz) : NULL;
    if (!hw || step_mm_prepare(&wh, dt, B, H, GH, true, in->b_hh != NULL, false, in->w_hh))
        goto fail;
    step_offsets(s, off);

    /* every step's input projections at once: gates = b_ih + x @ W_ih^T */
    if (in->b_ih) fill_rows(gates, in->b_ih, N, GH, isz);
    if (mm(dt, N, GH, s->I, in->x, s->I, 1, in->w_ih, 1, s->I, in->b_ih ? 1 : 0, gates)) goto fail;
    memcpy(out->hn, in->h0, (size_t)(B * H) * isz);
    if (s->mode == DL_RNN_LSTM) memcpy(out->cn, in->c0, (size_t)(B * H) * isz);

    for (int64_t k = 0; k < s->T; k++) {
        const int64_t t = step_at(s, k), bs = s->batch_sizes[t];
        /* hw = b_hh + h @ W_hh^T for the active rows */
        if (wh.on) {
            if (step_mm_run(&wh, bs, out->hn, in->b_hh, hw)) goto fail;
        } else {
            if (in->b_hh) fill_rows(hw, in->b_hh, bs, GH, isz);
            if (mm(dt, bs, GH, H, out->hn, H, 1, in->w_hh, 1, H, in->b_hh ? 1 : 0, hw)) goto fail;
        }
        char *g = gates + (size_t)(off[t] * GH) * isz, *y = (char *)out->y + off[t] * H * isz,
             *ex = extra + (size_t)(off[t] * H) * isz;
#pragma omp parallel for num_threads(nt) if (bs * GH >= DL_PARALLEL_GRAIN)
        for (int64_t b = 0; b < bs; b++) fwd_row(dt, s, g, hw, out->hn, out->cn, y, ex, b);
    }
    step_mm_free(&wh);
    scratch_free(&sc);
    return 0;
fail:
    step_mm_free(&wh);
    scratch_free(&sc);
    return -1;
}

/* --- backward ----------------------------------------------------------------------------------
 */

/* What the backward's row loop shares. */
typedef struct {
    const dl_rnn_shape *s;
    dl_dtype dt;
    const int64_t *off;
    const char *gates, *extra, *y, *dy, *h0, *c0;
    char *dgx, *dgh, *dh, *dc;
} bwd_ctx;

/* The state before step t (run k-th) of row b: from the step run before it
 * where the sequence was active there, else the initial state. */
static const char *prev_row(const bwd_ctx *c, int64_t k, int64_t b, const char *steps,
                            const char *init) {
    const dl_rnn_shape *s = c->s;
    const size_t isz = dl_dtype_size(c->dt);
    if (k > 0) {
        int64_t p = step_at(s, k - 1);
        if (b < s->batch_sizes[p]) return steps + (size_t)((c->off[p] + b) * s->H) * isz;
    }
    return init + (size_t)(b * s->H) * isz;
}

static void bwd_row(const bwd_ctx *c, int64_t k, int64_t b) {
    const dl_rnn_shape *s = c->s;
    const int64_t H = s->H, GH = dl_rnn_gates(s->mode) * H, r = c->off[step_at(s, k)] + b;
    const size_t isz = dl_dtype_size(c->dt), rg = (size_t)(r * GH) * isz,
                 rh = (size_t)(r * H) * isz, bh = (size_t)(b * H) * isz;
    const void *dy = c->dy ? c->dy + rh : NULL;
    if (s->mode == DL_RNN_LSTM) {
        const char *cp = prev_row(c, k, b, c->extra, c->c0);
        if (c->dt == DL_DTYPE_F32)
            lstm_bwd_row_f32((float *)(c->dgx + rg), (const float *)(c->dh + bh),
                             (float *)(c->dc + bh), dy, (const float *)(c->gates + rg),
                             (const float *)(c->extra + rh), (const float *)cp, H);
        else
            lstm_bwd_row_f64((double *)(c->dgx + rg), (const double *)(c->dh + bh),
                             (double *)(c->dc + bh), dy, (const double *)(c->gates + rg),
                             (const double *)(c->extra + rh), (const double *)cp, H);
    } else {
        const char *hp = prev_row(c, k, b, c->y, c->h0);
        if (c->dt == DL_DTYPE_F32)
            gru_bwd_row_f32((float *)(c->dgx + rg), (float *)(c->dgh + rg), (float *)(c->dh + bh),
                            dy, (const float *)(c->gates + rg), (const float *)(c->extra + rh),
                            (const float *)hp, H);
        else
            gru_bwd_row_f64((double *)(c->dgx + rg), (double *)(c->dgh + rg),
                            (double *)(c->dh + bh), dy, (const double *)(c->gates + rg),
                            (const double *)(c->extra + rh), (const double *)hp, H);
    }
}

/* The weights' and bias's gradients from the pre-activation gradients:
 * dw_hh needs every row's previous hidden state, gathered into hp. */
static int weight_grads(const bwd_ctx *c, const dl_rnn_in *in, const dl_rnn_grad *g, scratch *sc) {
    const dl_rnn_shape *s = c->s;
    const int64_t H = s->H, GH = dl_rnn_gates(s->mode) * H, N = s->N;
    const size_t isz = dl_dtype_size(c->dt);
    const dl_dtype dt = c->dt;
    if (g->dw_ih && mm(dt, GH, s->I, N, c->dgx, 1, GH, in->x, s->I, 1, 0, g->dw_ih)) return -1;
    if (g->dw_hh) {
        char *hp = scratch_get(sc, (size_t)(N * H) * isz);
        if (!hp) return -1;
#pragma omp parallel for num_threads(dl_get_num_threads()) if (N * H >= DL_PARALLEL_GRAIN)
        for (int64_t k = 0; k < s->T; k++) {
            const int64_t t = step_at(s, k);
            for (int64_t b = 0; b < s->batch_sizes[t]; b++)
                memcpy(hp + (size_t)((c->off[t] + b) * H) * isz, prev_row(c, k, b, c->y, c->h0),
                       (size_t)H * isz);
        }
        if (mm(dt, GH, H, N, c->dgh, 1, GH, hp, H, 1, 0, g->dw_hh)) return -1;
    }
    if (g->db_ih || g->db_hh) { /* column sums, as a row of ones times the rows */
        char *ones = scratch_get(sc, (size_t)N * isz);
        if (!ones) return -1;
        for (int64_t i = 0; i < N; i++) dl_store_f64(ones + (size_t)i * isz, dt, 1.0);
        if (g->db_ih && mm(dt, 1, GH, N, ones, N, 1, c->dgx, GH, 1, 0, g->db_ih)) return -1;
        if (g->db_hh && mm(dt, 1, GH, N, ones, N, 1, c->dgh, GH, 1, 0, g->db_hh)) return -1;
    }
    return 0;
}

int dl_cpu_rnn_backward(dl_dtype dt, const dl_rnn_shape *s, const dl_rnn_in *in,
                        const dl_rnn_saved *sv, const dl_rnn_grad *g) {
    const int64_t H = s->H, GH = dl_rnn_gates(s->mode) * H, N = s->N, B = s->B;
    const size_t isz = dl_dtype_size(dt), state = (size_t)(B * H) * isz;
    const bool lstm = s->mode == DL_RNN_LSTM;
    const int nt = dl_get_num_threads();
    scratch sc = {0};
    step_mm wh = {0};
    bwd_ctx c = {.s = s,
                 .dt = dt,
                 .gates = sv->ws,
                 .extra = (const char *)sv->ws + (size_t)(N * GH) * isz,
                 .y = sv->y,
                 .dy = sv->dy,
                 .h0 = in->h0,
                 .c0 = in->c0};
    int64_t *off = scratch_get(&sc, sizeof(int64_t) * (size_t)(s->T + 1));
    c.off = off;
    if (!off || !(c.dgx = scratch_get(&sc, (size_t)(N * GH) * isz)) ||
        !(c.dgh = lstm ? c.dgx : scratch_get(&sc, (size_t)(N * GH) * isz)) ||
        !(c.dh = scratch_get(&sc, state)) || (lstm && !(c.dc = scratch_get(&sc, state))) ||
        step_mm_prepare(&wh, dt, B, GH, H, false, false, !lstm, in->w_hh))
        goto fail;
    step_offsets(s, off);
    if (sv->dhn)
        memcpy(c.dh, sv->dhn, state);
    else
        memset(c.dh, 0, state);
    if (lstm) {
        if (sv->dcn)
            memcpy(c.dc, sv->dcn, state);
        else
            memset(c.dc, 0, state);
    }

    for (int64_t k = s->T - 1; k >= 0; k--) {
        const int64_t t = step_at(s, k), bs = s->batch_sizes[t];
#pragma omp parallel for num_threads(nt) if (bs * GH >= DL_PARALLEL_GRAIN)
        for (int64_t b = 0; b < bs; b++) bwd_row(&c, k, b);
        /* dh = dgh @ W_hh (+ the GRU's direct part already in dh) */
        const char *dg = c.dgh + (size_t)(off[t] * GH) * isz;
        if (wh.on ? step_mm_run(&wh, bs, dg, NULL, c.dh)
                  : mm(dt, bs, H, GH, dg, GH, 1, in->w_hh, H, 1, lstm ? 0 : 1, c.dh))
            goto fail;
    }
    if (g->dh0) memcpy(g->dh0, c.dh, state);
    if (g->dc0 && lstm) memcpy(g->dc0, c.dc, state);
    if (g->dx && mm(dt, N, s->I, GH, c.dgx, GH, 1, in->w_ih, s->I, 1, 0, g->dx)) goto fail;
    if (weight_grads(&c, in, g, &sc)) goto fail;
    step_mm_free(&wh);
    scratch_free(&sc);
    return 0;
fail:
    step_mm_free(&wh);
    scratch_free(&sc);
    return -1;
}
