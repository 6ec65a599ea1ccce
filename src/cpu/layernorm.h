/* cpu/layernorm.h - CPU kernels of layer norm and RMS norm, forward and
 * backward, on dense (rows, cols) buffers normalised row by row; the buffer
 * conventions (dtypes, NULL operands, rms) are those of kernels/layernorm.h.
 * dt is F32 or F64 (the ops layer computes float16/bfloat16 in float32).
 * Results do not depend on the thread count or on the CPU's vector width.
 * Both return 0, or -1 with dl_last_error() set (out of memory). */
#ifndef DL_CPU_LAYERNORM_H
#define DL_CPU_LAYERNORM_H

#include "kernels/layernorm.h"

/* y (rows,cols), mean (rows; NULL when rms), rstd (rows) from x (rows,cols),
 * w (cols) and b (cols, or NULL). */
int dl_cpu_layer_norm_forward(dl_dtype dt, const dl_ln_shape *s, double eps, bool rms, void *y,
                              void *mean, void *rstd, const void *x, const void *w, const void *b);

/* gx (rows,cols), gw and gb (cols), each NULL when not needed, from gy and x
 * (rows,cols), the forward's mean (NULL when rms) and rstd (rows), and w
 * (cols). */
int dl_cpu_layer_norm_backward(dl_dtype dt, const dl_ln_shape *s, bool rms, void *gx, void *gw,
                               void *gb, const void *gy, const void *x, const void *mean,
                               const void *rstd, const void *w);

#endif
