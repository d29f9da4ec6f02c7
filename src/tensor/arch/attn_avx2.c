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
 * products and by the vector exp (a few ulp from expf). Several queries
 * over the same K/V (a GQA group) go through together (attn_avx2_multi). */
#include "tensor/attn.h"

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

/* q.k for one key row of f32 values (hd a multiple of 8), as one vector */
static inline __m256 dot_row(const float *qh, const float *kr, int hd) {
  __m256 s = _mm256_mul_ps(_mm256_load_ps(qh), _mm256_load_ps(kr));
  for (int i = 8; i < hd; i += 8) s = _mm256_fmadd_ps(_mm256_load_ps(qh + i), _mm256_load_ps(kr + i), s);
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

/* rows [0, np) of an F16 matrix (stride elements apart) as packed f32 */
static void rows_to_f32(const uint16_t *src, size_t stride, int np, int hd, float *dst) {
  for (int p = 0; p < np; p++)
    for (int i = 0; i < hd; i += 8)
      _mm256_store_ps(dst + (size_t)p * hd + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + p * stride + i))));
}

/* Up to MQ queries sharing one K/V (a GQA group) in one pass over the
 * cache: each chunk of K and V is converted to f32 once for all of them,
 * and the key-by-key F16 accumulator updates of different queries are
 * independent, so they overlap instead of waiting on each other. Each
 * query's arithmetic is exactly the single-query algorithm's. */
#define MQ 8
#define MQ_MAX_HD 256

static void attn_group(const float *q, int nq, const uint16_t *k, const uint16_t *v, size_t stride, int n_pos,
                       int hd, float scale, float *out) {
  float qh[MQ][MQ_MAX_HD] __attribute__((aligned(32)));
  uint16_t acc[MQ][MQ_MAX_HD] __attribute__((aligned(32)));
  float kf[CHUNK * MQ_MAX_HD] __attribute__((aligned(32)));
  float sc[MQ][CHUNK] __attribute__((aligned(32)));
  float ex[MQ][CHUNK] __attribute__((aligned(32)));
  unsigned char grow[MQ][CHUNK];
  float S[MQ], M[MQ];
  for (int h = 0; h < nq; h++) {
    for (int i = 0; i < hd; i += 8) {
      __m128i t = _mm256_cvtps_ph(_mm256_loadu_ps(q + (size_t)h * hd + i), RND);
      _mm256_store_ps(qh[h] + i, _mm256_cvtph_ps(t));
      _mm_store_si128((__m128i *)(acc[h] + i), _mm_setzero_si128());
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
          const __m256 vms = _mm256_set1_ps(ms);
          for (int j = 0; j < hd; j += 8) {
            __m256 a = _mm256_mul_ps(_mm256_cvtph_ps(_mm_load_si128((const __m128i *)(a16 + j))), vms);
            _mm_store_si128((__m128i *)(a16 + j), _mm256_cvtps_ph(a, RND));
          }
        }
        const __m256 vvs = _mm256_set1_ps(vs);
        for (int j = 0; j < hd; j += 8) {
          __m256 a = _mm256_cvtph_ps(_mm_load_si128((const __m128i *)(a16 + j)));
          a = _mm256_fmadd_ps(_mm256_load_ps(vr + j), vvs, a);
          _mm_store_si128((__m128i *)(a16 + j), _mm256_cvtps_ph(a, RND));
        }
        S[h] = S[h] * ms + vs;
      }
    }
  }
  for (int h = 0; h < nq; h++) {
    __m256 inv = _mm256_set1_ps(1.0f / S[h]);
    for (int j = 0; j < hd; j += 8)
      _mm256_storeu_ps(out + (size_t)h * hd + j,
                       _mm256_mul_ps(_mm256_cvtph_ps(_mm_load_si128((const __m128i *)(acc[h] + j))), inv));
  }
}

void attn_avx2_multi(const float *q, int nq, const uint16_t *k, const uint16_t *v, size_t stride, int n_pos, int hd,
                     float scale, float *out) {
  if (hd % 8 || hd > MQ_MAX_HD) {
    for (int h = 0; h < nq; h++) pw_attn_ref(q + (size_t)h * hd, k, v, stride, n_pos, hd, scale, out + (size_t)h * hd);
    return;
  }
  for (int h0 = 0; h0 < nq; h0 += MQ) {
    const int g = nq - h0 < MQ ? nq - h0 : MQ;
    attn_group(q + (size_t)h0 * hd, g, k, v, stride, n_pos, hd, scale, out + (size_t)h0 * hd);
  }
}

void attn_avx2(const float *q, const uint16_t *k, const uint16_t *v, size_t stride, int n_pos, int hd, float scale,
               float *out) {
  attn_avx2_multi(q, 1, k, v, stride, n_pos, hd, scale, out);
}
