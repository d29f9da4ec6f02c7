/* test_quantize.c - `power quantize` and `power synth` end to end, through
 * the real binary:
 *  - codelm-py (a trained model) F32 -> Q8_0 and Q4_K_M: the files load,
 *    keep every metadata key (general.file_type set to llama.cpp's value),
 *    and their greedy next-token predictions over real Python code agree
 *    with the F32 model's (Q8_0: wherever the F32 top-1 margin exceeds 0.5;
 *    Q4_K_M: at most positions);
 *  - output bytes are the same across runs and thread counts;
 *  - the per-tensor mix follows llama.cpp's rules (tied embedding as the
 *    output tensor, attn_v/ffn_down with more bits, 192-wide fallbacks);
 *  - synth writes loadable models of every architecture with finite,
 *    varied logits;
 *  - clear errors: already-quantized input, unknown type, unwritable output.
 * POWER_BIN may be overridden by the environment variable of the same
 * name. */
#include "base/error.h"
#include "gguf/gguf.h"
#include "model/model.h"
#include "tensor/dtype.h"
#include "tok/tok.h"
#include "test.h"

#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef POWER_BIN
#define POWER_BIN "power"
#endif

static char g_tmp[256];

static const char *bin(void) {
  const char *b = getenv("POWER_BIN");
  return b && *b ? b : POWER_BIN;
}

/* Runs the binary with args; stderr to errfile (or /dev/null). Exit code. */
static int run(const char *args, const char *errfile) {
  char cmd[4096];
  snprintf(cmd, sizeof cmd, "'%s' %s >/dev/null 2>'%s'", bin(), args, errfile ? errfile : "/dev/null");
  int rc = system(cmd);
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

static char *slurp(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *b = malloc((size_t)n + 1);
  if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
    free(b);
    b = NULL;
  }
  if (b) b[n] = 0;
  fclose(f);
  if (len) *len = (size_t)n;
  return b;
}

static int same_file(const char *a, const char *b) {
  size_t la, lb;
  char *x = slurp(a, &la), *y = slurp(b, &lb);
  int same = x && y && la == lb && !memcmp(x, y, la);
  free(x);
  free(y);
  return same;
}

static const char k_code[] =
    "import os\n"
    "import sys\n"
    "\n"
    "\n"
    "def read_lines(path):\n"
    "    \"\"\"Return the lines of a file without trailing newlines.\"\"\"\n"
    "    with open(path, encoding=\"utf-8\") as f:\n"
    "        return [line.rstrip(\"\\n\") for line in f]\n"
    "\n"
    "\n"
    "class Counter:\n"
    "    def __init__(self):\n"
    "        self.counts = {}\n"
    "\n"
    "    def add(self, key):\n"
    "        self.counts[key] = self.counts.get(key, 0) + 1\n";

/* All-position logits of a prompt in one batch. Caller frees. */
static float *logits_all(model *m, const int32_t *ids, int n) {
  char err[PW_ERRMAX];
  model_kv *kv = NULL;
  model_ctx *c = NULL;
  int V = model_hp(m)->n_vocab;
  float *lg = calloc((size_t)V * (size_t)n, sizeof(float));
  model_entry *e = malloc(sizeof *e * (size_t)n);
  CHECK_MSG(model_kv_create(m, 1, n + 8, &kv, err) == 0, "%s", err);
  CHECK_MSG(model_ctx_create(m, n, n + 8, &c, err) == 0, "%s", err);
  for (int i = 0; i < n; i++) e[i] = (model_entry){0, i, ids[i], true};
  int rc = kv && c ? model_forward(c, kv, e, n, lg, NULL, err) : -1;
  CHECK_MSG(rc == 0, "forward: %s", err);
  model_ctx_destroy(c);
  model_kv_destroy(kv);
  free(e);
  return lg;
}

static void top2(const float *x, int n, int *a, float *margin) {
  int b0 = 0, b1 = -1;
  for (int i = 1; i < n; i++) {
    if (x[i] > x[b0]) {
      b1 = b0;
      b0 = i;
    } else if (b1 < 0 || x[i] > x[b1]) {
      b1 = i;
    }
  }
  *a = b0;
  *margin = x[b0] - x[b1];
}

static uint32_t tensor_type(const gguf_file *f, const char *name) {
  const gguf_tensor *t = gguf_find_tensor(f, name);
  return t ? t->type : UINT32_MAX;
}

static void test_codelm(void) {
  char f32[1024], q8[300], q8b[300], q4[300], q4b[300], h16[300], args[2048], err[PW_ERRMAX], errf[300];
  snprintf(f32, sizeof f32, "%s/models/codelm-py-F32.gguf", POWER_SHARED_DIR);
  if (access(f32, R_OK)) {
    CHECK_MSG(0, "missing test asset %s", f32);
    return;
  }
  snprintf(q8, sizeof q8, "%s/q8.gguf", g_tmp);
  snprintf(q8b, sizeof q8b, "%s/q8b.gguf", g_tmp);
  snprintf(q4, sizeof q4, "%s/q4.gguf", g_tmp);
  snprintf(q4b, sizeof q4b, "%s/q4b.gguf", g_tmp);
  snprintf(h16, sizeof h16, "%s/f16.gguf", g_tmp);
  snprintf(errf, sizeof errf, "%s/err", g_tmp);
  snprintf(args, sizeof args, "quantize '%s' '%s' F16 --quiet", f32, h16);
  CHECK_MSG(run(args, errf) == 0, "quantize F16 failed");
  snprintf(args, sizeof args, "quantize '%s' '%s' Q8_0 --threads 2", f32, q8);
  CHECK_MSG(run(args, errf) == 0, "quantize Q8_0 failed");
  char *progress = slurp(errf, NULL);
  CHECK_MSG(progress && strstr(progress, "[  56/  56]"), "no tensor i/n progress on stderr");
  free(progress);
  snprintf(args, sizeof args, "quantize '%s' '%s' q8_0 --threads 1 --quiet", f32, q8b);
  CHECK(run(args, errf) == 0);
  CHECK_MSG(same_file(q8, q8b), "Q8_0 output differs between 2 and 1 threads");
  snprintf(args, sizeof args, "quantize '%s' '%s' Q4_K_M --threads 2 --quiet", f32, q4);
  CHECK_MSG(run(args, errf) == 0, "quantize Q4_K_M failed");
  snprintf(args, sizeof args, "quantize '%s' '%s' Q4_K_M --threads 1 --quiet", f32, q4b);
  CHECK(run(args, errf) == 0);
  CHECK_MSG(same_file(q4, q4b), "Q4_K_M output differs between 2 and 1 threads");
  snprintf(args, sizeof args, "quantize '%s' '%s' Q4_K_M --threads 2 --quiet", f32, q4b);
  CHECK(run(args, errf) == 0);
  CHECK_MSG(same_file(q4, q4b), "Q4_K_M output differs between two runs");

  /* Metadata and the mix. */
  gguf_file *fi = NULL, *f8 = NULL, *f4 = NULL, *fh = NULL;
  CHECK_MSG(gguf_open(h16, &fh, err) == 0, "%s", err);
  if (fh) {
    uint32_t ft;
    CHECK(gguf_get_u32(fh, "general.file_type", &ft) && ft == 1);
    CHECK_EQ_INT(tensor_type(fh, "token_embd.weight"), PW_DT_F16);
    CHECK_EQ_INT(tensor_type(fh, "blk.3.ffn_down.weight"), PW_DT_F16);
    CHECK_EQ_INT(tensor_type(fh, "output_norm.weight"), PW_DT_F32);
  }
  gguf_close(fh);
  CHECK(gguf_open(f32, &fi, err) == 0);
  CHECK_MSG(gguf_open(q8, &f8, err) == 0, "%s", err);
  CHECK_MSG(gguf_open(q4, &f4, err) == 0, "%s", err);
  if (fi && f8 && f4) {
    uint32_t ft;
    CHECK(gguf_get_u32(f8, "general.file_type", &ft) && ft == 7);
    CHECK(gguf_get_u32(f4, "general.file_type", &ft) && ft == 15);
    for (uint64_t i = 0; i < gguf_n_kv(fi); i++) {
      const gguf_kv *kv = gguf_kv_at(fi, i);
      char key[256];
      snprintf(key, sizeof key, "%.*s", (int)kv->key.len, kv->key.ptr);
      if (!strcmp(key, "general.file_type")) continue;
      CHECK_MSG(gguf_find_kv(f4, key) && gguf_find_kv(f4, key)->type == kv->type, "key %s not copied", key);
    }
    CHECK_EQ_INT(gguf_n_tensors(f4), gguf_n_tensors(fi));
    /* llama.cpp's order: non-layer tensors first, then layer by layer. */
    CHECK(gguf_str_eq(gguf_tensor_at(f4, 0)->name, "output_norm.weight"));
    CHECK(gguf_str_eq(gguf_tensor_at(f4, 1)->name, "token_embd.weight"));
    CHECK(gguf_str_eq(gguf_tensor_at(f4, 2)->name, "blk.0.attn_k.weight"));
    for (uint64_t i = 0; i < gguf_n_tensors(f8); i++) {
      const gguf_tensor *t = gguf_tensor_at(f8, i);
      CHECK_MSG(t->type == (t->n_dims == 1 ? PW_DT_F32 : PW_DT_Q8_0), "Q8_0 file: %.*s has type %u",
                (int)t->name.len, t->name.ptr, t->type);
    }
    /* codelm: 6 layers, n_embd 192 (not a multiple of 256), ffn 512, tied. */
    CHECK_EQ_INT(tensor_type(f4, "token_embd.weight"), PW_DT_Q8_0); /* output rule, 192 -> Q8_0 */
    CHECK_EQ_INT(tensor_type(f4, "blk.0.attn_q.weight"), PW_DT_Q5_0); /* Q4_K fallback */
    CHECK_EQ_INT(tensor_type(f4, "blk.2.attn_v.weight"), PW_DT_Q8_0); /* more bits: Q6_K fallback */
    CHECK_EQ_INT(tensor_type(f4, "blk.1.attn_v.weight"), PW_DT_Q5_0);
    CHECK_EQ_INT(tensor_type(f4, "blk.2.ffn_down.weight"), PW_DT_Q6_K); /* 512 wide: real K-quants */
    CHECK_EQ_INT(tensor_type(f4, "blk.5.ffn_down.weight"), PW_DT_Q6_K);
    CHECK_EQ_INT(tensor_type(f4, "blk.1.ffn_down.weight"), PW_DT_Q4_K);
    CHECK_EQ_INT(tensor_type(f4, "blk.0.attn_norm.weight"), PW_DT_F32);
  }
  gguf_close(fi);
  gguf_close(f8);
  gguf_close(f4);

  /* Predictions over real code. */
  model *mf = NULL, *m8 = NULL, *m4 = NULL, *mh = NULL;
  model_opts o = {.n_threads = 2};
  CHECK_MSG(model_load(h16, &o, &mh, err) == 0, "%s", err);
  CHECK_MSG(model_load(f32, &o, &mf, err) == 0, "%s", err);
  CHECK_MSG(model_load(q8, &o, &m8, err) == 0, "%s", err);
  CHECK_MSG(model_load(q4, &o, &m4, err) == 0, "%s", err);
  if (!mf || !m8 || !m4 || !mh) goto done;
  tok_vocab *v = NULL;
  CHECK_MSG(tok_vocab_load(model_gguf(mf), &v, err) == 0, "%s", err);
  int32_t ids[256];
  size_t n = 0;
  CHECK_MSG(v && tok_encode(v, k_code, strlen(k_code), true, false, ids, 256, &n, err) == 0, "%s", err);
  tok_vocab_destroy(v);
  CHECK(n > 40 && n <= 200);
  if (n <= 40 || n > 200) goto done;
  int V = model_hp(mf)->n_vocab;
  float *lf = logits_all(mf, ids, (int)n), *l8 = logits_all(m8, ids, (int)n), *l4 = logits_all(m4, ids, (int)n);
  float *lh = logits_all(mh, ids, (int)n);
  double maxdh = 0;
  for (size_t k = 0; k < n * (size_t)V; k++)
    if (fabs((double)lf[k] - lh[k]) > maxdh) maxdh = fabs((double)lf[k] - lh[k]);
  CHECK_MSG(maxdh < 0.05, "F16 logits drift %.4f", maxdh);
  free(lh);
  int agree8 = 0, agree4 = 0, confident = 0, confident_agree8 = 0, confident_agree4 = 0, finite = 1;
  double maxd8 = 0, maxd4 = 0;
  for (size_t i = 0; i < n; i++) {
    const float *a = lf + i * (size_t)V, *b = l8 + i * (size_t)V, *c = l4 + i * (size_t)V;
    int ta, tb, tc;
    float ma, mb, mc;
    top2(a, V, &ta, &ma);
    top2(b, V, &tb, &mb);
    top2(c, V, &tc, &mc);
    for (int k = 0; k < V; k++) {
      if (!isfinite(b[k]) || !isfinite(c[k])) finite = 0;
      double d8 = fabs((double)a[k] - b[k]), d4 = fabs((double)a[k] - c[k]);
      if (d8 > maxd8) maxd8 = d8;
      if (d4 > maxd4) maxd4 = d4;
    }
    agree8 += ta == tb;
    agree4 += ta == tc;
    if (ma > 0.5f) {
      confident++;
      confident_agree8 += ta == tb;
      confident_agree4 += ta == tc;
    }
  }
  fprintf(stderr,
          "codelm-py over %zu positions: Q8_0 top-1 agrees at %d (%d of %d where the F32 margin > 0.5), max |dlogit| "
          "%.3f; Q4_K_M agrees at %d (%d of %d), max |dlogit| %.3f; F16 max |dlogit| %.4f\n",
          n, agree8, confident_agree8, confident, maxd8, agree4, confident_agree4, confident, maxd4, maxdh);
  CHECK(finite);
  CHECK_MSG(confident_agree8 == confident, "Q8_0 top-1 differs where F32 is confident");
  CHECK_MSG(agree8 >= (int)(n * 9 / 10), "Q8_0 top-1 agrees at only %d of %zu", agree8, n);
  CHECK_MSG(agree4 >= (int)(n * 3 / 4), "Q4_K_M top-1 agrees at only %d of %zu", agree4, n);
  CHECK_MSG(confident_agree4 >= confident * 9 / 10, "Q4_K_M confident agreement %d of %d", confident_agree4,
            confident);
  CHECK_MSG(maxd8 < 1.0, "Q8_0 logits drift %.3f", maxd8);
  free(lf);
  free(l8);
  free(l4);
done:
  model_destroy(mf);
  model_destroy(m8);
  model_destroy(m4);
  model_destroy(mh);
  unlink(h16);
  unlink(q8);
  unlink(q8b);
  unlink(q4);
  unlink(q4b);
}

/* The non-linear types on codelm-py (192-wide rows: IQ4_XS falls back to
 * IQ4_NL there, 512-wide ffn_down stays IQ4_XS): llama.cpp's file types
 * and mixes, the same bytes for 1 and 2 threads, and greedy predictions
 * over real code that mostly agree with the F32 model's. MXFP4_MOE on a
 * dense model is all Q8_0 (it only puts experts in MXFP4); --pure makes
 * every matrix MXFP4. */
static void test_iq_mixes(void) {
  char f32[1024], xs[300], xs1[300], nl[300], mx[300], mxp[300], args[2048], err[PW_ERRMAX], errf[300];
  snprintf(f32, sizeof f32, "%s/models/codelm-py-F32.gguf", POWER_SHARED_DIR);
  snprintf(xs, sizeof xs, "%s/iq4xs.gguf", g_tmp);
  snprintf(xs1, sizeof xs1, "%s/iq4xs1.gguf", g_tmp);
  snprintf(nl, sizeof nl, "%s/iq4nl.gguf", g_tmp);
  snprintf(mx, sizeof mx, "%s/mxfp4.gguf", g_tmp);
  snprintf(mxp, sizeof mxp, "%s/mxfp4p.gguf", g_tmp);
  snprintf(errf, sizeof errf, "%s/err", g_tmp);
  const struct {
    const char *type, *flags;
    char *out;
  } runs[] = {{"IQ4_XS", "--threads 2", xs}, {"iq4_xs", "--threads 1", xs1}, {"IQ4_NL", "", nl},
              {"MXFP4_MOE", "", mx},         {"MXFP4_MOE", "--pure", mxp}};
  for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
    snprintf(args, sizeof args, "quantize '%s' '%s' %s %s --quiet", f32, runs[i].out, runs[i].type, runs[i].flags);
    CHECK_MSG(run(args, errf) == 0, "quantize %s %s failed", runs[i].type, runs[i].flags);
  }
  CHECK_MSG(same_file(xs, xs1), "IQ4_XS output differs between 2 and 1 threads");
  gguf_file *fx = NULL, *fn = NULL, *fm = NULL, *fp = NULL;
  CHECK_MSG(gguf_open(xs, &fx, err) == 0, "%s", err);
  CHECK_MSG(gguf_open(nl, &fn, err) == 0, "%s", err);
  CHECK_MSG(gguf_open(mx, &fm, err) == 0, "%s", err);
  CHECK_MSG(gguf_open(mxp, &fp, err) == 0, "%s", err);
  if (fx && fn && fm && fp) {
    uint32_t ft;
    CHECK(gguf_get_u32(fx, "general.file_type", &ft) && ft == 30);
    CHECK(gguf_get_u32(fn, "general.file_type", &ft) && ft == 25);
    CHECK(gguf_get_u32(fm, "general.file_type", &ft) && ft == 38);
    CHECK(gguf_get_u32(fp, "general.file_type", &ft) && ft == 38);
    CHECK_EQ_INT(tensor_type(fx, "token_embd.weight"), PW_DT_Q8_0);      /* output rule, 192 % 256 */
    CHECK_EQ_INT(tensor_type(fx, "blk.0.attn_q.weight"), PW_DT_IQ4_NL);  /* 192 wide: fallback */
    CHECK_EQ_INT(tensor_type(fx, "blk.0.ffn_down.weight"), PW_DT_IQ4_XS); /* 512 wide */
    CHECK_EQ_INT(tensor_type(fx, "blk.5.ffn_up.weight"), PW_DT_IQ4_NL);
    CHECK_EQ_INT(tensor_type(fn, "token_embd.weight"), PW_DT_Q8_0); /* 192 % 32 == 0: Q6_K, whose fallback is Q8_0 */
    CHECK_EQ_INT(tensor_type(fn, "blk.3.ffn_down.weight"), PW_DT_IQ4_NL);
    for (uint64_t i = 0; i < gguf_n_tensors(fm); i++) {
      const gguf_tensor *a = gguf_tensor_at(fm, i), *b = gguf_tensor_at(fp, i);
      CHECK_MSG(a->type == (a->n_dims == 1 ? PW_DT_F32 : PW_DT_Q8_0), "MXFP4_MOE: %.*s has type %u", (int)a->name.len,
                a->name.ptr, a->type);
      CHECK_MSG(b->type == (b->n_dims == 1 ? PW_DT_F32 : PW_DT_MXFP4), "MXFP4_MOE --pure: %.*s has type %u",
                (int)b->name.len, b->name.ptr, b->type);
    }
  }
  gguf_close(fx);
  gguf_close(fn);
  gguf_close(fm);
  gguf_close(fp);
  model *mf = NULL, *mq[3] = {NULL, NULL, NULL};
  const char *qp[3] = {xs, nl, mxp}, *qn[3] = {"IQ4_XS", "IQ4_NL", "MXFP4"};
  model_opts o = {.n_threads = 2};
  CHECK_MSG(model_load(f32, &o, &mf, err) == 0, "%s", err);
  for (int k = 0; k < 3; k++) CHECK_MSG(model_load(qp[k], &o, &mq[k], err) == 0, "%s: %s", qn[k], err);
  if (mf && mq[0] && mq[1] && mq[2]) {
    tok_vocab *v = NULL;
    int32_t ids[256];
    size_t n = 0;
    CHECK_MSG(tok_vocab_load(model_gguf(mf), &v, err) == 0, "%s", err);
    CHECK_MSG(v && tok_encode(v, k_code, strlen(k_code), true, false, ids, 256, &n, err) == 0, "%s", err);
    tok_vocab_destroy(v);
    const int V = model_hp(mf)->n_vocab;
    float *lf = n > 40 && n <= 200 ? logits_all(mf, ids, (int)n) : NULL;
    for (int k = 0; k < 3 && lf; k++) {
      float *lq = logits_all(mq[k], ids, (int)n);
      int agree = 0, confident = 0, confident_agree = 0, finite = 1;
      for (size_t i = 0; i < n; i++) {
        int ta, tb;
        float ma, mb;
        top2(lf + i * (size_t)V, V, &ta, &ma);
        top2(lq + i * (size_t)V, V, &tb, &mb);
        for (int t = 0; t < V; t++) finite &= isfinite(lq[i * (size_t)V + t]) != 0;
        agree += ta == tb;
        if (ma > 0.5f) {
          confident++;
          confident_agree += ta == tb;
        }
      }
      fprintf(stderr, "codelm-py %s: top-1 agrees with F32 at %d of %zu (%d of %d where the F32 margin > 0.5)\n",
              qn[k], agree, n, confident_agree, confident);
      CHECK(finite);
      /* 4-bit types: as Q4_K_M's bounds (MXFP4's coarser grid: 2/3) */
      CHECK_MSG(agree >= (int)(n * (k == 2 ? 2 : 3) / (k == 2 ? 3 : 4)), "%s top-1 agrees at only %d of %zu", qn[k],
                agree, n);
      CHECK_MSG(confident_agree >= confident * (k == 2 ? 8 : 9) / 10, "%s confident agreement %d of %d", qn[k],
                confident_agree, confident);
      free(lq);
    }
    free(lf);
  }
  model_destroy(mf);
  for (int k = 0; k < 3; k++) model_destroy(mq[k]);
  unlink(xs);
  unlink(xs1);
  unlink(nl);
  unlink(mx);
  unlink(mxp);
}

static void test_errors(void) {
  char args[2048], errf[300], out[300];
  snprintf(errf, sizeof errf, "%s/err", g_tmp);
  snprintf(out, sizeof out, "%s/x.gguf", g_tmp);
  char *e;
  /* already quantized input */
  snprintf(args, sizeof args, "quantize '%s/models/codelm-py-Q8_0.gguf' '%s' Q4_K_M", POWER_SHARED_DIR, out);
  CHECK(run(args, errf) != 0);
  e = slurp(errf, NULL);
  CHECK_MSG(e && strstr(e, "already quantized"), "message: %s", e ? e : "");
  free(e);
  CHECK(access(out, F_OK) != 0);
  /* unknown type */
  snprintf(args, sizeof args, "quantize '%s/models/codelm-py-F32.gguf' '%s' Q9_9", POWER_SHARED_DIR, out);
  CHECK(run(args, errf) == 2);
  e = slurp(errf, NULL);
  CHECK_MSG(e && strstr(e, "unknown type 'Q9_9'") && strstr(e, "Q4_K_M"), "message: %s", e ? e : "");
  free(e);
  /* unwritable output */
  snprintf(args, sizeof args, "quantize '%s/models/codelm-py-F32.gguf' '%s/no/such/dir/x.gguf' Q8_0 --quiet",
           POWER_SHARED_DIR, g_tmp);
  CHECK(run(args, errf) != 0);
  e = slurp(errf, NULL);
  CHECK_MSG(e && strstr(e, "cannot create") && strstr(e, "no/such/dir/x.gguf"), "message: %s", e ? e : "");
  free(e);
  /* missing input */
  snprintf(args, sizeof args, "quantize '%s/missing.gguf' '%s' Q8_0", g_tmp, out);
  CHECK(run(args, errf) != 0);
  /* synth: unknown arch, vocab without tokens */
  snprintf(args, sizeof args, "synth --arch gpt-5 --vocab x --out '%s'", out);
  CHECK(run(args, errf) == 2);
  e = slurp(errf, NULL);
  CHECK_MSG(e && strstr(e, "qwen2.5-0.5b"), "synth unknown arch message: %s", e ? e : "");
  free(e);
  snprintf(args, sizeof args, "synth --arch qwen3-0.6b --vocab '%s/models/codelm-py-draft-F32.gguf' --out '%s' --type Q4_K_X",
           POWER_SHARED_DIR, out);
  CHECK(run(args, errf) == 2);
}

typedef struct synth_case {
  const char *arch, *vocab, *type;
  const char *arch_name;
  int n_embd, n_head, n_head_kv, head_dim;
  int check_threads; /* also synthesize with 1 thread and compare bytes
                      * (tests/cli/synth.sh does it on a 1-layer file) */
} synth_case;

static void test_synth(void) {
  static const synth_case cases[] = {
      /* A 32000-token vocabulary keeps the test quick; the peer test runs
       * qwen2.5 with its own 151936-token one. */
      {"qwen2.5-0.5b", "llama-spm", "Q4_K_M", "qwen2", 896, 14, 2, 64, 0},
      {"qwen3-0.6b", "llama-spm", "Q8_0", "qwen3", 1024, 16, 8, 128, 0},
      {"llama-3.2-1b", "llama-spm", "Q8_0", "llama", 2048, 32, 8, 64, 0},
  };
  for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
    const synth_case *sc = &cases[ci];
    char path[300], path1[300], vocab[1024], args[2048], err[PW_ERRMAX], errf[300];
    snprintf(path, sizeof path, "%s/%s.gguf", g_tmp, sc->arch);
    snprintf(path1, sizeof path1, "%s/%s-1.gguf", g_tmp, sc->arch);
    snprintf(vocab, sizeof vocab, "%s/tokenizer/ggml-vocab-%s.gguf", POWER_SHARED_DIR, sc->vocab);
    snprintf(errf, sizeof errf, "%s/err", g_tmp);
    snprintf(args, sizeof args, "synth --arch %s --vocab '%s' --out '%s' --type %s --layers 2 --seed 7 --quiet",
             sc->arch, vocab, path, sc->type);
    CHECK_MSG(run(args, errf) == 0, "synth %s failed", sc->arch);
    snprintf(args, sizeof args, "synth --arch %s --vocab '%s' --out '%s' --type %s --layers 2 --seed 7 --threads 1 --quiet",
             sc->arch, vocab, path1, sc->type);
    if (sc->check_threads) {
      CHECK(run(args, errf) == 0);
      CHECK_MSG(same_file(path, path1), "synth %s differs between 2 and 1 threads", sc->arch);
      unlink(path1);
    }
    gguf_file *f = NULL, *vf = NULL;
    CHECK_MSG(gguf_open(path, &f, err) == 0, "%s", err);
    CHECK(gguf_open(vocab, &vf, err) == 0);
    if (f && vf) {
      /* every tokenizer.* key copied */
      for (uint64_t i = 0; i < gguf_n_kv(vf); i++) {
        const gguf_kv *kv = gguf_kv_at(vf, i);
        if (kv->key.len < 10 || memcmp(kv->key.ptr, "tokenizer.", 10)) continue;
        char key[256];
        snprintf(key, sizeof key, "%.*s", (int)kv->key.len, kv->key.ptr);
        CHECK_MSG(gguf_find_kv(f, key) != NULL, "%s: %s not copied", sc->arch, key);
      }
      gguf_arr toks;
      CHECK(gguf_get_arr(vf, "tokenizer.ggml.tokens", &toks));
      const gguf_tensor *te = gguf_find_tensor(f, "token_embd.weight");
      CHECK(te && te->ne[0] == (uint64_t)sc->n_embd && te->ne[1] == toks.n);
      CHECK(gguf_find_tensor(f, "output.weight") == NULL); /* all three are tied */
      if (!strcmp(sc->arch, "llama-3.2-1b")) {
        const gguf_tensor *rf = gguf_find_tensor(f, "rope_freqs.weight");
        CHECK(rf && rf->type == PW_DT_F32 && rf->ne[0] == 32);
        if (rf) {
          const float *r = rf->data;
          /* short wavelengths unscaled, long ones by the factor 32, smooth between */
          CHECK(r[0] == 1.0f && r[31] == 32.0f);
          double smooth = (8192.0 / (2 * M_PI * pow(5e5, 32.0 / 64)) - 1) / 3;
          CHECK_NEAR(r[16], 1.0 / ((1 - smooth) / 32 + smooth), 1e-3);
        }
        /* Q8_0: every 2-D weight, the tied embedding included */
        CHECK_EQ_INT(tensor_type(f, "token_embd.weight"), PW_DT_Q8_0);
        CHECK_EQ_INT(tensor_type(f, "blk.1.ffn_down.weight"), PW_DT_Q8_0);
      }
      if (!strcmp(sc->arch, "qwen2.5-0.5b")) {
        CHECK(gguf_find_tensor(f, "blk.1.attn_q.bias") != NULL);
        CHECK_EQ_INT(tensor_type(f, "token_embd.weight"), PW_DT_Q8_0);
        CHECK_EQ_INT(tensor_type(f, "blk.0.attn_q.weight"), PW_DT_Q5_0);
        /* With 2 layers llama.cpp's use_more_bits picks layer 1 only. */
        CHECK_EQ_INT(tensor_type(f, "blk.1.ffn_down.weight"), PW_DT_Q6_K); /* 4864 = 19 * 256 */
        CHECK_EQ_INT(tensor_type(f, "blk.0.ffn_down.weight"), PW_DT_Q4_K);
        CHECK_EQ_INT(tensor_type(f, "blk.1.attn_v.weight"), PW_DT_Q8_0); /* Q6_K fallback */
        CHECK_EQ_INT(tensor_type(f, "blk.0.attn_v.weight"), PW_DT_Q5_0); /* Q4_K fallback */
      }
      if (!strcmp(sc->arch, "qwen3-0.6b")) {
        const gguf_tensor *qn = gguf_find_tensor(f, "blk.0.attn_q_norm.weight");
        CHECK(qn && qn->ne[0] == 128 && qn->type == PW_DT_F32);
        const gguf_tensor *q = gguf_find_tensor(f, "blk.0.attn_q.weight");
        CHECK(q && q->ne[0] == 1024 && q->ne[1] == 16 * 128 && q->type == PW_DT_Q8_0);
      }
    }
    gguf_close(vf);
    gguf_close(f);
    model *m = NULL;
    model_opts o = {.n_threads = 2};
    CHECK_MSG(model_load(path, &o, &m, err) == 0, "%s: %s", sc->arch, err);
    if (m) {
      const model_hparams *hp = model_hp(m);
      CHECK(!strcmp(hp->arch_name, sc->arch_name));
      CHECK_EQ_INT(hp->n_embd, sc->n_embd);
      CHECK_EQ_INT(hp->n_head, sc->n_head);
      CHECK_EQ_INT(hp->n_head_kv, sc->n_head_kv);
      CHECK_EQ_INT(hp->head_dim, sc->head_dim);
      CHECK_EQ_INT(hp->n_layer, 2);
      int32_t ids[6] = {100, 2000, 30000, 400, 5, 31000};
      float *lg = logits_all(m, ids, 6);
      int V = hp->n_vocab, finite = 1, distinct_top = 0, prev = -1;
      double lo = 1e30, hi = -1e30;
      for (int i = 0; i < 6; i++) {
        int t;
        float mg;
        top2(lg + (size_t)i * V, V, &t, &mg);
        distinct_top += t != prev;
        prev = t;
        for (int k = 0; k < V; k++) {
          float x = lg[(size_t)i * V + k];
          if (!isfinite(x)) finite = 0;
          if (x < lo) lo = x;
          if (x > hi) hi = x;
        }
      }
      CHECK_MSG(finite, "%s: non-finite logits", sc->arch);
      CHECK_MSG(hi - lo > 2.0 && hi - lo < 100, "%s: logit range [%g, %g]", sc->arch, lo, hi);
      CHECK_MSG(distinct_top >= 2, "%s: the same top-1 at every position", sc->arch);
      fprintf(stderr, "synth %s (%s): logits in [%.2f, %.2f]\n", sc->arch, sc->type, lo, hi);
      free(lg);
      model_destroy(m);
    }
    unlink(path);
  }
}

int main(void) {
  snprintf(g_tmp, sizeof g_tmp, "/tmp/pw_test_quantize_%d", (int)getpid());
  if (mkdir(g_tmp, 0700)) {
    fprintf(stderr, "cannot create %s\n", g_tmp);
    return 1;
  }
  test_codelm();
  test_iq_mixes();
  test_errors();
  test_synth();
  char cmd[512];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_tmp);
  if (system(cmd)) fprintf(stderr, "could not remove %s\n", g_tmp);
  TEST_DONE();
}
