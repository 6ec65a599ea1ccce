/* op_util.h - the toolkit every op family shares: compute dtypes, operand
 * preparation (dtype, contiguity, channels-last layout), releasing temporaries,
 * device tests and the common operand checks.
 *
 * Invariants: every function returning a tensor returns a new reference, or
 * NULL with dl_last_error() set; a NULL operand passes through as NULL where
 * a comment says so.
 *
 * The conventions of every family's op header (ops/<family>.h): forwards and
 * backwards are plain functions, outputs first; each validates its operands
 * (messages name the op and the facts), infers the result's shape, allocates
 * new results and dispatches to cpu/<family>.c or cuda/<family>.cu.  Inputs
 * may be any strided views and are never modified unless the op says so
 * (in-place ops, batch norm's running statistics).  Dimensions and indices
 * are 0-based.  A function returning a tensor returns a new reference, or NULL
 * with dl_last_error() set; an int function returns 0 or -1 and on failure
 * sets none of its outputs.  The node-recording entry points (dl_conv2d,
 * dl_softmax, ...) record when an input requires grad; their backwards are
 * the family's *_backward functions, chosen by the node's saved parameters. */
#ifndef DL_OPS_OP_UTIL_H
#define DL_OPS_OP_UTIL_H

#include "autograd/autograd.h"
#include "core/tensor.h"
#include "kernels/cuda.h"

#include <stdbool.h>
#include <stddef.h>

/* --- dtypes ------------------------------------------------------------------- */

/* The dtype an elementwise kernel computes a result dtype in: float64 stays,
 * every other floating type computes in float32, integers and bool in int64. */
dl_dtype dl_op_compute_dtype(dl_dtype result);

/* The dtype a floating-point kernel (softmax, losses, conv, norm, pooling)
 * computes in: float64 stays, anything else computes in float32. */
dl_dtype dl_op_float_dtype(dl_dtype dt);

/* Errors "<op>: <what> must be a floating-point tensor, got <dtype>" unless t
 * is floating point; 0 otherwise. */
int dl_op_need_floating(const char *op, const char *what, const dl_tensor *t);

/* Errors "<op>: <what> <v> is too large" when one of v[0..n) is 2^31 or more
 * in magnitude (so that no size arithmetic on it overflows); 0 otherwise. */
int dl_op_check_limit(const char *op, const char *what, const int64_t *v, int n);

/* --- operands and results ----------------------------------------------------- */

/* t in dtype dt and contiguous (t itself, retained, when it already is);
 * NULL for a NULL t. */
dl_tensor *dl_op_dense(dl_tensor *t, dl_dtype dt);

/* out (a result in the compute dtype; consumed) as dtype dt; NULL passes. */
dl_tensor *dl_op_finish_as(dl_tensor *out, dl_dtype dt);

/* The tail of an op that computed into out with status rc: out when rc is 0,
 * else NULL (out released). */
dl_tensor *dl_op_result(dl_tensor *out, int rc);

/* Releases ts[0..n) (NULL entries allowed) and sets each to NULL. */
void dl_op_release_all(dl_tensor **ts, int n);

/* *t (a result in the compute dtype) converted to dt and viewed with shape
 * (ndim, shape) (unbatched results).  0/-1; on failure *t is released and
 * NULL.  A NULL *t passes. */
int dl_op_finish_view(dl_tensor **t, dl_dtype dt, int ndim, const int64_t *shape);

/* Errors "<op>: <wa> of shape [..] does not match <wb> of shape [..]" unless
 * a and b have one shape; 0 otherwise. */
int dl_op_check_same_shape(const char *op, const char *wa, const dl_tensor *a, const char *wb,
                           const dl_tensor *b);

/* Errors "<op>: <what> is an expanded view and cannot be updated in place
 * (...)" when elements of t share one memory location (a stride 0 along a
 * dimension of more than one element); 0 otherwise. */
int dl_op_check_writable(const char *op, const char *what, const dl_tensor *t);

/* t (consumed) on dev: moved when it is elsewhere (a 0-dim CPU operand
 * beside CUDA ones, or a gradient from another device); NULL passes. */
dl_tensor *dl_op_onto(dl_tensor *t, dl_device dev);

/* dl_op_dense, then dl_op_onto dev. */
dl_tensor *dl_op_dense_on(dl_tensor *t, dl_dtype dt, dl_device dev);

/* Data pointers of a tensor (NULL for a NULL tensor); the typed ones are for
 * a tensor in that compute dtype. */
static inline void *dl_op_data(const dl_tensor *t) {
    return t ? dl_tensor_data_ptr(t) : NULL;
}
static inline float *dl_op_f32p(const dl_tensor *t) {
    return (float *)dl_op_data(t);
}
static inline double *dl_op_f64p(const dl_tensor *t) {
    return (double *)dl_op_data(t);
}

/* An optional result: t goes to *out when the caller asked for it (out not
 * NULL), else it is released. */
static inline void dl_op_optional_out(dl_tensor **out, dl_tensor *t) {
    if (out)
        *out = t;
    else
        dl_tensor_release(t);
}

/* Hands ts[0], ts[1], ts[2] to the caller's outputs *a, *b, *c (the last
 * step of a backward with three gradients) and leaves NULLs behind. */
void dl_op_take3(dl_tensor **ts, dl_tensor **a, dl_tensor **b, dl_tensor **c);

/* "[2, 3, 4]" of t, written into buf. */
const char *dl_op_shape_str(const dl_tensor *t, char *buf, size_t n);

/* --- devices ------------------------------------------------------------------ */

/* Sets "<op>: no CUDA kernel for this operation in this build" and returns -1. */
int dl_cuda_missing(const char *op);

/* The device n tensors share, for op's error messages: all CPU -> CPU; any on
 * CUDA -> that device, provided every other one is on the same device or is
 * a 0-dim CPU tensor (a scalar, which CUDA kernels take by value or the op
 * moves).  NULL entries are skipped.  -1 with an error naming op and both
 * devices otherwise. */
int dl_common_device(const char *op, int n, dl_tensor *const *ts, dl_device *out);

/* A 0-dim CPU tensor moved to dev (retained t when already there). */
dl_tensor *dl_scalar_to(dl_tensor *t, dl_device dev);

static inline bool dl_op_is_cuda(dl_device dev) {
    return dev.type == DL_DEVICE_CUDA;
}
static inline bool dl_op_on_cuda(const dl_tensor *t) {
    return dl_op_is_cuda(dl_tensor_device(t));
}

/* The device the n operands (NULLs skipped) share, as dl_common_device: the
 * CPU, or a CUDA device, made current, when the family's CUDA table is
 * present (have); -1 with the error otherwise. */
int dl_op_device(const char *op, int n, dl_tensor *const *ts, bool have, dl_device *dev);

/* 0 when a CUDA family table has the kernel op needs (have), with dev made
 * current; else -1 with the error (dl_cuda_missing). */
int dl_op_cuda_ready(const char *op, dl_device dev, bool have);

/* --- recording autograd nodes ------------------------------------------------ */

/* The node of an out-of-place op: out = op(in[0..n_in)).  When grad mode is
 * on and an input requires grad, a node named `name` with backward fn is
 * made, the n_save tensors its backward reads are saved (NULL entries save
 * "absent"), ctx_size bytes of parameters are copied from ctx, and out is
 * returned with the node attached.  Otherwise out is returned as it is.
 * out is consumed: NULL in, NULL out; on failure out is released and NULL
 * returned with the error. */
dl_tensor *dl_op_record(dl_tensor *out, const char *name, dl_backward_fn fn, int n_in,
                        dl_tensor *const *in, int n_save, dl_tensor *const *save, const void *ctx,
                        size_t ctx_size);

/* The node alone (several outputs, in-place ops, or outputs the caller
 * attaches itself): dl_node_new with n_out outputs, then the saves and the
 * parameters as dl_op_record does.  NULL with the error. */
dl_node *dl_op_node_new(const char *name, dl_backward_fn fn, int n_in, dl_tensor *const *in,
                        int n_out, int n_save, dl_tensor *const *save, const void *ctx,
                        size_t ctx_size);

/* Drops a node under construction and the op's result; returns NULL (the
 * error is already set). */
dl_tensor *dl_op_abort(dl_node *n, dl_tensor *out);

/* The node of an in-place op writing into self = in[0], made before the
 * write: dl_op_node_new with one output, except that with save_old the node
 * saves a copy of self's current value in slot 0 instead of save[0] (a
 * backward that reads the old value, which the write overwrites; n_save >= 1
 * then).  NULL with the error. */
dl_node *dl_op_inplace_node(const char *name, dl_backward_fn fn, int n_in, dl_tensor *const *in,
                            int n_save, dl_tensor *const *save, bool save_old, const void *ctx,
                            size_t ctx_size);

/* The end of an in-place op's recording.  The node n was made with
 * dl_op_inplace_node (or dl_op_node_new) before the write to self (so that its saves, e.g. a copy
 * of self's old value, see the values before it); rc is the write's status. When the write
 * succeeded, n saves self's new value in its next slot if save_self (a backward that reads the
 * result), then self becomes n's output (its history replaced).  The creator's reference on n is
 * dropped either way; a NULL n passes.  Returns 0, or -1 when rc or the save failed. */
int dl_op_inplace_end(dl_node *n, dl_tensor *self, int rc, bool save_self);

/* --- temporaries of a backward formula ------------------------------------------
 * A formula is a straight list of steps over a pool that owns every
 * intermediate: dl_op_keep takes a step's new reference and returns it (a
 * NULL one, a failed step, marks the pool failed); DL_OP_STEP(p, expr)
 * evaluates expr only while no step has failed, so a formula checks once, at
 * its end.  dl_op_pool_free releases everything the pool holds.  Start with
 * dl_op_pool p = {0}. */

#define DL_OP_POOL_MAX 32
typedef struct dl_op_pool {
    dl_tensor *t[DL_OP_POOL_MAX];
    int n;
    bool failed;
} dl_op_pool;

dl_tensor *dl_op_keep(dl_op_pool *p, dl_tensor *t);
#define DL_OP_STEP(p, expr) ((p)->failed ? NULL : dl_op_keep((p), (expr)))
void dl_op_pool_free(dl_op_pool *p);

/* --- layouts ------------------------------------------------------------------
 * Channels-last: an (N,C,*spatial) tensor dense with C fastest, i.e.
 * (N,*spatial,C) in memory (size-1 dims aside, as PyTorch).  The public 4-D
 * test is dl_is_channels_last (ops/views.h). */

/* Whether t (ndim >= 3) is dense channels-last; a tensor that is also plain
 * contiguous (C == 1, or 1x1 planes) counts. */
bool dl_op_dense_channels_last(const dl_tensor *t);

/* Whether t is channels-last and not also plain contiguous: the layout a
 * kernel with a channels-last path should keep. */
bool dl_op_is_channels_last(const dl_tensor *t);

/* An uninitialised tensor of shape on dev; with cl, channels-last: an
 * (N,*spatial,C) tensor viewed as (N,C,*spatial). */
dl_tensor *dl_op_empty_layout(int ndim, const int64_t *shape, dl_dtype dt, dl_device dev, bool cl);

/* t in dtype dt, contiguous or (cl) channels-last dense: t itself, retained,
 * when it already is (a tensor both contiguous and channels-last counts as
 * either). */
dl_tensor *dl_op_dense_layout(dl_tensor *t, dl_dtype dt, bool cl);

#endif
