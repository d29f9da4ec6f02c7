/* attn_impl.h - the body of the F16 flash-attention kernels (attn.h), one
 * copy per vector width: arch/attn_avx2.c includes it with 8-lane AVX2
 * macros, arch/attn_avx512.c with 16-lane AVX-512 ones. Not a header to
 * include anywhere else. The includer defines:
 *   VT, VW                      vector type and lanes
 *   V_LOAD/V_LOADU/V_STORE/V_STOREU, V_MUL, V_FMA, V_SET1
 *   V_LOAD_PH(p)                VW F16 values -> one vector
 *   V_ROUND16(v)                v rounded to F16 and back, in registers
 *   V_TO8(v)                    fold to 8 lanes (lane i + 8 onto lane i)
 *   ATTN_GROUP, ATTN_MULTI, ATTN_PART, ATTN_SINGLE   names of the
 *                               functions made here
 *   ATTN_NARROW(q, n_pos, nq, k, v, stride, hd, scale, out)
 *   ATTN_NARROW_PART(q, n_pos, nq, k, v, stride, hd, scale, out, ms)
 *                               what handles head sizes not a multiple of VW
 * (RND may be used in the V_ macros.) */

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

/* q.k for one key row of f32 values (hd a multiple of VW), folded to 8
 * lanes */
static inline __m256 dot_row(const float *qh, const float *kr, int hd) {
  VT s = V_MUL(V_LOAD(qh), V_LOAD(kr));
  for (int i = VW; i < hd; i += VW) s = V_FMA(V_LOAD(qh + i), V_LOAD(kr + i), s);
  return V_TO8(s);
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

/* rows [0, np) of an F16 matrix (stride elements apart) as packed f32;
 * meanwhile rows [0, npf) at pf (same layout) are prefetched: at long
 * contexts the cache comes from memory, so each chunk asks for the rows it
 * will need next */
static void rows_to_f32(const uint16_t *src, size_t stride, int np, int hd, float *dst, const uint16_t *pf,
                        int npf) {
  for (int p = 0; p < np; p++) {
    if (p < npf)
      for (int i = 0; i < hd; i += 32) _mm_prefetch((const char *)(pf + p * stride + i), _MM_HINT_T0);
    for (int i = 0; i < hd; i += VW) V_STORE(dst + (size_t)p * hd + i, V_LOAD_PH(src + p * stride + i));
  }
  for (int p = np; p < npf; p++)
    for (int i = 0; i < hd; i += 32) _mm_prefetch((const char *)(pf + p * stride + i), _MM_HINT_T0);
}

/* Up to MQ queries sharing one K/V (the query heads of a GQA group, and
 * several tokens of one sequence) in one pass over the cache: each chunk of
 * K and V is converted to f32 once for all of them, and the key-by-key F16
 * accumulator updates of different queries are independent, so they
 * overlap instead of waiting on each other. Query h sees keys
 * [0, n_pos[h]). Each query's arithmetic is exactly the single-query
 * algorithm's. */
#define MQ PW_ATTN_GROUP_MAX
#define MQ_MAX_HD 256
#define MQP (MQ + 8) /* rows padded to whole 8-query vectors */

/* Step 3 below for four queries (lim 0 for absent ones) and W <= 4 vectors
 * of the head from element j0: the accumulators stay in registers over the
 * chunk's keys, the 4 x W updates are independent chains (each a multiply-
 * add and two conversions long, so many must be in flight). Each
 * element is updated exactly as in the reference: rescaled when the max
 * grew, then plus V times the weight, rounded to F16 after each. */
static inline __attribute__((always_inline)) void accum_quad(float (*acc)[MQ_MAX_HD], const float *ex,
                                                             const int *grow, const int *lim, const float *kf,
                                                             int hd, int np, int j0, const int W) {
  VT a[4][4];
#pragma GCC unroll 4
  for (int h = 0; h < 4; h++)
#pragma GCC unroll 4
    for (int u = 0; u < W; u++) a[h][u] = V_LOAD(acc[h] + j0 + u * VW);
  for (int p = 0; p < np; p++) {
    const float *vr = kf + (size_t)p * hd + j0;
    VT vv[4];
#pragma GCC unroll 4
    for (int u = 0; u < W; u++) vv[u] = V_LOAD(vr + u * VW);
#pragma GCC unroll 4
    for (int h = 0; h < 4; h++) {
      if (p >= lim[h]) continue;
      VT vs = V_SET1(ex[(size_t)p * MQP + h]);
      if (grow[(size_t)p * MQP + h]) {
#pragma GCC unroll 4
        for (int u = 0; u < W; u++) a[h][u] = V_ROUND16(V_MUL(a[h][u], vs));
        vs = V_SET1(1.0f);
      }
#pragma GCC unroll 4
      for (int u = 0; u < W; u++) a[h][u] = V_ROUND16(V_FMA(vv[u], vs, a[h][u]));
    }
  }
#pragma GCC unroll 4
  for (int h = 0; h < 4; h++)
#pragma GCC unroll 4
    for (int u = 0; u < W; u++) V_STORE(acc[h] + j0 + u * VW, a[h][u]);
}

/* ms NULL: out[h] is the normalised output; else out[h] is the
 * unnormalised accumulator and ms[2h], ms[2h + 1] the running max and sum
 * (pw_attn_part_fn) */
static void ATTN_GROUP(const float *const *q, const int *n_pos, int nq, const uint16_t *k, const uint16_t *v,
                       size_t stride, int hd, float scale, float *const *out, float *ms) {
  float qh[MQ][MQ_MAX_HD] __attribute__((aligned(64)));
  /* the F16 accumulators, held as the f32 values of their F16 roundings
   * (converting in registers: the store form of the F16 convert is slow) */
  float acc[MQP][MQ_MAX_HD] __attribute__((aligned(64)));
  float kf[CHUNK * MQ_MAX_HD] __attribute__((aligned(64)));
  /* per chunk: scores query-major; exp arguments, then weights, and the
   * growth masks (all ones where the max grew) key-major */
  float sc[MQP][CHUNK] __attribute__((aligned(32)));
  float ex[CHUNK][MQP] __attribute__((aligned(32)));
  int grow[CHUNK][MQP] __attribute__((aligned(32)));
  float S[MQP], M[MQP];
  int lim[MQP] = {0}; /* keys of the current chunk query h sees (0 past nq) */
  const __m256i sc_idx = _mm256_setr_epi32(0, CHUNK, 2 * CHUNK, 3 * CHUNK, 4 * CHUNK, 5 * CHUNK, 6 * CHUNK, 7 * CHUNK);
  int n_max = 0;
  for (int h = 0; h < nq; h++) {
    for (int i = 0; i < hd; i += VW) {
      V_STORE(qh[h] + i, V_ROUND16(V_LOADU(q[h] + i))); /* q rounded to F16 */
      V_STORE(acc[h] + i, V_SET1(0.0f));
    }
    S[h] = 0;
    M[h] = -INFINITY;
    if (n_pos[h] > n_max) n_max = n_pos[h];
  }
  const __m256 vscale = _mm256_set1_ps(scale);
  for (int p0 = 0; p0 < n_max; p0 += CHUNK) {
    const int np = n_max - p0 < CHUNK ? n_max - p0 : CHUNK;
    /* 1. scores */
    /* K of this chunk (V of it on the way) */
    rows_to_f32(k + (size_t)p0 * stride, stride, np, hd, kf, v + (size_t)p0 * stride, np);
    for (int h = 0; h < nq; h++) {
      const int nh = n_pos[h] - p0 < np ? n_pos[h] - p0 : np;
      lim[h] = nh > 0 ? nh : 0;
      int p = 0;
      for (; p + 8 <= nh; p += 8) {
        __m256 d[8];
        for (int j = 0; j < 8; j++) d[j] = dot_row(qh[h], kf + (size_t)(p + j) * hd, hd);
        _mm256_store_ps(sc[h] + p, _mm256_mul_ps(hsum8x8(d), vscale));
      }
      for (; p < nh; p++) sc[h][p] = hsum256(dot_row(qh[h], kf + (size_t)p * hd, hd)) * scale;
    }
    /* 2. running max -> exp arguments (key-major, eight queries per vector:
     * each query's chain is serial over the keys, different queries'
     * are not), then the exps */
    for (int h = 0; h < nq; h += 8) {
      const __m256i lim8 = _mm256_loadu_si256((const __m256i *)(lim + h));
      __m256 m = _mm256_loadu_ps(M + h);
      for (int p = 0; p < np; p++) {
        const __m256 live = _mm256_castsi256_ps(_mm256_cmpgt_epi32(lim8, _mm256_set1_epi32(p)));
        const __m256 s = _mm256_mask_i32gather_ps(_mm256_setzero_ps(), sc[h] + p, sc_idx, live, 4);
        const __m256 d = _mm256_sub_ps(s, m);
        const __m256 g = _mm256_and_ps(_mm256_cmp_ps(s, m, _CMP_GT_OQ), live);
        /* growth: exp(M_old - M) (-inf on the first key gives 0), else exp(s - M) */
        _mm256_store_ps(ex[p] + h, _mm256_blendv_ps(d, _mm256_xor_ps(d, _mm256_set1_ps(-0.0f)), g));
        _mm256_store_si256((__m256i *)(grow[p] + h), _mm256_castps_si256(g));
        m = _mm256_blendv_ps(m, s, g);
      }
      _mm256_storeu_ps(M + h, m);
    }
    for (int p = 0; p < np; p++)
      for (int h = 0; h < nq; h += 8) _mm256_store_ps(ex[p] + h, exp8(_mm256_load_ps(ex[p] + h)));
    /* 3. the F16 accumulators, key by key (kf now holds V) */
    /* V of this chunk (K of the next one on the way) */
    const int np_next = n_max - p0 - np < CHUNK ? n_max - p0 - np : CHUNK;
    rows_to_f32(v + (size_t)p0 * stride, stride, np, hd, kf, k + (size_t)(p0 + np) * stride, np_next);
    for (int h = 0; h < nq; h += 4) {
      int j = 0;
      for (; j + 4 * VW <= hd; j += 4 * VW) accum_quad(acc + h, ex[0] + h, grow[0] + h, lim + h, kf, hd, np, j, 4);
      if (j + 2 * VW <= hd) {
        accum_quad(acc + h, ex[0] + h, grow[0] + h, lim + h, kf, hd, np, j, 2);
        j += 2 * VW;
      }
      if (j < hd) accum_quad(acc + h, ex[0] + h, grow[0] + h, lim + h, kf, hd, np, j, 1);
    }
    /* 4. the running sums: S * ms + vs, ms = the weight where the max grew
     * (then vs = 1), else ms = 1 and vs = the weight */
    for (int h = 0; h < nq; h += 8) {
      const __m256i lim8 = _mm256_loadu_si256((const __m256i *)(lim + h));
      const __m256 one = _mm256_set1_ps(1.0f);
      __m256 s8 = _mm256_loadu_ps(S + h);
      for (int p = 0; p < np; p++) {
        const __m256 live = _mm256_castsi256_ps(_mm256_cmpgt_epi32(lim8, _mm256_set1_epi32(p)));
        const __m256 e = _mm256_load_ps(ex[p] + h);
        const __m256 g = _mm256_castsi256_ps(_mm256_load_si256((const __m256i *)(grow[p] + h)));
        const __m256 sn = _mm256_add_ps(_mm256_mul_ps(s8, _mm256_blendv_ps(one, e, g)), _mm256_blendv_ps(e, one, g));
        s8 = _mm256_blendv_ps(s8, sn, live);
      }
      _mm256_storeu_ps(S + h, s8);
    }
  }
  if (ms) {
    for (int h = 0; h < nq; h++) {
      for (int j = 0; j < hd; j += VW) V_STOREU(out[h] + j, V_LOAD(acc[h] + j));
      ms[2 * h] = M[h];
      ms[2 * h + 1] = S[h];
    }
    return;
  }
  for (int h = 0; h < nq; h++) {
    const VT inv = V_SET1(1.0f / S[h]);
    for (int j = 0; j < hd; j += VW) V_STOREU(out[h] + j, V_MUL(V_LOAD(acc[h] + j), inv));
  }
}


void ATTN_MULTI(const float *const *q, const int *n_pos, int nq, const uint16_t *k, const uint16_t *v,
                size_t stride, int hd, float scale, float *const *out) {
  if (hd % VW || hd > MQ_MAX_HD) {
    ATTN_NARROW(q, n_pos, nq, k, v, stride, hd, scale, out);
    return;
  }
  for (int h0 = 0; h0 < nq; h0 += MQ) {
    const int g = nq - h0 < MQ ? nq - h0 : MQ;
    ATTN_GROUP(q + h0, n_pos + h0, g, k, v, stride, hd, scale, out + h0, NULL);
  }
}

void ATTN_PART(const float *const *q, const int *n_pos, int nq, const uint16_t *k, const uint16_t *v, size_t stride,
               int hd, float scale, float *const *out, float *ms) {
  if (hd % VW || hd > MQ_MAX_HD) {
    ATTN_NARROW_PART(q, n_pos, nq, k, v, stride, hd, scale, out, ms);
    return;
  }
  for (int h0 = 0; h0 < nq; h0 += MQ) {
    const int g = nq - h0 < MQ ? nq - h0 : MQ;
    ATTN_GROUP(q + h0, n_pos + h0, g, k, v, stride, hd, scale, out + h0, ms + 2 * h0);
  }
}

void ATTN_SINGLE(const float *q, const uint16_t *k, const uint16_t *v, size_t stride, int n_pos, int hd, float scale,
                 float *out) {
  ATTN_MULTI(&q, &n_pos, 1, k, v, stride, hd, scale, &out);
}
