/* cmd_serve.c - `power serve`: loads a model into an engine and serves it
 * over HTTP (or, without --model and POWER_MODEL, serves the models of the
 * store, loaded on demand) until SIGTERM/SIGINT, then shuts down
 * gracefully: with
 * --drain-delay, first answer /health with 503 for that long while still
 * serving (a load balancer takes the replica out of its pool), then stop
 * accepting, let running requests finish (bounded), stop, exit 0.
 * Wiring only: the HTTP layer is src/server, the engine src/engine. */
#include "cli/cmd_serve.h"

#include "base/clock.h"
#include "base/error.h"
#include "base/log.h"
#include "cli/cli.h"
#include "cli/cli_gen.h"
#include "engine/engine.h"
#include "server/registry.h"
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
          "  --model M              serve one model: a store name or a GGUF path (also POWER_MODEL).\n"
          "                         Without it, serve every model of the store ($POWER_HOME,\n"
          "                         default ~/.power): the request's \"model\" picks one by its store\n"
          "                         name (or the name without its :tag when only one tag exists),\n"
          "                         loaded on its first request\n"
          "Serving the store:\n"
          "  --max-loaded N         models loaded at once, loads in progress included (default 1);\n"
          "                         the least recently used idle model is unloaded to make room\n"
          "  --mem-budget BYTES     bytes of weights + KV loaded at once (suffixes K, M, G; default\n"
          "                         no bound); before a load the file size is counted; a model\n"
          "                         larger than the budget streams its layers within it\n"
          "                         (with --model: that model's resident weights, see below)\n"
          "  --keep-alive DUR       how long an idle model stays loaded: seconds or a duration\n"
          "                         (5m, 1h30m); 0 = unload after each request; -1 = forever\n"
          "                         (default 5m); a request's keep_alive overrides it\n"
          "  --load-wait S          how long a request without a deadline waits for room or for\n"
          "                         its model's load before 503 with Retry-After (default 60)\n"
          "  --allow-pull           serve POST /api/pull, DELETE /api/delete and DELETE\n"
          "                         /v1/models/{id} (off by default: 403); API keys apply\n"
          "Options:\n"
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
          "  --prompt-cache-tenant-entries N  entries one API key may hold (default: no\n"
          "                         bound of its own within --prompt-cache-entries)\n"
          "  --prompt-cache-tenant-bytes BYTES  KV bytes one API key's entries may hold\n"
          "  --cors ORIGINS         answer browsers from these origins: '*' or a comma-separated\n"
          "                         list (https://app.example,...); off by default\n"
          "  --header-timeout S     a request's headers must arrive within S seconds (default 10)\n"
          "  --body-timeout S       a request's body must arrive within S seconds of its\n"
          "                         headers (default 60)\n"
          "  --max-connections N    open connections (default 256)\n"
          "  --max-per-client N     open connections per client address (default a quarter\n"
          "                         of --max-connections; behind a proxy, raise it)\n"
          "  --log-format F         text (default) or json: one object per line\n"
          "  --log-text, --log-content  put prompt and output text in the request log (also\n"
          "                         POWER_LOG=debug); never the prompt_cache_key\n"
          "  --receipt-key KEY.pem  sign every receipt with this Ed25519 key (power keygen)\n"
          "  --chat-template-file F  chat template (Jinja) used instead of the model's; its\n"
          "                         tool-call format is detected from it\n"
          "  --responses-max N      Responses-API answers kept for previous_response_id and\n"
          "                         GET /v1/responses/{id} (default 1024)\n"
          "  --responses-bytes BYTES  bytes those answers may hold (default 64M)\n"
          "  --no-request-log       no per-request line on stderr\n"
          "Environment: POWER_API_KEYS (comma-separated keys; set but blank is an error),\n"
          "POWER_LOG (error|warn|info|debug; anything else is an error),\n"
          "POWER_WEIGHTS_KEY_FILE (the key of an encrypted model).\n");
  cli_weights_usage(out);
  cli_kv_usage(out);
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
  const char *template_file = NULL;
  long max_loaded = 1;
  double keep_alive = 300, load_wait = 0;
  bool allow_pull = false;
  long port = 11434, threads = 2, parallel = 4, queue = 16, ctx = 0, max_body = (long)SERVER_DEFAULT_MAX_BODY;
  double timeout_s = 0, drain_s = SERVE_DRAIN_MS / 1000.0, drain_delay_s = 0;
  const char *replica_id = NULL;
  long cache_entries = 0;
  size_t cache_bytes = 0;
  double cache_ttl = 0;
  long tenant_entries = 0;
  size_t tenant_bytes = 0;
  long responses_max = 0;     /* 0 = the server default */
  size_t responses_bytes = 0; /* 0 = the server default */
  spec_opts spec = {0};
  cli_weights wts = {0};
  cli_kv kvt = {0};
  const char *lv = getenv("POWER_LOG");
  if (pw_log_check_env()) {
    fprintf(stderr, "power serve: POWER_LOG='%s' is not a level (error, warn, info or debug)\n", lv);
    return 2;
  }
  int log_requests = lv && !strcmp(lv, "debug") ? 2 : 1;
  bool log_text = false, no_log = false;
  const char *cors = NULL;
  double header_s = 0, body_s = 0;
  long max_conn = 0, per_client = 0;
  int log_json = 0;
  cli_seen seen = {0};
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
    if (!strcmp(a, "--allow-pull")) {
      allow_pull = true;
      continue;
    }
    int sc = spec_opts_parse("serve", &spec, a, v);
    if (!sc) sc = cli_weights_parse("serve", &wts, a, v);
    if (!sc) sc = cli_kv_parse("serve", &kvt, a, v);
    if (sc < 0) return 2;
    if (sc > 0) {
      i += sc == 1;
      continue;
    }
    if (!v) {
      fprintf(stderr, "power serve: unknown option or missing value: %s (try --help)\n", a);
      return 2;
    }
    i++;
    int bad = 0;
    const char *name = !strcmp(a, "-m") ? "--model" : !strcmp(a, "-t") ? "--threads"
                       : !strcmp(a, "--request-timeout") ? "--timeout" : a;
    static const char *const once[] = {"--model", "--host", "--port", "--threads", "--parallel", "--queue", "--ctx",
                                       "--api-key-file", "--timeout", "--max-body", "--drain-timeout",
                                       "--prompt-cache-entries", "--prompt-cache-bytes", "--prompt-cache-ttl",
                                       "--cors", "--header-timeout", "--body-timeout", "--max-connections",
                                       "--max-per-client", "--log-format", "--prompt-cache-tenant-entries",
                                       "--prompt-cache-tenant-bytes", "--receipt-key", "--responses-max",
                                       "--responses-bytes", "--max-loaded", "--keep-alive",
                                       "--load-wait"};
    for (size_t k = 0; k < sizeof once / sizeof once[0]; k++)
      if (!strcmp(name, once[k]) && cli_once("serve", &seen, once[k])) return 2;
    if (!strcmp(a, "--model") || !strcmp(a, "-m")) model = v;
    else if (!strcmp(a, "--host")) host = v;
    else if (!strcmp(a, "--port")) bad = cli_parse_long("serve", a, v, 0, 65535, &port);
    else if (!strcmp(a, "--threads") || !strcmp(a, "-t")) bad = cli_parse_long("serve", a, v, 1, 512, &threads);
    else if (!strcmp(a, "--parallel")) bad = cli_parse_long("serve", a, v, 1, 1024, &parallel);
    else if (!strcmp(a, "--queue")) bad = cli_parse_long("serve", a, v, 1, 1 << 20, &queue);
    else if (!strcmp(a, "--ctx")) bad = cli_parse_long("serve", a, v, 0, 1 << 24, &ctx);
    else if (!strcmp(a, "--api-key-file")) key_file = v;
    else if (!strcmp(a, "--receipt-key")) receipt_key = v;
    else if (!strcmp(a, "--chat-template-file")) template_file = v;
    else if (!strcmp(a, "--request-timeout") || !strcmp(a, "--timeout")) bad = cli_parse_double("serve", a, v, 0, 86400, &timeout_s);
    else if (!strcmp(a, "--max-body")) bad = cli_parse_long("serve", a, v, 1024, 1L << 30, &max_body);
    else if (!strcmp(a, "--drain-timeout")) bad = cli_parse_double("serve", a, v, 0, 3600, &drain_s);
    else if (!strcmp(a, "--drain-delay")) bad = cli_parse_double("serve", a, v, 0, 3600, &drain_delay_s);
    else if (!strcmp(a, "--replica-id")) replica_id = v;
    else if (!strcmp(a, "--prompt-cache-entries")) bad = parse_cache_entries(a, v, &cache_entries);
    else if (!strcmp(a, "--prompt-cache-bytes")) bad = parse_bytes(a, v, &cache_bytes);
    else if (!strcmp(a, "--prompt-cache-ttl")) bad = cli_parse_double("serve", a, v, 0.001, 1e9, &cache_ttl);
    else if (!strcmp(a, "--prompt-cache-tenant-entries")) bad = cli_parse_long("serve", a, v, 1, 4096, &tenant_entries);
    else if (!strcmp(a, "--prompt-cache-tenant-bytes")) bad = parse_bytes(a, v, &tenant_bytes);
    else if (!strcmp(a, "--responses-max")) bad = cli_parse_long("serve", a, v, 1, 1 << 20, &responses_max);
    else if (!strcmp(a, "--responses-bytes")) bad = parse_bytes(a, v, &responses_bytes);
    else if (!strcmp(a, "--cors")) cors = v;
    else if (!strcmp(a, "--max-loaded")) bad = cli_parse_long("serve", a, v, 1, 1024, &max_loaded);
    else if (!strcmp(a, "--load-wait")) bad = cli_parse_double("serve", a, v, 0.1, 86400, &load_wait);
    else if (!strcmp(a, "--keep-alive")) {
      if (registry_parse_keep_alive(v, &keep_alive)) {
        fprintf(stderr, "power serve: invalid value for --keep-alive: '%s' (seconds, or a duration such as 5m, "
                        "1h30m; 0 = unload when idle; -1 = forever)\n", v);
        bad = 1;
      }
    }
    else if (!strcmp(a, "--header-timeout")) bad = cli_parse_double("serve", a, v, 0.1, 3600, &header_s);
    else if (!strcmp(a, "--body-timeout")) bad = cli_parse_double("serve", a, v, 0.1, 86400, &body_s);
    else if (!strcmp(a, "--max-connections")) bad = cli_parse_long("serve", a, v, 1, 65536, &max_conn);
    else if (!strcmp(a, "--max-per-client")) bad = cli_parse_long("serve", a, v, 1, 65536, &per_client);
    else if (!strcmp(a, "--log-format")) {
      if (!strcmp(v, "json")) log_json = 1;
      else if (strcmp(v, "text")) {
        fprintf(stderr, "power serve: invalid value for --log-format: '%s' (text or json)\n", v);
        bad = 1;
      }
    }
    else {
      fprintf(stderr, "power serve: unknown option %s (try --help)\n", a);
      return 2;
    }
    if (bad) return 2;
  }
  if (spec_opts_check("serve", &spec) || cli_weights_finish("serve", &wts)) return 2;
  if (log_json) pw_log_set_format(PW_LOG_JSON);
  if (log_text) log_requests = 2;
  if (no_log) log_requests = 0;
  char err[PW_ERRMAX] = "";
  const char *env_model = getenv("POWER_MODEL");
  bool store_mode = !(model && *model) && !(env_model && *env_model);
  /* --mem-budget (parsed with the weights options) is one model's
   * resident weights with --model, and what the loaded models may hold
   * together when serving the store: there a model larger than the whole
   * budget streams its layers within it. */
  if (store_mode && wts.mem_budget_frac > 0) {
    fprintf(stderr, "power serve: --mem-budget as a share of the model needs --model; serving the store, give "
                    "bytes (suffixes K, M, G)\n");
    return 2;
  }
  uint64_t mem_budget = store_mode ? wts.mem_budget : 0;
  if (store_mode) wts.mem_budget = 0;
  bool store_flags = max_loaded != 1 || keep_alive != 300 || load_wait || allow_pull;
  if (!store_mode && store_flags) {
    fprintf(stderr, "power serve: --max-loaded, --keep-alive, --load-wait and --allow-pull apply "
                    "when serving the store (without --model and POWER_MODEL)\n");
    return 2;
  }
  if (store_mode && (template_file || spec.draft_model)) {
    fprintf(stderr, "power serve: %s applies to one model: give --model with it\n",
            template_file ? "--chat-template-file" : "a draft model");
    return 2;
  }
  const char *path = store_mode ? "" : cli_resolve_model(model, err, sizeof err);
  if (!path) {
    fprintf(stderr, "power serve: %s\n", err);
    return 1;
  }
  char *template_text = NULL;
  if (template_file) {
    size_t tl = 0;
    template_text = cli_slurp(template_file, 4L << 20, &tl, err);
    if (!template_text) {
      fprintf(stderr, "power serve: --chat-template-file: %s\n", err);
      return 1;
    }
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
  else if (!model && env_model && path != env_model && !store_name_check(env_model, name, e2)) eo.model_id = name;
  eo.n_threads = (int)threads;
  eo.max_active = (int)parallel;
  eo.max_queue = (int)queue;
  eo.n_ctx = (int)ctx;
  spec_opts_apply(&spec, &eo);
  cli_weights_apply(&wts, &eo);
  cli_kv_apply(&kvt, &eo);
  eo.prompt_cache_entries = (int)cache_entries;
  eo.prompt_cache_bytes = cache_bytes;
  eo.prompt_cache_ttl_s = cache_ttl;
  eo.prompt_cache_owner_entries = (int)tenant_entries;
  eo.prompt_cache_owner_bytes = tenant_bytes;
  engine *e = NULL;
  srv_models_opts mo = {0};
  if (store_mode) {
    mo.engine = &eo;
    mo.max_loaded = (int)max_loaded;
    mo.mem_budget = mem_budget;
    mo.keep_alive_s = keep_alive;
    mo.load_wait_s = load_wait;
    mo.allow_admin = allow_pull;
  } else {
    if (engine_create(&eo, &e, err)) {
      fprintf(stderr, "power serve: %s\n", err);
      return 1;
    }
    /* Hash the model before answering anything: every response carries the
     * identity (system_fingerprint), and /health is up only once it is known. */
    (void)engine_model_sha256(e);
  }
  server_opts so = {0};
  so.store = store_mode ? &mo : NULL;
  so.host = host;
  so.port = (int)port;
  so.max_body = (size_t)max_body;
  so.responses_max = (int)responses_max;
  so.responses_max_bytes = responses_bytes;
  so.request_timeout_s = timeout_s;
  so.api_key_file = key_file;
  so.api_keys = getenv("POWER_API_KEYS");
  so.spec_mode = engine_spec_name(spec.mode);
  so.log_requests = log_requests;
  so.log_json = log_json;
  so.cors_origins = cors;
  so.header_timeout_s = header_s;
  so.body_timeout_s = body_s;
  so.max_connections = (int)max_conn;
  so.max_per_client = (int)per_client;
  so.replica_id = replica_id;
  so.receipt_key_path = receipt_key;
  so.chat_template = template_text;
  server *s = NULL;
  int src = server_start(&so, e, &s, err);
  free(template_text); /* the server keeps its own copy */
  if (src) {
    fprintf(stderr, "power serve: %s\n", err);
    engine_destroy(e);
    return 1;
  }
  /* The bound port, also when --port 0 let the system pick one. */
  const char *fmt = strchr(host, ':') ? "serving %s on http://[%s]:%d" : "serving %s on http://%s:%d";
  char what[STORE_PATH_MAX + 64];
  if (store_mode) {
    char kas[32];
    if (keep_alive < 0) snprintf(kas, sizeof kas, "forever");
    else snprintf(kas, sizeof kas, "%gs", keep_alive);
    snprintf(what, sizeof what, "the store (max %ld loaded, keep-alive %s%s)", max_loaded, kas,
             allow_pull ? ", pull and delete allowed" : "");
  } else {
    snprintf(what, sizeof what, "%s", engine_model_id(e));
  }
  pw_log_notice(fmt, what, host, server_port(s));
  if (spec.mode != ENGINE_SPEC_OFF)
    pw_log_notice("speculation %s%s%s", engine_spec_name(spec.mode), spec.draft_model ? " with draft " : "",
                  spec.draft_model ? spec.draft_model : "");

  unsigned char sig = 0;
  while (read(g_sig_pipe[0], &sig, 1) < 0 && errno == EINTR) {
  }
  pw_log_notice("%s received, shutting down", sig == SIGINT ? "SIGINT" : "SIGTERM");
  if (drain_delay_s > 0) {
    /* Still serving, but out of the balancer's pool once its health check
     * sees the 503; a second signal cuts the delay short. */
    server_drain_notice(s);
    pw_log_notice("draining: /health answers 503 for %.1f s before new connections are refused", drain_delay_s);
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
  int rc = e ? engine_drain(e, grace_ms) : 0;
  if (!rc) {
    int left = grace_ms - (int)((pw_now_ns() - t0) / 1000000u);
    rc = server_drain(s, left > 100 ? left : 100);
  }
  if (rc) pw_log_notice("requests still running after %.1f s are cancelled", drain_s);
  server_stop(s);
  engine_destroy(e);
  close(g_sig_pipe[0]);
  close(g_sig_pipe[1]);
  return 0;
}
