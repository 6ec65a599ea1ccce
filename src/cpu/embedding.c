/* cpu/embedding.c - CPU kernels of the embedding family (see embedding.h).
 *
 * Lookups copy rows (memcpy, any dtype), in parallel over entries.  Bags run
 * in parallel over bags, sums in double.  The weight gradient groups the
 * entries by id with a counting sort that keeps entry order (so each row's
 * contributions are added in that order, in double, whatever the thread
 * count) and then fills the rows in parallel; no row is written by two
 * threads.  max mode's gradient runs in parallel over columns, for the same
 * reason.  float32 and float64 share the code: elements are read and written
 * through ld/st, which a loop's compiler hoists out of its switch. */
#include "cpu/embedding.h"
#include "core/error.h"
#include "core/parallel.h"
#include "cpu/index.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

/* element i of a F32 or F64 buffer, as double; and the store */
static inline double ld(const void *p, int64_t i, bool f64) {
    return f64 ? ((const double *)p)[i] : (double)((const float *)p)[i];
}
static inline void st(void *p, int64_t i, double v, bool f64) {
    if (f64)
        ((double *)p)[i] = v;
    else
        ((float *)p)[i] = (float)v;
}

/* acc (D) += a * row r of a (., D) F32 or F64 buffer */
static void acc_row(double *acc, const void *src, int64_t r, int64_t D, double a, bool f64) {
    if (f64) {
        const double *p = (const double *)src + r * D;
        for (int64_t j = 0; j < D; j++) acc[j] += a * p[j];
    } else {
        const float *p = (const float *)src + r * D;
        for (int64_t j = 0; j < D; j++) acc[j] += a * (double)p[j];
    }
}

/* row r of a (., D) buffer = acc */
static void store_row(void *dst, int64_t r, const double *acc, int64_t D, bool f64) {
    for (int64_t j = 0; j < D; j++) st(dst, r * D + j, acc[j], f64);
}

void dl_cpu_embedding_gather(void *out, const void *weight, size_t esz, const int64_t *ids,
                             const dl_emb_shape *s) {
    const size_t row = (size_t)s->dim * esz;
#pragma omp parallel for num_threads(dl_get_num_threads()) if (s->n * s->dim >= DL_PARALLEL_GRAIN)
    for (int64_t k = 0; k < s->n; k++) {
        if (k + 2 < s->n)
            dl_cpu_prefetch_bytes((const char *)weight + (size_t)ids[k + 2] * row, row);
        memcpy((char *)out + (size_t)k * row, (const char *)weight + (size_t)ids[k] * row, row);
    }
}

/* --- bags ------------------------------------------------------------------------------ */

int dl_cpu_embedding_bag_forward(dl_dtype dt, dl_bag_mode mode, void *out, int64_t *bag_of,
                                 int64_t *bag_size, int64_t *argmax, const void *weight,
                                 const int64_t *ids, const int64_t *bounds, const void *psw,
                                 const dl_emb_shape *s, int64_t padding_idx) {
    const bool f64 = dt == DL_DTYPE_F64;
    const int64_t D = s->dim;
    const int nt = dl_get_num_threads();
    /* a row of sums per thread (sum and mean) */
    double *acc = malloc((size_t)nt * (size_t)D * sizeof *acc);
    if (!acc) return dl_error("embedding_bag: out of memory for %d rows of %lld", nt, (long long)D);
#pragma omp parallel for num_threads(nt) if (s->n * D >= DL_PARALLEL_GRAIN)
    for (int64_t b = 0; b < s->bags; b++) {
        double *a = acc + (size_t)omp_get_thread_num() * (size_t)D;
        int64_t cnt = 0;
        for (int64_t j = 0; j < D; j++) a[j] = 0;
        for (int64_t k = bounds[b]; k < bounds[b + 1]; k++) {
            if (ids[k] == padding_idx) {
                bag_of[k] = -1;
                continue;
            }
            bag_of[k] = b;
            if (mode != DL_BAG_MAX) {
                acc_row(a, weight, ids[k], D, psw ? ld(psw, k, f64) : 1.0, f64);
            } else {
                for (int64_t j = 0; j < D; j++) {
                    double v = ld(weight, ids[k] * D + j, f64);
                    /* the first entry, then a strictly larger one (PyTorch) */
                    if (cnt == 0 || v > a[j]) {
                        a[j] = v;
                        argmax[b * D + j] = k;
                    }
                }
            }
            cnt++;
        }
        bag_size[b] = cnt;
        if (mode == DL_BAG_MAX && cnt == 0)
            for (int64_t j = 0; j < D; j++) argmax[b * D + j] = -1;
        if (mode == DL_BAG_MEAN && cnt > 0)
            for (int64_t j = 0; j < D; j++) a[j] /= (double)cnt;
        store_row(out, b, a, D, f64);
    }
    free(acc);
    return 0;
}

void dl_cpu_embedding_bag_max_backward(dl_dtype dt, void *gw, const void *gy, const int64_t *ids,
                                       const int64_t *argmax, const dl_emb_shape *s) {
    const bool f64 = dt == DL_DTYPE_F64;
    const int64_t D = s->dim;
    /* a column j is one thread's: its adds keep bag order */
#pragma omp parallel for num_threads(dl_get_num_threads()) if (s->bags * D >= DL_PARALLEL_GRAIN)
    for (int64_t j = 0; j < D; j++)
        for (int64_t b = 0; b < s->bags; b++) {
            int64_t k = argmax[b * D + j];
            if (k < 0) continue;
            int64_t at = ids[k] * D + j;
            st(gw, at, ld(gw, at, f64) + ld(gy, b * D + j, f64), f64);
        }
}

void dl_cpu_embedding_psw_backward(dl_dtype dt, void *gpsw, const void *gy, const void *weight,
                                   const int64_t *ids, const int64_t *bag_of,
                                   const dl_emb_shape *s) {
    const bool f64 = dt == DL_DTYPE_F64;
    const int64_t D = s->dim;
#pragma omp parallel for num_threads(dl_get_num_threads()) if (s->n * D >= DL_PARALLEL_GRAIN)
    for (int64_t k = 0; k < s->n; k++) {
        double d = 0;
        if (bag_of[k] >= 0)
            for (int64_t j = 0; j < D; j++)
                d += ld(gy, bag_of[k] * D + j, f64) * ld(weight, ids[k] * D + j, f64);
        st(gpsw, k, d, f64);
    }
}

/* --- the weight gradient ------------------------------------------------------------- */

int dl_cpu_embedding_backward(dl_dtype dt, void *gw, const void *gy, const int64_t *ids,
                              const int64_t *bag_of, const void *psw, const int64_t *bag_size,
                              const dl_emb_shape *s, int64_t padding_idx, bool by_freq) {
    const bool f64 = dt == DL_DTYPE_F64;
    const int64_t D = s->dim, V = s->num;
    const int nt = dl_get_num_threads();
    /* start (V + 1): the entries of id v are order[start[v] .. start[v+1]),
     * in entry order; acc: a row of sums per thread */
    int64_t *start = calloc((size_t)V + 1, sizeof *start);
    int64_t *order = malloc((size_t)s->n * sizeof *order);
    int64_t *next = malloc((size_t)V * sizeof *next);
    double *acc = malloc((size_t)nt * (size_t)D * sizeof *acc);
    int rc = 0;
    if (!start || !order || !next || !acc) {
        rc = dl_error("embedding_backward: out of memory for %lld ids and %lld rows",
                      (long long)s->n, (long long)V);
        goto done;
    }
    for (int64_t k = 0; k < s->n; k++)
        if (ids[k] != padding_idx && !(bag_of && bag_of[k] < 0)) start[ids[k] + 1]++;
    for (int64_t v = 0; v < V; v++) {
        start[v + 1] += start[v];
        next[v] = start[v];
    }
    for (int64_t k = 0; k < s->n; k++)
        if (ids[k] != padding_idx && !(bag_of && bag_of[k] < 0)) order[next[ids[k]]++] = k;
#pragma omp parallel for num_threads(nt) schedule(dynamic, 16) if (s->n * D >= DL_PARALLEL_GRAIN)
    for (int64_t v = 0; v < V; v++) {
        int64_t cnt = start[v + 1] - start[v];
        if (cnt == 0) continue;
        double *a = acc + (size_t)omp_get_thread_num() * (size_t)D;
        for (int64_t j = 0; j < D; j++) a[j] = 0;
        for (int64_t i = start[v]; i < start[v + 1]; i++) {
            int64_t k = order[i], row = bag_of ? bag_of[k] : k;
            double c = psw ? ld(psw, k, f64) : 1.0;
            if (bag_size) c /= (double)bag_size[row];
            acc_row(a, gy, row, D, c, f64);
        }
        if (by_freq)
            for (int64_t j = 0; j < D; j++) a[j] /= (double)cnt;
        store_row(gw, v, a, D, f64);
    }
done:
    free(start);
    free(order);
    free(next);
    free(acc);
    return rc;
}

/* --- max_norm ----------------------------------------------------------------------- */

int dl_cpu_embedding_renorm(dl_dtype dt, void *weight, const int64_t *ids, const dl_emb_shape *s,
                            double max_norm, double norm_type) {
    const bool f64 = dt == DL_DTYPE_F64;
    const int64_t D = s->dim;
    unsigned char *seen = calloc((size_t)s->num, 1);
    if (!seen) return dl_error("embedding_renorm_: out of memory for %lld rows", (long long)s->num);
    for (int64_t k = 0; k < s->n; k++) {
        int64_t v = ids[k];
        if (seen[v]) continue;
        seen[v] = 1;
        double norm = 0;
        for (int64_t j = 0; j < D; j++) {
            double a = fabs(ld(weight, v * D + j, f64));
            if (isinf(norm_type))
                norm = a > norm ? a : norm;
            else
                norm += pow(a, norm_type);
        }
        if (!isinf(norm_type)) norm = pow(norm, 1.0 / norm_type);
        if (norm > max_norm) {
            double scale = max_norm / (norm + 1e-7);
            for (int64_t j = 0; j < D; j++)
                st(weight, v * D + j, ld(weight, v * D + j, f64) * scale, f64);
        }
    }
    free(seen);
    return 0;
}
