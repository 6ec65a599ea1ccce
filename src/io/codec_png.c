/* codec_png.c - PNG through libpng, from and to memory.
 *
 * Decoding follows Pillow's open + convert("RGB") / convert("L"):
 *  - palette and 1/2/4-bit gray are expanded to 8 bits (libpng);
 *  - alpha (and tRNS) is dropped, never composited;
 *  - 16-bit RGB(A) and gray+alpha keep the high byte (Pillow's ";16B"
 *    rawmodes); 16-bit gray is Pillow mode "I", whose conversion to 8 bits
 *    clips values above 255;
 *  - RGB -> L uses Pillow's integer luma (dl_rgb_to_l).
 * libpng reports errors through longjmp; everything allocated lives in one
 * context struct so nothing is lost on the jump. */
#include "codec_impl.h"
#include "core/error.h"

#include <png.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const uint8_t *src;
    size_t n, pos;
    const char *name;
    char msg[200];
    uint8_t *raw; /* decoded rows as libpng delivers them */
    png_bytep *rows;
    uint8_t *pix; /* final (h, w, c) */
} png_ctx;

static void on_error(png_structp png, png_const_charp msg) {
    png_ctx *c = png_get_error_ptr(png);
    snprintf(c->msg, sizeof c->msg, "%s", msg);
    png_longjmp(png, 1);
}

static void on_warning(png_structp png, png_const_charp msg) {
    (void)png;
    (void)msg;
}

static void read_mem(png_structp png, png_bytep out, size_t len) {
    png_ctx *c = png_get_io_ptr(png);
    if (len > c->n - c->pos) png_error(png, "unexpected end of data");
    memcpy(out, c->src + c->pos, len);
    c->pos += len;
}

static uint32_t be32(const uint8_t *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

int dl_png_probe(const uint8_t *buf, size_t n, const char *name, dl_image_info *info) {
    /* signature(8) length(4) "IHDR" width(4) height(4) depth(1) colortype(1) */
    if (n < 33 || memcmp(buf + 12, "IHDR", 4) != 0)
        return dl_error("image: '%s': corrupt PNG header", name);
    uint32_t w = be32(buf + 16), h = be32(buf + 20);
    if (w == 0 || h == 0 || w > 0x7FFFFFFF || h > 0x7FFFFFFF)
        return dl_error("image: '%s': corrupt PNG header (size %ux%u)", name, w, h);
    if (dl_image_check_limit(name, (int)w, (int)h)) return -1;
    int ct = buf[25];
    info->format = DL_IMAGE_PNG;
    info->w = (int)w;
    info->h = (int)h;
    info->components = ct == 0 ? 1 : ct == 4 ? 2 : ct == 6 ? 4 : 3;
    return 0;
}

static int decode(png_ctx *c, png_structp png, png_infop info, int channels, dl_image *out) {
    if (setjmp(png_jmpbuf(png))) return -1;
    png_set_read_fn(png, c, read_mem);
    png_set_user_limits(png, 0x7FFFFFFF, 0x7FFFFFFF);
    /* ancillary chunks the decoder never uses are skipped as they are read,
     * never held: libpng 1.6.39 allocates (and fills) a buffer of the
     * chunk's stated length for sPLT, text or iCCP data before reading it,
     * so a length field far past the end of the file cost up to 2 GB
     * (a fuzzer's find; png_set_chunk_malloc_max does not bound it there) */
    static const png_byte skip[] = "sPLT\0tEXt\0zTXt\0iTXt\0iCCP\0eXIf\0hIST\0pCAL\0sCAL\0"
                                   "tIME\0pHYs\0oFFs\0sTER\0bKGD\0cHRM\0gAMA\0sRGB\0sBIT";
    png_set_keep_unknown_chunks(png, PNG_HANDLE_CHUNK_NEVER, skip, (int)(sizeof skip / 5));
    png_read_info(png, info);
    png_uint_32 w, h;
    int depth, ct, interlace;
    png_get_IHDR(png, info, &w, &h, &depth, &ct, &interlace, NULL, NULL);
    if (w > 0x7FFFFFFF || h > 0x7FFFFFFF || dl_image_check_limit(c->name, (int)w, (int)h)) {
        snprintf(c->msg, sizeof c->msg, "%s", dl_last_error());
        return -2; /* message already complete */
    }
    int gray16 = ct == PNG_COLOR_TYPE_GRAY && depth == 16;
    if (ct == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
    if (ct == PNG_COLOR_TYPE_GRAY && depth < 8) png_set_expand_gray_1_2_4_to_8(png);
    png_set_interlace_handling(png);
    png_read_update_info(png, info);
    int pc = png_get_channels(png, info);
    int bd = png_get_bit_depth(png, info);
    size_t rowbytes = png_get_rowbytes(png, info);
    if (bd != 8 && bd != 16) png_error(png, "unsupported bit depth after expansion");
    if (rowbytes < (size_t)w * (size_t)pc * (size_t)(bd / 8)) png_error(png, "bad row size");
    c->raw = malloc(rowbytes * h);
    c->rows = malloc(sizeof(png_bytep) * h);
    c->pix = malloc((size_t)w * h * (size_t)channels);
    if (!c->raw || !c->rows || !c->pix) png_error(png, "out of memory");
    for (png_uint_32 y = 0; y < h; y++) c->rows[y] = c->raw + rowbytes * y;
    png_read_image(png, c->rows);
    /* pc: 1 gray, 2 gray+alpha, 3 RGB, 4 RGBA; samples big-endian when 16-bit */
    int bps = bd / 8;
    for (png_uint_32 y = 0; y < h; y++) {
        const uint8_t *s = c->rows[y];
        uint8_t *d = c->pix + (size_t)y * w * (size_t)channels;
        for (png_uint_32 x = 0; x < w; x++, s += pc * bps) {
            uint8_t r, g, b;
            if (gray16) {
                unsigned v = (unsigned)s[0] << 8 | s[1];
                r = g = b = (uint8_t)(v > 255 ? 255 : v);
            } else if (pc <= 2) {
                r = g = b = s[0];
            } else {
                r = s[0];
                g = s[bps];
                b = s[2 * bps];
            }
            if (channels == 3) {
                d[3 * x] = r;
                d[3 * x + 1] = g;
                d[3 * x + 2] = b;
            } else {
                d[x] = pc <= 2 ? r : dl_rgb_to_l(r, g, b);
            }
        }
    }
    out->data = c->pix;
    c->pix = NULL;
    out->w = (int)w;
    out->h = (int)h;
    out->c = channels;
    return 0;
}

int dl_png_decode(const uint8_t *buf, size_t n, const char *name, int channels, dl_image *out) {
    png_ctx c;
    memset(&c, 0, sizeof c);
    c.src = buf;
    c.n = n;
    c.name = name;
    png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &c, on_error, on_warning);
    png_infop info = png ? png_create_info_struct(png) : NULL;
    if (!png || !info) {
        png_destroy_read_struct(&png, NULL, NULL);
        return dl_error("image: '%s': cannot initialise libpng", name);
    }
    int rc = decode(&c, png, info, channels, out);
    png_destroy_read_struct(&png, &info, NULL);
    free(c.raw);
    free(c.rows);
    free(c.pix);
    if (rc == -2) return dl_error("%s", c.msg);
    if (rc) {
        if (strstr(c.msg, "truncated") || strstr(c.msg, "Not enough") ||
            strstr(c.msg, "unexpected end"))
            return dl_error("image: '%s': truncated PNG file (%s)", name, c.msg);
        return dl_error("image: '%s': corrupt PNG data (%s)", name, c.msg);
    }
    return 0;
}

/* --- encoding -------------------------------------------------------------- */

typedef struct {
    uint8_t *buf;
    size_t n, cap;
    int oom;
    char msg[200];
} png_wbuf;

static void write_mem(png_structp png, png_bytep data, size_t len) {
    png_wbuf *w = png_get_io_ptr(png);
    if (w->n + len > w->cap) {
        size_t cap = w->cap ? w->cap * 2 : 65536;
        while (cap < w->n + len) cap *= 2;
        uint8_t *nb = realloc(w->buf, cap);
        if (!nb) {
            w->oom = 1;
            png_error(png, "out of memory");
        }
        w->buf = nb;
        w->cap = cap;
    }
    memcpy(w->buf + w->n, data, len);
    w->n += len;
}

static void flush_mem(png_structp png) {
    (void)png;
}

static void on_write_error(png_structp png, png_const_charp msg) {
    png_wbuf *w = png_get_error_ptr(png);
    snprintf(w->msg, sizeof w->msg, "%s", msg);
    png_longjmp(png, 1);
}

static int encode(png_structp png, png_infop info, png_wbuf *w, const dl_image *img) {
    if (setjmp(png_jmpbuf(png))) return -1;
    png_set_write_fn(png, w, write_mem, flush_mem);
    int ct = img->c == 1   ? PNG_COLOR_TYPE_GRAY
             : img->c == 3 ? PNG_COLOR_TYPE_RGB
                           : PNG_COLOR_TYPE_RGBA;
    png_set_IHDR(png, info, (png_uint_32)img->w, (png_uint_32)img->h, 8, ct, PNG_INTERLACE_NONE,
                 PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
    png_set_compression_level(png, 6);
    png_write_info(png, info);
    size_t stride = (size_t)img->w * (size_t)img->c;
    for (int y = 0; y < img->h; y++) png_write_row(png, img->data + stride * (size_t)y);
    png_write_end(png, NULL);
    return 0;
}

int dl_image_encode_png(const dl_image *img, uint8_t **buf, size_t *n) {
    *buf = NULL;
    *n = 0;
    if (img->c < 1 || img->c == 2 || img->c > 4)
        return dl_error("image.save: PNG needs 1, 3 or 4 channels, got %d", img->c);
    png_wbuf w;
    memset(&w, 0, sizeof w);
    png_structp png =
        png_create_write_struct(PNG_LIBPNG_VER_STRING, &w, on_write_error, on_warning);
    png_infop info = png ? png_create_info_struct(png) : NULL;
    if (!png || !info) {
        png_destroy_write_struct(&png, NULL);
        return dl_error("image.save: cannot initialise libpng");
    }
    int rc = encode(png, info, &w, img);
    png_destroy_write_struct(&png, &info);
    if (rc) {
        free(w.buf);
        return dl_error("image.save: PNG encoding failed: %s", w.msg);
    }
    *buf = w.buf;
    *n = w.n;
    return 0;
}
