/* elementwise.c (ops) - the elementwise op family: validation, PyTorch's
 * type promotion, broadcasting, output allocation and dispatch to the CPU
 * kernels (src/cpu/elementwise.c) or the CUDA ones (cuda/elementwise.cu).
 *
 * Every op works in three dtypes of "compute": float32 (also for float16 and
 * bfloat16 results, which are rounded back at the end), float64, and int64
 * (for every integer and bool result; narrower integers wrap when converted
 * back).  Inputs are converted to the compute dtype (no copy when they already
 * have it) and expanded to the broadcast shape; kernels see one dtype.
 * In-place forms write straight into self when self already has the compute
 * dtype (the fast path optimizers hit), else they compute out of place and
 * copy the result into self.
 *
 * Devices: an op runs where its tensors are (dl_common_device); outputs are
 * allocated there.  A 0-dim CPU tensor (how Lua numbers arrive) may meet CUDA
 * tensors: it stays on the CPU and the CUDA kernels take its value.  The
 * kernels of both devices read and write float16/bfloat16 where they compute
 * in float32 (kernel_takes), which skips two whole-tensor conversions and
 * gives the same values: both load exactly and round the float32 result once.
 *
 * Autograd: the public functions compute through the static *_fwd forwards
 * and then, only when dl_autograd_needed, record a node whose backward (next
 * to each forward) saves just what its formula reads.  In place, the node is
 * made before the write (it takes self's old history as input 0), a formula
 * that reads self's old value saves a clone of it, one that reads the result
 * saves self after the write. */
#include "ops/elementwise.h"
#include "core/iter.h"
#include "cpu/elementwise.h"
#include "kernels/elementwise.h"
#include "kernels/cuda.h"
#include "ops/op_util.h"
#include "ops/grad_util.h"
#include "ops/activation.h"
#include "ops/reduce.h"
#include "ops/views.h"

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
    [DL_UNARY_ERFC] = "erfc",
    [DL_UNARY_GELU] = "gelu",
    [DL_UNARY_GELU_TANH] = "gelu",
    [DL_UNARY_SILU] = "silu",
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

/* PyTorch's canCast for in-place results: never float -> integer/bool, never
 * integer -> bool. */
static bool can_cast(dl_dtype from, dl_dtype to) {
    return dl_dtype_kind(from) <= dl_dtype_kind(to);
}

/* The device an op on a, b, c (NULL entries skipped) runs on. */
static int op_device(const char *op, dl_tensor *a, dl_tensor *b, dl_tensor *c, dl_device *dev) {
    dl_tensor *ts[3] = {a, b, c};
    return dl_common_device(op, 3, ts, dev);
}

/* In place, the op runs where self is. */
static int check_self_device(const char *op, const dl_tensor *self, dl_device dev) {
    if (dl_device_equal(dl_tensor_device(self), dev)) return 0;
    char a[32], b[32];
    return dl_error("%s: self is on %s but the other operands are on %s", op,
                    dl_device_name(dl_tensor_device(self), a, sizeof a),
                    dl_device_name(dev, b, sizeof b));
}

/* Whether the kernels of dev read and write dtype when they compute in
 * `compute`: the compute dtype itself, and float16 and bfloat16 for float32
 * (loaded as float, rounded once on store: the CUDA kernels per element,
 * the CPU's in float blocks, cpu/elementwise.c). */
static bool kernel_takes(dl_device dev, dl_dtype dtype, dl_dtype compute) {
    (void)dev;
    if (dtype == compute) return true;
    return compute == DL_DTYPE_F32 && (dtype == DL_DTYPE_F16 || dtype == DL_DTYPE_BF16);
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
    return dl_op_check_writable(op, "self", self);
}

/* Converts each of n tensors to the compute dtype (NULL entries stay NULL)
 * and expands it to shape; out[i] are new references.  An operand wider than
 * a narrow integer common dtype (an int64 scalar against uint8) is first cast
 * to common, so it wraps as PyTorch's cast to the common dtype does.  An
 * operand the kernels of dev take as it is (kernel_takes) is not converted.
 * On failure releases what it made. */
static int prepare(int n, dl_tensor *const *in, dl_dtype common, dl_dtype compute, int nd,
                   const int64_t *shape, dl_device dev, dl_tensor **out) {
    for (int i = 0; i < n; i++) out[i] = NULL;
    for (int i = 0; i < n; i++) {
        if (!in[i]) continue;
        dl_tensor *c;
        if (!dl_dtype_is_floating(common) && common != compute && in[i]->dtype != common) {
            dl_tensor *w = dl_tensor_to_dtype(in[i], common);
            c = w ? dl_tensor_to_dtype(w, compute) : NULL;
            dl_tensor_release(w);
        } else if (kernel_takes(dev, in[i]->dtype, compute)) {
            c = dl_tensor_retain(in[i]);
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

/* --- autograd helpers -------------------------------------------------------------- */

/* The public ops record a node when dl_autograd_needed says so; the *_fwd
 * functions below compute without recording (the in-place forms and the
 * backward formulas use them).  A formula is written with this family's own
 * forwards over a dl_op_pool (op_util.h) that owns every intermediate: each
 * sc_* step takes borrowed operands, passes an earlier failure (NULL) on, and
 * returns a tensor the pool releases when the formula is done. */
static dl_tensor *binary_fwd(dl_binary_op op, dl_tensor *a, dl_tensor *b, double alpha);
static dl_tensor *unary_fwd(dl_unary_op op, dl_tensor *x);
static dl_tensor *where_fwd(dl_tensor *cond, dl_tensor *a, dl_tensor *b);

static dl_tensor *sc_bin(dl_op_pool *s, dl_binary_op op, dl_tensor *a, dl_tensor *b) {
    return a && b ? dl_op_keep(s, binary_fwd(op, a, b, 1)) : NULL;
}

static dl_tensor *sc_un(dl_op_pool *s, dl_unary_op op, dl_tensor *x) {
    return x ? dl_op_keep(s, unary_fwd(op, x)) : NULL;
}

static dl_tensor *sc_to(dl_op_pool *s, dl_tensor *x, dl_dtype dtype) {
    return x ? dl_op_keep(s, dl_tensor_to_dtype(x, dtype)) : NULL;
}

/* A 0-dim constant that combines with `like` without changing its dtype:
 * float64 against float64, float32 against float32 and dimensioned half
 * tensors (which compute in float32 anyway), like's own dtype otherwise. */
static dl_tensor *sc_const(dl_op_pool *s, const dl_tensor *like, double v) {
    if (!like) return NULL;
    dl_dtype dt = like->dtype;
    if (dl_dtype_is_floating(dt) && dt != DL_DTYPE_F64 && like->ndim > 0) dt = DL_DTYPE_F32;
    return dl_op_keep(s, dl_tensor_scalar(v, dt));
}

static dl_tensor *sc_mulc(dl_op_pool *s, dl_tensor *x, double c) {
    return sc_bin(s, DL_BINARY_MUL, x, sc_const(s, x, c));
}

static dl_tensor *sc_addc(dl_op_pool *s, dl_tensor *x, double c) {
    return sc_bin(s, DL_BINARY_ADD, x, sc_const(s, x, c));
}

static dl_tensor *sc_where(dl_op_pool *s, dl_tensor *cond, dl_tensor *a, dl_tensor *b) {
    return cond && a && b ? dl_op_keep(s, where_fwd(cond, a, b)) : NULL;
}

/* g where keep is true, 0 elsewhere (in g's dtype, the broadcast shape). */
static dl_tensor *sc_keep_where(dl_op_pool *s, dl_tensor *keep, dl_tensor *g) {
    return sc_where(s, keep, g, sc_const(s, g, 0));
}

/* g with zeros where drop is true. */
static dl_tensor *sc_drop_where(dl_op_pool *s, dl_tensor *drop, dl_tensor *g) {
    return sc_where(s, drop, sc_const(s, g, 0), g);
}

/* gin[i] = g (in the output's shape) reduced to input i's shape and converted
 * to its dtype, when input i needs a gradient.  0 or -1. */
static int set_grad(dl_node *n, int i, dl_tensor *g, dl_tensor **gin) {
    if (!dl_node_needs_grad(n, i)) return 0;
    if (!g) return -1;
    gin[i] = dl_grad_for_input(g, &n->input_meta[i]);
    return gin[i] ? 0 : -1;
}

/* Zero gradients for every input that needs one (rounding, comparisons). */
static int set_zero_grads(dl_node *n, dl_tensor **gin) {
    for (int i = 0; i < n->n_inputs; i++) {
        if (!dl_node_needs_grad(n, i)) continue;
        if (!(gin[i] = dl_zeros_meta(&n->input_meta[i]))) return -1;
    }
    return 0;
}

/* Ends a formula: the scratch's failure, or the gradients of inputs 0..k-1. */
static int finish_grads(dl_node *n, dl_op_pool *s, int k, dl_tensor *const *g, dl_tensor **gin) {
    int rc = s->failed ? -1 : 0;
    for (int i = 0; i < k && rc == 0; i++) rc = set_grad(n, i, g[i], gin);
    dl_op_pool_free(s);
    return rc;
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
        *ty = (op_types){DL_DTYPE_BOOL, common, dl_op_compute_dtype(common), DL_DTYPE_BOOL};
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
    dl_dtype c = dl_op_compute_dtype(common);
    *ty = (op_types){common, common, c, c};
    return 0;
}

static int zero_division(const char *name) {
    return dl_error("%s: integer division by zero", name);
}

/* The dtype a kernel's output is allocated in: the result's own when the
 * kernels of dev write it, else what the kernel writes (finish_as converts). */
static dl_dtype out_dtype(dl_device dev, const op_types *ty) {
    if (ty->kernel_out == ty->compute && kernel_takes(dev, ty->result, ty->compute))
        return ty->result;
    return ty->kernel_out;
}

/* Runs the binary kernel of out's device.  0, or -1 with the error set. */
static int run_binary(const char *name, dl_binary_op op, dl_tensor *out, dl_tensor *a, dl_tensor *b,
                      double alpha) {
    if (!dl_op_on_cuda(out)) return dl_cpu_binary(op, out, a, b, alpha) ? zero_division(name) : 0;
    if (!dl_cuda_elementwise || !dl_cuda_elementwise->binary) return dl_cuda_missing(name);
    int rc = dl_cuda_elementwise->binary(op, out, a, b, alpha);
    if (rc == DL_CUDA_ZERO_DIVISION) return zero_division(name);
    return rc ? -1 : 0;
}

/* The result tensor of an elementwise op: an operand of the result's shape
 * stored channels-last passes its layout on (so a network run channels-last
 * stays so between convolutions, as in PyTorch); contiguous otherwise. */
static dl_tensor *new_output(int nd, const int64_t *shape, dl_dtype dt, dl_device dev,
                             const dl_tensor *a, const dl_tensor *b) {
    if (nd == 4) {
        const dl_tensor *like[2] = {a, b};
        for (int i = 0; i < 2; i++) {
            const dl_tensor *t = like[i];
            if (t && t->ndim == 4 && t->shape[0] == shape[0] && t->shape[1] == shape[1] &&
                t->shape[2] == shape[2] && t->shape[3] == shape[3] && dl_is_channels_last(t))
                return dl_tensor_empty_like_layout(t, dt, dev);
        }
    }
    return dl_tensor_empty(nd, shape, dt, dev);
}

static dl_tensor *binary_fwd(dl_binary_op op, dl_tensor *a, dl_tensor *b, double alpha) {
    const char *name = dl_binary_op_name(op);
    op_types ty;
    dl_device dev;
    if (op_device(name, a, b, NULL, &dev) || binary_types(name, op, a, b, alpha, &ty)) return NULL;
    int64_t shape[DL_MAX_DIMS];
    int nd = dl_broadcast_shapes(name, a->ndim, a->shape, b->ndim, b->shape, shape);
    if (nd < 0) return NULL;
    dl_tensor *in[2] = {a, b}, *ops[2];
    if (prepare(2, in, ty.common, ty.compute, nd, shape, dev, ops)) return NULL;
    dl_tensor *out = new_output(nd, shape, out_dtype(dev, &ty), dev, a, b);
    if (out && run_binary(name, op, out, ops[0], ops[1], alpha)) {
        dl_tensor_release(out);
        out = NULL;
    }
    dl_op_release_all(ops, 2);
    return finish_as(out, ty.result);
}

/* out = a op b into out (in place: out is a); name is the op's in messages */
static int binary_into(const char *name, dl_binary_op op, dl_tensor *out, dl_tensor *a,
                       dl_tensor *b, double alpha) {
    op_types ty;
    dl_device dev;
    if (op_device(name, a, b, NULL, &dev) || check_self_device(name, out, dev) ||
        binary_types(name, op, a, b, alpha, &ty) || check_cast(name, ty.result, out))
        return -1;
    int64_t shape[DL_MAX_DIMS];
    int nd = dl_broadcast_shapes(name, a->ndim, a->shape, b->ndim, b->shape, shape);
    if (nd < 0 || check_inplace_shape(name, out, nd, shape)) return -1;
    if (!kernel_takes(dev, out->dtype, ty.compute) || ty.kernel_out != ty.compute)
        return copy_into(out, binary_fwd(op, a, b, alpha));
    /* in place (a is out) only b is prepared: out is already of the
     * kernel's dtype and shape */
    const int skip = a == out;
    dl_tensor *in[2] = {a, b}, *ops[2] = {out, NULL};
    if (prepare(2 - skip, in + skip, ty.common, ty.compute, nd, shape, dev, ops + skip)) return -1;
    int rc = run_binary(name, op, out, ops[0], ops[1], alpha);
    dl_op_release_all(ops + skip, 2 - skip);
    dl_tensor_bump_version(out);
    return rc;
}

static int binary_fwd_(dl_binary_op op, dl_tensor *self, dl_tensor *other, double alpha) {
    char name[40];
    snprintf(name, sizeof name, "%s_", dl_binary_op_name(op));
    return binary_into(name, op, self, self, other, alpha);
}

/* --- binary: backward formulas and recording ------------------------------------------ */

static const char *const binary_grad_names[DL_BINARY_COUNT] = {
    [DL_BINARY_ADD] = "AddBackward",
    [DL_BINARY_SUB] = "SubBackward",
    [DL_BINARY_MUL] = "MulBackward",
    [DL_BINARY_DIV] = "DivBackward",
    [DL_BINARY_DIV_FLOOR] = "DivBackward",
    [DL_BINARY_DIV_TRUNC] = "DivBackward",
    [DL_BINARY_POW] = "PowBackward",
    [DL_BINARY_MAXIMUM] = "MaximumBackward",
    [DL_BINARY_MINIMUM] = "MinimumBackward",
    [DL_BINARY_REMAINDER] = "RemainderBackward",
    [DL_BINARY_FMOD] = "FmodBackward",
    [DL_BINARY_ATAN2] = "Atan2Backward",
    [DL_BINARY_EQ] = "EqBackward",
    [DL_BINARY_NE] = "NeBackward",
    [DL_BINARY_LT] = "LtBackward",
    [DL_BINARY_LE] = "LeBackward",
    [DL_BINARY_GT] = "GtBackward",
    [DL_BINARY_GE] = "GeBackward",
    [DL_BINARY_LOGICAL_AND] = "LogicalAndBackward",
    [DL_BINARY_LOGICAL_OR] = "LogicalOrBackward",
    [DL_BINARY_LOGICAL_XOR] = "LogicalXorBackward",
};

typedef struct {
    dl_binary_op op;
    double alpha;
} binary_ctx;

/* Saved slots: 0 a, 1 b, 2 the result; a slot is empty unless the gradients
 * of the inputs that need one read it (PyTorch saves the same). */
enum { SAVE_A = 1, SAVE_B = 2, SAVE_OUT = 4 };

static unsigned binary_saves(dl_binary_op op, bool need_a, bool need_b) {
    switch (op) {
    case DL_BINARY_MUL: return (need_a ? SAVE_B : 0) | (need_b ? SAVE_A : 0);
    case DL_BINARY_DIV: return SAVE_B | (need_b ? SAVE_A : 0);
    case DL_BINARY_POW: return SAVE_A | SAVE_B | (need_b ? SAVE_OUT : 0);
    case DL_BINARY_MAXIMUM:
    case DL_BINARY_MINIMUM:
    case DL_BINARY_ATAN2: return SAVE_A | SAVE_B;
    case DL_BINARY_REMAINDER:
    case DL_BINARY_FMOD: return need_b ? SAVE_A | SAVE_B : 0;
    default: return 0;
    }
}

/* pow: d/da = b * a^(b-1) (0 where b == 0); d/db = out * log(a) (0 where a == 0
 * and b >= 0).  An integer operand is first converted to the output's dtype;
 * floating ones promote as the forward did. */
static void pow_grads(dl_op_pool *s, dl_tensor *g, dl_tensor *a, dl_tensor *b, dl_tensor *out,
                      bool need_a, bool need_b, dl_tensor **ga, dl_tensor **gb) {
    dl_tensor *A = dl_dtype_is_floating(a->dtype) ? a : sc_to(s, a, g->dtype);
    dl_tensor *B = dl_dtype_is_floating(b->dtype) ? b : sc_to(s, b, g->dtype);
    dl_tensor *zero = sc_const(s, g, 0);
    if (need_a) {
        dl_tensor *d = sc_bin(s, DL_BINARY_MUL, B, sc_bin(s, DL_BINARY_POW, A, sc_addc(s, B, -1)));
        *ga = sc_where(s, sc_bin(s, DL_BINARY_EQ, B, zero), zero, sc_bin(s, DL_BINARY_MUL, g, d));
    }
    if (need_b) {
        dl_tensor *at0 = sc_bin(s, DL_BINARY_LOGICAL_AND, sc_bin(s, DL_BINARY_EQ, A, zero),
                                sc_bin(s, DL_BINARY_GE, B, zero));
        dl_tensor *d = sc_bin(s, DL_BINARY_MUL, out, sc_un(s, DL_UNARY_LOG, A));
        *gb = sc_bin(s, DL_BINARY_MUL, g, sc_where(s, at0, zero, d));
    }
}

static int binary_backward(dl_node *n, dl_tensor *const *gout, dl_tensor **gin) {
    const binary_ctx *c = n->ctx;
    bool need_a = dl_node_needs_grad(n, 0), need_b = dl_node_needs_grad(n, 1);
    unsigned sv = binary_saves(c->op, need_a, need_b);
    dl_tensor *a = NULL, *b = NULL, *out = NULL;
    if ((sv & SAVE_A && !(a = dl_node_saved(n, 0))) ||
        (sv & SAVE_B && !(b = dl_node_saved(n, 1))) ||
        (sv & SAVE_OUT && !(out = dl_node_saved(n, 2))))
        return -1;
    dl_tensor *g = gout[0], *gr[2] = {NULL, NULL}; /* gradients in the output's shape */
    dl_op_pool s = {0};
    switch (c->op) {
    case DL_BINARY_ADD:
    case DL_BINARY_SUB:
        gr[0] = g;
        if (need_b) {
            double k = c->op == DL_BINARY_ADD ? c->alpha : -c->alpha;
            gr[1] = k == 1 ? g : sc_mulc(&s, g, k);
        }
        break;
    case DL_BINARY_MUL:
        if (need_a) gr[0] = sc_bin(&s, DL_BINARY_MUL, g, b);
        if (need_b) gr[1] = sc_bin(&s, DL_BINARY_MUL, g, a);
        break;
    case DL_BINARY_DIV: /* -g * ((a / b) / b) for b, as PyTorch rounds it */
        if (need_a) gr[0] = sc_bin(&s, DL_BINARY_DIV, g, b);
        if (need_b) {
            dl_tensor *q = sc_bin(&s, DL_BINARY_DIV, sc_bin(&s, DL_BINARY_DIV, a, b), b);
            gr[1] = sc_bin(&s, DL_BINARY_MUL, sc_un(&s, DL_UNARY_NEG, g), q);
        }
        break;
    case DL_BINARY_POW: pow_grads(&s, g, a, b, out, need_a, need_b, &gr[0], &gr[1]); break;
    case DL_BINARY_MAXIMUM:
    case DL_BINARY_MINIMUM: {
        /* ties split the gradient half and half (PyTorch 1.13) */
        bool mx = c->op == DL_BINARY_MAXIMUM;
        dl_tensor *split = sc_where(&s, sc_bin(&s, DL_BINARY_EQ, a, b), sc_mulc(&s, g, 0.5), g);
        if (need_a)
            gr[0] = sc_drop_where(&s, sc_bin(&s, mx ? DL_BINARY_LT : DL_BINARY_GT, a, b), split);
        if (need_b)
            gr[1] = sc_drop_where(&s, sc_bin(&s, mx ? DL_BINARY_GT : DL_BINARY_LT, a, b), split);
        break;
    }
    case DL_BINARY_REMAINDER:
    case DL_BINARY_FMOD: /* a - q * b with q = floor (trunc) of a / b */
        gr[0] = g;
        if (need_b) {
            dl_binary_op q =
                c->op == DL_BINARY_REMAINDER ? DL_BINARY_DIV_FLOOR : DL_BINARY_DIV_TRUNC;
            gr[1] = sc_bin(&s, DL_BINARY_MUL, sc_un(&s, DL_UNARY_NEG, g), sc_bin(&s, q, a, b));
        }
        break;
    case DL_BINARY_ATAN2: {
        dl_tensor *r2 = sc_bin(&s, DL_BINARY_ADD, sc_bin(&s, DL_BINARY_MUL, a, a),
                               sc_bin(&s, DL_BINARY_MUL, b, b));
        dl_tensor *recip = sc_un(&s, DL_UNARY_RECIPROCAL, r2);
        if (need_a) gr[0] = sc_bin(&s, DL_BINARY_MUL, sc_bin(&s, DL_BINARY_MUL, g, b), recip);
        if (need_b) {
            dl_tensor *gna = sc_bin(&s, DL_BINARY_MUL, g, sc_un(&s, DL_UNARY_NEG, a));
            gr[1] = sc_bin(&s, DL_BINARY_MUL, gna, recip);
        }
        break;
    }
    default: /* rounding divisions, comparisons and logical ops (in place) */
        dl_op_pool_free(&s);
        return set_zero_grads(n, gin);
    }
    return finish_grads(n, &s, 2, gr, gin);
}

dl_tensor *dl_binary(dl_binary_op op, dl_tensor *a, dl_tensor *b, double alpha) {
    dl_tensor *out = binary_fwd(op, a, b, alpha);
    if (!out || !dl_needs_grad2(a, b) || !dl_dtype_is_floating(out->dtype)) return out;
    unsigned sv = binary_saves(op, a->requires_grad, b->requires_grad);
    binary_ctx c = {op, alpha};
    dl_tensor *in[2] = {a, b};
    dl_tensor *save[3] = {sv & SAVE_A ? a : NULL, sv & SAVE_B ? b : NULL,
                          sv & SAVE_OUT ? out : NULL};
    return dl_op_record(out, binary_grad_names[op], binary_backward, 2, in, 3, save, &c, sizeof c);
}

/* In place: slot 0 holds a copy of self's old value, slot 2 (when saved)
 * self's new one. */
int dl_binary_(dl_binary_op op, dl_tensor *self, dl_tensor *other, double alpha) {
    if (!dl_needs_grad2(self, other) || !dl_dtype_is_floating(self->dtype))
        return binary_fwd_(op, self, other, alpha);
    char name[40];
    snprintf(name, sizeof name, "%s_", dl_binary_op_name(op));
    if (dl_check_inplace(name, self)) return -1;
    unsigned sv = binary_saves(op, self->requires_grad, other->requires_grad);
    binary_ctx c = {op, alpha};
    dl_tensor *in[2] = {self, other}, *save[2] = {NULL, sv & SAVE_B ? other : NULL};
    dl_node *n = dl_op_inplace_node(binary_grad_names[op], binary_backward, 2, in, 2, save,
                                    sv & SAVE_A, &c, sizeof c);
    if (!n) return -1;
    return dl_op_inplace_end(n, self, binary_fwd_(op, self, other, alpha), sv & SAVE_OUT);
}

int dl_binary_out(dl_binary_op op, dl_tensor *out, dl_tensor *a, dl_tensor *b, double alpha) {
    return binary_into(dl_binary_op_name(op), op, out, a, b, alpha);
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
        dl_dtype c = op == DL_UNARY_LOGICAL_NOT ? DL_DTYPE_BOOL : dl_op_compute_dtype(d);
        *ty = (op_types){DL_DTYPE_BOOL, d, c, DL_DTYPE_BOOL};
        return 0;
    }
    if (!keeps_integers(op)) {
        dl_dtype r = dl_dtype_is_floating(d) ? d : DL_DTYPE_F32;
        *ty = (op_types){r, d, dl_op_compute_dtype(r), dl_op_compute_dtype(r)};
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
    *ty = (op_types){d, x->dtype, dl_op_compute_dtype(d), dl_op_compute_dtype(d)};
    return 0;
}

/* Runs the unary kernel of out's device.  0, or -1 with the error set. */
static int run_unary(const char *name, dl_unary_op op, dl_tensor *out, dl_tensor *x) {
    if (!dl_op_on_cuda(out)) {
        dl_cpu_unary(op, out, x);
        return 0;
    }
    if (!dl_cuda_elementwise || !dl_cuda_elementwise->unary) return dl_cuda_missing(name);
    return dl_cuda_elementwise->unary(op, out, x);
}

static dl_tensor *unary_fwd(dl_unary_op op, dl_tensor *x) {
    const char *name = dl_unary_op_name(op);
    op_types ty;
    if (unary_types(name, op, x, &ty)) return NULL;
    dl_device dev = dl_tensor_device(x);
    if ((op == DL_UNARY_ISNAN || op == DL_UNARY_ISINF || op == DL_UNARY_ISFINITE) &&
        !dl_dtype_is_floating(x->dtype))
        return dl_tensor_full(x->ndim, x->shape, op == DL_UNARY_ISFINITE, DL_DTYPE_BOOL, dev);
    dl_tensor *cx;
    if (prepare(1, &x, x->dtype, ty.compute, x->ndim, x->shape, dev, &cx)) return NULL;
    dl_tensor *out = new_output(x->ndim, x->shape, out_dtype(dev, &ty), dev, x, NULL);
    if (out && run_unary(name, op, out, cx)) {
        dl_tensor_release(out);
        out = NULL;
    }
    dl_tensor_release(cx);
    return finish_as(out, ty.result);
}

static int unary_fwd_(dl_unary_op op, dl_tensor *self) {
    char name[40];
    snprintf(name, sizeof name, "%s_", dl_unary_op_name(op));
    op_types ty;
    if (unary_types(name, op, self, &ty) || check_cast(name, ty.result, self) ||
        check_inplace_shape(name, self, self->ndim, self->shape))
        return -1;
    if (!kernel_takes(dl_tensor_device(self), self->dtype, ty.compute) ||
        ty.kernel_out != ty.compute)
        return copy_into(self, unary_fwd(op, self));
    int rc = run_unary(name, op, self, self);
    if (rc == 0) dl_tensor_bump_version(self);
    return rc;
}

/* --- unary: backward formulas and recording ---------------------------------------------- */

/* clang-format off */
static const char *const unary_grad_names[DL_UNARY_COUNT] = {
    [DL_UNARY_NEG] = "NegBackward",
    [DL_UNARY_ABS] = "AbsBackward",
    [DL_UNARY_SIGN] = "SignBackward",
    [DL_UNARY_RELU] = "ReluBackward",
    [DL_UNARY_FLOOR] = "FloorBackward",
    [DL_UNARY_CEIL] = "CeilBackward",
    [DL_UNARY_ROUND] = "RoundBackward",
    [DL_UNARY_TRUNC] = "TruncBackward",
    [DL_UNARY_SQUARE] = "PowBackward", /* PyTorch computes square as pow(x, 2) */
    [DL_UNARY_EXP] = "ExpBackward",
    [DL_UNARY_EXP2] = "Exp2Backward",
    [DL_UNARY_EXPM1] = "Expm1Backward",
    [DL_UNARY_LOG] = "LogBackward",
    [DL_UNARY_LOG2] = "Log2Backward",
    [DL_UNARY_LOG10] = "Log10Backward",
    [DL_UNARY_LOG1P] = "Log1PBackward",
    [DL_UNARY_SQRT] = "SqrtBackward",
    [DL_UNARY_RSQRT] = "RsqrtBackward",
    [DL_UNARY_RECIPROCAL] = "ReciprocalBackward",
    [DL_UNARY_SIN] = "SinBackward",
    [DL_UNARY_COS] = "CosBackward",
    [DL_UNARY_TAN] = "TanBackward",
    [DL_UNARY_ASIN] = "AsinBackward",
    [DL_UNARY_ACOS] = "AcosBackward",
    [DL_UNARY_ATAN] = "AtanBackward",
    [DL_UNARY_SINH] = "SinhBackward",
    [DL_UNARY_COSH] = "CoshBackward",
    [DL_UNARY_TANH] = "TanhBackward",
    [DL_UNARY_SIGMOID] = "SigmoidBackward",
    [DL_UNARY_ERF] = "ErfBackward",
    [DL_UNARY_ERFC] = "ErfcBackward",
    [DL_UNARY_GELU] = "GeluBackward",
    [DL_UNARY_GELU_TANH] = "GeluBackward", /* one node for both forms, as PyTorch */
    [DL_UNARY_SILU] = "SiluBackward",
    [DL_UNARY_FRAC] = "FracBackward",
    [DL_UNARY_LOGICAL_NOT] = "LogicalNotBackward",
    [DL_UNARY_ISNAN] = "IsnanBackward",
    [DL_UNARY_ISINF] = "IsinfBackward",
    [DL_UNARY_ISFINITE] = "IsfiniteBackward",
};
/* clang-format on */

/* What a unary backward reads (saved in slot 0): the input x, the result r,
 * or nothing. */
enum { SAVES_NOTHING, SAVES_INPUT, SAVES_RESULT };

static int unary_saves(dl_unary_op op) {
    switch (op) {
    case DL_UNARY_ABS:
    case DL_UNARY_SQUARE:
    case DL_UNARY_LOG:
    case DL_UNARY_LOG2:
    case DL_UNARY_LOG10:
    case DL_UNARY_LOG1P:
    case DL_UNARY_SIN:
    case DL_UNARY_COS:
    case DL_UNARY_ASIN:
    case DL_UNARY_ACOS:
    case DL_UNARY_ATAN:
    case DL_UNARY_SINH:
    case DL_UNARY_COSH:
    case DL_UNARY_ERF:
    case DL_UNARY_ERFC:
    case DL_UNARY_GELU:
    case DL_UNARY_GELU_TANH:
    case DL_UNARY_SILU: return SAVES_INPUT;
    case DL_UNARY_RELU:
    case DL_UNARY_EXP:
    case DL_UNARY_EXP2:
    case DL_UNARY_EXPM1:
    case DL_UNARY_SQRT:
    case DL_UNARY_RSQRT:
    case DL_UNARY_RECIPROCAL:
    case DL_UNARY_TAN:
    case DL_UNARY_TANH:
    case DL_UNARY_SIGMOID: return SAVES_RESULT;
    default: return SAVES_NOTHING;
    }
}

/* The backwards of tanh, sigmoid (from the result r = x), GELU and SiLU
 * (from the input x) composed from elementwise ops: the CUDA path (the CPU
 * runs dl_act_backward's fused pass). */
static dl_tensor *act_backward_chain(dl_op_pool *S, dl_unary_op op, dl_tensor *g, dl_tensor *x) {
    dl_tensor *r = x;
    switch (op) {
    case DL_UNARY_TANH: { /* g * (1 - r^2) */
        dl_tensor *r2 = sc_bin(S, DL_BINARY_MUL, r, r);
        return sc_bin(S, DL_BINARY_MUL, g, sc_addc(S, sc_un(S, DL_UNARY_NEG, r2), 1));
    }
    case DL_UNARY_SIGMOID: { /* g * (1 - r) * r */
        dl_tensor *one_minus = sc_addc(S, sc_un(S, DL_UNARY_NEG, r), 1);
        return sc_bin(S, DL_BINARY_MUL, sc_bin(S, DL_BINARY_MUL, g, one_minus), r);
    }
    case DL_UNARY_GELU: { /* g * (cdf + x * pdf), PyTorch's GeluBackward */
        dl_tensor *cdf =
            sc_mulc(S, sc_addc(S, sc_un(S, DL_UNARY_ERF, sc_mulc(S, x, M_SQRT1_2)), 1), 0.5);
        dl_tensor *e = sc_un(S, DL_UNARY_EXP, sc_mulc(S, sc_bin(S, DL_BINARY_MUL, x, x), -0.5));
        dl_tensor *pdf = sc_mulc(S, e, M_2_SQRTPI * M_SQRT1_2 * 0.5);
        return sc_bin(S, DL_BINARY_MUL, g,
                      sc_bin(S, DL_BINARY_ADD, cdf, sc_bin(S, DL_BINARY_MUL, x, pdf)));
    }
    case DL_UNARY_GELU_TANH: { /* PyTorch's GeluBackward with approximate="tanh" */
        const double beta = M_SQRT2 * M_2_SQRTPI * 0.5, kappa = 0.044715;
        dl_tensor *x2 = sc_bin(S, DL_BINARY_MUL, x, x);
        dl_tensor *x3 = sc_bin(S, DL_BINARY_MUL, x2, x);
        dl_tensor *inner = sc_mulc(S, sc_bin(S, DL_BINARY_ADD, x, sc_mulc(S, x3, kappa)), beta);
        dl_tensor *t = sc_un(S, DL_UNARY_TANH, inner);
        dl_tensor *left_d = sc_mulc(S, sc_addc(S, t, 1), 0.5); /* 0.5 * (1 + t) */
        dl_tensor *tanh_d = sc_addc(S, sc_un(S, DL_UNARY_NEG, sc_bin(S, DL_BINARY_MUL, t, t)), 1);
        dl_tensor *inner_d = sc_mulc(S, sc_addc(S, sc_mulc(S, x2, 3 * kappa), 1), beta);
        dl_tensor *right_d =
            sc_bin(S, DL_BINARY_MUL, sc_bin(S, DL_BINARY_MUL, sc_mulc(S, x, 0.5), tanh_d), inner_d);
        return sc_bin(S, DL_BINARY_MUL, g, sc_bin(S, DL_BINARY_ADD, left_d, right_d));
    }
    case DL_UNARY_SILU: { /* g * s * (1 + x * (1 - s)), s = sigmoid(x) */
        dl_tensor *sg = sc_un(S, DL_UNARY_SIGMOID, x);
        dl_tensor *one_minus = sc_addc(S, sc_un(S, DL_UNARY_NEG, sg), 1);
        dl_tensor *d = sc_addc(S, sc_bin(S, DL_BINARY_MUL, x, one_minus), 1);
        return sc_bin(S, DL_BINARY_MUL, sc_bin(S, DL_BINARY_MUL, g, sg), d);
    }
    default: return NULL;
    }
}

static int unary_backward(dl_node *n, dl_tensor *const *gout, dl_tensor **gin) {
    dl_unary_op op = *(const dl_unary_op *)n->ctx;
    dl_tensor *x = NULL; /* the saved input or result, as unary_saves says */
    if (unary_saves(op) != SAVES_NOTHING && !(x = dl_node_saved(n, 0))) return -1;
    dl_tensor *r = x, *g = gout[0], *gx = NULL;
    dl_op_pool s = {0};
    dl_op_pool *S = &s;
    switch (op) {
    case DL_UNARY_NEG: gx = sc_un(S, DL_UNARY_NEG, g); break;
    case DL_UNARY_ABS: gx = sc_bin(S, DL_BINARY_MUL, g, sc_un(S, DL_UNARY_SIGN, x)); break;
    case DL_UNARY_RELU: /* 0 where the result is <= 0 (threshold_backward) */
        if (dl_tensor_device(r).type == DL_DEVICE_CPU &&
            dl_tensor_device(g).type == DL_DEVICE_CPU && g->dtype == r->dtype)
            gx = dl_op_keep(S, dl_relu_backward(g, r)); /* one pass, not a mask and a where */
        else
            gx = sc_drop_where(S, sc_bin(S, DL_BINARY_LE, r, sc_const(S, r, 0)), g);
        break;
    case DL_UNARY_SQUARE: gx = sc_bin(S, DL_BINARY_MUL, g, sc_mulc(S, x, 2)); break;
    case DL_UNARY_EXP: gx = sc_bin(S, DL_BINARY_MUL, g, r); break;
    case DL_UNARY_EXP2: gx = sc_mulc(S, sc_bin(S, DL_BINARY_MUL, g, r), M_LN2); break;
    case DL_UNARY_EXPM1: gx = sc_bin(S, DL_BINARY_MUL, g, sc_addc(S, r, 1)); break;
    case DL_UNARY_LOG: gx = sc_bin(S, DL_BINARY_DIV, g, x); break;
    case DL_UNARY_LOG2: gx = sc_bin(S, DL_BINARY_DIV, g, sc_mulc(S, x, M_LN2)); break;
    case DL_UNARY_LOG10: gx = sc_bin(S, DL_BINARY_DIV, g, sc_mulc(S, x, M_LN10)); break;
    case DL_UNARY_LOG1P: gx = sc_bin(S, DL_BINARY_DIV, g, sc_addc(S, x, 1)); break;
    case DL_UNARY_SQRT: gx = sc_bin(S, DL_BINARY_DIV, g, sc_mulc(S, r, 2)); break;
    case DL_UNARY_RSQRT: { /* -0.5 * g * r^3 */
        dl_tensor *r3 = sc_bin(S, DL_BINARY_MUL, sc_bin(S, DL_BINARY_MUL, r, r), r);
        gx = sc_bin(S, DL_BINARY_MUL, sc_mulc(S, g, -0.5), r3);
        break;
    }
    case DL_UNARY_RECIPROCAL: /* -g * r^2 */
        gx = sc_bin(S, DL_BINARY_MUL, sc_un(S, DL_UNARY_NEG, g), sc_bin(S, DL_BINARY_MUL, r, r));
        break;
    case DL_UNARY_SIN: gx = sc_bin(S, DL_BINARY_MUL, g, sc_un(S, DL_UNARY_COS, x)); break;
    case DL_UNARY_COS:
        gx = sc_bin(S, DL_BINARY_MUL, g, sc_un(S, DL_UNARY_NEG, sc_un(S, DL_UNARY_SIN, x)));
        break;
    case DL_UNARY_TAN: /* g * (1 + r^2) */
        gx = sc_bin(S, DL_BINARY_MUL, g, sc_addc(S, sc_bin(S, DL_BINARY_MUL, r, r), 1));
        break;
    case DL_UNARY_ASIN:
    case DL_UNARY_ACOS: { /* +-g / sqrt(1 - x^2) */
        dl_tensor *nx2 = sc_bin(S, DL_BINARY_MUL, sc_un(S, DL_UNARY_NEG, x), x);
        dl_tensor *d = sc_un(S, DL_UNARY_RSQRT, sc_addc(S, nx2, 1));
        if (op == DL_UNARY_ACOS) d = sc_un(S, DL_UNARY_NEG, d);
        gx = sc_bin(S, DL_BINARY_MUL, g, d);
        break;
    }
    case DL_UNARY_ATAN: /* g / (x^2 + 1) */
        gx = sc_bin(S, DL_BINARY_DIV, g, sc_addc(S, sc_bin(S, DL_BINARY_MUL, x, x), 1));
        break;
    case DL_UNARY_SINH: gx = sc_bin(S, DL_BINARY_MUL, g, sc_un(S, DL_UNARY_COSH, x)); break;
    case DL_UNARY_COSH: gx = sc_bin(S, DL_BINARY_MUL, g, sc_un(S, DL_UNARY_SINH, x)); break;
    case DL_UNARY_TANH:
    case DL_UNARY_SIGMOID:
    case DL_UNARY_GELU:
    case DL_UNARY_GELU_TANH:
    case DL_UNARY_SILU:
        /* one fused pass; the chain where the gradient itself is recorded */
        if (dl_tensor_device(x).type == DL_DEVICE_CPU &&
            dl_tensor_device(g).type == DL_DEVICE_CPU && !dl_needs_grad2(g, x))
            gx = dl_op_keep(S, dl_act_backward(op, g, x));
        else
            gx = act_backward_chain(S, op, g, x);
        break;
    case DL_UNARY_ERF:
    case DL_UNARY_ERFC: { /* +-2/sqrt(pi) * exp(-x^2) * g */
        dl_tensor *e =
            sc_un(S, DL_UNARY_EXP, sc_un(S, DL_UNARY_NEG, sc_bin(S, DL_BINARY_MUL, x, x)));
        gx = sc_bin(S, DL_BINARY_MUL, sc_mulc(S, e, op == DL_UNARY_ERF ? M_2_SQRTPI : -M_2_SQRTPI),
                    g);
        break;
    }
    case DL_UNARY_FRAC: gx = g; break;
    default: /* sign, rounding, logical_not (in place): zero gradient */
        dl_op_pool_free(S);
        return set_zero_grads(n, gin);
    }
    return finish_grads(n, S, 1, &gx, gin);
}

dl_tensor *dl_unary(dl_unary_op op, dl_tensor *x) {
    dl_tensor *out = unary_fwd(op, x);
    if (!out || !dl_needs_grad1(x) || is_predicate(op)) return out;
    int sv = unary_saves(op);
    dl_tensor *save = sv == SAVES_RESULT ? out : x;
    return dl_op_record(out, unary_grad_names[op], unary_backward, 1, &x,
                        sv == SAVES_NOTHING ? 0 : 1, &save, &op, sizeof op);
}

int dl_unary_(dl_unary_op op, dl_tensor *self) {
    if (!dl_needs_grad1(self)) return unary_fwd_(op, self);
    char name[40];
    snprintf(name, sizeof name, "%s_", dl_unary_op_name(op));
    if (dl_check_inplace(name, self)) return -1;
    int sv = unary_saves(op);
    dl_node *n =
        dl_op_inplace_node(unary_grad_names[op], unary_backward, 1, &self,
                           sv == SAVES_INPUT ? 1 : 0, &self, sv == SAVES_INPUT, &op, sizeof op);
    if (!n) return -1;
    return dl_op_inplace_end(n, self, unary_fwd_(op, self), sv == SAVES_RESULT);
}

/* --- clamp ------------------------------------------------------------------------- */

/* Promotion, broadcast shape, device and the compute dtype of clamp(x, lo, hi). */
static int clamp_plan(const char *name, dl_tensor *x, dl_tensor *lo, dl_tensor *hi, op_types *ty,
                      int64_t *shape, dl_device *dev) {
    if (!lo && !hi) return dl_error("%s: at least one of min and max must be given", name);
    if (op_device(name, x, lo, hi, dev)) return -1;
    dl_tensor *all[3] = {x, lo, hi};
    dl_dtype r = result_type_n(3, all);
    *ty = (op_types){r, r, dl_op_compute_dtype(r), dl_op_compute_dtype(r)};
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
        dl_store_f64(dl_tensor_data_ptr(t), dtype, upper ? INFINITY : -INFINITY);
    else
        dl_store_i64(dl_tensor_data_ptr(t), dtype, upper ? INT64_MAX : INT64_MIN);
    return t;
}

/* Runs the clamp kernel of out's device into out (of out's shape, a dtype the
 * kernel takes for the compute dtype). */
static int clamp_run(dl_tensor *out, dl_tensor *x, dl_tensor *lo, dl_tensor *hi,
                     const op_types *ty) {
    dl_tensor *in[3] = {x, lo, hi}, *ops[3];
    if (prepare(3, in, ty->result, ty->compute, out->ndim, out->shape, dl_tensor_device(out), ops))
        return -1;
    /* missing bounds: open ones, already in the compute dtype (never wrapped) */
    for (int i = 1; i < 3; i++) {
        if (ops[i]) continue;
        dl_tensor *b = open_bound(ty->compute, i == 2);
        ops[i] = b ? dl_tensor_expand(b, out->ndim, out->shape) : NULL;
        dl_tensor_release(b);
        if (!ops[i]) {
            dl_op_release_all(ops, 3);
            return -1;
        }
    }
    int rc = 0;
    if (!dl_op_on_cuda(out))
        dl_cpu_clamp(out, ops[0], ops[1], ops[2]);
    else if (!dl_cuda_elementwise || !dl_cuda_elementwise->clamp)
        rc = dl_cuda_missing("clamp");
    else
        rc = dl_cuda_elementwise->clamp(out, ops[0], ops[1], ops[2]);
    dl_op_release_all(ops, 3);
    return rc;
}

static dl_tensor *clamp_fwd(dl_tensor *x, dl_tensor *lo, dl_tensor *hi) {
    op_types ty;
    int64_t shape[DL_MAX_DIMS];
    dl_device dev;
    int nd = clamp_plan("clamp", x, lo, hi, &ty, shape, &dev);
    if (nd < 0) return NULL;
    dl_tensor *out = dl_tensor_empty(nd, shape, out_dtype(dev, &ty), dev);
    if (out && clamp_run(out, x, lo, hi, &ty)) {
        dl_tensor_release(out);
        return NULL;
    }
    return finish_as(out, ty.result);
}

static int clamp_fwd_(dl_tensor *self, dl_tensor *lo, dl_tensor *hi) {
    op_types ty;
    int64_t shape[DL_MAX_DIMS];
    dl_device dev;
    int nd = clamp_plan("clamp_", self, lo, hi, &ty, shape, &dev);
    if (nd < 0 || check_self_device("clamp_", self, dev) || check_cast("clamp_", ty.result, self) ||
        check_inplace_shape("clamp_", self, nd, shape))
        return -1;
    if (!kernel_takes(dev, self->dtype, ty.compute))
        return copy_into(self, clamp_fwd(self, lo, hi));
    int rc = clamp_run(self, self, lo, hi, &ty);
    if (rc == 0) dl_tensor_bump_version(self);
    return rc;
}

/* --- clamp: backward formula and recording ------------------------------------------------ */

/* Inputs 0 x, 1 lo, 2 hi, each saved in its slot (empty for a missing bound).
 * x gets the gradient where lo <= x <= hi (boundaries included), lo where
 * x < lo < hi, hi where x > hi or hi < lo: each bound where it was selected. */
typedef struct {
    bool lo, hi;
} clamp_ctx;

static int clamp_backward(dl_node *n, dl_tensor *const *gout, dl_tensor **gin) {
    const clamp_ctx *c = n->ctx;
    dl_tensor *x = dl_node_saved(n, 0), *lo = NULL, *hi = NULL;
    if (!x || (c->lo && !(lo = dl_node_saved(n, 1))) || (c->hi && !(hi = dl_node_saved(n, 2))))
        return -1;
    dl_tensor *g = gout[0], *gr[3] = {NULL, NULL, NULL};
    dl_op_pool s = {0};
    if (dl_node_needs_grad(n, 0)) {
        dl_tensor *in = lo ? sc_bin(&s, DL_BINARY_GE, x, lo) : NULL;
        if (hi) {
            dl_tensor *le = sc_bin(&s, DL_BINARY_LE, x, hi);
            in = lo ? sc_bin(&s, DL_BINARY_LOGICAL_AND, in, le) : le;
        }
        gr[0] = sc_keep_where(&s, in, g);
    }
    if (lo && dl_node_needs_grad(n, 1)) {
        dl_tensor *sel = sc_bin(&s, DL_BINARY_LT, x, lo);
        if (hi) sel = sc_bin(&s, DL_BINARY_LOGICAL_AND, sel, sc_bin(&s, DL_BINARY_LT, lo, hi));
        gr[1] = sc_keep_where(&s, sel, g);
    }
    if (hi && dl_node_needs_grad(n, 2)) {
        dl_tensor *sel = sc_bin(&s, DL_BINARY_GT, x, hi);
        if (lo) sel = sc_bin(&s, DL_BINARY_LOGICAL_OR, sel, sc_bin(&s, DL_BINARY_LT, hi, lo));
        gr[2] = sc_keep_where(&s, sel, g);
    }
    return finish_grads(n, &s, 3, gr, gin);
}

/* clamp's node saves x (a copy of self's old value in place), lo and hi. */
dl_tensor *dl_clamp(dl_tensor *x, dl_tensor *lo, dl_tensor *hi) {
    dl_tensor *out = clamp_fwd(x, lo, hi);
    dl_tensor *all[3] = {x, lo, hi};
    if (!out || !dl_autograd_needed(3, all) || !dl_dtype_is_floating(out->dtype)) return out;
    clamp_ctx c = {lo != NULL, hi != NULL};
    return dl_op_record(out, "ClampBackward", clamp_backward, 3, all, 3, all, &c, sizeof c);
}

int dl_clamp_(dl_tensor *self, dl_tensor *lo, dl_tensor *hi) {
    dl_tensor *all[3] = {self, lo, hi};
    if (!dl_autograd_needed(3, all) || !dl_dtype_is_floating(self->dtype))
        return clamp_fwd_(self, lo, hi);
    if (dl_check_inplace("clamp_", self)) return -1;
    clamp_ctx c = {lo != NULL, hi != NULL};
    dl_node *n =
        dl_op_inplace_node("ClampBackward", clamp_backward, 3, all, 3, all, true, &c, sizeof c);
    if (!n) return -1;
    return dl_op_inplace_end(n, self, clamp_fwd_(self, lo, hi), false);
}

/* --- where and masked_fill ------------------------------------------------------------ */

static int check_mask(const char *op, const char *what, const dl_tensor *m) {
    if (m->dtype == DL_DTYPE_BOOL || m->dtype == DL_DTYPE_U8) return 0;
    return dl_error("%s: %s must be a bool tensor, got %s", op, what, dl_dtype_name(m->dtype));
}

static dl_tensor *where_fwd(dl_tensor *cond, dl_tensor *a, dl_tensor *b) {
    dl_device dev;
    if (op_device("where", cond, a, b, &dev) || check_mask("where", "condition", cond)) return NULL;
    dl_dtype r = dl_result_type(a, b);
    int64_t s1[DL_MAX_DIMS], shape[DL_MAX_DIMS];
    int n1 = dl_broadcast_shapes("where", cond->ndim, cond->shape, a->ndim, a->shape, s1);
    if (n1 < 0) return NULL;
    int nd = dl_broadcast_shapes("where", n1, s1, b->ndim, b->shape, shape);
    if (nd < 0) return NULL;
    dl_tensor *ec = dl_tensor_expand(cond, nd, shape);
    if (!ec) return NULL;
    dl_tensor *in[2] = {a, b}, *ops[2];
    if (prepare(2, in, r, r, nd, shape, dev, ops)) {
        dl_tensor_release(ec);
        return NULL;
    }
    dl_tensor *out = dl_tensor_empty(nd, shape, r, dev);
    int rc = 0;
    if (out && !dl_op_on_cuda(out))
        dl_cpu_where(out, ec, ops[0], ops[1]);
    else if (out && (!dl_cuda_elementwise || !dl_cuda_elementwise->where))
        rc = dl_cuda_missing("where");
    else if (out)
        rc = dl_cuda_elementwise->where(out, ec, ops[0], ops[1]);
    if (rc) {
        dl_tensor_release(out);
        out = NULL;
    }
    dl_tensor_release(ec);
    dl_op_release_all(ops, 2);
    return out;
}

static int masked_fill_checks(const char *op, dl_tensor *x, dl_tensor *mask, dl_tensor *value,
                              dl_device *dev) {
    if (op_device(op, x, mask, value, dev) || check_mask(op, "mask", mask)) return -1;
    if (value->ndim != 0)
        return dl_error("%s: value must be a number or a 0-dim tensor (got a tensor with %d "
                        "dimensions)",
                        op, value->ndim);
    return 0;
}

/* The fill into self, whose shape mask already broadcasts to.  The kernels
 * take the value from host memory (a value on CUDA is copied back first). */
static int masked_fill_run(dl_tensor *self, dl_tensor *mask, dl_tensor *value) {
    dl_tensor *vd = dl_tensor_to_dtype(value, self->dtype);
    dl_tensor *v = vd ? dl_tensor_to_device(vd, DL_CPU) : NULL;
    dl_tensor *em = v ? dl_tensor_expand(mask, self->ndim, self->shape) : NULL;
    int rc = -1;
    if (em && !dl_op_on_cuda(self)) {
        dl_cpu_masked_fill(self, em, dl_tensor_data_ptr(v));
        rc = 0;
    } else if (em) {
        rc = dl_cuda_elementwise && dl_cuda_elementwise->masked_fill
                 ? dl_cuda_elementwise->masked_fill(self, em, dl_tensor_data_ptr(v))
                 : dl_cuda_missing("masked_fill");
    }
    if (rc == 0) dl_tensor_bump_version(self);
    dl_tensor_release(em);
    dl_tensor_release(v);
    dl_tensor_release(vd);
    return rc;
}

static dl_tensor *masked_fill_fwd(dl_tensor *x, dl_tensor *mask, dl_tensor *value) {
    dl_device dev;
    if (masked_fill_checks("masked_fill", x, mask, value, &dev)) return NULL;
    int64_t shape[DL_MAX_DIMS];
    int nd = dl_broadcast_shapes("masked_fill", x->ndim, x->shape, mask->ndim, mask->shape, shape);
    if (nd < 0) return NULL;
    dl_tensor *out = dl_tensor_empty(nd, shape, x->dtype, dev);
    if (out && (dl_tensor_copy_(out, x) || masked_fill_run(out, mask, value))) {
        dl_tensor_release(out);
        return NULL;
    }
    return out;
}

static int masked_fill_fwd_(dl_tensor *self, dl_tensor *mask, dl_tensor *value) {
    dl_device dev;
    if (masked_fill_checks("masked_fill_", self, mask, value, &dev) ||
        check_self_device("masked_fill_", self, dev))
        return -1;
    int64_t shape[DL_MAX_DIMS];
    int nd = dl_broadcast_shapes("masked_fill_", self->ndim, self->shape, mask->ndim, mask->shape,
                                 shape);
    if (nd < 0 || check_inplace_shape("masked_fill_", self, nd, shape)) return -1;
    return masked_fill_run(self, mask, value);
}

/* --- where and masked_fill: backward formulas and recording -------------------------------- */

/* where: the condition (saved in slot 0) routes g to a where true, to b
 * where false; the condition itself gets no gradient. */
static int where_backward(dl_node *n, dl_tensor *const *gout, dl_tensor **gin) {
    dl_tensor *cond = dl_node_saved(n, 0);
    if (!cond) return -1;
    dl_op_pool s = {0};
    dl_tensor *gr[2] = {NULL, NULL};
    if (dl_node_needs_grad(n, 0)) gr[0] = sc_keep_where(&s, cond, gout[0]);
    if (dl_node_needs_grad(n, 1)) gr[1] = sc_drop_where(&s, cond, gout[0]);
    return finish_grads(n, &s, 2, gr, gin);
}

dl_tensor *dl_where(dl_tensor *cond, dl_tensor *a, dl_tensor *b) {
    dl_tensor *out = where_fwd(cond, a, b);
    if (!out || !dl_needs_grad2(a, b) || !dl_dtype_is_floating(out->dtype)) return out;
    dl_tensor *in[2] = {a, b};
    return dl_op_record(out, "WhereBackward", where_backward, 2, in, 1, &cond, NULL, 0);
}

/* masked_fill: inputs 0 x and 1 value, the mask saved in slot 0.  x gets g
 * with zeros where filled; value gets the sum of g over the filled places. */
static int masked_fill_backward(dl_node *n, dl_tensor *const *gout, dl_tensor **gin) {
    dl_tensor *mask = dl_node_saved(n, 0);
    if (!mask) return -1;
    dl_op_pool s = {0};
    dl_tensor *gr[2] = {NULL, NULL};
    if (dl_node_needs_grad(n, 0)) gr[0] = sc_drop_where(&s, mask, gout[0]);
    if (dl_node_needs_grad(n, 1)) {
        dl_tensor *filled = sc_keep_where(&s, mask, gout[0]);
        gr[1] =
            filled ? dl_op_keep(&s, dl_sum(filled, 0, NULL, false, DL_REDUCE_DTYPE_NONE)) : NULL;
    }
    return finish_grads(n, &s, 2, gr, gin);
}

dl_tensor *dl_masked_fill(dl_tensor *x, dl_tensor *mask, dl_tensor *value) {
    dl_tensor *out = masked_fill_fwd(x, mask, value);
    if (!out || !dl_needs_grad2(x, value) || !dl_dtype_is_floating(out->dtype)) return out;
    dl_tensor *in[2] = {x, value};
    return dl_op_record(out, "MaskedFillBackward", masked_fill_backward, 2, in, 1, &mask, NULL, 0);
}

int dl_masked_fill_(dl_tensor *self, dl_tensor *mask, dl_tensor *value) {
    if (!dl_needs_grad2(self, value) || !dl_dtype_is_floating(self->dtype))
        return masked_fill_fwd_(self, mask, value);
    if (dl_check_inplace("masked_fill_", self)) return -1;
    dl_tensor *in[2] = {self, value};
    dl_node *n = dl_op_inplace_node("MaskedFillBackward", masked_fill_backward, 2, in, 1, &mask,
                                    false, NULL, 0);
    if (!n) return -1;
    return dl_op_inplace_end(n, self, masked_fill_fwd_(self, mask, value), false);
}

/* --- equal, isclose, allclose ------------------------------------------------------------ */

/* *out = every byte of the bool tensor t (contiguous, fresh; read on the
 * CPU, so one on CUDA is copied back) is true.  0 or -1. */
static int all_true(dl_tensor *t, bool *out) {
    dl_tensor *h = dl_tensor_to_device(t, DL_CPU);
    if (!h) return -1;
    int64_t n = dl_tensor_numel(h);
    *out = n == 0 || memchr(dl_tensor_data_ptr(h), 0, (size_t)n) == NULL;
    dl_tensor_release(h);
    return 0;
}

int dl_equal(dl_tensor *a, dl_tensor *b, bool *out) {
    dl_device dev;
    if (op_device("equal", a, b, NULL, &dev)) return -1;
    if (!dl_shape_equal(a, b)) {
        *out = false;
        return 0;
    }
    dl_tensor *eq = binary_fwd(DL_BINARY_EQ, a, b, 1);
    if (!eq) return -1;
    int rc = all_true(eq, out);
    dl_tensor_release(eq);
    return rc;
}

dl_tensor *dl_isclose(dl_tensor *a, dl_tensor *b, double rtol, double atol, bool equal_nan) {
    dl_device dev;
    if (op_device("isclose", a, b, NULL, &dev)) return NULL;
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
    if (prepare(2, in, c, c, nd, shape, dev, ops)) return NULL;
    dl_tensor *out = dl_tensor_empty(nd, shape, DL_DTYPE_BOOL, dev);
    int rc = 0;
    if (out && !dl_op_on_cuda(out))
        dl_cpu_isclose(out, ops[0], ops[1], rtol, atol, equal_nan);
    else if (out && (!dl_cuda_elementwise || !dl_cuda_elementwise->isclose))
        rc = dl_cuda_missing("isclose");
    else if (out)
        rc = dl_cuda_elementwise->isclose(out, ops[0], ops[1], rtol, atol, equal_nan);
    if (rc) {
        dl_tensor_release(out);
        out = NULL;
    }
    dl_op_release_all(ops, 2);
    return out;
}

int dl_allclose(dl_tensor *a, dl_tensor *b, double rtol, double atol, bool equal_nan, bool *out) {
    dl_tensor *c = dl_isclose(a, b, rtol, atol, equal_nan);
    if (!c) return -1;
    int rc = all_true(c, out);
    dl_tensor_release(c);
    return rc;
}

int dl_elementwise_vectorized(int on) {
    if (!dl_cuda_elementwise || !dl_cuda_elementwise->set_vectorized) return -1;
    return dl_cuda_elementwise->set_vectorized(on);
}
