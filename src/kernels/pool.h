/* kernels/pool.h - the kernel interface of the pool family (ops/pool.c): the
 * pooling shape and the CUDA table (cpu/pool.h has the CPU twins).
 * Shared by ops/, cpu/ and cuda/; the table's contract is in kernels/cuda.h.
 *
 * The CUDA table mirrors cpu/pool.h: F32 and F64 only (the op layer computes half
 * inputs in float32, as on the CPU); buffers contiguous (P,H,W)/(P,OH,OW).
 * Besides, max pooling of channels-last data in its own dtype (the _nhwc
 * entries), used while dl_pool_nhwc is true (DLUA_POOL_NHWC=0 turns it off:
 * the planar float32 path then runs; ops/pool.c owns the switch). */
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
    int64_t C;                /* > 0 channels-last with C channels (P = N*C), 0 planar */
} dl_pool2d_shape;

extern bool dl_pool_nhwc;

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
    /* Max pooling of channels-last data in its dtype dt (F32, F64, F16,
     * BF16): x (N,H,W,C), y and ind (N,OH,OW,C) dense, s->C = C, s->P = N*C;
     * indices ih*W + iw as the planar kernel's.  The backward gathers: each
     * gx element sums (in float, double for F64) the gy of the windows whose
     * index names it, in (oh, ow) order -- no atomics, no index check (an
     * index from elsewhere names no element and is ignored). */
    int (*max_pool2d_forward_nhwc)(dl_dtype dt, const dl_pool2d_shape *s, void *y, int64_t *ind,
                                   const void *x);
    int (*max_pool2d_backward_nhwc)(dl_dtype dt, const dl_pool2d_shape *s, void *gx, const void *gy,
                                    const int64_t *ind);
} dl_cuda_pool_kernels;

extern const dl_cuda_pool_kernels *dl_cuda_pool;

#endif
