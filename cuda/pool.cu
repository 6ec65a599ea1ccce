// pool.cu - CUDA 2-D pooling: max (with indices), average, adaptive average
// and adaptive max, forward and backward (the pool family's table, src/kernels/pool.h, ends this
// file).
//
// The window rules are the CPU's (src/cpu/pool.c), line for line:
//  - max: rows h0 + k*dh (h0 = oh*sh - ph) inside [0, H); the maximum starts
//    at -inf with the first valid position as its index; a value wins if it
//    is greater or NaN; an index is ih*W + iw within the plane.
//  - avg: rows [oh*sh - ph, min(that + kh, H + ph)) give the padded window
//    size; clipped to [0, H) they give the summed rows and the unpadded size.
//  - adaptive: rows [floor(i*H/OH), ceil((i+1)*H/OH)).
// Sums run in the element type in the CPU loops' order, so forward results
// are the CPU loops' bit for bit.  The average backwards gather (one thread
// per input element, visiting its windows in the CPU's (oh, ow) order: no
// atomics, deterministic); the max backward scatters with atomicAdd (a
// position may be the maximum of several windows; only the order of those
// few additions may differ from the CPU's); an index that is not in the
// plane is skipped and reported at the next synchronisation
// (dl_cuda_rt->check_first_bad), so the backward never waits for the GPU.
//
// Element types: float and double (the op layer computes half inputs in
// float32, as on the CPU).  Buffers are contiguous: x, gx (P,H,W); y, gy,
// ind (P,OH,OW).  Sizes were validated by the op layer.
//
// Max pooling of channels-last data has kernels of its own (the _nhwc entry
// points): x, gx (N,H,W,C), y, gy, ind (N,OH,OW,C), in the data's dtype
// (float, double, half, bfloat16; comparisons and sums in float, double for
// double), one thread per element with the channel fastest (coalesced).  Its
// backward gathers instead of scattering: each input element visits the
// windows that can hold it in (oh, ow) order and sums the gy whose index
// names it -- the CPU's order, so float32 results are its bit for bit; no
// atomics, and no index check (so no wait for the device).
#include "common.cuh"

#include <math.h>

extern "C" {
#include "kernels/cuda.h"
#include "kernels/pool.h"
}

namespace {

const int kThreads = 256;

// --- window arithmetic (shared by host checks and kernels) ------------------------------

__device__ inline int64_t min64(int64_t a, int64_t b) {
    return a < b ? a : b;
}
__device__ inline int64_t max64(int64_t a, int64_t b) {
    return a > b ? a : b;
}

// Adaptive window bounds: [floor(i*in/out), ceil((i+1)*in/out)).
__device__ inline int64_t adaptive_start(int64_t i, int64_t out, int64_t in) {
    return (i / out) * in + ((i % out) * in) / out;
}
__device__ inline int64_t adaptive_end(int64_t i, int64_t out, int64_t in) {
    return 1 + ((i + 1) * in - 1) / out;
}

// The window of average-pooling output (oh, ow): summed rows [h0, h1),
// columns [w0, w1), and its divisor.
__device__ inline int64_t avg_window(const dl_pool2d_shape &s, int64_t oh, int64_t ow, int64_t *h0,
                                     int64_t *h1, int64_t *w0, int64_t *w1) {
    int64_t hs = oh * s.sh - s.ph, ws = ow * s.sw - s.pw;
    int64_t he = min64(hs + s.kh, s.H + s.ph), we = min64(ws + s.kw, s.W + s.pw);
    int64_t padded = (he - hs) * (we - ws);
    *h0 = max64(hs, 0);
    *w0 = max64(ws, 0);
    *h1 = min64(he, s.H);
    *w1 = min64(we, s.W);
    if (s.divisor_override) return s.divisor_override;
    return s.count_include_pad ? padded : (*h1 - *h0) * (*w1 - *w0);
}

// Max over rows/columns [hs, he) x [ws, we) stepping (dh, dw) of plane xp
// (W wide): value to *y, position to *ind.
template <typename T>
__device__ inline void window_max(const T *xp, int64_t W, int64_t hs, int64_t he, int64_t dh,
                                  int64_t ws, int64_t we, int64_t dw, T *y, int64_t *ind) {
    T best = -INFINITY;
    int64_t bi = hs * W + ws;
    for (int64_t ih = hs; ih < he; ih += dh)
        for (int64_t iw = ws; iw < we; iw += dw) {
            T v = xp[ih * W + iw];
            if (v > best || isnan(v)) {
                best = v;
                bi = ih * W + iw;
            }
        }
    *y = best;
    *ind = bi;
}

// The sum of xp[ih][iw] over [h0, h1) x [w0, w1), row by row.
template <typename T>
__device__ inline T window_sum(const T *xp, int64_t W, int64_t h0, int64_t h1, int64_t w0,
                               int64_t w1) {
    T sum = 0;
    for (int64_t ih = h0; ih < h1; ih++)
        for (int64_t iw = w0; iw < w1; iw++) sum += xp[ih * W + iw];
    return sum;
}

// --- kernels ----------------------------------------------------------------------------

// y, ind (P,OH,OW) from x (P,H,W); one thread per output.
template <typename T>
__global__ void max_pool_fwd(T *y, int64_t *ind, const T *x, dl_pool2d_shape s) {
    int64_t n = s.P * s.OH * s.OW;
    for (int64_t o = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; o < n;
         o += (int64_t)gridDim.x * blockDim.x) {
        int64_t ow = o % s.OW, r = o / s.OW, oh = r % s.OH, p = r / s.OH;
        int64_t h0 = oh * s.sh - s.ph, w0 = ow * s.sw - s.pw;
        int64_t hs = h0, he = min64(h0 + (s.kh - 1) * s.dh + 1, s.H);
        int64_t ws = w0, we = min64(w0 + (s.kw - 1) * s.dw + 1, s.W);
        while (hs < 0) hs += s.dh;
        while (ws < 0) ws += s.dw;
        window_max(x + p * s.H * s.W, s.W, hs, he, s.dh, ws, we, s.dw, &y[o], &ind[o]);
    }
}

// Adaptive max: as max_pool_fwd with the adaptive windows.
template <typename T>
__global__ void adaptive_max_fwd(T *y, int64_t *ind, const T *x, dl_pool2d_shape s) {
    int64_t n = s.P * s.OH * s.OW;
    for (int64_t o = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; o < n;
         o += (int64_t)gridDim.x * blockDim.x) {
        int64_t ow = o % s.OW, r = o / s.OW, oh = r % s.OH, p = r / s.OH;
        int64_t h0 = adaptive_start(oh, s.OH, s.H), h1 = adaptive_end(oh, s.OH, s.H);
        int64_t w0 = adaptive_start(ow, s.OW, s.W), w1 = adaptive_end(ow, s.OW, s.W);
        window_max(x + p * s.H * s.W, s.W, h0, h1, 1, w0, w1, 1, &y[o], &ind[o]);
    }
}

// gx (P,HW) += gy (P,OHW) at ind (P,OHW) (gx zeroed before); an index outside
// [0, HW) is skipped, the first one's position kept in *first_bad (n before).
template <typename T>
__global__ void scatter_add(T *gx, const T *gy, const int64_t *ind, int64_t P, int64_t HW,
                            int64_t OHW, long long *first_bad) {
    int64_t n = P * OHW;
    for (int64_t j = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; j < n;
         j += (int64_t)gridDim.x * blockDim.x) {
        int64_t i = ind[j];
        if (i < 0 || i >= HW) {
            atomicMin(first_bad, (long long)j);
            continue;
        }
        atomicAdd(&gx[(j / OHW) * HW + i], gy[j]);
    }
}

__global__ void set_ll_kernel(long long *p, long long v) {
    *p = v;
}

// y (P,OH,OW) = window averages of x (P,H,W); one thread per output.
template <typename T> __global__ void avg_pool_fwd(T *y, const T *x, dl_pool2d_shape s) {
    int64_t n = s.P * s.OH * s.OW;
    for (int64_t o = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; o < n;
         o += (int64_t)gridDim.x * blockDim.x) {
        int64_t ow = o % s.OW, r = o / s.OW, oh = r % s.OH, p = r / s.OH;
        int64_t h0, h1, w0, w1;
        int64_t div = avg_window(s, oh, ow, &h0, &h1, &w0, &w1);
        if (h0 >= h1 || w0 >= w1) {
            y[o] = 0;
            continue;
        }
        y[o] = window_sum(x + p * s.H * s.W, s.W, h0, h1, w0, w1) / (T)div;
    }
}

// gx (P,H,W) from gy (P,OH,OW): one thread per input element sums gy/div
// over the windows holding it, in (oh, ow) order.  Candidate windows: those
// whose unclipped rows [oh*sh - ph, oh*sh - ph + kh) reach ih; each is then
// checked against its exact (clipped) window.
template <typename T> __global__ void avg_pool_backward(T *gx, const T *gy, dl_pool2d_shape s) {
    int64_t n = s.P * s.H * s.W;
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < n;
         e += (int64_t)gridDim.x * blockDim.x) {
        int64_t iw = e % s.W, r = e / s.W, ih = r % s.H, p = r / s.H;
        int64_t ah = ih + s.ph - s.kh + 1, aw = iw + s.pw - s.kw + 1;
        int64_t ohs = ah <= 0 ? 0 : (ah + s.sh - 1) / s.sh;
        int64_t ows = aw <= 0 ? 0 : (aw + s.sw - 1) / s.sw;
        int64_t ohe = min64(s.OH - 1, (ih + s.ph) / s.sh);
        int64_t owe = min64(s.OW - 1, (iw + s.pw) / s.sw);
        const T *g = gy + p * s.OH * s.OW;
        T acc = 0;
        for (int64_t oh = ohs; oh <= ohe; oh++)
            for (int64_t ow = ows; ow <= owe; ow++) {
                int64_t h0, h1, w0, w1;
                int64_t div = avg_window(s, oh, ow, &h0, &h1, &w0, &w1);
                if (ih < h0 || ih >= h1 || iw < w0 || iw >= w1) continue;
                acc += g[oh * s.OW + ow] / (T)div;
            }
        gx[e] = acc;
    }
}

// y (P,OH,OW): adaptive window averages (divided by rows, then columns).
template <typename T> __global__ void adaptive_avg_fwd(T *y, const T *x, dl_pool2d_shape s) {
    int64_t n = s.P * s.OH * s.OW;
    for (int64_t o = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; o < n;
         o += (int64_t)gridDim.x * blockDim.x) {
        int64_t ow = o % s.OW, r = o / s.OW, oh = r % s.OH, p = r / s.OH;
        int64_t h0 = adaptive_start(oh, s.OH, s.H), h1 = adaptive_end(oh, s.OH, s.H);
        int64_t w0 = adaptive_start(ow, s.OW, s.W), w1 = adaptive_end(ow, s.OW, s.W);
        T sum = window_sum(x + p * s.H * s.W, s.W, h0, h1, w0, w1);
        y[o] = sum / (T)(h1 - h0) / (T)(w1 - w0);
    }
}

// gx (P,H,W) from gy (P,OH,OW), gathering as avg_pool_backward.  Windows holding
// row ih lie within oh in [ih*OH/H - 1, ceil((ih+1)*OH/H)] (then checked).
template <typename T> __global__ void adaptive_avg_backward(T *gx, const T *gy, dl_pool2d_shape s) {
    int64_t n = s.P * s.H * s.W;
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < n;
         e += (int64_t)gridDim.x * blockDim.x) {
        int64_t iw = e % s.W, r = e / s.W, ih = r % s.H, p = r / s.H;
        int64_t ohs = max64(0, ih * s.OH / s.H - 1), ows = max64(0, iw * s.OW / s.W - 1);
        int64_t ohe = min64(s.OH, ((ih + 1) * s.OH + s.H - 1) / s.H + 1);
        int64_t owe = min64(s.OW, ((iw + 1) * s.OW + s.W - 1) / s.W + 1);
        const T *g = gy + p * s.OH * s.OW;
        T acc = 0;
        for (int64_t oh = ohs; oh < ohe; oh++) {
            int64_t h0 = adaptive_start(oh, s.OH, s.H), h1 = adaptive_end(oh, s.OH, s.H);
            if (ih < h0 || ih >= h1) continue;
            for (int64_t ow = ows; ow < owe; ow++) {
                int64_t w0 = adaptive_start(ow, s.OW, s.W), w1 = adaptive_end(ow, s.OW, s.W);
                if (iw < w0 || iw >= w1) continue;
                acc += g[oh * s.OW + ow] / (T)(h1 - h0) / (T)(w1 - w0);
            }
        }
        gx[e] = acc;
    }
}

// --- channels-last max pooling in the data's dtype ------------------------------------

// float for float and the half types, double for double
template <typename T> struct Acc { using type = float; };
template <> struct Acc<double> { using type = double; };

template <typename T> __device__ inline typename Acc<T>::type to_acc(T v) {
    return (typename Acc<T>::type)dl_to_float(v);
}
template <> __device__ inline double to_acc<double>(double v) {
    return v;
}
template <typename T> __device__ inline T from_acc(typename Acc<T>::type v) {
    return dl_from_float<T>(v);
}
template <> __device__ inline double from_acc<double>(double v) {
    return v;
}

// y, ind (N,OH,OW,C) from x (N,H,W,C); N = s.P / s.C.  The window rule of
// max_pool_fwd.
template <typename T>
__global__ void max_pool_fwd_nhwc(T *y, int64_t *ind, const T *x, dl_pool2d_shape s) {
    using A = typename Acc<T>::type;
    int64_t C = s.C, n_out = s.P * s.OH * s.OW; // P = N*C
    for (int64_t o = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; o < n_out;
         o += (int64_t)gridDim.x * blockDim.x) {
        int64_t c = o % C, r = o / C, ow = r % s.OW;
        r /= s.OW;
        int64_t oh = r % s.OH, n = r / s.OH;
        int64_t h0 = oh * s.sh - s.ph, w0 = ow * s.sw - s.pw;
        int64_t hs = h0, he = min64(h0 + (s.kh - 1) * s.dh + 1, s.H);
        int64_t ws = w0, we = min64(w0 + (s.kw - 1) * s.dw + 1, s.W);
        while (hs < 0) hs += s.dh;
        while (ws < 0) ws += s.dw;
        const T *xp = x + n * s.H * s.W * C + c;
        A best = -INFINITY;
        int64_t bi = hs * s.W + ws;
        for (int64_t ih = hs; ih < he; ih += s.dh)
            for (int64_t iw = ws; iw < we; iw += s.dw) {
                A v = to_acc(xp[(ih * s.W + iw) * C]);
                if (v > best || isnan(v)) {
                    best = v;
                    bi = ih * s.W + iw;
                }
            }
        y[o] = from_acc<T>(best);
        ind[o] = bi;
    }
}

// gx (N,H,W,C) from gy, ind (N,OH,OW,C): one thread per input element.
// Candidate windows: those whose span [oh*sh - ph, oh*sh - ph + (kh-1)*dh]
// reaches ih (likewise columns); the index decides.
template <typename T>
__global__ void max_pool_bwd_nhwc(T *gx, const T *gy, const int64_t *ind, dl_pool2d_shape s) {
    using A = typename Acc<T>::type;
    int64_t C = s.C, n_in = (s.P / C) * s.H * s.W * C;
    int64_t span_h = (s.kh - 1) * s.dh + 1, span_w = (s.kw - 1) * s.dw + 1;
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < n_in;
         e += (int64_t)gridDim.x * blockDim.x) {
        int64_t c = e % C, r = e / C, iw = r % s.W;
        r /= s.W;
        int64_t ih = r % s.H, n = r / s.H;
        int64_t ah = ih + s.ph - span_h + 1, aw = iw + s.pw - span_w + 1;
        int64_t ohs = ah <= 0 ? 0 : (ah + s.sh - 1) / s.sh;
        int64_t ows = aw <= 0 ? 0 : (aw + s.sw - 1) / s.sw;
        int64_t ohe = min64(s.OH - 1, (ih + s.ph) / s.sh);
        int64_t owe = min64(s.OW - 1, (iw + s.pw) / s.sw);
        int64_t pos = ih * s.W + iw, base = n * s.OH * s.OW * C + c;
        A acc = 0;
        for (int64_t oh = ohs; oh <= ohe; oh++)
            for (int64_t ow = ows; ow <= owe; ow++) {
                int64_t k = base + (oh * s.OW + ow) * C;
                if (ind[k] == pos) acc += to_acc(gy[k]);
            }
        gx[e] = from_acc<T>(acc);
    }
}

// --- launchers --------------------------------------------------------------------------

// The op layer's validation, repeated where a kernel would otherwise index
// out of bounds or divide by zero.
int check_pool(const char *op, const dl_pool2d_shape *s, bool adaptive) {
    bool ok = s->P >= 0 && s->H >= 1 && s->W >= 1 && s->OH >= 0 && s->OW >= 0;
    if (!adaptive)
        ok = ok && s->kh >= 1 && s->kw >= 1 && s->sh >= 1 && s->sw >= 1 && s->dh >= 1 &&
             s->dw >= 1 && s->ph >= 0 && s->pw >= 0;
    if (!ok)
        return dl_error("%s: bad CUDA pooling geometry (planes %lld, input %lldx%lld, output "
                        "%lldx%lld)",
                        op, (long long)s->P, (long long)s->H, (long long)s->W, (long long)s->OH,
                        (long long)s->OW);
    return 0;
}

int no_kernel(const char *op, dl_dtype dt) {
    return dl_error("%s: no CUDA kernel for %s", op, dl_dtype_name(dt));
}

// Launches KERNEL<float> or KERNEL<double> over n threads' worth of work.
#define POOL_LAUNCH(op, dt, n, KERNEL, ...)                                                        \
    do {                                                                                           \
        unsigned nb_ = dl_cuda_blocks((n), kThreads);                                              \
        if ((dt) == DL_DTYPE_F32) {                                                                \
            typedef float T;                                                                       \
            KERNEL<T><<<nb_, kThreads, 0, dl_cuda_stream()>>>(__VA_ARGS__);                        \
        } else if ((dt) == DL_DTYPE_F64) {                                                         \
            typedef double T;                                                                      \
            KERNEL<T><<<nb_, kThreads, 0, dl_cuda_stream()>>>(__VA_ARGS__);                        \
        } else {                                                                                   \
            return no_kernel(op, dt);                                                              \
        }                                                                                          \
        DL_CUDA_LAUNCHED();                                                                        \
    } while (0)

} // namespace

// --- entry points ---------------------------------------------------------------------

int dl_cuda_max_pool2d_forward(dl_dtype dt, const dl_pool2d_shape *s, void *y, int64_t *ind,
                               const void *x) {
    if (check_pool("max_pool2d", s, false)) return -1;
    int64_t n = s->P * s->OH * s->OW;
    if (n == 0) return 0;
    POOL_LAUNCH("max_pool2d", dt, n, max_pool_fwd, (T *)y, ind, (const T *)x, *s);
    return 0;
}

int dl_cuda_adaptive_max_pool2d_forward(dl_dtype dt, const dl_pool2d_shape *s, void *y,
                                        int64_t *ind, const void *x) {
    if (check_pool("adaptive_max_pool2d", s, true)) return -1;
    int64_t n = s->P * s->OH * s->OW;
    if (n == 0) return 0;
    POOL_LAUNCH("adaptive_max_pool2d", dt, n, adaptive_max_fwd, (T *)y, ind, (const T *)x, *s);
    return 0;
}

int dl_cuda_pool2d_scatter_backward(dl_dtype dt, int64_t P, int64_t HW, int64_t OHW, void *gx,
                                    const void *gy, const int64_t *ind) {
    const char *op = "max_pool2d_backward";
    if (dt != DL_DTYPE_F32 && dt != DL_DTYPE_F64) return no_kernel(op, dt);
    if (P < 0 || HW < 0 || OHW < 0)
        return dl_error("%s: bad sizes (planes %lld, input %lld, output %lld)", op, (long long)P,
                        (long long)HW, (long long)OHW);
    cudaStream_t st = dl_cuda_stream();
    size_t esz = dt == DL_DTYPE_F32 ? sizeof(float) : sizeof(double);
    if (P * HW > 0) DL_CUDA_CHECK(cudaMemsetAsync(gx, 0, (size_t)(P * HW) * esz, st));
    int64_t n = P * OHW;
    if (n == 0 || HW == 0) return 0;
    // a bad index is skipped and reported at the next synchronisation
    long long *first_bad = (long long *)dl_cuda_malloc(sizeof *first_bad);
    if (!first_bad) return -1;
    set_ll_kernel<<<1, 1, 0, st>>>(first_bad, (long long)n);
    cudaError_t e = cudaGetLastError();
    if (e == cudaSuccess) {
        unsigned nb = dl_cuda_blocks(n, kThreads);
        if (dt == DL_DTYPE_F32)
            scatter_add<float><<<nb, kThreads, 0, st>>>((float *)gx, (const float *)gy, ind, P, HW,
                                                        OHW, first_bad);
        else
            scatter_add<double><<<nb, kThreads, 0, st>>>((double *)gx, (const double *)gy, ind, P,
                                                         HW, OHW, first_bad);
        e = cudaGetLastError();
    }
    int rc = e != cudaSuccess
                 ? dl_cuda_fail("scatter_add", cudaGetErrorString(e), __FILE__, __LINE__)
                 : dl_cuda_rt->check_first_bad(op, DL_CHECK_POOL_INDEX, (const int64_t *)first_bad,
                                               ind, n, HW, 0);
    dl_cuda_free(first_bad); // stream-ordered: after the kernels that use it
    return rc;
}

int dl_cuda_avg_pool2d_forward(dl_dtype dt, const dl_pool2d_shape *s, void *y, const void *x) {
    if (check_pool("avg_pool2d", s, false)) return -1;
    int64_t n = s->P * s->OH * s->OW;
    if (n == 0) return 0;
    POOL_LAUNCH("avg_pool2d", dt, n, avg_pool_fwd, (T *)y, (const T *)x, *s);
    return 0;
}

int dl_cuda_avg_pool2d_backward(dl_dtype dt, const dl_pool2d_shape *s, void *gx, const void *gy) {
    if (check_pool("avg_pool2d_backward", s, false)) return -1;
    int64_t n = s->P * s->H * s->W;
    if (n == 0) return 0;
    POOL_LAUNCH("avg_pool2d_backward", dt, n, avg_pool_backward, (T *)gx, (const T *)gy, *s);
    return 0;
}

int dl_cuda_adaptive_avg_pool2d_forward(dl_dtype dt, const dl_pool2d_shape *s, void *y,
                                        const void *x) {
    if (check_pool("adaptive_avg_pool2d", s, true)) return -1;
    int64_t n = s->P * s->OH * s->OW;
    if (n == 0) return 0;
    POOL_LAUNCH("adaptive_avg_pool2d", dt, n, adaptive_avg_fwd, (T *)y, (const T *)x, *s);
    return 0;
}

int dl_cuda_adaptive_avg_pool2d_backward(dl_dtype dt, const dl_pool2d_shape *s, void *gx,
                                         const void *gy) {
    if (check_pool("adaptive_avg_pool2d_backward", s, true)) return -1;
    int64_t n = s->P * s->H * s->W;
    if (n == 0) return 0;
    POOL_LAUNCH("adaptive_avg_pool2d_backward", dt, n, adaptive_avg_backward, (T *)gx,
                (const T *)gy, *s);
    return 0;
}

// Launches KERNEL<T> for the four data dtypes of the channels-last kernels.
#define NHWC_LAUNCH(op, dt, n, KERNEL, ...)                                                        \
    do {                                                                                           \
        unsigned nb_ = dl_cuda_blocks((n), kThreads);                                              \
        cudaStream_t st_ = dl_cuda_stream();                                                       \
        switch (dt) {                                                                              \
        case DL_DTYPE_F32: {                                                                       \
            typedef float T;                                                                       \
            KERNEL<T><<<nb_, kThreads, 0, st_>>>(__VA_ARGS__);                                     \
            break;                                                                                 \
        }                                                                                          \
        case DL_DTYPE_F64: {                                                                       \
            typedef double T;                                                                      \
            KERNEL<T><<<nb_, kThreads, 0, st_>>>(__VA_ARGS__);                                     \
            break;                                                                                 \
        }                                                                                          \
        case DL_DTYPE_F16: {                                                                       \
            typedef __half T;                                                                      \
            KERNEL<T><<<nb_, kThreads, 0, st_>>>(__VA_ARGS__);                                     \
            break;                                                                                 \
        }                                                                                          \
        case DL_DTYPE_BF16: {                                                                      \
            typedef __nv_bfloat16 T;                                                               \
            KERNEL<T><<<nb_, kThreads, 0, st_>>>(__VA_ARGS__);                                     \
            break;                                                                                 \
        }                                                                                          \
        default: return no_kernel(op, dt);                                                         \
        }                                                                                          \
        DL_CUDA_LAUNCHED();                                                                        \
    } while (0)

// The channels-last geometry the kernels rely on (C divides P).
static int check_nhwc(const char *op, const dl_pool2d_shape *s) {
    if (check_pool(op, s, false)) return -1;
    if (s->C < 1 || s->P % s->C != 0)
        return dl_error("%s: bad channels-last geometry (planes %lld, channels %lld)", op,
                        (long long)s->P, (long long)s->C);
    return 0;
}

int dl_cuda_max_pool2d_forward_nhwc(dl_dtype dt, const dl_pool2d_shape *s, void *y, int64_t *ind,
                                    const void *x) {
    if (check_nhwc("max_pool2d", s)) return -1;
    int64_t n = s->P * s->OH * s->OW;
    if (n == 0) return 0;
    NHWC_LAUNCH("max_pool2d", dt, n, max_pool_fwd_nhwc, (T *)y, ind, (const T *)x, *s);
    return 0;
}

int dl_cuda_max_pool2d_backward_nhwc(dl_dtype dt, const dl_pool2d_shape *s, void *gx,
                                     const void *gy, const int64_t *ind) {
    if (check_nhwc("max_pool2d_backward", s)) return -1;
    int64_t n = s->P * s->H * s->W;
    if (n == 0) return 0;
    NHWC_LAUNCH("max_pool2d_backward", dt, n, max_pool_bwd_nhwc, (T *)gx, (const T *)gy, ind, *s);
    return 0;
}

DL_CUDA_TABLE(pool) = {
    .family = "pool",
    .max_pool2d_forward = dl_cuda_max_pool2d_forward,
    .pool2d_scatter_backward = dl_cuda_pool2d_scatter_backward,
    .avg_pool2d_forward = dl_cuda_avg_pool2d_forward,
    .avg_pool2d_backward = dl_cuda_avg_pool2d_backward,
    .adaptive_avg_pool2d_forward = dl_cuda_adaptive_avg_pool2d_forward,
    .adaptive_avg_pool2d_backward = dl_cuda_adaptive_avg_pool2d_backward,
    .adaptive_max_pool2d_forward = dl_cuda_adaptive_max_pool2d_forward,
    .max_pool2d_forward_nhwc = dl_cuda_max_pool2d_forward_nhwc,
    .max_pool2d_backward_nhwc = dl_cuda_max_pool2d_backward_nhwc,
};
