/* gemm.c - CPU matrix-multiply kernels (see gemm.h).
 *
 * float32: oneDNN's dnnl_sgemm (row-major).  An operand with a unit column
 * stride is passed as 'N' with its row stride as leading dimension, one with a
 * unit row stride as 'T' with its column stride: transposed views are never
 * copied.  A batch of small matrices is spread over OpenMP threads (sgemm then
 * runs single-threaded inside each); a batch of large ones loops sgemm, which
 * threads itself over the shared OpenMP runtime.
 *
 * float64 and integers: a blocked loop.  B is packed in (KC x NC) panels of
 * NR-wide column strips, A in (MC x KC) blocks of MR-tall row strips, and an
 * MR x NR register tile accumulates over the panel's depth.  Integers are
 * widened to 64 bits and computed in unsigned arithmetic (wrap-around, no
 * undefined overflow), then truncated back: the same result as computing in
 * the narrow type modulo 2^bits.
 *
 * Invariants: out is contiguous (batch, M, N); beta == 0 never reads out;
 * worker threads never call dl_error (it is thread-local): failures are
 * collected and reported by the calling thread. */
#include "gemm.h"
#include "core/error.h"
#include "core/parallel.h"

#include <oneapi/dnnl/dnnl.h>
#include <stdlib.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

/* Work (M*N*K multiply-adds) below which one matrix runs on one thread, and
 * below which a batch is spread over threads one matrix each (also done when
 * the batch divides evenly among the threads).  Measured on 2 threads with
 * float32: batches of 64^3..256^3 products run 10-20% faster spread over the
 * batch than through sgemm's own threading. */
#define GEMM_SERIAL_WORK (32 * 32 * 32)
#define GEMM_SMALL_WORK (256 * 256 * 256)

static bool batch_parallel(int64_t batch, int nt, int64_t work) {
    return batch > 1 && nt > 1 && (work < GEMM_SMALL_WORK || batch % nt == 0);
}

/* Blocking of the own kernels (elements): an MR x NR register tile, A blocks
 * of MC x KC, B panels of KC x NC. */
enum { MR = 6, NR = 16, KC = 256, NC = 512, MC = 96 };

static int64_t min64(int64_t a, int64_t b) {
    return a < b ? a : b;
}
static int64_t round_up(int64_t a, int64_t m) {
    return (a + m - 1) / m * m;
}

/* --- layouts ---------------------------------------------------------------- */

/* sgemm's view of a (rows, cols) matrix: 'N' with leading dimension ld
 * (element (i,j) at i*ld + j) or 'T' (element (i,j) at j*ld + i).  Strides of
 * size-1 dimensions are irrelevant and ignored. */
static bool sgemm_layout(int64_t rows, int64_t cols, int64_t rs, int64_t cs, char *trans,
                         int64_t *ld) {
    int64_t min_n = cols > 1 ? cols : 1, min_t = rows > 1 ? rows : 1;
    if (cs == 1 || cols == 1) {
        int64_t l = rows == 1 ? min_n : rs;
        if (l >= min_n) {
            *trans = 'N';
            *ld = l;
            return true;
        }
    }
    if (rs == 1 || rows == 1) {
        int64_t l = cols == 1 ? min_t : cs;
        if (l >= min_t) {
            *trans = 'T';
            *ld = l;
            return true;
        }
    }
    return false;
}

bool dl_cpu_gemm_readable(int64_t rows, int64_t cols, int64_t rs, int64_t cs) {
    char t;
    int64_t ld;
    return sgemm_layout(rows, cols, rs, cs, &t, &ld);
}

/* out[0..n) *= beta; beta == 0 writes zeros without reading. */
static void scale_out(dl_dtype dt, int64_t n, void *out, double beta) {
    if (beta == 1) return;
    if (beta == 0) {
        memset(out, 0, (size_t)n * dl_dtype_size(dt));
        return;
    }
    /* integral for integer dtypes (checked by the op); unused for floats */
    uint64_t ib = dl_dtype_is_floating(dt) ? 0 : (uint64_t)(int64_t)beta;
    switch (dt) {
    case DL_DTYPE_F32: {
        float *o = out, fb = (float)beta;
        for (int64_t i = 0; i < n; i++) o[i] *= fb;
        break;
    }
    case DL_DTYPE_F64: {
        double *o = out;
        for (int64_t i = 0; i < n; i++) o[i] *= beta;
        break;
    }
    case DL_DTYPE_I64: {
        int64_t *o = out;
        for (int64_t i = 0; i < n; i++) o[i] = (int64_t)((uint64_t)o[i] * ib);
        break;
    }
    case DL_DTYPE_I32: {
        int32_t *o = out;
        for (int64_t i = 0; i < n; i++) o[i] = (int32_t)(uint32_t)((uint64_t)(int64_t)o[i] * ib);
        break;
    }
    case DL_DTYPE_U8: {
        uint8_t *o = out;
        for (int64_t i = 0; i < n; i++) o[i] = (uint8_t)((uint64_t)o[i] * ib);
        break;
    }
    default: break;
    }
}

/* --- float32: oneDNN sgemm ----------------------------------------------------- */

typedef struct {
    int64_t M, N, K;
    char ta, tb;
    int64_t lda, ldb;
    float alpha, beta;
} sgemm_args;

/* out is (M,N), a and b point at the matrices' first elements */
static int sgemm_one(const sgemm_args *g, const float *a, const float *b, float *out) {
    dnnl_status_t st = dnnl_sgemm(g->ta, g->tb, g->M, g->N, g->K, g->alpha, a, g->lda, b, g->ldb,
                                  g->beta, out, g->N);
    return st == dnnl_success ? 0 : (int)st;
}

static int gemm_f32(int64_t batch, int64_t M, int64_t N, int64_t K, double alpha,
                    const dl_gemm_matrix *A, const dl_gemm_matrix *B, double beta, float *out) {
    sgemm_args g = {M, N, K, 'N', 'N', 0, 0, (float)alpha, (float)beta};
    if (!sgemm_layout(M, K, A->rs, A->cs, &g.ta, &g.lda) ||
        !sgemm_layout(K, N, B->rs, B->cs, &g.tb, &g.ldb))
        return dl_error("matmul: internal error: operand strides not readable by sgemm");
    const float *a = A->data, *b = B->data;
    int nt = dl_get_num_threads();
    int status = 0;
    if (batch_parallel(batch, nt, M * N * K)) {
#pragma omp parallel for num_threads(nt) schedule(static)
        for (int64_t i = 0; i < batch; i++) {
            int st = sgemm_one(&g, a + (A->boff ? A->boff[i] : 0), b + (B->boff ? B->boff[i] : 0),
                               out + i * M * N);
            if (st) {
#pragma omp atomic write
                status = st;
            }
        }
    } else {
        for (int64_t i = 0; i < batch && !status; i++)
            status = sgemm_one(&g, a + (A->boff ? A->boff[i] : 0), b + (B->boff ? B->boff[i] : 0),
                               out + i * M * N);
    }
    if (status) return dl_error("matmul: oneDNN sgemm failed (status %d)", status);
    return 0;
}

/* --- float64 and integers: blocked loops ------------------------------------------ */

/* One matrix for the own kernels: strides in elements, itemsize bytes. */
typedef struct {
    const char *p;
    int64_t rs, cs;
} mat_view;

static uint64_t load_u64(const char *p, dl_dtype dt) {
    switch (dt) {
    case DL_DTYPE_I64: return (uint64_t) * (const int64_t *)p;
    case DL_DTYPE_I32: return (uint64_t)(int64_t) * (const int32_t *)p;
    case DL_DTYPE_U8: return *(const uint8_t *)p;
    default: return 0;
    }
}

/* bp is ceil(nb/NR) strips, each (kb, NR) row-major, zero-padded past nb.
 * b points at element (k0, j0) of a (.., ..) matrix with strides (rs, cs). */
static void pack_b(dl_dtype dt, mat_view b, int64_t kb, int64_t nb, void *bp) {
    size_t isz = dl_dtype_size(dt);
    for (int64_t j0 = 0; j0 < nb; j0 += NR) {
        int64_t w = min64(NR, nb - j0);
        if (dt == DL_DTYPE_F64) {
            double *dst = (double *)bp + j0 * kb; /* strip j0/NR starts at j0/NR*kb*NR */
            for (int64_t k = 0; k < kb; k++, dst += NR) {
                const double *src = (const double *)(b.p + (size_t)(k * b.rs + j0 * b.cs) * isz);
                int64_t j = 0;
                for (; j < w; j++) dst[j] = src[j * b.cs];
                for (; j < NR; j++) dst[j] = 0;
            }
        } else {
            uint64_t *dst = (uint64_t *)bp + j0 * kb;
            for (int64_t k = 0; k < kb; k++, dst += NR) {
                int64_t j = 0;
                for (; j < w; j++)
                    dst[j] = load_u64(b.p + (size_t)(k * b.rs + (j0 + j) * b.cs) * isz, dt);
                for (; j < NR; j++) dst[j] = 0;
            }
        }
    }
}

/* ap is ceil(mb/MR) strips, each (kb, MR) row-major (i.e. the strip's rows
 * interleaved), zero-padded past mb.  a points at element (i0, k0). */
static void pack_a(dl_dtype dt, mat_view a, int64_t mb, int64_t kb, void *ap) {
    size_t isz = dl_dtype_size(dt);
    for (int64_t i0 = 0; i0 < mb; i0 += MR) {
        int64_t h = min64(MR, mb - i0);
        if (dt == DL_DTYPE_F64) {
            double *dst = (double *)ap + i0 * kb;
            for (int64_t r = 0; r < MR; r++) {
                if (r >= h) {
                    for (int64_t k = 0; k < kb; k++) dst[k * MR + r] = 0;
                    continue;
                }
                const double *src = (const double *)(a.p + (size_t)((i0 + r) * a.rs) * isz);
                for (int64_t k = 0; k < kb; k++) dst[k * MR + r] = src[k * a.cs];
            }
        } else {
            uint64_t *dst = (uint64_t *)ap + i0 * kb;
            for (int64_t r = 0; r < MR; r++) {
                for (int64_t k = 0; k < kb; k++)
                    dst[k * MR + r] =
                        r < h ? load_u64(a.p + (size_t)((i0 + r) * a.rs + k * a.cs) * isz, dt) : 0;
            }
        }
    }
}

/* c is (mr, nr) inside a matrix with row stride ldc: c += alpha * ap @ bp.
 * ap is (kb, MR), bp is (kb, NR).  Compiled for AVX-512, AVX2 and the
 * baseline (plain x86-64 runs the tile 4x slower). */
DL_TARGET_CLONES("avx512f", "avx2", "default")
static void micro_f64(int64_t kb, const double *ap, const double *bp, double alpha, double *c,
                      int64_t ldc, int64_t mr, int64_t nr) {
    double acc[MR][NR] = {{0}};
    for (int64_t k = 0; k < kb; k++, ap += MR, bp += NR)
        for (int r = 0; r < MR; r++)
            for (int j = 0; j < NR; j++) acc[r][j] += ap[r] * bp[j];
    for (int64_t r = 0; r < mr; r++)
        for (int64_t j = 0; j < nr; j++) c[r * ldc + j] += alpha * acc[r][j];
}

static void micro_u64(int64_t kb, const uint64_t *ap, const uint64_t *bp, uint64_t *acc) {
    /* acc is (MR, NR) */
    memset(acc, 0, sizeof(uint64_t) * MR * NR);
    for (int64_t k = 0; k < kb; k++, ap += MR, bp += NR)
        for (int r = 0; r < MR; r++)
            for (int j = 0; j < NR; j++) acc[r * NR + j] += ap[r] * bp[j];
}

/* c (mr, nr) with row stride ldc, of integer dtype dt: c += alpha * acc */
static void store_int(dl_dtype dt, const uint64_t *acc, uint64_t alpha, char *c, int64_t ldc,
                      int64_t mr, int64_t nr) {
    for (int64_t r = 0; r < mr; r++)
        for (int64_t j = 0; j < nr; j++) {
            uint64_t v = alpha * acc[r * NR + j];
            int64_t at = r * ldc + j;
            switch (dt) {
            case DL_DTYPE_I64: {
                int64_t *o = (int64_t *)c + at;
                *o = (int64_t)((uint64_t)*o + v);
                break;
            }
            case DL_DTYPE_I32: {
                int32_t *o = (int32_t *)c + at;
                *o = (int32_t)(uint32_t)((uint64_t)(int64_t)*o + v);
                break;
            }
            case DL_DTYPE_U8: {
                uint8_t *o = (uint8_t *)c + at;
                *o = (uint8_t)((uint64_t)*o + v);
                break;
            }
            default: break;
            }
        }
}

/* One matrix: out (M, N) contiguous += alpha * A (M, K) @ B (K, N), using nt
 * threads.  out was already scaled by beta.  Returns 0 or -1 (out of memory;
 * no error message set, so it may run on a worker thread). */
static int own_gemm_one(dl_dtype dt, int64_t M, int64_t N, int64_t K, double alpha, mat_view a,
                        mat_view b, char *out, int nt) {
    size_t isz = dl_dtype_size(dt);
    int64_t kc_max = min64(K, KC), nc_max = round_up(min64(N, NC), NR);
    int64_t mc_max = round_up(min64(M, MC), MR);
    int64_t nblocks = (M + MC - 1) / MC;
    if (nt > nblocks) nt = (int)nblocks;
    if (nt < 1) nt = 1;
    void *bp = malloc(sizeof(uint64_t) * (size_t)(kc_max * nc_max));
    void *ap_all = malloc(sizeof(uint64_t) * (size_t)(mc_max * kc_max) * (size_t)nt);
    if (!bp || !ap_all) {
        free(bp);
        free(ap_all);
        return -1;
    }
    uint64_t ialpha = dt == DL_DTYPE_F64 ? 0 : (uint64_t)(int64_t)alpha;
    for (int64_t jc = 0; jc < N; jc += NC) {
        int64_t nb = min64(NC, N - jc);
        for (int64_t kc = 0; kc < K; kc += KC) {
            int64_t kb = min64(KC, K - kc);
            mat_view bsub = {b.p + (size_t)(kc * b.rs + jc * b.cs) * isz, b.rs, b.cs};
            pack_b(dt, bsub, kb, nb, bp);
#pragma omp parallel for num_threads(nt) if (nt > 1) schedule(static)
            for (int64_t blk = 0; blk < nblocks; blk++) {
                int tid = 0;
#ifdef _OPENMP
                tid = omp_get_thread_num();
#endif
                void *ap =
                    (char *)ap_all + sizeof(uint64_t) * (size_t)(mc_max * kc_max) * (size_t)tid;
                int64_t ic = blk * MC, mb = min64(MC, M - ic);
                mat_view asub = {a.p + (size_t)(ic * a.rs + kc * a.cs) * isz, a.rs, a.cs};
                pack_a(dt, asub, mb, kb, ap);
                for (int64_t i0 = 0; i0 < mb; i0 += MR) {
                    for (int64_t j0 = 0; j0 < nb; j0 += NR) {
                        int64_t mr = min64(MR, mb - i0), nr = min64(NR, nb - j0);
                        char *c = out + (size_t)((ic + i0) * N + jc + j0) * isz;
                        if (dt == DL_DTYPE_F64) {
                            micro_f64(kb, (const double *)ap + i0 * kb,
                                      (const double *)bp + j0 * kb, alpha, (double *)c, N, mr, nr);
                        } else {
                            uint64_t acc[MR * NR];
                            micro_u64(kb, (const uint64_t *)ap + i0 * kb,
                                      (const uint64_t *)bp + j0 * kb, acc);
                            store_int(dt, acc, ialpha, c, N, mr, nr);
                        }
                    }
                }
            }
        }
    }
    free(bp);
    free(ap_all);
    return 0;
}

static int gemm_own(dl_dtype dt, int64_t batch, int64_t M, int64_t N, int64_t K, double alpha,
                    const dl_gemm_matrix *A, const dl_gemm_matrix *B, double beta, char *out) {
    size_t isz = dl_dtype_size(dt);
    scale_out(dt, batch * M * N, out, beta);
    int nt = dl_get_num_threads();
    int failed = 0;
    int64_t work = M * N * K;
    if (batch_parallel(batch, nt, work)) {
#pragma omp parallel for num_threads(nt) schedule(static)
        for (int64_t i = 0; i < batch; i++) {
            mat_view a = {(const char *)A->data + (size_t)(A->boff ? A->boff[i] : 0) * isz, A->rs,
                          A->cs};
            mat_view b = {(const char *)B->data + (size_t)(B->boff ? B->boff[i] : 0) * isz, B->rs,
                          B->cs};
            if (own_gemm_one(dt, M, N, K, alpha, a, b, out + (size_t)(i * M * N) * isz, 1)) {
#pragma omp atomic write
                failed = 1;
            }
        }
    } else {
        int inner = work < GEMM_SERIAL_WORK ? 1 : nt;
        for (int64_t i = 0; i < batch && !failed; i++) {
            mat_view a = {(const char *)A->data + (size_t)(A->boff ? A->boff[i] : 0) * isz, A->rs,
                          A->cs};
            mat_view b = {(const char *)B->data + (size_t)(B->boff ? B->boff[i] : 0) * isz, B->rs,
                          B->cs};
            failed = own_gemm_one(dt, M, N, K, alpha, a, b, out + (size_t)(i * M * N) * isz, inner);
        }
    }
    if (failed) return dl_error("matmul: out of memory for the packing buffers");
    return 0;
}

/* --- entry --------------------------------------------------------------------- */

int dl_cpu_gemm(dl_dtype dt, int64_t batch, int64_t M, int64_t N, int64_t K, double alpha,
                const dl_gemm_matrix *A, const dl_gemm_matrix *B, double beta, void *out) {
    if (dt != DL_DTYPE_F32 && dt != DL_DTYPE_F64 && dt != DL_DTYPE_I64 && dt != DL_DTYPE_I32 &&
        dt != DL_DTYPE_U8)
        return dl_error("matmul: no CPU kernel takes %s (the op converts it first; internal)",
                        dl_dtype_name(dt));
    if (batch <= 0 || M <= 0 || N <= 0) return 0;
    if (K == 0) {
        scale_out(dt, batch * M * N, out, beta);
        return 0;
    }

    /* Fold the batch into the rows when every B is the same matrix and the
     * A's are consecutive row blocks of one matrix: one big GEMM. */
    dl_gemm_matrix a = *A, b = *B;
    if (batch > 1) {
        bool fold = true;
        int64_t a0 = A->boff ? A->boff[0] : 0, b0 = B->boff ? B->boff[0] : 0;
        for (int64_t i = 1; i < batch && fold; i++) {
            fold = (B->boff ? B->boff[i] : 0) == b0 &&
                   (A->boff ? A->boff[i] : 0) == a0 + i * M * A->rs;
        }
        if (fold && dt == DL_DTYPE_F32) fold = dl_cpu_gemm_readable(batch * M, K, A->rs, A->cs);
        if (fold) {
            a.data = (const char *)A->data + (size_t)a0 * dl_dtype_size(dt);
            a.boff = NULL;
            b.data = (const char *)B->data + (size_t)b0 * dl_dtype_size(dt);
            b.boff = NULL;
            M *= batch;
            batch = 1;
        }
    }
    if (dt == DL_DTYPE_F32) return gemm_f32(batch, M, N, K, alpha, &a, &b, beta, out);
    return gemm_own(dt, batch, M, N, K, alpha, &a, &b, beta, out);
}
