/* cuda_elementwise.h - the CUDA kernels of the elementwise family (src/ops/elementwise.c),
 * activation helpers, dropout masks, random fills (src/ops/random.c) and fused optimizer steps. The
 * table is filled in by cuda/elementwise.cu; see cuda_backend.h for the contract (entry points
 * mirror their CPU twins and return 0 or -1 with an error).
 *
 * What the op layer guarantees (as for the CPU kernels, src/cpu/elementwise.h and
 * src/cpu/activation.h): every operand has out's shape (broadcast operands are
 * expanded, stride 0); out and every dimensioned operand are on one CUDA device;
 * an operand may also be a CPU tensor holding one value (a 0-dim scalar,
 * expanded), which the kernels take by value.  Compute dtypes are those of the
 * CPU kernels, and in addition a float16/bfloat16 tensor may stand wherever a
 * float32 one is read or written: it is loaded as float and the float result is
 * rounded once when stored, so results equal the CPU's (which computes in
 * float32 and rounds per element).  The entry points check dtypes, devices and
 * shapes on the host before anything is launched. */
#ifndef DL_OPS_CUDA_ELEMENTWISE_H
#define DL_OPS_CUDA_ELEMENTWISE_H

#include "cuda_backend.h"
#include "ops/elementwise.h"

#include <stdbool.h>

/* binary returns this (with no message) when an integer division family op
 * (DIV_FLOOR, DIV_TRUNC, REMAINDER, FMOD on int64) met a zero divisor; the op
 * layer reports it as the CPU path does. */
#define DL_CUDA_ZERO_DIVISION (-2)

typedef struct dl_cuda_elementwise_kernels {
    const char *family;
    /* dl_cpu_binary: out = op(a, b); alpha scales b for ADD/SUB.  Only integer
     * division ops wait for the device (to read the zero-divisor flag). */
    int (*binary)(dl_binary_op op, dl_tensor *out, dl_tensor *a, dl_tensor *b, double alpha);
    /* dl_cpu_unary: out = op(x). */
    int (*unary)(dl_unary_op op, dl_tensor *out, dl_tensor *x);
    /* dl_cpu_clamp: out = min(max(x, lo), hi), NaN-propagating. */
    int (*clamp)(dl_tensor *out, dl_tensor *x, dl_tensor *lo, dl_tensor *hi);
    /* dl_cpu_where: out = cond ? a : b (out, a, b one dtype, any; cond bool or uint8). */
    int (*where)(dl_tensor *out, dl_tensor *cond, dl_tensor *a, dl_tensor *b);
    /* dl_cpu_masked_fill: self[i] = *value where mask[i]; value is a HOST pointer
     * to one element of self's dtype. */
    int (*masked_fill)(dl_tensor *self, dl_tensor *mask, const void *value);
    /* dl_cpu_isclose: out (bool) = |a - b| <= atol + |rtol * b| (a, b float32/64). */
    int (*isclose)(dl_tensor *out, dl_tensor *a, dl_tensor *b, double rtol, double atol,
                   bool equal_nan);
    /* dl_cpu_threshold_backward: gx = (y <= threshold) ? 0 : gy. */
    int (*threshold_backward)(dl_tensor *gx, dl_tensor *gy, dl_tensor *y, double threshold);
    /* dl_cpu_mask_scale: out = x * (mask ? scale : 0); mask is bool. */
    int (*mask_scale)(dl_tensor *out, dl_tensor *x, dl_tensor *mask, double scale);
} dl_cuda_elementwise_kernels;

#endif
