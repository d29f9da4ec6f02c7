/* test_weights.c - read strategies and encrypted containers: every shared
 * model gives bit-identical logits and greedy ids loaded by mmap, pread and
 * O_DIRECT, plain or encrypted; key files in both formats; and a truncated,
 * tampered, reordered or wrongly keyed container is a clean error naming
 * the chunk, with no key bytes in any message. */
#include "base/error.h"
#include "gguf/writer.h"
#include "model/model.h"
#include "test.h"
#include "weights/crypt.h"
#include "weights/weights.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *k_models[] = {"codelm-py-F32.gguf",   "codelm-py-Q8_0.gguf",       "codelm-py-draft-F32.gguf",
                                 "llama2-tiny-random.gguf", "syn-llama-Q4_0.gguf",    "syn-llama-Q4_K_M.gguf",
                                 "syn-llama-tied-f16.gguf", "syn-llama3-Q8_0.gguf",   "syn-qwen2-Q4_K_M.gguf",
                                 "syn-qwen3-Q8_0.gguf"};
#define N_MODELS (int)(sizeof k_models / sizeof k_models[0])
#define NP 6
#define NGEN 6

static char g_dir[256];
static const char k_hex[] = "00112233445566778899aabbccddeeff0f1e2d3c4b5a69788796a5b4c3d2e1f0";

/* Logits of a fixed prompt then NGEN greedy steps: [(NP + NGEN) * V] and
 * the generated ids. NULL with a message when the load fails. */
static float *run_opts(const char *path, const weights_opts *wo, int32_t *ids, int *V, char *err) {
  model_opts mo = {.n_threads = 2, .weights = *wo};
  model *m;
  if (model_load(path, &mo, &m, err)) return NULL;
  const model_hparams *hp = model_hp(m);
  *V = hp->n_vocab;
  model_kv *kv;
  model_ctx *c;
  CHECK(model_kv_create(m, 1, 64, &kv, err) == 0);
  CHECK(model_ctx_create(m, 16, 64, &c, err) == 0);
  float *lg = calloc((size_t)(NP + NGEN) * hp->n_vocab, sizeof *lg);
  model_entry e[NP];
  for (int i = 0; i < NP; i++) e[i] = (model_entry){0, i, (1 + 37 * i) % hp->n_vocab, true};
  CHECK_MSG(model_forward(c, kv, e, NP, lg, NULL, err) == 0, "%s", err);
  for (int g = 0; g < NGEN; g++) {
    const float *row = lg + (size_t)(NP - 1 + g) * hp->n_vocab;
    int best = 0;
    for (int t = 1; t < hp->n_vocab; t++)
      if (row[t] > row[best]) best = t;
    ids[g] = best;
    model_entry d = {0, NP + g, best, true};
    CHECK_MSG(model_forward(c, kv, &d, 1, lg + (size_t)(NP + g) * hp->n_vocab, NULL, err) == 0, "%s", err);
  }
  model_ctx_destroy(c);
  model_kv_destroy(kv);
  model_destroy(m);
  return lg;
}

static float *run(const char *path, int io, const char *key, int32_t *ids, int *V, char *err) {
  const weights_opts wo = {.io = io, .key_file = key};
  return run_opts(path, &wo, ids, V, err);
}

static void write_file(const char *path, const void *data, size_t n) {
  FILE *f = fopen(path, "wb");
  CHECK(f != NULL);
  if (!f) return;
  CHECK(fwrite(data, 1, n, f) == n);
  fclose(f);
}

static uint8_t *read_file(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  *n = (size_t)ftell(f);
  fseek(f, 0, SEEK_SET);
  uint8_t *b = malloc(*n ? *n : 1);
  if (fread(b, 1, *n, f) != *n) *n = 0;
  fclose(f);
  return b;
}

static void test_identity(const char *key) {
  char path[512], enc[512], err[PW_ERRMAX];
  weights_key *k;
  CHECK_MSG(weights_key_load(key, &k, err) == 0, "%s", err);
  for (int mi = 0; mi < N_MODELS; mi++) {
    snprintf(path, sizeof path, "%s/models/%s", POWER_SHARED_DIR, k_models[mi]);
    snprintf(enc, sizeof enc, "%s/m%d.pwe", g_dir, mi);
    int V = 0;
    int32_t ref_ids[NGEN], ids[NGEN];
    float *ref = run(path, WEIGHTS_IO_MMAP, NULL, ref_ids, &V, err);
    CHECK_MSG(ref != NULL, "%s: %s", k_models[mi], err);
    if (!ref) continue;
    const size_t bytes = (size_t)(NP + NGEN) * V * sizeof(float);
    /* 64 KiB chunks: many records, and a short last one */
    CHECK_MSG(weights_encrypt_file(path, enc, k, 16, err) == 0, "%s", err);
    for (int enc_on = 0; enc_on < 2; enc_on++)
      for (int io = 0; io < WEIGHTS_IO_COUNT; io++) {
        if (!enc_on && io == WEIGHTS_IO_MMAP) continue;
        float *lg = run(enc_on ? enc : path, io, enc_on ? key : NULL, ids, &V, err);
        CHECK_MSG(lg != NULL, "%s %s%s: %s", k_models[mi], weights_io_name(io), enc_on ? " encrypted" : "", err);
        if (!lg) continue;
        CHECK_MSG(memcmp(lg, ref, bytes) == 0, "%s: logits differ with %s%s", k_models[mi], weights_io_name(io),
                  enc_on ? " encrypted" : "");
        CHECK_MSG(memcmp(ids, ref_ids, sizeof ids) == 0, "%s: ids differ with %s%s", k_models[mi],
                  weights_io_name(io), enc_on ? " encrypted" : "");
        free(lg);
      }
    /* power decrypt's path gives the original bytes back */
    char back[512];
    snprintf(back, sizeof back, "%s/back.gguf", g_dir);
    CHECK_MSG(weights_decrypt_file(enc, back, k, err) == 0, "%s", err);
    size_t na = 0, nb = 0;
    uint8_t *a = read_file(path, &na), *b = read_file(back, &nb);
    CHECK_MSG(a && b && na == nb && na > 0 && !memcmp(a, b, na), "%s: decrypt does not give the file back",
              k_models[mi]);
    free(a);
    free(b);
    unlink(back);
    if (mi > 1) unlink(enc);
    free(ref);
  }
  weights_key_destroy(k);
}

/* err must contain want, and none of the key's hex */
static void expect_err(const char *what, const char *path, int io, const char *key, const char *want) {
  char err[PW_ERRMAX] = "";
  weights_opts o = {.io = io, .key_file = key};
  weights *w = NULL;
  int rc = weights_open(path, &o, &w, err);
  CHECK_MSG(rc < 0 && w == NULL, "%s (%s): loaded", what, weights_io_name(io));
  CHECK_MSG(strstr(err, want) != NULL, "%s (%s): error '%s' lacks '%s'", what, weights_io_name(io), err, want);
  CHECK_MSG(strstr(err, k_hex) == NULL && strstr(err, "00112233") == NULL, "%s: key bytes in the error", what);
  weights_close(w);
}

static void test_faults(const char *key, const char *wrong_key) {
  char path[512], enc[512], bad[512], err[PW_ERRMAX];
  snprintf(path, sizeof path, "%s/models/%s", POWER_SHARED_DIR, "llama2-tiny-random.gguf");
  snprintf(enc, sizeof enc, "%s/f.pwe", g_dir);
  snprintf(bad, sizeof bad, "%s/bad.pwe", g_dir);
  weights_key *k;
  CHECK_MSG(weights_key_load(key, &k, err) == 0, "%s", err);
  CHECK_MSG(weights_encrypt_file(path, enc, k, 12, err) == 0, "%s", err); /* 4 KiB chunks */
  weights_key_destroy(k);
  size_t n = 0;
  uint8_t *c = read_file(enc, &n);
  CHECK(c && n > 64 + 20 * 4124);
  if (!c) return;
  const size_t rl = 12 + 4096 + 16;
  uint8_t *m = malloc(n);
  for (int io = 0; io < WEIGHTS_IO_COUNT; io++) {
    /* truncated in the middle of record 5 */
    write_file(bad, c, 64 + 5 * rl + 100);
    expect_err("truncated", bad, io, key, "chunk 5 of");
    /* record 3 dropped: the file ends a record early (the last one is short,
     * so the one before it is named as cut short) */
    memcpy(m, c, 64 + 3 * rl);
    memcpy(m + 64 + 3 * rl, c + 64 + 4 * rl, n - (64 + 4 * rl));
    write_file(bad, m, n - rl);
    expect_err("dropped chunk", bad, io, key, "truncated container: chunk");
    /* a flipped ciphertext byte in record 7 */
    memcpy(m, c, n);
    m[64 + 7 * rl + 12 + 1000] ^= 0x20;
    write_file(bad, m, n);
    expect_err("flipped byte", bad, io, key, "chunk 7 of");
    /* a flipped tag byte in record 9 */
    memcpy(m, c, n);
    m[64 + 9 * rl + 12 + 4096 + 3] ^= 1;
    write_file(bad, m, n);
    expect_err("flipped tag", bad, io, key, "chunk 9 of");
    /* records 2 and 3 swapped */
    memcpy(m, c, n);
    memcpy(m + 64 + 2 * rl, c + 64 + 3 * rl, rl);
    memcpy(m + 64 + 3 * rl, c + 64 + 2 * rl, rl);
    write_file(bad, m, n);
    expect_err("swapped chunks", bad, io, key, "chunk 2 of");
    /* the header's digest changed: every record's associated data differs */
    memcpy(m, c, n);
    m[30] ^= 1;
    write_file(bad, m, n);
    expect_err("header changed", bad, io, key, "chunk 0 of");
    /* wrong key, no key, a key for a plain file */
    expect_err("wrong key", enc, io, wrong_key, "chunk 0 of");
    expect_err("no key", enc, io, NULL, "no key file");
    expect_err("key with a plain file", path, io, key, "not an encrypted");
    /* a plain GGUF cut short */
    size_t pn = 0;
    uint8_t *p = read_file(path, &pn);
    write_file(bad, p, pn / 2);
    expect_err("truncated plain", bad, io, NULL, "truncated");
    free(p);
  }
  free(m);
  free(c);
  unlink(bad);
  unlink(enc);
}

static void test_keys(void) {
  char kf[512], err[PW_ERRMAX];
  snprintf(kf, sizeof kf, "%s/k.any", g_dir);
  weights_key *k = NULL;
  static const struct {
    const char *text;
    size_t n;
    int ok;
  } cases[] = {
      {k_hex, 64, 1},
      {"00112233445566778899aabbccddeeff0f1e2d3c4b5a69788796a5b4c3d2e1f0\n", 65, 1},
      {"00112233445566778899AABBCCDDEEFF0F1E2D3C4B5A69788796A5B4C3D2E1F0\r\n", 66, 1},
      {"0123456789abcdef0123456789abcdef", 32, 1}, /* 32 raw bytes (that happen to be text) */
      {"00112233445566778899aabbccddeeff0f1e2d3c4b5a69788796a5b4c3d2e1f", 63, 0},
      {"0g112233445566778899aabbccddeeff0f1e2d3c4b5a69788796a5b4c3d2e1f0", 64, 0},
      {"0123456789abcdef0123456789abcdef0", 33, 0},
      {"", 0, 0},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    write_file(kf, cases[i].text, cases[i].n);
    chmod(kf, 0600);
    int rc = weights_key_load(kf, &k, err);
    CHECK_MSG((rc == 0) == cases[i].ok, "key case %zu: rc %d (%s)", i, rc, rc ? err : "");
    if (rc) CHECK_MSG(strstr(err, "0011223344") == NULL && strstr(err, "0123456789") == NULL, "key bytes in '%s'", err);
    weights_key_destroy(k);
    k = NULL;
  }
  CHECK(weights_key_load("/nonexistent/key", &k, err) < 0 && strstr(err, "/nonexistent/key"));
  unlink(kf);
}

static void test_cache_probe(void) {
  char path[512], err[PW_ERRMAX];
  snprintf(path, sizeof path, "%s/models/%s", POWER_SHARED_DIR, "llama2-tiny-random.gguf");
  uint64_t cached = 0, size = 0;
  size_t n = 0;
  free(read_file(path, &n)); /* now it is cached */
  CHECK_MSG(weights_cached_bytes(path, &cached, &size, err) == 0, "%s", err);
  CHECK_EQ_INT(size, n);
  CHECK_MSG(cached == size, "cached %llu of %llu after a read", (unsigned long long)cached, (unsigned long long)size);
  CHECK_MSG(weights_drop_cache(path, err) == 0, "%s", err);
  CHECK(weights_io_parse("pread") == WEIGHTS_IO_PREAD && weights_io_parse("direct") == WEIGHTS_IO_DIRECT &&
        weights_io_parse("mmap") == WEIGHTS_IO_MMAP && weights_io_parse("Pread") < 0);
}

/* ---- split models ---- */

enum { SPLIT_OK, SPLIT_BAD_COUNT, SPLIT_DUP };

typedef struct part_ctx {
  const gguf_file *f;
  const uint64_t *idx;
} part_ctx;

static int part_tensor(void *ctx, uint64_t i, gguf_emit_fn emit, void *sink, char *err) {
  (void)err;
  const part_ctx *c = ctx;
  const gguf_tensor *t = gguf_tensor_at(c->f, c->idx[i]);
  return emit(sink, t->data, (size_t)t->nbytes);
}

/* Writes f as prefix-0000i-of-0000N.gguf, n parts of about equal tensor
 * counts in the file's order, as gguf-split lays them out; mode breaks it: BAD_COUNT states one tensor
 * too many in split.tensors.count of every part, DUP repeats the first
 * tensor in the last part (and counts it). Returns the part count. */
static int write_split(const gguf_file *f, const char *prefix, int n, int mode) {
  char err[PW_ERRMAX], path[600];
  const uint64_t nt = gguf_n_tensors(f);
  const int32_t count = (int32_t)nt + (mode != SPLIT_OK);
  uint64_t idx[64];
  for (int p = 0; p < n; p++) {
    gguf_writer *w = gguf_writer_create();
    if (p == 0) CHECK(gguf_writer_copy_kvs_prefix(w, f, "", err) > 0);
    CHECK(gguf_writer_set_u16(w, "split.no", (uint16_t)p, err) == 0);
    CHECK(gguf_writer_set_u16(w, "split.count", (uint16_t)n, err) == 0);
    CHECK(gguf_writer_set_i32(w, "split.tensors.count", count, err) == 0);
    int k = 0;
    for (uint64_t i = (uint64_t)p * nt / (uint64_t)n; i < (uint64_t)(p + 1) * nt / (uint64_t)n && k < 63; i++)
      idx[k++] = i;
    if (mode == SPLIT_DUP && p == n - 1) idx[k++] = 0;
    for (int j = 0; j < k; j++) {
      const gguf_tensor *t = gguf_tensor_at(f, idx[j]);
      char name[256];
      snprintf(name, sizeof name, "%.*s", (int)t->name.len, t->name.ptr);
      CHECK_MSG(gguf_writer_add_tensor(w, name, t->n_dims, t->ne, t->type, err) == 0, "%s", err);
    }
    snprintf(path, sizeof path, "%s-%05d-of-%05d.gguf", prefix, p + 1, n);
    part_ctx c = {f, idx};
    CHECK_MSG(gguf_writer_write(w, path, part_tensor, &c, err) == 0, "%s", err);
    gguf_writer_destroy(w);
  }
  return n;
}

static void rm_split(const char *prefix, int n) {
  char path[600];
  for (int p = 0; p < n; p++) {
    snprintf(path, sizeof path, "%s-%05d-of-%05d.gguf", prefix, p + 1, n);
    unlink(path);
  }
}

static void expect_split_err(const char *what, const char *path, const weights_opts *o, const char *want) {
  char err[PW_ERRMAX] = "";
  weights *w = NULL;
  int rc = weights_open(path, o, &w, err);
  CHECK_MSG(rc < 0 && w == NULL, "%s: loaded", what);
  CHECK_MSG(strstr(err, want) != NULL, "%s: error '%s' lacks '%s'", what, err, want);
  weights_close(w);
  gguf_file *f = NULL;
  if (!o->key_file) { /* the gguf layer says the same */
    CHECK_MSG(gguf_open(path, &f, err) < 0 && f == NULL, "%s: gguf_open accepted it", what);
    CHECK_MSG(strstr(err, want) != NULL, "%s: gguf_open error '%s' lacks '%s'", what, err, want);
  }
  gguf_close(f);
}

/* A model cut into n parts gives the unsplit file's logits bit for bit
 * with every read strategy, without a budget, under `frac` of the file and
 * at the smallest budget the split accepts; comp: some layer lies across
 * two parts and streams as one composite unit at that minimum. */
static void split_identity(const char *name, int n, double frac, bool comp_expected) {
  char src[512], prefix[512], first[600], err[PW_ERRMAX];
  snprintf(src, sizeof src, "%s/models/%s", POWER_SHARED_DIR, name);
  snprintf(prefix, sizeof prefix, "%s/id", g_dir);
  snprintf(first, sizeof first, "%s-%05d-of-%05d.gguf", prefix, 1, n);
  gguf_file *f = NULL;
  CHECK_MSG(gguf_open(src, &f, err) == 0, "%s", err);
  if (!f) return;
  CHECK_EQ_INT(write_split(f, prefix, n, SPLIT_OK), n);
  int V = 0;
  int32_t ref_ids[NGEN], ids[NGEN];
  float *ref = run(src, WEIGHTS_IO_MMAP, NULL, ref_ids, &V, err);
  CHECK_MSG(ref != NULL, "%s", err);
  const size_t bytes = (size_t)(NP + NGEN) * V * sizeof(float);
  gguf_file *m = NULL;
  CHECK_MSG(gguf_open(first, &m, err) == 0, "%s", err);
  if (m) {
    CHECK_EQ_INT(gguf_n_parts(m), n);
    CHECK_EQ_INT(gguf_n_tensors(m), gguf_n_tensors(f));
    const gguf_tensor *a = gguf_find_tensor(m, "output.weight"), *b = gguf_find_tensor(f, "output.weight");
    CHECK(!a == !b && (!a || (a->nbytes == b->nbytes && !memcmp(a->data, b->data, (size_t)a->nbytes))));
  }
  gguf_close(m);
  for (int io = 0; ref && io < WEIGHTS_IO_COUNT; io++)
    for (int b = 0; b < 3; b++) {
      model_opts mo = {.n_threads = 2, .weights = {.io = io, .mem_budget_frac = b == 1 ? frac : 0}};
      if (b == 2) {
        weights_opts wo = {.io = io, .mem_budget_frac = frac};
        weights *w = NULL;
        weights_budget_info bi = {0};
        CHECK_MSG(weights_open(first, &wo, &w, err) == 0 && weights_get_budget(w, &bi), "%s", err);
        weights_close(w);
        mo.weights.mem_budget = bi.min_budget;
        /* at the minimum a layer cut by a part boundary is one composite
         * unit of both parts' pieces: acquire makes both resident */
        wo = (weights_opts){.io = io, .mem_budget = bi.min_budget};
        w = NULL;
        CHECK_MSG(weights_open(first, &wo, &w, err) == 0 && weights_get_budget(w, &bi), "%s", err);
        int comp = 0;
        const int nl = 64;
        for (int il = 0; w && il < nl; il++) {
          const int u = weights_layer_unit(w, il);
          comp += u >= bi.n_units;
          CHECK_MSG(weights_acquire(w, u, err) == 0, "%s", err);
          weights_release(w, u);
        }
        CHECK_MSG((comp > 0) == comp_expected, "split %s: %d composite layer units", name, comp);
        weights_close(w);
        wo = (weights_opts){.io = io, .mem_budget = bi.min_budget - 1};
        CHECK_MSG(weights_open(first, &wo, &w, err) < 0 && strstr(err, "minimum"), "split: below the minimum: %s", err);
      }
      model *mdl;
      if (model_load(first, &mo, &mdl, err)) {
        CHECK_MSG(0, "split %s %s budget %d: %s", name, weights_io_name(io), b, err);
        continue;
      }
      CHECK_MSG(weights_streaming(model_weights(mdl)) == (b > 0), "split %s %s budget %d: streaming %d", name,
                weights_io_name(io), b, weights_streaming(model_weights(mdl)));
      model_destroy(mdl);
      float *lg = run_opts(first, &mo.weights, ids, &V, err);
      CHECK_MSG(lg != NULL, "split %s %s budget %d: %s", name, weights_io_name(io), b, err);
      if (!lg) continue;
      CHECK_MSG(memcmp(lg, ref, bytes) == 0, "split %s: logits differ with %s, budget %d", name, weights_io_name(io), b);
      CHECK_MSG(memcmp(ids, ref_ids, sizeof ids) == 0, "split %s: ids differ with %s, budget %d", name,
                weights_io_name(io), b);
      free(lg);
    }
  free(ref);
  /* the model digest covers every part, whether it streams or not */
  weights *w = NULL;
  uint8_t d1[32], d2[32];
  CHECK_MSG(weights_open(first, NULL, &w, err) == 0, "%s", err);
  CHECK(w && weights_sha256(w, d1, err) == 0);
  weights_close(w);
  weights_opts half = {.io = WEIGHTS_IO_PREAD, .mem_budget_frac = frac};
  w = NULL;
  CHECK_MSG(weights_open(first, &half, &w, err) == 0, "%s", err);
  CHECK(w && weights_sha256(w, d2, err) == 0 && !memcmp(d1, d2, 32));
  weights_close(w);
  rm_split(prefix, n);
  gguf_close(f);
}

static bool cancel_after(void *arg) {
  int *n = arg;
  return --*n < 0;
}

/* A load whose caller gives up stops between pieces with PW_ECANCELED
 * (every strategy, a split between its parts too) and leaves nothing. */
static void test_cancel(void) {
  char path[512], prefix[512], first[600], err[PW_ERRMAX];
  snprintf(path, sizeof path, "%s/models/codelm-py-F32.gguf", POWER_SHARED_DIR);
  snprintf(prefix, sizeof prefix, "%s/cx", g_dir);
  snprintf(first, sizeof first, "%s-%05d-of-%05d.gguf", prefix, 1, 2);
  gguf_file *f = NULL;
  CHECK_MSG(gguf_open(path, &f, err) == 0, "%s", err);
  if (!f) return;
  write_split(f, prefix, 2, SPLIT_OK);
  for (int split = 0; split < 2; split++)
    for (int io = 0; io < WEIGHTS_IO_COUNT; io++)
      for (int after = 0; after < 2; after++) {
        int n = after;
        weights_opts o = {.io = io, .cancel = cancel_after, .cancel_arg = &n};
        weights *w = NULL;
        int rc = weights_open(split ? first : path, &o, &w, err);
        CHECK_MSG(rc == PW_ECANCELED && w == NULL, "%s%s after %d: rc %d (%s)", weights_io_name(io),
                  split ? " split" : "", after, rc, err);
        CHECK_MSG(strstr(err, "abandoned") != NULL, "%s", err);
      }
  int n = 1000000; /* never: loads as usual */
  weights_opts o = {.io = WEIGHTS_IO_PREAD, .cancel = cancel_after, .cancel_arg = &n};
  weights *w = NULL;
  CHECK_MSG(weights_open(first, &o, &w, err) == 0, "%s", err);
  weights_close(w);
  rm_split(prefix, 2);
  gguf_close(f);
}

/* Each malformed split is a clean error, from the gguf layer and from
 * weights_open with and without a budget. */
static void test_split(const char *key) {
  char src[512], prefix[512], first[600], other[512], p2[600], o2[700], err[PW_ERRMAX];
  snprintf(src, sizeof src, "%s/models/syn-llama-Q4_K_M.gguf", POWER_SHARED_DIR);
  snprintf(prefix, sizeof prefix, "%s/sp", g_dir);
  gguf_file *f = NULL;
  CHECK_MSG(gguf_open(src, &f, err) == 0, "%s", err);
  if (!f) return;
  const int n = write_split(f, prefix, 6, SPLIT_OK);
  snprintf(first, sizeof first, "%s-%05d-of-%05d.gguf", prefix, 1, n);
  const weights_opts plain = {0}, budget = {.mem_budget_frac = 0.5};
  /* a part other than the first */
  snprintf(p2, sizeof p2, "%s-%05d-of-%05d.gguf", prefix, 2, n);
  expect_split_err("second part", p2, &plain, "give the first part");
  /* the first part under another name */
  snprintf(o2, sizeof o2, "%s/renamed.gguf", g_dir);
  CHECK(link(first, o2) == 0);
  expect_split_err("renamed first part", o2, &plain, "does not end in");
  unlink(o2);
  /* a missing part */
  snprintf(o2, sizeof o2, "%s.moved", p2);
  CHECK(rename(p2, o2) == 0);
  expect_split_err("missing part", first, &plain, "missing");
  expect_split_err("missing part, budget", first, &budget, "missing");
  CHECK(rename(o2, p2) == 0);
  /* a part of another split in its place (same part count) */
  snprintf(other, sizeof other, "%s/other", g_dir);
  gguf_file *g = NULL;
  char src2[512];
  snprintf(src2, sizeof src2, "%s/models/syn-qwen3-Q8_0.gguf", POWER_SHARED_DIR);
  CHECK_MSG(gguf_open(src2, &g, err) == 0, "%s", err);
  if (g) {
    const int n2 = write_split(g, other, n, SPLIT_OK);
    char op2[600];
    snprintf(op2, sizeof op2, "%s-%05d-of-%05d.gguf", other, 2, n2);
    CHECK(rename(p2, o2) == 0);
    if (n2 == n) {
      CHECK(link(op2, p2) == 0);
      expect_split_err("part of another split", first, &plain, "another split");
      expect_split_err("part of another split, pread", first, &(weights_opts){.io = WEIGHTS_IO_PREAD}, "another split");
      unlink(p2);
    } else {
      CHECK_MSG(0, "other split has %d parts, not %d", n2, n);
    }
    CHECK(rename(o2, p2) == 0);
    rm_split(other, n2);
    gguf_close(g);
  }
  rm_split(prefix, n);
  /* split.tensors.count disagreeing with the parts */
  int nb = write_split(f, prefix, 6, SPLIT_BAD_COUNT);
  expect_split_err("tensor count", first, &plain, "split.tensors.count");
  rm_split(prefix, nb);
  /* one tensor in two parts */
  nb = write_split(f, prefix, 6, SPLIT_DUP);
  expect_split_err("duplicate tensor", first, &plain, "more than one part");
  expect_split_err("duplicate tensor, budget", first, &budget, "more than one part");
  rm_split(prefix, nb);
  /* an encrypted part: refused with the way out */
  nb = write_split(f, prefix, 6, SPLIT_OK);
  weights_key *k;
  char enc[600];
  snprintf(enc, sizeof enc, "%s/sp1.pwe", g_dir);
  CHECK_MSG(weights_key_load(key, &k, err) == 0, "%s", err);
  CHECK_MSG(weights_encrypt_file(first, enc, k, 16, err) == 0, "%s", err);
  weights_key_destroy(k);
  expect_split_err("encrypted part", enc, &(weights_opts){.key_file = key}, "encrypted part of a split");
  unlink(enc);
  rm_split(prefix, nb);
  gguf_close(f);
}

int main(void) {
  snprintf(g_dir, sizeof g_dir, "/tmp/pw-weights-XXXXXX");
  CHECK(mkdtemp(g_dir) != NULL);
  char key[512], wrong[512];
  snprintf(key, sizeof key, "%s/k.hex", g_dir);
  snprintf(wrong, sizeof wrong, "%s/wrong.bin", g_dir);
  write_file(key, k_hex, 64);
  chmod(key, 0600);
  uint8_t w[32];
  for (int i = 0; i < 32; i++) w[i] = (uint8_t)(i * 7 + 1);
  write_file(wrong, w, 32);
  chmod(wrong, 0600);
  test_keys();
  test_cache_probe();
  test_faults(key, wrong);
  /* 21 tensors in 6 parts: small parts that load whole under a budget
   * (sanitizer builds: the 2-part case below covers the same paths) */
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
  split_identity("syn-llama-Q4_K_M.gguf", 6, 0.5, false);
#endif
  /* 6 layers in 2 parts: layer 2 across both, each part streams */
  split_identity("codelm-py-F32.gguf", 2, 0.75, true);
  test_split(key);
  test_cancel();
  test_identity(key);
  char p[600];
  snprintf(p, sizeof p, "%s/m0.pwe", g_dir);
  unlink(p);
  snprintf(p, sizeof p, "%s/m1.pwe", g_dir);
  unlink(p);
  unlink(key);
  unlink(wrong);
  rmdir(g_dir);
  TEST_DONE();
}
