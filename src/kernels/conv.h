/* kernels/conv.h - the kernel interface of the conv family (ops/conv.c): the
 * shape of a 2-D convolution and the CUDA table (cuDNN; cpu/conv.h has the
 * CPU twins, oneDNN).
 * Shared by ops/, cpu/ and cuda/; the table's contract is in kernels/cuda.h.
 * Every pointer to tensor data in the table is a device pointer on CUDA
 * device `device` (0-based), which each entry point makes current. */
#ifndef DL_KERNELS_CONV_H
#define DL_KERNELS_CONV_H

#include "core/dtype.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct dl_conv2d_shape {
    int64_t N, C, H, W; /* input (N,C,H,W) */
    int64_t O, KH, KW;  /* weight (O, C/groups, KH, KW) */
    int64_t OH, OW;     /* output (N,O,OH,OW) */
    int64_t sh, sw;     /* stride */
    int64_t ph, pw;     /* zero padding, both sides */
    int64_t dh, dw;     /* dilation (1 = dense) */
    int64_t groups;     /* C and O are multiples of it */
} dl_conv2d_shape;

typedef struct dl_cuda_conv_kernels {
    const char *family;
    /* Convolutions through cuDNN, as dl_cpu_conv2d_forward/backward (src/cpu/conv.h),
     * with dt F32, F64, F16 or BF16 (the half types compute in float32).  nhwc false:
     * x, y, gx, gy are contiguous (N,C,H,W) and w, gw contiguous (O,C/g,KH,KW); nhwc
     * true: all of them are channels-last (NHWC and OHWI memory), which float64 does
     * not support.  Outputs are written in full; in the backward each of gx, gw, gb may
     * be NULL, x is read only for gw and w only for gx.  Every size of s is positive
     * except that the backward accepts C == 0 when only gb is wanted. */
    int (*conv2d_forward)(int device, dl_dtype dt, const dl_conv2d_shape *s, bool nhwc, void *y,
                          const void *x, const void *w, const void *b);
    int (*conv2d_backward)(int device, dl_dtype dt, const dl_conv2d_shape *s, bool nhwc, void *gx,
                           void *gw, void *gb, const void *gy, const void *x, const void *w);
} dl_cuda_conv_kernels;

extern const dl_cuda_conv_kernels *dl_cuda_conv;

#endif
