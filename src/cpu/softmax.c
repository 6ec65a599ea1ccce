/* cpu/softmax.c - CPU kernels of softmax and log_softmax (see softmax.h).
 *
 * Two loop shapes:
 *  - inner == 1 (the op runs along the last dim): one contiguous row per
 *    sample; rows run in parallel.
 *  - inner > 1: a work item is one outer index and a block of up to COLS
 *    neighbouring inner positions; it keeps per-column maxima and sums in
 *    small arrays and sweeps D rows of COLS contiguous elements, so every
 *    inner loop is unit-stride.
 * Either way one column is: max, sum of exp(x - max) (rows: in float lanes
 * SUM_BLOCK terms at a time, then in double; columns: in double), then the
 * outputs.  float32 uses dl_cpu_expf under `omp simd`; float64 uses
 * libm's exp.  Each output depends only on its own column, so results do not
 * depend on the thread count.
 *
 * float16 / bfloat16 storage is read and written directly (cpu/half.h's
 * converters, inlined into the vector loops) and computed in float32 with
 * the float32 path's exact operations, so a half result is the float32
 * path's result on the widened input, rounded once:
 *  - a row (inner == 1) is widened into a float buffer of D (on the stack up
 *    to HROW, else one per thread) while its max is taken; the float32 rows'
 *    own sum function (row_sumexp_f32, row_gsum_f32) runs on the buffer, so
 *    the vector sums keep their order; the outputs are narrowed as they are
 *    made;
 *  - a block of columns reads each row of nc halves into a small float
 *    array; every column folds sequentially over d as in the float32 loop,
 *    and softmax recomputes exp(x - max) in its last sweep instead of keeping
 *    unrounded exponentials (the same function on the same value). */
#include "cpu/softmax.h"
#include "core/error.h"
#include "core/parallel.h"
#include "cpu/half.h"

#include <math.h>
#include <stdlib.h>

#define COLS 64

/* the float32 loops in full AVX-512 (x86-64-v4, whose byte and word
 * instructions narrow the half rows in 512-bit vectors: bfloat16 softmax 8%
 * faster on the EPYC measured than plain avx512f), AVX-512F, AVX2 and
 * baseline builds, picked at load time (no FMA contraction in this file, so
 * every variant rounds each product alike; the sums' vector width, and so
 * their order, is the variant's) */
#define SOFTMAX_CLONES DL_TARGET_CLONES("arch=x86-64-v4", "avx512f", "arch=x86-64-v3", "default")
/* exponentials summed in float this many at a time, then in double */
#define SUM_BLOCK 256

/* --- float32 ------------------------------------------------------------------------------ */

/* The row sums, shared by the float32 rows and the half rows (which run
 * them on their widened buffer): one function, so both fold in the same
 * order.  sum_d exp(x[d] - m) in double; store: the exponentials go to y. */
SOFTMAX_CLONES __attribute__((noinline)) static double
row_sumexp_f32(float *y, const float *x, int64_t D, float m, bool store) {
    double sum = 0;
    for (int64_t d0 = 0; d0 < D; d0 += SUM_BLOCK) {
        const int64_t d1 = D - d0 < SUM_BLOCK ? D : d0 + SUM_BLOCK;
        float part = 0;
        if (!store) {
#pragma omp simd reduction(+ : part)
            for (int64_t d = d0; d < d1; d++) part += dl_cpu_expf(x[d] - m);
        } else {
#pragma omp simd reduction(+ : part)
            for (int64_t d = d0; d < d1; d++) {
                float e = dl_cpu_expf(x[d] - m);
                y[d] = e;
                part += e;
            }
        }
        sum += part;
    }
    return sum;
}

/* The backward's row sum: sum_d gy[d] (log) or sum_d gy[d] * y[d], in
 * double, rounded to float. */
SOFTMAX_CLONES __attribute__((noinline)) static float row_gsum_f32(const float *gy, const float *y,
                                                                   int64_t D, bool is_log) {
    double acc = 0;
    if (is_log) {
#pragma omp simd reduction(+ : acc)
        for (int64_t d = 0; d < D; d++) acc += gy[d];
    } else {
#pragma omp simd reduction(+ : acc)
        for (int64_t d = 0; d < D; d++) acc += (double)(gy[d] * y[d]);
    }
    return (float)acc;
}

/* The largest x[d] (NaN never picked; -inf for an empty or all-NaN row).
 * A loop of its own: folded into the half rows' widening loop, the running
 * max compiled to one serial compare-and-select chain in 256-bit vectors,
 * the bfloat16 row's largest cost in `perf`. */
SOFTMAX_CLONES static inline float row_max_f32(const float *x, int64_t D) {
    float m = -INFINITY;
#pragma omp simd reduction(max : m)
    for (int64_t d = 0; d < D; d++) m = x[d] > m ? x[d] : m;
    return m;
}

SOFTMAX_CLONES static void row_fwd_f32(float *y, const float *x, int64_t D, bool is_log) {
    // y, x are (D)
    float m = row_max_f32(x, D);
    double sum = row_sumexp_f32(y, x, D, m, !is_log);
    if (is_log) {
        float lse = m + (float)log(sum);
#pragma omp simd
        for (int64_t d = 0; d < D; d++) y[d] = x[d] - lse;
    } else {
        float inv = (float)(1.0 / sum);
#pragma omp simd
        for (int64_t d = 0; d < D; d++) y[d] *= inv;
    }
}

SOFTMAX_CLONES static void row_backward_f32(float *gx, const float *gy, const float *y, int64_t D,
                                            bool is_log) {
    // gx, gy, y are (D)
    float t = row_gsum_f32(gy, y, D, is_log);
    if (is_log) {
#pragma omp simd
        for (int64_t d = 0; d < D; d++) gx[d] = gy[d] - dl_cpu_expf(y[d]) * t;
    } else {
#pragma omp simd
        for (int64_t d = 0; d < D; d++) gx[d] = y[d] * (gy[d] - t);
    }
}

/* one row of nc columns of the backward: xr = gr - exp(yr) t (log_softmax)
 * or yr (gr - t), with t the columns' sums; xr may be gr */
static inline __attribute__((always_inline)) void
bwd_cols(float *xr, const float *gr, const float *yr, const float *t, int64_t nc, bool is_log) {
    if (is_log) {
#pragma omp simd
        for (int64_t c = 0; c < nc; c++) xr[c] = gr[c] - dl_cpu_expf(yr[c]) * t[c];
    } else {
#pragma omp simd
        for (int64_t c = 0; c < nc; c++) xr[c] = yr[c] * (gr[c] - t[c]);
    }
}

/* Columns [i0, i0+nc) of outer slice x (D, inner). */
SOFTMAX_CLONES static void cols_fwd_f32(float *y, const float *x, int64_t D, int64_t inner,
                                        int64_t nc, bool is_log) {
    // y, x point at (0, i0) of a (D, inner) slice; nc <= COLS
    float m[COLS], t[COLS];
    double s[COLS];
    for (int64_t c = 0; c < nc; c++) m[c] = -INFINITY, s[c] = 0;
    for (int64_t d = 0; d < D; d++) {
        const float *xr = x + d * inner;
#pragma omp simd
        for (int64_t c = 0; c < nc; c++) m[c] = xr[c] > m[c] ? xr[c] : m[c];
    }
    for (int64_t d = 0; d < D; d++) {
        const float *xr = x + d * inner;
        float *yr = y + d * inner;
        if (is_log) {
#pragma omp simd
            for (int64_t c = 0; c < nc; c++) s[c] += dl_cpu_expf(xr[c] - m[c]);
        } else {
#pragma omp simd
            for (int64_t c = 0; c < nc; c++) {
                float e = dl_cpu_expf(xr[c] - m[c]);
                yr[c] = e;
                s[c] += e;
            }
        }
    }
    for (int64_t c = 0; c < nc; c++) t[c] = is_log ? m[c] + (float)log(s[c]) : (float)(1.0 / s[c]);
    for (int64_t d = 0; d < D; d++) {
        const float *xr = x + d * inner;
        float *yr = y + d * inner;
        if (is_log) {
#pragma omp simd
            for (int64_t c = 0; c < nc; c++) yr[c] = xr[c] - t[c];
        } else {
#pragma omp simd
            for (int64_t c = 0; c < nc; c++) yr[c] *= t[c];
        }
    }
}

SOFTMAX_CLONES static void cols_backward_f32(float *gx, const float *gy, const float *y, int64_t D,
                                             int64_t inner, int64_t nc, bool is_log) {
    // gx, gy, y point at (0, i0) of (D, inner) slices; nc <= COLS
    double s[COLS];
    float t[COLS];
    for (int64_t c = 0; c < nc; c++) s[c] = 0;
    for (int64_t d = 0; d < D; d++) {
        const float *gr = gy + d * inner, *yr = y + d * inner;
        if (is_log) {
#pragma omp simd
            for (int64_t c = 0; c < nc; c++) s[c] += gr[c];
        } else {
#pragma omp simd
            for (int64_t c = 0; c < nc; c++) s[c] += (double)(gr[c] * yr[c]);
        }
    }
    for (int64_t c = 0; c < nc; c++) t[c] = (float)s[c];
    for (int64_t d = 0; d < D; d++) {
        bwd_cols(gx + d * inner, gy + d * inner, y + d * inner, t, nc, is_log);
    }
}

/* --- float64 ------------------------------------------------------------------------------ */

static void row_fwd_f64(double *y, const double *x, int64_t D, bool is_log) {
    // y, x are (D)
    double m = -INFINITY;
    for (int64_t d = 0; d < D; d++) m = x[d] > m ? x[d] : m;
    double sum = 0;
    if (is_log) {
        for (int64_t d = 0; d < D; d++) sum += exp(x[d] - m);
        double lse = m + log(sum);
        for (int64_t d = 0; d < D; d++) y[d] = x[d] - lse;
    } else {
        for (int64_t d = 0; d < D; d++) {
            double e = exp(x[d] - m);
            y[d] = e;
            sum += e;
        }
        double inv = 1.0 / sum;
        for (int64_t d = 0; d < D; d++) y[d] *= inv;
    }
}

static void row_backward_f64(double *gx, const double *gy, const double *y, int64_t D,
                             bool is_log) {
    // gx, gy, y are (D)
    double acc = 0;
    if (is_log) {
        for (int64_t d = 0; d < D; d++) acc += gy[d];
        for (int64_t d = 0; d < D; d++) gx[d] = gy[d] - exp(y[d]) * acc;
    } else {
        for (int64_t d = 0; d < D; d++) acc += gy[d] * y[d];
        for (int64_t d = 0; d < D; d++) gx[d] = y[d] * (gy[d] - acc);
    }
}

static void cols_fwd_f64(double *y, const double *x, int64_t D, int64_t inner, int64_t nc,
                         bool is_log) {
    // y, x point at (0, i0) of a (D, inner) slice; nc <= COLS
    double m[COLS], s[COLS];
    for (int64_t c = 0; c < nc; c++) m[c] = -INFINITY, s[c] = 0;
    for (int64_t d = 0; d < D; d++)
        for (int64_t c = 0; c < nc; c++) {
            double v = x[d * inner + c];
            m[c] = v > m[c] ? v : m[c];
        }
    for (int64_t d = 0; d < D; d++)
        for (int64_t c = 0; c < nc; c++) {
            double e = exp(x[d * inner + c] - m[c]);
            if (!is_log) y[d * inner + c] = e;
            s[c] += e;
        }
    for (int64_t c = 0; c < nc; c++) s[c] = is_log ? m[c] + log(s[c]) : 1.0 / s[c];
    for (int64_t d = 0; d < D; d++)
        for (int64_t c = 0; c < nc; c++) {
            if (is_log)
                y[d * inner + c] = x[d * inner + c] - s[c];
            else
                y[d * inner + c] *= s[c];
        }
}

static void cols_backward_f64(double *gx, const double *gy, const double *y, int64_t D,
                              int64_t inner, int64_t nc, bool is_log) {
    // gx, gy, y point at (0, i0) of (D, inner) slices; nc <= COLS
    double s[COLS];
    for (int64_t c = 0; c < nc; c++) s[c] = 0;
    for (int64_t d = 0; d < D; d++)
        for (int64_t c = 0; c < nc; c++)
            s[c] += is_log ? gy[d * inner + c] : gy[d * inner + c] * y[d * inner + c];
    for (int64_t d = 0; d < D; d++)
        for (int64_t c = 0; c < nc; c++) {
            int64_t k = d * inner + c;
            gx[k] = is_log ? gy[k] - exp(y[k]) * s[c] : y[k] * (gy[k] - s[c]);
        }
}

/* --- float16 / bfloat16 storage ------------------------------------------------------------ */

/* rows up to this length are widened into a buffer on the stack */
#define HROW 4096

/* v rounded to nearest even to bfloat16 (bf) or float16 */
static inline __attribute__((always_inline)) uint16_t narrow1(float v, bool bf) {
    return bf ? dl_cpu_float_to_bf16(v) : dl_cpu_float_to_half(v);
}

/* One row (inner == 1) of the forward through buf (D floats): widened,
 * the float32 row's max and sum on buf, the outputs narrowed as they are
 * made. */
SOFTMAX_CLONES static void row_fwd_half(uint16_t *y, const uint16_t *x, int64_t D, bool is_log,
                                        bool bf, float *buf) {
    dl_cpu_widen(buf, x, D, bf);
    float m = row_max_f32(buf, D);
    double sum = row_sumexp_f32(buf, buf, D, m, !is_log);
    float t = is_log ? m + (float)log(sum) : (float)(1.0 / sum);
#pragma omp simd
    for (int64_t d = 0; d < D; d++) y[d] = narrow1(is_log ? buf[d] - t : buf[d] * t, bf);
}

/* One row of the backward through buf (2*D floats: gy, then y). */
SOFTMAX_CLONES static void row_backward_half(uint16_t *gx, const uint16_t *gy, const uint16_t *y,
                                             int64_t D, bool is_log, bool bf, float *buf) {
    float *g = buf, *v = buf + D;
    dl_cpu_widen(g, gy, D, bf);
    dl_cpu_widen(v, y, D, bf);
    float t = row_gsum_f32(g, v, D, is_log);
    if (is_log) {
#pragma omp simd
        for (int64_t d = 0; d < D; d++) gx[d] = narrow1(g[d] - dl_cpu_expf(v[d]) * t, bf);
    } else {
#pragma omp simd
        for (int64_t d = 0; d < D; d++) gx[d] = narrow1(v[d] * (g[d] - t), bf);
    }
}

/* cols_fwd_f32 on half storage: y, x point at (0, i0) of a (D, inner) slice;
 * nc <= COLS */
SOFTMAX_CLONES static void cols_fwd_half(uint16_t *y, const uint16_t *x, int64_t D, int64_t inner,
                                         int64_t nc, bool is_log, bool bf) {
    float m[COLS], t[COLS], v[COLS];
    double s[COLS];
    for (int64_t c = 0; c < nc; c++) m[c] = -INFINITY, s[c] = 0;
    for (int64_t d = 0; d < D; d++) {
        dl_cpu_widen(v, x + d * inner, nc, bf);
#pragma omp simd
        for (int64_t c = 0; c < nc; c++) m[c] = v[c] > m[c] ? v[c] : m[c];
    }
    for (int64_t d = 0; d < D; d++) {
        dl_cpu_widen(v, x + d * inner, nc, bf);
#pragma omp simd
        for (int64_t c = 0; c < nc; c++) s[c] += dl_cpu_expf(v[c] - m[c]);
    }
    for (int64_t c = 0; c < nc; c++) t[c] = is_log ? m[c] + (float)log(s[c]) : (float)(1.0 / s[c]);
    for (int64_t d = 0; d < D; d++) {
        dl_cpu_widen(v, x + d * inner, nc, bf);
        if (is_log) {
#pragma omp simd
            for (int64_t c = 0; c < nc; c++) v[c] = v[c] - t[c];
        } else {
#pragma omp simd
            for (int64_t c = 0; c < nc; c++) v[c] = dl_cpu_expf(v[c] - m[c]) * t[c];
        }
        dl_cpu_narrow(y + d * inner, v, nc, bf);
    }
}

/* cols_backward_f32 on half storage */
SOFTMAX_CLONES static void cols_backward_half(uint16_t *gx, const uint16_t *gy, const uint16_t *y,
                                              int64_t D, int64_t inner, int64_t nc, bool is_log,
                                              bool bf) {
    double s[COLS];
    float t[COLS], g[COLS], v[COLS];
    for (int64_t c = 0; c < nc; c++) s[c] = 0;
    for (int64_t d = 0; d < D; d++) {
        dl_cpu_widen(g, gy + d * inner, nc, bf);
        if (is_log) {
#pragma omp simd
            for (int64_t c = 0; c < nc; c++) s[c] += g[c];
        } else {
            dl_cpu_widen(v, y + d * inner, nc, bf);
#pragma omp simd
            for (int64_t c = 0; c < nc; c++) s[c] += (double)(g[c] * v[c]);
        }
    }
    for (int64_t c = 0; c < nc; c++) t[c] = (float)s[c];
    for (int64_t d = 0; d < D; d++) {
        dl_cpu_widen(g, gy + d * inner, nc, bf);
        dl_cpu_widen(v, y + d * inner, nc, bf);
        bwd_cols(g, g, v, t, nc, is_log);
        dl_cpu_narrow(gx + d * inner, g, nc, bf);
    }
}

/* --- entry points ------------------------------------------------------------------------- */

/* Work item w of the blocked shape: the offset of its first element and its
 * number of columns. */
static inline int64_t block_of(int64_t w, int64_t nblk, int64_t D, int64_t inner, int64_t *nc) {
    int64_t o = w / nblk, i0 = (w % nblk) * COLS;
    *nc = inner - i0 < COLS ? inner - i0 : COLS;
    return o * D * inner + i0;
}

/* The loop of one work item, for kernel kind: a row (inner == 1) or a block
 * of nc columns; o is the output, a the input (the backward's gy) and b the
 * backward's y, each at the item's first element. */
enum { FWD_F32, FWD_F64, BWD_F32, BWD_F64 };

static void run_row(int kind, char *o, const char *a, const char *b, int64_t D, bool lg) {
    switch (kind) {
    case FWD_F32: row_fwd_f32((float *)o, (const float *)a, D, lg); break;
    case FWD_F64: row_fwd_f64((double *)o, (const double *)a, D, lg); break;
    case BWD_F32: row_backward_f32((float *)o, (const float *)a, (const float *)b, D, lg); break;
    default: row_backward_f64((double *)o, (const double *)a, (const double *)b, D, lg); break;
    }
}

static void run_cols(int kind, char *o, const char *a, const char *b, int64_t D, int64_t inner,
                     int64_t nc, bool lg) {
    switch (kind) {
    case FWD_F32: cols_fwd_f32((float *)o, (const float *)a, D, inner, nc, lg); break;
    case FWD_F64: cols_fwd_f64((double *)o, (const double *)a, D, inner, nc, lg); break;
    case BWD_F32:
        cols_backward_f32((float *)o, (const float *)a, (const float *)b, D, inner, nc, lg);
        break;
    default:
        cols_backward_f64((double *)o, (const double *)a, (const double *)b, D, inner, nc, lg);
        break;
    }
}

/* run() on float16 (bf false) or bfloat16 storage: each thread widens rows
 * into its own buffer (the stack's up to HROW elements). */
static int run_half(const char *op, bool bf, const dl_softmax_shape *s, uint16_t *o,
                    const uint16_t *a, const uint16_t *b) {
    const int64_t outer = s->outer, D = s->D, inner = s->inner, work = outer * inner * D;
    if (inner == 1) {
        int failed = 0;
#pragma omp parallel num_threads(dl_get_num_threads()) if (work >= DL_PARALLEL_GRAIN)
        {
            float stack[2 * HROW];
            float *buf = D <= HROW ? stack : malloc(sizeof(float) * 2 * (size_t)D);
            if (!buf) {
#pragma omp atomic write
                failed = 1;
            }
#pragma omp for
            for (int64_t r = 0; r < outer; r++)
                if (buf && b)
                    row_backward_half(o + r * D, a + r * D, b + r * D, D, s->log, bf, buf);
                else if (buf)
                    row_fwd_half(o + r * D, a + r * D, D, s->log, bf, buf);
            if (buf != stack) free(buf);
        }
        return failed ? dl_error("%s: out of memory for a row buffer of %lld elements", op,
                                 (long long)D)
                      : 0;
    }
    const int64_t nblk = (inner + COLS - 1) / COLS;
#pragma omp parallel for num_threads(dl_get_num_threads()) if (work >= DL_PARALLEL_GRAIN)
    for (int64_t w = 0; w < outer * nblk; w++) {
        int64_t nc, off = block_of(w, nblk, D, inner, &nc);
        if (b)
            cols_backward_half(o + off, a + off, b + off, D, inner, nc, s->log, bf);
        else
            cols_fwd_half(o + off, a + off, D, inner, nc, s->log, bf);
    }
    return 0;
}

/* Runs the forward (backward: b is y) over s: rows in parallel when
 * inner == 1, else blocks of up to COLS neighbouring columns. */
static int run(const char *op, dl_dtype dt, const dl_softmax_shape *s, bool backward, void *o,
               const void *a, const void *b) {
    if (dt == DL_DTYPE_F16 || dt == DL_DTYPE_BF16)
        return run_half(op, dt == DL_DTYPE_BF16, s, o, a, backward ? b : NULL);
    if (dt != DL_DTYPE_F32 && dt != DL_DTYPE_F64)
        return dl_error("%s: CPU kernels take float32, float64, float16 or bfloat16, got %s", op,
                        dl_dtype_name(dt));
    const int kind = (backward ? BWD_F32 : FWD_F32) + (dt == DL_DTYPE_F64);
    const size_t es = dl_dtype_size(dt);
    const int64_t outer = s->outer, D = s->D, inner = s->inner, work = outer * inner * D;
    char *ob = o;
    const char *ap = a, *bp = b;
    if (inner == 1) {
#pragma omp parallel for num_threads(dl_get_num_threads()) if (work >= DL_PARALLEL_GRAIN)
        for (int64_t r = 0; r < outer; r++) {
            size_t off = (size_t)(r * D) * es;
            run_row(kind, ob + off, ap + off, bp ? bp + off : NULL, D, s->log);
        }
        return 0;
    }
    const int64_t nblk = (inner + COLS - 1) / COLS;
#pragma omp parallel for num_threads(dl_get_num_threads()) if (work >= DL_PARALLEL_GRAIN)
    for (int64_t w = 0; w < outer * nblk; w++) {
        int64_t nc;
        size_t off = (size_t)block_of(w, nblk, D, inner, &nc) * es;
        run_cols(kind, ob + off, ap + off, bp ? bp + off : NULL, D, inner, nc, s->log);
    }
    return 0;
}

int dl_cpu_softmax(dl_dtype dt, const dl_softmax_shape *s, void *y, const void *x) {
    return run("softmax", dt, s, false, y, x, NULL);
}

int dl_cpu_softmax_backward(dl_dtype dt, const dl_softmax_shape *s, void *gx, const void *gy,
                            const void *y) {
    return run("softmax_backward", dt, s, true, gx, gy, y);
}
