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
 *            them), mathematically S = exp(g) S; d = beta (v - S^T k);
 *            S += k d^T; o = S^T q / sqrt(d_state)
 * The state goes in the chunked form (delta_run): positions are grouped in
 * blocks of MODEL_DNET_BLOCK; the state matrix is the one at the block's
 * start and changes once per block (a rank-BLOCK update), and a position's
 * delta and output come from that matrix and the block's earlier keys and
 * deltas, kept beside it. A pass reads the matrix once for all its
 * positions in a block instead of rewriting it per token, and every value
 * is computed the same way whichever pass brought its position: prefill in
 * one pass, in chunks, token by token, verification passes and plain
 * decode give the same bits (not llama.cpp's token-by-token bits: the
 * parity tests bound the difference). The matrix is kept transposed (row j
 * = column j of S), so the readout streams whole rows.
 *
 * One pool run per layer: a thread owns whole key heads and their value
 * heads (dnet_worker).
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

/* conv1d + SiLU of channels [c0, c1) for entry t: each channel's window
 * of t's sequence advances by one input. Entries go in order, a range of
 * channels at a time (contiguous in the rows and in the windows); the SiLU
 * is the vector kernel's, over the range. */
static void conv_range(const dnet_job *j, int t, long c0, long c1) {
  const model_kv *kv = j->kv;
  const int cd = kv->conv_dim, cw = kv->conv_w, nc = cw + 1;
  float *win = model_kv_conv(kv, j->a->rs_slot, j->e[t].seq);
  const float *x = j->a->qkv + (size_t)t * cd;
  float *y = j->a->conv_out + (size_t)t * cd;
  for (long ch = c0; ch < c1; ch++) {
    float *s = win + (size_t)ch * cw;
    const float *k = j->a->L->conv1d + (size_t)ch * nc;
    /* summed in float in tap order, as ggml's ssm_conv */
    float sum = 0.0f;
    for (int i = 0; i < cw; i++) sum += s[i] * k[i];
    sum += x[ch] * k[cw];
    for (int i = 0; i + 1 < cw; i++) s[i] = s[i + 1];
    if (cw > 0) s[cw - 1] = x[ch];
    y[ch] = sum;
  }
  j->ops->silu(y + c0, y + c0, c1 - c0);
}

/* x / max(||x||, eps), the sum of squares in double as ggml's l2_norm */
static void l2_norm(const pw_ops *ops, float *x, int n, float eps) {
  double sum = 0;
  for (int i = 0; i < n; i++) sum += (double)(x[i] * x[i]);
  const float scale = 1.0f / fmaxf(sqrtf((float)sum), eps);
  ops->scale(x, x, scale, n);
}

/* The gated delta rule of value head h (key head kh) for entries
 * [t0, t1): consecutive positions of one sequence inside one block of
 * MODEL_DNET_BLOCK. With S0 the state at the block's start, G_i the
 * block's cumulative log decay up to position i and w_mi = exp(G_i - G_m),
 * the recurrence S_i = g_i S_(i-1) + beta_i k_i (v_i - g_i S_(i-1)^T k_i)^T
 * unrolls to
 *   d_i = beta_i (v_i - exp(G_i) S0^T k_i - sum_(m<i) w_mi (k_m . k_i) d_m)
 *   o_i = exp(G_i) S0^T q_i + sum_(m<=i) w_mi (k_m . q_i) d_m
 *   S_end = exp(G_end) S0 + sum_m w_m,end k_m d_m^T   (once, at the block's end)
 * The S0 products of the run come from one pass over S0's rows; the
 * rest is per position over the block so far. Each value is computed by
 * the same operations whichever pass brought its position, so an output
 * depends on the positions only, not on how a prompt was split or
 * batched. */
static void delta_run(const dnet_job *j, long h, long kh, int t0, int t1, float scale) {
  const model_hparams *hp = &j->c->m->hp;
  const model_kv *kv = j->kv;
  const layer_w *L = j->a->L;
  const pw_ops *ops = j->ops;
  const int cd = kv->conv_dim, S = hp->ssm_d_state, hk = hp->ssm_n_group, hv = hp->ssm_dt_rank;
  const int C = MODEL_DNET_BLOCK;
  float *base = model_kv_ssm(kv, j->a->rs_slot, j->e[t0].seq) + (size_t)h * model_kv_ssm_head(kv);
  float *M = base, *Kb = base + (size_t)S * S, *Db = Kb + (size_t)C * S, *Gb = Db + (size_t)C * S;
#define Q_OF(t) (j->a->conv_out + (size_t)(t) * cd + (size_t)kh * S)
#define K_OF(t) (j->a->conv_out + (size_t)(t) * cd + (size_t)(hk + kh) * S)
#define V_OF(t) (j->a->conv_out + (size_t)(t) * cd + (size_t)2 * hk * S + (size_t)h * S)
#define O_OF(t) (j->a->out + (size_t)(t) * hv * S + (size_t)h * S)
  /* the cumulative log decays of the run's positions */
  float eg[MODEL_DNET_BLOCK];
  for (int t = t0; t < t1; t++) {
    const int i = j->e[t].pos % C;
    const float a = j->a->alpha[(size_t)t * hv + h] + L->ssm_dt[h];
    const float sp = a > 20.0f ? a : logf(1.0f + expf(a));
    Gb[i] = (i > 0 ? Gb[i - 1] : 0.0f) + sp * L->ssm_a[h];
    eg[t - t0] = expf(Gb[i]);
  }
  /* S0^T q into o and v - exp(G) S0^T k into v, row by row of S0 */
  for (int r = 0; r < S; r++) {
    const float *mr = M + (size_t)r * S;
    for (int t = t0; t < t1; t++) {
      O_OF(t)[r] = eg[t - t0] * ops->dot(S, mr, Q_OF(t));
      V_OF(t)[r] -= eg[t - t0] * ops->dot(S, mr, K_OF(t));
    }
  }
  for (int t = t0; t < t1; t++) {
    const int i = j->e[t].pos % C;
    const float *q = Q_OF(t), *k = K_OF(t);
    float *d = V_OF(t), *o = O_OF(t);
    const float beta = 1.0f / (1.0f + expf(-j->a->beta[(size_t)t * hv + h]));
    for (int m = 0; m < i; m++) {
      const float w = expf(Gb[i] - Gb[m]);
      ops->axpy(d, -w * ops->dot(S, Kb + (size_t)m * S, k), Db + (size_t)m * S, S);
    }
    ops->scale(d, d, beta, S);
    memcpy(Kb + (size_t)i * S, k, (size_t)S * sizeof(float));
    memcpy(Db + (size_t)i * S, d, (size_t)S * sizeof(float));
    for (int m = 0; m <= i; m++) {
      const float w = expf(Gb[i] - Gb[m]);
      ops->axpy(o, w * ops->dot(S, Kb + (size_t)m * S, q), Db + (size_t)m * S, S);
    }
    ops->scale(o, o, scale, S);
    if (i == C - 1) {
      /* the block is complete: S0 = exp(G_end) S0 + sum_m w_m,end k_m d_m^T;
       * the keys scaled by their weight first, into their own slots (the
       * block's records are not read again) */
      for (int m = 0; m < C; m++) ops->scale(Kb + (size_t)m * S, Kb + (size_t)m * S, expf(Gb[C - 1] - Gb[m]), S);
      const float ge = expf(Gb[C - 1]);
      for (int r = 0; r < S; r++) {
        float *mr = M + (size_t)r * S;
        ops->scale(mr, mr, ge, S);
        for (int m = 0; m < C; m++) ops->axpy(mr, Db[(size_t)m * S + r], Kb + (size_t)m * S, S);
      }
    }
  }
#undef Q_OF
#undef K_OF
#undef V_OF
#undef O_OF
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
  const pw_ops *ops = j->ops;
  const int cd = j->kv->conv_dim, S = hp->ssm_d_state, hk = hp->ssm_n_group, hv = hp->ssm_dt_rank;
  const float scale = 1.0f / sqrtf((float)S);
  long lo, hi;
  pw_split(hk, ith, nth, &lo, &hi);
  if (lo >= hi) return;
  /* conv: the q and k channels of the key heads, the v channels of their
   * value heads */
  for (int t = 0; t < j->n; t++) {
    conv_range(j, t, lo * S, hi * S);
    conv_range(j, t, (hk + lo) * S, (hk + hi) * S);
    for (long h = lo; h < hv; h += hk) /* value heads of key heads [lo, hi): runs of hi - lo */
      conv_range(j, t, 2 * (long)hk * S + h * S, 2 * (long)hk * S + (h + hi - lo) * S);
    float *row = j->a->conv_out + (size_t)t * cd;
    for (long kh = lo; kh < hi; kh++) {
      l2_norm(ops, row + (size_t)kh * S, S, hp->rms_eps);
      l2_norm(ops, row + (size_t)(hk + kh) * S, S, hp->rms_eps);
    }
  }
  /* the delta rule: runs of entries of one sequence inside one block */
  for (long kh = lo; kh < hi; kh++)
    for (long h = kh; h < hv; h += hk)
      for (int t0 = 0, t1; t0 < j->n; t0 = t1) {
        const int blk = j->e[t0].pos / MODEL_DNET_BLOCK;
        for (t1 = t0 + 1; t1 < j->n && j->e[t1].seq == j->e[t0].seq && j->e[t1].pos / MODEL_DNET_BLOCK == blk; t1++) {
        }
        delta_run(j, h, kh, t0, t1, scale);
      }
}

void model_cpu_delta_net(model_ctx *c, model_kv *kv, const model_entry *e, int n, const model_dnet_args *a) {
  dnet_job j = {c, kv, e, n, a, pw_ops_get()};
  pw_pool_run(c->m->pool, dnet_worker, &j);
}
