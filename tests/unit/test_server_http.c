/* test_server_http.c - the HTTP side of the server over loopback: the route
 * table (404, 405 + Allow, {id} paths), keep-alive and pipelining,
 * Transfer-Encoding, header deadlines and the per-client limit, a
 * non-streamed request whose client leaves, the prompt byte bound, CORS,
 * JSON request logs, a port in use. A real engine with a small model; the
 * server in-process on ephemeral ports. Every wait is bounded. */
#include "base/error.h"
#include "engine/engine.h"
#include "http_client.h"
#include "server/server.h"
#include "test.h"
#include "tok/tok.h"

#include <jansson.h>

#define MODEL POWER_SHARED_DIR "/models/syn-qwen2-Q4_K_M.gguf"

static int g_port;

static void test_routes(void) {
  char *t = hc_request(g_port, "GET", "/nope", NULL, NULL, 5000);
  CHECK_EQ_INT(hc_status(t), 404);
  CHECK(strstr(t, "\"unknown_url\"") != NULL);
  free(t);
  t = hc_request(g_port, "GET", "/v1/health", NULL, NULL, 5000); /* /health has no /v1 alias */
  CHECK_EQ_INT(hc_status(t), 404);
  free(t);
  t = hc_request(g_port, "POST", "/health", NULL, NULL, 5000);
  CHECK_EQ_INT(hc_status(t), 405);
  CHECK_STR(hc_header(t, "Allow") ? hc_header(t, "Allow") : "", "GET, HEAD");
  free(t);
  t = hc_request(g_port, "GET", "/v1/chat/completions", NULL, NULL, 5000);
  CHECK_EQ_INT(hc_status(t), 405);
  CHECK_STR(hc_header(t, "Allow") ? hc_header(t, "Allow") : "", "POST");
  free(t);
  t = hc_request(g_port, "PUT", "/models/syn-qwen2-Q4_K_M", NULL, NULL, 5000);
  CHECK_EQ_INT(hc_status(t), 405);
  CHECK_STR(hc_header(t, "Allow") ? hc_header(t, "Allow") : "", "GET, HEAD, POST, DELETE");
  free(t);
  /* DELETE of a model is a store operation: a one-model server has none. */
  t = hc_request(g_port, "DELETE", "/models/syn-qwen2-Q4_K_M", NULL, NULL, 5000);
  CHECK_EQ_INT(hc_status(t), 400);
  CHECK(strstr(t, "\"no_store\"") != NULL);
  free(t);
  t = hc_request(g_port, "GET", "/v1/models/syn-qwen2-Q4_K_M", NULL, NULL, 5000);
  CHECK_EQ_INT(hc_status(t), 200);
  CHECK(strstr(hc_body(t), "\"id\":\"syn-qwen2-Q4_K_M\"") != NULL);
  free(t);
  t = hc_request(g_port, "GET", "/models/other", NULL, NULL, 5000);
  CHECK_EQ_INT(hc_status(t), 404);
  CHECK(strstr(t, "model_not_found") != NULL);
  free(t);
  t = hc_request(g_port, "GET", "/v1/models/", NULL, NULL, 5000); /* {id} needs at least one byte */
  CHECK_EQ_INT(hc_status(t), 404);
  free(t);
  /* The metrics labels come from the table. */
  t = hc_request(g_port, "GET", "/metrics", NULL, NULL, 5000);
  CHECK(strstr(t, "power_http_requests_total{endpoint=\"models\",status=\"200\"}") != NULL);
  CHECK(strstr(t, "power_http_requests_total{endpoint=\"health\",status=\"405\"} 1\n") != NULL);
  CHECK(strstr(t, "power_http_requests_total{endpoint=\"other\",status=\"404\"} 3\n") != NULL);
  free(t);
}

/* Keep-alive: several requests on one connection, pipelined or not; an
 * error without a body keeps the connection too. */
static void test_keepalive(void) {
  int fd = hc_connect(g_port);
  CHECK(fd >= 0);
  const char *get = "GET /health HTTP/1.1\r\nHost: a\r\n\r\n";
  for (int i = 0; i < 3; i++) {
    CHECK(hc_send_str(fd, get));
    bool eof;
    char *t = hc_read(fd, 5000, "{\"status\":\"ok\"}", 1, NULL, &eof);
    CHECK_EQ_INT(hc_status(t), 200);
    CHECK_MSG(!hc_header(t, "Connection") || strcasecmp(hc_header(t, "Connection"), "close"),
              "answer %d closes the connection:\n%s", i, t);
    CHECK(!eof);
    free(t);
  }
  /* Pipelined: five GETs (one of them a 404) in one write, five answers in order. */
  CHECK(hc_send_str(fd, "GET /health HTTP/1.1\r\nHost: a\r\n\r\nGET /v1/models HTTP/1.1\r\nHost: a\r\n\r\n"
                        "GET /nope HTTP/1.1\r\nHost: a\r\n\r\nGET /health HTTP/1.1\r\nHost: a\r\n\r\n"
                        "GET /models HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n"));
  bool eof;
  char *t = hc_read(fd, 10000, NULL, 0, NULL, &eof);
  CHECK_MSG(hc_count(t, "HTTP/1.1 ") == 5, "pipelined answers:\n%s", t);
  const char *a = strstr(t, "HTTP/1.1 404");
  const char *b = strstr(t, "\"object\":\"list\"");
  CHECK(a && b && b < a); /* in order */
  CHECK(eof);             /* the last asked to close */
  free(t);
  close(fd);
}

static void test_transfer_encoding(void) {
  int fd = hc_connect(g_port);
  CHECK(hc_send_str(fd, "POST /v1/completions HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip\r\n\r\nxxxx"));
  /* Answered without waiting for a body it cannot frame (the bound is far
   * below the header deadline and the idle timeout). */
  char *t = hc_read(fd, 5000, "\r\n\r\n", 1, NULL, NULL);
  CHECK_MSG(hc_status(t) == 501, "%s", t);
  CHECK(strstr(t, "unsupported_transfer_encoding") || hc_status(t) == 501);
  free(t);
  close(fd);
  /* chunked is fine */
  fd = hc_connect(g_port);
  CHECK(hc_send_str(fd, "POST /tokenize HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
                        "13\r\n{\"content\":\"hello\"}\r\n0\r\n\r\n"));
  t = hc_read(fd, 10000, NULL, 0, NULL, NULL);
  CHECK_MSG(hc_status(t) == 200, "%s", t);
  CHECK(strstr(hc_body(t), "\"tokens\":[") != NULL);
  free(t);
  close(fd);
}

/* A prompt whose bytes cannot fit the context is refused before it is
 * tokenized, whatever it holds. */
static void test_prompt_bound(void) {
  size_t n = 4u << 20;
  char *body = malloc(n + 64);
  int k = snprintf(body, 64, "{\"prompt\":\"");
  memset(body + k, ' ', n);
  snprintf(body + k + n, 64, "\",\"max_tokens\":1}");
  char *t = hc_request(g_port, "POST", "/v1/completions", NULL, body, 60000);
  CHECK_MSG(hc_status(t) == 400, "%.300s", t ? t : "(none)");
  CHECK(t && strstr(t, "context_length_exceeded") != NULL);
  CHECK_MSG(t && strstr(t, "bytes of text") != NULL, "not refused by the byte bound: %.300s", t ? t : "");
  free(t);
  /* The same for chat messages. */
  k = snprintf(body, 64, "{\"messages\":[{\"role\":\"user\",\"content\":\"");
  memset(body + k, 'a', n);
  snprintf(body + k + n, 64, "\"}]}");
  t = hc_request(g_port, "POST", "/v1/chat/completions", NULL, body, 60000);
  CHECK_MSG(t && strstr(t, "bytes of text") != NULL, "%.300s", t ? t : "");
  free(t);
  free(body);
}

/* A non-streamed request whose client leaves stops generating within a
 * step or so, not at max_tokens. End-of-generation tokens are banned so
 * that only the disconnect can end it early. */
static void test_gone_nonstreamed(engine *e) {
  const tok_vocab *v = engine_vocab(e);
  char bias[256] = "";
  int32_t eog[3] = {tok_eos(v), tok_eot(v), tok_eom(v)};
  size_t o = 0;
  for (int i = 0; i < 3; i++)
    if (eog[i] >= 0) o += (size_t)snprintf(bias + o, sizeof bias - o, "%s\"%d\":-100", o ? "," : "", eog[i]);
  char body[512];
  snprintf(body, sizeof body, "{\"prompt\":\"Once upon a time\",\"max_tokens\":3000,\"temperature\":1,\"seed\":3,"
                              "\"logit_bias\":{%s}}", bias);
  engine_stats st0, st;
  engine_get_stats(e, &st0);
  int fd = hc_connect(g_port);
  char head[256];
  snprintf(head, sizeof head, "POST /v1/completions HTTP/1.1\r\nHost: a\r\nContent-Length: %zu\r\n\r\n", strlen(body));
  CHECK(hc_send_str(fd, head) && hc_send_str(fd, body));
  /* Wait until it generates, then leave. */
  for (int i = 0; i < 400; i++) {
    engine_get_stats(e, &st);
    if (st.generated_tokens_total > st0.generated_tokens_total + 8) break;
    usleep(10000);
  }
  close(fd);
  for (int i = 0; i < 1000; i++) { /* at most 10 s */
    engine_get_stats(e, &st);
    if (st.active == 0) break;
    usleep(10000);
  }
  CHECK_EQ_INT(st.active, 0);
  uint64_t made = st.generated_tokens_total - st0.generated_tokens_total;
  CHECK_MSG(made < 3000, "generated %llu tokens for a client that left", (unsigned long long)made);
  CHECK(st.requests_cancelled > st0.requests_cancelled);
  fprintf(stderr, "tokens generated for a client gone early: %llu of 3000\n", (unsigned long long)made);
}

static json_t *post_json(const char *path, const char *body) {
  char *t = hc_request(g_port, "POST", path, NULL, body, 60000);
  CHECK_MSG(hc_status(t) == 200, "%s -> %.300s", body, t ? t : "(none)");
  json_error_t je;
  json_t *j = hc_status(t) == 200 ? json_loads(hc_body(t), 0, &je) : NULL;
  free(t);
  return j;
}

static const char *choice_text(json_t *j, size_t i) {
  json_t *c = json_array_get(json_object_get(j, "choices"), i);
  json_t *m = json_object_get(c, "message");
  const char *s = json_string_value(m ? json_object_get(m, "content") : json_object_get(c, "text"));
  return s ? s : "(none)";
}

/* n > 1: choice i samples with seed + i, so it equals a single request
 * with that seed; several prompts give a choice each, in order. */
static void test_choices(void) {
  json_t *many = post_json("/v1/chat/completions",
                           "{\"messages\":[{\"role\":\"user\",\"content\":\"Tell a story\"}],\"max_tokens\":12,"
                           "\"temperature\":1,\"seed\":40,\"n\":3}");
  CHECK_EQ_INT(json_array_size(json_object_get(many, "choices")), 3);
  for (int i = 0; i < 3; i++) {
    char body[256];
    snprintf(body, sizeof body,
             "{\"messages\":[{\"role\":\"user\",\"content\":\"Tell a story\"}],\"max_tokens\":12,"
             "\"temperature\":1,\"seed\":%d}",
             40 + i);
    json_t *one = post_json("/v1/chat/completions", body);
    CHECK_STR(choice_text(many, (size_t)i), choice_text(one, 0));
    CHECK_EQ_INT(json_integer_value(json_object_get(json_array_get(json_object_get(many, "choices"), (size_t)i), "index")), i);
    json_decref(one);
  }
  CHECK(strcmp(choice_text(many, 0), choice_text(many, 1)) || strcmp(choice_text(many, 1), choice_text(many, 2)));
  json_t *u = json_object_get(many, "usage");
  CHECK(json_integer_value(json_object_get(u, "completion_tokens")) > 12); /* all three choices */
  json_decref(many);
  json_t *multi = post_json("/v1/completions", "{\"prompt\":[\"def add(a, b):\",\"Once upon\"],\"max_tokens\":6,"
                                               "\"temperature\":0}");
  json_t *a = post_json("/v1/completions", "{\"prompt\":\"def add(a, b):\",\"max_tokens\":6,\"temperature\":0}");
  json_t *b = post_json("/v1/completions", "{\"prompt\":\"Once upon\",\"max_tokens\":6,\"temperature\":0}");
  CHECK_EQ_INT(json_array_size(json_object_get(multi, "choices")), 2);
  CHECK_STR(choice_text(multi, 0), choice_text(a, 0));
  CHECK_STR(choice_text(multi, 1), choice_text(b, 0));
  CHECK_EQ_INT(json_integer_value(json_object_get(json_object_get(multi, "usage"), "prompt_tokens")),
               json_integer_value(json_object_get(json_object_get(a, "usage"), "prompt_tokens")) +
                   json_integer_value(json_object_get(json_object_get(b, "usage"), "prompt_tokens")));
  json_decref(multi);
  json_decref(a);
  json_decref(b);
  /* Streamed: the same choices one after the other, each chunk naming its
   * index, then one usage chunk and [DONE]. */
  multi = post_json("/v1/completions", "{\"prompt\":[\"def add(a, b):\",\"Once upon\"],\"max_tokens\":6,"
                                       "\"temperature\":0.9,\"seed\":5,\"n\":2}");
  char *t = hc_request(g_port, "POST", "/v1/completions", NULL,
                       "{\"prompt\":[\"def add(a, b):\",\"Once upon\"],\"max_tokens\":6,\"temperature\":0.9,"
                       "\"seed\":5,\"n\":2,\"stream\":true,\"stream_options\":{\"include_usage\":true}}",
                       60000);
  CHECK_EQ_INT(hc_status(t), 200);
  char text[4][512] = {"", "", "", ""};
  int finishes = 0, usages = 0, done = 0;
  for (char *line = t ? strstr(t, "data: ") : NULL; line; line = strstr(line + 1, "data: ")) {
    if (!strncmp(line, "data: [DONE]", 12)) {
      done++;
      continue;
    }
    json_error_t je;
    json_t *j = json_loadb(line + 6, strcspn(line + 6, "\n"), 0, &je);
    json_t *ch = json_array_get(json_object_get(j, "choices"), 0);
    if (json_object_get(j, "usage") && !json_is_null(json_object_get(j, "usage"))) usages++;
    if (ch) {
      int idx = (int)json_integer_value(json_object_get(ch, "index"));
      const char *piece = json_string_value(json_object_get(ch, "text"));
      if (idx >= 0 && idx < 4 && piece) strncat(text[idx], piece, sizeof text[idx] - strlen(text[idx]) - 1);
      if (json_is_string(json_object_get(ch, "finish_reason"))) finishes++;
    }
    json_decref(j);
  }
  CHECK_EQ_INT(finishes, 4);
  CHECK_EQ_INT(usages, 1);
  CHECK_EQ_INT(done, 1);
  for (int i = 0; i < 4; i++) CHECK_STR(text[i], choice_text(multi, (size_t)i));
  json_decref(multi);
  free(t);
  /* Embeddings cannot be truncated for this model: a 400 that says so. */
  t = hc_request(g_port, "POST", "/v1/embeddings", NULL, "{\"input\":\"x\",\"dimensions\":8}", 5000);
  CHECK_EQ_INT(hc_status(t), 400);
  CHECK(t && strstr(t, "unsupported_dimensions") && strstr(t, "truncated"));
  free(t);
  /* A llama.cpp field is refused by name. */
  t = hc_request(g_port, "POST", "/v1/chat/completions", NULL,
                 "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"mirostat\":2}", 5000);
  CHECK_EQ_INT(hc_status(t), 400);
  CHECK(t && strstr(t, "\"param\":\"mirostat\""));
  free(t);
}

static int cached_tokens(int port, const char *key, const char *cache_key, const char *prompt) {
  char hdr[128], body[512];
  snprintf(hdr, sizeof hdr, "Authorization: Bearer %s\r\n", key);
  snprintf(body, sizeof body, "{\"prompt\":\"%s\",\"max_tokens\":2,\"temperature\":0,\"prompt_cache_key\":\"%s\"}",
           prompt, cache_key);
  char *t = hc_request(port, "POST", "/v1/completions", hdr, body, 60000);
  CHECK_MSG(hc_status(t) == 200, "%.300s", t ? t : "(none)");
  json_error_t je;
  json_t *j = json_loads(hc_body(t), 0, &je);
  int c = (int)json_integer_value(
      json_object_get(json_object_get(json_object_get(j, "usage"), "prompt_tokens_details"), "cached_tokens"));
  json_decref(j);
  free(t);
  return c;
}

/* Prompt-cache quotas count per API key: one key filling its quota evicts
 * its own entries, not another key's. */
static void test_tenant_quota(void) {
  engine_opts eo = {0};
  eo.model_path = MODEL;
  eo.max_active = 2;
  eo.n_ctx = 512;
  eo.prompt_cache_entries = 4;
  eo.prompt_cache_owner_entries = 1;
  engine *e = NULL;
  char err[PW_ERRMAX] = "";
  CHECK_MSG(engine_create(&eo, &e, err) == 0, "%s", err);
  server_opts so = {0};
  so.api_keys = "key-a,key-b";
  server *s = NULL;
  if (e) CHECK_MSG(server_start(&so, e, &s, err) == 0, "%s", err);
  if (s) {
    int port = server_port(s);
    const char *pa = "Once upon a time there was a small village by the sea";
    CHECK_EQ_INT(cached_tokens(port, "key-a", "x", pa), 0);
    CHECK(cached_tokens(port, "key-a", "x", pa) > 0);
    cached_tokens(port, "key-b", "y", "The quick brown fox jumps over the lazy dog");
    cached_tokens(port, "key-b", "z", "In the beginning was the word and the word was");
    CHECK_MSG(cached_tokens(port, "key-a", "x", pa) > 0, "key-b's entries evicted key-a's");
    CHECK_EQ_INT(cached_tokens(port, "key-b", "y", "The quick brown fox jumps over the lazy dog"), 0);
  }
  server_stop(s);
  engine_destroy(e);
}

static void test_port_in_use(engine *e) {
  server_opts so = {0};
  so.port = g_port;
  server *s = NULL;
  char err[PW_ERRMAX] = "";
  CHECK_EQ_INT(server_start(&so, e, &s, err), PW_EIO);
  CHECK_MSG(strstr(err, "already in use") != NULL, "%s", err);
  CHECK(s == NULL);
  so.host = "localhost"; /* names resolve */
  so.port = 0;
  CHECK_MSG(server_start(&so, e, &s, err) == 0, "%s", err);
  if (s) {
    char *t = hc_request(server_port(s), "GET", "/health", NULL, NULL, 5000);
    CHECK_EQ_INT(hc_status(t), 200);
    free(t);
  }
  server_stop(s);
  so.host = "no-such-host.invalid";
  s = NULL;
  CHECK_EQ_INT(server_start(&so, e, &s, err), PW_EINVAL);
  so.host = NULL;
  so.api_keys = "  ";
  CHECK_EQ_INT(server_start(&so, e, &s, err), PW_EINVAL);
  CHECK_MSG(strstr(err, "holds no key") != NULL, "%s", err);
}

/* Headers that trickle in miss their deadline (408, closed) while other
 * clients are answered; connections per client address are capped. */
static void test_deadlines(engine *e) {
  server_opts so = {0};
  so.header_timeout_s = 1;
  so.body_timeout_s = 1;
  so.max_per_client = 4;
  server *s = NULL;
  char err[PW_ERRMAX] = "";
  CHECK_MSG(server_start(&so, e, &s, err) == 0, "%s", err);
  if (!s) return;
  int port = server_port(s);
  int fd = hc_connect_from("127.0.0.2", port);
  CHECK(fd >= 0);
  CHECK(hc_send_str(fd, "GET /health HTTP/1.1\r\n"));
  bool eof = false;
  char *t = NULL;
  /* One header line every 200 ms: each resets an inactivity timer, not
   * the deadline. At most 50 lines (10 s). */
  for (int i = 0; i < 50 && !eof; i++) {
    char line[64];
    snprintf(line, sizeof line, "X-Trickle-%d: %d\r\n", i, i);
    if (!hc_send_str(fd, line)) break;
    free(t);
    t = hc_read(fd, 200, "\r\n\r\n", 1, NULL, &eof);
    if (t && *t) break;
  }
  if (!eof && !(t && *t)) {
    free(t);
    t = hc_read(fd, 5000, NULL, 0, NULL, &eof);
  }
  CHECK_MSG(hc_status(t) == 408, "trickled headers: %s", t ? t : "(nothing)");
  free(t);
  close(fd);
  /* A body that never comes: 408 after the body deadline. */
  fd = hc_connect(port);
  CHECK(hc_send_str(fd, "POST /tokenize HTTP/1.1\r\nHost: a\r\nContent-Length: 100000\r\n\r\n{\"content\":"));
  t = hc_read(fd, 10000, NULL, 0, NULL, &eof);
  CHECK_MSG(hc_status(t) == 408 && eof, "unsent body: %s", t ? t : "(nothing)");
  free(t);
  close(fd);
  /* Per client address: the fifth idle connection from 127.0.0.2 is
   * refused; 127.0.0.1 is still answered. */
  int idle[5];
  for (int i = 0; i < 5; i++) idle[i] = hc_connect_from("127.0.0.2", port);
  t = hc_read(idle[4], 3000, NULL, 0, NULL, &eof);
  CHECK_MSG(eof, "a fifth connection from one address was kept");
  free(t);
  char *h = hc_request(port, "GET", "/health", NULL, NULL, 5000);
  CHECK_EQ_INT(hc_status(h), 200);
  free(h);
  for (int i = 0; i < 5; i++)
    if (idle[i] >= 0) close(idle[i]);
  h = hc_request(port, "GET", "/metrics", NULL, NULL, 5000);
  CHECK(h && strstr(h, "power_http_deadline_closes_total ") && !strstr(h, "power_http_deadline_closes_total 0\n"));
  free(h);
  server_stop(s);
}

static void test_cors_and_log(engine *e) {
  FILE *log = tmpfile();
  server_opts so = {0};
  so.cors_origins = "https://app.example, http://localhost:5173";
  so.log_requests = 1;
  so.log_json = 1;
  so.log_out = log;
  server *s = NULL;
  char err[PW_ERRMAX] = "";
  CHECK_MSG(server_start(&so, e, &s, err) == 0, "%s", err);
  if (!s) return;
  int port = server_port(s);
  char *t = hc_request(port, "OPTIONS", "/v1/chat/completions",
                       "Origin: https://app.example\r\nAccess-Control-Request-Method: POST\r\n"
                       "Access-Control-Request-Headers: authorization, content-type\r\n",
                       NULL, 5000);
  CHECK_MSG(hc_status(t) == 204, "%s", t);
  CHECK_STR(hc_header(t, "Access-Control-Allow-Origin") ? hc_header(t, "Access-Control-Allow-Origin") : "",
            "https://app.example");
  CHECK(hc_header(t, "Access-Control-Allow-Methods") && strstr(hc_header(t, "Access-Control-Allow-Methods"), "POST"));
  CHECK(hc_header(t, "Access-Control-Allow-Headers") &&
        strstr(hc_header(t, "Access-Control-Allow-Headers"), "Authorization"));
  free(t);
  t = hc_request(port, "POST", "/tokenize", "Origin: http://localhost:5173\r\n", "{\"content\":\"hi\"}", 5000);
  CHECK_EQ_INT(hc_status(t), 200);
  CHECK_STR(hc_header(t, "Access-Control-Allow-Origin") ? hc_header(t, "Access-Control-Allow-Origin") : "",
            "http://localhost:5173");
  free(t);
  t = hc_request(port, "GET", "/nope", "Origin: https://app.example\r\n", NULL, 5000); /* errors too */
  CHECK(hc_header(t, "Access-Control-Allow-Origin") != NULL);
  free(t);
  t = hc_request(port, "GET", "/health", "Origin: https://evil.example\r\n", NULL, 5000);
  CHECK_EQ_INT(hc_status(t), 200);
  CHECK(hc_header(t, "Access-Control-Allow-Origin") == NULL);
  free(t);
  t = hc_request(port, "OPTIONS", "/nope", "Origin: https://app.example\r\n", NULL, 5000);
  CHECK_EQ_INT(hc_status(t), 404);
  free(t);
  server_stop(s);
  /* Without --cors: no CORS headers, OPTIONS is not a method here. */
  so.cors_origins = NULL;
  so.log_out = NULL;
  so.log_requests = 0;
  CHECK_MSG(server_start(&so, e, &s, err) == 0, "%s", err);
  if (s) {
    t = hc_request(server_port(s), "OPTIONS", "/v1/chat/completions", "Origin: https://app.example\r\n", NULL, 5000);
    CHECK_EQ_INT(hc_status(t), 405);
    CHECK(hc_header(t, "Access-Control-Allow-Origin") == NULL);
    free(t);
    server_stop(s);
  }
  /* The JSON request log: one object per line, the fields asked for. */
  fflush(log);
  rewind(log);
  char line[4096];
  int n = 0;
  while (fgets(line, sizeof line, log)) {
    json_error_t je;
    json_t *j = json_loads(line, 0, &je);
    CHECK_MSG(j != NULL, "not JSON: %s", line);
    const char *tm = json_string_value(json_object_get(j, "time"));
    CHECK(tm && strlen(tm) == 24 && tm[10] == 'T' && tm[23] == 'Z');
    CHECK(json_is_string(json_object_get(j, "id")) && json_is_string(json_object_get(j, "endpoint")));
    CHECK(json_is_integer(json_object_get(j, "status")) && json_is_number(json_object_get(j, "total_ms")));
    CHECK(!strstr(line, "\"hi\"")); /* no request text unless asked */
    json_decref(j);
    n++;
  }
  CHECK_EQ_INT(n, 5);
  fclose(log);
}

int main(void) {
  if (access(MODEL, R_OK)) {
    fprintf(stderr, "missing test model %s\n", MODEL);
    return 1;
  }
  engine_opts eo = {0};
  eo.model_path = MODEL;
  eo.max_active = 2;
  eo.max_queue = 8;
  eo.n_ctx = 512;
  engine *e = NULL;
  char err[PW_ERRMAX];
  if (engine_create(&eo, &e, err)) {
    fprintf(stderr, "engine: %s\n", err);
    return 1;
  }
  server_opts so = {0};
  server *s = NULL;
  if (server_start(&so, e, &s, err)) {
    fprintf(stderr, "server: %s\n", err);
    engine_destroy(e);
    return 1;
  }
  g_port = server_port(s);
  test_routes();
  test_keepalive();
  test_transfer_encoding();
  test_prompt_bound();
  test_gone_nonstreamed(e);
  test_choices();
  test_port_in_use(e);
  server_stop(s);
  test_deadlines(e);
  test_cors_and_log(e);
  engine_destroy(e);
  test_tenant_quota();
  TEST_DONE();
}
