/* kernels/pool.h - the kernel interface of the pool family (ops/pool.c): the
 * pooling shape and the CUDA table (cpu/pool.h has the CPU twins).
 * Shared by ops/, cpu/ and cuda/; the table's contract is in kernels/cuda.h.
 *
 * The CUDA table mirrors cpu/pool.h: F32 and F64 only (the op layer computes half
 * inputs in float32, as on the CPU); buffers contiguous (P,H,W)/(P,OH,OW). */
#ifndef DL_KERNELS_POOL_H
#define DL_KERNELS_POOL_H

#include "core/dtype.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct dl_pool2d_shape {
    int64_t P, H, W, OH, OW;
    int64_t kh, kw, sh, sw, ph, pw, dh, dw;
    int count_include_pad;    /* avg */
    int64_t divisor_override; /* avg; 0 = none */
    int64_t C;                /* CPU only: > 0 channels-last with C channels, 0 planar */
} dl_pool2d_shape;

typedef struct dl_cuda_pool_kernels {
    const char *family;
    int (*max_pool2d_forward)(dl_dtype dt, const dl_pool2d_shape *s, void *y, int64_t *ind,
                              const void *x);
    /* An index outside [0, HW) is an error, as on the CPU; on CUDA it is
     * skipped and reported at the next synchronisation (no wait here). */
    int (*pool2d_scatter_backward)(dl_dtype dt, int64_t P, int64_t HW, int64_t OHW, void *gx,
                                   const void *gy, const int64_t *ind);
    int (*avg_pool2d_forward)(dl_dtype dt, const dl_pool2d_shape *s, void *y, const void *x);
    int (*avg_pool2d_backward)(dl_dtype dt, const dl_pool2d_shape *s, void *gx, const void *gy);
    int (*adaptive_avg_pool2d_forward)(dl_dtype dt, const dl_pool2d_shape *s, void *y,
                                       const void *x);
    int (*adaptive_avg_pool2d_backward)(dl_dtype dt, const dl_pool2d_shape *s, void *gx,
                                        const void *gy);
    int (*adaptive_max_pool2d_forward)(dl_dtype dt, const dl_pool2d_shape *s, void *y, int64_t *ind,
                                       const void *x);
} dl_cuda_pool_kernels;

extern const dl_cuda_pool_kernels *dl_cuda_pool;

#endif
