/* avx2.c - AVX2/FMA/F16C kernels for the quantized formats: dot products of
 * weight rows with quantized activation rows, activation quantizers, and a
 * few dequantizers. Compiled with -mavx2 -mfma -mf16c; installed by
 * pw_tensor_init only when the CPU has all three.
 *
 * Dot products follow ggml's AVX2 approach (maddubs/madd integer products
 * per block, one float FMA per block or super-block) and process 1..8
 * activation rows per pass over the weights (float rows: 1..4). Every
 * per-row float operation is the same sequence whatever nx is, so out[j]
 * never depends on how rows are grouped (see pw_vec_dot_fn). Integer parts use exact identities where
 * they save work: for Q3_K and Q6_K the constant offsets (4, 32) are taken
 * out through the activation's per-16 sums (bsums).
 *
 * Activation quantizers reproduce the scalar references bit for bit. */
#include "tensor/quants.h"
#include "tensor/dtype.h"
#include "tensor/traits.h"

#include "tensor/arch/avx2_util.h"

#include <immintrin.h>
#include <string.h>

/* sum of x*y over 32 signed bytes, as 8 float lanes; |x|, |y| <= 127 */
AI __m256 dot_i8_signed(__m256i ax, __m256i x, __m256i y) {
  __m256i p = _mm256_maddubs_epi16(ax, _mm256_sign_epi8(y, x));
  return _mm256_cvtepi32_ps(_mm256_madd_epi16(p, _mm256_set1_epi16(1)));
}
/* x unsigned bytes */
AI __m256 dot_u8_i8(__m256i x, __m256i y) {
  __m256i p = _mm256_maddubs_epi16(x, y);
  return _mm256_cvtepi32_ps(_mm256_madd_epi16(p, _mm256_set1_epi16(1)));
}

/* int16 vector: first 8 lanes a, last 8 lanes b */
AI __m256i scale_pair(int a, int b) {
  return _mm256_set_m128i(_mm_set1_epi16((short)b), _mm_set1_epi16((short)a));
}

/* the loops over a pass's activation rows, unrolled (nx is a constant in
 * each NX_DISPATCH case) so the per-row accumulators stay in registers */
#define FOR_NX(j) _Pragma("GCC unroll 8") for (int j = 0; j < nx; j++)

#define XROW(T, x, xs, j) ((const T *)((const char *)(x) + (size_t)(j) * (xs)))

/* Up to MAX rows per pass; more rows are done MAX at a time, which keeps
 * each row's result independent of nx. 8 for the quantized types (some
 * accumulators then live on the stack, touched once per block or
 * super-block): bench_kernels with 8 rows per pass against 4 at a time,
 * Q8_0 +16%, Q4_0/Q5_0 +20%, Q4_K +27%, Q5_K +40%, Q6_K +55%, Q2_K/Q3_K
 * +45%; 4 for the float rows (8: F16 3% slower). */
#define NX_CASE(name, k)                                                                        \
  case k: name##_k(n, w, x, xs, k, out); break;
#define NX_DISPATCH_MAX(name, MAX)                                                              \
  static void name(int64_t n, const void *w, const void *x, size_t xs, int nx, float *out) {    \
    for (; nx > 0; nx -= (MAX), x = (const char *)x + (MAX) * xs, out += (MAX)) {               \
      switch (nx < (MAX) ? nx : (MAX)) {                                                        \
        NX_CASE(name, 1) NX_CASE(name, 2) NX_CASE(name, 3) NX_CASE(name, 4) NX_CASE(name, 5)       \
        NX_CASE(name, 6) NX_CASE(name, 7) NX_CASE(name, 8)                                      \
      default: break;                                                                           \
      }                                                                                         \
    }                                                                                           \
  }
#define NX_DISPATCH(name) NX_DISPATCH_MAX(name, 8)

/* ---- 32-element blocks ---------------------------------------------- */

AI void vd_q8_0_k(int64_t n, const void *vw, const void *x, size_t xs, const int nx, float *out) {
  const block_q8_0 *w = vw;
  __m256 acc[8];
  FOR_NX(j) acc[j] = _mm256_setzero_ps();
  for (int64_t i = 0; i < n / QK8_0; i++) {
    const __m256i qw = loadu256(w[i].qs);
    const __m256i aw = _mm256_sign_epi8(qw, qw);
    const float dw = h2f(w[i].d);
    FOR_NX(j) {
      const block_q8_0 *y = XROW(block_q8_0, x, xs, j) + i;
      __m256 p = dot_i8_signed(aw, qw, loadu256(y->qs));
      acc[j] = _mm256_fmadd_ps(_mm256_set1_ps(dw * h2f(y->d)), p, acc[j]);
    }
  }
  FOR_NX(j) out[j] = hsum8(acc[j]);
}
NX_DISPATCH(vd_q8_0)

AI void vd_q4_0_k(int64_t n, const void *vw, const void *x, size_t xs, const int nx, float *out) {
  const block_q4_0 *w = vw;
  __m256 acc[8];
  FOR_NX(j) acc[j] = _mm256_setzero_ps();
  for (int64_t i = 0; i < n / QK4_0; i++) {
    const __m256i qw = _mm256_sub_epi8(nibbles32(w[i].qs), _mm256_set1_epi8(8));
    const __m256i aw = _mm256_sign_epi8(qw, qw);
    const float dw = h2f(w[i].d);
    FOR_NX(j) {
      const block_q8_0 *y = XROW(block_q8_0, x, xs, j) + i;
      __m256 p = dot_i8_signed(aw, qw, loadu256(y->qs));
      acc[j] = _mm256_fmadd_ps(_mm256_set1_ps(dw * h2f(y->d)), p, acc[j]);
    }
  }
  FOR_NX(j) out[j] = hsum8(acc[j]);
}
NX_DISPATCH(vd_q4_0)

AI void vd_q5_0_k(int64_t n, const void *vw, const void *x, size_t xs, const int nx, float *out) {
  const block_q5_0 *w = vw;
  __m256 acc[8];
  FOR_NX(j) acc[j] = _mm256_setzero_ps();
  for (int64_t i = 0; i < n / QK5_0; i++) {
    /* q-16: nibble where the fifth bit is set, nibble|0xF0 (= nibble-16) where not */
    const __m256i hi = _mm256_andnot_si256(bits32(w[i].qh), _mm256_set1_epi8((char)0xF0));
    const __m256i qw = _mm256_or_si256(nibbles32(w[i].qs), hi);
    const __m256i aw = _mm256_sign_epi8(qw, qw);
    const float dw = h2f(w[i].d);
    FOR_NX(j) {
      const block_q8_0 *y = XROW(block_q8_0, x, xs, j) + i;
      __m256 p = dot_i8_signed(aw, qw, loadu256(y->qs));
      acc[j] = _mm256_fmadd_ps(_mm256_set1_ps(dw * h2f(y->d)), p, acc[j]);
    }
  }
  FOR_NX(j) out[j] = hsum8(acc[j]);
}
NX_DISPATCH(vd_q5_0)

AI void vd_q4_1_k(int64_t n, const void *vw, const void *x, size_t xs, const int nx, float *out) {
  const block_q4_1 *w = vw;
  __m256 acc[8];
  float summs[8];
  FOR_NX(j) {
    acc[j] = _mm256_setzero_ps();
    summs[j] = 0;
  }
  for (int64_t i = 0; i < n / QK4_1; i++) {
    const __m256i qw = nibbles32(w[i].qs);
    const float dw = h2f(w[i].d), mw = h2f(w[i].m);
    FOR_NX(j) {
      const block_q8_1 *y = XROW(block_q8_1, x, xs, j) + i;
      summs[j] += mw * h2f(y->s);
      __m256 p = dot_u8_i8(qw, loadu256(y->qs));
      acc[j] = _mm256_fmadd_ps(_mm256_set1_ps(dw * h2f(y->d)), p, acc[j]);
    }
  }
  FOR_NX(j) out[j] = hsum8(acc[j]) + summs[j];
}
NX_DISPATCH(vd_q4_1)

AI void vd_q5_1_k(int64_t n, const void *vw, const void *x, size_t xs, const int nx, float *out) {
  const block_q5_1 *w = vw;
  __m256 acc[8];
  float summs[8];
  FOR_NX(j) {
    acc[j] = _mm256_setzero_ps();
    summs[j] = 0;
  }
  for (int64_t i = 0; i < n / QK5_1; i++) {
    const __m256i hi = _mm256_and_si256(bits32(w[i].qh), _mm256_set1_epi8(0x10));
    const __m256i qw = _mm256_or_si256(nibbles32(w[i].qs), hi);
    const float dw = h2f(w[i].d), mw = h2f(w[i].m);
    FOR_NX(j) {
      const block_q8_1 *y = XROW(block_q8_1, x, xs, j) + i;
      summs[j] += mw * h2f(y->s);
      __m256 p = dot_u8_i8(qw, loadu256(y->qs));
      acc[j] = _mm256_fmadd_ps(_mm256_set1_ps(dw * h2f(y->d)), p, acc[j]);
    }
  }
  FOR_NX(j) out[j] = hsum8(acc[j]) + summs[j];
}
NX_DISPATCH(vd_q5_1)

/* ---- non-linear 4-bit types ---------------------------------------------
 * The 16-entry value table sits in both 128-bit lanes of a register and a
 * pshufb of the nibbles looks all 32 values up at once; from there the
 * block is a signed int8 block like Q4_0's (|value| <= 127, so the
 * maddubs sign trick cannot saturate). */

AI __m256i table32(const int8_t *t) {
  return _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)t));
}

/* IQ4_NL and MXFP4 against q8_0: one scale per block (fp16 d, or the E8M0
 * half scale) */
AI void vd_nl32_k(int64_t n, const void *vw, const void *x, size_t xs, const int nx, float *out, const int mx) {
  const __m256i tab = table32(mx ? pw_kvalues_mxfp4 : pw_kvalues_iq4nl);
  const size_t bsz = mx ? sizeof(block_mxfp4) : sizeof(block_iq4_nl);
  __m256 acc[8];
  FOR_NX(j) acc[j] = _mm256_setzero_ps();
  for (int64_t i = 0; i < n / 32; i++) {
    const uint8_t *b = (const uint8_t *)vw + (size_t)i * bsz;
    const __m256i qw = _mm256_shuffle_epi8(tab, nibbles32(b + (mx ? 1 : 2)));
    const __m256i aw = _mm256_sign_epi8(qw, qw);
    float dw;
    if (mx) {
      dw = pw_e8m0_half(b[0]);
    } else {
      pw_half h;
      memcpy(&h, b, 2);
      dw = h2f(h);
    }
    FOR_NX(j) {
      const block_q8_0 *y = XROW(block_q8_0, x, xs, j) + i;
      __m256 p = dot_i8_signed(aw, qw, loadu256(y->qs));
      acc[j] = _mm256_fmadd_ps(_mm256_set1_ps(h2f(y->d) * dw), p, acc[j]);
    }
  }
  FOR_NX(j) out[j] = hsum8(acc[j]);
}
AI void vd_iq4_nl_k(int64_t n, const void *w, const void *x, size_t xs, const int nx, float *out) {
  vd_nl32_k(n, w, x, xs, nx, out, 0);
}
AI void vd_mxfp4_k(int64_t n, const void *w, const void *x, size_t xs, const int nx, float *out) {
  vd_nl32_k(n, w, x, xs, nx, out, 1);
}
NX_DISPATCH(vd_iq4_nl)
NX_DISPATCH(vd_mxfp4)

/* IQ4_XS against q8_K: each group's int16 pair sums are scaled by its
 * 6-bit scale (ls - 32) in the madd, so a super-block is one int32 vector
 * per row and one FMA (|sum| < 2^25: exact). */
AI void vd_iq4_xs_k(int64_t n, const void *vw, const void *x, size_t xs, const int nx, float *out) {
  const block_iq4_xs *w = vw;
  const __m256i tab = table32(pw_kvalues_iq4nl);
  __m256 acc[8];
  FOR_NX(j) acc[j] = _mm256_setzero_ps();
  for (int64_t i = 0; i < n / QK_K; i++) {
    const float dw = h2f(w[i].d);
    __m256i sumi[8];
    FOR_NX(j) sumi[j] = _mm256_setzero_si256();
    uint32_t sl;
    memcpy(&sl, w[i].scales_l, 4);
    for (int g = 0; g < QK_K / 32; g++) {
      const int ls = (int)(((sl >> (4 * g)) & 0xF) | (((w[i].scales_h >> (2 * g)) & 3) << 4)) - 32;
      const __m256i qw = _mm256_shuffle_epi8(tab, nibbles32(w[i].qs + 16 * g));
      const __m256i aw = _mm256_sign_epi8(qw, qw);
      const __m256i s = _mm256_set1_epi16((short)ls);
      FOR_NX(j) {
        const block_q8_K *y = XROW(block_q8_K, x, xs, j) + i;
        const __m256i p = _mm256_maddubs_epi16(aw, _mm256_sign_epi8(loadu256(y->qs + 32 * g), qw));
        sumi[j] = _mm256_add_epi32(sumi[j], _mm256_madd_epi16(s, p));
      }
    }
    FOR_NX(j) {
      const block_q8_K *y = XROW(block_q8_K, x, xs, j) + i;
      acc[j] = _mm256_fmadd_ps(_mm256_set1_ps(dw * y->d), _mm256_cvtepi32_ps(sumi[j]), acc[j]);
    }
  }
  FOR_NX(j) out[j] = hsum8(acc[j]);
}
NX_DISPATCH(vd_iq4_xs)

/* ---- K-quants ------------------------------------------------------------ */

AI void vd_q2_k_k(int64_t n, const void *vw, const void *x, size_t xs, const int nx, float *out) {
  const block_q2_K *w = vw;
  const __m256i m3 = _mm256_set1_epi8(3);
  __m256 acc[8];
  FOR_NX(j) acc[j] = _mm256_setzero_ps();
  for (int64_t i = 0; i < n / QK_K; i++) {
    const uint8_t *sc = w[i].scales;
    const float dw = h2f(w[i].d), dmw = h2f(w[i].dmin);
    const __m128i sc128 = _mm_loadu_si128((const __m128i *)sc);
    const __m256i mins = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(sc128, 4), _mm_set1_epi8(0x0F)));
    __m256i sumi[8];
    FOR_NX(j) {
      const block_q8_K *y = XROW(block_q8_K, x, xs, j) + i;
      __m256i prod = _mm256_madd_epi16(mins, loadu256(y->bsums));
      acc[j] = _mm256_fmadd_ps(_mm256_set1_ps(-(y->d * dmw)), _mm256_cvtepi32_ps(prod), acc[j]);
      sumi[j] = _mm256_setzero_si256();
    }
    for (int h = 0; h < 2; h++) {
      const __m256i bits = loadu256(w[i].qs + 32 * h);
      for (int k = 0; k < 4; k++) {
        const __m256i q = _mm256_and_si256(_mm256_srli_epi16(bits, 2 * k), m3);
        const __m256i s = scale_pair(sc[8 * h + 2 * k] & 0xF, sc[8 * h + 2 * k + 1] & 0xF);
        FOR_NX(j) {
          const block_q8_K *y = XROW(block_q8_K, x, xs, j) + i;
          __m256i p = _mm256_maddubs_epi16(q, loadu256(y->qs + 128 * h + 32 * k));
          sumi[j] = _mm256_add_epi32(sumi[j], _mm256_madd_epi16(s, p));
        }
      }
    }
    FOR_NX(j) {
      const block_q8_K *y = XROW(block_q8_K, x, xs, j) + i;
      acc[j] = _mm256_fmadd_ps(_mm256_set1_ps(dw * y->d), _mm256_cvtepi32_ps(sumi[j]), acc[j]);
    }
  }
  FOR_NX(j) out[j] = hsum8(acc[j]);
}
NX_DISPATCH(vd_q2_k)

AI void vd_q3_k_k(int64_t n, const void *vw, const void *x, size_t xs, const int nx, float *out) {
  const block_q3_K *w = vw;
  const __m256i m3 = _mm256_set1_epi8(3), m1 = _mm256_set1_epi8(1);
  const uint32_t km1 = 0x03030303, km2 = 0x0f0f0f0f;
  __m256 acc[8];
  FOR_NX(j) acc[j] = _mm256_setzero_ps();
  for (int64_t i = 0; i < n / QK_K; i++) {
    uint32_t a[4], t;
    memcpy(a, w[i].scales, 12);
    t = a[2];
    a[2] = ((a[0] >> 4) & km2) | (((t >> 4) & km1) << 4);
    a[3] = ((a[1] >> 4) & km2) | (((t >> 6) & km1) << 4);
    a[0] = (a[0] & km2) | (((t >> 0) & km1) << 4);
    a[1] = (a[1] & km2) | (((t >> 2) & km1) << 4);
    int8_t sc[16];
    const __m128i s8 = _mm_sub_epi8(_mm_loadu_si128((const __m128i *)a), _mm_set1_epi8(32));
    _mm_storeu_si128((__m128i *)sc, s8);
    const __m256i sc16 = _mm256_cvtepi8_epi16(s8);
    const float dw = h2f(w[i].d);
    __m256i sumi[8];
    /* value = (low | hbit<<2) - 4: the -4 comes out as -4 * sum(sc * bsum) */
    FOR_NX(j) {
      const block_q8_K *y = XROW(block_q8_K, x, xs, j) + i;
      __m256i corr = _mm256_madd_epi16(sc16, loadu256(y->bsums));
      sumi[j] = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(corr, 2));
    }
    const __m256i hbits = loadu256(w[i].hmask);
    for (int h = 0; h < 2; h++) {
      const __m256i bits = loadu256(w[i].qs + 32 * h);
      for (int k = 0; k < 4; k++) {
        const __m256i lo = _mm256_and_si256(_mm256_srli_epi16(bits, 2 * k), m3);
        const __m256i hb = _mm256_and_si256(_mm256_srli_epi16(hbits, 4 * h + k), m1);
        const __m256i q = _mm256_or_si256(lo, _mm256_slli_epi16(hb, 2));
        const __m256i s = scale_pair(sc[8 * h + 2 * k], sc[8 * h + 2 * k + 1]);
        FOR_NX(j) {
          const block_q8_K *y = XROW(block_q8_K, x, xs, j) + i;
          __m256i p = _mm256_maddubs_epi16(q, loadu256(y->qs + 128 * h + 32 * k));
          sumi[j] = _mm256_add_epi32(sumi[j], _mm256_madd_epi16(s, p));
        }
      }
    }
    FOR_NX(j) {
      const block_q8_K *y = XROW(block_q8_K, x, xs, j) + i;
      acc[j] = _mm256_fmadd_ps(_mm256_set1_ps(dw * y->d), _mm256_cvtepi32_ps(sumi[j]), acc[j]);
    }
  }
  FOR_NX(j) out[j] = hsum8(acc[j]);
}
NX_DISPATCH(vd_q3_k)

/* q4_K/q5_K scales[12] -> bytes 0..7 scales, 8..15 mins (ggml's unpack) */
AI void k4_unpack(const uint8_t *s, uint32_t u[4]) {
  const uint32_t km1 = 0x3f3f3f3f, km2 = 0x0f0f0f0f, km3 = 0x03030303;
  memcpy(u, s, 12);
  u[3] = ((u[2] >> 4) & km2) | (((u[1] >> 6) & km3) << 4);
  const uint32_t aux = u[1] & km1;
  u[1] = (u[2] & km2) | (((u[0] >> 6) & km3) << 4);
  u[2] = aux;
  u[0] &= km1;
}

AI void vd_q45_k_k(int64_t n, const void *vw, const void *x, size_t xs, const int nx, float *out,
                   const int five) {
  const __m256i m4 = _mm256_set1_epi8(0xF), m1 = _mm256_set1_epi8(1);
  const size_t bsz = five ? sizeof(block_q5_K) : sizeof(block_q4_K);
  __m256 acc[8];
  __m128 accm[8];
  FOR_NX(j) {
    acc[j] = _mm256_setzero_ps();
    accm[j] = _mm_setzero_ps();
  }
  for (int64_t i = 0; i < n / QK_K; i++) {
    const uint8_t *blk = (const uint8_t *)vw + (size_t)i * bsz;
    const block_q4_K *w4 = (const block_q4_K *)blk;
    const block_q5_K *w5 = (const block_q5_K *)blk;
    const uint8_t *qs = five ? w5->qs : w4->qs;
    uint32_t u[4];
    k4_unpack(five ? w5->scales : w4->scales, u);
    const uint8_t *sc = (const uint8_t *)u;
    const __m128i mins = _mm_cvtepu8_epi16(_mm_set_epi32(0, 0, (int)u[3], (int)u[2]));
    const float dw = h2f(w4->d), dmw = h2f(w4->dmin); /* same offsets in both */
    __m256i sumi[8];
    FOR_NX(j) {
      const block_q8_K *y = XROW(block_q8_K, x, xs, j) + i;
      const __m256i bs = loadu256(y->bsums);
      const __m128i s8 = _mm_hadd_epi16(_mm256_castsi256_si128(bs), _mm256_extracti128_si256(bs, 1));
      const __m128i prod = _mm_madd_epi16(mins, s8);
      accm[j] = _mm_fmadd_ps(_mm_set1_ps(-(y->d * dmw)), _mm_cvtepi32_ps(prod), accm[j]);
      sumi[j] = _mm256_setzero_si256();
    }
    __m256i hb = five ? loadu256(w5->qh) : _mm256_setzero_si256();
    for (int c = 0; c < 4; c++) {
      const __m256i bits = loadu256(qs + 32 * c);
      __m256i ql = _mm256_and_si256(bits, m4);
      __m256i qh = _mm256_and_si256(_mm256_srli_epi16(bits, 4), m4);
      if (five) {
        ql = _mm256_or_si256(ql, _mm256_slli_epi16(_mm256_and_si256(hb, m1), 4));
        qh = _mm256_or_si256(qh, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 1), m1), 4));
        hb = _mm256_srli_epi16(hb, 2);
      }
      const __m256i sl = _mm256_set1_epi16(sc[2 * c]), sh = _mm256_set1_epi16(sc[2 * c + 1]);
      FOR_NX(j) {
        const block_q8_K *y = XROW(block_q8_K, x, xs, j) + i;
        __m256i pl = _mm256_madd_epi16(sl, _mm256_maddubs_epi16(ql, loadu256(y->qs + 64 * c)));
        __m256i ph = _mm256_madd_epi16(sh, _mm256_maddubs_epi16(qh, loadu256(y->qs + 64 * c + 32)));
        sumi[j] = _mm256_add_epi32(sumi[j], _mm256_add_epi32(pl, ph));
      }
    }
    FOR_NX(j) {
      const block_q8_K *y = XROW(block_q8_K, x, xs, j) + i;
      acc[j] = _mm256_fmadd_ps(_mm256_set1_ps(dw * y->d), _mm256_cvtepi32_ps(sumi[j]), acc[j]);
    }
  }
  FOR_NX(j) out[j] = hsum8(acc[j]) + hsum4(accm[j]);
}
AI void vd_q4_k_k(int64_t n, const void *w, const void *x, size_t xs, const int nx, float *out) {
  vd_q45_k_k(n, w, x, xs, nx, out, 0);
}
AI void vd_q5_k_k(int64_t n, const void *w, const void *x, size_t xs, const int nx, float *out) {
  vd_q45_k_k(n, w, x, xs, nx, out, 1);
}
NX_DISPATCH(vd_q4_k)
NX_DISPATCH(vd_q5_k)

AI void vd_q6_k_k(int64_t n, const void *vw, const void *x, size_t xs, const int nx, float *out) {
  const block_q6_K *w = vw;
  const __m256i m4 = _mm256_set1_epi8(0xF), m3 = _mm256_set1_epi8(3);
  __m256 acc[8];
  FOR_NX(j) acc[j] = _mm256_setzero_ps();
  for (int64_t i = 0; i < n / QK_K; i++) {
    const int8_t *sc = w[i].scales;
    const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)sc));
    const float dw = h2f(w[i].d);
    __m256i sumi[8];
    /* value = q - 32: the -32 comes out as -32 * sum(sc * bsum) */
    FOR_NX(j) {
      const block_q8_K *y = XROW(block_q8_K, x, xs, j) + i;
      __m256i corr = _mm256_madd_epi16(sc16, loadu256(y->bsums));
      sumi[j] = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(corr, 5));
    }
    for (int h = 0; h < 2; h++) {
      const __m256i l0 = loadu256(w[i].ql + 64 * h), l1 = loadu256(w[i].ql + 64 * h + 32);
      const __m256i hh = loadu256(w[i].qh + 32 * h);
      for (int k = 0; k < 4; k++) {
        const __m256i lb = k & 1 ? l1 : l0;
        const __m256i lo = _mm256_and_si256(k < 2 ? lb : _mm256_srli_epi16(lb, 4), m4);
        const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(hh, 2 * k), m3);
        const __m256i q = _mm256_or_si256(lo, _mm256_slli_epi16(hi, 4));
        const __m256i s = scale_pair(sc[8 * h + 2 * k], sc[8 * h + 2 * k + 1]);
        FOR_NX(j) {
          const block_q8_K *y = XROW(block_q8_K, x, xs, j) + i;
          __m256i p = _mm256_maddubs_epi16(q, loadu256(y->qs + 128 * h + 32 * k));
          sumi[j] = _mm256_add_epi32(sumi[j], _mm256_madd_epi16(s, p));
        }
      }
    }
    FOR_NX(j) {
      const block_q8_K *y = XROW(block_q8_K, x, xs, j) + i;
      acc[j] = _mm256_fmadd_ps(_mm256_set1_ps(dw * y->d), _mm256_cvtepi32_ps(sumi[j]), acc[j]);
    }
  }
  FOR_NX(j) out[j] = hsum8(acc[j]);
}
NX_DISPATCH(vd_q6_k)

/* ---- float rows: 16 elements per step, two accumulators per row --------- */

AI __m256 ld_f32(const void *p, int64_t i) { return _mm256_loadu_ps((const float *)p + i); }
AI __m256 ld_f16(const void *p, int64_t i) {
  return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)p + i)));
}
AI __m256 ld_bf16(const void *p, int64_t i) {
  __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)((const uint16_t *)p + i)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
}
AI float el_f32(const void *p, int64_t i) { return ((const float *)p)[i]; }
AI float el_f16(const void *p, int64_t i) { return h2f(((const uint16_t *)p)[i]); }
AI float el_bf16(const void *p, int64_t i) { return pw_bf16_to_fp32(((const uint16_t *)p)[i]); }

#define FLOAT_DOT(T, esz)                                                                        \
  AI void vd_##T##_k(int64_t n, const void *w, const void *x, size_t xs, const int nx, float *out) { \
    __m256 a0[8], a1[8];                                                                         \
    FOR_NX(j) a0[j] = a1[j] = _mm256_setzero_ps();                            \
    int64_t i = 0;                                                                               \
    for (; i + 16 <= n; i += 16) {                                                               \
      const __m256 w0 = ld_##T(w, i), w1 = ld_##T(w, i + 8);                                     \
      FOR_NX(j) {                                                             \
        const char *xr = (const char *)x + (size_t)j * xs;                                       \
        a0[j] = _mm256_fmadd_ps(w0, ld_##T(xr, i), a0[j]);                                       \
        a1[j] = _mm256_fmadd_ps(w1, ld_##T(xr, i + 8), a1[j]);                                   \
      }                                                                                          \
    }                                                                                            \
    for (; i + 8 <= n; i += 8) {                                                                 \
      const __m256 w0 = ld_##T(w, i);                                                            \
      FOR_NX(j)                                                               \
        a0[j] = _mm256_fmadd_ps(w0, ld_##T((const char *)x + (size_t)j * xs, i), a0[j]);         \
    }                                                                                            \
    FOR_NX(j) {                                                               \
      const char *xr = (const char *)x + (size_t)j * xs;                                         \
      float s = hsum8(_mm256_add_ps(a0[j], a1[j]));                                              \
      for (int64_t t = i; t < n; t++) s += el_##T(w, t) * el_##T(xr, t);                         \
      out[j] = s;                                                                                \
    }                                                                                            \
  }                                                                                              \
  NX_DISPATCH_MAX(vd_##T, 4)
FLOAT_DOT(f32, 4)
FLOAT_DOT(f16, 2)
FLOAT_DOT(bf16, 2)

/* ---- activation quantizers (bit-identical to the references) ------------ */


static void qz_q8_0(const float *x, void *dst, int64_t n) {
  block_q8_0 *y = dst;
  float d;
  for (int64_t i = 0; i < n / QK8_0; i++) q8_block(x + 32 * i, &y[i].d, y[i].qs, &d);
}

static void qz_q8_1(const float *x, void *dst, int64_t n) {
  block_q8_1 *y = dst;
  for (int64_t i = 0; i < n / QK8_1; i++) {
    float d;
    int sum = q8_block(x + 32 * i, &y[i].d, y[i].qs, &d);
    y[i].s = pw_fp32_to_fp16(sum * d);
  }
}

static void qz_q8_k(const float *x, void *dst, int64_t n) {
  block_q8_K *y = dst;
  for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
    __m256 m = _mm256_setzero_ps();
    for (int k = 0; k < 32; k++) m = _mm256_max_ps(m, vabs(_mm256_loadu_ps(x + 8 * k)));
    const float amax = hmax8(m);
    if (!amax) {
      memset(&y[i], 0, sizeof y[i]);
      continue;
    }
    /* the first element of largest magnitude, with its sign (as the reference) */
    float max = 0;
    const __m256 va = _mm256_set1_ps(amax);
    for (int k = 0; k < 32; k++) {
      int mask = _mm256_movemask_ps(_mm256_cmp_ps(vabs(_mm256_loadu_ps(x + 8 * k)), va, _CMP_EQ_OQ));
      if (mask) {
        max = x[8 * k + __builtin_ctz((unsigned)mask)];
        break;
      }
    }
    const float iscale = -127.f / max;
    const __m256 vis = _mm256_set1_ps(iscale);
    const __m256i c127 = _mm256_set1_epi32(127);
    for (int g = 0; g < 8; g++) { /* 32 elements per step */
      __m256i q[4];
      for (int k = 0; k < 4; k++) {
        __m256 r = _mm256_round_ps(_mm256_mul_ps(_mm256_loadu_ps(x + 32 * g + 8 * k), vis),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        q[k] = _mm256_min_epi32(_mm256_cvtps_epi32(r), c127);
      }
      _mm256_storeu_si256((__m256i *)(y[i].qs + 32 * g), pack32(q[0], q[1], q[2], q[3]));
      y[i].bsums[2 * g] = (int16_t)hsum8i(_mm256_add_epi32(q[0], q[1]));
      y[i].bsums[2 * g + 1] = (int16_t)hsum8i(_mm256_add_epi32(q[2], q[3]));
    }
    y[i].d = 1 / iscale;
  }
}

static void qz_f16(const float *x, void *dst, int64_t n) {
  uint16_t *y = dst;
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128((__m128i *)(y + i), _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
  for (; i < n; i++) y[i] = pw_fp32_to_fp16(x[i]);
}

/* ---- dequantizers (bit-identical to the references) ---------------------- */

static void dq_f16(const void *src, float *y, int64_t n) {
  const uint16_t *x = src;
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, ld_f16(x, i));
  for (; i < n; i++) y[i] = h2f(x[i]);
}

AI void store_i8x32(float *y, __m256i q, __m256 d) {
  const __m128i lo = _mm256_castsi256_si128(q), hi = _mm256_extracti128_si256(q, 1);
  _mm256_storeu_ps(y, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(lo)), d));
  _mm256_storeu_ps(y + 8, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(lo, 8))), d));
  _mm256_storeu_ps(y + 16, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(hi)), d));
  _mm256_storeu_ps(y + 24, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(hi, 8))), d));
}

static void dq_q8_0(const void *src, float *y, int64_t n) {
  const block_q8_0 *x = src;
  for (int64_t i = 0; i < n / QK8_0; i++) store_i8x32(y + 32 * i, loadu256(x[i].qs), _mm256_set1_ps(h2f(x[i].d)));
}

static void dq_q4_0(const void *src, float *y, int64_t n) {
  const block_q4_0 *x = src;
  for (int64_t i = 0; i < n / QK4_0; i++)
    store_i8x32(y + 32 * i, _mm256_sub_epi8(nibbles32(x[i].qs), _mm256_set1_epi8(8)), _mm256_set1_ps(h2f(x[i].d)));
}

/* y[0..31] = d * q - m, q unsigned bytes */
AI void store_u8x32_affine(float *y, __m256i q, float d, float m) {
  const __m256 vd = _mm256_set1_ps(d), vm = _mm256_set1_ps(m);
  const __m128i lo = _mm256_castsi256_si128(q), hi = _mm256_extracti128_si256(q, 1);
  const __m128i parts[4] = {lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)};
  for (int k = 0; k < 4; k++) {
    __m256 f = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(parts[k]));
    _mm256_storeu_ps(y + 8 * k, _mm256_sub_ps(_mm256_mul_ps(vd, f), vm));
  }
}

static void dq_q4_k(const void *src, float *y, int64_t n) {
  const block_q4_K *x = src;
  const __m256i m4 = _mm256_set1_epi8(0xF);
  for (int64_t i = 0; i < n / QK_K; i++) {
    const float d = h2f(x[i].d), dmin = h2f(x[i].dmin);
    for (int c = 0; c < 4; c++) {
      uint8_t s0, m0, s1, m1;
      quants_get_scale_min_k4(2 * c, x[i].scales, &s0, &m0);
      quants_get_scale_min_k4(2 * c + 1, x[i].scales, &s1, &m1);
      const __m256i bits = loadu256(x[i].qs + 32 * c);
      store_u8x32_affine(y, _mm256_and_si256(bits, m4), d * s0, dmin * m0);
      store_u8x32_affine(y + 32, _mm256_and_si256(_mm256_srli_epi16(bits, 4), m4), d * s1, dmin * m1);
      y += 64;
    }
  }
}

static void dq_q6_k(const void *src, float *y, int64_t n) {
  const block_q6_K *x = src;
  const __m256i m4 = _mm256_set1_epi8(0xF), m3 = _mm256_set1_epi8(3), c32 = _mm256_set1_epi8(32);
  for (int64_t i = 0; i < n / QK_K; i++) {
    const float d = h2f(x[i].d);
    for (int h = 0; h < 2; h++) {
      const __m256i l0 = loadu256(x[i].ql + 64 * h), l1 = loadu256(x[i].ql + 64 * h + 32);
      const __m256i hh = loadu256(x[i].qh + 32 * h);
      for (int k = 0; k < 4; k++) {
        const __m256i lb = k & 1 ? l1 : l0;
        const __m256i lo = _mm256_and_si256(k < 2 ? lb : _mm256_srli_epi16(lb, 4), m4);
        const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(hh, 2 * k), m3);
        const __m256i q = _mm256_sub_epi8(_mm256_or_si256(lo, _mm256_slli_epi16(hi, 4)), c32);
        const int8_t *sc = x[i].scales + 8 * h + 2 * k;
        /* two groups of 16 with their own scale d*sc */
        const __m128i q0 = _mm256_castsi256_si128(q), q1 = _mm256_extracti128_si256(q, 1);
        const __m256 d0 = _mm256_set1_ps(d * sc[0]), d1 = _mm256_set1_ps(d * sc[1]);
        float *o = y + 128 * h + 32 * k;
        _mm256_storeu_ps(o, _mm256_mul_ps(d0, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q0))));
        _mm256_storeu_ps(o + 8, _mm256_mul_ps(d0, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(q0, 8)))));
        _mm256_storeu_ps(o + 16, _mm256_mul_ps(d1, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q1))));
        _mm256_storeu_ps(o + 24, _mm256_mul_ps(d1, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(q1, 8)))));
      }
    }
    y += QK_K;
  }
}

void quants_fill_avx2(pw_traits *t) {
  t[PW_DT_F32].vec_dot = vd_f32;
  t[PW_DT_F16].vec_dot = vd_f16;
  t[PW_DT_F16].from_float = qz_f16;
  t[PW_DT_F16].to_float = dq_f16;
  t[PW_DT_BF16].vec_dot = vd_bf16;
  t[PW_DT_Q4_0].vec_dot = vd_q4_0;
  t[PW_DT_Q4_0].to_float = dq_q4_0;
  t[PW_DT_Q4_1].vec_dot = vd_q4_1;
  t[PW_DT_Q5_0].vec_dot = vd_q5_0;
  t[PW_DT_Q5_1].vec_dot = vd_q5_1;
  t[PW_DT_Q8_0].vec_dot = vd_q8_0;
  t[PW_DT_Q8_0].from_float = qz_q8_0;
  t[PW_DT_Q8_0].to_float = dq_q8_0;
  t[PW_DT_Q8_1].from_float = qz_q8_1;
  t[PW_DT_Q2_K].vec_dot = vd_q2_k;
  t[PW_DT_Q3_K].vec_dot = vd_q3_k;
  t[PW_DT_Q4_K].vec_dot = vd_q4_k;
  t[PW_DT_Q4_K].to_float = dq_q4_k;
  t[PW_DT_Q5_K].vec_dot = vd_q5_k;
  t[PW_DT_Q6_K].vec_dot = vd_q6_k;
  t[PW_DT_Q6_K].to_float = dq_q6_k;
  t[PW_DT_Q8_K].from_float = qz_q8_k;
  t[PW_DT_IQ4_NL].vec_dot = vd_iq4_nl;
  t[PW_DT_IQ4_XS].vec_dot = vd_iq4_xs;
  t[PW_DT_MXFP4].vec_dot = vd_mxfp4;
  for (int i = 0; i < PW_DT_COUNT; i++)
    if (t[i].to_float) t[i].impl = "avx2";
}
