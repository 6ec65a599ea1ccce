/* onnx.c - ONNX model and tensor files (see onnx.h): a bounded decoder on top
 * of protobuf-c, TensorProto <-> dl tensor, and the encoder.
 *
 * Invariants: the schema walk (check_message) runs before protobuf-c sees the
 * bytes, so protobuf-c's recursion is bounded by DL_ONNX_MAX_DEPTH; its
 * allocations come from a budget (budget_alloc) so a small file cannot make
 * it allocate without bound; every tensor's sizes are checked against the
 * bytes present before a dl tensor is made. */
#include "io/onnx.h"

#include "core/error.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* ONNX TensorProto.DataType values (onnx.proto) and their names. */
static const char *const type_names[] = {
    "UNDEFINED",      "FLOAT",      "UINT8",          "INT8",       "UINT16",   "INT16",
    "INT32",          "INT64",      "STRING",         "BOOL",       "FLOAT16",  "DOUBLE",
    "UINT32",         "UINT64",     "COMPLEX64",      "COMPLEX128", "BFLOAT16", "FLOAT8E4M3FN",
    "FLOAT8E4M3FNUZ", "FLOAT8E5M2", "FLOAT8E5M2FNUZ", "UINT4",      "INT4"};

const char *dl_onnx_type_name(int elem_type) {
    if (elem_type < 0 || elem_type >= (int)(sizeof type_names / sizeof *type_names)) return "?";
    return type_names[elem_type];
}

int dl_onnx_dtype(int elem_type, dl_dtype *dtype) {
    switch (elem_type) {
    case 1: *dtype = DL_DTYPE_F32; return 0;
    case 2: *dtype = DL_DTYPE_U8; return 0;
    case 6: *dtype = DL_DTYPE_I32; return 0;
    case 7: *dtype = DL_DTYPE_I64; return 0;
    case 9: *dtype = DL_DTYPE_BOOL; return 0;
    case 10: *dtype = DL_DTYPE_F16; return 0;
    case 11: *dtype = DL_DTYPE_F64; return 0;
    case 16: *dtype = DL_DTYPE_BF16; return 0;
    default: return -1;
    }
}

int dl_onnx_elem_type(dl_dtype dtype) {
    switch (dtype) {
    case DL_DTYPE_F32: return 1;
    case DL_DTYPE_U8: return 2;
    case DL_DTYPE_I32: return 6;
    case DL_DTYPE_I64: return 7;
    case DL_DTYPE_BOOL: return 9;
    case DL_DTYPE_F16: return 10;
    case DL_DTYPE_F64: return 11;
    case DL_DTYPE_BF16: return 16;
    default: return 0;
    }
}

int dl_onnx_read_file(const char *path, uint8_t **buf, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return dl_error("onnx: cannot open '%s': %s", path, strerror(errno));
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
        fclose(f);
        return dl_error("onnx: '%s' is not a regular file", path);
    }
    if ((uint64_t)st.st_size > DL_ONNX_MAX_BYTES) {
        fclose(f);
        return dl_error("onnx: '%s' is %lld bytes, more than protobuf's limit of 2 GiB "
                        "(large models keep their weights as external data, which dlua "
                        "does not read)",
                        path, (long long)st.st_size);
    }
    size_t n = (size_t)st.st_size;
    uint8_t *b = malloc(n ? n : 1);
    if (!b) {
        fclose(f);
        return dl_error("onnx: out of memory reading '%s' (%zu bytes)", path, n);
    }
    if (n && fread(b, 1, n, f) != n) {
        free(b);
        fclose(f);
        return dl_error("onnx: cannot read '%s'", path);
    }
    fclose(f);
    *buf = b;
    *len = n;
    return 0;
}

#ifdef DL_WITH_ONNX

const char *dl_onnx_missing(void) {
    return NULL;
}

/* --- the schema walk ------------------------------------------------------------ */

/* Reads a varint at *pos (< n); -1 when it runs past n or over 10 bytes. */
static int read_varint(const uint8_t *p, size_t n, size_t *pos, uint64_t *v) {
    uint64_t r = 0;
    for (int shift = 0; shift < 70; shift += 7) {
        if (*pos >= n) return -1;
        uint8_t b = p[(*pos)++];
        r |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *v = r;
            return 0;
        }
    }
    return -1;
}

/* Walks the wire format of one message of type d in p[0..n): every field's
 * extent inside the message, submessages (by the schema) recursively to at
 * most DL_ONNX_MAX_DEPTH.  base is p's offset in the file, for messages. */
static int check_message(const uint8_t *p, size_t n, const ProtobufCMessageDescriptor *d, int depth,
                         size_t base, const char *name) {
    if (depth > DL_ONNX_MAX_DEPTH)
        return dl_error("onnx: %s: messages nested deeper than %d at byte %zu", name,
                        DL_ONNX_MAX_DEPTH, base);
    size_t pos = 0;
    while (pos < n) {
        size_t at = pos;
        uint64_t key, v;
        if (read_varint(p, n, &pos, &key))
            return dl_error("onnx: %s: truncated or corrupt protobuf (bad field key at byte %zu)",
                            name, base + at);
        uint32_t tag = (uint32_t)(key >> 3);
        if (tag == 0 || key >> 32)
            return dl_error("onnx: %s: corrupt protobuf (field number %llu at byte %zu)", name,
                            (unsigned long long)(key >> 3), base + at);
        switch (key & 7) {
        case 0:
            if (read_varint(p, n, &pos, &v))
                return dl_error("onnx: %s: truncated or corrupt protobuf (varint at byte %zu)",
                                name, base + at);
            break;
        case 1:
            if (n - pos < 8)
                return dl_error("onnx: %s: truncated protobuf (fixed64 at byte %zu)", name,
                                base + at);
            pos += 8;
            break;
        case 5:
            if (n - pos < 4)
                return dl_error("onnx: %s: truncated protobuf (fixed32 at byte %zu)", name,
                                base + at);
            pos += 4;
            break;
        case 2: {
            if (read_varint(p, n, &pos, &v) || v > n - pos)
                return dl_error("onnx: %s: truncated or corrupt protobuf (a field at byte %zu "
                                "runs past the end of its message)",
                                name, base + at);
            const ProtobufCFieldDescriptor *f = protobuf_c_message_descriptor_get_field(d, tag);
            if (f && f->type == PROTOBUF_C_TYPE_MESSAGE &&
                check_message(p + pos, (size_t)v, f->descriptor, depth + 1, base + pos, name))
                return -1;
            pos += (size_t)v;
            break;
        }
        default:
            return dl_error("onnx: %s: corrupt protobuf (wire type %d at byte %zu)", name,
                            (int)(key & 7), base + at);
        }
    }
    return 0;
}

/* --- protobuf-c's allocations from a budget ----------------------------------------- */

typedef struct {
    size_t left;
    int over;
} budget;

typedef struct {
    size_t size;
    size_t pad; /* keeps the block 16-byte aligned */
} budget_hdr;

static void *budget_alloc(void *data, size_t size) {
    budget *b = data;
    size_t total = size + sizeof(budget_hdr);
    if (total < size || total > b->left) {
        b->over = 1;
        return NULL;
    }
    budget_hdr *h = malloc(total);
    if (!h) return NULL;
    h->size = total;
    b->left -= total;
    return h + 1;
}

static void budget_free(void *data, void *ptr) {
    if (!ptr) return;
    budget *b = data;
    budget_hdr *h = (budget_hdr *)ptr - 1;
    b->left += h->size;
    free(h);
}

/* Every unpacked message is freed with the system allocator's view of the
 * same blocks: the header sits in front of each, so frees go through here. */
static void plain_free(void *data, void *ptr) {
    (void)data;
    if (ptr) free((budget_hdr *)ptr - 1);
}
static void *plain_alloc(void *data, size_t size) {
    (void)data;
    budget_hdr *h = malloc(size + sizeof(budget_hdr));
    if (!h) return NULL;
    h->size = size + sizeof(budget_hdr);
    return h + 1;
}
static ProtobufCAllocator free_allocator = {plain_alloc, plain_free, NULL};

static ProtobufCMessage *decode(const uint8_t *buf, size_t len, const char *name,
                                const ProtobufCMessageDescriptor *d, const char *what) {
    if (len > DL_ONNX_MAX_BYTES) {
        dl_error("onnx: %s: %zu bytes, more than protobuf's limit of 2 GiB", name, len);
        return NULL;
    }
    if (check_message(buf, len, d, 0, 0, name)) return NULL;
    /* a message struct is at most a few hundred bytes and takes at least two
     * bytes of input; arrays and strings take no more than their bytes */
    budget b = {.left = len * 256 + ((size_t)1 << 20), .over = 0};
    ProtobufCAllocator a = {budget_alloc, budget_free, &b};
    ProtobufCMessage *m = protobuf_c_message_unpack(d, &a, len, buf);
    if (!m) {
        if (b.over)
            dl_error("onnx: %s: decoding the %s would take more memory than its size allows", name,
                     what);
        else
            dl_error("onnx: %s: not a valid ONNX %s (protobuf-c could not decode it)", name, what);
    }
    return m;
}

Onnx__ModelProto *dl_onnx_model_decode(const uint8_t *buf, size_t len, const char *name) {
    ProtobufCMessage *m = decode(buf, len, name, &onnx__model_proto__descriptor, "model");
    return (Onnx__ModelProto *)m;
}

void dl_onnx_model_free(Onnx__ModelProto *m) {
    if (m) protobuf_c_message_free_unpacked(&m->base, &free_allocator);
}

Onnx__TensorProto *dl_onnx_tensor_decode(const uint8_t *buf, size_t len, const char *name) {
    ProtobufCMessage *m = decode(buf, len, name, &onnx__tensor_proto__descriptor, "tensor");
    return (Onnx__TensorProto *)m;
}

void dl_onnx_tensor_free(Onnx__TensorProto *t) {
    if (t) protobuf_c_message_free_unpacked(&t->base, &free_allocator);
}

/* --- TensorProto -> dl tensor ------------------------------------------------------- */

static const char *tname(const Onnx__TensorProto *t) {
    return t->name && t->name[0] ? t->name : "(unnamed)";
}

/* Bytes per element in raw_data (0: not a fixed-size type). */
static size_t raw_size(int elem_type) {
    switch (elem_type) {
    case 2:
    case 3:
    case 9: return 1;
    case 4:
    case 5:
    case 10:
    case 16: return 2;
    case 1:
    case 6:
    case 12: return 4;
    case 7:
    case 11:
    case 13:
    case 14: return 8;
    case 15: return 16;
    default: return 0;
    }
}

int dl_onnx_tensor_to_dl(const Onnx__TensorProto *t, dl_tensor **out) {
    const char *nm = tname(t);
    int et = t->has_data_type ? t->data_type : 0;
    if (t->n_external_data ||
        (t->has_data_location && t->data_location == ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL)) {
        const char *loc = "?";
        for (size_t i = 0; i < t->n_external_data; i++)
            if (t->external_data[i]->key && strcmp(t->external_data[i]->key, "location") == 0 &&
                t->external_data[i]->value)
                loc = t->external_data[i]->value;
        return dl_error("onnx: tensor '%s' keeps its data in the external file '%s', which "
                        "dlua does not read (save the model with its weights inside: "
                        "onnx.save_model(m, path, save_as_external_data=False))",
                        nm, loc);
    }
    if (t->segment) return dl_error("onnx: tensor '%s' is segmented, which dlua does not read", nm);
    /* the element count, overflow-checked */
    int64_t numel = 1;
    for (size_t i = 0; i < t->n_dims; i++) {
        int64_t d = t->dims[i];
        if (d < 0) return dl_error("onnx: tensor '%s' has a negative dim %lld", nm, (long long)d);
        if (d && numel > ((int64_t)1 << 40) / d)
            return dl_error("onnx: tensor '%s' has more than 2^40 elements", nm);
        numel *= d;
    }
    /* the data present must match, whatever dlua can hold */
    size_t rs = raw_size(et);
    size_t have;
    const char *field;
    if (t->has_raw_data) {
        if (!rs)
            return dl_error("onnx: tensor '%s' of type %s has raw_data", nm, dl_onnx_type_name(et));
        if (t->raw_data.len != (size_t)numel * rs)
            return dl_error("onnx: tensor '%s': raw_data holds %zu bytes, its %lld elements of %s "
                            "need %zu",
                            nm, t->raw_data.len, (long long)numel, dl_onnx_type_name(et),
                            (size_t)numel * rs);
        have = (size_t)numel;
        field = "raw_data";
    } else {
        switch (et) {
        case 1:
            have = t->n_float_data;
            field = "float_data";
            break;
        case 14:
            have = t->n_float_data / 2;
            field = "float_data";
            break;
        case 2:
        case 3:
        case 4:
        case 5:
        case 6:
        case 9:
        case 10:
        case 16:
            have = t->n_int32_data;
            field = "int32_data";
            break;
        case 7:
            have = t->n_int64_data;
            field = "int64_data";
            break;
        case 11:
            have = t->n_double_data;
            field = "double_data";
            break;
        case 15:
            have = t->n_double_data / 2;
            field = "double_data";
            break;
        case 12:
        case 13:
            have = t->n_uint64_data;
            field = "uint64_data";
            break;
        case 8:
            have = t->n_string_data;
            field = "string_data";
            break;
        default: return dl_error("onnx: tensor '%s' has the unknown data type %d", nm, et);
        }
        if (have != (size_t)numel)
            return dl_error("onnx: tensor '%s': %s holds %zu values, its dims %s %lld", nm, field,
                            have, "need", (long long)numel);
    }
    dl_dtype dt;
    if (dl_onnx_dtype(et, &dt)) {
        dl_error("onnx: tensor '%s' has ONNX type %s, which dlua has no dtype for", nm,
                 dl_onnx_type_name(et));
        return 1;
    }
    if (t->n_dims > DL_MAX_DIMS) {
        dl_error("onnx: tensor '%s' has %zu dims; dlua tensors have at most %d", nm, t->n_dims,
                 DL_MAX_DIMS);
        return 1;
    }
    int64_t shape[DL_MAX_DIMS];
    for (size_t i = 0; i < t->n_dims; i++) shape[i] = t->dims[i];
    dl_tensor *r = dl_tensor_empty((int)t->n_dims, shape, dt, DL_CPU);
    if (!r) return -1;
    uint8_t *dst = dl_tensor_data_ptr(r);
    size_t n = (size_t)numel;
    if (t->has_raw_data) {
        if (n) memcpy(dst, t->raw_data.data, n * rs); /* little-endian host */
    } else {
        for (size_t i = 0; i < n; i++) {
            switch (dt) {
            case DL_DTYPE_F32: ((float *)dst)[i] = t->float_data[i]; break;
            case DL_DTYPE_F64: ((double *)dst)[i] = t->double_data[i]; break;
            case DL_DTYPE_I64: ((int64_t *)dst)[i] = t->int64_data[i]; break;
            case DL_DTYPE_I32: ((int32_t *)dst)[i] = t->int32_data[i]; break;
            case DL_DTYPE_U8: dst[i] = (uint8_t)t->int32_data[i]; break;
            case DL_DTYPE_BOOL: dst[i] = t->int32_data[i] != 0; break;
            case DL_DTYPE_F16:
            case DL_DTYPE_BF16: ((uint16_t *)dst)[i] = (uint16_t)t->int32_data[i]; break;
            default: break;
            }
        }
    }
    *out = r;
    return 0;
}

/* --- dl tensor -> TensorProto, encoding ------------------------------------------------ */

int dl_onnx_tensor_from_dl(dl_tensor *t, Onnx__TensorProto *tp) {
    int et = dl_onnx_elem_type(t->dtype);
    if (!et) return dl_error("onnx: no ONNX type for dtype %s", dl_dtype_name(t->dtype));
    dl_tensor *c = dl_tensor_to_device(t, DL_CPU);
    if (!c) return -1;
    dl_tensor *d = dl_tensor_contiguous(c);
    dl_tensor_release(c);
    if (!d) return -1;
    size_t bytes = (size_t)dl_tensor_numel(d) * dl_dtype_size(d->dtype);
    uint8_t *data = malloc(bytes ? bytes : 1);
    int64_t *dims = malloc(sizeof(int64_t) * (size_t)(d->ndim ? d->ndim : 1));
    if (!data || !dims) {
        free(data);
        free(dims);
        dl_tensor_release(d);
        return dl_error("onnx: out of memory (%zu bytes of tensor data)", bytes);
    }
    if (bytes) memcpy(data, dl_tensor_data_ptr(d), bytes);
    for (int i = 0; i < d->ndim; i++) dims[i] = d->shape[i];
    tp->n_dims = (size_t)d->ndim;
    tp->dims = dims;
    tp->has_data_type = 1;
    tp->data_type = et;
    tp->has_raw_data = 1;
    tp->raw_data.len = bytes;
    tp->raw_data.data = data;
    dl_tensor_release(d);
    return 0;
}

uint8_t *dl_onnx_model_encode(const Onnx__ModelProto *m, size_t *len) {
    size_t n = onnx__model_proto__get_packed_size(m);
    if (n > DL_ONNX_MAX_BYTES) {
        dl_error("onnx: the model would take %zu bytes, more than protobuf's limit of 2 GiB", n);
        return NULL;
    }
    uint8_t *buf = malloc(n ? n : 1);
    if (!buf) {
        dl_error("onnx: out of memory (%zu bytes)", n);
        return NULL;
    }
    onnx__model_proto__pack(m, buf);
    *len = n;
    return buf;
}

#else /* built without ONNX */

#ifndef DL_ONNX_MISSING
#define DL_ONNX_MISSING "ONNX support"
#endif
#define NO_ONNX "dl.onnx: this dlua was built without " DL_ONNX_MISSING

const char *dl_onnx_missing(void) {
    return NO_ONNX;
}
Onnx__ModelProto *dl_onnx_model_decode(const uint8_t *buf, size_t len, const char *name) {
    (void)buf, (void)len, (void)name;
    dl_error("%s", NO_ONNX);
    return NULL;
}
void dl_onnx_model_free(Onnx__ModelProto *m) {
    (void)m;
}
Onnx__TensorProto *dl_onnx_tensor_decode(const uint8_t *buf, size_t len, const char *name) {
    (void)buf, (void)len, (void)name;
    dl_error("%s", NO_ONNX);
    return NULL;
}
void dl_onnx_tensor_free(Onnx__TensorProto *t) {
    (void)t;
}
int dl_onnx_tensor_to_dl(const Onnx__TensorProto *t, dl_tensor **out) {
    (void)t, (void)out;
    return dl_error("%s", NO_ONNX);
}
int dl_onnx_tensor_from_dl(dl_tensor *t, Onnx__TensorProto *tp) {
    (void)t, (void)tp;
    return dl_error("%s", NO_ONNX);
}
uint8_t *dl_onnx_model_encode(const Onnx__ModelProto *m, size_t *len) {
    (void)m, (void)len;
    dl_error("%s", NO_ONNX);
    return NULL;
}

#endif
