/* api.h - the server's inside as its API adapters see it: answering a
 * request, and the one generation core that every API shares.
 *
 * What it is: the seam between server.c (HTTP, auth, deadlines, the engine
 * event loop with disconnect detection, receipts, metrics, the request
 * log) and the adapters (oai.c for OpenAI; api_ollama.c, api_anthropic.c,
 * api_responses.c), which parse their own request bodies into an
 * oai_request and render their own bodies and stream events. Every API
 * goes through srv_generate: the same prompt path (chat/prompt.h), engine
 * parameters, stop strings, speculation, prefix reuse, admission and
 * deadlines. An adapter is one file, one gen_api table and route rows.
 * What it is not: public; nothing outside src/server includes it. */
#ifndef PW_SERVER_API_H
#define PW_SERVER_API_H

#include "engine/engine.h"
#include "server/models.h"
#include "server/oai.h"
#include "server/receipts.h"
#include "server/sbuf.h"

#include <jansson.h>
#include <microhttpd.h>
#include <stdbool.h>
#include <stdint.h>

typedef struct server server;
typedef struct conn conn; /* one HTTP request (server.c) */

/* What a renderer sees of a generation. Views valid during the call. */
typedef struct gen_view {
  const oai_request *r;    /* the request */
  const oai_resp *o;       /* identity; receipt members set once it ended */
  int n_prompt;            /* prompt tokens of the running request */
  engine_usage usage;      /* at the end: usage of the whole answer */
  engine_finish finish;    /* at the end (and at each OpenAI choice's end) */
  int stop_index;          /* at the end: the r->stop string that ended the text; -1 = none */
  uint64_t t0, t_first, t_end; /* pw_now_ns: arrival, first token (0 = none), end (0 = not yet) */
  const char *text;        /* complete(): the whole generated text */
  size_t text_len;
  const oai_logprobs *lp;  /* complete(): logprobs, NULL when not asked for */
  void *ctx;               /* the adapter's own state (srv_generate's ctx) */
} gen_view;

/* One API's rendering of a generation. Every hook appends to out. */
typedef struct gen_api {
  const char *stream_ctype; /* Content-Type of a streamed answer */
  /* Streamed: at the start (and, OpenAI, at each further choice's start). */
  void (*begin)(const gen_view *v, sbuf *out);
  /* Streamed text; lp NULL unless logprobs were asked for. */
  void (*delta)(const gen_view *v, const char *text, size_t n, const oai_logprobs *lp, sbuf *out);
  /* Streamed: a choice ended (v->finish); may be NULL. */
  void (*choice_end)(const gen_view *v, sbuf *out);
  /* Streamed: the answer ended (v->usage, v->finish, timings, receipt). */
  void (*end)(const gen_view *v, sbuf *out);
  /* Streamed: a failure after the stream started; ends the stream. */
  void (*error)(const gen_view *v, const oai_error *e, sbuf *out);
  /* Streamed: nothing happened for keepalive_ms; NULL = send nothing. */
  void (*keepalive)(const gen_view *v, sbuf *out);
  /* Not streamed: the whole answer of one choice. */
  void (*complete)(const gen_view *v, sbuf *out);
  /* Not streamed, several choices (OpenAI's n); NULL when the API has none. */
  void (*complete_choices)(const gen_view *v, const oai_choice *c, int n, sbuf *out);
  void (*ctx_free)(void *ctx); /* frees srv_generate's ctx; may be NULL */
  const char *receipt_endpoint; /* the receipt's endpoint name; NULL = by request kind */
} gen_api;

/* An API's error body (OpenAI: oai_render_error). */
typedef void (*api_error_fn)(const oai_error *e, sbuf *out);

/* ---- the request ------------------------------------------------------ */
server *srv_server(conn *k);
const char *srv_body(conn *k, size_t *len);
const char *srv_arg(conn *k); /* the "{id}" part of the path; NULL = none */
srv_caller srv_who(conn *k);  /* the caller's tenant (for per-tenant state) */
uint64_t srv_t0(conn *k);     /* pw_now_ns at arrival */
/* True when the client has closed or reset its connection (a long answer
 * polls it to stop work nobody will read). */
bool srv_client_gone(struct MHD_Connection *c);
/* Sets the request's id (X-Request-Id, the request log). */
void srv_set_id(conn *k, const char *id);

/* ---- answers (each queues exactly one response) ----------------------- */
enum MHD_Result srv_reply(conn *k, struct MHD_Connection *c, int status, const char *ctype, sbuf *b);
enum MHD_Result srv_reply_json(conn *k, struct MHD_Connection *c, int status, sbuf *b);
/* A response built by the caller (taken: destroyed here). */
enum MHD_Result srv_reply_raw(conn *k, struct MHD_Connection *c, int status, struct MHD_Response *r);
/* In the shape of the route's API (its row's error renderer). */
enum MHD_Result srv_reply_error(conn *k, struct MHD_Connection *c, const oai_error *e);

/* ---- the server's facts ----------------------------------------------- */
/* The request's model (bound: srv_use_model, or the server's one model). */
engine *srv_engine(conn *k);
const prompt_builder *srv_prompt(conn *k);
long long srv_started(server *s); /* Unix seconds the server started */
int srv_keepalive_ms(server *s);
/* Binds the request to the model it names. One model: 0 when name is
 * empty/NULL (allow_empty), the model id, or the id with ":latest" (the
 * tag Ollama clients add); else 404 model_not_found in e. Store serving:
 * the store model (loaded when needed; models.h), held until the request
 * ends; an empty name is 400 whatever allow_empty says. */
int srv_use_model(conn *k, struct MHD_Connection *c, const char *name, bool allow_empty, oai_error *e);
/* Nanoseconds the request waited for its model (room and load) when
 * serving the store; 0 when it was loaded already or with one model. */
uint64_t srv_load_ns(conn *k);
/* The store being served; NULL = one model. */
srv_models *srv_store(server *s);
/* The request's keep_alive in seconds (< 0 forever, 0 unload after it):
 * applied to its model when it ends (store serving). */
void srv_set_keep_alive(conn *k, double seconds);
struct resp_store *srv_responses(server *s);

/* ---- the generation core ---------------------------------------------- */
/* Runs r (kind OAI_CHAT with messages, or OAI_COMPLETION with text or
 * tokens; validated) through the prompt path and the engine, and answers
 * with api's renderers: streamed when r->stream. Takes r (moved: left
 * empty) and ctx (freed with api->ctx_free, also on failure). o is the
 * response identity (copied). */
enum MHD_Result srv_generate(conn *k, struct MHD_Connection *c, oai_request *r, const oai_resp *o,
                             const gen_api *api, void *ctx);
/* The prompt tokens of a chat (messages as prompt_chat takes them), for
 * token counting. 0 or PW_EINVAL with e set. */
int srv_count_chat(conn *k, json_t *messages, int *n_tokens, oai_error *e);
/* The tool-call syntax of the request's model (bound), for an adapter that
 * renders tool calls itself (chatout_init, tc_parser_create). */
const tc_syntax *srv_tool_syntax(conn *k);
/* srv_count_chat for a chat request r (messages, tools, tool_choice set by
 * its adapter) prepared as srv_generate prepares it (oai_chat_prepare, with
 * its errors), so what the template writes for the tools is counted. */
int srv_count_chat_request(conn *k, oai_request *r, int *n_tokens, oai_error *e);

/* Embeddings through the engine, one input at a time. r: kind
 * OAI_EMBEDDING with inputs (validated); truncate cuts inputs longer than
 * the context instead of refusing them. Renderers append to out. */
typedef struct embed_api {
  void (*begin)(void *ctx, sbuf *out);
  void (*item)(void *ctx, size_t index, const float *vec, int n, sbuf *out);
  void (*end)(void *ctx, long long prompt_tokens, uint64_t t0, uint64_t t_end, const oai_resp *ro, sbuf *out);
} embed_api;
enum MHD_Result srv_embed(conn *k, struct MHD_Connection *c, oai_request *r, bool truncate, const embed_api *api,
                          void *ctx);

/* ---- adapters ---------------------------------------------------------- */
/* Rerank (api_rerank.c): POST /v1/rerank over srv_embed with this
 * renderer, the one embed_api allowed on a reranker. */
enum MHD_Result rerank_handle(conn *k, struct MHD_Connection *c);
extern const embed_api rerank_embed_api;

extern const gen_api oai_gen_api; /* OpenAI chat/completions (server.c) */

/* Ollama (api_ollama.c) */
void ollama_render_error(const oai_error *e, sbuf *out);
enum MHD_Result ollama_chat(conn *k, struct MHD_Connection *c);
enum MHD_Result ollama_generate(conn *k, struct MHD_Connection *c);
enum MHD_Result ollama_embed(conn *k, struct MHD_Connection *c);
enum MHD_Result ollama_embeddings(conn *k, struct MHD_Connection *c);
enum MHD_Result ollama_tags(conn *k, struct MHD_Connection *c);
enum MHD_Result ollama_show(conn *k, struct MHD_Connection *c);
enum MHD_Result ollama_ps(conn *k, struct MHD_Connection *c);
enum MHD_Result ollama_version(conn *k, struct MHD_Connection *c);
/* For tests: what /api/chat's renderers write for a model's answer text
 * under template syntax sx and the prepared request r (oai_chat_prepare;
 * in_reasoning as the prompt left it): the whole body (piece 0), or the
 * NDJSON chunks of a stream fed piece bytes at a time, then its done
 * chunk. Times and ids as in a real answer. 0 or PW_ENOMEM. */
int ollama_chat_render_text(const tc_syntax *sx, const oai_request *r, const char *text, size_t n, size_t piece,
                            engine_finish finish, sbuf *out);
/* ollama_chat_render_text for /api/chat (chat) or a templated
 * /api/generate, with the reasoning returned (think: message.thinking or
 * thinking, streamed as pieces of their own) or dropped. */
int ollama_render_text_think(const tc_syntax *sx, const oai_request *r, bool chat, bool think, const char *text,
                             size_t n, size_t piece, engine_finish finish, sbuf *out);

/* Anthropic Messages (api_anthropic.c) */
void anth_render_error(const oai_error *e, sbuf *out);
enum MHD_Result anth_messages(conn *k, struct MHD_Connection *c);
enum MHD_Result anth_count_tokens(conn *k, struct MHD_Connection *c);

/* OpenAI Responses (api_responses.c): finished responses are kept in a
 * store bounded by entries and bytes (least recently used first out), per
 * tenant, so previous_response_id continues a conversation. */
typedef struct resp_store resp_store;
int resp_store_create(int max_entries, size_t max_bytes, resp_store **out, char *err);
void resp_store_destroy(resp_store *st);
/* Keeps a response: its id, its conversation's cache key (chain), its
 * owner, its object (json) and conversation (messages, JSON text); copies
 * all. Evicts least recently used entries to stay within the bounds; an
 * entry larger than the byte bound is not kept. 0 or PW_ENOMEM. */
int resp_store_add(resp_store *st, const char *id, const char *chain, const srv_caller *who, const char *json,
                   const char *messages);
/* Copies of the caller's entry id (json and/or messages malloc'ed, either
 * may be NULL; chain: 48 bytes or NULL), which becomes the most recently
 * used. 0, PW_ENOTFOUND (none, or another tenant's), PW_ENOMEM. */
int resp_store_get(resp_store *st, const char *id, const srv_caller *who, char **json, char **messages,
                   char *chain);
/* Entries and bytes held now. */
void resp_store_usage(resp_store *st, int *entries, size_t *bytes);
enum MHD_Result resp_create(conn *k, struct MHD_Connection *c);
enum MHD_Result resp_get(conn *k, struct MHD_Connection *c);
/* For tests: what POST /v1/responses writes for a model's answer text
 * under template syntax sx and the prepared request r (oai_chat_prepare;
 * in_reasoning as the prompt left it): the whole response object (piece
 * 0), or the events of a stream fed piece bytes at a time, its
 * response.completed (or .incomplete) last. Ids and times as in a real
 * answer; nothing is stored. 0 or PW_ENOMEM. */
int resp_render_text(const tc_syntax *sx, const oai_request *r, const char *text, size_t n, size_t piece,
                     engine_finish finish, sbuf *out);

/* Model management (api_models.c): GET /v1/ps, POST /v1/models/{id}/load
 * and /unload, DELETE /v1/models/{id}, Ollama's POST /api/pull and
 * DELETE /api/delete. */
enum MHD_Result models_ps(conn *k, struct MHD_Connection *c);
enum MHD_Result models_action(conn *k, struct MHD_Connection *c);
enum MHD_Result models_delete(conn *k, struct MHD_Connection *c);
enum MHD_Result ollama_pull(conn *k, struct MHD_Connection *c);
/* POST /v1/models/pull: progress as SSE, or NDJSON (Accept:
 * application/x-ndjson), or one JSON at the end (stream false). */
enum MHD_Result models_pull(conn *k, struct MHD_Connection *c);
enum MHD_Result ollama_delete(conn *k, struct MHD_Connection *c);

/* The chat page (ui.c over the files built in) */
enum MHD_Result ui_page(conn *k, struct MHD_Connection *c);
enum MHD_Result ui_asset(conn *k, struct MHD_Connection *c);

/* ---- shared helpers (api_json.c; api_iso_time in server.c) ------------- */
/* ISO-8601 UTC time with nanoseconds, e.g. 2026-01-02T03:04:05.123456789Z. */
void api_iso_time(char *out, size_t cap);
/* Members of a request object, type- and range-checked; *given (may be
 * NULL) tells whether the member was there (null counts as absent). param
 * names it in errors (e.g. "options.top_k"). 0 or PW_EINVAL with e (400). */
int api_num(json_t *obj, const char *key, const char *param, double lo, double hi, double *out, bool *given,
            oai_error *e);
int api_int(json_t *obj, const char *key, const char *param, long long lo, long long hi, long long *out, bool *given,
            oai_error *e);
int api_bool(json_t *obj, const char *key, const char *param, bool *out, oai_error *e);
/* A string member (NULL when absent); 400 when present and not a string. */
int api_str(json_t *obj, const char *key, const char *param, const char **out, oai_error *e);
/* Stop strings (a string or an array of strings) as views into v. */
int api_stops(json_t *v, const char *param, oai_request *r, oai_error *e);
/* The grammar of a JSON schema (an object) into *out. */
int api_schema_grammar(json_t *schema, const char *param, grammar **out, oai_error *e);
/* The grammar of any JSON object (JSON mode). */
int api_json_grammar(grammar **out, oai_error *e);
/* keep_alive of a request object: a number of seconds or a duration string
 * ("5m", "1h30m"); negative = forever (-1). *given tells whether it was
 * there (null counts as absent); then the request's keep-alive is set
 * (srv_set_keep_alive). 0 or 400 naming it. */
int api_keep_alive(conn *k, json_t *root, bool *given, double *out, oai_error *e);
/* A seed for a request that gave none (CSPRNG). */
uint64_t api_random_seed(void);
/* Text of a content given as a string or as an array of typed blocks whose
 * text-bearing types are listed in text_types (NULL-terminated); any other
 * block type is 400 unsupported_content. Returns a new JSON string. */
int api_content_text(json_t *content, const char *param, const char *const *text_types, json_t **out, oai_error *e);
/* Appends {"role":role,"content":text} to r->messages (created on first use). */
int api_add_message(oai_request *r, const char *role, json_t *text_owned, oai_error *e);
/* Sets r->cache_key to a copy of key kept alive by r->root. */
int api_set_cache_key(oai_request *r, const char *key, oai_error *e);
/* Parses body into a JSON object (r->root; r->kind set). 0 or 400. */
int api_parse_body(const char *body, size_t len, oai_kind kind, oai_request *r, oai_error *e);

/* ---- answer-side helpers (api_tools.c) --------------------------------- */
/* True when s[0..n) is JSON white space only (or empty): text the
 * block-shaped answers (Anthropic's, Responses') hold until more text
 * follows, as it only separates a call from what is around it. */
bool api_all_ws(const char *s, size_t n);
/* For the adapters' test hooks (ollama_chat_render_text, ...): runs api's
 * renderers over a model's answer text as srv_generate would, with ctx
 * and the request r, identity o: the whole answer (piece 0, complete), or
 * a stream fed piece bytes at a time (begin, deltas, end). finish is the
 * answer's end; no stop string ended it. */
void api_render_text(const gen_api *api, void *ctx, const oai_request *r, const oai_resp *o, const char *text,
                     size_t n, size_t piece, engine_finish finish, sbuf *out);

#endif
