/* kernels/rnn.h - the kernel interface of the rnn family (ops/rnn.c): one
 * layer of an LSTM or GRU in one direction, forward and backward through
 * time, over time-major packed rows (cpu/rnn.h has the CPU twins, the CUDA
 * table is below).
 *
 * The rows: a sequence batch is N = sum(batch_sizes) rows, time step t
 * holding batch_sizes[t] rows (nonincreasing in t, batch_sizes[0] = B), the
 * rows of step t after those of steps 0..t-1.  Row b of step t belongs to
 * sequence b.  A padded (T, B, *) batch is the case batch_sizes[t] = B; a
 * PackedSequence's data and batch_sizes are this layout as they are.
 *
 * The gates, PyTorch's order and formulas (W = weight, b = bias, x the
 * input row, h the previous hidden state):
 *   LSTM (4H): i, f, g, o;  c' = f*c + i*g,  h' = o*tanh(c')
 *   GRU  (3H): r, z, n;     n = tanh(W_in x + b_in + r*(W_hn h + b_hn)),
 *                           h' = (1-z)*n + z*h
 * A forward direction runs t = 0..T-1, a reverse one t = T-1..0; a sequence
 * that is not active at step t keeps its state, so the final state of each
 * sequence is the one after its last real step.
 *
 * The workspace a forward leaves for the backward (ws, N*(G+1)*H elements):
 * an (N, G*H) block of the activated gates (LSTM i,f,g,o; GRU r,z,n), then
 * an (N, H) block: LSTM the cell state c' of each row, GRU W_hn h + b_hn.
 *
 * Shared by ops/, cpu/ and cuda/; the table's contract is in kernels/cuda.h. */
#ifndef DL_KERNELS_RNN_H
#define DL_KERNELS_RNN_H

#include "core/dtype.h"

#include <stdbool.h>
#include <stdint.h>

typedef enum { DL_RNN_LSTM = 0, DL_RNN_GRU = 1 } dl_rnn_mode;

/* The number of gates G of a mode (4 or 3). */
static inline int dl_rnn_gates(dl_rnn_mode m) {
    return m == DL_RNN_LSTM ? 4 : 3;
}

typedef struct dl_rnn_shape {
    dl_rnn_mode mode;
    int64_t T, B, N;            /* steps, sequences, rows (sum of batch_sizes) */
    int64_t I, H;               /* input and hidden size */
    const int64_t *batch_sizes; /* (T), host memory, validated as above */
    bool reverse;               /* run t = T-1..0 */
} dl_rnn_shape;

/* Elements of the workspace: N * (G + 1) * H. */
static inline int64_t dl_rnn_ws_numel(const dl_rnn_shape *s) {
    return s->N * (dl_rnn_gates(s->mode) + 1) * s->H;
}

/* The operands, dense, of the compute dtype: x (N, I); h0, c0 (B, H) (c0
 * LSTM only); w_ih (G*H, I); w_hh (G*H, H); b_ih, b_hh (G*H), each NULL
 * when absent. */
typedef struct dl_rnn_in {
    const void *x, *h0, *c0, *w_ih, *w_hh, *b_ih, *b_hh;
} dl_rnn_in;

/* The forward's results: y (N, H), the final states hn, cn (B, H) (cn LSTM
 * only) and the workspace ws. */
typedef struct dl_rnn_out {
    void *y, *hn, *cn, *ws;
} dl_rnn_out;

/* What a backward reads besides the operands: the forward's y and ws and the
 * gradients of y, hn, cn (each NULL for zeros). */
typedef struct dl_rnn_saved {
    const void *y, *ws, *dy, *dhn, *dcn;
} dl_rnn_saved;

/* The gradients a backward writes (each NULL when not wanted), shaped as the
 * operands: dx, dh0, dc0, dw_ih, dw_hh, db_ih, db_hh. */
typedef struct dl_rnn_grad {
    void *dx, *dh0, *dc0, *dw_ih, *dw_hh, *db_ih, *db_hh;
} dl_rnn_grad;

typedef struct dl_cuda_rnn_kernels {
    const char *family;
    /* As dl_cpu_rnn_forward / dl_cpu_rnn_backward (cpu/rnn.h), with device
     * pointers (batch_sizes stays in host memory); dt F32 or F64. */
    int (*forward)(dl_dtype dt, const dl_rnn_shape *s, const dl_rnn_in *in, const dl_rnn_out *out);
    int (*backward)(dl_dtype dt, const dl_rnn_shape *s, const dl_rnn_in *in, const dl_rnn_saved *sv,
                    const dl_rnn_grad *g);
} dl_cuda_rnn_kernels;

extern const dl_cuda_rnn_kernels *dl_cuda_rnn;

#endif
