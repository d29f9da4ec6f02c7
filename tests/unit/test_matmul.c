/* test_matmul.c - the threaded matmul against a double-precision
 * dequantize-then-dot reference, its bit-identity across thread counts and
 * batch sizes, pw_get_row, and the f32 vector ops against their scalar
 * references. */
#include "base/pool.h"
#include "tensor/dtype.h"
#include "tensor/matmul.h"
#include "tensor/ops.h"
#include "tensor/quants.h"
#include "tensor/traits.h"
#include "test.h"

#include <stdint.h>

static uint64_t g_rng = 0x243F6A8885A308D3ull;
static uint32_t rnd(void) {
  g_rng ^= g_rng << 13;
  g_rng ^= g_rng >> 7;
  g_rng ^= g_rng << 17;
  return (uint32_t)(g_rng >> 16);
}
static float frand(void) { return (float)(rnd() & 0xFFFFFF) / 16777216.0f * 2 - 1; }
static float grand(void) { return (frand() + frand() + frand() + frand()) * 0.8660254f; }

static const uint32_t WTYPES[] = {PW_DT_F32,  PW_DT_F16,  PW_DT_BF16, PW_DT_Q4_0, PW_DT_Q4_1,
                                  PW_DT_Q5_0, PW_DT_Q5_1, PW_DT_Q8_0, PW_DT_Q2_K, PW_DT_Q3_K,
                                  PW_DT_Q4_K, PW_DT_Q5_K, PW_DT_Q6_K, PW_DT_IQ4_NL, PW_DT_IQ4_XS,
                                  PW_DT_MXFP4};

/* up to 41 tokens: the tiled kernels take 32 or more through unpacked rows;
 * 8224 inputs: rows too long for one unpack buffer of 16 rows */
enum { N_IN = 512, N_IN_MAX = 8224, N_OUT = 37, MAX_TOK = 41 };
/* batch sizes past 8 tried: all in the release build; every third under
 * ASan (9, 12, ... 39: every remainder of the tiles, at a third of the
 * time); every seventh under TSan (9, 16, ... 37: remainders 1, 0, 7, 6, 5
 * of 8-token tiles), which is there for the threads' sharing of rows and
 * scratch, not for the tiles' remainders */
#if defined(__SANITIZE_THREAD__)
#define NT_STRIDE 7
#elif defined(__SANITIZE_ADDRESS__)
#define NT_STRIDE 3
#else
#define NT_STRIDE 1
#endif

/* n_in: 512 (every type), or a multiple of 32 that is not a multiple of
 * 128 (only the 32-element types: tiled kernels take blocks in pairs or
 * quads, and these leave 1, 2 or 3 over); above N_IN, every 8th batch size
 * only */
static void test_matmul(int n_in) {
  pw_pool *pools[3] = {pw_pool_create(1), pw_pool_create(2), pw_pool_create(3)};
  CHECK(pools[0] && pools[1] && pools[2]);
  static float wf[N_OUT * N_IN_MAX], X[MAX_TOK * N_IN_MAX], wd[N_OUT * N_IN_MAX], xd[N_IN_MAX];
  static float Y[MAX_TOK * N_OUT], Y1[MAX_TOK * N_OUT];
  static uint8_t W[N_OUT * N_IN_MAX * 4], xq[N_IN_MAX * 4];
  double worst = 0;
  for (size_t ti = 0; ti < sizeof WTYPES / sizeof WTYPES[0]; ti++) {
    const uint32_t dt = WTYPES[ti];
    const pw_traits *tr = pw_traits_get(dt);
    if (n_in % tr->blck) continue;
    for (int i = 0; i < N_OUT * n_in; i++) wf[i] = grand();
    pw_ref_quantize(dt, wf, W, N_OUT * n_in);
    for (int i = 0; i < MAX_TOK * n_in; i++) X[i] = grand();
    size_t ss = pw_matmul_scratch_size(dt, n_in, MAX_TOK);
    void *scratch = ss ? malloc(ss) : NULL;
    /* single-token results with one thread are the baseline */
    for (int t = 0; t < MAX_TOK; t++) pw_matmul(pools[0], dt, W, n_in, N_OUT, X + t * n_in, 1, Y1 + t * N_OUT, scratch);
    /* reference: dequantized weights and activations quantized as the
     * kernel sees them, dotted in double */
    const size_t wrow = (size_t)pw_dtype_row_size(dt, n_in);
    for (int o = 0; o < N_OUT; o++) pw_ref_dequant(dt, W + o * wrow, wd + (size_t)o * n_in, n_in);
    int bad = 0;
    for (int t = 0; t < MAX_TOK; t++) {
      pw_ref_quantize(tr->vec_dot_type, X + t * n_in, xq, n_in);
      pw_ref_dequant(tr->vec_dot_type, xq, xd, n_in);
      for (int o = 0; o < N_OUT; o++) {
        const float *wo = wd + (size_t)o * n_in;
        double s = 0, sabs = 0;
        for (int i = 0; i < n_in; i++) {
          s += (double)wo[i] * xd[i];
          sabs += fabs((double)wo[i] * xd[i]);
        }
        /* 1e-5 of sum|w*x| for float scaling; q4_1/q5_1 carry an fp16-rounded
         * activation sum (2^-11 relative) */
        double tol = (dt == PW_DT_Q4_1 || dt == PW_DT_Q5_1 ? 2e-3 : 1e-5) * sabs;
        double err = fabs(Y1[t * N_OUT + o] - s);
        if (err / sabs > worst && tol == 1e-5 * sabs) worst = err / sabs;
        if (err > tol) bad++;
        /* and vs the exact original float weights: a loose sanity bound */
        double s0 = 0;
        for (int i = 0; i < n_in; i++) s0 += (double)wf[o * n_in + i] * X[t * n_in + i];
        /* (error ~ N(0, rel^2 * n_in) for N(0,1) data; 4.5 sigma) */
        double rel = dt == PW_DT_Q2_K ? 0.4 : dt == PW_DT_Q3_K || dt == PW_DT_MXFP4 ? 0.18 : 0.1;
        if (fabs(Y1[t * N_OUT + o] - s0) > 4.5 * rel * sqrt((double)n_in)) bad++;
      }
    }
    CHECK_MSG(bad == 0, "%s: %d outputs off the reference", tr->name, bad);
    /* every batch size and thread count gives the same bits */
    int diff = 0;
    for (int p = 0; p < 3; p++)
      for (int nt = 1; nt <= MAX_TOK; nt += n_in > N_IN ? 8 : nt < 9 ? 1 : NT_STRIDE) {
        memset(Y, 0xFF, sizeof Y);
        pw_matmul(pools[p], dt, W, n_in, N_OUT, X, nt, Y, scratch);
        if (memcmp(Y, Y1, (size_t)nt * N_OUT * sizeof(float)) != 0) diff++;
        /* hints choose other tiles and splits, never other results (small
         * shapes like these run on the caller unless split is forced) */
        const unsigned hints[3] = {PW_MM_SPLIT, PW_MM_RESIDENT, PW_MM_RESIDENT | PW_MM_SPLIT};
        for (int h = 0; h < 3; h++) {
          memset(Y, 0xFF, sizeof Y);
          pw_matmul_ex(pools[p], dt, W, n_in, N_OUT, X, nt, Y, scratch, hints[h]);
          if (memcmp(Y, Y1, (size_t)nt * N_OUT * sizeof(float)) != 0) diff++;
        }
        /* a batch starting at an offset token (token 2 first) */
        if (nt <= MAX_TOK - 2) {
          pw_matmul(pools[p], dt, W, n_in, N_OUT, X + 2 * n_in, nt, Y, scratch);
          if (memcmp(Y, Y1 + 2 * N_OUT, (size_t)nt * N_OUT * sizeof(float)) != 0) diff++;
        }
      }
    CHECK_MSG(diff == 0, "%s: %d runs not bit-identical across threads/batches", tr->name, diff);
    /* get_row == reference dequant of that row */
    float r1[N_IN_MAX], r2[N_IN_MAX];
    pw_get_row(dt, W, n_in, N_OUT - 1, r1);
    pw_ref_dequant(dt, W + (N_OUT - 1) * wrow, r2, n_in);
    CHECK_MSG(memcmp(r1, r2, (size_t)n_in * sizeof(float)) == 0, "%s get_row", tr->name);
    free(scratch);
  }
  fprintf(stderr, "  matmul n_in %d: worst |y-ref|/sum|w*x| = %.3g\n", n_in, worst);
  /* no pool at all, and n_tok == 0 */
  static float y0[N_OUT];
  size_t ss = pw_matmul_scratch_size(PW_DT_Q8_0, n_in, 1);
  void *scratch = malloc(ss);
  pw_ref_quantize(PW_DT_Q8_0, wf, W, n_in * N_OUT);
  pw_matmul(NULL, PW_DT_Q8_0, W, n_in, N_OUT, X, 1, y0, scratch);
  pw_matmul(pools[2], PW_DT_Q8_0, W, n_in, N_OUT, X, 1, Y, scratch);
  CHECK(memcmp(y0, Y, sizeof y0) == 0);
  pw_matmul(pools[2], PW_DT_Q8_0, W, n_in, N_OUT, X, 0, Y, scratch);
  free(scratch);
  for (int p = 0; p < 3; p++) pw_pool_destroy(pools[p]);
}

/* ---- f32 ops vs scalar references ------------------------------------------ */

static int close_rel(const float *a, const float *b, int n, double rel, double abs_tol) {
  int bad = 0;
  for (int i = 0; i < n; i++) {
    double d = fabs((double)a[i] - b[i]);
    if (!(d <= rel * fabs((double)b[i]) + abs_tol) && !(isinf(a[i]) && a[i] == b[i])) {
      if (bad < 3) fprintf(stderr, "  [%d] %.9g vs %.9g\n", i, a[i], b[i]);
      bad++;
    }
  }
  return bad;
}

/* argmax: the installed variant picks exactly the reference's index. */
static void test_argmax_op(const pw_ops *o, const pw_ops *r) {
  enum { N = 1000 };
  static float x[N];
  const int lens[] = {0, 1, 7, 8, 31, 32, 33, 100, 257, N};
  for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
    const int n = lens[li];
    for (int kind = 0; kind < 7; kind++) {
      for (int i = 0; i < n; i++) {
        switch (kind) {
        case 0: x[i] = grand() * 4; break;                        /* random */
        case 1: x[i] = (float)(rnd() % 8); break;                 /* many ties */
        case 2: x[i] = rnd() % 3 ? NAN : (float)(rnd() % 8); break; /* NaNs among ties */
        case 3: x[i] = NAN; break;                                /* all NaN: 0 */
        case 4: x[i] = rnd() % 2 ? NAN : -INFINITY; break;        /* nothing above -inf: 0 */
        case 5: x[i] = (float)i; break;                           /* rising: last */
        default: x[i] = rnd() % 4 ? -INFINITY : (float)(rnd() % 3) - 5; break;
        }
      }
      if (kind == 1 && n > 40) x[n - 1] = x[n - 2] = 9; /* tie in the tail only */
      if (kind == 2 && n > 9) x[9] = INFINITY, x[n - 1] = INFINITY;
      int64_t want = r->argmax(x, n), got = o->argmax(x, n);
      CHECK_MSG(got == want, "argmax n=%d kind %d: %lld, reference %lld", n, kind, (long long)got,
                (long long)want);
    }
  }
  float t[40];
  for (int i = 0; i < 40; i++) t[i] = 1;
  t[5] = t[13] = t[37] = 2; /* the first of ties in different lanes */
  CHECK_EQ_INT(o->argmax(t, 40), 5);
  t[5] = NAN;
  CHECK_EQ_INT(o->argmax(t, 40), 13);
  t[3] = -INFINITY;
  CHECK_EQ_INT(r->argmax(t, 40), 13);
  CHECK_EQ_INT(o->argmax(t, 0), 0);
}

/* exp_sum: the vector exp within EXP_REL of expf (and EXP_ABS where expf
 * gives tiny values the vector exp flushes to 0 below -86.5); NaN and -inf
 * inputs give exactly 0 in both. */
static void test_exp_sum_op(const pw_ops *o, const pw_ops *r) {
  enum { N = 1000 };
  const double EXP_REL = 2e-6, EXP_ABS = 1e-37;
  static float x[N], y1[N], y2[N];
  const int lens[] = {1, 7, 8, 15, 16, 17, 33, 256, N};
  const float scales[] = {1.0f, 0.5f, 1.25f, 37.0f};
  for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
    const int n = lens[li];
    for (size_t si = 0; si < sizeof scales / sizeof scales[0]; si++) {
      for (int i = 0; i < n; i++) x[i] = frand() * 60;
      for (int i = 2; i < n; i += 5) x[i] = i % 2 ? NAN : -INFINITY; /* vector lanes and tail */
      if (n > 1) x[n - 1] = NAN;
      float mx = -INFINITY;
      for (int i = 0; i < n; i++)
        if (x[i] > mx) mx = x[i];
      if (!(mx > -INFINITY)) mx = x[0] = 0; /* n = 1: keep one finite value */
      double s1 = o->exp_sum(y1, x, mx, scales[si], n), s2 = r->exp_sum(y2, x, mx, scales[si], n);
      CHECK_MSG(close_rel(y1, y2, n, EXP_REL, EXP_ABS) == 0, "exp_sum n=%d s=%g", n, scales[si]);
      CHECK_MSG(fabs(s1 - s2) <= EXP_REL * s2, "exp_sum n=%d s=%g: sum %.9g, reference %.9g", n, scales[si], s1,
                s2);
      double direct = 0;
      int zeros = 0;
      for (int i = 0; i < n; i++) {
        direct += y1[i];
        if (!(x[i] > -INFINITY)) zeros += y1[i] == 0.0f && y2[i] == 0.0f && !signbit(y1[i]);
        else CHECK_MSG(y1[i] >= 0 && y1[i] <= 1, "exp_sum n=%d: y[%d] = %g", n, i, y1[i]);
      }
      int want_zeros = 0;
      for (int i = 0; i < n; i++) want_zeros += !(x[i] > -INFINITY);
      CHECK_EQ_INT(zeros, want_zeros);
      CHECK(y1[r->argmax(x, n)] == 1.0f); /* exp(0) exactly */
      CHECK_MSG(fabs(s1 - direct) <= 1e-6 * direct, "exp_sum n=%d: returned %.9g, sum of y %.9g", n, s1, direct);
    }
  }
  /* known values; the max gives exactly 1 */
  float k[3] = {2, NAN, 1}, yk[3];
  double sk = o->exp_sum(yk, k, 2, 0.5f, 3);
  CHECK(yk[0] == 1.0f && yk[1] == 0.0f);
  CHECK_NEAR(yk[2], exp(-0.5), 1e-7);
  CHECK_NEAR(sk, 1 + exp(-0.5), 1e-7);
}

static void test_ops(void) {
  const pw_ops *o = pw_ops_get(), *r = pw_ops_ref();
  enum { N = 1000 };
  static float a[N], b[N], c[N], y1[N], y2[N];
  const int lens[] = {1, 7, 8, 33, 256, N};
  for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
    const int n = lens[li];
    for (int i = 0; i < n; i++) {
      a[i] = grand() * 4;
      b[i] = grand();
      c[i] = frand() * 100; /* silu/exp far into both tails */
    }
    o->rmsnorm(y1, a, b, n, 1e-5f);
    r->rmsnorm(y2, a, b, n, 1e-5f);
    CHECK_MSG(close_rel(y1, y2, n, 1e-6, 0) == 0, "rmsnorm n=%d", n);
    o->rmsnorm(y1, a, NULL, n, 1e-5f);
    r->rmsnorm(y2, a, NULL, n, 1e-5f);
    CHECK_MSG(close_rel(y1, y2, n, 1e-6, 0) == 0, "rmsnorm (no weight) n=%d", n);
    /* exp is a polynomial: a few ulp */
    o->softmax(y1, c, n);
    r->softmax(y2, c, n);
    CHECK_MSG(close_rel(y1, y2, n, 2e-6, 1e-37) == 0, "softmax n=%d", n);
    o->silu(y1, c, n);
    r->silu(y2, c, n);
    CHECK_MSG(close_rel(y1, y2, n, 2e-6, 1e-36) == 0, "silu n=%d", n);
    o->swiglu(y1, c, b, n);
    r->swiglu(y2, c, b, n);
    CHECK_MSG(close_rel(y1, y2, n, 2e-6, 1e-36) == 0, "swiglu n=%d", n);
    o->add(y1, a, b, n);
    r->add(y2, a, b, n);
    CHECK(memcmp(y1, y2, n * sizeof(float)) == 0);
    o->mul(y1, a, b, n);
    r->mul(y2, a, b, n);
    CHECK(memcmp(y1, y2, n * sizeof(float)) == 0);
    o->scale(y1, a, 0.37f, n);
    r->scale(y2, a, 0.37f, n);
    CHECK(memcmp(y1, y2, n * sizeof(float)) == 0);
    double sabs = 0;
    for (int i = 0; i < n; i++) sabs += fabs((double)a[i] * b[i]);
    CHECK_NEAR(o->dot(n, a, b), r->dot(n, a, b), 1e-6 * sabs);
    memcpy(y1, b, n * sizeof(float));
    memcpy(y2, b, n * sizeof(float));
    o->axpy(y1, 0.3f, a, n);
    r->axpy(y2, 0.3f, a, n);
    CHECK_MSG(close_rel(y1, y2, n, 1e-6, 1e-6) == 0, "axpy n=%d", n);
  }
  test_argmax_op(o, r);
  test_exp_sum_op(o, r);
  /* known values */
  float x4[4] = {1, 2, 3, 4}, s4[4];
  r->softmax(s4, x4, 4);
  CHECK_NEAR(s4[3], exp(0) / (exp(-3) + exp(-2) + exp(-1) + 1), 1e-6);
  float m[3] = {0, -INFINITY, 0};
  o->softmax(s4, m, 3);
  CHECK(s4[1] == 0 && fabsf(s4[0] - 0.5f) < 1e-7f);
  r->rmsnorm(s4, x4, NULL, 4, 0);
  CHECK_NEAR(s4[0], 1 / sqrt(7.5), 1e-6);
  r->silu(s4, x4, 1);
  CHECK_NEAR(s4[0], 1 / (1 + exp(-1)), 1e-7);
}

/* Many rows, few tokens: the rows go out by stealing (up to 16 threads)
 * or in chunks (more): every row is computed exactly once, with the bits
 * of a single thread. 3 threads on a 2-core machine run their shares at
 * uneven speeds, so most runs steal (thousands of steals over this test
 * when counted); 17 take the chunked path. */
static void test_row_sharing(void) {
  /* repetitions give other interleavings of the row claims; under a
   * sanitizer fewer (ThreadSanitizer sees a race on any one of them) */
  enum { NI = 256, NO = 3001, NT = 5, REP = NT_STRIDE == 1 ? 30 : 8 };
  static float wf[NO * NI], X[NT * NI], y1[NT * NO], Y[NT * NO];
  static uint8_t W[NO * NI * 2];
  for (int i = 0; i < NO * NI; i++) wf[i] = (float)((long long)i * 7919 % 2003 - 1001) / 700.0f;
  for (int i = 0; i < NT * NI; i++) X[i] = (float)((i * 104729) % 1999 - 999) / 500.0f;
  /* a symmetric type and the K-quants, all tiled at the AVX-512 VBMI level;
   * the non-linear types (vec_dot at every level) */
  const uint32_t types[] = {PW_DT_Q8_0, PW_DT_Q4_K, PW_DT_Q5_K, PW_DT_Q6_K, PW_DT_IQ4_NL, PW_DT_IQ4_XS, PW_DT_MXFP4};
  pw_pool *pools[3] = {pw_pool_create(2), pw_pool_create(3), pw_pool_create(17)};
  CHECK(pools[0] && pools[1] && pools[2]);
  for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
    pw_ref_quantize(types[ti], wf, W, (int64_t)NO * NI);
    void *scratch = malloc(pw_matmul_scratch_size(types[ti], NI, NT));
    CHECK(scratch != NULL);
    for (int nt = 1; nt <= NT; nt++) {
      pw_matmul(NULL, types[ti], W, NI, NO, X, nt, y1, scratch);
      /* a pass of up to 4 tokens over rows this long reads the tiled types
       * in four streams (matmul.c), resident hints in adjacent-row tiles:
       * the same bits, and every row there (NaN otherwise) */
      memset(Y, 0xFF, sizeof Y);
      pw_matmul_ex(NULL, types[ti], W, NI, NO, X, nt, Y, scratch, PW_MM_RESIDENT);
      CHECK_MSG(memcmp(Y, y1, (size_t)nt * NO * sizeof(float)) == 0, "type %u, %d tokens: streams differ", types[ti],
                nt);
      int diff = 0;
      for (int p = 0; p < 3; p++)
        for (int r = 0; r < REP; r++) {
          memset(Y, 0xFF, sizeof Y);
          pw_matmul(pools[p], types[ti], W, NI, NO, X, nt, Y, scratch);
          if (memcmp(Y, y1, (size_t)nt * NO * sizeof(float)) != 0) diff++;
        }
      CHECK_MSG(diff == 0, "type %u, %d tokens: %d runs differ from one thread", types[ti], nt, diff);
    }
    free(scratch);
  }
  for (int p = 0; p < 3; p++) pw_pool_destroy(pools[p]);
}

/* pw_matmul_first_spans: the first shares of all threads tile what a
 * streamed pass reads, a span per stream (a run of whole rows, or each
 * stream's rows), without overlap and inside the matrices; thread 0's start
 * where the rows (streams) start; nothing when no shares are handed out. */
static int span_cmp(const void *a, const void *b) {
  const uintptr_t x = (uintptr_t)((const pw_span *)a)->p, y = (uintptr_t)((const pw_span *)b)->p;
  return x < y ? -1 : x > y;
}

static void test_first_spans(void) {
  enum { NI = 256, NO = 3001, NK = 200 };
  static uint8_t W[2][NO * NI * 2];
  /* a symmetric type and the K-quants, all tiled at the AVX-512 VBMI level */
  const uint32_t types[4] = {PW_DT_Q8_0, PW_DT_Q4_K, PW_DT_Q5_K, PW_DT_Q6_K};
  for (int nt = 1; nt <= 2; nt++)
    for (int nth = 2; nth <= 4; nth++) {
      /* Q8_0 3001 rows (four streams and a row past them at 1-2 tokens),
       * then Q4_K 200 rows (too few bytes a stream for streams) */
      const pw_mm_op ops[2] = {{types[0], W[0], NO, NULL}, {types[1], W[1], NK, NULL}};
      const size_t row[2] = {(size_t)pw_dtype_row_size(types[0], NI), (size_t)pw_dtype_row_size(types[1], NI)};
      pw_span all[4 * 8];
      int n = 0;
      for (int ith = 0; ith < nth; ith++) {
        pw_span sp[8];
        const int k = pw_matmul_first_spans(ops, 2, NI, nt, 0, ith, nth, sp, 8);
        CHECK_MSG(k >= 1 && k <= 8, "%d tokens, thread %d of %d: %d spans", nt, ith, nth, k);
        if (ith == 0) CHECK(sp[0].p == W[0]);
        for (int j = 0; j < k; j++) all[n++] = sp[j];
      }
      qsort(all, (size_t)n, sizeof all[0], span_cmp);
      size_t bytes[2] = {0, 0};
      for (int j = 0; j < n; j++) {
        const int o = (const uint8_t *)all[j].p >= W[1];
        const uint8_t *a = all[j].p, *base = W[o];
        CHECK(all[j].n > 0 && (size_t)(a - base) % row[o] == 0 && all[j].n % row[o] == 0);
        CHECK(a >= base && a + all[j].n <= base + (o ? NK : NO) * row[o]);
        if (j + 1 < n) CHECK(a + all[j].n <= (const uint8_t *)all[j + 1].p);
        bytes[o] += all[j].n;
      }
      /* Q8_0 streams where it has the tiled kernel (not at every level);
       * the row past four streams is not in any share */
      const size_t rows0 = pw_traits_get(types[0])->gemm ? NO - 1 : NO;
      CHECK_MSG(bytes[0] == rows0 * row[0] && bytes[1] == (size_t)NK * row[1],
                "%d tokens, %d threads: spans cover %zu + %zu bytes", nt, nth, bytes[0], bytes[1]);
    }
  /* no shares: one thread, many tokens, work too small for the pool */
  pw_span sp[8];
  const pw_mm_op op = {PW_DT_Q8_0, W[0], NO, NULL}, tiny = {PW_DT_Q8_0, W[0], 4, NULL};
  CHECK_EQ_INT(pw_matmul_first_spans(&op, 1, NI, 1, 0, 0, 1, sp, 8), 0);
  CHECK_EQ_INT(pw_matmul_first_spans(&op, 1, NI, 64, 0, 1, 2, sp, 8), 0);
  CHECK_EQ_INT(pw_matmul_first_spans(&tiny, 1, NI, 1, 0, 1, 2, sp, 8), 0);
}

int main(void) {
  pw_tensor_init();
  fprintf(stderr, "kernels: %s, ops: %s\n", pw_traits_get(PW_DT_Q4_K)->impl, pw_ops_get()->impl);
  test_matmul(N_IN);
  test_matmul(160); /* 5 blocks: a quad and one over */
  test_matmul(192); /* 6: a quad and two over */
  test_matmul(96);  /* 3: a partial quad alone */
  test_matmul(N_IN_MAX);
  test_row_sharing();
  test_first_spans();
  test_ops();
  TEST_DONE();
}
