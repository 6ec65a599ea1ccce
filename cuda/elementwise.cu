// elementwise.cu - CUDA kernels of the elementwise family (see src/kernels/elementwise.h):
// binary arithmetic, comparisons and logical ops, unary math, clamp, where, masked_fill
// and isclose.
//
// The map machinery of map.cuh runs a functor once per element.  Each entry point has a
// functor holding its output (Out) and inputs (In<C>, read in the compute type C) with
// the op as a runtime switch; the per-element expressions mirror the CPU's row functions
// (src/cpu/elementwise.c) one for one, so results agree with the CPU's: float32 computes
// in float, float64 in double, int64 wraps through unsigned arithmetic, a product that
// feeds a sum is rounded on its own (mul_rn: never contracted into an FMA, which the CPU
// build does not use), and float16/bfloat16 storage is loaded as float and rounded once
// on store.
//
// Speed (the "vectorized" setting: on, unless DLUA_CUDA_VEC=0 or the table's
// set_vectorized turns it off): dense binary and unary ops whose operands
// share one float dtype run one 16-byte pack per thread -- 4 float32 or 8
// float16/bfloat16 elements, the tail element by element -- when every
// pointer is 16-byte aligned; every other map counts its indices in int when
// they all stay below 2^31 (map.cuh's small_indices), else in int64.  Off, the
// maps run as before: float4 packs for dense float32 binary and unary ops,
// int64 indices everywhere.  Results are the same either way (the same
// per-element expressions, one rounding on store).
//
// Invariants: those of map.cuh; the only entry point that waits for the device is an
// integer division, which reads back its zero-divisor flag.
#include "map.cuh"

#include <stdlib.h>
#include <string.h>
#include <type_traits>

extern "C" {
#include "kernels/elementwise.h"
}

namespace {

using namespace dl_map;

// =====================================================================================
// Kernels
// =====================================================================================

// --- scalar helpers (mirror src/cpu/elementwise.c) ------------------------------------------

__device__ inline float mul_rn(float a, float b) {
    return __fmul_rn(a, b);
}
__device__ inline double mul_rn(double a, double b) {
    return __dmul_rn(a, b);
}

// Python's floor division for floats, agreeing with remainder().
template <typename T> __device__ inline T floordiv(T a, T b) {
    if (b == 0) return a / b;
    T mod = fmod(a, b);
    T q = (a - mod) / b;
    if (mod != 0 && ((b < 0) != (mod < 0))) q -= 1;
    if (q == 0) return copysign(T(0), a / b);
    T fq = floor(q);
    return q - fq > T(0.5) ? fq + 1 : fq;
}

// Python's %: the sign of the divisor.
template <typename T> __device__ inline T remainder_of(T a, T b) {
    T mod = fmod(a, b);
    if (mod != 0 && ((b < 0) != (mod < 0))) mod += b;
    return mod;
}

// pow; with a broadcast scalar exponent the CPU special-cases these exponents.
template <typename T> __device__ inline T pow_of(T x, T y, bool scalar_exponent) {
    if (scalar_exponent) {
        if (y == T(2)) return x * x;
        if (y == T(3)) return x * x * x;
        if (y == T(0.5)) return sqrt(x);
        if (y == T(-0.5)) return T(1) / sqrt(x);
        if (y == T(-1)) return T(1) / x;
        if (y == T(-2)) return T(1) / (x * x);
    }
    return pow(x, y);
}

// --- binary -------------------------------------------------------------------------------

// Arithmetic ops (ADD .. ATAN2) on float or double.
template <typename T>
__device__ inline T arith(int op, T x, T y, T alpha, bool scalar_exponent, int *) {
    switch (op) {
    case DL_BINARY_ADD: return alpha == T(1) ? x + y : x + mul_rn(alpha, y);
    case DL_BINARY_SUB: return alpha == T(1) ? x - y : x - mul_rn(alpha, y);
    case DL_BINARY_MUL: return x * y;
    case DL_BINARY_DIV: return x / y;
    case DL_BINARY_DIV_FLOOR: return floordiv(x, y);
    case DL_BINARY_DIV_TRUNC: return trunc(x / y);
    case DL_BINARY_POW: return pow_of(x, y, scalar_exponent);
    case DL_BINARY_MAXIMUM: return x != x ? x : y != y ? y : x < y ? y : x;
    case DL_BINARY_MINIMUM: return x != x ? x : y != y ? y : y < x ? y : x;
    case DL_BINARY_REMAINDER: return remainder_of(x, y);
    case DL_BINARY_FMOD: return fmod(x, y);
    case DL_BINARY_ATAN2: return atan2(x, y);
    default: return T(0);
    }
}

// Arithmetic ops on int64 (true division and atan2 run on floats).
__device__ inline int64_t arith(int op, int64_t x, int64_t y, int64_t alpha, bool, int *zero) {
    switch (op) {
    case DL_BINARY_ADD:
        return alpha == 1 ? dl_wrap_add(x, y) : dl_wrap_add(x, dl_wrap_mul(alpha, y));
    case DL_BINARY_SUB:
        return alpha == 1 ? dl_wrap_add(x, dl_wrap_neg(y))
                          : dl_wrap_add(x, dl_wrap_neg(dl_wrap_mul(alpha, y)));
    case DL_BINARY_MUL: return dl_wrap_mul(x, y);
    case DL_BINARY_DIV_FLOOR:
    case DL_BINARY_DIV_TRUNC:
    case DL_BINARY_REMAINDER:
    case DL_BINARY_FMOD: return dl_idiv(op, x, y, zero);
    case DL_BINARY_POW: return dl_ipow(x, y);
    case DL_BINARY_MAXIMUM: return x < y ? y : x;
    case DL_BINARY_MINIMUM: return y < x ? y : x;
    default: return 0;
    }
}

// The logical ops, the only ones computed on bool.
__device__ inline bool arith(int op, bool x, bool y, bool, bool, int *) {
    switch (op) {
    case DL_BINARY_LOGICAL_AND: return x && y;
    case DL_BINARY_LOGICAL_OR: return x || y;
    case DL_BINARY_LOGICAL_XOR: return x != y;
    default: return false;
    }
}

__host__ __device__ inline bool is_comparison(int op) {
    return op >= DL_BINARY_EQ && op <= DL_BINARY_GE;
}

template <typename C> __device__ inline bool compare(int op, C x, C y) {
    switch (op) {
    case DL_BINARY_EQ: return x == y;
    case DL_BINARY_NE: return x != y;
    case DL_BINARY_LT: return x < y;
    case DL_BINARY_LE: return x <= y;
    case DL_BINARY_GT: return x > y;
    default: return x >= y; // GE
    }
}

// out = op(a, b); zero is the zero-divisor flag of integer division (else null).
template <typename C> struct BinaryFn {
    Out o;
    In<C> a, b;
    int op;
    C alpha;
    bool scalar_exponent;
    int *zero;
    template <typename I> __device__ void operator()(I i) const {
        C x = get(a, i), y = get(b, i);
        char *po = at(o, i);
        if (is_comparison(op))
            store<bool>(po, o.dt, compare(op, x, y));
        else
            store<C>(po, o.dt, arith(op, x, y, alpha, scalar_exponent, zero));
    }
};

// float32, all dense, 16-byte aligned, arithmetic only: element v*4 .. v*4+3 per index v.
// a or b null: the scalar as or bs.
struct BinaryVec4Fn {
    float *o;       // o is (n,)
    const float *a; // a is (n,) or null
    const float *b; // b is (n,) or null
    float as, bs;
    int op;
    float alpha;
    bool scalar_exponent;
    int64_t n;
    __device__ void operator()(int64_t v) const {
        int64_t i = v * 4;
        if (i + 4 <= n) {
            float4 x = a ? ((const float4 *)a)[v] : make_float4(as, as, as, as);
            float4 y = b ? ((const float4 *)b)[v] : make_float4(bs, bs, bs, bs);
            float4 r;
            r.x = arith(op, x.x, y.x, alpha, scalar_exponent, nullptr);
            r.y = arith(op, x.y, y.y, alpha, scalar_exponent, nullptr);
            r.z = arith(op, x.z, y.z, alpha, scalar_exponent, nullptr);
            r.w = arith(op, x.w, y.w, alpha, scalar_exponent, nullptr);
            ((float4 *)o)[v] = r;
        } else {
            for (; i < n; i++)
                o[i] = arith(op, a ? a[i] : as, b ? b[i] : bs, alpha, scalar_exponent, nullptr);
        }
    }
};

// --- unary ----------------------------------------------------------------------------------

template <typename T> __device__ inline T unary_value(int op, T x) {
    switch (op) {
    case DL_UNARY_NEG: return -x;
    case DL_UNARY_ABS: return fabs(x);
    case DL_UNARY_SIGN: return (T)((0 < x) - (x < 0));
    case DL_UNARY_RELU: return x < 0 ? T(0) : x;
    case DL_UNARY_FLOOR: return floor(x);
    case DL_UNARY_CEIL: return ceil(x);
    case DL_UNARY_ROUND: return rint(x); // half to even
    case DL_UNARY_TRUNC: return trunc(x);
    case DL_UNARY_SQUARE: return x * x;
    case DL_UNARY_EXP: return exp(x);
    case DL_UNARY_EXP2: return exp2(x);
    case DL_UNARY_EXPM1: return expm1(x);
    case DL_UNARY_LOG: return log(x);
    case DL_UNARY_LOG2: return log2(x);
    case DL_UNARY_LOG10: return log10(x);
    case DL_UNARY_LOG1P: return log1p(x);
    case DL_UNARY_SQRT: return sqrt(x);
    case DL_UNARY_RSQRT: return T(1) / sqrt(x);
    case DL_UNARY_RECIPROCAL: return T(1) / x;
    case DL_UNARY_SIN: return sin(x);
    case DL_UNARY_COS: return cos(x);
    case DL_UNARY_TAN: return tan(x);
    case DL_UNARY_ASIN: return asin(x);
    case DL_UNARY_ACOS: return acos(x);
    case DL_UNARY_ATAN: return atan(x);
    case DL_UNARY_SINH: return sinh(x);
    case DL_UNARY_COSH: return cosh(x);
    case DL_UNARY_TANH: return tanh(x);
    case DL_UNARY_SIGMOID: return T(1) / (T(1) + exp(-x));
    case DL_UNARY_ERF: return erf(x);
    case DL_UNARY_ERFC: return erfc(x);
    case DL_UNARY_GELU: return x * T(0.5) * (T(1) + erf(x * T(0.70710678118654752440)));
    case DL_UNARY_GELU_TANH: {
        const T beta = T(0.79788456080286535588), kappa = T(0.044715);
        T inner = beta * (x + kappa * (x * x * x));
        return T(0.5) * x * (T(1) + tanh(inner));
    }
    case DL_UNARY_SILU: return x / (T(1) + exp(-x));
    case DL_UNARY_FRAC: return x - trunc(x);
    default: return T(0);
    }
}

// The integer-keeping ops on int64 (floating functions run on floats).
__device__ inline int64_t unary_value(int op, int64_t x) {
    switch (op) {
    case DL_UNARY_NEG: return dl_wrap_neg(x);
    case DL_UNARY_ABS: return x < 0 ? dl_wrap_neg(x) : x;
    case DL_UNARY_SIGN: return (0 < x) - (x < 0);
    case DL_UNARY_RELU: return x < 0 ? 0 : x;
    case DL_UNARY_SQUARE: return dl_wrap_mul(x, x);
    default: return x; // floor, ceil, round, trunc
    }
}

// bool only reaches the predicates (logical_not).
__device__ inline bool unary_value(int, bool x) {
    return x;
}

__host__ __device__ inline bool is_predicate(int op) {
    return op >= DL_UNARY_LOGICAL_NOT;
}

template <typename C> __device__ inline bool predicate(int op, C x) {
    if constexpr (std::is_floating_point<C>::value) {
        switch (op) {
        case DL_UNARY_ISNAN: return x != x;
        case DL_UNARY_ISINF: return fabs(x) == C(INFINITY);
        case DL_UNARY_ISFINITE: return fabs(x) < C(INFINITY);
        default: return x == 0; // LOGICAL_NOT
        }
    } else {
        return x == 0; // LOGICAL_NOT (integers answer the others without a kernel)
    }
}

template <typename C> struct UnaryFn {
    Out o;
    In<C> x;
    int op;
    template <typename I> __device__ void operator()(I i) const {
        C v = get(x, i);
        char *po = at(o, i);
        if (is_predicate(op))
            store<bool>(po, o.dt, predicate(op, v));
        else
            store<C>(po, o.dt, unary_value(op, v));
    }
};

// float32, dense, 16-byte aligned, not a predicate: elements v*4 .. v*4+3 per index v.
struct UnaryVec4Fn {
    float *o;       // o is (n,)
    const float *x; // x is (n,)
    int op;
    int64_t n;
    __device__ void operator()(int64_t v) const {
        int64_t i = v * 4;
        if (i + 4 <= n) {
            float4 a = ((const float4 *)x)[v], r;
            r.x = unary_value(op, a.x);
            r.y = unary_value(op, a.y);
            r.z = unary_value(op, a.z);
            r.w = unary_value(op, a.w);
            ((float4 *)o)[v] = r;
        } else {
            for (; i < n; i++) o[i] = unary_value(op, x[i]);
        }
    }
};

// --- 16-byte packs (the vectorized setting) -----------------------------------------------------

// N = 16 / sizeof(T) elements of float32, float16 or bfloat16, loaded and
// stored as one 16-byte word; computed in float, rounded once on store.
template <typename T> struct alignas(16) Pack {
    static constexpr int N = 16 / (int)sizeof(T);
    T v[N];
};

template <typename T> __device__ inline float fl(T v) {
    return dl_to_float(v);
}

// out = op(a, b), dense, one pack per index v (the last index takes the
// tail element by element); a or b null: the scalar as or bs.  I: the index
// type (int below 2^31 elements).
template <typename T, typename I> struct BinaryVecFn {
    T *o;       // o is (n,)
    const T *a; // a is (n,) or null
    const T *b; // b is (n,) or null
    float as, bs;
    int op;
    float alpha;
    bool scalar_exponent;
    I n;
    __device__ float one(float x, float y) const {
        return arith(op, x, y, alpha, scalar_exponent, nullptr);
    }
    __device__ void operator()(I v) const {
        constexpr int N = Pack<T>::N;
        I i = v * N;
        if (i + N <= n) {
            Pack<T> x, y, r;
            if (a) x = ((const Pack<T> *)a)[v];
            if (b) y = ((const Pack<T> *)b)[v];
#pragma unroll
            for (int k = 0; k < N; k++)
                r.v[k] = dl_from_float<T>(one(a ? fl(x.v[k]) : as, b ? fl(y.v[k]) : bs));
            ((Pack<T> *)o)[v] = r;
        } else {
            for (; i < n; i++) o[i] = dl_from_float<T>(one(a ? fl(a[i]) : as, b ? fl(b[i]) : bs));
        }
    }
};

// out = op(x), dense, as BinaryVecFn; not a predicate.
template <typename T, typename I> struct UnaryVecFn {
    T *o;       // o is (n,)
    const T *x; // x is (n,)
    int op;
    I n;
    __device__ void operator()(I v) const {
        constexpr int N = Pack<T>::N;
        I i = v * N;
        if (i + N <= n) {
            Pack<T> p = ((const Pack<T> *)x)[v], r;
#pragma unroll
            for (int k = 0; k < N; k++) r.v[k] = dl_from_float<T>(unary_value(op, fl(p.v[k])));
            ((Pack<T> *)o)[v] = r;
        } else {
            for (; i < n; i++) o[i] = dl_from_float<T>(unary_value(op, fl(x[i])));
        }
    }
};

// --- clamp, where, masked_fill, isclose --------------------------------------------------------

// min(max(x, lo), hi); a NaN bound or x gives NaN (the CPU's per-element rule).
template <typename C> struct ClampFn {
    Out o;
    In<C> x, lo, hi;
    template <typename I> __device__ void operator()(I i) const {
        C v = get(x, i), l = get(lo, i), h = get(hi, i);
        C r = l != l ? l : v < l ? l : v;
        r = h != h ? h : r > h ? h : r;
        store<C>(at(o, i), o.dt, r);
    }
};

// T: an unsigned word of the element's size.
template <typename T> struct WhereFn {
    Out o;
    In<bool> cond;
    In<T> a, b;
    template <typename I> __device__ void operator()(I i) const {
        *(T *)at(o, i) = get(cond, i) ? get(a, i) : get(b, i);
    }
};

template <typename T> struct MaskedFillFn {
    Out o;
    In<bool> mask;
    T value;
    template <typename I> __device__ void operator()(I i) const {
        if (get(mask, i)) *(T *)at(o, i) = value;
    }
};

template <typename T> struct IscloseFn {
    Out o;
    In<T> a, b;
    T rtol, atol;
    bool equal_nan;
    template <typename I> __device__ void operator()(I i) const {
        T x = get(a, i), y = get(b, i);
        T d = fabs(x - y);
        bool r = x == y || (equal_nan && x != x && y != y) ||
                 (d < T(INFINITY) && d <= atol + fabs(mul_rn(rtol, y)));
        store<bool>(at(o, i), o.dt, r);
    }
};

// =====================================================================================
// Launchers
// =====================================================================================

bool aligned16(const void *p) {
    return ((uintptr_t)p & 15) == 0;
}

// The vectorized setting: -1 not read yet, then 0 or 1.
int g_vectorized = -1;

bool vectorized() {
    if (g_vectorized < 0) {
        const char *e = getenv("DLUA_CUDA_VEC");
        g_vectorized = !(e && strcmp(e, "0") == 0);
    }
    return g_vectorized == 1;
}

// Whether a float-computed map may run on 16-byte packs of dtype o.dt: the
// output and every tensor input dense, 16-byte aligned and of that dtype
// (float32, float16 or bfloat16).
bool packable(const Out &o, int k, const In<float> *const *ins) {
    if (o.dt != DL_DTYPE_F32 && o.dt != DL_DTYPE_F16 && o.dt != DL_DTYPE_BF16) return false;
    if (!o.dense || !aligned16(o.p)) return false;
    for (int j = 0; j < k; j++)
        if (ins[j]->p && (ins[j]->dt != o.dt || !ins[j]->dense || !aligned16(ins[j]->p)))
            return false;
    return true;
}

// Launches f (a BinaryVecFn or UnaryVecFn of storage type T) over the packs of n
// elements, counting in int when n allows.
template <typename T, template <typename, typename> class V, typename Make>
int launch_packs(int64_t n, const Make &make) {
    int64_t packs = (n + Pack<T>::N - 1) / Pack<T>::N;
    if (n <= kSmallN) return launch(make(V<T, int>{}, (int)n), packs, true);
    return launch(make(V<T, int64_t>{}, n), packs);
}

// The binary map on packs of dtype dt (packable checked).
int binary_packs(const BinaryFn<float> &f, int64_t n) {
    auto make = [&f](auto v, auto nn) {
        using VT = decltype(v);
        using T = typename std::remove_pointer<decltype(v.o)>::type;
        VT r{(T *)f.o.p, (const T *)f.a.p, (const T *)f.b.p,  f.a.s, f.b.s,
             f.op,       f.alpha,          f.scalar_exponent, nn};
        return r;
    };
    switch (f.o.dt) {
    case DL_DTYPE_F16: return launch_packs<__half, BinaryVecFn>(n, make);
    case DL_DTYPE_BF16: return launch_packs<__nv_bfloat16, BinaryVecFn>(n, make);
    default: return launch_packs<float, BinaryVecFn>(n, make);
    }
}

int unary_packs(const UnaryFn<float> &f, int64_t n) {
    auto make = [&f](auto v, auto nn) {
        using VT = decltype(v);
        using T = typename std::remove_pointer<decltype(v.o)>::type;
        VT r{(T *)f.o.p, (const T *)f.x.p, f.op, nn};
        return r;
    };
    switch (f.o.dt) {
    case DL_DTYPE_F16: return launch_packs<__half, UnaryVecFn>(n, make);
    case DL_DTYPE_BF16: return launch_packs<__nv_bfloat16, UnaryVecFn>(n, make);
    default: return launch_packs<float, UnaryVecFn>(n, make);
    }
}

// Reads the device flag back (waits for the device), then frees it.
int read_flag_and_free(int *flag, bool *set) {
    int h = 0;
    int rc = dl_cuda_read_device(&h, flag, sizeof h, "reading the zero-division flag");
    dl_cuda_free(flag);
    if (rc) return -1;
    *set = h != 0;
    return 0;
}

// --- binary ----------------------------------------------------------------------------------

bool is_int_division(int op) {
    return op == DL_BINARY_DIV_FLOOR || op == DL_BINARY_DIV_TRUNC || op == DL_BINARY_REMAINDER ||
           op == DL_BINARY_FMOD;
}

// The float4 path, when every tensor operand is a dense, 16-byte aligned float32 one.
bool binary_vec4(const BinaryFn<float> &f, int64_t n) {
    if (n < 4 || is_comparison(f.op) || f.o.dt != DL_DTYPE_F32 || !f.o.dense || !aligned16(f.o.p))
        return false;
    const In<float> *ins[2] = {&f.a, &f.b};
    for (const In<float> *x : ins)
        if (x->p && (x->dt != DL_DTYPE_F32 || !x->dense || !aligned16(x->p))) return false;
    return true;
}

template <typename C>
int binary_run(int op, dl_tensor *out, dl_tensor *a, dl_tensor *b, double alpha) {
    const char *name = "binary";
    dl_tensor *in[2] = {a, b};
    dl_cuda_layout ls[3];
    if (begin(name, out, 2, in, ls)) return -1;
    BinaryFn<C> f{};
    bool cmp = is_comparison(op);
    bool ok = cmp ? out->dtype == DL_DTYPE_BOOL : readable<C>(out->dtype);
    if (make_out(name, out, ls[0], ok, &f.o) || make_in<C>(name, a, ls[1], &f.a) ||
        make_in<C>(name, b, ls[2], &f.b))
        return -1;
    f.op = op;
    f.alpha = (C)alpha;
    f.scalar_exponent = !f.b.p || ls[2].ndim == 0 || ls[2].strides[ls[2].ndim - 1] == 0;
    f.zero = nullptr;
    int64_t n = dl_tensor_numel(out);
    if (n == 0) return 0;
    bool vec = vectorized(), small = vec && small_indices(3, ls, n);
    if constexpr (std::is_same<C, float>::value) {
        const In<float> *ins[2] = {&f.a, &f.b};
        if (vec && !cmp && packable(f.o, 2, ins)) return binary_packs(f, n);
        if (!vec && binary_vec4(f, n)) {
            BinaryVec4Fn v{(float *)f.o.p,
                           (const float *)f.a.p,
                           (const float *)f.b.p,
                           f.a.s,
                           f.b.s,
                           op,
                           f.alpha,
                           f.scalar_exponent,
                           n};
            return launch(v, (n + 3) / 4);
        }
    }
    if (!std::is_same<C, int64_t>::value || !is_int_division(op)) return launch(f, n, small);
    // integer division: a device flag records a zero divisor
    int *flag = (int *)dl_cuda_malloc(sizeof(int));
    if (!flag) return -1;
    cudaError_t e = cudaMemsetAsync(flag, 0, sizeof(int), dl_cuda_stream());
    if (e != cudaSuccess) {
        dl_cuda_free(flag);
        return dl_cuda_fail("cudaMemsetAsync(zero-division flag)", cudaGetErrorString(e), __FILE__,
                            __LINE__);
    }
    f.zero = flag;
    if (launch(f, n, small)) {
        dl_cuda_free(flag);
        return -1;
    }
    bool zero = false;
    if (read_flag_and_free(flag, &zero)) return -1;
    return zero ? DL_CUDA_ZERO_DIVISION : 0;
}

// --- unary -------------------------------------------------------------------------------------

template <typename C> int unary_run(int op, dl_tensor *out, dl_tensor *x) {
    const char *name = "unary";
    dl_cuda_layout ls[2];
    if (begin(name, out, 1, &x, ls)) return -1;
    UnaryFn<C> f{};
    bool pred = is_predicate(op);
    bool ok = pred ? out->dtype == DL_DTYPE_BOOL : readable<C>(out->dtype);
    if (make_out(name, out, ls[0], ok, &f.o) || make_in<C>(name, x, ls[1], &f.x)) return -1;
    f.op = op;
    int64_t n = dl_tensor_numel(out);
    if (n == 0) return 0;
    bool vec = vectorized();
    if constexpr (std::is_same<C, float>::value) {
        const In<float> *ins[1] = {&f.x};
        if (vec && !pred && f.x.p && packable(f.o, 1, ins)) return unary_packs(f, n);
        if (!vec && n >= 4 && !pred && f.o.dt == DL_DTYPE_F32 && f.x.dt == DL_DTYPE_F32 && f.x.p &&
            f.o.dense && f.x.dense && aligned16(f.o.p) && aligned16(f.x.p))
            return launch(UnaryVec4Fn{(float *)f.o.p, (const float *)f.x.p, op, n}, (n + 3) / 4);
    }
    return launch(f, n, vec && small_indices(2, ls, n));
}

// --- clamp, where, masked_fill, isclose ------------------------------------------------------

template <typename C> int clamp_run(dl_tensor *out, dl_tensor *x, dl_tensor *lo, dl_tensor *hi) {
    const char *name = "clamp";
    dl_tensor *in[3] = {x, lo, hi};
    dl_cuda_layout ls[4];
    if (begin(name, out, 3, in, ls)) return -1;
    ClampFn<C> f{};
    if (make_out(name, out, ls[0], readable<C>(out->dtype), &f.o) ||
        make_in<C>(name, x, ls[1], &f.x) || make_in<C>(name, lo, ls[2], &f.lo) ||
        make_in<C>(name, hi, ls[3], &f.hi))
        return -1;
    int64_t n = dl_tensor_numel(out);
    return launch(f, n, vectorized() && small_indices(4, ls, n));
}

template <typename T> int where_run(dl_tensor *out, dl_tensor *cond, dl_tensor *a, dl_tensor *b) {
    const char *name = "where";
    dl_tensor *in[3] = {cond, a, b};
    dl_cuda_layout ls[4];
    if (begin(name, out, 3, in, ls)) return -1;
    WhereFn<T> f{};
    if (a->dtype != out->dtype) return bad_dtype(name, "input", a->dtype);
    if (b->dtype != out->dtype) return bad_dtype(name, "input", b->dtype);
    if (make_out(name, out, ls[0], true, &f.o) || make_in<bool>(name, cond, ls[1], &f.cond) ||
        make_in<T>(name, a, ls[2], &f.a) || make_in<T>(name, b, ls[3], &f.b))
        return -1;
    int64_t n = dl_tensor_numel(out);
    return launch(f, n, vectorized() && small_indices(4, ls, n));
}

template <typename T> int masked_fill_run(dl_tensor *self, dl_tensor *mask, const void *value) {
    const char *name = "masked_fill";
    dl_cuda_layout ls[2];
    if (begin(name, self, 1, &mask, ls)) return -1;
    MaskedFillFn<T> f{};
    if (make_out(name, self, ls[0], true, &f.o) || make_in<bool>(name, mask, ls[1], &f.mask))
        return -1;
    memcpy(&f.value, value, sizeof(T)); // value is host memory (the op layer's 0-dim tensor)
    int64_t n = dl_tensor_numel(self);
    return launch(f, n, vectorized() && small_indices(2, ls, n));
}

template <typename T>
int isclose_run(dl_tensor *out, dl_tensor *a, dl_tensor *b, double rtol, double atol,
                bool equal_nan) {
    const char *name = "isclose";
    dl_tensor *in[2] = {a, b};
    dl_cuda_layout ls[3];
    if (begin(name, out, 2, in, ls)) return -1;
    IscloseFn<T> f{};
    if (make_out(name, out, ls[0], out->dtype == DL_DTYPE_BOOL, &f.o) ||
        make_in<T>(name, a, ls[1], &f.a) || make_in<T>(name, b, ls[2], &f.b))
        return -1;
    f.rtol = (T)rtol;
    f.atol = (T)atol;
    f.equal_nan = equal_nan;
    int64_t n = dl_tensor_numel(out);
    return launch(f, n, vectorized() && small_indices(3, ls, n));
}

int ew_set_vectorized(int on) {
    int was = vectorized() ? 1 : 0;
    if (on >= 0) g_vectorized = on ? 1 : 0;
    return was;
}

// --- entry points (the table) ------------------------------------------------------------------

int ew_binary(dl_binary_op op, dl_tensor *out, dl_tensor *a, dl_tensor *b, double alpha) {
    if ((unsigned)op >= DL_BINARY_COUNT) return dl_error("binary: unknown op %d", (int)op);
    switch (compute_kind(a->dtype)) {
    case 0: return binary_run<float>(op, out, a, b, alpha);
    case 1: return binary_run<double>(op, out, a, b, alpha);
    case 2: return binary_run<int64_t>(op, out, a, b, alpha);
    case 3: return binary_run<bool>(op, out, a, b, alpha);
    default: return no_kernel("binary", a->dtype);
    }
}

int ew_unary(dl_unary_op op, dl_tensor *out, dl_tensor *x) {
    if ((unsigned)op >= DL_UNARY_COUNT) return dl_error("unary: unknown op %d", (int)op);
    switch (compute_kind(x->dtype)) {
    case 0: return unary_run<float>(op, out, x);
    case 1: return unary_run<double>(op, out, x);
    case 2: return unary_run<int64_t>(op, out, x);
    case 3: return unary_run<bool>(op, out, x);
    default: return no_kernel("unary", x->dtype);
    }
}

int ew_clamp(dl_tensor *out, dl_tensor *x, dl_tensor *lo, dl_tensor *hi) {
    switch (compute_kind(x->dtype)) {
    case 0: return clamp_run<float>(out, x, lo, hi);
    case 1: return clamp_run<double>(out, x, lo, hi);
    case 2: return clamp_run<int64_t>(out, x, lo, hi);
    default: return no_kernel("clamp", x->dtype);
    }
}

int ew_where(dl_tensor *out, dl_tensor *cond, dl_tensor *a, dl_tensor *b) {
    switch (dl_tensor_itemsize(out)) {
    case 1: return where_run<uint8_t>(out, cond, a, b);
    case 2: return where_run<uint16_t>(out, cond, a, b);
    case 4: return where_run<uint32_t>(out, cond, a, b);
    case 8: return where_run<uint64_t>(out, cond, a, b);
    default: return no_kernel("where", out->dtype);
    }
}

int ew_masked_fill(dl_tensor *self, dl_tensor *mask, const void *value) {
    switch (dl_tensor_itemsize(self)) {
    case 1: return masked_fill_run<uint8_t>(self, mask, value);
    case 2: return masked_fill_run<uint16_t>(self, mask, value);
    case 4: return masked_fill_run<uint32_t>(self, mask, value);
    case 8: return masked_fill_run<uint64_t>(self, mask, value);
    default: return no_kernel("masked_fill", self->dtype);
    }
}

int ew_isclose(dl_tensor *out, dl_tensor *a, dl_tensor *b, double rtol, double atol,
               bool equal_nan) {
    switch (compute_kind(a->dtype)) {
    case 0: return isclose_run<float>(out, a, b, rtol, atol, equal_nan);
    case 1: return isclose_run<double>(out, a, b, rtol, atol, equal_nan);
    default: return no_kernel("isclose", a->dtype);
    }
}

} // namespace

DL_CUDA_TABLE(elementwise) = {
    .family = "elementwise",
    .binary = ew_binary,
    .unary = ew_unary,
    .clamp = ew_clamp,
    .where = ew_where,
    .masked_fill = ew_masked_fill,
    .isclose = ew_isclose,
    .set_vectorized = ew_set_vectorized,
};
