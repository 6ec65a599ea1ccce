/* pool.h - CPU 2-D pooling kernels: max, average and adaptive average/max,
 * forward and backward.
 *
 * Max pooling (and adaptive max) runs on our own loops for every dtype, so
 * the indices and tie-breaking are exactly PyTorch's: the first maximum in
 * window order wins, NaN counts as a maximum, and an index is the flat
 * position ih*W + iw within the (H,W) plane.  Average pooling in float32 runs
 * on oneDNN's pooling_v2 primitives when oneDNN's divisor is PyTorch's (no
 * divisor_override, and no ceil-mode overhang past the padding when padding
 * counts); otherwise, and in float64, on loops.  Adaptive average pooling
 * runs on loops.
 *
 * All buffers are dense, of one dtype (F32 or F64), in one of two layouts
 * chosen by s->C (the scatter's C argument):
 *  - planar (C == 0): x and gx are (P,H,W) and y and gy are (P,OH,OW),
 *    P = N*C planes; indices are int64 (P,OH,OW);
 *  - channels-last (C > 0): x and gx are (N,H,W,C), y, gy and indices
 *    (N,OH,OW,C), N = P/C (an NCHW tensor with NHWC strides).
 * An index is ih*W + iw in both layouts, and both give bit-equal results:
 * each output element sees its window in the same order.  Sizes were
 * validated by the op layer (src/ops/pool.c): every window holds at least
 * one input element. */
#ifndef DL_CPU_POOL_H
#define DL_CPU_POOL_H

#include "kernels/pool.h"
#include "core/dtype.h"

#include <stdint.h>

/* y and ind (P,OH,OW) from x (P,H,W). */
int dl_cpu_max_pool2d_forward(dl_dtype dt, const dl_pool2d_shape *s, void *y, int64_t *ind,
                              const void *x);

/* gx (P,HW) = 0, then gx[p][ind[p][j]] += gy[p][j] for j < OHW, in order
 * of j.  Used by max and adaptive max pooling.  C > 0: channels-last, gx
 * (N,HW,C) and gy, ind (N,OHW,C), P = N*C.  An index outside [0, HW) is an
 * error (indices come from the caller). */
int dl_cpu_pool2d_scatter_backward(dl_dtype dt, int64_t P, int64_t HW, int64_t OHW, int64_t C,
                                   void *gx, const void *gy, const int64_t *ind);

/* y (P,OH,OW) = window averages of x (P,H,W). */
int dl_cpu_avg_pool2d_forward(dl_dtype dt, const dl_pool2d_shape *s, void *y, const void *x);
/* gx (P,H,W) from gy (P,OH,OW). */
int dl_cpu_avg_pool2d_backward(dl_dtype dt, const dl_pool2d_shape *s, void *gx, const void *gy);

/* Adaptive pooling: s->OH/OW are the output size; kernel fields are unused.
 * Cell (i,j) covers rows [floor(i*H/OH), ceil((i+1)*H/OH)) and the matching
 * columns. */
int dl_cpu_adaptive_avg_pool2d_forward(dl_dtype dt, const dl_pool2d_shape *s, void *y,
                                       const void *x);
int dl_cpu_adaptive_avg_pool2d_backward(dl_dtype dt, const dl_pool2d_shape *s, void *gx,
                                        const void *gy);
int dl_cpu_adaptive_max_pool2d_forward(dl_dtype dt, const dl_pool2d_shape *s, void *y, int64_t *ind,
                                       const void *x);

#endif
