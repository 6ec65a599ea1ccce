/* kernels/pad.h - the kernel interface of the pad family (ops/pad.c): the
 * padded shape with its index maps, the kernels' one signature and the CUDA
 * table of the gather and scatter that pad reads and writes through
 * (cpu/pad.h has the CPU twins).
 *
 * Shared by ops/, cpu/ and cuda/; the table's contract is in kernels/cuda.h. */
#ifndef DL_KERNELS_PAD_H
#define DL_KERNELS_PAD_H

#include "core/dtype.h"

#include <stdbool.h>
#include <stdint.h>

/* A reflect, replicate or circular pad of a dense buffer viewed as (outer,
 * D2, D1, D0): the last three dims, the padded ones (unpadded or missing dims
 * have size 1 and the identity map).  osz and isz are the output's and the
 * input's (D0, D1, D2); map[k][o] is the input index along dim k that output
 * index o reads.  The maps are host arrays, always in range (the op builds
 * and checks them). */
typedef struct dl_pad_shape {
    int64_t outer;
    int64_t osz[3], isz[3];
    const int64_t *map[3];
} dl_pad_shape;

/* The kernels' signatures, one for both backends (cpu/pad.h, the table
 * below; host pointers on the CPU, device pointers on the current CUDA
 * device, where the maps are copied over per call).
 *   gather:  out[o, a, b, c] = in[o, map[2][a], map[1][b], map[0][c]] for any
 *            dtype; out is (outer, osz...), in is (outer, isz...).
 *   scatter: its adjoint, gin = 0, then gin[o, map[2][a], map[1][b],
 *            map[0][c]] += gout[o, a, b, c]; dt is F32 or F64. */
typedef int (*dl_pad_gather_fn)(dl_dtype dt, const dl_pad_shape *s, void *out, const void *in);
typedef int (*dl_pad_scatter_fn)(dl_dtype dt, const dl_pad_shape *s, void *gin, const void *gout);

typedef struct dl_cuda_pad_kernels {
    const char *family;
    dl_pad_gather_fn pad_gather;
    dl_pad_scatter_fn pad_scatter;
} dl_cuda_pad_kernels;

extern const dl_cuda_pad_kernels *dl_cuda_pad;

#endif
