/* elementwise.c (ops) - the elementwise op family: validation, PyTorch's
 * type promotion, broadcasting, output allocation and dispatch to the CPU
 * kernels (src/cpu/elementwise.c).
 *
 * Every op works in three dtypes of "compute": float32 (also for float16 and
 * bfloat16 results, which are rounded back at the end), float64, and int64
 * (for every integer and bool result; narrower integers wrap when converted
 * back).  Inputs are converted to the compute dtype (no copy when they already
 * have it) and expanded to the broadcast shape; kernels see one dtype.
 * In-place forms write straight into self when self already has the compute
 * dtype (the fast path optimizers hit), else they compute out of place and
 * copy the result into self. */
#include "ops/elementwise.h"
#include "core/iter.h"
#include "cpu/elementwise.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* --- names and classes -------------------------------------------------------- */

static const char *const binary_names[DL_BINARY_COUNT] = {
    [DL_BINARY_ADD] = "add",
    [DL_BINARY_SUB] = "sub",
    [DL_BINARY_MUL] = "mul",
    [DL_BINARY_DIV] = "div",
    [DL_BINARY_DIV_FLOOR] = "div",
    [DL_BINARY_DIV_TRUNC] = "div",
    [DL_BINARY_POW] = "pow",
    [DL_BINARY_MAXIMUM] = "maximum",
    [DL_BINARY_MINIMUM] = "minimum",
    [DL_BINARY_REMAINDER] = "remainder",
    [DL_BINARY_FMOD] = "fmod",
    [DL_BINARY_ATAN2] = "atan2",
    [DL_BINARY_EQ] = "eq",
    [DL_BINARY_NE] = "ne",
    [DL_BINARY_LT] = "lt",
    [DL_BINARY_LE] = "le",
    [DL_BINARY_GT] = "gt",
    [DL_BINARY_GE] = "ge",
    [DL_BINARY_LOGICAL_AND] = "logical_and",
    [DL_BINARY_LOGICAL_OR] = "logical_or",
    [DL_BINARY_LOGICAL_XOR] = "logical_xor",
};

static const char *const unary_names[DL_UNARY_COUNT] = {
    [DL_UNARY_NEG] = "neg",
    [DL_UNARY_ABS] = "abs",
    [DL_UNARY_SIGN] = "sign",
    [DL_UNARY_RELU] = "relu",
    [DL_UNARY_FLOOR] = "floor",
    [DL_UNARY_CEIL] = "ceil",
    [DL_UNARY_ROUND] = "round",
    [DL_UNARY_TRUNC] = "trunc",
    [DL_UNARY_SQUARE] = "square",
    [DL_UNARY_EXP] = "exp",
    [DL_UNARY_EXP2] = "exp2",
    [DL_UNARY_EXPM1] = "expm1",
    [DL_UNARY_LOG] = "log",
    [DL_UNARY_LOG2] = "log2",
    [DL_UNARY_LOG10] = "log10",
    [DL_UNARY_LOG1P] = "log1p",
    [DL_UNARY_SQRT] = "sqrt",
    [DL_UNARY_RSQRT] = "rsqrt",
    [DL_UNARY_RECIPROCAL] = "reciprocal",
    [DL_UNARY_SIN] = "sin",
    [DL_UNARY_COS] = "cos",
    [DL_UNARY_TAN] = "tan",
    [DL_UNARY_ASIN] = "asin",
    [DL_UNARY_ACOS] = "acos",
    [DL_UNARY_ATAN] = "atan",
    [DL_UNARY_SINH] = "sinh",
    [DL_UNARY_COSH] = "cosh",
    [DL_UNARY_TANH] = "tanh",
    [DL_UNARY_SIGMOID] = "sigmoid",
    [DL_UNARY_ERF] = "erf",
    [DL_UNARY_FRAC] = "frac",
    [DL_UNARY_LOGICAL_NOT] = "logical_not",
    [DL_UNARY_ISNAN] = "isnan",
    [DL_UNARY_ISINF] = "isinf",
    [DL_UNARY_ISFINITE] = "isfinite",
};

const char *dl_binary_op_name(dl_binary_op op) {
    return (unsigned)op < DL_BINARY_COUNT ? binary_names[op] : "?";
}

const char *dl_unary_op_name(dl_unary_op op) {
    return (unsigned)op < DL_UNARY_COUNT ? unary_names[op] : "?";
}

static bool is_comparison(dl_binary_op op) {
    return op >= DL_BINARY_EQ && op <= DL_BINARY_GE;
}
static bool is_logical(dl_binary_op op) {
    return op >= DL_BINARY_LOGICAL_AND && op <= DL_BINARY_LOGICAL_XOR;
}
static bool keeps_integers(dl_unary_op op) {
    return op <= DL_UNARY_SQUARE;
}
static bool is_predicate(dl_unary_op op) {
    return op >= DL_UNARY_LOGICAL_NOT;
}

/* --- shared helpers --------------------------------------------------------------- */

/* The dtype a kernel computes in for a result dtype. */
static dl_dtype compute_dtype(dl_dtype result) {
    if (result == DL_DTYPE_F64) return DL_DTYPE_F64;
    if (dl_dtype_is_floating(result)) return DL_DTYPE_F32;
    return DL_DTYPE_I64;
}

/* PyTorch's canCast for in-place results: never float -> integer/bool, never
 * integer -> bool. */
static bool can_cast(dl_dtype from, dl_dtype to) {
    return dl_dtype_kind(from) <= dl_dtype_kind(to);
}

static int check_cpu(const char *op, const dl_tensor *t) {
    if (t && t->storage->device.type != DL_DEVICE_CPU)
        return dl_error("%s: only CPU tensors are supported by this op so far", op);
    return 0;
}

static int check_cast(const char *op, dl_dtype result, const dl_tensor *self) {
    if (can_cast(result, self->dtype)) return 0;
    return dl_error("%s: result type %s can't be cast to the desired output type %s", op,
                    dl_dtype_name(result), dl_dtype_name(self->dtype));
}

/* In place, the broadcast shape of self and the others must be self's. */
static int check_inplace_shape(const char *op, const dl_tensor *self, int nd,
                               const int64_t *shape) {
    bool same = nd == self->ndim;
    for (int i = 0; same && i < nd; i++) same = shape[i] == self->shape[i];
    if (!same) {
        char b1[128], b2[128];
        return dl_error("%s: output with shape %s doesn't match the broadcast shape %s", op,
                        dl_shape_str(self->ndim, self->shape, b1, sizeof b1),
                        dl_shape_str(nd, shape, b2, sizeof b2));
    }
    for (int i = 0; i < self->ndim; i++)
        if (self->strides[i] == 0 && self->shape[i] > 1)
            return dl_error("%s: cannot write in place into an expanded tensor (several "
                            "elements share one memory location); clone it first",
                            op);
    return 0;
}

/* Converts each of n tensors to the compute dtype (NULL entries stay NULL)
 * and expands it to shape; out[i] are new references.  An operand wider than
 * a narrow integer common dtype (an int64 scalar against uint8) is first cast
 * to common, so it wraps as PyTorch's cast to the common dtype does.  On
 * failure releases what it made. */
static int prepare(int n, dl_tensor *const *in, dl_dtype common, dl_dtype compute, int nd,
                   const int64_t *shape, dl_tensor **out) {
    for (int i = 0; i < n; i++) out[i] = NULL;
    for (int i = 0; i < n; i++) {
        if (!in[i]) continue;
        dl_tensor *c;
        if (!dl_dtype_is_floating(common) && common != compute && in[i]->dtype != common) {
            dl_tensor *w = dl_tensor_to_dtype(in[i], common);
            c = w ? dl_tensor_to_dtype(w, compute) : NULL;
            dl_tensor_release(w);
        } else {
            c = dl_tensor_to_dtype(in[i], compute);
        }
        out[i] = c ? dl_tensor_expand(c, nd, shape) : NULL;
        dl_tensor_release(c);
        if (!out[i]) {
            for (int j = 0; j < i; j++) dl_tensor_release(out[j]);
            return -1;
        }
    }
    return 0;
}

static void release_all(int n, dl_tensor **t) {
    for (int i = 0; i < n; i++) dl_tensor_release(t[i]);
}

/* Takes ownership of out (computed in its dtype) and returns it in dtype. */
static dl_tensor *finish_as(dl_tensor *out, dl_dtype dtype) {
    if (!out || out->dtype == dtype) return out;
    dl_tensor *r = dl_tensor_to_dtype(out, dtype);
    dl_tensor_release(out);
    return r;
}

/* Copies a computed result into self (takes ownership of r). */
static int copy_into(dl_tensor *self, dl_tensor *r) {
    if (!r) return -1;
    int rc = dl_tensor_copy_(self, r); /* bumps the version */
    dl_tensor_release(r);
    return rc;
}

/* Result type over up to three operands (NULL skipped), PyTorch's rule:
 * dimensioned tensors decide, 0-dim ones only when they raise the category. */
static dl_dtype result_type_n(int n, dl_tensor *const *t) {
    bool have_dim = false, have_zero = false;
    dl_dtype dim = DL_DTYPE_BOOL, zero = DL_DTYPE_BOOL;
    for (int i = 0; i < n; i++) {
        if (!t[i]) continue;
        if (t[i]->ndim > 0) {
            dim = have_dim ? dl_promote_types(dim, t[i]->dtype) : t[i]->dtype;
            have_dim = true;
        } else {
            zero = have_zero ? dl_promote_types(zero, t[i]->dtype) : t[i]->dtype;
            have_zero = true;
        }
    }
    if (!have_dim) return zero;
    if (have_zero && dl_dtype_kind(zero) > dl_dtype_kind(dim)) return zero;
    return dim;
}

/* --- binary ---------------------------------------------------------------------- */

typedef struct {
    dl_dtype result;     /* the op's result dtype */
    dl_dtype common;     /* the operands' common dtype (PyTorch casts them to it) */
    dl_dtype compute;    /* what the kernel reads */
    dl_dtype kernel_out; /* what the kernel writes: compute, or bool */
} op_types;

static int binary_types(const char *name, dl_binary_op op, const dl_tensor *a, const dl_tensor *b,
                        double alpha, op_types *ty) {
    dl_dtype common = dl_result_type(a, b);
    if (is_comparison(op)) {
        *ty = (op_types){DL_DTYPE_BOOL, common, compute_dtype(common), DL_DTYPE_BOOL};
        return 0;
    }
    if (is_logical(op)) {
        *ty = (op_types){DL_DTYPE_BOOL, DL_DTYPE_BOOL, DL_DTYPE_BOOL, DL_DTYPE_BOOL};
        return 0;
    }
    if ((op == DL_BINARY_DIV || op == DL_BINARY_ATAN2) && !dl_dtype_is_floating(common))
        common = DL_DTYPE_F32;
    switch (op) {
    case DL_BINARY_SUB:
        if (a->dtype == DL_DTYPE_BOOL || b->dtype == DL_DTYPE_BOOL)
            return dl_error("%s: subtraction with a bool tensor is not supported (use "
                            "logical_xor, or logical_not to invert a mask)",
                            name);
        break;
    case DL_BINARY_POW:
    case DL_BINARY_REMAINDER:
    case DL_BINARY_FMOD:
    case DL_BINARY_DIV_FLOOR:
    case DL_BINARY_DIV_TRUNC:
        if (common == DL_DTYPE_BOOL)
            return dl_error("%s: not supported for bool tensors (convert with :long() first)",
                            name);
        break;
    default: break;
    }
    if ((op == DL_BINARY_ADD || op == DL_BINARY_SUB) && !dl_dtype_is_floating(common) &&
        (alpha != floor(alpha) || fabs(alpha) >= 9.2e18))
        return dl_error("%s: alpha must be an integer for integer tensors (got %g)", name, alpha);
    dl_dtype c = compute_dtype(common);
    *ty = (op_types){common, common, c, c};
    return 0;
}

static int zero_division(const char *name) {
    return dl_error("%s: integer division by zero", name);
}

dl_tensor *dl_binary(dl_binary_op op, dl_tensor *a, dl_tensor *b, double alpha) {
    const char *name = dl_binary_op_name(op);
    op_types ty;
    if (check_cpu(name, a) || check_cpu(name, b) || binary_types(name, op, a, b, alpha, &ty))
        return NULL;
    int64_t shape[DL_MAX_DIMS];
    int nd = dl_broadcast_shapes(name, a->ndim, a->shape, b->ndim, b->shape, shape);
    if (nd < 0) return NULL;
    dl_tensor *in[2] = {a, b}, *ops[2];
    if (prepare(2, in, ty.common, ty.compute, nd, shape, ops)) return NULL;
    dl_tensor *out = dl_tensor_empty(nd, shape, ty.kernel_out, DL_CPU);
    if (out && dl_cpu_binary(op, out, ops[0], ops[1], alpha)) {
        zero_division(name);
        dl_tensor_release(out);
        out = NULL;
    }
    release_all(2, ops);
    return finish_as(out, ty.result);
}

int dl_binary_(dl_binary_op op, dl_tensor *self, dl_tensor *other, double alpha) {
    char name[40];
    snprintf(name, sizeof name, "%s_", dl_binary_op_name(op));
    op_types ty;
    if (check_cpu(name, self) || check_cpu(name, other) ||
        binary_types(name, op, self, other, alpha, &ty) || check_cast(name, ty.result, self))
        return -1;
    int64_t shape[DL_MAX_DIMS];
    int nd = dl_broadcast_shapes(name, self->ndim, self->shape, other->ndim, other->shape, shape);
    if (nd < 0 || check_inplace_shape(name, self, nd, shape)) return -1;
    if (self->dtype != ty.compute || ty.kernel_out != ty.compute)
        return copy_into(self, dl_binary(op, self, other, alpha));
    dl_tensor *eo;
    if (prepare(1, &other, ty.common, ty.compute, nd, shape, &eo)) return -1;
    int rc = dl_cpu_binary(op, self, self, eo, alpha);
    dl_tensor_release(eo);
    dl_tensor_bump_version(self);
    return rc ? zero_division(name) : 0;
}

dl_tensor *dl_add(dl_tensor *a, dl_tensor *b, double alpha) {
    return dl_binary(DL_BINARY_ADD, a, b, alpha);
}
dl_tensor *dl_sub(dl_tensor *a, dl_tensor *b, double alpha) {
    return dl_binary(DL_BINARY_SUB, a, b, alpha);
}
dl_tensor *dl_mul(dl_tensor *a, dl_tensor *b) {
    return dl_binary(DL_BINARY_MUL, a, b, 1);
}
dl_tensor *dl_div(dl_tensor *a, dl_tensor *b) {
    return dl_binary(DL_BINARY_DIV, a, b, 1);
}
dl_tensor *dl_pow(dl_tensor *a, dl_tensor *b) {
    return dl_binary(DL_BINARY_POW, a, b, 1);
}
dl_tensor *dl_maximum(dl_tensor *a, dl_tensor *b) {
    return dl_binary(DL_BINARY_MAXIMUM, a, b, 1);
}
dl_tensor *dl_minimum(dl_tensor *a, dl_tensor *b) {
    return dl_binary(DL_BINARY_MINIMUM, a, b, 1);
}
int dl_add_(dl_tensor *self, dl_tensor *other, double alpha) {
    return dl_binary_(DL_BINARY_ADD, self, other, alpha);
}
int dl_sub_(dl_tensor *self, dl_tensor *other, double alpha) {
    return dl_binary_(DL_BINARY_SUB, self, other, alpha);
}
int dl_mul_(dl_tensor *self, dl_tensor *other) {
    return dl_binary_(DL_BINARY_MUL, self, other, 1);
}
int dl_div_(dl_tensor *self, dl_tensor *other) {
    return dl_binary_(DL_BINARY_DIV, self, other, 1);
}

/* An integer base with a negative integer scalar exponent is an error. */
static int check_pow_scalar(const char *op, const dl_tensor *a, const dl_tensor *e) {
    if (dl_dtype_is_floating(a->dtype) || dl_dtype_is_floating(e->dtype)) return 0;
    if (dl_tensor_numel(e) != 1) return 0;
    int64_t v;
    if (dl_tensor_item_i64(e, &v)) return -1;
    if (v < 0) return dl_error("%s: integers to negative integer powers are not allowed", op);
    return 0;
}

dl_tensor *dl_pow_scalar(dl_tensor *a, dl_tensor *exponent) {
    if (check_pow_scalar("pow", a, exponent)) return NULL;
    return dl_binary(DL_BINARY_POW, a, exponent, 1);
}

int dl_pow_scalar_(dl_tensor *self, dl_tensor *exponent) {
    if (check_pow_scalar("pow_", self, exponent)) return -1;
    return dl_binary_(DL_BINARY_POW, self, exponent, 1);
}

/* --- unary ------------------------------------------------------------------------ */

static int unary_types(const char *name, dl_unary_op op, const dl_tensor *x, op_types *ty) {
    dl_dtype d = x->dtype;
    if (is_predicate(op)) {
        /* logical_not reads truth values; the others need floats (integers are
         * answered without a kernel) */
        dl_dtype c = op == DL_UNARY_LOGICAL_NOT ? DL_DTYPE_BOOL : compute_dtype(d);
        *ty = (op_types){DL_DTYPE_BOOL, d, c, DL_DTYPE_BOOL};
        return 0;
    }
    if (!keeps_integers(op)) {
        dl_dtype r = dl_dtype_is_floating(d) ? d : DL_DTYPE_F32;
        *ty = (op_types){r, d, compute_dtype(r), compute_dtype(r)};
        return 0;
    }
    if (d == DL_DTYPE_BOOL) {
        if (op == DL_UNARY_SQUARE)
            d = DL_DTYPE_I64;
        else if (op == DL_UNARY_NEG)
            return dl_error("%s: negating a bool tensor is not supported (use logical_not to "
                            "invert a mask)",
                            name);
        else if (op != DL_UNARY_SIGN)
            return dl_error("%s: not supported for bool tensors", name);
    }
    *ty = (op_types){d, x->dtype, compute_dtype(d), compute_dtype(d)};
    return 0;
}

dl_tensor *dl_unary(dl_unary_op op, dl_tensor *x) {
    const char *name = dl_unary_op_name(op);
    op_types ty;
    if (check_cpu(name, x) || unary_types(name, op, x, &ty)) return NULL;
    if ((op == DL_UNARY_ISNAN || op == DL_UNARY_ISINF || op == DL_UNARY_ISFINITE) &&
        !dl_dtype_is_floating(x->dtype))
        return dl_tensor_full(x->ndim, x->shape, op == DL_UNARY_ISFINITE, DL_DTYPE_BOOL, DL_CPU);
    dl_tensor *cx;
    if (prepare(1, &x, x->dtype, ty.compute, x->ndim, x->shape, &cx)) return NULL;
    dl_tensor *out = dl_tensor_empty(x->ndim, x->shape, ty.kernel_out, DL_CPU);
    if (out) dl_cpu_unary(op, out, cx);
    dl_tensor_release(cx);
    return finish_as(out, ty.result);
}

int dl_unary_(dl_unary_op op, dl_tensor *self) {
    char name[40];
    snprintf(name, sizeof name, "%s_", dl_unary_op_name(op));
    op_types ty;
    if (check_cpu(name, self) || unary_types(name, op, self, &ty) ||
        check_cast(name, ty.result, self) ||
        check_inplace_shape(name, self, self->ndim, self->shape))
        return -1;
    if (self->dtype != ty.compute || ty.kernel_out != ty.compute)
        return copy_into(self, dl_unary(op, self));
    dl_cpu_unary(op, self, self);
    dl_tensor_bump_version(self);
    return 0;
}

/* --- clamp ------------------------------------------------------------------------- */

/* Promotion, broadcast shape and the compute dtype of clamp(x, lo, hi). */
static int clamp_plan(const char *name, dl_tensor *x, dl_tensor *lo, dl_tensor *hi, op_types *ty,
                      int64_t *shape) {
    if (!lo && !hi) return dl_error("%s: at least one of min and max must be given", name);
    if (check_cpu(name, x) || check_cpu(name, lo) || check_cpu(name, hi)) return -1;
    dl_tensor *all[3] = {x, lo, hi};
    dl_dtype r = result_type_n(3, all);
    *ty = (op_types){r, r, compute_dtype(r), compute_dtype(r)};
    int nd = x->ndim;
    memcpy(shape, x->shape, sizeof(int64_t) * (size_t)nd);
    for (int i = 1; i < 3; i++) {
        if (!all[i]) continue;
        int64_t tmp[DL_MAX_DIMS];
        nd = dl_broadcast_shapes(name, nd, shape, all[i]->ndim, all[i]->shape, tmp);
        if (nd < 0) return -1;
        memcpy(shape, tmp, sizeof(int64_t) * (size_t)nd);
    }
    return nd;
}

/* A missing bound as a 0-dim tensor of dtype (float: -/+inf, int: the extremes). */
static dl_tensor *open_bound(dl_dtype dtype, bool upper) {
    dl_tensor *t = dl_tensor_empty(0, NULL, dtype, DL_CPU);
    if (!t) return NULL;
    if (dl_dtype_is_floating(dtype))
        dl_store_f64(dl_tensor_data(t), dtype, upper ? INFINITY : -INFINITY);
    else
        dl_store_i64(dl_tensor_data(t), dtype, upper ? INT64_MAX : INT64_MIN);
    return t;
}

/* Runs the clamp kernel into out (of the compute dtype and shape). */
static int clamp_run(dl_tensor *out, dl_tensor *x, dl_tensor *lo, dl_tensor *hi,
                     const op_types *ty) {
    dl_tensor *in[3] = {x, lo, hi}, *ops[3];
    if (prepare(3, in, ty->result, ty->compute, out->ndim, out->shape, ops)) return -1;
    /* missing bounds: open ones, already in the compute dtype (never wrapped) */
    for (int i = 1; i < 3; i++) {
        if (ops[i]) continue;
        dl_tensor *b = open_bound(ty->compute, i == 2);
        ops[i] = b ? dl_tensor_expand(b, out->ndim, out->shape) : NULL;
        dl_tensor_release(b);
        if (!ops[i]) {
            release_all(3, ops);
            return -1;
        }
    }
    dl_cpu_clamp(out, ops[0], ops[1], ops[2]);
    release_all(3, ops);
    return 0;
}

dl_tensor *dl_clamp(dl_tensor *x, dl_tensor *lo, dl_tensor *hi) {
    op_types ty;
    int64_t shape[DL_MAX_DIMS];
    int nd = clamp_plan("clamp", x, lo, hi, &ty, shape);
    if (nd < 0) return NULL;
    dl_tensor *out = dl_tensor_empty(nd, shape, ty.compute, DL_CPU);
    if (out && clamp_run(out, x, lo, hi, &ty)) {
        dl_tensor_release(out);
        return NULL;
    }
    return finish_as(out, ty.result);
}

int dl_clamp_(dl_tensor *self, dl_tensor *lo, dl_tensor *hi) {
    op_types ty;
    int64_t shape[DL_MAX_DIMS];
    int nd = clamp_plan("clamp_", self, lo, hi, &ty, shape);
    if (nd < 0 || check_cast("clamp_", ty.result, self) ||
        check_inplace_shape("clamp_", self, nd, shape))
        return -1;
    if (self->dtype != ty.compute) return copy_into(self, dl_clamp(self, lo, hi));
    int rc = clamp_run(self, self, lo, hi, &ty);
    if (rc == 0) dl_tensor_bump_version(self);
    return rc;
}

/* --- where and masked_fill ------------------------------------------------------------ */

static int check_mask(const char *op, const char *what, const dl_tensor *m) {
    if (m->dtype == DL_DTYPE_BOOL || m->dtype == DL_DTYPE_U8) return 0;
    return dl_error("%s: %s must be a bool tensor, got %s", op, what, dl_dtype_name(m->dtype));
}

dl_tensor *dl_where(dl_tensor *cond, dl_tensor *a, dl_tensor *b) {
    if (check_cpu("where", cond) || check_cpu("where", a) || check_cpu("where", b) ||
        check_mask("where", "condition", cond))
        return NULL;
    dl_dtype r = dl_result_type(a, b);
    int64_t s1[DL_MAX_DIMS], shape[DL_MAX_DIMS];
    int n1 = dl_broadcast_shapes("where", cond->ndim, cond->shape, a->ndim, a->shape, s1);
    if (n1 < 0) return NULL;
    int nd = dl_broadcast_shapes("where", n1, s1, b->ndim, b->shape, shape);
    if (nd < 0) return NULL;
    dl_tensor *ec = dl_tensor_expand(cond, nd, shape);
    if (!ec) return NULL;
    dl_tensor *in[2] = {a, b}, *ops[2];
    if (prepare(2, in, r, r, nd, shape, ops)) {
        dl_tensor_release(ec);
        return NULL;
    }
    dl_tensor *out = dl_tensor_empty(nd, shape, r, DL_CPU);
    if (out) dl_cpu_where(out, ec, ops[0], ops[1]);
    dl_tensor_release(ec);
    release_all(2, ops);
    return out;
}

static int masked_fill_checks(const char *op, dl_tensor *x, dl_tensor *mask, dl_tensor *value) {
    if (check_cpu(op, x) || check_cpu(op, mask) || check_cpu(op, value) ||
        check_mask(op, "mask", mask))
        return -1;
    if (value->ndim != 0)
        return dl_error("%s: value must be a number or a 0-dim tensor (got a tensor with %d "
                        "dimensions)",
                        op, value->ndim);
    return 0;
}

/* The fill into self, whose shape mask already broadcasts to. */
static int masked_fill_run(dl_tensor *self, dl_tensor *mask, dl_tensor *value) {
    dl_tensor *v = dl_tensor_to_dtype(value, self->dtype);
    dl_tensor *em = v ? dl_tensor_expand(mask, self->ndim, self->shape) : NULL;
    int rc = -1;
    if (em) {
        dl_cpu_masked_fill(self, em, dl_tensor_data(v));
        dl_tensor_bump_version(self);
        rc = 0;
    }
    dl_tensor_release(em);
    dl_tensor_release(v);
    return rc;
}

dl_tensor *dl_masked_fill(dl_tensor *x, dl_tensor *mask, dl_tensor *value) {
    if (masked_fill_checks("masked_fill", x, mask, value)) return NULL;
    int64_t shape[DL_MAX_DIMS];
    int nd = dl_broadcast_shapes("masked_fill", x->ndim, x->shape, mask->ndim, mask->shape, shape);
    if (nd < 0) return NULL;
    dl_tensor *out = dl_tensor_empty(nd, shape, x->dtype, DL_CPU);
    if (out && (dl_tensor_copy_(out, x) || masked_fill_run(out, mask, value))) {
        dl_tensor_release(out);
        return NULL;
    }
    return out;
}

int dl_masked_fill_(dl_tensor *self, dl_tensor *mask, dl_tensor *value) {
    if (masked_fill_checks("masked_fill_", self, mask, value)) return -1;
    int64_t shape[DL_MAX_DIMS];
    int nd = dl_broadcast_shapes("masked_fill_", self->ndim, self->shape, mask->ndim, mask->shape,
                                 shape);
    if (nd < 0 || check_inplace_shape("masked_fill_", self, nd, shape)) return -1;
    return masked_fill_run(self, mask, value);
}

/* --- equal, isclose, allclose ------------------------------------------------------------ */

/* *out = every byte of the bool tensor t (contiguous, fresh) is true. */
static bool all_true(const dl_tensor *t) {
    int64_t n = dl_tensor_numel(t);
    return n == 0 || memchr(dl_tensor_data(t), 0, (size_t)n) == NULL;
}

int dl_equal(dl_tensor *a, dl_tensor *b, bool *out) {
    if (check_cpu("equal", a) || check_cpu("equal", b)) return -1;
    if (!dl_shape_equal(a, b)) {
        *out = false;
        return 0;
    }
    dl_tensor *eq = dl_binary(DL_BINARY_EQ, a, b, 1);
    if (!eq) return -1;
    *out = all_true(eq);
    dl_tensor_release(eq);
    return 0;
}

dl_tensor *dl_isclose(dl_tensor *a, dl_tensor *b, double rtol, double atol, bool equal_nan) {
    if (check_cpu("isclose", a) || check_cpu("isclose", b)) return NULL;
    if (!(rtol >= 0) || !(atol >= 0)) {
        dl_error("isclose: rtol and atol must be non-negative (got %g and %g)", rtol, atol);
        return NULL;
    }
    dl_dtype common = dl_result_type(a, b);
    dl_dtype c =
        common == DL_DTYPE_F64 || !dl_dtype_is_floating(common) ? DL_DTYPE_F64 : DL_DTYPE_F32;
    int64_t shape[DL_MAX_DIMS];
    int nd = dl_broadcast_shapes("isclose", a->ndim, a->shape, b->ndim, b->shape, shape);
    if (nd < 0) return NULL;
    dl_tensor *in[2] = {a, b}, *ops[2];
    if (prepare(2, in, c, c, nd, shape, ops)) return NULL;
    dl_tensor *out = dl_tensor_empty(nd, shape, DL_DTYPE_BOOL, DL_CPU);
    if (out) dl_cpu_isclose(out, ops[0], ops[1], rtol, atol, equal_nan);
    release_all(2, ops);
    return out;
}

int dl_allclose(dl_tensor *a, dl_tensor *b, double rtol, double atol, bool equal_nan, bool *out) {
    dl_tensor *c = dl_isclose(a, b, rtol, atol, equal_nan);
    if (!c) return -1;
    *out = all_true(c);
    dl_tensor_release(c);
    return 0;
}
