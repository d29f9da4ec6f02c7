/* attn_impl.h - the body of the F16 flash-attention kernels (attn.h), one
 * copy per vector width: arch/attn_avx2.c includes it with 8-lane AVX2
 * macros, arch/attn_avx512.c with 16-lane AVX-512 ones. Not a header to
 * include anywhere else. The includer defines:
 *   VT, VW                      vector type and lanes
 *   V_LOAD/V_LOADU/V_STORE/V_STOREU, V_MUL, V_FMA, V_SET1
 *   V_LOAD_PH(p)                VW F16 values -> one vector
 *   V_PH_LOAD_M(p), V_PH_STORE_M(p, v)   the same conversions with the F16
 *                               side in memory, as the memory-operand
 *                               instruction forms (inline asm, so the
 *                               compiler keeps them: see accum_part)
 *   V_BCAST_M(p)                the float at p in every lane, as a load
 *   V_ROUND16(v)                v rounded to F16 and back, in registers
 *   V_TO8(v)                    fold to 8 lanes (lane i + 8 onto lane i)
 *   V_MAX(a, b)                 a > b ? a : b per lane (MAXPS)
 *   ATTN_SCORES16(qh, kf, hd, scale, out)   (optional) the scores of 16
 *                               keys, the same bits as two hsum8x8 of them
 * and the functions v_load_ninf (VW scores, -inf from lane n on),
 * v_scan_max (prefix of V_MAX(right, left) over the lanes, -inf fill),
 * v_shift1 (lanes up by one, lane 0 given), v_exp_arg (s - m, negated
 * where s > m; returns those lanes as bits), v_exp (exp8 per lane),
 * v_exp_neg (the same for arguments <= 0: the long kernel's weights) and
 * v_last (the last lane).
 *   ATTN_GROUP, ATTN_MULTI, ATTN_PART, ATTN_SINGLE, and
 *   ATTN_GROUP_LONG, ATTN_MULTI_LONG, ATTN_PART_LONG   names of the
 *                               functions made here
 *   ATTN_NARROW_LONG, ATTN_NARROW_LONG_PART   the long prefixes' narrow
 *                               head sizes
 *   V_ADD, V_SUB                lane-wise float add, subtract
 *   LPV_NQ, LPV_W, LPV_CASES    the long kernel's accumulator tile
 *                               (queries x vectors) and LPV_CASE(1) ..
 *                               LPV_CASE(LPV_NQ)
 *   ATTN_NARROW(q, n_pos, nq, k, v, stride, hd, scale, out)
 *   ATTN_NARROW_PART(q, n_pos, nq, k, v, stride, hd, scale, out, ms)
 *                               what handles head sizes not a multiple of VW
 * (RND may be used in the V_ macros.) */

#include "tensor/arch/exp_avx2.h"

#include <immintrin.h>
#include <math.h>

#define RND (_MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
#define CHUNK PW_ATTN_CHUNK

static inline float hsum256(__m256 v) {
  __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
  lo = _mm_add_ps(lo, hi);
  lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
  lo = _mm_add_ss(lo, _mm_shuffle_ps(lo, lo, 1));
  return _mm_cvtss_f32(lo);
}

/* q.k for one key row of f32 values (hd a multiple of VW), folded to 8
 * lanes */
static inline __attribute__((always_inline)) VT dot_part(const float *qh, const float *kr, int hd) {
  VT s = V_MUL(V_LOAD(qh), V_LOAD(kr));
  #pragma GCC unroll 16
  for (int i = VW; i < hd; i += VW) s = V_FMA(V_LOAD(qh + i), V_LOAD(kr + i), s);
  return s;
}
static inline __attribute__((always_inline)) __m256 dot_row(const float *qh, const float *kr, int hd) { return V_TO8(dot_part(qh, kr, hd)); }

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
static inline __attribute__((always_inline)) void rows_to_f32(const uint16_t *src, size_t stride, int np, int hd,
                                                              float *dst, const uint16_t *pf, int npf) {
  for (int p = 0; p < np; p++) {
    if (p < npf)
      for (int i = 0; i < hd; i += 32) _mm_prefetch((const char *)(pf + p * stride + i), _MM_HINT_T0);
    #pragma GCC unroll 16
    for (int i = 0; i < hd; i += VW) V_STORE(dst + (size_t)p * hd + i, V_LOAD_PH(src + p * stride + i));
  }
  for (int p = np; p < npf; p++)
    for (int i = 0; i < hd; i += 32) _mm_prefetch((const char *)(pf + p * stride + i), _MM_HINT_T0);
}

/* Step 2 of a chunk for one query (below, and the quantized caches'
 * kernel): s[0, nh) scores in, weights out; *m the running max before the
 * chunk, then after it; returns the keys where the max grew (bit p). The
 * running max before each key is a prefix max within the vector (the
 * reference's "s > M ? s : M", which is associative) on top of the max so
 * far. That fixes each key's exp argument (M_old - M where the max grew,
 * else s - M), then the weights with the vector exp. s is VW-aligned with
 * room for whole vectors. */
static inline __attribute__((always_inline)) uint64_t chunk_weights(float *s, int nh, float *m) {
  float mx = *m;
  uint64_t gm = 0;
  for (int p = 0; p < nh; p += VW) {
    const VT x = v_load_ninf(s + p, nh - p);
    const VT inc = V_MAX(v_scan_max(x), V_SET1(mx));
    VT e;
    gm |= (uint64_t)v_exp_arg(x, v_shift1(inc, mx), &e) << p;
    V_STORE(s + p, v_exp(e));
    mx = v_last(inc);
  }
  *m = mx;
  return gm;
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

/* Step 3 below for NQ <= 8 queries (a constant) and W <= 4 vectors of
 * the head from element j0, key by key. Each element is updated exactly as
 * in the reference: rescaled when the max grew, then plus V times the
 * weight, rounded to F16 after each. The accumulators live in memory as
 * F16 (acc) and each update is a convert-from-memory, a multiply-add and a
 * convert-to-memory: the memory forms of the two conversions leave out a
 * shuffle micro-op each of the register forms, and these conversions are
 * most of the kernel's work (about a sixth less time per update measured).
 * Each update waits on the one before it of the same accumulator (a
 * conversion, a multiply-add and a store to load, some 25 cycles), so the
 * NQ x W independent ones of a key must fill that time: eight queries at a
 * time were 8% faster than four, sixteen no faster than eight.
 * Keys where no query's max grows and every query sees the key (the usual
 * case) take a loop with no per-query tests; the others take the
 * reference's per-query path. With S (the first block of the head), the
 * running sums too, key by key as the reference (S * w + 1 where the max
 * grew, else S + w): scalar chains that hide under the vector work. */
static inline __attribute__((always_inline)) void accum_part(uint16_t (*acc)[MQ_MAX_HD], float (*ex)[CHUNK],
                                                             const uint64_t *grow, const int *lim, const float *kf,
                                                             int hd, int np, int j0, const int W, float *S, const int NQ) {
  float s4[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  uint64_t special = 0;
  int minlim = np;
#pragma GCC unroll 8
  for (int h = 0; h < NQ; h++) {
    if (S) s4[h] = S[h];
    special |= grow[h];
    if (lim[h] < minlim) minlim = lim[h];
  }
  if (minlim < 64) special |= ~(uint64_t)0 << minlim;
  for (int p = 0; p < np; p++) {
    const float *vr = kf + (size_t)p * hd + j0;
    VT vv[4];
#pragma GCC unroll 4
    for (int u = 0; u < W; u++) vv[u] = V_LOAD(vr + u * VW);
    if (__builtin_expect(!(special >> p & 1), 1)) {
#pragma GCC unroll 8
      for (int h = 0; h < NQ; h++) {
        const VT vs = V_BCAST_M(&ex[h][p]);
        if (S) s4[h] += ex[h][p];
#pragma GCC unroll 4
        for (int u = 0; u < W; u++) {
          uint16_t *a = acc[h] + j0 + u * VW;
          V_PH_STORE_M(a, V_FMA(vv[u], vs, V_PH_LOAD_M(a)));
        }
      }
      continue;
    }
#pragma GCC unroll 8
    for (int h = 0; h < NQ; h++) {
      if (p >= lim[h]) continue;
      const float w = ex[h][p];
      VT vs = V_SET1(w);
      if (grow[h] >> p & 1) {
#pragma GCC unroll 4
        for (int u = 0; u < W; u++) {
          uint16_t *a = acc[h] + j0 + u * VW;
          V_PH_STORE_M(a, V_MUL(V_PH_LOAD_M(a), vs));
        }
        vs = V_SET1(1.0f);
        if (S) s4[h] = s4[h] * w + 1.0f;
      } else if (S) {
        s4[h] = s4[h] + w;
      }
#pragma GCC unroll 4
      for (int u = 0; u < W; u++) {
        uint16_t *a = acc[h] + j0 + u * VW;
        V_PH_STORE_M(a, V_FMA(vv[u], vs, V_PH_LOAD_M(a)));
      }
    }
  }
  if (S)
    for (int h = 0; h < NQ; h++) S[h] = s4[h];
}

/* accum_part over the whole head for NQ queries: the first block carries
 * the running sums */
static inline __attribute__((always_inline)) void accum_head(uint16_t (*acc)[MQ_MAX_HD], float (*ex)[CHUNK],
                                                             const uint64_t *grow, const int *lim, const float *kf,
                                                             int hd, int np, float *S, const int NQ) {
  int j;
  if (hd >= 4 * VW) {
    accum_part(acc, ex, grow, lim, kf, hd, np, 0, 4, S, NQ);
    j = 4 * VW;
  } else if (hd >= 2 * VW) {
    accum_part(acc, ex, grow, lim, kf, hd, np, 0, 2, S, NQ);
    j = 2 * VW;
  } else {
    accum_part(acc, ex, grow, lim, kf, hd, np, 0, 1, S, NQ);
    j = VW;
  }
  for (; j + 4 * VW <= hd; j += 4 * VW) accum_part(acc, ex, grow, lim, kf, hd, np, j, 4, NULL, NQ);
  if (j + 2 * VW <= hd) {
    accum_part(acc, ex, grow, lim, kf, hd, np, j, 2, NULL, NQ);
    j += 2 * VW;
  }
  if (j < hd) accum_part(acc, ex, grow, lim, kf, hd, np, j, 1, NULL, NQ);
}

/* ms NULL: out[h] is the normalised output; else out[h] is the
 * unnormalised accumulator and ms[2h], ms[2h + 1] the running max and sum
 * (pw_attn_part_fn) */
static inline __attribute__((always_inline)) void group_body(const float *const *q, const int *n_pos, int nq,
                                                             const uint16_t *k, const uint16_t *v, size_t stride,
                                                             const int hd, float scale, float *const *out, float *ms) {
  float qh[MQ][MQ_MAX_HD] __attribute__((aligned(64)));
  /* the F16 accumulators (accum_part) */
  uint16_t acc[MQP][MQ_MAX_HD] __attribute__((aligned(64)));
  float kf[CHUNK * MQ_MAX_HD] __attribute__((aligned(64)));
  /* per chunk, query-major: scores, then the weights; the growth masks
   * (bit p: the max grew at key p) */
  float sc[MQP][CHUNK] __attribute__((aligned(64)));
  uint64_t grow[MQP] = {0};
  float S[MQP] = {0}, M[MQP];
  int lim[MQP] = {0}; /* keys of the current chunk query h sees (0 past nq) */
  int n_max = 0;
  for (int h = 0; h < nq; h++) {
    for (int i = 0; i < hd; i += VW) {
      V_STORE(qh[h] + i, V_ROUND16(V_LOADU(q[h] + i))); /* q rounded to F16 */
      V_PH_STORE_M(acc[h] + i, V_SET1(0.0f));
    }
    S[h] = 0;
    M[h] = -INFINITY;
    if (n_pos[h] > n_max) n_max = n_pos[h];
  }
  const __m256 vscale = _mm256_set1_ps(scale);
  for (int p0 = 0; p0 < n_max; p0 += CHUNK) {
    const int np = n_max - p0 < CHUNK ? n_max - p0 : CHUNK;
    /* K of this chunk (V of it on the way) */
    rows_to_f32(k + (size_t)p0 * stride, stride, np, hd, kf, v + (size_t)p0 * stride, np);
    for (int h = 0; h < nq; h++) {
      const int nh = n_pos[h] - p0 < np ? n_pos[h] - p0 : np;
      lim[h] = nh > 0 ? nh : 0;
      /* 1. scores */
      int p = 0;
#ifdef ATTN_SCORES16
      for (; p + 16 <= nh; p += 16) ATTN_SCORES16(qh[h], kf + (size_t)p * hd, hd, scale, sc[h] + p);
#endif
      for (; p + 8 <= nh; p += 8) {
        __m256 d[8];
#pragma GCC unroll 8
        for (int j = 0; j < 8; j++) d[j] = dot_row(qh[h], kf + (size_t)(p + j) * hd, hd);
        _mm256_store_ps(sc[h] + p, _mm256_mul_ps(hsum8x8(d), vscale));
      }
      for (; p < nh; p++) sc[h][p] = hsum256(dot_row(qh[h], kf + (size_t)p * hd, hd)) * scale;
      /* 2. the weights, VW keys at a time */
      grow[h] = chunk_weights(sc[h], nh, &M[h]);
    }
    /* 3. the F16 accumulators (and the running sums), key by key (kf now
     * holds V) */
    /* V of this chunk (K of the next one on the way) */
    const int np_next = n_max - p0 - np < CHUNK ? n_max - p0 - np : CHUNK;
    rows_to_f32(v + (size_t)p0 * stride, stride, np, hd, kf, k + (size_t)(p0 + np) * stride, np_next);
    for (int h = 0; h < nq; h += 8) {
      switch (nq - h < 8 ? nq - h : 8) {
      case 8: accum_head(acc + h, sc + h, grow + h, lim + h, kf, hd, np, S + h, 8); break;
      case 7: accum_head(acc + h, sc + h, grow + h, lim + h, kf, hd, np, S + h, 7); break;
      case 6: accum_head(acc + h, sc + h, grow + h, lim + h, kf, hd, np, S + h, 6); break;
      case 5: accum_head(acc + h, sc + h, grow + h, lim + h, kf, hd, np, S + h, 5); break;
      case 4: accum_head(acc + h, sc + h, grow + h, lim + h, kf, hd, np, S + h, 4); break;
      case 3: accum_head(acc + h, sc + h, grow + h, lim + h, kf, hd, np, S + h, 3); break;
      case 2: accum_head(acc + h, sc + h, grow + h, lim + h, kf, hd, np, S + h, 2); break;
      default: accum_head(acc + h, sc + h, grow + h, lim + h, kf, hd, np, S + h, 1); break;
      }
    }
  }
  if (ms) {
    for (int h = 0; h < nq; h++) {
      for (int j = 0; j < hd; j += VW) V_STOREU(out[h] + j, V_LOAD_PH(acc[h] + j));
      ms[2 * h] = M[h];
      ms[2 * h + 1] = S[h];
    }
    return;
  }
  for (int h = 0; h < nq; h++) {
    const VT inv = V_SET1(1.0f / S[h]);
    for (int j = 0; j < hd; j += VW) V_STOREU(out[h] + j, V_MUL(V_LOAD_PH(acc[h] + j), inv));
  }
}


/* ---- long prefixes: the f32 accumulator (attn.h, PW_ATTN_LONG) ---------
 * Per chunk of keys, three steps as above, but:
 *   2. per query, the chunk's max, the weights with the vector exp and
 *      their sum (chunk_softmax);
 *   3. the f32 accumulators of a tile of queries in registers while the
 *      chunk's V rows pass (pv_tile), one FMA per element and key.
 * It differs from the scalar reference (pw_attn_ref_long) only by the
 * summation order of the dot products and the chunk sums and by the
 * vector exp. */

/* Step 2 for one query: s[0, nh) the scores in, the weights out (zero from
 * nh to the next multiple of VW); *m the running max, *sum the running
 * sum, both updated. Returns the factor the accumulator takes before the
 * chunk's keys are added: exp(M_old - M_new) when the chunk raised the max,
 * else exactly 1. The chunk's sum is the lane-wise sum of its weight
 * vectors in key order, folded to 8 lanes and added as hsum256: a fixed
 * order, the same bits whatever else shares the call. */
static inline __attribute__((always_inline)) float chunk_softmax(float *s, int nh, float *m, float *sum) {
  VT mx = V_SET1(-INFINITY);
  for (int p = 0; p < nh; p += VW) mx = V_MAX(mx, v_load_ninf(s + p, nh - p));
  const float cm = v_last(v_scan_max(mx)), mo = *m, mn = cm > mo ? cm : mo;
  const float f = mn > mo ? expf(mo - mn) : 1.0f;
  const VT vm = V_SET1(mn);
  VT tot = V_SET1(0.0f);
  for (int p = 0; p < nh; p += VW) {
    const VT w = v_exp_neg(V_SUB(v_load_ninf(s + p, nh - p), vm));
    V_STORE(s + p, w);
    tot = V_ADD(tot, w);
  }
  *sum = *sum * f + hsum256(V_TO8(tot));
  *m = mn;
  return f;
}

/* Step 3 for NQ <= LPV_NQ queries (a constant) and W <= LPV_W vectors of
 * the head from element j0: keys [p_lo, p_hi) of the chunk (vf: its V rows
 * as f32, hd apart; or, vh not NULL, the F16 rows themselves, pstride
 * apart, converted here) each add V times the query's weight w[h][p], one FMA
 * per element, key by key: per element the reference's order, so a query's
 * result does not depend on the tile it shares. Meanwhile rows [0, npf)
 * of pk and pv (pstride apart: the next chunk's K and V) are prefetched,
 * one row of each per key. */
static inline __attribute__((always_inline)) void pv_tile(float *const *acc, const float *const *w, const float *vf,
                                                          const uint16_t *vh, int hd, int j0, int p_lo, int p_hi,
                                                          const int W, const int NQ, const uint16_t *pk,
                                                          const uint16_t *pv, size_t pstride, int npf) {
  VT a[LPV_NQ][LPV_W];
#pragma GCC unroll 8
  for (int h = 0; h < NQ; h++)
#pragma GCC unroll 8
    for (int u = 0; u < W; u++) a[h][u] = V_LOAD(acc[h] + j0 + u * VW);
  for (int p = p_lo; p < p_hi; p++) {
    if (p < npf)
      for (int i = 0; i < hd; i += 32) {
        _mm_prefetch((const char *)(pk + (size_t)p * pstride + i), _MM_HINT_T0);
        _mm_prefetch((const char *)(pv + (size_t)p * pstride + i), _MM_HINT_T0);
      }
    VT vv[LPV_W];
    if (vh) {
      const uint16_t *vr = vh + (size_t)p * pstride + j0;
#pragma GCC unroll 8
      for (int u = 0; u < W; u++) vv[u] = V_LOAD_PH(vr + u * VW);
    } else {
      const float *vr = vf + (size_t)p * hd + j0;
#pragma GCC unroll 8
      for (int u = 0; u < W; u++) vv[u] = V_LOAD(vr + u * VW);
    }
#pragma GCC unroll 8
    for (int h = 0; h < NQ; h++) {
      const VT ws = V_SET1(w[h][p]);
#pragma GCC unroll 8
      for (int u = 0; u < W; u++) a[h][u] = V_FMA(vv[u], ws, a[h][u]);
    }
  }
#pragma GCC unroll 8
  for (int h = 0; h < NQ; h++)
#pragma GCC unroll 8
    for (int u = 0; u < W; u++) V_STORE(acc[h] + j0 + u * VW, a[h][u]);
}

/* pv_tile for NQ queries over the whole head, in slices of up to LPV_W
 * vectors; LPV_CASES lists LPV_CASE(1) .. LPV_CASE(LPV_NQ) */
#define LPV_CASE(NQ)                                                                                           \
  case NQ:                                                                                                     \
    for (int j0 = 0; j0 < hd;) {                                                                               \
      const int left = (hd - j0) / VW;                                                                         \
      if (left >= LPV_W) {                                                                                     \
        pv_tile(acc, w, vf, vh, hd, j0, p_lo, p_hi, LPV_W, NQ, pk, pv, pstride, npf);                          \
        j0 += LPV_W * VW;                                                                                      \
      } else if (left >= 2) {                                                                                  \
        pv_tile(acc, w, vf, vh, hd, j0, p_lo, p_hi, 2, NQ, pk, pv, pstride, npf);                              \
        j0 += 2 * VW;                                                                                          \
      } else {                                                                                                 \
        pv_tile(acc, w, vf, vh, hd, j0, p_lo, p_hi, 1, NQ, pk, pv, pstride, npf);                              \
        j0 += VW;                                                                                              \
      }                                                                                                        \
      npf = 0; /* the next chunk's rows: in the first slice only */                                            \
    }                                                                                                          \
    break;
static inline __attribute__((always_inline)) void pv_head(float *const *acc, const float *const *w, const float *vf,
                                                          const uint16_t *vh, int hd, int p_lo, int p_hi, int nq,
                                                          const uint16_t *pk, const uint16_t *pv, size_t pstride,
                                                          int npf) {
  switch (nq) {
    LPV_CASES
  default: break;
  }
}

/* group_body for long prefixes */
static inline __attribute__((always_inline)) void group_body_long(const float *const *q, const int *n_pos, int nq,
                                                                  const uint16_t *k, const uint16_t *v, size_t stride,
                                                                  const int hd, float scale, float *const *out,
                                                                  float *ms, const int VH) {
  float qh[MQ][MQ_MAX_HD] __attribute__((aligned(64)));
  float acc[MQ][MQ_MAX_HD] __attribute__((aligned(64)));
  float kf[CHUNK * MQ_MAX_HD] __attribute__((aligned(64)));
  /* per chunk, query-major: scores, then the weights */
  float sc[MQP][CHUNK] __attribute__((aligned(64)));
  float S[MQP] = {0}, M[MQP];
  int lim[MQP] = {0}; /* keys of the current chunk query h sees */
  int n_max = 0;
  for (int h = 0; h < nq; h++) {
    for (int i = 0; i < hd; i += VW) {
      V_STORE(qh[h] + i, V_LOADU(q[h] + i));
      V_STORE(acc[h] + i, V_SET1(0.0f));
    }
    S[h] = 0;
    M[h] = -INFINITY;
    if (n_pos[h] > n_max) n_max = n_pos[h];
  }
  const __m256 vscale = _mm256_set1_ps(scale);
  for (int p0 = 0; p0 < n_max; p0 += CHUNK) {
    const int np = n_max - p0 < CHUNK ? n_max - p0 : CHUNK;
    /* K of this chunk (V of it on the way in the first chunk; the
     * others' K and V came with the previous chunk's step 3) */
    rows_to_f32(k + (size_t)p0 * stride, stride, np, hd, kf, v + (size_t)p0 * stride, p0 ? 0 : np);
    float fac[MQ];
    for (int h = 0; h < nq; h++) {
      const int nh = n_pos[h] - p0 < np ? n_pos[h] - p0 : np;
      lim[h] = nh > 0 ? nh : 0;
      fac[h] = 1.0f;
      if (nh <= 0) continue;
      /* 1. scores */
      int p = 0;
#ifdef ATTN_SCORES16
      for (; p + 16 <= nh; p += 16) ATTN_SCORES16(qh[h], kf + (size_t)p * hd, hd, scale, sc[h] + p);
#endif
      for (; p + 8 <= nh; p += 8) {
        __m256 d[8];
#pragma GCC unroll 8
        for (int j = 0; j < 8; j++) d[j] = dot_row(qh[h], kf + (size_t)(p + j) * hd, hd);
        _mm256_store_ps(sc[h] + p, _mm256_mul_ps(hsum8x8(d), vscale));
      }
      for (; p < nh; p++) sc[h][p] = hsum256(dot_row(qh[h], kf + (size_t)p * hd, hd)) * scale;
    }
    /* 2. the chunk's max, weights and sum: a loop of its own, so that the
     * queries' chains (max, then exp, then sum) overlap (a 64-token chunk
     * at 16K depth 5% faster than with each query's scores) */
    for (int h = 0; h < nq; h++)
      if (lim[h] > 0) fac[h] = chunk_softmax(sc[h], lim[h], &M[h], &S[h]);
    /* V of this chunk; the next chunk's K and V are asked for row by row
     * in step 3 (pv_tile), spread over its keys: asked for here in one
     * burst, the prefetches waited on memory with the rest of the core
     * (decode at 16K depth, tg64 in four paired rounds: 45.2 45.5 47.8
     * 50.7 -> 52.5 55.7 51.5 52.2 t/s) */
    const int np_next = n_max - p0 - np < CHUNK ? n_max - p0 - np : CHUNK;
    /* one tile of queries (a decode step's GQA group) reads each V row
     * once: step 3 converts it where it is, with no pass of its own */
    const uint16_t *vh = VH ? v + (size_t)p0 * stride : NULL;
    if (!vh) rows_to_f32(v + (size_t)p0 * stride, stride, np, hd, kf, k, 0);
    const uint16_t *pk = k + (size_t)(p0 + np) * stride, *pv = v + (size_t)(p0 + np) * stride;
    int npf = np_next;
    /* 3. the accumulators: rescaled where the max grew, then the keys all
     * the tile's queries see, then each query's own last keys */
    for (int h = 0; h < nq; h++)
      if (lim[h] > 0 && fac[h] != 1.0f) {
        const VT f = V_SET1(fac[h]);
        for (int i = 0; i < hd; i += VW) V_STORE(acc[h] + i, V_MUL(V_LOAD(acc[h] + i), f));
      }
    for (int h0 = 0; h0 < nq; h0 += LPV_NQ) {
      const int t = nq - h0 < LPV_NQ ? nq - h0 : LPV_NQ;
      int minlim = np;
      float *ap[LPV_NQ];
      const float *wp[LPV_NQ];
      for (int i = 0; i < t; i++) {
        ap[i] = acc[h0 + i];
        wp[i] = sc[h0 + i];
        if (lim[h0 + i] < minlim) minlim = lim[h0 + i];
      }
      if (minlim > 0) {
        pv_head(ap, wp, kf, vh, hd, 0, minlim, t, pk, pv, stride, npf);
        npf = 0;
      }
      for (int i = 0; i < t; i++)
        if (lim[h0 + i] > minlim) pv_head(&ap[i], &wp[i], kf, vh, hd, minlim, lim[h0 + i], 1, pk, pv, stride, 0);
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

/* The common head sizes with the size a constant: the dot products and
 * row loops unroll and q stays in registers (a third less time per step
 * at head size 64 than the same code with hd a variable). The unrolling
 * is asked for (the pragmas in dot_part, rows_to_f32 and the scores'
 * loop): -O2 left the AVX2 dot product a loop of one multiply-add and its
 * loop control; unrolled, a 4K decode step at head size 64 takes 7.1M
 * instructions instead of 12.1M, and about a quarter less time, with the
 * same bits. */
static void ATTN_GROUP(const float *const *q, const int *n_pos, int nq, const uint16_t *k, const uint16_t *v,
                       size_t stride, int hd, float scale, float *const *out, float *ms) {
  if (hd == 64) group_body(q, n_pos, nq, k, v, stride, 64, scale, out, ms);
  else if (hd == 128) group_body(q, n_pos, nq, k, v, stride, 128, scale, out, ms);
  else group_body(q, n_pos, nq, k, v, stride, hd, scale, out, ms);
}

static inline __attribute__((always_inline)) void group_long_hd(const float *const *q, const int *n_pos, int nq,
                                                                const uint16_t *k, const uint16_t *v, size_t stride,
                                                                int hd, float scale, float *const *out, float *ms,
                                                                const int VH) {
  if (hd == 64) group_body_long(q, n_pos, nq, k, v, stride, 64, scale, out, ms, VH);
  else if (hd == 128) group_body_long(q, n_pos, nq, k, v, stride, 128, scale, out, ms, VH);
  else group_body_long(q, n_pos, nq, k, v, stride, hd, scale, out, ms, VH);
}

static void ATTN_GROUP_LONG(const float *const *q, const int *n_pos, int nq, const uint16_t *k, const uint16_t *v,
                            size_t stride, int hd, float scale, float *const *out, float *ms) {
  /* one tile of queries (VH: V converted in step 3) or more */
  if (nq <= LPV_NQ) group_long_hd(q, n_pos, nq, k, v, stride, hd, scale, out, ms, 1);
  else group_long_hd(q, n_pos, nq, k, v, stride, hd, scale, out, ms, 0);
}

void ATTN_MULTI_LONG(const float *const *q, const int *n_pos, int nq, const uint16_t *k, const uint16_t *v,
                     size_t stride, int hd, float scale, float *const *out) {
  if (hd % VW || hd > MQ_MAX_HD) {
    ATTN_NARROW_LONG(q, n_pos, nq, k, v, stride, hd, scale, out);
    return;
  }
  for (int h0 = 0; h0 < nq; h0 += MQ) {
    const int g = nq - h0 < MQ ? nq - h0 : MQ;
    ATTN_GROUP_LONG(q + h0, n_pos + h0, g, k, v, stride, hd, scale, out + h0, NULL);
  }
}

void ATTN_PART_LONG(const float *const *q, const int *n_pos, int nq, const uint16_t *k, const uint16_t *v,
                    size_t stride, int hd, float scale, float *const *out, float *ms) {
  if (hd % VW || hd > MQ_MAX_HD) {
    ATTN_NARROW_LONG_PART(q, n_pos, nq, k, v, stride, hd, scale, out, ms);
    return;
  }
  for (int h0 = 0; h0 < nq; h0 += MQ) {
    const int g = nq - h0 < MQ ? nq - h0 : MQ;
    ATTN_GROUP_LONG(q + h0, n_pos + h0, g, k, v, stride, hd, scale, out + h0, ms + 2 * h0);
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
