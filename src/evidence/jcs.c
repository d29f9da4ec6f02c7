/* jcs.c - RFC 8785 canonical JSON. See jcs.h. */
#include "evidence/jcs.h"

#include "base/error.h"
#include "base/sha256.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct jbuf {
  char *data;
  size_t len, cap;
  int status; /* first failure; 0 = fine */
  char *err;
} jbuf;

static void put(jbuf *b, const char *s, size_t n) {
  if (b->status) return;
  if (b->len + n + 1 > b->cap) {
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + n + 1) cap *= 2;
    char *d = realloc(b->data, cap);
    if (!d) {
      b->status = pw_seterr(b->err, PW_ENOMEM, "canonical JSON: out of memory");
      return;
    }
    b->data = d;
    b->cap = cap;
  }
  memcpy(b->data + b->len, s, n);
  b->len += n;
  b->data[b->len] = 0;
}

static void puts_(jbuf *b, const char *s) { put(b, s, strlen(s)); }

int jcs_number(double x, char *buf, size_t cap) {
  if (!isfinite(x) || cap < 32) return PW_EINVAL;
  if (x == 0) { /* +0 and -0 */
    snprintf(buf, cap, "0");
    return 0;
  }
  /* The shortest precision whose correctly rounded decimal reads back as
   * x; at that precision the rounded value is the closest such decimal,
   * which is what ECMAScript asks for when several digit strings qualify. */
  char tmp[48];
  for (int p = 1; p <= 17; p++) {
    snprintf(tmp, sizeof tmp, "%.*e", p - 1, x);
    if (strtod(tmp, NULL) == x) break;
  }
  const char *s = tmp;
  bool neg = *s == '-';
  if (neg) s++;
  char digits[24];
  int k = 0;
  for (; *s && *s != 'e'; s++)
    if (*s >= '0' && *s <= '9') digits[k++] = *s;
  int e10 = atoi(s + 1);
  while (k > 1 && digits[k - 1] == '0') k--;
  digits[k] = 0;
  int n = e10 + 1; /* x = 0.d1d2...dk * 10^n */
  char *o = buf;
  size_t left = cap;
#define OUT(...)                                         \
  do {                                                   \
    int w_ = snprintf(o, left, __VA_ARGS__);             \
    if (w_ < 0 || (size_t)w_ >= left) return PW_EINVAL;  \
    o += w_;                                             \
    left -= (size_t)w_;                                  \
  } while (0)
  if (neg) OUT("-");
  if (k <= n && n <= 21) {
    OUT("%s", digits);
    for (int i = 0; i < n - k; i++) OUT("0");
  } else if (0 < n && n <= 21) {
    OUT("%.*s.%s", n, digits, digits + n);
  } else if (-6 < n && n <= 0) {
    OUT("0.");
    for (int i = 0; i < -n; i++) OUT("0");
    OUT("%s", digits);
  } else {
    int e = n - 1;
    if (k == 1) OUT("%c", digits[0]);
    else OUT("%c.%s", digits[0], digits + 1);
    OUT("e%c%d", e < 0 ? '-' : '+', e < 0 ? -e : e);
  }
#undef OUT
  return 0;
}

/* Decodes one UTF-8 code point at s[*i] (advancing *i); -1 on invalid
 * UTF-8 (overlong forms, surrogates, beyond U+10FFFF, truncation). */
static long utf8_next(const unsigned char *s, size_t n, size_t *i) {
  unsigned c = s[*i];
  int len = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
  if (!len || *i + (size_t)len > n) return -1;
  long cp = len == 1 ? c : len == 2 ? c & 0x1F : len == 3 ? c & 0x0F : c & 0x07;
  for (int j = 1; j < len; j++) {
    unsigned d = s[*i + (size_t)j];
    if ((d & 0xC0) != 0x80) return -1;
    cp = cp << 6 | (d & 0x3F);
  }
  static const long min_cp[5] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < min_cp[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return -1;
  *i += (size_t)len;
  return cp;
}

/* The next UTF-16 code unit of a UTF-8 string (surrogate pairs split). */
typedef struct u16it {
  const unsigned char *s;
  size_t n, i;
  int pending; /* low surrogate still to return; -1 = none */
} u16it;

static long u16_next(u16it *it) { /* -1 at the end, -2 on invalid UTF-8 */
  if (it->pending >= 0) {
    long u = it->pending;
    it->pending = -1;
    return u;
  }
  if (it->i >= it->n) return -1;
  long cp = utf8_next(it->s, it->n, &it->i);
  if (cp < 0) return -2;
  if (cp < 0x10000) return cp;
  cp -= 0x10000;
  it->pending = (int)(0xDC00 + (cp & 0x3FF));
  return 0xD800 + (cp >> 10);
}

typedef struct member {
  const char *key;
  size_t len;
  json_t *value;
} member;

static int cmp_member(const void *pa, const void *pb) {
  const member *a = pa, *b = pb;
  u16it x = {(const unsigned char *)a->key, a->len, 0, -1}, y = {(const unsigned char *)b->key, b->len, 0, -1};
  for (;;) {
    long u = u16_next(&x), v = u16_next(&y);
    if (u == -2 || v == -2) return 0; /* names are validated before sorting */
    if (u != v) return u < v ? -1 : 1; /* the end (-1) sorts first */
    if (u == -1) return 0;
  }
}

static void put_string(jbuf *b, const char *s, size_t n) {
  put(b, "\"", 1);
  size_t run = 0, i = 0;
  while (i < n) {
    unsigned char c = (unsigned char)s[i];
    const char *esc = NULL;
    char u[8];
    switch (c) {
    case '"': esc = "\\\""; break;
    case '\\': esc = "\\\\"; break;
    case '\b': esc = "\\b"; break;
    case '\f': esc = "\\f"; break;
    case '\n': esc = "\\n"; break;
    case '\r': esc = "\\r"; break;
    case '\t': esc = "\\t"; break;
    default:
      if (c < 0x20) {
        snprintf(u, sizeof u, "\\u%04x", c);
        esc = u;
      }
    }
    if (esc) {
      put(b, s + run, i - run);
      puts_(b, esc);
      i++;
      run = i;
      continue;
    }
    size_t j = i;
    if (utf8_next((const unsigned char *)s, n, &j) < 0) {
      if (!b->status) b->status = pw_seterr(b->err, PW_EINVAL, "canonical JSON: a string is not valid UTF-8");
      return;
    }
    i = j;
  }
  put(b, s + run, n - run);
  put(b, "\"", 1);
}

static void put_value(jbuf *b, const json_t *v, int depth) {
  if (b->status) return;
  if (depth > JCS_MAX_DEPTH) {
    b->status = pw_seterr(b->err, PW_EINVAL, "canonical JSON: nested deeper than %d", JCS_MAX_DEPTH);
    return;
  }
  char num[48];
  switch (json_typeof(v)) {
  case JSON_NULL: puts_(b, "null"); break;
  case JSON_TRUE: puts_(b, "true"); break;
  case JSON_FALSE: puts_(b, "false"); break;
  case JSON_INTEGER:
  case JSON_REAL: {
    double x = json_is_integer(v) ? (double)json_integer_value(v) : json_real_value(v);
    if (jcs_number(x, num, sizeof num)) {
      b->status = pw_seterr(b->err, PW_EINVAL, "canonical JSON: a number is not finite");
      return;
    }
    puts_(b, num);
    break;
  }
  case JSON_STRING: put_string(b, json_string_value(v), json_string_length(v)); break;
  case JSON_ARRAY: {
    put(b, "[", 1);
    for (size_t i = 0; i < json_array_size(v); i++) {
      if (i) put(b, ",", 1);
      put_value(b, json_array_get(v, i), depth + 1);
    }
    put(b, "]", 1);
    break;
  }
  case JSON_OBJECT: {
    size_t n = json_object_size(v);
    member *m = malloc((n ? n : 1) * sizeof *m);
    if (!m) {
      b->status = pw_seterr(b->err, PW_ENOMEM, "canonical JSON: out of memory");
      return;
    }
    size_t k = 0;
    for (void *it = json_object_iter((json_t *)v); it && k < n; it = json_object_iter_next((json_t *)v, it))
      m[k++] = (member){json_object_iter_key(it), json_object_iter_key_len(it), json_object_iter_value(it)};
    bool bad = false;
    for (size_t i = 0; i < k && !bad; i++)
      for (size_t j = 0; j < m[i].len && !bad;)
        bad = utf8_next((const unsigned char *)m[i].key, m[i].len, &j) < 0;
    if (!bad) qsort(m, k, sizeof *m, cmp_member);
    if (bad) {
      free(m);
      b->status = pw_seterr(b->err, PW_EINVAL, "canonical JSON: a member name is not valid UTF-8");
      return;
    }
    put(b, "{", 1);
    for (size_t i = 0; i < k; i++) {
      if (i) put(b, ",", 1);
      put_string(b, m[i].key, m[i].len);
      put(b, ":", 1);
      put_value(b, m[i].value, depth + 1);
    }
    put(b, "}", 1);
    free(m);
    break;
  }
  }
}

int jcs_encode(const json_t *v, char **out, size_t *len, char *err) {
  *out = NULL;
  if (len) *len = 0;
  if (!v) return pw_seterr(err, PW_EINVAL, "canonical JSON: no value");
  jbuf b = {0};
  b.err = err;
  put_value(&b, v, 0);
  if (!b.status && !b.data) put(&b, "", 0);
  if (b.status) {
    free(b.data);
    return b.status;
  }
  *out = b.data;
  if (len) *len = b.len;
  return 0;
}

int jcs_sha256(const json_t *v, uint8_t out[32], char *err) {
  char *txt;
  size_t n;
  int rc = jcs_encode(v, &txt, &n, err);
  if (rc) return rc;
  pw_sha256(txt, n, out);
  free(txt);
  return 0;
}

int jcs_sha256_hex(const json_t *v, char hex[65], char *err) {
  uint8_t d[32];
  int rc = jcs_sha256(v, d, err);
  if (!rc) pw_hex(d, 32, hex);
  return rc;
}
