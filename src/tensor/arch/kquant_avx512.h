/* kquant_avx512.h - the AVX-512 unpacking of K-quant super-blocks shared
 * by the vec_dot kernels (quants_avx512.c) and the tiled GEMM
 * (gemm_avx512vbmi.c): both see the same scales and quants. Included only
 * by files compiled with AVX-512 BW enabled. */
#ifndef PW_KQUANT_AVX512_H
#define PW_KQUANT_AVX512_H

#include "tensor/quants.h"

#include <immintrin.h>

#define KQ_AI static inline __attribute__((always_inline))

/* q4_K/q5_K scales[12] unpacked in each 128-bit lane of v (16 bytes of a
 * block from its scales on): bytes 0..7 the scales, 8..15 the mins.
 * Scale/min j < 4 is the low 6 bits of byte j / j + 4;
 * j >= 4 takes its low 4 bits from a nibble of byte j + 4 and its top 2
 * from the top of byte j - 4 / j. Reads 16 bytes (the 12 scale bytes and
 * the next 4, inside the block). No scalar work and no moves from general
 * registers: Q4_K one row from L2 measured 21-23 -> 27 GB/s per core
 * (build/bench_kernels, BENCH_N=2048, alternated), 1B-shaped Q4_K_M decode
 * +1.4-2.9% in alternated `power bench` runs. */
KQ_AI __m512i k4_unpack_lanes(__m512i v) {
  /* a: [s0..s3, s8..s11, s4..s7, s8..s11]; b: the top-bit sources of the
   * j >= 4 lanes ([s0..s3] under the scales, [s4..s7] under the mins) */
  const __m512i a =
      _mm512_shuffle_epi8(v, _mm512_broadcast_i32x4(_mm_setr_epi8(0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7, 8, 9, 10, 11)));
  const __m512i b = _mm512_shuffle_epi8(
      v, _mm512_broadcast_i32x4(_mm_setr_epi8(-1, -1, -1, -1, 0, 1, 2, 3, -1, -1, -1, -1, 4, 5, 6, 7)));
  const __m512i m =
      _mm512_broadcast_i32x4(_mm_setr_epi8(63, 63, 63, 63, 15, 15, 15, 15, 63, 63, 63, 63, 15, 15, 15, 15));
  const __m512i lo = _mm512_mask_blend_epi32(0x8888, _mm512_and_si512(a, m),
                                             _mm512_and_si512(_mm512_srli_epi16(a, 4), _mm512_set1_epi8(15)));
  return _mm512_or_si512(lo, _mm512_and_si512(_mm512_srli_epi16(b, 2), _mm512_set1_epi8(0x30)));
}

/* 16 bytes from each of s0..s3 (128-bit lane r: s[r]'s) */
KQ_AI __m512i k4_load4(const uint8_t *s0, const uint8_t *s1, const uint8_t *s2, const uint8_t *s3) {
  __m512i v = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)s0));
  v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)s1), 1);
  v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)s2), 2);
  return _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)s3), 3);
}

/* k4_unpack_lanes of four super-blocks' scales (128-bit lane r: s[r]'s) */
KQ_AI __m512i k4_unpack_v4(const uint8_t *s0, const uint8_t *s1, const uint8_t *s2, const uint8_t *s3) {
  return k4_unpack_lanes(k4_load4(s0, s1, s2, s3));
}

/* q6_K: the high two bits of the 4 sub-rows k (see block_q6_K) moved to
 * bits 4..5: k=0: <<4, k=1: <<2 (chunk A); k=2: >>0, k=3: >>2 (chunk B);
 * quants of half h, part m of a super-block */
KQ_AI __m512i q6_quants(const block_q6_K *w, int h, int m) {
  const __m512i m4 = _mm512_set1_epi8(0x0F), m30 = _mm512_set1_epi8(0x30);
  const __m512i shA = _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(2), 1);
  const __m512i shB = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(2), 1);
  const __m512i l = _mm512_loadu_si512(w->ql + 64 * h);
  const __m512i hh = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(w->qh + 32 * h)));
  const __m512i lo = m == 0 ? _mm512_and_si512(l, m4) : _mm512_and_si512(_mm512_srli_epi16(l, 4), m4);
  const __m512i hi = m == 0 ? _mm512_and_si512(_mm512_sllv_epi16(hh, shA), m30)
                            : _mm512_and_si512(_mm512_srlv_epi16(hh, shB), m30);
  return _mm512_or_si512(lo, hi);
}

#endif
