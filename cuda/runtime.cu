// runtime.cu - the CUDA runtime services of the backend: checked-call errors,
// per-device state (compute and copy streams, cuBLAS/cuBLASLt/cuDNN handles,
// a shared workspace), the caching device allocator with private pools for
// CUDA graphs, every host synchronisation (counted, refused while a graph is
// captured), checks found on the device, pinned host memory and events.
// extern "C" entry points for the core; C++ helpers for cuda/*.cu.
//
// Streams: the compute stream is the legacy default stream, so every kernel,
// library call and synchronous copy is ordered with every other; the copy
// stream is a non-blocking stream used only by copy_async, ordered with the
// compute stream by events.  While a CUDA graph is captured (graph.cu), the
// device's capture stream (non-blocking) is the compute stream instead, and
// the graph is replayed on the legacy stream, in order with everything else.
//
// The allocator keeps freed blocks per device in a size-ordered pool and hands
// out the smallest cached block that fits within a small slack, so a training
// loop's steady state makes no cudaMalloc or cudaFree.  Sizes are rounded to
// 512 bytes (up to 1 MiB) or to whole MiB.  A freed block records an event on
// the compute stream; work on the copy stream that reuses it waits for that
// event.  When cudaMalloc fails, the pool is released and the call retried;
// the core then runs a Lua collection and asks once more before it reports.
// While a graph is captured, allocations come from (and frees of blocks
// allocated then go back to) that graph's private pool, so the addresses the
// graph replays stay its own until the graph is freed; blocks of the general
// pool freed during a capture rejoin it when the capture ends (no event can be
// recorded on the legacy stream meanwhile).
//
// Checks found on the device: one record per device in mapped pinned memory,
// written by a one-thread kernel on the compute stream (the first finding
// wins) and read by the host after each synchronisation without a copy.
#include "common.cuh"

#include <atomic>
#include <dlfcn.h>
#include <map>
#include <mutex>
#include <stdio.h>
#include <string.h>
#include <unordered_map>
#include <vector>

extern "C" {
#include "kernels/cuda.h"
}

#define DL_CUDA_MAX_DEVICES 16

// --- errors ------------------------------------------------------------------------

int dl_cuda_fail(const char *call, const char *msg, const char *file, int line) {
    const char *base = strrchr(file, '/');
    return dl_error("CUDA error in %s (%s:%d): %s", call, base ? base + 1 : file, line, msg);
}

// --- per-device state ---------------------------------------------------------------

namespace {

struct Block {
    void *ptr;
    size_t size;
    cudaEvent_t freed; // recorded on the compute stream when the block was freed
    bool has_event;
    int pool; // 0: the general pool; else the private pool of a CUDA graph
};

// What a check found on the device (see dl_cuda_check_first_bad).  set is
// written last, after a system fence.
struct CheckRecord {
    int set;
    int kind;
    unsigned long long op; // a string literal's address, from the host
    long long value, limit, aux;
};

typedef std::multimap<size_t, Block> FreeList; // cached free blocks by size

struct Device {
    std::mutex mu;
    bool ready = false;
    cudaStream_t copy_stream = nullptr;
    cudaStream_t capture_stream = nullptr; // created on the first capture
    cudaStream_t compute = nullptr;        // the compute stream: capture_stream while capturing
    cublasHandle_t cublas = nullptr;
    cublasLtHandle_t cublaslt = nullptr;
    cudnnHandle_t cudnn = nullptr;
    int sm_count = 0, cc_major = 0;
    void *workspace = nullptr;
    size_t workspace_size = 0;
    void *capture_workspace = nullptr; // the workspace while capturing (private pool)
    size_t capture_workspace_size = 0;
    CheckRecord *check_host = nullptr, *check_dev = nullptr; // one mapped record
    // allocator
    FreeList pool;                          // the general pool
    std::map<int, FreeList> private_pools;  // live graphs' pools by id
    int capture_pool = 0;                   // the pool allocations come from now (0: general)
    std::vector<Block> deferred;            // general blocks freed during a capture
    std::unordered_map<void *, Block> used; // handed-out blocks by pointer
    int64_t allocated = 0, reserved = 0, peak = 0;
};

Device g_dev[DL_CUDA_MAX_DEVICES];
int g_count = 0;
std::atomic<int64_t> g_syncs{0}; // host synchronisations so far
const int kReasons = 16;
std::atomic<const char *> g_reasons[kReasons]; // why the last kReasons happened (ring)

// Counts one synchronisation and notes why (a string literal or an op name).
void count_sync(const char *why) {
    int64_t k = g_syncs++;
    g_reasons[k % kReasons].store(why);
}
int g_pool_seq = 0; // the last private pool id handed out

int current(void) {
    int d = 0;
    if (cudaGetDevice(&d) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return d;
}

// Switches to device d for the lifetime of the guard.
struct DeviceGuard {
    int prev;
    explicit DeviceGuard(int d) : prev(current()) {
        if (d != prev) cudaSetDevice(d);
    }
    ~DeviceGuard() {
        int now = current();
        if (now != prev) cudaSetDevice(prev);
    }
};

size_t round_size(size_t n) {
    if (n == 0) n = 1;
    if (n <= (1u << 20)) return (n + 511) & ~(size_t)511;
    return (n + (1u << 20) - 1) & ~(size_t)((1u << 20) - 1);
}

// Frees every cached block of the general pool of device d (caller holds d's
// mutex; never while capturing: cudaFree waits for the device).
void release_pool(Device &dv) {
    if (dv.pool.empty() || dv.capture_pool) return;
    count_sync("releasing cached blocks (out of memory)");
    cudaDeviceSynchronize();
    for (auto &kv : dv.pool) {
        if (kv.second.has_event) cudaEventDestroy(kv.second.freed);
        cudaFree(kv.second.ptr);
        dv.reserved -= (int64_t)kv.second.size;
    }
    dv.pool.clear();
    cudaGetLastError();
}

// Puts b into the general pool, its event recorded on the legacy stream (the
// caller holds d's mutex, device d is current, and no capture is running).
void to_general(Device &dv, Block b) {
    b.pool = 0;
    if (!b.has_event && cudaEventCreateWithFlags(&b.freed, cudaEventDisableTiming) == cudaSuccess)
        b.has_event = true;
    if (b.has_event) cudaEventRecord(b.freed, 0);
    cudaGetLastError();
    dv.pool.insert({b.size, b});
}

void *device_alloc(size_t nbytes, int d) {
    if (d < 0 || d >= g_count) {
        dl_error("cuda: no device %d (this machine has %d)", d + 1, g_count);
        return nullptr;
    }
    Device &dv = g_dev[d];
    size_t size = round_size(nbytes);
    std::lock_guard<std::mutex> lock(dv.mu);
    // the smallest cached block that fits, if it wastes little (while a graph
    // is captured, from its private pool only)
    FreeList &fl = dv.capture_pool ? dv.private_pools[dv.capture_pool] : dv.pool;
    auto it = fl.lower_bound(size);
    size_t slack = size <= (1u << 20) ? size : size / 8;
    if (it != fl.end() && it->first <= size + slack) {
        Block b = it->second;
        fl.erase(it);
        dv.used[b.ptr] = b;
        dv.allocated += (int64_t)b.size;
        if (dv.allocated > dv.peak) dv.peak = dv.allocated;
        return b.ptr;
    }
    DeviceGuard guard(d);
    void *p = nullptr;
    cudaError_t e = cudaMalloc(&p, size);
    if (e != cudaSuccess && !dv.capture_pool) {
        cudaGetLastError();
        release_pool(dv);
        e = cudaMalloc(&p, size);
    }
    if (e != cudaSuccess) {
        cudaGetLastError();
        dl_error("cuda:%d: out of memory%s: %zu bytes requested, %lld allocated, %lld reserved", d,
                 dv.capture_pool ? " while capturing a CUDA graph" : "", nbytes,
                 (long long)dv.allocated, (long long)dv.reserved);
        return nullptr;
    }
    Block b = {p, size, nullptr, false, dv.capture_pool};
    dv.used[p] = b;
    dv.allocated += (int64_t)size;
    dv.reserved += (int64_t)size;
    if (dv.allocated > dv.peak) dv.peak = dv.allocated;
    return p;
}

void device_free(void *p, int d) {
    if (!p || d < 0 || d >= g_count) return;
    Device &dv = g_dev[d];
    std::lock_guard<std::mutex> lock(dv.mu);
    auto it = dv.used.find(p);
    if (it == dv.used.end()) return;
    Block b = it->second;
    dv.used.erase(it);
    dv.allocated -= (int64_t)b.size;
    if (b.pool) {
        // a live graph's block stays its own (no event: only that graph's
        // capture, in stream order, can take it again)
        auto pit = dv.private_pools.find(b.pool);
        if (pit != dv.private_pools.end()) {
            pit->second.insert({b.size, b});
            return;
        }
        b.pool = 0; // the graph is gone: the block joins the general pool
    }
    if (dv.capture_pool) { // the legacy stream must not be touched while capturing
        dv.deferred.push_back(b);
        return;
    }
    DeviceGuard guard(d);
    to_general(dv, b);
}

const char *device_describe(int d, char *buf, size_t n) {
    if (d < 0 || d >= g_count) {
        snprintf(buf, n, "no such device");
        return buf;
    }
    Device &dv = g_dev[d];
    std::lock_guard<std::mutex> lock(dv.mu);
    snprintf(buf, n, "%lld bytes allocated, %lld reserved", (long long)dv.allocated,
             (long long)dv.reserved);
    return buf;
}

// Creates the streams, handles and check record of device d on first use.
int device_ready(int d) {
    Device &dv = g_dev[d];
    if (dv.ready) return 0;
    std::lock_guard<std::mutex> lock(dv.mu);
    if (dv.ready) return 0;
    DeviceGuard guard(d);
    DL_CUDA_CHECK(cudaStreamCreateWithFlags(&dv.copy_stream, cudaStreamNonBlocking));
    DL_CUDA_CHECK(cudaDeviceGetAttribute(&dv.sm_count, cudaDevAttrMultiProcessorCount, d));
    DL_CUDA_CHECK(cudaDeviceGetAttribute(&dv.cc_major, cudaDevAttrComputeCapabilityMajor, d));
    void *h = nullptr, *dp = nullptr;
    DL_CUDA_CHECK(cudaHostAlloc(&h, sizeof(CheckRecord), cudaHostAllocMapped));
    memset(h, 0, sizeof(CheckRecord));
    cudaError_t e = cudaHostGetDevicePointer(&dp, h, 0);
    if (e != cudaSuccess) {
        cudaFreeHost(h);
        return dl_cuda_fail("cudaHostGetDevicePointer", cudaGetErrorString(e), __FILE__, __LINE__);
    }
    dv.check_host = (CheckRecord *)h;
    dv.check_dev = (CheckRecord *)dp;
    dv.ready = true;
    return 0;
}

// The error a check recorded on device d reported (and the record cleared),
// or 0 when none is there.  The caller has waited for the device's work.
int report_check(int d) {
    Device &dv = g_dev[d];
    volatile CheckRecord *r = dv.check_host;
    if (!r || !r->set) return 0;
    int kind = r->kind;
    const char *op = (const char *)(uintptr_t)r->op;
    long long value = r->value, limit = r->limit, aux = r->aux;
    r->set = 0; // later kernels see the cleared record: they are queued after this
    char where[96];
    snprintf(where, sizeof where, " (found on cuda:%d; reported at the next synchronisation)", d);
    switch (kind) {
    case DL_CHECK_CLASS_TARGET:
        return dl_error("%s: target %lld is out of bounds for %lld classes (0-based; ignore_index "
                        "is %lld)%s",
                        op, value, limit, aux, where);
    case DL_CHECK_CLASS_LABEL:
        return dl_error("%s: target label %lld is out of range for %lld classes (labels are "
                        "1..%lld; ignore_index is %lld)%s",
                        op, value + 1, limit, limit, aux + 1, where);
    case DL_CHECK_POOL_INDEX:
        return dl_error("%s: index %lld is outside the input plane of %lld elements (indices must "
                        "come from the forward)%s",
                        op, value, limit, where);
    default: return dl_error("%s: a check on the device failed (kind %d)%s", op, kind, where);
    }
}

// Whether the current device is capturing a CUDA graph now.
bool capturing_now(void) {
    return g_dev[current()].capture_pool != 0;
}

} // namespace

// --- C++ helpers for cuda/*.cu ------------------------------------------------------------

int dl_cuda_device(void) {
    return current();
}

cudaStream_t dl_cuda_stream(void) {
    return g_dev[current()].compute;
}

bool dl_cuda_capturing(void) {
    return capturing_now();
}

int dl_cuda_refuse_in_capture(const char *op) {
    if (!capturing_now()) return 0;
    return dl_error("%s: not allowed while a CUDA graph is being captured (it waits for the GPU "
                    "or works outside the graph's stream); move it out of the captured function",
                    op);
}

// --- host synchronisation -------------------------------------------------------------------

int dl_cuda_sync_stream(cudaStream_t s, const char *why) {
    if (dl_cuda_refuse_in_capture(why)) return -1;
    count_sync(why);
    cudaError_t e = cudaStreamSynchronize(s);
    if (e != cudaSuccess) return dl_cuda_fail(why, cudaGetErrorString(e), __FILE__, __LINE__);
    return report_check(current());
}

int dl_cuda_sync_device(const char *why) {
    if (dl_cuda_refuse_in_capture(why)) return -1;
    count_sync(why);
    cudaError_t e = cudaDeviceSynchronize();
    if (e != cudaSuccess) return dl_cuda_fail(why, cudaGetErrorString(e), __FILE__, __LINE__);
    return report_check(current());
}

int dl_cuda_sync_event(cudaEvent_t ev, const char *why) {
    if (dl_cuda_refuse_in_capture(why)) return -1;
    count_sync(why);
    cudaError_t e = cudaEventSynchronize(ev);
    if (e != cudaSuccess) return dl_cuda_fail(why, cudaGetErrorString(e), __FILE__, __LINE__);
    return report_check(current());
}

int dl_cuda_wait_event(cudaEvent_t ev, const char *why) {
    if (dl_cuda_refuse_in_capture(why)) return -1;
    count_sync(why);
    cudaError_t e = cudaEventSynchronize(ev);
    if (e != cudaSuccess) return dl_cuda_fail(why, cudaGetErrorString(e), __FILE__, __LINE__);
    return 0;
}

int dl_cuda_read_device(void *dst, const void *src, size_t n, const char *why) {
    if (dl_cuda_refuse_in_capture(why)) return -1;
    cudaStream_t st = dl_cuda_stream();
    cudaError_t e = cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToHost, st);
    if (e != cudaSuccess) return dl_cuda_fail(why, cudaGetErrorString(e), __FILE__, __LINE__);
    return dl_cuda_sync_stream(st, why);
}

int dl_cuda_memcpy_sync(void *dst, const void *src, size_t n, cudaMemcpyKind kind,
                        const char *why) {
    if (dl_cuda_refuse_in_capture(why)) return -1;
    count_sync(why);
    cudaError_t e = cudaMemcpy(dst, src, n, kind);
    if (e != cudaSuccess) return dl_cuda_fail(why, cudaGetErrorString(e), __FILE__, __LINE__);
    return kind == cudaMemcpyDeviceToHost ? report_check(current()) : 0;
}

// --- capture support (graph.cu) ---------------------------------------------------------------

cudaStream_t dl_cuda_capture_stream(int d) {
    if (d < 0 || d >= g_count) {
        dl_error("cuda: no device %d", d);
        return nullptr;
    }
    if (device_ready(d)) return nullptr;
    Device &dv = g_dev[d];
    std::lock_guard<std::mutex> lock(dv.mu);
    if (!dv.capture_stream) {
        DeviceGuard guard(d);
        cudaStream_t s = nullptr;
        cudaError_t e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
        if (e != cudaSuccess) {
            dl_cuda_fail("cudaStreamCreateWithFlags", cudaGetErrorString(e), __FILE__, __LINE__);
            return nullptr;
        }
        dv.capture_stream = s;
    }
    return dv.capture_stream;
}

int dl_cuda_capture_enter(int d, cudaStream_t s) {
    if (d < 0 || d >= g_count) return dl_error("cuda: no device %d", d);
    Device &dv = g_dev[d];
    std::lock_guard<std::mutex> lock(dv.mu);
    if (dv.capture_pool) return dl_error("CUDAGraph: a capture is already running on cuda:%d", d);
    int id = ++g_pool_seq;
    dv.private_pools[id]; // an empty free list
    dv.capture_pool = id;
    dv.compute = s;
    dv.capture_workspace = nullptr;
    dv.capture_workspace_size = 0;
    return id;
}

void dl_cuda_capture_leave(int d) {
    if (d < 0 || d >= g_count) return;
    Device &dv = g_dev[d];
    void *ws = nullptr;
    {
        std::lock_guard<std::mutex> lock(dv.mu);
        ws = dv.capture_workspace;
        dv.capture_workspace = nullptr;
        dv.capture_workspace_size = 0;
    }
    device_free(ws, d); // into the graph's pool: the graph replays with it
    std::lock_guard<std::mutex> lock(dv.mu);
    dv.capture_pool = 0;
    dv.compute = nullptr;
    DeviceGuard guard(d);
    for (Block &b : dv.deferred) to_general(dv, b);
    dv.deferred.clear();
}

void dl_cuda_pool_release(int d, int pool) {
    if (d < 0 || d >= g_count || pool <= 0) return;
    Device &dv = g_dev[d];
    std::lock_guard<std::mutex> lock(dv.mu);
    auto it = dv.private_pools.find(pool);
    if (it == dv.private_pools.end()) return;
    FreeList blocks;
    blocks.swap(it->second);
    dv.private_pools.erase(it);
    DeviceGuard guard(d);
    for (auto &kv : blocks) {
        Block b = kv.second;
        b.pool = 0;
        if (dv.capture_pool)
            dv.deferred.push_back(b); // another graph is capturing: no events now
        else
            to_general(dv, b); // after the graph's replays queued so far
    }
}

cudaStream_t dl_cuda_copy_stream(void) {
    int d = current();
    if (device_ready(d)) return nullptr;
    return g_dev[d].copy_stream;
}

int dl_cuda_sm_count(void) {
    int d = current();
    return device_ready(d) ? 1 : g_dev[d].sm_count;
}

int dl_cuda_cc_major(void) {
    int d = current();
    return device_ready(d) ? 0 : g_dev[d].cc_major;
}

int dl_cuda_use(const dl_tensor *t) {
    int want = t->storage->device.index;
    if (want != current()) DL_CUDA_CHECK(cudaSetDevice(want));
    return 0;
}

// --- cuBLAS, opened on first use (see common.cuh) ------------------------------

static void *g_cublas;           // dlopen handle, or null
static char g_cublas_error[512]; // why it could not be opened

bool dl_cublas_load(void) {
    static std::once_flag once;
    std::call_once(once, []() {
        // the soname of the cuBLAS this was compiled against; then the toolkit's
        // own directory, for a loader path that lacks it
        static const char *const names[] = {
            "libcublas.so." DL_STR(CUBLAS_VER_MAJOR),
#ifdef DL_CUDA_LIBRARY_DIR
            DL_CUDA_LIBRARY_DIR "/libcublas.so." DL_STR(CUBLAS_VER_MAJOR),
#endif
        };
        for (const char *n : names) {
            g_cublas = dlopen(n, RTLD_NOW | RTLD_LOCAL);
            if (g_cublas) return;
            const char *e = dlerror();
            snprintf(g_cublas_error, sizeof g_cublas_error, "%s", e ? e : n);
        }
    });
    if (!g_cublas) dl_error("cuBLAS could not be opened: %s", g_cublas_error);
    return g_cublas != nullptr;
}

void *dl_cublas_symbol(const char *name) {
    return dl_cublas_load() ? dlsym(g_cublas, name) : nullptr;
}

cublasHandle_t dl_cuda_cublas(void) {
    int d = current();
    Device &dv = g_dev[d];
    if (!dv.cublas) {
        if (!dl_cublas_load()) return nullptr;
        cublasStatus_t s = DL_CUBLAS_FN(cublasCreate)(&dv.cublas);
        if (s != CUBLAS_STATUS_SUCCESS) {
            dl_cuda_fail("cublasCreate", DL_CUBLAS_FN(cublasGetStatusString)(s), __FILE__,
                         __LINE__);
            dv.cublas = nullptr;
            return nullptr;
        }
        DL_CUBLAS_FN(cublasSetStream)(dv.cublas, 0);
    }
    return dv.cublas;
}

cublasLtHandle_t dl_cuda_cublaslt(void) {
    int d = current();
    Device &dv = g_dev[d];
    if (!dv.cublaslt) {
        if (!dl_cublas_load()) return nullptr;
        cublasStatus_t s = DL_CUBLAS_FN(cublasLtCreate)(&dv.cublaslt);
        if (s != CUBLAS_STATUS_SUCCESS) {
            dl_cuda_fail("cublasLtCreate", DL_CUBLAS_FN(cublasGetStatusString)(s), __FILE__,
                         __LINE__);
            dv.cublaslt = nullptr;
            return nullptr;
        }
    }
    return dv.cublaslt;
}

cudnnHandle_t dl_cuda_cudnn(void) {
    int d = current();
    Device &dv = g_dev[d];
    if (!dv.cudnn) {
        cudnnStatus_t s = cudnnCreate(&dv.cudnn);
        if (s != CUDNN_STATUS_SUCCESS) {
            dl_cuda_fail("cudnnCreate", cudnnGetErrorString(s), __FILE__, __LINE__);
            dv.cudnn = nullptr;
            return nullptr;
        }
        cudnnSetStream(dv.cudnn, 0);
    }
    return dv.cudnn;
}

cudnnHandle_t dl_cuda_cudnn_on_stream(void) {
    cudnnHandle_t h = dl_cuda_cudnn();
    if (!h) return nullptr;
    cudnnStatus_t st = cudnnSetStream(h, dl_cuda_stream());
    if (st != CUDNN_STATUS_SUCCESS) {
        dl_cuda_fail("cudnnSetStream", cudnnGetErrorString(st), __FILE__, __LINE__);
        return nullptr;
    }
    return h;
}

void *dl_cuda_malloc(size_t nbytes) {
    return device_alloc(nbytes, current());
}

void dl_cuda_free(void *p) {
    device_free(p, current());
}

// The workspace *ws of *size bytes, replaced by a new block when smaller
// than nbytes (the old one freed: stream-ordered, so work queued with it is
// unaffected).  NULL + error.
static void *grow_workspace(void **ws, size_t *size, size_t nbytes, int d) {
    if (nbytes <= *size && *ws) return *ws;
    if (*ws) device_free(*ws, d);
    *ws = nullptr;
    *size = 0;
    void *p = device_alloc(nbytes ? nbytes : 1, d);
    if (!p) return nullptr;
    *ws = p;
    *size = nbytes;
    return p;
}

void *dl_cuda_workspace(size_t nbytes) {
    int d = current();
    Device &dv = g_dev[d];
    // a capture gets its own workspace (from its private pool), so the
    // graph's replays never write into memory that later serves others
    if (dv.capture_pool)
        return grow_workspace(&dv.capture_workspace, &dv.capture_workspace_size, nbytes, d);
    return grow_workspace(&dv.workspace, &dv.workspace_size, nbytes, d);
}

// The event recorded when the block at p was last freed (for copy-stream
// reuse), or NULL.
cudaEvent_t dl_cuda_block_event(void *p, int d) {
    if (d < 0 || d >= g_count) return nullptr;
    Device &dv = g_dev[d];
    std::lock_guard<std::mutex> lock(dv.mu);
    auto it = dv.used.find(p);
    return it != dv.used.end() && it->second.has_event ? it->second.freed : nullptr;
}

// --- the runtime table ---------------------------------------------------------------------

// graph.cu
void *dl_cuda_graph_new(void);
void dl_cuda_graph_free(void *g);
int dl_cuda_graph_capture_begin(void *g);
int dl_cuda_graph_capture_end(void *g);
int dl_cuda_graph_replay(void *g);

namespace {

int rt_device_count(void) {
    return g_count;
}

int rt_set_device(int d) {
    if (d < 0 || d >= g_count)
        return dl_error("cuda.set_device: no device %d (this machine has %d)", d + 1, g_count);
    DL_CUDA_CHECK(cudaSetDevice(d));
    return device_ready(d);
}

int rt_current_device(void) {
    return current();
}

int rt_synchronize(int d) {
    if (d < 0 || d >= g_count) return dl_error("cuda.synchronize: no device %d", d + 1);
    DeviceGuard guard(d);
    return dl_cuda_sync_device("cuda.synchronize");
}

int64_t rt_allocated(int d) {
    if (d < 0 || d >= g_count) return 0;
    std::lock_guard<std::mutex> lock(g_dev[d].mu);
    return g_dev[d].allocated;
}

int64_t rt_reserved(int d) {
    if (d < 0 || d >= g_count) return 0;
    std::lock_guard<std::mutex> lock(g_dev[d].mu);
    return g_dev[d].reserved;
}

int64_t rt_peak(int d) {
    if (d < 0 || d >= g_count) return 0;
    std::lock_guard<std::mutex> lock(g_dev[d].mu);
    return g_dev[d].peak;
}

void rt_reset_peak(int d) {
    if (d < 0 || d >= g_count) return;
    std::lock_guard<std::mutex> lock(g_dev[d].mu);
    g_dev[d].peak = g_dev[d].allocated;
}

int rt_empty_cache(void) {
    if (dl_cuda_refuse_in_capture("cuda.empty_cache")) return -1;
    for (int d = 0; d < g_count; d++) {
        std::lock_guard<std::mutex> lock(g_dev[d].mu);
        DeviceGuard guard(d);
        release_pool(g_dev[d]);
    }
    return 0;
}

void *rt_host_alloc(size_t n) {
    void *p = nullptr;
    cudaError_t e = cudaMallocHost(&p, n ? n : 1);
    if (e != cudaSuccess) {
        cudaGetLastError();
        dl_error("cuda: cannot allocate %zu bytes of pinned host memory: %s", n,
                 cudaGetErrorString(e));
        return nullptr;
    }
    return p;
}

void rt_host_free(void *p) {
    if (p) cudaFreeHost(p);
}

int rt_copy_async(dl_tensor *dst, dl_tensor *src, void **done_out) {
    if (done_out) *done_out = nullptr;
    bool to_dev = dst->storage->device.type == DL_DEVICE_CUDA;
    dl_tensor *dev_t = to_dev ? dst : src;
    int d = dev_t->storage->device.index;
    DeviceGuard guard(d);
    if (device_ready(d) || dl_cuda_refuse_in_capture("a non_blocking copy")) return -1;
    cudaStream_t cs = g_dev[d].copy_stream;
    size_t nbytes = (size_t)dl_tensor_numel(dst) * dl_tensor_itemsize(dst);
    // the copy stream must not touch device memory that queued compute work
    // still uses: wait for the compute work before the block was freed
    // (writes into a reused block), or for everything queued so far (reads)
    cudaEvent_t ev = nullptr;
    if (to_dev) {
        ev = dl_cuda_block_event(dst->storage->data, d);
        if (ev) DL_CUDA_CHECK(cudaStreamWaitEvent(cs, ev, 0));
    } else {
        DL_CUDA_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
        DL_CUDA_CHECK(cudaEventRecord(ev, 0));
        DL_CUDA_CHECK(cudaStreamWaitEvent(cs, ev, 0));
        cudaEventDestroy(ev);
    }
    DL_CUDA_CHECK(cudaMemcpyAsync(dl_tensor_data_ptr(dst), dl_tensor_data_ptr(src), nbytes,
                                  to_dev ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost, cs));
    cudaEvent_t done;
    DL_CUDA_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
    cudaError_t e = cudaEventRecord(done, cs);
    if (e == cudaSuccess) e = cudaStreamWaitEvent(0, done, 0); // compute waits, the host does not
    if (e != cudaSuccess) {
        cudaEventDestroy(done);
        return dl_cuda_fail("copy_async", cudaGetErrorString(e), __FILE__, __LINE__);
    }
    if (done_out)
        *done_out = (void *)done;
    else
        cudaEventDestroy(done);
    if (!to_dev) return dl_cuda_sync_stream(cs, "a non_blocking copy to the host"); // read next
    return 0;
}

void *rt_event_new(void) {
    cudaEvent_t e;
    if (cudaEventCreate(&e) != cudaSuccess) {
        cudaGetLastError();
        dl_error("cuda.Event: cannot create an event");
        return nullptr;
    }
    return (void *)e;
}

void rt_event_free(void *e) {
    if (e) cudaEventDestroy((cudaEvent_t)e);
}

int rt_event_record(void *e) {
    if (dl_cuda_refuse_in_capture("Event:record")) return -1;
    DL_CUDA_CHECK(cudaEventRecord((cudaEvent_t)e, 0));
    return 0;
}

int rt_event_synchronize(void *e) {
    return dl_cuda_sync_event((cudaEvent_t)e, "Event:synchronize");
}

int rt_event_query(void *ev) {
    cudaError_t e = cudaEventQuery((cudaEvent_t)ev);
    if (e == cudaSuccess) return 1;
    if (e == cudaErrorNotReady) {
        cudaGetLastError();
        return 0;
    }
    return dl_cuda_fail("cudaEventQuery", cudaGetErrorString(e), __FILE__, __LINE__);
}

int rt_event_elapsed(void *a, void *b, double *ms) {
    float f = 0;
    DL_CUDA_CHECK(cudaEventElapsedTime(&f, (cudaEvent_t)a, (cudaEvent_t)b));
    *ms = f;
    return 0;
}

int rt_dtype_supported(dl_dtype dt) {
    return dt != DL_DTYPE_COUNT;
}

int64_t rt_sync_count(void) {
    return g_syncs.load();
}

const char *rt_sync_reason(int i) {
    int64_t n = g_syncs.load();
    if (i < 0 || i >= kReasons || i >= n) return nullptr;
    return g_reasons[(n - 1 - i) % kReasons].load();
}

// One thread: records what was found at *first_bad, unless an earlier
// finding is still unreported.
__global__ void report_first_bad_kernel(CheckRecord *r, unsigned long long op, int kind,
                                        const int64_t *first_bad, const int64_t *values, int64_t n,
                                        long long limit, long long aux) {
    int64_t at = *first_bad;
    if (at < 0 || at >= n || r->set) return;
    r->kind = kind;
    r->op = op;
    r->value = (long long)values[at];
    r->limit = limit;
    r->aux = aux;
    __threadfence_system();
    r->set = 1;
}

int rt_check_first_bad(const char *op, int kind, const int64_t *first_bad, const int64_t *values,
                       int64_t n, int64_t limit, int64_t aux) {
    int d = current();
    if (device_ready(d)) return -1;
    report_first_bad_kernel<<<1, 1, 0, dl_cuda_stream()>>>(
        g_dev[d].check_dev, (unsigned long long)(uintptr_t)op, kind, first_bad, values, n,
        (long long)limit, (long long)aux);
    DL_CUDA_LAUNCHED();
    if (dl_flags.cuda_sync_checks && !capturing_now())
        return dl_cuda_sync_stream(dl_cuda_stream(), op);
    return 0;
}

int rt_capturing(void) {
    return capturing_now() ? 1 : 0;
}

const dl_cuda_runtime runtime_table = {
    rt_device_count,
    rt_set_device,
    rt_current_device,
    rt_synchronize,
    rt_allocated,
    rt_reserved,
    rt_peak,
    rt_reset_peak,
    rt_empty_cache,
    rt_host_alloc,
    rt_host_free,
    rt_copy_async,
    rt_event_new,
    rt_event_free,
    rt_event_record,
    rt_event_synchronize,
    rt_event_query,
    rt_event_elapsed,
    rt_dtype_supported,
    rt_sync_count,
    rt_sync_reason,
    rt_check_first_bad,
    dl_cuda_graph_new,
    dl_cuda_graph_free,
    dl_cuda_graph_capture_begin,
    dl_cuda_graph_capture_end,
    dl_cuda_graph_replay,
    rt_capturing,
};

const dl_allocator allocator = {device_alloc, device_free};

} // namespace

// --- start-up -------------------------------------------------------------------------------

int dl_cuda_copy(dl_tensor *dst, dl_tensor *src); // copy.cu
void dl_cuda_register_kernels(void);              // backend.cu

// Called once (src/ops/device.c) before any tensor exists.  Leaves every
// table NULL when there is no GPU.
extern "C" void dl_cuda_init(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n <= 0) {
        cudaGetLastError();
        return;
    }
    g_count = n < DL_CUDA_MAX_DEVICES ? n : DL_CUDA_MAX_DEVICES;
    dl_register_allocator(DL_DEVICE_CUDA, &allocator);
    dl_copy_across_devices = dl_cuda_copy;
    dl_device_memory_describe = device_describe;
    dl_cuda_rt = &runtime_table;
    dl_cuda_register_kernels();
}
