/* cpu/pad.h - CPU kernels of reflect/replicate/circular padding: a gather
 * through per-dimension index maps (forward) and the matching scatter-add
 * (backward), on dense buffers viewed as (outer, D2, D1, D0) (dl_pad_shape,
 * kernels/pad.h).  Constant padding needs no kernel (src/ops/pad.c fills and
 * copies through views). */
#ifndef DL_CPU_PAD_H
#define DL_CPU_PAD_H

#include "kernels/pad.h"

/* The kernels (kernels/pad.h has their contract): 0, or -1 with the error
 * for a dtype the scatter does not take. */
int dl_cpu_pad_gather(dl_dtype dt, const dl_pad_shape *s, void *out, const void *in);
int dl_cpu_pad_scatter(dl_dtype dt, const dl_pad_shape *s, void *gin, const void *gout);

#endif
