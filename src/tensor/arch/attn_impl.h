/* attn_impl.h - the body of the F16 flash-attention kernels (attn.h), one
 * copy per vector width: arch/attn_avx2.c includes it with 8-lane AVX2
 * macros, arch/attn_avx512.c with 16-lane AVX-512 ones. Not a header to
 * include anywhere else. The includer defines:
 *   VT, VW                      vector type and lanes
 *   V_LOAD/V_LOADU/V_STORE/V_STOREU, V_MUL, V_FMA, V_SET1
 *   V_LOAD_PH(p), V_STORE_PH(p, v)   VW F16 values <-> one vector
 *   V_TO8(v)                    fold to 8 lanes (lane i + 8 onto lane i)
 *   ATTN_GROUP, ATTN_MULTI, ATTN_SINGLE   names of the functions made here
 *   ATTN_NARROW(q, nq, k, v, stride, n_pos, hd, scale, out)
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

/* rows [0, np) of an F16 matrix (stride elements apart) as packed f32 */
static void rows_to_f32(const uint16_t *src, size_t stride, int np, int hd, float *dst) {
  for (int p = 0; p < np; p++)
    for (int i = 0; i < hd; i += VW) V_STORE(dst + (size_t)p * hd + i, V_LOAD_PH(src + p * stride + i));
}

/* Up to MQ queries sharing one K/V (a GQA group) in one pass over the
 * cache: each chunk of K and V is converted to f32 once for all of them,
 * and the key-by-key F16 accumulator updates of different queries are
 * independent, so they overlap instead of waiting on each other. Each
 * query's arithmetic is exactly the single-query algorithm's. */
#define MQ 8
#define MQ_MAX_HD 256

static void ATTN_GROUP(const float *q, int nq, const uint16_t *k, const uint16_t *v, size_t stride, int n_pos,
                       int hd, float scale, float *out) {
  float qh[MQ][MQ_MAX_HD] __attribute__((aligned(64)));
  uint16_t acc[MQ][MQ_MAX_HD] __attribute__((aligned(64)));
  float kf[CHUNK * MQ_MAX_HD] __attribute__((aligned(64)));
  float sc[MQ][CHUNK] __attribute__((aligned(32)));
  float ex[MQ][CHUNK] __attribute__((aligned(32)));
  unsigned char grow[MQ][CHUNK];
  float S[MQ], M[MQ];
  for (int h = 0; h < nq; h++) {
    for (int i = 0; i < hd; i += VW) {
      V_STORE_PH(acc[h] + i, V_LOADU(q + (size_t)h * hd + i)); /* q rounded to F16 ... */
      V_STORE(qh[h] + i, V_LOAD_PH(acc[h] + i));               /* ... and back */
      V_STORE_PH(acc[h] + i, V_SET1(0.0f));
    }
    S[h] = 0;
    M[h] = -INFINITY;
  }
  const __m256 vscale = _mm256_set1_ps(scale);
  for (int p0 = 0; p0 < n_pos; p0 += CHUNK) {
    const int np = n_pos - p0 < CHUNK ? n_pos - p0 : CHUNK;
    /* 1. scores */
    rows_to_f32(k + (size_t)p0 * stride, stride, np, hd, kf);
    for (int h = 0; h < nq; h++) {
      int p = 0;
      for (; p + 8 <= np; p += 8) {
        __m256 d[8];
        for (int j = 0; j < 8; j++) d[j] = dot_row(qh[h], kf + (size_t)(p + j) * hd, hd);
        _mm256_store_ps(sc[h] + p, _mm256_mul_ps(hsum8x8(d), vscale));
      }
      for (; p < np; p++) sc[h][p] = hsum256(dot_row(qh[h], kf + (size_t)p * hd, hd)) * scale;
      /* 2. running max -> exp arguments, then the exps */
      float m = M[h];
      for (p = 0; p < np; p++) {
        const float s = sc[h][p];
        if (s > m) {
          ex[h][p] = m - s; /* exp(M_old - M); -inf on the first key gives 0 */
          grow[h][p] = 1;
          m = s;
        } else {
          ex[h][p] = s - m;
          grow[h][p] = 0;
        }
      }
      M[h] = m;
      for (p = 0; p + 8 <= np; p += 8) _mm256_store_ps(ex[h] + p, exp8(_mm256_load_ps(ex[h] + p)));
      if (p < np) {
        float tail[8] __attribute__((aligned(32))) = {0};
        for (int j = 0; p + j < np; j++) tail[j] = ex[h][p + j];
        _mm256_store_ps(tail, exp8(_mm256_load_ps(tail)));
        for (int j = 0; p + j < np; j++) ex[h][p + j] = tail[j];
      }
    }
    /* 3. the F16 accumulators, key by key (kf now holds V) */
    rows_to_f32(v + (size_t)p0 * stride, stride, np, hd, kf);
    for (int p = 0; p < np; p++) {
      const float *vr = kf + (size_t)p * hd;
      for (int h = 0; h < nq; h++) {
        float ms = 1.0f, vs = ex[h][p];
        uint16_t *a16 = acc[h];
        if (grow[h][p]) {
          ms = ex[h][p];
          vs = 1.0f;
          const VT vms = V_SET1(ms);
          for (int j = 0; j < hd; j += VW) V_STORE_PH(a16 + j, V_MUL(V_LOAD_PH(a16 + j), vms));
        }
        const VT vvs = V_SET1(vs);
        for (int j = 0; j < hd; j += VW) V_STORE_PH(a16 + j, V_FMA(V_LOAD(vr + j), vvs, V_LOAD_PH(a16 + j)));
        S[h] = S[h] * ms + vs;
      }
    }
  }
  for (int h = 0; h < nq; h++) {
    const VT inv = V_SET1(1.0f / S[h]);
    for (int j = 0; j < hd; j += VW) V_STOREU(out + (size_t)h * hd + j, V_MUL(V_LOAD_PH(acc[h] + j), inv));
  }
}


void ATTN_MULTI(const float *q, int nq, const uint16_t *k, const uint16_t *v, size_t stride, int n_pos, int hd,
                float scale, float *out) {
  if (hd % VW || hd > MQ_MAX_HD) {
    ATTN_NARROW(q, nq, k, v, stride, n_pos, hd, scale, out);
    return;
  }
  for (int h0 = 0; h0 < nq; h0 += MQ) {
    const int g = nq - h0 < MQ ? nq - h0 : MQ;
    ATTN_GROUP(q + (size_t)h0 * hd, g, k, v, stride, n_pos, hd, scale, out + (size_t)h0 * hd);
  }
}

void ATTN_SINGLE(const float *q, const uint16_t *k, const uint16_t *v, size_t stride, int n_pos, int hd, float scale,
                 float *out) {
  ATTN_MULTI(q, 1, k, v, stride, n_pos, hd, scale, out);
}
