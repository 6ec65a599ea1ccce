/* safetensors.c - the safetensors reader and writer of safetensors.h.
 * Invariants: a loaded file is validated completely (header, every entry,
 * exact coverage of the data) before any tensor is made, so a bad file leaves
 * nothing behind; views hold one reference each on the shared mapping; the
 * writer never touches the destination path until the complete file is on
 * disk under a temporary name. */
#include "safetensors.h"
#include "io/json.h"
#include "core/strbuf.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors.c assumes a little-endian host"
#endif

/* --- dtypes ---------------------------------------------------------------- */

static const char *const st_names[DL_DTYPE_COUNT] = {
    [DL_DTYPE_F32] = "F32",   [DL_DTYPE_F64] = "F64",   [DL_DTYPE_F16] = "F16",
    [DL_DTYPE_BF16] = "BF16", [DL_DTYPE_I64] = "I64",   [DL_DTYPE_I32] = "I32",
    [DL_DTYPE_U8] = "U8",     [DL_DTYPE_BOOL] = "BOOL",
};

const char *dl_safetensors_dtype_name(dl_dtype t) {
    return (unsigned)t < DL_DTYPE_COUNT ? st_names[t] : "?";
}

int dl_safetensors_dtype_parse(const char *s, dl_dtype *out) {
    for (int i = 0; i < DL_DTYPE_COUNT; i++)
        if (strcmp(s, st_names[i]) == 0) {
            *out = (dl_dtype)i;
            return 0;
        }
    return -1;
}

/* --- the shared mapping ------------------------------------------------------ */

typedef struct {
    void *base;
    size_t len;
    int refcount; /* atomic: the loader's + one per view */
} st_mapping;

static void mapping_release(st_mapping *m) {
    if (__atomic_sub_fetch(&m->refcount, 1, __ATOMIC_ACQ_REL) != 0) return;
    munmap(m->base, m->len);
    free(m);
}

/* storage deleter of a view: drops that view's reference on the mapping */
static void mapping_deleter(void *data, void *ctx) {
    (void)data;
    mapping_release(ctx);
}

/* --- reading ------------------------------------------------------------------- */

typedef struct {
    const char *name; /* points into the parsed JSON */
    size_t name_len;
    dl_dtype dtype;
    int ndim;
    int64_t shape[DL_MAX_DIMS];
    uint64_t begin, end;
} st_entry;

/* Sets the error "<verb>: <path>: <message>" (verb: "load" or "save");
 * returns -1. */
DL_PRINTF(3, 4) static int path_fail(const char *verb, const char *path, const char *fmt, ...) {
    char prefix[320];
    snprintf(prefix, sizeof prefix, "%s: %s", verb, path);
    va_list ap;
    va_start(ap, fmt);
    dl_verror(prefix, fmt, ap);
    va_end(ap);
    return -1;
}

/* A non-negative JSON integer into *out; -1 when v is anything else. */
static int json_uint(const dl_json *v, uint64_t *out) {
    if (v->type != DL_JSON_NUMBER || !v->is_integer || v->int_overflow || v->integer < 0) return -1;
    *out = (uint64_t)v->integer;
    return 0;
}

static void json_num_str(const dl_json *v, char *buf, size_t n) {
    if (v->type != DL_JSON_NUMBER)
        snprintf(buf, n, "a %s", dl_json_type_name(v->type));
    else if (v->is_integer && !v->int_overflow)
        snprintf(buf, n, "%" PRId64, v->integer);
    else
        snprintf(buf, n, "%g", v->number);
}

/* Validates one header entry into e (name already set). */
static int parse_entry(const char *path, const dl_json *v, st_entry *e) {
    const char *nm = e->name;
    if (v->type != DL_JSON_OBJECT)
        return path_fail("load", path, "entry for tensor '%s' is a %s, not an object", nm,
                         dl_json_type_name(v->type));
    const dl_json *dt = dl_json_get(v, "dtype"), *sh = dl_json_get(v, "shape"),
                  *off = dl_json_get(v, "data_offsets");
    if (!dt) return path_fail("load", path, "tensor '%s' has no \"dtype\"", nm);
    if (!sh) return path_fail("load", path, "tensor '%s' has no \"shape\"", nm);
    if (!off) return path_fail("load", path, "tensor '%s' has no \"data_offsets\"", nm);
    if (dt->type != DL_JSON_STRING)
        return path_fail("load", path, "tensor '%s': \"dtype\" is a %s, not a string", nm,
                         dl_json_type_name(dt->type));
    if (dl_safetensors_dtype_parse(dt->str, &e->dtype))
        return path_fail("load", path,
                         "tensor '%s' has dtype '%s', which dlua does not support (supported: "
                         "F32 F64 F16 BF16 I64 I32 U8 BOOL)",
                         nm, dt->str);
    if (sh->type != DL_JSON_ARRAY)
        return path_fail("load", path, "tensor '%s': \"shape\" is a %s, not an array", nm,
                         dl_json_type_name(sh->type));
    if (sh->count > DL_MAX_DIMS)
        return path_fail("load", path, "tensor '%s' has %zu dimensions; at most %d are supported",
                         nm, sh->count, DL_MAX_DIMS);
    e->ndim = (int)sh->count;
    uint64_t numel = 1;
    int overflow = 0, has_zero = 0;
    for (int i = 0; i < e->ndim; i++) {
        uint64_t d;
        if (json_uint(sh->items[i], &d)) {
            char buf[64];
            json_num_str(sh->items[i], buf, sizeof buf);
            return path_fail("load", path,
                             "tensor '%s': shape entry %d is %s, not a non-negative integer", nm,
                             i + 1, buf);
        }
        e->shape[i] = (int64_t)d;
        if (d == 0)
            has_zero = 1;
        else if (__builtin_mul_overflow(numel, d, &numel))
            overflow = 1;
    }
    uint64_t nbytes = 0;
    char shape_buf[256];
    dl_shape_str(e->ndim, e->shape, shape_buf, sizeof shape_buf);
    /* a shape containing 0 has no bytes however large its other sizes */
    if (!has_zero && (overflow || numel > (uint64_t)INT64_MAX ||
                      __builtin_mul_overflow(numel, (uint64_t)dl_dtype_size(e->dtype), &nbytes)))
        return path_fail("load", path,
                         "tensor '%s': shape %s is too large (its byte count overflows)", nm,
                         shape_buf);
    if (off->type != DL_JSON_ARRAY || off->count != 2)
        return path_fail("load", path,
                         "tensor '%s': \"data_offsets\" must be an array of 2 integers", nm);
    if (json_uint(off->items[0], &e->begin) || json_uint(off->items[1], &e->end)) {
        char b0[64], b1[64];
        json_num_str(off->items[0], b0, sizeof b0);
        json_num_str(off->items[1], b1, sizeof b1);
        return path_fail("load", path,
                         "tensor '%s': data_offsets [%s, %s] are not non-negative integers", nm, b0,
                         b1);
    }
    if (e->begin > e->end)
        return path_fail("load", path,
                         "tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64
                         "] begin after they end",
                         nm, e->begin, e->end);
    if (e->end - e->begin != nbytes)
        return path_fail("load", path,
                         "tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64 "] hold %" PRIu64
                         " bytes but shape %s of %s needs %" PRIu64,
                         nm, e->begin, e->end, e->end - e->begin, shape_buf, dt->str, nbytes);
    return 0;
}

/* Byte order of two names (not NUL-terminated), a prefix first. */
static int cmp_bytes(const char *x, size_t nx, const char *y, size_t ny) {
    int c = memcmp(x, y, nx < ny ? nx : ny);
    if (c) return c;
    return (nx > ny) - (nx < ny);
}

static int cmp_name(const void *a, const void *b) {
    const st_entry *x = *(st_entry *const *)a, *y = *(st_entry *const *)b;
    return cmp_bytes(x->name, x->name_len, y->name, y->name_len);
}

static int cmp_offsets(const void *a, const void *b) {
    const st_entry *x = *(st_entry *const *)a, *y = *(st_entry *const *)b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return 0;
}

static char *dup_bytes(const char *s, size_t n) {
    char *d = malloc(n + 1);
    if (d) {
        memcpy(d, s, n);
        d[n] = '\0';
    }
    return d;
}

/* Checks names are unique and that the entries tile [0, data_size) exactly.
 * Sorts order[] by offsets on success. */
static int check_layout(const char *path, st_entry **order, size_t n, uint64_t data_size) {
    qsort(order, n, sizeof *order, cmp_name);
    for (size_t i = 1; i < n; i++)
        if (cmp_name(&order[i - 1], &order[i]) == 0)
            return path_fail("load", path, "duplicate tensor name '%s'", order[i]->name);
    qsort(order, n, sizeof *order, cmp_offsets);
    uint64_t pos = 0;
    for (size_t i = 0; i < n; i++) {
        const st_entry *e = order[i];
        if (e->end > data_size)
            return path_fail("load", path,
                             "tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64
                             "] run past the end of the data (%" PRIu64 " bytes)",
                             e->name, e->begin, e->end, data_size);
        if (e->begin < pos)
            return path_fail("load", path,
                             "tensor '%s' at [%" PRIu64 ", %" PRIu64
                             ") overlaps tensor '%s' at [%" PRIu64 ", %" PRIu64 ")",
                             e->name, e->begin, e->end, order[i - 1]->name, order[i - 1]->begin,
                             order[i - 1]->end);
        if (e->begin > pos)
            return path_fail("load", path,
                             "data bytes [%" PRIu64 ", %" PRIu64
                             ") are not covered by any tensor (gap before '%s')",
                             pos, e->begin, e->name);
        pos = e->end;
    }
    if (pos != data_size)
        return path_fail("load", path,
                         "data bytes [%" PRIu64 ", %" PRIu64
                         ") are not covered by any tensor (trailing bytes after the last one)",
                         pos, data_size);
    return 0;
}

static int parse_metadata(const char *path, const dl_json *md, dl_safetensors *st) {
    if (md->type == DL_JSON_NULL) return 0;
    if (md->type != DL_JSON_OBJECT)
        return path_fail("load", path, "\"__metadata__\" is a %s, not an object of strings",
                         dl_json_type_name(md->type));
    st->meta = calloc(md->count ? md->count : 1, sizeof *st->meta);
    if (!st->meta) return path_fail("load", path, "out of memory");
    for (size_t i = 0; i < md->count; i++) {
        const dl_json *v = md->items[i];
        if (v->type != DL_JSON_STRING)
            return path_fail("load", path, "metadata value for '%s' is a %s, not a string",
                             md->keys[i], dl_json_type_name(v->type));
        for (size_t j = 0; j < i; j++)
            if (md->key_lens[j] == md->key_lens[i] &&
                memcmp(md->keys[j], md->keys[i], md->key_lens[i]) == 0)
                return path_fail("load", path, "duplicate metadata key '%s'", md->keys[i]);
        dl_st_meta *m = &st->meta[st->nmeta];
        m->key = dup_bytes(md->keys[i], md->key_lens[i]);
        m->value = dup_bytes(v->str, v->len);
        if (!m->key || !m->value) {
            free(m->key);
            free(m->value);
            return path_fail("load", path, "out of memory");
        }
        m->key_len = md->key_lens[i];
        m->value_len = v->len;
        st->nmeta++;
    }
    return 0;
}

/* Makes the tensor for a validated entry: a view on the mapping when aligned. */
static dl_tensor *make_tensor(const char *path, const st_entry *e, char *data, st_mapping *m) {
    size_t nbytes = (size_t)(e->end - e->begin), isz = dl_dtype_size(e->dtype);
    char *p = data + e->begin;
    if (nbytes == 0 || ((uintptr_t)p % isz) != 0) {
        dl_tensor *t = dl_tensor_empty(e->ndim, e->shape, e->dtype, DL_CPU);
        if (t && nbytes) memcpy(t->storage->data, p, nbytes);
        if (!t) path_fail("load", path, "tensor '%s': %s", e->name, dl_last_error());
        return t;
    }
    __atomic_add_fetch(&m->refcount, 1, __ATOMIC_RELAXED);
    dl_storage *s = dl_storage_wrap(p, nbytes, DL_CPU, mapping_deleter, m);
    if (!s) {
        mapping_release(m);
        path_fail("load", path, "out of memory");
        return NULL;
    }
    int64_t strides[DL_MAX_DIMS];
    dl_contiguous_strides(e->ndim, e->shape, strides);
    dl_tensor *t = dl_tensor_new_view(s, 0, e->ndim, e->shape, strides, e->dtype);
    dl_storage_release(s); /* the view holds it now (or, on failure, it goes) */
    if (!t) path_fail("load", path, "out of memory");
    return t;
}

static dl_safetensors *load_mapped(const char *path, char *base, size_t size, st_mapping *m) {
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | (unsigned char)base[i];
    if (hlen > DL_SAFETENSORS_MAX_HEADER) {
        /* another kind of file (a PNG, a .pth) reads as a huge length */
        path_fail("load", path,
                  "header length %" PRIu64 " is too large (the limit is %u bytes; "
                  "not a safetensors file?)",
                  hlen, DL_SAFETENSORS_MAX_HEADER);
        return NULL;
    }
    if (hlen > size - 8) {
        path_fail("load", path,
                  "header length %" PRIu64 " runs past the end of the file (%zu bytes; "
                  "truncated or not a safetensors file?)",
                  hlen, size);
        return NULL;
    }
    const char *hdr = base + 8;
    size_t bad;
    if (!dl_utf8_valid(hdr, (size_t)hlen, &bad)) {
        path_fail("load", path, "header is not valid UTF-8 (at header byte %zu)", bad);
        return NULL;
    }
    dl_json *root = dl_json_parse(hdr, (size_t)hlen);
    if (!root) {
        path_fail("load", path, "header is not valid JSON (%s)", dl_last_error());
        return NULL;
    }
    dl_safetensors *st = calloc(1, sizeof *st);
    st_entry *entries = NULL;
    st_entry **order = NULL;
    size_t n = 0;
    if (!st) goto oom;
    if (root->type != DL_JSON_OBJECT) {
        path_fail("load", path, "header is a JSON %s, not an object",
                  dl_json_type_name(root->type));
        goto fail;
    }
    entries = calloc(root->count ? root->count : 1, sizeof *entries);
    order = calloc(root->count ? root->count : 1, sizeof *order);
    if (!entries || !order) goto oom;
    int have_meta = 0;
    for (size_t i = 0; i < root->count; i++) {
        if (strcmp(root->keys[i], "__metadata__") == 0 && root->key_lens[i] == 12) {
            if (have_meta++) {
                path_fail("load", path, "duplicate \"__metadata__\"");
                goto fail;
            }
            if (parse_metadata(path, root->items[i], st)) goto fail;
            continue;
        }
        st_entry *e = &entries[n];
        e->name = root->keys[i];
        e->name_len = root->key_lens[i];
        if (parse_entry(path, root->items[i], e)) goto fail;
        order[n] = e;
        n++;
    }
    uint64_t data_size = size - 8 - hlen;
    if (check_layout(path, order, n, data_size)) goto fail;
    st->tensors = calloc(n ? n : 1, sizeof *st->tensors);
    if (!st->tensors) goto oom;
    char *data = base + 8 + hlen;
    for (size_t i = 0; i < n; i++) {
        dl_st_tensor *o = &st->tensors[i];
        o->name = dup_bytes(order[i]->name, order[i]->name_len);
        if (!o->name) goto oom;
        o->name_len = order[i]->name_len;
        st->ntensors++;
        o->tensor = make_tensor(path, order[i], data, m);
        if (!o->tensor) goto fail;
    }
    free(entries);
    free(order);
    dl_json_free(root);
    return st;
oom:
    path_fail("load", path, "out of memory");
fail:
    free(entries);
    free(order);
    dl_json_free(root);
    dl_safetensors_free(st);
    return NULL;
}

dl_safetensors *dl_safetensors_load(const char *path) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        path_fail("load", path, "cannot open: %s", strerror(errno));
        return NULL;
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        path_fail("load", path, "cannot stat: %s", strerror(errno));
        close(fd);
        return NULL;
    }
    if (!S_ISREG(sb.st_mode)) {
        path_fail("load", path, "not a regular file");
        close(fd);
        return NULL;
    }
    size_t size = (size_t)sb.st_size;
    if (sb.st_size < 8) {
        path_fail("load", path,
                  "file is %lld bytes, too short for a safetensors header (at least 8 bytes)",
                  (long long)sb.st_size);
        close(fd);
        return NULL;
    }
    /* private and writable: loaded tensors may be modified in place (copy on
     * write); the file itself never changes */
    void *base = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
    int err = errno;
    close(fd);
    if (base == MAP_FAILED) {
        path_fail("load", path, "cannot map the file: %s", strerror(err));
        return NULL;
    }
    st_mapping *m = malloc(sizeof *m);
    if (!m) {
        munmap(base, size);
        path_fail("load", path, "out of memory");
        return NULL;
    }
    m->base = base;
    m->len = size;
    m->refcount = 1; /* the loader's, dropped below */
    dl_safetensors *st = load_mapped(path, base, size, m);
    mapping_release(m);
    return st;
}

void dl_safetensors_free(dl_safetensors *st) {
    if (!st) return;
    for (size_t i = 0; i < st->ntensors; i++) {
        free(st->tensors[i].name);
        dl_tensor_release(st->tensors[i].tensor);
    }
    for (size_t i = 0; i < st->nmeta; i++) {
        free(st->meta[i].key);
        free(st->meta[i].value);
    }
    free(st->tensors);
    free(st->meta);
    free(st);
}

/* --- writing ------------------------------------------------------------------- */

/* A JSON string literal (s is valid UTF-8, checked by the caller). */
static void sb_json_string(dl_strbuf *b, const char *s, size_t n) {
    dl_strbuf_add(b, "\"", 1);
    size_t run = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c != '"' && c != '\\') continue;
        dl_strbuf_add(b, s + run, i - run);
        run = i + 1;
        if (c == '"')
            dl_strbuf_str(b, "\\\"");
        else if (c == '\\')
            dl_strbuf_str(b, "\\\\");
        else if (c == '\n')
            dl_strbuf_str(b, "\\n");
        else if (c == '\t')
            dl_strbuf_str(b, "\\t");
        else if (c == '\r')
            dl_strbuf_str(b, "\\r");
        else
            dl_strbuf_printf(b, "\\u%04x", c);
    }
    dl_strbuf_add(b, s + run, n - run);
    dl_strbuf_add(b, "\"", 1);
}

typedef struct {
    const char *name;
    size_t name_len;
    dl_tensor *t;
    uint64_t begin, end;
} wr_entry;

static int cmp_wr_name(const void *a, const void *b) {
    const wr_entry *x = *(wr_entry *const *)a, *y = *(wr_entry *const *)b;
    return cmp_bytes(x->name, x->name_len, y->name, y->name_len);
}

/* data order: larger elements first (keeps every tensor aligned), then name */
static int cmp_wr_layout(const void *a, const void *b) {
    const wr_entry *x = *(wr_entry *const *)a, *y = *(wr_entry *const *)b;
    size_t sx = dl_dtype_size(x->t->dtype), sy = dl_dtype_size(y->t->dtype);
    if (sx != sy) return sx > sy ? -1 : 1;
    return cmp_wr_name(a, b);
}

/* Builds the padded header for entries (offsets filled in). */
static int build_header(const char *path, dl_strbuf *h, wr_entry **by_name, size_t n, size_t nmeta,
                        const char *const *mk, const size_t *mkl, const char *const *mv,
                        const size_t *mvl) {
    dl_strbuf_str(h, "{");
    int first = 1;
    if (nmeta) {
        dl_strbuf_str(h, "\"__metadata__\":{");
        for (size_t i = 0; i < nmeta; i++) {
            if (i) dl_strbuf_str(h, ",");
            sb_json_string(h, mk[i], mkl ? mkl[i] : strlen(mk[i]));
            dl_strbuf_str(h, ":");
            sb_json_string(h, mv[i], mvl ? mvl[i] : strlen(mv[i]));
        }
        dl_strbuf_str(h, "}");
        first = 0;
    }
    for (size_t i = 0; i < n; i++) {
        const wr_entry *e = by_name[i];
        if (!first) dl_strbuf_str(h, ",");
        first = 0;
        sb_json_string(h, e->name, e->name_len);
        dl_strbuf_printf(h, ":{\"dtype\":\"%s\",\"shape\":[",
                         dl_safetensors_dtype_name(e->t->dtype));
        for (int d = 0; d < e->t->ndim; d++)
            dl_strbuf_printf(h, "%s%" PRId64, d ? "," : "", e->t->shape[d]);
        dl_strbuf_printf(h, "],\"data_offsets\":[%" PRIu64 ",%" PRIu64 "]}", e->begin, e->end);
    }
    dl_strbuf_str(h, "}");
    while ((8 + h->len) % 8) dl_strbuf_str(h, " ");
    if (h->oom) return path_fail("save", path, "out of memory building the header");
    return 0;
}

/* Checks names and metadata: UTF-8, no reserved or duplicate names. */
static int check_save_args(const char *path, wr_entry **by_name, size_t n, size_t nmeta,
                           const char *const *mk, const size_t *mkl, const char *const *mv,
                           const size_t *mvl) {
    for (size_t i = 0; i < n; i++) {
        const wr_entry *e = by_name[i];
        if (!dl_utf8_valid(e->name, e->name_len, NULL))
            return path_fail("save", path, "tensor name '%s' is not valid UTF-8", e->name);
        if (e->name_len == 12 && memcmp(e->name, "__metadata__", 12) == 0)
            return path_fail("save", path, "'__metadata__' is reserved and cannot name a tensor");
        if (i && cmp_wr_name(&by_name[i - 1], &by_name[i]) == 0)
            return path_fail("save", path, "duplicate tensor name '%s'", e->name);
    }
    for (size_t i = 0; i < nmeta; i++) {
        size_t kl = mkl ? mkl[i] : strlen(mk[i]), vl = mvl ? mvl[i] : strlen(mv[i]);
        if (!dl_utf8_valid(mk[i], kl, NULL))
            return path_fail("save", path, "metadata key '%s' is not valid UTF-8", mk[i]);
        if (!dl_utf8_valid(mv[i], vl, NULL))
            return path_fail("save", path, "metadata value for '%s' is not valid UTF-8", mk[i]);
        for (size_t j = 0; j < i; j++) {
            size_t jl = mkl ? mkl[j] : strlen(mk[j]);
            if (jl == kl && memcmp(mk[j], mk[i], kl) == 0)
                return path_fail("save", path, "duplicate metadata key '%s'", mk[i]);
        }
    }
    return 0;
}

/* Writes one tensor's bytes (through a CPU, contiguous copy when needed). */
static int write_tensor(const char *path, FILE *f, dl_tensor *t, const char *name) {
    if (dl_tensor_numel(t) == 0) return 0;
    dl_tensor *h = dl_tensor_to_device(t, DL_CPU);
    dl_tensor *c = h ? dl_tensor_contiguous(h) : NULL;
    dl_tensor_release(h);
    if (!c) return path_fail("save", path, "tensor '%s': %s", name, dl_last_error());
    size_t nbytes = (size_t)dl_tensor_numel(c) * dl_dtype_size(c->dtype);
    size_t w = fwrite(dl_tensor_data_ptr(c), 1, nbytes, f);
    int err = errno;
    dl_tensor_release(c);
    if (w != nbytes) return path_fail("save", path, "cannot write: %s", strerror(err ? err : EIO));
    return 0;
}

/* The folder holding path into dir (size bytes): "." for a bare name, "/"
 * for a file at the root.  Returns path's last component. */
static const char *parent_dir(const char *path, char *dir, size_t size) {
    const char *slash = strrchr(path, '/');
    if (!slash)
        snprintf(dir, size, ".");
    else if (slash == path)
        snprintf(dir, size, "/");
    else
        snprintf(dir, size, "%.*s", (int)(slash - path), path);
    return slash ? slash + 1 : path;
}

/* Removes "<path>.tmp.<pid>" files left by writers that were killed mid-write
 * (SIGKILL, power loss): their process no longer exists.  Without this every
 * crash during a checkpoint write leaves a checkpoint-sized file behind, and a
 * run that crashes and resumes often fills the disk.  A live writer's file
 * (another process saving to the same path) is left alone. */
static void remove_stale_temporaries(const char *path) {
    char dir[4096];
    const char *base = parent_dir(path, dir, sizeof dir);
    size_t bl = strlen(base);
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        const char *n = e->d_name;
        if (strncmp(n, base, bl) != 0 || strncmp(n + bl, ".tmp.", 5) != 0) continue;
        char *end;
        long pid = strtol(n + bl + 5, &end, 10);
        if (*end || pid <= 0 || pid == (long)getpid()) continue;
        if (kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue; /* alive, or not ours to judge */
        char full[4096 + 256];
        snprintf(full, sizeof full, "%s/%s", dir, n);
        unlink(full);
    }
    closedir(d);
}

/* fsync of the directory holding path, so the rename itself is durable. */
static void sync_parent_dir(const char *path) {
    char dir[4096];
    parent_dir(path, dir, sizeof dir);
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        fsync(fd); /* best effort: some file systems refuse it */
        close(fd);
    }
}

int dl_safetensors_save(const char *path, size_t n, const char *const *names,
                        const size_t *name_lens, dl_tensor *const *tensors, size_t nmeta,
                        const char *const *meta_keys, const size_t *meta_key_lens,
                        const char *const *meta_values, const size_t *meta_value_lens) {
    wr_entry *entries = calloc(n ? n : 1, sizeof *entries);
    wr_entry **by_name = calloc(n ? n : 1, sizeof *by_name);
    wr_entry **layout = calloc(n ? n : 1, sizeof *layout);
    dl_strbuf h = {0};
    char *tmp = NULL;
    FILE *f = NULL;
    int rc = -1;
    if (!entries || !by_name || !layout) {
        path_fail("save", path, "out of memory");
        goto done;
    }
    for (size_t i = 0; i < n; i++) {
        entries[i] =
            (wr_entry){names[i], name_lens ? name_lens[i] : strlen(names[i]), tensors[i], 0, 0};
        by_name[i] = layout[i] = &entries[i];
    }
    qsort(by_name, n, sizeof *by_name, cmp_wr_name);
    if (check_save_args(path, by_name, n, nmeta, meta_keys, meta_key_lens, meta_values,
                        meta_value_lens))
        goto done;
    qsort(layout, n, sizeof *layout, cmp_wr_layout);
    uint64_t pos = 0;
    for (size_t i = 0; i < n; i++) {
        dl_tensor *t = layout[i]->t;
        layout[i]->begin = pos;
        pos += (uint64_t)dl_tensor_numel(t) * dl_dtype_size(t->dtype);
        layout[i]->end = pos;
    }
    if (build_header(path, &h, by_name, n, nmeta, meta_keys, meta_key_lens, meta_values,
                     meta_value_lens))
        goto done;

    size_t tlen = strlen(path) + 32;
    tmp = malloc(tlen);
    if (!tmp) {
        path_fail("save", path, "out of memory");
        goto done;
    }
    remove_stale_temporaries(path);
    snprintf(tmp, tlen, "%s.tmp.%ld", path, (long)getpid());
    f = fopen(tmp, "wb");
    if (!f) {
        path_fail("save", path, "cannot write: %s", strerror(errno));
        goto done;
    }
    unsigned char len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (unsigned char)((uint64_t)h.len >> (8 * i));
    errno = 0;
    if (fwrite(len8, 1, 8, f) != 8 || fwrite(h.s, 1, h.len, f) != h.len) {
        path_fail("save", path, "cannot write: %s", strerror(errno ? errno : EIO));
        goto done;
    }
    for (size_t i = 0; i < n; i++) {
        errno = 0;
        if (write_tensor(path, f, layout[i]->t, layout[i]->name)) goto done;
    }
    errno = 0;
    if (fflush(f) != 0 || fsync(fileno(f)) != 0) {
        path_fail("save", path, "cannot write: %s", strerror(errno ? errno : EIO));
        goto done;
    }
    FILE *closing = f;
    f = NULL;
    if (fclose(closing) != 0) {
        path_fail("save", path, "cannot write: %s", strerror(errno));
        goto done;
    }
    if (rename(tmp, path) != 0) {
        path_fail("save", path, "cannot rename '%s' to it: %s", tmp, strerror(errno));
        goto done;
    }
    sync_parent_dir(path);
    rc = 0;
done:
    if (f) fclose(f);
    if (rc != 0 && tmp) {
        unlink(tmp); /* may not exist: harmless */
        /* say what the user most wants to know after a failed checkpoint write
         * (a full disk): the previous file at path is still there and whole */
        struct stat st;
        if (stat(path, &st) == 0 && S_ISREG(st.st_mode)) {
            char msg[1024];
            snprintf(msg, sizeof msg, "%s (the previous '%s' is intact)", dl_last_error(), path);
            dl_error("%s", msg);
        }
    }
    free(tmp);
    free(h.s);
    free(entries);
    free(by_name);
    free(layout);
    return rc;
}
