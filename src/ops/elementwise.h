/* elementwise.h - the elementwise op family: unary math, binary arithmetic,
 * comparisons, logical ops, clamp, where, masked_fill, equal/allclose.
 *
 * Invariants (PyTorch semantics):
 *  - Binary operands broadcast (PyTorch rules); the result dtype follows
 *    dl_result_type (a 0-dim tensor only counts when it raises the category).
 *    Callers turn C/Lua scalars into 0-dim tensors of the type PyTorch gives a
 *    scalar against the other operand (dl_promote_with_scalar).
 *  - Floating results compute in float for float32/float16/bfloat16 (half
 *    types round back per element) and in double for float64; integer results
 *    compute exactly in int64 and wrap to the result dtype.
 *  - Functions returning dl_tensor* return a new reference, or NULL with
 *    dl_last_error() set.  In-place forms (trailing _) write into self, need
 *    the result dtype castable to self's (no float -> int, no int -> bool) and
 *    `other` broadcastable to self's shape; they return 0 or -1 and bump self's
 *    version.
 *  - Inputs may be any view (transposed, expanded, narrowed), 0-dim or empty.
 *  - Autograd: with grad mode on and an input requiring grad, ops with a
 *    floating result record a node (PyTorch's formulas and names: AddBackward,
 *    PowBackward, ...); rounding ops, rounding division and comparisons
 *    written in place give zero gradients, bool results are never recorded.
 *    In-place forms refuse a leaf that requires grad, and otherwise make self
 *    the node's output (its earlier history becomes the node's input).
 * The op enums (kernels/elementwise.h) are shared with the backends' kernels. */
#ifndef DL_OPS_ELEMENTWISE_H
#define DL_OPS_ELEMENTWISE_H

#include "kernels/elementwise.h"
#include "core/tensor.h"

#include <stdbool.h>

/* The op's name in messages: "add", "exp", ... (DIV_FLOOR and DIV_TRUNC are
 * "div", the Lua op that selects them with rounding_mode). */
const char *dl_binary_op_name(dl_binary_op op);
const char *dl_unary_op_name(dl_unary_op op);

/* --- binary -------------------------------------------------------------- */
/* alpha scales b for ADD/SUB (1 otherwise); an integer result needs an
 * integral alpha. */
dl_tensor *dl_binary(dl_binary_op op, dl_tensor *a, dl_tensor *b, double alpha);
int dl_binary_(dl_binary_op op, dl_tensor *self, dl_tensor *other, double alpha);
/* out = a op b into an existing tensor (PyTorch's out=): a and b broadcast
 * to out's shape, the result dtype casts to out's as in place; out may be a
 * or b; never recorded by autograd.  0 or -1. */
int dl_binary_out(dl_binary_op op, dl_tensor *out, dl_tensor *a, dl_tensor *b, double alpha);

dl_tensor *dl_add(dl_tensor *a, dl_tensor *b, double alpha);
dl_tensor *dl_sub(dl_tensor *a, dl_tensor *b, double alpha);
dl_tensor *dl_mul(dl_tensor *a, dl_tensor *b);
dl_tensor *dl_div(dl_tensor *a, dl_tensor *b);
dl_tensor *dl_pow(dl_tensor *a, dl_tensor *b);
dl_tensor *dl_maximum(dl_tensor *a, dl_tensor *b);

/* pow(tensor, scalar exponent given as a 0-dim tensor): like dl_pow, but an
 * integer base with a negative integer exponent is an error (PyTorch's rule
 * for scalar exponents; tensor exponents give 0 there instead). */
dl_tensor *dl_pow_scalar(dl_tensor *a, dl_tensor *exponent);
int dl_pow_scalar_(dl_tensor *self, dl_tensor *exponent);

/* --- unary --------------------------------------------------------------- */
dl_tensor *dl_unary(dl_unary_op op, dl_tensor *x);
int dl_unary_(dl_unary_op op, dl_tensor *self);

/* --- clamp, where, masked_fill -------------------------------------------- */
/* lo and/or hi may be NULL (not both); they broadcast with x and take part in
 * type promotion (an integer tensor clamped to 0.5 gives float32).  NaN in x
 * or a bound gives NaN. */
dl_tensor *dl_clamp(dl_tensor *x, dl_tensor *lo, dl_tensor *hi);
int dl_clamp_(dl_tensor *self, dl_tensor *lo, dl_tensor *hi);

/* cond (bool or uint8) ? a : b, all three broadcast; dtype result_type(a, b). */
dl_tensor *dl_where(dl_tensor *cond, dl_tensor *a, dl_tensor *b);

/* x with value (a 0-dim tensor, cast to x's dtype) where mask (bool or uint8)
 * is true; mask broadcasts (out of place: with x; in place: to self). */
dl_tensor *dl_masked_fill(dl_tensor *x, dl_tensor *mask, dl_tensor *value);
int dl_masked_fill_(dl_tensor *self, dl_tensor *mask, dl_tensor *value);

/* --- whole-tensor tests --------------------------------------------------- */
/* *out = same shape and all elements equal (NaN never equals). */
int dl_equal(dl_tensor *a, dl_tensor *b, bool *out);
/* |a - b| <= atol + rtol * |b| elementwise (broadcasting), computed in the
 * promoted floating type; infinities are close only to themselves. */
dl_tensor *dl_isclose(dl_tensor *a, dl_tensor *b, double rtol, double atol, bool equal_nan);
int dl_allclose(dl_tensor *a, dl_tensor *b, double rtol, double atol, bool equal_nan, bool *out);

/* --- the CUDA maps' vectorized setting ---------------------------------------------
 * kernels/elementwise.h, set_vectorized: on (1) or off (0), -1 only reads;
 * returns the setting before the call, or -1 without a CUDA backend. */
int dl_elementwise_vectorized(int on);

#endif
