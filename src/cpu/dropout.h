/* cpu/dropout.h - CPU kernel of dropout's masking: an elementwise loop over
 * strided tensors (dl_iter_foreach), so no operand needs to be contiguous.
 * The ops layer (src/ops/dropout.c) has checked shapes and dtypes: every
 * tensor is on the CPU and has out's shape; out and x share one floating
 * dtype (float32, float64, float16, bfloat16; half types compute in float32
 * and round per element). */
#ifndef DL_CPU_DROPOUT_H
#define DL_CPU_DROPOUT_H

#include "core/tensor.h"

/* out = x * (mask ? scale : 0): a dropped NaN or inf gives NaN, as PyTorch's
 * x * mask * scale.  out and x share a floating dtype; mask is bool. */
void dl_cpu_mask_scale(dl_tensor *out, dl_tensor *x, dl_tensor *mask, double scale);

#endif
