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
  /* local layers without a base of their own rotate as the global ones */
  swa = swa && c->rope_cos_swa;
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

/* K and V rows into the cache in its types (quantized as llama.cpp
 * stores them: the type's row quantization) */
static void cpu_kv_store(model_ctx *c, model_kv *kv, const model_entry *e, int n, int il) {
  const model_hparams *hp = &c->m->hp;
  const int hd = hp->head_dim, kvd = hp->n_head_kv * hd;
  const pw_from_float_fn to_k = pw_traits_get(kv->type_k)->from_float, to_v = pw_traits_get(kv->type_v)->from_float;
  for (int t = 0; t < n; t++)
    for (int h = 0; h < hp->n_head_kv; h++) {
      uint8_t *kr = model_kv_k(kv, il, e[t].seq, h, e[t].pos), *vr = model_kv_v(kv, il, e[t].seq, h, e[t].pos);
      to_k(c->k + (size_t)t * kvd + (size_t)h * hd, kr, hd);
      to_v(c->v + (size_t)t * kvd + (size_t)h * hd, vr, hd);
      /* a ring layer's first rows are repeated after the ring (a window
       * that wraps reads on into them) */
      const size_t mr = model_kv_mirror_row(kv, il, e[t].seq, h, e[t].pos);
      if (mr != (size_t)-1) {
        memcpy(kv->k + mr * kv->row_k, kr, kv->row_k);
        memcpy(kv->v + mr * kv->row_v, vr, kv->row_v);
      }
    }
}

typedef struct attn_job {
  model_ctx *c;
  model_kv *kv;
  const model_entry *e;
  int layer;
  int n_groups; /* runs of consecutive entries of one sequence: c->att_groups */
  int heads;    /* query heads per work item: the GQA group, or 1 */
  pw_attn_multi_fn attn; /* F16 K and V */
  pw_attn_part_fn part;
  pw_attn_multi_fn attn_long; /* F16 K and V, prefixes over PW_ATTN_LONG */
  pw_attn_part_fn part_long;
  bool f16;     /* the cache is F16 and scores are not capped (else pw_attn_kvq) */
  float scale;  /* of q K^T */
  float softcap; /* > 0: scores capped (hp->attn_softcap) */
  int window;   /* > 0: each query sees at most the last `window` positions */
  const float *sinks; /* [n_head] logits joining each head's softmax, or NULL */
  int s0, ns;   /* the wave: spans [s0, s0 + ns) of the split */
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

/* The kernel of the cache's types on nq queries over the rows from
 * position p0 of (layer, seq, KV head hk): normalised outputs, or (ms)
 * span states; lng: the queries' prefixes are longer than PW_ATTN_LONG
 * (an F16 cache then takes the long kernels). */
static void attn_call(const attn_job *j, int seq, int hk, int p0, const float *const *q, const int *np, int nq,
                      float *const *out, float *ms, bool lng) {
  const model_kv *kv = j->kv;
  const int hd = kv->head_dim;
  if (j->f16) {
    const uint16_t *k = (const uint16_t *)model_kv_k(kv, j->layer, seq, hk, p0);
    const uint16_t *v = (const uint16_t *)model_kv_v(kv, j->layer, seq, hk, p0);
    if (ms) (lng ? j->part_long : j->part)(q, np, nq, k, v, (size_t)hd, hd, j->scale, out, ms);
    else (lng ? j->attn_long : j->attn)(q, np, nq, k, v, (size_t)hd, hd, j->scale, out);
    return;
  }
  const pw_attn_kv a = {model_kv_k(kv, j->layer, seq, hk, p0), model_kv_v(kv, j->layer, seq, hk, p0), kv->row_k,
                        kv->row_v, kv->type_k, kv->type_v};
  pw_attn_kvq(&a, q, np, nq, hd, j->scale, j->softcap, out, ms, 0);
}

/* A sink: a logit s in a query head's softmax with no value, taken into
 * its finished state (acc, ms: max and sum) as llama.cpp's flash attention
 * does after the last key (the accumulator rescaled when s is the new
 * max, else exp(s - max) added to the sum), then normalised. */
static void attn_sink_finish(float *acc, float *ms, float s, int hd) {
  if (s > ms[0]) {
    const float sc = expf(ms[0] - s);
    for (int i = 0; i < hd; i++) acc[i] *= sc;
    ms[1] = ms[1] * sc + 1.0f;
    ms[0] = s;
  } else {
    ms[1] += expf(s - ms[0]);
  }
  pw_attn_finish(acc, ms, hd);
}

/* attn_call for whole prefixes: normalised outputs; with sinks, through
 * the span state, the sink of each query's head (heads[i]) folded in. */
static void attn_call_full(const attn_job *j, int seq, int hk, int p0, const float *const *q, const int *np, int nq,
                           float *const *out, const int *heads, bool lng) {
  if (!j->sinks) {
    attn_call(j, seq, hk, p0, q, np, nq, out, NULL, lng);
    return;
  }
  float ms[2 * PW_ATTN_GROUP_MAX];
  attn_call(j, seq, hk, p0, q, np, nq, out, ms, lng);
  for (int i = 0; i < nq; i++) attn_sink_finish(out[i], ms + 2 * i, j->sinks[heads[i]], j->kv->head_dim);
}

/* Sliding-window layers: one item is a group and a block of query heads;
 * each token's keys start at its own position, so its query heads go
 * through the kernel on their own (windows are short: no split). */
static void attn_window(attn_job *j, long w) {
  model_ctx *c = j->c;
  const model_hparams *hp = &c->m->hp;
  const int hd = hp->head_dim, gqa = hp->n_head / hp->n_head_kv, per_group = hp->n_head / j->heads;
  const int g = (int)(w / per_group), h0 = (int)(w % per_group) * j->heads, hk = h0 / gqa;
  const int seq = j->e[c->att_groups[g]].seq;
  for (int t = c->att_groups[g]; t < c->att_groups[g + 1]; t++) {
    const float *qp[PW_ATTN_GROUP_MAX];
    float *op[PW_ATTN_GROUP_MAX];
    int np[PW_ATTN_GROUP_MAX], hs[PW_ATTN_GROUP_MAX], nq = 0;
    const int start = j->e[t].pos + 1 > j->window ? j->e[t].pos + 1 - j->window : 0;
    for (int h = h0; h < h0 + j->heads; h++) {
      qp[nq] = c->q + ((size_t)t * hp->n_head + h) * hd;
      op[nq] = c->att + ((size_t)t * hp->n_head + h) * hd;
      hs[nq] = h;
      np[nq++] = j->e[t].pos + 1 - start;
    }
    attn_call_full(j, seq, hk, start, qp, np, nq, op, hs, j->e[t].pos + 1 - start > PW_ATTN_LONG);
  }
}

/* One item of the split: (block of query heads hb, span si, group g), in
 * that order of nesting, so that consecutive items (on whichever thread)
 * read the same span of K/V for one group after another and it is read
 * from memory about once per pass, not once per group. An entry whose
 * prefix is a single span gets its normalised output straight into c->att
 * (the unsplit kernel's bits); the others leave the span's state in
 * c->att_part (row ((t * n_head + h) * ns + si - s0)) for fold_worker. */
static void attn_span(attn_job *j, long w) {
  model_ctx *c = j->c;
  const model_hparams *hp = &c->m->hp;
  const int hd = hp->head_dim, gqa = hp->n_head / hp->n_head_kv;
  const int g = (int)(w % j->n_groups), si = j->s0 + (int)(w / j->n_groups % j->ns);
  const int h0 = (int)(w / j->n_groups / j->ns) * j->heads, hk = h0 / gqa;
  const int t0 = c->att_groups[g], t1 = c->att_groups[g + 1];
  const int p0 = si * PW_ATTN_SPLIT;
  if (j->e[t1 - 1].pos + 1 <= p0) return; /* the group's prefixes end before this span */
  const int seq = j->e[t0].seq;
  /* the split entries in two lists: prefixes up to PW_ATTN_LONG and longer
   * (the long kernels); entries of one span are never long */
  const float *qs[PW_ATTN_GROUP_MAX], *qp[2][PW_ATTN_GROUP_MAX];
  float *os[PW_ATTN_GROUP_MAX], *op[2][PW_ATTN_GROUP_MAX];
  float ms[2 * PW_ATTN_GROUP_MAX];
  int n1pos[PW_ATTN_GROUP_MAX], np[2][PW_ATTN_GROUP_MAX], h1[PW_ATTN_GROUP_MAX], n1 = 0, nm[2] = {0, 0};
  float *msrow[2][PW_ATTN_GROUP_MAX];
  for (int t = t0; t < t1; t++) {
    const int n_pos = j->e[t].pos + 1;
    if (n_pos <= p0) continue;
    const bool split = pw_attn_spans(n_pos) > 1;
    const int l = n_pos > PW_ATTN_LONG;
    for (int h = h0; h < h0 + j->heads; h++) {
      const float *q = c->q + ((size_t)t * hp->n_head + h) * hd;
      if (!split) {
        qs[n1] = q;
        os[n1] = c->att + ((size_t)t * hp->n_head + h) * hd;
        h1[n1] = h;
        n1pos[n1++] = n_pos;
      } else {
        const size_t row = ((size_t)t * hp->n_head + h) * j->ns + (size_t)(si - j->s0);
        qp[l][nm[l]] = q;
        op[l][nm[l]] = c->att_part + row * hd;
        msrow[l][nm[l]] = c->att_part_ms + row * 2;
        np[l][nm[l]++] = n_pos - p0 < PW_ATTN_SPLIT ? n_pos - p0 : PW_ATTN_SPLIT;
      }
      if (n1 == PW_ATTN_GROUP_MAX) {
        attn_call_full(j, seq, hk, p0, qs, n1pos, n1, os, h1, false);
        n1 = 0;
      }
      if (nm[l] == PW_ATTN_GROUP_MAX) {
        attn_call(j, seq, hk, p0, qp[l], np[l], nm[l], op[l], ms, l);
        for (int i = 0; i < nm[l]; i++) memcpy(msrow[l][i], ms + 2 * i, 2 * sizeof(float));
        nm[l] = 0;
      }
    }
  }
  if (n1) attn_call_full(j, seq, hk, p0, qs, n1pos, n1, os, h1, false);
  for (int l = 0; l < 2; l++)
    if (nm[l]) {
      attn_call(j, seq, hk, p0, qp[l], np[l], nm[l], op[l], ms, l);
      for (int i = 0; i < nm[l]; i++) memcpy(msrow[l][i], ms + 2 * i, 2 * sizeof(float));
    }
}

_Static_assert(PW_ATTN_LONG >= PW_ATTN_SPLIT, "a prefix of one span is never long");

static void attn_worker(void *ctx, int ith, int nth) {
  attn_job *j = ctx;
  const model_hparams *hp = &j->c->m->hp;
  (void)ith;
  (void)nth;
  const long per_group = hp->n_head / j->heads;
  const long items = j->window > 0 ? (long)j->n_groups * per_group : (long)j->n_groups * j->ns * per_group;
  /* one item at a time from a shared counter: later tokens of a prompt see
   * more keys, so fixed ranges would leave one thread with most of it */
  for (long w; (w = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed)) < items;) {
    if (j->window > 0) attn_window(j, w);
    else attn_span(j, w);
  }
}

/* Folds the wave's spans, in span order, into the running states of the
 * split entries (c->att as the accumulators, c->att_rms), one (entry, query
 * head) per item; after the last wave, normalises. */
typedef struct {
  attn_job *j;
  int last_wave;
  _Atomic long next;
} fold_job;

static void fold_worker(void *ctx, int ith, int nth) {
  fold_job *f = ctx;
  const attn_job *j = f->j;
  model_ctx *c = j->c;
  const model_hparams *hp = &c->m->hp;
  const int hd = hp->head_dim;
  (void)ith;
  (void)nth;
  const long items = (long)c->att_groups[j->n_groups] * hp->n_head;
  for (long w; (w = atomic_fetch_add_explicit(&f->next, 1, memory_order_relaxed)) < items;) {
    const int t = (int)(w / hp->n_head);
    const int n_spans = pw_attn_spans(j->e[t].pos + 1);
    if (n_spans <= 1) continue;
    float *racc = c->att + (size_t)w * hd, *rms = c->att_rms + (size_t)w * 2;
    if (j->s0 == 0) {
      memset(racc, 0, (size_t)hd * sizeof(float));
      rms[0] = -INFINITY;
      rms[1] = 0;
    }
    for (int si = j->s0; si < j->s0 + j->ns && si < n_spans; si++) {
      const size_t row = (size_t)w * j->ns + (size_t)(si - j->s0);
      /* the span two ahead: its row was written by whichever thread ran
       * it, so it may come from the other core's cache */
      if (si + 2 < j->s0 + j->ns && si + 2 < n_spans)
        for (int i = 0; i < hd; i += 16) __builtin_prefetch(c->att_part + (row + 2) * hd + i);
      pw_attn_fold(racc, rms, c->att_part + row * hd, c->att_part_ms + row * 2, hd);
    }
    if (f->last_wave) {
      if (j->sinks) attn_sink_finish(racc, rms, j->sinks[w % hp->n_head], hd);
      else pw_attn_finish(racc, rms, hd);
    }
  }
}

static void cpu_attention(model_ctx *c, model_kv *kv, const model_entry *e, int n, int il, float scale,
                          int window, const float *sinks) {
  const model *m = c->m;
  const model_hparams *hp = &m->hp;
  const int nth = pw_pool_size(m->pool);
  /* spans of the longest prefix, and the entries that are split */
  int max_spans = 1, n_split = 0;
  if (window <= 0)
    for (int t = 0; t < n; t++) {
      const int s = pw_attn_spans(e[t].pos + 1);
      if (s > max_spans) max_spans = s;
      n_split += s > 1;
    }
  /* spans per wave: as many as the span-state scratch holds for this
   * pass's entries (every entry's rows are laid out, split or not) */
  int wave = max_spans;
  if (n_split) {
    const size_t per_span = (size_t)n * hp->n_head;
    const size_t fit = c->att_part_rows / per_span;
    if (fit < (size_t)wave) wave = fit > 0 ? (int)fit : 1;
  }
  const long units = (long)c->n_att_groups * hp->n_head_kv * (window > 0 ? 1 : wave);
  const bool f16 = kv->type_k == PW_DT_F16 && kv->type_v == PW_DT_F16 && !(hp->attn_softcap > 0);
  attn_job job = {c, kv, e, il, c->n_att_groups, units >= nth ? hp->n_head / hp->n_head_kv : 1,
                  pw_attn_multi_get(), pw_attn_part_get(), pw_attn_multi_long_get(), pw_attn_part_long_get(),
                  f16, scale, hp->attn_softcap, window, sinks, 0, wave, 0};
  for (int s0 = 0; s0 < max_spans; s0 += wave) {
    job.s0 = s0;
    job.ns = max_spans - s0 < wave ? max_spans - s0 : wave;
    atomic_store_explicit(&job.next, 0, memory_order_relaxed);
    pw_pool_run(m->pool, attn_worker, &job);
    if (!n_split) continue;
    fold_job f = {&job, s0 + job.ns >= max_spans, 0};
    pw_pool_run(m->pool, fold_worker, &f);
  }
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
