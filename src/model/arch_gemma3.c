/* arch_gemma3.c - Gemma 3's and Gemma 2's decoder blocks, as llama.cpp's
 * `gemma3` and `gemma2` graphs compute them: token embeddings scaled by
 * sqrt(n_embd); each layer RMSNorm -> attention with NeoX RoPE and the
 * query scaled before it -> RMSNorm (post) -> residual, then RMSNorm ->
 * GeGLU MLP -> RMSNorm (post) -> residual. Layers are local (a sliding
 * window of n_swa positions, their own RoPE base) except every
 * swa_period-th, which is global (a local layer's KV cache can be a ring of
 * about its window: model_kv_layer). Norm weights already carry Gemma's +1
 * (the converter adds it).
 *
 * The two differ in their hyperparameters and one step: Gemma 3 RMSNorms
 * each query and key head (Q/K norm); Gemma 2 has no Q/K norm but caps its
 * attention scores (cap * tanh(score / cap), default 50) and always its
 * final logits (default 30), alternates local and global layers (period
 * 2) and has a window of 4096 unless the file says otherwise.
 *
 * Not here: Gemma 3n/4 (other blocks), vision. */
#include "model/model_int.h"

#include "base/error.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static bool is_swa(const model_hparams *hp, int il) {
  return hp->n_swa > 0 && (hp->swa_period == 0 || il % hp->swa_period < hp->swa_period - 1);
}

/* gemma_pytorch: 27B scales queries by 1/sqrt(n_embd / n_head), the others
 * by 1/sqrt(head_dim); llama.cpp tells 27B by its layer count (62 for
 * Gemma 3, 46 for Gemma 2) */
static float query_scale(const model_hparams *hp, int n_layer_27b) {
  return hp->n_layer == n_layer_27b ? 1.0f / sqrtf((float)(hp->n_embd / hp->n_head))
                                    : 1.0f / sqrtf((float)hp->head_dim);
}

static int load_hparams(model *m, char *err) {
  model_hparams *hp = &m->hp;
  const gguf_file *f = m->f;
  uint32_t v;
  float x;
  hp->emb_scale = sqrtf((float)hp->n_embd);
  if (gguf_get_u32(f, "gemma3.attention.sliding_window", &v) && v > 0) {
    hp->n_swa = (int32_t)v;
    hp->swa_period = 6;
    if (gguf_get_u32(f, "gemma3.attention.sliding_window_pattern", &v)) hp->swa_period = (int32_t)v;
    hp->rope_base_swa = 10000.0f;
    if (gguf_get_f32(f, "gemma3.rope.freq_base_swa", &x)) hp->rope_base_swa = x;
    if (hp->n_swa > (1 << 24) || hp->swa_period < 0 || hp->swa_period > 1024 || !(hp->rope_base_swa > 0))
      return pw_seterr(err, PW_EFORMAT, "gemma3: invalid sliding window %d, pattern %d or base %g", hp->n_swa,
                       hp->swa_period, (double)hp->rope_base_swa);
  }
  if (gguf_get_f32(f, "gemma3.final_logit_softcapping", &x) && x > 0) hp->logit_softcap = x;
  hp->attn_scale = query_scale(hp, 62);
  if (!hp->rope_neox) return pw_seterr(err, PW_EFORMAT, "gemma3: NeoX RoPE expected");
  return 0;
}

static int load_hparams_gemma2(model *m, char *err) {
  model_hparams *hp = &m->hp;
  const gguf_file *f = m->f;
  uint32_t v;
  float x;
  hp->emb_scale = sqrtf((float)hp->n_embd);
  hp->n_swa = 4096;
  hp->swa_period = 2;
  if (gguf_get_u32(f, "gemma2.attention.sliding_window", &v)) hp->n_swa = (int32_t)v;
  if (gguf_get_u32(f, "gemma2.attention.sliding_window_pattern", &v)) hp->swa_period = (int32_t)v;
  hp->rope_base_swa = hp->rope_base;
  if (gguf_get_f32(f, "gemma2.rope.freq_base_swa", &x)) hp->rope_base_swa = x;
  if (hp->n_swa <= 0 || hp->n_swa > (1 << 24) || hp->swa_period < 0 || hp->swa_period > 1024 ||
      !(hp->rope_base_swa > 0))
    return pw_seterr(err, PW_EFORMAT, "gemma2: invalid sliding window %d, pattern %d or base %g", hp->n_swa,
                     hp->swa_period, (double)hp->rope_base_swa);
  hp->attn_softcap = 50.0f;
  hp->logit_softcap = 30.0f;
  gguf_get_f32(f, "gemma2.attn_logit_softcapping", &hp->attn_softcap);
  gguf_get_f32(f, "gemma2.final_logit_softcapping", &hp->logit_softcap);
  if (!(hp->attn_softcap > 0) || !(hp->logit_softcap > 0) || hp->attn_softcap > 1e6f || hp->logit_softcap > 1e6f)
    return pw_seterr(err, PW_EFORMAT, "gemma2: invalid soft-capping %g (attention) or %g (logits)",
                     (double)hp->attn_softcap, (double)hp->logit_softcap);
  hp->attn_scale = query_scale(hp, 46);
  if (!hp->rope_neox) return pw_seterr(err, PW_EFORMAT, "gemma2: NeoX RoPE expected");
  return 0;
}

static int bind_layer(model *m, int il, char *err) {
  const gguf_file *f = m->f;
  const model_hparams *hp = &m->hp;
  layer_w *L = &m->layers[il];
  L->window = is_swa(hp, il) ? hp->n_swa : 0;
  int64_t e = hp->n_embd, qd = (int64_t)hp->n_head * hp->head_dim, kvd = (int64_t)hp->n_head_kv * hp->head_dim;
  int rc;
  char n[96];
#define NAME(s) (snprintf(n, sizeof n, "blk.%d.%s", il, s), n)
  if ((rc = model_bind_vec(f, NAME("attn_norm.weight"), e, &L->attn_norm, true, err))) return rc;
  if ((rc = model_bind_weight(f, NAME("attn_q.weight"), e, qd, &L->wq, true, err))) return rc;
  if ((rc = model_bind_weight(f, NAME("attn_k.weight"), e, kvd, &L->wk, true, err))) return rc;
  if ((rc = model_bind_weight(f, NAME("attn_v.weight"), e, kvd, &L->wv, true, err))) return rc;
  if ((rc = model_bind_weight(f, NAME("attn_output.weight"), qd, e, &L->wo, true, err))) return rc;
  const bool qk = m->ad->qk_norm; /* gemma3: required; gemma2: none */
  if (qk && (rc = model_bind_vec(f, NAME("attn_q_norm.weight"), hp->head_dim, &L->q_norm, true, err))) return rc;
  if (qk && (rc = model_bind_vec(f, NAME("attn_k_norm.weight"), hp->head_dim, &L->k_norm, true, err))) return rc;
  if ((rc = model_bind_vec(f, NAME("post_attention_norm.weight"), e, &L->attn_post_norm, true, err))) return rc;
  if ((rc = model_bind_vec(f, NAME("ffn_norm.weight"), e, &L->ffn_norm, true, err))) return rc;
  if ((rc = model_bind_weight(f, NAME("ffn_gate.weight"), e, hp->n_ff, &L->w_gate, true, err))) return rc;
  if ((rc = model_bind_weight(f, NAME("ffn_up.weight"), e, hp->n_ff, &L->w_up, true, err))) return rc;
  if ((rc = model_bind_weight(f, NAME("ffn_down.weight"), hp->n_ff, e, &L->w_down, true, err))) return rc;
  if ((rc = model_bind_vec(f, NAME("post_ffw_norm.weight"), e, &L->ffn_post_norm, true, err))) return rc;
#undef NAME
  return 0;
}

static void layer(model_ctx *c, model_kv *kv, const model_entry *e, int n, int il) {
  const model *m = c->m;
  const model_backend *be = m->be;
  const model_hparams *hp = &m->hp;
  const layer_w *L = &m->layers[il];
  const int E = hp->n_embd, hd = hp->head_dim, qd = hp->n_head * hd;
  const bool swa = L->window > 0;
  pw_mm_op qkv[3], gu[2];
  model_qkv_ops(L, c, qkv);
  model_gu_ops(L, c, gu);
  be->rmsnorm(c, c->xn, c->x, L->attn_norm, n, E, hp->rms_eps);
  be->matmul_multi(c, qkv, 3, E, c->xn, n);
  if (L->q_norm) be->rmsnorm(c, c->q, c->q, L->q_norm, n * hp->n_head, hd, hp->rms_eps);
  be->rope(c, c->q, n, hp->n_head, swa);
  if (L->k_norm) be->rmsnorm(c, c->k, c->k, L->k_norm, n * hp->n_head_kv, hd, hp->rms_eps);
  be->rope(c, c->k, n, hp->n_head_kv, swa);
  /* llama.cpp scales Q in f32 and attends with scale 1 (gemma2: the cap
   * applies to these scores) */
  be->scale(c, c->q, c->q, hp->attn_scale, (int64_t)n * qd);
  be->kv_store(c, kv, e, n, il);
  be->attention(c, kv, e, n, il, 1.0f, L->window, NULL);
  be->prefetch_weights(c, gu, 2, E, n);
  be->matmul(c, &L->wo, c->att, n, c->xn);
  be->rmsnorm(c, c->xn, c->xn, L->attn_post_norm, n, E, hp->rms_eps);
  be->add(c, c->x, c->xn, c->x, (int64_t)n * E);
  be->rmsnorm(c, c->xn, c->x, L->ffn_norm, n, E, hp->rms_eps);
  be->matmul_multi(c, gu, 2, E, c->xn, n);
  be->geglu(c, c->gate, c->up, (int64_t)n * hp->n_ff);
  if (il + 1 < hp->n_layer) model_layer_prefetch(c, il + 1, n);
  be->matmul(c, &L->w_down, c->gate, n, c->xn);
  be->rmsnorm(c, c->xn, c->xn, L->ffn_post_norm, n, E, hp->rms_eps);
  be->add(c, c->x, c->xn, c->x, (int64_t)n * E);
}

const model_arch_ops model_arch_gemma3 = {.name = "gemma3",
                                          .arch = MODEL_ARCH_GEMMA3,
                                          .rope_neox = true,
                                          .qk_norm = true,
                                          .load_hparams = load_hparams,
                                          .bind_layer = bind_layer,
                                          .scratch_size = model_layer_scratch_size,
                                          .layer = layer,
                                          .prefetch_layer = model_layer_prefetch};

const model_arch_ops model_arch_gemma2 = {.name = "gemma2",
                                          .arch = MODEL_ARCH_GEMMA2,
                                          .rope_neox = true,
                                          .load_hparams = load_hparams_gemma2,
                                          .bind_layer = bind_layer,
                                          .scratch_size = model_layer_scratch_size,
                                          .layer = layer,
                                          .prefetch_layer = model_layer_prefetch};
