/* iter.h - broadcasting and the strided N-ary loop every elementwise CPU kernel
 * runs on.  The loop collapses dimensions that are contiguous across all
 * operands, then calls an inner kernel on 1-D rows, in parallel with OpenMP
 * when the work is large enough. */
#ifndef DL_ITER_H
#define DL_ITER_H

#include "tensor.h"

#define DL_ITER_MAX_ARGS 6

/* Broadcasts two shapes (PyTorch rules) into out; returns the result's ndim,
 * or -1 with an error naming op and both shapes. */
int dl_broadcast_shapes(const char *op, int na, const int64_t *sa, int nb, const int64_t *sb,
                        int64_t *out);

/* Inner kernel: data[i] points at the first element of operand i's row,
 * strides[i] is operand i's step in BYTES along the row, n the row length. */
typedef void (*dl_loop_fn)(char **data, const int64_t *strides, int64_t n, void *ctx);

/* Runs fn over all elements of nargs CPU tensors that share one shape
 * (expand them first).  By convention operand 0 is the output. */
void dl_iter_foreach(int nargs, dl_tensor *const *args, dl_loop_fn fn, void *ctx);

#endif
