/* kernels/optim.h - the kernel interface of the optim family (ops/optim.c): a
 * parameter with its optimizer state, the SGD and Adam coefficients, and the
 * CUDA table of the fused steps (cpu/optim.h has the CPU twins).
 *
 * Shared by ops/, cpu/ and cuda/; the table's contract is in kernels/cuda.h. */
#ifndef DL_KERNELS_OPTIM_H
#define DL_KERNELS_OPTIM_H

#include "core/tensor.h"

#include <stdbool.h>
#include <stdint.h>

/* One parameter and its state.  The op checked that all are contiguous, of
 * one dtype (float32 or float64) and one shape; unused slots are NULL. */
typedef struct {
    dl_tensor *param; /* updated in place */
    dl_tensor *grad;
    dl_tensor *buf; /* SGD: momentum_buffer (NULL when momentum == 0) */
    int fresh;      /* SGD: buf was just created: it becomes the direction */
    dl_tensor *exp_avg, *exp_avg_sq, *max_exp_avg_sq; /* Adam; max only with amsgrad */
    double neg_step_size;                             /* Adam: -(lr / (1 - beta1^step)) */
    double bc2_sqrt;                                  /* Adam: sqrt(1 - beta2^step) */
} dl_optim_tensors;

/* SGD:  d = grad (negated when maximize); d += weight_decay * p when
 * weight_decay != 0; with momentum: buf = fresh ? d : buf * momentum +
 * one_minus_damp * d, and d = nesterov ? d + momentum * buf : buf; then
 * p += neg_lr * d. */
typedef struct {
    double neg_lr, momentum, one_minus_damp, weight_decay;
    int nesterov, maximize;
    /* CUDA only (the CPU step reads them in the op): lr, when set, is the
     * device float32 learning rate to use instead of -neg_lr; skip, when set,
     * is a device flag whose true value leaves every tensor unchanged. */
    const float *lr;
    const bool *skip;
} dl_sgd_coeffs;

/* Adam / AdamW:  g = grad (negated when maximize); decoupled: p *= decay
 * (1 - lr * weight_decay), else g += weight_decay * p when weight_decay != 0;
 * m = m * beta1 + one_minus_beta1 * g; v = v * beta2 + (g * one_minus_beta2)
 * * g; amsgrad: mx = max(mx, v) and v' = mx, else v' = v;
 * p += (m * neg_step_size) / (sqrt(v') / bc2_sqrt + eps). */
typedef struct {
    double beta1, one_minus_beta1, beta2, one_minus_beta2, eps, weight_decay, decay;
    int decoupled, amsgrad, maximize;
} dl_adam_coeffs;

typedef struct dl_cuda_optim_kernels {
    const char *family;
    /* dl_cpu_sgd_step / dl_cpu_adam_step on n float32 CUDA tensors of one
     * device, each contiguous (see src/cpu/optim.h for the arguments). */
    int (*sgd_step)(int n, const dl_optim_tensors *ts, const dl_sgd_coeffs *c);
    int (*adam_step)(int n, const dl_optim_tensors *ts, const dl_adam_coeffs *c);
} dl_cuda_optim_kernels;

extern const dl_cuda_optim_kernels *dl_cuda_optim;

#endif
