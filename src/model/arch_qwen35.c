/* arch_qwen35.c - Qwen3.5's hybrid decoder block (`qwen35`, and `qwen35moe`
 * with a mixture of experts for its MLP), as llama.cpp's graphs compute
 * them. Every layer is RMSNorm -> mixer -> residual, then RMSNorm
 * (post_attention_norm) -> MLP -> residual. The MLP is SwiGLU (qwen35) or
 * the backend's moe_ffn op (qwen35moe: a softmax router, the top-k experts
 * with their weights normalised, and a shared expert scaled by a sigmoid
 * gate; the tensors and hyperparameters as arch_qwen3moe.c binds them).
 * The mixer is
 *   - a gated DeltaNet (recurrent layers: all but every
 *     full_attention_interval-th, or as attention.recurrent_layers lists):
 *     one projection to the conv input (q, k, v of the linear attention),
 *     one to the output gate z, two to the per-head beta and alpha gates;
 *     the recurrence itself is the backend's delta_net op over the
 *     sequence's state; then RMSNorm per value head times SiLU(z), and the
 *     output projection;
 *   - gated full attention: the query projection gives each head's query
 *     and a gate side by side; per-head Q/K RMSNorm, partial NeoX RoPE with
 *     M-RoPE sections (text only: every section sees the same position),
 *     attention over the KV cache, output times sigmoid(gate), projection.
 * Only the attention layers have KV cache slots; the recurrent ones have a
 * state per sequence (model_kv). The MTP block (nextn) is bound when the
 * file has it; the forward pass does not run it: model_mtp_forward does,
 * over its own one-layer KV cache (model.h).
 *
 * The MTP block has the MLP of its model (qwen35moe's: routed experts).
 *
 * Not here: the experts themselves (backend_cpu_moe.c), vision, the MTP
 * drafter (engine). */
#include "model/model_int.h"

#include "base/error.h"
#include "base/log.h"
#include "tensor/dtype.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int key_u32(const model *m, const char *suffix, bool required, uint32_t *out, char *err) {
  char key[128];
  snprintf(key, sizeof key, "%s.%s", m->hp.arch_name, suffix);
  if (gguf_get_u32(m->f, key, out)) return 0;
  if (!required) return 1;
  return pw_seterr(err, PW_EFORMAT, "metadata %s is missing or not an integer", key);
}

/* Which layers are recurrent: attention.recurrent_layers when the file
 * lists them, else all but every full_attention_interval-th (default 4). */
static int layer_kinds(model *m, uint8_t *recr, int n_all, char *err) {
  const gguf_file *f = m->f;
  const int n = m->hp.n_layer;
  gguf_arr a;
  char key[128];
  snprintf(key, sizeof key, "%s.attention.recurrent_layers", m->hp.arch_name);
  if (gguf_get_arr(f, key, &a)) {
    if (a.type == GGUF_T_STRING || a.type == GGUF_T_ARRAY || a.type == GGUF_T_FLOAT32 || a.type == GGUF_T_FLOAT64 ||
        a.n != (uint64_t)n_all)
      return pw_seterr(err, PW_EFORMAT, "%s: expected %d integers", key, n_all);
    for (int i = 0; i < n; i++) recr[i] = gguf_arr_int(&a, (uint64_t)i) != 0;
    return 0;
  }
  uint32_t iv = 4;
  int rc = key_u32(m, "full_attention_interval", false, &iv, err);
  if (rc < 0) return rc;
  if (iv < 1 || iv > 1024) return pw_seterr(err, PW_EFORMAT, "%s.full_attention_interval %u is invalid", m->hp.arch_name, iv);
  for (int i = 0; i < n; i++) recr[i] = (i + 1) % (int)iv != 0;
  return 0;
}

static int bind_attn(model *m, int blk, layer_w *L, char *err);
static int bind_ffn(model *m, int blk, layer_w *L, char *err);

/* The MTP block after the decoder layers: bound when all its tensors are
 * there, skipped with a note otherwise (a file converted without it). */
static int bind_mtp(model *m, char *err) {
  const gguf_file *f = m->f;
  const model_hparams *hp = &m->hp;
  const int blk = hp->n_layer;
  const int64_t e = hp->n_embd;
  mtp_w *t = &m->mtp;
  char n[96], sub[PW_ERRMAX];
  int rc;
#define NAME(s) (snprintf(n, sizeof n, "blk.%d.%s", blk, s), n)
  if (!gguf_find_tensor(f, NAME("nextn.eh_proj.weight"))) {
    pw_log(PW_LOG_INFO, "%s: the file announces %d MTP block(s) but has no %s; speculation without MTP",
           hp->arch_name, hp->n_nextn, n);
    return 0;
  }
  if ((rc = bind_attn(m, blk, &t->blk, err)) || (rc = bind_ffn(m, blk, &t->blk, err)) ||
      (rc = model_bind_weight(f, NAME("nextn.eh_proj.weight"), 2 * e, e, &t->eh_proj, true, err)) ||
      (rc = model_bind_vec(f, NAME("nextn.enorm.weight"), e, &t->enorm, true, err)) ||
      (rc = model_bind_vec(f, NAME("nextn.hnorm.weight"), e, &t->hnorm, true, err)))
    return rc;
  if ((rc = model_bind_vec(f, NAME("nextn.shared_head_norm.weight"), e, &t->head_norm, false, sub)) < 0 ||
      (rc = model_bind_weight(f, NAME("nextn.embed_tokens.weight"), e, hp->n_vocab, &t->embed, false, sub)) < 0 ||
      (rc = model_bind_weight(f, NAME("nextn.shared_head_head.weight"), e, hp->n_vocab, &t->head, false, sub)) < 0)
    return pw_seterr(err, PW_EFORMAT, "%s", sub);
#undef NAME
  t->blk.kv_slot = 0; /* its own cache's only layer */
  t->blk.rs_slot = -1;
  m->has_mtp = true;
  return 0;
}

static int load_hparams(model *m, char *err) {
  model_hparams *hp = &m->hp;
  const gguf_file *f = m->f;
  uint32_t v;
  int rc;
  if ((rc = key_u32(m, "ssm.conv_kernel", true, &v, err))) return rc;
  hp->ssm_d_conv = (int32_t)v;
  if ((rc = key_u32(m, "ssm.inner_size", true, &v, err))) return rc;
  hp->ssm_d_inner = (int32_t)v;
  if ((rc = key_u32(m, "ssm.state_size", true, &v, err))) return rc;
  hp->ssm_d_state = (int32_t)v;
  if ((rc = key_u32(m, "ssm.time_step_rank", true, &v, err))) return rc;
  hp->ssm_dt_rank = (int32_t)v;
  if ((rc = key_u32(m, "ssm.group_count", true, &v, err))) return rc;
  hp->ssm_n_group = (int32_t)v;
  if (hp->ssm_d_conv < 1 || hp->ssm_d_conv > 64 || hp->ssm_d_state < 1 || hp->ssm_d_state > 1024 ||
      hp->ssm_n_group < 1 || hp->ssm_dt_rank < 1 || hp->ssm_dt_rank > 1024 || hp->ssm_dt_rank % hp->ssm_n_group ||
      (int64_t)hp->ssm_dt_rank * hp->ssm_d_state != hp->ssm_d_inner)
    return pw_seterr(err, PW_EFORMAT,
                     "%s: invalid DeltaNet sizes (conv %d, state %d, key heads %d, value heads %d, inner %d)",
                     hp->arch_name, hp->ssm_d_conv, hp->ssm_d_state, hp->ssm_n_group, hp->ssm_dt_rank, hp->ssm_d_inner);
  if ((rc = key_u32(m, "nextn_predict_layers", false, &v, err)) < 0) return rc;
  if (rc == 0) {
    if ((int64_t)v >= hp->n_layer)
      return pw_seterr(err, PW_EFORMAT, "%s: %u MTP blocks of %d", hp->arch_name, v, hp->n_layer);
    hp->n_nextn = (int32_t)v;
  }
  const int n_all = hp->n_layer;
  hp->n_layer -= hp->n_nextn; /* block_count counts the MTP blocks */
  gguf_arr a;
  char key[128];
  snprintf(key, sizeof key, "%s.rope.dimension_sections", hp->arch_name);
  if (!gguf_get_arr(f, key, &a) || a.n < 3 || a.n > 4 || a.type == GGUF_T_STRING || a.type == GGUF_T_ARRAY ||
      a.type == GGUF_T_FLOAT32 || a.type == GGUF_T_FLOAT64)
    return pw_seterr(err, PW_EFORMAT, "metadata %s is missing or not 3-4 integers", key);
  int sum = 0;
  for (uint64_t i = 0; i < a.n; i++) {
    int64_t s = gguf_arr_int(&a, i);
    if (s < 0 || s > 4096) return pw_seterr(err, PW_EFORMAT, "%s: invalid rope section %lld", hp->arch_name, (long long)s);
    hp->rope_sections[i] = (int32_t)s;
    sum += (int)s;
  }
  if (sum <= 0 || sum > hp->head_dim)
    return pw_seterr(err, PW_EFORMAT, "%s: rope sections of %d pairs (head of %d)", hp->arch_name, sum, hp->head_dim);
  hp->rope_imrope = true;
  m->layer_recurrent = calloc((size_t)hp->n_layer, 1);
  if (!m->layer_recurrent) return pw_seterr(err, PW_ENOMEM, "out of memory");
  if ((rc = layer_kinds(m, m->layer_recurrent, n_all, err))) return rc;
  for (int i = 0; i < hp->n_layer; i++) hp->n_recurrent += m->layer_recurrent[i];
  return hp->arch == MODEL_ARCH_QWEN35MOE ? model_moe_load_hparams(m, err) : 0;
}

/* A block's MLP: SwiGLU (qwen35) or the experts (qwen35moe), after its
 * norm. */
static int bind_ffn(model *m, int blk, layer_w *L, char *err) {
  const gguf_file *f = m->f;
  const model_hparams *hp = &m->hp;
  const int64_t e = hp->n_embd;
  int rc;
  char n[96];
#define NAME(s) (snprintf(n, sizeof n, "blk.%d.%s", blk, s), n)
  if ((rc = model_bind_vec(f, NAME("post_attention_norm.weight"), e, &L->ffn_norm, true, err))) return rc;
  if (hp->n_expert > 0) return model_moe_bind(m, blk, L, err);
  if ((rc = model_bind_weight(f, NAME("ffn_gate.weight"), e, hp->n_ff, &L->w_gate, true, err)) ||
      (rc = model_bind_weight(f, NAME("ffn_up.weight"), e, hp->n_ff, &L->w_up, true, err)) ||
      (rc = model_bind_weight(f, NAME("ffn_down.weight"), hp->n_ff, e, &L->w_down, true, err)))
    return rc;
#undef NAME
  return 0;
}

/* A full-attention block's mixer tensors (a decoder layer or the MTP
 * block). */
static int bind_attn(model *m, int blk, layer_w *L, char *err) {
  const gguf_file *f = m->f;
  const model_hparams *hp = &m->hp;
  int64_t e = hp->n_embd, qd = (int64_t)hp->n_head * hp->head_dim, kvd = (int64_t)hp->n_head_kv * hp->head_dim;
  int rc;
  char n[96];
#define NAME(s) (snprintf(n, sizeof n, "blk.%d.%s", blk, s), n)
  if ((rc = model_bind_vec(f, NAME("attn_norm.weight"), e, &L->attn_norm, true, err)) ||
      (rc = model_bind_weight(f, NAME("attn_q.weight"), e, 2 * qd, &L->wq, true, err)) ||
      (rc = model_bind_weight(f, NAME("attn_k.weight"), e, kvd, &L->wk, true, err)) ||
      (rc = model_bind_weight(f, NAME("attn_v.weight"), e, kvd, &L->wv, true, err)) ||
      (rc = model_bind_weight(f, NAME("attn_output.weight"), qd, e, &L->wo, true, err)) ||
      (rc = model_bind_vec(f, NAME("attn_q_norm.weight"), hp->head_dim, &L->q_norm, true, err)) ||
      (rc = model_bind_vec(f, NAME("attn_k_norm.weight"), hp->head_dim, &L->k_norm, true, err)))
    return rc;
#undef NAME
  return 0;
}

static int bind_layer(model *m, int il, char *err) {
  const gguf_file *f = m->f;
  const model_hparams *hp = &m->hp;
  layer_w *L = &m->layers[il];
  int rc;
  if (il == 0 && hp->n_nextn > 0 && (rc = bind_mtp(m, err))) return rc;
  if ((rc = bind_ffn(m, il, L, err))) return rc;
  if (!m->layer_recurrent[il]) return bind_attn(m, il, L, err);
  const int64_t e = hp->n_embd, di = hp->ssm_d_inner, hv = hp->ssm_dt_rank;
  const int64_t cd = di + 2 * (int64_t)hp->ssm_n_group * hp->ssm_d_state;
  char n[96];
#define NAME(s) (snprintf(n, sizeof n, "blk.%d.%s", il, s), n)
  if ((rc = model_bind_vec(f, NAME("attn_norm.weight"), e, &L->attn_norm, true, err)) ||
      (rc = model_bind_weight(f, NAME("attn_qkv.weight"), e, cd, &L->in_qkv, true, err)) ||
      (rc = model_bind_weight(f, NAME("attn_gate.weight"), e, di, &L->in_z, true, err)) ||
      (rc = model_bind_weight(f, NAME("ssm_beta.weight"), e, hv, &L->in_beta, true, err)) ||
      (rc = model_bind_weight(f, NAME("ssm_alpha.weight"), e, hv, &L->in_alpha, true, err)) ||
      (rc = model_bind_weight(f, NAME("ssm_out.weight"), di, e, &L->ssm_out, true, err)) ||
      (rc = model_bind_vec(f, NAME("ssm_dt.bias"), hv, &L->ssm_dt, true, err)) ||
      (rc = model_bind_vec(f, NAME("ssm_a"), hv, &L->ssm_a, true, err)) ||
      (rc = model_bind_vec(f, NAME("ssm_norm.weight"), hp->ssm_d_state, &L->ssm_norm, true, err)))
    return rc;
  /* the conv kernel: [conv_dim][d_conv] F32, one row of taps per channel */
  const gguf_tensor *t = gguf_find_tensor(f, NAME("ssm_conv1d.weight"));
  if (!t) return pw_seterr(err, PW_EFORMAT, "tensor %s is missing", n);
  if (t->type != PW_DT_F32 || t->n_dims != 2 || (int64_t)t->ne[0] != hp->ssm_d_conv || (int64_t)t->ne[1] != cd ||
      (uintptr_t)t->data % 4)
    return pw_seterr(err, PW_EFORMAT, "tensor %s: expected F32 [%d, %lld]", n, hp->ssm_d_conv, (long long)cd);
  L->conv1d = t->data;
#undef NAME
  L->rs_slot = 0; /* numbered by model.c */
  return 0;
}

/* ---- the layer ------------------------------------------------------------ */

static int mixer_ops(const layer_w *L, float *const *bufs, pw_mm_op o[4]) {
  if (L->rs_slot >= 0) {
    o[0] = (pw_mm_op){L->in_qkv.type, L->in_qkv.data, L->in_qkv.n_out, bufs ? bufs[0] : NULL};
    o[1] = (pw_mm_op){L->in_z.type, L->in_z.data, L->in_z.n_out, bufs ? bufs[1] : NULL};
    o[2] = (pw_mm_op){L->in_beta.type, L->in_beta.data, L->in_beta.n_out, bufs ? bufs[2] : NULL};
    o[3] = (pw_mm_op){L->in_alpha.type, L->in_alpha.data, L->in_alpha.n_out, bufs ? bufs[3] : NULL};
    return 4;
  }
  o[0] = (pw_mm_op){L->wq.type, L->wq.data, L->wq.n_out, bufs ? bufs[0] : NULL};
  o[1] = (pw_mm_op){L->wk.type, L->wk.data, L->wk.n_out, bufs ? bufs[1] : NULL};
  o[2] = (pw_mm_op){L->wv.type, L->wv.data, L->wv.n_out, bufs ? bufs[2] : NULL};
  return 3;
}

static void gu_ops(const layer_w *L, model_ctx *c, pw_mm_op o[2]) {
  o[0] = (pw_mm_op){L->w_gate.type, L->w_gate.data, L->w_gate.n_out, c ? c->gate : NULL};
  o[1] = (pw_mm_op){L->w_up.type, L->w_up.data, L->w_up.n_out, c ? c->up : NULL};
}

/* c->arch_act per pass of B entries: the attention layers' query+gate
 * rows and gates, or the DeltaNet's projections, conv output and result;
 * with experts, the MLP's output and the moe_ffn op's scratch; with an MTP
 * block, its concatenated input. */
typedef struct q35_act {
  float *qfull, *qgate;                         /* [B][2 qd], [B][qd] */
  float *qkv, *conv, *z, *beta, *alpha, *dout;  /* [B][conv_dim] x2, [B][d_inner], [B][hv] x2, [B][d_inner] */
  float *ffn_out, *moe;                         /* [B][n_embd], model_moe_scratch_floats (experts only) */
  float *cat;                                   /* [B][2 n_embd] (MTP only) */
} q35_act;

static size_t act_split(const model *m, int B, float *base, q35_act *a) {
  const model_hparams *hp = &m->hp;
  const size_t qd = (size_t)hp->n_head * hp->head_dim, di = (size_t)hp->ssm_d_inner, hv = (size_t)hp->ssm_dt_rank;
  const size_t cd = di + 2 * (size_t)hp->ssm_n_group * hp->ssm_d_state, E = (size_t)hp->n_embd;
  const bool moe = hp->n_expert > 0;
  /* each region starts on a cache line */
#define R(x) (((size_t)(x) + 15) / 16 * 16)
  const size_t sizes[11] = {R(B * 2 * qd), R(B * qd), R(B * cd), R(B * cd), R(B * di), R(B * hv), R(B * hv), R(B * di),
                            moe ? R(B * E) : 0, R(model_moe_scratch_floats(hp, B)), m->has_mtp ? R(B * 2 * E) : 0};
#undef R
  float **outs[11] = {&a->qfull, &a->qgate, &a->qkv, &a->conv, &a->z, &a->beta, &a->alpha, &a->dout,
                      &a->ffn_out, &a->moe, &a->cat};
  size_t off = 0;
  for (int i = 0; i < 11; i++) {
    if (base) *outs[i] = base + off;
    off += sizes[i];
  }
  return off;
}

static size_t act_floats(const model *m, int max_batch) { return act_split(m, max_batch, NULL, &(q35_act){0}); }

/* the matmul scratch of a block's MLP */
static size_t ffn_scratch_size(const model *m, const layer_w *L, int max_batch) {
  if (m->hp.n_expert > 0) return model_moe_scratch_size(m, L, max_batch);
  pw_mm_op gu[2];
  gu_ops(L, NULL, gu);
  const size_t a = pw_matmul_multi_scratch_size(gu, 2, m->hp.n_embd, max_batch),
               b = pw_matmul_scratch_size(L->w_down.type, L->w_down.n_in, max_batch);
  return a > b ? a : b;
}

static size_t scratch_size(const model *m, int il, int max_batch) {
  const layer_w *L = &m->layers[il];
  pw_mm_op mx[4];
  const int k = mixer_ops(L, NULL, mx);
  const model_weight *out = L->rs_slot >= 0 ? &L->ssm_out : &L->wo;
  size_t sz[3] = {pw_matmul_multi_scratch_size(mx, k, m->hp.n_embd, max_batch),
                  pw_matmul_scratch_size(out->type, out->n_in, max_batch), ffn_scratch_size(m, L, max_batch)};
  size_t mm = 0;
  for (int i = 0; i < 3; i++)
    if (sz[i] > mm) mm = sz[i];
  return mm;
}

static void prefetch_layer(model_ctx *c, int il, int n) {
  const model *m = c->m;
  pw_mm_op next[4];
  const int k = mixer_ops(&m->layers[il], NULL, next);
  m->be->prefetch_weights(c, next, k, m->hp.n_embd, n);
}

static void prefetch_w(model_ctx *c, const model_weight *w, int n) {
  const pw_mm_op op = {w->type, w->data, w->n_out, NULL};
  c->m->be->prefetch_weights(c, &op, 1, w->n_in, n);
}

/* gated full attention: c->xn (normed input) -> c->xn (projected output) */
static void attn_mixer(model_ctx *c, model_kv *kv, const model_entry *e, int n, const layer_w *L,
                       const q35_act *a) {
  const model *m = c->m;
  const model_backend *be = m->be;
  const model_hparams *hp = &m->hp;
  const int E = hp->n_embd, hd = hp->head_dim, H = hp->n_head, qd = H * hd;
  pw_mm_op qkv[4];
  mixer_ops(L, (float *const[]){a->qfull, c->k, c->v, NULL}, qkv);
  be->matmul_multi(c, qkv, 3, E, c->xn, n);
  /* each head's query and gate sit side by side in the projection */
  for (int t = 0; t < n; t++)
    for (int h = 0; h < H; h++) {
      const float *src = a->qfull + ((size_t)t * H + h) * 2 * hd;
      memcpy(c->q + ((size_t)t * H + h) * hd, src, (size_t)hd * sizeof(float));
      memcpy(a->qgate + ((size_t)t * H + h) * hd, src + hd, (size_t)hd * sizeof(float));
    }
  be->rmsnorm(c, c->q, c->q, L->q_norm, n * H, hd, hp->rms_eps);
  be->rmsnorm(c, c->k, c->k, L->k_norm, n * hp->n_head_kv, hd, hp->rms_eps);
  be->rope(c, c->q, n, H, false);
  be->rope(c, c->k, n, hp->n_head_kv, false);
  be->kv_store(c, kv, e, n, L->kv_slot);
  prefetch_w(c, &L->wo, n);
  be->attention(c, kv, e, n, L->kv_slot, 1.0f / sqrtf((float)hd), 0, NULL);
  be->mul_sigmoid(c, c->att, a->qgate, (int64_t)n * qd);
  be->matmul(c, &L->wo, c->att, n, c->xn);
}

/* gated DeltaNet: c->xn (normed input) -> c->xn (projected output) */
static void dnet_mixer(model_ctx *c, model_kv *kv, const model_entry *e, int n, const layer_w *L,
                       const q35_act *a) {
  const model *m = c->m;
  const model_backend *be = m->be;
  const model_hparams *hp = &m->hp;
  const int E = hp->n_embd, S = hp->ssm_d_state, hv = hp->ssm_dt_rank, di = hp->ssm_d_inner;
  pw_mm_op in[4];
  mixer_ops(L, (float *const[]){a->qkv, a->z, a->beta, a->alpha}, in);
  be->prefetch_vec(L->ssm_dt, hv);
  be->prefetch_vec(L->ssm_a, hv);
  be->matmul_multi(c, in, 4, E, c->xn, n);
  prefetch_w(c, &L->ssm_out, n);
  const model_dnet_args da = {L, L->rs_slot, a->qkv, a->conv, a->beta, a->alpha, a->dout};
  be->delta_net(c, kv, e, n, &da);
  /* RMSNorm per value head, times SiLU(z): z = silu(z) * normed */
  be->rmsnorm(c, a->dout, a->dout, L->ssm_norm, n * hv, S, hp->rms_eps);
  be->swiglu(c, a->z, a->dout, (int64_t)n * di);
  be->matmul(c, &L->ssm_out, a->z, n, c->xn);
}

/* One block over the pass (c->x in, c->x out); then the hints for what
 * comes next: layer il + 1, the output head after the last layer, nothing
 * for the MTP block (il < 0). */
static void block(model_ctx *c, model_kv *kv, const model_entry *e, int n, const layer_w *L, int il) {
  const model *m = c->m;
  const model_backend *be = m->be;
  const model_hparams *hp = &m->hp;
  const int E = hp->n_embd;
  q35_act a;
  act_split(m, c->max_batch, c->arch_act, &a);
  const bool moe = hp->n_expert > 0;
  pw_mm_op gu[2];
  gu_ops(L, c, gu);
  be->rmsnorm(c, c->xn, c->x, L->attn_norm, n, E, hp->rms_eps);
  if (L->rs_slot >= 0) dnet_mixer(c, kv, e, n, L, &a);
  else attn_mixer(c, kv, e, n, L, &a);
  be->prefetch_vec(L->ffn_norm, E);
  if (moe) prefetch_w(c, &L->ffn_gate_inp, n);
  else be->prefetch_weights(c, gu, 2, E, n);
  be->add(c, c->x, c->xn, c->x, (int64_t)n * E);
  be->rmsnorm(c, c->xn, c->x, L->ffn_norm, n, E, hp->rms_eps);
  float *ffn_out = c->xn;
  if (moe) {
    /* the experts read their own weights as the routing finds them: the
     * hints for the next layer come after */
    ffn_out = a.ffn_out;
    be->moe_ffn(c, L, c->xn, n, ffn_out, a.moe);
  } else {
    prefetch_w(c, &L->w_down, n);
    be->matmul_multi(c, gu, 2, E, c->xn, n);
    be->swiglu(c, c->gate, c->up, (int64_t)n * hp->n_ff);
  }
  if (il >= 0) {
    be->prefetch_vec(il + 1 < hp->n_layer ? m->layers[il + 1].attn_norm : m->output_norm, E);
    if (il + 1 < hp->n_layer) prefetch_layer(c, il + 1, n);
    else prefetch_w(c, &m->output, n);
  }
  if (!moe) be->matmul(c, &L->w_down, c->gate, n, c->xn);
  be->add(c, c->x, ffn_out, c->x, (int64_t)n * E);
}

static void layer(model_ctx *c, model_kv *kv, const model_entry *e, int n, int il) {
  block(c, kv, e, n, &c->m->layers[il], il);
}

/* ---- the MTP block ---------------------------------------------------------- */

size_t model_mtp_scratch_size(const model *m, int max_batch) {
  const mtp_w *t = &m->mtp;
  const layer_w *L = &t->blk;
  const model_weight *head = t->head.data ? &t->head : &m->output;
  pw_mm_op mx[4];
  const int k = mixer_ops(L, NULL, mx);
  size_t sz[5] = {pw_matmul_multi_scratch_size(mx, k, m->hp.n_embd, max_batch),
                  pw_matmul_scratch_size(L->wo.type, L->wo.n_in, max_batch), ffn_scratch_size(m, L, max_batch),
                  pw_matmul_scratch_size(t->eh_proj.type, t->eh_proj.n_in, max_batch),
                  pw_matmul_scratch_size(head->type, head->n_in, max_batch)};
  size_t mm = 0;
  for (int i = 0; i < 5; i++)
    if (sz[i] > mm) mm = sz[i];
  return mm;
}

/* As llama.cpp's qwen35 MTP graph: x = eh_proj([enorm(embed(token));
 * hnorm(h)]), one full-attention block (its KV in layer 0 of kv), the head
 * norm (shared_head_norm, else output_norm), the head (shared_head_head,
 * else the output). The concatenated input is built in the activations'
 * cat rows. */
int model_mtp_forward(model_ctx *c, model_kv *kv, const model_entry *e, int n, const float *h, float *logits,
                      float *h_out, char *err) {
  const model *m = c->m;
  const model_hparams *hp = &m->hp;
  const model_backend *be = m->be;
  const mtp_w *t = &m->mtp;
  if (!m->has_mtp) return pw_seterr(err, PW_EUNSUPPORTED, "the model has no MTP block");
  if (n < 1 || n > c->max_batch) return pw_seterr(err, PW_EINVAL, "batch of %d entries (limit %d)", n, c->max_batch);
  if (kv->n_layer != 1 || kv->n_rs_layer != 0) return pw_seterr(err, PW_EINVAL, "not an MTP cache");
  for (int i = 0; i < n; i++) {
    if (e[i].seq < 0 || e[i].seq >= kv->n_seq)
      return pw_seterr(err, PW_EINVAL, "entry %d: sequence %d out of range", i, e[i].seq);
    if (e[i].token < 0 || e[i].token >= hp->n_vocab)
      return pw_seterr(err, PW_EINVAL, "entry %d: token %d out of range (vocabulary %d)", i, e[i].token, hp->n_vocab);
    int expect = kv->len[e[i].seq];
    for (int u = 0; u < i; u++)
      if (e[u].seq == e[i].seq) expect++;
    if (e[i].pos != expect)
      return pw_seterr(err, PW_EINVAL, "entry %d: position %d does not continue sequence %d (expected %d)", i,
                       e[i].pos, e[i].seq, expect);
    if (e[i].pos >= kv->n_ctx || e[i].pos >= c->max_ctx)
      return pw_seterr(err, PW_ECONTEXT, "sequence %d: position %d exceeds the context of %d", e[i].seq, e[i].pos,
                       kv->n_ctx);
  }
  const int E = hp->n_embd;
  const model_weight *emb = t->embed.data ? &t->embed : &m->tok_embd;
  const model_weight *head = t->head.data ? &t->head : &m->output;
  q35_act a;
  act_split(m, c->max_batch, c->arch_act, &a);
  float *cat = a.cat; /* [n][2E] */
  for (int i = 0; i < n; i++) {
    float *row = cat + (size_t)i * 2 * E;
    pw_get_row(emb->type, emb->data, E, e[i].token, row);
    be->rmsnorm(c, row, row, t->enorm, 1, E, hp->rms_eps);
    be->rmsnorm(c, row + E, h + (size_t)i * E, t->hnorm, 1, E, hp->rms_eps);
  }
  be->matmul(c, &t->eh_proj, cat, n, c->x);
  be->begin(c, e, n);
  block(c, kv, e, n, &t->blk, -1);
  for (int i = 0; i < n; i++) kv->len[e[i].seq] = e[i].pos + 1 > kv->len[e[i].seq] ? e[i].pos + 1 : kv->len[e[i].seq];
  int nw = 0;
  const float *hn = t->head_norm ? t->head_norm : m->output_norm;
  for (int i = 0; i < n; i++)
    if (e[i].want_logits) be->rmsnorm(c, c->rows + (size_t)nw++ * E, c->x + (size_t)i * E, hn, 1, E, hp->rms_eps);
  if (nw == 0) return 0;
  if (h_out) memcpy(h_out, c->rows, (size_t)nw * E * sizeof(float));
  if (logits) be->matmul(c, head, c->rows, nw, logits);
  return 0;
}

const model_arch_ops model_arch_qwen35 = {.name = "qwen35",
                                          .arch = MODEL_ARCH_QWEN35,
                                          .rope_neox = true,
                                          .qk_norm = true,
                                          .load_hparams = load_hparams,
                                          .bind_layer = bind_layer,
                                          .scratch_size = scratch_size,
                                          .layer = layer,
                                          .prefetch_layer = prefetch_layer,
                                          .act_floats = act_floats,
                                          .partial_rope = true};

const model_arch_ops model_arch_qwen35moe = {.name = "qwen35moe",
                                             .arch = MODEL_ARCH_QWEN35MOE,
                                             .rope_neox = true,
                                             .qk_norm = true,
                                             .load_hparams = load_hparams,
                                             .bind_layer = bind_layer,
                                             .scratch_size = scratch_size,
                                             .layer = layer,
                                             .prefetch_layer = prefetch_layer,
                                             .act_floats = act_floats,
                                             .partial_rope = true,
                                             .ff_optional = true};
