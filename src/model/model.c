/* model.c - hyperparameters, weight binding and validation, KV cache, and
 * the batched forward pass for llama-family decoders.
 *
 * Numerics follow llama.cpp's CPU graph where it matters for parity:
 * RMSNorm sums squares in double, RoPE angles are built by repeated
 * multiplication with theta_scale (as ggml's rope cache does), matmuls
 * quantize activations to the weight's dot-product type (tensor/matmul.h),
 * K/V are stored as F16 and attention accumulates V in F16 like llama.cpp's
 * CPU flash attention. */
#include "model/model.h"

#include "base/error.h"
#include "base/log.h"
#include "base/mem.h"
#include "tensor/attn.h"
#include "tensor/dtype.h"
#include "tensor/matmul.h"
#include "tensor/ops.h"
#include "tensor/quants.h"
#include "tensor/traits.h"

#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct arch_desc {
  const char *name;
  model_arch arch;
  bool rope_neox;   /* rotate halves instead of adjacent pairs */
  bool qkv_bias;    /* attn_{q,k,v}.bias present (required) */
  bool qk_norm;     /* per-head attn_{q,k}_norm (required) */
} arch_desc;

static const arch_desc k_archs[] = {
    {"llama", MODEL_ARCH_LLAMA, false, false, false},
    {"qwen2", MODEL_ARCH_QWEN2, true, true, false},
    {"qwen3", MODEL_ARCH_QWEN3, true, false, true},
};

typedef struct layer_w {
  const float *attn_norm; /* [n_embd] */
  model_weight wq, wk, wv, wo;
  const float *bq, *bk, *bv; /* biases or NULL */
  const float *q_norm, *k_norm; /* [head_dim] or NULL */
  const float *ffn_norm;
  model_weight w_gate, w_up, w_down;
} layer_w;

struct model {
  gguf_file *f;
  model_hparams hp;
  const arch_desc *ad;
  model_weight tok_embd; /* n_vocab rows of n_embd */
  model_weight output;   /* n_vocab rows of n_embd (tied: = tok_embd) */
  const float *output_norm;
  const float *rope_freqs; /* [head_dim/2] or NULL */
  layer_w *layers;
  pw_pool *pool;
  bool pool_borrowed;    /* opts->pool: not ours to destroy */
  unsigned mm_hints;     /* PW_MM_RESIDENT for files that fit in cache */
  gguf_residency res;    /* how the weights are mapped */
};

struct model_kv {
  int n_layer, n_seq, n_ctx, n_head_kv, head_dim;
  /* [n_layer][n_seq][n_head_kv][n_ctx][head_dim] F16: each KV head's rows
   * are contiguous, one stream for the thread that attends over them */
  uint16_t *k, *v;
  int *len;        /* [n_seq] */
};

struct model_ctx {
  const model *m;
  int max_batch, max_ctx;
  float *x, *xn, *q, *k, *v, *att, *gate, *up; /* [max_batch][...] */
  float *rows;          /* [max_batch][n_embd] gathered rows for logits */
  float *rope_cos, *rope_sin; /* [max_batch][head_dim/2] */
  int *att_groups;      /* [max_batch] first entry of each attention group */
  void *mm_scratch;
};

/* ---- loading ---------------------------------------------------------- */

#define MODEL_RESIDENT_BYTES (16u << 20)

static int get_u32_key(const gguf_file *f, const char *arch, const char *suffix, bool required, uint32_t *out,
                       char *err) {
  char key[128];
  snprintf(key, sizeof key, "%s.%s", arch, suffix);
  if (gguf_get_u32(f, key, out)) return 0;
  if (!required) return 1;
  if (gguf_find_kv(f, key)) return pw_seterr(err, PW_EFORMAT, "metadata %s has a non-integer type", key);
  return pw_seterr(err, PW_EFORMAT, "metadata %s is missing", key);
}

static int bind_weight(const gguf_file *f, const char *name, int64_t n_in, int64_t n_out, model_weight *w,
                       bool required, char *err) {
  const gguf_tensor *t = gguf_find_tensor(f, name);
  memset(w, 0, sizeof *w);
  if (!t) return required ? pw_seterr(err, PW_EFORMAT, "tensor %s is missing", name) : 1;
  const pw_dtype_info *di = pw_dtype_get(t->type);
  if (!di || !di->weight_ok || !pw_traits_get(t->type))
    return pw_seterr(err, PW_EUNSUPPORTED, "tensor %s has unsupported type %s (%u)", name,
                     di ? di->name : "unknown", t->type);
  if (t->n_dims > 2 || (int64_t)t->ne[0] != n_in || (int64_t)t->ne[1] != n_out)
    return pw_seterr(err, PW_EFORMAT, "tensor %s has shape [%llu, %llu], expected [%lld, %lld]", name,
                     (unsigned long long)t->ne[0], (unsigned long long)t->ne[1], (long long)n_in,
                     (long long)n_out);
  w->data = t->data;
  w->type = t->type;
  w->n_in = n_in;
  w->n_out = n_out;
  return 0;
}

/* A 1-D F32 vector of n elements (norm weights, biases). */
static int bind_vec(const gguf_file *f, const char *name, int64_t n, const float **out, bool required,
                    char *err) {
  const gguf_tensor *t = gguf_find_tensor(f, name);
  *out = NULL;
  if (!t) return required ? pw_seterr(err, PW_EFORMAT, "tensor %s is missing", name) : 1;
  if (t->type != PW_DT_F32)
    return pw_seterr(err, PW_EUNSUPPORTED, "tensor %s: type %s, expected F32", name,
                     pw_dtype_name(t->type) ? pw_dtype_name(t->type) : "unknown");
  if (t->n_dims != 1 || (int64_t)t->ne[0] != n)
    return pw_seterr(err, PW_EFORMAT, "tensor %s has %llu elements, expected %lld", name,
                     (unsigned long long)t->ne[0], (long long)n);
  if ((uintptr_t)t->data % 4) return pw_seterr(err, PW_EFORMAT, "tensor %s is misaligned", name);
  *out = t->data;
  return 0;
}

static int load_hparams(model *m, char *err) {
  const gguf_file *f = m->f;
  model_hparams *hp = &m->hp;
  int rc;
  if (!gguf_get_cstr(f, "general.architecture", hp->arch_name, sizeof hp->arch_name))
    return pw_seterr(err, PW_EFORMAT, "metadata general.architecture is missing");
  for (size_t i = 0; i < sizeof k_archs / sizeof k_archs[0]; i++)
    if (!strcmp(hp->arch_name, k_archs[i].name)) m->ad = &k_archs[i];
  if (!m->ad) return pw_seterr(err, PW_EUNSUPPORTED, "unsupported architecture '%s' (supported: llama, qwen2, qwen3)",
                               hp->arch_name);
  hp->arch = m->ad->arch;
  hp->rope_neox = m->ad->rope_neox;
  const char *a = hp->arch_name;
  uint32_t v;
  if ((rc = get_u32_key(f, a, "embedding_length", true, &v, err))) return rc;
  hp->n_embd = (int32_t)v;
  if ((rc = get_u32_key(f, a, "block_count", true, &v, err))) return rc;
  hp->n_layer = (int32_t)v;
  if ((rc = get_u32_key(f, a, "attention.head_count", true, &v, err))) return rc;
  hp->n_head = (int32_t)v;
  hp->n_head_kv = hp->n_head;
  if ((rc = get_u32_key(f, a, "attention.head_count_kv", false, &v, err)) < 0) return rc;
  if (rc == 0) hp->n_head_kv = (int32_t)v;
  if ((rc = get_u32_key(f, a, "feed_forward_length", true, &v, err))) return rc;
  hp->n_ff = (int32_t)v;
  hp->n_ctx_train = 2048;
  if ((rc = get_u32_key(f, a, "context_length", false, &v, err)) < 0) return rc;
  if (rc == 0) hp->n_ctx_train = (int32_t)v;
  if (hp->n_embd <= 0 || hp->n_embd > 65536 || hp->n_layer <= 0 || hp->n_layer > 1024 || hp->n_head <= 0 ||
      hp->n_head > 1024 || hp->n_head_kv <= 0 || hp->n_head % hp->n_head_kv || hp->n_ff <= 0 ||
      hp->n_ff > 1 << 20 || hp->n_ctx_train <= 0)
    return pw_seterr(err, PW_EFORMAT,
                     "invalid hyperparameters: n_embd %d, n_layer %d, n_head %d, n_head_kv %d, n_ff %d, n_ctx %d",
                     hp->n_embd, hp->n_layer, hp->n_head, hp->n_head_kv, hp->n_ff, hp->n_ctx_train);
  hp->head_dim = hp->n_embd / hp->n_head;
  if ((rc = get_u32_key(f, a, "attention.key_length", false, &v, err)) < 0) return rc;
  if (rc == 0) hp->head_dim = (int32_t)v;
  uint32_t vlen;
  if (get_u32_key(f, a, "attention.value_length", false, &vlen, err) == 0 && (int32_t)vlen != hp->head_dim)
    return pw_seterr(err, PW_EUNSUPPORTED, "value_length %u differs from key_length %d", vlen, hp->head_dim);
  if (hp->head_dim <= 0 || hp->head_dim % 2 || hp->head_dim > 1024)
    return pw_seterr(err, PW_EFORMAT, "invalid head dimension %d", hp->head_dim);
  uint32_t rope_dims;
  if (get_u32_key(f, a, "rope.dimension_count", false, &rope_dims, err) == 0 && (int32_t)rope_dims != hp->head_dim)
    return pw_seterr(err, PW_EUNSUPPORTED, "partial RoPE (%u of %d dims) is not supported", rope_dims, hp->head_dim);
  char key[128];
  hp->rope_base = 10000.0f;
  snprintf(key, sizeof key, "%s.rope.freq_base", a);
  gguf_get_f32(f, key, &hp->rope_base);
  hp->rope_scale = 1.0f;
  char stype[32] = "";
  snprintf(key, sizeof key, "%s.rope.scaling.type", a);
  gguf_get_cstr(f, key, stype, sizeof stype);
  snprintf(key, sizeof key, "%s.rope.scaling.factor", a);
  float factor = 0;
  if (gguf_get_f32(f, key, &factor) && factor > 0 && strcmp(stype, "none")) {
    if (*stype && strcmp(stype, "linear"))
      return pw_seterr(err, PW_EUNSUPPORTED, "rope scaling type '%s' is not supported", stype);
    hp->rope_scale = 1.0f / factor;
  }
  hp->rms_eps = 1e-5f;
  snprintf(key, sizeof key, "%s.attention.layer_norm_rms_epsilon", a);
  gguf_get_f32(f, key, &hp->rms_eps);
  if (!(hp->rope_base > 0) || !(hp->rms_eps >= 0))
    return pw_seterr(err, PW_EFORMAT, "invalid rope base %g or rms epsilon %g", (double)hp->rope_base,
                     (double)hp->rms_eps);
  return 0;
}

static int bind_weights(model *m, char *err) {
  const gguf_file *f = m->f;
  model_hparams *hp = &m->hp;
  int rc;
  const gguf_tensor *te = gguf_find_tensor(f, "token_embd.weight");
  if (!te) return pw_seterr(err, PW_EFORMAT, "tensor token_embd.weight is missing");
  if (te->ne[1] < 1 || te->ne[1] > (1u << 24)) return pw_seterr(err, PW_EFORMAT, "token_embd.weight: bad vocabulary size");
  hp->n_vocab = (int32_t)te->ne[1];
  if ((rc = bind_weight(f, "token_embd.weight", hp->n_embd, hp->n_vocab, &m->tok_embd, true, err))) return rc;
  rc = bind_weight(f, "output.weight", hp->n_embd, hp->n_vocab, &m->output, false, err);
  if (rc < 0) return rc;
  if (rc == 1) m->output = m->tok_embd; /* tied output */
  if ((rc = bind_vec(f, "output_norm.weight", hp->n_embd, &m->output_norm, true, err))) return rc;
  rc = bind_vec(f, "rope_freqs.weight", hp->head_dim / 2, &m->rope_freqs, false, err);
  if (rc < 0) return rc;
  m->layers = calloc((size_t)hp->n_layer, sizeof *m->layers);
  if (!m->layers) return pw_seterr(err, PW_ENOMEM, "out of memory");
  int64_t e = hp->n_embd, qd = (int64_t)hp->n_head * hp->head_dim, kvd = (int64_t)hp->n_head_kv * hp->head_dim;
  for (int il = 0; il < hp->n_layer; il++) {
    layer_w *L = &m->layers[il];
    char n[96];
#define NAME(s) (snprintf(n, sizeof n, "blk.%d.%s", il, s), n)
    if ((rc = bind_vec(f, NAME("attn_norm.weight"), e, &L->attn_norm, true, err))) return rc;
    if ((rc = bind_weight(f, NAME("attn_q.weight"), e, qd, &L->wq, true, err))) return rc;
    if ((rc = bind_weight(f, NAME("attn_k.weight"), e, kvd, &L->wk, true, err))) return rc;
    if ((rc = bind_weight(f, NAME("attn_v.weight"), e, kvd, &L->wv, true, err))) return rc;
    if ((rc = bind_weight(f, NAME("attn_output.weight"), qd, e, &L->wo, true, err))) return rc;
    bool need_bias = m->ad->qkv_bias;
    if ((rc = bind_vec(f, NAME("attn_q.bias"), qd, &L->bq, need_bias, err)) < 0) return rc;
    if ((rc = bind_vec(f, NAME("attn_k.bias"), kvd, &L->bk, need_bias, err)) < 0) return rc;
    if ((rc = bind_vec(f, NAME("attn_v.bias"), kvd, &L->bv, need_bias, err)) < 0) return rc;
    bool need_norm = m->ad->qk_norm;
    if ((rc = bind_vec(f, NAME("attn_q_norm.weight"), hp->head_dim, &L->q_norm, need_norm, err)) < 0) return rc;
    if ((rc = bind_vec(f, NAME("attn_k_norm.weight"), hp->head_dim, &L->k_norm, need_norm, err)) < 0) return rc;
    if ((rc = bind_vec(f, NAME("ffn_norm.weight"), e, &L->ffn_norm, true, err))) return rc;
    if ((rc = bind_weight(f, NAME("ffn_gate.weight"), e, hp->n_ff, &L->w_gate, true, err))) return rc;
    if ((rc = bind_weight(f, NAME("ffn_up.weight"), e, hp->n_ff, &L->w_up, true, err))) return rc;
    if ((rc = bind_weight(f, NAME("ffn_down.weight"), hp->n_ff, e, &L->w_down, true, err))) return rc;
#undef NAME
  }
  return 0;
}

int model_load(const char *path, const model_opts *opts, model **out, char *err) {
  *out = NULL;
  pw_tensor_init();
  model *m = calloc(1, sizeof *m);
  if (!m) return pw_seterr(err, PW_ENOMEM, "out of memory");
  int rc = gguf_open(path, &m->f, err);
  if (rc) goto fail;
  if ((rc = load_hparams(m, err)) || (rc = bind_weights(m, err))) goto fail;
  gguf_make_resident(m->f, &m->res);
  if (m->res.huge_bytes >= 0)
    pw_log(PW_LOG_INFO, "model %s: %.1f MiB mapped, %.1f MiB of them in 2 MiB pages%s", path, m->res.bytes / 1048576.0,
           m->res.huge_bytes / 1048576.0, m->res.refreshed ? " (page cache re-read to get them)" : "");
  int nt = opts && opts->n_threads > 0 ? opts->n_threads : 2;
  /* a file this small stays in the caches between tokens (the L2s and a
   * share of L3 of a small CPU): decode is compute-bound, not streaming */
  if (gguf_size(m->f) <= MODEL_RESIDENT_BYTES) m->mm_hints = PW_MM_RESIDENT;
  if (opts && opts->pool) {
    m->pool = opts->pool;
    m->pool_borrowed = true;
  } else {
    m->pool = pw_pool_create(nt);
  }
  if (!m->pool) {
    rc = pw_seterr(err, PW_ENOMEM, "cannot start %d threads", nt);
    goto fail;
  }
  *out = m;
  return 0;
fail:
  model_destroy(m);
  return rc;
}

void model_destroy(model *m) {
  if (!m) return;
  if (!m->pool_borrowed) pw_pool_destroy(m->pool);
  free(m->layers);
  gguf_close(m->f);
  free(m);
}

const model_hparams *model_hp(const model *m) { return &m->hp; }
const gguf_file *model_gguf(const model *m) { return m->f; }
const gguf_residency *model_residency(const model *m) { return &m->res; }
pw_pool *model_pool(const model *m) { return m->pool; }

/* Buffers the kernels stream through start on a cache line: they are read
 * with 64-byte loads, and a line split on every load (what malloc's 16-byte
 * alignment gives) measured 10-20% slower in the matmul tiles. Freed with
 * free(). */
static void *alloc_lines(size_t bytes) {
  if (bytes > SIZE_MAX - 64) return NULL;
  /* Big buffers (the KV cache, a large batch's scratch) are read whole
   * every step: in 2 MiB pages, for the same reason as the weights
   * (gguf_make_resident). */
  if (bytes >= (2u << 20)) return pw_alloc_huge(bytes);
  return aligned_alloc(64, (bytes + 63) / 64 * 64);
}

/* ---- KV cache --------------------------------------------------------- */

int model_kv_create(const model *m, int n_seq, int n_ctx, model_kv **out, char *err) {
  *out = NULL;
  if (n_seq < 1 || n_seq > 4096 || n_ctx < 1 || n_ctx > (1 << 22))
    return pw_seterr(err, PW_EINVAL, "invalid KV cache size: %d sequences x %d positions", n_seq, n_ctx);
  model_kv *kv = calloc(1, sizeof *kv);
  if (!kv) return pw_seterr(err, PW_ENOMEM, "out of memory");
  kv->n_layer = m->hp.n_layer;
  kv->n_seq = n_seq;
  kv->n_ctx = n_ctx;
  kv->n_head_kv = m->hp.n_head_kv;
  kv->head_dim = m->hp.head_dim;
  size_t n = (size_t)kv->n_layer * n_seq * n_ctx * kv->n_head_kv * kv->head_dim;
  kv->k = alloc_lines(n * sizeof(uint16_t));
  kv->v = alloc_lines(n * sizeof(uint16_t));
  kv->len = calloc((size_t)n_seq, sizeof(int));
  if (!kv->k || !kv->v || !kv->len) {
    model_kv_destroy(kv);
    return pw_seterr(err, PW_ENOMEM, "out of memory for a KV cache of %zu MiB", 2 * n * 2 >> 20);
  }
  *out = kv;
  return 0;
}

void model_kv_destroy(model_kv *kv) {
  if (!kv) return;
  free(kv->k);
  free(kv->v);
  free(kv->len);
  free(kv);
}

int model_kv_n_seq(const model_kv *kv) { return kv->n_seq; }
int model_kv_n_ctx(const model_kv *kv) { return kv->n_ctx; }
int model_kv_len(const model_kv *kv, int seq) { return kv->len[seq]; }
size_t model_kv_bytes(const model_kv *kv) {
  return 2 * (size_t)kv->n_layer * kv->n_seq * kv->n_ctx * kv->n_head_kv * kv->head_dim * sizeof(uint16_t);
}

void model_kv_truncate(model_kv *kv, int seq, int len) {
  PW_ASSERT(seq >= 0 && seq < kv->n_seq && len >= 0 && len <= kv->len[seq]);
  kv->len[seq] = len;
}

/* element offset of (layer, seq, KV head, position) */
static size_t kv_off(const model_kv *kv, int layer, int seq, int head, int pos) {
  return ((((size_t)layer * kv->n_seq + seq) * kv->n_head_kv + head) * kv->n_ctx + pos) * kv->head_dim;
}

void model_kv_copy(model_kv *kv, int dst, int src, int len) {
  PW_ASSERT(len >= 0 && len <= kv->len[src]);
  if (dst != src)
    for (int l = 0; l < kv->n_layer; l++)
      for (int h = 0; h < kv->n_head_kv; h++) {
        const size_t bytes = (size_t)len * kv->head_dim * sizeof(uint16_t);
        memcpy(kv->k + kv_off(kv, l, dst, h, 0), kv->k + kv_off(kv, l, src, h, 0), bytes);
        memcpy(kv->v + kv_off(kv, l, dst, h, 0), kv->v + kv_off(kv, l, src, h, 0), bytes);
      }
  kv->len[dst] = len;
}

/* ---- forward ---------------------------------------------------------- */

/* a layer's q, k and v, and its gate and up, as matmul ops */
static void qkv_ops(const layer_w *L, model_ctx *c, pw_mm_op o[3]) {
  o[0] = (pw_mm_op){L->wq.type, L->wq.data, L->wq.n_out, c ? c->q : NULL};
  o[1] = (pw_mm_op){L->wk.type, L->wk.data, L->wk.n_out, c ? c->k : NULL};
  o[2] = (pw_mm_op){L->wv.type, L->wv.data, L->wv.n_out, c ? c->v : NULL};
}
static void gu_ops(const layer_w *L, model_ctx *c, pw_mm_op o[2]) {
  o[0] = (pw_mm_op){L->w_gate.type, L->w_gate.data, L->w_gate.n_out, c ? c->gate : NULL};
  o[1] = (pw_mm_op){L->w_up.type, L->w_up.data, L->w_up.n_out, c ? c->up : NULL};
}

int model_ctx_create(const model *m, int max_batch, int max_ctx, model_ctx **out, char *err) {
  *out = NULL;
  if (max_batch < 1 || max_batch > 65536 || max_ctx < 1)
    return pw_seterr(err, PW_EINVAL, "invalid batch size %d", max_batch);
  model_ctx *c = calloc(1, sizeof *c);
  if (!c) return pw_seterr(err, PW_ENOMEM, "out of memory");
  const model_hparams *hp = &m->hp;
  c->m = m;
  c->max_batch = max_batch;
  c->max_ctx = max_ctx;
  size_t B = (size_t)max_batch, qd = (size_t)hp->n_head * hp->head_dim, kvd = (size_t)hp->n_head_kv * hp->head_dim;
  c->x = alloc_lines(B * hp->n_embd * sizeof(float));
  c->xn = alloc_lines(B * (qd > (size_t)hp->n_embd ? qd : (size_t)hp->n_embd) * sizeof(float));
  c->q = alloc_lines(B * qd * sizeof(float));
  c->k = alloc_lines(B * kvd * sizeof(float));
  c->v = alloc_lines(B * kvd * sizeof(float));
  c->att = alloc_lines(B * qd * sizeof(float));
  c->gate = alloc_lines(B * hp->n_ff * sizeof(float));
  c->up = alloc_lines(B * hp->n_ff * sizeof(float));
  c->rows = alloc_lines(B * hp->n_embd * sizeof(float));
  c->rope_cos = malloc(B * hp->head_dim / 2 * sizeof(float));
  c->rope_sin = malloc(B * hp->head_dim / 2 * sizeof(float));
  c->att_groups = malloc((B + 1) * sizeof(int));
  /* Scratch for the largest activation quantization of any matmul. */
  size_t mm = 0;
  for (int l = 0; l < hp->n_layer; l++) {
    const layer_w *L = &m->layers[l];
    pw_mm_op qkv[3], gu[2];
    qkv_ops(L, NULL, qkv);
    gu_ops(L, NULL, gu);
    size_t sz[4] = {pw_matmul_multi_scratch_size(qkv, 3, hp->n_embd, max_batch),
                    pw_matmul_multi_scratch_size(gu, 2, hp->n_embd, max_batch),
                    pw_matmul_scratch_size(L->wo.type, L->wo.n_in, max_batch),
                    pw_matmul_scratch_size(L->w_down.type, L->w_down.n_in, max_batch)};
    for (int i = 0; i < 4; i++)
      if (sz[i] > mm) mm = sz[i];
  }
  size_t so = pw_matmul_scratch_size(m->output.type, m->output.n_in, max_batch);
  if (so > mm) mm = so;
  c->mm_scratch = alloc_lines(mm ? mm : 1);
  if (!c->x || !c->xn || !c->q || !c->k || !c->v || !c->att || !c->gate || !c->up || !c->rows ||
      !c->rope_cos || !c->rope_sin || !c->att_groups || !c->mm_scratch) {
    model_ctx_destroy(c);
    return pw_seterr(err, PW_ENOMEM, "out of memory for batch scratch");
  }
  *out = c;
  return 0;
}

void model_ctx_destroy(model_ctx *c) {
  if (!c) return;
  free(c->x);
  free(c->xn);
  free(c->q);
  free(c->k);
  free(c->v);
  free(c->att);
  free(c->gate);
  free(c->up);
  free(c->rows);
  free(c->rope_cos);
  free(c->rope_sin);
  free(c->att_groups);
  free(c->mm_scratch);
  free(c);
}

/* y = x / sqrt(mean(x^2) + eps) * w, the sum of squares in double as ggml
 * (tensor/ops.h). */
static void rmsnorm(float *y, const float *x, const float *w, int n, float eps) { pw_rmsnorm(y, x, w, n, eps); }

/* Each worker prefetches its first share of the weights of ops (the next
 * matmul) after the coming pool run, while this thread does the serial
 * steps in between (pw_pool_prefetch); a no-op when the pass will not hand
 * out shares (prefill). */
static void prefetch_next(const model *m, const pw_mm_op *ops, int n_ops, int64_t n_in, int n) {
  const int nth = pw_pool_size(m->pool);
  for (int ith = 1; ith < nth; ith++) {
    pw_span sp[PW_POOL_SPANS];
    const int k = pw_matmul_first_spans(ops, n_ops, n_in, n, m->mm_hints, ith, nth, sp, PW_POOL_SPANS);
    pw_pool_prefetch(m->pool, ith, sp, k);
  }
}

static void prefetch_next1(const model *m, const model_weight *w, int n) {
  const pw_mm_op op = {w->type, w->data, w->n_out, NULL};
  prefetch_next(m, &op, 1, w->n_in, n);
}

static void matmul(model_ctx *c, const model_weight *w, const float *x, int n, float *y) {
  pw_matmul_ex(c->m->pool, w->type, w->data, w->n_in, w->n_out, x, n, y, c->mm_scratch, c->m->mm_hints);
}

static void add_bias(float *y, const float *b, int n_tok, int dim) {
  if (!b) return;
  for (int t = 0; t < n_tok; t++) pw_add(y + (size_t)t * dim, y + (size_t)t * dim, b, dim);
}

/* The small per-layer vectors (norm weights, biases) sit in the mapped file
 * between megabytes of weights, and a decode step streams nearly all the
 * weights through the caches, so they are cold by the time they are used;
 * each is prefetched one matmul ahead of its use. */
static void prefetch_vec(const float *v, int n) {
  if (!v) return;
  const uintptr_t end = (uintptr_t)(v + n);
  for (uintptr_t a = (uintptr_t)v & ~(uintptr_t)63; a < end; a += 64) __builtin_prefetch((const void *)a);
}

/* cos/sin of each rotation angle for every entry, as ggml's rope cache:
 * theta starts at pos and is multiplied by base^(-2/d) per pair. */
static void rope_tables(model_ctx *c, const model_entry *e, int n) {
  const model_hparams *hp = &c->m->hp;
  int half = hp->head_dim / 2;
  float theta_scale = powf(hp->rope_base, -2.0f / (float)hp->head_dim);
  for (int t = 0; t < n; t++) {
    float theta = (float)e[t].pos;
    for (int i = 0; i < half; i++) {
      float ff = c->m->rope_freqs ? c->m->rope_freqs[i] : 1.0f;
      float th = hp->rope_scale * (theta / ff);
      c->rope_cos[(size_t)t * half + i] = cosf(th);
      c->rope_sin[(size_t)t * half + i] = sinf(th);
      theta *= theta_scale;
    }
  }
}

static void rope_apply(const model_ctx *c, float *v, int n_tok, int n_heads) {
  const model_hparams *hp = &c->m->hp;
  int hd = hp->head_dim, half = hd / 2;
  for (int t = 0; t < n_tok; t++) {
    const float *cs = c->rope_cos + (size_t)t * half, *sn = c->rope_sin + (size_t)t * half;
    for (int h = 0; h < n_heads; h++) {
      float *x = v + ((size_t)t * n_heads + h) * hd;
      for (int i = 0; i < half; i++) {
        int i0 = hp->rope_neox ? i : 2 * i, i1 = hp->rope_neox ? i + half : 2 * i + 1;
        float a = x[i0], b = x[i1];
        x[i0] = a * cs[i] - b * sn[i];
        x[i1] = a * sn[i] + b * cs[i];
      }
    }
  }
}

typedef struct attn_job {
  model_ctx *c;
  model_kv *kv;
  const model_entry *e;
  int layer;
  int n_groups; /* runs of consecutive entries of one sequence: c->att_groups */
  int heads;    /* query heads per work item: the GQA group, or 1 */
  pw_attn_multi_fn attn;
  _Atomic long next; /* next work item */
} attn_job;

/* SwiGLU of a pass of several tokens, split over the pool in ranges that
 * start on multiples of 16 elements: each element goes through the same
 * vector (or, at the very end, scalar) code as in one call, so the values
 * are the same bits. One token's 4864 elements take about 3 us and stay
 * on the caller; 8 tokens' took 23 us a layer (0.5B shape). */
#define SWIGLU_POOL_MIN 16384
typedef struct {
  float *g;
  const float *u;
  int64_t n;
} swiglu_job;

static void swiglu_worker(void *ctx, int ith, int nth) {
  const swiglu_job *j = ctx;
  long lo, hi;
  pw_split((long)((j->n + 15) / 16), ith, nth, &lo, &hi);
  const int64_t a = (int64_t)lo * 16, b = (int64_t)hi * 16 < j->n ? (int64_t)hi * 16 : j->n;
  if (b > a) pw_swiglu(j->g + a, j->g + a, j->u + a, b - a);
}

static void swiglu(const model *m, float *g, const float *u, int64_t n) {
  if (n < SWIGLU_POOL_MIN || pw_pool_size(m->pool) < 2) {
    pw_swiglu(g, g, u, n);
    return;
  }
  swiglu_job j = {g, u, n};
  pw_pool_run(m->pool, swiglu_worker, &j);
}

/* A work item is one group of entries (consecutive, same sequence) and one
 * KV head with its query heads, or one query head when there would be
 * fewer items than threads: all its queries go through the kernel
 * together, so each K/V row is converted once for all of them, each query
 * over the cache up to and including its entry's own position. */
static void attn_worker(void *ctx, int ith, int nth) {
  attn_job *j = ctx;
  model_ctx *c = j->c;
  const model_hparams *hp = &c->m->hp;
  model_kv *kv = j->kv;
  const int hd = hp->head_dim, gqa = hp->n_head / hp->n_head_kv;
  const int per_group = hp->n_head / j->heads;
  const float scale = 1.0f / sqrtf((float)hd);
  (void)ith;
  (void)nth;
  const long items = (long)j->n_groups * per_group;
  /* one item at a time from a shared counter: later tokens of a prompt see
   * more keys, so fixed ranges would leave one thread with most of it */
  for (long w; (w = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed)) < items;) {
    const int g = (int)(w / per_group), h0 = (int)(w % per_group) * j->heads, hk = h0 / gqa;
    const int t0 = c->att_groups[g], t1 = c->att_groups[g + 1];
    const model_entry *en = &j->e[t0];
    const uint16_t *k0 = kv->k + kv_off(kv, j->layer, en->seq, hk, 0);
    const uint16_t *v0 = kv->v + kv_off(kv, j->layer, en->seq, hk, 0);
    const float *qp[PW_ATTN_GROUP_MAX];
    float *op[PW_ATTN_GROUP_MAX];
    int np[PW_ATTN_GROUP_MAX], nq = 0;
    for (int t = t0; t < t1; t++)
      for (int h = h0; h < h0 + j->heads; h++) {
        qp[nq] = c->q + ((size_t)t * hp->n_head + h) * hd;
        op[nq] = c->att + ((size_t)t * hp->n_head + h) * hd;
        np[nq] = j->e[t].pos + 1;
        if (++nq == PW_ATTN_GROUP_MAX || (t == t1 - 1 && h == h0 + j->heads - 1)) {
          j->attn(qp, np, nq, k0, v0, (size_t)hd, hd, scale, op);
          nq = 0;
        }
      }
  }
}

/* Splits the batch into attention groups (c->att_groups, returns their
 * count): runs of consecutive entries of one sequence, at most
 * PW_ATTN_GROUP_MAX / gqa entries each (so one kernel call holds a group's
 * queries for one KV head), and short enough that there are work items for
 * every thread. */
static int attn_groups(model_ctx *c, const model_entry *e, int n, int threads) {
  const model_hparams *hp = &c->m->hp;
  const int gqa = hp->n_head / hp->n_head_kv;
  int cap = PW_ATTN_GROUP_MAX / gqa;
  if (cap < 1) cap = 1;
  /* about two items per thread at least */
  const int want = (2 * threads + hp->n_head_kv - 1) / hp->n_head_kv;
  if (want > 1 && (n + want - 1) / want < cap) cap = (n + want - 1) / want;
  if (cap < 1) cap = 1;
  int g = 0;
  for (int t = 0; t < n;) {
    int u = t + 1;
    while (u < n && u - t < cap && e[u].seq == e[t].seq) u++;
    c->att_groups[g++] = t;
    t = u;
  }
  c->att_groups[g] = n;
  return g;
}

int model_forward(model_ctx *c, model_kv *kv, const model_entry *e, int n, float *logits, float *hidden,
                  char *err) {
  const model *m = c->m;
  const model_hparams *hp = &m->hp;
  if (n < 1 || n > c->max_batch) return pw_seterr(err, PW_EINVAL, "batch of %d entries (limit %d)", n, c->max_batch);
  /* Validate every entry before touching the cache: positions must extend
   * each sequence contiguously. */
  for (int t = 0; t < n; t++) {
    if (e[t].seq < 0 || e[t].seq >= kv->n_seq)
      return pw_seterr(err, PW_EINVAL, "entry %d: sequence %d out of range", t, e[t].seq);
    if (e[t].token < 0 || e[t].token >= hp->n_vocab)
      return pw_seterr(err, PW_EINVAL, "entry %d: token %d out of range (vocabulary %d)", t, e[t].token, hp->n_vocab);
    int expect = kv->len[e[t].seq];
    for (int u = 0; u < t; u++)
      if (e[u].seq == e[t].seq) expect++;
    if (e[t].pos != expect)
      return pw_seterr(err, PW_EINVAL, "entry %d: position %d does not continue sequence %d (expected %d)", t,
                       e[t].pos, e[t].seq, expect);
    if (e[t].pos >= kv->n_ctx || e[t].pos >= c->max_ctx)
      return pw_seterr(err, PW_ECONTEXT, "sequence %d: position %d exceeds the context of %d", e[t].seq, e[t].pos,
                       kv->n_ctx);
  }
  int E = hp->n_embd, hd = hp->head_dim;
  int qd = hp->n_head * hd, kvd = hp->n_head_kv * hd;
  for (int t = 0; t < n; t++) pw_get_row(m->tok_embd.type, m->tok_embd.data, E, e[t].token, c->x + (size_t)t * E);
  rope_tables(c, e, n);
  const int n_groups = attn_groups(c, e, n, pw_pool_size(m->pool));
  for (int il = 0; il < hp->n_layer; il++) {
    const layer_w *L = &m->layers[il];
    for (int t = 0; t < n; t++) rmsnorm(c->xn + (size_t)t * E, c->x + (size_t)t * E, L->attn_norm, E, hp->rms_eps);
    pw_mm_op qkv[3], gu[2];
    qkv_ops(L, c, qkv);
    gu_ops(L, c, gu);
    prefetch_vec(L->bq, qd);
    prefetch_vec(L->bk, kvd);
    prefetch_vec(L->bv, kvd);
    prefetch_vec(L->q_norm, hd);
    prefetch_vec(L->k_norm, hd);
    prefetch_next1(m, &L->wo, n);
    pw_matmul_multi_ex(m->pool, qkv, 3, E, c->xn, n, c->mm_scratch, m->mm_hints);
    add_bias(c->q, L->bq, n, qd);
    add_bias(c->k, L->bk, n, kvd);
    add_bias(c->v, L->bv, n, kvd);
    if (L->q_norm) {
      for (int r = 0; r < n * hp->n_head; r++) rmsnorm(c->q + (size_t)r * hd, c->q + (size_t)r * hd, L->q_norm, hd, hp->rms_eps);
      for (int r = 0; r < n * hp->n_head_kv; r++) rmsnorm(c->k + (size_t)r * hd, c->k + (size_t)r * hd, L->k_norm, hd, hp->rms_eps);
    }
    rope_apply(c, c->q, n, hp->n_head);
    rope_apply(c, c->k, n, hp->n_head_kv);
    const pw_from_float_fn to_f16 = pw_traits_get(PW_DT_F16)->from_float;
    for (int t = 0; t < n; t++)
      for (int h = 0; h < hp->n_head_kv; h++) {
        to_f16(c->k + (size_t)t * kvd + (size_t)h * hd, kv->k + kv_off(kv, il, e[t].seq, h, e[t].pos), hd);
        to_f16(c->v + (size_t)t * kvd + (size_t)h * hd, kv->v + kv_off(kv, il, e[t].seq, h, e[t].pos), hd);
      }
    attn_job job = {c, kv, e, il, n_groups, n_groups * hp->n_head_kv >= pw_pool_size(m->pool) ? hp->n_head / hp->n_head_kv : 1,
                    pw_attn_multi_get(), 0};
    prefetch_next1(m, &L->wo, n);
    pw_pool_run(m->pool, attn_worker, &job);
    prefetch_vec(L->ffn_norm, E);
    prefetch_next(m, gu, 2, E, n);
    matmul(c, &L->wo, c->att, n, c->xn);
    pw_add(c->x, c->x, c->xn, (int64_t)n * E);
    for (int t = 0; t < n; t++) rmsnorm(c->xn + (size_t)t * E, c->x + (size_t)t * E, L->ffn_norm, E, hp->rms_eps);
    prefetch_next1(m, &L->w_down, n);
    pw_matmul_multi_ex(m->pool, gu, 2, E, c->xn, n, c->mm_scratch, m->mm_hints);
    swiglu(m, c->gate, c->up, (int64_t)n * hp->n_ff);
    /* the norm after this layer: partly still in cache after the down
     * matmul (1.7 -> 1.2 us a layer for the norm step, 0.5B shape) */
    prefetch_vec(il + 1 < hp->n_layer ? m->layers[il + 1].attn_norm : m->output_norm, E);
    if (il + 1 < hp->n_layer) {
      pw_mm_op next[3];
      qkv_ops(&m->layers[il + 1], NULL, next);
      prefetch_next(m, next, 3, E, n);
    } else {
      prefetch_next1(m, &m->output, n);
    }
    matmul(c, &L->w_down, c->gate, n, c->xn);
    pw_add(c->x, c->x, c->xn, (int64_t)n * E);
  }
  for (int t = 0; t < n; t++) kv->len[e[t].seq] = e[t].pos + 1 > kv->len[e[t].seq] ? e[t].pos + 1 : kv->len[e[t].seq];
  int nw = 0;
  for (int t = 0; t < n; t++)
    if (e[t].want_logits) {
      rmsnorm(c->rows + (size_t)nw * E, c->x + (size_t)t * E, m->output_norm, E, hp->rms_eps);
      nw++;
    }
  if (nw == 0) return 0;
  if (hidden) memcpy(hidden, c->rows, (size_t)nw * E * sizeof(float));
  if (logits) {
    /* the next step starts with layer 0's q, k and v */
    pw_mm_op next[3];
    qkv_ops(&m->layers[0], NULL, next);
    prefetch_next(m, next, 3, E, nw);
    matmul(c, &m->output, c->rows, nw, logits);
  }
  return 0;
}
