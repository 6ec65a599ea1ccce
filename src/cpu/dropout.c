/* cpu/dropout.c - CPU kernel of dropout's mask-and-scale (see dropout.h).
 * One row function per dtype, run by dl_iter_foreach; operand 0 is the
 * output.  float32 computes in float, float64 in double, float16/bfloat16
 * through float32 with one rounding. */
#include "cpu/dropout.h"
#include "core/iter.h"

#include <stdbool.h>

/* --- mask and scale ----------------------------------------------------------------------- */

typedef struct {
    double scale;
} scale_ctx;

static void ms_f32(char **d, const int64_t *st, int64_t n, void *ctx) {
    const float s = (float)((scale_ctx *)ctx)->scale;
    for (int64_t i = 0; i < n; i++) {
        bool m = *(const bool *)(d[2] + i * st[2]);
        *(float *)(d[0] + i * st[0]) = *(const float *)(d[1] + i * st[1]) * (m ? s : 0.0f);
    }
}

static void ms_f64(char **d, const int64_t *st, int64_t n, void *ctx) {
    const double s = ((scale_ctx *)ctx)->scale;
    for (int64_t i = 0; i < n; i++) {
        bool m = *(const bool *)(d[2] + i * st[2]);
        *(double *)(d[0] + i * st[0]) = *(const double *)(d[1] + i * st[1]) * (m ? s : 0.0);
    }
}

static void ms_f16(char **d, const int64_t *st, int64_t n, void *ctx) {
    const float s = (float)((scale_ctx *)ctx)->scale;
    for (int64_t i = 0; i < n; i++) {
        bool m = *(const bool *)(d[2] + i * st[2]);
        float x = dl_half_to_float(*(const uint16_t *)(d[1] + i * st[1]));
        *(uint16_t *)(d[0] + i * st[0]) = dl_float_to_half(x * (m ? s : 0.0f));
    }
}

static void ms_bf16(char **d, const int64_t *st, int64_t n, void *ctx) {
    const float s = (float)((scale_ctx *)ctx)->scale;
    for (int64_t i = 0; i < n; i++) {
        bool m = *(const bool *)(d[2] + i * st[2]);
        float x = dl_bf16_to_float(*(const uint16_t *)(d[1] + i * st[1]));
        *(uint16_t *)(d[0] + i * st[0]) = dl_float_to_bf16(x * (m ? s : 0.0f));
    }
}

void dl_cpu_mask_scale(dl_tensor *out, dl_tensor *x, dl_tensor *mask, double scale) {
    scale_ctx c = {scale};
    dl_tensor *args[3] = {out, x, mask};
    switch (out->dtype) {
    case DL_DTYPE_F32: dl_iter_foreach(3, args, ms_f32, &c); break;
    case DL_DTYPE_F64: dl_iter_foreach(3, args, ms_f64, &c); break;
    case DL_DTYPE_F16: dl_iter_foreach(3, args, ms_f16, &c); break;
    case DL_DTYPE_BF16: dl_iter_foreach(3, args, ms_bf16, &c); break;
    default: break;
    }
}
