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
} metrics;

/* Zeroes m. */
void metrics_init(metrics *m);
/* Counts one answered request. Thread-safe. */
void metrics_request(metrics *m, metrics_endpoint ep, int http_status);
void metrics_ttft(metrics *m, uint64_t ns);
void metrics_itl(metrics *m, uint64_t ns);
void metrics_disconnect(metrics *m);
void metrics_tokens(metrics *m, uint64_t n);
/* Name of an endpoint label value ("chat_completions", ...). */
const char *metrics_endpoint_name(metrics_endpoint ep);
/* Appends the exposition text. st may be NULL (engine series omitted). */
void metrics_render(const metrics *m, const engine_stats *st, sbuf *out);

#endif
