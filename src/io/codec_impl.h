/* codec_impl.h - what codec.c shares with the per-format codecs
 * (codec_jpeg.c, codec_png.c).  Not part of the public API. */
#ifndef DL_IO_CODEC_IMPL_H
#define DL_IO_CODEC_IMPL_H

#include "codec.h"

/* -1 with a message naming the file when w x h is invalid or over the limit. */
int dl_image_check_limit(const char *name, int w, int h);

int dl_jpeg_probe(const uint8_t *buf, size_t n, const char *name, dl_image_info *info);
int dl_jpeg_decode(const uint8_t *buf, size_t n, const char *name, int channels, int denom,
                   dl_image *out);
int dl_jpeg_decode_region(const uint8_t *buf, size_t n, const char *name, int channels, int denom,
                          int x0, int y0, int x1, int y1, dl_image *out, int *ox, int *oy);
int dl_png_probe(const uint8_t *buf, size_t n, const char *name, dl_image_info *info);
int dl_png_decode(const uint8_t *buf, size_t n, const char *name, int channels, dl_image *out);

#endif
