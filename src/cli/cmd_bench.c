/* cmd_bench.c - `power bench`: throughput of the forward pass, measured the
 * way llama-bench measures it, so the figures can be set beside llama.cpp's.
 *
 *   power bench [--model M] [-p 512] [-n 128] [-r 5] [--threads N]
 *               [--depth D] [--batch B] [--seed S] [-o md|json]
 *               [--spec MODE [--spec-draft-model M] [--spec-draft-max K]
 *                [--prompt-file F]]
 *   power bench --bandwidth [--bandwidth-mib 1024] [--threads N] [-o md|json]
 *   power bench --cold [--model M] [--weights-io S] [--weights-key-file K]
 *               [-r N] [--threads N] [-o md|json]
 *
 * pp  prompt processing: p seeded random token ids from an empty cache (with
 *     --depth D, after D cached tokens: prefill at that context), in batches
 *     of up to 512, logits only for the last one.
 * tg  generation: after a one-token prompt, n single-token steps with logits
 *     at every step and the argmax fed back; with --depth D, after D cached
 *     tokens instead (filled once, untimed: decode speed at that context).
 * batch_tg (with --batch B): B sequences decoding together, one step = one
 *     batch of B entries (one per sequence), logits for all; the aggregate
 *     rate and its ratio to tg.
 * tg_spec (with --spec MODE): generation through the engine, n tokens,
 *     greedy, from F's text (--prompt-file) or else from p (at least 64)
 *     seeded random ids: the same request without speculation and with it,
 *     in alternating order; decode tok/s after the first token (from the
 *     engine's event times, as power ab), their ratio, tokens per target
 *     pass and acceptance.
 *     Every run must give the same tokens (exit status 1 otherwise).
 * Each figure is timed r times after one uncounted warm-up; medians, min and
 * max are reported in tokens per second. Only model_forward is timed: the
 * argmax between steps (a scan of n_vocab floats) is outside the clock, as
 * llama.cpp's own eval timings leave its sampling out.
 *
 * --grammar FILE (a GBNF grammar, or a JSON Schema when FILE ends in .json):
 *     generation through the engine, n tokens from 64 seeded random ids,
 *     sampled (temperature 1, the repetition's seed) without and with the
 *     grammar, in alternating order; decode tok/s after the first token,
 *     their ratio, and the time to mask the logits for one token (the
 *     grammar matcher over the engine's vocabulary, replaying the
 *     constrained runs' tokens from a fresh matcher as each request starts
 *     one): median and 90th percentile over every step.
 *
 * --bandwidth is a STREAM-like read probe: every kernel thread sums its
 * share of a large buffer, several passes, and the best and median pass are
 * reported in GB/s (1e9 bytes). Decode reads every weight matrix once per
 * token, so bandwidth / weight_bytes_per_token bounds single-sequence tg.
 *
 * --cold times a cold start per read strategy (weights.h): the file's clean
 * page cache is dropped (POSIX_FADV_DONTNEED; pages another process maps
 * stay, and mincore shows how many), then the model is loaded and one token
 * is evaluated from an empty cache; load time, first-token time (from the
 * start of the load) and the bytes cached before the load are reported,
 * median over r runs, and for an encrypted model the decryption rate.
 *
 * Not here: server load tests, kernel microbenchmarks (bench/), comparison
 * with other engines (bench/vs-llamacpp drives this command). */
#include "cli/cmd_bench.h"

#include "base/clock.h"
#include "base/error.h"
#include "base/membw.h"
#include "base/mem.h"
#include "base/pool.h"
#include "base/rng.h"
#include "cli/cli.h"
#include "cli/cli_gen.h"
#include "engine/engine.h"
#include "gguf/gguf.h"
#include "grammar/grammar.h"
#include "tok/tok.h"
#include "model/model.h"
#include "tensor/dtype.h"
#include "tensor/ops.h"
#include "tensor/traits.h"
#include "weights/weights.h"

#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


#define BENCH_MAX_CHUNK 512 /* prompt tokens per forward call, as llama.cpp's default n_ubatch */
#define BENCH_MAX_REPS 1000
#define BENCH_BW_PASSES 7

typedef struct bench_opts {
  const char *model;
  long p, n, r, threads, batch, bw_mib, depth;
  unsigned long long seed;
  int json;
  int bandwidth;
  spec_opts spec;
  const char *prompt_file;
  const char *grammar_file;
  cli_weights weights;
  cli_kv kv;
  bool io_given; /* --weights-io: --cold measures only that strategy */
  int cold;
} bench_opts;

/* One figure over r repetitions: tokens per second per repetition. */
typedef struct bench_series {
  double *v; /* [r] */
  int n;
  double med, min, max;
} bench_series;

static void bench_usage(FILE *out) {
  fprintf(out,
          "usage: power bench [--model M] [options]\n"
          "       power bench --bandwidth [--bandwidth-mib N] [--threads N]\n"
          "  -p, --n-prompt N      prompt tokens for pp (default 512; 0 = skip)\n"
          "  -n, --n-gen N         generated tokens for tg (default 128; 0 = skip)\n"
          "  -r, --repetitions N   timed repetitions after one warm-up (default 5)\n"
          "  -t, --threads N       kernel threads (default " CLI_STR(ENGINE_DEFAULT_THREADS) ")\n"
          "  -d, --depth D         tokens already in the cache before pp and tg (default 0)\n"
          "  -b, --batch B         also decode B sequences together (batch_tg)\n"
          "  --seed S              seed of the random token ids (default 1)\n"
          "  -o, --output FMT      md (default) or json (one object)\n"
          "  --bandwidth           measure memory read bandwidth instead\n"
          "  --bandwidth-mib N     probe buffer size (default 1024)\n"
          "  --prompt-file F       --spec: generate from this text (default: random ids)\n"
          "  --grammar FILE        constrained vs free decoding and the mask time per token\n"
          "                        (FILE: GBNF, or a JSON Schema when it ends in .json)\n"
          "  --cold                cold start instead: per read strategy (all three, or the\n"
          "                        --weights-io one), drop the file's page cache, check with\n"
          "                        mincore that it is gone, time the load and the first token\n");
  cli_weights_usage(out);
  cli_kv_usage(out);
  spec_opts_usage(out);
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static void series_finish(bench_series *s) {
  if (s->n <= 0) return;
  double tmp[BENCH_MAX_REPS];
  memcpy(tmp, s->v, (size_t)s->n * sizeof *tmp);
  qsort(tmp, (size_t)s->n, sizeof *tmp, cmp_double);
  s->min = tmp[0];
  s->max = tmp[s->n - 1];
  s->med = s->n % 2 ? tmp[s->n / 2] : 0.5 * (tmp[s->n / 2 - 1] + tmp[s->n / 2]);
}

/* the next token between timed steps, with the vector argmax the greedy
 * sampler uses: a scalar pass over a 152K vocabulary took long enough for
 * the pool's workers to stop spinning and sleep, so the next step's first
 * matmul paid a futex wake-up that real decoding does not */
static int32_t argmax(const float *x, int n) { return (int32_t)pw_argmax_f32(x, n); }

static int run_bandwidth(const bench_opts *o) {
  pw_membw_result r;
  char err[PW_ERRMAX];
  if (pw_membw_probe((int)o->threads, (size_t)o->bw_mib, BENCH_BW_PASSES, &r, err)) {
    fprintf(stderr, "power bench: %s\n", err);
    return 1;
  }
  double *gbs = r.gbs;
  uint64_t check = r.checksum;
  bench_series s = {gbs, BENCH_BW_PASSES, 0, 0, 0};
  series_finish(&s);
  /* The probe returns the sum of what it read (so the reads stay); JSON
   * reports it, the table does not print it as a stray stderr line. */
  if (o->json) {
    json_t *arr = json_array();
    for (int k = 0; k < BENCH_BW_PASSES; k++) json_array_append_new(arr, json_real(gbs[k]));
    json_t *root = json_pack("{s:s, s:I, s:I, s:f, s:f, s:f, s:o, s:s, s:I}", "test", "read_bandwidth", "mib",
                             (json_int_t)o->bw_mib, "threads", (json_int_t)o->threads, "bandwidth_gbs", s.max,
                             "bandwidth_median_gbs", s.med, "bandwidth_min_gbs", s.min, "passes_gbs", arr, "kernel",
                             r.kernel, "checksum", (json_int_t)(check & 0x7fffffff));
    char *txt = root ? json_dumps(root, JSON_COMPACT | JSON_REAL_PRECISION(8)) : NULL;
    if (txt) printf("%s\n", txt);
    free(txt);
    json_decref(root);
  } else {
    printf("| test | MiB | threads | best GB/s | median GB/s | min GB/s |\n");
    printf("| --- | ---: | ---: | ---: | ---: | ---: |\n");
    printf("| read bandwidth (%s) | %ld | %ld | %.2f | %.2f | %.2f |\n", r.kernel, o->bw_mib, o->threads, s.max, s.med,
           s.min);
  }
  return 0;
}

/* ---- model benchmark ---- */

typedef struct bench_run {
  const bench_opts *o;
  model *m;
  const model_hparams *hp;
  model_kv *kv;  /* 1 sequence */
  model_ctx *ctx;
  model_kv *kvb; /* o->batch sequences */
  void *depth_snap; /* recurrent models: tg's sequence state after its depth tokens */
  model_ctx *ctxb;
  model_entry *entries; /* [max(chunk, batch)] */
  int32_t *tokens;      /* [max(p, batch)] */
  float *logits;        /* [max(1, batch)][n_vocab] */
  pw_rng rng;
  char err[PW_ERRMAX];
} bench_run;

static void fill_tokens(bench_run *b, int n) {
  for (int i = 0; i < n; i++) b->tokens[i] = (int32_t)(pw_rng_next(&b->rng) % (uint64_t)b->hp->n_vocab);
}

/* A prompt of p tokens; at depth d > 0 it follows tg's d cached tokens in
 * sequence 1 (so each chunk attends to the prefix), else it starts
 * sequence 0. Returns tok/s or -1. */
static double bench_pp(bench_run *b, int p) {
  const int d = (int)b->o->depth, seq = d > 0 ? 1 : 0;
  fill_tokens(b, p);
  if (d > 0 && b->depth_snap) {
    if (model_kv_state_restore(b->kv, 1, b->depth_snap, b->err)) return -1;
  } else {
    model_kv_truncate(b->kv, seq, d);
  }
  double t = 0;
  for (int i = 0; i < p; i += BENCH_MAX_CHUNK) {
    int nb = p - i < BENCH_MAX_CHUNK ? p - i : BENCH_MAX_CHUNK;
    for (int j = 0; j < nb; j++) b->entries[j] = (model_entry){seq, d + i + j, b->tokens[i + j], i + j == p - 1};
    double t0 = pw_now_s();
    if (model_forward(b->ctx, b->kv, b->entries, nb, b->logits, NULL, b->err)) return -1;
    t += pw_now_s() - t0;
  }
  return p / t;
}

/* The depth tokens of tg's sequence (1), once, in prompt-sized batches. */
static int bench_fill_depth(bench_run *b, int d) {
  fill_tokens(b, d);
  model_kv_truncate(b->kv, 1, 0);
  for (int i = 0; i < d; i += BENCH_MAX_CHUNK) {
    int nb = d - i < BENCH_MAX_CHUNK ? d - i : BENCH_MAX_CHUNK;
    for (int j = 0; j < nb; j++) b->entries[j] = (model_entry){1, i + j, b->tokens[i + j], i + j == d - 1};
    if (model_forward(b->ctx, b->kv, b->entries, nb, b->logits, NULL, b->err)) return -1;
  }
  /* a recurrent state or a sliding-window ring cannot be cut back to the
   * depth: keep a copy */
  if (model_kv_state_bytes(b->kv)) {
    if (!b->depth_snap) b->depth_snap = malloc(model_kv_state_bytes(b->kv));
    if (!b->depth_snap) return -1;
    model_kv_state_save(b->kv, 1, b->depth_snap);
  }
  return 0;
}

/* Generation of n tokens after a one-token prompt, in sequence 1 after its
 * depth tokens; returns tok/s or -1. */
static double bench_tg(bench_run *b, int n) {
  const int d = (int)b->o->depth;
  fill_tokens(b, 1);
  if (b->depth_snap) {
    if (model_kv_state_restore(b->kv, 1, b->depth_snap, b->err)) return -1;
  } else {
    model_kv_truncate(b->kv, 1, d);
  }
  model_entry e = {1, d, b->tokens[0], true};
  if (model_forward(b->ctx, b->kv, &e, 1, b->logits, NULL, b->err)) return -1;
  double t = 0;
  for (int i = 0; i < n; i++) {
    e = (model_entry){1, d + i + 1, argmax(b->logits, b->hp->n_vocab), true};
    double t0 = pw_now_s();
    if (model_forward(b->ctx, b->kv, &e, 1, b->logits, NULL, b->err)) return -1;
    t += pw_now_s() - t0;
  }
  return n / t;
}

/* B sequences decoding n steps together; returns aggregate tok/s or -1. */
static double bench_batch_tg(bench_run *b, int n) {
  int nb = (int)b->o->batch;
  int nv = b->hp->n_vocab;
  fill_tokens(b, nb);
  for (int s = 0; s < nb; s++) {
    model_kv_truncate(b->kvb, s, 0);
    b->entries[s] = (model_entry){s, 0, b->tokens[s], true};
  }
  if (model_forward(b->ctxb, b->kvb, b->entries, nb, b->logits, NULL, b->err)) return -1;
  double t = 0;
  for (int i = 0; i < n; i++) {
    for (int s = 0; s < nb; s++) b->entries[s] = (model_entry){s, i + 1, argmax(b->logits + (size_t)s * nv, nv), true};
    double t0 = pw_now_s();
    if (model_forward(b->ctxb, b->kvb, b->entries, nb, b->logits, NULL, b->err)) return -1;
    t += pw_now_s() - t0;
  }
  return (double)nb * n / t;
}

/* File facts for the report: parameter count, the weight type holding the
 * most bytes in the layers, and the bytes one decode step reads. Decode reads every
 * tensor once except the embedding table, of which it reads one row; when
 * the output projection is tied to the embedding, that table is read whole
 * as the output matrix and so counts. Of a mixture of experts' stacked
 * expert tensors one token reads expert_used_count experts. */
typedef struct bench_facts {
  uint64_t file_bytes, params, bytes_per_token;
  const char *main_type;
} bench_facts;

static void model_facts(const gguf_file *f, bench_facts *out) {
  uint64_t by_type[64] = {0};
  memset(out, 0, sizeof *out);
  out->file_bytes = gguf_size(f);
  bool has_output = gguf_find_tensor(f, "output.weight") != NULL;
  char arch[32] = "", key[64];
  uint32_t n_used = 0;
  if (gguf_get_cstr(f, "general.architecture", arch, sizeof arch)) {
    snprintf(key, sizeof key, "%s.expert_used_count", arch);
    gguf_get_u32(f, key, &n_used);
  }
  for (uint64_t i = 0; i < gguf_n_tensors(f); i++) {
    const gguf_tensor *t = gguf_tensor_at(f, i);
    uint64_t ne = 1;
    for (uint32_t d = 0; d < t->n_dims; d++) ne *= t->ne[d];
    out->params += ne;
    /* The main type is judged on the layers only: in a small model the
     * output matrix alone can outweigh them. */
    if (t->type < 64 && t->name.len > 4 && !memcmp(t->name.ptr, "blk.", 4)) by_type[t->type] += t->nbytes;
    if (has_output && gguf_str_eq(t->name, "token_embd.weight")) continue;
    /* a stacked expert tensor: one token reads only its experts */
    if (n_used > 0 && t->n_dims == 3 && t->ne[2] >= n_used) {
      out->bytes_per_token += t->nbytes / t->ne[2] * n_used;
      continue;
    }
    out->bytes_per_token += t->nbytes;
  }
  uint32_t best = 0;
  for (uint32_t k = 1; k < 64; k++)
    if (by_type[k] > by_type[best]) best = k;
  /* The file's own label (general.file_type, "Q4_K_M") when it states a
   * known one; else the type holding most of the layers' bytes. */
  uint32_t ft;
  out->main_type = gguf_get_u32(f, "general.file_type", &ft) ? gguf_file_type_name(ft) : NULL;
  if (!out->main_type) out->main_type = pw_dtype_name(best);
  if (!out->main_type) out->main_type = "?";
}

static const char *base_name(const char *path) {
  const char *s = strrchr(path, '/');
  return s ? s + 1 : path;
}

/* ---- generation through the engine, with and without speculation ---- */

#define BENCH_SPEC_RANDOM_PROMPT 64 /* random ids when -p is smaller and no file */
#define BENCH_PROMPT_FILE_MAX ((long)4 << 20)

typedef struct bench_spec {
  bench_series off, on; /* decode tok/s after the first token */
  long drafted, accepted, completion, passes; /* the speculative runs, summed */
  int n_prompt;
  int parity; /* every run gave the reference tokens */
} bench_spec;

/* One greedy request of n tokens (end-of-generation ignored); the decode
 * rate after the first token, from the engine's event times, or -1 with err
 * set. ids: n slots. */
static double spec_one(engine *e, const int32_t *prompt, int n_prompt, int n, bool spec_off, int32_t *ids,
                       engine_usage *u, char *err) {
  engine_params p;
  memset(&p, 0, sizeof p);
  p.prompt = prompt;
  p.n_prompt = n_prompt;
  p.max_tokens = n;
  pw_sampler_params_default(&p.sampling);
  p.sampling.temperature = 0;
  p.ignore_eos = true;
  p.spec_off = spec_off;
  engine_req *r;
  if (engine_submit(e, &p, &r, err)) return -1;
  int got = 0;
  double t_first = 0, t_done = 0;
  engine_event ev;
  for (;;) {
    int rc = engine_next(r, &ev, -1);
    if (rc || ev.type == ENGINE_EV_ERROR) {
      pw_seterr(err, rc ? rc : ev.status, "%s", rc ? pw_strerror(rc) : ev.message);
      engine_release(r);
      return -1;
    }
    if (ev.type == ENGINE_EV_TOKEN) {
      if (!got) t_first = ev.time_s;
      if (got < n) ids[got++] = ev.token;
    } else if (ev.type == ENGINE_EV_DONE) {
      t_done = ev.time_s;
      *u = ev.usage;
      break;
    }
  }
  engine_release(r);
  if (got < n || t_done <= t_first)
    return pw_seterr(err, PW_EINTERNAL, "generation ended after %d of %d tokens", got, n), -1;
  return (n - 1) / (t_done - t_first);
}

/* The prompt: --prompt-file's text, else max(p, 64) seeded random ids. */
static int spec_prompt(const bench_opts *o, engine *e, const model_hparams *hp, int32_t **out, int *n_out,
                       char *err) {
  if (!o->prompt_file) {
    int n = o->p > BENCH_SPEC_RANDOM_PROMPT ? (int)o->p : BENCH_SPEC_RANDOM_PROMPT;
    pw_rng rng;
    pw_rng_seed(&rng, o->seed);
    if (!(*out = malloc((size_t)n * sizeof **out))) return pw_seterr(err, PW_ENOMEM, "out of memory");
    for (int i = 0; i < n; i++) (*out)[i] = (int32_t)(pw_rng_next(&rng) % (uint64_t)hp->n_vocab);
    *n_out = n;
    return 0;
  }
  size_t len;
  char *text = cli_slurp(o->prompt_file, BENCH_PROMPT_FILE_MAX, &len, err);
  if (!text) return PW_EIO;
  prompt_builder pb;
  int rc = prompt_builder_init(&pb, engine_vocab(e), engine_chat_template(e), err);
  if (!rc) {
    prompt_error oe;
    if (prompt_tokenize(&pb, text, len, true, false, "prompt", out, n_out, &oe))
      rc = pw_seterr(err, PW_EINVAL, "%s: %s", o->prompt_file, oe.message);
    else if (*n_out < 1)
      rc = pw_seterr(err, PW_EINVAL, "%s: the prompt is empty", o->prompt_file);
    prompt_builder_free(&pb);
  }
  free(text);
  return rc;
}

static int run_spec(const bench_opts *o, const char *path, const model_hparams *hp, bench_spec *bs, char *err) {
  const int n = (int)o->n, r = (int)o->r;
  engine_opts eo;
  memset(&eo, 0, sizeof eo);
  eo.model_path = path;
  eo.n_threads = (int)o->threads;
  eo.max_active = 1;
  eo.prompt_cache_entries = -1;
  spec_opts_apply(&o->spec, &eo);
  cli_weights_apply(&o->weights, &eo);
  cli_kv_apply(&o->kv, &eo);
  engine *e = NULL;
  int32_t *prompt = NULL, *ref = malloc((size_t)n * sizeof *ref), *ids = malloc((size_t)n * sizeof *ids);
  int rc = !ref || !ids ? pw_seterr(err, PW_ENOMEM, "out of memory") : engine_create(&eo, &e, err);
  if (!rc) rc = spec_prompt(o, e, hp, &prompt, &bs->n_prompt, err);
  if (!rc && bs->n_prompt + n > engine_n_ctx(e))
    rc = pw_seterr(err, PW_ECONTEXT, "%d prompt + %d generated tokens do not fit the context of %d", bs->n_prompt,
                   n, engine_n_ctx(e));
  engine_usage u;
  /* warm-up, uncounted; its spec-off tokens are the reference */
  if (!rc && (spec_one(e, prompt, bs->n_prompt, n, true, ref, &u, err) < 0 ||
              spec_one(e, prompt, bs->n_prompt, n, false, ids, &u, err) < 0))
    rc = PW_EINTERNAL;
  bs->parity = !rc && !memcmp(ids, ref, (size_t)n * sizeof *ids);
  for (int k = 0; !rc && k < r; k++) {
    for (int j = 0; !rc && j < 2; j++) {
      const bool off = (j == 0) == (k % 2 == 0); /* off first on even repetitions */
      const double v = spec_one(e, prompt, bs->n_prompt, n, off, ids, &u, err);
      if (v < 0) {
        rc = PW_EINTERNAL;
        break;
      }
      bs->parity &= !memcmp(ids, ref, (size_t)n * sizeof *ids);
      bench_series *s = off ? &bs->off : &bs->on;
      s->v[s->n++] = v;
      if (!off) {
        bs->drafted += u.spec_drafted;
        bs->accepted += u.spec_accepted;
        bs->completion += u.completion_tokens;
        bs->passes += u.target_passes;
      }
    }
  }
  series_finish(&bs->off);
  series_finish(&bs->on);
  engine_destroy(e);
  free(prompt);
  free(ref);
  free(ids);
  return rc;
}

/* ---- --grammar -------------------------------------------------------------- */

static json_t *series_json(const bench_series *s);

/* One sampled request of at most n tokens under g (NULL = free); the decode
 * rate after the first token, or -1 with err set. ids gets the tokens. */
static double gram_one(engine *e, const int32_t *prompt, int n_prompt, int n, grammar *g, uint64_t seed,
                       int32_t *ids, int *got, char *err) {
  engine_params p;
  memset(&p, 0, sizeof p);
  p.prompt = prompt;
  p.n_prompt = n_prompt;
  p.max_tokens = n;
  pw_sampler_params_default(&p.sampling);
  p.sampling.temperature = 1;
  p.sampling.seed = seed;
  p.ignore_eos = g == NULL; /* free text runs the full n; a grammar may end sooner */
  p.spec_off = true;
  p.grammar = g;
  engine_req *r;
  if (engine_submit(e, &p, &r, err)) return -1;
  double t_first = 0, t_done = 0;
  engine_event ev;
  *got = 0;
  for (;;) {
    int rc = engine_next(r, &ev, -1);
    if (rc || ev.type == ENGINE_EV_ERROR) {
      pw_seterr(err, rc ? rc : ev.status, "%s", rc ? pw_strerror(rc) : ev.message);
      engine_release(r);
      return -1;
    }
    if (ev.type == ENGINE_EV_TOKEN) {
      if (!*got) t_first = ev.time_s;
      if (*got < n) ids[(*got)++] = ev.token;
    } else if (ev.type == ENGINE_EV_DONE) {
      t_done = ev.time_s;
      break;
    }
  }
  engine_release(r);
  if (*got < 2 || t_done <= t_first)
    return pw_seterr(err, PW_EINTERNAL, "generation ended after %d token(s): too few to time", *got), -1;
  return (*got - 1) / (t_done - t_first);
}

static int gram_vocab(engine *e, grammar_vocab **out, char *err) {
  const tok_vocab *v = engine_vocab(e);
  int32_t nv = tok_n_vocab(v);
  const char **pieces = malloc((size_t)nv * sizeof *pieces);
  size_t *lens = malloc((size_t)nv * sizeof *lens);
  bool *eog = malloc((size_t)nv * sizeof *eog);
  int rc = !pieces || !lens || !eog ? pw_seterr(err, PW_ENOMEM, "out of memory") : 0;
  for (int32_t i = 0; !rc && i < nv; i++) {
    lens[i] = tok_piece_ref(v, i, false, &pieces[i]); /* as the engine's own trie */
    eog[i] = tok_is_eog(v, i);
  }
  if (!rc) rc = grammar_vocab_create(nv, pieces, lens, eog, out, err);
  free(pieces);
  free(lens);
  free(eog);
  return rc;
}

/* Replays ids through a fresh matcher, timing each mask; appends the
 * per-token times (ns) to t. */
static int gram_mask_times(grammar *g, const grammar_vocab *gv, const int32_t *ids, int n, float *logits,
                           double *t, int *nt, char *err) {
  grammar_matcher *m;
  int rc = grammar_matcher_create(g, gv, &m, err);
  for (int i = 0; !rc && i < n; i++) {
    uint64_t t0 = pw_now_ns();
    rc = grammar_matcher_apply(m, logits, true) < 0 ? pw_seterr(err, PW_ENOMEM, "grammar: out of memory") : 0;
    t[(*nt)++] = (double)(pw_now_ns() - t0);
    if (!rc && grammar_matcher_accept_token(m, ids[i]) < 0)
      rc = pw_seterr(err, PW_EINTERNAL, "grammar: replayed token %d refused", ids[i]);
  }
  grammar_matcher_destroy(m);
  return rc;
}

static int run_grammar(const bench_opts *o) {
  char err[PW_ERRMAX] = "", bad[64];
  const int n = (int)o->n, r = (int)o->r;
  size_t len = 0;
  char *text = cli_slurp(o->grammar_file, GRAMMAR_MAX_TEXT, &len, err);
  if (!text) {
    fprintf(stderr, "power bench: --grammar: %s\n", err);
    return 1;
  }
  size_t fl = strlen(o->grammar_file);
  bool schema = fl > 5 && !strcmp(o->grammar_file + fl - 5, ".json");
  grammar *g = NULL;
  uint64_t c0 = pw_now_ns();
  int rc = schema ? grammar_from_schema(text, len, &g, bad, err) : grammar_parse(text, len, &g, err);
  double compile_ms = (double)(pw_now_ns() - c0) / 1e6;
  free(text);
  if (rc) {
    fprintf(stderr, "power bench: %s: %s\n", o->grammar_file, err);
    return 1;
  }
  const char *path = cli_resolve_model(o->model, err, sizeof err);
  engine *e = NULL;
  grammar_vocab *gv = NULL;
  int32_t *prompt = NULL, *ids = malloc((size_t)n * sizeof *ids);
  int32_t *cids = malloc((size_t)n * (size_t)r * sizeof *cids); /* constrained runs' tokens */
  int *cn = calloc((size_t)r, sizeof *cn);
  double *mt = malloc((size_t)n * (size_t)r * sizeof *mt);
  float *logits = NULL;
  bench_series fr = {0}, cr = {0};
  fr.v = calloc((size_t)r, sizeof *fr.v);
  cr.v = calloc((size_t)r, sizeof *cr.v);
  int nmt = 0, status = 1;
  long ctoks = 0;
  if (!path) goto fail;
  if (!ids || !cids || !cn || !mt || !fr.v || !cr.v) {
    pw_seterr(err, PW_ENOMEM, "out of memory");
    goto fail;
  }
  engine_opts eo;
  memset(&eo, 0, sizeof eo);
  eo.model_path = path;
  eo.n_threads = (int)o->threads;
  eo.max_active = 1;
  eo.prompt_cache_entries = -1;
  cli_weights_apply(&o->weights, &eo);
  cli_kv_apply(&o->kv, &eo);
  if (engine_create(&eo, &e, err)) goto fail;
  const int np = BENCH_SPEC_RANDOM_PROMPT;
  if (np + n > engine_n_ctx(e)) {
    pw_seterr(err, PW_ECONTEXT, "%d prompt + %d generated tokens do not fit the context of %d", np, n, engine_n_ctx(e));
    goto fail;
  }
  int32_t nv = tok_n_vocab(engine_vocab(e));
  if (!(prompt = malloc((size_t)np * sizeof *prompt)) || !(logits = calloc((size_t)nv, sizeof *logits))) {
    pw_seterr(err, PW_ENOMEM, "out of memory");
    goto fail;
  }
  pw_rng rng;
  pw_rng_seed(&rng, o->seed);
  for (int i = 0; i < np; i++) prompt[i] = (int32_t)(pw_rng_next(&rng) % (uint64_t)nv);
  int got;
  /* warm-up, uncounted (it also builds the engine's vocabulary trie) */
  if (gram_one(e, prompt, np, n, NULL, o->seed, ids, &got, err) < 0 ||
      gram_one(e, prompt, np, n, g, o->seed, ids, &got, err) < 0)
    goto fail;
  for (int k = 0; k < r; k++) {
    for (int j = 0; j < 2; j++) {
      const bool free_run = (j == 0) == (k % 2 == 0);
      double v = gram_one(e, prompt, np, n, free_run ? NULL : g, o->seed + (uint64_t)k, free_run ? ids : cids + (size_t)k * n,
                          free_run ? &got : &cn[k], err);
      if (v < 0) goto fail;
      bench_series *s = free_run ? &fr : &cr;
      s->v[s->n++] = v;
      if (!free_run) ctoks += cn[k];
    }
  }
  series_finish(&fr);
  series_finish(&cr);
  if (gram_vocab(e, &gv, err)) goto fail;
  for (int k = 0; k < r; k++)
    if (gram_mask_times(g, gv, cids + (size_t)k * n, cn[k], logits, mt, &nmt, err)) goto fail;
  qsort(mt, (size_t)nmt, sizeof *mt, cmp_double);
  double med_us = nmt ? (nmt % 2 ? mt[nmt / 2] : 0.5 * (mt[nmt / 2 - 1] + mt[nmt / 2])) / 1e3 : 0;
  double p90_us = nmt ? mt[(size_t)(0.9 * (nmt - 1))] / 1e3 : 0;
  double ratio = fr.med > 0 ? cr.med / fr.med : 0;
  if (o->json) {
    json_t *j = json_pack("{s:s,s:s,s:f,s:i,s:i,s:i,s:{s:f,s:f,s:f,s:o},s:{s:f,s:f,s:f,s:o,s:f},s:f,s:{s:f,s:f,s:i}}",
                          "model", path, "grammar", o->grammar_file, "compile_ms", compile_ms, "threads",
                          (int)o->threads, "n_gen", n, "repetitions", r, "free_tg", "median", fr.med, "min", fr.min,
                          "max", fr.max, "runs", series_json(&fr), "constrained_tg", "median", cr.med, "min", cr.min,
                          "max", cr.max, "runs", series_json(&cr), "mean_tokens", (double)ctoks / r, "ratio", ratio,
                          "mask_us", "median", med_us, "p90", p90_us, "steps", nmt);
    char *txt = j ? json_dumps(j, JSON_INDENT(2) | JSON_PRESERVE_ORDER) : NULL;
    if (txt) printf("%s\n", txt);
    free(txt);
    json_decref(j);
  } else {
    printf("model: %s\ngrammar: %s (%d rules, compiled in %.2f ms)\nthreads: %ld, n: %d, repetitions: %d\n\n", path,
           o->grammar_file, grammar_n_rules(g), compile_ms, o->threads, n, r);
    printf("| decode | tok/s median | min | max | tokens/run |\n|---|---:|---:|---:|---:|\n");
    printf("| free | %.2f | %.2f | %.2f | %d |\n", fr.med, fr.min, fr.max, n);
    printf("| grammar | %.2f | %.2f | %.2f | %.1f |\n\n", cr.med, cr.min, cr.max, (double)ctoks / r);
    printf("constrained / free: %.3f\nmask time per token: median %.1f us, p90 %.1f us (%d steps)\n", ratio, med_us,
           p90_us, nmt);
  }
  status = 0;
  goto done;
fail:
  fprintf(stderr, "power bench: --grammar: %s\n", err);
done:
  grammar_vocab_destroy(gv);
  engine_destroy(e);
  grammar_destroy(g);
  free(prompt);
  free(ids);
  free(cids);
  free(cn);
  free(mt);
  free(logits);
  free(fr.v);
  free(cr.v);
  return status;
}

static json_t *series_json(const bench_series *s) {
  json_t *a = json_array();
  for (int i = 0; i < s->n; i++) json_array_append_new(a, json_real(s->v[i]));
  return a;
}

static double spec_ratio(const bench_spec *bs) { return bs->off.med > 0 ? bs->on.med / bs->off.med : 0; }
static double spec_tpp(const bench_spec *bs) { return bs->passes ? (double)bs->completion / bs->passes : 0; }
static double spec_acc(const bench_spec *bs) { return bs->drafted ? (double)bs->accepted / bs->drafted : 0; }

static void print_json(const bench_run *b, const char *path, const bench_facts *fx, const bench_series *pp,
                       const bench_series *tg, const bench_series *btg, const bench_spec *bs) {
  const bench_opts *o = b->o;
  json_t *root = json_object();
  json_object_set_new(root, "model", json_string(base_name(path)));
  json_object_set_new(root, "path", json_string(path));
  json_object_set_new(root, "arch", json_string(b->hp->arch_name));
  json_object_set_new(root, "type", json_string(fx->main_type));
  json_object_set_new(root, "size", json_integer((json_int_t)fx->file_bytes));
  json_object_set_new(root, "params", json_integer((json_int_t)fx->params));
  json_object_set_new(root, "weight_bytes_per_token", json_integer((json_int_t)fx->bytes_per_token));
  const gguf_residency *res = model_residency(b->m);
  json_object_set_new(root, "weight_bytes_in_2mib_pages",
                      res->huge_bytes >= 0 ? json_integer((json_int_t)res->huge_bytes) : json_null());
  json_object_set_new(root, "threads", json_integer(o->threads));
  json_object_set_new(root, "p", json_integer(o->p));
  json_object_set_new(root, "n", json_integer(o->n));
  json_object_set_new(root, "r", json_integer(o->r));
  json_object_set_new(root, "depth", json_integer(o->depth));
  json_object_set_new(root, "seed", json_integer((json_int_t)o->seed));
  json_object_set_new(root, "kernels", json_string(pw_tensor_kernels()));
  /* the KV cache: its types, what it takes against F16, and what a decode
   * step at this depth reads of it (the bound is weights + this) */
  json_object_set_new(root, "kv_type_k", json_string(model_kv_type_name(model_kv_type_k(b->kv))));
  json_object_set_new(root, "kv_type_v", json_string(model_kv_type_name(model_kv_type_v(b->kv))));
  json_object_set_new(root, "kv_bytes", json_integer((json_int_t)model_kv_bytes(b->kv)));
  json_object_set_new(root, "kv_bytes_f16", json_integer((json_int_t)model_kv_bytes_f16(b->kv)));
  json_object_set_new(root, "kv_bytes_per_position", json_integer((json_int_t)model_kv_pos_bytes(b->kv)));
  /* a sliding-window layer reads its window at most */
  json_object_set_new(root, "kv_bytes_per_token_at_depth",
                      json_integer((json_int_t)model_kv_read_bytes(b->kv, (int)o->depth)));
  /* what the middle step of tg reads (its bound), and of batch_tg, whose
   * sequences start empty */
  json_object_set_new(root, "kv_bytes_per_token_mid_tg",
                      json_integer((json_int_t)model_kv_read_bytes(b->kv, (int)o->depth + o->n / 2)));
  json_object_set_new(root, "kv_bytes_per_token_mid_batch",
                      json_integer((json_int_t)model_kv_read_bytes(b->kv, o->n / 2)));
  json_object_set_new(root, "kv_bytes_per_sequence_at_depth",
                      json_integer((json_int_t)model_kv_seq_bytes(b->kv, (int)o->depth)));
  json_object_set_new(root, "kv_ring_layers", json_integer(model_kv_ring_layers(b->kv)));
  if (pp->n) {
    json_object_set_new(root, "pp_tok_s", json_real(pp->med));
    json_object_set_new(root, "pp_min", json_real(pp->min));
    json_object_set_new(root, "pp_max", json_real(pp->max));
    json_object_set_new(root, "pp_reps", series_json(pp));
  }
  if (tg->n) {
    json_object_set_new(root, "tg_tok_s", json_real(tg->med));
    json_object_set_new(root, "tg_min", json_real(tg->min));
    json_object_set_new(root, "tg_max", json_real(tg->max));
    json_object_set_new(root, "tg_reps", series_json(tg));
  }
  if (btg->n) {
    json_object_set_new(root, "batch", json_integer(o->batch));
    json_object_set_new(root, "batch_tg_tok_s", json_real(btg->med));
    json_object_set_new(root, "batch_tg_min", json_real(btg->min));
    json_object_set_new(root, "batch_tg_max", json_real(btg->max));
    json_object_set_new(root, "batch_tg_reps", series_json(btg));
    json_object_set_new(root, "batch_tg_ratio", json_real(tg->n && tg->med > 0 ? btg->med / tg->med : 0));
  }
  if (bs->on.n) {
    json_t *x = json_object();
    json_object_set_new(x, "mode", json_string(engine_spec_name(o->spec.mode)));
    json_object_set_new(x, "prompt_tokens", json_integer(bs->n_prompt));
    json_object_set_new(x, "off_tok_s", json_real(bs->off.med));
    json_object_set_new(x, "off_reps", series_json(&bs->off));
    json_object_set_new(x, "spec_tok_s", json_real(bs->on.med));
    json_object_set_new(x, "spec_reps", series_json(&bs->on));
    json_object_set_new(x, "ratio", json_real(spec_ratio(bs)));
    json_object_set_new(x, "tokens_per_target_pass", json_real(spec_tpp(bs)));
    json_object_set_new(x, "acceptance", json_real(spec_acc(bs)));
    json_object_set_new(x, "parity", json_boolean(bs->parity));
    json_object_set_new(root, "tg_spec", x);
  }
  char *txt = json_dumps(root, JSON_COMPACT | JSON_REAL_PRECISION(8));
  if (txt) printf("%s\n", txt);
  free(txt);
  json_decref(root);
}

static void print_md_row(const bench_run *b, const char *path, const bench_facts *fx, const char *test,
                         const bench_series *s, const char *extra) {
  printf("| %s | %s | %.2f MiB | %.2f M | %ld | %s | %.2f | %.2f | %.2f |%s\n", base_name(path), fx->main_type,
         fx->file_bytes / 1048576.0, fx->params / 1e6, b->o->threads, test, s->med, s->min, s->max, extra);
}

static void print_md(const bench_run *b, const char *path, const bench_facts *fx, const bench_series *pp,
                     const bench_series *tg, const bench_series *btg, const bench_spec *bs) {
  printf("| model | type | size | params | threads | test | t/s (median) | min | max |\n");
  printf("| --- | --- | ---: | ---: | ---: | --- | ---: | ---: | ---: |\n");
  char name[64], extra[64];
  if (pp->n) {
    if (b->o->depth)
      snprintf(name, sizeof name, "pp%ld @ d%ld", b->o->p, b->o->depth);
    else
      snprintf(name, sizeof name, "pp%ld", b->o->p);
    print_md_row(b, path, fx, name, pp, "");
  }
  if (tg->n) {
    if (b->o->depth)
      snprintf(name, sizeof name, "tg%ld @ d%ld", b->o->n, b->o->depth);
    else
      snprintf(name, sizeof name, "tg%ld", b->o->n);
    print_md_row(b, path, fx, name, tg, "");
  }
  if (btg->n) {
    snprintf(name, sizeof name, "tg%ld x %ld seqs", b->o->n, b->o->batch);
    extra[0] = 0;
    if (tg->n && tg->med > 0) snprintf(extra, sizeof extra, " %.2fx tg", btg->med / tg->med);
    print_md_row(b, path, fx, name, btg, extra);
  }
  if (bs->on.n) {
    snprintf(name, sizeof name, "tg%ld engine, spec off", b->o->n);
    print_md_row(b, path, fx, name, &bs->off, "");
    snprintf(name, sizeof name, "tg%ld engine, spec %s", b->o->n, engine_spec_name(b->o->spec.mode));
    snprintf(extra, sizeof extra, " %.2fx; %.2f tok/pass, acceptance %.2f", spec_ratio(bs), spec_tpp(bs),
             spec_acc(bs));
    print_md_row(b, path, fx, name, &bs->on, extra);
  }
  const gguf_residency *res = model_residency(b->m);
  printf("\n%ld repetitions after one warm-up; %s kernels; weights read per decode step %.2f MiB", b->o->r,
         pw_tensor_kernels(), fx->bytes_per_token / 1048576.0);
  if (res->huge_bytes >= 0)
    printf("; file mapped %.0f%% in 2 MiB pages%s", 100.0 * res->huge_bytes / (res->bytes ? res->bytes : 1),
           res->refreshed ? " (page cache re-read)" : "");
  printf("\n");
  const model_kv *kv = b->kv;
  printf("KV cache %s/%s: %.2f MiB for %d positions x 2 sequences (F16: %.2f MiB, %.0f%% saved); %.1f KiB per "
         "position",
         model_kv_type_name(model_kv_type_k(kv)), model_kv_type_name(model_kv_type_v(kv)),
         model_kv_bytes(kv) / 1048576.0, model_kv_n_ctx(kv), model_kv_bytes_f16(kv) / 1048576.0,
         100.0 * (1.0 - (double)model_kv_bytes(kv) / (double)model_kv_bytes_f16(kv)), model_kv_pos_bytes(kv) / 1024.0);
  if (model_kv_ring_layers(kv))
    printf("; %d sliding-window layers in rings", model_kv_ring_layers(kv));
  if (b->o->depth)
    printf("; read per decode step at depth %ld: %.2f MiB of the %.2f MiB its sequence holds", b->o->depth,
           (double)model_kv_read_bytes(kv, (int)b->o->depth) / 1048576.0,
           (double)model_kv_seq_bytes(kv, (int)b->o->depth) / 1048576.0);
  printf("\n");
  if (bs->on.n)
    printf("engine rows: greedy generation of %ld tokens from %d prompt tokens, decode rate after the first "
           "token; outputs %s\n",
           b->o->n, bs->n_prompt, bs->parity ? "identical" : "DIFFER");
}

static int run_model(const bench_opts *o) {
  char err[PW_ERRMAX];
  const char *path = cli_resolve_model(o->model, err, sizeof err);
  if (!path) {
    fprintf(stderr, "power bench: %s\n", err);
    return 1;
  }
  int status = 1;
  int p = (int)o->p, n = (int)o->n, r = (int)o->r, nb = (int)o->batch;
  bench_run b = {.o = o};
  double *vals = calloc((size_t)5 * r, sizeof *vals);
  bench_series pp = {vals, 0, 0, 0, 0}, tg = {vals + r, 0, 0, 0, 0}, btg = {vals + 2 * r, 0, 0, 0, 0};
  bench_spec bs = {.off = {vals + 3 * r, 0, 0, 0, 0}, .on = {vals + 4 * r, 0, 0, 0, 0}};
  pw_rng_seed(&b.rng, o->seed);
  model_opts mo = {.n_threads = (int)o->threads};
  cli_weights_model_opts(&o->weights, &mo.weights);
  weights_budget_info bi0 = {0}, bi1 = {0};
  double t_loop = 0;
  if (!vals) {
    fprintf(stderr, "power bench: out of memory\n");
    goto done;
  }
  if (model_load(path, &mo, &b.m, b.err)) {
    fprintf(stderr, "power bench: %s: %s\n", path, b.err);
    goto done;
  }
  b.hp = model_hp(b.m);
  int chunk = p < BENCH_MAX_CHUNK ? p : BENCH_MAX_CHUNK;
  if (chunk < 1) chunk = 1;
  const int d = (int)o->depth;
  if (d > 0 && chunk < (d < BENCH_MAX_CHUNK ? d : BENCH_MAX_CHUNK)) chunk = d < BENCH_MAX_CHUNK ? d : BENCH_MAX_CHUNK;
  int n_ctx = d + p > d + n + 1 ? d + p : d + n + 1;
  int n_ent = chunk > nb ? chunk : nb;
  int n_tok = p > nb ? p : nb;
  if (d > n_tok) n_tok = d;
  if (n_tok < 1) n_tok = 1;
  size_t n_logits = (size_t)(nb > 1 ? nb : 1) * (size_t)b.hp->n_vocab;
  /* sequence 0: pp; sequence 1: tg (after its depth tokens) */
  /* passes of at most chunk positions per sequence (one in the batch
   * decode): sliding-window layers keep rings of their window plus that
   * (every position with --swa-full) */
  const int pass = o->kv.swa_full ? 0 : chunk;
  const model_kv_opts ko = {cli_kv_k(&o->kv), cli_kv_v(&o->kv), pass},
                      kob = {ko.type_k, ko.type_v, o->kv.swa_full ? 0 : 1};
  if (model_kv_create_ex(b.m, 2, n_ctx, &ko, &b.kv, b.err) || model_ctx_create(b.m, chunk, n_ctx, &b.ctx, b.err) ||
      (nb > 0 && (model_kv_create_ex(b.m, nb, n + 1, &kob, &b.kvb, b.err) ||
                  model_ctx_create(b.m, nb, n + 1, &b.ctxb, b.err)))) {
    fprintf(stderr, "power bench: %s\n", b.err);
    goto done;
  }
  b.entries = malloc((size_t)n_ent * sizeof *b.entries);
  b.tokens = malloc((size_t)n_tok * sizeof *b.tokens);
  b.logits = malloc(n_logits * sizeof *b.logits);
  if (!b.entries || !b.tokens || !b.logits) {
    fprintf(stderr, "power bench: out of memory\n");
    goto done;
  }
  /* Warm-up (not counted): faults the weights in, sizes caches. */
  int n_warm = n < 16 ? n : 16;
  if ((d > 0 && (p > 0 || n > 0) && bench_fill_depth(&b, d) < 0) || (p > 0 && bench_pp(&b, p) < 0) ||
      (n > 0 && bench_tg(&b, n_warm) < 0) ||
      (nb > 0 && bench_batch_tg(&b, n_warm) < 0)) {
    fprintf(stderr, "power bench: %s\n", b.err);
    goto done;
  }
  /* Interleave the figures rep by rep so slow drift on a shared machine
   * spreads over all of them rather than hitting one. */
  weights_get_budget(model_weights(b.m), &bi0);
  t_loop = pw_now_s();
  for (int k = 0; k < r; k++) {
    double v;
    if (p > 0) {
      if ((v = bench_pp(&b, p)) < 0) goto fwd_fail;
      pp.v[pp.n++] = v;
    }
    if (n > 0) {
      if ((v = bench_tg(&b, n)) < 0) goto fwd_fail;
      tg.v[tg.n++] = v;
    }
    if (nb > 0) {
      if ((v = bench_batch_tg(&b, n)) < 0) goto fwd_fail;
      btg.v[btg.n++] = v;
    }
  }
  t_loop = pw_now_s() - t_loop;
  weights_get_budget(model_weights(b.m), &bi1);
  series_finish(&pp);
  series_finish(&tg);
  series_finish(&btg);
  if (o->spec.mode != ENGINE_SPEC_OFF && run_spec(o, path, b.hp, &bs, b.err)) {
    fprintf(stderr, "power bench: --spec: %s\n", b.err);
    goto done;
  }
  bench_facts fx;
  model_facts(model_gguf(b.m), &fx);
  if (o->json)
    print_json(&b, path, &fx, &pp, &tg, &btg, &bs);
  else
    print_md(&b, path, &fx, &pp, &tg, &btg, &bs);
  if (bi1.budget) {
    /* what streaming did over the timed runs: bytes read per decode step
     * (when only tg ran), the reader's rate, and how long the forward
     * passes waited for it */
    const double rd = (double)(bi1.read_bytes - bi0.read_bytes), rs = bi1.read_s - bi0.read_s;
    const long steps = p == 0 && nb == 0 ? r * (n + 1) : 0; /* bench_tg: one untimed pass first */
    printf("memory budget %.1f MiB (%s): %.1f MiB always resident, %.1f MiB pinned, pool %.1f MiB; timed runs "
           "streamed %.1f MiB",
           bi1.budget / 1048576.0, weights_residency_name(bi1.policy), bi1.base_bytes / 1048576.0,
           bi1.pinned_bytes / 1048576.0, bi1.pool_bytes / 1048576.0, rd / 1048576.0);
    if (steps) printf(" (%.1f MiB per decode step)", rd / 1048576.0 / (double)steps);
    printf(" in %llu reads (%llu reuse hits) at %.2f GB/s while reading; passes waited %.2f s of %.2f s\n",
           (unsigned long long)(bi1.loads - bi0.loads), (unsigned long long)(bi1.hits - bi0.hits),
           rs > 0 ? rd / rs / 1e9 : 0.0, bi1.wait_s - bi0.wait_s, t_loop);
  }
  status = 0;
  if (bs.on.n && !bs.parity) {
    fprintf(stderr, "power bench: speculative output differs from the output without speculation\n");
    status = 1;
  }
  goto done;
fwd_fail:
  fprintf(stderr, "power bench: %s\n", b.err);
done:
  free(b.logits);
  free(b.tokens);
  free(b.entries);
  model_ctx_destroy(b.ctxb);
  model_kv_destroy(b.kvb);
  free(b.depth_snap);
  model_ctx_destroy(b.ctx);
  model_kv_destroy(b.kv);
  model_destroy(b.m);
  free(vals);
  return status;
}

/* ---- cold start ---- */

typedef struct cold_row {
  int io;
  double load_s[BENCH_MAX_REPS], first_s[BENCH_MAX_REPS];
  uint64_t cached_max; /* most bytes found cached after a drop */
  double dec_gbs;      /* AES-GCM GB/s per core in the last run (encrypted) */
  int dec_threads;
  bool encrypted;
} cold_row;

static double median_of(const double *v, int n) {
  double tmp[BENCH_MAX_REPS];
  memcpy(tmp, v, (size_t)n * sizeof *tmp);
  qsort(tmp, (size_t)n, sizeof *tmp, cmp_double);
  return n % 2 ? tmp[n / 2] : 0.5 * (tmp[n / 2 - 1] + tmp[n / 2]);
}

/* One cold start: drop, check, load, one token. */
static int cold_once(const bench_opts *o, const char *path, cold_row *row, int k, uint64_t *size, char *err) {
  uint64_t cached = 0;
  int rc = weights_drop_cache(path, err);
  if (!rc) rc = weights_cached_bytes(path, &cached, size, err);
  if (rc) return rc;
  if (cached > row->cached_max) row->cached_max = cached;
  model_opts mo = {.n_threads = (int)o->threads};
  cli_weights_model_opts(&o->weights, &mo.weights);
  mo.weights.io = row->io;
  model *m = NULL;
  model_kv *kv = NULL;
  model_ctx *ctx = NULL;
  float *logits = NULL;
  const double t0 = pw_now_s();
  if ((rc = model_load(path, &mo, &m, err))) return rc;
  const double t1 = pw_now_s();
  const model_hparams *hp = model_hp(m);
  if (!(rc = model_kv_create(m, 1, 16, &kv, err)) && !(rc = model_ctx_create(m, 1, 16, &ctx, err))) {
    if (!(logits = malloc((size_t)hp->n_vocab * sizeof *logits))) rc = pw_seterr(err, PW_ENOMEM, "out of memory");
    model_entry e = {0, 0, 1 % hp->n_vocab, true};
    if (!rc) rc = model_forward(ctx, kv, &e, 1, logits, NULL, err);
  }
  const double t2 = pw_now_s();
  row->load_s[k] = t1 - t0;
  row->first_s[k] = t2 - t0;
  const weights_info *wi = model_weights_info(m);
  row->encrypted = wi->encrypted;
  row->dec_threads = wi->decrypt_threads;
  row->dec_gbs = wi->decrypt_core_s > 0 ? wi->bytes / wi->decrypt_core_s / 1e9 : 0;
  free(logits);
  model_ctx_destroy(ctx);
  model_kv_destroy(kv);
  model_destroy(m);
  return rc;
}

static int run_cold(const bench_opts *o) {
  char err[PW_ERRMAX];
  const char *path = cli_resolve_model(o->model, err, sizeof err);
  if (!path) {
    fprintf(stderr, "power bench: %s\n", err);
    return 1;
  }
  cold_row *rows = calloc(WEIGHTS_IO_COUNT, sizeof *rows);
  if (!rows) return 1;
  int nrow = 0;
  uint64_t size = 0;
  for (int io = 0; io < WEIGHTS_IO_COUNT; io++)
    if (!o->io_given || io == o->weights.io) rows[nrow++].io = io;
  /* rep-major, so drift on a shared machine spreads over the strategies */
  for (int k = 0; k < (int)o->r; k++)
    for (int j = 0; j < nrow; j++)
      if (cold_once(o, path, &rows[j], k, &size, err)) {
        fprintf(stderr, "power bench: --cold, %s: %s\n", weights_io_name(rows[j].io), err);
        free(rows);
        return 1;
      }
  const int r = (int)o->r;
  if (o->json) {
    json_t *root = json_object(), *arr = json_array();
    json_object_set_new(root, "test", json_string("cold_start"));
    json_object_set_new(root, "model", json_string(base_name(path)));
    json_object_set_new(root, "file_bytes", json_integer((json_int_t)size));
    json_object_set_new(root, "threads", json_integer(o->threads));
    json_object_set_new(root, "r", json_integer(r));
    for (int j = 0; j < nrow; j++) {
      json_t *x = json_object(), *ls = json_array(), *fs = json_array();
      for (int k = 0; k < r; k++) {
        json_array_append_new(ls, json_real(rows[j].load_s[k]));
        json_array_append_new(fs, json_real(rows[j].first_s[k]));
      }
      json_object_set_new(x, "weights_io", json_string(weights_io_name(rows[j].io)));
      json_object_set_new(x, "encrypted", json_boolean(rows[j].encrypted));
      json_object_set_new(x, "load_s", json_real(median_of(rows[j].load_s, r)));
      json_object_set_new(x, "first_token_s", json_real(median_of(rows[j].first_s, r)));
      json_object_set_new(x, "load_reps", ls);
      json_object_set_new(x, "first_token_reps", fs);
      json_object_set_new(x, "cached_bytes_before_load_max", json_integer((json_int_t)rows[j].cached_max));
      if (rows[j].encrypted) {
        json_object_set_new(x, "decrypt_gbs_per_core", json_real(rows[j].dec_gbs));
        json_object_set_new(x, "decrypt_threads", json_integer(rows[j].dec_threads));
      }
      json_array_append_new(arr, x);
    }
    json_object_set_new(root, "strategies", arr);
    char *txt = json_dumps(root, JSON_COMPACT | JSON_REAL_PRECISION(8));
    if (txt) printf("%s\n", txt);
    free(txt);
    json_decref(root);
  } else {
    printf("| model | size | threads | weights io | load s (median) | first token s | cached before load |%s\n",
           rows[0].encrypted ? " AES-GCM GB/s per core |" : "");
    printf("| --- | ---: | ---: | --- | ---: | ---: | ---: |%s\n", rows[0].encrypted ? " ---: |" : "");
    for (int j = 0; j < nrow; j++) {
      char dec[64] = "";
      if (rows[j].encrypted) snprintf(dec, sizeof dec, " %.2f (%d threads) |", rows[j].dec_gbs, rows[j].dec_threads);
      printf("| %s | %.2f MiB | %ld | %s%s | %.3f | %.3f | %.1f MiB |%s\n", base_name(path), size / 1048576.0,
             o->threads, weights_io_name(rows[j].io), rows[j].encrypted ? ", encrypted" : "",
             median_of(rows[j].load_s, r), median_of(rows[j].first_s, r), rows[j].cached_max / 1048576.0, dec);
    }
    printf("\n%d cold starts per strategy; the page cache of the file dropped before each (POSIX_FADV_DONTNEED), "
           "checked with mincore; first token = load + one 1-token forward pass\n",
           r);
  }
  fflush(stdout);
  for (int j = 0; j < nrow; j++)
    if (rows[j].cached_max > 0)
      fprintf(stderr,
              "power bench: --cold: %.1f MiB of the file stayed cached before a %s load (another process maps "
              "it?): those runs were not fully cold\n",
              rows[j].cached_max / 1048576.0, weights_io_name(rows[j].io));
  free(rows);
  return 0;
}

int cmd_bench(int argc, char **argv) {
  bench_opts o = {.p = 512, .n = 128, .r = 5, .threads = 2, .batch = 0, .bw_mib = 1024, .seed = 1};
  int sp;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
#define NEED_V                                                              \
  if (!v) {                                                                 \
    fprintf(stderr, "power bench: option %s needs a value\n", a);           \
    return 2;                                                               \
  }                                                                         \
  i++;
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      bench_usage(stdout);
      return 0;
    } else if (!strcmp(a, "--model") || !strcmp(a, "-m")) {
      NEED_V o.model = v;
    } else if (!strcmp(a, "-p") || !strcmp(a, "--n-prompt")) {
      NEED_V if (cli_parse_long("bench", a, v, 0, 1 << 20, &o.p)) return 2;
    } else if (!strcmp(a, "-n") || !strcmp(a, "--n-gen")) {
      NEED_V if (cli_parse_long("bench", a, v, 0, 1 << 20, &o.n)) return 2;
    } else if (!strcmp(a, "-r") || !strcmp(a, "--repetitions")) {
      NEED_V if (cli_parse_long("bench", a, v, 1, BENCH_MAX_REPS, &o.r)) return 2;
    } else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
      NEED_V if (cli_parse_long("bench", a, v, 1, ENGINE_MAX_THREADS, &o.threads)) return 2;
    } else if (!strcmp(a, "-d") || !strcmp(a, "--depth")) {
      NEED_V if (cli_parse_long("bench", a, v, 0, 1 << 20, &o.depth)) return 2;
    } else if (!strcmp(a, "-b") || !strcmp(a, "--batch")) {
      NEED_V if (cli_parse_long("bench", a, v, 1, 4096, &o.batch)) return 2;
    } else if (!strcmp(a, "--bandwidth-mib")) {
      NEED_V if (cli_parse_long("bench", a, v, 1, 1 << 20, &o.bw_mib)) return 2;
    } else if (!strcmp(a, "--bandwidth")) {
      o.bandwidth = 1;
    } else if (!strcmp(a, "--seed")) {
      NEED_V char *end;
      o.seed = strtoull(v, &end, 10);
      if (!*v || *end) {
        fprintf(stderr, "power bench: invalid value for --seed: '%s'\n", v);
        return 2;
      }
    } else if (!strcmp(a, "--prompt-file")) {
      NEED_V o.prompt_file = v;
    } else if (!strcmp(a, "--grammar")) {
      NEED_V o.grammar_file = v;
    } else if ((sp = spec_opts_parse("bench", &o.spec, a, v)) != 0) {
      if (sp < 0) return 2;
      i++;
    } else if ((sp = cli_kv_parse("bench", &o.kv, a, v)) != 0) {
      if (sp < 0) return 2;
      i += sp == 1;
    } else if ((sp = cli_weights_parse("bench", &o.weights, a, v)) != 0) {
      if (sp < 0) return 2;
      if (!strcmp(a, "--weights-io")) o.io_given = true;
      i += sp == 1;
    } else if (!strcmp(a, "--cold")) {
      o.cold = 1;
    } else if (!strcmp(a, "-o") || !strcmp(a, "--output")) {
      NEED_V if (!strcmp(v, "json")) o.json = 1;
      else if (!strcmp(v, "md")) o.json = 0;
      else {
        fprintf(stderr, "power bench: invalid value for %s: '%s' (expected md or json)\n", a, v);
        return 2;
      }
    } else {
      fprintf(stderr, "power bench: unknown option '%s' (see power bench --help)\n", a);
      return 2;
    }
#undef NEED_V
  }
  if (o.bandwidth) return run_bandwidth(&o);
  if (cli_weights_finish("bench", &o.weights)) return 2;
  if (o.grammar_file) {
    if (o.n < 2) {
      fprintf(stderr, "power bench: --grammar needs at least 2 generated tokens (-n)\n");
      return 2;
    }
    return run_grammar(&o);
  }
  if (o.cold) return run_cold(&o);
  if (o.p == 0 && o.n == 0) {
    fprintf(stderr, "power bench: nothing to measure: -p and -n are both 0\n");
    return 2;
  }
  if (spec_opts_check("bench", &o.spec)) return 2;
  if (o.spec.mode != ENGINE_SPEC_OFF && o.n < 2) {
    fprintf(stderr, "power bench: --spec needs at least 2 generated tokens (-n)\n");
    return 2;
  }
  if (o.prompt_file && o.spec.mode == ENGINE_SPEC_OFF) {
    fprintf(stderr, "power bench: --prompt-file is the prompt of the --spec figures; give --spec MODE\n");
    return 2;
  }
  if (o.batch > 0 && o.n == 0) {
    fprintf(stderr, "power bench: --batch needs generated tokens (-n > 0)\n");
    return 2;
  }
  return run_model(&o);
}
