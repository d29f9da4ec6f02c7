/* test_parity.c - Power's logits against llama.cpp's on every shared model
 * and prompt (../shared/parity/<model>.p<N>.json).
 *
 * For each case: the reference tokens are fed as llama.cpp did (prompt in
 * one batch, then one token at a time). At every position:
 *  - top-1 must agree wherever llama.cpp's top-1 leads its runner-up by at
 *    least 0.25 (its own batched and single-token paths differ by up to ~0.4
 *    on K-quant files, so narrower margins carry no signal);
 *  - the largest |ours - theirs| over the reference top-10 logits must stay
 *    under the tolerance for the file's weight type (k_tol below).
 * Then one-token decoding after the prompt, fed the reference tokens, must
 * choose the reference token wherever its margin is >= 0.25.
 * Worst differences are printed per model. */
#include "base/error.h"
#include "model/model.h"
#include "sample/sample.h"
#include "test.h"

#include <dirent.h>
#include <jansson.h>

#define MARGIN 0.25

/* Tolerance on the top-10 logits by the file's weight mix. Matmuls agree
 * with llama.cpp to 1e-4 at position 0 (no attention mixing yet); beyond it,
 * llama.cpp's batched prompt kernels and its F16 attention accumulation sum
 * in another order, and random-weight models amplify that. llama.cpp's own
 * batched and one-token paths differ by up to ~0.4 on K-quant files. Worst
 * values seen: tiny F16/F32 0.0001, F16 0.006, Q8_0 0.16, Q4_0 0.19,
 * Q4_K_M 0.20; each tolerance leaves margin over its worst. */
typedef struct tol_entry {
  const char *suffix;
  double tol;
} tol_entry;
static const tol_entry k_tol[] = {
    {"tiny-random", 0.01}, {"-f16", 0.03},    {"-F32", 0.03},
    {"-Q8_0", 0.25},       {"-Q4_0", 0.30},  {"-Q4_K_M", 0.35},
};

static double tol_for(const char *model_name) {
  for (size_t i = 0; i < sizeof k_tol / sizeof k_tol[0]; i++)
    if (strstr(model_name, k_tol[i].suffix)) return k_tol[i].tol;
  return 0.1;
}

typedef struct model_stat {
  char name[128];
  double worst, worst_prompt, worst_gen;
  int positions, top1_checked;
} model_stat;

static model_stat g_stats[64];
static int g_greedy_compared; /* positions the greedy check judged, over every file */
static int g_nstats;

static model_stat *stat_for(const char *name) {
  for (int i = 0; i < g_nstats; i++)
    if (!strcmp(g_stats[i].name, name)) return &g_stats[i];
  model_stat *s = &g_stats[g_nstats++];
  snprintf(s->name, sizeof s->name, "%s", name);
  return s;
}

static void run_case(const char *json_path) {
  json_error_t jerr;
  json_t *root = json_load_file(json_path, 0, &jerr);
  CHECK_MSG(root != NULL, "%s: %s", json_path, jerr.text);
  if (!root) return;
  const char *mname = json_string_value(json_object_get(root, "model"));
  int n_prompt = (int)json_integer_value(json_object_get(root, "n_prompt"));
  json_t *jtok = json_object_get(root, "tokens"), *jtop = json_object_get(root, "top");
  int n_tok = (int)json_array_size(jtok);
  char path[2048];
  snprintf(path, sizeof path, "%s/models/%s", POWER_SHARED_DIR, mname);
  model *m = NULL;
  char err[PW_ERRMAX] = "";
  model_opts mo = {.n_threads = 2};
  int rc = model_load(path, &mo, &m, err);
  CHECK_MSG(rc == 0, "%s: %s", path, err);
  if (rc) {
    json_decref(root);
    return;
  }
  const model_hparams *hp = model_hp(m);
  CHECK_EQ_INT(hp->n_vocab, json_integer_value(json_object_get(root, "n_vocab")));
  model_kv *kv;
  model_ctx *ctx;
  CHECK(model_kv_create(m, 2, n_tok + 8, &kv, err) == 0);
  CHECK(model_ctx_create(m, n_tok, n_tok + 8, &ctx, err) == 0);
  int32_t *tokens = malloc(sizeof(int32_t) * (size_t)n_tok);
  for (int i = 0; i < n_tok; i++) tokens[i] = (int32_t)json_integer_value(json_array_get(jtok, (size_t)i));
  float *logits = malloc(sizeof(float) * (size_t)hp->n_vocab * (size_t)n_tok);
  model_entry *batch = malloc(sizeof(model_entry) * (size_t)n_tok);
  /* Prompt in one batch on sequence 1 (a non-zero slot on purpose). */
  for (int i = 0; i < n_prompt; i++) batch[i] = (model_entry){1, i, tokens[i], true};
  rc = model_forward(ctx, kv, batch, n_prompt, logits, NULL, err);
  CHECK_MSG(rc == 0, "%s", err);
  for (int i = n_prompt; i < n_tok && rc == 0; i++) {
    model_entry en = {1, i, tokens[i], true};
    rc = model_forward(ctx, kv, &en, 1, logits + (size_t)i * hp->n_vocab, NULL, err);
    CHECK_MSG(rc == 0, "%s", err);
  }
  model_stat *st = stat_for(mname);
  int n_top = (int)json_array_size(jtop);
  for (int i = 0; i < n_top && i < n_tok; i++) {
    const float *lg = logits + (size_t)i * hp->n_vocab;
    json_t *row = json_array_get(jtop, (size_t)i);
    double worst = 0;
    for (size_t k = 0; k < json_array_size(row); k++) {
      json_t *pair = json_array_get(row, k);
      int id = (int)json_integer_value(json_array_get(pair, 0));
      double ref = json_number_value(json_array_get(pair, 1));
      double d = fabs(lg[id] - ref);
      if (d > worst) worst = d;
    }
    if (getenv("PARITY_DEBUG") && i < 4) fprintf(stderr, "%s pos %d diff %.4f\n", mname, i, worst);
    if (worst > st->worst) st->worst = worst;
    double *wp = i < n_prompt ? &st->worst_prompt : &st->worst_gen;
    if (worst > *wp) *wp = worst;
    st->positions++;
    CHECK_MSG(worst <= tol_for(mname), "%s pos %d: top-10 logit diff %.4f > tol %.3f", json_path, i, worst,
              tol_for(mname));
    double r0 = json_number_value(json_array_get(json_array_get(row, 0), 1));
    double r1 = json_number_value(json_array_get(json_array_get(row, 1), 1));
    int ref_top = (int)json_integer_value(json_array_get(json_array_get(row, 0), 0));
    if (r0 - r1 >= MARGIN) {
      st->top1_checked++;
      CHECK_MSG(pw_argmax(lg, hp->n_vocab) == ref_top, "%s pos %d: top-1 %d, reference %d (margin %.3f)", json_path,
                i, pw_argmax(lg, hp->n_vocab), ref_top, r0 - r1);
    }
  }
  /* Greedy generation on sequence 0 from the prompt alone. */
  for (int i = 0; i < n_prompt; i++) batch[i] = (model_entry){0, i, tokens[i], i == n_prompt - 1};
  model_kv_truncate(kv, 0, 0);
  rc = model_forward(ctx, kv, batch, n_prompt, logits, NULL, err);
  CHECK_MSG(rc == 0, "%s", err);
  /* One token at a time after the prompt, fed the reference's tokens:
   * where llama.cpp's margin is wide the greedy choice must be its token;
   * narrow places (random weights have many) are fed but not judged. */
  int matched = 0, compared = 0, wide = 0;
  for (int i = n_prompt; i < n_tok; i++) {
    json_t *row = json_array_get(jtop, (size_t)(i - 1));
    if (json_number_value(json_array_get(json_array_get(row, 0), 1)) -
            json_number_value(json_array_get(json_array_get(row, 1), 1)) >=
        MARGIN)
      wide++;
  }
  for (int i = n_prompt; i < n_tok && rc == 0; i++) {
    json_t *row = json_array_get(jtop, (size_t)(i - 1));
    double margin = json_number_value(json_array_get(json_array_get(row, 0), 1)) -
                    json_number_value(json_array_get(json_array_get(row, 1), 1));
    if (margin >= MARGIN) {
      int32_t g = pw_argmax(logits, hp->n_vocab);
      compared++;
      CHECK_MSG(g == tokens[i], "%s: greedy token %d at %d, reference %d", json_path, g, i, tokens[i]);
      if (g != tokens[i]) break;
      matched++;
    }
    model_entry en = {0, i, tokens[i], true};
    rc = model_forward(ctx, kv, &en, 1, logits, NULL, err);
  }
  /* Every wide-margin position is judged (a failure stops early and has
   * been reported); a suite that judges none would pass whatever the model
   * did, so main checks the total. */
  CHECK_MSG(rc == 0 && (compared == wide || matched < compared), "%s: the greedy check judged %d of %d positions",
            json_path, compared, wide);
  g_greedy_compared += compared;
  fprintf(stderr, "%-36s greedy matched %d of %d generated tokens (the others had narrow margins)\n", json_path + strlen(POWER_SHARED_DIR) + 1,
          matched, n_tok - n_prompt);
  free(batch);
  free(logits);
  free(tokens);
  model_ctx_destroy(ctx);
  model_kv_destroy(kv);
  model_destroy(m);
  json_decref(root);
  (void)compared;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

int main(void) {
  char dir[1024];
  snprintf(dir, sizeof dir, "%s/parity", POWER_SHARED_DIR);
  DIR *d = opendir(dir);
  CHECK_MSG(d != NULL, "missing test assets: %s", dir);
  if (!d) TEST_DONE();
  char *names[256];
  int n = 0;
  struct dirent *de;
  while ((de = readdir(d)) && n < 256)
    if (strstr(de->d_name, ".json")) names[n++] = strdup(de->d_name);
  closedir(d);
  qsort(names, (size_t)n, sizeof names[0], cmp_str);
  CHECK_MSG(n >= 10, "expected the shared parity files, found %d", n);
  for (int i = 0; i < n; i++) {
    char path[2048];
    snprintf(path, sizeof path, "%s/%s", dir, names[i]);
    run_case(path);
    free(names[i]);
  }
  fprintf(stderr, "\nworst |logit diff| over reference top-10, per model (tolerance):\n");
  for (int i = 0; i < g_nstats; i++)
    fprintf(stderr, "  %-28s %.4f (tolerance %.3f; prompt %.4f, generated %.4f)  positions %d, top-1 checked at %d\n",
            g_stats[i].name, g_stats[i].worst, tol_for(g_stats[i].name), g_stats[i].worst_prompt, g_stats[i].worst_gen,
            g_stats[i].positions, g_stats[i].top1_checked);
  fprintf(stderr, "greedy check: %d positions judged\n", g_greedy_compared);
  CHECK_MSG(g_greedy_compared >= n, "the greedy check judged only %d positions over %d files", g_greedy_compared, n);
  TEST_DONE();
}
