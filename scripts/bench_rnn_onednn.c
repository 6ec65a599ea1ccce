/* bench_rnn_onednn.c - the other CPU candidate for dlua's LSTM, timed alone:
 * oneDNN's own LSTM primitive (forward training + backward, all layers in
 * one primitive), on scripts/bench_rnn.lua's default shape.  Each iteration
 * reorders the weights from PyTorch's layout and the weight gradients back,
 * as a dlua path on this primitive would have to.  Not part of the build:
 *
 *   cc -O2 -fopenmp scripts/bench_rnn_onednn.c -ldnnl -o /tmp/bench_rnn_onednn
 *   OMP_NUM_THREADS=2 /tmp/bench_rnn_onednn [runs [seq batch hidden]]
 *
 * and compare with `dlua scripts/bench_rnn.lua --no-torch --threads 2` (the
 * frameworks taking turns on a busy machine).  Prints the best forward and
 * forward+backward times in ms and the training workspace the primitive
 * keeps for the backward, beside dlua's (N * 5H floats a layer).  Exits 1
 * naming the oneDNN call that failed. */
#include <oneapi/dnnl/dnnl.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CK(call)                                                                                   \
    do {                                                                                           \
        dnnl_status_t s_ = (call);                                                                 \
        if (s_ != dnnl_success) {                                                                  \
            fprintf(stderr, "bench_rnn_onednn: %s failed (status %d, line %d)\n", #call, s_,       \
                    __LINE__);                                                                     \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

enum { L = 2, G = 4, NARGS = 19 };
static int T = 100, N = 64, C = 512;

static dnnl_engine_t eng;
static dnnl_stream_t strm;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

/* A memory of descriptor md filled with small values. */
static dnnl_memory_t mem(const dnnl_memory_desc_t *md) {
    dnnl_memory_t m;
    void *p;
    CK(dnnl_memory_create(&m, md, eng, DNNL_MEMORY_ALLOCATE));
    CK(dnnl_memory_get_data_handle(m, &p));
    size_t n = dnnl_memory_desc_get_size(md) / sizeof(float);
    for (size_t i = 0; i < n; i++) ((float *)p)[i] = (float)((i * 7919) % 1000) / 1000.0f - 0.5f;
    return m;
}

static void zero(dnnl_memory_t m) {
    const dnnl_memory_desc_t *md;
    void *p;
    CK(dnnl_memory_get_memory_desc(m, &md));
    CK(dnnl_memory_get_data_handle(m, &p));
    memset(p, 0, dnnl_memory_desc_get_size(md));
}

static void reorder(dnnl_memory_t from, dnnl_memory_t to) {
    const dnnl_memory_desc_t *a, *b;
    dnnl_primitive_desc_t pd;
    dnnl_primitive_t p;
    CK(dnnl_memory_get_memory_desc(from, &a));
    CK(dnnl_memory_get_memory_desc(to, &b));
    CK(dnnl_reorder_primitive_desc_create(&pd, a, eng, b, eng, NULL));
    CK(dnnl_primitive_create(&p, pd));
    dnnl_exec_arg_t args[2] = {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}};
    CK(dnnl_primitive_execute(p, strm, 2, args));
    CK(dnnl_stream_wait(strm));
    dnnl_primitive_destroy(p);
    dnnl_primitive_desc_destroy(pd);
}

static void md(dnnl_memory_desc_t *d, int nd, const dnnl_dims_t dims, dnnl_format_tag_t tag) {
    CK(dnnl_memory_desc_init_by_tag(d, nd, dims, dnnl_f32, tag));
}

int main(int argc, char **argv) {
    int runs = argc > 1 ? atoi(argv[1]) : 3;
    if (argc > 4) {
        T = atoi(argv[2]);
        N = atoi(argv[3]);
        C = atoi(argv[4]);
    }
    CK(dnnl_engine_create(&eng, dnnl_cpu, 0));
    CK(dnnl_stream_create(&strm, eng, dnnl_stream_default_flags));
    const dnnl_dims_t dl = {T, N, C}, di = {L, 1, N, C}, dw = {L, 1, C, G, C}, db = {L, 1, G, C};
    dnnl_memory_desc_t layer, iter, w_any, w_user, bias;
    md(&layer, 3, dl, dnnl_tnc);
    md(&iter, 4, di, dnnl_ldnc);
    md(&w_any, 5, dw, dnnl_format_tag_any);
    md(&w_user, 5, dw, dnnl_ldgoi); /* PyTorch's (4H, in) weights */
    md(&bias, 4, db, dnnl_ldgo);
    dnnl_rnn_desc_t fd, bd;
    dnnl_primitive_desc_t fpd, bpd;
    CK(dnnl_lstm_forward_desc_init(&fd, dnnl_forward_training, dnnl_unidirectional_left2right,
                                   &layer, &iter, &iter, &w_any, &w_any, &bias, &layer, &iter,
                                   &iter, 0));
    CK(dnnl_primitive_desc_create(&fpd, &fd, NULL, eng, NULL));
    CK(dnnl_lstm_backward_desc_init(&bd, dnnl_backward, dnnl_unidirectional_left2right, &layer,
                                    &iter, &iter, &w_any, &w_any, &bias, &layer, &iter, &iter,
                                    &layer, &iter, &iter, &w_any, &w_any, &bias, &layer, &iter,
                                    &iter, 0));
    CK(dnnl_primitive_desc_create(&bpd, &bd, NULL, eng, fpd));
    dnnl_memory_t fw[2], bw[2], dw_[2], user[2], duser[2];
    for (int i = 0; i < 2; i++) {
        fw[i] = mem(dnnl_primitive_desc_query_md(fpd, dnnl_query_weights_md, i));
        bw[i] = mem(dnnl_primitive_desc_query_md(bpd, dnnl_query_weights_md, i));
        dw_[i] = mem(dnnl_primitive_desc_query_md(bpd, dnnl_query_diff_weights_md, i));
        user[i] = mem(&w_user);
        duser[i] = mem(&w_user);
    }
    const dnnl_memory_desc_t *wsmd = dnnl_primitive_desc_query_md(fpd, dnnl_query_workspace_md, 0);
    dnnl_memory_t ws = mem(wsmd);
    dnnl_memory_t src = mem(&layer), dst = mem(&layer), b = mem(&bias), db_ = mem(&bias);
    dnnl_memory_t hi = mem(&iter), ci = mem(&iter), ho = mem(&iter), co = mem(&iter);
    dnnl_memory_t dsrc = mem(&layer), ddst = mem(&layer), dhi = mem(&iter), dci = mem(&iter);
    dnnl_memory_t dho = mem(&iter), dco = mem(&iter);
    dnnl_primitive_t fp, bp;
    CK(dnnl_primitive_create(&fp, fpd));
    CK(dnnl_primitive_create(&bp, bpd));
    dnnl_exec_arg_t args[NARGS] = {{DNNL_ARG_SRC_LAYER, src},
                                   {DNNL_ARG_SRC_ITER, hi},
                                   {DNNL_ARG_SRC_ITER_C, ci},
                                   {DNNL_ARG_WEIGHTS_LAYER, fw[0]},
                                   {DNNL_ARG_WEIGHTS_ITER, fw[1]},
                                   {DNNL_ARG_BIAS, b},
                                   {DNNL_ARG_DST_LAYER, dst},
                                   {DNNL_ARG_DST_ITER, ho},
                                   {DNNL_ARG_DST_ITER_C, co},
                                   {DNNL_ARG_WORKSPACE, ws},
                                   {DNNL_ARG_DIFF_SRC_LAYER, dsrc},
                                   {DNNL_ARG_DIFF_SRC_ITER, dhi},
                                   {DNNL_ARG_DIFF_SRC_ITER_C, dci},
                                   {DNNL_ARG_DIFF_WEIGHTS_LAYER, dw_[0]},
                                   {DNNL_ARG_DIFF_WEIGHTS_ITER, dw_[1]},
                                   {DNNL_ARG_DIFF_BIAS, db_},
                                   {DNNL_ARG_DIFF_DST_LAYER, ddst},
                                   {DNNL_ARG_DIFF_DST_ITER, dho},
                                   {DNNL_ARG_DIFF_DST_ITER_C, dco}};
    double best_f = 1e9, best_t = 1e9;
    for (int r = 0; r <= runs; r++) { /* run 0 warms up */
        double t0 = now();
        reorder(user[0], fw[0]);
        reorder(user[1], fw[1]);
        args[3].memory = fw[0];
        args[4].memory = fw[1];
        CK(dnnl_primitive_execute(fp, strm, 10, args));
        CK(dnnl_stream_wait(strm));
        double t1 = now();
        reorder(user[0], bw[0]);
        reorder(user[1], bw[1]);
        args[3].memory = bw[0];
        args[4].memory = bw[1];
        zero(dw_[0]); /* the primitive accumulates into the weight gradients */
        zero(dw_[1]);
        zero(db_);
        CK(dnnl_primitive_execute(bp, strm, NARGS, args));
        CK(dnnl_stream_wait(strm));
        reorder(dw_[0], duser[0]);
        reorder(dw_[1], duser[1]);
        double t2 = now();
        if (r > 0) {
            best_f = t1 - t0 < best_f ? t1 - t0 : best_f;
            best_t = t2 - t0 < best_t ? t2 - t0 : best_t;
        }
    }
    printf("oneDNN LSTM primitive: %d layers, hidden %d, input %d, seq %d, batch %d, %d threads: "
           "forward (training) %.1f ms, forward+backward %.1f ms (best of %d); training "
           "workspace %.1f MB (dlua's: %.1f MB)\n",
           L, C, C, T, N, omp_get_max_threads(), best_f * 1e3, best_t * 1e3, runs,
           dnnl_memory_desc_get_size(wsmd) / 1e6, (double)L * T * N * (G + 1) * C * 4 / 1e6);
    return 0;
}
