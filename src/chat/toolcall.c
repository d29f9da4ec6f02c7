/* toolcall.c - tool-call formats: detection, grammars, and the incremental
 * output parser. See toolcall.h.
 *
 * The parser keeps the whole answer and a position up to which everything
 * has been emitted. Each feed resumes there: text that cannot start a
 * marker is emitted at once; a marker that may be starting is held back
 * until the next bytes decide; an opened call is parsed again from its
 * opener on every feed until it completes (calls are bounded by
 * TC_MAX_CALL_BYTES) or fails, when its text is emitted as content. The
 * same steps run for a whole answer fed at once, so streamed and whole
 * answers agree byte for byte. */
#include "chat/toolcall.h"

#include "base/strbuf.h"

#include "base/error.h"
#include "power.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- detection ------------------------------------------------------------- */

static const char *opener_of(tc_format f) {
  switch (f) {
  case TC_HERMES:
  case TC_QWEN3_CODER: return "<tool_call>";
  case TC_LLAMA3: return "<|python_tag|>";
  case TC_MISTRAL:
  case TC_DEVSTRAL: return "[TOOL_CALLS]";
  case TC_GRANITE: return "<|tool_call|>";
  default: return NULL;
  }
}

const char *tc_format_name(tc_format f) {
  switch (f) {
  case TC_HERMES: return "hermes";
  case TC_QWEN3_CODER: return "qwen3-coder";
  case TC_LLAMA3: return "llama3";
  case TC_MISTRAL: return "mistral";
  case TC_DEVSTRAL: return "devstral";
  case TC_GRANITE: return "granite";
  case TC_HARMONY: return "harmony";
  default: return "none";
  }
}

/* The control token whose text is s, or -1. */
static int32_t control_token(const tok_vocab *v, const char *s) {
  if (!v) return -1;
  int32_t id = tok_find(v, s, strlen(s));
  return id >= 0 && (tok_attr(v, id) & TOK_ATTR_CONTROL) ? id : -1;
}

void tc_detect(const char *t, const tok_vocab *v, tc_syntax *o) {
  memset(o, 0, sizeof *o);
  o->open_token = -1;
  if (!t) t = "";
  if (strstr(t, "<|channel|>") && strstr(t, "<|message|>")) o->format = TC_HARMONY;
  else if (strstr(t, "[TOOL_CALLS]")) o->format = strstr(t, "[ARGS]") ? TC_DEVSTRAL : TC_MISTRAL;
  else if (strstr(t, "<tool_call>")) o->format = strstr(t, "<function=") && strstr(t, "<parameter=") ? TC_QWEN3_CODER : TC_HERMES;
  else if (strstr(t, "<|tool_call|>")) o->format = TC_GRANITE;
  else if (strstr(t, "<|python_tag|>") || strstr(t, "{\"name\": function name, \"parameters\"")) o->format = TC_LLAMA3;
  o->think = strstr(t, "<think>") != NULL && o->format != TC_HARMONY;
  o->reasoning_effort = strstr(t, "reasoning_effort") != NULL;
  const char *op = opener_of(o->format);
  if (op) {
    o->open_token = control_token(v, op);
    o->open_is_text = o->open_token < 0;
    o->special_markers = o->open_token >= 0;
  }
  if (o->format == TC_DEVSTRAL && control_token(v, "[ARGS]") >= 0) o->special_markers = true;
  if (o->format == TC_HARMONY && (control_token(v, "<|channel|>") >= 0 || control_token(v, "<|message|>") >= 0))
    o->special_markers = true;
}

bool tc_prompt_opens_reasoning(const char *text, size_t len) {
  while (len && (text[len - 1] == '\n' || text[len - 1] == ' ' || text[len - 1] == '\r' || text[len - 1] == '\t'))
    len--;
  return len >= 7 && memcmp(text + len - 7, "<think>", 7) == 0;
}

/* ---- grammar --------------------------------------------------------------- */

typedef pw_strbuf gtext;
#define gt_add pw_strbuf_add
#define gt_str pw_strbuf_str
#define gt_fmt pw_strbuf_fmt

/* A GBNF literal of s */
static void gt_lit(gtext *b, const char *s) { grammar_gbnf_literal(b, s, strlen(s)); }

static const json_t *tool_fn(const json_t *tool) { return json_object_get(tool, "function"); }
static const char *tool_name(const json_t *tool) { return json_string_value(json_object_get(tool_fn(tool), "name")); }

/* Property names of the parameters of a tool, in declaration order, and
 * whether each is required (for the Qwen3-Coder form). */
static bool prop_required(const json_t *params, const char *key) {
  const json_t *req = json_object_get(params, "required");
  size_t i;
  const json_t *r;
  json_array_foreach(req, i, r) if (json_is_string(r) && !strcmp(json_string_value(r), key)) return true;
  return false;
}

/* Strings that can be written raw between tags: no '<' (the closing tag
 * could not be told apart) and no control characters. */
static bool enum_all_strings(const json_t *en) {
  size_t i;
  const json_t *v;
  json_array_foreach(en, i, v) {
    if (!json_is_string(v) || json_string_length(v) == 0) return false;
    for (const char *c = json_string_value(v); *c; c++)
      if (*c == '<' || (unsigned char)*c < 0x20) return false;
  }
  return true;
}

static bool schema_is_string(const json_t *s) {
  const json_t *t = json_object_get(s, "type");
  return json_is_string(t) && !strcmp(json_string_value(t), "string") && !json_object_get(s, "enum") &&
         !json_object_get(s, "const") && !json_object_get(s, "pattern") && !json_object_get(s, "format");
}

int tc_grammar(const tc_syntax *sx, const json_t *tools, const char *only, bool parallel, bool lazy, grammar **out,
               char *bad_keyword, char *err) {
  *out = NULL;
  if (bad_keyword) bad_keyword[0] = 0;
  tc_format f = sx->format;
  if (only) parallel = false; /* a forced function is called once */
  if (f == TC_NONE || f == TC_HARMONY)
    return pw_seterr(err, PW_EUNSUPPORTED, "the %s tool-call format cannot be constrained by a grammar",
                     tc_format_name(f));
  if (f == TC_DEVSTRAL && sx->special_markers)
    return pw_seterr(err, PW_EUNSUPPORTED, "the model's [ARGS] marker is a control token a grammar cannot produce");
  size_t nt = json_array_size(tools);
  if (nt == 0 || nt > TC_MAX_TOOLS) return pw_seterr(err, PW_EINVAL, "1..%d tools are needed", TC_MAX_TOOLS);
  /* The schemas: one per tool (its parameters), or one per parameter for
   * the Qwen3-Coder form, where values are written one by one. */
  const char **docs = calloc(GRAMMAR_MAX_SCHEMAS, sizeof *docs);
  size_t *lens = calloc(GRAMMAR_MAX_SCHEMAS, sizeof *lens);
  bool *lenient = calloc(GRAMMAR_MAX_SCHEMAS, sizeof *lenient);
  int *first = calloc(nt, sizeof *first); /* first schema index of tool i */
  char *gb = NULL;
  gtext g = {0};
  int nd = 0, rc = 0, n_sel = 0;
  if (!docs || !lens || !lenient || !first) {
    rc = pw_seterr(err, PW_ENOMEM, "out of memory");
    goto out;
  }
  for (size_t i = 0; i < nt && !rc; i++) {
    const json_t *t = json_array_get(tools, i);
    const json_t *params = json_object_get(tool_fn(t), "parameters");
    /* A strict tool (OpenAI's "strict": true) asks for its schema to hold:
     * what the grammar cannot enforce is an error. Otherwise its calls
     * follow the schema as far as the grammar can (see tc_grammar). */
    const bool strict = json_is_true(json_object_get(tool_fn(t), "strict"));
    const int d0 = nd;
    first[i] = nd;
    if (only && strcmp(tool_name(t), only)) continue;
    n_sel++;
    if (f == TC_QWEN3_CODER) {
      const char *key;
      const json_t *ps;
      json_object_foreach((json_t *)json_object_get(params, "properties"), key, ps) {
        if (nd >= GRAMMAR_MAX_SCHEMAS) break;
        docs[nd] = json_dumps(ps, JSON_COMPACT | JSON_ENCODE_ANY);
        if (!docs[nd]) rc = pw_seterr(err, PW_ENOMEM, "out of memory");
        else lens[nd] = strlen(docs[nd]);
        nd++;
      }
    } else {
      if (nd >= GRAMMAR_MAX_SCHEMAS) break;
      docs[nd] = params ? json_dumps(params, JSON_COMPACT | JSON_ENCODE_ANY) : strdup("{\"type\":\"object\"}");
      if (!docs[nd]) rc = pw_seterr(err, PW_ENOMEM, "out of memory");
      else lens[nd] = strlen(docs[nd]);
      nd++;
    }
    for (int d = d0; d < nd; d++) lenient[d] = !strict;
  }
  if (rc) goto out;
  if (n_sel == 0) {
    rc = pw_seterr(err, PW_EINVAL, "no tool is named '%.64s'", only ? only : "");
    goto out;
  }
  if (nd >= GRAMMAR_MAX_SCHEMAS) {
    rc = pw_seterr(err, PW_ELIMIT, "the tools have more than %d parameter schemas", GRAMMAR_MAX_SCHEMAS);
    goto out;
  }
  rc = grammar_schemas_to_gbnf(docs, lens, lenient, nd, &gb, bad_keyword, err);
  if (rc == PW_EUNSUPPORTED) {
    /* A lenient document whose structure the compiler cannot produce
     * either (an allOf of non-objects, a $ref beside other keywords, ...)
     * takes any JSON value of its kind instead: the call stays well formed
     * and its arguments are the model's. Strict documents keep the error. */
    bool swapped = false;
    for (int d = 0; d < nd && rc == PW_EUNSUPPORTED; d++) {
      if (!lenient[d]) continue;
      char *one = NULL, e1[PW_ERRMAX];
      int r1 = grammar_schemas_to_gbnf(&docs[d], &lens[d], &lenient[d], 1, &one, NULL, e1);
      free(one);
      if (r1 != PW_EUNSUPPORTED) continue;
      char *any = strdup(f == TC_QWEN3_CODER ? "{}" : "{\"type\":\"object\"}");
      if (!any) {
        rc = pw_seterr(err, PW_ENOMEM, "out of memory");
        break;
      }
      free((void *)docs[d]);
      docs[d] = any;
      lens[d] = strlen(any);
      swapped = true;
    }
    if (swapped && rc == PW_EUNSUPPORTED) {
      if (bad_keyword) bad_keyword[0] = 0;
      rc = grammar_schemas_to_gbnf(docs, lens, lenient, nd, &gb, bad_keyword, err);
    }
  }
  if (rc < 0) goto out;

  /* tcallN: call N without the opener; tcalls: any of them. */
  const char *op = opener_of(f);
  bool bare = !lazy && !sx->open_is_text; /* the opener cannot be generated */
  gt_str(&g, "tcalls ::= ");
  int k = 0;
  for (size_t i = 0; i < nt; i++) {
    const json_t *t = json_array_get(tools, i);
    if (only && strcmp(tool_name(t), only)) continue;
    gt_fmt(&g, "%stcall%zu", k++ ? " | " : "", i);
  }
  gt_str(&g, "\n");
  for (size_t i = 0; i < nt && !g.oom; i++) {
    const json_t *t = json_array_get(tools, i);
    const char *name = tool_name(t);
    if (only && strcmp(name, only)) continue;
    char lit[TC_MAX_NAME + 128];
    gt_fmt(&g, "tcall%zu ::= ", i);
    switch (f) {
    case TC_HERMES:
      snprintf(lit, sizeof lit, "\n{\"name\": \"%s\", \"arguments\": ", name);
      gt_lit(&g, lit);
      gt_fmt(&g, " schema%d \"}\\n</tool_call>\"\n", first[i]);
      break;
    case TC_LLAMA3:
      /* lazy: after the trigger word {"name": " */
      snprintf(lit, sizeof lit, lazy ? "%s\", \"parameters\": " : "{\"name\": \"%s\", \"parameters\": ", name);
      gt_lit(&g, lit);
      gt_fmt(&g, " schema%d \"}\"\n", first[i]);
      break;
    case TC_MISTRAL:
      snprintf(lit, sizeof lit, "{\"name\": \"%s\", \"arguments\": ", name);
      gt_lit(&g, lit);
      gt_fmt(&g, " schema%d \", \\\"id\\\": \\\"\" [a-zA-Z0-9]{9} \"\\\"}\"\n", first[i]);
      break;
    case TC_GRANITE:
      snprintf(lit, sizeof lit, "{\"name\": \"%s\", \"arguments\": ", name);
      gt_lit(&g, lit);
      gt_fmt(&g, " schema%d \"}\"\n", first[i]);
      break;
    case TC_DEVSTRAL:
      snprintf(lit, sizeof lit, "%s[ARGS]", name);
      gt_lit(&g, lit);
      gt_fmt(&g, " schema%d\n", first[i]);
      break;
    case TC_QWEN3_CODER: {
      snprintf(lit, sizeof lit, "\n<function=%s>\n", name);
      gt_lit(&g, lit);
      const json_t *params = json_object_get(tool_fn(t), "parameters");
      const char *key;
      const json_t *ps;
      int j = first[i];
      json_object_foreach((json_t *)json_object_get(params, "properties"), key, ps) {
        char pl[256];
        if (snprintf(pl, sizeof pl, "<parameter=%s>\n", key) >= (int)sizeof pl) {
          g.oom = true;
          break;
        }
        gt_str(&g, " (");
        gt_lit(&g, pl);
        const json_t *en = json_object_get(ps, "enum"), *ml = json_object_get(ps, "maxLength");
        const json_t *mn = json_object_get(ps, "minLength");
        if (schema_is_string(ps) && !mn && json_is_integer(ml) && json_integer_value(ml) >= 0 &&
            json_integer_value(ml) <= GRAMMAR_MAX_REPEAT)
          gt_fmt(&g, " [^<]{0,%lld}", (long long)json_integer_value(ml)); /* raw, bounded */
        else if (schema_is_string(ps) && !mn)
          gt_str(&g, " trawtext");
        else if (json_is_array(en) && json_array_size(en) > 0 && enum_all_strings(en)) {
          /* raw enum values, as the model writes strings here */
          size_t ei;
          const json_t *ev;
          gt_str(&g, " (");
          json_array_foreach(en, ei, ev) {
            if (ei) gt_str(&g, " | ");
            gt_lit(&g, json_string_value(ev));
          }
          gt_str(&g, ")");
        } else {
          gt_fmt(&g, " schema%d", j);
        }
        gt_fmt(&g, " \"\\n</parameter>\\n\")%s", prop_required(params, key) ? "" : "?");
        j++;
      }
      gt_str(&g, " \"</function>\\n</tool_call>\"\n");
      break;
    }
    default: break;
    }
  }
  /* Raw string values end at the closing tag; they may hold '<' that does
   * not start it. */
  if (f == TC_QWEN3_CODER) gt_str(&g, "trawtext ::= ([^<] | \"<\" [^/])*\n");
  bool list = f == TC_MISTRAL || f == TC_GRANITE;
  if (list) {
    /* one opener, then a JSON list of calls */
    gt_fmt(&g, "tbody ::= \"[\" tcalls %s \"]\"\n", parallel ? "(\", \" tcalls)*" : "");
    if (lazy || bare) gt_str(&g, "root ::= tbody\n");
    else {
      gt_str(&g, "root ::= ");
      gt_lit(&g, op);
      gt_str(&g, " tbody\n");
    }
  } else if (f == TC_LLAMA3) {
    gt_str(&g, "root ::= tcalls\n");
  } else {
    /* opener + call, repeated when parallel (never for a bare first call:
     * the later openers could not be generated either) */
    const char *sep = f == TC_DEVSTRAL ? "" : "\"\\n\" ";
    gt_str(&g, "tfull ::= ");
    gt_lit(&g, op);
    gt_str(&g, " tcalls\n");
    if (lazy || bare) gt_str(&g, "root ::= tcalls");
    else gt_str(&g, "root ::= tfull");
    if (parallel && sx->open_is_text) gt_fmt(&g, " (%stfull)*", sep);
    gt_str(&g, "\n");
  }
  gt_add(&g, gb, strlen(gb));
  if (g.oom) {
    rc = pw_seterr(err, PW_ENOMEM, "out of memory");
    goto out;
  }
  if ((rc = grammar_parse(g.s, g.n, out, err)) < 0) goto out;
  if (lazy) {
    const char *word = f == TC_LLAMA3 ? "{\"name\": \"" : op;
    int32_t tok = sx->open_token;
    rc = grammar_set_lazy(*out, sx->open_is_text || f == TC_LLAMA3 ? &word : NULL,
                          sx->open_is_text || f == TC_LLAMA3 ? 1 : 0, tok >= 0 && f != TC_LLAMA3 ? &tok : NULL,
                          tok >= 0 && f != TC_LLAMA3 ? 1 : 0, err);
    if (rc < 0) {
      grammar_destroy(*out);
      *out = NULL;
    }
  }
out:
  if (docs)
    for (int i = 0; i < nd; i++) free((void *)docs[i]);
  free(docs);
  free(lens);
  free(lenient);
  free(first);
  free(gb);
  free(g.s);
  return rc;
}

/* ---- parser ---------------------------------------------------------------- */

enum { M_CONTENT, M_REASON, M_H_HEAD, M_H_BODY };
enum { HB_CONTENT, HB_REASON, HB_CALL };

struct tc_parser {
  tc_syntax sx;
  json_t *tools; /* owned reference; NULL = no calls */
  char *buf;     /* the answer so far */
  size_t n, cap;
  size_t pos;    /* everything before has been emitted */
  int mode;
  bool skip_ws;  /* drop white space at pos (after reasoning and calls) */
  bool started;  /* content other than white space was emitted */
  bool bare;     /* a call may start without its opener (at the start) */
  bool anchor_failed; /* Llama 3: the answer's start was not a call */
  int hb_kind;   /* harmony body: HB_* */
  char hname[TC_MAX_NAME + 1];
  int n_calls;
  /* a constrained call whose arguments are being streamed: its start has
   * been emitted, and s_sent bytes of its arguments */
  bool constrained;
  bool streaming;
  size_t s_ao, s_sent; /* where its arguments start (from the opener's end), bytes sent */
};

int tc_parser_create(const tc_syntax *sx, const json_t *tools, bool in_reasoning, bool bare_call, bool constrained,
                     tc_parser **out, char *err) {
  tc_parser *p = calloc(1, sizeof *p);
  if (!p) return pw_seterr(err, PW_ENOMEM, "out of memory");
  p->sx = *sx;
  p->tools = tools && json_array_size(tools) ? json_incref((json_t *)tools) : NULL;
  p->mode = sx->format == TC_HARMONY ? M_H_HEAD : in_reasoning && sx->think ? M_REASON : M_CONTENT;
  p->skip_ws = in_reasoning;
  p->bare = bare_call && p->tools;
  p->constrained = constrained && p->tools;
  *out = p;
  return 0;
}

void tc_parser_destroy(tc_parser *p) {
  if (!p) return;
  json_decref(p->tools);
  free(p->buf);
  free(p);
}

int tc_parser_calls(const tc_parser *p) { return p->n_calls; }

static bool is_ws(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

static size_t skip_ws(const char *s, size_t i, size_t n) {
  while (i < n && is_ws(s[i])) i++;
  return i;
}

/* 1: s starts with lit; 0: s is a proper prefix of lit; -1: neither. */
static int expect_lit(const char *s, size_t n, const char *lit) {
  size_t l = strlen(lit);
  if (n >= l) return memcmp(s, lit, l) == 0 ? 1 : -1;
  return memcmp(s, lit, n) == 0 ? 0 : -1;
}

static const char *find(const char *s, size_t n, const char *m) {
  size_t l = strlen(m);
  if (l > n) return NULL;
  for (size_t i = 0; i + l <= n; i++)
    if (s[i] == m[0] && memcmp(s + i, m, l) == 0) return s + i;
  return NULL;
}

/* Longest k < strlen(m) with s[n-k..n) == m[0..k). */
static size_t partial(const char *s, size_t n, const char *m) {
  size_t l = strlen(m);
  for (size_t k = l - 1 < n ? l - 1 : n; k > 0; k--)
    if (memcmp(s + n - k, m, k) == 0) return k;
  return 0;
}

/* A JSON object or array at s: 1 complete (*end after it), 0 cut off, -1
 * not one. Only the bracket structure is checked here; jansson checks the
 * rest. */
static int scan_json(const char *s, size_t n, size_t *end) {
  if (n == 0) return 0;
  if (s[0] != '{' && s[0] != '[') return -1;
  int depth = 0;
  bool str = false, esc = false;
  for (size_t i = 0; i < n; i++) {
    char c = s[i];
    if (str) {
      if (esc) esc = false;
      else if (c == '\\') esc = true;
      else if (c == '"') str = false;
      continue;
    }
    if (c == '"') str = true;
    else if (c == '{' || c == '[') {
      if (++depth > 512) return -1;
    } else if (c == '}' || c == ']') {
      if (--depth == 0) {
        *end = i + 1;
        return 1;
      }
    }
  }
  return 0;
}

static const json_t *find_tool(const tc_parser *p, const char *name) {
  size_t i;
  const json_t *t;
  json_array_foreach(p->tools, i, t) {
    const char *nm = tool_name(t);
    if (nm && !strcmp(nm, name)) return t;
  }
  return NULL;
}

/* A parsed call, before it is emitted. */
typedef struct pcall {
  char name[TC_MAX_NAME + 1];
  char *args; /* owned JSON object text */
} pcall;

typedef struct pcalls {
  pcall c[TC_MAX_CALLS];
  int n;
} pcalls;

static void pcalls_free(pcalls *pc) {
  for (int i = 0; i < pc->n; i++) free(pc->c[i].args);
  pc->n = 0;
}

/* Adds a call named name with arguments args (an object, or a string
 * holding one). false when the tool is unknown or the arguments are not
 * an object. */
static bool add_call(const tc_parser *p, pcalls *pc, const char *name, size_t name_len, const json_t *args,
                     const char *raw, size_t raw_len) {
  if (pc->n + p->n_calls >= TC_MAX_CALLS || name_len == 0 || name_len > TC_MAX_NAME) return false;
  char nm[TC_MAX_NAME + 1];
  memcpy(nm, name, name_len);
  nm[name_len] = 0;
  if (strlen(nm) != name_len || !find_tool(p, nm)) return false;
  json_t *parsed = NULL;
  if (json_is_string(args)) {
    parsed = json_loadb(json_string_value(args), json_string_length(args), 0, NULL);
    args = parsed;
  }
  if (!json_is_object(args)) {
    json_decref(parsed);
    return false;
  }
  /* The model's own bytes when they are the object (what a stream sends),
   * else the object written compactly. */
  char *txt = raw && !parsed ? strndup(raw, raw_len) : json_dumps(args, JSON_COMPACT | JSON_PRESERVE_ORDER);
  json_decref(parsed);
  if (!txt) return false;
  memcpy(pc->c[pc->n].name, nm, name_len + 1);
  pc->c[pc->n].args = txt;
  pc->n++;
  return true;
}

/* The end of the JSON value at s[0..n) (valid JSON, as jansson checked). */
static size_t value_end(const char *s, size_t n) {
  size_t e = 0;
  if (n && (s[0] == '{' || s[0] == '[')) return scan_json(s, n, &e) == 1 ? e : n;
  if (n && s[0] == '"') {
    for (size_t i = 1; i < n; i++) {
      if (s[i] == '\\') i++;
      else if (s[i] == '"') return i + 1;
    }
    return n;
  }
  size_t i = 0;
  while (i < n && s[i] != ',' && s[i] != '}' && s[i] != ']' && !is_ws(s[i])) i++;
  return i;
}

/* Where the value of a top-level member key (raw bytes of its name) lies
 * in the JSON object text s[0..n). */
static bool member_range(const char *s, size_t n, const char *key, size_t *v0, size_t *v1) {
  size_t i = skip_ws(s, 0, n), kl = strlen(key);
  if (i >= n || s[i] != '{') return false;
  i++;
  for (int guard = 0; guard < 100000 && i < n; guard++) {
    i = skip_ws(s, i, n);
    if (i >= n || s[i] != '"') return false;
    size_t k0 = i + 1, k1 = k0 + value_end(s + i, n - i) - 2;
    i = k1 + 1;
    i = skip_ws(s, i, n);
    if (i >= n || s[i] != ':') return false;
    i = skip_ws(s, i + 1, n);
    size_t e = i + value_end(s + i, n - i);
    if (k1 - k0 == kl && !memcmp(s + k0, key, kl)) {
      *v0 = i;
      *v1 = e;
      return true;
    }
    i = skip_ws(s, e, n);
    if (i < n && s[i] == ',') i++;
    else return false;
  }
  return false;
}

/* One {"name": ..., "arguments"|"parameters": ...} object; text (may be
 * NULL) is its JSON text, whose arguments bytes are kept as they are. */
static bool add_json_call(const tc_parser *p, pcalls *pc, const json_t *o, const char *text, size_t len) {
  const json_t *nm = json_object_get(o, "name");
  const char *key = "arguments";
  const json_t *args = json_object_get(o, key);
  if (!args) args = json_object_get(o, key = "parameters");
  if (!json_is_object(o) || !json_is_string(nm) || !args) return false;
  size_t v0 = 0, v1 = 0;
  bool raw = text && json_is_object(args) && member_range(text, len, key, &v0, &v1);
  return add_call(p, pc, json_string_value(nm), json_string_length(nm), args, raw ? text + v0 : NULL, v1 - v0);
}

enum { PC_INVALID = -1, PC_INCOMPLETE = 0, PC_COMPLETE = 1 };

/* A JSON value at s[0..n) (leading white space skipped): PC_* and, when
 * complete, the parsed value and the end offset. */
static int json_at(const char *s, size_t n, size_t *end, json_t **v) {
  size_t i = skip_ws(s, 0, n), e = 0;
  int r = scan_json(s + i, n - i, &e);
  if (r <= 0) return r < 0 ? PC_INVALID : PC_INCOMPLETE;
  *v = json_loadb(s + i, e, 0, NULL);
  if (!*v) return PC_INVALID;
  *end = i + e;
  return PC_COMPLETE;
}

/* Qwen3-Coder: a parameter value as the tool's schema types it. */
static json_t *coder_value(const json_t *tool, const char *key, const char *v, size_t n) {
  const json_t *ps =
      json_object_get(json_object_get(json_object_get(tool_fn(tool), "parameters"), "properties"), key);
  const json_t *t = json_object_get(ps, "type"), *en = json_object_get(ps, "enum");
  bool str = (json_is_string(t) && !strcmp(json_string_value(t), "string")) ||
             (json_is_array(en) && json_array_size(en) > 0 && enum_all_strings(en));
  json_t *j = NULL;
  if (!str || (n && v[0] == '"')) j = json_loadb(v, n, JSON_DECODE_ANY, NULL);
  /* strings are raw unless the grammar had them quoted (pattern, format) */
  if (j && (!str || json_is_string(j))) return j;
  json_decref(j);
  return json_stringn(v, n);
}

static int parse_coder(const tc_parser *p, const char *s, size_t n, bool final, size_t *used, pcalls *pc) {
  (void)final;
  size_t i = skip_ws(s, 0, n);
  int r = expect_lit(s + i, n - i, "<function=");
  if (r <= 0) return r < 0 ? PC_INVALID : PC_INCOMPLETE;
  i += 10;
  const char *gt = memchr(s + i, '>', n - i);
  if (!gt) return n - i > TC_MAX_NAME ? PC_INVALID : PC_INCOMPLETE;
  size_t nl = (size_t)(gt - (s + i));
  if (nl == 0 || nl > TC_MAX_NAME) return PC_INVALID;
  char name[TC_MAX_NAME + 1];
  memcpy(name, s + i, nl);
  name[nl] = 0;
  const json_t *tool = find_tool(p, name);
  if (!tool) return PC_INVALID;
  i += nl + 1;
  json_t *args = json_object();
  if (!args) return PC_INVALID;
  int rc = PC_INCOMPLETE;
  for (int guard = 0; guard < 4096; guard++) {
    i = skip_ws(s, i, n);
    if ((r = expect_lit(s + i, n - i, "</function>")) == 1) {
      i += 11;
      i = skip_ws(s, i, n);
      r = expect_lit(s + i, n - i, "</tool_call>");
      if (r == 1) {
        i += 12;
        rc = add_call(p, pc, name, nl, args, NULL, 0) ? PC_COMPLETE : PC_INVALID;
      } else {
        rc = r < 0 ? PC_INVALID : PC_INCOMPLETE;
      }
      break;
    }
    if (r == 0 && i < n) break; /* incomplete */
    int r2 = expect_lit(s + i, n - i, "<parameter=");
    if (r2 < 0) {
      rc = PC_INVALID;
      break;
    }
    if (r2 == 0) break;
    i += 11;
    const char *pg = memchr(s + i, '>', n - i);
    if (!pg) {
      if (n - i > 256) rc = PC_INVALID;
      break;
    }
    size_t kl = (size_t)(pg - (s + i));
    const char *key = s + i;
    i += kl + 1;
    const char *endp = find(s + i, n - i, "</parameter>");
    if (!endp) break;
    size_t vs = i, ve = (size_t)(endp - s);
    if (vs < ve && s[vs] == '\n') vs++;
    if (ve > vs && s[ve - 1] == '\n') ve--;
    char kbuf[256];
    if (kl == 0 || kl >= sizeof kbuf) {
      rc = PC_INVALID;
      break;
    }
    memcpy(kbuf, key, kl);
    kbuf[kl] = 0;
    json_object_set_new(args, kbuf, coder_value(tool, kbuf, s + vs, ve - vs));
    i = (size_t)(endp - s) + 12;
  }
  json_decref(args);
  if (rc == PC_COMPLETE) *used = i;
  return rc;
}

/* Parses the call whose text (after its opener) is s[0..n). */
static int parse_call(const tc_parser *p, const char *s, size_t n, bool final, bool anchored, size_t *used,
                      pcalls *pc) {
  size_t end = 0, i;
  json_t *v = NULL;
  int r;
  switch (p->sx.format) {
  case TC_HERMES:
    r = json_at(s, n, &end, &v);
    if (r != PC_COMPLETE) return r;
    i = skip_ws(s, end, n);
    r = expect_lit(s + i, n - i, "</tool_call>");
    if (r == 1) i += 12;
    else if (r == 0 && !(final && i == n)) r = PC_INCOMPLETE;
    else if (r < 0) r = PC_INVALID;
    else r = 1; /* the answer ended right after the object */
    if (r == 1) {
      size_t j0 = skip_ws(s, 0, n);
      r = add_json_call(p, pc, v, s + j0, end - j0) ? PC_COMPLETE : PC_INVALID;
    }
    json_decref(v);
    if (r == PC_COMPLETE) *used = i;
    return r;
  case TC_QWEN3_CODER: return parse_coder(p, s, n, final, used, pc);
  case TC_LLAMA3:
    (void)anchored;
    r = json_at(s, n, &end, &v);
    if (r != PC_COMPLETE) return r;
    i = skip_ws(s, 0, n);
    r = add_json_call(p, pc, v, s + i, end - i) ? PC_COMPLETE : PC_INVALID;
    json_decref(v);
    if (r == PC_COMPLETE) *used = end;
    return r;
  case TC_MISTRAL:
  case TC_GRANITE:
    r = json_at(s, n, &end, &v);
    if (r != PC_COMPLETE) return r;
    r = json_is_array(v) && json_array_size(v) > 0 ? PC_COMPLETE : PC_INVALID;
    for (size_t k = 0; r == PC_COMPLETE && k < json_array_size(v); k++)
      if (!add_json_call(p, pc, json_array_get(v, k), NULL, 0)) r = PC_INVALID;
    json_decref(v);
    if (r == PC_COMPLETE) *used = end;
    return r;
  case TC_DEVSTRAL: {
    i = skip_ws(s, 0, n);
    size_t a = i;
    while (i < n && i - a <= TC_MAX_NAME &&
           ((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') || (s[i] >= '0' && s[i] <= '9') ||
            s[i] == '_' || s[i] == '-' || s[i] == '.'))
      i++;
    if (i == n) return i - a > TC_MAX_NAME ? PC_INVALID : PC_INCOMPLETE;
    r = expect_lit(s + i, n - i, "[ARGS]");
    if (r <= 0) return r < 0 ? PC_INVALID : PC_INCOMPLETE;
    size_t nl = i - a;
    i += 6;
    r = json_at(s + i, n - i, &end, &v);
    if (r != PC_COMPLETE) return r;
    size_t j0 = skip_ws(s, i, n);
    r = add_call(p, pc, s + a, nl, v, s + j0, i + end - j0) ? PC_COMPLETE : PC_INVALID;
    json_decref(v);
    if (r == PC_COMPLETE) *used = i + end;
    return r;
  }
  default: return PC_INVALID;
  }
}

static int reserve(tc_parser *p, size_t extra) {
  if (p->n + extra + 1 <= p->cap) return 0;
  /* Drop what has been emitted when it is most of the buffer. */
  if (p->pos > p->n / 2 && p->pos > 4096) {
    memmove(p->buf, p->buf + p->pos, p->n - p->pos);
    p->n -= p->pos;
    p->pos = 0;
    if (p->n + extra + 1 <= p->cap) return 0;
  }
  size_t nc = p->cap ? p->cap : 4096;
  while (nc < p->n + extra + 1) nc *= 2;
  char *nb = realloc(p->buf, nc);
  if (!nb) return PW_ENOMEM;
  p->buf = nb;
  p->cap = nc;
  return 0;
}

static void emit_text(tc_parser *p, tc_ev_type type, const char *s, size_t n, tc_emit_fn emit, void *ctx) {
  if (n == 0) return;
  if (type == TC_EV_CONTENT)
    for (size_t i = 0; i < n && !p->started; i++)
      if (!is_ws(s[i])) p->started = true;
  tc_event ev = {.type = type, .text = s, .len = n};
  emit(ctx, &ev);
}

static void emit_start(tc_parser *p, const char *name, tc_emit_fn emit, void *ctx) {
  tc_event ev = {.type = TC_EV_CALL_START, .index = p->n_calls, .name = name};
  emit(ctx, &ev);
}

static void emit_args(tc_parser *p, const char *t, size_t n, tc_emit_fn emit, void *ctx) {
  if (n == 0) return;
  tc_event ev = {.type = TC_EV_CALL_ARGS, .text = t, .len = n, .index = p->n_calls};
  emit(ctx, &ev);
}

static void emit_calls(tc_parser *p, pcalls *pc, tc_emit_fn emit, void *ctx) {
  for (int i = 0; i < pc->n; i++) {
    size_t len = strlen(pc->c[i].args);
    if (p->streaming && i == 0) {
      /* the call streamed so far: the rest of its arguments */
      size_t sent = p->s_sent <= len ? p->s_sent : len;
      emit_args(p, pc->c[i].args + sent, len - sent, emit, ctx);
      p->streaming = false;
    } else {
      emit_start(p, pc->c[i].name, emit, ctx);
      emit_args(p, pc->c[i].args, len, emit, ctx);
    }
    p->n_calls++;
  }
  pcalls_free(pc);
}

/* A constrained call's head as the grammar writes it, in s[0..n): its
 * tool's name (into name) and where its arguments object starts. */
static bool stream_head(const tc_parser *p, const char *s, size_t n, char *name, size_t *args_off) {
  const char *lit = p->sx.format == TC_HERMES ? "{\"name\": \"" : p->sx.format == TC_LLAMA3 ? "{\"name\": \"" : "";
  const char *mid = p->sx.format == TC_HERMES   ? "\", \"arguments\": "
                    : p->sx.format == TC_LLAMA3 ? "\", \"parameters\": "
                    : p->sx.format == TC_DEVSTRAL ? "[ARGS]"
                                                  : NULL;
  if (!mid) return false;
  size_t i = skip_ws(s, 0, n), l = strlen(lit);
  if (expect_lit(s + i, n - i, lit) != 1) return false;
  i += l;
  size_t a = i;
  while (i < n && i - a <= TC_MAX_NAME && s[i] != '"' && s[i] != '[') i++;
  if (i == n || i == a || i - a > TC_MAX_NAME) return false;
  memcpy(name, s + a, i - a);
  name[i - a] = 0;
  if (!find_tool(p, name)) return false;
  if (expect_lit(s + i, n - i, mid) != 1) return false;
  i = skip_ws(s, i + strlen(mid), n);
  if (i >= n || s[i] != '{') return false;
  *args_off = i;
  return true;
}

/* Harmony: a header's channel and recipient. */
static void harmony_header(tc_parser *p, const char *h, size_t n) {
  p->hb_kind = HB_CONTENT;
  const char *ch = find(h, n, "<|channel|>");
  if (ch) {
    size_t off = (size_t)(ch - h) + 11;
    if (n - off >= 8 && !memcmp(h + off, "analysis", 8)) p->hb_kind = HB_REASON;
  }
  const char *to = find(h, n, "to=functions.");
  if (to && p->tools) {
    size_t off = (size_t)(to - h) + 13, k = 0;
    while (off + k < n && k < TC_MAX_NAME && h[off + k] != ' ' && h[off + k] != '<' && h[off + k] != '\n') k++;
    memcpy(p->hname, h + off, k);
    p->hname[k] = 0;
    p->hb_kind = HB_CALL;
  }
}

static const char *const k_h_ends[] = {"<|end|>", "<|call|>", "<|return|>", "<|start|>"};

/* One step; false when it needs more text (or everything is done). */
static bool step(tc_parser *p, bool final, tc_emit_fn emit, void *ctx) {
  char *s = p->buf;
  size_t n = p->n, pos = p->pos;
  if (pos >= n) return false;
  if (p->skip_ws) {
    size_t j = skip_ws(s, pos, n);
    p->pos = pos = j;
    if (j == n) return false;
    p->skip_ws = false;
  }
  switch (p->mode) {
  case M_REASON: {
    const char *c = find(s + pos, n - pos, "</think>");
    if (c) {
      emit_text(p, TC_EV_REASONING, s + pos, (size_t)(c - (s + pos)), emit, ctx);
      p->pos = (size_t)(c - s) + 8;
      p->mode = M_CONTENT;
      p->skip_ws = true;
      return true;
    }
    size_t hold = final ? 0 : partial(s + pos, n - pos, "</think>");
    emit_text(p, TC_EV_REASONING, s + pos, n - pos - hold, emit, ctx);
    p->pos = n - hold;
    return false;
  }
  case M_H_HEAD: {
    const char *m = find(s + pos, n - pos, "<|message|>");
    if (!m) {
      if (final || n - pos > 4096) { /* not a header: plain text */
        emit_text(p, TC_EV_CONTENT, s + pos, n - pos, emit, ctx);
        p->pos = n;
      }
      return false;
    }
    harmony_header(p, s + pos, (size_t)(m - (s + pos)));
    p->pos = (size_t)(m - s) + 11;
    p->mode = M_H_BODY;
    return true;
  }
  case M_H_BODY: {
    const char *best = NULL;
    size_t bl = 0;
    for (size_t k = 0; k < sizeof k_h_ends / sizeof *k_h_ends; k++) {
      const char *c = find(s + pos, n - pos, k_h_ends[k]);
      if (c && (!best || c < best)) best = c, bl = strlen(k_h_ends[k]);
    }
    size_t body_end = best ? (size_t)(best - s) : n;
    if (p->hb_kind == HB_CALL) {
      if (!best && !final) {
        if (n - pos <= TC_MAX_CALL_BYTES) return false;
      }
      pcalls pc = {0};
      json_t *v = NULL;
      size_t e = 0;
      bool ok = json_at(s + pos, body_end - pos, &e, &v) == PC_COMPLETE &&
                skip_ws(s + pos, e, body_end - pos) == body_end - pos &&
                add_call(p, &pc, p->hname, strlen(p->hname), v, s + pos + skip_ws(s + pos, 0, e), e - skip_ws(s + pos, 0, e));
      json_decref(v);
      if (ok) emit_calls(p, &pc, emit, ctx);
      else emit_text(p, TC_EV_CONTENT, s + pos, body_end - pos, emit, ctx);
      pcalls_free(&pc);
    } else {
      size_t hold = 0;
      if (!best && !final)
        for (size_t k = 0; k < sizeof k_h_ends / sizeof *k_h_ends; k++) {
          size_t h = partial(s + pos, n - pos, k_h_ends[k]);
          if (h > hold) hold = h;
        }
      emit_text(p, p->hb_kind == HB_REASON ? TC_EV_REASONING : TC_EV_CONTENT, s + pos, body_end - pos - hold, emit,
                ctx);
      if (!best) {
        p->pos = body_end - hold;
        return false;
      }
    }
    p->pos = best ? body_end + bl : n;
    p->mode = M_H_HEAD;
    return best != NULL;
  }
  default: break;
  }
  /* M_CONTENT: the earliest marker: reasoning, a call opener, or (at the
   * start of the answer) a call without opener. */
  const char *op = p->tools ? opener_of(p->sx.format) : NULL;
  const char *think = p->sx.think ? "<think>" : NULL;
  size_t q_think = think ? (size_t)-1 : 0, q_call = (size_t)-1, olen = 0;
  const char *c;
  if (think && (c = find(s + pos, n - pos, think))) q_think = (size_t)(c - s);
  if (op && (c = find(s + pos, n - pos, op))) q_call = (size_t)(c - s), olen = strlen(op);
  bool at_start = p->tools && !p->started && p->n_calls == 0;
  bool anchor = at_start && !p->anchor_failed && (p->bare || p->sx.format == TC_LLAMA3);
  if (anchor) {
    size_t j = skip_ws(s, pos, n);
    bool json_start = p->sx.format == TC_LLAMA3 || p->sx.format == TC_MISTRAL || p->sx.format == TC_GRANITE;
    if (j == n && !final) return false; /* only white space so far */
    if (j < n && (!json_start || s[j] == '{' || s[j] == '[') && j < q_call && (!think || j < q_think))
      q_call = pos, olen = 0; /* the call's parser skips the white space */
    else if (!(j < n && (j == q_call || (think && j == q_think)))) p->anchor_failed = true;
  }
  if (think && q_think != (size_t)-1 && q_think < q_call) {
    emit_text(p, TC_EV_CONTENT, s + pos, q_think - pos, emit, ctx);
    p->pos = q_think + 7;
    p->mode = M_REASON;
    p->skip_ws = true;
    return true;
  }
  if (q_call != (size_t)-1) {
    emit_text(p, TC_EV_CONTENT, s + pos, q_call - pos, emit, ctx);
    p->pos = pos = q_call;
    pcalls pc = {0};
    size_t used = 0;
    int r = parse_call(p, s + pos + olen, n - pos - olen, final, olen == 0, &used, &pc);
    if (r == PC_COMPLETE) {
      emit_calls(p, &pc, emit, ctx);
      p->pos = pos + olen + used;
      p->skip_ws = true;
      return true;
    }
    pcalls_free(&pc);
    char hn[TC_MAX_NAME + 1];
    size_t ao = 0;
    const char *cs = s + pos + olen;
    size_t cn = n - pos - olen;
    bool head = r != PC_INVALID && p->constrained && stream_head(p, cs, cn, hn, &ao);
    size_t avail = 0, e = 0;
    if (head) {
      avail = cn - ao;
      if (scan_json(cs + ao, avail, &e) == 1) avail = e; /* the arguments' end */
    }
    if (r == PC_INCOMPLETE && !final && n - pos <= TC_MAX_CALL_BYTES) {
      if (head) { /* stream the arguments as far as they go */
        if (!p->streaming) {
          emit_start(p, hn, emit, ctx);
          p->streaming = true;
          p->s_ao = ao;
          p->s_sent = 0;
        }
        if (avail > p->s_sent) emit_args(p, cs + ao + p->s_sent, avail - p->s_sent, emit, ctx);
        if (avail > p->s_sent) p->s_sent = avail;
      }
      return false;
    }
    if (head) {
      /* A constrained call cut off (max_tokens): it stays a call, with the
       * arguments it got, as a stream would have sent them. */
      if (!p->streaming) emit_start(p, hn, emit, ctx);
      size_t from = p->streaming ? p->s_sent : 0;
      if (avail > from) emit_args(p, cs + ao + from, avail - from, emit, ctx);
      p->streaming = false;
      p->n_calls++;
      p->pos = n;
      return false;
    }
    if (p->streaming) {
      /* went wrong after its arguments began (only a grammar glitch can do
       * this): the call ends with what was sent, the rest is content */
      p->streaming = false;
      p->n_calls++;
      p->pos = pos + olen + p->s_ao + p->s_sent;
      return true;
    }
    /* Not a call: its opener is text, and the search goes on after it. */
    if (olen == 0) {
      p->anchor_failed = true;
      return true;
    }
    emit_text(p, TC_EV_CONTENT, s + pos, olen, emit, ctx);
    p->started = true;
    p->pos = pos + olen;
    return true;
  }
  size_t hold = 0;
  if (!final) {
    if (op) hold = partial(s + pos, n - pos, op);
    if (think) {
      size_t h = partial(s + pos, n - pos, think);
      if (h > hold) hold = h;
    }
  }
  emit_text(p, TC_EV_CONTENT, s + pos, n - pos - hold, emit, ctx);
  p->pos = n - hold;
  return false;
}

int tc_parser_feed(tc_parser *p, const char *text, size_t len, bool final, tc_emit_fn emit, void *ctx) {
  if (len) {
    if (reserve(p, len)) return PW_ENOMEM;
    memcpy(p->buf + p->n, text, len);
    p->n += len;
  }
  /* Each step emits or moves pos forward or changes mode; bounded anyway. */
  for (size_t guard = 0; guard < 4 * (p->n - p->pos) + 64; guard++)
    if (!step(p, final, emit, ctx)) break;
  return 0;
}
