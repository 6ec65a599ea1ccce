/* index.c - the joining and indexing ops (see ops/index.h): argument checks,
 * shape and dtype inference, output allocation and dispatch to the CPU
 * kernels of cpu/index.c or the CUDA ones (kernels/index.h).  Joining,
 * splitting, flip and roll are built from core views and dl_tensor_copy_.
 * Invariant: every index is checked before a kernel runs, so kernels never
 * read or write out of bounds and in-place ops leave self untouched on error.
 * Devices: index tensors live on the data's device (a 0-dim CPU index or
 * value beside CUDA data is moved); outputs are allocated there.  CUDA
 * indices are checked on the device (their min and max read back) and copied
 * to the host only to name the first bad one; data-dependent sizes
 * (nonzero, masked_select) read one count back.
 *
 * Autograd: the public ops record a node when grad mode is on, an input
 * requires grad and the result is floating (index results never record).
 * Each backward formula sits after its forward and runs this family's ops on
 * the output gradient: slices of it for cat/stack/split, scatter-adds into
 * zeros for index_select/gather/sort/topk/masked_select, the inverse
 * rearrangement for flip/roll, the same mask for tril/triu.  Index tensors a
 * backward needs are saved (version-checked).  In-place ops refuse a leaf
 * that requires grad, and otherwise record a node whose input 0 is self's
 * previous history and whose output is self.  The internal *_impl functions
 * never record. */
#include "ops/index.h"
#include "autograd/autograd.h"
#include "core/iter.h"
#include "cpu/index.h"
#include "kernels/index.h"
#include "kernels/cuda.h"
#include "ops/op_util.h"
#include "ops/elementwise.h"
#include "ops/grad_util.h"
#include "ops/reduce.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* --- shared checks ---------------------------------------------------------- */

/* The device of n tensors (NULLs skipped), as dl_common_device. */
static int device_of(const char *op, int n, dl_tensor *const *ts, dl_device *dev) {
    return dl_common_device(op, n, ts, dev);
}

/* t on dev: t retained when it is there, else (a 0-dim CPU tensor beside
 * CUDA data, as dl_common_device allows) a copy moved there. */
static dl_tensor *moved_to(dl_tensor *t, dl_device dev) {
    if (dl_device_equal(dl_tensor_device(t), dev)) return dl_tensor_retain(t);
    return dl_scalar_to(t, dev);
}

static int dims_nonempty(const dl_tensor *t) {
    return t->ndim ? t->ndim : 1;
}
static int64_t size_nonempty(const dl_tensor *t, int d) {
    return t->ndim ? t->shape[d] : 1;
}

/* A contiguous int64 copy (or the tensor itself) of an index tensor, after
 * checking its dtype (int64, or int32 when allow_i32). */
static dl_tensor *index_prepare(const char *op, dl_tensor *index, bool allow_i32, dl_device dev) {
    if (index->dtype != DL_DTYPE_I64 && !(allow_i32 && index->dtype == DL_DTYPE_I32)) {
        dl_error("%s: index must be an int64 tensor%s, got %s", op, allow_i32 ? " (or int32)" : "",
                 dl_dtype_name(index->dtype));
        return NULL;
    }
    dl_tensor *a = dl_tensor_to_dtype(index, DL_DTYPE_I64);
    if (!a) return NULL;
    dl_tensor *c = dl_tensor_contiguous(a);
    dl_tensor_release(a);
    dl_tensor *m = c ? moved_to(c, dev) : NULL;
    dl_tensor_release(c);
    return m;
}

/* Checks idx[0..n) against a dim of `size`: 0 <= i < size, or -size <= i <
 * size when negatives wrap.  A bad index is reported the user's way (i + 1,
 * or i itself for a negative that wraps). */
static int check_indices(const char *op, const int64_t *idx, int64_t n, int64_t size, int dim,
                         bool allow_negative) {
    int64_t lo = allow_negative ? -size : 0;
    for (int64_t i = 0; i < n; i++)
        if (idx[i] < lo || idx[i] >= size) {
            int64_t shown =
                (allow_negative && idx[i] < 0) || idx[i] == INT64_MAX ? idx[i] : idx[i] + 1;
            return dl_error("%s: index %lld is out of range for dimension %d of size %lld", op,
                            (long long)shown, dim + 1, (long long)size);
        }
    return 0;
}

/* check_indices for a contiguous int64 index tensor on any device: a CUDA
 * one is checked by its min and max, and copied to the host only to report
 * the first bad index the way the CPU does. */
static int check_index_tensor(const char *op, dl_tensor *idx, int64_t size, int dim,
                              bool allow_negative) {
    int64_t n = dl_tensor_numel(idx);
    if (!dl_op_on_cuda(idx))
        return check_indices(op, dl_tensor_data_ptr(idx), n, size, dim, allow_negative);
    if (n == 0) return 0;
    if (!dl_cuda_index || !dl_cuda_index->index_range) return dl_cuda_missing(op);
    int64_t lo, hi;
    if (dl_cuda_index->index_range(idx, &lo, &hi)) return -1;
    if (lo >= (allow_negative ? -size : 0) && hi < size) return 0;
    dl_tensor *h = dl_tensor_to_device(idx, DL_CPU);
    int rc = h ? check_indices(op, dl_tensor_data_ptr(h), n, size, dim, allow_negative) : -1;
    dl_tensor_release(h);
    if (rc == 0) /* the device saw a value the host copy does not have */
        rc = dl_error("%s: an index (range %lld to %lld) is out of range for dimension %d of "
                      "size %lld",
                      op, (long long)lo, (long long)hi, dim + 1, (long long)size);
    return rc;
}

/* A host copy of an index tensor (retained when it is on the CPU). */
static dl_tensor *host_indices(dl_tensor *idx) {
    return dl_op_on_cuda(idx) ? dl_tensor_to_device(idx, DL_CPU) : dl_tensor_retain(idx);
}

/* --- recording helpers ----------------------------------------------------- */

/* Whether an op over these inputs with a result of dtype dt records. */
static bool wants_grad(int n, dl_tensor *const *ins, dl_dtype dt) {
    return dl_dtype_is_floating(dt) && dl_autograd_needed(n, ins);
}

/* Records out = op(ins) when wanted (floating results only); returns out
 * (NULL, out released, on failure).  Costs one check when nothing requires
 * grad. */
static dl_tensor *record(dl_tensor *out, const char *name, dl_backward_fn fn, int n,
                         dl_tensor *const *ins, const void *ctx, size_t ctx_size, int nsave,
                         dl_tensor *const *save) {
    if (!out || !dl_dtype_is_floating(out->dtype)) return out;
    return dl_op_record(out, name, fn, n, ins, nsave, save, ctx, ctx_size);
}

/* Before an in-place write to self: the leaf check, and the node (NULL when
 * nothing records; *failed on an error).  Input 0 must be self, whose current
 * history the node captures.  dl_op_inplace_end finishes after the write. */
static dl_node *inplace_begin(const char *op, dl_tensor *self, const char *name, dl_backward_fn fn,
                              int n, dl_tensor *const *ins, const void *ctx, size_t ctx_size,
                              int nsave, dl_tensor *const *save, bool *failed) {
    *failed = dl_check_inplace(op, self) != 0;
    if (*failed || !wants_grad(n, ins, self->dtype)) return NULL;
    dl_node *node = dl_op_node_new(name, fn, n, ins, 1, nsave, save, ctx, ctx_size);
    *failed = node == NULL;
    return node;
}

/* The gradient g (the shape of an index) placed at the start of zeros of an
 * input's shape and dtype (meta m): src inputs of scatter may be larger than
 * the index.  A 0-dim index or input counts as one element of the other's
 * rank.  A new reference. */
static dl_tensor *pad_grad(dl_tensor *g, const dl_tensor_meta *m) {
    if (dl_tensor_numel(g) == 0) return dl_zeros_meta(m);
    int64_t ones[DL_MAX_DIMS];
    for (int k = 0; k < DL_MAX_DIMS; k++) ones[k] = 1;
    dl_tensor *g1 = g->ndim == m->ndim ? dl_tensor_retain(g) : dl_tensor_reshape(g, m->ndim, ones);
    if (!g1) return NULL;
    bool same = true;
    for (int k = 0; k < m->ndim; k++) same = same && m->shape[k] == g1->shape[k];
    if (same) {
        dl_tensor *r = dl_tensor_to_dtype(g1, m->dtype);
        dl_tensor_release(g1);
        return r;
    }
    dl_tensor *r = dl_zeros_meta(m);
    dl_tensor *v = r ? dl_tensor_retain(r) : NULL;
    for (int k = 0; v && k < m->ndim; k++) {
        dl_tensor *w = dl_tensor_narrow(v, k, 0, g1->shape[k]);
        dl_tensor_release(v);
        v = w;
    }
    if (!v || dl_tensor_copy_(v, g1)) {
        dl_tensor_release(r);
        r = NULL;
    }
    dl_tensor_release(v);
    dl_tensor_release(g1);
    return r;
}

typedef struct {
    int dim;
} dim_ctx;

/* --- cat / stack -------------------------------------------------------------- */

static bool skipped_in_cat(const dl_tensor *t) {
    return t->ndim == 1 && t->shape[0] == 0;
}

static dl_tensor *cat_impl(int n, dl_tensor *const *ts, int dim) {
    if (n <= 0) {
        dl_error("cat: expected a non-empty list of tensors");
        return NULL;
    }
    dl_dtype dtype = ts[0]->dtype;
    int ref = -1;
    for (int i = 0; i < n; i++) {
        if (ts[i]->ndim == 0) {
            dl_error("cat: tensor %d is zero-dimensional and cannot be concatenated", i + 1);
            return NULL;
        }
        if (i) dtype = dl_promote_types(dtype, ts[i]->dtype);
        if (ref < 0 && !skipped_in_cat(ts[i])) ref = i;
    }
    dl_device dev;
    if (device_of("cat", n, ts, &dev)) return NULL;
    if (ref < 0) { /* only 1-D empty tensors */
        if (dl_wrap_dim("cat", dim, 1) < 0) return NULL;
        int64_t zero = 0;
        return dl_tensor_empty(1, &zero, dtype, dev);
    }
    const dl_tensor *r = ts[ref];
    int d = dl_wrap_dim("cat", dim, r->ndim);
    if (d < 0) return NULL;
    int64_t shape[DL_MAX_DIMS];
    memcpy(shape, r->shape, sizeof shape);
    shape[d] = 0;
    char b1[128], b2[128];
    for (int i = 0; i < n; i++) {
        const dl_tensor *t = ts[i];
        if (skipped_in_cat(t)) continue;
        if (t->ndim != r->ndim) {
            dl_error("cat: tensors must have the same number of dimensions: tensor %d has shape "
                     "%s but tensor %d has shape %s",
                     ref + 1, dl_shape_str(r->ndim, r->shape, b1, sizeof b1), i + 1,
                     dl_shape_str(t->ndim, t->shape, b2, sizeof b2));
            return NULL;
        }
        for (int k = 0; k < r->ndim; k++)
            if (k != d && t->shape[k] != r->shape[k]) {
                dl_error("cat: sizes of tensors must match except in dimension %d: tensor %d has "
                         "shape %s but tensor %d has shape %s (dimension %d: %lld vs %lld)",
                         d + 1, ref + 1, dl_shape_str(r->ndim, r->shape, b1, sizeof b1), i + 1,
                         dl_shape_str(t->ndim, t->shape, b2, sizeof b2), k + 1,
                         (long long)r->shape[k], (long long)t->shape[k]);
                return NULL;
            }
        shape[d] += t->shape[d];
    }
    dl_tensor *out = dl_tensor_empty(r->ndim, shape, dtype, dev);
    if (!out) return NULL;
    int64_t off = 0;
    for (int i = 0; i < n; i++) {
        dl_tensor *t = ts[i];
        if (skipped_in_cat(t) || t->shape[d] == 0) continue;
        dl_tensor *part = dl_tensor_narrow(out, d, off, t->shape[d]);
        int rc = part ? dl_tensor_copy_(part, t) : -1;
        dl_tensor_release(part);
        if (rc) {
            dl_tensor_release(out);
            return NULL;
        }
        off += t->shape[d];
    }
    return out;
}

/* Each input gets its slice of the gradient along dim, in its dtype; the
 * skipped 1-D empty inputs get empty gradients. */
static int cat_backward(dl_node *n, dl_tensor *const *gout, dl_tensor **gin) {
    int d = ((const dim_ctx *)n->ctx)->dim;
    int64_t off = 0;
    for (int i = 0; i < n->n_inputs; i++) {
        const dl_tensor_meta *m = &n->input_meta[i];
        bool skipped = m->ndim == 1 && m->shape[0] == 0;
        int64_t len = skipped ? 0 : m->shape[d];
        if (dl_node_needs_grad(n, i)) {
            dl_tensor *slice = skipped ? NULL : dl_tensor_narrow(gout[0], d, off, len);
            gin[i] = skipped ? dl_zeros_meta(m) : slice ? dl_grad_for_input(slice, m) : NULL;
            dl_tensor_release(slice);
            if (!gin[i]) return -1;
        }
        off += len;
    }
    return 0;
}

dl_tensor *dl_cat(int n, dl_tensor *const *ts, int dim) {
    dl_tensor *out = cat_impl(n, ts, dim);
    if (!out || !wants_grad(n, ts, out->dtype)) return out;
    dim_ctx c = {dl_wrap_dim("cat", dim, out->ndim)};
    return record(out, "CatBackward", cat_backward, n, ts, &c, sizeof c, 0, NULL);
}

/* Input i gets slice i of the gradient along the new dim. */
static int stack_backward(dl_node *n, dl_tensor *const *gout, dl_tensor **gin) {
    int d = ((const dim_ctx *)n->ctx)->dim;
    for (int i = 0; i < n->n_inputs; i++) {
        if (!dl_node_needs_grad(n, i)) continue;
        if (dl_grad_give_input(n, gin, i, dl_tensor_select(gout[0], d, i))) return -1;
    }
    return 0;
}

dl_tensor *dl_stack(int n, dl_tensor *const *ts, int dim) {
    if (n <= 0) {
        dl_error("stack: expected a non-empty list of tensors");
        return NULL;
    }
    char b1[128], b2[128];
    for (int i = 1; i < n; i++)
        if (!dl_shape_equal(ts[i], ts[0])) {
            dl_error("stack: tensors must all have the same shape, but tensor 1 has shape %s and "
                     "tensor %d has shape %s",
                     dl_shape_str(ts[0]->ndim, ts[0]->shape, b1, sizeof b1), i + 1,
                     dl_shape_str(ts[i]->ndim, ts[i]->shape, b2, sizeof b2));
            return NULL;
        }
    if (ts[0]->ndim >= DL_MAX_DIMS) {
        dl_error("stack: tensors already have %d dimensions (the maximum)", DL_MAX_DIMS);
        return NULL;
    }
    int d = dl_wrap_dim("stack", dim, ts[0]->ndim + 1);
    if (d < 0) return NULL;
    dl_tensor **u = calloc((size_t)n, sizeof *u);
    if (!u) {
        dl_error("stack: out of memory");
        return NULL;
    }
    dl_tensor *out = NULL;
    int i = 0;
    for (; i < n; i++)
        if (!(u[i] = dl_tensor_unsqueeze(ts[i], d))) break;
    if (i == n) out = cat_impl(n, u, d);
    if (!out && strncmp(dl_last_error(), "cat:", 4) == 0) { /* name the op the user called */
        char msg[512];
        snprintf(msg, sizeof msg, "stack:%s", dl_last_error() + 4);
        dl_error("%s", msg);
    }
    dl_tensors_free(i, u);
    dim_ctx c = {d};
    return record(out, "StackBackward", stack_backward, n, ts, &c, sizeof c, 0, NULL);
}

/* --- split / chunk / unbind ------------------------------------------------------ */

void dl_tensors_free(int n, dl_tensor **list) {
    if (!list) return;
    for (int i = 0; i < n; i++) dl_tensor_release(list[i]);
    free(list);
}

typedef struct {
    int dim;
    bool select; /* unbind: output i is slice i; else consecutive narrows */
} split_ctx;

/* One node for all the pieces: the gradients of those that got one are
 * copied into their places in zeros of the input's shape, so gradients from
 * several pieces meet in one input gradient. */
static int split_backward(dl_node *n, dl_tensor *const *gout, dl_tensor **gin) {
    const split_ctx *c = n->ctx;
    const dl_tensor_meta *m = &n->input_meta[0]; /* the pieces share its dtype */
    dl_tensor *r = dl_zeros_meta(m);
    if (!r) return -1;
    int64_t off = 0;
    for (int i = 0; i < n->n_outputs; i++) {
        int64_t len = c->select ? 1 : n->outputs[i].shape[c->dim];
        if (gout[i]) {
            dl_tensor *slot =
                c->select ? dl_tensor_select(r, c->dim, i) : dl_tensor_narrow(r, c->dim, off, len);
            int rc = slot ? dl_tensor_copy_(slot, gout[i]) : -1;
            dl_tensor_release(slot);
            if (rc) {
                dl_tensor_release(r);
                return -1;
            }
        }
        off += len;
    }
    gin[0] = r;
    return 0;
}

/* Makes the pieces (count n, or -1) outputs of one node when t requires
 * grad; frees them and returns -1 when recording fails. */
static int record_pieces(int n, dl_tensor *t, dl_tensor ***out, const char *name, int dim,
                         bool select) {
    if (n <= 0 || !wants_grad(1, &t, t->dtype)) return n;
    split_ctx c = {dl_wrap_dim(name, dim, t->ndim), select};
    dl_node *node = dl_op_node_new(name, split_backward, 1, &t, n, 0, NULL, &c, sizeof c);
    if (!node) {
        dl_tensors_free(n, *out);
        *out = NULL;
        return -1;
    }
    for (int i = 0; i < n; i++) dl_node_set_output(node, i, (*out)[i]);
    dl_node_release(node);
    return n;
}

/* Views of t along d with the given sizes (already checked to fit). */
static int split_views(const char *op, dl_tensor *t, int d, int n, const int64_t *sizes,
                       dl_tensor ***out) {
    dl_tensor **list = calloc(n > 0 ? (size_t)n : 1, sizeof *list);
    if (!list) return dl_error("%s: out of memory", op);
    int64_t off = 0;
    for (int i = 0; i < n; i++) {
        list[i] = dl_tensor_narrow(t, d, off, sizes[i]);
        if (!list[i]) {
            dl_tensors_free(i, list);
            return -1;
        }
        off += sizes[i];
    }
    *out = list;
    return n;
}

static int split_checked(const char *op, dl_tensor *t, int nsizes, const int64_t *sizes, int dim,
                         dl_tensor ***out) {
    if (t->ndim == 0) return dl_error("%s: cannot split a 0-dimensional tensor", op);
    int d = dl_wrap_dim(op, dim, t->ndim);
    if (d < 0) return -1;
    int64_t sum = 0;
    for (int i = 0; i < nsizes; i++) {
        if (sizes[i] < 0)
            return dl_error("%s: split size %lld (entry %d) is negative", op, (long long)sizes[i],
                            i + 1);
        if (sizes[i] > INT64_MAX - sum)
            return dl_error("%s: split sizes add up to more than dimension %d's size %lld", op,
                            d + 1, (long long)t->shape[d]);
        sum += sizes[i];
    }
    if (sum != t->shape[d])
        return dl_error("%s: split sizes add up to %lld but dimension %d has size %lld", op,
                        (long long)sum, d + 1, (long long)t->shape[d]);
    return split_views(op, t, d, nsizes, sizes, out);
}

int dl_split_with_sizes(dl_tensor *t, int nsizes, const int64_t *sizes, int dim, dl_tensor ***out) {
    if (nsizes <= 0) return dl_error("split: expected at least one split size");
    int n = split_checked("split", t, nsizes, sizes, dim, out);
    return record_pieces(n, t, out, "SplitWithSizesBackward", dim, false);
}

/* Pieces of `piece` along d, the last one smaller. */
static int split_even(const char *op, dl_tensor *t, int64_t piece, int dim, dl_tensor ***out) {
    if (t->ndim == 0) return dl_error("%s: cannot split a 0-dimensional tensor", op);
    int d = dl_wrap_dim(op, dim, t->ndim);
    if (d < 0) return -1;
    int64_t size = t->shape[d];
    if (piece < 0)
        return dl_error("%s: split size must be non-negative, got %lld", op, (long long)piece);
    if (piece == 0 && size != 0)
        return dl_error("%s: split size can only be 0 if dimension %d has size 0 (it has %lld)", op,
                        d + 1, (long long)size);
    int64_t n = piece ? (size + piece - 1) / piece : 1;
    if (n < 1) n = 1;
    if (n > 1 << 30) return dl_error("%s: too many pieces (%lld)", op, (long long)n);
    int64_t *sizes = malloc(sizeof(int64_t) * (size_t)n);
    if (!sizes) return dl_error("%s: out of memory", op);
    for (int64_t i = 0; i < n; i++) sizes[i] = piece;
    sizes[n - 1] = size - piece * (n - 1);
    int rc = split_views(op, t, d, (int)n, sizes, out);
    free(sizes);
    return rc;
}

int dl_split(dl_tensor *t, int64_t split_size, int dim, dl_tensor ***out) {
    int n = split_even("split", t, split_size, dim, out);
    return record_pieces(n, t, out, "SplitBackward", dim, false);
}

int dl_chunk(dl_tensor *t, int64_t chunks, int dim, dl_tensor ***out) {
    if (chunks <= 0)
        return dl_error("chunk: number of chunks must be positive, got %lld", (long long)chunks);
    if (t->ndim == 0) return dl_error("chunk: cannot chunk a 0-dimensional tensor");
    int d = dl_wrap_dim("chunk", dim, t->ndim);
    if (d < 0) return -1;
    int64_t size = t->shape[d];
    if (size == 0) { /* PyTorch: `chunks` empty pieces */
        if (chunks > 1 << 30) return dl_error("chunk: too many chunks (%lld)", (long long)chunks);
        int64_t *sizes = calloc((size_t)chunks, sizeof(int64_t));
        if (!sizes) return dl_error("chunk: out of memory");
        int rc = split_views("chunk", t, d, (int)chunks, sizes, out);
        free(sizes);
        return record_pieces(rc, t, out, "SplitWithSizesBackward", d, false);
    }
    int rc = split_even("chunk", t, (size + chunks - 1) / chunks, d, out);
    return record_pieces(rc, t, out, "SplitBackward", d, false);
}

int dl_unbind(dl_tensor *t, int dim, dl_tensor ***out) {
    if (t->ndim == 0) return dl_error("unbind: cannot unbind a 0-dimensional tensor");
    int d = dl_wrap_dim("unbind", dim, t->ndim);
    if (d < 0) return -1;
    int64_t n = t->shape[d];
    if (n > 1 << 30) return dl_error("unbind: too many slices (%lld)", (long long)n);
    dl_tensor **list = calloc(n > 0 ? (size_t)n : 1, sizeof *list);
    if (!list) return dl_error("unbind: out of memory");
    for (int64_t i = 0; i < n; i++)
        if (!(list[i] = dl_tensor_select(t, d, i))) {
            dl_tensors_free((int)i, list);
            return -1;
        }
    *out = list;
    return record_pieces((int)n, t, out, "UnbindBackward", d, true);
}

/* --- index_select / gather --------------------------------------------------------- */

static dl_tensor *index_select_impl(dl_tensor *x, int dim, dl_tensor *index) {
    dl_tensor *both[2] = {x, index};
    dl_device dev;
    if (device_of("index_select", 2, both, &dev)) return NULL;
    if (index->ndim > 1) {
        dl_error("index_select: index must be a 1-D tensor, got %d dimensions", index->ndim);
        return NULL;
    }
    int d = dl_wrap_dim("index_select", dim, x->ndim);
    if (d < 0) return NULL;
    dl_tensor *idx = index_prepare("index_select", index, true, dev);
    if (!idx) return NULL;
    int64_t n = dl_tensor_numel(idx), size = size_nonempty(x, d);
    dl_tensor *out = NULL, *xc = NULL, *xd = NULL; /* x on dev, contiguous */
    if (x->ndim == 0 && n != 1) {
        dl_error("index_select: a 0-dimensional input takes exactly one index, got %lld",
                 (long long)n);
        goto done;
    }
    if (check_index_tensor("index_select", idx, size, d, false)) goto done;
    int64_t shape[DL_MAX_DIMS];
    memcpy(shape, x->shape, sizeof shape);
    if (x->ndim) shape[d] = n;
    if (!(xd = moved_to(x, dev)) || !(xc = dl_tensor_contiguous(xd))) goto done;
    if (!(out = dl_tensor_empty(x->ndim, shape, x->dtype, dev))) goto done;
    if (dl_tensor_numel(out) == 0) goto done;
    if (dl_op_on_cuda(out)) {
        int rc = !dl_cuda_index || !dl_cuda_index->index_select
                     ? dl_cuda_missing("index_select")
                     : dl_cuda_index->index_select(out, xc, d, dl_tensor_data_ptr(idx), n);
        out = dl_op_result(out, rc);
    } else {
        dl_cpu_index_select(out, xc, d, dl_tensor_data_ptr(idx), n);
    }
done:
    dl_tensor_release(xc);
    dl_tensor_release(xd);
    dl_tensor_release(idx);
    return out;
}

/* grad x = zeros with the gradient's slices added at the selected positions
 * (a repeated index accumulates). */
static int index_select_backward(dl_node *n, dl_tensor *const *gout, dl_tensor **gin) {
    int d = ((const dim_ctx *)n->ctx)->dim;
    const dl_tensor_meta *m = &n->input_meta[0];
    dl_tensor *index = dl_node_saved(n, 0), *g = gout[0];
    if (!index) return -1;
    if (m->ndim == 0) { /* one index, necessarily the element itself */
        dl_tensor *g0 = dl_tensor_reshape(g, 0, NULL);
        gin[0] = g0 ? dl_tensor_to_dtype(g0, m->dtype) : NULL;
        dl_tensor_release(g0);
        return gin[0] ? 0 : -1;
    }
    dl_tensor *idx = index_prepare("index_select", index, true, dl_tensor_device(g));
    dl_tensor *gc = idx ? dl_tensor_contiguous(g) : NULL;
    dl_tensor *r = gc ? dl_tensor_zeros(m->ndim, m->shape, g->dtype, dl_tensor_device(g)) : NULL;
    if (r && dl_tensor_numel(gc) > 0) {
        int64_t nidx = dl_tensor_numel(idx);
        int rc = 0;
        if (!dl_op_on_cuda(r))
            dl_cpu_index_add(r, d, dl_tensor_data_ptr(idx), nidx, gc);
        else if (!dl_cuda_index || !dl_cuda_index->index_add)
            rc = dl_cuda_missing("index_select backward");
        else
            rc = dl_cuda_index->index_add(r, d, dl_tensor_data_ptr(idx), nidx, gc);
        r = dl_op_result(r, rc);
    }
    dl_tensor_release(gc);
    dl_tensor_release(idx);
    gin[0] = r ? dl_tensor_to_dtype(r, m->dtype) : NULL;
    dl_tensor_release(r);
    return gin[0] ? 0 : -1;
}

dl_tensor *dl_index_select(dl_tensor *x, int dim, dl_tensor *index) {
    dl_tensor *out = index_select_impl(x, dim, index);
    if (!out || !wants_grad(1, &x, out->dtype)) return out;
    dim_ctx c = {dl_wrap_dim("index_select", dim, x->ndim)};
    return record(out, "IndexSelectBackward", index_select_backward, 1, &x, &c, sizeof c, 1,
                  &index);
}

/* Shared checks of gather and scatter: index (already int64) against x,
 * sizes limited by `x` in every dim but d, and by `src` in every dim. */
static int check_index_shape(const char *op, const dl_tensor *x, int d, const dl_tensor *index,
                             const dl_tensor *src, const char *xname) {
    char b1[128], b2[128];
    if (dims_nonempty(index) != dims_nonempty(x))
        return dl_error("%s: index has %d dimensions but %s has %d (shapes %s and %s)", op,
                        index->ndim, xname, x->ndim,
                        dl_shape_str(index->ndim, index->shape, b1, sizeof b1),
                        dl_shape_str(x->ndim, x->shape, b2, sizeof b2));
    if (src && dims_nonempty(index) != dims_nonempty(src))
        return dl_error("%s: index has %d dimensions but src has %d", op, index->ndim, src->ndim);
    for (int k = 0; k < index->ndim; k++) {
        if (k != d && index->shape[k] > size_nonempty(x, k))
            return dl_error("%s: index shape %s exceeds %s shape %s in dimension %d", op,
                            dl_shape_str(index->ndim, index->shape, b1, sizeof b1), xname,
                            dl_shape_str(x->ndim, x->shape, b2, sizeof b2), k + 1);
        if (src && index->shape[k] > size_nonempty(src, k))
            return dl_error("%s: index shape %s exceeds src shape %s in dimension %d", op,
                            dl_shape_str(index->ndim, index->shape, b1, sizeof b1),
                            dl_shape_str(src->ndim, src->shape, b2, sizeof b2), k + 1);
    }
    return 0;
}

static dl_tensor *gather_impl(dl_tensor *x, int dim, dl_tensor *index) {
    dl_tensor *both[2] = {x, index};
    dl_device dev;
    if (device_of("gather", 2, both, &dev)) return NULL;
    int d = dl_wrap_dim("gather", dim, x->ndim);
    if (d < 0) return NULL;
    dl_tensor *idx = index_prepare("gather", index, false, dev);
    if (!idx) return NULL;
    dl_tensor *out = NULL, *xd = NULL;
    if (check_index_shape("gather", x, d, idx, NULL, "input")) goto done;
    if (check_index_tensor("gather", idx, size_nonempty(x, d), d, false)) goto done;
    if (!(xd = moved_to(x, dev))) goto done; /* a 0-dim CPU x beside a CUDA index */
    if (!(out = dl_tensor_empty(idx->ndim, idx->shape, x->dtype, dev))) goto done;
    if (!dl_op_on_cuda(out)) {
        dl_cpu_gather(out, xd, d, idx);
    } else if (!dl_cuda_index || !dl_cuda_index->gather ? dl_cuda_missing("gather")
                                                        : dl_cuda_index->gather(out, xd, d, idx)) {
        dl_tensor_release(out);
        out = NULL;
    }
done:
    dl_tensor_release(xd);
    dl_tensor_release(idx);
    return out;
}

static int scatter_impl(const char *op, dl_tensor *self, int dim, dl_tensor *index, dl_tensor *src,
                        bool add);

/* grad x = zeros with the gradient scatter-added at the gathered positions. */
/* The backward of an op that read x at the saved positions (saved 0) along
 * ctx's dim: gout scattered (add: accumulated) into zeros of x's shape. */
static int scatter_to_input(const char *op, dl_node *n, dl_tensor *const *gout, dl_tensor **gin,
                            bool add) {
    int d = ((const dim_ctx *)n->ctx)->dim;
    const dl_tensor_meta *m = &n->input_meta[0];
    dl_tensor *index = dl_node_saved(n, 0);
    if (!index) return -1;
    dl_tensor *r = dl_tensor_zeros(m->ndim, m->shape, gout[0]->dtype, m->device);
    if (!r || scatter_impl(op, r, d, index, gout[0], add)) {
        dl_tensor_release(r);
        return -1;
    }
    gin[0] = dl_tensor_to_dtype(r, m->dtype);
    dl_tensor_release(r);
    return gin[0] ? 0 : -1;
}

static int gather_backward(dl_node *n, dl_tensor *const *gout, dl_tensor **gin) {
    return scatter_to_input("gather", n, gout, gin, true);
}

dl_tensor *dl_gather(dl_tensor *x, int dim, dl_tensor *index) {
    dl_tensor *out = gather_impl(x, dim, index);
    if (!out || !wants_grad(1, &x, out->dtype)) return out;
    dim_ctx c = {dl_wrap_dim("gather", dim, x->ndim)};
    return record(out, "GatherBackward", gather_backward, 1, &x, &c, sizeof c, 1, &index);
}

/* --- scatter ------------------------------------------------------------------------- */

static int scatter_impl(const char *op, dl_tensor *self, int dim, dl_tensor *index, dl_tensor *src,
                        bool add) {
    dl_tensor *all[3] = {self, index, src};
    dl_device dev;
    if (device_of(op, 3, all, &dev)) return -1;
    if (!dl_device_equal(dl_tensor_device(self), dev)) {
        char b[32];
        return dl_error("%s: self is on cpu but src and index are on %s", op,
                        dl_device_name(dev, b, sizeof b));
    }
    int d = dl_wrap_dim(op, dim, self->ndim);
    if (d < 0) return -1;
    if (src->dtype != self->dtype)
        return dl_error("%s: src dtype %s does not match self dtype %s", op,
                        dl_dtype_name(src->dtype), dl_dtype_name(self->dtype));
    dl_tensor *idx = index_prepare(op, index, false, dev);
    if (!idx) return -1;
    int rc = -1;
    if (dl_tensor_numel(idx) == 0) {
        rc = 0;
        goto done;
    }
    if (check_index_shape(op, self, d, idx, src, "self")) goto done;
    if (check_index_tensor(op, idx, size_nonempty(self, d), d, false)) goto done;
    if (dl_op_check_writable(op, "self", self)) goto done;
    /* src sharing self's memory is read from a copy, so writes cannot feed
     * reads; a 0-dim CPU src beside CUDA self is moved */
    dl_tensor *s = src->storage == self->storage ? dl_tensor_clone(src) : moved_to(src, dev);
    if (!s) goto done;
    if (!dl_op_on_cuda(self)) {
        dl_cpu_scatter(self, d, idx, s, add);
    } else if (!dl_cuda_index || !dl_cuda_index->scatter
                   ? dl_cuda_missing(op)
                   : dl_cuda_index->scatter(self, d, idx, s, add)) {
        dl_tensor_release(s);
        goto done;
    }
    dl_tensor_release(s);
    dl_tensor_bump_version(self);
    rc = 0;
done:
    dl_tensor_release(idx);
    return rc;
}

static int scatter_value_impl(dl_tensor *self, int dim, dl_tensor *index, dl_tensor *value) {
    if (dl_tensor_numel(value) != 1)
        return dl_error("scatter: the value must be a single number, got %lld elements",
                        (long long)dl_tensor_numel(value));
    /* the value as a 0-dim tensor of self's dtype on self's device */
    dl_tensor *v = dl_tensor_empty(0, NULL, self->dtype, dl_tensor_device(self));
    if (!v) return -1;
    dl_tensor *flat = dl_tensor_reshape(value, 0, NULL);
    int rc = flat ? dl_tensor_copy_(v, flat) : -1;
    dl_tensor_release(flat);
    dl_tensor *e = rc ? NULL : dl_tensor_expand(v, index->ndim, index->shape);
    if (e)
        rc = scatter_impl("scatter", self, dim, index, e, false);
    else
        rc = -1;
    dl_tensor_release(e);
    dl_tensor_release(v);
    return rc;
}

static int scatter_src_impl(dl_tensor *self, int dim, dl_tensor *index, dl_tensor *src) {
    return scatter_impl("scatter", self, dim, index, src, false);
}

static int scatter_add_impl(dl_tensor *self, int dim, dl_tensor *index, dl_tensor *src) {
    return scatter_impl("scatter_add", self, dim, index, src, true);
}

typedef enum { SCATTER_SRC, SCATTER_VALUE, SCATTER_ADD } scatter_kind;

typedef struct {
    int dim; /* as the caller gave it */
    scatter_kind kind;
} scatter_ctx;

/* A copy of g with zeros at the positions index names along dim: the
 * gradient of a tensor whose elements there were overwritten. */
static dl_tensor *zero_scattered(dl_tensor *g, int dim, dl_tensor *index) {
    dl_tensor *r = dl_tensor_clone(g);
    dl_tensor *zero = r ? dl_tensor_scalar(0, g->dtype) : NULL;
    if (!zero || scatter_value_impl(r, dim, index, zero)) {
        dl_tensor_release(r);
        r = NULL;
    }
    dl_tensor_release(zero);
    return r;
}

/* scatter: self's gradient is zero where src overwrote it (scatter_add:
 * passes through); src's is the gradient gathered from where it went. */
static int scatter_backward(dl_node *n, dl_tensor *const *gout, dl_tensor **gin) {
    const scatter_ctx *c = n->ctx;
    dl_tensor *g = gout[0], *index = dl_node_saved(n, 0);
    if (!index) return -1;
    bool empty = dl_tensor_numel(index) == 0; /* the forward wrote nothing */
    if (dl_node_needs_grad(n, 0)) {
        dl_tensor *r = c->kind == SCATTER_ADD || empty ? dl_tensor_retain(g)
                                                       : zero_scattered(g, c->dim, index);
        if (dl_grad_give_input(n, gin, 0, r)) return -1;
    }
    if (n->n_inputs > 1 && dl_node_needs_grad(n, 1)) {
        dl_tensor *r = empty ? NULL : gather_impl(g, c->dim, index);
        gin[1] = empty ? dl_zeros_meta(&n->input_meta[1])
                 : r   ? pad_grad(r, &n->input_meta[1])
                       : NULL;
        dl_tensor_release(r);
        if (!gin[1]) return -1;
    }
    return 0;
}

static const char *scatter_name(scatter_kind k) {
    return k == SCATTER_ADD ? "ScatterAddBackward" : "ScatterBackward";
}

/* The in-place forms: self's history continues through the node. */
static int scatter_inplace(scatter_kind kind, dl_tensor *self, int dim, dl_tensor *index,
                           dl_tensor *src) {
    const char *op = kind == SCATTER_ADD ? "scatter_add_" : "scatter_";
    scatter_ctx c = {dim, kind};
    dl_tensor *ins[2] = {self, kind == SCATTER_VALUE ? NULL : src};
    bool failed;
    dl_node *node =
        inplace_begin(op, self, scatter_name(kind), scatter_backward, kind == SCATTER_VALUE ? 1 : 2,
                      ins, &c, sizeof c, 1, &index, &failed);
    if (failed) return -1;
    int rc = kind == SCATTER_VALUE ? scatter_value_impl(self, dim, index, src)
             : kind == SCATTER_ADD ? scatter_add_impl(self, dim, index, src)
                                   : scatter_src_impl(self, dim, index, src);
    return dl_op_inplace_end(node, self, rc, false);
}

int dl_scatter_(dl_tensor *self, int dim, dl_tensor *index, dl_tensor *src) {
    return scatter_inplace(SCATTER_SRC, self, dim, index, src);
}

int dl_scatter_add_(dl_tensor *self, int dim, dl_tensor *index, dl_tensor *src) {
    return scatter_inplace(SCATTER_ADD, self, dim, index, src);
}

int dl_scatter_value_(dl_tensor *self, int dim, dl_tensor *index, dl_tensor *value) {
    return scatter_inplace(SCATTER_VALUE, self, dim, index, value);
}

/* The out-of-place forms: a copy of self, written, recorded against self. */
static dl_tensor *scatter_copy(scatter_kind kind, dl_tensor *self, int dim, dl_tensor *index,
                               dl_tensor *src) {
    dl_tensor *out = dl_tensor_clone(self);
    int rc = !out                    ? -1
             : kind == SCATTER_VALUE ? scatter_value_impl(out, dim, index, src)
             : kind == SCATTER_ADD   ? scatter_add_impl(out, dim, index, src)
                                     : scatter_src_impl(out, dim, index, src);
    if (rc) {
        dl_tensor_release(out);
        return NULL;
    }
    scatter_ctx c = {dim, kind};
    dl_tensor *ins[2] = {self, src};
    return record(out, scatter_name(kind), scatter_backward, kind == SCATTER_VALUE ? 1 : 2, ins, &c,
                  sizeof c, 1, &index);
}

dl_tensor *dl_scatter(dl_tensor *self, int dim, dl_tensor *index, dl_tensor *src) {
    return scatter_copy(SCATTER_SRC, self, dim, index, src);
}

dl_tensor *dl_scatter_value(dl_tensor *self, int dim, dl_tensor *index, dl_tensor *value) {
    return scatter_copy(SCATTER_VALUE, self, dim, index, value);
}

dl_tensor *dl_scatter_add(dl_tensor *self, int dim, dl_tensor *index, dl_tensor *src) {
    return scatter_copy(SCATTER_ADD, self, dim, index, src);
}

/* --- index_fill_ / index_copy_ ----------------------------------------------------------- */

/* Copies src into the n slices ip[0..n) of self along d (src's slice i into
 * slice ip[i] when per_slice, else src itself into each); src is read first
 * when it shares self's storage.  A 0-dim self is written whole. */
static int write_slices(dl_tensor *self, int d, const int64_t *ip, int64_t n, dl_tensor *src,
                        bool per_slice) {
    dl_tensor *own = NULL;
    if (src->storage == self->storage && !(src = own = dl_tensor_clone(src))) return -1;
    int rc = 0;
    for (int64_t i = 0; i < n && rc == 0; i++) {
        if (self->ndim == 0) {
            rc = dl_tensor_copy_(self, src);
            continue;
        }
        dl_tensor *s = dl_tensor_select(self, d, ip[i]);
        dl_tensor *r = !s ? NULL : per_slice ? dl_tensor_select(src, d, i) : dl_tensor_retain(src);
        rc = r ? dl_tensor_copy_(s, r) : -1;
        dl_tensor_release(r);
        dl_tensor_release(s);
    }
    dl_tensor_release(own);
    return rc;
}

/* src (index_copy) must have self's shape but n slices along d. */
static int check_src_fits(const char *op, dl_tensor *self, dl_tensor *src, int d, int64_t n) {
    bool fits = dims_nonempty(src) == dims_nonempty(self) && size_nonempty(src, d) == n;
    for (int k = 0; fits && k < self->ndim; k++)
        if (k != d && src->shape[k] != self->shape[k]) fits = false;
    if (fits) return 0;
    char b1[128], b2[128];
    return dl_error("%s: src shape %s does not fit self shape %s with %lld indices along "
                    "dimension %d",
                    op, dl_shape_str(src->ndim, src->shape, b1, sizeof b1),
                    dl_shape_str(self->ndim, self->shape, b2, sizeof b2), (long long)n, d + 1);
}

/* index_copy (copy: other is src, one slice per index) and index_fill (other
 * is the 0-dim value written to every indexed slice), in place on self. */
static int index_write_impl(const char *op, bool copy, dl_tensor *self, int dim, dl_tensor *index,
                            dl_tensor *other) {
    dl_tensor *all[3] = {self, index, other};
    dl_device dev;
    if (device_of(op, 3, all, &dev)) return -1;
    if (!copy && other->ndim != 0)
        return dl_error("%s: the value must be a number or a 0-dimensional tensor, got "
                        "%d dimensions",
                        op, other->ndim);
    if (index->ndim > 1)
        return dl_error("%s: index must be a 1-D tensor, got %d dimensions", op, index->ndim);
    if (copy && other->dtype != self->dtype)
        return dl_error("%s: src dtype %s does not match self dtype %s", op,
                        dl_dtype_name(other->dtype), dl_dtype_name(self->dtype));
    int d = dl_wrap_dim(op, dim, self->ndim);
    if (d < 0) return -1;
    /* the slices are written one by one from the host, so the indices are read there */
    dl_tensor *idx = index_prepare(op, index, false, DL_CPU);
    if (!idx) return -1;
    int64_t n = dl_tensor_numel(idx), size = size_nonempty(self, d);
    const int64_t *ip = dl_tensor_data_ptr(idx);
    int rc = (copy && check_src_fits(op, self, other, d, n)) ||
                     check_indices(op, ip, n, size, d, !copy) ||
                     dl_op_check_writable(op, "self", self)
                 ? -1
                 : write_slices(self, d, ip, n, other, copy);
    dl_tensor_release(idx);
    return rc;
}

typedef struct {
    int dim; /* as the caller gave it */
    bool copy;
} index_write_ctx;

/* Both ops overwrite the indexed slices of self, whose gradient is zero
 * there.  index_fill's value gets the sum of the gradient over those slices
 * (each counted once); index_copy's src gets the gradient's slices. */
static int index_write_backward(dl_node *n, dl_tensor *const *gout, dl_tensor **gin) {
    const index_write_ctx *c = n->ctx;
    dl_tensor *g = gout[0], *index = dl_node_saved(n, 0);
    if (!index) return -1;
    const char *op = c->copy ? "index_copy" : "index_fill";
    dl_tensor *zero = dl_tensor_scalar(0, g->dtype);
    if (!zero) return -1;
    int rc = -1;
    if (dl_node_needs_grad(n, 0)) {
        dl_tensor *r = dl_tensor_clone(g);
        if (r && index_write_impl(op, false, r, c->dim, index, zero) == 0)
            gin[0] = dl_grad_for_input(r, &n->input_meta[0]);
        dl_tensor_release(r);
        if (!gin[0]) goto done;
    }
    if (dl_node_needs_grad(n, 1)) {
        dl_tensor *r = NULL;
        if (c->copy) {
            r = index_select_impl(g, c->dim, index);
        } else { /* sum(g * mask of the filled slices) */
            dl_tensor *mask = dl_tensor_zeros(g->ndim, g->shape, g->dtype, dl_tensor_device(g));
            dl_tensor *one = mask ? dl_tensor_scalar(1, g->dtype) : NULL;
            dl_tensor *p = one && index_write_impl(op, false, mask, c->dim, index, one) == 0
                               ? dl_mul(g, mask)
                               : NULL;
            r = p ? dl_sum(p, 0, NULL, false, DL_REDUCE_DTYPE_NONE) : NULL;
            dl_tensor_release(p);
            dl_tensor_release(one);
            dl_tensor_release(mask);
        }
        if (dl_grad_give_input(n, gin, 1, r)) goto done;
    }
    rc = 0;
done:
    dl_tensor_release(zero);
    return rc;
}

static int index_write_inplace(bool copy, dl_tensor *self, int dim, dl_tensor *index,
                               dl_tensor *other) {
    const char *op = copy ? "index_copy_" : "index_fill_";
    index_write_ctx c = {dim, copy};
    dl_tensor *ins[2] = {self, other};
    bool failed;
    dl_node *node = inplace_begin(op, self, copy ? "IndexCopyBackward" : "IndexFillBackward",
                                  index_write_backward, 2, ins, &c, sizeof c, 1, &index, &failed);
    if (failed) return -1;
    int rc = index_write_impl(op, copy, self, dim, index, other);
    return dl_op_inplace_end(node, self, rc, false);
}

static dl_tensor *index_write_copy(bool copy, dl_tensor *self, int dim, dl_tensor *index,
                                   dl_tensor *other) {
    const char *op = copy ? "index_copy" : "index_fill";
    dl_tensor *out = dl_tensor_clone(self);
    int rc = out ? index_write_impl(op, copy, out, dim, index, other) : -1;
    if (rc) {
        dl_tensor_release(out);
        return NULL;
    }
    index_write_ctx c = {dim, copy};
    dl_tensor *ins[2] = {self, other};
    return record(out, copy ? "IndexCopyBackward" : "IndexFillBackward", index_write_backward, 2,
                  ins, &c, sizeof c, 1, &index);
}

int dl_index_fill_(dl_tensor *self, int dim, dl_tensor *index, dl_tensor *value) {
    return index_write_inplace(false, self, dim, index, value);
}

int dl_index_copy_(dl_tensor *self, int dim, dl_tensor *index, dl_tensor *src) {
    return index_write_inplace(true, self, dim, index, src);
}

dl_tensor *dl_index_fill(dl_tensor *self, int dim, dl_tensor *index, dl_tensor *value) {
    return index_write_copy(false, self, dim, index, value);
}

dl_tensor *dl_index_copy(dl_tensor *self, int dim, dl_tensor *index, dl_tensor *src) {
    return index_write_copy(true, self, dim, index, src);
}

/* --- sort / argsort / topk ------------------------------------------------------------ */

/* Sorts x along dim keeping the first k of each slice; values may be NULL. */
static int sort_impl(const char *op, dl_tensor *x, int dim, bool descending, int64_t k, bool want_k,
                     dl_tensor **values, dl_tensor **indices) {
    if (values) *values = NULL;
    *indices = NULL;
    int d = dl_wrap_dim(op, dim, x->ndim);
    if (d < 0) return -1;
    /* a 0-dim input is sorted as the 1-D view [1], then viewed back */
    dl_tensor *x1 = x;
    int64_t one = 1;
    if (x->ndim == 0 && !(x1 = dl_tensor_reshape(x, 1, &one))) return -1;
    int64_t n = x1->shape[d];
    if (!want_k) k = n;
    int rc = -1;
    dl_tensor *v = NULL, *i = NULL;
    if (k < 0 || k > n) {
        dl_error("%s: k (%lld) is out of range for dimension %d of size %lld", op, (long long)k,
                 d + 1, (long long)n);
        goto done;
    }
    int64_t shape[DL_MAX_DIMS];
    memcpy(shape, x1->shape, sizeof shape);
    shape[d] = k;
    bool scalar_out = x->ndim == 0 && k == 1;
    int ond = scalar_out ? 0 : x1->ndim;
    dl_device dev = dl_tensor_device(x);
    if (values && !(v = dl_tensor_empty(ond, shape, x->dtype, dev))) goto done;
    if (!(i = dl_tensor_empty(ond, shape, DL_DTYPE_I64, dev))) goto done;
    /* the kernel sees the outputs with x1's rank */
    dl_tensor *vk = v && scalar_out ? dl_tensor_reshape(v, 1, &one) : dl_tensor_retain(v);
    dl_tensor *ik = scalar_out ? dl_tensor_reshape(i, 1, &one) : dl_tensor_retain(i);
    if ((!v || vk) && ik) {
        if (!dl_op_on_cuda(x1))
            rc = dl_cpu_sort(x1, d, descending, k, vk, ik);
        else if (!dl_cuda_index || !dl_cuda_index->sort)
            rc = dl_cuda_missing(op);
        else
            rc = dl_cuda_index->sort(x1, d, descending, k, vk, ik);
    }
    dl_tensor_release(vk);
    dl_tensor_release(ik);
done:
    if (x1 != x) dl_tensor_release(x1);
    if (rc) {
        dl_tensor_release(v);
        dl_tensor_release(i);
        return -1;
    }
    if (values) *values = v;
    *indices = i;
    return 0;
}

/* Sorted (or top-k) values came from the positions in indices: the gradient
 * goes back there, zeros elsewhere. */
static int sort_backward(dl_node *n, dl_tensor *const *gout, dl_tensor **gin) {
    return scatter_to_input("sort", n, gout, gin, false);
}

/* Records the values output; the node keeps its own copy of the indices
 * (the caller may rewrite the returned ones, e.g. to 1-based). */
static int record_sorted(int rc, const char *name, dl_tensor *x, int dim, dl_tensor **values,
                         dl_tensor **indices) {
    if (rc || !values || !wants_grad(1, &x, (*values)->dtype)) return rc;
    dl_tensor *own = dl_tensor_clone(*indices);
    dim_ctx c = {dim};
    *values = own ? dl_op_record(*values, name, sort_backward, 1, &x, 1, &own, &c, sizeof c)
                  : dl_op_abort(NULL, *values);
    dl_tensor_release(own);
    if (*values) return 0;
    dl_tensor_release(*indices);
    *indices = NULL;
    return -1;
}

int dl_sort(dl_tensor *x, int dim, bool descending, bool stable, dl_tensor **values,
            dl_tensor **indices) {
    (void)stable; /* the kernel is always stable */
    int rc = sort_impl("sort", x, dim, descending, 0, false, values, indices);
    return record_sorted(rc, "SortBackward", x, dim, values, indices);
}

dl_tensor *dl_argsort(dl_tensor *x, int dim, bool descending, bool stable) {
    (void)stable;
    dl_tensor *i;
    if (sort_impl("argsort", x, dim, descending, 0, false, NULL, &i)) return NULL;
    return i;
}

int dl_topk(dl_tensor *x, int64_t k, int dim, bool largest, bool sorted, dl_tensor **values,
            dl_tensor **indices) {
    (void)sorted; /* results always come in order */
    int rc = sort_impl("topk", x, dim, largest, k, true, values, indices);
    return record_sorted(rc, "TopkBackward", x, dim, values, indices);
}

/* --- one_hot, masked_select, nonzero --------------------------------------------------- */

/* The smallest and largest of n > 0 labels (contiguous int64, any device). */
static int label_range(dl_tensor *lab, int64_t n, int64_t *lo, int64_t *hi) {
    if (dl_op_on_cuda(lab))
        return !dl_cuda_index || !dl_cuda_index->index_range
                   ? dl_cuda_missing("one_hot")
                   : dl_cuda_index->index_range(lab, lo, hi);
    const int64_t *lp = dl_tensor_data_ptr(lab);
    *lo = *hi = lp[0];
    for (int64_t i = 1; i < n; i++) {
        if (lp[i] < *lo) *lo = lp[i];
        if (lp[i] > *hi) *hi = lp[i];
    }
    return 0;
}

dl_tensor *dl_one_hot(dl_tensor *labels, int64_t num_classes) {
    if (labels->dtype != DL_DTYPE_I64) {
        dl_error("one_hot: labels must be an int64 tensor, got %s", dl_dtype_name(labels->dtype));
        return NULL;
    }
    if (labels->ndim >= DL_MAX_DIMS) {
        dl_error("one_hot: labels have %d dimensions; at most %d are supported", labels->ndim,
                 DL_MAX_DIMS - 1);
        return NULL;
    }
    dl_tensor *lab = dl_tensor_contiguous(labels);
    if (!lab) return NULL;
    int64_t n = dl_tensor_numel(lab), lo = 0, hi = -1;
    dl_tensor *out = NULL, *host = NULL;
    if (num_classes < 0 && n == 0) {
        dl_error("one_hot: cannot infer the number of classes from empty labels; pass "
                 "num_classes");
        goto done;
    }
    if (n > 0 && label_range(lab, n, &lo, &hi)) goto done;
    if (num_classes < 0) num_classes = hi + 1;
    if (n > 0 && (lo < 0 || hi >= num_classes)) { /* name the first bad label, on the host */
        if (!(host = host_indices(lab))) goto done;
        const int64_t *lp = dl_tensor_data_ptr(host);
        for (int64_t i = 0; i < n; i++)
            if (lp[i] < 0 || lp[i] >= num_classes) {
                dl_error("one_hot: class %lld is out of range (classes are 1 to %lld)",
                         (long long)lp[i] + 1, (long long)num_classes);
                goto done;
            }
    }
    int64_t shape[DL_MAX_DIMS];
    memcpy(shape, lab->shape, sizeof(int64_t) * lab->ndim);
    shape[lab->ndim] = num_classes;
    if (!(out = dl_tensor_zeros(lab->ndim + 1, shape, DL_DTYPE_I64, dl_tensor_device(lab))))
        goto done;
    if (!dl_op_on_cuda(out)) {
        dl_cpu_one_hot(out, lab);
    } else if (!dl_cuda_index || !dl_cuda_index->one_hot ? dl_cuda_missing("one_hot")
                                                         : dl_cuda_index->one_hot(out, lab)) {
        dl_tensor_release(out);
        out = NULL;
    }
done:
    dl_tensor_release(host);
    dl_tensor_release(lab);
    return out;
}

/* The number of non-zero elements of x on its device; -1 with an error. */
static int64_t count_nonzero(const char *op, const dl_tensor *x) {
    if (!dl_op_on_cuda(x)) return dl_cpu_count_nonzero(x);
    if (!dl_cuda_index || !dl_cuda_index->count_nonzero) return dl_cuda_missing(op);
    int64_t count;
    return dl_cuda_index->count_nonzero(x, &count) ? -1 : count;
}

/* out (mask's shape, non-overlapping) gets src's values where the mask is
 * true, on out's device. */
static int masked_scatter_dispatch(const char *op, dl_tensor *out, dl_tensor *mask,
                                   dl_tensor *src) {
    if (!dl_op_on_cuda(out)) {
        dl_cpu_masked_scatter(out, mask, src);
        return 0;
    }
    if (!dl_cuda_index || !dl_cuda_index->masked_scatter) return dl_cuda_missing(op);
    return dl_cuda_index->masked_scatter(out, mask, src);
}

static dl_tensor *masked_select_impl(dl_tensor *x, dl_tensor *mask) {
    dl_tensor *both[2] = {x, mask};
    dl_device dev;
    if (device_of("masked_select", 2, both, &dev)) return NULL;
    if (mask->dtype != DL_DTYPE_BOOL) {
        dl_error("masked_select: mask must be a bool tensor, got %s", dl_dtype_name(mask->dtype));
        return NULL;
    }
    int64_t shape[DL_MAX_DIMS];
    int nd =
        dl_broadcast_shapes("masked_select", x->ndim, x->shape, mask->ndim, mask->shape, shape);
    if (nd < 0) return NULL;
    dl_tensor *xd = moved_to(x, dev), *md = xd ? moved_to(mask, dev) : NULL;
    dl_tensor *xe = md ? dl_tensor_expand(xd, nd, shape) : NULL;
    dl_tensor *me = xe ? dl_tensor_expand(md, nd, shape) : NULL;
    dl_tensor *out = NULL;
    int64_t count = me ? count_nonzero("masked_select", me) : -1;
    if (count >= 0) out = dl_tensor_empty(1, &count, x->dtype, dev);
    if (out && count) {
        int rc = 0;
        if (!dl_op_on_cuda(out))
            dl_cpu_masked_select(out, xe, me);
        else if (!dl_cuda_index || !dl_cuda_index->masked_select)
            rc = dl_cuda_missing("masked_select");
        else
            rc = dl_cuda_index->masked_select(out, xe, me);
        out = dl_op_result(out, rc);
    }
    dl_tensor_release(me);
    dl_tensor_release(xe);
    dl_tensor_release(md);
    dl_tensor_release(xd);
    return out;
}

/* The gradient's values go back to the masked positions of the broadcast
 * shape (zeros elsewhere), then are summed over what x was broadcast along. */
static int masked_select_backward(dl_node *n, dl_tensor *const *gout, dl_tensor **gin) {
    const dl_tensor_meta *m = &n->input_meta[0];
    dl_tensor *mask = dl_node_saved(n, 0);
    if (!mask) return -1;
    int64_t shape[DL_MAX_DIMS];
    int nd =
        dl_broadcast_shapes("masked_select", m->ndim, m->shape, mask->ndim, mask->shape, shape);
    if (nd < 0) return -1;
    dl_device dev = dl_tensor_device(gout[0]);
    dl_tensor *r = dl_tensor_zeros(nd, shape, gout[0]->dtype, dev);
    dl_tensor *md = r ? moved_to(mask, dev) : NULL;
    dl_tensor *me = md ? dl_tensor_expand(md, nd, shape) : NULL;
    dl_tensor *gc = me ? dl_tensor_contiguous(gout[0]) : NULL;
    if (gc && masked_scatter_dispatch("masked_select backward", r, me, gc) == 0)
        gin[0] = dl_grad_for_input(r, m);
    dl_tensor_release(gc);
    dl_tensor_release(me);
    dl_tensor_release(md);
    dl_tensor_release(r);
    return gin[0] ? 0 : -1;
}

dl_tensor *dl_masked_select(dl_tensor *x, dl_tensor *mask) {
    return record(masked_select_impl(x, mask), "MaskedSelectBackward", masked_select_backward, 1,
                  &x, NULL, 0, 1, &mask);
}

dl_tensor *dl_nonzero(dl_tensor *x) {
    int64_t shape[2] = {count_nonzero("nonzero", x), x->ndim};
    if (shape[0] < 0) return NULL;
    dl_tensor *out = dl_tensor_empty(2, shape, DL_DTYPE_I64, dl_tensor_device(x));
    if (!out || !shape[0] || !x->ndim) return out;
    if (!dl_op_on_cuda(out)) {
        dl_cpu_nonzero(out, x);
    } else if (!dl_cuda_index || !dl_cuda_index->nonzero ? dl_cuda_missing("nonzero")
                                                         : dl_cuda_index->nonzero(out, x)) {
        dl_tensor_release(out);
        out = NULL;
    }
    return out;
}

/* v + delta for delta = +1 or -1, held at the int64 limits. */
static inline int64_t shifted(int64_t v, int64_t delta) {
    if (delta < 0) return v == INT64_MIN ? v : v - 1;
    return v == INT64_MAX ? v : v + 1;
}

int dl_index_shift_(dl_tensor *t, int64_t delta) {
    if (t->dtype != DL_DTYPE_I64 || !dl_tensor_is_contiguous(t) || (delta != 1 && delta != -1))
        return dl_error("index_shift_: expected a contiguous int64 tensor and a shift of 1 or -1");
    if (dl_op_on_cuda(t))
        return !dl_cuda_index || !dl_cuda_index->shift_i64 ? dl_cuda_missing("index_shift_")
                                                           : dl_cuda_index->shift_i64(t, delta);
    int64_t *p = dl_tensor_data_ptr(t), n = dl_tensor_numel(t);
    for (int64_t i = 0; i < n; i++) p[i] = shifted(p[i], delta);
    return 0;
}

/* --- flip, roll -------------------------------------------------------------------------- */

static dl_tensor *flip_impl(dl_tensor *x, int ndims, const int *dims) {
    int64_t strides[DL_MAX_DIMS], offset = x->offset;
    memcpy(strides, x->strides, sizeof strides);
    bool seen[DL_MAX_DIMS] = {0};
    for (int i = 0; i < ndims; i++) {
        int d = dl_wrap_dim("flip", dims[i], x->ndim);
        if (d < 0) return NULL;
        if (x->ndim == 0) continue;
        if (seen[d]) {
            dl_error("flip: dimension %d appears more than once", d + 1);
            return NULL;
        }
        seen[d] = true;
        if (x->shape[d] > 0) {
            offset += (x->shape[d] - 1) * x->strides[d];
            strides[d] = -x->strides[d];
        }
    }
    /* a view walking the flipped dims backwards, copied out */
    dl_tensor *v = dl_tensor_new_view(x->storage, offset, x->ndim, x->shape, strides, x->dtype);
    if (!v) return NULL;
    dl_tensor *out = dl_tensor_empty(x->ndim, x->shape, x->dtype, dl_tensor_device(x));
    if (out && dl_tensor_copy_(out, v)) {
        dl_tensor_release(out);
        out = NULL;
    }
    dl_tensor_release(v);
    return out;
}

typedef struct {
    int ndims, nshifts;
    int dims[DL_MAX_DIMS];
    int64_t shifts[DL_MAX_DIMS]; /* roll: the shifts that undo the forward's */
} rearrange_ctx;

/* Flipping is its own inverse. */
static int flip_backward(dl_node *n, dl_tensor *const *gout, dl_tensor **gin) {
    const rearrange_ctx *c = n->ctx;
    gin[0] = flip_impl(gout[0], c->ndims, c->dims);
    return gin[0] ? 0 : -1;
}

dl_tensor *dl_flip(dl_tensor *x, int ndims, const int *dims) {
    dl_tensor *out = flip_impl(x, ndims, dims);
    if (!out || !wants_grad(1, &x, out->dtype)) return out;
    /* flip_impl refused repeated dims, so only a 0-dim x (where flipping
     * does nothing) can come with more than DL_MAX_DIMS */
    rearrange_ctx c = {.ndims = ndims < DL_MAX_DIMS ? ndims : DL_MAX_DIMS};
    memcpy(c.dims, dims, sizeof(int) * (size_t)c.ndims);
    return record(out, "FlipBackward", flip_backward, 1, &x, &c, sizeof c, 0, NULL);
}

/* x rolled by shift along d: cat(last `shift` entries, the rest). */
static dl_tensor *roll_one(dl_tensor *x, int64_t shift, int d) {
    int64_t size = x->shape[d];
    if (size == 0) return dl_tensor_retain(x);
    shift = ((shift % size) + size) % size;
    if (shift == 0) return dl_tensor_retain(x);
    dl_tensor *parts[2] = {dl_tensor_narrow(x, d, size - shift, shift),
                           dl_tensor_narrow(x, d, 0, size - shift)};
    dl_tensor *out = parts[0] && parts[1] ? cat_impl(2, parts, d) : NULL;
    dl_tensor_release(parts[0]);
    dl_tensor_release(parts[1]);
    return out;
}

static dl_tensor *roll_impl(dl_tensor *x, int nshifts, const int64_t *shifts, int ndims,
                            const int *dims) {
    if (ndims == 0 && nshifts != 1) {
        dl_error("roll: without dims, exactly one shift is expected (got %d)", nshifts);
        return NULL;
    }
    if (ndims != 0 && nshifts != ndims) {
        dl_error("roll: %d shifts given for %d dimensions", nshifts, ndims);
        return NULL;
    }
    int wrapped[DL_MAX_DIMS];
    if (ndims > DL_MAX_DIMS) {
        dl_error("roll: at most %d dimensions", DL_MAX_DIMS);
        return NULL;
    }
    for (int i = 0; i < ndims; i++)
        if ((wrapped[i] = dl_wrap_dim("roll", dims[i], x->ndim)) < 0) return NULL;
    dl_tensor *cur;
    if (x->ndim == 0) {
        cur = dl_tensor_retain(x);
    } else if (ndims == 0) { /* over the flattened tensor */
        int64_t n = dl_tensor_numel(x);
        dl_tensor *flat = dl_tensor_reshape(x, 1, &n);
        dl_tensor *r = flat ? roll_one(flat, shifts[0], 0) : NULL;
        cur = r ? dl_tensor_reshape(r, x->ndim, x->shape) : NULL;
        dl_tensor_release(r);
        dl_tensor_release(flat);
    } else {
        cur = dl_tensor_retain(x);
        for (int i = 0; i < ndims && cur; i++) {
            dl_tensor *r = roll_one(cur, shifts[i], wrapped[i]);
            dl_tensor_release(cur);
            cur = r;
        }
    }
    if (cur == x || (cur && cur->storage == x->storage)) { /* nothing moved: still a copy */
        dl_tensor *c = dl_tensor_clone(cur);
        dl_tensor_release(cur);
        cur = c;
    }
    return cur;
}

/* Rolling back by the opposite shifts. */
static int roll_backward(dl_node *n, dl_tensor *const *gout, dl_tensor **gin) {
    const rearrange_ctx *c = n->ctx;
    gin[0] = roll_impl(gout[0], c->nshifts, c->shifts, c->ndims, c->dims);
    return gin[0] ? 0 : -1;
}

dl_tensor *dl_roll(dl_tensor *x, int nshifts, const int64_t *shifts, int ndims, const int *dims) {
    dl_tensor *out = roll_impl(x, nshifts, shifts, ndims, dims);
    if (!out || !wants_grad(1, &x, out->dtype)) return out;
    /* checked by roll_impl: nshifts == max(ndims, 1) <= DL_MAX_DIMS, dims valid */
    rearrange_ctx c = {.ndims = ndims, .nshifts = nshifts};
    for (int i = 0; i < nshifts; i++) {
        int64_t size = dl_tensor_numel(x);
        if (ndims) {
            c.dims[i] = dims[i];
            size = x->ndim ? x->shape[dl_wrap_dim("roll", dims[i], x->ndim)] : 1;
        }
        c.shifts[i] = size > 0 ? -(shifts[i] % size) : 0; /* no overflow at INT64_MIN */
    }
    return record(out, "RollBackward", roll_backward, 1, &x, &c, sizeof c, 0, NULL);
}

/* --- tril / triu ------------------------------------------------------------------------ */

static int tri_inplace(const char *op, dl_tensor *x, int64_t diagonal, bool upper) {
    if (x->ndim < 2)
        return dl_error("%s: input must have at least 2 dimensions, got %d", op, x->ndim);
    if (dl_op_check_writable(op, "self", x)) return -1;
    /* beyond +-(rows + cols) every diagonal is the same; clamping keeps the
     * kernel's index arithmetic far from overflow */
    int64_t lim = x->shape[x->ndim - 2] + x->shape[x->ndim - 1];
    if (diagonal > lim) diagonal = lim;
    if (diagonal < -lim) diagonal = -lim;
    if (!dl_op_on_cuda(x))
        dl_cpu_tri_(x, diagonal, upper);
    else if (!dl_cuda_index || !dl_cuda_index->tri_ ? dl_cuda_missing(op)
                                                    : dl_cuda_index->tri_(x, diagonal, upper))
        return -1;
    dl_tensor_bump_version(x);
    return 0;
}

typedef struct {
    int64_t diagonal;
    bool upper;
} tri_ctx;

static dl_tensor *tri_copy(const char *op, dl_tensor *x, int64_t diagonal, bool upper) {
    if (x->ndim < 2) {
        dl_error("%s: input must have at least 2 dimensions, got %d", op, x->ndim);
        return NULL;
    }
    dl_tensor *out = dl_tensor_clone(x);
    if (out && tri_inplace(op, out, diagonal, upper)) {
        dl_tensor_release(out);
        return NULL;
    }
    return out;
}

/* The kept triangle passes its gradient, the zeroed part gets none. */
static int tri_backward(dl_node *n, dl_tensor *const *gout, dl_tensor **gin) {
    const tri_ctx *c = n->ctx;
    gin[0] = tri_copy(c->upper ? "triu" : "tril", gout[0], c->diagonal, c->upper);
    return gin[0] ? 0 : -1;
}

static const char *tri_name(bool upper) {
    return upper ? "TriuBackward" : "TrilBackward";
}

static int tri_inplace_recorded(const char *op, dl_tensor *x, int64_t diagonal, bool upper) {
    tri_ctx c = {diagonal, upper};
    bool failed;
    dl_node *node =
        inplace_begin(op, x, tri_name(upper), tri_backward, 1, &x, &c, sizeof c, 0, NULL, &failed);
    if (failed) return -1;
    return dl_op_inplace_end(node, x, tri_inplace(op, x, diagonal, upper), false);
}

static dl_tensor *tri_copy_recorded(const char *op, dl_tensor *x, int64_t diagonal, bool upper) {
    tri_ctx c = {diagonal, upper};
    return record(tri_copy(op, x, diagonal, upper), tri_name(upper), tri_backward, 1, &x, &c,
                  sizeof c, 0, NULL);
}

int dl_tril_(dl_tensor *x, int64_t diagonal) {
    return tri_inplace_recorded("tril_", x, diagonal, false);
}
int dl_triu_(dl_tensor *x, int64_t diagonal) {
    return tri_inplace_recorded("triu_", x, diagonal, true);
}
dl_tensor *dl_tril(dl_tensor *x, int64_t diagonal) {
    return tri_copy_recorded("tril", x, diagonal, false);
}
dl_tensor *dl_triu(dl_tensor *x, int64_t diagonal) {
    return tri_copy_recorded("triu", x, diagonal, true);
}
