/* cpu/loss.h - CPU kernels of the loss functions, forward and backward: the
 * class losses (nll, cross entropy) over dense (N, C, S) buffers and the
 * pointwise losses (mse, l1, binary cross entropy with logits) over n-element
 * buffers the ops layer has broadcast to one shape; layouts, formulas and
 * the signatures CUDA shares are in kernels/loss.h.  float32 kernels compute
 * in float, float64 in double; sums accumulate in double over fixed blocks,
 * so results do not depend on the thread count. */
#ifndef DL_CPU_LOSS_H
#define DL_CPU_LOSS_H

#include "kernels/loss.h"

#include <stdint.h>

/* The kernels (kernels/loss.h has their contract and formulas): 0, or -1
 * with the error for a dtype other than float32 and float64. */
int dl_cpu_loss_sum(dl_dtype dt, int64_t n, double *out, const void *v);
int dl_cpu_class_weight_sum(dl_dtype dt, const dl_class_loss_shape *s, double *out,
                            const int64_t *target, const void *weight);
int dl_cpu_loss_target_check(const dl_class_loss_shape *s, int64_t *first_bad,
                             const int64_t *target);
int dl_cpu_nll_loss(dl_dtype dt, const dl_class_loss_shape *s, void *out, const void *logp,
                    const int64_t *target, const void *weight);
int dl_cpu_nll_loss_backward(dl_dtype dt, const dl_class_loss_shape *s, void *gx, const void *g,
                             double g0, const int64_t *target, const void *weight);
int dl_cpu_cross_entropy(dl_dtype dt, const dl_class_loss_shape *s, void *out, const void *x,
                         const int64_t *target, const void *weight);
int dl_cpu_cross_entropy_backward(dl_dtype dt, const dl_class_loss_shape *s, void *gx,
                                  const void *g, double g0, const void *x, const int64_t *target,
                                  const void *weight);
int dl_cpu_cross_entropy_prob(dl_dtype dt, const dl_class_loss_shape *s, void *out, const void *x,
                              const void *target, const void *weight);
int dl_cpu_cross_entropy_prob_backward(dl_dtype dt, const dl_class_loss_shape *s, void *gx,
                                       void *gtarget, const void *g, double g0, const void *x,
                                       const void *target, const void *weight);
int dl_cpu_pointwise_loss(dl_dtype dt, dl_pointwise_loss op, int64_t n, void *out, const void *x,
                          const void *y, const void *w, const void *pw);
int dl_cpu_pointwise_loss_backward(dl_dtype dt, dl_pointwise_loss op, int64_t n, void *gx, void *gy,
                                   const void *g, double g0, const void *x, const void *y,
                                   const void *w, const void *pw);

#endif
