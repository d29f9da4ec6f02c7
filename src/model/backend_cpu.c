/* backend_cpu.c - the model's op interface (model_int.h) on the CPU
 * kernels of tensor/: matmuls on the model's thread pool, attention over the
 * F16 KV cache split into work items, prefetch hints that keep decode at
 * the memory bound.
 *
 * Numerics follow llama.cpp's CPU graph where it matters for parity:
 * RMSNorm sums squares in double, RoPE angles are built by repeated
 * multiplication with theta_scale (as ggml's rope cache does), matmuls
 * quantize activations to the weight's dot-product type (tensor/matmul.h),
 * K/V are stored as F16 and attention accumulates V in F16 like llama.cpp's
 * CPU flash attention. */
#include "model/model_int.h"

#include "tensor/attn.h"
#include "tensor/dtype.h"
#include "tensor/ops.h"
#include "tensor/traits.h"

#include <math.h>
#include <stdatomic.h>
#include <string.h>

/* Each worker prefetches its first share of the weights of ops (the next
 * matmul) after the coming pool run, while this thread does the serial
 * steps in between (pw_pool_prefetch); a no-op when the pass will not hand
 * out shares (prefill). */
static void cpu_prefetch_weights(model_ctx *c, const pw_mm_op *ops, int n_ops, int64_t n_in, int n) {
  const model *m = c->m;
  const int nth = pw_pool_size(m->pool);
  for (int ith = 1; ith < nth; ith++) {
    pw_span sp[PW_POOL_SPANS];
    const int k = pw_matmul_first_spans(ops, n_ops, n_in, n, m->mm_hints, ith, nth, sp, PW_POOL_SPANS);
    pw_pool_prefetch(m->pool, ith, sp, k);
  }
}

static void cpu_geglu(model_ctx *c, float *g, const float *u, int64_t n) {
  (void)c;
  pw_geglu(g, g, u, n);
}

static void cpu_layernorm(model_ctx *c, float *y, const float *x, const float *w, const float *b, int rows, int dim,
                          float eps) {
  (void)c;
  for (int r = 0; r < rows; r++) pw_layernorm(y + (size_t)r * dim, x + (size_t)r * dim, w, b, dim, eps);
}

static void cpu_gelu(model_ctx *c, float *y, const float *x, int64_t n) {
  (void)c;
  pw_gelu(y, x, n);
}

static void cpu_scale(model_ctx *c, float *y, const float *x, float s, int64_t n) {
  (void)c;
  pw_scale(y, x, s, n);
}

/* as ggml's sigmoid then mul */
static void cpu_mul_sigmoid(model_ctx *c, float *y, const float *g, int64_t n) {
  (void)c;
  for (int64_t i = 0; i < n; i++) y[i] *= 1.0f / (1.0f + expf(-g[i]));
}

static void cpu_matmul_multi(model_ctx *c, const pw_mm_op *ops, int n_ops, int64_t n_in, const float *x, int n) {
  pw_matmul_multi_ex(c->m->pool, ops, n_ops, n_in, x, n, c->mm_scratch, c->m->mm_hints);
}

static void cpu_matmul(model_ctx *c, const model_weight *w, const float *x, int n, float *y) {
  pw_matmul_ex(c->m->pool, w->type, w->data, w->n_in, w->n_out, x, n, y, c->mm_scratch, c->m->mm_hints);
}

/* y = x / sqrt(mean(x^2) + eps) * w per row, the sum of squares in double
 * as ggml (tensor/ops.h). */
static void cpu_rmsnorm(model_ctx *c, float *y, const float *x, const float *w, int rows, int dim, float eps) {
  (void)c;
  for (int r = 0; r < rows; r++) pw_rmsnorm(y + (size_t)r * dim, x + (size_t)r * dim, w, dim, eps);
}

static void cpu_add_rows(model_ctx *c, float *y, const float *b, int rows, int dim) {
  (void)c;
  if (!b) return;
  for (int t = 0; t < rows; t++) pw_add(y + (size_t)t * dim, y + (size_t)t * dim, b, dim);
}

static void cpu_add(model_ctx *c, float *y, const float *a, const float *b, int64_t n) {
  (void)c;
  pw_add(y, a, b, n);
}

/* The small per-layer vectors (norm weights, biases) sit in the mapped file
 * between megabytes of weights, and a decode step streams nearly all the
 * weights through the caches, so they are cold by the time they are used;
 * each is prefetched one matmul ahead of its use. */
static void cpu_prefetch_vec(const float *v, int n) {
  if (!v) return;
  const uintptr_t end = (uintptr_t)(v + n);
  for (uintptr_t a = (uintptr_t)v & ~(uintptr_t)63; a < end; a += 64) __builtin_prefetch((const void *)a);
}

/* cos/sin of each rotation angle for every entry, as ggml's rope cache:
 * theta starts at pos and is multiplied by base^(-2/n_rot) per pair, divided
 * by the pair's frequency factor; YaRN (ext != 0) mixes the scaled
 * (interpolated) and unscaled angles along a ramp over the pairs and
 * corrects the magnitude. Without YaRN and with attn 1 these are the plain
 * cosf/sinf of the scaled angle. With M-RoPE sections and text-only input,
 * the temporal, height and width positions all equal pos and the fourth is
 * 0: pairs of the fourth section do not rotate. */
static bool mrope_extra_pair(const model_hparams *hp, int i) {
  const int *sc = hp->rope_sections;
  const int dims = sc[0] + sc[1] + sc[2] + sc[3];
  if (dims <= 0) return false;
  const int sector = i % dims;
  if (hp->rope_imrope)
    return !((sector % 3 == 0 && sector < 3 * sc[0]) || (sector % 3 == 1 && sector < 3 * sc[1]) ||
             (sector % 3 == 2 && sector < 3 * sc[2]));
  return sector >= sc[0] + sc[1] + sc[2];
}

static void rope_table(const model_ctx *c, const model_entry *e, int n, float base, float scale, const float *freqs,
                       float ext, float attn, float *cos_out, float *sin_out) {
  const model_hparams *hp = &c->m->hp;
  int half = hp->n_rot / 2;
  float theta_scale = powf(base, -2.0f / (float)hp->n_rot);
  const float lo = hp->rope_corr[0], hi = hp->rope_corr[1];
  for (int t = 0; t < n; t++) {
    float theta = (float)e[t].pos;
    for (int i = 0; i < half; i++) {
      float ff = freqs ? freqs[i] : 1.0f;
      float extrap = mrope_extra_pair(hp, i) ? 0.0f : theta / ff, th = scale * extrap, ms = attn;
      if (ext != 0.0f) {
        float y = ((float)i - lo) / (hi - lo > 0.001f ? hi - lo : 0.001f);
        float ramp = (1 - (y < 0 ? 0 : y > 1 ? 1 : y)) * ext;
        th = th * (1 - ramp) + extrap * ramp;
        ms *= 1.0f + 0.1f * logf(1.0f / scale);
      }
      cos_out[(size_t)t * half + i] = cosf(th) * ms;
      sin_out[(size_t)t * half + i] = sinf(th) * ms;
      theta *= theta_scale;
    }
  }
}

/* The global layers' table, and the local layers' (their own base, no
 * scaling or factors, as llama.cpp's defaults) when there are any. */
static void rope_tables(model_ctx *c, const model_entry *e, int n) {
  const model_hparams *hp = &c->m->hp;
  /* LongRoPE: the long factors when the context exceeds the original one
   * (as llama.cpp chooses them, by the context size, not the position) */
  const float *freqs = c->m->rope_freqs;
  if (c->m->rope_long) freqs = c->max_ctx > hp->n_ctx_orig ? c->m->rope_long : c->m->rope_short;
  rope_table(c, e, n, hp->rope_base, hp->rope_scale, freqs, hp->rope_ext_factor, hp->rope_attn_factor, c->rope_cos,
             c->rope_sin);
  if (c->rope_cos_swa)
    rope_table(c, e, n, hp->rope_base_swa, 1.0f, NULL, 0.0f, hp->rope_attn_factor, c->rope_cos_swa, c->rope_sin_swa);
}

static void cpu_rope(model_ctx *c, float *v, int n_tok, int n_heads, bool swa) {
  const model_hparams *hp = &c->m->hp;
  /* the first n_rot dimensions of each head rotate, the rest pass */
  int hd = hp->head_dim, half = hp->n_rot / 2;
  const float *tc = swa ? c->rope_cos_swa : c->rope_cos, *ts = swa ? c->rope_sin_swa : c->rope_sin;
  for (int t = 0; t < n_tok; t++) {
    const float *cs = tc + (size_t)t * half, *sn = ts + (size_t)t * half;
    for (int h = 0; h < n_heads; h++) {
      float *x = v + ((size_t)t * n_heads + h) * hd;
      for (int i = 0; i < half; i++) {
        int i0 = hp->rope_neox ? i : 2 * i, i1 = hp->rope_neox ? i + half : 2 * i + 1;
        float a = x[i0], b = x[i1];
        x[i0] = a * cs[i] - b * sn[i];
        x[i1] = a * sn[i] + b * cs[i];
      }
    }
  }
}

static void cpu_kv_store(model_ctx *c, model_kv *kv, const model_entry *e, int n, int il) {
  const model_hparams *hp = &c->m->hp;
  const int hd = hp->head_dim, kvd = hp->n_head_kv * hd;
  const pw_from_float_fn to_f16 = pw_traits_get(PW_DT_F16)->from_float;
  for (int t = 0; t < n; t++)
    for (int h = 0; h < hp->n_head_kv; h++) {
      to_f16(c->k + (size_t)t * kvd + (size_t)h * hd, kv->k + model_kv_off(kv, il, e[t].seq, h, e[t].pos), hd);
      to_f16(c->v + (size_t)t * kvd + (size_t)h * hd, kv->v + model_kv_off(kv, il, e[t].seq, h, e[t].pos), hd);
    }
}

typedef struct attn_job {
  model_ctx *c;
  model_kv *kv;
  const model_entry *e;
  int layer;
  int n_groups; /* runs of consecutive entries of one sequence: c->att_groups */
  int heads;    /* query heads per work item: the GQA group, or 1 */
  pw_attn_multi_fn attn;
  float scale;  /* of q K^T */
  int window;   /* > 0: each query sees at most the last `window` positions */
  _Atomic long next; /* next work item */
} attn_job;

/* SwiGLU of a pass of several tokens, split over the pool in ranges that
 * start on multiples of 16 elements: each element goes through the same
 * vector (or, at the very end, scalar) code as in one call, so the values
 * are the same bits. One token's 4864 elements take about 3 us and stay
 * on the caller; 8 tokens' took 23 us a layer (0.5B shape). */
#define SWIGLU_POOL_MIN 16384
typedef struct {
  float *g;
  const float *u;
  int64_t n;
} swiglu_job;

static void swiglu_worker(void *ctx, int ith, int nth) {
  const swiglu_job *j = ctx;
  long lo, hi;
  pw_split((long)((j->n + 15) / 16), ith, nth, &lo, &hi);
  const int64_t a = (int64_t)lo * 16, b = (int64_t)hi * 16 < j->n ? (int64_t)hi * 16 : j->n;
  if (b > a) pw_swiglu(j->g + a, j->g + a, j->u + a, b - a);
}

static void cpu_swiglu(model_ctx *c, float *g, const float *u, int64_t n) {
  const model *m = c->m;
  if (n < SWIGLU_POOL_MIN || pw_pool_size(m->pool) < 2) {
    pw_swiglu(g, g, u, n);
    return;
  }
  swiglu_job j = {g, u, n};
  pw_pool_run(m->pool, swiglu_worker, &j);
}

/* A work item is one group of entries (consecutive, same sequence) and one
 * KV head with its query heads, or one query head when there would be
 * fewer items than threads: all its queries go through the kernel
 * together, so each K/V row is converted once for all of them, each query
 * over the cache up to and including its entry's own position. */
static void attn_worker(void *ctx, int ith, int nth) {
  attn_job *j = ctx;
  model_ctx *c = j->c;
  const model_hparams *hp = &c->m->hp;
  model_kv *kv = j->kv;
  const int hd = hp->head_dim, gqa = hp->n_head / hp->n_head_kv;
  const int per_group = hp->n_head / j->heads;
  const float scale = j->scale;
  (void)ith;
  (void)nth;
  const long items = (long)j->n_groups * per_group;
  /* one item at a time from a shared counter: later tokens of a prompt see
   * more keys, so fixed ranges would leave one thread with most of it */
  for (long w; (w = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed)) < items;) {
    const int g = (int)(w / per_group), h0 = (int)(w % per_group) * j->heads, hk = h0 / gqa;
    const int t0 = c->att_groups[g], t1 = c->att_groups[g + 1];
    const model_entry *en = &j->e[t0];
    const uint16_t *k0 = kv->k + model_kv_off(kv, j->layer, en->seq, hk, 0);
    const uint16_t *v0 = kv->v + model_kv_off(kv, j->layer, en->seq, hk, 0);
    const float *qp[PW_ATTN_GROUP_MAX];
    float *op[PW_ATTN_GROUP_MAX];
    int np[PW_ATTN_GROUP_MAX], nq = 0;
    if (j->window > 0) {
      /* A sliding window: each token's keys start at its own position, so
       * its query heads go through the kernel on their own. */
      for (int t = t0; t < t1; t++) {
        const int start = j->e[t].pos + 1 > j->window ? j->e[t].pos + 1 - j->window : 0;
        for (int h = h0; h < h0 + j->heads; h++) {
          qp[nq] = c->q + ((size_t)t * hp->n_head + h) * hd;
          op[nq] = c->att + ((size_t)t * hp->n_head + h) * hd;
          np[nq++] = j->e[t].pos + 1 - start;
        }
        j->attn(qp, np, nq, k0 + (size_t)start * hd, v0 + (size_t)start * hd, (size_t)hd, hd, scale, op);
        nq = 0;
      }
      continue;
    }
    for (int t = t0; t < t1; t++)
      for (int h = h0; h < h0 + j->heads; h++) {
        qp[nq] = c->q + ((size_t)t * hp->n_head + h) * hd;
        op[nq] = c->att + ((size_t)t * hp->n_head + h) * hd;
        np[nq] = j->e[t].pos + 1;
        if (++nq == PW_ATTN_GROUP_MAX || (t == t1 - 1 && h == h0 + j->heads - 1)) {
          j->attn(qp, np, nq, k0, v0, (size_t)hd, hd, scale, op);
          nq = 0;
        }
      }
  }
}

static void cpu_attention(model_ctx *c, model_kv *kv, const model_entry *e, int n, int il, float scale,
                          int window) {
  (void)n;
  const model *m = c->m;
  const model_hparams *hp = &m->hp;
  attn_job job = {c, kv, e, il, c->n_att_groups,
                  c->n_att_groups * hp->n_head_kv >= pw_pool_size(m->pool) ? hp->n_head / hp->n_head_kv : 1,
                  pw_attn_multi_get(), scale, window, 0};
  pw_pool_run(m->pool, attn_worker, &job);
}

/* Splits the batch into attention groups (c->att_groups, returns their
 * count): runs of consecutive entries of one sequence, at most
 * PW_ATTN_GROUP_MAX / gqa entries each (so one kernel call holds a group's
 * queries for one KV head), and short enough that there are work items for
 * every thread. */
static int attn_groups(model_ctx *c, const model_entry *e, int n, int threads) {
  const model_hparams *hp = &c->m->hp;
  const int gqa = hp->n_head / hp->n_head_kv;
  int cap = PW_ATTN_GROUP_MAX / gqa;
  if (cap < 1) cap = 1;
  /* about two items per thread at least */
  const int want = (2 * threads + hp->n_head_kv - 1) / hp->n_head_kv;
  if (want > 1 && (n + want - 1) / want < cap) cap = (n + want - 1) / want;
  if (cap < 1) cap = 1;
  int g = 0;
  for (int t = 0; t < n;) {
    int u = t + 1;
    while (u < n && u - t < cap && e[u].seq == e[t].seq) u++;
    c->att_groups[g++] = t;
    t = u;
  }
  c->att_groups[g] = n;
  return g;
}

static void cpu_begin(model_ctx *c, const model_entry *e, int n) {
  rope_tables(c, e, n);
  c->n_att_groups = attn_groups(c, e, n, pw_pool_size(c->m->pool));
}

const model_backend model_backend_cpu = {
    .name = "cpu",
    .begin = cpu_begin,
    .matmul_multi = cpu_matmul_multi,
    .matmul = cpu_matmul,
    .rmsnorm = cpu_rmsnorm,
    .add_rows = cpu_add_rows,
    .add = cpu_add,
    .rope = cpu_rope,
    .kv_store = cpu_kv_store,
    .attention = cpu_attention,
    .swiglu = cpu_swiglu,
    .geglu = cpu_geglu,
    .scale = cpu_scale,
    .mul_sigmoid = cpu_mul_sigmoid,
    .layernorm = cpu_layernorm,
    .gelu = cpu_gelu,
    .delta_net = model_cpu_delta_net,
    .moe_ffn = model_cpu_moe_ffn,
    .prefetch_weights = cpu_prefetch_weights,
    .prefetch_vec = cpu_prefetch_vec,
};
