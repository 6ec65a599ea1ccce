// optim.cu - CUDA kernels of the fused optimizer steps (src/ops/optim.c; the
// formulas are in src/cpu/optim.h).  The optim family's table
// (src/kernels/optim.h) ends this file.
//
// One launch per step over all parameters (multi-tensor): the host lists
// every parameter (its device pointers, length and per-parameter scalars)
// and cuts them into chunks of kChunk elements; the list and the chunks go
// to the device in one copy, and each CUDA block walks chunks (grid-stride),
// its threads striding through the chunk's elements.
//
// Invariants: float32 only, contiguous tensors of one device (checked by the
// op and again here); every operation is an explicitly rounded intrinsic
// (__fmul_rn, __fadd_rn, __fdiv_rn, __fsqrt_rn) in the order of
// src/cpu/optim.c, so no fused multiply-add changes a bit and the result
// equals the CPU's (and the Lua optimizer's).  The host never reads device
// memory; the scratch list is freed (stream-ordered) right after the launch.
#include "common.cuh"

extern "C" {
#include "kernels/cuda.h"
#include "kernels/optim.h"
}

#include <stdlib.h>

namespace {

const int kThreads = 256;
const int64_t kChunk = 65536;

// One parameter: device pointers (NULL where unused) and its scalars.
struct ParamArgs {
    float *p;       // (n,)
    const float *g; // (n,)
    float *buf;     // (n,) SGD momentum buffer or NULL
    float *m;       // (n,) Adam exp_avg
    float *v;       // (n,) Adam exp_avg_sq
    float *mx;      // (n,) Adam max_exp_avg_sq or NULL
    int64_t n;
    int fresh;
    float neg_step_size, bc2_sqrt;
};

// Elements [start, end) of parameter t.
struct Chunk {
    int64_t t, start, end;
};

struct SgdScalars {
    float neg_lr, mom, omd, wd;
    int use_wd, use_mom, nesterov, maximize;
};

struct AdamScalars {
    float b1, omb1, b2, omb2, eps, wd, decay;
    int decoupled, use_wd, amsgrad, maximize;
};

// --- kernels --------------------------------------------------------------------------------

__global__ void sgd_kernel(const ParamArgs *args, const Chunk *chunks, int64_t nchunks,
                           SgdScalars c) {
    for (int64_t k = blockIdx.x; k < nchunks; k += gridDim.x) {
        const Chunk ch = chunks[k];
        const ParamArgs a = args[ch.t];
        for (int64_t i = ch.start + threadIdx.x; i < ch.end; i += blockDim.x) {
            float d = c.maximize ? -a.g[i] : a.g[i];
            if (c.use_wd) d = __fadd_rn(d, __fmul_rn(c.wd, a.p[i]));
            if (c.use_mom) {
                float b = a.fresh ? d : __fadd_rn(__fmul_rn(a.buf[i], c.mom), __fmul_rn(c.omd, d));
                a.buf[i] = b;
                d = c.nesterov ? __fadd_rn(d, __fmul_rn(c.mom, b)) : b;
            }
            a.p[i] = __fadd_rn(a.p[i], __fmul_rn(c.neg_lr, d));
        }
    }
}

// PyTorch's maximum: NaN wins.
__device__ inline float max_nan(float x, float y) {
    return x != x ? x : y != y ? y : x < y ? y : x;
}

__global__ void adam_kernel(const ParamArgs *args, const Chunk *chunks, int64_t nchunks,
                            AdamScalars c) {
    for (int64_t k = blockIdx.x; k < nchunks; k += gridDim.x) {
        const Chunk ch = chunks[k];
        const ParamArgs a = args[ch.t];
        for (int64_t i = ch.start + threadIdx.x; i < ch.end; i += blockDim.x) {
            float g = c.maximize ? -a.g[i] : a.g[i], p = a.p[i];
            if (c.decoupled)
                p = __fmul_rn(p, c.decay);
            else if (c.use_wd)
                g = __fadd_rn(g, __fmul_rn(c.wd, p));
            float m = __fadd_rn(__fmul_rn(a.m[i], c.b1), __fmul_rn(c.omb1, g));
            float v = __fadd_rn(__fmul_rn(a.v[i], c.b2), __fmul_rn(__fmul_rn(g, c.omb2), g));
            a.m[i] = m;
            a.v[i] = v;
            float s = v;
            if (c.amsgrad) {
                s = max_nan(a.mx[i], v);
                a.mx[i] = s;
            }
            float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(s), a.bc2_sqrt), c.eps);
            a.p[i] = __fadd_rn(p, __fdiv_rn(__fmul_rn(m, a.neg_step_size), denom));
        }
    }
}

// --- launchers ------------------------------------------------------------------------------

float *f32(dl_tensor *t) {
    return t ? (float *)dl_tensor_data_ptr(t) : NULL;
}

// Checks the tensors of one parameter against ts->param (the op checked them
// already; a mismatch here would write out of bounds, so check again).
int check_one(const char *op, int k, const dl_optim_tensors *ts, bool adam, bool amsgrad,
              bool momentum) {
    dl_tensor *p = ts->param;
    dl_tensor *all[5] = {ts->grad, momentum ? ts->buf : NULL, adam ? ts->exp_avg : NULL,
                         adam ? ts->exp_avg_sq : NULL, amsgrad ? ts->max_exp_avg_sq : NULL};
    bool need[5] = {true, momentum, adam, adam, amsgrad};
    dl_device dp = dl_tensor_device(p);
    if (dp.type != DL_DEVICE_CUDA || p->dtype != DL_DTYPE_F32 || !dl_tensor_is_contiguous(p))
        return dl_error("%s (cuda): parameter %d must be a contiguous float32 CUDA tensor", op,
                        k + 1);
    for (int j = 0; j < 5; j++) {
        if (!need[j]) continue;
        dl_tensor *t = all[j];
        if (!t) return dl_error("%s (cuda): parameter %d lacks a state tensor", op, k + 1);
        dl_device d = dl_tensor_device(t);
        if (d.type != dp.type || d.index != dp.index || t->dtype != DL_DTYPE_F32 ||
            !dl_tensor_is_contiguous(t) || dl_tensor_numel(t) != dl_tensor_numel(p))
            return dl_error("%s (cuda): a tensor of parameter %d is not a contiguous float32 "
                            "tensor of the parameter's size on its device",
                            op, k + 1);
    }
    return 0;
}

// Builds the parameter list and chunks of n parameters, copies them to the
// device and sets *dargs, *dchunks (one allocation: free *dargs) and *nchunks.
int upload(const char *op, int n, const dl_optim_tensors *ts, bool adam, bool amsgrad,
           bool momentum, ParamArgs **dargs, Chunk **dchunks, int64_t *nchunks) {
    *dargs = NULL;
    *dchunks = NULL;
    *nchunks = 0;
    int64_t nc = 0;
    for (int k = 0; k < n; k++) {
        if (check_one(op, k, &ts[k], adam, amsgrad, momentum)) return -1;
        nc += (dl_tensor_numel(ts[k].param) + kChunk - 1) / kChunk;
    }
    if (nc == 0) return 0;
    size_t args_bytes = (size_t)n * sizeof(ParamArgs),
           bytes = args_bytes + (size_t)nc * sizeof(Chunk);
    char *host = (char *)malloc(bytes);
    if (!host) return dl_error("%s (cuda): out of host memory for %d parameters", op, n);
    ParamArgs *ha = (ParamArgs *)host;
    Chunk *hc = (Chunk *)(host + args_bytes);
    int64_t c = 0;
    for (int k = 0; k < n; k++) {
        const dl_optim_tensors *t = &ts[k];
        int64_t len = dl_tensor_numel(t->param);
        ha[k] = ParamArgs{f32(t->param),
                          f32(t->grad),
                          momentum ? f32(t->buf) : NULL,
                          adam ? f32(t->exp_avg) : NULL,
                          adam ? f32(t->exp_avg_sq) : NULL,
                          amsgrad ? f32(t->max_exp_avg_sq) : NULL,
                          len,
                          t->fresh,
                          (float)t->neg_step_size,
                          (float)t->bc2_sqrt};
        for (int64_t s = 0; s < len; s += kChunk)
            hc[c++] = Chunk{k, s, s + kChunk < len ? s + kChunk : len};
    }
    char *dev = (char *)dl_cuda_malloc(bytes);
    if (!dev) {
        free(host);
        return -1;
    }
    // pageable source: the call returns once the bytes are staged, so host may go
    cudaError_t e = cudaMemcpyAsync(dev, host, bytes, cudaMemcpyHostToDevice, dl_cuda_stream());
    free(host);
    if (e != cudaSuccess) {
        dl_cuda_free(dev);
        return dl_cuda_fail("cudaMemcpyAsync(optimizer parameter list)", cudaGetErrorString(e),
                            __FILE__, __LINE__);
    }
    *dargs = (ParamArgs *)dev;
    *dchunks = (Chunk *)(dev + args_bytes);
    *nchunks = nc;
    return 0;
}

unsigned chunk_blocks(int64_t nchunks) {
    return (unsigned)(nchunks < 65535LL * 32 ? nchunks : 65535LL * 32);
}

// Checks and uploads the n parameters, launches kernel over their chunks and
// frees the list (stream-ordered).
template <typename S>
int run_step(const char *op, void (*kernel)(const ParamArgs *, const Chunk *, int64_t, S), int n,
             const dl_optim_tensors *ts, bool adam, bool amsgrad, bool momentum, S s) {
    if (n <= 0) return 0;
    if (check_one(op, 0, &ts[0], adam, amsgrad, momentum) || dl_cuda_use(ts[0].param)) return -1;
    ParamArgs *args;
    Chunk *chunks;
    int64_t nchunks;
    if (upload(op, n, ts, adam, amsgrad, momentum, &args, &chunks, &nchunks)) return -1;
    if (nchunks == 0) return 0;
    kernel<<<chunk_blocks(nchunks), kThreads, 0, dl_cuda_stream()>>>(args, chunks, nchunks, s);
    cudaError_t e = cudaGetLastError();
    dl_cuda_free(args);
    if (e != cudaSuccess) return dl_cuda_fail(op, cudaGetErrorString(e), __FILE__, __LINE__);
    return 0;
}

} // namespace

int dl_cuda_sgd_step(int n, const dl_optim_tensors *ts, const dl_sgd_coeffs *c) {
    bool momentum = c->momentum != 0;
    SgdScalars s = {(float)c->neg_lr,
                    (float)c->momentum,
                    (float)c->one_minus_damp,
                    (float)c->weight_decay,
                    c->weight_decay != 0,
                    momentum,
                    c->nesterov,
                    c->maximize};
    return run_step("sgd_step", sgd_kernel, n, ts, false, false, momentum, s);
}

int dl_cuda_adam_step(int n, const dl_optim_tensors *ts, const dl_adam_coeffs *c) {
    bool amsgrad = c->amsgrad != 0;
    AdamScalars s = {(float)c->beta1,      (float)c->one_minus_beta1,
                     (float)c->beta2,      (float)c->one_minus_beta2,
                     (float)c->eps,        (float)c->weight_decay,
                     (float)c->decay,      c->decoupled,
                     c->weight_decay != 0, amsgrad,
                     c->maximize};
    return run_step("adam_step", adam_kernel, n, ts, true, amsgrad, false, s);
}

extern const dl_cuda_optim_kernels dl_cuda_optim_table;
const dl_cuda_optim_kernels dl_cuda_optim_table = {
    .family = "optim",
    .sgd_step = dl_cuda_sgd_step,
    .adam_step = dl_cuda_adam_step,
};
