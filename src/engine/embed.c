/* embed.c - pooled embeddings: the mean of the final hidden states over the
 * prompt, L2-normalised. The step that feeds embedding prompts is sched.c's. */
#include "engine/engine_int.h"

#include <math.h>

/* Adds the final hidden states of a chunk (positions in order) to the
 * running sum; the order of additions is the prompt order whatever the
 * chunking, so the result does not depend on the batch. */
void eng_embd_accumulate(engine *e, engine_req *r, const float *rows, int n) {
  for (int t = 0; t < n; t++) {
    const float *h = rows + (size_t)t * e->n_embd;
    for (int i = 0; i < e->n_embd; i++) r->embd_acc[i] += h[i];
  }
}

void eng_embd_finish(engine *e, engine_req *r) {
  double ss = 0;
  for (int i = 0; i < e->n_embd; i++) {
    double v = r->embd_acc[i] / r->n_prompt;
    r->embd_acc[i] = v;
    ss += v * v;
  }
  double inv = ss > 0 ? 1.0 / sqrt(ss) : 0.0;
  for (int i = 0; i < e->n_embd; i++) r->embd[i] = (float)(r->embd_acc[i] * inv);
}

