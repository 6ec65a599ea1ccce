/* ops/rnn.h - the rnn family: one layer of an LSTM or GRU in one direction
 * (PyTorch's gate order and formulas, kernels/rnn.h), forward, backward
 * through time and the node-recording entry point.  The modules
 * (lua/dl/nn/rnn.lua) stack layers and directions from it.
 *
 * The input is a padded time-major batch x (T, B, I) with batch_sizes NULL,
 * or the rows of a packed batch x (N, I) with batch_sizes an int64 CPU
 * tensor (T) of nonincreasing positive counts summing to N (a
 * PackedSequence's data and batch_sizes).  Initial states h0, c0 are (B, H)
 * or NULL (zeros); c0 is an LSTM's only.  Weights are PyTorch's: w_ih
 * (G*H, I), w_hh (G*H, H), biases b_ih, b_hh (G*H) or NULL, G = 4 (LSTM) or
 * 3 (GRU).  Every floating operand has x's dtype; float16 and bfloat16
 * compute in float32.  Conventions: ops/op_util.h. */
#ifndef DL_OPS_RNN_H
#define DL_OPS_RNN_H

#include "core/tensor.h"
#include "kernels/rnn.h"

#include <stdbool.h>

/* The operands of one layer in one direction (borrowed). */
typedef struct dl_rnn_args {
    dl_rnn_mode mode;
    bool reverse; /* run the steps from the last to the first */
    dl_tensor *x, *batch_sizes, *h0, *c0, *w_ih, *w_hh, *b_ih, *b_hh;
} dl_rnn_args;

/* The gradients' order in dl_rnn_backward's need[] and grads[]. */
enum { DL_RNN_GX, DL_RNN_GH0, DL_RNN_GC0, DL_RNN_GW_IH, DL_RNN_GW_HH, DL_RNN_GB_IH, DL_RNN_GB_HH };
#define DL_RNN_NGRADS 7

/* y (x's shape with H last), the final states hn, cn (B, H) (cn NULL for a
 * GRU) and the workspace ws the backward reads (1-D, the compute dtype). */
int dl_rnn_forward(const dl_rnn_args *a, dl_tensor **y, dl_tensor **hn, dl_tensor **cn,
                   dl_tensor **ws);

/* The gradients need[] asks for (grads[i] NULL otherwise), from the
 * forward's y and ws and the gradients dy, dhn, dcn of its results (each
 * NULL for zeros).  Each gradient has its operand's shape and dtype (x's
 * dtype for an absent operand). */
int dl_rnn_backward(const dl_rnn_args *a, dl_tensor *y, dl_tensor *ws, dl_tensor *dy,
                    dl_tensor *dhn, dl_tensor *dcn, const bool need[DL_RNN_NGRADS],
                    dl_tensor *grads[DL_RNN_NGRADS]);

/* dl_rnn_forward recording one node (outputs y, hn, cn) when an operand
 * requires grad; its backward is dl_rnn_backward. */
int dl_rnn(const dl_rnn_args *a, dl_tensor **y, dl_tensor **hn, dl_tensor **cn);

#endif
