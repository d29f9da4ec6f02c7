/* jinja.c - the renderer of the Jinja subset: walks the syntax tree of
 * jinja_parse.c against variables converted from JSON, with Jinja2's
 * semantics as Hugging Face configures it (see jinja.h).
 *
 * Values are reference counted (jinja_int.h); every object is also on the
 * render's heap list so that cycles are freed when the render ends. Every
 * allocation is charged to the render's memory bound; loops, filters and
 * macro calls are charged to its iteration bound; output, macro results and
 * block sets are bounded in bytes; evaluation recursion is bounded in depth.
 * A bound exceeded is a PW_ELIMIT error naming the template line.
 *
 * Not here: parsing (jinja_parse.c), the builtin filters, tests and methods
 * (jinja_lib.c), chat-specific glue (chat.c).
 */
#include "chat/jinja.h"
#include "chat/jinja_int.h"
#include "chat/jinja_lib.h"

#include "base/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- errors ---- */
int jr_err(R *r, int line, int status, const char *fmt, ...) {
  if (r->status) return -1;
  char msg[PW_ERRMAX];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  r->status = status;
  pw_seterr(r->err, status, "template line %d: %s", line > 0 ? line : r->line, msg);
  return -1;
}

int jr_nomem(R *r) { return jr_err(r, r->line, PW_ENOMEM, "out of memory"); }

/* ---- memory ---- */
void *jr_alloc(R *r, size_t n) {
  if (n > r->max_memory || r->mem > r->max_memory - n) {
    jr_err(r, r->line, PW_ELIMIT, "render needs more than %zu bytes of memory", r->max_memory);
    return NULL;
  }
  void *p = malloc(n ? n : 1);
  if (!p) {
    jr_nomem(r);
    return NULL;
  }
  r->mem += n;
  return p;
}

void *jr_realloc(R *r, void *p, size_t old, size_t n) {
  if (n > old && (n - old > r->max_memory || r->mem > r->max_memory - (n - old))) {
    jr_err(r, r->line, PW_ELIMIT, "render needs more than %zu bytes of memory", r->max_memory);
    return NULL;
  }
  void *q = realloc(p, n ? n : 1);
  if (!q) {
    jr_nomem(r);
    return NULL;
  }
  r->mem = r->mem - old + n;
  return q;
}

void jr_free(R *r, void *p, size_t n) {
  if (!p) return;
  r->mem -= n;
  free(p);
}

static void heap_link(R *r, jobj *o) {
  o->prev = &r->heap;
  o->next = r->heap.next;
  r->heap.next->prev = o;
  r->heap.next = o;
}

static void heap_unlink(jobj *o) {
  o->prev->next = o->next;
  o->next->prev = o->prev;
}

jobj *jr_obj(R *r, size_t bytes, int type) {
  jobj *o = jr_alloc(r, bytes);
  if (!o) return NULL;
  memset(o, 0, bytes);
  o->bytes = bytes;
  o->rc = 1;
  o->type = (uint8_t)type;
  heap_link(r, o);
  return o;
}

/* Frees an object whose count reached zero, and iteratively every child
 * whose count reaches zero with it (no recursion: a deeply nested value
 * must not overflow the stack). The pending objects are chained through
 * their `next` field once off the heap list. */
static void release(R *r, jobj *o) {
  heap_unlink(o);
  o->next = NULL;
  jobj *stack = o;
  while (stack) {
    o = stack;
    stack = o->next;
#define DROP(v)                                                                      \
  do {                                                                               \
    jv dv_ = (v);                                                                    \
    if (dv_.t >= JV_STR && !dv_.u.o->immortal && --dv_.u.o->rc == 0) {              \
      heap_unlink(dv_.u.o);                                                          \
      dv_.u.o->next = stack;                                                         \
      stack = dv_.u.o;                                                               \
    }                                                                                \
  } while (0)
    switch (o->type) {
    case JV_LIST: {
      jlist *l = (jlist *)o;
      for (size_t i = 0; i < l->n; i++) DROP(l->v[i]);
      jr_free(r, l->v, l->cap * sizeof(jv));
      break;
    }
    case JV_DICT:
    case JV_NS: {
      jdict *d = (jdict *)o;
      for (size_t i = 0; i < d->n; i++) {
        DROP(d->e[i].k);
        DROP(d->e[i].v);
      }
      jr_free(r, d->e, d->cap * sizeof(jkv));
      break;
    }
    case JV_FUNC: DROP(((jfunc *)o)->self); break;
    case JV_LOOP: DROP(((jloop *)o)->items); break;
    default: break;
    }
#undef DROP
    jr_free(r, o, o->bytes);
  }
}

void jv_unref(R *r, jv v) {
  if (v.t >= JV_STR && !v.u.o->immortal && --v.u.o->rc == 0) release(r, v.u.o);
}

/* Frees every object left at the end of a render, cycles included. */
static void heap_free_all(R *r) {
  jobj *o = r->heap.next;
  while (o != &r->heap) {
    jobj *n = o->next;
    switch (o->type) {
    case JV_LIST: free(((jlist *)o)->v); break;
    case JV_DICT:
    case JV_NS: free(((jdict *)o)->e); break;
    default: break;
    }
    free(o);
    o = n;
  }
  r->heap.next = r->heap.prev = &r->heap;
}

/* ---- constructors ---- */
int jv_mkstr(R *r, const char *s, size_t n, jv *out) {
  jstr *o = (jstr *)jr_obj(r, sizeof(jstr) + n + 1, JV_STR);
  if (!o) return -1;
  o->len = n;
  o->safe = false;
  if (n) memcpy(o->s, s, n);
  o->s[n] = 0;
  o->ncp = jinja_utf8_count(s, n);
  out->t = JV_STR;
  out->u.o = &o->h;
  return 0;
}

jlist *jv_mklist(R *r, size_t cap) {
  jlist *l = (jlist *)jr_obj(r, sizeof(jlist), JV_LIST);
  if (!l) return NULL;
  if (cap) {
    l->v = jr_alloc(r, cap * sizeof(jv));
    if (!l->v) {
      jv_unref(r, JV_OBJ(l));
      return NULL;
    }
    l->cap = cap;
  }
  return l;
}

int jlist_push(R *r, jlist *l, jv v) {
  if (l->n == l->cap) {
    size_t cap = l->cap ? l->cap * 2 : 4;
    jv *nv = jr_realloc(r, l->v, l->cap * sizeof(jv), cap * sizeof(jv));
    if (!nv) {
      jv_unref(r, v);
      return -1;
    }
    l->v = nv;
    l->cap = cap;
  }
  l->v[l->n++] = v;
  return 0;
}

jdict *jv_mkdict(R *r, int type) { return (jdict *)jr_obj(r, sizeof(jdict), type); }

jv *jdict_get(const jdict *d, const char *k, size_t n) {
  for (size_t i = 0; i < d->n; i++) {
    jv key = d->e[i].k;
    if (key.t == JV_STR) {
      jstr *s = JV_STRP(key);
      if (s->len == n && memcmp(s->s, k, n) == 0) return &d->e[i].v;
    }
  }
  return NULL;
}

jv *jdict_find(R *r, const jdict *d, jv key) {
  if (key.t == JV_STR) return jdict_get(d, JV_STRP(key)->s, JV_STRP(key)->len);
  for (size_t i = 0; i < d->n; i++)
    if (jv_eq(r, d->e[i].k, key, 0) == 1) return &d->e[i].v;
  return NULL;
}

static int jdict_append(R *r, jdict *d, jv key, jv val) {
  if (d->n == d->cap) {
    size_t cap = d->cap ? d->cap * 2 : 4;
    jkv *ne = jr_realloc(r, d->e, d->cap * sizeof(jkv), cap * sizeof(jkv));
    if (!ne) {
      jv_unref(r, key);
      jv_unref(r, val);
      return -1;
    }
    d->e = ne;
    d->cap = cap;
  }
  d->e[d->n].k = key;
  d->e[d->n].v = val;
  d->n++;
  return 0;
}

int jdict_set(R *r, jdict *d, jv key, jv val) {
  jv *slot = jdict_find(r, d, key);
  if (slot) {
    jv_unref(r, key);
    jv old = *slot;
    *slot = val;
    jv_unref(r, old);
    return 0;
  }
  return jdict_append(r, d, key, val);
}

int jdict_setc(R *r, jdict *d, const char *k, jv val) {
  jv key;
  if (jv_mkstr(r, k, strlen(k), &key)) {
    jv_unref(r, val);
    return -1;
  }
  return jdict_set(r, d, key, val);
}

/* ---- buffers ---- */
int jbuf_put(R *r, jbuf *b, const char *s, size_t n) {
  if (n > b->limit || b->n > b->limit - n)
    return jr_err(r, r->line, PW_ELIMIT, "output exceeds %zu bytes", b->limit);
  if (b->n + n + 1 > b->cap) {
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->n + n + 1) cap *= 2;
    char *np = realloc(b->p, cap);
    if (!np) return jr_nomem(r);
    b->p = np;
    b->cap = cap;
  }
  memcpy(b->p + b->n, s, n);
  b->n += n;
  b->p[b->n] = 0;
  return 0;
}

int jbuf_putc(R *r, jbuf *b, char c) {
  if (b->n + 2 <= b->cap && b->n < b->limit) {
    b->p[b->n++] = c;
    b->p[b->n] = 0;
    return 0;
  }
  return jbuf_put(r, b, &c, 1);
}

int jbuf_puts(R *r, jbuf *b, const char *s) { return jbuf_put(r, b, s, strlen(s)); }

/* Formats into the buffer whatever the length: a short result goes through
 * a stack buffer, a long one is measured, checked against the limit and
 * formatted in place (never cut short). */
int jbuf_printf(R *r, jbuf *b, const char *fmt, ...) {
  char tmp[128];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
  va_end(ap);
  if (n < 0) return jr_err(r, r->line, PW_ETEMPLATE, "formatting failed");
  if ((size_t)n < sizeof tmp) return jbuf_put(r, b, tmp, (size_t)n);
  /* reserve n bytes (checks the limit, grows) with the first part, then
   * format the whole over it */
  size_t at = b->n;
  if (jbuf_put(r, b, tmp, sizeof tmp - 1)) return -1;
  b->n = at;
  if ((size_t)n > b->limit || b->n > b->limit - (size_t)n)
    return jr_err(r, r->line, PW_ELIMIT, "output exceeds %zu bytes", b->limit);
  if (b->n + (size_t)n + 1 > b->cap) {
    size_t cap = b->cap;
    while (cap < b->n + (size_t)n + 1) cap *= 2;
    char *np = realloc(b->p, cap);
    if (!np) return jr_nomem(r);
    b->p = np;
    b->cap = cap;
  }
  va_start(ap, fmt);
  int m = vsnprintf(b->p + at, (size_t)n + 1, fmt, ap);
  va_end(ap);
  PW_ASSERT(m == n);
  b->n = at + (size_t)n;
  return 0;
}

void jbuf_init(R *r, jbuf *b) {
  b->p = NULL;
  b->n = b->cap = 0;
  b->limit = r->max_output;
}

void jbuf_fini(jbuf *b) {
  free(b->p);
  b->p = NULL;
  b->n = b->cap = 0;
}

/* Moves the buffer's bytes into a new string value; the buffer is freed. */
int jbuf_take(R *r, jbuf *b, jv *out) {
  int rc = jv_mkstr(r, b->p ? b->p : "", b->n, out);
  jbuf_fini(b);
  return rc;
}

/* ---- JSON to values ---- */
static int from_json(R *r, const json_t *j, jv *out, int depth);
int jinja_from_json(R *r, const json_t *j, jv *out) { return from_json(r, j, out, 0); }

static int from_json(R *r, const json_t *j, jv *out, int depth) {
  if (depth > r->max_depth * 4)
    return jr_err(r, 0, PW_ELIMIT, "variables nest deeper than %d levels", r->max_depth * 4);
  switch (json_typeof(j)) {
  case JSON_NULL: *out = JV_NONE_V; return 0;
  case JSON_TRUE: *out = jv_bool(true); return 0;
  case JSON_FALSE: *out = jv_bool(false); return 0;
  case JSON_INTEGER: *out = jv_int((int64_t)json_integer_value(j)); return 0;
  case JSON_REAL: *out = jv_float(json_real_value(j)); return 0;
  case JSON_STRING: return jv_mkstr(r, json_string_value(j), json_string_length(j), out);
  case JSON_ARRAY: {
    size_t n = json_array_size(j);
    jlist *l = jv_mklist(r, n);
    if (!l) return -1;
    for (size_t i = 0; i < n; i++) {
      jv e;
      if (from_json(r, json_array_get(j, i), &e, depth + 1) || jlist_push(r, l, e)) {
        jv_unref(r, JV_OBJ(l));
        return -1;
      }
    }
    *out = JV_OBJ(l);
    return 0;
  }
  case JSON_OBJECT: {
    jdict *d = jv_mkdict(r, JV_DICT);
    if (!d) return -1;
    const char *k;
    json_t *v;
    /* jansson keeps insertion order when iterating an object (as
     * Python dicts do), which tojson must preserve. */
    json_object_foreach((json_t *)j, k, v) {
      jv key, val;
      if (jv_mkstr(r, k, strlen(k), &key)) goto fail_obj;
      if (from_json(r, v, &val, depth + 1)) {
        jv_unref(r, key);
        goto fail_obj;
      }
      /* keys of a JSON object are unique: append without a lookup */
      if (jdict_append(r, d, key, val)) goto fail_obj;
    }
    *out = JV_OBJ(d);
    return 0;
  fail_obj:
    jv_unref(r, JV_OBJ(d));
    return -1;
  }
  }
  *out = JV_NONE_V;
  return 0;
}

/* ---- scopes ---- */
static void frame_init(jframe *f, jframe *parent) {
  f->parent = parent;
  f->n = 0;
  f->cap = (int)(sizeof f->inl / sizeof f->inl[0]);
  f->v = f->inl;
}

static void frame_fini(R *r, jframe *f) {
  for (int i = 0; i < f->n; i++) jv_unref(r, f->v[i].val);
  if (f->v != f->inl) jr_free(r, f->v, (size_t)f->cap * sizeof(jvar));
  f->n = 0;
  f->v = f->inl;
}

/* Binds name in f, taking ownership of v. */
int jframe_set(R *r, jframe *f, const char *name, jv v) {
  for (int i = 0; i < f->n; i++) {
    if (strcmp(f->v[i].name, name) == 0) {
      jv old = f->v[i].val;
      f->v[i].val = v;
      jv_unref(r, old);
      return 0;
    }
  }
  if (f->n == f->cap) {
    int cap = f->cap * 2;
    jvar *nv = jr_alloc(r, (size_t)cap * sizeof(jvar));
    if (!nv) {
      jv_unref(r, v);
      return -1;
    }
    memcpy(nv, f->v, (size_t)f->n * sizeof(jvar));
    if (f->v != f->inl) jr_free(r, f->v, (size_t)f->cap * sizeof(jvar));
    f->v = nv;
    f->cap = cap;
  }
  f->v[f->n].name = name;
  f->v[f->n].val = v;
  f->n++;
  return 0;
}

/* Borrowed pointer to the variable's value, or NULL. */
static jv *lookup(R *r, const char *name) {
  for (jframe *f = r->frame; f; f = f->parent)
    for (int i = f->n - 1; i >= 0; i--)
      if (strcmp(f->v[i].name, name) == 0) return &f->v[i].val;
  if (r->globals) return jdict_get(r->globals, name, strlen(name));
  return NULL;
}

/* ---- evaluation ---- */
static int ev(R *r, const jx *e, jv *out);
static int exec_body(R *r, const jbody *b);

enum { FLOW_BREAK = 1, FLOW_CONTINUE = 2 };

int jr_enter(R *r, int line) {
  if (++r->depth > r->max_rdepth) {
    r->depth--;
    return jr_err(r, line, PW_ELIMIT, "evaluation nests deeper than %d levels", r->max_rdepth);
  }
  return 0;
}

int jr_tick(R *r, uint64_t n, int line) {
  if (n > r->max_iterations || r->iters > r->max_iterations - n)
    return jr_err(r, line, PW_ELIMIT, "more than %llu loop iterations", (unsigned long long)r->max_iterations);
  r->iters += n;
  return 0;
}

/* Evaluates call arguments into a (fixed inline storage or heap). */
static int eval_args(R *r, const jx *e, jargs *a) {
  a->n = 0;
  a->kw = e->kw;
  a->v = a->inl;
  a->npos = 0;
  a->cap = 0;
  if (e->nargs > (int)(sizeof a->inl / sizeof a->inl[0])) {
    a->v = jr_alloc(r, (size_t)e->nargs * sizeof(jv));
    if (!a->v) {
      a->v = a->inl;
      return -1;
    }
    a->cap = e->nargs;
  }
  for (int i = 0; i < e->nargs; i++) {
    if (ev(r, e->args[i], &a->v[i])) return -1;
    a->n++;
  }
  a->npos = 0;
  while (a->npos < a->n && !(a->kw && a->kw[a->npos])) a->npos++;
  return 0;
}

void jargs_fini(R *r, jargs *a) {
  for (int i = 0; i < a->n; i++) jv_unref(r, a->v[i]);
  if (a->v != a->inl) jr_free(r, a->v, (size_t)a->cap * sizeof(jv));
  a->v = a->inl;
  a->n = 0;
}

/* Argument by position pos (when given positionally) or keyword name. */
const jv *jargs_get(const jargs *a, int pos, const char *name) {
  if (pos >= 0 && pos < a->npos) return &a->v[pos];
  if (name && a->kw)
    for (int i = a->npos; i < a->n; i++)
      if (a->kw[i] && strcmp(a->kw[i], name) == 0) return &a->v[i];
  return NULL;
}

static int call_macro(R *r, const jfunc *f, jargs *a, jv *out, int line) {
  const js *m = f->macro;
  if (a->npos > m->nnames)
    return jr_err(r, line, PW_ETEMPLATE, "macro '%s' takes not more than %d argument(s)", m->name, m->nnames);
  for (int i = a->npos; i < a->n; i++) {
    bool ok = false;
    for (int k = 0; k < m->nnames; k++) ok = ok || strcmp(m->names[k], a->kw[i]) == 0;
    if (!ok) return jr_err(r, line, PW_ETEMPLATE, "macro '%s' takes no keyword argument '%s'", m->name, a->kw[i]);
  }
  if (r->macro_depth >= r->max_depth)
    return jr_err(r, line, PW_ELIMIT, "macro calls nest deeper than %d levels", r->max_depth);
  if (jr_tick(r, 1, line)) return -1;
  jframe fr;
  frame_init(&fr, r->root);
  jframe *saved_frame = r->frame;
  jbuf *saved_out = r->out;
  jbuf buf;
  jbuf_init(r, &buf);
  int rc = 0;
  r->macro_depth++;
  r->frame = &fr;
  for (int k = 0; k < m->nnames && rc == 0; k++) {
    const jv *v = jargs_get(a, k, m->names[k]);
    jv val;
    if (v) {
      val = jv_ref(*v);
    } else if (m->defaults && m->defaults[k]) {
      if (ev(r, m->defaults[k], &val)) {
        rc = -1;
        break;
      }
    } else {
      val = jv_undef(m->names[k]);
    }
    rc = jframe_set(r, &fr, m->names[k], val);
  }
  if (rc == 0) {
    r->out = &buf;
    rc = exec_body(r, &m->body);
    r->out = saved_out;
  }
  r->frame = saved_frame;
  r->macro_depth--;
  frame_fini(r, &fr);
  if (rc < 0) {
    jbuf_fini(&buf);
    return -1;
  }
  return jbuf_take(r, &buf, out);
}

int jr_call_value(R *r, jv fn, jargs *a, jv *out, int line) {
  if (fn.t == JV_FUNC) {
    jfunc *f = (jfunc *)fn.u.o;
    switch (f->kind) {
    case JFN_GLOBAL: return jlib_call_global(r, f->id, a, out, line);
    case JFN_METHOD: {
      int rc = jlib_call_method(r, f->self, f->name, a, out, line);
      if (rc > 0) return jr_err(r, line, PW_ETEMPLATE, "'%s' object has no method '%s'", jv_typename(f->self), f->name);
      return rc;
    }
    case JFN_MACRO: return call_macro(r, f, a, out, line);
    default: break;
    }
  }
  if (fn.t == JV_UNDEF)
    return jr_err(r, line, PW_ETEMPLATE, "'%s' is undefined", fn.u.hint ? fn.u.hint : "value");
  return jr_err(r, line, PW_ETEMPLATE, "'%s' object is not callable", jv_typename(fn));
}

static int ev_call(R *r, const jx *e, jv *out) {
  jargs a;
  int rc = -1;
  jv self = JV_UNDEF_V, fn = JV_UNDEF_V;
  if (e->a->kind == JX_ATTR) {
    /* obj.method(args): call without materializing a bound method */
    if (ev(r, e->a->a, &self)) return -1;
    if (self.t == JV_UNDEF) {
      jr_err(r, e->line, PW_ETEMPLATE, "'%s' is undefined", self.u.hint ? self.u.hint : e->a->name);
      return -1;
    }
    if (eval_args(r, e, &a) == 0) {
      rc = jlib_call_method(r, self, e->a->name, &a, out, e->line);
      if (rc > 0) {
        /* not a method: an attribute holding a callable (a macro in a namespace) */
        rc = jlib_getattr(r, self, e->a->name, &fn, e->line);
        if (rc == 0) rc = jr_call_value(r, fn, &a, out, e->line);
      }
    }
  } else {
    if (ev(r, e->a, &fn)) return -1;
    if (eval_args(r, e, &a) == 0) rc = jr_call_value(r, fn, &a, out, e->line);
  }
  jargs_fini(r, &a);
  jv_unref(r, self);
  jv_unref(r, fn);
  return rc;
}

static int ev_inner(R *r, const jx *e, jv *out) {
  switch ((jx_kind)e->kind) {
  case JX_CONST: *out = jv_ref(e->val); return 0;
  case JX_NAME: {
    jv *v = lookup(r, e->name);
    if (v) {
      *out = jv_ref(*v);
      return 0;
    }
    return jlib_global(r, e->name, out);
  }
  case JX_BLOCKVAL: *out = jv_ref(r->blockval); return 0;
  case JX_ATTR: {
    jv obj;
    if (ev(r, e->a, &obj)) return -1;
    int rc = jlib_getattr(r, obj, e->name, out, e->line);
    jv_unref(r, obj);
    return rc;
  }
  case JX_ITEM: {
    jv obj, key;
    if (ev(r, e->a, &obj)) return -1;
    if (ev(r, e->b, &key)) {
      jv_unref(r, obj);
      return -1;
    }
    int rc = jlib_getitem(r, obj, key, out, e->line);
    jv_unref(r, obj);
    jv_unref(r, key);
    return rc;
  }
  case JX_SLICE: {
    jv obj, parts[3] = {JV_NONE_V, JV_NONE_V, JV_NONE_V};
    const jx *px[3] = {e->b, e->c, e->d};
    if (ev(r, e->a, &obj)) return -1;
    int rc = 0;
    for (int i = 0; i < 3 && rc == 0; i++)
      if (px[i]) rc = ev(r, px[i], &parts[i]);
    if (rc == 0) rc = jlib_slice(r, obj, parts[0], parts[1], parts[2], out, e->line);
    for (int i = 0; i < 3; i++) jv_unref(r, parts[i]);
    jv_unref(r, obj);
    return rc;
  }
  case JX_CALL: return ev_call(r, e, out);
  case JX_FILTER: {
    jv v;
    if (ev(r, e->a, &v)) return -1;
    jargs a;
    int rc = eval_args(r, e, &a);
    if (rc == 0) rc = jlib_filter(r, e->id, v, &a, out, e->line);
    jargs_fini(r, &a);
    jv_unref(r, v);
    return rc;
  }
  case JX_TEST: {
    jv v;
    if (ev(r, e->a, &v)) return -1;
    jargs a;
    int rc = eval_args(r, e, &a);
    bool res = false;
    if (rc == 0) rc = jlib_test(r, e->id, v, &a, &res, e->line);
    jargs_fini(r, &a);
    jv_unref(r, v);
    if (rc == 0) *out = jv_bool(e->negate ? !res : res);
    return rc;
  }
  case JX_NOT: {
    jv v;
    if (ev(r, e->a, &v)) return -1;
    *out = jv_bool(!jv_truthy(v));
    jv_unref(r, v);
    return 0;
  }
  case JX_NEG:
  case JX_POS: {
    jv v;
    if (ev(r, e->a, &v)) return -1;
    int rc = jlib_unary(r, e->kind == JX_NEG, v, out, e->line);
    jv_unref(r, v);
    return rc;
  }
  case JX_BIN: {
    jv a, b;
    if (ev(r, e->a, &a)) return -1;
    if (ev(r, e->b, &b)) {
      jv_unref(r, a);
      return -1;
    }
    int rc = jlib_binop(r, e->op, a, b, out, e->line);
    jv_unref(r, a);
    jv_unref(r, b);
    return rc;
  }
  case JX_AND:
  case JX_OR: {
    jv a;
    if (ev(r, e->a, &a)) return -1;
    bool t = jv_truthy(a);
    if ((e->kind == JX_AND) != t) {
      *out = a; /* a and b -> a when a is false; a or b -> a when a is true */
      return 0;
    }
    jv_unref(r, a);
    return ev(r, e->b, out);
  }
  case JX_COND: {
    jv c;
    if (ev(r, e->a, &c)) return -1;
    bool t = jv_truthy(c);
    jv_unref(r, c);
    if (t) return ev(r, e->b, out);
    if (e->c) return ev(r, e->c, out);
    *out = jv_undef(NULL);
    return 0;
  }
  case JX_LIST:
  case JX_TUPLE: {
    jlist *l = jv_mklist(r, (size_t)e->nargs);
    if (!l) return -1;
    l->tuple = e->kind == JX_TUPLE;
    for (int i = 0; i < e->nargs; i++) {
      jv v;
      if (ev(r, e->args[i], &v) || jlist_push(r, l, v)) {
        jv_unref(r, JV_OBJ(l));
        return -1;
      }
    }
    *out = JV_OBJ(l);
    return 0;
  }
  case JX_DICT: {
    jdict *d = jv_mkdict(r, JV_DICT);
    if (!d) return -1;
    for (int i = 0; i < e->nargs; i++) {
      jv k, v;
      if (ev(r, e->args[i], &k)) goto fail_dict;
      if (ev(r, e->args2[i], &v)) {
        jv_unref(r, k);
        goto fail_dict;
      }
      if (jdict_set(r, d, k, v)) goto fail_dict;
    }
    *out = JV_OBJ(d);
    return 0;
  fail_dict:
    jv_unref(r, JV_OBJ(d));
    return -1;
  }
  }
  return jr_err(r, e->line, PW_EINTERNAL, "unknown expression kind %d", e->kind);
}

static int ev(R *r, const jx *e, jv *out) {
  *out = JV_UNDEF_V;
  if (jr_enter(r, e->line)) return -1;
  int rc = ev_inner(r, e, out);
  r->depth--;
  if (rc) {
    jv_unref(r, *out);
    *out = JV_UNDEF_V;
    if (!r->status) jr_err(r, e->line, PW_EINTERNAL, "evaluation failed");
    return -1;
  }
  return 0;
}

int jr_eval(R *r, const jx *e, jv *out) { return ev(r, e, out); }

/* ---- statements ---- */
static int exec_for(R *r, const js *s) {
  jv it;
  if (ev(r, s->expr, &it)) return -1;
  jlist *items = NULL;
  int rc = jlib_iterate(r, it, &items, s->line);
  jv_unref(r, it);
  if (rc) return -1;
  jframe fr;
  /* for ... if cond: filter first, so loop.length/index count the kept items */
  if (s->cond) {
    jlist *kept = jv_mklist(r, items->n);
    if (!kept) {
      jv_unref(r, JV_OBJ(items));
      return -1;
    }
    for (size_t i = 0; i < items->n && rc == 0; i++) {
      if (jr_tick(r, 1, s->line)) {
        rc = -1;
        break;
      }
      frame_init(&fr, r->frame);
      jframe *saved = r->frame;
      r->frame = &fr;
      rc = jlib_bind_targets(r, &fr, s->names, s->nnames, items->v[i], s->line);
      jv c = JV_UNDEF_V;
      if (rc == 0) rc = ev(r, s->cond, &c);
      r->frame = saved;
      frame_fini(r, &fr);
      if (rc == 0 && jv_truthy(c)) rc = jlist_push(r, kept, jv_ref(items->v[i]));
      jv_unref(r, c);
    }
    jv_unref(r, JV_OBJ(items));
    if (rc) {
      jv_unref(r, JV_OBJ(kept));
      return -1;
    }
    items = kept;
  }
  jloop *lp = (jloop *)jr_obj(r, sizeof(jloop), JV_LOOP);
  if (!lp) {
    jv_unref(r, JV_OBJ(items));
    return -1;
  }
  lp->items = JV_OBJ(items); /* the loop object owns the list now */
  lp->depth0 = r->loop_depth;
  r->loop_depth++;
  for (size_t i = 0; i < items->n; i++) {
    if (jr_tick(r, 1, s->line)) {
      rc = -1;
      break;
    }
    lp->index0 = i;
    frame_init(&fr, r->frame);
    jframe *saved = r->frame;
    r->frame = &fr;
    rc = jframe_set(r, &fr, "loop", jv_ref(JV_OBJ(lp)));
    if (rc == 0) rc = jlib_bind_targets(r, &fr, s->names, s->nnames, items->v[i], s->line);
    if (rc == 0) rc = exec_body(r, &s->body);
    r->frame = saved;
    frame_fini(r, &fr);
    if (rc == FLOW_CONTINUE) rc = 0;
    if (rc) break;
  }
  r->loop_depth--;
  bool empty = items->n == 0;
  jv_unref(r, JV_OBJ(lp));
  if (rc < 0) return -1;
  if (empty && s->alt.n) return exec_body(r, &s->alt);
  return 0;
}

static int exec_set(R *r, const js *s) {
  jv v;
  if (ev(r, s->expr, &v)) return -1;
  if (s->attr) {
    jv *ns = lookup(r, s->name);
    if (!ns || ns->t != JV_NS) {
      jv_unref(r, v);
      return jr_err(r, s->line, PW_ETEMPLATE, "cannot assign attribute on non-namespace object '%s'", s->name);
    }
    return jdict_setc(r, (jdict *)ns->u.o, s->attr, v);
  }
  if (s->nnames == 1) return jframe_set(r, r->frame, s->name, v);
  int rc = jlib_bind_targets(r, r->frame, s->names, s->nnames, v, s->line);
  jv_unref(r, v);
  return rc;
}

/* Runs body into a fresh buffer, then applies s->expr (a filter chain over
 * JX_BLOCKVAL) to the text. */
static int exec_captured(R *r, const js *s, jv *out) {
  jbuf buf;
  jbuf_init(r, &buf);
  jbuf *saved = r->out;
  r->out = &buf;
  int rc = exec_body(r, &s->body);
  r->out = saved;
  if (rc) {
    jbuf_fini(&buf);
    return rc < 0 ? -1 : jr_err(r, s->line, PW_ETEMPLATE, "loop control outside of a loop body");
  }
  jv text;
  if (jbuf_take(r, &buf, &text)) return -1;
  jv saved_bv = r->blockval;
  r->blockval = text;
  rc = ev(r, s->expr, out);
  r->blockval = saved_bv;
  jv_unref(r, text);
  return rc;
}

static int exec_stmt(R *r, const js *s) {
  r->line = s->line;
  switch ((js_kind)s->kind) {
  case JS_TEXT: return jbuf_put(r, r->out, s->text, s->len);
  case JS_OUT: {
    jv v;
    if (ev(r, s->expr, &v)) return -1;
    int rc = jlib_str(r, r->out, v);
    jv_unref(r, v);
    return rc;
  }
  case JS_IF: {
    jv c;
    if (ev(r, s->expr, &c)) return -1;
    bool t = jv_truthy(c);
    jv_unref(r, c);
    return exec_body(r, t ? &s->body : &s->alt);
  }
  case JS_FOR: return exec_for(r, s);
  case JS_SET: return exec_set(r, s);
  case JS_SETBLOCK: {
    jv v;
    if (exec_captured(r, s, &v)) return -1;
    return jframe_set(r, r->frame, s->name, v);
  }
  case JS_FILTER: {
    jv v;
    if (exec_captured(r, s, &v)) return -1;
    int rc = jlib_str(r, r->out, v);
    jv_unref(r, v);
    return rc;
  }
  case JS_MACRO: {
    jfunc *f = (jfunc *)jr_obj(r, sizeof(jfunc), JV_FUNC);
    if (!f) return -1;
    f->kind = JFN_MACRO;
    f->macro = s;
    f->name = s->name;
    return jframe_set(r, r->frame, s->name, JV_OBJ(f));
  }
  case JS_BREAK: return FLOW_BREAK;
  case JS_CONTINUE: return FLOW_CONTINUE;
  case JS_WITH: {
    jframe fr;
    frame_init(&fr, r->frame);
    int rc = 0;
    for (int i = 0; i < s->nnames && rc == 0; i++) {
      jv v;
      rc = ev(r, s->defaults[i], &v);
      if (rc == 0) rc = jframe_set(r, &fr, s->names[i], v);
    }
    jframe *saved = r->frame;
    r->frame = &fr;
    if (rc == 0) rc = exec_body(r, &s->body);
    r->frame = saved;
    frame_fini(r, &fr);
    return rc;
  }
  case JS_BLOCK: return exec_body(r, &s->body);
  }
  return jr_err(r, s->line, PW_EINTERNAL, "unknown statement kind %d", s->kind);
}

static int exec_body(R *r, const jbody *b) {
  if (b->n == 0) return 0;
  if (jr_enter(r, b->v[0]->line)) return -1;
  int rc = 0;
  for (int i = 0; i < b->n && rc == 0; i++) rc = exec_stmt(r, b->v[i]);
  r->depth--;
  return rc;
}

int jinja_render(const jinja_template *t, const json_t *vars, const jinja_limits *lim, char **out,
                 size_t *out_len, char *err) {
  *out = NULL;
  if (out_len) *out_len = 0;
  if (!t) return pw_seterr(err, PW_EINVAL, "template: NULL template");
  if (vars && !json_is_object(vars)) return pw_seterr(err, PW_EINVAL, "template: variables must be a JSON object");
  R r;
  memset(&r, 0, sizeof r);
  r.heap.next = r.heap.prev = &r.heap;
  r.err = err;
  r.line = 1;
  r.max_output = lim && lim->max_output ? lim->max_output : JINJA_DEFAULT_MAX_OUTPUT;
  r.max_iterations = lim && lim->max_iterations ? lim->max_iterations : JINJA_DEFAULT_MAX_ITERATIONS;
  r.max_depth = lim && lim->max_depth > 0 ? lim->max_depth : JINJA_DEFAULT_MAX_DEPTH;
  r.max_memory = lim && lim->max_memory ? lim->max_memory : JINJA_DEFAULT_MAX_MEMORY;
  r.now = lim ? lim->now : 0;
  /* Every tree level costs a few C frames; macro recursion multiplies the
   * tree depth, so the total is bounded on its own (about 1 KiB of stack
   * per level at most). */
  r.max_rdepth = r.max_depth * 10;
  r.blockval = JV_UNDEF_V;
  jbuf buf;
  jbuf_init(&r, &buf);
  r.out = &buf;
  jframe root;
  frame_init(&root, NULL);
  r.root = r.frame = &root;
  int rc = 0;
  if (vars) {
    jv g;
    rc = from_json(&r, vars, &g, 0);
    if (rc == 0) r.globals = (jdict *)g.u.o;
  }
  if (rc == 0) {
    rc = exec_body(&r, &t->body);
    if (rc > 0) rc = jr_err(&r, r.line, PW_ETEMPLATE, "loop control outside of a loop");
  }
  frame_fini(&r, &root);
  if (r.globals) jv_unref(&r, JV_OBJ(r.globals));
  heap_free_all(&r);
  if (rc || r.status) {
    jbuf_fini(&buf);
    if (!r.status) return pw_seterr(err, PW_EINTERNAL, "template: render failed");
    return r.status;
  }
  if (!buf.p) {
    buf.p = malloc(1);
    if (!buf.p) return pw_seterr(err, PW_ENOMEM, "template: out of memory");
    buf.p[0] = 0;
  }
  *out = buf.p;
  if (out_len) *out_len = buf.n;
  return 0;
}
