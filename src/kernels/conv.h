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
#include <string.h>

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

/* --- cuDNN execution plans (cuda/conv_plan.cu) ---------------------------------
 * A plan is kept per key in a bounded LRU (core/lru.h).  The key holds every
 * fact a plan depends on, as int64 fields (no padding), so equal calls give
 * equal bytes: the direction, device, dtype, layout, the shape and the
 * strides of x, w and y (elements, in (N,C,H,W) / (O,C/g,KH,KW) order), the
 * byte alignment of each pointer (1, 2, 4, 8 or 16: cuDNN picks kernels by
 * it), TF32 (float32 only) and whether plans are timed (benchmark). */
enum { DL_CONV_PLAN_FWD = 0, DL_CONV_PLAN_BWD_DATA = 1, DL_CONV_PLAN_BWD_FILTER = 2 };

typedef struct dl_conv_plan_key {
    int64_t kind, device, dtype, nhwc, tf32, benchmark;
    int64_t align[3];    /* x (or dx), w (or dw), y (or dy) */
    int64_t shape[16];   /* N C H W O KH KW OH OW sh sw ph pw dh dw groups */
    int64_t strides[12]; /* x, w, y: four each */
} dl_conv_plan_key;

/* The byte alignment of p that cuDNN is told: the largest power of two up
 * to 16 dividing the address. */
static inline int64_t dl_conv_plan_align(const void *p) {
    uintptr_t a = (uintptr_t)p;
    int64_t al = 1;
    while (al < 16 && a % (uintptr_t)(2 * al) == 0) al *= 2;
    return al;
}

/* The strides (elements) of a dense (n, c, h, w) tensor, channels-last or not. */
static inline void dl_conv_plan_dense_strides(int64_t n, int64_t c, int64_t h, int64_t w, bool nhwc,
                                              int64_t *st) {
    (void)n;
    if (nhwc) {
        st[0] = h * w * c;
        st[1] = 1;
        st[2] = w * c;
        st[3] = c;
    } else {
        st[0] = c * h * w;
        st[1] = h * w;
        st[2] = w;
        st[3] = 1;
    }
}

/* Fills *k for a call of direction kind on dense operands (x, w, y are the
 * forward's roles: dx and dy take x's and y's places).  The key is zeroed
 * first, so it compares as bytes. */
static inline void dl_conv_plan_key_make(dl_conv_plan_key *k, int kind, int device, dl_dtype dt,
                                         const dl_conv2d_shape *s, bool nhwc, bool tf32,
                                         bool benchmark, const void *x, const void *w,
                                         const void *y) {
    int64_t *sh = k->shape;
    memset(k, 0, sizeof *k);
    k->kind = kind;
    k->device = device;
    k->dtype = (int64_t)dt;
    k->nhwc = nhwc;
    k->tf32 = dt == DL_DTYPE_F32 && tf32;
    k->benchmark = benchmark;
    k->align[0] = dl_conv_plan_align(x);
    k->align[1] = dl_conv_plan_align(w);
    k->align[2] = dl_conv_plan_align(y);
    sh[0] = s->N, sh[1] = s->C, sh[2] = s->H, sh[3] = s->W, sh[4] = s->O, sh[5] = s->KH;
    sh[6] = s->KW, sh[7] = s->OH, sh[8] = s->OW, sh[9] = s->sh, sh[10] = s->sw, sh[11] = s->ph;
    sh[12] = s->pw, sh[13] = s->dh, sh[14] = s->dw, sh[15] = s->groups;
    int64_t cg = s->groups > 0 ? s->C / s->groups : 0;
    dl_conv_plan_dense_strides(s->N, s->C, s->H, s->W, nhwc, k->strides);
    dl_conv_plan_dense_strides(s->O, cg, s->KH, s->KW, nhwc, k->strides + 4);
    dl_conv_plan_dense_strides(s->N, s->O, s->OH, s->OW, nhwc, k->strides + 8);
}

/* What the plan cache has done (cuda/conv_plan.cu): its LRU's statistics,
 * the calls that ran a cached plan or built one, the keys for which no plan
 * finalized (those run on the legacy API) and the plans timed. */
typedef struct dl_conv_plan_stats {
    int64_t size, capacity, hits, misses, evictions;
    int64_t executed, built, no_plan, timed;
} dl_conv_plan_stats;

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
    /* The plan cache's statistics (all zero before the first graph-API call). */
    void (*plan_stats)(dl_conv_plan_stats *out);
} dl_cuda_conv_kernels;

extern const dl_cuda_conv_kernels *dl_cuda_conv;

#endif
