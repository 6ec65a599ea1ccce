/* cpu/softmax.h - CPU kernels of softmax and log_softmax, forward and
 * backward, on dense buffers viewed as (outer, D, inner): the op runs along
 * D, element (o, d, i) is at (o*D + d)*inner + i.  The ops layer
 * (src/ops/nn_func.c) makes the buffers contiguous and picks float32 (for
 * float32, float16 and bfloat16) or float64.  Exponentials are computed in
 * the buffer's type; the sum of exponentials accumulates in double.  Results
 * do not depend on the thread count. */
#ifndef DL_CPU_SOFTMAX_H
#define DL_CPU_SOFTMAX_H

#include <stdbool.h>
#include <stdint.h>

/* y = softmax(x) (or log_softmax when is_log) along D.
 * y is (outer,D,inner), x is (outer,D,inner); y may alias x. */
void dl_cpu_softmax_f32(float *y, const float *x, int64_t outer, int64_t D, int64_t inner,
                        bool is_log);
void dl_cpu_softmax_f64(double *y, const double *x, int64_t outer, int64_t D, int64_t inner,
                        bool is_log);

/* Backward from the forward's output y:
 *   softmax:     gx = y * (gy - sum_d(gy * y))
 *   log_softmax: gx = gy - exp(y) * sum_d(gy)
 * gx, gy, y are (outer,D,inner); gx may alias gy. */
void dl_cpu_softmax_backward_f32(float *gx, const float *gy, const float *y, int64_t outer,
                                 int64_t D, int64_t inner, bool is_log);
void dl_cpu_softmax_backward_f64(double *gx, const double *gy, const double *y, int64_t outer,
                                 int64_t D, int64_t inner, bool is_log);

#endif
