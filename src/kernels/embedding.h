/* kernels/embedding.h - the kernel interface of the embedding family
 * (ops/embedding.c): embedding lookups, bags of them, their weight
 * gradients and max_norm's renormalisation; the shape, the bag modes and the
 * CUDA table (cpu/embedding.h has the CPU twins).
 * Shared by ops/, cpu/ and cuda/; the table's contract is in kernels/cuda.h.
 *
 * Buffers (all contiguous; ids, bounds, bag_of, bag_size, argmax int64):
 *  - weight (num, dim); ids (n), 0-based, each in [0, num) (checked by the
 *    op layer); padding_idx 0-based, or -1 for none.
 *  - bags: bounds (bags + 1) with bounds[0] = 0 <= bounds[b] <= bounds[b+1]
 *    <= bounds[bags] = n: bag b holds ids[bounds[b] .. bounds[b+1]).
 *    Entries equal to padding_idx take no part in a bag.  bag_of (n): the bag
 *    of each entry, -1 for a padding entry; bag_size (bags): the entries
 *    that took part; argmax (bags, dim): for max, the entry whose value won
 *    each element, -1 for an empty bag.  An empty bag's output is 0.
 *  - dt is the dtype of weight, out, gy, gw, psw (per_sample_weights, n) and
 *    gpsw: F32 or F64 on the CPU (the op layer computes the half types in
 *    float32 there), also F16 and BF16 on CUDA (computed in float32), except
 *    where an entry says otherwise.
 *  - s->n, s->num, s->dim >= 1 (the op layer skips empty work); s->bags >= 0. */
#ifndef DL_KERNELS_EMBEDDING_H
#define DL_KERNELS_EMBEDDING_H

#include "core/dtype.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct dl_emb_shape {
    int64_t n, num, dim, bags;
} dl_emb_shape;

typedef enum dl_bag_mode { DL_BAG_SUM, DL_BAG_MEAN, DL_BAG_MAX } dl_bag_mode;

typedef struct dl_cuda_embedding_kernels {
    const char *family;
    /* out (n, dim) = weight[ids]: rows of esz-byte elements (any dtype). */
    int (*gather)(void *out, const void *weight, size_t esz, const int64_t *ids,
                  const dl_emb_shape *s);
    /* out (bags, dim), bag_of, bag_size and (max) argmax, from weight, ids,
     * bounds and psw (NULL: 1; sum mode only). */
    int (*bag_forward)(dl_dtype dt, dl_bag_mode mode, void *out, int64_t *bag_of, int64_t *bag_size,
                       int64_t *argmax, const void *weight, const int64_t *ids,
                       const int64_t *bounds, const void *psw, const dl_emb_shape *s,
                       int64_t padding_idx);
    /* gw (num, dim), zeroed, += the gradient of every entry k that is not
     * padding: gy's row bag_of[k] (bag_of NULL: row k) times psw[k] (NULL:
     * 1), divided by bag_size[bag_of[k]] (mean; NULL otherwise) and, with
     * by_freq, by the number of times ids[k] occurs.  Deterministic: each
     * row's contributions are added in entry order.  dt is F32 or F64. */
    int (*backward)(dl_dtype dt, void *gw, const void *gy, const int64_t *ids,
                    const int64_t *bag_of, const void *psw, const int64_t *bag_size,
                    const dl_emb_shape *s, int64_t padding_idx, bool by_freq);
    /* max mode: gw[ids[argmax[b][j]]][j] += gy[b][j] for argmax >= 0; gw
     * zeroed; dt is F32 or F64. */
    int (*bag_max_backward)(dl_dtype dt, void *gw, const void *gy, const int64_t *ids,
                            const int64_t *argmax, const dl_emb_shape *s);
    /* gpsw[k] = dot(gy[bag_of[k]], weight[ids[k]]), 0 for padding entries
     * (bag_of[k] < 0); gy and gpsw F32 or F64, weight dt. */
    int (*psw_backward)(dl_dtype dt, dl_dtype wdt, void *gpsw, const void *gy, const void *weight,
                        const int64_t *ids, const int64_t *bag_of, const dl_emb_shape *s);
    /* In place: each distinct row ids[k] whose norm_type-norm is above
     * max_norm is scaled by max_norm / (norm + 1e-7) (PyTorch's
     * embedding_renorm_). */
    int (*renorm)(dl_dtype dt, void *weight, const int64_t *ids, const dl_emb_shape *s,
                  double max_norm, double norm_type);
} dl_cuda_embedding_kernels;

extern const dl_cuda_embedding_kernels *dl_cuda_embedding;

#endif
