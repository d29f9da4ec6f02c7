/* avx2.c - AVX2/FMA/F16C kernels for the quantized formats: dot products of
 * weight rows with quantized activation rows (vecdot_avx2.h, with maddubs
 * and madd as its integer steps), activation quantizers, a few
 * dequantizers, and the float-row dot products. Compiled with -mavx2 -mfma
 * -mf16c; installed by pw_tensor_init only when the CPU has all three.
 *
 * Float rows go 1..4 activation rows per pass (8: F16 3% slower), each
 * row's float operations the same sequence whatever nx is.
 *
 * Activation quantizers reproduce the scalar references bit for bit. */
#include "tensor/quants.h"
#include "tensor/dtype.h"
#include "tensor/traits.h"

#include "tensor/arch/avx2_util.h"

#include <immintrin.h>
#include <string.h>

#define VD_DPBUSD(acc, u, s) _mm256_add_epi32((acc), _mm256_madd_epi16(_mm256_maddubs_epi16((u), (s)), _mm256_set1_epi16(1)))
#define VD_DPWSSD(acc, a, b) _mm256_add_epi32((acc), _mm256_madd_epi16((a), (b)))
#include "tensor/arch/vecdot_avx2.h"

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
  vd_fill(t);
  t[PW_DT_Q4_0].to_float = dq_q4_0;
  t[PW_DT_Q8_0].from_float = qz_q8_0;
  t[PW_DT_Q8_0].to_float = dq_q8_0;
  t[PW_DT_Q8_1].from_float = qz_q8_1;
  t[PW_DT_Q4_K].to_float = dq_q4_k;
  t[PW_DT_Q6_K].to_float = dq_q6_k;
  t[PW_DT_Q8_K].from_float = qz_q8_k;
  for (int i = 0; i < PW_DT_COUNT; i++)
    if (t[i].to_float) t[i].impl = "avx2";
}
