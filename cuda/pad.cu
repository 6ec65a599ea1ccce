// pad.cu - CUDA kernels of the pad family (see src/kernels/pad.h): reflect,
// replicate and circular padding as a gather through per-dimension index maps
// (forward) and the matching scatter-add (backward), as src/cpu/pad.c.
//
// Invariants: the op layer built and checked the maps (every entry in range),
// so kernels trust them, and made the device current; the maps are copied to the device per call
// and freed (stream-ordered) before the entry point returns; loops are grid-stride over int64
// element numbers; the gather moves elements as unsigned integers of their size (one kernel per
// size serves every dtype); the scatter adds with atomics, so sums of repeated positions may differ
// from the CPU's in float rounding.
#include "index.cuh"

extern "C" {
#include "kernels/pad.h"
}

namespace {

using dl_idx::by_size;
using dl_idx::kThreads;

// --- kernels -----------------------------------------------------------------------------

// The three sizes of a pad buffer (outer, D2, D1, D0), passed by value.
struct PadShape {
    int64_t o[3], i[3];
};

// The input element that output element i reads through the maps (m holds
// m0, then m1, then m2).
__device__ inline int64_t pad_source(const PadShape &p, const int64_t *m, int64_t i) {
    const int64_t *m0 = m, *m1 = m0 + p.o[0], *m2 = m1 + p.o[1];
    int64_t c = i % p.o[0], r = i / p.o[0];
    int64_t b = r % p.o[1], r2 = r / p.o[1];
    int64_t a = r2 % p.o[2], s = r2 / p.o[2];
    return ((s * p.i[2] + m2[a]) * p.i[1] + m1[b]) * p.i[0] + m0[c];
}

// out (outer, o2, o1, o0) = in (outer, i2, i1, i0) through maps m0, m1, m2
template <typename W>
__global__ void pad_gather_kernel(W *out, const W *in, const int64_t *m, PadShape p, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        out[i] = in[pad_source(p, m, i)];
}

// gin (outer, i2, i1, i0, zeroed) += gout (outer, o2, o1, o0) at the mapped places.
template <typename T>
__global__ void pad_scatter_kernel(T *gin, const T *gout, const int64_t *m, PadShape p, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        atomicAdd(&gin[pad_source(p, m, i)], gout[i]);
}

// --- launchers -------------------------------------------------------------------------------

// The three maps in one device buffer (m0, then m1, then m2); NULL + error.
int64_t *maps_to_device(const dl_pad_shape *s) {
    // a CUDA graph would replay the copy from host memory freed by then
    if (dl_cuda_refuse_in_capture("pad (its index maps come from host memory)")) return nullptr;
    size_t total = (size_t)(s->osz[0] + s->osz[1] + s->osz[2]);
    int64_t *d = (int64_t *)dl_cuda_malloc(total * sizeof(int64_t));
    if (!d) return nullptr;
    size_t at = 0;
    for (int j = 0; j < 3; j++) {
        // pageable source: the call returns once the data is staged, so the
        // caller may free its maps right after
        cudaError_t e = cudaMemcpyAsync(d + at, s->map[j], (size_t)s->osz[j] * sizeof(int64_t),
                                        cudaMemcpyHostToDevice, dl_cuda_stream());
        if (e != cudaSuccess) {
            dl_cuda_free(d);
            dl_cuda_fail("cudaMemcpyAsync (pad maps)", cudaGetErrorString(e), __FILE__, __LINE__);
            return nullptr;
        }
        at += (size_t)s->osz[j];
    }
    return d;
}

PadShape pad_shape(const dl_pad_shape *s) {
    PadShape p;
    for (int j = 0; j < 3; j++) {
        p.o[j] = s->osz[j];
        p.i[j] = s->isz[j];
    }
    return p;
}

// Queues launch(m, p, n, blocks, stream) over the n output elements of s
// with its maps m copied to the device (freed after, stream-ordered).
template <typename F> int with_maps(const char *kernel, const dl_pad_shape *s, F launch) {
    int64_t n = s->outer * s->osz[0] * s->osz[1] * s->osz[2];
    if (n == 0) return 0;
    int64_t *m = maps_to_device(s);
    if (!m) return -1;
    launch(m, pad_shape(s), n, dl_cuda_blocks(n, kThreads), dl_cuda_stream());
    cudaError_t e = cudaGetLastError();
    dl_cuda_free(m);
    if (e != cudaSuccess) return dl_cuda_fail(kernel, cudaGetErrorString(e), __FILE__, __LINE__);
    return 0;
}

// --- entry points (the table) ------------------------------------------------------------

int pad_gather(dl_dtype dt, const dl_pad_shape *s, void *out, const void *in) {
    return with_maps(
        "pad_gather_kernel", s,
        [&](const int64_t *m, PadShape p, int64_t n, unsigned blocks, cudaStream_t st) {
            by_size(dl_dtype_size(dt), [&](auto w) {
                using W = decltype(w);
                pad_gather_kernel<<<blocks, kThreads, 0, st>>>((W *)out, (const W *)in, m, p, n);
            });
        });
}

int pad_scatter(dl_dtype dt, const dl_pad_shape *s, void *gin, const void *gout) {
    if (dt != DL_DTYPE_F32 && dt != DL_DTYPE_F64)
        return dl_error("pad_backward: no CUDA kernel for %s tensors", dl_dtype_name(dt));
    int64_t nin = s->outer * s->isz[0] * s->isz[1] * s->isz[2];
    if (nin > 0)
        DL_CUDA_CHECK(cudaMemsetAsync(gin, 0, (size_t)nin * dl_dtype_size(dt), dl_cuda_stream()));
    return with_maps(
        "pad_scatter_kernel", s,
        [&](const int64_t *m, PadShape p, int64_t n, unsigned blocks, cudaStream_t st) {
            if (dt == DL_DTYPE_F64)
                pad_scatter_kernel<<<blocks, kThreads, 0, st>>>((double *)gin, (const double *)gout,
                                                                m, p, n);
            else
                pad_scatter_kernel<<<blocks, kThreads, 0, st>>>((float *)gin, (const float *)gout,
                                                                m, p, n);
        });
}

} // namespace

DL_CUDA_TABLE(pad) = {
    .family = "pad",
    .pad_gather = pad_gather,
    .pad_scatter = pad_scatter,
};
