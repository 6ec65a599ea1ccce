/* comm.h - the backend-neutral communicator interface between libdlua's
 * process group (src/dist/dist.c) and a transport plugin (MPI, NCCL) or the
 * built-in "local" backend.
 *
 * A plugin is a shared object exporting `dl_dist_plugin`, returning a
 * dl_comm_backend table with abi == DL_COMM_ABI.  It includes no dlua header
 * and calls nothing in libdlua: buffers are raw pointers with a dl_comm_dtype
 * and element count, errors are written into the caller's buffer.
 *
 * Invariants: every call comes from the thread that called init; operations
 * are non-blocking (start returns a request, test polls it), so the caller
 * owns the deadline and a dead peer can never make it wait forever.  A
 * request that completed or failed is freed by test; req_free drops one that
 * is abandoned (after a timeout). */
#ifndef DL_DIST_COMM_H
#define DL_DIST_COMM_H

#include <stddef.h>
#include <stdint.h>

#define DL_COMM_ABI 2

/* The most bytes one notice (notice_send) carries. */
#define DL_COMM_NOTICE_BYTES 512

typedef enum {
    DL_COMM_F32 = 0,
    DL_COMM_F64,
    DL_COMM_I64,
    DL_COMM_I32,
    DL_COMM_U8,
    DL_COMM_F16,
    DL_COMM_BF16,
} dl_comm_dtype;

/* AVG is SUM in the transport; the process group divides afterwards. */
typedef enum { DL_COMM_SUM = 0, DL_COMM_MAX, DL_COMM_MIN } dl_comm_op;

typedef struct {
    int rank, size, local_rank, local_size;
} dl_comm_info;

typedef struct dl_comm_backend {
    int abi;
    const char *name;
    /* Joins the launcher's job.  Returns the backend state, or NULL with a
     * one-line message in err.  timeout_s bounds the wait for peers where
     * the transport allows. */
    void *(*init)(dl_comm_info *info, double timeout_s, char *err, size_t errlen);
    /* Leaves the job cleanly (all requests done). */
    void (*finalize)(void *st);
    /* Ends the whole job after an unrecoverable error (a timed-out
     * collective leaves the transport in an unknown state). */
    void (*abort_job)(void *st, int code);
    /* Non-blocking collectives.  0 and *req set, or -1 with err.  For a
     * device buffer (dev >= 0, a CUDA ordinal) the plugin must say whether
     * it accepts one: device_buffers. */
    int (*iallreduce)(void *st, void *buf, int64_t count, dl_comm_dtype dt, dl_comm_op op,
                      void **req, char *err, size_t errlen);
    int (*ibroadcast)(void *st, void *buf, int64_t nbytes, int root, void **req, char *err,
                      size_t errlen);
    /* recv holds size * nbytes: rank r's block at r * nbytes */
    int (*iallgather)(void *st, const void *send, void *recv, int64_t nbytes, void **req, char *err,
                      size_t errlen);
    int (*ibarrier)(void *st, void **req, char *err, size_t errlen);
    /* 1: done (req freed), 0: still running, -1: failed (req freed, err set). */
    int (*test)(void *st, void *req, char *err, size_t errlen);
    void (*req_free)(void *st, void *req);
    int device_buffers; /* 1: buffers may live on the CUDA device (NCCL) */
    /* A backend that needs another to start (NCCL exchanges its id over MPI)
     * has init_boot instead of init: boot is initialised and stays owned by
     * the caller, info holds its ranks on entry; NULL for the others.  Such a
     * backend takes device buffers only: host tensors and barriers go to the
     * boot backend. */
    void *(*init_boot)(dl_comm_info *info, double timeout_s, const struct dl_comm_backend *boot,
                       void *boot_st, char *err, size_t errlen);
    /* Notices: small messages (at most DL_COMM_NOTICE_BYTES) on a channel
     * of their own, never matched against a collective, for a rank to tell
     * the others that it failed or left.  notice_send copies buf and starts
     * sending it to rank `to` (0 or -1 with err); notice_poll drives the
     * sends in flight and returns 1 with a received notice in buf (its
     * sender in *from), 0 when none has arrived; notice_pending is the
     * number of sends not yet complete.  NULL in a backend without peers
     * (local) or one that leaves them to its boot backend (NCCL). */
    int (*notice_send)(void *st, int to, const void *buf, size_t nbytes, char *err, size_t errlen);
    int (*notice_poll)(void *st, void *buf, size_t nbytes, int *from);
    int (*notice_pending)(void *st);
} dl_comm_backend;

typedef const dl_comm_backend *(*dl_dist_plugin_fn)(void);

#endif
