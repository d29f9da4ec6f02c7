/* schema.c - JSON Schema to GBNF, and the grammar of any JSON object.
 *
 * Each schema node becomes a rule "sN"; $ref targets are compiled once and
 * named before their body is compiled, so recursive references close. The
 * supported keywords and the documented narrowings are listed in
 * grammar.h. Every keyword the compiler does not implement is an error
 * naming it: a schema is never silently weakened.
 *
 * Not here: parsing GBNF (gbnf.c), matching (match.c), HTTP request fields
 * (the server maps response_format onto these functions). */
#include "grammar/grammar.h"

#include "base/strbuf.h"

#include "base/error.h"
#include "power.h"

#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SCHEMA_MAX_DEPTH 64    /* nested schemas (references restart the count) */
#define SCHEMA_MAX_RULES 100000
#define SCHEMA_MAX_BOUND 1e15
#define SCHEMA_MAX_ALTS 4096   /* enum values, anyOf branches */

/* JSON values, shared by every schema. Whitespace between tokens is
 * bounded so a model cannot pad forever at one place. */
static const char k_lib[] =
    "ws ::= \"\" | \" \" | \"\\n\" [ \\t]{0,8}\n"
    "jstr ::= \"\\\"\" jchar* \"\\\"\"\n"
    "jchar ::= [^\"\\\\\\x00-\\x1F] | \"\\\\\" jesc\n"
    "jesc ::= [\"\\\\/bfnrt] | \"u\" jhex4\n"
    "jhex4 ::= [0-9a-cA-CefEF] jhex jhex jhex | [dD] [0-7] jhex jhex\n"
    "jhex ::= [0-9a-fA-F]\n"
    "jnat ::= \"0\" | [1-9] [0-9]{0,15}\n"
    "jint ::= \"-\"? jnat\n"
    "jfrac ::= \".\" [0-9]{1,15}\n"
    "jnum ::= jint jfrac? ([eE] [-+]? [0-9]{1,2})?\n"
    "jbool ::= \"true\" | \"false\"\n"
    "jnull ::= \"null\"\n"
    "jvalue ::= jobject | jarray | jstr | jnum | jbool | jnull\n"
    "jobject ::= \"{\" ws (jmember (\",\" ws jmember)*)? \"}\"\n"
    "jmember ::= jstr ws \":\" ws jvalue ws\n"
    "jarray ::= \"[\" ws (jvalue ws (\",\" ws jvalue ws)*)? \"]\"\n"
    "fdate ::= [1-9] [0-9]{3} \"-\" (\"0\" [13578] \"-\" fd31 | \"1\" [02] \"-\" fd31 | \"0\" [469] \"-\" fd30 | "
    "\"11-\" fd30 | \"02-\" fd28)\n"
    "fd31 ::= \"0\" [1-9] | [12] [0-9] | \"3\" [01]\n"
    "fd30 ::= \"0\" [1-9] | [12] [0-9] | \"30\"\n"
    "fd28 ::= \"0\" [1-9] | \"1\" [0-9] | \"2\" [0-8]\n"
    "fhh ::= [01] [0-9] | \"2\" [0-3]\n"
    "ftime ::= fhh \":\" [0-5] [0-9] \":\" [0-5] [0-9] (\".\" [0-9]{1,6})? (\"Z\" | [+-] fhh \":\" [0-5] [0-9])\n"
    "fdatetime ::= fdate \"T\" ftime\n"
    "fuuid ::= jhex{8} \"-\" jhex{4} \"-\" jhex{4} \"-\" jhex{4} \"-\" jhex{12}\n"
    "femail ::= [a-zA-Z0-9._%+-]{1,32} \"@\" [a-zA-Z0-9] [a-zA-Z0-9-]{0,30} (\".\" [a-zA-Z]{2,8}){1,2}\n";

static const char k_object_gbnf[] =
    "root ::= jobject\n"
    "ws ::= \"\" | \" \" | \"\\n\" [ \\t]{0,8}\n"
    "jstr ::= \"\\\"\" jchar* \"\\\"\"\n"
    "jchar ::= [^\"\\\\\\x00-\\x1F] | \"\\\\\" jesc\n"
    "jesc ::= [\"\\\\/bfnrt] | \"u\" jhex4\n"
    "jhex4 ::= [0-9a-cA-CefEF] jhex jhex jhex | [dD] [0-7] jhex jhex\n"
    "jhex ::= [0-9a-fA-F]\n"
    "jnat ::= \"0\" | [1-9] [0-9]{0,15}\n"
    "jint ::= \"-\"? jnat\n"
    "jnum ::= jint (\".\" [0-9]{1,15})? ([eE] [-+]? [0-9]{1,2})?\n"
    "jvalue ::= jobject | jarray | jstr | jnum | \"true\" | \"false\" | \"null\"\n"
    "jobject ::= \"{\" ws (jmember (\",\" ws jmember)*)? \"}\"\n"
    "jmember ::= jstr ws \":\" ws jvalue ws\n"
    "jarray ::= \"[\" ws (jvalue ws (\",\" ws jvalue ws)*)? \"]\"\n";

const char *grammar_json_object_gbnf(void) { return k_object_gbnf; }

/* ---- text buffers -------------------------------------------------------- */

typedef pw_strbuf gbuf;
#define gb_add pw_strbuf_add
#define gb_str pw_strbuf_str
#define gb_fmt pw_strbuf_fmt

/* A GBNF string literal of bytes s[0..n). */
void grammar_gbnf_literal(pw_strbuf *b, const char *s, size_t n) {
  gb_add(b, "\"", 1);
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)s[i];
    if (c == '"' || c == '\\') {
      char e[2] = {'\\', (char)c};
      gb_add(b, e, 2);
    } else if (c < 0x20 || c == 0x7F) {
      gb_fmt(b, "\\x%02X", c);
    } else {
      gb_add(b, (const char *)&c, 1);
    }
  }
  gb_add(b, "\"", 1);
}

/* ---- compiler state ------------------------------------------------------ */

typedef struct refent {
  json_t *node;
  int id;
} refent;

typedef struct sc {
  json_t *root;
  gbuf out;
  char *err, *badkw;
  int rc;
  refent *refs;
  size_t n_refs, cap_refs;
  int n_rules;
  int depth;
  bool lenient; /* the current document: keywords that cannot be enforced are left unenforced */
} sc;

__attribute__((format(printf, 3, 4))) static int fail(sc *c, int rc, const char *fmt, ...) {
  if (c->rc) return c->rc;
  char msg[PW_ERRMAX];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  pw_seterr(c->err, rc, "json schema: %s", msg);
  c->rc = rc;
  return rc;
}

static int unsupported(sc *c, const char *kw, const char *why) {
  if (c->rc) return c->rc;
  if (c->badkw) snprintf(c->badkw, 64, "%s", kw);
  return fail(c, PW_EUNSUPPORTED, "unsupported keyword '%s'%s", kw, why ? why : "");
}

static int new_rule(sc *c) {
  if (c->n_rules >= SCHEMA_MAX_RULES) {
    fail(c, PW_ELIMIT, "schema needs more than %d rules", SCHEMA_MAX_RULES);
    return -1;
  }
  return c->n_rules++;
}

/* Appends "sID ::= expr\n". */
static void put_rule(sc *c, int id, const gbuf *expr) {
  gb_fmt(&c->out, "s%d ::= ", id);
  gb_add(&c->out, expr->s ? expr->s : "\"\"", expr->s ? expr->n : 2);
  gb_add(&c->out, "\n", 1);
}

static const char *const k_annotations[] = {"title", "description", "$schema", "$id", "$comment", "default",
                                            "examples", "deprecated", "readOnly", "writeOnly", "$defs",
                                            "definitions", NULL};
static const char *const k_supported[] = {
    "type", "properties", "required", "additionalProperties", "enum", "const", "items", "prefixItems",
    "minItems", "maxItems", "anyOf", "oneOf", "allOf", "$ref", "minLength", "maxLength", "format", "pattern",
    "minimum", "maximum", "nullable", NULL};

static bool in_list(const char *k, const char *const *l) {
  for (; *l; l++)
    if (strcmp(k, *l) == 0) return true;
  return false;
}

static int gen(sc *c, json_t *s, char *name);

/* Resolves a local JSON pointer reference. */
static json_t *resolve(sc *c, const char *ref) {
  if (ref[0] != '#') {
    unsupported(c, "$ref", " (only references inside the document, starting with '#')");
    return NULL;
  }
  json_t *cur = c->root;
  const char *p = ref + 1;
  if (*p && *p != '/') {
    fail(c, PW_EINVAL, "$ref '%.100s' is not a JSON pointer", ref);
    return NULL;
  }
  while (*p == '/') {
    p++;
    char tok[256];
    size_t n = 0;
    while (*p && *p != '/') {
      char ch = *p++;
      if (ch == '~' && (*p == '0' || *p == '1')) ch = *p++ == '0' ? '~' : '/';
      if (n + 1 >= sizeof tok) {
        fail(c, PW_EINVAL, "$ref '%.100s': path segment too long", ref);
        return NULL;
      }
      tok[n++] = ch;
    }
    tok[n] = 0;
    if (json_is_object(cur)) {
      cur = json_object_get(cur, tok);
    } else if (json_is_array(cur)) {
      char *end;
      long i = strtol(tok, &end, 10);
      cur = (*end || n == 0 || i < 0) ? NULL : json_array_get(cur, (size_t)i);
    } else {
      cur = NULL;
    }
    if (!cur) {
      fail(c, PW_EINVAL, "$ref '%.100s' points at nothing", ref);
      return NULL;
    }
  }
  return cur;
}

/* The rule name of a referenced schema: compiled once, named first so a
 * recursive reference finds the name. */
static int gen_ref(sc *c, json_t *target, char *name) {
  for (size_t i = 0; i < c->n_refs; i++) {
    if (c->refs[i].node == target) {
      snprintf(name, 24, "s%d", c->refs[i].id);
      return 0;
    }
  }
  int id = new_rule(c);
  if (id < 0) return c->rc;
  if (c->n_refs == c->cap_refs) {
    size_t nc = c->cap_refs ? c->cap_refs * 2 : 16;
    refent *nr = realloc(c->refs, nc * sizeof *nr);
    if (!nr) return fail(c, PW_ENOMEM, "out of memory");
    c->refs = nr;
    c->cap_refs = nc;
  }
  c->refs[c->n_refs++] = (refent){target, id};
  char inner[24];
  int save = c->depth;
  c->depth = 0;
  int rc = gen(c, target, inner);
  c->depth = save;
  if (rc < 0) return rc;
  gb_fmt(&c->out, "s%d ::= %s\n", id, inner);
  snprintf(name, 24, "s%d", id);
  return 0;
}

/* ---- numbers ------------------------------------------------------------- */

static int ndigits(long long x) {
  int d = 1;
  while (x >= 10) {
    x /= 10;
    d++;
  }
  return d;
}

/* Decimal strings a <= b of equal length n (no leading-zero rule here: the
 * caller splits by length). */
static void same_len(gbuf *b, const char *a, const char *z, int n) {
  if (n == 0) {
    gb_str(b, "\"\"");
    return;
  }
  if (memcmp(a, z, (size_t)n) == 0) {
    grammar_gbnf_literal(b, a, (size_t)n);
    return;
  }
  if (a[0] == z[0]) {
    gb_fmt(b, "\"%c\" ", a[0]);
    same_len(b, a + 1, z + 1, n - 1);
    return;
  }
  bool lo_zero = true, hi_nine = true;
  for (int i = 1; i < n; i++) {
    if (a[i] != '0') lo_zero = false;
    if (z[i] != '9') hi_nine = false;
  }
  char s = a[0], e = z[0];
  bool first = true;
  gb_str(b, "(");
  char nines[24], zeros[24];
  memset(nines, '9', sizeof nines);
  memset(zeros, '0', sizeof zeros);
  if (!lo_zero) {
    gb_fmt(b, "\"%c\" ", a[0]);
    same_len(b, a + 1, nines, n - 1);
    first = false;
    s++;
  }
  if (!hi_nine) e--;
  if (s <= e) {
    if (!first) gb_str(b, " | ");
    gb_fmt(b, "[%c-%c]", s, e);
    if (n > 1) gb_fmt(b, " [0-9]{%d}", n - 1);
    first = false;
  }
  if (!hi_nine) {
    if (!first) gb_str(b, " | ");
    gb_fmt(b, "\"%c\" ", z[0]);
    same_len(b, zeros, z + 1, n - 1);
  }
  gb_str(b, ")");
}

static long long pow10ll(int d) {
  long long p = 1;
  while (d-- > 0) p *= 10;
  return p;
}

/* Naturals without leading zeros in [lo, hi]; hi < 0 = no upper bound. */
static void nat_range(gbuf *b, long long lo, long long hi) {
  int dl = ndigits(lo), dh = hi < 0 ? dl : ndigits(hi);
  gb_str(b, "(");
  bool first = true;
  for (int d = dl; d <= dh; d++) {
    long long a = d == 1 ? 0 : pow10ll(d - 1), z = pow10ll(d) - 1;
    if (a < lo) a = lo;
    if (hi >= 0 && z > hi) z = hi;
    if (a > z) continue;
    char as[24], zs[24];
    snprintf(as, sizeof as, "%lld", a);
    snprintf(zs, sizeof zs, "%lld", z);
    if (!first) gb_str(b, " | ");
    same_len(b, as, zs, d);
    first = false;
  }
  if (hi < 0 && dl < 16) {
    if (!first) gb_str(b, " | ");
    gb_fmt(b, "[1-9] [0-9]{%d,15}", dl);
    first = false;
  }
  if (first) gb_str(b, "[^\\x00-\\xFF]"); /* empty: never reached by callers */
  gb_str(b, ")");
}

/* Integers in [lo, hi] (each side optional). Returns false if empty. */
static bool int_range(gbuf *b, bool has_lo, long long lo, bool has_hi, long long hi) {
  if (has_lo && has_hi && lo > hi) return false;
  bool neg = !has_lo || lo < 0, pos = !has_hi || hi >= 0;
  gb_str(b, "(");
  if (neg) {
    long long nlo = has_hi && hi < 0 ? -hi : 1, nhi = has_lo ? -lo : -1;
    gb_str(b, "\"-\" ");
    nat_range(b, nlo, nhi);
  }
  if (pos) {
    if (neg) gb_str(b, " | ");
    nat_range(b, has_lo && lo > 0 ? lo : 0, has_hi ? hi : -1);
  }
  gb_str(b, ")");
  return true;
}

static int get_bound(sc *c, json_t *s, const char *k, bool *has, double *v) {
  json_t *x = json_object_get(s, k);
  *has = false;
  if (!x) return 0;
  if (!json_is_number(x)) return fail(c, PW_EINVAL, "'%s' must be a number", k);
  *v = json_number_value(x);
  if (!(fabs(*v) <= SCHEMA_MAX_BOUND)) return c->lenient ? 0 : unsupported(c, k, " beyond +-1e15");
  *has = true;
  return 0;
}

static int gen_integer(sc *c, json_t *s, gbuf *e) {
  bool hl, hh;
  double lo, hi;
  if (get_bound(c, s, "minimum", &hl, &lo) < 0 || get_bound(c, s, "maximum", &hh, &hi) < 0) return c->rc;
  if (!hl && !hh) {
    gb_str(e, "jint");
    return 0;
  }
  if (!int_range(e, hl, (long long)ceil(lo), hh, (long long)floor(hi)))
    return fail(c, PW_EUNSUPPORTED, "no integer lies between minimum %g and maximum %g", lo, hi);
  return 0;
}

static int gen_number(sc *c, json_t *s, gbuf *e) {
  bool hl, hh;
  double lo, hi;
  if (get_bound(c, s, "minimum", &hl, &lo) < 0 || get_bound(c, s, "maximum", &hh, &hi) < 0) return c->rc;
  if (!hl && !hh) {
    gb_str(e, "jnum");
    return 0;
  }
  long long li = hl ? (long long)ceil(lo) : 0, hi_ = hh ? (long long)floor(hi) : 0;
  gb_str(e, "(");
  if (!int_range(e, hl, li, hh, hi_))
    return fail(c, PW_EUNSUPPORTED, "no integer lies between minimum %g and maximum %g (numbers are produced as decimals "
                                    "whose integer part lies in the range)", lo, hi);
  /* k.f for naturals k in [max(li, 0), hi_ - 1]: k.f < k + 1 <= max */
  long long a = hl && li > 0 ? li : 0;
  if (!hh || a <= hi_ - 1) {
    gb_str(e, " | ");
    nat_range(e, a, hh ? hi_ - 1 : -1);
    gb_str(e, " jfrac");
  }
  /* -k.f for naturals k in [max(0, -hi_), -li - 1]: -(k + 1) >= min */
  if (!hl || li <= -1) {
    long long ka = hh && hi_ < 0 ? -hi_ : 0, kz = hl ? -li - 1 : -1;
    if (kz < 0 || ka <= kz) {
      gb_str(e, " | \"-\" ");
      nat_range(e, ka, kz);
      gb_str(e, " jfrac");
    }
  }
  gb_str(e, ")");
  return 0;
}

/* ---- strings and patterns ----------------------------------------------- */

typedef struct cpr {
  uint32_t lo, hi;
} cpr;

typedef struct cpset {
  cpr v[64];
  int n;
  bool over;
} cpset;

static void cps_add(cpset *s, uint32_t lo, uint32_t hi) {
  if (s->n == 64) {
    s->over = true;
    return;
  }
  s->v[s->n++] = (cpr){lo, hi};
}

static int cmp_cpr(const void *a, const void *b) {
  const cpr *x = a, *y = b;
  return x->lo < y->lo ? -1 : x->lo > y->lo;
}

static void cps_norm(cpset *s, bool negate) {
  if (s->n > 1) qsort(s->v, (size_t)s->n, sizeof s->v[0], cmp_cpr); /* v may be NULL when empty */
  int w = 0;
  for (int i = 0; i < s->n; i++) {
    if (w > 0 && s->v[i].lo <= s->v[w - 1].hi + 1) {
      if (s->v[i].hi > s->v[w - 1].hi) s->v[w - 1].hi = s->v[i].hi;
    } else {
      s->v[w++] = s->v[i];
    }
  }
  s->n = w;
  if (negate) {
    cpset c = {.n = 0};
    uint32_t next = 0;
    for (int i = 0; i < s->n; i++) {
      if (s->v[i].lo > next) cps_add(&c, next, s->v[i].lo - 1);
      next = s->v[i].hi + 1;
    }
    if (next <= 0x10FFFF) cps_add(&c, next, 0x10FFFF);
    c.over |= s->over;
    *s = c;
  }
}

static bool cps_has(const cpset *s, uint32_t c) {
  for (int i = 0; i < s->n; i++)
    if (c >= s->v[i].lo && c <= s->v[i].hi) return true;
  return false;
}

static void gb_cp(gbuf *b, uint32_t c) {
  if (c > 0xFFFF) gb_fmt(b, "\\U%08X", c);
  else gb_fmt(b, "\\u%04X", c);
}

/* One JSON string character out of s, as it appears in JSON text: the
 * characters JSON must escape in escaped form. */
static void emit_jchar_set(gbuf *b, const cpset *s) {
  gbuf cls = {0};
  for (int i = 0; i < s->n; i++) {
    uint32_t lo = s->v[i].lo, hi = s->v[i].hi;
    /* cut out 0x00-0x1F, '"' and '\\' */
    uint32_t cuts[][2] = {{0, 0x1F}, {'"', '"'}, {'\\', '\\'}};
    uint32_t segs[8][2];
    int ns = 1;
    segs[0][0] = lo;
    segs[0][1] = hi;
    for (int k = 0; k < 3; k++) {
      int nn = 0;
      uint32_t out[8][2];
      for (int j = 0; j < ns; j++) {
        uint32_t a = segs[j][0], z = segs[j][1];
        if (z < cuts[k][0] || a > cuts[k][1]) {
          out[nn][0] = a;
          out[nn++][1] = z;
          continue;
        }
        if (a < cuts[k][0]) {
          out[nn][0] = a;
          out[nn++][1] = cuts[k][0] - 1;
        }
        if (z > cuts[k][1]) {
          out[nn][0] = cuts[k][1] + 1;
          out[nn++][1] = z;
        }
      }
      memcpy(segs, out, sizeof out);
      ns = nn;
    }
    for (int j = 0; j < ns; j++) {
      gb_cp(&cls, segs[j][0]);
      if (segs[j][1] != segs[j][0]) {
        gb_str(&cls, "-");
        gb_cp(&cls, segs[j][1]);
      }
    }
  }
  gb_str(b, "(");
  bool first = true;
  if (cls.n) {
    gb_str(b, "[");
    gb_add(b, cls.s, cls.n);
    gb_str(b, "]");
    first = false;
  }
  free(cls.s);
  if (cps_has(s, '"')) {
    gb_str(b, first ? "" : " | ");
    gb_str(b, "\"\\\\\\\"\"");
    first = false;
  }
  if (cps_has(s, '\\')) {
    gb_str(b, first ? "" : " | ");
    gb_str(b, "\"\\\\\\\\\"");
    first = false;
  }
  for (uint32_t ch = 0; ch < 0x20; ch++) {
    if (!cps_has(s, ch)) continue;
    gb_str(b, first ? "" : " | ");
    gb_fmt(b, "\"\\\\u%04x\"", ch);
    first = false;
  }
  if (first) gb_str(b, "[^\\x00-\\U0010FFFF]"); /* empty class: nothing */
  gb_str(b, ")");
}

typedef struct rx {
  sc *c;
  const char *p, *end, *src;
  int depth;
} rx;

static int rx_fail(rx *r, const char *what) {
  if (r->c->badkw) snprintf(r->c->badkw, 64, "pattern");
  return fail(r->c, PW_EUNSUPPORTED, "pattern '%.80s': %s (unsupported regex feature)", r->src, what);
}

static void shorthand(cpset *s, char k) {
  switch (k) {
  case 'd': cps_add(s, '0', '9'); break;
  case 'w':
    cps_add(s, '0', '9');
    cps_add(s, 'A', 'Z');
    cps_add(s, 'a', 'z');
    cps_add(s, '_', '_');
    break;
  case 's':
    cps_add(s, ' ', ' ');
    cps_add(s, '\t', '\r');
    break;
  }
}

/* An escaped character after '\\' (not a shorthand); -1 if unsupported. */
static int64_t rx_escape(rx *r) {
  if (r->p >= r->end) return -1;
  char e = *r->p++;
  switch (e) {
  case 'n': return '\n';
  case 't': return '\t';
  case 'r': return '\r';
  case 'f': return '\f';
  case 'v': return '\v';
  case 'x': case 'u': {
    int n = e == 'x' ? 2 : 4;
    uint32_t v = 0;
    for (int i = 0; i < n; i++) {
      if (r->p >= r->end) return -1;
      char h = *r->p++;
      int d = (h >= '0' && h <= '9') ? h - '0' : (h >= 'a' && h <= 'f') ? h - 'a' + 10 : (h >= 'A' && h <= 'F') ? h - 'A' + 10 : -1;
      if (d < 0) return -1;
      v = v * 16 + (uint32_t)d;
    }
    return v;
  }
  default:
    if (strchr(".*+?()[]{}|^$\\/-_,:=!<>'\"#&~@%` ", e)) return (unsigned char)e;
    return -1;
  }
}

/* One UTF-8 character of the pattern (not an escape). */
static int64_t rx_utf8(rx *r) {
  const unsigned char *q = (const unsigned char *)r->p;
  uint32_t c = q[0];
  int n = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
  if (n == 0 || r->p + n > r->end) return -1;
  if (n > 1) c &= 0x3Fu >> (n - 1);
  for (int i = 1; i < n; i++) {
    if ((q[i] & 0xC0) != 0x80) return -1;
    c = (c << 6) | (q[i] & 0x3F);
  }
  r->p += n;
  return c;
}

static int rx_class(rx *r, gbuf *b) {
  cpset s = {.n = 0};
  bool neg = false;
  if (r->p < r->end && *r->p == '^') {
    neg = true;
    r->p++;
  }
  bool first = true;
  for (;;) {
    if (r->p >= r->end) return rx_fail(r, "unterminated class");
    if (*r->p == ']' && !first) {
      r->p++;
      break;
    }
    first = false;
    int64_t lo;
    if (*r->p == '\\') {
      r->p++;
      if (r->p < r->end && strchr("dws", *r->p)) {
        shorthand(&s, *r->p++);
        continue;
      }
      if (r->p < r->end && strchr("DWS", *r->p)) return rx_fail(r, "negated shorthand inside a class");
      lo = rx_escape(r);
    } else {
      lo = rx_utf8(r);
    }
    if (lo < 0) return rx_fail(r, "bad escape or character in a class");
    int64_t hi = lo;
    if (r->p + 1 < r->end && *r->p == '-' && r->p[1] != ']') {
      r->p++;
      if (*r->p == '\\') {
        r->p++;
        hi = rx_escape(r);
      } else {
        hi = rx_utf8(r);
      }
      if (hi < lo) return rx_fail(r, "bad range in a class");
    }
    cps_add(&s, (uint32_t)lo, (uint32_t)hi);
  }
  if (s.over) return rx_fail(r, "class with more than 64 ranges");
  cps_norm(&s, neg);
  emit_jchar_set(b, &s);
  return 0;
}

static int rx_alt(rx *r, gbuf *b);

static int rx_atom(rx *r, gbuf *b) {
  char ch = *r->p;
  if (ch == '(') {
    r->p++;
    if (r->p < r->end && *r->p == '?') {
      if (r->p + 1 < r->end && r->p[1] == ':') r->p += 2;
      else return rx_fail(r, "group flags, lookaround or named groups");
    }
    if (++r->depth > 32) return rx_fail(r, "groups nested deeper than 32");
    gb_str(b, "(");
    if (rx_alt(r, b) < 0) return r->c->rc;
    gb_str(b, ")");
    r->depth--;
    if (r->p >= r->end || *r->p != ')') return rx_fail(r, "unbalanced parenthesis");
    r->p++;
    return 0;
  }
  if (ch == '[') {
    r->p++;
    return rx_class(r, b);
  }
  cpset s = {.n = 0};
  if (ch == '.') {
    r->p++;
    cps_add(&s, '\n', '\n');
    cps_norm(&s, true);
    /* '.' as JSON text: no control characters (a subset of what it matches) */
    cpset t = {.n = 0};
    cps_add(&t, 0x20, 0x10FFFF);
    cps_norm(&t, false);
    emit_jchar_set(b, &t);
    return 0;
  }
  if (ch == '\\') {
    r->p++;
    if (r->p < r->end && strchr("dwsDWS", *r->p)) {
      char k = *r->p++;
      shorthand(&s, (char)(k | 0x20));
      cps_norm(&s, k >= 'A' && k <= 'Z');
      emit_jchar_set(b, &s);
      return 0;
    }
    if (r->p < r->end && strchr("bBAZz123456789", *r->p)) return rx_fail(r, "word boundaries, \\A \\Z or backreferences");
    int64_t c = rx_escape(r);
    if (c < 0) return rx_fail(r, "unknown escape");
    cps_add(&s, (uint32_t)c, (uint32_t)c);
    emit_jchar_set(b, &s);
    return 0;
  }
  if (ch == '^' || ch == '$') return rx_fail(r, "anchors inside the pattern");
  if (strchr("*+?{", ch)) return rx_fail(r, "a quantifier without an element");
  if (ch == ')') return rx_fail(r, "unbalanced parenthesis");
  int64_t c = rx_utf8(r);
  if (c < 0) return rx_fail(r, "invalid UTF-8");
  cps_add(&s, (uint32_t)c, (uint32_t)c);
  emit_jchar_set(b, &s);
  return 0;
}

static int rx_uint(rx *r, unsigned *v) {
  unsigned long x = 0;
  if (r->p >= r->end || *r->p < '0' || *r->p > '9') return -1;
  while (r->p < r->end && *r->p >= '0' && *r->p <= '9') {
    x = x * 10 + (unsigned long)(*r->p++ - '0');
    if (x > GRAMMAR_MAX_REPEAT) return -2;
  }
  *v = (unsigned)x;
  return 0;
}

static int rx_seq(rx *r, gbuf *b, bool top) {
  bool any = false;
  while (r->p < r->end && *r->p != '|' && *r->p != ')') {
    if (top && *r->p == '$' && r->p + 1 == r->end) break;
    if (top && *r->p == '$' && r->p + 1 < r->end && r->p[1] == '|') break;
    if (any) gb_str(b, " ");
    gbuf atom = {0};
    if (rx_atom(r, &atom) < 0) {
      free(atom.s);
      return r->c->rc;
    }
    char q = r->p < r->end ? *r->p : 0;
    if (q == '*' || q == '+' || q == '?' || q == '{') {
      unsigned mn = 0, mx = 0;
      bool inf = false;
      const char *save = r->p;
      r->p++;
      if (q == '*') inf = true;
      else if (q == '+') mn = 1, inf = true;
      else if (q == '?') mx = 1;
      else {
        int e = rx_uint(r, &mn);
        if (e == -2) {
          free(atom.s);
          return rx_fail(r, "repetition count too large");
        }
        if (e < 0) { /* Python takes a '{' not starting a count literally */
          r->p = save;
          free(atom.s);
          return rx_fail(r, "a literal '{'");
        }
        mx = mn;
        if (r->p < r->end && *r->p == ',') {
          r->p++;
          if (r->p < r->end && *r->p == '}') inf = true;
          else if (rx_uint(r, &mx) < 0) {
            free(atom.s);
            return rx_fail(r, "bad repetition");
          }
        }
        if (r->p >= r->end || *r->p != '}' || (!inf && mx < mn)) {
          free(atom.s);
          return rx_fail(r, "bad repetition");
        }
        r->p++;
      }
      if (r->p < r->end && *r->p == '?') r->p++; /* lazy: same language */
      else if (r->p < r->end && *r->p == '+') {
        free(atom.s);
        return rx_fail(r, "possessive quantifiers");
      }
      gb_str(b, "(");
      gb_add(b, atom.s, atom.n);
      gb_str(b, ")");
      if (inf) gb_fmt(b, "{%u,}", mn);
      else gb_fmt(b, "{%u,%u}", mn, mx);
    } else {
      gb_add(b, atom.s, atom.n);
    }
    free(atom.s);
    any = true;
  }
  if (!any) gb_str(b, "\"\"");
  return 0;
}

static int rx_alt(rx *r, gbuf *b) {
  if (rx_seq(r, b, false) < 0) return r->c->rc;
  while (r->p < r->end && *r->p == '|') {
    r->p++;
    gb_str(b, " | ");
    if (rx_seq(r, b, false) < 0) return r->c->rc;
  }
  return 0;
}

/* The JSON string (quotes included) of a pattern, searched as re.search. */
static int gen_pattern(sc *c, const char *pat, gbuf *e) {
  rx r = {.c = c, .p = pat, .end = pat + strlen(pat), .src = pat};
  gb_str(e, "\"\\\"\" (");
  bool first = true;
  for (;;) {
    bool a0 = false, a1 = false;
    if (r.p < r.end && *r.p == '^') {
      a0 = true;
      r.p++;
    }
    gbuf seq = {0};
    if (rx_seq(&r, &seq, true) < 0) {
      free(seq.s);
      return c->rc;
    }
    if (r.p < r.end && *r.p == '$') {
      a1 = true;
      r.p++;
    }
    if (!first) gb_str(e, " | ");
    gb_str(e, a0 ? "(" : "(jchar* ");
    gb_add(e, seq.s, seq.n);
    gb_str(e, a1 ? ")" : " jchar*)");
    free(seq.s);
    first = false;
    if (r.p < r.end && *r.p == '|') {
      r.p++;
      continue;
    }
    if (r.p < r.end) return rx_fail(&r, *r.p == ')' ? "unbalanced parenthesis" : "anchors inside the pattern");
    break;
  }
  gb_str(e, ") \"\\\"\"");
  return 0;
}

static int get_count(sc *c, json_t *s, const char *k, long long *v, bool *has) {
  json_t *x = json_object_get(s, k);
  *has = false;
  if (!x) return 0;
  if (!json_is_integer(x) && !(json_is_real(x) && json_real_value(x) == floor(json_real_value(x))))
    return fail(c, PW_EINVAL, "'%s' must be a non-negative integer", k);
  double d = json_number_value(x);
  if (d < 0) return fail(c, PW_EINVAL, "'%s' must be a non-negative integer", k);
  if (d > GRAMMAR_MAX_REPEAT) return c->lenient ? 0 : unsupported(c, k, " above 10000");
  *v = (long long)d;
  *has = true;
  return 0;
}

/* the rule of a format this compiler produces, or NULL */
static const char *format_rule(const char *f) {
  return strcmp(f, "date") == 0 ? "fdate" : strcmp(f, "time") == 0 ? "ftime"
         : strcmp(f, "date-time") == 0 ? "fdatetime" : strcmp(f, "uuid") == 0 ? "fuuid"
         : strcmp(f, "email") == 0 ? "femail" : NULL;
}

static int gen_string(sc *c, json_t *s, gbuf *e) {
  json_t *fmt = json_object_get(s, "format"), *pat = json_object_get(s, "pattern");
  long long mn = 0, mx = 0;
  bool hmn, hmx;
  if (get_count(c, s, "minLength", &mn, &hmn) < 0 || get_count(c, s, "maxLength", &mx, &hmx) < 0) return c->rc;
  if (c->lenient && fmt && json_is_string(fmt) && !format_rule(json_string_value(fmt)))
    fmt = NULL; /* a format it does not know: any string */
  if (c->lenient && (fmt || pat) && (hmn || hmx)) fmt = pat = NULL; /* the lengths, not the format or pattern */
  if (c->lenient && fmt && pat) fmt = NULL;
  if ((fmt && pat) || ((fmt || pat) && (hmn || hmx)))
    return unsupported(c, fmt ? "format" : "pattern", " combined with pattern, minLength or maxLength");
  if (fmt) {
    if (!json_is_string(fmt)) return fail(c, PW_EINVAL, "'format' must be a string");
    const char *f = json_string_value(fmt);
    const char *r = format_rule(f);
    if (!r) {
      if (c->badkw) snprintf(c->badkw, 64, "format");
      return fail(c, PW_EUNSUPPORTED, "unsupported keyword 'format' value '%.40s' (date, time, date-time, uuid, email)", f);
    }
    gb_fmt(e, "\"\\\"\" %s \"\\\"\"", r);
    return 0;
  }
  if (pat) {
    if (!json_is_string(pat)) return fail(c, PW_EINVAL, "'pattern' must be a string");
    return gen_pattern(c, json_string_value(pat), e);
  }
  if (hmn || hmx) {
    if (hmx && mx < mn) return fail(c, PW_EUNSUPPORTED, "maxLength below minLength: no string fits");
    if (hmx) gb_fmt(e, "\"\\\"\" jchar{%lld,%lld} \"\\\"\"", mn, mx);
    else gb_fmt(e, "\"\\\"\" jchar{%lld,} \"\\\"\"", mn);
    return 0;
  }
  gb_str(e, "jstr");
  return 0;
}

/* ---- objects and arrays ------------------------------------------------- */

typedef struct prop {
  const char *key;
  json_t *schema;
  bool req;
} prop;

static int gen_object(sc *c, json_t *props, json_t *req, json_t *addl, gbuf *e) {
  if (props && !json_is_object(props)) return fail(c, PW_EINVAL, "'properties' must be an object");
  if (req && !json_is_array(req)) return fail(c, PW_EINVAL, "'required' must be an array of strings");
  if (addl && !json_is_boolean(addl) && !json_is_object(addl))
    return fail(c, PW_EINVAL, "'additionalProperties' must be a boolean or a schema");
  size_t np = props ? json_object_size(props) : 0, nr = req ? json_array_size(req) : 0;
  prop *pl = calloc(np + nr + 1, sizeof *pl);
  if (!pl) return fail(c, PW_ENOMEM, "out of memory");
  size_t n = 0;
  const char *k;
  json_t *v;
  if (props) {
    json_object_foreach(props, k, v) pl[n++] = (prop){k, v, false};
  }
  for (size_t i = 0; i < nr; i++) {
    json_t *r = json_array_get(req, i);
    if (!json_is_string(r)) {
      free(pl);
      return fail(c, PW_EINVAL, "'required' must be an array of strings");
    }
    size_t j = 0;
    while (j < n && strcmp(pl[j].key, json_string_value(r)) != 0) j++;
    if (j == n) {
      if (json_is_false(addl)) {
        free(pl);
        return fail(c, PW_EUNSUPPORTED, "required property '%.60s' is not allowed by additionalProperties false",
                    json_string_value(r));
      }
      pl[n++] = (prop){json_string_value(r), addl && json_is_object(addl) ? addl : NULL, true};
    }
    pl[j].req = true;
  }
  int rc = 0;
  if (n == 0) {
    if (json_is_false(addl)) {
      gb_str(e, "\"{\" ws \"}\"");
    } else {
      char val[24] = "jvalue";
      if (addl && json_is_object(addl) && (rc = gen(c, addl, val)) < 0) goto out;
      gb_fmt(e, "\"{\" ws (jstr ws \":\" ws %s ws (\",\" ws jstr ws \":\" ws %s ws)*)? \"}\"", val, val);
    }
    goto out;
  }
  /* kv_i, then the chains: t_i = what may follow once something was
   * written (each element led by a comma), u_i = the same before anything
   * was written. Optional properties may be skipped. */
  int base = -1;
  char (*vals)[24] = calloc(n, sizeof *vals);
  if (!vals) {
    rc = fail(c, PW_ENOMEM, "out of memory");
    goto out;
  }
  for (size_t i = 0; i < n && !c->rc; i++) {
    if (!pl[i].schema) snprintf(vals[i], 24, "jvalue");
    else gen(c, pl[i].schema, vals[i]);
  }
  if (c->rc) {
    free(vals);
    rc = c->rc;
    goto out;
  }
  for (size_t i = 0; i < 2 * n; i++) {
    int id = new_rule(c);
    if (id < 0) break;
    if (base < 0) base = id;
  }
  if (c->rc) {
    free(vals);
    rc = c->rc;
    goto out;
  }
  /* t_i = rule base + i, u_i = rule base + n + i; index n means "empty". */
  for (size_t i = 0; i < n; i++) {
    gbuf kv = {0};
    json_t *ks = json_string(pl[i].key);
    char *kj = ks ? json_dumps(ks, JSON_ENCODE_ANY) : NULL;
    json_decref(ks);
    if (!kj) {
      free(vals);
      rc = fail(c, PW_ENOMEM, "out of memory");
      goto out;
    }
    grammar_gbnf_literal(&kv, kj, strlen(kj));
    free(kj);
    gb_fmt(&kv, " ws \":\" ws %s ws", vals[i]);
    char tn[24] = "", un[24] = "";
    if (i + 1 < n) {
      snprintf(tn, sizeof tn, " s%d", base + (int)i + 1);
      snprintf(un, sizeof un, "s%d", base + (int)n + (int)i + 1);
    }
    gb_fmt(&c->out, "s%d ::= \",\" ws %s%s", base + (int)i, kv.s, tn);
    if (!pl[i].req) gb_fmt(&c->out, " | %s", i + 1 < n ? tn + 1 : "\"\"");
    gb_str(&c->out, "\n");
    gb_fmt(&c->out, "s%d ::= %s%s", base + (int)n + (int)i, kv.s, tn);
    if (!pl[i].req) gb_fmt(&c->out, " | %s", i + 1 < n ? un : "\"\"");
    gb_str(&c->out, "\n");
    free(kv.s);
  }
  free(vals);
  gb_fmt(e, "\"{\" ws s%d \"}\"", base + (int)n);
out:
  free(pl);
  return rc < 0 ? rc : c->rc;
}

static int gen_array(sc *c, json_t *s, gbuf *e) {
  json_t *items = json_object_get(s, "items"), *pre = json_object_get(s, "prefixItems");
  if (pre && !json_is_array(pre)) return fail(c, PW_EINVAL, "'prefixItems' must be an array of schemas");
  if (items && !json_is_object(items) && !json_is_boolean(items)) {
    if (!c->lenient) return unsupported(c, "items", " as an array (use prefixItems)");
    items = NULL; /* draft 4's tuples: any items */
  }
  long long mn = 0, mx = -1, v;
  bool has;
  if (get_count(c, s, "minItems", &v, &has) < 0) return c->rc;
  if (has) mn = v;
  if (get_count(c, s, "maxItems", &v, &has) < 0) return c->rc;
  if (has) mx = v;
  long long k = pre ? (long long)json_array_size(pre) : 0;
  if (k > GRAMMAR_MAX_REPEAT) return unsupported(c, "prefixItems", " with more than 10000 items");
  if (json_is_false(items) && (mx < 0 || mx > k)) mx = k;
  if (mx >= 0 && mn > mx) return fail(c, PW_EUNSUPPORTED, "minItems above maxItems (or the items allowed): no array fits");
  char item[24] = "jvalue";
  if (items && json_is_object(items) && gen(c, items, item) < 0) return c->rc;
  if (mx == 0) {
    gb_str(e, "\"[\" ws \"]\"");
    return 0;
  }
  /* a_i: what may follow the i-th element (i >= 1). */
  long long stop = k > mn ? k : mn; /* from here on, only `item` repeats */
  if (stop < 1) stop = 1;
  if (mx >= 0 && stop > mx) stop = mx;
  int base = -1;
  for (long long i = 1; i <= stop && !c->rc; i++) {
    int id = new_rule(c);
    if (base < 0) base = id;
  }
  if (c->rc) return c->rc;
  char (*el)[24] = calloc((size_t)stop + 2, sizeof *el);
  if (!el) return fail(c, PW_ENOMEM, "out of memory");
  for (long long i = 1; i <= stop + 1 && !c->rc; i++) {
    if (i <= k) gen(c, json_array_get(pre, (size_t)(i - 1)), el[i]);
    else snprintf(el[i], 24, "%s", item);
  }
  if (c->rc) {
    free(el);
    return c->rc;
  }
  for (long long i = 1; i <= stop; i++) {
    gb_fmt(&c->out, "s%d ::= ", base + (int)(i - 1));
    if (i < stop) {
      gb_fmt(&c->out, "\",\" ws %s ws s%d", el[i + 1], base + (int)i);
      if (i >= mn) gb_str(&c->out, " | \"\"");
    } else if (mx >= 0 && i >= mx) {
      gb_str(&c->out, "\"\"");
    } else if (items && json_is_false(items) && i >= k) {
      gb_str(&c->out, "\"\"");
    } else if (mx < 0) {
      gb_fmt(&c->out, "(\",\" ws %s ws)*", item);
    } else {
      gb_fmt(&c->out, "(\",\" ws %s ws){0,%lld}", item, mx - i);
    }
    gb_str(&c->out, "\n");
  }
  gb_fmt(e, "\"[\" ws (%s ws s%d)%s \"]\"", el[1], base, mn == 0 ? "?" : "");
  free(el);
  return 0;
}

/* ---- combinators ------------------------------------------------------- */

static bool is_object_schema(json_t *s) {
  json_t *t = json_object_get(s, "type");
  if (t) return json_is_string(t) && strcmp(json_string_value(t), "object") == 0;
  return json_object_get(s, "properties") || json_object_get(s, "required");
}

static int gen_allof(sc *c, json_t *s, json_t *all, gbuf *e) {
  if (!json_is_array(all) || json_array_size(all) == 0) return fail(c, PW_EINVAL, "'allOf' must be a non-empty array");
  json_t *props = json_object(), *req = json_array();
  json_t *addl = NULL;
  bool closed = false;
  int rc = 0;
  if (!props || !req) {
    rc = fail(c, PW_ENOMEM, "out of memory");
    goto out;
  }
  size_t nb = json_array_size(all) + 1;
  for (size_t i = 0; i < nb && !rc; i++) {
    json_t *b = i == 0 ? s : json_array_get(all, i - 1);
    for (int hops = 0; json_is_object(b) && json_object_get(b, "$ref") && hops < 32; hops++) {
      json_t *r = json_object_get(b, "$ref");
      if (!json_is_string(r) || !(b = resolve(c, json_string_value(r)))) {
        rc = c->rc ? c->rc : fail(c, PW_EINVAL, "'$ref' must be a string");
        break;
      }
    }
    if (rc) break;
    if (!json_is_object(b)) {
      rc = fail(c, PW_EINVAL, "allOf branches must be schemas");
      break;
    }
    const char *k;
    json_t *v;
    json_object_foreach(b, k, v) {
      if (in_list(k, k_annotations) || strcmp(k, "properties") == 0 || strcmp(k, "required") == 0 ||
          strcmp(k, "additionalProperties") == 0 || strcmp(k, "allOf") == 0 || strcmp(k, "$ref") == 0)
        continue;
      if (strcmp(k, "type") == 0 && json_is_string(v) && strcmp(json_string_value(v), "object") == 0) continue;
      rc = unsupported(c, "allOf", " of schemas other than objects (properties, required, additionalProperties)");
      break;
    }
    if (rc) break;
    if (i > 0 && json_object_get(b, "allOf")) {
      rc = unsupported(c, "allOf", " nested in an allOf branch");
      break;
    }
    if (i > 0 && !is_object_schema(b)) {
      rc = unsupported(c, "allOf", " of schemas other than objects");
      break;
    }
    json_t *p = json_object_get(b, "properties");
    json_object_foreach(p, k, v) {
      json_t *old = json_object_get(props, k);
      if (old && !json_equal(old, v)) {
        rc = unsupported(c, "allOf", " with a property defined differently in two branches");
        break;
      }
      json_object_set(props, k, v);
    }
    json_t *r = json_object_get(b, "required");
    for (size_t j = 0; j < json_array_size(r); j++) json_array_append(req, json_array_get(r, j));
    json_t *a = json_object_get(b, "additionalProperties");
    if (a && json_is_false(a)) {
      closed = true;
    } else if (a && json_is_object(a)) {
      rc = unsupported(c, "allOf", " with additionalProperties schemas");
    }
  }
  /* A branch with additionalProperties false admits only its own
   * properties, whichever branch declared the others. */
  for (size_t i = 0; i < nb && closed && !rc; i++) {
    json_t *b = i == 0 ? s : json_array_get(all, i - 1);
    for (int hops = 0; json_is_object(b) && json_is_string(json_object_get(b, "$ref")) && hops < 32; hops++)
      b = resolve(c, json_string_value(json_object_get(b, "$ref")));
    if (!json_is_false(json_object_get(b, "additionalProperties"))) continue;
    json_t *p = json_object_get(b, "properties");
    const char *pk;
    json_t *pv;
    void *tmp;
    json_object_foreach_safe(props, tmp, pk, pv) {
      (void)pv;
      if (!p || !json_object_get(p, pk)) json_object_del(props, pk);
    }
    addl = json_false();
  }
  if (!rc) {
    /* required keys removed by an additionalProperties false branch make
     * the schema unsatisfiable */
    for (size_t j = 0; j < json_array_size(req) && !rc; j++) {
      const char *rk = json_string_value(json_array_get(req, j));
      if (!rk) rc = fail(c, PW_EINVAL, "'required' must be an array of strings");
      else if (addl && !json_object_get(props, rk))
        rc = fail(c, PW_EUNSUPPORTED, "allOf: required property '%.60s' is excluded by additionalProperties false", rk);
    }
  }
  if (!rc) rc = gen_object(c, props, req, addl ? addl : json_false(), e);
out:
  json_decref(props);
  json_decref(req);
  return rc < 0 ? rc : c->rc;
}

static bool value_has_type(json_t *v, const char *t) {
  if (strcmp(t, "string") == 0) return json_is_string(v);
  if (strcmp(t, "integer") == 0) return json_is_integer(v) || (json_is_real(v) && json_real_value(v) == floor(json_real_value(v)));
  if (strcmp(t, "number") == 0) return json_is_number(v);
  if (strcmp(t, "boolean") == 0) return json_is_boolean(v);
  if (strcmp(t, "null") == 0) return json_is_null(v);
  if (strcmp(t, "object") == 0) return json_is_object(v);
  if (strcmp(t, "array") == 0) return json_is_array(v);
  return false;
}

static void gen_literal(sc *c, json_t *v, gbuf *e) {
  char *s = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
  if (!s) {
    fail(c, PW_ENOMEM, "out of memory");
    return;
  }
  grammar_gbnf_literal(e, s, strlen(s));
  free(s);
}

/* Types of s: from "type" (a name or an array), else inferred from the
 * keywords present; nullable adds null. n = 0 means any value. */
static int schema_types(sc *c, json_t *s, const char **types, int *n) {
  static const char *const known[] = {"string", "integer", "number", "boolean", "null", "object", "array", NULL};
  json_t *t = json_object_get(s, "type");
  *n = 0;
  if (t) {
    size_t cnt = json_is_array(t) ? json_array_size(t) : 1;
    if (cnt == 0 || cnt > 7) return fail(c, PW_EINVAL, "'type' must be a type name or a non-empty array of them");
    for (size_t i = 0; i < cnt; i++) {
      json_t *x = json_is_array(t) ? json_array_get(t, i) : t;
      if (!json_is_string(x) || !in_list(json_string_value(x), known))
        return fail(c, PW_EINVAL, "'type' must be one of string, integer, number, boolean, null, object, array");
      types[(*n)++] = json_string_value(x);
    }
  } else if (json_object_get(s, "properties") || json_object_get(s, "required") ||
             json_object_get(s, "additionalProperties")) {
    types[(*n)++] = "object";
  } else if (json_object_get(s, "items") || json_object_get(s, "prefixItems") || json_object_get(s, "minItems") ||
             json_object_get(s, "maxItems")) {
    types[(*n)++] = "array";
  } else if (json_object_get(s, "minLength") || json_object_get(s, "maxLength") || json_object_get(s, "pattern") ||
             json_object_get(s, "format")) {
    types[(*n)++] = "string";
  } else if (json_object_get(s, "minimum") || json_object_get(s, "maximum")) {
    types[(*n)++] = "number";
  }
  json_t *nl = json_object_get(s, "nullable");
  if (nl && !json_is_boolean(nl)) return fail(c, PW_EINVAL, "'nullable' must be a boolean");
  if (json_is_true(nl) && *n > 0) {
    bool has = false;
    for (int i = 0; i < *n; i++) has |= strcmp(types[i], "null") == 0;
    if (!has) types[(*n)++] = "null";
  }
  return 0;
}

/* Compiles schema s into a new rule; its name goes to name (24 bytes). */
static int gen(sc *c, json_t *s, char *name) {
  if (c->rc) return c->rc;
  if (json_is_true(s) || (json_is_object(s) && json_object_size(s) == 0)) {
    snprintf(name, 24, "jvalue");
    return 0;
  }
  if (json_is_false(s)) return fail(c, PW_EUNSUPPORTED, "the schema false accepts no value");
  if (!json_is_object(s)) return fail(c, PW_EINVAL, "a schema must be an object or a boolean");
  if (++c->depth > SCHEMA_MAX_DEPTH) return fail(c, PW_ELIMIT, "schemas nested deeper than %d", SCHEMA_MAX_DEPTH);
  const char *k;
  json_t *v;
  bool constraints = false; /* keywords other than annotations and combinators */
  json_object_foreach(s, k, v) {
    if (in_list(k, k_annotations)) continue;
    if (!in_list(k, k_supported)) {
      if (c->lenient) continue; /* not enforced */
      return unsupported(c, k, NULL);
    }
    if (strcmp(k, "anyOf") && strcmp(k, "oneOf") && strcmp(k, "allOf") && strcmp(k, "$ref")) constraints = true;
  }
  int rc = 0;
  json_t *ref = json_object_get(s, "$ref");
  if (ref) {
    if (!json_is_string(ref)) return fail(c, PW_EINVAL, "'$ref' must be a string");
    if (constraints || json_object_get(s, "anyOf") || json_object_get(s, "oneOf") || json_object_get(s, "allOf"))
      return unsupported(c, "$ref", " with sibling keywords other than annotations");
    json_t *t = resolve(c, json_string_value(ref));
    if (!t) return c->rc;
    rc = gen_ref(c, t, name);
    c->depth--;
    return rc;
  }
  int id = new_rule(c);
  if (id < 0) return c->rc;
  gbuf e = {0};
  const char *types[8];
  int nt = 0;
  json_t *cst = json_object_get(s, "const"), *en = json_object_get(s, "enum");
  json_t *any = json_object_get(s, "anyOf"), *one = json_object_get(s, "oneOf"), *all = json_object_get(s, "allOf");
  if ((rc = schema_types(c, s, types, &nt)) < 0) goto out;
  if ((any != NULL) + (one != NULL) + (all != NULL) > 1) {
    rc = unsupported(c, any ? "anyOf" : "oneOf", " combined with another of anyOf, oneOf, allOf");
    goto out;
  }
  if (cst || en) {
    json_t *vals = cst ? NULL : en;
    if (en && (!json_is_array(en) || json_array_size(en) == 0 || json_array_size(en) > SCHEMA_MAX_ALTS)) {
      rc = fail(c, PW_EINVAL, "'enum' must be a non-empty array (at most %d values)", SCHEMA_MAX_ALTS);
      goto out;
    }
    size_t cnt = cst ? 1 : json_array_size(vals);
    int written = 0;
    gb_str(&e, "(");
    for (size_t i = 0; i < cnt; i++) {
      json_t *x = cst ? cst : json_array_get(vals, i);
      if (cst && en) { /* both: the const must be among the enum values */
        bool found = false;
        for (size_t j = 0; j < json_array_size(en); j++) found |= json_equal(json_array_get(en, j), cst);
        if (!found) continue;
      }
      bool ok = nt == 0;
      for (int j = 0; j < nt; j++) ok |= value_has_type(x, types[j]);
      if (!ok) continue;
      if (written++) gb_str(&e, " | ");
      gen_literal(c, x, &e);
    }
    gb_str(&e, ")");
    if (!written) {
      rc = fail(c, PW_EUNSUPPORTED, "no value of 'const'/'enum' has the schema's type");
      goto out;
    }
  } else if (any || one) {
    json_t *arr = any ? any : one;
    const char *kw = any ? "anyOf" : "oneOf";
    if (!json_is_array(arr) || json_array_size(arr) == 0 || json_array_size(arr) > SCHEMA_MAX_ALTS) {
      rc = fail(c, PW_EINVAL, "'%s' must be a non-empty array", kw);
      goto out;
    }
    if (constraints) {
      rc = unsupported(c, kw, " with sibling keywords other than annotations");
      goto out;
    }
    gb_str(&e, "(");
    for (size_t i = 0; i < json_array_size(arr) && !c->rc; i++) {
      char nm[24];
      if (gen(c, json_array_get(arr, i), nm) < 0) break;
      if (i) gb_str(&e, " | ");
      gb_str(&e, nm);
    }
    gb_str(&e, ")");
  } else if (all) {
    rc = gen_allof(c, s, all, &e);
  } else if (nt == 0) {
    gb_str(&e, "jvalue");
  } else {
    gb_str(&e, "(");
    for (int i = 0; i < nt && !c->rc; i++) {
      if (i) gb_str(&e, " | ");
      const char *t = types[i];
      if (strcmp(t, "string") == 0) gen_string(c, s, &e);
      else if (strcmp(t, "integer") == 0) gen_integer(c, s, &e);
      else if (strcmp(t, "number") == 0) gen_number(c, s, &e);
      else if (strcmp(t, "boolean") == 0) gb_str(&e, "jbool");
      else if (strcmp(t, "null") == 0) gb_str(&e, "jnull");
      else if (strcmp(t, "object") == 0)
        gen_object(c, json_object_get(s, "properties"), json_object_get(s, "required"),
                   json_object_get(s, "additionalProperties"), &e);
      else gen_array(c, s, &e);
    }
    gb_str(&e, ")");
  }
out:
  if (!rc && !c->rc) {
    if (e.oom) rc = fail(c, PW_ENOMEM, "out of memory");
    else put_rule(c, id, &e);
  }
  free(e.s);
  c->depth--;
  snprintf(name, 24, "s%d", id);
  return rc < 0 ? rc : c->rc;
}

int grammar_schema_to_gbnf(const char *schema, size_t len, char **gbnf_out, char *bad_keyword, char *err) {
  *gbnf_out = NULL;
  if (bad_keyword) bad_keyword[0] = 0;
  if (len > GRAMMAR_MAX_TEXT) return pw_seterr(err, PW_ELIMIT, "json schema: longer than %u bytes", GRAMMAR_MAX_TEXT);
  json_error_t je;
  json_t *root = json_loadb(schema, len, JSON_DECODE_ANY, &je);
  if (!root) return pw_seterr(err, PW_EINVAL, "json schema: invalid JSON: %s (line %d)", je.text, je.line);
  sc c = {.root = root, .err = err, .badkw = bad_keyword};
  char top[24];
  gen(&c, root, top);
  if (!c.rc) {
    gbuf all = {0};
    gb_fmt(&all, "root ::= %s\n", top);
    gb_add(&all, c.out.s ? c.out.s : "", c.out.n);
    gb_str(&all, k_lib);
    if (all.oom || c.out.oom) {
      free(all.s);
      fail(&c, PW_ENOMEM, "out of memory");
    } else {
      *gbnf_out = all.s;
    }
  }
  free(c.out.s);
  free(c.refs);
  json_decref(root);
  return c.rc;
}

int grammar_schemas_to_gbnf(const char *const *schemas, const size_t *lens, const bool *lenient, int n,
                            char **gbnf_out, char *bad_keyword, char *err) {
  *gbnf_out = NULL;
  if (bad_keyword) bad_keyword[0] = 0;
  if (n < 0 || n > GRAMMAR_MAX_SCHEMAS)
    return pw_seterr(err, PW_ELIMIT, "json schema: more than %d schemas in one grammar", GRAMMAR_MAX_SCHEMAS);
  /* One compiler state across the documents keeps rule numbers distinct;
   * references resolve within their own document only. */
  sc c = {.err = err, .badkw = bad_keyword};
  gbuf tops = {0};
  size_t total = 0;
  for (int i = 0; i < n && !c.rc; i++) {
    total += lens[i];
    if (total > GRAMMAR_MAX_TEXT) {
      fail(&c, PW_ELIMIT, "longer than %u bytes in all", GRAMMAR_MAX_TEXT);
      break;
    }
    json_error_t je;
    json_t *root = json_loadb(schemas[i], lens[i], JSON_DECODE_ANY, &je);
    if (!root) {
      fail(&c, PW_EINVAL, "invalid JSON: %s (line %d)", je.text, je.line);
      break;
    }
    c.root = root;
    c.n_refs = 0;
    c.lenient = lenient && lenient[i];
    char top[24];
    gen(&c, root, top);
    gb_fmt(&tops, "schema%d ::= %s\n", i, top);
    json_decref(root);
  }
  if (!c.rc) {
    gb_add(&tops, c.out.s ? c.out.s : "", c.out.n);
    gb_str(&tops, k_lib);
    if (tops.oom || c.out.oom) fail(&c, PW_ENOMEM, "out of memory");
    else *gbnf_out = tops.s, tops.s = NULL;
  }
  free(tops.s);
  free(c.out.s);
  free(c.refs);
  return c.rc;
}

int grammar_from_schema(const char *schema, size_t len, grammar **out, char *bad_keyword, char *err) {
  *out = NULL;
  char *g = NULL;
  int rc = grammar_schema_to_gbnf(schema, len, &g, bad_keyword, err);
  if (rc < 0) return rc;
  rc = grammar_parse(g, strlen(g), out, err);
  free(g);
  return rc;
}
