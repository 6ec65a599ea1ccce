/* cpu/attention.h - CPU kernels of scaled dot-product attention, forward and
 * backward, blocked so that memory stays bounded: no (L, S) matrix is ever
 * formed, only (BR, BC) tiles of scores per thread.
 *
 * The layouts, the mask descriptor, the fully-masked-row convention and the
 * dropout stream are those of kernels/attention.h; the ops layer
 * (src/ops/attention.c) has checked the shapes and made every operand dense in
 * the compute dtype (float32 for float32 and the half types, float64).
 * Results do not depend on the thread count: each output element is summed
 * in a fixed order whatever the schedule.  Returns 0, or -1 with
 * dl_last_error() set (out of memory for the per-thread tiles). */
#ifndef DL_CPU_ATTENTION_H
#define DL_CPU_ATTENTION_H

#include "kernels/attention.h"

/* out is (B,L,Ev), lse (B,L); q (B,L,E), k (B,S,E), v (B,S,Ev). */
int dl_cpu_attention_forward_f32(float *out, float *lse, const float *q, const float *k,
                                 const float *v, const dl_attn_params *p);
int dl_cpu_attention_forward_f64(double *out, double *lse, const double *q, const double *k,
                                 const double *v, const dl_attn_params *p);

/* dq (B,L,E), dk (B,S,E), dv (B,S,Ev), every element written, from gout
 * (B,L,Ev) and the forward's q, k, v, out and lse.  Scores are recomputed per
 * tile from lse, as flash attention does. */
int dl_cpu_attention_backward_f32(float *dq, float *dk, float *dv, const float *gout,
                                  const float *q, const float *k, const float *v, const float *out,
                                  const float *lse, const dl_attn_params *p);
int dl_cpu_attention_backward_f64(double *dq, double *dk, double *dv, const double *gout,
                                  const double *q, const double *k, const double *v,
                                  const double *out, const double *lse, const dl_attn_params *p);

#endif
