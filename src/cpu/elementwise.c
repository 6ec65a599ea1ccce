/* elementwise.c (cpu) - CPU kernels of the elementwise op family (see
 * elementwise.h for the contract the op layer guarantees).
 *
 * Layout: scalar helpers, the row-loop shapes, then one row function per
 * compute dtype (float32, float64, int64, bool) holding a switch over the ops,
 * then the entry points that run a row function over dl_iter_foreach.
 * float32 computes in float (expf, tanhf, ...) so results agree with PyTorch
 * to float32 rounding; float64 in double; int64 wraps (unsigned arithmetic,
 * never undefined behaviour) and never goes through double. */
#include "cpu/elementwise.h"
#include "core/iter.h"
#include "cpu/half.h"
#include "cpu/vecmath.h"

#include <math.h>
#include <string.h>

/* --- scalar helpers -------------------------------------------------------- */

/* Python's floor division for floats: the quotient of the exact remainder
 * correction, so it agrees with a - b * floor_div(a, b) == remainder(a, b). */
static inline float floordiv_f32(float a, float b) {
    if (b == 0) return a / b;
    float mod = fmodf(a, b);
    float q = (a - mod) / b;
    if (mod != 0 && ((b < 0) != (mod < 0))) q -= 1;
    if (q == 0) return copysignf(0.0f, a / b);
    float fq = floorf(q);
    return q - fq > 0.5f ? fq + 1 : fq;
}

static inline double floordiv_f64(double a, double b) {
    if (b == 0) return a / b;
    double mod = fmod(a, b);
    double q = (a - mod) / b;
    if (mod != 0 && ((b < 0) != (mod < 0))) q -= 1;
    if (q == 0) return copysign(0.0, a / b);
    double fq = floor(q);
    return q - fq > 0.5 ? fq + 1 : fq;
}

static inline float remainder_f32(float a, float b) {
    float mod = fmodf(a, b);
    if (mod != 0 && ((b < 0) != (mod < 0))) mod += b;
    return mod;
}

static inline double remainder_f64(double a, double b) {
    double mod = fmod(a, b);
    if (mod != 0 && ((b < 0) != (mod < 0))) mod += b;
    return mod;
}

/* --- row-loop shapes --------------------------------------------------------
 * Each expands inside a dl_loop_fn (data, strides in bytes, n): data[0] is
 * the output, data[1] (and data[2]) the inputs.  EXPR reads x (and y).
 * Contiguous rows, and rows whose other operand is a broadcast scalar
 * (stride 0), get plain indexed loops the compiler vectorises; anything else
 * walks the byte strides. */

#define LOOP_UNARY(TO, TI, EXPR)                                                                   \
    do {                                                                                           \
        char *po_ = data[0], *px_ = data[1];                                                       \
        int64_t so_ = strides[0], sx_ = strides[1];                                                \
        if (so_ == (int64_t)sizeof(TO) && sx_ == (int64_t)sizeof(TI)) {                            \
            TO *o_ = (TO *)po_;                                                                    \
            const TI *xs_ = (const TI *)px_;                                                       \
            _Pragma("omp simd") for (int64_t i_ = 0; i_ < n; i_++) {                               \
                TI x = xs_[i_];                                                                    \
                o_[i_] = (TO)(EXPR);                                                               \
            }                                                                                      \
        } else {                                                                                   \
            for (int64_t i_ = 0; i_ < n; i_++) {                                                   \
                TI x = *(const TI *)(px_ + i_ * sx_);                                              \
                *(TO *)(po_ + i_ * so_) = (TO)(EXPR);                                              \
            }                                                                                      \
        }                                                                                          \
    } while (0)

#define LOOP_BINARY(TO, TI, EXPR)                                                                  \
    do {                                                                                           \
        char *po_ = data[0], *pa_ = data[1], *pb_ = data[2];                                       \
        int64_t so_ = strides[0], sa_ = strides[1], sb_ = strides[2];                              \
        const int64_t zo_ = (int64_t)sizeof(TO), zi_ = (int64_t)sizeof(TI);                        \
        TO *o_ = (TO *)po_;                                                                        \
        const TI *as_ = (const TI *)pa_, *bs_ = (const TI *)pb_;                                   \
        if (so_ == zo_ && sa_ == zi_ && sb_ == zi_) {                                              \
            _Pragma("omp simd") for (int64_t i_ = 0; i_ < n; i_++) {                               \
                TI x = as_[i_], y = bs_[i_];                                                       \
                (void)x, (void)y;                                                                  \
                o_[i_] = (TO)(EXPR);                                                               \
            }                                                                                      \
        } else if (so_ == zo_ && sa_ == zi_ && sb_ == 0) {                                         \
            const TI y = bs_[0];                                                                   \
            (void)y;                                                                               \
            _Pragma("omp simd") for (int64_t i_ = 0; i_ < n; i_++) {                               \
                TI x = as_[i_];                                                                    \
                (void)x;                                                                           \
                o_[i_] = (TO)(EXPR);                                                               \
            }                                                                                      \
        } else if (so_ == zo_ && sa_ == 0 && sb_ == zi_) {                                         \
            const TI x = as_[0];                                                                   \
            (void)x;                                                                               \
            _Pragma("omp simd") for (int64_t i_ = 0; i_ < n; i_++) {                               \
                TI y = bs_[i_];                                                                    \
                (void)y;                                                                           \
                o_[i_] = (TO)(EXPR);                                                               \
            }                                                                                      \
        } else {                                                                                   \
            for (int64_t i_ = 0; i_ < n; i_++) {                                                   \
                TI x = *(const TI *)(pa_ + i_ * sa_), y = *(const TI *)(pb_ + i_ * sb_);           \
                (void)x, (void)y;                                                                  \
                *(TO *)(po_ + i_ * so_) = (TO)(EXPR);                                              \
            }                                                                                      \
        }                                                                                          \
    } while (0)

/* --- binary row functions --------------------------------------------------- */

typedef struct {
    dl_binary_op op;
    double alpha;
    int zero_division; /* set (racily, to 1 only) by integer division kernels */
} binary_ctx;

/* pow with a broadcast scalar exponent: the exponents PyTorch special-cases
 * (so x^2 is exactly x*x and x^0.5 is sqrt). */
static int pow_special_f32(char **data, const int64_t *strides, int64_t n) {
    if (strides[2] != 0) return 0;
    float e = *(const float *)data[2];
    if (e == 2)
        LOOP_BINARY(float, float, x *x);
    else if (e == 3)
        LOOP_BINARY(float, float, x *x *x);
    else if (e == 0.5f)
        LOOP_BINARY(float, float, sqrtf(x));
    else if (e == -0.5f)
        LOOP_BINARY(float, float, 1.0f / sqrtf(x));
    else if (e == -1)
        LOOP_BINARY(float, float, 1.0f / x);
    else if (e == -2)
        LOOP_BINARY(float, float, 1.0f / (x * x));
    else
        return 0;
    return 1;
}

static int pow_special_f64(char **data, const int64_t *strides, int64_t n) {
    if (strides[2] != 0) return 0;
    double e = *(const double *)data[2];
    if (e == 2)
        LOOP_BINARY(double, double, x *x);
    else if (e == 3)
        LOOP_BINARY(double, double, x *x *x);
    else if (e == 0.5)
        LOOP_BINARY(double, double, sqrt(x));
    else if (e == -0.5)
        LOOP_BINARY(double, double, 1.0 / sqrt(x));
    else if (e == -1)
        LOOP_BINARY(double, double, 1.0 / x);
    else if (e == -2)
        LOOP_BINARY(double, double, 1.0 / (x * x));
    else
        return 0;
    return 1;
}

static void binary_f32(char **data, const int64_t *strides, int64_t n, void *vctx) {
    binary_ctx *c = vctx;
    const float alpha = (float)c->alpha;
    switch (c->op) {
    case DL_BINARY_ADD:
        if (alpha == 1)
            LOOP_BINARY(float, float, x + y);
        else
            LOOP_BINARY(float, float, x + alpha * y);
        break;
    case DL_BINARY_SUB:
        if (alpha == 1)
            LOOP_BINARY(float, float, x - y);
        else
            LOOP_BINARY(float, float, x - alpha * y);
        break;
    case DL_BINARY_MUL: LOOP_BINARY(float, float, x *y); break;
    case DL_BINARY_DIV: LOOP_BINARY(float, float, x / y); break;
    case DL_BINARY_DIV_FLOOR: LOOP_BINARY(float, float, floordiv_f32(x, y)); break;
    case DL_BINARY_DIV_TRUNC: LOOP_BINARY(float, float, truncf(x / y)); break;
    case DL_BINARY_POW:
        if (!pow_special_f32(data, strides, n) && !dl_cpu_vec_pow(false, data, strides, n))
            LOOP_BINARY(float, float, powf(x, y));
        break;
    case DL_BINARY_MAXIMUM:
        LOOP_BINARY(float, float, x != x ? x : y != y ? y : x < y ? y : x);
        break;
    case DL_BINARY_MINIMUM:
        LOOP_BINARY(float, float, x != x ? x : y != y ? y : y < x ? y : x);
        break;
    case DL_BINARY_REMAINDER: LOOP_BINARY(float, float, remainder_f32(x, y)); break;
    case DL_BINARY_FMOD: LOOP_BINARY(float, float, fmodf(x, y)); break;
    case DL_BINARY_ATAN2: LOOP_BINARY(float, float, atan2f(x, y)); break;
    case DL_BINARY_EQ: LOOP_BINARY(uint8_t, float, x == y); break;
    case DL_BINARY_NE: LOOP_BINARY(uint8_t, float, x != y); break;
    case DL_BINARY_LT: LOOP_BINARY(uint8_t, float, x < y); break;
    case DL_BINARY_LE: LOOP_BINARY(uint8_t, float, x <= y); break;
    case DL_BINARY_GT: LOOP_BINARY(uint8_t, float, x > y); break;
    case DL_BINARY_GE: LOOP_BINARY(uint8_t, float, x >= y); break;
    default: break; /* logical ops run on bool */
    }
}

static void binary_f64(char **data, const int64_t *strides, int64_t n, void *vctx) {
    binary_ctx *c = vctx;
    const double alpha = c->alpha;
    switch (c->op) {
    case DL_BINARY_ADD:
        if (alpha == 1)
            LOOP_BINARY(double, double, x + y);
        else
            LOOP_BINARY(double, double, x + alpha * y);
        break;
    case DL_BINARY_SUB:
        if (alpha == 1)
            LOOP_BINARY(double, double, x - y);
        else
            LOOP_BINARY(double, double, x - alpha * y);
        break;
    case DL_BINARY_MUL: LOOP_BINARY(double, double, x *y); break;
    case DL_BINARY_DIV: LOOP_BINARY(double, double, x / y); break;
    case DL_BINARY_DIV_FLOOR: LOOP_BINARY(double, double, floordiv_f64(x, y)); break;
    case DL_BINARY_DIV_TRUNC: LOOP_BINARY(double, double, trunc(x / y)); break;
    case DL_BINARY_POW:
        if (!pow_special_f64(data, strides, n) && !dl_cpu_vec_pow(true, data, strides, n))
            LOOP_BINARY(double, double, pow(x, y));
        break;
    case DL_BINARY_MAXIMUM:
        LOOP_BINARY(double, double, x != x ? x : y != y ? y : x < y ? y : x);
        break;
    case DL_BINARY_MINIMUM:
        LOOP_BINARY(double, double, x != x ? x : y != y ? y : y < x ? y : x);
        break;
    case DL_BINARY_REMAINDER: LOOP_BINARY(double, double, remainder_f64(x, y)); break;
    case DL_BINARY_FMOD: LOOP_BINARY(double, double, fmod(x, y)); break;
    case DL_BINARY_ATAN2: LOOP_BINARY(double, double, atan2(x, y)); break;
    case DL_BINARY_EQ: LOOP_BINARY(uint8_t, double, x == y); break;
    case DL_BINARY_NE: LOOP_BINARY(uint8_t, double, x != y); break;
    case DL_BINARY_LT: LOOP_BINARY(uint8_t, double, x < y); break;
    case DL_BINARY_LE: LOOP_BINARY(uint8_t, double, x <= y); break;
    case DL_BINARY_GT: LOOP_BINARY(uint8_t, double, x > y); break;
    case DL_BINARY_GE: LOOP_BINARY(uint8_t, double, x >= y); break;
    default: break;
    }
}

/* Integer division family: a plain strided loop (division does not
 * vectorise) that records a zero divisor. */
static void idiv_rows(binary_ctx *c, char **data, const int64_t *strides, int64_t n) {
    int zero = 0;
    for (int64_t i = 0; i < n; i++) {
        int64_t x = *(const int64_t *)(data[1] + i * strides[1]);
        int64_t y = *(const int64_t *)(data[2] + i * strides[2]);
        *(int64_t *)(data[0] + i * strides[0]) = dl_idiv((int)c->op, x, y, &zero);
    }
    if (zero) __atomic_store_n(&c->zero_division, 1, __ATOMIC_RELAXED);
}

static void binary_i64(char **data, const int64_t *strides, int64_t n, void *vctx) {
    binary_ctx *c = vctx;
    const int64_t alpha = (int64_t)c->alpha;
    switch (c->op) {
    case DL_BINARY_ADD:
        if (alpha == 1)
            LOOP_BINARY(int64_t, int64_t, dl_wrap_add(x, y));
        else
            LOOP_BINARY(int64_t, int64_t, dl_wrap_add(x, dl_wrap_mul(alpha, y)));
        break;
    case DL_BINARY_SUB:
        if (alpha == 1)
            LOOP_BINARY(int64_t, int64_t, dl_wrap_add(x, dl_wrap_neg(y)));
        else
            LOOP_BINARY(int64_t, int64_t, dl_wrap_add(x, dl_wrap_neg(dl_wrap_mul(alpha, y))));
        break;
    case DL_BINARY_MUL: LOOP_BINARY(int64_t, int64_t, dl_wrap_mul(x, y)); break;
    case DL_BINARY_DIV_FLOOR:
    case DL_BINARY_DIV_TRUNC:
    case DL_BINARY_REMAINDER:
    case DL_BINARY_FMOD: idiv_rows(c, data, strides, n); break;
    case DL_BINARY_POW: LOOP_BINARY(int64_t, int64_t, dl_ipow(x, y)); break;
    case DL_BINARY_MAXIMUM: LOOP_BINARY(int64_t, int64_t, x < y ? y : x); break;
    case DL_BINARY_MINIMUM: LOOP_BINARY(int64_t, int64_t, y < x ? y : x); break;
    case DL_BINARY_EQ: LOOP_BINARY(uint8_t, int64_t, x == y); break;
    case DL_BINARY_NE: LOOP_BINARY(uint8_t, int64_t, x != y); break;
    case DL_BINARY_LT: LOOP_BINARY(uint8_t, int64_t, x < y); break;
    case DL_BINARY_LE: LOOP_BINARY(uint8_t, int64_t, x <= y); break;
    case DL_BINARY_GT: LOOP_BINARY(uint8_t, int64_t, x > y); break;
    case DL_BINARY_GE: LOOP_BINARY(uint8_t, int64_t, x >= y); break;
    default: break; /* true division and atan2 run on floats */
    }
}

static void binary_bool(char **data, const int64_t *strides, int64_t n, void *vctx) {
    binary_ctx *c = vctx;
    switch (c->op) {
    case DL_BINARY_LOGICAL_AND: LOOP_BINARY(uint8_t, uint8_t, (x != 0) & (y != 0)); break;
    case DL_BINARY_LOGICAL_OR: LOOP_BINARY(uint8_t, uint8_t, (x != 0) | (y != 0)); break;
    case DL_BINARY_LOGICAL_XOR: LOOP_BINARY(uint8_t, uint8_t, (x != 0) ^ (y != 0)); break;
    default: break;
    }
}

/* --- unary row functions ------------------------------------------------------ */

/* GELU in PyTorch's order of operations (its CPU kernels round the same way). */
static inline float gelu_f32(float x) {
    return x * 0.5f * (1.0f + erff(x * (float)M_SQRT1_2));
}
static inline double gelu_f64(double x) {
    return x * 0.5 * (1.0 + erf(x * M_SQRT1_2));
}
/* the tanh form: sqrt(2/pi) * (x + 0.044715 x^3) inside */
static inline float gelu_tanh_f32(float x) {
    const float beta = (float)(M_SQRT2 * M_2_SQRTPI * 0.5), kappa = 0.044715f;
    float inner = beta * (x + kappa * (x * x * x));
    return 0.5f * x * (1.0f + tanhf(inner));
}
static inline double gelu_tanh_f64(double x) {
    const double beta = M_SQRT2 * M_2_SQRTPI * 0.5, kappa = 0.044715;
    double inner = beta * (x + kappa * (x * x * x));
    return 0.5 * x * (1.0 + tanh(inner));
}

static void unary_f32(char **data, const int64_t *strides, int64_t n, void *vctx) {
    if (dl_cpu_vec_unary_f32(*(const dl_unary_op *)vctx, data, strides, n)) return;
    switch (*(const dl_unary_op *)vctx) {
    case DL_UNARY_NEG: LOOP_UNARY(float, float, -x); break;
    case DL_UNARY_ABS: LOOP_UNARY(float, float, fabsf(x)); break;
    case DL_UNARY_SIGN: LOOP_UNARY(float, float, (float)((0 < x) - (x < 0))); break;
    case DL_UNARY_RELU: LOOP_UNARY(float, float, x < 0 ? 0.0f : x); break;
    case DL_UNARY_FLOOR: LOOP_UNARY(float, float, floorf(x)); break;
    case DL_UNARY_CEIL: LOOP_UNARY(float, float, ceilf(x)); break;
    case DL_UNARY_ROUND: LOOP_UNARY(float, float, nearbyintf(x)); break;
    case DL_UNARY_TRUNC: LOOP_UNARY(float, float, truncf(x)); break;
    case DL_UNARY_SQUARE: LOOP_UNARY(float, float, x *x); break;
    case DL_UNARY_EXP: LOOP_UNARY(float, float, expf(x)); break;
    case DL_UNARY_EXP2: LOOP_UNARY(float, float, exp2f(x)); break;
    case DL_UNARY_EXPM1: LOOP_UNARY(float, float, expm1f(x)); break;
    case DL_UNARY_LOG: LOOP_UNARY(float, float, logf(x)); break;
    case DL_UNARY_LOG2: LOOP_UNARY(float, float, log2f(x)); break;
    case DL_UNARY_LOG10: LOOP_UNARY(float, float, log10f(x)); break;
    case DL_UNARY_LOG1P: LOOP_UNARY(float, float, log1pf(x)); break;
    case DL_UNARY_SQRT: LOOP_UNARY(float, float, sqrtf(x)); break;
    case DL_UNARY_RSQRT: LOOP_UNARY(float, float, 1.0f / sqrtf(x)); break;
    case DL_UNARY_RECIPROCAL: LOOP_UNARY(float, float, 1.0f / x); break;
    case DL_UNARY_SIN: LOOP_UNARY(float, float, sinf(x)); break;
    case DL_UNARY_COS: LOOP_UNARY(float, float, cosf(x)); break;
    case DL_UNARY_TAN: LOOP_UNARY(float, float, tanf(x)); break;
    case DL_UNARY_ASIN: LOOP_UNARY(float, float, asinf(x)); break;
    case DL_UNARY_ACOS: LOOP_UNARY(float, float, acosf(x)); break;
    case DL_UNARY_ATAN: LOOP_UNARY(float, float, atanf(x)); break;
    case DL_UNARY_SINH: LOOP_UNARY(float, float, sinhf(x)); break;
    case DL_UNARY_COSH: LOOP_UNARY(float, float, coshf(x)); break;
    case DL_UNARY_TANH: LOOP_UNARY(float, float, tanhf(x)); break;
    case DL_UNARY_SIGMOID: LOOP_UNARY(float, float, 1.0f / (1.0f + expf(-x))); break;
    case DL_UNARY_ERF: LOOP_UNARY(float, float, erff(x)); break;
    case DL_UNARY_ERFC: LOOP_UNARY(float, float, erfcf(x)); break;
    case DL_UNARY_GELU: LOOP_UNARY(float, float, gelu_f32(x)); break;
    case DL_UNARY_GELU_TANH: LOOP_UNARY(float, float, gelu_tanh_f32(x)); break;
    case DL_UNARY_SILU: LOOP_UNARY(float, float, x / (1.0f + expf(-x))); break;
    case DL_UNARY_FRAC: LOOP_UNARY(float, float, x - truncf(x)); break;
    case DL_UNARY_LOGICAL_NOT: LOOP_UNARY(uint8_t, float, x == 0); break;
    case DL_UNARY_ISNAN: LOOP_UNARY(uint8_t, float, x != x); break;
    case DL_UNARY_ISINF: LOOP_UNARY(uint8_t, float, fabsf(x) == INFINITY); break;
    case DL_UNARY_ISFINITE: LOOP_UNARY(uint8_t, float, fabsf(x) < INFINITY); break;
    default: break;
    }
}

static void unary_f64(char **data, const int64_t *strides, int64_t n, void *vctx) {
    if (dl_cpu_vec_unary_f64(*(const dl_unary_op *)vctx, data, strides, n)) return;
    switch (*(const dl_unary_op *)vctx) {
    case DL_UNARY_NEG: LOOP_UNARY(double, double, -x); break;
    case DL_UNARY_ABS: LOOP_UNARY(double, double, fabs(x)); break;
    case DL_UNARY_SIGN: LOOP_UNARY(double, double, (double)((0 < x) - (x < 0))); break;
    case DL_UNARY_RELU: LOOP_UNARY(double, double, x < 0 ? 0.0 : x); break;
    case DL_UNARY_FLOOR: LOOP_UNARY(double, double, floor(x)); break;
    case DL_UNARY_CEIL: LOOP_UNARY(double, double, ceil(x)); break;
    case DL_UNARY_ROUND: LOOP_UNARY(double, double, nearbyint(x)); break;
    case DL_UNARY_TRUNC: LOOP_UNARY(double, double, trunc(x)); break;
    case DL_UNARY_SQUARE: LOOP_UNARY(double, double, x *x); break;
    case DL_UNARY_EXP: LOOP_UNARY(double, double, exp(x)); break;
    case DL_UNARY_EXP2: LOOP_UNARY(double, double, exp2(x)); break;
    case DL_UNARY_EXPM1: LOOP_UNARY(double, double, expm1(x)); break;
    case DL_UNARY_LOG: LOOP_UNARY(double, double, log(x)); break;
    case DL_UNARY_LOG2: LOOP_UNARY(double, double, log2(x)); break;
    case DL_UNARY_LOG10: LOOP_UNARY(double, double, log10(x)); break;
    case DL_UNARY_LOG1P: LOOP_UNARY(double, double, log1p(x)); break;
    case DL_UNARY_SQRT: LOOP_UNARY(double, double, sqrt(x)); break;
    case DL_UNARY_RSQRT: LOOP_UNARY(double, double, 1.0 / sqrt(x)); break;
    case DL_UNARY_RECIPROCAL: LOOP_UNARY(double, double, 1.0 / x); break;
    case DL_UNARY_SIN: LOOP_UNARY(double, double, sin(x)); break;
    case DL_UNARY_COS: LOOP_UNARY(double, double, cos(x)); break;
    case DL_UNARY_TAN: LOOP_UNARY(double, double, tan(x)); break;
    case DL_UNARY_ASIN: LOOP_UNARY(double, double, asin(x)); break;
    case DL_UNARY_ACOS: LOOP_UNARY(double, double, acos(x)); break;
    case DL_UNARY_ATAN: LOOP_UNARY(double, double, atan(x)); break;
    case DL_UNARY_SINH: LOOP_UNARY(double, double, sinh(x)); break;
    case DL_UNARY_COSH: LOOP_UNARY(double, double, cosh(x)); break;
    case DL_UNARY_TANH: LOOP_UNARY(double, double, tanh(x)); break;
    case DL_UNARY_SIGMOID: LOOP_UNARY(double, double, 1.0 / (1.0 + exp(-x))); break;
    case DL_UNARY_ERF: LOOP_UNARY(double, double, erf(x)); break;
    case DL_UNARY_ERFC: LOOP_UNARY(double, double, erfc(x)); break;
    case DL_UNARY_GELU: LOOP_UNARY(double, double, gelu_f64(x)); break;
    case DL_UNARY_GELU_TANH: LOOP_UNARY(double, double, gelu_tanh_f64(x)); break;
    case DL_UNARY_SILU: LOOP_UNARY(double, double, x / (1.0 + exp(-x))); break;
    case DL_UNARY_FRAC: LOOP_UNARY(double, double, x - trunc(x)); break;
    case DL_UNARY_LOGICAL_NOT: LOOP_UNARY(uint8_t, double, x == 0); break;
    case DL_UNARY_ISNAN: LOOP_UNARY(uint8_t, double, x != x); break;
    case DL_UNARY_ISINF: LOOP_UNARY(uint8_t, double, fabs(x) == INFINITY); break;
    case DL_UNARY_ISFINITE: LOOP_UNARY(uint8_t, double, fabs(x) < INFINITY); break;
    default: break;
    }
}

static void unary_i64(char **data, const int64_t *strides, int64_t n, void *vctx) {
    switch (*(const dl_unary_op *)vctx) {
    case DL_UNARY_NEG: LOOP_UNARY(int64_t, int64_t, dl_wrap_neg(x)); break;
    case DL_UNARY_ABS: LOOP_UNARY(int64_t, int64_t, x < 0 ? dl_wrap_neg(x) : x); break;
    case DL_UNARY_SIGN: LOOP_UNARY(int64_t, int64_t, (0 < x) - (x < 0)); break;
    case DL_UNARY_RELU: LOOP_UNARY(int64_t, int64_t, x < 0 ? 0 : x); break;
    case DL_UNARY_FLOOR:
    case DL_UNARY_CEIL:
    case DL_UNARY_ROUND:
    case DL_UNARY_TRUNC: LOOP_UNARY(int64_t, int64_t, x); break;
    case DL_UNARY_SQUARE: LOOP_UNARY(int64_t, int64_t, dl_wrap_mul(x, x)); break;
    case DL_UNARY_LOGICAL_NOT: LOOP_UNARY(uint8_t, int64_t, x == 0); break;
    default: break; /* floating functions run on floats */
    }
}

static void unary_bool(char **data, const int64_t *strides, int64_t n, void *vctx) {
    if (*(const dl_unary_op *)vctx == DL_UNARY_LOGICAL_NOT) LOOP_UNARY(uint8_t, uint8_t, x == 0);
}

/* --- clamp, where, masked_fill, isclose row functions ------------------------ */

/* min(max(x, lo), hi) for non-NaN bounds; NaN x stays NaN (comparisons fail). */
static inline float clamp_f32s(float x, float lo, float hi) {
    float r = x < lo ? lo : x;
    return r > hi ? hi : r;
}

static inline double clamp_f64s(double x, double lo, double hi) {
    double r = x < lo ? lo : x;
    return r > hi ? hi : r;
}

static void clamp_f32(char **data, const int64_t *strides, int64_t n, void *vctx) {
    (void)vctx;
    if (strides[2] == 0 && strides[3] == 0) { /* scalar bounds: the common case */
        const float lo = *(const float *)data[2], hi = *(const float *)data[3];
        if (lo != lo || hi != hi) {
            LOOP_UNARY(float, float, NAN + x);
            return;
        }
        LOOP_UNARY(float, float, clamp_f32s(x, lo, hi));
        return;
    }
    for (int64_t i = 0; i < n; i++) {
        float x = *(const float *)(data[1] + i * strides[1]);
        float lo = *(const float *)(data[2] + i * strides[2]);
        float hi = *(const float *)(data[3] + i * strides[3]);
        float r = lo != lo ? lo : x < lo ? lo : x;
        r = hi != hi ? hi : r > hi ? hi : r;
        *(float *)(data[0] + i * strides[0]) = r;
    }
}

static void clamp_f64(char **data, const int64_t *strides, int64_t n, void *vctx) {
    (void)vctx;
    if (strides[2] == 0 && strides[3] == 0) {
        const double lo = *(const double *)data[2], hi = *(const double *)data[3];
        if (lo != lo || hi != hi) {
            LOOP_UNARY(double, double, NAN + x);
            return;
        }
        LOOP_UNARY(double, double, clamp_f64s(x, lo, hi));
        return;
    }
    for (int64_t i = 0; i < n; i++) {
        double x = *(const double *)(data[1] + i * strides[1]);
        double lo = *(const double *)(data[2] + i * strides[2]);
        double hi = *(const double *)(data[3] + i * strides[3]);
        double r = lo != lo ? lo : x < lo ? lo : x;
        r = hi != hi ? hi : r > hi ? hi : r;
        *(double *)(data[0] + i * strides[0]) = r;
    }
}

static void clamp_i64(char **data, const int64_t *strides, int64_t n, void *vctx) {
    (void)vctx;
    for (int64_t i = 0; i < n; i++) {
        int64_t x = *(const int64_t *)(data[1] + i * strides[1]);
        int64_t lo = *(const int64_t *)(data[2] + i * strides[2]);
        int64_t hi = *(const int64_t *)(data[3] + i * strides[3]);
        int64_t r = x < lo ? lo : x;
        *(int64_t *)(data[0] + i * strides[0]) = r > hi ? hi : r;
    }
}

/* where: operands out, cond, a, b; ctx holds the element size. */
static void where_rows(char **data, const int64_t *strides, int64_t n, void *vctx) {
    size_t sz = *(const size_t *)vctx;
    char *o = data[0];
    const char *c = data[1], *a = data[2], *b = data[3];
    for (int64_t i = 0; i < n; i++) {
        const char *src = c[i * strides[1]] ? a + i * strides[2] : b + i * strides[3];
        char *dst = o + i * strides[0];
        switch (sz) {
        case 1: *dst = *src; break;
        case 2: memcpy(dst, src, 2); break;
        case 4: memcpy(dst, src, 4); break;
        default: memcpy(dst, src, 8); break;
        }
    }
}

typedef struct {
    size_t size;
    const void *value;
} fill_ctx;

/* self[i] = mask[i] ? v : self[i] over a unit-stride row of T (a select the
 * compiler vectorises); the mask row may be unit-stride or broadcast. */
#define FILL_ROW(T)                                                                                \
    do {                                                                                           \
        T *o_ = (T *)data[0], v_;                                                                  \
        memcpy(&v_, f->value, sizeof v_);                                                          \
        const uint8_t *m_ = (const uint8_t *)data[1];                                              \
        if (strides[1] == 0) {                                                                     \
            if (m_[0])                                                                             \
                for (int64_t i_ = 0; i_ < n; i_++) o_[i_] = v_;                                    \
        } else {                                                                                   \
            _Pragma("omp simd") for (int64_t i_ = 0; i_ < n; i_++) o_[i_] = m_[i_] ? v_ : o_[i_];  \
        }                                                                                          \
    } while (0)

/* masked_fill: operands self, mask. */
static void masked_fill_rows(char **data, const int64_t *strides, int64_t n, void *vctx) {
    const fill_ctx *f = vctx;
    if (strides[0] == (int64_t)f->size && (strides[1] == 1 || strides[1] == 0)) {
        switch (f->size) {
        case 1: FILL_ROW(uint8_t); return;
        case 2: FILL_ROW(uint16_t); return;
        case 4: FILL_ROW(uint32_t); return;
        case 8: FILL_ROW(uint64_t); return;
        default: break;
        }
    }
    for (int64_t i = 0; i < n; i++)
        if (data[1][i * strides[1]]) memcpy(data[0] + i * strides[0], f->value, f->size);
}
#undef FILL_ROW

typedef struct {
    double rtol, atol;
    bool equal_nan;
} close_ctx;

static void isclose_f32(char **data, const int64_t *strides, int64_t n, void *vctx) {
    const close_ctx *c = vctx;
    const float rtol = (float)c->rtol, atol = (float)c->atol;
    const bool en = c->equal_nan;
    LOOP_BINARY(uint8_t, float,
                x == y || (en && x != x && y != y) ||
                    (fabsf(x - y) < INFINITY && fabsf(x - y) <= atol + fabsf(rtol * y)));
}

static void isclose_f64(char **data, const int64_t *strides, int64_t n, void *vctx) {
    const close_ctx *c = vctx;
    const double rtol = c->rtol, atol = c->atol;
    const bool en = c->equal_nan;
    LOOP_BINARY(uint8_t, double,
                x == y || (en && x != x && y != y) ||
                    (fabs(x - y) < INFINITY && fabs(x - y) <= atol + fabs(rtol * y)));
}

/* --- float16 / bfloat16 storage ------------------------------------------------------------
 * The float32 row functions also run on half storage: each half operand's row
 * is converted HBLOCK elements at a time into a float block (cpu/half.h's
 * branchless conversions, which vectorise), the float32 row function runs
 * on the dense blocks, and a half result is converted back - one rounding,
 * the values a float32 copy of the tensors would give, without the copies.
 * float32 operands and a float32 or bool result are used in place. */
#define HBLOCK 512

typedef struct {
    dl_loop_fn f32;
    void *ctx;
    int nargs;
    dl_dtype dt[4];
} half_ctx;

static bool is_half(dl_dtype dt) {
    return dt == DL_DTYPE_F16 || dt == DL_DTYPE_BF16;
}

static void half_in(dl_dtype dt, const char *p, int64_t st, int64_t k, float *restrict o) {
    if (st == 2) { /* dense: loops the compiler vectorises */
        const uint16_t *h = (const uint16_t *)p;
        if (dt == DL_DTYPE_F16)
            for (int64_t j = 0; j < k; j++) o[j] = dl_cpu_half_to_float(h[j]);
        else
            for (int64_t j = 0; j < k; j++) o[j] = dl_cpu_bf16_to_float(h[j]);
        return;
    }
    if (dt == DL_DTYPE_F16)
        for (int64_t j = 0; j < k; j++)
            o[j] = dl_cpu_half_to_float(*(const uint16_t *)(p + j * st));
    else
        for (int64_t j = 0; j < k; j++)
            o[j] = dl_cpu_bf16_to_float(*(const uint16_t *)(p + j * st));
}

static void half_out(dl_dtype dt, char *p, int64_t st, int64_t k, const float *restrict v) {
    if (st == 2) {
        uint16_t *h = (uint16_t *)p;
        if (dt == DL_DTYPE_F16)
            for (int64_t j = 0; j < k; j++) h[j] = dl_cpu_float_to_half(v[j]);
        else
            for (int64_t j = 0; j < k; j++) h[j] = dl_cpu_float_to_bf16(v[j]);
        return;
    }
    if (dt == DL_DTYPE_F16)
        for (int64_t j = 0; j < k; j++) *(uint16_t *)(p + j * st) = dl_cpu_float_to_half(v[j]);
    else
        for (int64_t j = 0; j < k; j++) *(uint16_t *)(p + j * st) = dl_cpu_float_to_bf16(v[j]);
}

static void half_rows(char **d, const int64_t *st, int64_t n, void *vc) {
    const half_ctx *c = vc;
    float buf[4][HBLOCK];
    for (int64_t i0 = 0; i0 < n; i0 += HBLOCK) {
        int64_t k = n - i0 < HBLOCK ? n - i0 : HBLOCK;
        char *bd[4];
        int64_t bs[4];
        for (int a = 0; a < c->nargs; a++) {
            if (is_half(c->dt[a])) {
                if (a > 0) half_in(c->dt[a], d[a] + i0 * st[a], st[a], k, buf[a]);
                bd[a] = (char *)buf[a];
                bs[a] = sizeof(float);
            } else {
                bd[a] = d[a] + i0 * st[a];
                bs[a] = st[a];
            }
        }
        c->f32(bd, bs, k, c->ctx);
        if (is_half(c->dt[0])) half_out(c->dt[0], d[0] + i0 * st[0], st[0], k, buf[0]);
    }
}

/* Runs the float32 row function f over args, through half_rows when an
 * operand is stored as float16 or bfloat16. */
static void foreach_f32(int nargs, dl_tensor **args, dl_loop_fn f, void *ctx) {
    half_ctx h = {f, ctx, nargs, {0}};
    bool any = false;
    for (int a = 0; a < nargs; a++) {
        h.dt[a] = args[a]->dtype;
        any |= is_half(h.dt[a]);
    }
    if (any)
        dl_iter_foreach(nargs, args, half_rows, &h);
    else
        dl_iter_foreach(nargs, args, f, ctx);
}

/* --- entry points ----------------------------------------------------------- */

int dl_cpu_binary(dl_binary_op op, dl_tensor *out, dl_tensor *a, dl_tensor *b, double alpha) {
    binary_ctx c = {op, alpha, 0};
    dl_tensor *args[3] = {out, a, b};
    switch (a->dtype) {
    case DL_DTYPE_F32:
    case DL_DTYPE_F16:
    case DL_DTYPE_BF16: foreach_f32(3, args, binary_f32, &c); break;
    case DL_DTYPE_F64: dl_iter_foreach(3, args, binary_f64, &c); break;
    case DL_DTYPE_I64: dl_iter_foreach(3, args, binary_i64, &c); break;
    case DL_DTYPE_BOOL: dl_iter_foreach(3, args, binary_bool, &c); break;
    default: break;
    }
    return c.zero_division ? -1 : 0;
}

void dl_cpu_unary(dl_unary_op op, dl_tensor *out, dl_tensor *x) {
    dl_tensor *args[2] = {out, x};
    switch (x->dtype) {
    case DL_DTYPE_F32:
    case DL_DTYPE_F16:
    case DL_DTYPE_BF16: foreach_f32(2, args, unary_f32, &op); break;
    case DL_DTYPE_F64: dl_iter_foreach(2, args, unary_f64, &op); break;
    case DL_DTYPE_I64: dl_iter_foreach(2, args, unary_i64, &op); break;
    case DL_DTYPE_BOOL: dl_iter_foreach(2, args, unary_bool, &op); break;
    default: break;
    }
}

void dl_cpu_clamp(dl_tensor *out, dl_tensor *x, dl_tensor *lo, dl_tensor *hi) {
    dl_tensor *args[4] = {out, x, lo, hi};
    switch (x->dtype) {
    case DL_DTYPE_F32:
    case DL_DTYPE_F16:
    case DL_DTYPE_BF16: foreach_f32(4, args, clamp_f32, NULL); break;
    case DL_DTYPE_F64: dl_iter_foreach(4, args, clamp_f64, NULL); break;
    case DL_DTYPE_I64: dl_iter_foreach(4, args, clamp_i64, NULL); break;
    default: break;
    }
}

void dl_cpu_where(dl_tensor *out, dl_tensor *cond, dl_tensor *a, dl_tensor *b) {
    size_t sz = dl_dtype_size(out->dtype);
    dl_tensor *args[4] = {out, cond, a, b};
    dl_iter_foreach(4, args, where_rows, &sz);
}

void dl_cpu_masked_fill(dl_tensor *self, dl_tensor *mask, const void *value) {
    fill_ctx f = {dl_dtype_size(self->dtype), value};
    dl_tensor *args[2] = {self, mask};
    dl_iter_foreach(2, args, masked_fill_rows, &f);
}

void dl_cpu_isclose(dl_tensor *out, dl_tensor *a, dl_tensor *b, double rtol, double atol,
                    bool equal_nan) {
    close_ctx c = {rtol, atol, equal_nan};
    dl_tensor *args[3] = {out, a, b};
    if (a->dtype == DL_DTYPE_F64)
        dl_iter_foreach(3, args, isclose_f64, &c);
    else
        foreach_f32(3, args, isclose_f32, &c);
}
