/* cmd_chat.c - `power chat`: an interactive terminal chat.
 * The conversation is kept as messages and re-rendered through the model's
 * chat template each turn. Every turn carries the session's prefix-cache
 * key, so the engine reuses the KV of the conversation so far (the previous
 * prompt and reply) and evaluates only the new part; -v prints the cached
 * and evaluated counts. On a terminal the input line is edited with
 * line_edit (arrows, Ctrl-A/E, history, Ctrl-R); piped input is read as
 * lines. When the conversation outgrows the context, the oldest turns are
 * dropped (the system prompt stays) and the chat says so; a reply cut by
 * the context or the -n limit says which. Ctrl-C interrupts a generation
 * without quitting. Commands: /help, /reset, /system [TEXT], /save FILE,
 * /exit. Wiring only: prompts come from the chat layer, tokens from the
 * engine. */
#include "base/error.h"
#include "cli/cli.h"
#include "cli/cli_gen.h"
#include "cli/line_edit.h"

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

static const char k_commands[] =
    "  /help          this list\n"
    "  /reset         start the conversation over (the system prompt stays)\n"
    "  /system TEXT   set the system prompt (/system alone removes it)\n"
    "  /save FILE     write the conversation as JSON ({\"messages\": [...]})\n"
    "  /exit, /quit   leave (so does end of input)\n"
    "keys: arrows, Home/End, Ctrl-A/E, Ctrl-K/U/W, Up/Down for history, Ctrl-R to search it;\n"
    "Ctrl-C stops a reply.\n";

static void chat_usage(FILE *out) {
  fprintf(out, "usage: power chat [--system S] [options]\n");
  gen_opts_usage(out);
  fprintf(out, "in the chat:\n%s", k_commands);
}

/* Reads one line (without the newline) into a growing buffer. Returns
 * length, or -1 at end of input. An interrupted read returns -2. */
static long read_line(char **buf, size_t *cap) {
  size_t n = 0;
  for (;;) {
    if (n + 2 > *cap) {
      size_t nc = *cap ? *cap * 2 : 256;
      char *nb = realloc(*buf, nc);
      if (!nb) return -1;
      *buf = nb;
      *cap = nc;
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
    if (n > LE_MAX_LINE) break; /* a 1 MiB line is plenty */
  }
  (*buf)[n] = 0;
  return (long)n;
}

/* Messages whose first entry is the system prompt when there is one. */
static bool has_system(json_t *msgs) {
  json_t *m = json_array_get(msgs, 0);
  const char *r = m ? json_string_value(json_object_get(m, "role")) : NULL;
  return r && !strcmp(r, "system");
}

static void set_system(json_t *msgs, const char *text) {
  if (has_system(msgs)) json_array_remove(msgs, 0);
  if (text && *text) json_array_insert_new(msgs, 0, json_pack("{s:s,s:s}", "role", "system", "content", text));
}

/* Renders and tokenizes the conversation so that it leaves `room` tokens
 * of the context for the reply, dropping the oldest turns (never the
 * system prompt nor the newest message) until it does. *dropped counts the
 * messages removed. Returns 0, 1 when even the newest message alone does
 * not fit (it is removed again; a message was printed), or -1 on another
 * error (printed). */
static int fit_prompt(gen_session *s, json_t *msgs, int n_ctx, int room, int32_t **prompt, int *n_prompt,
                      int *dropped) {
  *dropped = 0;
  for (;;) {
    prompt_error e;
    *prompt = NULL;
    if (prompt_chat(&s->pb, msgs, NULL, prompt, n_prompt, &e)) {
      fprintf(stderr, "power chat: %s\n", e.message);
      return -1;
    }
    if (*n_prompt + room <= n_ctx) return 0;
    size_t first = has_system(msgs) ? 1 : 0;
    if (json_array_size(msgs) <= first + 1) {
      fprintf(stderr, "(this message is %d tokens with the template; the context holds %d, of which %d are kept for "
                      "the reply: shorten it, or start with a larger --ctx)\n",
              *n_prompt, n_ctx, room);
      free(*prompt);
      *prompt = NULL;
      return 1;
    }
    free(*prompt);
    /* a whole turn goes: the oldest message and the replies that followed
     * it, so the conversation still starts with a user message */
    json_array_remove(msgs, first);
    (*dropped)++;
    for (;;) {
      json_t *m = json_array_get(msgs, first);
      const char *r = m ? json_string_value(json_object_get(m, "role")) : NULL;
      if (!r || !strcmp(r, "user") || json_array_size(msgs) <= first + 1) break;
      json_array_remove(msgs, first);
      (*dropped)++;
    }
  }
}

/* Handles a /command. Returns 1 to leave the chat, 0 otherwise. */
static int command(const char *line, json_t *msgs, char **system) {
  if (!strcmp(line, "/exit") || !strcmp(line, "/quit")) return 1;
  if (!strcmp(line, "/help")) {
    fprintf(stderr, "%s", k_commands);
  } else if (!strcmp(line, "/reset")) {
    json_array_clear(msgs);
    set_system(msgs, *system);
    fprintf(stderr, "(conversation cleared%s)\n", *system ? "; the system prompt stays" : "");
  } else if (!strncmp(line, "/system", 7) && (line[7] == 0 || line[7] == ' ')) {
    const char *t = line + 7;
    while (*t == ' ') t++;
    free(*system);
    *system = *t ? strdup(t) : NULL;
    set_system(msgs, *system);
    fprintf(stderr, *system ? "(system prompt set)\n" : "(system prompt removed)\n");
  } else if (!strncmp(line, "/save", 5) && (line[5] == 0 || line[5] == ' ')) {
    const char *path = line + 5;
    while (*path == ' ') path++;
    if (!*path) {
      fprintf(stderr, "(/save needs a file name)\n");
      return 0;
    }
    json_t *doc = json_pack("{s:O}", "messages", msgs);
    int rc = doc ? json_dump_file(doc, path, JSON_INDENT(2) | JSON_PRESERVE_ORDER) : -1;
    json_decref(doc);
    if (rc) fprintf(stderr, "(cannot write %s: %s)\n", path, strerror(errno));
    else fprintf(stderr, "(saved %zu messages to %s)\n", json_array_size(msgs), path);
  } else {
    fprintf(stderr, "(unknown command '%s'; /help lists them)\n", line);
  }
  return 0;
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
  bool edit = tty && isatty(STDERR_FILENO);
  int n_ctx = engine_n_ctx(s.eng);
  /* room kept for the reply: the -n limit (up to half the context), else a
   * quarter of the context */
  int room = o.n_predict > 0 ? (int)(o.n_predict < n_ctx / 2 ? o.n_predict : n_ctx / 2) : n_ctx / 4;
  if (room < 1) room = 1;
  if (tty) fprintf(stderr, "power chat: %s, context %d tokens (/help for commands)\n", engine_model_id(s.eng), n_ctx);
  json_t *msgs = json_array();
  char *sys = system ? strdup(system) : NULL;
  set_system(msgs, sys);
  line_edit le;
  le_init(&le);
  char *line = NULL;
  size_t cap = 0;
  int status = 0;
  for (;;) {
    g_interrupt = 0;
    long n;
    if (edit) {
      int r = le_read_line(&le, STDIN_FILENO, STDERR_FILENO, "> ");
      if (r == LE_INTR) {
        fprintf(stderr, "(type /exit to quit)\n");
        continue;
      }
      if (r != LE_ACCEPT) break;
      le_history_add(&le, le.buf);
      line = le.buf;
      n = (long)le.len;
    } else {
      if (tty) fprintf(stderr, "> ");
      n = read_line(&line, &cap);
      if (n == -2) {
        fprintf(stderr, "\n(type /exit to quit)\n");
        continue;
      }
      if (n < 0) break;
    }
    if (n == 0) continue;
    if (line[0] == '/') {
      if (command(line, msgs, &sys)) break;
      continue;
    }
    json_array_append_new(msgs, json_pack("{s:s,s:s}", "role", "user", "content", line));
    int32_t *prompt = NULL;
    int n_prompt = 0, dropped = 0;
    int fr = fit_prompt(&s, msgs, n_ctx, room, &prompt, &n_prompt, &dropped);
    if (dropped)
      fprintf(stderr, "(the conversation outgrew the context of %d tokens: dropped the oldest %d message%s)\n", n_ctx,
              dropped, dropped == 1 ? "" : "s");
    if (fr) {
      json_array_remove(msgs, json_array_size(msgs) - 1);
      continue;
    }
    char *reply = NULL;
    engine_finish fin = ENGINE_FINISH_NONE;
    engine_usage u;
    memset(&u, 0, sizeof u);
    int rc = gen_stream("chat", &s, &o, prompt, n_prompt, false, false, &g_interrupt, &u, &fin, &reply);
    free(prompt);
    printf("\n");
    fflush(stdout);
    if (rc == 0) {
      if (fin == ENGINE_FINISH_CANCEL) fprintf(stderr, "(interrupted)\n");
      else if (fin == ENGINE_FINISH_LENGTH && o.n_predict > 0 && u.completion_tokens >= o.n_predict)
        fprintf(stderr, "(reply cut at the -n limit of %ld tokens)\n", o.n_predict);
      else if (fin == ENGINE_FINISH_LENGTH)
        fprintf(stderr, "(reply cut: the context of %d tokens is full; the next turn drops the oldest messages)\n",
                n_ctx);
      json_array_append_new(msgs, json_pack("{s:s,s:s}", "role", "assistant", "content", reply ? reply : ""));
    } else {
      json_array_remove(msgs, json_array_size(msgs) - 1);
    }
    free(reply);
  }
  if (edit) line = NULL; /* le owns it */
  le_free(&le);
  free(sys);
  free(line);
  json_decref(msgs);
  gen_session_close(&s);
  return status;
}
