/* error.c - thread-local last-error message (see error.h). */
#include "error.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static _Thread_local char dl_errbuf[1024];

int dl_error(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(dl_errbuf, sizeof dl_errbuf, fmt, ap);
    va_end(ap);
    return -1;
}

int dl_verror(const char *prefix, const char *fmt, va_list ap) {
    char msg[sizeof dl_errbuf]; /* first, as the arguments may be dl_last_error() */
    vsnprintf(msg, sizeof msg, fmt, ap);
    size_t n = 0, cap = sizeof dl_errbuf - 1;
    if (prefix) {
        int k = snprintf(dl_errbuf, sizeof dl_errbuf, "%s: ", prefix);
        n = k < 0 ? 0 : (size_t)k < cap ? (size_t)k : cap;
    }
    size_t m = strlen(msg);
    if (m > cap - n) m = cap - n;
    memcpy(dl_errbuf + n, msg, m);
    dl_errbuf[n + m] = '\0';
    return -1;
}

void *dl_zalloc(size_t size, const char *fmt, ...) {
    void *p = calloc(1, size);
    if (!p) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(dl_errbuf, sizeof dl_errbuf, fmt, ap);
        va_end(ap);
    }
    return p;
}

const char *dl_last_error(void) {
    return dl_errbuf;
}

void dl_clear_error(void) {
    dl_errbuf[0] = '\0';
}
