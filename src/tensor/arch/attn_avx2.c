/* attn_avx2.c - AVX2/FMA/F16C variant of the F16 flash-attention kernel
 * (attn.h). Same algorithm as pw_attn_ref; only the summation order of the
 * q.k dot product differs (8 lanes, then a horizontal sum). */
#include "tensor/attn.h"

#include <immintrin.h>
#include <math.h>

static inline float hsum256(__m256 v) {
  __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
  lo = _mm_add_ps(lo, hi);
  lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
  lo = _mm_add_ss(lo, _mm_shuffle_ps(lo, lo, 1));
  return _mm_cvtss_f32(lo);
}

#define RND (_MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)

void attn_avx2(const float *q, const uint16_t *k, const uint16_t *v, size_t stride, int n_pos, int hd, float scale,
               float *out) {
  if (hd % 8) {
    pw_attn_ref(q, k, v, stride, n_pos, hd, scale, out);
    return;
  }
  float qh[PW_ATTN_MAX_HD] __attribute__((aligned(32)));
  uint16_t acc[PW_ATTN_MAX_HD] __attribute__((aligned(32)));
  for (int i = 0; i < hd; i += 8) {
    __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(q + i), RND);
    _mm256_store_ps(qh + i, _mm256_cvtph_ps(h));
    _mm_store_si128((__m128i *)(acc + i), _mm_setzero_si128());
  }
  float S = 0, M = -INFINITY;
  for (int p = 0; p < n_pos; p++) {
    const uint16_t *kr = k + (size_t)p * stride, *vr = v + (size_t)p * stride;
    __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
    int i = 0;
    for (; i + 16 <= hd; i += 16) {
      s0 = _mm256_fmadd_ps(_mm256_load_ps(qh + i), _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(kr + i))), s0);
      s1 = _mm256_fmadd_ps(_mm256_load_ps(qh + i + 8),
                           _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(kr + i + 8))), s1);
    }
    for (; i < hd; i += 8)
      s0 = _mm256_fmadd_ps(_mm256_load_ps(qh + i), _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(kr + i))), s0);
    float s = hsum256(_mm256_add_ps(s0, s1)) * scale;
    float ms = 1.0f, vs = 1.0f;
    if (s > M) {
      float m_old = M;
      M = s;
      ms = expf(m_old - M);
      __m256 vms = _mm256_set1_ps(ms);
      for (int j = 0; j < hd; j += 8) {
        __m256 a = _mm256_mul_ps(_mm256_cvtph_ps(_mm_load_si128((const __m128i *)(acc + j))), vms);
        _mm_store_si128((__m128i *)(acc + j), _mm256_cvtps_ph(a, RND));
      }
    } else {
      vs = expf(s - M);
    }
    __m256 vvs = _mm256_set1_ps(vs);
    for (int j = 0; j < hd; j += 8) {
      __m256 a = _mm256_cvtph_ps(_mm_load_si128((const __m128i *)(acc + j)));
      a = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(vr + j))), vvs, a);
      _mm_store_si128((__m128i *)(acc + j), _mm256_cvtps_ph(a, RND));
    }
    S = S * ms + vs;
  }
  __m256 inv = _mm256_set1_ps(1.0f / S);
  for (int j = 0; j < hd; j += 8)
    _mm256_storeu_ps(out + j, _mm256_mul_ps(_mm256_cvtph_ps(_mm_load_si128((const __m128i *)(acc + j))), inv));
}
