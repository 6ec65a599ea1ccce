/* cpu/softmax.h - CPU kernels of softmax and log_softmax, forward and
 * backward, on dense buffers viewed as (outer, D, inner) (dl_softmax_shape,
 * kernels/softmax.h).  The ops layer
 * (src/ops/softmax.c, loss.c) makes the buffers contiguous and picks float32,
 * float64, or float16/bfloat16 storage (computed in float32, the float32
 * kernels' exact result rounded once per element).  Exponentials are
 * computed in float32 (float64 for float64); the sum of exponentials
 * accumulates in double (along rows, over float sums of short blocks).
 * Results do not depend on the thread count. */
#ifndef DL_CPU_SOFTMAX_H
#define DL_CPU_SOFTMAX_H

#include "kernels/softmax.h"

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

/* exp(x) in float within about 1 ulp, written so that loops under
 * `#pragma omp simd` vectorise (libm's expf does not): x = n ln2 + r with
 * |r| <= ln2/2, exp(r) by its Taylor series to r^7 (truncation error below
 * 1e-8), times 2^n built from the exponent bits.  n comes out of the
 * 1.5 * 2^23 rounding trick as bits, never through a float -> int
 * conversion, and every select works on integer bits: float compares here
 * make GCC (with -ftrapping-math) split the loop into branches it then
 * cannot vectorise.  Below -88 the result is 0 (so exp(-inf) = 0; values
 * under 2^-126 flush to 0); above 88 it saturates at e^88 (the kernels call
 * it with x - max <= 0 or log-probabilities); NaN stays NaN. */
static inline float dl_cpu_expf(float x) {
    const uint32_t sign = 0x80000000u, big = 0x42B00000u /* 88.0f */, inf = 0x7F800000u;
    uint32_t xb;
    memcpy(&xb, &x, sizeof xb);
    uint32_t mag = xb & ~sign;
    uint32_t cb = mag > big ? (xb & sign) | big : xb; /* clamp to [-88, 88] */
    cb = mag > inf ? xb : cb;                         /* NaN stays */
    float xc;
    memcpy(&xc, &cb, sizeof xc);
    float t = xc * 1.44269504088896341f + 12582912.0f; /* 1.5 * 2^23 + round(x / ln2) */
    float n = t - 12582912.0f;
    int32_t tb;
    memcpy(&tb, &t, sizeof tb);
    float r = xc - n * 0.693359375f; /* ln2 split in a short head and a tail */
    r = r + n * 2.12194440e-4f;
    float p = 1.0f / 5040;
    p = p * r + 1.0f / 720;
    p = p * r + 1.0f / 120;
    p = p * r + 1.0f / 24;
    p = p * r + 1.0f / 6;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    /* 2^n; n = -127 gives 0.  Unsigned arithmetic: the same bits for every
     * finite x, and defined (no signed overflow) when x is NaN */
    uint32_t eb = ((uint32_t)tb - 0x4B400000u + 127u) << 23;
    float scale;
    memcpy(&scale, &eb, sizeof scale);
    return p * scale;
}

/* The kernels (kernels/softmax.h has their contract): float32, float16 and
 * bfloat16 compute in float, float64 in double.  0, or -1 with the error for
 * another dtype (or no memory for a long half row's buffer). */
int dl_cpu_softmax(dl_dtype dt, const dl_softmax_shape *s, void *y, const void *x);
int dl_cpu_softmax_backward(dl_dtype dt, const dl_softmax_shape *s, void *gx, const void *gy,
                            const void *y);

#endif
