/* cuda_reduce.h - the CUDA kernels of the reductions and scans (src/ops/reduce.c), softmax and the
 * losses (src/ops/nn_func.c). The table is filled in by cuda/reduce.cu; see cuda_backend.h for the
 * contract (entry points mirror their CPU twins and return 0 or -1 with an error).
 *
 * Every pointer is device memory on the current device (the op layer makes
 * the tensors' device current first).  Where a CPU kernel comes as an _f32 and
 * an _f64 twin, the CUDA entry takes the dtype (float32 or float64) instead;
 * results that the CPU returns as a host double (sums, class weight sums) are
 * written to one device double.  Layouts, formulas and accumulation dtypes are
 * those of src/cpu/reduce.h, softmax.h and loss.h. */
#ifndef DL_OPS_CUDA_REDUCE_H
#define DL_OPS_CUDA_REDUCE_H

#include "cpu/loss.h"   /* dl_pointwise_loss */
#include "cpu/reduce.h" /* dl_rshape, dl_acc_kind, dl_fin_kind */
#include "cuda_backend.h"

typedef struct dl_cuda_reduce_kernels {
    const char *family;

    /* --- reductions (cpu/reduce.h) --------------------------------------------------------- */
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

    /* --- softmax (cpu/softmax.h); dt is float32 or float64 ----------------------------------- */
    int (*softmax)(void *y, const void *x, dl_dtype dt, int64_t outer, int64_t D, int64_t inner,
                   bool is_log);
    int (*softmax_backward)(void *gx, const void *gy, const void *y, dl_dtype dt, int64_t outer,
                            int64_t D, int64_t inner, bool is_log);

    /* --- losses (cpu/loss.h); dt is the dtype of every float buffer ------------------------- */
    /* *out (one device double) = sum of v (n elements), accumulated in double */
    int (*sum)(const void *v, dl_dtype dt, int64_t n, double *out);
    /* *out (one device double) = sum of weight[target[i]] (1 without weight) over the
     * targets that are not ignore_index */
    int (*class_weight_sum)(const int64_t *target, const void *weight, dl_dtype dt, int64_t n,
                            int64_t ignore_index, double *out);
    /* *first_bad (one device int64) = the smallest i whose target is neither
     * ignore_index nor in [0, C), or n when every target is valid */
    int (*target_check)(const int64_t *target, int64_t n, int64_t C, int64_t ignore_index,
                        int64_t *first_bad);
    int (*nll_loss)(void *out, const void *logp, const int64_t *target, const void *weight,
                    dl_dtype dt, int64_t N, int64_t C, int64_t S, int64_t ignore_index);
    int (*nll_loss_backward)(void *gx, const void *g, double g0, const int64_t *target,
                             const void *weight, dl_dtype dt, int64_t N, int64_t C, int64_t S,
                             int64_t ignore_index);
    int (*cross_entropy)(void *out, const void *x, const int64_t *target, const void *weight,
                         dl_dtype dt, int64_t N, int64_t C, int64_t S, int64_t ignore_index,
                         double eps);
    int (*cross_entropy_backward)(void *gx, const void *g, double g0, const void *x,
                                  const int64_t *target, const void *weight, dl_dtype dt, int64_t N,
                                  int64_t C, int64_t S, int64_t ignore_index, double eps);
    int (*cross_entropy_prob)(void *out, const void *x, const void *target, const void *weight,
                              dl_dtype dt, int64_t N, int64_t C, int64_t S, double eps);
    int (*cross_entropy_prob_backward)(void *gx, void *gtarget, const void *g, double g0,
                                       const void *x, const void *target, const void *weight,
                                       dl_dtype dt, int64_t N, int64_t C, int64_t S, double eps);
    int (*pointwise_loss)(void *out, const void *x, const void *y, const void *w, const void *pw,
                          dl_dtype dt, int64_t n, dl_pointwise_loss op);
    int (*pointwise_loss_backward)(void *gx, void *gy, const void *g, double g0, const void *x,
                                   const void *y, const void *w, const void *pw, dl_dtype dt,
                                   int64_t n, dl_pointwise_loss op);
} dl_cuda_reduce_kernels;

#endif
