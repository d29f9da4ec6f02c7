/* backend_cpu_dnet.c - the gated DeltaNet core of a qwen35 recurrent layer
 * on the CPU (the delta_net op of model_int.h's interface).
 *
 * For each entry of the pass, in entry order (a sequence's entries are in
 * position order, so each sequence's state advances token by token; entries
 * of other sequences touch other states, which keeps the result of an entry
 * independent of the batch):
 *   conv1d   each channel of the projected qkv through a causal kernel of
 *            d_conv taps over the sequence's last d_conv - 1 inputs (the
 *            rolling window kept in the state), then SiLU
 *   q, k     split per key head and L2-normalised (eps = rms eps)
 *   gates    g = softplus(alpha + dt_bias) * A (A = -exp(A_log), < 0),
 *            beta = sigmoid(beta_raw)
 *   state    per value head h (key head h % n_k_heads, as llama.cpp tiles
 *            them): S = exp(g) S; d = beta (v - S^T k); S += k d^T;
 *            o = S^T q / sqrt(d_state)
 * The state is kept transposed (row j = column j of S), so one row at a
 * time does all four steps: one pass over the head's state per token.
 *
 * This is the token-by-token (recurrent) form for prefill as well as
 * decode, as llama.cpp's CPU backend runs it (its fused op); a chunked
 * form would trade it for matrix products over chunks of a prompt.
 *
 * Not here: the projections and the gated norm around it (arch_qwen35.c). */
#include "model/model_int.h"

#include "tensor/ops.h"

#include <math.h>
#include <stdatomic.h>
#include <string.h>

typedef struct dnet_job {
  model_ctx *c;
  model_kv *kv;
  const model_entry *e;
  int n;
  const model_dnet_args *a;
  const pw_ops *ops; /* fetched once: the wrappers re-check initialisation per call */
} dnet_job;

/* conv1d + SiLU of one channel over every entry of the pass, in order: the
 * window of each entry's sequence advances by one input per entry. */
static void conv_channel(const dnet_job *j, long ch) {
  const model_kv *kv = j->kv;
  const int cd = kv->conv_dim, cw = kv->conv_w, nc = cw + 1, rl = j->a->rs_slot;
  const float *k = j->a->L->conv1d + (size_t)ch * nc;
  for (int t = 0; t < j->n; t++) {
    float *s = model_kv_conv(kv, rl, j->e[t].seq) + (size_t)ch * cw;
    const float x = j->a->qkv[(size_t)t * cd + ch];
    /* summed in float in tap order, as ggml's ssm_conv */
    float sum = 0.0f;
    for (int i = 0; i < cw; i++) sum += s[i] * k[i];
    sum += x * k[cw];
    for (int i = 0; i + 1 < cw; i++) s[i] = s[i + 1];
    if (cw > 0) s[cw - 1] = x;
    j->a->conv_out[(size_t)t * cd + ch] = sum / (1.0f + expf(-sum));
  }
}

/* x / max(||x||, eps), the sum of squares in double as ggml's l2_norm */
static void l2_norm(const pw_ops *ops, float *x, int n, float eps) {
  double sum = 0;
  for (int i = 0; i < n; i++) sum += (double)(x[i] * x[i]);
  const float scale = 1.0f / fmaxf(sqrtf((float)sum), eps);
  ops->scale(x, x, scale, n);
}

/* One pool run per layer: a thread owns a range of key heads and the value
 * heads that read them (value head h reads key head h % n_k_heads, as
 * llama.cpp tiles them), so it convolves exactly the channels it then
 * normalises and feeds to its states, and needs nothing from the other
 * threads: no barrier between the conv, the norms and the delta rule. Each
 * value is computed by the same code in the same order as with any other
 * split, so the bits do not depend on the thread count. */
static void dnet_worker(void *ctx, int ith, int nth) {
  const dnet_job *j = ctx;
  const model_hparams *hp = &j->c->m->hp;
  const model_kv *kv = j->kv;
  const layer_w *L = j->a->L;
  const pw_ops *ops = j->ops;
  const int cd = kv->conv_dim, S = hp->ssm_d_state, hk = hp->ssm_n_group, hv = hp->ssm_dt_rank;
  const float scale = 1.0f / sqrtf((float)S);
  long lo, hi;
  pw_split(hk, ith, nth, &lo, &hi);
  if (lo >= hi) return;
  /* conv: the q and k channels of the key heads, the v channels of their
   * value heads */
  for (long kh = lo; kh < hi; kh++) {
    for (long ch = kh * S; ch < (kh + 1) * S; ch++) conv_channel(j, ch);
    for (long ch = (hk + kh) * S; ch < (hk + kh + 1) * S; ch++) conv_channel(j, ch);
    for (long h = kh; h < hv; h += hk)
      for (long ch = 2 * (long)hk * S + h * S; ch < 2 * (long)hk * S + (h + 1) * S; ch++) conv_channel(j, ch);
  }
  for (int t = 0; t < j->n; t++)
    for (long kh = lo; kh < hi; kh++) {
      float *row = j->a->conv_out + (size_t)t * cd;
      l2_norm(ops, row + (size_t)kh * S, S, hp->rms_eps);
      l2_norm(ops, row + (size_t)(hk + kh) * S, S, hp->rms_eps);
    }
  /* the delta rule, every entry in order */
  for (long kh = lo; kh < hi; kh++)
    for (long h = kh; h < hv; h += hk)
      for (int t = 0; t < j->n; t++) {
        float *M = model_kv_ssm(kv, j->a->rs_slot, j->e[t].seq) + (size_t)h * S * S;
        const float *row = j->a->conv_out + (size_t)t * cd;
        const float *q = row + (size_t)kh * S, *k = row + (size_t)(hk + kh) * S,
                    *v = row + (size_t)2 * hk * S + h * S;
        const float a = j->a->alpha[(size_t)t * hv + h] + L->ssm_dt[h];
        const float sp = a > 20.0f ? a : logf(1.0f + expf(a));
        const float decay = expf(sp * L->ssm_a[h]);
        const float beta = 1.0f / (1.0f + expf(-j->a->beta[(size_t)t * hv + h]));
        float *o = j->a->out + (size_t)t * hv * S + (size_t)h * S;
        for (int r = 0; r < S; r++) {
          float *m = M + (size_t)r * S;
          ops->scale(m, m, decay, S);
          const float d = (v[r] - ops->dot(S, m, k)) * beta;
          ops->axpy(m, d, k, S);
          o[r] = ops->dot(S, m, q) * scale;
        }
      }
}

void model_cpu_delta_net(model_ctx *c, model_kv *kv, const model_entry *e, int n, const model_dnet_args *a) {
  dnet_job j = {c, kv, e, n, a, pw_ops_get()};
  pw_pool_run(c->m->pool, dnet_worker, &j);
}
