/* avx2_util.h - the AVX2/FMA/F16C helpers shared by avx2.c and
 * gemm_avx2.c: horizontal sums, nibble and bit unpacking, and the q8
 * activation block quantizer (bit-identical to the reference). Only for
 * files compiled with -mavx2 -mfma -mf16c. */
#ifndef POWER_TENSOR_ARCH_AVX2_UTIL_H
#define POWER_TENSOR_ARCH_AVX2_UTIL_H

#include "tensor/dtype.h"
#include "tensor/quants.h"

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#define AI static inline __attribute__((always_inline))

/* An empty asm that takes v in a register and gives it back: the
 * compiler cannot move work across it. Without it gcc computed every
 * row's products of a half super-block first and stored them to the stack
 * before adding them up (the eight-row Q4_K step: 463 instructions a
 * super-block, 151 of them stack accesses). */
#define KEEP_IN_REG(v) __asm__("" : "+x"(v))

AI float hsum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

AI float hsum4(__m128 s) {
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

AI int hsum8i(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
  return _mm_cvtsi128_si32(s);
}

AI float h2f(pw_half h) { return _cvtsh_ss(h); }

AI __m256i loadu256(const void *p) { return _mm256_loadu_si256((const __m256i *)p); }

/* 32 nibbles -> 32 bytes: element j<16 is the low nibble of p[j], element
 * j+16 the high nibble. */
AI __m256i nibbles32(const uint8_t *p) {
  __m128i t = _mm_loadu_si128((const __m128i *)p);
  return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(t, 4), t), _mm256_set1_epi8(0x0F));
}

/* 32 bits (little-endian u32 at p) -> 32 bytes of 0xFF (bit set) or 0. */
AI __m256i bits32(const uint8_t *p) {
  uint32_t x;
  memcpy(&x, p, 4);
  const __m256i shuf = _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0);
  __m256i b = _mm256_shuffle_epi8(_mm256_set1_epi32((int)x), shuf);
  b = _mm256_or_si256(b, _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe));
  return _mm256_cmpeq_epi8(b, _mm256_set1_epi64x(-1));
}

/* roundf: round half away from zero */
AI __m256 round_away(__m256 v) {
  const __m256 t = _mm256_round_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
  const __m256 sign = _mm256_and_ps(v, _mm256_set1_ps(-0.0f));
  const __m256 absd = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), _mm256_sub_ps(v, t));
  const __m256 ge = _mm256_cmp_ps(absd, _mm256_set1_ps(0.5f), _CMP_GE_OQ);
  return _mm256_add_ps(t, _mm256_and_ps(ge, _mm256_or_ps(sign, _mm256_set1_ps(1.0f))));
}

AI __m256 vabs(__m256 v) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), v); }

AI float hmax8(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  return _mm_cvtss_f32(m);
}

/* four int32 vectors (elements 0..31 in order) -> 32 int8 */
AI __m256i pack32(__m256i i0, __m256i i1, __m256i i2, __m256i i3) {
  i0 = _mm256_packs_epi32(i0, i1);
  i2 = _mm256_packs_epi32(i2, i3);
  i0 = _mm256_packs_epi16(i0, i2);
  return _mm256_permutevar8x32_epi32(i0, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

/* shared by q8_0 and q8_1; returns sum of the 32 quants, *dout = d */
AI int q8_block(const float *x, pw_half *dh, int8_t *qs, float *dout) {
  __m256 v[4];
  __m256 m = _mm256_setzero_ps();
  for (int k = 0; k < 4; k++) {
    v[k] = _mm256_loadu_ps(x + 8 * k);
    m = _mm256_max_ps(m, vabs(v[k]));
  }
  const float amax = hmax8(m);
  const float d = amax / 127, id = d ? 1.0f / d : 0.0f;
  *dh = pw_fp32_to_fp16(d);
  *dout = d;
  const __m256 vid = _mm256_set1_ps(id);
  __m256i q[4];
  for (int k = 0; k < 4; k++) q[k] = _mm256_cvtps_epi32(round_away(_mm256_mul_ps(v[k], vid)));
  _mm256_storeu_si256((__m256i *)qs, pack32(q[0], q[1], q[2], q[3]));
  return hsum8i(_mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3])));
}

/* ---- K-quant helpers (vecdot_avx2.h, gemm_kq_avx2_impl.h) -------------- */

/* Scales as int16 multipliers without scalar work: a pshufb of a vector
 * holding eight int16 scales in each 128-bit half broadcasts one of them
 * (scale_k) or one per half (scale_pair_v: word a in the low half, word b
 * in the high half) to every lane; set1/set_m128i from a scalar byte took
 * three to six instructions each (and gcc left the loops over a
 * super-block rolled, computing them at run time). callgrind, `power
 * bench -t 1 -p 0 -n 2` of a one-layer llama-3.1-8b-shaped Q4_K_M (Q6_K
 * output), whole process at the AVX2 level: 1.93 G instructions before
 * this and the four-row kernels, 0.84 G after; Q6_K's kernel 1.36 G ->
 * 0.43 G, Q4_K's 0.50 G -> 0.33 G. */
AI __m256i scale_k(__m256i v, const int k) {
  return _mm256_shuffle_epi8(v, _mm256_set1_epi16((short)((2 * k + 1) << 8 | 2 * k)));
}
AI __m256i scale_pair_v(__m256i v, const int a, const int b) {
  return _mm256_shuffle_epi8(v, _mm256_set_m128i(_mm_set1_epi16((short)((2 * b + 1) << 8 | 2 * b)),
                                                 _mm_set1_epi16((short)((2 * a + 1) << 8 | 2 * a))));
}
/* 16 int16 scales (scales 0..7 in the low half, 8..15 in the high one) ->
 * scales 8h..8h+7 in both halves */
AI __m256i scales_half(__m256i sc16, const int h) {
  return h ? _mm256_permute4x64_epi64(sc16, 0xEE) : _mm256_permute4x64_epi64(sc16, 0x44);
}

/* q4_K/q5_K scales[12] unpacked in each 128-bit lane of v (16 bytes of a
 * block from its scales on: the 12 scale bytes and 4 of the quants, inside
 * the block): bytes 0..7 the scales, 8..15 the mins, as ggml's unpack.
 * Scale/min j < 4 is the low 6 bits of byte j / j + 4; j >= 4 takes its
 * low 4 bits from a nibble of byte j + 4 and its top 2 from the top of
 * byte j - 4 / j. The AVX-512 level's k4_unpack_lanes on 256 bits: a
 * handful of vector operations for two super-blocks where the scalar
 * unpack took about 25 instructions and a store-to-load round trip for
 * each. */
AI __m256i k4_unpack_lanes2(__m256i v) {
  /* a: [s0..s3, s8..s11, s4..s7, s8..s11]; b: the top-bit sources of the
   * j >= 4 lanes ([s0..s3] under the scales, [s4..s7] under the mins) */
  const __m256i a = _mm256_shuffle_epi8(
      v, _mm256_broadcastsi128_si256(_mm_setr_epi8(0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7, 8, 9, 10, 11)));
  const __m256i b = _mm256_shuffle_epi8(
      v, _mm256_broadcastsi128_si256(_mm_setr_epi8(-1, -1, -1, -1, 0, 1, 2, 3, -1, -1, -1, -1, 4, 5, 6, 7)));
  const __m256i m =
      _mm256_broadcastsi128_si256(_mm_setr_epi8(63, 63, 63, 63, 15, 15, 15, 15, 63, 63, 63, 63, 15, 15, 15, 15));
  const __m256i lo = _mm256_blend_epi32(_mm256_and_si256(a, m),
                                        _mm256_and_si256(_mm256_srli_epi16(a, 4), _mm256_set1_epi8(15)), 0x88);
  return _mm256_or_si256(lo, _mm256_and_si256(_mm256_srli_epi16(b, 2), _mm256_set1_epi8(0x30)));
}
/* the same, by scalar code into u (bytes 0..7 the scales, 8..15 the
 * mins): the tiled GEMM's, whose vector ports are busy with a super-block's
 * sixteen tokens while the integer ones are idle (the vector unpack there
 * measured 10% slower in 1B-shaped Q4_K_M prefill) */
AI void k4_unpack(const uint8_t *s, uint32_t u[4]) {
  const uint32_t km1 = 0x3f3f3f3f, km2 = 0x0f0f0f0f, km3 = 0x03030303;
  memcpy(u, s, 12);
  u[3] = ((u[2] >> 4) & km2) | (((u[1] >> 6) & km3) << 4);
  const uint32_t aux = u[1] & km1;
  u[1] = (u[2] & km2) | (((u[0] >> 6) & km3) << 4);
  u[2] = aux;
  u[0] &= km1;
}
/* one super-block's (s: its scales) */
AI __m128i k4_unpack_v(const uint8_t *s) {
  return _mm256_castsi256_si128(k4_unpack_lanes2(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)s))));
}
/* two super-blocks' (s0's in the low lane, s1's in the high one) */
AI __m256i k4_unpack_v2(const uint8_t *s0, const uint8_t *s1) {
  return k4_unpack_lanes2(
      _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)s0)),
                              _mm_loadu_si128((const __m128i *)s1), 1));
}

/* q3_K scales[12] -> 16 6-bit scales biased by 32, one a byte (ggml's
 * unpack) */
AI void k3_unpack(const uint8_t *s, uint32_t a[4]) {
  const uint32_t km1 = 0x03030303, km2 = 0x0f0f0f0f;
  memcpy(a, s, 12);
  const uint32_t t = a[2];
  a[2] = ((a[0] >> 4) & km2) | (((t >> 4) & km1) << 4);
  a[3] = ((a[1] >> 4) & km2) | (((t >> 6) & km1) << 4);
  a[0] = (a[0] & km2) | (((t >> 0) & km1) << 4);
  a[1] = (a[1] & km2) | (((t >> 2) & km1) << 4);
}

/* ---- non-linear 4-bit helpers (vecdot_avx2.h, gemm_iq4_avx2_impl.h) ---- */

/* a 16-entry value table in both 128-bit lanes, for a pshufb of nibbles */
AI __m256i table32(const int8_t *t) {
  return _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)t));
}

/* An IQ4_XS super-block's eight group scales, unbiased (ls - 32 in
 * -32..31), as int16 words 0..7 of both 128-bit halves, for scale_k(.., g):
 * per super-block two variable shifts and a pack instead of per group the
 * scalar extraction (about ten instructions) and a broadcast. callgrind,
 * `power bench -p 0 -n 2 -r 1 -t 1` of a llama-3.2-1b-shaped IQ4_XS file
 * at the AVX2 level: the scalar extraction was 2.15 G of vd_iq4_xs4's
 * 5.11 G instructions. */
AI __m256i iq4xs_scales(const block_iq4_xs *w) {
  uint32_t sl;
  memcpy(&sl, w->scales_l, 4);
  const __m256i sh_l = _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28), sh_h = _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14);
  const __m256i lo = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32((int)sl), sh_l), _mm256_set1_epi32(0xF));
  const __m256i hi = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(w->scales_h), sh_h), _mm256_set1_epi32(3));
  const __m256i ls = _mm256_sub_epi32(_mm256_or_si256(lo, _mm256_slli_epi32(hi, 4)), _mm256_set1_epi32(32));
  /* words l0..l3 l0..l3 | l4..l7 l4..l7, then qwords 0, 2, 0, 2 */
  return _mm256_permute4x64_epi64(_mm256_packs_epi32(ls, ls), 0x88);
}

/* The nibbles of IQ4_XS groups g and g + 1 (32 bytes at p: 16 a group) as
 * nibbles32 gives each: one load, and the halves exchanged once */
AI void nibbles32x2(const uint8_t *p, __m256i *n0, __m256i *n1) {
  const __m256i bits = loadu256(p), m4 = _mm256_set1_epi8(0x0F);
  const __m256i lo = _mm256_and_si256(bits, m4), hi = _mm256_and_si256(_mm256_srli_epi16(bits, 4), m4);
  *n0 = _mm256_permute2x128_si256(lo, hi, 0x20);
  *n1 = _mm256_permute2x128_si256(lo, hi, 0x31);
}

#endif
