/* ops/conv.h - the conv family: conv2d's forward and backward as plain
 * functions (outputs first), the fused inference forward and the node-recording
 * dl_conv2d.  Each function validates its operands (shapes, dtypes,
 * parameters; messages name the op and the facts), infers the result's shape,
 * allocates new results and dispatches to the CPU kernels (cpu/conv.c) or the
 * CUDA ones (cuda/conv.cu).
 *
 * Dtypes: float32 and float64 compute natively (float16/bfloat16 compute in
 * float32 and round back once); x, w and b share one dtype.  Spatial inputs
 * are (N,C,H,W), or (C,H,W) unbatched.  Conventions: ops/op_util.h. */
#ifndef DL_OPS_CONV_H
#define DL_OPS_CONV_H

#include "core/tensor.h"
#include "kernels/conv.h"

#include <stdbool.h>

/* --- conv2d ------------------------------------------------------------------ */

typedef struct dl_conv2d_params {
    int64_t stride[2];   /* >= 1 */
    int64_t padding[2];  /* >= 0, zero padding on both sides */
    int64_t dilation[2]; /* >= 1 */
    int64_t groups;      /* >= 1, divides C and O */
} dl_conv2d_params;

/* y (N,O,OH,OW) = conv2d(x (N,C,H,W), w (O,C/groups,KH,KW)) + b (O) or NULL,
 * OH = floor((H + 2*padding - dilation*(KH-1) - 1) / stride) + 1. */
dl_tensor *dl_conv2d_forward(dl_tensor *x, dl_tensor *w, dl_tensor *b, const dl_conv2d_params *p);

/* Inference fusion: relu(conv2d(x, w, b) + add) with add (the output's
 * shape) or NULL and the ReLU optional; float32 4-D CPU convolutions run the
 * add and ReLU as oneDNN post-ops (no extra pass over y), others compute the
 * same with the plain ops.  No autograd: the Lua layer refuses it when a
 * gradient would be needed.  reuse_add: the caller never reads add again, so
 * the result may be written into add's memory when no other tensor shares
 * it (the result is then add itself; its old contents are gone). */
dl_tensor *dl_conv2d_forward_post(dl_tensor *x, dl_tensor *w, dl_tensor *b,
                                  const dl_conv2d_params *p, dl_tensor *add, bool relu,
                                  bool reuse_add);

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

/* The oneDNN primitive cache (shared by the CPU's conv, batchnorm and pool
 * kernels): entries held now, and
 * the bound LRU eviction keeps it to. */
int dl_conv2d_cache_size(void);
int dl_conv2d_cache_capacity(void);
/* The CUDA plan cache's statistics (kernels/conv.h); all zero without a GPU. */
void dl_conv2d_plan_stats(dl_conv_plan_stats *out);

/* Records a node when an input requires grad (dl.nn.functional.conv2d); its
 * backward is dl_conv2d_backward. */
dl_tensor *dl_conv2d(dl_tensor *x, dl_tensor *w, dl_tensor *b, const dl_conv2d_params *p);

#endif
