/* test_attn.c - the F16 attention kernel: the installed (widest) variant,
 * and the AVX2 one where a wider one is installed,
 * against the scalar reference, and the reference against a double
 * precision softmax-attention (within F16 accumulation error), and the
 * several-query kernel against the single-query one (bit-identical); the
 * split form (spans, folded in order) against the unsplit reference and
 * against itself in any grouping of queries and folds. */
#include "tensor/attn.h"
#include "tensor/dtype.h"
#include "tensor/quants.h"
#include "tensor/traits.h"
#include "test.h"

#include <string.h>

static uint64_t g_rng = 99;
static float frand(void) {
  g_rng = g_rng * 6364136223846793005ull + 1442695040888963407ull;
  return (float)((double)(g_rng >> 11) * 0x1.0p-53 * 2.0 - 1.0);
}

/* Split attention over n positions (several spans): the installed span
 * kernel on a group of queries, folded in span order, against the unsplit
 * reference (within F16 accumulation error: the split restarts the F16
 * accumulator per span, which only helps), the scalar span reference
 * folded the same way (close), and the same fold done in two waves (the
 * same bits). One span gives the unsplit kernel's bits. */
static void test_split(int hd, int n) {
  pw_attn_part_fn part = pw_attn_part_get();
  pw_attn_multi_fn multi = pw_attn_multi_get();
  const size_t stride = (size_t)hd;
  uint16_t *k = malloc(sizeof(uint16_t) * stride * n), *v = malloc(sizeof(uint16_t) * stride * n);
  for (size_t i = 0; i < stride * (size_t)n; i++) {
    k[i] = pw_fp32_to_fp16(frand() * 2);
    v[i] = pw_fp32_to_fp16(frand());
  }
  const float scale = 1.0f / sqrtf((float)hd);
  enum { NQ = 7 };
  float qs[NQ][256], ref[256], full[NQ][256];
  const float *qp[NQ];
  int np_full[NQ];
  for (int h = 0; h < NQ; h++) {
    for (int i = 0; i < hd; i++) qs[h][i] = frand() * 3;
    qp[h] = qs[h];
    np_full[h] = n - h * 37; /* different prefix lengths in one group */
  }
  const int spans = pw_attn_spans(n);
  float *acc = malloc(sizeof(float) * (size_t)spans * NQ * hd), *acc_ref = malloc(sizeof(float) * (size_t)hd);
  float *ms = malloc(sizeof(float) * (size_t)spans * NQ * 2);
  for (int si = 0; si < spans; si++) {
    const int p0 = si * PW_ATTN_SPLIT;
    const float *qq[NQ];
    float *op[NQ];
    int np[NQ], nq = 0, idx[NQ];
    for (int h = 0; h < NQ; h++) {
      if (np_full[h] <= p0) continue;
      qq[nq] = qs[h];
      op[nq] = acc + ((size_t)si * NQ + h) * hd;
      np[nq] = np_full[h] - p0 < PW_ATTN_SPLIT ? np_full[h] - p0 : PW_ATTN_SPLIT;
      idx[nq++] = h;
    }
    float msg[2 * NQ];
    part(qq, np, nq, k + (size_t)p0 * stride, v + (size_t)p0 * stride, stride, hd, scale, op, msg);
    for (int i = 0; i < NQ; i++) ms[((size_t)si * NQ + i) * 2 + 1] = 0; /* absent: empty */
    for (int i = 0; i < nq; i++) memcpy(ms + ((size_t)si * NQ + idx[i]) * 2, msg + 2 * i, 2 * sizeof(float));
  }
  for (int h = 0; h < NQ; h++) {
    const int hs = pw_attn_spans(np_full[h]);
    /* in one go, and in two waves */
    float one[256] = {0}, two[256] = {0}, rms1[2] = {-INFINITY, 0}, rms2[2] = {-INFINITY, 0};
    for (int si = 0; si < hs; si++)
      pw_attn_fold(one, rms1, acc + ((size_t)si * NQ + h) * hd, ms + ((size_t)si * NQ + h) * 2, hd);
    pw_attn_finish(one, rms1, hd);
    for (int si = 0; si < hs; si++) {
      pw_attn_fold(two, rms2, acc + ((size_t)si * NQ + h) * hd, ms + ((size_t)si * NQ + h) * 2, hd);
      if (si == hs / 2) memcpy(full[h], two, sizeof(float) * hd); /* a copy between waves */
    }
    pw_attn_finish(two, rms2, hd);
    CHECK_MSG(memcmp(one, two, sizeof(float) * hd) == 0, "hd %d n %d: folds in waves differ", hd, np_full[h]);
    /* the scalar span reference, folded */
    float sref[256] = {0}, rms3[2] = {-INFINITY, 0};
    for (int si = 0; si < hs; si++) {
      const int p0 = si * PW_ATTN_SPLIT, npos = np_full[h] - p0 < PW_ATTN_SPLIT ? np_full[h] - p0 : PW_ATTN_SPLIT;
      float m2[2];
      pw_attn_ref_part(qs[h], k + (size_t)p0 * stride, v + (size_t)p0 * stride, stride, npos, hd, scale, acc_ref, m2);
      pw_attn_fold(sref, rms3, acc_ref, m2, hd);
    }
    pw_attn_finish(sref, rms3, hd);
    pw_attn_ref(qs[h], k, v, stride, np_full[h], hd, scale, ref);
    for (int i = 0; i < hd; i++) {
      CHECK_MSG(fabsf(one[i] - sref[i]) <= 2e-3f, "hd %d n %d: split %g vs split ref %g", hd, np_full[h], one[i],
                sref[i]);
      CHECK_MSG(fabsf(one[i] - ref[i]) <= 2e-3f + 1e-3f * sqrtf((float)np_full[h]), "hd %d n %d: split %g vs ref %g",
                hd, np_full[h], one[i], ref[i]);
    }
    if (hs == 1) {
      float *o = full[h];
      multi(&qp[h], &np_full[h], 1, k, v, stride, hd, scale, &o);
      CHECK_MSG(memcmp(o, one, sizeof(float) * hd) == 0, "hd %d n %d: one span differs from unsplit", hd, n);
    }
  }
  free(acc);
  free(acc_ref);
  free(ms);
  free(k);
  free(v);
}

/* The kernel for quantized caches: for each K/V type pair, the installed
 * row kernels against the scalar references (close), against a double
 * precision attention over the dequantized cache with q as the K dot
 * product sees it (within the quantization of q and the accumulation),
 * several queries in one call the same bits as each alone, and the span
 * form folded equal to the normalised form for one span. F16/F16 agrees
 * with pw_attn_ref (the same semantics). cap > 0: soft-capped scores,
 * against the same double-precision attention with cap * tanh(s / cap). */
static void test_kvq(uint32_t tk, uint32_t tv, int hd, int n, float cap) {
  const pw_traits *k_tr = pw_traits_get(tk), *v_tr = pw_traits_get(tv);
  const size_t rk = (size_t)hd / k_tr->blck * k_tr->type_size, rv = (size_t)hd / v_tr->blck * v_tr->type_size;
  uint8_t *k = malloc(rk * n), *v = malloc(rv * n);
  float *kf = malloc(sizeof(float) * hd * n), *vf = malloc(sizeof(float) * hd * n), row[256];
  for (int p = 0; p < n; p++) {
    for (int i = 0; i < hd; i++) row[i] = frand() * 2;
    k_tr->from_float(row, k + p * rk, hd);
    pw_traits_ref(tk)->to_float(k + p * rk, kf + (size_t)p * hd, hd);
    for (int i = 0; i < hd; i++) row[i] = frand();
    v_tr->from_float(row, v + p * rv, hd);
    pw_traits_ref(tv)->to_float(v + p * rv, vf + (size_t)p * hd, hd);
  }
  enum { NQ = 9 };
  float qs[NQ][256], o_fast[NQ][256], o_ref[NQ][256], o_one[256];
  const float *qp[NQ];
  float *of[NQ], *orf[NQ];
  int np[NQ];
  for (int h = 0; h < NQ; h++) {
    for (int i = 0; i < hd; i++) qs[h][i] = frand() * 3;
    qp[h] = qs[h];
    of[h] = o_fast[h];
    orf[h] = o_ref[h];
    np[h] = h == 0 ? n : 1 + (h * 131) % n;
  }
  const pw_attn_kv a = {k, v, rk, rv, tk, tv};
  const float scale = 1.0f / sqrtf((float)hd);
  pw_attn_kvq(&a, qp, np, NQ, hd, scale, cap, of, NULL, 0);
  pw_attn_kvq(&a, qp, np, NQ, hd, scale, cap, orf, NULL, 1);
  const double tol_q = tk == PW_DT_Q4_0 ? 0.08 : tk == PW_DT_Q8_0 ? 0.02 : 0.004; /* q as the dot sees it */
  for (int h = 0; h < NQ; h++) {
    float *o1 = o_one;
    pw_attn_kvq(&a, &qp[h], &np[h], 1, hd, scale, cap, &o1, NULL, 0);
    CHECK_MSG(memcmp(o_one, o_fast[h], sizeof(float) * hd) == 0, "kvq %u/%u: query %d differs alone", tk, tv, h);
    /* double precision over the dequantized cache */
    double *s = malloc(sizeof(double) * n), mx = -1e300, sum = 0;
    for (int p = 0; p < np[h]; p++) {
      double d = 0;
      for (int i = 0; i < hd; i++) d += (double)qs[h][i] * kf[(size_t)p * hd + i];
      s[p] = cap > 0 ? cap * tanh(d * scale / cap) : d * scale;
      if (s[p] > mx) mx = s[p];
    }
    for (int p = 0; p < np[h]; p++) sum += (s[p] = exp(s[p] - mx));
    for (int i = 0; i < hd; i++) {
      double e = 0;
      for (int p = 0; p < np[h]; p++) e += s[p] / sum * vf[(size_t)p * hd + i];
      CHECK_MSG(fabs(o_fast[h][i] - o_ref[h][i]) <= 2e-3, "kvq %u/%u hd %d: fast %g vs ref %g", tk, tv, hd,
                o_fast[h][i], o_ref[h][i]);
      CHECK_MSG(fabs(o_ref[h][i] - e) <= tol_q + 1e-3 * sqrt((double)np[h]), "kvq %u/%u hd %d n %d: ref %g vs exact %g",
                tk, tv, hd, np[h], o_ref[h][i], e);
    }
    free(s);
  }
  /* one span, unnormalised then folded: the normalised bits */
  float acc[256], ms[2], racc[256] = {0}, rms[2] = {-INFINITY, 0};
  float *ap = acc;
  pw_attn_kvq(&a, &qp[0], &np[0], 1, hd, scale, cap, &ap, ms, 0);
  pw_attn_fold(racc, rms, acc, ms, hd);
  pw_attn_finish(racc, rms, hd);
  CHECK_MSG(memcmp(racc, o_fast[0], sizeof(float) * hd) == 0, "kvq %u/%u: span form differs", tk, tv);
  if (tk == PW_DT_F16 && tv == PW_DT_F16 && cap == 0) {
    float o2[256];
    pw_attn_ref(qs[0], (const uint16_t *)k, (const uint16_t *)v, (size_t)hd, n, hd, scale, o2);
    for (int i = 0; i < hd; i++) CHECK_MSG(fabsf(o2[i] - o_ref[0][i]) <= 2e-3f, "kvq f16: %g vs pw_attn_ref %g", o_ref[0][i], o2[i]);
  }
  free(k);
  free(v);
  free(kf);
  free(vf);
}

/* exact attention in double over n keys (stride apart) for query q */
static void exact_attn(const float *q, const uint16_t *k, const uint16_t *v, size_t stride, int n, int hd, float scale,
                       double *out) {
  double *s = malloc(sizeof(double) * (size_t)n), mx = -1e300, sum = 0;
  for (int p = 0; p < n; p++) {
    double d = 0;
    for (int i = 0; i < hd; i++) d += (double)q[i] * pw_fp16_to_fp32(k[(size_t)p * stride + i]);
    s[p] = d * scale;
    if (s[p] > mx) mx = s[p];
  }
  for (int p = 0; p < n; p++) sum += (s[p] = exp(s[p] - mx));
  for (int i = 0; i < hd; i++) {
    double e = 0;
    for (int p = 0; p < n; p++) e += s[p] / sum * pw_fp16_to_fp32(v[(size_t)p * stride + i]);
    out[i] = e;
  }
  free(s);
}

/* The long prefixes' kernels (f32 accumulator, chunked softmax): the
 * installed one and the AVX2 one where a wider one is installed against
 * pw_attn_ref_long and both against double precision (f32 accumulation:
 * 1e-5 on values <= 1, where the F16 kernel needs 2e-3 + 1e-3 sqrt(n));
 * several queries with different prefixes in one call (1..41, so every
 * remainder of the accumulator tiles and the per-query tail keys occur)
 * each the same bits as alone; the span form folded against the unsplit
 * reference, and one span the unsplit kernel's bits. Scores spread by
 * 'spread' so the running max grows in later chunks too. */
static void test_long(int hd, int n, float spread) {
  pw_attn_multi_fn multi = pw_attn_multi_long_get();
  pw_attn_part_fn part = pw_attn_part_long_get();
  const size_t stride = (size_t)hd * 2;
  uint16_t *k = malloc(sizeof(uint16_t) * stride * n), *v = malloc(sizeof(uint16_t) * stride * n);
  for (size_t i = 0; i < stride * (size_t)n; i++) {
    k[i] = pw_fp32_to_fp16(frand() * spread);
    v[i] = pw_fp32_to_fp16(frand());
  }
  const float scale = 1.0f / sqrtf((float)hd);
  enum { NQ = 41 };
  float *qs = malloc(sizeof(float) * NQ * hd), *om = malloc(sizeof(float) * NQ * hd);
  float o1[256], o2[256];
  double ex[256];
  const float *qp[NQ];
  float *op[NQ];
  int np[NQ];
  for (int h = 0; h < NQ; h++) {
    for (int i = 0; i < hd; i++) qs[h * hd + i] = frand() * 3;
    qp[h] = qs + h * hd;
    op[h] = om + h * hd;
    np[h] = h % 4 == 0 ? n : 1 + (int)((frand() * 0.5 + 0.5) * (n - 1));
  }
  double worst = 0;
  for (int h = 0; h < 3; h++) {
    pw_attn_ref_long(qp[h], k, v, stride, np[h], hd, scale, o1);
    float *o = o2;
    multi(&qp[h], &np[h], 1, k, v, stride, hd, scale, &o);
    exact_attn(qp[h], k, v, stride, np[h], hd, scale, ex);
    for (int i = 0; i < hd; i++) {
      CHECK_MSG(fabs(o1[i] - ex[i]) <= 1e-5, "long hd %d n %d: ref %g vs exact %g", hd, np[h], o1[i], ex[i]);
      CHECK_MSG(fabs(o2[i] - o1[i]) <= 1e-5, "long hd %d n %d: fast %g vs ref %g", hd, np[h], o2[i], o1[i]);
      if (fabs(o2[i] - ex[i]) > worst) worst = fabs(o2[i] - ex[i]);
    }
    if (pw_tensor_level() >= PW_IMPL_AVX512 && hd % 8 == 0) {
      attn_avx2_multi_long(&qp[h], &np[h], 1, k, v, stride, hd, scale, &o);
      for (int i = 0; i < hd; i++)
        CHECK_MSG(fabs(o2[i] - o1[i]) <= 1e-5, "long hd %d n %d: avx2 %g vs ref %g", hd, np[h], o2[i], o1[i]);
    }
  }
  for (int nq = 1; nq <= NQ; nq += nq < 8 ? 1 : 11) {
    multi(qp, np, nq, k, v, stride, hd, scale, op);
    for (int h = 0; h < nq; h++) {
      float *o = o2;
      multi(&qp[h], &np[h], 1, k, v, stride, hd, scale, &o);
      CHECK_MSG(memcmp(o2, op[h], sizeof(float) * hd) == 0, "long hd %d: query %d of %d (%d keys) differs alone", hd,
                h, nq, np[h]);
    }
  }
  /* spans folded in order */
  for (int h = 0; h < 2; h++) {
    float racc[256] = {0}, rms[2] = {-INFINITY, 0}, acc[256], ms[2];
    for (int p0 = 0; p0 < np[h]; p0 += PW_ATTN_SPLIT) {
      int c = np[h] - p0 < PW_ATTN_SPLIT ? np[h] - p0 : PW_ATTN_SPLIT;
      float *a = acc;
      part(&qp[h], &c, 1, k + (size_t)p0 * stride, v + (size_t)p0 * stride, stride, hd, scale, &a, ms);
      pw_attn_fold(racc, rms, acc, ms, hd);
    }
    pw_attn_finish(racc, rms, hd);
    exact_attn(qp[h], k, v, stride, np[h], hd, scale, ex);
    for (int i = 0; i < hd; i++)
      CHECK_MSG(fabs(racc[i] - ex[i]) <= 1e-5, "long hd %d n %d: split %g vs exact %g", hd, np[h], racc[i], ex[i]);
    if (np[h] <= PW_ATTN_SPLIT) {
      float *o = o2;
      multi(&qp[h], &np[h], 1, k, v, stride, hd, scale, &o);
      CHECK_MSG(memcmp(o2, racc, sizeof(float) * hd) == 0, "long hd %d n %d: one span differs", hd, np[h]);
    }
  }
  fprintf(stderr, "long kernel hd %d n %d: worst |fast - exact| %.3g\n", hd, n, worst);
  free(qs);
  free(om);
  free(k);
  free(v);
}

int main(void) {
  test_long(64, 1500, 2);
  test_long(64, 300, 6);
  test_long(128, 1100, 2);
  test_long(40, 700, 2);
  test_long(80, 130, 2);
  const uint32_t kv_types[] = {PW_DT_F16, PW_DT_Q8_0, PW_DT_Q4_0};
  for (int a = 0; a < 3; a++)
    for (int b = 0; b < 3; b++) {
      test_kvq(kv_types[a], kv_types[b], 64, 700, 0);
      test_kvq(kv_types[a], kv_types[b], 128, 90, 0);
    }
  /* soft-capped scores (Gemma 2), a cap the scores reach */
  test_kvq(PW_DT_F16, PW_DT_F16, 64, 300, 1.5f);
  test_kvq(PW_DT_Q8_0, PW_DT_F16, 128, 90, 1.5f);
  test_split(64, 300);
  test_split(64, 1500);
  test_split(128, 2100);
  test_split(40, 1100);
  const int hds[] = {8, 32, 64, 128, 40};
  const int npos[] = {1, 2, 7, 100, 513};
  pw_attn_fn fast = pw_attn_get();
  pw_attn_multi_fn multi = pw_attn_multi_get();
  double worst_fast = 0, worst_exact = 0;
  for (size_t a = 0; a < sizeof hds / sizeof hds[0]; a++)
    for (size_t b = 0; b < sizeof npos / sizeof npos[0]; b++) {
      int hd = hds[a], n = npos[b];
      size_t stride = (size_t)hd * 3; /* rows interleaved with other heads */
      uint16_t *k = malloc(sizeof(uint16_t) * stride * n), *v = malloc(sizeof(uint16_t) * stride * n);
      float q[1024], o1[1024], o2[1024];
      for (int i = 0; i < hd; i++) q[i] = frand() * 3;
      for (size_t i = 0; i < stride * (size_t)n; i++) {
        k[i] = pw_fp32_to_fp16(frand() * 2);
        v[i] = pw_fp32_to_fp16(frand());
      }
      float scale = 1.0f / sqrtf((float)hd);
      pw_attn_ref(q, k, v, stride, n, hd, scale, o1);
      fast(q, k, v, stride, n, hd, scale, o2);
      /* the AVX2 kernel too where a wider one is installed */
      if (pw_tensor_level() >= PW_IMPL_AVX512) {
        float o4[1024];
        attn_avx2(q, k, v, stride, n, hd, scale, o4);
        for (int i = 0; i < hd; i++) CHECK_MSG(fabs(o4[i] - o1[i]) <= 2e-3, "hd %d n %d: avx2 %g vs ref %g", hd, n, o4[i], o1[i]);
      }
      /* exact reference in double */
      double *ex = malloc(sizeof(double) * (size_t)hd);
      exact_attn(q, k, v, stride, n, hd, scale, ex);
      for (int i = 0; i < hd; i++) {
        const double e = ex[i];
        double df = fabs(o1[i] - o2[i]), de = fabs(o1[i] - e);
        if (df > worst_fast) worst_fast = df;
        if (de > worst_exact) worst_exact = de;
        /* F16 accumulation: relative 2^-11 per step over n steps, on values <= 1. */
        CHECK_MSG(de <= 2e-3 + 1e-3 * sqrt((double)n), "hd %d n %d: ref %g vs exact %g", hd, n, o1[i], e);
        CHECK_MSG(df <= 2e-3, "hd %d n %d: fast %g vs ref %g", hd, n, o2[i], o1[i]);
      }
      /* Several queries over the same K/V (a GQA group, or the heads of
       * several tokens: 1..41 queries, so groups of more than
       * PW_ATTN_GROUP_MAX are split, and every remainder of the kernels'
       * groups of eight accumulator updates occurs), each seeing its own
       * prefix of the keys: each output bit-identical to the single-query
       * kernel on that query and prefix. */
      static const int nqs[] = {1, 3, 7, 9, 14, 21, 28, 34, 41};
      for (size_t qi = 0; qi < sizeof nqs / sizeof nqs[0]; qi++) {
        const int nq = nqs[qi];
        float *qs = malloc(sizeof(float) * (size_t)nq * hd), *om = malloc(sizeof(float) * (size_t)nq * hd);
        const float *qp[41];
        float *op[41];
        int np[41];
        for (int i = 0; i < nq * hd; i++) qs[i] = frand() * 3;
        for (int h = 0; h < nq; h++) {
          qp[h] = qs + (size_t)h * hd;
          op[h] = om + (size_t)h * hd;
          np[h] = h % 3 == 0 ? n : 1 + (int)((frand() * 0.5 + 0.5) * (n - 1)); /* 1..n */
        }
        multi(qp, np, nq, k, v, stride, hd, scale, op);
        for (int h = 0; h < nq; h++) {
          float o3[1024];
          fast(qs + (size_t)h * hd, k, v, stride, np[h], hd, scale, o3);
          CHECK_MSG(memcmp(o3, om + (size_t)h * hd, sizeof(float) * hd) == 0,
                    "hd %d n %d: query %d of %d (%d keys) differs", hd, n, h, nq, np[h]);
        }
        free(qs);
        free(om);
      }
      /* One position: the output is V itself (softmax weight 1). */
      if (n == 1)
        for (int i = 0; i < hd; i++) CHECK(o1[i] == pw_fp16_to_fp32(v[i]) && o2[i] == o1[i]);
      free(ex);
      free(k);
      free(v);
    }
  fprintf(stderr, "attention: worst |fast - ref| %.3g, worst |ref - exact| %.3g\n", worst_fast, worst_exact);
  TEST_DONE();
}
