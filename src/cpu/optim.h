/* optim.h - CPU kernels of the fused optimizer steps (src/ops/optim.c): one
 * call updates every parameter of a list in place.
 *
 * The arithmetic is that of lua/dl/optim/init.lua's tensor-op updates (PyTorch
 * 1.13's single-tensor forms), operation by operation in the parameter's
 * dtype: every scalar is the double the Lua code computes, rounded to the
 * dtype, and every product, sum, quotient and square root is rounded on its
 * own (no fused multiply-add), so the fused step gives the very values the
 * Lua step gives.  The CUDA kernels (cuda/optim.cu) follow the same order. */
#ifndef DL_CPU_OPTIM_H
#define DL_CPU_OPTIM_H

#include "kernels/optim.h"
#include "core/tensor.h"

void dl_cpu_sgd_step(int n, const dl_optim_tensors *ts, const dl_sgd_coeffs *c);
void dl_cpu_adam_step(int n, const dl_optim_tensors *ts, const dl_adam_coeffs *c);

#endif
