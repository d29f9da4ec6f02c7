/* test_quants.c - block layouts, fp16/bf16 conversion, scalar reference
 * kernels, and the kernels of every implementation level the CPU has
 * (AVX2, AVX-VNNI, AVX-512 VNNI) against their references. */
#include "tensor/dtype.h"
#include "tensor/quants.h"
#include "tensor/traits.h"
#include "test.h"

#include <float.h>
#include <stdint.h>

/* ---- helpers ------------------------------------------------------------ */

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;
static uint32_t rnd(void) {
  g_rng ^= g_rng << 13;
  g_rng ^= g_rng >> 7;
  g_rng ^= g_rng << 17;
  return (uint32_t)(g_rng >> 16);
}
static float frand(void) { return (float)(rnd() & 0xFFFFFF) / 16777216.0f * 2 - 1; } /* [-1,1) */
static float grand(void) { return (frand() + frand() + frand() + frand()) * 0.8660254f; } /* ~N(0,1) */

static float h2f(uint16_t h) { return pw_fp16_to_fp32(h); }
static uint16_t f2h(float f) { return pw_fp32_to_fp16(f); }
static uint32_t fbits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}
static float bitsf(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

static const uint32_t WTYPES[] = {PW_DT_F32,  PW_DT_F16,  PW_DT_BF16, PW_DT_Q4_0, PW_DT_Q4_1,
                                  PW_DT_Q5_0, PW_DT_Q5_1, PW_DT_Q8_0, PW_DT_Q2_K, PW_DT_Q3_K,
                                  PW_DT_Q4_K, PW_DT_Q5_K, PW_DT_Q6_K, PW_DT_IQ4_NL, PW_DT_IQ4_XS,
                                  PW_DT_MXFP4};
#define N_WTYPES (sizeof WTYPES / sizeof WTYPES[0])

/* ---- fp16 / bf16 ---------------------------------------------------------- */

static void test_fp16(void) {
  int bad = 0;
  for (uint32_t h = 0; h < 65536; h++) {
    float f = h2f((uint16_t)h);
    uint32_t e = (h >> 10) & 31, m = h & 1023;
    double expect;
    if (e == 31) {
      if (m == 0 ? !isinf(f) : !isnan(f)) bad++;
      /* quiet NaNs and infinities round-trip exactly; signalling NaNs come
       * back quieted */
      uint16_t back = f2h(f);
      uint16_t want = (uint16_t)(m ? (h | 0x200) : h);
      if (back != want) bad++;
      continue;
    }
    expect = e == 0 ? ldexp(m, -24) : ldexp(1024 + m, (int)e - 25);
    if (h & 0x8000) expect = -expect;
    if ((double)f != expect || !!signbit(f) != !!(h & 0x8000)) bad++;
    if (f2h(f) != h) bad++;
  }
  CHECK_EQ_INT(bad, 0);
  /* rounding: ties to even, overflow threshold, subnormals */
  CHECK_EQ_INT(f2h(1.0f + 0x1p-11f), 0x3c00);            /* tie, even below */
  CHECK_EQ_INT(f2h(1.0f + 3 * 0x1p-11f), 0x3c02);        /* tie, even above */
  CHECK_EQ_INT(f2h(1.0f + 0x1p-11f + 0x1p-20f), 0x3c01); /* just above tie */
  CHECK_EQ_INT(f2h(65504.0f), 0x7bff);
  CHECK_EQ_INT(f2h(65519.996f), 0x7bff);
  CHECK_EQ_INT(f2h(65520.0f), 0x7c00);
  CHECK_EQ_INT(f2h(-1e9f), 0xfc00);
  CHECK_EQ_INT(f2h(0x1p-25f), 0x0000);                 /* tie to even (0) */
  CHECK_EQ_INT(f2h(0x1p-25f * 1.0001f), 0x0001);
  CHECK_EQ_INT(f2h(3 * 0x1p-25f), 0x0002);             /* tie between 1 and 2 -> 2 */
  CHECK_EQ_INT(f2h(0x1p-14f - 0x1p-26f), 0x0400);      /* rounds up into the normals */
  CHECK_EQ_INT(f2h(-0.0f), 0x8000);
  CHECK_EQ_INT(f2h(1e-30f), 0x0000);
  /* random floats: the result is a nearest fp16 (checked against neighbours) */
  bad = 0;
  for (int i = 0; i < 200000; i++) {
    float f = bitsf(rnd() << 1 ^ rnd());
    if (isnan(f) || fabsf(f) >= 65504.0f) continue;
    uint16_t h = f2h(f);
    double d0 = fabs((double)f - h2f(h));
    uint16_t up = (uint16_t)(h + 1), dn = (uint16_t)(h - 1);
    if (((up & 0x7c00) != 0x7c00) && fabs((double)f - h2f(up)) < d0) bad++;
    if ((h & 0x7fff) != 0 && fabs((double)f - h2f(dn)) < d0) bad++;
  }
  CHECK_EQ_INT(bad, 0);
}

static void test_bf16(void) {
  int bad = 0;
  for (uint32_t h = 0; h < 65536; h++) {
    float f = pw_bf16_to_fp32((uint16_t)h);
    if (fbits(f) != h << 16) bad++;
    if (isnan(f)) {
      if (pw_fp32_to_bf16(f) != (h | 64)) bad++;
    } else if (pw_fp32_to_bf16(f) != h) {
      bad++;
    }
  }
  CHECK_EQ_INT(bad, 0);
  CHECK_EQ_INT(pw_fp32_to_bf16(bitsf(0x3f808000u)), 0x3f80); /* tie, even below */
  CHECK_EQ_INT(pw_fp32_to_bf16(bitsf(0x3f818000u)), 0x3f82); /* tie, even above */
  CHECK_EQ_INT(pw_fp32_to_bf16(bitsf(0x3f808001u)), 0x3f81);
  CHECK_EQ_INT(pw_fp32_to_bf16(bitsf(0x7f7fffffu)), 0x7f80); /* FLT_MAX rounds to inf */
}

/* ---- hand-built blocks ---------------------------------------------------- */

static int cmp_floats(const float *got, const float *want, int n, const char *what) {
  int bad = 0;
  for (int i = 0; i < n; i++)
    if (got[i] != want[i]) {
      if (bad < 3) fprintf(stderr, "%s[%d]: got %.9g want %.9g\n", what, i, got[i], want[i]);
      bad++;
    }
  return bad;
}

static void check_deq(uint32_t dt, const void *blk, const float *want, int n, const char *what) {
  float got[QK_K];
  pw_ref_dequant(dt, blk, got, n);
  CHECK_MSG(cmp_floats(got, want, n, what) == 0, "%s reference dequant", what);
  const pw_traits *t = pw_traits_get(dt);
  CHECK(t != NULL);
  if (!t) return;
  t->to_float(blk, got, n);
  CHECK_MSG(cmp_floats(got, want, n, what) == 0, "%s installed dequant (%s)", what, t->impl);
}

static void test_handmade_32(void) {
  float want[32];
  { /* Q4_0: d = 0.5, element j<16 = low nibble j, element j+16 = high nibble 15-j */
    uint8_t b[18] = {0x00, 0x38};
    for (int j = 0; j < 16; j++) b[2 + j] = (uint8_t)(j | ((15 - j) << 4));
    for (int j = 0; j < 16; j++) {
      want[j] = (j - 8) * 0.5f;
      want[j + 16] = (7 - j) * 0.5f;
    }
    check_deq(PW_DT_Q4_0, b, want, 32, "q4_0");
  }
  { /* Q4_1: d = 0.25, m = -1 */
    uint8_t b[20] = {0x00, 0x34, 0x00, 0xbc};
    for (int j = 0; j < 16; j++) b[4 + j] = (uint8_t)(j | ((15 - j) << 4));
    for (int j = 0; j < 16; j++) {
      want[j] = j * 0.25f - 1;
      want[j + 16] = (15 - j) * 0.25f - 1;
    }
    check_deq(PW_DT_Q4_1, b, want, 32, "q4_1");
  }
  { /* Q5_0: d = 0.5, qh = 0xAAAAAAAA: odd elements have the fifth bit */
    uint8_t b[22] = {0x00, 0x38, 0xAA, 0xAA, 0xAA, 0xAA};
    for (int j = 0; j < 16; j++) b[6 + j] = (uint8_t)(j | ((15 - j) << 4));
    for (int j = 0; j < 16; j++) {
      want[j] = ((j + ((j & 1) ? 16 : 0)) - 16) * 0.5f;
      want[j + 16] = (((15 - j) + ((j & 1) ? 16 : 0)) - 16) * 0.5f;
    }
    check_deq(PW_DT_Q5_0, b, want, 32, "q5_0");
  }
  { /* Q5_1: d = 0.25, m = 2, qh = 0x0000FFFF: only the first 16 elements */
    uint8_t b[24] = {0x00, 0x34, 0x00, 0x40, 0xFF, 0xFF, 0x00, 0x00};
    for (int j = 0; j < 16; j++) b[8 + j] = (uint8_t)(j | ((15 - j) << 4));
    for (int j = 0; j < 16; j++) {
      want[j] = (j + 16) * 0.25f + 2;
      want[j + 16] = (15 - j) * 0.25f + 2;
    }
    check_deq(PW_DT_Q5_1, b, want, 32, "q5_1");
  }
  { /* Q8_0: d = 2 */
    uint8_t b[34] = {0x00, 0x40};
    for (int j = 0; j < 32; j++) {
      int8_t q = (int8_t)(j * 7 - 100);
      memcpy(&b[2 + j], &q, 1);
      want[j] = 2.0f * q;
    }
    check_deq(PW_DT_Q8_0, b, want, 32, "q8_0");
  }
}

/* The non-linear types: values from the tables, scales as the formats
 * say (IQ4_XS group scales 6-bit, biased by 32; MXFP4 an E8M0 exponent). */
static const int8_t k_iq4[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
static const float k_e2m1[16] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6, 0, -0.5f, -1, -1.5f, -2, -3, -4, -6};

static void test_handmade_nl(void) {
  float want[QK_K];
  { /* IQ4_NL: d = 0.5, element j<16 = index j, element j+16 = index 15-j */
    uint8_t b[18] = {0x00, 0x38};
    for (int j = 0; j < 16; j++) b[2 + j] = (uint8_t)(j | ((15 - j) << 4));
    for (int j = 0; j < 16; j++) {
      want[j] = 0.5f * k_iq4[j];
      want[j + 16] = 0.5f * k_iq4[15 - j];
    }
    check_deq(PW_DT_IQ4_NL, b, want, 32, "iq4_nl");
  }
  { /* MXFP4: e = 130 (scale 2^3), then e = 0 (2^-127, subnormal) */
    uint8_t b[34] = {130};
    for (int j = 0; j < 16; j++) b[1 + j] = (uint8_t)(j | ((15 - j) << 4));
    b[17] = 0;
    for (int j = 0; j < 16; j++) b[18 + j] = (uint8_t)(7 | (15 << 4));
    for (int j = 0; j < 16; j++) {
      want[j] = 8.0f * k_e2m1[j];
      want[j + 16] = 8.0f * k_e2m1[15 - j];
      want[32 + j] = 6.0f * 0x1p-127f;
      want[48 + j] = -6.0f * 0x1p-127f;
    }
    check_deq(PW_DT_MXFP4, b, want, 64, "mxfp4");
    /* the largest exponent: 2^127 * 6 overflows to inf, never NaN */
    b[0] = 255;
    float got[32];
    pw_ref_dequant(PW_DT_MXFP4, b, got, 32);
    CHECK(got[0] == 0 && got[1] == 0x1p127f && isinf(got[7]) && !isnan(got[8]));
  }
  { /* IQ4_XS: d = 0.25, group g's 6-bit scale L_g = 3 + 8g (value L_g - 32) */
    uint8_t b[136] = {0x00, 0x34};
    uint16_t sh = 0;
    for (int g = 0; g < 8; g++) {
      int L = 3 + 8 * g;
      b[4 + g / 2] |= (uint8_t)((L & 15) << (4 * (g % 2)));
      sh |= (uint16_t)((L >> 4) << (2 * g));
    }
    memcpy(b + 2, &sh, 2);
    for (int e = 0; e < QK_K; e++) {
      int g = e / 32, l = e % 32, v = (e * 7 + e / 9) & 15;
      b[8 + 16 * g + l % 16] |= (uint8_t)(v << (l < 16 ? 0 : 4));
      want[e] = 0.25f * (float)(3 + 8 * g - 32) * k_iq4[v];
    }
    check_deq(PW_DT_IQ4_XS, b, want, QK_K, "iq4_xs");
  }
}

/* The K-quant tests pick a value per element and per group, pack the bytes
 * by hand following the ggml layout description, and expect the formula. */
static void test_handmade_k(void) {
  float want[QK_K];
  int q[QK_K];
  for (int e = 0; e < QK_K; e++) q[e] = (e * 7 + e / 5) & 63;
  { /* Q2_K: d = 0.5, dmin = 0.25, group g: scale g%16, min 15-g */
    uint8_t b[84] = {0};
    for (int g = 0; g < 16; g++) b[g] = (uint8_t)((g & 15) | ((15 - g) << 4));
    for (int e = 0; e < QK_K; e++) {
      int h = e / 128, j = (e % 128) / 32, l = e % 32, g = e / 16;
      b[16 + 32 * h + l] |= (uint8_t)((q[e] & 3) << (2 * j));
      want[e] = 0.5f * (float)(g & 15) * (float)(q[e] & 3) - 0.25f * (float)(15 - g);
    }
    b[80] = 0x00, b[81] = 0x38, b[82] = 0x00, b[83] = 0x34;
    check_deq(PW_DT_Q2_K, b, want, QK_K, "q2_k");
  }
  { /* Q3_K: d = 0.25, 6-bit scales L_g = 5 + 3g (value L_g - 32) */
    uint8_t b[110] = {0};
    for (int g = 0; g < 16; g++) {
      int L = 5 + 3 * g;
      if (g < 8) b[96 + g] |= (uint8_t)(L & 15);
      else b[96 + g - 8] |= (uint8_t)((L & 15) << 4);
      b[96 + 8 + g % 4] |= (uint8_t)((L >> 4) << (2 * (g / 4)));
    }
    for (int e = 0; e < QK_K; e++) {
      int h = e / 128, j = (e % 128) / 32, l = e % 32, g = e / 16;
      int v = q[e] & 7; /* stored 0..7, value v - 4 */
      b[32 + 32 * h + l] |= (uint8_t)((v & 3) << (2 * j));
      if (v & 4) b[l] |= (uint8_t)(1 << (4 * h + j));
      want[e] = 0.25f * (float)(5 + 3 * g - 32) * (float)(v - 4);
    }
    b[108] = 0x00, b[109] = 0x34;
    check_deq(PW_DT_Q3_K, b, want, QK_K, "q3_k");
  }
  /* Q4_K / Q5_K: 8 groups of 32, 6-bit scale s_c = 10 + 7c, min m_c = 60 - 5c */
  for (int five = 0; five < 2; five++) {
    uint8_t b[176] = {0};
    b[0] = 0x00, b[1] = 0x38; /* d = 0.5 */
    b[2] = 0x00, b[3] = 0x2c; /* dmin = 0.0625 */
    uint8_t *sc = b + 4, *qh = b + 16, *qs = five ? b + 48 : b + 16;
    for (int c = 0; c < 8; c++) {
      int s = 10 + 7 * c, m = 60 - 5 * c;
      if (c < 4) {
        sc[c] |= (uint8_t)s;
        sc[c + 4] |= (uint8_t)m;
      } else {
        sc[c + 4] = (uint8_t)((s & 15) | ((m & 15) << 4));
        sc[c - 4] |= (uint8_t)((s >> 4) << 6);
        sc[c] |= (uint8_t)((m >> 4) << 6);
      }
    }
    for (int e = 0; e < QK_K; e++) {
      int c = e / 32, l = e % 32, v = five ? (q[e] & 31) : (q[e] & 15);
      qs[32 * (c / 2) + l] |= (uint8_t)((v & 15) << (4 * (c & 1)));
      if (five && (v & 16)) qh[l] |= (uint8_t)(1 << c);
      want[e] = 0.5f * (float)(10 + 7 * c) * (float)v - 0.0625f * (float)(60 - 5 * c);
    }
    check_deq(five ? PW_DT_Q5_K : PW_DT_Q4_K, b, want, QK_K, five ? "q5_k" : "q4_k");
  }
  { /* Q6_K: d = 0.125, scales s_g = -100 + 13g */
    uint8_t b[210] = {0};
    for (int g = 0; g < 16; g++) {
      int8_t s = (int8_t)(-100 + 13 * g);
      memcpy(&b[192 + g], &s, 1);
    }
    for (int e = 0; e < QK_K; e++) {
      int h = e / 128, k = (e % 128) / 32, l = e % 32, g = e / 16, v = q[e];
      b[64 * h + 32 * (k & 1) + l] |= (uint8_t)((v & 15) << (k < 2 ? 0 : 4));
      b[128 + 32 * h + l] |= (uint8_t)((v >> 4) << (2 * k));
      want[e] = 0.125f * (float)(-100 + 13 * g) * (float)(v - 32);
    }
    b[208] = 0x00, b[209] = 0x30;
    check_deq(PW_DT_Q6_K, b, want, QK_K, "q6_k");
  }
  { /* Q8_K: float d = -0.5 */
    block_q8_K b;
    memset(&b, 0, sizeof b);
    b.d = -0.5f;
    for (int e = 0; e < QK_K; e++) {
      b.qs[e] = (int8_t)(e - 128);
      want[e] = -0.5f * (float)(e - 128);
    }
    check_deq(PW_DT_Q8_K, &b, want, QK_K, "q8_k");
  }
}

/* ---- activation quantizers ---------------------------------------------- */

static void test_activation_quant(void) {
  float x[512];
  /* Q8_0 reference rounding: d = amax/127, q = roundf(x/d): with amax = 127
   * (d = 1) exact .5 values round away from zero */
  for (int j = 0; j < 32; j++) x[j] = (float)(j - 16) + 0.5f;
  x[0] = -127;
  block_q8_0 b0;
  pw_ref_quantize(PW_DT_Q8_0, x, &b0, 32);
  CHECK_EQ_INT(b0.d, 0x3c00);
  CHECK_EQ_INT(b0.qs[1], -15); /* -14.5 -> -15 */
  CHECK_EQ_INT(b0.qs[17], 2);  /* 1.5 -> 2 */
  CHECK_EQ_INT(b0.qs[18], 3);  /* 2.5 -> 3 (away from zero, not even) */
  /* Q8_1: s = d * sum(q) */
  block_q8_1 b1;
  pw_ref_quantize(PW_DT_Q8_1, x, &b1, 32);
  int sum = 0;
  for (int j = 0; j < 32; j++) sum += b1.qs[j];
  CHECK_EQ_INT(b1.s, f2h((float)sum));
  /* Q8_K: iscale = -127/max, ties to even, bsums */
  for (int j = 0; j < 256; j++) x[j] = (float)((j % 200) - 100) + 0.5f;
  x[5] = 127; /* largest magnitude, positive: d comes out negative */
  block_q8_K bk;
  pw_ref_quantize(PW_DT_Q8_K, x, &bk, 256);
  CHECK_NEAR(bk.d, -1.0, 0);
  CHECK_EQ_INT(bk.qs[5], -127);
  CHECK_EQ_INT(bk.qs[0], 100); /* -99.5 * -1 = 99.5 -> 100 (even) */
  CHECK_EQ_INT(bk.qs[1], 98);  /* 98.5 -> 98 (even) */
  int bad = 0;
  for (int g = 0; g < 16; g++) {
    int s = 0;
    for (int l = 0; l < 16; l++) s += bk.qs[16 * g + l];
    if (s != bk.bsums[g]) bad++;
  }
  CHECK_EQ_INT(bad, 0);

  /* the installed quantizers reproduce the references byte for byte on
   * random data, ties, zeros and huge/tiny magnitudes */
  static const uint32_t acts[] = {PW_DT_Q8_0, PW_DT_Q8_1, PW_DT_Q8_K, PW_DT_F16, PW_DT_BF16};
  uint8_t ra[4096], sa[4096];
  for (int trial = 0; trial < 60; trial++) {
    float scale = trial % 5 == 0 ? 1e-30f : trial % 5 == 1 ? 6e4f : 1.0f;
    for (int j = 0; j < 512; j++) x[j] = grand() * scale;
    if (trial % 7 == 0) memset(x, 0, 256 * sizeof(float));           /* zero blocks */
    if (trial % 3 == 0)
      for (int j = 0; j < 512; j++) x[j] = (float)((int)(rnd() % 255) - 127) + (trial % 2 ? 0.5f : 0); /* ties */
    for (size_t a = 0; a < sizeof acts / sizeof acts[0]; a++) {
      size_t rs = pw_dtype_row_size(acts[a], 512);
      memset(ra, 0xAB, sizeof ra);
      memset(sa, 0xCD, sizeof sa);
      pw_ref_quantize(acts[a], x, ra, 512);
      pw_traits_get(acts[a])->from_float(x, sa, 512);
      CHECK_MSG(memcmp(ra, sa, rs) == 0, "%s quantizer differs from reference (trial %d)",
                pw_dtype_name(acts[a]), trial);
    }
  }
}

/* ---- round trip ------------------------------------------------------------ */

static void test_roundtrip(void) {
  /* bounds on RMS(error)/RMS(x) for N(0,1) data, about 1.4x what the
   * quantizers achieve */
  static const struct {
    uint32_t dt;
    double bound;
  } b[] = {{PW_DT_F32, 0},        {PW_DT_F16, 3e-4},    {PW_DT_BF16, 2.5e-3}, {PW_DT_Q4_0, 0.12},
           {PW_DT_Q4_1, 0.11},    {PW_DT_Q5_0, 0.06},   {PW_DT_Q5_1, 0.055},  {PW_DT_Q8_0, 0.0075},
           {PW_DT_Q8_1, 0.0075},  {PW_DT_Q2_K, 0.45},   {PW_DT_Q3_K, 0.2},    {PW_DT_Q4_K, 0.11},
           {PW_DT_Q5_K, 0.055},   {PW_DT_Q6_K, 0.027},  {PW_DT_Q8_K, 0.0085},
           {PW_DT_IQ4_NL, 0.105}, {PW_DT_IQ4_XS, 0.105}, {PW_DT_MXFP4, 0.16}};
  enum { N = 8192 };
  static float x[N], y[N];
  static uint8_t q[N * 4];
  for (int i = 0; i < N; i++) x[i] = grand();
  for (size_t t = 0; t < sizeof b / sizeof b[0]; t++) {
    pw_ref_quantize(b[t].dt, x, q, N);
    pw_ref_dequant(b[t].dt, q, y, N);
    double se = 0, sx = 0;
    for (int i = 0; i < N; i++) {
      se += (double)(x[i] - y[i]) * (x[i] - y[i]);
      sx += (double)x[i] * x[i];
    }
    double rel = sqrt(se / sx);
    fprintf(stderr, "  round trip %-5s rms rel error %.5f (bound %.4f)\n", pw_dtype_name(b[t].dt), rel, b[t].bound);
    CHECK_MSG(rel <= b[t].bound, "%s round trip error %g > %g", pw_dtype_name(b[t].dt), rel, b[t].bound);
  }
  /* constant and one-sided data: affine K-quants must represent them */
  for (int i = 0; i < QK_K; i++) x[i] = 3.0f + 0.01f * (float)(i % 7);
  static const uint32_t ks[] = {PW_DT_Q2_K, PW_DT_Q3_K, PW_DT_Q4_K, PW_DT_Q5_K, PW_DT_Q6_K};
  for (size_t t = 0; t < 5; t++) {
    pw_ref_quantize(ks[t], x, q, QK_K);
    pw_ref_dequant(ks[t], q, y, QK_K);
    double maxe = 0;
    for (int i = 0; i < QK_K; i++) maxe = fmax(maxe, fabs(x[i] - y[i]));
    CHECK_MSG(maxe < 0.6, "%s positive data max error %g", pw_dtype_name(ks[t]), maxe);
  }
}

/* ---- installed kernels vs references ------------------------------------------ */

/* Random but valid weight blocks: random bytes, then fp16 scale fields set
 * to finite values, and q8_0 quants kept within [-127,127] (ggml's AVX2
 * kernels, like ours, assume no -128, which its quantizer never emits). */
enum { MODE_RANDOM, MODE_ZERO, MODE_MAXQ, MODE_BIGD, MODE_TINYD };

static uint16_t pick_d(int mode) {
  if (mode == MODE_BIGD) return 0x7bff;   /* 65504 */
  if (mode == MODE_TINYD) return 0x0001;  /* smallest subnormal */
  return f2h(frand() * 0.05f);
}

static void make_weights(uint32_t dt, uint8_t *w, int64_t n, int mode) {
  const pw_dtype_info *info = pw_dtype_get(dt);
  size_t bs = info->type_size;
  int64_t nb = n / info->blck;
  for (size_t i = 0; i < nb * bs; i++)
    w[i] = mode == MODE_ZERO ? 0 : mode == MODE_MAXQ ? 0xFF : (uint8_t)rnd();
  for (int64_t b = 0; b < nb; b++) {
    uint8_t *p = w + b * bs;
    uint16_t d = mode == MODE_ZERO ? 0 : pick_d(mode), m = mode == MODE_ZERO ? 0 : pick_d(mode);
    switch (dt) {
    case PW_DT_F32:
      for (int i = 0; i < 1; i++) {
        float v = mode == MODE_ZERO ? 0 : mode == MODE_BIGD ? 3e4f * frand() : mode == MODE_TINYD ? 1e-30f * frand() : grand();
        memcpy(p, &v, 4);
      }
      break;
    case PW_DT_F16:
    case PW_DT_BF16: {
      float v = mode == MODE_ZERO ? 0 : mode == MODE_BIGD ? 6e4f * frand() : mode == MODE_TINYD ? 1e-7f * frand() : grand();
      uint16_t h = dt == PW_DT_F16 ? f2h(v) : pw_fp32_to_bf16(v);
      memcpy(p, &h, 2);
      break;
    }
    case PW_DT_Q4_0: case PW_DT_Q5_0: memcpy(p, &d, 2); break;
    case PW_DT_Q8_0:
      memcpy(p, &d, 2);
      for (int i = 0; i < 32; i++)
        if (p[2 + i] == 0x80) p[2 + i] = 0x81;
      if (mode == MODE_MAXQ)
        for (int i = 0; i < 32; i++) p[2 + i] = i & 1 ? 0x7f : 0x81;
      break;
    case PW_DT_Q4_1: case PW_DT_Q5_1: memcpy(p, &d, 2); memcpy(p + 2, &m, 2); break;
    case PW_DT_Q2_K: memcpy(p + 80, &d, 2); memcpy(p + 82, &m, 2); break;
    case PW_DT_Q3_K: memcpy(p + 108, &d, 2); break;
    case PW_DT_Q4_K: case PW_DT_Q5_K: memcpy(p, &d, 2); memcpy(p + 2, &m, 2); break;
    case PW_DT_Q6_K: memcpy(p + 208, &d, 2); break;
    case PW_DT_IQ4_NL: case PW_DT_IQ4_XS: memcpy(p, &d, 2); break;
    case PW_DT_MXFP4: /* E8M0: 2^(e-128) times values up to 12 */
      p[0] = mode == MODE_ZERO ? 0 : mode == MODE_BIGD ? 140 : mode == MODE_TINYD ? 0 : (uint8_t)(118 + rnd() % 8);
      break;
    default: break;
    }
  }
}

static void make_acts(float *x, int64_t n, int mode) {
  for (int64_t i = 0; i < n; i++)
    x[i] = mode == MODE_ZERO ? 0 : mode == MODE_MAXQ ? 2.5f : mode == MODE_BIGD ? 1e3f * grand() : grand();
}

#define NXM PW_VEC_DOT_MAX_NX

/* One implementation level's kernels for every weight type: dequant equal
 * to the reference bit for bit; vec_dot within a named tolerance of the
 * reference; and out[j] of any group of rows (nx = 1..NXM, any offset)
 * bit-identical to the nx == 1 result for that row. */
static int check_level(int level, double *worst) {
  static uint8_t w[4096 * 4], xq[NXM * 4096 * 4 + 64];
  static float x[NXM * 4096], wd[4096], xd[4096];
  int checked = 0;
  for (size_t ti = 0; ti < N_WTYPES; ti++) {
    const uint32_t dt = WTYPES[ti];
    const pw_traits *tr = pw_traits_get_impl(dt, level), *rf = pw_traits_ref(dt);
    CHECK(tr && rf && tr->vec_dot && rf->vec_dot);
    if (!tr || !rf || !tr->vec_dot) continue;
    CHECK_EQ_INT(tr->vec_dot_type, pw_ref_vec_dot_type(dt));
    const int64_t blk = tr->blck == 1 ? 32 : tr->blck; /* "block" for lengths */
    /* 1, odd and even block counts, 28 (a 896-wide row: one full and one
     * partial group of 16 blocks), and a long row */
    const int64_t lens[] = {blk, 3 * blk, 7 * blk, 28 * blk > 4096 ? 2 * blk : 28 * blk, 4096,
                            dt == PW_DT_F32 || dt == PW_DT_F16 || dt == PW_DT_BF16 ? 37 : 2 * blk};
    for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
      const int64_t n = lens[li];
      for (int mode = 0; mode < 5; mode++) {
        make_weights(dt, w, n, mode);
        for (int j = 0; j < NXM; j++) make_acts(x + j * n, n, j == 3 && mode == MODE_RANDOM ? MODE_ZERO : mode);
        const uint32_t vt = tr->vec_dot_type;
        const size_t xs = (size_t)pw_dtype_row_size(vt, (uint64_t)n);
        for (int j = 0; j < NXM; j++) pw_ref_quantize(vt, x + j * n, xq + j * xs, n);
        /* dequant: installed == reference bit for bit */
        float d1[4096], d2[4096];
        rf->to_float(w, d1, n);
        tr->to_float(w, d2, n);
        CHECK_MSG(memcmp(d1, d2, (size_t)n * 4) == 0, "%s dequant n=%lld mode %d (%s)", tr->name, (long long)n, mode,
                  tr->impl);
        float one[NXM];
        for (int j = 0; j < NXM; j++) tr->vec_dot(n, w, xq + j * xs, xs, 1, &one[j]);
        /* every group size at a few offsets */
        for (int nx = 2; nx <= NXM; nx++)
          for (int off = 0; off + nx <= NXM; off += (nx == NXM ? 1 : NXM - nx > 2 ? 3 : 1)) {
            float got[NXM];
            tr->vec_dot(n, w, xq + (size_t)off * xs, xs, nx, got);
            for (int j = 0; j < nx; j++)
              CHECK_MSG(fbits(got[j]) == fbits(one[off + j]), "%s (%s) nx=%d off %d row %d vs nx=1 differ (n=%lld)",
                        tr->name, tr->impl, nx, off, j, (long long)n);
          }
        /* the AVX-VNNI level computes the AVX2 level's integers in the same
         * lanes (vecdot_avx2.h): the same bits */
        if (level == PW_IMPL_AVX2VNNI) {
          const pw_traits *t2 = pw_traits_get_impl(dt, PW_IMPL_AVX2);
          CHECK(t2 != NULL);
          for (int j = 0; t2 && j < NXM; j++) {
            float o2;
            t2->vec_dot(n, w, xq + j * xs, xs, 1, &o2);
            CHECK_MSG(fbits(o2) == fbits(one[j]), "%s avx2vnni vec_dot differs from avx2 (n=%lld mode %d row %d)",
                      tr->name, (long long)n, mode, j);
          }
        }
        /* vec_dot4 (where the level has it): four distinct rows against one
         * token, each the bits vec_dot gives that row */
        if (tr->vec_dot4) {
          static uint8_t w4[4 * 4096 * 4];
          const size_t rb = (size_t)pw_dtype_row_size(dt, (uint64_t)n);
          for (int k = 0; k < 4; k++) make_weights(dt, w4 + k * rb, n, mode);
          for (int j = 0; j < NXM; j += 3) {
            float o4[4], o1;
            tr->vec_dot4(n, w4, rb, xq + j * xs, o4);
            for (int k = 0; k < 4; k++) {
              tr->vec_dot(n, w4 + k * rb, xq + j * xs, xs, 1, &o1);
              CHECK_MSG(fbits(o4[k]) == fbits(o1), "%s (%s) vec_dot4 row %d differs from vec_dot (n=%lld mode %d)",
                        tr->name, tr->impl, k, (long long)n, mode);
            }
          }
        }
        pw_ref_dequant(dt, w, wd, n);
        for (int j = 0; j < NXM; j++) {
          float ref;
          rf->vec_dot(n, w, xq + j * xs, xs, 1, &ref);
          /* tolerance: relative to the sum of |products| of the dequantized rows */
          pw_ref_dequant(vt, xq + j * xs, xd, n);
          double sabs = 0;
          for (int64_t i = 0; i < n; i++) sabs += fabs((double)wd[i] * xd[i]);
          /* K-quants subtract dmin*sum(m*bsum) as a separate term, which can
           * exceed sum|w*x|; allow for it */
          const double rel_tol = 2e-5;
          double tol = rel_tol * sabs * (tr->blck == QK_K ? 4 : 1) + 1e-35;
          double err = fabs((double)one[j] - ref);
          if (sabs > 0 && err / sabs > *worst) *worst = err / sabs;
          CHECK_MSG(err <= tol && isfinite(one[j]) == isfinite(ref),
                    "%s (%s) vec_dot n=%lld mode %d row %d: %.9g vs ref %.9g (tol %g)", tr->name, tr->impl,
                    (long long)n, mode, j, one[j], ref, tol);
          if (mode == MODE_ZERO) CHECK_MSG(one[j] == 0 && ref == 0, "%s zero rows give %g / %g", tr->name, one[j], ref);
          checked++;
        }
      }
    }
  }
  return checked;
}

static void test_kernels_vs_ref(void) {
  int levels = 0;
  for (int level = 0; level < PW_IMPL_COUNT; level++) {
    if (!pw_traits_get_impl(PW_DT_Q8_0, level)) continue;
    double worst = 0;
    int checked = check_level(level, &worst);
    levels++;
    fprintf(stderr, "  level %d (%s): %d vec_dot comparisons, worst |impl-ref|/sum|w*x| = %.3g\n", level,
            pw_traits_get_impl(PW_DT_Q8_0, level)->impl, checked, worst);
  }
  /* the installed table is the highest available level; scalar and (with
   * any SIMD level) AVX2 are always among the available ones */
  CHECK(pw_traits_get(PW_DT_Q8_0) == pw_traits_get_impl(PW_DT_Q8_0, pw_tensor_level()));
  for (int level = pw_tensor_level() + 1; level < PW_IMPL_COUNT; level++)
    CHECK(pw_traits_get_impl(PW_DT_Q8_0, level) == NULL);
  CHECK(pw_traits_get_impl(PW_DT_Q8_0, PW_IMPL_SCALAR) != NULL);
  if (pw_tensor_level() >= PW_IMPL_AVX2) CHECK(pw_traits_get_impl(PW_DT_Q8_0, PW_IMPL_AVX2) != NULL);
  CHECK(levels >= 1 && levels <= pw_tensor_level() + 1);
  /* POWER_SIMD names the level the tests of that level expect (CMake runs
   * some suites under each): when the CPU has it, it is the one installed */
  const char *simd = getenv("POWER_SIMD");
  if (simd && strcmp(simd, "avx2vnni") == 0 && pw_traits_get_impl(PW_DT_Q8_0, PW_IMPL_AVX2VNNI))
    CHECK(pw_tensor_level() == PW_IMPL_AVX2VNNI && strcmp(pw_tensor_kernels(), "avx2vnni") == 0);
}

/* The 256-bit levels' GEMM (Q8_0, Q4_0, Q5_0): every (row, token) within
 * the reference's tolerance, at extreme codes and activations too (where a
 * saturating integer step would show), and the AVX-VNNI level's bits the
 * AVX2 level's (the same integers in the same lanes). Many tokens (a
 * partial group of an odd count) and few (four streams). */
static void test_gemm_256(void) {
  enum { NR = 8, NT = 19, NMAX = 896 };
  static uint8_t w[NR * NMAX * 2], xq[NMAX * 2];
  static float x[NT * NMAX], y[2][NT * NR], wd[NMAX], xd[NMAX];
  const uint32_t types[] = {PW_DT_Q8_0, PW_DT_Q4_0, PW_DT_Q5_0};
  const int levels[] = {PW_IMPL_AVX2, PW_IMPL_AVX2VNNI};
  for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++)
    for (int n = 96; n <= NMAX; n += NMAX - 96)
      for (int mode = 0; mode < 5; mode++) {
        const uint32_t dt = types[ti];
        const size_t wr = (size_t)pw_dtype_row_size(dt, (uint64_t)n);
        for (int r = 0; r < NR; r++) make_weights(dt, w + r * wr, n, r == 5 ? MODE_MAXQ : mode);
        for (int t = 0; t < NT; t++) make_acts(x + t * n, n, t == 2 ? MODE_MAXQ : mode);
        for (int nt = 1; nt <= NT; nt += NT - 1)
          for (int li = 0; li < 2; li++) {
            const pw_traits *tr = pw_traits_get_impl(dt, levels[li]);
            if (!tr || !tr->gemm) continue;
            void *xp = aligned_alloc(64, (tr->gemm_xrow(n) * (size_t)nt + 63) / 64 * 64);
            CHECK(xp != NULL);
            for (int t = nt - 1; t >= 0; t--) tr->gemm_pack(x + t * n, xp, n, t, nt); /* any order */
            memset(y[li], 0xFF, sizeof y[li]);
            if (nt == 1)
              tr->gemm(n, w, wr, NR / 4, NR / 4, xp, nt, y[li], NR, 0);
            else
              tr->gemm(n, w, wr, NR, 0, xp, nt, y[li], NR, 0);
            free(xp);
            for (int t = 0; t < nt; t++) {
              pw_ref_quantize(PW_DT_Q8_0, x + t * n, xq, n);
              pw_ref_dequant(PW_DT_Q8_0, xq, xd, n);
              for (int r = 0; r < NR; r++) {
                float ref;
                pw_traits_ref(dt)->vec_dot(n, w + r * wr, xq, 0, 1, &ref);
                pw_ref_dequant(dt, w + r * wr, wd, n);
                double sabs = 0;
                for (int i = 0; i < n; i++) sabs += fabs((double)wd[i] * xd[i]);
                const float got = y[li][t * NR + r];
                CHECK_MSG(fabs((double)got - ref) <= 2e-5 * sabs + 1e-35 && isfinite(got) == isfinite(ref),
                          "%s %s gemm n=%d mode %d nt %d row %d token %d: %.9g vs ref %.9g", tr->name, tr->impl, n,
                          mode, nt, r, t, got, ref);
              }
            }
            if (li == 1 && pw_traits_get_impl(dt, PW_IMPL_AVX2))
              CHECK_MSG(memcmp(y[0], y[1], (size_t)nt * NR * sizeof(float)) == 0,
                        "%s avx2vnni gemm differs from avx2 (n=%d mode %d nt %d)", tr->name, n, mode, nt);
          }
      }
}

/* The 256-bit levels' GEMM of the K-quants and of the non-linear 4-bit
 * types (IQ4_XS, IQ4_NL, MXFP4): every (row, token) the bits of that
 * level's vec_dot with one token (the token's q8_K or q8_0 row) (so the
 * result of a row never depends on the tile or the token count), within
 * the reference's tolerance, and the AVX-VNNI level's bits the AVX2
 * level's. Token counts: a full tile of 16 plus 3, 8 + 7 and 5 (tile
 * widths of the dispatch; the 32-element types' tiles of 8: 8 + 8 + 3), a
 * few tokens (vec_dot), and one token in four streams. Widths: one and two
 * super-blocks (IQ4_XS: tiles of 16 tokens take one super-block a chunk),
 * and for the 32-element types 3 blocks and 65 (past a chunk of 56). */
static void test_gemm_256_k(void) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  enum { NMODE = 3 };
#else
  enum { NMODE = 5 };
#endif
  enum { NR = 8, NT = 19, NMAX = 2080 };
  static uint8_t w[NR * NMAX * 2], xq[NMAX * 2];
  static float x[NT * NMAX], y[2][NT * NR], wd[NMAX], xd[NMAX];
  const uint32_t types[] = {PW_DT_Q4_K, PW_DT_Q6_K, PW_DT_Q5_K,  PW_DT_Q3_K,
                            PW_DT_Q2_K, PW_DT_IQ4_XS, PW_DT_IQ4_NL, PW_DT_MXFP4};
  const int levels[] = {PW_IMPL_AVX2, PW_IMPL_AVX2VNNI};
  const int nts[] = {1, 3, 5, 15, NT};
  const int widths_k[] = {256, 512}, widths_32[] = {96, NMAX};
  for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++)
    for (int ni_w = 0; ni_w < 2; ni_w++)
      for (int mode = 0; mode < NMODE; mode++) {
        const int n = pw_traits_ref(types[ti])->blck == QK_K ? widths_k[ni_w] : widths_32[ni_w];
        const uint32_t dt = types[ti], vt = pw_ref_vec_dot_type(dt);
        const size_t wr = (size_t)pw_dtype_row_size(dt, (uint64_t)n);
        for (int r = 0; r < NR; r++) make_weights(dt, w + r * wr, n, r == 5 ? MODE_MAXQ : mode);
        for (int t = 0; t < NT; t++) make_acts(x + t * n, n, t == 2 ? MODE_MAXQ : mode);
        for (size_t ni = 0; ni < sizeof nts / sizeof nts[0]; ni++)
          for (int li = 0; li < 2; li++) {
            const int nt = nts[ni];
            const pw_traits *tr = pw_traits_get_impl(dt, levels[li]);
            if (!tr || !tr->gemm) continue;
            const size_t xr = tr->gemm_xrow(n);
            void *xp = aligned_alloc(64, (xr * (size_t)nt + 63) / 64 * 64);
            CHECK(xp != NULL);
            for (int t = nt - 1; t >= 0; t--) tr->gemm_pack(x + t * n, xp, n, t, nt); /* any order */
            memset(y[li], 0xFF, sizeof y[li]);
            if (nt == 1)
              tr->gemm(n, w, wr, NR / 4, NR / 4, xp, nt, y[li], NR, 0);
            else
              tr->gemm(n, w, wr, NR, 0, xp, nt, y[li], NR, 0);
            for (int t = 0; t < nt; t++) {
              pw_ref_quantize(vt, x + t * n, xq, n);
              pw_ref_dequant(vt, xq, xd, n);
              for (int r = 0; r < NR; r++) {
                float ref, one;
                pw_traits_ref(dt)->vec_dot(n, w + r * wr, xq, 0, 1, &ref);
                tr->vec_dot(n, w + r * wr, xq, 0, 1, &one); /* the quantizers agree bit for bit */
                pw_ref_dequant(dt, w + r * wr, wd, n);
                double sabs = 0;
                for (int i = 0; i < n; i++) sabs += fabs((double)wd[i] * xd[i]);
                const float got = y[li][t * NR + r];
                CHECK_MSG(fabs((double)got - ref) <= 2e-5 * sabs + 1e-35 && isfinite(got) == isfinite(ref),
                          "%s %s gemm n=%d mode %d nt %d row %d token %d: %.9g vs ref %.9g", tr->name, tr->impl, n,
                          mode, nt, r, t, got, ref);
                CHECK_MSG(memcmp(&got, &one, sizeof got) == 0,
                          "%s %s gemm n=%d mode %d nt %d row %d token %d: %.9g vs vec_dot %.9g", tr->name, tr->impl,
                          n, mode, nt, r, t, got, one);
              }
            }
            free(xp);
            if (li == 1 && pw_traits_get_impl(dt, PW_IMPL_AVX2))
              CHECK_MSG(memcmp(y[0], y[1], (size_t)nt * NR * sizeof(float)) == 0,
                        "%s avx2vnni gemm differs from avx2 (n=%d mode %d nt %d)", tr->name, n, mode, nt);
          }
      }
}

/* ref vec_dot agrees with a double-precision dot of the dequantized rows:
 * integer sums are exact, so only float scaling rounding remains */
static void test_ref_dot_vs_dequant(void) {
  static uint8_t w[4096 * 4], xq[4096 * 4];
  static float x[4096], wd[4096], xd[4096];
  for (size_t ti = 0; ti < N_WTYPES; ti++) {
    const uint32_t dt = WTYPES[ti];
    const uint32_t vt = pw_ref_vec_dot_type(dt);
    const int64_t n = 1024;
    make_weights(dt, w, n, MODE_RANDOM);
    make_acts(x, n, MODE_RANDOM);
    pw_ref_quantize(vt, x, xq, n);
    pw_ref_dequant(dt, w, wd, n);
    pw_ref_dequant(vt, xq, xd, n);
    double s = 0, sabs = 0;
    for (int64_t i = 0; i < n; i++) {
      s += (double)wd[i] * xd[i];
      sabs += fabs((double)wd[i] * xd[i]);
    }
    float r = pw_ref_vec_dot(dt, n, w, xq);
    /* q4_1/q5_1 use s = d*sum(q) rounded to fp16: up to 2^-11 relative of
     * that term */
    double tol = (dt == PW_DT_Q4_1 || dt == PW_DT_Q5_1 ? 2e-3 : 1e-5) * sabs;
    CHECK_MSG(fabs(r - s) <= tol, "%s ref dot %.9g vs dequant dot %.9g", pw_dtype_name(dt), r, s);
  }
}

int main(void) {
  pw_tensor_init();
  fprintf(stderr, "kernels: %s\n", pw_traits_get(PW_DT_Q4_K)->impl);
  test_fp16();
  test_bf16();
  test_handmade_32();
  test_handmade_k();
  test_handmade_nl();
  test_activation_quant();
  test_roundtrip();
  test_ref_dot_vs_dequant();
  test_kernels_vs_ref();
  test_gemm_256();
  test_gemm_256_k();
  TEST_DONE();
}
