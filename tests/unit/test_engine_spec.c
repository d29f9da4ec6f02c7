/* test_engine_spec.c - exact speculative decoding in the engine: every mode
 * (prompt-lookup, n-gram on every shared model, n-gram on synthesized
 * files of every architecture the shared models do not reach; draft on
 * codelm-py) gives
 * the same tokens, text and logprobs as decoding without speculation,
 * greedy and seeded sampling with penalties, alone and 8 at once, with stop
 * strings and max_tokens ending a round early; acceptance on copy-heavy
 * code is real; a request that cannot be helped falls back; the cost
 * policy declines a drafter whose passes cost more than they save and uses
 * a cheap one; a draft model with another vocabulary is refused at
 * startup. Every wait has a timeout. */
#include "base/clock.h"
#include "base/error.h"
#include "engine/engine.h"
#include "tensor/dtype.h"
#include "tok/tok.h"
#include "test.h"

#include <unistd.h>

#define WAIT_MS 120000 /* generous: sanitizer builds are slow */
#define MAX_TOK 512
#include "engine_util.h"

#if defined(__SANITIZE_THREAD__)
#define SMALL 1 /* ThreadSanitizer: one model, short outputs */
#define GEN 8
#elif defined(__SANITIZE_ADDRESS__)
#define SMALL 0
#define GEN 24
#else
#define SMALL 0
#define GEN 48
#endif

#define MODELS POWER_SHARED_DIR "/models/"

/* the KV cache types of the engines made (0: F16) */
static uint32_t g_kv_k, g_kv_v;

/* The policy of the engines make() creates. By default the cost policy
 * with verification costed as free (every pass costs the same), so each
 * round gets the most proposals whatever the machine's timings: the
 * exactness checks then see as much speculation as they can. */
static const double k_free[1] = {1.0};
static struct {
  int policy;
  const double *cost; /* NULL = measured */
  int n_cost;
  const double *draft_cost; /* the drafter's passes (NULL: free with fixed costs, else measured) */
  int n_draft_cost;
} g_pol = {ENGINE_SPEC_POLICY_COST, k_free, 1, NULL, 0};

/* the engines' step_tokens (a sliding-window layer's ring is its window
 * plus this) */
static int g_step = 96;

static engine *make(const char *model, int mode, const char *draft, int max_active) {
  engine_opts o = {.model_path = model, .n_threads = 2, .max_active = max_active, .max_queue = 16, .n_ctx = 256,
                   .kv_type_k = g_kv_k, .kv_type_v = g_kv_v,
                   .step_tokens = g_step, .spec_mode = mode, .spec_draft_model = draft, .spec_draft_max = 8,
                   .prompt_cache_entries = -1, .spec_policy = g_pol.policy, .spec_cost_fixed = g_pol.cost,
                   .spec_cost_n = g_pol.n_cost, .spec_draft_cost_fixed = g_pol.draft_cost,
                   .spec_draft_cost_n = g_pol.n_draft_cost};
  return create_engine(&o);
}

static engine_params params(const int32_t *prompt, int n, int max_tokens, bool sampled, uint64_t seed) {
  engine_params p = base_params(prompt, n, max_tokens);
  p.want_logprobs = true;
  if (sampled) {
    p.sampling.temperature = 0.8f;
    p.sampling.top_p = 0.95f;
    p.sampling.repeat_penalty = 1.1f;
    p.sampling.seed = seed;
  } else {
    p.sampling.temperature = 0;
  }
  return p;
}

static void run_many(engine *e, const engine_params *ps, int n, result *out) {
  engine_req *rs[16];
  PW_ASSERT(n <= 16);
  for (int i = 0; i < n; i++) rs[i] = submit(e, &ps[i]);
  for (int i = 0; i < n; i++) {
    if (rs[i])
      collect(rs[i], &out[i]);
    else
      memset(&out[i], 0, sizeof out[i]);
    engine_release(rs[i]);
  }
}

/* The usage of a request accounts for every token it emitted: each target
 * pass emits one token plus the proposals accepted in it, except that a
 * round ending on an accepted token (stop) has no bonus. */
static void check_usage(const result *r) {
  const engine_usage *u = &r->usage;
  int d = u->completion_tokens - u->target_passes - u->spec_accepted;
  CHECK_MSG(d == 0 || d == -1, "usage: %d tokens, %d passes, %d accepted", u->completion_tokens, u->target_passes,
            u->spec_accepted);
  CHECK(u->spec_accepted <= u->spec_drafted);
  CHECK(u->spec_emitted <= u->completion_tokens);
}

static const char *k_prompts[8] = {
    "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n\n\ndef mul(a, b):\n",
    "import os\nimport sys\n\n\ndef main(argv):\n    if len(argv) < 2:\n        print('usage')\n        return 1\n",
    "class Point:\n    def __init__(self, x, y):\n        self.x = x\n        self.y = y\n\n    def __repr__(self):\n",
    "for i in range(10):\n",
    "    def __repr__(self):\n        return '%s(%r)' % (self.__class__.__name__, self.",
    "\"\"\"Utilities for working with paths.\"\"\"\n\nimport os\nimport stat\n\n__all__ = ['join', 'split']\n\n\n"
    "def join(a, *p):\n",
    "try:\n    import threading\nexcept ImportError:\n",
    "x = [",
};

/* The cases of one model: 8 prompts (greedy and seeded sampling with a
 * repeat penalty, alternating), then variants built from their reference
 * outputs: max_tokens ending inside a round, stop strings taken from the
 * reference text (so they hit inside a run of accepted tokens), end of
 * generation made likely by a bias, and a spec_off request. */
#define N_MAIN 8
#define N_VAR 14
typedef struct cases {
  int32_t pr[N_MAIN][256];
  int32_t prx[2][256]; /* a prompt followed by its own reference continuation */
  int i_rep; /* the variant that repeats a token of its prompt */
  int np[N_MAIN];
  engine_params main[N_MAIN], var[N_VAR];
  int n_var;
  char stops[N_VAR][8];
  pw_logit_bias eos_bias, rep_bias;
  result ref[N_MAIN], ref_var[N_VAR], got[N_VAR > N_MAIN ? N_VAR : N_MAIN];
} cases;

static cases g_c;

/* Reference outputs without speculation; all requests at once (the
 * engine's batch invariance is tested in test_engine). */
static void cases_init(engine *off, int gen) {
  cases *c = &g_c;
  memset(c, 0, sizeof *c);
  for (int i = 0; i < N_MAIN; i++) {
    c->np[i] = encode(off, k_prompts[i], c->pr[i], 200);
    c->main[i] = params(c->pr[i], c->np[i], gen + 3 * i, i % 2 == 1, 1000 + (uint64_t)i);
  }
  run_many(off, c->main, N_MAIN, c->ref);
  int v = 0;
  static const int mts[4] = {1, 4, 7, 10};
  for (int k = 0; k < 4; k++) {
    c->var[v] = c->main[k % 2];
    c->var[v++].max_tokens = mts[k];
  }
  for (int s = 0; s < 2; s++)
    for (int cut = 3; cut <= 15; cut += 12) {
      const result *ref = &c->ref[s];
      if (cut + 3 >= ref->text_len || v >= N_VAR) continue;
      for (int k = 0; k < 3; k++) c->stops[v][k] = ref->text[cut + k];
      c->stops[v][3] = 0;
      if (strlen(c->stops[v]) < 3) continue;
      c->var[v] = c->main[s];
      c->var[v].n_stop = 1;
      c->var[v].stop[0] = c->stops[v];
      v++;
    }
  /* Greedy continuation of (prompt + the start of its own output) is the
   * rest of that output: prompt lookup finds matches even on random-weight
   * models when their output repeats. */
  for (int s = 0; s < 2; s++) {
    int half = c->ref[s].n_tok / 2, n = c->np[s];
    memcpy(c->prx[s], c->pr[s], (size_t)n * sizeof c->prx[s][0]);
    memcpy(c->prx[s] + n, c->ref[s].tok, (size_t)half * sizeof c->prx[s][0]);
    c->var[v] = c->main[s];
    c->var[v].prompt = c->prx[s];
    c->var[v++].n_prompt = n + half;
  }
  /* A bias that makes greedy decoding repeat a token from the middle of
   * its prompt: the n-gram drafters find it there and propose what
   * followed it, whatever the model's weights. */
  c->i_rep = v;
  c->rep_bias = (pw_logit_bias){c->pr[0][c->np[0] / 2], 100.0f};
  c->var[v] = c->main[0];
  c->var[v].sampling.logit_bias = &c->rep_bias;
  c->var[v++].sampling.n_logit_bias = 1;
  c->var[v] = c->main[1];
  c->var[v].ignore_eos = false;
  c->eos_bias = (pw_logit_bias){tok_eos(engine_vocab(off)), 6.0f};
  c->var[v].sampling.logit_bias = &c->eos_bias;
  c->var[v++].sampling.n_logit_bias = 1;
  c->var[v] = c->main[0];
  c->var[v++].spec_off = true;
  c->n_var = v;
  run_many(off, c->var, v, c->ref_var);
  for (int i = 0; i < v; i++) CHECK_EQ_INT(c->ref_var[i].end, ENGINE_EV_DONE);
}

/* A mode against the references: two requests alone (greedy, sampled),
 * all eight together, and the variants together. */
static void exactness(const char *model, int mode, const char *draft, int gen) {
  cases *c = &g_c;
  engine *e = make(model, mode, draft, 8);
  if (!e) return;
  double t0 = pw_now_s();
  const char *name = engine_spec_name(mode);
  int drafted = 0, accepted = 0;
  /* First, on the fresh engine (no measured costs, no refused proposals
   * that could make the cost policy decline): the request that repeats a
   * prompt token, for which every mode has something to propose. */
  run_many(e, &c->var[c->i_rep], 1, &c->got[0]);
  CHECK_MSG(same_exact(&c->ref_var[c->i_rep], &c->got[0]), "%s %s request repeating a prompt token differs alone", model, name);
  drafted += c->got[0].usage.spec_drafted;
  accepted += c->got[0].usage.spec_accepted;
  for (int i = 0; i < 2; i++) {
    run_many(e, &c->main[i], 1, &c->got[i]);
    CHECK_MSG(same_exact(&c->ref[i], &c->got[i]), "%s %s request %d (%s) differs alone: %d vs %d tokens", model, name,
              i, i % 2 ? "sampled" : "greedy", c->ref[i].n_tok, c->got[i].n_tok);
    drafted += c->got[i].usage.spec_drafted;
    accepted += c->got[i].usage.spec_accepted;
  }
  run_many(e, c->main, N_MAIN, c->got);
  for (int i = 0; i < N_MAIN; i++) {
    CHECK_MSG(same_exact(&c->ref[i], &c->got[i]), "%s %s request %d (%s) differs among %d: %d vs %d tokens", model,
              name, i, i % 2 ? "sampled" : "greedy", N_MAIN, c->ref[i].n_tok, c->got[i].n_tok);
    CHECK_EQ_INT(c->got[i].n_tok, gen + 3 * i);
    check_usage(&c->got[i]);
    drafted += c->got[i].usage.spec_drafted;
    accepted += c->got[i].usage.spec_accepted;
  }
  run_many(e, c->var, c->n_var, c->got);
  for (int i = 0; i < c->n_var; i++) {
    const engine_params *p = &c->var[i];
    CHECK_MSG(same_exact(&c->ref_var[i], &c->got[i]),
              "%s %s variant %d (max_tokens %d, stop \"%s\", eos %d) differs: %d vs %d tokens", model, name, i,
              p->max_tokens, p->n_stop ? p->stop[0] : "", !p->ignore_eos, c->ref_var[i].n_tok, c->got[i].n_tok);
    check_usage(&c->got[i]);
    drafted += c->got[i].usage.spec_drafted;
    accepted += c->got[i].usage.spec_accepted;
    if (p->n_stop) CHECK(c->got[i].finish == ENGINE_FINISH_STOP);
    if (p->spec_off) {
      CHECK_EQ_INT(c->got[i].usage.spec_drafted, 0);
      CHECK_EQ_INT(c->got[i].usage.target_passes, c->got[i].n_tok);
    }
  }
  engine_stats st;
  engine_get_stats(e, &st);
  CHECK_EQ_INT(st.active, 0);
  CHECK(st.spec_accepted_total <= st.spec_drafted_total);
  /* Every proposal and acceptance belongs to one request's usage. */
  CHECK_EQ_INT(drafted, st.spec_drafted_total);
  CHECK_EQ_INT(accepted, st.spec_accepted_total);
  /* The request that repeats a prompt token makes every mode propose. */
  CHECK_MSG(st.spec_rounds_total > 0, "%s %s: no speculative round was run", model, name);
  const char *base = strrchr(model, '/');
  fprintf(stderr, "  %-24s %-13s rounds %4llu drafted %5llu accepted %5llu; %.2fs\n", base ? base + 1 : model, name,
          (unsigned long long)st.spec_rounds_total, (unsigned long long)st.spec_drafted_total,
          (unsigned long long)st.spec_accepted_total, pw_now_s() - t0);
  engine_destroy(e);
}

/* Emitted tokens per target pass on code that repeats. */
static const char *k_copy =
    "class Vector:\n"
    "    def __init__(self, x, y, z):\n"
    "        self.x = x\n"
    "        self.y = y\n"
    "        self.z = z\n"
    "\n"
    "    def __add__(self, other):\n"
    "        return Vector(self.x + other.x, self.y + other.y, self.z + other.z)\n"
    "\n"
    "    def __sub__(self, other):\n"
    "        return Vector(self.x - other.x, self.y - other.y, self.z - other.z)\n"
    "\n"
    "    def __mul__(self, other):\n"
    "        return Vector(self.x * other.x, self.y * other.y, self.z * other.z)\n"
    "\n"
    "    def __truediv__(self, other):\n";

static double acceptance(const char *model, int mode, const char *draft, const result *ref, int gen) {
  engine *e = make(model, mode, draft, 2);
  if (!e) return 0;
  static int32_t pr[256];
  int n = encode(e, k_copy, pr, 256);
  engine_params p = params(pr, n, gen, false, 0);
  static result r;
  run_many(e, &p, 1, &r);
  CHECK_MSG(!ref || same_exact(ref, &r), "copy prompt differs with %s", engine_spec_name(mode));
  double per = r.usage.target_passes > 0 ? (double)r.usage.completion_tokens / r.usage.target_passes : 0;
  engine_stats st;
  engine_get_stats(e, &st);
  fprintf(stderr,
          "  copy-heavy %-13s %d tokens in %d target passes = %.2f per pass (drafted %d, accepted %d, %llu rounds, "
          "%llu fallbacks)\n",
          engine_spec_name(mode), r.usage.completion_tokens, r.usage.target_passes, per, r.usage.spec_drafted,
          r.usage.spec_accepted, (unsigned long long)st.spec_rounds_total, (unsigned long long)st.spec_fallbacks_total);
  engine_destroy(e);
  return per;
}

static void test_acceptance(void) {
  const char *tgt = MODELS "codelm-py-F32.gguf";
  int gen = SMALL ? 24 : 64;
  engine *off = make(tgt, ENGINE_SPEC_OFF, NULL, 2);
  if (!off) return;
  static int32_t pr[256];
  int n = encode(off, k_copy, pr, 256);
  CHECK(n + gen <= 256);
  engine_params p = params(pr, n, gen, false, 0);
  static result ref;
  run_many(off, &p, 1, &ref);
  fprintf(stderr, "  copy-heavy continuation: \"%.80s\"...\n", ref.text);
  engine_destroy(off);
  double pl = acceptance(tgt, ENGINE_SPEC_PROMPT_LOOKUP, NULL, &ref, gen);
  double ng = acceptance(tgt, ENGINE_SPEC_NGRAM, NULL, &ref, gen);
  double dr = acceptance(tgt, ENGINE_SPEC_DRAFT, MODELS "codelm-py-draft-F32.gguf", &ref, gen);
  CHECK_MSG(pl > 1.5, "prompt-lookup gives %.2f tokens per target pass", pl);
  CHECK(ng > 1.0 && dr > 1.0);
}

/* Token ids that make no code: nothing to copy; n-gram proposals keep
 * failing, the request falls back and the output is unchanged. */
static void test_fallback(void) {
  const char *m = MODELS "codelm-py-Q8_0.gguf";
  g_pol.policy = ENGINE_SPEC_POLICY_ACCEPTANCE;
  engine *off = make(m, ENGINE_SPEC_OFF, NULL, 2), *e = make(m, ENGINE_SPEC_NGRAM, NULL, 2);
  g_pol.policy = ENGINE_SPEC_POLICY_COST;
  if (!off || !e) goto out;
  static int32_t pr[128];
  for (int i = 0; i < 100; i++) pr[i] = 300 + (int32_t)((i * 2654435761u) % 3700);
  static result a, b;
  for (int s = 0; s < 2; s++) {
    engine_params p = params(pr, 100, SMALL ? 60 : 120, s == 1, 5);
    run_many(off, &p, 1, &a);
    run_many(e, &p, 1, &b);
    CHECK_MSG(same_exact(&a, &b), "fallback request (%s) differs", s ? "sampled" : "greedy");
    check_usage(&b);
  }
  engine_stats st;
  engine_get_stats(e, &st);
  fprintf(stderr, "  no-copy prompt with ngram: %llu fallbacks, %llu rounds, %llu drafted, %llu accepted\n",
          (unsigned long long)st.spec_fallbacks_total, (unsigned long long)st.spec_rounds_total,
          (unsigned long long)st.spec_drafted_total, (unsigned long long)st.spec_accepted_total);
  CHECK(st.spec_fallbacks_total >= 1);
out:
  engine_destroy(off);
  engine_destroy(e);
}

/* The cost policy on copy-heavy code. Verification costed as it would be
 * if it were compute-bound (a pass of n entries costs n): proposals never
 * pay, so the request decodes without them except for its probes, short
 * rounds after 16, 32, ... declined steps. Costed as cheap (8 entries for
 * the price of 1.5): it speculates at once. Measured costs: whatever it
 * chooses, the output is the same. Always the same tokens as without
 * speculation. */
static void test_cost_policy(void) {
  const char *m = MODELS "codelm-py-F32.gguf";
  static const double linear[33] = {1,  2,  3,  4,  5,  6,  7,  8,  9,  10, 11, 12, 13, 14, 15, 16, 17,
                                    18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33};
  static const double cheap[9] = {1.0, 1.05, 1.1, 1.15, 1.2, 1.3, 1.35, 1.4, 1.5};
  int gen = SMALL ? 40 : GEN < 48 ? 60 : 100;
  engine *off = make(m, ENGINE_SPEC_OFF, NULL, 2);
  if (!off) return;
  static int32_t pr[256];
  int n = encode(off, k_copy, pr, 256);
  if (n + gen > 256) gen = 256 - n;
  engine_params p = params(pr, n, gen, false, 0);
  static result ref, got;
  run_many(off, &p, 1, &ref);
  engine_destroy(off);
  struct {
    const char *name;
    const double *cost;
    int n_cost;
  } pc[3] = {{"linear", linear, 33}, {"cheap", cheap, 9}, {"measured", NULL, 0}};
  for (int c = 0; c < 3; c++) {
    g_pol.cost = pc[c].cost;
    g_pol.n_cost = pc[c].n_cost;
    engine *e = make(m, ENGINE_SPEC_PROMPT_LOOKUP, NULL, 2);
    g_pol.cost = k_free;
    g_pol.n_cost = 1;
    if (!e) return;
    run_many(e, &p, 1, &got);
    CHECK_MSG(same_exact(&ref, &got), "cost policy (%s costs) changes the output", pc[c].name);
    check_usage(&got);
    engine_stats st;
    engine_get_stats(e, &st);
    fprintf(stderr,
            "  cost policy, %-8s costs: %d tokens in %d passes, drafted %d accepted %d, %llu declined steps, "
            "%llu probes\n",
            pc[c].name, got.n_tok, got.usage.target_passes, got.usage.spec_drafted, got.usage.spec_accepted,
            (unsigned long long)st.spec_declined_total, (unsigned long long)st.spec_probes_total);
    if (c == 0) {
      /* The first round runs on the prior before any acceptance is known;
       * after that only probes (at most SPEC_PROBE_K = 3 proposals). */
      CHECK(st.spec_declined_total > 0);
      CHECK(st.spec_probes_total >= 1);
      CHECK_MSG(got.usage.spec_drafted <= 8 + 3 * (int)st.spec_probes_total, "drafted %d with %llu probes",
                got.usage.spec_drafted, (unsigned long long)st.spec_probes_total);
      CHECK(got.usage.target_passes >= gen - 8 - 3 * (int)st.spec_probes_total);
    } else if (c == 1) {
      CHECK_EQ_INT((int)st.spec_declined_total, 0);
      CHECK_MSG((double)got.n_tok / got.usage.target_passes > 1.5, "cheap costs: %d tokens in %d passes",
                got.n_tok, got.usage.target_passes);
    }
    engine_destroy(e);
  }
}

/* The cost policy counts the drafter's own passes: with the draft model
 * on copy-heavy code and verification costed as cheap (8 entries for the
 * price of 1.5), a drafter whose every pass costs as much as a target
 * pass never pays (k proposals cost k + the verification for at most k
 * more tokens), so the request decodes without proposals but for its
 * probes; a drafter whose passes cost a hundredth of that is used at
 * once. Either way the same tokens as without speculation. */
static void test_cost_policy_drafter(void) {
  const char *m = MODELS "codelm-py-F32.gguf", *dm = MODELS "codelm-py-draft-F32.gguf";
  static const double cheap[9] = {1.0, 1.05, 1.1, 1.15, 1.2, 1.3, 1.35, 1.4, 1.5};
  static const double costly[8] = {1, 2, 3, 4, 5, 6, 7, 8}, light[8] = {.01, .02, .03, .04, .05, .06, .07, .08};
  int gen = SMALL ? 30 : GEN < 48 ? 40 : 60;
  engine *off = make(m, ENGINE_SPEC_OFF, NULL, 2);
  if (!off) return;
  static int32_t pr[256];
  int n = encode(off, k_copy, pr, 256);
  if (n + gen > 256) gen = 256 - n;
  engine_params p = params(pr, n, gen, false, 0);
  static result ref, got;
  run_many(off, &p, 1, &ref);
  engine_destroy(off);
  for (int c = 0; c < 2; c++) {
    g_pol.cost = cheap;
    g_pol.n_cost = 9;
    g_pol.draft_cost = c == 0 ? costly : light;
    g_pol.n_draft_cost = 8;
    engine *e = make(m, ENGINE_SPEC_DRAFT, dm, 2);
    g_pol.cost = k_free;
    g_pol.n_cost = 1;
    g_pol.draft_cost = NULL;
    g_pol.n_draft_cost = 0;
    if (!e) return;
    run_many(e, &p, 1, &got);
    CHECK_MSG(same_exact(&ref, &got), "cost policy (%s drafter) changes the output", c == 0 ? "costly" : "cheap");
    check_usage(&got);
    engine_stats st;
    engine_get_stats(e, &st);
    fprintf(stderr,
            "  cost policy, %-6s drafter: %d tokens in %d passes, drafted %d accepted %d, %llu declined steps, "
            "%llu probes\n",
            c == 0 ? "costly" : "cheap", got.n_tok, got.usage.target_passes, got.usage.spec_drafted,
            got.usage.spec_accepted, (unsigned long long)st.spec_declined_total,
            (unsigned long long)st.spec_probes_total);
    if (c == 0) {
      /* declined from the first step: only probes (SPEC_PROBE_K = 3) */
      CHECK(st.spec_declined_total > 0);
      CHECK_MSG(got.usage.spec_drafted <= 3 * (int)st.spec_probes_total, "drafted %d with %llu probes",
                got.usage.spec_drafted, (unsigned long long)st.spec_probes_total);
      CHECK(got.usage.target_passes >= gen - 3 * (int)st.spec_probes_total);
    } else {
      CHECK(got.usage.spec_drafted > 0);
      CHECK_MSG((double)got.n_tok / got.usage.target_passes > 1.5, "cheap drafter: %d tokens in %d passes",
                got.n_tok, got.usage.target_passes);
    }
    engine_destroy(e);
  }
}

/* A grammar stays exact under speculation: a lazy one (free text until
 * "def ", then a fixed method shape) and one from the first token, greedy
 * and sampled, copy-heavy code where prompt-lookup proposes a lot. */
static void test_grammar_spec(void) {
  const char *m = MODELS "codelm-py-F32.gguf";
  engine *off = make(m, ENGINE_SPEC_OFF, NULL, 2), *e = make(m, ENGINE_SPEC_PROMPT_LOOKUP, NULL, 2);
  static const char *lazy_g = "root ::= [a-z_]{1,20} \"(self, other):\\n        return Vector(\" [^\\n]{1,80} \"\\n\"\n";
  static const char *full_g = "root ::= [ ]{8} \"return Vector(\" [a-z. /*+-]{1,60} \")\\n\" [^#]{0,200}\n";
  grammar *gl = NULL, *gf = NULL;
  char err[PW_ERRMAX];
  const char *word = "def ";
  CHECK(grammar_parse(lazy_g, strlen(lazy_g), &gl, err) == 0);
  CHECK(gl && grammar_set_lazy(gl, &word, 1, NULL, 0, err) == 0);
  CHECK(grammar_parse(full_g, strlen(full_g), &gf, err) == 0);
  if (!off || !e || !gl || !gf) goto out;
  static int32_t pr[256];
  int n = encode(off, k_copy, pr, 256);
  static result a, b;
  for (int k = 0; k < 4; k++) {
    engine_params p = params(pr, n, SMALL ? 24 : 64, k & 1, 7);
    p.grammar = k < 2 ? gl : gf;
    run_many(off, &p, 1, &a);
    run_many(e, &p, 1, &b);
    CHECK_MSG(a.end == ENGINE_EV_DONE && b.end == ENGINE_EV_DONE, "grammar run %d: %s / %s", k, a.message, b.message);
    CHECK_MSG(same_exact(&a, &b), "grammar run %d (%s, %s) differs under speculation", k, k < 2 ? "lazy" : "full",
              k & 1 ? "sampled" : "greedy");
    fprintf(stderr, "  grammar %s %s: %d tokens, %d target passes: \"%.60s\"\n", k < 2 ? "lazy" : "full",
            k & 1 ? "sampled" : "greedy", b.usage.completion_tokens, b.usage.target_passes, b.text);
  }
out:
  grammar_destroy(gl);
  grammar_destroy(gf);
  engine_destroy(off);
  engine_destroy(e);
}

static void test_draft_mismatch(void) {
  engine_opts o = {.model_path = MODELS "codelm-py-Q8_0.gguf", .n_ctx = 256, .spec_mode = ENGINE_SPEC_DRAFT,
                   .spec_draft_model = MODELS "syn-llama-Q4_0.gguf"};
  engine *e = NULL;
  char err[PW_ERRMAX] = "";
  int rc = engine_create(&o, &e, err);
  CHECK(rc < 0 && e == NULL);
  CHECK_MSG(strstr(err, "vocabulary") && strstr(err, "syn-llama-Q4_0"), "message: %s", err);
  fprintf(stderr, "  mismatched draft: %s\n", err);
  o.spec_draft_model = NULL;
  CHECK_EQ_INT(engine_create(&o, &e, err), PW_EINVAL);
  o.spec_mode = 9;
  CHECK_EQ_INT(engine_create(&o, &e, err), PW_EINVAL);
  o.spec_mode = ENGINE_SPEC_NGRAM;
  o.spec_policy = 7;
  CHECK_EQ_INT(engine_create(&o, &e, err), PW_EINVAL);
  o.spec_policy = ENGINE_SPEC_POLICY_COST;
  static const double bad[2] = {1.0, -2.0};
  o.spec_cost_fixed = bad;
  o.spec_cost_n = 2;
  CHECK_EQ_INT(engine_create(&o, &e, err), PW_EINVAL);
  CHECK(strstr(err, "spec_cost_fixed[1]") != NULL);
  o.spec_cost_fixed = NULL;
  o.spec_draft_cost_fixed = bad;
  o.spec_draft_cost_n = 2;
  CHECK_EQ_INT(engine_create(&o, &e, err), PW_EINVAL);
  CHECK(strstr(err, "spec_draft_cost_fixed[1]") != NULL);
  o.spec_draft_cost_n = 99;
  CHECK_EQ_INT(engine_create(&o, &e, err), PW_EINVAL);
  CHECK(strstr(err, "spec_draft_cost_n") != NULL);
  o.spec_draft_cost_fixed = NULL;
  CHECK_EQ_INT(engine_spec_policy_parse("cost"), ENGINE_SPEC_POLICY_COST);
  CHECK_EQ_INT(engine_spec_policy_parse("acceptance"), ENGINE_SPEC_POLICY_ACCEPTANCE);
  CHECK_EQ_INT(engine_spec_policy_parse("fastest"), -1);
  CHECK_STR(engine_spec_policy_name(ENGINE_SPEC_POLICY_ACCEPTANCE), "acceptance");
  CHECK_EQ_INT(engine_spec_parse("prompt-lookup"), ENGINE_SPEC_PROMPT_LOOKUP);
  CHECK_EQ_INT(engine_spec_parse("ngram"), ENGINE_SPEC_NGRAM);
  CHECK_EQ_INT(engine_spec_parse("draft"), ENGINE_SPEC_DRAFT);
  CHECK_EQ_INT(engine_spec_parse("off"), ENGINE_SPEC_OFF);
  CHECK_EQ_INT(engine_spec_parse("fast"), -1);
  CHECK_STR(engine_spec_name(ENGINE_SPEC_NGRAM), "ngram");
}

/* Speculation over each synthesized architecture (engine_util.h's
 * k_synth): the references keep every position of every layer
 * (step_tokens = n_ctx: a ring would be no smaller), the drafting engine
 * keeps each local layer in a ring of 4 + 15 positions, which wraps many
 * times over a request and is rolled back by up to 1 + 8; the mixtures of
 * experts route each drafted token on its own. */
static void synth_exactness(const synth_case *sc) {
  char path[256];
  if (!synth_file(sc, "spec", path, sizeof path)) return;
  g_step = 256;
  engine *off = make(path, ENGINE_SPEC_OFF, NULL, 8);
  g_step = 16;
  if (off) {
    cases_init(off, GEN / 2);
    engine_destroy(off);
    /* n-gram drafting: random weights seldom repeat the prompt, but
     * their own output, so this mode drafts and rolls back the most */
    exactness(path, ENGINE_SPEC_NGRAM, NULL, GEN / 2);
  }
  g_step = 96;
  unlink(path);
}

int main(void) {
  static const char *models[] = {"codelm-py-Q8_0.gguf",   "syn-llama-Q4_0.gguf",    "syn-llama-Q4_K_M.gguf",
                                 "syn-llama-tied-f16.gguf", "syn-qwen2-Q4_K_M.gguf", "syn-qwen3-Q8_0.gguf",
                                 "syn-llama3-Q8_0.gguf",  "llama2-tiny-random.gguf"};
  static const char *need[] = {"codelm-py-Q8_0.gguf", "codelm-py-F32.gguf", "codelm-py-draft-F32.gguf",
                               "syn-llama-Q4_0.gguf", "syn-qwen3-Q8_0.gguf"};
  char path[1024];
  for (size_t i = 0; i < sizeof need / sizeof need[0]; i++) {
    snprintf(path, sizeof path, MODELS "%s", need[i]);
    if (!have_model(path)) return 1;
  }
  double t0 = pw_now_s();
  test_draft_mismatch();
  test_cost_policy();
  test_cost_policy_drafter();
  test_grammar_spec();
  /* The sanitizer builds check the engine's memory and threads, the same
   * code for every model: one trained and one random model there. */
  int n_models = SMALL ? 1 : GEN < 48 ? 2 : (int)(sizeof models / sizeof models[0]);
  for (int i = 0; i < n_models; i++) {
    snprintf(path, sizeof path, MODELS "%s", models[i]);
    CHECK_MSG(access(path, R_OK) == 0, "missing test model %s (see shared/README.md)", path);
    int gen = i == 0 ? GEN : GEN / 2; /* random-weight models: shorter */
    engine *off = make(path, ENGINE_SPEC_OFF, NULL, 8);
    if (!off) continue;
    cases_init(off, gen);
    engine_destroy(off);
    exactness(path, ENGINE_SPEC_PROMPT_LOOKUP, NULL, gen);
    if (!SMALL) exactness(path, ENGINE_SPEC_NGRAM, NULL, gen);
  }
  static const char *drafts[2][2] = {{"codelm-py-F32.gguf", "codelm-py-draft-F32.gguf"},
                                     /* another architecture with the same vocabulary */
                                     {"syn-llama-Q4_0.gguf", "syn-qwen3-Q8_0.gguf"}};
  for (int i = 0; i < (GEN < 48 ? 1 : 2); i++) {
    char dpath[1024];
    snprintf(path, sizeof path, MODELS "%s", drafts[i][0]);
    snprintf(dpath, sizeof dpath, MODELS "%s", drafts[i][1]);
    int gen = i == 0 ? GEN : GEN / 2;
    engine *off = make(path, ENGINE_SPEC_OFF, NULL, 8);
    if (!off) continue;
    cases_init(off, gen);
    engine_destroy(off);
    exactness(path, ENGINE_SPEC_DRAFT, dpath, gen);
  }
  /* Quantized KV caches: speculation against the same types without it
   * (the trained model; head size 32) */
  static const uint32_t kv_types[][2] = {{PW_DT_Q8_0, PW_DT_Q8_0}, {PW_DT_Q4_0, PW_DT_F16}};
  for (int i = 0; i < (SMALL ? 1 : 2); i++) {
    g_kv_k = kv_types[i][0];
    g_kv_v = kv_types[i][1];
    fprintf(stderr, "  KV types %u/%u:\n", kv_types[i][0], kv_types[i][1]);
    snprintf(path, sizeof path, MODELS "codelm-py-F32.gguf");
    engine *off = make(path, ENGINE_SPEC_OFF, NULL, 8);
    if (!off) continue;
    cases_init(off, GEN / 2);
    engine_destroy(off);
    exactness(path, ENGINE_SPEC_PROMPT_LOOKUP, NULL, GEN / 2);
    if (i == 0 && !SMALL) exactness(path, ENGINE_SPEC_DRAFT, MODELS "codelm-py-draft-F32.gguf", GEN / 2);
  }
  g_kv_k = g_kv_v = 0;
  /* release build only: each file costs seconds under ASan, and the
   * engine's paths are the shared models' there */
  if (GEN >= 48)
    for (int i = 0; i < N_SYNTH; i++) synth_exactness(&k_synth[i]);
  fprintf(stderr, "  exactness: %.2fs\n", pw_now_s() - t0);
  if (!SMALL) { /* trained-model figures: not for ThreadSanitizer */
    test_acceptance();
    test_fallback();
  }
  fprintf(stderr, "total %.2fs\n", pw_now_s() - t0);
  TEST_DONE();
}
