/* sbuf.c - growable byte buffer with JSON string escaping. See sbuf.h. */
#include "server/sbuf.h"

#include "power.h"

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int sbuf_reserve(sbuf *b, size_t n) {
  if (b->oom) return PW_ENOMEM;
  if (b->len + n + 1 <= b->cap) return 0;
  size_t cap = b->cap ? b->cap : 256;
  while (cap < b->len + n + 1) {
    if (cap > SIZE_MAX / 2) {
      b->oom = true;
      return PW_ENOMEM;
    }
    cap *= 2;
  }
  char *d = realloc(b->data, cap);
  if (!d) {
    b->oom = true;
    return PW_ENOMEM;
  }
  b->data = d;
  b->cap = cap;
  return 0;
}

void sbuf_put(sbuf *b, const char *s, size_t n) {
  if (sbuf_reserve(b, n)) return;
  if (n) memcpy(b->data + b->len, s, n);
  b->len += n;
  b->data[b->len] = 0;
}

void sbuf_puts(sbuf *b, const char *s) { sbuf_put(b, s, strlen(s)); }

void sbuf_printf(sbuf *b, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char tmp[256];
  int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
  va_end(ap);
  if (n < 0) return;
  if ((size_t)n < sizeof tmp) {
    sbuf_put(b, tmp, (size_t)n);
    return;
  }
  if (sbuf_reserve(b, (size_t)n)) return;
  va_start(ap, fmt);
  vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
  va_end(ap);
  b->len += (size_t)n;
}

/* Length of the valid UTF-8 sequence at s (n bytes left), or 0 if invalid. */
static size_t utf8_len(const unsigned char *s, size_t n) {
  unsigned c = s[0];
  size_t len;
  uint32_t cp;
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) len = 2, cp = c & 0x1F;
  else if (c >= 0xE0 && c <= 0xEF) len = 3, cp = c & 0x0F;
  else if (c >= 0xF0 && c <= 0xF4) len = 4, cp = c & 0x07;
  else return 0;
  if (len > n) return 0;
  for (size_t i = 1; i < len; i++) {
    if ((s[i] & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (s[i] & 0x3F);
  }
  if ((len == 3 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) || (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)))
    return 0;
  return len;
}

void sbuf_json_str(sbuf *b, const char *s, size_t n) {
  /* Worst case 6 output bytes per input byte, plus quotes. */
  if (n > (SIZE_MAX - 2) / 6 || sbuf_reserve(b, n * 6 + 2)) {
    b->oom = true;
    return;
  }
  char *o = b->data + b->len;
  const unsigned char *p = (const unsigned char *)s;
  *o++ = '"';
  size_t i = 0;
  while (i < n) {
    unsigned c = p[i];
    if (c >= 0x80) {
      size_t l = utf8_len(p + i, n - i);
      if (l == 0) {
        memcpy(o, "\xEF\xBF\xBD", 3); /* U+FFFD */
        o += 3;
        i++;
      } else {
        memcpy(o, p + i, l);
        o += l;
        i += l;
      }
      continue;
    }
    i++;
    switch (c) {
    case '"': *o++ = '\\'; *o++ = '"'; break;
    case '\\': *o++ = '\\'; *o++ = '\\'; break;
    case '\n': *o++ = '\\'; *o++ = 'n'; break;
    case '\r': *o++ = '\\'; *o++ = 'r'; break;
    case '\t': *o++ = '\\'; *o++ = 't'; break;
    default:
      if (c < 0x20 || c == 0x7F) {
        o += snprintf(o, 7, "\\u%04x", c);
      } else {
        *o++ = (char)c;
      }
    }
  }
  *o++ = '"';
  b->len = (size_t)(o - b->data);
  b->data[b->len] = 0;
}

void sbuf_json_num(sbuf *b, double v) {
  if (!isfinite(v)) v = v < 0 || isnan(v) ? -9999.0 : 9999.0;
  sbuf_printf(b, "%.9g", v);
}

void sbuf_clear(sbuf *b) {
  b->len = 0;
  if (b->data) b->data[0] = 0;
}

void sbuf_free(sbuf *b) {
  free(b->data);
  b->data = NULL;
  b->len = b->cap = 0;
  b->oom = false;
}
