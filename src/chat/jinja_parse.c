/* jinja_parse.c - lexer and parser of the Jinja subset: template text to the
 * syntax tree of jinja_int.h.
 *
 * Whitespace follows Jinja2 as Hugging Face configures it: newlines are
 * normalized to "\n" and one trailing newline is dropped; trim_blocks drops
 * the newline after a block or comment tag; lstrip_blocks drops spaces and
 * tabs before a block or comment tag that starts a line; "-" in a delimiter
 * strips all whitespace on that side, "+" disables the block rules.
 * Expression precedence is Jinja2's (filters and tests bind tighter than any
 * operator). Not the renderer: see jinja.c.
 */
#include "chat/jinja.h"
#include "chat/jinja_int.h"

#include "base/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- arena: every node, string and constant of a template ---- */
struct jarena_chunk {
  struct jarena_chunk *next;
  size_t used, cap;
  _Alignas(16) unsigned char mem[];
};

static void *arena_alloc(struct jarena_chunk **a, size_t n) {
  n = (n + 15) & ~(size_t)15;
  struct jarena_chunk *c = *a;
  if (!c || c->cap - c->used < n) {
    size_t cap = n > 65536 ? n : 65536;
    c = malloc(sizeof(*c) + cap);
    if (!c) return NULL;
    c->next = *a;
    c->used = 0;
    c->cap = cap;
    *a = c;
  }
  void *p = c->mem + c->used;
  c->used += n;
  memset(p, 0, n);
  return p;
}

static void arena_free(struct jarena_chunk *a) {
  while (a) {
    struct jarena_chunk *n = a->next;
    free(a);
    a = n;
  }
}

/* ---- UTF-8 ---- */
size_t jinja_utf8_next(const char *s, size_t len, size_t i) {
  const unsigned char *u = (const unsigned char *)s;
  unsigned c = u[i];
  size_t n;
  if (c < 0x80) return i + 1;
  if (c >= 0xC2 && c <= 0xDF)
    n = 1;
  else if (c >= 0xE0 && c <= 0xEF)
    n = 2;
  else if (c >= 0xF0 && c <= 0xF4)
    n = 3;
  else
    return i + 1;
  if (i + n >= len) return i + 1;
  for (size_t k = 1; k <= n; k++)
    if ((u[i + k] & 0xC0) != 0x80) return i + 1;
  return i + n + 1;
}

size_t jinja_utf8_count(const char *s, size_t len) {
  size_t n = 0, i = 0;
  while (i < len) {
    if ((unsigned char)s[i] < 0x80) {
      i++;
    } else {
      i = jinja_utf8_next(s, len, i);
    }
    n++;
  }
  return n;
}

/* ---- tokens ---- */
typedef enum ttype { T_TEXT, T_VBEGIN, T_VEND, T_BBEGIN, T_BEND, T_NAME, T_STR, T_INT, T_FLOAT, T_OP, T_EOF } ttype;

typedef struct tok {
  uint8_t t;
  int line;
  const char *s; /* TEXT/NAME/OP: view of the normalized source; STR: decoded (arena) */
  size_t len;
  int64_t i;
  double f;
} tok;

typedef struct P {
  struct jarena_chunk **arena;
  const char *src;
  size_t n;
  tok *toks;
  size_t ntok, captok, pos;
  int depth, max_depth, loop_depth;
  char *err;
  int status;
} P;

static int perr(P *p, int line, int status, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static int perr(P *p, int line, int status, const char *fmt, ...) {
  if (p->status) return -1;
  char msg[PW_ERRMAX];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  p->status = status;
  pw_seterr(p->err, status, "template line %d: %s", line, msg);
  return -1;
}

static int nomem(P *p) { return perr(p, 0, PW_ENOMEM, "out of memory"); }

static int push_tok(P *p, tok t) {
  if (p->ntok == p->captok) {
    size_t cap = p->captok ? p->captok * 2 : 256;
    tok *nt = realloc(p->toks, cap * sizeof(tok));
    if (!nt) return nomem(p);
    p->toks = nt;
    p->captok = cap;
  }
  p->toks[p->ntok++] = t;
  return 0;
}

static bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }
static bool is_name0(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
static bool is_digit(char c) { return c >= '0' && c <= '9'; }
static bool is_name1(char c) { return is_name0(c) || is_digit(c); }

static int count_nl(const char *s, size_t a, size_t b) {
  int n = 0;
  for (size_t i = a; i < b; i++) n += s[i] == '\n';
  return n;
}

static void put_utf8(char *o, size_t *k, uint32_t cp) {
  if (cp < 0x80) {
    o[(*k)++] = (char)cp;
  } else if (cp < 0x800) {
    o[(*k)++] = (char)(0xC0 | (cp >> 6));
    o[(*k)++] = (char)(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    o[(*k)++] = (char)(0xE0 | (cp >> 12));
    o[(*k)++] = (char)(0x80 | ((cp >> 6) & 0x3F));
    o[(*k)++] = (char)(0x80 | (cp & 0x3F));
  } else {
    o[(*k)++] = (char)(0xF0 | (cp >> 18));
    o[(*k)++] = (char)(0x80 | ((cp >> 12) & 0x3F));
    o[(*k)++] = (char)(0x80 | ((cp >> 6) & 0x3F));
    o[(*k)++] = (char)(0x80 | (cp & 0x3F));
  }
}

static int hexval(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

/* Lexes a string literal starting at src[*pos] (the quote); Python escape
 * rules as Jinja2 applies them ("unicode-escape"). */
static int lex_string(P *p, size_t *pos, int *line, tok *t) {
  const char *s = p->src;
  char q = s[*pos];
  size_t i = *pos + 1, start = i;
  while (i < p->n && s[i] != q) {
    if (s[i] == '\\' && i + 1 < p->n) i++;
    i++;
  }
  if (i >= p->n) return perr(p, *line, PW_ETEMPLATE, "unterminated string literal");
  size_t rawlen = i - start;
  char *o = arena_alloc(p->arena, rawlen + 1);
  if (!o) return nomem(p);
  size_t k = 0;
  for (size_t j = start; j < i; j++) {
    char c = s[j];
    if (c != '\\') {
      o[k++] = c;
      continue;
    }
    char e = s[++j];
    switch (e) {
    case 'n': o[k++] = '\n'; break;
    case 't': o[k++] = '\t'; break;
    case 'r': o[k++] = '\r'; break;
    case 'a': o[k++] = '\a'; break;
    case 'b': o[k++] = '\b'; break;
    case 'f': o[k++] = '\f'; break;
    case 'v': o[k++] = '\v'; break;
    case '\\': o[k++] = '\\'; break;
    case '\'': o[k++] = '\''; break;
    case '"': o[k++] = '"'; break;
    case '\n': break; /* line continuation */
    case 'x':
    case 'u':
    case 'U': {
      int nd = e == 'x' ? 2 : e == 'u' ? 4 : 8;
      uint32_t cp = 0;
      if (j + (size_t)nd >= i) {
        return perr(p, *line, PW_ETEMPLATE, "truncated \\%c escape in string literal", e);
      }
      for (int d = 1; d <= nd; d++) {
        int h = hexval(s[j + (size_t)d]);
        if (h < 0) return perr(p, *line, PW_ETEMPLATE, "bad \\%c escape in string literal", e);
        cp = cp * 16 + (uint32_t)h;
      }
      if (cp > 0x10FFFF) return perr(p, *line, PW_ETEMPLATE, "escape out of Unicode range");
      j += (size_t)nd;
      put_utf8(o, &k, cp); /* at most 4 bytes for >= 4 source bytes */
      break;
    }
    default:
      if (e >= '0' && e <= '7') {
        uint32_t cp = (uint32_t)(e - '0');
        for (int d = 0; d < 2 && j + 1 < i && s[j + 1] >= '0' && s[j + 1] <= '7'; d++) cp = cp * 8 + (uint32_t)(s[++j] - '0');
        put_utf8(o, &k, cp);
      } else {
        o[k++] = '\\';
        o[k++] = e;
      }
    }
  }
  o[k] = 0;
  *line += count_nl(s, *pos, i);
  t->t = T_STR;
  t->s = o;
  t->len = k;
  *pos = i + 1;
  return 0;
}

static int lex_number(P *p, size_t *pos, int line, tok *t, bool after_dot) {
  const char *s = p->src;
  size_t i = *pos;
  char buf[128];
  size_t k = 0;
  bool is_float = false;
  while (i < p->n && (is_digit(s[i]) || (s[i] == '_' && i + 1 < p->n && is_digit(s[i + 1])))) {
    if (s[i] != '_' && k < sizeof buf - 8) buf[k++] = s[i];
    i++;
  }
  if (!after_dot && i + 1 < p->n && s[i] == '.' && is_digit(s[i + 1])) {
    is_float = true;
    buf[k++] = s[i++];
    while (i < p->n && (is_digit(s[i]) || (s[i] == '_' && i + 1 < p->n && is_digit(s[i + 1])))) {
      if (s[i] != '_' && k < sizeof buf - 8) buf[k++] = s[i];
      i++;
    }
  }
  if (!after_dot && i < p->n && (s[i] == 'e' || s[i] == 'E')) {
    size_t j = i + 1;
    if (j < p->n && (s[j] == '+' || s[j] == '-')) j++;
    if (j < p->n && is_digit(s[j])) {
      is_float = true;
      buf[k++] = 'e';
      if (s[i + 1] == '-' || s[i + 1] == '+') buf[k++] = s[i + 1];
      i = j;
      while (i < p->n && is_digit(s[i])) {
        if (k < sizeof buf - 2) buf[k++] = s[i];
        i++;
      }
    }
  }
  buf[k] = 0;
  if (is_float) {
    t->t = T_FLOAT;
    t->f = strtod(buf, NULL);
  } else {
    char *end;
    unsigned long long v = strtoull(buf, &end, 10);
    if (k > 19 || v > (unsigned long long)INT64_MAX) return perr(p, line, PW_ETEMPLATE, "integer literal too large");
    t->t = T_INT;
    t->i = (int64_t)v;
  }
  *pos = i;
  return 0;
}

/* Rest-of-tag whitespace handling after an end delimiter at src[*pos]. */
static void after_tag(P *p, size_t *pos, int *line, char sign, bool block, bool *line_starting) {
  const char *s = p->src;
  if (sign == '-') {
    size_t a = *pos;
    while (*pos < p->n && is_ws(s[*pos])) (*pos)++;
    *line += count_nl(s, a, *pos);
    *line_starting = *pos > a && s[*pos - 1] == '\n';
  } else if (block && sign != '+' && *pos < p->n && s[*pos] == '\n') {
    (*pos)++;
    (*line)++;
    *line_starting = true;
  } else {
    *line_starting = false;
  }
}

/* Text before a tag, with the tag's left whitespace rules applied. */
static int emit_text(P *p, size_t a, size_t b, char sign, bool block, bool line_starting, int line) {
  const char *s = p->src;
  size_t e = b;
  if (sign == '-') {
    while (e > a && is_ws(s[e - 1])) e--;
  } else if (sign != '+' && block) {
    size_t l = b;
    while (l > a && s[l - 1] != '\n') l--;
    if (l > a || line_starting) {
      bool ws = l < b;
      for (size_t i = l; i < b; i++)
        if (!is_ws(s[i])) ws = false;
      if (ws) e = l;
    }
  }
  if (e > a) {
    tok t = {.t = T_TEXT, .line = line, .s = s + a, .len = e - a};
    return push_tok(p, t);
  }
  return 0;
}

/* Matches `{%[-+]? raw [-+]?%}` at src[i]; returns the index after it. */
static size_t match_raw_tag(const char *s, size_t n, size_t i, const char *word, char *lsign, char *rsign) {
  if (i + 2 > n || s[i] != '{' || s[i + 1] != '%') return 0;
  i += 2;
  *lsign = 0;
  if (i < n && (s[i] == '-' || s[i] == '+')) *lsign = s[i++];
  while (i < n && is_ws(s[i])) i++;
  size_t wl = strlen(word);
  if (i + wl > n || memcmp(s + i, word, wl) != 0) return 0;
  i += wl;
  while (i < n && is_ws(s[i])) i++;
  *rsign = 0;
  if (i < n && (s[i] == '-' || s[i] == '+')) *rsign = s[i++];
  if (i + 2 > n || s[i] != '%' || s[i + 1] != '}') return 0;
  return i + 2;
}

static const char *const OPS2[] = {"**", "//", "==", "!=", "<=", ">="};
static const char OPS1[] = "+-*/%~<>()[]{}.,:|=";

static int lex(P *p) {
  const char *s = p->src;
  size_t n = p->n, pos = 0;
  int line = 1;
  bool line_starting = true;
  while (pos < n) {
    size_t ts = pos;
    while (ts + 1 < n && !(s[ts] == '{' && (s[ts + 1] == '{' || s[ts + 1] == '%' || s[ts + 1] == '#'))) ts++;
    if (ts + 1 >= n) ts = n;
    char kind = ts < n ? s[ts + 1] : 0;
    char sign = (ts + 2 < n && (s[ts + 2] == '-' || s[ts + 2] == '+')) ? s[ts + 2] : 0;
    if (kind == '{' && sign == '+') sign = 0;
    if (emit_text(p, pos, ts, sign, kind != '{', line_starting, line)) return -1;
    line += count_nl(s, pos, ts);
    if (ts >= n) break;
    int tag_line = line;
    if (kind == '#') {
      size_t e = ts + 2 + (sign ? 1 : 0);
      while (e + 1 < n && !(s[e] == '#' && s[e + 1] == '}')) e++;
      if (e + 1 >= n) return perr(p, tag_line, PW_ETEMPLATE, "unterminated comment");
      char es = (e > ts + 2 && (s[e - 1] == '-' || s[e - 1] == '+')) ? s[e - 1] : 0;
      line += count_nl(s, ts, e);
      pos = e + 2;
      after_tag(p, &pos, &line, es, true, &line_starting);
      continue;
    }
    char ls, rs;
    size_t after = kind == '%' ? match_raw_tag(s, n, ts, "raw", &ls, &rs) : 0;
    if (after) {
      /* {% raw %}: everything up to {% endraw %} is text. */
      pos = after;
      line += count_nl(s, ts, after);
      /* Jinja2 applies no trim_blocks after {% raw %} (only "-") */
      after_tag(p, &pos, &line, rs, false, &line_starting);
      size_t e = pos, eafter = 0;
      char els = 0, ers = 0;
      for (; e + 1 < n; e++)
        if (s[e] == '{' && s[e + 1] == '%' && (eafter = match_raw_tag(s, n, e, "endraw", &els, &ers))) break;
      if (!eafter) return perr(p, tag_line, PW_ETEMPLATE, "unterminated raw block");
      if (emit_text(p, pos, e, els, true, line_starting, line)) return -1;
      line += count_nl(s, pos, eafter);
      pos = eafter;
      after_tag(p, &pos, &line, ers, true, &line_starting);
      continue;
    }
    tok bt = {.t = kind == '{' ? T_VBEGIN : T_BBEGIN, .line = tag_line};
    if (push_tok(p, bt)) return -1;
    pos = ts + 2 + (sign ? 1 : 0);
    int balance = 0;
    for (;;) {
      while (pos < n && is_ws(s[pos])) {
        if (s[pos] == '\n') line++;
        pos++;
      }
      if (pos >= n) return perr(p, tag_line, PW_ETEMPLATE, "unterminated %s", kind == '{' ? "'{{' tag" : "'{%' tag");
      if (balance == 0) {
        char es = 0;
        size_t q = pos;
        if (s[q] == '-' || (s[q] == '+' && kind == '%')) es = s[q++];
        char c2 = kind == '{' ? '}' : '%';
        if (q + 1 < n && s[q] == c2 && s[q + 1] == '}') {
          tok et = {.t = kind == '{' ? T_VEND : T_BEND, .line = line};
          if (push_tok(p, et)) return -1;
          pos = q + 2;
          after_tag(p, &pos, &line, es, kind == '%', &line_starting);
          break;
        }
      }
      tok t = {.line = line};
      char c = s[pos];
      if (is_name0(c)) {
        size_t a = pos;
        while (pos < n && is_name1(s[pos])) pos++;
        t.t = T_NAME;
        t.s = s + a;
        t.len = pos - a;
      } else if (is_digit(c)) {
        bool after_dot = p->ntok > 0 && p->toks[p->ntok - 1].t == T_OP && p->toks[p->ntok - 1].s[0] == '.';
        if (lex_number(p, &pos, line, &t, after_dot)) return -1;
      } else if (c == '\'' || c == '"') {
        if (lex_string(p, &pos, &line, &t)) return -1;
      } else {
        bool got = false;
        if (pos + 1 < n) {
          for (size_t k = 0; k < sizeof OPS2 / sizeof OPS2[0]; k++) {
            if (s[pos] == OPS2[k][0] && s[pos + 1] == OPS2[k][1]) {
              t.t = T_OP;
              t.s = s + pos;
              t.len = 2;
              pos += 2;
              got = true;
              break;
            }
          }
        }
        if (!got) {
          if (!strchr(OPS1, c) || c == 0) return perr(p, line, PW_ETEMPLATE, "unexpected character '%c'", c);
          t.t = T_OP;
          t.s = s + pos;
          t.len = 1;
          pos++;
          if (c == '(' || c == '[' || c == '{') balance++;
          if ((c == ')' || c == ']' || c == '}') && balance > 0) balance--;
        }
      }
      if (push_tok(p, t)) return -1;
    }
  }
  tok eof = {.t = T_EOF, .line = line};
  return push_tok(p, eof);
}

/* ---- parser ---- */
static tok *cur(P *p) { return &p->toks[p->pos]; }
static tok *peekn(P *p, size_t k) {
  size_t i = p->pos + k;
  return &p->toks[i < p->ntok ? i : p->ntok - 1];
}
static bool is_op(const tok *t, const char *op) {
  return t->t == T_OP && t->len == strlen(op) && memcmp(t->s, op, t->len) == 0;
}
static bool is_name(const tok *t, const char *nm) {
  return t->t == T_NAME && t->len == strlen(nm) && memcmp(t->s, nm, t->len) == 0;
}

static const char *tok_desc(const tok *t, char *buf, size_t cap) {
  switch (t->t) {
  case T_EOF: return "end of template";
  case T_VEND: return "'}}'";
  case T_BEND: return "'%}'";
  case T_VBEGIN: return "'{{'";
  case T_BBEGIN: return "'{%'";
  case T_TEXT: return "text";
  case T_STR: return "string";
  case T_INT:
  case T_FLOAT: return "number";
  default: snprintf(buf, cap, "'%.*s'", (int)(t->len > 40 ? 40 : t->len), t->s); return buf;
  }
}

static int unexpected(P *p) {
  char b[64];
  return perr(p, cur(p)->line, PW_ETEMPLATE, "unexpected %s", tok_desc(cur(p), b, sizeof b));
}

static int expect_op(P *p, const char *op) {
  if (!is_op(cur(p), op)) {
    char b[64];
    return perr(p, cur(p)->line, PW_ETEMPLATE, "expected '%s', got %s", op, tok_desc(cur(p), b, sizeof b));
  }
  p->pos++;
  return 0;
}

static int expect_end(P *p) {
  if (cur(p)->t != T_BEND) {
    char b[64];
    return perr(p, cur(p)->line, PW_ETEMPLATE, "expected '%%}', got %s", tok_desc(cur(p), b, sizeof b));
  }
  p->pos++;
  return 0;
}

static char *pstrdup(P *p, const char *s, size_t n) {
  char *o = arena_alloc(p->arena, n + 1);
  if (!o) return NULL;
  memcpy(o, s, n);
  o[n] = 0;
  return o;
}

static jx *newx(P *p, int kind, int line) {
  jx *e = arena_alloc(p->arena, sizeof(jx));
  if (!e) {
    nomem(p);
    return NULL;
  }
  e->kind = (uint8_t)kind;
  e->line = line;
  return e;
}

static jx *const_str(P *p, const char *s, size_t n, int line) {
  jx *e = newx(p, JX_CONST, line);
  if (!e) return NULL;
  jstr *js_ = arena_alloc(p->arena, sizeof(jstr) + n + 1);
  if (!js_) {
    nomem(p);
    return NULL;
  }
  js_->h.immortal = 1;
  js_->h.rc = 1;
  js_->h.type = JV_STR;
  js_->len = n;
  js_->ncp = jinja_utf8_count(s, n);
  memcpy(js_->s, s, n);
  js_->s[n] = 0;
  e->val.t = JV_STR;
  e->val.u.o = &js_->h;
  return e;
}

static char *name_of(P *p, const tok *t) { return pstrdup(p, t->s, t->len); }

static int enter(P *p) {
  if (++p->depth > p->max_depth)
    return perr(p, cur(p)->line, PW_ELIMIT, "nesting deeper than %d levels", p->max_depth);
  return 0;
}

static jx *parse_expr(P *p, bool with_cond);
static jx *parse_unary(P *p, bool with_filter);
static jx *parse_primary(P *p);
static jx *parse_postfix(P *p, jx *e);

/* Growable pointer list in malloc memory, copied into the arena when done. */
typedef struct plist {
  void **v;
  const char **kw;
  int n, cap;
} plist;

static int pl_push(P *p, plist *l, void *x, const char *kw) {
  if (l->n == l->cap) {
    int cap = l->cap ? l->cap * 2 : 8;
    void **nv = realloc(l->v, (size_t)cap * sizeof(void *));
    if (!nv) return nomem(p);
    l->v = nv;
    const char **nk = realloc(l->kw, (size_t)cap * sizeof(char *));
    if (!nk) return nomem(p);
    l->kw = nk;
    l->cap = cap;
  }
  l->v[l->n] = x;
  l->kw[l->n] = kw;
  l->n++;
  return 0;
}

static void pl_free(plist *l) {
  free(l->v);
  free(l->kw);
}

static void **pl_copy(P *p, plist *l) {
  if (l->n == 0) return NULL;
  void **o = arena_alloc(p->arena, (size_t)l->n * sizeof(void *));
  if (!o) {
    nomem(p);
    return NULL;
  }
  memcpy(o, l->v, (size_t)l->n * sizeof(void *));
  return o;
}

static const char **pl_copy_kw(P *p, plist *l) {
  if (l->n == 0) return NULL;
  const char **o = arena_alloc(p->arena, (size_t)l->n * sizeof(char *));
  if (!o) {
    nomem(p);
    return NULL;
  }
  memcpy(o, l->kw, (size_t)l->n * sizeof(char *));
  return o;
}

/* ( args ) after the '(' has been seen; fills e->args/kw/nargs. */
static int parse_call_args(P *p, jx *e) {
  plist l = {0};
  if (expect_op(p, "(")) return -1;
  bool seen_kw = false;
  while (!is_op(cur(p), ")")) {
    const char *kw = NULL;
    if (cur(p)->t == T_NAME && is_op(peekn(p, 1), "=")) {
      kw = name_of(p, cur(p));
      if (!kw) goto fail;
      p->pos += 2;
      seen_kw = true;
    } else if (seen_kw) {
      perr(p, cur(p)->line, PW_ETEMPLATE, "positional argument after keyword argument");
      goto fail;
    }
    jx *a = parse_expr(p, true);
    if (!a || pl_push(p, &l, a, kw)) goto fail;
    if (is_op(cur(p), ",")) {
      p->pos++;
    } else if (!is_op(cur(p), ")")) {
      unexpected(p);
      goto fail;
    }
  }
  p->pos++;
  e->nargs = l.n;
  e->args = (jx **)pl_copy(p, &l);
  e->kw = pl_copy_kw(p, &l);
  if (l.n && (!e->args || !e->kw)) goto fail;
  pl_free(&l);
  return 0;
fail:
  pl_free(&l);
  return -1;
}

/* Parses `name(args)` (or a dotted name) as a filter on e. */
static jx *parse_filter(P *p, jx *operand, int line) {
  if (cur(p)->t != T_NAME) {
    unexpected(p);
    return NULL;
  }
  char nm[128];
  size_t k = 0;
  for (;;) {
    tok *t = cur(p);
    if (k + t->len + 2 > sizeof nm) {
      perr(p, t->line, PW_ETEMPLATE, "filter name too long");
      return NULL;
    }
    memcpy(nm + k, t->s, t->len);
    k += t->len;
    p->pos++;
    if (is_op(cur(p), ".") && peekn(p, 1)->t == T_NAME) {
      nm[k++] = '.';
      p->pos++;
      continue;
    }
    break;
  }
  nm[k] = 0;
  int id = jinja_filter_id(nm);
  if (id < 0) {
    perr(p, line, PW_ETEMPLATE, "unknown filter '%s'", nm);
    return NULL;
  }
  jx *f = newx(p, JX_FILTER, line);
  if (!f) return NULL;
  f->id = id;
  f->name = pstrdup(p, nm, k);
  f->a = operand;
  if (!f->name) return NULL;
  if (is_op(cur(p), "(") && parse_call_args(p, f)) return NULL;
  return f;
}

static jx *parse_filter_expr(P *p, jx *e) {
  for (;;) {
    tok *t = cur(p);
    if (is_op(t, "|")) {
      p->pos++;
      e = parse_filter(p, e, t->line);
      if (!e) return NULL;
    } else if (is_name(t, "is")) {
      p->pos++;
      jx *x = newx(p, JX_TEST, t->line);
      if (!x) return NULL;
      x->a = e;
      if (is_name(cur(p), "not")) {
        x->negate = true;
        p->pos++;
      }
      if (cur(p)->t != T_NAME) {
        unexpected(p);
        return NULL;
      }
      x->name = name_of(p, cur(p));
      if (!x->name) return NULL;
      x->id = jinja_test_id(x->name);
      if (x->id < 0) {
        perr(p, t->line, PW_ETEMPLATE, "unknown test '%s'", x->name);
        return NULL;
      }
      p->pos++;
      tok *n = cur(p);
      if (is_op(n, "(")) {
        if (parse_call_args(p, x)) return NULL;
      } else if ((n->t == T_NAME || n->t == T_STR || n->t == T_INT || n->t == T_FLOAT || is_op(n, "[") ||
                  is_op(n, "{")) &&
                 !is_name(n, "else") && !is_name(n, "or") && !is_name(n, "and") && !is_name(n, "is") &&
                 !is_name(n, "if")) {
        jx *arg = parse_primary(p);
        if (!arg) return NULL;
        arg = parse_postfix(p, arg);
        if (!arg) return NULL;
        x->args = arena_alloc(p->arena, sizeof(jx *));
        x->kw = arena_alloc(p->arena, sizeof(char *));
        if (!x->args || !x->kw) {
          nomem(p);
          return NULL;
        }
        x->args[0] = arg;
        x->nargs = 1;
      }
      e = x;
    } else {
      return e;
    }
  }
}

static jx *parse_subscript(P *p, jx *obj, int line) {
  /* after '[' */
  jx *parts[3] = {0};
  int ncolon = 0;
  bool any = false;
  for (;;) {
    if (is_op(cur(p), ":")) {
      if (ncolon == 2) {
        unexpected(p);
        return NULL;
      }
      ncolon++;
      p->pos++;
      continue;
    }
    if (is_op(cur(p), "]")) break;
    if (parts[ncolon]) {
      unexpected(p);
      return NULL;
    }
    parts[ncolon] = parse_expr(p, true);
    if (!parts[ncolon]) return NULL;
    any = true;
  }
  p->pos++;
  if (ncolon == 0) {
    if (!any) {
      perr(p, line, PW_ETEMPLATE, "empty subscript");
      return NULL;
    }
    jx *e = newx(p, JX_ITEM, line);
    if (!e) return NULL;
    e->a = obj;
    e->b = parts[0];
    return e;
  }
  jx *e = newx(p, JX_SLICE, line);
  if (!e) return NULL;
  e->a = obj;
  e->b = parts[0];
  e->c = parts[1];
  e->d = parts[2];
  return e;
}

static jx *parse_postfix(P *p, jx *e) {
  for (;;) {
    tok *t = cur(p);
    if (is_op(t, ".")) {
      p->pos++;
      tok *n = cur(p);
      if (n->t == T_NAME) {
        jx *a = newx(p, JX_ATTR, t->line);
        if (!a) return NULL;
        a->a = e;
        a->name = name_of(p, n);
        if (!a->name) return NULL;
        p->pos++;
        e = a;
      } else if (n->t == T_INT) {
        jx *k = newx(p, JX_CONST, n->line);
        jx *a = newx(p, JX_ITEM, t->line);
        if (!k || !a) return NULL;
        k->val.t = JV_INT;
        k->val.u.i = n->i;
        a->a = e;
        a->b = k;
        p->pos++;
        e = a;
      } else {
        unexpected(p);
        return NULL;
      }
    } else if (is_op(t, "[")) {
      p->pos++;
      e = parse_subscript(p, e, t->line);
      if (!e) return NULL;
    } else if (is_op(t, "(")) {
      jx *c = newx(p, JX_CALL, t->line);
      if (!c) return NULL;
      c->a = e;
      if (parse_call_args(p, c)) return NULL;
      e = c;
    } else {
      return e;
    }
  }
}

static jx *parse_seq(P *p, int kind, const char *close, int line, jx *first) {
  plist l = {0};
  jx *e = newx(p, kind, line);
  if (!e) goto fail;
  if (first && pl_push(p, &l, first, NULL)) goto fail;
  while (!is_op(cur(p), close)) {
    jx *a = parse_expr(p, true);
    if (!a || pl_push(p, &l, a, NULL)) goto fail;
    if (is_op(cur(p), ",")) {
      p->pos++;
    } else if (!is_op(cur(p), close)) {
      unexpected(p);
      goto fail;
    }
  }
  p->pos++;
  e->nargs = l.n;
  e->args = (jx **)pl_copy(p, &l);
  if (l.n && !e->args) goto fail;
  pl_free(&l);
  return e;
fail:
  pl_free(&l);
  return NULL;
}

static jx *parse_primary(P *p) {
  if (enter(p)) return NULL;
  tok *t = cur(p);
  jx *e = NULL;
  switch (t->t) {
  case T_NAME: {
    p->pos++;
    if (is_name(t, "true") || is_name(t, "True") || is_name(t, "false") || is_name(t, "False")) {
      e = newx(p, JX_CONST, t->line);
      if (e) {
        e->val.t = JV_BOOL;
        e->val.u.b = t->s[0] == 't' || t->s[0] == 'T';
      }
    } else if (is_name(t, "none") || is_name(t, "None")) {
      e = newx(p, JX_CONST, t->line);
      if (e) e->val.t = JV_NONE;
    } else {
      e = newx(p, JX_NAME, t->line);
      if (e && !(e->name = name_of(p, t))) e = NULL;
    }
    break;
  }
  case T_STR: {
    /* Adjacent literals concatenate, as in Python. */
    size_t total = 0, k = p->pos;
    while (p->toks[k].t == T_STR) total += p->toks[k++].len;
    char *buf = malloc(total + 1);
    if (!buf) {
      nomem(p);
      break;
    }
    size_t o = 0;
    while (cur(p)->t == T_STR) {
      memcpy(buf + o, cur(p)->s, cur(p)->len);
      o += cur(p)->len;
      p->pos++;
    }
    e = const_str(p, buf, total, t->line);
    free(buf);
    break;
  }
  case T_INT:
  case T_FLOAT:
    p->pos++;
    e = newx(p, JX_CONST, t->line);
    if (e) {
      if (t->t == T_INT) {
        e->val.t = JV_INT;
        e->val.u.i = t->i;
      } else {
        e->val.t = JV_FLOAT;
        e->val.u.f = t->f;
      }
    }
    break;
  case T_OP:
    if (is_op(t, "(")) {
      p->pos++;
      if (is_op(cur(p), ")")) {
        p->pos++;
        e = newx(p, JX_TUPLE, t->line);
        break;
      }
      jx *inner = parse_expr(p, true);
      if (!inner) break;
      if (is_op(cur(p), ",")) {
        p->pos++;
        e = parse_seq(p, JX_TUPLE, ")", t->line, inner);
      } else if (expect_op(p, ")") == 0) {
        e = inner;
      }
    } else if (is_op(t, "[")) {
      p->pos++;
      e = parse_seq(p, JX_LIST, "]", t->line, NULL);
    } else if (is_op(t, "{")) {
      p->pos++;
      plist ks = {0}, vs = {0};
      bool ok = true;
      while (ok && !is_op(cur(p), "}")) {
        jx *k = parse_expr(p, true);
        if (!k || expect_op(p, ":")) {
          ok = false;
          break;
        }
        jx *v = parse_expr(p, true);
        if (!v || pl_push(p, &ks, k, NULL) || pl_push(p, &vs, v, NULL)) {
          ok = false;
          break;
        }
        if (is_op(cur(p), ",")) {
          p->pos++;
        } else if (!is_op(cur(p), "}")) {
          unexpected(p);
          ok = false;
        }
      }
      if (ok) {
        p->pos++;
        e = newx(p, JX_DICT, t->line);
        if (e) {
          e->nargs = ks.n;
          e->args = (jx **)pl_copy(p, &ks);
          e->args2 = (jx **)pl_copy(p, &vs);
          if (ks.n && (!e->args || !e->args2)) e = NULL;
        }
      }
      pl_free(&ks);
      pl_free(&vs);
    } else {
      unexpected(p);
    }
    break;
  default: unexpected(p); break;
  }
  p->depth--;
  return e;
}

static jx *parse_unary(P *p, bool with_filter) {
  if (enter(p)) return NULL;
  tok *t = cur(p);
  jx *e;
  if (is_op(t, "-") || is_op(t, "+")) {
    p->pos++;
    jx *inner = parse_unary(p, false);
    if (!inner) return NULL;
    e = newx(p, t->s[0] == '-' ? JX_NEG : JX_POS, t->line);
    if (!e) return NULL;
    e->a = inner;
  } else {
    e = parse_primary(p);
  }
  if (e) e = parse_postfix(p, e);
  if (e && with_filter) e = parse_filter_expr(p, e);
  p->depth--;
  return e;
}

static jx *binx(P *p, int op, jx *a, jx *b, int line) {
  jx *e = newx(p, JX_BIN, line);
  if (!e) return NULL;
  e->op = (uint8_t)op;
  e->a = a;
  e->b = b;
  return e;
}

static jx *parse_pow(P *p) {
  jx *a = parse_unary(p, true);
  while (a && is_op(cur(p), "**")) {
    int line = cur(p)->line;
    p->pos++;
    jx *b = parse_unary(p, true);
    a = b ? binx(p, JOP_POW, a, b, line) : NULL;
  }
  return a;
}

static jx *parse_math2(P *p) {
  jx *a = parse_pow(p);
  for (;;) {
    if (!a) return NULL;
    tok *t = cur(p);
    int op;
    if (is_op(t, "*"))
      op = JOP_MUL;
    else if (is_op(t, "/"))
      op = JOP_DIV;
    else if (is_op(t, "//"))
      op = JOP_FLOORDIV;
    else if (is_op(t, "%"))
      op = JOP_MOD;
    else
      return a;
    p->pos++;
    jx *b = parse_pow(p);
    a = b ? binx(p, op, a, b, t->line) : NULL;
  }
}

static jx *parse_concat(P *p) {
  jx *a = parse_math2(p);
  while (a && is_op(cur(p), "~")) {
    int line = cur(p)->line;
    p->pos++;
    jx *b = parse_math2(p);
    a = b ? binx(p, JOP_CONCAT, a, b, line) : NULL;
  }
  return a;
}

static jx *parse_math1(P *p) {
  jx *a = parse_concat(p);
  for (;;) {
    if (!a) return NULL;
    tok *t = cur(p);
    int op;
    if (is_op(t, "+"))
      op = JOP_ADD;
    else if (is_op(t, "-"))
      op = JOP_SUB;
    else
      return a;
    p->pos++;
    jx *b = parse_concat(p);
    a = b ? binx(p, op, a, b, t->line) : NULL;
  }
}

static jx *parse_compare(P *p) {
  jx *a = parse_math1(p);
  jx *result = NULL;
  for (;;) {
    if (!a) return NULL;
    tok *t = cur(p);
    int op = -1;
    if (is_op(t, "=="))
      op = JOP_EQ;
    else if (is_op(t, "!="))
      op = JOP_NE;
    else if (is_op(t, "<"))
      op = JOP_LT;
    else if (is_op(t, "<="))
      op = JOP_LE;
    else if (is_op(t, ">"))
      op = JOP_GT;
    else if (is_op(t, ">="))
      op = JOP_GE;
    else if (is_name(t, "in"))
      op = JOP_IN;
    else if (is_name(t, "not") && is_name(peekn(p, 1), "in"))
      op = JOP_NOTIN;
    if (op < 0) return result ? result : a;
    p->pos += op == JOP_NOTIN ? 2 : 1;
    jx *b = parse_math1(p);
    if (!b) return NULL;
    jx *cmp = binx(p, op, a, b, t->line);
    if (!cmp) return NULL;
    if (result) {
      /* a < b < c means a < b and b < c */
      jx *both = newx(p, JX_AND, t->line);
      if (!both) return NULL;
      both->a = result;
      both->b = cmp;
      result = both;
    } else {
      result = cmp;
    }
    a = b;
  }
}

static jx *parse_not(P *p) {
  if (is_name(cur(p), "not")) {
    int line = cur(p)->line;
    p->pos++;
    if (enter(p)) return NULL;
    jx *inner = parse_not(p);
    p->depth--;
    if (!inner) return NULL;
    jx *e = newx(p, JX_NOT, line);
    if (e) e->a = inner;
    return e;
  }
  return parse_compare(p);
}

static jx *parse_and(P *p) {
  jx *a = parse_not(p);
  while (a && is_name(cur(p), "and")) {
    int line = cur(p)->line;
    p->pos++;
    jx *b = parse_not(p);
    if (!b) return NULL;
    jx *e = newx(p, JX_AND, line);
    if (!e) return NULL;
    e->a = a;
    e->b = b;
    a = e;
  }
  return a;
}

static jx *parse_or(P *p) {
  jx *a = parse_and(p);
  while (a && is_name(cur(p), "or")) {
    int line = cur(p)->line;
    p->pos++;
    jx *b = parse_and(p);
    if (!b) return NULL;
    jx *e = newx(p, JX_OR, line);
    if (!e) return NULL;
    e->a = a;
    e->b = b;
    a = e;
  }
  return a;
}

static jx *parse_expr(P *p, bool with_cond) {
  if (enter(p)) return NULL;
  jx *a = parse_or(p);
  while (with_cond && a && is_name(cur(p), "if")) {
    int line = cur(p)->line;
    p->pos++;
    jx *c = parse_or(p);
    if (!c) {
      a = NULL;
      break;
    }
    jx *alt = NULL;
    if (is_name(cur(p), "else")) {
      p->pos++;
      alt = parse_expr(p, true);
      if (!alt) {
        a = NULL;
        break;
      }
    }
    jx *e = newx(p, JX_COND, line);
    if (!e) {
      a = NULL;
      break;
    }
    e->a = c;
    e->b = a;
    e->c = alt;
    a = e;
  }
  p->depth--;
  return a;
}

/* An expression that may be an unparenthesized tuple: `a, b`. */
static jx *parse_tuple_expr(P *p) {
  int line = cur(p)->line;
  jx *a = parse_expr(p, true);
  if (!a || !is_op(cur(p), ",")) return a;
  plist l = {0};
  if (pl_push(p, &l, a, NULL)) goto fail;
  while (is_op(cur(p), ",")) {
    p->pos++;
    if (cur(p)->t == T_VEND || cur(p)->t == T_BEND) break;
    jx *b = parse_expr(p, true);
    if (!b || pl_push(p, &l, b, NULL)) goto fail;
  }
  jx *e = newx(p, JX_TUPLE, line);
  if (!e) goto fail;
  e->nargs = l.n;
  e->args = (jx **)pl_copy(p, &l);
  if (!e->args) goto fail;
  pl_free(&l);
  return e;
fail:
  pl_free(&l);
  return NULL;
}

/* ---- statements ---- */
static js *news(P *p, int kind, int line) {
  js *s = arena_alloc(p->arena, sizeof(js));
  if (!s) {
    nomem(p);
    return NULL;
  }
  s->kind = (uint8_t)kind;
  s->line = line;
  return s;
}

/* Parses statements until a block tag whose name is in ends (NULL-terminated
 * list); on return the parser is past that name and *which is its index.
 * With ends == NULL, parses to the end of the template. */
static int parse_body(P *p, jbody *out, const char *const *ends, int *which);

static int parse_block_until(P *p, jbody *out, const char *const *ends, int *which) {
  if (enter(p)) return -1;
  int rc = parse_body(p, out, ends, which);
  p->depth--;
  return rc;
}

/* `a` or `a, b` or `(a, b)` as for/set targets. */
static int parse_targets(P *p, js *s) {
  plist l = {0};
  bool paren = false;
  if (is_op(cur(p), "(")) {
    paren = true;
    p->pos++;
  }
  for (;;) {
    if (cur(p)->t != T_NAME) {
      unexpected(p);
      goto fail;
    }
    char *nm = name_of(p, cur(p));
    if (!nm || pl_push(p, &l, nm, NULL)) goto fail;
    p->pos++;
    if (!is_op(cur(p), ",")) break;
    p->pos++;
    if (paren && is_op(cur(p), ")")) break;
  }
  if (paren && expect_op(p, ")")) goto fail;
  s->nnames = l.n;
  s->names = (const char **)pl_copy(p, &l);
  if (!s->names) goto fail;
  pl_free(&l);
  return 0;
fail:
  pl_free(&l);
  return -1;
}

static js *parse_stmt(P *p) {
  tok *t = cur(p);
  int line = t->line;
  if (t->t != T_NAME) {
    unexpected(p);
    return NULL;
  }
  p->pos++;
  js *s = NULL;
  int which = 0;
  if (is_name(t, "if")) {
    static const char *const ends[] = {"elif", "else", "endif", NULL};
    s = news(p, JS_IF, line);
    js *tail = s;
    if (!s) return NULL;
    for (;;) {
      tail->expr = parse_tuple_expr(p);
      if (!tail->expr || expect_end(p)) return NULL;
      if (parse_block_until(p, &tail->body, ends, &which)) return NULL;
      if (which == 0) {
        /* elif: a nested if in the else branch, built iteratively */
        js *n = news(p, JS_IF, cur(p)->line);
        if (!n) return NULL;
        tail->alt.v = arena_alloc(p->arena, sizeof(js *));
        if (!tail->alt.v) {
          nomem(p);
          return NULL;
        }
        tail->alt.v[0] = n;
        tail->alt.n = 1;
        tail = n;
        continue;
      }
      if (which == 1) {
        static const char *const e2[] = {"endif", NULL};
        if (expect_end(p) || parse_block_until(p, &tail->alt, e2, &which)) return NULL;
      }
      break;
    }
  } else if (is_name(t, "for")) {
    s = news(p, JS_FOR, line);
    if (!s || parse_targets(p, s)) return NULL;
    if (!is_name(cur(p), "in")) {
      perr(p, cur(p)->line, PW_ETEMPLATE, "expected 'in' in for loop");
      return NULL;
    }
    p->pos++;
    s->expr = parse_expr(p, false);
    if (!s->expr) return NULL;
    if (is_name(cur(p), "if")) {
      p->pos++;
      s->cond = parse_expr(p, true);
      if (!s->cond) return NULL;
    }
    if (is_name(cur(p), "recursive")) {
      perr(p, line, PW_ETEMPLATE, "recursive loops are not supported");
      return NULL;
    }
    if (expect_end(p)) return NULL;
    static const char *const ends[] = {"else", "endfor", NULL};
    p->loop_depth++;
    int rc = parse_block_until(p, &s->body, ends, &which);
    p->loop_depth--;
    if (rc) return NULL;
    if (which == 0) {
      static const char *const e2[] = {"endfor", NULL};
      if (expect_end(p) || parse_block_until(p, &s->alt, e2, &which)) return NULL;
    }
  } else if (is_name(t, "set")) {
    s = news(p, JS_SET, line);
    if (!s) return NULL;
    if (cur(p)->t == T_NAME && is_op(peekn(p, 1), ".") && peekn(p, 2)->t == T_NAME) {
      s->name = name_of(p, cur(p));
      s->attr = name_of(p, peekn(p, 2));
      if (!s->name || !s->attr) return NULL;
      p->pos += 3;
    } else {
      if (parse_targets(p, s)) return NULL;
      s->name = s->names[0];
    }
    if (is_op(cur(p), "=")) {
      p->pos++;
      s->expr = parse_tuple_expr(p);
      if (!s->expr) return NULL;
    } else {
      if (s->attr || s->nnames != 1) {
        unexpected(p);
        return NULL;
      }
      s->kind = JS_SETBLOCK;
      jx *chain = newx(p, JX_BLOCKVAL, line);
      if (!chain) return NULL;
      while (is_op(cur(p), "|")) {
        p->pos++;
        chain = parse_filter(p, chain, line);
        if (!chain) return NULL;
      }
      s->expr = chain;
      static const char *const ends[] = {"endset", NULL};
      if (expect_end(p) || parse_block_until(p, &s->body, ends, &which)) return NULL;
    }
  } else if (is_name(t, "macro")) {
    s = news(p, JS_MACRO, line);
    if (!s) return NULL;
    if (cur(p)->t != T_NAME) {
      unexpected(p);
      return NULL;
    }
    s->name = name_of(p, cur(p));
    if (!s->name) return NULL;
    p->pos++;
    if (expect_op(p, "(")) return NULL;
    plist names = {0}, defs = {0};
    bool ok = true;
    while (ok && !is_op(cur(p), ")")) {
      if (cur(p)->t != T_NAME) {
        unexpected(p);
        ok = false;
        break;
      }
      char *nm = name_of(p, cur(p));
      p->pos++;
      jx *d = NULL;
      if (is_op(cur(p), "=")) {
        p->pos++;
        d = parse_expr(p, true);
        if (!d) ok = false;
      }
      if (!ok || !nm || pl_push(p, &names, nm, NULL) || pl_push(p, &defs, d, NULL)) {
        ok = false;
        break;
      }
      if (is_op(cur(p), ","))
        p->pos++;
      else if (!is_op(cur(p), ")")) {
        unexpected(p);
        ok = false;
      }
    }
    if (ok) {
      p->pos++;
      s->nnames = names.n;
      s->names = (const char **)pl_copy(p, &names);
      s->defaults = (jx **)pl_copy(p, &defs);
      if (names.n && (!s->names || !s->defaults)) ok = false;
    }
    pl_free(&names);
    pl_free(&defs);
    if (!ok) return NULL;
    static const char *const ends[] = {"endmacro", NULL};
    int saved_loop = p->loop_depth;
    p->loop_depth = 0;
    int rc = expect_end(p) ? -1 : parse_block_until(p, &s->body, ends, &which);
    p->loop_depth = saved_loop;
    if (rc) return NULL;
    if (cur(p)->t == T_NAME) p->pos++; /* {% endmacro name %} */
  } else if (is_name(t, "break") || is_name(t, "continue")) {
    if (p->loop_depth == 0) {
      perr(p, line, PW_ETEMPLATE, "'%s' outside of a loop", t->s[0] == 'b' ? "break" : "continue");
      return NULL;
    }
    s = news(p, t->s[0] == 'b' ? JS_BREAK : JS_CONTINUE, line);
  } else if (is_name(t, "filter")) {
    s = news(p, JS_FILTER, line);
    if (!s) return NULL;
    jx *chain = newx(p, JX_BLOCKVAL, line);
    if (!chain) return NULL;
    chain = parse_filter(p, chain, line);
    while (chain && is_op(cur(p), "|")) {
      p->pos++;
      chain = parse_filter(p, chain, line);
    }
    if (!chain) return NULL;
    s->expr = chain;
    static const char *const ends[] = {"endfilter", NULL};
    if (expect_end(p) || parse_block_until(p, &s->body, ends, &which)) return NULL;
  } else if (is_name(t, "with")) {
    s = news(p, JS_WITH, line);
    if (!s) return NULL;
    plist names = {0}, vals = {0};
    bool ok = true;
    while (cur(p)->t == T_NAME) {
      char *nm = name_of(p, cur(p));
      p->pos++;
      jx *v = NULL;
      if (!nm || expect_op(p, "=") || !(v = parse_expr(p, true)) || pl_push(p, &names, nm, NULL) ||
          pl_push(p, &vals, v, NULL)) {
        ok = false;
        break;
      }
      if (!is_op(cur(p), ",")) break;
      p->pos++;
    }
    if (ok) {
      s->nnames = names.n;
      s->names = (const char **)pl_copy(p, &names);
      s->defaults = (jx **)pl_copy(p, &vals);
      if (names.n && (!s->names || !s->defaults)) ok = false;
    }
    pl_free(&names);
    pl_free(&vals);
    if (!ok) return NULL;
    static const char *const ends[] = {"endwith", NULL};
    if (expect_end(p) || parse_block_until(p, &s->body, ends, &which)) return NULL;
  } else if (is_name(t, "generation")) {
    s = news(p, JS_BLOCK, line);
    static const char *const ends[] = {"endgeneration", NULL};
    if (!s || expect_end(p) || parse_block_until(p, &s->body, ends, &which)) return NULL;
  } else if (is_name(t, "include") || is_name(t, "import") || is_name(t, "extends") || is_name(t, "from") ||
             is_name(t, "block") || is_name(t, "call")) {
    perr(p, line, PW_ETEMPLATE, "'%.*s' is not supported", (int)t->len, t->s);
    return NULL;
  } else {
    perr(p, line, PW_ETEMPLATE, "unknown or unexpected tag '%.*s'", (int)(t->len > 40 ? 40 : t->len), t->s);
    return NULL;
  }
  if (!s || expect_end(p)) return NULL;
  return s;
}

static int parse_body(P *p, jbody *out, const char *const *ends, int *which) {
  plist l = {0};
  /* the line of the tag that opened this block (its '%}') */
  int start_line = p->pos > 0 ? p->toks[p->pos - 1].line : cur(p)->line;
  for (;;) {
    tok *t = cur(p);
    js *s = NULL;
    if (t->t == T_EOF) {
      if (ends) {
        int last = 0;
        while (ends[last + 1]) last++;
        perr(p, t->line, PW_ETEMPLATE, "unexpected end of template, expected '%s' (block opened on line %d)",
             ends[last], start_line);
        goto fail;
      }
      break;
    }
    if (t->t == T_TEXT) {
      s = news(p, JS_TEXT, t->line);
      if (!s) goto fail;
      s->text = t->s;
      s->len = t->len;
      p->pos++;
    } else if (t->t == T_VBEGIN) {
      p->pos++;
      s = news(p, JS_OUT, t->line);
      if (!s) goto fail;
      s->expr = parse_tuple_expr(p);
      if (!s->expr) goto fail;
      if (cur(p)->t != T_VEND) {
        char b[64];
        perr(p, cur(p)->line, PW_ETEMPLATE, "expected '}}', got %s", tok_desc(cur(p), b, sizeof b));
        goto fail;
      }
      p->pos++;
    } else if (t->t == T_BBEGIN) {
      p->pos++;
      tok *n = cur(p);
      if (ends && n->t == T_NAME) {
        bool hit = false;
        for (int i = 0; ends[i]; i++) {
          if (is_name(n, ends[i])) {
            *which = i;
            hit = true;
            break;
          }
        }
        if (hit) {
          p->pos++;
          break;
        }
      }
      s = parse_stmt(p);
      if (!s) goto fail;
    } else {
      unexpected(p);
      goto fail;
    }
    if (pl_push(p, &l, s, NULL)) goto fail;
  }
  out->n = l.n;
  out->v = (js **)pl_copy(p, &l);
  if (l.n && !out->v) goto fail;
  pl_free(&l);
  return 0;
fail:
  pl_free(&l);
  return -1;
}

int jinja_parse(const char *src, size_t len, int max_depth, jinja_template **out, char *err) {
  *out = NULL;
  if (!src && len) return pw_seterr(err, PW_EINVAL, "template: NULL source");
  struct jarena_chunk *arena = NULL;
  jinja_template *t = arena_alloc(&arena, sizeof(*t));
  char *norm = t ? arena_alloc(&arena, len + 1) : NULL;
  if (!norm) {
    arena_free(arena);
    return pw_seterr(err, PW_ENOMEM, "template: out of memory");
  }
  /* \r\n and \r become \n; one trailing newline is dropped (Jinja2's
   * keep_trailing_newline=False). */
  size_t k = 0;
  for (size_t i = 0; i < len; i++) {
    if (src[i] == '\r') {
      norm[k++] = '\n';
      if (i + 1 < len && src[i + 1] == '\n') i++;
    } else {
      norm[k++] = src[i];
    }
  }
  if (k > 0 && norm[k - 1] == '\n') k--;
  norm[k] = 0;
  P p = {.arena = &arena, .src = norm, .n = k, .max_depth = max_depth > 0 ? max_depth : JINJA_DEFAULT_MAX_DEPTH,
         .err = err};
  int which = 0;
  if (lex(&p) == 0) parse_body(&p, &t->body, NULL, &which);
  free(p.toks);
  if (p.status) {
    arena_free(arena);
    return p.status;
  }
  t->arena = arena;
  *out = t;
  return 0;
}

void jinja_destroy(jinja_template *t) {
  if (!t) return;
  arena_free(t->arena); /* t itself lives in the arena */
}
