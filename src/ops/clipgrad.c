/* ops/clipgrad.c - the clipgrad family (see clipgrad.h): checks, the list of
 * contiguous buffers the kernels take, dispatch to cpu/clipgrad.c or
 * cuda/clipgrad.cu.
 *
 * Invariants: a tensor that is not contiguous is worked on through a
 * contiguous copy, written back afterwards; every temporary is released on
 * every path. */
#include "ops/clipgrad.h"
#include "core/error.h"
#include "cpu/clipgrad.h"
#include "kernels/clipgrad.h"
#include "ops/op_util.h"

#include <math.h>
#include <stdlib.h>

/* The kernels' view of n tensors: dense[i] is ts[i] itself (retained) or its
 * contiguous copy; mt[k] the k-th non-empty one.  NULL entries skipped. */
typedef struct {
    int n, count;
    dl_tensor **dense;
    dl_mt_tensor *mt;
    dl_device dev;
    dl_dtype dt; /* the promoted dtype */
} mt_list;

static void mt_release(mt_list *l) {
    for (int i = 0; l->dense && i < l->n; i++) dl_tensor_release(l->dense[i]);
    free(l->dense);
    free(l->mt);
    l->dense = NULL;
    l->mt = NULL;
}

/* Checks the tensors (floating, one device) and builds l; have says whether
 * the CUDA entry the caller needs exists. */
static int mt_prepare(const char *op, int n, dl_tensor *const *ts, bool have, mt_list *l) {
    *l = (mt_list){n, 0, NULL, NULL, DL_CPU, DL_DTYPE_F32};
    int first = -1;
    for (int i = 0; i < n; i++) {
        if (!ts[i]) continue;
        if (dl_op_need_floating(op, "every tensor", ts[i])) return -1;
        dl_device d = dl_tensor_device(ts[i]);
        if (first < 0) {
            first = i;
            l->dev = d;
            l->dt = ts[i]->dtype;
        } else if (d.type != l->dev.type || d.index != l->dev.index) {
            char a[32], b[32];
            return dl_error("%s: tensor %d is on %s, tensor %d on %s: all must be on one device",
                            op, first + 1, dl_device_name(l->dev, a, sizeof a), i + 1,
                            dl_device_name(d, b, sizeof b));
        } else {
            l->dt = dl_promote_types(l->dt, ts[i]->dtype);
        }
    }
    if (first >= 0 && dl_op_is_cuda(l->dev) && dl_op_cuda_ready(op, l->dev, have)) return -1;
    l->dense = calloc((size_t)(n > 0 ? n : 1), sizeof *l->dense);
    l->mt = calloc((size_t)(n > 0 ? n : 1), sizeof *l->mt);
    if (!l->dense || !l->mt) {
        mt_release(l);
        return dl_error("%s: out of memory for a list of %d tensors", op, n);
    }
    for (int i = 0; i < n; i++) {
        if (!ts[i] || dl_tensor_numel(ts[i]) == 0) continue;
        if (!(l->dense[i] = dl_tensor_contiguous(ts[i]))) {
            mt_release(l);
            return -1;
        }
        l->mt[l->count++] =
            (dl_mt_tensor){dl_op_data(l->dense[i]), dl_tensor_numel(ts[i]), ts[i]->dtype};
    }
    return 0;
}

/* After an in-place kernel: copies back into the tensors that were not
 * contiguous, bumps every version, releases l. */
static int mt_finish(mt_list *l, dl_tensor *const *ts) {
    int rc = 0;
    for (int i = 0; i < l->n && rc == 0; i++) {
        if (!l->dense[i]) continue;
        if (l->dense[i] != ts[i]) rc = dl_tensor_copy_(ts[i], l->dense[i]);
        dl_tensor_bump_version(ts[i]);
    }
    mt_release(l);
    return rc;
}

#define HAVE(fn) (dl_cuda_clipgrad != NULL && dl_cuda_clipgrad->fn != NULL)

static int check_norm_type(const char *op, double p) {
    if (!(p >= 0) && !(isinf(p) && p < 0))
        return dl_error("%s: norm_type must be positive, 0 or +-inf, got %g", op, p);
    return 0;
}

dl_tensor *dl_grads_total_norm(int n, dl_tensor *const *ts, double norm_type) {
    const char *op = "clip_grad_norm_";
    mt_list l;
    if (check_norm_type(op, norm_type) || mt_prepare(op, n, ts, HAVE(total_norm), &l)) return NULL;
    dl_tensor *out = NULL;
    if (dl_op_is_cuda(l.dev)) {
        out = dl_tensor_empty(0, NULL, l.dt, l.dev);
        if (out && dl_cuda_clipgrad->total_norm(l.count, l.mt, norm_type, dl_op_data(out), l.dt)) {
            dl_tensor_release(out);
            out = NULL;
        }
    } else {
        double total;
        if (dl_cpu_clipgrad_norm(l.count, l.mt, norm_type, &total) == 0)
            out = dl_tensor_full(0, NULL, total, l.dt, DL_CPU);
    }
    mt_release(&l);
    return out;
}

/* PyTorch's coefficient: max_norm * (1 / (total + 1e-6)), clamped to 1, each
 * step rounded to float unless the total is float64. */
static double coefficient(double total, dl_dtype dt, double max_norm) {
    double c;
    if (dt == DL_DTYPE_F64)
        c = 1.0 / (total + 1e-6) * max_norm;
    else
        c = (float)(1.0f / ((float)total + 1e-6f)) * (float)max_norm;
    return c < 1 ? c : 1; /* NaN stays */
}

int dl_grads_scale_by_norm_(int n, dl_tensor *const *ts, dl_tensor *total_norm, double max_norm) {
    const char *op = "clip_grads_with_norm_";
    mt_list l;
    if (dl_op_need_floating(op, "total_norm", total_norm)) return -1;
    if (dl_tensor_numel(total_norm) != 1)
        return dl_error("%s: total_norm must have one element, got %lld", op,
                        (long long)dl_tensor_numel(total_norm));
    if (mt_prepare(op, n, ts, HAVE(scale_by_norm), &l)) return -1;
    int rc = -1;
    dl_tensor *t = dl_op_onto(dl_tensor_contiguous(total_norm), l.dev);
    if (!t) goto done;
    if (l.count == 0) {
        rc = 0;
    } else if (dl_op_is_cuda(l.dev)) {
        rc = dl_cuda_clipgrad->scale_by_norm(l.count, l.mt, dl_op_data(t), t->dtype, max_norm);
    } else {
        double total;
        rc = dl_tensor_item(t, &total) ||
             dl_cpu_clipgrad_scale(l.count, l.mt, coefficient(total, t->dtype, max_norm));
    }
done:
    dl_tensor_release(t);
    if (rc) {
        mt_release(&l);
        return -1;
    }
    return mt_finish(&l, ts);
}

int dl_grads_clamp_(int n, dl_tensor *const *ts, double clip_value) {
    const char *op = "clip_grad_value_";
    mt_list l;
    if (!(clip_value >= 0))
        return dl_error("%s: clip_value must be non-negative, got %g", op, clip_value);
    if (mt_prepare(op, n, ts, HAVE(clamp), &l)) return -1;
    int rc = l.count == 0           ? 0
             : dl_op_is_cuda(l.dev) ? dl_cuda_clipgrad->clamp(l.count, l.mt, clip_value)
                                    : dl_cpu_clipgrad_clamp(l.count, l.mt, clip_value);
    if (rc) {
        mt_release(&l);
        return -1;
    }
    return mt_finish(&l, ts);
}
