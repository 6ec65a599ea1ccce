/* l_image.c - bindings for images and transforms: the dl.image table (load,
 * decode, save, encode, info, pixel limit) and the hidden dl._transforms
 * table that lua/dl/transforms.lua builds on (pipelines of C transform steps,
 * RandomResizedCrop parameters, the functional colour adjustments).
 *
 * Images are uint8 (C, H, W) tensors as Lua sees them; the codecs work on
 * packed (H, W, C) buffers and the conversion happens here.  Step tables come
 * from transforms.lua already normalised (torchvision's argument forms are
 * expanded there); crop boxes arrive 1-based and are converted here. */
#include "l_bind.h"
#include "core/rng.h"
#include "io/codec.h"
#include "io/pipeline.h"

#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define DL_PIPELINE_MT "dl.Pipeline"

/* --- tensors <-> packed images -------------------------------------------------- */

/* A uint8 (C, H, W) tensor (contiguous) from a packed image; frees im.data. */
static dl_tensor *tensor_from_image(dl_image *im) {
    int64_t shape[3] = {im->c, im->h, im->w};
    dl_tensor *t = dl_tensor_empty(3, shape, DL_DTYPE_U8, DL_CPU);
    if (t) {
        uint8_t *o = t->storage->data;
        size_t hw = (size_t)im->w * (size_t)im->h;
        if (im->c == 1)
            memcpy(o, im->data, hw);
        else
            for (size_t i = 0; i < hw; i++)
                for (int c = 0; c < im->c; c++) o[(size_t)c * hw + i] = im->data[i * im->c + c];
    }
    dl_image_free(im);
    return t;
}

/* A packed image from a (C, H, W) or (H, W) uint8/float tensor. */
static int image_from_tensor(lua_State *L, dl_tensor *t, const char *op, dl_image *im) {
    int64_t C, H, W;
    if (t->ndim == 2)
        C = 1, H = t->shape[0], W = t->shape[1];
    else if (t->ndim == 3)
        C = t->shape[0], H = t->shape[1], W = t->shape[2];
    else
        return luaL_error(L, "%s: expected a (C, H, W) or (H, W) image, got %d dims", op, t->ndim);
    if (C != 1 && C != 3 && C != 4)
        return luaL_error(L, "%s: expected 1, 3 or 4 channels, got %d", op, (int)C);
    if (H < 1 || W < 1 || H > 65535 || W > 65535)
        return luaL_error(L, "%s: image size %dx%d is not encodable", op, (int)W, (int)H);
    if (t->dtype != DL_DTYPE_U8 && !dl_dtype_is_floating(t->dtype))
        return luaL_error(L, "%s: expected a uint8 or float image, got %s", op,
                          dl_dtype_name(t->dtype));
    if (dl_tensor_device(t).type != DL_DEVICE_CPU)
        return luaL_error(L, "%s: the image must be on the CPU", op);
    im->c = (int)C, im->h = (int)H, im->w = (int)W;
    im->data = malloc((size_t)(C * H * W));
    if (!im->data) return luaL_error(L, "%s: out of memory", op);
    const char *base = dl_tensor_data_ptr(t);
    size_t es = dl_dtype_size(t->dtype);
    int64_t sc = t->ndim == 3 ? t->strides[0] : 0, sy = t->strides[t->ndim - 2],
            sx = t->strides[t->ndim - 1];
    for (int64_t y = 0; y < H; y++)
        for (int64_t x = 0; x < W; x++)
            for (int64_t c = 0; c < C; c++) {
                const char *p = base + (c * sc + y * sy + x * sx) * (int64_t)es;
                uint8_t v;
                if (t->dtype == DL_DTYPE_U8)
                    v = *(const uint8_t *)p;
                else {
                    /* torchvision's save_image: mul(255).add_(0.5).clamp_(0, 255) */
                    double f = dl_load_f64(p, t->dtype) * 255.0 + 0.5;
                    v = (uint8_t)(f >= 255.0 ? 255 : f > 0 ? (int)f : 0);
                }
                im->data[(y * W + x) * C + c] = v;
            }
    return 0;
}

static int check_mode(lua_State *L, int idx, const char *op) {
    static const char *const keys[] = {"mode", NULL};
    dlL_checkoptions(L, idx, op, keys);
    int ty = dlL_optfield(L, idx, "mode");
    int channels = 3;
    if (ty == LUA_TSTRING) {
        const char *m = lua_tostring(L, -1);
        if (strcmp(m, "RGB") == 0)
            channels = 3;
        else if (strcmp(m, "L") == 0)
            channels = 1;
        else
            luaL_error(L, "%s: mode must be \"RGB\" or \"L\", got \"%s\"", op, m);
    } else if (ty != LUA_TNIL) {
        luaL_error(L, "%s: mode must be a string", op);
    }
    lua_pop(L, 1);
    return channels;
}

static int decode_push(lua_State *L, const uint8_t *buf, size_t n, const char *name, int channels) {
    dl_image im;
    if (dl_image_decode(buf, n, name, channels, 1, &im, NULL)) return dlL_fail(L);
    return dlL_pushtensor(L, tensor_from_image(&im));
}

static int l_load(lua_State *L) {
    const char *path = luaL_checkstring(L, 1);
    int channels = check_mode(L, 2, "image.load");
    uint8_t *buf;
    size_t n;
    if (dl_file_read(path, &buf, &n)) return dlL_fail(L);
    dl_image im;
    int rc = dl_image_decode(buf, n, path, channels, 1, &im, NULL);
    free(buf);
    if (rc) return dlL_fail(L);
    return dlL_pushtensor(L, tensor_from_image(&im));
}

static int l_decode(lua_State *L) {
    size_t n;
    const char *s = luaL_checklstring(L, 1, &n);
    int channels = check_mode(L, 2, "image.decode");
    return decode_push(L, (const uint8_t *)s, n, "<bytes>", channels);
}

static int ends_with_ci(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    if (m > n) return 0;
    for (size_t i = 0; i < m; i++)
        if (tolower((unsigned char)s[n - m + i]) != suffix[i]) return 0;
    return 1;
}

/* format: 0 png, 1 jpeg */
static int encode(lua_State *L, dl_tensor *t, int format, int opts, const char *op, uint8_t **buf,
                  size_t *n) {
    static const char *const keys[] = {"quality", NULL};
    dlL_checkoptions(L, opts, op, keys);
    lua_Integer q = dlL_optinteger(L, opts, "quality", 75);
    if (format == 1 && (q < 1 || q > 100))
        return luaL_error(L, "%s: quality must be in 1..100, got %d", op, (int)q);
    dl_image im;
    image_from_tensor(L, t, op, &im);
    if (format == 1 && im.c == 4) {
        dl_image_free(&im);
        return luaL_error(L, "%s: JPEG cannot store 4 channels (use PNG)", op);
    }
    int rc =
        format == 0 ? dl_image_encode_png(&im, buf, n) : dl_image_encode_jpeg(&im, (int)q, buf, n);
    dl_image_free(&im);
    return dlL_done(L, rc);
}

static int l_save(lua_State *L) {
    dl_tensor *t = dlL_checktensor(L, 1);
    const char *path = luaL_checkstring(L, 2);
    int format;
    if (ends_with_ci(path, ".png"))
        format = 0;
    else if (ends_with_ci(path, ".jpg") || ends_with_ci(path, ".jpeg"))
        format = 1;
    else
        return luaL_error(L, "image.save: cannot tell the format of '%s' (use .png, .jpg or .jpeg)",
                          path);
    uint8_t *buf;
    size_t n;
    encode(L, t, format, 3, "image.save", &buf, &n);
    int rc = dl_file_write(path, buf, n);
    free(buf);
    return dlL_done(L, rc);
}

static int l_encode(lua_State *L) {
    dl_tensor *t = dlL_checktensor(L, 1);
    const char *fmt = luaL_checkstring(L, 2);
    int format;
    if (strcmp(fmt, "png") == 0)
        format = 0;
    else if (strcmp(fmt, "jpeg") == 0 || strcmp(fmt, "jpg") == 0)
        format = 1;
    else
        return luaL_error(L, "image.encode: format must be \"png\" or \"jpeg\", got \"%s\"", fmt);
    uint8_t *buf;
    size_t n;
    encode(L, t, format, 3, "image.encode", &buf, &n);
    lua_pushlstring(L, (const char *)buf, n);
    free(buf);
    return 1;
}

static int l_info(lua_State *L) {
    const char *path = luaL_checkstring(L, 1);
    uint8_t *buf;
    size_t n;
    if (dl_file_read(path, &buf, &n)) return dlL_fail(L);
    dl_image_info info;
    int rc = dl_image_probe(buf, n, path, &info);
    free(buf);
    if (rc) return dlL_fail(L);
    lua_createtable(L, 0, 4);
    lua_pushstring(L, info.format == DL_IMAGE_JPEG ? "jpeg" : "png");
    lua_setfield(L, -2, "format");
    lua_pushinteger(L, info.w);
    lua_setfield(L, -2, "width");
    lua_pushinteger(L, info.h);
    lua_setfield(L, -2, "height");
    lua_pushinteger(L, info.components);
    lua_setfield(L, -2, "channels");
    return 1;
}

static int l_set_max_pixels(lua_State *L) {
    if (lua_isnoneornil(L, 1) || (lua_isboolean(L, 1) && !lua_toboolean(L, 1))) {
        dl_image_set_max_pixels(0);
        return 0;
    }
    lua_Integer n = luaL_checkinteger(L, 1);
    if (n < 1)
        return luaL_argerror(L, 1, "image.set_max_pixels: limit must be positive (nil: none)");
    dl_image_set_max_pixels((int64_t)n);
    return 0;
}

static int l_get_max_pixels(lua_State *L) {
    int64_t n = dl_image_get_max_pixels();
    if (n <= 0)
        lua_pushnil(L);
    else
        lua_pushinteger(L, (lua_Integer)n);
    return 1;
}

/* --- pipelines ------------------------------------------------------------------------ */

static dl_pipeline *check_pipeline(lua_State *L, int idx) {
    return dlL_checkbox(L, idx, DL_PIPELINE_MT, "transform pipeline used after it was freed");
}

dl_pipeline *dlL_topipeline(lua_State *L, int idx) {
    dl_pipeline **box = luaL_testudata(L, idx, DL_PIPELINE_MT);
    return box ? *box : NULL;
}

static int p_gc(lua_State *L) {
    dl_pipeline **box = luaL_checkudata(L, 1, DL_PIPELINE_MT);
    dl_pipeline_release(*box);
    *box = NULL;
    return 0;
}

/* Reads t[key] as a list of n numbers (or one number repeated when
 * allow_scalar). Returns how many were given (0 when absent). */
static int read_numbers(lua_State *L, int t, const char *key, double *out, int maxn,
                        int allow_scalar, const char *op) {
    int ty = lua_getfield(L, t, key);
    int n = 0;
    if (ty == LUA_TNUMBER && allow_scalar) {
        out[0] = lua_tonumber(L, -1);
        n = 1;
    } else if (ty == LUA_TTABLE) {
        n = (int)luaL_len(L, -1);
        if (n > maxn) luaL_error(L, "%s: %s has %d values, at most %d allowed", op, key, n, maxn);
        for (int i = 0; i < n; i++) {
            if (lua_geti(L, -1, i + 1) != LUA_TNUMBER)
                luaL_error(L, "%s: %s must hold numbers", op, key);
            out[i] = lua_tonumber(L, -1);
            lua_pop(L, 1);
        }
    } else if (ty != LUA_TNIL) {
        luaL_error(L, "%s: %s must be a number or a list of numbers, got %s", op, key,
                   lua_typename(L, ty));
    }
    lua_pop(L, 1);
    return n;
}

static int64_t to_i64(lua_State *L, double v, const char *op, const char *what) {
    if (v != floor(v) || fabs(v) > 1e15)
        luaL_error(L, "%s: %s must be an integer, got %f", op, what, v);
    return (int64_t)v;
}

static void read_step(lua_State *L, int t, dl_tf_step *s) {
    memset(s, 0, sizeof *s);
    lua_getfield(L, t, "kind");
    int kind = luaL_checkoption(L, -1, NULL, dl_tf_names());
    lua_pop(L, 1);
    s->kind = (dl_tf_kind)kind;
    const char *op = dl_tf_name((dl_tf_kind)kind);
    double v[4];
    int n = read_numbers(L, t, "size", v, 2, 1, op);
    s->nsize = n;
    for (int i = 0; i < n; i++) s->size[i] = to_i64(L, v[i], op, "size");
    if (n == 1 && s->kind != DL_TF_RESIZE) s->size[1] = s->size[0], s->nsize = 2;
    if ((s->kind == DL_TF_RESIZE || s->kind == DL_TF_CENTER_CROP || s->kind == DL_TF_RANDOM_CROP ||
         s->kind == DL_TF_RANDOM_RESIZED_CROP || s->kind == DL_TF_RESIZED_CROP) &&
        n == 0)
        luaL_error(L, "%s: size is required", op);
    if (read_numbers(L, t, "max_size", v, 1, 1, op)) s->max_size = to_i64(L, v[0], op, "max_size");
    s->interp = DL_INTERP_BILINEAR;
    if (lua_getfield(L, t, "interpolation") != LUA_TNIL) {
        static const char *const modes[] = {"nearest", "bilinear", "bicubic", NULL};
        s->interp = (dl_interp)luaL_checkoption(L, -1, NULL, modes);
    }
    lua_pop(L, 1);
    if (read_numbers(L, t, "crop", v, 4, 0, op) == 4) {
        s->crop[0] = to_i64(L, v[0], op, "top") - 1; /* 1-based -> 0-based */
        s->crop[1] = to_i64(L, v[1], op, "left") - 1;
        s->crop[2] = to_i64(L, v[2], op, "height");
        s->crop[3] = to_i64(L, v[3], op, "width");
    } else if (s->kind == DL_TF_CROP || s->kind == DL_TF_RESIZED_CROP) {
        luaL_error(L, "%s: crop needs {top, left, height, width}", op);
    }
    int np = read_numbers(L, t, "padding", v, 4, 0, op);
    if (np == 4) {
        s->has_padding = 1;
        for (int i = 0; i < 4; i++) s->padding[i] = to_i64(L, v[i], op, "padding");
    } else if (np) {
        luaL_error(L, "%s: padding must have 4 values here", op);
    }
    lua_getfield(L, t, "pad_if_needed");
    s->pad_if_needed = lua_toboolean(L, -1);
    lua_pop(L, 1);
    if (lua_getfield(L, t, "padding_mode") != LUA_TNIL) {
        static const char *const modes[] = {"constant", "edge", "reflect", "symmetric", NULL};
        s->pad_mode = (dl_pad_mode)luaL_checkoption(L, -1, NULL, modes);
    }
    lua_pop(L, 1);
    int nf = read_numbers(L, t, "fill", s->fill, DL_TF_MAX_CHANNELS, 1, op);
    if (nf == 1)
        for (int i = 1; i < DL_TF_MAX_CHANNELS; i++) s->fill[i] = s->fill[0];
    s->scale[0] = 0.08, s->scale[1] = 1.0;
    s->ratio[0] = 3.0 / 4.0, s->ratio[1] = 4.0 / 3.0;
    read_numbers(L, t, "scale", s->scale, 2, 0, op);
    read_numbers(L, t, "ratio", s->ratio, 2, 0, op);
    s->p = 0.5;
    read_numbers(L, t, "p", &s->p, 1, 1, op);
    static const char *const jn[4] = {"brightness", "contrast", "saturation", "hue"};
    for (int i = 0; i < 4; i++)
        s->has_jitter[i] = read_numbers(L, t, jn[i], s->jitter[i], 2, 0, op) == 2;
    s->gray_out = 1;
    if (read_numbers(L, t, "num_output_channels", v, 1, 1, op))
        s->gray_out = (int)to_i64(L, v[0], op, "num_output_channels");
    double m[DL_TF_MAX_CHANNELS], sd[DL_TF_MAX_CHANNELS];
    int nm = read_numbers(L, t, "mean", m, DL_TF_MAX_CHANNELS, 1, op);
    int ns = read_numbers(L, t, "std", sd, DL_TF_MAX_CHANNELS, 1, op);
    if (s->kind == DL_TF_NORMALIZE) {
        if (nm == 0 || ns == 0) luaL_error(L, "Normalize: mean and std are required");
        int nn = nm > ns ? nm : ns;
        if (nm != ns && nm != 1 && ns != 1)
            luaL_error(L, "Normalize: mean has %d values but std has %d", nm, ns);
        s->nnorm = nn;
        for (int i = 0; i < nn; i++) {
            s->mean[i] = (float)m[nm == 1 ? 0 : i];
            s->std[i] = (float)sd[ns == 1 ? 0 : i];
        }
    }
}

/* _transforms.pipeline({step, ...}) */
static int l_pipeline(lua_State *L) {
    luaL_checktype(L, 1, LUA_TTABLE);
    int n = (int)luaL_len(L, 1);
    if (n > 1024) return luaL_error(L, "Compose: too many transforms (%d)", n);
    dl_pipeline **box = lua_newuserdatauv(L, sizeof *box, 0);
    *box = NULL;
    luaL_setmetatable(L, DL_PIPELINE_MT);
    dl_tf_step *steps = lua_newuserdatauv(L, sizeof(dl_tf_step) * (size_t)(n ? n : 1), 0);
    for (int i = 0; i < n; i++) {
        if (lua_geti(L, 1, i + 1) != LUA_TTABLE)
            luaL_error(L, "Compose: step %d is not a table", i + 1);
        read_step(L, lua_gettop(L), &steps[i]);
        lua_pop(L, 1);
    }
    *box = dl_pipeline_new(n, steps);
    lua_pop(L, 1);
    if (!*box) return dlL_fail(L);
    return 1;
}

typedef struct {
    dl_tensor *out; /* (N, C, H, W) once known */
    int64_t n, i;
} batch_ctx;

static dl_tensor *batch_dst(void *vctx, const int64_t *shape, dl_dtype dtype) {
    batch_ctx *b = vctx;
    if (!b->out) {
        int64_t s[4] = {b->n, shape[0], shape[1], shape[2]};
        b->out = dl_tensor_empty(4, s, dtype, DL_CPU);
        if (!b->out) return NULL;
    } else if (b->out->dtype != dtype || b->out->shape[1] != shape[0] ||
               b->out->shape[2] != shape[1] || b->out->shape[3] != shape[2]) {
        dl_error("transform: images of a batch came out with different shapes");
        return NULL;
    }
    return dl_tensor_select(b->out, 0, b->i);
}

/* pipe:apply(img) - img (C, H, W) or a batch (N, C, H, W) sharing one draw of
 * random parameters, as torchvision does for batched tensors. */
static int p_apply(lua_State *L) {
    dl_pipeline *p = check_pipeline(L, 1);
    dl_tensor *x = dlL_checktensor(L, 2);
    if (x->ndim != 3 && x->ndim != 4)
        return luaL_error(L,
                          "transform: expected an image (C, H, W) or a batch (N, C, H, W), got "
                          "%d dims",
                          x->ndim);
    dl_sample_rng rng;
    dl_sample_rng_from_generator(&rng, dl_default_generator());
    dl_tensor *out = NULL;
    if (x->ndim == 3) {
        int rc = dl_pipeline_run_tensor(p, x, &rng, NULL, NULL, &out);
        dl_sample_rng_free(&rng);
        if (rc) return dlL_fail(L);
        return dlL_pushtensor(L, out);
    }
    batch_ctx b = {NULL, x->shape[0], 0};
    if (b.n == 0) return luaL_error(L, "transform: empty batch");
    int rc = 0;
    for (int64_t i = 0; i < b.n && !rc; i++) {
        b.i = i;
        dl_sample_rng_tape(&rng, i == 0);
        dl_tensor *xi = dl_tensor_select(x, 0, i), *r = NULL;
        rc = xi ? dl_pipeline_run_tensor(p, xi, &rng, batch_dst, &b, &r) : -1;
        dl_tensor_release(xi);
        dl_tensor_release(r);
    }
    dl_sample_rng_free(&rng);
    if (rc) {
        dl_tensor_release(b.out);
        return dlL_fail(L);
    }
    return dlL_pushtensor(L, b.out);
}

/* pipe:apply_file(path [, channels]) - decode + pipeline in one go (the
 * decoder may use DCT scaling). */
static int p_apply_file(lua_State *L) {
    dl_pipeline *p = check_pipeline(L, 1);
    const char *path = luaL_checkstring(L, 2);
    int channels = (int)luaL_optinteger(L, 3, 3);
    if (channels != 1 && channels != 3) return luaL_argerror(L, 3, "channels must be 1 or 3");
    uint8_t *buf;
    size_t n;
    if (dl_file_read(path, &buf, &n)) return dlL_fail(L);
    dl_sample_rng rng;
    dl_sample_rng_from_generator(&rng, dl_default_generator());
    dl_tensor *out = NULL;
    int rc = dl_pipeline_run_encoded(p, buf, n, path, channels, &rng, NULL, NULL, &out);
    free(buf);
    dl_sample_rng_free(&rng);
    if (rc) return dlL_fail(L);
    return dlL_pushtensor(L, out);
}

static int p_len(lua_State *L) {
    lua_pushinteger(L, check_pipeline(L, 1)->n);
    return 1;
}

/* _transforms.rrc_params(h, w, {scale}, {ratio}) -> top, left, height, width (1-based) */
static int l_rrc_params(lua_State *L) {
    lua_Integer h = luaL_checkinteger(L, 1), w = luaL_checkinteger(L, 2);
    if (h < 1 || w < 1) return luaL_error(L, "RandomResizedCrop.get_params: empty image");
    double scale[2] = {luaL_checknumber(L, 3), luaL_checknumber(L, 4)};
    double ratio[2] = {luaL_checknumber(L, 5), luaL_checknumber(L, 6)};
    if (!(scale[0] > 0 && scale[0] <= scale[1] && ratio[0] > 0 && ratio[0] <= ratio[1]))
        return luaL_error(L, "RandomResizedCrop.get_params: bad scale or ratio");
    dl_sample_rng rng;
    dl_sample_rng_from_generator(&rng, dl_default_generator());
    int64_t b[4];
    dl_tf_rrc_params(h, w, scale, ratio, &rng, b);
    lua_pushinteger(L, b[0] + 1);
    lua_pushinteger(L, b[1] + 1);
    lua_pushinteger(L, b[2]);
    lua_pushinteger(L, b[3]);
    return 4;
}

/* _transforms.adjust(img, which, factor) -> new image (img (C, H, W) or a batch) */
static int l_adjust(lua_State *L) {
    dl_tensor *x = dlL_checktensor(L, 1);
    static const char *const which[] = {"brightness", "contrast", "saturation", "hue", NULL};
    int k = luaL_checkoption(L, 2, NULL, which);
    double f = luaL_checknumber(L, 3);
    if (k < 3 && !(f >= 0))
        return luaL_error(L, "adjust_%s: factor must be non-negative, got %f", which[k], f);
    if (x->ndim != 3 && x->ndim != 4)
        return luaL_error(L, "adjust_%s: expected (C, H, W) or (N, C, H, W), got %d dims", which[k],
                          x->ndim);
    if (x->dtype != DL_DTYPE_U8 && x->dtype != DL_DTYPE_F32)
        return luaL_error(L, "adjust_%s: images must be uint8 or float32, got %s", which[k],
                          dl_dtype_name(x->dtype));
    dl_tensor *c = dl_tensor_clone(x);
    if (!c) return dlL_fail(L);
    int64_t nimg = x->ndim == 4 ? x->shape[0] : 1;
    int rc = 0;
    for (int64_t i = 0; i < nimg && !rc; i++) {
        dl_tensor *im = x->ndim == 4 ? dl_tensor_select(c, 0, i) : dl_tensor_retain(c);
        if (!im) {
            rc = -1;
            break;
        }
        rc = k == 0   ? dl_tf_adjust_brightness_(im, f)
             : k == 1 ? dl_tf_adjust_contrast_(im, f)
             : k == 2 ? dl_tf_adjust_saturation_(im, f)
                      : dl_tf_adjust_hue_(im, f);
        dl_tensor_release(im);
    }
    if (rc) {
        dl_tensor_release(c);
        return dlL_fail(L);
    }
    return dlL_pushtensor(L, c);
}

void dlL_open_image(lua_State *L) {
    lua_getfield(L, LUA_REGISTRYINDEX, DL_MODULE_KEY);
    int mod = lua_gettop(L);

    static const luaL_Reg image[] = {
        {"load", l_load},
        {"decode", l_decode},
        {"save", l_save},
        {"encode", l_encode},
        {"info", l_info},
        {"set_max_pixels", l_set_max_pixels},
        {"get_max_pixels", l_get_max_pixels},
        {NULL, NULL},
    };
    luaL_newlib(L, image);
    lua_setfield(L, mod, "image");

    static const luaL_Reg pmeta[] = {
        {"__gc", p_gc}, {"__close", p_gc}, {"__len", p_len}, {NULL, NULL}};
    static const luaL_Reg pmethods[] = {
        {"apply", p_apply}, {"apply_file", p_apply_file}, {NULL, NULL}};
    dlL_newclass(L, DL_PIPELINE_MT, pmeta, pmethods);

    static const luaL_Reg tf[] = {
        {"pipeline", l_pipeline},
        {"rrc_params", l_rrc_params},
        {"adjust", l_adjust},
        {NULL, NULL},
    };
    luaL_newlib(L, tf);
    lua_setfield(L, mod, "_transforms");
    lua_pop(L, 1);
}
