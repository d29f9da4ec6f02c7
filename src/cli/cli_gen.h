/* cli_gen.h - what `power run` and `power chat` share: engine setup from
 * common options, prompt building (text, chat messages, ids), and a
 * generation loop that streams text or ids to stdout. */
#ifndef PW_CLI_GEN_H
#define PW_CLI_GEN_H

#include "engine/engine.h"
#include "server/prompt.h"

#include <jansson.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>

typedef struct gen_opts {
  const char *model;
  long threads, n_ctx, n_predict;
  pw_sampler_params sp;
  bool seed_given;
  const char *stop[ENGINE_MAX_STOP];
  int n_stop;
  int verbose;
} gen_opts;

void gen_opts_default(gen_opts *o);
/* Consumes argv[*i] (and its value) when it is a common option. Returns 1
 * when consumed, 0 when not a common option, -1 on a bad value (message
 * printed). */
int gen_opts_parse(const char *cmd, gen_opts *o, int argc, char **argv, int *i);
void gen_opts_usage(FILE *out);

typedef struct gen_session {
  engine *eng;
  prompt_builder pb;
  bool have_pb;
} gen_session;

/* Starts an engine for one interactive/CLI user. Prints errors. */
int gen_session_open(const char *cmd, const gen_opts *o, gen_session *s);
void gen_session_close(gen_session *s);

/* Streams one generation. print_ids: ids space-separated, else text.
 * cancel (may be NULL) is polled; when set the request is cancelled.
 * Returns 0 or a negative status (message printed). *n_gen gets the count. */
int gen_stream(const char *cmd, gen_session *s, const gen_opts *o, const int32_t *prompt, int n_prompt,
               bool print_ids, bool ignore_eos, volatile sig_atomic_t *cancel, engine_usage *usage,
               engine_finish *finish, char **text_out);

#endif
