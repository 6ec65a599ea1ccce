/* kernels/elementwise.h - the kernel interface of the elementwise family
 * (ops/elementwise.c): the binary and unary op enums and the CUDA table of
 * binary, unary, clamp, where, masked_fill and isclose.  The CPU kernels
 * (cpu/elementwise.h) take the same tensors.
 * Shared by ops/, cpu/ and cuda/; the table's contract is in kernels/cuda.h.
 *
 * What the op layer guarantees (as for the CPU kernels, src/cpu/elementwise.h and
 * src/cpu/activation.h): every operand has out's shape (broadcast operands are
 * expanded, stride 0); out and every dimensioned operand are on one CUDA device;
 * an operand may also be a CPU tensor holding one value (a 0-dim scalar,
 * expanded), which the kernels take by value.  Compute dtypes are those of the
 * CPU kernels, and in addition a float16/bfloat16 tensor may stand wherever a
 * float32 one is read or written: it is loaded as float and the float result is
 * rounded once when stored, so results equal the CPU's (which computes in
 * float32 and rounds per element).  The entry points check dtypes, devices and
 * shapes on the host before anything is launched. */
#ifndef DL_KERNELS_ELEMENTWISE_H
#define DL_KERNELS_ELEMENTWISE_H

#include "core/hostdev.h"
#include "core/tensor.h"

#include <stdbool.h>
#include <stdint.h>

typedef enum {
    /* arithmetic: result is the promoted type */
    DL_BINARY_ADD = 0, /* a + alpha * b */
    DL_BINARY_SUB,     /* a - alpha * b */
    DL_BINARY_MUL,
    DL_BINARY_DIV,       /* true division: integer inputs give float32 */
    DL_BINARY_DIV_FLOOR, /* div(.., rounding_mode="floor"), Python's // */
    DL_BINARY_DIV_TRUNC, /* div(.., rounding_mode="trunc") */
    DL_BINARY_POW,
    DL_BINARY_MAXIMUM, /* NaN-propagating */
    DL_BINARY_MINIMUM,
    DL_BINARY_REMAINDER, /* sign of the divisor (Python's %) */
    DL_BINARY_FMOD,      /* sign of the dividend (C's fmod) */
    DL_BINARY_ATAN2,     /* integer inputs give float32 */
    /* comparisons: bool result, compared in the promoted type */
    DL_BINARY_EQ,
    DL_BINARY_NE,
    DL_BINARY_LT,
    DL_BINARY_LE,
    DL_BINARY_GT,
    DL_BINARY_GE,
    /* logical: bool result, nonzero (and NaN) is true */
    DL_BINARY_LOGICAL_AND,
    DL_BINARY_LOGICAL_OR,
    DL_BINARY_LOGICAL_XOR,
    DL_BINARY_COUNT
} dl_binary_op;

typedef enum {
    /* keep integer dtypes (compute exactly on integers) */
    DL_UNARY_NEG = 0,
    DL_UNARY_ABS,
    DL_UNARY_SIGN,
    DL_UNARY_RELU,
    DL_UNARY_FLOOR,
    DL_UNARY_CEIL,
    DL_UNARY_ROUND, /* half to even */
    DL_UNARY_TRUNC,
    DL_UNARY_SQUARE, /* bool gives int64 */
    /* floating functions: integer and bool inputs give float32 */
    DL_UNARY_EXP,
    DL_UNARY_EXP2,
    DL_UNARY_EXPM1,
    DL_UNARY_LOG,
    DL_UNARY_LOG2,
    DL_UNARY_LOG10,
    DL_UNARY_LOG1P,
    DL_UNARY_SQRT,
    DL_UNARY_RSQRT,
    DL_UNARY_RECIPROCAL,
    DL_UNARY_SIN,
    DL_UNARY_COS,
    DL_UNARY_TAN,
    DL_UNARY_ASIN,
    DL_UNARY_ACOS,
    DL_UNARY_ATAN,
    DL_UNARY_SINH,
    DL_UNARY_COSH,
    DL_UNARY_TANH,
    DL_UNARY_SIGMOID,
    DL_UNARY_ERF,
    DL_UNARY_ERFC,      /* 1 - erf(x), without the cancellation */
    DL_UNARY_GELU,      /* x * 0.5 * (1 + erf(x / sqrt(2))) */
    DL_UNARY_GELU_TANH, /* 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3))) */
    DL_UNARY_SILU,      /* x / (1 + exp(-x)) */
    DL_UNARY_FRAC,      /* x - trunc(x) */
    /* predicates: bool result */
    DL_UNARY_LOGICAL_NOT,
    DL_UNARY_ISNAN,
    DL_UNARY_ISINF,
    DL_UNARY_ISFINITE,
    DL_UNARY_COUNT
} dl_unary_op;

/* binary returns this (with no message) when an integer division family op
 * (DIV_FLOOR, DIV_TRUNC, REMAINDER, FMOD on int64) met a zero divisor; the op
 * layer reports it as the CPU path does. */
#define DL_CUDA_ZERO_DIVISION (-2)

typedef struct dl_cuda_elementwise_kernels {
    const char *family;
    /* dl_cpu_binary: out = op(a, b); alpha scales b for ADD/SUB.  Only integer
     * division ops wait for the device (to read the zero-divisor flag). */
    int (*binary)(dl_binary_op op, dl_tensor *out, dl_tensor *a, dl_tensor *b, double alpha);
    /* dl_cpu_unary: out = op(x). */
    int (*unary)(dl_unary_op op, dl_tensor *out, dl_tensor *x);
    /* dl_cpu_clamp: out = min(max(x, lo), hi), NaN-propagating. */
    int (*clamp)(dl_tensor *out, dl_tensor *x, dl_tensor *lo, dl_tensor *hi);
    /* dl_cpu_where: out = cond ? a : b (out, a, b one dtype, any; cond bool or uint8). */
    int (*where)(dl_tensor *out, dl_tensor *cond, dl_tensor *a, dl_tensor *b);
    /* dl_cpu_masked_fill: self[i] = *value where mask[i]; value is a HOST pointer
     * to one element of self's dtype. */
    int (*masked_fill)(dl_tensor *self, dl_tensor *mask, const void *value);
    /* dl_cpu_isclose: out (bool) = |a - b| <= atol + |rtol * b| (a, b float32/64). */
    int (*isclose)(dl_tensor *out, dl_tensor *a, dl_tensor *b, double rtol, double atol,
                   bool equal_nan);
    /* The vectorized maps (16-byte packs of float32/float16/bfloat16, int
     * indices below 2^31; cuda/elementwise.cu) on (1) or off (0, the maps as
     * before them; DLUA_CUDA_VEC=0 at start-up); -1 only reads.  Returns the
     * setting before the call. */
    int (*set_vectorized)(int on);
} dl_cuda_elementwise_kernels;

extern const dl_cuda_elementwise_kernels *dl_cuda_elementwise;

/* --- int64 arithmetic, one definition for both backends ---------------------
 * Wrapping (two's complement) add, multiply and negate; integer pow by
 * squaring (wrapping; negative exponents give 0 except for bases 1 and -1, as
 * PyTorch's integer pow does); the division family (op: DL_BINARY_DIV_FLOOR,
 * DIV_TRUNC, REMAINDER or FMOD), where a zero divisor sets *zero (when given)
 * and gives 0, and INT64_MIN / -1 wraps instead of trapping. */

static inline DL_HD int64_t dl_wrap_add(int64_t a, int64_t b) {
    return (int64_t)((uint64_t)a + (uint64_t)b);
}
static inline DL_HD int64_t dl_wrap_mul(int64_t a, int64_t b) {
    return (int64_t)((uint64_t)a * (uint64_t)b);
}
static inline DL_HD int64_t dl_wrap_neg(int64_t a) {
    return (int64_t)(0 - (uint64_t)a);
}

static inline DL_HD int64_t dl_ipow(int64_t base, int64_t e) {
    if (e < 0) {
        if (base == 1) return 1;
        if (base == -1) return (e & 1) ? -1 : 1;
        return 0;
    }
    uint64_t r = 1, b = (uint64_t)base;
    while (e) {
        if (e & 1) r *= b;
        b *= b;
        e >>= 1;
    }
    return (int64_t)r;
}

static inline DL_HD int64_t dl_idiv(int op, int64_t a, int64_t b, int *zero) {
    if (b == 0) {
        if (zero) *zero = 1;
        return 0;
    }
    if (b == -1) return op == DL_BINARY_DIV_FLOOR || op == DL_BINARY_DIV_TRUNC ? dl_wrap_neg(a) : 0;
    int64_t q = a / b, r = a % b;
    switch (op) {
    case DL_BINARY_DIV_TRUNC: return q;
    case DL_BINARY_DIV_FLOOR: return (r != 0 && ((r < 0) != (b < 0))) ? q - 1 : q;
    case DL_BINARY_REMAINDER: return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
    default: return r; /* FMOD */
    }
}

#endif
