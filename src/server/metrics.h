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

/* An endpoint label: an index into metrics.ep_names. The server registers
 * one per distinct metrics name of its route table (metrics_endpoint_add);
 * MEP_OTHER is the label of requests that matched no route. */
typedef int metrics_endpoint;
#define MEP_OTHER 0
#define METRICS_MAX_EP 32 /* endpoint labels, "other" included */

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
  const char *ep_names[METRICS_MAX_EP]; /* borrowed (static strings); [0] = "other" */
  int n_ep;
  uint64_t requests[METRICS_MAX_EP][METRICS_N_STATUS];
  metrics_hist ttft, itl;
  uint64_t disconnects; /* clients gone before their response ended */
  uint64_t streamed_tokens; /* tokens sent to clients (streamed or not) */
  uint64_t refusals[MREF_COUNT];
  int64_t connections;    /* gauge: open TCP connections */
  int64_t inflight;       /* gauge: requests between their headers and the end of their answer */
  uint64_t deadline_cuts; /* connections closed because headers or body missed their deadline */
  char replica[128]; /* power_replica_info's label value; "" = series omitted */
} metrics;

/* Zeroes m and registers the "other" label. */
void metrics_init(metrics *m);
/* The label for name (borrowed; must outlive m), registered on first use.
 * Not thread-safe: register every label before serving. Past
 * METRICS_MAX_EP labels, MEP_OTHER. */
metrics_endpoint metrics_endpoint_add(metrics *m, const char *name);

/* Names the replica in power_replica_info{replica="..."} 1, the series that
 * tells a scraper behind a load balancer which replica answered. id must
 * need no escaping (the server checks it); longer than 127 bytes is cut. */
void metrics_set_replica(metrics *m, const char *id);
/* Counts one answered request. Thread-safe. */
void metrics_request(metrics *m, metrics_endpoint ep, int http_status);
void metrics_ttft(metrics *m, uint64_t ns);
void metrics_itl(metrics *m, uint64_t ns);
void metrics_disconnect(metrics *m);
void metrics_connections(metrics *m, int delta);
void metrics_inflight(metrics *m, int delta);
void metrics_deadline_cut(metrics *m);
void metrics_tokens(metrics *m, uint64_t n);
void metrics_refusal_count(metrics *m, metrics_refusal why);
/* The reason for an error answer: its HTTP status and API error code
 * ("overloaded", "context_length_exceeded", "client_too_slow", ...; may be
 * NULL). */
metrics_refusal metrics_refusal_for(int http_status, const char *code);
const char *metrics_refusal_name(metrics_refusal why);
/* Name of an endpoint label value ("chat_completions", ...). */
const char *metrics_endpoint_name(const metrics *m, metrics_endpoint ep);
/* Appends the exposition text. st may be NULL (engine series omitted).
 * Engine series include speculation (power_spec_*), the prefix cache
 * (power_prompt_cache_*), batch size per step and KV bytes in use. */
void metrics_render(const metrics *m, const engine_stats *st, sbuf *out);

#endif
