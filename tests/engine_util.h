/* engine_util.h - helpers shared by the engine unit tests (test_engine*.c):
 * a request's collected output, reading it with a timeout, comparing two
 * outputs, finding test models, creating an engine, building, tokenizing
 * and submitting requests, and waiting for an idle engine. The includer
 * defines WAIT_MS (the timeout of every wait, in ms) and MAX_TOK (tokens
 * kept per result) first. */
#ifndef PW_ENGINE_UTIL_H
#define PW_ENGINE_UTIL_H
#include "base/clock.h"
#include "engine/engine.h"
#include "test.h"
#include "tok/tok.h"

#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#ifndef WAIT_MS
#error "define WAIT_MS before including engine_util.h"
#endif
#ifndef MAX_TOK
#error "define MAX_TOK before including engine_util.h"
#endif

/* What one request produced: its first MAX_TOK tokens, all its text (up to
 * the buffer) and how it ended. */
typedef struct result {
  int32_t tok[MAX_TOK];
  float lp[MAX_TOK];         /* logprob of each token (with want_logprobs) */
  int text_off[MAX_TOK + 1]; /* text bytes before token i's event */
  int n_tok;
  char text[16384]; /* always NUL-terminated */
  int text_len;
  engine_ev_type end; /* DONE / ERROR, 0 = timed out */
  engine_finish finish;
  engine_usage usage;
  int status;
  char message[256];
  float logprob0; /* of the first token */
  int n_top0;     /* top logprobs of the first token */
} result;

/* Appends text, cut to the room left, and keeps it NUL-terminated. */
static inline void result_append(result *res, const char *t, int n) {
  if (res->text_len + n >= (int)sizeof res->text) n = (int)sizeof res->text - 1 - res->text_len;
  memcpy(res->text + res->text_len, t, (size_t)n);
  res->text_len += n;
  res->text[res->text_len] = 0;
}

/* Reads events until DONE/ERROR (or timeout). The text is that of every
 * TOKEN event and of DONE; an ERROR adds none. */
static inline void collect(engine_req *r, result *res) {
  memset(res, 0, sizeof *res);
  engine_event ev;
  double prev = 0;
  for (;;) {
    if (engine_next(r, &ev, WAIT_MS) != 0) return;
    /* queued in order, and before it was read */
    const double now = pw_now_s();
    CHECK_MSG(ev.time_s > 0 && ev.time_s >= prev && ev.time_s <= now, "event time %.6f (previous %.6f, read at %.6f)",
              ev.time_s, prev, now);
    prev = ev.time_s;
    if (ev.type == ENGINE_EV_TOKEN) {
      if (res->n_tok < MAX_TOK) {
        if (res->n_tok == 0) {
          res->logprob0 = ev.logprob;
          res->n_top0 = ev.n_top;
        }
        res->lp[res->n_tok] = ev.logprob;
        res->text_off[res->n_tok] = res->text_len;
        res->tok[res->n_tok++] = ev.token;
      }
      result_append(res, ev.text, ev.text_len);
      continue;
    }
    res->end = ev.type;
    res->finish = ev.finish;
    res->usage = ev.usage;
    res->status = ev.status;
    memcpy(res->message, ev.message, sizeof res->message);
    if (ev.type == ENGINE_EV_DONE) result_append(res, ev.text, ev.text_len);
    res->text_off[res->n_tok] = res->text_len;
    return;
  }
}

/* The same end, finish reason, tokens and text (two errors or two timeouts
 * count as the same end). */
static inline bool same(const result *a, const result *b) {
  return a->end == b->end && a->finish == b->finish && a->n_tok == b->n_tok &&
         memcmp(a->tok, b->tok, (size_t)a->n_tok * sizeof a->tok[0]) == 0 && a->text_len == b->text_len &&
         memcmp(a->text, b->text, (size_t)a->text_len) == 0;
}

/* As same(), and both ended with DONE. */
static inline bool same_done(const result *a, const result *b) {
  return a->end == ENGINE_EV_DONE && same(a, b);
}

/* As same_done(), and the same logprobs and completion token count. */
static inline bool same_exact(const result *a, const result *b) {
  return same_done(a, b) && memcmp(a->lp, b->lp, (size_t)a->n_tok * sizeof a->lp[0]) == 0 &&
         a->usage.completion_tokens == b->usage.completion_tokens;
}

/* Whether a test model is there; if not, says so and where to get it. */
static inline bool have_model(const char *path) {
  if (access(path, R_OK) == 0) return true;
  fprintf(stderr, "missing test model %s (see shared/README.md)\n", path);
  return false;
}

/* Creates an engine that must start; NULL if it did not. */
static inline engine *create_engine(const engine_opts *o) {
  engine *e = NULL;
  char err[PW_ERRMAX] = "";
  int rc = engine_create(o, &e, err);
  CHECK_MSG(rc == 0, "engine_create(%s, %s): %s", o->model_path, engine_spec_name(o->spec_mode), err);
  return e;
}

/* A request for prompt with up to max_tokens, default sampling, ignoring
 * end-of-generation; callers set the rest. */
static inline engine_params base_params(const int32_t *prompt, int n, int max_tokens) {
  engine_params p;
  memset(&p, 0, sizeof p);
  p.prompt = prompt;
  p.n_prompt = n;
  p.max_tokens = max_tokens;
  pw_sampler_params_default(&p.sampling);
  p.ignore_eos = true;
  return p;
}

/* Tokenizes text into out (cap tokens), with a BOS token first if bos;
 * returns the count, 0 on failure. */
static inline int encode_ex(engine *e, const char *text, int32_t *out, int cap, bool bos) {
  size_t n = 0;
  char err[PW_ERRMAX] = "";
  int rc = tok_encode(engine_vocab(e), text, strlen(text), bos, false, out, (size_t)cap, &n, err);
  CHECK_MSG(rc == 0, "tok_encode: %s", err);
  return rc == 0 ? (int)n : 0;
}

/* Tokenizes a prompt: with BOS. */
static inline int encode(engine *e, const char *text, int32_t *out, int cap) {
  return encode_ex(e, text, out, cap, true);
}

/* Submits a request that must be admitted; NULL if it was not. */
static inline engine_req *submit(engine *e, const engine_params *p) {
  engine_req *r = NULL;
  char err[PW_ERRMAX] = "";
  int rc = engine_submit(e, p, &r, err);
  CHECK_MSG(rc == 0, "engine_submit: %s (%s)", err, pw_strerror(rc));
  return r;
}

/* Runs one request to its end (res is zeroed if it was not admitted). */
static inline void run1(engine *e, const engine_params *p, result *res) {
  engine_req *r = submit(e, p);
  if (!r) {
    memset(res, 0, sizeof *res);
    return;
  }
  collect(r, res);
  engine_release(r);
}

/* Waits until the engine has no request left (polling stats, bounded). */
static inline bool wait_idle(engine *e) {
  for (int i = 0; i < WAIT_MS / 5; i++) {
    engine_stats st;
    engine_get_stats(e, &st);
    if (st.active == 0 && st.queued == 0) return true;
    usleep(5000);
  }
  return false;
}

/* Synthesized files of the architectures the shared models do not reach
 * (dummy weights, small shapes; the 32K-token llama vocabulary), for the
 * exactness checks over each one's own model code: gpt-oss (a local layer
 * with a window of 4 and a full one, both with sinks, MXFP4 experts),
 * gemma3 and gemma2 (capped scores) with windows of 4, the mixtures of
 * experts, and the dense extras (phi3's fused projections, smollm3's layer
 * without RoPE, granite's multipliers, mistral3's attention temperature
 * under YaRN). The first N_SYNTH_SANITIZER are the sanitizer builds'
 * share. */
typedef struct synth_case {
  const char *arch, *type, *shape;
} synth_case;
static const synth_case k_synth[] = {
    {"gpt-oss-20b", "MXFP4_MOE", "--layers 2 --experts 8 --embd 64 --window 4"},
    {"gemma-3-1b", "Q4_0", "--layers 2 --embd 64 --window 4"},
    {"qwen3-30b-a3b", "Q4_0", "--layers 2 --experts 8 --embd 64"},
    {"gemma-2-2b", "Q8_0", "--layers 2 --embd 64 --ff 128 --window 4 --softcap 1.5,8"},
    {"qwen1.5-moe-a2.7b", "Q4_0", "--layers 1 --experts 6"},
    {"phi-3.5-mini", "Q4_0", "--layers 2 --embd 64 --ff 128"},
    {"smollm3-3b", "Q4_0", "--layers 4 --embd 64 --ff 128"},
    {"granite-3.3-2b", "Q4_0", "--layers 2 --embd 64 --ff 128"},
    {"ministral-3-3b", "Q4_0", "--layers 2 --embd 64 --ff 128 --yarn 16,4"},
};
#define N_SYNTH (int)(sizeof k_synth / sizeof k_synth[0])
#define N_SYNTH_SANITIZER 3

/* Writes sc's file at path (/tmp, named by tag and the process); false
 * (and a failed check) if power synth failed. */
static inline bool synth_file(const synth_case *sc, const char *tag, char *path, size_t cap) {
  char cmd[1024];
  snprintf(path, cap, "/tmp/pw_test_%s_%s_%d.gguf", tag, sc->arch, (int)getpid());
  snprintf(cmd, sizeof cmd,
           "'%s' synth --arch %s --vocab '%s/tokenizer/ggml-vocab-llama-spm.gguf' --out '%s' --type %s %s --quiet",
           POWER_BIN, sc->arch, POWER_SHARED_DIR, path, sc->type, sc->shape);
  const bool ok = system(cmd) == 0;
  CHECK_MSG(ok, "synth %s failed", sc->arch);
  return ok;
}

#endif
