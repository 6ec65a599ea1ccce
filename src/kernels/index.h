/* kernels/index.h - the kernel interface of the index family (ops/index.c):
 * the CUDA table of selection, gather/scatter, sorting, masking and the
 * triangular fills (cpu/index.h has the CPU twins).
 *
 * Shared by ops/, cpu/ and cuda/; the table's contract is in kernels/cuda.h. */
#ifndef DL_KERNELS_INDEX_H
#define DL_KERNELS_INDEX_H

#include "core/tensor.h"

#include <stdbool.h>
#include <stdint.h>

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
} dl_cuda_index_kernels;

extern const dl_cuda_index_kernels *dl_cuda_index;

#endif
