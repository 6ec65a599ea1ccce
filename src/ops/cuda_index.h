/* cuda_index.h - the CUDA kernels of the indexing family (src/ops/index.c): index_select/add,
 * gather, scatter, sort/topk, masked ops, nonzero, one_hot, triangles; and padding
 * (src/ops/nn_func.c). The table is filled in by cuda/index.cu; see cuda_backend.h for the contract
 * (entry points mirror their CPU twins in src/cpu/index.h and src/cpu/pad.h and
 * return 0 or -1 with an error).
 *
 * Invariants: every tensor passed is on one CUDA device; the op layer has
 * checked shapes, dtypes and every index before a kernel is queued, so
 * kernels never index out of bounds.  Index arrays are device memory (a
 * contiguous int64 CUDA tensor's data).  Entries that return a number on the
 * host (count_nonzero, index_range) synchronise with the compute stream;
 * the others are asynchronous. */
#ifndef DL_OPS_CUDA_INDEX_H
#define DL_OPS_CUDA_INDEX_H

#include "cuda_backend.h"

typedef struct dl_cuda_index_kernels {
    const char *family;
    /* out is (outer, nidx, inner), x contiguous (outer, S, inner); idx is
     * nidx int64 in device memory, each in [0, S). */
    int (*index_select)(dl_tensor *out, const dl_tensor *x, int dim, const int64_t *idx,
                        int64_t nidx);
    /* out[.., idx[k], ..] += src[.., k, ..] (atomics: float32, float64, int64
     * and int32; other dtypes refused); out and src contiguous. */
    int (*index_add)(dl_tensor *out, int dim, const int64_t *idx, int64_t nidx,
                     const dl_tensor *src);
    /* As dl_cpu_gather / dl_cpu_scatter; index contiguous int64 on the device.
     * scatter with add uses atomics (float32/float64/int64/int32); plain
     * scatter with repeated positions keeps one of the written values. */
    int (*gather)(dl_tensor *out, const dl_tensor *x, int dim, const dl_tensor *index);
    int (*scatter)(dl_tensor *self, int dim, const dl_tensor *index, const dl_tensor *src,
                   bool add);
    /* As dl_cpu_sort: stable, NaN last ascending and first descending, ties
     * in ascending index order; values may be NULL; outputs contiguous. */
    int (*sort)(const dl_tensor *x, int dim, bool descending, int64_t k, dl_tensor *values,
                dl_tensor *indices);
    /* out (zeroed int64, labels.shape + [C]); labels contiguous int64 in range. */
    int (*one_hot)(dl_tensor *out, const dl_tensor *labels);
    /* *count = number of non-zero elements of x (NaN counts); synchronises. */
    int (*count_nonzero)(const dl_tensor *x, int64_t *count);
    /* out is (count, ndim) int64, count from count_nonzero (x unchanged since). */
    int (*nonzero)(dl_tensor *out, const dl_tensor *x);
    /* As dl_cpu_masked_select / dl_cpu_masked_scatter (mask bool, any strides). */
    int (*masked_select)(dl_tensor *out, const dl_tensor *x, const dl_tensor *mask);
    int (*masked_scatter)(dl_tensor *out, const dl_tensor *mask, const dl_tensor *src);
    /* As dl_cpu_tri_. */
    int (*tri_)(dl_tensor *x, int64_t diagonal, bool upper);
    /* *lo and *hi = min and max of a non-empty contiguous int64 tensor; synchronises. */
    int (*index_range)(const dl_tensor *idx, int64_t *lo, int64_t *hi);
    /* t (contiguous int64) += delta (+1 or -1), saturating, in place. */
    int (*shift_i64)(dl_tensor *t, int64_t delta);
    /* Padding through index maps, as dl_cpu_pad_gather / dl_cpu_pad_scatter_*:
     * out/in (gin/gout) contiguous, viewed as (outer, D2, D1, D0); the maps are
     * host arrays (copied to the device here).  pad_scatter takes float32 or
     * float64 and zeroes gin first. */
    int (*pad_gather)(dl_tensor *out, const dl_tensor *in, int64_t outer, const int64_t osz[3],
                      const int64_t isz[3], const int64_t *const map[3]);
    int (*pad_scatter)(dl_tensor *gin, const dl_tensor *gout, int64_t outer, const int64_t osz[3],
                       const int64_t isz[3], const int64_t *const map[3]);
} dl_cuda_index_kernels;

#endif
