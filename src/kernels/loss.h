/* kernels/loss.h - the kernel interface of the loss family (ops/loss.c): the
 * pointwise-loss enum and the CUDA table of the class and pointwise losses
 * (cpu/loss.h has the CPU twins).
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

typedef struct dl_cuda_loss_kernels {
    const char *family;
    /* *out (one device double) = sum of v (n elements), accumulated in double */
    int (*sum)(const void *v, dl_dtype dt, int64_t n, double *out);
    /* *out (one device double) = sum of weight[target[i]] (1 without weight) over the
     * targets that are neither ignore_index nor outside [0, C) */
    int (*class_weight_sum)(const int64_t *target, const void *weight, dl_dtype dt, int64_t n,
                            int64_t C, int64_t ignore_index, double *out);
    /* *first_bad (one device int64) = the smallest i whose target is neither
     * ignore_index nor in [0, C), or n when every target is valid (the op layer
     * has it reported through dl_cuda_rt->check_first_bad; the class kernels
     * below skip such a target: NaN loss, zero gradient) */
    int (*target_check)(const int64_t *target, int64_t n, int64_t C, int64_t ignore_index,
                        int64_t *first_bad);
    int (*nll_loss)(void *out, const void *logp, const int64_t *target, const void *weight,
                    dl_dtype dt, int64_t N, int64_t C, int64_t S, int64_t ignore_index);
    int (*nll_loss_backward)(void *gx, const void *g, double g0, const int64_t *target,
                             const void *weight, dl_dtype dt, int64_t N, int64_t C, int64_t S,
                             int64_t ignore_index);
    int (*cross_entropy)(void *out, const void *x, const int64_t *target, const void *weight,
                         dl_dtype dt, int64_t N, int64_t C, int64_t S, int64_t ignore_index,
                         double eps);
    int (*cross_entropy_backward)(void *gx, const void *g, double g0, const void *x,
                                  const int64_t *target, const void *weight, dl_dtype dt, int64_t N,
                                  int64_t C, int64_t S, int64_t ignore_index, double eps);
    int (*cross_entropy_prob)(void *out, const void *x, const void *target, const void *weight,
                              dl_dtype dt, int64_t N, int64_t C, int64_t S, double eps);
    int (*cross_entropy_prob_backward)(void *gx, void *gtarget, const void *g, double g0,
                                       const void *x, const void *target, const void *weight,
                                       dl_dtype dt, int64_t N, int64_t C, int64_t S, double eps);
    int (*pointwise_loss)(void *out, const void *x, const void *y, const void *w, const void *pw,
                          dl_dtype dt, int64_t n, dl_pointwise_loss op);
    int (*pointwise_loss_backward)(void *gx, void *gy, const void *g, double g0, const void *x,
                                   const void *y, const void *w, const void *pw, dl_dtype dt,
                                   int64_t n, dl_pointwise_loss op);
} dl_cuda_loss_kernels;

extern const dl_cuda_loss_kernels *dl_cuda_loss;

#endif
