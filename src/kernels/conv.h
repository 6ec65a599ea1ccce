/* kernels/conv.h - the kernel interface of the conv family (ops/conv.c): the
 * shape of a 2-D convolution, the operand formats and post-ops, and the CUDA
 * table (cuDNN; cpu/conv.h has the CPU twins, oneDNN).
 * Shared by ops/, cpu/ and cuda/; the table's contract is in kernels/cuda.h.
 * Every pointer to tensor data in the table is a device pointer on the
 * current CUDA device (made current by the op, dl_op_device). */
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

/* Memory layouts of the operands, a bit mask (0: all plain).  NHWC: x, y, gx,
 * gy are (N,H,W,C)/(N,OH,OW,O) in memory (channels-last); W_OHWI: w and gw
 * are (O,KH,KW,C/groups).  Which of them a backend binds is its own choice
 * (dl_cpu_conv2d_formats, the table's conv2d_formats): the op states whether
 * x and w are channels-last and lays the operands out as the answer says. */
enum { DL_CONV_FMT_NHWC = 1, DL_CONV_FMT_W_OHWI = 2 };
/* In the same mask, for the forward: no gradient will be taken through this
 * call (inference), so a backend may pick faster, slightly less exact kernels
 * (the CPU's Winograd, see cpu/conv.c). */
enum { DL_CONV_INFERENCE = 4 };

/* Post-ops of a forward, a bit mask: SUM adds the result to y's previous
 * contents, then RELU clamps at 0 (inference fusion, no gradient; the CPU's
 * float32 kernels only). */
enum { DL_CONV_POST_SUM = 1, DL_CONV_POST_RELU = 2 };

/* The kernels' signatures, one for both backends (cpu/conv.h, the table
 * below): the CPU kernel takes host pointers, the CUDA one device pointers
 * on the current device. */
typedef int (*dl_conv2d_formats_fn)(dl_dtype dt, bool x_cl, bool w_cl);
typedef int (*dl_conv2d_forward_fn)(dl_dtype dt, const dl_conv2d_shape *s, int fmt, int post,
                                    void *y, const void *x, const void *w, const void *b);
typedef int (*dl_conv2d_backward_fn)(dl_dtype dt, const dl_conv2d_shape *s, int fmt, void *gx,
                                     void *gw, void *gb, const void *gy, const void *x,
                                     const void *w);

typedef struct dl_cuda_conv_kernels {
    const char *family;
    /* The formats (DL_CONV_FMT_*) cuDNN computes in for operands of dtype dt
     * whose x is channels-last (x_cl) and w is (w_cl): as dl_cpu_conv2d_formats. */
    dl_conv2d_formats_fn conv2d_formats;
    /* Convolutions through cuDNN, as dl_cpu_conv2d_forward/backward (src/cpu/conv.h),
     * with dt F32, F64, F16 or BF16 (the half types compute in float32) and the
     * formats conv2d_formats gave (NHWC and W_OHWI together or neither; a
     * channels-last layout cuDNN refuses for a shape runs on NCHW copies).  post
     * must be 0.  Outputs are written in full; in the backward each of gx, gw, gb
     * may be NULL, x is read only for gw and w only for gx.  Every size of s is
     * positive except that the backward accepts C == 0 when only gb is wanted. */
    dl_conv2d_forward_fn conv2d_forward;
    dl_conv2d_backward_fn conv2d_backward;
} dl_cuda_conv_kernels;

extern const dl_cuda_conv_kernels *dl_cuda_conv;

#endif
