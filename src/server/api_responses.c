/* api_responses.c - OpenAI's Responses API: POST /v1/responses (one
 * response object, or its typed server-sent events) and GET
 * /v1/responses/{id}, over the one generation core (api.h).
 *
 * Honoured: model, input (a string, or message items whose content is a
 * string or input_text/output_text parts), instructions, max_output_tokens,
 * temperature, top_p, stream, store, previous_response_id, metadata
 * (echoed), text.format (text, json_object, json_schema through the
 * grammar engine), prompt_cache_key, user, parallel_tool_calls, truncation
 * "disabled"; accepted as they ask for nothing this server does not do:
 * safety_identifier, service_tier auto/default, prompt_cache_retention
 * "in_memory", stream_options without include_obfuscation. Refused with a
 * 400 naming the field: tools, tool_choice other than "auto"/"none",
 * reasoning, include, background, truncation "auto", top_logprobs,
 * conversation, context_management, moderation, prompt,
 * prompt_cache_options, input items that are not messages, and any
 * top-level field not in k_fields.
 *
 * Conversations: a stored response keeps its conversation (input messages
 * and the answer, without instructions, which as in OpenAI's API do not
 * carry over). A request naming previous_response_id continues from it.
 * Every response of one conversation shares a prefix-cache key (the id of
 * the conversation's first response, unless the client gives
 * prompt_cache_key), so a continuation reuses the KV of the turns before
 * it. The store is bounded by entries and bytes, least recently used out
 * first, and per tenant: an API key never sees another key's responses.
 * What it is not: a database; the store lives as long as the server. */
#include "server/api.h"

#include "base/error.h"
#include "base/log.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- the store ----------------------------------------------------------- */

typedef struct resp_entry {
  struct resp_entry *prev, *next; /* most recently used first */
  char id[48];
  char chain[48];       /* the conversation's cache key */
  bool anonymous;
  uint8_t tenant[32];
  char *json;           /* owned: the response object as GET returns it */
  char *messages;       /* owned: the conversation (JSON array text) */
  size_t bytes;         /* what this entry counts against the bound */
} resp_entry;

struct resp_store {
  pthread_mutex_t mu;
  resp_entry *head, *tail;
  int n, max;
  size_t bytes, max_bytes;
};

int resp_store_create(int max_entries, size_t max_bytes, resp_store **out, char *err) {
  *out = NULL;
  if (max_entries < 1 || max_bytes < 1) return pw_seterr(err, PW_EINVAL, "the response store needs room for one entry");
  resp_store *st = calloc(1, sizeof *st);
  if (!st) return pw_seterr(err, PW_ENOMEM, "out of memory");
  pthread_mutex_init(&st->mu, NULL);
  st->max = max_entries;
  st->max_bytes = max_bytes;
  *out = st;
  return 0;
}

static void entry_free(resp_entry *e) {
  if (!e) return;
  free(e->json);
  free(e->messages);
  free(e);
}

static void unlink_entry(resp_store *st, resp_entry *e) {
  if (e->prev) e->prev->next = e->next;
  else st->head = e->next;
  if (e->next) e->next->prev = e->prev;
  else st->tail = e->prev;
  e->prev = e->next = NULL;
  st->n--;
  st->bytes -= e->bytes;
}

static void push_front(resp_store *st, resp_entry *e) {
  e->prev = NULL;
  e->next = st->head;
  if (st->head) st->head->prev = e;
  st->head = e;
  if (!st->tail) st->tail = e;
  st->n++;
  st->bytes += e->bytes;
}

void resp_store_destroy(resp_store *st) {
  if (!st) return;
  while (st->head) {
    resp_entry *e = st->head;
    unlink_entry(st, e);
    entry_free(e);
  }
  pthread_mutex_destroy(&st->mu);
  free(st);
}

static bool same_tenant(const resp_entry *e, const srv_caller *who) {
  if (e->anonymous || who->anonymous) return e->anonymous == who->anonymous;
  return !memcmp(e->tenant, who->tenant, 32);
}

/* Adds e (taking it); evicts least recently used entries to stay within
 * the bounds. An entry larger than the byte bound is not kept. */
static void store_put(resp_store *st, resp_entry *e) {
  if (e->bytes > st->max_bytes) {
    entry_free(e);
    return;
  }
  pthread_mutex_lock(&st->mu);
  while (st->tail && (st->n + 1 > st->max || st->bytes + e->bytes > st->max_bytes)) {
    resp_entry *old = st->tail;
    unlink_entry(st, old);
    entry_free(old);
  }
  push_front(st, e);
  pthread_mutex_unlock(&st->mu);
}

int resp_store_get(resp_store *st, const char *id, const srv_caller *who, char **json, char **messages,
                   char *chain) {
  int rc = PW_ENOTFOUND;
  pthread_mutex_lock(&st->mu);
  for (resp_entry *e = st->head; e; e = e->next) {
    if (strcmp(e->id, id) || !same_tenant(e, who)) continue;
    unlink_entry(st, e);
    push_front(st, e);
    rc = 0;
    if (json && !(*json = strdup(e->json))) rc = PW_ENOMEM;
    if (messages && !(*messages = strdup(e->messages))) rc = PW_ENOMEM;
    if (chain) memcpy(chain, e->chain, 48);
    break;
  }
  pthread_mutex_unlock(&st->mu);
  return rc;
}

int resp_store_add(resp_store *st, const char *id, const char *chain, const srv_caller *who, const char *json,
                   const char *messages) {
  resp_entry *e = calloc(1, sizeof *e);
  if (!e || !(e->json = strdup(json)) || !(e->messages = strdup(messages))) {
    entry_free(e);
    return PW_ENOMEM;
  }
  snprintf(e->id, sizeof e->id, "%s", id);
  snprintf(e->chain, sizeof e->chain, "%s", chain);
  e->anonymous = who->anonymous;
  if (!who->anonymous) memcpy(e->tenant, who->tenant, 32);
  e->bytes = sizeof *e + strlen(e->json) + strlen(e->messages);
  store_put(st, e);
  return 0;
}

void resp_store_usage(resp_store *st, int *entries, size_t *bytes) {
  pthread_mutex_lock(&st->mu);
  *entries = st->n;
  *bytes = st->bytes;
  pthread_mutex_unlock(&st->mu);
}

/* ---- rendering ----------------------------------------------------------- */

typedef struct rs_ctx {
  resp_store *store;  /* borrowed */
  bool store_it;
  srv_caller who;
  uint8_t tenant[32];
  char model[256];
  char msg_id[48];
  char chain[48];
  char prev[64];       /* previous_response_id; "" = none */
  char *instructions;  /* owned; NULL = none */
  char *metadata;      /* owned JSON text; NULL = {} */
  char *format;        /* owned JSON text of text.format; NULL = {"type":"text"} */
  char *user;          /* owned; NULL = none */
  json_t *history;     /* owned: the conversation so far, without instructions */
  int max_output;      /* 0 = none given */
  double temperature, top_p;
  long long created;
  int seq;             /* sequence_number of the next event */
  sbuf text;           /* streamed text so far */
} rs_ctx;

static void rs_free(void *p) {
  rs_ctx *x = p;
  if (!x) return;
  free(x->instructions);
  free(x->metadata);
  free(x->format);
  free(x->user);
  json_decref(x->history);
  sbuf_free(&x->text);
  free(x);
}

static void put_item(const rs_ctx *x, const char *status, const char *text, size_t n, bool with_content, sbuf *out) {
  sbuf_printf(out, "{\"id\":\"%s\",\"type\":\"message\",\"status\":\"%s\",\"role\":\"assistant\",\"content\":[", x->msg_id,
              status);
  if (with_content) {
    sbuf_puts(out, "{\"type\":\"output_text\",\"text\":");
    sbuf_json_str(out, text, n);
    sbuf_puts(out, ",\"annotations\":[],\"logprobs\":[]}");
  }
  sbuf_puts(out, "]}");
}

static const char *final_status(const gen_view *v) { return v->finish == ENGINE_FINISH_LENGTH ? "incomplete" : "completed"; }

/* The response object; text NULL = still running (no output, no usage). */
static void put_response(const gen_view *v, const char *status, const char *text, size_t n, bool receipt, sbuf *out) {
  const rs_ctx *x = v->ctx;
  sbuf_puts(out, "{\"id\":");
  sbuf_json_str(out, v->o->id, strlen(v->o->id));
  sbuf_printf(out, ",\"object\":\"response\",\"created_at\":%lld,\"status\":\"%s\",\"error\":null", x->created, status);
  if (text && v->finish == ENGINE_FINISH_LENGTH) sbuf_puts(out, ",\"incomplete_details\":{\"reason\":\"max_output_tokens\"}");
  else sbuf_puts(out, ",\"incomplete_details\":null");
  sbuf_puts(out, ",\"instructions\":");
  if (x->instructions) sbuf_json_str(out, x->instructions, strlen(x->instructions));
  else sbuf_puts(out, "null");
  if (x->max_output) sbuf_printf(out, ",\"max_output_tokens\":%d", x->max_output);
  else sbuf_puts(out, ",\"max_output_tokens\":null");
  sbuf_puts(out, ",\"metadata\":");
  sbuf_puts(out, x->metadata ? x->metadata : "{}");
  sbuf_puts(out, ",\"model\":");
  sbuf_json_str(out, x->model, strlen(x->model));
  sbuf_puts(out, ",\"output\":[");
  if (text) put_item(x, "completed", text, n, true, out);
  sbuf_puts(out, "],\"parallel_tool_calls\":true,\"previous_response_id\":");
  if (x->prev[0]) sbuf_json_str(out, x->prev, strlen(x->prev));
  else sbuf_puts(out, "null");
  sbuf_printf(out, ",\"reasoning\":{\"effort\":null,\"summary\":null},\"store\":%s", x->store_it ? "true" : "false");
  sbuf_puts(out, ",\"temperature\":");
  sbuf_json_num(out, x->temperature);
  sbuf_printf(out, ",\"text\":{\"format\":%s},\"tool_choice\":\"auto\",\"tools\":[],\"top_p\":",
              x->format ? x->format : "{\"type\":\"text\"}");
  sbuf_json_num(out, x->top_p);
  sbuf_puts(out, ",\"truncation\":\"disabled\",\"usage\":");
  if (text) {
    const engine_usage *u = &v->usage;
    sbuf_printf(out,
                "{\"input_tokens\":%d,\"input_tokens_details\":{\"cached_tokens\":%d},\"output_tokens\":%d,"
                "\"output_tokens_details\":{\"reasoning_tokens\":0},\"total_tokens\":%d}",
                u->prompt_tokens, u->cached_tokens, u->completion_tokens, u->prompt_tokens + u->completion_tokens);
  } else {
    sbuf_puts(out, "null");
  }
  sbuf_puts(out, ",\"user\":");
  if (x->user) sbuf_json_str(out, x->user, strlen(x->user));
  else sbuf_puts(out, "null");
  if (receipt) oai_put_receipt(v->o, out);
  sbuf_puts(out, "}");
}

/* Keeps the finished response (when store is on): its object and its
 * conversation, the answer appended. */
static void keep(const gen_view *v, const char *text, size_t n) {
  rs_ctx *x = v->ctx;
  if (!x->store_it) return;
  sbuf js = {0};
  put_response(v, final_status(v), text, n, false, &js);
  json_t *conv = json_copy(x->history);
  json_t *ans = json_pack("{s:s,s:s%}", "role", "assistant", "content", text, n);
  char *msgs = NULL;
  if (!js.oom && conv && ans && !json_array_append_new(conv, ans)) {
    ans = NULL;
    msgs = json_dumps(conv, JSON_COMPACT);
  }
  /* Best effort: a response that cannot be kept is still answered. */
  if (!msgs || resp_store_add(x->store, v->o->id, x->chain, &x->who, js.data, msgs))
    pw_log(PW_LOG_WARN, "response %s: out of memory, not stored", v->o->id);
  free(msgs);
  json_decref(ans);
  json_decref(conv);
  sbuf_free(&js);
}

static void event_head(rs_ctx *x, const char *type, sbuf *out) {
  sbuf_printf(out, "event: %s\ndata: {\"type\":\"%s\",\"sequence_number\":%d", type, type, x->seq++);
}

static void rs_begin(const gen_view *v, sbuf *out) {
  rs_ctx *x = v->ctx;
  event_head(x, "response.created", out);
  sbuf_puts(out, ",\"response\":");
  put_response(v, "in_progress", NULL, 0, false, out);
  sbuf_puts(out, "}\n\n");
  event_head(x, "response.in_progress", out);
  sbuf_puts(out, ",\"response\":");
  put_response(v, "in_progress", NULL, 0, false, out);
  sbuf_puts(out, "}\n\n");
  event_head(x, "response.output_item.added", out);
  sbuf_puts(out, ",\"output_index\":0,\"item\":");
  put_item(x, "in_progress", NULL, 0, false, out);
  sbuf_puts(out, "}\n\n");
  event_head(x, "response.content_part.added", out);
  sbuf_printf(out, ",\"item_id\":\"%s\",\"output_index\":0,\"content_index\":0,"
                   "\"part\":{\"type\":\"output_text\",\"text\":\"\",\"annotations\":[],\"logprobs\":[]}}\n\n",
              x->msg_id);
}

static void rs_delta(const gen_view *v, const char *text, size_t n, const oai_logprobs *lp, sbuf *out) {
  rs_ctx *x = v->ctx;
  (void)lp;
  if (!n) return;
  sbuf_put(&x->text, text, n);
  event_head(x, "response.output_text.delta", out);
  sbuf_printf(out, ",\"item_id\":\"%s\",\"output_index\":0,\"content_index\":0,\"delta\":", x->msg_id);
  sbuf_json_str(out, text, n);
  sbuf_puts(out, ",\"logprobs\":[]}\n\n");
}

static void rs_end(const gen_view *v, sbuf *out) {
  rs_ctx *x = v->ctx;
  const char *t = x->text.data ? x->text.data : "";
  size_t n = x->text.len;
  event_head(x, "response.output_text.done", out);
  sbuf_printf(out, ",\"item_id\":\"%s\",\"output_index\":0,\"content_index\":0,\"text\":", x->msg_id);
  sbuf_json_str(out, t, n);
  sbuf_puts(out, ",\"logprobs\":[]}\n\n");
  event_head(x, "response.content_part.done", out);
  sbuf_printf(out, ",\"item_id\":\"%s\",\"output_index\":0,\"content_index\":0,\"part\":{\"type\":\"output_text\",\"text\":",
              x->msg_id);
  sbuf_json_str(out, t, n);
  sbuf_puts(out, ",\"annotations\":[],\"logprobs\":[]}}\n\n");
  event_head(x, "response.output_item.done", out);
  sbuf_puts(out, ",\"output_index\":0,\"item\":");
  put_item(x, "completed", t, n, true, out);
  sbuf_puts(out, "}\n\n");
  const char *st = final_status(v);
  event_head(x, !strcmp(st, "completed") ? "response.completed" : "response.incomplete", out);
  sbuf_puts(out, ",\"response\":");
  put_response(v, st, t, n, true, out);
  sbuf_puts(out, "}\n\n");
  keep(v, t, n);
}

static void rs_error(const gen_view *v, const oai_error *e, sbuf *out) {
  rs_ctx *x = v->ctx;
  event_head(x, "error", out);
  sbuf_puts(out, ",\"code\":");
  sbuf_json_str(out, e->code, strlen(e->code));
  sbuf_puts(out, ",\"message\":");
  sbuf_json_str(out, e->message, strlen(e->message));
  sbuf_puts(out, ",\"param\":");
  if (e->param[0]) sbuf_json_str(out, e->param, strlen(e->param));
  else sbuf_puts(out, "null");
  sbuf_puts(out, "}\n\n");
}

static void rs_keepalive(const gen_view *v, sbuf *out) {
  (void)v;
  oai_sse_keepalive(out);
}

static void rs_complete(const gen_view *v, sbuf *out) {
  put_response(v, final_status(v), v->text, v->text_len, true, out);
  keep(v, v->text, v->text_len);
}

static const gen_api rs_api = {
    .stream_ctype = "text/event-stream",
    .begin = rs_begin,
    .delta = rs_delta,
    .end = rs_end,
    .error = rs_error,
    .keepalive = rs_keepalive,
    .complete = rs_complete,
    .ctx_free = rs_free,
    .receipt_endpoint = "responses",
};

/* ---- requests ------------------------------------------------------------ */

static const char *const k_parts[] = {"input_text", "output_text", "text", NULL};

/* input: a string (one user message) or message items. */
static int parse_input(json_t *in, json_t *history, oai_error *e) {
  if (!in) return oai_seterr(e, 400, "missing_field", "input", "'input' is required");
  if (json_is_string(in)) {
    json_t *m = json_pack("{s:s,s:O}", "role", "user", "content", in);
    if (!m || json_array_append_new(history, m)) return oai_seterr(e, 500, "internal_error", NULL, "out of memory");
    return 0;
  }
  if (!json_is_array(in) || !json_array_size(in))
    return oai_seterr(e, 400, "invalid_type", "input", "'input' must be a string or a non-empty array of message items");
  size_t i;
  json_t *it;
  json_array_foreach(in, i, it) {
    char param[64];
    snprintf(param, sizeof param, "input[%zu]", i);
    if (!json_is_object(it)) return oai_seterr(e, 400, "invalid_type", param, "'%s' must be an object", param);
    json_t *type = json_object_get(it, "type");
    if (type && (!json_is_string(type) || strcmp(json_string_value(type), "message")))
      return oai_seterr(e, 400, "unsupported_input_item", param,
                        "'%s' is a '%.40s' item: this server takes message items only", param,
                        json_is_string(type) ? json_string_value(type) : "?");
    json_t *role = json_object_get(it, "role");
    const char *rs = json_is_string(role) ? json_string_value(role) : "";
    if (strcmp(rs, "user") && strcmp(rs, "assistant") && strcmp(rs, "system") && strcmp(rs, "developer"))
      return oai_seterr(e, 400, "invalid_value", param, "'%s.role' must be user, assistant, system or developer", param);
    char p2[80];
    snprintf(p2, sizeof p2, "%s.content", param);
    json_t *text;
    if (api_content_text(json_object_get(it, "content"), p2, k_parts, &text, e)) return PW_EINVAL;
    json_t *m = json_pack("{s:s,s:o}", "role", strcmp(rs, "developer") ? rs : "system", "content", text);
    if (!m || json_array_append_new(history, m)) return oai_seterr(e, 500, "internal_error", NULL, "out of memory");
  }
  return 0;
}

/* text.format: the output's constraint, echoed in the response. */
static int parse_format(json_t *root, oai_request *r, rs_ctx *x, oai_error *e) {
  json_t *t = json_object_get(root, "text");
  if (!t || json_is_null(t)) return 0;
  if (!json_is_object(t)) return oai_seterr(e, 400, "invalid_type", "text", "'text' must be an object");
  json_t *f = json_object_get(t, "format");
  if (!f || json_is_null(f)) return 0;
  json_t *ty = json_is_object(f) ? json_object_get(f, "type") : NULL;
  if (!json_is_string(ty)) return oai_seterr(e, 400, "invalid_type", "text.format.type", "'text.format.type' must be a string");
  const char *ts = json_string_value(ty);
  if (!strcmp(ts, "text")) return 0;
  if (!strcmp(ts, "json_object")) {
    if (api_json_grammar(&r->grammar, e)) return PW_EINVAL;
  } else if (!strcmp(ts, "json_schema")) {
    json_t *schema = json_object_get(f, "schema");
    if (!json_is_object(schema))
      return oai_seterr(e, 400, "missing_field", "text.format.schema", "'text.format.schema' must be an object");
    if (api_schema_grammar(schema, "text.format.schema", &r->grammar, e)) return PW_EINVAL;
  } else {
    return oai_seterr(e, 400, "invalid_value", "text.format.type", "'text.format.type' must be text, json_object or json_schema");
  }
  if (!(x->format = json_dumps(f, JSON_COMPACT))) return oai_seterr(e, 500, "internal_error", NULL, "out of memory");
  return 0;
}

/* The top-level members of a request: every name parse_request reads
 * (honoured, accepted as neutral, or refused by name); any other is a 400
 * unknown_field naming it. */
static const char *const k_fields[] = {
    "model", "input", "instructions", "max_output_tokens", "temperature", "top_p", "stream", "stream_options",
    "store", "previous_response_id", "metadata", "text", "prompt_cache_key", "prompt_cache_retention", "user",
    "safety_identifier", "service_tier", "parallel_tool_calls", "tool_choice", "truncation", "top_logprobs",
    /* refused unless empty */
    "tools", "reasoning", "include", "background", "conversation", "context_management", "moderation", "prompt",
    "prompt_cache_options", NULL};

/* Members that change nothing here at the values accepted. */
static int check_neutral(json_t *root, oai_error *e) {
  bool b = true;
  if (api_bool(root, "parallel_tool_calls", "parallel_tool_calls", &b, e)) return PW_EINVAL; /* no tools: either */
  const char *v;
  if (api_str(root, "safety_identifier", "safety_identifier", &v, e)) return PW_EINVAL;
  if (api_str(root, "service_tier", "service_tier", &v, e)) return PW_EINVAL;
  if (v && strcmp(v, "auto") && strcmp(v, "default"))
    return oai_seterr(e, 400, "unsupported_field", "service_tier",
                      "'service_tier' must be \"auto\" or \"default\" (one tier here)");
  if (api_str(root, "prompt_cache_retention", "prompt_cache_retention", &v, e)) return PW_EINVAL;
  if (v && strcmp(v, "in_memory"))
    return oai_seterr(e, 400, "unsupported_field", "prompt_cache_retention",
                      "'prompt_cache_retention' must be \"in_memory\" (the prefix cache lives in memory)");
  json_t *so = json_object_get(root, "stream_options");
  if (so && !json_is_null(so)) {
    if (!json_is_object(so))
      return oai_seterr(e, 400, "invalid_type", "stream_options", "'stream_options' must be an object");
    b = false;
    if (api_bool(so, "include_obfuscation", "stream_options.include_obfuscation", &b, e)) return PW_EINVAL;
    if (b)
      return oai_seterr(e, 400, "unsupported_field", "stream_options.include_obfuscation",
                        "'stream_options.include_obfuscation' is not supported: events carry no obfuscation");
  }
  return 0;
}

static int parse_request(conn *k, struct MHD_Connection *c, oai_request *r, rs_ctx *x, oai_error *e) {
  json_t *root = r->root;
  const char *m, *instr, *prev, *key;
  if (oai_check_fields(root, k_fields, e) || check_neutral(root, e)) return PW_EINVAL;
  if (api_str(root, "model", "model", &m, e) || srv_use_model(k, c, m, true, e)) return PW_EINVAL;
  snprintf(x->model, sizeof x->model, "%s", m && *m ? m : engine_model_id(srv_engine(k)));
  static const char *const refused[] = {"tools",      "reasoning", "include", "conversation", "context_management",
                                        "moderation", "prompt",    "prompt_cache_options", NULL};
  for (int i = 0; refused[i]; i++) {
    json_t *v = json_object_get(root, refused[i]);
    if (v && !json_is_null(v) && !(json_is_array(v) && !json_array_size(v)))
      return oai_seterr(e, 400, "unsupported_field", refused[i], "'%s' is not supported by this server", refused[i]);
  }
  json_t *tc = json_object_get(root, "tool_choice");
  if (tc && !json_is_null(tc) &&
      !(json_is_string(tc) && (!strcmp(json_string_value(tc), "auto") || !strcmp(json_string_value(tc), "none"))))
    return oai_seterr(e, 400, "unsupported_field", "tool_choice", "'tool_choice' must be \"auto\" or \"none\" (no tools)");
  bool bg = false;
  if (api_bool(root, "background", "background", &bg, e)) return PW_EINVAL;
  if (bg) return oai_seterr(e, 400, "unsupported_field", "background", "'background' responses are not supported");
  const char *trunc;
  if (api_str(root, "truncation", "truncation", &trunc, e)) return PW_EINVAL;
  if (trunc && strcmp(trunc, "disabled"))
    return oai_seterr(e, 400, "unsupported_field", "truncation", "'truncation' must be \"disabled\"");
  long long tl;
  bool given;
  if (api_int(root, "top_logprobs", "top_logprobs", 0, 20, &tl, &given, e)) return PW_EINVAL;
  if (given && tl > 0) return oai_seterr(e, 400, "unsupported_field", "top_logprobs", "'top_logprobs' is not supported here");
  const char *user;
  if (api_str(root, "user", "user", &user, e)) return PW_EINVAL;
  if (user && !(x->user = strdup(user))) return oai_seterr(e, 500, "internal_error", NULL, "out of memory");
  json_t *md = json_object_get(root, "metadata");
  if (md && !json_is_null(md)) {
    if (!json_is_object(md)) return oai_seterr(e, 400, "invalid_type", "metadata", "'metadata' must be an object");
    if (json_object_size(md) > 16) return oai_seterr(e, 400, "invalid_value", "metadata", "'metadata' holds at most 16 pairs");
    if (!(x->metadata = json_dumps(md, JSON_COMPACT))) return oai_seterr(e, 500, "internal_error", NULL, "out of memory");
  }
  x->store_it = true;
  if (api_bool(root, "store", "store", &x->store_it, e)) return PW_EINVAL;
  if (api_bool(root, "stream", "stream", &r->stream, e)) return PW_EINVAL;
  long long mo;
  if (api_int(root, "max_output_tokens", "max_output_tokens", 1, 1 << 30, &mo, &given, e)) return PW_EINVAL;
  if (given) x->max_output = r->max_tokens = (int)mo;
  double d;
  pw_sampler_params *sp = &r->sampling;
  if (api_num(root, "temperature", "temperature", 0, 2, &d, &given, e)) return PW_EINVAL;
  if (given) sp->temperature = (float)d;
  x->temperature = sp->temperature;
  if (api_num(root, "top_p", "top_p", 0, 1, &d, &given, e)) return PW_EINVAL;
  if (given) sp->top_p = d > 0 ? (float)d : 1e-9f;
  x->top_p = given ? d : 1.0;
  sp->seed = api_random_seed();
  if (parse_format(root, r, x, e)) return PW_EINVAL;

  /* The conversation: the previous response's, then this input. */
  if (api_str(root, "instructions", "instructions", &instr, e)) return PW_EINVAL;
  if (instr && !(x->instructions = strdup(instr))) return oai_seterr(e, 500, "internal_error", NULL, "out of memory");
  if (api_str(root, "previous_response_id", "previous_response_id", &prev, e)) return PW_EINVAL;
  if (prev) {
    char *conv = NULL;
    srv_caller who = x->who;
    int rc = resp_store_get(x->store, prev, &who, NULL, &conv, x->chain);
    if (rc == PW_ENOTFOUND)
      return oai_seterr(e, 400, "previous_response_not_found", "previous_response_id",
                        "Previous response with id '%.60s' not found.", prev);
    if (rc) return oai_seterr(e, 500, "internal_error", NULL, "out of memory");
    json_error_t je;
    x->history = json_loads(conv, 0, &je);
    free(conv);
    if (!x->history) return oai_seterr(e, 500, "internal_error", NULL, "the stored conversation is unreadable");
    snprintf(x->prev, sizeof x->prev, "%s", prev);
  } else {
    if (!(x->history = json_array())) return oai_seterr(e, 500, "internal_error", NULL, "out of memory");
  }
  if (parse_input(json_object_get(root, "input"), x->history, e)) return PW_EINVAL;
  if (x->instructions && api_add_message(r, "system", json_string(x->instructions), e)) return PW_EINVAL;
  size_t i;
  json_t *msg;
  json_array_foreach(x->history, i, msg) {
    if (api_add_message(r, json_string_value(json_object_get(msg, "role")), json_incref(json_object_get(msg, "content")), e))
      return PW_EINVAL;
  }
  /* One prefix-cache key per conversation, unless the client chose one. */
  if (api_str(root, "prompt_cache_key", "prompt_cache_key", &key, e)) return PW_EINVAL;
  if (key && (!*key || strlen(key) > OAI_CACHE_KEY_MAX))
    return oai_seterr(e, 400, "invalid_prompt_cache_key", "prompt_cache_key", "'prompt_cache_key' must be 1..%d bytes",
                      OAI_CACHE_KEY_MAX);
  return api_set_cache_key(r, key ? key : x->chain, e);
}

enum MHD_Result resp_create(conn *k, struct MHD_Connection *c) {
  server *s = srv_server(k);
  oai_request r;
  oai_error e;
  size_t len;
  const char *body = srv_body(k, &len);
  rs_ctx *x = calloc(1, sizeof *x);
  if (!x) {
    oai_seterr(&e, 500, "internal_error", NULL, "out of memory");
    return srv_reply_error(k, c, &e);
  }
  oai_resp o;
  oai_resp_init(&o, OAI_CHAT, NULL, NULL); /* the model's identity: srv_generate, once bound */
  oai_new_id("resp_", o.id, sizeof o.id);
  oai_new_id("msg_", x->msg_id, sizeof x->msg_id);
  srv_set_id(k, o.id);
  x->store = srv_responses(s);
  x->who = srv_who(k);
  if (!x->who.anonymous) memcpy(x->tenant, x->who.tenant, 32);
  x->who.tenant = x->tenant;
  x->created = o.created;
  snprintf(x->chain, sizeof x->chain, "%s", o.id); /* a new conversation, unless it continues one */
  if (api_parse_body(body, len, OAI_CHAT, &r, &e) || parse_request(k, c, &r, x, &e)) {
    rs_free(x);
    oai_request_free(&r);
    return srv_reply_error(k, c, &e);
  }
  return srv_generate(k, c, &r, &o, &rs_api, x);
}

enum MHD_Result resp_get(conn *k, struct MHD_Connection *c) {
  server *s = srv_server(k);
  srv_caller who = srv_who(k);
  char *json = NULL;
  oai_error e;
  int rc = resp_store_get(srv_responses(s), srv_arg(k), &who, &json, NULL, NULL);
  if (rc) {
    if (rc == PW_ENOTFOUND) oai_seterr(&e, 404, "not_found", NULL, "No response with id '%.60s' found.", srv_arg(k));
    else oai_seterr(&e, 500, "internal_error", NULL, "out of memory");
    return srv_reply_error(k, c, &e);
  }
  sbuf out = {0};
  sbuf_puts(&out, json);
  free(json);
  return srv_reply_json(k, c, 200, &out);
}
