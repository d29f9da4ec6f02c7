/* cmd_run.c - `power run`: one generation on the command line.
 *   power run [--model M] --prompt-ids "1,2,3" -n 32   ids in, ids out
 *   power run [--model M] --prompt TEXT                 raw completion
 *   power run [--model M] --chat MESSAGE [--system S]   through the chat template
 * Text streams to stdout as it is generated (never invalid UTF-8); with
 * --prompt-ids only the generated ids are printed, space-separated.
 * Diagnostics go to stderr; exit 0 on success, non-zero with one line. */
#include "base/error.h"
#include "cli/cli.h"
#include "cli/cli_gen.h"
#include "tok/tok.h"

#include <stdlib.h>
#include <string.h>

#define RUN_MAX_PROMPT 1048576

static void run_usage(FILE *out) {
  fprintf(out, "usage: power run (--prompt-ids \"1,2,3\" | --prompt TEXT | --chat MESSAGE [--system S]) [options]\n");
  gen_opts_usage(out);
}

/* Parses "1,2,3" (commas and/or spaces) into ids. Returns count or -1. */
static int parse_ids(const char *s, int32_t *out, int cap) {
  int n = 0;
  while (*s) {
    while (*s == ',' || *s == ' ') s++;
    if (!*s) break;
    char *end;
    long v = strtol(s, &end, 10);
    if (end == s || v < 0 || v > 0x7fffffff || n >= cap) return -1;
    out[n++] = (int32_t)v;
    s = end;
    if (*s && *s != ',' && *s != ' ') return -1;
  }
  return n;
}

int cmd_run(int argc, char **argv) {
  gen_opts o;
  gen_opts_default(&o);
  const char *ids = NULL, *text = NULL, *chat = NULL, *system = NULL;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    int c = gen_opts_parse("run", &o, argc, argv, &i);
    if (c < 0) return 2;
    if (c) continue;
    const char **dst = !strcmp(a, "--prompt-ids") ? &ids
                       : !strcmp(a, "--prompt")   ? &text
                       : !strcmp(a, "--chat")     ? &chat
                       : !strcmp(a, "--system")   ? &system
                                                  : NULL;
    if (dst) {
      if (i + 1 >= argc) {
        fprintf(stderr, "power run: option %s needs a value\n", a);
        return 2;
      }
      *dst = argv[++i];
    } else if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      run_usage(stdout);
      return 0;
    } else {
      fprintf(stderr, "power run: unknown option '%s' (see power run --help)\n", a);
      return 2;
    }
  }
  if (gen_opts_check("run", &o)) return 2;
  if (!!ids + !!text + !!chat != 1) {
    fprintf(stderr, "power run: give exactly one of --prompt-ids, --prompt or --chat\n");
    return 2;
  }
  if (system && !chat) {
    fprintf(stderr, "power run: --system goes with --chat\n");
    return 2;
  }
  char err[PW_ERRMAX];
  if (pw_sampler_params_validate(&o.sp, err)) {
    fprintf(stderr, "power run: %s\n", err);
    return 2;
  }
  int32_t *prompt = NULL;
  int n_prompt = 0;
  if (ids) {
    prompt = malloc(RUN_MAX_PROMPT * sizeof *prompt);
    n_prompt = prompt ? parse_ids(ids, prompt, RUN_MAX_PROMPT) : -1;
    if (n_prompt <= 0) {
      fprintf(stderr, "power run: --prompt-ids must be a non-empty list of token ids like \"1,2,3\"\n");
      free(prompt);
      return 2;
    }
    if (o.n_predict < 0) o.n_predict = 32;
  }
  gen_session s;
  if (gen_session_open("run", &o, &s)) {
    free(prompt);
    return 1;
  }
  int status = 1;
  const tok_vocab *v = engine_vocab(s.eng);
  if (ids) {
    for (int i = 0; i < n_prompt; i++)
      if (prompt[i] >= tok_n_vocab(v)) {
        fprintf(stderr, "power run: prompt token %d is outside the vocabulary (%d tokens)\n", prompt[i],
                tok_n_vocab(v));
        goto done;
      }
  } else if (text) {
    /* Raw completion: BOS as the vocabulary says, special-token text kept
     * as text (as llama.cpp tokenized the reference prompts). */
    prompt_error e;
    if (prompt_tokenize(&s.pb, text, strlen(text), true, false, "prompt", &prompt, &n_prompt, &e)) {
      fprintf(stderr, "power run: %s\n", e.message);
      goto done;
    }
  } else {
    if (!s.have_pb) {
      fprintf(stderr, "power run: the model's chat template does not parse\n");
      goto done;
    }
    json_t *msgs = json_array();
    if (system) json_array_append_new(msgs, json_pack("{s:s,s:s}", "role", "system", "content", system));
    json_array_append_new(msgs, json_pack("{s:s,s:s}", "role", "user", "content", chat));
    prompt_error e;
    int rc = prompt_chat(&s.pb, msgs, NULL, &prompt, &n_prompt, &e);
    json_decref(msgs);
    if (rc) {
      fprintf(stderr, "power run: %s\n", e.message);
      goto done;
    }
  }
  engine_finish fin = ENGINE_FINISH_NONE;
  if (gen_stream("run", &s, &o, prompt, n_prompt, ids != NULL, ids != NULL, NULL, NULL, &fin, NULL) == 0) {
    printf("\n");
    status = 0;
  }
done:
  free(prompt);
  gen_session_close(&s);
  return status;
}
