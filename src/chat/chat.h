/* chat.h - rendering chat conversations to prompt text with a model's chat
 * template.
 *
 * What it is: the glue between OpenAI-style messages (JSON) and the Jinja
 * interpreter of jinja.h: one-shot rendering of template text with the
 * variables Hugging Face's apply_chat_template passes (messages,
 * add_generation_prompt, bos_token, eos_token, tools, and any other key as
 * a global), the ChatML template used for models that ship none, and the
 * flattening of array-of-parts message content into plain strings.
 *
 * What it is not: tokenization (tok/), stop strings (stop.h), or a cache of
 * parsed templates (callers that render many times should jinja_parse once
 * and jinja_render per request, as the server does).
 */
#ifndef PW_CHAT_CHAT_H
#define PW_CHAT_CHAT_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

/* Options of one render. A zero field takes the default in brackets. */
typedef struct chat_render_opts {
  time_t now;              /* what strftime_now formats, shown in UTC [0 = the current local time] */
  size_t max_output;       /* bytes of rendered text [1 MiB] */
  uint64_t max_iterations; /* loop iterations + macro calls + per-element filter work [1e6] */
} chat_render_opts;

/* Parses and renders template text tmpl (tmpl_len bytes, need not be
 * NUL-terminated) with the members of the JSON object vars as globals
 * (borrowed; NULL = none). opts may be NULL (all defaults). On success
 * returns 0 and *out is a malloc'ed NUL-terminated buffer of *out_len bytes
 * owned by the caller (free()). On failure *out is NULL and the status is
 * PW_ETEMPLATE (syntax error, or the template raised: then err is the
 * template's own message), PW_ELIMIT (a bound was exceeded), PW_EINVAL or
 * PW_ENOMEM, with a one-line message in err (PW_ERRMAX bytes). */
int chat_render(const char *tmpl, size_t tmpl_len, const json_t *vars, const chat_render_opts *opts, char **out,
                size_t *out_len, char *err);

/* A ChatML template (<|im_start|>role\ncontent<|im_end|>\n ...), for models
 * without tokenizer.chat_template. Static storage. */
const char *chat_default_template(void);

/* Rewrites, in place, every message whose "content" is an array of OpenAI
 * content parts into one string: the "text" of each {"type": "text"} part,
 * joined with "\n". Any other part type is an error (PW_EINVAL naming the
 * message and the type); messages must be a JSON array of objects. String
 * and null contents are left as they are. messages is borrowed. */
int chat_flatten_content(json_t *messages, char *err);

#endif
