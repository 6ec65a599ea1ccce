/* conv.c - CPU 2-D convolution kernels (see conv.h).
 *
 * float32: oneDNN convolution primitives.  The forward primitive lives in one
 * cache entry, the backward-data and backward-weights primitives (and the
 * forward pd they need as a hint) in another, both keyed by every size and
 * parameter, so inference never builds backward primitives.  In the PLAIN
 * layout the primitives read and write our NCHW / OIHW (GOIHW for groups)
 * buffers directly; in the ANY layout oneDNN picks its own (blocked) layouts
 * and every argument is reordered into a scratch buffer and back (gy once
 * for both backward primitives when they agree on its layout).  The default,
 * AUTO, takes PLAIN for 1x1 kernels and ANY for the rest.  A channels-last
 * network (DL_CONV_FMT_NHWC) binds its NHWC activations directly and lets
 * oneDNN pick only the weights' layout.
 *
 * 3x3 stride-1 convolutions on planes of at least 14x14 with channel counts
 * that are multiples of 16 run oneDNN's Winograd F(4x4, 3x3) kernels for the
 * forward only when no gradient will be taken (DL_CONV_INFERENCE) and for the
 * weights' gradient always, never for the data gradient.  Should oneDNN
 * refuse Winograd for a shape, the direct kernel runs.
 * dl_cpu_conv_set_winograd(false) turns it off (benchmarks).
 *
 * The measurements behind these choices (speed per layout, Winograd's speed
 * and accuracy per direction) are in docs/conv_cpu.md.
 *
 * float64: im2col + GEMM per (sample, group); backward is GEMM + col2im for
 * gx and GEMM accumulated over samples for gw.  A 1x1 / stride 1 / no padding
 * convolution skips im2col (the input already is the column matrix).
 *
 * The bias gradient is a plain reduction of gy (double accumulators) unless
 * oneDNN computes it alongside the weight gradient. */
#include "conv.h"
#include "core/error.h"
#include "core/parallel.h"
#include "core/storage.h"
#include "dnnl_util.h"
#include "gemm.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static dl_conv_layout conv_layout = DL_CONV_LAYOUT_AUTO;
static bool conv_winograd = true;

void dl_cpu_conv_set_winograd(bool on) {
    conv_winograd = on;
}
bool dl_cpu_conv_get_winograd(void) {
    return conv_winograd;
}

/* Whether a float32 convolution of shape s may run Winograd (see the header). */
static bool winograd_shape(const dl_conv2d_shape *s) {
    return conv_winograd && s->KH == 3 && s->KW == 3 && s->sh == 1 && s->sw == 1 && s->dh == 1 &&
           s->dw == 1 && s->groups == 1 && s->ph <= 1 && s->pw <= 1 && s->C % 16 == 0 &&
           s->O % 16 == 0 && s->OH >= 14 && s->OW >= 14;
}

void dl_cpu_conv_set_layout(dl_conv_layout l) {
    conv_layout = l;
}
dl_conv_layout dl_cpu_conv_get_layout(void) {
    return conv_layout;
}

/* The layout a convolution of shape s runs with.  AUTO: 1x1 kernels are plain
 * GEMMs that oneDNN runs well on NCHW (gemm:jit), where the reorders of the
 * ANY layout cost more than they save; larger kernels run 1.5-2.5x faster on
 * the blocked layouts (jit:avx512_core) even counting the reorders. */
static dl_conv_layout layout_for(const dl_conv2d_shape *s) {
    if (conv_layout != DL_CONV_LAYOUT_AUTO) return conv_layout;
    return (s->KH == 1 && s->KW == 1) ? DL_CONV_LAYOUT_PLAIN : DL_CONV_LAYOUT_ANY;
}

bool dl_cpu_conv2d_sum_fast(const dl_conv2d_shape *s, int fmt) {
    return (fmt & DL_CONV_FMT_NHWC) || layout_for(s) != DL_CONV_LAYOUT_PLAIN;
}

/* gb[o] = sum over n and positions of gy[n][o][:], double accumulators.
 * gb is (O), gy is (N,O,OH*OW), or with nhwc (N*OH*OW,O). */
static void bias_grad_float(const dl_conv2d_shape *s, bool nhwc, float *gb, const float *gy) {
    int64_t S = s->OH * s->OW;
    if (nhwc) {
        int64_t R = s->N * S;
#pragma omp parallel for num_threads(dl_get_num_threads()) if (s->O * R >= DL_PARALLEL_GRAIN)
        for (int64_t o = 0; o < s->O; o++) {
            double acc = 0;
            for (int64_t r = 0; r < R; r++) acc += gy[r * s->O + o];
            gb[o] = (float)acc;
        }
        return;
    }
#pragma omp parallel for num_threads(dl_get_num_threads()) if (s->O * s->N * S >= DL_PARALLEL_GRAIN)
    for (int64_t o = 0; o < s->O; o++) {
        double acc = 0;
        for (int64_t n = 0; n < s->N; n++) {
            const float *p = gy + (n * s->O + o) * S;
            for (int64_t i = 0; i < S; i++) acc += p[i];
        }
        gb[o] = (float)acc;
    }
}

static void bias_grad_double(const dl_conv2d_shape *s, double *gb, const double *gy) {
    int64_t S = s->OH * s->OW;
#pragma omp parallel for num_threads(dl_get_num_threads()) if (s->O * s->N * S >= DL_PARALLEL_GRAIN)
    for (int64_t o = 0; o < s->O; o++) {
        double acc = 0;
        for (int64_t n = 0; n < s->N; n++) {
            const double *p = gy + (n * s->O + o) * S;
            for (int64_t i = 0; i < S; i++) acc += p[i];
        }
        gb[o] = acc;
    }
}

/* --- float32: oneDNN ------------------------------------------------------------- */

/* The arguments whose layout may differ between us and the primitive. */
enum { A_SRC, A_WEI, A_DST, A_BD_DDST, A_BD_WEI, A_BD_DSRC, A_BW_SRC, A_BW_DDST, A_BW_DWEI, A_N };

typedef struct {
    dnnl_memory_desc_t user, prim; /* our plain layout, the primitive's */
    int slot;                      /* reorder primitive's slot, -1: bind directly */
    /* an input oneDNN cannot reorder in one step (OHWI weights into its
     * Winograd layout) goes through the plain layout `mid`: slot reorders
     * user -> mid, slot2 mid -> prim; slot2 -1: one step */
    dnnl_memory_desc_t mid;
    int slot2;
} conv_arg;

typedef struct {
    conv_arg a[A_N];
    dnnl_memory_desc_t bias; /* (O), plain */
    int dst_in_slot;         /* forward with a sum post-op: reorder of y in, or -1 */
} conv_layouts;

/* Slots of a cache entry. */
enum { S_FWD = 0, S_BD = 1, S_BW = 2, S_REORDER = 3, S_FWD_WINO = 9, S_WEI_MID = 10 };

typedef struct {
    const dl_conv2d_shape *s;
    int bias; /* forward: has bias; backward: gb computed by oneDNN */
    int need_gx, need_gw;
    dl_conv_layout layout;
    int fmt;  /* DL_CONV_FMT_* */
    int post; /* DL_CONV_POST_* (forward) */
    int wino; /* Winograd (blocked layouts) instead of direct: the forward's
               * algorithm, or in a backward entry the weight gradient's */
} conv_ctx;

typedef struct {
    dnnl_memory_desc_t src, wei, dst, bias; /* plain */
    dnnl_memory_desc_t src_p, wei_p, dst_p; /* what the descs get: plain or any */
    dnnl_dims_t strides, dil, pad;
} conv_mds;

static dnnl_alg_kind_t conv_alg(const conv_ctx *c) {
    return c->wino ? dnnl_convolution_winograd : dnnl_convolution_direct;
}

static int make_mds(const conv_ctx *c, conv_mds *m) {
    const dl_conv2d_shape *s = c->s;
    int64_t src[4] = {s->N, s->C, s->H, s->W}, dst[4] = {s->N, s->O, s->OH, s->OW};
    int64_t g = s->groups;
    int64_t wei[5] = {g, s->O / g, s->C / g, s->KH, s->KW};
    int grouped = g > 1;
    bool nhwc = c->fmt & DL_CONV_FMT_NHWC, ohwi = c->fmt & DL_CONV_FMT_W_OHWI;
    /* (DL_CONV_INFERENCE chose c->wino and the forward's propagation kind) */
    dnnl_format_tag_t act = nhwc ? dnnl_nhwc : dnnl_nchw;
    dnnl_format_tag_t wtag =
        grouped ? (ohwi ? dnnl_gohwi : dnnl_goihw) : (ohwi ? dnnl_ohwi : dnnl_oihw);
    if (dl_dnnl_md(&m->src, 4, src, act) || dl_dnnl_md(&m->dst, 4, dst, act) ||
        dl_dnnl_md(&m->wei, grouped ? 5 : 4, grouped ? wei : wei + 1, wtag) ||
        dl_dnnl_md(&m->bias, 1, &s->O, dnnl_x))
        return -1;
    if (c->wino) {
        /* Winograd runs on oneDNN's blocked layouts only */
        if (dl_dnnl_md(&m->src_p, 4, src, dnnl_format_tag_any) ||
            dl_dnnl_md(&m->dst_p, 4, dst, dnnl_format_tag_any) ||
            dl_dnnl_md(&m->wei_p, 4, wei + 1, dnnl_format_tag_any))
            return -1;
    } else if (nhwc) {
        /* activations bound as they are; the weights' layout is oneDNN's */
        m->src_p = m->src;
        m->dst_p = m->dst;
        if (dl_dnnl_md(&m->wei_p, grouped ? 5 : 4, grouped ? wei : wei + 1, dnnl_format_tag_any))
            return -1;
    } else if (c->layout == DL_CONV_LAYOUT_ANY) {
        if (dl_dnnl_md(&m->src_p, 4, src, dnnl_format_tag_any) ||
            dl_dnnl_md(&m->dst_p, 4, dst, dnnl_format_tag_any) ||
            dl_dnnl_md(&m->wei_p, grouped ? 5 : 4, grouped ? wei : wei + 1, dnnl_format_tag_any))
            return -1;
    } else {
        m->src_p = m->src;
        m->dst_p = m->dst;
        m->wei_p = m->wei;
    }
    m->strides[0] = s->sh;
    m->strides[1] = s->sw;
    m->dil[0] = s->dh - 1;
    m->dil[1] = s->dw - 1;
    m->pad[0] = s->ph;
    m->pad[1] = s->pw;
    return 0;
}

/* Records argument `which` of the primitive in slot pd_slot: its layout as
 * the primitive wants it (query q), and a reorder (in slot `slot`) when that
 * differs from ours.  out: the primitive writes it (reorder back to ours). */
static int set_arg(dl_dnnl_entry *e, conv_layouts *L, int which, const dnnl_memory_desc_t *user,
                   int pd_slot, dnnl_query_t q, int slot, int out) {
    const dnnl_memory_desc_t *pmd = dnnl_primitive_desc_query_md(e->pd[pd_slot], q, 0);
    if (!pmd) return dl_error("oneDNN: conv2d primitive has no memory descriptor %d", (int)q);
    conv_arg *a = &L->a[which];
    a->user = *user;
    a->prim = *pmd;
    a->slot2 = -1;
    if (dnnl_memory_desc_equal(user, pmd)) {
        a->slot = -1;
        return 0;
    }
    a->slot = slot;
    if (out) return dl_dnnl_entry_add_reorder(e, slot, pmd, user);
    bool one_step = true;
    if (which == A_WEI && user->ndims == 4) {
        dnnl_engine_t eng = dl_dnnl_engine();
        dnnl_primitive_desc_t probe = NULL;
        one_step = !eng || dnnl_reorder_primitive_desc_create(&probe, user, eng, pmd, eng, NULL) ==
                               dnnl_success;
        if (probe) dnnl_primitive_desc_destroy(probe);
    }
    if (one_step) return dl_dnnl_entry_add_reorder(e, slot, user, pmd);
    /* OHWI weights into the Winograd layout: through OIHW */
    dnnl_dims_t d;
    for (int i = 0; i < 4; i++) d[i] = user->dims[i];
    a->slot2 = S_WEI_MID;
    if (DL_DNNL(dnnl_memory_desc_init_by_tag(&a->mid, 4, d, dnnl_f32, dnnl_oihw))) return -1;
    return dl_dnnl_entry_add_reorder(e, slot, user, &a->mid) ||
           dl_dnnl_entry_add_reorder(e, S_WEI_MID, &a->mid, pmd);
}

/* Reorders input argument a from our buffer src into dst (the primitive's
 * layout), in one step or two (see conv_arg). */
static int reorder_in(dl_dnnl_entry *e, const conv_arg *a, const void *src, void *dst) {
    if (a->slot2 < 0) return dl_dnnl_reorder(e->prim[a->slot], &a->user, src, &a->prim, dst);
    size_t n = dl_dnnl_md_size(&a->mid);
    void *mid = dl_dnnl_alloc(n, "conv2d");
    int rc = !mid || dl_dnnl_reorder(e->prim[a->slot], &a->user, src, &a->mid, mid) ||
                     dl_dnnl_reorder(e->prim[a->slot2], &a->mid, mid, &a->prim, dst)
                 ? -1
                 : 0;
    dl_cpu_free(mid, n);
    return rc;
}

static conv_layouts *new_layouts(dl_dnnl_entry *e) {
    conv_layouts *L = calloc(1, sizeof *L);
    if (!L) {
        dl_error("conv2d: out of memory");
        return NULL;
    }
    e->user = L;
    e->free_user = free;
    return L;
}

static int build_fwd(dl_dnnl_entry *e, const void *vctx) {
    const conv_ctx *c = vctx;
    conv_mds m;
    conv_layouts *L = new_layouts(e);
    if (!L || make_mds(c, &m)) return -1;
    L->bias = m.bias;
    dnnl_convolution_desc_t d;
    /* inference lets oneDNN pick kernels that keep nothing for a backward
     * (its F(2x2, 3x3) Winograd: weights 1.8x their size, where the
     * training kind's F(4x4, 3x3) stores 4x and streams them every call) */
    dnnl_prop_kind_t prop =
        (c->fmt & DL_CONV_INFERENCE) ? dnnl_forward_inference : dnnl_forward_training;
    if (DL_DNNL(dnnl_dilated_convolution_forward_desc_init(
            &d, prop, conv_alg(c), &m.src_p, &m.wei_p, c->bias ? &m.bias : NULL, &m.dst_p,
            m.strides, m.dil, m.pad, m.pad)))
        return -1;
    if (dl_dnnl_entry_add_post(e, S_FWD, &d, NULL, 1, c->post & DL_CONV_POST_SUM,
                               c->post & DL_CONV_POST_RELU))
        return -1;
    if (set_arg(e, L, A_SRC, &m.src, S_FWD, dnnl_query_src_md, S_REORDER + 0, 0) ||
        set_arg(e, L, A_WEI, &m.wei, S_FWD, dnnl_query_weights_md, S_REORDER + 1, 0) ||
        set_arg(e, L, A_DST, &m.dst, S_FWD, dnnl_query_dst_md, S_REORDER + 2, 1))
        return -1;
    /* a sum post-op reads y: in oneDNN's layout, y goes in through a reorder */
    L->dst_in_slot = -1;
    if ((c->post & DL_CONV_POST_SUM) && L->a[A_DST].slot >= 0) {
        L->dst_in_slot = S_REORDER + 3;
        if (dl_dnnl_entry_add_reorder(e, L->dst_in_slot, &L->a[A_DST].user, &L->a[A_DST].prim))
            return -1;
    }
    return 0;
}

/* Backward entry: the input gradient always runs direct (Winograd's
 * backward-data error measured 3.6-6.5x the direct kernel's on ResNet-50's
 * 3x3 layers); the weight gradient runs Winograd when c->wino (its error
 * measured 0.9-0.35x the direct kernel's, which sums N*H*W products in
 * float32, and it is about 1.7x faster), with its own forward hint. */
static int build_backward(dl_dnnl_entry *e, const void *vctx) {
    const conv_ctx *c = vctx;
    conv_ctx cd = *c, cw = *c;
    cd.wino = 0;
    conv_mds m, mw;
    conv_layouts *L = new_layouts(e);
    if (!L || make_mds(&cd, &m) || make_mds(&cw, &mw)) return -1;
    L->bias = m.bias;
    dnnl_convolution_desc_t fd, fdw, bd, bw;
    if (DL_DNNL(dnnl_dilated_convolution_forward_desc_init(
            &fd, dnnl_forward_training, conv_alg(&cd), &m.src_p, &m.wei_p, c->bias ? &m.bias : NULL,
            &m.dst_p, m.strides, m.dil, m.pad, m.pad)))
        return -1;
    if (dl_dnnl_entry_add(e, S_FWD, &fd, NULL, 0)) return -1;
    int hint = S_FWD;
    if (c->wino && c->need_gw) {
        if (DL_DNNL(dnnl_dilated_convolution_forward_desc_init(
                &fdw, dnnl_forward_training, conv_alg(&cw), &mw.src_p, &mw.wei_p,
                c->bias ? &mw.bias : NULL, &mw.dst_p, mw.strides, mw.dil, mw.pad, mw.pad)) ||
            dl_dnnl_entry_add(e, S_FWD_WINO, &fdw, NULL, 0))
            return -1;
        hint = S_FWD_WINO;
    }
    if (c->need_gx) {
        if (DL_DNNL(dnnl_dilated_convolution_backward_data_desc_init(
                &bd, conv_alg(&cd), &m.src_p, &m.wei_p, &m.dst_p, m.strides, m.dil, m.pad, m.pad)))
            return -1;
        if (dl_dnnl_entry_add(e, S_BD, &bd, e->pd[S_FWD], 1) ||
            set_arg(e, L, A_BD_DDST, &m.dst, S_BD, dnnl_query_diff_dst_md, S_REORDER + 0, 0) ||
            set_arg(e, L, A_BD_WEI, &m.wei, S_BD, dnnl_query_weights_md, S_REORDER + 1, 0) ||
            set_arg(e, L, A_BD_DSRC, &m.src, S_BD, dnnl_query_diff_src_md, S_REORDER + 2, 1))
            return -1;
    }
    if (c->need_gw) {
        if (DL_DNNL(dnnl_dilated_convolution_backward_weights_desc_init(
                &bw, conv_alg(&cw), &mw.src_p, &mw.wei_p, c->bias ? &mw.bias : NULL, &mw.dst_p,
                mw.strides, mw.dil, mw.pad, mw.pad)))
            return -1;
        if (dl_dnnl_entry_add(e, S_BW, &bw, e->pd[hint], 1) ||
            set_arg(e, L, A_BW_SRC, &m.src, S_BW, dnnl_query_src_md, S_REORDER + 3, 0) ||
            set_arg(e, L, A_BW_DDST, &m.dst, S_BW, dnnl_query_diff_dst_md, S_REORDER + 4, 0) ||
            set_arg(e, L, A_BW_DWEI, &m.wei, S_BW, dnnl_query_diff_weights_md, S_REORDER + 5, 1))
            return -1;
    }
    return 0;
}

/* Scratch buffers of one call, freed together. */
typedef struct {
    void *p[A_N];
    size_t n[A_N];
} conv_tmp;

static void tmp_free(conv_tmp *t) {
    for (int i = 0; i < A_N; i++) dl_cpu_free(t->p[i], t->n[i]);
}

static void *tmp_alloc(conv_tmp *t, int which, const dnnl_memory_desc_t *md) {
    t->n[which] = dl_dnnl_md_size(md);
    return t->p[which] = dl_dnnl_alloc(t->n[which], "conv2d");
}

/* Binds input argument `which` (our buffer data) as dnnl_arg, reordering it
 * into a scratch buffer first when the primitive wants another layout. */
static int bind_in(dl_dnnl_entry *e, int which, int dnnl_arg, const void *data, dl_dnnl_args *args,
                   conv_tmp *t) {
    const conv_arg *a = &((conv_layouts *)e->user)->a[which];
    if (a->slot < 0) return dl_dnnl_args_add(args, dnnl_arg, &a->prim, (void *)data);
    if (!tmp_alloc(t, which, &a->prim)) return -1;
    if (reorder_in(e, a, data, t->p[which])) return -1;
    return dl_dnnl_args_add(args, dnnl_arg, &a->prim, t->p[which]);
}

/* Binds output argument `which`: our buffer, or a scratch buffer that
 * out_done reorders into ours after execution. */
static int bind_out(dl_dnnl_entry *e, int which, int dnnl_arg, void *data, dl_dnnl_args *args,
                    conv_tmp *t) {
    const conv_arg *a = &((conv_layouts *)e->user)->a[which];
    if (a->slot < 0) return dl_dnnl_args_add(args, dnnl_arg, &a->prim, data);
    if (!tmp_alloc(t, which, &a->prim)) return -1;
    return dl_dnnl_args_add(args, dnnl_arg, &a->prim, t->p[which]);
}

static int out_done(dl_dnnl_entry *e, int which, void *data, conv_tmp *t) {
    const conv_arg *a = &((conv_layouts *)e->user)->a[which];
    if (a->slot < 0) return 0;
    return dl_dnnl_reorder(e->prim[a->slot], &a->prim, t->p[which], &a->user, data);
}

static void conv_key(char *key, const char *what, const conv_ctx *c) {
    const dl_conv2d_shape *s = c->s;
    snprintf(key, DL_DNNL_KEY_LEN,
             "conv2d_%s f32 x%lld,%lld,%lld,%lld w%lld,%lld,%lld y%lld,%lld s%lld,%lld "
             "p%lld,%lld d%lld,%lld g%lld b%d n%d%d l%d f%d o%d w%d",
             what, (long long)s->N, (long long)s->C, (long long)s->H, (long long)s->W,
             (long long)s->O, (long long)s->KH, (long long)s->KW, (long long)s->OH,
             (long long)s->OW, (long long)s->sh, (long long)s->sw, (long long)s->ph,
             (long long)s->pw, (long long)s->dh, (long long)s->dw, (long long)s->groups, c->bias,
             c->need_gx, c->need_gw, (int)c->layout, c->fmt, c->post, c->wino);
}

/* The cache entry of c's primitives; a Winograd request oneDNN refuses
 * (no such kernel for the shape, or with the post-ops) runs direct instead. */
static dl_dnnl_entry *conv_entry(conv_ctx *c, const char *what, dl_dnnl_build_fn build) {
    char key[DL_DNNL_KEY_LEN];
    conv_key(key, what, c);
    dl_dnnl_entry *e = dl_dnnl_cache_get(key, build, c);
    if (e || !c->wino) return e;
    c->wino = 0;
    conv_key(key, what, c);
    return dl_dnnl_cache_get(key, build, c);
}

/* --- prepacked weights ------------------------------------------------------------
 * An inference forward whose weights oneDNN wants in another layout than
 * ours reorders them on every call (for ResNet-50 at batch 1, 2.3 of 29 ms
 * here, and the whole 97 MB is read and written again).  When the op passes
 * the weights' storage, the reordered copy is kept on it (core/storage.h's
 * derived data) and reused while the storage's version is unchanged; it dies
 * with the storage.  A copy is matched by its byte offset in the storage and
 * both layouts (ours, the primitive's). */

static const char packed_owner; /* the tag of this file's derived data */

typedef struct {
    dl_derived base;
    size_t offset;
    dnnl_memory_desc_t user, prim;
    void *data;
    size_t nbytes;
} packed_weights;

typedef struct {
    size_t offset;
    const conv_arg *a;
} packed_query;

static int packed_match(const dl_derived *d, const void *ctx) {
    const packed_weights *p = (const packed_weights *)d;
    const packed_query *q = ctx;
    return p->offset == q->offset && dnnl_memory_desc_equal(&p->user, &q->a->user) &&
           dnnl_memory_desc_equal(&p->prim, &q->a->prim);
}

static void packed_free(dl_derived *d) {
    packed_weights *p = (packed_weights *)d;
    dl_cpu_free(p->data, p->nbytes);
    free(p);
}

/* The weights w (at byte offset `offset` in storage st) in the layout of
 * entry e's forward, held (dl_derived_put when done); NULL with an error. */
static packed_weights *packed_get(dl_dnnl_entry *e, dl_storage *st, const float *w) {
    const conv_arg *a = &((conv_layouts *)e->user)->a[A_WEI];
    packed_query q = {(size_t)((const char *)w - (const char *)st->data), a};
    packed_weights *p =
        (packed_weights *)dl_storage_derived_find(st, &packed_owner, packed_match, &q);
    if (p) return p;
    p = calloc(1, sizeof *p);
    if (!p) {
        dl_error("conv2d: out of memory");
        return NULL;
    }
    p->base.owner = &packed_owner;
    p->base.free_fn = packed_free;
    p->base.version = dl_storage_version(st);
    p->offset = q.offset;
    p->user = a->user;
    p->prim = a->prim;
    p->nbytes = dl_dnnl_md_size(&a->prim);
    p->data = dl_dnnl_alloc(p->nbytes, "conv2d");
    if (!p->data || reorder_in(e, a, w, p->data)) {
        dl_cpu_free(p->data, p->nbytes);
        free(p);
        return NULL;
    }
    dl_storage_derived_add(st, &p->base);
    return p;
}

static int forward_f32(const dl_conv2d_shape *s, int fmt, int post, float *y, const float *x,
                       const float *w, const float *b, dl_storage *wst) {
    bool wino = (fmt & DL_CONV_INFERENCE) && winograd_shape(s);
    conv_ctx c = {s, b != NULL, 0, 0, layout_for(s), fmt, post, wino};
    dl_dnnl_entry *e = conv_entry(&c, "fwd", build_fwd);
    if (!e) return -1;
    conv_layouts *L = e->user;
    conv_tmp t = {0};
    dl_dnnl_args args = {0};
    int rc = -1;
    packed_weights *pw = NULL;
    if (wst && L->a[A_WEI].slot >= 0 && !(pw = packed_get(e, wst, w))) {
        dl_dnnl_cache_put(e);
        return -1;
    }
    if (bind_in(e, A_SRC, DNNL_ARG_SRC, x, &args, &t) ||
        (pw ? dl_dnnl_args_add(&args, DNNL_ARG_WEIGHTS, &pw->prim, pw->data)
            : bind_in(e, A_WEI, DNNL_ARG_WEIGHTS, w, &args, &t)) ||
        (b && dl_dnnl_args_add(&args, DNNL_ARG_BIAS, &L->bias, (void *)b)) ||
        bind_out(e, A_DST, DNNL_ARG_DST, y, &args, &t)) {
        dl_dnnl_args_free(&args);
        goto done;
    }
    if (L->dst_in_slot >= 0 && dl_dnnl_reorder(e->prim[L->dst_in_slot], &L->a[A_DST].user, y,
                                               &L->a[A_DST].prim, t.p[A_DST])) {
        dl_dnnl_args_free(&args);
        goto done;
    }
    if (dl_dnnl_execute(e->prim[S_FWD], &args) || out_done(e, A_DST, y, &t)) goto done;
    rc = 0;
done:
    dl_derived_put(pw ? &pw->base : NULL);
    tmp_free(&t);
    dl_dnnl_cache_put(e);
    return rc;
}

static int backward_f32(const dl_conv2d_shape *s, int fmt, float *gx, float *gw, float *gb,
                        const float *gy, const float *x, const float *w) {
    /* oneDNN computes gb with gw; alone it is a reduction */
    conv_ctx c = {
        s, gw && gb, gx != NULL, gw != NULL, layout_for(s), fmt, 0, gw && winograd_shape(s)};
    if (gb && !gw) bias_grad_float(s, fmt & DL_CONV_FMT_NHWC, gb, gy);
    if (!gx && !gw) return 0;
    dl_dnnl_entry *e = conv_entry(&c, "bwd", build_backward);
    if (!e) return -1;
    conv_layouts *L = e->user;
    conv_tmp t = {0};
    dl_dnnl_args args = {0};
    int rc = -1;
    if (gx) {
        if (bind_in(e, A_BD_DDST, DNNL_ARG_DIFF_DST, gy, &args, &t) ||
            bind_in(e, A_BD_WEI, DNNL_ARG_WEIGHTS, w, &args, &t) ||
            bind_out(e, A_BD_DSRC, DNNL_ARG_DIFF_SRC, gx, &args, &t)) {
            dl_dnnl_args_free(&args);
            goto done;
        }
        if (dl_dnnl_execute(e->prim[S_BD], &args) || out_done(e, A_BD_DSRC, gx, &t)) goto done;
    }
    if (gw) {
        /* gy reordered for backward-data serves backward-weights too when
         * both want the same layout */
        const conv_arg *bd = &L->a[A_BD_DDST], *bw = &L->a[A_BW_DDST];
        bool reuse =
            t.p[A_BD_DDST] && bw->slot >= 0 && dnnl_memory_desc_equal(&bd->prim, &bw->prim);
        if (bind_in(e, A_BW_SRC, DNNL_ARG_SRC, x, &args, &t) ||
            (reuse ? dl_dnnl_args_add(&args, DNNL_ARG_DIFF_DST, &bw->prim, t.p[A_BD_DDST])
                   : bind_in(e, A_BW_DDST, DNNL_ARG_DIFF_DST, gy, &args, &t)) ||
            bind_out(e, A_BW_DWEI, DNNL_ARG_DIFF_WEIGHTS, gw, &args, &t) ||
            (gb && dl_dnnl_args_add(&args, DNNL_ARG_DIFF_BIAS, &L->bias, gb))) {
            dl_dnnl_args_free(&args);
            goto done;
        }
        if (dl_dnnl_execute(e->prim[S_BW], &args) || out_done(e, A_BW_DWEI, gw, &t)) goto done;
    }
    rc = 0;
done:
    tmp_free(&t);
    dl_dnnl_cache_put(e);
    return rc;
}

/* --- float64: im2col + GEMM ------------------------------------------------------- */

static int is_pointwise(const dl_conv2d_shape *s) {
    return s->KH == 1 && s->KW == 1 && s->sh == 1 && s->sw == 1 && s->ph == 0 && s->pw == 0;
}

/* col is (Cg*KH*KW, OH*OW): row (c,kh,kw) holds x[c][ih][iw] for every output
 * position, 0 where the window reads padding.  x is (Cg,H,W). */
static void im2col_f64(const dl_conv2d_shape *s, int64_t Cg, const double *x, double *col) {
    int64_t KK = s->KH * s->KW, S = s->OH * s->OW;
#pragma omp parallel for num_threads(dl_get_num_threads()) if (Cg * KK * S >= DL_PARALLEL_GRAIN)
    for (int64_t r = 0; r < Cg * KK; r++) {
        int64_t c = r / KK, kh = (r % KK) / s->KW, kw = r % s->KW;
        const double *xc = x + c * s->H * s->W;
        double *out = col + r * S;
        for (int64_t oh = 0; oh < s->OH; oh++) {
            int64_t ih = oh * s->sh - s->ph + kh * s->dh;
            double *o = out + oh * s->OW;
            if (ih < 0 || ih >= s->H) {
                memset(o, 0, sizeof(double) * (size_t)s->OW);
                continue;
            }
            for (int64_t ow = 0; ow < s->OW; ow++) {
                int64_t iw = ow * s->sw - s->pw + kw * s->dw;
                o[ow] = (iw >= 0 && iw < s->W) ? xc[ih * s->W + iw] : 0.0;
            }
        }
    }
}

/* The adjoint of im2col: gx (Cg,H,W) = sum of col's entries over the window
 * positions that read each input element.  gx is overwritten. */
static void col2im_f64(const dl_conv2d_shape *s, int64_t Cg, const double *col, double *gx) {
    int64_t KK = s->KH * s->KW, S = s->OH * s->OW;
#pragma omp parallel for num_threads(dl_get_num_threads()) if (Cg * KK * S >= DL_PARALLEL_GRAIN)
    for (int64_t c = 0; c < Cg; c++) {
        double *g = gx + c * s->H * s->W;
        memset(g, 0, sizeof(double) * (size_t)(s->H * s->W));
        for (int64_t k = 0; k < KK; k++) {
            int64_t kh = k / s->KW, kw = k % s->KW;
            const double *in = col + (c * KK + k) * S;
            for (int64_t oh = 0; oh < s->OH; oh++) {
                int64_t ih = oh * s->sh - s->ph + kh * s->dh;
                if (ih < 0 || ih >= s->H) continue;
                for (int64_t ow = 0; ow < s->OW; ow++) {
                    int64_t iw = ow * s->sw - s->pw + kw * s->dw;
                    if (iw >= 0 && iw < s->W) g[ih * s->W + iw] += in[oh * s->OW + ow];
                }
            }
        }
    }
}

/* out (M,N) = alpha-free A @ B (+ out when accumulate); strides in elements. */
static int gemm_f64(int64_t M, int64_t N, int64_t K, const double *a, int64_t ars, int64_t acs,
                    const double *b, int64_t brs, int64_t bcs, double *out, int accumulate) {
    dl_gemm_matrix A = {a, NULL, ars, acs}, B = {b, NULL, brs, bcs};
    return dl_cpu_gemm(DL_DTYPE_F64, 1, M, N, K, 1.0, &A, &B, accumulate ? 1.0 : 0.0, out);
}

static int forward_f64(const dl_conv2d_shape *s, double *y, const double *x, const double *w,
                       const double *b) {
    int64_t g = s->groups, Cg = s->C / g, Og = s->O / g, KK = s->KH * s->KW;
    int64_t CKK = Cg * KK, S = s->OH * s->OW, HW = s->H * s->W;
    int pointwise = is_pointwise(s);
    double *col = pointwise ? NULL : malloc(sizeof(double) * (size_t)(CKK * S));
    if (!pointwise && !col) return dl_error("conv2d: out of memory for the column buffer");
    int rc = 0;
    for (int64_t n = 0; n < s->N && rc == 0; n++)
        for (int64_t gi = 0; gi < g && rc == 0; gi++) {
            const double *xg = x + (n * s->C + gi * Cg) * HW;
            if (!pointwise) im2col_f64(s, Cg, xg, col);
            const double *cm = pointwise ? xg : col;   /* (CKK, S) */
            double *yg = y + (n * s->O + gi * Og) * S; /* (Og, S) */
            rc = gemm_f64(Og, S, CKK, w + gi * Og * CKK, CKK, 1, cm, S, 1, yg, 0);
            if (rc == 0 && b)
                for (int64_t o = 0; o < Og; o++)
                    for (int64_t i = 0; i < S; i++) yg[o * S + i] += b[gi * Og + o];
        }
    free(col);
    return rc;
}

static int backward_f64(const dl_conv2d_shape *s, double *gx, double *gw, double *gb,
                        const double *gy, const double *x, const double *w) {
    int64_t g = s->groups, Cg = s->C / g, Og = s->O / g, KK = s->KH * s->KW;
    int64_t CKK = Cg * KK, S = s->OH * s->OW, HW = s->H * s->W;
    int pointwise = is_pointwise(s);
    if (gb) bias_grad_double(s, gb, gy);
    if (!gx && !gw) return 0;
    double *col = pointwise ? NULL : malloc(sizeof(double) * (size_t)(CKK * S));
    if (!pointwise && !col) return dl_error("conv2d: out of memory for the column buffer");
    int rc = 0;
    for (int64_t n = 0; n < s->N && rc == 0; n++)
        for (int64_t gi = 0; gi < g && rc == 0; gi++) {
            const double *gyg = gy + (n * s->O + gi * Og) * S; /* (Og, S) */
            if (gx) {
                const double *wg = w + gi * Og * CKK;         /* (Og, CKK); w is NULL without gx */
                double *gxg = gx + (n * s->C + gi * Cg) * HW; /* (Cg, H, W) */
                /* gcol (CKK, S) = wg^T @ gyg */
                rc = gemm_f64(CKK, S, Og, wg, 1, CKK, gyg, S, 1, pointwise ? gxg : col, 0);
                if (rc) break;
                if (!pointwise) col2im_f64(s, Cg, col, gxg);
            }
            if (gw) {
                const double *xg = x + (n * s->C + gi * Cg) * HW;
                if (!pointwise) im2col_f64(s, Cg, xg, col);
                const double *cm = pointwise ? xg : col; /* (CKK, S) */
                /* gw_g (Og, CKK) += gyg @ cm^T */
                rc = gemm_f64(Og, CKK, S, gyg, S, 1, cm, 1, S, gw + gi * Og * CKK, n > 0);
            }
        }
    free(col);
    return rc;
}

/* --- entry points --------------------------------------------------------------- */

int dl_cpu_conv2d_formats(dl_dtype dt, bool x_cl, bool w_cl) {
    if (dt != DL_DTYPE_F32) return 0;
    return (x_cl ? DL_CONV_FMT_NHWC : 0) | (w_cl ? DL_CONV_FMT_W_OHWI : 0);
}

int dl_cpu_conv2d_forward(dl_dtype dt, const dl_conv2d_shape *s, int fmt, int post, void *y,
                          const void *x, const void *w, const void *b) {
    if (((fmt & ~DL_CONV_INFERENCE) || post) && dt != DL_DTYPE_F32)
        return dl_error("conv2d: channels-last operands and post-ops need float32, got %s",
                        dl_dtype_name(dt));
    switch (dt) {
    case DL_DTYPE_F32: return forward_f32(s, fmt, post, y, x, w, b, NULL);
    case DL_DTYPE_F64: return forward_f64(s, y, x, w, b);
    default: return dl_error("conv2d: no CPU kernel for %s", dl_dtype_name(dt));
    }
}

int dl_cpu_conv2d_forward_packed(const dl_conv2d_shape *s, int fmt, int post, float *y,
                                 const float *x, const float *w, const float *b, dl_storage *wst) {
    return forward_f32(s, fmt | DL_CONV_INFERENCE, post, y, x, w, b, wst);
}

int dl_cpu_conv2d_backward(dl_dtype dt, const dl_conv2d_shape *s, int fmt, void *gx, void *gw,
                           void *gb, const void *gy, const void *x, const void *w) {
    if (fmt && dt != DL_DTYPE_F32)
        return dl_error("conv2d_backward: channels-last operands need float32, got %s",
                        dl_dtype_name(dt));
    switch (dt) {
    case DL_DTYPE_F32: return backward_f32(s, fmt, gx, gw, gb, gy, x, w);
    case DL_DTYPE_F64: return backward_f64(s, gx, gw, gb, gy, x, w);
    default: return dl_error("conv2d_backward: no CPU kernel for %s", dl_dtype_name(dt));
    }
}
