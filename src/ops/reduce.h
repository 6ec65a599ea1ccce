/* ops/reduce.h - the reduction op family: sum, mean, prod, max/min (with
 * indices), argmax/argmin, amax/amin, var/std, norm, all/any, logsumexp,
 * median, and the scans cumsum/cumprod.
 *
 * Conventions (C side, PyTorch semantics):
 *  - A set of dims is (ndims, dims): 0-based, negatives count from the end;
 *    ndims == 0 (dims may be NULL) reduces over every dim.  A repeated dim is
 *    an error.  A 0-dim tensor accepts dim 0 or -1.
 *  - keepdim keeps reduced dims with size 1.
 *  - Returned indices (max/min with a dim, argmax/argmin, median) are int64
 *    and 0-based; the Lua bindings make them 1-based.  Ties give the first
 *    occurrence; a NaN counts as the largest (and smallest) value.
 *  - dtype arguments take DL_REDUCE_DTYPE_NONE for "the default".
 *  - Every function returns a new tensor (or 0), or NULL (-1) with
 *    dl_last_error() naming the op.  Inputs may be any strided view.
 *  - Autograd: floating results record their backward when grad mode is on
 *    and x requires grad (max/min/median with a dim: the values only);
 *    indices, integer results and all/any never do. */
#ifndef DL_OPS_REDUCE_H
#define DL_OPS_REDUCE_H

#include "core/tensor.h"

#include <stdbool.h>

#define DL_REDUCE_DTYPE_NONE DL_DTYPE_COUNT

/* sum/prod: integer and bool inputs give int64.  With dtype the input is
 * first converted to dtype, and the result has that dtype. */
dl_tensor *dl_sum(dl_tensor *x, int ndims, const int *dims, bool keepdim, dl_dtype dtype);
dl_tensor *dl_prod(dl_tensor *x, int ndims, const int *dims, bool keepdim, dl_dtype dtype);
/* mean: floating input, or a floating dtype. */
dl_tensor *dl_mean(dl_tensor *x, int ndims, const int *dims, bool keepdim, dl_dtype dtype);

/* Values only; an empty reduced dim is an error. */
dl_tensor *dl_amax(dl_tensor *x, int ndims, const int *dims, bool keepdim);
dl_tensor *dl_amin(dl_tensor *x, int ndims, const int *dims, bool keepdim);
/* max/min over everything: a 0-dim tensor (error when x is empty). */
dl_tensor *dl_max_all(dl_tensor *x);
dl_tensor *dl_min_all(dl_tensor *x);
/* max/min along dim: values (x's dtype) and int64 indices. */
int dl_max_dim(dl_tensor *x, int dim, bool keepdim, dl_tensor **values, dl_tensor **indices);
int dl_min_dim(dl_tensor *x, int dim, bool keepdim, dl_tensor **values, dl_tensor **indices);
/* argmax/argmin: dim == NULL gives the index into the flattened tensor
 * (keepdim then gives a tensor of x->ndim ones). */
dl_tensor *dl_argmax(dl_tensor *x, const int *dim, bool keepdim);
dl_tensor *dl_argmin(dl_tensor *x, const int *dim, bool keepdim);

/* all/any: bool result, true where all/any elements are nonzero. */
dl_tensor *dl_all(dl_tensor *x, int ndims, const int *dims, bool keepdim);
dl_tensor *dl_any(dl_tensor *x, int ndims, const int *dims, bool keepdim);

/* var/std: floating input; divides by max(0, N - correction)
 * (correction 1: unbiased, 0: population). */
dl_tensor *dl_var(dl_tensor *x, int ndims, const int *dims, double correction, bool keepdim);
dl_tensor *dl_std(dl_tensor *x, int ndims, const int *dims, double correction, bool keepdim);

/* Vector p-norm over dims: p = 2 (Frobenius), 1, 0 (count of nonzeros),
 * +-INFINITY (max/min |x|), any other p: (sum |x|^p)^(1/p).  Floating input. */
dl_tensor *dl_norm(dl_tensor *x, double p, int ndims, const int *dims, bool keepdim);

/* log(sum(exp(x))) computed stably; integer input gives float32. */
dl_tensor *dl_logsumexp(dl_tensor *x, int ndims, const int *dims, bool keepdim);

/* Lower median: over everything (0-dim; NaN for an empty x) or along dim
 * with indices. */
dl_tensor *dl_median_all(dl_tensor *x);
int dl_median_dim(dl_tensor *x, int dim, bool keepdim, dl_tensor **values, dl_tensor **indices);

/* Running sum/product along dim (same shape as x).  Integer and bool inputs
 * give int64; with dtype the input is first converted to dtype. */
dl_tensor *dl_cumsum(dl_tensor *x, int dim, dl_dtype dtype);
dl_tensor *dl_cumprod(dl_tensor *x, int dim, dl_dtype dtype);

#endif
