/* metrics.h - server metrics and their Prometheus text exposition.
 *
 * What it is: lock-free counters (relaxed atomics) that HTTP threads bump,
 * and a renderer that writes them, with the engine's gauges and counters
 * (engine_stats), in the Prometheus text format 0.0.4 (# HELP / # TYPE,
 * cumulative histogram buckets with le="+Inf", _sum and _count).
 * What it is not: a general metrics library; the set of series is fixed. */
#ifndef PW_SERVER_METRICS_H
#define PW_SERVER_METRICS_H

#include "engine/engine.h"
#include "server/sbuf.h"

#include <stdint.h>

typedef enum metrics_endpoint {
  MEP_CHAT = 0,
  MEP_COMPLETIONS,
  MEP_EMBEDDINGS,
  MEP_MODELS,
  MEP_HEALTH,
  MEP_METRICS,
  MEP_TOKENIZE,
  MEP_DETOKENIZE,
  MEP_OTHER,
  MEP_COUNT
} metrics_endpoint;

/* Why a request was refused or failed (power_requests_refused_total's
 * "reason" label). */
typedef enum metrics_refusal {
  MREF_OVERLOADED = 0, /* 503: slots and queue full */
  MREF_TIMEOUT,        /* 408: not admitted before its deadline */
  MREF_CONTEXT,        /* 400: prompt longer than the context */
  MREF_INVALID,        /* 400: any other invalid request */
  MREF_UNAUTHORIZED,   /* 401 */
  MREF_TOO_LARGE,      /* 413: body over the limit */
  MREF_NOT_FOUND,      /* 404: unknown URL or model */
  MREF_METHOD,         /* 405 */
  MREF_SHUTTING_DOWN,  /* 503 while shutting down */
  MREF_SLOW_CLIENT,    /* a stream cancelled because its client read too slowly */
  MREF_INTERNAL,       /* 500 and anything else */
  MREF_COUNT
} metrics_refusal;

#define METRICS_N_STATUS 12  /* tracked HTTP statuses, the last one is "other" */
#define METRICS_N_TTFT 12    /* time-to-first-token buckets */
#define METRICS_N_ITL 12     /* inter-token latency buckets */

typedef struct metrics_hist {
  uint64_t bucket[METRICS_N_TTFT > METRICS_N_ITL ? METRICS_N_TTFT : METRICS_N_ITL]; /* non-cumulative */
  uint64_t count;
  uint64_t sum_ns;
} metrics_hist;

typedef struct metrics {
  uint64_t requests[MEP_COUNT][METRICS_N_STATUS];
  metrics_hist ttft, itl;
  uint64_t disconnects; /* clients gone before their response ended */
  uint64_t streamed_tokens; /* tokens sent to clients (streamed or not) */
  uint64_t refusals[MREF_COUNT];
  char replica[128]; /* power_replica_info's label value; "" = series omitted */
} metrics;

/* Zeroes m. */
void metrics_init(metrics *m);
/* Names the replica in power_replica_info{replica="..."} 1, the series that
 * tells a scraper behind a load balancer which replica answered. id must
 * need no escaping (the server checks it); longer than 127 bytes is cut. */
void metrics_set_replica(metrics *m, const char *id);
/* Counts one answered request. Thread-safe. */
void metrics_request(metrics *m, metrics_endpoint ep, int http_status);
void metrics_ttft(metrics *m, uint64_t ns);
void metrics_itl(metrics *m, uint64_t ns);
void metrics_disconnect(metrics *m);
void metrics_tokens(metrics *m, uint64_t n);
void metrics_refusal_count(metrics *m, metrics_refusal why);
/* The reason for an error answer: its HTTP status and API error code
 * ("overloaded", "context_length_exceeded", "client_too_slow", ...; may be
 * NULL). */
metrics_refusal metrics_refusal_for(int http_status, const char *code);
const char *metrics_refusal_name(metrics_refusal why);
/* Name of an endpoint label value ("chat_completions", ...). */
const char *metrics_endpoint_name(metrics_endpoint ep);
/* Appends the exposition text. st may be NULL (engine series omitted).
 * Engine series include speculation (power_spec_*), the prefix cache
 * (power_prompt_cache_*), batch size per step and KV bytes in use. */
void metrics_render(const metrics *m, const engine_stats *st, sbuf *out);

#endif
