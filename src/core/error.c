/* error.c - thread-local last-error message (see error.h). */
#include "error.h"

#include <stdarg.h>
#include <stdio.h>

static _Thread_local char dl_errbuf[1024];

int dl_error(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(dl_errbuf, sizeof dl_errbuf, fmt, ap);
    va_end(ap);
    return -1;
}

const char *dl_last_error(void) {
    return dl_errbuf;
}

void dl_clear_error(void) {
    dl_errbuf[0] = '\0';
}
