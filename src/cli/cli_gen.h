/* cli_gen.h - what `power run` and `power chat` share: engine setup from
 * common options, prompt building (text, chat messages, ids), and a
 * generation loop that streams text or ids to stdout. */
#ifndef PW_CLI_GEN_H
#define PW_CLI_GEN_H

#include "cli/cli.h"
#include "engine/engine.h"
#include "weights/weights.h"
#include "chat/prompt.h"

#include <jansson.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>

/* Speculative decoding options shared by serve, run and chat:
 *   --spec off|prompt-lookup|ngram|draft  --spec-draft-model M  --spec-draft-max K
 * A bad value is an error before anything loads; never a silent fallback. */
typedef struct spec_opts {
  int mode;                /* engine_spec_mode */
  const char *draft_model; /* borrowed from argv; NULL = none */
  long draft_max;          /* 0 = the engine's default */
  int policy;              /* engine_spec_policy */
  unsigned given;          /* options seen (bits in option order): each may appear once */
} spec_opts;

/* Returns 1 when a (with its value v, which may be NULL) is a speculation
 * option and was consumed, 0 when it is not one, -1 on a bad or missing
 * value (one line printed as "power <cmd>: ..."). */
int spec_opts_parse(const char *cmd, spec_opts *s, const char *a, const char *v);
/* Checks the combination after all options: draft needs a draft model, a
 * draft model needs --spec draft. 0, or -1 with one line printed. */
int spec_opts_check(const char *cmd, const spec_opts *s);
void spec_opts_apply(const spec_opts *s, engine_opts *eo);
void spec_opts_usage(FILE *out);

/* Where weights come from, shared by every command that loads a model:
 *   --weights-io mmap|pread|direct   read strategy (default mmap)
 *   --weights-key-file K             key of an encrypted container (.pwe);
 *                                    else $POWER_WEIGHTS_KEY_FILE
 * The option takes a file name only, so the key never reaches argv. */
typedef struct cli_weights {
  int io;               /* weights_io */
  const char *key_file; /* borrowed from argv or the environment; NULL = plain */
  uint64_t mem_budget;  /* --mem-budget B: bytes, or */
  double mem_budget_frac; /* --mem-budget P%: share of the file */
  int residency;        /* --residency lru|lfru */
  bool residency_given;
  bool mlock, hugepages;
  /* host controls of the process, applied by cli_weights_finish before
   * any thread starts, so the kernel pool's threads inherit them */
  const char *cpu_affinity; /* --cpu-affinity LIST ("0-3,6"); NULL = all */
  int priority;             /* --priority N: nice value, -20..19 */
  bool priority_given;
} cli_weights;

/* True for the options of cli_weights that take no value (--mlock,
 * --hugepages): cli_weights_parse returns 2 for them. */
bool cli_weights_is_flag(const char *a);

/* As spec_opts_parse: 1 consumed (with its value), 2 consumed (a flag,
 * no value), 0 not ours, -1 bad. */
int cli_weights_parse(const char *cmd, cli_weights *w, const char *a, const char *v);
/* After all options: takes $POWER_WEIGHTS_KEY_FILE when no key file was
 * given. 0, or -1 with one line printed. */
int cli_weights_finish(const char *cmd, cli_weights *w);
void cli_weights_apply(const cli_weights *w, engine_opts *eo);
/* The same for a model loaded directly (model_opts.weights). */
void cli_weights_model_opts(const cli_weights *w, weights_opts *wo);
void cli_weights_usage(FILE *out);

/* KV cache types, shared by run, chat, serve and bench (llama.cpp's
 * -ctk/-ctv): --kv-type T sets K and V, --kv-type-k T / --kv-type-v T one
 * of them (and win over --kv-type); T is f16 (default), q8_0 or q4_0. */
typedef struct cli_kv {
  uint32_t both, k, v; /* model_kv_type_parse ids; 0 = not given */
  unsigned given;
  bool swa_full; /* --swa-full */
} cli_kv;

/* As spec_opts_parse: 1 consumed (with its value), 2 consumed (a flag
 * without one: --swa-full), 0 not ours, -1 bad. */
int cli_kv_parse(const char *cmd, cli_kv *kv, const char *a, const char *v);
/* The K and V types chosen (0 = F16). */
uint32_t cli_kv_k(const cli_kv *kv);
uint32_t cli_kv_v(const cli_kv *kv);
void cli_kv_apply(const cli_kv *kv, engine_opts *eo);
void cli_kv_usage(FILE *out);

typedef struct gen_opts {
  cli_seen seen; /* single-valued options given so far */
  const char *model;
  spec_opts spec;
  cli_weights weights;
  cli_kv kv;
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
/* Checks option combinations after parsing and takes defaults from the
 * environment. 0, or -1 with one line printed. */
int gen_opts_check(const char *cmd, gen_opts *o);

typedef struct gen_session {
  engine *eng;
  prompt_builder pb;
  bool have_pb;
  /* Prefix reuse across generations (power chat): when set, every request
   * carries this key, so each one evaluates only what differs from the
   * previous prompt and output. A random per-session value: the CLI is its
   * engine's only tenant, so no scoping is needed. */
  bool has_cache_key;
  uint8_t cache_key[32];
  /* When set (borrowed), gen_stream feeds the generation's receipt: the
   * decoding settings at submit, each token and its text, the usage. */
  struct ev_gen *rec;
} gen_session;

/* Starts an engine for one interactive/CLI user. Prints errors. */
int gen_session_open(const char *cmd, const gen_opts *o, gen_session *s);
void gen_session_close(gen_session *s);

/* Streams one generation. print_ids: ids space-separated, else text.
 * cancel (may be NULL) is polled; when set the request is cancelled.
 * Returns 0 or a negative status (message printed). With o->verbose, a
 * timing line on stderr names the prompt tokens reused from the prefix
 * cache and evaluated, and the speculation counters when it is on. */
int gen_stream(const char *cmd, gen_session *s, const gen_opts *o, const int32_t *prompt, int n_prompt,
               bool print_ids, bool ignore_eos, volatile sig_atomic_t *cancel, engine_usage *usage,
               engine_finish *finish, char **text_out);

#endif
