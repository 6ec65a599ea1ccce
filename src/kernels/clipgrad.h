/* kernels/clipgrad.h - the kernel interface of the clipgrad family
 * (ops/clipgrad.c): gradient clipping over many tensors in one pass (the
 * total norm, the scaling by it, clamping to a value); the tensor list and
 * the CUDA table (cpu/clipgrad.h has the CPU twins).
 * Shared by ops/, cpu/ and cuda/; the table's contract is in kernels/cuda.h.
 *
 * A list entry is one contiguous buffer of n >= 1 elements of a floating
 * dtype (F32, F64, F16 or BF16; a list may mix them), all on one device.
 * norm_type p: p > 0 (sum |x|^p)^(1/p), +inf (max |x|) or -inf (min |x|)
 * over all elements, or 0: PyTorch's 0-norm of the buffers' 0-norms, the
 * number of buffers holding a non-zero element.  Sums run in double over fixed chunks of each
 * buffer, added in a fixed order: results do not depend on the thread count
 * or the launch shape.  The scaling coefficient is PyTorch's,
 * min(max_norm / (total + 1e-6), 1), computed in the total's precision (its
 * dtype's: float for float32 and the half types). */
#ifndef DL_KERNELS_CLIPGRAD_H
#define DL_KERNELS_CLIPGRAD_H

#include "core/dtype.h"

#include <stdint.h>

typedef struct dl_mt_tensor {
    void *data;
    int64_t n;
    dl_dtype dt;
} dl_mt_tensor;

typedef struct dl_cuda_clipgrad_kernels {
    const char *family;
    /* *out (a 0-dim device scalar of dtype out_dt) = the p-norm of all n
     * buffers' elements together. */
    int (*total_norm)(int n, const dl_mt_tensor *ts, double p, void *out, dl_dtype out_dt);
    /* every element *= min(max_norm / (*total + 1e-6), 1); total is a 0-dim
     * device scalar of dtype total_dt, read on the device. */
    int (*scale_by_norm)(int n, const dl_mt_tensor *ts, const void *total, dl_dtype total_dt,
                         double max_norm);
    /* every element clamped to [-v, v] (NaN stays NaN) */
    int (*clamp)(int n, const dl_mt_tensor *ts, double v);
} dl_cuda_clipgrad_kernels;

extern const dl_cuda_clipgrad_kernels *dl_cuda_clipgrad;

#endif
