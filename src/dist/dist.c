/* dist.c - the process group (see dist.h): backend selection and plugin
 * loading, sequence numbers, deadlines, staging of tensors for the
 * transport, and the DLUA_DIST_DEBUG cross-rank check of every collective.
 *
 * Failing fast: a rank that cannot go on (an uncaught error: dlua's handler
 * and train_resnet's guard call dl_dist_report_failure) sends every other
 * rank a notice (comm.h) with its message and `safe`, the last collective
 * number it issued and completed; a rank that ends without
 * destroy_process_group sends one too.  Every wait polls for notices, so a
 * peer waiting on a collective numbered above `safe` fails at once, naming
 * the rank and its message, instead of waiting for the deadline.  The
 * failing rank waits at exit (under the timeout) until every peer has
 * acknowledged its notice, then aborts the job.  A rank that dies
 * (SIGKILL) or skips a collective sends nothing: the deadline catches it.
 *
 * Invariants: at most one group per process; `broken` is set once a
 * collective failed or timed out, and from then on every collective fails
 * at once and exit aborts the job instead of finalizing (a timed-out MPI
 * request cannot be finished); the same holds once this rank reported a
 * failure or a peer's failure notice arrived.  Only the process that
 * initialised the group acts on it at exit (not a forked child). */
#include "dist.h"

#include "comm.h"
#include "ops/elementwise.h"

#include <dlfcn.h>
#include <limits.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#ifndef DL_INSTALL_LIBDIR
#define DL_INSTALL_LIBDIR "lib"
#endif

/* --- the built-in "local" backend: world size 1 ---------------------------- */

static int done_req; /* any non-NULL pointer: every local request is complete */

static void *local_init(dl_comm_info *info, double timeout_s, char *err, size_t errlen) {
    (void)timeout_s, (void)err, (void)errlen;
    *info = (dl_comm_info){0, 1, 0, 1};
    return &done_req;
}
static void local_finalize(void *st) {
    (void)st;
}
static void local_abort(void *st, int code) {
    (void)st, (void)code;
}
static int local_iallreduce(void *st, void *buf, int64_t count, dl_comm_dtype dt, dl_comm_op op,
                            void **req, char *err, size_t errlen) {
    (void)st, (void)buf, (void)count, (void)dt, (void)op, (void)err, (void)errlen;
    *req = &done_req;
    return 0;
}
static int local_ibroadcast(void *st, void *buf, int64_t nbytes, int root, void **req, char *err,
                            size_t errlen) {
    (void)st, (void)buf, (void)nbytes, (void)root, (void)err, (void)errlen;
    *req = &done_req;
    return 0;
}
static int local_iallgather(void *st, const void *send, void *recv, int64_t nbytes, void **req,
                            char *err, size_t errlen) {
    (void)st, (void)err, (void)errlen;
    memmove(recv, send, (size_t)nbytes);
    *req = &done_req;
    return 0;
}
static int local_ibarrier(void *st, void **req, char *err, size_t errlen) {
    (void)st, (void)err, (void)errlen;
    *req = &done_req;
    return 0;
}
static int local_test(void *st, void *req, char *err, size_t errlen) {
    (void)st, (void)req, (void)err, (void)errlen;
    return 1;
}
static void local_req_free(void *st, void *req) {
    (void)st, (void)req;
}

static const dl_comm_backend local_backend = {
    .abi = DL_COMM_ABI,
    .name = "local",
    .init = local_init,
    .finalize = local_finalize,
    .abort_job = local_abort,
    .iallreduce = local_iallreduce,
    .ibroadcast = local_ibroadcast,
    .iallgather = local_iallgather,
    .ibarrier = local_ibarrier,
    .test = local_test,
    .req_free = local_req_free,
    .device_buffers = 1,
};

/* --- the group --------------------------------------------------------------- */

struct dl_dist_work {
    const dl_comm_backend *be; /* the transport that runs it */
    void *st;
    void *req;
    uint64_t seq;
    const char *what; /* "all_reduce", ... */
    double deadline;
    dl_tensor *t;     /* the caller's tensor (retained) */
    dl_tensor *stage; /* what the transport reads and writes (t itself or a copy) */
    bool avg;
    bool done;
    struct dl_dist_work *next, *prev; /* G.works */
};

/* A notice between ranks (comm.h): what the sender tells the others. */
enum { NOTICE_FAILED = 1, NOTICE_LEFT, NOTICE_ACK };
#define NOTICE_MAGIC 0x646c6e31u /* "dln1" */
typedef struct {
    uint32_t magic;
    int32_t kind;
    uint64_t safe; /* the sender issued and completed every collective up to this number */
    char msg[DL_COMM_NOTICE_BYTES - 16];
} notice;

static struct {
    const dl_comm_backend *be; /* the group's backend */
    void *st;
    /* where host tensors and barriers go: be itself, or the MPI backend
     * that started NCCL (comm.h's init_boot) */
    const dl_comm_backend *boot_be;
    void *boot_st;
    dl_comm_info info;
    double timeout_s;
    uint64_t seq;    /* last collective's number */
    uint64_t broken; /* seq of the collective that failed, 0: healthy */
    bool debug;      /* DLUA_DIST_DEBUG=1 */
    bool finalized;  /* a plugin's transport cannot be initialised twice */
    bool atexit_set;
    double wait_s;
    char backend_name[16];
    pid_t pid;                  /* the process that initialised the group */
    struct dl_dist_work *works; /* live requests (for `safe`) */
    /* the peer notice that limits which collectives can still complete
     * (the lowest `safe`); rank -1: none */
    struct {
        int rank, kind;
        uint64_t safe;
        char msg[sizeof(((notice *)0)->msg)];
    } peer;
    bool peer_failed;    /* a peer's failure notice arrived */
    bool reported;       /* this rank reported its own failure */
    bool await_acks;     /* ... on a healthy group: exit waits for the peers to hear it */
    unsigned char *told; /* per rank: a notice from it arrived (it knows, or left) */
    double last_poll;
} G;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void nap(long ns) {
    struct timespec ts = {0, ns};
    nanosleep(&ts, NULL);
}

static int not_initialized(const char *fn) {
    return dl_error("dist.%s: the process group is not initialized (call "
                    "dist.init_process_group first)",
                    fn);
}

/* Where plugins live, relative to the binary holding this code (as ldl.c
 * finds the Lua library): beside it in a build tree, <libdir>/dlua/ in an
 * install tree; DLUA_DIST_PLUGIN_DIR overrides. */
static int find_plugin(const char *file, char *out, size_t n) {
    const char *env = getenv("DLUA_DIST_PLUGIN_DIR");
    if (env && *env) {
        snprintf(out, n, "%s/%s", env, file);
        return access(out, R_OK) == 0 ? 0 : -1;
    }
    Dl_info info;
    char self[PATH_MAX], real[PATH_MAX];
    if (!dladdr((void *)dl_dist_init, &info) || !info.dli_fname) return -1;
    snprintf(self, sizeof self, "%s", info.dli_fname);
    if (!strchr(self, '/')) {
        ssize_t k = readlink("/proc/self/exe", self, sizeof self - 1);
        self[k > 0 ? k : 0] = '\0';
    }
    if (!realpath(self, real)) return -1;
    char *slash = strrchr(real, '/');
    if (slash) *slash = '\0';
    static const char *const dirs[] = {
        "",                               /* build tree: beside dlua, libdlua.so, dl.so */
        "/../" DL_INSTALL_LIBDIR "/dlua", /* bin/dlua */
        "/dlua",                          /* <libdir>/libdlua.so */
        "/../../dlua",                    /* <libdir>/lua/5.4/dl.so */
    };
    for (size_t i = 0; i < sizeof dirs / sizeof dirs[0]; i++) {
        snprintf(out, n, "%s%s/%s", real, dirs[i], file);
        if (access(out, R_OK) == 0) return 0;
    }
    return -1;
}

/* Loads a plugin (kept loaded: MPI libraries do not survive dlclose). */
static const dl_comm_backend *load_plugin(const char *name) {
    char file[64], path[PATH_MAX + 128];
    snprintf(file, sizeof file, "dlua_dist_%s.so", name);
    if (find_plugin(file, path, sizeof path)) {
        const char *what = strcmp(name, "nccl") == 0 ? "NCCL (libnccl-dev) and CUDA"
                                                     : "MPI (mpicc: Debian's libopenmpi-dev)";
        dl_error("init_process_group: backend \"%s\" is not available: %s was not built "
                 "(dlua was configured without %s; install it and rebuild)",
                 name, file, what);
        return NULL;
    }
    /* RTLD_GLOBAL: Open MPI's own components resolve libmpi's symbols */
    void *h = dlopen(path, RTLD_NOW | RTLD_GLOBAL);
    if (!h) {
        const char *e = dlerror();
        dl_error("init_process_group: backend \"%s\": cannot load %s: %s", name, path, e ? e : "?");
        return NULL;
    }
    dl_dist_plugin_fn fn = (dl_dist_plugin_fn)dlsym(h, "dl_dist_plugin");
    const dl_comm_backend *be = fn ? fn() : NULL;
    if (!be || be->abi != DL_COMM_ABI) {
        dl_error("init_process_group: %s is not a dlua %s plugin of this version (ABI %d)", path,
                 name, DL_COMM_ABI);
        return NULL;
    }
    return be;
}

/* The launcher's world size from its environment (Open MPI, MPICH/PMI,
 * Slurm, or a torchrun-style WORLD_SIZE), 0 when none says. */
static int launcher_world_size(void) {
    static const char *const vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE",     "PMIX_SIZE",
                                       "MPI_LOCALNRANKS",      "SLURM_NTASKS", "WORLD_SIZE"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *v = getenv(vars[i]);
        if (v && atoi(v) > 0) return atoi(v);
    }
    return 0;
}

/* Ends this rank's part: abort the job (a broken group), else finalize.
 * A process that ends without destroy_process_group finalizes without a
 * barrier (a barrier here could be matched against a peer's pending
 * all-reduce): at_exit first tells the peers it left, so one still issuing
 * collectives fails at once instead of at its deadline. */
static void leave(bool abort) {
    if (abort) {
        G.be->abort_job(G.st, 1);
        if (G.boot_be != G.be) G.boot_be->abort_job(G.boot_st, 1);
    } else {
        G.be->finalize(G.st);
        if (G.boot_be != G.be) G.boot_be->finalize(G.boot_st);
    }
    G.finalized = G.boot_be != &local_backend;
    G.be = G.boot_be = NULL;
    G.st = G.boot_st = NULL;
    free(G.told);
    G.told = NULL;
}

static bool notices_on(void) {
    return G.be && G.info.size > 1 && G.boot_be->notice_poll && G.boot_be->notice_send;
}

static void send_notice(int to, int kind, const char *msg) {
    notice n = {.magic = NOTICE_MAGIC, .kind = kind, .safe = G.seq};
    for (struct dl_dist_work *w = G.works; w; w = w->next)
        if (!w->done && w->seq <= n.safe) n.safe = w->seq - 1;
    snprintf(n.msg, sizeof n.msg, "%s", msg ? msg : "");
    char err[256];
    G.boot_be->notice_send(G.boot_st, to, &n, sizeof n, err, sizeof err); /* best effort */
}

static void send_notice_all(int kind, const char *msg) {
    for (int r = 0; r < G.info.size; r++)
        if (r != G.info.rank) send_notice(r, kind, msg);
}

/* Takes the notices that arrived: acknowledges failures and keeps the one
 * with the lowest `safe`.  At most every millisecond unless forced. */
static void poll_notices(bool force) {
    if (!notices_on()) return;
    double t = now_s();
    if (!force && t - G.last_poll < 1e-3) return;
    G.last_poll = t;
    notice n;
    int from = -1;
    while (G.boot_be->notice_poll(G.boot_st, &n, sizeof n, &from) == 1) {
        if (n.magic != NOTICE_MAGIC || from < 0 || from >= G.info.size || from == G.info.rank)
            continue;
        n.msg[sizeof n.msg - 1] = '\0';
        G.told[from] = 1;
        if (n.kind == NOTICE_ACK) continue;
        if (n.kind == NOTICE_FAILED) {
            G.peer_failed = true;
            send_notice(from, NOTICE_ACK, NULL);
        }
        if (G.peer.rank < 0 || n.safe < G.peer.safe) {
            G.peer.rank = from;
            G.peer.kind = n.kind;
            G.peer.safe = n.safe;
            memcpy(G.peer.msg, n.msg, sizeof n.msg);
        }
    }
}

/* Collective #seq cannot complete when a peer failed or left before it:
 * -1 with a message naming that rank (and its error), else 0. */
static int peer_gone(uint64_t seq, const char *what) {
    if (G.peer.rank < 0 || seq <= G.peer.safe) return 0;
    if (!G.broken) G.broken = seq;
    if (G.peer.kind == NOTICE_FAILED)
        return dl_error("dist.%s: rank %d: collective #%llu cannot complete: rank %d failed: %s",
                        what, G.info.rank, (unsigned long long)seq, G.peer.rank, G.peer.msg);
    return dl_error("dist.%s: rank %d: collective #%llu cannot complete: rank %d left the group "
                    "after collective #%llu (its process ended without destroy_process_group)",
                    what, G.info.rank, (unsigned long long)seq, G.peer.rank,
                    (unsigned long long)G.peer.safe);
}

/* Polls notices until `until` returns true or t seconds pass. */
static void linger(double t, bool (*until)(void)) {
    double end = now_s() + t;
    while (now_s() < end) {
        poll_notices(true);
        if (until && until()) return;
        nap(2000000);
    }
}

static bool all_told(void) {
    for (int r = 0; r < G.info.size; r++)
        if (r != G.info.rank && !G.told[r]) return false;
    return true;
}

static bool sends_done(void) {
    return G.boot_be->notice_pending(G.boot_st) == 0;
}

/* The grace a rank gives its peers to print what they learnt from its
 * failure notice, and the wait of a peer for the failing rank to end the
 * job, before each ends it itself. */
#define GRACE_S 1.0
#define PEER_WAIT_S 5.0

static void at_exit(void) {
    if (!G.be || getpid() != G.pid) return;
    bool failed = G.broken || G.reported || G.peer_failed;
    if (notices_on()) {
        poll_notices(true);
        failed = failed || G.peer_failed;
        if (G.await_acks) { /* every peer hears of this rank's failure, then the job ends */
            linger(G.timeout_s, all_told);
            linger(GRACE_S, NULL);
        } else if (!failed) { /* a rank still issuing collectives fails at once */
            send_notice_all(NOTICE_LEFT, NULL);
            linger(2.0, sends_done);
        } else if (G.peer_failed) { /* the failing rank ends the job */
            linger(G.timeout_s < PEER_WAIT_S ? G.timeout_s : PEER_WAIT_S, NULL);
        }
    }
    leave(failed);
}

int dl_dist_report_failure(const char *message) {
    if (!G.be || getpid() != G.pid || G.reported || G.info.size < 2) return 0;
    G.reported = true;
    if (!notices_on()) return 0;
    poll_notices(true);
    char line[sizeof(((notice *)0)->msg)];
    snprintf(line, sizeof line, "%s", message && *message ? message : "(no message)");
    line[strcspn(line, "\n")] = '\0'; /* the first line: no traceback */
    G.await_acks = !G.broken && !G.peer_failed;
    send_notice_all(NOTICE_FAILED, line);
    return 0;
}

static void export_env(void) {
    char v[32];
    snprintf(v, sizeof v, "%d", G.info.rank);
    setenv("RANK", v, 1);
    snprintf(v, sizeof v, "%d", G.info.size);
    setenv("WORLD_SIZE", v, 1);
    snprintf(v, sizeof v, "%d", G.info.local_rank);
    setenv("LOCAL_RANK", v, 1);
}

int dl_dist_init(const char *backend, double timeout_s) {
    if (G.be) return dl_error("init_process_group: the process group is already initialized");
    if (!(timeout_s > 0)) return dl_error("init_process_group: timeout must be > 0 seconds");
    if (strcmp(backend, "auto") == 0) backend = launcher_world_size() > 1 ? "mpi" : "local";
    bool nccl = strcmp(backend, "nccl") == 0;
    const dl_comm_backend *be, *boot = NULL;
    if (strcmp(backend, "local") == 0) {
        be = &local_backend;
    } else if (strcmp(backend, "mpi") == 0 || nccl) {
        if (G.finalized)
            return dl_error("init_process_group: backend \"%s\" cannot be initialized again "
                            "in this process after destroy_process_group (MPI starts once)",
                            backend);
        be = load_plugin(backend);
        if (!be) return -1;
        if (nccl && !(boot = load_plugin("mpi"))) return -1;
    } else {
        return dl_error("init_process_group: unknown backend \"%s\" (auto, local, mpi, nccl)",
                        backend);
    }
    char err[512] = "";
    dl_comm_info info;
    void *boot_st = NULL, *st;
    if (boot) {
        boot_st = boot->init(&info, timeout_s, err, sizeof err);
        if (!boot_st) return dl_error("init_process_group: backend \"mpi\": %s", err);
        st = be->init_boot(&info, timeout_s, boot, boot_st, err, sizeof err);
        if (!st) {
            boot->finalize(boot_st);
            G.finalized = true;
            return dl_error("init_process_group: backend \"nccl\": rank %d: %s", info.rank, err);
        }
    } else {
        st = be->init(&info, timeout_s, err, sizeof err);
        if (!st) return dl_error("init_process_group: backend \"%s\": %s", backend, err);
    }
    unsigned char *told = calloc((size_t)info.size, 1);
    if (!told) {
        be->finalize(st);
        if (boot) boot->finalize(boot_st);
        G.finalized = be != &local_backend;
        return dl_error("init_process_group: out of memory");
    }
    G.be = be;
    G.st = st;
    G.boot_be = boot ? boot : be;
    G.boot_st = boot ? boot_st : st;
    G.info = info;
    G.timeout_s = timeout_s;
    G.seq = 0;
    G.broken = 0;
    G.wait_s = 0;
    G.pid = getpid();
    G.works = NULL;
    G.peer.rank = -1;
    G.peer_failed = G.reported = G.await_acks = false;
    G.told = told;
    snprintf(G.backend_name, sizeof G.backend_name, "%s", backend);
    const char *dbg = getenv("DLUA_DIST_DEBUG");
    G.debug = dbg && strcmp(dbg, "1") == 0;
    export_env();
    if (!G.atexit_set) atexit(at_exit);
    G.atexit_set = true;
    return 0;
}

bool dl_dist_is_initialized(void) {
    return G.be != NULL;
}
int dl_dist_rank(void) {
    return G.be ? G.info.rank : -1;
}
int dl_dist_world_size(void) {
    return G.be ? G.info.size : -1;
}
int dl_dist_local_rank(void) {
    return G.be ? G.info.local_rank : -1;
}
const char *dl_dist_backend(void) {
    return G.be ? G.backend_name : NULL;
}
double dl_dist_timeout(void) {
    return G.timeout_s;
}
double dl_dist_wait_seconds(void) {
    return G.wait_s;
}

/* --- requests and deadlines -------------------------------------------------- */

static dl_comm_dtype comm_dtype(dl_dtype t) {
    switch (t) {
    case DL_DTYPE_F32: return DL_COMM_F32;
    case DL_DTYPE_F64: return DL_COMM_F64;
    case DL_DTYPE_I64: return DL_COMM_I64;
    case DL_DTYPE_I32: return DL_COMM_I32;
    case DL_DTYPE_F16: return DL_COMM_F16;
    case DL_DTYPE_BF16: return DL_COMM_BF16;
    default: return DL_COMM_U8; /* uint8, bool */
    }
}

static int fail_broken(const char *what) {
    if (!G.broken)
        return dl_error("dist.%s: rank %d: this rank reported a failure "
                        "(dist.report_failure); restart the job",
                        what, G.info.rank);
    return dl_error("dist.%s: rank %d: the process group is broken (collective #%llu failed "
                    "or timed out); restart the job",
                    what, G.info.rank, (unsigned long long)G.broken);
}

/* 0 when a new collective may start, else -1 with the reason. */
static int check_usable(const char *what) {
    if (!G.be) return not_initialized(what);
    if (G.broken || G.reported) return fail_broken(what);
    poll_notices(false);
    return peer_gone(G.seq + 1, what);
}

/* The timeout message names this rank, the collective and its number, and
 * the peer when there is only one. */
static int timeout_error(dl_dist_work *w) {
    G.broken = w->seq;
    char peer[64] = "another rank";
    if (G.info.size == 2) snprintf(peer, sizeof peer, "rank %d", 1 - G.info.rank);
    return dl_error("dist.%s: rank %d of %d: collective #%llu (%s) timed out after %g s: %s "
                    "died or did not issue it",
                    w->what, G.info.rank, G.info.size, (unsigned long long)w->seq, w->what,
                    G.timeout_s, peer);
}

/* The tensor the transport works on: t itself when it is a dense host
 * tensor (or a device tensor the backend takes), else a contiguous host
 * copy. */
static dl_tensor *stage_for(dl_tensor *t, const dl_comm_backend *be) {
    bool host = dl_tensor_device(t).type == DL_DEVICE_CPU;
    if (dl_tensor_is_contiguous(t) && (host || be->device_buffers)) return dl_tensor_retain(t);
    if (host || be->device_buffers) return dl_tensor_contiguous(t);
    dl_tensor *h = dl_tensor_to_device(t, DL_CPU);
    if (!h || dl_tensor_is_contiguous(h)) return h;
    dl_tensor *c = dl_tensor_contiguous(h);
    dl_tensor_release(h);
    return c;
}

/* A request for t (NULL: a barrier) on the transport that takes it: a
 * device tensor goes to a backend taking device buffers, the rest to the
 * boot backend. */
static dl_dist_work *work_new(const char *what, dl_tensor *t) {
    dl_dist_work *w = dl_zalloc(sizeof *w, "dist.%s: out of memory", what);
    if (!w) return NULL;
    bool dev = t && dl_tensor_device(t).type != DL_DEVICE_CPU;
    w->be = dev && G.be->device_buffers ? G.be : G.boot_be;
    w->st = w->be == G.be ? G.st : G.boot_st;
    w->what = what;
    w->seq = ++G.seq;
    w->deadline = now_s() + G.timeout_s;
    w->next = G.works;
    if (G.works) G.works->prev = w;
    G.works = w;
    if (t) {
        w->t = dl_tensor_retain(t);
        w->stage = stage_for(t, w->be);
        if (!w->stage) {
            w->done = true;
            dl_dist_work_free(w);
            return NULL;
        }
    }
    return w;
}

static int work_finish(dl_dist_work *w) {
    if (!w->t) return 0;
    if (w->avg && G.info.size > 1) {
        dl_tensor *n = dl_tensor_scalar((double)G.info.size, w->stage->dtype);
        int rc = n ? dl_binary_(DL_BINARY_DIV, w->stage, n, 1) : -1;
        dl_tensor_release(n);
        if (rc) return -1;
    }
    if (w->stage != w->t) return dl_tensor_copy_(w->t, w->stage);
    dl_tensor_bump_version(w->t);
    return 0;
}

void dl_dist_work_free(dl_dist_work *w) {
    if (!w) return;
    if (w->req && !w->done) {
        w->be->req_free(w->st, w->req);
        if (!G.broken) G.broken = w->seq;
    }
    if (w->prev)
        w->prev->next = w->next;
    else if (G.works == w)
        G.works = w->next;
    if (w->next) w->next->prev = w->prev;
    dl_tensor_release(w->stage);
    dl_tensor_release(w->t);
    free(w);
}

int dl_dist_work_test(dl_dist_work *w) {
    if (w->done) return 1;
    char err[512] = "";
    int r = w->be->test(w->st, w->req, err, sizeof err);
    if (r < 0) {
        w->done = true; /* the plugin freed the request */
        G.broken = w->seq;
        return dl_error("dist.%s: rank %d: collective #%llu failed: %s", w->what, G.info.rank,
                        (unsigned long long)w->seq, err);
    }
    if (r == 0) {
        poll_notices(false);
        if (peer_gone(w->seq, w->what)) return -1;
        return now_s() > w->deadline ? timeout_error(w) : 0;
    }
    w->done = true;
    return work_finish(w) ? -1 : 1;
}

/* Polls until done or past the deadline.  MPI advances a collective only
 * inside its calls, so the poll must be frequent: yield the core between
 * polls (other ranks may share it) for the first second, then sleep 50 us
 * (a rank waiting on a slow peer should not burn a core). */
static int work_wait_keep(dl_dist_work *w) {
    double t0 = now_s();
    int r;
    struct timespec nap = {0, 50000};
    while ((r = dl_dist_work_test(w)) == 0) {
        if (now_s() - t0 < 1.0)
            sched_yield();
        else
            nanosleep(&nap, NULL);
    }
    G.wait_s += now_s() - t0;
    return r < 0 ? -1 : 0;
}

int dl_dist_work_wait(dl_dist_work *w) {
    int rc = work_wait_keep(w);
    dl_dist_work_free(w);
    return rc;
}

/* --- DLUA_DIST_DEBUG: every rank issues the same collective ---------------- */

static const char *const op_names[] = {"all_reduce", "broadcast", "all_gather", "barrier"};

/* Gathers (seq, kind, dtype, count, root/op) from every rank and names the
 * first rank that differs from rank 0.  Runs as its own unnumbered step. */
static int debug_check(int kind, dl_tensor *t, int extra) {
    int64_t mine[5] = {(int64_t)G.seq + 1, kind, t ? (int64_t)t->dtype : -1,
                       t ? dl_tensor_numel(t) : 0, extra};
    int64_t *all = calloc((size_t)G.info.size * 5, sizeof *all);
    if (!all) return dl_error("dist: out of memory");
    char err[512] = "";
    void *req = NULL;
    if (G.boot_be->iallgather(G.boot_st, mine, all, sizeof mine, &req, err, sizeof err)) {
        free(all);
        return dl_error("dist.%s: debug check: %s", op_names[kind], err);
    }
    dl_dist_work w = {.be = G.boot_be,
                      .st = G.boot_st,
                      .req = req,
                      .seq = G.seq + 1,
                      .what = op_names[kind],
                      .deadline = now_s() + G.timeout_s};
    int rc = work_wait_keep(&w);
    if (!w.done) G.boot_be->req_free(G.boot_st, req);
    for (int r = 1; rc == 0 && r < G.info.size; r++) {
        int64_t *a = all, *b = all + 5 * r;
        if (memcmp(a, b, sizeof mine) == 0) continue;
        char da[32], db[32];
        snprintf(da, sizeof da, "%s", a[2] >= 0 ? dl_dtype_name((dl_dtype)a[2]) : "-");
        snprintf(db, sizeof db, "%s", b[2] >= 0 ? dl_dtype_name((dl_dtype)b[2]) : "-");
        rc = dl_error("dist (DLUA_DIST_DEBUG): collective #%lld: rank 0 issued %s(%s, %lld "
                      "elements, %lld) but rank %d issued #%lld %s(%s, %lld elements, %lld)",
                      (long long)a[0], op_names[a[1] & 3], da, (long long)a[3], (long long)a[4], r,
                      (long long)b[0], op_names[b[1] & 3], db, (long long)b[3], (long long)b[4]);
        G.broken = G.seq + 1;
    }
    free(all);
    return rc;
}

/* --- collectives --------------------------------------------------------- */

dl_dist_work *dl_dist_all_reduce_start(dl_tensor *t, dl_reduce_op op) {
    if (check_usable("all_reduce")) return NULL;
    if (op == DL_REDUCE_AVG && !dl_dtype_is_floating(t->dtype)) {
        dl_error("dist.all_reduce: op AVG needs a floating-point tensor (got %s)",
                 dl_dtype_name(t->dtype));
        return NULL;
    }
    if (t->dtype == DL_DTYPE_BOOL && op != DL_REDUCE_MAX && op != DL_REDUCE_MIN) {
        dl_error("dist.all_reduce: a bool tensor takes op MAX or MIN only");
        return NULL;
    }
    if (G.debug && debug_check(0, t, (int)op)) return NULL;
    dl_dist_work *w = work_new("all_reduce", t);
    if (!w) return NULL;
    w->avg = op == DL_REDUCE_AVG;
    dl_comm_op cop = op == DL_REDUCE_MAX   ? DL_COMM_MAX
                     : op == DL_REDUCE_MIN ? DL_COMM_MIN
                                           : DL_COMM_SUM;
    char err[512] = "";
    if (w->be->iallreduce(w->st, dl_tensor_data_ptr(w->stage), dl_tensor_numel(t),
                          comm_dtype(t->dtype), cop, &w->req, err, sizeof err)) {
        dl_error("dist.all_reduce: rank %d: collective #%llu: %s", G.info.rank,
                 (unsigned long long)w->seq, err);
        w->done = true;
        dl_dist_work_free(w);
        return NULL;
    }
    return w;
}

int dl_dist_all_reduce(dl_tensor *t, dl_reduce_op op) {
    dl_dist_work *w = dl_dist_all_reduce_start(t, op);
    return w ? dl_dist_work_wait(w) : -1;
}

int dl_dist_broadcast(dl_tensor *t, int root) {
    if (check_usable("broadcast")) return -1;
    if (root < 0 || root >= G.info.size)
        return dl_error("dist.broadcast: src rank %d is out of range (ranks are 0-based, world "
                        "size %d)",
                        root, G.info.size);
    if (G.debug && debug_check(1, t, root)) return -1;
    dl_dist_work *w = work_new("broadcast", t);
    if (!w) return -1;
    char err[512] = "";
    if (w->be->ibroadcast(w->st, dl_tensor_data_ptr(w->stage),
                          dl_tensor_numel(t) * (int64_t)dl_tensor_itemsize(t), root, &w->req, err,
                          sizeof err)) {
        w->done = true;
        dl_dist_work_free(w);
        return dl_error("dist.broadcast: rank %d: %s", G.info.rank, err);
    }
    return dl_dist_work_wait(w);
}

int dl_dist_all_gather(dl_tensor *const *out, dl_tensor *t) {
    if (check_usable("all_gather")) return -1;
    for (int r = 0; r < G.info.size; r++)
        if (!dl_shape_equal(out[r], t) || out[r]->dtype != t->dtype)
            return dl_error("dist.all_gather: output %d must have the input's shape and dtype",
                            r + 1);
    if (G.debug && debug_check(2, t, 0)) return -1;
    int64_t n = dl_tensor_numel(t);
    int64_t shape[1] = {n * G.info.size};
    dl_tensor *flat = dl_tensor_empty(1, shape, t->dtype, dl_tensor_device(t));
    dl_dist_work *w = flat ? work_new("all_gather", flat) : NULL;
    dl_tensor *src = w ? stage_for(t, w->be) : NULL;
    int rc = -1;
    if (src) {
        char err[512] = "";
        int64_t nbytes = n * (int64_t)dl_tensor_itemsize(t);
        if (w->be->iallgather(w->st, dl_tensor_data_ptr(src), dl_tensor_data_ptr(w->stage), nbytes,
                              &w->req, err, sizeof err)) {
            w->done = true;
            dl_error("dist.all_gather: rank %d: %s", G.info.rank, err);
        } else if (work_wait_keep(w) == 0) {
            rc = 0;
            for (int r = 0; r < G.info.size && rc == 0; r++) {
                dl_tensor *part = dl_tensor_narrow(flat, 0, r * n, n);
                dl_tensor *v = part ? dl_tensor_view(part, t->ndim, t->shape) : NULL;
                rc = v ? dl_tensor_copy_(out[r], v) : -1;
                dl_tensor_release(v);
                dl_tensor_release(part);
            }
        }
    }
    dl_tensor_release(src);
    dl_dist_work_free(w);
    dl_tensor_release(flat);
    return rc;
}

int dl_dist_barrier(void) {
    if (check_usable("barrier")) return -1;
    if (G.debug && debug_check(3, NULL, 0)) return -1;
    dl_dist_work *w = work_new("barrier", NULL);
    if (!w) return -1;
    char err[512] = "";
    if (w->be->ibarrier(w->st, &w->req, err, sizeof err)) {
        w->done = true;
        dl_dist_work_free(w);
        return dl_error("dist.barrier: rank %d: %s", G.info.rank, err);
    }
    return dl_dist_work_wait(w);
}

int dl_dist_destroy(void) {
    if (!G.be) return not_initialized("destroy_process_group");
    int rc = 0;
    if (!G.broken && !G.reported && G.info.size > 1) rc = dl_dist_barrier();
    leave(G.broken || G.reported || G.peer_failed);
    return rc;
}
