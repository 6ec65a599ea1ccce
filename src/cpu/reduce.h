/* cpu/reduce.h - CPU kernels of the reduction family (sum, max, var, scans...).
 *
 * Reductions read a dense block viewed as (RO, O, R, I) (dl_rshape): they
 * fold over ro and r and write O*I results in (o, i) row-major order.  Scans
 * and the median read (O, R, I) (RO == 1) and work along r.  The ops layer
 * (src/ops/reduce.c) brings any input into this form and picks the dtype:
 *  - float kernels read float32 or float64 and accumulate in double; the
 *    reductions, max/min and logsumexp also read float16/bfloat16 and give
 *    the float32 copy's result (blocks converted on the way);
 *  - integer kernels read int64 and wrap around like int64 arithmetic;
 *  - all/any read bool bytes.
 * Indices written by kernels are 0-based positions along r.  Results do not
 * depend on the thread count.  Kernels return 0, or -1 with dl_last_error()
 * set when scratch memory cannot be allocated. */
#ifndef DL_CPU_REDUCE_H
#define DL_CPU_REDUCE_H

#include "kernels/reduce.h"
#include "core/dtype.h"

#include <stdbool.h>
#include <stdint.h>

/* x is float32 or float64 (dt), or float16/bfloat16 (converted in blocks:
 * the float32 copy's result, bit for bit); out is (O,I).  shift is (O,I) for SUMEXP
 * and SQDEV (else unused); p is the power of SUMPOW. */
int dl_cpu_reduce_acc(dl_acc_kind kind, const void *x, dl_dtype dt, const dl_rshape *s, double p,
                      const double *shift, double *out);

/* x is int64; out is (O,I): the sum (prod false) or product. */
int dl_cpu_reduce_acc_i64(bool prod, const int64_t *x, const dl_rshape *s, int64_t *out);

/* Max (is_max) or min over r with the index of its first occurrence; a NaN
 * beats every number (the first NaN is reported).  x is float32, float64,
 * float16/bfloat16 or int64 (dt); vals is (O,I) double for float input and int64 for int64
 * input; idx (O,I) may be NULL (and must be when RO > 1).  R must be > 0. */
int dl_cpu_reduce_minmax(bool is_max, const void *x, dl_dtype dt, const dl_rshape *s, void *vals,
                         int64_t *idx);

/* All (is_all) or any of bool bytes x into out (O,I). */
int dl_cpu_reduce_allany(bool is_all, const uint8_t *x, const dl_rshape *s, uint8_t *out);

/* Running sum (prod false) or product along r: x and out are (O,R,I) of the
 * same dtype dt (float32, float64: accumulated in double; int64). */
int dl_cpu_scan(bool prod, const void *x, dl_dtype dt, int64_t O, int64_t R, int64_t I, void *out);

/* Lower median along r and its index (among equal values, the smallest
 * index); a NaN in the row gives NaN and the index of the first NaN.  x is
 * float32/float64 (vals double) or int64 (vals int64).  R must be > 0. */
int dl_cpu_median(const void *x, dl_dtype dt, int64_t O, int64_t R, int64_t I, void *vals,
                  int64_t *idx);

/* logsumexp over ro and r of x (RO, O, R, I) into out (O,I), in one pass
 * over memory (a running max and sum per result): x is float32/float64, or
 * float16/bfloat16 (as their float32 copy); -inf for an empty reduction or
 * one of -inf only, +inf where a +inf is, NaN where a NaN is. */
int dl_cpu_reduce_logsumexp(const void *x, dl_dtype dt, const dl_rshape *s, double *out);

void dl_cpu_reduce_finish(dl_fin_kind kind, double *a, int64_t n, double c, const double *shift);

/* logsumexp's backward over one block of dims (cpu/logsumexp.c): x and gx
 * are (O, R, I) contiguous float32 or float64 values (dt), g and lse the
 * (O, I) incoming gradients and results, all of dtype dt:
 * gx = g * exp(x - lse), rounded as that formula op by op. */
int dl_cpu_logsumexp_backward(dl_dtype dt, int64_t O, int64_t R, int64_t I, void *gx, const void *x,
                              const void *g, const void *lse);

#endif
