/* kernels/attention.h - the kernel interface of the attention family
 * (ops/attention.c): scaled dot-product attention's parameters, its mask
 * descriptor, the dropout stream both backends draw alike, and the CUDA table
 * (cpu/attention.h has the CPU twins).
 *
 * Layout every kernel sees: the batch dims (broadcast among query, key and
 * value, then flattened to B) lead, and
 *   q is (B, L, E), k is (B, S, E), v is (B, S, Ev), out is (B, L, Ev),
 *   lse is (B, L): the log-sum-exp of each query row's scaled, masked scores,
 * all dense in the compute dtype (lse in float32, or float64 for float64).
 * Weights: P = softmax(scale * q k^T + mask) along S; out = dropout(P) v.
 * A row whose keys are all masked out gets out = 0 and lse = +inf (so the
 * backward's exp(s - lse) is 0 there): PyTorch 2.5+'s convention, not NaN.
 *
 * Dropout stream: weight (b, i, j) is kept when the Philox4x32-10 word
 * (seed, counter offset + (b*L + i)*ceil(S/4) + j/4, lane j%4), as a 24-bit
 * unit float (dl_u32_to_unit_float), is below (float)(1 - dropout_p); kept
 * weights are scaled by 1/(1 - p).  The op reserves B*L*ceil(S/4) counter
 * blocks, so the mask does not depend on blocking, threads or device.
 *
 * Shared by ops/, cpu/ and cuda/; the table's contract is in kernels/cuda.h. */
#ifndef DL_KERNELS_ATTENTION_H
#define DL_KERNELS_ATTENTION_H

#include "core/dtype.h"
#include "core/tensor.h"

#include <stdbool.h>
#include <stdint.h>

/* An attention mask broadcast to (B, L, S) without copying: element (b, i, j)
 * is at data + boff(b) + i*rs + j*cs elements, where boff decomposes b over
 * the batch dims bshape[0..nb) (outermost first) with strides bstride
 * (0 where the mask broadcasts).  bool: false means "masked out"; a floating
 * mask (in the compute dtype) is added to the scaled scores. */
typedef struct dl_attn_mask {
    const void *data; /* NULL: no mask */
    dl_dtype dtype;   /* DL_DTYPE_BOOL or the compute dtype */
    int nb;
    int64_t bshape[DL_MAX_DIMS], bstride[DL_MAX_DIMS];
    int64_t rs, cs;
} dl_attn_mask;

typedef struct dl_attn_params {
    int64_t B, L, S, E, Ev;
    double scale;      /* multiplies q k^T (PyTorch's default 1/sqrt(E) is set by the op) */
    bool causal;       /* key j takes part in query i's row only when j <= i (top-left) */
    double dropout_p;  /* in [0, 1]; 0: no dropout */
    uint64_t seed;     /* dropout stream (above) */
    uint64_t offset;   /* its first counter block */
    dl_attn_mask mask; /* never set together with causal */
} dl_attn_params;

/* Offset of mask element (b, 0, 0). */
static inline int64_t dl_attn_mask_boff(const dl_attn_mask *m, int64_t b) {
    int64_t off = 0;
    for (int d = m->nb - 1; d >= 0; d--) {
        int64_t s = m->bshape[d], q = b / s;
        off += (b - q * s) * m->bstride[d];
        b = q;
    }
    return off;
}

/* Counter blocks the dropout stream of one call uses. */
static inline uint64_t dl_attn_dropout_blocks(const dl_attn_params *p) {
    return (uint64_t)(p->B * p->L) * (uint64_t)((p->S + 3) / 4);
}

typedef struct dl_cuda_attention_kernels {
    const char *family;
    /* out, lse from q, k, v (device pointers) of dtype dt (float32, float64,
     * float16 or bfloat16; the half types accumulate in float32, lse is
     * float32 for them). */
    int (*forward)(void *out, void *lse, const void *q, const void *k, const void *v, dl_dtype dt,
                   const dl_attn_params *p);
    /* dq (B,L,E), dk (B,S,E), dv (B,S,Ev), every element written, from the
     * forward's inputs, out and lse and the gradient gout (B,L,Ev). */
    int (*backward)(void *dq, void *dk, void *dv, const void *gout, const void *q, const void *k,
                    const void *v, const void *out, const void *lse, dl_dtype dt,
                    const dl_attn_params *p);
} dl_cuda_attention_kernels;

extern const dl_cuda_attention_kernels *dl_cuda_attention;

#endif
