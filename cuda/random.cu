// random.cu - CUDA kernels of the random fills (src/ops/random.c) and the
// table of the random family (the fused optimizer steps are in optim.cu).
//
// Invariants:
//  - Each thread takes whole Philox counter blocks (grid-stride over blocks)
//    and writes the elements src/cpu/random.h maps to that block, so element
//    i of a fill gets the very Philox words it gets on the CPU, whatever the
//    launch shape.  out is contiguous; the op layer fills strided views
//    through a contiguous device scratch tensor.
//  - The arithmetic follows src/cpu/random.c operation by operation, with
//    explicitly rounded intrinsics (__fmul_rn, __fadd_rn, ...) so that nvcc
//    contracts nothing into a fused multiply-add: uniform, bernoulli and the
//    integer draws are bit-for-bit the CPU's.  float16/bfloat16 rounding is
//    the CPU's own bit-level code (dl_float_to_half / dl_float_to_bf16).
//  - normal: the CPU calls glibc's logf/sinf/cosf (float32) and log/sin/cos
//    (float64); their exact bits cannot be reproduced on the GPU.  float32
//    draws compute these three in double and round once to float (correctly
//    rounded, which glibc's float functions are for all but ~1% of inputs),
//    so a CUDA normal is within an ulp or two of the CPU's; float64 draws
//    use CUDA's double functions (within a few double ulps).
//  - randperm never reaches this file (sequential; built on the CPU).
#include "common.cuh"
#include "philox.cuh"

extern "C" {
#include "core/rng.h"
#include "kernels/cuda.h"
#include "kernels/random.h"
}

#include <math.h>

namespace {

const int kThreads = 256;

// --- unit conversions (Philox and the 24-bit float are in philox.cuh) ----------------------

// 53 bits -> [0, 1): exact in double.
__device__ inline double unit_double(uint32_t hi, uint32_t lo) {
    return __dmul_rn((double)((((uint64_t)hi << 32) | lo) >> 11), 1.0 / 9007199254740992.0);
}

__device__ inline uint64_t word64(const uint32_t r[4], int pair) {
    return ((uint64_t)r[2 * pair] << 32) | r[2 * pair + 1];
}

// --- 16-bit floats: the CPU's bit-level conversions (src/core/dtype.c) -----------------

__device__ inline uint16_t float_to_half_bits(float f) {
    uint32_t x = __float_as_uint(f);
    uint32_t sign = (x >> 16) & 0x8000, absx = x & 0x7fffffffu;
    if (absx >= 0x7f800000u) return (uint16_t)(sign | 0x7c00 | (absx > 0x7f800000u ? 0x200 : 0));
    if (absx >= 0x477ff000u) return (uint16_t)(sign | 0x7c00);
    if (absx < 0x38800000u) {
        float scaled = __fmul_rn(__uint_as_float(absx), 16777216.0f); // exact: power of two
        return (uint16_t)(sign | (uint32_t)rintf(scaled));            // nearest, ties to even
    }
    uint32_t mant = absx & 0x7fffff, exp = (absx >> 23) - 127 + 15;
    uint32_t h = (exp << 10) | (mant >> 13), rest = mant & 0x1fff;
    if (rest > 0x1000 || (rest == 0x1000 && (h & 1))) h++;
    return (uint16_t)(sign | h);
}

__device__ inline uint16_t float_to_bf16_bits(float f) {
    uint32_t x = __float_as_uint(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40);
    x += 0x7fffu + ((x >> 16) & 1);
    return (uint16_t)(x >> 16);
}

__device__ inline uint16_t to_f16ish(float v, bool half) {
    return half ? float_to_half_bits(v) : float_to_bf16_bits(v);
}

__device__ inline float from_f16ish(uint16_t h, bool half) {
    return half ? __half2float(__ushort_as_half(h)) : __uint_as_float((uint32_t)h << 16);
}

// The next representable value toward -inf (both formats are sign-magnitude).
__device__ inline uint16_t below_f16ish(uint16_t h) {
    if (h & 0x8000) return (uint16_t)(h + 1);
    return h == 0 ? 0x8001 : (uint16_t)(h - 1);
}

// An integer (or 0/1) stored as dtype dt, as dl_store_i64 does.
__device__ inline void store_int(void *out, int64_t i, int dt, int64_t v) {
    switch (dt) {
    case DL_DTYPE_I64: ((int64_t *)out)[i] = v; break;
    case DL_DTYPE_I32: ((int32_t *)out)[i] = (int32_t)(uint32_t)v; break;
    case DL_DTYPE_U8: ((uint8_t *)out)[i] = (uint8_t)v; break;
    case DL_DTYPE_BOOL: ((uint8_t *)out)[i] = v != 0; break;
    case DL_DTYPE_F32: ((float *)out)[i] = (float)(double)v; break;
    case DL_DTYPE_F64: ((double *)out)[i] = (double)v; break;
    case DL_DTYPE_F16: ((uint16_t *)out)[i] = float_to_half_bits((float)(double)v); break;
    default: ((uint16_t *)out)[i] = float_to_bf16_bits((float)(double)v); break;
    }
}

// --- kernels ------------------------------------------------------------------------------
// nb is the number of counter blocks; block b covers elements 4b..4b+3 (32-bit
// draws) or 2b, 2b+1 (64-bit draws), cut at n.

// g(b, r) for each counter block b this thread owns (grid-stride), r its
// four Philox words.
template <class G> __device__ void for_each_block(int64_t nb, uint64_t seed, uint64_t base, G g) {
    for (int64_t b = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; b < nb;
         b += (int64_t)gridDim.x * blockDim.x) {
        uint32_t r[4];
        dl_philox4x32_10(seed, base + (uint64_t)b, r);
        g(b, r);
    }
}

// f(i, l, r) for each element i = PER*b + l (l < PER, i < n) of this thread's
// blocks: PER = 4 for one 32-bit draw an element, 2 for one 64-bit draw.
template <int PER, class F>
__device__ void for_each_draw(int64_t n, int64_t nb, uint64_t seed, uint64_t base, F f) {
    for_each_block(nb, seed, base, [&](int64_t b, const uint32_t *r) {
        int64_t i0 = PER * b, m = n - i0 < PER ? n - i0 : PER;
        for (int64_t l = 0; l < m; l++) f(i0 + l, (int)l, r);
    });
}

// out is (n,) float32: lo + span * u, kept below high (clamp) as top.
__global__ void uniform_f32_kernel(float *out, int64_t n, int64_t nb, float lo, float span,
                                   float top, double high, int clamp, uint64_t seed,
                                   uint64_t base) {
    for_each_draw<4>(n, nb, seed, base, [&](int64_t i, int l, const uint32_t *r) {
        float v = __fadd_rn(lo, __fmul_rn(span, dl_unit_float(r[l])));
        out[i] = clamp && (double)v >= high ? top : v;
    });
}

// out is (n,) float64.
__global__ void uniform_f64_kernel(double *out, int64_t n, int64_t nb, double low, double span,
                                   double top, double high, int clamp, uint64_t seed,
                                   uint64_t base) {
    for_each_draw<2>(n, nb, seed, base, [&](int64_t i, int l, const uint32_t *r) {
        double v = __dadd_rn(low, __dmul_rn(span, unit_double(r[2 * l], r[2 * l + 1])));
        out[i] = clamp && v >= high ? top : v;
    });
}

// out is (n,) float16 (half) or bfloat16 bits.
__global__ void uniform_f16ish_kernel(uint16_t *out, int64_t n, int64_t nb, bool half, float lo,
                                      float span, double low, double high, uint16_t low_bits,
                                      int clamp, uint64_t seed, uint64_t base) {
    for_each_draw<4>(n, nb, seed, base, [&](int64_t i, int l, const uint32_t *r) {
        uint16_t h = to_f16ish(__fadd_rn(lo, __fmul_rn(span, dl_unit_float(r[l]))), half);
        if (clamp && (double)from_f16ish(h, half) >= high) {
            h = below_f16ish(h);
            if ((double)from_f16ish(h, half) >= high) h = below_f16ish(h);
            if ((double)from_f16ish(h, half) < low) h = low_bits;
        }
        out[i] = h;
    });
}

// out is (n,) float32, float16 or bfloat16 (dt): Box-Muller on lane pairs.
__global__ void normal_f32ish_kernel(void *out, int dt, int64_t n, int64_t nb, float mu,
                                     float sigma, uint64_t seed, uint64_t base) {
    const float two_pi = 6.2831853071795864769f;
    for_each_block(nb, seed, base, [&](int64_t b, const uint32_t *r) {
        float z[4];
        for (int p = 0; p < 2; p++) {
            float u1 = __fsub_rn(1.0f, dl_unit_float(r[2 * p])); // (0, 1]
            float theta = __fmul_rn(two_pi, dl_unit_float(r[2 * p + 1]));
            float lg = (float)log((double)u1);
            float rad = __fsqrt_rn(__fmul_rn(-2.0f, lg));
            z[2 * p] = __fmul_rn(rad, (float)cos((double)theta));
            z[2 * p + 1] = __fmul_rn(rad, (float)sin((double)theta));
        }
        int64_t i0 = 4 * b, m = n - i0 < 4 ? n - i0 : 4;
        for (int64_t l = 0; l < m; l++) {
            float v = __fadd_rn(mu, __fmul_rn(sigma, z[l]));
            if (dt == DL_DTYPE_F32)
                ((float *)out)[i0 + l] = v;
            else
                ((uint16_t *)out)[i0 + l] = to_f16ish(v, dt == DL_DTYPE_F16);
        }
    });
}

// out is (n,) float64: block b gives the pair (2b, 2b+1).
__global__ void normal_f64_kernel(double *out, int64_t n, int64_t nb, double mean, double sd,
                                  uint64_t seed, uint64_t base) {
    const double two_pi = 6.2831853071795864769;
    for_each_block(nb, seed, base, [&](int64_t b, const uint32_t *r) {
        double u1 = __dsub_rn(1.0, unit_double(r[0], r[1])); // (0, 1]
        double theta = __dmul_rn(two_pi, unit_double(r[2], r[3]));
        double rad = __dsqrt_rn(__dmul_rn(-2.0, log(u1)));
        double sr = __dmul_rn(sd, rad);
        out[2 * b] = __dadd_rn(mean, __dmul_rn(sr, cos(theta)));
        if (2 * b + 1 < n) out[2 * b + 1] = __dadd_rn(mean, __dmul_rn(sr, sin(theta)));
    });
}

// out is (n,) of dtype dt: low + the 64-bit draw scaled to [0, range).
__global__ void random_int_kernel(void *out, int dt, int64_t n, int64_t nb, int64_t low,
                                  uint64_t range, uint64_t seed, uint64_t base) {
    for_each_draw<2>(n, nb, seed, base, [&](int64_t i, int l, const uint32_t *r) {
        uint64_t v = (uint64_t)low + __umul64hi(word64(r, l), range);
        store_int(out, i, dt, (int64_t)v);
    });
}

// out is (n,) of dtype dt; probs is (n,) or NULL (then prob for all).
__global__ void bernoulli_kernel(void *out, int dt, int64_t n, int64_t nb, const double *probs,
                                 double prob, uint64_t seed, uint64_t base) {
    for_each_draw<4>(n, nb, seed, base, [&](int64_t i, int l, const uint32_t *r) {
        double p = probs ? probs[i] : prob;
        store_int(out, i, dt, (double)dl_unit_float(r[l]) < p ? 1 : 0);
    });
}

// --- launchers ------------------------------------------------------------------------------

// The largest float below high (src/cpu/random.c's float_below).
float float_below(double high) {
    float f = (float)high;
    return (double)f < high ? f : nextafterf(f, -INFINITY);
}

int launch_uniform(dl_tensor *out, int64_t n, double low, double high, uint64_t seed,
                   uint64_t base) {
    cudaStream_t st = dl_cuda_stream();
    void *d = dl_tensor_data_ptr(out);
    int clamp = high > low;
    if (out->dtype == DL_DTYPE_F64) {
        int64_t nb = (n + 1) / 2;
        uniform_f64_kernel<<<dl_cuda_blocks(nb, kThreads), kThreads, 0, st>>>(
            (double *)d, n, nb, low, high - low, nextafter(high, -INFINITY), high, clamp, seed,
            base);
    } else if (out->dtype == DL_DTYPE_F32) {
        int64_t nb = (n + 3) / 4;
        uniform_f32_kernel<<<dl_cuda_blocks(nb, kThreads), kThreads, 0, st>>>(
            (float *)d, n, nb, (float)low, (float)(high - low), float_below(high), high, clamp,
            seed, base);
    } else {
        bool half = out->dtype == DL_DTYPE_F16;
        uint16_t low_bits = half ? dl_float_to_half((float)low) : dl_float_to_bf16((float)low);
        int64_t nb = (n + 3) / 4;
        uniform_f16ish_kernel<<<dl_cuda_blocks(nb, kThreads), kThreads, 0, st>>>(
            (uint16_t *)d, n, nb, half, (float)low, (float)(high - low), low, high, low_bits, clamp,
            seed, base);
    }
    DL_CUDA_LAUNCHED();
    return 0;
}

int launch_normal(dl_tensor *out, int64_t n, double mean, double sd, uint64_t seed, uint64_t base) {
    cudaStream_t st = dl_cuda_stream();
    void *d = dl_tensor_data_ptr(out);
    if (out->dtype == DL_DTYPE_F64) {
        int64_t nb = (n + 1) / 2;
        normal_f64_kernel<<<dl_cuda_blocks(nb, kThreads), kThreads, 0, st>>>((double *)d, n, nb,
                                                                             mean, sd, seed, base);
    } else {
        int64_t nb = (n + 3) / 4;
        normal_f32ish_kernel<<<dl_cuda_blocks(nb, kThreads), kThreads, 0, st>>>(
            d, (int)out->dtype, n, nb, (float)mean, (float)sd, seed, base);
    }
    DL_CUDA_LAUNCHED();
    return 0;
}

// dl_cuda_random_kernels.random_fill
int cuda_random_fill(dl_tensor *out, const dl_random_params *p, uint64_t seed, uint64_t base) {
    if (!dl_tensor_is_contiguous(out))
        return dl_error("random (cuda): the output tensor must be contiguous");
    if (dl_cuda_use(out)) return -1;
    int64_t n = dl_tensor_numel(out);
    if (n == 0) return 0;
    bool floating = dl_dtype_is_floating(out->dtype);
    cudaStream_t st = dl_cuda_stream();
    void *d = dl_tensor_data_ptr(out);
    switch (p->kind) {
    case DL_RANDOM_UNIFORM:
        if (!floating)
            return dl_error("uniform_ (cuda): expected a floating-point dtype, got %s",
                            dl_dtype_name(out->dtype));
        return launch_uniform(out, n, p->a, p->b, seed, base);
    case DL_RANDOM_NORMAL:
        if (!floating)
            return dl_error("normal_ (cuda): expected a floating-point dtype, got %s",
                            dl_dtype_name(out->dtype));
        return launch_normal(out, n, p->a, p->b, seed, base);
    case DL_RANDOM_INT: {
        int64_t nb = (n + 1) / 2;
        random_int_kernel<<<dl_cuda_blocks(nb, kThreads), kThreads, 0, st>>>(
            d, (int)out->dtype, n, nb, p->low, p->range, seed, base);
        DL_CUDA_LAUNCHED();
        return 0;
    }
    case DL_RANDOM_BERNOULLI: {
        int64_t nb = (n + 3) / 4;
        bernoulli_kernel<<<dl_cuda_blocks(nb, kThreads), kThreads, 0, st>>>(
            d, (int)out->dtype, n, nb, p->probs, p->a, seed, base);
        DL_CUDA_LAUNCHED();
        return 0;
    }
    case DL_RANDOM_PERM:
        return dl_error("randperm (cuda): a permutation is built on the CPU and copied");
    }
    return dl_error("random (cuda): unknown kind %d", (int)p->kind);
}

} // namespace

DL_CUDA_TABLE(random) = {
    .family = "random",
    .random_fill = cuda_random_fill,
};
