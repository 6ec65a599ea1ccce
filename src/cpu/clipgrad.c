/* cpu/clipgrad.c - CPU kernels of the clipgrad family (see clipgrad.h).
 *
 * The buffers are cut into chunks of CHUNK elements, numbered across the
 * whole list; one parallel loop runs over all chunks (a chunk finds its
 * buffer by binary search), so a list of many small gradients is one pass
 * and one parallel region.  The norm keeps one partial per chunk and adds
 * them in chunk order (norm_type 0, as PyTorch's norm of the tensors' norms,
 * counts the tensors holding a non-zero).  Elements of float32 and float64
 * are read directly,
 * the half types through dl_half_to_float / dl_bf16_to_float. */
#include "cpu/clipgrad.h"
#include "core/error.h"
#include "core/parallel.h"

#include <math.h>
#include <stdlib.h>

#define CHUNK 32768
#define NACC 16

/* first (n + 1): chunk numbers where each buffer starts; NULL on no memory */
static int64_t *chunk_starts(int n, const dl_mt_tensor *ts) {
    int64_t *first = malloc((size_t)(n + 1) * sizeof *first);
    if (!first) return NULL;
    first[0] = 0;
    for (int i = 0; i < n; i++) first[i + 1] = first[i] + (ts[i].n + CHUNK - 1) / CHUNK;
    return first;
}

/* The buffer of chunk c, and the chunk's first element and length. */
static int chunk_of(int n, const int64_t *first, const dl_mt_tensor *ts, int64_t c, int64_t *start,
                    int64_t *len) {
    int lo = 0, hi = n - 1;
    while (lo < hi) { /* the last buffer whose first chunk is <= c */
        int mid = (lo + hi + 1) / 2;
        if (first[mid] <= c)
            lo = mid;
        else
            hi = mid - 1;
    }
    *start = (c - first[lo]) * CHUNK;
    *len = ts[lo].n - *start < CHUNK ? ts[lo].n - *start : CHUNK;
    return lo;
}

static inline double elem(const dl_mt_tensor *t, int64_t i) {
    switch (t->dt) {
    case DL_DTYPE_F64: return ((const double *)t->data)[i];
    case DL_DTYPE_F16: return dl_half_to_float(((const uint16_t *)t->data)[i]);
    case DL_DTYPE_BF16: return dl_bf16_to_float(((const uint16_t *)t->data)[i]);
    default: return ((const float *)t->data)[i];
    }
}

static inline void set_elem(const dl_mt_tensor *t, int64_t i, double v) {
    switch (t->dt) {
    case DL_DTYPE_F64: ((double *)t->data)[i] = v; break;
    case DL_DTYPE_F16: ((uint16_t *)t->data)[i] = dl_float_to_half((float)v); break;
    case DL_DTYPE_BF16: ((uint16_t *)t->data)[i] = dl_float_to_bf16((float)v); break;
    default: ((float *)t->data)[i] = (float)v; break;
    }
}

/* --- the norm ---------------------------------------------------------------------- */

/* a NaN-keeping max (sign > 0) or min (sign < 0) */
static inline double pick(double acc, double a, int sign) {
    return (sign > 0 ? a > acc : a < acc) || a != a ? a : acc;
}

/* sum of squares of float32 x (len), in double over NACC lanes */
DL_CPU_CLONES
static double f32_sumsq(const float *x, int64_t len) {
    double a[NACC] = {0}, s = 0;
    int64_t i = 0;
    for (; i + NACC <= len; i += NACC)
        for (int j = 0; j < NACC; j++) a[j] += (double)x[i + j] * (double)x[i + j];
    for (; i < len; i++) s += (double)x[i] * (double)x[i];
    for (int j = 0; j < NACC; j++) s += a[j];
    return s;
}

/* the chunk's part of the norm: a sum (p finite) or a max/min (p infinite) */
static double chunk_norm(const dl_mt_tensor *t, int64_t s, int64_t len, double p) {
    if (p == 2 && t->dt == DL_DTYPE_F32) return f32_sumsq((const float *)t->data + s, len);
    int sign = isinf(p) ? (p > 0 ? 1 : -1) : 0;
    double acc = sign < 0 ? INFINITY : 0;
    for (int64_t i = s; i < s + len; i++) {
        double a = fabs(elem(t, i));
        if (sign)
            acc = pick(acc, a, sign);
        else if (p == 2)
            acc += a * a;
        else if (p == 1)
            acc += a;
        else if (p == 0)
            acc += a != 0;
        else
            acc += pow(a, p);
    }
    return acc;
}

int dl_cpu_clipgrad_norm(int n, const dl_mt_tensor *ts, double p, double *total) {
    int64_t *first = chunk_starts(n, ts);
    int64_t C = first ? first[n] : 0;
    double *part = first ? malloc((size_t)(C > 0 ? C : 1) * sizeof *part) : NULL;
    if (!part) {
        free(first);
        return dl_error("clip_grad_norm_: out of memory for the partial sums of %d tensors", n);
    }
    const int sign = isinf(p) ? (p > 0 ? 1 : -1) : 0;
#pragma omp parallel for num_threads(dl_get_num_threads()) if (C > 1)
    for (int64_t c = 0; c < C; c++) {
        int64_t s, len;
        int i = chunk_of(n, first, ts, c, &s, &len);
        part[c] = chunk_norm(&ts[i], s, len, p);
    }
    double acc = sign < 0 ? INFINITY : 0;
    if (p == 0) { /* the 0-norm of the tensors' 0-norms: how many have a non-zero (PyTorch) */
        for (int i = 0; i < n; i++) {
            double cnt = 0;
            for (int64_t c = first[i]; c < first[i + 1]; c++) cnt += part[c];
            acc += cnt != 0;
        }
    } else {
        for (int64_t c = 0; c < C; c++) acc = sign ? pick(acc, part[c], sign) : acc + part[c];
    }
    free(part);
    free(first);
    if (sign < 0 && C == 0) acc = 0; /* no elements */
    *total = sign || p == 1 || p == 0 ? acc : p == 2 ? sqrt(acc) : pow(acc, 1 / p);
    return 0;
}

/* --- in place ----------------------------------------------------------------------- */

/* op 0: x *= a (in the element's precision); op 1: x = clamp(x, -a, a) */
static void chunk_update(const dl_mt_tensor *t, int64_t s, int64_t len, int op, double a) {
    if (t->dt == DL_DTYPE_F32) {
        float *x = (float *)t->data + s, af = (float)a;
        if (op == 0)
            for (int64_t i = 0; i < len; i++) x[i] *= af;
        else
            for (int64_t i = 0; i < len; i++) x[i] = x[i] < -af ? -af : x[i] > af ? af : x[i];
        return;
    }
    for (int64_t i = s; i < s + len; i++) {
        double v = elem(t, i);
        if (op == 0)
            v = t->dt == DL_DTYPE_F64 ? v * a : (double)((float)v * (float)a);
        else
            v = v < -a ? -a : v > a ? a : v;
        set_elem(t, i, v);
    }
}

static int update(int n, const dl_mt_tensor *ts, int op, double a) {
    int64_t *first = chunk_starts(n, ts);
    if (!first) return dl_error("clip_grad: out of memory for %d tensors", n);
    int64_t C = first[n];
#pragma omp parallel for num_threads(dl_get_num_threads()) if (C > 1)
    for (int64_t c = 0; c < C; c++) {
        int64_t s, len;
        int i = chunk_of(n, first, ts, c, &s, &len);
        chunk_update(&ts[i], s, len, op, a);
    }
    free(first);
    return 0;
}

int dl_cpu_clipgrad_scale(int n, const dl_mt_tensor *ts, double coef) {
    return update(n, ts, 0, coef);
}

int dl_cpu_clipgrad_clamp(int n, const dl_mt_tensor *ts, double v) {
    return update(n, ts, 1, v);
}
