/* strbuf.h - a growable NUL-terminated text buffer for code that builds
 * text piece by piece (grammar texts, for one). Out of memory is sticky:
 * once an append fails, the buffer keeps what it had and `oom` is set, so a
 * builder appends freely and checks once at the end.
 * Not here: HTTP bodies (server/sbuf.h). */
#ifndef PW_BASE_STRBUF_H
#define PW_BASE_STRBUF_H

#include <stdbool.h>
#include <stddef.h>

typedef struct pw_strbuf {
  char *s;       /* owned; NULL until the first append; NUL-terminated after */
  size_t n, cap; /* bytes used (without the NUL), allocated */
  bool oom;      /* an append failed */
} pw_strbuf;

void pw_strbuf_add(pw_strbuf *b, const char *s, size_t n);
void pw_strbuf_str(pw_strbuf *b, const char *s);
/* printf-style append, never truncated. */
__attribute__((format(printf, 2, 3))) void pw_strbuf_fmt(pw_strbuf *b, const char *fmt, ...);
void pw_strbuf_free(pw_strbuf *b); /* and zeroes it */

#endif
