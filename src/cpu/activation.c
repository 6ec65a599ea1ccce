/* cpu/activation.c - CPU kernels of threshold (relu) backward, the fused
 * backwards of GELU, SiLU, sigmoid and tanh, and conv's fused
 * bias-add-ReLU planes (see activation.h).  One row function per dtype, run by
 * dl_iter_foreach; operand 0 is the output.  float32 computes in float,
 * float64 in double, float16/bfloat16 through float32 with one rounding. */
#include "cpu/activation.h"
#include "core/iter.h"
#include "core/parallel.h"
#include "cpu/vecmath.h"

#include <math.h>
#include <stdbool.h>

/* --- threshold backward ----------------------------------------------------------------- */

typedef struct {
    double threshold;
} thr_ctx;

/* Both operands are loaded and the result selected, not branched on: the
 * sign of a ReLU's output is data, and a branch on it mispredicts about half
 * the time.  Dense rows take a loop the compiler vectorises. */
static void thr_f32(char **d, const int64_t *st, int64_t n, void *ctx) {
    const float t = (float)((thr_ctx *)ctx)->threshold;
    if (st[0] == 4 && st[1] == 4 && st[2] == 4) {
        float *o = (float *)d[0];
        const float *g = (const float *)d[1], *yp = (const float *)d[2];
        for (int64_t i = 0; i < n; i++) {
            float y = yp[i], gv = g[i];
            o[i] = y <= t ? 0.0f : gv;
        }
        return;
    }
    for (int64_t i = 0; i < n; i++) {
        float y = *(const float *)(d[2] + i * st[2]);
        float gv = *(const float *)(d[1] + i * st[1]);
        *(float *)(d[0] + i * st[0]) = y <= t ? 0.0f : gv;
    }
}

static void thr_f64(char **d, const int64_t *st, int64_t n, void *ctx) {
    const double t = ((thr_ctx *)ctx)->threshold;
    for (int64_t i = 0; i < n; i++) {
        double y = *(const double *)(d[2] + i * st[2]);
        *(double *)(d[0] + i * st[0]) = y <= t ? 0.0 : *(const double *)(d[1] + i * st[1]);
    }
}

static void thr_f16(char **d, const int64_t *st, int64_t n, void *ctx) {
    const float t = (float)((thr_ctx *)ctx)->threshold;
    for (int64_t i = 0; i < n; i++) {
        float y = dl_half_to_float(*(const uint16_t *)(d[2] + i * st[2]));
        *(uint16_t *)(d[0] + i * st[0]) = y <= t ? 0 : *(const uint16_t *)(d[1] + i * st[1]);
    }
}

static void thr_bf16(char **d, const int64_t *st, int64_t n, void *ctx) {
    const float t = (float)((thr_ctx *)ctx)->threshold;
    for (int64_t i = 0; i < n; i++) {
        float y = dl_bf16_to_float(*(const uint16_t *)(d[2] + i * st[2]));
        *(uint16_t *)(d[0] + i * st[0]) = y <= t ? 0 : *(const uint16_t *)(d[1] + i * st[1]);
    }
}

/* --- GELU / SiLU / sigmoid / tanh backward -------------------------------------------------
 * gx = gy * op'(s) in one pass.  float32 rows run the vector kernels
 * (cpu/vecmath.c) when the CPU has them, else the scalar formulas below in
 * the same order; float64 computes in double; float16 and bfloat16 go
 * through float32 blocks converted on the way in and out (one rounding). */

typedef struct {
    dl_unary_op op;
    dl_dtype dt;
} act_ctx;

#define ACT_BWD(T, EXP, ERF, TANH)                                                                 \
    switch (op) {                                                                                  \
    case DL_UNARY_GELU: {                                                                          \
        T cdf = (T)0.5 * ((T)1 + ERF(x * (T)M_SQRT1_2));                                           \
        T pdf = (T)(M_SQRT2 * M_2_SQRTPI * 0.25) * EXP(x * x * (T)-0.5);                           \
        return g * (cdf + x * pdf);                                                                \
    }                                                                                              \
    case DL_UNARY_GELU_TANH: {                                                                     \
        const T beta = (T)(M_SQRT2 * M_2_SQRTPI * 0.5), kappa = (T)0.044715;                       \
        T x2 = x * x, x3 = x2 * x, t = TANH(beta * (x + kappa * x3));                              \
        T left = (T)0.5 * x, left_d = (T)0.5 * ((T)1 + t);                                         \
        T inner_d = beta * ((T)1 + (T)3 * kappa * x2);                                             \
        return g * (left_d + left * ((T)1 - t * t) * inner_d);                                     \
    }                                                                                              \
    case DL_UNARY_SILU: {                                                                          \
        T sg = (T)1 / ((T)1 + EXP(-x));                                                            \
        return g * sg * ((T)1 + x * ((T)1 - sg));                                                  \
    }                                                                                              \
    case DL_UNARY_SIGMOID: return g * ((T)1 - x) * x;                                              \
    default: return g * ((T)1 - x * x);                                                            \
    }

static float act_bwd_f32(dl_unary_op op, float g, float x) {
    ACT_BWD(float, expf, erff, tanhf)
}

static double act_bwd_f64(dl_unary_op op, double g, double x) {
    ACT_BWD(double, exp, erf, tanh)
}

/* dense float32 rows */
static void act_dense_f32(dl_unary_op op, float *o, const float *g, const float *s, int64_t n) {
    if (dl_cpu_vec_act_backward_f32(op, o, g, s, n)) return;
    for (int64_t i = 0; i < n; i++) o[i] = act_bwd_f32(op, g[i], s[i]);
}

static float ld_f(dl_dtype dt, const char *p) {
    switch (dt) {
    case DL_DTYPE_F16: return dl_half_to_float(*(const uint16_t *)p);
    case DL_DTYPE_BF16: return dl_bf16_to_float(*(const uint16_t *)p);
    default: return *(const float *)p;
    }
}

static void st_f(dl_dtype dt, char *p, float v) {
    switch (dt) {
    case DL_DTYPE_F16: *(uint16_t *)p = dl_float_to_half(v); break;
    case DL_DTYPE_BF16: *(uint16_t *)p = dl_float_to_bf16(v); break;
    default: *(float *)p = v; break;
    }
}

static void act_row(char **d, const int64_t *st, int64_t n, void *vc) {
    const act_ctx *c = vc;
    if (c->dt == DL_DTYPE_F64) {
        for (int64_t i = 0; i < n; i++)
            *(double *)(d[0] + i * st[0]) = act_bwd_f64(c->op, *(const double *)(d[1] + i * st[1]),
                                                        *(const double *)(d[2] + i * st[2]));
        return;
    }
    if (c->dt == DL_DTYPE_F32 && st[0] == 4 && st[1] == 4 && st[2] == 4) {
        act_dense_f32(c->op, (float *)d[0], (const float *)d[1], (const float *)d[2], n);
        return;
    }
    /* strided or half rows: through float blocks, so every value meets the same kernel */
    float gb[256], sb[256], ob[256];
    for (int64_t i0 = 0; i0 < n; i0 += 256) {
        int64_t k = n - i0 < 256 ? n - i0 : 256;
        for (int64_t j = 0; j < k; j++) {
            gb[j] = ld_f(c->dt, d[1] + (i0 + j) * st[1]);
            sb[j] = ld_f(c->dt, d[2] + (i0 + j) * st[2]);
        }
        act_dense_f32(c->op, ob, gb, sb, k);
        for (int64_t j = 0; j < k; j++) st_f(c->dt, d[0] + (i0 + j) * st[0], ob[j]);
    }
}

void dl_cpu_act_backward(dl_unary_op op, dl_tensor *gx, dl_tensor *gy, dl_tensor *s) {
    act_ctx c = {op, gx->dtype};
    dl_tensor *args[3] = {gx, gy, s};
    dl_iter_foreach(3, args, act_row, &c);
}

void dl_cpu_bias_add_relu_planes(float *y, const float *b, const float *a, int64_t N, int64_t O,
                                 int64_t S, bool relu) {
    /* one plane at a time, each step a pass over a plane still in cache */
#pragma omp parallel for num_threads(dl_get_num_threads()) if (N * O * S >= DL_PARALLEL_GRAIN)
    for (int64_t p = 0; p < N * O; p++) {
        float *yp = y + p * S;
        if (b) {
            const float bo = b[p % O];
            for (int64_t i = 0; i < S; i++) yp[i] += bo;
        }
        if (a) {
            const float *ap = a + p * S;
            for (int64_t i = 0; i < S; i++) yp[i] += ap[i];
        }
        if (relu)
            for (int64_t i = 0; i < S; i++) yp[i] = (yp[i] > 0.0f || yp[i] != yp[i]) ? yp[i] : 0.0f;
    }
}

void dl_cpu_threshold_backward(dl_tensor *gx, dl_tensor *gy, dl_tensor *y, double threshold) {
    thr_ctx c = {threshold};
    dl_tensor *args[3] = {gx, gy, y};
    switch (gx->dtype) {
    case DL_DTYPE_F32: dl_iter_foreach(3, args, thr_f32, &c); break;
    case DL_DTYPE_F64: dl_iter_foreach(3, args, thr_f64, &c); break;
    case DL_DTYPE_F16: dl_iter_foreach(3, args, thr_f16, &c); break;
    case DL_DTYPE_BF16: dl_iter_foreach(3, args, thr_bf16, &c); break;
    default: break;
    }
}
