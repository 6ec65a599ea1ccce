/* safetensors.h - reading and writing the safetensors format (weights and
 * checkpoints readable by PyTorch and the Hugging Face tools).
 *
 * Layout: an 8-byte little-endian header length N, N bytes of UTF-8 JSON
 *   {"name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [b, e]}, ...,
 *    "__metadata__": {"key": "value", ...}}
 * then the data: each tensor row-major, little-endian, at [b, e) relative to
 * the byte after the header.  The data must be covered exactly, without holes
 * or overlaps.  dtypes: F32 F64 F16 BF16 I64 I32 U8 BOOL.
 *
 * Reading maps the file copy-on-write (MAP_PRIVATE, so loaded tensors may be
 * modified in place without touching the file); a tensor whose bytes are
 * aligned for its dtype is a view on the shared, refcounted mapping, which is
 * unmapped when the last such tensor is released; others are copied.  Every
 * malformed file is an error naming the file and the problem; nothing is
 * allocated beyond the file's own size.
 *
 * Writing goes to "<path>.tmp.<pid>" in the same directory, is flushed and
 * fsync'ed, then renamed over path, so a crash or a write error never leaves a
 * half-written file (on error the temporary file is removed and an existing
 * file at path is untouched; the message says so).  Temporary files of
 * writers that died mid-write (their pid no longer exists) are removed by the
 * next save to the same path.  Header keys are sorted by name; the data is laid
 * out by element size (largest first), then name, so every tensor is aligned
 * for its dtype and the output is deterministic.  The header is padded with
 * spaces so the data starts 8-byte aligned.  Host byte order must be little-
 * endian (checked at compile time). */
#ifndef DL_IO_SAFETENSORS_H
#define DL_IO_SAFETENSORS_H

#include "core/tensor.h"

#include <stddef.h>

/* Largest header accepted when reading. */
#define DL_SAFETENSORS_MAX_HEADER (100u * 1000u * 1000u)

typedef struct {
    char *name; /* NUL-terminated; name_len bytes (may contain NULs) */
    size_t name_len;
    dl_tensor *tensor; /* owned; the caller may take it and set NULL */
} dl_st_tensor;

typedef struct {
    char *key, *value;
    size_t key_len, value_len;
} dl_st_meta;

typedef struct {
    size_t ntensors;
    dl_st_tensor *tensors; /* in data order */
    size_t nmeta;
    dl_st_meta *meta; /* in file order */
} dl_safetensors;

/* Reads path; NULL with dl_last_error() "load: <path>: <problem>". */
dl_safetensors *dl_safetensors_load(const char *path);
/* Releases the tensors still held and frees everything. */
void dl_safetensors_free(dl_safetensors *st);

/* Writes n tensors (any device, any layout) under names, with nmeta metadata
 * pairs (keys/values may be NULL when nmeta is 0).  Names and metadata are
 * UTF-8 strings given with their lengths (name_lens/..._lens NULL: use
 * strlen).  Returns 0, or -1 with "save: <path>: <problem>". */
int dl_safetensors_save(const char *path, size_t n, const char *const *names,
                        const size_t *name_lens, dl_tensor *const *tensors, size_t nmeta,
                        const char *const *meta_keys, const size_t *meta_key_lens,
                        const char *const *meta_values, const size_t *meta_value_lens);

/* The safetensors name of a dtype ("F32") and the reverse (-1 if unknown). */
const char *dl_safetensors_dtype_name(dl_dtype t);
int dl_safetensors_dtype_parse(const char *s, dl_dtype *out);

#endif
