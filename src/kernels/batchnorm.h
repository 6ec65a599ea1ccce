/* kernels/batchnorm.h - the kernel interface of the batchnorm family
 * (ops/batchnorm.c): the (N,C,S) shape and the CUDA table (cpu/batchnorm.h
 * has the CPU twins).
 * Shared by ops/, cpu/ and cuda/; the table's contract is in kernels/cuda.h.
 *
 * The CUDA table mirrors cpu/batchnorm.h, plus a layout and mixed precision:
 *  - dt is the dtype of x, y, gx, gy: F32, F64, F16 or BF16.  The per-channel
 *    vectors (w, b, mean, var, gw, gb) are F64 when dt is F64 and F32
 *    otherwise (a half input keeps float32 parameters and statistics).
 *  - channels_last false: x, y, gx, gy are contiguous (N,C,S); true: they are
 *    contiguous (N,S,C) (C fastest).  Vectors are contiguous (C).
 *  - w and b may be NULL (1 and 0); gx, gw, gb may each be NULL.
 *  - s->N * s->S >= 1 and s->C >= 1 (the op layer skips empty work).
 *
 * The fused ReLU (ops batch_norm_relu, batch_norm_add_relu): z = relu(bn(x) +
 * res), described by a dl_bn_act beside the plain arguments (see below), and
 * the implementation switch of CUDA training (dl_bn_impl). */
#ifndef DL_KERNELS_BATCHNORM_H
#define DL_KERNELS_BATCHNORM_H

#include "core/dtype.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct dl_bn_shape {
    int64_t N, C, S;
} dl_bn_shape;

/* --- the fused ReLU ---------------------------------------------------------------
 * Forward: z = relu(y + res) with y batch norm's output (rounded to the data
 * dtype first, as the unfused ops do) and res NULL or like x; relu keeps NaN
 * (v < 0 ? 0 : v).  Backward: gz = gy where the ReLU passed (!(z <= 0), as
 * threshold_backward), 0 elsewhere; batch norm's backward runs on gz and
 * gres (the residual's gradient) is gz.
 *
 * The mask (DL_BN_IMPL_NATIVE) is one bit per element, set where the ReLU
 * passes.  Elements are grouped in units: rows of C channels when the data is
 * channels-last or S == 1 ((N*S) units), else the (n, c) planes of S elements
 * (N*C units); bit j of unit u is bit j % 32 of 32-bit word u * W + j / 32,
 * W = ceil(L / 32) for units of L elements.  So every unit starts on a word
 * and one thread (CPU) or whole warps (CUDA) write it, without races.
 * DL_BN_IMPL_CUDNN's mask is cuDNN's reserve space instead, and its backward
 * also reads the forward's output y. */
typedef struct dl_bn_act {
    const void *res;    /* forward: added before the ReLU (like x), or NULL */
    void *mask;         /* forward: written, or NULL (not kept); backward: read */
    int64_t mask_bytes; /* the mask's size */
    void *gres;         /* backward: the residual's gradient (like x), or NULL */
    const void *y;      /* backward: the forward's output (DL_BN_IMPL_CUDNN), or NULL */
    bool add;           /* backward: the forward added a residual (res was set) */
    int impl;           /* forward: in, the plan's; out, the one that ran; backward: in */
} dl_bn_act;

/* Whether the mask groups elements in rows of channels (else planes). */
static inline bool dl_bn_mask_rows(bool channels_last, const dl_bn_shape *s) {
    return channels_last || s->S == 1;
}

/* 32-bit words of the native mask (see above). */
static inline int64_t dl_bn_mask_words(bool channels_last, const dl_bn_shape *s) {
    bool rows = dl_bn_mask_rows(channels_last, s);
    int64_t units = rows ? s->N * s->S : s->N * s->C, len = rows ? s->C : s->S;
    return units * ((len + 31) / 32);
}

/* Batch-norm implementations on CUDA in training (evaluation always runs
 * DL_BN_IMPL_NATIVE: one read, one write).  The user's choice,
 * dl_bn_impl_choice, is DL_BN_IMPL_AUTO (time both once per configuration
 * and keep the faster), or one of them; the environment variable
 * DLUA_BN_IMPL (auto, native, cudnn) sets it at start-up and
 * dl._nn.batch_norm_impl() at run time (ops/batchnorm.c owns it). */
typedef enum dl_bn_impl {
    DL_BN_IMPL_AUTO = 0,
    DL_BN_IMPL_NATIVE = 1, /* our kernels (cuda/batchnorm.cu), the CPU's formulas */
    DL_BN_IMPL_CUDNN = 2,  /* cudnnBatchNormalization*Ex */
} dl_bn_impl;
extern dl_bn_impl dl_bn_impl_choice;

/* What a training plan says (batch_norm_plan). */
typedef struct dl_bn_plan {
    int impl;           /* DL_BN_IMPL_NATIVE or DL_BN_IMPL_CUDNN */
    int64_t mask_bytes; /* bytes of the mask the forward writes: the larger of
                           the two implementations' (a fallback fits) */
} dl_bn_plan;

typedef struct dl_cuda_batchnorm_kernels {
    const char *family;
    int (*batch_norm_forward_train)(dl_dtype dt, bool channels_last, const dl_bn_shape *s,
                                    double eps, void *y, void *mean, void *var, const void *x,
                                    const void *w, const void *b);
    int (*batch_norm_forward_eval)(dl_dtype dt, bool channels_last, const dl_bn_shape *s,
                                   double eps, void *y, const void *x, const void *mean,
                                   const void *var, const void *w, const void *b);
    int (*batch_norm_backward)(dl_dtype dt, bool channels_last, const dl_bn_shape *s, double eps,
                               bool training, void *gx, void *gw, void *gb, const void *gy,
                               const void *x, const void *mean, const void *var, const void *w);
    /* out = (1 - m) * running + m * stat * factor; all F64, contiguous (C). */
    int (*batch_norm_update_running)(int64_t C, double *out, const double *running,
                                     const double *stat, double m, double factor);
    /* out = 1 / sqrt(v + eps) (to_invstd) or 1 / v^2 - eps, computed in double;
     * out and v contiguous (C) of dtype dt (F32 or F64). */
    int (*batch_norm_var_transform)(dl_dtype dt, int64_t C, void *out, const void *v, double eps,
                                    bool to_invstd);
    /* The training implementation of a configuration (act: 0 plain batch
     * norm, 1 with ReLU, 2 with add and ReLU), chosen once per configuration
     * by dl_bn_impl_choice; the plain entries above consult it themselves. */
    int (*batch_norm_plan)(dl_dtype dt, bool channels_last, const dl_bn_shape *s, int act,
                           dl_bn_plan *plan);
    /* The fused forms: the plain entries' arguments plus the ReLU (act,
     * non-NULL; see dl_bn_act).  b is read by the backward too (cuDNN's
     * recomputes the activation). */
    int (*batch_norm_act_forward)(dl_dtype dt, bool channels_last, const dl_bn_shape *s, double eps,
                                  bool training, void *y, void *mean, void *var, const void *x,
                                  const void *w, const void *b, dl_bn_act *act);
    int (*batch_norm_act_backward)(dl_dtype dt, bool channels_last, const dl_bn_shape *s,
                                   double eps, bool training, void *gx, void *gw, void *gb,
                                   const void *gy, const void *x, const void *mean, const void *var,
                                   const void *w, const void *b, const dl_bn_act *act);
} dl_cuda_batchnorm_kernels;

extern const dl_cuda_batchnorm_kernels *dl_cuda_batchnorm;

#endif
