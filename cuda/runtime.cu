// runtime.cu - the CUDA runtime services of the backend: checked-call errors,
// per-device state (compute and copy streams, cuBLAS/cuBLASLt/cuDNN handles,
// a shared workspace), the caching device allocator, pinned host memory and
// events.  extern "C" entry points for the core; C++ helpers for cuda/*.cu.
//
// Streams: the compute stream is the legacy default stream, so every kernel,
// library call and synchronous copy is ordered with every other; the copy
// stream is a non-blocking stream used only by copy_async, ordered with the
// compute stream by events.
//
// The allocator keeps freed blocks per device in a size-ordered pool and hands
// out the smallest cached block that fits within a small slack, so a training
// loop's steady state makes no cudaMalloc or cudaFree.  Sizes are rounded to
// 512 bytes (up to 1 MiB) or to whole MiB.  A freed block records an event on
// the compute stream; work on the copy stream that reuses it waits for that
// event.  When cudaMalloc fails, the pool is released and the call retried;
// the core then runs a Lua collection and asks once more before it reports.
#include "common.cuh"

#include <dlfcn.h>
#include <map>
#include <mutex>
#include <stdio.h>
#include <string.h>
#include <unordered_map>

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
};

struct Device {
    std::mutex mu;
    bool ready = false;
    cudaStream_t copy_stream = nullptr;
    cublasHandle_t cublas = nullptr;
    cublasLtHandle_t cublaslt = nullptr;
    cudnnHandle_t cudnn = nullptr;
    int sm_count = 0, cc_major = 0;
    void *workspace = nullptr;
    size_t workspace_size = 0;
    // allocator
    std::multimap<size_t, Block> pool;      // cached free blocks by size
    std::unordered_map<void *, Block> used; // handed-out blocks by pointer
    int64_t allocated = 0, reserved = 0, peak = 0;
};

Device g_dev[DL_CUDA_MAX_DEVICES];
int g_count = 0;

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

// Frees every cached block of device d (caller holds d's mutex).
void release_pool(Device &dv) {
    if (dv.pool.empty()) return;
    cudaDeviceSynchronize();
    for (auto &kv : dv.pool) {
        if (kv.second.has_event) cudaEventDestroy(kv.second.freed);
        cudaFree(kv.second.ptr);
        dv.reserved -= (int64_t)kv.second.size;
    }
    dv.pool.clear();
    cudaGetLastError();
}

void *device_alloc(size_t nbytes, int d) {
    if (d < 0 || d >= g_count) {
        dl_error("cuda: no device %d (this machine has %d)", d + 1, g_count);
        return nullptr;
    }
    Device &dv = g_dev[d];
    size_t size = round_size(nbytes);
    std::lock_guard<std::mutex> lock(dv.mu);
    // the smallest cached block that fits, if it wastes little
    auto it = dv.pool.lower_bound(size);
    size_t slack = size <= (1u << 20) ? size : size / 8;
    if (it != dv.pool.end() && it->first <= size + slack) {
        Block b = it->second;
        dv.pool.erase(it);
        dv.used[b.ptr] = b;
        dv.allocated += (int64_t)b.size;
        if (dv.allocated > dv.peak) dv.peak = dv.allocated;
        return b.ptr;
    }
    DeviceGuard guard(d);
    void *p = nullptr;
    cudaError_t e = cudaMalloc(&p, size);
    if (e != cudaSuccess) {
        cudaGetLastError();
        release_pool(dv);
        e = cudaMalloc(&p, size);
    }
    if (e != cudaSuccess) {
        cudaGetLastError();
        dl_error("cuda:%d: out of memory: %zu bytes requested, %lld allocated, %lld reserved", d,
                 nbytes, (long long)dv.allocated, (long long)dv.reserved);
        return nullptr;
    }
    Block b = {p, size, nullptr, false};
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
    DeviceGuard guard(d);
    if (!b.has_event && cudaEventCreateWithFlags(&b.freed, cudaEventDisableTiming) == cudaSuccess)
        b.has_event = true;
    if (b.has_event) cudaEventRecord(b.freed, 0);
    cudaGetLastError();
    dv.pool.insert({b.size, b});
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

// Creates the streams and handles of device d on first use.
int device_ready(int d) {
    Device &dv = g_dev[d];
    if (dv.ready) return 0;
    std::lock_guard<std::mutex> lock(dv.mu);
    if (dv.ready) return 0;
    DeviceGuard guard(d);
    DL_CUDA_CHECK(cudaStreamCreateWithFlags(&dv.copy_stream, cudaStreamNonBlocking));
    DL_CUDA_CHECK(cudaDeviceGetAttribute(&dv.sm_count, cudaDevAttrMultiProcessorCount, d));
    DL_CUDA_CHECK(cudaDeviceGetAttribute(&dv.cc_major, cudaDevAttrComputeCapabilityMajor, d));
    dv.ready = true;
    return 0;
}

} // namespace

// --- C++ helpers for cuda/*.cu ------------------------------------------------------------

int dl_cuda_device(void) {
    return current();
}

cudaStream_t dl_cuda_stream(void) {
    return 0;
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

void *dl_cuda_malloc(size_t nbytes) {
    return device_alloc(nbytes, current());
}

void dl_cuda_free(void *p) {
    device_free(p, current());
}

void *dl_cuda_workspace(size_t nbytes) {
    int d = current();
    Device &dv = g_dev[d];
    if (nbytes <= dv.workspace_size && dv.workspace) return dv.workspace;
    if (dv.workspace) device_free(dv.workspace, d);
    dv.workspace = nullptr;
    dv.workspace_size = 0;
    void *p = device_alloc(nbytes ? nbytes : 1, d);
    if (!p) return nullptr;
    dv.workspace = p;
    dv.workspace_size = nbytes;
    return p;
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
    DL_CUDA_CHECK(cudaDeviceSynchronize());
    return 0;
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

int rt_copy_async(dl_tensor *dst, dl_tensor *src) {
    bool to_dev = dst->storage->device.type == DL_DEVICE_CUDA;
    dl_tensor *dev_t = to_dev ? dst : src;
    int d = dev_t->storage->device.index;
    DeviceGuard guard(d);
    if (device_ready(d)) return -1;
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
    DL_CUDA_CHECK(cudaEventRecord(done, cs));
    DL_CUDA_CHECK(cudaStreamWaitEvent(0, done, 0)); // compute waits, the host does not
    cudaEventDestroy(done);
    if (!to_dev) DL_CUDA_CHECK(cudaStreamSynchronize(cs)); // host memory is read next
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
    DL_CUDA_CHECK(cudaEventRecord((cudaEvent_t)e, 0));
    return 0;
}

int rt_event_synchronize(void *e) {
    DL_CUDA_CHECK(cudaEventSynchronize((cudaEvent_t)e));
    return 0;
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

const dl_cuda_runtime runtime_table = {
    rt_device_count,      rt_set_device,    rt_current_device,  rt_synchronize, rt_allocated,
    rt_reserved,          rt_peak,          rt_reset_peak,      rt_empty_cache, rt_host_alloc,
    rt_host_free,         rt_copy_async,    rt_event_new,       rt_event_free,  rt_event_record,
    rt_event_synchronize, rt_event_elapsed, rt_dtype_supported,
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
