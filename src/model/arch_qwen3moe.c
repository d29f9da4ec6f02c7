/* arch_qwen3moe.c - the Qwen mixture-of-experts decoder blocks, as
 * llama.cpp's `qwen3moe` and `qwen2moe` graphs compute them. qwen3moe: qwen3's attention (per-head Q/K RMSNorm, NeoX RoPE,
 * grouped KV heads), then RMSNorm and a mixture-of-experts MLP in place of
 * the dense one: a softmax router over expert_count experts, the top
 * expert_used_count of them per token with their weights normalised to sum
 * 1 (llama.cpp always normalises for this architecture; a file that says
 * expert_weights_norm = false is honoured) and scaled by
 * expert_weights_scale where present, SwiGLU experts of
 * expert_feed_forward_length stored stacked in ffn_{gate,up,down}_exps.
 *
 * qwen2moe: qwen2's attention (QKV biases, no Q/K norm), the same routed
 * experts without normalised weights (llama.cpp never normalises them for
 * this architecture; a file that says expert_weights_norm = true is
 * honoured), and beside them a shared SwiGLU expert of
 * expert_shared_feed_forward_length whose output is scaled by a sigmoid
 * gate (ffn_gate_inp_shexp).
 *
 * The stacked tensors are bound once, as expert 0's matrix; the backend's
 * moe_ffn op takes the views of the experts the pass needs.
 *
 * The experts' hyperparameters, binding and scratch (model_moe_*) are
 * shared with qwen35moe.
 *
 * Not here: qwen35moe's hybrid layers (arch_qwen35.c). */
#include "model/model_int.h"

#include "base/error.h"
#include "tensor/traits.h"

#include <math.h>
#include <stdio.h>

/* llama.cpp's LLAMA_MAX_EXPERTS, and a bound on the top-k */
#define MOE_MAX_EXPERTS 512
#define MOE_MAX_USED 64

/* The experts' hyperparameters of any of the MoE architectures (their
 * keys under the file's architecture name). Shared with arch_qwen35.c. */
int model_moe_load_hparams(model *m, char *err) {
  model_hparams *hp = &m->hp;
  const gguf_file *f = m->f;
  const char *a = hp->arch_name;
  char key[128];
  uint32_t v;
  snprintf(key, sizeof key, "%s.expert_count", a);
  if (!gguf_get_u32(f, key, &v)) return pw_seterr(err, PW_EFORMAT, "metadata %s is missing", key);
  hp->n_expert = (int32_t)v;
  snprintf(key, sizeof key, "%s.expert_used_count", a);
  if (!gguf_get_u32(f, key, &v)) return pw_seterr(err, PW_EFORMAT, "metadata %s is missing", key);
  hp->n_expert_used = (int32_t)v;
  if (hp->n_expert < 1 || hp->n_expert > MOE_MAX_EXPERTS || hp->n_expert_used < 1 ||
      hp->n_expert_used > hp->n_expert || hp->n_expert_used > MOE_MAX_USED)
    return pw_seterr(err, PW_EFORMAT, "%s: invalid expert counts %d of %d (at most %d of %d)", a, hp->n_expert_used,
                     hp->n_expert, MOE_MAX_USED, MOE_MAX_EXPERTS);
  /* as llama.cpp: without the key, the dense width split over the top-k
   * (qwen35moe files may have no dense width: then the key is needed) */
  hp->n_ff_exp = hp->n_ff / hp->n_expert_used;
  snprintf(key, sizeof key, "%s.expert_feed_forward_length", a);
  if (gguf_get_u32(f, key, &v)) hp->n_ff_exp = (int32_t)v;
  if (hp->n_ff_exp <= 0 || hp->n_ff_exp > (1 << 20))
    return pw_seterr(err, PW_EFORMAT, "%s: invalid or missing expert width %d (%s)", a, hp->n_ff_exp, key);
  /* llama.cpp normalises the top-k weights of qwen3moe and qwen35moe
   * always, of qwen2moe never; a file that says otherwise is honoured */
  hp->expert_norm = hp->arch == MODEL_ARCH_QWEN3MOE || hp->arch == MODEL_ARCH_QWEN35MOE;
  snprintf(key, sizeof key, "%s.expert_weights_norm", a);
  gguf_get_bool(f, key, &hp->expert_norm);
  hp->expert_scale = 0.0f;
  snprintf(key, sizeof key, "%s.expert_weights_scale", a);
  gguf_get_f32(f, key, &hp->expert_scale);
  if (!isfinite(hp->expert_scale) || hp->expert_scale < 0 || hp->expert_scale > 1e6f)
    return pw_seterr(err, PW_EFORMAT, "%s: invalid expert_weights_scale %g", a, (double)hp->expert_scale);
  if (hp->arch == MODEL_ARCH_QWEN2MOE || hp->arch == MODEL_ARCH_QWEN35MOE) {
    hp->n_ff_shexp = hp->n_ff;
    snprintf(key, sizeof key, "%s.expert_shared_feed_forward_length", a);
    if (gguf_get_u32(f, key, &v)) hp->n_ff_shexp = (int32_t)v;
    if (hp->n_ff_shexp <= 0 || hp->n_ff_shexp > (1 << 20))
      return pw_seterr(err, PW_EFORMAT, "%s: invalid or missing shared expert width %d (%s)", a, hp->n_ff_shexp, key);
    hp->shexp_sigmoid = hp->arch == MODEL_ARCH_QWEN35MOE;
  }
  /* a file without a dense width: the scratch sized by n_ff holds an
   * expert's hidden rows */
  if (hp->n_ff == 0) hp->n_ff = hp->n_ff_exp > hp->n_ff_shexp ? hp->n_ff_exp : hp->n_ff_shexp;
  return 0;
}

/* A stacked expert tensor [n_in, n_out, n_expert], bound as expert 0. */
int model_bind_experts(const gguf_file *f, const char *name, int64_t n_in, int64_t n_out, int64_t n_exp,
                       model_weight *w, char *err) {
  const gguf_tensor *t = gguf_find_tensor(f, name);
  if (!t) return pw_seterr(err, PW_EFORMAT, "tensor %s is missing", name);
  const pw_dtype_info *di = pw_dtype_get(t->type);
  if (!di || !di->weight_ok || !pw_traits_get(t->type))
    return pw_seterr(err, PW_EUNSUPPORTED, "tensor %s has unsupported type %s (%u)", name, di ? di->name : "unknown",
                     t->type);
  if (t->n_dims != 3 || (int64_t)t->ne[0] != n_in || (int64_t)t->ne[1] != n_out || (int64_t)t->ne[2] != n_exp)
    return pw_seterr(err, PW_EFORMAT, "tensor %s has shape [%llu, %llu, %llu], expected [%lld, %lld, %lld]", name,
                     (unsigned long long)t->ne[0], (unsigned long long)t->ne[1], (unsigned long long)t->ne[2],
                     (long long)n_in, (long long)n_out, (long long)n_exp);
  *w = (model_weight){t->data, t->type, n_in, n_out, 0};
  return 0;
}

/* Block blk's router, stacked experts and, where hp has one, shared
 * expert with its gate. Shared with arch_qwen35.c. */
int model_moe_bind(model *m, int blk, layer_w *L, char *err) {
  const gguf_file *f = m->f;
  const model_hparams *hp = &m->hp;
  const int64_t e = hp->n_embd, F = hp->n_ff_exp, X = hp->n_expert;
  int rc;
  char n[96];
#define NAME(s) (snprintf(n, sizeof n, "blk.%d.%s", blk, s), n)
  if ((rc = model_bind_weight(f, NAME("ffn_gate_inp.weight"), e, X, &L->ffn_gate_inp, true, err))) return rc;
  if (gguf_find_tensor(f, NAME("ffn_gate_up_exps.weight"))) {
    /* fused (the converter's --fuse-gate-up-exps; llama.cpp takes it over
     * separate tensors): each expert's gate rows, then its up rows */
    model_weight gu;
    if ((rc = model_bind_experts(f, n, e, 2 * F, X, &gu, err))) return rc;
    L->gate_exps = (model_weight){gu.data, gu.type, e, F, 2 * F};
    L->up_exps = L->gate_exps;
    L->up_exps.data = (const char *)gu.data + pw_dtype_row_size(gu.type, (uint64_t)e) * (uint64_t)F;
  } else {
    if ((rc = model_bind_experts(f, NAME("ffn_gate_exps.weight"), e, F, X, &L->gate_exps, err))) return rc;
    if ((rc = model_bind_experts(f, NAME("ffn_up_exps.weight"), e, F, X, &L->up_exps, err))) return rc;
  }
  if ((rc = model_bind_experts(f, NAME("ffn_down_exps.weight"), F, e, X, &L->down_exps, err))) return rc;
  if (hp->n_ff_shexp > 0) {
    const int64_t S = hp->n_ff_shexp;
    /* the gate: [n_embd] or [n_embd, 1], kept F32 by the quantizers */
    if ((rc = model_bind_weight(f, NAME("ffn_gate_inp_shexp.weight"), e, 1, &L->gate_inp_shexp, true, err)) ||
        (rc = model_bind_weight(f, NAME("ffn_gate_shexp.weight"), e, S, &L->gate_shexp, true, err)) ||
        (rc = model_bind_weight(f, NAME("ffn_up_shexp.weight"), e, S, &L->up_shexp, true, err)) ||
        (rc = model_bind_weight(f, NAME("ffn_down_shexp.weight"), S, e, &L->down_shexp, true, err)))
      return rc;
  }
#undef NAME
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
  const bool bias = m->ad->qkv_bias, qk_norm = m->ad->qk_norm;
  if ((rc = model_bind_vec(f, NAME("attn_q.bias"), qd, &L->bq, bias, err)) < 0) return rc;
  if ((rc = model_bind_vec(f, NAME("attn_k.bias"), kvd, &L->bk, bias, err)) < 0) return rc;
  if ((rc = model_bind_vec(f, NAME("attn_v.bias"), kvd, &L->bv, bias, err)) < 0) return rc;
  if ((rc = model_bind_vec(f, NAME("attn_q_norm.weight"), hp->head_dim, &L->q_norm, qk_norm, err)) < 0) return rc;
  if ((rc = model_bind_vec(f, NAME("attn_k_norm.weight"), hp->head_dim, &L->k_norm, qk_norm, err)) < 0) return rc;
  if (!L->q_norm != !L->k_norm) return pw_seterr(err, PW_EFORMAT, "layer %d: attn_q_norm and attn_k_norm come together", il);
  if ((rc = model_bind_vec(f, NAME("ffn_norm.weight"), e, &L->ffn_norm, true, err))) return rc;
  if ((rc = model_moe_bind(m, il, L, err))) return rc;
#undef NAME
  return 0;
}

/* The matmul scratch of an MoE MLP (router, an expert's matmuls for up to
 * all the pass's entries, the shared expert). Shared with arch_qwen35.c. */
size_t model_moe_scratch_size(const model *m, const layer_w *L, int max_batch) {
  const model_hparams *hp = &m->hp;
  const pw_mm_op gu[2] = {{L->gate_exps.type, L->gate_exps.data, hp->n_ff_exp, NULL},
                          {L->up_exps.type, L->up_exps.data, hp->n_ff_exp, NULL}};
  const pw_mm_op sgu[2] = {{L->gate_shexp.type, L->gate_shexp.data, hp->n_ff_shexp, NULL},
                           {L->up_shexp.type, L->up_shexp.data, hp->n_ff_shexp, NULL}};
  const bool sh = L->gate_shexp.data != NULL;
  size_t sz[6] = {sh ? pw_matmul_multi_scratch_size(sgu, 2, hp->n_embd, max_batch) : 0,
                  sh ? pw_matmul_scratch_size(L->down_shexp.type, L->down_shexp.n_in, max_batch) : 0,
                  sh ? pw_matmul_scratch_size(L->gate_inp_shexp.type, hp->n_embd, max_batch) : 0,
                  pw_matmul_multi_scratch_size(gu, 2, hp->n_embd, max_batch),
                  pw_matmul_scratch_size(L->down_exps.type, L->down_exps.n_in, max_batch),
                  pw_matmul_scratch_size(L->ffn_gate_inp.type, L->ffn_gate_inp.n_in, max_batch)};
  size_t mm = 0;
  for (int i = 0; i < 6; i++)
    if (sz[i] > mm) mm = sz[i];
  return mm;
}

/* The matmul scratch: the attention's and the MLP's (the scratch_size of
 * the attention-and-experts layers: qwen3moe, qwen2moe, gpt-oss). */
size_t model_moe_layer_scratch_size(const model *m, int il, int max_batch) {
  const layer_w *L = &m->layers[il];
  const model_hparams *hp = &m->hp;
  pw_mm_op qkv[3];
  model_qkv_ops(L, NULL, qkv);
  size_t sz[3] = {pw_matmul_multi_scratch_size(qkv, 3, hp->n_embd, max_batch),
                  pw_matmul_scratch_size(L->wo.type, L->wo.n_in, max_batch), model_moe_scratch_size(m, L, max_batch)};
  size_t mm = 0;
  for (int i = 0; i < 3; i++)
    if (sz[i] > mm) mm = sz[i];
  return mm;
}

/* c->arch_act: the MLP's output [max_batch][n_embd], then the moe_ffn
 * op's scratch */
size_t model_moe_act_floats(const model *m, int max_batch) {
  return (size_t)max_batch * m->hp.n_embd + model_moe_scratch_floats(&m->hp, max_batch);
}

static void layer(model_ctx *c, model_kv *kv, const model_entry *e, int n, int il) {
  const model *m = c->m;
  const model_backend *be = m->be;
  const model_hparams *hp = &m->hp;
  const layer_w *L = &m->layers[il];
  const int E = hp->n_embd, hd = hp->head_dim, qd = hp->n_head * hd, kvd = hp->n_head_kv * hd;
  float *ffn_out = c->arch_act, *moe_scratch = c->arch_act + (size_t)c->max_batch * E;
  pw_mm_op qkv[3];
  model_qkv_ops(L, c, qkv);
  be->rmsnorm(c, c->xn, c->x, L->attn_norm, n, E, hp->rms_eps);
  be->prefetch_vec(L->q_norm, hd);
  be->prefetch_vec(L->k_norm, hd);
  be->prefetch_vec(L->bq, qd);
  be->prefetch_vec(L->bk, kvd);
  be->prefetch_vec(L->bv, kvd);
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
  model_prefetch_weight(c, &L->ffn_gate_inp, n);
  be->matmul(c, &L->wo, c->att, n, c->xn);
  be->add(c, c->x, c->x, c->xn, (int64_t)n * E);
  be->rmsnorm(c, c->xn, c->x, L->ffn_norm, n, E, hp->rms_eps);
  be->moe_ffn(c, L, c->xn, n, ffn_out, moe_scratch);
  be->prefetch_vec(il + 1 < hp->n_layer ? m->layers[il + 1].attn_norm : m->output_norm, E);
  if (il + 1 < hp->n_layer)
    model_layer_prefetch(c, il + 1, n);
  else
    model_prefetch_weight(c, &m->output, n);
  be->add(c, c->x, c->x, ffn_out, (int64_t)n * E);
}

#define QWEN_MOE                                                                                               \
  .rope_neox = true, .load_hparams = model_moe_load_hparams, .bind_layer = bind_layer, .scratch_size = model_moe_layer_scratch_size, \
  .layer = layer, .prefetch_layer = model_layer_prefetch, .act_floats = model_moe_act_floats

const model_arch_ops model_arch_qwen3moe = {.name = "qwen3moe", .arch = MODEL_ARCH_QWEN3MOE, .qk_norm = true, QWEN_MOE};
const model_arch_ops model_arch_qwen2moe = {.name = "qwen2moe", .arch = MODEL_ARCH_QWEN2MOE, .qkv_bias = true, QWEN_MOE};
