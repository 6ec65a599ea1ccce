// rnn.cu - CUDA kernels of the rnn family: one LSTM or GRU layer in one
// direction, forward and backward through time (the layout, gates and
// workspace are in src/kernels/rnn.h; the algorithm is src/cpu/rnn.c's).
// The rnn family's table ends this file.
//
// The GEMMs are cuBLAS's through the linalg table's entry (cuda/linalg.cu):
// all time steps' input projections at once, then per step the hidden
// projection of the active rows; a kernel per step applies the gates (a
// thread per (row, unit), all G gates of that unit).  The backward runs the
// steps in the opposite order, a kernel per step for the gates' gradients
// and a GEMM carrying them to the previous hidden state, then the big GEMMs
// for dx, the weights and (a row of ones times the rows) the biases.
//
// Invariants: everything is queued on the device's compute stream, scratch
// comes from the caching allocator and is freed once the last kernel using
// it is queued; every CUDA call and launch is checked; batch_sizes is read on
// the host only.  float32 and float64 (templates on the element type).
#include "common.cuh"

#include <stdlib.h>

extern "C" {
#include "kernels/linalg.h"
#include "kernels/rnn.h"
}

extern const dl_cuda_linalg_kernels dl_cuda_linalg_table;

namespace {

constexpr int THREADS = 256;

__device__ inline float sigm(float v) {
    return 1.0f / (1.0f + expf(-v));
}
__device__ inline double sigm(double v) {
    return 1.0 / (1.0 + exp(-v));
}
__device__ inline float th(float v) {
    return tanhf(v);
}
__device__ inline double th(double v) {
    return tanh(v);
}

// --- kernels ------------------------------------------------------------------------------

// rows (n, len): every row a copy of v (len)
template <typename T>
__global__ void fill_rows_kernel(T *rows, const T *v, int64_t n, int64_t len) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n * len;
         i += (int64_t)gridDim.x * blockDim.x)
        rows[i] = v[i % len];
}

template <typename T> __global__ void fill_kernel(T *p, int64_t n, T v) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        p[i] = v;
}

// One step's rows, a thread per (b, j), b < bs, j < H.  g: the step's
// (bs, G*H) gate rows (x projections in, activated gates out); hw: (bs, G*H)
// W_hh h + b_hh; h, c: (B, H) states (in and out); y, ex: the step's (bs, H)
// outputs and extra workspace.
template <typename T>
__global__ void lstm_fwd_kernel(T *g, const T *hw, T *h, T *c, T *y, T *ex, int64_t bs, int64_t H) {
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < bs * H;
         e += (int64_t)gridDim.x * blockDim.x) {
        int64_t b = e / H, j = e - b * H;
        T *gr = g + b * 4 * H;
        const T *hr = hw + b * 4 * H;
        T i = sigm(gr[j] + hr[j]), f = sigm(gr[H + j] + hr[H + j]);
        T gg = th(gr[2 * H + j] + hr[2 * H + j]), o = sigm(gr[3 * H + j] + hr[3 * H + j]);
        gr[j] = i;
        gr[H + j] = f;
        gr[2 * H + j] = gg;
        gr[3 * H + j] = o;
        T cv = f * c[e] + i * gg, hv = o * th(cv);
        c[e] = cv;
        ex[e] = cv;
        y[e] = hv;
        h[e] = hv;
    }
}

template <typename T>
__global__ void gru_fwd_kernel(T *g, const T *hw, T *h, T *y, T *ex, int64_t bs, int64_t H) {
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < bs * H;
         e += (int64_t)gridDim.x * blockDim.x) {
        int64_t b = e / H, j = e - b * H;
        T *gr = g + b * 3 * H;
        const T *hr = hw + b * 3 * H;
        T r = sigm(gr[j] + hr[j]), z = sigm(gr[H + j] + hr[H + j]);
        T n = th(gr[2 * H + j] + r * hr[2 * H + j]);
        gr[j] = r;
        gr[H + j] = z;
        gr[2 * H + j] = n;
        ex[e] = hr[2 * H + j];
        T v = (h[e] - n) * z + n;
        y[e] = v;
        h[e] = v;
    }
}

// The state before the step of row b: row b of the previous step's block
// (prev, rows < prev_bs) or of the initial state.
template <typename T>
__device__ inline const T *prev_row(const T *prev, int64_t prev_bs, const T *init, int64_t b,
                                    int64_t H) {
    return b < prev_bs ? prev + b * H : init + b * H;
}

// Backward of one step's rows, a thread per (b, j): as cpu/rnn.c's rows.
// dg: the step's (bs, 4H) pre-activation gradients; dh, dc: (B, H); dy, g,
// ex: the step's rows (dy may be NULL); cprev: the previous step's cell
// states (prev_bs rows) or c0.
template <typename T>
__global__ void lstm_bwd_kernel(T *dg, const T *dh, T *dc, const T *dy, const T *g, const T *ex,
                                const T *cprev, int64_t prev_bs, const T *c0, int64_t bs,
                                int64_t H) {
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < bs * H;
         e += (int64_t)gridDim.x * blockDim.x) {
        int64_t b = e / H, j = e - b * H;
        const T *gr = g + b * 4 * H;
        T *dr = dg + b * 4 * H;
        T i = gr[j], f = gr[H + j], gg = gr[2 * H + j], o = gr[3 * H + j], t = th(ex[e]);
        T d = dy ? dh[e] + dy[e] : dh[e];
        T dct = dc[e] + d * o * (1 - t * t);
        T cp = prev_row(cprev, prev_bs, c0, b, H)[j];
        dr[j] = dct * gg * i * (1 - i);
        dr[H + j] = dct * cp * f * (1 - f);
        dr[2 * H + j] = dct * i * (1 - gg * gg);
        dr[3 * H + j] = d * t * o * (1 - o);
        dc[e] = dct * f;
    }
}

template <typename T>
__global__ void gru_bwd_kernel(T *dgx, T *dgh, T *dh, const T *dy, const T *g, const T *ex,
                               const T *hprev, int64_t prev_bs, const T *h0, int64_t bs,
                               int64_t H) {
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < bs * H;
         e += (int64_t)gridDim.x * blockDim.x) {
        int64_t b = e / H, j = e - b * H;
        const T *gr = g + b * 3 * H;
        T *xr = dgx + b * 3 * H, *hr = dgh + b * 3 * H;
        T r = gr[j], z = gr[H + j], n = gr[2 * H + j];
        T d = dy ? dh[e] + dy[e] : dh[e];
        T hp = prev_row(hprev, prev_bs, h0, b, H)[j];
        T dan = d * (1 - z) * (1 - n * n);
        T dar = dan * ex[e] * r * (1 - r), daz = d * (hp - n) * z * (1 - z);
        xr[j] = hr[j] = dar;
        xr[H + j] = hr[H + j] = daz;
        xr[2 * H + j] = dan;
        hr[2 * H + j] = dan * r;
        dh[e] = d * z;
    }
}

// --- launchers ------------------------------------------------------------------------------

// out (M, N) = A (M, K) @ B (K, N) + beta * out, through the linalg table.
int mm(dl_dtype dt, int64_t M, int64_t N, int64_t K, const void *a, int64_t ars, int64_t acs,
       const void *b, int64_t brs, int64_t bcs, double beta, void *out) {
    dl_gemm_matrix A = {a, nullptr, ars, acs}, B = {b, nullptr, brs, bcs};
    return dl_cuda_linalg_table.gemm(dl_cuda_device(), dt, 1, M, N, K, 1.0, &A, &B, beta, out);
}

// Scratch of one call, freed together (stream-ordered).
struct scratch {
    void *p[8] = {};
    int used = 0;
    void *get(size_t bytes) {
        void *q = dl_cuda_malloc(bytes ? bytes : 1);
        if (q) p[used++] = q;
        return q;
    }
    ~scratch() {
        for (int i = 0; i < used; i++) dl_cuda_free(p[i]);
    }
};

int64_t step_at(const dl_rnn_shape *s, int64_t k) {
    return s->reverse ? s->T - 1 - k : k;
}

// off[t]: the first row of step t (T + 1 entries, host memory).
struct offsets {
    int64_t *off = nullptr;
    ~offsets() { free(off); }
    int make(const dl_rnn_shape *s) {
        off = (int64_t *)malloc(sizeof(int64_t) * (size_t)(s->T + 1));
        if (!off) return dl_error("rnn: out of memory");
        off[0] = 0;
        for (int64_t t = 0; t < s->T; t++) off[t + 1] = off[t] + s->batch_sizes[t];
        return 0;
    }
};

template <typename T> int fill_rows(T *rows, const T *v, int64_t n, int64_t len) {
    if (n * len == 0) return 0;
    fill_rows_kernel<T>
        <<<dl_cuda_blocks(n * len, THREADS), THREADS, 0, dl_cuda_stream()>>>(rows, v, n, len);
    DL_CUDA_LAUNCHED();
    return 0;
}

template <typename T> dl_dtype dtype_of() {
    return sizeof(T) == 8 ? DL_DTYPE_F64 : DL_DTYPE_F32;
}

template <typename T>
int forward_t(const dl_rnn_shape *s, const dl_rnn_in *in, const dl_rnn_out *out) {
    const dl_dtype dt = dtype_of<T>();
    const int64_t H = s->H, GH = dl_rnn_gates(s->mode) * H, N = s->N, B = s->B;
    const bool lstm = s->mode == DL_RNN_LSTM;
    cudaStream_t st = dl_cuda_stream();
    T *gates = (T *)out->ws, *extra = gates + N * GH;
    scratch sc;
    offsets o;
    T *hw = (T *)sc.get(sizeof(T) * (size_t)(B * GH));
    if (!hw || o.make(s)) return -1;
    if (in->b_ih && fill_rows(gates, (const T *)in->b_ih, N, GH)) return -1;
    if (mm(dt, N, GH, s->I, in->x, s->I, 1, in->w_ih, 1, s->I, in->b_ih ? 1 : 0, gates)) return -1;
    DL_CUDA_CHECK(cudaMemcpyAsync(out->hn, in->h0, sizeof(T) * (size_t)(B * H),
                                  cudaMemcpyDeviceToDevice, st));
    if (lstm)
        DL_CUDA_CHECK(cudaMemcpyAsync(out->cn, in->c0, sizeof(T) * (size_t)(B * H),
                                      cudaMemcpyDeviceToDevice, st));
    for (int64_t k = 0; k < s->T; k++) {
        const int64_t t = step_at(s, k), bs = s->batch_sizes[t], r0 = o.off[t];
        if (in->b_hh && fill_rows(hw, (const T *)in->b_hh, bs, GH)) return -1;
        if (mm(dt, bs, GH, H, out->hn, H, 1, in->w_hh, 1, H, in->b_hh ? 1 : 0, hw)) return -1;
        T *g = gates + r0 * GH, *y = (T *)out->y + r0 * H, *ex = extra + r0 * H;
        unsigned blocks = dl_cuda_blocks(bs * H, THREADS);
        if (lstm)
            lstm_fwd_kernel<T>
                <<<blocks, THREADS, 0, st>>>(g, hw, (T *)out->hn, (T *)out->cn, y, ex, bs, H);
        else
            gru_fwd_kernel<T><<<blocks, THREADS, 0, st>>>(g, hw, (T *)out->hn, y, ex, bs, H);
        DL_CUDA_LAUNCHED();
    }
    return 0;
}

// dw_hh's right operand: every row's previous hidden state.  Per step, the
// rows active at the step run before it come from y, the rest from h0.
template <typename T>
int gather_prev(T *hp, const dl_rnn_shape *s, const int64_t *off, const T *y, const T *h0) {
    const int64_t H = s->H;
    cudaStream_t st = dl_cuda_stream();
    for (int64_t k = 0; k < s->T; k++) {
        const int64_t t = step_at(s, k), bs = s->batch_sizes[t];
        const int64_t p = k > 0 ? step_at(s, k - 1) : -1;
        const int64_t from_y = p >= 0 ? (s->batch_sizes[p] < bs ? s->batch_sizes[p] : bs) : 0;
        if (from_y)
            DL_CUDA_CHECK(cudaMemcpyAsync(hp + off[t] * H, y + off[p] * H,
                                          sizeof(T) * (size_t)(from_y * H),
                                          cudaMemcpyDeviceToDevice, st));
        if (bs > from_y)
            DL_CUDA_CHECK(cudaMemcpyAsync(hp + (off[t] + from_y) * H, h0 + from_y * H,
                                          sizeof(T) * (size_t)((bs - from_y) * H),
                                          cudaMemcpyDeviceToDevice, st));
    }
    return 0;
}

// The step loop of the backward: dgx, dgh for every row; dh, dc end as the
// gradients of h0, c0.
template <typename T>
int backward_steps(const dl_rnn_shape *s, const dl_rnn_in *in, const dl_rnn_saved *sv,
                   const int64_t *off, T *dgx, T *dgh, T *dh, T *dc) {
    const dl_dtype dt = dtype_of<T>();
    const int64_t H = s->H, GH = dl_rnn_gates(s->mode) * H, N = s->N;
    const bool lstm = s->mode == DL_RNN_LSTM;
    cudaStream_t st = dl_cuda_stream();
    const T *gates = (const T *)sv->ws, *extra = gates + N * GH, *y = (const T *)sv->y;
    for (int64_t k = s->T - 1; k >= 0; k--) {
        const int64_t t = step_at(s, k), bs = s->batch_sizes[t];
        const int64_t p = k > 0 ? step_at(s, k - 1) : -1, prev_bs = p >= 0 ? s->batch_sizes[p] : 0;
        const int64_t r0 = off[t], pr0 = p >= 0 ? off[p] : 0;
        const T *dy = sv->dy ? (const T *)sv->dy + r0 * H : nullptr;
        unsigned blocks = dl_cuda_blocks(bs * H, THREADS);
        if (lstm)
            lstm_bwd_kernel<T><<<blocks, THREADS, 0, st>>>(
                dgx + r0 * GH, dh, dc, dy, gates + r0 * GH, extra + r0 * H, extra + pr0 * H,
                prev_bs, (const T *)in->c0, bs, H);
        else
            gru_bwd_kernel<T><<<blocks, THREADS, 0, st>>>(
                dgx + r0 * GH, dgh + r0 * GH, dh, dy, gates + r0 * GH, extra + r0 * H, y + pr0 * H,
                prev_bs, (const T *)in->h0, bs, H);
        DL_CUDA_LAUNCHED();
        // dh = dgh @ W_hh (+ the GRU's direct part already in dh)
        if (mm(dt, bs, H, GH, dgh + r0 * GH, GH, 1, in->w_hh, H, 1, lstm ? 0 : 1, dh)) return -1;
    }
    return 0;
}

template <typename T>
int backward_t(const dl_rnn_shape *s, const dl_rnn_in *in, const dl_rnn_saved *sv,
               const dl_rnn_grad *gr) {
    const dl_dtype dt = dtype_of<T>();
    const int64_t H = s->H, GH = dl_rnn_gates(s->mode) * H, N = s->N, B = s->B;
    const bool lstm = s->mode == DL_RNN_LSTM;
    const size_t state = sizeof(T) * (size_t)(B * H);
    cudaStream_t st = dl_cuda_stream();
    scratch sc;
    offsets o;
    T *dgx = (T *)sc.get(sizeof(T) * (size_t)(N * GH));
    T *dgh = !dgx ? nullptr : lstm ? dgx : (T *)sc.get(sizeof(T) * (size_t)(N * GH));
    T *dh = dgh ? (T *)sc.get(state) : nullptr;
    T *dc = dh && lstm ? (T *)sc.get(state) : nullptr;
    if (!dh || (lstm && !dc) || o.make(s)) return -1;
    if (sv->dhn)
        DL_CUDA_CHECK(cudaMemcpyAsync(dh, sv->dhn, state, cudaMemcpyDeviceToDevice, st));
    else
        DL_CUDA_CHECK(cudaMemsetAsync(dh, 0, state, st));
    if (lstm) {
        if (sv->dcn)
            DL_CUDA_CHECK(cudaMemcpyAsync(dc, sv->dcn, state, cudaMemcpyDeviceToDevice, st));
        else
            DL_CUDA_CHECK(cudaMemsetAsync(dc, 0, state, st));
    }
    if (backward_steps<T>(s, in, sv, o.off, dgx, dgh, dh, dc)) return -1;
    if (gr->dh0) DL_CUDA_CHECK(cudaMemcpyAsync(gr->dh0, dh, state, cudaMemcpyDeviceToDevice, st));
    if (gr->dc0 && lstm)
        DL_CUDA_CHECK(cudaMemcpyAsync(gr->dc0, dc, state, cudaMemcpyDeviceToDevice, st));
    if (gr->dx && mm(dt, N, s->I, GH, dgx, GH, 1, in->w_ih, s->I, 1, 0, gr->dx)) return -1;
    if (gr->dw_ih && mm(dt, GH, s->I, N, dgx, 1, GH, in->x, s->I, 1, 0, gr->dw_ih)) return -1;
    if (gr->dw_hh) {
        T *hp = (T *)sc.get(sizeof(T) * (size_t)(N * H));
        if (!hp || gather_prev<T>(hp, s, o.off, (const T *)sv->y, (const T *)in->h0) ||
            mm(dt, GH, H, N, dgh, 1, GH, hp, H, 1, 0, gr->dw_hh))
            return -1;
    }
    if (gr->db_ih || gr->db_hh) { // column sums, as a row of ones times the rows
        T *ones = (T *)sc.get(sizeof(T) * (size_t)N);
        if (!ones) return -1;
        fill_kernel<T><<<dl_cuda_blocks(N, THREADS), THREADS, 0, st>>>(ones, N, (T)1);
        DL_CUDA_LAUNCHED();
        if (gr->db_ih && mm(dt, 1, GH, N, ones, N, 1, dgx, GH, 1, 0, gr->db_ih)) return -1;
        if (gr->db_hh && mm(dt, 1, GH, N, ones, N, 1, dgh, GH, 1, 0, gr->db_hh)) return -1;
    }
    return 0;
}

int rnn_forward(dl_dtype dt, const dl_rnn_shape *s, const dl_rnn_in *in, const dl_rnn_out *out) {
    switch (dt) {
    case DL_DTYPE_F32: return forward_t<float>(s, in, out);
    case DL_DTYPE_F64: return forward_t<double>(s, in, out);
    default: return dl_error("rnn: %s is not computed on CUDA", dl_dtype_name(dt));
    }
}

int rnn_backward(dl_dtype dt, const dl_rnn_shape *s, const dl_rnn_in *in, const dl_rnn_saved *sv,
                 const dl_rnn_grad *g) {
    switch (dt) {
    case DL_DTYPE_F32: return backward_t<float>(s, in, sv, g);
    case DL_DTYPE_F64: return backward_t<double>(s, in, sv, g);
    default: return dl_error("rnn_backward: %s is not computed on CUDA", dl_dtype_name(dt));
    }
}

} // namespace

DL_CUDA_TABLE(rnn) = {
    .family = "rnn",
    .forward = rnn_forward,
    .backward = rnn_backward,
};
