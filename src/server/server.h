/* server.h - the OpenAI-compatible HTTP server over one engine.
 *
 * Endpoints (one table in server.c): POST /v1/chat/completions,
 * /v1/completions, /v1/embeddings, /tokenize, /detokenize; GET /v1/models,
 * /v1/models/{id}, /v1/receipts/key, /health (public), /metrics
 * (Prometheus text). The OpenAI /v1 paths are served without the prefix
 * too. Other APIs over the same generation core (api.h): Ollama's /api/chat,
 * /api/generate, /api/embed, /api/embeddings, /api/tags, /api/show,
 * /api/ps, /api/version; Anthropic's POST /v1/messages and
 * /v1/messages/count_tokens; OpenAI's POST /v1/responses and GET
 * /v1/responses/{id}. GET / is a chat page (public; files built in). With
 * API keys configured every endpoint but /health and the page needs
 * "Authorization: Bearer <key>" or "x-api-key: <key>". An unknown
 * path is 404, a known one with another method 405 with an Allow header.
 *
 * Connections: HTTP/1.1 keep-alive (pipelined requests are answered in
 * order). Each connection's headers must arrive within header_timeout_s of
 * its start (or of the end of its previous request) and a request's body
 * within body_timeout_s of its headers: these are absolute deadlines that a
 * client trickling bytes cannot extend. Connections per client address are
 * limited (max_per_client), as is their total. A Transfer-Encoding other
 * than chunked is 501 at once.
 *
 * Threads: libmicrohttpd runs one thread per connection; a request thread
 * parses, renders the prompt, submits to the engine and blocks on its event
 * queue, checking after every event (and every 100 ms of silence) whether
 * the client is still there. Streaming responses are produced by MHD's
 * content-reader callback on the same thread. A client that goes away has
 * its engine request cancelled and released, so its sequence leaves the
 * batch within a step. A watchdog thread enforces the header and body
 * deadlines.
 *
 * CORS (cors_origins; off by default): preflights (OPTIONS on a known
 * path) are answered 204 without authentication, and every response to an
 * allowed Origin carries Access-Control-Allow-Origin.
 *
 * Prefix cache: a chat/completions request's prompt_cache_key is validated
 * (oai.h), then hashed with the caller's tenant (its API key's digest, or
 * "anonymous" without keys), the endpoint and the model into the engine's
 * cache key (oai_cache_scope); the raw key is never logged or kept.
 *
 * Receipts: every chat/completions/embeddings answer carries "receipt",
 * "receipt_sha256" and "timings" (streams: on the final chunk, the usage
 * chunk when include_usage is set); see evidence/receipt.h. GET
 * /v1/receipts/key gives the signing key's public half (404 when
 * receipts are unsigned).
 *
 * Request log: one line per request (see server_opts.log_requests), text
 *   2026-01-02T03:04:05.678Z power: request id=chatcmpl-... endpoint=chat_completions
 *   status=200 prompt_tokens=31 completion_tokens=12 cached_tokens=24 ttft_ms=8.1
 *   total_ms=95.3 finish=stop
 * (on one line), or the same fields as one JSON object per line
 * (log_json). Every response carries the id as X-Request-Id, and the
 * replica's name (server_opts.replica_id) as X-Power-Replica.
 *
 * Many models (server_opts.store; models.h, registry.h): the request's
 * "model" picks a store model, loaded on its first request and unloaded by
 * LRU or keep-alive; GET /v1/models and /api/tags list the store, GET
 * /api/ps and /v1/ps what is loaded, POST /v1/models/{id}/load and
 * /unload load and unload one, POST /api/pull, DELETE /api/delete and
 * DELETE /v1/models/{id} change the store (refused with 403 unless
 * allowed). Without a store, a request naming another model is 404 as
 * before, /api/pull and /api/delete are 404, unload and DELETE
 * /v1/models/{id} 400 no_store, and /v1/ps and load show the one model.
 *
 * What it is not: TLS (put a proxy in front), or a place that knows model
 * internals: it talks to the engine only through engine.h. */
#ifndef PW_SERVER_SERVER_H
#define PW_SERVER_SERVER_H

#include "engine/engine.h"
#include "server/models.h"

#include <stddef.h>
#include <stdio.h>

typedef struct server server;

typedef struct server_opts {
  const char *host;         /* bind address: a name ("localhost") or an IPv4/IPv6 literal;
                             * NULL = "127.0.0.1" */
  int port;                 /* TCP port; 0 = ephemeral (see server_port) */
  size_t max_body;          /* request body limit in bytes; 0 = 8 MiB */
  double request_timeout_s; /* default admission deadline in seconds; 0 = none */
  const char *api_key_file; /* one key per line; NULL = none */
  const char *api_keys;     /* comma-separated keys (e.g. $POWER_API_KEYS); NULL = none */
  int keepalive_ms;         /* SSE ": keep-alive" after this much silence; 0 = 15000 */
  int max_connections;      /* concurrent connections; 0 = 256 */
  int max_per_client;       /* concurrent connections per client address; 0 = max_connections / 4 */
  double header_timeout_s;  /* a request's headers must be in this long after the connection
                             * opened or its previous request ended; 0 = SERVER_DEFAULT_HEADER_TIMEOUT */
  double body_timeout_s;    /* a request's body must be in this long after its headers;
                             * 0 = SERVER_DEFAULT_BODY_TIMEOUT */
  const char *cors_origins; /* borrowed: "*" or comma-separated origins ("https://app.example");
                             * NULL = no CORS headers */
  int log_json;             /* request lines as JSON objects instead of key=value text */
  int retry_after_s;        /* Retry-After of 503 answers; 0 = 1 */
  const char *spec_mode;    /* borrowed: name of the engine's speculation mode (engine_spec_name of
                             * engine_opts.spec_mode); NULL or "off" = off. When on, generation
                             * responses carry a "speculation" object next to "usage" */
  int log_requests;         /* 0 = no request log; 1 = one key=value line per request (id, endpoint,
                             * status, token counts, timings; never prompt or output text);
                             * 2 = also the prompt and output text (debugging) */
  FILE *log_out;            /* borrowed: where request lines go; NULL = the process log (stderr) */
  const char *receipt_key_path; /* Ed25519 private key (PEM) that signs every receipt;
                             * NULL = unsigned. Unreadable = server_start fails.
                             * GET /v1/receipts/key returns its public half */
  const char *chat_template; /* borrowed: chat template text used instead of the model's; NULL = the
                             * model's. Its tool-call format and reasoning markers are detected from it */
  int responses_max;        /* Responses-API answers kept for previous_response_id and GET;
                             * 0 = SERVER_DEFAULT_RESPONSES */
  size_t responses_max_bytes; /* bytes those answers may hold; 0 = SERVER_DEFAULT_RESPONSES_BYTES */
  const char *replica_id;   /* borrowed: this replica's name behind a load balancer, sent as the
                             * X-Power-Replica header of every response and as the label of
                             * power_replica_info in /metrics; 1..SERVER_REPLICA_ID_MAX bytes of
                             * [A-Za-z0-9._:@/+-]; NULL = "<host name>:<bound port>" */
  const srv_models_opts *store; /* borrowed: serve the models of a store (models.h) instead of one
                             * engine; server_start's e is then NULL. NULL = one model */
} server_opts;

#define SERVER_DEFAULT_MAX_BODY ((size_t)8 << 20)
#define SERVER_DEFAULT_HEADER_TIMEOUT 10.0 /* seconds */
#define SERVER_DEFAULT_BODY_TIMEOUT 60.0   /* seconds */
#define SERVER_DEFAULT_RESPONSES 1024
#define SERVER_DEFAULT_RESPONSES_BYTES ((size_t)64 << 20)
#define SERVER_REPLICA_ID_MAX 100

/* Starts listening and serving e (borrowed: it must outlive the server), or
 * with o->store set and e NULL, the models of a store, loaded on demand.
 * On success *out is owned by the caller (server_stop). On failure returns
 * a PW_E* status with err set: PW_EIO when the port is in use (no two
 * servers ever share a port), PW_EINVAL for a name that does not resolve,
 * bad CORS origins or an API key list that holds no key. */
int server_start(const server_opts *o, engine *e, server **out, char *err);
/* The bound TCP port (the real one when opts.port was 0). */
int server_port(const server *s);
/* The first step of a drain behind a load balancer: /health answers 503
 * "draining" from now on, so the balancer's health check takes this replica
 * out of the pool, while every request is still served as before. */
void server_drain_notice(server *s);
/* Stops accepting new connections: the socket stops listening at once, so
 * a new connection is refused (a balancer retries it elsewhere) rather than
 * waiting unanswered in the kernel's backlog. Requests in flight carry on.
 * /health answers 503 "shutting_down" on connections still open. */
void server_quiesce(server *s);
/* Waits up to grace_ms for the requests in flight to be answered to the
 * end (responses fully sent, e.g. after engine_drain let them finish).
 * 0 when none is left, else PW_ETIMEOUT. Call after server_quiesce. */
int server_drain(server *s, int grace_ms);
/* Ends every connection (requests still running are cancelled, each wait
 * bounded), stops the threads and frees s. NULL is a no-op. Call it before
 * engine_destroy. */
void server_stop(server *s);

#endif
