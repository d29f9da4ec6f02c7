/* model.h - a GGUF transformer bound to its weights, its KV cache, and the
 * batched forward pass.
 *
 * The model is decoder-only with RMSNorm, RoPE and GQA attention:
 * architectures `llama`, `qwen2` (QKV biases), `qwen3` (per-head Q/K
 * RMSNorm), all with a SwiGLU MLP, and `gemma3` (scaled embeddings,
 * sandwich norms, Q/K norm, sliding-window layers between global ones, a
 * GeGLU MLP), `phi3` (fused QKV and gate/up projections, LongRoPE) and
 * `qwen3moe` (qwen3's attention, a routed mixture-of-experts MLP) and
 * `qwen2moe` (qwen2's attention, routed experts beside a gated shared one),
 * `qwen35` (gated DeltaNet layers between gated full-attention ones),
 * `qwen35moe` (the same layers with qwen2moe-like routed and shared
 * experts), `gpt-oss` (attention with biases and per-head sinks,
 * sliding-window layers between full ones, biased experts with a clamped
 * SwiGLU), `gemma2` (gemma3's block without Q/K norm, with soft-capped
 * attention scores and logits), and llama blocks with extras: `smollm3`
 * (every fourth layer without RoPE), `granite` (embedding, attention,
 * residual and logit multipliers) and `mistral3` (YaRN with Llama 4's
 * attention temperature).
 * Weights are views into the bytes weights/ holds: the GGUF mapping by
 * default, or an owned (possibly decrypted) copy.
 *
 * The forward pass takes a batch of (sequence, position, token) entries from
 * several sequences and returns logits for the entries that ask for them.
 * A sequence's entries in a batch must be in position order and continue its
 * KV cache exactly (pos == current length, then +1...). The result for an
 * entry never depends on the other entries of the batch (batch invariance).
 *
 * Not here: tokenization, sampling, scheduling. */
#ifndef PW_MODEL_MODEL_H
#define PW_MODEL_MODEL_H

#include "base/pool.h"
#include "gguf/gguf.h"
#include "weights/weights.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum model_arch {
  MODEL_ARCH_LLAMA,
  MODEL_ARCH_QWEN2,
  MODEL_ARCH_QWEN3,
  MODEL_ARCH_GEMMA3,
  MODEL_ARCH_PHI3,
  MODEL_ARCH_QWEN35,
  MODEL_ARCH_BERT,
  MODEL_ARCH_NOMIC_BERT,
  MODEL_ARCH_QWEN3MOE,
  MODEL_ARCH_QWEN2MOE,
  MODEL_ARCH_QWEN35MOE,
  MODEL_ARCH_GPTOSS,
  MODEL_ARCH_GEMMA2,
  MODEL_ARCH_SMOLLM3,
  MODEL_ARCH_GRANITE,
  MODEL_ARCH_MISTRAL3,
  MODEL_ARCH_JINA_BERT_V2
} model_arch;

/* How an encoder's hidden states become one vector per sequence
 * ({arch}.pooling_type, llama.cpp's values). */
typedef enum model_pooling {
  MODEL_POOLING_NONE = 0, /* a decoder (no pooling of its own) */
  MODEL_POOLING_MEAN = 1,
  MODEL_POOLING_CLS = 2,  /* the first token's state */
  MODEL_POOLING_LAST = 3, /* the last token's state */
  MODEL_POOLING_RANK = 4, /* the first token's state through the classification head: scores */
} model_pooling;

typedef struct model_hparams {
  model_arch arch;
  char arch_name[32];
  int32_t n_vocab;   /* rows of token_embd */
  int32_t n_embd;    /* hidden size */
  int32_t n_layer;
  int32_t n_head;
  int32_t n_head_kv;
  int32_t head_dim;  /* per head, = key_length when present */
  int32_t n_ff;      /* MLP hidden size */
  int32_t n_ctx_train;
  float rope_base;
  float rope_scale;  /* position scale, 1/factor (1 = none): linear and YaRN */
  float rope_ext_factor;  /* YaRN: extrapolation mix (1 with YaRN, 0 = none) */
  float rope_attn_factor; /* magnitude of cos/sin (1 = none; YaRN's mscale) */
  float rope_corr[2];     /* YaRN: first and last dimension pair of the ramp */
  int32_t n_ctx_orig;     /* YaRN: the context the model was trained for before scaling */
  float rms_eps;
  bool rope_neox;    /* true: rotate halves (qwen); false: adjacent pairs (llama) */
  /* Architecture extras (0 = none) */
  float attn_scale;    /* query scale before attention; 0 = 1/sqrt(head_dim) inside it */
  float emb_scale;     /* token embeddings are multiplied by this (gemma: sqrt(n_embd)) */
  float logit_softcap; /* final logits = cap * tanh(logits / cap) */
  float attn_softcap; /* attention scores = cap * tanh(score / cap) before the
                          softmax (gemma2) */
  float kq_scale; /* score scale inside attention (granite's attention.scale); 0
                     = 1/sqrt(head_dim) */
  float residual_scale; /* a layer's attention and MLP outputs times this before
                           each residual add (granite) */
  float logit_scale; /* final logits divided by this (granite) */
  int32_t no_rope_step; /* layers with (il + 1) % no_rope_step == 0 have no RoPE
                           (smollm3) */
  bool no_rope; /* no layer has RoPE (granite's rope.scaling.finetuned = false)
                 */
  /* queries times 1 + attn_temp * ln(floor(pos / attn_temp_floor) + 1)
   * after RoPE (mistral3's temperature tuning, Llama 4's formula) */
  float attn_temp;
  int32_t attn_temp_floor;
  int32_t n_swa;       /* sliding window of the local layers, in positions */
  int32_t swa_period;  /* every swa_period-th layer is global, the others local */
  float rope_base_swa; /* RoPE base of the local layers (0: they rotate as the global ones) */
  int32_t n_rot;       /* rotated dimensions of a head (= head_dim unless partial RoPE) */
  int32_t rope_sections[4]; /* M-RoPE sections in rotation pairs (all 0 = plain RoPE) */
  bool rope_imrope;    /* interleaved M-RoPE (qwen3.5): section of pair i is i % 3 */
  /* Gated DeltaNet layers (qwen35, qwen35moe; 0 = none) */
  int32_t ssm_d_conv;  /* causal conv1d kernel width */
  int32_t ssm_d_state; /* key/value head dimension of the recurrent state */
  int32_t ssm_n_group; /* key heads */
  int32_t ssm_dt_rank; /* value heads */
  int32_t ssm_d_inner; /* value heads x value head dimension */
  int32_t n_recurrent; /* layers with a recurrent state */
  int32_t n_nextn;     /* MTP blocks stored after the n_layer decoder layers */
  /* Mixture of experts (qwen3moe, qwen2moe, qwen35moe; 0 = dense MLP) */
  int32_t n_expert;      /* experts per layer */
  int32_t n_expert_used; /* experts each token goes through (top-k) */
  int32_t n_ff_exp;      /* hidden size of one expert */
  bool expert_norm;      /* the top-k weights are divided by their sum */
  float expert_scale;    /* the top-k weights are multiplied by this (0, 1: none) */
  int32_t n_ff_shexp;    /* hidden size of the shared expert (qwen2moe, qwen35moe; 0 = none) */
  bool shexp_sigmoid;    /* the shared expert's gate is sigmoid(v) (qwen35moe); false: silu(v) / v
                          * as llama.cpp's qwen2moe graph computes it (the same up to rounding) */
  /* gpt-oss's routing and experts: the top-k of the router logits (plus
   * its bias) with a softmax over those k alone, instead of a softmax over
   * all experts first; the experts' activation the clamped SwiGLU
   * min(g, limit) * sigmoid(alpha min(g, limit)) * (clamp(u, +-limit) + 1)
   * (swiglu_limit 0: plain SwiGLU) */
  bool moe_softmax_topk;
  float swiglu_alpha, swiglu_limit;
} model_hparams;

/* A weight matrix: n_out rows of n_in elements of `type` (view). */
typedef struct model_weight {
  const void *data;
  uint32_t type;
  int64_t n_in, n_out;
  /* stacked experts: rows from one expert's matrix to the next (0: n_out;
   * 2 n_out for a half of a fused gate+up tensor) */
  int64_t expert_rows;
} model_weight;

typedef struct model model;

typedef struct model_opts {
  int n_threads; /* kernel threads (>= 1); 0 = 2; ignored with pool */
  pw_pool *pool; /* borrowed: run on these threads (e.g. a draft model on its
                  * target's, so idle workers of one never compete with the
                  * other's); must outlive the model. NULL = own pool */
  weights_opts weights; /* read strategy and key (weights.h); its pool is
                         * ignored: the model's pool decrypts. {0} = mmap */
} model_opts;

/* Encoders (bert, nomic-bert) compute embeddings only: no logits, no
 * generation. Their model_forward needs each sequence's whole input in one
 * pass (attention is bidirectional): positions start at 0 and every entry
 * of a sequence is in the batch; hidden gets the last layer's states of
 * the entries with want_logits, without a final norm, and logits must be
 * NULL. */
bool model_is_encoder(const model *m);
/* The metadata's pooling (MEAN when an encoder's file names none; NONE
 * for decoders) and, for RANK, the classification head's outputs (>= 1). */
model_pooling model_get_pooling(const model *m);
int model_n_cls_out(const model *m);

/* Opens and validates a model; owns its weights (weights_open). */
int model_load(const char *path, const model_opts *opts, model **out, char *err);
void model_destroy(model *m);
const model_hparams *model_hp(const model *m);
/* The underlying file (borrowed; lives as long as the model), e.g. for the
 * tokenizer and chat template. */
const gguf_file *model_gguf(const model *m);
/* how the weights are held (gguf_make_resident for mmap, run by
 * model_load) and what their load did */
const gguf_residency *model_residency(const model *m);
const weights_info *model_weights_info(const model *m);
/* The weights the model reads (borrowed; lives as long as the model):
 * budget and streaming figures (weights_get_budget), the file's digest. */
weights *model_weights(const model *m);
pw_pool *model_pool(const model *m);

/* KV cache: n_seq sequences of up to n_ctx positions each, allocated once
 * at creation (bounded; model_kv_bytes tells the size). K and V are each
 * stored as F16 (the default), Q8_0 or Q4_0 (ggml ids, as llama.cpp's
 * --cache-type-k/-v): quantized rows are quantized as they are stored and
 * attention then follows llama.cpp's CPU flash attention for those types
 * (q quantized to Q8_0 for the K dot products, a quantized V accumulated
 * in f32). Quantized types need a head size that is a multiple of 32. */
typedef struct model_kv model_kv;
typedef struct model_kv_opts {
  uint32_t type_k, type_v; /* 0 = F16 (F32 is not a cache type) */
} model_kv_opts;
int model_kv_create(const model *m, int n_seq, int n_ctx, model_kv **out, char *err);
int model_kv_create_ex(const model *m, int n_seq, int n_ctx, const model_kv_opts *o, model_kv **out, char *err);
/* "f16", "q8_0", "q4_0" (any case) -> type id; -1 if unknown */
int model_kv_type_parse(const char *name);
const char *model_kv_type_name(uint32_t type);
uint32_t model_kv_type_k(const model_kv *kv);
uint32_t model_kv_type_v(const model_kv *kv);
/* what the same cache would take in F16 (for the memory a quantized one saves) */
size_t model_kv_bytes_f16(const model_kv *kv);
/* K and V bytes of one position of one sequence, all layers: what a decode
 * step reads per cached position */
size_t model_kv_pos_bytes(const model_kv *kv);
void model_kv_destroy(model_kv *kv);
int model_kv_n_seq(const model_kv *kv);
/* True when the model keeps a recurrent state per sequence beside the KV
 * cache (the DeltaNet layers of qwen35 and qwen35moe). Such a state cannot be truncated: a
 * sequence cut back to a length other than 0 or its own length (by
 * model_kv_truncate or model_kv_copy) has no valid state until it is
 * restored from a snapshot taken at that length or reset to 0, and
 * model_forward refuses to extend it. */
bool model_has_recurrent(const model *m);
int model_kv_n_ctx(const model_kv *kv);
int model_kv_len(const model_kv *kv, int seq);
/* Drops positions >= len (len <= current length). */
void model_kv_truncate(model_kv *kv, int seq, int len);
/* Copies the first len positions of src into dst (dst is replaced). */
void model_kv_copy(model_kv *kv, int dst, int src, int len);
size_t model_kv_bytes(const model_kv *kv);
/* Recurrent-state snapshots (0 bytes for models without one): the state of
 * sequence seq at its current length, written to buf (caller-owned, at
 * least model_kv_state_bytes). Restore puts a snapshot back into seq and
 * cuts its KV length back to the snapshot's length, which must not exceed
 * the current one (PW_EINVAL otherwise): exact rollback. */
size_t model_kv_state_bytes(const model_kv *kv);
/* False when seq's recurrent state does not hold its current length (it
 * was cut back without a snapshot): it must be restored or restarted. */
bool model_kv_seq_exact(const model_kv *kv, int seq);
void model_kv_state_save(const model_kv *kv, int seq, void *buf);
int model_kv_state_restore(model_kv *kv, int seq, const void *buf, char *err);

typedef struct model_entry {
  int32_t seq;
  int32_t pos;
  int32_t token;
  bool want_logits;
} model_entry;

/* Per-caller scratch for batches of up to max_batch entries. Not shared
 * between threads. */
typedef struct model_ctx model_ctx;
int model_ctx_create(const model *m, int max_batch, int max_ctx, model_ctx **out, char *err);
void model_ctx_destroy(model_ctx *c);

/* Runs the batch. logits: [n_want][n_vocab] in entry order for entries with
 * want_logits (may be NULL if none). hidden: optional [n_want][n_embd] final
 * normalised hidden states (for embeddings). On error nothing is written to
 * the KV cache lengths (positions written past the old length are ignored). */
int model_forward(model_ctx *c, model_kv *kv, const model_entry *e, int n, float *logits, float *hidden,
                  char *err);
/* RANK pooling (model_get_pooling): scores[model_n_cls_out] of one pooled
 * state [n_embd] through the classification head, on c's scratch. */
void model_rank_head(model_ctx *c, const float *pooled, float *scores);

/* The final normalised hidden states (output_norm of the last layer's
 * output) of every entry of c's last model_forward, in entry order, into
 * out[n][n_embd]; n = that pass's entry count. Valid until c runs another
 * pass. */
void model_ctx_hidden(model_ctx *c, int n, float *out);

/* ---- multi-token prediction (the MTP block of qwen35/qwen35moe, "nextn") --
 * The block proposes the token after next: for an entry (seq, pos, token)
 * and h, the target's normalised hidden state at pos - 1 (model_ctx_hidden;
 * zeros at pos 0), or the block's own h_out of the previous entry when
 * proposals are chained, it runs eh_proj([enorm(embed(token));
 * hnorm(h)]), one gated full-attention block over its own KV cache, the
 * head norm and the shared output head: logits for the token at pos + 1.
 * Its KV cache (model_mtp_kv_create) holds one attention layer per
 * sequence, with the same position rules as model_forward's. */
bool model_has_mtp(const model *m);
int model_mtp_kv_create(const model *m, int n_seq, int n_ctx, model_kv **out, char *err);
/* h: [n][n_embd] (borrowed); logits: [n_want][n_vocab] for entries with
 * want_logits (may be NULL); h_out: optional [n_want][n_embd], the block's
 * normalised output for the same entries. c comes from model_ctx_create
 * for this model (its scratch covers the block) and must not be the one
 * whose hidden states are still needed. PW_EUNSUPPORTED without a block. */
int model_mtp_forward(model_ctx *c, model_kv *kv, const model_entry *e, int n, const float *h, float *logits,
                      float *h_out, char *err);

#endif
