/* nn_conv.h - the convolution, batch-norm and pooling op family: forward and
 * backward of each layer as plain functions (outputs first), which autograd
 * wires together.  Each function validates its operands (shapes, dtypes,
 * parameters; messages name the op and the facts), infers the result's shape,
 * allocates new contiguous results and dispatches to the CPU kernels
 * (src/cpu/conv.c, batchnorm.c, pool.c).
 *
 * Dtypes: float32 and float64 compute natively; float16/bfloat16 are
 * converted to float32, computed there and rounded back once.  Operands of an
 * op share one dtype (batch-norm parameters and running stats may be float32
 * for a float16/bfloat16 input).  Inputs may be any strided views (they are
 * made contiguous) and are never modified, except batch norm's running stats,
 * which training updates in place as PyTorch does.
 * Spatial inputs are (N,C,H,W), or (C,H,W) unbatched where PyTorch allows it.
 * Dimensions and indices are 0-based here.  Every function returning a tensor
 * returns a new reference, or NULL with dl_last_error() set; int functions
 * return 0 or -1, and on failure set none of their outputs. */
#ifndef DL_OPS_NN_CONV_H
#define DL_OPS_NN_CONV_H

#include "core/tensor.h"

#include <stdbool.h>

/* --- conv2d ------------------------------------------------------------------ */

typedef struct dl_conv2d_params {
    int64_t stride[2];   /* >= 1 */
    int64_t padding[2];  /* >= 0, zero padding on both sides */
    int64_t dilation[2]; /* >= 1 */
    int64_t groups;      /* >= 1, divides C and O */
} dl_conv2d_params;

/* stride 1, padding 0, dilation 1, groups 1 */
dl_conv2d_params dl_conv2d_default_params(void);

/* y (N,O,OH,OW) = conv2d(x (N,C,H,W), w (O,C/groups,KH,KW)) + b (O) or NULL,
 * OH = floor((H + 2*padding - dilation*(KH-1) - 1) / stride) + 1. */
dl_tensor *dl_conv2d_forward(dl_tensor *x, dl_tensor *w, dl_tensor *b, const dl_conv2d_params *p);

/* Inference fusion: relu(conv2d(x, w, b) + add) with add (the output's
 * shape) or NULL and the ReLU optional; float32 4-D CPU convolutions run the
 * add and ReLU as oneDNN post-ops (no extra pass over y), others compute the
 * same with the plain ops.  No autograd: the Lua layer refuses it when a
 * gradient would be needed. */
dl_tensor *dl_conv2d_forward_post(dl_tensor *x, dl_tensor *w, dl_tensor *b,
                                  const dl_conv2d_params *p, dl_tensor *add, bool relu);

/* Gradients given gy (N,O,OH,OW): gx like x, gw like w, gb (O).  need[i]
 * false leaves the matching output NULL.  x and w are the forward's inputs. */
int dl_conv2d_backward(dl_tensor *gy, dl_tensor *x, dl_tensor *w, const dl_conv2d_params *p,
                       const bool need[3], dl_tensor **gx, dl_tensor **gw, dl_tensor **gb);

/* Benchmarks: how float32 convolutions hand tensors to oneDNN, "plain" (our
 * NCHW buffers), "any" (oneDNN's blocked layouts, with reorders) or "auto"
 * (per shape, the default).  name NULL only reads.  Returns the previous
 * setting, or NULL with an error for an unknown name. */
const char *dl_conv2d_layout(const char *name);

/* Benchmarks and tests: whether eligible float32 3x3 convolutions run
 * oneDNN's Winograd kernels (src/cpu/conv.c); on < 0 only reads, else sets.
 * Returns the previous setting. */
bool dl_conv2d_winograd(int on);

/* The oneDNN primitive cache shared by this family: entries held now, and
 * the bound LRU eviction keeps it to. */
int dl_nn_conv_cache_size(void);
int dl_nn_conv_cache_capacity(void);

/* --- batch_norm ----------------------------------------------------------------
 * x is (N,C), (N,C,L) or (N,C,H,W); weight, bias, running_mean, running_var,
 * save_mean, save_invstd are (C).  weight/bias NULL mean 1 and 0. */

typedef struct dl_batch_norm_params {
    double momentum; /* running = (1 - m) * running + m * batch statistic */
    /* PyTorch's momentum=None: a cumulative average, m = 1/num_batches_tracked
     * (the count including this batch, >= 1); momentum is then ignored. */
    bool cumulative;
    int64_t num_batches_tracked;
    double eps; /* >= 0 */
} dl_batch_norm_params;

/* momentum 0.1, eps 1e-5, not cumulative */
dl_batch_norm_params dl_batch_norm_default_params(void);

/* Training: normalises with the batch's statistics over (N, spatial).
 * Outputs y (like x), save_mean and save_invstd = 1/sqrt(biased var + eps)
 * (x's dtype; float32 for a float16/bfloat16 x).  running_mean/running_var,
 * when given, are updated in place (running_var with the unbiased variance).
 * A single value per channel (N*spatial == 1) is an error, as in PyTorch; an
 * empty batch passes through (y empty, running stats untouched, save_mean 0
 * and save_invstd 1/sqrt(eps)). */
int dl_batch_norm_forward_train(dl_tensor *x, dl_tensor *weight, dl_tensor *bias,
                                dl_tensor *running_mean, dl_tensor *running_var,
                                const dl_batch_norm_params *p, dl_tensor **y, dl_tensor **save_mean,
                                dl_tensor **save_invstd);

/* Evaluation: y = (x - running_mean) / sqrt(running_var + eps) * weight + bias. */
dl_tensor *dl_batch_norm_forward_eval(dl_tensor *x, dl_tensor *weight, dl_tensor *bias,
                                      dl_tensor *running_mean, dl_tensor *running_var, double eps);

/* Gradients given gy (like x).  training: the batch-statistics formula with
 * save_mean/save_invstd from the training forward (running stats unused, may
 * be NULL); otherwise the running-statistics one (save_* unused, may be NULL).
 * gx like x; gweight, gbias (C) (computed even when weight is NULL). */
int dl_batch_norm_backward(dl_tensor *gy, dl_tensor *x, dl_tensor *weight, dl_tensor *running_mean,
                           dl_tensor *running_var, dl_tensor *save_mean, dl_tensor *save_invstd,
                           bool training, double eps, const bool need[3], dl_tensor **gx,
                           dl_tensor **gweight, dl_tensor **gbias);

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

/* kernel k, stride k, padding 0, dilation 1, floor mode, count_include_pad */
dl_pool2d_params dl_pool2d_default_params(int64_t kh, int64_t kw);

/* Output size along one dim, PyTorch's pooling_output_shape. */
int64_t dl_pool_output_size(int64_t in, int64_t k, int64_t pad, int64_t stride, int64_t dilation,
                            bool ceil_mode);

/* y (N,C,OH,OW) and indices (N,C,OH,OW) int64: the flat 0-based position
 * (ih * W + iw) of each maximum within its (H,W) plane, as PyTorch's.  The
 * first maximum in window order wins; NaN counts as the maximum. */
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

/* --- with autograd ---------------------------------------------------------------
 * The same ops recording a node when an input requires grad (the entry points
 * of dl.nn.functional); their backwards are the functions above. */
dl_tensor *dl_conv2d(dl_tensor *x, dl_tensor *w, dl_tensor *b, const dl_conv2d_params *p);
/* training: batch statistics, running stats (when given) updated in place
 * with p->momentum; otherwise the running statistics. */
dl_tensor *dl_batch_norm(dl_tensor *x, dl_tensor *weight, dl_tensor *bias, dl_tensor *running_mean,
                         dl_tensor *running_var, bool training, const dl_batch_norm_params *p);
/* indices (may be NULL) receives the 0-based plane positions. */
dl_tensor *dl_max_pool2d(dl_tensor *x, const dl_pool2d_params *p, dl_tensor **indices);
dl_tensor *dl_avg_pool2d(dl_tensor *x, const dl_pool2d_params *p);
dl_tensor *dl_adaptive_avg_pool2d(dl_tensor *x, int64_t oh, int64_t ow);
dl_tensor *dl_adaptive_max_pool2d(dl_tensor *x, int64_t oh, int64_t ow, dl_tensor **indices);

#endif
