/* embed.c - pooled embeddings. Decoders: the mean of the final hidden
 * states over the prompt. Encoders as their metadata says: the mean, the
 * first ([CLS]) or the last token's state, or for a reranker the first
 * token's state through the classification head (scores). Vectors are
 * L2-normalised (as llama.cpp's server does by default), scores are not.
 * The step that feeds embedding prompts is sched.c's. */
#include "engine/engine_int.h"

#include <math.h>

/* Takes the final hidden states of a chunk (positions in order, the first
 * at r->n_fed). The mean's additions run in prompt order whatever the
 * chunking, so the result does not depend on the batch. */
void eng_embd_accumulate(engine *e, engine_req *r, const float *rows, int n) {
  const int d = e->n_embd;
  switch (e->pooling) {
  case ENGINE_POOL_CLS:
  case ENGINE_POOL_RANK:
    if (r->n_fed == 0)
      for (int i = 0; i < d; i++) r->embd_acc[i] = rows[i];
    return;
  case ENGINE_POOL_LAST:
    for (int i = 0; i < d; i++) r->embd_acc[i] = rows[(size_t)(n - 1) * d + i];
    return;
  default:
    for (int t = 0; t < n; t++) {
      const float *h = rows + (size_t)t * d;
      for (int i = 0; i < d; i++) r->embd_acc[i] += h[i];
    }
  }
}

void eng_embd_finish(engine *e, engine_req *r) {
  const int d = e->n_embd;
  if (e->pooling == ENGINE_POOL_RANK) {
    /* the state as the model computed it (float), through the head */
    for (int i = 0; i < d; i++) r->embd[i] = (float)r->embd_acc[i];
    model_rank_head(e->ctx, r->embd, r->embd);
    return;
  }
  const double div = e->pooling == ENGINE_POOL_MEAN ? r->n_prompt : 1;
  double ss = 0;
  for (int i = 0; i < d; i++) {
    double v = r->embd_acc[i] / div;
    if (e->encoder) v = (float)v; /* the pooled vector in float, as llama.cpp's */
    r->embd_acc[i] = v;
    ss += v * v;
  }
  double inv = ss > 0 ? 1.0 / sqrt(ss) : 0.0;
  for (int i = 0; i < d; i++) r->embd[i] = (float)(r->embd_acc[i] * inv);
}
