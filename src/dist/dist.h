/* dist.h - the process group: one per process, over a communicator backend
 * (comm.h) that is either built in ("local", world size 1) or a plugin
 * loaded at dl_dist_init ("mpi", "nccl": build/dlua_dist_<name>.so, or
 * <libdir>/dlua/ in an install tree).
 *
 * Every collective gets the next sequence number and runs against a
 * deadline (the group's timeout): a peer that died or skipped it makes this
 * rank fail with a message naming the rank, the collective and its number,
 * after which the group is broken (later collectives fail at once, and the
 * job is aborted at exit).  Ranks are 0-based.  Tensors may have any layout
 * and live on any device: a backend that takes host buffers only gets a
 * contiguous host copy, written back when the collective completes.
 * Single-threaded: call from the thread that initialised the group. */
#ifndef DL_DIST_H
#define DL_DIST_H

#include "core/tensor.h"

#include <stdbool.h>

typedef enum { DL_REDUCE_SUM = 0, DL_REDUCE_AVG, DL_REDUCE_MAX, DL_REDUCE_MIN } dl_reduce_op;

/* backend: "auto", "local", "mpi" or "nccl"; timeout_s > 0. */
int dl_dist_init(const char *backend, double timeout_s);
bool dl_dist_is_initialized(void);
/* Leaves the group: a barrier (under the timeout), then the backend's
 * finalize.  The group cannot be initialised again in this process when the
 * backend was MPI (MPI allows one init per process). */
int dl_dist_destroy(void);
int dl_dist_rank(void);
int dl_dist_world_size(void);
int dl_dist_local_rank(void);
const char *dl_dist_backend(void);
double dl_dist_timeout(void);

/* Blocking collectives (0, or -1 with dl_last_error()). */
int dl_dist_all_reduce(dl_tensor *t, dl_reduce_op op);
int dl_dist_broadcast(dl_tensor *t, int root);
/* out[r] (world size entries, t's shape and dtype) receives rank r's t. */
int dl_dist_all_gather(dl_tensor *const *out, dl_tensor *t);
int dl_dist_barrier(void);

/* This rank cannot go on (an uncaught error; message: what went wrong, its
 * first line is sent): tells every other rank, which then fails its
 * pending or next collective at once with a message naming this rank and
 * message, instead of waiting for the timeout.  This process's exit then
 * waits (under the timeout) until every peer has heard, and ends the job.
 * Later collectives here fail.  No-op without a group, at world size 1, or
 * when already reported.  Returns 0. */
int dl_dist_report_failure(const char *message);

/* Non-blocking all-reduce (DistributedDataParallel's buckets). */
typedef struct dl_dist_work dl_dist_work;
dl_dist_work *dl_dist_all_reduce_start(dl_tensor *t, dl_reduce_op op);
/* Drives progress: 1 done, 0 running, -1 failed or past the deadline. */
int dl_dist_work_test(dl_dist_work *w);
/* Waits (under the deadline) and frees w; 0 or -1. */
int dl_dist_work_wait(dl_dist_work *w);
/* Frees w whatever its state (an abandoned request breaks the group). */
void dl_dist_work_free(dl_dist_work *w);

/* Seconds spent inside dl_dist_work_wait / blocking collectives waiting for
 * completion since init (the part of communication not hidden). */
double dl_dist_wait_seconds(void);

#endif
