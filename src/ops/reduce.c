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
 * Dtypes: float16/bfloat16 inputs are computed as float32; integer and bool
 * inputs of sum/prod/max/min/median/cumsum/cumprod as int64; float
 * accumulations run in double and are rounded once into the result. */
#include "ops/reduce.h"
#include "cpu/reduce.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* --- dims, shapes, checks ---------------------------------------------------------- */

static int check_cpu(const char *op, const dl_tensor *x) {
    if (dl_tensor_device(x).type != DL_DEVICE_CPU)
        return dl_error("%s: only CPU tensors are supported", op);
    return 0;
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

/* --- the (RO, O, R, I) plan ------------------------------------------------------------ */

typedef struct {
    dl_tensor *src; /* dense data the kernel reads (new reference); NULL when x is empty */
    dl_rshape s;    /* (RO, O, R, I) */
    int64_t nred;   /* elements reduced into each result: RO*R */
    int nk;         /* kept dims of size > 1, in the order the kernel writes them */
    int kdims[DL_MAX_DIMS];
} rplan;

/* logical: keep the dims in their logical order (for flat indices). */
static int plan_make(dl_tensor *x, const bool *mask, bool logical, rplan *p) {
    int act[DL_MAX_DIMS], na = 0;
    for (int d = 0; d < x->ndim; d++)
        if (x->shape[d] != 1) act[na++] = d;
    memset(p, 0, sizeof *p);
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
    if (!dense && !(s->tmp = dl_tensor_empty(p->nk, shape, kt, DL_CPU))) {
        dl_tensor_release(s->view);
        s->view = NULL;
        return -1;
    }
    *data = dl_tensor_data(s->tmp ? s->tmp : s->view);
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

/* --- float reductions ----------------------------------------------------------------- */

typedef enum { F_SUM, F_MEAN, F_PROD, F_AMAX, F_AMIN, F_VAR, F_STD, F_NORM, F_LSE } fop;

/* Runs the kernels of f over plan p into a[O*I]. */
static int float_kernels(fop f, const rplan *p, dl_dtype dt, double param, double *a) {
    int64_t n = p->s.O * p->s.I;
    const void *x = p->src ? dl_tensor_data(p->src) : NULL;
    double R = (double)p->nred, *shift = NULL;
    int rc = 0;
    switch (f) {
    case F_SUM: return dl_cpu_reduce_acc(DL_ACC_SUM, x, dt, &p->s, 0, NULL, a);
    case F_PROD: return dl_cpu_reduce_acc(DL_ACC_PROD, x, dt, &p->s, 0, NULL, a);
    case F_AMAX: return dl_cpu_reduce_acc(DL_ACC_MAX, x, dt, &p->s, 0, NULL, a);
    case F_AMIN: return dl_cpu_reduce_acc(DL_ACC_MIN, x, dt, &p->s, 0, NULL, a);
    case F_MEAN:
        rc = dl_cpu_reduce_acc(DL_ACC_SUM, x, dt, &p->s, 0, NULL, a);
        if (!rc) dl_cpu_reduce_finish(DL_FIN_DIV, a, n, R, NULL);
        return rc;
    case F_VAR:
    case F_STD:
        /* two passes: the mean, then the squared deviations from it */
        if (!(shift = malloc(sizeof(double) * (size_t)(n ? n : 1))))
            return dl_error("var: out of memory");
        rc = dl_cpu_reduce_acc(DL_ACC_SUM, x, dt, &p->s, 0, NULL, shift);
        if (!rc) {
            dl_cpu_reduce_finish(DL_FIN_DIV, shift, n, R, NULL);
            rc = dl_cpu_reduce_acc(DL_ACC_SQDEV, x, dt, &p->s, 0, shift, a);
        }
        if (!rc)
            dl_cpu_reduce_finish(f == F_STD ? DL_FIN_SQRT_DIV : DL_FIN_DIV, a, n,
                                 R - param > 0 ? R - param : 0, NULL);
        free(shift);
        return rc;
    case F_LSE:
        /* max + log(sum(exp(x - max))); an infinite max is not subtracted */
        if (!(shift = malloc(sizeof(double) * (size_t)(n ? n : 1))))
            return dl_error("logsumexp: out of memory");
        rc = dl_cpu_reduce_acc(DL_ACC_MAX, x, dt, &p->s, 0, NULL, shift);
        if (!rc) {
            for (int64_t i = 0; i < n; i++)
                if (isinf(shift[i])) shift[i] = 0;
            rc = dl_cpu_reduce_acc(DL_ACC_SUMEXP, x, dt, &p->s, 0, shift, a);
        }
        if (!rc) dl_cpu_reduce_finish(DL_FIN_LOG_SHIFT, a, n, 0, shift);
        free(shift);
        return rc;
    case F_NORM: {
        double pw = param;
        if (p->nred == 0) { /* the norm of nothing is 0 for every p, as PyTorch */
            for (int64_t i = 0; i < n; i++) a[i] = 0;
            return 0;
        }
        dl_acc_kind k = pw == 2           ? DL_ACC_SUMSQ
                        : pw == 1         ? DL_ACC_SUMABS
                        : pw == 0         ? DL_ACC_COUNTNZ
                        : pw == INFINITY  ? DL_ACC_MAXABS
                        : pw == -INFINITY ? DL_ACC_MINABS
                                          : DL_ACC_SUMPOW;
        rc = dl_cpu_reduce_acc(k, x, dt, &p->s, pw, NULL, a);
        if (!rc && k == DL_ACC_SUMSQ) dl_cpu_reduce_finish(DL_FIN_SQRT_DIV, a, n, 1, NULL);
        if (!rc && k == DL_ACC_SUMPOW) dl_cpu_reduce_finish(DL_FIN_POW, a, n, 1 / pw, NULL);
        return rc;
    }
    }
    return dl_error("reduce: unknown reduction");
}

/* f over mask of xc (float32 or float64), result of dtype odt. */
static dl_tensor *float_reduce(fop f, dl_tensor *xc, const bool *mask, bool keepdim, dl_dtype odt,
                               double param) {
    int64_t oshape[DL_MAX_DIMS];
    int ond = reduced_shape(xc, mask, keepdim, oshape);
    rplan p;
    if (plan_make(xc, mask, false, &p)) return NULL;
    dl_tensor *out = dl_tensor_empty(ond, oshape, odt, DL_CPU);
    sink s = {NULL, NULL};
    void *a = NULL;
    int rc = out ? sink_open(&s, out, DL_DTYPE_F64, xc, mask, keepdim, &p, &a) : -1;
    if (!rc) rc = sink_close(&s, float_kernels(f, &p, xc->dtype, param, a));
    dl_tensor_release(p.src);
    if (rc) {
        dl_tensor_release(out);
        return NULL;
    }
    return out;
}

/* --- integer sums and products --------------------------------------------------------- */

static dl_tensor *int_reduce(bool prod, dl_tensor *xc, const bool *mask, bool keepdim,
                             dl_dtype odt) {
    int64_t oshape[DL_MAX_DIMS];
    int ond = reduced_shape(xc, mask, keepdim, oshape);
    rplan p;
    if (plan_make(xc, mask, false, &p)) return NULL;
    dl_tensor *out = dl_tensor_empty(ond, oshape, odt, DL_CPU);
    sink s = {NULL, NULL};
    void *a = NULL;
    int rc = out ? sink_open(&s, out, DL_DTYPE_I64, xc, mask, keepdim, &p, &a) : -1;
    if (!rc)
        rc = sink_close(&s,
                        dl_cpu_reduce_acc_i64(prod, p.src ? dl_tensor_data(p.src) : NULL, &p.s, a));
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
    if (check_cpu(op, x) || dims_mask(op, x, ndims, dims, mask)) return NULL;
    bool given = dtype != DL_REDUCE_DTYPE_NONE;
    dl_dtype odt = given ? dtype : is_float(x->dtype) ? x->dtype : DL_DTYPE_I64;
    dl_tensor *xd = dl_tensor_to_dtype(x, given ? dtype : x->dtype);
    if (!xd) return NULL;
    dl_tensor *r = NULL;
    dl_tensor *xc = dl_tensor_to_dtype(xd, is_float(odt) ? float_compute(odt) : DL_DTYPE_I64);
    if (xc)
        r = is_float(odt) ? float_reduce(prod ? F_PROD : F_SUM, xc, mask, keepdim, odt, 0)
                          : int_reduce(prod, xc, mask, keepdim, odt);
    dl_tensor_release(xc);
    dl_tensor_release(xd);
    return r;
}

dl_tensor *dl_sum(dl_tensor *x, int ndims, const int *dims, bool keepdim, dl_dtype dtype) {
    return sum_prod("sum", false, x, ndims, dims, keepdim, dtype);
}

dl_tensor *dl_prod(dl_tensor *x, int ndims, const int *dims, bool keepdim, dl_dtype dtype) {
    return sum_prod("prod", true, x, ndims, dims, keepdim, dtype);
}

/* The common path of ops that need a floating input: checks, converts to the
 * compute dtype and runs f; the result has dtype odt. */
static dl_tensor *float_op(const char *op, fop f, dl_tensor *x, int ndims, const int *dims,
                           bool keepdim, dl_dtype odt, double param) {
    bool mask[DL_MAX_DIMS];
    if (dims_mask(op, x, ndims, dims, mask)) return NULL;
    dl_tensor *xc = dl_tensor_to_dtype(x, float_compute(odt));
    if (!xc) return NULL;
    dl_tensor *r = float_reduce(f, xc, mask, keepdim, odt, param);
    dl_tensor_release(xc);
    return r;
}

static int need_float(const char *op, const dl_tensor *x) {
    if (check_cpu(op, x)) return -1;
    if (!is_float(x->dtype))
        return dl_error("%s: expected a floating point input, got %s", op, dl_dtype_name(x->dtype));
    return 0;
}

dl_tensor *dl_mean(dl_tensor *x, int ndims, const int *dims, bool keepdim, dl_dtype dtype) {
    if (check_cpu("mean", x)) return NULL;
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
    return r;
}

dl_tensor *dl_var(dl_tensor *x, int ndims, const int *dims, double correction, bool keepdim) {
    if (need_float("var", x)) return NULL;
    return float_op("var", F_VAR, x, ndims, dims, keepdim, x->dtype, correction);
}

dl_tensor *dl_std(dl_tensor *x, int ndims, const int *dims, double correction, bool keepdim) {
    if (need_float("std", x)) return NULL;
    return float_op("std", F_STD, x, ndims, dims, keepdim, x->dtype, correction);
}

dl_tensor *dl_norm(dl_tensor *x, double p, int ndims, const int *dims, bool keepdim) {
    if (need_float("norm", x)) return NULL;
    if (p != p) {
        dl_error("norm: p must be a number, got nan");
        return NULL;
    }
    return float_op("norm", F_NORM, x, ndims, dims, keepdim, x->dtype, p);
}

dl_tensor *dl_logsumexp(dl_tensor *x, int ndims, const int *dims, bool keepdim) {
    if (check_cpu("logsumexp", x)) return NULL;
    dl_dtype odt = is_float(x->dtype) ? x->dtype : DL_DTYPE_F32;
    return float_op("logsumexp", F_LSE, x, ndims, dims, keepdim, odt, 0);
}

/* --- max, min and their indices ------------------------------------------------------------ */

/* Max or min over mask: values (x's dtype) into *vals and/or int64 indices
 * into *idx (either may be NULL).  full: no dim was given; indices then count
 * in logical row-major order over the whole tensor (a flat index). */
static int minmax(const char *op, bool mx, dl_tensor *x, const bool *mask, bool keepdim, bool full,
                  dl_tensor **vals, dl_tensor **idx) {
    if (vals) *vals = NULL;
    if (idx) *idx = NULL;
    if (check_cpu(op, x)) return -1;
    dl_dtype ct = is_float(x->dtype) ? float_compute(x->dtype) : DL_DTYPE_I64;
    dl_dtype kt = is_float(x->dtype) ? DL_DTYPE_F64 : DL_DTYPE_I64;
    int64_t oshape[DL_MAX_DIMS];
    int ond = reduced_shape(x, mask, keepdim, oshape);
    dl_tensor *xc = dl_tensor_to_dtype(x, ct);
    if (!xc) return -1;
    rplan p;
    if (plan_make(xc, mask, full, &p)) {
        dl_tensor_release(xc);
        return -1;
    }
    dl_tensor *vo = NULL, *io = NULL;
    sink sv = {NULL, NULL}, si = {NULL, NULL};
    void *va = NULL, *ia = NULL, *own = NULL;
    bool vopen = false, iopen = false;
    int rc = 0;
    if (p.nred == 0 && p.s.O * p.s.I > 0) rc = empty_error(op, x, mask, full);
    if (!rc && idx && p.s.RO != 1) rc = dl_error("%s: internal error: indices over split dims", op);
    if (!rc && vals) {
        vo = dl_tensor_empty(ond, oshape, x->dtype, DL_CPU);
        rc = vo ? sink_open(&sv, vo, kt, xc, mask, keepdim, &p, &va) : -1;
        vopen = rc == 0;
    }
    if (!rc && idx) {
        io = dl_tensor_empty(ond, oshape, DL_DTYPE_I64, DL_CPU);
        rc = io ? sink_open(&si, io, DL_DTYPE_I64, xc, mask, keepdim, &p, &ia) : -1;
        iopen = rc == 0;
    }
    if (!rc && !vals && !(va = own = malloc(8 * (size_t)(p.s.O * p.s.I + 1))))
        rc = dl_error("%s: out of memory", op);
    if (!rc) rc = dl_cpu_reduce_minmax(mx, p.src ? dl_tensor_data(p.src) : NULL, ct, &p.s, va, ia);
    free(own);
    if (vopen) rc = sink_close(&sv, rc);
    if (iopen) rc = sink_close(&si, rc);
    dl_tensor_release(p.src);
    dl_tensor_release(xc);
    if (rc) {
        dl_tensor_release(vo);
        dl_tensor_release(io);
        return -1;
    }
    if (vals) *vals = vo;
    if (idx) *idx = io;
    return 0;
}

/* Values only: floats take the vectorised accumulation, integers minmax. */
static dl_tensor *amax_amin(const char *op, bool mx, dl_tensor *x, int ndims, const int *dims,
                            bool keepdim) {
    bool mask[DL_MAX_DIMS];
    dl_tensor *v;
    if (check_cpu(op, x) || dims_mask(op, x, ndims, dims, mask)) return NULL;
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

dl_tensor *dl_amax(dl_tensor *x, int ndims, const int *dims, bool keepdim) {
    return amax_amin("amax", true, x, ndims, dims, keepdim);
}
dl_tensor *dl_amin(dl_tensor *x, int ndims, const int *dims, bool keepdim) {
    return amax_amin("amin", false, x, ndims, dims, keepdim);
}
dl_tensor *dl_max_all(dl_tensor *x) {
    return amax_amin("max", true, x, 0, NULL, false);
}
dl_tensor *dl_min_all(dl_tensor *x) {
    return amax_amin("min", false, x, 0, NULL, false);
}

static int minmax_dim(const char *op, bool mx, dl_tensor *x, int dim, bool keepdim,
                      dl_tensor **vals, dl_tensor **idx) {
    bool mask[DL_MAX_DIMS];
    *vals = *idx = NULL;
    if (dims_mask(op, x, 1, &dim, mask)) return -1;
    return minmax(op, mx, x, mask, keepdim, false, vals, idx);
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
    if (check_cpu(op, x) || dims_mask(op, x, ndims, dims, mask)) return NULL;
    int64_t oshape[DL_MAX_DIMS];
    int ond = reduced_shape(x, mask, keepdim, oshape);
    dl_tensor *xc = dl_tensor_to_dtype(x, DL_DTYPE_BOOL);
    if (!xc) return NULL;
    rplan p;
    dl_tensor *out = NULL;
    int rc = plan_make(xc, mask, false, &p);
    if (!rc) {
        out = dl_tensor_empty(ond, oshape, DL_DTYPE_BOOL, DL_CPU);
        sink s = {NULL, NULL};
        void *a = NULL;
        rc = out ? sink_open(&s, out, DL_DTYPE_BOOL, xc, mask, keepdim, &p, &a) : -1;
        if (!rc)
            rc = sink_close(
                &s, dl_cpu_reduce_allany(all, p.src ? dl_tensor_data(p.src) : NULL, &p.s, a));
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
    *vals = NULL;
    if (idx) *idx = NULL;
    if (check_cpu(op, x)) return -1;
    dl_dtype ct = is_float(x->dtype) ? float_compute(x->dtype) : DL_DTYPE_I64;
    dl_dtype kt = is_float(x->dtype) ? DL_DTYPE_F64 : DL_DTYPE_I64;
    int64_t oshape[DL_MAX_DIMS];
    int ond = reduced_shape(x, mask, keepdim, oshape);
    dl_tensor *xc = dl_tensor_to_dtype(x, ct);
    if (!xc) return -1;
    rplan p;
    if (plan_make(xc, mask, false, &p)) {
        dl_tensor_release(xc);
        return -1;
    }
    dl_tensor *vo = dl_tensor_empty(ond, oshape, x->dtype, DL_CPU);
    dl_tensor *io = dl_tensor_empty(ond, oshape, DL_DTYPE_I64, DL_CPU);
    sink sv = {NULL, NULL}, si = {NULL, NULL};
    void *va = NULL, *ia = NULL;
    int rc = vo && io ? sink_open(&sv, vo, kt, xc, mask, keepdim, &p, &va) : -1;
    bool vopen = rc == 0, iopen = false;
    if (!rc) iopen = (rc = sink_open(&si, io, DL_DTYPE_I64, xc, mask, keepdim, &p, &ia)) == 0;
    if (!rc && p.nred == 0 && p.s.O * p.s.I > 0) {
        if (idx)
            rc = empty_error(op, x, mask, false);
        else
            *(double *)va = NAN; /* median of an empty tensor: nan, as PyTorch */
    } else if (!rc) {
        /* one reduced dim (or all of them): RO is 1 */
        rc = dl_cpu_median(p.src ? dl_tensor_data(p.src) : NULL, ct, p.s.O, p.s.R, p.s.I, va, ia);
    }
    if (iopen) rc = sink_close(&si, rc);
    if (vopen) rc = sink_close(&sv, rc);
    dl_tensor_release(p.src);
    dl_tensor_release(xc);
    if (rc) {
        dl_tensor_release(vo);
        dl_tensor_release(io);
        return -1;
    }
    *vals = vo;
    if (idx)
        *idx = io;
    else
        dl_tensor_release(io);
    return 0;
}

dl_tensor *dl_median_all(dl_tensor *x) {
    bool mask[DL_MAX_DIMS];
    dl_tensor *v;
    if (dims_mask("median", x, 0, NULL, mask)) return NULL;
    if (dl_tensor_numel(x) == 0 && !is_float(x->dtype)) {
        dl_error("median: cannot take the median of an empty %s tensor", dl_dtype_name(x->dtype));
        return NULL;
    }
    return median(x, mask, false, &v, NULL) ? NULL : v;
}

int dl_median_dim(dl_tensor *x, int dim, bool keepdim, dl_tensor **values, dl_tensor **indices) {
    bool mask[DL_MAX_DIMS];
    *values = *indices = NULL;
    if (dims_mask("median", x, 1, &dim, mask)) return -1;
    return median(x, mask, keepdim, values, indices);
}

/* --- scans -------------------------------------------------------------------------------------
 */

static dl_tensor *scan(const char *op, bool prod, dl_tensor *x, int dim, dl_dtype dtype) {
    if (check_cpu(op, x)) return NULL;
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
    dl_tensor *out = xc ? dl_tensor_empty(x->ndim, x->shape, odt, DL_CPU) : NULL;
    dl_tensor *tmp = out && odt != ct ? dl_tensor_empty(x->ndim, x->shape, ct, DL_CPU) : NULL;
    int rc = -1;
    if (out && (odt == ct || tmp)) {
        rc = dl_cpu_scan(prod, dl_tensor_data(xc), ct, O, R, I, dl_tensor_data(tmp ? tmp : out));
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

dl_tensor *dl_cumsum(dl_tensor *x, int dim, dl_dtype dtype) {
    return scan("cumsum", false, x, dim, dtype);
}
dl_tensor *dl_cumprod(dl_tensor *x, int dim, dl_dtype dtype) {
    return scan("cumprod", true, x, dim, dtype);
}
