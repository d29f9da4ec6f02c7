/* api_ollama.c - the Ollama-compatible API: POST /api/chat, /api/generate
 * (NDJSON streams by default, one object with "stream": false),
 * /api/embed, /api/embeddings, /api/show; GET /api/tags, /api/ps,
 * /api/version. Requests become an oai_request and run through the one
 * generation core (api.h); this file only reads Ollama's fields and writes
 * Ollama's bodies: durations in nanoseconds, errors as {"error": "..."}.
 *
 * Policy, as for the OpenAI API: a field is honoured or refused with a 400
 * naming it. options honoured: temperature, top_k, top_p, min_p, seed,
 * num_predict, stop, repeat_penalty, repeat_last_n, presence_penalty,
 * frequency_penalty, num_ctx (only the server's own context size);
 * typical_p, tfs_z, mirostat, penalize_newline only at their neutral
 * values; load-time options (num_gpu, num_thread, ...) are refused, as is
 * any option this file does not know. keep_alive (seconds, or a duration
 * such as "5m"; 0 = unload after this request, negative = keep loaded) is
 * honoured when the server serves a store; with one model it stays loaded
 * for the server's life. A generate or chat request with nothing to
 * generate only loads the model (done_reason "load"), or with keep_alive 0
 * unloads it ("unload"), as Ollama does. Top-level fields: each endpoint
 * lists those it reads (k_chat_fields, ...); logprobs, top_logprobs,
 * truncate and shift only at the value that asks for what this server
 * does (false, 0); any other field is a 400 naming it.
 *
 * think (/api/chat, and /api/generate unless raw): true: the template
 * gets enable_thinking true and the answer's reasoning is returned in
 * message.thinking (generate: thinking), streamed as thinking pieces
 * before the content; a template without reasoning (no <think>, not
 * gpt-oss) is a 400 "... does not support thinking", as Ollama answers.
 * false: enable_thinking false (Qwen3's template then writes an empty
 * think block) and no reasoning is returned; a template that cannot turn
 * thinking off (reasoning it does not gate on enable_thinking, gpt-oss)
 * is a 400 rather than thinking anyway. "low" | "medium" | "high" (and
 * Ollama's "max" = "high"): reasoning_effort for templates that read it
 * (gpt-oss), else a 400. Absent: as Ollama documents ("thinking is
 * enabled by default ... for supported models"), a template with
 * reasoning returns it in message.thinking; the template gets no
 * variable, so the prompt is the template's default (for Qwen3 the same
 * as true). Assistant messages' `thinking` (clients send it back) reaches
 * the template as reasoning_content, as OpenAI's does.
 *
 * Tools (/api/chat only; /api/generate refuses them, as Ollama's generate
 * has none): `tools` in Ollama's (= OpenAI's) shape go through the same
 * path as OpenAI's tool_choice "auto" (oai_chat_prepare: the template gets
 * them, a lazy grammar keeps a call well formed once the model opens one;
 * a template without a known tool-call format is a 400). Ollama has no
 * tool_choice: the model decides. History: assistant `tool_calls`
 * ({function: {name, arguments: an object}}, optional id / index) and
 * role "tool" messages ({content, tool_name?, tool_call_id?}) become the
 * template's messages; a call without an id gets one from its place in
 * the conversation (the same every turn, so the prompt's prefix is reused;
 * 9 characters for Mistral's templates), and a tool message is matched to
 * the earliest unanswered call of the last assistant turn (by tool_name
 * when given) for its id and name. The answer is split by the template's
 * format (chat/toolcall.h, as for OpenAI): message.tool_calls items are
 * {id, function: {index, name, arguments: an object}} as Ollama writes
 * them; streamed, each call is one chunk once it is complete (never
 * argument fragments). A call cut off by num_predict, whose arguments are
 * not a whole object, is left out (done_reason "length" says so).
 * Reasoning (<think> templates, gpt-oss channels) is always kept out of
 * the content; whether it is returned is think's (above).
 * What it is not: the store's pull and delete (api_models.c), or a
 * multi-model router (models.c, registry.c). */
#include "server/api.h"

#include "base/error.h"
#include "server/sbuf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define OL_MODEL_MAX 256 /* bytes of a model name echoed back */

void ollama_render_error(const oai_error *e, sbuf *out) {
  sbuf_puts(out, "{\"error\":");
  sbuf_json_str(out, e->message, strlen(e->message));
  sbuf_puts(out, "}");
}

/* ---- requests ---------------------------------------------------------- */

/* options a client may send that change nothing at their neutral value. */
typedef struct neutral_opt {
  const char *key;
  double value;
} neutral_opt;
static const neutral_opt k_neutral[] = {
    {"typical_p", 1.0}, {"tfs_z", 1.0}, {"mirostat", 0}, {"penalize_newline", 0}, {"num_keep", -1},
};
/* Settings of the running server, fixed when it started. */
static const char *const k_load_time[] = {"num_gpu",  "main_gpu",   "num_thread", "num_batch", "use_mmap",
                                          "use_mlock", "low_vram",  "numa",       "f16_kv",    "vocab_only",
                                          "logits_all", "num_gqa",  "rope_frequency_base", "rope_frequency_scale",
                                          NULL};
static const char *const k_known[] = {"temperature",     "top_k",          "top_p",         "min_p",
                                      "seed",            "num_predict",    "stop",          "repeat_penalty",
                                      "repeat_last_n",   "presence_penalty", "frequency_penalty", "num_ctx",
                                      NULL};

static int parse_options(conn *k, json_t *o, oai_request *r, oai_error *e) {
  pw_sampler_params *sp = &r->sampling;
  /* Ollama's defaults, which its clients expect when they send none. */
  sp->temperature = 0.8f;
  sp->top_k = 40;
  sp->top_p = 0.9f;
  sp->min_p = 0.0f;
  sp->repeat_penalty = 1.1f;
  sp->repeat_last_n = 64;
  sp->seed = api_random_seed();
  r->seed_given = false;
  if (!o || json_is_null(o)) return 0;
  if (!json_is_object(o)) return oai_seterr(e, 400, "invalid_type", "options", "'options' must be an object");
  const char *key;
  json_t *v;
  json_object_foreach(o, key, v) {
    if (json_is_null(v)) continue;
    bool known = false;
    for (int i = 0; k_known[i]; i++) known |= !strcmp(key, k_known[i]);
    if (known) continue;
    char param[96];
    snprintf(param, sizeof param, "options.%.80s", key);
    for (size_t i = 0; i < sizeof k_neutral / sizeof k_neutral[0]; i++)
      if (!strcmp(key, k_neutral[i].key)) {
        double d = json_is_boolean(v) ? (json_is_true(v) ? 1 : 0) : json_is_number(v) ? json_number_value(v) : -99;
        if (d == k_neutral[i].value) goto next;
        return oai_seterr(e, 400, "unsupported_option", param, "option '%s' is not supported (only %g is accepted)",
                          key, k_neutral[i].value);
      }
    for (int i = 0; k_load_time[i]; i++)
      if (!strcmp(key, k_load_time[i]))
        return oai_seterr(e, 400, "unsupported_option", param,
                          "option '%s' is a load-time setting of this server (set when it starts), not a request option",
                          key);
    return oai_seterr(e, 400, "unsupported_option", param, "option '%.80s' is not supported", key);
  next:;
  }
  double d;
  long long x;
  bool given;
  if (api_num(o, "temperature", "options.temperature", 0, 100, &d, &given, e)) return PW_EINVAL;
  if (given) sp->temperature = (float)d;
  if (api_int(o, "top_k", "options.top_k", 0, 1 << 30, &x, &given, e)) return PW_EINVAL;
  if (given) sp->top_k = (int32_t)x;
  if (api_num(o, "top_p", "options.top_p", 0, 1, &d, &given, e)) return PW_EINVAL;
  if (given) sp->top_p = d > 0 ? (float)d : 1e-9f;
  if (api_num(o, "min_p", "options.min_p", 0, 1, &d, &given, e)) return PW_EINVAL;
  if (given) sp->min_p = (float)d;
  if (api_num(o, "repeat_penalty", "options.repeat_penalty", 0, 10, &d, &given, e)) return PW_EINVAL;
  if (given) {
    if (d <= 0) return oai_seterr(e, 400, "invalid_value", "options.repeat_penalty", "'options.repeat_penalty' must be > 0");
    sp->repeat_penalty = (float)d;
  }
  int n_ctx = engine_n_ctx(srv_engine(k));
  if (api_int(o, "repeat_last_n", "options.repeat_last_n", -1, PW_SAMPLE_MAX_LAST_N, &x, &given, e)) return PW_EINVAL;
  if (given) sp->repeat_last_n = x < 0 ? n_ctx : (int32_t)x; /* -1: the whole context, as Ollama */
  if (api_num(o, "presence_penalty", "options.presence_penalty", -2, 2, &d, &given, e)) return PW_EINVAL;
  if (given) sp->presence_penalty = (float)d;
  if (api_num(o, "frequency_penalty", "options.frequency_penalty", -2, 2, &d, &given, e)) return PW_EINVAL;
  if (given) sp->frequency_penalty = (float)d;
  if (api_int(o, "seed", "options.seed", INT64_MIN, INT64_MAX, &x, &given, e)) return PW_EINVAL;
  if (given) {
    sp->seed = (uint64_t)x;
    r->seed_given = true;
  }
  /* -1: until the end of the context; -2: fill the context (the same here,
   * as this server never shifts the context). */
  if (api_int(o, "num_predict", "options.num_predict", -2, 1 << 30, &x, &given, e)) return PW_EINVAL;
  if (given) {
    if (x == 0)
      return oai_seterr(e, 400, "invalid_value", "options.num_predict", "'options.num_predict' must be -1, -2 or positive");
    r->max_tokens = x > 0 ? (int)x : 0;
  }
  if (api_stops(json_object_get(o, "stop"), "options.stop", r, e)) return PW_EINVAL;
  if (api_int(o, "num_ctx", "options.num_ctx", 1, 1 << 30, &x, &given, e)) return PW_EINVAL;
  if (given && x != n_ctx)
    return oai_seterr(e, 400, "unsupported_option", "options.num_ctx",
                      "'options.num_ctx' is %lld but this server runs the model with a context of %d tokens "
                      "(set it with --ctx when starting the server)",
                      x, n_ctx);
  return 0;
}

/* format: "" / absent (free text), "json", or a JSON schema object. */
static int parse_format(json_t *root, oai_request *r, oai_error *e) {
  json_t *f = json_object_get(root, "format");
  if (!f || json_is_null(f)) return 0;
  if (json_is_string(f)) {
    if (!json_string_length(f)) return 0;
    if (strcmp(json_string_value(f), "json"))
      return oai_seterr(e, 400, "invalid_value", "format", "'format' must be \"json\" or a JSON schema object");
    return api_json_grammar(&r->grammar, e);
  }
  if (!json_is_object(f)) return oai_seterr(e, 400, "invalid_type", "format", "'format' must be \"json\" or a JSON schema object");
  return api_schema_grammar(f, "format", &r->grammar, e);
}

static bool nonempty(json_t *v) {
  return v && !json_is_null(v) &&
         !((json_is_array(v) && json_array_size(v) == 0) || (json_is_string(v) && json_string_length(v) == 0));
}

/* The top-level members each endpoint reads (honoured, or refused by name
 * unless neutral); any other is a 400 naming it. */
static const char *const k_chat_fields[] = {
    "model", "messages", "stream", "format", "keep_alive", "options", "think", "tools", "logprobs", "top_logprobs",
    "truncate", "shift", NULL};
static const char *const k_generate_fields[] = {
    "model", "prompt", "system", "raw", "stream", "format", "keep_alive", "options", "think", "tools", "logprobs",
    "top_logprobs", "truncate", "shift", "images", "suffix", "template", "context", NULL};
static const char *const k_embed_fields[] = {"model", "input", "truncate", "dimensions", "keep_alive", "options", NULL};
static const char *const k_embeddings_fields[] = {"model", "prompt", "truncate", "dimensions", "keep_alive", "options",
                                                  NULL};
static const char *const k_show_fields[] = {"model", "name", "verbose", "system", "template", "options", NULL};

/* A member that asks for something this server does not do unless its
 * value is false (or 0): logprobs and top_logprobs (not reported here),
 * truncate and shift (a prompt over the context is a 400 and an answer
 * ends at the context, as Ollama does with both false). think is
 * parse_think's. */
static int check_neutral(json_t *root, oai_error *e) {
  static const char *const k_off[] = {"logprobs", "top_logprobs", "truncate", "shift", NULL};
  for (int i = 0; k_off[i]; i++) {
    json_t *v = json_object_get(root, k_off[i]);
    if (!v || json_is_null(v) || json_is_false(v) || (json_is_number(v) && json_number_value(v) == 0)) continue;
    char code[48];
    snprintf(code, sizeof code, "unsupported_%s", k_off[i]);
    return oai_seterr(e, 400, code, k_off[i], "'%s' is not supported by this server (only false%s)", k_off[i],
                      strcmp(k_off[i], "top_logprobs") ? "" : " or 0");
  }
  return 0;
}

/* What both generation endpoints share: model, stream, options, format,
 * keep_alive. nothing: the request has nothing to generate;
 * then, serving a store, keep_alive 0 sets *unload and the model is not
 * loaded. */
static int parse_common(conn *k, struct MHD_Connection *c, oai_request *r, const char *const *known, char *model,
                        bool nothing, bool *unload, oai_error *e) {
  json_t *root = r->root;
  const char *m;
  bool has_keep;
  double keep = 0;
  *unload = false;
  if (oai_check_fields(root, known, e) || check_neutral(root, e)) return PW_EINVAL;
  if (api_str(root, "model", "model", &m, e)) return PW_EINVAL;
  if (!m || !*m) return srv_use_model(k, c, m, false, e); /* 400: 'model' is required */
  snprintf(model, OL_MODEL_MAX, "%s", m);
  r->stream = true; /* Ollama streams unless told not to */
  if (api_bool(root, "stream", "stream", &r->stream, e)) return PW_EINVAL;
  if (api_keep_alive(k, root, &has_keep, &keep, e)) return PW_EINVAL;
  if (nothing && has_keep && keep == 0 && srv_store(srv_server(k))) {
    *unload = true;
    return srv_models_unload(srv_store(srv_server(k)), m, e);
  }
  if (srv_use_model(k, c, m, false, e)) return PW_EINVAL;
  if (parse_options(k, json_object_get(root, "options"), r, e)) return PW_EINVAL;
  return parse_format(root, r, e);
}

/* ---- tools and the conversation ------------------------------------------ */

#define OL_CALL_ID_MAX 256 /* bytes of a call id a client sends */

/* One tool of tools[i], checked against the earlier ones (out) and
 * appended to out in the shape oai_chat_prepare, the grammar and the
 * templates take (type written out when a client left it off). */
static int add_tool(json_t *tool, size_t i, json_t *out, oai_error *e) {
  char param[48];
  snprintf(param, sizeof param, "tools[%zu]", i);
  json_t *type = json_object_get(tool, "type"), *fn = json_object_get(tool, "function");
  if (!json_is_object(tool) || !json_is_object(fn) ||
      (type && !json_is_null(type) && !(json_is_string(type) && !strcmp(json_string_value(type), "function"))))
    return oai_seterr(e, 400, "invalid_value", param, "'%s' must be {\"type\": \"function\", \"function\": {...}}",
                      param);
  const char *key;
  json_t *v;
  json_object_foreach(tool, key, v) {
    if (!json_is_null(v) && strcmp(key, "type") && strcmp(key, "function"))
      return oai_seterr(e, 400, "unsupported_field", param, "'%s.%.40s' is not supported by this server", param, key);
  }
  char where[80];
  snprintf(where, sizeof where, "%s.function", param);
  if (oai_check_function(fn, param, where, e)) return PW_EINVAL;
  json_t *name = json_object_get(fn, "name");
  if (oai_find_tool(out, SIZE_MAX, json_string_value(name)))
    return oai_seterr(e, 400, "invalid_value", param, "tool name '%s' is given twice", json_string_value(name));
  if (json_array_append_new(out, json_pack("{s:s,s:O}", "type", "function", "function", fn)))
    return oai_seterr(e, 500, "internal_error", NULL, "out of memory");
  return 0;
}

/* tools: [{type: "function", function: {name, description, parameters}}]
 * into r->tools. Ollama has no tool_choice: auto. */
static int parse_tools(json_t *t, oai_request *r, oai_error *e) {
  r->tool_choice = OAI_TOOLS_AUTO;
  r->parallel_tool_calls = true;
  if (!nonempty(t)) return 0;
  if (!json_is_array(t)) return oai_seterr(e, 400, "invalid_type", "tools", "'tools' must be an array");
  if (json_array_size(t) > TC_MAX_TOOLS)
    return oai_seterr(e, 400, "invalid_value", "tools", "'tools' holds at most %d tools", TC_MAX_TOOLS);
  return oai_convert_tools(t, add_tool, &r->tools, e);
}

/* A call id given by the conversation's place of the call (message i,
 * call j): the same text every turn, so the rendered prompt's prefix stays
 * the same and is reused. Mistral's templates take ids of exactly 9
 * alphanumerics. */
static void history_call_id(size_t i, size_t j, bool short_ids, char *out, size_t cap) {
  size_t n = i * TC_MAX_CALLS + j;
  if (short_ids) snprintf(out, cap, "%09zu", n % 1000000000u);
  else snprintf(out, cap, "call_%zu", n);
}

/* The calls of the last assistant turn, for the tool messages after it. */
typedef struct ol_pending {
  const char *id, *name; /* views into r->messages */
  bool answered;
} ol_pending;

/* An assistant message's tool_calls (Ollama: arguments an object) as the
 * templates take them (OpenAI's form with arguments an object), into
 * msg.tool_calls; the calls become the pending ones. */
static int history_calls(json_t *calls, const char *param, size_t mi, bool short_ids, json_t *msg, ol_pending *pend,
                         int *n_pend, oai_error *e) {
  if (!json_is_array(calls)) return oai_seterr(e, 400, "invalid_type", param, "'%s' must be an array", param);
  if (json_array_size(calls) > TC_MAX_CALLS)
    return oai_seterr(e, 400, "invalid_value", param, "'%s' holds at most %d calls", param, TC_MAX_CALLS);
  json_t *arr = json_array();
  if (!arr || json_object_set_new(msg, "tool_calls", arr))
    return oai_seterr(e, 500, "internal_error", NULL, "out of memory");
  *n_pend = 0;
  size_t j;
  json_t *c;
  json_array_foreach(calls, j, c) {
    json_t *fn = json_object_get(c, "function");
    json_t *name = json_object_get(fn, "name"), *args = json_object_get(fn, "arguments");
    json_t *id = json_object_get(c, "id"), *type = json_object_get(c, "type");
    json_t *index = json_object_get(fn, "index");
    if (!json_is_object(c) || !json_is_object(fn))
      return oai_seterr(e, 400, "invalid_value", param, "'%s[%zu]' must be {\"function\": {\"name\", \"arguments\"}}",
                        param, j);
    if (!json_is_string(name) || !json_string_length(name) || json_string_length(name) > TC_MAX_NAME)
      return oai_seterr(e, 400, "invalid_value", param, "'%s[%zu].function.name' must be a string of 1..%d bytes",
                        param, j, TC_MAX_NAME);
    if (args && !json_is_null(args) && !json_is_object(args))
      return oai_seterr(e, 400, "invalid_type", param, "'%s[%zu].function.arguments' must be an object", param, j);
    if (id && !json_is_null(id) &&
        (!json_is_string(id) || !json_string_length(id) || json_string_length(id) > OL_CALL_ID_MAX))
      return oai_seterr(e, 400, "invalid_value", param, "'%s[%zu].id' must be a string of 1..%d bytes", param, j,
                        OL_CALL_ID_MAX);
    if (type && !json_is_null(type) && !(json_is_string(type) && !strcmp(json_string_value(type), "function")))
      return oai_seterr(e, 400, "invalid_value", param, "'%s[%zu].type' must be \"function\"", param, j);
    if (index && !json_is_null(index) && !(json_is_integer(index) && json_integer_value(index) >= 0))
      return oai_seterr(e, 400, "invalid_value", param, "'%s[%zu].function.index' must be a non-negative integer",
                        param, j);
    char gen[32];
    if (!json_is_string(id)) history_call_id(mi, j, short_ids, gen, sizeof gen);
    json_t *one = json_pack("{s:s,s:s,s:{s:O,s:o}}", "id", json_is_string(id) ? json_string_value(id) : gen, "type",
                            "function", "function", "name", name, "arguments",
                            json_is_object(args) ? json_incref(args) : json_object());
    if (!one || json_array_append_new(arr, one)) return oai_seterr(e, 500, "internal_error", NULL, "out of memory");
    pend[*n_pend].id = json_string_value(json_object_get(one, "id"));
    pend[*n_pend].name = json_string_value(name);
    pend[*n_pend].answered = false;
    (*n_pend)++;
  }
  return 0;
}

/* A tool message's id and name: its tool_call_id when given, else the
 * earliest unanswered call of the last assistant turn (of its tool_name
 * when given); a result that answers no call still gets an id of its own
 * (a template may require one). */
static int tool_result(json_t *msg, const char *call_id, const char *tool_name, size_t mi, bool short_ids,
                       ol_pending *pend, int n_pend, oai_error *e) {
  int hit = -1;
  for (int k = 0; k < n_pend && hit < 0; k++) {
    if (call_id ? !strcmp(pend[k].id, call_id)
                : !pend[k].answered && (!tool_name || !strcmp(pend[k].name, tool_name)))
      hit = k;
  }
  char gen[32];
  if (hit >= 0) {
    pend[hit].answered = true;
    if (!call_id) call_id = pend[hit].id;
    if (!tool_name) tool_name = pend[hit].name;
  }
  if (!call_id) {
    history_call_id(mi, 0, short_ids, gen, sizeof gen);
    call_id = gen;
  }
  if (json_object_set_new(msg, "tool_call_id", json_string(call_id)) ||
      (tool_name && json_object_set_new(msg, "name", json_string(tool_name))))
    return oai_seterr(e, 500, "internal_error", NULL, "out of memory");
  return 0;
}

/* messages: [{role, content, images?, tool_calls?, tool_name?,
 * tool_call_id?}] into r->messages as the templates take them. */
static int parse_messages(json_t *msgs, bool short_ids, oai_request *r, oai_error *e) {
  ol_pending pend[TC_MAX_CALLS];
  int n_pend = 0;
  size_t i;
  json_t *m;
  json_array_foreach(msgs, i, m) {
    char param[64], p2[96];
    snprintf(param, sizeof param, "messages[%zu]", i);
    if (!json_is_object(m)) return oai_seterr(e, 400, "invalid_type", param, "'%s' must be an object", param);
    const char *role, *content, *tool_name, *call_id;
    snprintf(p2, sizeof p2, "%s.role", param);
    if (api_str(m, "role", p2, &role, e)) return PW_EINVAL;
    if (!role || (strcmp(role, "system") && strcmp(role, "user") && strcmp(role, "assistant") && strcmp(role, "tool")))
      return oai_seterr(e, 400, "invalid_value", p2, "'%s' must be system, user, assistant or tool", p2);
    bool tool = !strcmp(role, "tool");
    snprintf(p2, sizeof p2, "%s.images", param);
    if (nonempty(json_object_get(m, "images")))
      return oai_seterr(e, 400, "unsupported_images", p2,
                        "images are not supported: this server runs text-only models");
    snprintf(p2, sizeof p2, "%s.content", param);
    if (api_str(m, "content", p2, &content, e)) return PW_EINVAL;
    snprintf(p2, sizeof p2, "%s.tool_name", param);
    if (api_str(m, "tool_name", p2, &tool_name, e)) return PW_EINVAL;
    if (tool_name && (!*tool_name || strlen(tool_name) > TC_MAX_NAME))
      return oai_seterr(e, 400, "invalid_value", p2, "'%s' must be a string of 1..%d bytes", p2, TC_MAX_NAME);
    snprintf(p2, sizeof p2, "%s.tool_call_id", param);
    if (api_str(m, "tool_call_id", p2, &call_id, e)) return PW_EINVAL;
    if (call_id && (!*call_id || strlen(call_id) > OL_CALL_ID_MAX))
      return oai_seterr(e, 400, "invalid_value", p2, "'%s' must be a string of 1..%d bytes", p2, OL_CALL_ID_MAX);
    json_t *calls = json_object_get(m, "tool_calls");
    snprintf(p2, sizeof p2, "%s.tool_calls", param);
    if (nonempty(calls) && strcmp(role, "assistant"))
      return oai_seterr(e, 400, "invalid_value", p2, "'%s' is only allowed on assistant messages", p2);
    /* An earlier answer's reasoning, as Ollama's clients send it back:
     * the template's reasoning_content (Qwen3's prints it for the turns
     * after the last user message), as for OpenAI's. */
    json_t *thinking = json_object_get(m, "thinking");
    char p3[96];
    snprintf(p3, sizeof p3, "%s.thinking", param);
    if (thinking && !json_is_null(thinking) && !json_is_string(thinking))
      return oai_seterr(e, 400, "invalid_type", p3, "'%s' must be a string", p3);
    if (nonempty(thinking) && strcmp(role, "assistant"))
      return oai_seterr(e, 400, "invalid_value", p3, "'%s' is only allowed on assistant messages", p3);
    if (api_add_message(r, role, json_string(content ? content : ""), e)) return PW_EINVAL;
    json_t *out = json_array_get(r->messages, json_array_size(r->messages) - 1);
    if (nonempty(thinking) && json_object_set(out, "reasoning_content", thinking))
      return oai_seterr(e, 500, "internal_error", NULL, "out of memory");
    if (nonempty(calls) && history_calls(calls, p2, i, short_ids, out, pend, &n_pend, e)) return PW_EINVAL;
    if (tool && tool_result(out, call_id, tool_name, i, short_ids, pend, n_pend, e)) return PW_EINVAL;
  }
  return 0;
}

/* ---- rendering ---------------------------------------------------------- */

typedef struct ol_ctx {
  char model[OL_MODEL_MAX]; /* the name the client asked for, echoed */
  bool chat;                /* /api/chat (message) or /api/generate (response) */
  uint64_t load_ns;         /* time this request waited for its model to load (store serving) */
  /* chat: the answer split by the template's format (chat/toolcall.h) */
  tc_syntax sx;             /* the model's template */
  bool templated;           /* the prompt went through the template (not generate's raw) */
  bool think_out;           /* the reasoning is returned (think true, a level, or absent) */
  json_t *kwargs;           /* owned: the template variables think sets (r->template_kwargs) */
  tc_parser *p;             /* NULL: the text is the content (or not created yet) */
  bool made;                /* the parser was decided on (at the first text) */
  sbuf *out;                /* during a feed: where chunks go (streamed) */
  bool stream;
  sbuf content;             /* whole answers: the content */
  sbuf thinking;            /* whole answers: the reasoning (think_out) */
  sbuf calls;               /* whole answers: the rendered tool_calls items */
  int n_calls;              /* calls rendered */
  int open;                 /* the parser's index of the call being received; -1 = none */
  char name[TC_MAX_NAME + 1];
  sbuf args;                /* its arguments so far */
  sbuf tmp;
} ol_ctx;

static void ol_ctx_clear(ol_ctx *x) {
  tc_parser_destroy(x->p);
  x->p = NULL;
  sbuf_free(&x->content);
  sbuf_free(&x->thinking);
  json_decref(x->kwargs);
  x->kwargs = NULL;
  sbuf_free(&x->calls);
  sbuf_free(&x->args);
  sbuf_free(&x->tmp);
}
static void ol_ctx_free(void *ctx) {
  if (!ctx) return;
  ol_ctx_clear(ctx);
  free(ctx);
}

static void put_head(const ol_ctx *x, sbuf *out) {
  char t[48];
  api_iso_time(t, sizeof t);
  sbuf_puts(out, "{\"model\":");
  sbuf_json_str(out, x->model, strlen(x->model));
  sbuf_printf(out, ",\"created_at\":\"%s\"", t);
}

/* message (chat) or response (generate); think: reasoning, written (as
 * Ollama, only when there is some) in message.thinking or thinking;
 * calls: rendered tool_calls items. */
static void put_message(const ol_ctx *x, const char *text, size_t n, const char *think, size_t tn, const sbuf *calls,
                        sbuf *out) {
  if (x->chat) {
    sbuf_puts(out, ",\"message\":{\"role\":\"assistant\",\"content\":");
    sbuf_json_str(out, text, n);
    if (tn) {
      sbuf_puts(out, ",\"thinking\":");
      sbuf_json_str(out, think, tn);
    }
    if (calls && calls->len) {
      sbuf_puts(out, ",\"tool_calls\":[");
      sbuf_put(out, calls->data, calls->len);
      sbuf_puts(out, "]");
    }
    sbuf_puts(out, "}");
  } else {
    sbuf_puts(out, ",\"response\":");
    sbuf_json_str(out, text, n);
    if (tn) {
      sbuf_puts(out, ",\"thinking\":");
      sbuf_json_str(out, think, tn);
    }
  }
}
static void put_text(const ol_ctx *x, const char *text, size_t n, sbuf *out) {
  put_message(x, text, n, NULL, 0, NULL, out);
}

/* done, done_reason and the counters; durations in nanoseconds. The
 * prompt's evaluation is timed from arrival to the first token (queueing
 * included), generation from there to the end. */
static void put_done(const gen_view *v, sbuf *out) {
  const ol_ctx *x = v->ctx;
  uint64_t total = v->t_end > v->t0 ? v->t_end - v->t0 : 0;
  uint64_t first = v->t_first ? v->t_first - v->t0 : total;
  sbuf_printf(out,
              ",\"done_reason\":\"%s\",\"done\":true,\"total_duration\":%llu,\"load_duration\":%llu,"
              "\"prompt_eval_count\":%d,\"prompt_eval_duration\":%llu,\"eval_count\":%d,\"eval_duration\":%llu",
              v->finish == ENGINE_FINISH_LENGTH ? "length" : "stop", (unsigned long long)total,
              (unsigned long long)(x ? x->load_ns : 0),
              v->usage.prompt_tokens, (unsigned long long)first, v->usage.completion_tokens,
              (unsigned long long)(total - first));
  oai_put_receipt(v->o, out);
}

/* JSON text s[0..n) without the white space between its tokens (a
 * model's call may span lines; an NDJSON chunk may not). */
static void compact_json(const char *s, size_t n, sbuf *out) {
  bool in_str = false, esc = false;
  for (size_t i = 0; i < n; i++) {
    char ch = s[i];
    if (in_str) {
      if (esc) esc = false;
      else if (ch == '\\') esc = true;
      else if (ch == '"') in_str = false;
    } else if (ch == ' ' || ch == '\n' || ch == '\r' || ch == '\t') {
      continue;
    } else if (ch == '"') {
      in_str = true;
    }
    sbuf_put(out, &ch, 1);
  }
}

/* The open call is complete: one tool_calls item as Ollama writes it,
 * {"id", "function": {"index", "name", "arguments": {...}}}, sent as its
 * own chunk when streaming. Its arguments are the model's own object,
 * compacted (not re-encoded: numbers keep their digits); arguments that
 * are not a whole object (a call cut off by num_predict) leave it out. */
static void close_call(ol_ctx *x) {
  if (x->open < 0) return;
  x->open = -1;
  sbuf_clear(&x->tmp);
  compact_json(x->args.data ? x->args.data : "", x->args.len, &x->tmp);
  json_t *v = x->tmp.len ? json_loadb(x->tmp.data, x->tmp.len, JSON_DECODE_INT_AS_REAL | JSON_ALLOW_NUL, NULL) : NULL;
  bool whole = json_is_object(v);
  json_decref(v);
  sbuf_clear(&x->args);
  if (!whole) return;
  sbuf item = {0};
  char id[40];
  /* Mistral's templates take back only ids of 9 alphanumerics. */
  if (x->sx.format == TC_MISTRAL) oai_new_id("", id, 10);
  else oai_new_id("call_", id, 14); /* as Ollama's: call_ and 8 characters */
  sbuf_puts(&item, "{\"id\":");
  sbuf_json_str(&item, id, strlen(id));
  sbuf_printf(&item, ",\"function\":{\"index\":%d,\"name\":", x->n_calls++);
  sbuf_json_str(&item, x->name, strlen(x->name));
  sbuf_puts(&item, ",\"arguments\":");
  sbuf_put(&item, x->tmp.data, x->tmp.len);
  sbuf_puts(&item, "}}");
  if (item.oom) x->tmp.oom = true;
  if (x->stream) {
    put_head(x, x->out);
    put_message(x, "", 0, NULL, 0, &item, x->out);
    sbuf_puts(x->out, ",\"done\":false}\n");
    if (item.oom) x->out->oom = true;
  } else {
    if (x->calls.len) sbuf_puts(&x->calls, ",");
    sbuf_put(&x->calls, item.data ? item.data : "", item.len);
    if (item.oom) x->calls.oom = true;
  }
  sbuf_free(&item);
}

static void on_event(void *ctx, const tc_event *ev) {
  ol_ctx *x = ctx;
  if (ev->type == TC_EV_CALL_ARGS && ev->index == x->open) {
    sbuf_put(&x->args, ev->text, ev->len);
    return;
  }
  close_call(x); /* anything else comes after the open call's end */
  if (ev->type == TC_EV_CALL_START) {
    x->open = ev->index;
    snprintf(x->name, sizeof x->name, "%s", ev->name);
    sbuf_clear(&x->args);
  } else if (ev->type == TC_EV_CONTENT) {
    if (!x->stream) {
      sbuf_put(&x->content, ev->text, ev->len);
    } else {
      put_head(x, x->out);
      put_text(x, ev->text, ev->len, x->out);
      sbuf_puts(x->out, ",\"done\":false}\n");
    }
  } else if (ev->type == TC_EV_REASONING && x->think_out) {
    if (!x->stream) {
      sbuf_put(&x->thinking, ev->text, ev->len);
    } else {
      put_head(x, x->out);
      put_message(x, "", 0, ev->text, ev->len, NULL, x->out);
      sbuf_puts(x->out, ",\"done\":false}\n");
    }
  }
  /* other reasoning: not returned (think false: the model was told not to think) */
}

/* Decides, at the answer's first text, whether it is split: as chatout
 * decides for OpenAI (tools in use, a <think> template, gpt-oss channels);
 * generate's templated answers too (reasoning), its raw ones never. */
static int ensure_parser(ol_ctx *x, const oai_request *r) {
  if (x->made) return 0;
  x->made = true;
  x->open = -1;
  if (!x->templated || (!r->tools_active && !x->sx.think && x->sx.format != TC_HARMONY)) return 0;
  char err[PW_ERRMAX];
  return tc_parser_create(&x->sx, r->tools_active ? r->tools : NULL, r->in_reasoning, r->bare_call,
                          r->tools_active && r->grammar, &x->p, err);
}

/* Feeds text to the parser (final: the answer is over); a call is sent
 * once the parser has it whole. */
static void feed(ol_ctx *x, const char *text, size_t n, bool final, bool stream, sbuf *out) {
  x->stream = stream;
  x->out = out;
  if (tc_parser_feed(x->p, text, n, final, on_event, x) < 0) out->oom = true;
  if (x->open >= 0 && (final || tc_parser_calls(x->p) > x->open)) close_call(x);
  x->out = NULL;
}

static void ol_begin(const gen_view *v, sbuf *out) {
  if (ensure_parser(v->ctx, v->r)) out->oom = true;
}
static void ol_delta(const gen_view *v, const char *text, size_t n, const oai_logprobs *lp, sbuf *out) {
  (void)lp;
  ol_ctx *x = v->ctx;
  if (!n) return;
  if (ensure_parser(x, v->r)) {
    out->oom = true;
    return;
  }
  if (x->p) {
    feed(x, text, n, false, true, out);
    return;
  }
  put_head(x, out);
  put_text(x, text, n, out);
  sbuf_puts(out, ",\"done\":false}\n");
}
static void ol_end(const gen_view *v, sbuf *out) {
  ol_ctx *x = v->ctx;
  if (x->p) feed(x, "", 0, true, true, out); /* text held back for a marker that never came */
  put_head(x, out);
  put_text(x, "", 0, out);
  put_done(v, out);
  sbuf_puts(out, "}\n");
}
static void ol_error(const gen_view *v, const oai_error *e, sbuf *out) {
  (void)v;
  ollama_render_error(e, out);
  sbuf_puts(out, "\n");
}
static void ol_complete(const gen_view *v, sbuf *out) {
  ol_ctx *x = v->ctx;
  if (ensure_parser(x, v->r)) {
    out->oom = true;
    return;
  }
  put_head(x, out);
  if (x->p) {
    feed(x, v->text, v->text_len, true, false, out);
    if (x->content.oom || x->thinking.oom || x->calls.oom || x->tmp.oom) out->oom = true;
    put_message(x, x->content.data ? x->content.data : "", x->content.len, x->thinking.data, x->thinking.len,
                &x->calls, out);
  } else {
    put_text(x, v->text, v->text_len, out);
  }
  put_done(v, out);
  sbuf_puts(out, "}");
}

static const gen_api ol_api = {
    .stream_ctype = "application/x-ndjson",
    .begin = ol_begin,
    .delta = ol_delta,
    .end = ol_end,
    .error = ol_error,
    .keepalive = NULL, /* NDJSON has no comment line: silence until the next token */
    .complete = ol_complete,
    .ctx_free = ol_ctx_free,
    .receipt_endpoint = "ollama",
};

int ollama_chat_render_text(const tc_syntax *sx, const oai_request *r, const char *text, size_t n, size_t piece,
                            engine_finish finish, sbuf *out) {
  return ollama_render_text_think(sx, r, true, false, text, n, piece, finish, out);
}

int ollama_render_text_think(const tc_syntax *sx, const oai_request *r, bool chat, bool think, const char *text,
                             size_t n, size_t piece, engine_finish finish, sbuf *out) {
  ol_ctx x;
  memset(&x, 0, sizeof x);
  snprintf(x.model, sizeof x.model, "%s", "test");
  x.chat = chat;
  x.templated = true;
  x.think_out = think;
  x.sx = *sx;
  oai_resp o;
  oai_resp_init(&o, OAI_CHAT, "test", NULL);
  api_render_text(&ol_api, &x, r, &o, text, n, piece, finish, out);
  ol_ctx_clear(&x);
  return out->oom ? PW_ENOMEM : 0;
}

/* The answer Ollama gives to a request with nothing to generate: it only
 * loads the model (done_reason "load"), or unloads it (keep_alive 0). */
static enum MHD_Result load_only(conn *k, struct MHD_Connection *c, const ol_ctx *x, bool unload) {
  sbuf out = {0};
  put_head(x, &out);
  put_text(x, "", 0, &out);
  sbuf_printf(&out, ",\"done_reason\":\"%s\",\"done\":true}", unload ? "unload" : "load");
  return srv_reply_json(k, c, 200, &out);
}

/* think, once the model is bound (its template decides; see the header):
 * what the template gets (x->kwargs as r->template_kwargs,
 * r->reasoning_effort) and whether the reasoning is returned
 * (x->think_out). x->sx and x->templated are set. */
static int parse_think(conn *k, json_t *root, ol_ctx *x, oai_request *r, oai_error *e) {
  json_t *t = json_object_get(root, "think");
  bool harmony = x->sx.format == TC_HARMONY;
  bool reasons = x->sx.think || harmony; /* the answer may hold reasoning the parser splits off */
  if (!t || json_is_null(t)) {
    /* Ollama: "thinking is enabled by default ... for supported models";
     * the prompt stays the template's default. */
    x->think_out = reasons && x->templated;
    return 0;
  }
  const char *level = NULL;
  if (json_is_string(t)) {
    level = json_string_value(t);
    if (!strcmp(level, "max")) level = "high"; /* Ollama's highest level; gpt-oss's is high */
    else if (strcmp(level, "low") && strcmp(level, "medium") && strcmp(level, "high"))
      return oai_seterr(e, 400, "invalid_value", "think",
                        "invalid think value: \"%.40s\" (must be \"high\", \"medium\", \"low\", \"max\", true, or false)",
                        level);
  } else if (!json_is_boolean(t)) {
    return oai_seterr(e, 400, "invalid_type", "think",
                      "think must be a boolean or string (\"high\", \"medium\", \"low\", \"max\", true, or false)");
  }
  bool on = level || json_is_true(t);
  if (!x->templated) {
    /* raw: no template to tell, and the text is returned as written */
    if (on) return oai_seterr(e, 400, "invalid_value", "think", "'think' cannot be used with 'raw' (no template is applied)");
    return 0;
  }
  if (on && !reasons) return oai_seterr(e, 400, "unsupported_think", "think", "\"%s\" does not support thinking", x->model);
  if (level) {
    if (!x->sx.reasoning_effort)
      return oai_seterr(e, 400, "unsupported_think", "think",
                        "think value \"%.40s\" is not supported for this model: its chat template takes no "
                        "reasoning effort (use true or false)",
                        json_string_value(t));
    r->reasoning_effort = level;
  }
  /* false is honoured only where the template can turn thinking off:
   * otherwise the model would think anyway and its reasoning be dropped */
  const char *src = srv_prompt(k)->template_src;
  bool gated = src && strstr(src, "enable_thinking");
  if (!on && reasons && !gated)
    return oai_seterr(e, 400, "unsupported_think", "think",
                      "'think' false is not supported for this model: its chat template cannot turn thinking off%s",
                      harmony ? " (gpt-oss takes \"low\", \"medium\" or \"high\")" : " (omit think)");
  x->think_out = on;
  if (reasons) {
    /* as chat_template_kwargs reach it for OpenAI (oai_chat_prepare) */
    if (!(x->kwargs = json_pack("{s:b}", "enable_thinking", on)))
      return oai_seterr(e, 500, "internal_error", NULL, "out of memory");
    r->template_kwargs = x->kwargs;
  }
  return 0;
}

static enum MHD_Result run(conn *k, struct MHD_Connection *c, oai_request *r, ol_ctx *x) {
  oai_resp o;
  x->load_ns = srv_load_ns(k);
  oai_resp_init(&o, r->kind, engine_model_id(srv_engine(k)), engine_model_sha256(srv_engine(k)));
  return srv_generate(k, c, r, &o, &ol_api, x);
}

enum MHD_Result ollama_chat(conn *k, struct MHD_Connection *c) {
  oai_request r;
  oai_error e;
  size_t len;
  const char *body = srv_body(k, &len);
  ol_ctx *x = calloc(1, sizeof *x);
  if (!x) {
    oai_seterr(&e, 500, "internal_error", NULL, "out of memory");
    return srv_reply_error(k, c, &e);
  }
  x->chat = true;
  bool unload;
  if (api_parse_body(body, len, OAI_CHAT, &r, &e)) goto fail;
  json_t *msgs = json_object_get(r.root, "messages");
  if (msgs && !json_is_null(msgs) && !json_is_array(msgs)) {
    oai_seterr(&e, 400, "invalid_type", "messages", "'messages' must be an array");
    goto fail;
  }
  bool nothing = !msgs || json_is_null(msgs) || json_array_size(msgs) == 0;
  if (parse_common(k, c, &r, k_chat_fields, x->model, nothing, &unload, &e)) goto fail;
  if (parse_tools(json_object_get(r.root, "tools"), &r, &e)) goto fail;
  if (r.tools && r.grammar) {
    /* one grammar per answer: the calls' (lazy) or the format's */
    oai_seterr(&e, 400, "unsupported_format", "format", "'format' cannot be combined with 'tools' by this server");
    goto fail;
  }
  if (nothing) {
    enum MHD_Result res = load_only(k, c, x, unload);
    ol_ctx_free(x);
    oai_request_free(&r);
    return res;
  }
  /* The model's tool-call format (detected when it was loaded): call ids
   * in the conversation and the answer's parser follow it. */
  x->sx = *srv_tool_syntax(k);
  x->templated = true;
  if (parse_think(k, r.root, x, &r, &e)) goto fail;
  if (parse_messages(msgs, x->sx.format == TC_MISTRAL, &r, &e)) goto fail;
  return run(k, c, &r, x);
fail:
  ol_ctx_free(x);
  oai_request_free(&r);
  return srv_reply_error(k, c, &e);
}

enum MHD_Result ollama_generate(conn *k, struct MHD_Connection *c) {
  oai_request r;
  oai_error e;
  size_t len;
  const char *body = srv_body(k, &len);
  ol_ctx *x = calloc(1, sizeof *x);
  if (!x) {
    oai_seterr(&e, 500, "internal_error", NULL, "out of memory");
    return srv_reply_error(k, c, &e);
  }
  if (api_parse_body(body, len, OAI_CHAT, &r, &e)) goto fail;
  json_t *root = r.root;
  json_t *pj = json_object_get(root, "prompt");
  bool unload, nothing = !pj || json_is_null(pj) || (json_is_string(pj) && !json_string_length(pj));
  if (parse_common(k, c, &r, k_generate_fields, x->model, nothing, &unload, &e)) goto fail;
  if (nonempty(json_object_get(root, "tools"))) {
    /* Ollama's generate has no tools (its chat has) */
    oai_seterr(&e, 400, "unsupported_tools", "tools", "'tools' is not supported by /api/generate; use /api/chat");
    goto fail;
  }
  static const char *const refused[] = {"images", "suffix", "template", "context", NULL};
  for (int i = 0; refused[i]; i++)
    if (nonempty(json_object_get(root, refused[i]))) {
      oai_seterr(&e, 400, !strcmp(refused[i], "images") ? "unsupported_images" : "unsupported_field", refused[i],
                 !strcmp(refused[i], "images") ? "images are not supported: this server runs text-only models"
                                               : "'%s' is not supported by this server",
                 refused[i]);
      goto fail;
    }
  const char *prompt, *system;
  bool raw = false;
  if (api_str(root, "prompt", "prompt", &prompt, &e) || api_str(root, "system", "system", &system, &e) ||
      api_bool(root, "raw", "raw", &raw, &e))
    goto fail;
  if (!prompt || !*prompt) {
    enum MHD_Result res = load_only(k, c, x, unload);
    ol_ctx_free(x);
    oai_request_free(&r);
    return res;
  }
  if (raw) {
    /* The prompt as it is, no template: a text completion. */
    if (system && *system) {
      oai_seterr(&e, 400, "invalid_value", "system", "'system' cannot be used with 'raw' (no template is applied)");
      goto fail;
    }
    r.kind = OAI_COMPLETION;
    r.text = prompt;
    r.text_len = json_string_length(json_object_get(root, "prompt"));
  } else {
    if (system && *system && api_add_message(&r, "system", json_string(system), &e)) goto fail;
    if (api_add_message(&r, "user", json_incref(json_object_get(root, "prompt")), &e)) goto fail;
  }
  /* Through the template, the answer is split as a chat's: its reasoning
   * goes to thinking (or nowhere, think false), never into response. */
  x->sx = *srv_tool_syntax(k);
  x->templated = !raw;
  if (parse_think(k, root, x, &r, &e)) goto fail;
  return run(k, c, &r, x);
fail:
  ol_ctx_free(x);
  oai_request_free(&r);
  return srv_reply_error(k, c, &e);
}

/* ---- embeddings ---------------------------------------------------------- */

typedef struct ol_embed {
  const char *model; /* view */
  bool legacy;       /* /api/embeddings: one "embedding" */
  uint64_t load_ns;  /* time waited for the model to load */
} ol_embed;

static void emb_begin(void *ctx, sbuf *out) {
  ol_embed *x = ctx;
  sbuf_puts(out, x->legacy ? "{\"embedding\":" : "{\"model\":");
  if (!x->legacy) {
    sbuf_json_str(out, x->model, strlen(x->model));
    sbuf_puts(out, ",\"embeddings\":[");
  }
}
static void emb_item(void *ctx, size_t index, const float *vec, int n, sbuf *out) {
  ol_embed *x = ctx;
  if (index && !x->legacy) sbuf_puts(out, ",");
  sbuf_puts(out, "[");
  for (int i = 0; i < n; i++) {
    if (i) sbuf_puts(out, ",");
    sbuf_json_num(out, vec[i]);
  }
  sbuf_puts(out, "]");
}
static void emb_end(void *ctx, long long prompt_tokens, uint64_t t0, uint64_t t_end, const oai_resp *ro, sbuf *out) {
  ol_embed *x = ctx;
  if (!x->legacy)
    sbuf_printf(out, "],\"total_duration\":%llu,\"load_duration\":%llu,\"prompt_eval_count\":%lld",
                (unsigned long long)(t_end - t0), (unsigned long long)x->load_ns, prompt_tokens);
  oai_put_receipt(ro, out);
  sbuf_puts(out, "}");
}
static const embed_api ol_embed_api = {emb_begin, emb_item, emb_end};

static enum MHD_Result embed(conn *k, struct MHD_Connection *c, bool legacy) {
  oai_request r;
  oai_error e;
  size_t len;
  const char *body = srv_body(k, &len);
  if (api_parse_body(body, len, OAI_EMBEDDING, &r, &e)) return srv_reply_error(k, c, &e);
  if (oai_check_fields(r.root, legacy ? k_embeddings_fields : k_embed_fields, &e)) {
    oai_request_free(&r);
    return srv_reply_error(k, c, &e);
  }
  const char *m;
  bool truncate = true;
  long long dims;
  bool has_dims = false;
  const char *key = legacy ? "prompt" : "input";
  json_t *in = json_object_get(r.root, key);
  bool has_keep;
  double keep;
  if (api_str(r.root, "model", "model", &m, &e) || api_keep_alive(k, r.root, &has_keep, &keep, &e) ||
      srv_use_model(k, c, m, false, &e))
    goto fail;
  if (api_bool(r.root, "truncate", "truncate", &truncate, &e)) goto fail;
  if (api_int(r.root, "dimensions", "dimensions", 1, 1 << 20, &dims, &has_dims, &e)) goto fail;
  if (has_dims && dims != engine_n_embd(srv_engine(k))) {
    oai_seterr(&e, 400, "unsupported_dimensions", "dimensions",
               "'dimensions' must be omitted or equal the model's embedding size %d", engine_n_embd(srv_engine(k)));
    goto fail;
  }
  json_t *opts = json_object_get(r.root, "options");
  if (opts && !json_is_null(opts) && (!json_is_object(opts) || json_object_size(opts))) {
    oai_seterr(&e, 400, "unsupported_option", "options", "'options' do not apply to embeddings here; omit them");
    goto fail;
  }
  if (!(r.inputs = json_array())) {
    oai_seterr(&e, 500, "internal_error", NULL, "out of memory");
    goto fail;
  }
  if (json_is_string(in) && json_string_length(in)) {
    json_array_append(r.inputs, in);
  } else if (!legacy && json_is_array(in) && json_array_size(in) > 0 && json_array_size(in) <= OAI_MAX_INPUTS) {
    size_t i;
    json_t *v;
    json_array_foreach(in, i, v) {
      if (!json_is_string(v) || !json_string_length(v)) {
        oai_seterr(&e, 400, "invalid_type", "input", "'input' must be a non-empty string or an array of them");
        goto fail;
      }
      json_array_append(r.inputs, v);
    }
  } else {
    oai_seterr(&e, 400, in ? "invalid_value" : "missing_field", key,
               legacy ? "'prompt' must be a non-empty string"
                      : "'input' must be a non-empty string or an array of at most 2048 of them");
    goto fail;
  }
  ol_embed x = {m, legacy, srv_load_ns(k)};
  return srv_embed(k, c, &r, truncate, &ol_embed_api, &x);
fail:
  oai_request_free(&r);
  return srv_reply_error(k, c, &e);
}

enum MHD_Result ollama_embed(conn *k, struct MHD_Connection *c) { return embed(k, c, false); }
enum MHD_Result ollama_embeddings(conn *k, struct MHD_Connection *c) { return embed(k, c, true); }

/* ---- model listings ------------------------------------------------------ */

/* Ollama names carry a tag; a name without one is "<name>:latest". */
static void put_name(const char *id, sbuf *out) {
  char name[OL_MODEL_MAX + 8];
  snprintf(name, sizeof name, strchr(id, ':') ? "%s" : "%s:latest", id);
  sbuf_puts(out, "\"name\":");
  sbuf_json_str(out, name, strlen(name));
  sbuf_puts(out, ",\"model\":");
  sbuf_json_str(out, name, strlen(name));
}

static void put_time(long long unix_s, const char *key, sbuf *out) {
  time_t t = (time_t)unix_s;
  struct tm tm;
  gmtime_r(&t, &tm);
  char d[40];
  strftime(d, sizeof d, "%Y-%m-%dT%H:%M:%SZ", &tm);
  sbuf_printf(out, ",\"%s\":\"%s\"", key, d);
}

/* What a GGUF-served model can say of itself through the engine. */
static void put_model(conn *k, bool running, sbuf *out) {
  server *s = srv_server(k);
  engine *en = srv_engine(k);
  sbuf_puts(out, "{");
  put_name(engine_model_id(en), out);
  if (!running) put_time(srv_started(s), "modified_at", out);
  sbuf_printf(out, ",\"size\":%llu,\"digest\":\"%s\"", (unsigned long long)engine_model_size(en), engine_model_sha256(en));
  sbuf_puts(out, ",\"details\":{\"parent_model\":\"\",\"format\":\"gguf\",\"family\":\"\",\"families\":null,"
                 "\"parameter_size\":\"\",\"quantization_level\":\"\"}");
  if (running) {
    /* Loaded for the server's life: no expiry to report but a far one. */
    sbuf_printf(out, ",\"expires_at\":\"2999-12-31T23:59:59Z\",\"size_vram\":0,\"context_length\":%d",
                engine_n_ctx(en));
  }
  sbuf_puts(out, "}");
}

enum MHD_Result ollama_tags(conn *k, struct MHD_Connection *c) {
  sbuf out = {0};
  if (srv_store(srv_server(k))) {
    srv_models_render_tags(srv_store(srv_server(k)), &out);
    return srv_reply_json(k, c, 200, &out);
  }
  sbuf_puts(&out, "{\"models\":[");
  put_model(k, false, &out);
  sbuf_puts(&out, "]}");
  return srv_reply_json(k, c, 200, &out);
}

enum MHD_Result ollama_ps(conn *k, struct MHD_Connection *c) {
  sbuf out = {0};
  if (srv_store(srv_server(k))) {
    srv_models_render_ps(srv_store(srv_server(k)), true, &out);
    return srv_reply_json(k, c, 200, &out);
  }
  sbuf_puts(&out, "{\"models\":[");
  put_model(k, true, &out);
  sbuf_puts(&out, "]}");
  return srv_reply_json(k, c, 200, &out);
}

enum MHD_Result ollama_version(conn *k, struct MHD_Connection *c) {
  sbuf out = {0};
  sbuf_printf(&out, "{\"version\":\"%s\"}", pw_version());
  return srv_reply_json(k, c, 200, &out);
}

enum MHD_Result ollama_show(conn *k, struct MHD_Connection *c) {
  server *s = srv_server(k);
  oai_request r;
  oai_error e;
  size_t len;
  const char *body = srv_body(k, &len);
  if (api_parse_body(body, len, OAI_CHAT, &r, &e)) return srv_reply_error(k, c, &e);
  const char *m = NULL, *name = NULL;
  bool verbose = false;
  /* system, template and options would change what Ollama shows (its
   * modelfile and parameters): refused unless empty. */
  static const char *const refused[] = {"system", "template", "options", NULL};
  int rc = oai_check_fields(r.root, k_show_fields, &e);
  for (int i = 0; !rc && refused[i]; i++) {
    json_t *v = json_object_get(r.root, refused[i]);
    if (nonempty(v) && !(json_is_object(v) && !json_object_size(v)))
      rc = oai_seterr(&e, 400, "unsupported_field", refused[i], "'%s' is not supported by /api/show here", refused[i]);
  }
  if (rc || api_str(r.root, "model", "model", &m, &e) || api_str(r.root, "name", "name", &name, &e) ||
      api_bool(r.root, "verbose", "verbose", &verbose, &e) || srv_use_model(k, c, m ? m : name, false, &e)) {
    oai_request_free(&r);
    return srv_reply_error(k, c, &e);
  }
  oai_request_free(&r);
  engine *en = srv_engine(k);
  const prompt_builder *pb = srv_prompt(k);
  sbuf out = {0};
  sbuf_puts(&out, "{\"license\":\"\",\"modelfile\":");
  char mf[OL_MODEL_MAX + 64];
  snprintf(mf, sizeof mf, "FROM %s\n", engine_model_id(en));
  sbuf_json_str(&out, mf, strlen(mf));
  sbuf_puts(&out, ",\"parameters\":\"\",\"template\":");
  const char *t = pb->template_src ? pb->template_src : "";
  sbuf_json_str(&out, t, strlen(t));
  sbuf_puts(&out, ",\"details\":{\"parent_model\":\"\",\"format\":\"gguf\",\"family\":\"\",\"families\":null,"
                  "\"parameter_size\":\"\",\"quantization_level\":\"\"}");
  sbuf_puts(&out, ",\"model_info\":{\"general.name\":");
  sbuf_json_str(&out, engine_model_id(en), strlen(engine_model_id(en)));
  sbuf_printf(&out, ",\"general.file_sha256\":\"%s\",\"power.context_length\":%d,\"power.embedding_length\":%d}",
              engine_model_sha256(en), engine_n_ctx(en), engine_n_embd(en));
  /* an encoder embeds (or, a reranker, scores) but does not generate */
  sbuf_puts(&out, !engine_is_encoder(en)                         ? ",\"capabilities\":[\"completion\",\"embedding\""
                  : engine_get_pooling(en) == ENGINE_POOL_RANK ? ",\"capabilities\":["
                                                               : ",\"capabilities\":[\"embedding\"");
  /* "tools" as Ollama says it: the template has a tool-call format this
   * server parses (clients look for it before they send tools) */
  if (!engine_is_encoder(en) && srv_tool_syntax(k)->format != TC_NONE) sbuf_puts(&out, ",\"tools\"");
  /* "thinking": the template has reasoning the answer's parser splits off
   * (what think true needs) */
  if (!engine_is_encoder(en) && (srv_tool_syntax(k)->think || srv_tool_syntax(k)->format == TC_HARMONY))
    sbuf_puts(&out, ",\"thinking\"");
  sbuf_puts(&out, "]");
  put_time(srv_started(s), "modified_at", &out);
  sbuf_puts(&out, "}");
  return srv_reply_json(k, c, 200, &out);
}
