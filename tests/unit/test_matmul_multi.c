/* test_matmul_multi.c - pw_matmul_multi gives, for each matrix, exactly the
 * bytes pw_matmul gives, with mixed weight types (shared and distinct
 * activation types), any thread count and any token count. */
#include "base/pool.h"
#include "tensor/dtype.h"
#include "tensor/matmul.h"
#include "tensor/quants.h"
#include "tensor/traits.h"
#include "test.h"

#include <string.h>

static uint64_t g_rng = 7;
static float frand(void) {
  g_rng = g_rng * 6364136223846793005ull + 1442695040888963407ull;
  return (float)((double)(g_rng >> 11) * 0x1.0p-53 * 2.0 - 1.0);
}

static void run_set(const uint32_t types[4]) {
  const int64_t n_in = 512;
  const int64_t n_out[4] = {37, 16, 29, 8};
  void *W[4];
  for (int k = 0; k < 4; k++) {
    float *f = malloc(sizeof(float) * (size_t)(n_in * n_out[k]));
    for (int64_t i = 0; i < n_in * n_out[k]; i++) f[i] = frand();
    W[k] = malloc(pw_dtype_row_size(types[k], (uint64_t)n_in) * (size_t)n_out[k]);
    pw_ref_quantize(types[k], f, W[k], n_in * n_out[k]);
    free(f);
  }
  for (int nt = 1; nt <= 3; nt++) {
    pw_pool *pool = pw_pool_create(nt);
    for (int64_t n_tok = 1; n_tok <= 2 * PW_VEC_DOT_MAX_NX + 1; n_tok += 4) {
      float *X = malloc(sizeof(float) * (size_t)(n_in * n_tok));
      for (int64_t i = 0; i < n_in * n_tok; i++) X[i] = frand();
      pw_mm_op ops[4];
      float *Y1[4], *Y2[4];
      for (int k = 0; k < 4; k++) {
        Y1[k] = calloc((size_t)(n_tok * n_out[k]), sizeof(float));
        Y2[k] = calloc((size_t)(n_tok * n_out[k]), sizeof(float));
        ops[k] = (pw_mm_op){types[k], W[k], n_out[k], Y2[k]};
      }
      size_t ss = pw_matmul_multi_scratch_size(ops, 4, n_in, n_tok);
      void *scratch = malloc(ss ? ss : 1);
      for (int k = 0; k < 4; k++) {
        void *s1 = malloc(pw_matmul_scratch_size(types[k], n_in, n_tok) + 1);
        pw_matmul(pool, types[k], W[k], n_in, n_out[k], X, n_tok, Y1[k], s1);
        free(s1);
      }
      /* small work runs on the caller unless the split is forced: both */
      for (int split = 0; split < 2; split++) {
        for (int k = 0; k < 4; k++) memset(Y2[k], 0xFF, sizeof(float) * (size_t)(n_tok * n_out[k]));
        pw_matmul_multi_ex(pool, ops, 4, n_in, X, n_tok, scratch, split ? PW_MM_SPLIT : 0);
        for (int k = 0; k < 4; k++)
          CHECK_MSG(memcmp(Y1[k], Y2[k], sizeof(float) * (size_t)(n_tok * n_out[k])) == 0,
                    "op %d (%s) threads %d tokens %lld split %d differs", k, pw_dtype_name(types[k]), nt,
                    (long long)n_tok, split);
      }
      for (int k = 0; k < 4; k++) {
        free(Y1[k]);
        free(Y2[k]);
      }
      free(scratch);
      free(X);
    }
    pw_pool_destroy(pool);
  }
  for (int k = 0; k < 4; k++) free(W[k]);
}

int main(void) {
  /* K-quants sharing q8_K rows, q8_0 and f16 */
  const uint32_t set1[4] = {PW_DT_Q4_K, PW_DT_Q6_K, PW_DT_Q8_0, PW_DT_F16};
  /* IQ4_XS shares q8_K with Q4_K, IQ4_NL and MXFP4 share q8_0 */
  const uint32_t set2[4] = {PW_DT_IQ4_XS, PW_DT_IQ4_NL, PW_DT_MXFP4, PW_DT_Q4_K};
  /* IQ4_NL shares Q8_0's pack where both have the tiled kernel (AVX-512
   * VBMI), IQ4_XS the q8_K rows of Q4_K where neither has it */
  const uint32_t set3[4] = {PW_DT_IQ4_NL, PW_DT_Q8_0, PW_DT_IQ4_XS, PW_DT_Q4_K};
  run_set(set1);
  run_set(set2);
  run_set(set3);
  TEST_DONE();
}
