/* optim.h - fused optimizer steps: one call updates all parameters of one
 * device and dtype in place, with the arithmetic of lua/dl/optim/init.lua's
 * SGD and Adam/AdamW (so results equal the Lua path's; see src/cpu/optim.h).
 * dl.optim uses them when every parameter with a gradient is a plain float32
 * tensor; float64 works on the CPU (gradient-check style tests).
 *
 * Arguments are arrays of n tensors; params[i], grads[i] and the state
 * tensors of parameter i must be contiguous, of one shape, dtype and device
 * (all parameters share the device and dtype).  No autograd is recorded; the
 * version counters of the tensors written are bumped.  0, or -1 with an
 * error naming the op, the parameter (1-based) and the facts. */
#ifndef DL_OPS_OPTIM_H
#define DL_OPS_OPTIM_H

#include "core/tensor.h"

#include <stdbool.h>

typedef struct {
    double lr, momentum, dampening, weight_decay;
    bool nesterov, maximize;
    /* Optional 0-dim tensors on the parameters' device, read where the step
     * runs (on CUDA the host never reads them, so a step stays free of
     * synchronisation and can be captured in a CUDA graph):
     * lr_tensor (float32) replaces lr; skip_if (bool) true skips the step. */
    dl_tensor *lr_tensor, *skip_if;
} dl_sgd_options;

/* bufs: the momentum buffers (NULL when momentum == 0); fresh[i]: buffer i
 * was just created (empty) and takes the direction instead of an update,
 * as PyTorch's first step does. */
int dl_sgd_step(int n, dl_tensor *const *params, dl_tensor *const *grads, dl_tensor *const *bufs,
                const bool *fresh, const dl_sgd_options *o);

typedef struct {
    double lr, beta1, beta2, eps, weight_decay;
    bool decoupled; /* AdamW: weight decay multiplies the parameter */
    bool amsgrad, maximize;
} dl_adam_options;

/* steps[i]: parameter i's step count after this step (>= 1), from which the
 * bias corrections are computed; max_exp_avg_sqs is NULL unless amsgrad. */
int dl_adam_step(int n, dl_tensor *const *params, dl_tensor *const *grads,
                 dl_tensor *const *exp_avgs, dl_tensor *const *exp_avg_sqs,
                 dl_tensor *const *max_exp_avg_sqs, const int64_t *steps, const dl_adam_options *o);

#endif
