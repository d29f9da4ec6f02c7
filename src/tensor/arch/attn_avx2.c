/* attn_avx2.c - AVX2/FMA/F16C variant of the F16 flash-attention kernel
 * (attn.h). Same algorithm as pw_attn_ref, in chunks of keys and three
 * steps per chunk so only the part that must be sequential is:
 *   1. every score of the chunk (8 keys at a time, their dot products
 *      reduced together);
 *   2. the running max, key by key (scalar compares), which fixes each
 *      key's exp argument (M_old - M when the max grows, else s - M); then
 *      all the chunk's exps at once with the vector exp;
 *   3. the F16 accumulator update, key by key, exactly as the reference
 *      (rescale when the max grew, add V times the weight, round to F16).
 * It differs from the reference only by summation order in the q.k dot
 * products and by the vector exp (a few ulp from expf). Several queries
 * over the same K/V (a GQA group) go through together (attn_avx2_multi). */
#include "tensor/attn.h"

#include <immintrin.h>

/* head sizes that are not a multiple of 8: the reference, query by query */
static void attn_narrow(const float *const *q, const int *n_pos, int nq, const uint16_t *k, const uint16_t *v,
                        size_t stride, int hd, float scale, float *const *out) {
  for (int h = 0; h < nq; h++) pw_attn_ref(q[h], k, v, stride, n_pos[h], hd, scale, out[h]);
}

static void attn_narrow_part(const float *const *q, const int *n_pos, int nq, const uint16_t *k, const uint16_t *v,
                             size_t stride, int hd, float scale, float *const *out, float *ms) {
  for (int h = 0; h < nq; h++) pw_attn_ref_part(q[h], k, v, stride, n_pos[h], hd, scale, out[h], ms + 2 * h);
}

void attn_avx2_kvq_update(float *a, const float *v, float ms, float vs, int grow, int f16acc, int hd) {
  const __m256 m = _mm256_set1_ps(ms), s = _mm256_set1_ps(vs);
  for (int i = 0; i < hd; i += 8) {
    __m256 x = _mm256_loadu_ps(a + i);
    if (grow) {
      x = _mm256_mul_ps(x, m);
      if (f16acc) x = _mm256_cvtph_ps(_mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    }
    x = _mm256_fmadd_ps(_mm256_loadu_ps(v + i), s, x);
    if (f16acc) x = _mm256_cvtph_ps(_mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    _mm256_storeu_ps(a + i, x);
  }
}

#define VT __m256
#define VW 8
#define V_LOAD(p) _mm256_load_ps(p)
#define V_LOADU(p) _mm256_loadu_ps(p)
#define V_STORE(p, v) _mm256_store_ps(p, v)
#define V_STOREU(p, v) _mm256_storeu_ps(p, v)
#define V_MUL(a, b) _mm256_mul_ps(a, b)
#define V_FMA(a, b, c) _mm256_fmadd_ps(a, b, c)
#define V_SET1(x) _mm256_set1_ps(x)
#define V_LOAD_PH(p) _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p)))
#define V_ROUND16(v) _mm256_cvtph_ps(_mm256_cvtps_ph(v, RND))
#define V_TO8(v) (v)
#define ATTN_GROUP attn_group
#define ATTN_MULTI attn_avx2_multi
#define ATTN_SINGLE attn_avx2
#define ATTN_NARROW attn_narrow
#define ATTN_PART attn_avx2_part
#define ATTN_NARROW_PART attn_narrow_part

#include "tensor/arch/attn_impl.h"
