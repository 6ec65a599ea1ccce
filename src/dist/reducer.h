/* reducer.h - DistributedDataParallel's gradient reducer: parameters'
 * gradients, divided by the world size, are copied into flat bucket buffers
 * (each laid out as its parameter) as the autograd engine reports them
 * final (autograd.h's gradient-ready hooks); a full bucket starts a
 * non-blocking all-reduce (SUM), buckets are launched in index order on
 * every rank, progress is driven after every backward node, and the
 * backward that was armed with dl_reducer_prepare waits for the last bucket
 * and writes the averaged gradients back into each parameter's .grad (or
 * makes .grad the bucket's view, as_view) before it returns.
 *
 * Buckets: reverse parameter order, the first one at most first_cap bytes,
 * the others at most cap bytes, one dtype and device per bucket; rebuilt once
 * from the order in which gradients arrived in the first armed backward
 * (rank 0's order, broadcast, so every rank buckets alike). */
#ifndef DL_DIST_REDUCER_H
#define DL_DIST_REDUCER_H

#include "core/tensor.h"

#include <stdbool.h>

typedef struct dl_reducer dl_reducer;

/* params[i] (retained) named names[i] (copied).  as_view: after a
 * synchronised backward each .grad is its parameter's view of bucket
 * memory (PyTorch's gradient_as_bucket_view: no copy out of the buckets,
 * and the .grad of the next synchronised backward is overwritten by it). */
dl_reducer *dl_reducer_new(int n, dl_tensor *const *params, const char *const *names,
                           int64_t cap_bytes, int64_t first_cap_bytes, bool find_unused,
                           bool as_view);
void dl_reducer_free(dl_reducer *r);
/* Arms r: the next backward that reaches its parameters synchronises them. */
void dl_reducer_prepare(dl_reducer *r);

typedef struct {
    int n_buckets;
    bool rebuilt;
    int64_t iterations; /* synchronised backwards */
    double wait_s;      /* time blocked after the backward pass, waiting for buckets */
    double copy_s;      /* time copying gradients in and out of buckets */
} dl_reducer_stats;
void dl_reducer_get_stats(const dl_reducer *r, dl_reducer_stats *s);
/* Bucket b's parameter indices (0-based) in order; returns the count. */
int dl_reducer_bucket(const dl_reducer *r, int b, int *idx, int max);

#endif
