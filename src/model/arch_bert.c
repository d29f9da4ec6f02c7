/* arch_bert.c - the BERT-family encoders: rows `bert` (absolute position
 * embeddings, GELU MLP with biases, Q/K/V biases) and `nomic-bert` (fused
 * QKV, NeoX RoPE, SwiGLU MLP without biases), as llama.cpp's graph builds
 * them:
 *   x = LayerNorm(tok_embd[token] + token_types[0] (+ position_embd[pos]))
 *   per layer (post-norm): a = attention(x) Wo (+ bo)
 *                          h = LayerNorm(x + a)            attn_output_norm
 *                          x = LayerNorm(h + MLP(h))       layer_output_norm
 * Attention is bidirectional: each entry attends over every entry of its
 * sequence in the pass (llama.cpp reads {arch}.attention.causal, false for
 * these models; true gives the usual causal mask). There is no output norm
 * or vocabulary head: model_forward returns the last layer's states and the
 * engine pools them (model.h). Rerankers carry a classification head
 * (cls: dense + tanh, cls.output: dense), applied by model_rank_head.
 *
 * Token types: llama.cpp adds row 0 ("sentence A") to every token, also for
 * a reranker's query/document pair; so does this file.
 *
 * Not here: pooling and normalization of the result (engine/embed.c), the
 * WordPiece tokenizer (tok/wpm.c). Not supported: jina-bert-v2 (ALiBi),
 * nomic-bert-moe's expert layers. */
#include "model/model_int.h"

#include "base/error.h"
#include "gguf/gguf.h"
#include "tensor/matmul.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* The bidirectional attention's entries: each entry with its sequence's
 * last position of the pass (c->arch_act, after the fused QKV rows). */
static size_t ent_floats(int max_batch) {
  return ((sizeof(model_entry) + sizeof(float) - 1) / sizeof(float)) * (size_t)max_batch;
}

static bool fused_qkv(const model *m) { return m->hp.arch == MODEL_ARCH_NOMIC_BERT; }

static size_t act_floats(const model *m, int max_batch) {
  size_t qkv = fused_qkv(m) ? (size_t)max_batch * 3 * m->hp.n_head * m->hp.head_dim : 0;
  return qkv + ent_floats(max_batch);
}

static bool causal_attn(const model *m) { return m->enc_causal; }

static int load_hparams(model *m, char *err) {
  model_hparams *hp = &m->hp;
  const gguf_file *f = m->f;
  char key[128];
  /* the LayerNorm epsilon (kept where the decoders keep their norm's) */
  snprintf(key, sizeof key, "%s.attention.layer_norm_epsilon", hp->arch_name);
  if (!gguf_get_f32(f, key, &hp->rms_eps))
    return pw_seterr(err, PW_EFORMAT, "metadata %s is missing", key);
  if (!(hp->rms_eps >= 0) || hp->rms_eps > 1) return pw_seterr(err, PW_EFORMAT, "invalid %s %g", key, (double)hp->rms_eps);
  if (hp->n_head_kv != hp->n_head)
    return pw_seterr(err, PW_EUNSUPPORTED, "%s with grouped KV heads (%d of %d) is not supported", hp->arch_name,
                     hp->n_head_kv, hp->n_head);
  if (hp->head_dim * hp->n_head != hp->n_embd)
    return pw_seterr(err, PW_EFORMAT, "head size %d x %d heads is not the embedding size %d", hp->head_dim, hp->n_head,
                     hp->n_embd);
  /* llama.cpp's default is causal when the key is absent */
  bool causal = true;
  snprintf(key, sizeof key, "%s.attention.causal", hp->arch_name);
  gguf_get_bool(f, key, &causal);
  m->enc_causal = causal;
  uint32_t pt = MODEL_POOLING_MEAN;
  snprintf(key, sizeof key, "%s.pooling_type", hp->arch_name);
  if (!gguf_get_u32(f, key, &pt) && gguf_find_kv(f, key))
    return pw_seterr(err, PW_EFORMAT, "metadata %s is not an integer", key);
  if (pt == 0) pt = MODEL_POOLING_MEAN; /* none: per-token vectors, which the API does not serve */
  if (pt > MODEL_POOLING_RANK) return pw_seterr(err, PW_EUNSUPPORTED, "%s = %u is not a known pooling", key, pt);
  m->pooling = (model_pooling)pt;
  m->n_cls_out = 1;
  snprintf(key, sizeof key, "%s.classifier.output_labels", hp->arch_name);
  gguf_arr labels;
  if (gguf_get_arr(f, key, &labels) && labels.n > 0) {
    if (labels.n > (uint64_t)hp->n_embd)
      return pw_seterr(err, PW_EUNSUPPORTED, "%llu classifier labels exceed the embedding size %d",
                       (unsigned long long)labels.n, hp->n_embd);
    m->n_cls_out = (int)labels.n;
  }
  return 0;
}

/* The model-level tensors, bound with layer 0 (the frame binds only the
 * token embeddings for an encoder). */
static int bind_globals(model *m, char *err) {
  const gguf_file *f = m->f;
  const model_hparams *hp = &m->hp;
  const int64_t E = hp->n_embd;
  int rc;
  const gguf_tensor *tt = gguf_find_tensor(f, "token_types.weight");
  if (tt) {
    if (tt->n_dims != 2 || tt->ne[1] < 1 || tt->ne[1] > 16)
      return pw_seterr(err, PW_EFORMAT, "tensor token_types.weight: expected 1 to 16 rows of %lld", (long long)E);
    if ((rc = model_bind_weight(f, "token_types.weight", E, (int64_t)tt->ne[1], &m->type_embd, true, err))) return rc;
  }
  if (hp->arch == MODEL_ARCH_BERT) {
    if ((rc = model_bind_weight(f, "position_embd.weight", E, hp->n_ctx_train, &m->pos_embd, true, err))) return rc;
  }
  if ((rc = model_bind_vec(f, "token_embd_norm.weight", E, &m->tok_norm, true, err))) return rc;
  if ((rc = model_bind_vec(f, "token_embd_norm.bias", E, &m->tok_norm_b, true, err))) return rc;
  if (hp->arch == MODEL_ARCH_BERT) {
    if ((rc = model_bind_weight(f, "cls.weight", E, E, &m->cls, false, err)) < 0) return rc;
    if ((rc = model_bind_vec(f, "cls.bias", E, &m->cls_b, false, err)) < 0) return rc;
    if ((rc = model_bind_weight(f, "cls.output.weight", E, m->n_cls_out, &m->cls_out, false, err)) < 0) return rc;
    if ((rc = model_bind_vec(f, "cls.output.bias", m->n_cls_out, &m->cls_out_b, false, err)) < 0) return rc;
  }
  if (m->pooling == MODEL_POOLING_RANK && !m->cls.data && !m->cls_out.data)
    return pw_seterr(err, PW_EFORMAT, "rank pooling without a classification head (cls.weight, cls.output.weight)");
  /* without cls.output the score is the head's (or the state's) first value */
  if (!m->cls_out.data) m->n_cls_out = 1;
  return 0;
}

static int bind_layer(model *m, int il, char *err) {
  const gguf_file *f = m->f;
  const model_hparams *hp = &m->hp;
  layer_w *L = &m->layers[il];
  const int64_t E = hp->n_embd, ff = hp->n_ff;
  int rc;
  char n[96];
  if (il == 0 && (rc = bind_globals(m, err))) return rc;
#define NAME(s) (snprintf(n, sizeof n, "blk.%d.%s", il, s), n)
  if (fused_qkv(m)) {
    if ((rc = model_bind_weight(f, NAME("attn_qkv.weight"), E, 3 * E, &L->wqkv, true, err))) return rc;
  } else {
    if ((rc = model_bind_weight(f, NAME("attn_q.weight"), E, E, &L->wq, true, err))) return rc;
    if ((rc = model_bind_weight(f, NAME("attn_k.weight"), E, E, &L->wk, true, err))) return rc;
    if ((rc = model_bind_weight(f, NAME("attn_v.weight"), E, E, &L->wv, true, err))) return rc;
    if ((rc = model_bind_vec(f, NAME("attn_q.bias"), E, &L->bq, false, err)) < 0) return rc;
    if ((rc = model_bind_vec(f, NAME("attn_k.bias"), E, &L->bk, false, err)) < 0) return rc;
    if ((rc = model_bind_vec(f, NAME("attn_v.bias"), E, &L->bv, false, err)) < 0) return rc;
  }
  if ((rc = model_bind_weight(f, NAME("attn_output.weight"), E, E, &L->wo, true, err))) return rc;
  if ((rc = model_bind_vec(f, NAME("attn_output.bias"), E, &L->bo, false, err)) < 0) return rc;
  if ((rc = model_bind_vec(f, NAME("attn_output_norm.weight"), E, &L->attn_out_norm, true, err))) return rc;
  if ((rc = model_bind_vec(f, NAME("attn_output_norm.bias"), E, &L->attn_out_norm_b, true, err))) return rc;
  if ((rc = model_bind_weight(f, NAME("ffn_up.weight"), E, ff, &L->w_up, true, err))) return rc;
  if ((rc = model_bind_weight(f, NAME("ffn_down.weight"), ff, E, &L->w_down, true, err))) return rc;
  if (hp->arch == MODEL_ARCH_NOMIC_BERT) {
    if ((rc = model_bind_weight(f, NAME("ffn_gate.weight"), E, ff, &L->w_gate, true, err))) return rc;
  } else {
    if ((rc = model_bind_vec(f, NAME("ffn_up.bias"), ff, &L->b_up, false, err)) < 0) return rc;
    if ((rc = model_bind_vec(f, NAME("ffn_down.bias"), E, &L->b_down, false, err)) < 0) return rc;
  }
  if ((rc = model_bind_vec(f, NAME("layer_output_norm.weight"), E, &L->out_norm, true, err))) return rc;
  if ((rc = model_bind_vec(f, NAME("layer_output_norm.bias"), E, &L->out_norm_b, true, err))) return rc;
#undef NAME
  return 0;
}

static size_t scratch_size(const model *m, int il, int max_batch) {
  const layer_w *L = &m->layers[il];
  const model_weight *ws[] = {&L->wqkv, &L->wq, &L->wk, &L->wv, &L->wo, &L->w_up, &L->w_gate, &L->w_down,
                              &m->cls,  &m->cls_out};
  size_t mm = 0;
  for (size_t i = 0; i < sizeof ws / sizeof ws[0]; i++) {
    if (!ws[i]->data) continue;
    size_t s = pw_matmul_scratch_size(ws[i]->type, ws[i]->n_in, max_batch);
    if (s > mm) mm = s;
  }
  return mm;
}

/* Token type row 0, absolute positions, then the embeddings' LayerNorm.
 * Refuses what the encoder cannot compute as llama.cpp does: a sequence
 * that does not start in this pass (its attention would miss the entries
 * of earlier passes) and positions past the position table. */
static int embed(model_ctx *c, const model_entry *e, int n, char *err) {
  const model *m = c->m;
  const model_hparams *hp = &m->hp;
  const int E = hp->n_embd;
  for (int t = 0; t < n; t++) {
    bool first = true;
    for (int u = 0; u < t && first; u++)
      if (e[u].seq == e[t].seq) first = false;
    if (first && e[t].pos != 0 && !causal_attn(m))
      return pw_seterr(err, PW_EINVAL,
                       "sequence %d: an encoder needs its whole input in one pass (it starts at position %d)",
                       e[t].seq, e[t].pos);
    if (m->pos_embd.data && e[t].pos >= hp->n_ctx_train)
      return pw_seterr(err, PW_ECONTEXT, "sequence %d: position %d is past the model's %d positions", e[t].seq,
                       e[t].pos, hp->n_ctx_train);
  }
  const model_backend *be = m->be;
  float *type0 = c->att; /* scratch row: token type 0 */
  if (m->type_embd.data) pw_get_row(m->type_embd.type, m->type_embd.data, E, 0, type0);
  for (int t = 0; t < n; t++) {
    float *x = c->x + (size_t)t * E;
    if (m->type_embd.data) be->add(c, x, x, type0, E);
    if (m->pos_embd.data) {
      float *p = c->xn; /* scratch row */
      pw_get_row(m->pos_embd.type, m->pos_embd.data, E, e[t].pos, p);
      be->add(c, x, p, x, E); /* positions first, as llama.cpp adds them */
    }
  }
  be->layernorm(c, c->x, c->x, m->tok_norm, m->tok_norm_b, n, E, hp->rms_eps);
  return 0;
}

static void layer(model_ctx *c, model_kv *kv, const model_entry *e, int n, int il) {
  const model *m = c->m;
  const model_backend *be = m->be;
  const model_hparams *hp = &m->hp;
  const layer_w *L = &m->layers[il];
  const int E = hp->n_embd, hd = hp->head_dim, ff = hp->n_ff;
  if (L->wqkv.data) {
    float *qkv = c->arch_act;
    be->matmul(c, &L->wqkv, c->x, n, qkv);
    for (int t = 0; t < n; t++) {
      const float *r = qkv + (size_t)t * 3 * E;
      memcpy(c->q + (size_t)t * E, r, (size_t)E * sizeof(float));
      memcpy(c->k + (size_t)t * E, r + E, (size_t)E * sizeof(float));
      memcpy(c->v + (size_t)t * E, r + 2 * E, (size_t)E * sizeof(float));
    }
  } else {
    pw_mm_op qkv[3];
    model_qkv_ops(L, c, qkv);
    be->matmul_multi(c, qkv, 3, E, c->x, n);
    be->add_rows(c, c->q, L->bq, n, E);
    be->add_rows(c, c->k, L->bk, n, E);
    be->add_rows(c, c->v, L->bv, n, E);
  }
  if (hp->arch == MODEL_ARCH_NOMIC_BERT) {
    be->rope(c, c->q, n, hp->n_head, false);
    be->rope(c, c->k, n, hp->n_head_kv, false);
  }
  /* every layer writes and reads the one KV slot an encoder has (model.c):
   * a layer's K/V are used up before the next layer's overwrite them */
  be->kv_store(c, kv, e, n, L->kv_slot);
  const model_entry *ea = e;
  if (!causal_attn(m)) {
    /* every entry sees its sequence up to the sequence's last entry of the
     * pass: the op attends up to an entry's position, so give it that one */
    model_entry *full = (model_entry *)(c->arch_act + (fused_qkv(m) ? (size_t)c->max_batch * 3 * E : 0));
    for (int t = 0; t < n; t++) {
      full[t] = e[t];
      for (int u = 0; u < n; u++)
        if (e[u].seq == e[t].seq && e[u].pos > full[t].pos) full[t].pos = e[u].pos;
    }
    ea = full;
  }
  be->attention(c, kv, ea, n, L->kv_slot, 1.0f / sqrtf((float)hd), 0, NULL);
  be->matmul(c, &L->wo, c->att, n, c->xn);
  be->add_rows(c, c->xn, L->bo, n, E);
  be->add(c, c->xn, c->xn, c->x, (int64_t)n * E);
  be->layernorm(c, c->x, c->xn, L->attn_out_norm, L->attn_out_norm_b, n, E, hp->rms_eps);
  /* c->x is the MLP's input and its residual */
  if (L->w_gate.data) {
    pw_mm_op gu[2];
    model_gu_ops(L, c, gu);
    be->matmul_multi(c, gu, 2, E, c->x, n);
    be->swiglu(c, c->gate, c->up, (int64_t)n * ff);
    be->matmul(c, &L->w_down, c->gate, n, c->xn);
  } else {
    be->matmul(c, &L->w_up, c->x, n, c->up);
    be->add_rows(c, c->up, L->b_up, n, ff);
    be->gelu(c, c->up, c->up, (int64_t)n * ff);
    be->matmul(c, &L->w_down, c->up, n, c->xn);
  }
  be->add_rows(c, c->xn, L->b_down, n, E);
  be->add(c, c->xn, c->xn, c->x, (int64_t)n * E);
  be->layernorm(c, c->x, c->xn, L->out_norm, L->out_norm_b, n, E, hp->rms_eps);
}

/* Encoders run one pass per input: nothing to stream ahead between passes. */
static void prefetch_layer(model_ctx *c, int il, int n) {
  (void)c;
  (void)il;
  (void)n;
}

void model_rank_head(model_ctx *c, const float *pooled, float *scores) {
  const model *m = c->m;
  const model_backend *be = m->be;
  const int E = m->hp.n_embd;
  float *h = c->att, *o = c->xn;
  memcpy(h, pooled, (size_t)E * sizeof(float));
  if (m->cls.data) {
    be->matmul(c, &m->cls, h, 1, o);
    be->add_rows(c, o, m->cls_b, 1, E);
    for (int i = 0; i < E; i++) h[i] = tanhf(o[i]);
  }
  if (m->cls_out.data) {
    be->matmul(c, &m->cls_out, h, 1, o);
    be->add_rows(c, o, m->cls_out_b, 1, m->n_cls_out);
    memcpy(scores, o, (size_t)m->n_cls_out * sizeof(float));
  } else {
    scores[0] = h[0];
  }
}

#define BERT_FAMILY                                                                                              \
  .load_hparams = load_hparams, .bind_layer = bind_layer, .scratch_size = scratch_size, .layer = layer,          \
  .prefetch_layer = prefetch_layer, .act_floats = act_floats, .embed = embed, .encoder = true

const model_arch_ops model_arch_bert = {"bert", MODEL_ARCH_BERT, false, false, false, BERT_FAMILY};
const model_arch_ops model_arch_nomic_bert = {"nomic-bert", MODEL_ARCH_NOMIC_BERT, true, false, false, BERT_FAMILY};
