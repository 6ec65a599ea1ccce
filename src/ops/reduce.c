/* ops/reduce.c - the reduction op family: checks dims and dtypes, infers the
 * result's shape and dtype, brings the input into the kernels' (RO, O, R, I)
 * form and dispatches to the CPU kernels of src/cpu/reduce.c.
 *
 * The (RO, O, R, I) form: the input's dims of size > 1 are put in memory
 * order (by stride).  When the tensor is dense in that order and its dims
 * read [reduced][kept][reduced][kept] (any block may be empty), the kernels
 * read it in place: RO, O, R, I are the blocks' sizes (so transposed views,
 * column reductions and e.g. dims {1, 3} of a 3-D tensor need no copy).
 * Otherwise the input is copied with the kept dims first and the reduced ones
 * last (RO == I == 1).  The kernel's O*I results come out in that kept-dim
 * order and are copied into the result through a view in the same order.
 *
 * Devices: a CUDA input runs the CUDA twins of the kernels (kernels/reduce.h,
 * through the k_* dispatchers below) on its device; results, scratch and the
 * kernels' double accumulators live there, and finishing steps run there too
 * (no device memory is read on the host).
 *
 * Dtypes: float16/bfloat16 inputs are computed as float32 (on the CPU read
 * in place, converted in blocks by the kernels); integer and bool
 * inputs of sum/prod/max/min/median/cumsum/cumprod as int64; float
 * accumulations run in double and are rounded once into the result.
 *
 * Autograd: the public ops record a node (backward formula beside each
 * forward) when grad mode is on, x requires grad and the result is floating;
 * without that the forward path is unchanged (no copies). */
#include "ops/reduce.h"
#include "autograd/autograd.h"
#include "cpu/reduce.h"
#include "kernels/reduce.h"
#include "kernels/cuda.h"
#include "ops/op_util.h"
#include "ops/elementwise.h"
#include "ops/grad_util.h"
#include "ops/index.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* --- dims, shapes, checks ---------------------------------------------------------- */

/* x must be on the CPU, or on CUDA where the reduce kernels exist (its
 * device is then made current). */
static int check_device(const char *op, const dl_tensor *x) {
    dl_device d = dl_tensor_device(x);
    if (d.type == DL_DEVICE_CPU) return 0;
    if (d.type != DL_DEVICE_CUDA || !dl_cuda_reduce || !dl_cuda_rt) return dl_cuda_missing(op);
    return dl_cuda_rt->set_device(d.index) < 0 ? -1 : 0;
}

/* Marks the reduced dims of x in mask (every dim when ndims == 0). */
static int dims_mask(const char *op, const dl_tensor *x, int ndims, const int *dims, bool *mask) {
    for (int d = 0; d < DL_MAX_DIMS; d++) mask[d] = ndims == 0;
    if (ndims == 0) return 0;
    if (ndims < 0 || !dims) return dl_error("%s: invalid list of dims", op);
    bool seen[DL_MAX_DIMS] = {false};
    for (int i = 0; i < ndims; i++) {
        int d = dl_wrap_dim(op, dims[i], x->ndim);
        if (d < 0) return -1;
        if (seen[d])
            return dl_error("%s: dimension %d appears more than once in the list of dims", op,
                            d + 1);
        seen[d] = true;
    }
    for (int d = 0; d < DL_MAX_DIMS; d++) mask[d] = d < x->ndim && seen[d];
    return 0;
}

static int reduced_shape(const dl_tensor *x, const bool *mask, bool keepdim, int64_t *shape) {
    int n = 0;
    for (int d = 0; d < x->ndim; d++) {
        if (!mask[d])
            shape[n++] = x->shape[d];
        else if (keepdim)
            shape[n++] = 1;
    }
    return n;
}

/* The error for a max-like reduction over nothing; full: no dim was given. */
static int empty_error(const char *op, const dl_tensor *x, const bool *mask, bool full) {
    char b[128];
    dl_shape_str(x->ndim, x->shape, b, sizeof b);
    for (int d = 0; d < x->ndim && !full; d++)
        if (mask[d] && x->shape[d] == 0)
            return dl_error("%s: cannot reduce over dimension %d of size 0 (input shape %s)", op,
                            d + 1, b);
    return dl_error("%s: cannot reduce an empty tensor (input shape %s) without a dimension; "
                    "give one with the dim argument",
                    op, b);
}

static bool is_float(dl_dtype t) {
    return dl_dtype_is_floating(t);
}
/* the dtype float kernels read for a floating dtype */
static dl_dtype float_compute(dl_dtype t) {
    return t == DL_DTYPE_F64 ? DL_DTYPE_F64 : DL_DTYPE_F32;
}

/* --- autograd: recording and shared pieces of the backward formulas ------------------------
 *
 * The public ops record a node when grad mode is on, x requires grad and the
 * result is floating (integer results, indices and all/any never record).
 * Saved tensors sit in fixed slots: 0 the input, 1 the result, 2 an extra
 * (max/min/median's indices); an op saves only what its backward reads.
 * Backward formulas follow PyTorch 1.13's (tools/autograd/derivatives.yaml)
 * and are written with the public ops, which the engine runs with grad mode
 * off.  Each gradient leaves in the input's dtype. */

typedef struct {
    bool mask[DL_MAX_DIMS]; /* the reduced dims of the input */
    bool keepdim;
    bool full;     /* no dim given: max/min/median over everything */
    int dim;       /* scans and max/min/median with a dim: the wrapped dim */
    int64_t count; /* elements reduced into each result */
    double param;  /* var/std: correction; norm: p */
} red_ctx;

enum { SAVE_X = 1, SAVE_OUT = 2 };
enum { SLOT_X = 0, SLOT_OUT = 1, SLOT_EXTRA = 2 };

static bool wants_grad(dl_tensor *x, const dl_tensor *out) {
    return out && dl_dtype_is_floating(out->dtype) && dl_needs_grad1(x);
}

/* The ctx of a reduction of x over (ndims, dims). */
static int ctx_dims(red_ctx *c, const dl_tensor *x, int ndims, const int *dims, bool keepdim) {
    memset(c, 0, sizeof *c);
    if (dims_mask("reduce", x, ndims, dims, c->mask)) return -1;
    c->keepdim = keepdim;
    c->full = ndims == 0;
    c->count = 1;
    for (int d = 0; d < x->ndim; d++)
        if (c->mask[d]) c->count *= x->shape[d];
    return 0;
}

/* Makes out (a fresh result of op(x)) the output of a new node; saves x and/or
 * out (flags) and extra.  Returns out, or NULL (out released) on failure. */
static dl_tensor *record(const char *name, dl_backward_fn fn, dl_tensor *x, dl_tensor *out,
                         const red_ctx *c, unsigned flags, dl_tensor *extra) {
    dl_tensor *save[3] = {flags & SAVE_X ? x : NULL, flags & SAVE_OUT ? out : NULL, extra};
    return dl_op_record(out, name, fn, 1, &x, 3, save, c, sizeof *c);
}

/* Records r = op(x) over (ndims, dims) when needed (r is the forward's
 * result, NULL on its failure); param goes to ctx.param. */
static dl_tensor *record_red(const char *name, dl_backward_fn fn, unsigned flags, dl_tensor *x,
                             dl_tensor *r, int ndims, const int *dims, bool keepdim, double param) {
    red_ctx c;
    if (!wants_grad(x, r)) return r;
    if (ctx_dims(&c, x, ndims, dims, keepdim)) {
        dl_tensor_release(r);
        return NULL;
    }
    c.param = param;
    return record(name, fn, x, r, &c, flags, NULL);
}

/* The backward formulas below are straight lists of DL_OP_STEP over a
 * dl_op_pool (op_util.h).  Ends a formula: r (one of the pool's tensors)
 * converted to the dtype of input m as a new reference, or NULL when a step
 * failed; frees the pool. */
static dl_tensor *pool_finish(dl_op_pool *p, dl_tensor *r, const dl_tensor_meta *m) {
    dl_tensor *g = !p->failed && r ? dl_tensor_to_dtype(r, m->dtype) : NULL;
    dl_op_pool_free(p);
    return g;
}

/* A 0-dim scalar for arithmetic with g: double for float64 g, else float
 * (so float32 formulas stay in float, as PyTorch's wrapped scalars). */
static dl_tensor *scalar_for(double v, const dl_tensor *g) {
    return dl_tensor_scalar(v, g->dtype == DL_DTYPE_F64 ? DL_DTYPE_F64 : DL_DTYPE_F32);
}

/* t (of the reduced shape) viewed with the reduced dims back, of size 1. */
static dl_tensor *unreduce(dl_tensor *t, const dl_node *n) {
    const red_ctx *c = n->ctx;
    dl_tensor *r = dl_tensor_retain(t);
    if (c->keepdim) return r;
    for (int d = 0; d < n->input_meta[0].ndim && r; d++)
        if (c->mask[d]) {
            dl_tensor *u = dl_tensor_unsqueeze(r, d);
            dl_tensor_release(r);
            r = u;
        }
    return r;
}

/* t (of the reduced shape) broadcast back over the input's shape (a view). */
static dl_tensor *expand_back(dl_tensor *t, const dl_node *n) {
    dl_tensor *u = unreduce(t, n);
    dl_tensor *r = u ? dl_tensor_expand(u, n->input_meta[0].ndim, n->input_meta[0].shape) : NULL;
    dl_tensor_release(u);
    return r;
}

/* The reduced dims as a list, for sums over them with keepdim. */
static int mask_dims(const dl_node *n, int *dims) {
    const red_ctx *c = n->ctx;
    int nd = 0;
    for (int d = 0; d < n->input_meta[0].ndim; d++)
        if (c->mask[d]) dims[nd++] = d;
    return nd;
}

static dl_tensor *binop_scalar(dl_binary_op op, dl_tensor *t, double v) {
    dl_tensor *s = scalar_for(v, t);
    dl_tensor *r = s ? dl_binary(op, t, s, 1) : NULL;
    dl_tensor_release(s);
    return r;
}

/* t == v (bool), v in t's dtype */
static dl_tensor *eq_scalar(dl_tensor *t, double v) {
    dl_tensor *s = dl_tensor_scalar(v, t->dtype);
    dl_tensor *r = s ? dl_binary(DL_BINARY_EQ, t, s, 1) : NULL;
    dl_tensor_release(s);
    return r;
}

/* masked_fill(t, mask, v) with v in t's dtype */
static dl_tensor *fill_where(dl_tensor *t, dl_tensor *mask, double v) {
    dl_tensor *s = dl_tensor_scalar(v, t->dtype);
    dl_tensor *r = s ? dl_masked_fill(t, mask, s) : NULL;
    dl_tensor_release(s);
    return r;
}

/* flip(cumsum(flip(t, dim), dim), dim): sums from each position to the end */
static dl_tensor *reversed_cumsum(dl_tensor *t, int dim) {
    dl_tensor *f = dl_flip(t, 1, &dim);
    dl_tensor *c = f ? dl_cumsum(f, dim, DL_REDUCE_DTYPE_NONE) : NULL;
    dl_tensor *r = c ? dl_flip(c, 1, &dim) : NULL;
    dl_tensor_release(c);
    dl_tensor_release(f);
    return r;
}

/* The evenly distributed gradient of a value picked from all of x (max, min
 * and median without dim; PyTorch 1.13's evenly_distribute_backward): g
 * shared by the elements equal to the value (NaN ones when it is NaN). */
static int evenly_backward(dl_node *n, dl_tensor *const *gout, dl_tensor **gin) {
    dl_tensor *x = dl_node_saved(n, SLOT_X), *v = dl_node_saved(n, SLOT_OUT);
    if (!x || !v) return -1;
    double val = 0;
    if (dl_tensor_item(v, &val)) return -1;
    dl_op_pool P = {0};
    dl_tensor *g = gout[0];
    dl_tensor *mask =
        DL_OP_STEP(&P, val != val ? dl_unary(DL_UNARY_ISNAN, x) : dl_binary(DL_BINARY_EQ, x, v, 1));
    dl_tensor *cnt = DL_OP_STEP(&P, dl_sum(mask, 0, NULL, false, DL_REDUCE_DTYPE_NONE));
    dl_tensor *share = DL_OP_STEP(&P, dl_div(g, cnt));
    dl_tensor *zero = DL_OP_STEP(&P, dl_tensor_scalar(0, g->dtype));
    dl_tensor *r = DL_OP_STEP(&P, dl_where(mask, share, zero));
    gin[0] = pool_finish(&P, r, &n->input_meta[0]);
    return gin[0] ? 0 : -1;
}

/* The gradient of values picked along a dim (max, min, median with dim): g
 * scattered to the picked indices, zeros elsewhere. */
static int select_backward(dl_node *n, dl_tensor *const *gout, dl_tensor **gin) {
    const red_ctx *c = n->ctx;
    const dl_tensor_meta *m = &n->input_meta[0];
    dl_tensor *idx = dl_node_saved(n, SLOT_EXTRA), *g = gout[0];
    if (!idx) return -1;
    dl_op_pool P = {0};
    dl_tensor *r = g;
    if (m->ndim > 0) {
        dl_tensor *gu = DL_OP_STEP(&P, unreduce(g, n));
        dl_tensor *iu = DL_OP_STEP(&P, unreduce(idx, n));
        r = DL_OP_STEP(&P, dl_tensor_zeros(m->ndim, m->shape, g->dtype, m->device));
        if (!P.failed && dl_scatter_(r, c->dim, iu, gu)) P.failed = true;
    }
    gin[0] = pool_finish(&P, r, m);
    return gin[0] ? 0 : -1;
}

/* --- the (RO, O, R, I) plan ------------------------------------------------------------ */

typedef struct {
    dl_tensor *src; /* dense data the kernel reads (new reference); NULL when x is empty */
    dl_rshape s;    /* (RO, O, R, I) */
    int64_t nred;   /* elements reduced into each result: RO*R */
    int nk;         /* kept dims of size > 1, in the order the kernel writes them */
    int kdims[DL_MAX_DIMS];
    dl_device dev; /* x's device: the kernels' and the results' */
    bool cuda;
} rplan;

/* logical: keep the dims in their logical order (for flat indices). */
static int plan_make(dl_tensor *x, const bool *mask, bool logical, rplan *p) {
    int act[DL_MAX_DIMS], na = 0;
    for (int d = 0; d < x->ndim; d++)
        if (x->shape[d] != 1) act[na++] = d;
    memset(p, 0, sizeof *p);
    p->dev = dl_tensor_device(x);
    p->cuda = p->dev.type == DL_DEVICE_CUDA;
    if (dl_tensor_numel(x) > 0) {
        if (!logical) /* memory order: strides descending, stable */
            for (int i = 1; i < na; i++)
                for (int j = i; j > 0 && x->strides[act[j - 1]] < x->strides[act[j]]; j--) {
                    int t = act[j];
                    act[j] = act[j - 1];
                    act[j - 1] = t;
                }
        bool dense = true;
        int64_t expect = 1;
        for (int k = na - 1; k >= 0; k--) {
            if (x->strides[act[k]] != expect) dense = false;
            expect *= x->shape[act[k]];
        }
        /* in memory order the dims must read [reduced][kept][reduced][kept],
         * each block possibly empty */
        int64_t size[4] = {1, 1, 1, 1};
        int k = 0, nk = 0, kd[DL_MAX_DIMS];
        for (int blk = 0; blk < 4; blk++)
            for (; k < na && mask[act[k]] == (blk % 2 == 0); k++) {
                size[blk] *= x->shape[act[k]];
                if (blk % 2) kd[nk++] = act[k];
            }
        if (dense && k == na) {
            if (size[2] == 1) /* one reduced block: (R, I) rather than (RO, O) */
                p->s = (dl_rshape){1, 1, size[0], size[1]};
            else
                p->s = (dl_rshape){size[0], size[1], size[2], size[3]};
            p->nk = nk;
            memcpy(p->kdims, kd, sizeof kd);
            p->nred = p->s.RO * p->s.R;
            p->src = dl_tensor_retain(x);
            return 0;
        }
    }
    /* gather: kept dims first, reduced dims last, each in logical order */
    int perm[DL_MAX_DIMS], np = 0;
    p->s = (dl_rshape){1, 1, 1, 1};
    for (int d = 0; d < x->ndim; d++)
        if (!mask[d]) {
            perm[np++] = d;
            p->s.O *= x->shape[d];
            if (x->shape[d] != 1) p->kdims[p->nk++] = d;
        }
    for (int d = 0; d < x->ndim; d++)
        if (mask[d]) {
            perm[np++] = d;
            p->s.R *= x->shape[d];
        }
    p->nred = p->s.R;
    if (dl_tensor_numel(x) == 0) return 0;
    dl_tensor *v = dl_tensor_permute(x, perm);
    p->src = v ? dl_tensor_contiguous(v) : NULL;
    dl_tensor_release(v);
    return p->src ? 0 : -1;
}

/* Where a kernel's O*I results of dtype kt go: straight into the result when
 * it has that dtype and is dense in the kernel's order, else a scratch tensor
 * copied (and converted) into the result by sink_close. */
typedef struct {
    dl_tensor *view, *tmp;
} sink;

static int sink_open(sink *s, dl_tensor *out, dl_dtype kt, const dl_tensor *x, const bool *mask,
                     bool keepdim, const rplan *p, void **data) {
    int64_t shape[DL_MAX_DIMS], strides[DL_MAX_DIMS];
    for (int j = 0; j < p->nk; j++) {
        int d = p->kdims[j], od = d;
        if (!keepdim)
            for (int e = 0; e < d; e++) od -= mask[e];
        shape[j] = x->shape[d];
        strides[j] = out->strides[od];
    }
    s->tmp = NULL;
    s->view = dl_tensor_as_strided(out, p->nk, shape, strides, out->offset);
    if (!s->view) return -1;
    bool dense = out->dtype == kt;
    int64_t expect = 1;
    for (int j = p->nk - 1; j >= 0 && dense; j--) {
        dense = strides[j] == expect;
        expect *= shape[j];
    }
    if (!dense && !(s->tmp = dl_tensor_empty(p->nk, shape, kt, p->dev))) {
        dl_tensor_release(s->view);
        s->view = NULL;
        return -1;
    }
    *data = dl_tensor_data_ptr(s->tmp ? s->tmp : s->view);
    return 0;
}

/* Delivers the results (when rc == 0) and frees the sink; returns the status. */
static int sink_close(sink *s, int rc) {
    if (rc == 0 && s->tmp) rc = dl_tensor_copy_(s->view, s->tmp);
    dl_tensor_release(s->tmp);
    dl_tensor_release(s->view);
    s->tmp = s->view = NULL;
    return rc;
}

/* --- dispatch: the CPU kernels or their CUDA twins ------------------------------------------
 * Each k_* runs one kernel of src/cpu/reduce.h on the plan's device; on CUDA
 * every pointer is device memory. */

static const void *plan_data(const rplan *p) {
    return p->src ? dl_tensor_data_ptr(p->src) : NULL;
}

static int k_acc(const rplan *p, dl_acc_kind k, dl_dtype dt, double pw, const double *shift,
                 double *out) {
    if (!p->cuda) return dl_cpu_reduce_acc(k, plan_data(p), dt, &p->s, pw, shift, out);
    if (!dl_cuda_reduce->reduce_acc) return dl_cuda_missing("reduce");
    return dl_cuda_reduce->reduce_acc(k, plan_data(p), dt, &p->s, pw, shift, out);
}

static int k_finish(const rplan *p, dl_fin_kind k, double *a, int64_t n, double c,
                    const double *shift) {
    if (!p->cuda) {
        dl_cpu_reduce_finish(k, a, n, c, shift);
        return 0;
    }
    if (!dl_cuda_reduce->reduce_finish) return dl_cuda_missing("reduce");
    return dl_cuda_reduce->reduce_finish(k, a, n, c, shift);
}

/* a[i] = 0 where a[i] is infinite (CUDA's logsumexp; the CPU's is fused) */
static int k_zero_inf(double *a, int64_t n) {
    if (!dl_cuda_reduce->reduce_zero_inf) return dl_cuda_missing("logsumexp");
    return dl_cuda_reduce->reduce_zero_inf(a, n);
}

static int k_acc_i64(const rplan *p, bool prod, int64_t *out) {
    if (!p->cuda) return dl_cpu_reduce_acc_i64(prod, plan_data(p), &p->s, out);
    if (!dl_cuda_reduce->reduce_acc_i64) return dl_cuda_missing(prod ? "prod" : "sum");
    return dl_cuda_reduce->reduce_acc_i64(prod, plan_data(p), &p->s, out);
}

static int k_minmax(const rplan *p, bool mx, dl_dtype dt, void *vals, int64_t *idx) {
    if (!p->cuda) return dl_cpu_reduce_minmax(mx, plan_data(p), dt, &p->s, vals, idx);
    if (!dl_cuda_reduce->reduce_minmax) return dl_cuda_missing(mx ? "max" : "min");
    return dl_cuda_reduce->reduce_minmax(mx, plan_data(p), dt, &p->s, vals, idx);
}

static int k_allany(const rplan *p, bool all, uint8_t *out) {
    if (!p->cuda) return dl_cpu_reduce_allany(all, plan_data(p), &p->s, out);
    if (!dl_cuda_reduce->reduce_allany) return dl_cuda_missing(all ? "all" : "any");
    return dl_cuda_reduce->reduce_allany(all, plan_data(p), &p->s, out);
}

static int k_median(const rplan *p, dl_dtype dt, void *vals, int64_t *idx) {
    if (!p->cuda) return dl_cpu_median(plan_data(p), dt, p->s.O, p->s.R, p->s.I, vals, idx);
    if (!dl_cuda_reduce->median) return dl_cuda_missing("median");
    return dl_cuda_reduce->median(plan_data(p), dt, p->s.O, p->s.R, p->s.I, vals, idx);
}

/* n doubles of scratch on the plan's device: host memory, or the data of a
 * device tensor kept in *hold.  Freed by scratch_free. */
static double *scratch(const rplan *p, int64_t n, dl_tensor **hold, const char *op) {
    *hold = NULL;
    if (n < 1) n = 1;
    if (p->cuda) {
        *hold = dl_tensor_empty(1, &n, DL_DTYPE_F64, p->dev);
        return *hold ? dl_tensor_data_ptr(*hold) : NULL;
    }
    double *d = malloc(sizeof(double) * (size_t)n);
    if (!d) dl_error("%s: out of memory", op);
    return d;
}

static void scratch_free(double *d, dl_tensor *hold) {
    if (hold)
        dl_tensor_release(hold);
    else
        free(d);
}

/* --- float reductions ----------------------------------------------------------------- */

typedef enum { F_SUM, F_MEAN, F_PROD, F_AMAX, F_AMIN, F_VAR, F_STD, F_NORM, F_LSE } fop;

/* The CPU reduces float16/bfloat16 as they are: its kernels convert blocks
 * in registers and fold them as the float32 kernels do, so the result is the
 * float32 copy's, bit for bit, without the copy.  CUDA reduces a float32
 * copy. */
static bool half_direct(const dl_tensor *x) {
    return dl_tensor_device(x).type == DL_DEVICE_CPU &&
           (x->dtype == DL_DTYPE_F16 || x->dtype == DL_DTYPE_BF16);
}

/* Runs the kernels of f over plan p into a[O*I] (on the plan's device). */
static int float_kernels(fop f, const rplan *p, dl_dtype dt, double param, double *a) {
    int64_t n = p->s.O * p->s.I;
    double R = (double)p->nred, *shift = NULL;
    dl_tensor *hold = NULL;
    int rc = 0;
    switch (f) {
    case F_SUM: return k_acc(p, DL_ACC_SUM, dt, 0, NULL, a);
    case F_PROD: return k_acc(p, DL_ACC_PROD, dt, 0, NULL, a);
    case F_AMAX: return k_acc(p, DL_ACC_MAX, dt, 0, NULL, a);
    case F_AMIN: return k_acc(p, DL_ACC_MIN, dt, 0, NULL, a);
    case F_MEAN:
        rc = k_acc(p, DL_ACC_SUM, dt, 0, NULL, a);
        return rc ? rc : k_finish(p, DL_FIN_DIV, a, n, R, NULL);
    case F_VAR:
    case F_STD:
        /* two passes: the mean, then the squared deviations from it */
        if (!(shift = scratch(p, n, &hold, "var"))) return -1;
        rc = k_acc(p, DL_ACC_SUM, dt, 0, NULL, shift);
        if (!rc) rc = k_finish(p, DL_FIN_DIV, shift, n, R, NULL);
        if (!rc) rc = k_acc(p, DL_ACC_SQDEV, dt, 0, shift, a);
        if (!rc)
            rc = k_finish(p, f == F_STD ? DL_FIN_SQRT_DIV : DL_FIN_DIV, a, n,
                          R - param > 0 ? R - param : 0, NULL);
        scratch_free(shift, hold);
        return rc;
    case F_LSE:
        /* the CPU: one fused pass (a running max and sum) over any layout */
        if (!p->cuda) return dl_cpu_reduce_logsumexp(plan_data(p), dt, &p->s, a);
        /* CUDA: max + log(sum(exp(x - max))); an infinite max is not subtracted */
        if (!(shift = scratch(p, n, &hold, "logsumexp"))) return -1;
        rc = k_acc(p, DL_ACC_MAX, dt, 0, NULL, shift);
        if (!rc) rc = k_zero_inf(shift, n);
        if (!rc) rc = k_acc(p, DL_ACC_SUMEXP, dt, 0, shift, a);
        if (!rc) rc = k_finish(p, DL_FIN_LOG_SHIFT, a, n, 0, shift);
        scratch_free(shift, hold);
        return rc;
    case F_NORM: {
        double pw = param;
        /* the norm of nothing is 0 for every p, as PyTorch (the sum's identity) */
        if (p->nred == 0) return k_acc(p, DL_ACC_SUM, dt, 0, NULL, a);
        dl_acc_kind k = pw == 2           ? DL_ACC_SUMSQ
                        : pw == 1         ? DL_ACC_SUMABS
                        : pw == 0         ? DL_ACC_COUNTNZ
                        : pw == INFINITY  ? DL_ACC_MAXABS
                        : pw == -INFINITY ? DL_ACC_MINABS
                                          : DL_ACC_SUMPOW;
        rc = k_acc(p, k, dt, pw, NULL, a);
        if (!rc && k == DL_ACC_SUMSQ) rc = k_finish(p, DL_FIN_SQRT_DIV, a, n, 1, NULL);
        if (!rc && k == DL_ACC_SUMPOW) rc = k_finish(p, DL_FIN_POW, a, n, 1 / pw, NULL);
        return rc;
    }
    }
    return dl_error("reduce: unknown reduction");
}

/* f over mask of xc, result of dtype odt.  A float reduction (xc float32 or
 * float64) accumulates in float64; an integer one (int_acc: F_SUM or F_PROD
 * of integers) in int64. */
static dl_tensor *reduce_to(fop f, bool int_acc, dl_tensor *xc, const bool *mask, bool keepdim,
                            dl_dtype odt, double param) {
    int64_t oshape[DL_MAX_DIMS];
    int ond = reduced_shape(xc, mask, keepdim, oshape);
    rplan p;
    if (plan_make(xc, mask, false, &p)) return NULL;
    dl_tensor *out = dl_tensor_empty(ond, oshape, odt, p.dev);
    sink s = {NULL, NULL};
    void *a = NULL;
    dl_dtype acc = int_acc ? DL_DTYPE_I64 : DL_DTYPE_F64;
    int rc = out ? sink_open(&s, out, acc, xc, mask, keepdim, &p, &a) : -1;
    if (!rc)
        rc = sink_close(&s, int_acc ? k_acc_i64(&p, f == F_PROD, a)
                                    : float_kernels(f, &p, xc->dtype, param, a));
    dl_tensor_release(p.src);
    if (rc) {
        dl_tensor_release(out);
        return NULL;
    }
    return out;
}

/* --- sum, prod, mean ---------------------------------------------------------------------- */

static dl_tensor *sum_prod(const char *op, bool prod, dl_tensor *x, int ndims, const int *dims,
                           bool keepdim, dl_dtype dtype) {
    bool mask[DL_MAX_DIMS];
    if (check_device(op, x) || dims_mask(op, x, ndims, dims, mask)) return NULL;
    bool given = dtype != DL_REDUCE_DTYPE_NONE;
    dl_dtype odt = given ? dtype : is_float(x->dtype) ? x->dtype : DL_DTYPE_I64;
    dl_tensor *xd = dl_tensor_to_dtype(x, given ? dtype : x->dtype);
    if (!xd) return NULL;
    dl_tensor *r = NULL;
    dl_tensor *xc = half_direct(xd)
                        ? dl_tensor_retain(xd)
                        : dl_tensor_to_dtype(xd, is_float(odt) ? float_compute(odt) : DL_DTYPE_I64);
    if (xc) r = reduce_to(prod ? F_PROD : F_SUM, !is_float(odt), xc, mask, keepdim, odt, 0);
    dl_tensor_release(xc);
    dl_tensor_release(xd);
    return r;
}

/* sum: g broadcast back over the reduced dims. */
static int sum_backward(dl_node *n, dl_tensor *const *gout, dl_tensor **gin) {
    dl_tensor *g = dl_tensor_to_dtype(gout[0], n->input_meta[0].dtype);
    gin[0] = g ? expand_back(g, n) : NULL;
    dl_tensor_release(g);
    return gin[0] ? 0 : -1;
}

dl_tensor *dl_sum(dl_tensor *x, int ndims, const int *dims, bool keepdim, dl_dtype dtype) {
    return record_red("SumBackward", sum_backward, 0, x,
                      sum_prod("sum", false, x, ndims, dims, keepdim, dtype), ndims, dims, keepdim,
                      0);
}

/* For each element of x, the product of the other elements of its reduction
 * group (the dims in mask), without dividing: exclusive cumulative products
 * from the left and from the right, multiplied (exact with zeros). */
static dl_tensor *prod_of_others(dl_tensor *x, const bool *mask) {
    int nd = x->ndim, perm[DL_MAX_DIMS], inv[DL_MAX_DIMS], np = 0, one = 1;
    int64_t K = 1, R = 1, pshape[DL_MAX_DIMS];
    for (int d = 0; d < nd; d++)
        if (!mask[d]) perm[np++] = d, K *= x->shape[d];
    for (int d = 0; d < nd; d++)
        if (mask[d]) perm[np++] = d, R *= x->shape[d];
    for (int i = 0; i < nd; i++) {
        inv[perm[i]] = i;
        pshape[i] = x->shape[perm[i]];
    }
    int64_t kr[2] = {K, R}, k1[2] = {K, 1};
    dl_op_pool P = {0};
    dl_tensor *xp = DL_OP_STEP(&P, dl_tensor_permute(x, perm));
    dl_tensor *m = DL_OP_STEP(&P, dl_tensor_reshape(xp, 2, kr)); /* m is (K,R) */
    dl_tensor *ones = DL_OP_STEP(&P, dl_tensor_full(2, k1, 1, x->dtype, dl_tensor_device(x)));
    dl_tensor *head = DL_OP_STEP(&P, dl_tensor_narrow(m, 1, 0, R - 1));
    dl_tensor *tail = DL_OP_STEP(&P, dl_tensor_narrow(m, 1, 1, R - 1));
    dl_tensor *lcat = DL_OP_STEP(&P, dl_cat(2, (dl_tensor *[]){ones, head}, 1));
    dl_tensor *left =
        DL_OP_STEP(&P, dl_cumprod(lcat, 1, DL_REDUCE_DTYPE_NONE)); /* prod of m[:, <j] */
    dl_tensor *rtail = DL_OP_STEP(&P, dl_flip(tail, 1, &one));
    dl_tensor *rcat = DL_OP_STEP(&P, dl_cat(2, (dl_tensor *[]){ones, rtail}, 1));
    dl_tensor *rprod = DL_OP_STEP(&P, dl_cumprod(rcat, 1, DL_REDUCE_DTYPE_NONE));
    dl_tensor *right = DL_OP_STEP(&P, dl_flip(rprod, 1, &one)); /* prod of m[:, >j] */
    dl_tensor *both = DL_OP_STEP(&P, dl_mul(left, right));
    dl_tensor *shaped = DL_OP_STEP(&P, dl_tensor_reshape(both, nd, pshape));
    dl_tensor *r = DL_OP_STEP(&P, dl_tensor_permute(shaped, inv));
    r = P.failed ? NULL : dl_tensor_retain(r);
    dl_op_pool_free(&P);
    return r;
}

/* prod (PyTorch's prod_backward): g * result / x when x has no zero;
 * otherwise the products of the other elements (zeros outright for a full
 * product with several zeros).  Computed in the result's dtype. */
static int prod_backward(dl_node *n, dl_tensor *const *gout, dl_tensor **gin) {
    const red_ctx *c = n->ctx;
    const dl_tensor_meta *m = &n->input_meta[0];
    dl_tensor *x = dl_node_saved(n, SLOT_X), *res = dl_node_saved(n, SLOT_OUT), *g = gout[0];
    if (!x || !res) return -1;
    dl_op_pool P = {0};
    dl_tensor *r = g;
    if (m->ndim > 0 && dl_tensor_numel(x) == 0) {
        r = DL_OP_STEP(&P, dl_tensor_zeros(m->ndim, m->shape, g->dtype, m->device));
    } else if (m->ndim > 0) {
        dl_tensor *xc = DL_OP_STEP(&P, dl_tensor_to_dtype(x, res->dtype));
        dl_tensor *gu = DL_OP_STEP(&P, unreduce(g, n));
        dl_tensor *isz = DL_OP_STEP(&P, eq_scalar(xc, 0));
        dl_tensor *nz = DL_OP_STEP(&P, dl_sum(isz, 0, NULL, false, DL_REDUCE_DTYPE_NONE));
        int64_t zeros = 0;
        if (!P.failed && dl_tensor_item_i64(nz, &zeros)) P.failed = true;
        if (zeros == 0) {
            dl_tensor *ru = DL_OP_STEP(&P, unreduce(res, n));
            dl_tensor *q = DL_OP_STEP(&P, dl_div(ru, xc));
            r = DL_OP_STEP(&P, dl_mul(gu, q));
        } else if (zeros > 1 && c->full) {
            r = DL_OP_STEP(&P, dl_tensor_zeros(m->ndim, m->shape, g->dtype, m->device));
        } else {
            dl_tensor *others = DL_OP_STEP(&P, prod_of_others(xc, c->mask));
            r = DL_OP_STEP(&P, dl_mul(gu, others));
        }
    }
    gin[0] = pool_finish(&P, r, m);
    return gin[0] ? 0 : -1;
}

dl_tensor *dl_prod(dl_tensor *x, int ndims, const int *dims, bool keepdim, dl_dtype dtype) {
    return record_red("ProdBackward", prod_backward, SAVE_X | SAVE_OUT, x,
                      sum_prod("prod", true, x, ndims, dims, keepdim, dtype), ndims, dims, keepdim,
                      0);
}

/* The common path of ops that need a floating input: checks, converts to the
 * compute dtype and runs f; the result has dtype odt. */
static dl_tensor *float_op(const char *op, fop f, dl_tensor *x, int ndims, const int *dims,
                           bool keepdim, dl_dtype odt, double param) {
    bool mask[DL_MAX_DIMS];
    if (dims_mask(op, x, ndims, dims, mask)) return NULL;
    dl_tensor *xc =
        half_direct(x) ? dl_tensor_retain(x) : dl_tensor_to_dtype(x, float_compute(odt));
    if (!xc) return NULL;
    dl_tensor *r = reduce_to(f, false, xc, mask, keepdim, odt, param);
    dl_tensor_release(xc);
    return r;
}

static int need_float(const char *op, const dl_tensor *x) {
    if (check_device(op, x)) return -1;
    if (!is_float(x->dtype))
        return dl_error("%s: expected a floating point input, got %s", op, dl_dtype_name(x->dtype));
    return 0;
}

/* mean: g / N broadcast back over the reduced dims. */
static int mean_backward(dl_node *n, dl_tensor *const *gout, dl_tensor **gin) {
    const red_ctx *c = n->ctx;
    dl_tensor *q = binop_scalar(DL_BINARY_DIV, gout[0], (double)c->count);
    dl_tensor *g = q ? dl_tensor_to_dtype(q, n->input_meta[0].dtype) : NULL;
    gin[0] = g ? expand_back(g, n) : NULL;
    dl_tensor_release(g);
    dl_tensor_release(q);
    return gin[0] ? 0 : -1;
}

dl_tensor *dl_mean(dl_tensor *x, int ndims, const int *dims, bool keepdim, dl_dtype dtype) {
    if (check_device("mean", x)) return NULL;
    if (dtype != DL_REDUCE_DTYPE_NONE && !is_float(dtype)) {
        dl_error("mean: could not infer the output dtype: the dtype option must be a floating "
                 "point type, got %s",
                 dl_dtype_name(dtype));
        return NULL;
    }
    if (dtype == DL_REDUCE_DTYPE_NONE && !is_float(x->dtype)) {
        dl_error("mean: could not infer the output dtype: the input must be floating point, got "
                 "%s (convert it, or pass a floating dtype option)",
                 dl_dtype_name(x->dtype));
        return NULL;
    }
    dl_dtype odt = dtype != DL_REDUCE_DTYPE_NONE ? dtype : x->dtype;
    /* as PyTorch: the input is converted to dtype first */
    dl_tensor *xd = dl_tensor_to_dtype(x, odt);
    if (!xd) return NULL;
    dl_tensor *r = float_op("mean", F_MEAN, xd, ndims, dims, keepdim, odt, 0);
    dl_tensor_release(xd);
    return record_red("MeanBackward", mean_backward, 0, x, r, ndims, dims, keepdim, 0);
}

/* var (PyTorch's var_backward): (2 / (N - correction)) * g * (x - mean(x)).
 * Over everything with N <= correction: g * (x == mean ? nan : inf). */
static int var_grad(dl_node *n, dl_tensor *x, dl_tensor *g, dl_tensor **out) {
    const red_ctx *c = n->ctx;
    double dof = (double)c->count - c->param;
    int dims[DL_MAX_DIMS], nd = mask_dims(n, dims);
    dl_op_pool P = {0};
    dl_tensor *gu = DL_OP_STEP(&P, unreduce(g, n));
    dl_tensor *mean = DL_OP_STEP(&P, dl_mean(x, nd, dims, true, DL_REDUCE_DTYPE_NONE));
    dl_tensor *r;
    if (dof <= 0 && (c->full || x->ndim == 0)) {
        dl_tensor *same = DL_OP_STEP(&P, dl_binary(DL_BINARY_EQ, x, mean, 1));
        dl_tensor *nan = DL_OP_STEP(&P, scalar_for(NAN, g));
        dl_tensor *inf = DL_OP_STEP(&P, scalar_for(INFINITY, g));
        dl_tensor *w = DL_OP_STEP(&P, dl_where(same, nan, inf));
        r = DL_OP_STEP(&P, dl_mul(gu, w));
    } else {
        dl_tensor *scaled = DL_OP_STEP(&P, binop_scalar(DL_BINARY_MUL, gu, 2.0 / dof));
        dl_tensor *dev = DL_OP_STEP(&P, dl_sub(x, mean, 1));
        r = DL_OP_STEP(&P, dl_mul(scaled, dev));
    }
    *out = pool_finish(&P, r, &n->input_meta[0]);
    return *out ? 0 : -1;
}

static int var_backward(dl_node *n, dl_tensor *const *gout, dl_tensor **gin) {
    dl_tensor *x = dl_node_saved(n, SLOT_X);
    return x ? var_grad(n, x, gout[0], &gin[0]) : -1;
}

/* std: var's gradient of g / (2 std), 0 where std is 0. */
static int std_backward(dl_node *n, dl_tensor *const *gout, dl_tensor **gin) {
    dl_tensor *x = dl_node_saved(n, SLOT_X), *res = dl_node_saved(n, SLOT_OUT);
    if (!x || !res) return -1;
    dl_op_pool P = {0};
    dl_tensor *twice = DL_OP_STEP(&P, binop_scalar(DL_BINARY_MUL, res, 2));
    dl_tensor *q = DL_OP_STEP(&P, dl_div(gout[0], twice));
    dl_tensor *zero = DL_OP_STEP(&P, eq_scalar(res, 0));
    dl_tensor *gv = DL_OP_STEP(&P, fill_where(q, zero, 0));
    int rc = P.failed ? -1 : var_grad(n, x, gv, &gin[0]);
    pool_finish(&P, NULL, NULL);
    return rc;
}

dl_tensor *dl_var(dl_tensor *x, int ndims, const int *dims, double correction, bool keepdim) {
    if (need_float("var", x)) return NULL;
    dl_tensor *r = float_op("var", F_VAR, x, ndims, dims, keepdim, x->dtype, correction);
    return record_red("VarBackward", var_backward, SAVE_X, x, r, ndims, dims, keepdim, correction);
}

dl_tensor *dl_std(dl_tensor *x, int ndims, const int *dims, double correction, bool keepdim) {
    if (need_float("std", x)) return NULL;
    dl_tensor *r = float_op("std", F_STD, x, ndims, dims, keepdim, x->dtype, correction);
    return record_red("StdBackward", std_backward, SAVE_X | SAVE_OUT, x, r, ndims, dims, keepdim,
                      correction);
}

/* norm (PyTorch's norm_backward), with norm and g brought back to x's shape:
 *   p = 0: zeros;  p = 1: sgn(x) g;  p = 2: g x / norm (0 where norm is 0);
 *   p = +-inf: sgn(x) g shared among the elements with |x| == norm (or NaN);
 *   p < 1: sgn(x) |x|^(p-1) (0 where x is 0) g norm^(1-p);
 *   p < 2: sgn(x) |x|^(p-1) g / norm^(p-1), otherwise x |x|^(p-2) g / norm^(p-1),
 *          the second factor 0 where norm is 0. */
static int norm_backward(dl_node *n, dl_tensor *const *gout, dl_tensor **gin) {
    const red_ctx *c = n->ctx;
    const dl_tensor_meta *m = &n->input_meta[0];
    dl_tensor *x = dl_node_saved(n, SLOT_X), *res = dl_node_saved(n, SLOT_OUT);
    if (!x || !res) return -1;
    double p = c->param;
    dl_op_pool P = {0};
    dl_tensor *r;
    if (p == 0 || dl_tensor_numel(x) == 0) {
        r = DL_OP_STEP(&P, dl_tensor_zeros(m->ndim, m->shape, m->dtype, m->device));
        gin[0] = pool_finish(&P, r, m);
        return gin[0] ? 0 : -1;
    }
    dl_tensor *gu = DL_OP_STEP(&P, unreduce(gout[0], n));
    dl_tensor *nu = DL_OP_STEP(&P, unreduce(res, n));
    if (p == 1) {
        dl_tensor *sg = DL_OP_STEP(&P, dl_unary(DL_UNARY_SIGN, x));
        r = DL_OP_STEP(&P, dl_mul(sg, gu));
    } else if (p == 2) {
        dl_tensor *q = DL_OP_STEP(&P, dl_div(x, nu));
        dl_tensor *zero = DL_OP_STEP(&P, eq_scalar(nu, 0));
        dl_tensor *qz = DL_OP_STEP(&P, fill_where(q, zero, 0));
        r = DL_OP_STEP(&P, dl_mul(gu, qz));
    } else if (isinf(p)) {
        int dims[DL_MAX_DIMS], nd = mask_dims(n, dims);
        dl_tensor *ax = DL_OP_STEP(&P, dl_unary(DL_UNARY_ABS, x));
        dl_tensor *at = DL_OP_STEP(&P, dl_binary(DL_BINARY_EQ, ax, nu, 1));
        dl_tensor *nan = DL_OP_STEP(&P, dl_unary(DL_UNARY_ISNAN, ax));
        dl_tensor *mask = DL_OP_STEP(&P, dl_binary(DL_BINARY_LOGICAL_OR, at, nan, 1));
        dl_tensor *cnt = DL_OP_STEP(&P, dl_sum(mask, nd, dims, true, DL_REDUCE_DTYPE_NONE));
        dl_tensor *share = DL_OP_STEP(&P, dl_div(gu, cnt));
        dl_tensor *picked = DL_OP_STEP(&P, dl_mul(share, mask));
        dl_tensor *sg = DL_OP_STEP(&P, dl_unary(DL_UNARY_SIGN, x));
        r = DL_OP_STEP(&P, dl_mul(sg, picked));
    } else {
        dl_tensor *ax = DL_OP_STEP(&P, dl_unary(DL_UNARY_ABS, x));
        dl_tensor *sg = DL_OP_STEP(&P, dl_unary(DL_UNARY_SIGN, x));
        if (p < 1) {
            dl_tensor *pw = DL_OP_STEP(&P, binop_scalar(DL_BINARY_POW, ax, p - 1));
            dl_tensor *xz = DL_OP_STEP(&P, eq_scalar(x, 0));
            dl_tensor *pz = DL_OP_STEP(&P, fill_where(pw, xz, 0));
            dl_tensor *scaled = DL_OP_STEP(&P, dl_mul(sg, pz));
            dl_tensor *sgu = DL_OP_STEP(&P, dl_mul(scaled, gu));
            dl_tensor *np = DL_OP_STEP(&P, binop_scalar(DL_BINARY_POW, nu, 1 - p));
            r = DL_OP_STEP(&P, dl_mul(sgu, np));
        } else {
            dl_tensor *pw = DL_OP_STEP(&P, binop_scalar(DL_BINARY_POW, ax, p < 2 ? p - 1 : p - 2));
            dl_tensor *scaled = DL_OP_STEP(&P, dl_mul(p < 2 ? sg : x, pw));
            dl_tensor *np = DL_OP_STEP(&P, binop_scalar(DL_BINARY_POW, nu, p - 1));
            dl_tensor *q = DL_OP_STEP(&P, dl_div(gu, np));
            dl_tensor *zero = DL_OP_STEP(&P, eq_scalar(nu, 0));
            dl_tensor *qz = DL_OP_STEP(&P, fill_where(q, zero, 0));
            r = DL_OP_STEP(&P, dl_mul(scaled, qz));
        }
    }
    gin[0] = pool_finish(&P, r, m);
    return gin[0] ? 0 : -1;
}

dl_tensor *dl_norm(dl_tensor *x, double p, int ndims, const int *dims, bool keepdim) {
    if (need_float("norm", x)) return NULL;
    if (p != p) {
        dl_error("norm: p must be a number, got nan");
        return NULL;
    }
    dl_tensor *r = float_op("norm", F_NORM, x, ndims, dims, keepdim, x->dtype, p);
    return record_red("NormBackward", norm_backward, SAVE_X | SAVE_OUT, x, r, ndims, dims, keepdim,
                      p);
}

/* logsumexp: g * exp(x - result).  A contiguous float32/float64 CPU input
 * whose reduced dims (of size > 1) are one block, (O, R, I), takes one fused
 * pass (cpu/logsumexp.c, the same values); other layouts, dtypes and CUDA
 * run the formula op by op. */
static int logsumexp_backward(dl_node *n, dl_tensor *const *gout, dl_tensor **gin) {
    dl_tensor *x = dl_node_saved(n, SLOT_X), *res = dl_node_saved(n, SLOT_OUT);
    if (!x || !res) return -1;
    const red_ctx *c = n->ctx;
    dl_dtype dt = x->dtype;
    bool fused = (dt == DL_DTYPE_F32 || dt == DL_DTYPE_F64) && gout[0]->dtype == dt &&
                 res->dtype == dt && !dl_op_on_cuda(x) && !dl_op_on_cuda(gout[0]) &&
                 dl_tensor_is_contiguous(x);
    /* [kept O][reduced R][kept I] in order, dims of size 1 anywhere */
    int64_t OI[2] = {1, 1}, R = 1;
    int part = 0;
    for (int d = 0; d < x->ndim && fused; d++) {
        if (x->shape[d] == 1) continue;
        if (c->mask[d]) {
            if (part == 2) fused = false; /* a second block of reduced dims */
            part = 1;
            R *= x->shape[d];
        } else {
            if (part == 1) part = 2;
            OI[part / 2] *= x->shape[d];
        }
    }
    if (fused) {
        dl_tensor *gc = dl_op_dense(gout[0], dt), *rc = gc ? dl_op_dense(res, dt) : NULL;
        dl_tensor *gx = rc ? dl_tensor_empty(x->ndim, x->shape, dt, dl_tensor_device(x)) : NULL;
        if (gx && dl_cpu_logsumexp_backward(dt, OI[0], R, OI[1], dl_op_data(gx), dl_op_data(x),
                                            dl_op_data(gc), dl_op_data(rc))) {
            dl_tensor_release(gx);
            gx = NULL;
        }
        dl_tensor_release(gc);
        dl_tensor_release(rc);
        gin[0] = gx;
        return gx ? 0 : -1;
    }
    dl_op_pool P = {0};
    dl_tensor *gu = DL_OP_STEP(&P, unreduce(gout[0], n));
    dl_tensor *ru = DL_OP_STEP(&P, unreduce(res, n));
    dl_tensor *d = DL_OP_STEP(&P, dl_sub(x, ru, 1));
    dl_tensor *e = DL_OP_STEP(&P, dl_unary(DL_UNARY_EXP, d));
    dl_tensor *r = DL_OP_STEP(&P, dl_mul(gu, e));
    gin[0] = pool_finish(&P, r, &n->input_meta[0]);
    return gin[0] ? 0 : -1;
}

dl_tensor *dl_logsumexp(dl_tensor *x, int ndims, const int *dims, bool keepdim) {
    if (check_device("logsumexp", x)) return NULL;
    dl_dtype odt = is_float(x->dtype) ? x->dtype : DL_DTYPE_F32;
    dl_tensor *r = float_op("logsumexp", F_LSE, x, ndims, dims, keepdim, odt, 0);
    return record_red("LogsumexpBackward", logsumexp_backward, SAVE_X | SAVE_OUT, x, r, ndims, dims,
                      keepdim, 0);
}

/* --- max, min and their indices ------------------------------------------------------------ */

/* A selecting reduction (max/min, median) of x over mask: x in its compute
 * dtype (xc, a new reference; float16/bfloat16 stay as they are where
 * half_ok and half_direct allow), the plan p over it, the result's rank and
 * shape, the dtypes the kernel reads (ct) and writes its values in (kt). */
typedef struct {
    dl_tensor *xc;
    rplan p;
    int ond;
    int64_t oshape[DL_MAX_DIMS];
    dl_dtype ct, kt;
} selection;

/* Fills *s for x over mask, *vals and *idx (either may be NULL) set to
 * NULL; 0, or -1 with the error and nothing held. */
static int select_begin(const char *op, dl_tensor *x, const bool *mask, bool keepdim, bool full,
                        bool half_ok, selection *s, dl_tensor **vals, dl_tensor **idx) {
    if (vals) *vals = NULL;
    if (idx) *idx = NULL;
    s->xc = NULL;
    if (check_device(op, x)) return -1;
    s->ond = reduced_shape(x, mask, keepdim, s->oshape);
    s->xc =
        half_ok && half_direct(x)
            ? dl_tensor_retain(x)
            : dl_tensor_to_dtype(x, is_float(x->dtype) ? float_compute(x->dtype) : DL_DTYPE_I64);
    if (!s->xc) return -1;
    if (plan_make(s->xc, mask, full, &s->p)) {
        dl_tensor_release(s->xc);
        s->xc = NULL;
        return -1;
    }
    s->ct = s->xc->dtype;
    s->kt = is_float(x->dtype) ? DL_DTYPE_F64 : DL_DTYPE_I64;
    return 0;
}

/* Ends a selection: frees what s holds; with rc == 0 hands the values vo
 * and indices io to *vals and *idx (released where those are NULL), else
 * releases them.  Returns rc. */
static int select_end(selection *s, int rc, dl_tensor *vo, dl_tensor *io, dl_tensor **vals,
                      dl_tensor **idx) {
    dl_tensor_release(s->p.src);
    dl_tensor_release(s->xc);
    if (rc) {
        dl_tensor_release(vo);
        dl_tensor_release(io);
        return rc;
    }
    dl_op_optional_out(vals, vo);
    dl_op_optional_out(idx, io);
    return 0;
}

/* Max or min over mask: values (x's dtype) into *vals and/or int64 indices
 * into *idx (either may be NULL).  full: no dim was given; indices then count
 * in logical row-major order over the whole tensor (a flat index). */
static int minmax(const char *op, bool mx, dl_tensor *x, const bool *mask, bool keepdim, bool full,
                  dl_tensor **vals, dl_tensor **idx) {
    selection S;
    if (select_begin(op, x, mask, keepdim, full, true, &S, vals, idx)) return -1;
    dl_tensor *vo = NULL, *io = NULL;
    sink sv = {NULL, NULL}, si = {NULL, NULL};
    void *va = NULL, *ia = NULL;
    double *own = NULL;
    dl_tensor *own_hold = NULL;
    bool vopen = false, iopen = false;
    int rc = 0;
    if (S.p.nred == 0 && S.p.s.O * S.p.s.I > 0) rc = empty_error(op, x, mask, full);
    if (!rc && idx && S.p.s.RO != 1)
        rc = dl_error("%s: internal error: indices over split dims", op);
    if (!rc && vals) {
        vo = dl_tensor_empty(S.ond, S.oshape, x->dtype, S.p.dev);
        rc = vo ? sink_open(&sv, vo, S.kt, S.xc, mask, keepdim, &S.p, &va) : -1;
        vopen = rc == 0;
    }
    if (!rc && idx) {
        io = dl_tensor_empty(S.ond, S.oshape, DL_DTYPE_I64, S.p.dev);
        rc = io ? sink_open(&si, io, DL_DTYPE_I64, S.xc, mask, keepdim, &S.p, &ia) : -1;
        iopen = rc == 0;
    }
    /* values nobody asked for still need a place (8 bytes each: double or int64) */
    if (!rc && !vals && !(va = own = scratch(&S.p, S.p.s.O * S.p.s.I + 1, &own_hold, op))) rc = -1;
    if (!rc) rc = k_minmax(&S.p, mx, S.ct, va, ia);
    if (own) scratch_free(own, own_hold);
    if (vopen) rc = sink_close(&sv, rc);
    if (iopen) rc = sink_close(&si, rc);
    return select_end(&S, rc, vo, io, vals, idx);
}

/* Values only: floats take the vectorised accumulation, integers minmax. */
static dl_tensor *amax_amin(const char *op, bool mx, dl_tensor *x, int ndims, const int *dims,
                            bool keepdim) {
    bool mask[DL_MAX_DIMS];
    dl_tensor *v;
    if (check_device(op, x) || dims_mask(op, x, ndims, dims, mask)) return NULL;
    if (!is_float(x->dtype))
        return minmax(op, mx, x, mask, keepdim, ndims == 0, &v, NULL) ? NULL : v;
    int64_t numel = dl_tensor_numel(x), out = 1;
    for (int d = 0; d < x->ndim; d++)
        if (!mask[d]) out *= x->shape[d];
    if (numel == 0 && out > 0) {
        empty_error(op, x, mask, ndims == 0);
        return NULL;
    }
    return float_op(op, mx ? F_AMAX : F_AMIN, x, ndims, dims, keepdim, x->dtype, 0);
}

/* amax/amin (PyTorch's scale_grad_by_count): g shared evenly among the
 * elements of each group equal to its result. */
static int amax_backward(dl_node *n, dl_tensor *const *gout, dl_tensor **gin) {
    dl_tensor *x = dl_node_saved(n, SLOT_X), *res = dl_node_saved(n, SLOT_OUT);
    if (!x || !res) return -1;
    int dims[DL_MAX_DIMS], nd = mask_dims(n, dims);
    dl_op_pool P = {0};
    dl_tensor *ru = DL_OP_STEP(&P, unreduce(res, n));
    dl_tensor *gu = DL_OP_STEP(&P, unreduce(gout[0], n));
    dl_tensor *mask = DL_OP_STEP(&P, dl_binary(DL_BINARY_EQ, x, ru, 1));
    dl_tensor *cnt = DL_OP_STEP(&P, dl_sum(mask, nd, dims, true, DL_REDUCE_DTYPE_NONE));
    dl_tensor *share = DL_OP_STEP(&P, dl_div(gu, cnt));
    dl_tensor *r = DL_OP_STEP(&P, dl_mul(share, mask));
    gin[0] = pool_finish(&P, r, &n->input_meta[0]);
    return gin[0] ? 0 : -1;
}

dl_tensor *dl_amax(dl_tensor *x, int ndims, const int *dims, bool keepdim) {
    return record_red("AmaxBackward", amax_backward, SAVE_X | SAVE_OUT, x,
                      amax_amin("amax", true, x, ndims, dims, keepdim), ndims, dims, keepdim, 0);
}
dl_tensor *dl_amin(dl_tensor *x, int ndims, const int *dims, bool keepdim) {
    return record_red("AminBackward", amax_backward, SAVE_X | SAVE_OUT, x,
                      amax_amin("amin", false, x, ndims, dims, keepdim), ndims, dims, keepdim, 0);
}
dl_tensor *dl_max_all(dl_tensor *x) {
    return record_red("MaxBackward", evenly_backward, SAVE_X | SAVE_OUT, x,
                      amax_amin("max", true, x, 0, NULL, false), 0, NULL, false, 0);
}
dl_tensor *dl_min_all(dl_tensor *x) {
    return record_red("MinBackward", evenly_backward, SAVE_X | SAVE_OUT, x,
                      amax_amin("min", false, x, 0, NULL, false), 0, NULL, false, 0);
}

/* Records values = op(x, dim) (max, min, median with a dim); the node keeps
 * its own copy of the indices, which the bindings rewrite 1-based in place. */
static int record_select(const char *name, dl_tensor *x, int dim, bool keepdim, dl_tensor **values,
                         dl_tensor **indices) {
    red_ctx c;
    if (!wants_grad(x, *values)) return 0;
    dl_tensor *idx = ctx_dims(&c, x, 1, &dim, keepdim) ? NULL : dl_tensor_clone(*indices);
    c.dim = idx ? dl_wrap_dim(name, dim, x->ndim) : 0;
    *values = idx ? record(name, select_backward, x, *values, &c, 0, idx) : NULL;
    dl_tensor_release(idx);
    if (*values) return 0;
    dl_tensor_release(*indices);
    *indices = NULL;
    return -1;
}

static int minmax_dim(const char *op, bool mx, dl_tensor *x, int dim, bool keepdim,
                      dl_tensor **vals, dl_tensor **idx) {
    bool mask[DL_MAX_DIMS];
    *vals = *idx = NULL;
    if (dims_mask(op, x, 1, &dim, mask)) return -1;
    if (minmax(op, mx, x, mask, keepdim, false, vals, idx)) return -1;
    return record_select(mx ? "MaxBackward" : "MinBackward", x, dim, keepdim, vals, idx);
}

int dl_max_dim(dl_tensor *x, int dim, bool keepdim, dl_tensor **values, dl_tensor **indices) {
    return minmax_dim("max", true, x, dim, keepdim, values, indices);
}
int dl_min_dim(dl_tensor *x, int dim, bool keepdim, dl_tensor **values, dl_tensor **indices) {
    return minmax_dim("min", false, x, dim, keepdim, values, indices);
}

static dl_tensor *argmax_argmin(const char *op, bool mx, dl_tensor *x, const int *dim,
                                bool keepdim) {
    bool mask[DL_MAX_DIMS];
    dl_tensor *i;
    if (dims_mask(op, x, dim ? 1 : 0, dim, mask)) return NULL;
    return minmax(op, mx, x, mask, keepdim, dim == NULL, NULL, &i) ? NULL : i;
}

dl_tensor *dl_argmax(dl_tensor *x, const int *dim, bool keepdim) {
    return argmax_argmin("argmax", true, x, dim, keepdim);
}
dl_tensor *dl_argmin(dl_tensor *x, const int *dim, bool keepdim) {
    return argmax_argmin("argmin", false, x, dim, keepdim);
}

/* --- all, any -------------------------------------------------------------------------------- */

static dl_tensor *all_any(const char *op, bool all, dl_tensor *x, int ndims, const int *dims,
                          bool keepdim) {
    bool mask[DL_MAX_DIMS];
    if (check_device(op, x) || dims_mask(op, x, ndims, dims, mask)) return NULL;
    int64_t oshape[DL_MAX_DIMS];
    int ond = reduced_shape(x, mask, keepdim, oshape);
    dl_tensor *xc = dl_tensor_to_dtype(x, DL_DTYPE_BOOL);
    if (!xc) return NULL;
    rplan p;
    dl_tensor *out = NULL;
    int rc = plan_make(xc, mask, false, &p);
    if (!rc) {
        out = dl_tensor_empty(ond, oshape, DL_DTYPE_BOOL, p.dev);
        sink s = {NULL, NULL};
        void *a = NULL;
        rc = out ? sink_open(&s, out, DL_DTYPE_BOOL, xc, mask, keepdim, &p, &a) : -1;
        if (!rc) rc = sink_close(&s, k_allany(&p, all, a));
        dl_tensor_release(p.src);
    }
    dl_tensor_release(xc);
    if (rc) {
        dl_tensor_release(out);
        return NULL;
    }
    return out;
}

dl_tensor *dl_all(dl_tensor *x, int ndims, const int *dims, bool keepdim) {
    return all_any("all", true, x, ndims, dims, keepdim);
}
dl_tensor *dl_any(dl_tensor *x, int ndims, const int *dims, bool keepdim) {
    return all_any("any", false, x, ndims, dims, keepdim);
}

/* --- median ------------------------------------------------------------------------------------
 */

static int median(dl_tensor *x, const bool *mask, bool keepdim, dl_tensor **vals, dl_tensor **idx) {
    const char *op = "median";
    selection S;
    if (select_begin(op, x, mask, keepdim, false, false, &S, vals, idx)) return -1;
    dl_tensor *vo = dl_tensor_empty(S.ond, S.oshape, x->dtype, S.p.dev);
    dl_tensor *io = dl_tensor_empty(S.ond, S.oshape, DL_DTYPE_I64, S.p.dev);
    sink sv = {NULL, NULL}, si = {NULL, NULL};
    void *va = NULL, *ia = NULL;
    int rc = vo && io ? sink_open(&sv, vo, S.kt, S.xc, mask, keepdim, &S.p, &va) : -1;
    bool vopen = rc == 0, iopen = false, nan_fill = false;
    if (!rc) iopen = (rc = sink_open(&si, io, DL_DTYPE_I64, S.xc, mask, keepdim, &S.p, &ia)) == 0;
    if (!rc && S.p.nred == 0 && S.p.s.O * S.p.s.I > 0) {
        if (idx)
            rc = empty_error(op, x, mask, false);
        else if (S.p.cuda)
            nan_fill = true; /* filled below, on the device */
        else
            *(double *)va = NAN; /* median of an empty tensor: nan, as PyTorch */
    } else if (!rc) {
        /* one reduced dim (or all of them): RO is 1 */
        rc = k_median(&S.p, S.ct, va, ia);
    }
    if (iopen) rc = sink_close(&si, rc);
    if (vopen) rc = sink_close(&sv, rc);
    if (!rc && nan_fill) rc = dl_tensor_fill_(vo, NAN);
    return select_end(&S, rc, vo, io, vals, idx);
}

dl_tensor *dl_median_all(dl_tensor *x) {
    bool mask[DL_MAX_DIMS];
    dl_tensor *v;
    if (dims_mask("median", x, 0, NULL, mask)) return NULL;
    if (dl_tensor_numel(x) == 0 && !is_float(x->dtype)) {
        dl_error("median: cannot take the median of an empty %s tensor", dl_dtype_name(x->dtype));
        return NULL;
    }
    if (median(x, mask, false, &v, NULL)) return NULL;
    return record_red("MedianBackward", evenly_backward, SAVE_X | SAVE_OUT, x, v, 0, NULL, false,
                      0);
}

int dl_median_dim(dl_tensor *x, int dim, bool keepdim, dl_tensor **values, dl_tensor **indices) {
    bool mask[DL_MAX_DIMS];
    *values = *indices = NULL;
    if (dims_mask("median", x, 1, &dim, mask)) return -1;
    if (median(x, mask, keepdim, values, indices)) return -1;
    return record_select("MedianBackward", x, dim, keepdim, values, indices);
}

/* --- scans -------------------------------------------------------------------------------------
 */

static dl_tensor *scan(const char *op, bool prod, dl_tensor *x, int dim, dl_dtype dtype) {
    if (check_device(op, x)) return NULL;
    int d = dl_wrap_dim(op, dim, x->ndim);
    if (d < 0) return NULL;
    bool given = dtype != DL_REDUCE_DTYPE_NONE;
    dl_dtype odt = given ? dtype : is_float(x->dtype) ? x->dtype : DL_DTYPE_I64;
    dl_dtype ct = is_float(odt) ? float_compute(odt) : DL_DTYPE_I64;
    int64_t O = 1, R = 1, I = 1;
    for (int e = 0; e < x->ndim; e++) {
        if (e < d)
            O *= x->shape[e];
        else if (e == d)
            R = x->shape[e];
        else
            I *= x->shape[e];
    }
    /* as PyTorch: the input is converted to dtype first */
    dl_tensor *xd = dl_tensor_to_dtype(x, given ? dtype : x->dtype);
    dl_tensor *xt = xd ? dl_tensor_to_dtype(xd, ct) : NULL;
    dl_tensor *xc = xt ? dl_tensor_contiguous(xt) : NULL;
    dl_device dev = dl_tensor_device(x);
    dl_tensor *out = xc ? dl_tensor_empty(x->ndim, x->shape, odt, dev) : NULL;
    dl_tensor *tmp = out && odt != ct ? dl_tensor_empty(x->ndim, x->shape, ct, dev) : NULL;
    int rc = -1;
    if (out && (odt == ct || tmp)) {
        const void *src = dl_tensor_data_ptr(xc);
        void *dst = dl_tensor_data_ptr(tmp ? tmp : out);
        if (dev.type != DL_DEVICE_CUDA)
            rc = dl_cpu_scan(prod, src, ct, O, R, I, dst);
        else
            rc = dl_cuda_reduce->scan ? dl_cuda_reduce->scan(prod, src, ct, O, R, I, dst)
                                      : dl_cuda_missing(op);
        if (!rc && tmp) rc = dl_tensor_copy_(out, tmp);
    }
    dl_tensor_release(tmp);
    dl_tensor_release(xc);
    dl_tensor_release(xt);
    dl_tensor_release(xd);
    if (rc) {
        dl_tensor_release(out);
        return NULL;
    }
    return out;
}

static dl_tensor *record_scan(const char *name, dl_backward_fn fn, unsigned flags, dl_tensor *x,
                              dl_tensor *r, int dim) {
    red_ctx c = {.keepdim = true};
    if (!wants_grad(x, r)) return r;
    c.dim = x->ndim ? dl_wrap_dim(name, dim, x->ndim) : 0;
    return record(name, fn, x, r, &c, flags, NULL);
}

/* cumsum: the reversed cumulative sum of g. */
static int cumsum_backward(dl_node *n, dl_tensor *const *gout, dl_tensor **gin) {
    const red_ctx *c = n->ctx;
    const dl_tensor_meta *m = &n->input_meta[0];
    dl_tensor *g = gout[0];
    dl_op_pool P = {0};
    dl_tensor *r = g;
    if (m->ndim > 0 && m->shape[c->dim] > 1) r = DL_OP_STEP(&P, reversed_cumsum(g, c->dim));
    gin[0] = pool_finish(&P, r, m);
    return gin[0] ? 0 : -1;
}

dl_tensor *dl_cumsum(dl_tensor *x, int dim, dl_dtype dtype) {
    return record_scan("CumsumBackward", cumsum_backward, 0, x,
                       scan("cumsum", false, x, dim, dtype), dim);
}

/* cumprod: with y = cumprod(x) and w = y g, the gradient at i is
 * sum_{k >= i} g_k prod_{j <= k, j != i} x_j.  Before the first zero of a
 * slice that is reversed_cumsum(w) / x; at the first zero z it is
 * reversed_cumsum(g * cumprod(x with x_z = 1)); after it, 0 (the product
 * keeps x_z).  Inputs without zeros take the first formula throughout (as
 * PyTorch); no NaN either way.  Computed in the result's dtype. */
static int cumprod_backward(dl_node *n, dl_tensor *const *gout, dl_tensor **gin) {
    const red_ctx *c = n->ctx;
    const dl_tensor_meta *m = &n->input_meta[0];
    dl_tensor *x = dl_node_saved(n, SLOT_X), *res = dl_node_saved(n, SLOT_OUT), *g = gout[0];
    if (!x || !res) return -1;
    int d = c->dim;
    dl_op_pool P = {0};
    dl_tensor *r = g;
    if (m->ndim > 0 && m->shape[d] > 1 && dl_tensor_numel(x) > 1) {
        dl_tensor *xc = DL_OP_STEP(&P, dl_tensor_to_dtype(x, res->dtype));
        dl_tensor *w = DL_OP_STEP(&P, dl_mul(res, g));
        dl_tensor *rw = DL_OP_STEP(&P, reversed_cumsum(w, d));
        dl_tensor *isz = DL_OP_STEP(&P, eq_scalar(xc, 0));
        dl_tensor *any = DL_OP_STEP(&P, dl_any(isz, 0, NULL, false));
        double has_zero = 0;
        if (!P.failed && dl_tensor_item(any, &has_zero)) P.failed = true;
        if (!has_zero) {
            r = DL_OP_STEP(&P, dl_div(rw, xc));
        } else {
            dl_tensor *nz =
                DL_OP_STEP(&P, dl_cumsum(isz, d, DL_REDUCE_DTYPE_NONE)); /* zeros so far */
            dl_tensor *before = DL_OP_STEP(&P, eq_scalar(nz, 0));
            dl_tensor *one = DL_OP_STEP(&P, eq_scalar(nz, 1));
            dl_tensor *first = DL_OP_STEP(&P, dl_binary(DL_BINARY_LOGICAL_AND, isz, one, 1));
            dl_tensor *x1 = DL_OP_STEP(&P, fill_where(xc, first, 1));
            dl_tensor *y1 = DL_OP_STEP(&P, dl_cumprod(x1, d, DL_REDUCE_DTYPE_NONE));
            dl_tensor *gy1 = DL_OP_STEP(&P, dl_mul(g, y1));
            dl_tensor *at_zero = DL_OP_STEP(&P, reversed_cumsum(gy1, d));
            dl_tensor *after = DL_OP_STEP(&P, dl_unary(DL_UNARY_LOGICAL_NOT, before));
            dl_tensor *xs = DL_OP_STEP(&P, fill_where(xc, after, 1));
            dl_tensor *pre = DL_OP_STEP(&P, dl_div(rw, xs));
            dl_tensor *zero = DL_OP_STEP(&P, dl_tensor_scalar(0, g->dtype));
            dl_tensor *tail = DL_OP_STEP(&P, dl_where(first, at_zero, zero));
            r = DL_OP_STEP(&P, dl_where(before, pre, tail));
        }
    }
    gin[0] = pool_finish(&P, r, m);
    return gin[0] ? 0 : -1;
}

dl_tensor *dl_cumprod(dl_tensor *x, int dim, dl_dtype dtype) {
    return record_scan("CumprodBackward", cumprod_backward, SAVE_X | SAVE_OUT, x,
                       scan("cumprod", true, x, dim, dtype), dim);
}
