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
 * products and by the vector exp (a few ulp from expf). */
#include "tensor/attn.h"

#include "tensor/arch/exp_avx2.h"

#include <immintrin.h>
#include <math.h>

#define RND (_MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
#define CHUNK 256

static inline float hsum256(__m256 v) {
  __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
  lo = _mm_add_ps(lo, hi);
  lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
  lo = _mm_add_ss(lo, _mm_shuffle_ps(lo, lo, 1));
  return _mm_cvtss_f32(lo);
}

/* q.k for one key row (hd a multiple of 8), as one 8-lane vector */
static inline __m256 dot_row(const float *qh, const uint16_t *kr, int hd) {
  __m256 s = _mm256_mul_ps(_mm256_load_ps(qh), _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)kr)));
  for (int i = 8; i < hd; i += 8)
    s = _mm256_fmadd_ps(_mm256_load_ps(qh + i), _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(kr + i))), s);
  return s;
}

/* the 8 horizontal sums of a[0..7], in order, as one vector */
static inline __m256 hsum8x8(const __m256 a[8]) {
  const __m256 h01 = _mm256_hadd_ps(a[0], a[1]), h23 = _mm256_hadd_ps(a[2], a[3]);
  const __m256 h45 = _mm256_hadd_ps(a[4], a[5]), h67 = _mm256_hadd_ps(a[6], a[7]);
  const __m256 h0123 = _mm256_hadd_ps(h01, h23), h4567 = _mm256_hadd_ps(h45, h67);
  /* h0123 = [k0 k1 k2 k3 | k0 k1 k2 k3] halves (low lanes, high lanes) */
  const __m256 lo = _mm256_permute2f128_ps(h0123, h4567, 0x20);
  const __m256 hi = _mm256_permute2f128_ps(h0123, h4567, 0x31);
  return _mm256_add_ps(lo, hi);
}

void attn_avx2(const float *q, const uint16_t *k, const uint16_t *v, size_t stride, int n_pos, int hd, float scale,
               float *out) {
  if (hd % 8) {
    pw_attn_ref(q, k, v, stride, n_pos, hd, scale, out);
    return;
  }
  float qh[PW_ATTN_MAX_HD] __attribute__((aligned(32)));
  uint16_t acc[PW_ATTN_MAX_HD] __attribute__((aligned(32)));
  float sc[CHUNK] __attribute__((aligned(32)));
  float ex[CHUNK] __attribute__((aligned(32)));
  unsigned char grow[CHUNK];
  for (int i = 0; i < hd; i += 8) {
    __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(q + i), RND);
    _mm256_store_ps(qh + i, _mm256_cvtph_ps(h));
    _mm_store_si128((__m128i *)(acc + i), _mm_setzero_si128());
  }
  const __m256 vscale = _mm256_set1_ps(scale);
  float S = 0, M = -INFINITY;
  for (int p0 = 0; p0 < n_pos; p0 += CHUNK) {
    const int np = n_pos - p0 < CHUNK ? n_pos - p0 : CHUNK;
    const uint16_t *kc = k + (size_t)p0 * stride, *vc = v + (size_t)p0 * stride;
    /* 1. scores */
    int p = 0;
    for (; p + 8 <= np; p += 8) {
      __m256 d[8];
      for (int j = 0; j < 8; j++) d[j] = dot_row(qh, kc + (size_t)(p + j) * stride, hd);
      _mm256_store_ps(sc + p, _mm256_mul_ps(hsum8x8(d), vscale));
    }
    for (; p < np; p++) sc[p] = hsum256(dot_row(qh, kc + (size_t)p * stride, hd)) * scale;
    /* 2. running max -> exp arguments, then the exps */
    for (p = 0; p < np; p++) {
      const float s = sc[p];
      if (s > M) {
        ex[p] = M - s; /* exp(M_old - M); -inf on the first key gives 0 */
        grow[p] = 1;
        M = s;
      } else {
        ex[p] = s - M;
        grow[p] = 0;
      }
    }
    for (p = 0; p + 8 <= np; p += 8) _mm256_store_ps(ex + p, exp8(_mm256_load_ps(ex + p)));
    if (p < np) {
      float tail[8] __attribute__((aligned(32))) = {0};
      for (int j = 0; p + j < np; j++) tail[j] = ex[p + j];
      _mm256_store_ps(tail, exp8(_mm256_load_ps(tail)));
      for (int j = 0; p + j < np; j++) ex[p + j] = tail[j];
    }
    /* 3. the F16 accumulator, key by key */
    for (p = 0; p < np; p++) {
      const uint16_t *vr = vc + (size_t)p * stride;
      float ms = 1.0f, vs = ex[p];
      if (grow[p]) {
        ms = ex[p];
        vs = 1.0f;
        const __m256 vms = _mm256_set1_ps(ms);
        for (int j = 0; j < hd; j += 8) {
          __m256 a = _mm256_mul_ps(_mm256_cvtph_ps(_mm_load_si128((const __m128i *)(acc + j))), vms);
          _mm_store_si128((__m128i *)(acc + j), _mm256_cvtps_ph(a, RND));
        }
      }
      const __m256 vvs = _mm256_set1_ps(vs);
      for (int j = 0; j < hd; j += 8) {
        __m256 a = _mm256_cvtph_ps(_mm_load_si128((const __m128i *)(acc + j)));
        a = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(vr + j))), vvs, a);
        _mm_store_si128((__m128i *)(acc + j), _mm256_cvtps_ph(a, RND));
      }
      S = S * ms + vs;
    }
  }
  __m256 inv = _mm256_set1_ps(1.0f / S);
  for (int j = 0; j < hd; j += 8)
    _mm256_storeu_ps(out + j, _mm256_mul_ps(_mm256_cvtph_ps(_mm_load_si128((const __m128i *)(acc + j))), inv));
}
