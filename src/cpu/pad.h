/* cpu/pad.h - CPU kernels of reflect/replicate/circular padding: a gather
 * through per-dimension index maps (forward) and the matching scatter-add
 * (backward).  Buffers are dense and viewed as (outer, D2, D1, D0): the last
 * three dims, the padded ones (unpadded or missing dims have size 1 and the
 * identity map).  map[k][o] is the input index along dim k that output index
 * o reads (always in range: the ops layer builds and checks the maps).
 * Constant padding needs no kernel (src/ops/pad.c fills and copies
 * through views). */
#ifndef DL_CPU_PAD_H
#define DL_CPU_PAD_H

#include <stddef.h>
#include <stdint.h>

/* out[o, a, b, c] = in[o, map[2][a], map[1][b], map[0][c]] for any element
 * size (1, 2, 4 or 8 bytes).  out is (outer, osz[2], osz[1], osz[0]), in is
 * (outer, isz[2], isz[1], isz[0]). */
void dl_cpu_pad_gather(void *out, const void *in, size_t itemsize, int64_t outer,
                       const int64_t osz[3], const int64_t isz[3], const int64_t *const map[3]);

/* The adjoint: gin = 0, then gin[o, map[2][a], map[1][b], map[0][c]] += gout[o, a, b, c].
 * gin is (outer, isz...), gout is (outer, osz...). */
void dl_cpu_pad_scatter_f32(float *gin, const float *gout, int64_t outer, const int64_t osz[3],
                            const int64_t isz[3], const int64_t *const map[3]);
void dl_cpu_pad_scatter_f64(double *gin, const double *gout, int64_t outer, const int64_t osz[3],
                            const int64_t isz[3], const int64_t *const map[3]);

#endif
