/* iter.c - broadcasting and the strided N-ary loop (see iter.h). */
#include "iter.h"
#include "parallel.h"

#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

int dl_broadcast_shapes(const char *op, int na, const int64_t *sa, int nb, const int64_t *sb,
                        int64_t *out) {
    int n = na > nb ? na : nb;
    for (int i = 0; i < n; i++) {
        int ia = i - (n - na), ib = i - (n - nb);
        int64_t a = ia >= 0 ? sa[ia] : 1, b = ib >= 0 ? sb[ib] : 1;
        if (a != b && a != 1 && b != 1) {
            char b1[128], b2[128];
            dl_error("%s: shapes %s and %s cannot be broadcast (dimension %d: %lld vs %lld)", op,
                     dl_shape_str(na, sa, b1, sizeof b1), dl_shape_str(nb, sb, b2, sizeof b2),
                     i + 1, (long long)a, (long long)b);
            return -1;
        }
        out[i] = a == 1 ? b : a;
    }
    return n;
}

typedef struct {
    int nargs, ndim;                                /* collapsed dims; last one is the row */
    int64_t shape[DL_MAX_DIMS];                     /* collapsed shape */
    int64_t strides[DL_ITER_MAX_ARGS][DL_MAX_DIMS]; /* bytes */
    char *base[DL_ITER_MAX_ARGS];
} iter_plan;

/* Builds the loop plan.  With reorder, the dimensions are walked in the order
 * of the output's strides, largest first (a stable sort), so that an output
 * laid out in another order than its shape (channels-last, a transpose)
 * still collapses into long unit-stride rows; order-dependent (serial)
 * kernels keep the logical order. */
static void plan_build(iter_plan *p, int nargs, dl_tensor *const *args, bool reorder) {
    const dl_tensor *t0 = args[0];
    p->nargs = nargs;
    p->ndim = 0;
    for (int a = 0; a < nargs; a++) p->base[a] = dl_tensor_data_ptr(args[a]);
    int order[DL_MAX_DIMS];
    for (int d = 0; d < t0->ndim; d++) order[d] = d;
    if (reorder)
        for (int i = 1; i < t0->ndim; i++)
            for (int j = i; j > 0 && t0->strides[order[j]] > t0->strides[order[j - 1]]; j--) {
                int k = order[j];
                order[j] = order[j - 1];
                order[j - 1] = k;
            }
    for (int i = 0; i < t0->ndim; i++) {
        int d = order[i];
        if (t0->shape[d] == 1) continue;
        int k = p->ndim;
        if (k > 0) { /* merge with the previous kept dim when contiguous for all */
            bool ok = true;
            for (int a = 0; a < nargs && ok; a++) {
                int64_t isz = (int64_t)dl_dtype_size(args[a]->dtype);
                ok = p->strides[a][k - 1] == args[a]->strides[d] * isz * t0->shape[d];
            }
            if (ok) {
                p->shape[k - 1] *= t0->shape[d];
                for (int a = 0; a < nargs; a++)
                    p->strides[a][k - 1] =
                        args[a]->strides[d] * (int64_t)dl_dtype_size(args[a]->dtype);
                continue;
            }
        }
        p->shape[k] = t0->shape[d];
        for (int a = 0; a < nargs; a++)
            p->strides[a][k] = args[a]->strides[d] * (int64_t)dl_dtype_size(args[a]->dtype);
        p->ndim++;
    }
    if (p->ndim == 0) { /* scalar or all-ones shape: one row of one */
        p->ndim = 1;
        p->shape[0] = 1;
        for (int a = 0; a < nargs; a++) p->strides[a][0] = 0;
    }
}

/* Runs rows [row_lo, row_hi) x columns [col_lo, col_hi) of the plan. */
static void plan_run(const iter_plan *p, int64_t row, int64_t col_lo, int64_t col_hi, dl_loop_fn fn,
                     void *ctx) {
    char *data[DL_ITER_MAX_ARGS];
    int64_t inner[DL_ITER_MAX_ARGS];
    int last = p->ndim - 1;
    for (int a = 0; a < p->nargs; a++) {
        int64_t off = 0, r = row;
        for (int d = last - 1; d >= 0; d--) {
            off += (r % p->shape[d]) * p->strides[a][d];
            r /= p->shape[d];
        }
        data[a] = p->base[a] + off + col_lo * p->strides[a][last];
        inner[a] = p->strides[a][last];
    }
    fn(data, inner, col_hi - col_lo, ctx);
}

static void iter_run(int nargs, dl_tensor *const *args, dl_loop_fn fn, void *ctx, bool parallel) {
    int64_t numel = dl_tensor_numel(args[0]);
    if (numel == 0) return;
    iter_plan p;
    plan_build(&p, nargs, args, parallel);
    int64_t cols = p.shape[p.ndim - 1], rows = numel / cols;
    int nthr = parallel && numel >= DL_PARALLEL_GRAIN ? dl_get_num_threads() : 1;
    if (nthr <= 1) {
        for (int64_t r = 0; r < rows; r++) plan_run(&p, r, 0, cols, fn, ctx);
        return;
    }
    /* work items: rows split into column chunks when there are few rows */
    int64_t chunks = 1;
    if (rows < 4 * nthr) {
        chunks = (4 * nthr + rows - 1) / rows;
        int64_t max_chunks = cols / 4096 > 0 ? cols / 4096 : 1;
        if (chunks > max_chunks) chunks = max_chunks;
    }
    int64_t items = rows * chunks, csize = (cols + chunks - 1) / chunks;
#pragma omp parallel for num_threads(nthr) schedule(static)
    for (int64_t it = 0; it < items; it++) {
        int64_t r = it / chunks, c = it % chunks;
        int64_t lo = c * csize, hi = lo + csize < cols ? lo + csize : cols;
        if (lo < hi) plan_run(&p, r, lo, hi, fn, ctx);
    }
}

void dl_iter_foreach(int nargs, dl_tensor *const *args, dl_loop_fn fn, void *ctx) {
    iter_run(nargs, args, fn, ctx, true);
}
