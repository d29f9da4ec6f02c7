/* test_engine_cache.c - the engine's keyed prefix cache on a trained model
 * (codelm-py-Q8_0): reuse gives byte-identical output to an engine without
 * a cache, a second turn evaluates only what is new, entries are evicted by
 * count, bytes and idle time, keys never share, an entry in use is never
 * shared by concurrent requests, and the cache works together with
 * speculation; reuse and speculation also on synthesized files of every
 * architecture the shared models do not reach (gpt-oss's local layer's
 * ring keeps reuse exact or makes it a miss). Every wait has a timeout. */
#include "base/clock.h"
#include "engine/engine.h"
#include "tensor/dtype.h"
#include "tok/tok.h"
#include "test.h"

#include <unistd.h>

#define WAIT_MS 120000
#define MAX_TOK 256
#include "engine_util.h"

#if defined(__SANITIZE_THREAD__)
#define TSAN 1 /* ThreadSanitizer: fewer speculation modes */
#define GEN 8
#elif defined(__SANITIZE_ADDRESS__)
#define TSAN 0
#define GEN 12
#else
#define TSAN 0
#define GEN 24
#endif

static const char *k_model = POWER_SHARED_DIR "/models/codelm-py-Q8_0.gguf";

/* the KV cache types of the engines made (0: F16) */
static uint32_t g_kv_k, g_kv_v;

static engine *make_failing(int entries, size_t bytes, double ttl, int spec_mode, long fail_pass) {
  engine_opts o = {.fail_pass = fail_pass, .model_path = k_model, .n_threads = 2, .max_active = 2, .max_queue = 8, .n_ctx = 256,
                   .kv_type_k = g_kv_k, .kv_type_v = g_kv_v,
                   .step_tokens = 64, .prompt_cache_entries = entries, .prompt_cache_bytes = bytes,
                   .prompt_cache_ttl_s = ttl, .spec_mode = spec_mode,
                   /* widths from acceptance alone: the cost policy's depend on
                    * timings, and test_failed_pass counts passes */
                   .spec_policy = ENGINE_SPEC_POLICY_ACCEPTANCE,
                   .spec_draft_model = POWER_SHARED_DIR "/models/codelm-py-draft-F32.gguf"};
  return create_engine(&o);
}

static engine *make(int entries, size_t bytes, double ttl, int spec_mode) {
  return make_failing(entries, bytes, ttl, spec_mode, 0);
}

static engine_params params(const int32_t *prompt, int n, int max_tokens, const char *key, bool sampled) {
  engine_params p = base_params(prompt, n, max_tokens);
  p.sampling.temperature = sampled ? 0.8f : 0.0f;
  p.sampling.top_p = 0.95f;
  p.sampling.repeat_penalty = 1.1f;
  p.sampling.seed = 42;
  if (key) {
    p.has_cache_key = true;
    /* The server passes a digest; any 32 bytes do here. */
    snprintf((char *)p.cache_key, sizeof p.cache_key, "%s", key);
  }
  return p;
}

static const char *k_turn1 =
    "import os\nimport sys\n\n\ndef main(argv):\n    \"\"\"Entry point.\"\"\"\n    if len(argv) < 2:\n";
static const char *k_turn2 = "\n\n\ndef helper(path):\n    if os.path.exists(path):\n";
static const char *k_other = "class Point:\n    def __init__(self, x, y):\n";

/* Reuse, multi-turn, keys, statistics; spec_mode 0 or with speculation. */
static void test_reuse(int spec_mode) {
  engine *c = make(4, 0, 0, spec_mode), *u = make(-1, 0, 0, ENGINE_SPEC_OFF);
  if (!c || !u) goto out;
  static int32_t p1[256], p2[256];
  int n1 = encode(c, k_turn1, p1, 256);
  static result a, b, ref, t2, t2ref, s1, s2, sref;
  for (int pass = 0; pass < 2; pass++) {
    engine_params p = params(p1, n1, GEN, "conv-1", false);
    run1(c, &p, pass == 0 ? &a : &b);
  }
  engine_params p = params(p1, n1, GEN, NULL, false);
  run1(u, &p, &ref);
  CHECK_EQ_INT(a.usage.cached_tokens, 0);
  CHECK_EQ_INT(b.usage.cached_tokens, n1 - 1); /* the whole prompt but its last token */
  CHECK_MSG(same_done(&a, &ref) && same_done(&b, &ref), "cached output differs (%d, %d, %d tokens)", a.n_tok,
            b.n_tok, ref.n_tok);

  /* Turn 2: the conversation so far plus a new part; only the new part and
   * the last generated token are evaluated. */
  int n2 = 0;
  memcpy(p2, p1, (size_t)n1 * sizeof *p2);
  n2 = n1;
  memcpy(p2 + n2, b.tok, (size_t)b.n_tok * sizeof *p2);
  n2 += b.n_tok;
  int n_new = encode_ex(c, k_turn2, p2 + n2, 256 - n2, false);
  n2 += n_new;
  CHECK(n_new > 5 && n2 + GEN <= 256);
  p = params(p2, n2, GEN, "conv-1", true);
  run1(c, &p, &t2);
  p.has_cache_key = false;
  run1(u, &p, &t2ref);
  CHECK_EQ_INT(t2.usage.cached_tokens, n1 + b.n_tok - 1);
  CHECK_MSG(same_done(&t2, &t2ref), "turn 2 differs with reuse (%d vs %d tokens)", t2.n_tok, t2ref.n_tok);
  fprintf(stderr, "  %s turn 2: %d prompt tokens, %d reused, %d evaluated\n", engine_spec_name(spec_mode), n2,
          t2.usage.cached_tokens, n2 - t2.usage.cached_tokens);

  /* Another key never sees conv-1's entry, even with the same prompt. */
  p = params(p1, n1, GEN, "conv-2", true);
  run1(c, &p, &s1);
  run1(c, &p, &s2);
  p.has_cache_key = false;
  run1(u, &p, &sref);
  CHECK_EQ_INT(s1.usage.cached_tokens, 0);
  CHECK_EQ_INT(s2.usage.cached_tokens, n1 - 1);
  CHECK(same_done(&s1, &sref) && same_done(&s2, &sref));

  engine_stats st;
  engine_get_stats(c, &st);
  CHECK_EQ_INT(st.cache_requests_total, 5);
  CHECK_EQ_INT(st.cache_hits_total, 3);
  CHECK_EQ_INT(st.cache_misses_total, 2);
  CHECK_EQ_INT(st.cache_reused_tokens_total, (uint64_t)(2 * (n1 - 1) + t2.usage.cached_tokens));
  CHECK_EQ_INT(st.cache_evaluated_tokens_total, (uint64_t)(4 * n1 + n2) - st.cache_reused_tokens_total);
  CHECK_EQ_INT(st.cache_entries, 2);
  CHECK_EQ_INT(st.cache_evictions_total, 0);
  CHECK(st.cache_bytes > 0);
  if (spec_mode != ENGINE_SPEC_OFF) CHECK(st.spec_rounds_total > 0);
out:
  engine_destroy(c);
  engine_destroy(u);
}

/* The longest common prefix of the entry a request left (its prompt and
 * output but the last token) and a new prompt, as the cache keeps it (at
 * least the prompt's last token is evaluated). */
static int common_prefix(const int32_t *pr, int np, const result *out, const int32_t *q, int nq) {
  const int ne = np + out->n_tok - 1;
  int c = 0;
  while (c < ne && c < nq - 1 && (c < np ? pr[c] : out->tok[c - np]) == q[c]) c++;
  return c;
}

/* A sliding-window layer in a ring (gpt-oss's window of 4, step_tokens 8:
 * a ring of 11 positions): a new turn that cuts the entry back by at most
 * a pass is reused; one that keeps only an early part of it is a miss (the
 * ring no longer holds that part's window), never an approximate state.
 * Outputs against an engine that keeps every position of every layer
 * (step_tokens = n_ctx: a ring would be no smaller); the KV bytes
 * reported are the smaller cache's. With swa_full the local layer keeps
 * every position (the full layer's bytes) and the far turn is reused. */
static void test_ring_reuse(void) {
  engine_opts o = {.model_path = k_model, .n_threads = 2, .max_active = 2, .max_queue = 8, .n_ctx = 256,
                   .step_tokens = 8, .prompt_cache_entries = 2};
  engine *c = create_engine(&o), *f = NULL;
  o.step_tokens = 256;
  o.prompt_cache_entries = -1; /* none: its 2 sequences below */
  engine *u = create_engine(&o);
  if (!c || !u) goto out;
  engine_stats sc, su;
  engine_get_stats(c, &sc);
  engine_get_stats(u, &su);
  /* per sequence: the full layer's 256 positions and the ring's 14 rows
   * against 2 x 256 (c has 4 sequences, u 2) */
  CHECK_MSG(sc.kv_bytes_total / 4 * 10 < su.kv_bytes_total / 2 * 6 && sc.kv_bytes_total == sc.kv_bytes_f16,
            "KV bytes: %zu with a ring (4 sequences), %zu full (2)", sc.kv_bytes_total, su.kv_bytes_total);
  static int32_t p1[256], p2[256], p3[256];
  static result a, b, bref, d, dref;
  int n1 = encode(c, k_turn1, p1, 256);
  engine_params p = params(p1, n1, GEN, "ring", false);
  run1(c, &p, &a);
  CHECK(a.end == ENGINE_EV_DONE && a.n_tok > 4);
  /* near: the conversation but its last three tokens, then turn 2 */
  int n2 = n1;
  memcpy(p2, p1, (size_t)n1 * sizeof *p2);
  memcpy(p2 + n2, a.tok, (size_t)(a.n_tok - 3) * sizeof *p2);
  n2 += a.n_tok - 3;
  n2 += encode_ex(c, k_turn2, p2 + n2, 256 - GEN - n2, false);
  const int c2 = common_prefix(p1, n1, &a, p2, n2);
  p = params(p2, n2, GEN, "ring", true);
  run1(c, &p, &b);
  p.has_cache_key = false;
  run1(u, &p, &bref);
  CHECK_MSG(c2 >= n1 + a.n_tok - 4 && b.usage.cached_tokens == c2, "near turn: %d reused, %d in common",
            b.usage.cached_tokens, c2);
  CHECK_MSG(same_done(&b, &bref), "near turn differs with reuse (%d vs %d tokens)", b.n_tok, bref.n_tok);
  /* far: only the first half of turn 1 in common */
  int n3 = n1 / 2;
  memcpy(p3, p1, (size_t)n3 * sizeof *p3);
  n3 += encode_ex(c, k_other, p3 + n3, 256 - GEN - n3, false);
  CHECK(common_prefix(p2, n2, &b, p3, n3) + 8 < n2 + b.n_tok - 1);
  p = params(p3, n3, GEN, "ring", true);
  run1(c, &p, &d);
  p.has_cache_key = false;
  run1(u, &p, &dref);
  CHECK_MSG(d.usage.cached_tokens == 0, "far turn: %d reused", d.usage.cached_tokens);
  CHECK_MSG(same_done(&d, &dref), "far turn differs (%d vs %d tokens)", d.n_tok, dref.n_tok);
  engine_get_stats(c, &sc);
  CHECK_EQ_INT(sc.cache_hits_total, 1);
  CHECK_EQ_INT(sc.cache_misses_total, 2);
  /* the entry's bytes: the full layer's positions, the ring's at most its size */
  CHECK(sc.cache_bytes > 0 && sc.cache_bytes < (size_t)(n3 + GEN) * (su.kv_bytes_total / 2 / 256));
  /* swa_full: the same passes, the local layer kept whole; the far turn
   * now reuses its common prefix, with the same output */
  o.step_tokens = 8;
  o.prompt_cache_entries = 2;
  o.swa_full = true;
  f = create_engine(&o);
  if (!f) goto out;
  engine_stats sf;
  engine_get_stats(f, &sf);
  /* 4 sequences of 256 + 256 rows against 256 + 14 */
  CHECK_MSG(sf.kv_bytes_total / 512 == sc.kv_bytes_total / 270 && sf.kv_bytes_total / 4 == su.kv_bytes_total / 2,
            "KV bytes: %zu with swa_full, %zu with a ring (4 sequences each), %zu full (2)", sf.kv_bytes_total,
            sc.kv_bytes_total, su.kv_bytes_total);
  static result af, df;
  p = params(p1, n1, GEN, "ring", false);
  run1(f, &p, &af);
  CHECK(same_done(&af, &a));
  const int c3 = common_prefix(p1, n1, &af, p3, n3);
  p = params(p3, n3, GEN, "ring", true);
  run1(f, &p, &df);
  CHECK_MSG(c3 >= n1 / 2 && df.usage.cached_tokens == c3, "swa_full far turn: %d reused, %d in common",
            df.usage.cached_tokens, c3);
  CHECK_MSG(same_done(&df, &dref), "swa_full far turn differs with reuse (%d vs %d tokens)", df.n_tok, dref.n_tok);
out:
  engine_destroy(c);
  engine_destroy(u);
  engine_destroy(f);
}

/* Two requests of the same key at once: one takes the entry, the other
 * runs uncached; both give the reference output. */
static void test_in_use(void) {
  engine *c = make(4, 0, 0, ENGINE_SPEC_OFF);
  if (!c) return;
  static int32_t p1[256];
  int n1 = encode(c, k_turn1, p1, 256);
  static result warm, x, y, ref;
  engine_params p = params(p1, n1, GEN, "shared", false);
  run1(c, &p, &warm);
  engine_req *r1 = NULL, *r2 = NULL;
  char err[PW_ERRMAX];
  CHECK_EQ_INT(engine_submit(c, &p, &r1, err), 0);
  CHECK_EQ_INT(engine_submit(c, &p, &r2, err), 0);
  if (r1) collect(r1, &x);
  if (r2) collect(r2, &y);
  engine_release(r1);
  engine_release(r2);
  CHECK(same_done(&x, &warm) && same_done(&y, &warm));
  CHECK_MSG((x.usage.cached_tokens == 0) != (y.usage.cached_tokens == 0), "cached %d and %d",
            x.usage.cached_tokens, y.usage.cached_tokens);
  CHECK_EQ_INT(x.usage.cached_tokens + y.usage.cached_tokens, n1 - 1);
  /* Still one entry for the key, and it is reused afterwards. */
  engine_stats st;
  engine_get_stats(c, &st);
  CHECK_EQ_INT(st.cache_entries, 1);
  run1(c, &p, &ref);
  CHECK_EQ_INT(ref.usage.cached_tokens, n1 - 1);
  CHECK(same_done(&ref, &warm));
  engine_destroy(c);
}

static int hit(engine *e, const int32_t *pr, int n, const char *key) {
  engine_params p = params(pr, n, 4, key, false);
  static result r;
  run1(e, &p, &r);
  CHECK_EQ_INT(r.end, ENGINE_EV_DONE);
  return r.usage.cached_tokens;
}

static void test_eviction(void) {
  static int32_t pa[256], pb[256], pc[256];
  /* By count: two entries; a third key evicts the least recently used. */
  engine *e = make(2, 0, 0, ENGINE_SPEC_OFF);
  if (!e) return;
  int na = encode(e, k_turn1, pa, 256), nb = encode(e, k_other, pb, 256);
  int nc = encode(e, k_turn2, pc, 256);
  CHECK_EQ_INT(hit(e, pa, na, "a"), 0);
  CHECK_EQ_INT(hit(e, pb, nb, "b"), 0);
  CHECK_EQ_INT(hit(e, pa, na, "a"), na - 1); /* a is now the most recent */
  CHECK_EQ_INT(hit(e, pc, nc, "c"), 0);      /* evicts b */
  CHECK_EQ_INT(hit(e, pa, na, "a"), na - 1);
  CHECK_EQ_INT(hit(e, pb, nb, "b"), 0);
  engine_stats st;
  engine_get_stats(e, &st);
  CHECK_EQ_INT(st.cache_entries, 2);
  CHECK_EQ_INT(st.cache_evictions_total, 2); /* b, then c */
  /* Bytes of one entry: its positions (prompt + 4 - 1) times per-position KV. */
  engine_destroy(e);
  e = make(4, 0, 0, ENGINE_SPEC_OFF);
  if (!e) return;
  hit(e, pa, na, "a");
  engine_get_stats(e, &st);
  size_t per = st.cache_bytes / (size_t)(na + 3);
  CHECK(per > 0 && per * (size_t)(na + 3) == st.cache_bytes);
  CHECK_EQ_INT(st.kv_bytes_in_use, st.cache_bytes);
  engine_destroy(e);

  /* By bytes: room for a's entry but not for a's and b's together. */
  e = make(4, per * (size_t)(na + 3 + 2), 0, ENGINE_SPEC_OFF);
  if (!e) return;
  CHECK_EQ_INT(hit(e, pa, na, "a"), 0);
  CHECK_EQ_INT(hit(e, pa, na, "a"), na - 1);
  CHECK_EQ_INT(hit(e, pb, nb, "b"), 0); /* evicts a */
  CHECK_EQ_INT(hit(e, pb, nb, "b"), nb - 1);
  CHECK_EQ_INT(hit(e, pa, na, "a"), 0);
  engine_get_stats(e, &st);
  CHECK_EQ_INT(st.cache_entries, 1);
  CHECK(st.cache_bytes <= per * (size_t)(na + 5));
  CHECK_EQ_INT(st.cache_evictions_total, 2);
  engine_destroy(e);

  /* By idle time: the entry leaves on its own. */
  e = make(4, 0, 0.2, ENGINE_SPEC_OFF);
  if (!e) return;
  CHECK_EQ_INT(hit(e, pa, na, "a"), 0);
  CHECK_EQ_INT(hit(e, pa, na, "a"), na - 1);
  bool gone = false;
  for (int i = 0; i < 300 && !gone; i++) { /* bounded: 3 s */
    usleep(10000);
    engine_get_stats(e, &st);
    gone = st.cache_entries == 0;
  }
  CHECK_MSG(gone, "the entry did not expire");
  CHECK_EQ_INT(st.cache_evictions_total, 1);
  CHECK_EQ_INT(st.cache_bytes, 0);
  CHECK_EQ_INT(hit(e, pa, na, "a"), 0);
  CHECK(wait_idle(e));
  engine_destroy(e);
}

/* Per-owner quotas: an owner at its entry quota evicts its own oldest
 * entry, never another owner's, within the global bounds. */
static void test_owner_quota(void) {
  static int32_t pa[256], pb[256], pc[256];
  engine_opts o = {.model_path = k_model, .n_threads = 2, .max_active = 2, .max_queue = 8, .n_ctx = 256,
                   .step_tokens = 64, .prompt_cache_entries = 4, .prompt_cache_owner_entries = 1};
  engine *e = create_engine(&o);
  if (!e) return;
  int na = encode(e, k_turn1, pa, 256), nb = encode(e, k_other, pb, 256), nc = encode(e, k_turn2, pc, 256);
  engine_params p;
  static result r;
  /* Owner 1 stores a; owner 2 stores b then c: c replaces b (owner 2's
   * quota is one), a stays. */
  p = params(pa, na, 4, "a", false);
  p.cache_owner[0] = 1;
  run1(e, &p, &r);
  p = params(pb, nb, 4, "b", false);
  p.cache_owner[0] = 2;
  run1(e, &p, &r);
  p = params(pc, nc, 4, "c", false);
  p.cache_owner[0] = 2;
  run1(e, &p, &r);
  engine_stats st;
  engine_get_stats(e, &st);
  CHECK_EQ_INT(st.cache_entries, 2);
  CHECK_EQ_INT(st.cache_evictions_total, 1);
  p = params(pa, na, 4, "a", false);
  p.cache_owner[0] = 1;
  run1(e, &p, &r);
  CHECK_EQ_INT(r.usage.cached_tokens, na - 1); /* owner 1's entry survived owner 2 */
  p = params(pb, nb, 4, "b", false);
  p.cache_owner[0] = 2;
  run1(e, &p, &r);
  CHECK_EQ_INT(r.usage.cached_tokens, 0); /* b was owner 2's oldest */
  CHECK(wait_idle(e));
  engine_destroy(e);
  /* Byte quota: room for one of an owner's entries. */
  e = make(4, 0, 0, ENGINE_SPEC_OFF);
  if (!e) return;
  hit(e, pa, na, "a");
  engine_get_stats(e, &st);
  size_t per = st.cache_bytes / (size_t)(na + 3);
  engine_destroy(e);
  o.prompt_cache_owner_entries = 0;
  o.prompt_cache_owner_bytes = per * (size_t)(na + 3 + 2);
  e = create_engine(&o);
  if (!e) return;
  p = params(pa, na, 4, "a", false);
  p.cache_owner[0] = 3;
  run1(e, &p, &r);
  p = params(pb, nb, 4, "b", false);
  p.cache_owner[0] = 3;
  run1(e, &p, &r); /* evicts a: owner 3 holds only one entry's bytes */
  p = params(pc, nc, 4, "c", false);
  p.cache_owner[0] = 4;
  run1(e, &p, &r); /* another owner: no eviction */
  engine_get_stats(e, &st);
  CHECK_EQ_INT(st.cache_entries, 2);
  CHECK_EQ_INT(st.cache_evictions_total, 1);
  CHECK(wait_idle(e));
  engine_destroy(e);
}

/* A cancelled request keeps what it committed; caching never lowers the
 * number of requests that run at once. */
static void test_cancel_and_capacity(void) {
  engine *e = make(2, 0, 0, ENGINE_SPEC_OFF);
  if (!e) return;
  static int32_t pa[256], pb[256];
  int na = encode(e, k_turn1, pa, 256), nb = encode(e, k_other, pb, 256);
  hit(e, pa, na, "a");
  hit(e, pb, nb, "b"); /* two idle entries */
  engine_params p = params(pa, na, 0, "a", false);
  engine_params q = params(pb, nb, 0, NULL, false);
  engine_req *r1 = NULL, *r2 = NULL;
  char err[PW_ERRMAX];
  CHECK_EQ_INT(engine_submit(e, &p, &r1, err), 0);
  CHECK_EQ_INT(engine_submit(e, &q, &r2, err), 0);
  engine_event ev;
  CHECK(r1 && engine_next(r1, &ev, WAIT_MS) == 0 && ev.type == ENGINE_EV_TOKEN);
  CHECK(r2 && engine_next(r2, &ev, WAIT_MS) == 0 && ev.type == ENGINE_EV_TOKEN);
  engine_stats st;
  engine_get_stats(e, &st);
  CHECK_EQ_INT(st.active, 2); /* both run beside the cache */
  engine_cancel(r1);
  engine_cancel(r2);
  static result x;
  collect(r1, &x);
  CHECK_EQ_INT(x.finish, ENGINE_FINISH_CANCEL);
  engine_release(r1);
  engine_release(r2);
  CHECK(wait_idle(e));
  CHECK(hit(e, pa, na, "a") == na - 1);
  engine_destroy(e);
}

/* A forward pass that fails in the middle of a keyed request that reused
 * an entry (also with n-gram speculation on): the request ends
 * with an error after tokens that are a prefix of the unfailed output, the
 * key's entry is dropped (the next request with the key reuses nothing),
 * and the engine carries on: the next request gives exactly the unfailed
 * output. */
static void test_failed_pass(int spec_mode) {
  static int32_t pa[256];
  static result ref1, ref2, x, y;
  engine *e = make(4, 0, 0, spec_mode);
  if (!e) return;
  int na = encode(e, k_turn1, pa, 256);
  engine_params p = params(pa, na, GEN, "a", false);
  run1(e, &p, &ref1);
  run1(e, &p, &ref2); /* the same request, reusing the entry */
  engine_destroy(e);
  CHECK(same_done(&ref1, &ref2) && ref2.usage.cached_tokens > 0);
  /* passes are deterministic: fail the third pass of the second request */
  const long fail = ref1.usage.target_passes + 3;
  CHECK(ref2.usage.target_passes > 3);
  e = make_failing(4, 0, 0, spec_mode, fail);
  if (!e) return;
  run1(e, &p, &x);
  CHECK(same_done(&x, &ref1));
  run1(e, &p, &x);
  CHECK_EQ_INT(x.end, ENGINE_EV_ERROR);
  CHECK(x.n_tok >= 1 && x.n_tok < ref2.n_tok && memcmp(x.tok, ref2.tok, sizeof x.tok[0] * (size_t)x.n_tok) == 0);
  CHECK(wait_idle(e));
  engine_stats st;
  engine_get_stats(e, &st);
  CHECK_EQ_INT(st.cache_entries, 0);
  run1(e, &p, &y);
  CHECK_EQ_INT(y.usage.cached_tokens, 0);
  CHECK_MSG(same_done(&y, &ref1), "after a failed pass (spec %d)", spec_mode);
  engine_destroy(e);
}

/* Reuse and turn 2, plain and speculative, over each synthesized
 * architecture (engine_util.h's k_synth; the sanitizer builds take the
 * first N_SYNTH_SANITIZER); gpt-oss's local layer's ring also reaches back into reused
 * rows (test_ring_reuse). */
static void synth_reuse(const synth_case *sc) {
  if (GEN < 24 && sc - k_synth >= N_SYNTH_SANITIZER) return;
  char path[256];
  if (!synth_file(sc, "cache", path, sizeof path)) return;
  const char *saved = k_model;
  k_model = path;
  fprintf(stderr, "  %s (synth):\n", sc->arch);
  test_reuse(ENGINE_SPEC_OFF);
  /* random weights repeat their own output only in longer runs: the
   * n-gram drafter proposes within GEN tokens only at full length */
  if (GEN >= 24) test_reuse(ENGINE_SPEC_NGRAM);
  if (strcmp(sc->arch, "gpt-oss-20b") == 0) test_ring_reuse(); /* its byte counts are gpt-oss's layers */
  k_model = saved;
  unlink(path);
}

int main(void) {
  if (!have_model(k_model)) return 1;
  double t0 = pw_now_s();
  test_reuse(ENGINE_SPEC_OFF);
  test_reuse(ENGINE_SPEC_PROMPT_LOOKUP);
  test_failed_pass(ENGINE_SPEC_OFF);
  test_failed_pass(ENGINE_SPEC_NGRAM);
  if (!TSAN) {
    test_reuse(ENGINE_SPEC_NGRAM);
    test_reuse(ENGINE_SPEC_DRAFT);
  }
  /* Reuse stays exact with quantized KV caches: an entry's rows are
   * copied, never recomputed differently (reference: the same types
   * without reuse). */
  static const uint32_t kv_types[][2] = {{PW_DT_Q8_0, PW_DT_Q8_0}, {PW_DT_Q4_0, PW_DT_Q4_0}, {PW_DT_Q8_0, PW_DT_F16}};
  for (int i = 0; i < (TSAN ? 1 : 3); i++) {
    g_kv_k = kv_types[i][0];
    g_kv_v = kv_types[i][1];
    fprintf(stderr, "  KV types %u/%u:\n", kv_types[i][0], kv_types[i][1]);
    test_reuse(ENGINE_SPEC_OFF);
    if (!TSAN) test_reuse(i == 0 ? ENGINE_SPEC_DRAFT : ENGINE_SPEC_PROMPT_LOOKUP);
  }
  g_kv_k = g_kv_v = 0;
  if (!TSAN)
    for (int i = 0; i < N_SYNTH; i++) synth_reuse(&k_synth[i]);
  fprintf(stderr, "  reuse: %.2fs\n", pw_now_s() - t0);
  test_in_use();
  test_eviction();
  test_owner_quota();
  test_cancel_and_capacity();
  fprintf(stderr, "total %.2fs\n", pw_now_s() - t0);
  TEST_DONE();
}
