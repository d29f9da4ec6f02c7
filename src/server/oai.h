/* oai.h - the OpenAI API mapping of the server: request bodies parsed and
 * validated into engine parameters, responses and SSE chunks rendered, error
 * objects shaped as OpenAI shapes them.
 *
 * What it is: pure functions over JSON text and engine.h's plain structs. It
 * never calls the engine, the tokenizer or the network, so every rule here is
 * unit-testable without a model. Token texts (for logprobs) come through a
 * caller callback.
 * What it is not: HTTP (server.c), chat templates or tokenization
 * (prompt.c), authentication (auth.c), metrics (metrics.c).
 *
 * Validation policy: malformed JSON, wrong types, out-of-range values and
 * missing required fields are 400 with `param` naming the field. Fields the
 * API defines but this server does not implement (tools, response_format
 * other than text, suffix, echo, best_of > 1, dimensions, ...) are
 * 400 with code "unsupported_<field>" and never silently ignored; so are
 * the llama.cpp server's own fields this server does not implement
 * (chat_template_kwargs, reasoning_effort, mirostat, typical_p, samplers,
 * ...: the table in oai.c, listed in the README) unless their value is
 * the neutral one. n_predict is honoured as max_tokens; cache_prompt is
 * accepted (it never changes the output). Each endpoint lists the
 * top-level members it reads (oai.c, next to the parsers); any other
 * member is 400 "unknown_field" naming it, as a field this server does not
 * know would otherwise be ignored without the client knowing (a member
 * whose value is JSON null asks for nothing and passes). Integers given as
 * reals are range-checked exactly before any conversion.
 * prompt_cache_key (chat and completions) must be 1..256 bytes of UTF-8
 * without control characters or leading/trailing white space; anything else
 * is 400 invalid_prompt_cache_key. */
#ifndef PW_SERVER_OAI_H
#define PW_SERVER_OAI_H

#include "chat/prompt.h"
#include "chat/toolcall.h"
#include "engine/engine.h"
#include "grammar/grammar.h"
#include "server/sbuf.h"

#include "power.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum oai_kind {
  OAI_CHAT = 1,       /* POST /v1/chat/completions */
  OAI_COMPLETION = 2, /* POST /v1/completions */
  OAI_EMBEDDING = 3,  /* POST /v1/embeddings */
  OAI_TOKENIZE = 4,   /* POST /tokenize */
  OAI_DETOKENIZE = 5, /* POST /detokenize */
} oai_kind;

/* An API error: HTTP status plus the OpenAI error object's fields. */
typedef struct oai_error {
  int status;        /* HTTP status: 400, 401, 404, 405, 408, 413, 500, 503 */
  char type[32];     /* invalid_request_error, authentication_error, ... */
  char code[48];     /* machine-readable: invalid_json, invalid_type, missing_field,
                        invalid_value, unsupported_<field>, model_not_found, ... */
  char param[64];    /* offending field ("" = none, rendered as null) */
  char message[PW_ERRMAX];
} oai_error;

/* Fills e (type derived from status) and returns PW_EINVAL. code and param
 * may be NULL. */
int oai_seterr(oai_error *e, int status, const char *code, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
/* Maps an engine status (PW_EBUSY, PW_ETIMEOUT, PW_ECONTEXT, PW_EINVAL, ...)
 * and its message to the API error. */
void oai_error_from_status(oai_error *e, int status, const char *message);
/* The API error for a failure of the prompt path (chat/prompt.h). */
void oai_error_from_prompt(oai_error *e, const prompt_error *pe);
/* {"error":{"message":...,"type":...,"param":...,"code":...}} */
void oai_render_error(const oai_error *e, sbuf *out);

/* Unknown members. known: the names a request object may carry
 * (NULL-terminated). Returns the first member of obj (in the body's order)
 * that is not among them and whose value is not JSON null, or NULL. */
const char *oai_unknown_member(json_t *obj, const char *const *known);
/* 400 "unknown_field" naming key (param = key) and PW_EINVAL: for the
 * adapters, which render it in their own error shape. */
int oai_unknown_field(oai_error *e, const char *key);
/* Both: 0 when every member of obj is known, else the error above. */
int oai_check_fields(json_t *obj, const char *const *known, oai_error *e);
/* Tools, for every API's tools (OpenAI's here, and the adapters', which
 * convert theirs to this chat form): a name the tool-call grammar and
 * parser accept (chat/toolcall.h: 1..TC_MAX_NAME bytes of [A-Za-z0-9_.-]). */
bool oai_valid_tool_name(const char *s, size_t n);
/* A function tool's name, description and parameters checked (OpenAI's
 * shape: fn is tools[i].function; Responses' flat tools pass the tool
 * itself): 400s with param as e->param and the member named where.name,
 * where.description, where.parameters. 0 or PW_EINVAL. */
int oai_check_function(json_t *fn, const char *param, const char *where, oai_error *e);
/* The tool named name among the first n of tools (chat form: {"type",
 * "function": {"name", ...}}; n past the end = all): its name as a JSON
 * string (owned by tools), or NULL. tools may be NULL. */
json_t *oai_find_tool(json_t *tools, size_t n, const char *name);
/* An adapter's tools[i] checked (against the ones before it, in out) and
 * appended to out in chat form; 0 or the error in e. */
typedef int (*oai_tool_fn)(json_t *tool, size_t i, json_t *out, oai_error *e);
/* Every tool of the array tools through one into a new array: *out (NULL
 * when tools is empty). 0, or the first tool's error (*out NULL). */
int oai_convert_tools(json_t *tools, oai_tool_fn one, json_t **out, oai_error *e);
/* The top-level members oai_parse reads for kind (NULL-terminated; chat and
 * completions also take llama.cpp's fields of their kind, refused there by
 * name unless neutral), or NULL for an unknown kind. */
const char *const *oai_fields(oai_kind kind);

#define OAI_MAX_INPUTS 2048 /* embeddings inputs per request, as OpenAI */
#define OAI_MAX_TOKENS_IN PROMPT_MAX_TOKENS /* token ids accepted in one array */
#define OAI_CACHE_KEY_MAX 256     /* bytes of a prompt_cache_key */
#define OAI_MAX_CHOICES 64        /* choices per request: n times the number of prompts */

/* A validated request. Views point into root and live as long as it. */
typedef struct oai_request {
  oai_kind kind;
  json_t *root;               /* owned: the parsed body */
  const char *model;          /* view; NULL = omitted (use the loaded model) */
  json_t *messages;           /* owned, chat: [{role, content: string}] for a template */
  const char *text;           /* view: completion prompt / tokenize content; NULL if tokens */
  size_t text_len;
  int32_t *tokens;            /* owned: completion prompt ids / detokenize ids; NULL if text */
  int n_tokens;
  json_t *prompts;            /* owned, completions with several prompts: array of non-empty strings
                               * and/or arrays of ids (validated); NULL = one prompt (text/tokens) */
  int n_choices;              /* chat/completions: choices per prompt ("n"), 1..OAI_MAX_CHOICES;
                               * choice i samples with seed + i. Streamed choices come one after
                               * the other, each chunk naming its index */
  bool stream;
  bool include_usage;         /* stream_options.include_usage */
  bool logprobs;              /* report the chosen tokens' logprobs */
  int top_logprobs;           /* alternatives per position, 0..PW_SAMPLE_MAX_PROBS */
  int max_tokens;             /* generated tokens; 0 = up to the context */
  pw_sampler_params sampling; /* logit_bias points at the owned list below */
  bool seed_given;            /* false: sampling.seed is random */
  bool ignore_eos;            /* llama.cpp's field: end-of-generation tokens do not end the answer */
  pw_logit_bias *logit_bias;  /* owned */
  const char *stop[ENGINE_MAX_STOP]; /* views */
  int n_stop;
  json_t *inputs;             /* owned, embeddings: array of strings and/or arrays of ids */
  bool base64;                /* embeddings: encoding_format "base64" */
  int dimensions;             /* embeddings: requested size; 0 = omitted */
  bool add_special;           /* tokenize: add BOS/EOS as the vocabulary says (default false) */
  bool parse_special;         /* tokenize: special-token text becomes special ids (default true) */
  bool with_pieces;           /* tokenize: return [{id, piece}] */
  const char *cache_key;      /* view: chat/completions prompt_cache_key (validated); NULL = none.
                               * Secret-like: never log or store it; hash it (oai_cache_scope) */
  size_t cache_key_len;       /* bytes, 1..OAI_CACHE_KEY_MAX */
  grammar *grammar;           /* owned (one reference): the output's grammar from response_format
                               * (json_object, json_schema) or the llama.cpp `grammar` field; NULL = free text */
  /* chat: tool calls and reasoning */
  json_t *tools;              /* owned reference: the request's tools array (validated); NULL = none */
  int tool_choice;            /* OAI_TOOLS_* */
  const char *tool_name;      /* view: the function tool_choice names */
  bool parallel_tool_calls;   /* default true */
  const char *reasoning_effort; /* view; NULL = not given */
  json_t *template_kwargs;    /* view: chat_template_kwargs (an object) */
  /* set by oai_chat_prepare */
  json_t *tpl_vars;           /* owned: extra template variables (prompt_chat_opts.extra_vars) */
  bool tools_active;          /* the answer is parsed for tool calls */
  bool render_special;        /* engine_params.render_special */
  bool bare_call;             /* the grammar starts the answer with a call without its opener */
  bool in_reasoning;          /* the rendered prompt opened a reasoning block (set by the caller) */
} oai_request;

enum { OAI_TOOLS_AUTO = 0, OAI_TOOLS_NONE = 1, OAI_TOOLS_REQUIRED = 2, OAI_TOOLS_NAMED = 3 };

/* Parses and validates a body of len bytes for the endpoint kind. On error
 * returns PW_EINVAL with e filled (status 400) and r holds nothing. On
 * success the caller owns r's contents (oai_request_free). */
int oai_parse(oai_kind kind, const char *body, size_t len, oai_request *r, oai_error *e);
void oai_request_free(oai_request *r);

/* The part of a chat request that depends on the model's template (sx,
 * from tc_detect): tools need a known tool-call format (else 400
 * unsupported_tools); their grammar is built (lazy for tool_choice auto,
 * from the first token for required / a named function; 400 when the
 * format cannot be constrained so); reasoning_effort needs a template that
 * reads it (else 400 unsupported_reasoning_effort); r->tpl_vars gets
 * tools (unless tool_choice is none), chat_template_kwargs and
 * reasoning_effort for the template. 0 or PW_EINVAL with e set. */
int oai_chat_prepare(oai_request *r, const tc_syntax *sx, oai_error *e);

/* Engine parameters for a validated chat/completion request and its prompt
 * (borrowed by *p, as are r's stop strings and logit_bias). deadline_ns 0. */
void oai_engine_params(const oai_request *r, const int32_t *prompt, int n_prompt, engine_params *p);

/* Prefix-cache scope: the engine's cache key for a request is SHA-256 over
 * length-prefixed parts (each an 8-byte little-endian length, then its
 * bytes): the tenant (the SHA-256 digest of the caller's API key as auth
 * stores it, or OAI_TENANT_ANONYMOUS when no keys are configured), the
 * endpoint ("chat" or "completions"), the model id and the client's
 * prompt_cache_key. Length prefixes keep ("ab","c") and ("a","bc") apart;
 * the tenant part keeps two API keys from ever sharing an entry, whatever
 * key they choose. 0, or PW_ENOMEM / PW_EINTERNAL from libcrypto. */
#define OAI_TENANT_ANONYMOUS "anonymous"
typedef struct oai_part {
  const void *data; /* borrowed */
  size_t len;
} oai_part;
int oai_digest_parts(const oai_part *parts, int n, uint8_t out[32]);
int oai_cache_scope(const void *tenant, size_t tenant_len, oai_kind kind, const char *model, const char *key,
                    size_t key_len, uint8_t out[32]);

/* Parses an X-Request-Timeout value: seconds, a decimal number in
 * (0, 86400]. 0 with *out_s set, or PW_EINVAL. */
int oai_parse_timeout(const char *v, double *out_s);

/* Identity of one response, shared by all its chunks. */
typedef struct oai_resp {
  oai_kind kind;
  char id[48];          /* chatcmpl-<24 alnum> or cmpl-<24 alnum> */
  long long created;    /* Unix seconds */
  const char *model;    /* borrowed */
  char fingerprint[24]; /* fp_<first 10 hex digits of the model's SHA-256> */
  const char *spec_mode; /* borrowed: speculation mode name; NULL = off (no "speculation" object) */
  int index;            /* the choice SSE chunks belong to (streams of several choices); 0 at init */
  /* Evidence (see evidence/receipt.h), rendered after "usage" (and
   * "speculation") by the renderer of the final object or chunk when set:
   * "receipt" (canonical JSON), "receipt_sha256", and "timings" beside it. */
  const char *receipt;        /* borrowed: the receipt's JSON text; NULL = none */
  const char *receipt_sha256; /* borrowed: 64 hex digits */
  const char *timings;        /* borrowed: a JSON object's text; NULL = none */
} oai_resp;

/* Fills a new random id, the creation time and the fingerprint.
 * model_sha256_hex may be NULL or short (fingerprint "fp_unknown").
 * spec_mode starts NULL. */
void oai_resp_init(oai_resp *o, oai_kind kind, const char *model, const char *model_sha256_hex);
/* A random id: prefix then 24 alphanumerics, NUL-terminated in cap bytes. */
void oai_new_id(const char *prefix, char *out, size_t cap);

/* Token text for logprobs: writes up to cap bytes of the token's piece and
 * returns its length (0 for unknown tokens). */
typedef int (*oai_piece_fn)(void *ctx, int32_t token, char *buf, int cap);

/* Logprobs accumulated over tokens, rendered in the chat or the completions
 * shape. Reset per SSE chunk, or kept for a whole non-streamed response. */
typedef struct oai_logprobs {
  oai_kind kind;
  int n;              /* tokens added */
  size_t text_offset; /* completions: byte offset of the next token's text */
  sbuf a, b, c, d;    /* chat: a = content items; completions: a = tokens,
                         b = token_logprobs, c = top_logprobs, d = text_offset */
} oai_logprobs;

void oai_logprobs_reset(oai_logprobs *l, oai_kind kind);
/* Adds one generated token: its logprob, its alternatives (may be NULL when
 * n_top is 0) and the length of the text it contributed. */
void oai_logprobs_add(oai_logprobs *l, oai_piece_fn piece, void *ctx, int32_t token, float logprob,
                      const pw_logprob *top, int n_top, size_t text_len);
/* Appends the logprobs object: {"content":[...]} for chat, {"tokens":...,
 * "token_logprobs":...,"top_logprobs":...,"text_offset":...} for completions. */
void oai_logprobs_render(const oai_logprobs *l, sbuf *out);
void oai_logprobs_free(oai_logprobs *l);

/* "stop" / "length" (cancel renders as "stop"). */
const char *oai_finish_str(engine_finish f);

/* SSE events ("data: <json>\n\n"), appended to out. */
void oai_sse_role(const oai_resp *o, sbuf *out); /* chat only: delta {role, content ""} */
/* A content delta; lp may be NULL (then "logprobs": null). */
void oai_sse_delta(const oai_resp *o, const char *text, size_t n, const oai_logprobs *lp, sbuf *out);
/* empty delta + finish_reason (+ the receipt when o->receipt is set: the
 * server sets it on this chunk when no usage chunk follows) */
void oai_sse_finish(const oai_resp *o, engine_finish f, sbuf *out);
void oai_sse_finish_reason(const oai_resp *o, const char *reason, sbuf *out); /* "tool_calls", ... */
/* choices: [], usage, and "speculation" when o->spec_mode is set. */
void oai_sse_usage(const oai_resp *o, const engine_usage *u, sbuf *out);
void oai_sse_error(const oai_error *e, sbuf *out);
void oai_sse_done(sbuf *out);      /* data: [DONE] */
void oai_sse_keepalive(sbuf *out); /* ": keep-alive" comment */

/* The whole non-streamed chat.completion / text_completion object. lp may
 * be NULL (then "logprobs": null). Carries "speculation" after "usage" when
 * o->spec_mode is set. */
void oai_render_completion(const oai_resp *o, const char *text, size_t n, const oai_logprobs *lp,
                           engine_finish f, const engine_usage *u, sbuf *out);
/* The members common to a response and its chunks, from the opening brace:
 * {"id":...,"object":...,"created":...,"model":...,"system_fingerprint":... */
void oai_put_head(const oai_resp *o, bool chunk, sbuf *out);
/* One choice of a response with several (n > 1, several prompts). */
typedef struct oai_choice {
  const char *text; /* borrowed */
  size_t len;
  const oai_logprobs *lp; /* borrowed; NULL = "logprobs": null */
  engine_finish finish;
} oai_choice;
/* The whole object with n choices (index 0..n-1) and the summed usage. */
void oai_render_completion_choices(const oai_resp *o, const oai_choice *c, int n, const engine_usage *u,
                                   sbuf *out);
/* "usage" object. */
void oai_render_usage(const engine_usage *u, sbuf *out);
/* The per-response speculation extension, rendered next to "usage" when
 * o->spec_mode is set:
 *   {"mode":"prompt-lookup","drafted":N,"accepted":N,"emitted":N,"target_passes":N}
 * drafted = proposed tokens, accepted = proposals the target agreed with,
 * emitted = tokens produced by speculative rounds, target_passes = target
 * forward passes that produced this response's tokens. */
void oai_render_speculation(const char *mode, const engine_usage *u, sbuf *out);
/* The evidence members (',"receipt":...') when o->receipt is set. */
void oai_put_receipt(const oai_resp *o, sbuf *out);
/* One model object of /v1/models. */
void oai_render_model(const char *id, long long created, sbuf *out);
/* The /v1/models list (one model). */
void oai_render_model_list(const char *id, long long created, sbuf *out);
/* /health: {"status":"ok"}, or {"status":"shutting_down"} when !ok. */
void oai_render_health(bool ok, sbuf *out);
/* The embeddings list: begin, one item per input (vec: n floats, as JSON
 * numbers or base64 of the little-endian floats), end with the usage and
 * ro's evidence members (ro may be NULL). */
void oai_render_embeddings_begin(sbuf *out);
void oai_render_embedding(size_t index, const float *vec, int n, bool base64, sbuf *out);
void oai_render_embeddings_end(const char *model, long long prompt_tokens, const oai_resp *ro, sbuf *out);
/* GET /v1/receipts/key: {"alg":"ed25519","public_key_pem":...,"key_sha256":...}. */
void oai_render_receipt_key(const char *pem, const char *fingerprint, sbuf *out);
/* /tokenize: {"tokens":[ids]}, or [{"id":..,"piece":..}] when piece is set. */
void oai_render_tokens(const int32_t *ids, int n, oai_piece_fn piece, void *ctx, sbuf *out);
/* /detokenize: {"content":text}. */
void oai_render_content(const char *text, size_t n, sbuf *out);

#endif
