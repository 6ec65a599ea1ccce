/* kernels/pad.h - the kernel interface of the pad family (ops/pad.c): the
 * CUDA table of the index-map gather and scatter that pad reads and writes
 * through (cpu/pad.h has the CPU twins).
 *
 * Shared by ops/, cpu/ and cuda/; the table's contract is in kernels/cuda.h. */
#ifndef DL_KERNELS_PAD_H
#define DL_KERNELS_PAD_H

#include "core/tensor.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct dl_cuda_pad_kernels {
    const char *family;
    /* Padding through index maps, as dl_cpu_pad_gather / dl_cpu_pad_scatter_*:
     * out/in (gin/gout) contiguous, viewed as (outer, D2, D1, D0); the maps are
     * host arrays (copied to the device here).  pad_scatter takes float32 or
     * float64 and zeroes gin first. */
    int (*pad_gather)(dl_tensor *out, const dl_tensor *in, int64_t outer, const int64_t osz[3],
                      const int64_t isz[3], const int64_t *const map[3]);
    int (*pad_scatter)(dl_tensor *gin, const dl_tensor *gout, int64_t outer, const int64_t osz[3],
                       const int64_t isz[3], const int64_t *const map[3]);
} dl_cuda_pad_kernels;

extern const dl_cuda_pad_kernels *dl_cuda_pad;

#endif
