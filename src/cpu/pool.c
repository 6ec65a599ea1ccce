/* pool.c - CPU 2-D pooling kernels (see pool.h).
 *
 * The loop kernels are written once over an element type chosen by a
 * constant `f32` flag: each row (or plane) body is always_inline and called
 * from the parallel loops of two small wrappers (float, double), so the flag
 * folds away and each inner loop is specialised.  Values pass through
 * double (exact for float); sums and quotients are computed in the element
 * type, in PyTorch's order, so float results are PyTorch's.
 * Forward loops run in parallel over output rows, backward loops over planes
 * (a plane's gradient is written by one thread only).  Planar float32 max
 * pooling runs on an AVX-512 kernel where the CPU has it (16 outputs of a
 * row per vector); channels-last buffers have their own loops, vectorised
 * across channels (see "channels-last loops").
 *
 * Window rules, as PyTorch's CPU kernels:
 *  - max: rows h0 + k*dh (h0 = oh*sh - ph) inside [0, H); the maximum starts
 *    at -inf with the first valid position as its index; a value wins if it
 *    is greater or NaN (so the last NaN wins).
 *  - avg: rows [oh*sh - ph, min(that + kh, H + ph)) give the padded window
 *    size; clipped to [0, H) they give the summed rows and the unpadded size.
 *  - adaptive: rows [floor(i*H/OH), ceil((i+1)*H/OH)).
 * float32 average pooling runs on oneDNN when its divisor agrees (see
 * avg_onednn_ok), in either layout; the loops are the reference the tests
 * hold it to. */
#include "pool.h"
#include "vec8.h"
#include "core/error.h"
#include "core/parallel.h"
#include "dnnl_util.h"

#include <immintrin.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#define INLINE static inline __attribute__((always_inline))

INLINE double ld(bool f32, const void *p, int64_t i) {
    return f32 ? (double)((const float *)p)[i] : ((const double *)p)[i];
}
INLINE void st(bool f32, void *p, int64_t i, double v) {
    if (f32)
        ((float *)p)[i] = (float)v;
    else
        ((double *)p)[i] = v;
}
/* The sum of x[ih][iw] over rows [h0, h1) and columns [w0, w1), in the
 * element type's arithmetic and PyTorch's order (row by row).  x is (H, W). */
INLINE double window_sum(bool f32, const void *x, int64_t W, int64_t h0, int64_t h1, int64_t w0,
                         int64_t w1) {
    if (f32) {
        const float *p = x;
        float sum = 0;
        for (int64_t ih = h0; ih < h1; ih++)
            for (int64_t iw = w0; iw < w1; iw++) sum += p[ih * W + iw];
        return sum;
    }
    const double *p = x;
    double sum = 0;
    for (int64_t ih = h0; ih < h1; ih++)
        for (int64_t iw = w0; iw < w1; iw++) sum += p[ih * W + iw];
    return sum;
}

/* a / b in the element type: for float, the double quotient of two floats
 * rounded to float is exactly the float division. */
INLINE double quot(bool f32, double a, double b) {
    return f32 ? (double)(float)(a / b) : a / b;
}
INLINE void add(bool f32, void *p, int64_t i, double v) {
    if (f32)
        ((float *)p)[i] += (float)v;
    else
        ((double *)p)[i] += v;
}

static int64_t min64(int64_t a, int64_t b) {
    return a < b ? a : b;
}
static int64_t max64(int64_t a, int64_t b) {
    return a > b ? a : b;
}

/* Adaptive window bounds: [floor(i*in/out), ceil((i+1)*in/out)). */
static int64_t adaptive_start(int64_t i, int64_t out, int64_t in) {
    return (i / out) * in + ((i % out) * in) / out;
}
static int64_t adaptive_end(int64_t i, int64_t out, int64_t in) {
    return 1 + ((i + 1) * in - 1) / out;
}

/* The window of output (oh, ow): summed rows [*h0, *h1), columns [*w0, *w1),
 * and its divisor. */
static double avg_window(const dl_pool2d_shape *s, int64_t oh, int64_t ow, int64_t *h0, int64_t *h1,
                         int64_t *w0, int64_t *w1) {
    int64_t hs = oh * s->sh - s->ph, ws = ow * s->sw - s->pw;
    int64_t he = min64(hs + s->kh, s->H + s->ph), we = min64(ws + s->kw, s->W + s->pw);
    int64_t padded = (he - hs) * (we - ws);
    *h0 = max64(hs, 0);
    *w0 = max64(ws, 0);
    *h1 = min64(he, s->H);
    *w1 = min64(we, s->W);
    if (s->divisor_override) return (double)s->divisor_override;
    return (double)(s->count_include_pad ? padded : (*h1 - *h0) * (*w1 - *w0));
}

/* --- max pooling: planar ------------------------------------------------------------ */

/* The first valid row of output row oh's window (stepping dh from
 * oh*sh - ph until inside the input) and the row it stops before. */
static void max_rows(const dl_pool2d_shape *s, int64_t oh, int64_t *hs, int64_t *he) {
    int64_t h0 = oh * s->sh - s->ph;
    *he = min64(h0 + (s->kh - 1) * s->dh + 1, s->H);
    while (h0 < 0) h0 += s->dh;
    *hs = h0;
}
static void max_cols(const dl_pool2d_shape *s, int64_t ow, int64_t *ws, int64_t *we) {
    int64_t w0 = ow * s->sw - s->pw;
    *we = min64(w0 + (s->kw - 1) * s->dw + 1, s->W);
    while (w0 < 0) w0 += s->dw;
    *ws = w0;
}

/* The maximum of one window of plane xp (H,W): rows [hs, he) step dh,
 * columns [ws, we) step dw, into y[o] and ind[o]. */
INLINE void max_cell(bool f32, const void *xp, int64_t W, int64_t hs, int64_t he, int64_t dh,
                     int64_t ws, int64_t we, int64_t dw, void *y, int64_t *ind, int64_t o) {
    double best = -INFINITY;
    int64_t bi = hs * W + ws;
    for (int64_t ih = hs; ih < he; ih += dh)
        for (int64_t iw = ws; iw < we; iw += dw) {
            double v = ld(f32, xp, ih * W + iw);
            if (v > best || isnan(v)) {
                best = v;
                bi = ih * W + iw;
            }
        }
    st(f32, y, o, best);
    ind[o] = bi;
}

/* Output row r = (plane, oh), one window at a time: float64, and float32
 * planes too large for 32-bit indices. */
INLINE void max_pool_row(bool f32, const dl_pool2d_shape *s, void *y, int64_t *ind, const void *x,
                         int64_t r) {
    int64_t p = r / s->OH, oh = r % s->OH, hs, he;
    const char *xp = (const char *)x + p * s->H * s->W * (f32 ? 4 : 8);
    max_rows(s, oh, &hs, &he);
    for (int64_t ow = 0; ow < s->OW; ow++) {
        int64_t ws, we;
        max_cols(s, ow, &ws, &we);
        max_cell(f32, xp, s->W, hs, he, s->dh, ws, we, s->dw, y, ind, r * s->OW + ow);
    }
}

/* The output columns [*a, *b) whose windows lie wholly inside [0, W): no
 * column of theirs needs a bounds test. */
static void inner_cols(const dl_pool2d_shape *s, int64_t *a, int64_t *b) {
    int64_t last = s->W - 1 + s->pw - (s->kw - 1) * s->dw; /* ow*sw may reach this */
    *a = min64((s->pw + s->sw - 1) / s->sw, s->OW);
    *b = max64(last < 0 ? 0 : min64(last / s->sw + 1, s->OW), *a);
}

/* --- max pooling: float32 with AVX-512 ------------------------------------------------
 * Written with intrinsics: GCC's generic vectors lower the mask blends to
 * scalar code.  CPUs without AVX-512F take max_pool_row. */

#define POOL_AVX512 __attribute__((target("avx512f")))

/* row[j*sw] for j < n (n <= 16), reading nothing past row[(n-1)*sw]: one
 * load for stride 1, two loads and a two-source permute for stride 2, a
 * gather else (lane holds j*sw).  Lanes from n on are zero. */
POOL_AVX512 INLINE __m512 load_strided(const float *row, int64_t sw, __m512i lane, int n) {
    /* stride 2 from a = row[0..15] and b = row[15..30]: lane j < 8 takes a[2j],
     * lane j >= 8 row[2j] = b[2j-15], which is source element 16 + 2j-15 */
    const __m512i pick =
        _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 17, 19, 21, 23, 25, 27, 29, 31);
    if (n == 16) {
        if (sw == 1) return _mm512_loadu_ps(row);
        if (sw == 2)
            return _mm512_permutex2var_ps(_mm512_loadu_ps(row), pick, _mm512_loadu_ps(row + 15));
        return _mm512_i32gather_ps(lane, row, 4);
    }
    __mmask16 k = (__mmask16)((1u << n) - 1);
    if (sw == 1) return _mm512_maskz_loadu_ps(k, row);
    if (sw == 2) { /* elements 0..2n-2: the first 2n-1 of a, the first 2n-16 of b */
        int na = 2 * n - 1 < 16 ? 2 * n - 1 : 16, nb = 2 * n - 16 > 0 ? 2 * n - 16 : 0;
        return _mm512_permutex2var_ps(_mm512_maskz_loadu_ps((__mmask16)((1u << na) - 1), row), pick,
                                      _mm512_maskz_loadu_ps((__mmask16)((1u << nb) - 1), row + 15));
    }
    return _mm512_mask_i32gather_ps(_mm512_setzero_ps(), k, lane, row, 4);
}

/* n <= 16 adjacent outputs of one row into y[0..n) and ind[0..n), all
 * windows inside the columns: lane j's window starts at column c0 + j*sw.  The
 * window is walked once for all lanes, each step a vector compare-and-blend
 * with max_cell's test (greater, or NaN) in window order, so values and
 * indices are max_cell's. */
POOL_AVX512 INLINE void max_vec(const float *xp, int64_t W, int64_t hs, int64_t he, int64_t dh,
                                int64_t kw, int64_t dw, int64_t c0, int64_t sw, float *y,
                                int64_t *ind, int n) {
    const __m512i lane =
        _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                           _mm512_set1_epi32((int32_t)sw));
    __m512 best = _mm512_set1_ps(-INFINITY);
    __m512i bi = _mm512_add_epi32(lane, _mm512_set1_epi32((int32_t)(hs * W + c0)));
    for (int64_t ih = hs; ih < he; ih += dh)
        for (int64_t kx = 0; kx < kw; kx++) {
            int64_t col = c0 + kx * dw;
            __m512 v = load_strided(xp + ih * W + col, sw, lane, n);
            __mmask16 m =
                _mm512_cmp_ps_mask(v, best, _CMP_GT_OQ) | _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
            best = _mm512_mask_mov_ps(best, m, v);
            bi = _mm512_mask_mov_epi32(
                bi, m, _mm512_add_epi32(lane, _mm512_set1_epi32((int32_t)(ih * W + col))));
        }
    __m512i lo = _mm512_cvtepi32_epi64(_mm512_castsi512_si256(bi)),
            hi = _mm512_cvtepi32_epi64(_mm512_extracti64x4_epi64(bi, 1));
    if (n == 16) {
        _mm512_storeu_ps(y, best);
        _mm512_storeu_si512(ind, lo);
        _mm512_storeu_si512(ind + 8, hi);
    } else {
        __mmask16 k = (__mmask16)((1u << n) - 1);
        _mm512_mask_storeu_ps(y, k, best);
        _mm512_mask_storeu_epi64(ind, (__mmask8)(k & 0xff), lo);
        _mm512_mask_storeu_epi64(ind + 8, (__mmask8)(k >> 8), hi);
    }
}

/* Output row r = (plane, oh) in float32, planes of fewer than 2^31
 * elements: the inner columns 16 at a time by max_vec (the last group
 * shifted left to end at the last inner column, recomputing a few outputs
 * to the same values; fewer than 16 inner columns in one masked vector),
 * border columns by max_cell. */
POOL_AVX512 static void max_row_f32(const dl_pool2d_shape *s, float *y, int64_t *ind,
                                    const float *x, int64_t r) {
    int64_t p = r / s->OH, oh = r % s->OH, W = s->W, OW = s->OW, hs, he, a, b;
    const float *xp = x + p * s->H * W;
    float *yr = y + r * OW;
    int64_t *ir = ind + r * OW;
    max_rows(s, oh, &hs, &he);
    inner_cols(s, &a, &b);
    for (int64_t ow = 0; ow < OW; ow++) {
        if (ow == a) ow = b;
        if (ow >= OW) break;
        int64_t ws, we;
        max_cols(s, ow, &ws, &we);
        max_cell(true, xp, W, hs, he, s->dh, ws, we, s->dw, yr, ir, ow);
    }
    for (int64_t o0 = a; o0 < b; o0 += 16) {
        int n = b - a < 16 ? (int)(b - a) : 16;
        int64_t o = min64(o0, b - n), c0 = o * s->sw - s->pw;
        /* constant strides, so load_strided folds */
        if (s->sw == 1)
            max_vec(xp, W, hs, he, s->dh, s->kw, s->dw, c0, 1, yr + o, ir + o, n);
        else if (s->sw == 2)
            max_vec(xp, W, hs, he, s->dh, s->kw, s->dw, c0, 2, yr + o, ir + o, n);
        else
            max_vec(xp, W, hs, he, s->dh, s->kw, s->dw, c0, s->sw, yr + o, ir + o, n);
    }
}

/* Work (window reads) below which pooling loops stay on one thread. */
#define POOL_WORK(s) ((s)->P * (s)->OH * (s)->OW * (s)->kh * (s)->kw)

static void max_pool_f32(const dl_pool2d_shape *s, void *y, int64_t *ind, const void *x) {
    bool vec = s->H * s->W <= INT32_MAX && __builtin_cpu_supports("avx512f");
#pragma omp parallel for num_threads(dl_get_num_threads()) if (POOL_WORK(s) >= DL_PARALLEL_GRAIN)
    for (int64_t r = 0; r < s->P * s->OH; r++) {
        if (vec)
            max_row_f32(s, y, ind, x, r);
        else
            max_pool_row(true, s, y, ind, x, r);
    }
}
static void max_pool_f64(const dl_pool2d_shape *s, void *y, int64_t *ind, const void *x) {
#pragma omp parallel for num_threads(dl_get_num_threads()) if (POOL_WORK(s) >= DL_PARALLEL_GRAIN)
    for (int64_t r = 0; r < s->P * s->OH; r++) max_pool_row(false, s, y, ind, x, r);
}

/* Plane p of the scatter, zeroed here so that the thread that owns the plane
 * writes it once from memory; returns the number of out-of-range indices met
 * (nothing is written for them). */
INLINE int64_t scatter_plane(bool f32, int64_t HW, int64_t OHW, void *gx, const void *gy,
                             const int64_t *ind, int64_t p) {
    int64_t bad = 0;
    size_t sz = f32 ? 4 : 8;
    char *g = (char *)gx + p * HW * (int64_t)sz;
    memset(g, 0, sz * (size_t)HW);
    for (int64_t j = 0; j < OHW; j++) {
        int64_t i = ind[p * OHW + j];
        if ((uint64_t)i >= (uint64_t)HW) {
            bad++;
            continue;
        }
        add(f32, g, i, ld(f32, gy, p * OHW + j));
    }
    return bad;
}

/* The loops below call their INLINE bodies with a constant f32 on each side
 * of the branch, so that each dtype gets its own compiled body. */
static int64_t scatter(bool f32, int64_t P, int64_t HW, int64_t OHW, void *gx, const void *gy,
                       const int64_t *ind) {
    int64_t bad = 0;
#pragma omp parallel for num_threads(dl_get_num_threads()) if (P * (HW + OHW) >= DL_PARALLEL_GRAIN) reduction(+ : bad)
    for (int64_t p = 0; p < P; p++)
        bad += f32 ? scatter_plane(true, HW, OHW, gx, gy, ind, p)
                   : scatter_plane(false, HW, OHW, gx, gy, ind, p);
    return bad;
}

/* --- channels-last loops ------------------------------------------------------------------
 * A unit of work is an output row (n, oh) (forwards) or an image n
 * (backwards: a unit owns the gradient it writes) times a block of at most
 * CB channels.  The innermost loops run across the block's channels, which
 * lie side by side in memory, so they vectorise with no shuffles.  Each
 * channel meets its window's elements in the planar loops' order and with
 * their arithmetic, so results are bit-equal to the planar loops'. */
#define CB 256

static int64_t cl_blocks(int64_t C) {
    return (C + CB - 1) / CB;
}

/* Zeroes channels [0, nc) of the HW pixels of C values from g: in one
 * sweep when the block is the whole pixel. */
static void zero_block_cl(char *g, int64_t HW, int64_t C, int64_t nc, int64_t sz) {
    if (nc == C) {
        memset(g, 0, (size_t)(HW * C * sz));
        return;
    }
    for (int64_t i = 0; i < HW; i++) memset(g + i * C * sz, 0, (size_t)(nc * sz));
}

/* Channels [0, nc) of a window maximum: x is an image (H,W,C) from its
 * first channel of the block; rows [hs, he) step dh, columns [ws, we) step
 * dw; y[c] and ind[c] as max_cell's. */
INLINE void max_window_cl(bool f32, const void *x, int64_t W, int64_t C, int64_t nc, int64_t hs,
                          int64_t he, int64_t dh, int64_t ws, int64_t we, int64_t dw, void *y,
                          int64_t *ind) {
    for (int64_t c = 0; c < nc; c++) {
        st(f32, y, c, -INFINITY);
        ind[c] = hs * W + ws;
    }
    for (int64_t ih = hs; ih < he; ih += dh)
        for (int64_t iw = ws; iw < we; iw += dw) {
            int64_t pos = ih * W + iw;
            const char *v = (const char *)x + pos * C * (f32 ? 4 : 8);
#pragma omp simd
            for (int64_t c = 0; c < nc; c++) {
                double a = ld(f32, v, c), b = ld(f32, y, c);
                bool m = (a > b) | (a != a);
                st(f32, y, c, m ? a : b);
                ind[c] = m ? pos : ind[c];
            }
        }
}

/* Unit u = (n, oh, channel block) of max pooling, or of adaptive max
 * pooling when adaptive. */
DL_CPU_CLONES
static void max_unit_cl(bool f32, bool adaptive, const dl_pool2d_shape *s, void *y, int64_t *ind,
                        const void *x, int64_t u) {
    int64_t nb = cl_blocks(s->C), row = u / nb, n = row / s->OH, oh = row % s->OH;
    int64_t c0 = (u % nb) * CB, nc = min64(CB, s->C - c0), sz = f32 ? 4 : 8;
    int64_t hs, he, dh = adaptive ? 1 : s->dh, dw = adaptive ? 1 : s->dw;
    if (adaptive) {
        hs = adaptive_start(oh, s->OH, s->H);
        he = adaptive_end(oh, s->OH, s->H);
    } else {
        max_rows(s, oh, &hs, &he);
    }
    const char *xn = (const char *)x + (n * s->H * s->W * s->C + c0) * sz;
    for (int64_t ow = 0; ow < s->OW; ow++) {
        int64_t ws, we, o = (row * s->OW + ow) * s->C + c0;
        if (adaptive) {
            ws = adaptive_start(ow, s->OW, s->W);
            we = adaptive_end(ow, s->OW, s->W);
        } else {
            max_cols(s, ow, &ws, &we);
        }
        if (f32)
            max_window_cl(true, xn, s->W, s->C, nc, hs, he, dh, ws, we, dw, (char *)y + o * sz,
                          ind + o);
        else
            max_window_cl(false, xn, s->W, s->C, nc, hs, he, dh, ws, we, dw, (char *)y + o * sz,
                          ind + o);
    }
}

/* a when it is larger or NaN, else b. */
static inline float max_nan(float a, float b) {
    return (a > b) | (a != a) ? a : b;
}

/* m = the larger of m and a, lane by lane, NaN winning as max_nan */
#define MAX8(m, a)                                                                                 \
    do {                                                                                           \
        v8i take_ = ((a) > (m)) | ((a) != (a));                                                    \
        (m) = (v8f)(((v8i)(a)&take_) | ((v8i)(m) & ~take_));                                       \
    } while (0)

/* Unit u = (n, oh, channel block) of float32 max pooling without indices
 * (inference): the window's maximum in float, NaN winning as above; the
 * index bookkeeping and the double compare of max_window_cl cost it 2x.
 * 32 channels at a time keep four maxima in registers: one alone waited on
 * its own compare and blend at every window element (64 channels at
 * 112x112, 3x3 stride 2, 2 threads: 115 against 56 us). */
DL_CPU_CLONES
static void max_unit_cl_values(const dl_pool2d_shape *s, float *y, const float *x, int64_t u) {
    int64_t nb = cl_blocks(s->C), row = u / nb, n = row / s->OH, oh = row % s->OH;
    int64_t c0 = (u % nb) * CB, nc = min64(CB, s->C - c0), hs, he;
    max_rows(s, oh, &hs, &he);
    const float *xn = x + n * s->H * s->W * s->C + c0;
    const v8f lo = {-INFINITY, -INFINITY, -INFINITY, -INFINITY,
                    -INFINITY, -INFINITY, -INFINITY, -INFINITY};
    for (int64_t ow = 0; ow < s->OW; ow++) {
        int64_t ws, we;
        max_cols(s, ow, &ws, &we);
        float *o = y + (row * s->OW + ow) * s->C + c0;
        int64_t c = 0;
        for (; c + 32 <= nc; c += 32) {
            v8f m0 = lo, m1 = lo, m2 = lo, m3 = lo, a0, a1, a2, a3;
            for (int64_t ih = hs; ih < he; ih += s->dh)
                for (int64_t iw = ws; iw < we; iw += s->dw) {
                    const float *p = xn + (ih * s->W + iw) * s->C + c;
                    memcpy(&a0, p, sizeof a0);
                    memcpy(&a1, p + 8, sizeof a1);
                    memcpy(&a2, p + 16, sizeof a2);
                    memcpy(&a3, p + 24, sizeof a3);
                    MAX8(m0, a0);
                    MAX8(m1, a1);
                    MAX8(m2, a2);
                    MAX8(m3, a3);
                }
            memcpy(o + c, &m0, sizeof m0);
            memcpy(o + c + 8, &m1, sizeof m1);
            memcpy(o + c + 16, &m2, sizeof m2);
            memcpy(o + c + 24, &m3, sizeof m3);
        }
        for (; c + 8 <= nc; c += 8) {
            v8f m = lo, a;
            for (int64_t ih = hs; ih < he; ih += s->dh)
                for (int64_t iw = ws; iw < we; iw += s->dw) {
                    memcpy(&a, xn + (ih * s->W + iw) * s->C + c, sizeof a);
                    MAX8(m, a);
                }
            memcpy(o + c, &m, sizeof m);
        }
        for (; c < nc; c++) {
            float m = -INFINITY;
            for (int64_t ih = hs; ih < he; ih += s->dh)
                for (int64_t iw = ws; iw < we; iw += s->dw)
                    m = max_nan(xn[(ih * s->W + iw) * s->C + c], m);
            o[c] = m;
        }
    }
}
#undef MAX8

/* Each input element is read about once by adaptive pooling. */
#define ADAPTIVE_WORK(s) ((s)->P * ((s)->H * (s)->W + (s)->OH * (s)->OW))

static void max_cl(bool f32, bool adaptive, const dl_pool2d_shape *s, void *y, int64_t *ind,
                   const void *x) {
    int64_t units = s->P / s->C * s->OH * cl_blocks(s->C);
    int64_t work = adaptive ? ADAPTIVE_WORK(s) : POOL_WORK(s);
    if (!ind && f32 && !adaptive) {
#pragma omp parallel for num_threads(dl_get_num_threads()) if (work >= DL_PARALLEL_GRAIN)
        for (int64_t u = 0; u < units; u++) max_unit_cl_values(s, y, x, u);
        return;
    }
#pragma omp parallel for num_threads(dl_get_num_threads()) if (work >= DL_PARALLEL_GRAIN)
    for (int64_t u = 0; u < units; u++) max_unit_cl(f32, adaptive, s, y, ind, x, u);
}

/* Unit u = (n, channel block) of the channels-last scatter: zeroes its
 * block of gx, then adds in order of j.  Returns the out-of-range count.
 * (AVX-512 gather/scatter across the channels measured slower than this.) */
DL_CPU_CLONES
static int64_t scatter_unit_cl(bool f32, int64_t HW, int64_t OHW, int64_t C, void *gx,
                               const void *gy, const int64_t *ind, int64_t u) {
    int64_t nb = cl_blocks(C), n = u / nb, c0 = (u % nb) * CB, nc = min64(CB, C - c0);
    int64_t sz = f32 ? 4 : 8, bad = 0;
    char *g = (char *)gx + (n * HW * C + c0) * sz;
    const char *gyn = (const char *)gy + (n * OHW * C + c0) * sz;
    const int64_t *in = ind + n * OHW * C + c0;
    zero_block_cl(g, HW, C, nc, sz);
    for (int64_t j = 0; j < OHW; j++)
        for (int64_t c = 0; c < nc; c++) {
            int64_t i = in[j * C + c];
            if ((uint64_t)i >= (uint64_t)HW) {
                bad++;
                continue;
            }
            add(f32, g, i * C + c, ld(f32, gyn, j * C + c));
        }
    return bad;
}

static int64_t scatter_cl(bool f32, int64_t P, int64_t HW, int64_t OHW, int64_t C, void *gx,
                          const void *gy, const int64_t *ind) {
    int64_t bad = 0, units = P / C * cl_blocks(C);
#pragma omp parallel for num_threads(dl_get_num_threads()) if (P * (HW + OHW) >= DL_PARALLEL_GRAIN) reduction(+ : bad)
    for (int64_t u = 0; u < units; u++) bad += scatter_unit_cl(f32, HW, OHW, C, gx, gy, ind, u);
    return bad;
}

/* Channels [0, nc) of a window mean: y[c] = sum / d1 / d2, the sum of x
 * (an image (H,W,C) from the block's first channel) over rows [h0, h1) and
 * columns [w0, w1), row by row in the element type, as window_sum; an
 * empty window gives 0. */
INLINE void mean_window_cl(bool f32, const void *x, int64_t W, int64_t C, int64_t nc, int64_t h0,
                           int64_t h1, int64_t w0, int64_t w1, double d1, double d2, void *y) {
    for (int64_t c = 0; c < nc; c++) st(f32, y, c, 0);
    if (h0 >= h1 || w0 >= w1) return;
    for (int64_t ih = h0; ih < h1; ih++)
        for (int64_t iw = w0; iw < w1; iw++) {
            const char *v = (const char *)x + (ih * W + iw) * C * (f32 ? 4 : 8);
#pragma omp simd
            for (int64_t c = 0; c < nc; c++) add(f32, y, c, ld(f32, v, c));
        }
    for (int64_t c = 0; c < nc; c++) st(f32, y, c, quot(f32, quot(f32, ld(f32, y, c), d1), d2));
}

/* gx[ih][iw][c] += gy[c] / d1 / d2 over the window, channels [0, nc); q is
 * scratch for nc quotients. */
INLINE void spread_window_cl(bool f32, void *gx, int64_t W, int64_t C, int64_t nc, int64_t h0,
                             int64_t h1, int64_t w0, int64_t w1, double d1, double d2,
                             const void *gy, double *q) {
    for (int64_t c = 0; c < nc; c++) q[c] = quot(f32, quot(f32, ld(f32, gy, c), d1), d2);
    for (int64_t ih = h0; ih < h1; ih++)
        for (int64_t iw = w0; iw < w1; iw++) {
            char *g = (char *)gx + (ih * W + iw) * C * (f32 ? 4 : 8);
#pragma omp simd
            for (int64_t c = 0; c < nc; c++) add(f32, g, c, q[c]);
        }
}

/* Window (oh, ow) of average pooling (adaptive or not): its summed rows and
 * columns and the two divisors (adaptive: the window's height and width, as
 * PyTorch divides twice; else avg_window's divisor, then 1, which changes
 * nothing). */
static void mean_window(bool adaptive, const dl_pool2d_shape *s, int64_t oh, int64_t ow,
                        int64_t *h0, int64_t *h1, int64_t *w0, int64_t *w1, double *d1,
                        double *d2) {
    if (!adaptive) {
        *d1 = avg_window(s, oh, ow, h0, h1, w0, w1);
        *d2 = 1;
        return;
    }
    *h0 = adaptive_start(oh, s->OH, s->H);
    *h1 = adaptive_end(oh, s->OH, s->H);
    *w0 = adaptive_start(ow, s->OW, s->W);
    *w1 = adaptive_end(ow, s->OW, s->W);
    *d1 = (double)(*h1 - *h0);
    *d2 = (double)(*w1 - *w0);
}

/* Unit u = (n, oh, channel block) of average pooling's forward. */
DL_CPU_CLONES
static void mean_unit_cl(bool f32, bool adaptive, const dl_pool2d_shape *s, void *y, const void *x,
                         int64_t u) {
    int64_t nb = cl_blocks(s->C), row = u / nb, n = row / s->OH, oh = row % s->OH;
    int64_t c0 = (u % nb) * CB, nc = min64(CB, s->C - c0), sz = f32 ? 4 : 8;
    const char *xn = (const char *)x + (n * s->H * s->W * s->C + c0) * sz;
    for (int64_t ow = 0; ow < s->OW; ow++) {
        int64_t h0, h1, w0, w1;
        double d1, d2;
        mean_window(adaptive, s, oh, ow, &h0, &h1, &w0, &w1, &d1, &d2);
        char *yo = (char *)y + ((row * s->OW + ow) * s->C + c0) * sz;
        if (f32)
            mean_window_cl(true, xn, s->W, s->C, nc, h0, h1, w0, w1, d1, d2, yo);
        else
            mean_window_cl(false, xn, s->W, s->C, nc, h0, h1, w0, w1, d1, d2, yo);
    }
}

/* Unit u = (n, channel block) of average pooling's backward: zeroes its
 * block of gx, then spreads the outputs' gradients in output order. */
DL_CPU_CLONES
static void spread_unit_cl(bool f32, bool adaptive, const dl_pool2d_shape *s, void *gx,
                           const void *gy, int64_t u) {
    int64_t nb = cl_blocks(s->C), n = u / nb, c0 = (u % nb) * CB, nc = min64(CB, s->C - c0);
    int64_t sz = f32 ? 4 : 8, HW = s->H * s->W;
    double q[CB];
    char *g = (char *)gx + (n * HW * s->C + c0) * sz;
    zero_block_cl(g, HW, s->C, nc, sz);
    for (int64_t oh = 0; oh < s->OH; oh++)
        for (int64_t ow = 0; ow < s->OW; ow++) {
            int64_t h0, h1, w0, w1;
            double d1, d2;
            mean_window(adaptive, s, oh, ow, &h0, &h1, &w0, &w1, &d1, &d2);
            const char *go = (const char *)gy + (((n * s->OH + oh) * s->OW + ow) * s->C + c0) * sz;
            if (f32)
                spread_window_cl(true, g, s->W, s->C, nc, h0, h1, w0, w1, d1, d2, go, q);
            else
                spread_window_cl(false, g, s->W, s->C, nc, h0, h1, w0, w1, d1, d2, go, q);
        }
}

static void mean_cl(bool f32, bool adaptive, const dl_pool2d_shape *s, void *y, const void *x) {
    int64_t units = s->P / s->C * s->OH * cl_blocks(s->C);
    int64_t work = adaptive ? ADAPTIVE_WORK(s) : POOL_WORK(s);
#pragma omp parallel for num_threads(dl_get_num_threads()) if (work >= DL_PARALLEL_GRAIN)
    for (int64_t u = 0; u < units; u++) mean_unit_cl(f32, adaptive, s, y, x, u);
}
static void spread_cl(bool f32, bool adaptive, const dl_pool2d_shape *s, void *gx, const void *gy) {
    int64_t units = s->P / s->C * cl_blocks(s->C);
    int64_t work = adaptive ? ADAPTIVE_WORK(s) : POOL_WORK(s);
#pragma omp parallel for num_threads(dl_get_num_threads()) if (work >= DL_PARALLEL_GRAIN)
    for (int64_t u = 0; u < units; u++) spread_unit_cl(f32, adaptive, s, gx, gy, u);
}

/* --- average pooling: loops -------------------------------------------------------- */

/* Output row r = (plane, oh). */
INLINE void avg_fwd_row(bool f32, const dl_pool2d_shape *s, void *y, const void *x, int64_t r) {
    int64_t HW = s->H * s->W;
    {
        int64_t p = r / s->OH, oh = r % s->OH;
        const char *xp = (const char *)x + p * HW * (f32 ? 4 : 8);
        for (int64_t ow = 0; ow < s->OW; ow++) {
            int64_t h0, h1, w0, w1;
            double div = avg_window(s, oh, ow, &h0, &h1, &w0, &w1);
            if (h0 >= h1 || w0 >= w1) {
                st(f32, y, r * s->OW + ow, 0);
                continue;
            }
            double sum = window_sum(f32, xp, s->W, h0, h1, w0, w1);
            st(f32, y, r * s->OW + ow, quot(f32, sum, div));
        }
    }
}

/* Plane p of gx (zeroed by the caller). */
INLINE void avg_backward_plane(bool f32, const dl_pool2d_shape *s, void *gx, const void *gy,
                               int64_t p) {
    int64_t HW = s->H * s->W, OHW = s->OH * s->OW;
    {
        char *g = (char *)gx + p * HW * (f32 ? 4 : 8);
        for (int64_t oh = 0; oh < s->OH; oh++)
            for (int64_t ow = 0; ow < s->OW; ow++) {
                int64_t h0, h1, w0, w1;
                double div = avg_window(s, oh, ow, &h0, &h1, &w0, &w1);
                double v = quot(f32, ld(f32, gy, p * OHW + oh * s->OW + ow), div);
                for (int64_t ih = h0; ih < h1; ih++)
                    for (int64_t iw = w0; iw < w1; iw++) add(f32, g, ih * s->W + iw, v);
            }
    }
}

static void avg_fwd(bool f32, const dl_pool2d_shape *s, void *y, const void *x) {
#pragma omp parallel for num_threads(dl_get_num_threads()) if (POOL_WORK(s) >= DL_PARALLEL_GRAIN)
    for (int64_t r = 0; r < s->P * s->OH; r++)
        f32 ? avg_fwd_row(true, s, y, x, r) : avg_fwd_row(false, s, y, x, r);
}
static void avg_backward(bool f32, const dl_pool2d_shape *s, void *gx, const void *gy) {
    memset(gx, 0, (f32 ? sizeof(float) : sizeof(double)) * (size_t)(s->P * s->H * s->W));
#pragma omp parallel for num_threads(dl_get_num_threads()) if (POOL_WORK(s) >= DL_PARALLEL_GRAIN)
    for (int64_t p = 0; p < s->P; p++)
        f32 ? avg_backward_plane(true, s, gx, gy, p) : avg_backward_plane(false, s, gx, gy, p);
}

/* --- average pooling: oneDNN (float32) ----------------------------------------------- */

/* Right/bottom padding that makes oneDNN's output size ours: the symmetric
 * padding, or more when ceil mode lets the last window hang over. */
static int64_t pad_right(int64_t in, int64_t out, int64_t k, int64_t stride, int64_t pad) {
    return max64(pad, (out - 1) * stride + k - in - pad);
}

/* oneDNN divides by the whole kernel (include padding) or by the window's
 * in-input part (exclude padding), counting its extra right padding as
 * padding.  PyTorch counts the padded window clipped to H + ph, so with
 * count_include_pad the two agree only when no window reaches past that. */
static bool avg_onednn_ok(const dl_pool2d_shape *s) {
    if (s->divisor_override || s->dh != 1 || s->dw != 1) return false;
    if (!s->count_include_pad) return true;
    return pad_right(s->H, s->OH, s->kh, s->sh, s->ph) == s->ph &&
           pad_right(s->W, s->OW, s->kw, s->sw, s->pw) == s->pw;
}

typedef struct {
    const dl_pool2d_shape *s;
} pool_ctx;

/* Planar buffers are one image of P channels; channels-last ones N images
 * of C channels in nhwc. */
static int pool_mds(const dl_pool2d_shape *s, dnnl_memory_desc_t *src, dnnl_memory_desc_t *dst) {
    int64_t n = s->C ? s->P / s->C : 1, c = s->C ? s->C : s->P;
    int64_t sd[4] = {n, c, s->H, s->W}, dd[4] = {n, c, s->OH, s->OW};
    dnnl_format_tag_t tag = s->C ? dnnl_nhwc : dnnl_nchw;
    return dl_dnnl_md(src, 4, sd, tag) || dl_dnnl_md(dst, 4, dd, tag);
}

/* slots: 0 forward, 1 backward */
static int build_avg(dl_dnnl_entry *e, const void *vctx) {
    const dl_pool2d_shape *s = ((const pool_ctx *)vctx)->s;
    dnnl_memory_desc_t src, dst;
    if (pool_mds(s, &src, &dst)) return -1;
    dnnl_alg_kind_t alg =
        s->count_include_pad ? dnnl_pooling_avg_include_padding : dnnl_pooling_avg_exclude_padding;
    dnnl_dims_t strides = {s->sh, s->sw}, kernel = {s->kh, s->kw}, dil = {0, 0};
    dnnl_dims_t pl = {s->ph, s->pw};
    dnnl_dims_t pr = {pad_right(s->H, s->OH, s->kh, s->sh, s->ph),
                      pad_right(s->W, s->OW, s->kw, s->sw, s->pw)};
    dnnl_pooling_v2_desc_t fd, bd;
    if (DL_DNNL(dnnl_pooling_v2_forward_desc_init(&fd, dnnl_forward_training, alg, &src, &dst,
                                                  strides, kernel, dil, pl, pr)) ||
        dl_dnnl_entry_add(e, 0, &fd, NULL, 1))
        return -1;
    if (DL_DNNL(dnnl_pooling_v2_backward_desc_init(&bd, alg, &src, &dst, strides, kernel, dil, pl,
                                                   pr)) ||
        dl_dnnl_entry_add(e, 1, &bd, e->pd[0], 1))
        return -1;
    return 0;
}

/* Runs the cached avg pooling primitive (backward when bwd): in -> out. */
static int avg_onednn(const dl_pool2d_shape *s, bool bwd, void *out, const void *in) {
    char key[DL_DNNL_KEY_LEN];
    snprintf(key, sizeof key,
             "avg_pool2d f32 %lld,%lld,%lld o%lld,%lld k%lld,%lld s%lld,%lld "
             "p%lld,%lld i%d c%lld",
             (long long)s->P, (long long)s->H, (long long)s->W, (long long)s->OH, (long long)s->OW,
             (long long)s->kh, (long long)s->kw, (long long)s->sh, (long long)s->sw,
             (long long)s->ph, (long long)s->pw, s->count_include_pad, (long long)s->C);
    pool_ctx c = {s};
    dl_dnnl_entry *e = dl_dnnl_cache_get(key, build_avg, &c);
    if (!e) return -1;
    dnnl_memory_desc_t src, dst;
    dl_dnnl_args a = {0};
    int rc = -1;
    if (pool_mds(s, &src, &dst) == 0) {
        if (bwd ? (dl_dnnl_args_add(&a, DNNL_ARG_DIFF_DST, &dst, (void *)in) ||
                   dl_dnnl_args_add(&a, DNNL_ARG_DIFF_SRC, &src, out))
                : (dl_dnnl_args_add(&a, DNNL_ARG_SRC, &src, (void *)in) ||
                   dl_dnnl_args_add(&a, DNNL_ARG_DST, &dst, out)))
            dl_dnnl_args_free(&a);
        else
            rc = dl_dnnl_execute(e->prim[bwd ? 1 : 0], &a);
    }
    dl_dnnl_cache_put(e);
    return rc;
}

/* --- adaptive pooling ---------------------------------------------------------------- */

/* Output row r = (plane, oh) of adaptive average (max false) or max pooling
 * (max true: ind gets the argmax, a NaN wins). */
INLINE void adaptive_fwd_row(bool f32, bool max, const dl_pool2d_shape *s, void *y, int64_t *ind,
                             const void *x, int64_t r) {
    int64_t H = s->H, W = s->W, p = r / s->OH, oh = r % s->OH;
    const char *xp = (const char *)x + p * H * W * (f32 ? 4 : 8);
    int64_t h0 = adaptive_start(oh, s->OH, H), h1 = adaptive_end(oh, s->OH, H);
    for (int64_t ow = 0; ow < s->OW; ow++) {
        int64_t w0 = adaptive_start(ow, s->OW, W), w1 = adaptive_end(ow, s->OW, W);
        if (!max) {
            double sum = window_sum(f32, xp, W, h0, h1, w0, w1);
            /* PyTorch divides twice: sum / kh / kw */
            st(f32, y, r * s->OW + ow,
               quot(f32, quot(f32, sum, (double)(h1 - h0)), (double)(w1 - w0)));
            continue;
        }
        double best = -INFINITY;
        int64_t bi = h0 * W + w0;
        for (int64_t ih = h0; ih < h1; ih++)
            for (int64_t iw = w0; iw < w1; iw++) {
                double v = ld(f32, xp, ih * W + iw);
                if (v > best || isnan(v)) {
                    best = v;
                    bi = ih * W + iw;
                }
            }
        st(f32, y, r * s->OW + ow, best);
        ind[r * s->OW + ow] = bi;
    }
}

/* Plane p of gx (zeroed by the caller). */
INLINE void adaptive_avg_backward_plane(bool f32, const dl_pool2d_shape *s, void *gx,
                                        const void *gy, int64_t p) {
    int64_t H = s->H, W = s->W, HW = H * W, OHW = s->OH * s->OW;
    {
        char *g = (char *)gx + p * HW * (f32 ? 4 : 8);
        for (int64_t oh = 0; oh < s->OH; oh++) {
            int64_t h0 = adaptive_start(oh, s->OH, H), h1 = adaptive_end(oh, s->OH, H);
            for (int64_t ow = 0; ow < s->OW; ow++) {
                int64_t w0 = adaptive_start(ow, s->OW, W), w1 = adaptive_end(ow, s->OW, W);
                /* PyTorch divides twice: gy / kh / kw */
                double g1 = quot(f32, ld(f32, gy, p * OHW + oh * s->OW + ow), (double)(h1 - h0));
                double v = quot(f32, g1, (double)(w1 - w0));
                for (int64_t ih = h0; ih < h1; ih++)
                    for (int64_t iw = w0; iw < w1; iw++) add(f32, g, ih * W + iw, v);
            }
        }
    }
}

static void adaptive_avg_fwd(bool f32, const dl_pool2d_shape *s, void *y, const void *x) {
#pragma omp parallel for num_threads(dl_get_num_threads()) if (ADAPTIVE_WORK(s) >=                 \
                                                               DL_PARALLEL_GRAIN)
    for (int64_t r = 0; r < s->P * s->OH; r++)
        f32 ? adaptive_fwd_row(true, false, s, y, NULL, x, r)
            : adaptive_fwd_row(false, false, s, y, NULL, x, r);
}
static void adaptive_avg_backward(bool f32, const dl_pool2d_shape *s, void *gx, const void *gy) {
    memset(gx, 0, (f32 ? sizeof(float) : sizeof(double)) * (size_t)(s->P * s->H * s->W));
#pragma omp parallel for num_threads(dl_get_num_threads()) if (ADAPTIVE_WORK(s) >=                 \
                                                               DL_PARALLEL_GRAIN)
    for (int64_t p = 0; p < s->P; p++)
        f32 ? adaptive_avg_backward_plane(true, s, gx, gy, p)
            : adaptive_avg_backward_plane(false, s, gx, gy, p);
}
static void adaptive_max(bool f32, const dl_pool2d_shape *s, void *y, int64_t *ind, const void *x) {
#pragma omp parallel for num_threads(dl_get_num_threads()) if (ADAPTIVE_WORK(s) >=                 \
                                                               DL_PARALLEL_GRAIN)
    for (int64_t r = 0; r < s->P * s->OH; r++)
        f32 ? adaptive_fwd_row(true, true, s, y, ind, x, r)
            : adaptive_fwd_row(false, true, s, y, ind, x, r);
}

/* --- entry points ----------------------------------------------------------------------------- */

/* 0 for float32 and float64, the dtypes the CPU kernels of pooling take;
 * else -1 with an error naming op. */
static int float_only(const char *op, dl_dtype dt) {
    if (dt == DL_DTYPE_F32 || dt == DL_DTYPE_F64) return 0;
    return dl_error("%s: no CPU kernel for %s", op, dl_dtype_name(dt));
}

int dl_cpu_pool2d_scatter_backward(dl_dtype dt, int64_t P, int64_t HW, int64_t OHW, int64_t C,
                                   void *gx, const void *gy, const int64_t *ind) {
    if (float_only("max_pool2d_backward", dt)) return -1;
    bool f32 = dt == DL_DTYPE_F32;
    int64_t bad =
        C ? scatter_cl(f32, P, HW, OHW, C, gx, gy, ind) : scatter(f32, P, HW, OHW, gx, gy, ind);
    if (bad)
        return dl_error("max_pool2d_backward: %lld indices are outside the input plane of %lld "
                        "elements (indices must come from the forward)",
                        (long long)bad, (long long)HW);
    return 0;
}

/* Max pooling (adaptive or not): the channels-last loop, else the planar
 * one. */
static int max_entry(const char *op, bool adaptive, dl_dtype dt, const dl_pool2d_shape *s, void *y,
                     int64_t *ind, const void *x) {
    if (float_only(op, dt)) return -1;
    bool f32 = dt == DL_DTYPE_F32;
    if (!ind && !(s->C && f32 && !adaptive))
        return dl_error("%s: only float32 channels-last pooling runs without indices", op);
    if (s->C)
        max_cl(f32, adaptive, s, y, ind, x);
    else if (adaptive)
        adaptive_max(f32, s, y, ind, x);
    else if (f32)
        max_pool_f32(s, y, ind, x);
    else
        max_pool_f64(s, y, ind, x);
    return 0;
}

/* Average pooling (adaptive or not), forward (out = y, in = x) or backward
 * (out = gx, in = gy): oneDNN where it serves, else the channels-last loop,
 * else the planar one. */
static int avg_entry(const char *op, bool adaptive, bool bwd, dl_dtype dt, const dl_pool2d_shape *s,
                     void *out, const void *in) {
    static void (*const planar[2][2])(bool, const dl_pool2d_shape *, void *, const void *) = {
        {avg_fwd, avg_backward}, {adaptive_avg_fwd, adaptive_avg_backward}};
    if (!adaptive && dt == DL_DTYPE_F32 && avg_onednn_ok(s)) return avg_onednn(s, bwd, out, in);
    if (float_only(op, dt)) return -1;
    bool f32 = dt == DL_DTYPE_F32;
    if (s->C)
        (bwd ? spread_cl : mean_cl)(f32, adaptive, s, out, in);
    else
        planar[adaptive][bwd](f32, s, out, in);
    return 0;
}

int dl_cpu_max_pool2d_forward(dl_dtype dt, const dl_pool2d_shape *s, void *y, int64_t *ind,
                              const void *x) {
    return max_entry("max_pool2d", false, dt, s, y, ind, x);
}

int dl_cpu_adaptive_max_pool2d_forward(dl_dtype dt, const dl_pool2d_shape *s, void *y, int64_t *ind,
                                       const void *x) {
    return max_entry("adaptive_max_pool2d", true, dt, s, y, ind, x);
}

int dl_cpu_avg_pool2d_forward(dl_dtype dt, const dl_pool2d_shape *s, void *y, const void *x) {
    return avg_entry("avg_pool2d", false, false, dt, s, y, x);
}

int dl_cpu_avg_pool2d_backward(dl_dtype dt, const dl_pool2d_shape *s, void *gx, const void *gy) {
    return avg_entry("avg_pool2d_backward", false, true, dt, s, gx, gy);
}

int dl_cpu_adaptive_avg_pool2d_forward(dl_dtype dt, const dl_pool2d_shape *s, void *y,
                                       const void *x) {
    return avg_entry("adaptive_avg_pool2d", true, false, dt, s, y, x);
}

int dl_cpu_adaptive_avg_pool2d_backward(dl_dtype dt, const dl_pool2d_shape *s, void *gx,
                                        const void *gy) {
    return avg_entry("adaptive_avg_pool2d_backward", true, true, dt, s, gx, gy);
}
