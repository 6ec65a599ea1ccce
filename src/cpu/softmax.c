/* cpu/softmax.c - CPU kernels of softmax and log_softmax (see softmax.h).
 *
 * One row is the D elements (o, :, i), stride `inner` apart.  Rows run in
 * parallel; a row is: max, sum of exp(x - max) (accumulated in double), then
 * the outputs.  The row functions are static inline and called once with
 * stride 1, so the common last-dim case gets a unit-stride loop.  float32
 * rows compute in float (expf), float64 rows in double. */
#include "cpu/softmax.h"
#include "core/parallel.h"

#include <math.h>

/* --- rows: float32 ---------------------------------------------------------------------- */

static inline void row_fwd_f32(float *y, const float *x, int64_t D, int64_t s, bool is_log) {
    // y, x are rows of D elements, stride s
    float m = -INFINITY;
    for (int64_t d = 0; d < D; d++) m = fmaxf(m, x[d * s]);
    double sum = 0;
    if (is_log) {
        for (int64_t d = 0; d < D; d++) sum += expf(x[d * s] - m);
        float lse = m + (float)log(sum);
        for (int64_t d = 0; d < D; d++) y[d * s] = x[d * s] - lse;
    } else {
        for (int64_t d = 0; d < D; d++) {
            float e = expf(x[d * s] - m);
            y[d * s] = e;
            sum += e;
        }
        float inv = (float)(1.0 / sum);
        for (int64_t d = 0; d < D; d++) y[d * s] *= inv;
    }
}

static inline void row_bwd_f32(float *gx, const float *gy, const float *y, int64_t D, int64_t s,
                               bool is_log) {
    // gx, gy, y are rows of D elements, stride s
    double acc = 0;
    if (is_log) {
        for (int64_t d = 0; d < D; d++) acc += gy[d * s];
        float sg = (float)acc;
        for (int64_t d = 0; d < D; d++) gx[d * s] = gy[d * s] - expf(y[d * s]) * sg;
    } else {
        for (int64_t d = 0; d < D; d++) acc += (double)gy[d * s] * y[d * s];
        float dot = (float)acc;
        for (int64_t d = 0; d < D; d++) gx[d * s] = y[d * s] * (gy[d * s] - dot);
    }
}

/* --- rows: float64 ---------------------------------------------------------------------- */

static inline void row_fwd_f64(double *y, const double *x, int64_t D, int64_t s, bool is_log) {
    // y, x are rows of D elements, stride s
    double m = -INFINITY;
    for (int64_t d = 0; d < D; d++) m = fmax(m, x[d * s]);
    double sum = 0;
    if (is_log) {
        for (int64_t d = 0; d < D; d++) sum += exp(x[d * s] - m);
        double lse = m + log(sum);
        for (int64_t d = 0; d < D; d++) y[d * s] = x[d * s] - lse;
    } else {
        for (int64_t d = 0; d < D; d++) {
            double e = exp(x[d * s] - m);
            y[d * s] = e;
            sum += e;
        }
        double inv = 1.0 / sum;
        for (int64_t d = 0; d < D; d++) y[d * s] *= inv;
    }
}

static inline void row_bwd_f64(double *gx, const double *gy, const double *y, int64_t D, int64_t s,
                               bool is_log) {
    // gx, gy, y are rows of D elements, stride s
    double acc = 0;
    if (is_log) {
        for (int64_t d = 0; d < D; d++) acc += gy[d * s];
        for (int64_t d = 0; d < D; d++) gx[d * s] = gy[d * s] - exp(y[d * s]) * acc;
    } else {
        for (int64_t d = 0; d < D; d++) acc += gy[d * s] * y[d * s];
        for (int64_t d = 0; d < D; d++) gx[d * s] = y[d * s] * (gy[d * s] - acc);
    }
}

/* --- entry points ------------------------------------------------------------------------ */

/* Rows are numbered r = o*inner + i; row r starts at o*D*inner + i. */
#define ROW_START(r) (((r) / inner) * D * inner + (r) % inner)

void dl_cpu_softmax_f32(float *y, const float *x, int64_t outer, int64_t D, int64_t inner,
                        bool is_log) {
    int64_t rows = outer * inner;
    if (inner == 1) {
#pragma omp parallel for num_threads(dl_get_num_threads()) if (rows * D >= DL_PARALLEL_GRAIN)
        for (int64_t r = 0; r < rows; r++) row_fwd_f32(y + r * D, x + r * D, D, 1, is_log);
        return;
    }
#pragma omp parallel for num_threads(dl_get_num_threads()) if (rows * D >= DL_PARALLEL_GRAIN)
    for (int64_t r = 0; r < rows; r++)
        row_fwd_f32(y + ROW_START(r), x + ROW_START(r), D, inner, is_log);
}

void dl_cpu_softmax_f64(double *y, const double *x, int64_t outer, int64_t D, int64_t inner,
                        bool is_log) {
    int64_t rows = outer * inner;
    if (inner == 1) {
#pragma omp parallel for num_threads(dl_get_num_threads()) if (rows * D >= DL_PARALLEL_GRAIN)
        for (int64_t r = 0; r < rows; r++) row_fwd_f64(y + r * D, x + r * D, D, 1, is_log);
        return;
    }
#pragma omp parallel for num_threads(dl_get_num_threads()) if (rows * D >= DL_PARALLEL_GRAIN)
    for (int64_t r = 0; r < rows; r++)
        row_fwd_f64(y + ROW_START(r), x + ROW_START(r), D, inner, is_log);
}

void dl_cpu_softmax_backward_f32(float *gx, const float *gy, const float *y, int64_t outer,
                                 int64_t D, int64_t inner, bool is_log) {
    int64_t rows = outer * inner;
    if (inner == 1) {
#pragma omp parallel for num_threads(dl_get_num_threads()) if (rows * D >= DL_PARALLEL_GRAIN)
        for (int64_t r = 0; r < rows; r++)
            row_bwd_f32(gx + r * D, gy + r * D, y + r * D, D, 1, is_log);
        return;
    }
#pragma omp parallel for num_threads(dl_get_num_threads()) if (rows * D >= DL_PARALLEL_GRAIN)
    for (int64_t r = 0; r < rows; r++)
        row_bwd_f32(gx + ROW_START(r), gy + ROW_START(r), y + ROW_START(r), D, inner, is_log);
}

void dl_cpu_softmax_backward_f64(double *gx, const double *gy, const double *y, int64_t outer,
                                 int64_t D, int64_t inner, bool is_log) {
    int64_t rows = outer * inner;
    if (inner == 1) {
#pragma omp parallel for num_threads(dl_get_num_threads()) if (rows * D >= DL_PARALLEL_GRAIN)
        for (int64_t r = 0; r < rows; r++)
            row_bwd_f64(gx + r * D, gy + r * D, y + r * D, D, 1, is_log);
        return;
    }
#pragma omp parallel for num_threads(dl_get_num_threads()) if (rows * D >= DL_PARALLEL_GRAIN)
    for (int64_t r = 0; r < rows; r++)
        row_bwd_f64(gx + ROW_START(r), gy + ROW_START(r), y + ROW_START(r), D, inner, is_log);
}
