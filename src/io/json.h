/* json.h - a small, strict JSON reader for file headers (safetensors).
 *
 * dl_json_parse turns a UTF-8 buffer into a tree of dl_json values that the
 * caller frees with dl_json_free.  It accepts RFC 8259 JSON only: no comments,
 * no trailing commas, no NaN; strings must be valid UTF-8 (escapes decoded,
 * surrogate pairs joined, lone surrogates rejected); nesting is limited to
 * DL_JSON_MAX_DEPTH so hostile input cannot exhaust the stack.  Objects keep
 * their members in file order and keep duplicate keys (the caller decides
 * whether duplicates are an error).  Numbers remember whether they were
 * written as integers (no fraction or exponent) and, if so, their exact
 * int64 value; an integer too large for int64 is flagged.
 * Errors return NULL with a message "<what> at byte N" in dl_last_error(). */
#ifndef DL_IO_JSON_H
#define DL_IO_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define DL_JSON_MAX_DEPTH 64

typedef enum {
    DL_JSON_NULL,
    DL_JSON_BOOL,
    DL_JSON_NUMBER,
    DL_JSON_STRING,
    DL_JSON_ARRAY,
    DL_JSON_OBJECT
} dl_json_type;

typedef struct dl_json dl_json;

struct dl_json {
    dl_json_type type;
    bool boolean;
    /* numbers */
    double number;
    bool is_integer;   /* written without fraction or exponent */
    bool int_overflow; /* an integer outside int64's range */
    int64_t integer;   /* exact value when is_integer && !int_overflow */
    /* strings (NUL-terminated; len excludes the NUL, may contain NULs) */
    char *str;
    size_t len;
    /* arrays and objects: count items; objects also have keys[i] */
    size_t count;
    dl_json **items;
    char **keys;
    size_t *key_lens;
};

/* Parses exactly one JSON value from buf[0..n); surrounding whitespace is
 * allowed, anything else after the value is an error. */
dl_json *dl_json_parse(const char *buf, size_t n);
void dl_json_free(dl_json *v);

/* The member named key (first one), or NULL. */
const dl_json *dl_json_get(const dl_json *obj, const char *key);
const char *dl_json_type_name(dl_json_type t);

/* True when s[0..n) is valid UTF-8 (no overlongs, no surrogates, <= U+10FFFF).
 * On false, *bad (if given) is the offset of the first bad byte. */
bool dl_utf8_valid(const char *s, size_t n, size_t *bad);
/* Writes code point cp (<= U+10FFFF) as UTF-8 to out (room for 4 bytes);
 * returns the number of bytes. */
size_t dl_utf8_put(char *out, uint32_t cp);

#endif
