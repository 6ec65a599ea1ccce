/* elementwise.h (cpu) - CPU kernels of the elementwise op family.
 *
 * The op layer (src/ops/elementwise.c) has already validated, promoted,
 * converted and broadcast everything: every tensor passed here is on the CPU
 * and has out's shape (expanded operands have stride 0).  Compute dtypes are
 * float32, float64 and int64 only (bool for the logical ops); narrower
 * integers are converted by the op layer.  Where the compute dtype is
 * float32, any operand and a floating out of binary, unary, clamp and
 * isclose may also be stored as float16 or bfloat16: converted in blocks on
 * the way, rounded once on store.  Kernels never allocate
 * and never set error messages; they report integer division by zero with a
 * -1 status.  The op enums come from kernels/elementwise.h. */
#ifndef DL_CPU_ELEMENTWISE_H
#define DL_CPU_ELEMENTWISE_H

#include "core/tensor.h"
#include "kernels/elementwise.h"

/* out = op(a, b).  a, b: one dtype in {float32, float64, int64} (bool for the
 * logical ops; float16/bfloat16 for float32); out: that dtype, or bool for
 * comparisons and logical ops.
 * alpha is used by ADD/SUB.  Returns -1 when an integer op divided by zero. */
int dl_cpu_binary(dl_binary_op op, dl_tensor *out, dl_tensor *a, dl_tensor *b, double alpha);

/* out = op(x).  x: float32/float64 (any op), int64 (integer-keeping ops),
 * bool (LOGICAL_NOT).  out: x's dtype, or bool for the predicates. */
void dl_cpu_unary(dl_unary_op op, dl_tensor *out, dl_tensor *x);

/* out = min(max(x, lo), hi), NaN-propagating; all four of one dtype in
 * {float32, float64, int64}. */
void dl_cpu_clamp(dl_tensor *out, dl_tensor *x, dl_tensor *lo, dl_tensor *hi);

/* out = cond ? a : b.  out, a, b share a dtype (any); cond is bool or uint8. */
void dl_cpu_where(dl_tensor *out, dl_tensor *cond, dl_tensor *a, dl_tensor *b);

/* self[i] = *value where mask[i] (bool or uint8); value points at one element
 * of self's dtype. */
void dl_cpu_masked_fill(dl_tensor *self, dl_tensor *mask, const void *value);

/* out (bool) = |a - b| <= atol + |rtol * b| (or equal, or both NaN with
 * equal_nan); a, b float32 or float64. */
void dl_cpu_isclose(dl_tensor *out, dl_tensor *a, dl_tensor *b, double rtol, double atol,
                    bool equal_nan);

#endif
