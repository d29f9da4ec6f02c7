/* cmd_serve.c - `power serve`: loads a model into an engine and serves it
 * over HTTP until SIGTERM/SIGINT, then shuts down gracefully: stop
 * accepting, let running requests finish (bounded), stop, exit 0.
 * Wiring only: the HTTP layer is src/server, the engine src/engine. */
#include "cli/cmd_serve.h"

#include "base/clock.h"
#include "base/error.h"
#include "cli/cli.h"
#include "engine/engine.h"
#include "server/server.h"

#include <errno.h>
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
          "  --drain-timeout S      grace for requests in flight at shutdown (default 10)\n");
}

int cmd_serve(int argc, char **argv) {
  const char *model = NULL, *host = "127.0.0.1", *key_file = NULL;
  long port = 11434, threads = 2, parallel = 4, queue = 16, ctx = 0, max_body = (long)SERVER_DEFAULT_MAX_BODY;
  double timeout_s = 0, drain_s = SERVE_DRAIN_MS / 1000.0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      serve_usage(stdout);
      return 0;
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
    else if (!strcmp(a, "--request-timeout") || !strcmp(a, "--timeout")) bad = cli_parse_double("serve", a, v, 0, 86400, &timeout_s);
    else if (!strcmp(a, "--max-body")) bad = cli_parse_long("serve", a, v, 1024, 1L << 30, &max_body);
    else if (!strcmp(a, "--drain-timeout")) bad = cli_parse_double("serve", a, v, 0, 3600, &drain_s);
    else {
      fprintf(stderr, "power serve: unknown option %s (try --help)\n", a);
      return 2;
    }
    if (bad) return 2;
  }
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
  eo.n_threads = (int)threads;
  eo.max_active = (int)parallel;
  eo.max_queue = (int)queue;
  eo.n_ctx = (int)ctx;
  engine *e = NULL;
  if (engine_create(&eo, &e, err)) {
    fprintf(stderr, "power serve: %s\n", err);
    return 1;
  }
  server_opts so = {0};
  so.host = host;
  so.port = (int)port;
  so.max_body = (size_t)max_body;
  so.request_timeout_s = timeout_s;
  so.api_key_file = key_file;
  so.api_keys = getenv("POWER_API_KEYS");
  server *s = NULL;
  if (server_start(&so, e, &s, err)) {
    fprintf(stderr, "power serve: %s\n", err);
    engine_destroy(e);
    return 1;
  }
  const char *fmt = strchr(host, ':') ? "power: serving %s on http://[%s]:%d\n" : "power: serving %s on http://%s:%d\n";
  fprintf(stderr, fmt, engine_model_id(e), host, server_port(s));
  fflush(stderr);

  unsigned char sig = 0;
  while (read(g_sig_pipe[0], &sig, 1) < 0 && errno == EINTR) {
  }
  fprintf(stderr, "power: %s received, shutting down\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
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
