/* pipeline.c - pipeline descriptions and the lazy executor (see pipeline.h).
 *
 * The executor keeps a base image (or, for encoded input, only its size until
 * pixels are needed) plus pending geometry: a window in either the base image
 * or a virtual resized image (a source box resized to rw x rh), and flips.
 * Crops move the window, flips toggle flags, a resize turns the window into
 * the source box of a new virtual image.  Anything that needs pixels (colour,
 * padding, a second resize, the end) "materialises": one resample pass from
 * the base into a new image (or the caller's destination), folding in the
 * pending ToTensor/Normalize table. */
#include "pipeline.h"
#include "codec.h"
#include "core/error.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char *const tf_names[DL_TF_KIND_COUNT + 1] = {"Resize",
                                                           "CenterCrop",
                                                           "RandomCrop",
                                                           "RandomResizedCrop",
                                                           "RandomHorizontalFlip",
                                                           "RandomVerticalFlip",
                                                           "ColorJitter",
                                                           "Grayscale",
                                                           "ToTensor",
                                                           "Normalize",
                                                           "Pad",
                                                           "crop",
                                                           "resized_crop",
                                                           NULL};

const char *dl_tf_name(dl_tf_kind k) {
    return (unsigned)k < DL_TF_KIND_COUNT ? tf_names[k] : "transform";
}

const char *const *dl_tf_names(void) {
    return tf_names;
}

/* --- descriptions ------------------------------------------------------------ */

static int check_step(const dl_tf_step *s) {
    const char *nm = dl_tf_name(s->kind);
    switch (s->kind) {
    case DL_TF_RESIZE:
        if (s->nsize < 1 || s->nsize > 2 || s->size[0] < 1 || (s->nsize == 2 && s->size[1] < 1))
            return dl_error("%s: size must be positive", nm);
        if (s->max_size && (s->nsize != 1 || s->max_size <= s->size[0]))
            return dl_error("%s: max_size (%lld) must be greater than size (%lld) and size a "
                            "single number",
                            nm, (long long)s->max_size, (long long)s->size[0]);
        break;
    case DL_TF_CENTER_CROP:
    case DL_TF_RANDOM_CROP:
    case DL_TF_RANDOM_RESIZED_CROP:
    case DL_TF_RESIZED_CROP:
        if (s->size[0] < 1 || s->size[1] < 1)
            return dl_error("%s: size must be positive, got (%lld, %lld)", nm,
                            (long long)s->size[0], (long long)s->size[1]);
        break;
    default: break;
    }
    if (s->kind == DL_TF_RANDOM_RESIZED_CROP) {
        if (!(s->scale[0] > 0 && s->scale[0] <= s->scale[1]))
            return dl_error("%s: scale must satisfy 0 < min <= max, got (%g, %g)", nm, s->scale[0],
                            s->scale[1]);
        if (!(s->ratio[0] > 0 && s->ratio[0] <= s->ratio[1]))
            return dl_error("%s: ratio must satisfy 0 < min <= max, got (%g, %g)", nm, s->ratio[0],
                            s->ratio[1]);
    }
    if ((s->kind == DL_TF_RANDOM_HFLIP || s->kind == DL_TF_RANDOM_VFLIP) &&
        !(s->p >= 0 && s->p <= 1))
        return dl_error("%s: p must be in [0, 1], got %g", nm, s->p);
    if (s->kind == DL_TF_COLOR_JITTER) {
        static const char *const jn[4] = {"brightness", "contrast", "saturation", "hue"};
        for (int i = 0; i < 4; i++) {
            if (!s->has_jitter[i]) continue;
            double lo = s->jitter[i][0], hi = s->jitter[i][1];
            double blo = i == 3 ? -0.5 : 0.0, bhi = i == 3 ? 0.5 : INFINITY;
            if (!(blo <= lo && lo <= hi && hi <= bhi))
                return dl_error("%s: %s values should be between (%g, %g), got (%g, %g)", nm, jn[i],
                                blo, bhi, lo, hi);
        }
    }
    if (s->kind == DL_TF_GRAYSCALE && s->gray_out != 1 && s->gray_out != 3)
        return dl_error("%s: num_output_channels must be 1 or 3, got %d", nm, s->gray_out);
    if (s->kind == DL_TF_NORMALIZE) {
        if (s->nnorm < 1 || s->nnorm > DL_TF_MAX_CHANNELS)
            return dl_error("%s: mean and std need 1 to %d values", nm, DL_TF_MAX_CHANNELS);
        for (int i = 0; i < s->nnorm; i++)
            if (s->std[i] == 0.0f)
                return dl_error("%s: std evaluated to zero (channel %d), leading to division by "
                                "zero",
                                nm, i + 1);
    }
    if (s->kind == DL_TF_PAD || (s->kind == DL_TF_RANDOM_CROP && s->has_padding))
        for (int i = 0; i < 4; i++)
            if (s->padding[i] < 0) return dl_error("%s: padding must be non-negative", nm);
    if (s->kind == DL_TF_CROP || s->kind == DL_TF_RESIZED_CROP)
        if (s->crop[2] < 1 || s->crop[3] < 1)
            return dl_error("%s: crop height and width must be positive", nm);
    return 0;
}

dl_pipeline *dl_pipeline_new(int n, const dl_tf_step *steps) {
    for (int i = 0; i < n; i++)
        if (check_step(&steps[i])) return NULL;
    dl_pipeline *p = malloc(sizeof *p + sizeof(dl_tf_step) * (size_t)(n > 0 ? n : 1));
    if (!p) {
        dl_error("Compose: out of memory");
        return NULL;
    }
    p->refcount = 1;
    p->n = n;
    if (n) memcpy(p->steps, steps, sizeof(dl_tf_step) * (size_t)n);
    return p;
}

dl_pipeline *dl_pipeline_retain(dl_pipeline *p) {
    if (p) __atomic_add_fetch(&p->refcount, 1, __ATOMIC_RELAXED);
    return p;
}

void dl_pipeline_release(dl_pipeline *p) {
    if (p && __atomic_sub_fetch(&p->refcount, 1, __ATOMIC_ACQ_REL) == 0) free(p);
}

/* --- parameter rules ---------------------------------------------------------- */

void dl_tf_resize_size(const dl_tf_step *s, int64_t h, int64_t w, int64_t *oh, int64_t *ow) {
    if (s->nsize == 2) {
        *oh = s->size[0];
        *ow = s->size[1];
        return;
    }
    int64_t shrt = w <= h ? w : h, lng = w <= h ? h : w;
    int64_t ns = s->size[0], nl = (int64_t)((double)ns * (double)lng / (double)shrt);
    if (s->max_size && nl > s->max_size) {
        ns = (int64_t)((double)s->max_size * (double)ns / (double)nl);
        nl = s->max_size;
    }
    if (w <= h)
        *ow = ns, *oh = nl;
    else
        *ow = nl, *oh = ns;
}

void dl_tf_rrc_params(int64_t h, int64_t w, const double scale[2], const double ratio[2],
                      dl_sample_rng *rng, int64_t out[4]) {
    double area = (double)h * (double)w;
    double lr0 = log(ratio[0]), lr1 = log(ratio[1]);
    for (int t = 0; t < 10; t++) {
        double target = area * (scale[0] + (scale[1] - scale[0]) * dl_sample_rng_uniform(rng));
        double ar = exp(lr0 + (lr1 - lr0) * dl_sample_rng_uniform(rng));
        int64_t cw = (int64_t)rint(sqrt(target * ar)), ch = (int64_t)rint(sqrt(target / ar));
        if (cw > 0 && cw <= w && ch > 0 && ch <= h) {
            out[0] = (int64_t)(dl_sample_rng_uniform(rng) * (double)(h - ch + 1));
            out[1] = (int64_t)(dl_sample_rng_uniform(rng) * (double)(w - cw + 1));
            out[2] = ch;
            out[3] = cw;
            return;
        }
    }
    double in_ratio = (double)w / (double)h;
    int64_t cw, ch;
    if (in_ratio < ratio[0]) {
        cw = w;
        ch = (int64_t)rint((double)cw / ratio[0]);
    } else if (in_ratio > ratio[1]) {
        ch = h;
        cw = (int64_t)rint((double)ch * ratio[1]);
    } else {
        cw = w;
        ch = h;
    }
    out[0] = (h - ch) / 2;
    out[1] = (w - cw) / 2;
    out[2] = ch;
    out[3] = cw;
}

/* --- the executor --------------------------------------------------------------- */

typedef struct {
    dl_sample_rng *rng;
    dl_tensor *img; /* base image, (C, H, W); NULL until an encoded source is decoded */
    int owned;      /* img's pixels are ours to change in place */
    const uint8_t *enc;
    size_t enc_n;
    const char *name;
    int64_t C, H, W;        /* base size (the full size for a not yet decoded source) */
    int64_t wx, wy, ww, wh; /* window, unflipped, in base or virtual-image pixels */
    int resized;
    double box[4]; /* source box of the virtual image, in base pixels */
    int64_t rw, rh;
    dl_interp interp;
    int hflip, vflip;
    /* base pixel (x, y) is img pixel (x * fx - orgx, y * fy - orgy): a
     * DCT-scaled and/or partial decode of the encoded source */
    double fx, fy;
    int64_t orgx, orgy;
    int conv; /* ToTensor pending: uint8 -> float through lut */
    float lut[DL_TF_MAX_CHANNELS * 256];
} exec;

static int is_float(const exec *e) {
    return e->img && e->img->dtype == DL_DTYPE_F32;
}

static void set_base(exec *e, dl_tensor *img, int owned) {
    dl_tensor_release(e->img);
    e->img = img;
    e->owned = owned;
    e->C = img->shape[0];
    e->H = img->shape[1];
    e->W = img->shape[2];
    e->wx = e->wy = 0;
    e->ww = e->W;
    e->wh = e->H;
    e->resized = 0;
    e->hflip = e->vflip = 0;
    e->fx = e->fy = 1.0;
    e->orgx = e->orgy = 0;
}

static void free_deleter(void *data, void *ctx) {
    (void)ctx;
    free(data);
}

/* Decodes (at least) the region [x0, x1) x [y0, y1) of the encoded source at
 * 1/denom scale into an (C, H, W) view of the packed (H, W, C) pixels. */
static int decode_source(exec *e, int denom, int64_t x0, int64_t y0, int64_t x1, int64_t y1) {
    dl_image im;
    int ox, oy;
    if (dl_image_decode_region(e->enc, e->enc_n, e->name, (int)e->C, denom, (int)x0, (int)y0,
                               (int)x1, (int)y1, &im, &ox, &oy))
        return -1;
    dl_storage *st =
        dl_storage_wrap(im.data, (size_t)im.w * im.h * im.c, DL_CPU, free_deleter, NULL);
    if (!st) {
        free(im.data);
        return -1;
    }
    int64_t shape[3] = {im.c, im.h, im.w}, strides[3] = {1, (int64_t)im.w * im.c, im.c};
    dl_tensor *t = dl_tensor_new_view(st, 0, 3, shape, strides, DL_DTYPE_U8);
    dl_storage_release(st);
    if (!t) return -1;
    e->img = t;
    e->owned = 1;
    e->fx = e->fy = 1.0 / denom; /* a scaled pixel covers denom x denom full ones */
    e->orgx = ox;
    e->orgy = oy;
    return 0;
}

/* The lazy source, decoded just where the pending geometry reads. */
static int decode_needed(exec *e) {
    int denom = 1;
    if (e->resized) {
        double sx = (e->box[2] - e->box[0]) / (double)e->rw;
        double sy = (e->box[3] - e->box[1]) / (double)e->rh;
        if (sx >= 2.0 && sy >= 2.0)
            denom = dl_image_pick_scale((int)e->W, (int)e->H, (double)e->W / sx, (double)e->H / sy);
        double f = 1.0 / denom;
        return decode_source(e, denom, (int64_t)floor(e->box[0] * f), (int64_t)floor(e->box[1] * f),
                             (int64_t)ceil(e->box[2] * f), (int64_t)ceil(e->box[3] * f));
    }
    return decode_source(e, 1, e->wx, e->wy, e->wx + e->ww, e->wy + e->wh);
}

static int geometry_pending(const exec *e) {
    return e->resized || e->hflip || e->vflip || e->wx || e->wy || e->ww != e->W || e->wh != e->H;
}

/* Carries out the pending geometry (and, with to_float, the pending
 * ToTensor/Normalize table).  dst: where to write (NULL: a new tensor, or a
 * view of the base when nothing needs computing and copy is 0). */
static int materialise(exec *e, dl_tensor *dst, int to_float, int copy) {
    if (!e->img && decode_needed(e)) return -1;
    int apply_conv = to_float && e->conv && e->img->dtype == DL_DTYPE_U8;
    if (!dst && !copy && !apply_conv && !e->resized && !e->hflip && !e->vflip) {
        if (!geometry_pending(e)) return 0;
        dl_tensor *v1 = dl_tensor_narrow(e->img, 1, e->wy - e->orgy, e->wh);
        dl_tensor *v2 = v1 ? dl_tensor_narrow(v1, 2, e->wx - e->orgx, e->ww) : NULL;
        dl_tensor_release(v1);
        if (!v2) return -1;
        set_base(e, v2, e->owned);
        return 0;
    }
    dl_dtype dt = (e->img->dtype == DL_DTYPE_F32 || apply_conv) ? DL_DTYPE_F32 : DL_DTYPE_U8;
    int64_t shape[3] = {e->C, e->wh, e->ww};
    dl_tensor *out = dst ? dl_tensor_retain(dst) : dl_tensor_empty(3, shape, dt, DL_CPU);
    if (!out) return -1;
    if (out->dtype != dt || out->ndim != 3 || out->shape[0] != e->C || out->shape[1] != e->wh ||
        out->shape[2] != e->ww) {
        dl_tensor_release(out);
        return dl_error("transform: internal error: destination does not match the result");
    }
    int64_t iw = e->img->shape[2], ih = e->img->shape[1];
    dl_tensor *src = dl_tensor_retain(e->img);
    dl_resample_geom g;
    memset(&g, 0, sizeof g);
    g.interp = e->interp;
    g.hflip = e->hflip;
    g.vflip = e->vflip;
    g.ox = e->wx;
    g.oy = e->wy;
    if (e->resized) {
        g.box[0] = e->box[0] * e->fx - (double)e->orgx;
        g.box[1] = e->box[1] * e->fy - (double)e->orgy;
        g.box[2] = e->box[2] * e->fx - (double)e->orgx;
        g.box[3] = e->box[3] * e->fy - (double)e->orgy;
        if (g.box[0] < 0) g.box[0] = 0;
        if (g.box[1] < 0) g.box[1] = 0;
        if (g.box[2] > (double)iw) g.box[2] = (double)iw;
        if (g.box[3] > (double)ih) g.box[3] = (double)ih;
        /* crop, then resize: the filter never reads outside the box's pixels */
        int64_t x0 = (int64_t)floor(g.box[0]), y0 = (int64_t)floor(g.box[1]);
        int64_t x1 = (int64_t)ceil(g.box[2]), y1 = (int64_t)ceil(g.box[3]);
        dl_tensor *a = dl_tensor_narrow(src, 1, y0, y1 - y0);
        dl_tensor *c = a ? dl_tensor_narrow(a, 2, x0, x1 - x0) : NULL;
        dl_tensor_release(a);
        dl_tensor_release(src);
        if (!c) {
            dl_tensor_release(out);
            return -1;
        }
        src = c;
        g.box[0] -= (double)x0;
        g.box[2] -= (double)x0;
        g.box[1] -= (double)y0;
        g.box[3] -= (double)y0;
        g.rw = e->rw;
        g.rh = e->rh;
    } else {
        g.box[2] = (double)iw;
        g.box[3] = (double)ih;
        g.rw = iw;
        g.rh = ih;
        g.ox = e->wx - e->orgx;
        g.oy = e->wy - e->orgy;
    }
    int rc = dl_tf_resample_into(out, src, &g, apply_conv ? e->lut : NULL);
    dl_tensor_release(src);
    if (rc) {
        dl_tensor_release(out);
        return -1;
    }
    if (apply_conv) e->conv = 0;
    set_base(e, out, 1);
    return 0;
}

/* A contiguous image whose pixels may be changed in place (for colour ops). */
static int own_pixels(exec *e) {
    if (materialise(e, NULL, e->conv, 0)) return -1;
    if (!e->owned || !dl_tensor_is_contiguous(e->img)) {
        dl_tensor *c = dl_tensor_clone(e->img);
        if (!c) return -1;
        set_base(e, c, 1);
    }
    return 0;
}

static void crop_window(exec *e, int64_t top, int64_t left, int64_t h, int64_t w) {
    if (e->hflip) left = e->ww - left - w;
    if (e->vflip) top = e->wh - top - h;
    e->wx += left;
    e->wy += top;
    e->ww = w;
    e->wh = h;
}

static int pad(exec *e, int64_t l, int64_t t, int64_t r, int64_t b, dl_pad_mode mode,
               const double *fill) {
    if (materialise(e, NULL, e->conv, 0)) return -1;
    double f[DL_TF_MAX_CHANNELS] = {0};
    if (fill)
        for (int i = 0; i < DL_TF_MAX_CHANNELS; i++) f[i] = fill[i];
    dl_tensor *p = dl_tf_pad(e->img, l, t, r, b, mode, f);
    if (!p) return -1;
    set_base(e, p, 1);
    return 0;
}

/* torchvision's F.crop: a box partly outside the image is padded with zeros. */
static int crop_any(exec *e, int64_t top, int64_t left, int64_t h, int64_t w) {
    int64_t pl = left < 0 ? -left : 0, pt = top < 0 ? -top : 0;
    int64_t pr = left + w > e->ww ? left + w - e->ww : 0,
            pb = top + h > e->wh ? top + h - e->wh : 0;
    if (pl || pt || pr || pb) {
        if (pad(e, pl, pt, pr, pb, DL_PAD_CONSTANT, NULL)) return -1;
        top += pt;
        left += pl;
    }
    crop_window(e, top, left, h, w);
    return 0;
}

static int resize_to(exec *e, int64_t oh, int64_t ow, dl_interp interp) {
    if (oh == e->wh && ow == e->ww) return 0; /* torchvision returns the image unchanged */
    if (e->conv || e->resized) {
        /* after ToTensor a resize works on float pixels; two resizes don't fuse */
        if (materialise(e, NULL, e->conv, 0)) return -1;
    }
    e->box[0] = (double)e->wx;
    e->box[1] = (double)e->wy;
    e->box[2] = (double)(e->wx + e->ww);
    e->box[3] = (double)(e->wy + e->wh);
    e->rw = ow;
    e->rh = oh;
    e->wx = e->wy = 0;
    e->ww = ow;
    e->wh = oh;
    e->resized = 1;
    e->interp = interp;
    return 0;
}

static int jitter(exec *e, const dl_tf_step *s) {
    int perm[4] = {0, 1, 2, 3};
    for (int i = 3; i > 0; i--) { /* Fisher-Yates */
        int j = (int)(dl_sample_rng_uniform(e->rng) * (double)(i + 1));
        int t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    double f[4] = {0};
    for (int k = 0; k < 4; k++)
        if (s->has_jitter[k])
            f[k] = s->jitter[k][0] +
                   (s->jitter[k][1] - s->jitter[k][0]) * dl_sample_rng_uniform(e->rng);
    int any = s->has_jitter[0] || s->has_jitter[1] || s->has_jitter[2] || s->has_jitter[3];
    if (!any) return 0;
    if (own_pixels(e)) return -1;
    for (int i = 0; i < 4; i++) {
        int k = perm[i];
        if (!s->has_jitter[k]) continue;
        int rc = k == 0   ? dl_tf_adjust_brightness_(e->img, f[k])
                 : k == 1 ? dl_tf_adjust_contrast_(e->img, f[k])
                 : k == 2 ? dl_tf_adjust_saturation_(e->img, f[k])
                          : dl_tf_adjust_hue_(e->img, f[k]);
        if (rc) return -1;
    }
    return 0;
}

static int run_step(exec *e, const dl_tf_step *s) {
    const char *nm = dl_tf_name(s->kind);
    switch (s->kind) {
    case DL_TF_RESIZE: {
        int64_t oh, ow;
        dl_tf_resize_size(s, e->wh, e->ww, &oh, &ow);
        if (oh < 1 || ow < 1)
            return dl_error("Resize: output size %lldx%lld for a %lldx%lld image is empty",
                            (long long)ow, (long long)oh, (long long)e->ww, (long long)e->wh);
        return resize_to(e, oh, ow, s->interp);
    }
    case DL_TF_CENTER_CROP: {
        int64_t th = s->size[0], tw = s->size[1];
        if (tw > e->ww || th > e->wh) {
            int64_t l = tw > e->ww ? (tw - e->ww) / 2 : 0, t = th > e->wh ? (th - e->wh) / 2 : 0;
            int64_t r = tw > e->ww ? (tw - e->ww + 1) / 2 : 0;
            int64_t b = th > e->wh ? (th - e->wh + 1) / 2 : 0;
            if (pad(e, l, t, r, b, DL_PAD_CONSTANT, NULL)) return -1;
            if (e->ww == tw && e->wh == th) return 0;
        }
        /* int(round((H - h) / 2.0)): Python rounds halves to even */
        int64_t top = (int64_t)rint((double)(e->wh - th) / 2.0);
        int64_t left = (int64_t)rint((double)(e->ww - tw) / 2.0);
        crop_window(e, top, left, th, tw);
        return 0;
    }
    case DL_TF_RANDOM_CROP: {
        int64_t th = s->size[0], tw = s->size[1];
        if (s->has_padding && (s->padding[0] || s->padding[1] || s->padding[2] || s->padding[3]) &&
            pad(e, s->padding[0], s->padding[1], s->padding[2], s->padding[3], s->pad_mode,
                s->fill))
            return -1;
        if (s->pad_if_needed && e->ww < tw &&
            pad(e, tw - e->ww, 0, tw - e->ww, 0, s->pad_mode, s->fill))
            return -1;
        if (s->pad_if_needed && e->wh < th &&
            pad(e, 0, th - e->wh, 0, th - e->wh, s->pad_mode, s->fill))
            return -1;
        if (e->wh < th || e->ww < tw)
            return dl_error("RandomCrop: required crop size (%lld, %lld) is larger than the input "
                            "image size (%lld, %lld)",
                            (long long)th, (long long)tw, (long long)e->wh, (long long)e->ww);
        if (e->wh == th && e->ww == tw) return 0;
        int64_t i = (int64_t)(dl_sample_rng_uniform(e->rng) * (double)(e->wh - th + 1));
        int64_t j = (int64_t)(dl_sample_rng_uniform(e->rng) * (double)(e->ww - tw + 1));
        crop_window(e, i, j, th, tw);
        return 0;
    }
    case DL_TF_RANDOM_RESIZED_CROP: {
        int64_t b[4];
        if (e->wh < 1 || e->ww < 1) return dl_error("%s: empty input image", nm);
        dl_tf_rrc_params(e->wh, e->ww, s->scale, s->ratio, e->rng, b);
        crop_window(e, b[0], b[1], b[2], b[3]);
        return resize_to(e, s->size[0], s->size[1], s->interp);
    }
    case DL_TF_CROP: return crop_any(e, s->crop[0], s->crop[1], s->crop[2], s->crop[3]);
    case DL_TF_RESIZED_CROP:
        if (crop_any(e, s->crop[0], s->crop[1], s->crop[2], s->crop[3])) return -1;
        return resize_to(e, s->size[0], s->size[1], s->interp);
    case DL_TF_RANDOM_HFLIP:
        if (dl_sample_rng_uniform(e->rng) < s->p) e->hflip ^= 1;
        return 0;
    case DL_TF_RANDOM_VFLIP:
        if (dl_sample_rng_uniform(e->rng) < s->p) e->vflip ^= 1;
        return 0;
    case DL_TF_PAD:
        return pad(e, s->padding[0], s->padding[1], s->padding[2], s->padding[3], s->pad_mode,
                   s->fill);
    case DL_TF_COLOR_JITTER:
        if (e->C != 3 && e->C != 1) return dl_error("%s: expected 1 or 3 channels", nm);
        return jitter(e, s);
    case DL_TF_GRAYSCALE: {
        if (own_pixels(e)) return -1;
        dl_tensor *g = dl_tf_grayscale(e->img, s->gray_out);
        if (!g) return -1;
        set_base(e, g, 1);
        return 0;
    }
    case DL_TF_TO_TENSOR:
        if (is_float(e) || e->conv)
            return dl_error("ToTensor: expected a uint8 image (C x H x W), got a float image");
        if (e->C > DL_TF_MAX_CHANNELS)
            return dl_error("ToTensor: at most %d channels, got %lld", DL_TF_MAX_CHANNELS,
                            (long long)e->C);
        e->conv = 1;
        dl_tf_lut_init(e->lut, (int)e->C);
        return 0;
    case DL_TF_NORMALIZE: {
        if (s->nnorm != 1 && s->nnorm != e->C)
            return dl_error("Normalize: %d means/stds for an image with %lld channels", s->nnorm,
                            (long long)e->C);
        float m[DL_TF_MAX_CHANNELS], sd[DL_TF_MAX_CHANNELS];
        for (int c = 0; c < e->C && c < DL_TF_MAX_CHANNELS; c++) {
            m[c] = s->mean[s->nnorm == 1 ? 0 : c];
            sd[c] = s->std[s->nnorm == 1 ? 0 : c];
        }
        if (e->conv) {
            dl_tf_lut_normalize(e->lut, (int)e->C, m, sd);
            return 0;
        }
        if (!is_float(e))
            return dl_error("Normalize: expected a float image; put ToTensor before Normalize");
        if (e->C > DL_TF_MAX_CHANNELS)
            return dl_error("Normalize: at most %d channels", DL_TF_MAX_CHANNELS);
        if (own_pixels(e)) return -1;
        return dl_tf_normalize_(e->img, m, sd);
    }
    default: return dl_error("transform: unknown step %d", (int)s->kind);
    }
}

static int run(const dl_pipeline *p, exec *e, dl_pipeline_dst_fn dst_fn, void *ctx,
               dl_tensor **out) {
    for (int i = 0; p && i < p->n; i++) /* p NULL: no transforms */
        if (run_step(e, &p->steps[i])) return -1;
    int to_float = e->conv || is_float(e);
    int64_t shape[3] = {e->C, e->wh, e->ww};
    dl_tensor *dst = NULL;
    if (dst_fn) {
        dst = dst_fn(ctx, shape, to_float ? DL_DTYPE_F32 : DL_DTYPE_U8);
        if (!dst) return -1;
    }
    int rc = materialise(e, dst, 1, 1);
    dl_tensor_release(dst);
    if (rc) return -1;
    *out = dl_tensor_retain(e->img);
    return 0;
}

int dl_pipeline_run_tensor(const dl_pipeline *p, dl_tensor *img, dl_sample_rng *rng,
                           dl_pipeline_dst_fn dst_fn, void *ctx, dl_tensor **out) {
    *out = NULL;
    if (img->ndim != 3)
        return dl_error("transform: expected an image of shape (C, H, W), got %d dims", img->ndim);
    if (img->dtype != DL_DTYPE_U8 && img->dtype != DL_DTYPE_F32)
        return dl_error("transform: images must be uint8 or float32 tensors, got %s",
                        dl_dtype_name(img->dtype));
    if (dl_tensor_device(img).type != DL_DEVICE_CPU)
        return dl_error("transform: images must be on the CPU");
    exec e;
    memset(&e, 0, sizeof e);
    e.rng = rng;
    e.interp = DL_INTERP_BILINEAR;
    set_base(&e, dl_tensor_retain(img), 0);
    int rc = run(p, &e, dst_fn, ctx, out);
    dl_tensor_release(e.img);
    return rc;
}

int dl_pipeline_run_encoded(const dl_pipeline *p, const uint8_t *buf, size_t n, const char *name,
                            int channels, dl_sample_rng *rng, dl_pipeline_dst_fn dst_fn, void *ctx,
                            dl_tensor **out) {
    *out = NULL;
    dl_image_info info;
    if (dl_image_probe(buf, n, name, &info)) return -1;
    exec e;
    memset(&e, 0, sizeof e);
    e.rng = rng;
    e.interp = DL_INTERP_BILINEAR;
    e.enc = buf;
    e.enc_n = n;
    e.name = name;
    e.C = channels;
    e.W = e.ww = info.w;
    e.H = e.wh = info.h;
    int rc = run(p, &e, dst_fn, ctx, out);
    dl_tensor_release(e.img);
    return rc;
}
