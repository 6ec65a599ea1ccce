/* cpu/activation.c - CPU kernels of threshold (relu) backward and conv's
 * fused bias-add-ReLU planes (see activation.h).  One row function per dtype, run by
 * dl_iter_foreach; operand 0 is the output.  float32 computes in float,
 * float64 in double, float16/bfloat16 through float32 with one rounding. */
#include "cpu/activation.h"
#include "core/iter.h"
#include "core/parallel.h"

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
