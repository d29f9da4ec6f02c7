/* arch_llama.c - the llama-family decoder block: RMSNorm, attention with
 * RoPE and grouped KV heads, then RMSNorm and a SwiGLU MLP, each added to
 * the residual stream. Rows of model_archs: `llama`, `qwen2` (QKV biases,
 * NeoX RoPE) and `qwen3` (per-head Q/K RMSNorm, NeoX RoPE).
 *
 * The layer is written over the op interface of model_int.h only; the
 * prefetch hints say which weights come next so the CPU backend can stream
 * them ahead of use (decode reads every weight once per token). */
#include "model/model_int.h"

#include "base/error.h"

#include <math.h>
#include <stdio.h>

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
  be->rope(c, c->q, n, hp->n_head, false);
  be->rope(c, c->k, n, hp->n_head_kv, false);
  be->kv_store(c, kv, e, n, il);
  model_prefetch_weight(c, &L->wo, n);
  be->attention(c, kv, e, n, il, 1.0f / sqrtf((float)hd), 0, NULL);
  be->prefetch_vec(L->ffn_norm, E);
  be->prefetch_weights(c, gu, 2, E, n);
  be->matmul(c, &L->wo, c->att, n, c->xn);
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
  be->add(c, c->x, c->x, c->xn, (int64_t)n * E);
}

#define LLAMA_FAMILY                                                                                           \
  .load_hparams = NULL, .bind_layer = bind_layer, .scratch_size = model_layer_scratch_size, .layer = layer,    \
  .prefetch_layer = model_layer_prefetch

const model_arch_ops model_arch_llama = {"llama", MODEL_ARCH_LLAMA, false, false, false, LLAMA_FAMILY};
const model_arch_ops model_arch_qwen2 = {"qwen2", MODEL_ARCH_QWEN2, true, true, false, LLAMA_FAMILY};
const model_arch_ops model_arch_qwen3 = {"qwen3", MODEL_ARCH_QWEN3, true, false, true, LLAMA_FAMILY};
