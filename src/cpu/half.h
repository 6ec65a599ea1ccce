/* cpu/half.h - float16 and bfloat16 conversions for the CPU loop kernels:
 * branchless inline forms of core/dtype.c's dl_half_to_float,
 * dl_float_to_half, dl_bf16_to_float and dl_float_to_bf16 that a compiler
 * vectorises inside a loop (no table, no branch, no call), so a kernel can
 * read and write half storage in its own vector loop instead of converting
 * the whole tensor to float32 first.
 *
 * Invariant: bit for bit the results of the core functions for every input
 * (round to nearest even; NaN stays NaN with its sign, quieted; overflow
 * gives inf; subnormals on both sides), so a kernel that converts here
 * agrees with one that converted through core. */
#ifndef DL_CPU_HALF_H
#define DL_CPU_HALF_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

static inline __attribute__((always_inline)) float dl_h2f_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline __attribute__((always_inline)) uint32_t dl_f2b_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

/* bfloat16 -> float: the upper half of the float's bits */
static inline __attribute__((always_inline)) float dl_cpu_bf16_to_float(uint16_t h) {
    return dl_h2f_bits((uint32_t)h << 16);
}

/* float -> bfloat16, round to nearest even; NaN quieted */
static inline __attribute__((always_inline)) uint16_t dl_cpu_float_to_bf16(float f) {
    uint32_t x = dl_f2b_bits(f);
    uint32_t r = (x + 0x7fffu + ((x >> 16) & 1)) >> 16;
    uint32_t q = (x >> 16) | 0x40;
    return (uint16_t)((x & 0x7fffffffu) > 0x7f800000u ? q : r);
}

/* float16 -> float: normal numbers by rebiasing the exponent, subnormals
 * (m * 2^-24, m < 1024) through an exact int -> float product (no float
 * denormal is ever formed, so FTZ/DAZ modes cannot change the result);
 * inf/NaN get the float's top exponent */
static inline __attribute__((always_inline)) float dl_cpu_half_to_float(uint16_t h) {
    uint32_t em = (uint32_t)h & 0x7fffu, sign = ((uint32_t)h & 0x8000u) << 16;
    uint32_t nrm = (em << 13) + 0x38000000u;
    uint32_t sub = dl_f2b_bits((float)(int32_t)em * 0x1p-24f);
    uint32_t bits = em >= 0x7c00u ? (em << 13) | 0x7f800000u : em < 0x400u ? sub : nrm;
    return dl_h2f_bits(bits | sign);
}

/* float -> float16, round to nearest even: subnormal results by adding a
 * magic number in float arithmetic (the FPU rounds), normal ones by integer
 * rounding of the rebiased bits; inf beyond the range, NaN quieted */
static inline __attribute__((always_inline)) uint16_t dl_cpu_float_to_half(float f) {
    uint32_t x = dl_f2b_bits(f);
    uint32_t sign = (x >> 16) & 0x8000u, a = x & 0x7fffffffu;
    /* 2^-1 as the magic: a + 0.5 leaves the subnormal's mantissa in the low bits */
    uint32_t sub = dl_f2b_bits(dl_h2f_bits(a) + 0.5f) - 0x3f000000u;
    uint32_t nrm = (a + 0xc8000fffu + ((a >> 13) & 1)) >> 13; /* rebias -112, round */
    uint32_t big = a > 0x7f800000u ? 0x7e00u : 0x7c00u;
    uint32_t o = a >= 0x47800000u ? big : a < 0x38800000u ? sub : nrm;
    return (uint16_t)(o | sign);
}

/* name(d, s, n, bf): d[0..n) = s[0..n) converted by BF (bf: bfloat16) or
 * HF (float16), in a vector loop; exact when widening, round to nearest even
 * when narrowing */
#define DL_CPU_HALF_CONVERT(name, TD, TS, BF, HF)                                                  \
    static inline __attribute__((always_inline)) void name(TD *restrict d, const TS *restrict s,   \
                                                           int64_t n, bool bf) {                   \
        if (bf) {                                                                                  \
            _Pragma("omp simd") for (int64_t j = 0; j < n; j++) d[j] = BF(s[j]);                   \
        } else {                                                                                   \
            _Pragma("omp simd") for (int64_t j = 0; j < n; j++) d[j] = HF(s[j]);                   \
        }                                                                                          \
    }
/* halves to floats, floats to halves */
DL_CPU_HALF_CONVERT(dl_cpu_widen, float, uint16_t, dl_cpu_bf16_to_float, dl_cpu_half_to_float)
DL_CPU_HALF_CONVERT(dl_cpu_narrow, uint16_t, float, dl_cpu_float_to_bf16, dl_cpu_float_to_half)

#endif
