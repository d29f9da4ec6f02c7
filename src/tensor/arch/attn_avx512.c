/* attn_avx512.c - the F16 flash-attention kernel (attn.h) with 16-lane
 * AVX-512 vectors: the same algorithm and code as attn_avx2.c (both expand
 * arch/attn_impl.h), so each F16 accumulator update, the largest part, is
 * half the instructions. Head sizes that are not a multiple of 16 go to the
 * AVX2 kernel. Installed only when the CPU has the AVX-512 level. */
#include "tensor/attn.h"

#include "tensor/arch/exp_avx2.h"

#include <immintrin.h>
#include <math.h>

#define RND (_MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
#define CHUNK 64

static inline float hsum256(__m256 v) {
  __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
  lo = _mm_add_ps(lo, hi);
  lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
  lo = _mm_add_ss(lo, _mm_shuffle_ps(lo, lo, 1));
  return _mm_cvtss_f32(lo);
}

#define VT __m512
#define VW 16
#define V_LOAD(p) _mm512_load_ps(p)
#define V_LOADU(p) _mm512_loadu_ps(p)
#define V_STORE(p, v) _mm512_store_ps(p, v)
#define V_STOREU(p, v) _mm512_storeu_ps(p, v)
#define V_MUL(a, b) _mm512_mul_ps(a, b)
#define V_FMA(a, b, c) _mm512_fmadd_ps(a, b, c)
#define V_SET1(x) _mm512_set1_ps(x)
#define V_LOAD_PH(p) _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(p)))
#define V_STORE_PH(p, v) _mm256_storeu_si256((__m256i *)(p), _mm512_cvtps_ph(v, RND))
#define V_TO8(v) _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1))
#define ATTN_GROUP attn_group512

#include "tensor/arch/attn_impl.h"

void attn_avx512_multi(const float *q, int nq, const uint16_t *k, const uint16_t *v, size_t stride, int n_pos,
                       int hd, float scale, float *out) {
  if (hd % 16 || hd > MQ_MAX_HD) {
    attn_avx2_multi(q, nq, k, v, stride, n_pos, hd, scale, out);
    return;
  }
  for (int h0 = 0; h0 < nq; h0 += MQ) {
    const int g = nq - h0 < MQ ? nq - h0 : MQ;
    attn_group512(q + (size_t)h0 * hd, g, k, v, stride, n_pos, hd, scale, out + (size_t)h0 * hd);
  }
}

void attn_avx512(const float *q, const uint16_t *k, const uint16_t *v, size_t stride, int n_pos, int hd, float scale,
                 float *out) {
  attn_avx512_multi(q, 1, k, v, stride, n_pos, hd, scale, out);
}
