/* idx.c - IDX reading and writing through zlib (see idx.h). */
#include "idx.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

static int type_info(int code, dl_dtype *dt, int *size) {
    switch (code) {
    case 0x08: *dt = DL_DTYPE_U8, *size = 1; return 0;
    case 0x09: *dt = DL_DTYPE_I32, *size = 1; return 0;
    case 0x0B: *dt = DL_DTYPE_I32, *size = 2; return 0;
    case 0x0C: *dt = DL_DTYPE_I32, *size = 4; return 0;
    case 0x0D: *dt = DL_DTYPE_F32, *size = 4; return 0;
    case 0x0E: *dt = DL_DTYPE_F64, *size = 8; return 0;
    default: return -1;
    }
}

static int read_exact(gzFile f, void *buf, size_t n, size_t *got) {
    size_t done = 0;
    while (done < n) {
        unsigned chunk = n - done > (1u << 30) ? (1u << 30) : (unsigned)(n - done);
        int r = gzread(f, (char *)buf + done, chunk);
        if (r <= 0) break;
        done += (size_t)r;
    }
    if (got) *got = done;
    return done == n ? 0 : -1;
}

dl_tensor *dl_idx_read(const char *path) {
    gzFile f = gzopen(path, "rb");
    if (!f) {
        dl_error("idx: cannot open '%s': %s", path, strerror(errno ? errno : ENOENT));
        return NULL;
    }
    gzbuffer(f, 1 << 17);
    uint8_t head[4];
    dl_tensor *t = NULL;
    size_t got;
    if (read_exact(f, head, 4, &got)) {
        dl_error("idx: '%s': file too short for an IDX header", path);
        goto done;
    }
    dl_dtype dt;
    int es;
    if (head[0] != 0 || head[1] != 0 || type_info(head[2], &dt, &es) || head[3] < 1 ||
        head[3] > DL_MAX_DIMS) {
        dl_error("idx: '%s': not an IDX file (bad magic %02x %02x %02x %02x)", path, head[0],
                 head[1], head[2], head[3]);
        goto done;
    }
    int nd = head[3];
    int64_t shape[DL_MAX_DIMS];
    uint64_t numel = 1, span = 1; /* span: the product of the non-zero sizes */
    for (int i = 0; i < nd; i++) {
        uint8_t b[4];
        if (read_exact(f, b, 4, NULL)) {
            dl_error("idx: '%s': truncated header", path);
            goto done;
        }
        shape[i] =
            (int64_t)((uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | b[3]);
        /* checked before multiplying, so nothing wraps; the non-zero sizes
         * count too, so a zero size cannot hide huge ones (numel <= span) */
        if (shape[i] && span > ((uint64_t)1 << 40) / (uint64_t)shape[i]) {
            dl_error("idx: '%s': implausible shape (more than 2^40 elements)", path);
            goto done;
        }
        numel *= (uint64_t)shape[i];
        if (shape[i]) span *= (uint64_t)shape[i];
    }
    size_t nbytes = (size_t)numel * (size_t)es;
    /* Nothing is allocated beyond what the file can hold: a plain file must
     * have the bytes; a gzip stream inflates at most ~1032:1 (deflate's limit),
     * so a tiny file claiming gigabytes is refused before the allocation. */
    struct stat sb;
    if (stat(path, &sb) == 0 && S_ISREG(sb.st_mode)) {
        uint64_t have = (uint64_t)sb.st_size, hdr = 4 + 4 * (uint64_t)nd;
        int direct = gzdirect(f);
        uint64_t cap = direct ? (have > hdr ? have - hdr : 0) : have * 1032u + 4096u;
        if ((uint64_t)nbytes > cap) {
            if (direct)
                dl_error("idx: '%s': truncated (expected %zu bytes of data, the file has %" PRIu64
                         " after its %" PRIu64 "-byte header)",
                         path, nbytes, cap, hdr);
            else
                dl_error("idx: '%s': truncated (expected %zu bytes of data, more than a %" PRIu64
                         "-byte gzip file can hold)",
                         path, nbytes, have);
            goto done;
        }
    }
    uint8_t *raw = malloc(nbytes ? nbytes : 1);
    if (!raw) {
        dl_error("idx: '%s': out of memory for %zu bytes", path, nbytes);
        goto done;
    }
    if (read_exact(f, raw, nbytes, &got)) {
        dl_error("idx: '%s': truncated (expected %zu bytes of data, got %zu)", path, nbytes, got);
        free(raw);
        goto done;
    }
    t = dl_tensor_empty(nd, shape, dt, DL_CPU);
    if (t) {
        void *o = t->storage->data;
        for (size_t i = 0; i < numel; i++) {
            const uint8_t *p = raw + i * (size_t)es;
            switch (head[2]) {
            case 0x08: ((uint8_t *)o)[i] = p[0]; break;
            case 0x09: ((int32_t *)o)[i] = (int8_t)p[0]; break;
            case 0x0B: ((int32_t *)o)[i] = (int16_t)((uint16_t)p[0] << 8 | p[1]); break;
            case 0x0C:
                ((int32_t *)o)[i] = (int32_t)((uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 |
                                              (uint32_t)p[2] << 8 | p[3]);
                break;
            case 0x0D: {
                uint32_t u =
                    (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
                memcpy((float *)o + i, &u, 4);
                break;
            }
            default: {
                uint64_t u = 0;
                for (int k = 0; k < 8; k++) u = u << 8 | p[k];
                memcpy((double *)o + i, &u, 8);
                break;
            }
            }
        }
    }
    free(raw);
done:
    gzclose(f);
    return t;
}

int dl_idx_write(const char *path, dl_tensor *t, int gz) {
    int code, es;
    switch (t->dtype) {
    case DL_DTYPE_U8: code = 0x08, es = 1; break;
    case DL_DTYPE_I32: code = 0x0C, es = 4; break;
    case DL_DTYPE_F32: code = 0x0D, es = 4; break;
    case DL_DTYPE_F64: code = 0x0E, es = 8; break;
    default: return dl_error("idx: cannot write %s tensors", dl_dtype_name(t->dtype));
    }
    if (t->ndim < 1) return dl_error("idx: cannot write a 0-dim tensor");
    dl_tensor *c = dl_tensor_contiguous(t);
    if (!c) return -1;
    gzFile f = gzopen(path, gz ? "wb6" : "wbT");
    if (!f) {
        dl_tensor_release(c);
        return dl_error("idx: cannot write '%s': %s", path, strerror(errno ? errno : EIO));
    }
    uint8_t head[4 + 4 * DL_MAX_DIMS] = {0, 0, (uint8_t)code, (uint8_t)t->ndim};
    for (int i = 0; i < t->ndim; i++) {
        uint32_t s = (uint32_t)t->shape[i];
        head[4 + 4 * i] = (uint8_t)(s >> 24);
        head[5 + 4 * i] = (uint8_t)(s >> 16);
        head[6 + 4 * i] = (uint8_t)(s >> 8);
        head[7 + 4 * i] = (uint8_t)s;
    }
    int ok = gzwrite(f, head, (unsigned)(4 + 4 * t->ndim)) > 0;
    int64_t n = dl_tensor_numel(c);
    const uint8_t *src = dl_tensor_data_ptr(c);
    uint8_t buf[4096];
    size_t k = 0;
    for (int64_t i = 0; i < n && ok; i++) {
        for (int b = 0; b < es; b++) buf[k++] = src[(size_t)i * (size_t)es + (size_t)(es - 1 - b)];
        if (k + 8 > sizeof buf) {
            ok = gzwrite(f, buf, (unsigned)k) > 0;
            k = 0;
        }
    }
    if (ok && k) ok = gzwrite(f, buf, (unsigned)k) > 0;
    dl_tensor_release(c);
    if (gzclose(f) != Z_OK || !ok) return dl_error("idx: error writing '%s'", path);
    return 0;
}
