/* cpu/pad.c - CPU kernels of index-map padding (see pad.h).  The gather
 * runs in parallel over output rows; the scatter-add runs in parallel over
 * the outer slices only, so no two threads ever add into one element and
 * its sums do not depend on the thread count. */
#include "cpu/pad.h"
#include "core/error.h"
#include "core/parallel.h"

#include <string.h>

/* The longest run [*c0, *c1) of map where consecutive outputs read
 * consecutive inputs (the unpadded middle of a row, copied in one go). */
static void longest_run(const int64_t *map, int64_t n, int64_t *c0, int64_t *c1) {
    *c0 = *c1 = 0;
    for (int64_t a = 0; a < n;) {
        int64_t b = a + 1;
        while (b < n && map[b] == map[b - 1] + 1) b++;
        if (b - a > *c1 - *c0) *c0 = a, *c1 = b;
        a = b;
    }
}

/* The gather for one element size; called with a constant sz so that the
 * memcpy of one element becomes one load and one store.  Rows (s, a, b) run
 * in parallel; each copies its middle run at once and maps the borders. */
static inline void gather_rows(char *out, const char *in, size_t sz, const dl_pad_shape *s) {
    const int64_t *osz = s->osz, *isz = s->isz, *const *map = s->map;
    const int64_t rows = s->outer * osz[2] * osz[1];
    const int64_t *m0 = map[0];
    int64_t c0, c1;
    longest_run(m0, osz[0], &c0, &c1);
#pragma omp parallel for num_threads(dl_get_num_threads()) if (rows * osz[0] >= DL_PARALLEL_GRAIN)
    for (int64_t r = 0; r < rows; r++) {
        int64_t b = r % osz[1], a = (r / osz[1]) % osz[2], o = r / (osz[1] * osz[2]);
        const char *irow = // irow is (isz[0])
            in + (size_t)(((o * isz[2] + map[2][a]) * isz[1] + map[1][b]) * isz[0]) * sz;
        char *orow = out + (size_t)(r * osz[0]) * sz; // orow is (osz[0])
        for (int64_t c = 0; c < c0; c++)
            memcpy(orow + (size_t)c * sz, irow + (size_t)m0[c] * sz, sz);
        if (c1 > c0)
            memcpy(orow + (size_t)c0 * sz, irow + (size_t)m0[c0] * sz, (size_t)(c1 - c0) * sz);
        for (int64_t c = c1; c < osz[0]; c++)
            memcpy(orow + (size_t)c * sz, irow + (size_t)m0[c] * sz, sz);
    }
}

int dl_cpu_pad_gather(dl_dtype dt, const dl_pad_shape *s, void *out, const void *in) {
    switch (dl_dtype_size(dt)) {
    case 1: gather_rows(out, in, 1, s); break;
    case 2: gather_rows(out, in, 2, s); break;
    case 4: gather_rows(out, in, 4, s); break;
    default: gather_rows(out, in, 8, s); break;
    }
    return 0;
}

/* irow[m0[c]] += orow[c] for c < n: one output row added into its input row. */
static inline void add_row_f32(float *irow, const float *orow, const int64_t *m0, int64_t n) {
    for (int64_t c = 0; c < n; c++) irow[m0[c]] += orow[c];
}

static inline void add_row_f64(double *irow, const double *orow, const int64_t *m0, int64_t n) {
    for (int64_t c = 0; c < n; c++) irow[m0[c]] += orow[c];
}

/* gin = 0, then every output row of gout added into the input row it reads
 * (elements of es bytes, float64 when f64, else float32). */
static void scatter_rows(bool f64, size_t es, char *gin, const char *gout, const dl_pad_shape *s) {
    const int64_t *osz = s->osz, *isz = s->isz, *const *map = s->map;
    const int64_t on = osz[0] * osz[1] * osz[2], in_n = isz[0] * isz[1] * isz[2];
    memset(gin, 0, (size_t)(s->outer * in_n) * es);
#pragma omp parallel for num_threads(dl_get_num_threads()) if (s->outer * on >= DL_PARALLEL_GRAIN)
    for (int64_t o = 0; o < s->outer; o++) {
        for (int64_t a = 0; a < osz[2]; a++)
            for (int64_t b = 0; b < osz[1]; b++) {
                // irow is (isz[0]) of input slice o, orow is (osz[0]) of output slice o
                char *irow =
                    gin + (size_t)(o * in_n + (map[2][a] * isz[1] + map[1][b]) * isz[0]) * es;
                const char *orow = gout + (size_t)(o * on + (a * osz[1] + b) * osz[0]) * es;
                if (f64)
                    add_row_f64((double *)irow, (const double *)orow, map[0], osz[0]);
                else
                    add_row_f32((float *)irow, (const float *)orow, map[0], osz[0]);
            }
    }
}

int dl_cpu_pad_scatter(dl_dtype dt, const dl_pad_shape *s, void *gin, const void *gout) {
    if (dt != DL_DTYPE_F32 && dt != DL_DTYPE_F64)
        return dl_error("pad_backward: no CPU kernel for %s tensors", dl_dtype_name(dt));
    scatter_rows(dt == DL_DTYPE_F64, dl_dtype_size(dt), gin, gout, s);
    return 0;
}
