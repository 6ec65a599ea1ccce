/* cpu/loss.h - CPU kernels of the loss functions, forward and backward.
 *
 * Class losses (nll, cross entropy) read dense (N, C, S) buffers: element
 * (n, c, s) is at (n*C + c)*S + s; a sample is (n, s), its class scores lie
 * S apart.  Targets are (N, S) int64 class indices, 0-based, that the ops
 * layer has checked (each in [0, C) or equal to ignore_index).  Weights are
 * (C) or NULL (all ones).  Forward kernels write one loss per sample (0 for
 * ignored samples); the ops layer reduces them with dl_cpu_sum_* and divides
 * by dl_cpu_class_weight_sum_* for the mean.  Backward kernels take either a
 * per-sample gradient g (reduction none) or, when g is NULL, one factor g0
 * (the loss gradient, already divided by the mean's denominator).
 *
 * Pointwise losses (mse, l1, binary cross entropy with logits) read n-element
 * dense buffers that the ops layer has broadcast to one shape.
 *
 * float32 kernels compute in float, float64 in double; sums accumulate in
 * double over fixed blocks, so results do not depend on the thread count. */
#ifndef DL_CPU_LOSS_H
#define DL_CPU_LOSS_H

#include "kernels/loss.h"
#include <stdint.h>

/* --- sums ------------------------------------------------------------------------------- */

/* Sum of v (n elements), in double. */
double dl_cpu_sum_f32(const float *v, int64_t n);
double dl_cpu_sum_f64(const double *v, int64_t n);
/* Sum of weight[target[i]] (1 when weight is NULL) over the n targets that
 * are not ignore_index. */
double dl_cpu_class_weight_sum_f32(const int64_t *target, const float *weight, int64_t n,
                                   int64_t ignore_index);
double dl_cpu_class_weight_sum_f64(const int64_t *target, const double *weight, int64_t n,
                                   int64_t ignore_index);

/* --- nll ---------------------------------------------------------------------------------- */

/* out[n,s] = -w[t] * logp[n,t,s] with t = target[n,s] (0 when ignored).
 * out is (N,S), logp is (N,C,S), target is (N,S), weight is (C) or NULL. */
void dl_cpu_nll_loss_f32(float *out, const float *logp, const int64_t *target, const float *weight,
                         int64_t N, int64_t C, int64_t S, int64_t ignore_index);
void dl_cpu_nll_loss_f64(double *out, const double *logp, const int64_t *target,
                         const double *weight, int64_t N, int64_t C, int64_t S,
                         int64_t ignore_index);
/* gx = 0 except gx[n,t,s] = -w[t] * (g ? g[n,s] : g0) for non-ignored samples.
 * gx is (N,C,S), g is (N,S) or NULL, target is (N,S), weight is (C) or NULL. */
void dl_cpu_nll_loss_backward_f32(float *gx, const float *g, float g0, const int64_t *target,
                                  const float *weight, int64_t N, int64_t C, int64_t S,
                                  int64_t ignore_index);
void dl_cpu_nll_loss_backward_f64(double *gx, const double *g, double g0, const int64_t *target,
                                  const double *weight, int64_t N, int64_t C, int64_t S,
                                  int64_t ignore_index);

/* --- cross entropy, class-index targets --------------------------------------------------- */

/* With lp = log_softmax(x) over C and eps the label smoothing:
 *   out[n,s] = (1-eps) * w[t] * -lp[t] + eps/C * sum_c w[c] * -lp[c]
 * (0 for ignored samples).  out is (N,S), x is (N,C,S), target is (N,S). */
void dl_cpu_cross_entropy_f32(float *out, const float *x, const int64_t *target,
                              const float *weight, int64_t N, int64_t C, int64_t S,
                              int64_t ignore_index, double eps);
void dl_cpu_cross_entropy_f64(double *out, const double *x, const int64_t *target,
                              const double *weight, int64_t N, int64_t C, int64_t S,
                              int64_t ignore_index, double eps);
/* gx[n,c,s] = G * (p[c] * ((1-eps) w[t] + eps/C sum_k w[k]) - (1-eps) w[t] [c==t] - eps/C w[c])
 * with p = softmax(x) and G = g ? g[n,s] : g0 (0 for ignored samples).
 * gx is (N,C,S), g is (N,S) or NULL, x is (N,C,S), target is (N,S). */
void dl_cpu_cross_entropy_backward_f32(float *gx, const float *g, float g0, const float *x,
                                       const int64_t *target, const float *weight, int64_t N,
                                       int64_t C, int64_t S, int64_t ignore_index, double eps);
void dl_cpu_cross_entropy_backward_f64(double *gx, const double *g, double g0, const double *x,
                                       const int64_t *target, const double *weight, int64_t N,
                                       int64_t C, int64_t S, int64_t ignore_index, double eps);

/* --- cross entropy, class-probability targets --------------------------------------------- */

/* With q = (1-eps) * target + eps/C:  out[n,s] = -sum_c w[c] q[c] lp[c].
 * out is (N,S), x and target are (N,C,S), weight is (C) or NULL. */
void dl_cpu_cross_entropy_prob_f32(float *out, const float *x, const float *target,
                                   const float *weight, int64_t N, int64_t C, int64_t S,
                                   double eps);
void dl_cpu_cross_entropy_prob_f64(double *out, const double *x, const double *target,
                                   const double *weight, int64_t N, int64_t C, int64_t S,
                                   double eps);
/* gx[n,c,s] = G * (p[c] * sum_k w[k] q[k] - w[c] q[c]),
 * gtarget[n,c,s] = -G * (1-eps) * w[c] * lp[c], G = g ? g[n,s] : g0.
 * gx and gtarget (either may be NULL) are (N,C,S), g is (N,S) or NULL. */
void dl_cpu_cross_entropy_prob_backward_f32(float *gx, float *gtarget, const float *g, float g0,
                                            const float *x, const float *target,
                                            const float *weight, int64_t N, int64_t C, int64_t S,
                                            double eps);
void dl_cpu_cross_entropy_prob_backward_f64(double *gx, double *gtarget, const double *g, double g0,
                                            const double *x, const double *target,
                                            const double *weight, int64_t N, int64_t C, int64_t S,
                                            double eps);

/* --- pointwise losses (dl_pointwise_loss: kernels/loss.h) --------------------------------- */
/* out[i] = loss(x[i], y[i]); w and pw (BCE only; NULL for none) are (n).
 * out, x, y are (n). */
void dl_cpu_pointwise_loss_f32(float *out, const float *x, const float *y, const float *w,
                               const float *pw, int64_t n, dl_pointwise_loss op);
void dl_cpu_pointwise_loss_f64(double *out, const double *x, const double *y, const double *w,
                               const double *pw, int64_t n, dl_pointwise_loss op);
/* gx[i] = G * dloss/dx, gy[i] = G * dloss/dy with G = g ? g[i] : g0; either
 * output may be NULL.  All buffers are (n). */
void dl_cpu_pointwise_loss_backward_f32(float *gx, float *gy, const float *g, float g0,
                                        const float *x, const float *y, const float *w,
                                        const float *pw, int64_t n, dl_pointwise_loss op);
void dl_cpu_pointwise_loss_backward_f64(double *gx, double *gy, const double *g, double g0,
                                        const double *x, const double *y, const double *w,
                                        const double *pw, int64_t n, dl_pointwise_loss op);

#endif
