/* attn_avx2.c - AVX2/FMA/F16C variant of the F16 flash-attention kernel
 * (attn.h). Same algorithm as pw_attn_ref, in chunks of keys and three
 * steps per chunk so only the part that must be sequential is:
 *   1. every score of the chunk (8 keys at a time, their dot products
 *      reduced together);
 *   2. per query, the running max before each key as a prefix max over a
 *      vector of keys on top of the max so far, which fixes each key's exp
 *      argument (M_old - M when the max grows, else s - M); then the
 *      chunk's exps with the vector exp;
 *   3. the F16 accumulator update, key by key, exactly as the reference
 *      (rescale when the max grew, add V times the weight, round to F16),
 *      with the running sums beside it.
 * It differs from the reference only by summation order in the q.k dot
 * products and by the vector exp (a few ulp from expf). Several queries
 * over the same K/V (a GQA group) go through together (attn_avx2_multi).
 * The long prefixes' kernels (attn_avx2_multi_long, _part_long; attn.h)
 * share steps 1 and 2's scores and exp, with one max per chunk and the
 * f32 accumulators of a tile of queries in registers. */
#include "tensor/attn.h"

#include "tensor/arch/exp_avx2.h"

#include <immintrin.h>
#include <math.h>

/* head sizes that are not a multiple of 8: the reference, query by query */
static void attn_narrow(const float *const *q, const int *n_pos, int nq, const uint16_t *k, const uint16_t *v,
                        size_t stride, int hd, float scale, float *const *out) {
  for (int h = 0; h < nq; h++) pw_attn_ref(q[h], k, v, stride, n_pos[h], hd, scale, out[h]);
}

static void attn_narrow_part(const float *const *q, const int *n_pos, int nq, const uint16_t *k, const uint16_t *v,
                             size_t stride, int hd, float scale, float *const *out, float *ms) {
  for (int h = 0; h < nq; h++) pw_attn_ref_part(q[h], k, v, stride, n_pos[h], hd, scale, out[h], ms + 2 * h);
}

static void attn_narrow_long(const float *const *q, const int *n_pos, int nq, const uint16_t *k, const uint16_t *v,
                             size_t stride, int hd, float scale, float *const *out) {
  for (int h = 0; h < nq; h++) pw_attn_ref_long(q[h], k, v, stride, n_pos[h], hd, scale, out[h]);
}

static void attn_narrow_long_part(const float *const *q, const int *n_pos, int nq, const uint16_t *k,
                                  const uint16_t *v, size_t stride, int hd, float scale, float *const *out,
                                  float *ms) {
  for (int h = 0; h < nq; h++) pw_attn_ref_long_part(q[h], k, v, stride, n_pos[h], hd, scale, out[h], ms + 2 * h);
}

/* the lane helpers of arch/attn_impl.h's step 2 */
static inline __m256 v_shift_up(__m256 x, __m256i idx, int k_mask, __m256 fill) {
  return _mm256_blendv_ps(_mm256_permutevar8x32_ps(x, idx), fill,
                          _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(k_mask),
                                                                 _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7))));
}
static inline __m256 v_load_ninf(const float *p, int n) {
  const __m256 live = _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)));
  return _mm256_blendv_ps(_mm256_set1_ps(-INFINITY), _mm256_load_ps(p), live);
}
static inline __m256 v_scan_max(__m256 x) {
  const __m256 ninf = _mm256_set1_ps(-INFINITY);
  x = _mm256_max_ps(x, v_shift_up(x, _mm256_setr_epi32(0, 0, 1, 2, 3, 4, 5, 6), 1, ninf));
  x = _mm256_max_ps(x, v_shift_up(x, _mm256_setr_epi32(0, 0, 0, 1, 2, 3, 4, 5), 2, ninf));
  return _mm256_max_ps(x, v_shift_up(x, _mm256_setr_epi32(0, 0, 0, 0, 0, 1, 2, 3), 4, ninf));
}
static inline __m256 v_shift1(__m256 x, float first) {
  return _mm256_blend_ps(_mm256_permutevar8x32_ps(x, _mm256_setr_epi32(0, 0, 1, 2, 3, 4, 5, 6)), _mm256_set1_ps(first), 1);
}
static inline unsigned v_exp_arg(__m256 s, __m256 m, __m256 *e) {
  const __m256 d = _mm256_sub_ps(s, m), g = _mm256_cmp_ps(s, m, _CMP_GT_OQ);
  *e = _mm256_blendv_ps(d, _mm256_xor_ps(d, _mm256_set1_ps(-0.0f)), g);
  return (unsigned)_mm256_movemask_ps(g);
}
static inline float v_last(__m256 x) { return _mm256_cvtss_f32(_mm256_permutevar8x32_ps(x, _mm256_set1_epi32(7))); }
#define v_exp exp8
/* exp for the long kernel's weights (arguments <= 0, -inf out of range,
 * NaN only from NaN scores): exp8 without its overflow handling, the same
 * bits for those arguments (NaN stays NaN) */
static inline __m256 v_exp_neg(__m256 x) {
  const __m256 lo = _mm256_set1_ps(-86.5f);
  return _mm256_andnot_ps(_mm256_cmp_ps(x, lo, _CMP_LT_OQ), exp8_clamped(_mm256_max_ps(lo, x)));
}

/* memory-operand conversions and broadcast (arch/attn_impl.h) */
static inline __m256 ph_load_m(const uint16_t *p) {
  __m256 r;
  __asm__("vcvtph2ps %1, %0" : "=x"(r) : "m"(*(const __m128i *)p));
  return r;
}
static inline void ph_store_m(uint16_t *p, __m256 v) {
  __asm__("vcvtps2ph $8, %1, %0" : "=m"(*(__m128i *)p) : "x"(v));
}
static inline __m256 bcast_m(const float *p) {
  __m256 r;
  __asm__("vbroadcastss %1, %0" : "=x"(r) : "m"(*p));
  return r;
}
#define V_PH_LOAD_M(p) ph_load_m(p)
#define V_PH_STORE_M(p, v) ph_store_m(p, v)
#define V_BCAST_M(p) bcast_m(p)

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
#define V_MAX(a, b) _mm256_max_ps(a, b)
#define V_SUB(a, b) _mm256_sub_ps(a, b)
#define V_ADD(a, b) _mm256_add_ps(a, b)
/* the long kernel's tile: 4 queries x 2 vectors (8 accumulators, the V
 * vectors and a broadcast in the 16 registers) */
#define LPV_NQ 4
#define LPV_W 2
#define LPV_CASES LPV_CASE(1) LPV_CASE(2) LPV_CASE(3) LPV_CASE(4)
#define ATTN_GROUP_LONG attn_group_long
#define ATTN_MULTI_LONG attn_avx2_multi_long
#define ATTN_PART_LONG attn_avx2_part_long
#define ATTN_NARROW_LONG attn_narrow_long
#define ATTN_NARROW_LONG_PART attn_narrow_long_part
#define ATTN_GROUP attn_group
#define ATTN_MULTI attn_avx2_multi
#define ATTN_SINGLE attn_avx2
#define ATTN_NARROW attn_narrow
#define ATTN_PART attn_avx2_part
#define ATTN_NARROW_PART attn_narrow_part

#include "tensor/arch/attn_impl.h"

/* The quantized caches' kernel (attn.c pw_attn_kvq) for a chunk of keys:
 * the weights as the F16 kernel's, the accumulators in f32. */
void attn_avx2_kvq_chunk(float (*acc)[PW_ATTN_KVQ_MAX_HD], float *M, float *S, float (*sc)[PW_ATTN_KVQ_CHUNK],
                         const float *vf, const int *lim, int nq, int hd, int np, int f16acc) {
  uint64_t grow[PW_ATTN_GROUP_MAX];
  /* the weights: exp(s - M) where the max did not grow, else exp(M_old - M) */
  for (int h = 0; h < nq; h++) grow[h] = chunk_weights(sc[h], lim[h], &M[h]);
  for (int p = 0; p < np; p++) {
    const float *vr = vf + (size_t)p * hd;
    for (int h = 0; h < nq; h++) {
      if (p >= lim[h]) continue;
      const float w = sc[h][p];
      float *a = acc[h];
      __m256 vs = _mm256_set1_ps(w);
      if (grow[h] >> p & 1) {
        for (int i = 0; i < hd; i += 8) {
          const __m256 x = _mm256_mul_ps(_mm256_load_ps(a + i), vs);
          _mm256_store_ps(a + i, f16acc ? V_ROUND16(x) : x);
        }
        vs = _mm256_set1_ps(1.0f);
        S[h] = S[h] * w + 1.0f;
      } else {
        S[h] = S[h] + w;
      }
      if (f16acc) {
        for (int i = 0; i < hd; i += 8)
          _mm256_store_ps(a + i, V_ROUND16(_mm256_fmadd_ps(_mm256_loadu_ps(vr + i), vs, _mm256_load_ps(a + i))));
      } else {
        for (int i = 0; i < hd; i += 8)
          _mm256_store_ps(a + i, _mm256_fmadd_ps(_mm256_loadu_ps(vr + i), vs, _mm256_load_ps(a + i)));
      }
    }
  }
}
