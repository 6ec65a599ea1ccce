/* kernels/reduce.h - the kernel interface of the reduce family
 * (ops/reduce.c): the reduction shape, the accumulation and finishing kinds,
 * and the CUDA table of the reductions, scans and medians (cpu/reduce.h has
 * the CPU twins).
 *
 * Shared by ops/, cpu/ and cuda/; the table's contract is in kernels/cuda.h. */
#ifndef DL_KERNELS_REDUCE_H
#define DL_KERNELS_REDUCE_H

#include "core/dtype.h"

#include <stdbool.h>
#include <stdint.h>

/* Element (ro, o, r, i) is x[((ro*O + o)*R + r)*I + i].  RO > 1 lets a dense
 * input whose reduced dims lie on both sides of the kept ones be read in
 * place; indices (minmax) are only meaningful when RO == 1. */
typedef struct {
    int64_t RO, O, R, I;
} dl_rshape;

/* What a float reduction accumulates (v is one element). */
typedef enum {
    DL_ACC_SUM,     /* sum v */
    DL_ACC_SUMSQ,   /* sum v^2 */
    DL_ACC_SUMABS,  /* sum |v| */
    DL_ACC_SUMPOW,  /* sum |v|^p */
    DL_ACC_COUNTNZ, /* number of v != 0 */
    DL_ACC_PROD,    /* product of v */
    DL_ACC_MAX,     /* max v, NaN wins; -inf when R == 0 */
    DL_ACC_MIN,     /* min v, NaN wins; +inf when R == 0 */
    DL_ACC_MAXABS,  /* max |v|, NaN wins; 0 when R == 0 */
    DL_ACC_MINABS,  /* min |v|, NaN wins; +inf when R == 0 */
    DL_ACC_SUMEXP,  /* sum exp(v - shift) */
    DL_ACC_SQDEV,   /* sum (v - shift)^2 */
} dl_acc_kind;

/* Final touches on n accumulated values a, in place. */
typedef enum {
    DL_FIN_DIV,       /* a / c */
    DL_FIN_SQRT_DIV,  /* sqrt(a / c) */
    DL_FIN_POW,       /* a^c */
    DL_FIN_LOG_SHIFT, /* log(a) + shift */
} dl_fin_kind;

typedef struct dl_cuda_reduce_kernels {
    const char *family;
    int (*reduce_acc)(dl_acc_kind kind, const void *x, dl_dtype dt, const dl_rshape *s, double p,
                      const double *shift, double *out);
    int (*reduce_acc_i64)(bool prod, const int64_t *x, const dl_rshape *s, int64_t *out);
    int (*reduce_minmax)(bool is_max, const void *x, dl_dtype dt, const dl_rshape *s, void *vals,
                         int64_t *idx);
    int (*reduce_allany)(bool is_all, const uint8_t *x, const dl_rshape *s, uint8_t *out);
    int (*scan)(bool prod, const void *x, dl_dtype dt, int64_t O, int64_t R, int64_t I, void *out);
    int (*median)(const void *x, dl_dtype dt, int64_t O, int64_t R, int64_t I, void *vals,
                  int64_t *idx);
    int (*reduce_finish)(dl_fin_kind kind, double *a, int64_t n, double c, const double *shift);
    /* a[i] = 0 where a[i] is +-inf (logsumexp does not subtract an infinite max) */
    int (*reduce_zero_inf)(double *a, int64_t n);
} dl_cuda_reduce_kernels;

extern const dl_cuda_reduce_kernels *dl_cuda_reduce;

#endif
