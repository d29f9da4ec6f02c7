/* quants_avx512.c - AVX-512 (F/BW/VL/DQ) + VNNI dot products of quantized
 * weight rows with quantized activation rows, for the hot weight types:
 * Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS and
 * MXFP4 (the non-linear types look their values up with vpshufb). Compiled with the
 * AVX-512 flag set; installed by pw_tensor_init only when the CPU reports
 * all of F, BW, VL, DQ and VNNI. Types not covered here keep their AVX2
 * kernels; the tiled GEMM of Q8_0, Q4_0, Q5_0 and the K-quants is in
 * gemm_avx512vbmi.c (where the CPU has VBMI too, the matmul takes it for
 * those types instead of these kernels). Not a quantizer or dequantizer file (those stay in
 * avx2.c).
 *
 * The vec_dot kernels of Q8_0, Q4_0 and Q5_0 put two 32-element blocks in
 * one 512-bit vector, so unpack, dot, convert and FMA are one instruction
 * per pair of blocks, and pairs alternate between two accumulators per
 * row. Weight values are made signed, their magnitude goes to the unsigned
 * operand of vpdpbusd and their sign is moved onto the activation (a
 * masked negate); Q5's fifth bits are applied straight from the qh words
 * as a byte mask. A pair's two scale products (weight d times activation
 * d) are one 128-bit fp16 convert, multiply and lane permute per row: no
 * per-block scalar convert, and no gathers (slow on some cores; gathering
 * scales measured slower).
 * The affine types (Q4_1, Q5_1) use 256-bit VNNI per block with a scalar
 * scale per block and row; their m*s terms are gathered 16 blocks at a
 * time.
 *
 * K-quants unpack each 64-element chunk once, multiply two chunks with
 * vpdpbusd, pack them to int16 and fold in the 6/8-bit group scales with
 * one vpdpwssd (k_pair), so a whole 256-element super-block is one int32
 * vector per row and one FMA.
 *
 * Every kernel handles 1..PW_VEC_DOT_MAX_NX activation rows per pass over
 * the weights; the float operations applied to one row are the same
 * sequence whatever nx is, so out[j] never depends on how rows are grouped
 * (the pw_vec_dot_fn contract). */
#include "tensor/dtype.h"
#include "tensor/quants.h"
#include "tensor/traits.h"
#include "tensor/arch/kquant_avx512.h"

#include <immintrin.h>
#include <stddef.h>
#include <string.h>

#define AI static inline __attribute__((always_inline))
#define NXMAX 8
_Static_assert(NXMAX == PW_VEC_DOT_MAX_NX, "kernels unroll for PW_VEC_DOT_MAX_NX rows");

/* loops over rows must be fully unrolled so per-row accumulators stay in
 * registers */
#define FOR_ROWS(j) _Pragma("GCC unroll 8") for (int j = 0; j < nx; j++)

#define XROW(x, xs, j) ((const uint8_t *)(x) + (size_t)(j) * (xs))

AI uint32_t ld32(const uint8_t *p) {
  uint32_t v;
  memcpy(&v, p, 4);
  return v;
}

/* fp16 fields at p + 16-bit offset of each of `km`'s blocks (byte offsets
 * in idx) as floats; lanes outside km are 0. Reads 4 bytes per block, which
 * stays inside every block format used here. */
AI __m512 gather_h(const uint8_t *p, __m512i idx, __mmask16 km) {
  const __m512i g = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), km, idx, p, 1);
  return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(g));
}

/* ---- 32-element blocks ------------------------------------------------- */

enum { LQ8_0, LQ4_0, LQ5_0, LQ4_1, LQ5_1, LIQ4_NL, LMXFP4 };

/* the non-linear kinds: 4-bit indices into a 16-entry value table */
AI int nl_kind(const int kind) { return kind == LIQ4_NL || kind == LMXFP4; }

/* the value table of a non-linear kind in every 128-bit lane; uns: each
 * value plus nl_offset(kind), which makes them all unsigned (IQ4_NL 1..240,
 * MXFP4 0..24) */
AI int nl_offset(const int kind) { return kind == LIQ4_NL ? 128 : 12; }
AI __m512i nl_table(const int kind, const int uns) {
  const __m128i t = _mm_loadu_si128((const __m128i *)(kind == LIQ4_NL ? pw_kvalues_iq4nl : pw_kvalues_mxfp4));
  const __m512i v = _mm512_broadcast_i32x4(t);
  return uns ? _mm512_add_epi8(v, _mm512_set1_epi8((char)nl_offset(kind))) : v;
}

AI void vd_leg(int64_t n, const void *vw, const void *x, size_t xs, const int nx, float *out, const int kind) {
  const int wsz = kind == LQ8_0 ? 34 : kind == LQ4_0 ? 18 : kind == LQ5_0 ? 22 : kind == LQ4_1 ? 20 : 24;
  const int wqs = kind == LQ8_0 || kind == LQ4_0 ? 2 : kind == LQ4_1 ? 4 : kind == LQ5_0 ? 6 : 8;
  const int wqh = kind == LQ5_0 ? 2 : 4; /* only used by the 5-bit kinds */
  const int affine = kind == LQ4_1 || kind == LQ5_1; /* q8_1 activations, unsigned weights */
  const int ysz = affine ? 36 : 34, yqs = affine ? 4 : 2;
  const int64_t nb = n / 32;
  const __m512i iota = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const __m512i widx = _mm512_mullo_epi32(iota, _mm512_set1_epi32(wsz));
  const __m512i yidx = _mm512_mullo_epi32(iota, _mm512_set1_epi32(ysz));
  const __m256i zero = _mm256_setzero_si256();
  /* two accumulators per row (even and odd blocks) so one row's FMAs don't
   * wait on each other */
  __m256 acc0[NXMAX], acc1[NXMAX];
  __m512 accm[NXMAX];
  FOR_ROWS(j) {
    acc0[j] = acc1[j] = _mm256_setzero_ps();
    accm[j] = _mm512_setzero_ps();
  }
  for (int64_t b0 = 0; b0 < nb; b0 += 16) {
    const int cnt = nb - b0 < 16 ? (int)(nb - b0) : 16;
    const __mmask16 km = (__mmask16)(cnt == 16 ? 0xFFFFu : (1u << cnt) - 1);
    const uint8_t *wb = (const uint8_t *)vw + b0 * wsz;
    /* affine types: the m * s terms of these 16 blocks, from gathered fp16 */
    if (affine) {
      const __m512 mw = gather_h(wb + 2, widx, km);
      FOR_ROWS(j) accm[j] = _mm512_fmadd_ps(mw, gather_h(XROW(x, xs, j) + b0 * ysz + 2, yidx, km), accm[j]);
    }
    for (int b = 0; b < cnt; b++) {
      const uint8_t *wp = wb + b * wsz;
      const float dwb = _cvtsh_ss(*(const uint16_t *)wp);
      __m256i q;
      if (kind == LQ8_0) {
        q = _mm256_loadu_si256((const __m256i *)(wp + wqs));
      } else {
        const __m128i t = _mm_loadu_si128((const __m128i *)(wp + wqs));
        q = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(t, 4), t), _mm256_set1_epi8(0x0F));
        if (kind == LQ4_0) q = _mm256_sub_epi8(q, _mm256_set1_epi8(8));
        if (kind == LQ5_0) /* q - 16: subtract 16 where the fifth bit is clear */
          q = _mm256_mask_sub_epi8(q, (__mmask32)~ld32(wp + wqh), q, _mm256_set1_epi8(16));
        if (kind == LQ5_1) q = _mm256_mask_add_epi8(q, (__mmask32)ld32(wp + wqh), q, _mm256_set1_epi8(16));
      }
      const __m256i aq = affine ? q : _mm256_abs_epi8(q);
      const __mmask32 neg = affine ? 0 : _mm256_movepi8_mask(q);
      FOR_ROWS(j) {
        __m256i yv = _mm256_loadu_si256((const __m256i *)(XROW(x, xs, j) + (b0 + b) * ysz + yqs));
        if (!affine) yv = _mm256_mask_sub_epi8(yv, neg, zero, yv);
        const __m256 p = _mm256_cvtepi32_ps(_mm256_dpbusd_epi32(zero, aq, yv));
        const float sj = dwb * _cvtsh_ss(*(const uint16_t *)(XROW(x, xs, j) + (b0 + b) * ysz));
        if (b & 1)
          acc1[j] = _mm256_fmadd_ps(p, _mm256_set1_ps(sj), acc1[j]);
        else
          acc0[j] = _mm256_fmadd_ps(p, _mm256_set1_ps(sj), acc0[j]);
      }
    }
  }
  FOR_ROWS(j) {
    const __m256 a = _mm256_add_ps(acc0[j], acc1[j]);
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    float r = _mm_cvtss_f32(s);
    if (affine) r += _mm512_reduce_add_ps(accm[j]);
    out[j] = r;
  }
}

/* Symmetric types (Q8_0, Q4_0, Q5_0 with q8_0 activations): two blocks per
 * 512-bit vector (block b in the low half, b + 1 in the high half), so the
 * unpack, sign transfer, dot, convert and FMA are one instruction per pair.
 * A pair's two fp16 scales (weight, and per row activation) are packed
 * into one word and converted together in a 128-bit register (scalar loads
 * keep the wide vector pipes free; a 512-bit word permute of the block
 * bytes and gathers both measured slower). Pairs alternate between two
 * accumulators per row to halve the FMA dependency chain. */

/* weight pair as signed bytes, or (uns, 4/5-bit kinds) as the unsigned
 * stored values q + 8 / q + 16; `two` == 0: only block b, high half zero */
AI __m512i w_pair(const uint8_t *wp, const int wsz, const int kind, const int two, const int uns) {
  if (kind == LQ8_0) {
    const __m512i lo = _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(wp + 2)));
    return two ? _mm512_inserti64x4(lo, _mm256_loadu_si256((const __m256i *)(wp + wsz + 2)), 1)
               : _mm512_zextsi256_si512(_mm512_castsi512_si256(lo));
  }
  const int wqs = kind == LQ4_0 || kind == LIQ4_NL ? 2 : kind == LMXFP4 ? 1 : 6;
  /* [t0, t0, t1, t1] then the high nibbles of the odd quarters */
  __m512i t = _mm512_maskz_broadcast_i32x4(0x00FF, _mm_loadu_si128((const __m128i *)(wp + wqs)));
  if (two) t = _mm512_mask_broadcast_i32x4(t, 0xFF00, _mm_loadu_si128((const __m128i *)(wp + wsz + wqs)));
  __m512i q = _mm512_and_si512(_mm512_srlv_epi64(t, _mm512_set_epi64(4, 4, 0, 0, 4, 4, 0, 0)), _mm512_set1_epi8(0x0F));
  if (kind == LQ4_0) return uns ? q : _mm512_maskz_sub_epi8(two ? ~0ull : 0xFFFFFFFFull, q, _mm512_set1_epi8(8));
  /* table lookup (vpshufb: the 16 values sit in every lane); a single
   * block keeps its high half zero, which no table entry is */
  if (nl_kind(kind)) return _mm512_maskz_shuffle_epi8(two ? ~0ull : 0xFFFFFFFFull, nl_table(kind, uns), q);
  /* Q5_0: q - 16 where the fifth bit is clear */
  /* the two blocks' 32-bit high-bit masks straight into one mask register */
  const __mmask64 h = _mm512_kunpackd(two ? _cvtu32_mask32(ld32(wp + wsz + 2)) : (__mmask64)0xFFFFFFFFu,
                                      _cvtu32_mask32(ld32(wp + 2)));
  if (uns) return _mm512_mask_add_epi8(q, h, q, _mm512_set1_epi8(16));
  return _mm512_mask_sub_epi8(q, _knot_mask64(h), q, _mm512_set1_epi8(16));
}

/* [d(b), d(b+1), 0, 0] as floats, from the fp16 scales at byte 0 of two
 * blocks bsz bytes apart; `two` == 0: the second is 0 and is not read. */
AI __m128 d_pair(const uint8_t *p, const int bsz, const int two) {
  uint16_t h0, h1 = 0;
  memcpy(&h0, p, 2);
  if (two) memcpy(&h1, p + bsz, 2);
  return _mm_cvtph_ps(_mm_insert_epi16(_mm_cvtsi32_si128(h0), h1, 1));
}

/* block bytes of the symmetric 32-element types */
AI int sym_wsz(const int kind) {
  return kind == LQ8_0 ? 34 : kind == LQ4_0 || kind == LIQ4_NL ? 18 : kind == LMXFP4 ? 17 : 22;
}

/* a pair's weight scales as d_pair gives them; MXFP4's are E8M0 bytes */
AI __m128 wd_pair(const uint8_t *wp, const int wsz, const int kind, const int two) {
  if (kind == LMXFP4) return _mm_setr_ps(pw_e8m0_half(wp[0]), two ? pw_e8m0_half(wp[wsz]) : 0.0f, 0.0f, 0.0f);
  return d_pair(wp, wsz, two);
}

/* one pair of weight blocks (wsz bytes each; `two` == 0: a single block)
 * times each row's matching q8_0 blocks at byte offset yoff */
AI void pair_rows(const uint8_t *wp, const int wsz, const int kind, const int two, const uint8_t *x, size_t xs,
                  size_t yoff, const int nx, __m512 *acc) {
  /* One row, 4/5-bit weights: dot the unsigned stored values and subtract
   * the offset times the row's sum, one instruction less than moving the
   * weight signs onto the row. Both give the same exact integers, so the
   * choice never changes a result. */
  const int uns = nx == 1 && kind != LQ8_0;
  const __m512i q = w_pair(wp, wsz, kind, two, uns);
  const __m512i aq = uns ? q : _mm512_abs_epi8(q);
  const __mmask64 neg = uns ? 0 : _mm512_movepi8_mask(q);
  const __m128 dw = wd_pair(wp, wsz, kind, two);
  /* lanes 0..7 take the pair's first scale, 8..15 its second */
  const __m512i sidx = _mm512_srli_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15), 3);
  const __m512i zero = _mm512_setzero_si512();
  FOR_ROWS(j) {
    const uint8_t *yp = XROW(x, xs, j) + yoff;
    const __m256i y0 = _mm256_loadu_si256((const __m256i *)(yp + 2));
    __m512i yv = two ? _mm512_inserti64x4(_mm512_castsi256_si512(y0), _mm256_loadu_si256((const __m256i *)(yp + 36)), 1)
                     : _mm512_zextsi256_si512(y0);
    __m512i d;
    if (uns) {
      d = _mm512_sub_epi32(_mm512_dpbusd_epi32(zero, aq, yv),
                           _mm512_dpbusd_epi32(zero, _mm512_set1_epi8((char)(kind == LQ4_0 ? 8 : kind == LQ5_0 ? 16 : nl_offset(kind))), yv));
    } else {
      yv = _mm512_mask_sub_epi8(yv, neg, zero, yv);
      d = _mm512_dpbusd_epi32(zero, aq, yv);
    }
    const __m512 p = _mm512_cvtepi32_ps(d);
    const __m128 sj = _mm_mul_ps(dw, d_pair(yp, 34, two));
    acc[j] = _mm512_fmadd_ps(p, _mm512_permutexvar_ps(sidx, _mm512_castps128_ps512(sj)), acc[j]);
  }
}

AI void vd_sym(int64_t n, const void *vw, const void *x, size_t xs, const int nx, float *out, const int kind) {
  const int wsz = sym_wsz(kind);
  const int64_t nb = n / 32;
  const uint8_t *w = vw, *xb = x;
  __m512 acc0[NXMAX], acc1[NXMAX];
  FOR_ROWS(j) acc0[j] = acc1[j] = _mm512_setzero_ps();
  int64_t b = 0;
  for (; b + 4 <= nb; b += 4) {
    pair_rows(w + b * wsz, wsz, kind, 1, xb, xs, (size_t)b * 34, nx, acc0);
    pair_rows(w + (b + 2) * wsz, wsz, kind, 1, xb, xs, (size_t)(b + 2) * 34, nx, acc1);
  }
  if (b + 2 <= nb) {
    pair_rows(w + b * wsz, wsz, kind, 1, xb, xs, (size_t)b * 34, nx, acc0);
    b += 2;
  }
  if (b < nb) pair_rows(w + b * wsz, wsz, kind, 0, xb, xs, (size_t)b * 34, nx, acc1);
  FOR_ROWS(j) out[j] = _mm512_reduce_add_ps(_mm512_add_ps(acc0[j], acc1[j]));
}

/* One instantiation per nx so every loop over rows is fully unrolled. */
#define NX_DISPATCH(name, ...)                                                                       \
  static void name(int64_t n, const void *w, const void *x, size_t xs, int nx, float *out) {         \
    switch (nx) {                                                                                    \
    case 1: name##_k(n, w, x, xs, 1, out, __VA_ARGS__); break;                                       \
    case 2: name##_k(n, w, x, xs, 2, out, __VA_ARGS__); break;                                       \
    case 3: name##_k(n, w, x, xs, 3, out, __VA_ARGS__); break;                                       \
    case 4: name##_k(n, w, x, xs, 4, out, __VA_ARGS__); break;                                       \
    case 5: name##_k(n, w, x, xs, 5, out, __VA_ARGS__); break;                                       \
    case 6: name##_k(n, w, x, xs, 6, out, __VA_ARGS__); break;                                       \
    case 7: name##_k(n, w, x, xs, 7, out, __VA_ARGS__); break;                                       \
    default: name##_k(n, w, x, xs, 8, out, __VA_ARGS__); break;                                      \
    }                                                                                                \
  }

#define vd_q8_0_k vd_sym
#define vd_q4_0_k vd_sym
#define vd_q5_0_k vd_sym
#define vd_iq4_nl_k vd_sym
#define vd_mxfp4_k vd_sym
#define vd_q4_1_k vd_leg
#define vd_q5_1_k vd_leg
NX_DISPATCH(vd_q8_0, LQ8_0)
NX_DISPATCH(vd_q4_0, LQ4_0)
NX_DISPATCH(vd_q5_0, LQ5_0)
NX_DISPATCH(vd_iq4_nl, LIQ4_NL)
NX_DISPATCH(vd_mxfp4, LMXFP4)
NX_DISPATCH(vd_q4_1, LQ4_1)
NX_DISPATCH(vd_q5_1, LQ5_1)

/* ---- K-quants ------------------------------------------------------------ */

/* Each super-block's lines are prefetched this far ahead in the stream
 * (rows are contiguous, so past a row's end it is the next row's start):
 * the scale d sits at a block's end, and its load was the hottest
 * instruction of these kernels, waiting on memory. 4 KiB: decode steps
 * alternated in one process against 2 KiB, medians of 100-200 steps each,
 * both orders: Llama-3.2-1B-shaped Q4_K_M +3%, Qwen2.5-1.5B-shaped +4%,
 * 0.5B +1%; 8 KiB as 4, 16 KiB less. The four-row kernels (vec_dot4)
 * read four streams, each prefetched K4_PF_BYTES on, 8 KiB in all: 2 KiB
 * against 4 measured Llama-3.2-1B-shaped Q4_K_M decode +5.4-7.2% and the
 * 0.5B +1.1-1.4% (alternated, both orders), 1.5 KiB as 2, 3 KiB +3%. */
#define K_PF_BYTES 4096
#define K4_PF_BYTES 2048

AI void k_prefetch(const uint8_t *blk, const size_t bsz, const size_t dist) {
  for (size_t o = 0; o < bsz; o += 64) _mm_prefetch((const char *)(blk + dist + o), _MM_HINT_T0);
}

/* one super-block's scales at s */
AI __m128i k4_unpack_v(const uint8_t *s) {
  return _mm512_castsi512_si128(k4_unpack_lanes(_mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)s))));
}

/* one q4_K/q5_K super-block's weight side as the dots take it */
typedef struct {
  const uint8_t *qs;
  __m512i sc16; /* scales as 8 int16 (lanes sco..sco + 7) */
  int sco;
  __m256i mins; /* mins duplicated per pair of 16 */
  __m512i hb;   /* q5_K: the fifth bits, broadcast */
  float dw, dmw;
} k45_sb;

/* the mins of a super-block whose unpacked scales and mins are int16
 * lanes o..o + 15 of w, duplicated per pair of 16 (k45_sb.mins) */
AI __m256i k45_mins(__m512i w, int o) {
  const __m512i idx = _mm512_set_epi16(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 15, 15, 14, 14, 13, 13, 12, 12,
                                       11, 11, 10, 10, 9, 9, 8, 8);
  return _mm512_castsi512_si256(_mm512_permutexvar_epi16(_mm512_add_epi16(idx, _mm512_set1_epi16((short)o)), w));
}

/* a super-block's weight side from its scales and mins as int16 lanes
 * o..o + 15 of w (k4_unpack_v widened) */
AI k45_sb k45_load_w(const uint8_t *blk, __m512i w, int o, const int five) {
  const block_q4_K *w4 = (const block_q4_K *)blk;
  const block_q5_K *w5 = (const block_q5_K *)blk;
  k45_sb b;
  b.qs = five ? w5->qs : w4->qs;
  b.sc16 = w;
  b.sco = o;
  b.mins = k45_mins(w, o);
  b.dw = _cvtsh_ss(w4->d); /* same offsets in both */
  b.dmw = _cvtsh_ss(w4->dmin);
  b.hb = five ? _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)w5->qh)) : _mm512_setzero_si512();
  return b;
}

AI k45_sb k45_load(const uint8_t *blk, const int five) {
  const block_q4_K *w4 = (const block_q4_K *)blk;
  const block_q5_K *w5 = (const block_q5_K *)blk;
  return k45_load_w(blk, _mm512_castsi256_si512(_mm256_cvtepu8_epi16(k4_unpack_v(five ? w5->scales : w4->scales))), 0,
                    five);
}

/* chunk c's quants: low nibbles in the low half, high nibbles in the high
 * half (a broadcast load and one variable shift), q5_K's fifth bits from
 * hsel (chunk c's low half uses bit 2c of qh, high half bit 2c+1) */
AI __m512i k45_quants(const k45_sb *b, int c, __m512i *hsel, const int five) {
  const __m512i sh4 = _mm512_set_epi64(4, 4, 4, 4, 0, 0, 0, 0);
  const __m512i bits = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(b->qs + 32 * c)));
  __m512i q = _mm512_and_si512(_mm512_srlv_epi64(bits, sh4), _mm512_set1_epi8(0x0F));
  if (five) {
    q = _mm512_mask_add_epi8(q, _mm512_test_epi8_mask(b->hb, *hsel), q, _mm512_set1_epi8(16));
    *hsel = _mm512_slli_epi16(*hsel, 2);
  }
  return q;
}
#define K45_HSEL0 _mm512_inserti64x4(_mm512_set1_epi8(1), _mm256_set1_epi8(2), 1)

/* Two 64-quant chunks of a super-block against one token's quants x (128
 * bytes): each chunk's products summed four at a time into int32 lanes
 * with vpdpbusd (|sum| < 2^15: quants below 64, |x| <= 128, so packing
 * the two chunks' lanes to int16 is exact), then one vpdpwssd applies the
 * scales s (int16 lane 8k + i takes the scale of the quants of 128-bit
 * lane k of the first chunk for i < 4, of the second for i >= 4) and adds
 * into sumi. The two multiply pipes take 3 instructions per 128 quants
 * where vpmaddubsw + vpdpwssd per chunk took 4 (vpackssdw runs beside
 * them): bench_kernels, alternated, Q4_K 8 tokens +7-9%, Q6_K 8 tokens
 * +16-19%, four streams +8% for both. Every kernel of a type sums a
 * super-block this way, so their results agree to the bit. */
AI __m512i k_pair(__m512i sumi, __m512i q0, __m512i q1, const int8_t *x, __m512i s) {
  const __m512i z = _mm512_setzero_si512();
  const __m512i a = _mm512_dpbusd_epi32(z, q0, _mm512_loadu_si512(x));
  const __m512i b = _mm512_dpbusd_epi32(z, q1, _mm512_loadu_si512(x + 64));
  return _mm512_dpwssd_epi32(sumi, _mm512_packs_epi32(a, b), s);
}
/* k_pair's scales of chunks 2p and 2p + 1 from the 8 int16 scales sc16:
 * chunk c's 128-bit lanes 0, 1 are sub-block 2c, lanes 2, 3 sub-block
 * 2c + 1 */
AI __m512i k45_pair_scales(__m512i sc16, int sco, int p) {
  const __m512i idx = _mm512_set_epi16(3, 3, 3, 3, 1, 1, 1, 1, 3, 3, 3, 3, 1, 1, 1, 1, 2, 2, 2, 2, 0, 0, 0, 0, 2, 2,
                                       2, 2, 0, 0, 0, 0);
  return _mm512_permutexvar_epi16(_mm512_add_epi16(idx, _mm512_set1_epi16((short)(sco + 4 * p))), sc16);
}

/* a super-block's integer dot into the float accumulators of one (row,
 * token) */
AI void k45_acc(const k45_sb *b, const block_q8_K *y, __m512i sumi, __m512 *acc, __m256 *accm) {
  const __m256i pm = _mm256_madd_epi16(b->mins, _mm256_loadu_si256((const __m256i *)y->bsums));
  *accm = _mm256_fmadd_ps(_mm256_set1_ps(-(y->d * b->dmw)), _mm256_cvtepi32_ps(pm), *accm);
  *acc = _mm512_fmadd_ps(_mm512_set1_ps(b->dw * y->d), _mm512_cvtepi32_ps(sumi), *acc);
}

AI float k45_out(__m512 acc, __m256 m) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm512_reduce_add_ps(acc) + _mm_cvtss_f32(s);
}

AI void vd_q45k_k(int64_t n, const void *vw, const void *x, size_t xs, const int nx, float *out, const int five) {
  const size_t bsz = five ? sizeof(block_q5_K) : sizeof(block_q4_K);
  __m512 acc[NXMAX];
  __m256 accm[NXMAX];
  FOR_ROWS(j) {
    acc[j] = _mm512_setzero_ps();
    accm[j] = _mm256_setzero_ps();
  }
  for (int64_t i = 0; i < n / QK_K; i++) {
    const uint8_t *blk = (const uint8_t *)vw + (size_t)i * bsz;
    k_prefetch(blk, bsz, K_PF_BYTES);
    const k45_sb b = k45_load(blk, five);
    __m512i sumi[NXMAX];
    FOR_ROWS(j) sumi[j] = _mm512_setzero_si512();
    __m512i hsel = K45_HSEL0;
    _Pragma("GCC unroll 2") for (int p = 0; p < 2; p++) {
      const __m512i q0 = k45_quants(&b, 2 * p, &hsel, five);
      const __m512i q1 = k45_quants(&b, 2 * p + 1, &hsel, five);
      const __m512i s = k45_pair_scales(b.sc16, b.sco, p);
      FOR_ROWS(j) sumi[j] = k_pair(sumi[j], q0, q1, ((const block_q8_K *)XROW(x, xs, j) + i)->qs + 128 * p, s);
    }
    FOR_ROWS(j) k45_acc(&b, (const block_q8_K *)XROW(x, xs, j) + i, sumi[j], &acc[j], &accm[j]);
  }
  FOR_ROWS(j) out[j] = k45_out(acc[j], accm[j]);
}
#define vd_q4_k_k vd_q45k_k
#define vd_q5_k_k vd_q45k_k
NX_DISPATCH(vd_q4_k, 0)
NX_DISPATCH(vd_q5_k, 1)

/* ---- four rows against one token (traits.h vec_dot4) ----------------------
 * The rows' super-blocks are taken in turn, each row with exactly the
 * steps of vec_dot with one token, so the results are the same bits. */
AI void vd4_q45k(int64_t n, const void *vw, size_t rs, const void *x, float *out, const int five) {
  const size_t bsz = five ? sizeof(block_q5_K) : sizeof(block_q4_K);
  __m512 acc[4];
  __m256 accm[4];
  _Pragma("GCC unroll 4") for (int r = 0; r < 4; r++) {
    acc[r] = _mm512_setzero_ps();
    accm[r] = _mm256_setzero_ps();
  }
  for (int64_t i = 0; i < n / QK_K; i++) {
    const block_q8_K *y = (const block_q8_K *)x + i;
    const uint8_t *blk0 = (const uint8_t *)vw + (size_t)i * bsz;
    /* the scales of all four rows unpacked in one vector (the same values
     * as k4_unpack_v of each) */
    const size_t so = five ? offsetof(block_q5_K, scales) : offsetof(block_q4_K, scales);
    const __m512i u4 = k4_unpack_v4(blk0 + so, blk0 + rs + so, blk0 + 2 * rs + so, blk0 + 3 * rs + so);
    /* int16 lanes: rows 0 and 1 (2 and 3) at 0..15 and 16..31 */
    const __m512i w01 = _mm512_cvtepu8_epi16(_mm512_castsi512_si256(u4)),
                  w23 = _mm512_cvtepu8_epi16(_mm512_extracti64x4_epi64(u4, 1));
    _Pragma("GCC unroll 4") for (int r = 0; r < 4; r++) {
      const uint8_t *blk = blk0 + (size_t)r * rs;
      k_prefetch(blk, bsz, K4_PF_BYTES);
      const k45_sb b = k45_load_w(blk, r < 2 ? w01 : w23, 16 * (r & 1), five);
      __m512i sumi = _mm512_setzero_si512(), hsel = K45_HSEL0;
      _Pragma("GCC unroll 2") for (int p = 0; p < 2; p++) {
        const __m512i q0 = k45_quants(&b, 2 * p, &hsel, five);
        const __m512i q1 = k45_quants(&b, 2 * p + 1, &hsel, five);
        const __m512i s = k45_pair_scales(b.sc16, b.sco, p);
        sumi = k_pair(sumi, q0, q1, y->qs + 128 * p, s);
      }
      k45_acc(&b, y, sumi, &acc[r], &accm[r]);
    }
  }
  _Pragma("GCC unroll 4") for (int r = 0; r < 4; r++) out[r] = k45_out(acc[r], accm[r]);
}
static void vd4_q4_k(int64_t n, const void *w, size_t rs, const void *x, float *out) { vd4_q45k(n, w, rs, x, out, 0); }
static void vd4_q5_k(int64_t n, const void *w, size_t rs, const void *x, float *out) { vd4_q45k(n, w, rs, x, out, 1); }

/* k_pair's scales of half h's two chunks from the 16 int16 scales sc16:
 * chunk m's 128-bit lane k takes scale 8h + 4m + k */
AI __m512i q6_pair_scales(__m512i sc16, int h) {
  const __m512i idx = _mm512_set_epi16(7, 7, 7, 7, 3, 3, 3, 3, 6, 6, 6, 6, 2, 2, 2, 2, 5, 5, 5, 5, 1, 1, 1, 1, 4, 4,
                                       4, 4, 0, 0, 0, 0);
  return _mm512_permutexvar_epi16(_mm512_add_epi16(idx, _mm512_set1_epi16((short)(8 * h))), sc16);
}

/* value = q - 32: the -32 comes out as -32 * sum(sc * bsum), the initial
 * integer dot of a (super-block, token) */
AI __m512i q6_init(__m256i sc16y, const block_q8_K *y) {
  const __m256i corr = _mm256_madd_epi16(sc16y, _mm256_loadu_si256((const __m256i *)y->bsums));
  return _mm512_zextsi256_si512(_mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(corr, 5)));
}

AI void vd_q6_k_k(int64_t n, const void *vw, const void *x, size_t xs, const int nx, float *out, const int unused) {
  (void)unused;
  const block_q6_K *w = vw;
  __m512 acc[NXMAX];
  FOR_ROWS(j) acc[j] = _mm512_setzero_ps();
  for (int64_t i = 0; i < n / QK_K; i++) {
    k_prefetch((const uint8_t *)&w[i], sizeof *w, K_PF_BYTES);
    const __m256i sc16y = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)w[i].scales));
    const __m512i sc16 = _mm512_castsi256_si512(sc16y);
    const float dw = _cvtsh_ss(w[i].d);
    __m512i sumi[NXMAX];
    FOR_ROWS(j) sumi[j] = q6_init(sc16y, (const block_q8_K *)XROW(x, xs, j) + i);
    _Pragma("GCC unroll 2") for (int h = 0; h < 2; h++) {
      const __m512i q0 = q6_quants(&w[i], h, 0), q1 = q6_quants(&w[i], h, 1);
      const __m512i s = q6_pair_scales(sc16, h);
      FOR_ROWS(j) sumi[j] = k_pair(sumi[j], q0, q1, ((const block_q8_K *)XROW(x, xs, j) + i)->qs + 128 * h, s);
    }
    FOR_ROWS(j) {
      const block_q8_K *y = (const block_q8_K *)XROW(x, xs, j) + i;
      acc[j] = _mm512_fmadd_ps(_mm512_set1_ps(dw * y->d), _mm512_cvtepi32_ps(sumi[j]), acc[j]);
    }
  }
  FOR_ROWS(j) out[j] = _mm512_reduce_add_ps(acc[j]);
}
NX_DISPATCH(vd_q6_k, 0)

static void vd4_q6_k(int64_t n, const void *vw, size_t rs, const void *x, float *out) {
  __m512 acc[4];
  _Pragma("GCC unroll 4") for (int r = 0; r < 4; r++) acc[r] = _mm512_setzero_ps();
  for (int64_t i = 0; i < n / QK_K; i++) {
    const block_q8_K *y = (const block_q8_K *)x + i;
    _Pragma("GCC unroll 4") for (int r = 0; r < 4; r++) {
      const block_q6_K *w = (const block_q6_K *)((const uint8_t *)vw + (size_t)r * rs) + i;
      k_prefetch((const uint8_t *)w, sizeof *w, K4_PF_BYTES);
      const __m256i sc16y = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)w->scales));
      const __m512i sc16 = _mm512_castsi256_si512(sc16y);
      __m512i sumi = q6_init(sc16y, y);
      _Pragma("GCC unroll 2") for (int h = 0; h < 2; h++) {
        const __m512i s = q6_pair_scales(sc16, h);
        sumi = k_pair(sumi, q6_quants(w, h, 0), q6_quants(w, h, 1), y->qs + 128 * h, s);
      }
      acc[r] = _mm512_fmadd_ps(_mm512_set1_ps(_cvtsh_ss(w->d) * y->d), _mm512_cvtepi32_ps(sumi), acc[r]);
    }
  }
  _Pragma("GCC unroll 4") for (int r = 0; r < 4; r++) out[r] = _mm512_reduce_add_ps(acc[r]);
}

/* ---- IQ4_XS ----------------------------------------------------------------
 * A super-block is four 64-element chunks, each two groups of 32: the 32
 * index bytes of a chunk are spread to [g0 low, g0 high, g1 low, g1 high]
 * nibbles (the activation's element order) and looked up in the value
 * table with one vpshufb. Table values reach -127, so 4-product vpdpbusd
 * sums could pass int16; instead the signs move onto the activation,
 * vpmaddubsw makes pair sums (|s| <= 2 * 127 * 127, exact) and vpdpwssd
 * applies each group's 6-bit scale while adding into the row's int32
 * sums: three instructions per row and chunk, one FMA per super-block
 * (|sum| < 2^25, exact). */

/* the super-block's eight group scales (ls - 32) as int16 lanes 0..7, in
 * registers: scalar stores read back as one vector stalled the store
 * forwarding (avx512-1 IQ4_XS 8.8 GB/s against avx2's 11.5 in
 * bench_kernels) */
AI __m512i iq4xs_scales(const block_iq4_xs *b) {
  uint32_t sl;
  memcpy(&sl, b->scales_l, 4);
  const __m256i lo = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32((int)sl), _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28)),
                                      _mm256_set1_epi32(0xF));
  const __m256i hi = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(b->scales_h), _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14)),
                                      _mm256_set1_epi32(3));
  const __m256i ls = _mm256_sub_epi32(_mm256_or_si256(lo, _mm256_slli_epi32(hi, 4)), _mm256_set1_epi32(32));
  return _mm512_castsi128_si512(_mm256_cvtepi32_epi16(ls));
}

/* chunk c's values (signed) */
AI __m512i iq4xs_chunk(const block_iq4_xs *b, int c, __m512i tab) {
  const __m512i t = _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(b->qs + 32 * c)));
  const __m512i d = _mm512_shuffle_i64x2(t, t, 0x50); /* 128-bit lanes 0, 0, 1, 1 */
  const __m512i q = _mm512_and_si512(_mm512_srlv_epi64(d, _mm512_set_epi64(4, 4, 0, 0, 4, 4, 0, 0)), _mm512_set1_epi8(0x0F));
  return _mm512_shuffle_epi8(tab, q);
}

/* chunk c's scales: int16 lanes 0..15 group 2c, 16..31 group 2c + 1 */
AI __m512i iq4xs_chunk_scales(__m512i sc16, int c) {
  const __m512i idx = _mm512_inserti64x4(_mm512_set1_epi16((short)(2 * c)), _mm256_set1_epi16((short)(2 * c + 1)), 1);
  return _mm512_permutexvar_epi16(idx, sc16);
}

AI void vd_iq4_xs_k(int64_t n, const void *vw, const void *x, size_t xs, const int nx, float *out, const int unused) {
  (void)unused;
  const block_iq4_xs *w = vw;
  const __m512i tab = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)pw_kvalues_iq4nl));
  __m512 acc[NXMAX];
  FOR_ROWS(j) acc[j] = _mm512_setzero_ps();
  for (int64_t i = 0; i < n / QK_K; i++) {
    k_prefetch((const uint8_t *)&w[i], sizeof *w, K_PF_BYTES);
    const __m512i sc16 = iq4xs_scales(&w[i]);
    const float dw = _cvtsh_ss(w[i].d);
    __m512i sumi[NXMAX];
    FOR_ROWS(j) sumi[j] = _mm512_setzero_si512();
    _Pragma("GCC unroll 4") for (int c = 0; c < 4; c++) {
      const __m512i q = iq4xs_chunk(&w[i], c, tab);
      const __m512i aq = _mm512_abs_epi8(q);
      const __mmask64 neg = _mm512_movepi8_mask(q);
      const __m512i s = iq4xs_chunk_scales(sc16, c);
      FOR_ROWS(j) {
        const block_q8_K *y = (const block_q8_K *)XROW(x, xs, j) + i;
        __m512i yv = _mm512_loadu_si512(y->qs + 64 * c);
        yv = _mm512_mask_sub_epi8(yv, neg, _mm512_setzero_si512(), yv);
        sumi[j] = _mm512_dpwssd_epi32(sumi[j], _mm512_maddubs_epi16(aq, yv), s);
      }
    }
    FOR_ROWS(j) {
      const block_q8_K *y = (const block_q8_K *)XROW(x, xs, j) + i;
      acc[j] = _mm512_fmadd_ps(_mm512_set1_ps(dw * y->d), _mm512_cvtepi32_ps(sumi[j]), acc[j]);
    }
  }
  FOR_ROWS(j) out[j] = _mm512_reduce_add_ps(acc[j]);
}
NX_DISPATCH(vd_iq4_xs, 0)

/* ---- four rows against one token for the non-linear types (vec_dot4) ------
 * Each row goes through exactly the steps vec_dot takes with one token
 * (the same pairs, accumulators and reductions), the rows in turn, so the
 * results are the same bits; each row's stream is prefetched K4_PF_BYTES
 * ahead, as the K-quants' four-row kernels do. */
AI void vd4_sym(int64_t n, const void *vw, size_t rs, const void *x, float *out, const int kind) {
  const int wsz = sym_wsz(kind);
  const int64_t nb = n / 32;
  const uint8_t *xb = x;
  __m512 acc0[4], acc1[4];
  _Pragma("GCC unroll 4") for (int r = 0; r < 4; r++) acc0[r] = acc1[r] = _mm512_setzero_ps();
  int64_t b = 0;
  for (; b + 4 <= nb; b += 4) {
    _Pragma("GCC unroll 4") for (int r = 0; r < 4; r++) {
      const uint8_t *w = (const uint8_t *)vw + (size_t)r * rs + b * wsz;
      k_prefetch(w, (size_t)(4 * wsz), K4_PF_BYTES);
      pair_rows(w, wsz, kind, 1, xb, 0, (size_t)b * 34, 1, &acc0[r]);
      pair_rows(w + 2 * wsz, wsz, kind, 1, xb, 0, (size_t)(b + 2) * 34, 1, &acc1[r]);
    }
  }
  _Pragma("GCC unroll 4") for (int r = 0; r < 4; r++) {
    const uint8_t *w = (const uint8_t *)vw + (size_t)r * rs;
    int64_t c = b;
    if (c + 2 <= nb) {
      pair_rows(w + c * wsz, wsz, kind, 1, xb, 0, (size_t)c * 34, 1, &acc0[r]);
      c += 2;
    }
    if (c < nb) pair_rows(w + c * wsz, wsz, kind, 0, xb, 0, (size_t)c * 34, 1, &acc1[r]);
    out[r] = _mm512_reduce_add_ps(_mm512_add_ps(acc0[r], acc1[r]));
  }
}
static void vd4_iq4_nl(int64_t n, const void *w, size_t rs, const void *x, float *out) {
  vd4_sym(n, w, rs, x, out, LIQ4_NL);
}
static void vd4_mxfp4(int64_t n, const void *w, size_t rs, const void *x, float *out) {
  vd4_sym(n, w, rs, x, out, LMXFP4);
}

static void vd4_iq4_xs(int64_t n, const void *vw, size_t rs, const void *x, float *out) {
  const __m512i tab = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)pw_kvalues_iq4nl));
  __m512 acc[4];
  _Pragma("GCC unroll 4") for (int r = 0; r < 4; r++) acc[r] = _mm512_setzero_ps();
  for (int64_t i = 0; i < n / QK_K; i++) {
    const block_q8_K *y = (const block_q8_K *)x + i;
    _Pragma("GCC unroll 4") for (int r = 0; r < 4; r++) {
      const block_iq4_xs *w = (const block_iq4_xs *)((const uint8_t *)vw + (size_t)r * rs) + i;
      k_prefetch((const uint8_t *)w, sizeof *w, K4_PF_BYTES);
      const __m512i sc16 = iq4xs_scales(w);
      __m512i sumi = _mm512_setzero_si512();
      _Pragma("GCC unroll 4") for (int c = 0; c < 4; c++) {
        const __m512i q = iq4xs_chunk(w, c, tab);
        const __m512i yv = _mm512_loadu_si512(y->qs + 64 * c);
        const __m512i ys = _mm512_mask_sub_epi8(yv, _mm512_movepi8_mask(q), _mm512_setzero_si512(), yv);
        sumi = _mm512_dpwssd_epi32(sumi, _mm512_maddubs_epi16(_mm512_abs_epi8(q), ys), iq4xs_chunk_scales(sc16, c));
      }
      acc[r] = _mm512_fmadd_ps(_mm512_set1_ps(_cvtsh_ss(w->d) * y->d), _mm512_cvtepi32_ps(sumi), acc[r]);
    }
  }
  _Pragma("GCC unroll 4") for (int r = 0; r < 4; r++) out[r] = _mm512_reduce_add_ps(acc[r]);
}

void quants_fill_avx512(pw_traits *t) {
  t[PW_DT_Q4_0].vec_dot = vd_q4_0;
  t[PW_DT_Q4_1].vec_dot = vd_q4_1;
  t[PW_DT_Q5_0].vec_dot = vd_q5_0;
  t[PW_DT_Q5_1].vec_dot = vd_q5_1;
  t[PW_DT_Q8_0].vec_dot = vd_q8_0;
  t[PW_DT_Q4_K].vec_dot = vd_q4_k;
  t[PW_DT_Q5_K].vec_dot = vd_q5_k;
  t[PW_DT_Q6_K].vec_dot = vd_q6_k;
  t[PW_DT_IQ4_NL].vec_dot = vd_iq4_nl;
  t[PW_DT_IQ4_XS].vec_dot = vd_iq4_xs;
  t[PW_DT_MXFP4].vec_dot = vd_mxfp4;
  t[PW_DT_IQ4_NL].vec_dot4 = vd4_iq4_nl;
  t[PW_DT_IQ4_XS].vec_dot4 = vd4_iq4_xs;
  t[PW_DT_MXFP4].vec_dot4 = vd4_mxfp4;
  t[PW_DT_Q4_K].vec_dot4 = vd4_q4_k;
  t[PW_DT_Q5_K].vec_dot4 = vd4_q5_k;
  t[PW_DT_Q6_K].vec_dot4 = vd4_q6_k;
  for (int i = 0; i < PW_DT_COUNT; i++)
    if (t[i].to_float) t[i].impl = "avx512vnni";
}
