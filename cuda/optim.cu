// optim.cu - CUDA kernels of the fused optimizer steps (src/ops/optim.c; the
// formulas are in src/cpu/optim.h).  The optim family's table
// (src/kernels/optim.h) ends this file.
//
// Multi-tensor launches: up to kMaxParams parameters per launch, their device
// pointers, lengths and per-parameter scalars passed by value in the kernel's
// arguments (a ParamList of about 2.5 KB), so a step allocates nothing, copies
// nothing from the host and can be captured in a CUDA graph.  Each parameter
// is cut into chunks of kChunk elements; each CUDA block walks chunks
// (grid-stride), finds its parameter among the list's chunk offsets and its
// threads stride through the chunk's elements.
//
// Device scalars: with c->lr the learning rate is read from device memory (a
// captured step then follows the value set before each replay), and with
// c->skip a true flag on the device leaves every tensor unchanged (GradScaler
// skipping a step whose gradients are not finite, without the host reading
// the flag).
//
// Invariants: float32 only, contiguous tensors of one device (checked by the
// op and again here); every operation is an explicitly rounded intrinsic
// (__fmul_rn, __fadd_rn, __fdiv_rn, __fsqrt_rn) in the order of
// src/cpu/optim.c, so no fused multiply-add changes a bit and the result
// equals the CPU's (and the Lua optimizer's).  The host never reads device
// memory.
#include "common.cuh"

extern "C" {
#include "kernels/cuda.h"
#include "kernels/optim.h"
}

#include <string.h>

namespace {

const int kThreads = 256;
const int64_t kChunk = 65536;
const int kMaxParams = 32; // parameters per launch (the list is passed by value)

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

// The parameters of one launch: parameter t owns chunks [first[t], first[t+1]).
struct ParamList {
    ParamArgs a[kMaxParams];
    int64_t first[kMaxParams + 1];
    int count;
};

struct SgdScalars {
    float neg_lr, mom, omd, wd;
    int use_wd, use_mom, nesterov, maximize;
    const float *lr;  // device learning rate, or NULL (neg_lr holds it)
    const bool *skip; // device flag: true leaves everything unchanged; or NULL
};

struct AdamScalars {
    float b1, omb1, b2, omb2, eps, wd, decay;
    int decoupled, use_wd, amsgrad, maximize;
};

// Chunk k of a list: its parameter *t and elements [*start, *end).
__device__ inline void chunk_of(const ParamList &L, int64_t k, int *t, int64_t *start,
                                int64_t *end) {
    int i = 0;
    while (i + 1 < L.count && L.first[i + 1] <= k) i++;
    *t = i;
    *start = (k - L.first[i]) * kChunk;
    int64_t e = *start + kChunk;
    *end = e < L.a[i].n ? e : L.a[i].n;
}

// --- kernels --------------------------------------------------------------------------------

// f(a, i) for each element i of each chunk this block owns (grid-stride over
// the chunks, block-stride within one), a the chunk's tensor.
template <class F> __device__ void for_each_element(const ParamList &L, F f) {
    const int64_t nchunks = L.first[L.count];
    for (int64_t k = blockIdx.x; k < nchunks; k += gridDim.x) {
        int t;
        int64_t start, end;
        chunk_of(L, k, &t, &start, &end);
        const ParamArgs a = L.a[t];
        for (int64_t i = start + threadIdx.x; i < end; i += blockDim.x) f(a, i);
    }
}

__global__ void sgd_kernel(const ParamList L, SgdScalars c) {
    if (c.skip && *c.skip) return;
    const float neg_lr = c.lr ? -*c.lr : c.neg_lr;
    for_each_element(L, [&](const ParamArgs &a, int64_t i) {
        float d = c.maximize ? -a.g[i] : a.g[i];
        if (c.use_wd) d = __fadd_rn(d, __fmul_rn(c.wd, a.p[i]));
        if (c.use_mom) {
            float b = a.fresh ? d : __fadd_rn(__fmul_rn(a.buf[i], c.mom), __fmul_rn(c.omd, d));
            a.buf[i] = b;
            d = c.nesterov ? __fadd_rn(d, __fmul_rn(c.mom, b)) : b;
        }
        a.p[i] = __fadd_rn(a.p[i], __fmul_rn(neg_lr, d));
    });
}

// PyTorch's maximum: NaN wins.
__device__ inline float max_nan(float x, float y) {
    return x != x ? x : y != y ? y : x < y ? y : x;
}

__global__ void adam_kernel(const ParamList L, AdamScalars c) {
    for_each_element(L, [&](const ParamArgs &a, int64_t i) {
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
    });
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

// Parameter k's entry of a list.
ParamArgs param_args(const dl_optim_tensors *t, bool adam, bool amsgrad, bool momentum) {
    return ParamArgs{f32(t->param),
                     f32(t->grad),
                     momentum ? f32(t->buf) : NULL,
                     adam ? f32(t->exp_avg) : NULL,
                     adam ? f32(t->exp_avg_sq) : NULL,
                     amsgrad ? f32(t->max_exp_avg_sq) : NULL,
                     dl_tensor_numel(t->param),
                     t->fresh,
                     (float)t->neg_step_size,
                     (float)t->bc2_sqrt};
}

unsigned chunk_blocks(int64_t nchunks) {
    return (unsigned)(nchunks < 65535LL * 32 ? nchunks : 65535LL * 32);
}

// Checks the n parameters, then launches kernel over them, kMaxParams at a
// time (parameters without elements are left out).
template <typename S>
int run_step(const char *op, void (*kernel)(const ParamList, S), int n, const dl_optim_tensors *ts,
             bool adam, bool amsgrad, bool momentum, S s) {
    if (n <= 0) return 0;
    for (int k = 0; k < n; k++)
        if (check_one(op, k, &ts[k], adam, amsgrad, momentum)) return -1;
    if (dl_cuda_use(ts[0].param)) return -1;
    ParamList L;
    memset(&L, 0, sizeof L);
    int k = 0;
    while (k < n) {
        L.count = 0;
        L.first[0] = 0;
        for (; k < n && L.count < kMaxParams; k++) {
            int64_t len = dl_tensor_numel(ts[k].param);
            if (len == 0) continue;
            L.a[L.count] = param_args(&ts[k], adam, amsgrad, momentum);
            L.first[L.count + 1] = L.first[L.count] + (len + kChunk - 1) / kChunk;
            L.count++;
        }
        if (L.count == 0) continue;
        kernel<<<chunk_blocks(L.first[L.count]), kThreads, 0, dl_cuda_stream()>>>(L, s);
        cudaError_t e = cudaGetLastError();
        if (e != cudaSuccess) return dl_cuda_fail(op, cudaGetErrorString(e), __FILE__, __LINE__);
    }
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
                    c->maximize,
                    c->lr,
                    c->skip};
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

DL_CUDA_TABLE(optim) = {
    .family = "optim",
    .sgd_step = dl_cuda_sgd_step,
    .adam_step = dl_cuda_adam_step,
};
