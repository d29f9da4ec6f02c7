/* jinja_lib.h - internals of the Jinja renderer shared by the evaluator
 * (jinja.c) and the builtin library of filters, tests, methods, operators
 * and globals (jinja_lib.c). Not a public interface: other modules use
 * jinja.h.
 *
 * Ownership convention: a function that produces a jv into `out` gives the
 * caller one reference (release with jv_unref); jv arguments are borrowed
 * unless the comment says "takes". On error a function returns -1 after
 * recording the error in the render state (status + message, first error
 * wins).
 */
#ifndef PW_CHAT_JINJA_LIB_H
#define PW_CHAT_JINJA_LIB_H

#include "chat/jinja.h"
#include "chat/jinja_int.h"

typedef struct jlist {
  jobj h;
  jv *v; /* n items, cap allocated */
  size_t n, cap;
  bool tuple;
} jlist;

typedef struct jkv {
  jv k, v;
} jkv;

/* A dict (JV_DICT) or a namespace (JV_NS): entries in insertion order,
 * looked up linearly (the dicts of chat messages are small). */
typedef struct jdict {
  jobj h;
  jkv *e;
  size_t n, cap;
} jdict;

enum { JFN_GLOBAL, JFN_METHOD, JFN_MACRO };

typedef struct jfunc {
  jobj h;
  uint8_t kind;
  int id;           /* JFN_GLOBAL: global id */
  jv self;          /* JFN_METHOD: the bound object (owned) */
  const char *name; /* method or macro name (template arena or static) */
  const js *macro;  /* JFN_MACRO: its definition (template arena) */
} jfunc;

typedef struct jloop {
  jobj h;
  jv items;      /* JV_LIST being iterated (owned) */
  size_t index0; /* current position */
  int depth0;    /* nesting of loops, 0 = outermost */
} jloop;

/* Growable byte buffer, NUL-terminated when p != NULL, bounded by limit. */
typedef struct jbuf {
  char *p;
  size_t n, cap, limit;
} jbuf;

typedef struct jvar {
  const char *name; /* template arena or static */
  jv val;           /* owned */
} jvar;

/* A scope: the template top level, a loop iteration, a macro call, a with
 * block. Lives on the C stack; variables spill to the heap past inl. */
typedef struct jframe {
  struct jframe *parent;
  jvar *v;
  int n, cap;
  jvar inl[6];
} jframe;

/* Evaluated call arguments: positionals first (npos), then keywords. */
typedef struct jargs {
  jv *v;
  const char **kw; /* per arg keyword or NULL; NULL array when none */
  int n, npos, cap;
  jv inl[6];
} jargs;

/* State of one render. */
typedef struct R {
  jobj heap; /* sentinel of the list of live objects */
  size_t mem, max_memory;
  uint64_t iters, max_iterations;
  size_t max_output;
  int depth, max_rdepth; /* evaluation recursion */
  int max_depth;         /* macro recursion, value nesting */
  int macro_depth, loop_depth;
  int64_t now;
  jbuf *out;
  jframe *frame, *root;
  jdict *globals; /* the render's variables */
  jv blockval;    /* body text of the {% filter %} / {% set %} block being finished */
  int line;       /* line of the statement being run */
  int status;
  char *err;
} R;

#define JV_OBJ(p) ((jv){.t = (p)->h.type, .u.o = &(p)->h})
#define JV_STRP(v) ((jstr *)(v).u.o)
#define JV_LISTP(v) ((jlist *)(v).u.o)
#define JV_DICTP(v) ((jdict *)(v).u.o)
#define JV_UNDEF_V ((jv){.t = JV_UNDEF, .u.hint = NULL})
#define JV_NONE_V ((jv){.t = JV_NONE})

static inline jv jv_undef(const char *hint) {
  jv v = {.t = JV_UNDEF};
  v.u.hint = hint;
  return v;
}
static inline jv jv_bool(bool b) {
  jv v = {.t = JV_BOOL};
  v.u.b = b;
  return v;
}
static inline jv jv_int(int64_t i) {
  jv v = {.t = JV_INT};
  v.u.i = i;
  return v;
}
static inline jv jv_float(double f) {
  jv v = {.t = JV_FLOAT};
  v.u.f = f;
  return v;
}
static inline jv jv_ref(jv v) {
  if (v.t >= JV_STR && !v.u.o->immortal) v.u.o->rc++;
  return v;
}

/* jinja.c: errors, memory, values, buffers, scopes, evaluation */
int jr_err(R *r, int line, int status, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
int jr_nomem(R *r);
void *jr_alloc(R *r, size_t n);
void *jr_realloc(R *r, void *p, size_t old, size_t n);
void jr_free(R *r, void *p, size_t n);
jobj *jr_obj(R *r, size_t bytes, int type);
void jv_unref(R *r, jv v);
int jv_mkstr(R *r, const char *s, size_t n, jv *out);
jlist *jv_mklist(R *r, size_t cap);
int jlist_push(R *r, jlist *l, jv v); /* takes v, also on failure */
jdict *jv_mkdict(R *r, int type);     /* JV_DICT or JV_NS */
jv *jdict_get(const jdict *d, const char *k, size_t n);
jv *jdict_find(R *r, const jdict *d, jv key);
int jdict_set(R *r, jdict *d, jv key, jv val);        /* takes key and val */
int jdict_setc(R *r, jdict *d, const char *k, jv val); /* takes val */
int jbuf_put(R *r, jbuf *b, const char *s, size_t n);
int jbuf_putc(R *r, jbuf *b, char c);
int jbuf_puts(R *r, jbuf *b, const char *s);
int jbuf_printf(R *r, jbuf *b, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void jbuf_init(R *r, jbuf *b);
void jbuf_fini(jbuf *b);
int jbuf_take(R *r, jbuf *b, jv *out); /* frees the buffer */
int jframe_set(R *r, jframe *f, const char *name, jv v); /* takes v */
int jr_enter(R *r, int line); /* depth++ or a limit error; caller does depth-- */
int jr_tick(R *r, uint64_t n, int line); /* charges n iterations */
int jr_eval(R *r, const jx *e, jv *out);
int jr_call_value(R *r, jv fn, jargs *a, jv *out, int line);
void jargs_fini(R *r, jargs *a);
const jv *jargs_get(const jargs *a, int pos, const char *name);

/* jinja_lib.c: semantics of values */
const char *jv_typename(jv v);
bool jv_truthy(jv v);
/* 1 equal, 0 not equal, -1 error (nesting too deep). */
int jv_eq(R *r, jv a, jv b, int depth);
int jlib_str(R *r, jbuf *b, jv v);  /* str(v) appended */
int jlib_repr(R *r, jbuf *b, jv v); /* repr(v) appended */
int jlib_tostr(R *r, jv v, jv *out); /* str(v) as a string value */
int jlib_getattr(R *r, jv obj, const char *name, jv *out, int line);
int jlib_getitem(R *r, jv obj, jv key, jv *out, int line);
int jlib_slice(R *r, jv obj, jv start, jv stop, jv step, jv *out, int line);
int jlib_unary(R *r, bool neg, jv v, jv *out, int line);
int jlib_binop(R *r, int op, jv a, jv b, jv *out, int line);
int jlib_filter(R *r, int id, jv v, jargs *a, jv *out, int line);
int jlib_test(R *r, int id, jv v, jargs *a, bool *res, int line);
/* Returns 1 (nothing recorded) when self has no method of that name. */
int jlib_call_method(R *r, jv self, const char *name, jargs *a, jv *out, int line);
int jlib_call_global(R *r, int id, jargs *a, jv *out, int line);
int jlib_global(R *r, const char *name, jv *out); /* builtin global or undefined */
/* The items of a for loop as a new list (dict -> keys, str -> chars). */
int jlib_iterate(R *r, jv v, jlist **out, int line);
/* A JSON value as a template value (the variables, the from_json filter);
 * nesting is bounded by the render's depth limit. Defined in jinja.c. */
int jinja_from_json(R *r, const json_t *j, jv *out);
/* Binds loop/set targets: one name takes v, several unpack a sequence. */
int jlib_bind_targets(R *r, jframe *f, const char *const *names, int n, jv v, int line);

#endif
