/* arch_llama.c - the llama-family decoder block: RMSNorm, attention with
 * RoPE and grouped KV heads, then RMSNorm and a SwiGLU MLP, each added to
 * the residual stream. Rows of model_archs: `llama`, `qwen2` (QKV biases,
 * NeoX RoPE) and `qwen3` (per-head Q/K RMSNorm, NeoX RoPE), and the same
 * block with the extras of llama.cpp's graphs for:
 *   `smollm3`   every fourth layer without RoPE (llama.cpp fixes the step
 *               at 4 and reads no key for it)
 *   `granite`   embeddings times embedding_scale, attention scores scaled
 *               by attention.scale, each layer's attention and MLP
 *               outputs times residual_scale before their residual adds,
 *               logits divided by logit_scale; no RoPE at all when
 *               rope.scaling.finetuned is false
 *   `mistral3`  YaRN with the file's ramp (yarn_beta_fast/slow) and
 *               magnitude (yarn_log_multiplier), and Llama 4's attention
 *               temperature: each query times 1 + temperature_scale *
 *               ln(floor(pos / original context) + 1) after RoPE
 * A sliding window in a llama or mistral3 file is not applied, as
 * llama.cpp does not apply it (a note says so at load).
 *
 * The layer is written over the op interface of model_int.h only; the
 * prefetch hints say which weights come next so the CPU backend can stream
 * them ahead of use (decode reads every weight once per token). */
#include "model/model_int.h"

#include "base/error.h"
#include "base/log.h"

#include <math.h>
#include <stdio.h>

static void note_window(const model *m) {
  char key[96];
  uint32_t w;
  snprintf(key, sizeof key, "%s.attention.sliding_window", m->hp.arch_name);
  if (gguf_get_u32(m->f, key, &w) && w > 0)
    pw_log(PW_LOG_INFO, "%s: sliding window %u not applied (as llama.cpp)", m->hp.arch_name, w);
}

static int load_hparams_llama(model *m, char *err) {
  (void)err;
  note_window(m);
  return 0;
}

static int load_hparams_smollm3(model *m, char *err) {
  (void)err;
  m->hp.no_rope_step = 4;
  return 0;
}

static int load_hparams_granite(model *m, char *err) {
  model_hparams *hp = &m->hp;
  const gguf_file *f = m->f;
  /* the logit scale is required (as llama.cpp), the others optional */
  if (!gguf_get_f32(f, "granite.logit_scale", &hp->logit_scale))
    return pw_seterr(err, PW_EFORMAT, "metadata granite.logit_scale is missing");
  gguf_get_f32(f, "granite.residual_scale", &hp->residual_scale);
  gguf_get_f32(f, "granite.embedding_scale", &hp->emb_scale);
  gguf_get_f32(f, "granite.attention.scale", &hp->kq_scale);
  const float v[4] = {hp->logit_scale, hp->residual_scale, hp->emb_scale, hp->kq_scale};
  for (int i = 0; i < 4; i++)
    if (!isfinite(v[i]) || fabsf(v[i]) > 1e6f || (i == 0 && v[i] == 0))
      return pw_seterr(err, PW_EFORMAT, "granite: invalid multiplier %g (logit, residual, embedding, attention: %d)",
                       (double)v[i], i);
  bool rope = true;
  gguf_get_bool(f, "granite.rope.scaling.finetuned", &rope);
  hp->no_rope = !rope;
  return 0;
}

static int load_hparams_mistral3(model *m, char *err) {
  model_hparams *hp = &m->hp;
  const gguf_file *f = m->f;
  note_window(m);
  if (gguf_get_f32(f, "mistral3.attention.temperature_scale", &hp->attn_temp) && hp->attn_temp != 0) {
    if (!isfinite(hp->attn_temp) || fabsf(hp->attn_temp) > 1e3f)
      return pw_seterr(err, PW_EFORMAT, "mistral3: invalid attention temperature scale %g", (double)hp->attn_temp);
    /* llama.cpp's floor is the original context of YaRN (the trained
     * context when the file names none) */
    hp->attn_temp_floor = hp->n_ctx_orig;
  }
  if (hp->rope_ext_factor != 0) { /* YaRN again, with this file's ramp and magnitude */
    float beta_fast = 32.0f, beta_slow = 1.0f, log_mul = 0.0f, attn = 1.0f;
    gguf_get_f32(f, "mistral3.rope.scaling.yarn_beta_fast", &beta_fast);
    gguf_get_f32(f, "mistral3.rope.scaling.yarn_beta_slow", &beta_slow);
    gguf_get_f32(f, "mistral3.rope.scaling.yarn_log_multiplier", &log_mul);
    gguf_get_f32(f, "mistral3.rope.scaling.attn_factor", &attn);
    return model_rope_yarn(hp, attn, beta_fast, beta_slow, log_mul, err);
  }
  return 0;
}

static int bind_layer(model *m, int il, char *err) {
  const gguf_file *f = m->f;
  const model_hparams *hp = &m->hp;
  layer_w *L = &m->layers[il];
  int64_t e = hp->n_embd, qd = (int64_t)hp->n_head * hp->head_dim, kvd = (int64_t)hp->n_head_kv * hp->head_dim;
  int rc;
  char n[96];
#define NAME(s) (snprintf(n, sizeof n, "blk.%d.%s", il, s), n)
  if ((rc = model_bind_vec(f, NAME("attn_norm.weight"), e, &L->attn_norm, true, err))) return rc;
  if ((rc = model_bind_weight(f, NAME("attn_q.weight"), e, qd, &L->wq, true, err))) return rc;
  if ((rc = model_bind_weight(f, NAME("attn_k.weight"), e, kvd, &L->wk, true, err))) return rc;
  if ((rc = model_bind_weight(f, NAME("attn_v.weight"), e, kvd, &L->wv, true, err))) return rc;
  if ((rc = model_bind_weight(f, NAME("attn_output.weight"), qd, e, &L->wo, true, err))) return rc;
  bool need_bias = m->ad->qkv_bias;
  if ((rc = model_bind_vec(f, NAME("attn_q.bias"), qd, &L->bq, need_bias, err)) < 0) return rc;
  if ((rc = model_bind_vec(f, NAME("attn_k.bias"), kvd, &L->bk, need_bias, err)) < 0) return rc;
  if ((rc = model_bind_vec(f, NAME("attn_v.bias"), kvd, &L->bv, need_bias, err)) < 0) return rc;
  bool need_norm = m->ad->qk_norm;
  if ((rc = model_bind_vec(f, NAME("attn_q_norm.weight"), hp->head_dim, &L->q_norm, need_norm, err)) < 0) return rc;
  if ((rc = model_bind_vec(f, NAME("attn_k_norm.weight"), hp->head_dim, &L->k_norm, need_norm, err)) < 0) return rc;
  if ((rc = model_bind_vec(f, NAME("ffn_norm.weight"), e, &L->ffn_norm, true, err))) return rc;
  if ((rc = model_bind_weight(f, NAME("ffn_gate.weight"), e, hp->n_ff, &L->w_gate, true, err))) return rc;
  if ((rc = model_bind_weight(f, NAME("ffn_up.weight"), e, hp->n_ff, &L->w_up, true, err))) return rc;
  if ((rc = model_bind_weight(f, NAME("ffn_down.weight"), hp->n_ff, e, &L->w_down, true, err))) return rc;
  if (hp->arch == MODEL_ARCH_GRANITE || hp->arch == MODEL_ARCH_MISTRAL3) {
    /* their graphs take an output bias; MLP biases they allow are not
     * computed here: refused rather than ignored */
    if ((rc = model_bind_vec(f, NAME("attn_output.bias"), e, &L->bo, false, err)) < 0) return rc;
    static const char *const k_ffn_bias[] = {"ffn_gate.bias", "ffn_up.bias", "ffn_down.bias"};
    for (int i = 0; i < 3; i++)
      if (gguf_find_tensor(f, NAME(k_ffn_bias[i])))
        return pw_seterr(err, PW_EUNSUPPORTED, "%s: MLP biases (%s) are not supported", hp->arch_name, n);
  }
#undef NAME
  return 0;
}

static void layer(model_ctx *c, model_kv *kv, const model_entry *e, int n, int il) {
  const model *m = c->m;
  const model_backend *be = m->be;
  const model_hparams *hp = &m->hp;
  const layer_w *L = &m->layers[il];
  const int E = hp->n_embd, hd = hp->head_dim, qd = hp->n_head * hd, kvd = hp->n_head_kv * hd;
  be->rmsnorm(c, c->xn, c->x, L->attn_norm, n, E, hp->rms_eps);
  pw_mm_op qkv[3], gu[2];
  model_qkv_ops(L, c, qkv);
  model_gu_ops(L, c, gu);
  be->prefetch_vec(L->bq, qd);
  be->prefetch_vec(L->bk, kvd);
  be->prefetch_vec(L->bv, kvd);
  be->prefetch_vec(L->q_norm, hd);
  be->prefetch_vec(L->k_norm, hd);
  model_prefetch_weight(c, &L->wo, n);
  be->matmul_multi(c, qkv, 3, E, c->xn, n);
  be->add_rows(c, c->q, L->bq, n, qd);
  be->add_rows(c, c->k, L->bk, n, kvd);
  be->add_rows(c, c->v, L->bv, n, kvd);
  if (L->q_norm) {
    be->rmsnorm(c, c->q, c->q, L->q_norm, n * hp->n_head, hd, hp->rms_eps);
    be->rmsnorm(c, c->k, c->k, L->k_norm, n * hp->n_head_kv, hd, hp->rms_eps);
  }
  if (!hp->no_rope && !(hp->no_rope_step > 0 && (il + 1) % hp->no_rope_step == 0)) {
    be->rope(c, c->q, n, hp->n_head, false);
    be->rope(c, c->k, n, hp->n_head_kv, false);
  }
  if (hp->attn_temp != 0) /* mistral3: each entry's queries by its position's temperature */
    for (int t = 0; t < n; t++) {
      const float pos = (float)e[t].pos;
      const float ts =
          (float)(log((double)floorf(pos / (float)hp->attn_temp_floor) + 1.0) * (double)hp->attn_temp + 1.0);
      be->scale(c, c->q + (size_t)t * qd, c->q + (size_t)t * qd, ts, qd);
    }
  be->kv_store(c, kv, e, n, il);
  model_prefetch_weight(c, &L->wo, n);
  be->attention(c, kv, e, n, il, hp->kq_scale != 0 ? hp->kq_scale : 1.0f / sqrtf((float)hd), 0, NULL);
  be->prefetch_vec(L->ffn_norm, E);
  be->prefetch_weights(c, gu, 2, E, n);
  be->matmul(c, &L->wo, c->att, n, c->xn);
  be->add_rows(c, c->xn, L->bo, n, E);
  if (hp->residual_scale != 0) be->scale(c, c->xn, c->xn, hp->residual_scale, (int64_t)n * E);
  be->add(c, c->x, c->x, c->xn, (int64_t)n * E);
  be->rmsnorm(c, c->xn, c->x, L->ffn_norm, n, E, hp->rms_eps);
  model_prefetch_weight(c, &L->w_down, n);
  be->matmul_multi(c, gu, 2, E, c->xn, n);
  be->swiglu(c, c->gate, c->up, (int64_t)n * hp->n_ff);
  /* the norm after this layer: partly still in cache after the down
   * matmul (1.7 -> 1.2 us a layer for the norm step, 0.5B shape) */
  be->prefetch_vec(il + 1 < hp->n_layer ? m->layers[il + 1].attn_norm : m->output_norm, E);
  if (il + 1 < hp->n_layer)
    model_layer_prefetch(c, il + 1, n);
  else
    model_prefetch_weight(c, &m->output, n);
  be->matmul(c, &L->w_down, c->gate, n, c->xn);
  if (hp->residual_scale != 0) be->scale(c, c->xn, c->xn, hp->residual_scale, (int64_t)n * E);
  be->add(c, c->x, c->x, c->xn, (int64_t)n * E);
}

#define LLAMA_FAMILY(hparams)                                                                                  \
  .load_hparams = hparams, .bind_layer = bind_layer, .scratch_size = model_layer_scratch_size, .layer = layer, \
  .prefetch_layer = model_layer_prefetch

const model_arch_ops model_arch_llama = {
    "llama", MODEL_ARCH_LLAMA, false, false, false, LLAMA_FAMILY(load_hparams_llama)};
const model_arch_ops model_arch_qwen2 = {"qwen2", MODEL_ARCH_QWEN2, true, true, false, LLAMA_FAMILY(NULL)};
const model_arch_ops model_arch_qwen3 = {"qwen3", MODEL_ARCH_QWEN3, true, false, true, LLAMA_FAMILY(NULL)};
const model_arch_ops model_arch_smollm3 = {
    "smollm3", MODEL_ARCH_SMOLLM3, false, false, false, LLAMA_FAMILY(load_hparams_smollm3)};
const model_arch_ops model_arch_granite = {
    "granite", MODEL_ARCH_GRANITE, false, false, false, LLAMA_FAMILY(load_hparams_granite)};
const model_arch_ops model_arch_mistral3 = {
    "mistral3", MODEL_ARCH_MISTRAL3, false, false, false, LLAMA_FAMILY(load_hparams_mistral3)};
