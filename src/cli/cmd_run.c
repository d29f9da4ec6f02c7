/* cmd_run.c - `power run`: one generation on the command line.
 *   power run --model M --prompt-ids "1,2,3" -n 32 [--temperature T] [--seed S]
 * prints the generated token ids, space-separated, on stdout; diagnostics go
 * to stderr. */
#include "base/clock.h"
#include "base/error.h"
#include "cli/cli.h"
#include "model/model.h"
#include "sample/sample.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RUN_MAX_PROMPT 65536

typedef struct run_opts {
  const char *model;
  const char *prompt_ids;
  long n_predict;
  long threads;
  long n_ctx;
  int verbose;
  pw_sampler_params sp;
} run_opts;

static void run_usage(FILE *out) {
  fprintf(out,
          "usage: power run [--model M] --prompt-ids \"1,2,3\" [-n N] [options]\n"
          "  -n, --n-predict N     tokens to generate (default 32)\n"
          "  --temperature T       0 = greedy (default 0)\n"
          "  --top-k K, --top-p P, --min-p P, --repeat-penalty R, --seed S\n"
          "  --threads N           kernel threads (default 2)\n"
          "  --ctx N               context size (default: model's, at most 4096)\n"
          "  -v, --verbose         timing on stderr\n");
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
  run_opts o = {0};
  o.n_predict = 32;
  o.threads = 2;
  pw_sampler_params_default(&o.sp);
  o.sp.temperature = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    double d;
    long l;
#define NEED_V                                                              \
  if (!v) {                                                                 \
    fprintf(stderr, "power run: option %s needs a value\n", a);             \
    return 2;                                                               \
  }                                                                         \
  i++;
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      run_usage(stdout);
      return 0;
    } else if (!strcmp(a, "--model") || !strcmp(a, "-m")) {
      NEED_V o.model = v;
    } else if (!strcmp(a, "--prompt-ids")) {
      NEED_V o.prompt_ids = v;
    } else if (!strcmp(a, "-n") || !strcmp(a, "--n-predict")) {
      NEED_V if (cli_parse_long("run", a, v, 0, 1 << 20, &o.n_predict)) return 2;
    } else if (!strcmp(a, "--threads") || !strcmp(a, "-t")) {
      NEED_V if (cli_parse_long("run", a, v, 1, 256, &o.threads)) return 2;
    } else if (!strcmp(a, "--ctx")) {
      NEED_V if (cli_parse_long("run", a, v, 16, 1 << 20, &o.n_ctx)) return 2;
    } else if (!strcmp(a, "--temperature") || !strcmp(a, "--temp")) {
      NEED_V if (cli_parse_double("run", a, v, 0, 100, &d)) return 2;
      o.sp.temperature = (float)d;
    } else if (!strcmp(a, "--top-k")) {
      NEED_V if (cli_parse_long("run", a, v, 0, 1 << 24, &l)) return 2;
      o.sp.top_k = (int32_t)l;
    } else if (!strcmp(a, "--top-p")) {
      NEED_V if (cli_parse_double("run", a, v, 0, 1, &d)) return 2;
      o.sp.top_p = (float)d;
    } else if (!strcmp(a, "--min-p")) {
      NEED_V if (cli_parse_double("run", a, v, 0, 1, &d)) return 2;
      o.sp.min_p = (float)d;
    } else if (!strcmp(a, "--repeat-penalty")) {
      NEED_V if (cli_parse_double("run", a, v, 0.01, 100, &d)) return 2;
      o.sp.repeat_penalty = (float)d;
    } else if (!strcmp(a, "--seed")) {
      NEED_V char *end;
      o.sp.seed = strtoull(v, &end, 10);
      if (!*v || *end) {
        fprintf(stderr, "power run: invalid value for --seed: '%s'\n", v);
        return 2;
      }
    } else if (!strcmp(a, "-v") || !strcmp(a, "--verbose")) {
      o.verbose = 1;
    } else {
      fprintf(stderr, "power run: unknown option '%s' (see power run --help)\n", a);
      return 2;
    }
#undef NEED_V
  }
  char err[PW_ERRMAX];
  if (!o.prompt_ids) {
    fprintf(stderr, "power run: give a prompt with --prompt-ids \"1,2,3\"\n");
    return 2;
  }
  if (pw_sampler_params_validate(&o.sp, err)) {
    fprintf(stderr, "power run: %s\n", err);
    return 2;
  }
  int32_t *prompt = malloc(RUN_MAX_PROMPT * sizeof *prompt);
  int n_prompt = prompt ? parse_ids(o.prompt_ids, prompt, RUN_MAX_PROMPT) : -1;
  if (n_prompt <= 0) {
    fprintf(stderr, "power run: --prompt-ids must be a non-empty list of token ids like \"1,2,3\"\n");
    free(prompt);
    return 2;
  }
  const char *path = cli_resolve_model(o.model, err, sizeof err);
  if (!path) {
    fprintf(stderr, "power run: %s\n", err);
    free(prompt);
    return 1;
  }
  int status = 1;
  model *m = NULL;
  model_kv *kv = NULL;
  model_ctx *ctx = NULL;
  pw_sampler *smp = NULL;
  float *logits = NULL;
  model_entry *batch = NULL;
  double t0 = pw_now_s();
  model_opts mo = {(int)o.threads};
  if (model_load(path, &mo, &m, err)) {
    fprintf(stderr, "power run: %s: %s\n", path, err);
    goto done;
  }
  const model_hparams *hp = model_hp(m);
  for (int i = 0; i < n_prompt; i++)
    if (prompt[i] >= hp->n_vocab) {
      fprintf(stderr, "power run: prompt token %d is outside the vocabulary (%d tokens)\n", prompt[i], hp->n_vocab);
      goto done;
    }
  int n_ctx = o.n_ctx ? (int)o.n_ctx : (hp->n_ctx_train < 4096 ? hp->n_ctx_train : 4096);
  if (n_prompt + o.n_predict > n_ctx) {
    fprintf(stderr, "power run: prompt (%d tokens) + %ld to generate exceeds the context of %d\n", n_prompt,
            o.n_predict, n_ctx);
    goto done;
  }
  int max_batch = n_prompt < 512 ? n_prompt : 512;
  if (model_kv_create(m, 1, n_ctx, &kv, err) || model_ctx_create(m, max_batch, n_ctx, &ctx, err)) {
    fprintf(stderr, "power run: %s\n", err);
    goto done;
  }
  smp = pw_sampler_create(&o.sp, hp->n_vocab, err);
  logits = malloc((size_t)hp->n_vocab * sizeof(float));
  batch = malloc((size_t)max_batch * sizeof *batch);
  if (!smp || !logits || !batch) {
    fprintf(stderr, "power run: %s\n", smp ? "out of memory" : err);
    goto done;
  }
  double t1 = pw_now_s();
  for (int i = 0; i < n_prompt; i += max_batch) {
    int nb = n_prompt - i < max_batch ? n_prompt - i : max_batch;
    for (int j = 0; j < nb; j++) {
      batch[j] = (model_entry){0, i + j, prompt[i + j], i + j == n_prompt - 1};
      pw_sampler_accept(smp, prompt[i + j]);
    }
    if (model_forward(ctx, kv, batch, nb, logits, NULL, err)) {
      fprintf(stderr, "power run: %s\n", err);
      goto done;
    }
  }
  double t2 = pw_now_s();
  int pos = n_prompt;
  for (long g = 0; g < o.n_predict; g++) {
    int32_t tok = pw_sampler_sample(smp, logits);
    pw_sampler_accept(smp, tok);
    printf(g ? " %d" : "%d", tok);
    fflush(stdout);
    if (g + 1 == o.n_predict) break;
    model_entry en = {0, pos++, tok, true};
    if (model_forward(ctx, kv, &en, 1, logits, NULL, err)) {
      fprintf(stderr, "\npower run: %s\n", err);
      goto done;
    }
  }
  printf("\n");
  double t3 = pw_now_s();
  if (o.verbose)
    fprintf(stderr, "power run: load %.3f s, prompt %d tokens in %.3f s, %ld generated in %.3f s (%.1f tok/s)\n",
            t1 - t0, n_prompt, t2 - t1, o.n_predict, t3 - t2, o.n_predict > 1 ? (o.n_predict - 1) / (t3 - t2) : 0.0);
  status = 0;
done:
  free(batch);
  free(logits);
  pw_sampler_destroy(smp);
  model_ctx_destroy(ctx);
  model_kv_destroy(kv);
  model_destroy(m);
  free(prompt);
  return status;
}
