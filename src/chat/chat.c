/* chat.c - chat-template rendering glue over jinja.h. See chat.h. */
#include "chat/chat.h"
#include "chat/jinja.h"

#include "base/error.h"

#include <stdlib.h>
#include <string.h>

int chat_render(const char *tmpl, size_t tmpl_len, const json_t *vars, const chat_render_opts *opts, char **out,
                size_t *out_len, char *err) {
  *out = NULL;
  if (out_len) *out_len = 0;
  if (!tmpl && tmpl_len) return pw_seterr(err, PW_EINVAL, "chat template: NULL text");
  jinja_template *t = NULL;
  int rc = jinja_parse(tmpl ? tmpl : "", tmpl_len, 0, &t, err);
  if (rc) return rc;
  jinja_limits lim = {0};
  if (opts) {
    lim.now = (int64_t)opts->now;
    lim.max_output = opts->max_output;
    lim.max_iterations = opts->max_iterations;
  }
  rc = jinja_render(t, vars, &lim, out, out_len, err);
  jinja_destroy(t);
  return rc;
}

const char *chat_default_template(void) {
  return "{%- for message in messages -%}\n"
         "{{- '<|im_start|>' + message['role'] + '\\n' -}}\n"
         "{%- if message['content'] is string -%}{{- message['content'] -}}{%- endif -%}\n"
         "{{- '<|im_end|>\\n' -}}\n"
         "{%- endfor -%}\n"
         "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}\n";
}

int chat_flatten_content(json_t *messages, char *err) {
  if (!json_is_array(messages)) return pw_seterr(err, PW_EINVAL, "messages must be an array");
  size_t i;
  json_t *m;
  json_array_foreach(messages, i, m) {
    if (!json_is_object(m)) return pw_seterr(err, PW_EINVAL, "messages[%zu] must be an object", i);
    json_t *c = json_object_get(m, "content");
    if (!json_is_array(c)) continue;
    size_t total = 0, k;
    json_t *part;
    json_array_foreach(c, k, part) {
      json_t *type = json_object_get(part, "type"), *text = json_object_get(part, "text");
      if (!json_is_object(part) || !json_is_string(type))
        return pw_seterr(err, PW_EINVAL, "messages[%zu].content[%zu] has no type", i, k);
      if (strcmp(json_string_value(type), "text") != 0)
        return pw_seterr(err, PW_EINVAL, "messages[%zu].content[%zu]: content parts of type '%.64s' are not supported",
                         i, k, json_string_value(type));
      if (!json_is_string(text))
        return pw_seterr(err, PW_EINVAL, "messages[%zu].content[%zu] has no text", i, k);
      total += json_string_length(text) + 1;
    }
    char *buf = malloc(total + 1);
    if (!buf) return pw_seterr(err, PW_ENOMEM, "out of memory");
    size_t n = 0;
    json_array_foreach(c, k, part) {
      json_t *text = json_object_get(part, "text");
      if (k) buf[n++] = '\n';
      memcpy(buf + n, json_string_value(text), json_string_length(text));
      n += json_string_length(text);
    }
    json_t *s = json_stringn_nocheck(buf, n);
    free(buf);
    if (!s || json_object_set_new(m, "content", s)) return pw_seterr(err, PW_ENOMEM, "out of memory");
  }
  return 0;
}
