/* jinja_int.h - internals shared by the Jinja parser (jinja_parse.c) and
 * renderer (jinja.c, jinja_lib.c): the value representation and the syntax
 * tree.
 * Not a public interface: other modules use jinja.h. */
#ifndef PW_CHAT_JINJA_INT_H
#define PW_CHAT_JINJA_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- values ------------------------------------------------------------
 * Scalars live inside jv; strings and containers are reference-counted heap
 * objects. Every object allocated during a render is also linked into the
 * render's heap list, so reference cycles (a namespace holding itself) are
 * still freed when the render ends. Constants in the syntax tree are
 * "immortal": never counted, never freed by a render, safe to share
 * between threads. */
typedef enum jv_type {
  JV_UNDEF,
  JV_NONE,
  JV_BOOL,
  JV_INT,
  JV_FLOAT,
  JV_STR,
  JV_LIST, /* also tuples (jlist.tuple) */
  JV_DICT,
  JV_NS,   /* namespace(): a jdict whose entries are attributes */
  JV_FUNC, /* builtin function, bound method or macro */
  JV_LOOP  /* the `loop` variable of a for loop */
} jv_type;

typedef struct jobj jobj;
struct jobj {
  jobj *prev, *next; /* render heap list (unused when immortal) */
  size_t bytes;      /* accounted size */
  uint32_t rc;
  uint8_t type;     /* jv_type */
  uint8_t immortal; /* 1 for syntax-tree constants */
};

typedef struct jv {
  uint8_t t; /* jv_type */
  union {
    bool b;
    int64_t i;
    double f;
    jobj *o;          /* STR, LIST, DICT, NS, FUNC, LOOP */
    const char *hint; /* UNDEF: the name that was undefined, or NULL */
  } u;
} jv;

typedef struct jstr {
  jobj h;
  size_t len; /* bytes */
  size_t ncp; /* code points (invalid UTF-8 bytes count one each) */
  bool safe;  /* a Markup string (from |safe or |escape): '+' HTML-escapes a
                 plain operand, as Jinja2's Markup.__add__ does */
  char s[];   /* len bytes + NUL */
} jstr;

/* UTF-8 helpers: index of the code point after the one at i (i < len);
 * an invalid byte counts as one code point. */
size_t jinja_utf8_next(const char *s, size_t len, size_t i);
size_t jinja_utf8_count(const char *s, size_t len);

/* ---- syntax tree ---------------------------------------------------------- */
typedef enum jx_kind {
  JX_CONST,
  JX_NAME,
  JX_ATTR,   /* a.name */
  JX_ITEM,   /* a[b] */
  JX_SLICE,  /* a[b:c:d], any of b, c, d may be NULL */
  JX_CALL,   /* a(args) */
  JX_FILTER, /* a | name(args) */
  JX_TEST,   /* a is [not] name(args) */
  JX_NOT,
  JX_NEG,
  JX_POS,
  JX_BIN, /* a op b */
  JX_AND,
  JX_OR,
  JX_COND, /* b if a else c (c may be NULL) */
  JX_LIST,
  JX_TUPLE,
  JX_DICT,    /* args = keys, args2 = values */
  JX_BLOCKVAL /* the body text of a {% filter %} block */
} jx_kind;

typedef enum jop {
  JOP_ADD,
  JOP_SUB,
  JOP_MUL,
  JOP_DIV,
  JOP_FLOORDIV,
  JOP_MOD,
  JOP_POW,
  JOP_CONCAT,
  JOP_EQ,
  JOP_NE,
  JOP_LT,
  JOP_LE,
  JOP_GT,
  JOP_GE,
  JOP_IN,
  JOP_NOTIN
} jop;

typedef struct jx jx;
struct jx {
  uint8_t kind; /* jx_kind */
  uint8_t op;   /* jop for JX_BIN */
  bool negate;  /* JX_TEST: `is not` */
  int line;
  int id;           /* JX_FILTER / JX_TEST: builtin id */
  const char *name; /* NAME, ATTR, FILTER and TEST names */
  jx *a, *b, *c, *d;
  jx **args, **args2; /* call/filter/test args, list items, dict keys/values */
  const char **kw;    /* per arg: keyword name or NULL for positional */
  int nargs;
  jv val; /* JX_CONST */
};

typedef enum js_kind {
  JS_TEXT,
  JS_OUT,
  JS_IF,
  JS_FOR,
  JS_SET,      /* name = expr, ns.attr = expr, or a, b = expr */
  JS_SETBLOCK, /* {% set name %}body{% endset %} */
  JS_MACRO,
  JS_BREAK,
  JS_CONTINUE,
  JS_FILTER, /* {% filter f %}body{% endfilter %} */
  JS_WITH,
  JS_BLOCK /* plain container: {% generation %} */
} js_kind;

typedef struct js js;
typedef struct jbody {
  js **v;
  int n;
} jbody;

struct js {
  uint8_t kind; /* js_kind */
  int line;
  const char *text; /* TEXT */
  size_t len;
  jx *expr;           /* OUT, IF condition, FOR iterable, SET value, FILTER/SETBLOCK filter chain */
  jx *cond;           /* FOR ... if cond */
  jbody body, alt;    /* IF then/else, FOR body/else; other blocks use body */
  const char **names; /* FOR targets, SET tuple targets, MACRO params, WITH names */
  jx **defaults;      /* MACRO defaults (entries may be NULL), WITH values */
  int nnames;
  const char *name; /* SET / SETBLOCK target, MACRO name */
  const char *attr; /* SET ns.attr target */
};

/* Builtin filter and test ids by name; -1 when unknown. Defined in jinja_lib.c,
 * used by the parser so unknown names fail at parse time as in Jinja2. */
int jinja_filter_id(const char *name);
int jinja_test_id(const char *name);

struct jinja_template {
  struct jarena_chunk *arena; /* owns every node, string and constant */
  jbody body;
};

#endif
