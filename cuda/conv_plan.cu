// conv_plan.cu - 2-D convolutions through cuDNN's graph (backend) API, the
// path of cuda/conv.cu behind dl.backends.cudnn.graph ($DLUA_CUDNN_GRAPH=1;
// the legacy API stays as the fallback and as the switch's other side).
//
// One direction (forward, backward data, backward filter) is one operation
// graph of one CONVOLUTION_* operation on three tensors (uids 'x', 'w', 'y'
// in the forward's roles) with their real strides and byte alignments.
// Engine configurations come from the heuristics, mode A first, then the
// FALLBACK list; a configuration is skipped when its numerical notes say it
// would change float32 results beyond the user's choice (tensor cores on
// float32 without dl.backends.allow_tf32; inputs converted down; reduced
// precision sums), when its plan does not finalize, when its workspace is
// over WS_CAP or when it fails at run time.  The plan used is kept in a
// bounded LRU (core/lru.h) under a dl_conv_plan_key (kernels/conv.h: every
// fact a plan depends on), so a cache hit costs one variant pack and
// cudnnBackendExecute.  Without dl.backends.cudnn.benchmark the first
// configuration that runs is kept; with it, up to MAX_TIMED plans are timed
// once (events on the compute stream, on the call's own buffers, which are
// outputs being overwritten anyway) and the fastest kept.  A key for which
// nothing runs is cached as "no plan" and its calls go to the legacy API; a
// plan that fails later is dropped the same way, with a one-time warning.
// During a CUDA graph capture nothing is timed: a key met for the first time
// there takes the heuristics' first plan that runs (captured as it runs).
//
// Invariants: every descriptor is destroyed on every path (BDesc); every
// cuDNN status is checked; the cache is used under one mutex, held while a
// plan executes, so an eviction never frees a plan in use; nothing waits
// for the GPU except the timing of new plans (never while a CUDA graph is
// captured: then the heuristics' order decides).
#include "common.cuh"
#include "conv_plan.cuh"

#include <atomic>
#include <mutex>
#include <new>
#include <stdio.h>

extern "C" {
#include "core/lru.h"
#include "kernels/cuda.h"
}

namespace {

const int64_t WS_CAP = (int64_t)1 << 30; // most workspace a plan may take
const size_t CAPACITY = 1024;            // plans kept
const int MAX_CONFIGS = 32;              // engine configurations read per heuristics mode
const int MAX_TIMED = 8;                 // plans timed per key (benchmark)
const int TIMED_RUNS = 2;                // timed runs per plan, after one untimed
const int64_t UID_X = 'x', UID_W = 'w', UID_Y = 'y';

// A backend descriptor, destroyed with its owner.
struct BDesc {
    cudnnBackendDescriptor_t d = nullptr;
    BDesc() = default;
    BDesc(const BDesc &) = delete;
    BDesc &operator=(const BDesc &) = delete;
    ~BDesc() {
        if (d) cudnnBackendDestroyDescriptor(d);
    }
    cudnnStatus_t make(cudnnBackendDescriptorType_t t) {
        return cudnnBackendCreateDescriptor(t, &d);
    }
    cudnnBackendDescriptor_t release() {
        cudnnBackendDescriptor_t r = d;
        d = nullptr;
        return r;
    }
};

#define TRY(call)                                                                                  \
    do {                                                                                           \
        cudnnStatus_t s_ = (call);                                                                 \
        if (s_ != CUDNN_STATUS_SUCCESS) return s_;                                                 \
    } while (0)

cudnnStatus_t set(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name,
                  cudnnBackendAttributeType_t type, int64_t n, const void *v) {
    return cudnnBackendSetAttribute(d, name, type, n, v);
}

// --- the plan cache ---------------------------------------------------------------------

// A cached plan and the engine configuration it was finalized from (kept
// with it); plan NULL: no configuration runs for this key.
struct Plan {
    cudnnBackendDescriptor_t plan = nullptr, config = nullptr;
    int64_t workspace = 0;
};

void destroy_plan(Plan &p) {
    if (p.plan) cudnnBackendDestroyDescriptor(p.plan);
    if (p.config) cudnnBackendDestroyDescriptor(p.config);
    p.plan = p.config = nullptr;
}

void free_plan(void *v, void *) {
    Plan *p = (Plan *)v;
    destroy_plan(*p);
    delete p;
}

std::mutex g_mu;
dl_lru *g_cache = nullptr;       // created on first use, under g_mu
dl_conv_plan_stats g_stats = {}; // executed, built, no_plan, timed (the LRU keeps the rest)
std::atomic<bool> g_warned{false};

// Says once per process that the graph API failed where it should not have.
void warn_once(const char *what, cudnnStatus_t st) {
    if (g_warned.exchange(true)) return;
    fprintf(stderr,
            "dlua: warning: cuDNN graph API: %s failed (%s); such convolutions use the legacy "
            "API\n",
            what, cudnnGetErrorString(st));
}

// Statuses that mean "this configuration does not fit": the next is tried
// silently (anything else also moves on, with the one-time warning).
bool not_supported(cudnnStatus_t st) {
    // cuDNN 9 numbers its statuses by family in thousands: the NOT_SUPPORTED
    // ones share CUDNN_STATUS_NOT_SUPPORTED's
    return (int)st / 1000 == (int)CUDNN_STATUS_NOT_SUPPORTED / 1000;
}

// Puts p under key (the LRU frees it should the put fail).
void cache_put(const dl_conv_plan_key &key, Plan *p) {
    if (dl_lru_put(g_cache, &key, sizeof key, p)) dl_clear_error();
}

// Notes that key has no plan: its calls take the legacy API from now on.
void no_plan(const dl_conv_plan_key &key) {
    g_stats.no_plan++;
    Plan *p = new (std::nothrow) Plan();
    if (p) cache_put(key, p);
}

// --- building ----------------------------------------------------------------------------

cudnnDataType_t data_type(dl_dtype dt) {
    switch (dt) {
    case DL_DTYPE_F64: return CUDNN_DATA_DOUBLE;
    case DL_DTYPE_F16: return CUDNN_DATA_HALF;
    case DL_DTYPE_BF16: return CUDNN_DATA_BFLOAT16;
    default: return CUDNN_DATA_FLOAT;
    }
}

cudnnStatus_t tensor_desc(BDesc &t, int64_t uid, cudnnDataType_t type, const int64_t *dims,
                          const int64_t *strides, int64_t align) {
    TRY(t.make(CUDNN_BACKEND_TENSOR_DESCRIPTOR));
    TRY(set(t.d, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type));
    TRY(set(t.d, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims));
    TRY(set(t.d, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides));
    TRY(set(t.d, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid));
    TRY(set(t.d, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align));
    return cudnnBackendFinalize(t.d);
}

cudnnStatus_t conv_desc(BDesc &c, const dl_conv2d_shape *s, cudnnDataType_t comp) {
    int64_t dims = 2, pad[2] = {s->ph, s->pw}, dil[2] = {s->dh, s->dw}, str[2] = {s->sh, s->sw};
    cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
    TRY(c.make(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR));
    TRY(set(c.d, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &dims));
    TRY(set(c.d, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp));
    TRY(set(c.d, CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode));
    TRY(set(c.d, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 2, pad));
    TRY(set(c.d, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 2, pad));
    TRY(set(c.d, CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 2, dil));
    TRY(set(c.d, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, 2, str));
    return cudnnBackendFinalize(c.d);
}

// The descriptors of an operation graph, kept alive together until its
// plans are finalized (the graph refers to the others).
struct Graph {
    BDesc x, w, y, conv, op, graph;
};

// The operation graph of direction key.kind: one convolution operation on
// the tensors 'x', 'w', 'y' the key describes.
cudnnStatus_t op_graph(Graph &g, cudnnHandle_t h, const dl_conv_plan_key &key, dl_dtype dt,
                       const dl_conv2d_shape *s) {
    BDesc &x = g.x, &w = g.w, &y = g.y, &conv = g.conv, &op = g.op, &graph = g.graph;
    cudnnDataType_t type = data_type(dt);
    cudnnDataType_t comp = dt == DL_DTYPE_F64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
    int64_t xd[4] = {s->N, s->C, s->H, s->W};
    int64_t wd[4] = {s->O, s->C / s->groups, s->KH, s->KW};
    int64_t yd[4] = {s->N, s->O, s->OH, s->OW};
    TRY(tensor_desc(x, UID_X, type, xd, key.strides, key.align[0]));
    TRY(tensor_desc(w, UID_W, type, wd, key.strides + 4, key.align[1]));
    TRY(tensor_desc(y, UID_Y, type, yd, key.strides + 8, key.align[2]));
    TRY(conv_desc(conv, s, comp));
    // alpha 1, beta 0, in the compute type
    float f1 = 1, f0 = 0;
    double d1 = 1, d0 = 0;
    bool dbl = comp == CUDNN_DATA_DOUBLE;
    cudnnBackendAttributeType_t st = dbl ? CUDNN_TYPE_DOUBLE : CUDNN_TYPE_FLOAT;
    const void *one = dbl ? (const void *)&d1 : (const void *)&f1;
    const void *zero = dbl ? (const void *)&d0 : (const void *)&f0;
    // the operation of each direction, with the attributes that take x, w, y
    // (dx, dw, dy in their roles), the convolution, alpha and beta
    struct Roles {
        cudnnBackendDescriptorType_t type;
        cudnnBackendAttributeName_t x, w, y, conv, alpha, beta;
    };
    static const Roles roles[3] = {
        {CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR,
         CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W,
         CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y,
         CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC,
         CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA,
         CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA},
        {CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR,
         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W,
         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY,
         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC,
         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA,
         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA},
        {CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR,
         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X,
         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW,
         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY,
         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC,
         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA,
         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA},
    };
    if (key.kind < 0 || key.kind > 2) return CUDNN_STATUS_BAD_PARAM;
    const Roles &r = roles[key.kind];
    const cudnnBackendAttributeType_t BD = CUDNN_TYPE_BACKEND_DESCRIPTOR;
    TRY(op.make(r.type));
    TRY(set(op.d, r.x, BD, 1, &x.d));
    TRY(set(op.d, r.w, BD, 1, &w.d));
    TRY(set(op.d, r.y, BD, 1, &y.d));
    TRY(set(op.d, r.conv, BD, 1, &conv.d));
    TRY(set(op.d, r.alpha, st, 1, one));
    TRY(set(op.d, r.beta, st, 1, zero));
    TRY(cudnnBackendFinalize(op.d));
    TRY(graph.make(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR));
    TRY(set(graph.d, CUDNN_ATTR_OPERATIONGRAPH_OPS, BD, 1, &op.d));
    TRY(set(graph.d, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &h));
    return cudnnBackendFinalize(graph.d);
}

// Whether the engine of configuration cfg keeps results within what the
// user allows for dt.
bool numerics_ok(cudnnBackendDescriptor_t cfg, dl_dtype dt, bool tf32) {
    BDesc engine;
    if (engine.make(CUDNN_BACKEND_ENGINE_DESCRIPTOR) != CUDNN_STATUS_SUCCESS) return false;
    int64_t n = 0;
    if (cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                                 &n, &engine.d) != CUDNN_STATUS_SUCCESS ||
        n != 1)
        return false;
    cudnnBackendNumericalNote_t notes[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
    int64_t nn = 0;
    if (cudnnBackendGetAttribute(engine.d, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE,
                                 CUDNN_TYPE_NUMERICAL_NOTE, CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &nn,
                                 notes) != CUDNN_STATUS_SUCCESS)
        return false;
    bool wide = dt == DL_DTYPE_F32 || dt == DL_DTYPE_F64;
    for (int64_t i = 0; i < nn && i < CUDNN_NUMERICAL_NOTE_TYPE_COUNT; i++) {
        if (notes[i] == CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS && wide) return false;
        if (notes[i] == CUDNN_NUMERICAL_NOTE_TENSOR_CORE && dt == DL_DTYPE_F32 && !tf32)
            return false;
        if (notes[i] == CUDNN_NUMERICAL_NOTE_TENSOR_CORE && dt == DL_DTYPE_F64) return false;
        if (notes[i] == CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION) return false;
    }
    return true;
}

// The engine configurations of heuristics mode `mode` for graph, at most
// MAX_CONFIGS and no further than cfgs[cap - 1], into cfgs[*n...] (created
// here, owned by the caller); *n grows by the number read.
cudnnStatus_t configs(cudnnBackendDescriptor_t graph, cudnnBackendHeurMode_t mode, BDesc *cfgs,
                      int *n, int cap) {
    BDesc heur;
    TRY(heur.make(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR));
    TRY(set(heur.d, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
            &graph));
    TRY(set(heur.d, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode));
    TRY(cudnnBackendFinalize(heur.d));
    int64_t count = 0;
    TRY(cudnnBackendGetAttribute(heur.d, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                 CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, nullptr));
    int64_t room = cap - *n < MAX_CONFIGS ? cap - *n : MAX_CONFIGS;
    int want = (int)(count < room ? count : room);
    if (want <= 0) return CUDNN_STATUS_SUCCESS;
    cudnnBackendDescriptor_t raw[MAX_CONFIGS];
    for (int i = 0; i < want; i++) {
        TRY(cfgs[*n + i].make(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR));
        raw[i] = cfgs[*n + i].d;
    }
    int64_t got = 0;
    TRY(cudnnBackendGetAttribute(heur.d, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                 CUDNN_TYPE_BACKEND_DESCRIPTOR, want, &got, raw));
    if (got < 0) got = 0;
    *n += (int)(got < want ? got : want);
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t finalize_plan(BDesc &plan, cudnnHandle_t h, cudnnBackendDescriptor_t cfg,
                            int64_t *workspace) {
    TRY(plan.make(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR));
    TRY(set(plan.d, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &h));
    TRY(set(plan.d, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
            &cfg));
    TRY(cudnnBackendFinalize(plan.d));
    int64_t n = 0;
    *workspace = 0;
    TRY(cudnnBackendGetAttribute(plan.d, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64,
                                 1, &n, workspace));
    return CUDNN_STATUS_SUCCESS;
}

// --- running -----------------------------------------------------------------------------

// Executes plan on x, w, y (the uids' pointers) with its workspace from the
// device's shared workspace.  A workspace that cannot be had is reported as
// CUDNN_STATUS_NOT_SUPPORTED (the plan is skipped; the error is cleared).
cudnnStatus_t execute(cudnnHandle_t h, cudnnBackendDescriptor_t plan, int64_t workspace, void *x,
                      void *w, void *y) {
    void *ws = nullptr;
    if (workspace > 0) {
        ws = dl_cuda_workspace((size_t)workspace);
        if (!ws) {
            dl_clear_error();
            return CUDNN_STATUS_NOT_SUPPORTED;
        }
    }
    int64_t uids[3] = {UID_X, UID_W, UID_Y};
    void *ptrs[3] = {x, w, y};
    BDesc pack;
    TRY(pack.make(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR));
    TRY(set(pack.d, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, 3, uids));
    TRY(set(pack.d, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, 3, ptrs));
    TRY(set(pack.d, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws));
    TRY(cudnnBackendFinalize(pack.d));
    return cudnnBackendExecute(h, plan, pack.d);
}

// Milliseconds per run of plan (the mean of TIMED_RUNS after one untimed
// run), or a negative number when it does not run.
double time_plan(cudnnHandle_t h, cudnnBackendDescriptor_t plan, int64_t workspace, void *x,
                 void *w, void *y) {
    if (execute(h, plan, workspace, x, w, y) != CUDNN_STATUS_SUCCESS) return -1;
    cudaStream_t st = dl_cuda_stream();
    cudaEvent_t a = nullptr, b = nullptr;
    double ms = -1;
    if (cudaEventCreate(&a) == cudaSuccess && cudaEventCreate(&b) == cudaSuccess &&
        cudaEventRecord(a, st) == cudaSuccess) {
        bool ok = true;
        for (int i = 0; i < TIMED_RUNS && ok; i++)
            ok = execute(h, plan, workspace, x, w, y) == CUDNN_STATUS_SUCCESS;
        float f = 0;
        if (ok && cudaEventRecord(b, st) == cudaSuccess &&
            dl_cuda_wait_event(b, "timing cuDNN plans") == 0 &&
            cudaEventElapsedTime(&f, a, b) == cudaSuccess)
            ms = f / TIMED_RUNS;
    }
    if (a) cudaEventDestroy(a);
    if (b) cudaEventDestroy(b);
    cudaGetLastError();
    dl_clear_error();
    return ms;
}

// Builds the plan for key and runs it once (the call's own work): the first
// configuration that runs, or with benchmark the fastest of up to MAX_TIMED.
// The plan, or a "no plan" entry, goes into the cache (g_mu held).
bool build_and_run(cudnnHandle_t h, const dl_conv_plan_key &key, dl_dtype dt,
                   const dl_conv2d_shape *s, void *x, void *w, void *y) {
    Graph g;
    BDesc &graph = g.graph;
    cudnnStatus_t st = op_graph(g, h, key, dt, s);
    if (st != CUDNN_STATUS_SUCCESS) {
        if (!not_supported(st)) warn_once("building the operation graph", st);
        return false;
    }
    BDesc cfgs[2 * MAX_CONFIGS];
    int n = 0;
    st = configs(graph.d, CUDNN_HEUR_MODE_A, cfgs, &n, MAX_CONFIGS);
    if (st != CUDNN_STATUS_SUCCESS && !not_supported(st)) warn_once("heuristics mode A", st);
    st = configs(graph.d, CUDNN_HEUR_MODE_FALLBACK, cfgs, &n, 2 * MAX_CONFIGS);
    if (st != CUDNN_STATUS_SUCCESS && !not_supported(st)) warn_once("the fallback heuristics", st);
    // timing waits for the GPU: never inside a CUDA graph capture
    bool timing = key.benchmark != 0 && !dl_cuda_capturing();
    Plan best;
    double best_ms = -1;
    int timed = 0;
    for (int i = 0; i < n; i++) {
        if (!numerics_ok(cfgs[i].d, dt, key.tf32 != 0)) continue;
        BDesc plan;
        int64_t ws = 0;
        if (finalize_plan(plan, h, cfgs[i].d, &ws) != CUDNN_STATUS_SUCCESS || ws < 0 || ws > WS_CAP)
            continue;
        if (!timing) {
            if (execute(h, plan.d, ws, x, w, y) != CUDNN_STATUS_SUCCESS) continue;
            Plan *p = new (std::nothrow) Plan;
            if (!p) return true; // out of host memory: this call ran; the next builds again
            p->plan = plan.release();
            p->config = cfgs[i].release();
            p->workspace = ws;
            cache_put(key, p);
            g_stats.built++;
            return true;
        }
        double ms = time_plan(h, plan.d, ws, x, w, y);
        if (ms < 0) continue;
        g_stats.timed++;
        if (best_ms < 0 || ms < best_ms) {
            destroy_plan(best);
            best.plan = plan.release();
            best.config = cfgs[i].release();
            best.workspace = ws;
            best_ms = ms;
        }
        if (++timed == MAX_TIMED) break;
    }
    if (best.plan && execute(h, best.plan, best.workspace, x, w, y) == CUDNN_STATUS_SUCCESS) {
        Plan *p = new (std::nothrow) Plan(best);
        if (!p) {
            destroy_plan(best);
            return true; // this call ran; the next builds again
        }
        cache_put(key, p);
        g_stats.built++;
        return true;
    }
    destroy_plan(best);
    no_plan(key);
    return false;
}

} // namespace

int dl_cuda_conv_plan_run(int kind, dl_dtype dt, const dl_conv2d_shape *s, bool nhwc, void *x,
                          void *w, void *y) {
    if (s->groups < 1 || s->C % s->groups != 0) return 1; // the legacy path reports it
    cudnnHandle_t h = dl_cuda_cudnn_on_stream();
    if (!h) return -1;
    dl_conv_plan_key key;
    dl_conv_plan_key_make(&key, kind, dl_cuda_device(), dt, s, nhwc, dl_flags.allow_tf32,
                          dl_flags.cudnn_benchmark, x, w, y);
    std::lock_guard<std::mutex> lock(g_mu);
    if (!g_cache) {
        g_cache = dl_lru_new(CAPACITY, free_plan, nullptr);
        if (!g_cache) return -1;
    }
    Plan *p = (Plan *)dl_lru_get(g_cache, &key, sizeof key);
    if (!p) return build_and_run(h, key, dt, s, x, w, y) ? 0 : 1;
    if (!p->plan) return 1;
    cudnnStatus_t st = execute(h, p->plan, p->workspace, x, w, y);
    if (st == CUDNN_STATUS_SUCCESS) {
        g_stats.executed++;
        return 0;
    }
    warn_once("executing a cached plan", st);
    no_plan(key); // replaces (frees) the failing plan
    return 1;
}

void dl_cuda_conv_plan_stats(dl_conv_plan_stats *out) {
    std::lock_guard<std::mutex> lock(g_mu);
    *out = g_stats;
    if (g_cache) {
        dl_lru_stats ls;
        dl_lru_get_stats(g_cache, &ls);
        out->size = (int64_t)ls.size;
        out->capacity = (int64_t)ls.capacity;
        out->hits = ls.hits;
        out->misses = ls.misses;
        out->evictions = ls.evictions;
    } else {
        out->capacity = (int64_t)CAPACITY;
    }
}
