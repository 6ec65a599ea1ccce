/* plugin_mpi.c - the MPI communicator backend, built as its own shared
 * object (dlua_dist_mpi.so) when mpicc/MPI is found and loaded by
 * dl_dist_init; libdlua never links MPI.  Implements comm.h with MPI-3
 * non-blocking collectives on host buffers over a duplicate of
 * MPI_COMM_WORLD whose error handler returns errors instead of aborting.
 *
 * Invariants: MPI is initialised once per process (a second init after
 * finalize is refused by dist.c); every request handed out is an
 * MPI_Request on the heap, freed by test on completion or by req_free. */
#include "comm.h"

#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct {
    MPI_Comm comm;
    int owns_mpi; /* we called MPI_Init (not a host program) */
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

static void mpi_finalize(void *p) {
    mpi_state *st = p;
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

static const dl_comm_backend mpi_backend = {
    DL_COMM_ABI,    "mpi",          mpi_init,     mpi_finalize, mpi_abort_job, mpi_iallreduce,
    mpi_ibroadcast, mpi_iallgather, mpi_ibarrier, mpi_test,     mpi_req_free,  0,
    NULL,
};

const dl_comm_backend *dl_dist_plugin(void);
const dl_comm_backend *dl_dist_plugin(void) {
    return &mpi_backend;
}
