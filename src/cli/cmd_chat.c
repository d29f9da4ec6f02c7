/* cmd_chat.c - `power chat`: an interactive terminal chat.
 * The conversation is kept as messages and re-rendered through the model's
 * chat template each turn. Every turn carries the session's prefix-cache
 * key, so the engine reuses the KV of the conversation so far (the previous
 * prompt and reply) and evaluates only the new part; -v prints the cached
 * and evaluated counts. Ctrl-C interrupts a generation without quitting;
 * /reset starts over, /exit (or end of input) quits. */
#include "base/error.h"
#include "cli/cli.h"
#include "cli/cli_gen.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

static volatile sig_atomic_t g_interrupt;

static void on_sigint(int sig) {
  (void)sig;
  g_interrupt = 1;
}

static void chat_usage(FILE *out) {
  fprintf(out, "usage: power chat [--system S] [options]\n");
  gen_opts_usage(out);
  fprintf(out, "in the chat: /reset clears the conversation, /exit quits, Ctrl-C stops a reply\n");
}

/* Reads one line (without the newline) into a growing buffer. Returns
 * length, or -1 at end of input. An interrupted read returns -2. */
static long read_line(char **buf, size_t *cap) {
  size_t n = 0;
  for (;;) {
    if (n + 2 > *cap) {
      *cap = *cap ? *cap * 2 : 256;
      *buf = realloc(*buf, *cap);
    }
    char ch;
    ssize_t r = read(STDIN_FILENO, &ch, 1);
    if (r < 0 && errno == EINTR) return -2;
    if (r <= 0) {
      if (n == 0) return -1;
      break;
    }
    if (ch == '\n') break;
    (*buf)[n++] = ch;
    if (n > (1u << 20)) break; /* a 1 MiB line is plenty */
  }
  (*buf)[n] = 0;
  return (long)n;
}

int cmd_chat(int argc, char **argv) {
  gen_opts o;
  gen_opts_default(&o);
  o.sp.temperature = 0.7f;
  const char *system = NULL;
  for (int i = 1; i < argc; i++) {
    int c = gen_opts_parse("chat", &o, argc, argv, &i);
    if (c < 0) return 2;
    if (c) continue;
    if (!strcmp(argv[i], "--system") && i + 1 < argc) system = argv[++i];
    else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      chat_usage(stdout);
      return 0;
    } else {
      fprintf(stderr, "power chat: unknown option '%s' (see power chat --help)\n", argv[i]);
      return 2;
    }
  }
  if (gen_opts_check("chat", &o)) return 2;
  char err[PW_ERRMAX];
  if (pw_sampler_params_validate(&o.sp, err)) {
    fprintf(stderr, "power chat: %s\n", err);
    return 2;
  }
  gen_session s;
  if (gen_session_open("chat", &o, &s)) return 1;
  /* A fixed random key for this session's conversation. Without
   * randomness the key is still fixed for the session; reuse only needs it
   * to be stable. */
  if (getrandom(s.cache_key, sizeof s.cache_key, 0) != (ssize_t)sizeof s.cache_key)
    for (size_t i = 0; i < sizeof s.cache_key; i++) s.cache_key[i] = (uint8_t)(i * 131u + (unsigned)getpid());
  s.has_cache_key = true;
  if (!s.have_pb) {
    fprintf(stderr, "power chat: the model's chat template does not parse\n");
    gen_session_close(&s);
    return 1;
  }
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_sigint; /* no SA_RESTART: a blocked read returns EINTR */
  sigaction(SIGINT, &sa, NULL);
  bool tty = isatty(STDIN_FILENO);
  if (tty) fprintf(stderr, "power chat: %s (/reset, /exit; Ctrl-C stops a reply)\n", engine_model_id(s.eng));
  json_t *msgs = json_array();
  if (system) json_array_append_new(msgs, json_pack("{s:s,s:s}", "role", "system", "content", system));
  char *line = NULL;
  size_t cap = 0;
  int status = 0;
  for (;;) {
    if (tty) fprintf(stderr, "> ");
    g_interrupt = 0;
    long n = read_line(&line, &cap);
    if (n == -2) {
      fprintf(stderr, "\n(type /exit to quit)\n");
      continue;
    }
    if (n < 0 || !strcmp(line, "/exit") || !strcmp(line, "/quit")) break;
    if (!strcmp(line, "/reset")) {
      json_array_clear(msgs);
      if (system) json_array_append_new(msgs, json_pack("{s:s,s:s}", "role", "system", "content", system));
      fprintf(stderr, "(conversation cleared)\n");
      continue;
    }
    if (n == 0) continue;
    json_array_append_new(msgs, json_pack("{s:s,s:s}", "role", "user", "content", line));
    int32_t *prompt = NULL;
    int n_prompt = 0;
    prompt_error e;
    if (prompt_chat(&s.pb, msgs, NULL, &prompt, &n_prompt, &e)) {
      fprintf(stderr, "power chat: %s\n", e.message);
      json_array_remove(msgs, json_array_size(msgs) - 1);
      continue;
    }
    char *reply = NULL;
    engine_finish fin = ENGINE_FINISH_NONE;
    int rc = gen_stream("chat", &s, &o, prompt, n_prompt, false, false, &g_interrupt, NULL, &fin, &reply);
    free(prompt);
    printf("\n");
    fflush(stdout);
    if (rc == 0) {
      if (fin == ENGINE_FINISH_CANCEL) fprintf(stderr, "(interrupted)\n");
      json_array_append_new(msgs, json_pack("{s:s,s:s}", "role", "assistant", "content", reply ? reply : ""));
    } else {
      json_array_remove(msgs, json_array_size(msgs) - 1);
    }
    free(reply);
  }
  free(line);
  json_decref(msgs);
  gen_session_close(&s);
  return status;
}
