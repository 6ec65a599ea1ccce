// reduce.cu - CUDA kernels of the reductions, scans and the median (see
// src/kernels/reduce.h and src/cpu/reduce.h), and the reduce family's table
// (softmax.cu and loss.cu hold their families' tables).
//
// Reductions read a dense (RO, O, R, I) block, element (ro, o, r, i) at
// ((ro*O + o)*R + r)*I + i, and fold over (ro, r) -- position j = ro*R + r --
// into O*I outputs k = o*I + i.  One generic plan serves every reduction
// through an Op (accumulator type A; identity, fold, combine, store):
//  - rows (I == 1 and long rows): a block folds a chunk of one output's
//    positions, threads strided, then a block all-reduce;
//  - columns (otherwise): a thread folds a chunk of one output's positions in
//    order; neighbouring threads take neighbouring i, so reads coalesce;
//  - chunks: when there are few outputs the positions are cut into chunks
//    (a full reduction of a huge vector uses the whole GPU); chunk partials go
//    to scratch and a second kernel combines them in chunk order.
// The cut depends on the shape and the SM count only, so results are
// deterministic.  Float reductions accumulate in double (as the CPU); int64
// sums and products wrap around; max/min keep the first index of the extreme
// and a NaN beats every number (the first NaN wins).
#include "reduce_family.cuh"

#include <limits.h>
#include <math.h>
#include <type_traits>

namespace {

static inline int64_t ceil_div(int64_t a, int64_t b) {
    return (a + b - 1) / b;
}

__device__ inline double nan_max(double a, double v) {
    return (v > a || v != v) ? v : a;
}
__device__ inline double nan_min(double a, double v) {
    return (v < a || v != v) ? v : a;
}

// --- ops ------------------------------------------------------------------------------------

// Float accumulations (dl_acc_kind) of float32/float64 x into double out.
template <typename T> struct AccOp {
    typedef double A;
    int kind;
    double p;
    const T *x;
    const double *shift; // (O*I) for SUMEXP and SQDEV
    double *out;         // (O*I)

    __device__ A identity() const {
        switch (kind) {
        case DL_ACC_PROD: return 1;
        case DL_ACC_MAX: return -INFINITY;
        case DL_ACC_MIN:
        case DL_ACC_MINABS: return INFINITY;
        default: return 0;
        }
    }
    __device__ A combine(A a, A b) const {
        switch (kind) {
        case DL_ACC_PROD: return a * b;
        case DL_ACC_MAX:
        case DL_ACC_MAXABS: return nan_max(a, b);
        case DL_ACC_MIN:
        case DL_ACC_MINABS: return nan_min(a, b);
        default: return a + b;
        }
    }
    __device__ A fold(A a, int64_t off, int64_t, int64_t k) const {
        double v = (double)x[off];
        switch (kind) {
        case DL_ACC_SUM: return a + v;
        case DL_ACC_SUMSQ: return a + v * v;
        case DL_ACC_SUMABS: return a + fabs(v);
        case DL_ACC_SUMPOW: return a + pow(fabs(v), p);
        case DL_ACC_COUNTNZ: return a + (v != 0 ? 1.0 : 0.0);
        case DL_ACC_PROD: return a * v;
        case DL_ACC_MAX: return nan_max(a, v);
        case DL_ACC_MIN: return nan_min(a, v);
        case DL_ACC_MAXABS: return nan_max(a, fabs(v));
        case DL_ACC_MINABS: return nan_min(a, fabs(v));
        case DL_ACC_SUMEXP: {
            double d = v - shift[k];
            if constexpr (std::is_same<T, double>::value)
                return a + exp(d);
            else
                return a + (double)expf((float)d); // float32: exp in float, as the CPU
        }
        case DL_ACC_SQDEV: {
            double d = v - shift[k];
            return a + d * d;
        }
        }
        return a;
    }
    __device__ void store(int64_t k, A a) const { out[k] = a; }
};

// int64 sums and products, wrapping around (unsigned arithmetic).
struct I64Op {
    typedef unsigned long long A;
    bool prod;
    const int64_t *x;
    int64_t *out;
    __device__ A identity() const { return prod ? 1ULL : 0ULL; }
    __device__ A combine(A a, A b) const { return prod ? a * b : a + b; }
    __device__ A fold(A a, int64_t off, int64_t, int64_t) const {
        return combine(a, (unsigned long long)x[off]);
    }
    __device__ void store(int64_t k, A a) const { out[k] = (int64_t)a; }
};

// all/any of bool bytes.
struct AllAnyOp {
    typedef unsigned A;
    bool all;
    const uint8_t *x;
    uint8_t *out;
    __device__ A identity() const { return all ? 1u : 0u; }
    __device__ A combine(A a, A b) const { return all ? (a & b) : (a | b); }
    __device__ A fold(A a, int64_t off, int64_t, int64_t) const {
        return combine(a, x[off] != 0 ? 1u : 0u);
    }
    __device__ void store(int64_t k, A a) const { out[k] = (uint8_t)a; }
};

// Max/min with the position of the first extreme.  V is double for float
// input, long long for int64 input.
template <typename V> struct VPair {
    V v;
    long long i;
};
__device__ inline VPair<double> dl_shfl_xor(VPair<double> p, int o) {
    p.v = __shfl_xor_sync(DL_RED_FULL_MASK, p.v, o);
    p.i = __shfl_xor_sync(DL_RED_FULL_MASK, p.i, o);
    return p;
}
__device__ inline VPair<long long> dl_shfl_xor(VPair<long long> p, int o) {
    p.v = __shfl_xor_sync(DL_RED_FULL_MASK, p.v, o);
    p.i = __shfl_xor_sync(DL_RED_FULL_MASK, p.i, o);
    return p;
}

// Should (v, i) replace (bv, bi)?  NaN beats numbers; among equals (and among
// NaNs) the smaller position wins (src/cpu/reduce.c's mm_better).
__device__ inline bool mm_better(bool mx, double v, long long i, double bv, long long bi) {
    if (bv != bv) return v != v && i < bi;
    if (v != v) return true;
    if (v == bv) return i < bi;
    return mx ? v > bv : v < bv;
}
__device__ inline bool mm_better(bool mx, long long v, long long i, long long bv, long long bi) {
    if (v == bv) return i < bi;
    return mx ? v > bv : v < bv;
}

template <typename T> struct MinMaxOp {
    typedef typename std::conditional<std::is_same<T, int64_t>::value, long long, double>::type V;
    typedef VPair<V> A;
    bool mx;
    const T *x;
    V *vals;      // (O*I)
    int64_t *idx; // (O*I) or NULL
    __device__ A identity() const {
        A a;
        if constexpr (std::is_same<V, double>::value)
            a.v = mx ? -INFINITY : INFINITY;
        else
            a.v = mx ? LLONG_MIN : LLONG_MAX;
        a.i = LLONG_MAX;
        return a;
    }
    __device__ A combine(A a, A b) const { return mm_better(mx, b.v, b.i, a.v, a.i) ? b : a; }
    __device__ A fold(A a, int64_t off, int64_t j, int64_t) const {
        A b;
        b.v = (V)x[off];
        b.i = j;
        return combine(a, b);
    }
    __device__ void store(int64_t k, A a) const {
        vals[k] = a.v;
        if (idx) idx[k] = a.i;
    }
};

// --- kernels: the generic reduction ------------------------------------------------------------

// x is (RO, O, R) (I == 1); a block per (chunk, o) item; part is (nch, O), or
// NULL when nch == 1 (results stored at once).
template <typename Op>
__global__ void rows_kernel(Op op, int64_t RO, int64_t O, int64_t R, int64_t nch, int64_t clen,
                            typename Op::A *part) {
    typedef typename Op::A A;
    const int64_t total = RO * R;
    for (int64_t item = blockIdx.x; item < nch * O; item += gridDim.x) {
        int64_t o = item % O, ch = item / O;
        int64_t lo = ch * clen, hi = lo + clen < total ? lo + clen : total;
        A a = op.identity();
        for (int64_t j = lo + threadIdx.x; j < hi; j += blockDim.x) {
            int64_t ro = RO == 1 ? 0 : j / R, r = j - ro * R;
            a = op.fold(a, (ro * O + o) * R + r, j, o);
        }
        a = dl_block_allreduce(a, [&](A u, A v) { return op.combine(u, v); });
        if (threadIdx.x == 0) {
            if (part)
                part[item] = a;
            else
                op.store(o, a);
        }
    }
}

// A thread per (chunk, o, i) item t = ch*O*I + o*I + i; part is (nch, O*I) or NULL.
template <typename Op>
__global__ void cols_kernel(Op op, int64_t RO, int64_t O, int64_t R, int64_t I, int64_t nch,
                            int64_t clen, typename Op::A *part) {
    typedef typename Op::A A;
    const int64_t n = O * I, total = RO * R;
    for (int64_t t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; t < nch * n;
         t += (int64_t)gridDim.x * blockDim.x) {
        int64_t k = t % n, ch = t / n, o = k / I, i = k - o * I;
        int64_t lo = ch * clen, hi = lo + clen < total ? lo + clen : total;
        int64_t ro = lo / R, r = lo - ro * R;
        A a = op.identity();
        for (int64_t j = lo; j < hi; j++) {
            a = op.fold(a, ((ro * O + o) * R + r) * I + i, j, k);
            if (++r == R) {
                r = 0;
                ro++;
            }
        }
        if (part)
            part[t] = a;
        else
            op.store(k, a);
    }
}

// out[k] = the chunk partials of k (part is (nch, n)) combined in chunk order.
template <typename Op>
__global__ void combine_kernel(Op op, const typename Op::A *part, int64_t nch, int64_t n) {
    for (int64_t k = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; k < n;
         k += (int64_t)gridDim.x * blockDim.x) {
        typename Op::A a = part[k];
        for (int64_t ch = 1; ch < nch; ch++) a = op.combine(a, part[ch * n + k]);
        op.store(k, a);
    }
}

// Every output gets the identity (nothing to reduce).
template <typename Op> __global__ void identity_kernel(Op op, int64_t n) {
    for (int64_t k = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; k < n;
         k += (int64_t)gridDim.x * blockDim.x)
        op.store(k, op.identity());
}

// --- kernels: scans ------------------------------------------------------------------------------

// Running sum or product; A is double for float T, unsigned long long for int64.
template <typename T> struct ScanAcc {
    typedef
        typename std::conditional<std::is_same<T, int64_t>::value, unsigned long long, double>::type
            A;
};

// x, out are (O, R) (I == 1): a block per row, chunks of blockDim elements
// scanned with warp shuffles and carried along.
template <typename T>
__global__ void scan_rows_kernel(bool prod, const T *x, T *out, int64_t O, int64_t R) {
    typedef typename ScanAcc<T>::A A;
    __shared__ A warp_tot[32];
    __shared__ A carry_s;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const A id = prod ? (A)1 : (A)0;
    auto op = [prod](A a, A b) { return prod ? a * b : a + b; };
    for (int64_t o = blockIdx.x; o < O; o += gridDim.x) {
        const T *xr = x + o * R;
        T *yr = out + o * R;
        A carry = id;
        for (int64_t base = 0; base < R; base += blockDim.x) {
            int64_t r = base + threadIdx.x;
            A v = r < R ? (A)xr[r] : id;
            for (int d = 1; d < 32; d <<= 1) { // inclusive warp scan
                A u = __shfl_up_sync(DL_RED_FULL_MASK, v, d);
                if (lane >= d) v = op(u, v);
            }
            if (lane == 31) warp_tot[warp] = v;
            __syncthreads();
            A before = carry;
            for (int w = 0; w < warp; w++) before = op(before, warp_tot[w]);
            v = op(before, v);
            if (r < R) yr[r] = (T)v;
            if (threadIdx.x == blockDim.x - 1) carry_s = v;
            __syncthreads();
            carry = carry_s;
            __syncthreads();
        }
    }
}

// x, out are (O, R, I): a thread per (o, i), sequential along r.
template <typename T>
__global__ void scan_cols_kernel(bool prod, const T *x, T *out, int64_t O, int64_t R, int64_t I) {
    typedef typename ScanAcc<T>::A A;
    for (int64_t t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; t < O * I;
         t += (int64_t)gridDim.x * blockDim.x) {
        int64_t o = t / I, i = t - o * I, off = o * R * I + i;
        A a = prod ? (A)1 : (A)0;
        for (int64_t r = 0; r < R; r++, off += I) {
            A v = (A)x[off];
            a = prod ? a * v : a + v;
            out[off] = (T)a;
        }
    }
}

// --- kernels: median
// -------------------------------------------------------------------------------

// Keys that order like the values: -0 and +0 are equal, as for <.
__device__ inline unsigned long long order_key(double d) {
    if (d == 0) d = 0.0;
    long long b = __double_as_longlong(d);
    return b < 0 ? ~(unsigned long long)b : (unsigned long long)b ^ 0x8000000000000000ULL;
}
__device__ inline unsigned long long order_key(float f) {
    return order_key((double)f);
}
__device__ inline unsigned long long order_key(int64_t v) {
    return (unsigned long long)v ^ 0x8000000000000000ULL;
}

// Lower median of each (o, i) row of x (O, R, I) with the CPU's index rule:
// the k-th (k = (R-1)/2) element in (value, position) order.  A block per
// row: the first NaN (float), else a radix select of the k-th key (8 passes
// of 8 bits) and a search for its rank among the equal keys in position
// order.  V is double (float T) or int64_t.  R < 2^31.
template <typename T, typename V>
__global__ void median_kernel(const T *x, int64_t O, int64_t R, int64_t I, V *vals, int64_t *idx) {
    __shared__ unsigned hist[256];
    __shared__ unsigned long long s_prefix;
    __shared__ long long s_rank, s_found;
    __shared__ int s_warp[32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (int64_t row = blockIdx.x; row < O * I; row += gridDim.x) {
        int64_t o = row / I, i = row - o * I;
        const T *xr = x + o * R * I + i; // element r at xr[r * I]
        if constexpr (!std::is_same<T, int64_t>::value) {
            long long first = LLONG_MAX;
            for (int64_t r = threadIdx.x; r < R; r += blockDim.x)
                if (xr[r * I] != xr[r * I]) {
                    first = r;
                    break;
                }
            first =
                dl_block_allreduce(first, [](long long a, long long b) { return a < b ? a : b; });
            if (first != LLONG_MAX) { // uniform
                if (threadIdx.x == 0) {
                    vals[row] = (V)NAN;
                    idx[row] = first;
                }
                continue;
            }
        }
        unsigned long long prefix = 0, mask = 0;
        long long rank = (R - 1) / 2;
        for (int shift = 56; shift >= 0; shift -= 8) {
            for (int b = threadIdx.x; b < 256; b += blockDim.x) hist[b] = 0;
            __syncthreads();
            for (int64_t r = threadIdx.x; r < R; r += blockDim.x) {
                unsigned long long key = order_key(xr[r * I]);
                if ((key & mask) == prefix) atomicAdd(&hist[(key >> shift) & 255], 1u);
            }
            __syncthreads();
            if (threadIdx.x == 0) {
                long long cum = 0;
                int d = 0;
                for (; d < 255; d++) {
                    if (rank < cum + (long long)hist[d]) break;
                    cum += hist[d];
                }
                s_rank = rank - cum;
                s_prefix = prefix | ((unsigned long long)d << shift);
            }
            __syncthreads();
            rank = s_rank;
            prefix = s_prefix;
            mask |= 255ULL << shift;
            __syncthreads();
        }
        // the rank-th element (in position order) whose key is prefix
        if (threadIdx.x == 0) s_found = 0;
        long long need = rank;
        for (int64_t base = 0; base < R; base += blockDim.x) {
            int64_t r = base + threadIdx.x;
            bool m = r < R && order_key(xr[r * I]) == prefix;
            int cnt = __syncthreads_count(m);
            if (need < cnt) { // uniform
                unsigned bal = __ballot_sync(DL_RED_FULL_MASK, m);
                if (lane == 0) s_warp[warp] = __popc(bal);
                __syncthreads();
                if (m) {
                    int before = __popc(bal & ((1u << lane) - 1u));
                    for (int w = 0; w < warp; w++) before += s_warp[w];
                    if (before == need) s_found = r;
                }
                __syncthreads();
                break;
            }
            need -= cnt;
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            idx[row] = s_found;
            vals[row] = (V)xr[s_found * I];
        }
        __syncthreads();
    }
}

// --- kernels: finishing
// ------------------------------------------------------------------------------

__global__ void finish_kernel(int kind, double *a, int64_t n, double c, const double *shift) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        switch (kind) {
        case DL_FIN_DIV: a[i] /= c; break;
        case DL_FIN_SQRT_DIV: a[i] = sqrt(a[i] / c); break;
        case DL_FIN_POW: a[i] = pow(a[i], c); break;
        case DL_FIN_LOG_SHIFT: a[i] = log(a[i]) + shift[i]; break;
        }
    }
}

__global__ void zero_inf_kernel(double *a, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        if (isinf(a[i])) a[i] = 0;
}

// --- launchers
// ------------------------------------------------------------------------------------------

// Runs op over the (RO, O, R, I) block s: the plan of the file header.
template <typename Op> int run_reduce(const Op &op, const dl_rshape *s) {
    typedef typename Op::A A;
    const int64_t RO = s->RO, O = s->O, R = s->R, I = s->I, n = O * I, total = RO * R;
    if (n <= 0) return 0;
    cudaStream_t st = dl_cuda_stream();
    if (total <= 0) {
        identity_kernel<<<dl_cuda_blocks(n, DL_RED_THREADS), DL_RED_THREADS, 0, st>>>(op, n);
        DL_CUDA_LAUNCHED();
        return 0;
    }
    int64_t sm = dl_cuda_sm_count();
    if (sm < 1) sm = 1;
    const bool rows = I == 1 && total >= 64;
    int64_t nch = 1;
    if (rows && O < sm * 4) {
        nch = ceil_div(sm * 4, O);
        if (nch > ceil_div(total, 4096)) nch = ceil_div(total, 4096);
    } else if (!rows && n < sm * 2048) {
        nch = ceil_div(sm * 2048, n);
        if (nch > ceil_div(total, 256)) nch = ceil_div(total, 256);
    }
    if (nch < 1) nch = 1;
    int64_t clen = ceil_div(total, nch);
    nch = ceil_div(total, clen);
    A *part = NULL;
    if (nch > 1 && !(part = (A *)dl_cuda_malloc(sizeof(A) * (size_t)(nch * n)))) return -1;
    if (rows)
        rows_kernel<<<dl_red_grid(nch * O), DL_RED_THREADS, 0, st>>>(op, RO, O, R, nch, clen, part);
    else
        cols_kernel<<<dl_cuda_blocks(nch * n, DL_RED_THREADS), DL_RED_THREADS, 0, st>>>(
            op, RO, O, R, I, nch, clen, part);
    DL_RED_LAUNCHED_FREE(part);
    if (part) {
        combine_kernel<<<dl_cuda_blocks(n, DL_RED_THREADS), DL_RED_THREADS, 0, st>>>(op, part, nch,
                                                                                     n);
        DL_RED_LAUNCHED_FREE(part);
        dl_cuda_free(part); // stream-ordered: free once the last use is queued
    }
    return 0;
}

int bad_shape(const char *op, const dl_rshape *s) {
    if (s->RO < 0 || s->O < 0 || s->R < 0 || s->I < 0)
        return dl_error("%s: internal error: negative reduction shape", op);
    return 0;
}

template <typename T>
int scan_typed(bool prod, const T *x, T *out, int64_t O, int64_t R, int64_t I) {
    cudaStream_t st = dl_cuda_stream();
    if (I == 1 && R >= 64)
        scan_rows_kernel<T><<<dl_red_grid(O), DL_RED_THREADS, 0, st>>>(prod, x, out, O, R);
    else
        scan_cols_kernel<T><<<dl_cuda_blocks(O * I, DL_RED_THREADS), DL_RED_THREADS, 0, st>>>(
            prod, x, out, O, R, I);
    DL_CUDA_LAUNCHED();
    return 0;
}

} // namespace

// --- entry points
// ---------------------------------------------------------------------------------------

int dl_cuda_reduce_acc(dl_acc_kind kind, const void *x, dl_dtype dt, const dl_rshape *s, double p,
                       const double *shift, double *out) {
    if (bad_shape("reduce", s)) return -1;
    if ((kind == DL_ACC_SUMEXP || kind == DL_ACC_SQDEV) && !shift && s->O * s->I > 0)
        return dl_error("reduce: internal error: missing shift");
    if (dt == DL_DTYPE_F64)
        return run_reduce(AccOp<double>{(int)kind, p, (const double *)x, shift, out}, s);
    if (dt == DL_DTYPE_F32)
        return run_reduce(AccOp<float>{(int)kind, p, (const float *)x, shift, out}, s);
    return dl_error("reduce: CUDA kernels take float32 or float64, got %s", dl_dtype_name(dt));
}

static int cuda_reduce_acc_i64(bool prod, const int64_t *x, const dl_rshape *s, int64_t *out) {
    if (bad_shape("reduce", s)) return -1;
    return run_reduce(I64Op{prod, x, out}, s);
}

static int cuda_reduce_minmax(bool is_max, const void *x, dl_dtype dt, const dl_rshape *s,
                              void *vals, int64_t *idx) {
    if (bad_shape("max/min", s)) return -1;
    if (s->O * s->I == 0) return 0;
    if (s->R * s->RO <= 0) return dl_error("max/min: cannot reduce over an empty dimension");
    switch (dt) {
    case DL_DTYPE_F32:
        return run_reduce(MinMaxOp<float>{is_max, (const float *)x, (double *)vals, idx}, s);
    case DL_DTYPE_F64:
        return run_reduce(MinMaxOp<double>{is_max, (const double *)x, (double *)vals, idx}, s);
    case DL_DTYPE_I64:
        return run_reduce(MinMaxOp<int64_t>{is_max, (const int64_t *)x, (long long *)vals, idx}, s);
    default:
        return dl_error("max/min: CUDA kernels take float32, float64 or int64, got %s",
                        dl_dtype_name(dt));
    }
}

static int cuda_reduce_allany(bool is_all, const uint8_t *x, const dl_rshape *s, uint8_t *out) {
    if (bad_shape("all/any", s)) return -1;
    return run_reduce(AllAnyOp{is_all, x, out}, s);
}

static int cuda_scan(bool prod, const void *x, dl_dtype dt, int64_t O, int64_t R, int64_t I,
                     void *out) {
    if (O < 0 || R < 0 || I < 0) return dl_error("scan: internal error: negative shape");
    if (O * R * I == 0) return 0;
    switch (dt) {
    case DL_DTYPE_F32: return scan_typed(prod, (const float *)x, (float *)out, O, R, I);
    case DL_DTYPE_F64: return scan_typed(prod, (const double *)x, (double *)out, O, R, I);
    case DL_DTYPE_I64: return scan_typed(prod, (const int64_t *)x, (int64_t *)out, O, R, I);
    default:
        return dl_error("cumsum/cumprod: CUDA kernels take float32, float64 or int64, got %s",
                        dl_dtype_name(dt));
    }
}

static int cuda_median(const void *x, dl_dtype dt, int64_t O, int64_t R, int64_t I, void *vals,
                       int64_t *idx) {
    if (O < 0 || R < 0 || I < 0) return dl_error("median: internal error: negative shape");
    if (O * I == 0) return 0;
    if (R <= 0) return dl_error("median: cannot reduce over an empty dimension");
    if (R >= (1LL << 31))
        return dl_error("median: a dimension of %lld elements is too long for the CUDA kernel "
                        "(at most 2^31 - 1)",
                        (long long)R);
    cudaStream_t st = dl_cuda_stream();
    unsigned grid = dl_red_grid(O * I);
    switch (dt) {
    case DL_DTYPE_F32:
        median_kernel<float, double>
            <<<grid, DL_RED_THREADS, 0, st>>>((const float *)x, O, R, I, (double *)vals, idx);
        break;
    case DL_DTYPE_F64:
        median_kernel<double, double>
            <<<grid, DL_RED_THREADS, 0, st>>>((const double *)x, O, R, I, (double *)vals, idx);
        break;
    case DL_DTYPE_I64:
        median_kernel<int64_t, int64_t>
            <<<grid, DL_RED_THREADS, 0, st>>>((const int64_t *)x, O, R, I, (int64_t *)vals, idx);
        break;
    default:
        return dl_error("median: CUDA kernels take float32, float64 or int64, got %s",
                        dl_dtype_name(dt));
    }
    DL_CUDA_LAUNCHED();
    return 0;
}

static int cuda_reduce_finish(dl_fin_kind kind, double *a, int64_t n, double c,
                              const double *shift) {
    if (n <= 0) return 0;
    if (kind == DL_FIN_LOG_SHIFT && !shift)
        return dl_error("reduce: internal error: missing shift");
    finish_kernel<<<dl_cuda_blocks(n, DL_RED_THREADS), DL_RED_THREADS, 0, dl_cuda_stream()>>>(
        (int)kind, a, n, c, shift);
    DL_CUDA_LAUNCHED();
    return 0;
}

static int cuda_reduce_zero_inf(double *a, int64_t n) {
    if (n <= 0) return 0;
    zero_inf_kernel<<<dl_cuda_blocks(n, DL_RED_THREADS), DL_RED_THREADS, 0, dl_cuda_stream()>>>(a,
                                                                                                n);
    DL_CUDA_LAUNCHED();
    return 0;
}

DL_CUDA_TABLE(reduce) = {
    .family = "reduce",
    .reduce_acc = dl_cuda_reduce_acc,
    .reduce_acc_i64 = cuda_reduce_acc_i64,
    .reduce_minmax = cuda_reduce_minmax,
    .reduce_allany = cuda_reduce_allany,
    .scan = cuda_scan,
    .median = cuda_median,
    .reduce_finish = cuda_reduce_finish,
    .reduce_zero_inf = cuda_reduce_zero_inf,
};
