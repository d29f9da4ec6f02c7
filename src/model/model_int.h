/* model_int.h - what the model's files share: the structs, the table of
 * architectures and the op interface their layers are composed from. Not
 * part of the API (model.h is).
 *
 * The model's files:
 *   model.c        loading (hyperparameters, output and embedding
 *                  weights), the KV cache, batch scratch and the forward
 *                  pass's frame: embed, run each layer, norm, logits
 *   arch_llama.c   the llama-family block (llama, qwen2, qwen3, and with
 *                  their extras smollm3, granite, mistral3): its weights
 *                  and its layer function
 *   arch_gemma3.c  Gemma 3's and Gemma 2's blocks
 *   arch_phi3.c    Phi-3's block (fused QKV and gate/up, LongRoPE)
 *   arch_qwen35.c  Qwen3.5's hybrid block: gated DeltaNet layers with a
 *                  recurrent state, and gated full-attention layers; with
 *                  a dense MLP (qwen35) or arch_qwen3moe.c's routed and
 *                  shared experts (qwen35moe)
 *   arch_bert.c    the BERT-family encoders (bert, nomic-bert): post-norm
 *                  blocks with bidirectional attention, pooling heads
 *   arch_qwen3moe.c  Qwen3-MoE's and Qwen2-MoE's blocks: their attention,
 *                  then a routed mixture-of-experts MLP (the moe_ffn op)
 *   arch_gptoss.c  gpt-oss's block: biased attention with sinks, sliding
 *                  windows on alternate layers, biased experts
 *   backend_cpu.c  the op interface on the CPU kernels of tensor/
 *   backend_cpu_dnet.c  the CPU's DeltaNet recurrence (conv1d + gated
 *                  delta rule over the per-sequence state)
 *   backend_cpu_moe.c  the CPU's mixture-of-experts MLP (router, top-k,
 *                  the tokens of a pass gathered by expert)
 *
 * A new architecture is one arch_*.c file (its hyperparameters, weight
 * binding and layer function, written over model_backend's ops) and a row
 * of model_archs; a second backend is one file implementing model_backend.
 */
#ifndef PW_MODEL_MODEL_INT_H
#define PW_MODEL_MODEL_INT_H

#include "model/model.h"

#include "tensor/dtype.h"
#include "tensor/matmul.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct model_arch_ops model_arch_ops;
typedef struct model_backend model_backend;

typedef struct layer_w {
  const float *attn_norm; /* [n_embd] */
  model_weight wq, wk, wv, wo;
  const float *bq, *bk, *bv; /* biases or NULL */
  const float *q_norm, *k_norm; /* [head_dim] or NULL */
  const float *ffn_norm;
  model_weight w_gate, w_up, w_down;
  const float *attn_post_norm, *ffn_post_norm; /* [n_embd], gemma's sandwich norms, or NULL */
  /* Where the layer's per-sequence memory lives: its slot among the KV
   * cache's layers, or among the recurrent-state layers (-1: none). */
  int kv_slot, rs_slot;
  /* Gated DeltaNet (rs_slot >= 0): in_qkv [n_embd -> conv_dim], in_z
   * [n_embd -> d_inner], in_beta / in_alpha [n_embd -> n_v_heads],
   * ssm_out [d_inner -> n_embd] */
  model_weight in_qkv, in_z, in_beta, in_alpha, ssm_out;
  const float *conv1d;   /* [conv_dim][d_conv] F32 */
  const float *ssm_dt;   /* [n_v_heads] bias added to alpha */
  const float *ssm_a;    /* [n_v_heads] -exp(A_log) */
  const float *ssm_norm; /* [d_state] */
  /* Encoders (arch_bert.c): fused QKV [n_embd -> 3 n_embd] (nomic-bert) or
   * NULL data; biases of the output and MLP projections (or NULL); the
   * post-attention and output LayerNorms (weight and bias, [n_embd]) */
  model_weight wqkv;
  const float *bo, *b_up, *b_down;
  const float *attn_out_norm, *attn_out_norm_b, *out_norm, *out_norm_b;
  /* jina-bert-v2 extras, NULL where absent: LayerNorms of Q and K over the
   * whole row ([n_embd], weight and bias) and a second post-attention
   * LayerNorm after the residual is added again */
  const float *q_ln, *q_ln_b, *k_ln, *k_ln_b, *attn_norm2, *attn_norm2_b;
  /* Mixture of experts (hp.n_expert > 0): the router [n_embd -> n_expert]
   * and the stacked experts, each bound as expert 0's matrix (gate/up
   * [n_embd -> n_ff_exp], down [n_ff_exp -> n_embd]); expert e's rows
   * start e * n_out rows further in the same tensor (model_expert), or
   * e * 2 n_ff_exp rows when gate and up are halves of one fused tensor
   * (ffn_gate_up_exps: an expert's gate rows, then its up rows). */
  model_weight ffn_gate_inp, gate_exps, up_exps, down_exps;
  /* the shared expert, every token's (qwen2moe; data NULL: none):
   * [n_embd -> n_ff_shexp] SwiGLU, its output scaled by
   * sigmoid(x . gate_inp_shexp), gate_inp_shexp [n_embd -> 1] F32 */
  model_weight gate_shexp, up_shexp, down_shexp, gate_inp_shexp;
  /* gpt-oss: the attention sinks [n_head] (a logit per query head that
   * joins the softmax with a zero value), the router's bias [n_expert], the
   * experts' biases [n_expert][n_ff_exp] (gate, up) and [n_expert][n_embd]
   * (down); NULL where absent */
  const float *attn_sinks, *b_gate_inp, *b_gate_exps, *b_up_exps, *b_down_exps;
} layer_w;

/* Expert e of a stacked expert tensor bound as expert 0 (a view). */
static inline model_weight model_expert(const model_weight *w, int e) {
  model_weight v = *w;
  const uint64_t rows = (uint64_t)(w->expert_rows ? w->expert_rows : w->n_out);
  v.data = (const char *)w->data + pw_dtype_row_size(w->type, (uint64_t)w->n_in) * rows * (uint64_t)e;
  return v;
}

/* The MTP block (qwen35 nextn): a full-attention decoder block fed with
 * the last hidden state and the next token's embedding. Loaded when the
 * file has one; NULL members otherwise. */
typedef struct mtp_w {
  layer_w blk;                    /* attention + FFN, as a full-attention layer */
  model_weight eh_proj;           /* [2 n_embd -> n_embd] */
  const float *enorm, *hnorm;     /* [n_embd] */
  const float *head_norm;         /* [n_embd] or NULL (output_norm) */
  model_weight embed, head;       /* data NULL: the model's own */
} mtp_w;

struct model {
  gguf_file *f;          /* weights_gguf(w): owned by w */
  weights *w;            /* where the weight bytes come from (owned) */
  model_hparams hp;
  const model_arch_ops *ad; /* the architecture's row of model_archs */
  const model_backend *be;  /* the ops its layers run on */
  model_weight tok_embd; /* n_vocab rows of n_embd */
  model_weight output;   /* n_vocab rows of n_embd (tied: = tok_embd) */
  const float *output_norm;
  const float *rope_freqs; /* [head_dim/2] or NULL */
  const float *rope_long, *rope_short; /* [head_dim/2] LongRoPE factors (phi3), or NULL */
  layer_w *layers;
  int n_kv_layers;       /* layers with a KV cache slot */
  int n_rs_layers;       /* layers with a recurrent state */
  uint8_t *layer_recurrent; /* [n_layer] qwen35's layer kinds (owned), or NULL */
  bool has_mtp;
  mtp_w mtp;
  pw_pool *pool;
  bool pool_borrowed;    /* opts->pool: not ours to destroy */
  unsigned mm_hints;     /* PW_MM_RESIDENT for files that fit in cache */
  gguf_residency res;    /* how the weights are held (weights_residency) */
  /* Encoders (arch_bert.c; NULL/0 otherwise): the token-type row 0 and the
   * absolute positions added to the token embeddings, the LayerNorm after
   * them, the classification head of rerankers (cls: [n_embd -> n_embd], or [n_embd -> 1] in jina-bert-v2,
   * tanh, cls_out: [n_embd -> n_cls_out]), the pooling of the metadata. */
  model_weight type_embd;   /* token_types rows of n_embd (row 0 is used), or data NULL */
  model_weight pos_embd;    /* n_ctx_train rows of n_embd, or data NULL */
  const float *tok_norm, *tok_norm_b;
  model_weight cls, cls_out;
  const float *cls_b, *cls_out_b;
  int n_cls_out;
  model_pooling pooling;
  bool enc_causal;          /* {arch}.attention.causal: a causal mask after all */
};

struct model_kv {
  int n_layer, n_seq, n_ctx, n_head_kv, head_dim;
  /* [n_layer][n_seq][n_head_kv][n_ctx] rows of head_dim values in
   * type_k / type_v (F16, Q8_0, Q4_0), row_k / row_v bytes each: each KV
   * head's rows are contiguous, one stream for the thread that attends
   * over them */
  uint8_t *k, *v;
  uint32_t type_k, type_v;
  size_t row_k, row_v;
  int *len;        /* [n_seq] */
  /* Recurrent state (n_rs_layer > 0): per layer and sequence, the conv
   * window [conv_dim][d_conv - 1] and the delta-rule state of each value
   * head in blocks of MODEL_DNET_BLOCK positions (backend_cpu_dnet.c):
   * the state S at the start of the current block [d_state][d_state] (row
   * j of the matrix is column j of S: the readout streams whole rows),
   * then the block's keys [BLOCK][d_state], deltas [BLOCK][d_state] and
   * cumulative log decays [BLOCK] so far (model_kv_ssm_head floats). */
  int n_rs_layer, conv_dim, conv_w, n_v_heads, d_state;
  float *conv, *ssm;
  int *rs_len;     /* [n_seq] positions the state reflects; -1 = invalid */
};

static inline float *model_kv_conv(const model_kv *kv, int rl, int seq) {
  return kv->conv + ((size_t)rl * kv->n_seq + seq) * kv->conv_dim * kv->conv_w;
}
/* Positions per block of the chunked delta rule: the state matrix changes
 * once per block (a rank-BLOCK update), and each position's output is
 * computed from the block's starting state and the block's earlier
 * positions, the same way whatever the passes the positions came in. */
#define MODEL_DNET_BLOCK 32
static inline size_t model_kv_ssm_head(const model_kv *kv) {
  return (size_t)kv->d_state * kv->d_state + (size_t)MODEL_DNET_BLOCK * (2 * (size_t)kv->d_state + 1);
}
static inline float *model_kv_ssm(const model_kv *kv, int rl, int seq) {
  return kv->ssm + ((size_t)rl * kv->n_seq + seq) * kv->n_v_heads * model_kv_ssm_head(kv);
}

struct model_ctx {
  const model *m;
  int max_batch, max_ctx;
  float *x, *xn, *q, *k, *v, *att, *gate, *up; /* [max_batch][...] */
  float *rows;          /* [max_batch][n_embd] gathered rows for logits */
  float *rope_cos, *rope_sin; /* [max_batch][head_dim/2] */
  float *rope_cos_swa, *rope_sin_swa; /* the same with the local layers' base, or NULL */
  int *att_groups;      /* [max_batch] first entry of each attention group */
  int n_att_groups;     /* groups of the current pass */
  /* Split attention (backend_cpu.c), allocated when max_ctx exceeds one
   * span: per wave, span states of att_part_rows rows (head_dim floats in
   * att_part, max and sum in att_part_ms), and the running max and sum of
   * each (entry, query head) in att_rms [max_batch][n_head][2]. */
  float *att_part, *att_part_ms, *att_rms;
  size_t att_part_rows;
  float *arch_act;      /* the architecture's own activations (act_floats) */
  void *mm_scratch;
};

/* What the DeltaNet op reads for one layer (all [n][...] rows in entry
 * order): the projected qkv (conv input, conv_dim wide), the raw beta and
 * alpha gates (n_v_heads wide); it writes out [n][d_inner]. conv_out is
 * scratch of [n][conv_dim]. */
typedef struct model_dnet_args {
  const layer_w *L;
  int rs_slot;
  float *qkv, *conv_out, *beta, *alpha, *out;
} model_dnet_args;

/* ---- the op interface ------------------------------------------------------
 * What a layer function may do; one implementation per backend. Buffers are
 * the context's activations ([n][dim] rows, entry order). Every op gives the
 * same bits whatever the batch's other entries and the thread count. */
struct model_backend {
  const char *name;
  /* Once per forward pass, before the layers: per-entry tables (RoPE
   * angles) and the attention work split for this batch. */
  void (*begin)(model_ctx *c, const model_entry *e, int n);
  /* ops[i].out[n][ops[i].n_out] = x[n][n_in] W_i^T, x quantized once. */
  void (*matmul_multi)(model_ctx *c, const pw_mm_op *ops, int n_ops, int64_t n_in, const float *x, int n);
  /* y[n][w->n_out] = x[n][w->n_in] W^T */
  void (*matmul)(model_ctx *c, const model_weight *w, const float *x, int n, float *y);
  /* rows of dim: y = x / sqrt(mean(x^2) + eps) * w (y may be x) */
  void (*rmsnorm)(model_ctx *c, float *y, const float *x, const float *w, int rows, int dim, float eps);
  /* rows of dim: y += b (b may be NULL: nothing to add) */
  void (*add_rows)(model_ctx *c, float *y, const float *b, int rows, int dim);
  /* y = a + b over n elements */
  void (*add)(model_ctx *c, float *y, const float *a, const float *b, int64_t n);
  /* RoPE in place on [n][n_heads][head_dim] with begin's angles (swa: the
   * local layers' base) */
  void (*rope)(model_ctx *c, float *v, int n, int n_heads, bool swa);
  /* c->k and c->v of the entries into layer `layer` of the cache */
  void (*kv_store)(model_ctx *c, model_kv *kv, const model_entry *e, int n, int layer);
  /* c->att = softmax(scale q K^T) V per query head, each entry over its
   * sequence up to and including its position, and over at most the last
   * window positions when window > 0; sinks (NULL: none): per query head a
   * logit that joins the softmax's denominator with no value; each score
   * capped as cap * tanh(score / cap) where hp.attn_softcap > 0 */
  void (*attention)(model_ctx *c, model_kv *kv, const model_entry *e, int n, int layer, float scale, int window,
                    const float *sinks);
  /* g = silu(g) * u over n elements */
  void (*swiglu)(model_ctx *c, float *g, const float *u, int64_t n);
  /* g = gelu(g) * u over n elements (tanh form, as ggml's table) */
  void (*geglu)(model_ctx *c, float *g, const float *u, int64_t n);
  /* rows of dim: y = LayerNorm(x) * w + b (b may be NULL; y may be x) */
  void (*layernorm)(model_ctx *c, float *y, const float *x, const float *w, const float *b, int rows, int dim,
                    float eps);
  /* y = gelu(x) over n elements (as ggml's table) */
  void (*gelu)(model_ctx *c, float *y, const float *x, int64_t n);
  /* y = x * s over n elements */
  void (*scale)(model_ctx *c, float *y, const float *x, float s, int64_t n);
  /* y *= sigmoid(g) over n elements */
  void (*mul_sigmoid)(model_ctx *c, float *y, const float *g, int64_t n);
  /* The gated DeltaNet core of a layer over the pass: causal conv1d with
   * each sequence's rolling window, SiLU, L2-normed q and k, the gated
   * delta-rule update of each sequence's state, entry by entry in order,
   * and the readout (kv's recurrent state is updated in place). */
  void (*delta_net)(model_ctx *c, model_kv *kv, const model_entry *e, int n, const model_dnet_args *a);
  /* The mixture-of-experts MLP of layer L over the pass: y[n][n_embd] =
   * sum over each entry's top-k experts (router softmax, top-k, weights
   * normalised and scaled as hp says) of weight * down(silu(gate x) * up
   * x), plus the shared expert's output times its sigmoid gate where L has
   * one; with hp->moe_softmax_topk (gpt-oss) the biased router's top-k
   * and a softmax over them, biased experts and the clamped SwiGLU of
   * hp->swiglu_*; x = [n][n_embd] (y may not alias x). scratch:
   * model_moe_scratch_floats floats. */
  void (*moe_ffn)(model_ctx *c, const layer_w *L, const float *x, int n, float *y, float *scratch);
  /* Hints, no-ops where meaningless: the weights of the next matmul of a
   * pass of n entries, and a small vector needed soon. */
  void (*prefetch_weights)(model_ctx *c, const pw_mm_op *ops, int n_ops, int64_t n_in, int n);
  void (*prefetch_vec)(const float *v, int n);
};

extern const model_backend model_backend_cpu;

/* ---- architectures ---------------------------------------------------------- */
struct model_arch_ops {
  const char *name; /* general.architecture */
  model_arch arch;
  bool rope_neox;   /* rotate halves instead of adjacent pairs */
  bool qkv_bias;    /* attn_{q,k,v}.bias present (required) */
  bool qk_norm;     /* per-head attn_{q,k}_norm (required) */
  /* Reads the architecture's own hyperparameters after the common ones
   * (may be NULL). */
  int (*load_hparams)(model *m, char *err);
  /* Binds layer il's weights into m->layers[il]. */
  int (*bind_layer)(model *m, int il, char *err);
  /* Encoders: after the token rows are gathered into c->x and before the
   * layers (type and position embeddings, their norm); may refuse the
   * batch (e.g. a position past the model's). NULL: nothing. */
  int (*embed)(model_ctx *c, const model_entry *e, int n, char *err);
  /* An encoder: bidirectional attention over each sequence's entries of the
   * pass, no output norm or logits (model_forward gives the last layer's
   * hidden states). */
  bool encoder;
  /* Bytes of matmul scratch layer il needs for a pass of max_batch. */
  size_t (*scratch_size)(const model *m, int il, int max_batch);
  /* Runs layer il over the pass: c->x in, c->x out. */
  void (*layer)(model_ctx *c, model_kv *kv, const model_entry *e, int n, int il);
  /* Hints the weights layer il reads first (the next pass's start). */
  void (*prefetch_layer)(model_ctx *c, int il, int n);
  /* Floats of c->arch_act a pass of max_batch needs (may be NULL: none). */
  size_t (*act_floats)(const model *m, int max_batch);
  bool partial_rope; /* rope.dimension_count may be below the head size */
  /* feed_forward_length may be absent (qwen35moe: the experts' widths
   * describe the MLP); load_hparams then sets n_ff */
  bool ff_optional;
};

/* NULL-terminated rows (model.c). */
extern const model_arch_ops *const model_archs[];
extern const model_arch_ops model_arch_llama, model_arch_qwen2, model_arch_qwen3, model_arch_gemma3, model_arch_phi3,
    model_arch_qwen35, model_arch_bert, model_arch_nomic_bert, model_arch_qwen3moe, model_arch_qwen2moe,
    model_arch_gemma2, model_arch_smollm3, model_arch_granite, model_arch_mistral3, model_arch_qwen35moe,
    model_arch_gptoss, model_arch_jina_bert_v2;

/* model.c: binding helpers for the architectures' files */
int model_bind_weight(const gguf_file *f, const char *name, int64_t n_in, int64_t n_out, model_weight *w,
                      bool required, char *err);
int model_bind_vec(const gguf_file *f, const char *name, int64_t n, const float **out, bool required, char *err);
/* arch_qwen3moe.c, shared with the other MoE blocks (qwen35moe, gpt-oss):
 * the expert counts and widths ({arch}.expert_*; sets n_ff when it is 0);
 * a stacked expert tensor [n_in, n_out, n_exp] bound as expert 0; block
 * blk's router, experts and shared expert; the matmul scratch of the MoE
 * MLP alone and of an attention + MoE layer; c->arch_act's floats (the
 * MLP's output, then the moe_ffn op's scratch) */
int model_moe_load_hparams(model *m, char *err);
int model_bind_experts(const gguf_file *f, const char *name, int64_t n_in, int64_t n_out, int64_t n_exp,
                       model_weight *w, char *err);
int model_moe_bind(model *m, int blk, layer_w *L, char *err);
size_t model_moe_scratch_size(const model *m, const layer_w *L, int max_batch);
size_t model_moe_layer_scratch_size(const model *m, int il, int max_batch);
size_t model_moe_act_floats(const model *m, int max_batch);
/* model.c: YaRN's angle parameters in hp from its scaling factor
 * (1/rope_scale), original context (n_ctx_orig) and base, the file's
 * attention factor attn, the ramp's beta_fast and beta_slow (llama.cpp's
 * defaults 32 and 1) and log_mul (rope.scaling.yarn_log_multiplier, 0 =
 * none), as llama.cpp derives them. */
int model_rope_yarn(model_hparams *hp, float attn, float beta_fast, float beta_slow, float log_mul, char *err);
/* arch_qwen35.c: matmul scratch of an MTP pass of max_batch entries */
size_t model_mtp_scratch_size(const model *m, int max_batch);
/* the CPU's delta_net op (backend_cpu_dnet.c) */
void model_cpu_delta_net(model_ctx *c, model_kv *kv, const model_entry *e, int n, const model_dnet_args *a);
/* the CPU's moe_ffn op (backend_cpu_moe.c), and the floats of scratch it
 * needs for a pass of max_batch entries */
void model_cpu_moe_ffn(model_ctx *c, const layer_w *L, const float *x, int n, float *y, float *scratch);
size_t model_moe_scratch_floats(const model_hparams *hp, int max_batch);
/* row of (KV layer slot, seq, KV head, position) in the cache, and where
 * its K and V bytes are */
static inline size_t model_kv_row(const model_kv *kv, int layer, int seq, int head, int pos) {
  return (((size_t)layer * kv->n_seq + seq) * kv->n_head_kv + head) * kv->n_ctx + pos;
}
static inline uint8_t *model_kv_k(const model_kv *kv, int layer, int seq, int head, int pos) {
  return kv->k + model_kv_row(kv, layer, seq, head, pos) * kv->row_k;
}
static inline uint8_t *model_kv_v(const model_kv *kv, int layer, int seq, int head, int pos) {
  return kv->v + model_kv_row(kv, layer, seq, head, pos) * kv->row_v;
}

/* ---- what the architectures' blocks share (arch_common.c) -------------------
 * The q/k/v and gate/up matmuls of a layer as ops (out pointers into c's
 * activations; c NULL for sizing and prefetch), the matmul scratch a layer
 * of this shape needs, and the hint for the weights a layer reads first. */
void model_qkv_ops(const layer_w *L, model_ctx *c, pw_mm_op o[3]);
void model_gu_ops(const layer_w *L, model_ctx *c, pw_mm_op o[2]);
size_t model_layer_scratch_size(const model *m, int il, int max_batch);
void model_layer_prefetch(model_ctx *c, int il, int n);
/* Prefetches one weight for a pass of n entries. */
void model_prefetch_weight(model_ctx *c, const model_weight *w, int n);

#endif
