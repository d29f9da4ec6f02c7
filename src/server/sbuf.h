/* sbuf.h - a growable byte buffer for building HTTP bodies: JSON text, SSE
 * chunks, Prometheus text. Part of the server layer.
 *
 * What it is: append-only text building with a sticky out-of-memory flag, so
 * a render can append many pieces and check once at the end.
 * What it is not: a JSON library (requests are parsed with jansson); it only
 * knows how to escape a string into a JSON string literal. */
#ifndef PW_SERVER_SBUF_H
#define PW_SERVER_SBUF_H

#include <stdbool.h>
#include <stddef.h>

typedef struct sbuf {
  char *data; /* owned; NUL-terminated while len < cap; NULL before first use */
  size_t len; /* bytes written */
  size_t cap; /* bytes allocated */
  bool oom;   /* an allocation failed; later appends are dropped */
} sbuf;

/* Reserves room for at least n more bytes (plus a NUL). 0 or PW_ENOMEM. */
int sbuf_reserve(sbuf *b, size_t n);
void sbuf_put(sbuf *b, const char *s, size_t n);
void sbuf_puts(sbuf *b, const char *s);
void sbuf_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Appends s[0..n) as a JSON string literal with quotes. Bytes are copied as
 * they are (callers pass valid UTF-8); control characters, quote and
 * backslash are escaped; invalid UTF-8 bytes become U+FFFD so the output is
 * always valid JSON text. */
void sbuf_json_str(sbuf *b, const char *s, size_t n);
/* Appends a float as a JSON number (non-finite values become -9999 for
 * logprobs of impossible tokens, as JSON has no infinity). */
void sbuf_json_num(sbuf *b, double v);
/* Forgets the contents and keeps the allocation. */
void sbuf_clear(sbuf *b);
/* Frees the storage; the struct can be reused. */
void sbuf_free(sbuf *b);

#endif
