/* linalg.c - the linear-algebra op family (see linalg.h): checks, shapes and
 * dtypes, allocation, and dispatch to the CPU GEMM (src/cpu/gemm.c) or the
 * CUDA one (cuda/linalg.cu: cuBLAS, and our own kernel for integers).
 *
 * Everything funnels into gemm_into: operands of >= 2 dims (a 1-D operand is
 * first viewed as a row or column), batch dims broadcast against the result's,
 * a contiguous result buffer on the operands' device.  On the CPU
 * float16/bfloat16 are converted to float32, multiplied there, and rounded
 * back once; on CUDA cuBLAS takes them as they are (float32 accumulation).
 * Floating operands that the BLAS cannot read in place (neither stride of the
 * matrix dims is 1) are copied to contiguous first (on the CPU only float32
 * goes to a BLAS); transposed ones are read as they are.
 * Invariants: operands are never written; every temporary is released on
 * every path; a failure returns NULL with dl_last_error() set. */
#include "ops/linalg.h"
#include "core/error.h"
#include "cpu/gemm.h"
#include "autograd/autograd.h"
#include "ops/elementwise.h"
#include "kernels/linalg.h"
#include "kernels/cuda.h"
#include "ops/op_util.h"
#include "ops/grad_util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* --- checks ----------------------------------------------------------------------- */

/* The n tensors share a device (0-dim CPU scalars aside), and on CUDA the
 * backend has a GEMM. */
static int check_device(const char *op, int n, dl_tensor *const *ts) {
    dl_device dev;
    if (dl_common_device(op, n, ts, &dev)) return -1;
    if (dev.type == DL_DEVICE_CUDA && (!dl_cuda_linalg || !dl_cuda_linalg->gemm))
        return dl_cuda_missing(op);
    return 0;
}

/* Same device, same dtype, and a dtype we multiply. */
static int check_pair(const char *op, dl_tensor *a, dl_tensor *b) {
    dl_tensor *ts[2] = {a, b};
    if (check_device(op, 2, ts)) return -1;
    if (a->dtype != b->dtype)
        return dl_error("%s: expected m1 and m2 to have the same dtype, but got %s and %s", op,
                        dl_dtype_name(a->dtype), dl_dtype_name(b->dtype));
    if (a->dtype == DL_DTYPE_BOOL)
        return dl_error(
            "%s: bool tensors cannot be multiplied (convert them with :long() or :float())", op);
    return 0;
}

static int check_ndim(const char *op, const dl_tensor *a, const dl_tensor *b, int na, int nb,
                      const char *what) {
    if (a->ndim != na || b->ndim != nb)
        return dl_error("%s: expected %s, but got %d-D and %d-D tensors", op, what, a->ndim,
                        b->ndim);
    return 0;
}

static int shape_mismatch(const char *op, const dl_tensor *a, const dl_tensor *b, int64_t ka,
                          int64_t kb) {
    char sa[128], sb[128];
    return dl_error("%s: shapes %s and %s cannot be multiplied (%lld != %lld)", op,
                    dl_shape_str(a->ndim, a->shape, sa, sizeof sa),
                    dl_shape_str(b->ndim, b->shape, sb, sizeof sb), (long long)ka, (long long)kb);
}

/* For integer dtypes, alpha/beta must be exact integers. */
static int check_scalar(const char *op, const char *name, double v, dl_dtype dt) {
    if (dl_dtype_is_floating(dt)) return 0;
    if (v != floor(v) || fabs(v) > 9.2e18)
        return dl_error("%s: %s must be an integer for %s tensors, got %g", op, name,
                        dl_dtype_name(dt), v);
    return 0;
}

/* --- the core --------------------------------------------------------------------- */

/* Element offsets of t's batch dims (all but its last two), broadcast against
 * the result's batch shape obs (nb dims, t's aligned right), in the result's
 * row-major batch order.  offs has prod(obs) entries. */
static void batch_offsets(const dl_tensor *t, int nb, const int64_t *obs, int64_t *offs) {
    int tb = t->ndim - 2;
    int64_t st[DL_MAX_DIMS] = {0}, idx[DL_MAX_DIMS] = {0}, total = 1;
    for (int d = 0; d < nb; d++) {
        int td = d - (nb - tb);
        st[d] = (td >= 0 && t->shape[td] != 1) ? t->strides[td] : 0;
        total *= obs[d];
    }
    int64_t off = 0;
    for (int64_t i = 0; i < total; i++) {
        offs[i] = off;
        for (int d = nb - 1; d >= 0; d--) { /* odometer */
            if (++idx[d] < obs[d]) {
                off += st[d];
                break;
            }
            off -= st[d] * (idx[d] - 1);
            idx[d] = 0;
        }
    }
}

/* out = alpha * a @ b + beta * out.  a is (abatch..., M, K), b is
 * (bbatch..., K, N), both >= 2-D, one dtype, K already checked; out is
 * contiguous, of a's dtype, holding prod(obs) * M * N elements, where obs (nb
 * dims) is the broadcast of the batch shapes. */
/* Whether the GEMM reads a floating (rows, cols) operand with strides (rs, cs)
 * in place (cuBLAS also takes leading dimensions as int). */
static bool blas_readable(bool cuda, int64_t rows, int64_t cols, int64_t rs, int64_t cs) {
    if (!dl_cpu_gemm_readable(rows, cols, rs, cs)) return false;
    return !cuda || (rs <= INT32_MAX && cs <= INT32_MAX);
}

static int gemm_into(dl_tensor *a, dl_tensor *b, int nb, const int64_t *obs, dl_tensor *out,
                     double alpha, double beta) {
    dl_dtype dt = a->dtype;
    dl_device dev = dl_tensor_device(out);
    bool cuda = dev.type == DL_DEVICE_CUDA;
    if (!cuda && (dt == DL_DTYPE_F16 || dt == DL_DTYPE_BF16)) {
        int64_t n = dl_tensor_numel(out);
        dl_tensor *a32 = dl_tensor_to_dtype(a, DL_DTYPE_F32);
        dl_tensor *b32 = dl_tensor_to_dtype(b, DL_DTYPE_F32);
        dl_tensor *o32 = beta != 0 ? dl_tensor_to_dtype(out, DL_DTYPE_F32)
                                   : dl_tensor_empty(1, &n, DL_DTYPE_F32, DL_CPU);
        int rc = -1;
        if (a32 && b32 && o32 && gemm_into(a32, b32, nb, obs, o32, alpha, beta) == 0) {
            dl_tensor *flat = dl_tensor_view(out, 1, &n);
            dl_tensor *src = flat ? dl_tensor_view(o32, 1, &n) : NULL;
            rc = src ? dl_tensor_copy_(flat, src) : -1;
            dl_tensor_release(src);
            dl_tensor_release(flat);
        }
        dl_tensor_release(a32);
        dl_tensor_release(b32);
        dl_tensor_release(o32);
        return rc;
    }

    int an = a->ndim, bn = b->ndim;
    int64_t M = a->shape[an - 2], K = a->shape[an - 1], N = b->shape[bn - 1];
    int64_t batch = 1;
    for (int d = 0; d < nb; d++) batch *= obs[d];
    if (batch == 0 || M == 0 || N == 0) return 0;

    dl_tensor *ac = NULL, *bc = NULL;
    if (dt == DL_DTYPE_F32 || (cuda && dl_dtype_is_floating(dt))) {
        if (!blas_readable(cuda, M, K, a->strides[an - 2], a->strides[an - 1])) {
            if (!(ac = dl_tensor_contiguous(a))) return -1;
            a = ac;
        }
        if (!blas_readable(cuda, K, N, b->strides[bn - 2], b->strides[bn - 1])) {
            if (!(bc = dl_tensor_contiguous(b))) {
                dl_tensor_release(ac);
                return -1;
            }
            b = bc;
        }
    }
    int rc = -1;
    int64_t *offs = malloc(sizeof(int64_t) * 2 * (size_t)batch);
    if (!offs) {
        dl_error("matmul: out of memory for %lld batch offsets", (long long)batch);
    } else {
        batch_offsets(a, nb, obs, offs);
        batch_offsets(b, nb, obs, offs + batch);
        dl_gemm_matrix A = {dl_tensor_data_ptr(a), offs, a->strides[an - 2], a->strides[an - 1]};
        dl_gemm_matrix B = {dl_tensor_data_ptr(b), offs + batch, b->strides[bn - 2],
                            b->strides[bn - 1]};
        if (cuda)
            rc = dl_cuda_linalg->gemm(dev.index, dt, batch, M, N, K, alpha, &A, &B, beta,
                                      dl_tensor_data_ptr(out));
        else
            rc = dl_cpu_gemm(dt, batch, M, N, K, alpha, &A, &B, beta, dl_tensor_data_ptr(out));
        if (rc == 0) dl_tensor_bump_version(out);
    }
    free(offs);
    dl_tensor_release(ac);
    dl_tensor_release(bc);
    return rc;
}

/* A new tensor of shape (ndim, shape) holding alpha * a @ b (both >= 2-D,
 * checked). */
static dl_tensor *gemm_new(dl_tensor *a, dl_tensor *b, int nb, const int64_t *obs, int ndim,
                           const int64_t *shape, double alpha) {
    dl_tensor *out = dl_tensor_empty(ndim, shape, a->dtype, dl_tensor_device(a));
    if (out && gemm_into(a, b, nb, obs, out, alpha, 0.0)) {
        dl_tensor_release(out);
        return NULL;
    }
    return out;
}

/* Broadcast batch shape of a and b (both >= 2-D) into obs; its rank, or -1
 * with an error naming op. */
static int batch_shape(const char *op, const dl_tensor *a, const dl_tensor *b, int64_t *obs) {
    int abn = a->ndim - 2, bbn = b->ndim - 2;
    int nb = abn > bbn ? abn : bbn;
    for (int d = 0; d < nb; d++) {
        int da = d - (nb - abn), db = d - (nb - bbn);
        int64_t sa = da >= 0 ? a->shape[da] : 1, sb = db >= 0 ? b->shape[db] : 1;
        if (sa != sb && sa != 1 && sb != 1) {
            char s1[128], s2[128];
            return dl_error("%s: batch dimensions of %s and %s cannot be broadcast (%lld vs %lld "
                            "at batch dimension %d)",
                            op, dl_shape_str(a->ndim, a->shape, s1, sizeof s1),
                            dl_shape_str(b->ndim, b->shape, s2, sizeof s2), (long long)sa,
                            (long long)sb, d + 1);
        }
        obs[d] = sa == 1 ? sb : sa;
    }
    return nb;
}

/* alpha * a @ b for a (..., M, K) and b (..., K, N), batch dims broadcast;
 * K already checked.  The result is (batch..., M, N). */
static dl_tensor *matmul_nd(const char *op, dl_tensor *a, dl_tensor *b, double alpha) {
    int64_t shape[DL_MAX_DIMS];
    int nb = batch_shape(op, a, b, shape);
    if (nb < 0) return NULL;
    shape[nb] = a->shape[a->ndim - 2];
    shape[nb + 1] = b->shape[b->ndim - 1];
    return gemm_new(a, b, nb, shape, nb + 2, shape, alpha);
}

/* (n) . (n) -> 0-dim, as (1,n) @ (n,1). */
static dl_tensor *dot_impl(const char *op, dl_tensor *a, dl_tensor *b) {
    if (a->shape[0] != b->shape[0]) {
        if (strcmp(op, "matmul") == 0) {
            shape_mismatch(op, a, b, a->shape[0], b->shape[0]);
        } else {
            dl_error("%s: expected 1-D tensors of the same size, but got %lld and %lld elements",
                     op, (long long)a->shape[0], (long long)b->shape[0]);
        }
        return NULL;
    }
    dl_tensor *row = dl_tensor_unsqueeze(a, 0);
    dl_tensor *col = row ? dl_tensor_unsqueeze(b, 1) : NULL;
    dl_tensor *out = col ? gemm_new(row, col, 0, NULL, 0, NULL, 1.0) : NULL;
    dl_tensor_release(row);
    dl_tensor_release(col);
    return out;
}

/* --- backward formulas -------------------------------------------------------------
 * Every product here is a special case of out = alpha * A @ B with A = a (a
 * 1-D a viewed as a row (1,K)) and B = b (a 1-D b viewed as a column (K,1)),
 * batch dims broadcast.  With G the output gradient viewed the same way
 * (the dims a 1-D operand dropped put back):
 *     grad A = alpha * G @ B^T,  grad B = alpha * A^T @ G,
 * each summed over the batch dims its operand was broadcast along, then
 * viewed back to the operand's shape and dtype.  addmm adds beta * G for its
 * input (summed to the input's broadcast shape); outer is (n,1) @ (1,m). */

typedef struct {
    double alpha, beta;
    bool outer; /* operands are the 1-D vectors of outer: a is a column, b a row */
} mm_ctx;

/* Slots of the saved operands (each saved only when the other one needs a
 * gradient) and of the edges. */
enum { MM_A = 0, MM_B = 1 };

/* The operand as a >= 2-D matrix operand: a 1-D `a` is a row (unless outer:
 * a column), a 1-D `b` a column (outer: a row). */
static dl_tensor *as_matrix(dl_tensor *t, bool is_a, bool outer) {
    if (t->ndim != 1) return dl_tensor_retain(t);
    return dl_tensor_unsqueeze(t, is_a != outer ? 0 : 1);
}

/* alpha * x @ y^T, or alpha * x^T @ y when transpose_x, reduced to an
 * operand's matrix shape (mnd, mshape: broadcast batch dims summed), then
 * viewed as the operand (meta m) and converted to its dtype. */
static dl_tensor *operand_grad(dl_tensor *x, dl_tensor *y, bool transpose_x, double alpha,
                               const dl_tensor_meta *m, int mnd, const int64_t *mshape) {
    dl_tensor *p = NULL, *r = NULL;
    if (transpose_x && mnd == 2 && x->ndim > 2) {
        /* a matrix B against a batched A: B's gradient sums A_b^T @ G_b over
         * the batch, which is one GEMM over the folded batch:
         * (K, batch*M) @ (batch*M, N) */
        int64_t rows = 1;
        for (int d = 0; d < x->ndim - 1; d++) rows *= x->shape[d];
        int64_t s1[2] = {rows, x->shape[x->ndim - 1]}, s2[2] = {rows, y->shape[y->ndim - 1]};
        dl_tensor *xf = dl_tensor_reshape(x, 2, s1);
        dl_tensor *yf = xf ? dl_tensor_reshape(y, 2, s2) : NULL;
        dl_tensor *xt = yf ? dl_tensor_transpose(xf, 0, 1) : NULL;
        p = xt ? matmul_nd("matmul", xt, yf, alpha) : NULL;
        dl_tensor_release(xf);
        dl_tensor_release(yf);
        dl_tensor_release(xt);
    } else {
        dl_tensor *xt = transpose_x ? dl_tensor_transpose(x, -1, -2) : dl_tensor_retain(x);
        dl_tensor *yt = transpose_x ? dl_tensor_retain(y) : dl_tensor_transpose(y, -1, -2);
        p = xt && yt ? matmul_nd("matmul", xt, yt, alpha) : NULL;
        dl_tensor_release(xt);
        dl_tensor_release(yt);
    }
    if (p) {
        dl_tensor *s = dl_sum_to_shape(p, mnd, mshape);
        dl_tensor *v = s ? dl_tensor_reshape(s, m->ndim, m->shape) : NULL;
        r = v ? dl_tensor_to_dtype(v, m->dtype) : NULL;
        dl_tensor_release(s);
        dl_tensor_release(v);
    }
    dl_tensor_release(p);
    return r;
}

static int mm_backward(dl_node *n, dl_tensor *const *gout, dl_tensor **gin) {
    const mm_ctx *c = n->ctx;
    bool need_a = dl_node_needs_grad(n, MM_A), need_b = dl_node_needs_grad(n, MM_B);
    dl_tensor *a = NULL, *b = NULL, *A = NULL, *B = NULL, *G = NULL;
    int rc = -1;
    /* the saved operands, in the output's dtype (outer promotes) */
    if (need_b) {
        dl_tensor *s = dl_node_saved(n, MM_A);
        if (!s || !(a = dl_tensor_to_dtype(s, gout[0]->dtype))) goto done;
    }
    if (need_a) {
        dl_tensor *s = dl_node_saved(n, MM_B);
        if (!s || !(b = dl_tensor_to_dtype(s, gout[0]->dtype))) goto done;
    }
    const dl_tensor_meta *ma = &n->input_meta[MM_A], *mb = &n->input_meta[MM_B];
    /* matrix shapes of the operands, and G with the dropped dims put back */
    int64_t sa[DL_MAX_DIMS], sb[DL_MAX_DIMS], sg[DL_MAX_DIMS];
    int na = ma->ndim, nbd = mb->ndim;
    memcpy(sa, ma->shape, sizeof(int64_t) * (size_t)na);
    memcpy(sb, mb->shape, sizeof(int64_t) * (size_t)nbd);
    if (na == 1) {
        sa[1] = c->outer ? 1 : sa[0];
        sa[0] = c->outer ? sa[0] : 1;
        na = 2;
    }
    if (nbd == 1) {
        sb[1] = c->outer ? sb[0] : 1;
        sb[0] = c->outer ? 1 : sb[0];
        nbd = 2;
    }
    dl_tensor *g = gout[0];
    int ng = g->ndim;
    memcpy(sg, g->shape, sizeof(int64_t) * (size_t)ng);
    if (!c->outer && ma->ndim == 1) { /* the M dim (1) before N, or at the end */
        int at = mb->ndim == 1 ? ng : ng - 1;
        memmove(sg + at + 1, sg + at, sizeof(int64_t) * (size_t)(ng - at));
        sg[at] = 1;
        ng++;
    }
    if (!c->outer && mb->ndim == 1) sg[ng++] = 1; /* the N dim */
    if (!(G = dl_tensor_reshape(g, ng, sg))) goto done;
    if (a && !(A = as_matrix(a, true, c->outer))) goto done;
    if (b && !(B = as_matrix(b, false, c->outer))) goto done;
    if (need_a && !(gin[MM_A] = operand_grad(G, B, false, c->alpha, ma, na, sa))) goto done;
    if (need_b && !(gin[MM_B] = operand_grad(A, G, true, c->alpha, mb, nbd, sb))) goto done;
    if (n->n_inputs == 3 && dl_node_needs_grad(n, 2)) { /* addmm's input */
        dl_tensor *s = NULL;
        if (c->beta == 1) {
            s = dl_tensor_retain(g);
        } else {
            dl_tensor *k = dl_tensor_scalar(c->beta, g->dtype);
            s = k ? dl_mul(g, k) : NULL;
            dl_tensor_release(k);
        }
        if (dl_grad_give_input(n, gin, 2, s)) goto done;
    }
    rc = 0;
done:
    dl_tensor_release(a);
    dl_tensor_release(b);
    dl_tensor_release(A);
    dl_tensor_release(B);
    dl_tensor_release(G);
    return rc;
}

/* Records out = name(a, b [, input]) when an operand requires grad and the
 * result is floating; returns out (NULL, out released, on failure).  The
 * forward path pays one check when nothing requires grad.  a is saved for
 * b's gradient and b for a's. */
static dl_tensor *record(const char *name, dl_tensor *out, dl_tensor *a, dl_tensor *b,
                         dl_tensor *input, mm_ctx c) {
    if (!out || !dl_dtype_is_floating(out->dtype)) return out;
    dl_tensor *ins[3] = {a, b, input},
              *save[2] = {b->requires_grad ? a : NULL, a->requires_grad ? b : NULL};
    return dl_op_record(out, name, mm_backward, input ? 3 : 2, ins, 2, save, &c, sizeof c);
}

static const mm_ctx plain = {.alpha = 1.0, .beta = 0.0, .outer = false};

/* --- the ops ------------------------------------------------------------------------ */

dl_tensor *dl_matmul(dl_tensor *a, dl_tensor *b) {
    const char *op = "matmul";
    if (check_pair(op, a, b)) return NULL;
    if (a->ndim == 0 || b->ndim == 0) {
        dl_error("matmul: both arguments need to be at least 1-D, but they are %d-D and %d-D",
                 a->ndim, b->ndim);
        return NULL;
    }
    if (a->ndim == 1 && b->ndim == 1)
        return record("DotBackward", dot_impl(op, a, b), a, b, NULL, plain);

    int64_t ka = a->shape[a->ndim - 1], kb = b->ndim == 1 ? b->shape[0] : b->shape[b->ndim - 2];
    if (ka != kb) {
        shape_mismatch(op, a, b, ka, kb);
        return NULL;
    }
    dl_tensor *a2 = a->ndim == 1 ? dl_tensor_unsqueeze(a, 0) : dl_tensor_retain(a);
    dl_tensor *b2 = b->ndim == 1 ? dl_tensor_unsqueeze(b, 1) : dl_tensor_retain(b);
    dl_tensor *out = NULL;
    if (a2 && b2 && (out = matmul_nd(op, a2, b2, 1.0))) {
        /* drop the dims a 1-D operand was given: M unless a is 1-D, N unless b is */
        int64_t shape[DL_MAX_DIMS];
        int ndim = out->ndim - 2;
        memcpy(shape, out->shape, sizeof(int64_t) * (size_t)ndim);
        if (a->ndim > 1) shape[ndim++] = out->shape[out->ndim - 2];
        if (b->ndim > 1) shape[ndim++] = out->shape[out->ndim - 1];
        if (ndim != out->ndim) {
            dl_tensor *v = dl_tensor_view(out, ndim, shape);
            dl_tensor_release(out);
            out = v;
        }
    }
    dl_tensor_release(a2);
    dl_tensor_release(b2);
    const char *name = a->ndim == 2 && b->ndim == 1   ? "MvBackward"
                       : a->ndim == 2 && b->ndim == 2 ? "MmBackward"
                                                      : "MatmulBackward";
    return record(name, out, a, b, NULL, plain);
}

dl_tensor *dl_mm(dl_tensor *a, dl_tensor *b) {
    if (check_pair("mm", a, b) || check_ndim("mm", a, b, 2, 2, "2-D matrices")) return NULL;
    if (a->shape[1] != b->shape[0]) {
        shape_mismatch("mm", a, b, a->shape[1], b->shape[0]);
        return NULL;
    }
    int64_t shape[2] = {a->shape[0], b->shape[1]};
    return record("MmBackward", gemm_new(a, b, 0, NULL, 2, shape, 1.0), a, b, NULL, plain);
}

dl_tensor *dl_bmm(dl_tensor *a, dl_tensor *b) {
    if (check_pair("bmm", a, b) || check_ndim("bmm", a, b, 3, 3, "3-D tensors")) return NULL;
    if (a->shape[0] != b->shape[0]) {
        char s1[128], s2[128];
        dl_error("bmm: batch sizes differ: %s and %s (%lld != %lld)",
                 dl_shape_str(3, a->shape, s1, sizeof s1), dl_shape_str(3, b->shape, s2, sizeof s2),
                 (long long)a->shape[0], (long long)b->shape[0]);
        return NULL;
    }
    if (a->shape[2] != b->shape[1]) {
        shape_mismatch("bmm", a, b, a->shape[2], b->shape[1]);
        return NULL;
    }
    int64_t shape[3] = {a->shape[0], a->shape[1], b->shape[2]};
    return record("BmmBackward", gemm_new(a, b, 1, shape, 3, shape, 1.0), a, b, NULL, plain);
}

dl_tensor *dl_mv(dl_tensor *a, dl_tensor *v) {
    if (check_pair("mv", a, v) || check_ndim("mv", a, v, 2, 1, "a 2-D matrix and a 1-D vector"))
        return NULL;
    if (a->shape[1] != v->shape[0]) {
        shape_mismatch("mv", a, v, a->shape[1], v->shape[0]);
        return NULL;
    }
    dl_tensor *col = dl_tensor_unsqueeze(v, 1);
    dl_tensor *out = col ? gemm_new(a, col, 0, NULL, 1, a->shape, 1.0) : NULL;
    dl_tensor_release(col);
    return record("MvBackward", out, a, v, NULL, plain);
}

dl_tensor *dl_dot(dl_tensor *a, dl_tensor *b) {
    if (check_pair("dot", a, b) || check_ndim("dot", a, b, 1, 1, "1-D tensors")) return NULL;
    return record("DotBackward", dot_impl("dot", a, b), a, b, NULL, plain);
}

dl_tensor *dl_addmm(dl_tensor *input, dl_tensor *m1, dl_tensor *m2, double beta, double alpha) {
    const char *op = "addmm";
    dl_tensor *all[3] = {input, m1, m2};
    if (check_pair(op, m1, m2) || check_device(op, 3, all)) return NULL;
    if (check_ndim(op, m1, m2, 2, 2, "2-D matrices for mat1 and mat2")) return NULL;
    if (input->dtype != m1->dtype) {
        dl_error("addmm: expected input and the matrices to have the same dtype, but got %s and %s",
                 dl_dtype_name(input->dtype), dl_dtype_name(m1->dtype));
        return NULL;
    }
    if (m1->shape[1] != m2->shape[0]) {
        shape_mismatch(op, m1, m2, m1->shape[1], m2->shape[0]);
        return NULL;
    }
    if (check_scalar(op, "alpha", alpha, m1->dtype) || check_scalar(op, "beta", beta, m1->dtype))
        return NULL;
    int64_t shape[2] = {m1->shape[0], m2->shape[1]};
    bool fits = input->ndim <= 2;
    for (int d = 0; d < input->ndim && fits; d++) {
        int64_t s = input->shape[input->ndim - 1 - d];
        fits = s == 1 || s == shape[1 - d];
    }
    if (!fits) {
        char s1[128], s2[128];
        dl_error("addmm: input of shape %s cannot be broadcast to the result's shape %s",
                 dl_shape_str(input->ndim, input->shape, s1, sizeof s1),
                 dl_shape_str(2, shape, s2, sizeof s2));
        return NULL;
    }
    dl_device dev = dl_tensor_device(m1);
    dl_tensor *out = dl_tensor_empty(2, shape, m1->dtype, dev);
    if (!out) return NULL;
    int rc = 0;
    if (beta != 0) { /* a 0-dim CPU input beside CUDA matrices moves first */
        dl_tensor *in = dl_scalar_to(input, dev);
        rc = in ? dl_tensor_copy_(out, in) : -1;
        dl_tensor_release(in);
    }
    if (rc || gemm_into(m1, m2, 0, NULL, out, alpha, beta)) {
        dl_tensor_release(out);
        return NULL;
    }
    mm_ctx c = {.alpha = alpha, .beta = beta, .outer = false};
    return record("AddmmBackward", out, m1, m2, input, c);
}

/* outer of two bool vectors on CUDA: the uint8 product of 0/1 values is their
 * "and"; converted back to bool. */
static dl_tensor *outer_bool_cuda(dl_tensor *a, dl_tensor *b, const int64_t *shape) {
    dl_tensor *au = dl_tensor_to_dtype(a, DL_DTYPE_U8);
    dl_tensor *bu = au ? dl_tensor_to_dtype(b, DL_DTYPE_U8) : NULL;
    dl_tensor *col = bu ? dl_tensor_unsqueeze(au, 1) : NULL;
    dl_tensor *row = col ? dl_tensor_unsqueeze(bu, 0) : NULL;
    dl_tensor *p = row ? gemm_new(col, row, 0, NULL, 2, shape, 1.0) : NULL;
    dl_tensor *out = p ? dl_tensor_to_dtype(p, DL_DTYPE_BOOL) : NULL;
    dl_tensor_release(au);
    dl_tensor_release(bu);
    dl_tensor_release(col);
    dl_tensor_release(row);
    dl_tensor_release(p);
    return out;
}

dl_tensor *dl_outer(dl_tensor *a, dl_tensor *b) {
    dl_tensor *ts[2] = {a, b};
    if (check_device("outer", 2, ts) || check_ndim("outer", a, b, 1, 1, "1-D tensors")) return NULL;
    dl_dtype dt = dl_result_type(a, b);
    int64_t shape[2] = {a->shape[0], b->shape[0]};
    if (dt == DL_DTYPE_BOOL && dl_tensor_device(a).type == DL_DEVICE_CUDA)
        return outer_bool_cuda(a, b, shape);
    if (dt == DL_DTYPE_BOOL) { /* a[i] and b[j] */
        dl_tensor *out = dl_tensor_empty(2, shape, dt, DL_CPU);
        if (!out) return NULL;
        bool *o = dl_tensor_data_ptr(out);
        const char *pa = dl_tensor_data_ptr(a), *pb = dl_tensor_data_ptr(b);
        for (int64_t i = 0; i < shape[0]; i++)
            for (int64_t j = 0; j < shape[1]; j++)
                o[i * shape[1] + j] = *(const bool *)(pa + i * a->strides[0]) &&
                                      *(const bool *)(pb + j * b->strides[0]);
        return out;
    }
    dl_tensor *ac = dl_tensor_to_dtype(a, dt);
    dl_tensor *bc = ac ? dl_tensor_to_dtype(b, dt) : NULL;
    dl_tensor *col = bc ? dl_tensor_unsqueeze(ac, 1) : NULL;
    dl_tensor *row = col ? dl_tensor_unsqueeze(bc, 0) : NULL;
    dl_tensor *out = row ? gemm_new(col, row, 0, NULL, 2, shape, 1.0) : NULL;
    dl_tensor_release(ac);
    dl_tensor_release(bc);
    dl_tensor_release(col);
    dl_tensor_release(row);
    mm_ctx c = {.alpha = 1.0, .beta = 0.0, .outer = true};
    return record("OuterBackward", out, a, b, NULL, c);
}
