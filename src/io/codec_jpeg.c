/* codec_jpeg.c - JPEG through libjpeg-turbo's TurboJPEG API.
 *
 * Decoding uses TurboJPEG's defaults (accurate integer DCT, fancy
 * upsampling), the same settings Pillow gives libjpeg, so pixels agree with
 * Pillow.  Grayscale files decode to L (or RGB by replication), CMYK/YCCK
 * files are read with Adobe polarity (inverted, as Pillow's "CMYK;I") and
 * converted the way Pillow's convert("RGB") does.  DCT-domain downscaling
 * (1/2, 1/4, 1/8) is used when the caller asks for it.  A truncated file is
 * an error (as in Pillow); other libjpeg warnings are tolerated.
 * The region decoder goes through libjpeg-turbo's libjpeg API (the same
 * library and settings) for jpeg_crop_scanline / jpeg_skip_scanlines, which
 * TurboJPEG 2.1 does not expose: it decodes only the rows and column blocks a
 * crop needs, with the same pixel values as a full decode.
 * TurboJPEG handles are per thread (a pthread key frees them at exit). */
#include "codec_impl.h"
#include "core/error.h"

#include <pthread.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <turbojpeg.h>
/* jpeglib.h needs FILE and size_t first */
#include <jerror.h>
#include <jpeglib.h>

static pthread_key_t dec_key, enc_key;
static pthread_once_t keys_once = PTHREAD_ONCE_INIT;

static void destroy_handle(void *h) {
    if (h) tjDestroy((tjhandle)h);
}

static void make_keys(void) {
    pthread_key_create(&dec_key, destroy_handle);
    pthread_key_create(&enc_key, destroy_handle);
}

static tjhandle handle(int encoder) {
    pthread_once(&keys_once, make_keys);
    pthread_key_t k = encoder ? enc_key : dec_key;
    tjhandle h = pthread_getspecific(k);
    if (!h) {
        h = encoder ? tjInitCompress() : tjInitDecompress();
        if (!h) {
            dl_error("image: cannot initialise TurboJPEG: %s", tjGetErrorStr2(NULL));
            return NULL;
        }
        pthread_setspecific(k, h);
    }
    return h;
}

/* After a failed call a TurboJPEG handle may keep stale state (2.1 can then
 * report a 0x0 header), so the thread's handle is replaced. */
static void drop_handle(int encoder) {
    pthread_key_t k = encoder ? enc_key : dec_key;
    tjhandle h = pthread_getspecific(k);
    if (h) tjDestroy(h);
    pthread_setspecific(k, NULL);
}

static int truncated_msg(const char *msg) {
    return strstr(msg, "Premature end") != NULL || strstr(msg, "missing SOS") != NULL;
}

/* The error of a failed decode of name: a truncated file (when the decoder
 * said so, or its message msg does) or corrupt `what`.  Returns -1. */
static int decode_error(const char *name, const char *msg, int truncated, const char *what) {
    if (truncated || truncated_msg(msg))
        return dl_error("image: '%s': truncated JPEG file (%s)", name, msg);
    return dl_error("image: '%s': corrupt JPEG %s (%s)", name, what, msg);
}

/* decode_error for the turbojpeg handle tj, which is dropped (a fresh one
 * serves the next call). */
static int tj_fail(tjhandle tj, const char *name, const char *what) {
    decode_error(name, tjGetErrorStr2(tj), 0, what);
    drop_handle(0);
    return -1;
}

static int header(tjhandle tj, const uint8_t *buf, size_t n, const char *name, int *w, int *h,
                  int *cs) {
    int subsamp;
    if (n > (size_t)0xFFFFFFFFul) return dl_error("image: '%s': JPEG file too large", name);
    *w = *h = 0;
    if (tjDecompressHeader3(tj, buf, (unsigned long)n, w, h, &subsamp, cs) != 0 || *w <= 0 ||
        *h <= 0)
        return tj_fail(tj, name, "header");
    return dl_image_check_limit(name, *w, *h);
}

int dl_jpeg_probe(const uint8_t *buf, size_t n, const char *name, dl_image_info *info) {
    tjhandle tj = handle(0);
    if (!tj) return -1;
    int w, h, cs;
    if (header(tj, buf, n, name, &w, &h, &cs)) return -1;
    info->format = DL_IMAGE_JPEG;
    info->w = w;
    info->h = h;
    info->components = cs == TJCS_GRAY ? 1 : (cs == TJCS_CMYK || cs == TJCS_YCCK) ? 4 : 3;
    return 0;
}

/* Pillow: MULDIV255(a, b) = ((a*b + 128) + ((a*b + 128) >> 8)) >> 8 */
static inline uint8_t muldiv255(int a, int b) {
    int t = a * b + 128;
    return (uint8_t)(((t >> 8) + t) >> 8);
}

/* Converts decoded pixels (pc = 4 CMYK, 3 RGB or 1 gray) to `channels` in
 * place: CMYK as Pillow ("CMYK;I", then cmyk2rgb), RGB -> L with Pillow's
 * luma. */
static void finish_pixels(uint8_t **pp, size_t npx, int pc, int channels) {
    uint8_t *pix = *pp;
    int cmyk = pc == 4;
    if (cmyk) {
        /* "CMYK;I" then Pillow's cmyk2rgb: nk = 255 - k, x = nk - nk*c/255 */
        uint8_t *dst = pix;
        for (size_t i = 0; i < npx; i++) {
            const uint8_t *s = pix + 4 * i;
            int c = 255 - s[0], m = 255 - s[1], y = 255 - s[2], nk = s[3];
            uint8_t r = (uint8_t)(nk - muldiv255(c, nk)), g = (uint8_t)(nk - muldiv255(m, nk)),
                    b = (uint8_t)(nk - muldiv255(y, nk));
            if (channels == 3) {
                dst[3 * i] = r;
                dst[3 * i + 1] = g;
                dst[3 * i + 2] = b;
            } else {
                dst[i] = dl_rgb_to_l(r, g, b);
            }
        }
    } else if (pc == 3 && channels == 1) {
        for (size_t i = 0; i < npx; i++)
            pix[i] = dl_rgb_to_l(pix[3 * i], pix[3 * i + 1], pix[3 * i + 2]);
    }
    if (pc != channels) {
        uint8_t *shrunk = realloc(pix, npx * (size_t)channels);
        if (shrunk) *pp = shrunk;
    }
}

int dl_jpeg_decode(const uint8_t *buf, size_t n, const char *name, int channels, int denom,
                   dl_image *out) {
    tjhandle tj = handle(0);
    if (!tj) return -1;
    int w, h, cs;
    if (header(tj, buf, n, name, &w, &h, &cs)) return -1;
    tjscalingfactor sf = {1, denom};
    int sw = TJSCALED(w, sf), sh = TJSCALED(h, sf);
    int cmyk = cs == TJCS_CMYK || cs == TJCS_YCCK;
    int pf, pc;
    if (cmyk)
        pf = TJPF_CMYK, pc = 4;
    else if (cs == TJCS_GRAY && channels == 1)
        pf = TJPF_GRAY, pc = 1;
    else
        pf = TJPF_RGB, pc = 3;
    size_t npx = (size_t)sw * (size_t)sh;
    uint8_t *pix = malloc(npx * (size_t)pc);
    if (!pix) return dl_error("image: '%s': out of memory for a %dx%d image", name, sw, sh);
    if (tjDecompress2(tj, buf, (unsigned long)n, pix, sw, 0, sh, pf, 0) != 0) {
        const char *msg = tjGetErrorStr2(tj);
        int fatal = tjGetErrorCode(tj) != TJERR_WARNING || truncated_msg(msg);
        if (fatal) {
            free(pix);
            return tj_fail(tj, name, "data");
        }
    }
    finish_pixels(&pix, npx, pc, channels);
    out->data = pix;
    out->w = sw;
    out->h = sh;
    out->c = channels;
    return 0;
}

/* --- partial decoding (libjpeg API) --------------------------------------------- */

typedef struct {
    struct jpeg_error_mgr pub;
    jmp_buf jb;
    char msg[JMSG_LENGTH_MAX];
    int truncated;
} jerr_mgr;

static void jerr_exit(j_common_ptr c) {
    jerr_mgr *e = (jerr_mgr *)c->err;
    (*c->err->format_message)(c, e->msg);
    longjmp(e->jb, 1);
}

static void jerr_emit(j_common_ptr c, int level) {
    jerr_mgr *e = (jerr_mgr *)c->err;
    if (level < 0 && c->err->msg_code == JWRN_JPEG_EOF && !e->truncated) {
        e->truncated = 1;
        (*c->err->format_message)(c, e->msg);
    }
}

typedef struct {
    struct jpeg_decompress_struct ci;
    jerr_mgr je;
    uint8_t *pix;
} region_ctx;

/* The work of dl_jpeg_decode_region; libjpeg errors longjmp out of it. */
static void region_body(region_ctx *r, const uint8_t *buf, size_t n, const char *name, int channels,
                        int denom, int x0, int y0, int x1, int y1, dl_image *out, int *ox, int *oy,
                        int *limit_failed) {
    struct jpeg_decompress_struct *ci = &r->ci;
    jpeg_mem_src(ci, buf, (unsigned long)n);
    jpeg_read_header(ci, TRUE);
    if (dl_image_check_limit(name, (int)ci->image_width, (int)ci->image_height)) {
        *limit_failed = 1;
        return;
    }
    int cmyk = ci->jpeg_color_space == JCS_CMYK || ci->jpeg_color_space == JCS_YCCK;
    ci->out_color_space = cmyk                                                       ? JCS_CMYK
                          : (ci->jpeg_color_space == JCS_GRAYSCALE && channels == 1) ? JCS_GRAYSCALE
                                                                                     : JCS_RGB;
    ci->scale_num = 1;
    ci->scale_denom = (unsigned)denom;
    jpeg_start_decompress(ci);
    int sw = (int)ci->output_width, sh = (int)ci->output_height;
    if (x0 < 0) x0 = 0;
    if (y0 < 0) y0 = 0;
    if (x1 > sw) x1 = sw;
    if (y1 > sh) y1 = sh;
    if (x0 >= x1 || y0 >= y1) x0 = 0, y0 = 0, x1 = sw, y1 = sh;
    /* a margin keeps the edges of the region away from where chroma
     * upsampling sees the cut (pixels there differ from a full decode) */
    const int margin = 16;
    x0 = x0 > margin ? x0 - margin : 0;
    y0 = y0 > margin ? y0 - margin : 0;
    x1 = x1 + margin < sw ? x1 + margin : sw;
    y1 = y1 + margin < sh ? y1 + margin : sh;
    JDIMENSION xoff = (JDIMENSION)x0, cw = (JDIMENSION)(x1 - x0);
    if ((int)cw < sw) jpeg_crop_scanline(ci, &xoff, &cw);
    if (y0 > 0) jpeg_skip_scanlines(ci, (JDIMENSION)y0);
    int pc = ci->output_components, rows = y1 - y0;
    size_t rowbytes = (size_t)cw * (size_t)pc;
    r->pix = malloc(rowbytes * (size_t)rows);
    if (!r->pix) {
        snprintf(r->je.msg, sizeof r->je.msg, "out of memory");
        longjmp(r->je.jb, 1);
    }
    while ((int)ci->output_scanline < y1) {
        JSAMPROW row = r->pix + (size_t)((int)ci->output_scanline - y0) * rowbytes;
        if (jpeg_read_scanlines(ci, &row, 1) != 1) break;
    }
    if (r->je.truncated || (int)ci->output_scanline < y1) {
        if (!r->je.msg[0]) snprintf(r->je.msg, sizeof r->je.msg, "Premature end of JPEG file");
        r->je.truncated = 1;
        longjmp(r->je.jb, 1);
    }
    jpeg_abort_decompress(ci);
    finish_pixels(&r->pix, (size_t)cw * (size_t)rows, pc, channels);
    out->data = r->pix;
    r->pix = NULL;
    out->w = (int)cw;
    out->h = rows;
    out->c = channels;
    *ox = (int)xoff;
    *oy = y0;
}

int dl_jpeg_decode_region(const uint8_t *buf, size_t n, const char *name, int channels, int denom,
                          int x0, int y0, int x1, int y1, dl_image *out, int *ox, int *oy) {
    region_ctx *r = calloc(1, sizeof *r);
    if (!r) return dl_error("image: '%s': out of memory", name);
    r->ci.err = jpeg_std_error(&r->je.pub);
    r->je.pub.error_exit = jerr_exit;
    r->je.pub.emit_message = jerr_emit;
    int limit_failed = 0, rc = 0;
    if (setjmp(r->je.jb)) {
        rc = decode_error(name, r->je.msg, r->je.truncated, "data");
    } else {
        jpeg_create_decompress(&r->ci);
        region_body(r, buf, n, name, channels, denom, x0, y0, x1, y1, out, ox, oy, &limit_failed);
        if (limit_failed) rc = -1;
    }
    jpeg_destroy_decompress(&r->ci);
    free(r->pix);
    free(r);
    return rc;
}

int dl_image_encode_jpeg(const dl_image *img, int quality, uint8_t **buf, size_t *n) {
    *buf = NULL;
    *n = 0;
    if (img->c != 1 && img->c != 3)
        return dl_error("image.save: JPEG needs 1 or 3 channels, got %d", img->c);
    if (quality < 1 || quality > 100)
        return dl_error("image.save: JPEG quality must be in 1..100, got %d", quality);
    tjhandle tj = handle(1);
    if (!tj) return -1;
    unsigned char *jpeg = NULL;
    unsigned long size = 0;
    int pf = img->c == 1 ? TJPF_GRAY : TJPF_RGB;
    int samp = img->c == 1 ? TJSAMP_GRAY : TJSAMP_420;
    if (tjCompress2(tj, img->data, img->w, 0, img->h, pf, &jpeg, &size, samp, quality, 0) != 0) {
        if (jpeg) tjFree(jpeg);
        dl_error("image.save: JPEG encoding failed: %s", tjGetErrorStr2(tj));
        drop_handle(1);
        return -1;
    }
    uint8_t *copy = malloc(size);
    if (!copy) {
        tjFree(jpeg);
        return dl_error("image.save: out of memory");
    }
    memcpy(copy, jpeg, size);
    tjFree(jpeg);
    *buf = copy;
    *n = size;
    return 0;
}
