/* jinja_lib.c - the builtin library of the Jinja renderer: Python-like
 * str()/repr(), truthiness, equality and ordering, arithmetic, attribute and
 * item access, slicing, the filters, tests, string/dict/list methods and
 * globals that chat templates use, and HF's tojson (json.dumps with
 * ensure_ascii=False).
 *
 * Not here: evaluation of the tree and scopes (jinja.c). Case mapping
 * (upper, lower, title, capitalize) covers ASCII only; other text is kept.
 */
#include "chat/jinja_int.h"
#include "chat/jinja_lib.h"

#include "base/error.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- names ---- */
enum {
  F_ABS, F_CAPITALIZE, F_COUNT, F_DEFAULT, F_DICTSORT, F_ESCAPE, F_FIRST, F_FLOAT, F_FORMAT, F_INDENT,
  F_INT, F_ITEMS, F_JOIN, F_KEYS, F_LAST, F_LENGTH, F_LIST, F_LOWER, F_MAP, F_MAX, F_MIN, F_REJECT,
  F_REJECTATTR, F_REPLACE, F_REVERSE, F_ROUND, F_SAFE, F_SELECT, F_SELECTATTR, F_SORT, F_STRING, F_SUM,
  F_TITLE, F_TOJSON, F_TRIM, F_UNIQUE, F_UPPER, F_VALUES, F_WORDCOUNT, F_CENTER, F_TRUNCATE, F_BATCH, F_ATTR,
  F_FROM_JSON
};

static const struct {
  const char *name;
  int id;
} k_filters[] = {
    {"abs", F_ABS},       {"attr", F_ATTR},       {"batch", F_BATCH},         {"capitalize", F_CAPITALIZE},
    {"center", F_CENTER}, {"count", F_COUNT},     {"d", F_DEFAULT},           {"default", F_DEFAULT},
    {"dictsort", F_DICTSORT}, {"e", F_ESCAPE},    {"escape", F_ESCAPE},       {"first", F_FIRST},
    {"float", F_FLOAT},   {"format", F_FORMAT},   {"from_json", F_FROM_JSON},   {"indent", F_INDENT},       {"int", F_INT},
    {"items", F_ITEMS},   {"join", F_JOIN},       {"keys", F_KEYS},           {"last", F_LAST},
    {"length", F_LENGTH}, {"list", F_LIST},       {"lower", F_LOWER},         {"map", F_MAP},
    {"max", F_MAX},       {"min", F_MIN},         {"reject", F_REJECT},       {"rejectattr", F_REJECTATTR},
    {"replace", F_REPLACE}, {"reverse", F_REVERSE}, {"round", F_ROUND},       {"safe", F_SAFE},
    {"select", F_SELECT}, {"selectattr", F_SELECTATTR}, {"sort", F_SORT},     {"string", F_STRING},
    {"sum", F_SUM},       {"title", F_TITLE},     {"tojson", F_TOJSON},       {"trim", F_TRIM},
    {"truncate", F_TRUNCATE}, {"unique", F_UNIQUE}, {"upper", F_UPPER},       {"values", F_VALUES},
    {"wordcount", F_WORDCOUNT},
};

enum {
  T_BOOLEAN, T_CALLABLE, T_DEFINED, T_DIVISIBLEBY, T_EQ, T_EVEN, T_FALSE, T_FLOAT, T_GE, T_GT, T_IN,
  T_INTEGER, T_ITERABLE, T_LE, T_LOWER, T_LT, T_MAPPING, T_NE, T_NONE, T_NUMBER, T_ODD, T_SAMEAS,
  T_SEQUENCE, T_STRING, T_TRUE, T_UNDEFINED, T_UPPER, T_ESCAPED, T_FILTER, T_TEST
};

static const struct {
  const char *name;
  int id;
} k_tests[] = {
    {"boolean", T_BOOLEAN}, {"callable", T_CALLABLE}, {"defined", T_DEFINED}, {"divisibleby", T_DIVISIBLEBY},
    {"eq", T_EQ},           {"equalto", T_EQ},        {"escaped", T_ESCAPED}, {"even", T_EVEN},
    {"false", T_FALSE},     {"filter", T_FILTER},     {"float", T_FLOAT},     {"ge", T_GE},
    {"greaterthan", T_GT},  {"gt", T_GT},             {"in", T_IN},           {"integer", T_INTEGER},
    {"iterable", T_ITERABLE}, {"le", T_LE},           {"lessthan", T_LT},     {"lower", T_LOWER},
    {"lt", T_LT},           {"mapping", T_MAPPING},   {"ne", T_NE},           {"none", T_NONE},
    {"number", T_NUMBER},   {"odd", T_ODD},           {"sameas", T_SAMEAS},   {"sequence", T_SEQUENCE},
    {"string", T_STRING},   {"test", T_TEST},         {"true", T_TRUE},       {"undefined", T_UNDEFINED},
    {"upper", T_UPPER},
};

int jinja_filter_id(const char *name) {
  for (size_t i = 0; i < sizeof k_filters / sizeof k_filters[0]; i++)
    if (strcmp(k_filters[i].name, name) == 0) return k_filters[i].id;
  return -1;
}

int jinja_test_id(const char *name) {
  for (size_t i = 0; i < sizeof k_tests / sizeof k_tests[0]; i++)
    if (strcmp(k_tests[i].name, name) == 0) return k_tests[i].id;
  return -1;
}

enum { G_RANGE, G_DICT, G_NAMESPACE, G_RAISE, G_STRFTIME, G_LIST };

/* Immortal function objects for the globals: shared by every render and
 * thread, never counted or freed. */
#define GFUNC(id_, nm)                                                             \
  { .h = {.rc = 1, .type = JV_FUNC, .immortal = 1}, .kind = JFN_GLOBAL, .id = id_, \
    .self = {.t = JV_UNDEF}, .name = nm }
static jfunc g_funcs[] = {
    GFUNC(G_RANGE, "range"),          GFUNC(G_DICT, "dict"),
    GFUNC(G_NAMESPACE, "namespace"), GFUNC(G_RAISE, "raise_exception"),
    GFUNC(G_STRFTIME, "strftime_now"),
};

int jlib_global(R *r, const char *name, jv *out) {
  (void)r;
  for (size_t i = 0; i < sizeof g_funcs / sizeof g_funcs[0]; i++) {
    if (strcmp(g_funcs[i].name, name) == 0) {
      out->t = JV_FUNC;
      out->u.o = &g_funcs[i].h;
      return 0;
    }
  }
  *out = jv_undef(name);
  return 0;
}

/* ---- basics ---- */
const char *jv_typename(jv v) {
  switch ((jv_type)v.t) {
  case JV_UNDEF: return "Undefined";
  case JV_NONE: return "NoneType";
  case JV_BOOL: return "bool";
  case JV_INT: return "int";
  case JV_FLOAT: return "float";
  case JV_STR: return "str";
  case JV_LIST: return JV_LISTP(v)->tuple ? "tuple" : "list";
  case JV_DICT: return "dict";
  case JV_NS: return "Namespace";
  case JV_FUNC: return "function";
  case JV_LOOP: return "LoopContext";
  }
  return "object";
}

bool jv_truthy(jv v) {
  switch ((jv_type)v.t) {
  case JV_UNDEF:
  case JV_NONE: return false;
  case JV_BOOL: return v.u.b;
  case JV_INT: return v.u.i != 0;
  case JV_FLOAT: return v.u.f != 0.0;
  case JV_STR: return JV_STRP(v)->len != 0;
  case JV_LIST: return JV_LISTP(v)->n != 0;
  case JV_DICT: return JV_DICTP(v)->n != 0;
  default: return true;
  }
}

static bool is_num(jv v) { return v.t == JV_INT || v.t == JV_FLOAT || v.t == JV_BOOL; }
static bool is_intlike(jv v) { return v.t == JV_INT || v.t == JV_BOOL; }
/* Floats convert saturating (NaN as 0): a plain cast of one outside the
 * int64 range is undefined behaviour. */
static int64_t f_to_i64(double f) {
  if (f != f) return 0;
  if (f >= 9223372036854775808.0) return INT64_MAX;
  if (f < -9223372036854775808.0) return INT64_MIN;
  return (int64_t)f;
}
static int64_t as_int(jv v) { return v.t == JV_BOOL ? (int64_t)v.u.b : v.t == JV_INT ? v.u.i : f_to_i64(v.u.f); }
static double as_f(jv v) { return v.t == JV_FLOAT ? v.u.f : (double)as_int(v); }

static int too_deep(R *r, int line) {
  return jr_err(r, line, PW_ELIMIT, "value nests deeper than %d levels", r->max_depth);
}

int jv_eq(R *r, jv a, jv b, int depth) {
  if (depth > r->max_depth) return too_deep(r, r->line);
  if (is_num(a) && is_num(b)) {
    if (a.t == JV_FLOAT || b.t == JV_FLOAT) return as_f(a) == as_f(b);
    return as_int(a) == as_int(b);
  }
  if (a.t != b.t) return 0;
  switch ((jv_type)a.t) {
  case JV_UNDEF:
  case JV_NONE: return 1;
  case JV_STR: {
    jstr *x = JV_STRP(a), *y = JV_STRP(b);
    return x->len == y->len && memcmp(x->s, y->s, x->len) == 0;
  }
  case JV_LIST: {
    jlist *x = JV_LISTP(a), *y = JV_LISTP(b);
    if (x->tuple != y->tuple || x->n != y->n) return 0;
    for (size_t i = 0; i < x->n; i++) {
      int e = jv_eq(r, x->v[i], y->v[i], depth + 1);
      if (e != 1) return e;
    }
    return 1;
  }
  case JV_DICT: {
    jdict *x = JV_DICTP(a), *y = JV_DICTP(b);
    if (x->n != y->n) return 0;
    for (size_t i = 0; i < x->n; i++) {
      jv *o = jdict_find(r, y, x->e[i].k);
      if (!o) return 0;
      int e = jv_eq(r, x->e[i].v, *o, depth + 1);
      if (e != 1) return e;
    }
    return 1;
  }
  default: return a.u.o == b.u.o;
  }
}

/* Python ordering: -1/0/1 into *c, or an error for unorderable types. */
static int jv_cmp(R *r, jv a, jv b, int *c, int line, int depth) {
  if (depth > r->max_depth) return too_deep(r, line);
  if (is_num(a) && is_num(b)) {
    if (a.t == JV_FLOAT || b.t == JV_FLOAT) {
      double x = as_f(a), y = as_f(b);
      *c = x < y ? -1 : x > y ? 1 : 0;
    } else {
      int64_t x = as_int(a), y = as_int(b);
      *c = x < y ? -1 : x > y ? 1 : 0;
    }
    return 0;
  }
  if (a.t == JV_STR && b.t == JV_STR) {
    jstr *x = JV_STRP(a), *y = JV_STRP(b);
    size_t n = x->len < y->len ? x->len : y->len;
    int m = memcmp(x->s, y->s, n);
    *c = m < 0 ? -1 : m > 0 ? 1 : x->len < y->len ? -1 : x->len > y->len ? 1 : 0;
    return 0;
  }
  if (a.t == JV_LIST && b.t == JV_LIST && JV_LISTP(a)->tuple == JV_LISTP(b)->tuple) {
    jlist *x = JV_LISTP(a), *y = JV_LISTP(b);
    for (size_t i = 0; i < x->n && i < y->n; i++) {
      if (jv_cmp(r, x->v[i], y->v[i], c, line, depth + 1)) return -1;
      if (*c) return 0;
    }
    *c = x->n < y->n ? -1 : x->n > y->n ? 1 : 0;
    return 0;
  }
  if (a.t == JV_UNDEF || b.t == JV_UNDEF) {
    jv u = a.t == JV_UNDEF ? a : b;
    return jr_err(r, line, PW_ETEMPLATE, "'%s' is undefined", u.u.hint ? u.u.hint : "value");
  }
  return jr_err(r, line, PW_ETEMPLATE, "comparison not supported between instances of '%s' and '%s'",
                jv_typename(a), jv_typename(b));
}

/* ---- text ---- */
static int put_float(R *r, jbuf *b, double f) {
  if (isnan(f)) return jbuf_puts(r, b, "nan");
  if (isinf(f)) return jbuf_puts(r, b, f < 0 ? "-inf" : "inf");
  /* Python repr: the shortest digits that round-trip, fixed notation for
   * exponents in [-4, 16), else scientific. */
  char e[64];
  int p;
  for (p = 1; p <= 17; p++) {
    snprintf(e, sizeof e, "%.*e", p - 1, f);
    if (strtod(e, NULL) == f) break;
  }
  if (p > 17) p = 17;
  const char *ep = strchr(e, 'e');
  int exp10 = ep ? atoi(ep + 1) : 0;
  char o[400];
  if (exp10 >= -4 && exp10 < 16) {
    int dec = p - 1 - exp10;
    if (dec < 0) dec = 0;
    snprintf(o, sizeof o, "%.*f", dec, f);
    if (dec == 0) strcat(o, ".0");
  } else {
    /* mantissa digits then e+XX / e-XX (at least two exponent digits) */
    size_t ml = (size_t)(ep - e);
    memcpy(o, e, ml);
    snprintf(o + ml, sizeof o - ml, "e%c%02d", exp10 < 0 ? '-' : '+', exp10 < 0 ? -exp10 : exp10);
  }
  return jbuf_puts(r, b, o);
}

static int repr_str(R *r, jbuf *b, const char *s, size_t n) {
  bool has_sq = memchr(s, '\'', n) != NULL, has_dq = memchr(s, '"', n) != NULL;
  char q = has_sq && !has_dq ? '"' : '\'';
  if (jbuf_putc(r, b, q)) return -1;
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)s[i];
    int rc;
    if (c == (unsigned char)q || c == '\\') {
      char t[2] = {'\\', (char)c};
      rc = jbuf_put(r, b, t, 2);
    } else if (c == '\n') {
      rc = jbuf_puts(r, b, "\\n");
    } else if (c == '\r') {
      rc = jbuf_puts(r, b, "\\r");
    } else if (c == '\t') {
      rc = jbuf_puts(r, b, "\\t");
    } else if (c < 0x20 || c == 0x7f) {
      rc = jbuf_printf(r, b, "\\x%02x", c);
    } else {
      rc = jbuf_putc(r, b, (char)c);
    }
    if (rc) return -1;
  }
  return jbuf_putc(r, b, q);
}

static int repr_d(R *r, jbuf *b, jv v, int depth);

static int str_d(R *r, jbuf *b, jv v, int depth) {
  switch ((jv_type)v.t) {
  case JV_UNDEF: return 0;
  case JV_NONE: return jbuf_puts(r, b, "None");
  case JV_BOOL: return jbuf_puts(r, b, v.u.b ? "True" : "False");
  case JV_INT: return jbuf_printf(r, b, "%lld", (long long)v.u.i);
  case JV_FLOAT: return put_float(r, b, v.u.f);
  case JV_STR: return jbuf_put(r, b, JV_STRP(v)->s, JV_STRP(v)->len);
  default: return repr_d(r, b, v, depth);
  }
}

static int repr_d(R *r, jbuf *b, jv v, int depth) {
  if (depth > r->max_depth) return too_deep(r, r->line);
  switch ((jv_type)v.t) {
  case JV_STR: return repr_str(r, b, JV_STRP(v)->s, JV_STRP(v)->len);
  case JV_UNDEF: return jbuf_puts(r, b, "Undefined");
  case JV_LIST: {
    jlist *l = JV_LISTP(v);
    if (jbuf_putc(r, b, l->tuple ? '(' : '[')) return -1;
    for (size_t i = 0; i < l->n; i++) {
      if (i && jbuf_puts(r, b, ", ")) return -1;
      if (repr_d(r, b, l->v[i], depth + 1)) return -1;
    }
    if (l->tuple && l->n == 1 && jbuf_putc(r, b, ',')) return -1;
    return jbuf_putc(r, b, l->tuple ? ')' : ']');
  }
  case JV_DICT:
  case JV_NS: {
    jdict *d = JV_DICTP(v);
    if (v.t == JV_NS && jbuf_puts(r, b, "<Namespace ")) return -1;
    if (jbuf_putc(r, b, '{')) return -1;
    for (size_t i = 0; i < d->n; i++) {
      if (i && jbuf_puts(r, b, ", ")) return -1;
      if (repr_d(r, b, d->e[i].k, depth + 1) || jbuf_puts(r, b, ": ") || repr_d(r, b, d->e[i].v, depth + 1))
        return -1;
    }
    if (jbuf_putc(r, b, '}')) return -1;
    return v.t == JV_NS ? jbuf_putc(r, b, '>') : 0;
  }
  case JV_FUNC: {
    jfunc *f = (jfunc *)v.u.o;
    if (f->kind == JFN_MACRO) return jbuf_printf(r, b, "<Macro '%s'>", f->name);
    return jbuf_printf(r, b, "<function %s>", f->name ? f->name : "?");
  }
  case JV_LOOP: return jbuf_puts(r, b, "<LoopContext>");
  default: return str_d(r, b, v, depth);
  }
}

int jlib_str(R *r, jbuf *b, jv v) { return str_d(r, b, v, 0); }
int jlib_repr(R *r, jbuf *b, jv v) { return repr_d(r, b, v, 0); }

int jlib_tostr(R *r, jv v, jv *out) {
  if (v.t == JV_STR) {
    *out = jv_ref(v);
    return 0;
  }
  jbuf b;
  jbuf_init(r, &b);
  if (str_d(r, &b, v, 0)) {
    jbuf_fini(&b);
    return -1;
  }
  return jbuf_take(r, &b, out);
}

/* JSON as Python's json.dumps(ensure_ascii=False) writes it. */
typedef struct jsonfmt {
  const char *indent; /* NULL: one line */
  const char *item_sep, *key_sep;
  bool sort_keys;
} jsonfmt;

static int json_str(R *r, jbuf *b, const char *s, size_t n) {
  if (jbuf_putc(r, b, '"')) return -1;
  size_t run = 0;
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)s[i];
    const char *esc = NULL;
    char u[8];
    switch (c) {
    case '"': esc = "\\\""; break;
    case '\\': esc = "\\\\"; break;
    case '\n': esc = "\\n"; break;
    case '\r': esc = "\\r"; break;
    case '\t': esc = "\\t"; break;
    case '\b': esc = "\\b"; break;
    case '\f': esc = "\\f"; break;
    default:
      if (c < 0x20) {
        snprintf(u, sizeof u, "\\u%04x", c);
        esc = u;
      }
    }
    if (esc) {
      if (jbuf_put(r, b, s + run, i - run) || jbuf_puts(r, b, esc)) return -1;
      run = i + 1;
    }
  }
  if (jbuf_put(r, b, s + run, n - run)) return -1;
  return jbuf_putc(r, b, '"');
}

static int json_nl(R *r, jbuf *b, const jsonfmt *f, int level) {
  if (!f->indent) return 0;
  if (jbuf_putc(r, b, '\n')) return -1;
  for (int i = 0; i < level; i++)
    if (jbuf_puts(r, b, f->indent)) return -1;
  return 0;
}

static int json_d(R *r, jbuf *b, jv v, const jsonfmt *f, int level, int line) {
  if (level > r->max_depth) return too_deep(r, line);
  switch ((jv_type)v.t) {
  case JV_NONE: return jbuf_puts(r, b, "null");
  case JV_BOOL: return jbuf_puts(r, b, v.u.b ? "true" : "false");
  case JV_INT: return jbuf_printf(r, b, "%lld", (long long)v.u.i);
  case JV_FLOAT:
    if (isnan(v.u.f)) return jbuf_puts(r, b, "NaN");
    if (isinf(v.u.f)) return jbuf_puts(r, b, v.u.f < 0 ? "-Infinity" : "Infinity");
    return put_float(r, b, v.u.f);
  case JV_STR: return json_str(r, b, JV_STRP(v)->s, JV_STRP(v)->len);
  case JV_LIST: {
    jlist *l = JV_LISTP(v);
    if (l->n == 0) return jbuf_puts(r, b, "[]");
    if (jbuf_putc(r, b, '[')) return -1;
    for (size_t i = 0; i < l->n; i++) {
      if (i && jbuf_puts(r, b, f->item_sep)) return -1;
      if (json_nl(r, b, f, level + 1) || json_d(r, b, l->v[i], f, level + 1, line)) return -1;
    }
    if (json_nl(r, b, f, level)) return -1;
    return jbuf_putc(r, b, ']');
  }
  case JV_DICT: {
    jdict *d = JV_DICTP(v);
    if (d->n == 0) return jbuf_puts(r, b, "{}");
    size_t *ord = NULL;
    if (f->sort_keys && d->n > 1) {
      ord = jr_alloc(r, d->n * sizeof(size_t));
      if (!ord) return -1;
      for (size_t i = 0; i < d->n; i++) ord[i] = i;
      for (size_t i = 1; i < d->n; i++) { /* insertion sort: stable, small n */
        size_t k = ord[i], j = i;
        while (j > 0) {
          int c = 0;
          if (jv_cmp(r, d->e[ord[j - 1]].k, d->e[k].k, &c, line, 0)) {
            jr_free(r, ord, d->n * sizeof(size_t));
            return -1;
          }
          if (c <= 0) break;
          ord[j] = ord[j - 1];
          j--;
        }
        ord[j] = k;
      }
    }
    int rc = jbuf_putc(r, b, '{');
    for (size_t i = 0; i < d->n && rc == 0; i++) {
      jkv *e = &d->e[ord ? ord[i] : i];
      if (i) rc = jbuf_puts(r, b, f->item_sep);
      if (rc == 0) rc = json_nl(r, b, f, level + 1);
      if (rc) break;
      jv k = e->k;
      if (k.t == JV_STR)
        rc = json_str(r, b, JV_STRP(k)->s, JV_STRP(k)->len);
      else if (k.t == JV_INT || k.t == JV_FLOAT || k.t == JV_BOOL || k.t == JV_NONE) {
        jbuf kb;
        jbuf_init(r, &kb);
        rc = json_d(r, &kb, k, f, level + 1, line);
        if (rc == 0) rc = json_str(r, b, kb.p, kb.n);
        jbuf_fini(&kb);
      } else {
        rc = jr_err(r, line, PW_ETEMPLATE, "keys must be str, int, float, bool or None, not %s", jv_typename(k));
      }
      if (rc == 0) rc = jbuf_puts(r, b, f->key_sep);
      if (rc == 0) rc = json_d(r, b, e->v, f, level + 1, line);
    }
    if (ord) jr_free(r, ord, d->n * sizeof(size_t));
    if (rc) return -1;
    if (json_nl(r, b, f, level)) return -1;
    return jbuf_putc(r, b, '}');
  }
  default:
    return jr_err(r, line, PW_ETEMPLATE, "Object of type %s is not JSON serializable", jv_typename(v));
  }
}

/* ---- UTF-8 / code points ---- */
static uint32_t cp_at(const char *s, size_t len, size_t i, size_t *next) {
  const unsigned char *u = (const unsigned char *)s;
  size_t j = jinja_utf8_next(s, len, i);
  *next = j;
  size_t n = j - i;
  if (n == 1) return u[i];
  if (n == 2) return ((uint32_t)(u[i] & 0x1F) << 6) | (u[i + 1] & 0x3F);
  if (n == 3) return ((uint32_t)(u[i] & 0x0F) << 12) | ((uint32_t)(u[i + 1] & 0x3F) << 6) | (u[i + 2] & 0x3F);
  return ((uint32_t)(u[i] & 0x07) << 18) | ((uint32_t)(u[i + 1] & 0x3F) << 12) | ((uint32_t)(u[i + 2] & 0x3F) << 6) |
         (u[i + 3] & 0x3F);
}

/* Python's str.isspace() code points. */
static bool cp_space(uint32_t c) {
  return (c >= 9 && c <= 13) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

/* Byte offset of code point index k (0..ncp) in s. */
static size_t cp_off(const jstr *s, size_t k) {
  if (s->ncp == s->len) return k;
  size_t i = 0;
  while (k-- > 0 && i < s->len) i = jinja_utf8_next(s->s, s->len, i);
  return i;
}

/* Code point offsets table (ncp + 1 entries), or NULL for ASCII strings. */
static size_t *cp_table(R *r, const jstr *s, bool *fail) {
  *fail = false;
  if (s->ncp == s->len) return NULL;
  size_t *t = jr_alloc(r, (s->ncp + 1) * sizeof(size_t));
  if (!t) {
    *fail = true;
    return NULL;
  }
  size_t i = 0, k = 0;
  while (i < s->len) {
    t[k++] = i;
    i = jinja_utf8_next(s->s, s->len, i);
  }
  t[k] = s->len;
  return t;
}

static int undefined_err(R *r, jv v, int line) {
  return jr_err(r, line, PW_ETEMPLATE, "'%s' is undefined", v.u.hint ? v.u.hint : "value");
}

/* ---- attribute / item / slice ---- */
static const char *const k_str_methods[] = {
    "startswith", "endswith", "split", "rsplit", "strip", "lstrip", "rstrip", "upper", "lower", "replace",
    "title", "capitalize", "find", "rfind", "count", "format", "join", "isdigit", "isalpha", "isspace",
    "isalnum", "islower", "isupper", "splitlines", "index", "rindex", NULL};
static const char *const k_dict_methods[] = {"items", "keys", "values", "get", "pop", "update", "copy",
                                             "setdefault", "clear", "popitem", NULL};
static const char *const k_list_methods[] = {"append", "pop", "index", "count", "extend", "insert",
                                             "remove", "reverse", "sort", "copy", "clear", NULL};

static const char *in_names(const char *const *names, const char *n) {
  for (int i = 0; names[i]; i++)
    if (strcmp(names[i], n) == 0) return names[i];
  return NULL;
}

static int bound_method(R *r, jv self, const char *name, jv *out) {
  jfunc *f = (jfunc *)jr_obj(r, sizeof(jfunc), JV_FUNC);
  if (!f) return -1;
  f->kind = JFN_METHOD;
  f->self = jv_ref(self);
  f->name = name;
  *out = JV_OBJ(f);
  return 0;
}

static int loop_attr(R *r, jloop *lp, const char *name, jv *out) {
  jlist *l = JV_LISTP(lp->items);
  size_t i = lp->index0, n = l->n;
  if (!strcmp(name, "index")) *out = jv_int((int64_t)i + 1);
  else if (!strcmp(name, "index0")) *out = jv_int((int64_t)i);
  else if (!strcmp(name, "revindex")) *out = jv_int((int64_t)(n - i));
  else if (!strcmp(name, "revindex0")) *out = jv_int((int64_t)(n - i - 1));
  else if (!strcmp(name, "first")) *out = jv_bool(i == 0);
  else if (!strcmp(name, "last")) *out = jv_bool(i + 1 == n);
  else if (!strcmp(name, "length")) *out = jv_int((int64_t)n);
  else if (!strcmp(name, "depth")) *out = jv_int(lp->depth0 + 1);
  else if (!strcmp(name, "depth0")) *out = jv_int(lp->depth0);
  else if (!strcmp(name, "previtem")) *out = i > 0 ? jv_ref(l->v[i - 1]) : jv_undef("previtem");
  else if (!strcmp(name, "nextitem")) *out = i + 1 < n ? jv_ref(l->v[i + 1]) : jv_undef("nextitem");
  else if (!strcmp(name, "cycle")) return bound_method(r, JV_OBJ(lp), "cycle", out);
  else *out = jv_undef(name);
  return 0;
}

int jlib_getattr(R *r, jv obj, const char *name, jv *out, int line) {
  const char *m;
  switch ((jv_type)obj.t) {
  case JV_UNDEF: return undefined_err(r, obj, line);
  case JV_DICT:
    /* Jinja2 tries the Python attribute first: d.items is the method. */
    if ((m = in_names(k_dict_methods, name))) return bound_method(r, obj, m, out);
    /* fall through */
  case JV_NS: {
    jv *v = jdict_get(JV_DICTP(obj), name, strlen(name));
    *out = v ? jv_ref(*v) : jv_undef(name);
    return 0;
  }
  case JV_STR:
    if ((m = in_names(k_str_methods, name))) return bound_method(r, obj, m, out);
    break;
  case JV_LIST:
    if ((m = in_names(k_list_methods, name))) return bound_method(r, obj, m, out);
    break;
  case JV_LOOP: return loop_attr(r, (jloop *)obj.u.o, name, out);
  default: break;
  }
  *out = jv_undef(name);
  return 0;
}

static bool norm_index(int64_t *i, size_t n) {
  if (*i < 0) *i += (int64_t)n;
  return *i >= 0 && (uint64_t)*i < n;
}

static int getitem(R *r, jv obj, jv key, jv *out, int line);

/* obj[key]. An undefined result names the key only when the key outlives
 * the render (a template constant): a computed key is freed by the caller,
 * and a name kept from it would dangle (found by fuzzing: an error message
 * read a freed attribute name in sort(attribute=...)). */
int jlib_getitem(R *r, jv obj, jv key, jv *out, int line) {
  int rc = getitem(r, obj, key, out, line);
  if (rc == 0 && out->t == JV_UNDEF && key.t == JV_STR && !JV_STRP(key)->h.immortal &&
      out->u.hint == JV_STRP(key)->s)
    out->u.hint = NULL;
  return rc;
}

static int getitem(R *r, jv obj, jv key, jv *out, int line) {
  *out = jv_undef(NULL);
  switch ((jv_type)obj.t) {
  case JV_UNDEF: return undefined_err(r, obj, line);
  case JV_DICT:
  case JV_NS: {
    jv *v = jdict_find(r, JV_DICTP(obj), key);
    if (v) *out = jv_ref(*v);
    if (!v && key.t == JV_STR && obj.t == JV_DICT) return jlib_getattr(r, obj, JV_STRP(key)->s, out, line);
    return r->status ? -1 : 0;
  }
  case JV_LIST:
    if (is_intlike(key)) {
      int64_t i = as_int(key);
      if (norm_index(&i, JV_LISTP(obj)->n)) *out = jv_ref(JV_LISTP(obj)->v[i]);
    }
    return 0;
  case JV_STR:
    if (is_intlike(key)) {
      jstr *s = JV_STRP(obj);
      int64_t i = as_int(key);
      if (norm_index(&i, s->ncp)) {
        size_t a = cp_off(s, (size_t)i), nx;
        cp_at(s->s, s->len, a, &nx);
        return jv_mkstr(r, s->s + a, nx - a, out);
      }
    }
    return 0;
  default:
    if (key.t == JV_STR) return jlib_getattr(r, obj, JV_STRP(key)->s, out, line);
    return 0;
  }
}

/* Python slice.indices(): resolves start/stop/step against length n. */
static int slice_idx(R *r, jv start, jv stop, jv step, size_t n, int64_t *a, int64_t *b, int64_t *st, int line) {
  for (int k = 0; k < 3; k++) {
    jv v = k == 0 ? start : k == 1 ? stop : step;
    if (v.t != JV_NONE && v.t != JV_UNDEF && !is_intlike(v))
      return jr_err(r, line, PW_ETEMPLATE, "slice indices must be integers or None");
  }
  int64_t len = (int64_t)n;
  *st = (step.t == JV_NONE || step.t == JV_UNDEF) ? 1 : as_int(step);
  if (*st == 0) return jr_err(r, line, PW_ETEMPLATE, "slice step cannot be zero");
  int64_t lo = *st < 0 ? -1 : 0, hi = *st < 0 ? len - 1 : len;
  if (start.t == JV_NONE || start.t == JV_UNDEF) {
    *a = *st < 0 ? hi : lo;
  } else {
    *a = as_int(start);
    if (*a < 0) {
      *a += len;
      if (*a < lo) *a = lo;
    } else if (*a > hi) {
      *a = hi;
    }
  }
  if (stop.t == JV_NONE || stop.t == JV_UNDEF) {
    *b = *st < 0 ? lo : hi;
  } else {
    *b = as_int(stop);
    if (*b < 0) {
      *b += len;
      if (*b < lo) *b = lo;
    } else if (*b > hi) {
      *b = hi;
    }
  }
  return 0;
}

int jlib_slice(R *r, jv obj, jv start, jv stop, jv step, jv *out, int line) {
  int64_t a, b, st;
  if (obj.t == JV_UNDEF) return undefined_err(r, obj, line);
  if (obj.t == JV_LIST) {
    jlist *l = JV_LISTP(obj);
    if (slice_idx(r, start, stop, step, l->n, &a, &b, &st, line)) return -1;
    jlist *o = jv_mklist(r, 0);
    if (!o) return -1;
    o->tuple = l->tuple;
    for (int64_t i = a; st > 0 ? i < b : i > b; i += st)
      if (jlist_push(r, o, jv_ref(l->v[i]))) {
        jv_unref(r, JV_OBJ(o));
        return -1;
      }
    *out = JV_OBJ(o);
    return 0;
  }
  if (obj.t == JV_STR) {
    jstr *s = JV_STRP(obj);
    if (slice_idx(r, start, stop, step, s->ncp, &a, &b, &st, line)) return -1;
    bool fail;
    size_t *t = cp_table(r, s, &fail);
    if (fail) return -1;
    jbuf bf;
    jbuf_init(r, &bf);
    int rc = 0;
    if (st == 1 && a < b) {
      size_t x = t ? t[a] : (size_t)a, y = t ? t[b] : (size_t)b;
      rc = jbuf_put(r, &bf, s->s + x, y - x);
    } else {
      for (int64_t i = a; rc == 0 && (st > 0 ? i < b : i > b); i += st) {
        size_t x = t ? t[i] : (size_t)i, y = t ? t[i + 1] : (size_t)i + 1;
        rc = jbuf_put(r, &bf, s->s + x, y - x);
      }
    }
    if (t) jr_free(r, t, (s->ncp + 1) * sizeof(size_t));
    if (rc) {
      jbuf_fini(&bf);
      return -1;
    }
    return jbuf_take(r, &bf, out);
  }
  return jr_err(r, line, PW_ETEMPLATE, "'%s' object is not subscriptable", jv_typename(obj));
}

/* ---- operators ---- */
int jlib_unary(R *r, bool neg, jv v, jv *out, int line) {
  if (v.t == JV_FLOAT) {
    *out = jv_float(neg ? -v.u.f : v.u.f);
    return 0;
  }
  if (is_intlike(v)) {
    int64_t i = as_int(v);
    if (neg && i == INT64_MIN) return jr_err(r, line, PW_ETEMPLATE, "integer overflow");
    *out = jv_int(neg ? -i : i);
    return 0;
  }
  if (v.t == JV_UNDEF) return undefined_err(r, v, line);
  return jr_err(r, line, PW_ETEMPLATE, "bad operand type for unary %c: '%s'", neg ? '-' : '+', jv_typename(v));
}

static int concat_lists(R *r, jlist *x, jlist *y, jv *out) {
  jlist *o = jv_mklist(r, x->n + y->n);
  if (!o) return -1;
  o->tuple = x->tuple;
  for (size_t i = 0; i < x->n; i++) o->v[o->n++] = jv_ref(x->v[i]);
  for (size_t i = 0; i < y->n; i++) o->v[o->n++] = jv_ref(y->v[i]);
  *out = JV_OBJ(o);
  return 0;
}

static int repeat(R *r, jv seq, int64_t k, jv *out, int line) {
  if (k < 0) k = 0;
  size_t unit = seq.t == JV_STR ? JV_STRP(seq)->len : JV_LISTP(seq)->n;
  if (unit && (uint64_t)k > r->max_output / unit)
    return jr_err(r, line, PW_ELIMIT, "repetition result exceeds %zu bytes", r->max_output);
  if (jr_tick(r, (uint64_t)k, line)) return -1;
  if (seq.t == JV_STR) {
    jbuf b;
    jbuf_init(r, &b);
    for (int64_t i = 0; i < k; i++)
      if (jbuf_put(r, &b, JV_STRP(seq)->s, unit)) {
        jbuf_fini(&b);
        return -1;
      }
    return jbuf_take(r, &b, out);
  }
  jlist *l = JV_LISTP(seq), *o = jv_mklist(r, unit * (size_t)k);
  if (!o) return -1;
  o->tuple = l->tuple;
  for (int64_t i = 0; i < k; i++)
    for (size_t j = 0; j < unit; j++) o->v[o->n++] = jv_ref(l->v[j]);
  *out = JV_OBJ(o);
  return 0;
}

static int contains(R *r, jv needle, jv hay, bool *res, int line) {
  *res = false;
  switch ((jv_type)hay.t) {
  case JV_UNDEF: return 0;
  case JV_STR:
    if (needle.t != JV_STR)
      return jr_err(r, line, PW_ETEMPLATE, "'in <string>' requires string as left operand, not %s",
                    jv_typename(needle));
    *res = JV_STRP(needle)->len == 0 ||
           memmem(JV_STRP(hay)->s, JV_STRP(hay)->len, JV_STRP(needle)->s, JV_STRP(needle)->len) != NULL;
    return 0;
  case JV_LIST:
    for (size_t i = 0; i < JV_LISTP(hay)->n; i++) {
      int e = jv_eq(r, JV_LISTP(hay)->v[i], needle, 0);
      if (e < 0) return -1;
      if (e) {
        *res = true;
        break;
      }
    }
    return 0;
  case JV_DICT:
  case JV_NS: *res = jdict_find(r, JV_DICTP(hay), needle) != NULL; return r->status ? -1 : 0;
  default: return jr_err(r, line, PW_ETEMPLATE, "argument of type '%s' is not iterable", jv_typename(hay));
  }
}

static int arith_err(R *r, int op, jv a, jv b, int line) {
  static const char *const names[] = {"+", "-", "*", "/", "//", "%", "**"};
  if (a.t == JV_UNDEF) return undefined_err(r, a, line);
  if (b.t == JV_UNDEF) return undefined_err(r, b, line);
  return jr_err(r, line, PW_ETEMPLATE, "unsupported operand type(s) for %s: '%s' and '%s'",
                op <= JOP_POW ? names[op] : "?", jv_typename(a), jv_typename(b));
}

static int percent_format(R *r, jv fmt, jv args, jv *out, int line);
static int escape_into(R *r, jbuf *b, const jstr *t);
static int take_safe(R *r, jbuf *b, jv *out);

int jlib_binop(R *r, int op, jv a, jv b, jv *out, int line) {
  switch ((jop)op) {
  case JOP_EQ:
  case JOP_NE: {
    int e = jv_eq(r, a, b, 0);
    if (e < 0) return -1;
    *out = jv_bool(op == JOP_EQ ? e == 1 : e == 0);
    return 0;
  }
  case JOP_LT:
  case JOP_LE:
  case JOP_GT:
  case JOP_GE: {
    int c;
    if (jv_cmp(r, a, b, &c, line, 0)) return -1;
    *out = jv_bool(op == JOP_LT ? c < 0 : op == JOP_LE ? c <= 0 : op == JOP_GT ? c > 0 : c >= 0);
    return 0;
  }
  case JOP_IN:
  case JOP_NOTIN: {
    bool res;
    if (contains(r, a, b, &res, line)) return -1;
    *out = jv_bool(op == JOP_IN ? res : !res);
    return 0;
  }
  case JOP_CONCAT: {
    jbuf bf;
    jbuf_init(r, &bf);
    if (str_d(r, &bf, a, 0) || str_d(r, &bf, b, 0)) {
      jbuf_fini(&bf);
      return -1;
    }
    return jbuf_take(r, &bf, out);
  }
  default: break;
  }
  if (is_num(a) && is_num(b)) {
    bool fl = a.t == JV_FLOAT || b.t == JV_FLOAT;
    if (op == JOP_DIV) {
      double y = as_f(b);
      if (y == 0.0) return jr_err(r, line, PW_ETEMPLATE, "division by zero");
      *out = jv_float(as_f(a) / y);
      return 0;
    }
    if (fl) {
      double x = as_f(a), y = as_f(b), z;
      switch (op) {
      case JOP_ADD: z = x + y; break;
      case JOP_SUB: z = x - y; break;
      case JOP_MUL: z = x * y; break;
      case JOP_FLOORDIV:
      case JOP_MOD:
        if (y == 0.0) return jr_err(r, line, PW_ETEMPLATE, "float division by zero");
        if (op == JOP_FLOORDIV) {
          z = floor(x / y);
        } else {
          z = fmod(x, y);
          if (z != 0.0 && ((z < 0) != (y < 0))) z += y;
        }
        break;
      case JOP_POW: z = pow(x, y); break;
      default: return arith_err(r, op, a, b, line);
      }
      *out = jv_float(z);
      return 0;
    }
    int64_t x = as_int(a), y = as_int(b), z = 0;
    bool ovf = false;
    switch (op) {
    case JOP_ADD: ovf = __builtin_add_overflow(x, y, &z); break;
    case JOP_SUB: ovf = __builtin_sub_overflow(x, y, &z); break;
    case JOP_MUL: ovf = __builtin_mul_overflow(x, y, &z); break;
    case JOP_FLOORDIV:
    case JOP_MOD:
      if (y == 0) return jr_err(r, line, PW_ETEMPLATE, "integer division or modulo by zero");
      if (x == INT64_MIN && y == -1) {
        ovf = op == JOP_FLOORDIV;
        z = 0;
        break;
      }
      if (op == JOP_FLOORDIV) {
        z = x / y;
        if ((x % y != 0) && ((x < 0) != (y < 0))) z--;
      } else {
        z = x % y;
        if (z != 0 && ((z < 0) != (y < 0))) z += y;
      }
      break;
    case JOP_POW:
      if (y < 0) {
        *out = jv_float(pow((double)x, (double)y));
        return 0;
      }
      z = 1;
      for (int64_t k = 0; k < y && !ovf; k++) {
        ovf = __builtin_mul_overflow(z, x, &z);
        if (x == 0 || x == 1) break;
        if (x == -1) {
          z = (y % 2) ? -1 : 1;
          break;
        }
      }
      if (x == 0 && y > 0) z = 0;
      break;
    default: return arith_err(r, op, a, b, line);
    }
    if (ovf) return jr_err(r, line, PW_ETEMPLATE, "integer overflow");
    *out = jv_int(z);
    return 0;
  }
  if (op == JOP_ADD) {
    if (a.t == JV_STR && b.t == JV_STR) {
      jstr *x = JV_STRP(a), *y = JV_STRP(b);
      bool markup = x->safe || y->safe;
      jbuf bf;
      jbuf_init(r, &bf);
      /* Markup + str escapes the str (and str + Markup), as Jinja2 does:
       * templates such as functionary's build tool lists this way */
      if ((markup && !x->safe ? escape_into(r, &bf, x) : jbuf_put(r, &bf, x->s, x->len)) ||
          (markup && !y->safe ? escape_into(r, &bf, y) : jbuf_put(r, &bf, y->s, y->len))) {
        jbuf_fini(&bf);
        return -1;
      }
      return markup ? take_safe(r, &bf, out) : jbuf_take(r, &bf, out);
    }
    if (a.t == JV_LIST && b.t == JV_LIST && JV_LISTP(a)->tuple == JV_LISTP(b)->tuple)
      return concat_lists(r, JV_LISTP(a), JV_LISTP(b), out);
  }
  if (op == JOP_MUL) {
    if ((a.t == JV_STR || a.t == JV_LIST) && is_intlike(b)) return repeat(r, a, as_int(b), out, line);
    if ((b.t == JV_STR || b.t == JV_LIST) && is_intlike(a)) return repeat(r, b, as_int(a), out, line);
  }
  if (op == JOP_MOD && a.t == JV_STR) return percent_format(r, a, b, out, line);
  return arith_err(r, op, a, b, line);
}

/* One conversion spec of "fmt" % args after its '%': flags, width and
 * precision read as numbers, so that both can be bounded by the render's
 * output limit before anything is formatted (a width or precision handed
 * straight to vsnprintf once let a template spend seconds and gigabytes). */
typedef struct {
  char flags[8]; /* subset of "-+ 0#", NUL-terminated */
  size_t width;  /* 0 when absent */
  size_t prec;   /* meaningful when has_prec */
  bool has_prec;
} pct_spec;

/* Reads digits at f[*i]; values past `cap` are an error (returns -1). */
static int pct_num(const char *f, size_t len, size_t *i, size_t cap, size_t *out) {
  size_t v = 0;
  while (*i < len && f[*i] >= '0' && f[*i] <= '9') {
    v = v * 10 + (size_t)(f[*i] - '0');
    if (v > cap) return -1;
    (*i)++;
  }
  *out = v;
  return 0;
}

static int pct_parse(R *r, const char *f, size_t len, size_t *i, pct_spec *sp, int line) {
  memset(sp, 0, sizeof *sp);
  size_t nf = 0;
  while (*i < len && strchr("-+ 0#", f[*i]) && f[*i]) {
    if (!strchr(sp->flags, f[*i]) && nf < sizeof sp->flags - 1) sp->flags[nf++] = f[*i];
    (*i)++;
  }
  /* Anything wider or more precise than the whole output could hold can
   * only end in the output limit: refuse it before formatting. */
  size_t cap = r->max_output;
  if (pct_num(f, len, i, cap, &sp->width))
    return jr_err(r, line, PW_ELIMIT, "format width exceeds the output limit of %zu bytes", cap);
  if (*i < len && f[*i] == '.') {
    (*i)++;
    sp->has_prec = true;
    if (pct_num(f, len, i, cap, &sp->prec))
      return jr_err(r, line, PW_ELIMIT, "format precision exceeds the output limit of %zu bytes", cap);
  }
  if (*i < len && f[*i] == '*') return jr_err(r, line, PW_ETEMPLATE, "'*' width in a format is not supported");
  return 0;
}

/* Pads `s` (n bytes, ncp code points) to the spec's width as %s does. */
static int pct_pad_str(R *r, jbuf *b, const pct_spec *sp, const char *s, size_t n, size_t ncp) {
  bool left = strchr(sp->flags, '-') != NULL;
  size_t pad = sp->width > ncp ? sp->width - ncp : 0;
  int rc = 0;
  for (size_t k = 0; rc == 0 && !left && k < pad; k++) rc = jbuf_putc(r, b, ' ');
  if (rc == 0) rc = jbuf_put(r, b, s, n);
  for (size_t k = 0; rc == 0 && left && k < pad; k++) rc = jbuf_putc(r, b, ' ');
  return rc;
}

/* %x %X %o as Python writes them: a negative number is '-' and its
 * magnitude (C would print the two's complement), '#' gives 0x / 0X / 0o,
 * and zero padding goes between the sign and prefix and the digits. */
static int pct_radix(R *r, jbuf *b, const pct_spec *sp, char c, int64_t v) {
  unsigned long long m = v < 0 ? (unsigned long long)(-(v + 1)) + 1 : (unsigned long long)v;
  char head[8];
  size_t hn = 0;
  if (v < 0) head[hn++] = '-';
  else if (strchr(sp->flags, '+')) head[hn++] = '+';
  else if (strchr(sp->flags, ' ')) head[hn++] = ' ';
  if (strchr(sp->flags, '#')) {
    head[hn++] = '0';
    head[hn++] = c == 'o' ? 'o' : c;
  }
  jbuf d;
  jbuf_init(r, &d);
  char f[8] = {'%', '.', '*', 'l', 'l', c, 0};
  int rc = jbuf_printf(r, &d, f, sp->has_prec ? (int)sp->prec : 1, m);
  size_t total = hn + d.n, pad = sp->width > total ? sp->width - total : 0;
  bool left = strchr(sp->flags, '-') != NULL, zero = !left && strchr(sp->flags, '0') != NULL;
  for (size_t k = 0; rc == 0 && !left && !zero && k < pad; k++) rc = jbuf_putc(r, b, ' ');
  if (rc == 0) rc = jbuf_put(r, b, head, hn);
  for (size_t k = 0; rc == 0 && zero && k < pad; k++) rc = jbuf_putc(r, b, '0');
  if (rc == 0) rc = jbuf_put(r, b, d.p ? d.p : "", d.n);
  for (size_t k = 0; rc == 0 && left && k < pad; k++) rc = jbuf_putc(r, b, ' ');
  jbuf_fini(&d);
  return rc;
}

/* "fmt" % args: %s %r %d %i %o %x %X %e %E %f %F %g %G %% with flags, width
 * and precision; the output counts against the render's output limit and is
 * never cut short. */
static int percent_format(R *r, jv fmt, jv args, jv *out, int line) {
  jstr *f = JV_STRP(fmt);
  jbuf b;
  jbuf_init(r, &b);
  size_t ai = 0;
  bool tuple = args.t == JV_LIST && JV_LISTP(args)->tuple;
  int rc = 0;
  for (size_t i = 0; i < f->len && rc == 0; i++) {
    if (f->s[i] != '%') {
      rc = jbuf_putc(r, &b, f->s[i]);
      continue;
    }
    i++;
    pct_spec sp;
    if (pct_parse(r, f->s, f->len, &i, &sp, line)) {
      rc = -1;
      break;
    }
    if (i >= f->len) {
      rc = jr_err(r, line, PW_ETEMPLATE, "incomplete format");
      break;
    }
    char c = f->s[i];
    if (c == '%') {
      rc = jbuf_putc(r, &b, '%');
      continue;
    }
    jv a;
    if (tuple) {
      if (ai >= JV_LISTP(args)->n) {
        rc = jr_err(r, line, PW_ETEMPLATE, "not enough arguments for format string");
        break;
      }
      a = JV_LISTP(args)->v[ai++];
    } else {
      if (ai++ > 0) {
        rc = jr_err(r, line, PW_ETEMPLATE, "not enough arguments for format string");
        break;
      }
      a = args;
    }
    /* The C spec rebuilt from parsed numbers; both are at most the output
     * limit, so they fit an int. */
    char spec[48];
    int sl = snprintf(spec, sizeof spec, "%%%s", sp.flags);
    if (sp.width) sl += snprintf(spec + sl, sizeof spec - (size_t)sl, "%zu", sp.width);
    if (sp.has_prec) sl += snprintf(spec + sl, sizeof spec - (size_t)sl, ".%zu", sp.prec);
    switch (c) {
    case 's':
    case 'r': {
      jbuf t;
      jbuf_init(r, &t);
      rc = c == 's' ? str_d(r, &t, a, 0) : repr_d(r, &t, a, 0);
      if (rc == 0) {
        const char *p = t.p ? t.p : "";
        size_t n = t.n, ncp = 0;
        /* precision keeps that many code points, as Python's does */
        for (size_t k = 0; k < t.n;) {
          if (sp.has_prec && ncp == sp.prec) {
            n = k;
            break;
          }
          cp_at(p, t.n, k, &k);
          ncp++;
        }
        rc = pct_pad_str(r, &b, &sp, p, n, ncp);
      }
      jbuf_fini(&t);
      break;
    }
    case 'd':
    case 'i':
      if (!is_num(a)) {
        rc = jr_err(r, line, PW_ETEMPLATE, "%%%c format: a number is required, not %s", c, jv_typename(a));
        break;
      }
      snprintf(spec + sl, sizeof spec - (size_t)sl, "lld");
      rc = jbuf_printf(r, &b, spec, (long long)as_int(a));
      break;
    case 'x':
    case 'X':
    case 'o':
      if (!is_num(a)) {
        rc = jr_err(r, line, PW_ETEMPLATE, "%%%c format: a number is required, not %s", c, jv_typename(a));
        break;
      }
      rc = pct_radix(r, &b, &sp, c, as_int(a));
      break;
    case 'f':
    case 'F':
    case 'e':
    case 'E':
    case 'g':
    case 'G':
      if (!is_num(a)) {
        rc = jr_err(r, line, PW_ETEMPLATE, "%%%c format: a number is required, not %s", c, jv_typename(a));
        break;
      }
      /* %f of a large number prints up to 309 integer digits besides the
       * precision: refuse what cannot fit before formatting it. */
      if (sp.has_prec && sp.prec > r->max_output - (b.n < r->max_output ? b.n : r->max_output)) {
        rc = jr_err(r, line, PW_ELIMIT, "output exceeds %zu bytes", r->max_output);
        break;
      }
      snprintf(spec + sl, sizeof spec - (size_t)sl, "%c", c);
      rc = jbuf_printf(r, &b, spec, as_f(a));
      break;
    default: rc = jr_err(r, line, PW_ETEMPLATE, "unsupported format character '%c'", c);
    }
  }
  if (rc == 0 && tuple && ai < JV_LISTP(args)->n)
    rc = jr_err(r, line, PW_ETEMPLATE, "not all arguments converted during string formatting");
  if (rc) {
    jbuf_fini(&b);
    return -1;
  }
  return jbuf_take(r, &b, out);
}

/* ---- iteration, targets ---- */
static int str_chars(R *r, jstr *s, jlist **out) {
  jlist *l = jv_mklist(r, s->ncp);
  if (!l) return -1;
  for (size_t i = 0; i < s->len;) {
    size_t nx;
    cp_at(s->s, s->len, i, &nx);
    jv c;
    if (jv_mkstr(r, s->s + i, nx - i, &c) || jlist_push(r, l, c)) {
      jv_unref(r, JV_OBJ(l));
      return -1;
    }
    i = nx;
  }
  *out = l;
  return 0;
}

int jlib_iterate(R *r, jv v, jlist **out, int line) {
  *out = NULL;
  switch ((jv_type)v.t) {
  case JV_UNDEF: *out = jv_mklist(r, 0); return *out ? 0 : -1;
  case JV_LIST: {
    jlist *l = JV_LISTP(v), *o = jv_mklist(r, l->n);
    if (!o) return -1;
    for (size_t i = 0; i < l->n; i++) o->v[o->n++] = jv_ref(l->v[i]);
    *out = o;
    return 0;
  }
  case JV_DICT: {
    jdict *d = JV_DICTP(v);
    jlist *o = jv_mklist(r, d->n);
    if (!o) return -1;
    for (size_t i = 0; i < d->n; i++) o->v[o->n++] = jv_ref(d->e[i].k);
    *out = o;
    return 0;
  }
  case JV_STR: return str_chars(r, JV_STRP(v), out);
  default: return jr_err(r, line, PW_ETEMPLATE, "'%s' object is not iterable", jv_typename(v));
  }
}

int jlib_bind_targets(R *r, jframe *f, const char *const *names, int n, jv v, int line) {
  if (n == 1) return jframe_set(r, f, names[0], jv_ref(v));
  jlist *l = NULL;
  if (jlib_iterate(r, v, &l, line)) return -1;
  int rc = 0;
  if (l->n != (size_t)n) {
    rc = jr_err(r, line, PW_ETEMPLATE, "cannot unpack %zu value(s) into %d target(s)", l->n, n);
  } else {
    for (int i = 0; i < n && rc == 0; i++) rc = jframe_set(r, f, names[i], jv_ref(l->v[i]));
  }
  jv_unref(r, JV_OBJ(l));
  return rc;
}

/* ---- string helpers ---- */
/* Simple case mapping for ASCII, Latin-1, Latin Extended-A, Greek and
 * Cyrillic (the scripts whose case pairs are one-to-one); other code
 * points are kept. */
static uint32_t cp_lower(uint32_t c) {
  if (c >= 'A' && c <= 'Z') return c + 32;
  if (c < 0xC0) return c;
  if ((c >= 0xC0 && c <= 0xDE && c != 0xD7)) return c + 32;
  if (c >= 0x100 && c <= 0x17F) {
    if (c == 0x130 || c == 0x131 || c == 0x138 || c == 0x149 || c == 0x17F) return c;
    if (c == 0x178) return 0xFF;
    if ((c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E)) return (c & 1) ? c + 1 : c;
    return (c & 1) ? c : c + 1;
  }
  if (c >= 0x391 && c <= 0x3AB && c != 0x3A2) return c + 32;
  if (c >= 0x410 && c <= 0x42F) return c + 32;
  if (c >= 0x400 && c <= 0x40F) return c + 80;
  return c;
}

static uint32_t cp_upper(uint32_t c) {
  if (c >= 'a' && c <= 'z') return c - 32;
  if (c < 0xE0) return c;
  if (c >= 0xE0 && c <= 0xFE && c != 0xF7) return c - 32;
  if (c == 0xFF) return 0x178;
  if (c >= 0x100 && c <= 0x17F) {
    if (c == 0x130 || c == 0x131 || c == 0x138 || c == 0x149 || c == 0x17F) return c;
    if ((c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E)) return (c & 1) ? c : c - 1;
    return (c & 1) ? c - 1 : c;
  }
  if (c == 0x3C2) return 0x3A3;
  if (c >= 0x3B1 && c <= 0x3CB) return c - 32;
  if (c >= 0x430 && c <= 0x44F) return c - 32;
  if (c >= 0x450 && c <= 0x45F) return c - 80;
  return c;
}

static bool cp_cased(uint32_t c) { return cp_lower(c) != c || cp_upper(c) != c; }

static int put_cp(R *r, jbuf *b, uint32_t cp) {
  char o[4];
  size_t k = 0;
  if (cp < 0x80) {
    o[k++] = (char)cp;
  } else if (cp < 0x800) {
    o[k++] = (char)(0xC0 | (cp >> 6));
    o[k++] = (char)(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    o[k++] = (char)(0xE0 | (cp >> 12));
    o[k++] = (char)(0x80 | ((cp >> 6) & 0x3F));
    o[k++] = (char)(0x80 | (cp & 0x3F));
  } else {
    o[k++] = (char)(0xF0 | (cp >> 18));
    o[k++] = (char)(0x80 | ((cp >> 12) & 0x3F));
    o[k++] = (char)(0x80 | ((cp >> 6) & 0x3F));
    o[k++] = (char)(0x80 | (cp & 0x3F));
  }
  return jbuf_put(r, b, o, k);
}

/* mode: 0 upper, 1 lower, 2 capitalize, 3 Python str.title, 4 Jinja title */
static int map_ascii(R *r, jstr *s, int mode, jv *out) {
  jbuf b;
  jbuf_init(r, &b);
  bool prev_cased = false, word_start = true;
  int rc = 0;
  for (size_t i = 0; i < s->len && rc == 0;) {
    size_t nx;
    uint32_t c = cp_at(s->s, s->len, i, &nx);
    if (nx - i == 1 && c >= 0x80) { /* an invalid byte: kept as it is */
      rc = jbuf_putc(r, &b, s->s[i]);
      i = nx;
      continue;
    }
    uint32_t o = c;
    switch (mode) {
    case 0: o = cp_upper(c); break;
    case 1: o = cp_lower(c); break;
    case 2: o = i == 0 ? cp_upper(c) : cp_lower(c); break;
    case 3: {
      bool cased = cp_cased(c);
      if (cased) o = prev_cased ? cp_lower(c) : cp_upper(c);
      prev_cased = cased;
      break;
    }
    default: {
      bool sep = cp_space(c) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<';
      if (sep) {
        word_start = true;
      } else {
        o = word_start ? cp_upper(c) : cp_lower(c);
        word_start = false;
      }
    }
    }
    rc = o == c ? jbuf_put(r, &b, s->s + i, nx - i) : put_cp(r, &b, o);
    i = nx;
  }
  if (rc) {
    jbuf_fini(&b);
    return -1;
  }
  return jbuf_take(r, &b, out);
}

/* Strips code points in chars (NULL = whitespace) from the left/right. */
static int strip(R *r, jstr *s, const jstr *chars, bool left, bool right, jv *out) {
  size_t a = 0, b = s->len;
  if (left) {
    while (a < b) {
      size_t nx;
      uint32_t c = cp_at(s->s, s->len, a, &nx);
      bool hit;
      if (chars) {
        hit = false;
        for (size_t j = 0; j < chars->len && !hit;) {
          size_t nj;
          hit = cp_at(chars->s, chars->len, j, &nj) == c && nj - j == nx - a;
          j = nj;
        }
      } else {
        hit = cp_space(c);
      }
      if (!hit) break;
      a = nx;
    }
  }
  if (right) {
    while (b > a) {
      size_t p = b - 1;
      while (p > a && ((unsigned char)s->s[p] & 0xC0) == 0x80 && b - p < 4) p--;
      size_t nx;
      uint32_t c = cp_at(s->s, s->len, p, &nx);
      if (nx != b) {
        p = b - 1;
        c = (unsigned char)s->s[p];
        nx = b;
      }
      bool hit;
      if (chars) {
        hit = false;
        for (size_t j = 0; j < chars->len && !hit;) {
          size_t nj;
          hit = cp_at(chars->s, chars->len, j, &nj) == c && nj - j == nx - p;
          j = nj;
        }
      } else {
        hit = cp_space(c);
      }
      if (!hit) break;
      b = p;
    }
  }
  if (a == 0 && b == s->len) {
    out->t = JV_STR;
    out->u.o = &s->h;
    *out = jv_ref(*out);
    return 0;
  }
  return jv_mkstr(r, s->s + a, b - a, out);
}

static bool ws_at(const jstr *s, size_t i, size_t *next) {
  uint32_t c = cp_at(s->s, s->len, i, next);
  return cp_space(c);
}

/* str.split / str.rsplit. sep NULL = runs of whitespace. */
static int split(R *r, jstr *s, const jstr *sep, int64_t maxsplit, bool from_right, jv *out) {
  jlist *l = jv_mklist(r, 0);
  if (!l) return -1;
  jv piece;
  int rc = 0;
  if (sep) {
    if (sep->len == 0) {
      jv_unref(r, JV_OBJ(l));
      return jr_err(r, r->line, PW_ETEMPLATE, "empty separator");
    }
    if (!from_right) {
      size_t i = 0;
      int64_t n = 0;
      for (;;) {
        const char *m = (maxsplit < 0 || n < maxsplit) ? memmem(s->s + i, s->len - i, sep->s, sep->len) : NULL;
        size_t e = m ? (size_t)(m - s->s) : s->len;
        rc = jv_mkstr(r, s->s + i, e - i, &piece);
        if (rc == 0) rc = jlist_push(r, l, piece);
        if (rc || !m) break;
        i = e + sep->len;
        n++;
      }
    } else {
      /* collect from the right, then reverse */
      size_t e = s->len;
      int64_t n = 0;
      for (;;) {
        size_t found = SIZE_MAX;
        if ((maxsplit < 0 || n < maxsplit) && e >= sep->len)
          for (size_t p = e - sep->len + 1; p-- > 0;)
            if (memcmp(s->s + p, sep->s, sep->len) == 0) {
              found = p;
              break;
            }
        size_t st = found == SIZE_MAX ? 0 : found + sep->len;
        rc = jv_mkstr(r, s->s + st, e - st, &piece);
        if (rc == 0) rc = jlist_push(r, l, piece);
        if (rc || found == SIZE_MAX) break;
        e = found;
        n++;
      }
      for (size_t i = 0; i < l->n / 2; i++) {
        jv t = l->v[i];
        l->v[i] = l->v[l->n - 1 - i];
        l->v[l->n - 1 - i] = t;
      }
    }
  } else if (!from_right) {
    size_t i = 0, nx;
    int64_t n = 0;
    while (rc == 0) {
      while (i < s->len && ws_at(s, i, &nx)) i = nx;
      if (i >= s->len) break;
      if (maxsplit >= 0 && n >= maxsplit) {
        /* the rest, with trailing whitespace stripped */
        size_t e = s->len;
        jv whole;
        rc = jv_mkstr(r, s->s + i, e - i, &whole);
        if (rc == 0) {
          rc = strip(r, JV_STRP(whole), NULL, false, true, &piece);
          jv_unref(r, whole);
        }
        if (rc == 0) rc = jlist_push(r, l, piece);
        break;
      }
      size_t st = i;
      while (i < s->len && !ws_at(s, i, &nx)) i = nx;
      rc = jv_mkstr(r, s->s + st, i - st, &piece);
      if (rc == 0) rc = jlist_push(r, l, piece);
      n++;
    }
  } else {
    /* rsplit() on whitespace: split fully, then rejoin the leftmost part */
    jv full;
    rc = split(r, s, NULL, -1, false, &full);
    if (rc == 0) {
      jlist *f = JV_LISTP(full);
      if (maxsplit < 0 || (size_t)maxsplit + 1 >= f->n) {
        jv_unref(r, JV_OBJ(l));
        *out = full;
        return 0;
      }
      size_t keep = f->n - (size_t)maxsplit; /* parts merged into the first */
      /* the first piece spans from the start of part 0 to the end of part keep-1 in s */
      size_t st = 0, nx;
      while (st < s->len && ws_at(s, st, &nx)) st = nx;
      jstr *lastm = JV_STRP(f->v[keep - 1]);
      size_t e = st;
      /* locate end of the keep-th word */
      size_t words = 0, i = st;
      while (i < s->len && words < keep) {
        while (i < s->len && ws_at(s, i, &nx)) i = nx;
        while (i < s->len && !ws_at(s, i, &nx)) i = nx;
        words++;
        e = i;
      }
      (void)lastm;
      rc = jv_mkstr(r, s->s + st, e - st, &piece);
      if (rc == 0) rc = jlist_push(r, l, piece);
      for (size_t k = keep; k < f->n && rc == 0; k++) rc = jlist_push(r, l, jv_ref(f->v[k]));
      jv_unref(r, full);
    }
  }
  if (rc) {
    jv_unref(r, JV_OBJ(l));
    return -1;
  }
  *out = JV_OBJ(l);
  return 0;
}

static int replace(R *r, jstr *s, jstr *old, jstr *new_, int64_t count, jv *out) {
  jbuf b;
  jbuf_init(r, &b);
  int rc = 0;
  int64_t n = 0;
  if (old->len == 0) {
    /* Python inserts new_ between code points and at both ends */
    size_t i = 0;
    while (rc == 0) {
      if (count < 0 || n < count) {
        rc = jbuf_put(r, &b, new_->s, new_->len);
        n++;
      }
      if (i >= s->len || rc) break;
      size_t nx;
      cp_at(s->s, s->len, i, &nx);
      rc = jbuf_put(r, &b, s->s + i, nx - i);
      i = nx;
    }
    if (rc == 0 && i < s->len) rc = jbuf_put(r, &b, s->s + i, s->len - i);
  } else {
    size_t i = 0;
    while (rc == 0) {
      const char *m = (count < 0 || n < count) ? memmem(s->s + i, s->len - i, old->s, old->len) : NULL;
      if (!m) {
        rc = jbuf_put(r, &b, s->s + i, s->len - i);
        break;
      }
      size_t at = (size_t)(m - s->s);
      rc = jbuf_put(r, &b, s->s + i, at - i);
      if (rc == 0) rc = jbuf_put(r, &b, new_->s, new_->len);
      i = at + old->len;
      n++;
    }
  }
  if (rc) {
    jbuf_fini(&b);
    return -1;
  }
  return jbuf_take(r, &b, out);
}

/* Code point index of byte offset off. */
static int64_t cp_index(const jstr *s, size_t off) {
  if (s->ncp == s->len) return (int64_t)off;
  return (int64_t)jinja_utf8_count(s->s, off);
}

static int need_str(R *r, const jv *v, const char *what, int line) {
  if (!v || v->t != JV_STR)
    return jr_err(r, line, PW_ETEMPLATE, "%s must be a string, not %s", what, v ? jv_typename(*v) : "nothing");
  return 0;
}

static bool prefix_match(const jstr *s, const jstr *p, bool suffix) {
  if (p->len > s->len) return false;
  return memcmp(s->s + (suffix ? s->len - p->len : 0), p->s, p->len) == 0;
}

/* str.format: {} {0} {name} {{ }}; format specs are ignored except none. */
static int str_format(R *r, jstr *f, jargs *a, jv *out, int line) {
  jbuf b;
  jbuf_init(r, &b);
  int rc = 0, auto_i = 0;
  for (size_t i = 0; i < f->len && rc == 0; i++) {
    char c = f->s[i];
    if (c == '{' && i + 1 < f->len && f->s[i + 1] == '{') {
      rc = jbuf_putc(r, &b, '{');
      i++;
    } else if (c == '}' && i + 1 < f->len && f->s[i + 1] == '}') {
      rc = jbuf_putc(r, &b, '}');
      i++;
    } else if (c == '{') {
      size_t e = i + 1;
      while (e < f->len && f->s[e] != '}') e++;
      if (e >= f->len) {
        rc = jr_err(r, line, PW_ETEMPLATE, "single '{' encountered in format string");
        break;
      }
      char field[64];
      size_t fl = e - i - 1;
      const char *colon = memchr(f->s + i + 1, ':', fl);
      if (colon) fl = (size_t)(colon - (f->s + i + 1));
      if (fl >= sizeof field) fl = sizeof field - 1;
      memcpy(field, f->s + i + 1, fl);
      field[fl] = 0;
      const jv *v = NULL;
      if (fl == 0) {
        v = jargs_get(a, auto_i++, NULL);
      } else if (field[0] >= '0' && field[0] <= '9') {
        v = jargs_get(a, atoi(field), NULL);
      } else {
        v = jargs_get(a, -1, field);
      }
      if (!v) {
        rc = jr_err(r, line, PW_ETEMPLATE, "format: no argument for field '{%s}'", field);
        break;
      }
      rc = str_d(r, &b, *v, 0);
      i = e;
    } else {
      rc = jbuf_putc(r, &b, c);
    }
  }
  if (rc) {
    jbuf_fini(&b);
    return -1;
  }
  return jbuf_take(r, &b, out);
}

static int join(R *r, jv seq, jstr *sep, const char *attribute, jv *out, int line);

static int str_method(R *r, jv self, const char *m, jargs *a, jv *out, int line) {
  jstr *s = JV_STRP(self);
  const jv *a0 = jargs_get(a, 0, NULL), *a1 = jargs_get(a, 1, NULL);
  if (!strcmp(m, "startswith") || !strcmp(m, "endswith")) {
    bool suf = m[0] == 'e', hit = false;
    if (a0 && a0->t == JV_LIST) {
      for (size_t i = 0; i < JV_LISTP(*a0)->n && !hit; i++) {
        jv p = JV_LISTP(*a0)->v[i];
        if (need_str(r, &p, m, line)) return -1;
        hit = prefix_match(s, JV_STRP(p), suf);
      }
    } else {
      if (need_str(r, a0, m, line)) return -1;
      hit = prefix_match(s, JV_STRP(*a0), suf);
    }
    *out = jv_bool(hit);
    return 0;
  }
  if (!strcmp(m, "split") || !strcmp(m, "rsplit")) {
    const jv *sep = jargs_get(a, 0, "sep"), *mx = jargs_get(a, 1, "maxsplit");
    if (sep && sep->t == JV_NONE) sep = NULL;
    if (sep && need_str(r, sep, "separator", line)) return -1;
    return split(r, s, sep ? JV_STRP(*sep) : NULL, mx && is_intlike(*mx) ? as_int(*mx) : -1, m[0] == 'r', out);
  }
  if (!strcmp(m, "strip") || !strcmp(m, "lstrip") || !strcmp(m, "rstrip")) {
    const jv *ch = a0 && a0->t != JV_NONE ? a0 : NULL;
    if (ch && need_str(r, ch, "chars", line)) return -1;
    return strip(r, s, ch ? JV_STRP(*ch) : NULL, m[0] != 'r', m[0] != 'l', out);
  }
  if (!strcmp(m, "upper")) return map_ascii(r, s, 0, out);
  if (!strcmp(m, "lower")) return map_ascii(r, s, 1, out);
  if (!strcmp(m, "capitalize")) return map_ascii(r, s, 2, out);
  if (!strcmp(m, "title")) return map_ascii(r, s, 3, out);
  if (!strcmp(m, "replace")) {
    if (need_str(r, a0, "replace() argument 1", line) || need_str(r, a1, "replace() argument 2", line)) return -1;
    const jv *c = jargs_get(a, 2, "count");
    return replace(r, s, JV_STRP(*a0), JV_STRP(*a1), c && is_intlike(*c) ? as_int(*c) : -1, out);
  }
  if (!strcmp(m, "find") || !strcmp(m, "rfind") || !strcmp(m, "index") || !strcmp(m, "rindex") ||
      !strcmp(m, "count")) {
    if (need_str(r, a0, m, line)) return -1;
    jstr *sub = JV_STRP(*a0);
    if (!strcmp(m, "count")) {
      int64_t n = 0;
      if (sub->len == 0) {
        n = (int64_t)s->ncp + 1;
      } else {
        for (const char *p = s->s; (p = memmem(p, s->len - (size_t)(p - s->s), sub->s, sub->len)); p += sub->len)
          n++;
      }
      *out = jv_int(n);
      return 0;
    }
    int64_t pos = -1;
    if (m[0] != 'r') {
      const char *p = memmem(s->s, s->len, sub->s, sub->len);
      if (p) pos = cp_index(s, (size_t)(p - s->s));
    } else if (sub->len <= s->len) {
      for (size_t p = s->len - sub->len + 1; p-- > 0;)
        if (memcmp(s->s + p, sub->s, sub->len) == 0) {
          pos = cp_index(s, p);
          break;
        }
    }
    if (pos < 0 && strstr(m, "index")) return jr_err(r, line, PW_ETEMPLATE, "substring not found");
    *out = jv_int(pos);
    return 0;
  }
  if (!strcmp(m, "format")) return str_format(r, s, a, out, line);
  if (!strcmp(m, "join")) {
    if (!a0) return jr_err(r, line, PW_ETEMPLATE, "join() takes exactly one argument");
    return join(r, *a0, s, NULL, out, line);
  }
  if (!strcmp(m, "isdigit") || !strcmp(m, "isalpha") || !strcmp(m, "isspace") || !strcmp(m, "isalnum") ||
      !strcmp(m, "islower") || !strcmp(m, "isupper")) {
    bool ok = s->len > 0, cased = false;
    for (size_t i = 0; i < s->len && ok;) {
      size_t nx;
      uint32_t c = cp_at(s->s, s->len, i, &nx);
      bool dig = c >= '0' && c <= '9', up = c >= 'A' && c <= 'Z', lo = c >= 'a' && c <= 'z';
      switch (m[2]) {
      case 'd': ok = dig; break;
      case 's': ok = cp_space(c); break;
      case 'a': ok = m[4] == 'p' ? (up || lo || c >= 0x80) : (up || lo || dig || c >= 0x80); break;
      case 'l': ok = !up; cased = cased || lo; break;
      case 'u': ok = !lo; cased = cased || up; break;
      }
      i = nx;
    }
    if (m[2] == 'l' || m[2] == 'u') ok = ok && cased;
    *out = jv_bool(ok);
    return 0;
  }
  if (!strcmp(m, "splitlines")) {
    jlist *l = jv_mklist(r, 0);
    if (!l) return -1;
    size_t st = 0;
    for (size_t i = 0; i <= s->len; i++) {
      bool end = i == s->len;
      if (end && st == s->len) break;
      if (end || s->s[i] == '\n' || s->s[i] == '\r') {
        jv piece;
        if (jv_mkstr(r, s->s + st, i - st, &piece) || jlist_push(r, l, piece)) {
          jv_unref(r, JV_OBJ(l));
          return -1;
        }
        if (!end && s->s[i] == '\r' && i + 1 < s->len && s->s[i + 1] == '\n') i++;
        st = i + 1;
      }
    }
    *out = JV_OBJ(l);
    return 0;
  }
  return 1;
}

static int items_list(R *r, jdict *d, int which, jv *out) {
  /* which: 0 items (tuples), 1 keys, 2 values */
  jlist *l = jv_mklist(r, d->n);
  if (!l) return -1;
  for (size_t i = 0; i < d->n; i++) {
    if (which == 0) {
      jlist *t = jv_mklist(r, 2);
      if (!t) {
        jv_unref(r, JV_OBJ(l));
        return -1;
      }
      t->tuple = true;
      t->v[0] = jv_ref(d->e[i].k);
      t->v[1] = jv_ref(d->e[i].v);
      t->n = 2;
      l->v[l->n++] = JV_OBJ(t);
    } else {
      l->v[l->n++] = jv_ref(which == 1 ? d->e[i].k : d->e[i].v);
    }
  }
  *out = JV_OBJ(l);
  return 0;
}

static int dict_method(R *r, jv self, const char *m, jargs *a, jv *out, int line) {
  jdict *d = JV_DICTP(self);
  if (!strcmp(m, "items")) return items_list(r, d, 0, out);
  if (!strcmp(m, "keys")) return items_list(r, d, 1, out);
  if (!strcmp(m, "values")) return items_list(r, d, 2, out);
  if (!strcmp(m, "get")) {
    const jv *k = jargs_get(a, 0, "key"), *dflt = jargs_get(a, 1, "default");
    if (!k) return jr_err(r, line, PW_ETEMPLATE, "get expected at least 1 argument");
    jv *v = jdict_find(r, d, *k);
    if (r->status) return -1;
    *out = v ? jv_ref(*v) : dflt ? jv_ref(*dflt) : JV_NONE_V;
    return 0;
  }
  if (in_names(k_dict_methods, m))
    return jr_err(r, line, PW_ETEMPLATE, "dict method '%s' is not supported in templates", m);
  return 1;
}

static int list_method(R *r, jv self, const char *m, jargs *a, jv *out, int line) {
  jlist *l = JV_LISTP(self);
  const jv *a0 = jargs_get(a, 0, NULL), *a1 = jargs_get(a, 1, NULL);
  bool mut = !strcmp(m, "append") || !strcmp(m, "pop") || !strcmp(m, "extend") || !strcmp(m, "insert");
  if (mut && l->tuple) return jr_err(r, line, PW_ETEMPLATE, "'tuple' object has no attribute '%s'", m);
  *out = JV_NONE_V;
  if (!strcmp(m, "append")) {
    if (!a0) return jr_err(r, line, PW_ETEMPLATE, "append() takes exactly one argument");
    if (jr_tick(r, 1, line)) return -1;
    return jlist_push(r, l, jv_ref(*a0));
  }
  if (!strcmp(m, "extend")) {
    jlist *src = NULL;
    if (!a0 || jlib_iterate(r, *a0, &src, line)) return a0 ? -1 : jr_err(r, line, PW_ETEMPLATE, "extend() takes one argument");
    int rc = jr_tick(r, src->n, line);
    for (size_t i = 0; i < src->n && rc == 0; i++) rc = jlist_push(r, l, jv_ref(src->v[i]));
    jv_unref(r, JV_OBJ(src));
    return rc;
  }
  if (!strcmp(m, "insert")) {
    if (!a0 || !a1 || !is_intlike(*a0)) return jr_err(r, line, PW_ETEMPLATE, "insert() takes an index and a value");
    int64_t i = as_int(*a0);
    if (i < 0) i += (int64_t)l->n;
    if (i < 0) i = 0;
    if ((uint64_t)i > l->n) i = (int64_t)l->n;
    if (jlist_push(r, l, jv_ref(*a1))) return -1;
    jv t = l->v[l->n - 1];
    memmove(l->v + i + 1, l->v + i, (l->n - 1 - (size_t)i) * sizeof(jv));
    l->v[i] = t;
    return 0;
  }
  if (!strcmp(m, "pop")) {
    int64_t i = a0 && is_intlike(*a0) ? as_int(*a0) : -1;
    if (l->n == 0) return jr_err(r, line, PW_ETEMPLATE, "pop from empty list");
    if (!norm_index(&i, l->n)) return jr_err(r, line, PW_ETEMPLATE, "pop index out of range");
    *out = l->v[i]; /* the list's reference moves to the caller */
    memmove(l->v + i, l->v + i + 1, (l->n - 1 - (size_t)i) * sizeof(jv));
    l->n--;
    return 0;
  }
  if (!strcmp(m, "index") || !strcmp(m, "count")) {
    if (!a0) return jr_err(r, line, PW_ETEMPLATE, "%s() takes exactly one argument", m);
    int64_t n = 0;
    for (size_t i = 0; i < l->n; i++) {
      int e = jv_eq(r, l->v[i], *a0, 0);
      if (e < 0) return -1;
      if (e && m[0] == 'i') {
        *out = jv_int((int64_t)i);
        return 0;
      }
      n += e;
    }
    if (m[0] == 'i') return jr_err(r, line, PW_ETEMPLATE, "value is not in list");
    *out = jv_int(n);
    return 0;
  }
  if (in_names(k_list_methods, m))
    return jr_err(r, line, PW_ETEMPLATE, "list method '%s' is not supported in templates", m);
  return 1;
}

static int loop_cycle(R *r, jloop *lp, jargs *a, jv *out, int line) {
  if (a->npos == 0) return jr_err(r, line, PW_ETEMPLATE, "no items for cycling given");
  *out = jv_ref(a->v[lp->index0 % (size_t)a->npos]);
  return 0;
}

int jlib_call_method(R *r, jv self, const char *name, jargs *a, jv *out, int line) {
  switch ((jv_type)self.t) {
  case JV_STR: return str_method(r, self, name, a, out, line);
  case JV_DICT: return dict_method(r, self, name, a, out, line);
  case JV_LIST: return list_method(r, self, name, a, out, line);
  case JV_LOOP:
    if (!strcmp(name, "cycle")) return loop_cycle(r, (jloop *)self.u.o, a, out, line);
    return 1;
  default: return 1;
  }
}

/* ---- globals ---- */
static int g_range(R *r, jargs *a, jv *out, int line) {
  int64_t v[3] = {0, 0, 1};
  if (a->npos < 1 || a->npos > 3) return jr_err(r, line, PW_ETEMPLATE, "range expected 1 to 3 arguments");
  for (int i = 0; i < a->npos; i++) {
    if (!is_intlike(a->v[i]))
      return jr_err(r, line, PW_ETEMPLATE, "range() argument must be an integer, not %s", jv_typename(a->v[i]));
  }
  if (a->npos == 1) {
    v[1] = as_int(a->v[0]);
  } else {
    v[0] = as_int(a->v[0]);
    v[1] = as_int(a->v[1]);
    if (a->npos == 3) v[2] = as_int(a->v[2]);
  }
  if (v[2] == 0) return jr_err(r, line, PW_ETEMPLATE, "range() arg 3 must not be zero");
  long double span = v[2] > 0 ? (long double)v[1] - v[0] : (long double)v[0] - v[1];
  long double step = v[2] > 0 ? (long double)v[2] : -(long double)v[2];
  uint64_t n = span <= 0 ? 0 : (uint64_t)((span + step - 1) / step);
  /* Not charged as iterations (a loop over it is), but a range no loop
   * could finish is refused before allocating it. */
  if (n > r->max_iterations - r->iters)
    return jr_err(r, line, PW_ELIMIT, "range of %llu items exceeds the limit of %llu loop iterations",
                  (unsigned long long)n, (unsigned long long)r->max_iterations);
  jlist *l = jv_mklist(r, (size_t)n);
  if (!l) return -1;
  for (uint64_t i = 0; i < n; i++) l->v[l->n++] = jv_int(v[0] + (int64_t)i * v[2]);
  *out = JV_OBJ(l);
  return 0;
}

static int g_dict(R *r, jargs *a, jv *out, int type, int line) {
  jdict *d = jv_mkdict(r, type);
  if (!d) return -1;
  if (a->npos > 1) {
    jv_unref(r, JV_OBJ(d));
    return jr_err(r, line, PW_ETEMPLATE, "%s expected at most 1 positional argument",
                  type == JV_NS ? "namespace" : "dict");
  }
  if (a->npos == 1) {
    jv src = a->v[0];
    if (src.t != JV_DICT && src.t != JV_NS) {
      jv_unref(r, JV_OBJ(d));
      return jr_err(r, line, PW_ETEMPLATE, "cannot convert '%s' to a dict", jv_typename(src));
    }
    for (size_t i = 0; i < JV_DICTP(src)->n; i++)
      if (jdict_set(r, d, jv_ref(JV_DICTP(src)->e[i].k), jv_ref(JV_DICTP(src)->e[i].v))) {
        jv_unref(r, JV_OBJ(d));
        return -1;
      }
  }
  for (int i = a->npos; i < a->n; i++)
    if (jdict_setc(r, d, a->kw[i], jv_ref(a->v[i]))) {
      jv_unref(r, JV_OBJ(d));
      return -1;
    }
  *out = JV_OBJ(d);
  return 0;
}

static int g_strftime(R *r, jargs *a, jv *out, int line) {
  const jv *f = jargs_get(a, 0, NULL);
  if (need_str(r, f, "strftime_now() format", line)) return -1;
  if (JV_STRP(*f)->len > 256) return jr_err(r, line, PW_ETEMPLATE, "strftime_now() format too long");
  struct tm tm;
  time_t t;
  if (r->now) {
    t = (time_t)r->now;
    gmtime_r(&t, &tm);
  } else {
    t = time(NULL);
    localtime_r(&t, &tm);
  }
  char buf[1024];
  size_t n = JV_STRP(*f)->len ? strftime(buf, sizeof buf, JV_STRP(*f)->s, &tm) : 0;
  return jv_mkstr(r, buf, n, out);
}

int jlib_call_global(R *r, int id, jargs *a, jv *out, int line) {
  switch (id) {
  case G_RANGE: return g_range(r, a, out, line);
  case G_DICT: return g_dict(r, a, out, JV_DICT, line);
  case G_NAMESPACE: return g_dict(r, a, out, JV_NS, line);
  case G_RAISE: {
    jbuf b;
    jbuf_init(r, &b);
    const jv *m = jargs_get(a, 0, NULL);
    if (m && str_d(r, &b, *m, 0)) {
      jbuf_fini(&b);
      return -1;
    }
    if (!r->status) {
      /* error messages are one line: control characters become spaces */
      for (size_t i = 0; i < b.n; i++)
        if ((unsigned char)b.p[i] < 0x20) b.p[i] = ' ';
      r->status = PW_ETEMPLATE;
      pw_seterr(r->err, PW_ETEMPLATE, "%s", b.p ? b.p : "");
    }
    jbuf_fini(&b);
    return -1;
  }
  case G_STRFTIME: return g_strftime(r, a, out, line);
  default: return jr_err(r, line, PW_EINTERNAL, "unknown global %d", id);
  }
}

/* ---- filters ---- */
static int length_of(R *r, jv v, int64_t *n, int line) {
  switch ((jv_type)v.t) {
  case JV_UNDEF: *n = 0; return 0;
  case JV_STR: *n = (int64_t)JV_STRP(v)->ncp; return 0;
  case JV_LIST: *n = (int64_t)JV_LISTP(v)->n; return 0;
  case JV_DICT: *n = (int64_t)JV_DICTP(v)->n; return 0;
  default: return jr_err(r, line, PW_ETEMPLATE, "object of type '%s' has no len()", jv_typename(v));
  }
}

/* Jinja2's attribute getter: "a.b.0" walks items; missing -> undefined. */
static int get_path(R *r, jv v, const char *path, jv *out, int line) {
  jv cur = jv_ref(v);
  const char *p = path;
  while (*p) {
    const char *dot = strchr(p, '.');
    size_t n = dot ? (size_t)(dot - p) : strlen(p);
    jv key, next;
    bool digits = n > 0;
    for (size_t i = 0; i < n; i++) digits = digits && p[i] >= '0' && p[i] <= '9';
    if (digits) {
      key = jv_int(strtoll(p, NULL, 10));
    } else if (jv_mkstr(r, p, n, &key)) {
      jv_unref(r, cur);
      return -1;
    }
    int rc = cur.t == JV_UNDEF ? 0 : jlib_getitem(r, cur, key, &next, line);
    if (cur.t == JV_UNDEF) next = jv_undef(NULL);
    jv_unref(r, key);
    jv_unref(r, cur);
    if (rc) return -1;
    cur = next;
    if (!dot) break;
    p = dot + 1;
  }
  *out = cur;
  return 0;
}

static int join(R *r, jv seq, jstr *sep, const char *attribute, jv *out, int line) {
  jlist *l = NULL;
  if (jlib_iterate(r, seq, &l, line)) return -1;
  jbuf b;
  jbuf_init(r, &b);
  int rc = jr_tick(r, l->n, line);
  for (size_t i = 0; i < l->n && rc == 0; i++) {
    if (i && sep) rc = jbuf_put(r, &b, sep->s, sep->len);
    if (rc) break;
    if (attribute) {
      jv v;
      rc = get_path(r, l->v[i], attribute, &v, line);
      if (rc == 0) rc = str_d(r, &b, v, 0);
      jv_unref(r, v);
    } else {
      rc = str_d(r, &b, l->v[i], 0);
    }
  }
  jv_unref(r, JV_OBJ(l));
  if (rc) {
    jbuf_fini(&b);
    return -1;
  }
  return jbuf_take(r, &b, out);
}

/* Lower-cased copy for case-insensitive comparisons of strings. */
static int fold(R *r, jv v, bool case_sensitive, jv *out) {
  if (case_sensitive || v.t != JV_STR) {
    *out = jv_ref(v);
    return 0;
  }
  return map_ascii(r, JV_STRP(v), 1, out);
}

typedef struct sort_key {
  jv key; /* owned */
  size_t idx;
} sort_key;

/* Stable merge sort of keys (with original index as tie-break). */
static int merge_sort(R *r, sort_key *a, sort_key *tmp, size_t n, bool reverse, int line) {
  if (n < 2) return 0;
  size_t h = n / 2;
  if (merge_sort(r, a, tmp, h, reverse, line) || merge_sort(r, a + h, tmp, n - h, reverse, line)) return -1;
  size_t i = 0, j = h, k = 0;
  while (i < h && j < n) {
    int c;
    if (jv_cmp(r, a[i].key, a[j].key, &c, line, 0)) return -1;
    if (reverse) c = -c;
    if (c <= 0)
      tmp[k++] = a[i++];
    else
      tmp[k++] = a[j++];
  }
  while (i < h) tmp[k++] = a[i++];
  while (j < n) tmp[k++] = a[j++];
  memcpy(a, tmp, n * sizeof(sort_key));
  return 0;
}

/* Sorted list of the items of seq (or the index of the min/max). */
static int sorted(R *r, jv seq, bool reverse, bool case_sensitive, const char *attribute, jlist **out, int line) {
  jlist *l = NULL;
  if (jlib_iterate(r, seq, &l, line)) return -1;
  size_t n = l->n;
  int rc = jr_tick(r, n, line);
  sort_key *k = rc ? NULL : jr_alloc(r, (n ? n : 1) * 2 * sizeof(sort_key));
  if (!k) {
    jv_unref(r, JV_OBJ(l));
    return -1;
  }
  size_t made = 0;
  for (size_t i = 0; i < n && rc == 0; i++) {
    jv base = jv_ref(l->v[i]);
    if (attribute) {
      jv t;
      rc = get_path(r, l->v[i], attribute, &t, line);
      jv_unref(r, base);
      base = rc ? JV_UNDEF_V : t;
    }
    if (rc == 0) rc = fold(r, base, case_sensitive, &k[i].key);
    jv_unref(r, base);
    k[i].idx = i;
    if (rc == 0) made++;
  }
  if (rc == 0) rc = merge_sort(r, k, k + n, n, reverse, line);
  jlist *o = rc ? NULL : jv_mklist(r, n);
  if (o)
    for (size_t i = 0; i < n; i++) o->v[o->n++] = jv_ref(l->v[k[i].idx]);
  for (size_t i = 0; i < made; i++) jv_unref(r, k[i].key);
  jr_free(r, k, (n ? n : 1) * 2 * sizeof(sort_key));
  jv_unref(r, JV_OBJ(l));
  if (!o) return -1;
  *out = o;
  return 0;
}

static int run_test_by_name(R *r, const jv *name, jv v, jargs *a, int first_arg, bool *res, int line);

/* select/reject/selectattr/rejectattr */
static int select_items(R *r, jv seq, jargs *a, bool attr, bool keep, jv *out, int line) {
  jlist *l = NULL;
  const jv *an = NULL;
  if (attr) {
    an = jargs_get(a, 0, NULL);
    if (need_str(r, an, "attribute name", line)) return -1;
  }
  /* Jinja2's select/reject family yields nothing for a false value (None
   * included) instead of iterating it: functionary's template filters
   * `tools` after setting it to none. */
  if (jv_truthy(seq) ? jlib_iterate(r, seq, &l, line) : !(l = jv_mklist(r, 0))) return -1;
  jlist *o = jv_mklist(r, 0);
  int rc = o ? jr_tick(r, l->n, line) : -1;
  const jv *tname = jargs_get(a, attr ? 1 : 0, NULL);
  for (size_t i = 0; i < l->n && rc == 0; i++) {
    jv v;
    if (attr)
      rc = get_path(r, l->v[i], JV_STRP(*an)->s, &v, line);
    else
      v = jv_ref(l->v[i]);
    if (rc) break;
    bool t;
    if (tname)
      rc = run_test_by_name(r, tname, v, a, attr ? 2 : 1, &t, line);
    else
      t = jv_truthy(v);
    jv_unref(r, v);
    if (rc == 0 && t == keep) rc = jlist_push(r, o, jv_ref(l->v[i]));
  }
  jv_unref(r, JV_OBJ(l));
  if (rc) {
    if (o) jv_unref(r, JV_OBJ(o));
    return -1;
  }
  *out = JV_OBJ(o);
  return 0;
}

/* Arguments a->v[first..npos) shifted to a view starting at 0. */
static void args_shift(const jargs *a, int first, jargs *v) {
  *v = *a;
  v->v = a->v + first;
  v->n = a->n - first;
  v->npos = a->npos - first;
  v->kw = a->kw ? a->kw + first : NULL;
  if (v->n < 0) v->n = 0;
  if (v->npos < 0) v->npos = 0;
}

static int run_test_by_name(R *r, const jv *name, jv v, jargs *a, int first_arg, bool *res, int line) {
  if (need_str(r, name, "test name", line)) return -1;
  int id = jinja_test_id(JV_STRP(*name)->s);
  const char *n = JV_STRP(*name)->s;
  if (id < 0) {
    if (!strcmp(n, "==")) id = T_EQ;
    else if (!strcmp(n, "!=")) id = T_NE;
    else if (!strcmp(n, "<")) id = T_LT;
    else if (!strcmp(n, "<=")) id = T_LE;
    else if (!strcmp(n, ">")) id = T_GT;
    else if (!strcmp(n, ">=")) id = T_GE;
    else return jr_err(r, line, PW_ETEMPLATE, "no test named '%s'", n);
  }
  jargs sub;
  args_shift(a, first_arg, &sub);
  return jlib_test(r, id, v, &sub, res, line);
}

static int map_items(R *r, jv seq, jargs *a, jv *out, int line) {
  const jv *attr = jargs_get(a, -1, "attribute");
  const jv *dflt = jargs_get(a, -1, "default");
  const jv *fname = jargs_get(a, 0, NULL);
  int fid = -1;
  if (!attr) {
    if (need_str(r, fname, "map() filter name", line)) return -1;
    fid = jinja_filter_id(JV_STRP(*fname)->s);
    if (fid < 0) return jr_err(r, line, PW_ETEMPLATE, "no filter named '%s'", JV_STRP(*fname)->s);
  } else if (need_str(r, attr, "map() attribute", line)) {
    return -1;
  }
  jlist *l = NULL;
  /* as select: a false value maps to nothing */
  if (jv_truthy(seq) ? jlib_iterate(r, seq, &l, line) : !(l = jv_mklist(r, 0))) return -1;
  jlist *o = jv_mklist(r, l->n);
  int rc = o ? jr_tick(r, l->n, line) : -1;
  jargs sub;
  args_shift(a, 1, &sub);
  for (size_t i = 0; i < l->n && rc == 0; i++) {
    jv v;
    if (attr) {
      rc = get_path(r, l->v[i], JV_STRP(*attr)->s, &v, line);
      if (rc == 0 && v.t == JV_UNDEF && dflt) {
        v = jv_ref(*dflt);
      }
    } else {
      rc = jlib_filter(r, fid, l->v[i], &sub, &v, line);
    }
    if (rc == 0) rc = jlist_push(r, o, v);
  }
  jv_unref(r, JV_OBJ(l));
  if (rc) {
    if (o) jv_unref(r, JV_OBJ(o));
    return -1;
  }
  *out = JV_OBJ(o);
  return 0;
}

static int do_indent(R *r, jv v, jargs *a, jv *out) {
  const jv *w = jargs_get(a, 0, "width"), *first = jargs_get(a, 1, "first"), *blank = jargs_get(a, 2, "blank");
  jbuf ind;
  jbuf_init(r, &ind);
  int rc = 0;
  if (w && w->t == JV_STR)
    rc = jbuf_put(r, &ind, JV_STRP(*w)->s, JV_STRP(*w)->len);
  else
    for (int64_t i = 0, n = w ? as_int(*w) : 4; i < n && i < 1024 && rc == 0; i++) rc = jbuf_putc(r, &ind, ' ');
  jv sv = JV_UNDEF_V;
  if (rc == 0) rc = jlib_tostr(r, v, &sv);
  if (rc) {
    jbuf_fini(&ind);
    return -1;
  }
  jstr *s = JV_STRP(sv);
  const char *is = ind.p ? ind.p : "";
  /* Jinja2: s += "\n"; lines = s.splitlines(); rv = lines[0] + "\n".join
   * of the rest, each indented unless empty (blank=True indents all);
   * first=True indents the first line too. */
  jbuf b;
  jbuf_init(r, &b);
  bool ind_blank = blank && jv_truthy(*blank);
  if (first && jv_truthy(*first)) rc = jbuf_put(r, &b, is, ind.n);
  size_t st = 0, lineno = 0, n = s->len;
  /* the lines of s + "\n" are the segments of s between terminators,
   * the last (possibly empty) one included */
  for (size_t i = 0; i <= n && rc == 0; i++) {
    bool end = i == n;
    if (!end && s->s[i] != '\n' && s->s[i] != '\r') continue;
    size_t e = i;
    if (lineno > 0) {
      rc = jbuf_putc(r, &b, '\n');
      if (rc == 0 && (e > st || ind_blank)) rc = jbuf_put(r, &b, is, ind.n);
    }
    if (rc == 0) rc = jbuf_put(r, &b, s->s + st, e - st);
    lineno++;
    if (!end && s->s[i] == '\r' && i + 1 < n && s->s[i + 1] == '\n') i++;
    st = i + 1;
  }
  jv_unref(r, sv);
  jbuf_fini(&ind);
  if (rc) {
    jbuf_fini(&b);
    return -1;
  }
  return jbuf_take(r, &b, out);
}

static int do_tojson(R *r, jv v, jargs *a, jv *out, int line) {
  const jv *ind = jargs_get(a, 0, "indent"), *seps = jargs_get(a, -1, "separators"),
           *sk = jargs_get(a, -1, "sort_keys");
  char indent[65];
  jsonfmt f = {NULL, ", ", ": ", sk && jv_truthy(*sk)};
  if (ind && ind->t != JV_NONE) {
    if (ind->t == JV_STR) {
      size_t n = JV_STRP(*ind)->len < 64 ? JV_STRP(*ind)->len : 64;
      memcpy(indent, JV_STRP(*ind)->s, n);
      indent[n] = 0;
    } else if (is_intlike(*ind)) {
      int64_t n = as_int(*ind);
      if (n < 0) n = 0;
      if (n > 64) n = 64;
      memset(indent, ' ', (size_t)n);
      indent[n] = 0;
    } else {
      return jr_err(r, line, PW_ETEMPLATE, "tojson indent must be an integer or a string");
    }
    f.indent = indent;
    f.item_sep = ",";
  }
  if (seps && seps->t == JV_LIST && JV_LISTP(*seps)->n == 2 && JV_LISTP(*seps)->v[0].t == JV_STR &&
      JV_LISTP(*seps)->v[1].t == JV_STR) {
    f.item_sep = JV_STRP(JV_LISTP(*seps)->v[0])->s;
    f.key_sep = JV_STRP(JV_LISTP(*seps)->v[1])->s;
  }
  jbuf b;
  jbuf_init(r, &b);
  if (json_d(r, &b, v, &f, 0, line)) {
    jbuf_fini(&b);
    return -1;
  }
  return jbuf_take(r, &b, out);
}

static int to_int(R *r, jv v, const jv *dflt, jv *out) {
  (void)r;
  if (is_intlike(v)) {
    *out = jv_int(as_int(v));
    return 0;
  }
  if (v.t == JV_FLOAT && isfinite(v.u.f) && fabs(v.u.f) < 9.2e18) {
    *out = jv_int((int64_t)v.u.f);
    return 0;
  }
  if (v.t == JV_STR) {
    const char *s = JV_STRP(v)->s;
    char *end;
    errno = 0;
    long long x = strtoll(s, &end, 10);
    while (*end == ' ' || *end == '\t' || *end == '\n') end++;
    if (end != s && !*end && errno == 0) {
      *out = jv_int(x);
      return 0;
    }
    double d = strtod(s, &end);
    while (*end == ' ' || *end == '\t' || *end == '\n') end++;
    if (end != s && !*end && isfinite(d) && fabs(d) < 9.2e18) {
      *out = jv_int((int64_t)d);
      return 0;
    }
  }
  *out = dflt ? jv_ref(*dflt) : jv_int(0);
  return 0;
}

static int to_float(jv v, const jv *dflt, jv *out) {
  if (is_num(v)) {
    *out = jv_float(as_f(v));
    return 0;
  }
  if (v.t == JV_STR) {
    const char *s = JV_STRP(v)->s;
    char *end;
    double d = strtod(s, &end);
    while (*end == ' ' || *end == '\t' || *end == '\n') end++;
    if (end != s && !*end) {
      *out = jv_float(d);
      return 0;
    }
  }
  *out = dflt ? jv_ref(*dflt) : jv_float(0.0);
  return 0;
}

/* Appends t with & < > ' " as markupsafe escapes them. */
static int escape_into(R *r, jbuf *b, const jstr *t) {
  int rc = 0;
  for (size_t i = 0; i < t->len && rc == 0; i++) {
    switch (t->s[i]) {
    case '&': rc = jbuf_puts(r, b, "&amp;"); break;
    case '<': rc = jbuf_puts(r, b, "&lt;"); break;
    case '>': rc = jbuf_puts(r, b, "&gt;"); break;
    case '\'': rc = jbuf_puts(r, b, "&#39;"); break;
    case '"': rc = jbuf_puts(r, b, "&#34;"); break;
    default: rc = jbuf_putc(r, b, t->s[i]);
    }
  }
  return rc;
}

/* Takes the buffer as a Markup string. */
static int take_safe(R *r, jbuf *b, jv *out) {
  if (jbuf_take(r, b, out)) return -1;
  JV_STRP(*out)->safe = true;
  return 0;
}

/* |escape: a Markup string; one that already is stays as it is. */
static int html_escape(R *r, jv v, jv *out) {
  if (v.t == JV_STR && JV_STRP(v)->safe) {
    *out = jv_ref(v);
    return 0;
  }
  jv s;
  if (jlib_tostr(r, v, &s)) return -1;
  jbuf b;
  jbuf_init(r, &b);
  int rc = escape_into(r, &b, JV_STRP(s));
  jv_unref(r, s);
  if (rc) {
    jbuf_fini(&b);
    return -1;
  }
  return take_safe(r, &b, out);
}

/* |safe: strings become Markup; other values pass unchanged. */
static int mark_safe(R *r, jv v, jv *out) {
  if (v.t != JV_STR || JV_STRP(v)->safe) {
    *out = jv_ref(v);
    return 0;
  }
  if (jv_mkstr(r, JV_STRP(v)->s, JV_STRP(v)->len, out)) return -1;
  JV_STRP(*out)->safe = true;
  return 0;
}

static int reverse_v(R *r, jv v, jv *out, int line) {
  if (v.t == JV_STR) {
    jstr *s = JV_STRP(v);
    jv o;
    if (jv_mkstr(r, s->s, s->len, &o)) return -1;
    char *p = JV_STRP(o)->s;
    for (size_t i = 0; i < s->len;) { /* copy code points in reverse */
      size_t nx;
      cp_at(s->s, s->len, i, &nx);
      memcpy(p + s->len - nx, s->s + i, nx - i);
      i = nx;
    }
    *out = o;
    return 0;
  }
  jlist *l = NULL;
  if (jlib_iterate(r, v, &l, line)) return -1;
  for (size_t i = 0; i < l->n / 2; i++) {
    jv t = l->v[i];
    l->v[i] = l->v[l->n - 1 - i];
    l->v[l->n - 1 - i] = t;
  }
  *out = JV_OBJ(l);
  return 0;
}

static int unique_v(R *r, jv v, jargs *a, jv *out, int line) {
  const jv *cs = jargs_get(a, 0, "case_sensitive"), *attr = jargs_get(a, 1, "attribute");
  if (attr && need_str(r, attr, "attribute", line)) return -1;
  jlist *l = NULL;
  if (jlib_iterate(r, v, &l, line)) return -1;
  jlist *o = jv_mklist(r, 0), *seen = o ? jv_mklist(r, 0) : NULL;
  int rc = seen ? jr_tick(r, l->n * (l->n + 1) / 2 > r->max_iterations ? r->max_iterations + 1 : l->n, line) : -1;
  for (size_t i = 0; i < l->n && rc == 0; i++) {
    jv key, base;
    rc = attr ? get_path(r, l->v[i], JV_STRP(*attr)->s, &base, line) : (base = jv_ref(l->v[i]), 0);
    if (rc) break;
    rc = fold(r, base, cs && jv_truthy(*cs), &key);
    jv_unref(r, base);
    if (rc) break;
    bool dup = false;
    for (size_t j = 0; j < seen->n && !dup; j++) {
      int e = jv_eq(r, seen->v[j], key, 0);
      if (e < 0) rc = -1;
      dup = e == 1;
    }
    if (rc == 0 && !dup) {
      rc = jlist_push(r, seen, key);
      if (rc == 0) rc = jlist_push(r, o, jv_ref(l->v[i]));
    } else {
      jv_unref(r, key);
    }
  }
  jv_unref(r, JV_OBJ(l));
  if (seen) jv_unref(r, JV_OBJ(seen));
  if (rc) {
    if (o) jv_unref(r, JV_OBJ(o));
    return -1;
  }
  *out = JV_OBJ(o);
  return 0;
}

static int minmax(R *r, jv v, jargs *a, bool max, jv *out, int line) {
  const jv *cs = jargs_get(a, 0, "case_sensitive"), *attr = jargs_get(a, 1, "attribute");
  if (attr && need_str(r, attr, "attribute", line)) return -1;
  jlist *s = NULL;
  if (sorted(r, v, false, cs && jv_truthy(*cs), attr ? JV_STRP(*attr)->s : NULL, &s, line)) return -1;
  if (s->n == 0) {
    *out = jv_undef(NULL);
  } else if (max) {
    /* Python's max keeps the first of equal maxima: the stable sort puts
     * it first among equals, so walk back over the equal tail. */
    size_t i = s->n - 1;
    *out = jv_ref(s->v[i]);
    if (!attr && !(cs && jv_truthy(*cs))) {
      /* equality of folded keys: find the first element equal to the last */
      jv last;
      if (fold(r, s->v[i], false, &last) == 0) {
        while (i > 0) {
          jv prev;
          if (fold(r, s->v[i - 1], false, &prev)) break;
          int e = jv_eq(r, prev, last, 0);
          jv_unref(r, prev);
          if (e != 1) break;
          i--;
        }
        jv_unref(r, last);
        jv_unref(r, *out);
        *out = jv_ref(s->v[i]);
      }
    }
  } else {
    *out = jv_ref(s->v[0]);
  }
  jv_unref(r, JV_OBJ(s));
  return r->status ? -1 : 0;
}

/* from_json: not a Jinja2 builtin, but the filter DeepSeek's V3.2/V4
 * templates call on tool-call arguments given as a JSON string (as OpenAI
 * clients send them); runtimes serving those templates provide it, with
 * Python's json.loads as the reference. */
static int do_from_json(R *r, jv v, jv *out, int line) {
  if (need_str(r, &v, "from_json input", line)) return -1;
  json_error_t je;
  json_t *j = json_loadb(JV_STRP(v)->s, JV_STRP(v)->len, JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
  if (!j) return jr_err(r, line, PW_ETEMPLATE, "from_json: invalid JSON at offset %d: %s", je.position, je.text);
  int rc = jinja_from_json(r, j, out); /* its errors (depth, memory) are reported */
  json_decref(j);
  return rc ? -1 : 0;
}

int jlib_filter(R *r, int id, jv v, jargs *a, jv *out, int line) {
  const jv *a0 = jargs_get(a, 0, NULL);
  switch (id) {
  case F_SAFE: return mark_safe(r, v, out);
  case F_STRING: return jlib_tostr(r, v, out);
  case F_TOJSON: return do_tojson(r, v, a, out, line);
  case F_FROM_JSON: return do_from_json(r, v, out, line);
  case F_LENGTH:
  case F_COUNT: {
    int64_t n;
    if (length_of(r, v, &n, line)) return -1;
    *out = jv_int(n);
    return 0;
  }
  case F_DEFAULT: {
    const jv *d = jargs_get(a, 0, "default_value"), *b = jargs_get(a, 1, "boolean");
    bool use = v.t == JV_UNDEF || (b && jv_truthy(*b) && !jv_truthy(v));
    if (!use) *out = jv_ref(v);
    else if (d) *out = jv_ref(*d);
    else return jv_mkstr(r, "", 0, out);
    return 0;
  }
  case F_ESCAPE: return html_escape(r, v, out);
  case F_ITEMS:
  case F_KEYS:
  case F_VALUES:
    if (v.t == JV_UNDEF) {
      jlist *l = jv_mklist(r, 0);
      if (!l) return -1;
      *out = JV_OBJ(l);
      return 0;
    }
    if (v.t != JV_DICT && v.t != JV_NS)
      return jr_err(r, line, PW_ETEMPLATE, "can only get item pairs from a mapping, not %s", jv_typename(v));
    return items_list(r, JV_DICTP(v), id == F_ITEMS ? 0 : id == F_KEYS ? 1 : 2, out);
  case F_LIST: {
    jlist *l = NULL;
    if (jlib_iterate(r, v, &l, line)) return -1;
    *out = JV_OBJ(l);
    return 0;
  }
  case F_JOIN: {
    const jv *sep = jargs_get(a, 0, "d"), *attr = jargs_get(a, 1, "attribute");
    jv sepv = JV_UNDEF_V;
    if (sep && jlib_tostr(r, *sep, &sepv)) return -1;
    if (attr && need_str(r, attr, "attribute", line)) {
      jv_unref(r, sepv);
      return -1;
    }
    int rc = join(r, v, sep ? JV_STRP(sepv) : NULL, attr ? JV_STRP(*attr)->s : NULL, out, line);
    jv_unref(r, sepv);
    return rc;
  }
  case F_FIRST:
  case F_LAST: {
    if (v.t == JV_STR || v.t == JV_LIST) {
      int64_t n;
      length_of(r, v, &n, line);
      if (n == 0) {
        *out = jv_undef(NULL);
        return 0;
      }
      return jlib_getitem(r, v, jv_int(id == F_FIRST ? 0 : -1), out, line);
    }
    jlist *l = NULL;
    if (jlib_iterate(r, v, &l, line)) return -1;
    *out = l->n ? jv_ref(l->v[id == F_FIRST ? 0 : l->n - 1]) : jv_undef(NULL);
    jv_unref(r, JV_OBJ(l));
    return 0;
  }
  case F_UPPER:
  case F_LOWER:
  case F_CAPITALIZE:
  case F_TITLE:
  case F_TRIM: {
    jv s;
    if (jlib_tostr(r, v, &s)) return -1;
    int rc;
    if (id == F_TRIM) {
      const jv *ch = a0 && a0->t != JV_NONE ? a0 : jargs_get(a, -1, "chars");
      if (ch && ch->t == JV_NONE) ch = NULL;
      rc = ch && need_str(r, ch, "trim chars", line) ? -1 : strip(r, JV_STRP(s), ch ? JV_STRP(*ch) : NULL, true, true, out);
    } else {
      rc = map_ascii(r, JV_STRP(s), id == F_UPPER ? 0 : id == F_LOWER ? 1 : id == F_CAPITALIZE ? 2 : 4, out);
    }
    jv_unref(r, s);
    return rc;
  }
  case F_REPLACE: {
    const jv *o = jargs_get(a, 0, "old"), *n = jargs_get(a, 1, "new"), *c = jargs_get(a, 2, "count");
    jv s, os = JV_UNDEF_V, ns = JV_UNDEF_V;
    if (!o || !n) return jr_err(r, line, PW_ETEMPLATE, "replace needs old and new");
    if (jlib_tostr(r, v, &s)) return -1;
    int rc = jlib_tostr(r, *o, &os);
    if (rc == 0) rc = jlib_tostr(r, *n, &ns);
    if (rc == 0)
      rc = replace(r, JV_STRP(s), JV_STRP(os), JV_STRP(ns), c && c->t != JV_NONE && is_intlike(*c) ? as_int(*c) : -1,
                   out);
    jv_unref(r, s);
    jv_unref(r, os);
    jv_unref(r, ns);
    return rc;
  }
  case F_SELECT:
  case F_REJECT: return select_items(r, v, a, false, id == F_SELECT, out, line);
  case F_SELECTATTR:
  case F_REJECTATTR: return select_items(r, v, a, true, id == F_SELECTATTR, out, line);
  case F_MAP: return map_items(r, v, a, out, line);
  case F_INT: return to_int(r, v, jargs_get(a, 0, "default"), out);
  case F_FLOAT: return to_float(v, jargs_get(a, 0, "default"), out);
  case F_ABS:
    if (v.t == JV_FLOAT) {
      *out = jv_float(fabs(v.u.f));
      return 0;
    }
    if (is_intlike(v)) {
      int64_t i = as_int(v);
      if (i == INT64_MIN) return jr_err(r, line, PW_ETEMPLATE, "integer overflow");
      *out = jv_int(i < 0 ? -i : i);
      return 0;
    }
    return jr_err(r, line, PW_ETEMPLATE, "bad operand type for abs(): '%s'", jv_typename(v));
  case F_ROUND: {
    const jv *p = jargs_get(a, 0, "precision"), *m = jargs_get(a, 1, "method");
    if (!is_num(v)) return jr_err(r, line, PW_ETEMPLATE, "round() needs a number, not %s", jv_typename(v));
    int64_t prec = p && is_intlike(*p) ? as_int(*p) : 0;
    if (prec > 15) prec = 15;
    if (prec < -15) prec = -15;
    double x = as_f(v), sc = pow(10.0, (double)prec), y;
    const char *meth = m && m->t == JV_STR ? JV_STRP(*m)->s : "common";
    if (!strcmp(meth, "ceil")) y = ceil(x * sc) / sc;
    else if (!strcmp(meth, "floor")) y = floor(x * sc) / sc;
    else if (!strcmp(meth, "common")) y = nearbyint(x * sc) / sc; /* Python round(): half to even */
    else return jr_err(r, line, PW_ETEMPLATE, "method must be common, ceil or floor");
    *out = jv_float(y);
    return 0;
  }
  case F_INDENT: return do_indent(r, v, a, out);
  case F_UNIQUE: return unique_v(r, v, a, out, line);
  case F_REVERSE: return reverse_v(r, v, out, line);
  case F_SORT: {
    const jv *rev = jargs_get(a, 0, "reverse"), *cs = jargs_get(a, 1, "case_sensitive"),
             *attr = jargs_get(a, 2, "attribute");
    if (attr && need_str(r, attr, "attribute", line)) return -1;
    jlist *l;
    if (sorted(r, v, rev && jv_truthy(*rev), cs && jv_truthy(*cs), attr ? JV_STRP(*attr)->s : NULL, &l, line))
      return -1;
    *out = JV_OBJ(l);
    return 0;
  }
  case F_DICTSORT: {
    if (v.t != JV_DICT) return jr_err(r, line, PW_ETEMPLATE, "dictsort needs a dict, not %s", jv_typename(v));
    const jv *cs = jargs_get(a, 0, "case_sensitive"), *by = jargs_get(a, 1, "by"), *rev = jargs_get(a, 2, "reverse");
    jv its;
    if (items_list(r, JV_DICTP(v), 0, &its)) return -1;
    bool byv = by && by->t == JV_STR && !strcmp(JV_STRP(*by)->s, "value");
    jlist *l = NULL;
    int rc = sorted(r, its, rev && jv_truthy(*rev), cs && jv_truthy(*cs), byv ? "1" : "0", &l, line);
    jv_unref(r, its);
    if (rc) return -1;
    *out = JV_OBJ(l);
    return 0;
  }
  case F_SUM: {
    const jv *attr = jargs_get(a, 0, "attribute"), *start = jargs_get(a, 1, "start");
    if (attr && need_str(r, attr, "attribute", line)) return -1;
    jlist *l = NULL;
    if (jlib_iterate(r, v, &l, line)) return -1;
    jv acc = start ? jv_ref(*start) : jv_int(0);
    int rc = jr_tick(r, l->n, line);
    for (size_t i = 0; i < l->n && rc == 0; i++) {
      jv x, nacc;
      if (attr)
        rc = get_path(r, l->v[i], JV_STRP(*attr)->s, &x, line);
      else
        x = jv_ref(l->v[i]);
      if (rc) break;
      rc = jlib_binop(r, JOP_ADD, acc, x, &nacc, line);
      jv_unref(r, x);
      jv_unref(r, acc);
      acc = rc ? JV_UNDEF_V : nacc;
    }
    jv_unref(r, JV_OBJ(l));
    if (rc) {
      jv_unref(r, acc);
      return -1;
    }
    *out = acc;
    return 0;
  }
  case F_MIN:
  case F_MAX: return minmax(r, v, a, id == F_MAX, out, line);
  case F_WORDCOUNT: {
    jv s;
    if (jlib_tostr(r, v, &s)) return -1;
    int64_t n = 0;
    bool in = false;
    for (size_t i = 0; i < JV_STRP(s)->len; i++) {
      unsigned char c = (unsigned char)JV_STRP(s)->s[i];
      bool w = c == '_' || c >= 0x80 || (c >= '0' && c <= '9') || ((c | 32) >= 'a' && (c | 32) <= 'z');
      if (w && !in) n++;
      in = w;
    }
    jv_unref(r, s);
    *out = jv_int(n);
    return 0;
  }
  case F_FORMAT: {
    jv s;
    if (jlib_tostr(r, v, &s)) return -1;
    jlist *t = jv_mklist(r, (size_t)a->npos);
    if (!t) {
      jv_unref(r, s);
      return -1;
    }
    t->tuple = true;
    for (int i = 0; i < a->npos; i++) t->v[t->n++] = jv_ref(a->v[i]);
    int rc = percent_format(r, s, JV_OBJ(t), out, line);
    jv_unref(r, JV_OBJ(t));
    jv_unref(r, s);
    return rc;
  }
  case F_CENTER: {
    const jv *w = jargs_get(a, 0, "width");
    jv s;
    if (jlib_tostr(r, v, &s)) return -1;
    int64_t width = w && is_intlike(*w) ? as_int(*w) : 80, len = (int64_t)JV_STRP(s)->ncp;
    if (width > 65536) width = 65536;
    jbuf b;
    jbuf_init(r, &b);
    int rc = 0;
    int64_t pad = width > len ? width - len : 0, left = pad / 2 + (pad & width & 1);
    for (int64_t i = 0; i < left && rc == 0; i++) rc = jbuf_putc(r, &b, ' ');
    if (rc == 0) rc = jbuf_put(r, &b, JV_STRP(s)->s, JV_STRP(s)->len);
    for (int64_t i = left; i < pad && rc == 0; i++) rc = jbuf_putc(r, &b, ' ');
    jv_unref(r, s);
    if (rc) {
      jbuf_fini(&b);
      return -1;
    }
    return jbuf_take(r, &b, out);
  }
  case F_TRUNCATE: {
    const jv *len = jargs_get(a, 0, "length"), *kw = jargs_get(a, 1, "killwords"), *end = jargs_get(a, 2, "end"),
             *leeway = jargs_get(a, 3, "leeway");
    jv s;
    if (jlib_tostr(r, v, &s)) return -1;
    jstr *t = JV_STRP(s);
    int64_t n = len && is_intlike(*len) ? as_int(*len) : 255, lw = leeway && is_intlike(*leeway) ? as_int(*leeway) : 5;
    const char *e = end && end->t == JV_STR ? JV_STRP(*end)->s : "...";
    int64_t el = (int64_t)strlen(e);
    if ((int64_t)t->ncp <= n + lw) {
      *out = s;
      return 0;
    }
    int64_t keep = n - el;
    if (keep < 0) keep = 0;
    size_t cut = cp_off(t, (size_t)keep);
    if (!(kw && jv_truthy(*kw))) {
      size_t sp = cut;
      while (sp > 0 && t->s[sp - 1] != ' ') sp--;
      if (sp > 0) cut = sp - 1;
    }
    jbuf b;
    jbuf_init(r, &b);
    int rc = jbuf_put(r, &b, t->s, cut);
    if (rc == 0) rc = jbuf_puts(r, &b, e);
    jv_unref(r, s);
    if (rc) {
      jbuf_fini(&b);
      return -1;
    }
    return jbuf_take(r, &b, out);
  }
  case F_BATCH: {
    const jv *lc = jargs_get(a, 0, "linecount"), *fill = jargs_get(a, 1, "fill_with");
    int64_t k = lc && is_intlike(*lc) ? as_int(*lc) : 0;
    if (k <= 0) return jr_err(r, line, PW_ETEMPLATE, "batch size must be positive");
    jlist *l = NULL;
    if (jlib_iterate(r, v, &l, line)) return -1;
    jlist *o = jv_mklist(r, 0), *cur = NULL;
    int rc = o ? 0 : -1;
    for (size_t i = 0; i < l->n && rc == 0; i++) {
      if (!cur) {
        cur = jv_mklist(r, (size_t)(k < 64 ? k : 64));
        if (!cur || jlist_push(r, o, JV_OBJ(cur))) {
          rc = -1;
          break;
        }
      }
      rc = jlist_push(r, cur, jv_ref(l->v[i]));
      if ((int64_t)cur->n == k) cur = NULL;
    }
    while (rc == 0 && cur && fill && (int64_t)cur->n < k) rc = jlist_push(r, cur, jv_ref(*fill));
    jv_unref(r, JV_OBJ(l));
    if (rc) {
      if (o) jv_unref(r, JV_OBJ(o));
      return -1;
    }
    *out = JV_OBJ(o);
    return 0;
  }
  case F_ATTR: {
    if (need_str(r, a0, "attr name", line)) return -1;
    return jlib_getattr(r, v, JV_STRP(*a0)->s, out, line);
  }
  }
  return jr_err(r, line, PW_EINTERNAL, "unknown filter id %d", id);
}

/* ---- tests ---- */
static bool all_cased(jv v, bool upper) {
  if (v.t != JV_STR) return false;
  bool cased = false;
  for (size_t i = 0; i < JV_STRP(v)->len; i++) {
    char c = JV_STRP(v)->s[i];
    if (upper ? (c >= 'a' && c <= 'z') : (c >= 'A' && c <= 'Z')) return false;
    cased = cased || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
  }
  return cased;
}

int jlib_test(R *r, int id, jv v, jargs *a, bool *res, int line) {
  const jv *a0 = jargs_get(a, 0, NULL);
  *res = false;
  switch (id) {
  case T_DEFINED: *res = v.t != JV_UNDEF; return 0;
  case T_UNDEFINED: *res = v.t == JV_UNDEF; return 0;
  case T_NONE: *res = v.t == JV_NONE; return 0;
  case T_BOOLEAN: *res = v.t == JV_BOOL; return 0;
  case T_TRUE: *res = v.t == JV_BOOL && v.u.b; return 0;
  case T_FALSE: *res = v.t == JV_BOOL && !v.u.b; return 0;
  case T_STRING: *res = v.t == JV_STR; return 0;
  case T_NUMBER: *res = is_num(v); return 0;
  case T_INTEGER: *res = v.t == JV_INT; return 0;
  case T_FLOAT: *res = v.t == JV_FLOAT; return 0;
  case T_MAPPING: *res = v.t == JV_DICT; return 0;
  case T_ITERABLE: *res = v.t == JV_STR || v.t == JV_LIST || v.t == JV_DICT || v.t == JV_UNDEF; return 0;
  case T_SEQUENCE: *res = v.t == JV_STR || v.t == JV_LIST || v.t == JV_DICT || v.t == JV_UNDEF; return 0;
  case T_CALLABLE: *res = v.t == JV_FUNC; return 0;
  case T_ESCAPED: *res = false; return 0;
  case T_LOWER: *res = all_cased(v, false); return 0;
  case T_UPPER: *res = all_cased(v, true); return 0;
  case T_FILTER:
  case T_TEST:
    *res = v.t == JV_STR && (id == T_FILTER ? jinja_filter_id(JV_STRP(v)->s) : jinja_test_id(JV_STRP(v)->s)) >= 0;
    return 0;
  case T_ODD:
  case T_EVEN:
  case T_DIVISIBLEBY: {
    if (!is_intlike(v) && v.t != JV_FLOAT)
      return jr_err(r, line, PW_ETEMPLATE, "test '%s' needs a number, not %s", id == T_ODD ? "odd" : id == T_EVEN ? "even" : "divisibleby",
                    jv_typename(v));
    if (id == T_DIVISIBLEBY) {
      if (!a0 || !is_num(*a0)) return jr_err(r, line, PW_ETEMPLATE, "divisibleby needs a number");
      jv m;
      if (jlib_binop(r, JOP_MOD, v, *a0, &m, line)) return -1;
      *res = !jv_truthy(m);
      return 0;
    }
    int64_t i = as_int(v);
    *res = id == T_ODD ? (i % 2 != 0) : (i % 2 == 0);
    return 0;
  }
  case T_EQ:
  case T_NE:
  case T_SAMEAS: {
    if (!a0) return jr_err(r, line, PW_ETEMPLATE, "test needs an argument");
    if (id == T_SAMEAS) {
      /* identity: same object, or equal singletons/small scalars */
      if (v.t != a0->t) return 0;
      if (v.t >= JV_STR) *res = v.u.o == a0->u.o;
      else *res = jv_eq(r, v, *a0, 0) == 1;
      return 0;
    }
    int e = jv_eq(r, v, *a0, 0);
    if (e < 0) return -1;
    *res = id == T_EQ ? e == 1 : e == 0;
    return 0;
  }
  case T_LT:
  case T_LE:
  case T_GT:
  case T_GE: {
    if (!a0) return jr_err(r, line, PW_ETEMPLATE, "test needs an argument");
    int c;
    if (jv_cmp(r, v, *a0, &c, line, 0)) return -1;
    *res = id == T_LT ? c < 0 : id == T_LE ? c <= 0 : id == T_GT ? c > 0 : c >= 0;
    return 0;
  }
  case T_IN:
    if (!a0) return jr_err(r, line, PW_ETEMPLATE, "test 'in' needs an argument");
    return contains(r, v, *a0, res, line);
  }
  return jr_err(r, line, PW_EINTERNAL, "unknown test id %d", id);
}
