/* strbuf.h - a growable, NUL-terminated text buffer, shared by the writers
 * that build text in memory (tensor printing, safetensors headers, tokenizer
 * JSON).
 *
 * Invariants: a buffer starts zeroed (dl_strbuf b = {0}); s is NULL or holds
 * len bytes followed by a NUL; after a failed allocation oom is set and every
 * later add does nothing, so a writer checks oom once at the end; the owner
 * frees s. */
#ifndef DL_CORE_STRBUF_H
#define DL_CORE_STRBUF_H

#include "core/error.h"

#include <stddef.h>

typedef struct {
    char *s;
    size_t len, cap;
    int oom;
} dl_strbuf;

/* Appends n bytes of s. */
void dl_strbuf_add(dl_strbuf *b, const char *s, size_t n);
/* Appends the C string s. */
void dl_strbuf_str(dl_strbuf *b, const char *s);
/* Appends printf-formatted text (of any length). */
void dl_strbuf_printf(dl_strbuf *b, const char *fmt, ...) DL_PRINTF(2, 3);

#endif
