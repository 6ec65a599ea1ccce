/* random.c - CPU kernels of the random op family (see random.h for which
 * counter block and lanes each element uses).  Every loop runs over counter
 * blocks, so its result does not depend on how OpenMP splits it.  float16 and
 * bfloat16 compute in float32 and round per element; float32 computes in
 * float; float64 in double. */
#include "random.h"
#include "core/error.h"
#include "core/parallel.h"
#include "core/rng.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define TWO_PI_F 6.2831853071795864769f
#define TWO_PI 6.2831853071795864769

uint64_t dl_cpu_random_blocks(const dl_random_params *p, dl_dtype dtype, int64_t n) {
    uint64_t un = (uint64_t)n;
    switch (p->kind) {
    case DL_RANDOM_UNIFORM:
    case DL_RANDOM_NORMAL: return dtype == DL_DTYPE_F64 ? (un + 1) / 2 : (un + 3) / 4;
    case DL_RANDOM_BERNOULLI: return (un + 3) / 4;
    case DL_RANDOM_INT:
    case DL_RANDOM_PERM: return (un + 1) / 2;
    }
    return 0;
}

static inline uint64_t word64(const uint32_t r[4], int pair) {
    return ((uint64_t)r[2 * pair] << 32) | r[2 * pair + 1];
}

/* x scaled to [0, range): the high word of the 128-bit product. */
static inline uint64_t scale64(uint64_t x, uint64_t range) {
    return (uint64_t)(((unsigned __int128)x * range) >> 64);
}

/* --- 16-bit floats: round, and keep results strictly below a bound ------- */

static inline uint16_t to_f16ish(float v, dl_dtype dt) {
    return dt == DL_DTYPE_F16 ? dl_float_to_half(v) : dl_float_to_bf16(v);
}

static inline float from_f16ish(uint16_t h, dl_dtype dt) {
    return dt == DL_DTYPE_F16 ? dl_half_to_float(h) : dl_bf16_to_float(h);
}

/* The next representable value toward -inf (both formats are sign-magnitude). */
static inline uint16_t below_f16ish(uint16_t h) {
    if (h & 0x8000) return (uint16_t)(h + 1);
    return h == 0 ? 0x8001 : (uint16_t)(h - 1);
}

/* The largest float below high. */
static float float_below(double high) {
    float f = (float)high;
    return (double)f < high ? f : nextafterf(f, -INFINITY);
}

/* --- uniform --------------------------------------------------------------- */

static void uniform_f64(double *out, int64_t n, double low, double high, uint64_t seed,
                        uint64_t base) { // out is (n,)
    const double span = high - low, top = nextafter(high, -INFINITY);
    const int clamp = high > low;
    int64_t nb = (n + 1) / 2;
#pragma omp parallel for num_threads(dl_get_num_threads()) if (n >= DL_PARALLEL_GRAIN)
    for (int64_t b = 0; b < nb; b++) {
        uint32_t r[4];
        dl_philox4x32(seed, base + (uint64_t)b, r);
        int64_t i0 = 2 * b, m = n - i0 < 2 ? n - i0 : 2;
        for (int64_t l = 0; l < m; l++) {
            double v = low + span * dl_u64_to_unit_double(r[2 * l], r[2 * l + 1]);
            out[i0 + l] = clamp && v >= high ? top : v;
        }
    }
}

/* float32, float16 and bfloat16: one float32 draw per element, the half
 * types rounded from it; a value that rounds up to high steps down below it
 * (and never below low). */
static void uniform_f32ish(void *out, dl_dtype dt, int64_t n, double low, double high,
                           uint64_t seed, uint64_t base) { // out is (n,)
    const float lo = (float)low, span = (float)(high - low), top = float_below(high);
    const uint16_t low_bits = dt == DL_DTYPE_F32 ? 0 : to_f16ish(lo, dt);
    const int clamp = high > low;
    float *o32 = out;
    uint16_t *o16 = out;
    int64_t nb = (n + 3) / 4;
#pragma omp parallel for num_threads(dl_get_num_threads()) if (n >= DL_PARALLEL_GRAIN)
    for (int64_t b = 0; b < nb; b++) {
        uint32_t r[4];
        dl_philox4x32(seed, base + (uint64_t)b, r);
        int64_t i0 = 4 * b, m = n - i0 < 4 ? n - i0 : 4;
        for (int64_t l = 0; l < m; l++) {
            float v = lo + span * dl_u32_to_unit_float(r[l]);
            if (dt == DL_DTYPE_F32) {
                o32[i0 + l] = clamp && (double)v >= high ? top : v;
                continue;
            }
            uint16_t h = to_f16ish(v, dt);
            if (clamp && (double)from_f16ish(h, dt) >= high) {
                h = below_f16ish(h);
                if ((double)from_f16ish(h, dt) >= high) h = below_f16ish(h);
                if ((double)from_f16ish(h, dt) < low) h = low_bits;
            }
            o16[i0 + l] = h;
        }
    }
}

/* --- normal ------------------------------------------------------------------ */

static void normal_f32ish(void *out, dl_dtype dt, int64_t n, double mean, double std, uint64_t seed,
                          uint64_t base) { // out is (n,) float32/16
    const float mu = (float)mean, sigma = (float)std;
    float *o32 = out;
    uint16_t *o16 = out;
    int64_t nb = (n + 3) / 4;
#pragma omp parallel for num_threads(dl_get_num_threads()) if (n >= DL_PARALLEL_GRAIN)
    for (int64_t b = 0; b < nb; b++) {
        uint32_t r[4];
        float z[4];
        dl_philox4x32(seed, base + (uint64_t)b, r);
        for (int p = 0; p < 2; p++) {
            float u1 = 1.0f - dl_u32_to_unit_float(r[2 * p]); /* (0, 1] */
            float theta = TWO_PI_F * dl_u32_to_unit_float(r[2 * p + 1]);
            float rad = sqrtf(-2.0f * logf(u1));
            z[2 * p] = rad * cosf(theta);
            z[2 * p + 1] = rad * sinf(theta);
        }
        int64_t i0 = 4 * b, m = n - i0 < 4 ? n - i0 : 4;
        for (int64_t l = 0; l < m; l++) {
            float v = mu + sigma * z[l];
            if (dt == DL_DTYPE_F32)
                o32[i0 + l] = v;
            else
                o16[i0 + l] = to_f16ish(v, dt);
        }
    }
}

static void normal_f64(double *out, int64_t n, double mean, double std, uint64_t seed,
                       uint64_t base) { // out is (n,)
    int64_t nb = (n + 1) / 2;
#pragma omp parallel for num_threads(dl_get_num_threads()) if (n >= DL_PARALLEL_GRAIN)
    for (int64_t b = 0; b < nb; b++) {
        uint32_t r[4];
        dl_philox4x32(seed, base + (uint64_t)b, r);
        double u1 = 1.0 - dl_u64_to_unit_double(r[0], r[1]); /* (0, 1] */
        double theta = TWO_PI * dl_u64_to_unit_double(r[2], r[3]);
        double rad = sqrt(-2.0 * log(u1));
        out[2 * b] = mean + std * rad * cos(theta);
        if (2 * b + 1 < n) out[2 * b + 1] = mean + std * rad * sin(theta);
    }
}

/* --- integers, bernoulli ------------------------------------------------------- */

/* Stores the integer v as element i of out, of dtype dt (any dtype). */
static inline void store_int(void *out, dl_dtype dt, int64_t i, int64_t v) {
    char *p = (char *)out + (size_t)i * dl_dtype_size(dt);
    if (dt == DL_DTYPE_I64)
        *(int64_t *)p = v;
    else if (dl_dtype_is_floating(dt))
        dl_store_f64(p, dt, (double)v);
    else
        dl_store_i64(p, dt, v);
}

static void random_int(void *out, dl_dtype dt, int64_t n, int64_t low, uint64_t range,
                       uint64_t seed, uint64_t base) { // out is (n,)
    int64_t nb = (n + 1) / 2;
#pragma omp parallel for num_threads(dl_get_num_threads()) if (n >= DL_PARALLEL_GRAIN)
    for (int64_t b = 0; b < nb; b++) {
        uint32_t r[4];
        dl_philox4x32(seed, base + (uint64_t)b, r);
        int64_t i0 = 2 * b, m = n - i0 < 2 ? n - i0 : 2;
        for (int64_t l = 0; l < m; l++)
            store_int(out, dt, i0 + l,
                      (int64_t)((uint64_t)low + scale64(word64(r, (int)l), range)));
    }
}

static void bernoulli(void *out, dl_dtype dt, int64_t n, const double *probs, double prob,
                      uint64_t seed, uint64_t base) { // out is (n,), probs (n,) or NULL
    size_t isz = dl_dtype_size(dt);
    int64_t nb = (n + 3) / 4;
#pragma omp parallel for num_threads(dl_get_num_threads()) if (n >= DL_PARALLEL_GRAIN)
    for (int64_t b = 0; b < nb; b++) {
        uint32_t r[4];
        dl_philox4x32(seed, base + (uint64_t)b, r);
        int64_t i0 = 4 * b, m = n - i0 < 4 ? n - i0 : 4;
        for (int64_t l = 0; l < m; l++) {
            double p = probs ? probs[i0 + l] : prob;
            int hit = (double)dl_u32_to_unit_float(r[l]) < p;
            dl_store_i64((char *)out + (size_t)(i0 + l) * isz, dt, hit);
        }
    }
}

/* Fisher-Yates from the last position down: step i (n-1 .. 1) swaps i with
 * j uniform in [0, i], drawn as 64-bit draw number i.  Sequential by nature. */
static int randperm(void *out, dl_dtype dt, int64_t n, int64_t first, uint64_t seed,
                    uint64_t base) { // out is (n,)
    int64_t *idx = dt == DL_DTYPE_I64 ? out : malloc((size_t)(n > 0 ? n : 1) * sizeof *idx);
    if (!idx) return dl_error("randperm: out of memory for %lld indices", (long long)n);
    for (int64_t i = 0; i < n; i++) idx[i] = i;
    uint32_t r[4];
    for (int64_t i = n - 1; i > 0; i--) {
        if (i == n - 1 || i % 2 == 1) dl_philox4x32(seed, base + (uint64_t)i / 2, r);
        int64_t j = (int64_t)scale64(word64(r, (int)(i % 2)), (uint64_t)i + 1);
        int64_t s = idx[i];
        idx[i] = idx[j];
        idx[j] = s;
    }
    for (int64_t i = 0; i < n; i++) store_int(out, dt, i, idx[i] + first);
    if ((void *)idx != out) free(idx);
    return 0;
}

int dl_cpu_random_fill(void *out, dl_dtype dtype, int64_t n, const dl_random_params *p,
                       uint64_t seed, uint64_t base) {
    switch (p->kind) {
    case DL_RANDOM_UNIFORM:
        if (dtype == DL_DTYPE_F64)
            uniform_f64(out, n, p->a, p->b, seed, base);
        else
            uniform_f32ish(out, dtype, n, p->a, p->b, seed, base);
        return 0;
    case DL_RANDOM_NORMAL:
        if (dtype == DL_DTYPE_F64)
            normal_f64(out, n, p->a, p->b, seed, base);
        else
            normal_f32ish(out, dtype, n, p->a, p->b, seed, base);
        return 0;
    case DL_RANDOM_INT: random_int(out, dtype, n, p->low, p->range, seed, base); return 0;
    case DL_RANDOM_BERNOULLI: bernoulli(out, dtype, n, p->probs, p->a, seed, base); return 0;
    case DL_RANDOM_PERM: return randperm(out, dtype, n, p->low, seed, base);
    }
    return dl_error("random: unknown kind %d", (int)p->kind);
}
