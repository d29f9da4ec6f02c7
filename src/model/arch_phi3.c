/* arch_phi3.c - Phi-3's decoder block, as llama.cpp's `phi3` graph computes
 * it: the llama block with fused projections (one attn_qkv weight whose
 * rows are Q, K then V; one ffn_up weight whose rows are the gate then the
 * up projection), the query scaled by 1/sqrt(head_dim) before attention,
 * and LongRoPE: per-pair frequency factors, long or short by the context
 * size against the original context, with the file's attention factor.
 * Separate q/k/v weights are taken too. Phi-3's sliding window is not
 * applied, as llama.cpp does not apply it (a note says so at load).
 *
 * The fused weights are bound as row ranges of one tensor (views), so the
 * layer runs the same matmuls as the llama block. */
#include "model/model_int.h"

#include "base/error.h"
#include "base/log.h"
#include "tensor/dtype.h"

#include <math.h>
#include <stdio.h>

static int load_hparams(model *m, char *err) {
  const model_hparams *hp = &m->hp;
  const gguf_file *f = m->f;
  uint32_t w;
  if (gguf_get_u32(f, "phi3.attention.sliding_window", &w) && w > 0)
    pw_log(PW_LOG_INFO, "phi3: sliding window %u not applied (as llama.cpp)", w);
  int rc = model_bind_vec(f, "rope_factors_long.weight", hp->head_dim / 2, &m->rope_long, false, err);
  if (rc < 0) return rc;
  rc = model_bind_vec(f, "rope_factors_short.weight", hp->head_dim / 2, &m->rope_short, false, err);
  if (rc < 0) return rc;
  if (!m->rope_long != !m->rope_short)
    return pw_seterr(err, PW_EFORMAT, "phi3: rope_factors_long and rope_factors_short come together");
  return 0;
}

/* rows [r0, r0 + n) of w as a weight of its own */
static model_weight rows_of(const model_weight *w, int64_t r0, int64_t n) {
  model_weight v = *w;
  v.data = (const char *)w->data + pw_dtype_row_size(w->type, (uint64_t)w->n_in) * (uint64_t)r0;
  v.n_out = n;
  return v;
}

static int bind_layer(model *m, int il, char *err) {
  const gguf_file *f = m->f;
  const model_hparams *hp = &m->hp;
  layer_w *L = &m->layers[il];
  int64_t e = hp->n_embd, qd = (int64_t)hp->n_head * hp->head_dim, kvd = (int64_t)hp->n_head_kv * hp->head_dim;
  int rc;
  char n[96];
  model_weight fused;
#define NAME(s) (snprintf(n, sizeof n, "blk.%d.%s", il, s), n)
  if ((rc = model_bind_vec(f, NAME("attn_norm.weight"), e, &L->attn_norm, true, err))) return rc;
  rc = model_bind_weight(f, NAME("attn_qkv.weight"), e, qd + 2 * kvd, &fused, false, err);
  if (rc < 0) return rc;
  if (rc == 0) {
    L->wq = rows_of(&fused, 0, qd);
    L->wk = rows_of(&fused, qd, kvd);
    L->wv = rows_of(&fused, qd + kvd, kvd);
  } else if ((rc = model_bind_weight(f, NAME("attn_q.weight"), e, qd, &L->wq, true, err)) ||
             (rc = model_bind_weight(f, NAME("attn_k.weight"), e, kvd, &L->wk, true, err)) ||
             (rc = model_bind_weight(f, NAME("attn_v.weight"), e, kvd, &L->wv, true, err))) {
    return rc;
  }
  if ((rc = model_bind_weight(f, NAME("attn_output.weight"), qd, e, &L->wo, true, err))) return rc;
  if ((rc = model_bind_vec(f, NAME("ffn_norm.weight"), e, &L->ffn_norm, true, err))) return rc;
  if ((rc = model_bind_weight(f, NAME("ffn_up.weight"), e, 2 * (int64_t)hp->n_ff, &fused, true, err))) return rc;
  L->w_gate = rows_of(&fused, 0, hp->n_ff);
  L->w_up = rows_of(&fused, hp->n_ff, hp->n_ff);
  if ((rc = model_bind_weight(f, NAME("ffn_down.weight"), hp->n_ff, e, &L->w_down, true, err))) return rc;
#undef NAME
  return 0;
}

static void layer(model_ctx *c, model_kv *kv, const model_entry *e, int n, int il) {
  const model *m = c->m;
  const model_backend *be = m->be;
  const model_hparams *hp = &m->hp;
  const layer_w *L = &m->layers[il];
  const int E = hp->n_embd, hd = hp->head_dim, qd = hp->n_head * hd;
  pw_mm_op qkv[3], gu[2];
  model_qkv_ops(L, c, qkv);
  model_gu_ops(L, c, gu);
  be->rmsnorm(c, c->xn, c->x, L->attn_norm, n, E, hp->rms_eps);
  be->matmul_multi(c, qkv, 3, E, c->xn, n);
  be->rope(c, c->q, n, hp->n_head, false);
  be->rope(c, c->k, n, hp->n_head_kv, false);
  /* llama.cpp scales Q in f32 and attends with scale 1 */
  be->scale(c, c->q, c->q, 1.0f / sqrtf((float)hd), (int64_t)n * qd);
  be->kv_store(c, kv, e, n, il);
  be->attention(c, kv, e, n, il, 1.0f, 0, NULL);
  be->prefetch_weights(c, gu, 2, E, n);
  be->matmul(c, &L->wo, c->att, n, c->xn);
  be->add(c, c->x, c->xn, c->x, (int64_t)n * E);
  be->rmsnorm(c, c->xn, c->x, L->ffn_norm, n, E, hp->rms_eps);
  be->matmul_multi(c, gu, 2, E, c->xn, n);
  be->swiglu(c, c->gate, c->up, (int64_t)n * hp->n_ff);
  if (il + 1 < hp->n_layer) model_layer_prefetch(c, il + 1, n);
  be->matmul(c, &L->w_down, c->gate, n, c->xn);
  be->add(c, c->x, c->x, c->xn, (int64_t)n * E);
}

const model_arch_ops model_arch_phi3 = {.name = "phi3",
                                        .arch = MODEL_ARCH_PHI3,
                                        .rope_neox = true,
                                        .load_hparams = load_hparams,
                                        .bind_layer = bind_layer,
                                        .scratch_size = model_layer_scratch_size,
                                        .layer = layer,
                                        .prefetch_layer = model_layer_prefetch};
