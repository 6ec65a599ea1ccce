/* tensor.c - tensor lifetime, views and copies (see tensor.h).
 * Invariant: a tensor's elements lie inside its storage; views check bounds
 * when they are made, so kernels never need to. */
#include "tensor.h"
#include "iter.h"
#include "parallel.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* --- lifetime ---------------------------------------------------------- */

static int check_shape(const char *op, int ndim, const int64_t *shape, int64_t *numel) {
    if (ndim < 0 || ndim > DL_MAX_DIMS)
        return dl_error("%s: %d dimensions requested; at most %d are supported", op, ndim,
                        DL_MAX_DIMS);
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0)
            return dl_error("%s: negative size %lld in dimension %d", op, (long long)shape[i],
                            i + 1);
        if (shape[i] && n > INT64_MAX / 16 / shape[i]) return dl_error("%s: shape too large", op);
        n *= shape[i];
    }
    *numel = n;
    return 0;
}

static dl_tensor *tensor_alloc(void) {
    dl_tensor *t = dl_zalloc(sizeof *t, "out of memory");
    if (t) t->refcount = 1;
    return t;
}

void dl_contiguous_strides(int ndim, const int64_t *shape, int64_t *strides) {
    /* unsigned: a zero-size tensor may have other dimensions whose product
     * overflows (its strides are never used to address memory); wrapping is
     * defined where signed overflow is not */
    uint64_t s = 1;
    for (int i = ndim - 1; i >= 0; i--) {
        strides[i] = (int64_t)s;
        s *= shape[i] > 1 ? (uint64_t)shape[i] : 1u;
    }
}

dl_tensor *dl_tensor_empty(int ndim, const int64_t *shape, dl_dtype dtype, dl_device dev) {
    int64_t numel;
    if (check_shape("empty", ndim, shape, &numel)) return NULL;
    dl_storage *s = dl_storage_new((size_t)numel * dl_dtype_size(dtype), dev);
    if (!s) return NULL;
    dl_tensor *t = tensor_alloc();
    if (!t) {
        dl_storage_release(s);
        return NULL;
    }
    t->storage = s;
    t->ndim = ndim;
    t->dtype = dtype;
    if (ndim) memcpy(t->shape, shape, sizeof(int64_t) * ndim);
    dl_contiguous_strides(ndim, shape, t->strides);
    return t;
}

/* Whether t's elements fill a block of numel elements exactly once: sorted by
 * stride (size-1 dimensions aside), each stride is the product of the sizes
 * of the dimensions with smaller strides.  order gets the dimensions longer
 * than 1, the smallest stride first; returns how many, or -1 when t is not
 * dense. */
static int dense_non_overlapping(const dl_tensor *t, int *order) {
    int n = 0;
    for (int i = 0; i < t->ndim; i++) {
        if (t->shape[i] == 0) return -1;
        if (t->shape[i] != 1) order[n++] = i;
    }
    for (int i = 1; i < n; i++) /* insertion sort: smallest stride first */
        for (int j = i; j > 0 && t->strides[order[j]] < t->strides[order[j - 1]]; j--) {
            int k = order[j];
            order[j] = order[j - 1];
            order[j - 1] = k;
        }
    int64_t expect = 1;
    for (int i = 0; i < n; i++) {
        if (t->strides[order[i]] != expect) return -1;
        expect *= t->shape[order[i]];
    }
    return n;
}

void dl_tensor_layout_strides(const dl_tensor *like, int64_t *strides) {
    int order[DL_MAX_DIMS];
    dl_contiguous_strides(like->ndim, like->shape, strides);
    if (dl_tensor_is_contiguous(like) || dense_non_overlapping(like, order) < 0) return;
    /* same strides as like for every dimension longer than 1; a size-1
     * dimension takes the stride a contiguous tensor would give it, which no
     * index ever multiplies */
    for (int i = 0; i < like->ndim; i++)
        if (like->shape[i] != 1) strides[i] = like->strides[i];
}

dl_tensor *dl_tensor_empty_like_layout(const dl_tensor *like, dl_dtype dtype, dl_device dev) {
    dl_tensor *t = dl_tensor_empty(like->ndim, like->shape, dtype, dev);
    if (t) dl_tensor_layout_strides(like, t->strides);
    return t;
}

dl_tensor *dl_tensor_full(int ndim, const int64_t *shape, double value, dl_dtype dtype,
                          dl_device dev) {
    dl_tensor *t = dl_tensor_empty(ndim, shape, dtype, dev);
    if (t && dl_tensor_fill_(t, value)) {
        dl_tensor_release(t);
        return NULL;
    }
    return t;
}

dl_tensor *dl_tensor_zeros(int ndim, const int64_t *shape, dl_dtype dtype, dl_device dev) {
    dl_tensor *t = dl_tensor_empty(ndim, shape, dtype, dev);
    if (t && dev.type == DL_DEVICE_CPU)
        memset(t->storage->data, 0, t->storage->nbytes);
    else if (t && dl_tensor_fill_(t, 0)) {
        dl_tensor_release(t);
        return NULL;
    }
    return t;
}

dl_tensor *dl_tensor_scalar(double value, dl_dtype dtype) {
    return dl_tensor_full(0, NULL, value, dtype, DL_CPU);
}

dl_tensor *dl_tensor_new_view(dl_storage *s, int64_t offset, int ndim, const int64_t *shape,
                              const int64_t *strides, dl_dtype dtype) {
    dl_tensor *t = tensor_alloc();
    if (!t) return NULL;
    dl_storage_retain(s);
    t->storage = s;
    t->offset = offset;
    t->ndim = ndim;
    t->dtype = dtype;
    if (ndim) {
        memcpy(t->shape, shape, sizeof(int64_t) * ndim);
        memcpy(t->strides, strides, sizeof(int64_t) * ndim);
    }
    return t;
}

dl_tensor *dl_tensor_retain(dl_tensor *t) {
    if (t) __atomic_add_fetch(&t->refcount, 1, __ATOMIC_RELAXED);
    return t;
}

/* The autograd hook (tensor.h). */
void (*dl_tensor_release_autograd)(dl_tensor *t);

void dl_tensor_release(dl_tensor *t) {
    if (!t || __atomic_sub_fetch(&t->refcount, 1, __ATOMIC_ACQ_REL) != 0) return;
    if (dl_tensor_release_autograd) dl_tensor_release_autograd(t);
    dl_tensor_release(t->grad);
    dl_storage_release(t->storage);
    free(t);
}

/* --- inspection -------------------------------------------------------- */

int64_t dl_tensor_numel(const dl_tensor *t) {
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= t->shape[i];
    return n;
}

bool dl_tensor_is_contiguous(const dl_tensor *t) {
    uint64_t s = 1; /* unsigned, as in dl_contiguous_strides (zero-size tensors) */
    for (int i = t->ndim - 1; i >= 0; i--) {
        if (t->shape[i] == 1) continue;
        if (t->shape[i] == 0) return true;
        if (t->strides[i] != (int64_t)s) return false;
        s *= (uint64_t)t->shape[i];
    }
    return true;
}

dl_device dl_tensor_device(const dl_tensor *t) {
    return t->storage->device;
}

size_t dl_tensor_itemsize(const dl_tensor *t) {
    return dl_dtype_size(t->dtype);
}

void *dl_tensor_data_ptr(const dl_tensor *t) {
    return (char *)t->storage->data + t->offset * (int64_t)dl_dtype_size(t->dtype);
}

int dl_wrap_dim(const char *op, int dim, int ndim) {
    int n = ndim > 0 ? ndim : 1;
    if (dim < -n || dim >= n) {
        /* report in the Lua convention: 1-based, negatives from the end */
        dl_error("%s: dimension %d out of range for a %d-dimensional tensor (expected %d to %d)",
                 op, dim >= 0 ? dim + 1 : dim, ndim, -n, n);
        return -1;
    }
    return dim < 0 ? dim + n : dim;
}

const char *dl_shape_str(int ndim, const int64_t *shape, char *buf, size_t n) {
    size_t len = 0;
    len += snprintf(buf + len, n - len, "[");
    for (int i = 0; i < ndim && len < n; i++)
        len += snprintf(buf + len, n - len, i ? ", %lld" : "%lld", (long long)shape[i]);
    if (len < n) snprintf(buf + len, n - len, "]");
    return buf;
}

bool dl_shape_equal(const dl_tensor *a, const dl_tensor *b) {
    if (a->ndim != b->ndim) return false;
    for (int i = 0; i < a->ndim; i++)
        if (a->shape[i] != b->shape[i]) return false;
    return true;
}

dl_dtype dl_result_type(const dl_tensor *a, const dl_tensor *b) {
    bool za = a->ndim == 0, zb = b->ndim == 0;
    if (za == zb) return dl_promote_types(a->dtype, b->dtype);
    const dl_tensor *dim = za ? b : a, *zero = za ? a : b;
    if (dl_dtype_kind(zero->dtype) > dl_dtype_kind(dim->dtype)) {
        /* the scalar raises the category: its own type within that category,
         * but a float scalar against ints gives the default float */
        if (dl_dtype_kind(zero->dtype) == DL_KIND_FLOAT) return zero->dtype;
        return zero->dtype == DL_DTYPE_BOOL ? dim->dtype : zero->dtype;
    }
    return dim->dtype;
}

/* --- views ------------------------------------------------------------- */

static dl_tensor *make_view(dl_tensor *t, int ndim, const int64_t *shape, const int64_t *strides,
                            int64_t offset) {
    return dl_tensor_new_view(t->storage, offset, ndim, shape, strides, t->dtype);
}

/* Resolves one -1 in shape against numel; returns 0 or an error naming op. */
static int infer_shape(const char *op, const dl_tensor *t, int ndim, const int64_t *in,
                       int64_t *out) {
    if (ndim > DL_MAX_DIMS)
        return dl_error("%s: %d dimensions requested; at most %d are supported", op, ndim,
                        DL_MAX_DIMS);
    int64_t numel = dl_tensor_numel(t), known = 1;
    int infer = -1;
    for (int i = 0; i < ndim; i++) {
        out[i] = in[i];
        if (in[i] == -1) {
            if (infer >= 0) return dl_error("%s: only one dimension can be -1", op);
            infer = i;
        } else if (in[i] < 0) {
            return dl_error("%s: invalid size %lld in dimension %d", op, (long long)in[i], i + 1);
        } else {
            known *= in[i];
        }
    }
    char b1[128], b2[128];
    if (infer >= 0) {
        if (known == 0 || numel % known != 0)
            return dl_error("%s: shape %s is invalid for input of size %lld", op,
                            dl_shape_str(ndim, in, b1, sizeof b1), (long long)numel);
        out[infer] = numel / known;
    } else if (known != numel) {
        return dl_error("%s: shape %s is invalid for input of size %lld (shape %s)", op,
                        dl_shape_str(ndim, in, b1, sizeof b1), (long long)numel,
                        dl_shape_str(t->ndim, t->shape, b2, sizeof b2));
    }
    return 0;
}

/* Strides for viewing t with newshape without copying, or false (PyTorch's
 * computeStride: chunks of contiguous old dims map onto new dims). */
static bool view_strides(const dl_tensor *t, int ndim, const int64_t *newshape, int64_t *out) {
    if (t->ndim == 0) {
        for (int i = 0; i < ndim; i++) out[i] = 1;
        return true;
    }
    int64_t numel = dl_tensor_numel(t);
    if (numel == 0) {
        dl_contiguous_strides(ndim, newshape, out);
        return true;
    }
    int view_d = ndim - 1;
    int64_t chunk_base_stride = t->strides[t->ndim - 1];
    int64_t tensor_numel = 1, view_numel = 1;
    for (int d = t->ndim - 1; d >= 0; d--) {
        tensor_numel *= t->shape[d];
        if (d == 0 ||
            (t->shape[d - 1] != 1 && t->strides[d - 1] != tensor_numel * chunk_base_stride)) {
            while (view_d >= 0 && (view_numel < tensor_numel || newshape[view_d] == 1)) {
                out[view_d] = view_numel * chunk_base_stride;
                view_numel *= newshape[view_d];
                view_d--;
            }
            if (view_numel != tensor_numel) return false;
            if (d > 0) {
                chunk_base_stride = t->strides[d - 1];
                tensor_numel = 1;
                view_numel = 1;
            }
        }
    }
    return view_d == -1;
}

dl_tensor *dl_tensor_view(dl_tensor *t, int ndim, const int64_t *shape) {
    int64_t s[DL_MAX_DIMS], st[DL_MAX_DIMS];
    if (infer_shape("view", t, ndim, shape, s)) return NULL;
    if (!view_strides(t, ndim, s, st)) {
        char b[128];
        dl_error("view: size %s is not compatible with the input's strides (use reshape, or "
                 "contiguous() first)",
                 dl_shape_str(ndim, s, b, sizeof b));
        return NULL;
    }
    return make_view(t, ndim, s, st, t->offset);
}

dl_tensor *dl_tensor_reshape(dl_tensor *t, int ndim, const int64_t *shape) {
    int64_t s[DL_MAX_DIMS], st[DL_MAX_DIMS];
    if (infer_shape("reshape", t, ndim, shape, s)) return NULL;
    if (view_strides(t, ndim, s, st)) return make_view(t, ndim, s, st, t->offset);
    dl_tensor *c = dl_tensor_contiguous(t);
    if (!c) return NULL;
    dl_tensor *v = dl_tensor_view(c, ndim, s);
    dl_tensor_release(c);
    return v;
}

dl_tensor *dl_tensor_transpose(dl_tensor *t, int d0, int d1) {
    if ((d0 = dl_wrap_dim("transpose", d0, t->ndim)) < 0) return NULL;
    if ((d1 = dl_wrap_dim("transpose", d1, t->ndim)) < 0) return NULL;
    int64_t s[DL_MAX_DIMS], st[DL_MAX_DIMS];
    memcpy(s, t->shape, sizeof s);
    memcpy(st, t->strides, sizeof st);
    if (t->ndim > 0) {
        s[d0] = t->shape[d1];
        s[d1] = t->shape[d0];
        st[d0] = t->strides[d1];
        st[d1] = t->strides[d0];
    }
    return make_view(t, t->ndim, s, st, t->offset);
}

dl_tensor *dl_tensor_permute(dl_tensor *t, const int *dims) {
    int64_t s[DL_MAX_DIMS], st[DL_MAX_DIMS];
    bool seen[DL_MAX_DIMS] = {0};
    for (int i = 0; i < t->ndim; i++) {
        int d = dl_wrap_dim("permute", dims[i], t->ndim);
        if (d < 0) return NULL;
        if (seen[d]) {
            dl_error("permute: dimension %d repeats", d + 1);
            return NULL;
        }
        seen[d] = true;
        s[i] = t->shape[d];
        st[i] = t->strides[d];
    }
    return make_view(t, t->ndim, s, st, t->offset);
}

/* A view of t at offset with dimension dim (valid, 0-based) left out. */
static dl_tensor *view_without_dim(dl_tensor *t, int dim, int64_t offset) {
    int64_t s[DL_MAX_DIMS], st[DL_MAX_DIMS];
    int n = 0;
    for (int i = 0; i < t->ndim; i++)
        if (i != dim) {
            s[n] = t->shape[i];
            st[n++] = t->strides[i];
        }
    return make_view(t, n, s, st, offset);
}

dl_tensor *dl_tensor_squeeze(dl_tensor *t, int dim) {
    if (t->ndim == 0) return dl_tensor_retain(t);
    if ((dim = dl_wrap_dim("squeeze", dim, t->ndim)) < 0) return NULL;
    if (t->shape[dim] != 1) return make_view(t, t->ndim, t->shape, t->strides, t->offset);
    return view_without_dim(t, dim, t->offset);
}

dl_tensor *dl_tensor_squeeze_all(dl_tensor *t) {
    int64_t s[DL_MAX_DIMS], st[DL_MAX_DIMS];
    int n = 0;
    for (int i = 0; i < t->ndim; i++)
        if (t->shape[i] != 1) {
            s[n] = t->shape[i];
            st[n++] = t->strides[i];
        }
    return make_view(t, n, s, st, t->offset);
}

dl_tensor *dl_tensor_unsqueeze(dl_tensor *t, int dim) {
    if (t->ndim >= DL_MAX_DIMS) {
        dl_error("unsqueeze: tensor already has %d dimensions (the maximum)", DL_MAX_DIMS);
        return NULL;
    }
    if ((dim = dl_wrap_dim("unsqueeze", dim, t->ndim + 1)) < 0) return NULL;
    int64_t s[DL_MAX_DIMS], st[DL_MAX_DIMS];
    for (int i = 0, j = 0; i <= t->ndim; i++) {
        if (i == dim) {
            s[i] = 1;
            st[i] = dim < t->ndim ? t->shape[dim] * t->strides[dim] : 1;
        } else {
            s[i] = t->shape[j];
            st[i] = t->strides[j++];
        }
    }
    return make_view(t, t->ndim + 1, s, st, t->offset);
}

dl_tensor *dl_tensor_flatten(dl_tensor *t, int start, int end) {
    if (t->ndim == 0) {
        int64_t one = 1;
        return dl_tensor_reshape(t, 1, &one);
    }
    if ((start = dl_wrap_dim("flatten", start, t->ndim)) < 0) return NULL;
    if ((end = dl_wrap_dim("flatten", end, t->ndim)) < 0) return NULL;
    if (start > end) {
        dl_error("flatten: start dimension %d comes after end dimension %d", start + 1, end + 1);
        return NULL;
    }
    int64_t s[DL_MAX_DIMS];
    int n = 0;
    for (int i = 0; i < start; i++) s[n++] = t->shape[i];
    int64_t m = 1;
    for (int i = start; i <= end; i++) m *= t->shape[i];
    s[n++] = m;
    for (int i = end + 1; i < t->ndim; i++) s[n++] = t->shape[i];
    return dl_tensor_reshape(t, n, s);
}

dl_tensor *dl_tensor_narrow(dl_tensor *t, int dim, int64_t start, int64_t length) {
    if (t->ndim == 0) {
        dl_error("narrow: cannot narrow a 0-dimensional tensor");
        return NULL;
    }
    if ((dim = dl_wrap_dim("narrow", dim, t->ndim)) < 0) return NULL;
    int64_t size = t->shape[dim];
    if (start < 0) start += size;
    if (start < 0 || length < 0 || start > size || start + length > size) {
        dl_error("narrow: start %lld and length %lld exceed dimension %d of size %lld",
                 (long long)start + 1, (long long)length, dim + 1, (long long)size);
        return NULL;
    }
    int64_t s[DL_MAX_DIMS];
    memcpy(s, t->shape, sizeof s);
    s[dim] = length;
    return make_view(t, t->ndim, s, t->strides, t->offset + start * t->strides[dim]);
}

dl_tensor *dl_tensor_select(dl_tensor *t, int dim, int64_t index) {
    if (t->ndim == 0) {
        dl_error("select: cannot index a 0-dimensional tensor");
        return NULL;
    }
    if ((dim = dl_wrap_dim("select", dim, t->ndim)) < 0) return NULL;
    int64_t size = t->shape[dim];
    if (index < -size || index >= size) {
        dl_error("index %lld is out of range for dimension %d of size %lld",
                 (long long)(index >= 0 ? index + 1 : index), dim + 1, (long long)size);
        return NULL;
    }
    if (index < 0) index += size;
    return view_without_dim(t, dim, t->offset + index * t->strides[dim]);
}

dl_tensor *dl_tensor_expand(dl_tensor *t, int ndim, const int64_t *shape) {
    char b1[128], b2[128];
    if (ndim < t->ndim || ndim > DL_MAX_DIMS) {
        dl_error("expand: cannot expand shape %s to %s",
                 dl_shape_str(t->ndim, t->shape, b1, sizeof b1),
                 dl_shape_str(ndim, shape, b2, sizeof b2));
        return NULL;
    }
    int64_t s[DL_MAX_DIMS], st[DL_MAX_DIMS];
    int lead = ndim - t->ndim;
    for (int i = 0; i < ndim; i++) {
        int j = i - lead;
        int64_t want = shape[i];
        if (j < 0) {
            if (want < 0) {
                dl_error("expand: -1 is not allowed in a new leading dimension");
                return NULL;
            }
            s[i] = want;
            st[i] = 0;
        } else if (want == -1 || want == t->shape[j]) {
            s[i] = t->shape[j];
            st[i] = t->strides[j];
        } else if (t->shape[j] == 1 && want >= 0) {
            s[i] = want;
            st[i] = 0;
        } else {
            dl_error("expand: the size of dimension %d (%lld) must match %lld, or be 1; cannot "
                     "expand %s to %s",
                     j + 1, (long long)t->shape[j], (long long)want,
                     dl_shape_str(t->ndim, t->shape, b1, sizeof b1),
                     dl_shape_str(ndim, shape, b2, sizeof b2));
            return NULL;
        }
    }
    return make_view(t, ndim, s, st, t->offset);
}

dl_tensor *dl_tensor_as_strided(dl_tensor *t, int ndim, const int64_t *shape,
                                const int64_t *strides, int64_t offset) {
    int64_t numel;
    if (check_shape("as_strided", ndim, shape, &numel)) return NULL;
    int64_t hi = offset, cap = (int64_t)(t->storage->nbytes / dl_dtype_size(t->dtype));
    for (int i = 0; i < ndim; i++) {
        if (strides[i] < 0) {
            dl_error("as_strided: negative strides are not supported");
            return NULL;
        }
        if (shape[i] > 0) hi += (shape[i] - 1) * strides[i];
    }
    if (offset < 0 || (numel > 0 && hi >= cap)) {
        dl_error("as_strided: the view reaches element %lld of a storage of %lld", (long long)hi,
                 (long long)cap);
        return NULL;
    }
    return make_view(t, ndim, shape, strides, offset);
}

/* --- copies ------------------------------------------------------------ */

typedef struct {
    dl_dtype dst, src;
} cast_ctx;

static void copy_loop(char **data, const int64_t *strides, int64_t n, void *vctx) {
    const cast_ctx *c = vctx;
    char *d = data[0], *s = data[1];
    int64_t sd = strides[0], ss = strides[1];
    if (c->dst == c->src) {
        size_t sz = dl_dtype_size(c->dst);
        if (sd == (int64_t)sz && ss == (int64_t)sz) {
            memcpy(d, s, (size_t)n * sz);
            return;
        }
        switch (sz) {
        case 1:
            for (int64_t i = 0; i < n; i++) d[i * sd] = s[i * ss];
            break;
        case 2:
            for (int64_t i = 0; i < n; i++) *(uint16_t *)(d + i * sd) = *(uint16_t *)(s + i * ss);
            break;
        case 4:
            for (int64_t i = 0; i < n; i++) *(uint32_t *)(d + i * sd) = *(uint32_t *)(s + i * ss);
            break;
        default:
            for (int64_t i = 0; i < n; i++) *(uint64_t *)(d + i * sd) = *(uint64_t *)(s + i * ss);
        }
        return;
    }
    /* common conversions get typed loops */
    if (c->dst == DL_DTYPE_F32 && c->src == DL_DTYPE_U8) {
        for (int64_t i = 0; i < n; i++) *(float *)(d + i * sd) = *(uint8_t *)(s + i * ss);
        return;
    }
    if (c->dst == DL_DTYPE_F64 && c->src == DL_DTYPE_F32) {
        for (int64_t i = 0; i < n; i++) *(double *)(d + i * sd) = *(float *)(s + i * ss);
        return;
    }
    if (c->dst == DL_DTYPE_F32 && c->src == DL_DTYPE_F64) {
        for (int64_t i = 0; i < n; i++) *(float *)(d + i * sd) = (float)*(double *)(s + i * ss);
        return;
    }
    bool as_float = dl_dtype_is_floating(c->src);
    for (int64_t i = 0; i < n; i++) {
        if (as_float)
            dl_store_f64(d + i * sd, c->dst, dl_load_f64(s + i * ss, c->src));
        else
            dl_store_i64(d + i * sd, c->dst, dl_load_i64(s + i * ss, c->src));
    }
}

/* Three float32 planes of n elements into one of n (r, g, b) triples: an
 * RGB image made channels-last.  Eight pixels at a time, interleaved in
 * registers (the tile loop took 54 us for a 224x224 image, this 25). */
typedef float f8_ __attribute__((vector_size(32)));
typedef float f16_ __attribute__((vector_size(64)));
DL_CPU_CLONES
static void interleave3_f32(float *d, const float *r, const float *g, const float *b, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        f8_ x, y, z;
        memcpy(&x, r + i, sizeof x);
        memcpy(&y, g + i, sizeof y);
        memcpy(&z, b + i, sizeof z);
        f16_ xy =
            __builtin_shufflevector(x, y, 0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15);
        f16_ zz = __builtin_shufflevector(z, z, 0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 3, 4, 5, 6, 7);
        f8_ o0 = __builtin_shufflevector(xy, zz, 0, 1, 16, 2, 3, 17, 4, 5);
        f8_ o1 = __builtin_shufflevector(xy, zz, 18, 6, 7, 19, 8, 9, 20, 10);
        f8_ o2 = __builtin_shufflevector(xy, zz, 11, 21, 12, 13, 22, 14, 15, 23);
        memcpy(d + 3 * i, &o0, sizeof o0);
        memcpy(d + 3 * i + 8, &o1, sizeof o1);
        memcpy(d + 3 * i + 16, &o2, sizeof o2);
    }
    for (; i < n; i++) {
        d[3 * i] = r[i];
        d[3 * i + 1] = g[i];
        d[3 * i + 2] = b[i];
    }
}

/* A transposing copy in cache-sized tiles: dst dense in some order
 * (contiguous, channels-last), same dtype as src, and src unit-stride along
 * a dimension k that in dst's order is not the innermost while that one is
 * not unit-stride in src (m:t():contiguous(), a permute of heads, NCHW to
 * channels-last).  The row loop would walk src with a large stride, one
 * cache line per element (or, for an image of 3 channels made
 * channels-last, run rows of 3); here each TILE x TILE block is read along
 * src's rows and written along dst's.  Returns false (nothing done) when
 * the shape is not one. */
#define TILE 32
static bool copy_transposed(dl_tensor *dst, dl_tensor *src) {
    int order[DL_MAX_DIMS];
    /* (a copy within one storage keeps the element loop's order) */
    if (dst->dtype != src->dtype || dl_tensor_numel(dst) < DL_PARALLEL_GRAIN ||
        dst->storage == src->storage)
        return false;
    int nd = dense_non_overlapping(dst, order);
    if (nd < 2) return false;
    /* both over dst's dimensions longer than 1, outermost first: dst is
     * contiguous in that order */
    int64_t shape[DL_MAX_DIMS], dstr[DL_MAX_DIMS], sstr[DL_MAX_DIMS];
    for (int i = 0; i < nd; i++) {
        int d = order[nd - 1 - i];
        shape[i] = dst->shape[d];
        dstr[i] = dst->strides[d];
        sstr[i] = src->strides[d];
    }
    if (sstr[nd - 1] == 1 || shape[nd - 1] < 2) return false;
    int k = -1;
    for (int i = 0; i < nd - 1; i++)
        if (sstr[i] == 1 && shape[i] > 1) k = i;
    if (k < 0 || shape[k] < TILE / 4) return false;
    size_t sz = dl_dtype_size(dst->dtype);
    if (sz != 1 && sz != 2 && sz != 4 && sz != 8) return false;

    /* the outer dims are all but k and the innermost */
    int64_t rows = shape[k], cols = shape[nd - 1], outer = 1;
    for (int i = 0; i < nd - 1; i++)
        if (i != k) outer *= shape[i];
    const int64_t rt = (rows + TILE - 1) / TILE, ct = (cols + TILE - 1) / TILE;
    const int64_t dk = dstr[k], sj = sstr[nd - 1];
    char *dbase = (char *)dst->storage->data + dst->offset * sz;
    const char *sbase = (const char *)src->storage->data + src->offset * sz;

    if (sz == 4 && cols == 3 && k == nd - 2) {
        /* rows of (r, g, b) float32 triples (dst dense: dk is 3): every
         * row of dst is one interleave of three src rows */
#pragma omp parallel for num_threads(dl_get_num_threads()) schedule(static)
        for (int64_t o = 0; o < outer; o++) {
            int64_t doff = 0, soff = 0, rem = o;
            for (int i = nd - 3; i >= 0; i--) {
                int64_t idx = rem % shape[i];
                rem /= shape[i];
                doff += idx * dstr[i];
                soff += idx * sstr[i];
            }
            const float *sp = (const float *)sbase + soff;
            interleave3_f32((float *)dbase + doff, sp, sp + sj, sp + 2 * sj, rows);
        }
        return true;
    }

#pragma omp parallel for num_threads(dl_get_num_threads()) schedule(static)
    for (int64_t w = 0; w < outer * rt * ct; w++) {
        int64_t o = w / (rt * ct), t = w % (rt * ct);
        int64_t i0 = t / ct * TILE, j0 = t % ct * TILE;
        int64_t i1 = i0 + TILE < rows ? i0 + TILE : rows, j1 = j0 + TILE < cols ? j0 + TILE : cols;
        /* element offsets of outer index o in dst and src */
        int64_t doff = 0, soff = 0, rem = o;
        for (int i = nd - 2; i >= 0; i--) {
            if (i == k) continue;
            int64_t idx = rem % shape[i];
            rem /= shape[i];
            doff += idx * dstr[i];
            soff += idx * sstr[i];
        }
#define TILE_LOOP(T)                                                                               \
    do {                                                                                           \
        T *d_ = (T *)dbase + doff;                                                                 \
        const T *s_ = (const T *)sbase + soff;                                                     \
        for (int64_t i = i0; i < i1; i++)                                                          \
            for (int64_t j = j0; j < j1; j++) d_[i * dk + j] = s_[i + j * sj];                     \
    } while (0)
        switch (sz) {
        case 1: TILE_LOOP(uint8_t); break;
        case 2: TILE_LOOP(uint16_t); break;
        case 4: TILE_LOOP(uint32_t); break;
        default: TILE_LOOP(uint64_t); break;
        }
#undef TILE_LOOP
    }
    return true;
}
#undef TILE

/* The cross-device copy hook (tensor.h). */
int (*dl_copy_across_devices)(dl_tensor *dst, dl_tensor *src);

int dl_tensor_copy_(dl_tensor *dst, dl_tensor *src) {
    dl_tensor *e = dl_tensor_expand(src, dst->ndim, dst->shape);
    if (!e) {
        char b1[128], b2[128];
        return dl_error("copy: cannot copy a tensor of shape %s into one of shape %s",
                        dl_shape_str(src->ndim, src->shape, b1, sizeof b1),
                        dl_shape_str(dst->ndim, dst->shape, b2, sizeof b2));
    }
    int rc = 0;
    if (dst->storage->device.type != DL_DEVICE_CPU || src->storage->device.type != DL_DEVICE_CPU) {
        rc = dl_copy_across_devices ? dl_copy_across_devices(dst, e)
                                    : dl_error("copy: device not available");
    } else {
        cast_ctx c = {dst->dtype, src->dtype};
        dl_tensor *args[2] = {dst, e};
        if (!copy_transposed(dst, e)) dl_iter_foreach(2, args, copy_loop, &c);
    }
    dl_tensor_release(e);
    if (!rc) dl_tensor_bump_version(dst);
    return rc;
}

dl_tensor *dl_tensor_clone(dl_tensor *t) {
    dl_tensor *c = dl_tensor_empty(t->ndim, t->shape, t->dtype, t->storage->device);
    if (c && dl_tensor_copy_(c, t)) {
        dl_tensor_release(c);
        return NULL;
    }
    return c;
}

dl_tensor *dl_tensor_contiguous(dl_tensor *t) {
    if (dl_tensor_is_contiguous(t)) return dl_tensor_retain(t);
    return dl_tensor_clone(t);
}

dl_tensor *dl_tensor_to_dtype(dl_tensor *t, dl_dtype dtype) {
    if (t->dtype == dtype) return dl_tensor_retain(t);
    dl_tensor *c = dl_tensor_empty(t->ndim, t->shape, dtype, t->storage->device);
    if (c && dl_tensor_copy_(c, t)) {
        dl_tensor_release(c);
        return NULL;
    }
    return c;
}

dl_tensor *dl_tensor_to_device(dl_tensor *t, dl_device dev) {
    if (dl_device_equal(t->storage->device, dev)) return dl_tensor_retain(t);
    dl_tensor *c = dl_tensor_empty(t->ndim, t->shape, t->dtype, dev);
    if (c && dl_tensor_copy_(c, t)) {
        dl_tensor_release(c);
        return NULL;
    }
    return c;
}

int dl_tensor_fill_(dl_tensor *t, double value) {
    dl_tensor *s = dl_tensor_empty(0, NULL, t->dtype, DL_CPU);
    if (!s) return -1;
    dl_store_f64(s->storage->data, t->dtype, value);
    int rc = dl_tensor_copy_(t, s);
    dl_tensor_release(s);
    return rc;
}

/* --- single elements --------------------------------------------------- */

/* The one element of t, on the CPU: *host is a new reference to t or its
 * CPU copy.  Returns -1 unless t has exactly one element. */
static int one_element(const dl_tensor *t, dl_tensor **host) {
    int64_t n = dl_tensor_numel(t);
    if (n != 1)
        return dl_error("item: only a one-element tensor converts to a number (this one has "
                        "%lld elements)",
                        (long long)n);
    *host = dl_tensor_to_device((dl_tensor *)t, DL_CPU);
    return *host ? 0 : -1;
}

int dl_tensor_item(const dl_tensor *t, double *out) {
    dl_tensor *h = NULL;
    if (one_element(t, &h)) return -1;
    *out = dl_load_f64(dl_tensor_data_ptr(h), h->dtype);
    dl_tensor_release(h);
    return 0;
}

int dl_tensor_item_i64(const dl_tensor *t, int64_t *out) {
    dl_tensor *h = NULL;
    if (one_element(t, &h)) return -1;
    *out = dl_load_i64(dl_tensor_data_ptr(h), h->dtype);
    dl_tensor_release(h);
    return 0;
}

void dl_tensor_bump_version(dl_tensor *t) {
    __atomic_add_fetch(&t->storage->version, 1, __ATOMIC_RELAXED);
}
