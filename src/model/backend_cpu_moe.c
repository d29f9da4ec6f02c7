/* backend_cpu_moe.c - the mixture-of-experts MLP on the CPU (the moe_ffn
 * op of model_int.h's interface), as llama.cpp's build_moe_ffn computes
 * it for a softmax router:
 *   router   logits = x W_router^T (one matmul for the pass)
 *   probs    softmax over the experts (max subtracted, sum in double, as
 *            ggml's soft_max)
 *   top-k    the k most probable experts, most probable first (ggml's
 *            argsort_top_k); ties go to the lower expert id
 *   weights  their probabilities, divided by their sum (clamped below at
 *            F16's smallest normal, as llama.cpp) where hp says so, then
 *            scaled where hp says so
 *   experts  y = sum of weight * down(silu(gate x) * up x)
 *   shared   (where the layer has one) y += sigmoid(x . g) * the shared
 *            expert's SwiGLU of x, computed after the routed ones; the
 *            sigmoid as llama.cpp's graphs compute it: silu(v) / v for
 *            qwen2moe, 1 / (1 + exp(-v)) for qwen35moe
 * and for gpt-oss (hp->moe_softmax_topk, llama.cpp's softmax_weight
 * gating and its swiglu_oai):
 *   router   logits = x W_router^T + b_router
 *   top-k    the k largest logits; weights = softmax over those k alone
 *   experts  g = gate x + b_gate, u = up x + b_up,
 *            a = min(g, L) sigmoid(alpha min(g, L)) (clamp(u, -L, L) + 1),
 *            y = sum of weight * (down a + b_down)
 *
 * Speed: the entries of a pass are gathered by expert, so each expert
 * that any entry chose runs once over all its entries (its weights are
 * read once per pass; experts no entry chose are never read; one entry
 * reads only its k experts). Each expert's matmuls split their rows over
 * the pool, so the threads share every expert. An entry's result is
 * summed over its experts in expert-id order, whatever the other entries
 * of the pass and whatever thread computed a row: bit-identical alone or
 * batched, at any thread count (matmuls are row-independent, tensor/
 * matmul.h). llama.cpp sums in top-k order instead: the same terms, a
 * rounding apart.
 *
 * Not here: the attention and norms around it (arch_qwen3moe.c,
 * arch_qwen35.c). */
#include "model/model_int.h"

#include "base/error.h"
#include "tensor/ops.h"

#include <math.h>
#include <string.h>

/* Scratch layout (floats, then int32 in float-sized slots), for a pass of
 * B entries, k experts each, n_exp experts, n_embd E, expert width F (or
 * the shared expert's, when wider):
 *   logits [B][n_exp]  wsel [B][k]  isel [B][k]  count [n_exp + 1]
 *   list [B][k]        xg [B][E]    g, u [B][F]  d [B][E]
 * One expert is chosen at most once per entry, so it sees at most B rows. */
typedef struct moe_scratch {
  float *logits, *wsel;
  int32_t *isel, *start, *list;
  float *xg, *g, *u, *d;
} moe_scratch;

static size_t lay(const model_hparams *hp, int B, float *base, moe_scratch *s) {
  const size_t b = (size_t)B, k = (size_t)hp->n_expert_used, ne = (size_t)hp->n_expert, E = (size_t)hp->n_embd,
               F = (size_t)(hp->n_ff_shexp > hp->n_ff_exp ? hp->n_ff_shexp : hp->n_ff_exp);
  /* each block starts on a cache line (16 floats) */
#define ROUND(x) (((x) + 15) / 16 * 16)
  const size_t sz[9] = {ROUND(b * ne), ROUND(b * k), ROUND(b * k), ROUND(ne + 1), ROUND(b * k),
                        ROUND(b * E),  ROUND(b * F), ROUND(b * F), ROUND(b * E)};
#undef ROUND
  size_t off[9], total = 0;
  for (int i = 0; i < 9; i++) {
    off[i] = total;
    total += sz[i];
  }
  if (s) {
    s->logits = base + off[0];
    s->wsel = base + off[1];
    s->isel = (int32_t *)(base + off[2]);
    s->start = (int32_t *)(base + off[3]);
    s->list = (int32_t *)(base + off[4]);
    s->xg = base + off[5];
    s->g = base + off[6];
    s->u = base + off[7];
    s->d = base + off[8];
  }
  return total;
}

size_t model_moe_scratch_floats(const model_hparams *hp, int max_batch) {
  return hp->n_expert > 0 ? lay(hp, max_batch, NULL, NULL) : 0;
}

/* p[0..n) = softmax(p) as ggml's soft_max: max subtracted, the sum in
 * double, one multiply by its inverse. */
static void softmax(float *p, int n) {
  float mx = -INFINITY;
  for (int i = 0; i < n; i++) mx = p[i] > mx ? p[i] : mx;
  double sum = 0;
  for (int i = 0; i < n; i++) {
    p[i] = expf(p[i] - mx);
    sum += (double)p[i];
  }
  const float inv = (float)(1.0 / sum);
  for (int i = 0; i < n; i++) p[i] *= inv;
}

/* One entry's router logits p (biased where the layer has a bias) to its
 * top k and their weights: a softmax over all the experts, then the top k
 * (normalised and scaled as hp says), or (moe_softmax_topk) the top k of
 * the logits and a softmax over those k. */
static void route(const model_hparams *hp, const float *bias, float *p, float *w, int32_t *sel) {
  const int ne = hp->n_expert, k = hp->n_expert_used;
  if (bias)
    for (int i = 0; i < ne; i++) p[i] += bias[i];
  if (!hp->moe_softmax_topk) softmax(p, ne);
  /* selection by insertion into a sorted list of k: k is small (8) */
  int n = 0;
  for (int i = 0; i < ne; i++) {
    if (n == k && !(p[i] > p[sel[k - 1]])) continue;
    int j = n < k ? n++ : k - 1;
    while (j > 0 && p[i] > p[sel[j - 1]]) {
      sel[j] = sel[j - 1];
      j--;
    }
    sel[j] = i;
  }
  double ws = 0;
  for (int j = 0; j < k; j++) w[j] = p[sel[j]];
  if (hp->moe_softmax_topk) softmax(w, k);
  for (int j = 0; j < k; j++) ws += (double)w[j];
  if (hp->expert_norm) {
    float s = (float)ws;
    if (s < 6.103515625e-5f) s = 6.103515625e-5f;
    for (int j = 0; j < k; j++) w[j] /= s;
  }
  if (hp->expert_scale != 0.0f && hp->expert_scale != 1.0f)
    for (int j = 0; j < k; j++) w[j] *= hp->expert_scale;
}

/* ggml's swiglu_oai, element by element in its float operations:
 * g = min(g, limit) / (1 + exp(-alpha min(g, limit))) * (clamp(u) + 1). */
static void swiglu_oai(float *g, const float *u, int64_t n, float alpha, float limit) {
  for (int64_t i = 0; i < n; i++) {
    const float x = g[i] < limit ? g[i] : limit;
    const float y = u[i] < -limit ? -limit : u[i] > limit ? limit : u[i];
    g[i] = x / (1.0f + expf(alpha * (-x))) * (y + 1.0f);
  }
}

void model_cpu_moe_ffn(model_ctx *c, const layer_w *L, const float *x, int n, float *y, float *scratch) {
  const model *m = c->m;
  const model_hparams *hp = &m->hp;
  const int ne = hp->n_expert, k = hp->n_expert_used, E = hp->n_embd, F = hp->n_ff_exp;
  /* the experts' matmuls are small for a few rows: split them anyway, a
   * pass reads several of them and each is worth both threads' bandwidth */
  const unsigned hints = m->mm_hints | PW_MM_SPLIT;
  moe_scratch s;
  lay(hp, c->max_batch, scratch, &s);
  pw_matmul_ex(m->pool, L->ffn_gate_inp.type, L->ffn_gate_inp.data, E, ne, x, n, s.logits, c->mm_scratch, m->mm_hints);
  memset(s.start, 0, (size_t)(ne + 1) * sizeof *s.start);
  for (int t = 0; t < n; t++) {
    route(hp, L->b_gate_inp, s.logits + (size_t)t * ne, s.wsel + (size_t)t * k, s.isel + (size_t)t * k);
    for (int j = 0; j < k; j++) s.start[s.isel[(size_t)t * k + j] + 1]++;
  }
  /* the entries of each expert, in entry order (counting sort) */
  for (int i = 0; i < ne; i++) s.start[i + 1] += s.start[i];
  for (int t = 0; t < n; t++)
    for (int j = 0; j < k; j++) {
      const int ex = s.isel[(size_t)t * k + j];
      /* start[ex] advances as rows are placed; put back below */
      s.list[s.start[ex]++] = t * k + j;
    }
  for (int i = ne; i > 0; i--) s.start[i] = s.start[i - 1];
  s.start[0] = 0;
  memset(y, 0, (size_t)n * E * sizeof *y);
  for (int ex = 0; ex < ne; ex++) {
    const int r0 = s.start[ex], cnt = s.start[ex + 1] - r0;
    if (cnt == 0) continue;
    int next = ex + 1; /* the next expert with entries, for the hints */
    while (next < ne && s.start[next + 1] == s.start[next]) next++;
    const float *xe = x;
    if (n > 1) { /* one entry needs no gathering */
      for (int r = 0; r < cnt; r++)
        memcpy(s.xg + (size_t)r * E, x + (size_t)(s.list[r0 + r] / k) * E, (size_t)E * sizeof *x);
      xe = s.xg;
    }
    const model_weight wg = model_expert(&L->gate_exps, ex), wu = model_expert(&L->up_exps, ex),
                       wd = model_expert(&L->down_exps, ex);
    const pw_mm_op gu[2] = {{wg.type, wg.data, F, s.g}, {wu.type, wu.data, F, s.u}};
    /* the workers bring in the start of the next matrix while this thread
     * does the steps in between alone (SwiGLU; the sums and the next
     * gather) */
    const pw_mm_op dn = {wd.type, wd.data, E, s.d};
    m->be->prefetch_weights(c, &dn, 1, F, cnt);
    pw_matmul_multi_ex(m->pool, gu, 2, E, xe, cnt, c->mm_scratch, hints);
    if (L->b_gate_exps) {
      m->be->add_rows(c, s.g, L->b_gate_exps + (size_t)ex * F, cnt, F);
      m->be->add_rows(c, s.u, L->b_up_exps + (size_t)ex * F, cnt, F);
    }
    if (hp->swiglu_limit > 0) swiglu_oai(s.g, s.u, (int64_t)cnt * F, hp->swiglu_alpha, hp->swiglu_limit);
    else m->be->swiglu(c, s.g, s.u, (int64_t)cnt * F);
    if (next < ne) {
      const model_weight ng = model_expert(&L->gate_exps, next), nu = model_expert(&L->up_exps, next);
      const pw_mm_op ngu[2] = {{ng.type, ng.data, F, s.g}, {nu.type, nu.data, F, s.u}};
      m->be->prefetch_weights(c, ngu, 2, E, s.start[next + 1] - s.start[next]);
    }
    pw_matmul_multi_ex(m->pool, &dn, 1, F, s.g, cnt, c->mm_scratch, hints);
    if (L->b_down_exps) m->be->add_rows(c, s.d, L->b_down_exps + (size_t)ex * E, cnt, E);
    for (int r = 0; r < cnt; r++) {
      const int t = s.list[r0 + r] / k;
      const float w = s.wsel[s.list[r0 + r]];
      float *yt = y + (size_t)t * E;
      const float *dr = s.d + (size_t)r * E;
      for (int i = 0; i < E; i++) yt[i] += w * dr[i];
    }
  }
  if (!L->gate_shexp.data) return;
  /* the shared expert over every entry (s.logits: its gate, [n][1]) */
  const int64_t S = L->gate_shexp.n_out;
  const pw_mm_op gu[2] = {{L->gate_shexp.type, L->gate_shexp.data, S, s.g},
                          {L->up_shexp.type, L->up_shexp.data, S, s.u}};
  pw_matmul_multi_ex(m->pool, gu, 2, E, x, n, c->mm_scratch, m->mm_hints);
  pw_matmul_ex(m->pool, L->gate_inp_shexp.type, L->gate_inp_shexp.data, E, 1, x, n, s.logits, c->mm_scratch,
               m->mm_hints);
  m->be->swiglu(c, s.g, s.u, (int64_t)n * S);
  pw_matmul_ex(m->pool, L->down_shexp.type, L->down_shexp.data, S, E, s.g, n, s.d, c->mm_scratch, m->mm_hints);
  for (int t = 0; t < n; t++) {
    const float v = s.logits[t], gate = hp->shexp_sigmoid ? 1.0f / (1.0f + expf(-v)) : v / (1.0f + expf(-v)) / v;
    float *yt = y + (size_t)t * E;
    const float *dr = s.d + (size_t)t * E;
    for (int i = 0; i < E; i++) yt[i] += dr[i] * gate;
  }
}
