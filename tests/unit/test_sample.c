/* test_sample.c - sampler chain: greedy, filters against a full-sort
 * reference, penalties, bias, seeded determinism, RNG consumption,
 * distribution, the fast paths without bias, penalties or filters against
 * the candidate path, logprobs, NaN/inf handling and parameter validation. */
#include <float.h>
#include <stdint.h>
#include <time.h>

#include "base/error.h"
#include "base/rng.h"
#include "sample/sample.h"
#include "test.h"

static pw_rng g_rng; /* test data generator, independent of the samplers */

static float rand_normal(void) {
  double u1 = pw_rng_uniform(&g_rng), u2 = pw_rng_uniform(&g_rng);
  return (float)(sqrt(-2.0 * log(1.0 - u1)) * cos(6.283185307179586 * u2));
}

static void fill_normal(float *x, int n, float scale) {
  for (int i = 0; i < n; i++) x[i] = scale * rand_normal();
}

static pw_sampler *make(const pw_sampler_params *p, int n_vocab) {
  char err[PW_ERRMAX] = "";
  pw_sampler *s = pw_sampler_create(p, n_vocab, err);
  CHECK_MSG(s != NULL, "create: %s", err);
  if (!s) exit(1);
  return s;
}

static int same_rng(const pw_rng *a, const pw_rng *b) { return memcmp(a, b, sizeof *a) == 0; }

static void test_argmax(void) {
  float a[] = {1, 3, 3, 2};
  CHECK_EQ_INT(pw_argmax(a, 4), 1);
  float b[] = {NAN, 1, 5, 5};
  CHECK_EQ_INT(pw_argmax(b, 4), 2);
  float c[] = {-INFINITY, -INFINITY};
  CHECK_EQ_INT(pw_argmax(c, 2), 0);
  float d[] = {1, INFINITY, 2, INFINITY};
  CHECK_EQ_INT(pw_argmax(d, 4), 1);
  CHECK_EQ_INT(pw_argmax(a, 0), -1);
}

static void test_greedy(void) {
  enum { V = 1000 };
  static float x[V];
  pw_sampler_params p;
  pw_sampler_params_default(&p);
  p.temperature = 0.0f;
  p.top_p = 0.5f; /* ignored by greedy */
  pw_sampler *s = make(&p, V);
  for (int it = 0; it < 50; it++) {
    for (int i = 0; i < V; i++) x[i] = (float)(pw_rng_next(&g_rng) % 50); /* many ties */
    pw_rng before, after;
    pw_sampler_get_rng(s, &before);
    CHECK_EQ_INT(pw_sampler_sample(s, x), pw_argmax(x, V));
    pw_sampler_get_rng(s, &after);
    CHECK(same_rng(&before, &after)); /* zero draws */
  }
  pw_sampler_destroy(s);
}

/* Plain argmax by hand: the greedy contract, independent of the sampler. */
static int32_t brute_argmax(const float *x, int n) {
  int32_t best = 0;
  for (int i = 1; i < n; i++)
    if (x[i] > x[best] || (isnan(x[best]) && !isnan(x[i]))) best = i;
  return best;
}

/* Greedy without bias or penalties reads the caller's row directly; a
 * zero-effect bias entry forces the candidate path: both must agree. */
static void test_greedy_fast(void) {
  enum { V = 3001 };
  static float x[V];
  pw_sampler_params p;
  pw_sampler_params_default(&p);
  p.temperature = 0.0f;
  pw_sampler *fast = make(&p, V);
  pw_logit_bias zero = {7, 0.0f};
  p.logit_bias = &zero;
  p.n_logit_bias = 1;
  pw_sampler *slow = make(&p, V);
  for (int it = 0; it < 60; it++) {
    const int kind = it % 6;
    for (int i = 0; i < V; i++) {
      switch (kind) {
      case 0: x[i] = rand_normal() * 3; break;
      case 1: x[i] = (float)(pw_rng_next(&g_rng) % 40); break; /* ties */
      case 2: x[i] = pw_rng_next(&g_rng) % 2 ? NAN : (float)(pw_rng_next(&g_rng) % 40); break;
      case 3: x[i] = pw_rng_next(&g_rng) % 3 ? -INFINITY : NAN; break; /* nothing left */
      case 4: x[i] = pw_rng_next(&g_rng) % 50 ? (float)(pw_rng_next(&g_rng) % 40) : INFINITY; break;
      default: x[i] = NAN; break;
      }
    }
    if (kind == 1) x[V - 1] = 40.0f; /* the max in the scalar tail */
    if (kind == 2) x[0] = NAN;
    pw_rng before, after;
    pw_sampler_get_rng(fast, &before);
    int32_t t = pw_sampler_sample(fast, x);
    pw_sampler_get_rng(fast, &after);
    CHECK(same_rng(&before, &after)); /* zero draws, also on failure */
    CHECK_EQ_INT(t, pw_sampler_sample(slow, x));
    if (kind == 3 || kind == 5) CHECK_EQ_INT(t, PW_ERANGE);
    else CHECK_EQ_INT(t, brute_argmax(x, V));
    if (kind != 3 && kind != 5) CHECK_EQ_INT(pw_argmax(x, V), t);
  }
  pw_sampler_destroy(fast);
  pw_sampler_destroy(slow);
}

static void test_top_k1_is_greedy(void) {
  enum { V = 300 };
  static float x[V];
  const float temps[] = {0.1f, 1.0f, 5.0f, 100.0f};
  for (int t = 0; t < 4; t++) {
    pw_sampler_params p;
    pw_sampler_params_default(&p);
    p.temperature = temps[t];
    p.top_k = 1;
    pw_sampler *s = make(&p, V);
    for (int it = 0; it < 30; it++) {
      for (int i = 0; i < V; i++) x[i] = (float)(pw_rng_next(&g_rng) % 20);
      pw_rng want;
      pw_sampler_get_rng(s, &want);
      pw_rng_uniform(&want); /* one draw even with one candidate */
      CHECK_EQ_INT(pw_sampler_sample(s, x), pw_argmax(x, V));
      pw_rng got;
      pw_sampler_get_rng(s, &got);
      CHECK(same_rng(&want, &got));
    }
    pw_sampler_destroy(s);
  }
}

static void test_seeded(void) {
  enum { V = 500, STEPS = 200 };
  static float x[V];
  for (int cfg = 0; cfg < 2; cfg++) {
    pw_sampler_params p;
    pw_sampler_params_default(&p);
    p.temperature = 1.3f;
    if (cfg == 1) {
      p.top_k = 40;
      p.top_p = 0.9f;
      p.min_p = 0.01f;
      p.repeat_penalty = 1.1f;
      p.frequency_penalty = 0.2f;
    }
    p.seed = 42;
    pw_sampler *a = make(&p, V), *b = make(&p, V);
    p.seed = 43;
    pw_sampler *c = make(&p, V);
    int32_t first[STEPS];
    int diff = 0;
    pw_rng data;
    pw_rng_seed(&data, 7);
    for (int it = 0; it < STEPS; it++) {
      g_rng = data;
      fill_normal(x, V, 2.0f);
      data = g_rng;
      int32_t ta = pw_sampler_sample(a, x), tb = pw_sampler_sample(b, x), tc = pw_sampler_sample(c, x);
      CHECK_EQ_INT(ta, tb);
      diff += ta != tc;
      first[it] = ta;
      pw_sampler_accept(a, ta);
      pw_sampler_accept(b, tb);
      pw_sampler_accept(c, tc);
    }
    CHECK_MSG(diff > STEPS / 4, "seeds 42 and 43 differ at only %d of %d steps", diff, STEPS);
    /* reset replays the same stream */
    pw_sampler_reset(a);
    pw_rng_seed(&data, 7);
    int same = 0;
    for (int it = 0; it < STEPS; it++) {
      g_rng = data;
      fill_normal(x, V, 2.0f);
      data = g_rng;
      int32_t t = pw_sampler_sample(a, x);
      same += t == first[it];
      pw_sampler_accept(a, t);
    }
    CHECK_EQ_INT(same, STEPS);
    pw_sampler_destroy(a);
    pw_sampler_destroy(b);
    pw_sampler_destroy(c);
  }
}

/* Sample n times from logits[4] and compare frequencies with want[4]. */
static void check_freq(const pw_sampler_params *p, const float *logits, const double *want, int n) {
  pw_sampler *s = make(p, 4);
  int hist[4] = {0};
  for (int i = 0; i < n; i++) {
    int32_t t = pw_sampler_sample(s, logits);
    CHECK(t >= 0 && t < 4);
    if (t >= 0 && t < 4) hist[t]++;
  }
  for (int i = 0; i < 4; i++) {
    CHECK_NEAR((double)hist[i] / n, want[i], 0.015);
    if (want[i] == 0.0) CHECK_EQ_INT(hist[i], 0);
  }
  pw_sampler_destroy(s);
}

static void test_distribution(void) {
  const float l[4] = {1.0f, 2.0f, 0.5f, -1.0f};
  const float temps[] = {1.0f, 0.5f, 2.0f};
  for (int t = 0; t < 3; t++) {
    double w[4], z = 0;
    for (int i = 0; i < 4; i++) z += w[i] = exp(l[i] / temps[t]);
    for (int i = 0; i < 4; i++) w[i] /= z;
    pw_sampler_params p;
    pw_sampler_params_default(&p);
    p.temperature = temps[t];
    p.seed = 1000 + (uint64_t)t;
    check_freq(&p, l, w, 20000);
  }
  /* top_k = 2 renormalises over tokens 1 and 0 */
  double z = exp(1.0) + exp(2.0);
  double w[4] = {exp(1.0) / z, exp(2.0) / z, 0, 0};
  pw_sampler_params p;
  pw_sampler_params_default(&p);
  p.top_k = 2;
  check_freq(&p, l, w, 20000);
}

/* Unfiltered sampling without bias or penalties (the OpenAI default) takes
 * the vector exp over the caller's row. Four heavy tokens in different walk
 * blocks and vector lanes of a longer row, the rest -inf, NaN or far below:
 * frequencies follow the softmax, the others are never drawn. */
static void test_unfiltered_fast_freq(void) {
  enum { V = 1000, N = 20000 };
  static float x[V];
  const int32_t heavy[4] = {3, 200, 517, 999}; /* 999: scalar tail */
  const float hl[4] = {1.0f, 2.0f, 0.5f, -1.0f};
  const float temps[] = {1.0f, 0.5f, 2.0f};
  for (int t = 0; t < 3; t++) {
    for (int i = 0; i < V; i++) x[i] = i % 3 == 0 ? NAN : i % 3 == 1 ? -INFINITY : -200.0f;
    double w[4], z = 0;
    for (int k = 0; k < 4; k++) {
      x[heavy[k]] = hl[k];
      z += w[k] = exp(hl[k] / temps[t]);
    }
    for (int k = 0; k < 4; k++) w[k] /= z;
    pw_sampler_params p;
    pw_sampler_params_default(&p);
    p.temperature = temps[t];
    p.seed = 2000 + (uint64_t)t;
    pw_sampler *s = make(&p, V);
    int hits[4] = {0}, other = 0;
    for (int i = 0; i < N; i++) {
      int32_t tok = pw_sampler_sample(s, x);
      int k = 0;
      while (k < 4 && heavy[k] != tok) k++;
      if (k < 4) hits[k]++;
      else other++;
    }
    CHECK_EQ_INT(other, 0);
    for (int k = 0; k < 4; k++) CHECK_NEAR((double)hits[k] / N, w[k], 0.015);
    pw_sampler_destroy(s);
  }
}

/* The fast path against the candidate path (forced by a zero-effect bias
 * entry) on the same RNG stream: the same draw picks the same token except
 * where the vector exp's rounding moves a cumulative boundary past r. */
static void test_unfiltered_fast_vs_general(void) {
  enum { V = 5003, STEPS = 400 };
  static float x[V];
  pw_sampler_params p;
  pw_sampler_params_default(&p);
  p.temperature = 0.8f;
  p.seed = 5;
  pw_sampler *fast = make(&p, V);
  pw_logit_bias zero = {11, 0.0f};
  p.logit_bias = &zero;
  p.n_logit_bias = 1;
  pw_sampler *slow = make(&p, V);
  int diff = 0;
  for (int it = 0; it < STEPS; it++) {
    fill_normal(x, V, it % 2 ? 6.0f : 1.0f);
    for (int i = it % 7; i < V; i += 7) x[i] = it % 2 ? NAN : -INFINITY;
    int32_t a = pw_sampler_sample(fast, x), b = pw_sampler_sample(slow, x);
    CHECK(a >= 0 && a < V && isfinite(x[a]));
    diff += a != b;
  }
  pw_rng ra, rb;
  pw_sampler_get_rng(fast, &ra);
  pw_sampler_get_rng(slow, &rb);
  CHECK(same_rng(&ra, &rb));
  CHECK_MSG(diff <= STEPS / 50, "fast and candidate paths differ at %d of %d draws", diff, STEPS);
  pw_sampler_destroy(fast);
  pw_sampler_destroy(slow);
}

/* Exactly one draw per successful sample (also when a single token
 * survives), none on failure; replay from a snapshot gives the same token;
 * NaN and -inf are never drawn; all-NaN is PW_ERANGE. For the unfiltered
 * fast path and for the filtered chain. */
static void check_one_draw(float temperature, int top_k, float top_p, float min_p, uint64_t seed) {
  enum { V = 2000 };
  static float x[V];
  pw_sampler_params p;
  pw_sampler_params_default(&p);
  p.temperature = temperature;
  p.top_k = top_k;
  p.top_p = top_p;
  p.min_p = min_p;
  p.seed = seed;
  pw_sampler *s = make(&p, V), *twin = make(&p, V);
  pw_rng manual;
  pw_rng_seed(&manual, seed);
  for (int it = 0; it < 120; it++) {
    fill_normal(x, V, 2.5f);
    const int kind = it % 4;
    if (kind == 1) /* NaN on every token that could carry mass */
      for (int i = 0; i < V; i++)
        if (x[i] > 0) x[i] = NAN;
    if (kind == 2) { /* one survivor */
      for (int i = 0; i < V; i++) x[i] = i % 2 ? NAN : -INFINITY;
      x[(it * 37) % V] = -3.0f;
    }
    if (kind == 3) /* nothing above -inf */
      for (int i = 0; i < V; i++) x[i] = i % 2 ? NAN : -INFINITY;
    pw_rng snap;
    pw_sampler_get_rng(s, &snap);
    int32_t t = pw_sampler_sample(s, x);
    CHECK_EQ_INT(pw_sampler_sample(twin, x), t); /* same seed, same stream */
    if (kind == 3) {
      CHECK_EQ_INT(t, PW_ERANGE);
    } else {
      pw_rng_uniform(&manual);
      CHECK(t >= 0 && t < V && x[t] > -INFINITY); /* never NaN or -inf */
      if (kind == 1 && t >= 0) CHECK(x[t] <= 0);
      if (kind == 2) CHECK_EQ_INT(t, (it * 37) % V);
    }
    pw_rng now;
    pw_sampler_get_rng(s, &now);
    CHECK(same_rng(&manual, &now));
    pw_sampler_set_rng(s, &snap); /* replay from the snapshot */
    CHECK_EQ_INT(pw_sampler_sample(s, x), t);
  }
  pw_sampler_destroy(s);
  pw_sampler_destroy(twin);
}

static void test_top_p_min_p_small(void) {
  const float l[4] = {logf(0.5f), logf(0.3f), logf(0.15f), logf(0.05f)};
  const pw_candidate *c;
  pw_sampler_params p;
  pw_sampler_params_default(&p);
  p.top_p = 0.7f; /* 0.5 < 0.7 <= 0.8: keeps tokens 0 and 1 */
  pw_sampler *s = make(&p, 4);
  CHECK_EQ_INT(pw_sampler_dist(s, l, &c), 2);
  CHECK_EQ_INT(c[0].token, 0);
  CHECK_EQ_INT(c[1].token, 1);
  CHECK_NEAR(c[0].p, 0.625, 1e-5);
  CHECK_NEAR(c[1].p, 0.375, 1e-5);
  double w[4] = {0.625, 0.375, 0, 0};
  pw_sampler_destroy(s);
  check_freq(&p, l, w, 10000);

  p.top_p = 0.45f;
  s = make(&p, 4);
  CHECK_EQ_INT(pw_sampler_dist(s, l, &c), 1);
  pw_sampler_destroy(s);

  /* min_p 0.2: keeps p >= 0.1 */
  pw_sampler_params_default(&p);
  p.min_p = 0.2f;
  s = make(&p, 4);
  CHECK_EQ_INT(pw_sampler_dist(s, l, &c), 3);
  CHECK_EQ_INT(c[2].token, 2);
  pw_sampler_destroy(s);
  double w3[4] = {0.5 / 0.95, 0.3 / 0.95, 0.15 / 0.95, 0};
  check_freq(&p, l, w3, 10000);

  /* top_p after top_k sees the renormalised top_k set (llama.cpp order):
   * over {0,1,2} the mass of {0,1} is 0.842 >= 0.82, over all it is 0.8. */
  pw_sampler_params_default(&p);
  p.top_p = 0.82f;
  s = make(&p, 4);
  CHECK_EQ_INT(pw_sampler_dist(s, l, &c), 3);
  pw_sampler_destroy(s);
  p.top_k = 3;
  s = make(&p, 4);
  CHECK_EQ_INT(pw_sampler_dist(s, l, &c), 2);
  pw_sampler_destroy(s);
}

/* ---- large-vocabulary filters against a full-sort reference ---- */

typedef struct {
  float l;
  int32_t t;
} ref_t;

static int ref_cmp(const void *a, const void *b) {
  const ref_t *x = a, *y = b;
  if (x->l != y->l) return x->l > y->l ? -1 : 1;
  return (x->t > y->t) - (x->t < y->t);
}

/* Reference chain (top_k -> top_p -> min_p) by full sort; returns kept count. */
static int ref_filter(const float *x, int V, int top_k, float top_p, float min_p, ref_t *r) {
  for (int i = 0; i < V; i++) r[i] = (ref_t){x[i], i};
  qsort(r, (size_t)V, sizeof *r, ref_cmp);
  int n = (top_k > 0 && top_k < V) ? top_k : V;
  float mx = r[0].l;
  if (top_p < 1.0f) {
    double z = 0, cum = 0;
    if (n == V) {
      for (int i = 0; i < V; i++) z += expf(x[i] - mx); /* token order, as the sampler */
    } else {
      for (int i = 0; i < n; i++) z += expf(r[i].l - mx);
    }
    int m = n;
    for (int i = 0; i < n; i++) {
      cum += expf(r[i].l - mx);
      if (cum >= (double)top_p * z) {
        m = i + 1;
        break;
      }
    }
    n = m;
  }
  if (min_p > 0.0f) {
    int m = 1;
    while (m < n && r[m].l >= mx + logf(min_p)) m++;
    n = m;
  }
  return n;
}

static void test_filters_vs_reference(void) {
  enum { V = 50000 };
  static float x[V];
  static ref_t r[V];
  const struct {
    int k;
    float p, minp, scale;
    int quant; /* quantise logits to force ties */
  } cases[] = {
      {0, 0.9f, 0, 3, 0},     {0, 0.5f, 0, 3, 0},       {0, 0.99f, 0, 3, 0},  {0, 0.95f, 0.05f, 3, 0},
      {0, 1, 0.1f, 3, 0},     {0, 0.9f, 0, 0.01f, 0},   {0, 0.9f, 0, 3, 1},   {100, 1, 0, 3, 1},
      {40, 0.95f, 0.05f, 3, 0}, {1000, 0.7f, 0, 1, 0}, {0, 0.3f, 0.5f, 0.5f, 0}, {0, 0.9999f, 0, 3, 0},
  };
  for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
    fill_normal(x, V, cases[ci].scale);
    if (cases[ci].quant)
      for (int i = 0; i < V; i++) x[i] = roundf(x[i] * 4) / 4;
    pw_sampler_params p;
    pw_sampler_params_default(&p);
    p.top_k = cases[ci].k;
    p.top_p = cases[ci].p;
    p.min_p = cases[ci].minp;
    pw_sampler *s = make(&p, V);
    const pw_candidate *c;
    int n = pw_sampler_dist(s, x, &c);
    int want = ref_filter(x, V, p.top_k, p.top_p, p.min_p, r);
    CHECK_MSG(n == want, "case %zu: kept %d, reference %d", ci, n, want);
    int bad = 0;
    double sum = 0;
    for (int i = 0; i < n && i < want; i++) {
      bad += c[i].token != r[i].t;
      sum += c[i].p;
    }
    CHECK_MSG(bad == 0, "case %zu: %d tokens differ from the reference order", ci, bad);
    CHECK_NEAR(sum, 1.0, 1e-4);
    pw_sampler_destroy(s);
  }
}

/* Many survivors take the radix sort: its order must be the heap's (logit
 * desc, token asc), with -0 and +0 equal and negatives, ties and
 * denormals in the mix. */
static void test_sort_many(void) {
  enum { V = 6000 };
  static float x[V];
  static ref_t r[V];
  const float vals[] = {0.0f, -0.0f, 1.5f, -1.5f, 2.0f, -3e38f, 0.25f, -7.0f, 1e-40f, -1e-40f};
  for (int i = 0; i < V; i++) x[i] = vals[(i * 7919u + (unsigned)i / 13) % (sizeof vals / sizeof vals[0])];
  pw_sampler_params p;
  pw_sampler_params_default(&p);
  p.min_p = 1e-6f; /* a filter, so the sorted path; keeps all but the -3e38s */
  pw_sampler *s = make(&p, V);
  const pw_candidate *c;
  const int n = pw_sampler_dist(s, x, &c);
  const int want = ref_filter(x, V, 0, 1.0f, p.min_p, r);
  CHECK_MSG(n == want && n > 1000, "kept %d, reference %d", n, want);
  int bad = 0;
  for (int i = 0; i < n && i < want; i++) bad += c[i].token != r[i].t;
  CHECK_MSG(bad == 0, "%d tokens out of the reference order", bad);
  pw_sampler_destroy(s);
}

static void test_penalties(void) {
  float l[10] = {2, -1, 0.5f, 3, -2, 0, 1, 1, 1, 1};
  float orig[10];
  memcpy(orig, l, sizeof l);
  pw_sampler_params p;
  pw_sampler_params_default(&p);
  p.repeat_penalty = 1.5f;
  p.frequency_penalty = 0.25f;
  p.presence_penalty = 0.5f;
  p.repeat_last_n = 4;
  pw_sampler *s = make(&p, 10);
  const int32_t acc[] = {0, 1, 1, 5, 3}; /* window of 4: {1, 1, 5, 3}; 0 evicted */
  for (int i = 0; i < 5; i++) CHECK_EQ_INT(pw_sampler_accept(s, acc[i]), 0);
  CHECK_EQ_INT(pw_sampler_accept(s, 10), PW_EINVAL);
  CHECK_EQ_INT(pw_sampler_accept(s, -1), PW_EINVAL);
  const pw_candidate *c;
  CHECK_EQ_INT(pw_sampler_dist(s, l, &c), 10); /* no filters: token order */
  float want[10];
  memcpy(want, orig, sizeof want);
  want[1] = -1.0f * 1.5f - 2 * 0.25f - 0.5f;    /* negative: multiplied */
  want[5] = 0.0f * 1.5f - 0.25f - 0.5f;         /* zero stays zero before OpenAI terms */
  want[3] = 3.0f / 1.5f - 0.25f - 0.5f;         /* positive: divided */
  for (int i = 0; i < 10; i++) {
    CHECK_EQ_INT(c[i].token, i);
    CHECK_NEAR(c[i].logit, want[i], 1e-6);
  }
  CHECK(memcmp(l, orig, sizeof l) == 0); /* caller's logits untouched */
  /* a second dist call sees the same history (counts restored) */
  CHECK_EQ_INT(pw_sampler_dist(s, l, &c), 10);
  CHECK_NEAR(c[1].logit, want[1], 1e-6);
  /* sliding further: 1 leaves the window once two more tokens come */
  pw_sampler_accept(s, 9);
  pw_sampler_accept(s, 9); /* window {5, 3, 9, 9} */
  pw_sampler_dist(s, l, &c);
  CHECK_NEAR(c[1].logit, -1.0f, 1e-6);
  CHECK_NEAR(c[9].logit, 1.0f / 1.5f - 2 * 0.25f - 0.5f, 1e-6);
  pw_sampler_reset(s);
  pw_sampler_dist(s, l, &c);
  for (int i = 0; i < 10; i++) CHECK_NEAR(c[i].logit, orig[i], 0);
  pw_sampler_destroy(s);

  /* penalties off: accept keeps nothing and logits pass through */
  pw_sampler_params_default(&p);
  s = make(&p, 10);
  pw_sampler_accept(s, 3);
  pw_sampler_dist(s, l, &c);
  CHECK_NEAR(c[3].logit, 3.0f, 0);
  pw_sampler_destroy(s);
}

static void test_logit_bias(void) {
  float l[6] = {5, 1, 2, 4, 0, 3};
  pw_logit_bias b[] = {{0, -100.0f}, {3, -INFINITY}, {4, 5.0f}, {2, 0.5f}, {2, 0.25f}};
  pw_sampler_params p;
  pw_sampler_params_default(&p);
  p.logit_bias = b;
  p.n_logit_bias = 5;
  pw_sampler *s = make(&p, 6);
  b[4].bias = 99.0f; /* create copied the list */
  const pw_candidate *c;
  CHECK_EQ_INT(pw_sampler_dist(s, l, &c), 4); /* 0 and 3 banned */
  CHECK_EQ_INT(c[0].token, 1);
  CHECK_NEAR(c[1].logit, 2.75f, 1e-6); /* duplicates add */
  CHECK_NEAR(c[2].logit, 5.0f, 1e-6);
  for (int i = 0; i < 2000; i++) {
    int32_t t = pw_sampler_sample(s, l);
    CHECK(t != 0 && t != 3);
  }
  pw_sampler_destroy(s);
  b[4].bias = 0.25f;
  p.temperature = 0.0f;
  s = make(&p, 6);
  CHECK_EQ_INT(pw_sampler_sample(s, l), 4); /* 0 + 5 beats 3 */
  pw_sampler_destroy(s);

  /* everything banned: PW_ERANGE and no draw */
  pw_logit_bias all[2] = {{0, -INFINITY}, {1, -200.0f}};
  float l2[2] = {1, 2};
  p.logit_bias = all;
  p.n_logit_bias = 2;
  for (int g = 0; g < 2; g++) {
    p.temperature = g ? 0.0f : 1.0f;
    s = make(&p, 2);
    pw_rng before, after;
    pw_sampler_get_rng(s, &before);
    CHECK_EQ_INT(pw_sampler_sample(s, l2), PW_ERANGE);
    pw_sampler_get_rng(s, &after);
    CHECK(same_rng(&before, &after));
    pw_sampler_destroy(s);
  }
}

static void test_logprobs(void) {
  enum { V = 1000 };
  static float x[V];
  fill_normal(x, V, 3.0f);
  x[17] = x[18] = 20.0f; /* tie at the top: lower id first */
  double z = 0;
  for (int i = 0; i < V; i++) z += exp((double)x[i] - 20.0);
  double lse = 20.0 + log(z);
  pw_logprob top[8];
  float chosen;
  CHECK_EQ_INT(pw_sampler_logprobs(x, V, 5, 8, top, &chosen), 8);
  CHECK_NEAR(chosen, x[5] - lse, 1e-4);
  CHECK_EQ_INT(top[0].token, 17);
  CHECK_EQ_INT(top[1].token, 18);
  for (int i = 0; i + 1 < 8; i++) CHECK(top[i].logprob >= top[i + 1].logprob);
  for (int i = 0; i < 8; i++) CHECK_NEAR(top[i].logprob, x[top[i].token] - lse, 1e-4);
  double sum = 0;
  for (int i = 0; i < V; i++) {
    CHECK_EQ_INT(pw_sampler_logprobs(x, V, i, 0, NULL, &chosen), 0);
    sum += exp(chosen);
  }
  CHECK_NEAR(sum, 1.0, 1e-4);
  /* n_top above n_vocab, NaN and +inf */
  float y[3] = {NAN, 1.0f, 0.0f};
  CHECK_EQ_INT(pw_sampler_logprobs(y, 3, 0, 5, top, &chosen), 3);
  CHECK(isinf(chosen) && chosen < 0);
  CHECK_EQ_INT(top[0].token, 1);
  CHECK_EQ_INT(top[2].token, 0);
  CHECK(isinf(top[2].logprob));
  float w[3] = {INFINITY, 1.0f, INFINITY};
  CHECK_EQ_INT(pw_sampler_logprobs(w, 3, 2, 1, top, &chosen), 1);
  CHECK_NEAR(chosen, -log(2.0), 1e-6);
  CHECK_EQ_INT(top[0].token, 0);
  float none[2] = {-INFINITY, NAN};
  CHECK_EQ_INT(pw_sampler_logprobs(none, 2, 0, 1, top, &chosen), PW_ERANGE);
  CHECK_EQ_INT(pw_sampler_logprobs(x, V, V, 1, top, &chosen), PW_EINVAL);
  CHECK_EQ_INT(pw_sampler_logprobs(x, V, 0, 1, NULL, &chosen), PW_EINVAL);
}

static void test_nan_inf(void) {
  float l[5] = {NAN, 1.0f, NAN, 0.5f, 0.0f};
  pw_sampler_params p;
  pw_sampler_params_default(&p);
  pw_sampler *s = make(&p, 5);
  for (int i = 0; i < 2000; i++) {
    int32_t t = pw_sampler_sample(s, l);
    CHECK(t == 1 || t == 3 || t == 4);
  }
  float inf2[5] = {1.0f, INFINITY, 3.0f, INFINITY, FLT_MAX};
  int hits[5] = {0};
  for (int i = 0; i < 2000; i++) {
    int32_t t = pw_sampler_sample(s, inf2);
    if (t >= 0 && t < 5) hits[t]++;
  }
  CHECK_EQ_INT(hits[0] + hits[2], 0); /* +inf counts as FLT_MAX: 3 ways */
  CHECK(hits[1] > 500 && hits[3] > 500 && hits[4] > 500);
  float nan_all[5] = {NAN, NAN, NAN, NAN, NAN};
  CHECK_EQ_INT(pw_sampler_sample(s, nan_all), PW_ERANGE);
  pw_sampler_destroy(s);
  p.temperature = 0.0f;
  s = make(&p, 5);
  CHECK_EQ_INT(pw_sampler_sample(s, l), 1);
  CHECK_EQ_INT(pw_sampler_sample(s, nan_all), PW_ERANGE);
  pw_sampler_destroy(s);
}

static void expect_invalid(const pw_sampler_params *p, const char *field) {
  char err[PW_ERRMAX] = "";
  CHECK_EQ_INT(pw_sampler_params_validate(p, err), PW_EINVAL);
  CHECK_MSG(strstr(err, field) != NULL, "message \"%s\" does not name %s", err, field);
  err[0] = 0;
  CHECK(pw_sampler_create(p, 10, err) == NULL);
  CHECK_MSG(strstr(err, field) != NULL, "create message \"%s\" does not name %s", err, field);
}

static void test_validate(void) {
  pw_sampler_params d, p;
  pw_sampler_params_default(&d);
  char err[PW_ERRMAX];
  CHECK_EQ_INT(pw_sampler_params_validate(&d, err), 0);
  p = d, p.top_k = -5;
  CHECK_EQ_INT(pw_sampler_params_validate(&p, err), 0); /* negative top_k = disabled */
  p = d, p.temperature = -0.5f, expect_invalid(&p, "temperature");
  p = d, p.temperature = NAN, expect_invalid(&p, "temperature");
  p = d, p.temperature = 101.0f, expect_invalid(&p, "temperature");
  p = d, p.top_p = 0.0f, expect_invalid(&p, "top_p");
  p = d, p.top_p = 1.5f, expect_invalid(&p, "top_p");
  p = d, p.top_p = NAN, expect_invalid(&p, "top_p");
  p = d, p.min_p = 1.5f, expect_invalid(&p, "min_p");
  p = d, p.min_p = -0.1f, expect_invalid(&p, "min_p");
  p = d, p.repeat_penalty = 0.0f, expect_invalid(&p, "repeat_penalty");
  p = d, p.repeat_penalty = NAN, expect_invalid(&p, "repeat_penalty");
  p = d, p.repeat_last_n = -1, expect_invalid(&p, "repeat_last_n");
  p = d, p.frequency_penalty = 2.5f, expect_invalid(&p, "frequency_penalty");
  p = d, p.presence_penalty = -3.0f, expect_invalid(&p, "presence_penalty");
  p = d, p.presence_penalty = NAN, expect_invalid(&p, "presence_penalty");
  p = d, p.n_probs = PW_SAMPLE_MAX_PROBS + 1, expect_invalid(&p, "n_probs");
  pw_logit_bias b = {3, NAN};
  p = d, p.logit_bias = &b, p.n_logit_bias = 1, expect_invalid(&p, "logit_bias");
  b.bias = 1.0f, b.token = 10; /* out of range for n_vocab 10: only create knows */
  CHECK_EQ_INT(pw_sampler_params_validate(&p, err), 0);
  CHECK(pw_sampler_create(&p, 10, err) == NULL);
  CHECK_MSG(strstr(err, "logit_bias") != NULL, "%s", err);
  CHECK(pw_sampler_create(&d, 0, err) == NULL);
  CHECK(strstr(err, "n_vocab") != NULL);
  pw_sampler_destroy(NULL);
}

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* Not a pass/fail check: reports the cost per token at a real vocab size. */
static void bench_large_vocab(void) {
  enum { V = 152064, N = 20 };
  float *x = malloc(V * sizeof *x);
  CHECK(x != NULL);
  if (!x) return;
  fill_normal(x, V, 3.0f);
  const struct {
    const char *name;
    int k;
    float p, minp;
  } cfg[] = {{"plain", 0, 1, 0}, {"top_k=40,top_p=0.95,min_p=0.05", 40, 0.95f, 0.05f}, {"top_p=0.95", 0, 0.95f, 0}};
  for (int i = 0; i < 3; i++) {
    pw_sampler_params p;
    pw_sampler_params_default(&p);
    p.top_k = cfg[i].k, p.top_p = cfg[i].p, p.min_p = cfg[i].minp;
    pw_sampler *s = make(&p, V);
    double t0 = now_ms();
    for (int j = 0; j < N; j++) CHECK(pw_sampler_sample(s, x) >= 0);
    fprintf(stderr, "sample %s: %.3f ms/token (V=%d)\n", cfg[i].name, (now_ms() - t0) / N, V);
    pw_sampler_destroy(s);
  }
  free(x);
}

/* A temperature so small that 1/T overflows (valid: in [0, 100]) samples
 * the T -> 0 limit: the max logit, or one of tied maxima, with one draw. */
static void test_tiny_temperature(void) {
  const float l[5] = {1.0f, 3.0f, 2.0f, 3.0f, -1.0f};
  pw_sampler_params p;
  pw_sampler_params_default(&p);
  p.temperature = 1e-45f;
  p.top_k = 4; /* the general path (filters on) */
  pw_sampler *s = make(&p, 5);
  int seen[5] = {0};
  for (int i = 0; i < 200; i++) {
    pw_rng before, after;
    pw_sampler_get_rng(s, &before);
    const int32_t t = pw_sampler_sample(s, l);
    pw_sampler_get_rng(s, &after);
    CHECK(t == 1 || t == 3);
    if (t == 1 || t == 3) seen[t]++;
    pw_rng_uniform(&before);
    CHECK(memcmp(&before, &after, sizeof before) == 0); /* exactly one draw */
  }
  CHECK(seen[1] > 50 && seen[3] > 50);
  pw_sampler_destroy(s);
}

int main(void) {
  pw_rng_seed(&g_rng, 12345);
  test_tiny_temperature();
  test_argmax();
  test_greedy();
  test_greedy_fast();
  test_top_k1_is_greedy();
  test_seeded();
  test_distribution();
  test_unfiltered_fast_freq();
  test_unfiltered_fast_vs_general();
  check_one_draw(0.8f, 0, 1.0f, 0.0f, 77); /* unfiltered: the fast path */
  test_top_p_min_p_small();
  test_filters_vs_reference();
  test_sort_many();
  test_penalties();
  test_logit_bias();
  check_one_draw(0.8f, 50, 0.9f, 0.02f, 99); /* the filtered chain */
  test_logprobs();
  test_nan_inf();
  test_validate();
  bench_large_vocab();
  TEST_DONE();
}
