/* ops/layernorm.h - the layernorm family: layer norm and RMS norm over the
 * trailing dims of a tensor, forward, backward and the node-recording entry
 * points.  Dispatches to cpu/layernorm.c or cuda/layernorm.cu.
 *
 * x is (*, normalized_shape): the last nd dims of x must equal
 * normalized_shape[0..nd) (nd >= 1); weight and bias (either may be NULL: 1
 * and 0) have shape normalized_shape.  Each of the rows (the leading dims)
 * is normalised over its cols = prod(normalized_shape) elements.
 * Dtypes: float32 and float64 compute natively; float16/bfloat16 compute in
 * float32 (on CUDA the kernels read and write the half data directly) and the
 * result rounds once.  Weight and bias have x's dtype, or float32 for a half x.
 * The saved statistics mean and rstd have shape (*, 1, ..., 1) (x's leading
 * dims, then nd ones: PyTorch's native_layer_norm) and x's compute dtype.
 * Conventions: ops/op_util.h. */
#ifndef DL_OPS_LAYERNORM_H
#define DL_OPS_LAYERNORM_H

#include "core/tensor.h"

#include <stdbool.h>

/* The normalisation: normalized_shape, eps (>= 0) and which norm. */
typedef struct dl_norm_params {
    int nd;
    int64_t shape[DL_MAX_DIMS];
    double eps;
    bool rms; /* RMS norm: no mean subtracted, no bias */
} dl_norm_params;

/* Fills p from nd sizes; 0, or -1 with an error naming op when nd is out of
 * [1, DL_MAX_DIMS] or a size is negative. */
int dl_norm_params_init(dl_norm_params *p, const char *op, int nd, const int64_t *shape, double eps,
                        bool rms);

/* RMS norm's eps when none is given: the machine epsilon of the dtype it
 * computes in (float64: 2^-52; every other dtype: float32's 2^-23). */
double dl_rms_norm_default_eps(dl_dtype dt);

/* --- forward and backward ------------------------------------------------------------ */

/* y (like x), mean (NULL for RMS norm) and rstd = 1/sqrt(var + eps) (RMS
 * norm: 1/sqrt(mean(x^2) + eps)).  bias must be NULL for RMS norm. */
int dl_layer_norm_forward(dl_tensor *x, dl_tensor *weight, dl_tensor *bias, const dl_norm_params *p,
                          dl_tensor **y, dl_tensor **mean, dl_tensor **rstd);

/* Gradients given gy (like x), the forward's mean (NULL for RMS norm) and
 * rstd, and the weight (NULL: ones).  need[0..2]: gx, gweight, gbias (RMS
 * norm: gbias never).  gweight/gbias take the weight's dtype (x's when
 * NULL, float32 for a half x). */
int dl_layer_norm_backward(dl_tensor *gy, dl_tensor *x, dl_tensor *mean, dl_tensor *rstd,
                           dl_tensor *weight, const dl_norm_params *p, const bool need[3],
                           dl_tensor **gx, dl_tensor **gweight, dl_tensor **gbias);

/* --- with autograd ------------------------------------------------------------------- */

/* PyTorch's F.layer_norm and F.rms_norm: record a node when an input
 * requires grad (its backward: dl_layer_norm_backward). */
dl_tensor *dl_layer_norm(dl_tensor *x, dl_tensor *weight, dl_tensor *bias, const dl_norm_params *p);
dl_tensor *dl_rms_norm(dl_tensor *x, dl_tensor *weight, const dl_norm_params *p);

#endif
