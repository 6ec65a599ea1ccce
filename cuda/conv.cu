// conv.cu - 2-D convolutions on CUDA through cuDNN (see src/kernels/conv.h):
// forward, backward data and backward filter by cuDNN's graph API
// (conv_plan.cu: cached execution plans; with dl_flags.cudnn_graph)
// or its legacy API (this file: the fallback wherever no plan runs, and the
// whole path with the switch off), the bias add and the bias gradient by two
// plain kernels of our own.
//
// Layouts: fmt 0 is contiguous NCHW tensors and OIHW filters; DL_CONV_FMT_NHWC
// with DL_CONV_FMT_W_OHWI is channels-last memory (NHWC tensors, OHWI
// filters), described to cuDNN with CUDNN_TENSOR_NHWC.  conv2d_formats picks
// channels-last when the input is, except for float64 (which cuDNN does not
// run channels-last).  Where cuDNN refuses the channels-last layout for a
// shape, the call runs on NCHW copies of the operands in scratch memory and
// copies the results back, so the caller's layout holds either way.  dtypes: float32 (FMA math
// unless dl_flags.allow_tf32, then tensor ops), float16/bfloat16 (float32 compute, tensor ops),
// float64 (double compute).
//
// Algorithms: chosen once per (device, direction, dtype, layout, shape, flags)
// and kept in a small table (round-robin replacement).  With
// dl_flags.cudnn_benchmark they come from cudnnFind*AlgorithmEx (timed, on
// the real buffers, which are outputs being overwritten anyway), otherwise
// from cudnnGet*Algorithm_v7 (heuristics).  Candidates are tried in order;
// one whose status is not success, whose workspace exceeds WS_CAP or cannot
// be allocated, whose math would use TF32 while it is off, or that cuDNN
// refuses at run time (not supported / bad param) is skipped.
// Invariants: descriptors are destroyed on every path (RAII); every cuDNN and
// CUDA call is checked; sizes cuDNN takes as int are checked first; host code
// never reads device memory.
#include "common.cuh"
#include "conv_plan.cuh"

#include <limits.h>
#include <mutex>
#include <string.h>

extern "C" {
#include "kernels/conv.h"
#include "kernels/cuda.h"
}

namespace {

const size_t WS_CAP = (size_t)1 << 30; // most workspace an algorithm may take

// --- kernels ----------------------------------------------------------------------------

// Loads and stores in the accumulation type: float for float32 and the half
// types, double for float64.
template <typename T> struct Acc {
    using type = float;
    static __device__ float load(T v) { return dl_to_float(v); }
    static __device__ T store(float v) { return dl_from_float<T>(v); }
};
template <> struct Acc<double> {
    using type = double;
    static __device__ double load(double v) { return v; }
    static __device__ double store(double v) { return v; }
};

// y (N,O,S) or, nhwc, (N,S,O) contiguous: y += b[o].  n = N*O*S.
template <typename T>
__global__ void add_bias_kernel(T *y, const T *b, int64_t n, int64_t O, int64_t S, bool nhwc) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t o = nhwc ? i % O : (i / S) % O;
        y[i] = Acc<T>::store(Acc<T>::load(y[i]) + Acc<T>::load(b[o]));
    }
}

// gb[o] = sum over n, s of gy; gy (N,O,S) or, nhwc, (N,S,O) contiguous.
// One block (BIAS_THREADS threads) per channel, summed in double.
const int BIAS_THREADS = 256;
template <typename T>
__global__ void bias_grad_kernel(T *gb, const T *gy, int64_t N, int64_t O, int64_t S, bool nhwc) {
    __shared__ double part[BIAS_THREADS];
    int64_t NS = N * S;
    for (int64_t o = blockIdx.x; o < O; o += gridDim.x) {
        double acc = 0;
        for (int64_t i = threadIdx.x; i < NS; i += BIAS_THREADS) {
            int64_t at = nhwc ? i * O + o : ((i / S) * O + o) * S + i % S;
            acc += (double)Acc<T>::load(gy[at]);
        }
        part[threadIdx.x] = acc;
        __syncthreads();
        for (int step = BIAS_THREADS / 2; step > 0; step /= 2) {
            if ((int)threadIdx.x < step) part[threadIdx.x] += part[threadIdx.x + step];
            __syncthreads();
        }
        if (threadIdx.x == 0) gb[o] = Acc<T>::store((typename Acc<T>::type)part[0]);
        __syncthreads(); // part is reused by the next channel
    }
}

// dst = src with the channel dimension moved, element bits copied: to_cl
// false reads (N,S,C) and writes (N,C,S) (channels-last to planar); true the
// reverse.  n = N*C*S.
template <typename T>
__global__ void swap_channels_kernel(T *dst, const T *src, int64_t n, int64_t C, int64_t S,
                                     bool to_cl) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        if (to_cl) { // i over (N,S,C)
            int64_t c = i % C, s = (i / C) % S, b = i / (C * S);
            dst[i] = src[(b * C + c) * S + s];
        } else { // i over (N,C,S)
            int64_t s = i % S, c = (i / S) % C, b = i / (C * S);
            dst[i] = src[(b * S + s) * C + c];
        }
    }
}

// --- launchers --------------------------------------------------------------------------

template <typename T>
int swap_channels_as(void *dst, const void *src, int64_t N, int64_t C, int64_t S, bool to_cl) {
    int64_t n = N * C * S;
    if (n == 0) return 0;
    swap_channels_kernel<T><<<dl_cuda_blocks(n, 256), 256, 0, dl_cuda_stream()>>>(
        (T *)dst, (const T *)src, n, C, S, to_cl);
    DL_CUDA_LAUNCHED();
    return 0;
}

// swap_channels_kernel for elements of dt.
int swap_channels(dl_dtype dt, void *dst, const void *src, int64_t N, int64_t C, int64_t S,
                  bool to_cl) {
    switch (dl_dtype_size(dt)) {
    case 2: return swap_channels_as<uint16_t>(dst, src, N, C, S, to_cl);
    case 4: return swap_channels_as<uint32_t>(dst, src, N, C, S, to_cl);
    case 8: return swap_channels_as<uint64_t>(dst, src, N, C, S, to_cl);
    default: return dl_error("conv2d: %s tensors are not supported on CUDA", dl_dtype_name(dt));
    }
}

template <typename T> int add_bias(T *y, const T *b, const dl_conv2d_shape *s, bool nhwc) {
    int64_t S = s->OH * s->OW, n = s->N * s->O * S;
    add_bias_kernel<T>
        <<<dl_cuda_blocks(n, 256), 256, 0, dl_cuda_stream()>>>(y, b, n, s->O, S, nhwc);
    DL_CUDA_LAUNCHED();
    return 0;
}

template <typename T> int bias_grad(T *gb, const T *gy, const dl_conv2d_shape *s, bool nhwc) {
    unsigned blocks = (unsigned)(s->O < 65535 ? s->O : 65535);
    bias_grad_kernel<T>
        <<<blocks, BIAS_THREADS, 0, dl_cuda_stream()>>>(gb, gy, s->N, s->O, s->OH * s->OW, nhwc);
    DL_CUDA_LAUNCHED();
    return 0;
}

int bias_op(dl_dtype dt, bool grad, void *out, const void *in, const dl_conv2d_shape *s,
            bool nhwc) {
    switch (dt) {
    case DL_DTYPE_F32:
        return grad ? bias_grad((float *)out, (const float *)in, s, nhwc)
                    : add_bias((float *)out, (const float *)in, s, nhwc);
    case DL_DTYPE_F64:
        return grad ? bias_grad((double *)out, (const double *)in, s, nhwc)
                    : add_bias((double *)out, (const double *)in, s, nhwc);
    case DL_DTYPE_F16:
        return grad ? bias_grad((__half *)out, (const __half *)in, s, nhwc)
                    : add_bias((__half *)out, (const __half *)in, s, nhwc);
    case DL_DTYPE_BF16:
        return grad ? bias_grad((__nv_bfloat16 *)out, (const __nv_bfloat16 *)in, s, nhwc)
                    : add_bias((__nv_bfloat16 *)out, (const __nv_bfloat16 *)in, s, nhwc);
    default: return dl_error("conv2d: %s tensors are not supported on CUDA", dl_dtype_name(dt));
    }
}

// --- descriptors ------------------------------------------------------------------------

struct Descs {
    cudnnTensorDescriptor_t x = nullptr, y = nullptr;
    cudnnFilterDescriptor_t w = nullptr;
    cudnnConvolutionDescriptor_t conv = nullptr;
    Descs() = default;
    Descs(const Descs &) = delete;
    Descs &operator=(const Descs &) = delete;
    ~Descs() {
        if (x) cudnnDestroyTensorDescriptor(x);
        if (y) cudnnDestroyTensorDescriptor(y);
        if (w) cudnnDestroyFilterDescriptor(w);
        if (conv) cudnnDestroyConvolutionDescriptor(conv);
    }
};

// The math type the descriptor starts with (and keeps, for float32 without
// TF32 and for float64).
cudnnMathType_t base_math(dl_dtype dt) {
    if (dt == DL_DTYPE_F64) return CUDNN_DEFAULT_MATH;
    if (dt == DL_DTYPE_F32) return dl_flags.allow_tf32 ? CUDNN_TENSOR_OP_MATH : CUDNN_FMA_MATH;
    return CUDNN_TENSOR_OP_MATH;
}

// Whether an algorithm reported with math type m may run, and the math type
// to run it with.
bool usable_math(dl_dtype dt, cudnnMathType_t m, cudnnMathType_t *use) {
    if (dt == DL_DTYPE_F64) {
        *use = CUDNN_DEFAULT_MATH;
        return true;
    }
    if (dt == DL_DTYPE_F32) {
        if (m == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION) return false; // would round to half
        if (!dl_flags.allow_tf32) {
            if (m == CUDNN_TENSOR_OP_MATH) return false;
            *use = CUDNN_FMA_MATH;
            return true;
        }
    }
    *use = m;
    return true;
}

int make_descs(Descs &d, const char *op, dl_dtype dt, const dl_conv2d_shape *s, bool nhwc) {
    const int64_t big = INT_MAX;
    int64_t cg = s->groups > 0 ? s->C / s->groups : 0;
    if (s->N * s->C * s->H * s->W > big || s->N * s->O * s->OH * s->OW > big ||
        s->O * cg * s->KH * s->KW > big || s->ph > big || s->pw > big || s->sh > big ||
        s->sw > big || s->dh > big || s->dw > big || s->groups > big)
        return dl_error("%s: tensors of more than 2^31 elements are not supported by cuDNN "
                        "(input [%lld, %lld, %lld, %lld], output channels %lld)",
                        op, (long long)s->N, (long long)s->C, (long long)s->H, (long long)s->W,
                        (long long)s->O);
    cudnnDataType_t data, comp = CUDNN_DATA_FLOAT;
    switch (dt) {
    case DL_DTYPE_F32: data = CUDNN_DATA_FLOAT; break;
    case DL_DTYPE_F64: data = comp = CUDNN_DATA_DOUBLE; break;
    case DL_DTYPE_F16: data = CUDNN_DATA_HALF; break;
    case DL_DTYPE_BF16: data = CUDNN_DATA_BFLOAT16; break;
    default: return dl_error("%s: %s tensors are not supported on CUDA", op, dl_dtype_name(dt));
    }
    cudnnTensorFormat_t fmt = nhwc ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW;
    DL_CUDNN_CHECK(cudnnCreateTensorDescriptor(&d.x));
    DL_CUDNN_CHECK(cudnnCreateTensorDescriptor(&d.y));
    DL_CUDNN_CHECK(cudnnCreateFilterDescriptor(&d.w));
    DL_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&d.conv));
    DL_CUDNN_CHECK(
        cudnnSetTensor4dDescriptor(d.x, fmt, data, (int)s->N, (int)s->C, (int)s->H, (int)s->W));
    DL_CUDNN_CHECK(
        cudnnSetTensor4dDescriptor(d.y, fmt, data, (int)s->N, (int)s->O, (int)s->OH, (int)s->OW));
    DL_CUDNN_CHECK(
        cudnnSetFilter4dDescriptor(d.w, data, fmt, (int)s->O, (int)cg, (int)s->KH, (int)s->KW));
    DL_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(d.conv, (int)s->ph, (int)s->pw, (int)s->sh,
                                                   (int)s->sw, (int)s->dh, (int)s->dw,
                                                   CUDNN_CROSS_CORRELATION, comp));
    DL_CUDNN_CHECK(cudnnSetConvolutionGroupCount(d.conv, (int)s->groups));
    DL_CUDNN_CHECK(cudnnSetConvolutionMathType(d.conv, base_math(dt)));
    int n = 0, c = 0, h = 0, w = 0;
    DL_CUDNN_CHECK(cudnnGetConvolution2dForwardOutputDim(d.conv, d.x, d.w, &n, &c, &h, &w));
    if (n != s->N || c != s->O || h != s->OH || w != s->OW)
        return dl_error("%s: internal error: cuDNN's output [%d, %d, %d, %d] differs from "
                        "[%lld, %lld, %lld, %lld]",
                        op, n, c, h, w, (long long)s->N, (long long)s->O, (long long)s->OH,
                        (long long)s->OW);
    return 0;
}

// --- the algorithm table ------------------------------------------------------------------

enum Dir { FWD = 0, BWD_DATA = 1, BWD_FILTER = 2 };

struct Key {
    int64_t v[20];
};

struct Entry {
    Key key;
    int algo;
    cudnnMathType_t math;
    bool used;
};

const int CACHE_SIZE = 256;
Entry g_cache[CACHE_SIZE];
int g_next = 0;
std::mutex g_mu;

Key make_key(int device, Dir dir, dl_dtype dt, const dl_conv2d_shape *s, bool nhwc) {
    Key k = {{device,
              dir,
              (int64_t)dt,
              nhwc,
              dl_flags.allow_tf32,
              dl_flags.cudnn_benchmark,
              s->N,
              s->C,
              s->H,
              s->W,
              s->O,
              s->KH,
              s->KW,
              s->sh,
              s->sw,
              s->ph,
              s->pw,
              s->dh,
              s->dw,
              s->groups}};
    return k;
}

bool cache_get(const Key &k, int *algo, cudnnMathType_t *math) {
    std::lock_guard<std::mutex> lock(g_mu);
    for (int i = 0; i < CACHE_SIZE; i++)
        if (g_cache[i].used && memcmp(&g_cache[i].key, &k, sizeof k) == 0) {
            *algo = g_cache[i].algo;
            *math = g_cache[i].math;
            return true;
        }
    return false;
}

void cache_put(const Key &k, int algo, cudnnMathType_t math) {
    std::lock_guard<std::mutex> lock(g_mu);
    g_cache[g_next] = Entry{k, algo, math, true};
    g_next = (g_next + 1) % CACHE_SIZE;
}

// Scaling factors in the compute type: double for float64, float otherwise.
struct Scale {
    double d1 = 1, d0 = 0;
    float f1 = 1, f0 = 0;
    const void *one, *zero;
    explicit Scale(dl_dtype dt) {
        one = dt == DL_DTYPE_F64 ? (const void *)&d1 : (const void *)&f1;
        zero = dt == DL_DTYPE_F64 ? (const void *)&d0 : (const void *)&f0;
    }
    Scale(const Scale &) = delete;
    Scale &operator=(const Scale &) = delete;
};

// What one cuDNN call reads and writes.  x, w, y are the forward's input,
// filter and output (y is grad_output in the backward); out is what the
// direction writes: y (forward), gx (backward data) or gw (backward filter).
struct Call {
    cudnnHandle_t h;
    const Descs *d;
    const Scale *k;
    const void *x, *w, *y;
    void *out;
};

// cuDNN's three directions behind one interface: find (timed, writes out),
// heur (heuristics), wsize and run.
template <Dir D> struct Api;
template <> struct Api<FWD> {
    using Perf = cudnnConvolutionFwdAlgoPerf_t;
    using Algo = cudnnConvolutionFwdAlgo_t;
    static const int count = CUDNN_CONVOLUTION_FWD_ALGO_COUNT;
    static constexpr const char *name = "cudnnConvolutionForward";
    static cudnnStatus_t find(const Call &c, int *got, Perf *p, void *ws, size_t n) {
        const Descs &d = *c.d;
        return cudnnFindConvolutionForwardAlgorithmEx(c.h, d.x, c.x, d.w, c.w, d.conv, d.y, c.out,
                                                      count, got, p, ws, n);
    }
    static cudnnStatus_t heur(const Call &c, int *got, Perf *p) {
        const Descs &d = *c.d;
        return cudnnGetConvolutionForwardAlgorithm_v7(c.h, d.x, d.w, d.conv, d.y, count, got, p);
    }
    static cudnnStatus_t wsize(const Call &c, int algo, size_t *n) {
        const Descs &d = *c.d;
        return cudnnGetConvolutionForwardWorkspaceSize(c.h, d.x, d.w, d.conv, d.y, (Algo)algo, n);
    }
    static cudnnStatus_t run(const Call &c, int algo, void *ws, size_t n) {
        const Descs &d = *c.d;
        return cudnnConvolutionForward(c.h, c.k->one, d.x, c.x, d.w, c.w, d.conv, (Algo)algo, ws, n,
                                       c.k->zero, d.y, c.out);
    }
};
template <> struct Api<BWD_DATA> {
    using Perf = cudnnConvolutionBwdDataAlgoPerf_t;
    using Algo = cudnnConvolutionBwdDataAlgo_t;
    static const int count = CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT;
    static constexpr const char *name = "cudnnConvolutionBackwardData";
    static cudnnStatus_t find(const Call &c, int *got, Perf *p, void *ws, size_t n) {
        const Descs &d = *c.d;
        return cudnnFindConvolutionBackwardDataAlgorithmEx(c.h, d.w, c.w, d.y, c.y, d.conv, d.x,
                                                           c.out, count, got, p, ws, n);
    }
    static cudnnStatus_t heur(const Call &c, int *got, Perf *p) {
        const Descs &d = *c.d;
        return cudnnGetConvolutionBackwardDataAlgorithm_v7(c.h, d.w, d.y, d.conv, d.x, count, got,
                                                           p);
    }
    static cudnnStatus_t wsize(const Call &c, int algo, size_t *n) {
        const Descs &d = *c.d;
        return cudnnGetConvolutionBackwardDataWorkspaceSize(c.h, d.w, d.y, d.conv, d.x, (Algo)algo,
                                                            n);
    }
    static cudnnStatus_t run(const Call &c, int algo, void *ws, size_t n) {
        const Descs &d = *c.d;
        return cudnnConvolutionBackwardData(c.h, c.k->one, d.w, c.w, d.y, c.y, d.conv, (Algo)algo,
                                            ws, n, c.k->zero, d.x, c.out);
    }
};
template <> struct Api<BWD_FILTER> {
    using Perf = cudnnConvolutionBwdFilterAlgoPerf_t;
    using Algo = cudnnConvolutionBwdFilterAlgo_t;
    static const int count = CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT;
    static constexpr const char *name = "cudnnConvolutionBackwardFilter";
    static cudnnStatus_t find(const Call &c, int *got, Perf *p, void *ws, size_t n) {
        const Descs &d = *c.d;
        return cudnnFindConvolutionBackwardFilterAlgorithmEx(c.h, d.x, c.x, d.y, c.y, d.conv, d.w,
                                                             c.out, count, got, p, ws, n);
    }
    static cudnnStatus_t heur(const Call &c, int *got, Perf *p) {
        const Descs &d = *c.d;
        return cudnnGetConvolutionBackwardFilterAlgorithm_v7(c.h, d.x, d.y, d.conv, d.w, count, got,
                                                             p);
    }
    static cudnnStatus_t wsize(const Call &c, int algo, size_t *n) {
        const Descs &d = *c.d;
        return cudnnGetConvolutionBackwardFilterWorkspaceSize(c.h, d.x, d.y, d.conv, d.w,
                                                              (Algo)algo, n);
    }
    static cudnnStatus_t run(const Call &c, int algo, void *ws, size_t n) {
        const Descs &d = *c.d;
        return cudnnConvolutionBackwardFilter(c.h, c.k->one, d.x, c.x, d.y, c.y, d.conv, (Algo)algo,
                                              ws, n, c.k->zero, d.w, c.out);
    }
};

// Statuses of an algorithm cuDNN will not run for these descriptors (the
// BAD_PARAM and NOT_SUPPORTED families): the next candidate is tried.
bool refused(cudnnStatus_t st) {
    int family = (int)st / 1000;
    return family == 2 || family == 3;
}

// A workspace for cudnnFind*Ex: the cap, or less when that much is not free.
void *find_workspace(size_t *size) {
    for (size_t n = WS_CAP; n >= ((size_t)1 << 20); n /= 8) {
        void *p = dl_cuda_workspace(n);
        if (p) {
            *size = n;
            return p;
        }
    }
    *size = 0;
    return nullptr;
}

// Runs direction D of a call: the cached algorithm, or else the first of
// cuDNN's candidates (timed or heuristic) that is usable and runs.
template <Dir D> int run_dir(const char *op, const Call &c, dl_dtype dt, const Key &key) {
    using A = Api<D>;
    cudnnConvolutionDescriptor_t conv = c.d->conv;
    int algo;
    cudnnMathType_t math;
    size_t bytes = 0;
    if (cache_get(key, &algo, &math)) {
        DL_CUDNN_CHECK(cudnnSetConvolutionMathType(conv, math));
        DL_CUDNN_CHECK(A::wsize(c, algo, &bytes));
        void *ws = bytes ? dl_cuda_workspace(bytes) : nullptr;
        if (bytes && !ws) return -1;
        DL_CUDNN_CHECK(A::run(c, algo, ws, bytes));
        return 0;
    }
    typename A::Perf perf[A::count];
    int n = 0;
    cudnnStatus_t last = CUDNN_STATUS_SUCCESS;
    if (dl_flags.cudnn_benchmark && !dl_cuda_capturing()) { // timing waits: not in a capture
        size_t fsize = 0;
        void *fws = find_workspace(&fsize);
        DL_CUDNN_CHECK(A::find(c, &n, perf, fws, fsize));
    } else {
        DL_CUDNN_CHECK(A::heur(c, &n, perf));
    }
    for (int i = 0; i < n && i < A::count; i++) {
        if (perf[i].status != CUDNN_STATUS_SUCCESS || perf[i].memory > WS_CAP) continue;
        if (!usable_math(dt, perf[i].mathType, &math)) continue;
        algo = (int)perf[i].algo;
        DL_CUDNN_CHECK(cudnnSetConvolutionMathType(conv, math));
        if (A::wsize(c, algo, &bytes) != CUDNN_STATUS_SUCCESS || bytes > WS_CAP) continue;
        void *ws = bytes ? dl_cuda_workspace(bytes) : nullptr;
        if (bytes && !ws) continue;
        cudnnStatus_t st = A::run(c, algo, ws, bytes);
        if (refused(st)) {
            last = st;
            continue;
        }
        if (st != CUDNN_STATUS_SUCCESS)
            return dl_cuda_fail(A::name, cudnnGetErrorString(st), __FILE__, __LINE__);
        cache_put(key, algo, math);
        return 0;
    }
    return dl_error("%s: cuDNN offers no usable %s algorithm for this shape (%d candidates, "
                    "%s%s%s)",
                    op, A::name, n, dl_dtype_name(dt), last ? "; last refusal: " : "",
                    last ? cudnnGetErrorString(last) : "");
}

// --- one layout, and channels-last on planar copies -------------------------------------

// Device scratch memory for one call, freed on every path (the allocator is
// stream-ordered: reuse waits for the work queued on it).
struct Scratch {
    void *p = nullptr;
    Scratch() = default;
    Scratch(const Scratch &) = delete;
    Scratch &operator=(const Scratch &) = delete;
    ~Scratch() {
        if (p) dl_cuda_free(p);
    }
    void *get(size_t n) {
        p = dl_cuda_malloc(n ? n : 1);
        return p;
    }
};

// y = conv(x, w), every operand in one layout (nhwc or planar): through the
// graph API's plans when dl_flags.cudnn_graph, else (or when no plan runs)
// through the legacy API.
int forward_in(int device, dl_dtype dt, const dl_conv2d_shape *s, bool nhwc, void *y, const void *x,
               const void *w) {
    const char *op = "conv2d";
    if (dl_flags.cudnn_graph) {
        int r = dl_cuda_conv_plan_run(DL_CONV_PLAN_FWD, dt, s, nhwc, (void *)x, (void *)w, y);
        if (r <= 0) return r;
    }
    Descs d;
    if (make_descs(d, op, dt, s, nhwc)) return -1;
    cudnnHandle_t h = dl_cuda_cudnn_on_stream();
    if (!h) return -1;
    Scale k(dt);
    Call c = {h, &d, &k, x, w, y, y};
    return run_dir<FWD>(op, c, dt, make_key(device, FWD, dt, s, nhwc));
}

// gx and gw (either may be NULL) of conv(x, w) given gy, in one layout:
// each direction as forward_in decides.
int backward_in(int device, dl_dtype dt, const dl_conv2d_shape *s, bool nhwc, void *gx, void *gw,
                const void *gy, const void *x, const void *w) {
    const char *op = "conv2d_backward";
    if (dl_flags.cudnn_graph) {
        void *vx = (void *)x, *vw = (void *)w, *vy = (void *)gy;
        if (gx) {
            int r = dl_cuda_conv_plan_run(DL_CONV_PLAN_BWD_DATA, dt, s, nhwc, gx, vw, vy);
            if (r < 0) return -1;
            if (r == 0) gx = nullptr; // done
        }
        if (gw) {
            int r = dl_cuda_conv_plan_run(DL_CONV_PLAN_BWD_FILTER, dt, s, nhwc, vx, gw, vy);
            if (r < 0) return -1;
            if (r == 0) gw = nullptr;
        }
        if (!gx && !gw) return 0;
    }
    Descs d;
    if (make_descs(d, op, dt, s, nhwc)) return -1;
    cudnnHandle_t h = dl_cuda_cudnn_on_stream();
    if (!h) return -1;
    Scale k(dt);
    Call cx = {h, &d, &k, x, w, gy, gx}, cw = {h, &d, &k, x, w, gy, gw};
    if (gx && run_dir<BWD_DATA>(op, cx, dt, make_key(device, BWD_DATA, dt, s, nhwc))) return -1;
    if (gw && run_dir<BWD_FILTER>(op, cw, dt, make_key(device, BWD_FILTER, dt, s, nhwc))) return -1;
    return 0;
}

// The sizes of one layout swap: a tensor's (N, C, S) with S its plane (or a
// filter's (O, C/groups, KH*KW)), and its bytes.
struct Dims {
    int64_t n, c, s;
    size_t bytes(dl_dtype dt) const { return (size_t)(n * c * s) * dl_dtype_size(dt); }
};
Dims input_dims(const dl_conv2d_shape *s) {
    return {s->N, s->C, s->H * s->W};
}
Dims output_dims(const dl_conv2d_shape *s) {
    return {s->N, s->O, s->OH * s->OW};
}
Dims filter_dims(const dl_conv2d_shape *s) {
    return {s->O, s->C / s->groups, s->KH * s->KW};
}

// A planar copy of the channels-last src (dims m) in scratch t.
int planar_copy(Scratch &t, dl_dtype dt, const void *src, Dims m) {
    if (!t.get(m.bytes(dt))) return -1;
    return swap_channels(dt, t.p, src, m.n, m.c, m.s, false);
}

// The channels-last forward on planar copies, y copied back channels-last.
int forward_planar(int device, dl_dtype dt, const dl_conv2d_shape *s, void *y, const void *x,
                   const void *w) {
    Scratch px, pw, py;
    Dims my = output_dims(s);
    if (planar_copy(px, dt, x, input_dims(s)) || planar_copy(pw, dt, w, filter_dims(s)) ||
        !py.get(my.bytes(dt)) || forward_in(device, dt, s, false, py.p, px.p, pw.p))
        return -1;
    return swap_channels(dt, y, py.p, my.n, my.c, my.s, true);
}

// The channels-last backward on planar copies, gx and gw copied back.
int backward_planar(int device, dl_dtype dt, const dl_conv2d_shape *s, void *gx, void *gw,
                    const void *gy, const void *x, const void *w) {
    Scratch pgy, px, pw, pgx, pgw;
    Dims mx = input_dims(s), mw = filter_dims(s);
    if (planar_copy(pgy, dt, gy, output_dims(s))) return -1;
    if (gw && (planar_copy(px, dt, x, mx) || !pgw.get(mw.bytes(dt)))) return -1;
    if (gx && (planar_copy(pw, dt, w, mw) || !pgx.get(mx.bytes(dt)))) return -1;
    if (backward_in(device, dt, s, false, pgx.p, pgw.p, pgy.p, px.p, pw.p)) return -1;
    if (gx && swap_channels(dt, gx, pgx.p, mx.n, mx.c, mx.s, true)) return -1;
    if (gw && swap_channels(dt, gw, pgw.p, mw.n, mw.c, mw.s, true)) return -1;
    return 0;
}

// Whether fmt names a layout pair cuDNN takes (NHWC and OHWI together, or
// neither); *nhwc says which.  Other bits (DL_CONV_INFERENCE) are ignored.
int check_fmt(const char *op, int fmt, bool *nhwc) {
    const int both = DL_CONV_FMT_NHWC | DL_CONV_FMT_W_OHWI;
    int f = fmt & both;
    if (f != 0 && f != both)
        return dl_error("%s: cuDNN needs the input and the weight in one layout (formats %d)", op,
                        f);
    *nhwc = f != 0;
    return 0;
}

} // namespace

// --- entry points -------------------------------------------------------------------------

int dl_cuda_conv2d_formats(dl_dtype dt, bool x_cl, bool w_cl) {
    (void)w_cl; // one cuDNN format describes the input and the filter: w follows x
    return x_cl && dt != DL_DTYPE_F64 ? DL_CONV_FMT_NHWC | DL_CONV_FMT_W_OHWI : 0;
}

// Channels-last runs as it is first; should cuDNN refuse that layout for this
// shape and dtype, on planar copies (same values, the caller's layout).
int dl_cuda_conv2d_forward(dl_dtype dt, const dl_conv2d_shape *s, int fmt, int post, void *y,
                           const void *x, const void *w, const void *b) {
    const char *op = "conv2d";
    bool nhwc = false;
    if (post) return dl_error("%s: fused post-ops are not implemented on CUDA", op);
    if (check_fmt(op, fmt, &nhwc)) return -1;
    int device = dl_cuda_device();
    if (forward_in(device, dt, s, nhwc, y, x, w) &&
        (!nhwc || forward_planar(device, dt, s, y, x, w)))
        return -1;
    return b ? bias_op(dt, false, y, b, s, nhwc) : 0;
}

int dl_cuda_conv2d_backward(dl_dtype dt, const dl_conv2d_shape *s, int fmt, void *gx, void *gw,
                            void *gb, const void *gy, const void *x, const void *w) {
    const char *op = "conv2d_backward";
    bool nhwc = false;
    if (check_fmt(op, fmt, &nhwc)) return -1;
    int device = dl_cuda_device();
    if ((gx || gw) && backward_in(device, dt, s, nhwc, gx, gw, gy, x, w) &&
        (!nhwc || backward_planar(device, dt, s, gx, gw, gy, x, w)))
        return -1;
    return gb ? bias_op(dt, true, gb, gy, s, nhwc) : 0;
}

DL_CUDA_TABLE(conv) = {
    .family = "conv",
    .conv2d_formats = dl_cuda_conv2d_formats,
    .conv2d_forward = dl_cuda_conv2d_forward,
    .conv2d_backward = dl_cuda_conv2d_backward,
    .plan_stats = dl_cuda_conv_plan_stats,
};
