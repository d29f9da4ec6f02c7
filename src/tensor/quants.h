/* quants.h - the ggml/GGUF quantized block layouts, fp16/bf16 conversion and
 * the scalar reference kernels (dequantize, quantize, dot product) that are
 * the test oracles for every SIMD variant.
 *
 * Layouts are bit-exact with ggml (ggml-common.h) because the weights come
 * straight from GGUF files. Activation quantization (Q8_0, Q8_1, Q8_K) follows
 * ggml's reference rounding so dot products agree with llama.cpp.
 *
 * This module is not the dispatch layer (traits.h picks the fastest kernel)
 * and not the matrix multiply (matmul.h). Nothing here allocates. */
#ifndef PW_TENSOR_QUANTS_H
#define PW_TENSOR_QUANTS_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define QK4_0 32
#define QK4_1 32
#define QK5_0 32
#define QK5_1 32
#define QK8_0 32
#define QK8_1 32
#define QK_K 256
#define K_SCALE_SIZE 12

/* fp16 fields are IEEE binary16 bit patterns. */
typedef uint16_t pw_half;

/* x = d * (q - 8), q in [0,15]; qs[j] holds element j (low nibble) and
 * element j+16 (high nibble). */
typedef struct {
  pw_half d;
  uint8_t qs[QK4_0 / 2];
} block_q4_0;
_Static_assert(sizeof(block_q4_0) == 18, "block_q4_0 size");

/* x = d * q + m, q in [0,15]; nibble order as q4_0. */
typedef struct {
  pw_half d;
  pw_half m;
  uint8_t qs[QK4_1 / 2];
} block_q4_1;
_Static_assert(sizeof(block_q4_1) == 20, "block_q4_1 size");

/* x = d * (q - 16), q in [0,31]; bit 4 of element j is bit j of qh
 * (little-endian u32), low nibbles as q4_0. */
typedef struct {
  pw_half d;
  uint8_t qh[4];
  uint8_t qs[QK5_0 / 2];
} block_q5_0;
_Static_assert(sizeof(block_q5_0) == 22, "block_q5_0 size");

/* x = d * q + m, q in [0,31]; bits as q5_0. */
typedef struct {
  pw_half d;
  pw_half m;
  uint8_t qh[4];
  uint8_t qs[QK5_1 / 2];
} block_q5_1;
_Static_assert(sizeof(block_q5_1) == 24, "block_q5_1 size");

/* x = d * q, q in [-127,127] (ggml never produces -128; the AVX2 dot
 * products assume it, as ggml's do). */
typedef struct {
  pw_half d;
  int8_t qs[QK8_0];
} block_q8_0;
_Static_assert(sizeof(block_q8_0) == 34, "block_q8_0 size");

/* Activation format for q4_1/q5_1: as q8_0 plus s = d * sum(qs). */
typedef struct {
  pw_half d;
  pw_half s;
  int8_t qs[QK8_1];
} block_q8_1;
_Static_assert(sizeof(block_q8_1) == 36, "block_q8_1 size");

/* Super-block of 256 = 16 groups of 16. scales[i]: low nibble = scale,
 * high nibble = min of group i. x = d*sc*q - dmin*m, q in [0,3]. Element
 * 128*h + 32*j + l (l<32) is bits 2j..2j+1 of qs[32*h + l]; its group is
 * 8*h + 2*j + l/16. */
typedef struct {
  uint8_t scales[QK_K / 16];
  uint8_t qs[QK_K / 4];
  pw_half d;
  pw_half dmin;
} block_q2_K;
_Static_assert(sizeof(block_q2_K) == 84, "block_q2_K size");

/* 16 groups of 16, 6-bit scales s (biased by 32) packed into 12 bytes:
 * low nibble of group g is scales[g] (g<8) or scales[g-8]>>4, its top two
 * bits are bits 2*(g/4) of scales[8 + g%4]. x = d*(s-32)*q, q in [-4,3]:
 * low two bits as q2_K, q = low - (hmask bit set ? 0 : 4) where element
 * 128*h + 32*j + l uses bit 4*h + j of hmask[l]. */
typedef struct {
  uint8_t hmask[QK_K / 8];
  uint8_t qs[QK_K / 4];
  uint8_t scales[12];
  pw_half d;
} block_q3_K;
_Static_assert(sizeof(block_q3_K) == 110, "block_q3_K size");

/* 8 groups of 32 with 6-bit scale and min (packing: see
 * quants_get_scale_min_k4). x = d*sc*q - dmin*m, q in [0,15]; element
 * 64*c + l is the low nibble of qs[32*c + l], element 64*c + 32 + l its high
 * nibble. */
typedef struct {
  pw_half d;
  pw_half dmin;
  uint8_t scales[K_SCALE_SIZE];
  uint8_t qs[QK_K / 2];
} block_q4_K;
_Static_assert(sizeof(block_q4_K) == 144, "block_q4_K size");

/* As q4_K with a fifth bit: element 64*c + l has bit 2c of qh[l], element
 * 64*c + 32 + l bit 2c+1. q in [0,31]. */
typedef struct {
  pw_half d;
  pw_half dmin;
  uint8_t scales[K_SCALE_SIZE];
  uint8_t qh[QK_K / 8];
  uint8_t qs[QK_K / 2];
} block_q5_K;
_Static_assert(sizeof(block_q5_K) == 176, "block_q5_K size");

/* 16 groups of 16 with int8 scales; x = d*sc*(q-32), q in [0,63]. In half h
 * (128 elements) element 128h + 32k + l (k<4, l<32): low nibble from
 * ql[64h + 32*(k&1) + l] (k<2 low nibble, k>=2 high nibble), top two bits
 * from qh[32h + l] bits 2k..2k+1; its group is 8h + 2k + l/16. */
typedef struct {
  uint8_t ql[QK_K / 2];
  uint8_t qh[QK_K / 4];
  int8_t scales[QK_K / 16];
  pw_half d;
} block_q6_K;
_Static_assert(sizeof(block_q6_K) == 210, "block_q6_K size");

/* Activation format for all K-quants: float scale (may be negative: ggml
 * divides by -127/max), and bsums[i] = sum of qs[16i..16i+15]. */
typedef struct {
  float d;
  int8_t qs[QK_K];
  int16_t bsums[QK_K / 16];
} block_q8_K;
_Static_assert(sizeof(block_q8_K) == 292, "block_q8_K size");

/* ---- non-linear 4-bit types ----------------------------------------------
 * Each 4-bit index selects an int8 value from a 16-entry table (below); the
 * block scale multiplies that value. */
#define QK4_NL 32
#define QK_MXFP4 32

/* x = d * pw_kvalues_iq4nl[q]; qs[j] holds element j (low nibble) and
 * element j+16 (high nibble), as q4_0. */
typedef struct {
  pw_half d;
  uint8_t qs[QK4_NL / 2];
} block_iq4_nl;
_Static_assert(sizeof(block_iq4_nl) == 18, "block_iq4_nl size");

/* Super-block of 256 = 8 groups of 32 with 6-bit scales ls (biased by 32):
 * group g's low 4 bits are nibble g%2 of scales_l[g/2], its top 2 bits are
 * bits 2g..2g+1 of scales_h (a little-endian u16). x = d * (ls - 32) *
 * pw_kvalues_iq4nl[q]; within group g, qs[16g + j] holds element 32g + j
 * (low nibble) and 32g + j + 16 (high nibble). */
typedef struct {
  pw_half d;
  uint16_t scales_h;
  uint8_t scales_l[QK_K / 64];
  uint8_t qs[QK_K / 2];
} block_iq4_xs;
_Static_assert(sizeof(block_iq4_xs) == 136, "block_iq4_xs size");

/* OCP microscaling FP4: e is an E8M0 exponent (scale 2^(e-127)), each
 * nibble an E2M1 value (sign, 2-bit exponent, 1-bit mantissa). The table
 * holds the E2M1 values doubled (integers), so x = pw_e8m0_half(e) *
 * pw_kvalues_mxfp4[q]. Nibble order as q4_0. */
typedef struct {
  uint8_t e;
  uint8_t qs[QK_MXFP4 / 2];
} block_mxfp4;
_Static_assert(sizeof(block_mxfp4) == 17, "block_mxfp4 size");

/* The IQ4_NL/IQ4_XS value table (ggml's kvalues_iq4nl): a non-uniform grid,
 * denser near zero where weights cluster. */
extern const int8_t pw_kvalues_iq4nl[16];
/* The 15 midpoints between neighbouring entries of that table: the IQ4
 * quantizers' nearest index of v is the number of midpoints not above v. */
const float *pw_iq4_midpoints(void);
/* E2M1 values times two, by nibble: 0, 0.5, 1, 1.5, 2, 3, 4, 6 and their
 * negatives (bit 3 is the sign). */
extern const int8_t pw_kvalues_mxfp4[16];

/* 2^(e-128): half the E8M0 scale, matching the doubled table. e = 0 and 1
 * are binary32 subnormals; no NaN (e = 255 gives 2^127). */
static inline float pw_e8m0_half(uint8_t e) {
  uint32_t bits = e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23;
  float f;
  memcpy(&f, &bits, 4);
  return f;
}

/* IEEE binary16 <-> binary32, round-to-nearest-even, NaN stays NaN (quiet,
 * top payload bits kept, as the F16C instructions do). */
float pw_fp16_to_fp32(uint16_t h);
uint16_t pw_fp32_to_fp16(float f);
/* bfloat16: the top half of a binary32; rounding to nearest even, NaN
 * forced quiet (ggml's recipe). */
float pw_bf16_to_fp32(uint16_t h);
uint16_t pw_fp32_to_bf16(float f);

/* Scalar references, by dtype id. n is the element count and must be a
 * multiple of the block size (PW_ASSERT). Unknown dtypes hit PW_ASSERT.
 * src/dst/w/xq are borrowed. */
void pw_ref_dequant(uint32_t dtype, const void *src, float *dst, int64_t n);
void pw_ref_quantize(uint32_t dtype, const float *src, void *dst, int64_t n);
/* Dot product of a weight row (wtype) with an activation row already in
 * wtype's vec_dot_type (pw_ref_vec_dot_type). */
float pw_ref_vec_dot(uint32_t wtype, int64_t n, const void *w, const void *xq);
/* vec_dot_type of a weight type as in ggml, or UINT32_MAX if unsupported. */
uint32_t pw_ref_vec_dot_type(uint32_t wtype);

/* Unpacks scale and min j (0..7) of q4_K/q5_K scales[12]. */
static inline void quants_get_scale_min_k4(int j, const uint8_t *q, uint8_t *d, uint8_t *m) {
  if (j < 4) {
    *d = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *d = (uint8_t)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    *m = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

/* Unpacks the 16 six-bit q3_K scales into signed values s-32. */
static inline void quants_q3k_scales(const uint8_t *s, int8_t out[16]) {
  for (int g = 0; g < 16; g++) {
    int lo = g < 8 ? (s[g] & 0xF) : (s[g - 8] >> 4);
    int hi = (s[8 + g % 4] >> (2 * (g / 4))) & 3;
    out[g] = (int8_t)((lo | (hi << 4)) - 32);
  }
}

#endif
