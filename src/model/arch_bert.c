/* arch_bert.c - the BERT-family encoders: rows `bert` (absolute position
 * embeddings, GELU MLP with biases, Q/K/V biases), `nomic-bert` (fused
 * QKV, NeoX RoPE, SwiGLU MLP without biases) and `jina-bert-v2` (no
 * position embeddings but ALiBi, a GEGLU MLP whose up projection carries
 * the gate, optional LayerNorms of Q and K), as llama.cpp's graph builds
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
 * ALiBi (jina-bert-v2): head h adds -slope(h) * |i - j| to the score of
 * query position i and key position j, with llama.cpp's slopes for a
 * maximum bias of 8 (its value for this architecture). That attention runs
 * here over the pass's F32 Q/K/V rows (an encoder sees its whole input in
 * one pass), not through the KV cache's kernels.
 *
 * Token types: llama.cpp adds row 0 ("sentence A") to every token, also for
 * a reranker's query/document pair; so does this file.
 *
 * Not here: pooling and normalization of the result (engine/embed.c), the
 * WordPiece tokenizer (tok/wpm.c). Not supported: nomic-bert-moe's expert
 * layers. */
#include "model/model_int.h"

#include "base/error.h"
#include "base/pool.h"
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
static bool is_jina(const model *m) { return m->hp.arch == MODEL_ARCH_JINA_BERT_V2; }

/* c->arch_act holds: the fused QKV rows (nomic-bert), the entries, and the
 * fused gate+up rows (jina-bert-v2, [max_batch][2 n_ff]). */
static size_t qkv_floats(const model *m, int max_batch) {
  return fused_qkv(m) ? (size_t)max_batch * 3 * m->hp.n_head * m->hp.head_dim : 0;
}

static size_t act_floats(const model *m, int max_batch) {
  size_t gu = is_jina(m) ? (size_t)max_batch * 2 * m->hp.n_ff : 0;
  return qkv_floats(m, max_batch) + ent_floats(max_batch) + gu;
}

/* The largest head ALiBi attention takes (its accumulator is on the stack). */
#define ALIBI_MAX_HEAD 512
/* llama.cpp's maximum ALiBi bias for jina-bert-v2 */
#define ALIBI_MAX_BIAS 8.0f

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
  if (is_jina(m) && hp->head_dim > ALIBI_MAX_HEAD)
    return pw_seterr(err, PW_EUNSUPPORTED, "%s with head size %d (at most %d)", hp->arch_name, hp->head_dim,
                     ALIBI_MAX_HEAD);
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
  if (hp->arch == MODEL_ARCH_BERT || is_jina(m)) {
    /* jina-bert-v2's head projects straight to one score (llama.cpp's
     * {n_embd, 1}); bert's to a hidden row for cls.output */
    const int64_t n_cls = is_jina(m) ? 1 : E;
    if ((rc = model_bind_weight(f, "cls.weight", E, n_cls, &m->cls, false, err)) < 0) return rc;
    if ((rc = model_bind_vec(f, "cls.bias", n_cls, &m->cls_b, false, err)) < 0) return rc;
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
  if (is_jina(m)) {
    const struct {
      const char *name;
      const float **dst;
    } opt[] = {{"attn_q_norm.weight", &L->q_ln},   {"attn_q_norm.bias", &L->q_ln_b},
               {"attn_k_norm.weight", &L->k_ln},   {"attn_k_norm.bias", &L->k_ln_b},
               {"attn_norm_2.weight", &L->attn_norm2}, {"attn_norm_2.bias", &L->attn_norm2_b}};
    for (size_t i = 0; i < sizeof opt / sizeof opt[0]; i++)
      if ((rc = model_bind_vec(f, NAME(opt[i].name), E, opt[i].dst, false, err)) < 0) return rc;
    /* a LayerNorm is a weight with its bias, or absent */
    if (!L->q_ln != !L->q_ln_b || !L->k_ln != !L->k_ln_b || !L->attn_norm2 != !L->attn_norm2_b)
      return pw_seterr(err, PW_EFORMAT, "blk.%d: a Q/K or second attention LayerNorm without its weight or bias", il);
  }
  if ((rc = model_bind_weight(f, NAME("attn_output.weight"), E, E, &L->wo, true, err))) return rc;
  if ((rc = model_bind_vec(f, NAME("attn_output.bias"), E, &L->bo, false, err)) < 0) return rc;
  if ((rc = model_bind_vec(f, NAME("attn_output_norm.weight"), E, &L->attn_out_norm, true, err))) return rc;
  if ((rc = model_bind_vec(f, NAME("attn_output_norm.bias"), E, &L->attn_out_norm_b, true, err))) return rc;
  /* jina-bert-v2 carries GEGLU's gate either in ffn_gate or as the first
   * half of a double-width ffn_up (its converter writes the latter) */
  int64_t n_up = ff;
  if (is_jina(m) && !gguf_find_tensor(f, NAME("ffn_gate.weight"))) {
    const gguf_tensor *tu = gguf_find_tensor(f, NAME("ffn_up.weight"));
    if (tu && tu->n_dims == 2 && tu->ne[1] == (uint64_t)(2 * ff)) n_up = 2 * ff;
  }
  if ((rc = model_bind_weight(f, NAME("ffn_up.weight"), E, n_up, &L->w_up, true, err))) return rc;
  if ((rc = model_bind_weight(f, NAME("ffn_down.weight"), ff, E, &L->w_down, true, err))) return rc;
  if (hp->arch == MODEL_ARCH_NOMIC_BERT) {
    if ((rc = model_bind_weight(f, NAME("ffn_gate.weight"), E, ff, &L->w_gate, true, err))) return rc;
  } else {
    if (is_jina(m) && (rc = model_bind_weight(f, NAME("ffn_gate.weight"), E, ff, &L->w_gate, false, err)) < 0)
      return rc;
    if ((rc = model_bind_vec(f, NAME("ffn_up.bias"), n_up, &L->b_up, false, err)) < 0) return rc;
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

/* ALiBi attention over the pass's rows (jina-bert-v2): each (entry, head)
 * is one work item, computed by one thread in key order with a running
 * maximum, so the result does not depend on the thread count. */
typedef struct {
  model_ctx *c;
  const model_entry *e;
  int n;
  bool causal;
} alibi_job;

static float alibi_slope(int h, int n_head) {
  int log2h = 1;
  while (log2h * 2 <= n_head) log2h *= 2;
  const float m0 = powf(2.0f, -ALIBI_MAX_BIAS / (float)log2h), m1 = powf(2.0f, -(ALIBI_MAX_BIAS / 2.0f) / (float)log2h);
  return h < log2h ? powf(m0, (float)(h + 1)) : powf(m1, (float)(2 * (h - log2h) + 1));
}

static void alibi_worker(void *ctx, int ith, int nth) {
  const alibi_job *j = ctx;
  model_ctx *c = j->c;
  const model_hparams *hp = &c->m->hp;
  const int H = hp->n_head, hd = hp->head_dim, E = H * hd;
  const float scale = 1.0f / sqrtf((float)hd);
  float acc[ALIBI_MAX_HEAD];
  for (int item = ith; item < j->n * H; item += nth) {
    const int t = item / H, h = item % H;
    const float slope = alibi_slope(h, H);
    const float *q = c->q + (size_t)t * E + (size_t)h * hd;
    float mx = -INFINITY, sum = 0.0f;
    memset(acc, 0, (size_t)hd * sizeof(float));
    for (int u = 0; u < j->n; u++) {
      if (j->e[u].seq != j->e[t].seq || (j->causal && j->e[u].pos > j->e[t].pos)) continue;
      const float *k = c->k + (size_t)u * E + (size_t)h * hd, *v = c->v + (size_t)u * E + (size_t)h * hd;
      float d = 0.0f;
      for (int i = 0; i < hd; i++) d += q[i] * k[i];
      const float s = d * scale - slope * fabsf((float)(j->e[t].pos - j->e[u].pos));
      if (s > mx) { /* rescale what was summed under the old maximum */
        const float r = expf(mx - s);
        for (int i = 0; i < hd; i++) acc[i] *= r;
        sum *= r;
        mx = s;
      }
      const float w = expf(s - mx);
      sum += w;
      for (int i = 0; i < hd; i++) acc[i] += w * v[i];
    }
    float *o = c->att + (size_t)t * E + (size_t)h * hd;
    for (int i = 0; i < hd; i++) o[i] = sum > 0 ? acc[i] / sum : 0.0f;
  }
}

static void alibi_attention(model_ctx *c, const model_entry *e, int n) {
  alibi_job j = {c, e, n, causal_attn(c->m)};
  if (pw_pool_size(c->m->pool) < 2 || n < 2) alibi_worker(&j, 0, 1);
  else pw_pool_run(c->m->pool, alibi_worker, &j);
}

/* jina-bert-v2's MLP: GEGLU over a separate gate or the first half of a
 * double-width up projection (llama.cpp's split), else plain GELU. Leaves
 * the down projection's input in c->gate (GEGLU) or c->up. */
static const float *jina_mlp(model_ctx *c, const layer_w *L, int n) {
  const model *m = c->m;
  const model_backend *be = m->be;
  const int E = m->hp.n_embd, ff = m->hp.n_ff;
  if (L->w_gate.data) {
    pw_mm_op gu[2];
    model_gu_ops(L, c, gu);
    be->matmul_multi(c, gu, 2, E, c->x, n);
    be->add_rows(c, c->up, L->b_up, n, ff);
  } else if (L->w_up.n_out == 2 * (int64_t)ff) {
    float *gu = c->arch_act + qkv_floats(m, c->max_batch) + ent_floats(c->max_batch);
    be->matmul(c, &L->w_up, c->x, n, gu);
    be->add_rows(c, gu, L->b_up, n, 2 * ff);
    for (int t = 0; t < n; t++) {
      memcpy(c->gate + (size_t)t * ff, gu + (size_t)t * 2 * ff, (size_t)ff * sizeof(float));
      memcpy(c->up + (size_t)t * ff, gu + (size_t)t * 2 * ff + ff, (size_t)ff * sizeof(float));
    }
  } else {
    be->matmul(c, &L->w_up, c->x, n, c->up);
    be->add_rows(c, c->up, L->b_up, n, ff);
    be->gelu(c, c->up, c->up, (int64_t)n * ff);
    return c->up;
  }
  be->geglu(c, c->gate, c->up, (int64_t)n * ff);
  return c->gate;
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
  if (is_jina(m)) {
    if (L->q_ln) be->layernorm(c, c->q, c->q, L->q_ln, L->q_ln_b, n, E, hp->rms_eps);
    if (L->k_ln) be->layernorm(c, c->k, c->k, L->k_ln, L->k_ln_b, n, E, hp->rms_eps);
    alibi_attention(c, e, n);
    be->matmul(c, &L->wo, c->att, n, c->xn);
    be->add_rows(c, c->xn, L->bo, n, E);
    be->add(c, c->xn, c->xn, c->x, (int64_t)n * E);
    if (L->attn_norm2) { /* the layer input is added again before the second norm */
      be->layernorm(c, c->att, c->xn, L->attn_out_norm, L->attn_out_norm_b, n, E, hp->rms_eps);
      be->add(c, c->att, c->att, c->x, (int64_t)n * E);
      be->layernorm(c, c->x, c->att, L->attn_norm2, L->attn_norm2_b, n, E, hp->rms_eps);
    } else {
      be->layernorm(c, c->x, c->xn, L->attn_out_norm, L->attn_out_norm_b, n, E, hp->rms_eps);
    }
    be->matmul(c, &L->w_down, jina_mlp(c, L, n), n, c->xn);
    be->add_rows(c, c->xn, L->b_down, n, E);
    be->add(c, c->xn, c->xn, c->x, (int64_t)n * E);
    be->layernorm(c, c->x, c->xn, L->out_norm, L->out_norm_b, n, E, hp->rms_eps);
    return;
  }
  /* every layer writes and reads the one KV slot an encoder has (model.c):
   * a layer's K/V are used up before the next layer's overwrite them */
  be->kv_store(c, kv, e, n, L->kv_slot);
  const model_entry *ea = e;
  if (!causal_attn(m)) {
    /* every entry sees its sequence up to the sequence's last entry of the
     * pass: the op attends up to an entry's position, so give it that one */
    model_entry *full = (model_entry *)(c->arch_act + qkv_floats(m, c->max_batch));
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
    const int nc = (int)m->cls.n_out;
    be->matmul(c, &m->cls, h, 1, o);
    be->add_rows(c, o, m->cls_b, 1, nc);
    for (int i = 0; i < nc; i++) h[i] = tanhf(o[i]);
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
const model_arch_ops model_arch_jina_bert_v2 = {"jina-bert-v2", MODEL_ARCH_JINA_BERT_V2, false, false, false,
                                                BERT_FAMILY};
