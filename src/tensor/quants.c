/* quants.c - scalar reference kernels for every supported dtype: fp16/bf16
 * conversion, dequantize, quantize and dot products, written for clarity
 * (they are the oracles the SIMD kernels are tested against) while keeping
 * ggml's numeric recipe: activation rounding, scale conventions and the order
 * in which per-block integer sums are scaled and accumulated.
 *
 * Weight quantizers for Q4_0..Q8_0 follow ggml's reference quantizers;
 * the K-quant quantizers are simpler (no iterative scale search) but keep
 * every element inside its group's representable range. The IQ4_NL,
 * IQ4_XS and MXFP4 quantizers are llama.cpp's without an importance matrix
 * (Power has none), float operation for float operation, so the files they
 * write are bit-identical to llama-quantize's (test_quants_llamacpp). */
#include "tensor/quants.h"

#include "base/error.h"
#include "tensor/dtype.h"
#include "tensor/traits.h"

#include <float.h>
#include <math.h>
#include <string.h>

/* ---- fp16 / bf16 ---------------------------------------------------- */

static inline uint32_t f32_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}
static inline float bits_f32(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

float pw_fp16_to_fp32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000) << 16;
  uint32_t e = (h >> 10) & 0x1f;
  uint32_t m = h & 0x3ff;
  if (e == 0) {
    /* zero or subnormal: m * 2^-24 is exact in binary32 */
    float v = (float)m * 0x1p-24f;
    return bits_f32(f32_bits(v) | sign);
  }
  if (e == 31) return bits_f32(sign | 0x7f800000u | (m << 13));
  return bits_f32(sign | ((e + 112) << 23) | (m << 13));
}

uint16_t pw_fp32_to_fp16(float f) {
  uint32_t x = f32_bits(f);
  uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
  uint32_t ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u) return (uint16_t)(sign | 0x7e00 | ((ax >> 13) & 0x3ff)); /* NaN */
  /* 65520 is the midpoint between 65504 (odd mantissa) and 2^16: ties to
   * even round it, and everything above, to infinity. */
  if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00);
  if (ax < 0x38800000u) { /* below 2^-14: fp16 subnormal or zero */
    uint32_t e = ax >> 23;
    if (e == 0) return sign; /* binary32 subnormals are far below 2^-25 */
    uint32_t m = (ax & 0x7fffff) | 0x800000;
    uint32_t shift = 126 - e; /* value in units of 2^-24 is m >> shift */
    if (shift > 24) return sign;
    uint32_t r = m >> shift;
    uint32_t rem = m & ((1u << shift) - 1);
    uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (r & 1))) r++;
    return (uint16_t)(sign | r);
  }
  uint32_t h = (((ax >> 23) - 112) << 10) | ((ax >> 13) & 0x3ff);
  uint32_t rem = ax & 0x1fff;
  if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) h++; /* carry may bump the exponent: fine */
  return (uint16_t)(sign | h);
}

float pw_bf16_to_fp32(uint16_t h) { return bits_f32((uint32_t)h << 16); }

uint16_t pw_fp32_to_bf16(float f) {
  uint32_t u = f32_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 64); /* quiet NaN */
  return (uint16_t)((u + (0x7fffu + ((u >> 16) & 1))) >> 16);
}

#define H2F(h) pw_fp16_to_fp32(h)
#define F2H(f) pw_fp32_to_fp16(f)

/* Round to nearest, ties to even, independent of the FP environment
 * (ggml's nearest_int); valid for |f| < 2^22. */
static inline int nearest_int(float f) {
  float v = f + 12582912.f;
  int32_t i;
  memcpy(&i, &v, 4);
  return (i & 0x007fffff) - 0x00400000;
}

static inline int clampi(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

/* ---- plain float types --------------------------------------------- */

static void deq_f32(const void *src, float *dst, int64_t n) { memcpy(dst, src, (size_t)n * 4); }
static void q_f32(const float *src, void *dst, int64_t n) { memcpy(dst, src, (size_t)n * 4); }

static void deq_f16(const void *src, float *dst, int64_t n) {
  const uint16_t *s = src;
  for (int64_t i = 0; i < n; i++) dst[i] = H2F(s[i]);
}
static void q_f16(const float *src, void *dst, int64_t n) {
  uint16_t *d = dst;
  for (int64_t i = 0; i < n; i++) d[i] = F2H(src[i]);
}
static void deq_bf16(const void *src, float *dst, int64_t n) {
  const uint16_t *s = src;
  for (int64_t i = 0; i < n; i++) dst[i] = pw_bf16_to_fp32(s[i]);
}
static void q_bf16(const float *src, void *dst, int64_t n) {
  uint16_t *d = dst;
  for (int64_t i = 0; i < n; i++) d[i] = pw_fp32_to_bf16(src[i]);
}

/* ggml's scalar float dots accumulate products in double. */
static float dot_f32(int64_t n, const void *w, const void *x) {
  const float *a = w, *b = x;
  double s = 0;
  for (int64_t i = 0; i < n; i++) s += (double)(a[i] * b[i]);
  return (float)s;
}
static float dot_f16(int64_t n, const void *w, const void *x) {
  const uint16_t *a = w, *b = x;
  double s = 0;
  for (int64_t i = 0; i < n; i++) s += (double)(H2F(a[i]) * H2F(b[i]));
  return (float)s;
}
static float dot_bf16(int64_t n, const void *w, const void *x) {
  const uint16_t *a = w, *b = x;
  double s = 0;
  for (int64_t i = 0; i < n; i++) s += (double)(pw_bf16_to_fp32(a[i]) * pw_bf16_to_fp32(b[i]));
  return (float)s;
}

/* ---- 32-element block types ----------------------------------------- */

static void deq_q4_0(const void *src, float *y, int64_t n) {
  const block_q4_0 *x = src;
  for (int64_t i = 0; i < n / QK4_0; i++) {
    float d = H2F(x[i].d);
    for (int j = 0; j < 16; j++) {
      y[i * 32 + j] = ((x[i].qs[j] & 0xF) - 8) * d;
      y[i * 32 + j + 16] = ((x[i].qs[j] >> 4) - 8) * d;
    }
  }
}
static void q_q4_0(const float *x, void *dst, int64_t n) {
  block_q4_0 *y = dst;
  for (int64_t i = 0; i < n / QK4_0; i++, x += 32) {
    float amax = 0, max = 0;
    for (int j = 0; j < 32; j++)
      if (amax < fabsf(x[j])) {
        amax = fabsf(x[j]);
        max = x[j];
      }
    float d = max / -8, id = d ? 1.0f / d : 0.0f;
    y[i].d = F2H(d);
    for (int j = 0; j < 16; j++) {
      int a = (int8_t)(x[j] * id + 8.5f), b = (int8_t)(x[j + 16] * id + 8.5f);
      a = a > 15 ? 15 : a;
      b = b > 15 ? 15 : b;
      y[i].qs[j] = (uint8_t)(a | (b << 4));
    }
  }
}
static float dot_q4_0(int64_t n, const void *w, const void *xq) {
  const block_q4_0 *x = w;
  const block_q8_0 *y = xq;
  float s = 0;
  for (int64_t i = 0; i < n / QK4_0; i++) {
    int sumi = 0;
    for (int j = 0; j < 16; j++)
      sumi += ((x[i].qs[j] & 0xF) - 8) * y[i].qs[j] + ((x[i].qs[j] >> 4) - 8) * y[i].qs[j + 16];
    s += sumi * H2F(x[i].d) * H2F(y[i].d);
  }
  return s;
}

static void deq_q4_1(const void *src, float *y, int64_t n) {
  const block_q4_1 *x = src;
  for (int64_t i = 0; i < n / QK4_1; i++) {
    float d = H2F(x[i].d), m = H2F(x[i].m);
    for (int j = 0; j < 16; j++) {
      y[i * 32 + j] = (x[i].qs[j] & 0xF) * d + m;
      y[i * 32 + j + 16] = (x[i].qs[j] >> 4) * d + m;
    }
  }
}
static void q_q4_1(const float *x, void *dst, int64_t n) {
  block_q4_1 *y = dst;
  for (int64_t i = 0; i < n / QK4_1; i++, x += 32) {
    float mn = FLT_MAX, mx = -FLT_MAX;
    for (int j = 0; j < 32; j++) {
      if (x[j] < mn) mn = x[j];
      if (x[j] > mx) mx = x[j];
    }
    float d = (mx - mn) / 15, id = d ? 1.0f / d : 0.0f;
    y[i].d = F2H(d);
    y[i].m = F2H(mn);
    for (int j = 0; j < 16; j++) {
      int a = (int8_t)((x[j] - mn) * id + 0.5f), b = (int8_t)((x[j + 16] - mn) * id + 0.5f);
      a = a > 15 ? 15 : a;
      b = b > 15 ? 15 : b;
      y[i].qs[j] = (uint8_t)(a | (b << 4));
    }
  }
}
static float dot_q4_1(int64_t n, const void *w, const void *xq) {
  const block_q4_1 *x = w;
  const block_q8_1 *y = xq;
  float s = 0;
  for (int64_t i = 0; i < n / QK4_1; i++) {
    int sumi = 0;
    for (int j = 0; j < 16; j++)
      sumi += (x[i].qs[j] & 0xF) * y[i].qs[j] + (x[i].qs[j] >> 4) * y[i].qs[j + 16];
    s += (H2F(x[i].d) * H2F(y[i].d)) * sumi + H2F(x[i].m) * H2F(y[i].s);
  }
  return s;
}

static inline uint32_t load_u32(const uint8_t *p) {
  uint32_t v;
  memcpy(&v, p, 4);
  return v;
}

static void deq_q5_0(const void *src, float *y, int64_t n) {
  const block_q5_0 *x = src;
  for (int64_t i = 0; i < n / QK5_0; i++) {
    float d = H2F(x[i].d);
    uint32_t qh = load_u32(x[i].qh);
    for (int j = 0; j < 16; j++) {
      int h0 = ((qh >> j) << 4) & 0x10, h1 = (qh >> (j + 12)) & 0x10;
      y[i * 32 + j] = (((x[i].qs[j] & 0xF) | h0) - 16) * d;
      y[i * 32 + j + 16] = (((x[i].qs[j] >> 4) | h1) - 16) * d;
    }
  }
}
/* Packs 32 5-bit values (clamped to 31): low nibbles of j and j+16 share
 * qs[j], the fifth bits go to bit j of qh (Q5_0 and Q5_1 share the layout). */
static void pack_q5(const int v[32], uint8_t qs[16], uint8_t qh_out[4]) {
  uint32_t qh = 0;
  for (int j = 0; j < 16; j++) {
    int a = v[j] > 31 ? 31 : v[j], b = v[j + 16] > 31 ? 31 : v[j + 16];
    qs[j] = (uint8_t)((a & 0xF) | ((b & 0xF) << 4));
    qh |= ((uint32_t)(a & 0x10) >> 4) << j;
    qh |= ((uint32_t)(b & 0x10) >> 4) << (j + 16);
  }
  memcpy(qh_out, &qh, 4);
}

static void q_q5_0(const float *x, void *dst, int64_t n) {
  block_q5_0 *y = dst;
  for (int64_t i = 0; i < n / QK5_0; i++, x += 32) {
    float amax = 0, max = 0;
    for (int j = 0; j < 32; j++)
      if (amax < fabsf(x[j])) {
        amax = fabsf(x[j]);
        max = x[j];
      }
    float d = max / -16, id = d ? 1.0f / d : 0.0f;
    y[i].d = F2H(d);
    int v[32];
    for (int j = 0; j < 32; j++) v[j] = (int8_t)(x[j] * id + 16.5f);
    pack_q5(v, y[i].qs, y[i].qh);
  }
}
static float dot_q5_0(int64_t n, const void *w, const void *xq) {
  const block_q5_0 *x = w;
  const block_q8_0 *y = xq;
  float s = 0;
  for (int64_t i = 0; i < n / QK5_0; i++) {
    uint32_t qh = load_u32(x[i].qh);
    int sumi = 0;
    for (int j = 0; j < 16; j++) {
      int h0 = ((qh >> j) << 4) & 0x10, h1 = (qh >> (j + 12)) & 0x10;
      sumi += (((x[i].qs[j] & 0xF) | h0) - 16) * y[i].qs[j] +
              (((x[i].qs[j] >> 4) | h1) - 16) * y[i].qs[j + 16];
    }
    s += sumi * H2F(x[i].d) * H2F(y[i].d);
  }
  return s;
}

static void deq_q5_1(const void *src, float *y, int64_t n) {
  const block_q5_1 *x = src;
  for (int64_t i = 0; i < n / QK5_1; i++) {
    float d = H2F(x[i].d), m = H2F(x[i].m);
    uint32_t qh = load_u32(x[i].qh);
    for (int j = 0; j < 16; j++) {
      int h0 = ((qh >> j) << 4) & 0x10, h1 = (qh >> (j + 12)) & 0x10;
      y[i * 32 + j] = ((x[i].qs[j] & 0xF) | h0) * d + m;
      y[i * 32 + j + 16] = ((x[i].qs[j] >> 4) | h1) * d + m;
    }
  }
}
static void q_q5_1(const float *x, void *dst, int64_t n) {
  block_q5_1 *y = dst;
  for (int64_t i = 0; i < n / QK5_1; i++, x += 32) {
    float mn = FLT_MAX, mx = -FLT_MAX;
    for (int j = 0; j < 32; j++) {
      if (x[j] < mn) mn = x[j];
      if (x[j] > mx) mx = x[j];
    }
    float d = (mx - mn) / 31, id = d ? 1.0f / d : 0.0f;
    y[i].d = F2H(d);
    y[i].m = F2H(mn);
    int v[32];
    for (int j = 0; j < 32; j++) v[j] = (uint8_t)((x[j] - mn) * id + 0.5f);
    pack_q5(v, y[i].qs, y[i].qh);
  }
}
static float dot_q5_1(int64_t n, const void *w, const void *xq) {
  const block_q5_1 *x = w;
  const block_q8_1 *y = xq;
  float s = 0;
  for (int64_t i = 0; i < n / QK5_1; i++) {
    uint32_t qh = load_u32(x[i].qh);
    int sumi = 0;
    for (int j = 0; j < 16; j++) {
      int h0 = ((qh >> j) << 4) & 0x10, h1 = (qh >> (j + 12)) & 0x10;
      sumi += ((x[i].qs[j] & 0xF) | h0) * y[i].qs[j] + ((x[i].qs[j] >> 4) | h1) * y[i].qs[j + 16];
    }
    s += (H2F(x[i].d) * H2F(y[i].d)) * sumi + H2F(x[i].m) * H2F(y[i].s);
  }
  return s;
}

static void deq_q8_0(const void *src, float *y, int64_t n) {
  const block_q8_0 *x = src;
  for (int64_t i = 0; i < n / QK8_0; i++) {
    float d = H2F(x[i].d);
    for (int j = 0; j < 32; j++) y[i * 32 + j] = x[i].qs[j] * d;
  }
}
/* ggml's quantize_row_q8_0_ref: d = amax/127, q = roundf(x * (1/d)). */
static void q_q8_0(const float *x, void *dst, int64_t n) {
  block_q8_0 *y = dst;
  for (int64_t i = 0; i < n / QK8_0; i++, x += 32) {
    float amax = 0;
    for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(x[j]));
    float d = amax / 127, id = d ? 1.0f / d : 0.0f;
    y[i].d = F2H(d);
    for (int j = 0; j < 32; j++) y[i].qs[j] = (int8_t)roundf(x[j] * id);
  }
}
static float dot_q8_0(int64_t n, const void *w, const void *xq) {
  const block_q8_0 *x = w;
  const block_q8_0 *y = xq;
  float s = 0;
  for (int64_t i = 0; i < n / QK8_0; i++) {
    int sumi = 0;
    for (int j = 0; j < 32; j++) sumi += x[i].qs[j] * y[i].qs[j];
    s += sumi * (H2F(x[i].d) * H2F(y[i].d));
  }
  return s;
}

static void deq_q8_1(const void *src, float *y, int64_t n) {
  const block_q8_1 *x = src;
  for (int64_t i = 0; i < n / QK8_1; i++) {
    float d = H2F(x[i].d);
    for (int j = 0; j < 32; j++) y[i * 32 + j] = x[i].qs[j] * d;
  }
}
/* ggml's quantize_row_q8_1_ref: as q8_0, plus s = d * sum(q) in fp16. */
static void q_q8_1(const float *x, void *dst, int64_t n) {
  block_q8_1 *y = dst;
  for (int64_t i = 0; i < n / QK8_1; i++, x += 32) {
    float amax = 0;
    for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(x[j]));
    float d = amax / 127, id = d ? 1.0f / d : 0.0f;
    y[i].d = F2H(d);
    int sum = 0;
    for (int j = 0; j < 16; j++) {
      y[i].qs[j] = (int8_t)roundf(x[j] * id);
      y[i].qs[j + 16] = (int8_t)roundf(x[j + 16] * id);
      sum += y[i].qs[j] + y[i].qs[j + 16];
    }
    y[i].s = F2H(sum * d);
  }
}

/* ---- K-quants -------------------------------------------------------- */

static void deq_q8_k(const void *src, float *y, int64_t n) {
  const block_q8_K *x = src;
  for (int64_t i = 0; i < n / QK_K; i++)
    for (int j = 0; j < QK_K; j++) y[i * QK_K + j] = x[i].d * x[i].qs[j];
}
/* ggml's quantize_row_q8_K_ref: iscale = -127/max where max is the element
 * of largest magnitude (so d is negative when max is positive), ties to
 * even, bsums per 16. */
static void q_q8_k(const float *x, void *dst, int64_t n) {
  block_q8_K *y = dst;
  for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
    float max = 0, amax = 0;
    for (int j = 0; j < QK_K; j++)
      if (fabsf(x[j]) > amax) {
        amax = fabsf(x[j]);
        max = x[j];
      }
    if (!amax) {
      memset(&y[i], 0, sizeof y[i]);
      continue;
    }
    float iscale = -127.f / max;
    for (int j = 0; j < QK_K; j++) {
      int v = nearest_int(iscale * x[j]);
      y[i].qs[j] = (int8_t)(v > 127 ? 127 : v);
    }
    for (int j = 0; j < QK_K / 16; j++) {
      int s = 0;
      for (int l = 0; l < 16; l++) s += y[i].qs[j * 16 + l];
      y[i].bsums[j] = (int16_t)s;
    }
    y[i].d = 1 / iscale;
  }
}

/* Affine K-quant helper: x = d*sc[g]*q - dmin*m[g] with q in [0,nmax] and
 * sc, m in [0,smax]. Scales and mins are rounded up so every element stays
 * inside its group's range (no clipping); q then rounds to nearest. Fills
 * d, dmin (fp16) and sc, m, q (one per element). */
static void kq_affine(const float *x, int ngroups, int gsize, int nmax, int smax, pw_half *d_out,
                      pw_half *dmin_out, uint8_t *sc, uint8_t *m, uint8_t *q) {
  float gmax[16], gmin[16], maxscale = 0, maxmin = 0;
  for (int g = 0; g < ngroups; g++) {
    float mn = 0, mx = 0; /* offset must be <= 0: stored mins are subtracted */
    for (int l = 0; l < gsize; l++) {
      float v = x[g * gsize + l];
      if (v < mn) mn = v;
      if (v > mx) mx = v;
    }
    gmax[g] = mx;
    gmin[g] = -mn;
    if ((mx - mn) / nmax > maxscale) maxscale = (mx - mn) / nmax;
    if (-mn > maxmin) maxmin = -mn;
  }
  *d_out = F2H(maxscale / smax);
  *dmin_out = F2H(maxmin / smax);
  float d = H2F(*d_out), dmin = H2F(*dmin_out);
  for (int g = 0; g < ngroups; g++) {
    int mi = dmin > 0 ? clampi((int)ceilf(gmin[g] / dmin - 1e-3f), 0, smax) : 0;
    float ml = dmin * mi;
    int si = d > 0 ? clampi((int)ceilf((gmax[g] + ml) / (nmax * d) - 1e-3f), 0, smax) : 0;
    float dl = d * si;
    sc[g] = (uint8_t)si;
    m[g] = (uint8_t)mi;
    for (int l = 0; l < gsize; l++)
      q[g * gsize + l] = (uint8_t)(dl > 0 ? clampi(nearest_int((x[g * gsize + l] + ml) / dl), 0, nmax) : 0);
  }
}

/* Symmetric K-quant helper: per group of 16 the element of largest
 * magnitude maps to -qneg; group scales are quantized to [smin,smax]
 * against the largest one (which maps to -sneg). Returns d (fp16); fills
 * ls (signed group scales) and q (signed, in [-qneg, qneg-1]). */
static pw_half kq_symmetric(const float *x, int qneg, int sneg, int smax, int8_t *ls, int8_t *q) {
  float gs[16], maxs = 0;
  for (int g = 0; g < 16; g++) {
    float amax = 0, mx = 0;
    for (int l = 0; l < 16; l++)
      if (fabsf(x[g * 16 + l]) > amax) {
        amax = fabsf(x[g * 16 + l]);
        mx = x[g * 16 + l];
      }
    gs[g] = mx / -qneg;
    if (fabsf(gs[g]) > fabsf(maxs)) maxs = gs[g];
  }
  if (maxs == 0) {
    memset(ls, 0, 16);
    memset(q, 0, QK_K);
    return 0;
  }
  float iscale = -(float)sneg / maxs;
  pw_half dh = F2H(1 / iscale);
  float d = H2F(dh);
  for (int g = 0; g < 16; g++) {
    ls[g] = (int8_t)clampi(nearest_int(iscale * gs[g]), -sneg, smax);
    float dl = d * ls[g];
    for (int l = 0; l < 16; l++)
      q[g * 16 + l] = (int8_t)(dl != 0 ? clampi(nearest_int(x[g * 16 + l] / dl), -qneg, qneg - 1) : 0);
  }
  return dh;
}

static void deq_q2_k(const void *src, float *y, int64_t n) {
  const block_q2_K *x = src;
  for (int64_t i = 0; i < n / QK_K; i++) {
    float d = H2F(x[i].d), dmin = H2F(x[i].dmin);
    for (int h = 0; h < 2; h++)
      for (int j = 0; j < 4; j++)
        for (int l = 0; l < 32; l++) {
          uint8_t sc = x[i].scales[8 * h + 2 * j + l / 16];
          int q = (x[i].qs[32 * h + l] >> (2 * j)) & 3;
          *y++ = d * (sc & 0xF) * q - dmin * (sc >> 4);
        }
  }
}
static void q_q2_k(const float *x, void *dst, int64_t n) {
  block_q2_K *y = dst;
  uint8_t sc[16], m[16], q[QK_K];
  for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
    kq_affine(x, 16, 16, 3, 15, &y[i].d, &y[i].dmin, sc, m, q);
    for (int g = 0; g < 16; g++) y[i].scales[g] = (uint8_t)(sc[g] | (m[g] << 4));
    memset(y[i].qs, 0, sizeof y[i].qs);
    for (int h = 0; h < 2; h++)
      for (int j = 0; j < 4; j++)
        for (int l = 0; l < 32; l++) y[i].qs[32 * h + l] |= (uint8_t)(q[128 * h + 32 * j + l] << (2 * j));
  }
}
static float dot_q2_k(int64_t n, const void *w, const void *xq) {
  const block_q2_K *x = w;
  const block_q8_K *y = xq;
  float s = 0;
  for (int64_t i = 0; i < n / QK_K; i++) {
    int summs = 0, isum = 0;
    for (int g = 0; g < 16; g++) summs += y[i].bsums[g] * (x[i].scales[g] >> 4);
    for (int h = 0; h < 2; h++)
      for (int j = 0; j < 4; j++)
        for (int l = 0; l < 32; l++)
          isum += (x[i].scales[8 * h + 2 * j + l / 16] & 0xF) * ((x[i].qs[32 * h + l] >> (2 * j)) & 3) *
                  y[i].qs[128 * h + 32 * j + l];
    float dall = y[i].d * H2F(x[i].d), dmin = y[i].d * H2F(x[i].dmin);
    s += dall * isum - dmin * summs;
  }
  return s;
}

/* q3_K value of element e = 128h + 32j + l. */
static inline int q3k_val(const block_q3_K *b, int h, int j, int l) {
  int lo = (b->qs[32 * h + l] >> (2 * j)) & 3;
  return lo - ((b->hmask[l] >> (4 * h + j)) & 1 ? 0 : 4);
}
static void deq_q3_k(const void *src, float *y, int64_t n) {
  const block_q3_K *x = src;
  int8_t sc[16];
  for (int64_t i = 0; i < n / QK_K; i++) {
    float d = H2F(x[i].d);
    quants_q3k_scales(x[i].scales, sc);
    for (int h = 0; h < 2; h++)
      for (int j = 0; j < 4; j++)
        for (int l = 0; l < 32; l++) *y++ = d * sc[8 * h + 2 * j + l / 16] * q3k_val(&x[i], h, j, l);
  }
}
static void q_q3_k(const float *x, void *dst, int64_t n) {
  block_q3_K *y = dst;
  int8_t ls[16], q[QK_K];
  for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
    y[i].d = kq_symmetric(x, 4, 32, 31, ls, q);
    memset(y[i].scales, 0, 12);
    for (int g = 0; g < 16; g++) {
      int v = ls[g] + 32;
      if (g < 8)
        y[i].scales[g] = (uint8_t)(v & 0xF);
      else
        y[i].scales[g - 8] |= (uint8_t)((v & 0xF) << 4);
      y[i].scales[8 + g % 4] |= (uint8_t)((v >> 4) << (2 * (g / 4)));
    }
    memset(y[i].qs, 0, sizeof y[i].qs);
    memset(y[i].hmask, 0, sizeof y[i].hmask);
    for (int h = 0; h < 2; h++)
      for (int j = 0; j < 4; j++)
        for (int l = 0; l < 32; l++) {
          int v = q[128 * h + 32 * j + l] + 4; /* 0..7 */
          y[i].qs[32 * h + l] |= (uint8_t)((v & 3) << (2 * j));
          y[i].hmask[l] |= (uint8_t)((v >> 2) << (4 * h + j));
        }
  }
}
static float dot_q3_k(int64_t n, const void *w, const void *xq) {
  const block_q3_K *x = w;
  const block_q8_K *y = xq;
  int8_t sc[16];
  float s = 0;
  for (int64_t i = 0; i < n / QK_K; i++) {
    quants_q3k_scales(x[i].scales, sc);
    int isum = 0;
    for (int h = 0; h < 2; h++)
      for (int j = 0; j < 4; j++)
        for (int l = 0; l < 32; l++)
          isum += sc[8 * h + 2 * j + l / 16] * q3k_val(&x[i], h, j, l) * y[i].qs[128 * h + 32 * j + l];
    s += H2F(x[i].d) * y[i].d * isum;
  }
  return s;
}

static void pack_k4_scales(const uint8_t *sc, const uint8_t *m, uint8_t *out) {
  for (int j = 0; j < 4; j++) {
    out[j] = (uint8_t)((sc[j] & 63) | ((sc[j + 4] >> 4) << 6));
    out[j + 4] = (uint8_t)((m[j] & 63) | ((m[j + 4] >> 4) << 6));
    out[j + 8] = (uint8_t)((sc[j + 4] & 0xF) | ((m[j + 4] & 0xF) << 4));
  }
}

static void deq_q4_k(const void *src, float *y, int64_t n) {
  const block_q4_K *x = src;
  for (int64_t i = 0; i < n / QK_K; i++) {
    float d = H2F(x[i].d), dmin = H2F(x[i].dmin);
    for (int c = 0; c < 4; c++) {
      uint8_t s0, m0, s1, m1;
      quants_get_scale_min_k4(2 * c, x[i].scales, &s0, &m0);
      quants_get_scale_min_k4(2 * c + 1, x[i].scales, &s1, &m1);
      float d1 = d * s0, ml1 = dmin * m0, d2 = d * s1, ml2 = dmin * m1;
      for (int l = 0; l < 32; l++) *y++ = d1 * (x[i].qs[32 * c + l] & 0xF) - ml1;
      for (int l = 0; l < 32; l++) *y++ = d2 * (x[i].qs[32 * c + l] >> 4) - ml2;
    }
  }
}
static void q_q4_k(const float *x, void *dst, int64_t n) {
  block_q4_K *y = dst;
  uint8_t sc[8], m[8], q[QK_K];
  for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
    kq_affine(x, 8, 32, 15, 63, &y[i].d, &y[i].dmin, sc, m, q);
    pack_k4_scales(sc, m, y[i].scales);
    for (int c = 0; c < 4; c++)
      for (int l = 0; l < 32; l++) y[i].qs[32 * c + l] = (uint8_t)(q[64 * c + l] | (q[64 * c + 32 + l] << 4));
  }
}
static float dot_q4_k(int64_t n, const void *w, const void *xq) {
  const block_q4_K *x = w;
  const block_q8_K *y = xq;
  float s = 0;
  for (int64_t i = 0; i < n / QK_K; i++) {
    int isum = 0, summs = 0;
    for (int c = 0; c < 4; c++) {
      uint8_t s0, m0, s1, m1;
      quants_get_scale_min_k4(2 * c, x[i].scales, &s0, &m0);
      quants_get_scale_min_k4(2 * c + 1, x[i].scales, &s1, &m1);
      int a = 0, b = 0;
      for (int l = 0; l < 32; l++) {
        a += (x[i].qs[32 * c + l] & 0xF) * y[i].qs[64 * c + l];
        b += (x[i].qs[32 * c + l] >> 4) * y[i].qs[64 * c + 32 + l];
      }
      isum += s0 * a + s1 * b;
      summs += m0 * (y[i].bsums[4 * c] + y[i].bsums[4 * c + 1]) + m1 * (y[i].bsums[4 * c + 2] + y[i].bsums[4 * c + 3]);
    }
    float d = H2F(x[i].d) * y[i].d, dmin = H2F(x[i].dmin) * y[i].d;
    s += d * isum - dmin * summs;
  }
  return s;
}

static void deq_q5_k(const void *src, float *y, int64_t n) {
  const block_q5_K *x = src;
  for (int64_t i = 0; i < n / QK_K; i++) {
    float d = H2F(x[i].d), dmin = H2F(x[i].dmin);
    for (int c = 0; c < 4; c++) {
      uint8_t s0, m0, s1, m1;
      quants_get_scale_min_k4(2 * c, x[i].scales, &s0, &m0);
      quants_get_scale_min_k4(2 * c + 1, x[i].scales, &s1, &m1);
      float d1 = d * s0, ml1 = dmin * m0, d2 = d * s1, ml2 = dmin * m1;
      for (int l = 0; l < 32; l++)
        *y++ = d1 * ((x[i].qs[32 * c + l] & 0xF) + (((x[i].qh[l] >> (2 * c)) & 1) << 4)) - ml1;
      for (int l = 0; l < 32; l++)
        *y++ = d2 * ((x[i].qs[32 * c + l] >> 4) + (((x[i].qh[l] >> (2 * c + 1)) & 1) << 4)) - ml2;
    }
  }
}
static void q_q5_k(const float *x, void *dst, int64_t n) {
  block_q5_K *y = dst;
  uint8_t sc[8], m[8], q[QK_K];
  for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
    kq_affine(x, 8, 32, 31, 63, &y[i].d, &y[i].dmin, sc, m, q);
    pack_k4_scales(sc, m, y[i].scales);
    memset(y[i].qh, 0, sizeof y[i].qh);
    for (int c = 0; c < 4; c++)
      for (int l = 0; l < 32; l++) {
        int a = q[64 * c + l], b = q[64 * c + 32 + l];
        y[i].qs[32 * c + l] = (uint8_t)((a & 0xF) | ((b & 0xF) << 4));
        y[i].qh[l] |= (uint8_t)(((a >> 4) << (2 * c)) | ((b >> 4) << (2 * c + 1)));
      }
  }
}
static float dot_q5_k(int64_t n, const void *w, const void *xq) {
  const block_q5_K *x = w;
  const block_q8_K *y = xq;
  float s = 0;
  for (int64_t i = 0; i < n / QK_K; i++) {
    int isum = 0, summs = 0;
    for (int c = 0; c < 4; c++) {
      uint8_t s0, m0, s1, m1;
      quants_get_scale_min_k4(2 * c, x[i].scales, &s0, &m0);
      quants_get_scale_min_k4(2 * c + 1, x[i].scales, &s1, &m1);
      int a = 0, b = 0;
      for (int l = 0; l < 32; l++) {
        a += ((x[i].qs[32 * c + l] & 0xF) + (((x[i].qh[l] >> (2 * c)) & 1) << 4)) * y[i].qs[64 * c + l];
        b += ((x[i].qs[32 * c + l] >> 4) + (((x[i].qh[l] >> (2 * c + 1)) & 1) << 4)) * y[i].qs[64 * c + 32 + l];
      }
      isum += s0 * a + s1 * b;
      summs += m0 * (y[i].bsums[4 * c] + y[i].bsums[4 * c + 1]) + m1 * (y[i].bsums[4 * c + 2] + y[i].bsums[4 * c + 3]);
    }
    float d = H2F(x[i].d) * y[i].d, dmin = H2F(x[i].dmin) * y[i].d;
    s += d * isum - dmin * summs;
  }
  return s;
}

/* q6_K value (0..63) of element 128h + 32k + l. */
static inline int q6k_val(const block_q6_K *b, int h, int k, int l) {
  uint8_t lo = b->ql[64 * h + 32 * (k & 1) + l];
  int v = k < 2 ? (lo & 0xF) : (lo >> 4);
  return v | (((b->qh[32 * h + l] >> (2 * k)) & 3) << 4);
}
static void deq_q6_k(const void *src, float *y, int64_t n) {
  const block_q6_K *x = src;
  for (int64_t i = 0; i < n / QK_K; i++) {
    float d = H2F(x[i].d);
    for (int h = 0; h < 2; h++)
      for (int k = 0; k < 4; k++)
        for (int l = 0; l < 32; l++) *y++ = d * x[i].scales[8 * h + 2 * k + l / 16] * (q6k_val(&x[i], h, k, l) - 32);
  }
}
static void q_q6_k(const float *x, void *dst, int64_t n) {
  block_q6_K *y = dst;
  int8_t ls[16], q[QK_K];
  for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
    y[i].d = kq_symmetric(x, 32, 128, 127, ls, q);
    memcpy(y[i].scales, ls, 16);
    memset(y[i].ql, 0, sizeof y[i].ql);
    memset(y[i].qh, 0, sizeof y[i].qh);
    for (int h = 0; h < 2; h++)
      for (int k = 0; k < 4; k++)
        for (int l = 0; l < 32; l++) {
          int v = q[128 * h + 32 * k + l] + 32; /* 0..63 */
          y[i].ql[64 * h + 32 * (k & 1) + l] |= (uint8_t)((v & 0xF) << (k < 2 ? 0 : 4));
          y[i].qh[32 * h + l] |= (uint8_t)((v >> 4) << (2 * k));
        }
  }
}
static float dot_q6_k(int64_t n, const void *w, const void *xq) {
  const block_q6_K *x = w;
  const block_q8_K *y = xq;
  float s = 0;
  for (int64_t i = 0; i < n / QK_K; i++) {
    int isum = 0;
    for (int h = 0; h < 2; h++)
      for (int k = 0; k < 4; k++)
        for (int l = 0; l < 32; l++)
          isum += x[i].scales[8 * h + 2 * k + l / 16] * (q6k_val(&x[i], h, k, l) - 32) * y[i].qs[128 * h + 32 * k + l];
    s += H2F(x[i].d) * y[i].d * isum;
  }
  return s;
}

/* ---- non-linear 4-bit types ------------------------------------------------ */

const int8_t pw_kvalues_iq4nl[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
const int8_t pw_kvalues_mxfp4[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

static void deq_iq4_nl(const void *src, float *y, int64_t n) {
  const block_iq4_nl *x = src;
  for (int64_t i = 0; i < n / QK4_NL; i++, y += QK4_NL) {
    const float d = H2F(x[i].d);
    for (int j = 0; j < 16; j++) {
      y[j] = d * pw_kvalues_iq4nl[x[i].qs[j] & 0xF];
      y[j + 16] = d * pw_kvalues_iq4nl[x[i].qs[j] >> 4];
    }
  }
}

/* the 6-bit scale of group g (0..7) of an IQ4_XS super-block, biased by 32 */
static inline int iq4xs_scale(const block_iq4_xs *b, int g) {
  return ((b->scales_l[g / 2] >> (4 * (g % 2))) & 0xF) | (((b->scales_h >> (2 * g)) & 3) << 4);
}

static void deq_iq4_xs(const void *src, float *y, int64_t n) {
  const block_iq4_xs *x = src;
  for (int64_t i = 0; i < n / QK_K; i++) {
    const float d = H2F(x[i].d);
    for (int g = 0; g < QK_K / 32; g++, y += 32) {
      const float dl = d * (iq4xs_scale(&x[i], g) - 32);
      const uint8_t *qs = x[i].qs + 16 * g;
      for (int j = 0; j < 16; j++) {
        y[j] = dl * pw_kvalues_iq4nl[qs[j] & 0xF];
        y[j + 16] = dl * pw_kvalues_iq4nl[qs[j] >> 4];
      }
    }
  }
}

static void deq_mxfp4(const void *src, float *y, int64_t n) {
  const block_mxfp4 *x = src;
  for (int64_t i = 0; i < n / QK_MXFP4; i++, y += QK_MXFP4) {
    const float d = pw_e8m0_half(x[i].e);
    for (int j = 0; j < 16; j++) {
      y[j] = pw_kvalues_mxfp4[x[i].qs[j] & 0xF] * d;
      y[j + 16] = pw_kvalues_mxfp4[x[i].qs[j] >> 4] * d;
    }
  }
}

/* Index of the IQ4 table value nearest to v (v in table units), as
 * llama.cpp's best_index_int8 picks it: lo = the last entry not above v
 * (by bisection; 0 below the table, 15 above it), then lo if
 * v - t[lo] < t[lo + 1] - v, else lo + 1. With t[lo] and t[lo + 1] small
 * integers, that test holds exactly below their midpoint (rounding of each
 * side is monotonic in v; a float search for where it turns finds the
 * midpoint itself for all 15 pairs, which test_quants_llamacpp checks),
 * so the index is the number of midpoints not above v: 15 comparisons
 * without a table lookup, four values at a time. A NaN is "not below"
 * every midpoint and takes 15, as in the bisection. */
static const float k_iq4_mid[15] = {-115.5f, -93.5f, -74.f, -57.f, -42.f, -28.5f, -16.f, -4.5f,
                                    7.f,      19.f,   31.5f, 45.5f, 61.f,  79.f,   101.f};

/* l[j] = the IQ4 index of id * x[j] for a group of 32, four at a time in the
 * compiler's vector types (SSE2 on any x86-64): a comparison is -1 where
 * v < m, so 15 plus their sum counts the midpoints not above v (all 15
 * for a NaN). */
typedef float iq4_v4f __attribute__((vector_size(16)));
typedef int32_t iq4_v4i __attribute__((vector_size(16)));
static void iq4_index32(const float *x, float id, uint8_t *l) {
  for (int j = 0; j < 32; j += 4) {
    iq4_v4f v;
    memcpy(&v, x + j, sizeof v);
    v = v * id;
    iq4_v4i n = {15, 15, 15, 15};
    for (int k = 0; k < 15; k++) n += v < k_iq4_mid[k];
    for (int i = 0; i < 4; i++) l[j + i] = (uint8_t)n[i];
  }
}

const float *pw_iq4_midpoints(void) {
  return k_iq4_mid;
}

/* Weighted least-squares fit of one group of 32 to the IQ4 grid, as
 * llama.cpp quantizes IQ4_NL/IQ4_XS when it has no importance matrix:
 * the weights are x^2; the scale is fitted first at the grid's largest
 * magnitude (-127) and then at 15 neighbouring grid extents (ntry = 7 on
 * each side), keeping the fit with the largest sumqx^2/sumq2. Returns the
 * float scale (0 for a group below 1e-15). Every float operation is in
 * llama.cpp's order, so the scales (and with them the files) are
 * bit-identical. */
#define IQ4_NTRY 7
static float iq4_group_fit(const float *xb) {
  const int8_t *t = pw_kvalues_iq4nl;
  float w[32], amax = 0, max = 0;
  for (int j = 0; j < 32; j++) {
    w[j] = xb[j] * xb[j];
    if (fabsf(xb[j]) > amax) {
      amax = fabsf(xb[j]);
      max = xb[j];
    }
  }
  if (amax < 1e-15f) return 0;
  float id = 1 / (-max / (float)t[0]);
  float sumqx = 0, sumq2 = 0;
  uint8_t l[32];
  iq4_index32(xb, id, l);
  for (int j = 0; j < 32; j++) {
    const float q = t[l[j]];
    sumqx += w[j] * q * xb[j];
    sumq2 += w[j] * q * q;
  }
  float d = sumq2 > 0 ? sumqx / sumq2 : 0.f;
  float best = d * sumqx;
  for (int k = -IQ4_NTRY; k <= IQ4_NTRY; k++) {
    id = (float)(k + t[0]) / max;
    sumqx = sumq2 = 0;
    iq4_index32(xb, id, l);
    for (int j = 0; j < 32; j++) {
      const float q = t[l[j]];
      sumqx += w[j] * q * xb[j];
      sumq2 += w[j] * q * q;
    }
    if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
      d = sumqx / sumq2;
      best = d * sumqx;
    }
  }
  return d;
}

/* 32 indices -> 16 bytes, element j low nibble, j + 16 high */
static void iq4_pack(const uint8_t *l, uint8_t *qs) {
  for (int j = 0; j < 16; j++) qs[j] = (uint8_t)(l[j] | (l[j + 16] << 4));
}

/* IQ4_NL weight quantizer (no importance matrix; see iq4_group_fit): the
 * indices are re-picked against the unrounded fitted scale. */
static void q_iq4_nl(const float *x, void *dst, int64_t n) {
  block_iq4_nl *y = dst;
  uint8_t l[32];
  for (int64_t i = 0; i < n / QK4_NL; i++, x += QK4_NL) {
    const float d = iq4_group_fit(x);
    y[i].d = F2H(d);
    const float id = d ? 1 / d : 0.f;
    iq4_index32(x, id, l);
    iq4_pack(l, y[i].qs);
  }
}

/* IQ4_XS weight quantizer (no importance matrix): each group's scale is
 * fitted as for IQ4_NL, the super-block scale is the largest (by
 * magnitude, first on ties) over -32, group scales round to 6 bits in
 * [-32, 31], and every index is re-picked against its group's rounded
 * scale. An all-zero super-block stores d = -0 (fp16 0x8000), as
 * llama.cpp does. */
static void q_iq4_xs(const float *x, void *dst, int64_t n) {
  block_iq4_xs *y = dst;
  uint8_t l[32];
  float sc[QK_K / 32];
  for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
    float max_scale = 0, amax_scale = 0;
    for (int g = 0; g < QK_K / 32; g++) {
      sc[g] = iq4_group_fit(x + 32 * g);
      if (fabsf(sc[g]) > amax_scale) {
        amax_scale = fabsf(sc[g]);
        max_scale = sc[g];
      }
    }
    const float d = -max_scale / 32;
    y[i].d = F2H(d);
    const float id = d ? 1 / d : 0.f;
    y[i].scales_h = 0;
    memset(y[i].scales_l, 0, sizeof y[i].scales_l);
    for (int g = 0; g < QK_K / 32; g++) {
      const int ls = clampi(nearest_int(id * sc[g]), -32, 31);
      const float dl = d * ls;
      const float idl = dl ? 1 / dl : 0.f;
      iq4_index32(x + 32 * g, idl, l);
      iq4_pack(l, y[i].qs + 16 * g);
      y[i].scales_l[g / 2] |= (uint8_t)(((ls + 32) & 0xF) << (4 * (g % 2)));
      y[i].scales_h |= (uint16_t)(((ls + 32) >> 4) << (2 * g));
    }
  }
}

/* Nearest E2M1 value to v at scale d: the first of equally near ones in
 * table order (so +0, never -0), llama.cpp's search. */
static int mxfp4_index(float v, float d) {
  int best = 0;
  float best_err = fabsf(pw_kvalues_mxfp4[0] * d - v);
  for (int k = 1; k < 16; k++) {
    const float err = fabsf(pw_kvalues_mxfp4[k] * d - v);
    if (err < best_err) {
      best = k;
      best_err = err;
    }
  }
  return best;
}

/* MXFP4 quantizer (llama.cpp's quantize_row_mxfp4_ref; it takes no
 * importance matrix): the shared exponent puts the largest magnitude in
 * [4, 8) times the half scale, i.e. e = floor(log2(amax)) - 2 + 127, and
 * every element rounds to the nearest value. Exponents outside [0, 255]
 * (amax below 2^-125 or not finite), where llama.cpp's conversion is
 * undefined, are clamped. */
static void q_mxfp4(const float *x, void *dst, int64_t n) {
  block_mxfp4 *y = dst;
  for (int64_t i = 0; i < n / QK_MXFP4; i++, x += QK_MXFP4) {
    float amax = 0;
    for (int j = 0; j < QK_MXFP4; j++)
      if (amax < fabsf(x[j])) amax = fabsf(x[j]);
    float ef = amax > 0 ? floorf(log2f(amax)) - 2 + 127 : 0;
    if (!(ef >= 0)) ef = 0;
    if (ef > 255) ef = 255;
    y[i].e = (uint8_t)ef;
    const float d = pw_e8m0_half(y[i].e);
    for (int j = 0; j < 16; j++)
      y[i].qs[j] = (uint8_t)(mxfp4_index(x[j], d) | (mxfp4_index(x[j + 16], d) << 4));
  }
}

/* Dots in ggml's scalar recipe: integer sums per block of 32, one float
 * scale product per block (IQ4_XS: per group, the super-block's d times
 * the activation's d times the group scale). */
static float dot_iq4_nl(int64_t n, const void *w, const void *xq) {
  const block_iq4_nl *x = w;
  const block_q8_0 *y = xq;
  float s = 0;
  for (int64_t i = 0; i < n / QK4_NL; i++) {
    int sumi = 0;
    for (int j = 0; j < 16; j++)
      sumi += y[i].qs[j] * pw_kvalues_iq4nl[x[i].qs[j] & 0xF] + y[i].qs[j + 16] * pw_kvalues_iq4nl[x[i].qs[j] >> 4];
    s += (H2F(y[i].d) * H2F(x[i].d)) * sumi;
  }
  return s;
}

static float dot_iq4_xs(int64_t n, const void *w, const void *xq) {
  const block_iq4_xs *x = w;
  const block_q8_K *y = xq;
  float s = 0;
  for (int64_t i = 0; i < n / QK_K; i++) {
    const float d4d8 = H2F(x[i].d) * y[i].d;
    for (int g = 0; g < QK_K / 32; g++) {
      const uint8_t *qs = x[i].qs + 16 * g;
      const int8_t *q8 = y[i].qs + 32 * g;
      int sumi = 0;
      for (int j = 0; j < 16; j++)
        sumi += q8[j] * pw_kvalues_iq4nl[qs[j] & 0xF] + q8[j + 16] * pw_kvalues_iq4nl[qs[j] >> 4];
      s += (d4d8 * (iq4xs_scale(&x[i], g) - 32)) * sumi;
    }
  }
  return s;
}

static float dot_mxfp4(int64_t n, const void *w, const void *xq) {
  const block_mxfp4 *x = w;
  const block_q8_0 *y = xq;
  float s = 0;
  for (int64_t i = 0; i < n / QK_MXFP4; i++) {
    int sumi = 0;
    for (int j = 0; j < 16; j++)
      sumi += y[i].qs[j] * pw_kvalues_mxfp4[x[i].qs[j] & 0xF] + y[i].qs[j + 16] * pw_kvalues_mxfp4[x[i].qs[j] >> 4];
    s += (H2F(y[i].d) * pw_e8m0_half(x[i].e)) * sumi;
  }
  return s;
}

/* ---- table ------------------------------------------------------------ */

#define REF_VEC_DOT(name)                                                                      \
  static void vd_##name(int64_t n, const void *w, const void *x, size_t xs, int nx, float *out) { \
    for (int j = 0; j < nx; j++) out[j] = dot_##name(n, w, (const char *)x + (size_t)j * xs);  \
  }
REF_VEC_DOT(f32)
REF_VEC_DOT(f16)
REF_VEC_DOT(bf16)
REF_VEC_DOT(q4_0)
REF_VEC_DOT(q4_1)
REF_VEC_DOT(q5_0)
REF_VEC_DOT(q5_1)
REF_VEC_DOT(q8_0)
REF_VEC_DOT(q2_k)
REF_VEC_DOT(q3_k)
REF_VEC_DOT(q4_k)
REF_VEC_DOT(q5_k)
REF_VEC_DOT(q6_k)
REF_VEC_DOT(iq4_nl)
REF_VEC_DOT(iq4_xs)
REF_VEC_DOT(mxfp4)

typedef struct {
  uint32_t dt;
  pw_to_float_fn to;
  pw_from_float_fn from;
  pw_vec_dot_fn dot;
  uint32_t vdt;
} ref_entry;

static const ref_entry g_ref[] = {
    {PW_DT_F32, deq_f32, q_f32, vd_f32, PW_DT_F32},
    {PW_DT_F16, deq_f16, q_f16, vd_f16, PW_DT_F16},
    {PW_DT_BF16, deq_bf16, q_bf16, vd_bf16, PW_DT_BF16},
    {PW_DT_Q4_0, deq_q4_0, q_q4_0, vd_q4_0, PW_DT_Q8_0},
    {PW_DT_Q4_1, deq_q4_1, q_q4_1, vd_q4_1, PW_DT_Q8_1},
    {PW_DT_Q5_0, deq_q5_0, q_q5_0, vd_q5_0, PW_DT_Q8_0},
    {PW_DT_Q5_1, deq_q5_1, q_q5_1, vd_q5_1, PW_DT_Q8_1},
    {PW_DT_Q8_0, deq_q8_0, q_q8_0, vd_q8_0, PW_DT_Q8_0},
    {PW_DT_Q8_1, deq_q8_1, q_q8_1, NULL, PW_DT_Q8_1},
    {PW_DT_Q2_K, deq_q2_k, q_q2_k, vd_q2_k, PW_DT_Q8_K},
    {PW_DT_Q3_K, deq_q3_k, q_q3_k, vd_q3_k, PW_DT_Q8_K},
    {PW_DT_Q4_K, deq_q4_k, q_q4_k, vd_q4_k, PW_DT_Q8_K},
    {PW_DT_Q5_K, deq_q5_k, q_q5_k, vd_q5_k, PW_DT_Q8_K},
    {PW_DT_Q6_K, deq_q6_k, q_q6_k, vd_q6_k, PW_DT_Q8_K},
    {PW_DT_Q8_K, deq_q8_k, q_q8_k, NULL, PW_DT_Q8_K},
    {PW_DT_IQ4_NL, deq_iq4_nl, q_iq4_nl, vd_iq4_nl, PW_DT_Q8_0},
    {PW_DT_IQ4_XS, deq_iq4_xs, q_iq4_xs, vd_iq4_xs, PW_DT_Q8_K},
    {PW_DT_MXFP4, deq_mxfp4, q_mxfp4, vd_mxfp4, PW_DT_Q8_0},
};

void quants_fill_ref(pw_traits *tab) {
  for (size_t i = 0; i < sizeof g_ref / sizeof g_ref[0]; i++) {
    const ref_entry *e = &g_ref[i];
    const pw_dtype_info *info = pw_dtype_get(e->dt);
    PW_ASSERT(info != NULL);
    pw_traits *t = &tab[e->dt];
    t->dtype = e->dt;
    t->name = info->name;
    t->blck = info->blck;
    t->type_size = info->type_size;
    t->to_float = e->to;
    t->from_float = e->from;
    t->vec_dot = e->dot;
    t->vec_dot_type = e->vdt;
    t->impl = "scalar";
  }
}

static const ref_entry *ref_find(uint32_t dt) {
  for (size_t i = 0; i < sizeof g_ref / sizeof g_ref[0]; i++)
    if (g_ref[i].dt == dt) return &g_ref[i];
  return NULL;
}

static const ref_entry *ref_check(uint32_t dt, int64_t n) {
  const ref_entry *e = ref_find(dt);
  PW_ASSERT(e != NULL);
  PW_ASSERT(n >= 0 && n % pw_dtype_get(dt)->blck == 0);
  return e;
}

void pw_ref_dequant(uint32_t dtype, const void *src, float *dst, int64_t n) {
  ref_check(dtype, n)->to(src, dst, n);
}

void pw_ref_quantize(uint32_t dtype, const float *src, void *dst, int64_t n) {
  ref_check(dtype, n)->from(src, dst, n);
}

float pw_ref_vec_dot(uint32_t wtype, int64_t n, const void *w, const void *xq) {
  const ref_entry *e = ref_check(wtype, n);
  PW_ASSERT(e->dot != NULL);
  float r;
  e->dot(n, w, xq, 0, 1, &r);
  return r;
}

uint32_t pw_ref_vec_dot_type(uint32_t wtype) {
  const ref_entry *e = ref_find(wtype);
  return e && e->dot ? e->vdt : UINT32_MAX;
}
