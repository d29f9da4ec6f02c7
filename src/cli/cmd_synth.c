/* cmd_synth.c - `power synth`: writes a GGUF file with the architecture,
 * dimensions and tensor layout of a named real model, the tokenizer of a
 * given vocabulary file, and seeded dummy weights, quantized with
 * llama.cpp's mix. It lets Power and peers be benchmarked on models of real
 * shapes without downloading them. The text such a model writes is
 * meaningless; its speed and memory traffic are those of the real model.
 *
 *   power synth --arch qwen2.5-0.5b --vocab ggml-vocab-qwen2.gguf --out M.gguf
 *               [--type Q4_K_M] [--seed S] [--layers N] [--embd N] [--threads N]
 *
 * Weights are generated row by row from (seed, tensor name, row), so the
 * file is the same whatever the thread count. 2-D weights are approximately
 * normal (sum of four uniforms) with std 0.02 (0.05 for the embedding, so
 * logits spread like a real model's); norm weights are 1 + N(0, 0.02);
 * biases N(0, 0.02) (gpt-oss's attention sinks N(0, 3), so they weigh
 * against the keys); rope_freqs as llama.cpp's converter computes them.
 *
 * Architectures: llama, qwen2, qwen3, gemma3, gemma2, phi3, qwen35,
 * qwen3moe, qwen2moe, smollm3, granite, mistral3 and the encoders bert,
 * nomic-bert and jina-bert-v2, with the metadata keys their llama.cpp converters write.
 *
 * Not here: the mix rules and the converter (cmd_quantize.c). */
#include "cli/cmd_synth.h"

#include "base/clock.h"
#include "base/error.h"
#include "base/rng.h"
#include "cli/cli.h"
#include "gguf/gguf.h"
#include "tensor/dtype.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Published configurations (Hugging Face config.json of each model). */
typedef struct synth_model {
  const char *id;     /* --arch value */
  const char *arch;   /* GGUF general.architecture */
  const char *title;  /* general.name */
  int n_embd, n_layer, n_head, n_head_kv, head_dim, n_ff, n_ctx;
  float rope_base, rms_eps;
  bool qkv_bias, qk_norm, tied;
  /* llama3 rope scaling (factor 0 = none) */
  float rs_factor, rs_low, rs_high;
  int rs_orig_ctx;
  /* gemma3: sandwich norms and a sliding window (0 = none) */
  bool post_norms;
  int n_swa;
  /* phi3: fused attn_qkv and gate/up, LongRoPE over this original context (0 = none) */
  bool fused;
  int longrope_ctx;
  /* qwen35: gated DeltaNet layers (ssm_d_conv 0 = none) between full
   * attention every full_attn-th layer; rotated dims; M-RoPE sections */
  int ssm_d_conv, ssm_d_state, ssm_n_group, ssm_dt_rank, full_attn, n_rot;
  int rope_sections[4];
} synth_model;

static const synth_model k_models[] = {
    {"qwen2.5-0.5b", "qwen2", "Qwen2.5 0.5B", 896, 24, 14, 2, 64, 4864, 32768, 1e6f, 1e-6f, true, false, true, 0, 0,
     0, 0, false, 0, false, 0, 0, 0, 0, 0, 0, 0, {0, 0, 0, 0}},
    {"qwen2.5-1.5b", "qwen2", "Qwen2.5 1.5B", 1536, 28, 12, 2, 128, 8960, 32768, 1e6f, 1e-6f, true, false, true, 0,
     0, 0, 0, false, 0, false, 0, 0, 0, 0, 0, 0, 0, {0, 0, 0, 0}},
    {"qwen3-0.6b", "qwen3", "Qwen3 0.6B", 1024, 28, 16, 8, 128, 3072, 40960, 1e6f, 1e-6f, false, true, true, 0, 0,
     0, 0, false, 0, false, 0, 0, 0, 0, 0, 0, 0, {0, 0, 0, 0}},
    {"llama-3.2-1b", "llama", "Llama 3.2 1B", 2048, 16, 32, 8, 64, 8192, 131072, 5e5f, 1e-5f, false, false, true,
     32.0f, 1.0f, 4.0f, 8192, false, 0, false, 0, 0, 0, 0, 0, 0, 0, {0, 0, 0, 0}},
    {"llama-3.1-8b", "llama", "Llama 3.1 8B", 4096, 32, 32, 8, 128, 14336, 131072, 5e5f, 1e-5f, false, false, false,
     8.0f, 1.0f, 4.0f, 8192, false, 0, false, 0, 0, 0, 0, 0, 0, 0, {0, 0, 0, 0}},
    {"gemma-3-1b", "gemma3", "Gemma 3 1B", 1152, 26, 4, 1, 256, 6912, 32768, 1e6f, 1e-6f, false, true, true, 0, 0, 0,
     0, true, 512, false, 0, 0, 0, 0, 0, 0, 0, {0, 0, 0, 0}},
    {"phi-3.5-mini", "phi3", "Phi 3.5 mini", 3072, 32, 32, 32, 96, 8192, 131072, 1e4f, 1e-5f, false, false, false, 0, 0,
     0, 0, false, 0, true, 4096, 0, 0, 0, 0, 0, 0, {0, 0, 0, 0}},
    {"qwen3.5-0.8b", "qwen35", "Qwen3.5 0.8B", 1024, 24, 8, 2, 256, 3584, 262144, 1e7f, 1e-6f, false, true, true, 0,
     0, 0, 0, false, 0, false, 0, 4, 128, 16, 16, 4, 64, {11, 11, 10, 0}},
    {"qwen3.5-2b", "qwen35", "Qwen3.5 2B", 2048, 24, 8, 2, 256, 6144, 262144, 1e7f, 1e-6f, false, true, true, 0, 0,
     0, 0, false, 0, false, 0, 4, 128, 16, 16, 4, 64, {11, 11, 10, 0}},
    /* encoders (k_enc below); rms_eps holds their LayerNorm epsilon */
    {"bge-small-en-v1.5", "bert", "BGE small en v1.5", 384, 12, 12, 12, 32, 1536, 512, 1e4f, 1e-12f, true, false, true,
     0, 0, 0, 0, false, 0, false, 0, 0, 0, 0, 0, 0, 0, {0, 0, 0, 0}},
    {"nomic-embed-text-v1.5", "nomic-bert", "Nomic Embed Text v1.5", 768, 12, 12, 12, 64, 3072, 2048, 1000.0f, 1e-12f,
     false, false, true, 0, 0, 0, 0, false, 0, true, 0, 0, 0, 0, 0, 0, 0, {0, 0, 0, 0}},
    {"ms-marco-minilm-l6-v2", "bert", "MS MARCO MiniLM L6 v2 cross-encoder", 384, 6, 12, 12, 32, 1536, 512, 1e4f,
     1e-12f, true, false, true, 0, 0, 0, 0, false, 0, false, 0, 0, 0, 0, 0, 0, 0, {0, 0, 0, 0}},
    /* jina-bert-v2: ALiBi instead of positions, GEGLU in a double-width
     * ffn_up (k_enc below) */
    {.id = "jina-embeddings-v2-small-en", .arch = "jina-bert-v2", .title = "Jina Embeddings v2 small en",
     .n_embd = 512, .n_layer = 4, .n_head = 8, .n_head_kv = 8, .head_dim = 64, .n_ff = 2048, .n_ctx = 8192,
     .rms_eps = 1e-12f, .qkv_bias = true, .tied = true},
    {.id = "jina-reranker-v1-tiny-en", .arch = "jina-bert-v2", .title = "Jina Reranker v1 tiny en", .n_embd = 384,
     .n_layer = 4, .n_head = 12, .n_head_kv = 12, .head_dim = 32, .n_ff = 1536, .n_ctx = 8192, .rms_eps = 1e-12f,
     .qkv_bias = true, .tied = true},
    {"qwen3-30b-a3b", "qwen3moe", "Qwen3 30B A3B", 2048, 48, 32, 4, 128, 6144, 40960, 1e6f, 1e-6f, false, true, false,
     0, 0, 0, 0, false, 0, false, 0, 0, 0, 0, 0, 0, 0, {0, 0, 0, 0}},
    {"qwen1.5-moe-a2.7b", "qwen2moe", "Qwen1.5 MoE A2.7B", 2048, 24, 16, 16, 128, 5632, 8192, 1e6f, 1e-6f, true, false,
     false, 0, 0, 0, 0, false, 0, false, 0, 0, 0, 0, 0, 0, 0, {0, 0, 0, 0}},
    /* n_ff 0: the config has no dense width, the converter writes no
     * feed_forward_length (the experts' widths describe the MLP) */
    {"qwen3.5-35b-a3b", "qwen35moe", "Qwen3.5 35B A3B", 2048, 40, 16, 2, 256, 0, 262144, 1e7f, 1e-6f, false, true,
     false, 0, 0, 0, 0, false, 0, false, 0, 4, 128, 16, 32, 4, 64, {11, 11, 10, 0}},
    /* gpt-oss: biased Q/K/V/O, per-head sinks, a window of 128 on every
     * other layer, YaRN (k_extra), biased experts (k_moe) */
    {"gpt-oss-20b", "gpt-oss", "gpt-oss 20B", 2880, 24, 64, 8, 64, 2880, 131072, 150000.0f, 1e-5f, true, false, false,
     0, 0, 0, 0, false, 128, false, 0, 0, 0, 0, 0, 0, 0, {0, 0, 0, 0}},
    {.id = "gemma-2-2b", .arch = "gemma2", .title = "Gemma 2 2B", .n_embd = 2304, .n_layer = 26, .n_head = 8,
     .n_head_kv = 4, .head_dim = 256, .n_ff = 9216, .n_ctx = 8192, .rope_base = 1e4f, .rms_eps = 1e-6f, .tied = true,
     .post_norms = true, .n_swa = 4096},
    {.id = "smollm3-3b", .arch = "smollm3", .title = "SmolLM3 3B", .n_embd = 2048, .n_layer = 36, .n_head = 16,
     .n_head_kv = 4, .head_dim = 128, .n_ff = 11008, .n_ctx = 65536, .rope_base = 5e6f, .rms_eps = 1e-6f, .tied = true},
    {.id = "granite-3.3-2b", .arch = "granite", .title = "Granite 3.3 2B", .n_embd = 2048, .n_layer = 40, .n_head = 32,
     .n_head_kv = 8, .head_dim = 64, .n_ff = 8192, .n_ctx = 131072, .rope_base = 1e7f, .rms_eps = 1e-5f, .tied = true},
    {.id = "ministral-3-3b", .arch = "mistral3", .title = "Ministral 3 3B", .n_embd = 3072, .n_layer = 26, .n_head = 32,
     .n_head_kv = 8, .head_dim = 128, .n_ff = 9216, .n_ctx = 262144, .rope_base = 1e6f, .rms_eps = 1e-5f, .tied = true},
    {.id = "mistral-small-3.1-24b", .arch = "mistral3", .title = "Mistral Small 3.1 24B", .n_embd = 5120,
     .n_layer = 40, .n_head = 32, .n_head_kv = 8, .head_dim = 128, .n_ff = 32768, .n_ctx = 131072, .rope_base = 1e9f,
     .rms_eps = 1e-5f},
};

/* The extras of the models that have them: gemma2's soft-capping of
 * attention scores and final logits; granite's embedding, attention and
 * residual multipliers and its logit divisor; the published YaRN (factor
 * over an original context, yarn_log_multiplier = mscale_all_dim, the
 * ramp's betas) and mistral3's attention temperature (llama_4_scaling_beta),
 * as their converters write them. 0 = none. */
typedef struct synth_extra {
  const char *id;
  float attn_softcap, final_softcap;
  float emb_mult, attn_mult, resid_mult, logit_scale;
  float yarn_factor;
  int yarn_orig;
  float yarn_log_mul, yarn_beta_fast, yarn_beta_slow, attn_temp;
} synth_extra;

static const synth_extra k_extra[] = {
    {.id = "gemma-2-2b", .attn_softcap = 50.0f, .final_softcap = 30.0f},
    {.id = "granite-3.3-2b", .emb_mult = 12.0f, .attn_mult = 0.015625f, .resid_mult = 0.22f, .logit_scale = 8.0f},
    {.id = "gpt-oss-20b", .yarn_factor = 32.0f, .yarn_orig = 4096, .yarn_beta_fast = 32.0f, .yarn_beta_slow = 1.0f},
    {.id = "ministral-3-3b", .yarn_factor = 16.0f, .yarn_orig = 16384, .yarn_log_mul = 1.0f, .yarn_beta_fast = 32.0f,
     .yarn_beta_slow = 1.0f, .attn_temp = 0.1f},
};

static const synth_extra *sy_extra(const synth_model *m) {
  static const synth_extra none = {.id = ""};
  for (size_t i = 0; i < sizeof k_extra / sizeof k_extra[0]; i++)
    if (!strcmp(k_extra[i].id, m->id)) return &k_extra[i];
  return &none;
}

/* Mixture-of-experts geometry of the models that have one: the MLP of
 * every layer is a router (ffn_gate_inp) and n_expert stacked SwiGLU
 * experts of n_ff_exp (ffn_{gate,up,down}_exps, 3-D), and where n_ff_shexp
 * > 0 a shared expert beside them (ffn_{gate,up,down}_shexp) with its
 * sigmoid gate (ffn_gate_inp_shexp, [n_embd, 1] as the converter writes
 * it). */
typedef struct synth_moe {
  const char *id;
  int n_expert, n_expert_used, n_ff_exp, n_ff_shexp;
} synth_moe;

static const synth_moe k_moe[] = {
    {"qwen3-30b-a3b", 128, 8, 768, 0},
    {"qwen1.5-moe-a2.7b", 60, 4, 1408, 5632},
    {"qwen3.5-35b-a3b", 256, 8, 512, 512},
    {"gpt-oss-20b", 32, 4, 2880, 0},
};

/* The encoders among k_models: their pooling ({arch}.pooling_type, as
 * llama.cpp numbers it: 1 mean, 2 cls, 3 last, 4 rank) and whether they
 * carry a reranker's classification head (cls, cls.output). */
static const struct {
  const char *id;
  uint32_t pooling;
  bool rank_head;
} k_enc[] = {
    {"bge-small-en-v1.5", 2, false},
    {"nomic-embed-text-v1.5", 1, false},
    {"ms-marco-minilm-l6-v2", 4, true},
    {"jina-embeddings-v2-small-en", 1, false},
    {"jina-reranker-v1-tiny-en", 4, true},
};

static int sy_enc_index(const synth_model *m) {
  for (size_t i = 0; i < sizeof k_enc / sizeof k_enc[0]; i++)
    if (!strcmp(k_enc[i].id, m->id)) return (int)i;
  return -1;
}

/* SY_DECAY: qwen35's A = -exp(A_log), negative */
typedef enum sy_kind { SY_MATRIX, SY_NORM, SY_BIAS, SY_ROPE, SY_ROPE_LONG, SY_ROPE_SHORT, SY_DECAY } sy_kind;

typedef struct sy_tensor {
  char name[64];
  uint32_t n_dims;
  uint64_t ne[4]; /* unused dims 1 (quant_mix_type reads all four) */
  sy_kind kind;
  float std;
  uint32_t out_type;
  uint64_t name_hash;
} sy_tensor;

typedef struct sy_ctx {
  const synth_model *m;
  sy_tensor *t;
  int n, cap;
  uint64_t seed;
  float *rope; /* [head_dim/2] when the model has llama3 scaling */
  pw_pool *pool;
  int quiet;
  double t0;
  const sy_tensor *cur;
  bool mtp; /* qwen35: write an MTP block after the layers */
  int enc;  /* index in k_enc, or -1 */
  int n_expert; /* > 0: the MLPs are mixtures of this many experts (moe) */
  const synth_moe *moe;
  bool fuse_gu; /* experts' gate and up in one ffn_gate_up_exps tensor */
} sy_ctx;

static uint64_t fnv1a(const char *s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (; *s; s++) h = (h ^ (uint8_t)*s) * 0x100000001b3ull;
  return h;
}

static int sy_add(sy_ctx *c, const char *name, uint32_t n_dims, uint64_t ne0, uint64_t ne1, sy_kind kind, float std) {
  if (c->n == c->cap) {
    int cap = c->cap ? c->cap * 2 : 64;
    sy_tensor *p = realloc(c->t, (size_t)cap * sizeof *p);
    if (!p) return PW_ENOMEM;
    c->t = p;
    c->cap = cap;
  }
  sy_tensor *t = &c->t[c->n++];
  memset(t, 0, sizeof *t);
  snprintf(t->name, sizeof t->name, "%s", name);
  t->n_dims = n_dims;
  t->ne[0] = ne0;
  t->ne[1] = ne1;
  t->ne[2] = t->ne[3] = 1;
  t->kind = kind;
  t->std = std;
  t->name_hash = fnv1a(name);
  return 0;
}

/* a stacked expert tensor: n_exp matrices of ne1 rows of ne0 */
static int sy_add3(sy_ctx *c, const char *name, uint64_t ne0, uint64_t ne1, uint64_t n_exp, float std) {
  int rc = sy_add(c, name, 3, ne0, ne1, SY_MATRIX, std);
  if (!rc) c->t[c->n - 1].ne[2] = n_exp;
  return rc;
}

static bool sy_gptoss(const synth_model *m) { return !strcmp(m->arch, "gpt-oss"); }

/* qwen35: is layer il a gated DeltaNet layer */
static bool sy_recurrent(const synth_model *m, int il) { return m->ssm_d_conv > 0 && (il + 1) % m->full_attn != 0; }

/* The tensors of a model as llama.cpp names them (llama, qwen2, qwen3,
 * gemma3, phi3, qwen35, the MoE ones: qwen3moe, qwen2moe, qwen35moe, and
 * gpt-oss). */
static int sy_build(sy_ctx *c, int n_layer, int64_t n_vocab) {
  const synth_model *m = c->m;
  int64_t e = m->n_embd, qd = (int64_t)m->n_head * m->head_dim, kvd = (int64_t)m->n_head_kv * m->head_dim;
  int64_t dk = m->ssm_d_state, di = (int64_t)m->ssm_dt_rank * dk, cd = di + 2 * (int64_t)m->ssm_n_group * dk;
  int rc = 0;
  rc |= sy_add(c, "token_embd.weight", 2, e, n_vocab, SY_MATRIX, 0.05f);
  rc |= sy_add(c, "output_norm.weight", 1, e, 1, SY_NORM, 0.02f);
  if (!m->tied) rc |= sy_add(c, "output.weight", 2, e, n_vocab, SY_MATRIX, 0.05f);
  if (m->rs_factor > 0) rc |= sy_add(c, "rope_freqs.weight", 1, m->head_dim / 2, 1, SY_ROPE, 0);
  if (m->longrope_ctx > 0) {
    rc |= sy_add(c, "rope_factors_long.weight", 1, m->head_dim / 2, 1, SY_ROPE_LONG, 0);
    rc |= sy_add(c, "rope_factors_short.weight", 1, m->head_dim / 2, 1, SY_ROPE_SHORT, 0);
  }
  const int n_blk = n_layer + (c->mtp ? 1 : 0);
  for (int il = 0; il < n_blk; il++) {
    char n[64];
    const bool mtp = il == n_layer;
#define ADD(suffix, nd, a, b, kind, std) \
  (snprintf(n, sizeof n, "blk.%d.%s", il, suffix), rc |= sy_add(c, n, nd, a, b, kind, std))
    ADD("attn_norm.weight", 1, e, 1, SY_NORM, 0.02f);
    if (!mtp && sy_recurrent(m, il)) {
      ADD("attn_qkv.weight", 2, e, cd, SY_MATRIX, 0.02f);
      ADD("attn_gate.weight", 2, e, di, SY_MATRIX, 0.02f);
      ADD("ssm_conv1d.weight", 2, m->ssm_d_conv, cd, SY_MATRIX, 0.3f);
      ADD("ssm_dt.bias", 1, m->ssm_dt_rank, 1, SY_BIAS, 0.5f);
      ADD("ssm_a", 1, m->ssm_dt_rank, 1, SY_DECAY, 0.5f);
      ADD("ssm_beta.weight", 2, e, m->ssm_dt_rank, SY_MATRIX, 0.02f);
      ADD("ssm_alpha.weight", 2, e, m->ssm_dt_rank, SY_MATRIX, 0.02f);
      ADD("ssm_norm.weight", 1, dk, 1, SY_NORM, 0.02f);
      ADD("ssm_out.weight", 2, di, e, SY_MATRIX, 0.02f);
    } else if (m->fused) {
      ADD("attn_qkv.weight", 2, e, qd + 2 * kvd, SY_MATRIX, 0.02f);
      ADD("attn_output.weight", 2, qd, e, SY_MATRIX, 0.02f);
    } else {
      /* qwen35's query projection carries each head's gate beside it */
      ADD("attn_q.weight", 2, e, m->ssm_d_conv > 0 ? 2 * qd : qd, SY_MATRIX, 0.02f);
      ADD("attn_k.weight", 2, e, kvd, SY_MATRIX, 0.02f);
      ADD("attn_v.weight", 2, e, kvd, SY_MATRIX, 0.02f);
      ADD("attn_output.weight", 2, qd, e, SY_MATRIX, 0.02f);
    }
    if (m->qkv_bias) {
      ADD("attn_q.bias", 1, qd, 1, SY_BIAS, 0.02f);
      ADD("attn_k.bias", 1, kvd, 1, SY_BIAS, 0.02f);
      ADD("attn_v.bias", 1, kvd, 1, SY_BIAS, 0.02f);
    }
    if (sy_gptoss(m)) {
      ADD("attn_output.bias", 1, e, 1, SY_BIAS, 0.02f);
      ADD("attn_sinks.weight", 1, m->n_head, 1, SY_BIAS, 3.0f);
    }
    if (m->qk_norm && (mtp || !sy_recurrent(m, il))) {
      ADD("attn_q_norm.weight", 1, m->head_dim, 1, SY_NORM, 0.02f);
      ADD("attn_k_norm.weight", 1, m->head_dim, 1, SY_NORM, 0.02f);
    }
    if (m->post_norms) {
      ADD("post_attention_norm.weight", 1, e, 1, SY_NORM, 0.02f);
      ADD("post_ffw_norm.weight", 1, e, 1, SY_NORM, 0.02f);
    }
    /* qwen35 and gpt-oss name their pre-MLP norm post_attention_norm */
    ADD(m->ssm_d_conv > 0 || sy_gptoss(m) ? "post_attention_norm.weight" : "ffn_norm.weight", 1, e, 1, SY_NORM, 0.02f);
    if (c->n_expert > 0) {
      /* the router stays F32 (llama.cpp's quantizer leaves it) */
      const int64_t F = c->moe->n_ff_exp, X = c->n_expert;
      ADD("ffn_gate_inp.weight", 2, e, X, SY_MATRIX, 0.02f);
#define ADD3(suffix, a, b) (snprintf(n, sizeof n, "blk.%d.%s", il, suffix), rc |= sy_add3(c, n, a, b, X, 0.02f))
      if (c->fuse_gu) { /* an expert's gate rows, then its up rows */
        ADD3("ffn_gate_up_exps.weight", e, 2 * F);
      } else {
        ADD3("ffn_gate_exps.weight", e, F);
        ADD3("ffn_up_exps.weight", e, F);
      }
      ADD3("ffn_down_exps.weight", F, e);
#undef ADD3
      if (sy_gptoss(m)) { /* biases of the router and of each expert (F32) */
        ADD("ffn_gate_inp.bias", 1, X, 1, SY_BIAS, 0.02f);
        ADD("ffn_gate_exps.bias", 2, F, X, SY_BIAS, 0.02f);
        ADD("ffn_up_exps.bias", 2, F, X, SY_BIAS, 0.02f);
        ADD("ffn_down_exps.bias", 2, e, X, SY_BIAS, 0.02f);
      }
      if (c->moe->n_ff_shexp > 0) {
        const int64_t S = c->moe->n_ff_shexp;
        ADD("ffn_gate_inp_shexp.weight", 2, e, 1, SY_MATRIX, 0.02f);
        ADD("ffn_gate_shexp.weight", 2, e, S, SY_MATRIX, 0.02f);
        ADD("ffn_up_shexp.weight", 2, e, S, SY_MATRIX, 0.02f);
        ADD("ffn_down_shexp.weight", 2, S, e, SY_MATRIX, 0.02f);
      }
    } else if (m->fused) {
      ADD("ffn_up.weight", 2, e, 2 * (int64_t)m->n_ff, SY_MATRIX, 0.02f);
    } else {
      ADD("ffn_gate.weight", 2, e, m->n_ff, SY_MATRIX, 0.02f);
      ADD("ffn_up.weight", 2, e, m->n_ff, SY_MATRIX, 0.02f);
    }
    if (c->n_expert == 0) ADD("ffn_down.weight", 2, m->n_ff, e, SY_MATRIX, 0.02f);
    if (mtp) {
      ADD("nextn.eh_proj.weight", 2, 2 * e, e, SY_MATRIX, 0.02f);
      ADD("nextn.enorm.weight", 1, e, 1, SY_NORM, 0.02f);
      ADD("nextn.hnorm.weight", 1, e, 1, SY_NORM, 0.02f);
      ADD("nextn.shared_head_norm.weight", 1, e, 1, SY_NORM, 0.02f);
    }
#undef ADD
  }
  return rc ? PW_ENOMEM : 0;
}

/* The tensors of a BERT-family encoder as llama.cpp's converter names them
 * (bert: separate Q/K/V with biases, absolute positions, GELU MLP with
 * biases; nomic-bert: fused QKV, SwiGLU MLP, no biases), and a reranker's
 * classification head. */
static int sy_build_enc(sy_ctx *c, int n_layer, int64_t n_vocab, uint32_t n_types) {
  const synth_model *m = c->m;
  const bool nomic = !strcmp(m->arch, "nomic-bert"), jina = !strcmp(m->arch, "jina-bert-v2");
  const int64_t e = m->n_embd, ff = m->n_ff;
  int rc = 0;
  rc |= sy_add(c, "token_embd.weight", 2, e, n_vocab, SY_MATRIX, 0.05f);
  /* one row per token type of the vocabulary (llama.cpp checks the shape) */
  if (n_types > 0) rc |= sy_add(c, "token_types.weight", 2, e, n_types, SY_MATRIX, 0.05f);
  if (!nomic && !jina) rc |= sy_add(c, "position_embd.weight", 2, e, m->n_ctx, SY_MATRIX, 0.05f);
  rc |= sy_add(c, "token_embd_norm.weight", 1, e, 1, SY_NORM, 0.02f);
  rc |= sy_add(c, "token_embd_norm.bias", 1, e, 1, SY_BIAS, 0.02f);
  if (k_enc[c->enc].rank_head && jina) { /* one projection straight to the score */
    rc |= sy_add(c, "cls.weight", 2, e, 1, SY_MATRIX, 0.05f);
    rc |= sy_add(c, "cls.bias", 1, 1, 1, SY_BIAS, 0.02f);
  } else if (k_enc[c->enc].rank_head) {
    rc |= sy_add(c, "cls.weight", 2, e, e, SY_MATRIX, 0.05f);
    rc |= sy_add(c, "cls.bias", 1, e, 1, SY_BIAS, 0.02f);
    rc |= sy_add(c, "cls.output.weight", 2, e, 1, SY_MATRIX, 0.05f);
    rc |= sy_add(c, "cls.output.bias", 1, 1, 1, SY_BIAS, 0.02f);
  }
  for (int il = 0; il < n_layer; il++) {
    char n[64];
#define ADD(suffix, nd, a, b, kind, std) \
  (snprintf(n, sizeof n, "blk.%d.%s", il, suffix), rc |= sy_add(c, n, nd, a, b, kind, std))
    if (nomic) {
      ADD("attn_qkv.weight", 2, e, 3 * e, SY_MATRIX, 0.02f);
    } else {
      ADD("attn_q.weight", 2, e, e, SY_MATRIX, 0.02f);
      ADD("attn_k.weight", 2, e, e, SY_MATRIX, 0.02f);
      ADD("attn_v.weight", 2, e, e, SY_MATRIX, 0.02f);
      ADD("attn_q.bias", 1, e, 1, SY_BIAS, 0.02f);
      ADD("attn_k.bias", 1, e, 1, SY_BIAS, 0.02f);
      ADD("attn_v.bias", 1, e, 1, SY_BIAS, 0.02f);
    }
    ADD("attn_output.weight", 2, e, e, SY_MATRIX, 0.02f);
    if (!nomic) ADD("attn_output.bias", 1, e, 1, SY_BIAS, 0.02f);
    ADD("attn_output_norm.weight", 1, e, 1, SY_NORM, 0.02f);
    ADD("attn_output_norm.bias", 1, e, 1, SY_BIAS, 0.02f);
    /* jina: the gate is ffn_up's first half, without a bias */
    ADD("ffn_up.weight", 2, e, jina ? 2 * ff : ff, SY_MATRIX, 0.02f);
    if (nomic) ADD("ffn_gate.weight", 2, e, ff, SY_MATRIX, 0.02f);
    ADD("ffn_down.weight", 2, ff, e, SY_MATRIX, 0.02f);
    if (!nomic) {
      if (!jina) ADD("ffn_up.bias", 1, ff, 1, SY_BIAS, 0.02f);
      ADD("ffn_down.bias", 1, e, 1, SY_BIAS, 0.02f);
    }
    ADD("layer_output_norm.weight", 1, e, 1, SY_NORM, 0.02f);
    ADD("layer_output_norm.bias", 1, e, 1, SY_BIAS, 0.02f);
#undef ADD
  }
  return rc ? PW_ENOMEM : 0;
}

/* An encoder's hyperparameters, as llama.cpp's converter writes them. */
static int sy_enc_meta(gguf_writer *w, const synth_model *m, int n_layer, uint32_t pooling, char *err) {
  char key[160];
#define KEY(s) (snprintf(key, sizeof key, "%s.%s", m->arch, s), key)
  if (gguf_writer_set_u32(w, KEY("block_count"), (uint32_t)n_layer, err) ||
      gguf_writer_set_u32(w, KEY("context_length"), (uint32_t)m->n_ctx, err) ||
      gguf_writer_set_u32(w, KEY("embedding_length"), (uint32_t)m->n_embd, err) ||
      gguf_writer_set_u32(w, KEY("feed_forward_length"), (uint32_t)m->n_ff, err) ||
      gguf_writer_set_u32(w, KEY("attention.head_count"), (uint32_t)m->n_head, err) ||
      gguf_writer_set_f32(w, KEY("attention.layer_norm_epsilon"), m->rms_eps, err) ||
      gguf_writer_set_bool(w, KEY("attention.causal"), false, err) ||
      gguf_writer_set_u32(w, KEY("pooling_type"), pooling, err))
    return -1;
  if (!strcmp(m->arch, "nomic-bert") && gguf_writer_set_f32(w, KEY("rope.freq_base"), m->rope_base, err)) return -1;
#undef KEY
  return 0;
}

/* llama3 rope scaling as llama.cpp's converter bakes it into rope_freqs:
 * a per-dimension divisor of the rotation frequency (1 for short
 * wavelengths, factor for long ones, smooth in between). */
static void sy_rope_factors(const synth_model *m, float *out) {
  int dim = m->head_dim;
  double low_wavelen = m->rs_orig_ctx / m->rs_low, high_wavelen = m->rs_orig_ctx / m->rs_high;
  for (int i = 0; i < dim / 2; i++) {
    /* the converter computes freqs in float32 */
    float freq = (float)(1.0 / pow((double)m->rope_base, (double)(float)(2 * i) / (double)dim));
    double wavelen = 2 * M_PI / (double)freq;
    double f;
    if (wavelen < high_wavelen) f = 1.0;
    else if (wavelen > low_wavelen) f = m->rs_factor;
    else {
      double smooth = (m->rs_orig_ctx / wavelen - m->rs_low) / (m->rs_high - m->rs_low);
      f = 1.0 / ((1 - smooth) / m->rs_factor + smooth);
    }
    out[i] = (float)f;
  }
}

/* Approximately standard normal from one 64-bit draw: the sum of four
 * 16-bit uniforms, centred and scaled to unit variance (Irwin-Hall). Cheap
 * enough for a billion weights; the tails stop at +-3.46. */
static inline float sy_gauss(pw_rng *r) {
  uint64_t v = pw_rng_next(r);
  uint32_t s = (uint32_t)(v & 0xffff) + (uint32_t)((v >> 16) & 0xffff) + (uint32_t)((v >> 32) & 0xffff) +
               (uint32_t)(v >> 48);
  return (float)(((double)s + 2.0) / 65536.0 - 2.0) * 1.7320508f;
}

static void sy_row(void *p, int64_t row, float *out) {
  sy_ctx *c = p;
  const sy_tensor *t = c->cur;
  int64_t n = (int64_t)t->ne[0];
  if (t->kind == SY_ROPE) {
    memcpy(out, c->rope, (size_t)n * sizeof(float));
    return;
  }
  if (t->kind == SY_ROPE_LONG || t->kind == SY_ROPE_SHORT) {
    /* LongRoPE-like factors: short ones near 1, long ones rising from 1 to
     * about 40 over the pairs (the shape of Phi-3.5's) */
    for (int64_t i = 0; i < n; i++) {
      float x = (float)i / (float)(n > 1 ? n - 1 : 1);
      out[i] = t->kind == SY_ROPE_SHORT ? 1.0f + 0.05f * x : 1.0f + 39.0f * x * x;
    }
    return;
  }
  pw_rng r;
  pw_rng_seed(&r, c->seed * 0x9e3779b97f4a7c15ull ^ t->name_hash ^ ((uint64_t)row + 1) * 0xd1b54a32d192ed03ull);
  if (t->kind == SY_DECAY) {
    for (int64_t i = 0; i < n; i++) out[i] = -expf(t->std * sy_gauss(&r));
    return;
  }
  float base = t->kind == SY_NORM ? 1.0f : 0.0f;
  for (int64_t i = 0; i < n; i++) out[i] = base + t->std * sy_gauss(&r);
}

static int sy_data(void *p, uint64_t i, gguf_emit_fn emit, void *sink, char *err) {
  sy_ctx *c = p;
  const sy_tensor *t = &c->t[i];
  c->cur = t;
  if (!c->quiet && (t->n_dims > 1 || i + 1 == (uint64_t)c->n))
    fprintf(stderr, "[%4llu/%4d] %-28s [%6llu, %6llu] %-5s (%.1fs)\n", (unsigned long long)i + 1, c->n, t->name,
            (unsigned long long)t->ne[0], (unsigned long long)t->ne[1], pw_dtype_name(t->out_type),
            pw_now_s() - c->t0);
  return quant_stream(c->pool, sy_row, c, (int64_t)(t->ne[1] * t->ne[2]), (int64_t)t->ne[0], t->out_type, emit, sink,
                      err);
}

static int sy_cmp(const void *a, const void *b) {
  return quant_name_cmp(((const sy_tensor *)a)->name, ((const sy_tensor *)b)->name);
}

static void synth_usage(FILE *out) {
  fprintf(out,
          "usage: power synth --arch NAME --vocab VOCAB.gguf --out OUT.gguf [options]\n"
          "  writes a model with the shapes of a real one, VOCAB's tokenizer and seeded dummy weights\n"
          "  --arch NAME     one of:");
  for (size_t i = 0; i < sizeof k_models / sizeof k_models[0]; i++) fprintf(out, " %s", k_models[i].id);
  fprintf(out,
          "\n"
          "  --vocab FILE    GGUF whose tokenizer.* metadata is copied (its token count is the vocabulary)\n"
          "  --type T        weight type with llama.cpp's mix (default F16): %s\n"
          "  --seed S        weight seed (default 1)\n"
          "  --layers N      override the layer count (quick tests)\n"
          "  --embd N        override the hidden size, a multiple of 32 (quick tests; the heads, their size and\n"
          "                  the MLP widths stay the model's)\n"
          "  --window N      override the sliding window of models that have one (quick tests)\n"
          "  --yarn F,CTX    YaRN rope scaling by F over an original context of CTX positions\n"
          "  --orig-ctx N    override the original context of LongRoPE models (quick tests of the long factors)\n"
          "  --softcap A,F   gemma2: override the attention and final logit soft-capping (quick tests)\n"
          "  --ff N          override the MLP hidden size of dense models (quick tests)\n"
          "  --mtp           qwen3.5: add the MTP block (nextn) after the layers (with experts where the\n"
          "                  model has them)\n"
          "  --pooling P     encoders: mean, cls, last or rank (rank needs a reranker; default: the model's)\n"
          "  --experts N     mixture-of-experts models: N experts per layer instead of the model's (at least\n"
          "                  its experts per token; quick tests)\n"
          "  --fuse-gate-up  qwen3.5 mixtures of experts: the experts' gate and up matrices in one\n"
          "                  ffn_gate_up_exps tensor, as the converter's --fuse-gate-up-exps writes them\n"
          "  --threads N     generation threads (default 2; the output is the same for any N)\n"
          "  --quiet         no progress on stderr\n",
          quant_ftype_names());
}

int cmd_synth(int argc, char **argv) {
  const char *arch = NULL, *vocab = NULL, *outp = NULL, *type = "F16";
  long seed = 1, layers = 0, threads = 2, window = 0, yarn_ctx = 0, orig_ctx = 0, experts = 0, embd = 0, ff = 0;
  const char *pooling = NULL;
  double yarn_factor = 0, softcap_attn = 0, softcap_final = 0;
  int quiet = 0;
  bool mtp = false, fuse_gu = false;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      synth_usage(stdout);
      return 0;
    }
    if (!strcmp(a, "--quiet") || !strcmp(a, "-q")) {
      quiet = 1;
      continue;
    }
    if (!strcmp(a, "--mtp")) {
      mtp = true;
      continue;
    }
    if (!strcmp(a, "--fuse-gate-up")) {
      fuse_gu = true;
      continue;
    }
    bool known = !strcmp(a, "--arch") || !strcmp(a, "--vocab") || !strcmp(a, "--out") || !strcmp(a, "-o") ||
                 !strcmp(a, "--type") || !strcmp(a, "--seed") || !strcmp(a, "--layers") || !strcmp(a, "--embd") ||
                 !strcmp(a, "--window") || !strcmp(a, "--yarn") || !strcmp(a, "--orig-ctx") || !strcmp(a, "--pooling") ||
                 !strcmp(a, "--experts") || !strcmp(a, "--softcap") || !strcmp(a, "--ff") || !strcmp(a, "--threads") ||
                 !strcmp(a, "-t");
    if (!known) {
      fprintf(stderr, "power synth: unknown argument %s (try --help)\n", a);
      return 2;
    }
    if (!v) {
      fprintf(stderr, "power synth: option %s needs a value\n", a);
      return 2;
    }
    i++;
    if (!strcmp(a, "--arch")) arch = v;
    else if (!strcmp(a, "--vocab")) vocab = v;
    else if (!strcmp(a, "--out") || !strcmp(a, "-o")) outp = v;
    else if (!strcmp(a, "--type")) type = v;
    else if (!strcmp(a, "--pooling")) pooling = v;
    else if (!strcmp(a, "--seed")) {
      if (cli_parse_long("synth", a, v, 0, 0x7fffffffL, &seed)) return 2;
    } else if (!strcmp(a, "--layers")) {
      if (cli_parse_long("synth", a, v, 1, 1024, &layers)) return 2;
    } else if (!strcmp(a, "--embd")) {
      if (cli_parse_long("synth", a, v, 32, 65536, &embd)) return 2;
      if (embd % 32) {
        fprintf(stderr, "power synth: --embd %ld is not a multiple of 32\n", embd);
        return 2;
      }
    } else if (!strcmp(a, "--yarn")) {
      char *end = NULL;
      yarn_factor = strtod(v, &end);
      if (!end || *end != ',' || !(yarn_factor > 1 && yarn_factor <= 1024) ||
          cli_parse_long("synth", a, end + 1, 1, 1 << 24, &yarn_ctx)) {
        fprintf(stderr, "power synth: --yarn takes FACTOR,CONTEXT (FACTOR in (1, 1024]), not '%s'\n", v);
        return 2;
      }
    } else if (!strcmp(a, "--ff")) {
      if (cli_parse_long("synth", a, v, 32, 1 << 20, &ff)) return 2;
    } else if (!strcmp(a, "--softcap")) {
      char *end = NULL;
      softcap_attn = strtod(v, &end);
      if (end && *end == ',') softcap_final = strtod(end + 1, &end);
      if (!end || *end || !(softcap_attn > 0 && softcap_attn <= 1e4) || !(softcap_final > 0 && softcap_final <= 1e4)) {
        fprintf(stderr, "power synth: --softcap takes ATTENTION,FINAL (each in (0, 10000]), not '%s'\n", v);
        return 2;
      }
    } else if (!strcmp(a, "--experts")) {
      if (cli_parse_long("synth", a, v, 1, 512, &experts)) return 2;
    } else if (!strcmp(a, "--orig-ctx")) {
      if (cli_parse_long("synth", a, v, 1, 1 << 24, &orig_ctx)) return 2;
    } else if (!strcmp(a, "--window")) {
      if (cli_parse_long("synth", a, v, 1, 1 << 20, &window)) return 2;
    } else if (cli_parse_long("synth", a, v, 1, 256, &threads))
      return 2;
  }
  if (!arch || !vocab || !outp) {
    fprintf(stderr, "power synth: --arch, --vocab and --out are required (try --help)\n");
    return 2;
  }
  const synth_model *m = NULL;
  for (size_t i = 0; i < sizeof k_models / sizeof k_models[0]; i++)
    if (!strcmp(arch, k_models[i].id)) m = &k_models[i];
  if (!m) {
    fprintf(stderr, "power synth: unknown --arch '%s' (known:", arch);
    for (size_t i = 0; i < sizeof k_models / sizeof k_models[0]; i++) fprintf(stderr, " %s", k_models[i].id);
    fprintf(stderr, ")\n");
    return 2;
  }
  synth_model resized;
  /* llama.cpp's qwen2 and qwen2moe take the query width from the hidden
   * size (their attn_q must be square), so another width would make a
   * file it refuses */
  if (embd > 0 && embd != (long)m->n_head * m->head_dim && (!strcmp(m->arch, "qwen2") || !strcmp(m->arch, "qwen2moe"))) {
    fprintf(stderr, "power synth: --embd: %s (%s) needs a hidden size of heads x head size (%d)\n", m->id, m->arch,
            m->n_head * m->head_dim);
    return 2;
  }
  if (embd > 0) {
    /* the head size stays the model's: written as key_length when it no
     * longer equals the hidden size over the heads */
    resized = *m;
    resized.n_embd = (int)embd;
    m = &resized;
  }
  if (mtp && m->ssm_d_conv == 0) {
    fprintf(stderr, "power synth: --mtp: %s has no MTP block\n", m->id);
    return 2;
  }
  const synth_moe *moe = NULL;
  for (size_t i = 0; i < sizeof k_moe / sizeof k_moe[0]; i++)
    if (!strcmp(m->id, k_moe[i].id)) moe = &k_moe[i];
  if (fuse_gu && strcmp(m->arch, "qwen35moe")) { /* where llama.cpp reads the fused tensor */
    fprintf(stderr, "power synth: --fuse-gate-up: only qwen3.5 mixtures of experts have a fused gate+up\n");
    return 2;
  }
  if (ff > 0 && moe) {
    fprintf(stderr, "power synth: --ff: %s is a mixture of experts (--experts sizes it)\n", m->id);
    return 2;
  }
  if (experts > 0 && !moe) {
    fprintf(stderr, "power synth: --experts: %s is not a mixture of experts\n", m->id);
    return 2;
  }
  if (moe && experts > 0 && experts < moe->n_expert_used) {
    fprintf(stderr, "power synth: --experts %ld: %s routes each token to %d experts\n", experts, m->id,
            moe->n_expert_used);
    return 2;
  }
  if (orig_ctx > 0 && m->longrope_ctx == 0) {
    fprintf(stderr, "power synth: --orig-ctx: %s has no LongRoPE\n", m->id);
    return 2;
  }
  const synth_extra *x = sy_extra(m);
  synth_model shaped; /* m with --ff's MLP size */
  if (ff > 0) {
    if (ff % 32) {
      fprintf(stderr, "power synth: --ff %ld: not a multiple of 32 (the quantized types' blocks)\n", ff);
      return 2;
    }
    shaped = *m;
    shaped.n_ff = (int)ff;
    m = &shaped;
  }
  if (softcap_attn > 0 && x->final_softcap == 0) {
    fprintf(stderr, "power synth: --softcap: %s has no soft-capping\n", m->id);
    return 2;
  }
  if (window > 0 && m->n_swa == 0) {
    fprintf(stderr, "power synth: --window: %s has no sliding window\n", m->id);
    return 2;
  }
  const int enc = sy_enc_index(m);
  uint32_t pool_type = enc >= 0 ? k_enc[enc].pooling : 0;
  if (pooling) {
    static const char *const k_pool[] = {"", "mean", "cls", "last", "rank"};
    pool_type = 0;
    for (uint32_t i = 1; i < 5; i++)
      if (!strcmp(pooling, k_pool[i])) pool_type = i;
    if (enc < 0 || pool_type == 0 || (pool_type == 4 && !k_enc[enc].rank_head)) {
      fprintf(stderr, "power synth: --pooling '%s': %s\n", pooling,
              enc < 0 ? "only encoders pool" : pool_type == 0 ? "not mean, cls, last or rank" : "rank needs a reranker");
      return 2;
    }
  }
  if (enc >= 0 && yarn_factor > 0) {
    fprintf(stderr, "power synth: --yarn: %s has no RoPE scaling\n", m->id);
    return 2;
  }
  const quant_ftype *q = quant_ftype_find(type);
  if (!q) {
    fprintf(stderr, "power synth: unknown --type '%s' (known: %s)\n", type, quant_ftype_names());
    return 2;
  }
  char err[PW_ERRMAX], key[160];
  gguf_file *vf = NULL;
  gguf_writer *w = NULL;
  sy_ctx c = {0};
  const char **names = NULL;
  int rc = 1;
  c.m = m;
  c.seed = (uint64_t)seed;
  c.quiet = quiet;
  c.mtp = mtp;
  c.enc = enc;
  c.moe = moe;
  c.fuse_gu = fuse_gu;
  c.n_expert = moe ? (experts > 0 ? (int)experts : moe->n_expert) : 0;
  if (gguf_open(vocab, &vf, err)) {
    fprintf(stderr, "power synth: %s: %s\n", vocab, err);
    goto done;
  }
  gguf_arr toks;
  if (!gguf_get_arr(vf, "tokenizer.ggml.tokens", &toks) || toks.type != GGUF_T_STRING || toks.n == 0 ||
      toks.n > (1u << 24)) {
    fprintf(stderr, "power synth: %s has no tokenizer.ggml.tokens list\n", vocab);
    goto done;
  }
  int n_layer = layers > 0 ? (int)layers : m->n_layer;
  if (m->rs_factor > 0) {
    c.rope = malloc((size_t)(m->head_dim / 2) * sizeof(float));
    if (!c.rope) goto oom;
    sy_rope_factors(m, c.rope);
  }
  uint32_t n_types = 2; /* BERT's two sentence types unless the vocabulary says */
  gguf_get_u32(vf, "tokenizer.ggml.token_type_count", &n_types);
  if (n_types > 16) {
    fprintf(stderr, "power synth: %s: token_type_count %u is not a plausible count\n", vocab, n_types);
    goto done;
  }
  if (enc >= 0 ? sy_build_enc(&c, n_layer, (int64_t)toks.n, n_types) : sy_build(&c, n_layer, (int64_t)toks.n)) goto oom;
  qsort(c.t, (size_t)c.n, sizeof *c.t, sy_cmp);
  names = calloc((size_t)c.n, sizeof *names);
  w = gguf_writer_create();
  if (!names || !w) goto oom;
  for (int i = 0; i < c.n; i++) names[i] = c.t[i].name;
  quant_mix mix;
  quant_mix_init(&mix, q, names, c.n, m->n_head / m->n_head_kv);
  for (int i = 0; i < c.n; i++) {
    sy_tensor *t = &c.t[i];
    t->out_type = quant_mix_converts(t->name, t->n_dims) ? quant_mix_type(&mix, t->name, t->ne) : PW_DT_F32;
    if (!strcmp(t->name, "token_types.weight")) t->out_type = PW_DT_F32; /* llama.cpp never quantizes it */
    if (gguf_writer_add_tensor(w, t->name, t->n_dims, t->ne, t->out_type, err)) goto fail;
  }
  /* Metadata in the order llama.cpp's converter writes it. */
  char title[160];
  snprintf(title, sizeof title, "%s (synthetic weights, seed %ld%s%s%s%s%s%s)", m->title, seed,
           n_layer != m->n_layer ? ", fewer layers" : "", embd > 0 ? ", another width" : "",
           window > 0 ? ", another window" : "", moe && c.n_expert != moe->n_expert ? ", other expert count" : "",
           softcap_attn > 0 ? ", other soft-capping" : "", ff > 0 ? ", another MLP size" : "");
  const char *a = m->arch;
#define KEY(s) (snprintf(key, sizeof key, "%s.%s", a, s), key)
  if (enc >= 0 && (gguf_writer_set_str(w, "general.architecture", a, err) ||
                   gguf_writer_set_str(w, "general.type", "model", err) ||
                   gguf_writer_set_str(w, "general.name", title, err) || sy_enc_meta(w, m, n_layer, pool_type, err)))
    goto fail;
  if (enc < 0 && (gguf_writer_set_str(w, "general.architecture", a, err) || gguf_writer_set_str(w, "general.type", "model", err) ||
      gguf_writer_set_str(w, "general.name", title, err) ||
      gguf_writer_set_u32(w, KEY("block_count"), (uint32_t)(n_layer + (mtp ? 1 : 0)), err) ||
      gguf_writer_set_u32(w, KEY("context_length"), (uint32_t)m->n_ctx, err) ||
      gguf_writer_set_u32(w, KEY("embedding_length"), (uint32_t)m->n_embd, err) ||
      (m->n_ff > 0 && gguf_writer_set_u32(w, KEY("feed_forward_length"), (uint32_t)m->n_ff, err)) ||
      gguf_writer_set_u32(w, KEY("attention.head_count"), (uint32_t)m->n_head, err) ||
      gguf_writer_set_u32(w, KEY("attention.head_count_kv"), (uint32_t)m->n_head_kv, err) ||
      gguf_writer_set_f32(w, KEY("rope.freq_base"), m->rope_base, err) ||
      gguf_writer_set_f32(w, KEY("attention.layer_norm_rms_epsilon"), m->rms_eps, err)))
    goto fail;
  if (m->head_dim != m->n_embd / m->n_head &&
      (gguf_writer_set_u32(w, KEY("attention.key_length"), (uint32_t)m->head_dim, err) ||
       gguf_writer_set_u32(w, KEY("attention.value_length"), (uint32_t)m->head_dim, err)))
    goto fail;
  if (m->ssm_d_conv > 0) {
    const int32_t di = m->ssm_dt_rank * m->ssm_d_state;
    if (gguf_writer_set_u32(w, KEY("rope.dimension_count"), (uint32_t)m->n_rot, err) ||
        gguf_writer_set_arr(w, KEY("rope.dimension_sections"), GGUF_T_INT32, m->rope_sections, 4, err) ||
        gguf_writer_set_u32(w, KEY("ssm.conv_kernel"), (uint32_t)m->ssm_d_conv, err) ||
        gguf_writer_set_u32(w, KEY("ssm.state_size"), (uint32_t)m->ssm_d_state, err) ||
        gguf_writer_set_u32(w, KEY("ssm.group_count"), (uint32_t)m->ssm_n_group, err) ||
        gguf_writer_set_u32(w, KEY("ssm.time_step_rank"), (uint32_t)m->ssm_dt_rank, err) ||
        gguf_writer_set_u32(w, KEY("ssm.inner_size"), (uint32_t)di, err) ||
        gguf_writer_set_u32(w, KEY("full_attention_interval"), (uint32_t)m->full_attn, err) ||
        (mtp && gguf_writer_set_u32(w, KEY("nextn_predict_layers"), 1, err)))
      goto fail;
  }
  if (moe && (gguf_writer_set_u32(w, KEY("expert_count"), (uint32_t)c.n_expert, err) ||
              gguf_writer_set_u32(w, KEY("expert_used_count"), (uint32_t)moe->n_expert_used, err) ||
              gguf_writer_set_u32(w, KEY("expert_feed_forward_length"), (uint32_t)moe->n_ff_exp, err) ||
              (moe->n_ff_shexp > 0 &&
               gguf_writer_set_u32(w, KEY("expert_shared_feed_forward_length"), (uint32_t)moe->n_ff_shexp, err))))
    goto fail;
  if (m->longrope_ctx > 0) {
    /* Phi-3's converter: attn_factor = sqrt(1 + ln(scale) / ln(original context)) */
    int oc = orig_ctx > 0 ? (int)orig_ctx : m->longrope_ctx;
    double scale = (double)m->n_ctx / oc;
    if (gguf_writer_set_u32(w, KEY("rope.scaling.original_context_length"), (uint32_t)oc, err) ||
        gguf_writer_set_f32(w, KEY("rope.scaling.attn_factor"),
                            scale > 1 ? (float)sqrt(1 + log(scale) / log((double)oc)) : 1.0f, err) ||
        gguf_writer_set_u32(w, KEY("rope.dimension_count"), (uint32_t)m->head_dim, err))
      goto fail;
  }
  /* YaRN: --yarn's, else the published config's (with its betas,
   * magnitude and attention temperature, as the mistral3 converter writes
   * them) */
  if (yarn_factor == 0 && x->yarn_factor > 0) {
    yarn_factor = x->yarn_factor;
    yarn_ctx = x->yarn_orig;
  }
  if (yarn_factor > 0 &&
      (gguf_writer_set_str(w, KEY("rope.scaling.type"), "yarn", err) ||
       gguf_writer_set_f32(w, KEY("rope.scaling.factor"), (float)yarn_factor, err) ||
       gguf_writer_set_u32(w, KEY("rope.scaling.original_context_length"), (uint32_t)yarn_ctx, err)))
    goto fail;
  if (x->yarn_factor > 0 &&
      (gguf_writer_set_f32(w, KEY("rope.scaling.yarn_beta_fast"), x->yarn_beta_fast, err) ||
       gguf_writer_set_f32(w, KEY("rope.scaling.yarn_beta_slow"), x->yarn_beta_slow, err) ||
       (x->yarn_log_mul > 0 && gguf_writer_set_f32(w, KEY("rope.scaling.yarn_log_multiplier"), x->yarn_log_mul, err))))
    goto fail;
  if (x->attn_temp != 0 && gguf_writer_set_f32(w, KEY("attention.temperature_scale"), x->attn_temp, err)) goto fail;
  if (x->final_softcap > 0 && (gguf_writer_set_f32(w, KEY("attn_logit_softcapping"),
                                                   softcap_attn > 0 ? (float)softcap_attn : x->attn_softcap, err) ||
                               gguf_writer_set_f32(w, KEY("final_logit_softcapping"),
                                                   softcap_final > 0 ? (float)softcap_final : x->final_softcap, err)))
    goto fail;
  if (x->logit_scale > 0 && (gguf_writer_set_f32(w, KEY("embedding_scale"), x->emb_mult, err) ||
                             gguf_writer_set_f32(w, KEY("attention.scale"), x->attn_mult, err) ||
                             gguf_writer_set_f32(w, KEY("residual_scale"), x->resid_mult, err) ||
                             gguf_writer_set_f32(w, KEY("logit_scale"), x->logit_scale, err)))
    goto fail;
  if (m->n_swa > 0 &&
      gguf_writer_set_u32(w, KEY("attention.sliding_window"), (uint32_t)(window > 0 ? window : m->n_swa), err))
    goto fail;
  /* the llama converter's keys, which its derived converters write too */
  const bool llama_conv =
      !strcmp(a, "llama") || !strcmp(a, "smollm3") || !strcmp(a, "granite") || !strcmp(a, "mistral3");
  if (llama_conv && (gguf_writer_set_u32(w, KEY("vocab_size"), (uint32_t)toks.n, err) ||
                     gguf_writer_set_u32(w, KEY("rope.dimension_count"), (uint32_t)m->head_dim, err)))
    goto fail;
#undef KEY
  if (gguf_writer_set_u32(w, "general.file_type", q->ftype, err)) goto fail;
  if (quant_ftype_is_quantized(q) && gguf_writer_set_u32(w, "general.quantization_version", 2, err)) goto fail;
  if (gguf_writer_copy_kvs_prefix(w, vf, "tokenizer.", err) < 0) goto fail;
  c.pool = pw_pool_create((int)threads);
  if (!c.pool) {
    fprintf(stderr, "power synth: cannot start %ld threads\n", threads);
    goto done;
  }
  c.t0 = pw_now_s();
  if (gguf_writer_write(w, outp, sy_data, &c, err)) goto fail;
  if (!quiet)
    fprintf(stderr, "power synth: %s: %s, %d layers, %s, vocabulary %llu, %.1f MB in %.1fs\n", outp, m->id, n_layer,
            q->name, (unsigned long long)toks.n, (double)gguf_writer_file_size(w) / 1e6, pw_now_s() - c.t0);
  rc = 0;
  goto done;
oom:
  fprintf(stderr, "power synth: out of memory\n");
  goto done;
fail:
  fprintf(stderr, "power synth: %s\n", err);
done:
  pw_pool_destroy(c.pool);
  gguf_writer_destroy(w);
  free(names);
  free(c.t);
  free(c.rope);
  gguf_close(vf);
  return rc;
}
