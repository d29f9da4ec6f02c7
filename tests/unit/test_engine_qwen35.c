/* test_engine_qwen35.c - the hybrid recurrent architecture (qwen35, and
 * qwen35moe with its experts) in the model and the engine: a recurrent
 * state is exact or refused, never approximate.
 *
 * Writes a small Qwen3.5-shaped file with `power synth` (four layers: three
 * gated DeltaNet, one full attention; Q8_0, dummy weights; the 32K-token
 * llama vocabulary, whose small output head keeps the test quick) and
 * checks:
 *   - model: a state snapshot restores exactly (same logits as the first
 *     time); a sequence cut back without one is refused with an error; a
 *     sequence cut to 0 starts over exactly; prefill in one pass and token
 *     by token give the same bits;
 *   - engine: batch invariance (alone, among 8, chunked and whole
 *     prefill); speculation (n-gram drafter) gives the same tokens as
 *     without, alone (half the requests) and among 8, with rejected
 *     rounds rolled back through snapshots; MTP speculation (the model's own block, and oracle
 *     proposals that are all right, all wrong, or mixed so rounds are
 *     accepted in part and rolled back) gives the same tokens as without,
 *     alone and among 8; a model without the block is refused for it;
 *     the prefix cache reuses an entry only when the new prompt
 *     extends all of it and otherwise counts a miss, with the same tokens
 *     as without a cache.
 * Then a Qwen3.5-35B-A3B-shaped file (Q4_0; the same four kinds of layers
 * with 10 experts, 8 per token, a shared expert, and the MTP block with
 * its own experts): the model checks above (prefill in one pass against
 * passes of 6), batch invariance (alone and among 3), and MTP speculation
 * with the mixed oracle (rounds accepted in part and rolled back through
 * the snapshots) giving the same tokens as without.
 * Every wait has a timeout. */
#include "base/clock.h"
#include "base/error.h"
#include "engine/engine.h"
#include "engine/engine_int.h" /* eng_mtp_test_hook */
#include "model/model.h"
#include "tok/tok.h"
#include "test.h"

#include <unistd.h>

#define WAIT_MS 120000
#define MAX_TOK 64
#include "engine_util.h"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define GEN 8
#define N_INV 4
#else
#define GEN 16
#define N_INV 8
#endif

#ifndef POWER_BIN
#define POWER_BIN "power"
#endif

static char g_model[256];
/* The speculation policy of the engines made here: the acceptance policy
 * proposes by rule (so the rollback paths run every time), the cost policy
 * by measured time. */
static int g_policy = ENGINE_SPEC_POLICY_ACCEPTANCE;

static engine *make_at(const char *path, int max_active, int step_tokens, int spec_mode, int cache_entries) {
  engine_opts o = {.model_path = path, .n_threads = 2, .max_active = max_active, .max_queue = 16, .n_ctx = 256,
                   .step_tokens = step_tokens, .spec_mode = spec_mode, .spec_draft_max = 4, .spec_policy = g_policy,
                   .prompt_cache_entries = cache_entries ? cache_entries : -1};
  return create_engine(&o);
}

static engine *make(int max_active, int step_tokens, int spec_mode, int cache_entries) {
  return make_at(g_model, max_active, step_tokens, spec_mode, cache_entries);
}

/* Prompts with repeated stretches, so the n-gram drafter finds matches. */
static int make_prompt(int i, int32_t *out) {
  uint64_t s = 0x9e3779b97f4a7c15ull * (uint64_t)(i + 1);
  int n = 0, len = 6 + 3 * i, reps = 2 + i % 2; /* at most 81 tokens */
  int32_t pat[32];
  for (int k = 0; k < len; k++) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    pat[k] = (int32_t)((s >> 33) % 31000);
  }
  for (int r = 0; r < reps; r++)
    for (int k = 0; k < len; k++) out[n++] = pat[k];
  return n;
}

static engine_params greedy(const int32_t *prompt, int n, int max_tokens) {
  engine_params p = base_params(prompt, n, max_tokens);
  p.sampling.temperature = 0;
  return p;
}

/* ---- the model: snapshots, refusal, restart ------------------------------- */

/* chunk: the second sequence's prefill in passes of this many entries (1:
 * token by token) against the first's one pass */
static void test_model_state(int chunk) {
  char err[PW_ERRMAX];
  model *m = NULL;
  model_opts mo = {.n_threads = 2};
  CHECK_MSG(model_load(g_model, &mo, &m, err) == 0, "%s", err);
  if (!m) return;
  CHECK(model_has_recurrent(m));
  CHECK_EQ_INT(model_hp(m)->n_recurrent, 3);
  const int V = model_hp(m)->n_vocab;
  model_kv *kv = NULL;
  model_ctx *c = NULL;
  CHECK(model_kv_create(m, 2, 64, &kv, err) == 0);
  CHECK(model_ctx_create(m, 32, 64, &c, err) == 0);
  int32_t p[96];
  int n = make_prompt(3, p); /* 45 tokens */
  float *l1 = malloc((size_t)V * 4 * sizeof(float)), *l2 = malloc((size_t)V * 4 * sizeof(float));
  void *snap = malloc(model_kv_state_bytes(kv));
  model_entry e[32];
  /* prefill in one pass vs token by token: the same bits */
  for (int i = 0; i < 20; i++) e[i] = (model_entry){0, i, p[i], i == 19};
  CHECK(model_forward(c, kv, e, 20, l1, NULL, err) == 0);
  for (int i = 0; i < 20; i += chunk) {
    model_entry part[32];
    const int nc = 20 - i < chunk ? 20 - i : chunk;
    for (int j = 0; j < nc; j++) part[j] = (model_entry){1, i + j, p[i + j], i + j == 19};
    CHECK(model_forward(c, kv, part, nc, l2, NULL, err) == 0);
  }
  CHECK_MSG(memcmp(l1, l2, (size_t)V * sizeof(float)) == 0, "prefill in one pass differs from passes of %d", chunk);
  /* snapshot at 20, four more tokens, restore, the same four again */
  model_kv_state_save(kv, 0, snap);
  for (int i = 0; i < 4; i++) e[i] = (model_entry){0, 20 + i, p[20 + i], true};
  CHECK(model_forward(c, kv, e, 4, l1, NULL, err) == 0);
  CHECK(model_kv_state_restore(kv, 0, snap, err) == 0);
  CHECK_EQ_INT(model_kv_len(kv, 0), 20);
  CHECK(model_forward(c, kv, e, 4, l2, NULL, err) == 0);
  CHECK_MSG(memcmp(l1, l2, (size_t)V * 4 * sizeof(float)) == 0, "state restore is not exact");
  /* cut back without a snapshot: refused, not approximated */
  model_kv_truncate(kv, 0, 22);
  CHECK(!model_kv_seq_exact(kv, 0));
  model_entry more = {0, 22, p[22], true};
  CHECK(model_forward(c, kv, &more, 1, l2, NULL, err) == PW_EINVAL);
  CHECK(strstr(err, "recurrent state") != NULL);
  /* a snapshot from a longer past does not fit */
  model_kv_truncate(kv, 1, 10);
  CHECK(model_kv_state_restore(kv, 1, snap, err) == PW_EINVAL);
  /* cut to 0: starts over exactly */
  model_kv_truncate(kv, 0, 0);
  CHECK(model_kv_seq_exact(kv, 0));
  for (int i = 0; i < 20; i++) e[i] = (model_entry){0, i, p[i], i == 19};
  CHECK(model_forward(c, kv, e, 20, l2, NULL, err) == 0);
  for (int i = 0; i < 20; i++) e[i] = (model_entry){1, i, p[i], i == 19};
  model_kv_truncate(kv, 1, 0);
  CHECK(model_forward(c, kv, e, 20, l1, NULL, err) == 0);
  CHECK(memcmp(l1, l2, (size_t)V * sizeof(float)) == 0);
  (void)n;
  free(snap);
  free(l1);
  free(l2);
  model_ctx_destroy(c);
  model_kv_destroy(kv);
  model_destroy(m);
}

/* ---- the engine ----------------------------------------------------------- */

/* requests of run_all and of the oracle's prompt table, and the tokens
 * request i generates (g_gen + i) */
static int g_n_req = N_INV, g_gen = GEN;

static void run_all(engine *e, int32_t prompts[][96], const int *np, result *out) {
  engine_req *rs[8];
  for (int i = 0; i < g_n_req; i++) {
    engine_params p = greedy(prompts[i], np[i], g_gen + i);
    rs[i] = submit(e, &p);
  }
  for (int i = 0; i < g_n_req; i++)
    if (rs[i]) {
      collect(rs[i], &out[i]);
      engine_release(rs[i]);
    }
}

/* the requests' greedy outputs without speculation, alone (the reference
 * of every later comparison) */
static int32_t g_prompts[8][96];
static int g_np[8];
static result g_alone[8];
static bool g_have_alone;

static void test_engine_invariance_and_spec(void) {
  engine *ea = make(8, 16, ENGINE_SPEC_OFF, 0); /* prompts chunked */
  engine *eb = make(2, 256, ENGINE_SPEC_OFF, 0); /* whole prompts */
  engine *es = make(8, 64, ENGINE_SPEC_NGRAM, 0);
  if (!ea || !eb || !es) goto out;
  static int32_t prompts[8][96];
  int np[8];
  for (int i = 0; i < 8; i++) np[i] = make_prompt(i, prompts[i]);
  static result alone[8], mixed[8], whole[8], spec1[8], spec8[8];
  for (int i = 0; i < N_INV; i++) {
    engine_params p = greedy(prompts[i], np[i], GEN + i);
    run1(ea, &p, &alone[i]);
    g_alone[i] = alone[i];
    CHECK_EQ_INT(alone[i].end, ENGINE_EV_DONE);
    CHECK_EQ_INT(alone[i].n_tok, GEN + i);
    if (i < N_INV / 2) run1(es, &p, &spec1[i]); /* alone: half of them (among 8: all) */
  }
  memcpy(g_prompts, prompts, sizeof g_prompts);
  memcpy(g_np, np, sizeof g_np);
  g_have_alone = true;
  run_all(ea, prompts, np, mixed);
  run_all(eb, prompts, np, whole);
  run_all(es, prompts, np, spec8);
  for (int i = 0; i < N_INV; i++) {
    CHECK_MSG(same_done(&alone[i], &mixed[i]), "request %d differs alone vs among %d", i, N_INV);
    CHECK_MSG(same_done(&alone[i], &whole[i]), "request %d differs between chunked and whole prefill", i);
    CHECK_MSG(i >= N_INV / 2 || same_done(&alone[i], &spec1[i]), "request %d differs with speculation", i);
    CHECK_MSG(same_done(&alone[i], &spec8[i]), "request %d differs with speculation among %d", i, N_INV);
  }
  engine_stats st;
  engine_get_stats(es, &st);
  fprintf(stderr,
          "speculation: %llu rounds, %llu drafted, %llu accepted, %llu emitted, %llu rolled back through a "
          "snapshot\n",
          (unsigned long long)st.spec_rounds_total, (unsigned long long)st.spec_drafted_total,
          (unsigned long long)st.spec_accepted_total, (unsigned long long)st.spec_emitted_total,
          (unsigned long long)st.spec_rollbacks_total);
  /* rejected rounds happened and went through the snapshot path */
  CHECK(st.spec_rounds_total > 0);
  CHECK(st.spec_rollbacks_total > 0);
out:
  engine_destroy(ea);
  engine_destroy(eb);
  engine_destroy(es);
}

/* ---- MTP speculation -------------------------------------------------------- */

/* Oracle modes for the MTP drafter's proposals (eng_mtp_test_hook): the
 * block's own (dummy weights: almost never accepted), the target's own
 * continuation (all accepted), wrong tokens (all rejected), or the
 * continuation with every third position wrong (rounds accepted in part,
 * then rolled back: the recurrent state through its snapshot, the block's
 * cache with the target's). */
enum { ORACLE_NONE, ORACLE_ALL, ORACLE_NONE_RIGHT, ORACLE_MIXED };
static int g_oracle;

static void oracle_hook(engine_req *r, int32_t *prop, int n) {
  int w = -1;
  for (int i = 0; i < g_n_req && w < 0; i++)
    if (g_np[i] == r->n_prompt && memcmp(g_prompts[i], r->toks, (size_t)r->n_prompt * sizeof(int32_t)) == 0) w = i;
  if (w < 0 || g_oracle == ORACLE_NONE) return;
  for (int j = 0; j < n; j++) {
    const int g = r->n_fed + 1 + j - r->n_prompt; /* index in the output of the token prop[j] guesses */
    const int32_t right = g >= 0 && g < g_alone[w].n_tok ? g_alone[w].tok[g] : 0;
    const bool wrong = g_oracle == ORACLE_NONE_RIGHT || (g_oracle == ORACLE_MIXED && g % 3 == 2);
    prop[j] = wrong ? (right + 1) % 1000 : right;
  }
}

static void test_mtp(void) {
  if (!g_have_alone) return;
  static const char *names[] = {"mtp block", "oracle: all right", "oracle: all wrong", "oracle: mixed"};
  eng_mtp_test_hook = oracle_hook;
  for (int mode = ORACLE_NONE; mode <= ORACLE_MIXED; mode++) {
    g_oracle = mode;
    /* the block's own proposals under the default (cost) policy */
    g_policy = mode == ORACLE_NONE ? ENGINE_SPEC_POLICY_COST : ENGINE_SPEC_POLICY_ACCEPTANCE;
    engine *es = make(8, 64, ENGINE_SPEC_MTP, 0);
    if (!es) break;
    static result one[8], all[8];
    /* alone: the block's own proposals and the mixed oracle (a few
     * requests: each runs by itself); among 8: every mode */
    const bool solo = mode == ORACLE_NONE || mode == ORACLE_MIXED;
    for (int i = 0; solo && i < N_INV / 2; i++) {
      engine_params p = greedy(g_prompts[i], g_np[i], GEN + i);
      run1(es, &p, &one[i]);
      CHECK_MSG(same_done(&g_alone[i], &one[i]), "%s: request %d differs with MTP speculation", names[mode], i);
    }
    run_all(es, g_prompts, g_np, all);
    for (int i = 0; i < N_INV; i++) {
      CHECK_MSG(same_done(&g_alone[i], &all[i]), "%s: request %d differs with MTP speculation among %d", names[mode],
                i, N_INV);
    }
    engine_stats st;
    engine_get_stats(es, &st);
    fprintf(stderr, "%s: %llu rounds, %llu drafted, %llu accepted, %llu emitted, %llu rolled back, %llu fallbacks\n",
            names[mode], (unsigned long long)st.spec_rounds_total, (unsigned long long)st.spec_drafted_total,
            (unsigned long long)st.spec_accepted_total, (unsigned long long)st.spec_emitted_total,
            (unsigned long long)st.spec_rollbacks_total, (unsigned long long)st.spec_fallbacks_total);
    if (mode != ORACLE_NONE) CHECK(st.spec_drafted_total > 0);
    if (mode == ORACLE_ALL) {
      CHECK_EQ_INT(st.spec_accepted_total, st.spec_drafted_total);
      CHECK_EQ_INT(st.spec_rollbacks_total, 0);
    } else if (mode == ORACLE_NONE_RIGHT) {
      CHECK_EQ_INT(st.spec_accepted_total, 0);
      CHECK(st.spec_rollbacks_total > 0);
    } else if (mode == ORACLE_MIXED) {
      CHECK(st.spec_accepted_total > 0 && st.spec_accepted_total < st.spec_drafted_total);
      CHECK(st.spec_rollbacks_total > 0);
    }
    engine_destroy(es);
  }
  eng_mtp_test_hook = NULL;
  g_policy = ENGINE_SPEC_POLICY_ACCEPTANCE;
  /* a model without the block: refused at creation with a clear error */
  char path[512], err[PW_ERRMAX] = "";
  snprintf(path, sizeof path, "%s/models/syn-qwen3-Q8_0.gguf", POWER_SHARED_DIR);
  engine_opts o = {.model_path = path, .n_threads = 2, .max_active = 2, .max_queue = 4, .n_ctx = 64,
                   .spec_mode = ENGINE_SPEC_MTP};
  engine *bad = NULL;
  CHECK_EQ_INT(engine_create(&o, &bad, err), PW_EUNSUPPORTED);
  CHECK_MSG(strstr(err, "MTP") != NULL, "error: %s", err);
  CHECK(bad == NULL);
}

static engine_params keyed(const int32_t *prompt, int n, int max_tokens) {
  engine_params p = greedy(prompt, n, max_tokens);
  p.has_cache_key = true;
  snprintf((char *)p.cache_key, sizeof p.cache_key, "%s", "conversation");
  return p;
}

static void test_prefix_cache(void) {
  engine *c = make(2, 64, ENGINE_SPEC_OFF, 4), *u = make(2, 64, ENGINE_SPEC_OFF, 0);
  if (!c || !u) goto out;
  static int32_t p1[96], p2[160], p3[160];
  int n1 = make_prompt(2, p1);
  static result r1, r2, u2, r3, u3;
  engine_params p = keyed(p1, n1, 8);
  run1(c, &p, &r1);
  CHECK_EQ_INT(r1.usage.cached_tokens, 0);
  /* turn 2 extends turn 1 (its prompt and answer): the entry is reused */
  int n2 = 0;
  for (int i = 0; i < n1; i++) p2[n2++] = p1[i];
  for (int i = 0; i < r1.n_tok; i++) p2[n2++] = r1.tok[i];
  for (int i = 0; i < 5; i++) p2[n2++] = 1000 + i;
  p = keyed(p2, n2, 8);
  run1(c, &p, &r2);
  p.has_cache_key = false;
  run1(u, &p, &u2);
  CHECK_MSG(r2.usage.cached_tokens == n1 + r1.n_tok - 1, "turn 2 reused %d tokens, expected %d",
            r2.usage.cached_tokens, n1 + r1.n_tok - 1);
  CHECK_MSG(same_done(&r2, &u2), "turn 2 differs with the cache");
  /* turn 3 diverges inside the entry: a recurrent state cannot be cut
   * back, so it is a miss and runs from the start */
  int n3 = 0;
  for (int i = 0; i < n1 / 2; i++) p3[n3++] = p2[i];
  for (int i = 0; i < 7; i++) p3[n3++] = 2000 + i;
  p = keyed(p3, n3, 8);
  run1(c, &p, &r3);
  p.has_cache_key = false;
  run1(u, &p, &u3);
  CHECK_EQ_INT(r3.usage.cached_tokens, 0);
  CHECK_MSG(same_done(&r3, &u3), "turn 3 differs with the cache");
  engine_stats st;
  engine_get_stats(c, &st);
  CHECK_EQ_INT(st.cache_hits_total, 1);
  CHECK_EQ_INT(st.cache_misses_total, 2);
out:
  engine_destroy(c);
  engine_destroy(u);
}

/* ---- qwen35moe ------------------------------------------------------------ */

#define N_MOE 3
#define GEN_MOE (GEN / 2 + 2)

/* The model checks, batch invariance and MTP speculation with the mixed
 * oracle on the MoE file: the engine's paths are the dense file's, what
 * differs is the layers' MLP and the MTP block's (routed experts, whose
 * gathering by expert depends on the batch). */
static void test_moe(void) {
  test_model_state(6);
  g_n_req = N_MOE;
  g_gen = GEN_MOE;
  engine *ea = make(N_MOE, 16, ENGINE_SPEC_OFF, 0);
  g_oracle = ORACLE_MIXED;
  eng_mtp_test_hook = oracle_hook;
  engine *es = make(N_MOE, 64, ENGINE_SPEC_MTP, 0);
  if (!ea || !es) goto out;
  static result mixed[8], spec4[8];
  for (int i = 0; i < N_MOE; i++) {
    g_np[i] = make_prompt(i, g_prompts[i]);
    engine_params p = greedy(g_prompts[i], g_np[i], GEN_MOE + i);
    run1(ea, &p, &g_alone[i]);
    CHECK_EQ_INT(g_alone[i].end, ENGINE_EV_DONE);
    CHECK_EQ_INT(g_alone[i].n_tok, GEN_MOE + i);
  }
  run_all(ea, g_prompts, g_np, mixed);
  run_all(es, g_prompts, g_np, spec4);
  for (int i = 0; i < N_MOE; i++) {
    CHECK_MSG(same_done(&g_alone[i], &mixed[i]), "qwen35moe: request %d differs alone vs among %d", i, N_MOE);
    CHECK_MSG(same_done(&g_alone[i], &spec4[i]), "qwen35moe: request %d differs with MTP speculation among %d", i,
              N_MOE);
  }
  engine_stats st;
  engine_get_stats(es, &st);
  fprintf(stderr, "qwen35moe, oracle mixed: %llu rounds, %llu drafted, %llu accepted, %llu rolled back\n",
          (unsigned long long)st.spec_rounds_total, (unsigned long long)st.spec_drafted_total,
          (unsigned long long)st.spec_accepted_total, (unsigned long long)st.spec_rollbacks_total);
  CHECK(st.spec_accepted_total > 0 && st.spec_accepted_total < st.spec_drafted_total);
  CHECK(st.spec_rollbacks_total > 0);
out:
  eng_mtp_test_hook = NULL;
  engine_destroy(ea);
  engine_destroy(es);
  g_n_req = N_INV;
  g_gen = GEN;
}

static int synth(const char *arch, const char *type, const char *shape) {
  char cmd[1024];
  const char *b = getenv("POWER_BIN");
  snprintf(cmd, sizeof cmd,
           "'%s' synth --arch %s --vocab '%s/tokenizer/ggml-vocab-llama-spm.gguf' --out '%s' --type %s %s --mtp "
           "--quiet",
           b && *b ? b : POWER_BIN, arch, POWER_SHARED_DIR, g_model, type, shape);
  int rc = system(cmd);
  CHECK_MSG(rc == 0, "synth failed: %s", cmd);
  return rc;
}

/* The block's deferred passes: with the cost policy pricing verification
 * as linear in entries, a request declines from its first round and probes
 * after 16 and 32 declined steps, its positions meanwhile waiting in the
 * block's backlog; each probe's proposals must equal those made with the
 * block run after every target pass (eng_mtp_backlog 0). */
#define BL_GEN 56
static int32_t g_bl_prop[2][2][256][4];
static int g_bl_n[2][2][256], g_bl_run;

static void backlog_hook(engine_req *r, int32_t *prop, int n) {
  for (int w = 0; w < 2; w++)
    if (g_np[w] == r->n_prompt && memcmp(g_prompts[w], r->toks, (size_t)r->n_prompt * sizeof(int32_t)) == 0 &&
        r->n_fed < 256) {
      g_bl_n[g_bl_run][w][r->n_fed] = n;
      for (int j = 0; j < n && j < 4; j++) g_bl_prop[g_bl_run][w][r->n_fed][j] = prop[j];
    }
}

static void test_mtp_backlog(void) {
  static const double lin[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9}, draft[4] = {0.01, 0.02, 0.03, 0.04};
  memset(g_bl_n, 0, sizeof g_bl_n);
  eng_mtp_test_hook = backlog_hook;
  for (g_bl_run = 0; g_bl_run < 2; g_bl_run++) {
    eng_mtp_backlog = g_bl_run == 0 ? 0 : -1;
    /* a generous probe budget: probes after 16 and 32 declined steps
     * whatever they cost (test_mtp_priced prices them) */
    /* steps of 16 entries: a backlog of 64 goes through the block in
     * passes of at most that many */
    engine_opts o = {.model_path = g_model, .n_threads = 2, .max_active = 2, .max_queue = 4, .n_ctx = 256,
                     .step_tokens = 16, .spec_mode = ENGINE_SPEC_MTP, .spec_draft_max = 4,
                     .spec_policy = ENGINE_SPEC_POLICY_COST, .spec_probe_budget = 1, .spec_cost_fixed = lin, .spec_cost_n = 9,
                     .spec_draft_cost_fixed = draft, .spec_draft_cost_n = 4};
    engine *es = create_engine(&o);
    if (!es) break;
    for (int i = 0; i < 2; i++) {
      static result res;
      engine_params p = greedy(g_prompts[i], g_np[i], BL_GEN);
      run1(es, &p, &res);
    }
    engine_destroy(es);
  }
  eng_mtp_backlog = -1;
  eng_mtp_test_hook = NULL;
  int same = 0, late = 0, diff = 0, missing = 0;
  for (int w = 0; w < 2; w++)
    for (int f = 0; f < 256; f++) {
      if (g_bl_n[0][w][f] != g_bl_n[1][w][f]) missing++; /* proposals in one run only */
      if (!g_bl_n[0][w][f] || g_bl_n[0][w][f] != g_bl_n[1][w][f]) continue;
      const int k = g_bl_n[0][w][f] < 4 ? g_bl_n[0][w][f] : 4;
      if (memcmp(g_bl_prop[0][w][f], g_bl_prop[1][w][f], (size_t)k * sizeof(int32_t)) != 0) {
        diff++;
        continue;
      }
      same++;
      if (f - g_np[w] >= 8) late++;
    }
  fprintf(stderr, "mtp backlog: %d proposal rounds equal with and without deferred block passes (%d after 8+ "
                  "deferred positions), %d differ, %d in one run only\n", same, late, diff, missing);
  CHECK_EQ_INT(diff, 0);
  CHECK_EQ_INT(missing, 0);
  CHECK_MSG(late > 0, "no probe after a run of deferred positions was compared (%d rounds)", same);
}

/* Priced probes and the engine's acceptance prior, with the cost policy on
 * fixed costs under which proposals pay when most are accepted but not
 * when none are (verification cheap, each block pass a third of a step),
 * and the default probe budget. The block's own proposals (never right
 * here) on two requests: the first starts on the optimistic prior and is
 * declined after a few refused rounds; the second starts from the
 * engine's record of refusals, so it drafts less (probes only, each of a
 * width chosen for its price, spaced so their price stays within the
 * budget), and a request whose next probe would come after its last
 * token stops speculating. Then the oracle that proposes the target's own
 * continuation on the same engine: a probe finds it despite the
 * pessimistic start, and the request speculates (accepted proposals).
 * Always the tokens of decoding without speculation. */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define PR_GEN 48
#else
#define PR_GEN MAX_TOK
#endif
static void test_mtp_priced(void) {
  if (!g_have_alone) return;
  static const double verify[5] = {1, 1.1, 1.2, 1.3, 1.4}, draft[4] = {0.3, 0.6, 0.9, 1.2};
  static result ref[2], got;
  static result saved[2];
  memcpy(saved, g_alone, sizeof saved);
  engine *off = make(2, 64, ENGINE_SPEC_OFF, 0);
  engine_opts o = {.model_path = g_model, .n_threads = 2, .max_active = 2, .max_queue = 4, .n_ctx = 256,
                   .spec_mode = ENGINE_SPEC_MTP, .spec_draft_max = 4, .spec_policy = ENGINE_SPEC_POLICY_COST,
                   .spec_cost_fixed = verify, .spec_cost_n = 5, .spec_draft_cost_fixed = draft, .spec_draft_cost_n = 4};
  engine *es = off ? create_engine(&o) : NULL;
  if (!off || !es) goto out;
  for (int i = 0; i < 2; i++) {
    engine_params p = greedy(g_prompts[i], g_np[i], PR_GEN);
    run1(off, &p, &ref[i]);
    g_alone[i] = ref[i]; /* the oracle's continuation */
  }
  eng_mtp_test_hook = oracle_hook;
  g_oracle = ORACLE_NONE;
  int drafted[2];
  engine_stats st;
  for (int i = 0; i < 2; i++) {
    engine_params p = greedy(g_prompts[i], g_np[i], PR_GEN);
    run1(es, &p, &got);
    CHECK_MSG(same_done(&ref[i], &got), "priced probes: request %d differs with MTP speculation", i);
    drafted[i] = got.usage.spec_drafted;
    engine_get_stats(es, &st);
    fprintf(stderr,
            "mtp priced probes, block's own proposals, request %d: %d tokens in %d passes, drafted %d accepted %d; "
            "engine: %llu probes, %llu verification rounds, %llu block passes drafting, %llu over the backlog, "
            "%llu stopped speculating\n",
            i, got.n_tok, got.usage.target_passes, got.usage.spec_drafted, got.usage.spec_accepted,
            (unsigned long long)st.spec_probes_total, (unsigned long long)st.spec_rounds_total,
            (unsigned long long)st.spec_draft_passes_total, (unsigned long long)st.spec_draft_catchup_total,
            (unsigned long long)st.spec_fallbacks_total);
  }
  CHECK_MSG(drafted[1] < drafted[0], "the engine's record of refusals did not make the second request draft less "
                                     "(%d, then %d proposals)", drafted[0], drafted[1]);
  /* probes of 1 + 2 entries (the width that would pay best at the prior
   * rate) priced at 0.8 steps at most: at least 0.8 / 0.015 steps apart
   * once the request's own rate is gone, so a handful in 2 x PR_GEN */
  CHECK_MSG(st.spec_probes_total <= 6, "%llu probes", (unsigned long long)st.spec_probes_total);
  CHECK(st.spec_fallbacks_total >= 1);
  g_oracle = ORACLE_ALL;
  engine_params p = greedy(g_prompts[0], g_np[0], PR_GEN);
  run1(es, &p, &got);
  CHECK_MSG(same_done(&ref[0], &got), "priced probes: the oracle's request differs with MTP speculation");
  fprintf(stderr, "mtp priced probes, oracle all right: %d tokens in %d passes, drafted %d accepted %d\n", got.n_tok,
          got.usage.target_passes, got.usage.spec_drafted, got.usage.spec_accepted);
  CHECK_MSG(got.usage.spec_accepted >= PR_GEN / 4 && got.usage.target_passes < got.n_tok,
            "a drafter that is right again was not found: %d accepted, %d tokens in %d passes",
            got.usage.spec_accepted, got.n_tok, got.usage.target_passes);
out:
  eng_mtp_test_hook = NULL;
  g_oracle = ORACLE_NONE;
  memcpy(g_alone, saved, sizeof saved);
  engine_destroy(off);
  engine_destroy(es);
}

int main(void) {
  snprintf(g_model, sizeof g_model, "/tmp/pw_test_qwen35_%d.gguf", (int)getpid());
  double t0 = pw_now_s();
  if (synth("qwen3.5-0.8b", "Q8_0", "--layers 4") == 0) {
    test_model_state(1);
    test_engine_invariance_and_spec();
    test_mtp();
    test_mtp_backlog();
    test_mtp_priced();
    test_prefix_cache();
    fprintf(stderr, "qwen35 checks in %.1fs\n", pw_now_s() - t0);
  }
  unlink(g_model);
  t0 = pw_now_s();
  if (synth("qwen3.5-35b-a3b", "Q4_0", "--layers 4 --experts 10") == 0) {
    test_moe();
    fprintf(stderr, "qwen35moe checks in %.1fs\n", pw_now_s() - t0);
  }
  unlink(g_model);
  TEST_DONE();
}
