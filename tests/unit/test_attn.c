/* test_attn.c - the F16 attention kernel: the installed (widest) variant,
 * and the AVX2 one where a wider one is installed,
 * against the scalar reference, and the reference against a double
 * precision softmax-attention (within F16 accumulation error), and the
 * several-query kernel against the single-query one (bit-identical). */
#include "tensor/attn.h"
#include "tensor/quants.h"
#include "tensor/traits.h"
#include "test.h"

#include <string.h>

static uint64_t g_rng = 99;
static float frand(void) {
  g_rng = g_rng * 6364136223846793005ull + 1442695040888963407ull;
  return (float)((double)(g_rng >> 11) * 0x1.0p-53 * 2.0 - 1.0);
}

int main(void) {
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
      double *s = malloc(sizeof(double) * n), mx = -1e300, sum = 0;
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
        double df = fabs(o1[i] - o2[i]), de = fabs(o1[i] - e);
        if (df > worst_fast) worst_fast = df;
        if (de > worst_exact) worst_exact = de;
        /* F16 accumulation: relative 2^-11 per step over n steps, on values <= 1. */
        CHECK_MSG(de <= 2e-3 + 1e-3 * sqrt((double)n), "hd %d n %d: ref %g vs exact %g", hd, n, o1[i], e);
        CHECK_MSG(df <= 2e-3, "hd %d n %d: fast %g vs ref %g", hd, n, o2[i], o1[i]);
      }
      /* Several queries over the same K/V (a GQA group, or the heads of
       * several tokens: 1..41 queries, so groups of more than
       * PW_ATTN_GROUP_MAX are split), each seeing its own prefix of the
       * keys: each output bit-identical to the single-query kernel on that
       * query and prefix. */
      for (int nq = 1; nq <= 41; nq += 8) {
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
      free(s);
      free(k);
      free(v);
    }
  fprintf(stderr, "attention: worst |fast - ref| %.3g, worst |ref - exact| %.3g\n", worst_fast, worst_exact);
  TEST_DONE();
}
