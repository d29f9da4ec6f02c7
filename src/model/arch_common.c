/* arch_common.c - what the architectures' blocks share: their attention and
 * MLP projections as matmul ops, the scratch those need, and prefetch
 * hints. Each arch_*.c composes its layer from these and the backend ops. */
#include "model/model_int.h"

void model_qkv_ops(const layer_w *L, model_ctx *c, pw_mm_op o[3]) {
  o[0] = (pw_mm_op){L->wq.type, L->wq.data, L->wq.n_out, c ? c->q : NULL};
  o[1] = (pw_mm_op){L->wk.type, L->wk.data, L->wk.n_out, c ? c->k : NULL};
  o[2] = (pw_mm_op){L->wv.type, L->wv.data, L->wv.n_out, c ? c->v : NULL};
}

void model_gu_ops(const layer_w *L, model_ctx *c, pw_mm_op o[2]) {
  o[0] = (pw_mm_op){L->w_gate.type, L->w_gate.data, L->w_gate.n_out, c ? c->gate : NULL};
  o[1] = (pw_mm_op){L->w_up.type, L->w_up.data, L->w_up.n_out, c ? c->up : NULL};
}

size_t model_layer_scratch_size(const model *m, int il, int max_batch) {
  const layer_w *L = &m->layers[il];
  pw_mm_op qkv[3], gu[2];
  model_qkv_ops(L, NULL, qkv);
  model_gu_ops(L, NULL, gu);
  size_t sz[4] = {pw_matmul_multi_scratch_size(qkv, 3, m->hp.n_embd, max_batch),
                  pw_matmul_multi_scratch_size(gu, 2, m->hp.n_embd, max_batch),
                  pw_matmul_scratch_size(L->wo.type, L->wo.n_in, max_batch),
                  pw_matmul_scratch_size(L->w_down.type, L->w_down.n_in, max_batch)};
  size_t mm = 0;
  for (int i = 0; i < 4; i++)
    if (sz[i] > mm) mm = sz[i];
  return mm;
}

void model_layer_prefetch(model_ctx *c, int il, int n) {
  const model *m = c->m;
  pw_mm_op next[3];
  model_qkv_ops(&m->layers[il], NULL, next);
  m->be->prefetch_weights(c, next, 3, m->hp.n_embd, n);
}

void model_prefetch_weight(model_ctx *c, const model_weight *w, int n) {
  const pw_mm_op op = {w->type, w->data, w->n_out, NULL};
  c->m->be->prefetch_weights(c, &op, 1, w->n_in, n);
}
