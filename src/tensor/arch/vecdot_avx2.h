/* vecdot_avx2.h - the quantized dot products (traits.h vec_dot, vec_dot4)
 * of the 256-bit levels, written once and compiled twice: by avx2.c for
 * the AVX2 level and by quants_avxvnni.c for the AVX-VNNI level. The file
 * including it defines the two integer steps:
 *   VD_DPBUSD(acc, u, s): acc + in each int32 lane the sum of the four
 *     products of unsigned bytes u by signed bytes s (vpdpbusd; on AVX2
 *     maddubs, then madd with ones, then an add);
 *   VD_DPWSSD(acc, a, b): acc + in each int32 lane the sum of the two
 *     products of int16 a by int16 b (vpdpwssd; on AVX2 madd and an add).
 * maddubs saturates its int16 pair sums where vpdpbusd does not; no
 * operand range here reaches the saturation (at most 2 * 127 * 128), so
 * both levels compute the same integers in the same lanes and then the
 * same float operations: their results are bit-identical. Not for the
 * activation quantizers, the dequantizers or the float rows (avx2.c).
 *
 * Dot products follow ggml's AVX2 approach (integer products per block,
 * one float FMA per block or super-block) and process 1..8 activation rows
 * per pass over the weights. Every per-row float operation is the same
 * sequence whatever nx is, so out[j] never depends on how rows are grouped
 * (see pw_vec_dot_fn). Integer parts use exact identities where they save
 * work: for Q3_K and Q6_K the constant offsets (4, 32) are taken out
 * through the activation's per-16 sums (bsums).
 *
 * The super-block types also have vec_dot4 (four rows, one token: the
 * four streams of a decode step, matmul.c) built from the same
 * per-super-block step as vec_dot, so each row gets the bits vec_dot with
 * nx = 1 gives it, and both prefetch the weight stream ahead (the scale d
 * sits at a block's end, and its load waits on memory otherwise). */
#ifndef PW_VECDOT_AVX2_H
#define PW_VECDOT_AVX2_H

#include "tensor/arch/avx2_util.h"
#include "tensor/dtype.h"
#include "tensor/quants.h"
#include "tensor/traits.h"

#include <immintrin.h>
#include <stddef.h>
#include <string.h>

#if !defined(VD_DPBUSD) || !defined(VD_DPWSSD)
#error "define VD_DPBUSD and VD_DPWSSD before including vecdot_avx2.h"
#endif

/* sum of x*y over 32 signed bytes, as 8 float lanes; |x|, |y| <= 127 */
AI __m256 dot_i8_signed(__m256i ax, __m256i x, __m256i y) {
  return _mm256_cvtepi32_ps(VD_DPBUSD(_mm256_setzero_si256(), ax, _mm256_sign_epi8(y, x)));
}
/* x unsigned bytes */
AI __m256 dot_u8_i8(__m256i x, __m256i y) { return _mm256_cvtepi32_ps(VD_DPBUSD(_mm256_setzero_si256(), x, y)); }

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

/* table32: avx2_util.h (shared with the tiled GEMM) */

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

/* ---- super-block types -------------------------------------------------- */

/* Each super-block's lines are prefetched this far ahead in the stream
 * (rows are contiguous, so past a row's end it is the next row's start);
 * the four-row kernels prefetch each of their four streams K4_PF_BYTES
 * on. The distances of the AVX-512 level's kernels, where they were
 * measured (quants_avx512.c). */
#define K_PF_BYTES 4096
#define K4_PF_BYTES 2048

AI void k_prefetch(const void *blk, const size_t bsz, const size_t dist) {
  for (size_t o = 0; o < bsz; o += 64) _mm_prefetch((const char *)blk + dist + o, _MM_HINT_T0);
}

/* KEEP_IN_REG: avx2_util.h (shared with the tiled GEMM) */

/* the loops over a super-block's parts, unrolled so that the pshufb masks
 * below are constants */
#define UNROLL_ALL _Pragma("GCC unroll 8")

/* scale_k, scale_pair_v, scales_half: avx2_util.h (shared with the
 * tiled GEMM of the K-quants) */

/* Each type's step: super-block i of one weight row (w, already at
 * block i) against nx activation rows xs bytes apart, into acc[j] (and,
 * for Q4_K/Q5_K, accm[j]); VD_ROWS turns a step into vec_dot (VD_ROWS_NX)
 * and vec_dot4 (VD_ROWS4) (out: hsum8(acc) + hsum4(accm), accm zero for
 * the types without one). */
#define VD_ROWS_NX(name, BT, step)                                                                   \
  AI void name##_k(int64_t n, const void *vw, const void *x, size_t xs, const int nx, float *out) {     \
    const BT *w = vw;                                                                                 \
    __m256 acc[8];                                                                                    \
    __m128 accm[8];                                                                                   \
    FOR_NX(j) {                                                                                       \
      acc[j] = _mm256_setzero_ps();                                                                   \
      accm[j] = _mm_setzero_ps();                                                                     \
    }                                                                                                 \
    for (int64_t i = 0; i < n / QK_K; i++) {                                                          \
      k_prefetch(&w[i], sizeof *w, K_PF_BYTES);                                                       \
      step(&w[i], x, xs, i, nx, acc, accm);                                                           \
    }                                                                                                 \
    FOR_NX(j) out[j] = hsum8(acc[j]) + hsum4(accm[j]);                                                \
  }                                                                                                   \
  NX_DISPATCH(name)

#define VD_ROWS4(name, BT, step)                                                                          \
  static void name##4(int64_t n, const void *vw, size_t rs, const void *x, float *out) {              \
    __m256 acc[4];                                                                                    \
    __m128 accm[4];                                                                                   \
    _Pragma("GCC unroll 4") for (int r = 0; r < 4; r++) {                                            \
      acc[r] = _mm256_setzero_ps();                                                                   \
      accm[r] = _mm_setzero_ps();                                                                     \
    }                                                                                                 \
    for (int64_t i = 0; i < n / QK_K; i++)                                                            \
      _Pragma("GCC unroll 4") for (int r = 0; r < 4; r++) {                                          \
        const BT *w = (const BT *)((const uint8_t *)vw + (size_t)r * rs) + i;                         \
        k_prefetch(w, sizeof *w, K4_PF_BYTES);                                                        \
        step(w, x, 0, i, 1, &acc[r], &accm[r]);                                                       \
      }                                                                                               \
    _Pragma("GCC unroll 4") for (int r = 0; r < 4; r++) out[r] = hsum8(acc[r]) + hsum4(accm[r]);     \
  }
#define VD_ROWS(name, BT, step) VD_ROWS_NX(name, BT, step) VD_ROWS4(name, BT, step)

/* IQ4_XS against q8_K: each group's int16 pair sums are scaled by its
 * 6-bit scale (ls - 32) in the madd, so a super-block is one int32 vector
 * per row and one FMA (|sum| < 2^25: exact). */
AI void iq4xs_step(const block_iq4_xs *w, const void *x, size_t xs, int64_t i, const int nx, __m256 *acc,
                   __m128 *accm) {
  (void)accm;
  const __m256i tab = table32(pw_kvalues_iq4nl);
  const float dw = h2f(w->d);
  const __m256i sc = iq4xs_scales(w);
  __m256i sumi[8];
  FOR_NX(j) sumi[j] = _mm256_setzero_si256();
  UNROLL_ALL for (int g = 0; g < QK_K / 32; g += 2) {
    __m256i nb[2];
    nibbles32x2(w->qs + 16 * g, &nb[0], &nb[1]);
    UNROLL_ALL for (int h = 0; h < 2; h++) {
      const __m256i qw = _mm256_shuffle_epi8(tab, nb[h]);
      const __m256i aw = _mm256_sign_epi8(qw, qw);
      const __m256i s = scale_k(sc, g + h);
      FOR_NX(j) {
        const block_q8_K *y = XROW(block_q8_K, x, xs, j) + i;
        const __m256i p = _mm256_maddubs_epi16(aw, _mm256_sign_epi8(loadu256(y->qs + 32 * (g + h)), qw));
        sumi[j] = VD_DPWSSD(sumi[j], p, s);
      }
    }
  }
  FOR_NX(j) {
    const block_q8_K *y = XROW(block_q8_K, x, xs, j) + i;
    acc[j] = _mm256_fmadd_ps(_mm256_set1_ps(dw * y->d), _mm256_cvtepi32_ps(sumi[j]), acc[j]);
  }
}
VD_ROWS(vd_iq4_xs, block_iq4_xs, iq4xs_step)

AI void q2k_step(const block_q2_K *w, const void *x, size_t xs, int64_t i, const int nx, __m256 *acc, __m128 *accm) {
  (void)accm;
  const __m256i m3 = _mm256_set1_epi8(3);
  const uint8_t *sc = w->scales;
  const float dw = h2f(w->d), dmw = h2f(w->dmin);
  const __m128i sc128 = _mm_loadu_si128((const __m128i *)sc);
  const __m256i mins = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(sc128, 4), _mm_set1_epi8(0x0F)));
  const __m256i sc16 = _mm256_cvtepu8_epi16(_mm_and_si128(sc128, _mm_set1_epi8(0x0F)));
  __m256i sumi[8];
  FOR_NX(j) {
    const block_q8_K *y = XROW(block_q8_K, x, xs, j) + i;
    const __m256i prod = _mm256_madd_epi16(mins, loadu256(y->bsums));
    acc[j] = _mm256_fmadd_ps(_mm256_set1_ps(-(y->d * dmw)), _mm256_cvtepi32_ps(prod), acc[j]);
    sumi[j] = _mm256_setzero_si256();
  }
  UNROLL_ALL for (int h = 0; h < 2; h++) {
    /* the half's codes and scales stay in registers while each row
     * takes its four parts into its sum in one go */
    __m256i qk[4], sk[4];
    const __m256i bits = loadu256(w->qs + 32 * h);
    const __m256i sch = scales_half(sc16, h);
    UNROLL_ALL for (int k = 0; k < 4; k++) {
      const __m256i q = _mm256_and_si256(_mm256_srli_epi16(bits, 2 * k), m3);
      const __m256i s = scale_pair_v(sch, 2 * k, 2 * k + 1);
      qk[k] = q;
      sk[k] = s;
    }
    FOR_NX(j) {
      const block_q8_K *y = XROW(block_q8_K, x, xs, j) + i;
      __m256i sj = sumi[j];
      UNROLL_ALL for (int m = 0; m < 4; m++)
        sj = VD_DPWSSD(sj, _mm256_maddubs_epi16(qk[m], loadu256(y->qs + 128 * h + 32 * m)), sk[m]);
      KEEP_IN_REG(sj);
      sumi[j] = sj;
    }
  }
  FOR_NX(j) {
    const block_q8_K *y = XROW(block_q8_K, x, xs, j) + i;
    acc[j] = _mm256_fmadd_ps(_mm256_set1_ps(dw * y->d), _mm256_cvtepi32_ps(sumi[j]), acc[j]);
  }
}
VD_ROWS(vd_q2_k, block_q2_K, q2k_step)

AI void q3k_step(const block_q3_K *w, const void *x, size_t xs, int64_t i, const int nx, __m256 *acc, __m128 *accm) {
  (void)accm;
  const __m256i m3 = _mm256_set1_epi8(3), m1 = _mm256_set1_epi8(1);
  uint32_t a[4];
  k3_unpack(w->scales, a);
  const __m128i s8 = _mm_sub_epi8(_mm_loadu_si128((const __m128i *)a), _mm_set1_epi8(32));
  const __m256i sc16 = _mm256_cvtepi8_epi16(s8);
  const float dw = h2f(w->d);
  __m256i sumi[8];
  /* value = (low | hbit<<2) - 4: the -4 comes out as -4 * sum(sc * bsum) */
  FOR_NX(j) {
    const block_q8_K *y = XROW(block_q8_K, x, xs, j) + i;
    const __m256i corr = _mm256_madd_epi16(sc16, loadu256(y->bsums));
    sumi[j] = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(corr, 2));
  }
  const __m256i hbits = loadu256(w->hmask);
  UNROLL_ALL for (int h = 0; h < 2; h++) {
    /* the half's codes and scales stay in registers while each row
     * takes its four parts into its sum in one go */
    __m256i qk[4], sk[4];
    const __m256i bits = loadu256(w->qs + 32 * h);
    const __m256i sch = scales_half(sc16, h);
    UNROLL_ALL for (int k = 0; k < 4; k++) {
      const __m256i lo = _mm256_and_si256(_mm256_srli_epi16(bits, 2 * k), m3);
      const __m256i hb = _mm256_and_si256(_mm256_srli_epi16(hbits, 4 * h + k), m1);
      const __m256i q = _mm256_or_si256(lo, _mm256_slli_epi16(hb, 2));
      const __m256i s = scale_pair_v(sch, 2 * k, 2 * k + 1);
      qk[k] = q;
      sk[k] = s;
    }
    FOR_NX(j) {
      const block_q8_K *y = XROW(block_q8_K, x, xs, j) + i;
      __m256i sj = sumi[j];
      UNROLL_ALL for (int m = 0; m < 4; m++)
        sj = VD_DPWSSD(sj, _mm256_maddubs_epi16(qk[m], loadu256(y->qs + 128 * h + 32 * m)), sk[m]);
      KEEP_IN_REG(sj);
      sumi[j] = sj;
    }
  }
  FOR_NX(j) {
    const block_q8_K *y = XROW(block_q8_K, x, xs, j) + i;
    acc[j] = _mm256_fmadd_ps(_mm256_set1_ps(dw * y->d), _mm256_cvtepi32_ps(sumi[j]), acc[j]);
  }
}
VD_ROWS(vd_q3_k, block_q3_K, q3k_step)

/* k4_unpack_v, k4_unpack_v2: avx2_util.h */

/* Q4_K/Q5_K: the int16 pair sums of sub-block 2c (2c + 1) times its
 * scale go into the int32 sums by VD_DPWSSD, the mins through the bsums
 * into accm; su: the block's scales and mins unpacked (k4_unpack_v) */
AI void q45k_step(const uint8_t *blk, const __m128i su, const void *x, size_t xs, int64_t i, const int nx,
                  __m256 *acc, __m128 *accm, const int five) {
  const __m256i m4 = _mm256_set1_epi8(0xF), m1 = _mm256_set1_epi8(1);
  const block_q4_K *w4 = (const block_q4_K *)blk;
  const block_q5_K *w5 = (const block_q5_K *)blk;
  const uint8_t *qs = five ? w5->qs : w4->qs;
  const __m128i mins = _mm_cvtepu8_epi16(_mm_unpackhi_epi64(su, su));
  const __m256i sc = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(su)); /* the 8 scales in each half */
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
  /* a half super-block's codes and scales (8 vectors) stay in registers
   * while each row takes its four sub-blocks into its sum in one go */
  UNROLL_ALL for (int half = 0; half < 2; half++) {
    __m256i q[4], s[4];
    UNROLL_ALL for (int cc = 0; cc < 2; cc++) {
      const int c = 2 * half + cc;
      const __m256i bits = loadu256(qs + 32 * c);
      q[2 * cc] = _mm256_and_si256(bits, m4);
      q[2 * cc + 1] = _mm256_and_si256(_mm256_srli_epi16(bits, 4), m4);
      if (five) {
        q[2 * cc] = _mm256_or_si256(q[2 * cc], _mm256_slli_epi16(_mm256_and_si256(hb, m1), 4));
        q[2 * cc + 1] =
            _mm256_or_si256(q[2 * cc + 1], _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 1), m1), 4));
        hb = _mm256_srli_epi16(hb, 2);
      }
      s[2 * cc] = scale_k(sc, 2 * c);
      s[2 * cc + 1] = scale_k(sc, 2 * c + 1);
    }
    FOR_NX(j) {
      const block_q8_K *y = XROW(block_q8_K, x, xs, j) + i;
      __m256i sj = sumi[j];
      UNROLL_ALL for (int m = 0; m < 4; m++)
        sj = VD_DPWSSD(sj, _mm256_maddubs_epi16(q[m], loadu256(y->qs + 128 * half + 32 * m)), s[m]);
      KEEP_IN_REG(sj);
      sumi[j] = sj;
    }
  }
  FOR_NX(j) {
    const block_q8_K *y = XROW(block_q8_K, x, xs, j) + i;
    acc[j] = _mm256_fmadd_ps(_mm256_set1_ps(dw * y->d), _mm256_cvtepi32_ps(sumi[j]), acc[j]);
  }
}
/* Q4_K/Q5_K: vec_dot (one row, nx tokens) from VD_ROWS_NX with each
 * super-block's scales unpacked on their own (k4_unpack_v) */
AI void q4k_step(const block_q4_K *w, const void *x, size_t xs, int64_t i, const int nx, __m256 *acc, __m128 *accm) {
  q45k_step((const uint8_t *)w, k4_unpack_v(w->scales), x, xs, i, nx, acc, accm, 0);
}
AI void q5k_step(const block_q5_K *w, const void *x, size_t xs, int64_t i, const int nx, __m256 *acc, __m128 *accm) {
  q45k_step((const uint8_t *)w, k4_unpack_v(w->scales), x, xs, i, nx, acc, accm, 1);
}
/* vec_dot4 (four rows, one token) of Q4_K/Q5_K: VD_ROWS4's loop, with the
 * four rows' scales unpacked two super-blocks to a vector */
#define VD_ROWS4_K45(name, BT, five)                                                                      \
  static void name##4(int64_t n, const void *vw, size_t rs, const void *x, float *out) {              \
    __m256 acc[4];                                                                                    \
    __m128 accm[4];                                                                                   \
    _Pragma("GCC unroll 4") for (int r = 0; r < 4; r++) {                                            \
      acc[r] = _mm256_setzero_ps();                                                                   \
      accm[r] = _mm_setzero_ps();                                                                     \
    }                                                                                                 \
    for (int64_t i = 0; i < n / QK_K; i++) {                                                          \
      const BT *w[4];                                                                                 \
      _Pragma("GCC unroll 4") for (int r = 0; r < 4; r++) {                                          \
        w[r] = (const BT *)((const uint8_t *)vw + (size_t)r * rs) + i;                                \
        k_prefetch(w[r], sizeof *w[r], K4_PF_BYTES);                                                  \
      }                                                                                               \
      const __m256i u01 = k4_unpack_v2(w[0]->scales, w[1]->scales);                                   \
      const __m256i u23 = k4_unpack_v2(w[2]->scales, w[3]->scales);                                   \
      const __m128i su[4] = {_mm256_castsi256_si128(u01), _mm256_extracti128_si256(u01, 1),          \
                             _mm256_castsi256_si128(u23), _mm256_extracti128_si256(u23, 1)};          \
      _Pragma("GCC unroll 4") for (int r = 0; r < 4; r++)                                            \
          q45k_step((const uint8_t *)w[r], su[r], x, 0, i, 1, &acc[r], &accm[r], five);               \
    }                                                                                                 \
    _Pragma("GCC unroll 4") for (int r = 0; r < 4; r++) out[r] = hsum8(acc[r]) + hsum4(accm[r]);     \
  }
VD_ROWS_NX(vd_q4_k, block_q4_K, q4k_step)
VD_ROWS4_K45(vd_q4_k, block_q4_K, 0)
VD_ROWS_NX(vd_q5_k, block_q5_K, q5k_step)
VD_ROWS4_K45(vd_q5_k, block_q5_K, 1)

AI void q6k_step(const block_q6_K *w, const void *x, size_t xs, int64_t i, const int nx, __m256 *acc, __m128 *accm) {
  (void)accm;
  const __m256i m4 = _mm256_set1_epi8(0xF), m30 = _mm256_set1_epi8(0x30);
  const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)w->scales));
  const float dw = h2f(w->d);
  __m256i sumi[8];
  /* value = q - 32: the -32 comes out as -32 * sum(sc * bsum) */
  FOR_NX(j) {
    const block_q8_K *y = XROW(block_q8_K, x, xs, j) + i;
    const __m256i corr = _mm256_madd_epi16(sc16, loadu256(y->bsums));
    sumi[j] = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(corr, 5));
  }
  UNROLL_ALL for (int h = 0; h < 2; h++) {
    /* the half's codes and scales stay in registers while each row
     * takes its four parts into its sum in one go */
    __m256i qk[4], sk[4];
    const __m256i l0 = loadu256(w->ql + 64 * h), l1 = loadu256(w->ql + 64 * h + 32);
    const __m256i hh = loadu256(w->qh + 32 * h);
    const __m256i sch = scales_half(sc16, h);
    UNROLL_ALL for (int k = 0; k < 4; k++) {
      const __m256i lb = k & 1 ? l1 : l0;
      const __m256i lo = _mm256_and_si256(k < 2 ? lb : _mm256_srli_epi16(lb, 4), m4);
      /* bits 2k..2k+1 of qh to bits 4..5: one shift and one mask */
      const __m256i hs = k == 0 ? _mm256_slli_epi16(hh, 4) : k == 1 ? _mm256_slli_epi16(hh, 2) : k == 2 ? hh : _mm256_srli_epi16(hh, 2);
      const __m256i q = _mm256_or_si256(lo, _mm256_and_si256(hs, m30));
      const __m256i s = scale_pair_v(sch, 2 * k, 2 * k + 1);
      qk[k] = q;
      sk[k] = s;
    }
    FOR_NX(j) {
      const block_q8_K *y = XROW(block_q8_K, x, xs, j) + i;
      __m256i sj = sumi[j];
      UNROLL_ALL for (int m = 0; m < 4; m++)
        sj = VD_DPWSSD(sj, _mm256_maddubs_epi16(qk[m], loadu256(y->qs + 128 * h + 32 * m)), sk[m]);
      KEEP_IN_REG(sj);
      sumi[j] = sj;
    }
  }
  FOR_NX(j) {
    const block_q8_K *y = XROW(block_q8_K, x, xs, j) + i;
    acc[j] = _mm256_fmadd_ps(_mm256_set1_ps(dw * y->d), _mm256_cvtepi32_ps(sumi[j]), acc[j]);
  }
}
VD_ROWS(vd_q6_k, block_q6_K, q6k_step)

/* the quantized dot products of this level into t */
AI void vd_fill(pw_traits *t) {
  t[PW_DT_Q4_0].vec_dot = vd_q4_0;
  t[PW_DT_Q4_1].vec_dot = vd_q4_1;
  t[PW_DT_Q5_0].vec_dot = vd_q5_0;
  t[PW_DT_Q5_1].vec_dot = vd_q5_1;
  t[PW_DT_Q8_0].vec_dot = vd_q8_0;
  t[PW_DT_IQ4_NL].vec_dot = vd_iq4_nl;
  t[PW_DT_MXFP4].vec_dot = vd_mxfp4;
  const struct {
    uint32_t dt;
    pw_vec_dot_fn vd;
    pw_vec_dot4_fn vd4;
  } k[] = {{PW_DT_Q2_K, vd_q2_k, vd_q2_k4},   {PW_DT_Q3_K, vd_q3_k, vd_q3_k4}, {PW_DT_Q4_K, vd_q4_k, vd_q4_k4},
           {PW_DT_Q5_K, vd_q5_k, vd_q5_k4},   {PW_DT_Q6_K, vd_q6_k, vd_q6_k4}, {PW_DT_IQ4_XS, vd_iq4_xs, vd_iq4_xs4}};
  for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
    t[k[i].dt].vec_dot = k[i].vd;
    t[k[i].dt].vec_dot4 = k[i].vd4;
  }
}

#endif
