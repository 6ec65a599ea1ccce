/* vecmath.c (cpu) - the transcendental unary functions of the elementwise
 * family on AVX-512 and AVX2 vectors, through SLEEF's u10 kernels (at most
 * 1 ulp from the correctly rounded result) and, for erf and GELU's normal
 * CDF, own polynomials with an inlined exp (below), chosen once per process
 * from the CPU's features.
 *
 * Invariants:
 *  - a value's result does not depend on where it sits: contiguous rows run
 *    whole vectors plus one masked (AVX-512) or padded (AVX2) vector for the
 *    tail, and strided rows are gathered into the same vectors, so a tensor
 *    gives the same bits in any layout, split into rows of any length, on
 *    any thread count;
 *  - NaN, infinities and signed zeros follow C99 Annex F (SLEEF's contract),
 *    which is what PyTorch's vectorised CPU kernels return too;
 *  - without AVX2 nothing here runs: the callers' libm loops do; nor with a
 *    compiler other than GCC on x86-64 (the per-ISA declarations of sleef.h
 *    need GCC's target pragma; clang builds only the fuzz targets). */
#include "cpu/vecmath.h"

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)

/* sleef.h declares each ISA's functions only where the compiler targets that
 * ISA; the file as a whole stays baseline x86-64 (the kernels below carry
 * target attributes and run only after the CPU check). */
#include <immintrin.h>
#include <math.h>
#pragma GCC push_options
#pragma GCC target("avx512f,avx2,fma")
#include <sleef.h>
#pragma GCC pop_options
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/* How a vector function is finished: f(x) as it is, or sigmoid from
 * f = exp, or rsqrt from f = sqrt, or the activations composed around one
 * function: GELU from f = erf, its tanh form from f = tanh, SiLU from
 * f = exp.  Each composition follows the scalar loop's (and PyTorch's)
 * order of operations. */
typedef enum { FIN_PLAIN, FIN_SIGMOID, FIN_RSQRT, FIN_GELU, FIN_GELU_TANH, FIN_SILU } finish_kind;

#define GELU_ALPHA 0.70710678118654752440 /* 1 / sqrt(2) */
#define GELU_BETA 0.79788456080286535588  /* sqrt(2 / pi) */
#define GELU_KAPPA 0.044715

/* GELU's normal CDF, Phi(x) = erfc(-x / sqrt 2) / 2, without SLEEF's erf
 * (its u10 kernel made GELU four times the cost of exp): erfc(z) for z >= 0
 * as t exp(-z^2 + P(t)), t = 1 / (1 + z/2), P the degree-9 Chebyshev fit
 * below, whose relative error stays under 1.2e-7 for every z, so the lower
 * tail keeps its relative accuracy (1 + erf loses it); Phi = 1 - erfc/2 for
 * x >= 0.  Within the test's bar for GELU (a few ulp plus 2.5e-7 |x|,
 * tests/lua/test_elementwise_ulp.lua) on both ISAs. */
static const float NCDF_P[10] = {-1.26551223f, 1.00002368f, 0.37409196f,  0.09678418f,
                                 -0.18628806f, 0.27886807f, -1.13520398f, 1.48851587f,
                                 -0.82215223f, 0.17087277f};

/* erf without SLEEF's u10 kernel (7.7 ms for 1e7 floats against exp's 1.7
 * when measured): |x| < 0.75 as x + x R(x^2); 0.75 <= |x| < 4.25 on seven intervals of width 0.5
 * around c = 1, 1.5, ..., 4 as hi + (lo + s Q(s)), s = |x| - c, where hi +
 * lo is erf(c) in two floats and Q of degree 6 (lane by lane from ERF_TAB's
 * rows, one permute per coefficient); 1 beyond (erf rounds to 1 from
 * 3.92).  Coefficients fitted here in double (near-minimax, then rounded);
 * a float evaluation stays within 0.82 ulp of the exact value (every float
 * in [0.75, 4.25) checked: 0.811; below 0.75: 0.71)
 * (tests/lua/test_elementwise_ulp.lua holds it to 1). */
static const float ERF_R[7] = {1.283791661e-01f,  -3.761263788e-01f, 1.128377020e-01f,
                               -2.686421014e-02f, 5.215102807e-03f,  -8.333235746e-04f,
                               9.344267892e-05f};
#define ERF_SMALL 0.75f
#define ERF_ONE 4.25f
static const float ERF_TAB[9][8] __attribute__((aligned(32))) = {
    {8.427007794e-01f, 9.661051631e-01f, 9.953222871e-01f, 9.995930195e-01f, 9.999778867e-01f,
     9.999992847e-01f, 1.000000000e+00f, 1.000000000e+00f},
    {1.351169576e-08f, -1.662207083e-08f, -2.206371974e-08f, 2.849708203e-08f, 2.282621381e-08f,
     -2.784263486e-08f, -1.541725858e-08f, -1.541725858e-08f},
    {4.151074886e-01f, 1.189302877e-01f, 2.066698484e-02f, 2.178284340e-03f, 1.392530394e-04f,
     5.399415841e-06f, 1.269809928e-07f, 1.269809928e-07f},
    {-4.151076972e-01f, -1.783955395e-01f, -4.133390263e-02f, -5.445698276e-03f, -4.177650844e-04f,
     -1.889955456e-05f, -5.080661936e-07f, -5.080661936e-07f},
    {1.383688897e-01f, 1.387522519e-01f, 4.822295904e-02f, 8.350052871e-03f, 7.891024579e-04f,
     4.229777551e-05f, 1.312434506e-06f, 1.312434506e-06f},
    {6.920472533e-02f, -4.458855465e-02f, -3.445176035e-02f, -8.623545989e-03f, -1.043819822e-03f,
     -6.756651419e-05f, -2.441773631e-06f, -2.441773631e-06f},
    {-6.916999817e-02f, -1.487934962e-02f, 1.308937464e-02f, 6.119295023e-03f, 1.016450115e-03f,
     8.199619333e-05f, 3.519365237e-06f, 3.519365237e-06f},
    {4.051647149e-03f, 1.904179342e-02f, 6.475197151e-04f, -2.766415244e-03f, -7.540551014e-04f,
     -8.190454537e-05f, -4.419223842e-06f, -4.419223842e-06f},
    {1.486879494e-02f, -4.486268852e-03f, -3.384946613e-03f, 5.043193814e-04f, 3.925253986e-04f,
     6.053805919e-05f, 4.086551144e-06f, 4.086551144e-06f},
};

/* --- which ISA ---------------------------------------------------------------------- */

typedef enum { ISA_UNKNOWN, ISA_NONE, ISA_AVX2, ISA_AVX512 } isa_kind;

static isa_kind cpu_isa(void) {
    static volatile isa_kind isa = ISA_UNKNOWN; /* a benign race: every thread finds the same */
    if (isa == ISA_UNKNOWN) {
        __builtin_cpu_init();
        const char *env = getenv("DLUA_CPU_VECMATH");
        bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
        if (env && strcmp(env, "0") == 0)
            isa = ISA_NONE;
        else if (env && strcmp(env, "avx2") == 0)
            isa = avx2 ? ISA_AVX2 : ISA_NONE;
        else if (__builtin_cpu_supports("avx512f"))
            isa = ISA_AVX512;
        else if (avx2)
            isa = ISA_AVX2;
        else
            isa = ISA_NONE;
    }
    return isa;
}

/* Where SLEEF's float32 kernel leaves its domain while the true result is
 * still finite (log1p above ~1e38 returns inf; sinh and cosh overflow from
 * ~88.5, the float range ends at ~89.4): returns the libm function those
 * lanes take and sets *lim (|x| > *lim goes to libm), or NULL. */
static float (*beyond_f32(dl_unary_op op, float *lim))(float) {
    switch (op) {
    case DL_UNARY_LOG1P: *lim = 1e38f; return log1pf;
    case DL_UNARY_SINH: *lim = 88.0f; return sinhf;
    case DL_UNARY_COSH: *lim = 88.0f; return coshf;
    default: *lim = 0; return NULL;
    }
}

/* --- AVX-512 ---------------------------------------------------------------------------- */

#define AVX512 __attribute__((target("avx512f")))
#define AVX2 __attribute__((target("avx2,fma")))
/* the per-vector steps, inlined into loops that have the finish kind as a
 * constant (FIN_SWITCH): a call and a jump table per vector cost sigmoid a
 * third of its time */
#define INLINE inline __attribute__((always_inline))
#define FIN_SWITCH(fin, CALL)                                                                      \
    switch (fin) {                                                                                 \
    case FIN_PLAIN: CALL(FIN_PLAIN); break;                                                        \
    case FIN_SIGMOID: CALL(FIN_SIGMOID); break;                                                    \
    case FIN_RSQRT: CALL(FIN_RSQRT); break;                                                        \
    case FIN_GELU: CALL(FIN_GELU); break;                                                          \
    case FIN_GELU_TANH: CALL(FIN_GELU_TANH); break;                                                \
    case FIN_SILU: CALL(FIN_SILU); break;                                                          \
    }

typedef __m512 (*f16_fn)(__m512);
typedef __m512d (*d8_fn)(__m512d);

/* erf(x) from ERF_R and ERF_TAB (above) */
AVX512 static __m512 erf16(__m512 x) {
    __m512 ax = _mm512_abs_ps(x), u = _mm512_mul_ps(x, x);
    __m512 r = _mm512_set1_ps(ERF_R[6]);
    for (int k = 5; k >= 0; k--) r = _mm512_fmadd_ps(r, u, _mm512_set1_ps(ERF_R[k]));
    __m512 small = _mm512_fmadd_ps(x, r, x);
    /* the interval: NaN converts to INT_MIN, clamped to 0, and stays NaN in s */
    __m512i i = _mm512_cvttps_epi32(
        _mm512_mul_ps(_mm512_sub_ps(ax, _mm512_set1_ps(ERF_SMALL)), _mm512_set1_ps(2.0f)));
    i = _mm512_min_epi32(_mm512_max_epi32(i, _mm512_setzero_si512()), _mm512_set1_epi32(6));
    __m512 s = _mm512_sub_ps(
        ax, _mm512_fmadd_ps(_mm512_cvtepi32_ps(i), _mm512_set1_ps(0.5f), _mm512_set1_ps(1.0f)));
#define ERF_COL(k) _mm512_permutexvar_ps(i, _mm512_castps256_ps512(_mm256_load_ps(ERF_TAB[k])))
    __m512 q = ERF_COL(8);
    for (int k = 7; k >= 2; k--) q = _mm512_fmadd_ps(q, s, ERF_COL(k));
    __m512 big = _mm512_add_ps(ERF_COL(0), _mm512_fmadd_ps(s, q, ERF_COL(1)));
#undef ERF_COL
    big = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(ax, _mm512_set1_ps(ERF_ONE), _CMP_GE_OQ), big,
                               _mm512_set1_ps(1.0f));
    big = _mm512_castsi512_ps(
        _mm512_or_si512(_mm512_castps_si512(big),
                        _mm512_and_si512(_mm512_castps_si512(x), _mm512_set1_epi32(INT32_MIN))));
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(ax, _mm512_set1_ps(ERF_SMALL), _CMP_LT_OQ), big,
                                small);
}

AVX512 static f16_fn pick_f16(dl_unary_op op, finish_kind *fin) {
    *fin = FIN_PLAIN;
    switch (op) {
    case DL_UNARY_EXP: return Sleef_expf16_u10avx512f;
    case DL_UNARY_EXP2: return Sleef_exp2f16_u10avx512f;
    case DL_UNARY_EXPM1: return Sleef_expm1f16_u10avx512f;
    case DL_UNARY_LOG: return Sleef_logf16_u10avx512f;
    case DL_UNARY_LOG2: return Sleef_log2f16_u10avx512f;
    case DL_UNARY_LOG10: return Sleef_log10f16_u10avx512f;
    case DL_UNARY_LOG1P: return Sleef_log1pf16_u10avx512f;
    case DL_UNARY_SIN: return Sleef_sinf16_u10avx512f;
    case DL_UNARY_COS: return Sleef_cosf16_u10avx512f;
    case DL_UNARY_TAN: return Sleef_tanf16_u10avx512f;
    case DL_UNARY_ASIN: return Sleef_asinf16_u10avx512f;
    case DL_UNARY_ACOS: return Sleef_acosf16_u10avx512f;
    case DL_UNARY_ATAN: return Sleef_atanf16_u10avx512f;
    case DL_UNARY_SINH: return Sleef_sinhf16_u10avx512f;
    case DL_UNARY_COSH: return Sleef_coshf16_u10avx512f;
    case DL_UNARY_TANH: return Sleef_tanhf16_u10avx512f;
    case DL_UNARY_ERF: return erf16;
    case DL_UNARY_ERFC: return Sleef_erfcf16_u15avx512f; /* SLEEF has erfc at 1.5 ulp only */
    case DL_UNARY_SQRT: return Sleef_sqrtf16_u05avx512f;
    case DL_UNARY_SIGMOID: *fin = FIN_SIGMOID; return Sleef_expf16_u10avx512f;
    case DL_UNARY_GELU: *fin = FIN_GELU; return Sleef_expf16_u10avx512f; /* (ncdf16) */
    case DL_UNARY_GELU_TANH: *fin = FIN_GELU_TANH; return Sleef_tanhf16_u10avx512f;
    case DL_UNARY_SILU: *fin = FIN_SILU; return Sleef_expf16_u10avx512f;
    case DL_UNARY_RSQRT: *fin = FIN_RSQRT; return Sleef_sqrtf16_u05avx512f;
    default: return NULL;
    }
}

/* exp(a) for the arguments of ncdf (a <= 0.01; -inf gives 0), inlined: a =
 * k ln2 + r, |r| <= ln2/2 (ln2 in two parts), e^r by its Taylor series to
 * r^7 (truncation under 6e-9 relative), times 2^k; results that underflow
 * go to 0 (GELU's lower tail there is far below its bar). */
static const float NEXP_C[8] = {1.0f,      1.0f,       0.5f,       1.0f / 6,
                                1.0f / 24, 1.0f / 120, 1.0f / 720, 1.0f / 5040};
#define NEXP_LN2_HI 0.693145751953125f
#define NEXP_LN2_LO 1.428606765330187e-06f

AVX512 static inline __m512 nexp16(__m512 a) {
    __m512 k = _mm512_roundscale_ps(_mm512_mul_ps(a, _mm512_set1_ps(1.44269504f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(k, _mm512_set1_ps(NEXP_LN2_HI), a);
    r = _mm512_fnmadd_ps(k, _mm512_set1_ps(NEXP_LN2_LO), r);
    __m512 p = _mm512_set1_ps(NEXP_C[7]);
    for (int i = 6; i >= 0; i--) p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(NEXP_C[i]));
    __m512 y = _mm512_scalef_ps(p, k);
    __mmask16 tiny = _mm512_cmp_ps_mask(a, _mm512_set1_ps(-87.0f), _CMP_LT_OQ);
    return _mm512_mask_blend_ps(tiny, y, _mm512_setzero_ps());
}

AVX512 static inline __m512 ncdf16(__m512 x) {
    const __m512 one = _mm512_set1_ps(1.0f), half = _mm512_set1_ps(0.5f);
    __m512 z = _mm512_mul_ps(_mm512_abs_ps(x), _mm512_set1_ps((float)GELU_ALPHA));
    __m512 t = _mm512_div_ps(one, _mm512_fmadd_ps(z, half, one));
    __m512 p = _mm512_set1_ps(NCDF_P[9]);
    for (int i = 8; i >= 0; i--) p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(NCDF_P[i]));
    __m512 h = _mm512_mul_ps(_mm512_mul_ps(t, nexp16(_mm512_fnmadd_ps(z, z, p))), half);
    __mmask16 pos = _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_GE_OQ);
    return _mm512_mask_blend_ps(pos, h, _mm512_sub_ps(one, h));
}

AVX512 static INLINE __m512 apply_f16(f16_fn f, finish_kind fin, __m512 x) {
    const __m512 one = _mm512_set1_ps(1.0f);
    switch (fin) {
    case FIN_SIGMOID: /* 1 / (1 + exp(-x)), as the scalar loop computes it */
        return _mm512_div_ps(one, _mm512_add_ps(one, f(_mm512_sub_ps(_mm512_setzero_ps(), x))));
    case FIN_GELU: return _mm512_mul_ps(x, ncdf16(x)); /* x Phi(x) */
    case FIN_GELU_TANH: { /* 0.5 * x * (1 + tanh(beta * (x + kappa * x^3))) */
        __m512 x3 = _mm512_mul_ps(_mm512_mul_ps(x, x), x);
        __m512 inner =
            _mm512_mul_ps(_mm512_set1_ps((float)GELU_BETA),
                          _mm512_add_ps(x, _mm512_mul_ps(_mm512_set1_ps((float)GELU_KAPPA), x3)));
        return _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps((float)0.5), x),
                             _mm512_add_ps(one, f(inner)));
    }
    case FIN_SILU: /* x / (1 + exp(-x)) */
        return _mm512_div_ps(x, _mm512_add_ps(one, f(_mm512_sub_ps(_mm512_setzero_ps(), x))));
    case FIN_RSQRT: return _mm512_div_ps(one, f(x));
    default: return f(x);
    }
}

/* f(x) with the lanes beyond SLEEF's domain (|x| > lim) from libm */
AVX512 static INLINE __m512 eval_f16(f16_fn f, finish_kind fin, float (*scalar)(float), float lim,
                                     __m512 x) {
    __m512 y = apply_f16(f, fin, x);
    if (scalar) {
        __m512 ax = _mm512_abs_ps(x);
        __mmask16 far = _mm512_cmp_ps_mask(ax, _mm512_set1_ps(lim), _CMP_GT_OQ);
        if (far) {
            float xs[16], ys[16];
            _mm512_storeu_ps(xs, x);
            _mm512_storeu_ps(ys, y);
            for (int j = 0; j < 16; j++)
                if (far >> j & 1) ys[j] = scalar(xs[j]);
            y = _mm512_loadu_ps(ys);
        }
    }
    return y;
}

/* o = f(x) over n contiguous floats: whole vectors, then one masked */
AVX512 static INLINE void dense_f16(f16_fn f, finish_kind fin, float (*scalar)(float), float lim,
                                    float *o, const float *x, int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(o + i, eval_f16(f, fin, scalar, lim, _mm512_loadu_ps(x + i)));
    if (i < n) {
        __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
        _mm512_mask_storeu_ps(o + i, m,
                              eval_f16(f, fin, scalar, lim, _mm512_maskz_loadu_ps(m, x + i)));
    }
}

AVX512 static bool run_f32_avx512(dl_unary_op op, char **data, const int64_t *strides, int64_t n) {
    finish_kind fin;
    f16_fn f = pick_f16(op, &fin);
    if (!f) return false;
    float lim;
    float (*scalar)(float) = beyond_f32(op, &lim);
    float *o = (float *)data[0];
    const float *x = (const float *)data[1];
    int64_t so = strides[0], sx = strides[1];
    if (so == (int64_t)sizeof(float) && sx == (int64_t)sizeof(float)) {
#define DENSE16(FIN) dense_f16(f, FIN, scalar, lim, o, x, n)
        FIN_SWITCH(fin, DENSE16);
#undef DENSE16
        return true;
    }
    float buf[16];
    for (int64_t i = 0; i < n; i += 16) {
        int64_t k = n - i < 16 ? n - i : 16;
        for (int64_t j = 0; j < 16; j++)
            buf[j] = j < k ? *(const float *)(data[1] + (i + j) * sx) : 0;
        _mm512_storeu_ps(buf, eval_f16(f, fin, scalar, lim, _mm512_loadu_ps(buf)));
        for (int64_t j = 0; j < k; j++) *(float *)(data[0] + (i + j) * so) = buf[j];
    }
    return true;
}

AVX512 static d8_fn pick_d8(dl_unary_op op, finish_kind *fin) {
    *fin = FIN_PLAIN;
    switch (op) {
    case DL_UNARY_EXP: return Sleef_expd8_u10avx512f;
    case DL_UNARY_EXP2: return Sleef_exp2d8_u10avx512f;
    case DL_UNARY_EXPM1: return Sleef_expm1d8_u10avx512f;
    case DL_UNARY_LOG: return Sleef_logd8_u10avx512f;
    case DL_UNARY_LOG2: return Sleef_log2d8_u10avx512f;
    case DL_UNARY_LOG10: return Sleef_log10d8_u10avx512f;
    case DL_UNARY_LOG1P: return Sleef_log1pd8_u10avx512f;
    case DL_UNARY_SIN: return Sleef_sind8_u10avx512f;
    case DL_UNARY_COS: return Sleef_cosd8_u10avx512f;
    case DL_UNARY_TAN: return Sleef_tand8_u10avx512f;
    case DL_UNARY_ASIN: return Sleef_asind8_u10avx512f;
    case DL_UNARY_ACOS: return Sleef_acosd8_u10avx512f;
    case DL_UNARY_ATAN: return Sleef_atand8_u10avx512f;
    case DL_UNARY_SINH: return Sleef_sinhd8_u10avx512f;
    case DL_UNARY_COSH: return Sleef_coshd8_u10avx512f;
    case DL_UNARY_TANH: return Sleef_tanhd8_u10avx512f;
    case DL_UNARY_ERF: return Sleef_erfd8_u10avx512f;
    case DL_UNARY_ERFC: return Sleef_erfcd8_u15avx512f;
    case DL_UNARY_SIGMOID: *fin = FIN_SIGMOID; return Sleef_expd8_u10avx512f;
    case DL_UNARY_GELU: *fin = FIN_GELU; return Sleef_erfd8_u10avx512f;
    case DL_UNARY_GELU_TANH: *fin = FIN_GELU_TANH; return Sleef_tanhd8_u10avx512f;
    case DL_UNARY_SILU: *fin = FIN_SILU; return Sleef_expd8_u10avx512f;
    default: return NULL; /* sqrt and rsqrt: libm's loops are exact enough and vectorise */
    }
}

AVX512 static inline __m512d apply_d8(d8_fn f, finish_kind fin, __m512d x) {
    const __m512d one = _mm512_set1_pd(1.0);
    switch (fin) {
    case FIN_SIGMOID:
        return _mm512_div_pd(one, _mm512_add_pd(one, f(_mm512_sub_pd(_mm512_setzero_pd(), x))));
    case FIN_GELU: /* x * 0.5 * (1 + erf(x / sqrt(2))) */
        return _mm512_mul_pd(_mm512_mul_pd(x, _mm512_set1_pd(0.5)),
                             _mm512_add_pd(one, f(_mm512_mul_pd(x, _mm512_set1_pd(GELU_ALPHA)))));
    case FIN_GELU_TANH: { /* 0.5 * x * (1 + tanh(beta * (x + kappa * x^3))) */
        __m512d x3 = _mm512_mul_pd(_mm512_mul_pd(x, x), x);
        __m512d inner =
            _mm512_mul_pd(_mm512_set1_pd(GELU_BETA),
                          _mm512_add_pd(x, _mm512_mul_pd(_mm512_set1_pd(GELU_KAPPA), x3)));
        return _mm512_mul_pd(_mm512_mul_pd(_mm512_set1_pd(0.5), x), _mm512_add_pd(one, f(inner)));
    }
    case FIN_SILU: /* x / (1 + exp(-x)) */
        return _mm512_div_pd(x, _mm512_add_pd(one, f(_mm512_sub_pd(_mm512_setzero_pd(), x))));
    default: return f(x);
    }
}

AVX512 static bool run_f64_avx512(dl_unary_op op, char **data, const int64_t *strides, int64_t n) {
    finish_kind fin;
    d8_fn f = pick_d8(op, &fin);
    if (!f) return false;
    double *o = (double *)data[0];
    const double *x = (const double *)data[1];
    int64_t so = strides[0], sx = strides[1];
    if (so == (int64_t)sizeof(double) && sx == (int64_t)sizeof(double)) {
        int64_t i = 0;
        for (; i + 8 <= n; i += 8)
            _mm512_storeu_pd(o + i, apply_d8(f, fin, _mm512_loadu_pd(x + i)));
        if (i < n) {
            __mmask8 m = (__mmask8)((1u << (n - i)) - 1);
            _mm512_mask_storeu_pd(o + i, m, apply_d8(f, fin, _mm512_maskz_loadu_pd(m, x + i)));
        }
        return true;
    }
    double buf[8];
    for (int64_t i = 0; i < n; i += 8) {
        int64_t k = n - i < 8 ? n - i : 8;
        for (int64_t j = 0; j < 8; j++)
            buf[j] = j < k ? *(const double *)(data[1] + (i + j) * sx) : 0;
        _mm512_storeu_pd(buf, apply_d8(f, fin, _mm512_loadu_pd(buf)));
        for (int64_t j = 0; j < k; j++) *(double *)(data[0] + (i + j) * so) = buf[j];
    }
    return true;
}

/* --- AVX2 ------------------------------------------------------------------------------- */

typedef __m256 (*f8_fn)(__m256);
typedef __m256d (*d4_fn)(__m256d);

/* erf(x) from ERF_R and ERF_TAB (above) */
AVX2 static __m256 erf8(__m256 x) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 ax = _mm256_andnot_ps(sign, x), u = _mm256_mul_ps(x, x);
    __m256 r = _mm256_set1_ps(ERF_R[6]);
    for (int k = 5; k >= 0; k--) r = _mm256_fmadd_ps(r, u, _mm256_set1_ps(ERF_R[k]));
    __m256 small = _mm256_fmadd_ps(x, r, x);
    /* the interval: NaN converts to INT_MIN, clamped to 0, and stays NaN in s */
    __m256i i = _mm256_cvttps_epi32(
        _mm256_mul_ps(_mm256_sub_ps(ax, _mm256_set1_ps(ERF_SMALL)), _mm256_set1_ps(2.0f)));
    i = _mm256_min_epi32(_mm256_max_epi32(i, _mm256_setzero_si256()), _mm256_set1_epi32(6));
    __m256 s = _mm256_sub_ps(
        ax, _mm256_fmadd_ps(_mm256_cvtepi32_ps(i), _mm256_set1_ps(0.5f), _mm256_set1_ps(1.0f)));
#define ERF_COL(k) _mm256_permutevar8x32_ps(_mm256_load_ps(ERF_TAB[k]), i)
    __m256 q = ERF_COL(8);
    for (int k = 7; k >= 2; k--) q = _mm256_fmadd_ps(q, s, ERF_COL(k));
    __m256 big = _mm256_add_ps(ERF_COL(0), _mm256_fmadd_ps(s, q, ERF_COL(1)));
#undef ERF_COL
    big = _mm256_blendv_ps(big, _mm256_set1_ps(1.0f),
                           _mm256_cmp_ps(ax, _mm256_set1_ps(ERF_ONE), _CMP_GE_OQ));
    big = _mm256_or_ps(big, _mm256_and_ps(x, sign));
    return _mm256_blendv_ps(big, small, _mm256_cmp_ps(ax, _mm256_set1_ps(ERF_SMALL), _CMP_LT_OQ));
}

AVX2 static f8_fn pick_f8(dl_unary_op op, finish_kind *fin) {
    *fin = FIN_PLAIN;
    switch (op) {
    case DL_UNARY_EXP: return Sleef_expf8_u10avx2;
    case DL_UNARY_EXP2: return Sleef_exp2f8_u10avx2;
    case DL_UNARY_EXPM1: return Sleef_expm1f8_u10avx2;
    case DL_UNARY_LOG: return Sleef_logf8_u10avx2;
    case DL_UNARY_LOG2: return Sleef_log2f8_u10avx2;
    case DL_UNARY_LOG10: return Sleef_log10f8_u10avx2;
    case DL_UNARY_LOG1P: return Sleef_log1pf8_u10avx2;
    case DL_UNARY_SIN: return Sleef_sinf8_u10avx2;
    case DL_UNARY_COS: return Sleef_cosf8_u10avx2;
    case DL_UNARY_TAN: return Sleef_tanf8_u10avx2;
    case DL_UNARY_ASIN: return Sleef_asinf8_u10avx2;
    case DL_UNARY_ACOS: return Sleef_acosf8_u10avx2;
    case DL_UNARY_ATAN: return Sleef_atanf8_u10avx2;
    case DL_UNARY_SINH: return Sleef_sinhf8_u10avx2;
    case DL_UNARY_COSH: return Sleef_coshf8_u10avx2;
    case DL_UNARY_TANH: return Sleef_tanhf8_u10avx2;
    case DL_UNARY_ERF: return erf8;
    case DL_UNARY_ERFC: return Sleef_erfcf8_u15avx2;
    case DL_UNARY_SQRT: return Sleef_sqrtf8_u05avx2;
    case DL_UNARY_SIGMOID: *fin = FIN_SIGMOID; return Sleef_expf8_u10avx2;
    case DL_UNARY_GELU: *fin = FIN_GELU; return Sleef_expf8_u10avx2; /* (ncdf8) */
    case DL_UNARY_GELU_TANH: *fin = FIN_GELU_TANH; return Sleef_tanhf8_u10avx2;
    case DL_UNARY_SILU: *fin = FIN_SILU; return Sleef_expf8_u10avx2;
    case DL_UNARY_RSQRT: *fin = FIN_RSQRT; return Sleef_sqrtf8_u05avx2;
    default: return NULL;
    }
}

AVX2 static inline __m256 nexp8(__m256 a) {
    __m256 tiny = _mm256_cmp_ps(a, _mm256_set1_ps(-87.0f), _CMP_LT_OQ);
    a = _mm256_max_ps(a, _mm256_set1_ps(-87.0f)); /* keeps 2^k normal (and -inf out) */
    __m256 k = _mm256_round_ps(_mm256_mul_ps(a, _mm256_set1_ps(1.44269504f)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(k, _mm256_set1_ps(NEXP_LN2_HI), a);
    r = _mm256_fnmadd_ps(k, _mm256_set1_ps(NEXP_LN2_LO), r);
    __m256 p = _mm256_set1_ps(NEXP_C[7]);
    for (int i = 6; i >= 0; i--) p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(NEXP_C[i]));
    __m256i e =
        _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(k), _mm256_set1_epi32(127)), 23);
    __m256 y = _mm256_mul_ps(p, _mm256_castsi256_ps(e));
    return _mm256_blendv_ps(y, _mm256_setzero_ps(), tiny);
}

AVX2 static inline __m256 ncdf8(__m256 x) {
    const __m256 one = _mm256_set1_ps(1.0f), half = _mm256_set1_ps(0.5f);
    __m256 ax = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), x);
    __m256 z = _mm256_mul_ps(ax, _mm256_set1_ps((float)GELU_ALPHA));
    __m256 t = _mm256_div_ps(one, _mm256_fmadd_ps(z, half, one));
    __m256 p = _mm256_set1_ps(NCDF_P[9]);
    for (int i = 8; i >= 0; i--) p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(NCDF_P[i]));
    __m256 h = _mm256_mul_ps(_mm256_mul_ps(t, nexp8(_mm256_fnmadd_ps(z, z, p))), half);
    __m256 pos = _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_GE_OQ);
    return _mm256_blendv_ps(h, _mm256_sub_ps(one, h), pos);
}

AVX2 static INLINE __m256 apply_f8(f8_fn f, finish_kind fin, __m256 x) {
    const __m256 one = _mm256_set1_ps(1.0f);
    switch (fin) {
    case FIN_SIGMOID:
        return _mm256_div_ps(one, _mm256_add_ps(one, f(_mm256_sub_ps(_mm256_setzero_ps(), x))));
    case FIN_GELU: return _mm256_mul_ps(x, ncdf8(x)); /* x Phi(x) */
    case FIN_GELU_TANH: { /* 0.5 * x * (1 + tanh(beta * (x + kappa * x^3))) */
        __m256 x3 = _mm256_mul_ps(_mm256_mul_ps(x, x), x);
        __m256 inner =
            _mm256_mul_ps(_mm256_set1_ps((float)GELU_BETA),
                          _mm256_add_ps(x, _mm256_mul_ps(_mm256_set1_ps((float)GELU_KAPPA), x3)));
        return _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps((float)0.5), x),
                             _mm256_add_ps(one, f(inner)));
    }
    case FIN_SILU: /* x / (1 + exp(-x)) */
        return _mm256_div_ps(x, _mm256_add_ps(one, f(_mm256_sub_ps(_mm256_setzero_ps(), x))));
    case FIN_RSQRT: return _mm256_div_ps(one, f(x));
    default: return f(x);
    }
}

AVX2 static INLINE __m256 eval_f8(f8_fn f, finish_kind fin, float (*scalar)(float), float lim,
                                  __m256 x) {
    __m256 y = apply_f8(f, fin, x);
    if (scalar) {
        __m256 ax = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), x);
        int far = _mm256_movemask_ps(_mm256_cmp_ps(ax, _mm256_set1_ps(lim), _CMP_GT_OQ));
        if (far) {
            float xs[8], ys[8];
            _mm256_storeu_ps(xs, x);
            _mm256_storeu_ps(ys, y);
            for (int j = 0; j < 8; j++)
                if (far >> j & 1) ys[j] = scalar(xs[j]);
            y = _mm256_loadu_ps(ys);
        }
    }
    return y;
}

/* o = f(x) over the whole vectors of n contiguous floats; returns how many */
AVX2 static INLINE int64_t dense_f8(f8_fn f, finish_kind fin, float (*scalar)(float), float lim,
                                    float *o, const float *x, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(o + i, eval_f8(f, fin, scalar, lim, _mm256_loadu_ps(x + i)));
    return i;
}

AVX2 static bool run_f32_avx2(dl_unary_op op, char **data, const int64_t *strides, int64_t n) {
    finish_kind fin;
    f8_fn f = pick_f8(op, &fin);
    if (!f) return false;
    float lim;
    float (*scalar)(float) = beyond_f32(op, &lim);
    int64_t so = strides[0], sx = strides[1];
    bool dense = so == (int64_t)sizeof(float) && sx == (int64_t)sizeof(float);
    float *o = (float *)data[0];
    const float *x = (const float *)data[1];
    int64_t i = 0;
    if (dense) {
#define DENSE8(FIN) i = dense_f8(f, FIN, scalar, lim, o, x, n)
        FIN_SWITCH(fin, DENSE8);
#undef DENSE8
    }
    float buf[8];
    for (; i < n; i += 8) { /* strided rows and the dense tail: through a padded vector */
        int64_t k = n - i < 8 ? n - i : 8;
        for (int64_t j = 0; j < 8; j++)
            buf[j] = j < k ? *(const float *)(data[1] + (i + j) * sx) : 0;
        _mm256_storeu_ps(buf, eval_f8(f, fin, scalar, lim, _mm256_loadu_ps(buf)));
        for (int64_t j = 0; j < k; j++) *(float *)(data[0] + (i + j) * so) = buf[j];
    }
    return true;
}

AVX2 static d4_fn pick_d4(dl_unary_op op, finish_kind *fin) {
    *fin = FIN_PLAIN;
    switch (op) {
    case DL_UNARY_EXP: return Sleef_expd4_u10avx2;
    case DL_UNARY_EXP2: return Sleef_exp2d4_u10avx2;
    case DL_UNARY_EXPM1: return Sleef_expm1d4_u10avx2;
    case DL_UNARY_LOG: return Sleef_logd4_u10avx2;
    case DL_UNARY_LOG2: return Sleef_log2d4_u10avx2;
    case DL_UNARY_LOG10: return Sleef_log10d4_u10avx2;
    case DL_UNARY_LOG1P: return Sleef_log1pd4_u10avx2;
    case DL_UNARY_SIN: return Sleef_sind4_u10avx2;
    case DL_UNARY_COS: return Sleef_cosd4_u10avx2;
    case DL_UNARY_TAN: return Sleef_tand4_u10avx2;
    case DL_UNARY_ASIN: return Sleef_asind4_u10avx2;
    case DL_UNARY_ACOS: return Sleef_acosd4_u10avx2;
    case DL_UNARY_ATAN: return Sleef_atand4_u10avx2;
    case DL_UNARY_SINH: return Sleef_sinhd4_u10avx2;
    case DL_UNARY_COSH: return Sleef_coshd4_u10avx2;
    case DL_UNARY_TANH: return Sleef_tanhd4_u10avx2;
    case DL_UNARY_ERF: return Sleef_erfd4_u10avx2;
    case DL_UNARY_ERFC: return Sleef_erfcd4_u15avx2;
    case DL_UNARY_SIGMOID: *fin = FIN_SIGMOID; return Sleef_expd4_u10avx2;
    case DL_UNARY_GELU: *fin = FIN_GELU; return Sleef_erfd4_u10avx2;
    case DL_UNARY_GELU_TANH: *fin = FIN_GELU_TANH; return Sleef_tanhd4_u10avx2;
    case DL_UNARY_SILU: *fin = FIN_SILU; return Sleef_expd4_u10avx2;
    default: return NULL;
    }
}

AVX2 static inline __m256d apply_d4(d4_fn f, finish_kind fin, __m256d x) {
    const __m256d one = _mm256_set1_pd(1.0);
    switch (fin) {
    case FIN_SIGMOID:
        return _mm256_div_pd(one, _mm256_add_pd(one, f(_mm256_sub_pd(_mm256_setzero_pd(), x))));
    case FIN_GELU: /* x * 0.5 * (1 + erf(x / sqrt(2))) */
        return _mm256_mul_pd(_mm256_mul_pd(x, _mm256_set1_pd(0.5)),
                             _mm256_add_pd(one, f(_mm256_mul_pd(x, _mm256_set1_pd(GELU_ALPHA)))));
    case FIN_GELU_TANH: { /* 0.5 * x * (1 + tanh(beta * (x + kappa * x^3))) */
        __m256d x3 = _mm256_mul_pd(_mm256_mul_pd(x, x), x);
        __m256d inner =
            _mm256_mul_pd(_mm256_set1_pd(GELU_BETA),
                          _mm256_add_pd(x, _mm256_mul_pd(_mm256_set1_pd(GELU_KAPPA), x3)));
        return _mm256_mul_pd(_mm256_mul_pd(_mm256_set1_pd(0.5), x), _mm256_add_pd(one, f(inner)));
    }
    case FIN_SILU: /* x / (1 + exp(-x)) */
        return _mm256_div_pd(x, _mm256_add_pd(one, f(_mm256_sub_pd(_mm256_setzero_pd(), x))));
    default: return f(x);
    }
}

AVX2 static bool run_f64_avx2(dl_unary_op op, char **data, const int64_t *strides, int64_t n) {
    finish_kind fin;
    d4_fn f = pick_d4(op, &fin);
    if (!f) return false;
    int64_t so = strides[0], sx = strides[1];
    bool dense = so == (int64_t)sizeof(double) && sx == (int64_t)sizeof(double);
    double *o = (double *)data[0];
    const double *x = (const double *)data[1];
    int64_t i = 0;
    if (dense)
        for (; i + 4 <= n; i += 4)
            _mm256_storeu_pd(o + i, apply_d4(f, fin, _mm256_loadu_pd(x + i)));
    double buf[4];
    for (; i < n; i += 4) {
        int64_t k = n - i < 4 ? n - i : 4;
        for (int64_t j = 0; j < 4; j++)
            buf[j] = j < k ? *(const double *)(data[1] + (i + j) * sx) : 0;
        _mm256_storeu_pd(buf, apply_d4(f, fin, _mm256_loadu_pd(buf)));
        for (int64_t j = 0; j < k; j++) *(double *)(data[0] + (i + j) * so) = buf[j];
    }
    return true;
}

/* --- activation backward ------------------------------------------------------------------
 * gx = gy * op'(s) in blocks of 16 floats: one body for both ISAs, written
 * with generic 16-lane vectors (AVX2 runs each as two halves) around the
 * ISA's SLEEF functions, which take and give 16 floats through memory.
 * The formulas and their order are PyTorch's CPU kernels'. */

typedef float vf16 __attribute__((vector_size(64)));
typedef void (*blk_fn)(float *y, const float *x); /* y = f(x), 16 lanes */

typedef struct {
    blk_fn exp, ncdf, tanh;
} blk_fns;

#define SPLAT(v) ((vf16){v, v, v, v, v, v, v, v, v, v, v, v, v, v, v, v})

static inline __attribute__((always_inline)) void
act_bwd_block(dl_unary_op op, const blk_fns *F, float *o, const float *gp, const float *sp) {
    vf16 g, x, t, u, r;
    memcpy(&g, gp, sizeof g);
    memcpy(&x, sp, sizeof x);
    const vf16 one = SPLAT(1.0f), half = SPLAT(0.5f);
    const float beta = (float)(M_SQRT2 * M_2_SQRTPI * 0.5), kappa = (float)GELU_KAPPA;
    switch (op) {
    case DL_UNARY_GELU: { /* dy * (Phi(x) + x * beta/2 * exp(-x^2/2)) */
        vf16 cdf;
        F->ncdf((float *)&cdf, (const float *)&x);
        t = x * x * SPLAT(-0.5f);
        F->exp((float *)&u, (const float *)&t);
        vf16 pdf = SPLAT(beta * 0.5f) * u;
        r = g * (cdf + x * pdf);
        break;
    }
    case DL_UNARY_GELU_TANH: {
        vf16 x2 = x * x, x3 = x2 * x;
        t = SPLAT(beta) * (x + SPLAT(kappa) * x3);
        F->tanh((float *)&u, (const float *)&t);
        vf16 left = half * x, right = one + u;
        vf16 left_d = half * right;
        vf16 tanh_d = one - u * u;
        vf16 inner_d = SPLAT(beta) * (one + SPLAT(3.0f * kappa) * x2);
        r = g * (left_d + left * tanh_d * inner_d);
        break;
    }
    case DL_UNARY_SILU: { /* dy * s * (1 + x * (1 - s)), s = 1 / (1 + exp(-x)) */
        t = -x;
        F->exp((float *)&u, (const float *)&t);
        vf16 sg = one / (one + u);
        r = g * sg * (one + x * (one - sg));
        break;
    }
    case DL_UNARY_SIGMOID: r = g * (one - x) * x; break; /* from the result */
    default: r = g * (one - x * x); break;               /* tanh, from the result */
    }
    memcpy(o, &r, sizeof r);
}

/* the dense rows: whole blocks, then the tail through zero-padded blocks */
static inline __attribute__((always_inline)) void
act_bwd_row(dl_unary_op op, const blk_fns *F, float *o, const float *g, const float *s, int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) act_bwd_block(op, F, o + i, g + i, s + i);
    if (i < n) {
        float gb[16] = {0}, sb[16] = {0}, ob[16];
        memcpy(gb, g + i, (size_t)(n - i) * sizeof(float));
        memcpy(sb, s + i, (size_t)(n - i) * sizeof(float));
        act_bwd_block(op, F, ob, gb, sb);
        memcpy(o + i, ob, (size_t)(n - i) * sizeof(float));
    }
}

AVX512 static void exp_b512(float *y, const float *x) {
    _mm512_storeu_ps(y, Sleef_expf16_u10avx512f(_mm512_loadu_ps(x)));
}
AVX512 static void ncdf_b512(float *y, const float *x) {
    _mm512_storeu_ps(y, ncdf16(_mm512_loadu_ps(x)));
}
AVX512 static void tanh_b512(float *y, const float *x) {
    _mm512_storeu_ps(y, Sleef_tanhf16_u10avx512f(_mm512_loadu_ps(x)));
}
AVX512 static void act_bwd_avx512(dl_unary_op op, float *o, const float *g, const float *s,
                                  int64_t n) {
    const blk_fns F = {exp_b512, ncdf_b512, tanh_b512};
    act_bwd_row(op, &F, o, g, s, n);
}

AVX2 static void exp_b256(float *y, const float *x) {
    _mm256_storeu_ps(y, Sleef_expf8_u10avx2(_mm256_loadu_ps(x)));
    _mm256_storeu_ps(y + 8, Sleef_expf8_u10avx2(_mm256_loadu_ps(x + 8)));
}
AVX2 static void ncdf_b256(float *y, const float *x) {
    _mm256_storeu_ps(y, ncdf8(_mm256_loadu_ps(x)));
    _mm256_storeu_ps(y + 8, ncdf8(_mm256_loadu_ps(x + 8)));
}
AVX2 static void tanh_b256(float *y, const float *x) {
    _mm256_storeu_ps(y, Sleef_tanhf8_u10avx2(_mm256_loadu_ps(x)));
    _mm256_storeu_ps(y + 8, Sleef_tanhf8_u10avx2(_mm256_loadu_ps(x + 8)));
}
AVX2 static void act_bwd_avx2(dl_unary_op op, float *o, const float *g, const float *s, int64_t n) {
    const blk_fns F = {exp_b256, ncdf_b256, tanh_b256};
    act_bwd_row(op, &F, o, g, s, n);
}

static bool is_act_bwd(dl_unary_op op) {
    return op == DL_UNARY_GELU || op == DL_UNARY_GELU_TANH || op == DL_UNARY_SILU ||
           op == DL_UNARY_SIGMOID || op == DL_UNARY_TANH;
}

bool dl_cpu_vec_act_backward_f32(dl_unary_op op, float *gx, const float *gy, const float *s,
                                 int64_t n) {
    if (!is_act_bwd(op)) return false;
    switch (cpu_isa()) {
    case ISA_AVX512: act_bwd_avx512(op, gx, gy, s, n); return true;
    case ISA_AVX2: act_bwd_avx2(op, gx, gy, s, n); return true;
    default: return false;
    }
}

/* --- pow ------------------------------------------------------------------------------------
 * out = pow(x, y) through SLEEF's u10 pow, W lanes at a time: dense blocks
 * straight from memory, anything else (strided, broadcast, the tail)
 * gathered into a padded block, so a value's result does not depend on its
 * layout.  One row function per ISA and dtype, stamped from POW_ROW. */
#define POW_ROW(NAME, ATTR, T, W, VT, LOADU, STOREU, FN)                                           \
    ATTR static void NAME(char **d, const int64_t *st, int64_t n) {                                \
        const int64_t z = (int64_t)sizeof(T);                                                      \
        bool dense = st[0] == z && st[1] == z && st[2] == z;                                       \
        T xb[W], yb[W];                                                                            \
        for (int64_t i = 0; i < n; i += W) {                                                       \
            int64_t k = n - i < W ? n - i : W;                                                     \
            if (dense && k == W) {                                                                 \
                VT r = FN(LOADU((const T *)d[1] + i), LOADU((const T *)d[2] + i));                 \
                STOREU((T *)d[0] + i, r);                                                          \
                continue;                                                                          \
            }                                                                                      \
            for (int64_t j = 0; j < W; j++) {                                                      \
                xb[j] = j < k ? *(const T *)(d[1] + (i + j) * st[1]) : (T)1;                       \
                yb[j] = j < k ? *(const T *)(d[2] + (i + j) * st[2]) : (T)1;                       \
            }                                                                                      \
            STOREU(xb, FN(LOADU(xb), LOADU(yb)));                                                  \
            for (int64_t j = 0; j < k; j++) *(T *)(d[0] + (i + j) * st[0]) = xb[j];                \
        }                                                                                          \
    }

POW_ROW(pow_f32_avx512, AVX512, float, 16, __m512, _mm512_loadu_ps, _mm512_storeu_ps,
        Sleef_powf16_u10avx512f)
POW_ROW(pow_f64_avx512, AVX512, double, 8, __m512d, _mm512_loadu_pd, _mm512_storeu_pd,
        Sleef_powd8_u10avx512f)
POW_ROW(pow_f32_avx2, AVX2, float, 8, __m256, _mm256_loadu_ps, _mm256_storeu_ps,
        Sleef_powf8_u10avx2)
POW_ROW(pow_f64_avx2, AVX2, double, 4, __m256d, _mm256_loadu_pd, _mm256_storeu_pd,
        Sleef_powd4_u10avx2)

bool dl_cpu_vec_pow(bool f64, char **data, const int64_t *strides, int64_t n) {
    switch (cpu_isa()) {
    case ISA_AVX512: (f64 ? pow_f64_avx512 : pow_f32_avx512)(data, strides, n); return true;
    case ISA_AVX2: (f64 ? pow_f64_avx2 : pow_f32_avx2)(data, strides, n); return true;
    default: return false;
    }
}

/* --- entry points ------------------------------------------------------------------------ */

bool dl_cpu_vec_unary_f32(dl_unary_op op, char **data, const int64_t *strides, int64_t n) {
    switch (cpu_isa()) {
    case ISA_AVX512: return run_f32_avx512(op, data, strides, n);
    case ISA_AVX2: return run_f32_avx2(op, data, strides, n);
    default: return false;
    }
}

bool dl_cpu_vec_unary_f64(dl_unary_op op, char **data, const int64_t *strides, int64_t n) {
    switch (cpu_isa()) {
    case ISA_AVX512: return run_f64_avx512(op, data, strides, n);
    case ISA_AVX2: return run_f64_avx2(op, data, strides, n);
    default: return false;
    }
}

bool dl_cpu_vec_available(void) {
    return cpu_isa() == ISA_AVX512 || cpu_isa() == ISA_AVX2;
}

#else /* no vector kernels: the callers' loops run */

bool dl_cpu_vec_unary_f32(dl_unary_op op, char **data, const int64_t *strides, int64_t n) {
    (void)op, (void)data, (void)strides, (void)n;
    return false;
}

bool dl_cpu_vec_unary_f64(dl_unary_op op, char **data, const int64_t *strides, int64_t n) {
    (void)op, (void)data, (void)strides, (void)n;
    return false;
}

bool dl_cpu_vec_act_backward_f32(dl_unary_op op, float *gx, const float *gy, const float *s,
                                 int64_t n) {
    (void)op, (void)gx, (void)gy, (void)s, (void)n;
    return false;
}

bool dl_cpu_vec_pow(bool f64, char **data, const int64_t *strides, int64_t n) {
    (void)f64, (void)data, (void)strides, (void)n;
    return false;
}

bool dl_cpu_vec_available(void) {
    return false;
}

#endif
