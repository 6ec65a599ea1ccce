/* cpu/index.h - CPU kernels of the joining and indexing family, called only
 * by src/ops/index.c after it has validated shapes, dtypes and every index.
 * Kernels never fail on user input; the ones that allocate scratch memory
 * return -1 (with an error) when that fails.  Index tensors are contiguous
 * int64, already known to be in range; outputs are contiguous unless said. */
#ifndef DL_CPU_INDEX_H
#define DL_CPU_INDEX_H

#include "core/tensor.h"

#include <stdbool.h>
#include <stddef.h>

/* Asks for the n bytes at p in cache, a prefetch per 64-byte line: the
 * row gathers (index_select, embedding) fetch the row after next while
 * they copy one, since rows picked by index defeat the hardware's stream
 * prefetcher at every row start. */
#define DL_CPU_PREFETCH_MAX ((size_t)64 << 10)
static inline void dl_cpu_prefetch_bytes(const void *p, size_t n) {
    if (n > DL_CPU_PREFETCH_MAX) n = DL_CPU_PREFETCH_MAX; /* the rest streams in anyway */
    for (size_t b = 0; b < n; b += 64) __builtin_prefetch((const char *)p + b);
}

/* out is (outer, nidx, inner) of x's dtype; x is contiguous (outer, S, inner)
 * with S = x.shape[dim] (a 0-dim x counts as [1]). */
void dl_cpu_index_select(dl_tensor *out, const dl_tensor *x, int dim, const int64_t *idx,
                         int64_t nidx);
/* out[.., idx[k], ..] += src[.., k, ..] along dim, for k < nidx (repeats
 * accumulate); out is contiguous (outer, S, inner), src contiguous (outer,
 * nidx, inner), one dtype. */
void dl_cpu_index_add(dl_tensor *out, int dim, const int64_t *idx, int64_t nidx,
                      const dl_tensor *src);
/* out and index share a shape (0-dim counts as [1]); x any strides. */
void dl_cpu_gather(dl_tensor *out, const dl_tensor *x, int dim, const dl_tensor *index);
/* self (any non-overlapping strides) gets src (any strides, at least index's
 * sizes; may be expanded) at the positions index names along dim; add
 * accumulates instead of assigning.  self and src share a dtype. */
void dl_cpu_scatter(dl_tensor *self, int dim, const dl_tensor *index, const dl_tensor *src,
                    bool add);
/* Sorts every slice of x (any strides, ndim >= 1) along dim and writes the
 * first k entries of each to values (may be NULL) and indices, both of x's
 * shape with size k along dim.  NaN sorts last ascending, first descending;
 * the sort is stable. */
int dl_cpu_sort(const dl_tensor *x, int dim, bool descending, int64_t k, dl_tensor *values,
                dl_tensor *indices);
/* out (zeroed, int64) is labels.shape + [C]; labels contiguous int64. */
void dl_cpu_one_hot(dl_tensor *out, const dl_tensor *labels);
/* Number of non-zero elements of x (any strides; NaN counts as non-zero). */
int64_t dl_cpu_count_nonzero(const dl_tensor *x);
/* out is (count, ndim) int64: the positions of x's non-zero elements. */
void dl_cpu_nonzero(dl_tensor *out, const dl_tensor *x);
/* out is 1-D; x and mask (bool) share a shape, any strides. */
void dl_cpu_masked_select(dl_tensor *out, const dl_tensor *x, const dl_tensor *mask);
/* The inverse of masked_select: out's elements where mask (bool, out's
 * shape, any strides) is true get src's values (contiguous 1-D, one per true
 * element) in row-major order; out has non-overlapping strides. */
void dl_cpu_masked_scatter(dl_tensor *out, const dl_tensor *mask, const dl_tensor *src);
/* Zeroes, in place, the elements of the last two dims of x (ndim >= 2, any
 * non-overlapping strides) outside the lower (upper) triangle. */
void dl_cpu_tri_(dl_tensor *x, int64_t diagonal, bool upper);

#endif
