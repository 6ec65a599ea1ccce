/* conv.h - CPU 2-D convolution kernels, forward and backward.
 *
 * float32 runs on oneDNN convolution primitives (cached per shape, see
 * dnnl_util.h); float64 runs on im2col + our GEMM (src/cpu/gemm.h) and exists
 * for gradient checks.  All buffers are dense, of one dtype (float32 may be
 * channels-last, see DL_CONV_FMT_* in kernels/conv.h), otherwise contiguous
 * row-major; shapes are described by dl_conv2d_shape and were validated by the op layer
 * (src/ops/conv.c): every size is positive, OH/OW follow PyTorch's formula
 * floor((H + 2*ph - dh*(KH-1) - 1) / sh) + 1.  No Lua, no allocation of
 * results: outputs are written in full (never accumulated into). */
#ifndef DL_CPU_CONV_H
#define DL_CPU_CONV_H

#include "kernels/conv.h"
#include "core/dtype.h"
#include "core/storage.h"

#include <stdbool.h>
#include <stdint.h>

/* The formats (DL_CONV_FMT_*, kernels/conv.h) the kernels bind for operands
 * of dtype dt whose layouts are channels-last (x_cl: x NHWC; w_cl: w OHWI):
 * float32 runs either layout in place, float64 and the half types (computed
 * in float64/float32 copies) always run NCHW/OIHW. */
int dl_cpu_conv2d_formats(dl_dtype dt, bool x_cl, bool w_cl);

/* y = conv(x, w) + b.  dt is F32 or F64.
 * y is (N,O,OH,OW), x is (N,C,H,W), w is (O,C/groups,KH,KW), b is (O) or NULL
 * (in memory as fmt says).  Returns 0, or -1 with dl_last_error set. */
int dl_cpu_conv2d_forward(dl_dtype dt, const dl_conv2d_shape *s, int fmt, int post, void *y,
                          const void *x, const void *w, const void *b);

/* The float32 forward of an inference (no gradient through it) whose
 * weights w lie in storage wst: when oneDNN wants them in another layout,
 * the reordered copy is kept on wst and reused while wst's version stays
 * (see conv.c).  Writers of wst's bytes must bump its version. */
int dl_cpu_conv2d_forward_packed(const dl_conv2d_shape *s, int fmt, int post, float *y,
                                 const float *x, const float *w, const float *b, dl_storage *wst);

/* Gradients of conv2d given gy = dL/dy.  Each output may be NULL (not wanted).
 * gx is (N,C,H,W), gw is (O,C/groups,KH,KW), gb is (O); gy is (N,O,OH,OW),
 * x is (N,C,H,W) (read only when gw is wanted), w is (O,C/groups,KH,KW) (read
 * only when gx is wanted). */
int dl_cpu_conv2d_backward(dl_dtype dt, const dl_conv2d_shape *s, int fmt, void *gx, void *gw,
                           void *gb, const void *gy, const void *x, const void *w);

/* How float32 convolutions hand tensors to oneDNN: PLAIN binds our NCHW/OIHW
 * buffers directly; ANY lets oneDNN pick blocked layouts and reorders to and
 * from them on every call; AUTO (the default) picks per shape what measured
 * faster on ResNet-50 layers (see conv.c).  The setter exists for benchmarks. */
typedef enum {
    DL_CONV_LAYOUT_PLAIN = 0,
    DL_CONV_LAYOUT_ANY = 1,
    DL_CONV_LAYOUT_AUTO = 2
} dl_conv_layout;
void dl_cpu_conv_set_layout(dl_conv_layout l);
dl_conv_layout dl_cpu_conv_get_layout(void);
/* Whether eligible float32 3x3 convolutions run Winograd (default on; see
 * conv.c).  The setter exists for benchmarks and tests. */
void dl_cpu_conv_set_winograd(bool on);
/* Whether a float32 forward of shape s with operands fmt runs a sum post-op
 * at full speed: oneDNN's GEMM-based convolution (1x1 kernels on NCHW) applies
 * one about 3x slower than a separate pass, so callers add themselves then. */
bool dl_cpu_conv2d_sum_fast(const dl_conv2d_shape *s, int fmt);
bool dl_cpu_conv_get_winograd(void);

#endif
