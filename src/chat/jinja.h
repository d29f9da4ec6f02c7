/* jinja.h - a sandboxed interpreter for the Jinja subset that chat templates
 * use.
 *
 * What it is: a parser from template text to a tree, and a renderer of that
 * tree against a JSON object of variables, with the semantics of Python's
 * Jinja2 as Hugging Face's apply_chat_template configures it: trim_blocks
 * and lstrip_blocks on, the loopcontrols extension ({% break %},
 * {% continue %}), a tojson filter that keeps non-ASCII text, and the globals
 * raise_exception(msg) and strftime_now(fmt), and a from_json filter (not
 * in Jinja2; json.loads, which templates such as DeepSeek's call on tool
 * arguments). Strings marked |safe or |escape behave as Jinja2's Markup
 * under '+' (the other operand is HTML-escaped). Values print like Python's
 * str() (None, True, 1.0, ['a', 'b']); undefined names render as "".
 *
 * What it is not: a general Jinja2. There is no file access, no include /
 * import / extends (they are errors), no autoescape, and no Python object
 * model. Every render is bounded in output bytes, loop iterations, live
 * memory and nesting depth; exceeding a bound is a clean error naming the
 * template line, never a crash or a hang.
 *
 * Threads: a parsed template is immutable; several threads may render the
 * same template at once.
 */
#ifndef PW_CHAT_JINJA_H
#define PW_CHAT_JINJA_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

typedef struct jinja_template jinja_template;

/* Bounds of one render. A zero field takes the default in brackets. */
typedef struct jinja_limits {
  size_t max_output;       /* bytes of rendered text, also of any macro or block-set result [1 MiB] */
  uint64_t max_iterations; /* loop iterations + macro calls + per-element filter work [1e6] */
  int max_depth;           /* template nesting and macro recursion [200] */
  size_t max_memory;       /* live bytes of values during the render [64 MiB] */
  int64_t now;             /* strftime_now time, seconds since the epoch, shown in UTC; 0 = the current local time */
} jinja_limits;

#define JINJA_DEFAULT_MAX_OUTPUT ((size_t)1 << 20)
#define JINJA_DEFAULT_MAX_ITERATIONS 1000000u
#define JINJA_DEFAULT_MAX_DEPTH 200
#define JINJA_DEFAULT_MAX_MEMORY ((size_t)64 << 20)

/* Parses template text (src need not be NUL-terminated; it is copied).
 * max_depth bounds block and expression nesting (0 = default). On error
 * returns PW_ETEMPLATE (syntax, unknown filter/test, unsupported tag) or
 * PW_ELIMIT / PW_ENOMEM, writes "template line N: ..." into err, and *out is
 * NULL. On success *out is owned by the caller (jinja_destroy). */
int jinja_parse(const char *src, size_t len, int max_depth, jinja_template **out, char *err);

void jinja_destroy(jinja_template *t);

/* Renders t with the members of the JSON object vars as global variables
 * (borrowed, read-only; NULL = none). lim may be NULL (all defaults).
 * On success *out is a malloc'ed NUL-terminated buffer of *out_len bytes
 * (the text itself may contain NUL bytes), owned by the caller (free()).
 * On error returns PW_ETEMPLATE (template error; for raise_exception(msg)
 * err is msg itself, for other errors "template line N: ..."), PW_ELIMIT
 * (a bound was exceeded) or PW_ENOMEM, and *out is NULL. */
int jinja_render(const jinja_template *t, const json_t *vars, const jinja_limits *lim, char **out,
                 size_t *out_len, char *err);

#endif
