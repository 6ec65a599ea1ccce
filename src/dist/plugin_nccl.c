/* plugin_nccl.c - the NCCL communicator backend (dlua_dist_nccl.so), built
 * when CUDA, NCCL and the MPI plugin are all found; libdlua never links it.
 * It starts through the MPI backend (init_boot: rank 0's ncclUniqueId is
 * broadcast over MPI) and takes CUDA device buffers only: dist.c sends host
 * tensors and barriers to the MPI backend.
 *
 * Ordering: dlua's compute stream is the legacy default stream (cuda/
 * runtime.cu); each collective records an event there, runs on this
 * plugin's own non-blocking stream after it, and records a completion event
 * that test polls (with ncclCommGetAsyncError, so a peer's failure is
 * reported instead of waited on).  The communicator is bound to device
 * LOCAL_RANK % device count, made current at init. */
#include "comm.h"

#include <cuda_runtime.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

typedef struct {
    ncclComm_t comm;
    cudaStream_t stream;
} nccl_state;

typedef struct {
    cudaEvent_t ready, done;
} nccl_req;

static int cuda_msg(cudaError_t e, const char *what, char *err, size_t errlen) {
    snprintf(err, errlen, "%s: %s", what, cudaGetErrorString(e));
    return -1;
}

static int nccl_msg(ncclResult_t r, const char *what, char *err, size_t errlen) {
    snprintf(err, errlen, "%s: %s", what, ncclGetErrorString(r));
    return -1;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void *nccl_init(dl_comm_info *info, double timeout_s, char *err, size_t errlen) {
    (void)info, (void)timeout_s;
    snprintf(err, errlen, "the nccl backend starts through the mpi backend (init_boot)");
    return NULL;
}

static void *nccl_init_boot(dl_comm_info *info, double timeout_s, const dl_comm_backend *boot,
                            void *boot_st, char *err, size_t errlen) {
    int ndev = 0;
    cudaError_t ce = cudaGetDeviceCount(&ndev);
    if (ce != cudaSuccess || ndev == 0) {
        snprintf(err, errlen, "no CUDA device (%s)",
                 ce != cudaSuccess ? cudaGetErrorString(ce) : "0 devices");
        return NULL;
    }
    ce = cudaSetDevice(info->local_rank % ndev);
    if (ce != cudaSuccess) return cuda_msg(ce, "cudaSetDevice", err, errlen), NULL;
    ncclUniqueId id;
    ncclResult_t r;
    if (info->rank == 0 && (r = ncclGetUniqueId(&id)) != ncclSuccess)
        return nccl_msg(r, "ncclGetUniqueId", err, errlen), NULL;
    void *req = NULL;
    if (boot->ibroadcast(boot_st, &id, sizeof id, 0, &req, err, errlen)) return NULL;
    double deadline = now_s() + timeout_s;
    int t;
    while ((t = boot->test(boot_st, req, err, errlen)) == 0) {
        if (now_s() > deadline) {
            boot->req_free(boot_st, req);
            snprintf(err, errlen, "rank %d: the NCCL id from rank 0 did not arrive within %g s",
                     info->rank, timeout_s);
            return NULL;
        }
    }
    if (t < 0) return NULL;
    nccl_state *st = calloc(1, sizeof *st);
    if (!st) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    if ((r = ncclCommInitRank(&st->comm, info->size, id, info->rank)) != ncclSuccess) {
        free(st);
        return nccl_msg(r, "ncclCommInitRank", err, errlen), NULL;
    }
    if ((ce = cudaStreamCreateWithFlags(&st->stream, cudaStreamNonBlocking)) != cudaSuccess) {
        ncclCommDestroy(st->comm);
        free(st);
        return cuda_msg(ce, "cudaStreamCreateWithFlags", err, errlen), NULL;
    }
    return st;
}

static void nccl_finalize(void *p) {
    nccl_state *st = p;
    cudaStreamSynchronize(st->stream);
    ncclCommDestroy(st->comm);
    cudaStreamDestroy(st->stream);
    free(st);
}

static void nccl_abort_job(void *p, int code) {
    (void)code; /* dist.c aborts the job through the boot backend next */
    nccl_state *st = p;
    ncclCommAbort(st->comm);
}

/* Events around a collective; the caller enqueues it between begin and end. */
static nccl_req *begin(nccl_state *st, char *err, size_t errlen) {
    nccl_req *q = calloc(1, sizeof *q);
    if (!q) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    cudaError_t ce = cudaEventCreateWithFlags(&q->ready, cudaEventDisableTiming);
    if (ce == cudaSuccess) ce = cudaEventCreateWithFlags(&q->done, cudaEventDisableTiming);
    if (ce == cudaSuccess) ce = cudaEventRecord(q->ready, 0); /* dlua's compute stream */
    if (ce == cudaSuccess) ce = cudaStreamWaitEvent(st->stream, q->ready, 0);
    if (ce != cudaSuccess) {
        cuda_msg(ce, "nccl backend: events", err, errlen);
        if (q->ready) cudaEventDestroy(q->ready);
        if (q->done) cudaEventDestroy(q->done);
        free(q);
        return NULL;
    }
    return q;
}

static void req_destroy(nccl_req *q) {
    cudaEventDestroy(q->ready);
    cudaEventDestroy(q->done);
    free(q);
}

static int end(nccl_state *st, nccl_req *q, ncclResult_t r, const char *what, void **req, char *err,
               size_t errlen) {
    if (r != ncclSuccess) {
        req_destroy(q);
        return nccl_msg(r, what, err, errlen);
    }
    cudaError_t ce = cudaEventRecord(q->done, st->stream);
    if (ce != cudaSuccess) {
        req_destroy(q);
        return cuda_msg(ce, "cudaEventRecord", err, errlen);
    }
    *req = q;
    return 0;
}

static int nccl_type(dl_comm_dtype dt, ncclDataType_t *out) {
    switch (dt) {
    case DL_COMM_F32: *out = ncclFloat32; return 0;
    case DL_COMM_F64: *out = ncclFloat64; return 0;
    case DL_COMM_I64: *out = ncclInt64; return 0;
    case DL_COMM_I32: *out = ncclInt32; return 0;
    case DL_COMM_U8: *out = ncclUint8; return 0;
    case DL_COMM_F16: *out = ncclFloat16; return 0;
    case DL_COMM_BF16: *out = ncclBfloat16; return 0;
    }
    return -1;
}

static int nccl_iallreduce(void *p, void *buf, int64_t count, dl_comm_dtype dt, dl_comm_op op,
                           void **req, char *err, size_t errlen) {
    nccl_state *st = p;
    ncclDataType_t t;
    if (nccl_type(dt, &t)) {
        snprintf(err, errlen, "the nccl backend cannot reduce this dtype");
        return -1;
    }
    ncclRedOp_t o = op == DL_COMM_MAX ? ncclMax : op == DL_COMM_MIN ? ncclMin : ncclSum;
    nccl_req *q = begin(st, err, errlen);
    if (!q) return -1;
    return end(st, q, ncclAllReduce(buf, buf, (size_t)count, t, o, st->comm, st->stream),
               "ncclAllReduce", req, err, errlen);
}

static int nccl_ibroadcast(void *p, void *buf, int64_t nbytes, int root, void **req, char *err,
                           size_t errlen) {
    nccl_state *st = p;
    nccl_req *q = begin(st, err, errlen);
    if (!q) return -1;
    return end(st, q,
               ncclBroadcast(buf, buf, (size_t)nbytes, ncclUint8, root, st->comm, st->stream),
               "ncclBroadcast", req, err, errlen);
}

static int nccl_iallgather(void *p, const void *send, void *recv, int64_t nbytes, void **req,
                           char *err, size_t errlen) {
    nccl_state *st = p;
    nccl_req *q = begin(st, err, errlen);
    if (!q) return -1;
    return end(st, q, ncclAllGather(send, recv, (size_t)nbytes, ncclUint8, st->comm, st->stream),
               "ncclAllGather", req, err, errlen);
}

static int nccl_ibarrier(void *p, void **req, char *err, size_t errlen) {
    (void)p, (void)req;
    snprintf(err, errlen, "barriers go to the boot backend (internal)");
    return -1;
}

static int nccl_test(void *p, void *req, char *err, size_t errlen) {
    nccl_state *st = p;
    nccl_req *q = req;
    cudaError_t ce = cudaEventQuery(q->done);
    if (ce == cudaSuccess) {
        req_destroy(q);
        return 1;
    }
    if (ce != cudaErrorNotReady) {
        req_destroy(q);
        return cuda_msg(ce, "cudaEventQuery", err, errlen);
    }
    ncclResult_t async = ncclSuccess;
    ncclCommGetAsyncError(st->comm, &async);
    if (async != ncclSuccess && async != ncclInProgress) {
        req_destroy(q);
        return nccl_msg(async, "NCCL (a peer failed)", err, errlen);
    }
    return 0;
}

/* An abandoned collective: the communicator is aborted with the job; only
 * the events are dropped. */
static void nccl_req_free(void *p, void *req) {
    (void)p;
    req_destroy(req);
}

/* notices go through the boot backend (MPI) */
static const dl_comm_backend nccl_backend = {
    .abi = DL_COMM_ABI,
    .name = "nccl",
    .init = nccl_init,
    .finalize = nccl_finalize,
    .abort_job = nccl_abort_job,
    .iallreduce = nccl_iallreduce,
    .ibroadcast = nccl_ibroadcast,
    .iallgather = nccl_iallgather,
    .ibarrier = nccl_ibarrier,
    .test = nccl_test,
    .req_free = nccl_req_free,
    .device_buffers = 1,
    .init_boot = nccl_init_boot,
};

const dl_comm_backend *dl_dist_plugin(void);
const dl_comm_backend *dl_dist_plugin(void) {
    return &nccl_backend;
}
