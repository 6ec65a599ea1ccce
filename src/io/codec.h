/* codec.h - JPEG (TurboJPEG) and PNG (libpng) decoding and encoding into
 * plain interleaved 8-bit buffers.
 *
 * Invariants:
 *  - A decoded dl_image is height x width x channels, rows packed, one byte per
 *    sample, channels 3 (RGB) or 1 (L), converted the way Pillow's
 *    convert("RGB") / convert("L") does (grayscale, CMYK, palette, alpha and
 *    16-bit sources included).
 *  - Every function is thread-safe and keeps no global state except the pixel
 *    limit (an atomic), so loader workers call them freely.
 *  - Failures return -1 with a dl_error message that names the file (the
 *    `name` argument: a path, or "<bytes>" for in-memory data).  Corrupt,
 *    truncated, zero-byte and non-image inputs fail cleanly, never crash.
 *  - Images with more pixels than the limit are refused before any pixel
 *    memory is allocated (decompression bombs). */
#ifndef DL_IO_CODEC_H
#define DL_IO_CODEC_H

#include <stddef.h>
#include <stdint.h>

typedef enum { DL_IMAGE_UNKNOWN = 0, DL_IMAGE_JPEG, DL_IMAGE_PNG } dl_image_format;

typedef struct {
    uint8_t *data; /* data is (h, w, c), malloc'd; free with dl_image_free */
    int w, h, c;
} dl_image;

typedef struct {
    dl_image_format format;
    int w, h;       /* full size, before any DCT scaling */
    int components; /* channels stored in the file (1 gray .. 4 CMYK/RGBA) */
} dl_image_info;

/* Default limit on width * height: Pillow's error threshold (2 *
 * MAX_IMAGE_PIXELS). */
#define DL_IMAGE_DEFAULT_MAX_PIXELS 178956970LL

void dl_image_set_max_pixels(int64_t n); /* <= 0: no limit */
int64_t dl_image_get_max_pixels(void);

/* Reads the header only: format and size.  Fails on non-image data and on an
 * image over the pixel limit. */
int dl_image_probe(const uint8_t *buf, size_t n, const char *name, dl_image_info *info);

/* Decodes buf into out.  channels is 3 (RGB) or 1 (L).  scale_denom is 1, 2,
 * 4 or 8: JPEG files are decoded at 1/scale_denom of their size in the DCT
 * domain (each side ceil(side / scale_denom)); PNG ignores it (always 1).
 * *applied_denom (may be NULL) receives the scale actually used. */
int dl_image_decode(const uint8_t *buf, size_t n, const char *name, int channels, int scale_denom,
                    dl_image *out, int *applied_denom);

/* Decodes at least columns [x0, x1) and rows [y0, y1) (pixels of the image
 * at 1/scale_denom scale).  JPEG decodes only those rows and the DCT blocks
 * covering those columns; *ox, *oy receive where the result starts (<= x0,
 * y0).  PNG decodes everything (*ox = *oy = 0).  An empty or outside region
 * means the whole image. */
int dl_image_decode_region(const uint8_t *buf, size_t n, const char *name, int channels,
                           int scale_denom, int x0, int y0, int x1, int y1, dl_image *out, int *ox,
                           int *oy);

/* The whole file into a malloc'd buffer (*n bytes).  Zero-byte files are an
 * error naming the file. */
int dl_file_read(const char *path, uint8_t **buf, size_t *n);

/* Encoders: img is (h, w, c) packed with c = 1 or 3 (PNG also 4).  The result
 * is malloc'd into *buf. */
int dl_image_encode_png(const dl_image *img, uint8_t **buf, size_t *n);
int dl_image_encode_jpeg(const dl_image *img, int quality, uint8_t **buf, size_t *n);
/* Writes the encoded bytes to path through a temporary name and a rename. */
int dl_file_write(const char *path, const uint8_t *buf, size_t n);

void dl_image_free(dl_image *img);

/* Largest DCT scale denominator (1, 2, 4, 8) whose decoded size still covers
 * need_w x need_h pixels of a w x h image (ceil(w / d) >= need_w ...). */
int dl_image_pick_scale(int w, int h, double need_w, double need_h);

/* Pillow's RGB -> L: (r*19595 + g*38470 + b*7471 + 0x8000) >> 16. */
static inline uint8_t dl_rgb_to_l(uint8_t r, uint8_t g, uint8_t b) {
    uint32_t v = (uint32_t)r * 19595u + (uint32_t)g * 38470u + (uint32_t)b * 7471u + 0x8000u;
    return (uint8_t)(v >> 16);
}

#endif
