/* ops/pool.h - the pool family: max, average and adaptive 2-D pooling,
 * forward and backward, and the node-recording entry points.  Dispatches to
 * cpu/pool.c or cuda/pool.cu.
 *
 * Dtypes: float32 and float64 compute natively (float16/bfloat16 compute in
 * float32 and round back once).  Spatial inputs are (N,C,H,W), or (C,H,W)
 * unbatched.  Conventions: ops/op_util.h. */
#ifndef DL_OPS_POOL_H
#define DL_OPS_POOL_H

#include "core/tensor.h"

#include <stdbool.h>

/* --- pooling ------------------------------------------------------------------- */

typedef struct dl_pool2d_params {
    int64_t kernel[2];   /* >= 1 */
    int64_t stride[2];   /* >= 1 (PyTorch's default stride = kernel is the caller's) */
    int64_t padding[2];  /* 0 .. kernel/2 */
    int64_t dilation[2]; /* >= 1; max pooling only (avg requires 1) */
    bool ceil_mode;
    bool count_include_pad;   /* avg: padding counts in the divisor */
    int64_t divisor_override; /* avg: 0 = none, else the divisor */
} dl_pool2d_params;

/* Whether CUDA max pooling reads channels-last input in place and in its own
 * dtype (kernels/pool.h, dl_pool_nhwc; default on, DLUA_POOL_NHWC=0 off);
 * returns the previous setting. */
bool dl_pool_set_nhwc(bool on);

/* kernel k, stride k, padding 0, dilation 1, floor mode, count_include_pad */
dl_pool2d_params dl_pool2d_default_params(int64_t kh, int64_t kw);

/* Output size along one dim, PyTorch's pooling_output_shape. */
int64_t dl_pool_output_size(int64_t in, int64_t k, int64_t pad, int64_t stride, int64_t dilation,
                            bool ceil_mode);

/* y (N,C,OH,OW) and indices (N,C,OH,OW) int64: the flat 0-based position
 * (ih * W + iw) of each maximum within its (H,W) plane, as PyTorch's.  The
 * first maximum in window order wins; NaN counts as the maximum.  indices
 * NULL: not wanted (float32 channels-last CPU pooling then skips them). */
int dl_max_pool2d_forward(dl_tensor *x, const dl_pool2d_params *p, dl_tensor **y,
                          dl_tensor **indices);
/* gx (like x): gy scattered (added) to the positions in indices. */
dl_tensor *dl_max_pool2d_backward(dl_tensor *gy, dl_tensor *x, dl_tensor *indices,
                                  const dl_pool2d_params *p);

/* Average pooling.  The divisor is divisor_override when set; otherwise the
 * window's size clipped to the padded input (count_include_pad) or to the
 * input (not), as PyTorch's. */
dl_tensor *dl_avg_pool2d_forward(dl_tensor *x, const dl_pool2d_params *p);
dl_tensor *dl_avg_pool2d_backward(dl_tensor *gy, dl_tensor *x, const dl_pool2d_params *p);

/* Adaptive pooling to (oh, ow): output cell i covers input rows
 * [floor(i*H/oh), ceil((i+1)*H/oh)), likewise for columns. */
dl_tensor *dl_adaptive_avg_pool2d_forward(dl_tensor *x, int64_t oh, int64_t ow);
dl_tensor *dl_adaptive_avg_pool2d_backward(dl_tensor *gy, dl_tensor *x);
int dl_adaptive_max_pool2d_forward(dl_tensor *x, int64_t oh, int64_t ow, dl_tensor **y,
                                   dl_tensor **indices);
dl_tensor *dl_adaptive_max_pool2d_backward(dl_tensor *gy, dl_tensor *x, dl_tensor *indices);

/* The same ops recording a node when x requires grad; indices (may be NULL)
 * receives the 0-based plane positions. */
dl_tensor *dl_max_pool2d(dl_tensor *x, const dl_pool2d_params *p, dl_tensor **indices);
dl_tensor *dl_avg_pool2d(dl_tensor *x, const dl_pool2d_params *p);
dl_tensor *dl_adaptive_avg_pool2d(dl_tensor *x, int64_t oh, int64_t ow);
dl_tensor *dl_adaptive_max_pool2d(dl_tensor *x, int64_t oh, int64_t ow, dl_tensor **indices);

#endif
