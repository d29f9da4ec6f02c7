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
} dnet_job;

/* conv1d + SiLU over a range of channels: each channel's window advances
 * through the entries in order. */
static void conv_worker(void *ctx, int ith, int nth) {
  const dnet_job *j = ctx;
  const model_kv *kv = j->kv;
  const int cd = kv->conv_dim, cw = kv->conv_w, nc = cw + 1, rl = j->a->rs_slot;
  const float *w = j->a->L->conv1d;
  long lo, hi;
  pw_split(cd, ith, nth, &lo, &hi);
  for (int t = 0; t < j->n; t++) {
    float *win = model_kv_conv(kv, rl, j->e[t].seq);
    const float *x = j->a->qkv + (size_t)t * cd;
    float *y = j->a->conv_out + (size_t)t * cd;
    for (long ch = lo; ch < hi; ch++) {
      float *s = win + (size_t)ch * cw;
      const float *k = w + (size_t)ch * nc;
      /* summed in float in tap order, as ggml's ssm_conv */
      float sum = 0.0f;
      for (int i = 0; i < cw; i++) sum += s[i] * k[i];
      sum += x[ch] * k[cw];
      for (int i = 0; i + 1 < cw; i++) s[i] = s[i + 1];
      if (cw > 0) s[cw - 1] = x[ch];
      y[ch] = sum / (1.0f + expf(-sum));
    }
  }
}

/* x / max(||x||, eps), the sum of squares in double as ggml's l2_norm */
static void l2_norm(float *x, int n, float eps) {
  double sum = 0;
  for (int i = 0; i < n; i++) sum += (double)(x[i] * x[i]);
  const float scale = 1.0f / fmaxf(sqrtf((float)sum), eps);
  pw_scale(x, x, scale, n);
}

static void norm_worker(void *ctx, int ith, int nth) {
  const dnet_job *j = ctx;
  const model_hparams *hp = &j->c->m->hp;
  const int cd = j->kv->conv_dim, dk = hp->ssm_d_state, hk = hp->ssm_n_group;
  long lo, hi;
  pw_split((long)j->n * 2 * hk, ith, nth, &lo, &hi);
  for (long r = lo; r < hi; r++) {
    const long t = r / (2 * hk), h = r % (2 * hk); /* q heads, then k heads */
    l2_norm(j->a->conv_out + (size_t)t * cd + (size_t)h * dk, dk, hp->rms_eps);
  }
}

/* the delta rule for a range of value heads, every entry in order */
static void state_worker(void *ctx, int ith, int nth) {
  const dnet_job *j = ctx;
  const model_hparams *hp = &j->c->m->hp;
  const model_kv *kv = j->kv;
  const layer_w *L = j->a->L;
  const int cd = kv->conv_dim, S = hp->ssm_d_state, hk = hp->ssm_n_group, hv = hp->ssm_dt_rank;
  const float scale = 1.0f / sqrtf((float)S);
  long lo, hi;
  pw_split(hv, ith, nth, &lo, &hi);
  for (long h = lo; h < hi; h++) {
    const long kh = h % hk;
    for (int t = 0; t < j->n; t++) {
      float *M = model_kv_ssm(kv, j->a->rs_slot, j->e[t].seq) + (size_t)h * S * S;
      const float *row = j->a->conv_out + (size_t)t * cd;
      const float *q = row + (size_t)kh * S, *k = row + (size_t)(hk + kh) * S, *v = row + (size_t)2 * hk * S + h * S;
      const float a = j->a->alpha[(size_t)t * hv + h] + L->ssm_dt[h];
      const float sp = a > 20.0f ? a : logf(1.0f + expf(a));
      const float decay = expf(sp * L->ssm_a[h]);
      const float beta = 1.0f / (1.0f + expf(-j->a->beta[(size_t)t * hv + h]));
      float *o = j->a->out + (size_t)t * hv * S + (size_t)h * S;
      for (int r = 0; r < S; r++) {
        float *m = M + (size_t)r * S;
        pw_scale(m, m, decay, S);
        const float d = (v[r] - pw_dot_f32(S, m, k)) * beta;
        pw_axpy(m, d, k, S);
        o[r] = pw_dot_f32(S, m, q) * scale;
      }
    }
  }
}

void model_cpu_delta_net(model_ctx *c, model_kv *kv, const model_entry *e, int n, const model_dnet_args *a) {
  dnet_job j = {c, kv, e, n, a};
  pw_pool *p = c->m->pool;
  pw_pool_run(p, conv_worker, &j);
  pw_pool_run(p, norm_worker, &j);
  pw_pool_run(p, state_worker, &j);
}
