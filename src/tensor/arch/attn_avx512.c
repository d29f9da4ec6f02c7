/* attn_avx512.c - the F16 flash-attention kernel (attn.h) with 16-lane
 * AVX-512 vectors: the same algorithm and code as attn_avx2.c (both expand
 * arch/attn_impl.h), so each F16 accumulator update, the largest part, is
 * half the instructions. Head sizes that are not a multiple of 16 go to the
 * AVX2 kernel. Installed only when the CPU has the AVX-512 level. */
#include "tensor/attn.h"

#include "tensor/arch/exp_avx2.h"

#include <immintrin.h>
#include <math.h>

/* the lane helpers of arch/attn_impl.h's step 2; V_SHIFT_IN: lanes up by
 * k (a constant: an immediate), the lanes below k from fill */
#define V_SHIFT_IN(x, fill, k) \
  _mm512_castsi512_ps(_mm512_alignr_epi32(_mm512_castps_si512(x), _mm512_castps_si512(fill), 16 - (k)))
static inline __m512 v_load_ninf(const float *p, int n) {
  return _mm512_mask_load_ps(_mm512_set1_ps(-INFINITY), n >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << n) - 1), p);
}
static inline __m512 v_scan_max(__m512 x) {
  const __m512 ninf = _mm512_set1_ps(-INFINITY);
  x = _mm512_max_ps(x, V_SHIFT_IN(x, ninf, 1));
  x = _mm512_max_ps(x, V_SHIFT_IN(x, ninf, 2));
  x = _mm512_max_ps(x, V_SHIFT_IN(x, ninf, 4));
  return _mm512_max_ps(x, V_SHIFT_IN(x, ninf, 8));
}
static inline __m512 v_shift1(__m512 x, float first) { return V_SHIFT_IN(x, _mm512_set1_ps(first), 1); }
static inline unsigned v_exp_arg(__m512 s, __m512 m, __m512 *e) {
  const __m512 d = _mm512_sub_ps(s, m);
  const __mmask16 g = _mm512_cmp_ps_mask(s, m, _CMP_GT_OQ);
  *e = _mm512_mask_xor_ps(d, g, d, _mm512_set1_ps(-0.0f));
  return g;
}
/* exp8_clamped's reduction and polynomial (arch/exp_avx2.h) on 16 lanes,
 * the same operations in the same order: y with exp(c) = y * 2^fx */
static inline __m512 exp16_core(__m512 c, __m512 *fxo) {
  const __m512 fx = _mm512_roundscale_ps(_mm512_mul_ps(c, _mm512_set1_ps(1.44269504088896341f)),
                                         _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(fx, _mm512_set1_ps(0.693359375f), c);
  r = _mm512_fnmadd_ps(fx, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  *fxo = fx;
  return _mm512_fmadd_ps(_mm512_mul_ps(p, r), r, _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
}

/* exp8 (arch/exp_avx2.h) on 16 lanes: the same operations in the same
 * order, so the same bits, with the special cases as masks */
static inline __m512 v_exp(__m512 x) {
  const __m512 lo = _mm512_set1_ps(-86.5f), hi = _mm512_set1_ps(88.72283935546875f);
  const __mmask16 zero_m = _mm512_cmp_ps_mask(x, lo, _CMP_LT_OQ); /* also -inf */
  const __mmask16 inf_m = _mm512_cmp_ps_mask(x, hi, _CMP_GT_OQ);
  const __mmask16 nan_m = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
  __m512 fx;
  const __m512 y = exp16_core(_mm512_min_ps(_mm512_max_ps(x, lo), hi), &fx);
  const __m512i e = _mm512_add_epi32(_mm512_cvtps_epi32(fx), _mm512_set1_epi32(126));
  const __m512 pow2 = _mm512_castsi512_ps(_mm512_slli_epi32(e, 23));
  __m512 out = _mm512_maskz_mov_ps((__mmask16)~zero_m, _mm512_mul_ps(_mm512_mul_ps(y, pow2), _mm512_set1_ps(2.0f)));
  out = _mm512_mask_mov_ps(out, inf_m, _mm512_set1_ps(INFINITY));
  return _mm512_mask_mov_ps(out, nan_m, _mm512_set1_ps(NAN));
}

/* exp for the long kernel's weights, whose arguments are s - max <= 0
 * (-inf for keys out of range, NaN only from NaN scores): exp8's
 * reduction and polynomial, with 2^n applied by VSCALEFPS and no overflow
 * handling (15 operations instead of 24). Below -86.5 (and at -inf)
 * exactly 0; NaN stays NaN. Not exp8's bits where 2^n would be
 * subnormal: the long kernels are not bit-matched across levels (each
 * within the reference's tolerance). */
static inline __m512 v_exp_neg(__m512 x) {
  const __m512 lo = _mm512_set1_ps(-86.5f);
  __m512 fx;
  const __m512 y = exp16_core(_mm512_max_ps(lo, x), &fx); /* NaN passes the max */
  return _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(x, lo, _CMP_NLT_UQ), _mm512_scalef_ps(y, fx));
}

/* The scores of 16 keys (rows of kf, hd floats each) with the additions of
 * the 8-lane path (fold lane i + 8 onto lane i, then the pairs, fours and
 * eights of hsum8x8), done across the keys' vectors at once: at each level
 * two vectors become one, each half holding one vector's pair sums (a blend
 * and a two-source permute), so the reduction is a shuffle per pair instead
 * of hadd's three micro-ops; IEEE addition commutes, so the bits are
 * hsum8x8's. */
static inline __m512 sum_level(__m512 a, __m512 b, __mmask16 take_b, __m512i idx) {
  return _mm512_add_ps(_mm512_mask_blend_ps(take_b, a, b), _mm512_permutex2var_ps(a, idx, b));
}
static inline __attribute__((always_inline)) __m512 dot_part16(const float *qh, const float *kr, int hd);
static inline __attribute__((always_inline)) void scores16(const float *qh, const float *kf, int hd, float scale, float *out) {
  __m512 c[8];
  /* unrolled, so c[] and d[] stay in registers (rolled, gcc kept them on
   * the stack) */
#pragma GCC unroll 8
  for (int i = 0; i < 8; i++) {
    const __m512 a = dot_part16(qh, kf + (size_t)(2 * i) * hd, hd), b = dot_part16(qh, kf + (size_t)(2 * i + 1) * hd, hd);
    /* lanes 0-7: a's lane l + lane l + 8; lanes 8-15: b's */
    c[i] = _mm512_add_ps(_mm512_mask_blend_ps(0xFF00, a, b), _mm512_shuffle_f32x4(a, b, 0x4E));
  }
  /* partner lane l ^ k, from a where bit k of l is clear, else from b */
  const __m512i x1 = _mm512_setr_epi32(1, 16, 3, 18, 5, 20, 7, 22, 9, 24, 11, 26, 13, 28, 15, 30);
  const __m512i x2 = _mm512_setr_epi32(2, 3, 16, 17, 6, 7, 20, 21, 10, 11, 24, 25, 14, 15, 28, 29);
  const __m512i x4 = _mm512_setr_epi32(4, 5, 6, 7, 16, 17, 18, 19, 12, 13, 14, 15, 24, 25, 26, 27);
  __m512 d[4], e[2];
#pragma GCC unroll 4
  for (int i = 0; i < 4; i++) d[i] = sum_level(c[2 * i], c[2 * i + 1], 0xAAAA, x1);
#pragma GCC unroll 2
  for (int i = 0; i < 2; i++) e[i] = sum_level(d[2 * i], d[2 * i + 1], 0xCCCC, x2);
  const __m512 f = sum_level(e[0], e[1], 0xF0F0, x4);
  /* lane b0 + 2 b1 + 4 b2 + 8 b3 holds key 8 b2 + 4 b1 + 2 b0 + b3 */
  const __m512i order = _mm512_setr_epi32(0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15);
  _mm512_storeu_ps(out, _mm512_mul_ps(_mm512_permutexvar_ps(order, f), _mm512_set1_ps(scale)));
}
static inline float v_last(__m512 x) { return _mm512_cvtss_f32(_mm512_permutexvar_ps(_mm512_set1_epi32(15), x)); }

/* memory-operand conversions and broadcast (arch/attn_impl.h) */
static inline __m512 ph_load_m(const uint16_t *p) {
  __m512 r;
  __asm__("vcvtph2ps %1, %0" : "=v"(r) : "m"(*(const __m256i *)p));
  return r;
}
static inline void ph_store_m(uint16_t *p, __m512 v) {
  __asm__("vcvtps2ph $8, %1, %0" : "=m"(*(__m256i *)p) : "v"(v));
}
static inline __m512 bcast_m(const float *p) {
  __m512 r;
  __asm__("vbroadcastss %1, %0" : "=v"(r) : "m"(*p));
  return r;
}
#define V_PH_LOAD_M(p) ph_load_m(p)
#define V_PH_STORE_M(p, v) ph_store_m(p, v)
#define V_BCAST_M(p) bcast_m(p)

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
#define V_ROUND16(v) _mm512_cvtph_ps(_mm512_cvtps_ph(v, RND))
#define V_TO8(v) _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1))
#define V_MAX(a, b) _mm512_max_ps(a, b)
#define V_SUB(a, b) _mm512_sub_ps(a, b)
#define V_ADD(a, b) _mm512_add_ps(a, b)
/* the long kernel's tile: 7 queries x 4 vectors (28 accumulators and 4 V
 * vectors: gcc spills a few, still faster than 6 x 4 with a lone seventh
 * query for a GQA group of 7: a 64-token chunk at 16K depth 34 -> 30 ms,
 * bench_attn) */
#define LPV_NQ 7
#define LPV_W 4
#define LPV_CASES LPV_CASE(1) LPV_CASE(2) LPV_CASE(3) LPV_CASE(4) LPV_CASE(5) LPV_CASE(6) LPV_CASE(7)
#define ATTN_GROUP_LONG attn_group512_long
#define ATTN_MULTI_LONG attn_avx512_multi_long
#define ATTN_PART_LONG attn_avx512_part_long
#define ATTN_NARROW_LONG attn_avx2_multi_long
#define ATTN_NARROW_LONG_PART attn_avx2_part_long
#define ATTN_SCORES16 scores16
#define ATTN_GROUP attn_group512
#define ATTN_MULTI attn_avx512_multi
#define ATTN_SINGLE attn_avx512
#define ATTN_NARROW attn_avx2_multi
#define ATTN_PART attn_avx512_part
#define ATTN_NARROW_PART attn_avx2_part

#include "tensor/arch/attn_impl.h"

static inline __attribute__((always_inline)) __m512 dot_part16(const float *qh, const float *kr, int hd) { return dot_part(qh, kr, hd); }
