/* codec.c - format detection, the pixel limit, whole-file reads and writes,
 * and the dispatch to the JPEG and PNG codecs (codec_jpeg.c, codec_png.c).
 * See codec.h for the invariants. */
#include "codec.h"
#include "codec_impl.h"
#include "core/error.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int64_t max_pixels = DL_IMAGE_DEFAULT_MAX_PIXELS;

void dl_image_set_max_pixels(int64_t n) {
    __atomic_store_n(&max_pixels, n, __ATOMIC_RELAXED);
}
int64_t dl_image_get_max_pixels(void) {
    return __atomic_load_n(&max_pixels, __ATOMIC_RELAXED);
}

int dl_image_check_limit(const char *name, int w, int h) {
    int64_t lim = dl_image_get_max_pixels();
    if (w <= 0 || h <= 0) return dl_error("image: '%s': invalid image size %dx%d", name, w, h);
    int64_t px = (int64_t)w * h;
    if (lim > 0 && px > lim)
        return dl_error("image: '%s': image size %dx%d (%lld pixels) exceeds the limit of %lld "
                        "pixels (a decompression bomb?); raise it with dl.image.set_max_pixels",
                        name, w, h, (long long)px, (long long)lim);
    return 0;
}

static dl_image_format sniff(const uint8_t *buf, size_t n) {
    if (n >= 3 && buf[0] == 0xFF && buf[1] == 0xD8 && buf[2] == 0xFF) return DL_IMAGE_JPEG;
    static const uint8_t png_sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
    if (n >= 8 && memcmp(buf, png_sig, 8) == 0) return DL_IMAGE_PNG;
    return DL_IMAGE_UNKNOWN;
}

static int not_an_image(const uint8_t *buf, size_t n, const char *name) {
    (void)buf;
    if (n == 0) return dl_error("image: '%s': empty file (0 bytes)", name);
    return dl_error("image: '%s': not a JPEG or PNG image (unrecognised file signature)", name);
}

int dl_image_probe(const uint8_t *buf, size_t n, const char *name, dl_image_info *info) {
    memset(info, 0, sizeof *info);
    switch (sniff(buf, n)) {
    case DL_IMAGE_JPEG: return dl_jpeg_probe(buf, n, name, info);
    case DL_IMAGE_PNG: return dl_png_probe(buf, n, name, info);
    default: return not_an_image(buf, n, name);
    }
}

int dl_image_decode(const uint8_t *buf, size_t n, const char *name, int channels, int scale_denom,
                    dl_image *out, int *applied_denom) {
    memset(out, 0, sizeof *out);
    if (applied_denom) *applied_denom = 1;
    if (channels != 1 && channels != 3)
        return dl_error("image: '%s': channels must be 1 or 3, got %d", name, channels);
    if (scale_denom != 1 && scale_denom != 2 && scale_denom != 4 && scale_denom != 8)
        return dl_error("image: scale must be 1, 2, 4 or 8, got %d", scale_denom);
    switch (sniff(buf, n)) {
    case DL_IMAGE_JPEG:
        if (applied_denom) *applied_denom = scale_denom;
        return dl_jpeg_decode(buf, n, name, channels, scale_denom, out);
    case DL_IMAGE_PNG: return dl_png_decode(buf, n, name, channels, out);
    default: return not_an_image(buf, n, name);
    }
}

int dl_image_decode_region(const uint8_t *buf, size_t n, const char *name, int channels,
                           int scale_denom, int x0, int y0, int x1, int y1, dl_image *out, int *ox,
                           int *oy) {
    memset(out, 0, sizeof *out);
    *ox = *oy = 0;
    if (channels != 1 && channels != 3)
        return dl_error("image: '%s': channels must be 1 or 3, got %d", name, channels);
    if (scale_denom != 1 && scale_denom != 2 && scale_denom != 4 && scale_denom != 8)
        return dl_error("image: scale must be 1, 2, 4 or 8, got %d", scale_denom);
    switch (sniff(buf, n)) {
    case DL_IMAGE_JPEG:
        return dl_jpeg_decode_region(buf, n, name, channels, scale_denom, x0, y0, x1, y1, out, ox,
                                     oy);
    case DL_IMAGE_PNG: return dl_png_decode(buf, n, name, channels, out);
    default: return not_an_image(buf, n, name);
    }
}

int dl_image_pick_scale(int w, int h, double need_w, double need_h) {
    int best = 1;
    for (int d = 2; d <= 8; d *= 2) {
        int sw = (w + d - 1) / d, sh = (h + d - 1) / d;
        if (sw >= need_w && sh >= need_h) best = d;
    }
    return best;
}

void dl_image_free(dl_image *img) {
    if (!img) return;
    free(img->data);
    img->data = NULL;
}

int dl_file_read(const char *path, uint8_t **buf, size_t *n) {
    *buf = NULL;
    *n = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return dl_error("image: cannot open '%s': %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return dl_error("image: '%s' is not a regular file", path);
    }
    if (st.st_size == 0) {
        close(fd);
        return dl_error("image: '%s': empty file (0 bytes)", path);
    }
    size_t size = (size_t)st.st_size;
    uint8_t *p = malloc(size);
    if (!p) {
        close(fd);
        return dl_error("image: '%s': out of memory reading %zu bytes", path, size);
    }
    size_t got = 0;
    while (got < size) {
        ssize_t r = read(fd, p + got, size - got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            int e = errno;
            free(p);
            close(fd);
            return dl_error("image: error reading '%s': %s", path,
                            r == 0 ? "unexpected end of file" : strerror(e));
        }
        got += (size_t)r;
    }
    close(fd);
    *buf = p;
    *n = size;
    return 0;
}

int dl_file_write(const char *path, const uint8_t *buf, size_t n) {
    size_t len = strlen(path);
    char *tmp = malloc(len + 16);
    if (!tmp) return dl_error("image.save: out of memory");
    snprintf(tmp, len + 16, "%s.tmpXXXXXX", path);
    int fd = mkstemp(tmp);
    if (fd < 0) {
        int e = errno;
        free(tmp);
        return dl_error("image.save: cannot write '%s': %s", path, strerror(e));
    }
    size_t done = 0;
    while (done < n) {
        ssize_t w = write(fd, buf + done, n - done);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            int e = errno;
            close(fd);
            unlink(tmp);
            free(tmp);
            return dl_error("image.save: error writing '%s': %s", path, strerror(e));
        }
        done += (size_t)w;
    }
    fchmod(fd, 0644);
    if (close(fd) != 0 || rename(tmp, path) != 0) {
        int e = errno;
        unlink(tmp);
        free(tmp);
        return dl_error("image.save: cannot write '%s': %s", path, strerror(e));
    }
    free(tmp);
    return 0;
}
