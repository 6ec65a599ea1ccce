// clipgrad.cu - CUDA kernels of the clipgrad family and its table (see
// src/kernels/clipgrad.h; src/cpu/clipgrad.c is the reference).
//
// Multi-tensor launches: up to kMax buffers travel in the kernel's
// arguments (a Batch), blockIdx.y picks the buffer and blockIdx.x strides
// over its chunks of kChunk elements, so a list of many small gradients
// costs a launch per kMax of them, never one per tensor, and nothing is
// copied to the device first.  The norm writes one partial (double) per
// chunk into a scratch array numbered across the whole list; a single block
// then adds them in a fixed order and writes the total in its dtype (for
// norm_type 0 a block per batch first counts the buffers that hold a
// non-zero, PyTorch's 0-norm of the buffers' 0-norms).  The
// scaling reads that total on the device and computes PyTorch's coefficient
// in every thread: the host never waits.
//
// Invariants: buffers are contiguous and on the current device (the op layer
// checked); every launch is checked; scratch is freed right after its last
// kernel is queued.
#include "common.cuh"

extern "C" {
#include "kernels/clipgrad.h"
#include "kernels/cuda.h"
}

namespace {

constexpr int kMax = 48; // buffers per launch
constexpr int kThreads = 256;
constexpr int64_t kChunk = 65536; // elements per partial of the norm

struct Batch {
    void *data[kMax];
    int64_t n[kMax];
    int64_t part0[kMax]; // the partial slot of each buffer's first chunk
    int dt[kMax];
    int count;
};

__device__ inline double elem(const void *p, int dt, int64_t i) {
    switch (dt) {
    case DL_DTYPE_F64: return ((const double *)p)[i];
    case DL_DTYPE_F16: return __half2float(((const __half *)p)[i]);
    case DL_DTYPE_BF16: return __bfloat162float(((const __nv_bfloat16 *)p)[i]);
    default: return ((const float *)p)[i];
    }
}

__device__ inline void set_elem(void *p, int dt, int64_t i, double v) {
    switch (dt) {
    case DL_DTYPE_F64: ((double *)p)[i] = v; break;
    case DL_DTYPE_F16: ((__half *)p)[i] = __float2half_rn((float)v); break;
    case DL_DTYPE_BF16: ((__nv_bfloat16 *)p)[i] = __float2bfloat16_rn((float)v); break;
    default: ((float *)p)[i] = (float)v; break;
    }
}

// sign > 0: NaN-keeping max, < 0: min, 0: sum
__device__ inline double combine(double a, double b, int sign) {
    if (sign == 0) return a + b;
    return (sign > 0 ? b > a : b < a) || b != b ? b : a;
}

// the part of |x| that the p-norm accumulates
__device__ inline double term(double a, double p, int sign) {
    if (sign) return a;
    if (p == 2) return a * a;
    if (p == 1) return a;
    if (p == 0) return a != 0;
    return pow(a, p);
}

// v combined over the block in a fixed tree; thread 0 gets the result.
__device__ double block_combine(double v, int sign) {
    __shared__ double sh[kThreads];
    sh[threadIdx.x] = v;
    __syncthreads();
    for (int w = kThreads / 2; w > 0; w >>= 1) {
        if ((int)threadIdx.x < w)
            sh[threadIdx.x] = combine(sh[threadIdx.x], sh[threadIdx.x + w], sign);
        __syncthreads();
    }
    double r = sh[0];
    __syncthreads();
    return r;
}

// part[b.part0[t] + c] = chunk c of buffer t's share of the norm.
__global__ void norm_partials(Batch b, double *part, double p, int sign) {
    int t = blockIdx.y;
    int64_t n = b.n[t], chunks = (n + kChunk - 1) / kChunk;
    for (int64_t c = blockIdx.x; c < chunks; c += gridDim.x) {
        int64_t s = c * kChunk, e = s + kChunk < n ? s + kChunk : n;
        double acc = sign < 0 ? INFINITY : 0;
        for (int64_t i = s + threadIdx.x; i < e; i += kThreads)
            acc = combine(acc, term(fabs(elem(b.data[t], b.dt[t], i)), p, sign), sign);
        acc = block_combine(acc, sign);
        if (threadIdx.x == 0) part[b.part0[t] + c] = acc;
    }
}

// *out (dtype out_dt) = the norm from the C partials (one block).
__global__ void norm_total(void *out, int out_dt, const double *part, int64_t C, double p,
                           int sign) {
    double acc = sign < 0 ? INFINITY : 0;
    for (int64_t c = threadIdx.x; c < C; c += kThreads) acc = combine(acc, part[c], sign);
    acc = block_combine(acc, sign);
    if (threadIdx.x == 0) {
        if (sign < 0 && C == 0) acc = 0;
        double total = sign || p == 1 || p == 0 ? acc : p == 2 ? sqrt(acc) : pow(acc, 1 / p);
        set_elem(out, out_dt, 0, total);
    }
}

// norm_type 0: *slot = how many buffers of the batch have a non-zero count
// among their chunks' partials (one block).
__global__ void zero_norm_batch(Batch b, const double *part, double *slot) {
    double cnt = 0;
    for (int t = threadIdx.x; t < b.count; t += kThreads) {
        int64_t chunks = (b.n[t] + kChunk - 1) / kChunk;
        double s = 0;
        for (int64_t c = 0; c < chunks; c++) s += part[b.part0[t] + c];
        cnt += s != 0;
    }
    cnt = block_combine(cnt, 0);
    if (threadIdx.x == 0) *slot = cnt;
}

// op 0: x *= PyTorch's coefficient from *total; op 1: x = clamp(x, -a, a)
__global__ void update(Batch b, int op, const void *total, int total_dt, double a) {
    int t = blockIdx.y;
    double coef = 0;
    if (op == 0) {
        double tn = elem(total, total_dt, 0);
        coef = total_dt == DL_DTYPE_F64 ? 1.0 / (tn + 1e-6) * a
                                        : (double)((float)(1.0f / ((float)tn + 1e-6f)) * (float)a);
        coef = coef < 1 ? coef : 1;
    }
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < b.n[t];
         i += (int64_t)gridDim.x * blockDim.x) {
        double v = elem(b.data[t], b.dt[t], i);
        if (op == 0)
            v = b.dt[t] == DL_DTYPE_F64 ? v * coef : (double)((float)v * (float)coef);
        else
            v = v < -a ? -a : v > a ? a : v;
        set_elem(b.data[t], b.dt[t], i, v);
    }
}

// --- launchers --------------------------------------------------------------------------

// Calls f(batch, largest buffer) for each run of up to kMax buffers; part0
// numbers the chunks across the whole list.  Returns the first failure.
template <typename F> int for_batches(int n, const dl_mt_tensor *ts, F f) {
    int64_t slot = 0;
    for (int i0 = 0; i0 < n; i0 += kMax) {
        Batch b = {};
        int64_t most = 0;
        b.count = n - i0 < kMax ? n - i0 : kMax;
        for (int k = 0; k < b.count; k++) {
            const dl_mt_tensor &t = ts[i0 + k];
            b.data[k] = t.data;
            b.n[k] = t.n;
            b.dt[k] = (int)t.dt;
            b.part0[k] = slot;
            slot += (t.n + kChunk - 1) / kChunk;
            most = t.n > most ? t.n : most;
        }
        if (f(b, most)) return -1;
    }
    return 0;
}

int sign_of(double p) {
    return isinf(p) ? (p > 0 ? 1 : -1) : 0;
}

} // namespace

// --- entry points ---------------------------------------------------------------------

static int cg_total_norm(int n, const dl_mt_tensor *ts, double p, void *out, dl_dtype out_dt) {
    int64_t C = 0;
    for (int i = 0; i < n; i++) C += (ts[i].n + kChunk - 1) / kChunk;
    double *part = (double *)dl_cuda_malloc(sizeof(double) * (size_t)(C > 0 ? C : 1));
    if (!part) return -1;
    cudaStream_t st = dl_cuda_stream();
    int sign = sign_of(p);
    int rc = for_batches(n, ts, [&](const Batch &b, int64_t most) {
        int64_t chunks = (most + kChunk - 1) / kChunk;
        dim3 grid((unsigned)(chunks < 1024 ? chunks : 1024), (unsigned)b.count);
        norm_partials<<<grid, kThreads, 0, st>>>(b, part, p, sign);
        return DL_CUDA_LAUNCH_STATUS();
    });
    double *sums = part; // what norm_total adds: the chunks' partials, or for
    int64_t nsums = C;   // norm_type 0 the batches' counts of non-zero buffers
    double *slots = nullptr;
    if (rc == 0 && p == 0) {
        int64_t nb = (n + kMax - 1) / kMax, k = 0;
        if (!(slots = (double *)dl_cuda_malloc(sizeof(double) * (size_t)(nb > 0 ? nb : 1)))) {
            rc = -1;
        } else {
            rc = for_batches(n, ts, [&](const Batch &b, int64_t) {
                zero_norm_batch<<<1, kThreads, 0, st>>>(b, part, slots + k++);
                return DL_CUDA_LAUNCH_STATUS();
            });
            sums = slots;
            nsums = nb;
        }
    }
    if (rc == 0) {
        norm_total<<<1, kThreads, 0, st>>>(out, (int)out_dt, sums, nsums, p, sign);
        rc = DL_CUDA_LAUNCH_STATUS();
    }
    dl_cuda_free(slots);
    dl_cuda_free(part);
    return rc;
}

static int cg_update(int n, const dl_mt_tensor *ts, int op, const void *total, dl_dtype total_dt,
                     double a) {
    cudaStream_t st = dl_cuda_stream();
    return for_batches(n, ts, [&](const Batch &b, int64_t most) {
        dim3 grid(dl_cuda_blocks(most, kThreads) < 4096 ? dl_cuda_blocks(most, kThreads) : 4096,
                  (unsigned)b.count);
        update<<<grid, kThreads, 0, st>>>(b, op, total, (int)total_dt, a);
        return DL_CUDA_LAUNCH_STATUS();
    });
}

static int cg_scale_by_norm(int n, const dl_mt_tensor *ts, const void *total, dl_dtype total_dt,
                            double max_norm) {
    return cg_update(n, ts, 0, total, total_dt, max_norm);
}

static int cg_clamp(int n, const dl_mt_tensor *ts, double v) {
    return cg_update(n, ts, 1, nullptr, DL_DTYPE_F32, v);
}

DL_CUDA_TABLE(clipgrad) = {
    .family = "clipgrad",
    .total_norm = cg_total_norm,
    .scale_by_norm = cg_scale_by_norm,
    .clamp = cg_clamp,
};
