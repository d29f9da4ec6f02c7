/* exp_avx2.h - the AVX2/FMA vector exp shared by the f32 ops and the
 * attention kernel: a Cephes-style polynomial within a few ulp of expf;
 * inputs below -86.5 (and -inf) give 0, above 88.72 +inf, NaN stays NaN.
 * Include only from files compiled with -mavx2 -mfma. */
#ifndef PW_TENSOR_ARCH_EXP_AVX2_H
#define PW_TENSOR_ARCH_EXP_AVX2_H

#include <immintrin.h>
#include <math.h>

/* exp of x already clamped to [-86.5, 88.72] */
static inline __m256 exp8_clamped(__m256 x) {
  __m256 fx = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                              _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(fx, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(fx, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  __m256 y = _mm256_fmadd_ps(_mm256_mul_ps(p, r), r, _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  /* 2^(n-1) then *2 keeps the exponent field in range for n in [-124, 128] */
  __m256i e = _mm256_add_epi32(_mm256_cvtps_epi32(fx), _mm256_set1_epi32(126));
  __m256 pow2 = _mm256_castsi256_ps(_mm256_slli_epi32(e, 23));
  return _mm256_mul_ps(_mm256_mul_ps(y, pow2), _mm256_set1_ps(2.0f));
}

static inline __m256 exp8(__m256 x) {
  const __m256 lo = _mm256_set1_ps(-86.5f), hi = _mm256_set1_ps(88.72283935546875f);
  __m256 zero_m = _mm256_cmp_ps(x, lo, _CMP_LT_OQ); /* also -inf */
  __m256 inf_m = _mm256_cmp_ps(x, hi, _CMP_GT_OQ);
  __m256 nan_m = _mm256_cmp_ps(x, x, _CMP_UNORD_Q);
  __m256 y = exp8_clamped(_mm256_min_ps(_mm256_max_ps(x, lo), hi));
  y = _mm256_andnot_ps(zero_m, y);
  y = _mm256_blendv_ps(y, _mm256_set1_ps(INFINITY), inf_m);
  return _mm256_blendv_ps(y, _mm256_set1_ps(NAN), nan_m);
}

/* exp8 for x <= 0 (same bits there) without the overflow and NaN handling:
 * exp_sum over 151936 logits took 81 us instead of 100. NaN gives an
 * arbitrary value. */
static inline __m256 exp8_nonpos(__m256 x) {
  const __m256 lo = _mm256_set1_ps(-86.5f);
  __m256 zero_m = _mm256_cmp_ps(x, lo, _CMP_LT_OQ); /* also -inf */
  return _mm256_andnot_ps(zero_m, exp8_clamped(_mm256_max_ps(x, lo)));
}

#endif
