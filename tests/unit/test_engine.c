/* test_engine.c - the engine on a real small model (codelm-py-Q8_0):
 * batch invariance (alone vs among 8, chunked vs whole prefill), seeded
 * sampling, admission overload, deadlines, cancellation, max_tokens and
 * context limits, stop strings, embeddings, slow consumers, drain,
 * shutdown with live requests, and a multi-threaded stress for
 * ThreadSanitizer. Every wait has a timeout. */
#include "base/clock.h"
#include "engine/engine.h"
#include "tok/tok.h"
#include "test.h"

#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>

#define WAIT_MS 60000 /* generous: sanitizer builds are slow */
#define MAX_TOK 1100
#include "engine_util.h"

/* Tokens per request in the invariance test: fewer in the (much slower)
 * sanitizer builds. */
#if defined(__SANITIZE_THREAD__)
/* ThreadSanitizer runs the model ~50x slower: the same checks on less work. */
#define TSAN 1
#define GEN 8
#define N_INV 4      /* requests in the invariance test */
#define N_STRESS 3   /* requests per stress thread */
#elif defined(__SANITIZE_ADDRESS__)
#define TSAN 0
#define GEN 12
#define N_INV 8
#define N_STRESS 6
#else
#define TSAN 0
#define GEN 24
#define N_INV 8
#define N_STRESS 6
#endif

static const char *k_model = POWER_SHARED_DIR "/models/codelm-py-Q8_0.gguf";

static engine *make_engine(int max_active, int max_queue, int n_ctx, int step_tokens, int max_events) {
  engine_opts o = {.model_path = k_model, .n_threads = 2, .max_active = max_active, .max_queue = max_queue,
                   .n_ctx = n_ctx, .step_tokens = step_tokens, .max_events = max_events};
  return create_engine(&o);
}

static engine_params greedy(const int32_t *prompt, int n, int max_tokens) {
  engine_params p = base_params(prompt, n, max_tokens);
  p.sampling.temperature = 0;
  return p;
}

static const char *k_prompts[8] = {
    "def add(a, b):\n",
    "import os\nimport sys\n\n\ndef main(argv):\n    \"\"\"Entry point.\"\"\"\n    if len(argv) < 2:\n        "
    "print('usage')\n        return 1\n",
    "class Point:\n    def __init__(self, x, y):\n",
    "for i in range(10):\n",
    "    def __repr__(self):\n        return '%s(%r)' % (self.__class__.__name__, self.",
    "# Copyright (c) Python Software Foundation.\n\"\"\"Utilities for working with paths.\"\"\"\n\nimport os\n"
    "import stat\n\n__all__ = ['join', 'split', 'exists']\n\n\ndef join(a, *p):\n",
    "try:\n    import threading\nexcept ImportError:\n",
    "x = [",
};

/* ---- batch invariance and sampling ---------------------------------------- */

static void test_batch_invariance(void) {
  engine *ea = make_engine(8, 16, 256, 24, 0); /* small steps: prompts are chunked */
  engine *eb = make_engine(2, 16, 256, 512, 0); /* whole prompts, two at a time */
  if (!ea || !eb) goto out;
  static int32_t prompts[8][256];
  int np[8];
  for (int i = 0; i < 8; i++) np[i] = encode(ea, k_prompts[i], prompts[i], 256);
  CHECK(np[1] > 24 && np[5] > 48); /* exercised chunking */
  static result alone[8], mixed[8], other[8];
  double t0 = pw_now_s();
  for (int i = 0; i < N_INV; i++) {
    engine_params p = greedy(prompts[i], np[i], GEN + i);
    run1(ea, &p, &alone[i]);
    CHECK_EQ_INT(alone[i].end, ENGINE_EV_DONE);
    CHECK_EQ_INT(alone[i].finish, ENGINE_FINISH_LENGTH);
    CHECK_EQ_INT(alone[i].n_tok, GEN + i);
    CHECK_EQ_INT(alone[i].usage.completion_tokens, GEN + i);
    CHECK_EQ_INT(alone[i].usage.prompt_tokens, np[i]);
  }
  double t_alone = pw_now_s() - t0;
  /* All eight at once: their prefills and decodes share steps. */
  engine_req *rs[8];
  for (int i = 0; i < N_INV; i++) {
    engine_params p = greedy(prompts[i], np[i], GEN + i);
    rs[i] = submit(ea, &p);
  }
  for (int i = 0; i < N_INV; i++)
    if (rs[i]) {
      collect(rs[i], &mixed[i]);
      engine_release(rs[i]);
    }
  for (int i = 0; i < N_INV; i++) {
    engine_params p = greedy(prompts[i], np[i], GEN + i);
    rs[i] = submit(eb, &p);
  }
  for (int i = 0; i < N_INV; i++)
    if (rs[i]) {
      collect(rs[i], &other[i]);
      engine_release(rs[i]);
    }
  for (int i = 0; i < N_INV; i++) {
    CHECK_MSG(same(&alone[i], &mixed[i]), "request %d differs alone vs among all (%d vs %d tokens)", i,
              alone[i].n_tok, mixed[i].n_tok);
    CHECK_MSG(same(&alone[i], &other[i]), "request %d differs between chunked and whole prefill", i);
  }
  /* The greedy continuation of real code is not trivially constant. */
  int distinct = 0;
  for (int t = 1; t < alone[0].n_tok; t++) distinct += alone[0].tok[t] != alone[0].tok[0];
  CHECK(distinct > 0);
  engine_stats st;
  engine_get_stats(ea, &st);
  CHECK_EQ_INT(st.requests_total, 2 * N_INV);
  CHECK_EQ_INT(st.active, 0);
  CHECK_EQ_INT(st.queued, 0);
  CHECK(st.generated_tokens_total == (uint64_t)(2 * (N_INV * GEN + N_INV * (N_INV - 1) / 2)));
  /* every step is in exactly one batch-size bucket, and some ran batched */
  uint64_t steps = 0;
  for (int i = 0; i <= ENGINE_BATCH_BUCKETS; i++) steps += st.batch_steps_by_size[i];
  CHECK(steps == st.steps_total && st.steps_total > 0);
  CHECK(st.batch_steps_by_size[0] < st.steps_total);
  fprintf(stderr, "batch invariance: %d alone %.2fs; text[0] = \"%.60s\"\n", N_INV, t_alone, alone[0].text);

  /* Seeded sampling: same seed, same tokens, alone or in company. */
  engine_params p = greedy(prompts[0], np[0], GEN);
  p.sampling.temperature = 1.0f;
  p.sampling.seed = 1234;
  p.want_logprobs = true;
  p.n_logprobs = 3;
  static result s1, s2, s3, s4;
  run1(ea, &p, &s1);
  engine_req *bg[3];
  for (int i = 0; i < 3; i++) {
    engine_params q = greedy(prompts[i + 2], np[i + 2], GEN + 8);
    bg[i] = submit(ea, &q);
  }
  run1(ea, &p, &s2);
  for (int i = 0; i < 3; i++) engine_release(bg[i]);
  CHECK_EQ_INT(s1.n_tok, GEN);
  CHECK_MSG(same(&s1, &s2), "seeded sampling differs between runs");
  CHECK_EQ_INT(s1.n_top0, 3);
  CHECK(s1.logprob0 <= 0 && s1.logprob0 > -30);
  p.sampling.seed = 99;
  run1(ea, &p, &s3);
  CHECK_MSG(!same(&s1, &s3), "different seeds gave the same %d tokens", GEN);
  run1(eb, &p, &s4);
  CHECK_MSG(same(&s3, &s4), "seeded sampling differs between engines");
out:
  engine_destroy(ea);
  engine_destroy(eb);
}

/* ---- admission, deadlines, cancellation, drain ------------------------------ */

static void test_admission(void) {
  engine *e = make_engine(1, 1, 1024, 64, 2048);
  if (!e) return;
  int32_t prompt[64];
  int n = encode(e, k_prompts[0], prompt, 64);
  engine_params long_p = greedy(prompt, n, 0); /* up to the context: ~1000 tokens */
  engine_req *a = submit(e, &long_p);
  engine_event ev;
  CHECK_EQ_INT(engine_next(a, &ev, WAIT_MS), 0); /* a is running */
  CHECK_EQ_INT(ev.type, ENGINE_EV_TOKEN);

  /* Deadline expiry while queued. */
  engine_params dp = greedy(prompt, n, 4);
  dp.deadline_ns = pw_now_ns() + 30 * 1000000ull;
  engine_req *d = submit(e, &dp);
  static result rd;
  if (d) collect(d, &rd);
  engine_release(d);
  CHECK_EQ_INT(rd.end, ENGINE_EV_ERROR);
  CHECK_EQ_INT(rd.status, PW_ETIMEOUT);
  CHECK_EQ_INT(rd.n_tok, 0);

  /* Overload: one running, one waiting, the third is refused at once. */
  engine_params bp = greedy(prompt, n, 5);
  engine_req *b = submit(e, &bp);
  engine_req *c = NULL;
  char err[PW_ERRMAX] = "";
  uint64_t t0 = pw_now_ns();
  int rc = engine_submit(e, &bp, &c, err);
  uint64_t dt = pw_now_ns() - t0;
  CHECK_EQ_INT(rc, PW_EBUSY);
  CHECK(c == NULL);
  CHECK_MSG(dt < 50000000ull, "EBUSY took %.1f ms", (double)dt / 1e6);
  CHECK_MSG(strstr(err, "overloaded") != NULL, "message: %s", err);
  engine_stats st;
  engine_get_stats(e, &st);
  CHECK_EQ_INT(st.requests_rejected, 1);
  CHECK_EQ_INT(st.requests_timeout, 1);
  CHECK_EQ_INT(st.active, 1);
  CHECK_EQ_INT(st.queued, 1);
  /* b waits: nothing arrives while a holds the only slot. */
  CHECK_EQ_INT(engine_next(b, &ev, 50), PW_ETIMEOUT);

  /* Cancelling a frees its slot: b then runs to completion. */
  engine_cancel(a);
  static result ra, rb;
  collect(a, &ra);
  CHECK_EQ_INT(ra.end, ENGINE_EV_DONE);
  CHECK_EQ_INT(ra.finish, ENGINE_FINISH_CANCEL);
  CHECK_MSG(ra.n_tok < 900, "a was not cancelled early (%d tokens)", ra.n_tok);
  CHECK_EQ_INT(engine_next(a, &ev, 0), PW_EINVAL); /* nothing after DONE */
  engine_release(a);
  collect(b, &rb);
  CHECK_EQ_INT(rb.end, ENGINE_EV_DONE);
  CHECK_EQ_INT(rb.finish, ENGINE_FINISH_LENGTH);
  CHECK_EQ_INT(rb.n_tok, 5);
  engine_release(b);
  engine_get_stats(e, &st);
  CHECK_EQ_INT(st.requests_cancelled, 1);

  /* Release of a queued request that never ran, and a slot it never had. */
  a = submit(e, &long_p);
  b = submit(e, &bp);
  engine_release(b);
  CHECK_EQ_INT(engine_next(a, &ev, WAIT_MS), 0);
  engine_release(a);
  CHECK(wait_idle(e));

  /* Drain: a running request keeps it busy past a short grace. */
  a = submit(e, &long_p);
  CHECK_EQ_INT(engine_next(a, &ev, WAIT_MS), 0);
  CHECK_EQ_INT(engine_drain(e, 1), PW_ETIMEOUT);
  rc = engine_submit(e, &bp, &c, err);
  CHECK_EQ_INT(rc, PW_EBUSY);
  engine_cancel(a);
  CHECK_EQ_INT(engine_drain(e, WAIT_MS), 0);
  collect(a, &ra);
  CHECK_EQ_INT(ra.finish, ENGINE_FINISH_CANCEL);
  engine_release(a);
  engine_destroy(e);
}

/* A long prompt is prefilled in chunks beside a running stream, which gets
 * a token at every one of those steps. */
static void test_no_stall(void) {
  engine *e = make_engine(2, 2, 1024, 16, 2048);
  if (!e) return;
  int32_t prompt[64];
  int n = encode(e, k_prompts[0], prompt, 64);
  engine_params sp = greedy(prompt, n, 0);
  engine_req *s = submit(e, &sp);
  engine_event ev;
  CHECK_EQ_INT(engine_next(s, &ev, WAIT_MS), 0);
  static int32_t big[200];
  for (int i = 0; i < 200; i++) big[i] = 100 + (i * 7) % 300;
  engine_params lp = greedy(big, 200, 1);
  engine_req *l = submit(e, &lp);
  static result rl;
  if (l) collect(l, &rl);
  engine_release(l);
  CHECK_EQ_INT(rl.finish, ENGINE_FINISH_LENGTH);
  /* 200 prompt tokens at 15 per step (16 minus the stream's decode) take
   * 14 steps: the stream's events of those steps are already there. */
  int got = 0;
  while (got < 1000 && engine_next(s, &ev, 0) == 0 && ev.type == ENGINE_EV_TOKEN) got++;
  CHECK_MSG(got >= 13, "the stream got only %d tokens during a 200-token prefill", got);
  engine_release(s);
  engine_destroy(e);
}

/* A request that finishes on its own within the drain grace. */
static void test_drain_completes(void) {
  engine *e = make_engine(2, 2, 256, 64, 0);
  if (!e) return;
  int32_t prompt[64];
  int n = encode(e, k_prompts[3], prompt, 64);
  engine_params p = greedy(prompt, n, 12);
  engine_req *r = submit(e, &p);
  CHECK_EQ_INT(engine_drain(e, WAIT_MS), 0);
  static result res;
  collect(r, &res);
  CHECK_EQ_INT(res.finish, ENGINE_FINISH_LENGTH);
  CHECK_EQ_INT(res.n_tok, 12);
  engine_release(r);
  engine_req *x = NULL;
  char err[PW_ERRMAX];
  CHECK_EQ_INT(engine_submit(e, &p, &x, err), PW_EBUSY);
  engine_destroy(e);
}

/* ---- limits, stop strings, embeddings ----------------------------------------- */

static void test_limits_and_stop(void) {
  engine *e = make_engine(4, 4, 256, 32, 0);
  if (!e) return;
  CHECK_EQ_INT(engine_n_ctx(e), 256);
  CHECK_EQ_INT(engine_n_embd(e), 192);
  CHECK_STR(engine_model_id(e), "codelm-py-Q8_0");
  CHECK_EQ_INT(strlen(engine_model_sha256(e)), 64);
  /* codelm-py ships no chat template: the engine says so and the prompt
   * path (chat/prompt.h) falls back to ChatML. */
  CHECK(engine_chat_template(e) == NULL);

  /* Prompt too long: named count and limit. */
  static int32_t big[300];
  for (int i = 0; i < 300; i++) big[i] = 100 + i % 50;
  engine_params p = greedy(big, 256, 10);
  engine_req *r = NULL;
  char err[PW_ERRMAX] = "";
  CHECK_EQ_INT(engine_submit(e, &p, &r, err), PW_ECONTEXT);
  CHECK_MSG(strstr(err, "256 tokens") && strstr(err, "holds 256"), "message: %s", err);
  p.n_prompt = 300;
  CHECK_EQ_INT(engine_submit(e, &p, &r, err), PW_ECONTEXT);
  CHECK_MSG(strstr(err, "300 tokens"), "message: %s", err);
  /* max_tokens is capped by the context. */
  p.n_prompt = 250;
  p.max_tokens = 100;
  static result res;
  run1(e, &p, &res);
  CHECK_EQ_INT(res.finish, ENGINE_FINISH_LENGTH);
  CHECK_EQ_INT(res.n_tok, 6);
  CHECK_EQ_INT(res.usage.completion_tokens, 6);
  /* Bad parameters. */
  p.n_prompt = 0;
  CHECK_EQ_INT(engine_submit(e, &p, &r, err), PW_EINVAL);
  p.n_prompt = 4;
  big[1] = 1 << 20;
  CHECK_EQ_INT(engine_submit(e, &p, &r, err), PW_EINVAL);
  big[1] = 101;
  p.n_stop = 1;
  p.stop[0] = "";
  CHECK_EQ_INT(engine_submit(e, &p, &r, err), PW_EINVAL);
  p.n_stop = 0;
  p.sampling.temperature = -1;
  CHECK_EQ_INT(engine_submit(e, &p, &r, err), PW_EINVAL);

  /* Stop strings: take text the model really produces, across a token
   * boundary, and stop on it. */
  int32_t prompt[64];
  int n = encode(e, k_prompts[2], prompt, 64);
  p = greedy(prompt, n, GEN + 16);
  static result full, stopped, held;
  run1(e, &p, &full);
  CHECK_EQ_INT(full.n_tok, GEN + 16);
  int k = -1; /* first token boundary with >= 2 bytes on each side, after token 4 */
  for (int t = 5; t < full.n_tok - 1 && k < 0; t++) {
    int off = full.text_off[t];
    if (off >= 2 && full.text_len - off >= 2 && full.text_off[t + 1] > off) k = off;
  }
  CHECK_MSG(k > 0, "no usable token boundary in \"%s\"", full.text);
  if (k > 0) {
    char stop[8];
    memcpy(stop, full.text + k - 2, 4);
    stop[4] = 0;
    const char *first = strstr(full.text, stop);
    int expect_len = (int)(first - full.text);
    p.n_stop = 2;
    p.stop[0] = "\x01never";
    p.stop[1] = stop;
    run1(e, &p, &stopped);
    CHECK_EQ_INT(stopped.end, ENGINE_EV_DONE);
    CHECK_EQ_INT(stopped.finish, ENGINE_FINISH_STOP);
    CHECK_EQ_INT(stopped.text_len, expect_len);
    CHECK_MSG(memcmp(stopped.text, full.text, (size_t)expect_len) == 0, "\"%s\" is not a prefix of \"%s\"",
              stopped.text, full.text);
    CHECK(strstr(stopped.text, stop) == NULL);
    CHECK(stopped.n_tok < full.n_tok);
    CHECK(memcmp(stopped.tok, full.tok, (size_t)stopped.n_tok * sizeof full.tok[0]) == 0);
  }
  /* A stop string whose beginning ends the output: held back, then
   * released at the end (in DONE), so the text is unchanged. */
  if (full.text_len > 0) {
    char stop2[16];
    stop2[0] = full.text[full.text_len - 1];
    strcpy(stop2 + 1, "\x02\x03");
    p.n_stop = 1;
    p.stop[0] = stop2;
    run1(e, &p, &held);
    CHECK_EQ_INT(held.finish, ENGINE_FINISH_LENGTH);
    CHECK_MSG(held.text_len == full.text_len && memcmp(held.text, full.text, (size_t)full.text_len) == 0,
              "held-back text lost: \"%s\" vs \"%s\"", held.text, full.text);
  }

  /* End-of-generation ends with STOP when not ignored. */
  p = greedy(prompt, n, 200);
  p.ignore_eos = false;
  int32_t eos = tok_eos(engine_vocab(e));
  pw_logit_bias bias = {eos, 1000.0f}; /* force it at once */
  p.sampling.logit_bias = &bias;
  p.sampling.n_logit_bias = 1;
  static result eog;
  run1(e, &p, &eog);
  CHECK_EQ_INT(eog.finish, ENGINE_FINISH_STOP);
  CHECK_EQ_INT(eog.n_tok, 0);
  CHECK_EQ_INT(eog.usage.completion_tokens, 1);
  CHECK_EQ_INT(eog.text_len, 0);
  engine_destroy(e);
}

static void embed(engine *e, const int32_t *prompt, int n, float *out) {
  engine_params p = base_params(prompt, n, 0);
  p.ignore_eos = false;
  p.embedding = true;
  engine_req *r = submit(e, &p);
  if (!r) return;
  static result res;
  collect(r, &res);
  CHECK_EQ_INT(res.end, ENGINE_EV_DONE);
  CHECK_EQ_INT(res.finish, ENGINE_FINISH_STOP);
  CHECK_EQ_INT(res.usage.prompt_tokens, n);
  CHECK_EQ_INT(res.usage.completion_tokens, 0);
  const float *v = engine_embedding(r);
  CHECK(v != NULL);
  if (v) memcpy(out, v, (size_t)engine_n_embd(e) * sizeof *out);
  engine_release(r);
}

static void test_embeddings(void) {
  engine *e = make_engine(4, 4, 256, 16, 0);
  engine *e2 = make_engine(2, 4, 256, 512, 0);
  if (!e || !e2) goto out;
  int32_t p1[256], p2[256];
  int n1 = encode(e, k_prompts[5], p1, 256), n2 = encode(e, k_prompts[6], p2, 256);
  CHECK(n1 > 16);
  int d = engine_n_embd(e);
  static float v1[1024], v1b[1024], v1c[1024], v2[1024];
  embed(e, p1, n1, v1);
  /* Again, this time next to a generation that shares its steps. */
  engine_params g = greedy(p2, n2, 30);
  engine_req *bg = submit(e, &g);
  embed(e, p1, n1, v1b);
  static result gres;
  if (bg) collect(bg, &gres);
  CHECK_EQ_INT(gres.n_tok, 30);
  engine_release(bg);
  embed(e2, p1, n1, v1c); /* whole prompt in one step */
  embed(e, p2, n2, v2);
  double ss = 0, dot = 0;
  for (int i = 0; i < d; i++) {
    ss += (double)v1[i] * v1[i];
    dot += (double)v1[i] * v2[i];
  }
  CHECK_NEAR(ss, 1.0, 1e-4);
  CHECK(memcmp(v1, v1b, (size_t)d * sizeof *v1) == 0);
  CHECK(memcmp(v1, v1c, (size_t)d * sizeof *v1) == 0);
  CHECK(dot < 0.9999);
out:
  engine_destroy(e);
  engine_destroy(e2);
}

/* ---- slow consumers and shutdown ------------------------------------------------ */

static void test_slow_consumer_and_shutdown(void) {
  engine *e = make_engine(2, 2, 256, 64, 8);
  if (!e) return;
  int32_t prompt[64];
  int n = encode(e, k_prompts[0], prompt, 64);
  engine_params p = greedy(prompt, n, 100);
  engine_req *r = submit(e, &p);
  CHECK(wait_idle(e)); /* it ends by itself although nobody reads */
  static result res;
  collect(r, &res);
  engine_release(r);
  CHECK_EQ_INT(res.end, ENGINE_EV_ERROR);
  CHECK_EQ_INT(res.status, PW_ELIMIT);
  CHECK_EQ_INT(res.n_tok, 8);

  engine_destroy(e);

  /* Destroy with requests running and one queued: they end with an error
   * and stay readable until released. */
  e = make_engine(2, 2, 1024, 64, 2048);
  if (!e) return;
  p.max_tokens = 0;
  engine_req *a = submit(e, &p), *b = submit(e, &p), *c = submit(e, &p);
  engine_event ev;
  CHECK_EQ_INT(engine_next(a, &ev, WAIT_MS), 0);
  engine_destroy(e);
  static result ra, rc_;
  collect(a, &ra);
  collect(c, &rc_);
  CHECK_EQ_INT(ra.end, ENGINE_EV_ERROR);
  CHECK_EQ_INT(ra.status, PW_ECANCELED);
  CHECK_EQ_INT(rc_.end, ENGINE_EV_ERROR);
  engine_release(a);
  engine_release(b); /* unread */
  engine_release(c);
}

/* ---- many threads at once (run under ThreadSanitizer too) -------------------------- */

typedef struct stress_ctx {
  engine *e;
  int id;
  const int32_t *prompt;
  int n;
  atomic_int ended, busy, bad;
} stress_ctx;

static stress_ctx g_stress;

static void *stress_thread(void *arg) {
  int id = (int)(intptr_t)arg;
  stress_ctx *s = &g_stress;
  for (int i = 0; i < N_STRESS; i++) {
    engine_params p = greedy(s->prompt, s->n, 6 + (id + i) % 5);
    if ((id + i) % 3 == 0) {
      p.sampling.temperature = 0.8f;
      p.sampling.seed = (uint64_t)(id * 100 + i);
    }
    engine_req *r = NULL;
    char err[PW_ERRMAX];
    int rc = engine_submit(s->e, &p, &r, err);
    if (rc == PW_EBUSY) {
      atomic_fetch_add(&s->busy, 1);
      usleep(2000);
      continue;
    }
    if (rc != 0) {
      atomic_fetch_add(&s->bad, 1);
      continue;
    }
    engine_event ev;
    int mode = (id + i) % 4; /* 0: read all, 1: cancel after one, 2: release at once, 3: read all */
    if (mode == 2) {
      engine_release(r);
      continue;
    }
    bool ended = false;
    for (int k = 0; k < 200 && !ended; k++) {
      if (engine_next(r, &ev, WAIT_MS) != 0) {
        atomic_fetch_add(&s->bad, 1);
        break;
      }
      if (ev.type != ENGINE_EV_TOKEN) ended = true;
      if (mode == 1 && k == 0) engine_cancel(r);
    }
    if (ended) atomic_fetch_add(&s->ended, 1);
    engine_stats st; /* read concurrently with the engine's updates */
    engine_get_stats(s->e, &st);
    engine_release(r);
  }
  return NULL;
}

static void test_stress(void) {
  engine *e = make_engine(3, 3, 256, 16, 0);
  if (!e) return;
  static int32_t prompt[64];
  g_stress.e = e;
  g_stress.prompt = prompt;
  g_stress.n = encode(e, k_prompts[4], prompt, 64);
  pthread_t th[6];
  for (int i = 0; i < 6; i++) pthread_create(&th[i], NULL, stress_thread, (void *)(intptr_t)i);
  for (int i = 0; i < 6; i++) pthread_join(th[i], NULL);
  CHECK_EQ_INT(atomic_load(&g_stress.bad), 0);
  CHECK(atomic_load(&g_stress.ended) > 0);
  CHECK(wait_idle(e));
  engine_stats st;
  engine_get_stats(e, &st);
  CHECK_EQ_INT(st.requests_rejected, atomic_load(&g_stress.busy));
  fprintf(stderr, "stress: %d ended, %d busy, %llu steps\n", atomic_load(&g_stress.ended),
          atomic_load(&g_stress.busy), (unsigned long long)st.steps_total);
  engine_destroy(e);
}

int main(void) {
  if (!have_model(k_model)) return 1;
  double t0 = pw_now_s();
  test_batch_invariance();
  fprintf(stderr, "  batch invariance + sampling: %.2fs\n", pw_now_s() - t0);
  test_admission();
  fprintf(stderr, "  admission: %.2fs\n", pw_now_s() - t0);
  test_drain_completes();
  test_no_stall();
  /* Single-threaded logic over long prompts: the release and ASan builds
   * cover it; ThreadSanitizer would only spend minutes on the model. */
  if (!TSAN) {
    test_limits_and_stop();
    fprintf(stderr, "  limits + stop: %.2fs\n", pw_now_s() - t0);
    test_embeddings();
    fprintf(stderr, "  embeddings: %.2fs\n", pw_now_s() - t0);
  }
  test_slow_consumer_and_shutdown();
  test_stress();
  fprintf(stderr, "total %.2fs\n", pw_now_s() - t0);
  TEST_DONE();
}
