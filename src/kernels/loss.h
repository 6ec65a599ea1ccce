/* kernels/loss.h - the kernel interface of the loss family (ops/loss.c): the
 * pointwise-loss enum, the class losses' shape, the kernels' one signature
 * each and the CUDA table of the class and pointwise losses (cpu/loss.h has
 * the CPU twins).
 *
 * Shared by ops/, cpu/ and cuda/; the table's contract is in kernels/cuda.h. */
#ifndef DL_KERNELS_LOSS_H
#define DL_KERNELS_LOSS_H

#include "core/dtype.h"

#include <stdbool.h>
#include <stdint.h>

typedef enum {
    DL_POINTWISE_MSE,        /* (x - y)^2 */
    DL_POINTWISE_L1,         /* |x - y| */
    DL_POINTWISE_BCE_LOGITS, /* w * ((1 - y) x + (1 + (pw - 1) y) softplus(-x)) */
} dl_pointwise_loss;

/* A class loss (nll, cross entropy): input (N, C, S) dense, element (n, c, s)
 * at (n*C + c)*S + s; a sample is (n, s), its class scores lie S apart.
 * Targets are (N, S): int64 class indices, 0-based, each in [0, C) or equal
 * to ignore_index (checked by the op, see target_check), or, for the _prob
 * forms, class probabilities of the input's shape.  Weights are (C) or NULL
 * (all ones).  eps is cross entropy's label smoothing. */
typedef struct dl_class_loss_shape {
    int64_t N, C, S;
    int64_t ignore_index;
    double eps;
} dl_class_loss_shape;

/* The kernels' signatures, one for both backends (cpu/loss.h, the table
 * below; host pointers on the CPU, device pointers on the current CUDA
 * device, where the double and int64 results are device values too).  dt is
 * F32 or F64: float32 computes in float, float64 in double; sums accumulate
 * in double.  Forward kernels write one loss per sample (0 for ignored
 * samples); the op reduces them.  Backward kernels take a per-sample gradient
 * g (reduction none) or, when g is NULL, one factor g0 (the loss gradient,
 * already divided by the mean's denominator): G = g ? g[n,s] : g0. */

/* *out = the sum of v (n elements). */
typedef int (*dl_loss_sum_fn)(dl_dtype dt, int64_t n, double *out, const void *v);
/* *out = the sum of weight[target[i]] (1 without weight) over the N*S targets
 * that are neither ignore_index nor outside [0, C). */
typedef int (*dl_class_weight_sum_fn)(dl_dtype dt, const dl_class_loss_shape *s, double *out,
                                      const int64_t *target, const void *weight);
/* *first_bad = the smallest i whose target is neither ignore_index nor in
 * [0, C), or N*S when every target is valid.  On CUDA the op layer has it
 * reported at the next synchronisation (dl_cuda_rt->check_first_bad) and the
 * class kernels skip such a target meanwhile: NaN loss, zero gradient. */
typedef int (*dl_loss_target_check_fn)(const dl_class_loss_shape *s, int64_t *first_bad,
                                       const int64_t *target);
/* out[n,s] = -w[t] * logp[n,t,s] with t = target[n,s]; out is (N,S). */
typedef int (*dl_nll_loss_fn)(dl_dtype dt, const dl_class_loss_shape *s, void *out,
                              const void *logp, const int64_t *target, const void *weight);
/* gx = 0 except gx[n,t,s] = -w[t] * G for non-ignored samples; gx is (N,C,S). */
typedef int (*dl_nll_loss_backward_fn)(dl_dtype dt, const dl_class_loss_shape *s, void *gx,
                                       const void *g, double g0, const int64_t *target,
                                       const void *weight);
/* With lp = log_softmax(x) over C:
 *   out[n,s] = (1-eps) * w[t] * -lp[t] + eps/C * sum_c w[c] * -lp[c]. */
typedef int (*dl_cross_entropy_fn)(dl_dtype dt, const dl_class_loss_shape *s, void *out,
                                   const void *x, const int64_t *target, const void *weight);
/* gx[n,c,s] = G * (p[c] * ((1-eps) w[t] + eps/C sum_k w[k]) - (1-eps) w[t] [c==t]
 *             - eps/C w[c]) with p = softmax(x) (0 for ignored samples). */
typedef int (*dl_cross_entropy_backward_fn)(dl_dtype dt, const dl_class_loss_shape *s, void *gx,
                                            const void *g, double g0, const void *x,
                                            const int64_t *target, const void *weight);
/* Probability targets, q = (1-eps) * target + eps/C:
 *   out[n,s] = -sum_c w[c] q[c] lp[c]. */
typedef int (*dl_cross_entropy_prob_fn)(dl_dtype dt, const dl_class_loss_shape *s, void *out,
                                        const void *x, const void *target, const void *weight);
/* gx[n,c,s] = G * (p[c] * sum_k w[k] q[k] - w[c] q[c]),
 * gtarget[n,c,s] = -G * (1-eps) * w[c] * lp[c]; either output may be NULL. */
typedef int (*dl_cross_entropy_prob_backward_fn)(dl_dtype dt, const dl_class_loss_shape *s,
                                                 void *gx, void *gtarget, const void *g, double g0,
                                                 const void *x, const void *target,
                                                 const void *weight);
/* Pointwise losses over n elements broadcast to one shape by the op:
 * out[i] = loss(x[i], y[i]); w and pw (BCE only) are (n) or NULL. */
typedef int (*dl_pointwise_loss_fn)(dl_dtype dt, dl_pointwise_loss op, int64_t n, void *out,
                                    const void *x, const void *y, const void *w, const void *pw);
/* gx[i] = G * dloss/dx, gy[i] = G * dloss/dy (G = g ? g[i] : g0); either
 * output may be NULL. */
typedef int (*dl_pointwise_loss_backward_fn)(dl_dtype dt, dl_pointwise_loss op, int64_t n, void *gx,
                                             void *gy, const void *g, double g0, const void *x,
                                             const void *y, const void *w, const void *pw);

typedef struct dl_cuda_loss_kernels {
    const char *family;
    dl_loss_sum_fn sum;
    dl_class_weight_sum_fn class_weight_sum;
    dl_loss_target_check_fn target_check;
    dl_nll_loss_fn nll_loss;
    dl_nll_loss_backward_fn nll_loss_backward;
    dl_cross_entropy_fn cross_entropy;
    dl_cross_entropy_backward_fn cross_entropy_backward;
    dl_cross_entropy_prob_fn cross_entropy_prob;
    dl_cross_entropy_prob_backward_fn cross_entropy_prob_backward;
    dl_pointwise_loss_fn pointwise_loss;
    dl_pointwise_loss_backward_fn pointwise_loss_backward;
} dl_cuda_loss_kernels;

extern const dl_cuda_loss_kernels *dl_cuda_loss;

#endif
