/* cpu/embedding.h - CPU kernels of the embedding family: lookups, bags,
 * the weight gradients and max_norm's renormalisation.  Buffers, dtypes and
 * the meaning of every argument are those of the CUDA table's twins in
 * kernels/embedding.h (dt F32 or F64 here).  Results do not depend on the
 * thread count: every weight-gradient row adds its contributions in entry
 * order, in double.  The int functions return 0, or -1 with dl_last_error()
 * set (out of memory). */
#ifndef DL_CPU_EMBEDDING_H
#define DL_CPU_EMBEDDING_H

#include "kernels/embedding.h"

/* out (n, dim) = weight[ids], esz-byte elements */
void dl_cpu_embedding_gather(void *out, const void *weight, size_t esz, const int64_t *ids,
                             const dl_emb_shape *s);

/* out (bags, dim), bag_of (n), bag_size (bags), argmax (bags, dim; max only) */
int dl_cpu_embedding_bag_forward(dl_dtype dt, dl_bag_mode mode, void *out, int64_t *bag_of,
                                 int64_t *bag_size, int64_t *argmax, const void *weight,
                                 const int64_t *ids, const int64_t *bounds, const void *psw,
                                 const dl_emb_shape *s, int64_t padding_idx);

/* gw (num, dim), zeroed, += every non-padding entry's gradient row */
int dl_cpu_embedding_backward(dl_dtype dt, void *gw, const void *gy, const int64_t *ids,
                              const int64_t *bag_of, const void *psw, const int64_t *bag_size,
                              const dl_emb_shape *s, int64_t padding_idx, bool by_freq);

/* max mode: gw[ids[argmax[b][j]]][j] += gy[b][j] */
void dl_cpu_embedding_bag_max_backward(dl_dtype dt, void *gw, const void *gy, const int64_t *ids,
                                       const int64_t *argmax, const dl_emb_shape *s);

/* gpsw[k] = dot(gy[bag_of[k]], weight[ids[k]]) (weight also of dtype dt) */
void dl_cpu_embedding_psw_backward(dl_dtype dt, void *gpsw, const void *gy, const void *weight,
                                   const int64_t *ids, const int64_t *bag_of,
                                   const dl_emb_shape *s);

/* max_norm's in-place renormalisation of the distinct rows ids[k] */
int dl_cpu_embedding_renorm(dl_dtype dt, void *weight, const int64_t *ids, const dl_emb_shape *s,
                            double max_norm, double norm_type);

#endif
