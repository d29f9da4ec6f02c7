/* test_model.c - forward-pass contracts: batch invariance (an entry's logits
 * are bit-identical alone or batched with other sequences), thread-count
 * invariance, KV truncation and replay (rollback), and clean errors for bad
 * batches and bad models; for llama, qwen2, qwen3, gemma3, qwen3moe and
 * qwen2moe. */
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
  model *m1, *m2;
  model_opts o1 = {.n_threads = 1}, o2 = {.n_threads = 2};
  CHECK_MSG(model_load(path, &o1, &m1, err) == 0, "%s", err);
  CHECK_MSG(model_load(path, &o2, &m2, err) == 0, "%s", err);
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
           "--layers 6 --window 4 --quiet",
           POWER_BIN, POWER_SHARED_DIR, path);
  CHECK_MSG(system(cmd) == 0, "synth gemma-3-1b failed");
  test_invariance_path(path, "gemma-3-1b (synth, window 4)");
  unlink(path);
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
  const model_kv_opts ko = {(uint32_t)model_kv_type_parse(kt), (uint32_t)model_kv_type_parse(vt)};
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
 * router and expert kernels, at a fraction of the synthesis and run time). */
#ifdef MODEL_TEST_SANITIZED
#define MOE_SHAPE(layers, experts) "--layers 1 --experts 10 --quiet"
#else
#define MOE_SHAPE(layers, experts) "--layers " layers " --experts " experts " --quiet"
#endif

/* Qwen3-MoE (two layers of 16 experts, 8 per token): a prompt's entries
 * gathered by expert in one pass against one entry at a time batched with
 * other sequences, and 1, 2 and 3 threads, all bit-identical. */
static void test_invariance_qwen3moe(void) {
  char path[256], cmd[1024], err[PW_ERRMAX];
  snprintf(path, sizeof path, "/tmp/pw_test_model_qwen3moe_%d.gguf", (int)getpid());
  snprintf(cmd, sizeof cmd,
           "'%s' synth --arch qwen3-30b-a3b --vocab '%s/tokenizer/ggml-vocab-llama-spm.gguf' --out '%s' --type Q4_K_M "
           MOE_SHAPE("2", "16"),
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
           MOE_SHAPE("2", "12"),
           POWER_BIN, POWER_SHARED_DIR, path);
  CHECK_MSG(system(cmd) == 0, "synth qwen1.5-moe-a2.7b failed");
  test_invariance_path(path, "qwen1.5-moe-a2.7b (synth, 12 experts)");
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
  test_invariance("syn-llama-Q4_K_M.gguf");
  test_invariance("syn-qwen3-Q8_0.gguf");
  test_invariance("syn-qwen2-Q4_K_M.gguf");
  test_bad_model();
  TEST_DONE();
}
