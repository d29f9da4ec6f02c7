/* metrics.c - counters and Prometheus text rendering. See metrics.h. */
#include "server/metrics.h"

#include <stdio.h>
#include <string.h>

static const int k_status[METRICS_N_STATUS - 1] = {200, 400, 401, 404, 405, 408, 413, 415, 429, 500, 503};
/* Bucket upper bounds in seconds; the implicit last bucket is +Inf. */
static const double k_ttft_le[METRICS_N_TTFT - 1] = {0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30};
static const double k_itl_le[METRICS_N_ITL - 1] = {0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28};

static const char *const k_refusal_names[MREF_COUNT] = {
    "overloaded", "timeout",  "context",       "invalid",     "unauthorized", "too_large",
    "not_found",  "method",   "shutting_down", "slow_client", "internal"};

const char *metrics_refusal_name(metrics_refusal why) {
  return (unsigned)why < MREF_COUNT ? k_refusal_names[why] : "internal";
}

metrics_refusal metrics_refusal_for(int http_status, const char *code) {
  if (!code) code = "";
  switch (http_status) {
  case 400: return !strcmp(code, "context_length_exceeded") ? MREF_CONTEXT : MREF_INVALID;
  case 401: return MREF_UNAUTHORIZED;
  case 404: return MREF_NOT_FOUND;
  case 405: return MREF_METHOD;
  case 408: return MREF_TIMEOUT;
  case 413: return MREF_TOO_LARGE;
  case 429: return MREF_OVERLOADED;
  case 503: return !strcmp(code, "shutting_down") ? MREF_SHUTTING_DOWN : MREF_OVERLOADED;
  default: return !strcmp(code, "client_too_slow") ? MREF_SLOW_CLIENT : MREF_INTERNAL;
  }
}

const char *metrics_endpoint_name(const metrics *m, metrics_endpoint ep) {
  return ep > 0 && ep < m->n_ep ? m->ep_names[ep] : "other";
}

static void add(uint64_t *p, uint64_t v) { __atomic_fetch_add(p, v, __ATOMIC_RELAXED); }
static uint64_t get(const uint64_t *p) { return __atomic_load_n(p, __ATOMIC_RELAXED); }

void metrics_init(metrics *m) {
  memset(m, 0, sizeof *m);
  m->ep_names[MEP_OTHER] = "other";
  m->n_ep = 1;
}

metrics_endpoint metrics_endpoint_add(metrics *m, const char *name) {
  for (int i = 0; i < m->n_ep; i++)
    if (!strcmp(m->ep_names[i], name)) return i;
  if (m->n_ep >= METRICS_MAX_EP) return MEP_OTHER;
  m->ep_names[m->n_ep] = name;
  return m->n_ep++;
}

void metrics_set_replica(metrics *m, const char *id) { snprintf(m->replica, sizeof m->replica, "%s", id ? id : ""); }

void metrics_request(metrics *m, metrics_endpoint ep, int http_status) {
  if (ep < 0 || ep >= m->n_ep) ep = MEP_OTHER;
  int s = METRICS_N_STATUS - 1;
  for (int i = 0; i < METRICS_N_STATUS - 1; i++)
    if (k_status[i] == http_status) s = i;
  add(&m->requests[ep][s], 1);
}

static void observe(metrics_hist *h, const double *le, int n_le, uint64_t ns) {
  double s = (double)ns * 1e-9;
  int b = n_le;
  for (int i = 0; i < n_le; i++)
    if (s <= le[i]) {
      b = i;
      break;
    }
  add(&h->bucket[b], 1);
  add(&h->count, 1);
  add(&h->sum_ns, ns);
}

void metrics_ttft(metrics *m, uint64_t ns) { observe(&m->ttft, k_ttft_le, METRICS_N_TTFT - 1, ns); }
void metrics_itl(metrics *m, uint64_t ns) { observe(&m->itl, k_itl_le, METRICS_N_ITL - 1, ns); }
void metrics_disconnect(metrics *m) { add(&m->disconnects, 1); }
void metrics_connections(metrics *m, int delta) { __atomic_fetch_add(&m->connections, (int64_t)delta, __ATOMIC_RELAXED); }
void metrics_inflight(metrics *m, int delta) { __atomic_fetch_add(&m->inflight, (int64_t)delta, __ATOMIC_RELAXED); }
void metrics_deadline_cut(metrics *m) { add(&m->deadline_cuts, 1); }
void metrics_tokens(metrics *m, uint64_t n) { add(&m->streamed_tokens, n); }
void metrics_refusal_count(metrics *m, metrics_refusal why) {
  if ((unsigned)why >= MREF_COUNT) why = MREF_INTERNAL;
  add(&m->refusals[why], 1);
}

static void header(sbuf *out, const char *name, const char *type, const char *help) {
  sbuf_printf(out, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* Histogram samples from non-cumulative bucket counts (n_le + 1 of them,
 * the last above every bound); +Inf and _count are the same total, so the
 * exposition is self-consistent even when the counts were read at slightly
 * different moments. */
static void hist_series(sbuf *out, const char *name, const char *help, const uint64_t *bucket, const double *le,
                        int n_le, double sum) {
  header(out, name, "histogram", help);
  uint64_t cum = 0;
  for (int i = 0; i < n_le; i++) {
    cum += bucket[i];
    sbuf_printf(out, "%s_bucket{le=\"%g\"} %llu\n", name, le[i], (unsigned long long)cum);
  }
  cum += bucket[n_le];
  sbuf_printf(out, "%s_bucket{le=\"+Inf\"} %llu\n", name, (unsigned long long)cum);
  sbuf_printf(out, sum == (double)(uint64_t)sum ? "%s_sum %.0f\n" : "%s_sum %.9f\n", name, sum);
  sbuf_printf(out, "%s_count %llu\n", name, (unsigned long long)cum);
}

static void hist(sbuf *out, const char *name, const char *help, const metrics_hist *h, const double *le,
                 int n_le) {
  uint64_t b[sizeof h->bucket / sizeof h->bucket[0]];
  for (int i = 0; i <= n_le; i++) b[i] = get(&h->bucket[i]);
  hist_series(out, name, help, b, le, n_le, (double)get(&h->sum_ns) * 1e-9);
}

static void counter(sbuf *out, const char *name, const char *help, uint64_t v) {
  header(out, name, "counter", help);
  sbuf_printf(out, "%s %llu\n", name, (unsigned long long)v);
}

static void gauge(sbuf *out, const char *name, const char *help, long long v) {
  header(out, name, "gauge", help);
  sbuf_printf(out, "%s %lld\n", name, v);
}

static void gauge_f(sbuf *out, const char *name, const char *help, double v) {
  header(out, name, "gauge", help);
  sbuf_printf(out, "%s %.6g\n", name, v);
}

void metrics_render(const metrics *m, const engine_stats *st, sbuf *out) {
  if (m->replica[0]) {
    header(out, "power_replica_info", "gauge", "Always 1; its label names the replica (power serve --replica-id).");
    sbuf_printf(out, "power_replica_info{replica=\"%s\"} 1\n", m->replica);
  }
  header(out, "power_http_requests_total", "counter", "HTTP requests answered, by endpoint and status.");
  for (int i = 1; i <= m->n_ep; i++) /* "other" last */
    for (int s = 0, e = i == m->n_ep ? MEP_OTHER : i; s < METRICS_N_STATUS; s++) {
      uint64_t v = get(&m->requests[e][s]);
      if (!v) continue;
      if (s < METRICS_N_STATUS - 1)
        sbuf_printf(out, "power_http_requests_total{endpoint=\"%s\",status=\"%d\"} %llu\n", m->ep_names[e],
                    k_status[s], (unsigned long long)v);
      else
        sbuf_printf(out, "power_http_requests_total{endpoint=\"%s\",status=\"other\"} %llu\n", m->ep_names[e],
                    (unsigned long long)v);
    }
  hist(out, "power_time_to_first_token_seconds", "Time from request arrival to the first generated token.",
       &m->ttft, k_ttft_le, METRICS_N_TTFT - 1);
  hist(out, "power_inter_token_latency_seconds", "Time between consecutive generated tokens of a request.",
       &m->itl, k_itl_le, METRICS_N_ITL - 1);
  counter(out, "power_client_disconnects_total", "Clients that went away before their response ended.",
          get(&m->disconnects));
  gauge(out, "power_http_connections", "Open client TCP connections.",
        (long long)__atomic_load_n(&m->connections, __ATOMIC_RELAXED));
  gauge(out, "power_http_requests_in_flight", "Requests received and not yet fully answered.",
        (long long)__atomic_load_n(&m->inflight, __ATOMIC_RELAXED));
  counter(out, "power_http_deadline_closes_total",
          "Connections closed because their headers or body did not arrive within the deadline.",
          get(&m->deadline_cuts));
  counter(out, "power_response_tokens_total", "Generated tokens delivered to clients.",
          get(&m->streamed_tokens));
  header(out, "power_requests_refused_total", "counter",
         "Requests refused or failed, by reason (overloaded, timeout, context, invalid, unauthorized, ...).");
  for (int i = 0; i < MREF_COUNT; i++)
    sbuf_printf(out, "power_requests_refused_total{reason=\"%s\"} %llu\n", k_refusal_names[i],
                (unsigned long long)get(&m->refusals[i]));
  if (!st) return;
  counter(out, "power_prompt_tokens_total", "Prompt tokens of admitted requests.", st->prompt_tokens_total);
  counter(out, "power_generated_tokens_total", "Tokens generated by the engine.", st->generated_tokens_total);
  counter(out, "power_engine_requests_total", "Requests submitted to the engine.", st->requests_total);
  counter(out, "power_requests_rejected_total", "Requests rejected because the engine was full.",
          st->requests_rejected);
  counter(out, "power_requests_timeout_total", "Requests not admitted before their deadline.",
          st->requests_timeout);
  counter(out, "power_requests_cancelled_total", "Requests cancelled (client gone or shutdown).",
          st->requests_cancelled);
  counter(out, "power_engine_steps_total", "Engine scheduler steps (batched forward passes).", st->steps_total);
  gauge(out, "power_queue_depth", "Requests waiting for a sequence slot.", st->queued);
  gauge(out, "power_active_sequences", "Sequences running in the batch.", st->active);
  gauge(out, "power_max_active_sequences", "Configured sequence slots.", st->max_active);
  gauge(out, "power_max_queue_depth", "Configured queue capacity.", st->max_queue);
  /* Batching: the engine counts model entries over all steps; the average
   * batch size is their ratio (rate() of both gives it over a window). */
  counter(out, "power_batch_entries_total", "Sequence entries over all engine steps (sum of batch sizes).",
          st->batch_entries_total);
  gauge_f(out, "power_batch_size_average", "Average sequences per engine step since start.",
          st->steps_total ? (double)st->batch_entries_total / (double)st->steps_total : 0.0);
  double batch_le[ENGINE_BATCH_BUCKETS];
  for (int i = 0; i < ENGINE_BATCH_BUCKETS; i++) batch_le[i] = engine_batch_le[i];
  hist_series(out, "power_batch_size", "Model entries per engine step (decode, proposals, prompt chunks).",
              st->batch_steps_by_size, batch_le, ENGINE_BATCH_BUCKETS, (double)st->batch_entries_total);
  gauge(out, "power_kv_bytes_in_use", "KV cache bytes held by running sequences and prompt-cache entries.",
        (long long)st->kv_bytes_in_use);
  gauge(out, "power_kv_cache_bytes", "KV cache bytes allocated (all sequence slots, all positions).",
        (long long)st->kv_bytes_total);
  gauge(out, "power_kv_cache_bytes_saved",
        "KV cache bytes saved by the cache types against F16 K and V (0 with F16).",
        (long long)(st->kv_bytes_f16 - st->kv_bytes_total));
  if (st->kv_type_k && st->kv_type_v) {
    header(out, "power_kv_cache_type", "gauge", "Always 1; its labels name the KV cache's K and V types.");
    sbuf_printf(out, "power_kv_cache_type{k=\"%s\",v=\"%s\"} 1\n", st->kv_type_k, st->kv_type_v);
  }
  /* Speculative decoding. */
  counter(out, "power_spec_drafted_tokens_total", "Tokens proposed by speculative drafting.",
          st->spec_drafted_total);
  counter(out, "power_spec_accepted_tokens_total", "Proposed tokens the target model agreed with.",
          st->spec_accepted_total);
  counter(out, "power_spec_emitted_tokens_total", "Tokens emitted by speculative rounds (accepted plus one each).",
          st->spec_emitted_total);
  counter(out, "power_spec_target_passes_total", "Target forward passes of speculative requests.",
          st->spec_target_passes_total);
  counter(out, "power_spec_rounds_total", "Speculative draft-and-verify rounds.", st->spec_rounds_total);
  counter(out, "power_spec_fallbacks_total", "Requests that fell back to target-only decoding (low acceptance).",
          st->spec_fallbacks_total);
  counter(out, "power_spec_declined_total",
          "Decode steps given no proposals because verifying them would cost more than they save.",
          st->spec_declined_total);
  counter(out, "power_spec_probes_total", "Short speculative rounds after declined steps.", st->spec_probes_total);
  counter(out, "power_spec_rollbacks_total",
          "Recurrent-state models: rounds whose state went back to its snapshot and re-ran the accepted prefix.",
          st->spec_rollbacks_total);
  counter(out, "power_spec_draft_passes_total",
          "Drafter forward passes that made proposals (draft model or MTP block).", st->spec_draft_passes_total);
  counter(out, "power_spec_draft_catchup_total",
          "MTP block passes over committed positions only (its deferred backlog).", st->spec_draft_catchup_total);
  /* Keyed prefix cache. */
  counter(out, "power_prompt_cache_requests_total", "Requests that carried a prompt cache key.",
          st->cache_requests_total);
  counter(out, "power_prompt_cache_hits_total", "Keyed requests that reused a cached prefix.", st->cache_hits_total);
  counter(out, "power_prompt_cache_misses_total", "Keyed requests that found nothing to reuse.",
          st->cache_misses_total);
  counter(out, "power_prompt_cache_reused_tokens_total", "Prompt tokens whose KV was reused from the cache.",
          st->cache_reused_tokens_total);
  counter(out, "power_prompt_cache_evaluated_tokens_total", "Prompt tokens of keyed requests that were evaluated.",
          st->cache_evaluated_tokens_total);
  counter(out, "power_prompt_cache_evictions_total", "Prompt cache entries evicted (capacity, bytes or TTL).",
          st->cache_evictions_total);
  gauge(out, "power_prompt_cache_entries", "Prompt cache entries held.", st->cache_entries);
  gauge(out, "power_prompt_cache_bytes", "KV bytes held by prompt cache entries.", (long long)st->cache_bytes);
}
