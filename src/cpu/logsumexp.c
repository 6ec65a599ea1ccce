/* cpu/logsumexp.c - the fused CPU backward of logsumexp over one block of
 * contiguous dims (cpu/reduce.h): gx = g * exp(x - lse) in one pass over x
 * and gx.
 *
 * The input is seen as (O, R, I): element (o, r, i) is reduced over r into
 * lse[o*I + i] with incoming gradient g[o*I + i] (I == 1: trailing dims, a
 * row of R elements per result; I > 1: inner dims, runs of I elements
 * against I results).  The flat O*R*I elements are cut into chunks that run
 * in parallel (so one long row, or many short ones, spread over the threads
 * alike); a chunk goes through a small buffer on the stack in blocks: x - lse
 * of its runs, then the exponential of the whole block through the
 * elementwise family's vector kernel (cpu/vecmath.h, SLEEF's exp; libm's
 * exp/expf where that is unavailable, as the elementwise exp), then the
 * product with g.  Each step rounds as the op-by-op formula (sub, exp, mul)
 * does, so the result is that formula's to the bit, NaN and inf included (an
 * all -inf row gives NaN, a +inf element NaN, as PyTorch 1.13), and does not
 * depend on the thread count. */
#include "core/error.h"
#include "core/parallel.h"
#include "cpu/reduce.h"
#include "cpu/vecmath.h"

#include <math.h>

/* elements per buffered block; a parallel chunk is CHUNK_BLOCKS blocks */
#define BLOCK 512
#define CHUNK_BLOCKS 8

/* The runs of block [b, b+n) of the flat elements that share their
 * results' layout: for each run [j, end) (relative to b), lse and g at the
 * run's first result are l0 and g0, and STEP(T, s) applies them (s: 0 for
 * one result per run, I == 1; 1 for one per element, I > 1). */
#define FOR_RUNS(STEP)                                                                             \
    for (int64_t j = 0; j < n;) {                                                                  \
        int64_t e = b + j, o = e / RI, i = e % I, end;                                             \
        end = I == 1 ? (o + 1) * R - b : j + (I - i);                                              \
        end = end < n ? end : n;                                                                   \
        int64_t q = o * I + i;                                                                     \
        if (I == 1)                                                                                \
            STEP(0);                                                                               \
        else                                                                                       \
            STEP(1);                                                                               \
        j = end;                                                                                   \
    }

/* One chunk [k0, k1) of the flat elements for type T: the block loop.
 * vec is the vector exp kernel, sexp its scalar stand-in. */
#define LSE_BACKWARD_CHUNK(name, T, vec, sexp)                                                     \
    static void name(T *gx, const T *x, const T *g, const T *lse, int64_t R, int64_t I,            \
                     int64_t k0, int64_t k1) {                                                     \
        T t[BLOCK];                                                                                \
        const int64_t RI = R * I;                                                                  \
        for (int64_t b = k0; b < k1; b += BLOCK) {                                                 \
            int64_t n = k1 - b < BLOCK ? k1 - b : BLOCK;                                           \
            const T *xs = x + b;                                                                   \
            T *gs = gx + b;                                                                        \
            /* t = x - lse of each element's result, a run at a time */                            \
            FOR_RUNS(SUB_STEP)                                                                     \
            char *data[2] = {(char *)t, (char *)t};                                                \
            const int64_t strides[2] = {sizeof(T), sizeof(T)};                                     \
            if (!vec(DL_UNARY_EXP, data, strides, n))                                              \
                for (int64_t i = 0; i < n; i++) t[i] = sexp(t[i]);                                 \
            FOR_RUNS(MUL_STEP)                                                                     \
        }                                                                                          \
    }
#define SUB_STEP(s)                                                                                \
    DL_PRAGMA(omp simd) for (int64_t k = j; k < end; k++) t[k] = xs[k] - lse[q + s * (k - j)]
#define MUL_STEP(s)                                                                                \
    DL_PRAGMA(omp simd) for (int64_t k = j; k < end; k++) gs[k] = g[q + s * (k - j)] * t[k]

LSE_BACKWARD_CHUNK(chunk_f32, float, dl_cpu_vec_unary_f32, expf)
LSE_BACKWARD_CHUNK(chunk_f64, double, dl_cpu_vec_unary_f64, exp)

int dl_cpu_logsumexp_backward(dl_dtype dt, int64_t O, int64_t R, int64_t I, void *gx, const void *x,
                              const void *g, const void *lse) {
    if (dt != DL_DTYPE_F32 && dt != DL_DTYPE_F64)
        return dl_error("logsumexp_backward: CPU kernel takes float32 or float64, got %s",
                        dl_dtype_name(dt));
    const int64_t N = O * R * I, step = (int64_t)BLOCK * CHUNK_BLOCKS;
    if (N == 0) return 0;
    const int64_t nchunks = (N + step - 1) / step;
    const bool f64 = dt == DL_DTYPE_F64;
#pragma omp parallel for num_threads(dl_get_num_threads()) if (N >= DL_PARALLEL_GRAIN)
    for (int64_t c = 0; c < nchunks; c++) {
        int64_t k0 = c * step, k1 = k0 + step < N ? k0 + step : N;
        if (f64)
            chunk_f64(gx, x, g, lse, R, I, k0, k1);
        else
            chunk_f32(gx, x, g, lse, R, I, k0, k1);
    }
    return 0;
}
