/* transform.c - image transform kernels (see transform.h).
 *
 * Resampling follows Pillow's Resample.c algorithm, written afresh: for each
 * output pixel a set of filter taps over the source box (support scaled by the
 * downscale factor, which is the antialiasing), normalised, and for uint8
 * turned into 22-bit fixed point; a horizontal pass into a uint8 buffer, then
 * a vertical pass.  Only the output window's taps are computed, so a resize
 * followed by a crop costs only the cropped pixels and equals resizing then
 * cropping.  Sections: random stream, resampling, padding, colour, conversion. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("O3") /* the resampling loops want vectorising */
#endif
#include "transform.h"
#include "core/parallel.h"
#include "codec.h"
#include "core/error.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* --- random stream ---------------------------------------------------------- */

static uint64_t splitmix64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

void dl_sample_rng_init(dl_sample_rng *r, uint64_t seed, uint64_t epoch, uint64_t index) {
    memset(r, 0, sizeof *r);
    r->key = splitmix64(seed ^ splitmix64(epoch * 0x632BE59BD9B4E019ull + 1));
    r->counter = index << 20; /* 2^20 blocks per sample */
}

void dl_sample_rng_from_generator(dl_sample_rng *r, dl_generator *g) {
    memset(r, 0, sizeof *r);
    r->key = g->seed;
    r->gen = g;
}

double dl_sample_rng_uniform(dl_sample_rng *r) {
    if (r->replay && r->pos < r->ntape) return r->tape[r->pos++];
    if (r->avail < 2) {
        uint64_t ctr = r->gen ? dl_generator_reserve(r->gen, 1) : r->counter++;
        dl_philox4x32(r->key, ctr, r->words);
        r->avail = 4;
    }
    int i = 4 - r->avail;
    r->avail -= 2;
    double v = dl_u64_to_unit_double(r->words[i], r->words[i + 1]);
    if (r->tape && !r->replay) {
        if (r->ntape == r->cap) {
            int cap = r->cap * 2;
            double *t = realloc(r->tape, sizeof(double) * (size_t)cap);
            if (!t) return v; /* recording stops; replays then draw fresh */
            r->tape = t;
            r->cap = cap;
        }
        r->tape[r->ntape++] = v;
    }
    return v;
}

void dl_sample_rng_tape(dl_sample_rng *r, int record) {
    if (record) {
        if (!r->tape) {
            r->tape = malloc(sizeof(double) * 16);
            r->cap = r->tape ? 16 : 0;
        }
        r->ntape = 0;
        r->replay = 0;
    } else {
        r->replay = 1;
    }
    r->pos = 0;
}

void dl_sample_rng_free(dl_sample_rng *r) {
    free(r->tape);
    r->tape = NULL;
}

/* --- resampling -------------------------------------------------------------- */

#define PREC_BITS 22 /* Pillow's PRECISION_BITS for 8-bit images: 32 - 8 - 2 */

static double filter_bilinear(double x) {
    if (x < 0) x = -x;
    return x < 1.0 ? 1.0 - x : 0.0;
}

static double filter_bicubic(double x) {
    const double a = -0.5;
    if (x < 0) x = -x;
    if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0;
    if (x < 2.0) return (((x - 5.0) * x + 8.0) * x - 4.0) * a;
    return 0.0;
}

/* Taps for outputs [o0, o0 + n) of a resize of [in0, in1) (an axis of
 * in_size pixels) to out_size pixels.  first[i], count[i], then ksize weights
 * per output; identity when the axis needs no resampling. */
typedef struct {
    int ksize;
    int64_t *first, *count;
    double *w;
    int32_t *wi; /* fixed point */
    float *wf;
} taps;

static void taps_free(taps *t) {
    free(t->first);
    free(t->count);
    free(t->w);
    free(t->wi);
    free(t->wf);
}

static int taps_make(taps *t, int64_t in_size, double in0, double in1, int64_t out_size, int64_t o0,
                     int64_t n, dl_interp interp, int identity) {
    memset(t, 0, sizeof *t);
    double scale = (in1 - in0) / (double)out_size;
    double fscale = scale < 1.0 ? 1.0 : scale;
    double support = 0;
    if (identity || interp == DL_INTERP_NEAREST)
        t->ksize = 1;
    else {
        support = (interp == DL_INTERP_BICUBIC ? 2.0 : 1.0) * fscale;
        t->ksize = (int)ceil(support) * 2 + 1;
    }
    size_t nn = (size_t)(n > 0 ? n : 1), nk = nn * (size_t)t->ksize;
    t->first = malloc(sizeof(int64_t) * nn);
    t->count = malloc(sizeof(int64_t) * nn);
    t->w = calloc(nk, sizeof(double));
    t->wi = malloc(sizeof(int32_t) * nk);
    t->wf = malloc(sizeof(float) * nk);
    if (!t->first || !t->count || !t->w || !t->wi || !t->wf) {
        taps_free(t);
        return dl_error("resize: out of memory");
    }
    /* Pillow's nearest: the source coordinate is accumulated step by step */
    double near = in0 + scale * 0.5;
    for (int64_t i = 0; i < o0 && interp == DL_INTERP_NEAREST && !identity; i++) near += scale;
    for (int64_t i = 0; i < n; i++) {
        int64_t xx = o0 + i;
        double *k = t->w + (size_t)i * (size_t)t->ksize;
        if (identity) {
            t->first[i] = (int64_t)in0 + xx;
            t->count[i] = 1;
            k[0] = 1.0;
            continue;
        }
        if (interp == DL_INTERP_NEAREST) {
            int64_t s = (int64_t)near;
            if (near < 0) s = 0;
            near += scale;
            if (s > in_size - 1) s = in_size - 1;
            t->first[i] = s;
            t->count[i] = 1;
            k[0] = 1.0;
            continue;
        }
        double center = in0 + ((double)xx + 0.5) * scale;
        double (*f)(double) = interp == DL_INTERP_BICUBIC ? filter_bicubic : filter_bilinear;
        double ss = 1.0 / fscale, ww = 0.0;
        int64_t xmin = (int64_t)(center - support + 0.5);
        if (xmin < 0) xmin = 0;
        int64_t xmax = (int64_t)(center + support + 0.5);
        if (xmax > in_size) xmax = in_size;
        xmax -= xmin;
        if (xmax > t->ksize) xmax = t->ksize;
        if (xmax < 0) xmax = 0;
        for (int64_t x = 0; x < xmax; x++) {
            double w = f(((double)(x + xmin) - center + 0.5) * ss);
            k[x] = w;
            ww += w;
        }
        for (int64_t x = 0; x < xmax; x++)
            if (ww != 0.0) k[x] /= ww;
        t->first[i] = xmin;
        t->count[i] = xmax;
    }
    for (size_t i = 0; i < nk; i++) {
        double v = t->w[i];
        t->wi[i] =
            v < 0 ? (int32_t)(-0.5 + v * (1 << PREC_BITS)) : (int32_t)(0.5 + v * (1 << PREC_BITS));
        t->wf[i] = (float)v;
    }
    return 0;
}

/* The hot loops below get an AVX2 build beside the baseline one
 * (DL_TARGET_CLONES: 32-bit integer multiplies vectorise only from SSE4.1
 * on). */

static inline uint8_t clip8(int32_t v) {
    v >>= PREC_BITS;
    return (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
}

/* Horizontal pass, uint8: rows [y0, y0 + nrows) of src -> tmp (nrows, ow, C). */
DL_TARGET_CLONES("avx2", "default")
static void hpass_u8(uint8_t *tmp, const dl_tensor *src, int64_t y0, int64_t nrows, int64_t ow,
                     const taps *tx) {
    const uint8_t *base = dl_tensor_data_ptr(src);
    int64_t C = src->shape[0], sc = src->strides[0], sy = src->strides[1], sx = src->strides[2];
    int K = tx->ksize;
    for (int64_t r = 0; r < nrows; r++) {
        const uint8_t *row = base + (y0 + r) * sy;
        uint8_t *o = tmp + (size_t)r * (size_t)(ow * C);
        if (C == 3 && sc == 1 && sx == 3) {
            for (int64_t x = 0; x < ow; x++) {
                const int32_t *k = tx->wi + x * K;
                const uint8_t *p = row + tx->first[x] * 3;
                int32_t s0 = 1 << (PREC_BITS - 1), s1 = s0, s2 = s0;
                for (int64_t t = 0; t < tx->count[x]; t++) {
                    s0 += p[3 * t] * k[t];
                    s1 += p[3 * t + 1] * k[t];
                    s2 += p[3 * t + 2] * k[t];
                }
                o[3 * x] = clip8(s0);
                o[3 * x + 1] = clip8(s1);
                o[3 * x + 2] = clip8(s2);
            }
        } else {
            for (int64_t c = 0; c < C; c++) {
                const uint8_t *rc = row + c * sc;
                for (int64_t x = 0; x < ow; x++) {
                    const int32_t *k = tx->wi + x * K;
                    const uint8_t *p = rc + tx->first[x] * sx;
                    int32_t s = 1 << (PREC_BITS - 1);
                    for (int64_t t = 0; t < tx->count[x]; t++) s += p[t * sx] * k[t];
                    o[x * C + c] = clip8(s);
                }
            }
        }
    }
}

static void hpass_f32(float *tmp, const dl_tensor *src, int64_t y0, int64_t nrows, int64_t ow,
                      const taps *tx) {
    const float *base = dl_tensor_data_ptr(src);
    int64_t C = src->shape[0], sc = src->strides[0], sy = src->strides[1], sx = src->strides[2];
    int K = tx->ksize;
    for (int64_t r = 0; r < nrows; r++) {
        const float *row = base + (y0 + r) * sy;
        float *o = tmp + (size_t)r * (size_t)(ow * C);
        for (int64_t c = 0; c < C; c++) {
            const float *rc = row + c * sc;
            for (int64_t x = 0; x < ow; x++) {
                const float *k = tx->wf + x * K;
                const float *p = rc + tx->first[x] * sx;
                float s = 0;
                for (int64_t t = 0; t < tx->count[x]; t++) s += p[t * sx] * k[t];
                o[x * C + c] = s;
            }
        }
    }
}

/* One output row of the vertical pass: out[i] = clip(sum_t rows[t][i] * k[t])
 * over count consecutive rows of rowlen bytes. */
DL_TARGET_CLONES("avx2", "default")
static void vpass_u8_row(uint8_t *out, int32_t *a, const uint8_t *rows, size_t rowlen,
                         const int32_t *k, int64_t count) {
    for (size_t i = 0; i < rowlen; i++) a[i] = 1 << (PREC_BITS - 1);
    for (int64_t t = 0; t < count; t++) {
        const uint8_t *row = rows + (size_t)t * rowlen;
        int32_t kt = k[t];
        for (size_t i = 0; i < rowlen; i++) a[i] += row[i] * kt;
    }
    for (size_t i = 0; i < rowlen; i++) out[i] = clip8(a[i]);
}

/* Stores one finished row (ow * C values, interleaved) into dst row y. */
typedef struct {
    dl_tensor *dst;
    int hflip, vflip;
    const float *lut;
} sink;

DL_TARGET_CLONES("avx2", "default")
static void store_row_u8(const sink *s, int64_t y, const uint8_t *v, int64_t ow, int64_t C) {
    dl_tensor *d = s->dst;
    int64_t oh = d->shape[1];
    int64_t Y = s->vflip ? oh - 1 - y : y;
    int64_t dsx = d->strides[2];
    if (d->dtype == DL_DTYPE_U8) {
        uint8_t *base = (uint8_t *)dl_tensor_data_ptr(d) + Y * d->strides[1];
        for (int64_t c = 0; c < C; c++) {
            uint8_t *p = base + c * d->strides[0];
            if (!s->hflip && dsx == 1)
                for (int64_t x = 0; x < ow; x++) p[x] = v[x * C + c];
            else
                for (int64_t x = 0; x < ow; x++)
                    p[(s->hflip ? ow - 1 - x : x) * dsx] = v[x * C + c];
        }
    } else {
        float *base = (float *)dl_tensor_data_ptr(d) + Y * d->strides[1];
        for (int64_t c = 0; c < C; c++) {
            float *p = base + c * d->strides[0];
            const float *lut = s->lut + c * 256;
            if (!s->hflip && dsx == 1)
                for (int64_t x = 0; x < ow; x++) p[x] = lut[v[x * C + c]];
            else
                for (int64_t x = 0; x < ow; x++)
                    p[(s->hflip ? ow - 1 - x : x) * dsx] = lut[v[x * C + c]];
        }
    }
}

static void store_row_f32(const sink *s, int64_t y, const float *v, int64_t ow, int64_t C) {
    dl_tensor *d = s->dst;
    int64_t oh = d->shape[1];
    int64_t Y = s->vflip ? oh - 1 - y : y;
    float *base = (float *)dl_tensor_data_ptr(d) + Y * d->strides[1];
    for (int64_t c = 0; c < C; c++) {
        float *p = base + c * d->strides[0];
        for (int64_t x = 0; x < ow; x++)
            p[(s->hflip ? ow - 1 - x : x) * d->strides[2]] = v[x * C + c];
    }
}

/* No resampling: dst = the window of src at (ox, oy), flipped, converted. */
static void copy_window(dl_tensor *dst, const dl_tensor *src, const dl_resample_geom *g,
                        const float *lut) {
    int64_t C = src->shape[0], oh = dst->shape[1], ow = dst->shape[2];
    int64_t sc = src->strides[0], sy = src->strides[1], sx = src->strides[2];
    int64_t dc = dst->strides[0], dy = dst->strides[1], dx = dst->strides[2];
    int64_t x0 = g->hflip ? ow - 1 : 0, step = g->hflip ? -dx : dx;
    for (int64_t c = 0; c < C; c++)
        for (int64_t y = 0; y < oh; y++) {
            int64_t Y = g->vflip ? oh - 1 - y : y;
            int64_t so = c * sc + (g->oy + y) * sy + g->ox * sx, d0 = c * dc + Y * dy + x0 * dx;
            if (src->dtype == DL_DTYPE_U8) {
                const uint8_t *s8 = (const uint8_t *)dl_tensor_data_ptr(src) + so;
                if (dst->dtype == DL_DTYPE_U8) {
                    uint8_t *d8 = (uint8_t *)dl_tensor_data_ptr(dst) + d0;
                    for (int64_t x = 0; x < ow; x++) d8[x * step] = s8[x * sx];
                } else {
                    float *df = (float *)dl_tensor_data_ptr(dst) + d0;
                    const float *l = lut + c * 256;
                    for (int64_t x = 0; x < ow; x++) df[x * step] = l[s8[x * sx]];
                }
            } else {
                const float *sf = (const float *)dl_tensor_data_ptr(src) + so;
                float *df = (float *)dl_tensor_data_ptr(dst) + d0;
                for (int64_t x = 0; x < ow; x++) df[x * step] = sf[x * sx];
            }
        }
}

int dl_tf_resample_into(dl_tensor *dst, const dl_tensor *src, const dl_resample_geom *g,
                        const float *lut) {
    if (src->ndim != 3 || dst->ndim != 3)
        return dl_error("resize: expected (C, H, W) images, got %d-D and %d-D", src->ndim,
                        dst->ndim);
    int64_t C = src->shape[0], H = src->shape[1], W = src->shape[2];
    int64_t oh = dst->shape[1], ow = dst->shape[2];
    if (dst->shape[0] != C)
        return dl_error("resize: output has %lld channels, input %lld", (long long)dst->shape[0],
                        (long long)C);
    int src_u8 = src->dtype == DL_DTYPE_U8, dst_u8 = dst->dtype == DL_DTYPE_U8;
    if ((!src_u8 && src->dtype != DL_DTYPE_F32) || (!dst_u8 && dst->dtype != DL_DTYPE_F32))
        return dl_error("resize: images must be uint8 or float32 (got %s -> %s)",
                        dl_dtype_name(src->dtype), dl_dtype_name(dst->dtype));
    if (!src_u8 && dst_u8) return dl_error("resize: cannot write a float image into uint8");
    if (src_u8 && !dst_u8 && !lut) return dl_error("resize: uint8 to float needs a lookup table");
    if (oh == 0 || ow == 0 || C == 0) return 0;
    if (H == 0 || W == 0)
        return dl_error("resize: cannot resize an empty %lldx%lld image", (long long)H,
                        (long long)W);
    if (g->rw < 1 || g->rh < 1 || g->ox < 0 || g->oy < 0 || g->ox + ow > g->rw ||
        g->oy + oh > g->rh)
        return dl_error("resize: window %lldx%lld at (%lld, %lld) outside a %lldx%lld output",
                        (long long)ow, (long long)oh, (long long)g->ox, (long long)g->oy,
                        (long long)g->rw, (long long)g->rh);
    const double *b = g->box;
    if (!(b[0] >= 0 && b[1] >= 0 && b[2] <= (double)W && b[3] <= (double)H && b[0] < b[2] &&
          b[1] < b[3]))
        return dl_error("resize: box (%g, %g, %g, %g) outside a %lldx%lld image", b[0], b[1], b[2],
                        b[3], (long long)W, (long long)H);
    int need_h = g->rw != W || b[0] != 0 || b[2] != (double)W;
    int need_v = g->rh != H || b[1] != 0 || b[3] != (double)H;
    if (!need_h && !need_v) {
        copy_window(dst, src, g, lut);
        return 0;
    }
    taps tx, ty;
    if (taps_make(&tx, W, b[0], b[2], g->rw, g->ox, ow, g->interp, !need_h)) return -1;
    if (taps_make(&ty, H, b[1], b[3], g->rh, g->oy, oh, g->interp, !need_v)) {
        taps_free(&tx);
        return -1;
    }
    int64_t y0 = ty.first[0], y1 = ty.first[oh - 1] + ty.count[oh - 1];
    for (int64_t y = 0; y < oh; y++) {
        if (ty.first[y] < y0) y0 = ty.first[y];
        if (ty.first[y] + ty.count[y] > y1) y1 = ty.first[y] + ty.count[y];
    }
    int64_t nrows = y1 - y0;
    size_t esz = src_u8 ? 1 : sizeof(float);
    size_t rowlen = (size_t)(ow * C);
    void *tmp = malloc(rowlen * (size_t)(nrows > 0 ? nrows : 1) * esz);
    void *acc = malloc(rowlen * 4);
    uint8_t *out8 = malloc(rowlen);
    if (!tmp || !acc || !out8) {
        free(tmp);
        free(acc);
        free(out8);
        taps_free(&tx);
        taps_free(&ty);
        return dl_error("resize: out of memory");
    }
    sink s = {dst, g->hflip, g->vflip, lut};
    int K = ty.ksize;
    if (src_u8) {
        hpass_u8(tmp, src, y0, nrows, ow, &tx);
        for (int64_t y = 0; y < oh; y++) {
            const uint8_t *first = (const uint8_t *)tmp + (size_t)(ty.first[y] - y0) * rowlen;
            vpass_u8_row(out8, acc, first, rowlen, ty.wi + y * K, ty.count[y]);
            store_row_u8(&s, y, out8, ow, C);
        }
    } else {
        hpass_f32(tmp, src, y0, nrows, ow, &tx);
        float *a = acc;
        for (int64_t y = 0; y < oh; y++) {
            const float *k = ty.wf + y * K;
            for (size_t i = 0; i < rowlen; i++) a[i] = 0;
            for (int64_t t = 0; t < ty.count[y]; t++) {
                const float *row = (const float *)tmp + (size_t)(ty.first[y] - y0 + t) * rowlen;
                float kt = k[t];
                for (size_t i = 0; i < rowlen; i++) a[i] += row[i] * kt;
            }
            store_row_f32(&s, y, a, ow, C);
        }
    }
    free(tmp);
    free(acc);
    free(out8);
    taps_free(&tx);
    taps_free(&ty);
    return 0;
}

/* --- padding ------------------------------------------------------------------ */

static int64_t pad_index(int64_t i, int64_t n, dl_pad_mode mode) {
    if (i >= 0 && i < n) return i;
    switch (mode) {
    case DL_PAD_EDGE: return i < 0 ? 0 : n - 1;
    case DL_PAD_REFLECT: {
        if (n == 1) return 0;
        int64_t p = 2 * n - 2;
        i %= p;
        if (i < 0) i += p;
        return i >= n ? p - i : i;
    }
    case DL_PAD_SYMMETRIC: {
        int64_t p = 2 * n;
        i %= p;
        if (i < 0) i += p;
        return i >= n ? p - 1 - i : i;
    }
    default: return -1;
    }
}

dl_tensor *dl_tf_pad(const dl_tensor *img, int64_t left, int64_t top, int64_t right, int64_t bottom,
                     dl_pad_mode mode, const double *fill) {
    if (img->ndim != 3) {
        dl_error("pad: expected a (C, H, W) image, got %d dims", img->ndim);
        return NULL;
    }
    if (img->dtype != DL_DTYPE_U8 && img->dtype != DL_DTYPE_F32) {
        dl_error("pad: images must be uint8 or float32, got %s", dl_dtype_name(img->dtype));
        return NULL;
    }
    int64_t C = img->shape[0], H = img->shape[1], W = img->shape[2];
    if (left < 0 || top < 0 || right < 0 || bottom < 0) {
        dl_error("pad: padding must be non-negative");
        return NULL;
    }
    if (mode != DL_PAD_CONSTANT && (H == 0 || W == 0)) {
        dl_error("pad: cannot pad an empty image in non-constant mode");
        return NULL;
    }
    int64_t shape[3] = {C, H + top + bottom, W + left + right};
    dl_tensor *out = dl_tensor_empty(3, shape, img->dtype, DL_CPU);
    if (!out) return NULL;
    int64_t OH = shape[1], OW = shape[2];
    int64_t *xmap = malloc(sizeof(int64_t) * (size_t)(OW > 0 ? OW : 1));
    if (!xmap) {
        dl_tensor_release(out);
        dl_error("pad: out of memory");
        return NULL;
    }
    for (int64_t x = 0; x < OW; x++) xmap[x] = pad_index(x - left, W, mode);
    const char *src = dl_tensor_data_ptr(img);
    size_t es = dl_dtype_size(img->dtype);
    for (int64_t c = 0; c < C; c++) {
        double fv = fill ? fill[c] : 0.0;
        uint8_t f8 = (uint8_t)(fv < 0 ? 0 : fv > 255 ? 255 : (int)fv);
        for (int64_t y = 0; y < OH; y++) {
            int64_t sy = pad_index(y - top, H, mode);
            char *o = (char *)out->storage->data + (size_t)((c * OH + y) * OW) * es;
            for (int64_t x = 0; x < OW; x++) {
                int64_t sx = xmap[x];
                if (sy < 0 || sx < 0) {
                    if (es == 1)
                        ((uint8_t *)o)[x] = f8;
                    else
                        ((float *)o)[x] = (float)fv;
                } else {
                    const char *p =
                        src + (c * img->strides[0] + sy * img->strides[1] + sx * img->strides[2]) *
                                  (int64_t)es;
                    if (es == 1)
                        ((uint8_t *)o)[x] = *(const uint8_t *)p;
                    else
                        ((float *)o)[x] = *(const float *)p;
                }
            }
        }
    }
    free(xmap);
    return out;
}

/* --- colour ------------------------------------------------------------------- */

static int check_color(const dl_tensor *img, const char *op) {
    if (img->ndim != 3 || !dl_tensor_is_contiguous(img))
        return dl_error("%s: expected a contiguous (C, H, W) image", op);
    if (img->dtype != DL_DTYPE_U8 && img->dtype != DL_DTYPE_F32)
        return dl_error("%s: images must be uint8 or float32, got %s", op,
                        dl_dtype_name(img->dtype));
    if (img->shape[0] != 1 && img->shape[0] != 3)
        return dl_error("%s: expected 1 or 3 channels, got %lld", op, (long long)img->shape[0]);
    return 0;
}

/* Pillow's ImagingBlend: in1 + alpha * (in2 - in1) in float, clipped and
 * truncated to uint8. */
static inline uint8_t blend8(int d, int x, float a) {
    float t = (float)d + a * (float)(x - d);
    if (t <= 0.0f) return 0;
    if (t >= 255.0f) return 255;
    return (uint8_t)t;
}

/* torchvision's _blend for floats: (r * x + (1 - r) * d).clamp(0, 1) */
static inline float blendf(float d, float x, float r, float r1) {
    float t = r * x + r1 * d;
    return t < 0.0f ? 0.0f : t > 1.0f ? 1.0f : t;
}

static inline float grayf(float r, float g, float b) {
    return 0.2989f * r + 0.587f * g + 0.114f * b;
}

int dl_tf_adjust_brightness_(dl_tensor *img, double f) {
    if (check_color(img, "adjust_brightness")) return -1;
    int64_t n = dl_tensor_numel(img);
    if (img->dtype == DL_DTYPE_U8) {
        uint8_t *p = dl_tensor_data_ptr(img);
        float a = (float)f;
        for (int64_t i = 0; i < n; i++) p[i] = blend8(0, p[i], a);
    } else {
        float *p = dl_tensor_data_ptr(img), r = (float)f, r1 = (float)(1.0 - f);
        for (int64_t i = 0; i < n; i++) p[i] = blendf(0.0f, p[i], r, r1);
    }
    dl_tensor_bump_version(img);
    return 0;
}

int dl_tf_adjust_contrast_(dl_tensor *img, double f) {
    if (check_color(img, "adjust_contrast")) return -1;
    int64_t C = img->shape[0], hw = img->shape[1] * img->shape[2], n = C * hw;
    if (hw == 0) return 0;
    if (img->dtype == DL_DTYPE_U8) {
        uint8_t *p = dl_tensor_data_ptr(img);
        uint64_t sum = 0;
        if (C == 3)
            for (int64_t i = 0; i < hw; i++) sum += dl_rgb_to_l(p[i], p[hw + i], p[2 * hw + i]);
        else
            for (int64_t i = 0; i < hw; i++) sum += p[i];
        int mean = (int)((double)sum / (double)hw + 0.5);
        float a = (float)f;
        for (int64_t i = 0; i < n; i++) p[i] = blend8(mean, p[i], a);
    } else {
        float *p = dl_tensor_data_ptr(img);
        double sum = 0;
        if (C == 3)
            for (int64_t i = 0; i < hw; i++) sum += grayf(p[i], p[hw + i], p[2 * hw + i]);
        else
            for (int64_t i = 0; i < hw; i++) sum += p[i];
        float mean = (float)(sum / (double)hw), r = (float)f, r1 = (float)(1.0 - f);
        for (int64_t i = 0; i < n; i++) p[i] = blendf(mean, p[i], r, r1);
    }
    dl_tensor_bump_version(img);
    return 0;
}

int dl_tf_adjust_saturation_(dl_tensor *img, double f) {
    if (check_color(img, "adjust_saturation")) return -1;
    if (img->shape[0] == 1) return 0;
    int64_t hw = img->shape[1] * img->shape[2];
    if (img->dtype == DL_DTYPE_U8) {
        uint8_t *r = dl_tensor_data_ptr(img), *g = r + hw, *b = g + hw;
        float a = (float)f;
        for (int64_t i = 0; i < hw; i++) {
            int l = dl_rgb_to_l(r[i], g[i], b[i]);
            r[i] = blend8(l, r[i], a);
            g[i] = blend8(l, g[i], a);
            b[i] = blend8(l, b[i], a);
        }
    } else {
        float *r = dl_tensor_data_ptr(img), *g = r + hw, *b = g + hw;
        float k = (float)f, k1 = (float)(1.0 - f);
        for (int64_t i = 0; i < hw; i++) {
            float l = grayf(r[i], g[i], b[i]);
            r[i] = blendf(l, r[i], k, k1);
            g[i] = blendf(l, g[i], k, k1);
            b[i] = blendf(l, b[i], k, k1);
        }
    }
    dl_tensor_bump_version(img);
    return 0;
}

static inline uint8_t clip8i(int v) {
    return (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
}

/* Pillow Convert.c rgb2hsv for one pixel (colorsys-style, float) */
static void rgb_to_hsv8(uint8_t r, uint8_t g, uint8_t b, uint8_t *h, uint8_t *s, uint8_t *v) {
    uint8_t mx = r > g ? (r > b ? r : b) : (g > b ? g : b);
    uint8_t mn = r < g ? (r < b ? r : b) : (g < b ? g : b);
    *v = mx;
    if (mx == mn) {
        *h = 0;
        *s = 0;
        return;
    }
    float cr = (float)(mx - mn);
    float sf = cr / (float)mx;
    float rc = (float)(mx - r) / cr, gc = (float)(mx - g) / cr, bc = (float)(mx - b) / cr;
    float hf;
    if (r == mx)
        hf = bc - gc;
    else if (g == mx)
        hf = 2.0f + rc - bc;
    else
        hf = 4.0f + gc - rc;
    hf = (float)fmod(hf / 6.0 + 1.0, 1.0);
    *h = clip8i((int)(hf * 255.0));
    *s = clip8i((int)(sf * 255.0));
}

/* Pillow Convert.c hsv2rgb for one pixel */
static void hsv_to_rgb8(uint8_t h, uint8_t s, uint8_t v, uint8_t *r, uint8_t *g, uint8_t *b) {
    if (s == 0) {
        *r = *g = *b = v;
        return;
    }
    int i = (int)floor((float)h * 6.0 / 255.0);
    float f = (float)((float)h * 6.0 / 255.0 - (float)i);
    float fs = (float)((float)s / 255.0);
    uint8_t p = clip8i((int)round((float)v * (1.0 - fs)));
    uint8_t q = clip8i((int)round((float)v * (1.0 - fs * f)));
    uint8_t t = clip8i((int)round((float)v * (1.0 - fs * (1.0 - f))));
    switch (i % 6) {
    case 0: *r = v, *g = t, *b = p; break;
    case 1: *r = q, *g = v, *b = p; break;
    case 2: *r = p, *g = v, *b = t; break;
    case 3: *r = p, *g = q, *b = v; break;
    case 4: *r = t, *g = p, *b = v; break;
    default: *r = v, *g = p, *b = q; break;
    }
}

/* torchvision _rgb2hsv / _hsv2rgb on one float pixel, hue shifted by dh */
static void hue_shift_f(float *r, float *g, float *b, float dh) {
    float R = *r, G = *g, B = *b;
    float maxc = fmaxf(R, fmaxf(G, B)), minc = fminf(R, fminf(G, B));
    int eqc = maxc == minc;
    float cr = maxc - minc;
    float ones = 1.0f;
    float s = cr / (eqc ? ones : maxc);
    float crd = eqc ? ones : cr;
    float rc = (maxc - R) / crd, gc = (maxc - G) / crd, bc = (maxc - B) / crd;
    float hr = (maxc == R) ? (bc - gc) : 0.0f;
    float hg = (maxc == G && maxc != R) ? (2.0f + rc - bc) : 0.0f;
    float hb = (maxc != G && maxc != R) ? (4.0f + gc - rc) : 0.0f;
    float h = hr + hg + hb;
    h = fmodf(h / 6.0f + 1.0f, 1.0f);
    h = h + dh;
    h = h - floorf(h); /* torch's % 1.0 (result has the divisor's sign) */
    float v = maxc;
    float i6 = floorf(h * 6.0f);
    float f = h * 6.0f - i6;
    int i = ((int)i6) % 6;
    float p = fminf(fmaxf(v * (1.0f - s), 0.0f), 1.0f);
    float q = fminf(fmaxf(v * (1.0f - s * f), 0.0f), 1.0f);
    float t = fminf(fmaxf(v * (1.0f - s * (1.0f - f)), 0.0f), 1.0f);
    switch (i) {
    case 0: *r = v, *g = t, *b = p; break;
    case 1: *r = q, *g = v, *b = p; break;
    case 2: *r = p, *g = v, *b = t; break;
    case 3: *r = p, *g = q, *b = v; break;
    case 4: *r = t, *g = p, *b = v; break;
    default: *r = v, *g = p, *b = q; break;
    }
}

int dl_tf_adjust_hue_(dl_tensor *img, double hue) {
    if (check_color(img, "adjust_hue")) return -1;
    if (!(hue >= -0.5 && hue <= 0.5))
        return dl_error("adjust_hue: hue factor %g is not in [-0.5, 0.5]", hue);
    if (img->shape[0] == 1) return 0;
    int64_t hw = img->shape[1] * img->shape[2];
    if (img->dtype == DL_DTYPE_U8) {
        uint8_t *r = dl_tensor_data_ptr(img), *g = r + hw, *b = g + hw;
        /* numpy's np.uint8(hue * 255): truncate toward zero, wrap modulo 256 */
        uint8_t shift = (uint8_t)(int)(hue * 255.0);
        for (int64_t i = 0; i < hw; i++) {
            uint8_t h, s, v;
            rgb_to_hsv8(r[i], g[i], b[i], &h, &s, &v);
            h = (uint8_t)(h + shift);
            hsv_to_rgb8(h, s, v, &r[i], &g[i], &b[i]);
        }
    } else {
        float *r = dl_tensor_data_ptr(img), *g = r + hw, *b = g + hw;
        for (int64_t i = 0; i < hw; i++) hue_shift_f(&r[i], &g[i], &b[i], (float)hue);
    }
    dl_tensor_bump_version(img);
    return 0;
}

dl_tensor *dl_tf_grayscale(const dl_tensor *img, int n_out) {
    if (img->ndim != 3 || (img->dtype != DL_DTYPE_U8 && img->dtype != DL_DTYPE_F32)) {
        dl_error("Grayscale: expected a uint8 or float32 (C, H, W) image");
        return NULL;
    }
    if (n_out != 1 && n_out != 3) {
        dl_error("Grayscale: num_output_channels must be 1 or 3, got %d", n_out);
        return NULL;
    }
    int64_t C = img->shape[0], H = img->shape[1], W = img->shape[2];
    if (C != 1 && C != 3) {
        dl_error("Grayscale: expected 1 or 3 channels, got %lld", (long long)C);
        return NULL;
    }
    int64_t shape[3] = {n_out, H, W};
    dl_tensor *out = dl_tensor_empty(3, shape, img->dtype, DL_CPU);
    if (!out) return NULL;
    int64_t sc = img->strides[0], sy = img->strides[1], sx = img->strides[2], hw = H * W;
    if (img->dtype == DL_DTYPE_U8) {
        const uint8_t *s = dl_tensor_data_ptr(img);
        uint8_t *o = out->storage->data;
        for (int64_t y = 0; y < H; y++)
            for (int64_t x = 0; x < W; x++) {
                const uint8_t *p = s + y * sy + x * sx;
                o[y * W + x] = C == 3 ? dl_rgb_to_l(p[0], p[sc], p[2 * sc]) : p[0];
            }
        for (int c = 1; c < n_out; c++) memcpy(o + c * hw, o, (size_t)hw);
    } else {
        const float *s = dl_tensor_data_ptr(img);
        float *o = out->storage->data;
        for (int64_t y = 0; y < H; y++)
            for (int64_t x = 0; x < W; x++) {
                const float *p = s + y * sy + x * sx;
                o[y * W + x] = C == 3 ? grayf(p[0], p[sc], p[2 * sc]) : p[0];
            }
        for (int c = 1; c < n_out; c++) memcpy(o + c * hw, o, (size_t)hw * sizeof(float));
    }
    return out;
}

/* --- conversion ---------------------------------------------------------------- */

void dl_tf_lut_init(float *lut, int c) {
    for (int k = 0; k < c; k++)
        for (int v = 0; v < 256; v++) lut[k * 256 + v] = (float)v / 255.0f;
}

void dl_tf_lut_normalize(float *lut, int c, const float *mean, const float *std) {
    for (int k = 0; k < c; k++)
        for (int v = 0; v < 256; v++) lut[k * 256 + v] = (lut[k * 256 + v] - mean[k]) / std[k];
}

int dl_tf_normalize_(dl_tensor *img, const float *mean, const float *std) {
    if (img->ndim != 3 || img->dtype != DL_DTYPE_F32 || !dl_tensor_is_contiguous(img))
        return dl_error("Normalize: expected a contiguous float32 (C, H, W) image");
    int64_t C = img->shape[0], hw = img->shape[1] * img->shape[2];
    float *p = dl_tensor_data_ptr(img);
    for (int64_t c = 0; c < C; c++) {
        float m = mean[c], s = std[c];
        for (int64_t i = 0; i < hw; i++) p[c * hw + i] = (p[c * hw + i] - m) / s;
    }
    dl_tensor_bump_version(img);
    return 0;
}
