/* plugin_mpi.c - the MPI communicator backend, built as its own shared
 * object (dlua_dist_mpi.so) when mpicc/MPI is found and loaded by
 * dl_dist_init; libdlua never links MPI.  Implements comm.h with MPI-3
 * non-blocking collectives on host buffers over a duplicate of
 * MPI_COMM_WORLD whose error handler returns errors instead of aborting.
 *
 * Notices (comm.h) travel on a second duplicate of MPI_COMM_WORLD, where
 * one receive from any source is always posted (and posted again after each
 * notice), so a notice is matched as soon as MPI makes progress.
 *
 * Invariants: MPI is initialised once per process (a second init after
 * finalize is refused by dist.c); every request handed out is an
 * MPI_Request on the heap, freed by test on completion or by req_free; a
 * notice's bytes live in its send record until the send completes. */
#include "comm.h"

#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NOTICE_TAG 1

typedef struct {
    MPI_Request req;
    char data[DL_COMM_NOTICE_BYTES];
} notice_out;

typedef struct {
    MPI_Comm comm;
    int owns_mpi;   /* we called MPI_Init (not a host program) */
    MPI_Comm ctl;   /* notices */
    MPI_Request rx; /* the posted notice receive, MPI_REQUEST_NULL when none */
    char rxbuf[DL_COMM_NOTICE_BYTES];
    notice_out **out; /* sends in flight */
    int n_out, cap_out;
} mpi_state;

static void mpi_msg(int code, const char *what, char *err, size_t errlen) {
    char s[MPI_MAX_ERROR_STRING];
    int n = 0;
    MPI_Error_string(code, s, &n);
    snprintf(err, errlen, "%s: %s", what, n ? s : "MPI error");
}

static void *mpi_init(dl_comm_info *info, double timeout_s, char *err, size_t errlen) {
    (void)timeout_s; /* MPI_Init has no deadline: the launcher bounds it */
    int inited = 0, rc;
    MPI_Initialized(&inited);
    mpi_state *st = calloc(1, sizeof *st);
    if (!st) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    if (!inited) {
        int provided = 0;
        rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided);
        if (rc != MPI_SUCCESS) {
            mpi_msg(rc, "MPI_Init_thread", err, errlen);
            free(st);
            return NULL;
        }
        st->owns_mpi = 1;
    }
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    rc = MPI_Comm_dup(MPI_COMM_WORLD, &st->comm);
    if (rc != MPI_SUCCESS) {
        mpi_msg(rc, "MPI_Comm_dup", err, errlen);
        free(st);
        return NULL;
    }
    MPI_Comm_set_errhandler(st->comm, MPI_ERRORS_RETURN);
    rc = MPI_Comm_dup(MPI_COMM_WORLD, &st->ctl);
    if (rc != MPI_SUCCESS) {
        mpi_msg(rc, "MPI_Comm_dup", err, errlen);
        MPI_Comm_free(&st->comm);
        free(st);
        return NULL;
    }
    MPI_Comm_set_errhandler(st->ctl, MPI_ERRORS_RETURN);
    if (MPI_Irecv(st->rxbuf, DL_COMM_NOTICE_BYTES, MPI_BYTE, MPI_ANY_SOURCE, NOTICE_TAG, st->ctl,
                  &st->rx) != MPI_SUCCESS)
        st->rx = MPI_REQUEST_NULL;
    MPI_Comm_rank(st->comm, &info->rank);
    MPI_Comm_size(st->comm, &info->size);
    MPI_Comm node;
    if (MPI_Comm_split_type(st->comm, MPI_COMM_TYPE_SHARED, info->rank, MPI_INFO_NULL, &node) ==
        MPI_SUCCESS) {
        MPI_Comm_rank(node, &info->local_rank);
        MPI_Comm_size(node, &info->local_size);
        MPI_Comm_free(&node);
    } else {
        info->local_rank = 0;
        info->local_size = 1;
    }
    return st;
}

/* Completed sends are dropped; the others stay in flight. */
static void drive_sends(mpi_state *st) {
    for (int i = 0; i < st->n_out;) {
        int flag = 0;
        if (MPI_Test(&st->out[i]->req, &flag, MPI_STATUS_IGNORE) != MPI_SUCCESS) flag = 1;
        if (!flag) {
            i++;
            continue;
        }
        free(st->out[i]);
        st->out[i] = st->out[--st->n_out];
    }
}

static void mpi_finalize(void *p) {
    mpi_state *st = p;
    if (st->rx != MPI_REQUEST_NULL) {
        MPI_Cancel(&st->rx);
        MPI_Wait(&st->rx, MPI_STATUS_IGNORE);
    }
    drive_sends(st);
    for (int i = 0; i < st->n_out; i++) /* unfinished: MPI may still read the bytes */
        MPI_Request_free(&st->out[i]->req);
    free(st->out);
    MPI_Comm_free(&st->ctl);
    MPI_Comm_free(&st->comm);
    if (st->owns_mpi) MPI_Finalize();
    free(st);
}

static void mpi_abort_job(void *p, int code) {
    mpi_state *st = p;
    fflush(stdout);
    fflush(stderr);
    MPI_Abort(st->comm, code);
}

static int mpi_type(dl_comm_dtype dt, MPI_Datatype *out) {
    switch (dt) {
    case DL_COMM_F32: *out = MPI_FLOAT; return 0;
    case DL_COMM_F64: *out = MPI_DOUBLE; return 0;
    case DL_COMM_I64: *out = MPI_INT64_T; return 0;
    case DL_COMM_I32: *out = MPI_INT32_T; return 0;
    case DL_COMM_U8: *out = MPI_UINT8_T; return 0;
    default: return -1; /* float16/bfloat16: MPI has no such types */
    }
}

static MPI_Request *new_req(char *err, size_t errlen) {
    MPI_Request *r = malloc(sizeof *r);
    if (!r) snprintf(err, errlen, "out of memory");
    return r;
}

/* MPI counts are int: larger buffers are refused rather than truncated */
static int count_ok(int64_t n, char *err, size_t errlen) {
    if (n <= 0x7fffffff) return 1;
    snprintf(err, errlen, "%lld elements exceed MPI's int count", (long long)n);
    return 0;
}

static int started(int rc, MPI_Request *r, void **req, const char *what, char *err, size_t errlen) {
    if (rc != MPI_SUCCESS) {
        mpi_msg(rc, what, err, errlen);
        free(r);
        return -1;
    }
    *req = r;
    return 0;
}

static int mpi_iallreduce(void *p, void *buf, int64_t count, dl_comm_dtype dt, dl_comm_op op,
                          void **req, char *err, size_t errlen) {
    mpi_state *st = p;
    MPI_Datatype t;
    if (mpi_type(dt, &t)) {
        snprintf(err, errlen, "the mpi backend cannot reduce float16/bfloat16 tensors");
        return -1;
    }
    if (!count_ok(count, err, errlen)) return -1;
    MPI_Op o = op == DL_COMM_MAX ? MPI_MAX : op == DL_COMM_MIN ? MPI_MIN : MPI_SUM;
    MPI_Request *r = new_req(err, errlen);
    if (!r) return -1;
    return started(MPI_Iallreduce(MPI_IN_PLACE, buf, (int)count, t, o, st->comm, r), r, req,
                   "MPI_Iallreduce", err, errlen);
}

static int mpi_ibroadcast(void *p, void *buf, int64_t nbytes, int root, void **req, char *err,
                          size_t errlen) {
    mpi_state *st = p;
    if (!count_ok(nbytes, err, errlen)) return -1;
    MPI_Request *r = new_req(err, errlen);
    if (!r) return -1;
    return started(MPI_Ibcast(buf, (int)nbytes, MPI_BYTE, root, st->comm, r), r, req, "MPI_Ibcast",
                   err, errlen);
}

static int mpi_iallgather(void *p, const void *send, void *recv, int64_t nbytes, void **req,
                          char *err, size_t errlen) {
    mpi_state *st = p;
    if (!count_ok(nbytes, err, errlen)) return -1;
    MPI_Request *r = new_req(err, errlen);
    if (!r) return -1;
    return started(
        MPI_Iallgather(send, (int)nbytes, MPI_BYTE, recv, (int)nbytes, MPI_BYTE, st->comm, r), r,
        req, "MPI_Iallgather", err, errlen);
}

static int mpi_ibarrier(void *p, void **req, char *err, size_t errlen) {
    mpi_state *st = p;
    MPI_Request *r = new_req(err, errlen);
    if (!r) return -1;
    return started(MPI_Ibarrier(st->comm, r), r, req, "MPI_Ibarrier", err, errlen);
}

static int mpi_test(void *p, void *req, char *err, size_t errlen) {
    (void)p;
    MPI_Request *r = req;
    int flag = 0;
    int rc = MPI_Test(r, &flag, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) {
        mpi_msg(rc, "MPI_Test", err, errlen);
        free(r);
        return -1;
    }
    if (!flag) return 0;
    free(r);
    return 1;
}

/* An abandoned request cannot be cancelled (collectives are not
 * cancellable); the group is broken and the job will be aborted, so only
 * the handle's memory is dropped. */
static void mpi_req_free(void *p, void *req) {
    (void)p;
    free(req);
}

/* --- notices --------------------------------------------------------------- */

static int mpi_notice_send(void *p, int to, const void *buf, size_t nbytes, char *err,
                           size_t errlen) {
    mpi_state *st = p;
    if (nbytes > DL_COMM_NOTICE_BYTES) {
        snprintf(err, errlen, "a notice holds at most %d bytes", DL_COMM_NOTICE_BYTES);
        return -1;
    }
    if (st->n_out == st->cap_out) {
        int cap = st->cap_out ? 2 * st->cap_out : 8;
        notice_out **o = realloc(st->out, (size_t)cap * sizeof *o);
        if (!o) {
            snprintf(err, errlen, "out of memory");
            return -1;
        }
        st->out = o;
        st->cap_out = cap;
    }
    notice_out *n = malloc(sizeof *n);
    if (!n) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    memcpy(n->data, buf, nbytes);
    int rc = MPI_Isend(n->data, (int)nbytes, MPI_BYTE, to, NOTICE_TAG, st->ctl, &n->req);
    if (rc != MPI_SUCCESS) {
        mpi_msg(rc, "MPI_Isend", err, errlen);
        free(n);
        return -1;
    }
    st->out[st->n_out++] = n;
    return 0;
}

static int mpi_notice_poll(void *p, void *buf, size_t nbytes, int *from) {
    mpi_state *st = p;
    drive_sends(st);
    if (st->rx == MPI_REQUEST_NULL) return 0;
    int flag = 0, count = 0;
    MPI_Status s;
    if (MPI_Test(&st->rx, &flag, &s) != MPI_SUCCESS) {
        st->rx = MPI_REQUEST_NULL; /* the channel failed: no more notices */
        return 0;
    }
    if (!flag) return 0;
    MPI_Get_count(&s, MPI_BYTE, &count);
    size_t n = count > 0 && (size_t)count < nbytes ? (size_t)count : nbytes;
    memset(buf, 0, nbytes);
    memcpy(buf, st->rxbuf, n);
    *from = s.MPI_SOURCE;
    if (MPI_Irecv(st->rxbuf, DL_COMM_NOTICE_BYTES, MPI_BYTE, MPI_ANY_SOURCE, NOTICE_TAG, st->ctl,
                  &st->rx) != MPI_SUCCESS)
        st->rx = MPI_REQUEST_NULL;
    return 1;
}

static int mpi_notice_pending(void *p) {
    mpi_state *st = p;
    drive_sends(st);
    return st->n_out;
}

static const dl_comm_backend mpi_backend = {
    .abi = DL_COMM_ABI,
    .name = "mpi",
    .init = mpi_init,
    .finalize = mpi_finalize,
    .abort_job = mpi_abort_job,
    .iallreduce = mpi_iallreduce,
    .ibroadcast = mpi_ibroadcast,
    .iallgather = mpi_iallgather,
    .ibarrier = mpi_ibarrier,
    .test = mpi_test,
    .req_free = mpi_req_free,
    .device_buffers = 0,
    .notice_send = mpi_notice_send,
    .notice_poll = mpi_notice_poll,
    .notice_pending = mpi_notice_pending,
};

const dl_comm_backend *dl_dist_plugin(void);
const dl_comm_backend *dl_dist_plugin(void) {
    return &mpi_backend;
}
