/* arch_gptoss.c - gpt-oss's decoder block, as llama.cpp's `gpt-oss` graph
 * (its openai-moe model) computes it: RMSNorm -> attention -> residual,
 * then RMSNorm (post_attention_norm) -> mixture of experts -> residual.
 *
 * Attention: Q/K/V projections with biases (optional, as llama.cpp binds
 * them), NeoX RoPE with the file's scaling (YaRN for the published
 * models) on every layer, grouped KV heads, scores scaled by
 * 1/sqrt(head_dim), and a learned sink per query head (attn_sinks, a logit
 * that joins the softmax's denominator with no value), the output
 * projection with its bias. Layers alternate between a sliding window of
 * attention.sliding_window positions and full attention: with the period
 * p of attention.sliding_window_pattern (2 when absent), layer il is local
 * when il % p < p - 1 (the first of each pair); local layers use the same
 * RoPE as the full ones (llama.cpp's default for this architecture).
 *
 * Experts (the moe_ffn op with hp->moe_softmax_topk): the router's logits
 * plus its bias, the top expert_used_count of them with a softmax over
 * those alone (never normalised again, as llama.cpp), experts with biases
 * on gate, up and down, the clamped SwiGLU of ggml's swiglu_oai (alpha
 * 1.702, limit 7, +1 on the up branch). Expert weights are any weight
 * type, MXFP4 in the published files.
 *
 * Not here: the harmony chat format (the file's template renders it,
 * chat/toolcall.c parses channels and tool calls out of the output). A local
 * layer's KV cache is a ring of about its window when the cache bounds a
 * pass (model_kv_layer in model_int.h), as gemma3's and gemma2's. */
#include "model/model_int.h"

#include "base/error.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* ggml's swiglu_oai parameters as llama.cpp's graph fixes them */
#define GPTOSS_SWIGLU_ALPHA 1.702f
#define GPTOSS_SWIGLU_LIMIT 7.0f

static bool is_swa(const model_hparams *hp, int il) {
  return hp->n_swa > 0 && (hp->swa_period == 0 || il % hp->swa_period < hp->swa_period - 1);
}

static int load_hparams(model *m, char *err) {
  model_hparams *hp = &m->hp;
  const gguf_file *f = m->f;
  int rc;
  if ((rc = model_moe_load_hparams(m, err))) return rc;
  /* llama.cpp's graph never renormalises the top-k weights here */
  hp->expert_norm = false;
  hp->moe_softmax_topk = true;
  hp->swiglu_alpha = GPTOSS_SWIGLU_ALPHA;
  hp->swiglu_limit = GPTOSS_SWIGLU_LIMIT;
  uint32_t v;
  if (!gguf_get_u32(f, "gpt-oss.attention.sliding_window", &v))
    return pw_seterr(err, PW_EFORMAT, "metadata gpt-oss.attention.sliding_window is missing");
  if (v == 0 || v > (1u << 24)) return pw_seterr(err, PW_EFORMAT, "gpt-oss: invalid sliding window %u", v);
  hp->n_swa = (int32_t)v;
  hp->swa_period = 2;
  if (gguf_get_u32(f, "gpt-oss.attention.sliding_window_pattern", &v)) {
    if (v > 1024) return pw_seterr(err, PW_EFORMAT, "gpt-oss: invalid sliding window pattern %u", v);
    hp->swa_period = (int32_t)v;
  } else if (gguf_find_kv(f, "gpt-oss.attention.sliding_window_pattern")) {
    return pw_seterr(err, PW_EUNSUPPORTED, "gpt-oss: a per-layer sliding_window_pattern array is not supported");
  }
  /* the local layers rotate as the full ones (their own base would need
   * its own scaled table): no table of their own */
  hp->rope_base_swa = 0;
  float base_swa;
  if (gguf_get_f32(f, "gpt-oss.rope.freq_base_swa", &base_swa) && base_swa != hp->rope_base)
    return pw_seterr(err, PW_EUNSUPPORTED, "gpt-oss: a RoPE base of the local layers (%g) other than the full ones' (%g)",
                     (double)base_swa, (double)hp->rope_base);
  if (hp->n_rot != hp->head_dim) return pw_seterr(err, PW_EUNSUPPORTED, "gpt-oss: partial RoPE");
  return 0;
}

/* A 2-D F32 tensor [ne0, ne1] (the experts' biases, one row per expert). */
static int bind_rows_f32(const gguf_file *f, const char *name, int64_t ne0, int64_t ne1, const float **out,
                         char *err) {
  const gguf_tensor *t = gguf_find_tensor(f, name);
  *out = NULL;
  if (!t) return pw_seterr(err, PW_EFORMAT, "tensor %s is missing", name);
  if (t->type != PW_DT_F32)
    return pw_seterr(err, PW_EUNSUPPORTED, "tensor %s: type %s, expected F32", name,
                     pw_dtype_name(t->type) ? pw_dtype_name(t->type) : "unknown");
  if (t->n_dims != 2 || (int64_t)t->ne[0] != ne0 || (int64_t)t->ne[1] != ne1)
    return pw_seterr(err, PW_EFORMAT, "tensor %s has shape [%llu, %llu], expected [%lld, %lld]", name,
                     (unsigned long long)t->ne[0], (unsigned long long)(t->n_dims > 1 ? t->ne[1] : 1),
                     (long long)ne0, (long long)ne1);
  if ((uintptr_t)t->data % 4) return pw_seterr(err, PW_EFORMAT, "tensor %s is misaligned", name);
  *out = t->data;
  return 0;
}

static int bind_layer(model *m, int il, char *err) {
  const gguf_file *f = m->f;
  const model_hparams *hp = &m->hp;
  layer_w *L = &m->layers[il];
  L->window = is_swa(hp, il) ? hp->n_swa : 0;
  const int64_t e = hp->n_embd, qd = (int64_t)hp->n_head * hp->head_dim, kvd = (int64_t)hp->n_head_kv * hp->head_dim;
  const int64_t F = hp->n_ff_exp, X = hp->n_expert;
  int rc;
  char n[96];
#define NAME(s) (snprintf(n, sizeof n, "blk.%d.%s", il, s), n)
  if ((rc = model_bind_vec(f, NAME("attn_norm.weight"), e, &L->attn_norm, true, err))) return rc;
  if ((rc = model_bind_weight(f, NAME("attn_q.weight"), e, qd, &L->wq, true, err))) return rc;
  if ((rc = model_bind_weight(f, NAME("attn_k.weight"), e, kvd, &L->wk, true, err))) return rc;
  if ((rc = model_bind_weight(f, NAME("attn_v.weight"), e, kvd, &L->wv, true, err))) return rc;
  if ((rc = model_bind_weight(f, NAME("attn_output.weight"), qd, e, &L->wo, true, err))) return rc;
  if ((rc = model_bind_vec(f, NAME("attn_q.bias"), qd, &L->bq, false, err)) < 0) return rc;
  if ((rc = model_bind_vec(f, NAME("attn_k.bias"), kvd, &L->bk, false, err)) < 0) return rc;
  if ((rc = model_bind_vec(f, NAME("attn_v.bias"), kvd, &L->bv, false, err)) < 0) return rc;
  if ((rc = model_bind_vec(f, NAME("attn_output.bias"), e, &L->bo, true, err))) return rc;
  if ((rc = model_bind_vec(f, NAME("attn_sinks.weight"), hp->n_head, &L->attn_sinks, true, err))) return rc;
  if ((rc = model_bind_vec(f, NAME("post_attention_norm.weight"), e, &L->attn_post_norm, true, err))) return rc;
  if ((rc = model_bind_weight(f, NAME("ffn_gate_inp.weight"), e, X, &L->ffn_gate_inp, true, err))) return rc;
  if ((rc = model_bind_vec(f, NAME("ffn_gate_inp.bias"), X, &L->b_gate_inp, true, err))) return rc;
  if ((rc = model_bind_experts(f, NAME("ffn_gate_exps.weight"), e, F, X, &L->gate_exps, err))) return rc;
  if ((rc = model_bind_experts(f, NAME("ffn_up_exps.weight"), e, F, X, &L->up_exps, err))) return rc;
  if ((rc = model_bind_experts(f, NAME("ffn_down_exps.weight"), F, e, X, &L->down_exps, err))) return rc;
  if ((rc = bind_rows_f32(f, NAME("ffn_gate_exps.bias"), F, X, &L->b_gate_exps, err))) return rc;
  if ((rc = bind_rows_f32(f, NAME("ffn_up_exps.bias"), F, X, &L->b_up_exps, err))) return rc;
  if ((rc = bind_rows_f32(f, NAME("ffn_down_exps.bias"), e, X, &L->b_down_exps, err))) return rc;
#undef NAME
  return 0;
}

static void layer(model_ctx *c, model_kv *kv, const model_entry *e, int n, int il) {
  const model *m = c->m;
  const model_backend *be = m->be;
  const model_hparams *hp = &m->hp;
  const layer_w *L = &m->layers[il];
  const int E = hp->n_embd, qd = hp->n_head * hp->head_dim, kvd = hp->n_head_kv * hp->head_dim;
  float *ffn_out = c->arch_act, *moe_scratch = c->arch_act + (size_t)c->max_batch * E;
  pw_mm_op qkv[3];
  model_qkv_ops(L, c, qkv);
  be->rmsnorm(c, c->xn, c->x, L->attn_norm, n, E, hp->rms_eps);
  be->prefetch_vec(L->bq, qd);
  be->prefetch_vec(L->bk, kvd);
  be->prefetch_vec(L->bv, kvd);
  be->matmul_multi(c, qkv, 3, E, c->xn, n);
  be->add_rows(c, c->q, L->bq, n, qd);
  be->add_rows(c, c->k, L->bk, n, kvd);
  be->add_rows(c, c->v, L->bv, n, kvd);
  be->rope(c, c->q, n, hp->n_head, false);
  be->rope(c, c->k, n, hp->n_head_kv, false);
  be->kv_store(c, kv, e, n, il);
  model_prefetch_weight(c, &L->wo, n);
  be->prefetch_vec(L->attn_sinks, hp->n_head);
  be->attention(c, kv, e, n, il, 1.0f / sqrtf((float)hp->head_dim), L->window, L->attn_sinks);
  be->prefetch_vec(L->bo, E);
  be->prefetch_vec(L->attn_post_norm, E);
  model_prefetch_weight(c, &L->ffn_gate_inp, n);
  be->matmul(c, &L->wo, c->att, n, c->xn);
  be->add_rows(c, c->xn, L->bo, n, E);
  be->add(c, c->x, c->xn, c->x, (int64_t)n * E);
  be->rmsnorm(c, c->xn, c->x, L->attn_post_norm, n, E, hp->rms_eps);
  be->prefetch_vec(L->b_gate_inp, hp->n_expert);
  be->moe_ffn(c, L, c->xn, n, ffn_out, moe_scratch);
  be->prefetch_vec(il + 1 < hp->n_layer ? m->layers[il + 1].attn_norm : m->output_norm, E);
  if (il + 1 < hp->n_layer)
    model_layer_prefetch(c, il + 1, n);
  else
    model_prefetch_weight(c, &m->output, n);
  be->add(c, c->x, ffn_out, c->x, (int64_t)n * E);
}

const model_arch_ops model_arch_gptoss = {.name = "gpt-oss",
                                          .arch = MODEL_ARCH_GPTOSS,
                                          .rope_neox = true,
                                          .load_hparams = load_hparams,
                                          .bind_layer = bind_layer,
                                          .scratch_size = model_moe_layer_scratch_size,
                                          .layer = layer,
                                          .prefetch_layer = model_layer_prefetch,
                                          .act_floats = model_moe_act_floats};
