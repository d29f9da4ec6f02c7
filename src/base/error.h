/* error.h - status codes (from power.h), error messages into caller
 * buffers, and PW_ASSERT for internal invariants (on in release builds).
 * Not a logging facility: see log.h. */
#ifndef PW_BASE_ERROR_H
#define PW_BASE_ERROR_H

#include "power.h"
#include <stdarg.h>

/* Writes a formatted message into err (PW_ERRMAX bytes) when err != NULL and
 * returns status, so callers can write `return pw_seterr(err, PW_EINVAL, ...)`. */
int pw_seterr(char *err, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Aborts with file:line and the expression. For broken invariants only,
 * never for bad input. */
_Noreturn void pw_assert_fail(const char *expr, const char *file, int line);
#define PW_ASSERT(e) ((e) ? (void)0 : pw_assert_fail(#e, __FILE__, __LINE__))

#endif
