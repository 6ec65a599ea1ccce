/* cpu/index.c - CPU kernels of the joining and indexing family (see
 * cpu/index.h).  Elements are moved as raw bytes of their size, so one loop
 * serves every dtype; only scatter_add, index_add and the sort keys look at
 * values.
 * Offsets are in elements unless a name says bytes.  Large loops run under
 * OpenMP; loops whose writes may collide (scatter along a non-last dim) stay
 * serial. */
#include "cpu/index.h"
#include "core/parallel.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* --- helpers -------------------------------------------------------------- */

static inline void elem_copy(char *dst, const char *src, size_t size) {
    switch (size) {
    case 1: *dst = *src; break;
    case 2: memcpy(dst, src, 2); break;
    case 4: memcpy(dst, src, 4); break;
    default: memcpy(dst, src, 8); break;
    }
}

/* Element offset of row-major position `pos` of `shape` (ndim dims) in a
 * tensor with `strides`. */
static int64_t offset_of(int ndim, const int64_t *shape, const int64_t *strides, int64_t pos) {
    int64_t off = 0;
    for (int d = ndim - 1; d >= 0; d--) {
        off += (pos % shape[d]) * strides[d];
        pos /= shape[d];
    }
    return off;
}

/* Shape and strides with a 0-dim tensor seen as [1] (stride 0). */
static int nonempty_dims(const dl_tensor *t, int64_t *shape, int64_t *strides) {
    if (t->ndim == 0) {
        shape[0] = 1;
        strides[0] = 0;
        return 1;
    }
    memcpy(shape, t->shape, sizeof(int64_t) * t->ndim);
    memcpy(strides, t->strides, sizeof(int64_t) * t->ndim);
    return t->ndim;
}

static char *elem_base(const dl_tensor *t) {
    return (char *)t->storage->data;
}

/* --- index_select ----------------------------------------------------------- */

void dl_cpu_index_select(dl_tensor *out, const dl_tensor *x, int dim, const int64_t *idx,
                         int64_t nidx) {
    size_t isz = dl_dtype_size(x->dtype);
    int64_t outer = 1, inner = 1, size = x->ndim ? x->shape[dim] : 1;
    for (int d = 0; d < dim; d++) outer *= x->shape[d];
    for (int d = dim + 1; d < x->ndim; d++) inner *= x->shape[d];
    const char *src = dl_tensor_data_ptr(x); /* x is (outer, size, inner) */
    char *dst = dl_tensor_data_ptr(out);     /* out is (outer, nidx, inner) */
    int64_t rows = outer * nidx;
    size_t row_bytes = (size_t)inner * isz;
    int nthr = rows * inner >= DL_PARALLEL_GRAIN ? dl_get_num_threads() : 1;
    if (inner == 1) {
#pragma omp parallel for num_threads(nthr) if (nthr > 1)
        for (int64_t r = 0; r < rows; r++) {
            int64_t o = r / nidx, k = r % nidx;
            elem_copy(dst + r * isz, src + (o * size + idx[k]) * isz, isz);
        }
        return;
    }
#pragma omp parallel for num_threads(nthr) if (nthr > 1)
    for (int64_t r = 0; r < rows; r++) {
        int64_t o = r / nidx, k = r % nidx;
        if (r + 2 < rows) {
            int64_t o2 = (r + 2) / nidx, k2 = (r + 2) % nidx;
            dl_cpu_prefetch_bytes(src + (o2 * size + idx[k2]) * row_bytes, row_bytes);
        }
        memcpy(dst + r * row_bytes, src + (o * size + idx[k]) * row_bytes, row_bytes);
    }
}

/* --- gather / scatter ----------------------------------------------------------
 * Both walk the index tensor row by row (its last dim is the row).  The
 * position p = (m_0 .. m_last) reads or writes x/self at the same
 * coordinates except m_dim, which is replaced by index[p]. */

/* The walk over index for the indexed tensor t (x or self): index's shape,
 * its rows (the last dim, cols long), and t's strides with dim's zeroed, so
 * offset_of(last, shape, base_strides, r) is row r's base in t; a column
 * steps step_col in t and an index value step_dim. */
typedef struct {
    int64_t shape[DL_MAX_DIMS], base_strides[DL_MAX_DIMS];
    int last;
    int64_t numel, cols, rows, step_dim, step_col;
} index_walk;

/* Fills w; false when index is empty (nothing to do). */
static bool index_walk_init(index_walk *w, const dl_tensor *index, const dl_tensor *t, int dim) {
    int64_t is[DL_MAX_DIMS], tshape[DL_MAX_DIMS];
    int nd = nonempty_dims(index, w->shape, is);
    nonempty_dims(t, tshape, w->base_strides);
    w->numel = dl_tensor_numel(index);
    if (w->numel == 0) return false;
    w->last = nd - 1;
    w->cols = w->shape[w->last];
    w->rows = w->numel / w->cols;
    w->step_dim = w->base_strides[dim];
    w->step_col = dim == w->last ? 0 : w->base_strides[w->last];
    w->base_strides[dim] = 0;
    return true;
}

void dl_cpu_gather(dl_tensor *out, const dl_tensor *x, int dim, const dl_tensor *index) {
    index_walk w;
    if (!index_walk_init(&w, index, x, dim)) return;
    int64_t cols = w.cols, step_dim = w.step_dim, step_col = w.step_col;
    size_t isz = dl_dtype_size(x->dtype);
    const char *src = elem_base(x);
    int64_t xoff = x->offset;
    char *dst = dl_tensor_data_ptr(out);            /* out is index's shape, contiguous */
    const int64_t *idx = dl_tensor_data_ptr(index); /* contiguous int64 */
    int nthr = w.numel >= DL_PARALLEL_GRAIN ? dl_get_num_threads() : 1;
#pragma omp parallel for num_threads(nthr) if (nthr > 1)
    for (int64_t r = 0; r < w.rows; r++) {
        int64_t base = xoff + offset_of(w.last, w.shape, w.base_strides, r);
        const int64_t *ir = idx + r * cols;
        char *orow = dst + r * cols * (int64_t)isz;
        /* typed loops per element size: the inner loop stays branch-free */
        switch (isz) {
        case 1:
            for (int64_t j = 0; j < cols; j++)
                orow[j] = src[base + j * step_col + ir[j] * step_dim];
            break;
        case 2:
            for (int64_t j = 0; j < cols; j++)
                ((uint16_t *)orow)[j] =
                    ((const uint16_t *)src)[base + j * step_col + ir[j] * step_dim];
            break;
        case 4:
            for (int64_t j = 0; j < cols; j++)
                ((uint32_t *)orow)[j] =
                    ((const uint32_t *)src)[base + j * step_col + ir[j] * step_dim];
            break;
        default:
            for (int64_t j = 0; j < cols; j++)
                ((uint64_t *)orow)[j] =
                    ((const uint64_t *)src)[base + j * step_col + ir[j] * step_dim];
            break;
        }
    }
}

/* self[q] += src[p] for one element, in self's dtype (half types via float). */
static inline void elem_add(char *q, const char *p, dl_dtype dt) {
    switch (dt) {
    case DL_DTYPE_F32: *(float *)q += *(const float *)p; break;
    case DL_DTYPE_F64: *(double *)q += *(const double *)p; break;
    case DL_DTYPE_F16:
        *(uint16_t *)q = dl_float_to_half(dl_half_to_float(*(uint16_t *)q) +
                                          dl_half_to_float(*(const uint16_t *)p));
        break;
    case DL_DTYPE_BF16:
        *(uint16_t *)q = dl_float_to_bf16(dl_bf16_to_float(*(uint16_t *)q) +
                                          dl_bf16_to_float(*(const uint16_t *)p));
        break;
    case DL_DTYPE_I64:
        *(int64_t *)q = (int64_t)((uint64_t) * (int64_t *)q + (uint64_t) * (const int64_t *)p);
        break;
    case DL_DTYPE_I32:
        *(int32_t *)q = (int32_t)((uint32_t) * (int32_t *)q + (uint32_t) * (const int32_t *)p);
        break;
    case DL_DTYPE_U8: *(uint8_t *)q = (uint8_t)(*(uint8_t *)q + *(const uint8_t *)p); break;
    case DL_DTYPE_BOOL: *(uint8_t *)q = (*(uint8_t *)q | *(const uint8_t *)p) != 0; break;
    default: break;
    }
}

void dl_cpu_scatter(dl_tensor *self, int dim, const dl_tensor *index, const dl_tensor *src,
                    bool add) {
    index_walk w;
    if (!index_walk_init(&w, index, self, dim)) return;
    int64_t rshape[DL_MAX_DIMS], rs[DL_MAX_DIMS];
    nonempty_dims(src, rshape, rs);
    int last = w.last;
    int64_t cols = w.cols, step_dim = w.step_dim, step_col = w.step_col;
    size_t isz = dl_dtype_size(self->dtype);
    char *dst = elem_base(self);
    const char *sp = elem_base(src);
    int64_t doff = self->offset, soff = src->offset, scol = rs[last];
    const int64_t *idx = dl_tensor_data_ptr(index);
    dl_dtype dt = self->dtype;
    /* rows write disjoint parts of self only when dim is the row dim */
    int nthr = dim == last && w.numel >= DL_PARALLEL_GRAIN ? dl_get_num_threads() : 1;
#pragma omp parallel for num_threads(nthr) if (nthr > 1)
    for (int64_t r = 0; r < w.rows; r++) {
        int64_t dbase = doff + offset_of(last, w.shape, w.base_strides, r);
        int64_t sbase = soff + offset_of(last, w.shape, rs, r);
        const int64_t *ir = idx + r * cols;
        for (int64_t j = 0; j < cols; j++) {
            char *q = dst + (dbase + j * step_col + ir[j] * step_dim) * (int64_t)isz;
            const char *p = sp + (sbase + j * scol) * (int64_t)isz;
            if (add)
                elem_add(q, p, dt);
            else
                elem_copy(q, p, isz);
        }
    }
}

/* Adds src's rows into out's rows idx[k] along dim.  Tasks own disjoint
 * (outer, column block) parts of out, so repeated indices inside a task add
 * one after the other and the result never races. */
void dl_cpu_index_add(dl_tensor *out, int dim, const int64_t *idx, int64_t nidx,
                      const dl_tensor *src) {
    enum { BLOCK = 512 };
    dl_dtype dt = out->dtype;
    size_t isz = dl_dtype_size(dt);
    int64_t outer = 1, inner = 1, size = out->ndim ? out->shape[dim] : 1;
    for (int d = 0; d < dim; d++) outer *= out->shape[d];
    for (int d = dim + 1; d < out->ndim; d++) inner *= out->shape[d];
    char *dst = dl_tensor_data_ptr(out);      /* out is (outer, size, inner) */
    const char *sp = dl_tensor_data_ptr(src); /* src is (outer, nidx, inner) */
    int64_t blocks = (inner + BLOCK - 1) / BLOCK, tasks = outer * blocks;
    int nthr = tasks > 1 && outer * nidx * inner >= DL_PARALLEL_GRAIN ? dl_get_num_threads() : 1;
#pragma omp parallel for num_threads(nthr) if (nthr > 1)
    for (int64_t t = 0; t < tasks; t++) {
        int64_t o = t / blocks, c0 = (t % blocks) * BLOCK;
        int64_t c1 = c0 + BLOCK < inner ? c0 + BLOCK : inner;
        for (int64_t k = 0; k < nidx; k++) {
            int64_t drow = (o * size + idx[k]) * inner, srow = (o * nidx + k) * inner;
            if (dt == DL_DTYPE_F32) {
                float *q = (float *)dst + drow;
                const float *p = (const float *)sp + srow;
                for (int64_t j = c0; j < c1; j++) q[j] += p[j];
            } else if (dt == DL_DTYPE_F64) {
                double *q = (double *)dst + drow;
                const double *p = (const double *)sp + srow;
                for (int64_t j = c0; j < c1; j++) q[j] += p[j];
            } else {
                for (int64_t j = c0; j < c1; j++)
                    elem_add(dst + (drow + j) * (int64_t)isz, sp + (srow + j) * (int64_t)isz, dt);
            }
        }
    }
}

/* --- sort ------------------------------------------------------------------------
 * Every value becomes a uint64 key whose unsigned order is the wanted order:
 * floats by their IEEE bits (sign-folded, -0 taken as +0, NaN above +inf),
 * integers with the sign bit flipped; descending complements the key.  A
 * stable merge sort of (key, position) pairs then gives values and indices. */

typedef struct {
    uint64_t key;
    int64_t pos;
} sort_item;

static inline uint64_t key_of_double(double v) {
    if (v != v) return UINT64_MAX;
    if (v == 0) v = 0; /* -0 == +0 */
    uint64_t u;
    memcpy(&u, &v, 8);
    return (u >> 63) ? ~u : u | (UINT64_C(1) << 63);
}

/* The order of items: by key, then by position (so ties keep input order). */
static inline bool item_less(sort_item a, sort_item b) {
    return a.key < b.key || (a.key == b.key && a.pos < b.pos);
}

static inline uint64_t key_of_int(int64_t v) {
    return (uint64_t)v ^ (UINT64_C(1) << 63);
}

static void fill_keys(sort_item *a, const char *p, int64_t n, int64_t stride_bytes, dl_dtype dt,
                      bool descending) {
    uint64_t flip = descending ? UINT64_MAX : 0;
    for (int64_t i = 0; i < n; i++, p += stride_bytes) {
        uint64_t k;
        switch (dt) {
        case DL_DTYPE_F32: k = key_of_double(*(const float *)p); break;
        case DL_DTYPE_F64: k = key_of_double(*(const double *)p); break;
        case DL_DTYPE_F16: k = key_of_double(dl_half_to_float(*(const uint16_t *)p)); break;
        case DL_DTYPE_BF16: k = key_of_double(dl_bf16_to_float(*(const uint16_t *)p)); break;
        case DL_DTYPE_I64: k = key_of_int(*(const int64_t *)p); break;
        case DL_DTYPE_I32: k = key_of_int(*(const int32_t *)p); break;
        default: k = key_of_int(*(const uint8_t *)p); break; /* uint8, bool */
        }
        a[i].key = k ^ flip;
        a[i].pos = i;
    }
}

/* Ascending sort of a[0..n) by (key, position); tmp has room for n items. */
static void sort_items(sort_item *a, sort_item *tmp, int64_t n) {
    enum { RUN = 16 };
    for (int64_t lo = 0; lo < n; lo += RUN) {
        int64_t hi = lo + RUN < n ? lo + RUN : n;
        for (int64_t i = lo + 1; i < hi; i++) {
            sort_item x = a[i];
            int64_t j = i;
            while (j > lo && item_less(x, a[j - 1])) {
                a[j] = a[j - 1];
                j--;
            }
            a[j] = x;
        }
    }
    sort_item *from = a, *to = tmp;
    for (int64_t width = RUN; width < n; width *= 2) {
        for (int64_t lo = 0; lo < n; lo += 2 * width) {
            int64_t mid = lo + width < n ? lo + width : n;
            int64_t hi = lo + 2 * width < n ? lo + 2 * width : n;
            int64_t i = lo, j = mid, o = lo;
            if (mid < hi && !item_less(from[mid], from[mid - 1])) { /* already in order */
                memcpy(to + lo, from + lo, sizeof(sort_item) * (size_t)(hi - lo));
                continue;
            }
            while (i < mid && j < hi) to[o++] = item_less(from[j], from[i]) ? from[j++] : from[i++];
            while (i < mid) to[o++] = from[i++];
            while (j < hi) to[o++] = from[j++];
        }
        sort_item *t = from;
        from = to;
        to = t;
    }
    if (from != a) memcpy(a, from, sizeof(sort_item) * (size_t)n);
}

/* Moves the k smallest items of a[0..n) (by key, then position) to a[0..k),
 * in no particular order: quickselect with a median-of-3 pivot, falling back
 * to a full sort when the partitions keep coming out lopsided. */
static void select_items(sort_item *a, sort_item *tmp, int64_t n, int64_t k) {
    int64_t lo = 0, hi = n - 1, target = k - 1;
    for (int budget = 64; hi > lo; budget--) {
        if (budget == 0) {
            sort_items(a + lo, tmp, hi - lo + 1);
            return;
        }
        int64_t mid = lo + (hi - lo) / 2;
        sort_item t;
        if (item_less(a[mid], a[lo])) t = a[mid], a[mid] = a[lo], a[lo] = t;
        if (item_less(a[hi], a[lo])) t = a[hi], a[hi] = a[lo], a[lo] = t;
        if (item_less(a[hi], a[mid])) t = a[hi], a[hi] = a[mid], a[mid] = t;
        sort_item pivot = a[mid];
        int64_t i = lo, j = hi;
        while (i <= j) {
            while (item_less(a[i], pivot)) i++;
            while (item_less(pivot, a[j])) j--;
            if (i <= j) {
                t = a[i], a[i] = a[j], a[j] = t;
                i++;
                j--;
            }
        }
        /* now a[lo..j] <= pivot <= a[i..hi], and a[j+1..i-1] == pivot */
        if (target <= j)
            hi = j;
        else if (target >= i)
            lo = i;
        else
            return;
    }
}

int dl_cpu_sort(const dl_tensor *x, int dim, bool descending, int64_t k, dl_tensor *values,
                dl_tensor *indices) {
    int64_t n = x->shape[dim];
    int64_t numel_out = dl_tensor_numel(indices);
    if (numel_out == 0) return 0;
    /* slices: every position of the dims other than dim */
    int64_t oshape[DL_MAX_DIMS], ostrides[DL_MAX_DIMS];
    int ond = 0;
    for (int d = 0; d < x->ndim; d++)
        if (d != dim) {
            oshape[ond] = x->shape[d];
            ostrides[ond++] = x->strides[d];
        }
    int64_t slices = numel_out / k, inner = 1;
    for (int d = dim + 1; d < x->ndim; d++) inner *= x->shape[d];
    size_t isz = dl_dtype_size(x->dtype);
    int64_t xstride_bytes = x->strides[dim] * (int64_t)isz;
    const char *xbase = dl_tensor_data_ptr(x);
    char *vbase = values ? dl_tensor_data_ptr(values) : NULL;
    int64_t *ibase = dl_tensor_data_ptr(indices);
    int nthr = slices > 1 && slices * n >= DL_PARALLEL_GRAIN ? dl_get_num_threads() : 1;
    if (nthr > slices) nthr = (int)slices;
    int failed = 0;
#pragma omp parallel num_threads(nthr) if (nthr > 1)
    {
        sort_item *buf = malloc(sizeof(sort_item) * (size_t)(2 * n));
        if (!buf) {
#pragma omp atomic write
            failed = 1;
        }
#pragma omp for schedule(static)
        for (int64_t s = 0; s < slices; s++) {
            if (!buf) continue;
            const char *xs = xbase + offset_of(ond, oshape, ostrides, s) * (int64_t)isz;
            /* output slice s: (s / inner, :, s % inner) of a (.., k, inner) layout */
            int64_t obase = (s / inner) * k * inner + s % inner;
            fill_keys(buf, xs, n, xstride_bytes, x->dtype, descending);
            if (k < n / 4) { /* a few of many (topk): select, then order those */
                select_items(buf, buf + n, n, k);
                sort_items(buf, buf + n, k);
            } else {
                sort_items(buf, buf + n, n);
            }
            for (int64_t i = 0; i < k; i++) {
                int64_t o = obase + i * inner;
                ibase[o] = buf[i].pos;
                if (vbase)
                    elem_copy(vbase + o * (int64_t)isz, xs + buf[i].pos * xstride_bytes, isz);
            }
        }
        free(buf);
    }
    if (failed) return dl_error("sort: out of memory for a slice of %lld elements", (long long)n);
    return 0;
}

/* --- one_hot, nonzero, masked_select ------------------------------------------ */

void dl_cpu_one_hot(dl_tensor *out, const dl_tensor *labels) {
    int64_t n = dl_tensor_numel(labels), c = out->shape[out->ndim - 1];
    const int64_t *lab = dl_tensor_data_ptr(labels);
    int64_t *o = dl_tensor_data_ptr(out); /* out is (n, c) */
    for (int64_t i = 0; i < n; i++) o[i * c + lab[i]] = 1;
}

/* Whether the element at p is non-zero (NaN is). */
static inline bool elem_nonzero(const char *p, dl_dtype dt) {
    switch (dt) {
    case DL_DTYPE_F32: return *(const float *)p != 0;
    case DL_DTYPE_F64: return *(const double *)p != 0;
    case DL_DTYPE_F16:
    case DL_DTYPE_BF16: return (*(const uint16_t *)p & 0x7fff) != 0;
    case DL_DTYPE_I64: return *(const int64_t *)p != 0;
    case DL_DTYPE_I32: return *(const int32_t *)p != 0;
    default: return *(const uint8_t *)p != 0;
    }
}

/* Odometer over a shape: advances pos and the byte offsets of up to two
 * tensors in row-major order. */
typedef struct {
    int ndim;
    int64_t shape[DL_MAX_DIMS], pos[DL_MAX_DIMS];
    int64_t step[2][DL_MAX_DIMS]; /* bytes */
    int64_t off[2];
} odometer;

static void odo_init(odometer *it, const dl_tensor *a, const dl_tensor *b) {
    it->ndim = a->ndim;
    for (int d = 0; d < a->ndim; d++) {
        it->shape[d] = a->shape[d];
        it->pos[d] = 0;
        it->step[0][d] = a->strides[d] * (int64_t)dl_dtype_size(a->dtype);
        it->step[1][d] = b ? b->strides[d] * (int64_t)dl_dtype_size(b->dtype) : 0;
    }
    it->off[0] = it->off[1] = 0;
}

static inline void odo_next(odometer *it) {
    for (int d = it->ndim - 1; d >= 0; d--) {
        it->off[0] += it->step[0][d];
        it->off[1] += it->step[1][d];
        if (++it->pos[d] < it->shape[d]) return;
        it->off[0] -= it->step[0][d] * it->shape[d];
        it->off[1] -= it->step[1][d] * it->shape[d];
        it->pos[d] = 0;
    }
}

int64_t dl_cpu_count_nonzero(const dl_tensor *x) {
    int64_t n = dl_tensor_numel(x), count = 0;
    const char *p = dl_tensor_data_ptr(x);
    if (dl_tensor_is_contiguous(x)) {
        size_t isz = dl_dtype_size(x->dtype);
        for (int64_t i = 0; i < n; i++) count += elem_nonzero(p + i * (int64_t)isz, x->dtype);
        return count;
    }
    odometer it;
    odo_init(&it, x, NULL);
    for (int64_t i = 0; i < n; i++, odo_next(&it)) count += elem_nonzero(p + it.off[0], x->dtype);
    return count;
}

void dl_cpu_nonzero(dl_tensor *out, const dl_tensor *x) {
    int64_t n = dl_tensor_numel(x);
    const char *p = dl_tensor_data_ptr(x);
    int64_t *o = dl_tensor_data_ptr(out); /* out is (count, ndim) */
    odometer it;
    odo_init(&it, x, NULL);
    for (int64_t i = 0; i < n; i++, odo_next(&it))
        if (elem_nonzero(p + it.off[0], x->dtype)) {
            for (int d = 0; d < x->ndim; d++) *o++ = it.pos[d];
        }
}

void dl_cpu_masked_select(dl_tensor *out, const dl_tensor *x, const dl_tensor *mask) {
    int64_t n = dl_tensor_numel(x);
    size_t isz = dl_dtype_size(x->dtype);
    const char *px = dl_tensor_data_ptr(x), *pm = dl_tensor_data_ptr(mask);
    char *o = dl_tensor_data_ptr(out); /* out is (count) */
    odometer it;
    odo_init(&it, x, mask);
    for (int64_t i = 0; i < n; i++, odo_next(&it))
        if (pm[it.off[1]]) {
            elem_copy(o, px + it.off[0], isz);
            o += isz;
        }
}

void dl_cpu_masked_scatter(dl_tensor *out, const dl_tensor *mask, const dl_tensor *src) {
    int64_t n = dl_tensor_numel(out);
    size_t isz = dl_dtype_size(out->dtype);
    char *po = dl_tensor_data_ptr(out);
    const char *pm = dl_tensor_data_ptr(mask);
    const char *s = dl_tensor_data_ptr(src); /* src is (count), contiguous */
    odometer it;
    odo_init(&it, out, mask);
    for (int64_t i = 0; i < n; i++, odo_next(&it))
        if (pm[it.off[1]]) {
            elem_copy(po + it.off[0], s, isz);
            s += isz;
        }
}

/* --- tril / triu ------------------------------------------------------------------ */

void dl_cpu_tri_(dl_tensor *x, int64_t diagonal, bool upper) {
    int nd = x->ndim;
    int64_t rows = x->shape[nd - 2], cols = x->shape[nd - 1];
    int64_t numel = dl_tensor_numel(x);
    if (numel == 0) return;
    int64_t batch = numel / (rows * cols);
    size_t isz = dl_dtype_size(x->dtype);
    int64_t sr = x->strides[nd - 2], sc = x->strides[nd - 1];
    char *base = dl_tensor_data_ptr(x);
    int nthr = numel >= DL_PARALLEL_GRAIN ? dl_get_num_threads() : 1;
#pragma omp parallel for num_threads(nthr) if (nthr > 1)
    for (int64_t br = 0; br < batch * rows; br++) {
        int64_t b = br / rows, i = br % rows;
        char *row = base + (offset_of(nd - 2, x->shape, x->strides, b) + i * sr) * (int64_t)isz;
        /* keep j - i <= diagonal (lower) or j - i >= diagonal (upper) */
        int64_t lo, hi;
        if (upper) {
            lo = 0;
            hi = i + diagonal;
        } else {
            lo = i + diagonal + 1;
            hi = cols;
        }
        if (lo < 0) lo = 0;
        if (hi > cols) hi = cols;
        if (lo >= hi) continue;
        if (sc == 1)
            memset(row + lo * (int64_t)isz, 0, (size_t)(hi - lo) * isz);
        else
            for (int64_t j = lo; j < hi; j++) memset(row + j * sc * (int64_t)isz, 0, isz);
    }
}
