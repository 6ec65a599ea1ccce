/* ops/attention.h - the attention family: scaled dot-product attention,
 * PyTorch's F.scaled_dot_product_attention (2.x semantics), forward,
 * backward and the node-recording entry point.
 *
 *   q (..., L, E), k (..., S, E), v (..., S, Ev) -> out (..., L, Ev)
 *   out = dropout(softmax(scale * q k^T + mask)) v
 *
 * The batch dims (...) of q, k and v broadcast.  attn_mask broadcasts to
 * (..., L, S): bool (true: the key takes part) or floating (added to the
 * scores).  is_causal masks key j out of query i's row when j > i (the
 * top-left aligned lower triangle; not together with attn_mask).  scale
 * defaults to 1/sqrt(E).  Query rows whose keys are all masked give zeros
 * (PyTorch 2.5+), not NaN.  Floating inputs of one dtype; on the CPU
 * float16/bfloat16 compute in float32, on CUDA they are computed with
 * float32 accumulation.  Nothing of size (L, S) is allocated: the kernels
 * work in tiles and keep a log-sum-exp per query row for the backward.
 * Conventions: ops/op_util.h. */
#ifndef DL_OPS_ATTENTION_H
#define DL_OPS_ATTENTION_H

#include "core/rng.h"
#include "core/tensor.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct dl_sdpa_options {
    dl_tensor *attn_mask; /* NULL, bool or floating; no gradient flows into it */
    bool is_causal;
    double dropout_p; /* in [0, 1] */
    bool has_scale;   /* false: scale = 1/sqrt(E) */
    double scale;
    dl_generator *gen; /* dropout's stream; NULL: the default generator */
} dl_sdpa_options;

/* What the backward needs to know about a forward besides its tensors: the
 * resolved scale and the dropout stream it drew. */
typedef struct dl_sdpa_state {
    double scale;
    bool is_causal;
    double dropout_p;
    uint64_t seed, offset;
} dl_sdpa_state;

/* *out (q's dtype) and *lse ((..., L), float32, or float64 for float64
 * inputs) from q, k, v; *st describes the call for the backward. */
int dl_sdpa_forward(dl_tensor *q, dl_tensor *k, dl_tensor *v, const dl_sdpa_options *o,
                    dl_tensor **out, dl_tensor **lse, dl_sdpa_state *st);

/* Gradients of q, k, v (their shapes and dtype) from gout (out's shape), the
 * forward's inputs, attn_mask (NULL when none), out and lse. */
int dl_sdpa_backward(dl_tensor *gout, dl_tensor *q, dl_tensor *k, dl_tensor *v,
                     dl_tensor *attn_mask, dl_tensor *out, dl_tensor *lse, const dl_sdpa_state *st,
                     dl_tensor **dq, dl_tensor **dk, dl_tensor **dv);

/* The forward, recording a node when q, k or v requires grad. */
dl_tensor *dl_scaled_dot_product_attention(dl_tensor *q, dl_tensor *k, dl_tensor *v,
                                           const dl_sdpa_options *o);

#endif
