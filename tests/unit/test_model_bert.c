/* test_model_bert.c - the BERT-family encoders (bert, nomic-bert,
 * jina-bert-v2) against
 * llama.cpp's embedding mode, through the engine's embedding path.
 *
 * Writes small models with `power synth` (2 layers, the real bert-bge
 * WordPiece vocabulary from the peer_assets fixture): bge-small-en-v1.5 with
 * each pooling (cls as published, mean, last; F16 and Q8_0),
 * nomic-embed-text-v1.5 (mean; Q8_0 and F16), and the
 * ms-marco-minilm-l6-v2 cross-encoder (rank pooling through its
 * classification head), two with XLM-RoBERTa's unigram vocabulary (as
 * bge-m3-style files have), and jina-bert-v2 (ALiBi, GEGLU; an embedding
 * model with mean and cls pooling and a reranker). For each, texts tokenized by Power go
 * through embed() of tests/peer/peer.mjs (node-llama-cpp's prebuilt release,
 * CPU) and through the engine: vectors must have cosine >= 0.9999 with
 * llama.cpp's (the bar), reranker scores must agree within
 * TOL_SCORE_F16 / TOL_SCORE_Q8. Then: the same vectors whatever else is in the batch and on
 * 1 thread as on 2, a
 * generation request refused (PW_EINVAL), an input beyond the context
 * (PW_ECONTEXT), a context beyond bert's position table and speculation
 * refused at engine_create.
 *
 * Needs `node` and the peer's node_modules; fails saying so when missing. */
#define WAIT_MS 120000
#define MAX_TOK 8
#include "base/error.h"
#include "engine_util.h"
#include "peer_client.h"

#include <jansson.h>
#include <libgen.h>
#include <math.h>
#include <sys/stat.h>

#ifndef POWER_BIN
#define POWER_BIN "power"
#endif

#define TOL_COS 0.9999
/* raw reranker scores (of order 0.1-1 here): |Power - llama.cpp|, by the
 * weight type. Both sides keep K/V in F16 and round activations to the
 * weights' dot-product type in their own order; Q8_0's pooled states agree
 * to about 2e-3 relative (cosine 0.999998), which the head carries into
 * the score (a sum of terms much larger than the score itself). Measured
 * worst: F16 1.7e-4; Q8_0 6.4e-3 at the AVX2 levels, 1.06e-2 at the
 * AVX-512 level (the XLM-R reranker, whose llama.cpp score is -0.183: the
 * two levels sum the same activations in another order, and llama.cpp's
 * AVX-512 backend in a third). */
#define TOL_SCORE_F16 1e-3
#define TOL_SCORE_Q8 2e-2

#define VOCAB POWER_PEER_ASSETS "/ggml-vocab-bert-bge.gguf"
/* XLM-RoBERTa's unigram vocabulary (250k pieces), as bge-m3 and its
 * rerankers use on the bert architecture */
#define VOCAB_UGM POWER_PEER_ASSETS "/ggml-vocab-nomic-bert-moe.gguf"
#define MAX_SEQ 8
#define MAX_LEN 256

static char g_tmp[256];
static char g_peer[1024];

static const char *const k_texts[] = {
    "Hello world",
    "The quick brown fox jumps over the lazy dog.",
    "Embeddings map text to vectors; similar texts land close together, which search and clustering use. "
    "This sentence is longer so that the pass has several dozen tokens in it, with punctuation, numbers like "
    "3.14159 and 2026, and a few rare words: antidisestablishmentarianism, quixotic, zephyr.",
    "\xC3\x9Cn\xC3\xAF" "c\xC3\xB6" "d\xC3\xA9 fa\xC3\xA7" "ade, \xE6\x9D\xB1\xE4\xBA\xAC and na\xC3\xAFve caf\xC3\xA9!",
};
#define N_TEXTS (int)(sizeof k_texts / sizeof k_texts[0])

static int sh(const char *cmd) {
  int rc = system(cmd);
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

static const char *bin(void) {
  const char *b = getenv("POWER_BIN");
  return b && *b ? b : POWER_BIN;
}

/* llama.cpp's pooled vectors of the sequences; NULL on failure. */
static json_t *peer_embed(const char *model_path, int32_t seqs[][MAX_LEN], const int *lens, int n_seq) {
  char *list = malloc(65536);
  int off = 0;
  list[0] = 0;
  for (int s = 0; s < n_seq; s++)
    for (int i = 0; i < lens[s] && off < 65000; i++)
      off += snprintf(list + off, (size_t)(65536 - off), "%s%d", i ? "," : s ? ";" : "", seqs[s][i]);
  json_t *argv = json_pack("[s, s, s, s]", model_path, list, "--threads", "2");
  free(list);
  return peer_call("embed", argv);
}

static int synth(const char *arch, const char *vocab, const char *type, const char *extra, const char *out) {
  char cmd[2048];
  snprintf(cmd, sizeof cmd, "'%s' synth --arch %s --vocab '%s' --out '%s' --type %s --layers 2 %s --quiet", bin(),
           arch, vocab, out, type, extra);
  int rc = sh(cmd);
  CHECK_MSG(rc == 0, "synth %s %s %s failed", arch, type, extra);
  return rc;
}

/* Runs the sequences through the engine (all submitted at once, so they
 * share passes); out[s] gets engine_embedding's values. */
static void engine_embed(engine *e, int32_t seqs[][MAX_LEN], const int *lens, int n_seq, float **out) {
  engine_req *r[MAX_SEQ] = {0};
  for (int s = 0; s < n_seq; s++) {
    engine_params p = base_params(seqs[s], lens[s], 0);
    p.embedding = true;
    r[s] = submit(e, &p);
  }
  const int dim = engine_embedding_dim(e);
  for (int s = 0; s < n_seq; s++) {
    if (!r[s]) continue;
    static result res;
    collect(r[s], &res);
    CHECK_MSG(res.end == ENGINE_EV_DONE, "embedding %d ended with %d: %s", s, res.end, res.message);
    const float *v = engine_embedding(r[s]);
    CHECK(v != NULL);
    if (v) memcpy(out[s], v, (size_t)dim * sizeof(float));
    engine_release(r[s]);
  }
}

static double cosine(const float *a, const double *b, int n) {
  double ab = 0, aa = 0, bb = 0;
  for (int i = 0; i < n; i++) {
    ab += a[i] * b[i];
    aa += (double)a[i] * a[i];
    bb += b[i] * b[i];
  }
  return aa > 0 && bb > 0 ? ab / sqrt(aa * bb) : 0;
}

/* One model: Power's vectors against llama.cpp's, then batch invariance. */
static void check_model(const char *label, const char *path, bool rank, double tol_score) {
  engine_opts o = {.model_path = path, .n_threads = 2, .max_active = 4};
  engine *e = create_engine(&o);
  if (!e) return;
  int32_t seqs[MAX_SEQ][MAX_LEN];
  int lens[MAX_SEQ], n_seq = 0;
  const tok_vocab *v = engine_vocab(e);
  char err[PW_ERRMAX];
  if (!rank) {
    for (int t = 0; t < N_TEXTS; t++) {
      size_t n = 0;
      CHECK(tok_encode(v, k_texts[t], strlen(k_texts[t]), true, false, seqs[n_seq], MAX_LEN, &n, err) == 0);
      lens[n_seq++] = (int)n;
    }
  } else {
    /* [CLS] query [SEP] document [SEP] (XLM-RoBERTa: <s> query </s>
     * document </s>): what node-llama-cpp evaluates for the pair (with a
     * WordPiece vocabulary it appends the end token the server omits) */
    for (int t = 1; t < N_TEXTS; t++) {
      size_t nq = 0, nd = 0;
      int32_t *s = seqs[n_seq];
      s[0] = tok_bos(v);
      CHECK(tok_encode(v, k_texts[0], strlen(k_texts[0]), false, false, s + 1, MAX_LEN - 3, &nq, err) == 0);
      s[1 + nq] = tok_sep(v);
      CHECK(tok_encode(v, k_texts[t], strlen(k_texts[t]), false, false, s + 2 + nq, MAX_LEN - 3 - nq, &nd, err) == 0);
      s[2 + nq + nd] = tok_sep(v);
      lens[n_seq++] = (int)(3 + nq + nd);
    }
  }
  const int dim = engine_embedding_dim(e);
  CHECK(rank ? engine_get_pooling(e) == ENGINE_POOL_RANK && dim == 1 : dim == engine_n_embd(e));
  float *mine[MAX_SEQ], *alone[MAX_SEQ];
  for (int s = 0; s < n_seq; s++) {
    mine[s] = calloc((size_t)dim, sizeof(float));
    alone[s] = calloc((size_t)dim, sizeof(float));
  }
  engine_embed(e, seqs, lens, n_seq, mine);
  /* batch invariance: each alone gives the same bits */
  for (int s = 0; s < n_seq; s++) engine_embed(e, &seqs[s], &lens[s], 1, &alone[s]);
  for (int s = 0; s < n_seq; s++)
    CHECK_MSG(memcmp(mine[s], alone[s], (size_t)dim * sizeof(float)) == 0, "%s: sequence %d differs alone", label, s);
  /* and on one thread */
  engine_opts o1 = o;
  o1.n_threads = 1;
  engine *e1 = create_engine(&o1);
  if (e1) {
    engine_embed(e1, seqs, lens, n_seq, alone);
    for (int s = 0; s < n_seq; s++)
      CHECK_MSG(memcmp(mine[s], alone[s], (size_t)dim * sizeof(float)) == 0, "%s: sequence %d differs on 1 thread",
                label, s);
    engine_destroy(e1);
  }
  json_t *j = peer_embed(path, seqs, lens, n_seq);
  CHECK_MSG(j != NULL, "%s: llama.cpp did not run", label);
  json_t *vecs = j ? json_object_get(j, "vectors") : NULL;
  CHECK_MSG(vecs && (int)json_array_size(vecs) == n_seq, "%s: peer gave %zu vectors", label,
            vecs ? json_array_size(vecs) : 0);
  double worst_cos = 1, worst_score = 0;
  for (int s = 0; vecs && s < n_seq && (int)json_array_size(vecs) == n_seq; s++) {
    json_t *pv = json_array_get(vecs, (size_t)s);
    CHECK_MSG((int)json_array_size(pv) == dim, "%s: peer vector of %zu, Power %d", label, json_array_size(pv), dim);
    if ((int)json_array_size(pv) != dim) continue;
    double *ref = malloc((size_t)dim * sizeof(double));
    for (int i = 0; i < dim; i++) ref[i] = json_number_value(json_array_get(pv, (size_t)i));
    if (rank) {
      double d = fabs(mine[s][0] - ref[0]);
      if (d > worst_score) worst_score = d;
      CHECK_MSG(d <= tol_score, "%s: pair %d: score %.6f, llama.cpp %.6f (tolerance %g)", label, s, mine[s][0], ref[0],
                tol_score);
    } else {
      double c = cosine(mine[s], ref, dim);
      if (c < worst_cos) worst_cos = c;
      CHECK_MSG(c >= TOL_COS, "%s: text %d (%d tokens): cosine %.6f < %.4f", label, s, lens[s], c, TOL_COS);
      double nn = 0;
      for (int i = 0; i < dim; i++) nn += (double)mine[s][i] * mine[s][i];
      CHECK_MSG(fabs(nn - 1) < 1e-4, "%s: vector %d is not unit length (%g)", label, s, nn);
    }
    free(ref);
  }
  if (rank)
    fprintf(stderr, "%-34s %d pairs: max |score - llama.cpp| %.2e\n", label, n_seq, worst_score);
  else
    fprintf(stderr, "%-34s %d texts: min cosine with llama.cpp %.7f\n", label, n_seq, worst_cos);
  json_decref(j);
  for (int s = 0; s < n_seq; s++) {
    free(mine[s]);
    free(alone[s]);
  }
  engine_destroy(e);
}

/* What an encoder refuses. */
static void check_refusals(const char *path) {
  engine_opts o = {.model_path = path, .n_threads = 2, .max_active = 2};
  engine *e = create_engine(&o);
  if (!e) return;
  CHECK(engine_is_encoder(e));
  int32_t ids[600];
  for (int i = 0; i < 600; i++) ids[i] = 1000 + i;
  engine_params p = base_params(ids, 8, 4);
  engine_req *r = NULL;
  char err[PW_ERRMAX] = "";
  CHECK_EQ_INT(engine_submit(e, &p, &r, err), PW_EINVAL);
  CHECK_MSG(strstr(err, "embedding model") != NULL, "message: %s", err);
  p = base_params(ids, 600, 0);
  p.embedding = true;
  CHECK_EQ_INT(engine_submit(e, &p, &r, err), PW_ECONTEXT);
  CHECK(r == NULL);
  engine_destroy(e);
  engine *e2 = NULL;
  o.n_ctx = 1024; /* bert's position table has 512 rows */
  CHECK_EQ_INT(engine_create(&o, &e2, err), PW_EINVAL);
  CHECK_MSG(strstr(err, "512 positions") != NULL, "message: %s", err);
  o.n_ctx = 0;
  o.spec_mode = ENGINE_SPEC_NGRAM;
  CHECK_EQ_INT(engine_create(&o, &e2, err), PW_EINVAL);
  CHECK(e2 == NULL);
}

int main(void) {
  char self[1024];
  snprintf(self, sizeof self, "%s", __FILE__);
  snprintf(g_peer, sizeof g_peer, "%s/../peer", dirname(self));
  if (sh("command -v node >/dev/null 2>&1") != 0) {
    fprintf(stderr, "FAIL: `node` is not installed; the llama.cpp peer check needs Node.js >= 20\n");
    return 1;
  }
  char probe[1200];
  snprintf(probe, sizeof probe, "%s/node_modules/node-llama-cpp/package.json", g_peer);
  if (access(probe, R_OK) != 0) {
    fprintf(stderr, "FAIL: %s/node_modules is missing; run scripts/install-node-deps.sh first\n", g_peer);
    return 1;
  }
  if (access(VOCAB, R_OK) != 0) {
    fprintf(stderr, "FAIL: %s is missing (the peer_assets test extracts it)\n", VOCAB);
    return 1;
  }
  snprintf(g_tmp, sizeof g_tmp, "/tmp/power-bert-XXXXXX");
  if (!mkdtemp(g_tmp)) {
    fprintf(stderr, "FAIL: mkdtemp\n");
    return 1;
  }
  char errp[300];
  snprintf(errp, sizeof errp, "%s/peer.err", g_tmp);
  peer_client_init(g_peer, errp);
  static const struct {
    const char *label, *arch, *type, *extra;
    bool rank;
    const char *vocab;
  } cases[] = {
      {"bge-small F16 cls", "bge-small-en-v1.5", "F16", "", false, VOCAB},
      {"bge-small F16 mean", "bge-small-en-v1.5", "F16", "--pooling mean", false, VOCAB},
      {"bge-small Q8_0 last", "bge-small-en-v1.5", "Q8_0", "--pooling last", false, VOCAB},
      {"bge-small Q8_0 cls", "bge-small-en-v1.5", "Q8_0", "--pooling cls", false, VOCAB},
      {"nomic-embed Q8_0 mean", "nomic-embed-text-v1.5", "Q8_0", "", false, VOCAB},
      {"nomic-embed F16 cls", "nomic-embed-text-v1.5", "F16", "--pooling cls", false, VOCAB},
      {"ms-marco reranker F16 rank", "ms-marco-minilm-l6-v2", "F16", "", true, VOCAB},
      {"ms-marco reranker Q8_0 rank", "ms-marco-minilm-l6-v2", "Q8_0", "", true, VOCAB},
      {"reranker, XLM-R vocab, Q8_0", "ms-marco-minilm-l6-v2", "Q8_0", "", true, VOCAB_UGM},
      {"bge-small, XLM-R vocab, Q8_0 mean", "bge-small-en-v1.5", "Q8_0", "--pooling mean", false, VOCAB_UGM},
      /* ALiBi and the GEGLU of a double-width ffn_up; a reranker whose
       * head projects straight to its score */
      {"jina-v2-small F16 mean", "jina-embeddings-v2-small-en", "F16", "", false, VOCAB},
      {"jina-v2-small Q8_0 cls", "jina-embeddings-v2-small-en", "Q8_0", "--pooling cls", false, VOCAB},
      {"jina-reranker F16 rank", "jina-reranker-v1-tiny-en", "F16", "", true, VOCAB},
  };
  char path[512];
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    snprintf(path, sizeof path, "%s/m%zu.gguf", g_tmp, i);
    if (synth(cases[i].arch, cases[i].vocab, cases[i].type, cases[i].extra, path) == 0)
      check_model(cases[i].label, path, cases[i].rank, strcmp(cases[i].type, "F16") ? TOL_SCORE_Q8 : TOL_SCORE_F16);
    if (i == 0) check_refusals(path);
    unlink(path);
  }
  char cmd[600];
  peer_client_stop();
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_tmp);
  sh(cmd);
  TEST_DONE();
}
