// graph.cu - CUDA graphs (dl.cuda.CUDAGraph): capture the work queued between
// capture_begin and capture_end on the current device into a graph, replay it
// with one launch.  The runtime table's graph_* entries (kernels/cuda.h).
//
// Capture runs on the device's capture stream (runtime.cu), which is the
// compute stream meanwhile, in relaxed mode: what must not happen during a
// capture (a host synchronisation, a non_blocking copy, an event record) is
// refused by the runtime with an error naming it, and memory comes from the
// graph's private pool, so the addresses the graph replays stay the graph's
// until it is freed.  Replays go on the legacy stream, in order with all other
// work.  Invariants: at most one capture runs per device; every CUDA call is
// checked; a failed capture leaves no capture state behind.
#include "common.cuh"

#include <stdlib.h>

extern "C" {
#include "kernels/cuda.h"
}

namespace {

struct Graph {
    int device = -1;
    int pool = 0; // private pool id, 0 when none
    bool capturing = false;
    cudaStream_t stream = nullptr; // the capture stream while capturing
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
};

// Switches to device d for the lifetime of the guard.
struct DeviceGuard {
    int prev = -1;
    explicit DeviceGuard(int d) {
        if (cudaGetDevice(&prev) != cudaSuccess) {
            cudaGetLastError();
            prev = -1;
        }
        if (d >= 0 && d != prev) cudaSetDevice(d);
    }
    ~DeviceGuard() {
        int now = -1;
        if (cudaGetDevice(&now) == cudaSuccess && prev >= 0 && now != prev) cudaSetDevice(prev);
        cudaGetLastError();
    }
};

// Drops what g holds: the executable graph, the graph, its pool.
void clear(Graph *g) {
    if (g->exec) cudaGraphExecDestroy(g->exec); // a replay in flight finishes first
    if (g->graph) cudaGraphDestroy(g->graph);
    cudaGetLastError();
    g->exec = nullptr;
    g->graph = nullptr;
    if (g->pool) dl_cuda_pool_release(g->device, g->pool);
    g->pool = 0;
}

// Ends g's capture, keeping the graph in *out (NULL when the capture was
// invalidated, with the error in the return value).
cudaError_t stop_capture(Graph *g, cudaGraph_t *out) {
    *out = nullptr;
    cudaError_t e = cudaStreamEndCapture(g->stream, out);
    dl_cuda_capture_leave(g->device);
    g->capturing = false;
    return e;
}

} // namespace

void *dl_cuda_graph_new(void) {
    Graph *g = (Graph *)calloc(1, sizeof(Graph));
    if (!g) {
        dl_error("CUDAGraph: out of host memory");
        return nullptr;
    }
    *g = Graph();
    return g;
}

void dl_cuda_graph_free(void *p) {
    Graph *g = (Graph *)p;
    if (!g) return;
    DeviceGuard guard(g->device);
    if (g->capturing) {
        cudaGraph_t dropped;
        if (stop_capture(g, &dropped) == cudaSuccess && dropped) cudaGraphDestroy(dropped);
        cudaGetLastError();
    }
    clear(g);
    free(g);
}

int dl_cuda_graph_capture_begin(void *p) {
    Graph *g = (Graph *)p;
    if (g->capturing) return dl_error("CUDAGraph.capture_begin: this graph is capturing already");
    if (g->exec)
        return dl_error("CUDAGraph.capture_begin: this graph holds a capture already (reset() "
                        "it first)");
    if (dl_cuda_capturing())
        return dl_error("CUDAGraph.capture_begin: another graph is capturing on this device");
    clear(g);
    int d = dl_cuda_device();
    cudaStream_t s = dl_cuda_capture_stream(d);
    if (!s) return -1;
    int pool = dl_cuda_capture_enter(d, s);
    if (pool < 0) return -1;
    g->device = d;
    g->pool = pool;
    g->stream = s;
    cudaError_t e = cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed);
    if (e != cudaSuccess) {
        dl_cuda_capture_leave(d);
        clear(g);
        return dl_cuda_fail("cudaStreamBeginCapture", cudaGetErrorString(e), __FILE__, __LINE__);
    }
    g->capturing = true;
    return 0;
}

int dl_cuda_graph_capture_end(void *p) {
    Graph *g = (Graph *)p;
    if (!g->capturing) return dl_error("CUDAGraph.capture_end: this graph is not capturing");
    DeviceGuard guard(g->device);
    cudaGraph_t graph = nullptr;
    cudaError_t e = stop_capture(g, &graph);
    if (e != cudaSuccess || !graph) {
        if (graph) cudaGraphDestroy(graph);
        cudaGetLastError();
        clear(g);
        return dl_error(
            "CUDAGraph.capture_end: the capture failed (%s): something in the "
            "captured function cannot be captured",
            cudaGetErrorString(e != cudaSuccess ? e : cudaErrorStreamCaptureInvalidated));
    }
    g->graph = graph;
    e = cudaGraphInstantiate(&g->exec, graph, 0);
    if (e != cudaSuccess) {
        g->exec = nullptr;
        cudaGetLastError();
        clear(g);
        return dl_cuda_fail("cudaGraphInstantiate", cudaGetErrorString(e), __FILE__, __LINE__);
    }
    e = cudaGraphUpload(g->exec, 0); // the first replay then costs no more than the others
    if (e != cudaSuccess) {
        cudaGetLastError();
        clear(g);
        return dl_cuda_fail("cudaGraphUpload", cudaGetErrorString(e), __FILE__, __LINE__);
    }
    return 0;
}

int dl_cuda_graph_replay(void *p) {
    Graph *g = (Graph *)p;
    if (g->capturing) return dl_error("CUDAGraph.replay: the graph is still capturing");
    if (!g->exec) return dl_error("CUDAGraph.replay: nothing captured (call capture_begin first)");
    if (dl_cuda_refuse_in_capture("CUDAGraph.replay")) return -1;
    DeviceGuard guard(g->device);
    DL_CUDA_CHECK(cudaGraphLaunch(g->exec, 0));
    return 0;
}
