/* models.h - what the server knows of a model it serves, and the store
 * serving mode: many models of a store ($POWER_HOME) in one server.
 *
 * srv_model: one loaded model as the request paths see it: its engine, its
 * prompt builder (chat template), its tool-call syntax and the facts every
 * receipt names. A single-model server has one for its life; a
 * store-serving server has one per loaded model, owned by the registry.
 *
 * Store serving (srv_models): a request's "model" is a store name, or the
 * name without its ":tag" when exactly one tag exists (or ":latest" does);
 * srv_models_acquire resolves it and takes the model from the registry
 * (registry.h), loading it on first use with the server's engine options.
 * Handlers for the store's own endpoints live here too: the model list
 * (OpenAI /v1/models and Ollama /api/tags, every store model, loaded or
 * not), what is loaded (/api/ps, /v1/ps), one model (GET /v1/models/{id}),
 * load and unload (POST /v1/models/{id}/load, /unload), and the admin
 * endpoints that change the store (POST /api/pull, DELETE /api/delete,
 * DELETE /v1/models/{id}), which are refused with 403 unless the server was
 * started with allow_admin, and which need an API key when keys are set
 * (as every non-public route does).
 *
 * What it is not: the HTTP glue (server.c), the lifecycle and its bounds
 * (registry.c), the store itself (store/). */
#ifndef PW_SERVER_MODELS_H
#define PW_SERVER_MODELS_H

#include "chat/prompt.h"
#include "engine/engine.h"
#include "evidence/receipt.h"
#include "server/chatout.h"
#include "server/oai.h"
#include "server/registry.h"
#include "server/sbuf.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct srv_model {
  engine *e;         /* owned by whoever made the srv_model (the caller of server_start, or the registry) */
  prompt_builder pb; /* owned */
  tc_syntax tc;      /* the template's tool-call format and reasoning markers */
  ev_model_info evm; /* the model facts every receipt names */
  long long created; /* Unix seconds it was loaded */
} srv_model;

/* Builds m over e (borrowed; hashes the model file when not yet done).
 * template: used instead of the model's own; NULL = the model's. */
int srv_model_init(srv_model *m, engine *e, const char *chat_template, char *err);
void srv_model_free(srv_model *m); /* not the engine */

typedef struct srv_models srv_models;

typedef struct srv_models_opts {
  const char *home;          /* borrowed: the store; NULL = $POWER_HOME or ~/.power */
  const engine_opts *engine; /* borrowed, copied: options of every engine (model_path/model_id set per model) */
  int max_loaded;            /* >= 1 */
  uint64_t mem_budget;       /* bytes of weights + KV held at once; 0 = no bound */
  double keep_alive_s;       /* default keep-alive (< 0 forever, 0 unload when idle) */
  double load_wait_s;        /* how long a request without a deadline waits for room or a load; 0 = 60 */
  bool allow_admin;          /* serve pull and delete */
} srv_models_opts;

int srv_models_create(const srv_models_opts *o, srv_models **out, char *err);
/* Unloads everything. Requests must have released their models. */
void srv_models_destroy(srv_models *sm);
registry *srv_models_registry(srv_models *sm);
double srv_models_load_wait(const srv_models *sm);
/* --mem-budget when serving the store; 0 = no bound. */
uint64_t srv_models_mem_budget(const srv_models *sm);

/* Resolves name (see above) into canon (STORE_NAME_MAX + 1 bytes) and
 * the model's file size. 0; 400 (empty or ambiguous name), 404
 * model_not_found naming it. */
int srv_models_resolve(srv_models *sm, const char *name, char *canon, uint64_t *size, oai_error *e);

/* Sums the engine counters of every loaded model and of those unloaded
 * before (so counters never go back) into st. */
void srv_models_engine_stats(srv_models *sm, engine_stats *st);
/* Appends the per-model series to a /metrics answer. */
void srv_models_metrics(srv_models *sm, sbuf *out);

/* JSON bodies (appended to out). */
void srv_models_render_list(srv_models *sm, sbuf *out);          /* OpenAI model list */
void srv_models_render_tags(srv_models *sm, sbuf *out);          /* Ollama /api/tags */
void srv_models_render_ps(srv_models *sm, bool ollama, sbuf *out); /* /api/ps, /v1/ps */
/* One model (OpenAI object with store facts); 404 in e when unknown. */
int srv_models_render_one(srv_models *sm, const char *name, sbuf *out, oai_error *e);

/* Unloads name (resolved as above) now, or when its requests in flight
 * end; not loaded is fine. 0, or e set (400, 404). */
int srv_models_unload(srv_models *sm, const char *name, oai_error *e);

/* Admin: e set to 403 unless allowed. */
int srv_models_admin_check(srv_models *sm, const char *what, oai_error *e);
/* Removes name from the store (unloading it when loaded; requests in
 * flight finish with the file still mapped). 0, or e set (404, 500). */
int srv_models_delete(srv_models *sm, const char *name, oai_error *e);

/* A pull running on its own thread, its progress as NDJSON lines
 * (Ollama's shape: {"status":...,"digest":...,"total":...,"completed":...},
 * then {"status":"success"} or {"error":"..."}). */
typedef struct srv_pull srv_pull;
/* Pulls running at once, at most (each holds its client's connection
 * thread and a download); more are 429 too_many_pulls. */
#define SRV_MAX_PULLS 2
/* Starts pulling source (URL or hf.co/ORG/REPO[:QUANT][@sha256:HEX]) as
 * name (NULL = derived). 0 or e set (400, 429, 500). */
int srv_pull_start(srv_models *sm, const char *source, const char *name, srv_pull **out, oai_error *e);
/* Appends the lines written since the last call to out, waiting up to
 * wait_ms for one. Returns 1 when the pull has ended and everything was
 * read, else 0. */
int srv_pull_read(srv_pull *p, sbuf *out, int wait_ms);
/* Cancels the pull when still running (a partial download stays for a
 * resume), waits for its thread and frees p. NULL is a no-op. */
void srv_pull_free(srv_pull *p);
/* The final status of an ended pull: 0, or the pull's PW_E* (msg: its
 * message, PW_ERRMAX bytes). */
int srv_pull_status(srv_pull *p, char *msg);

#endif
