/* test_model.c - forward-pass contracts: batch invariance (an entry's logits
 * are bit-identical alone or batched with other sequences), thread-count
 * invariance, KV truncation and replay (rollback), and clean errors for bad
 * batches and bad models, sliding-window layers in rings against the full
 * cache; for llama, qwen2, qwen3, gemma3, qwen3moe,
 * qwen2moe, gpt-oss, gemma2, smollm3, granite and mistral3. */
#include "base/clock.h"
#include "base/error.h"
#include "model/model.h"
#include "test.h"

#include <unistd.h>

static const int32_t k_prompt[] = {1, 9038, 2501, 263, 931, 29892, 727, 471, 263, 2217};
#define NP 10

static float *run_alone(model *m, int threads_tag, int *n_vocab) {
  (void)threads_tag;
  const model_hparams *hp = model_hp(m);
  *n_vocab = hp->n_vocab;
  model_kv *kv;
  model_ctx *c;
  char err[PW_ERRMAX];
  CHECK(model_kv_create(m, 1, 64, &kv, err) == 0);
  CHECK(model_ctx_create(m, 16, 64, &c, err) == 0);
  float *lg = malloc(sizeof(float) * hp->n_vocab * NP);
  model_entry e[NP];
  for (int i = 0; i < NP; i++) e[i] = (model_entry){0, i, k_prompt[i], true};
  CHECK_MSG(model_forward(c, kv, e, NP, lg, NULL, err) == 0, "%s", err);
  model_ctx_destroy(c);
  model_kv_destroy(kv);
  return lg;
}

static void test_invariance_path(const char *path, const char *file) {
  char err[PW_ERRMAX];
  model *m1 = NULL, *m2 = NULL;
  model_opts o1 = {.n_threads = 1}, o2 = {.n_threads = 2};
  CHECK_MSG(model_load(path, &o1, &m1, err) == 0, "%s", err);
  if (!m1) return;
  CHECK_MSG(model_load(path, &o2, &m2, err) == 0, "%s", err);
  if (!m2) {
    model_destroy(m1);
    return;
  }
  int V;
  float *a = run_alone(m1, 1, &V);
  float *b = run_alone(m2, 2, &V);
  CHECK_MSG(memcmp(a, b, sizeof(float) * V * NP) == 0, "%s: 1 vs 2 threads differ", file);
  /* Same prompt token by token on seq 2, interleaved with another sequence's
   * tokens in every batch; logits must equal the alone run bit for bit. */
  model_kv *kv;
  model_ctx *c;
  CHECK(model_kv_create(m2, 3, 64, &kv, err) == 0);
  CHECK(model_ctx_create(m2, 16, 64, &c, err) == 0);
  float *lg = malloc(sizeof(float) * V * 3);
  int mismatch = 0;
  for (int i = 0; i < NP; i++) {
    model_entry e[3] = {{0, i, (k_prompt[NP - 1 - i] + 7) % V, true}, {2, i, k_prompt[i], true}, {1, i, 3, false}};
    CHECK_MSG(model_forward(c, kv, e, 3, lg, NULL, err) == 0, "%s", err);
    if (memcmp(lg + V, a + (size_t)i * V, sizeof(float) * V)) mismatch++;
  }
  CHECK_MSG(mismatch == 0, "%s: %d positions differ when batched", file, mismatch);
  /* Rollback: truncate seq 2 to 5 and replay; same logits again. */
  model_kv_truncate(kv, 2, 5);
  CHECK_EQ_INT(model_kv_len(kv, 2), 5);
  model_entry e[5];
  for (int i = 5; i < NP; i++) e[i - 5] = (model_entry){2, i, k_prompt[i], true};
  float *lg5 = malloc(sizeof(float) * V * 5);
  CHECK(model_forward(c, kv, e, 5, lg5, NULL, err) == 0);
  CHECK_MSG(memcmp(lg5, a + (size_t)5 * V, sizeof(float) * V * 5) == 0, "%s: replay after truncate differs", file);
  /* Copy seq 2's first 7 positions into seq 1 and continue from there. */
  model_kv_copy(kv, 1, 2, 7);
  model_entry e7 = {1, 7, k_prompt[7], true};
  CHECK(model_forward(c, kv, &e7, 1, lg, NULL, err) == 0);
  CHECK_MSG(memcmp(lg, a + (size_t)7 * V, sizeof(float) * V) == 0, "%s: continuing a copied KV differs", file);
  /* Bad batches: clean errors, cache untouched. */
  int len_before = model_kv_len(kv, 2);
  model_entry bad_pos = {2, 99, 1, true};
  CHECK(model_forward(c, kv, &bad_pos, 1, lg, NULL, err) == PW_EINVAL && strstr(err, "position"));
  model_entry bad_tok = {2, len_before, V + 5, true};
  CHECK(model_forward(c, kv, &bad_tok, 1, lg, NULL, err) == PW_EINVAL && strstr(err, "token"));
  model_entry bad_seq = {7, 0, 1, true};
  CHECK(model_forward(c, kv, &bad_seq, 1, lg, NULL, err) == PW_EINVAL);
  CHECK_EQ_INT(model_kv_len(kv, 2), len_before);
  model_kv_truncate(kv, 0, 0);
  model_entry full[16];
  int over = 0;
  for (int i = 0; i < 64 + 1 && over == 0; i += 16) {
    int n = 0;
    for (int k = 0; k < 16; k++) full[n++] = (model_entry){0, i + k, 5, false};
    over = model_forward(c, kv, full, n, NULL, NULL, err);
  }
  CHECK_MSG(over == PW_ECONTEXT, "context overflow gives %d", over);
  free(lg5);
  free(lg);
  free(a);
  free(b);
  model_ctx_destroy(c);
  model_kv_destroy(kv);
  model_destroy(m1);
  model_destroy(m2);
}

/* Sliding-window layers in rings (model_kv_opts.max_pass) against the
 * full cache, the same batches into both: two sequences advanced in passes
 * of 1..max_pass positions to 10 windows, rolled back by up to a pass and
 * replayed with other tokens (speculative rollback), a sequence copy
 * (prefix reuse), a snapshot restored after the ring wrapped; every final
 * hidden state the same bits. A cut further back than the ring keeps is refused, never
 * approximated. max_pass above the window: prefill chunks longer than it. */
#define RING_LEN 36
static void test_swa_ring_mp(model *m, const char *file, int max_pass) {
  char err[PW_ERRMAX];
  /* the final hidden states stand for the logits (a function of them
   * alone) without the output matmul over the vocabulary */
  const int V = model_hp(m)->n_embd;
  model_kv *kf = NULL, *kr = NULL;
  model_ctx *c = NULL;
  const model_kv_opts ko = {.max_pass = max_pass};
  CHECK(model_kv_create(m, 2, 128, &kf, err) == 0);
  CHECK_MSG(model_kv_create_ex(m, 2, 128, &ko, &kr, err) == 0, "%s", err);
  CHECK(model_ctx_create(m, 2 * max_pass, 128, &c, err) == 0);
  if (!kf || !kr || !c) goto done;
  CHECK_MSG(model_kv_ring_layers(kr) > 0 && model_kv_ring_layers(kf) == 0, "%s: no ring layers", file);
  CHECK_MSG(model_kv_bytes(kr) < model_kv_bytes(kf), "%s: ring cache of %zu bytes, full %zu", file,
            model_kv_bytes(kr), model_kv_bytes(kf));
  CHECK(model_kv_seq_bytes(kr, 60) < model_kv_seq_bytes(kf, 60) && model_kv_seq_bytes(kr, 1) == model_kv_seq_bytes(kf, 1));
  float *lf = malloc(sizeof(float) * (size_t)V * 2 * max_pass), *lr = malloc(sizeof(float) * (size_t)V * 2 * max_pass);
  model_entry e[64];
  uint32_t x = 12345;
  int mism = 0, steps = 0, rolled = 0;
#define RND(n) ((x = x * 1103515245u + 12345u), (int)((x >> 16) % (uint32_t)(n)))
  while (model_kv_len(kr, 0) < RING_LEN && steps++ < 200) {
    int n = 0, ns[2];
    for (int s = 0; s < 2; s++) {
      ns[s] = 1 + RND(max_pass);
      for (int i = 0; i < ns[s]; i++) {
        const int pos = model_kv_len(kr, s) + i;
        e[n++] = (model_entry){s, pos, 1 + (pos * 131 + steps * 7 + s) % 30000, true};
      }
    }
    int rf = model_forward(c, kf, e, n, NULL, lf, err), rr = model_forward(c, kr, e, n, NULL, lr, err);
    CHECK_MSG(rf == 0 && rr == 0, "%s: %s", file, err);
    if (rf || rr) break;
    if (memcmp(lf, lr, sizeof(float) * (size_t)V * n)) mism++;
    /* every other step, roll a sequence back by up to its pass */
    const int s = steps % 2, r = RND(ns[s] + 1);
    if (r > 0 && steps % 2 == 0) {
      const int to = model_kv_len(kr, s) - r;
      CHECK(model_kv_truncate_exact(kr, s, to));
      model_kv_truncate(kf, s, to);
      model_kv_truncate(kr, s, to);
      rolled++;
    }
  }
  CHECK_MSG(mism == 0 && rolled > 3, "%s, max_pass %d: %d of %d passes differ from the full cache (%d rollbacks)", file,
            max_pass, mism, steps, rolled);
  /* prefix reuse: seq 0's first len positions into seq 1, both continue */
  const int len = model_kv_len(kr, 0);
  model_kv_copy(kf, 1, 0, len);
  model_kv_copy(kr, 1, 0, len);
  CHECK(model_kv_seq_exact(kr, 1));
  /* a snapshot of seq 1, then past a whole ring, then restored */
  void *snap = malloc(model_kv_state_bytes(kr));
  CHECK(model_kv_state_bytes(kr) > 0 && model_kv_state_bytes(kf) == 0);
  model_kv_state_save(kr, 1, snap);
  for (int k = 0; k < 2; k++) {
    const int base = model_kv_len(kr, 1);
    int n = 0;
    for (int i = 0; i < max_pass; i++) e[n++] = (model_entry){1, base + i, 3 + i + 17 * k, true};
    e[n++] = (model_entry){0, len, 11, true};
    for (int i = 0; i < n - 1 && k == 1; i++) e[i].token = 5 + i; /* replay other tokens after the restore */
    CHECK(model_forward(c, kf, e, n, NULL, lf, err) == 0);
    CHECK_MSG(model_forward(c, kr, e, n, NULL, lr, err) == 0, "%s: %s", file, err);
    CHECK_MSG(memcmp(lf, lr, sizeof(float) * (size_t)V * n) == 0, "%s: after a copy (%d) hidden states differ", file, k);
    model_kv_truncate(kf, 0, len);
    model_kv_truncate(kr, 0, len);
    for (int i = 0; k == 0 && i < 3; i++) { /* past the ring: the rows the snapshot holds are overwritten */
      const int b2 = model_kv_len(kr, 1);
      for (int j = 0; j < max_pass; j++) e[j] = (model_entry){1, b2 + j, 7 + j, false};
      CHECK(model_forward(c, kr, e, max_pass, NULL, NULL, err) == 0);
    }
    if (k == 0) {
      CHECK(!model_kv_truncate_exact(kr, 1, len));
      CHECK(model_kv_state_restore(kr, 1, snap, err) == 0 && model_kv_len(kr, 1) == len && model_kv_seq_exact(kr, 1));
      model_kv_truncate(kf, 1, len);
    }
  }
  free(snap);
  /* a cut further back than the ring keeps: refused, exact again from 0 */
  const int deep = model_kv_len(kr, 0) - max_pass - 2;
  CHECK(model_kv_truncate_exact(kf, 0, deep) && !model_kv_truncate_exact(kr, 0, deep));
  model_kv_truncate(kr, 0, deep);
  CHECK(!model_kv_seq_exact(kr, 0));
  model_entry one = {0, deep, 5, true};
  CHECK(model_forward(c, kr, &one, 1, NULL, lr, err) == PW_EINVAL && strstr(err, "window"));
  model_kv_copy(kr, 1, 0, deep);
  CHECK(!model_kv_seq_exact(kr, 1));
  model_kv_truncate(kr, 0, 0);
  CHECK(model_kv_seq_exact(kr, 0));
  /* more positions of a sequence in one pass than the bound: refused */
  for (int i = 0; i <= max_pass; i++) e[i] = (model_entry){0, i, 5, false};
  CHECK(model_forward(c, kr, e, max_pass + 1, NULL, NULL, err) == PW_EINVAL && strstr(err, "one pass"));
  CHECK(model_kv_len(kr, 0) == 0);
#undef RND
  free(lf);
  free(lr);
done:
  model_ctx_destroy(c);
  model_kv_destroy(kf);
  model_kv_destroy(kr);
}

/* max_pass 3: passes shorter than the window of 4; 7: longer. The files
 * are narrow (a hidden size of 256) so each costs about a second even
 * under a sanitizer; gemma2 takes both bounds and the others one each. */
#define RING_SHORT 1
#define RING_LONG 2
static void test_swa_ring(const char *path, const char *file, int which) {
  char err[PW_ERRMAX];
  model *m;
  model_opts o = {.n_threads = 2};
  if (!which) return;
  CHECK_MSG(model_load(path, &o, &m, err) == 0, "%s", err);
  if (!m) return;
  const double t0 = pw_now_s();
  if (which & RING_SHORT) test_swa_ring_mp(m, file, 3);
  if (which & RING_LONG) test_swa_ring_mp(m, file, 7);
  fprintf(stderr, "%s: rings against the full cache in %.2f s\n", file, pw_now_s() - t0);
  model_destroy(m);
}

static void test_bad_model(void) {
  char err[PW_ERRMAX];
  model *m;
  char path[1024];
  /* A vocabulary-only file is a valid GGUF but not a model. */
  snprintf(path, sizeof path, "%s/tokenizer/ggml-vocab-llama-spm.gguf", POWER_SHARED_DIR);
  int rc = model_load(path, NULL, &m, err);
  CHECK_MSG(rc < 0 && m == NULL, "vocab-only file loaded as a model");
  CHECK_MSG(strstr(err, "missing") || strstr(err, "architecture"), "message: %s", err);
}

static void test_invariance(const char *file) {
  char path[1024];
  snprintf(path, sizeof path, "%s/models/%s", POWER_SHARED_DIR, file);
  test_invariance_path(path, file);
}

/* Gemma 3 with a window of 4 over the 10 positions (five local layers and
 * a global one): the windowed attention goes per token, batched or not. */
static void test_invariance_gemma3(void) {
  char path[256], cmd[1024];
  snprintf(path, sizeof path, "/tmp/pw_test_model_gemma3_%d.gguf", (int)getpid());
  snprintf(cmd, sizeof cmd,
           "'%s' synth --arch gemma-3-1b --vocab '%s/tokenizer/ggml-vocab-llama-spm.gguf' --out '%s' --type Q4_0 "
           "--layers 6 --embd 256 --ff 512 --window 4 --quiet",
           POWER_BIN, POWER_SHARED_DIR, path);
  CHECK_MSG(system(cmd) == 0, "synth gemma-3-1b failed");
  test_invariance_path(path, "gemma-3-1b (synth, window 4)");
  test_swa_ring(path, "gemma-3-1b (synth, window 4)", RING_SHORT);
  unlink(path);
}

/* A synthesized file of arch (power synth --arch ... shape) through the
 * invariance checks. */
static void test_invariance_synth(const char *arch, const char *type, const char *shape, const char *label,
                                  bool ring) {
  char path[256], cmd[1024];
  snprintf(path, sizeof path, "/tmp/pw_test_model_%s_%d.gguf", arch, (int)getpid());
  snprintf(cmd, sizeof cmd,
           "'%s' synth --arch %s --vocab '%s/tokenizer/ggml-vocab-llama-spm.gguf' "
           "--out '%s' --type %s %s --quiet",
           POWER_BIN, arch, POWER_SHARED_DIR, path, type, shape);
  CHECK_MSG(system(cmd) == 0, "synth %s failed", arch);
  test_invariance_path(path, label);
  if (ring) test_swa_ring(path, label, RING_SHORT | RING_LONG);
  unlink(path);
}

/* The dense architectures built on other blocks' extras (a small MLP to
 * keep the files small): gemma2 with a window of 4 and caps the scores
 * reach (its attention goes through the capped kernel), smollm3's fourth
 * layer without RoPE, granite's multipliers, mistral3's attention
 * temperature (YaRN over an original context of 4, so the 10 positions
 * span three temperatures). Under sanitizers gemma2 alone (the capped
 * kernel through the backend's attention jobs): the others are the llama
 * block with a step skipped or scaled, and each file's logits cost
 * seconds there. */
static void test_invariance_dense(void) {
  test_invariance_synth("gemma-2-2b", "Q4_0", "--layers 2 --embd 256 --ff 256 --window 4 --softcap 1.5,8",
                        "gemma-2-2b (synth, window 4, caps)", true);
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
  test_invariance_synth("ministral-3-3b", "Q4_0", "--layers 2 --embd 256 --ff 256 --yarn 16,4", "ministral-3-3b (synth, YaRN 16x4)", false);
  test_invariance_synth("smollm3-3b", "Q4_0", "--layers 4 --embd 256 --ff 256", "smollm3-3b (synth)", false);
  test_invariance_synth("granite-3.3-2b", "Q4_0", "--layers 2 --embd 256 --ff 256", "granite-3.3-2b (synth)", false);
#endif
}

/* At depth the attention splits each query's prefix into spans spread
 * over the threads: logits of the last positions of a 2,100-token prompt
 * (five spans) are the same bits at 1, 2 and 3 threads, decoded one token
 * at a time alone, prefilled in one batch, or batched with another
 * sequence's tokens, with the prefix fed in chunks of different sizes. */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define DEPTH_N 700 /* two spans: the split and its merge, at a ninth of the attention work */
#define MODEL_TEST_SANITIZED 1
#else
#define DEPTH_N 2100
#endif
#define DEPTH_LAST 6
static float *run_depth(model *m, const model_kv_opts *ko, int chunk, int mode, int V) {
  char err[PW_ERRMAX];
  model_kv *kv;
  model_ctx *c;
  CHECK_MSG(model_kv_create_ex(m, 2, DEPTH_N + 8, ko, &kv, err) == 0, "%s", err);
  CHECK(model_ctx_create(m, 2 * chunk, DEPTH_N + 8, &c, err) == 0);
  float *out = malloc(sizeof(float) * (size_t)V * DEPTH_LAST), *lg = malloc(sizeof(float) * (size_t)V * 2 * chunk);
  model_entry *e = malloc(sizeof(model_entry) * 2 * (size_t)chunk);
  const int head = DEPTH_N - DEPTH_LAST;
  int other = 0; /* seq 1's length (mode 2: it runs beside seq 0) */
  for (int p = 0; p < (mode == 0 ? head : mode == 1 ? DEPTH_N : head);) {
    const int lim = mode == 1 ? DEPTH_N : head;
    int n = 0;
    for (; n < chunk && p < lim; p++) e[n++] = (model_entry){0, p, 1 + (p * 7919) % (V - 1), p >= head};
    if (mode == 2)
      for (int i = 0; i < chunk / 3 && other < DEPTH_N; i++, other++) e[n++] = (model_entry){1, other, 5 + other % 50, false};
    CHECK_MSG(model_forward(c, kv, e, n, lg, NULL, err) == 0, "%s", err);
    if (mode == 1 && p == DEPTH_N) {
      int w = 0;
      for (int i = 0; i < n; i++)
        if (e[i].want_logits) memcpy(out + (size_t)(e[i].pos - head) * V, lg + (size_t)w++ * V, sizeof(float) * V);
    }
  }
  if (mode != 1)
    for (int p = head; p < DEPTH_N; p++) {
      int n = 0;
      if (mode == 2) e[n++] = (model_entry){1, other++, 9, true};
      const int me = n;
      e[n++] = (model_entry){0, p, 1 + (p * 7919) % (V - 1), true};
      CHECK_MSG(model_forward(c, kv, e, n, lg, NULL, err) == 0, "%s", err);
      memcpy(out + (size_t)(p - head) * V, lg + (size_t)me * V, sizeof(float) * V);
    }
  free(e);
  free(lg);
  model_ctx_destroy(c);
  model_kv_destroy(kv);
  return out;
}

static void test_depth(const char *file, const char *kt, const char *vt) {
  const model_kv_opts ko = {.type_k = (uint32_t)model_kv_type_parse(kt), .type_v = (uint32_t)model_kv_type_parse(vt)};
  char path[1024], err[PW_ERRMAX];
  snprintf(path, sizeof path, "%s/models/%s", POWER_SHARED_DIR, file);
  float *res[3];
  int V = 0;
  for (int th = 1; th <= 3; th++) {
    model *m;
    model_opts o = {.n_threads = th};
    CHECK_MSG(model_load(path, &o, &m, err) == 0, "%s", err);
    V = model_hp(m)->n_vocab;
    /* 1 thread: decode alone after chunks of 64; 2: one batch of 96 at
     * the end; 3: beside another sequence, chunks of 150 */
    res[th - 1] = run_depth(m, &ko, th == 1 ? 64 : th == 2 ? 96 : 150, th - 1, V);
    model_destroy(m);
  }
  for (int th = 2; th <= 3; th++)
    for (int p = 0; p < DEPTH_LAST; p++)
      CHECK_MSG(memcmp(res[0] + (size_t)p * V, res[th - 1] + (size_t)p * V, sizeof(float) * V) == 0,
                "%s at depth, KV %s/%s: position %d differs between 1 thread (decode alone) and %d (%s)", file, kt,
                vt, DEPTH_N - DEPTH_LAST + p, th, th == 2 ? "prefill batch" : "batched with another sequence");
  for (int i = 0; i < 3; i++) free(res[i]);
}

/* The MoE files' layers and experts; under a sanitizer one layer and the
 * fewest experts synth allows beyond the per-token count (the same gather,
 * router and expert kernels, at a fraction of the synthesis and run time).
 * qwen3moe takes a hidden size of 256; qwen2moe keeps its own (synth
 * refuses another: llama.cpp takes its query width from the hidden size). */
#ifdef MODEL_TEST_SANITIZED
#define MOE_SHAPE(layers, experts, width) "--layers 1 --experts 10 " width " --quiet"
#else
#define MOE_SHAPE(layers, experts, width) "--layers " layers " --experts " experts " " width " --quiet"
#endif

/* Qwen3-MoE (two layers of 16 experts, 8 per token): a prompt's entries
 * gathered by expert in one pass against one entry at a time batched with
 * other sequences, and 1, 2 and 3 threads, all bit-identical. */
static void test_invariance_qwen3moe(void) {
  char path[256], cmd[1024], err[PW_ERRMAX];
  snprintf(path, sizeof path, "/tmp/pw_test_model_qwen3moe_%d.gguf", (int)getpid());
  snprintf(cmd, sizeof cmd,
           "'%s' synth --arch qwen3-30b-a3b --vocab '%s/tokenizer/ggml-vocab-llama-spm.gguf' --out '%s' --type Q4_K_M "
           MOE_SHAPE("2", "16", "--embd 256"),
           POWER_BIN, POWER_SHARED_DIR, path);
  CHECK_MSG(system(cmd) == 0, "synth qwen3-30b-a3b failed");
  test_invariance_path(path, "qwen3-30b-a3b (synth, 16 experts)");
  model *m1 = NULL, *m3 = NULL;
  model_opts o1 = {.n_threads = 1}, o3 = {.n_threads = 3};
  CHECK_MSG(model_load(path, &o1, &m1, err) == 0, "%s", err);
  CHECK_MSG(model_load(path, &o3, &m3, err) == 0, "%s", err);
  if (m1 && m3) {
    int V;
    float *a = run_alone(m1, 1, &V), *b = run_alone(m3, 3, &V);
    CHECK_MSG(memcmp(a, b, sizeof(float) * V * NP) == 0, "qwen3moe: 1 vs 3 threads differ");
    free(a);
    free(b);
  }
  model_destroy(m1);
  model_destroy(m3);
  unlink(path);
}

/* Qwen2-MoE (two layers of 12 experts, 4 per token, and the shared
 * expert): batched against alone, 1 against 2 threads. */
static void test_invariance_qwen2moe(void) {
  char path[256], cmd[1024];
  snprintf(path, sizeof path, "/tmp/pw_test_model_qwen2moe_%d.gguf", (int)getpid());
  snprintf(cmd, sizeof cmd,
           "'%s' synth --arch qwen1.5-moe-a2.7b --vocab '%s/tokenizer/ggml-vocab-llama-spm.gguf' --out '%s' --type Q8_0 "
           MOE_SHAPE("2", "12", ""),
           POWER_BIN, POWER_SHARED_DIR, path);
  CHECK_MSG(system(cmd) == 0, "synth qwen1.5-moe-a2.7b failed");
  test_invariance_path(path, "qwen1.5-moe-a2.7b (synth, 12 experts)");
  unlink(path);
}

/* gpt-oss (a local layer with a window of 4 over the 10 positions and a
 * full one, both with sinks; 8 experts with biases, 4 per token, MXFP4
 * as published): batched against alone, 1 against 2 threads, rollback. */
static void test_invariance_gptoss(void) {
  char path[256], cmd[1024];
  snprintf(path, sizeof path, "/tmp/pw_test_model_gptoss_%d.gguf", (int)getpid());
  snprintf(cmd, sizeof cmd,
           "'%s' synth --arch gpt-oss-20b --vocab '%s/tokenizer/ggml-vocab-llama-spm.gguf' --out '%s' "
           "--type MXFP4_MOE --layers 2 --experts 8 --embd 64 --window 4 --quiet",
           POWER_BIN, POWER_SHARED_DIR, path);
  CHECK_MSG(system(cmd) == 0, "synth gpt-oss-20b failed");
  test_invariance_path(path, "gpt-oss-20b (synth, 8 experts, window 4)");
  test_swa_ring(path, "gpt-oss-20b (synth, 8 experts, window 4)", RING_LONG);
  unlink(path);
}

int main(void) {
  test_depth("syn-llama-Q4_K_M.gguf", "f16", "f16");
  test_depth("syn-llama-Q4_K_M.gguf", "q8_0", "q8_0");
#ifdef MODEL_TEST_SANITIZED /* every KV type's kernels once, on one file */
  test_depth("syn-llama-Q4_K_M.gguf", "q4_0", "q4_0");
#else
  test_depth("syn-qwen2-Q4_K_M.gguf", "f16", "f16");
  test_depth("syn-llama-Q4_K_M.gguf", "q4_0", "f16");
  test_depth("syn-qwen2-Q4_K_M.gguf", "f16", "q4_0");
#endif
  test_invariance_qwen3moe();
  test_invariance_qwen2moe();
  test_invariance_gemma3();
  test_invariance_gptoss();
  test_invariance_dense();
  test_invariance("syn-llama-Q4_K_M.gguf");
  test_invariance("syn-qwen3-Q8_0.gguf");
  test_invariance("syn-qwen2-Q4_K_M.gguf");
  test_bad_model();
  TEST_DONE();
}
