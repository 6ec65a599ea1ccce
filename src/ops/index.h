/* index.h - the joining and indexing op family: cat, stack, split, chunk,
 * unbind, index_select, gather, scatter(_add), index_fill_, index_copy_, sort,
 * argsort, topk, one_hot, masked_select, nonzero, flip, roll, tril, triu.
 *
 * Conventions:
 *  - Dims and element indices are 0-based here (the Lua bindings convert).
 *    Error messages report them the user's way: a dim d as d + 1, and a bad
 *    index i as i + 1 (the 1-based value the Lua caller wrote).
 *  - Index tensors are int64 (index_select also takes int32); negative
 *    indices are errors except where PyTorch wraps them (index_fill_).
 *    Every index is checked before anything is written.
 *  - Returned index tensors (sort, argsort, topk, nonzero) are int64, 0-based.
 *  - Functions returning dl_tensor* return a new reference or NULL with
 *    dl_last_error() set; int functions return 0 (or a count) or -1.
 *  - Inputs may be any strided view; outputs are fresh contiguous tensors,
 *    except split/chunk/unbind, which return views.
 *  - Autograd: with grad mode on and a floating input requiring grad, the
 *    ops record their backward (split/chunk/unbind: one node whose outputs
 *    are all the pieces; sort/topk: the values only).  In-place forms error
 *    on a leaf that requires grad. */
#ifndef DL_OPS_INDEX_H
#define DL_OPS_INDEX_H

#include "core/tensor.h"

#include <stdbool.h>

/* --- joining and splitting ---------------------------------------------- */

/* Concatenates n tensors along dim, promoting dtypes as PyTorch.  1-D empty
 * tensors (shape [0]) are skipped, as PyTorch does. */
dl_tensor *dl_cat(int n, dl_tensor *const *ts, int dim);
/* Stacks n tensors of one shape along a new dim (0..ndim). */
dl_tensor *dl_stack(int n, dl_tensor *const *ts, int dim);

/* The splitters store a malloc'd array of new references (views) in *out and
 * return their count, or -1.  Free the list with dl_tensors_free. */
int dl_split(dl_tensor *t, int64_t split_size, int dim, dl_tensor ***out);
int dl_split_with_sizes(dl_tensor *t, int nsizes, const int64_t *sizes, int dim, dl_tensor ***out);
int dl_chunk(dl_tensor *t, int64_t chunks, int dim, dl_tensor ***out);
int dl_unbind(dl_tensor *t, int dim, dl_tensor ***out);
void dl_tensors_free(int n, dl_tensor **list);

/* --- gathering and scattering ------------------------------------------- */

/* out has x's shape with size(dim) = numel(index); index is 0/1-D. */
dl_tensor *dl_index_select(dl_tensor *x, int dim, dl_tensor *index);
/* out[...i...] = x[...index[...i...]...] along dim; out has index's shape. */
dl_tensor *dl_gather(dl_tensor *x, int dim, dl_tensor *index);
/* self[...index[p]...] = src[p] along dim (src has self's dtype).  With
 * src == NULL, writes *value (a 0-dim tensor, converted to self's dtype). */
int dl_scatter_(dl_tensor *self, int dim, dl_tensor *index, dl_tensor *src);
int dl_scatter_value_(dl_tensor *self, int dim, dl_tensor *index, dl_tensor *value);
/* self[...index[p]...] += src[p] along dim; duplicates accumulate. */
int dl_scatter_add_(dl_tensor *self, int dim, dl_tensor *index, dl_tensor *src);
/* Out-of-place forms: a contiguous copy of self, then the in-place op. */
dl_tensor *dl_scatter(dl_tensor *self, int dim, dl_tensor *index, dl_tensor *src);
dl_tensor *dl_scatter_value(dl_tensor *self, int dim, dl_tensor *index, dl_tensor *value);
dl_tensor *dl_scatter_add(dl_tensor *self, int dim, dl_tensor *index, dl_tensor *src);
/* Slices index[i] of self along dim are filled with value (a 0-dim tensor) or
 * overwritten with slice i of src.  index_fill_ wraps negative indices. */
int dl_index_fill_(dl_tensor *self, int dim, dl_tensor *index, dl_tensor *value);
int dl_index_copy_(dl_tensor *self, int dim, dl_tensor *index, dl_tensor *src);
/* Out-of-place forms: a contiguous copy of self, written. */
dl_tensor *dl_index_fill(dl_tensor *self, int dim, dl_tensor *index, dl_tensor *value);
dl_tensor *dl_index_copy(dl_tensor *self, int dim, dl_tensor *index, dl_tensor *src);

/* --- ordering ------------------------------------------------------------ */

/* Sorts along dim.  NaN orders above every number; ties keep their input
 * order (the sort is always stable, so `stable` only documents intent). */
int dl_sort(dl_tensor *x, int dim, bool descending, bool stable, dl_tensor **values,
            dl_tensor **indices);
dl_tensor *dl_argsort(dl_tensor *x, int dim, bool descending, bool stable);
/* The k largest (or smallest) along dim; returned in order (sorted or not). */
int dl_topk(dl_tensor *x, int64_t k, int dim, bool largest, bool sorted, dl_tensor **values,
            dl_tensor **indices);

/* --- masks, labels, rearrangement ---------------------------------------- */

/* int64 labels (0..num_classes-1) -> int64 of shape labels.shape + [C];
 * num_classes < 0 means max label + 1. */
dl_tensor *dl_one_hot(dl_tensor *labels, int64_t num_classes);
/* 1-D tensor of x's elements where the (broadcast) bool mask is true. */
dl_tensor *dl_masked_select(dl_tensor *x, dl_tensor *mask);
/* (n, ndim) int64 of the indices of non-zero elements, row-major order. */
dl_tensor *dl_nonzero(dl_tensor *x);
/* Adds delta (+1 or -1) in place to every element of a contiguous int64
 * tensor on any device, saturating at the int64 limits (the bindings' 0- and
 * 1-based index conversions). */
int dl_index_shift_(dl_tensor *t, int64_t delta);
/* A copy with the given dims reversed. */
dl_tensor *dl_flip(dl_tensor *x, int ndims, const int *dims);
/* A copy rolled by shifts[i] along dims[i]; ndims == 0: over the flattened
 * tensor by shifts[0] (nshifts must then be 1). */
dl_tensor *dl_roll(dl_tensor *x, int nshifts, const int64_t *shifts, int ndims, const int *dims);
/* Lower/upper triangle of the last two dims (the rest zeroed); diagonal > 0
 * moves the boundary up-right. */
dl_tensor *dl_tril(dl_tensor *x, int64_t diagonal);
dl_tensor *dl_triu(dl_tensor *x, int64_t diagonal);
int dl_tril_(dl_tensor *x, int64_t diagonal);
int dl_triu_(dl_tensor *x, int64_t diagonal);

#endif
