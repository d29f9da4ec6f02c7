/* api_responses.c - OpenAI's Responses API: POST /v1/responses (one
 * response object, or its typed server-sent events) and GET
 * /v1/responses/{id}, over the one generation core (api.h).
 *
 * Honoured: model, input (a string, or items: messages whose content is a
 * string or input_text/output_text parts, function_call and
 * function_call_output), instructions, max_output_tokens, temperature,
 * top_p, stream, store, previous_response_id, metadata (echoed),
 * text.format (text, json_object, json_schema through the grammar
 * engine), prompt_cache_key, user, tools (function tools), tool_choice
 * (auto, none, required, {type: "function", name}), parallel_tool_calls,
 * truncation "disabled"; accepted as they ask for nothing this server does
 * not do: safety_identifier, service_tier auto/default,
 * prompt_cache_retention "in_memory", stream_options without
 * include_obfuscation. Refused with a 400 naming the field: tools that are
 * not function tools (web_search, file_search, code_interpreter, mcp,
 * custom, ...), tool_choice of another type, reasoning, include,
 * background, truncation "auto", top_logprobs, conversation,
 * context_management, moderation, prompt, prompt_cache_options, input
 * items of other types (reasoning, item_reference, ...), and any
 * top-level field not in k_fields.
 *
 * Function tools take the chat path's way (no second implementation):
 * the tools become an OpenAI chat tools array and the items chat messages
 * (calls on the assistant turn, outputs as tool messages), so
 * srv_generate's oai_chat_prepare renders them with the template and
 * builds the grammar (lazy for auto, from the first token for required or
 * a named function), and the answer goes through the tool-call parser
 * (chat/toolcall.h) into output items: a message item for text, one
 * function_call item per call, in the order written (see rendering).
 *
 * Conversations: a stored response keeps its conversation (input items
 * and the answer, its function calls included, without instructions,
 * which as in OpenAI's API do not carry over). A request naming
 * previous_response_id continues from it: when that response made calls,
 * the request must give their function_call_output items first (OpenAI's
 * rule; the Agents SDK sends just those). Every response of one
 * conversation shares a prefix-cache key (the id of
 * the conversation's first response, unless the client gives
 * prompt_cache_key), so a continuation reuses the KV of the turns before
 * it. The store is bounded by entries and bytes, least recently used out
 * first, and per tenant: an API key never sees another key's responses.
 * What it is not: a database; the store lives as long as the server. */
#include "server/api.h"
#include "server/chatout.h"

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

/* The output items of an answer are made as the model writes them: text
 * opens a message item (white space alone waits: it is dropped before a
 * call, where it only separates), a call closes it and is one
 * function_call item; text after a call opens a new message item. The same
 * code renders a streamed answer (its events) and a whole one, so both
 * give the same items. Reasoning (<think> templates, gpt-oss's analysis
 * channel) is split off as the chat path splits it and not returned: it is
 * neither output_text nor kept in the conversation. */
enum { RS_OPEN_NONE = 0, RS_OPEN_MSG = 1, RS_OPEN_CALL = 2 };

typedef struct rs_ctx {
  resp_store *store;  /* borrowed */
  bool store_it;
  srv_caller who;
  uint8_t tenant[32];
  char model[256];
  char msg_id[48];     /* the first message item's id */
  char chain[48];
  char prev[64];       /* previous_response_id; "" = none */
  char *instructions;  /* owned; NULL = none */
  char *metadata;      /* owned JSON text; NULL = {} */
  char *format;        /* owned JSON text of text.format; NULL = {"type":"text"} */
  char *user;          /* owned; NULL = none */
  char *tools;         /* owned JSON text: the tools as given; NULL = [] */
  char *tool_choice;   /* owned JSON text as given; NULL = "auto" */
  bool parallel;       /* parallel_tool_calls */
  json_t *history;     /* owned: the conversation so far, without instructions */
  int max_output;      /* 0 = none given */
  double temperature, top_p;
  long long created;
  int seq;             /* sequence_number of the next event */
  /* the answer */
  tc_syntax sx;        /* the model's tool-call syntax (read when the request was) */
  chatout co;          /* co.p: the parser; NULL = plain text */
  bool co_ready;
  bool stream;
  sbuf *out;           /* streamed: where events go during a feed */
  int n_items;         /* output items opened */
  int n_msgs;          /* message items opened */
  int open;            /* RS_OPEN_* */
  char item_id[48];    /* the open item's id */
  char call_id[40];    /* the open call's call_id */
  char call_name[TC_MAX_NAME + 1];
  sbuf ws;             /* white space held while no item is open */
  sbuf text;           /* the open message's text */
  sbuf args;           /* the open call's arguments */
  sbuf items;          /* the finished items' JSON, comma-separated */
  sbuf all_text;       /* every message's text: the assistant turn kept */
  json_t *calls;       /* owned: the calls as the template takes them (kept); NULL = none yet */
  bool oom;            /* a JSON value of the conversation could not be made */
} rs_ctx;

static void rs_free(void *p) {
  rs_ctx *x = p;
  if (!x) return;
  free(x->instructions);
  free(x->metadata);
  free(x->format);
  free(x->user);
  free(x->tools);
  free(x->tool_choice);
  json_decref(x->history);
  chatout_free(&x->co);
  sbuf_free(&x->ws);
  sbuf_free(&x->text);
  sbuf_free(&x->args);
  sbuf_free(&x->items);
  sbuf_free(&x->all_text);
  json_decref(x->calls);
  free(x);
}

static const char *final_status(const gen_view *v) { return v->finish == ENGINE_FINISH_LENGTH ? "incomplete" : "completed"; }

static const char *sdata(const sbuf *b) { return b->data ? b->data : ""; }

static void put_msg_item(const char *id, const char *status, const sbuf *text, bool with_content, sbuf *out) {
  sbuf_printf(out, "{\"id\":\"%s\",\"type\":\"message\",\"status\":\"%s\",\"role\":\"assistant\",\"content\":[", id,
              status);
  if (with_content) {
    sbuf_puts(out, "{\"type\":\"output_text\",\"text\":");
    sbuf_json_str(out, sdata(text), text->len);
    sbuf_puts(out, ",\"annotations\":[],\"logprobs\":[]}");
  }
  sbuf_puts(out, "]}");
}

static void put_call_item(const rs_ctx *x, const char *status, const sbuf *args, sbuf *out) {
  sbuf_printf(out, "{\"id\":\"%s\",\"type\":\"function_call\",\"status\":\"%s\",\"arguments\":", x->item_id, status);
  sbuf_json_str(out, sdata(args), args->len);
  sbuf_puts(out, ",\"call_id\":");
  sbuf_json_str(out, x->call_id, strlen(x->call_id));
  sbuf_puts(out, ",\"name\":");
  sbuf_json_str(out, x->call_name, strlen(x->call_name));
  sbuf_puts(out, "}");
}

static void event_head(rs_ctx *x, const char *type, sbuf *out) {
  sbuf_printf(out, "event: %s\ndata: {\"type\":\"%s\",\"sequence_number\":%d", type, type, x->seq++);
}

/* ',"item_id":...,"output_index":N' of the open item. */
static void put_where(const rs_ctx *x, sbuf *out) {
  sbuf_printf(out, ",\"item_id\":\"%s\",\"output_index\":%d", x->item_id, x->n_items - 1);
}

static void open_msg(rs_ctx *x) {
  x->open = RS_OPEN_MSG;
  x->n_items++;
  if (x->n_msgs++) oai_new_id("msg_", x->item_id, sizeof x->item_id);
  else snprintf(x->item_id, sizeof x->item_id, "%s", x->msg_id);
  sbuf_clear(&x->text);
  if (!x->stream) return;
  event_head(x, "response.output_item.added", x->out);
  sbuf_printf(x->out, ",\"output_index\":%d,\"item\":", x->n_items - 1);
  put_msg_item(x->item_id, "in_progress", &x->text, false, x->out);
  sbuf_puts(x->out, "}\n\n");
  event_head(x, "response.content_part.added", x->out);
  put_where(x, x->out);
  sbuf_puts(x->out, ",\"content_index\":0,\"part\":{\"type\":\"output_text\",\"text\":\"\",\"annotations\":[],"
                    "\"logprobs\":[]}}\n\n");
}

/* A call as the template takes it, arguments an object when they are one
 * (as oai.c gives the template OpenAI's tool_calls). */
static json_t *template_call(const char *id, const char *name, const char *args, size_t n) {
  json_t *a = json_loadb(args, n, 0, NULL);
  if (!json_is_object(a)) {
    json_decref(a);
    a = json_stringn_nocheck(args, n);
  }
  return json_pack("{s:s,s:s,s:{s:s,s:o}}", "id", id, "type", "function", "function", "name", name, "arguments", a);
}

/* Closes the open item: its done events (streamed) and its JSON. */
static void close_item(rs_ctx *x, const char *status) {
  if (x->open == RS_OPEN_NONE) return;
  if (x->items.len) sbuf_puts(&x->items, ",");
  if (x->open == RS_OPEN_MSG) {
    if (x->stream) {
      event_head(x, "response.output_text.done", x->out);
      put_where(x, x->out);
      sbuf_puts(x->out, ",\"content_index\":0,\"text\":");
      sbuf_json_str(x->out, sdata(&x->text), x->text.len);
      sbuf_puts(x->out, ",\"logprobs\":[]}\n\n");
      event_head(x, "response.content_part.done", x->out);
      put_where(x, x->out);
      sbuf_puts(x->out, ",\"content_index\":0,\"part\":{\"type\":\"output_text\",\"text\":");
      sbuf_json_str(x->out, sdata(&x->text), x->text.len);
      sbuf_puts(x->out, ",\"annotations\":[],\"logprobs\":[]}}\n\n");
      event_head(x, "response.output_item.done", x->out);
      sbuf_printf(x->out, ",\"output_index\":%d,\"item\":", x->n_items - 1);
      put_msg_item(x->item_id, status, &x->text, true, x->out);
      sbuf_puts(x->out, "}\n\n");
    }
    put_msg_item(x->item_id, status, &x->text, true, &x->items);
  } else {
    if (x->stream) {
      event_head(x, "response.function_call_arguments.done", x->out);
      put_where(x, x->out);
      sbuf_puts(x->out, ",\"name\":");
      sbuf_json_str(x->out, x->call_name, strlen(x->call_name));
      sbuf_puts(x->out, ",\"arguments\":");
      sbuf_json_str(x->out, sdata(&x->args), x->args.len);
      sbuf_puts(x->out, "}\n\n");
      event_head(x, "response.output_item.done", x->out);
      sbuf_printf(x->out, ",\"output_index\":%d,\"item\":", x->n_items - 1);
      put_call_item(x, status, &x->args, x->out);
      sbuf_puts(x->out, "}\n\n");
    }
    put_call_item(x, status, &x->args, &x->items);
    json_t *c = template_call(x->call_id, x->call_name, sdata(&x->args), x->args.len);
    if (!c || (!x->calls && !(x->calls = json_array())) || json_array_append_new(x->calls, c)) x->oom = true;
  }
  x->open = RS_OPEN_NONE;
}

static void put_text(rs_ctx *x, const char *s, size_t n) {
  if (!n) return;
  sbuf_put(&x->text, s, n);
  sbuf_put(&x->all_text, s, n);
  if (!x->stream) return;
  event_head(x, "response.output_text.delta", x->out);
  put_where(x, x->out);
  sbuf_puts(x->out, ",\"content_index\":0,\"delta\":");
  sbuf_json_str(x->out, s, n);
  sbuf_puts(x->out, ",\"logprobs\":[]}\n\n");
}

static void put_content(rs_ctx *x, const char *s, size_t n) {
  if (x->open != RS_OPEN_MSG && api_all_ws(s, n)) {
    sbuf_put(&x->ws, s, n);
    return;
  }
  if (x->open != RS_OPEN_MSG) {
    close_item(x, "completed");
    open_msg(x);
  }
  put_text(x, x->ws.data, x->ws.len);
  sbuf_clear(&x->ws);
  put_text(x, s, n);
}

static void start_call(rs_ctx *x, const char *name) {
  sbuf_clear(&x->ws);
  close_item(x, "completed");
  x->open = RS_OPEN_CALL;
  x->n_items++;
  oai_new_id("fc_", x->item_id, sizeof x->item_id);
  if (x->co.short_ids) oai_new_id("", x->call_id, 10); /* Mistral's templates take 9 characters */
  else oai_new_id("call_", x->call_id, sizeof x->call_id);
  snprintf(x->call_name, sizeof x->call_name, "%s", name);
  sbuf_clear(&x->args);
  if (!x->stream) return;
  event_head(x, "response.output_item.added", x->out);
  sbuf_printf(x->out, ",\"output_index\":%d,\"item\":", x->n_items - 1);
  put_call_item(x, "in_progress", &x->args, x->out);
  sbuf_puts(x->out, "}\n\n");
}

static void call_args(rs_ctx *x, const char *s, size_t n) {
  if (x->open != RS_OPEN_CALL || !n) return;
  sbuf_put(&x->args, s, n);
  if (!x->stream) return;
  event_head(x, "response.function_call_arguments.delta", x->out);
  put_where(x, x->out);
  sbuf_puts(x->out, ",\"delta\":");
  sbuf_json_str(x->out, s, n);
  sbuf_puts(x->out, "}\n\n");
}

static void on_event(void *ctx, const tc_event *ev) {
  rs_ctx *x = ctx;
  switch (ev->type) {
  case TC_EV_CONTENT: put_content(x, ev->text, ev->len); break;
  case TC_EV_REASONING: break; /* not returned (see above) */
  case TC_EV_CALL_START: start_call(x, ev->name); break;
  case TC_EV_CALL_ARGS: call_args(x, ev->text, ev->len); break;
  }
}

/* More of the answer (final: all of it; v->finish set). Streamed, its
 * events go to out. */
static void feed(rs_ctx *x, const gen_view *v, const char *text, size_t n, bool final, sbuf *out) {
  x->out = out;
  if (!x->co_ready) {
    x->co_ready = true;
    if (chatout_init(&x->co, &x->sx, v->r)) x->oom = out->oom = true;
  }
  if (x->co.p) {
    if (tc_parser_feed(x->co.p, text, n, final, on_event, x) < 0) x->oom = out->oom = true;
  } else {
    put_content(x, text, n);
  }
  if (!final) return;
  /* An answer of white space only is a message of it; after an item it
   * only separated. An empty answer is one empty message. */
  if (x->ws.len && !x->n_items) {
    open_msg(x);
    put_text(x, x->ws.data, x->ws.len);
  }
  sbuf_clear(&x->ws);
  if (!x->n_items) open_msg(x);
  close_item(x, final_status(v)); /* an item cut off by max_output_tokens is incomplete */
  if (x->items.oom || x->text.oom || x->args.oom || x->all_text.oom) x->oom = out->oom = true;
}

/* The response object; done false = still running (no output, no usage). */
static void put_response(const gen_view *v, const char *status, bool done, bool receipt, sbuf *out) {
  const rs_ctx *x = v->ctx;
  sbuf_puts(out, "{\"id\":");
  sbuf_json_str(out, v->o->id, strlen(v->o->id));
  sbuf_printf(out, ",\"object\":\"response\",\"created_at\":%lld,\"status\":\"%s\",\"error\":null", x->created, status);
  if (done && v->finish == ENGINE_FINISH_LENGTH) sbuf_puts(out, ",\"incomplete_details\":{\"reason\":\"max_output_tokens\"}");
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
  if (done) sbuf_put(out, sdata(&x->items), x->items.len);
  sbuf_printf(out, "],\"parallel_tool_calls\":%s,\"previous_response_id\":", x->parallel ? "true" : "false");
  if (x->prev[0]) sbuf_json_str(out, x->prev, strlen(x->prev));
  else sbuf_puts(out, "null");
  sbuf_printf(out, ",\"reasoning\":{\"effort\":null,\"summary\":null},\"store\":%s", x->store_it ? "true" : "false");
  sbuf_puts(out, ",\"temperature\":");
  sbuf_json_num(out, x->temperature);
  sbuf_printf(out, ",\"text\":{\"format\":%s},\"tool_choice\":%s,\"tools\":%s,\"top_p\":",
              x->format ? x->format : "{\"type\":\"text\"}", x->tool_choice ? x->tool_choice : "\"auto\"",
              x->tools ? x->tools : "[]");
  sbuf_json_num(out, x->top_p);
  sbuf_puts(out, ",\"truncation\":\"disabled\",\"usage\":");
  if (done) {
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
 * conversation, the answer appended as one assistant turn (its text and
 * its calls, so a continuation can send just their outputs). */
static void keep(const gen_view *v) {
  rs_ctx *x = v->ctx;
  if (!x->store_it) return;
  sbuf js = {0};
  put_response(v, final_status(v), true, false, &js);
  json_t *conv = json_copy(x->history);
  json_t *ans = json_pack("{s:s,s:s%}", "role", "assistant", "content", sdata(&x->all_text), x->all_text.len);
  char *msgs = NULL;
  if (ans && x->calls && json_object_set(ans, "tool_calls", x->calls)) {
    json_decref(ans);
    ans = NULL;
  }
  if (!js.oom && !x->oom && conv && ans && !json_array_append_new(conv, ans)) {
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

static void rs_begin(const gen_view *v, sbuf *out) {
  rs_ctx *x = v->ctx;
  x->stream = true;
  event_head(x, "response.created", out);
  sbuf_puts(out, ",\"response\":");
  put_response(v, "in_progress", false, false, out);
  sbuf_puts(out, "}\n\n");
  event_head(x, "response.in_progress", out);
  sbuf_puts(out, ",\"response\":");
  put_response(v, "in_progress", false, false, out);
  sbuf_puts(out, "}\n\n");
}

static void rs_delta(const gen_view *v, const char *text, size_t n, const oai_logprobs *lp, sbuf *out) {
  (void)lp;
  if (n) feed(v->ctx, v, text, n, false, out);
}

static void rs_end(const gen_view *v, sbuf *out) {
  rs_ctx *x = v->ctx;
  feed(x, v, "", 0, true, out);
  const char *st = final_status(v);
  event_head(x, !strcmp(st, "completed") ? "response.completed" : "response.incomplete", out);
  sbuf_puts(out, ",\"response\":");
  put_response(v, st, true, true, out);
  sbuf_puts(out, "}\n\n");
  keep(v);
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
  rs_ctx *x = v->ctx;
  x->stream = false;
  feed(x, v, v->text ? v->text : "", v->text_len, true, out);
  put_response(v, final_status(v), true, true, out);
  keep(v);
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

#define RS_MAX_INPUT_ITEMS 4096 /* items of one request's input */
#define RS_MAX_CALL_ID 256      /* bytes of a call_id */

static const char *const k_parts[] = {"input_text", "output_text", "text", NULL};

static int oom(oai_error *e) { return oai_seterr(e, 500, "internal_error", NULL, "out of memory"); }

/* The conversation's function calls as its items come: every call_id so
 * far (call_id -> name), and the calls of the last assistant turn still
 * without an output. As in OpenAI's API, every call needs its output
 * before the conversation goes on. */
typedef struct conv_calls {
  json_t *ids;     /* owned */
  json_t *pending; /* owned */
} conv_calls;

static void conv_calls_free(conv_calls *cc) {
  json_decref(cc->ids);
  json_decref(cc->pending);
}

/* 400 when a call of the last assistant turn has no output yet. */
static int check_answered(const conv_calls *cc, const char *param, oai_error *e) {
  const char *id;
  json_t *v;
  json_object_foreach(cc->pending, id, v) {
    return oai_seterr(e, 400, "invalid_value", param,
                      "No tool output found for function call '%.64s' ('%.64s'): give its function_call_output "
                      "item before the conversation goes on",
                      id, json_string_value(v));
  }
  return 0;
}

/* The calls of a stored conversation (valid: it was checked when made). */
static int conv_calls_init(conv_calls *cc, json_t *history, oai_error *e) {
  if (!(cc->ids = json_object()) || !(cc->pending = json_object())) return oom(e);
  size_t i, j;
  json_t *m, *c;
  json_array_foreach(history, i, m) {
    const char *role = json_string_value(json_object_get(m, "role"));
    json_t *id = json_object_get(m, "tool_call_id");
    if (role && !strcmp(role, "tool") && json_is_string(id)) json_object_del(cc->pending, json_string_value(id));
    json_array_foreach(json_object_get(m, "tool_calls"), j, c) {
      const char *cid = json_string_value(json_object_get(c, "id"));
      json_t *name = json_object_get(json_object_get(c, "function"), "name");
      if (!cid || !json_is_string(name)) continue;
      if (json_object_set(cc->ids, cid, name) || json_object_set(cc->pending, cid, name)) return oom(e);
    }
  }
  return 0;
}

/* A string member of 1..max bytes; param names it. */
static int item_str(json_t *it, const char *key, const char *param, size_t max, bool required, const char **out,
                    oai_error *e) {
  char p[112];
  snprintf(p, sizeof p, "%s.%s", param, key);
  json_t *v = json_object_get(it, key);
  *out = NULL;
  if (!v || json_is_null(v)) {
    if (required) return oai_seterr(e, 400, "missing_field", p, "'%s' is required", p);
    return 0;
  }
  if (!json_is_string(v) || !json_string_length(v) || json_string_length(v) > max)
    return oai_seterr(e, 400, "invalid_value", p, "'%s' must be a string of 1..%zu bytes", p, max);
  *out = json_string_value(v);
  return 0;
}

/* {type: "function_call", call_id, name, arguments, id?, status?}: a call
 * of the assistant turn before it (a new turn after a tool output or a
 * user message), as the template takes it. */
static int input_call(json_t *it, const char *param, json_t *history, conv_calls *cc, oai_error *e) {
  static const char *const known[] = {"type", "call_id", "name", "arguments", "id", "status", NULL};
  const char *bad = oai_unknown_member(it, known), *cid, *name, *id, *args;
  char p[112];
  if (bad) {
    snprintf(p, sizeof p, "%s.%s", param, bad);
    return oai_seterr(e, 400, "unknown_field", p, "'%s' is not a member of a function_call item", p);
  }
  if (item_str(it, "call_id", param, RS_MAX_CALL_ID, true, &cid, e) ||
      item_str(it, "name", param, TC_MAX_NAME, true, &name, e) || item_str(it, "id", param, RS_MAX_CALL_ID, false, &id, e))
    return PW_EINVAL;
  if (!oai_valid_tool_name(name, strlen(name))) {
    snprintf(p, sizeof p, "%s.name", param);
    return oai_seterr(e, 400, "invalid_value", p, "'%s' must be 1..%d characters of a-z, A-Z, 0-9, '_', '-' and '.'", p,
                      TC_MAX_NAME);
  }
  json_t *a = json_object_get(it, "arguments");
  snprintf(p, sizeof p, "%s.arguments", param);
  if (!json_is_string(a)) return oai_seterr(e, 400, "invalid_type", p, "'%s' must be a string (the arguments' JSON)", p);
  if (json_string_length(a) > TC_MAX_CALL_BYTES)
    return oai_seterr(e, 400, "invalid_value", p, "'%s' holds at most %u bytes", p, TC_MAX_CALL_BYTES);
  args = json_string_value(a);
  if (json_object_get(cc->ids, cid)) {
    snprintf(p, sizeof p, "%s.call_id", param);
    return oai_seterr(e, 400, "invalid_value", p, "'%s': call_id '%.64s' is used twice in the conversation", p, cid);
  }
  /* The assistant turn it belongs to: the last message when that is the
   * assistant's (its text, or its calls so far), else a new one. */
  json_t *last = json_array_get(history, json_array_size(history) - 1);
  const char *lr = json_string_value(json_object_get(last, "role"));
  if (!lr || strcmp(lr, "assistant")) {
    if (check_answered(cc, param, e)) return PW_EINVAL;
    last = json_pack("{s:s,s:s}", "role", "assistant", "content", "");
    if (!last || json_array_append_new(history, last)) return oom(e);
  }
  json_t *calls = json_object_get(last, "tool_calls");
  if (!calls) {
    if (!(calls = json_array()) || json_object_set_new(last, "tool_calls", calls)) return oom(e);
  }
  if (json_array_size(calls) >= TC_MAX_CALLS)
    return oai_seterr(e, 400, "invalid_value", param, "an assistant turn holds at most %d function calls", TC_MAX_CALLS);
  json_t *c = template_call(cid, name, args, json_string_length(a));
  if (!c || json_array_append_new(calls, c) || json_object_set_new(cc->ids, cid, json_string(name)) ||
      json_object_set_new(cc->pending, cid, json_string(name)))
    return oom(e);
  return 0;
}

/* {type: "function_call_output", call_id, output, id?, status?}: the
 * output of a call without one yet, a tool message. */
static int input_output(json_t *it, const char *param, json_t *history, conv_calls *cc, oai_error *e) {
  static const char *const known[] = {"type", "call_id", "output", "id", "status", NULL};
  const char *bad = oai_unknown_member(it, known), *cid, *id;
  char p[112];
  if (bad) {
    snprintf(p, sizeof p, "%s.%s", param, bad);
    return oai_seterr(e, 400, "unknown_field", p, "'%s' is not a member of a function_call_output item", p);
  }
  if (item_str(it, "call_id", param, RS_MAX_CALL_ID, true, &cid, e) || item_str(it, "id", param, 256, false, &id, e))
    return PW_EINVAL;
  snprintf(p, sizeof p, "%s.call_id", param);
  json_t *name = json_object_get(cc->pending, cid);
  if (!name && json_object_get(cc->ids, cid))
    return oai_seterr(e, 400, "invalid_value", p, "'%s': function call '%.64s' already has its output", p, cid);
  if (!name)
    return oai_seterr(e, 400, "invalid_value", p,
                      "No tool call found for function call output with call_id '%.64s' (the function_call item, or "
                      "the response named by previous_response_id, must come first)",
                      cid);
  snprintf(p, sizeof p, "%s.output", param);
  json_t *out = json_object_get(it, "output");
  if (!out) return oai_seterr(e, 400, "missing_field", p, "'%s' is required", p);
  json_t *text;
  if (api_content_text(out, p, k_parts, &text, e)) return PW_EINVAL;
  json_t *m = json_pack("{s:s,s:o,s:s,s:O}", "role", "tool", "content", text, "tool_call_id", cid, "name", name);
  if (!m || json_array_append_new(history, m)) return oom(e);
  json_object_del(cc->pending, cid);
  return 0;
}

/* A message item (type "message" or none): role and text content. */
static int input_message(json_t *it, const char *param, json_t *history, conv_calls *cc, oai_error *e) {
  json_t *role = json_object_get(it, "role");
  const char *rs = json_is_string(role) ? json_string_value(role) : "";
  if (strcmp(rs, "user") && strcmp(rs, "assistant") && strcmp(rs, "system") && strcmp(rs, "developer"))
    return oai_seterr(e, 400, "invalid_value", param, "'%s.role' must be user, assistant, system or developer", param);
  if (check_answered(cc, param, e)) return PW_EINVAL;
  char p2[80];
  snprintf(p2, sizeof p2, "%s.content", param);
  json_t *text;
  if (api_content_text(json_object_get(it, "content"), p2, k_parts, &text, e)) return PW_EINVAL;
  json_t *m = json_pack("{s:s,s:o}", "role", strcmp(rs, "developer") ? rs : "system", "content", text);
  if (!m || json_array_append_new(history, m)) return oom(e);
  return 0;
}

/* input: a string (one user message) or items: messages, function calls
 * and their outputs, after the stored conversation in history. */
static int parse_input(json_t *in, json_t *history, oai_error *e) {
  if (!in) return oai_seterr(e, 400, "missing_field", "input", "'input' is required");
  conv_calls cc = {0};
  int rc = conv_calls_init(&cc, history, e);
  if (rc) goto done;
  if (json_is_string(in)) {
    if ((rc = check_answered(&cc, "input", e))) goto done;
    json_t *m = json_pack("{s:s,s:O}", "role", "user", "content", in);
    if (!m || json_array_append_new(history, m)) rc = oom(e);
    goto done;
  }
  if (!json_is_array(in) || !json_array_size(in)) {
    rc = oai_seterr(e, 400, "invalid_type", "input", "'input' must be a string or a non-empty array of items");
    goto done;
  }
  if (json_array_size(in) > RS_MAX_INPUT_ITEMS) {
    rc = oai_seterr(e, 400, "invalid_value", "input", "'input' holds at most %d items", RS_MAX_INPUT_ITEMS);
    goto done;
  }
  size_t i;
  json_t *it;
  json_array_foreach(in, i, it) {
    char param[64];
    snprintf(param, sizeof param, "input[%zu]", i);
    if (!json_is_object(it)) {
      rc = oai_seterr(e, 400, "invalid_type", param, "'%s' must be an object", param);
      break;
    }
    json_t *type = json_object_get(it, "type");
    const char *ts = json_is_string(type) ? json_string_value(type) : type && !json_is_null(type) ? "?" : "message";
    if (!strcmp(ts, "message")) rc = input_message(it, param, history, &cc, e);
    else if (!strcmp(ts, "function_call")) rc = input_call(it, param, history, &cc, e);
    else if (!strcmp(ts, "function_call_output")) rc = input_output(it, param, history, &cc, e);
    else
      rc = oai_seterr(e, 400, "unsupported_input_item", param,
                      "'%s' is a '%.40s' item: this server takes message, function_call and function_call_output items",
                      param, ts);
    if (rc) break;
  }
  /* Calls left without an output: the model would answer after calls
   * that never ran (OpenAI's API refuses that too). */
  if (!rc) rc = check_answered(&cc, "input", e);
done:
  conv_calls_free(&cc);
  return rc;
}

/* tools[i], a function tool {type, name, description, parameters,
 * strict}, checked against the ones before it (arr) and appended to arr in
 * the chat form, {type, function: {name, description, parameters}}. */
static int function_tool(json_t *tool, size_t i, json_t *arr, oai_error *e) {
  static const char *const known[] = {"type", "name", "description", "parameters", "strict", NULL};
  char p[112];
  snprintf(p, sizeof p, "tools[%zu]", i);
  json_t *type = json_is_object(tool) ? json_object_get(tool, "type") : NULL;
  if (!json_is_string(type)) return oai_seterr(e, 400, "invalid_type", p, "'%s' must be an object with a string 'type'", p);
  if (strcmp(json_string_value(type), "function")) {
    snprintf(p, sizeof p, "tools[%zu].type", i);
    return oai_seterr(e, 400, "unsupported_tool", p,
                      "'%s' is '%.40s': this server runs function tools only (hosted tools such as web_search, "
                      "file_search, code_interpreter, mcp and custom tools are not supported)",
                      p, json_string_value(type));
  }
  const char *bad = oai_unknown_member(tool, known);
  if (bad) {
    snprintf(p, sizeof p, "tools[%zu].%.40s", i, bad);
    return oai_seterr(e, 400, "unknown_field", p, "'%s' is not a member of a function tool", p);
  }
  if (oai_check_function(tool, p, p, e)) return PW_EINVAL;
  json_t *name = json_object_get(tool, "name"), *params = json_object_get(tool, "parameters");
  json_t *desc = json_object_get(tool, "description"), *strict = json_object_get(tool, "strict");
  /* strict: as on chat completions, what the grammar cannot enforce
   * of its schema is then a 400 (tc_grammar); else the calls follow
   * the schema as far as the grammar can. */
  if (strict && !json_is_boolean(strict) && !json_is_null(strict))
    return oai_seterr(e, 400, "invalid_type", p, "'%s.strict' must be a boolean", p);
  if (oai_find_tool(arr, SIZE_MAX, json_string_value(name)))
    return oai_seterr(e, 400, "invalid_value", p, "tool name '%s' is given twice", json_string_value(name));
  json_t *fn = json_pack("{s:O}", "name", name);
  if (fn && json_is_string(desc)) json_object_set(fn, "description", desc);
  if (fn && json_is_object(params)) json_object_set(fn, "parameters", params);
  if (fn && json_is_true(strict)) json_object_set(fn, "strict", strict);
  if (!fn || json_array_append_new(arr, json_pack("{s:s,s:o}", "type", "function", "function", fn))) return oom(e);
  return 0;
}

/* tools, tool_choice and parallel_tool_calls into r->tools (the chat
 * form, {type, function: {name, description, parameters}}),
 * r->tool_choice, r->tool_name and r->parallel_tool_calls; echoed as
 * given. What the template makes of them is oai_chat_prepare's, in
 * srv_generate, as for chat completions. */
static int parse_tools(json_t *root, oai_request *r, rs_ctx *x, oai_error *e) {
  r->tool_choice = OAI_TOOLS_AUTO;
  r->parallel_tool_calls = true;
  if (api_bool(root, "parallel_tool_calls", "parallel_tool_calls", &r->parallel_tool_calls, e)) return PW_EINVAL;
  x->parallel = r->parallel_tool_calls;
  json_t *t = json_object_get(root, "tools");
  if (t && !json_is_null(t)) {
    if (!json_is_array(t)) return oai_seterr(e, 400, "invalid_type", "tools", "'tools' must be an array");
    if (json_array_size(t) > TC_MAX_TOOLS)
      return oai_seterr(e, 400, "invalid_value", "tools", "'tools' holds at most %d tools", TC_MAX_TOOLS);
    if (oai_convert_tools(t, function_tool, &r->tools, e)) return PW_EINVAL;
    if (r->tools && !(x->tools = json_dumps(t, JSON_COMPACT))) return oom(e);
  }
  json_t *tc = json_object_get(root, "tool_choice");
  if (!tc || json_is_null(tc)) return 0;
  if (json_is_string(tc)) {
    const char *v = json_string_value(tc);
    if (!strcmp(v, "none")) r->tool_choice = OAI_TOOLS_NONE;
    else if (!strcmp(v, "auto")) r->tool_choice = OAI_TOOLS_AUTO;
    else if (!strcmp(v, "required")) r->tool_choice = OAI_TOOLS_REQUIRED;
    else return oai_seterr(e, 400, "invalid_value", "tool_choice", "'tool_choice' must be none, auto, required or {\"type\": \"function\", \"name\": ...}");
  } else {
    json_t *type = json_is_object(tc) ? json_object_get(tc, "type") : NULL;
    if (!json_is_string(type))
      return oai_seterr(e, 400, "invalid_type", "tool_choice",
                        "'tool_choice' must be none, auto, required or {\"type\": \"function\", \"name\": ...}");
    if (strcmp(json_string_value(type), "function"))
      return oai_seterr(e, 400, "unsupported_tool_choice", "tool_choice",
                        "'tool_choice' of type '%.40s' is not supported: this server takes none, auto, required or "
                        "{\"type\": \"function\", \"name\": ...}",
                        json_string_value(type));
    static const char *const tc_known[] = {"type", "name", NULL};
    const char *bad = oai_unknown_member(tc, tc_known);
    if (bad) return oai_seterr(e, 400, "unknown_field", "tool_choice", "'tool_choice.%.40s' is not a member of a function choice", bad);
    json_t *name = json_object_get(tc, "name");
    if (!json_is_string(name)) return oai_seterr(e, 400, "missing_field", "tool_choice", "'tool_choice.name' must be a string");
    r->tool_choice = OAI_TOOLS_NAMED;
    json_t *n = oai_find_tool(r->tools, SIZE_MAX, json_string_value(name));
    if (n) r->tool_name = json_string_value(n); /* r owns it */
    if (!r->tool_name)
      return oai_seterr(e, 400, "invalid_value", "tool_choice", "'tool_choice' names '%.64s', which is not in 'tools'",
                        json_string_value(name));
  }
  if (!r->tools && (r->tool_choice == OAI_TOOLS_REQUIRED || r->tool_choice == OAI_TOOLS_NAMED))
    return oai_seterr(e, 400, "invalid_value", "tool_choice", "'tool_choice' required or a function needs 'tools'");
  if (!(x->tool_choice = json_dumps(tc, JSON_COMPACT | JSON_ENCODE_ANY))) return oom(e);
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
    "safety_identifier", "service_tier", "parallel_tool_calls", "tool_choice", "tools", "truncation", "top_logprobs",
    /* refused unless empty */
    "reasoning", "include", "background", "conversation", "context_management", "moderation", "prompt",
    "prompt_cache_options", NULL};

/* Members that change nothing here at the values accepted. */
static int check_neutral(json_t *root, oai_error *e) {
  bool b;
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
  static const char *const refused[] = {"reasoning", "include", "conversation", "context_management", "moderation",
                                        "prompt",    "prompt_cache_options", NULL};
  for (int i = 0; refused[i]; i++) {
    json_t *v = json_object_get(root, refused[i]);
    if (v && !json_is_null(v) && !(json_is_array(v) && !json_array_size(v)))
      return oai_seterr(e, 400, "unsupported_field", refused[i], "'%s' is not supported by this server", refused[i]);
  }
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
  if (parse_format(root, r, x, e) || parse_tools(root, r, x, e)) return PW_EINVAL;
  if (r->grammar && r->tools && r->tool_choice != OAI_TOOLS_NONE)
    return oai_seterr(e, 400, "invalid_value", "text.format",
                      "'text.format' json_object or json_schema cannot be combined with 'tools' (one grammar per answer)");

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
  if (!r->messages && !(r->messages = json_array())) return oom(e);
  json_array_foreach(x->history, i, msg) {
    if (json_array_append_new(r->messages, json_deep_copy(msg))) return oom(e);
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
  x->sx = *srv_tool_syntax(k); /* the request is bound to its model now */
  return srv_generate(k, c, &r, &o, &rs_api, x);
}

int resp_render_text(const tc_syntax *sx, const oai_request *r, const char *text, size_t n, size_t piece,
                     engine_finish finish, sbuf *out) {
  rs_ctx *x = calloc(1, sizeof *x);
  if (!x) return PW_ENOMEM;
  x->sx = *sx;
  x->parallel = r->parallel_tool_calls;
  snprintf(x->model, sizeof x->model, "test");
  oai_new_id("msg_", x->msg_id, sizeof x->msg_id);
  oai_resp o;
  oai_resp_init(&o, OAI_CHAT, "test", NULL);
  oai_new_id("resp_", o.id, sizeof o.id);
  x->created = o.created;
  api_render_text(&rs_api, x, r, &o, text, n, piece, finish, out);
  int rc = out->oom || x->oom ? PW_ENOMEM : 0;
  rs_free(x);
  return rc;
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
