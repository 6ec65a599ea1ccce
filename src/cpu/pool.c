/* pool.c - CPU 2-D pooling kernels (see pool.h).
 *
 * The loop kernels are written once over an element type chosen by a
 * constant `f32` flag: each row (or plane) body is always_inline and called
 * from the parallel loops of two small wrappers (float, double), so the flag
 * folds away and each inner loop is specialised.  Values pass through
 * double (exact for float); sums and quotients are computed in the element
 * type, in PyTorch's order, so float results are PyTorch's.
 * Forward loops run in parallel over output rows, backward loops over planes
 * (a plane's gradient is written by one thread only).
 *
 * Window rules, as PyTorch's CPU kernels:
 *  - max: rows h0 + k*dh (h0 = oh*sh - ph) inside [0, H); the maximum starts
 *    at -inf with the first valid position as its index; a value wins if it
 *    is greater or NaN (so the last NaN wins).
 *  - avg: rows [oh*sh - ph, min(that + kh, H + ph)) give the padded window
 *    size; clipped to [0, H) they give the summed rows and the unpadded size.
 *  - adaptive: rows [floor(i*H/OH), ceil((i+1)*H/OH)).
 * float32 average pooling runs on oneDNN when its divisor agrees (see
 * avg_onednn_ok); the loops are the reference the tests hold it to. */
#include "pool.h"
#include "core/error.h"
#include "core/parallel.h"
#include "dnnl_util.h"

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

/* --- max pooling ------------------------------------------------------------------- */

/* Output row r = (plane, oh). */
INLINE void max_pool_row(bool f32, const dl_pool2d_shape *s, void *y, int64_t *ind, const void *x,
                         int64_t r) {
    int64_t H = s->H, W = s->W, HW = H * W;
    {
        int64_t p = r / s->OH, oh = r % s->OH;
        const char *xp = (const char *)x + p * HW * (f32 ? 4 : 8);
        int64_t h0 = oh * s->sh - s->ph;
        int64_t hs = h0, he = min64(h0 + (s->kh - 1) * s->dh + 1, H);
        while (hs < 0) hs += s->dh;
        for (int64_t ow = 0; ow < s->OW; ow++) {
            int64_t w0 = ow * s->sw - s->pw;
            int64_t ws = w0, we = min64(w0 + (s->kw - 1) * s->dw + 1, W);
            while (ws < 0) ws += s->dw;
            double best = -INFINITY;
            int64_t bi = hs * W + ws;
            for (int64_t ih = hs; ih < he; ih += s->dh)
                for (int64_t iw = ws; iw < we; iw += s->dw) {
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
}

/* Work (window reads) below which pooling loops stay on one thread. */
#define POOL_WORK(s) ((s)->P * (s)->OH * (s)->OW * (s)->kh * (s)->kw)

static void max_pool_f32(const dl_pool2d_shape *s, void *y, int64_t *ind, const void *x) {
#pragma omp parallel for num_threads(dl_get_num_threads()) if (POOL_WORK(s) >= DL_PARALLEL_GRAIN)
    for (int64_t r = 0; r < s->P * s->OH; r++) max_pool_row(true, s, y, ind, x, r);
}
static void max_pool_f64(const dl_pool2d_shape *s, void *y, int64_t *ind, const void *x) {
#pragma omp parallel for num_threads(dl_get_num_threads()) if (POOL_WORK(s) >= DL_PARALLEL_GRAIN)
    for (int64_t r = 0; r < s->P * s->OH; r++) max_pool_row(false, s, y, ind, x, r);
}

int dl_cpu_max_pool2d_forward(dl_dtype dt, const dl_pool2d_shape *s, void *y, int64_t *ind,
                              const void *x) {
    if (dt == DL_DTYPE_F32)
        max_pool_f32(s, y, ind, x);
    else if (dt == DL_DTYPE_F64)
        max_pool_f64(s, y, ind, x);
    else
        return dl_error("max_pool2d: no CPU kernel for %s", dl_dtype_name(dt));
    return 0;
}

/* Plane p of the scatter; returns the number of out-of-range indices met
 * (nothing is written for them). */
INLINE int64_t scatter_plane(bool f32, int64_t HW, int64_t OHW, void *gx, const void *gy,
                             const int64_t *ind, int64_t p) {
    int64_t bad = 0;
    char *g = (char *)gx + p * HW * (f32 ? 4 : 8);
    for (int64_t j = 0; j < OHW; j++) {
        int64_t i = ind[p * OHW + j];
        if (i < 0 || i >= HW) {
            bad++;
            continue;
        }
        add(f32, g, i, ld(f32, gy, p * OHW + j));
    }
    return bad;
}

static int64_t scatter_f32(int64_t P, int64_t HW, int64_t OHW, void *gx, const void *gy,
                           const int64_t *ind) {
    int64_t bad = 0;
    memset(gx, 0, sizeof(float) * (size_t)(P * HW));
#pragma omp parallel for num_threads(dl_get_num_threads()) if (P * OHW >= DL_PARALLEL_GRAIN) reduction(+ : bad)
    for (int64_t p = 0; p < P; p++) bad += scatter_plane(true, HW, OHW, gx, gy, ind, p);
    return bad;
}
static int64_t scatter_f64(int64_t P, int64_t HW, int64_t OHW, void *gx, const void *gy,
                           const int64_t *ind) {
    int64_t bad = 0;
    memset(gx, 0, sizeof(double) * (size_t)(P * HW));
#pragma omp parallel for num_threads(dl_get_num_threads()) if (P * OHW >= DL_PARALLEL_GRAIN) reduction(+ : bad)
    for (int64_t p = 0; p < P; p++) bad += scatter_plane(false, HW, OHW, gx, gy, ind, p);
    return bad;
}

int dl_cpu_pool2d_scatter_backward(dl_dtype dt, int64_t P, int64_t HW, int64_t OHW, void *gx,
                                   const void *gy, const int64_t *ind) {
    int64_t bad;
    if (dt == DL_DTYPE_F32)
        bad = scatter_f32(P, HW, OHW, gx, gy, ind);
    else if (dt == DL_DTYPE_F64)
        bad = scatter_f64(P, HW, OHW, gx, gy, ind);
    else
        return dl_error("max_pool2d_backward: no CPU kernel for %s", dl_dtype_name(dt));
    if (bad)
        return dl_error("max_pool2d_backward: %lld indices are outside the input plane of %lld "
                        "elements (indices must come from the forward)",
                        (long long)bad, (long long)HW);
    return 0;
}

/* --- average pooling: loops -------------------------------------------------------- */

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
INLINE void avg_bwd_plane(bool f32, const dl_pool2d_shape *s, void *gx, const void *gy, int64_t p) {
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

static void avg_fwd_f32(const dl_pool2d_shape *s, void *y, const void *x) {
#pragma omp parallel for num_threads(dl_get_num_threads()) if (POOL_WORK(s) >= DL_PARALLEL_GRAIN)
    for (int64_t r = 0; r < s->P * s->OH; r++) avg_fwd_row(true, s, y, x, r);
}
static void avg_fwd_f64(const dl_pool2d_shape *s, void *y, const void *x) {
#pragma omp parallel for num_threads(dl_get_num_threads()) if (POOL_WORK(s) >= DL_PARALLEL_GRAIN)
    for (int64_t r = 0; r < s->P * s->OH; r++) avg_fwd_row(false, s, y, x, r);
}
static void avg_bwd_f32(const dl_pool2d_shape *s, void *gx, const void *gy) {
    memset(gx, 0, sizeof(float) * (size_t)(s->P * s->H * s->W));
#pragma omp parallel for num_threads(dl_get_num_threads()) if (POOL_WORK(s) >= DL_PARALLEL_GRAIN)
    for (int64_t p = 0; p < s->P; p++) avg_bwd_plane(true, s, gx, gy, p);
}
static void avg_bwd_f64(const dl_pool2d_shape *s, void *gx, const void *gy) {
    memset(gx, 0, sizeof(double) * (size_t)(s->P * s->H * s->W));
#pragma omp parallel for num_threads(dl_get_num_threads()) if (POOL_WORK(s) >= DL_PARALLEL_GRAIN)
    for (int64_t p = 0; p < s->P; p++) avg_bwd_plane(false, s, gx, gy, p);
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

static int pool_mds(const dl_pool2d_shape *s, dnnl_memory_desc_t *src, dnnl_memory_desc_t *dst) {
    int64_t sd[4] = {1, s->P, s->H, s->W}, dd[4] = {1, s->P, s->OH, s->OW};
    return dl_dnnl_md(src, 4, sd, dnnl_nchw) || dl_dnnl_md(dst, 4, dd, dnnl_nchw);
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
             "p%lld,%lld i%d",
             (long long)s->P, (long long)s->H, (long long)s->W, (long long)s->OH, (long long)s->OW,
             (long long)s->kh, (long long)s->kw, (long long)s->sh, (long long)s->sw,
             (long long)s->ph, (long long)s->pw, s->count_include_pad);
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

int dl_cpu_avg_pool2d_forward(dl_dtype dt, const dl_pool2d_shape *s, void *y, const void *x) {
    if (dt == DL_DTYPE_F32) {
        if (avg_onednn_ok(s)) return avg_onednn(s, false, y, x);
        avg_fwd_f32(s, y, x);
    } else if (dt == DL_DTYPE_F64) {
        avg_fwd_f64(s, y, x);
    } else {
        return dl_error("avg_pool2d: no CPU kernel for %s", dl_dtype_name(dt));
    }
    return 0;
}

int dl_cpu_avg_pool2d_backward(dl_dtype dt, const dl_pool2d_shape *s, void *gx, const void *gy) {
    if (dt == DL_DTYPE_F32) {
        if (avg_onednn_ok(s)) return avg_onednn(s, true, gx, gy);
        avg_bwd_f32(s, gx, gy);
    } else if (dt == DL_DTYPE_F64) {
        avg_bwd_f64(s, gx, gy);
    } else {
        return dl_error("avg_pool2d_backward: no CPU kernel for %s", dl_dtype_name(dt));
    }
    return 0;
}

/* --- adaptive pooling ---------------------------------------------------------------- */

/* Output row r = (plane, oh). */
INLINE void adaptive_avg_fwd_row(bool f32, const dl_pool2d_shape *s, void *y, const void *x,
                                 int64_t r) {
    int64_t H = s->H, W = s->W, HW = H * W;
    {
        int64_t p = r / s->OH, oh = r % s->OH;
        const char *xp = (const char *)x + p * HW * (f32 ? 4 : 8);
        int64_t h0 = adaptive_start(oh, s->OH, H), h1 = adaptive_end(oh, s->OH, H);
        for (int64_t ow = 0; ow < s->OW; ow++) {
            int64_t w0 = adaptive_start(ow, s->OW, W), w1 = adaptive_end(ow, s->OW, W);
            double sum = window_sum(f32, xp, W, h0, h1, w0, w1);
            /* PyTorch divides twice: sum / kh / kw */
            st(f32, y, r * s->OW + ow,
               quot(f32, quot(f32, sum, (double)(h1 - h0)), (double)(w1 - w0)));
        }
    }
}

/* Plane p of gx (zeroed by the caller). */
INLINE void adaptive_avg_bwd_plane(bool f32, const dl_pool2d_shape *s, void *gx, const void *gy,
                                   int64_t p) {
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

/* Output row r = (plane, oh). */
INLINE void adaptive_max_fwd_row(bool f32, const dl_pool2d_shape *s, void *y, int64_t *ind,
                                 const void *x, int64_t r) {
    int64_t H = s->H, W = s->W, HW = H * W;
    {
        int64_t p = r / s->OH, oh = r % s->OH;
        const char *xp = (const char *)x + p * HW * (f32 ? 4 : 8);
        int64_t h0 = adaptive_start(oh, s->OH, H), h1 = adaptive_end(oh, s->OH, H);
        for (int64_t ow = 0; ow < s->OW; ow++) {
            int64_t w0 = adaptive_start(ow, s->OW, W), w1 = adaptive_end(ow, s->OW, W);
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
}

/* Each input element is read about once by adaptive pooling. */
#define ADAPTIVE_WORK(s) ((s)->P * ((s)->H * (s)->W + (s)->OH * (s)->OW))

static void adaptive_avg_fwd_f32(const dl_pool2d_shape *s, void *y, const void *x) {
#pragma omp parallel for num_threads(dl_get_num_threads()) if (ADAPTIVE_WORK(s) >=                 \
                                                               DL_PARALLEL_GRAIN)
    for (int64_t r = 0; r < s->P * s->OH; r++) adaptive_avg_fwd_row(true, s, y, x, r);
}
static void adaptive_avg_fwd_f64(const dl_pool2d_shape *s, void *y, const void *x) {
#pragma omp parallel for num_threads(dl_get_num_threads()) if (ADAPTIVE_WORK(s) >=                 \
                                                               DL_PARALLEL_GRAIN)
    for (int64_t r = 0; r < s->P * s->OH; r++) adaptive_avg_fwd_row(false, s, y, x, r);
}
static void adaptive_avg_bwd_f32(const dl_pool2d_shape *s, void *gx, const void *gy) {
    memset(gx, 0, sizeof(float) * (size_t)(s->P * s->H * s->W));
#pragma omp parallel for num_threads(dl_get_num_threads()) if (ADAPTIVE_WORK(s) >=                 \
                                                               DL_PARALLEL_GRAIN)
    for (int64_t p = 0; p < s->P; p++) adaptive_avg_bwd_plane(true, s, gx, gy, p);
}
static void adaptive_avg_bwd_f64(const dl_pool2d_shape *s, void *gx, const void *gy) {
    memset(gx, 0, sizeof(double) * (size_t)(s->P * s->H * s->W));
#pragma omp parallel for num_threads(dl_get_num_threads()) if (ADAPTIVE_WORK(s) >=                 \
                                                               DL_PARALLEL_GRAIN)
    for (int64_t p = 0; p < s->P; p++) adaptive_avg_bwd_plane(false, s, gx, gy, p);
}
static void adaptive_max_f32(const dl_pool2d_shape *s, void *y, int64_t *ind, const void *x) {
#pragma omp parallel for num_threads(dl_get_num_threads()) if (ADAPTIVE_WORK(s) >=                 \
                                                               DL_PARALLEL_GRAIN)
    for (int64_t r = 0; r < s->P * s->OH; r++) adaptive_max_fwd_row(true, s, y, ind, x, r);
}
static void adaptive_max_f64(const dl_pool2d_shape *s, void *y, int64_t *ind, const void *x) {
#pragma omp parallel for num_threads(dl_get_num_threads()) if (ADAPTIVE_WORK(s) >=                 \
                                                               DL_PARALLEL_GRAIN)
    for (int64_t r = 0; r < s->P * s->OH; r++) adaptive_max_fwd_row(false, s, y, ind, x, r);
}

int dl_cpu_adaptive_avg_pool2d_forward(dl_dtype dt, const dl_pool2d_shape *s, void *y,
                                       const void *x) {
    if (dt == DL_DTYPE_F32)
        adaptive_avg_fwd_f32(s, y, x);
    else if (dt == DL_DTYPE_F64)
        adaptive_avg_fwd_f64(s, y, x);
    else
        return dl_error("adaptive_avg_pool2d: no CPU kernel for %s", dl_dtype_name(dt));
    return 0;
}

int dl_cpu_adaptive_avg_pool2d_backward(dl_dtype dt, const dl_pool2d_shape *s, void *gx,
                                        const void *gy) {
    if (dt == DL_DTYPE_F32)
        adaptive_avg_bwd_f32(s, gx, gy);
    else if (dt == DL_DTYPE_F64)
        adaptive_avg_bwd_f64(s, gx, gy);
    else
        return dl_error("adaptive_avg_pool2d_backward: no CPU kernel for %s", dl_dtype_name(dt));
    return 0;
}

int dl_cpu_adaptive_max_pool2d_forward(dl_dtype dt, const dl_pool2d_shape *s, void *y, int64_t *ind,
                                       const void *x) {
    if (dt == DL_DTYPE_F32)
        adaptive_max_f32(s, y, ind, x);
    else if (dt == DL_DTYPE_F64)
        adaptive_max_f64(s, y, ind, x);
    else
        return dl_error("adaptive_max_pool2d: no CPU kernel for %s", dl_dtype_name(dt));
    return 0;
}
