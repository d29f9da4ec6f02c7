/* test_server_metrics.c - counters and the Prometheus text exposition. */
#include "server/metrics.h"
#include "test.h"

#include <ctype.h>
#include <pthread.h>

/* Checks the exposition line by line: every sample belongs to a family
 * announced by # HELP and # TYPE, names and labels are well formed, values
 * parse as numbers; histogram buckets are cumulative and end with +Inf ==
 * _count. Returns the number of sample lines. */
static int check_format(const char *text) {
  char family[128] = "", type[32] = "";
  int samples = 0;
  long long last_bucket = -1;
  const char *p = text;
  while (*p) {
    const char *nl = strchr(p, '\n');
    CHECK_MSG(nl != NULL, "last line lacks a newline");
    if (!nl) break;
    char line[512];
    size_t n = (size_t)(nl - p);
    CHECK(n < sizeof line);
    if (n >= sizeof line) n = sizeof line - 1;
    memcpy(line, p, n);
    line[n] = 0;
    p = nl + 1;
    if (!strncmp(line, "# HELP ", 7)) {
      CHECK(sscanf(line + 7, "%127s", family) == 1);
      last_bucket = -1;
      continue;
    }
    if (!strncmp(line, "# TYPE ", 7)) {
      char name[128];
      CHECK(sscanf(line + 7, "%127s %31s", name, type) == 2);
      CHECK_STR(name, family);
      CHECK(!strcmp(type, "counter") || !strcmp(type, "gauge") || !strcmp(type, "histogram"));
      continue;
    }
    CHECK_MSG(line[0] != '#', "unexpected comment: %s", line);
    /* sample: name{labels} value */
    size_t i = 0;
    while (isalnum((unsigned char)line[i]) || line[i] == '_' || line[i] == ':') i++;
    CHECK_MSG(i > 0, "bad sample: %s", line);
    char name[128];
    memcpy(name, line, i);
    name[i] = 0;
    CHECK_MSG(!strncmp(name, family, strlen(family)), "sample %s outside family %s", name, family);
    if (!strcmp(type, "counter")) CHECK_MSG(!strcmp(name, family) && strstr(name, "_total"), "%s", line);
    if (line[i] == '{') {
      const char *close = strchr(line + i, '}');
      CHECK_MSG(close != NULL, "%s", line);
      if (!close) continue;
      i = (size_t)(close - line) + 1;
    }
    CHECK_MSG(line[i] == ' ', "%s", line);
    char *end;
    double v = strtod(line + i + 1, &end);
    CHECK_MSG(*end == 0 && v >= 0, "bad value: %s", line);
    if (strstr(name, "_bucket")) {
      CHECK_MSG((long long)v >= last_bucket, "buckets not cumulative: %s", line);
      last_bucket = (long long)v;
    }
    if (strstr(name, "_count") && !strcmp(type, "histogram")) CHECK_EQ_INT((long long)v, last_bucket);
    samples++;
  }
  return samples;
}

static metrics g_m;
static metrics_endpoint g_chat;

static void *bump(void *arg) {
  (void)arg;
  for (int i = 0; i < 10000; i++) {
    metrics_request(&g_m, g_chat, 200);
    metrics_itl(&g_m, 3000000);
  }
  return NULL;
}

int main(void) {
  metrics_init(&g_m);
  g_chat = metrics_endpoint_add(&g_m, "chat_completions");
  metrics_endpoint g_cmpl = metrics_endpoint_add(&g_m, "completions");
  CHECK_EQ_INT(metrics_endpoint_add(&g_m, "chat_completions"), g_chat); /* one label per name */
  CHECK(g_chat != MEP_OTHER && g_cmpl != g_chat);
  sbuf b = {0};
  metrics_render(&g_m, NULL, &b);
  CHECK(check_format(b.data) > 0);
  CHECK(strstr(b.data, "power_queue_depth") == NULL);

  pthread_t t[4];
  for (int i = 0; i < 4; i++) pthread_create(&t[i], NULL, bump, NULL);
  for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
  metrics_request(&g_m, g_cmpl, 503);
  metrics_request(&g_m, MEP_OTHER, 418);
  metrics_ttft(&g_m, 30000000);   /* 0.03 s */
  metrics_ttft(&g_m, 99000000000ull); /* beyond the last bucket */
  metrics_disconnect(&g_m);
  engine_stats st = {.active = 2, .queued = 5, .max_active = 4, .max_queue = 16, .requests_total = 9,
                     .requests_rejected = 1, .requests_timeout = 2, .requests_cancelled = 3,
                     .prompt_tokens_total = 100, .generated_tokens_total = 50, .steps_total = 7};
  sbuf_clear(&b);
  metrics_render(&g_m, &st, &b);
  CHECK(check_format(b.data) > 20);
  CHECK(strstr(b.data, "power_http_requests_total{endpoint=\"chat_completions\",status=\"200\"} 40000\n"));
  CHECK(strstr(b.data, "power_http_requests_total{endpoint=\"completions\",status=\"503\"} 1\n"));
  CHECK(strstr(b.data, "power_http_requests_total{endpoint=\"other\",status=\"other\"} 1\n"));
  CHECK(strstr(b.data, "power_inter_token_latency_seconds_count 40000\n"));
  CHECK(strstr(b.data, "power_inter_token_latency_seconds_bucket{le=\"0.0025\"} 0\n"));
  CHECK(strstr(b.data, "power_inter_token_latency_seconds_bucket{le=\"0.005\"} 40000\n"));
  CHECK(strstr(b.data, "power_time_to_first_token_seconds_bucket{le=\"0.025\"} 0\n"));
  CHECK(strstr(b.data, "power_time_to_first_token_seconds_bucket{le=\"0.05\"} 1\n"));
  CHECK(strstr(b.data, "power_time_to_first_token_seconds_bucket{le=\"30\"} 1\n"));
  CHECK(strstr(b.data, "power_time_to_first_token_seconds_bucket{le=\"+Inf\"} 2\n"));
  CHECK(strstr(b.data, "power_time_to_first_token_seconds_sum 99.03"));
  CHECK(strstr(b.data, "power_queue_depth 5\n"));
  CHECK(strstr(b.data, "power_active_sequences 2\n"));
  CHECK(strstr(b.data, "power_requests_rejected_total 1\n"));
  CHECK(strstr(b.data, "power_requests_timeout_total 2\n"));
  CHECK(strstr(b.data, "power_requests_cancelled_total 3\n"));
  CHECK(strstr(b.data, "power_prompt_tokens_total 100\n"));
  CHECK(strstr(b.data, "power_generated_tokens_total 50\n"));
  CHECK(strstr(b.data, "power_client_disconnects_total 1\n"));
  CHECK(strstr(b.data, "# TYPE power_time_to_first_token_seconds histogram\n"));

  /* Refusals by reason: every reason is always exposed, mapped from the
   * status and error code of the answer. */
  CHECK_EQ_INT(metrics_refusal_for(503, "overloaded"), MREF_OVERLOADED);
  CHECK_EQ_INT(metrics_refusal_for(503, "shutting_down"), MREF_SHUTTING_DOWN);
  CHECK_EQ_INT(metrics_refusal_for(408, "timeout"), MREF_TIMEOUT);
  CHECK_EQ_INT(metrics_refusal_for(400, "context_length_exceeded"), MREF_CONTEXT);
  CHECK_EQ_INT(metrics_refusal_for(400, "invalid_prompt_cache_key"), MREF_INVALID);
  CHECK_EQ_INT(metrics_refusal_for(401, "invalid_api_key"), MREF_UNAUTHORIZED);
  CHECK_EQ_INT(metrics_refusal_for(413, NULL), MREF_TOO_LARGE);
  CHECK_EQ_INT(metrics_refusal_for(404, "model_not_found"), MREF_NOT_FOUND);
  CHECK_EQ_INT(metrics_refusal_for(500, "client_too_slow"), MREF_SLOW_CLIENT);
  CHECK_EQ_INT(metrics_refusal_for(500, "internal_error"), MREF_INTERNAL);
  metrics_refusal_count(&g_m, MREF_OVERLOADED);
  metrics_refusal_count(&g_m, MREF_OVERLOADED);
  metrics_refusal_count(&g_m, metrics_refusal_for(400, "context_length_exceeded"));
  metrics_refusal_count(&g_m, (metrics_refusal)99); /* out of range counts as internal */

  /* Engine series: speculation, prefix cache, batching, KV. */
  st.steps_total = 8;
  st.batch_entries_total = 20;
  st.batch_steps_by_size[0] = 3; /* 1 entry */
  st.batch_steps_by_size[2] = 4; /* 3..4 */
  st.batch_steps_by_size[ENGINE_BATCH_BUCKETS] = 1; /* more than 512 */
  st.kv_bytes_in_use = (size_t)3 << 30;
  st.spec_drafted_total = 120;
  st.spec_accepted_total = 70;
  st.spec_emitted_total = 95;
  st.spec_target_passes_total = 25;
  st.spec_rounds_total = 24;
  st.spec_fallbacks_total = 1;
  st.spec_declined_total = 31;
  st.spec_probes_total = 3;
  st.spec_rollbacks_total = 7;
  st.cache_requests_total = 10;
  st.cache_hits_total = 6;
  st.cache_misses_total = 4;
  st.cache_reused_tokens_total = 600;
  st.cache_evaluated_tokens_total = 150;
  st.cache_evictions_total = 2;
  st.cache_entries = 3;
  st.cache_bytes = 123456789;
  st.kv_bytes_total = 1000;
  st.kv_bytes_f16 = 1882;
  st.kv_type_k = "q8_0";
  st.kv_type_v = "q8_0";
  sbuf_clear(&b);
  metrics_render(&g_m, &st, &b);
  CHECK(check_format(b.data) > 40);
  static const char *want[] = {
      "# TYPE power_requests_refused_total counter\n",
      "power_requests_refused_total{reason=\"overloaded\"} 2\n",
      "power_requests_refused_total{reason=\"context\"} 1\n",
      "power_requests_refused_total{reason=\"internal\"} 1\n",
      "power_requests_refused_total{reason=\"timeout\"} 0\n",
      "power_requests_refused_total{reason=\"invalid\"} 0\n",
      "power_requests_refused_total{reason=\"unauthorized\"} 0\n",
      "power_requests_refused_total{reason=\"too_large\"} 0\n",
      "# TYPE power_batch_size_average gauge\npower_batch_size_average 2.5\n",
      "power_batch_entries_total 20\n",
      "# TYPE power_batch_size histogram\npower_batch_size_bucket{le=\"1\"} 3\npower_batch_size_bucket{le=\"2\"} 3\n"
      "power_batch_size_bucket{le=\"4\"} 7\n",
      "power_batch_size_bucket{le=\"512\"} 7\npower_batch_size_bucket{le=\"+Inf\"} 8\npower_batch_size_sum 20\n"
      "power_batch_size_count 8\n",
      "# TYPE power_kv_bytes_in_use gauge\npower_kv_bytes_in_use 3221225472\n",
      "# TYPE power_kv_cache_bytes gauge\npower_kv_cache_bytes 1000\n",
      "# TYPE power_kv_cache_bytes_saved gauge\npower_kv_cache_bytes_saved 882\n",
      "# TYPE power_kv_cache_type gauge\npower_kv_cache_type{k=\"q8_0\",v=\"q8_0\"} 1\n",
      "# TYPE power_spec_drafted_tokens_total counter\npower_spec_drafted_tokens_total 120\n",
      "power_spec_accepted_tokens_total 70\n",
      "power_spec_emitted_tokens_total 95\n",
      "power_spec_target_passes_total 25\n",
      "power_spec_rounds_total 24\n",
      "power_spec_fallbacks_total 1\n",
      "# TYPE power_spec_declined_total counter\npower_spec_declined_total 31\n",
      "power_spec_probes_total 3\n",
      "power_spec_rollbacks_total 7\n",
      "# TYPE power_prompt_cache_requests_total counter\npower_prompt_cache_requests_total 10\n",
      "power_prompt_cache_hits_total 6\n",
      "power_prompt_cache_misses_total 4\n",
      "power_prompt_cache_reused_tokens_total 600\n",
      "power_prompt_cache_evaluated_tokens_total 150\n",
      "power_prompt_cache_evictions_total 2\n",
      "# TYPE power_prompt_cache_entries gauge\npower_prompt_cache_entries 3\n",
      "# TYPE power_prompt_cache_bytes gauge\npower_prompt_cache_bytes 123456789\n",
      "power_queue_depth 5\n", /* existing series kept */
  };
  for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
    CHECK_MSG(strstr(b.data, want[i]) != NULL, "missing: %s", want[i]);
  /* No steps yet: the average is 0, not NaN. */
  engine_stats z = {0};
  sbuf_clear(&b);
  metrics_render(&g_m, &z, &b);
  CHECK(check_format(b.data) > 40);
  CHECK(strstr(b.data, "power_batch_size_average 0\n") != NULL);
  /* Each family is announced once. */
  const char *first = strstr(b.data, "# TYPE power_requests_refused_total");
  CHECK(first && !strstr(first + 1, "# TYPE power_requests_refused_total"));
  sbuf_free(&b);
  TEST_DONE();
}
