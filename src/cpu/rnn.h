/* cpu/rnn.h - CPU kernels of the rnn family: one LSTM or GRU layer in one
 * direction over time-major packed rows, forward and backward through time
 * (the layout, gate order and workspace are in kernels/rnn.h).
 *
 * float32 or float64 buffers, dense, validated by the op layer (ops/rnn.c),
 * which allocates every result; h0 (and c0 for an LSTM) are never NULL here.
 * Scratch memory is the kernels' own.  Each returns 0, or -1 with
 * dl_last_error() set (out of scratch memory, a GEMM failure). */
#ifndef DL_CPU_RNN_H
#define DL_CPU_RNN_H

#include "kernels/rnn.h"

/* y, hn, cn and ws of out from the operands in (kernels/rnn.h). */
int dl_cpu_rnn_forward(dl_dtype dt, const dl_rnn_shape *s, const dl_rnn_in *in,
                       const dl_rnn_out *out);

/* The gradients g wants (NULL entries skipped) from the forward's y and ws
 * and the gradients of its results (sv; NULL ones are zeros). */
int dl_cpu_rnn_backward(dl_dtype dt, const dl_rnn_shape *s, const dl_rnn_in *in,
                        const dl_rnn_saved *sv, const dl_rnn_grad *g);

#endif
