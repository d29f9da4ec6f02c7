/* cmd_serve.c - `power serve`: loads a model into an engine and serves it
 * over HTTP until SIGTERM/SIGINT, then shuts down gracefully: with
 * --drain-delay, first answer /health with 503 for that long while still
 * serving (a load balancer takes the replica out of its pool), then stop
 * accepting, let running requests finish (bounded), stop, exit 0.
 * Wiring only: the HTTP layer is src/server, the engine src/engine. */
#include "cli/cmd_serve.h"

#include "base/clock.h"
#include "base/error.h"
#include "cli/cli.h"
#include "cli/cli_gen.h"
#include "engine/engine.h"
#include "server/server.h"
#include "store/store.h"

#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SERVE_DRAIN_MS 10000 /* grace for requests in flight at shutdown */

static int g_sig_pipe[2] = {-1, -1};

static void on_signal(int sig) {
  int saved = errno;
  unsigned char b = (unsigned char)sig;
  ssize_t n = write(g_sig_pipe[1], &b, 1); /* async-signal-safe */
  (void)n;
  errno = saved;
}

/* --prompt-cache-entries: -1 (disabled) or a positive count (0 would mean
 * the engine's default; the engine checks the upper bound). */
static int parse_cache_entries(const char *opt, const char *v, long *out) {
  char *end;
  errno = 0;
  long x = strtol(v, &end, 10);
  if (!*v || *end || errno || x < -1 || x == 0 || x > INT_MAX) {
    fprintf(stderr, "power serve: invalid value for %s: '%s' (-1 = disabled, or a positive count)\n", opt, v);
    return -1;
  }
  *out = x;
  return 0;
}

static void serve_usage(FILE *out) {
  fprintf(out,
          "usage: power serve [--model M] [options]\n"
          "  --host ADDR            listen address (default 127.0.0.1)\n"
          "  --port N               TCP port (default 11434; 0 = any free port)\n"
          "  --threads N            kernel threads (default 2)\n"
          "  --parallel N           sequences decoding at once (default 4)\n"
          "  --queue N              requests waiting for a slot (default 16)\n"
          "  --ctx N                context per sequence (default: model's, at most 4096)\n"
          "  --api-key-file F       API keys, one per line (also $POWER_API_KEYS, comma-separated)\n"
          "  --timeout S            admission deadline in seconds (default none;\n"
          "                         per request: X-Request-Timeout header)\n"
          "  --max-body BYTES       request body limit (default 8388608)\n"
          "  --drain-timeout S      grace for requests in flight at shutdown (default 10)\n"
          "  --drain-delay S        on SIGTERM, answer /health with 503 for S seconds while still\n"
          "                         serving, before new connections are refused (default 0; behind\n"
          "                         a load balancer: longer than its health check takes to notice)\n"
          "  --replica-id ID        name sent as X-Power-Replica on every response and as the\n"
          "                         label of power_replica_info (default: host name:port)\n"
          "  --prompt-cache-entries N  prefix-cache entries for prompt_cache_key reuse\n"
          "                         (default 8; -1 = disabled)\n"
          "  --prompt-cache-bytes BYTES  KV bytes the entries may hold (default 1 GiB;\n"
          "                         suffixes K, M, G)\n"
          "  --prompt-cache-ttl S   idle seconds before an entry expires (default 600)\n"
          "  --log-content          put prompt and output text in the request log (also\n"
          "                         --log-text, POWER_LOG=debug); without it logs never hold\n"
          "                         prompt or output text; never the prompt_cache_key\n"
          "  --receipt-key KEY.pem  sign every receipt with this Ed25519 key (power keygen)\n"
          "  --no-request-log       no per-request line on stderr\n");
  spec_opts_usage(out);
}

/* BYTES with an optional K/M/G (binary) suffix, 1..2^50. 0 or -1 (printed). */
static int parse_bytes(const char *opt, const char *v, size_t *out) {
  char *end;
  errno = 0;
  unsigned long long x = strtoull(v, &end, 10);
  unsigned shift = 0;
  if (*end == 'K' || *end == 'k') shift = 10, end++;
  else if (*end == 'M' || *end == 'm') shift = 20, end++;
  else if (*end == 'G' || *end == 'g') shift = 30, end++;
  if (*end == 'i' && shift) end++;
  if (*end == 'B' && shift) end++;
  if (!*v || *v == '-' || *end || errno || x == 0 || x > (1ull << 50) >> shift) {
    fprintf(stderr, "power serve: invalid value for %s: '%s' (bytes, e.g. 536870912 or 512M)\n", opt, v);
    return -1;
  }
  *out = (size_t)(x << shift);
  return 0;
}

int cmd_serve(int argc, char **argv) {
  const char *model = NULL, *host = "127.0.0.1", *key_file = NULL, *receipt_key = NULL;
  long port = 11434, threads = 2, parallel = 4, queue = 16, ctx = 0, max_body = (long)SERVER_DEFAULT_MAX_BODY;
  double timeout_s = 0, drain_s = SERVE_DRAIN_MS / 1000.0, drain_delay_s = 0;
  const char *replica_id = NULL;
  long cache_entries = 0;
  size_t cache_bytes = 0;
  double cache_ttl = 0;
  spec_opts spec = {0};
  const char *lv = getenv("POWER_LOG");
  int log_requests = lv && !strcmp(lv, "debug") ? 2 : 1;
  bool log_text = false, no_log = false;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      serve_usage(stdout);
      return 0;
    }
    if (!strcmp(a, "--log-text") || !strcmp(a, "--log-content")) {
      log_text = true;
      continue;
    }
    if (!strcmp(a, "--no-request-log")) {
      no_log = true;
      continue;
    }
    int sc = spec_opts_parse("serve", &spec, a, v);
    if (sc < 0) return 2;
    if (sc > 0) {
      i++;
      continue;
    }
    if (!v) {
      fprintf(stderr, "power serve: unknown option or missing value: %s (try --help)\n", a);
      return 2;
    }
    i++;
    int bad = 0;
    if (!strcmp(a, "--model") || !strcmp(a, "-m")) model = v;
    else if (!strcmp(a, "--host")) host = v;
    else if (!strcmp(a, "--port")) bad = cli_parse_long("serve", a, v, 0, 65535, &port);
    else if (!strcmp(a, "--threads") || !strcmp(a, "-t")) bad = cli_parse_long("serve", a, v, 1, 512, &threads);
    else if (!strcmp(a, "--parallel")) bad = cli_parse_long("serve", a, v, 1, 1024, &parallel);
    else if (!strcmp(a, "--queue")) bad = cli_parse_long("serve", a, v, 1, 1 << 20, &queue);
    else if (!strcmp(a, "--ctx")) bad = cli_parse_long("serve", a, v, 0, 1 << 24, &ctx);
    else if (!strcmp(a, "--api-key-file")) key_file = v;
    else if (!strcmp(a, "--receipt-key")) receipt_key = v;
    else if (!strcmp(a, "--request-timeout") || !strcmp(a, "--timeout")) bad = cli_parse_double("serve", a, v, 0, 86400, &timeout_s);
    else if (!strcmp(a, "--max-body")) bad = cli_parse_long("serve", a, v, 1024, 1L << 30, &max_body);
    else if (!strcmp(a, "--drain-timeout")) bad = cli_parse_double("serve", a, v, 0, 3600, &drain_s);
    else if (!strcmp(a, "--drain-delay")) bad = cli_parse_double("serve", a, v, 0, 3600, &drain_delay_s);
    else if (!strcmp(a, "--replica-id")) replica_id = v;
    else if (!strcmp(a, "--prompt-cache-entries")) bad = parse_cache_entries(a, v, &cache_entries);
    else if (!strcmp(a, "--prompt-cache-bytes")) bad = parse_bytes(a, v, &cache_bytes);
    else if (!strcmp(a, "--prompt-cache-ttl")) bad = cli_parse_double("serve", a, v, 0.001, 1e9, &cache_ttl);
    else {
      fprintf(stderr, "power serve: unknown option %s (try --help)\n", a);
      return 2;
    }
    if (bad) return 2;
  }
  if (spec_opts_check("serve", &spec)) return 2;
  if (log_text) log_requests = 2;
  if (no_log) log_requests = 0;
  char err[PW_ERRMAX] = "";
  const char *path = cli_resolve_model(model, err, sizeof err);
  if (!path) {
    fprintf(stderr, "power serve: %s\n", err);
    return 1;
  }

  /* Shutdown signals: any thread may take them (the HTTP library sets its
   * own threads' masks), so the handler only writes the signal number to a
   * pipe the main thread waits on. */
  if (pipe(g_sig_pipe)) {
    fprintf(stderr, "power serve: cannot create a pipe\n");
    return 1;
  }
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  signal(SIGPIPE, SIG_IGN);

  engine_opts eo = {0};
  eo.model_path = path;
  /* A store name (the path is its blob): clients see the name. */
  char name[STORE_NAME_MAX + 1], e2[PW_ERRMAX];
  if (model && path != model && !store_name_check(model, name, e2)) eo.model_id = name;
  eo.n_threads = (int)threads;
  eo.max_active = (int)parallel;
  eo.max_queue = (int)queue;
  eo.n_ctx = (int)ctx;
  spec_opts_apply(&spec, &eo);
  eo.prompt_cache_entries = (int)cache_entries;
  eo.prompt_cache_bytes = cache_bytes;
  eo.prompt_cache_ttl_s = cache_ttl;
  engine *e = NULL;
  if (engine_create(&eo, &e, err)) {
    fprintf(stderr, "power serve: %s\n", err);
    return 1;
  }
  /* Hash the model before answering anything: every response carries the
   * identity (system_fingerprint), and /health is up only once it is known. */
  (void)engine_model_sha256(e);
  server_opts so = {0};
  so.host = host;
  so.port = (int)port;
  so.max_body = (size_t)max_body;
  so.request_timeout_s = timeout_s;
  so.api_key_file = key_file;
  so.api_keys = getenv("POWER_API_KEYS");
  so.spec_mode = engine_spec_name(spec.mode);
  so.log_requests = log_requests;
  so.replica_id = replica_id;
  so.receipt_key_path = receipt_key;
  server *s = NULL;
  if (server_start(&so, e, &s, err)) {
    fprintf(stderr, "power serve: %s\n", err);
    engine_destroy(e);
    return 1;
  }
  const char *fmt = strchr(host, ':') ? "power: serving %s on http://[%s]:%d\n" : "power: serving %s on http://%s:%d\n";
  fprintf(stderr, fmt, engine_model_id(e), host, server_port(s));
  if (spec.mode != ENGINE_SPEC_OFF)
    fprintf(stderr, "power: speculation %s%s%s\n", engine_spec_name(spec.mode), spec.draft_model ? " with draft " : "",
            spec.draft_model ? spec.draft_model : "");
  fflush(stderr);

  unsigned char sig = 0;
  while (read(g_sig_pipe[0], &sig, 1) < 0 && errno == EINTR) {
  }
  fprintf(stderr, "power: %s received, shutting down\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
  if (drain_delay_s > 0) {
    /* Still serving, but out of the balancer's pool once its health check
     * sees the 503; a second signal cuts the delay short. */
    server_drain_notice(s);
    fprintf(stderr, "power: draining: /health answers 503 for %.1f s before new connections are refused\n",
            drain_delay_s);
    fflush(stderr);
    uint64_t until = pw_now_ns() + (uint64_t)(drain_delay_s * 1e9);
    for (;;) {
      uint64_t now = pw_now_ns();
      if (now >= until) break;
      struct pollfd pf = {.fd = g_sig_pipe[0], .events = POLLIN};
      uint64_t left_ms = (until - now) / 1000000u + 1;
      int pr = poll(&pf, 1, left_ms > 1000 ? 1000 : (int)left_ms);
      if (pr > 0 && read(g_sig_pipe[0], &sig, 1) == 1) break;
    }
  }
  server_quiesce(s);
  /* The engine finishes what it has; then the HTTP side sends what is left
   * of those answers. Both within the same grace period. */
  uint64_t t0 = pw_now_ns();
  int grace_ms = (int)(drain_s * 1000);
  int rc = engine_drain(e, grace_ms);
  if (!rc) {
    int left = grace_ms - (int)((pw_now_ns() - t0) / 1000000u);
    rc = server_drain(s, left > 100 ? left : 100);
  }
  if (rc) fprintf(stderr, "power: requests still running after %.1f s are cancelled\n", drain_s);
  server_stop(s);
  engine_destroy(e);
  close(g_sig_pipe[0]);
  close(g_sig_pipe[1]);
  return 0;
}
