/* error.h - the library's error channel.  Functions that fail return NULL or a
 * negative status and leave a message in a thread-local buffer; callers (the
 * Lua bindings, an embedding host) read it with dl_last_error().  Nothing in
 * the library exits or aborts on a user error. */
#ifndef DL_ERROR_H
#define DL_ERROR_H

#if defined(__GNUC__)
#define DL_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define DL_PRINTF(a, b)
#endif

#include <stdarg.h>
#include <stddef.h>

/* Sets the message (printf-style) and returns -1 so callers can
 * `return dl_error("...")`. */
int dl_error(const char *fmt, ...) DL_PRINTF(1, 2);
/* dl_error's va_list form with the message led by "prefix: " (no prefix
 * when NULL): what a file's own failure helper calls ("load: <path>: ..."). */
int dl_verror(const char *prefix, const char *fmt, va_list ap) DL_PRINTF(2, 0);
/* calloc(1, size); when that fails, NULL with the message fmt (printf-style,
 * e.g. "tokenizer: out of memory") set: what an object's constructor calls. */
void *dl_zalloc(size_t size, const char *fmt, ...) DL_PRINTF(2, 3);
/* The last message set on this thread ("" when none). */
const char *dl_last_error(void);
void dl_clear_error(void);

#endif
