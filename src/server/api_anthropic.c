/* api_anthropic.c - Anthropic's Messages API: POST /v1/messages (streamed
 * as Anthropic's server-sent events, or one message object) and POST
 * /v1/messages/count_tokens. The request becomes an oai_request that runs
 * through the one generation core (api.h); this file reads Anthropic's
 * fields and writes Anthropic's bodies and errors
 * ({"type":"error","error":{"type":...,"message":...}}).
 *
 * Honoured: model, messages (user/assistant turns whose content is a
 * string or text blocks), system (a string or text blocks), max_tokens
 * (required), stop_sequences, temperature, top_p, top_k, stream, metadata
 * (accepted; nothing in it changes the answer), cache_control on blocks
 * (a hint; accepted), and the top-level cache_control (the same hint),
 * service_tier auto/standard_only, speed "standard". Refused with a 400
 * naming the field: tools, tool_choice, thinking, container, diagnostics,
 * inference_geo, output_config, speed "fast", non-text blocks (image,
 * document, tool_use, tool_result, ...), and any top-level field not
 * listed in k_message_fields / k_count_fields ("x: Extra inputs are not
 * permitted", as Anthropic answers).
 * stop_reason is "stop_sequence" (with stop_sequence set) when one of the
 * stop sequences ended the text, "end_turn" at the model's end of turn,
 * "max_tokens" at the limit.
 * What it is not: tool use (to come with the server's tool calls). */
#include "server/api.h"

#include "base/error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *err_type(int status) {
  switch (status) {
  case 400: return "invalid_request_error";
  case 401: return "authentication_error";
  case 403: return "permission_error";
  case 404: return "not_found_error";
  case 413: return "request_too_large";
  case 429: return "rate_limit_error";
  case 503: return "overloaded_error";
  case 408: return "timeout_error";
  default: return status >= 500 ? "api_error" : "invalid_request_error";
  }
}

void anth_render_error(const oai_error *e, sbuf *out) {
  sbuf_printf(out, "{\"type\":\"error\",\"error\":{\"type\":\"%s\",\"message\":", err_type(e->status));
  sbuf_json_str(out, e->message, strlen(e->message));
  sbuf_puts(out, "}}");
}

static const char *const k_text_blocks[] = {"text", NULL};

/* The top-level members of a Messages request and of a count_tokens one:
 * every name parse_request, parse_turns and check_options read (honoured,
 * accepted as a hint, or refused by name). Anything else is refused as
 * Anthropic refuses it, naming the field. */
static const char *const k_message_fields[] = {
    "model", "max_tokens", "messages", "system", "stop_sequences", "temperature", "top_p", "top_k", "stream",
    "metadata", "service_tier", "thinking", "tools", "tool_choice", "cache_control", "container", "diagnostics",
    "inference_geo", "output_config", "speed", NULL};
static const char *const k_count_fields[] = {"model", "messages", "system", "thinking", "tools", "tool_choice",
                                             "cache_control", "output_config", "speed", NULL};

static bool present(json_t *root, const char *key) {
  json_t *v = json_object_get(root, key);
  return v && !json_is_null(v);
}

/* Present and asking for something: not null, {} or []. */
static bool nonempty(json_t *root, const char *key) {
  json_t *v = json_object_get(root, key);
  return v && !json_is_null(v) &&
         !((json_is_object(v) && !json_object_size(v)) || (json_is_array(v) && !json_array_size(v)));
}

static int check_known(json_t *root, const char *const *known, oai_error *e) {
  const char *key = oai_unknown_member(root, known);
  if (!key) return 0;
  oai_unknown_field(e, key);
  snprintf(e->message, sizeof e->message,
           "%.64s: Extra inputs are not permitted (this server refuses the fields it does not know rather than ignore "
           "them)",
           key);
  return PW_EINVAL;
}

/* Members both endpoints share beyond the turns: the top-level
 * cache_control (a hint, as on blocks: reuse here is automatic), speed
 * (one speed), and what this server does not do. */
static int check_options(json_t *root, oai_error *e) {
  json_t *cc = json_object_get(root, "cache_control");
  if (cc && !json_is_null(cc) && !json_is_object(cc))
    return oai_seterr(e, 400, "invalid_type", "cache_control", "cache_control: must be an object");
  const char *speed;
  if (api_str(root, "speed", "speed", &speed, e)) return PW_EINVAL;
  if (speed && strcmp(speed, "standard"))
    return oai_seterr(e, 400, "unsupported_speed", "speed", "speed: only 'standard' is supported by this server");
  static const char *const refused[] = {"container", "diagnostics", "inference_geo", "output_config", NULL};
  for (int i = 0; refused[i]; i++)
    if (nonempty(root, refused[i]))
      return oai_seterr(e, 400, "unsupported_field", refused[i], "%s: not supported by this server", refused[i]);
  return 0;
}

/* system + messages into r->messages. */
static int parse_turns(oai_request *r, bool need_max_tokens, oai_error *e) {
  json_t *root = r->root;
  json_t *sys = json_object_get(root, "system");
  if (sys && !json_is_null(sys)) {
    json_t *text;
    if (api_content_text(sys, "system", k_text_blocks, &text, e)) return PW_EINVAL;
    if (json_string_length(text) && api_add_message(r, "system", text, e)) return PW_EINVAL;
    if (!json_string_length(text)) json_decref(text);
  }
  json_t *msgs = json_object_get(root, "messages");
  if (!msgs) return oai_seterr(e, 400, "missing_field", "messages", "messages: Field required");
  if (!json_is_array(msgs)) return oai_seterr(e, 400, "invalid_type", "messages", "messages: must be an array");
  if (!json_array_size(msgs)) return oai_seterr(e, 400, "invalid_value", "messages", "messages: at least one message is required");
  size_t i;
  json_t *m;
  json_array_foreach(msgs, i, m) {
    char param[64];
    snprintf(param, sizeof param, "messages.%zu", i);
    if (!json_is_object(m)) return oai_seterr(e, 400, "invalid_type", param, "%s: must be an object", param);
    const char *role;
    char p2[80];
    snprintf(p2, sizeof p2, "%s.role", param);
    if (api_str(m, "role", p2, &role, e)) return PW_EINVAL;
    if (!role || (strcmp(role, "user") && strcmp(role, "assistant")))
      return oai_seterr(e, 400, "invalid_value", p2, "%s: must be 'user' or 'assistant'", p2);
    snprintf(p2, sizeof p2, "%s.content", param);
    json_t *content = json_object_get(m, "content");
    if (!content) return oai_seterr(e, 400, "missing_field", p2, "%s: Field required", p2);
    json_t *text;
    if (api_content_text(content, p2, k_text_blocks, &text, e)) {
      if (!strcmp(e->code, "unsupported_content"))
        snprintf(e->message + strlen(e->message), sizeof e->message - strlen(e->message),
                 " (tool_use, tool_result and images are not supported yet)");
      return PW_EINVAL;
    }
    if (api_add_message(r, role, text, e)) return PW_EINVAL;
  }
  (void)need_max_tokens;
  if (present(root, "tools") &&
      !(json_is_array(json_object_get(root, "tools")) && !json_array_size(json_object_get(root, "tools"))))
    return oai_seterr(e, 400, "unsupported_tools", "tools", "tools: tool use is not supported by this server yet");
  if (present(root, "tool_choice"))
    return oai_seterr(e, 400, "unsupported_tools", "tool_choice", "tool_choice: tool use is not supported by this server yet");
  json_t *th = json_object_get(root, "thinking");
  if (th && !json_is_null(th)) {
    json_t *t = json_is_object(th) ? json_object_get(th, "type") : NULL;
    if (!json_is_string(t) || strcmp(json_string_value(t), "disabled"))
      return oai_seterr(e, 400, "unsupported_thinking", "thinking", "thinking: extended thinking is not supported by this server");
  }
  return 0;
}

static int parse_request(conn *k, struct MHD_Connection *c, oai_request *r, char *model, size_t model_cap,
                         oai_error *e) {
  json_t *root = r->root;
  const char *m;
  if (check_known(root, k_message_fields, e) || check_options(root, e)) return PW_EINVAL;
  if (api_str(root, "model", "model", &m, e) || srv_use_model(k, c, m, false, e)) return PW_EINVAL;
  snprintf(model, model_cap, "%s", m);
  long long mt;
  bool given;
  if (api_int(root, "max_tokens", "max_tokens", 1, 1 << 30, &mt, &given, e)) return PW_EINVAL;
  if (!given) return oai_seterr(e, 400, "missing_field", "max_tokens", "max_tokens: Field required");
  r->max_tokens = (int)mt;
  if (parse_turns(r, true, e)) return PW_EINVAL;
  pw_sampler_params *sp = &r->sampling;
  sp->repeat_penalty = 1.0f;
  double d;
  long long x;
  if (api_num(root, "temperature", "temperature", 0, 1, &d, &given, e)) return PW_EINVAL;
  if (given) sp->temperature = (float)d;
  if (api_num(root, "top_p", "top_p", 0, 1, &d, &given, e)) return PW_EINVAL;
  if (given) sp->top_p = d > 0 ? (float)d : 1e-9f;
  if (api_int(root, "top_k", "top_k", 0, 1 << 30, &x, &given, e)) return PW_EINVAL;
  if (given) sp->top_k = (int32_t)x;
  sp->seed = api_random_seed();
  if (api_bool(root, "stream", "stream", &r->stream, e)) return PW_EINVAL;
  json_t *ss = json_object_get(root, "stop_sequences");
  if (ss && !json_is_null(ss) && !json_is_array(ss))
    return oai_seterr(e, 400, "invalid_type", "stop_sequences", "stop_sequences: must be an array of strings");
  if (api_stops(ss, "stop_sequences", r, e)) return PW_EINVAL;
  json_t *md = json_object_get(root, "metadata");
  if (md && !json_is_null(md) && !json_is_object(md))
    return oai_seterr(e, 400, "invalid_type", "metadata", "metadata: must be an object");
  const char *tier;
  if (api_str(root, "service_tier", "service_tier", &tier, e)) return PW_EINVAL;
  if (tier && strcmp(tier, "auto") && strcmp(tier, "standard_only"))
    return oai_seterr(e, 400, "invalid_value", "service_tier", "service_tier: must be 'auto' or 'standard_only'");
  return 0;
}

/* ---- rendering ---------------------------------------------------------- */

typedef struct an_ctx {
  char model[256]; /* echoed as asked */
} an_ctx;

/* "stop_reason":...,"stop_sequence":... */
static void put_stop(const gen_view *v, sbuf *out) {
  bool seq = v->finish == ENGINE_FINISH_STOP && v->stop_index >= 0 && v->stop_index < v->r->n_stop;
  sbuf_printf(out, "\"stop_reason\":\"%s\",\"stop_sequence\":",
              v->finish == ENGINE_FINISH_LENGTH ? "max_tokens" : seq ? "stop_sequence" : "end_turn");
  if (seq) sbuf_json_str(out, v->r->stop[v->stop_index], strlen(v->r->stop[v->stop_index]));
  else sbuf_puts(out, "null");
}

static void event(const char *name, sbuf *out) { sbuf_printf(out, "event: %s\ndata: ", name); }

static void put_message_head(const gen_view *v, sbuf *out) {
  const an_ctx *x = v->ctx;
  sbuf_puts(out, "{\"id\":");
  sbuf_json_str(out, v->o->id, strlen(v->o->id));
  sbuf_puts(out, ",\"type\":\"message\",\"role\":\"assistant\",\"model\":");
  sbuf_json_str(out, x->model, strlen(x->model));
}

static void put_usage(const gen_view *v, int input, int output, sbuf *out) {
  (void)v;
  sbuf_printf(out,
              "{\"input_tokens\":%d,\"cache_creation_input_tokens\":0,\"cache_read_input_tokens\":%d,"
              "\"output_tokens\":%d}",
              input, v->usage.cached_tokens, output);
}

static void an_begin(const gen_view *v, sbuf *out) {
  event("message_start", out);
  sbuf_puts(out, "{\"type\":\"message_start\",\"message\":");
  put_message_head(v, out);
  sbuf_puts(out, ",\"content\":[],\"stop_reason\":null,\"stop_sequence\":null,\"usage\":");
  sbuf_printf(out, "{\"input_tokens\":%d,\"cache_creation_input_tokens\":0,\"cache_read_input_tokens\":0,\"output_tokens\":0}",
              v->n_prompt);
  sbuf_puts(out, "}}\n\n");
  event("content_block_start", out);
  sbuf_puts(out, "{\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n");
  event("ping", out);
  sbuf_puts(out, "{\"type\":\"ping\"}\n\n");
}

static void an_delta(const gen_view *v, const char *text, size_t n, const oai_logprobs *lp, sbuf *out) {
  (void)v;
  (void)lp;
  if (!n) return;
  event("content_block_delta", out);
  sbuf_puts(out, "{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":");
  sbuf_json_str(out, text, n);
  sbuf_puts(out, "}}\n\n");
}

static void an_end(const gen_view *v, sbuf *out) {
  event("content_block_stop", out);
  sbuf_puts(out, "{\"type\":\"content_block_stop\",\"index\":0}\n\n");
  event("message_delta", out);
  sbuf_puts(out, "{\"type\":\"message_delta\",\"delta\":{");
  put_stop(v, out);
  sbuf_puts(out, "},\"usage\":");
  put_usage(v, v->usage.prompt_tokens, v->usage.completion_tokens, out);
  oai_put_receipt(v->o, out);
  sbuf_puts(out, "}\n\n");
  event("message_stop", out);
  sbuf_puts(out, "{\"type\":\"message_stop\"}\n\n");
}

static void an_error(const gen_view *v, const oai_error *e, sbuf *out) {
  (void)v;
  event("error", out);
  anth_render_error(e, out);
  sbuf_puts(out, "\n\n");
}

static void an_keepalive(const gen_view *v, sbuf *out) {
  (void)v;
  event("ping", out);
  sbuf_puts(out, "{\"type\":\"ping\"}\n\n");
}

static void an_complete(const gen_view *v, sbuf *out) {
  put_message_head(v, out);
  sbuf_puts(out, ",\"content\":[{\"type\":\"text\",\"text\":");
  sbuf_json_str(out, v->text, v->text_len);
  sbuf_puts(out, "}],");
  put_stop(v, out);
  sbuf_puts(out, ",\"usage\":");
  put_usage(v, v->usage.prompt_tokens, v->usage.completion_tokens, out);
  oai_put_receipt(v->o, out);
  sbuf_puts(out, "}");
}

static const gen_api an_api = {
    .stream_ctype = "text/event-stream",
    .begin = an_begin,
    .delta = an_delta,
    .end = an_end,
    .error = an_error,
    .keepalive = an_keepalive,
    .complete = an_complete,
    .ctx_free = free,
    .receipt_endpoint = "messages",
};

enum MHD_Result anth_messages(conn *k, struct MHD_Connection *c) {
  oai_request r;
  oai_error e;
  size_t len;
  const char *body = srv_body(k, &len);
  an_ctx *x = calloc(1, sizeof *x);
  if (!x) {
    oai_seterr(&e, 500, "internal_error", NULL, "out of memory");
    return srv_reply_error(k, c, &e);
  }
  oai_resp o;
  oai_resp_init(&o, OAI_CHAT, NULL, NULL); /* the model's identity: srv_generate, once bound */
  oai_new_id("msg_", o.id, sizeof o.id);
  srv_set_id(k, o.id);
  if (api_parse_body(body, len, OAI_CHAT, &r, &e) || parse_request(k, c, &r, x->model, sizeof x->model, &e)) {
    free(x);
    oai_request_free(&r);
    return srv_reply_error(k, c, &e);
  }
  return srv_generate(k, c, &r, &o, &an_api, x);
}

enum MHD_Result anth_count_tokens(conn *k, struct MHD_Connection *c) {
  oai_request r;
  oai_error e;
  size_t len;
  const char *body = srv_body(k, &len);
  const char *m;
  int n = 0;
  if (api_parse_body(body, len, OAI_CHAT, &r, &e) || check_known(r.root, k_count_fields, &e) ||
      check_options(r.root, &e) || api_str(r.root, "model", "model", &m, &e) || srv_use_model(k, c, m, false, &e) ||
      parse_turns(&r, false, &e) || srv_count_chat(k, r.messages, &n, &e)) {
    oai_request_free(&r);
    return srv_reply_error(k, c, &e);
  }
  oai_request_free(&r);
  sbuf out = {0};
  sbuf_printf(&out, "{\"input_tokens\":%d}", n);
  return srv_reply_json(k, c, 200, &out);
}
