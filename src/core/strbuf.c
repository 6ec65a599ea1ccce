/* strbuf.c - the growable text buffer of strbuf.h: capacity doubles from 256
 * bytes; a failed realloc keeps the old text and sets oom. */
#include "core/strbuf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Room for n more bytes and the NUL; 0, or -1 (oom set) when it cannot grow. */
static int reserve(dl_strbuf *b, size_t n) {
    if (b->oom) return -1;
    if (b->len + n + 1 <= b->cap) return 0;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + n + 1) cap *= 2;
    char *p = realloc(b->s, cap);
    if (!p) {
        b->oom = 1;
        return -1;
    }
    b->s = p;
    b->cap = cap;
    return 0;
}

void dl_strbuf_add(dl_strbuf *b, const char *s, size_t n) {
    if (reserve(b, n)) return;
    memcpy(b->s + b->len, s, n);
    b->len += n;
    b->s[b->len] = '\0';
}

void dl_strbuf_str(dl_strbuf *b, const char *s) {
    dl_strbuf_add(b, s, strlen(s));
}

void dl_strbuf_printf(dl_strbuf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n <= 0 || reserve(b, (size_t)n)) return;
    va_start(ap, fmt);
    vsnprintf(b->s + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}
