/* loader.h - the multi-threaded image loader behind dl.data.DataLoader for
 * datasets of files (ImageFolder, its subsets).
 *
 * Invariants:
 *  - Workers are pthreads that never call Lua and never use OpenMP; each
 *    sample (read file -> decode -> C pipeline) is written straight into its
 *    slot of the batch tensor.  With num_workers == 0 the calling thread does
 *    the same work, so batches are identical for any worker count.
 *  - A sample's randomness comes from (seed, epoch, dataset position), never
 *    from scheduling; the epoch's order is a Philox permutation of
 *    (seed, epoch) when shuffling.
 *  - Batches come back in order.  At most `window` batches are in flight.
 *  - A failed sample's message (naming the file) is returned by
 *    dl_loader_next for its batch, which then cancels the epoch; with
 *    skip_bad the sample is dropped from its batch and the message is handed
 *    back as a warning instead.
 *  - Worker threads live for one epoch: the end of an epoch, an error and
 *    dl_loader_stop join them, so an idle loader holds no threads.
 *  - dl_loader_stop cancels an epoch and waits for running samples; nothing
 *    ever blocks forever (workers always finish their current sample). */
#ifndef DL_DATA_LOADER_H
#define DL_DATA_LOADER_H

#include "core/tensor.h"
#include "folder.h"
#include "io/pipeline.h"

typedef struct {
    dl_file_index *index; /* retained by the loader */
    const int64_t *map;   /* dataset position -> index entry (copied); NULL: identity */
    int64_t n;            /* dataset size (index->n without map) */
    dl_pipeline *pipe;    /* retained; NULL: decode only */
    int channels;         /* 3 RGB, 1 L */
    int64_t batch_size;
    int shuffle, drop_last, skip_bad;
    int per_sample; /* return each sample's tensor instead of a stacked batch */
    uint64_t seed;
    int num_workers, prefetch; /* prefetch: batches in flight per worker */
} dl_loader_config;

typedef struct {
    int64_t index;     /* batch number, 0-based */
    dl_tensor *data;   /* (B, ...) stacked samples (not in per-sample mode) */
    dl_tensor **items; /* per-sample mode: B tensors */
    int64_t nitems;
    dl_tensor *labels;  /* (B,) int64, 0-based classes */
    dl_tensor *indices; /* (B,) int64, 0-based dataset positions */
    int nwarn;          /* skip_bad: messages of the dropped samples */
    char **warnings;
} dl_loader_batch;

typedef struct dl_loader dl_loader;

dl_loader *dl_loader_new(const dl_loader_config *cfg);
void dl_loader_free(dl_loader *l); /* stops, joins the workers, frees */
int64_t dl_loader_num_batches(const dl_loader *l);
/* Starts epoch `epoch` (cancelling a running one). */
int dl_loader_start(dl_loader *l, uint64_t epoch);
/* 1: *b holds the next batch; 0: the epoch is over; -1: error (the epoch is
 * cancelled, message in dl_last_error()). */
int dl_loader_next(dl_loader *l, dl_loader_batch *b);
/* Cancels the running epoch (no-op when none) and waits for busy workers. */
void dl_loader_stop(dl_loader *l);
void dl_loader_batch_clear(dl_loader_batch *b);

/* The epoch's sample order: a permutation of 0..n-1 from (seed, epoch). */
void dl_loader_permutation(int64_t n, uint64_t seed, uint64_t epoch, int64_t *out);

#endif
