/* gbnf.c - the GBNF parser: text to the compiled grammar of grammar_int.h.
 *
 * Lowering: a string literal becomes one singleton byte set per UTF-8 byte;
 * a character class (or `.`) becomes one byte set when it holds only ASCII,
 * else a rule whose alternatives are the UTF-8 byte-range sequences of its
 * code points (surrogates excluded); a group becomes a rule; repetition
 * becomes right-recursive rules (x* -> R ::= x R | empty, x{m,n} -> m copies
 * then n-m nested optionals), so the matcher sees only sets and references.
 *
 * Not here: matching (match.c), JSON Schema (schema.c). */
#include "grammar/grammar_int.h"

#include "base/error.h"
#include "power.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { GE_ALT = 3 }; /* parse-time separator of alternatives */

typedef struct evec {
  gelem *v;
  uint32_t n, cap;
} evec;

typedef struct prule {
  char *name;  /* owned */
  evec body;   /* alternatives separated by GE_ALT */
  bool defined;
  const char *at; /* first reference or definition, for messages (NULL = generated) */
} prule;

typedef struct cprange {
  uint32_t lo, hi;
} cprange;

typedef struct parser {
  const char *s, *end, *p;
  char *err;
  int rc;
  prule *rules;
  uint32_t n_rules, cap_rules;
  uint32_t *name_ht; /* open addressing: rule index + 1, 0 = empty */
  uint32_t ht_cap;
  gset *sets;
  uint32_t n_sets, cap_sets;
  uint32_t *set_ht;
  uint32_t set_ht_cap;
  uint64_t total;    /* elements emitted so far (limit) */
  int nest;
  int any_rule;      /* rule index of `.`, -1 until used */
  uint32_t synth;    /* counter for generated rule names */
} parser;

/* ---- errors -------------------------------------------------------------- */

static void where(const parser *ps, const char *at, int *line, int *col) {
  *line = 1;
  *col = 1;
  for (const char *q = ps->s; q < at && q < ps->end; q++) {
    if (*q == '\n') {
      (*line)++;
      *col = 1;
    } else {
      (*col)++;
    }
  }
}

__attribute__((format(printf, 4, 5))) static int perr(parser *ps, int rc, const char *at, const char *fmt, ...) {
  if (ps->rc) return ps->rc;
  char msg[PW_ERRMAX];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (at) {
    int line, col;
    where(ps, at, &line, &col);
    pw_seterr(ps->err, rc, "grammar: line %d column %d: %s", line, col, msg);
  } else {
    pw_seterr(ps->err, rc, "grammar: %s", msg);
  }
  ps->rc = rc;
  return rc;
}

/* ---- storage ------------------------------------------------------------- */

static int evec_push(parser *ps, evec *v, gelem e) {
  if (ps->rc) return ps->rc;
  if (++ps->total > GRAMMAR_MAX_ELEMS)
    return perr(ps, PW_ELIMIT, NULL, "more than %u elements after expansion", GRAMMAR_MAX_ELEMS);
  if (v->n == v->cap) {
    uint32_t nc = v->cap ? v->cap * 2 : 8;
    gelem *nv = realloc(v->v, nc * sizeof *nv);
    if (!nv) return perr(ps, PW_ENOMEM, NULL, "out of memory");
    v->v = nv;
    v->cap = nc;
  }
  v->v[v->n++] = e;
  return 0;
}

static uint64_t hash_bytes(const void *p, size_t n) {
  const unsigned char *b = p;
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
  return h ^ (h >> 29);
}

static int name_ht_grow(parser *ps) {
  uint32_t nc = ps->ht_cap ? ps->ht_cap * 2 : 256;
  uint32_t *t = calloc(nc, sizeof *t);
  if (!t) return perr(ps, PW_ENOMEM, NULL, "out of memory");
  for (uint32_t i = 0; i < ps->n_rules; i++) {
    uint64_t h = hash_bytes(ps->rules[i].name, strlen(ps->rules[i].name));
    uint32_t j = (uint32_t)h & (nc - 1);
    while (t[j]) j = (j + 1) & (nc - 1);
    t[j] = i + 1;
  }
  free(ps->name_ht);
  ps->name_ht = t;
  ps->ht_cap = nc;
  return 0;
}

static int add_rule(parser *ps, const char *name, size_t len, const char *at) {
  if (ps->rc) return -1;
  if (ps->n_rules >= GRAMMAR_MAX_RULES) {
    perr(ps, PW_ELIMIT, NULL, "more than %u rules after expansion", GRAMMAR_MAX_RULES);
    return -1;
  }
  if ((ps->n_rules + 1) * 2 > ps->ht_cap && name_ht_grow(ps) < 0) return -1;
  if (ps->n_rules == ps->cap_rules) {
    uint32_t nc = ps->cap_rules ? ps->cap_rules * 2 : 64;
    prule *nr = realloc(ps->rules, nc * sizeof *nr);
    if (!nr) {
      perr(ps, PW_ENOMEM, NULL, "out of memory");
      return -1;
    }
    ps->rules = nr;
    ps->cap_rules = nc;
  }
  char *nm = malloc(len + 1);
  if (!nm) {
    perr(ps, PW_ENOMEM, NULL, "out of memory");
    return -1;
  }
  memcpy(nm, name, len);
  nm[len] = 0;
  uint32_t idx = ps->n_rules++;
  ps->rules[idx] = (prule){.name = nm, .at = at};
  uint32_t j = (uint32_t)hash_bytes(name, len) & (ps->ht_cap - 1);
  while (ps->name_ht[j]) j = (j + 1) & (ps->ht_cap - 1);
  ps->name_ht[j] = idx + 1;
  return (int)idx;
}

/* Rule index of name (created undefined when new); -1 on failure. */
static int rule_ref(parser *ps, const char *name, size_t len, const char *at) {
  if (ps->ht_cap) {
    uint32_t j = (uint32_t)hash_bytes(name, len) & (ps->ht_cap - 1);
    while (ps->name_ht[j]) {
      prule *r = &ps->rules[ps->name_ht[j] - 1];
      if (strlen(r->name) == len && memcmp(r->name, name, len) == 0) return (int)(ps->name_ht[j] - 1);
      j = (j + 1) & (ps->ht_cap - 1);
    }
  }
  return add_rule(ps, name, len, at);
}

/* A generated rule "base~N": '~' cannot appear in a user's rule name, so
 * generated names never clash with the text's. */
static int synth_rule(parser *ps, const char *base) {
  char nm[96];
  for (;;) {
    int n = snprintf(nm, sizeof nm, "%.60s~%u", base, ps->synth++);
    int idx = rule_ref(ps, nm, (size_t)n, NULL);
    if (idx < 0) return -1;
    if (!ps->rules[idx].defined && ps->rules[idx].body.n == 0) {
      ps->rules[idx].defined = true;
      return idx;
    }
  }
}

static int set_index(parser *ps, const gset *s) {
  if (ps->rc) return -1;
  if ((ps->n_sets + 1) * 2 > ps->set_ht_cap) {
    uint32_t nc = ps->set_ht_cap ? ps->set_ht_cap * 2 : 64;
    uint32_t *t = calloc(nc, sizeof *t);
    if (!t) {
      perr(ps, PW_ENOMEM, NULL, "out of memory");
      return -1;
    }
    for (uint32_t i = 0; i < ps->n_sets; i++) {
      uint32_t j = (uint32_t)hash_bytes(&ps->sets[i], sizeof(gset)) & (nc - 1);
      while (t[j]) j = (j + 1) & (nc - 1);
      t[j] = i + 1;
    }
    free(ps->set_ht);
    ps->set_ht = t;
    ps->set_ht_cap = nc;
  }
  uint32_t j = (uint32_t)hash_bytes(s, sizeof *s) & (ps->set_ht_cap - 1);
  while (ps->set_ht[j]) {
    if (memcmp(&ps->sets[ps->set_ht[j] - 1], s, sizeof *s) == 0) return (int)(ps->set_ht[j] - 1);
    j = (j + 1) & (ps->set_ht_cap - 1);
  }
  if (ps->n_sets == ps->cap_sets) {
    uint32_t nc = ps->cap_sets ? ps->cap_sets * 2 : 64;
    gset *ns = realloc(ps->sets, nc * sizeof *ns);
    if (!ns) {
      perr(ps, PW_ENOMEM, NULL, "out of memory");
      return -1;
    }
    ps->sets = ns;
    ps->cap_sets = nc;
  }
  ps->sets[ps->n_sets] = *s;
  ps->set_ht[j] = ++ps->n_sets;
  return (int)(ps->n_sets - 1);
}

static void gset_range(gset *s, unsigned lo, unsigned hi) {
  for (unsigned b = lo; b <= hi; b++) s->w[b >> 6] |= 1ull << (b & 63);
}

static int emit_set(parser *ps, evec *out, const gset *s) {
  int i = set_index(ps, s);
  if (i < 0) return ps->rc;
  return evec_push(ps, out, (gelem){.type = GE_SET, .v = (uint32_t)i});
}

static int emit_byte(parser *ps, evec *out, unsigned b) {
  gset s = {{0}};
  gset_range(&s, b, b);
  return emit_set(ps, out, &s);
}

static int emit_ref(parser *ps, evec *out, int rule) {
  if (rule < 0) return ps->rc ? ps->rc : PW_EINTERNAL;
  return evec_push(ps, out, (gelem){.type = GE_REF, .v = (uint32_t)rule});
}

/* ---- characters ---------------------------------------------------------- */

static int utf8_encode(uint32_t c, unsigned char *b) {
  if (c < 0x80) {
    b[0] = (unsigned char)c;
    return 1;
  }
  if (c < 0x800) {
    b[0] = (unsigned char)(0xC0 | (c >> 6));
    b[1] = (unsigned char)(0x80 | (c & 0x3F));
    return 2;
  }
  if (c < 0x10000) {
    b[0] = (unsigned char)(0xE0 | (c >> 12));
    b[1] = (unsigned char)(0x80 | ((c >> 6) & 0x3F));
    b[2] = (unsigned char)(0x80 | (c & 0x3F));
    return 3;
  }
  b[0] = (unsigned char)(0xF0 | (c >> 18));
  b[1] = (unsigned char)(0x80 | ((c >> 12) & 0x3F));
  b[2] = (unsigned char)(0x80 | ((c >> 6) & 0x3F));
  b[3] = (unsigned char)(0x80 | (c & 0x3F));
  return 4;
}

/* Decodes one UTF-8 character at ps->p; -1 on invalid input. */
static int64_t utf8_next(parser *ps) {
  const unsigned char *q = (const unsigned char *)ps->p;
  size_t left = (size_t)(ps->end - ps->p);
  if (left == 0) return -1;
  uint32_t c = q[0];
  int n = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
  if (n == 0 || (size_t)n > left) return -1;
  if (n > 1) c &= 0x3Fu >> (n - 1);
  for (int i = 1; i < n; i++) {
    if ((q[i] & 0xC0) != 0x80) return -1;
    c = (c << 6) | (q[i] & 0x3F);
  }
  static const uint32_t minv[5] = {0, 0, 0x80, 0x800, 0x10000};
  if (c < minv[n] || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF)) return -1;
  ps->p += n;
  return c;
}

static int hexval(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

/* One character of a literal or class (escapes decoded); -1 on error. */
static int64_t parse_char(parser *ps) {
  const char *at = ps->p;
  if (ps->p >= ps->end) {
    perr(ps, PW_EINVAL, at, "unexpected end of input");
    return -1;
  }
  if (*ps->p != '\\') {
    int64_t c = utf8_next(ps);
    if (c < 0) perr(ps, PW_EINVAL, at, "invalid UTF-8");
    return c;
  }
  ps->p++;
  if (ps->p >= ps->end) {
    perr(ps, PW_EINVAL, at, "unexpected end of input after '\\'");
    return -1;
  }
  char e = *ps->p++;
  int nhex = 0;
  switch (e) {
  case 'n': return '\n';
  case 'r': return '\r';
  case 't': return '\t';
  case '\\': case '"': case '[': case ']': case '-': case '^': case '/': case '\'': return (unsigned char)e;
  case 'x': nhex = 2; break;
  case 'u': nhex = 4; break;
  case 'U': nhex = 8; break;
  default:
    perr(ps, PW_EINVAL, at, "unknown escape '\\%c'", e);
    return -1;
  }
  uint32_t v = 0;
  for (int i = 0; i < nhex; i++) {
    int h = ps->p < ps->end ? hexval(*ps->p) : -1;
    if (h < 0) {
      perr(ps, PW_EINVAL, at, "escape '\\%c' needs %d hex digits", e, nhex);
      return -1;
    }
    v = v * 16 + (uint32_t)h;
    ps->p++;
  }
  if (v > 0x10FFFF) {
    perr(ps, PW_EINVAL, at, "code point U+%X out of range", v);
    return -1;
  }
  return v;
}

/* ---- classes: code point ranges to UTF-8 byte sequences ------------------- */

typedef struct rvec {
  cprange *v;
  size_t n, cap;
} rvec;

static int rvec_push(parser *ps, rvec *r, uint32_t lo, uint32_t hi) {
  if (r->n == r->cap) {
    size_t nc = r->cap ? r->cap * 2 : 16;
    if (nc > (1u << 20)) return perr(ps, PW_ELIMIT, NULL, "character class too large");
    cprange *nv = realloc(r->v, nc * sizeof *nv);
    if (!nv) return perr(ps, PW_ENOMEM, NULL, "out of memory");
    r->v = nv;
    r->cap = nc;
  }
  r->v[r->n++] = (cprange){lo, hi};
  return 0;
}

static int cmp_range(const void *a, const void *b) {
  const cprange *x = a, *y = b;
  return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* Sorts, merges and removes surrogates; negates within [0, 0x10FFFF]. */
static int ranges_normalize(parser *ps, rvec *r, bool negate) {
  /* an empty class ([] or [^...] before negation) has no array: qsort of
   * NULL is undefined even for 0 elements (found by fuzzing, UBSan) */
  if (r->n > 1) qsort(r->v, r->n, sizeof *r->v, cmp_range);
  size_t w = 0;
  for (size_t i = 0; i < r->n; i++) {
    if (w > 0 && r->v[i].lo <= r->v[w - 1].hi + 1) {
      if (r->v[i].hi > r->v[w - 1].hi) r->v[w - 1].hi = r->v[i].hi;
    } else {
      r->v[w++] = r->v[i];
    }
  }
  r->n = w;
  if (negate) {
    rvec c = {0};
    uint32_t next = 0;
    for (size_t i = 0; i < r->n; i++) {
      if (r->v[i].lo > next && rvec_push(ps, &c, next, r->v[i].lo - 1) < 0) {
        free(c.v);
        return ps->rc;
      }
      next = r->v[i].hi + 1;
    }
    if (next <= 0x10FFFF && rvec_push(ps, &c, next, 0x10FFFF) < 0) {
      free(c.v);
      return ps->rc;
    }
    free(r->v);
    *r = c;
  }
  /* Cut out the surrogates. */
  rvec o = {0};
  for (size_t i = 0; i < r->n; i++) {
    uint32_t lo = r->v[i].lo, hi = r->v[i].hi;
    if (hi < 0xD800 || lo > 0xDFFF) {
      if (rvec_push(ps, &o, lo, hi) < 0) break;
      continue;
    }
    if (lo < 0xD800 && rvec_push(ps, &o, lo, 0xD7FF) < 0) break;
    if (hi > 0xDFFF && rvec_push(ps, &o, 0xE000, hi) < 0) break;
  }
  free(r->v);
  *r = o;
  return ps->rc;
}

/* Appends the UTF-8 byte-range sequences of [lo, hi] (one encoding length,
 * no surrogates) as alternatives of body. */
static int utf8_split(parser *ps, evec *body, uint32_t lo, uint32_t hi, int depth) {
  if (ps->rc) return ps->rc;
  static const uint32_t lim[3] = {0x7F, 0x7FF, 0xFFFF};
  for (int i = 0; i < 3; i++) {
    if (lo <= lim[i] && hi > lim[i]) {
      utf8_split(ps, body, lo, lim[i], depth + 1);
      return utf8_split(ps, body, lim[i] + 1, hi, depth + 1);
    }
  }
  unsigned char a[4], b[4];
  int n = utf8_encode(lo, a);
  utf8_encode(hi, b);
  for (int i = 1; i < n; i++) {
    uint32_t m = (1u << (6 * i)) - 1;
    if ((lo & ~m) != (hi & ~m)) {
      if ((lo & m) != 0) {
        utf8_split(ps, body, lo, lo | m, depth + 1);
        return utf8_split(ps, body, (lo | m) + 1, hi, depth + 1);
      }
      if ((hi & m) != m) {
        utf8_split(ps, body, lo, (hi & ~m) - 1, depth + 1);
        return utf8_split(ps, body, hi & ~m, hi, depth + 1);
      }
    }
  }
  if (body->n > 0) evec_push(ps, body, (gelem){.type = GE_ALT});
  for (int i = 0; i < n; i++) {
    gset s = {{0}};
    gset_range(&s, a[i], b[i]);
    emit_set(ps, body, &s);
  }
  return ps->rc;
}

/* Emits a reference (or one byte set) matching one character of ranges. */
static int emit_class(parser *ps, evec *out, const rvec *r, const char *base) {
  gset ascii = {{0}};
  bool wide = false, any_ascii = false;
  for (size_t i = 0; i < r->n; i++) {
    if (r->v[i].lo < 0x80) {
      gset_range(&ascii, r->v[i].lo, r->v[i].hi < 0x80 ? r->v[i].hi : 0x7F);
      any_ascii = true;
    }
    if (r->v[i].hi >= 0x80) wide = true;
  }
  if (!wide) return emit_set(ps, out, &ascii);
  int idx = synth_rule(ps, base);
  if (idx < 0) return ps->rc;
  evec body = {0};
  if (any_ascii) emit_set(ps, &body, &ascii);
  for (size_t i = 0; i < r->n && !ps->rc; i++) {
    uint32_t lo = r->v[i].lo < 0x80 ? 0x80 : r->v[i].lo;
    if (r->v[i].hi >= 0x80) utf8_split(ps, &body, lo, r->v[i].hi, 0);
  }
  ps->rules[idx].body = body;
  return emit_ref(ps, out, idx);
}

static int emit_any(parser *ps, evec *out) {
  if (ps->any_rule < 0) {
    rvec r = {0};
    if (rvec_push(ps, &r, 0, 0x10FFFF) < 0 || ranges_normalize(ps, &r, false) < 0) {
      free(r.v);
      return ps->rc;
    }
    evec tmp = {0};
    int rc = emit_class(ps, &tmp, &r, "any");
    free(r.v);
    if (rc < 0) {
      free(tmp.v);
      return rc;
    }
    ps->any_rule = (int)tmp.v[0].v;
    free(tmp.v);
  }
  return emit_ref(ps, out, ps->any_rule);
}

/* ---- syntax -------------------------------------------------------------- */

static bool is_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

/* Skips blanks and comments; newlines too when newline_ok. */
static void skip_space(parser *ps, bool newline_ok) {
  while (ps->p < ps->end) {
    char c = *ps->p;
    if (c == ' ' || c == '\t') {
      ps->p++;
    } else if (c == '#') {
      while (ps->p < ps->end && *ps->p != '\n') ps->p++;
    } else if (newline_ok && (c == '\n' || c == '\r')) {
      ps->p++;
    } else {
      break;
    }
  }
}

static int parse_alternatives(parser *ps, evec *out, bool nested);

static int parse_uint(parser *ps, unsigned *v) {
  const char *at = ps->p;
  unsigned long x = 0;
  if (ps->p >= ps->end || *ps->p < '0' || *ps->p > '9') return perr(ps, PW_EINVAL, at, "expected a number");
  while (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9') {
    x = x * 10 + (unsigned long)(*ps->p++ - '0');
    if (x > GRAMMAR_MAX_REPEAT) return perr(ps, PW_ELIMIT, at, "repetition count above %d", GRAMMAR_MAX_REPEAT);
  }
  *v = (unsigned)x;
  return 0;
}

/* Replaces out[atom..n) by its repetition min..max (max UINT32_MAX = no
 * bound). */
static int repeat(parser *ps, evec *out, uint32_t atom, unsigned min, unsigned max, const char *at) {
  uint32_t len = out->n - atom;
  if (len == 0) return 0; /* repeating nothing is nothing */
  gelem *copy = malloc(len * sizeof *copy);
  if (!copy) return perr(ps, PW_ENOMEM, NULL, "out of memory");
  memcpy(copy, out->v + atom, len * sizeof *copy);
  out->n = atom;
  ps->total -= len;
  for (unsigned k = 0; k < min && !ps->rc; k++)
    for (uint32_t i = 0; i < len; i++) evec_push(ps, out, copy[i]);
  if (max == UINT32_MAX) {
    int r = synth_rule(ps, "star");
    if (r >= 0) {
      evec body = {0};
      for (uint32_t i = 0; i < len; i++) evec_push(ps, &body, copy[i]);
      evec_push(ps, &body, (gelem){.type = GE_REF, .v = (uint32_t)r});
      evec_push(ps, &body, (gelem){.type = GE_ALT});
      ps->rules[r].body = body;
      emit_ref(ps, out, r);
    }
  } else if (max > min) {
    int prev = -1;
    for (unsigned k = min; k < max && !ps->rc; k++) {
      int r = synth_rule(ps, "opt");
      if (r < 0) break;
      evec body = {0};
      for (uint32_t i = 0; i < len; i++) evec_push(ps, &body, copy[i]);
      if (prev >= 0) evec_push(ps, &body, (gelem){.type = GE_REF, .v = (uint32_t)prev});
      evec_push(ps, &body, (gelem){.type = GE_ALT});
      ps->rules[r].body = body;
      prev = r;
    }
    if (prev >= 0) emit_ref(ps, out, prev);
  }
  free(copy);
  (void)at;
  return ps->rc;
}

static int parse_sequence(parser *ps, evec *out, bool nested) {
  int64_t atom = -1; /* start of the last element in out, for repetition */
  while (!ps->rc && ps->p < ps->end) {
    const char *at = ps->p;
    char c = *ps->p;
    if (c == '"') {
      ps->p++;
      atom = out->n;
      while (!ps->rc) {
        if (ps->p >= ps->end || *ps->p == '\n') return perr(ps, PW_EINVAL, at, "unterminated string literal");
        if (*ps->p == '"') {
          ps->p++;
          break;
        }
        int64_t ch = parse_char(ps);
        if (ch < 0) return ps->rc;
        unsigned char b[4];
        int n = utf8_encode((uint32_t)ch, b);
        for (int i = 0; i < n; i++) emit_byte(ps, out, b[i]);
      }
    } else if (c == '[') {
      ps->p++;
      bool neg = false;
      if (ps->p < ps->end && *ps->p == '^') {
        neg = true;
        ps->p++;
      }
      rvec r = {0};
      while (!ps->rc) {
        if (ps->p >= ps->end || *ps->p == '\n') {
          perr(ps, PW_EINVAL, at, "unterminated character class");
          break;
        }
        if (*ps->p == ']') {
          ps->p++;
          break;
        }
        int64_t lo = parse_char(ps);
        if (lo < 0) break;
        int64_t hi = lo;
        if (ps->p + 1 < ps->end && *ps->p == '-' && ps->p[1] != ']') {
          ps->p++;
          hi = parse_char(ps);
          if (hi < 0) break;
          if (hi < lo) {
            perr(ps, PW_EINVAL, at, "character range out of order");
            break;
          }
        }
        rvec_push(ps, &r, (uint32_t)lo, (uint32_t)hi);
      }
      if (!ps->rc) ranges_normalize(ps, &r, neg);
      atom = out->n;
      if (!ps->rc) emit_class(ps, out, &r, "class");
      free(r.v);
    } else if (c == '.') {
      ps->p++;
      atom = out->n;
      emit_any(ps, out);
    } else if (is_name_char(c)) {
      const char *nm = ps->p;
      while (ps->p < ps->end && is_name_char(*ps->p)) ps->p++;
      size_t len = (size_t)(ps->p - nm);
      const char *save = ps->p;
      skip_space(ps, true);
      if (ps->p + 2 < ps->end && memcmp(ps->p, "::=", 3) == 0) {
        /* the next rule's definition: this sequence ended before it */
        ps->p = nm;
        return 0;
      }
      ps->p = save;
      atom = out->n;
      emit_ref(ps, out, rule_ref(ps, nm, len, at));
    } else if (c == '(') {
      ps->p++;
      if (++ps->nest > GRAMMAR_MAX_NEST) return perr(ps, PW_ELIMIT, at, "groups nested deeper than %d", GRAMMAR_MAX_NEST);
      int r = synth_rule(ps, "group");
      if (r < 0) return ps->rc;
      evec body = {0};
      skip_space(ps, true);
      parse_alternatives(ps, &body, true);
      ps->rules[r].body = body;
      if (ps->rc) return ps->rc;
      if (ps->p >= ps->end || *ps->p != ')') return perr(ps, PW_EINVAL, at, "expected ')' to close this group");
      ps->p++;
      ps->nest--;
      atom = out->n;
      emit_ref(ps, out, r);
    } else if (c == '*' || c == '+' || c == '?' || c == '{') {
      if (atom < 0) return perr(ps, PW_EINVAL, at, "'%c' follows no element", c);
      ps->p++;
      unsigned min = 0, max = UINT32_MAX;
      if (c == '+') min = 1;
      if (c == '?') max = 1;
      if (c == '{') {
        skip_space(ps, false);
        min = 0; /* {,n}: none to n */
        if ((ps->p >= ps->end || *ps->p != ',') && parse_uint(ps, &min) < 0) return ps->rc;
        skip_space(ps, false);
        max = min;
        if (ps->p < ps->end && *ps->p == ',') {
          ps->p++;
          skip_space(ps, false);
          max = UINT32_MAX;
          if (ps->p < ps->end && *ps->p != '}' && parse_uint(ps, &max) < 0) return ps->rc;
          skip_space(ps, false);
        }
        if (ps->p >= ps->end || *ps->p != '}') return perr(ps, PW_EINVAL, at, "expected '}'");
        ps->p++;
        if (max < min) return perr(ps, PW_EINVAL, at, "repetition {%u,%u}: maximum below minimum", min, max);
      }
      repeat(ps, out, (uint32_t)atom, min, max, at);
      atom = -1;
    } else {
      break; /* '|', ')', a newline, or something the caller reports */
    }
    skip_space(ps, nested);
  }
  return ps->rc;
}

static int parse_alternatives(parser *ps, evec *out, bool nested) {
  parse_sequence(ps, out, nested);
  while (!ps->rc && ps->p < ps->end && *ps->p == '|') {
    ps->p++;
    evec_push(ps, out, (gelem){.type = GE_ALT});
    skip_space(ps, true);
    parse_sequence(ps, out, nested);
  }
  return ps->rc;
}

static int parse_rule(parser *ps) {
  const char *at = ps->p;
  const char *nm = ps->p;
  while (ps->p < ps->end && is_name_char(*ps->p)) ps->p++;
  if (ps->p == nm) return perr(ps, PW_EINVAL, at, "expected a rule name");
  size_t len = (size_t)(ps->p - nm);
  skip_space(ps, false);
  if (ps->p + 2 >= ps->end || memcmp(ps->p, "::=", 3) != 0) return perr(ps, PW_EINVAL, ps->p, "expected '::='");
  ps->p += 3;
  int r = rule_ref(ps, nm, len, at);
  if (r < 0) return ps->rc;
  if (ps->rules[r].defined) return perr(ps, PW_EINVAL, at, "rule '%.*s' is defined twice", (int)len, nm);
  ps->rules[r].defined = true;
  skip_space(ps, true);
  evec body = {0};
  parse_alternatives(ps, &body, false);
  ps->rules[r].body = body;
  if (ps->rc) return ps->rc;
  if (ps->p < ps->end && *ps->p != '\n' && *ps->p != '\r') {
    if (*ps->p == ')') return perr(ps, PW_EINVAL, ps->p, "unmatched ')'");
    return perr(ps, PW_EINVAL, ps->p, "unexpected '%c'", *ps->p);
  }
  return 0;
}

/* ---- checks and the compiled form ---------------------------------------- */

/* Left recursion: a rule that can reach itself without consuming a byte
 * would make the matcher expand forever. Iterative DFS over "may start
 * with" edges (through nullable prefixes). */
static int check_left_recursion(parser *ps, const grammar *g) {
  uint32_t nr = g->n_rules;
  bool *nullable = calloc(nr, 1);
  uint8_t *color = calloc(nr, 1);
  uint32_t *stk = malloc((size_t)nr * 2 * sizeof *stk); /* (rule, next alt/elem cursor) */
  if (!nullable || !color || !stk) {
    free(nullable);
    free(color);
    free(stk);
    return perr(ps, PW_ENOMEM, NULL, "out of memory");
  }
  for (bool changed = true; changed;) {
    changed = false;
    for (uint32_t r = 0; r < nr; r++) {
      if (nullable[r]) continue;
      for (uint32_t a = g->rule_alt[r]; a < g->rule_alt[r + 1] && !nullable[r]; a++) {
        uint32_t p = g->alt[a];
        while (g->el[p].type == GE_REF && nullable[g->el[p].v]) p++;
        if (g->el[p].type == GE_END) nullable[r] = changed = true;
      }
    }
  }
  for (uint32_t s = 0; s < nr && !ps->rc; s++) {
    if (color[s]) continue;
    uint32_t sp = 0;
    stk[sp++] = s;
    stk[sp++] = 0;
    color[s] = 1;
    /* A frame is (rule, how many of its "may start with" references were
     * followed); the references are enumerated again each time, which is
     * quadratic only in the length of one rule's nullable prefixes. */
    while (sp > 0 && !ps->rc) {
      uint32_t r = stk[sp - 2];
      uint32_t it = stk[sp - 1];
      uint32_t next_ref = UINT32_MAX;
      uint32_t cursor = it;
      uint32_t k = 0;
      for (uint32_t a = g->rule_alt[r]; a < g->rule_alt[r + 1] && next_ref == UINT32_MAX; a++) {
        for (uint32_t p = g->alt[a]; g->el[p].type == GE_REF; p++) {
          if (k++ == cursor) {
            next_ref = g->el[p].v;
            break;
          }
          if (!nullable[g->el[p].v]) break;
        }
      }
      if (next_ref == UINT32_MAX) {
        color[r] = 2;
        sp -= 2;
        continue;
      }
      stk[sp - 1] = it + 1;
      if (color[next_ref] == 1) {
        perr(ps, PW_EINVAL, NULL, "left recursion through rule '%s'", ps->rules[next_ref].name);
        break;
      }
      if (color[next_ref] == 0) {
        color[next_ref] = 1;
        stk[sp++] = next_ref;
        stk[sp++] = 0;
      }
    }
  }
  free(nullable);
  free(color);
  free(stk);
  return ps->rc;
}

static int build(parser *ps, grammar *g) {
  uint64_t n_el = 0, n_alt = 0;
  for (uint32_t r = 0; r < ps->n_rules; r++) {
    n_alt++;
    for (uint32_t i = 0; i < ps->rules[r].body.n; i++)
      if (ps->rules[r].body.v[i].type == GE_ALT) n_alt++;
    n_el += ps->rules[r].body.n + 1;
  }
  g->el = malloc(n_el * sizeof *g->el);
  g->alt = malloc(n_alt * sizeof *g->alt);
  g->rule_alt = malloc((ps->n_rules + 1) * sizeof *g->rule_alt);
  if (!g->el || !g->alt || !g->rule_alt) return perr(ps, PW_ENOMEM, NULL, "out of memory");
  uint32_t e = 0, a = 0;
  for (uint32_t r = 0; r < ps->n_rules; r++) {
    g->rule_alt[r] = a;
    g->alt[a++] = e;
    for (uint32_t i = 0; i < ps->rules[r].body.n; i++) {
      gelem x = ps->rules[r].body.v[i];
      if (x.type == GE_ALT) {
        g->el[e++] = (gelem){.type = GE_END};
        g->alt[a++] = e;
      } else {
        g->el[e++] = x;
      }
    }
    g->el[e++] = (gelem){.type = GE_END};
  }
  g->rule_alt[ps->n_rules] = a;
  g->n_el = e;
  g->n_alt = a;
  g->n_rules = ps->n_rules;
  g->sets = ps->sets;
  g->n_sets = ps->n_sets;
  ps->sets = NULL;
  return 0;
}

int grammar_parse(const char *text, size_t len, grammar **out, char *err) {
  *out = NULL;
  if (len > GRAMMAR_MAX_TEXT) return pw_seterr(err, PW_ELIMIT, "grammar: text longer than %u bytes", GRAMMAR_MAX_TEXT);
  parser ps = {.s = text, .p = text, .end = text + len, .err = err, .any_rule = -1};
  grammar *g = calloc(1, sizeof *g);
  if (!g) return pw_seterr(err, PW_ENOMEM, "grammar: out of memory");
  atomic_init(&g->refs, 1);
  skip_space(&ps, true);
  while (!ps.rc && ps.p < ps.end) {
    parse_rule(&ps);
    skip_space(&ps, true);
  }
  if (!ps.rc) {
    for (uint32_t r = 0; r < ps.n_rules; r++) {
      if (!ps.rules[r].defined) {
        perr(&ps, PW_EINVAL, ps.rules[r].at, "rule '%s' is used but not defined", ps.rules[r].name);
        break;
      }
    }
  }
  if (!ps.rc) {
    int root = -1;
    if (ps.ht_cap) {
      root = rule_ref(&ps, "root", 4, NULL);
      if (root >= 0 && !ps.rules[root].defined) root = -1;
    }
    if (root < 0) perr(&ps, PW_EINVAL, NULL, "no rule named 'root'");
    else g->root = (uint32_t)root;
  }
  if (!ps.rc) build(&ps, g);
  if (!ps.rc) check_left_recursion(&ps, g);
  for (uint32_t r = 0; r < ps.n_rules; r++) {
    free(ps.rules[r].name);
    free(ps.rules[r].body.v);
  }
  free(ps.rules);
  free(ps.name_ht);
  free(ps.sets);
  free(ps.set_ht);
  if (ps.rc) {
    grammar_destroy(g);
    return ps.rc;
  }
  *out = g;
  return 0;
}

grammar *grammar_ref(grammar *g) {
  if (g) atomic_fetch_add(&g->refs, 1);
  return g;
}

void grammar_destroy(grammar *g) {
  if (!g || atomic_fetch_sub(&g->refs, 1) > 1) return;
  free(g->el);
  free(g->alt);
  free(g->rule_alt);
  free(g->sets);
  free(g);
}

int grammar_n_rules(const grammar *g) { return (int)g->n_rules; }
int grammar_n_elems(const grammar *g) { return (int)g->n_el; }
