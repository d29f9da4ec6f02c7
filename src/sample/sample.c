/* sample.c - the sampler chain of sample.h. Work per token is O(n_vocab)
 * plus, when a filter is active, a heap selection/sort of only the tokens
 * that can survive: top_k keeps a k-heap (O(V log k)); top_p/min_p without
 * top_k first cut at a logit threshold that provably keeps every survivor,
 * then sort that subset. Sorting is our own heapsort, not qsort, because
 * glibc's qsort may call malloc. When nothing changes the logits (no bias,
 * no penalties), greedy and unfiltered sampling skip the candidate array:
 * vector argmax and exp over the caller's row (tensor/ops.h). */
#include "sample/sample.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "tensor/ops.h"

/* top_p pre-cut histogram: bins of 1/16 logit over 32 logits below the max;
 * tokens further down weigh < e^-32 each relative to the max. */
#define HIST_PER_LOGIT 16
#define HIST_BINS (32 * HIST_PER_LOGIT)

struct pw_sampler {
  pw_sampler_params p; /* logit_bias points at bias below */
  int n_vocab;
  pw_rng rng;
  pw_logit_bias *bias; /* owned, [p.n_logit_bias] */
  pw_candidate *cand;  /* owned scratch, [n_vocab] */
  pw_candidate *cand2; /* owned scratch, [n_vocab]: the radix sort's other half */
  float *weight;       /* owned scratch, [n_vocab]: exp weights (unfiltered path, top_p) */
  int penalize;        /* penalties on and window > 0 */
  int32_t *hist;       /* owned ring of the last repeat_last_n tokens, or NULL */
  int32_t *count;      /* owned, [n_vocab] occurrences in hist, or NULL */
  int hist_len, hist_pos;
  double hist_mass[HIST_BINS]; /* top_p scratch: mass per logit bin below max */
};

void pw_sampler_params_default(pw_sampler_params *p) {
  memset(p, 0, sizeof *p);
  p->temperature = 1.0f;
  p->top_p = 1.0f;
  p->repeat_penalty = 1.0f;
  p->repeat_last_n = 64;
}

static int in_range(float v, float lo, float hi) { return v >= lo && v <= hi; } /* false for NaN */

int pw_sampler_params_validate(const pw_sampler_params *p, char *err) {
  if (!p) return pw_seterr(err, PW_EINVAL, "sampler params missing");
  if (!in_range(p->temperature, 0.0f, 100.0f))
    return pw_seterr(err, PW_EINVAL, "temperature must be in [0, 100], got %g", p->temperature);
  if (!(p->top_p > 0.0f && p->top_p <= 1.0f))
    return pw_seterr(err, PW_EINVAL, "top_p must be in (0, 1], got %g", p->top_p);
  if (!in_range(p->min_p, 0.0f, 1.0f))
    return pw_seterr(err, PW_EINVAL, "min_p must be in [0, 1], got %g", p->min_p);
  if (!(p->repeat_penalty > 0.0f && p->repeat_penalty <= FLT_MAX))
    return pw_seterr(err, PW_EINVAL, "repeat_penalty must be a positive number, got %g", p->repeat_penalty);
  if (p->repeat_last_n < 0 || p->repeat_last_n > PW_SAMPLE_MAX_LAST_N)
    return pw_seterr(err, PW_EINVAL, "repeat_last_n must be in [0, %d], got %d", PW_SAMPLE_MAX_LAST_N,
                     (int)p->repeat_last_n);
  if (!in_range(p->frequency_penalty, -2.0f, 2.0f))
    return pw_seterr(err, PW_EINVAL, "frequency_penalty must be in [-2, 2], got %g", p->frequency_penalty);
  if (!in_range(p->presence_penalty, -2.0f, 2.0f))
    return pw_seterr(err, PW_EINVAL, "presence_penalty must be in [-2, 2], got %g", p->presence_penalty);
  if (p->n_logit_bias < 0 || (p->n_logit_bias > 0 && !p->logit_bias))
    return pw_seterr(err, PW_EINVAL, "logit_bias: bad list (n = %d)", (int)p->n_logit_bias);
  for (int i = 0; i < p->n_logit_bias; i++) {
    float b = p->logit_bias[i].bias;
    if (isnan(b) || b > FLT_MAX)
      return pw_seterr(err, PW_EINVAL, "logit_bias for token %d must be a finite number or -inf",
                       (int)p->logit_bias[i].token);
  }
  if (p->n_probs < 0 || p->n_probs > PW_SAMPLE_MAX_PROBS)
    return pw_seterr(err, PW_EINVAL, "n_probs must be in [0, %d], got %d", PW_SAMPLE_MAX_PROBS,
                     (int)p->n_probs);
  return 0;
}

pw_sampler *pw_sampler_create(const pw_sampler_params *p, int n_vocab, char *err) {
  if (pw_sampler_params_validate(p, err)) return NULL;
  if (n_vocab <= 0) {
    pw_seterr(err, PW_EINVAL, "sampler: n_vocab must be positive, got %d", n_vocab);
    return NULL;
  }
  for (int i = 0; i < p->n_logit_bias; i++) {
    if (p->logit_bias[i].token < 0 || p->logit_bias[i].token >= n_vocab) {
      pw_seterr(err, PW_EINVAL, "logit_bias token %d out of range [0, %d)", (int)p->logit_bias[i].token,
                n_vocab);
      return NULL;
    }
  }
  pw_sampler *s = calloc(1, sizeof *s);
  if (!s) goto fail;
  s->p = *p;
  s->n_vocab = n_vocab;
  s->cand = malloc((size_t)n_vocab * sizeof *s->cand);
  s->cand2 = malloc((size_t)n_vocab * sizeof *s->cand2);
  s->weight = malloc((size_t)n_vocab * sizeof *s->weight);
  if (!s->cand || !s->cand2 || !s->weight) goto fail;
  if (p->n_logit_bias > 0) {
    s->bias = malloc((size_t)p->n_logit_bias * sizeof *s->bias);
    if (!s->bias) goto fail;
    memcpy(s->bias, p->logit_bias, (size_t)p->n_logit_bias * sizeof *s->bias);
  }
  s->p.logit_bias = s->bias;
  s->penalize = p->repeat_last_n > 0 &&
                (p->repeat_penalty != 1.0f || p->frequency_penalty != 0.0f || p->presence_penalty != 0.0f);
  if (s->penalize) {
    s->hist = malloc((size_t)p->repeat_last_n * sizeof *s->hist);
    s->count = calloc((size_t)n_vocab, sizeof *s->count);
    if (!s->hist || !s->count) goto fail;
  }
  pw_rng_seed(&s->rng, p->seed);
  return s;
fail:
  pw_sampler_destroy(s);
  pw_seterr(err, PW_ENOMEM, "sampler: out of memory for %d tokens", n_vocab);
  return NULL;
}

void pw_sampler_destroy(pw_sampler *s) {
  if (!s) return;
  free(s->bias);
  free(s->cand);
  free(s->cand2);
  free(s->weight);
  free(s->hist);
  free(s->count);
  free(s);
}

void pw_sampler_reset(pw_sampler *s) {
  if (s->penalize) memset(s->count, 0, (size_t)s->n_vocab * sizeof *s->count);
  s->hist_len = s->hist_pos = 0;
  pw_rng_seed(&s->rng, s->p.seed);
}

int pw_sampler_accept(pw_sampler *s, int32_t token) {
  if (token < 0 || token >= s->n_vocab) return PW_EINVAL;
  if (!s->penalize) return 0;
  if (s->hist_len == s->p.repeat_last_n) s->count[s->hist[s->hist_pos]]--;
  else s->hist_len++;
  s->hist[s->hist_pos] = token;
  s->count[token]++;
  s->hist_pos = (s->hist_pos + 1) % s->p.repeat_last_n;
  return 0;
}

const pw_sampler_params *pw_sampler_get_params(const pw_sampler *s) { return &s->p; }
void pw_sampler_get_rng(const pw_sampler *s, pw_rng *out) { *out = s->rng; }
void pw_sampler_set_rng(pw_sampler *s, const pw_rng *rng) { s->rng = *rng; }

int32_t pw_argmax(const float *logits, int n) {
  if (n <= 0) return -1;
  return (int32_t)pw_ops_get()->argmax(logits, n);
}

/* ---- ordering and heap: "better" = higher logit, then lower token id ---- */

static inline int better(float la, int32_t ta, float lb, int32_t tb) {
  return la > lb || (la == lb && ta < tb);
}

/* Min-heap (worst element at the root) over h[0, n), generated for both
 * element types so candidates and logprobs share one ordering. */
#define PW_DEFINE_HEAP(NAME, T, KEY, TOK)                                      \
  static int NAME##_better(const T *a, const T *b) {                         \
    return better(a->KEY, a->TOK, b->KEY, b->TOK);                           \
  }                                                                          \
  static void NAME##_down(T *h, int n, int i) {                              \
    for (;;) {                                                               \
      int l = 2 * i + 1, w = i;                                              \
      if (l < n && NAME##_better(&h[w], &h[l])) w = l;                       \
      if (l + 1 < n && NAME##_better(&h[w], &h[l + 1])) w = l + 1;           \
      if (w == i) return;                                                    \
      T t = h[i];                                                            \
      h[i] = h[w];                                                           \
      h[w] = t;                                                              \
      i = w;                                                                 \
    }                                                                        \
  }                                                                          \
  static void NAME##_heapify(T *h, int n) {                                  \
    for (int i = n / 2 - 1; i >= 0; i--) NAME##_down(h, n, i);               \
  }                                                                          \
  /* Sorts a heap best-first by moving the worst to the end repeatedly. */   \
  static void NAME##_sort(T *h, int n) {                                     \
    for (int m = n - 1; m > 0; m--) {                                        \
      T t = h[0];                                                            \
      h[0] = h[m];                                                           \
      h[m] = t;                                                              \
      NAME##_down(h, m, 0);                                                  \
    }                                                                        \
  }

PW_DEFINE_HEAP(cand, pw_candidate, logit, token)
PW_DEFINE_HEAP(lp, pw_logprob, logprob, token)

/* Sorting many candidates: a stable LSD radix sort (four 8-bit passes) on a
 * key that orders logits descending, -0 as +0. Entered in ascending token
 * order, it gives exactly the heap's order (logit desc, then token asc).
 * top_p 0.95 over 151,936 N(0, 3) logits keeps about 15,700 candidates,
 * whose heap sort took 62% of a 3 ms sample. */
#define RADIX_MIN 512

static uint32_t desc_key(float f) {
  if (f == 0.0f) f = 0.0f; /* -0 sorts as +0 (they compare equal) */
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  u = u & 0x80000000u ? ~u : u | 0x80000000u; /* ascending as unsigned */
  return ~u;
}

/* c[0, n) in ascending token order -> sorted best-first; tmp[n] scratch */
static void cand_radix(pw_candidate *c, pw_candidate *tmp, int n) {
  pw_candidate *src = c, *dst = tmp;
  for (int shift = 0; shift < 32; shift += 8) {
    int pos[256] = {0};
    for (int i = 0; i < n; i++) pos[desc_key(src[i].logit) >> shift & 0xFF]++;
    for (int b = 0, sum = 0; b < 256; b++) {
      const int k = pos[b];
      pos[b] = sum;
      sum += k;
    }
    for (int i = 0; i < n; i++) dst[pos[desc_key(src[i].logit) >> shift & 0xFF]++] = src[i];
    pw_candidate *t = src;
    src = dst;
    dst = t;
  }
  /* four passes: the result is back in c */
}

/* ---- the chain ---- */

static void apply_penalties(pw_sampler *s, pw_candidate *c) {
  const float rp = s->p.repeat_penalty, fp = s->p.frequency_penalty, pp = s->p.presence_penalty;
  /* Each distinct token once: negate its count as a "done" mark, then undo. */
  for (int i = 0; i < s->hist_len; i++) {
    int32_t t = s->hist[i];
    int32_t n = s->count[t];
    if (n <= 0) continue;
    float l = c[t].logit;
    if (rp != 1.0f) l = l > 0.0f ? l / rp : l * rp;
    c[t].logit = l - (float)n * fp - pp;
    s->count[t] = -n;
  }
  for (int i = 0; i < s->hist_len; i++) {
    int32_t t = s->hist[i];
    if (s->count[t] < 0) s->count[t] = -s->count[t];
  }
}

/* Keeps the smallest prefix of sorted c[0, n) whose mass reaches top_p * z,
 * where e[i] (stored in .p) = exp(logit - max) and z is the normaliser of the
 * set top_p is defined over. */
static int cut_top_p(const pw_candidate *c, int n, float top_p, double z) {
  double cum = 0.0, target = (double)top_p * z;
  for (int i = 0; i < n; i++) {
    cum += c[i].p;
    if (cum >= target) return i + 1;
  }
  return n;
}

int pw_sampler_dist(pw_sampler *s, const float *logits, const pw_candidate **out) {
  const pw_sampler_params *p = &s->p;
  pw_candidate *c = s->cand;
  const int V = s->n_vocab;
  for (int i = 0; i < V; i++) {
    c[i].token = i;
    c[i].logit = isnan(logits[i]) ? -INFINITY : logits[i];
  }
  for (int i = 0; i < p->n_logit_bias; i++) {
    const pw_logit_bias *b = &s->bias[i];
    if (b->bias <= -100.0f) c[b->token].logit = -INFINITY;
    else c[b->token].logit += b->bias;
  }
  if (s->penalize) apply_penalties(s, c);

  if (p->temperature <= 0.0f) {
    int best = 0;
    for (int i = 1; i < V; i++)
      if (c[i].logit > c[best].logit) best = i;
    if (!(c[best].logit > -INFINITY)) return PW_ERANGE;
    c[0] = c[best];
    c[0].p = 1.0f;
    *out = c;
    return 1;
  }

  /* Drop excluded tokens, clamp +inf, find the max. */
  int n = 0;
  float *const flat = s->weight; /* the logits again, flat: vector max and exp */
  for (int i = 0; i < V; i++) {
    float l = c[i].logit;
    if (!(l > -INFINITY)) continue;
    if (l > FLT_MAX) l = FLT_MAX;
    c[n].token = c[i].token;
    c[n].logit = l;
    flat[n] = l;
    n++;
  }
  if (n == 0) return PW_ERANGE;
  const float mx = flat[pw_argmax_f32(flat, n)];

  const int use_k = p->top_k > 0 && p->top_k < n;
  const int use_p = p->top_p < 1.0f, use_min = p->min_p > 0.0f;
  if (use_k) {
    /* k-heap of the best tokens in c[0, k); c[k, n) is read only. */
    const int k = p->top_k;
    cand_heapify(c, k);
    for (int i = k; i < n; i++) {
      if (cand_better(&c[i], &c[0])) {
        c[0] = c[i];
        cand_down(c, k, 0);
      }
    }
    cand_sort(c, k);
    n = k;
  }
  if (use_p || use_min) {
    double z = 0.0;
    if (!use_k) {
      /* top_p over the whole vocabulary: store e = exp(l - max) and z,
       * with the vector exp (151,936 scalar expf took about 1.4 ms) */
      z = pw_exp_sum(flat, flat, mx, 1.0f, n);
      for (int i = 0; i < n; i++) c[i].p = flat[i];
      /* Every survivor of top_p then min_p lies in {l >= thr}: the min_p
       * threshold, or a logit t whose upper set already holds top_p of the
       * mass (top_p keeps a prefix of the sorted order, which ends inside
       * that set). Sorting only that set is then exact. t comes from a
       * histogram of the mass over the 32 logits below the max, lowered by one
       * extra bin so float rounding near a bin edge cannot matter. */
      float thr = use_min ? mx + logf(p->min_p) : -INFINITY;
      if (use_p) {
        double *h = s->hist_mass;
        memset(h, 0, sizeof s->hist_mass);
        for (int i = 0; i < n; i++) {
          float d = (mx - c[i].logit) * HIST_PER_LOGIT;
          if (d < HIST_BINS) h[(int)d] += c[i].p;
        }
        double cum = 0.0, target = (double)p->top_p * z;
        for (int b = 0; b < HIST_BINS - 1; b++) {
          cum += h[b];
          if (cum >= target) {
            float t = mx - (float)(b + 2) / HIST_PER_LOGIT;
            if (t > thr) thr = t;
            break;
          }
        }
      }
      int m = 0;
      for (int i = 0; i < n; i++)
        if (c[i].logit >= thr) c[m++] = c[i];
      n = m;
      if (n >= RADIX_MIN) {
        cand_radix(c, s->cand2, n);
      } else {
        cand_heapify(c, n);
        cand_sort(c, n);
      }
    } else {
      for (int i = 0; i < n; i++) {
        c[i].p = expf(c[i].logit - mx);
        z += c[i].p;
      }
    }
    if (use_p) n = cut_top_p(c, n, p->top_p, z);
    if (use_min) {
      const float thr = mx + logf(p->min_p);
      int m = 1; /* the max always survives */
      while (m < n && c[m].logit >= thr) m++;
      n = m;
    }
  }

  /* Temperature and softmax over the survivors; (l - max) / T rather than
   * l / T - max / T so huge logits cannot overflow. */
  double sum = 0.0;
  const float inv_t = 1.0f / p->temperature;
  for (int i = 0; i < n; i++) {
    /* a temperature so small that 1/T overflows takes the T -> 0 limit
     * (the tied maxima, evenly) instead of 0 * inf = NaN weights */
    c[i].p = inv_t <= FLT_MAX ? expf((c[i].logit - mx) * inv_t) : c[i].logit == mx ? 1.0f : 0.0f;
    sum += c[i].p;
  }
  /* sum >= 1 because the max token itself contributes exp(0) = 1. */
  for (int i = 0; i < n; i++) c[i].p = (float)(c[i].p / sum);
  *out = c;
  return n;
}

/* The first i whose cumulative weight w[0..i] exceeds r, or the last nonzero
 * weight when rounding leaves r at the top (w[0, n) has at least one). Whole
 * blocks whose sum keeps the total <= r are skipped; the sum runs in four
 * partials so the adds do not form one long dependency chain. */
#define WALK_BLOCK 64

static int walk_weights(const float *w, int n, double r) {
  double cum = 0.0;
  int i = 0;
  for (; i + WALK_BLOCK <= n; i += WALK_BLOCK) {
    double s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0;
    for (int j = i; j < i + WALK_BLOCK; j += 4) {
      s0 += w[j];
      s1 += w[j + 1];
      s2 += w[j + 2];
      s3 += w[j + 3];
    }
    const double b = (s0 + s1) + (s2 + s3);
    if (cum + b > r) break;
    cum += b;
  }
  for (; i < n; i++) {
    if (w[i] <= 0.0f) continue; /* zero weight (NaN, -inf, underflow): never chosen */
    cum += w[i];
    if (r < cum) return i;
  }
  for (i = n - 1; i > 0 && !(w[i] > 0.0f); i--) {
  }
  return i;
}

int32_t pw_sampler_sample(pw_sampler *s, const float *logits) {
  const pw_sampler_params *p = &s->p;
  const int V = s->n_vocab;
  if (p->n_logit_bias == 0 && !s->penalize) {
    /* The logits reach the chain unchanged: no candidate copy. */
    const pw_ops *o = pw_ops_get();
    if (p->temperature <= 0.0f) {
      const int32_t best = (int32_t)o->argmax(logits, V);
      return logits[best] > -INFINITY ? best : PW_ERANGE;
    }
    const float inv_t = 1.0f / p->temperature;
    const int filtered = (p->top_k > 0 && p->top_k < V) || p->top_p < 1.0f || p->min_p > 0.0f;
    if (!filtered && inv_t <= FLT_MAX) {
      const int32_t best = (int32_t)o->argmax(logits, V);
      const float mx = logits[best];
      if (!(mx > -INFINITY)) return PW_ERANGE;
      /* +inf logits need the clamp to FLT_MAX: the general path below */
      if (mx <= FLT_MAX) {
        /* total >= 1: the max token weighs exp(0) = 1 */
        const double total = o->exp_sum(s->weight, logits, mx, inv_t, V);
        const double r = pw_rng_uniform(&s->rng) * total; /* the one draw */
        return walk_weights(s->weight, V, r);
      }
    }
  }
  const pw_candidate *c;
  int n = pw_sampler_dist(s, logits, &c);
  if (n < 0) return n;
  if (s->p.temperature <= 0.0f) return c[0].token;
  double total = 0.0;
  for (int i = 0; i < n; i++) total += c[i].p;
  const double r = pw_rng_uniform(&s->rng) * total; /* the one draw */
  double cum = 0.0;
  int last = 0;
  for (int i = 0; i < n; i++) {
    if (c[i].p <= 0.0f) continue;
    last = i;
    cum += c[i].p;
    if (r < cum) return c[i].token;
  }
  return c[last].token; /* rounding left r at the very top */
}

int pw_sampler_logprobs(const float *logits, int n_vocab, int32_t chosen, int n_top, pw_logprob *out_top,
                        float *out_chosen) {
  if (!logits || n_vocab <= 0 || n_top < 0 || (n_top > 0 && !out_top) || chosen < 0 || chosen >= n_vocab)
    return PW_EINVAL;
  float mx = logits[pw_argmax_f32(logits, n_vocab)]; /* NaN never wins */
  if (!(mx > -INFINITY)) return PW_ERANGE;
  double z = 0.0;
  if (mx <= FLT_MAX) {
    /* the vector exp in stack-sized pieces: a double exp per token took
     * about 2 ms of every token for 152K logits (per draft proposal too) */
    float w[1024];
    for (int i = 0; i < n_vocab; i += 1024)
      z += pw_exp_sum(w, logits + i, mx, 1.0f, n_vocab - i < 1024 ? n_vocab - i : 1024);
  } else { /* +inf logits count as the largest finite float */
    mx = FLT_MAX;
    for (int i = 0; i < n_vocab; i++)
      if (logits[i] > -INFINITY) z += exp((double)(fminf(logits[i], FLT_MAX) - mx));
  }
  /* logprob = (l - max) - log z, which keeps precision for large logits. */
  const float logz = (float)log(z);
#define LP(i) (isnan(logits[i]) ? -INFINITY : (fminf(logits[i], FLT_MAX) - mx) - logz)
  if (out_chosen) *out_chosen = LP(chosen);
  int k = n_top < n_vocab ? n_top : n_vocab;
  if (k == 0) return 0;
  /* k-heap of the best (logprob, token) pairs in out_top, worst at the root. */
  for (int i = 0; i < n_vocab; i++) {
    pw_logprob e = {i, LP(i)};
    if (i < k) {
      out_top[i] = e;
      if (i == k - 1) lp_heapify(out_top, k);
    } else if (lp_better(&e, &out_top[0])) {
      out_top[0] = e;
      lp_down(out_top, k, 0);
    }
  }
#undef LP
  lp_sort(out_top, k);
  return k;
}
