/* bench_conv_impls.c - every oneDNN implementation of each ResNet-50
 * convolution at batch 1, timed alone, as dlua's inference forward calls
 * them: float32, NHWC activations, weights in the layout the implementation
 * asks for, bias, the post-ops of the layer (ReLU, or the residual sum then
 * ReLU), the inference propagation kind; the 3x3 stride-1 layers also as
 * Winograd (blocked activations).  Each timed run first reads 96 MB (the
 * weights come from memory, as in a forward that streams all 97 MB of them)
 * and then the layer's input and output (which the layer before leaves in
 * cache).  Not part of the build:
 *
 *   cc -O2 -fopenmp scripts/bench_conv_impls.c -ldnnl -o /tmp/bench_conv_impls
 *   OMP_NUM_THREADS=2 /tmp/bench_conv_impls [runs]
 *
 * Prints, per layer, each implementation's median time in microseconds and
 * marks the one oneDNN picks first (the one dlua gets).  Reference-only and
 * pre-AVX-512 implementations are left out.  Exits 1 naming the oneDNN call
 * that failed. */
#include <oneapi/dnnl/dnnl.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CK(call)                                                                                   \
    do {                                                                                           \
        dnnl_status_t s_ = (call);                                                                 \
        if (s_ != dnnl_success) {                                                                  \
            fprintf(stderr, "bench_conv_impls: %s failed (status %d, line %d)\n", #call, s_,       \
                    __LINE__);                                                                     \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

enum { POST_NONE, POST_RELU, POST_SUM_RELU };

typedef struct {
    const char *name;
    int ic, oc, k, stride, h, post;
} layer;

/* ResNet-50's distinct convolutions (input size h x h) */
static const layer layers[] = {
    {"conv1 7x7 3-64 /2", 3, 64, 7, 2, 224, POST_RELU},
    {"56 1x1 64-64", 64, 64, 1, 1, 56, POST_RELU},
    {"56 3x3 64", 64, 64, 3, 1, 56, POST_RELU},
    {"56 1x1 64-256 +sum", 64, 256, 1, 1, 56, POST_SUM_RELU},
    {"56 1x1 256-64", 256, 64, 1, 1, 56, POST_RELU},
    {"56 downsample 64-256", 64, 256, 1, 1, 56, POST_NONE},
    {"56 1x1 256-128", 256, 128, 1, 1, 56, POST_RELU},
    {"56 3x3 128 /2", 128, 128, 3, 2, 56, POST_RELU},
    {"28 1x1 128-512 +sum", 128, 512, 1, 1, 28, POST_SUM_RELU},
    {"28 1x1 512-128", 512, 128, 1, 1, 28, POST_RELU},
    {"28 3x3 128", 128, 128, 3, 1, 28, POST_RELU},
    {"56 downsample 256-512 /2", 256, 512, 1, 2, 56, POST_NONE},
    {"28 1x1 512-256", 512, 256, 1, 1, 28, POST_RELU},
    {"28 3x3 256 /2", 256, 256, 3, 2, 28, POST_RELU},
    {"14 1x1 256-1024 +sum", 256, 1024, 1, 1, 14, POST_SUM_RELU},
    {"14 1x1 1024-256", 1024, 256, 1, 1, 14, POST_RELU},
    {"14 3x3 256", 256, 256, 3, 1, 14, POST_RELU},
    {"28 downsample 512-1024 /2", 512, 1024, 1, 2, 28, POST_NONE},
    {"14 1x1 1024-512", 1024, 512, 1, 1, 14, POST_RELU},
    {"14 3x3 512 /2", 512, 512, 3, 2, 14, POST_RELU},
    {"7 1x1 512-2048 +sum", 512, 2048, 1, 1, 7, POST_SUM_RELU},
    {"7 1x1 2048-512", 2048, 512, 1, 1, 7, POST_RELU},
    {"7 3x3 512", 512, 512, 3, 1, 7, POST_RELU},
    {"14 downsample 1024-2048 /2", 1024, 2048, 1, 2, 14, POST_NONE},
};

#define FLUSH_BYTES ((size_t)96 << 20)
static volatile unsigned char *flush_buf;

/* reads len bytes at p, a cache line at a time */
static void touch(const volatile unsigned char *p, size_t len) {
    unsigned sum = 0;
    for (size_t i = 0; i < len; i += 64) sum += p[i];
    if (sum == 0xdeadbeef) puts("");
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

typedef struct {
    dnnl_memory_t mem;
    void *data;
    size_t bytes;
} buffer;

/* a buffer for md filled with small values (zero for an empty md) */
static buffer make_buffer(dnnl_engine_t eng, const dnnl_memory_desc_t *md) {
    buffer b = {NULL, NULL, dnnl_memory_desc_get_size(md)};
    if (b.bytes == 0) return b;
    b.data = aligned_alloc(64, (b.bytes + 63) / 64 * 64);
    if (!b.data) {
        fprintf(stderr, "bench_conv_impls: out of memory\n");
        exit(1);
    }
    float *f = b.data;
    for (size_t i = 0; i < b.bytes / sizeof(float); i++) f[i] = (float)(i % 1000) / 1000.0f - 0.5f;
    CK(dnnl_memory_create(&b.mem, md, eng, b.data));
    return b;
}

static void free_buffer(buffer *b) {
    if (b->mem) dnnl_memory_destroy(b->mem);
    free(b->data);
}

/* times every implementation oneDNN offers for layer l (winograd: the
 * Winograd algorithm, activations in the layout it asks for) */
static void time_layer(dnnl_engine_t eng, dnnl_stream_t st, const layer *l, int winograd,
                       int runs) {
    int pad = l->k / 2, oh = (l->h + 2 * pad - l->k) / l->stride + 1;
    dnnl_dims_t sd = {1, l->ic, l->h, l->h}, wd = {l->oc, l->ic, l->k, l->k}, bd = {l->oc},
                dd = {1, l->oc, oh, oh};
    dnnl_dims_t strides = {l->stride, l->stride}, dil = {0, 0}, pads = {pad, pad};
    dnnl_format_tag_t act = winograd ? dnnl_format_tag_any : dnnl_nhwc;
    dnnl_memory_desc_t src, wei, bia, dst;
    CK(dnnl_memory_desc_init_by_tag(&src, 4, sd, dnnl_f32, act));
    CK(dnnl_memory_desc_init_by_tag(&wei, 4, wd, dnnl_f32, dnnl_format_tag_any));
    CK(dnnl_memory_desc_init_by_tag(&bia, 1, bd, dnnl_f32, dnnl_x));
    CK(dnnl_memory_desc_init_by_tag(&dst, 4, dd, dnnl_f32, act));
    dnnl_convolution_desc_t cd;
    CK(dnnl_dilated_convolution_forward_desc_init(
        &cd, dnnl_forward_inference, winograd ? dnnl_convolution_winograd : dnnl_convolution_direct,
        &src, &wei, &bia, &dst, strides, dil, pads, pads));
    dnnl_primitive_attr_t attr;
    dnnl_post_ops_t po;
    CK(dnnl_primitive_attr_create(&attr));
    CK(dnnl_post_ops_create(&po));
    if (l->post == POST_SUM_RELU) CK(dnnl_post_ops_append_sum(po, 1.0f));
    if (l->post != POST_NONE) CK(dnnl_post_ops_append_eltwise(po, 1.0f, dnnl_eltwise_relu, 0, 0));
    CK(dnnl_primitive_attr_set_post_ops(attr, po));
    CK(dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user));
    dnnl_primitive_desc_iterator_t it;
    if (dnnl_primitive_desc_iterator_create(&it, &cd, attr, eng, NULL) != dnnl_success) {
        printf("%-28s %-9s %-34s\n", l->name, winograd ? "winograd" : "direct", "(none)");
        goto out;
    }
    double *t = malloc(sizeof(double) * (size_t)runs);
    if (!t) exit(1);
    int first = 1;
    do {
        dnnl_primitive_desc_t pd = dnnl_primitive_desc_iterator_fetch(it);
        const char *impl;
        CK(dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl));
        int picked = first;
        first = 0;
        if (strstr(impl, "ref") || strstr(impl, "avx2") || strstr(impl, "sse41")) {
            dnnl_primitive_desc_destroy(pd);
            continue;
        }
        buffer s = make_buffer(eng, dnnl_primitive_desc_query_md(pd, dnnl_query_src_md, 0));
        buffer w = make_buffer(eng, dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0));
        buffer b = make_buffer(eng, &bia);
        buffer d = make_buffer(eng, dnnl_primitive_desc_query_md(pd, dnnl_query_dst_md, 0));
        buffer sp = make_buffer(eng, dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0));
        dnnl_primitive_t prim;
        CK(dnnl_primitive_create(&prim, pd));
        dnnl_exec_arg_t args[5] = {{DNNL_ARG_SRC, s.mem},
                                   {DNNL_ARG_WEIGHTS, w.mem},
                                   {DNNL_ARG_BIAS, b.mem},
                                   {DNNL_ARG_DST, d.mem},
                                   {DNNL_ARG_SCRATCHPAD, sp.mem}};
        int nargs = sp.mem ? 5 : 4;
        for (int r = 0; r < 3; r++) CK(dnnl_primitive_execute(prim, st, nargs, args));
        CK(dnnl_stream_wait(st));
        for (int r = 0; r < runs; r++) {
            touch(flush_buf, FLUSH_BYTES);
            touch(s.data, s.bytes);
            touch(d.data, d.bytes);
            double t0 = omp_get_wtime();
            CK(dnnl_primitive_execute(prim, st, nargs, args));
            CK(dnnl_stream_wait(st));
            t[r] = omp_get_wtime() - t0;
        }
        qsort(t, (size_t)runs, sizeof t[0], cmp_double);
        printf("%-28s %-9s %-34s %8.1f%s\n", l->name, winograd ? "winograd" : "direct", impl,
               t[runs / 2] * 1e6, picked ? "  <- picked" : "");
        fflush(stdout);
        dnnl_primitive_destroy(prim);
        free_buffer(&s);
        free_buffer(&w);
        free_buffer(&b);
        free_buffer(&d);
        free_buffer(&sp);
        dnnl_primitive_desc_destroy(pd);
    } while (dnnl_primitive_desc_iterator_next(it) == dnnl_success);
    free(t);
    dnnl_primitive_desc_iterator_destroy(it);
out:
    dnnl_post_ops_destroy(po);
    dnnl_primitive_attr_destroy(attr);
}

int main(int argc, char **argv) {
    int runs = argc > 1 ? atoi(argv[1]) : 21;
    if (runs < 1) runs = 1;
    flush_buf = malloc(FLUSH_BYTES);
    if (!flush_buf) return 1;
    memset((void *)flush_buf, 1, FLUSH_BYTES);
    dnnl_engine_t eng;
    dnnl_stream_t st;
    CK(dnnl_engine_create(&eng, dnnl_cpu, 0));
    CK(dnnl_stream_create(&st, eng, dnnl_stream_default_flags));
    printf("%-28s %-9s %-34s %8s\n", "layer (batch 1, NHWC)", "algorithm", "implementation", "us");
    for (size_t i = 0; i < sizeof layers / sizeof layers[0]; i++) {
        time_layer(eng, st, &layers[i], 0, runs);
        if (layers[i].k == 3 && layers[i].stride == 1) time_layer(eng, st, &layers[i], 1, runs);
    }
    dnnl_stream_destroy(st);
    dnnl_engine_destroy(eng);
    free((void *)flush_buf);
    return 0;
}
