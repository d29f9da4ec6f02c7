/* gemm_avx512vbmi.c - the register-tiled GEMM of the symmetric 32-element
 * weight types (Q8_0, Q4_0, Q5_0) with AVX-512 VNNI, VBMI and BITALG
 * (the byte permute and bit shuffle of the weight unpack). Installed by
 * pw_tensor_init on top of the AVX-512 vec_dot kernels when the CPU has
 * those too (Ice Lake, Zen 4 and later); without them the matmul uses the
 * vec_dot kernels for these types. */
#include "tensor/dtype.h"
#include "tensor/quants.h"
#include "tensor/traits.h"

#include <immintrin.h>
#include <string.h>

#define AI static inline __attribute__((always_inline))

enum { LQ8_0, LQ4_0, LQ5_0 };

/* block bytes of the symmetric 32-element types */
AI int sym_wsz(const int kind) { return kind == LQ8_0 ? 34 : kind == LQ4_0 ? 18 : 22; }

/* The GEMM walks each weight row in quads of 32-element blocks.
 * Activations are packed once per matmul (gemm_pack_quad) into the same
 * quads of q8_0 blocks, XQUAD = 256 bytes each: quants 0..15 of block 4i+k
 * in 128-bit lane k, then quants 16..31 the same way (for Q4_0/Q5_0 the
 * low and high nibbles of a block), the 16 lane scales (block 4i+k's d in
 * lanes 4k..4k+3, as floats) and the 16 lane corrections. Two vpdpbusd
 * fold a whole block into its 4 lanes, so one convert, scale product and
 * FMA serve 4 blocks (two blocks per vector needed twice those).
 * Weights enter vpdpbusd unsigned: Q4_0 and Q5_0 as their stored values
 * q + 8 and q + 16, Q8_0 as q + 128 (xor 0x80); the offset times the
 * negated activation lane sum depends on the token alone, is packed with it
 * (so each weight type has its own pack) and is the initial value of the
 * integer dot. So per (row, token, quad) there is no sign fix-up, and the
 * weight unpack is shared by the whole tile.
 *
 * A Q4_0/Q5_0 quad's weights are two loads (72 or 88 bytes; the rest
 * masked off), one byte permute that puts each block's 16 quant bytes in
 * its lane, and one word permute that gathers the four fp16 scales (and
 * Q5_0's fifth-bit words) into the lanes that use them; Q5_0's fifth bits
 * become byte masks with vpshufbitqmb. Q8_0 loads each block's 32 quants
 * and splits halves with two 128-bit lane shuffles. Measured from L2, one
 * token streamed, against two blocks per vector with scalar scale loads:
 * Q5_0 24 -> 38 GB/s per core at 896 wide (+65% at 4096), Q8_0 +30%; 4-8
 * tokens +25-40%.
 *
 * Each (row, token) result is one accumulator over the quads in order and
 * one final reduction, whatever tile computed it (the gemm contract). */

#define XQUAD 256
/* Each quad load of a weight row goes with software prefetches this many
 * rows further on (rows are contiguous, so that is a fixed distance ahead
 * in the stream); measured faster than the hardware prefetchers alone,
 * much more so for tiles that read 4 rows side by side. */
#define GEMM_PF_ROWS 16
/* the 2-row tiles of 5..8 tokens do about 8 times the work per weight
 * byte: prefetched 32 rows on, 8 sequences decoding together measured
 * +3.5-5.4% against 16 (0.5B shape, steps alternated, both orders, four
 * runs; 24 rows +0.6%, 48 +1.5%, 2 and 4 rows 11-17% slower) */
#define GEMM_WIDE_PF_ROWS 32
/* ... and for Q5_0 and Q4_0 those tiles also prefetch into L2 (T1) 48 rows
 * on, so the L1 prefetches hit L2 instead of waiting a whole memory
 * latency each: 8 sequences decoding together, steps alternated in one
 * process, both orders: 0.5B Q4_K_M shape (Q5_0 gate/up) +14-16% in one
 * memory phase, +1.2-3.1% in a slower one; 64 rows as 48, 96 rows +10%,
 * 32 rows (the L1 distance) 5% slower than none; the L1 distance then
 * measured the same at 8 to 32 rows. 0.5B Q4_0 +1.2-1.6%.
 * Q8_0 measured 2.5-5% slower at 40 to 96 rows, so it has none; so did the
 * K-quant kernels' 8-token rows (no gain at 8-32 KiB on). */
#define GEMM_WIDE_L2_PF_ROWS 48

static pw_from_float_fn g_q8_0_from; /* the installed q8_0 quantizer */

static size_t gemm_xrow_quad(int64_t n) { return (size_t)((n / 32 + 3) / 4) * XQUAD; }

/* the lane corrections of a quad's quants v and v2: the negated lane sums
 * times the weight offset (2^shift) */
AI __m512i lane_corr(__m512i v, __m512i v2, const int shift) {
  const __m512i zero = _mm512_setzero_si512(), one = _mm512_set1_epi8(1);
  const __m512i sums = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(zero, one, v), one, v2);
  return _mm512_sub_epi32(zero, _mm512_slli_epi32(sums, shift));
}

/* shift: log2 of the weight offset of the type the rows are packed for
 * (sym_shift) */
AI void gemm_pack_quad(const float *x, void *vxp, int64_t n, const int shift) {
  const int64_t nb = n / 32;
  const __m512i sidx = _mm512_srli_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15), 2);
  uint8_t *xp = vxp;
  for (int64_t b = 0; b < nb; b += 4, xp += XQUAD) {
    const int cnt = nb - b < 4 ? (int)(nb - b) : 4;
    block_q8_0 q[4];
    g_q8_0_from(x + b * 32, q, cnt * 32);
    if (cnt < 4) memset(&q[cnt], 0, (size_t)(4 - cnt) * sizeof q[0]);
    uint64_t dh = 0;
    for (int k = 0; k < 4; k++) {
      memcpy(xp + 16 * k, q[k].qs, 16);
      memcpy(xp + 64 + 16 * k, q[k].qs + 16, 16);
      dh |= (uint64_t)q[k].d << 16 * k;
    }
    const __m128 d = _mm_cvtph_ps(_mm_cvtsi64_si128((long long)dh));
    _mm512_storeu_ps(xp + 128, _mm512_permutexvar_ps(sidx, _mm512_castps128_ps512(d)));
    _mm512_storeu_si512(xp + 192, lane_corr(_mm512_loadu_si512(xp), _mm512_loadu_si512(xp + 64), shift));
  }
}

/* _mm512_reduce_add_ps of four vectors at once, with the same tree (lane
 * i + 8, then i + 4, i + 2, i + 1 folded onto lane i), so each sum is
 * bit-identical to reducing its vector alone. */
AI __m128 reduce_add4(__m512 a, __m512 b, __m512 c, __m512 d) {
  const __m512 ab = _mm512_add_ps(_mm512_shuffle_f32x4(a, b, 0x44), _mm512_shuffle_f32x4(a, b, 0xEE));
  const __m512 cd = _mm512_add_ps(_mm512_shuffle_f32x4(c, d, 0x44), _mm512_shuffle_f32x4(c, d, 0xEE));
  /* [a8 | b8] and [c8 | d8] -> per 128-bit lane: a4, b4, c4, d4 */
  const __m512 v4 = _mm512_add_ps(_mm512_shuffle_f32x4(ab, cd, 0x88), _mm512_shuffle_f32x4(ab, cd, 0xDD));
  const __m512 v2 = _mm512_add_ps(v4, _mm512_permute_ps(v4, 0x4E));
  const __m512 v1 = _mm512_add_ps(v2, _mm512_permute_ps(v2, 0xB1));
  /* lane 0 of each 128-bit lane */
  return _mm512_castps512_ps128(_mm512_permutexvar_ps(_mm512_setr_epi32(0, 4, 8, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0), v1));
}

/* log2 of the weight offset of the unsigned weights */
AI int sym_shift(const int kind) { return kind == LQ8_0 ? 7 : kind == LQ4_0 ? 3 : 4; }

/* one quad of one weight row as the dots take it: a and b the unsigned
 * quants (low and high 16 of each block), d the lane scales */
typedef struct {
  __m512i a, b;
  __m512 d;
} wquad;

/* a byte-mask of the low `n` bytes (n <= 64) */
AI __mmask64 low_bytes(int n) { return n >= 64 ? ~0ull : (1ull << n) - 1; }

/* the quad at wp with cnt of its blocks present (the last quad of a row
 * may have fewer); absent blocks read as zero (their scales too) */
AI wquad w_quad(const uint8_t *wp, const int kind, const int cnt) {
  wquad u;
  if (kind == LQ8_0) {
    /* [block 0 | block 1] and [block 2 | block 3] quants, then the low and
     * high 16 of each block into its lane */
    const int nbytes = cnt * 34;
    const __m512i x80 = _mm512_set1_epi8((char)0x80);
    __m512i A, B;
    if (cnt == 4) {
      A = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(wp + 2))),
                             _mm256_loadu_si256((const __m256i *)(wp + 36)), 1);
      B = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(wp + 70))),
                             _mm256_loadu_si256((const __m256i *)(wp + 104)), 1);
    } else {
      __m256i q[4];
      for (int k = 0; k < 4; k++)
        q[k] = k < cnt ? _mm256_loadu_si256((const __m256i *)(wp + 34 * k + 2)) : _mm256_setzero_si256();
      A = _mm512_inserti64x4(_mm512_castsi256_si512(q[0]), q[1], 1);
      B = _mm512_inserti64x4(_mm512_castsi256_si512(q[2]), q[3], 1);
    }
    u.a = _mm512_xor_si512(_mm512_shuffle_i32x4(A, B, 0x88), x80);
    u.b = _mm512_xor_si512(_mm512_shuffle_i32x4(A, B, 0xDD), x80);
    const __m512i l0 = nbytes >= 64 ? _mm512_loadu_si512(wp) : _mm512_maskz_loadu_epi8(low_bytes(nbytes), wp);
    const __m512i l1 = nbytes > 64 ? _mm512_maskz_loadu_epi8(low_bytes(nbytes - 64), wp + 64) : _mm512_setzero_si512();
    /* words [d0 x 4, d1 x 4, d2 x 4, d3 x 4] (d_k at word 17k) */
    const __m512i didx = _mm512_set_epi16(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                                          51, 51, 51, 51, 34, 34, 34, 34, 17, 17, 17, 17, 0, 0, 0, 0);
    u.d = _mm512_cvtph_ps(_mm512_castsi512_si256(_mm512_permutex2var_epi16(l0, didx, l1)));
    return u;
  }
  const int wsz = sym_wsz(kind), nbytes = cnt * wsz;
  const __m512i lo = nbytes >= 64 ? _mm512_loadu_si512(wp) : _mm512_maskz_loadu_epi8(low_bytes(nbytes), wp);
  const __m512i hi = nbytes > 64 ? _mm512_maskz_loadu_epi8(low_bytes(nbytes - 64), wp + 64) : _mm512_setzero_si512();
  /* block k's 16 quant bytes (at k * wsz + 2, or + 6 after Q5_0's qh) into
   * lane k */
  const int qo = kind == LQ4_0 ? 2 : 6;
  __m512i qidx;
  if (kind == LQ4_0)
    qidx = _mm512_set_epi8(69, 68, 67, 66, 65, 64, 63, 62, 61, 60, 59, 58, 57, 56, 55, 54,
                           51, 50, 49, 48, 47, 46, 45, 44, 43, 42, 41, 40, 39, 38, 37, 36,
                           33, 32, 31, 30, 29, 28, 27, 26, 25, 24, 23, 22, 21, 20, 19, 18,
                           15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
  else
    qidx = _mm512_set_epi8(81, 80, 79, 78, 77, 76, 75, 74, 73, 72, 71, 70, 69, 68, 67, 66,
                           59, 58, 57, 56, 55, 54, 53, 52, 51, 50, 49, 48, 47, 46, 45, 44,
                           37, 36, 35, 34, 33, 32, 31, 30, 29, 28, 27, 26, 25, 24, 23, 22,
                           15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
  const __m512i v = _mm512_permutex2var_epi8(lo, _mm512_add_epi8(qidx, _mm512_set1_epi8((char)qo)), hi);
  const __m512i m0f = _mm512_set1_epi8(0x0F);
  u.a = _mm512_and_si512(v, m0f);
  u.b = _mm512_and_si512(_mm512_srli_epi16(v, 4), m0f);
  if (kind == LQ4_0) {
    /* words [d0 x 4, d1 x 4, d2 x 4, d3 x 4] (d_k at word 9k) */
    const __m512i didx = _mm512_set_epi16(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                                          27, 27, 27, 27, 18, 18, 18, 18, 9, 9, 9, 9, 0, 0, 0, 0);
    u.d = _mm512_cvtph_ps(_mm512_castsi512_si256(_mm512_permutexvar_epi16(didx, lo)));
    return u;
  }
  /* Q5_0: quadword 2k and 2k+1 = [d_k, d_k, qh_k low, qh_k high] (d_k at
   * word 11k, qh_k at words 11k + 1 and 11k + 2) */
  const __m512i bidx = _mm512_set_epi16(35, 34, 33, 33, 35, 34, 33, 33, 24, 23, 22, 22, 24, 23, 22, 22,
                                        13, 12, 11, 11, 13, 12, 11, 11, 2, 1, 0, 0, 2, 1, 0, 0);
  const __m512i bq = _mm512_permutex2var_epi16(lo, bidx, hi);
  /* byte j of quadword m takes qh bit 32 + 8 (m & 1) + j: the fifth bit of
   * quant 8 (m & 1) + j in the low nibbles, + 16 in the high ones */
  const __m512i sel = _mm512_set1_epi64(0x2726252423222120ll);
  const __m512i sel_lo = _mm512_mask_add_epi8(sel, 0xFF00FF00FF00FF00ull, sel, _mm512_set1_epi8(8));
  const __m512i s16 = _mm512_set1_epi8(16);
  u.a = _mm512_mask_add_epi8(u.a, _mm512_bitshuffle_epi64_mask(bq, sel_lo), u.a, s16);
  u.b = _mm512_mask_add_epi8(u.b, _mm512_bitshuffle_epi64_mask(bq, _mm512_add_epi8(sel_lo, s16)), u.b, s16);
  u.d = _mm512_cvtph_ps(_mm512_cvtepi64_epi32(bq));
  return u;
}

/* prefetches of the quad at wp, pfd bytes on (GEMM_PF_ROWS rows: both of
 * a quad's cache lines) */
AI void w_prefetch(const uint8_t *wp, size_t pfd, const int kind) {
  const char *pf = (const char *)wp + pfd;
  _mm_prefetch(pf, _MM_HINT_T0);
  if (kind == LQ8_0) _mm_prefetch(pf + 64, _MM_HINT_T0);
  _mm_prefetch(pf + 4 * sym_wsz(kind) - 1, _MM_HINT_T0);
}

/* the same into L2, for the types whose quad is at most two lines */
AI void w_prefetch_l2(const uint8_t *wp, size_t pfd, const int kind) {
  const char *pf = (const char *)wp + pfd;
  _mm_prefetch(pf, _MM_HINT_T1);
  _mm_prefetch(pf + 4 * sym_wsz(kind) - 1, _MM_HINT_T1);
}

/* Tiles are R rows x T tokens: up to 4 x 4, or 2 x 5..8 when those
 * tokens' activation rows fit in L1 together (GEMM_WIDE_X_BYTES): one
 * unpack of a weight quad then serves up to 8 tokens instead of 4. With
 * wider rows the 2-row tiles would read each token's data from L2 twice as
 * often, and measured slower than 4 x 4. */
#define TMAX 8
#define GEMM_WIDE_X_BYTES (24u << 10)

/* a token's correction for this quad (as packed): the initial value of
 * its integer dots */
AI __m512i tok_nc(const uint8_t *xt) { return _mm512_loadu_si512(xt + 192); }

/* the corrections of up to 4 tokens, kept in registers by 4-token tiles */
AI void tok_corr(const int T, const uint8_t *xp, size_t xrow, __m512i nc[4]) {
  _Pragma("GCC unroll 4") for (int t = 0; t < T; t++) nc[t] = tok_nc(xp + (size_t)t * xrow);
}

/* one (row, token, quad): the dots, the scale product, the convert and the
 * FMA; every tile shape runs exactly this. x, x2: the token's quants, dx
 * its lane scales */
AI __m512 quad_fma(__m512i nc, const wquad *w, __m512i x, __m512i x2, __m512 dx, __m512 acc) {
  const __m512i d = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(nc, w->a, x), w->b, x2);
  return _mm512_fmadd_ps(_mm512_cvtepi32_ps(d), _mm512_mul_ps(w->d, dx), acc);
}


/* one row's quad against up to 4 tokens */
AI void row_tokens(const int T, const wquad *w, const __m512i nc[4], const uint8_t *xp, size_t xrow,
                   __m512 acc[TMAX]) {
  _Pragma("GCC unroll 4") for (int t = 0; t < T; t++) {
    const uint8_t *xt = xp + (size_t)t * xrow;
    acc[t] = quad_fma(nc[t], w, _mm512_loadu_si512(xt), _mm512_loadu_si512(xt + 64), _mm512_loadu_ps(xt + 128), acc[t]);
  }
}

/* one quad (cnt blocks of it present) of R rows x T tokens */
/* the tile's rows are rs bytes apart (w_row, or a stream's length) */
AI void gemm_quad(const int kind, const int R, const int T, const int cnt, const uint8_t *w, size_t rs, size_t pfd,
                  const uint8_t *xp, size_t xrow, __m512 acc[4][TMAX]) {
  if (T > 4) { /* 2 rows unpacked, then each token's data read once (its
                * correction too: the registers go to the accumulators) */
    wquad q[2];
    _Pragma("GCC unroll 2") for (int r = 0; r < R; r++) {
      const uint8_t *wp = w + (size_t)r * rs;
      w_prefetch(wp, pfd, kind);
      if (kind != LQ8_0) w_prefetch_l2(wp, GEMM_WIDE_L2_PF_ROWS * rs, kind);
      q[r] = w_quad(wp, kind, cnt);
    }
    _Pragma("GCC unroll 8") for (int t = 0; t < T; t++) {
      const uint8_t *xt = xp + (size_t)t * xrow;
      __m512i nct = tok_nc(xt), xv = _mm512_loadu_si512(xt), x2 = _mm512_loadu_si512(xt + 64);
      __m512 dx = _mm512_loadu_ps(xt + 128);
      /* in registers for both rows: left to itself the compiler reloads
       * them as memory operands, and those loads per (row, token) made
       * this tile load-bound */
      __asm__("" : "+v"(nct), "+v"(xv), "+v"(x2), "+v"(dx));
      _Pragma("GCC unroll 2") for (int r = 0; r < R; r++) acc[r][t] = quad_fma(nct, &q[r], xv, x2, dx, acc[r][t]);
    }
    return;
  }
  __m512i nc[4];
  tok_corr(T, xp, xrow, nc);
  _Pragma("GCC unroll 4") for (int r = 0; r < R; r++) {
    const uint8_t *wp = w + (size_t)r * rs;
    w_prefetch(wp, pfd, kind);
    const wquad q = w_quad(wp, kind, cnt);
    row_tokens(T, &q, nc, xp, xrow, acc[r]);
  }
}

AI void tile_zero(const int R, const int T, __m512 acc[4][TMAX]) {
  _Pragma("GCC unroll 4") for (int r = 0; r < R; r++)
    _Pragma("GCC unroll 8") for (int t = 0; t < T; t++) acc[r][t] = _mm512_setzero_ps();
}

/* each (row, token) accumulator reduced to y[t * ys + r] (y[t * ys + r *
 * yr] for the rows of four streams): four at a time with reduce_add4 (four
 * rows of a token, or two rows of two tokens), the same sums as one at a
 * time */
AI void tile_out(const int R, const int T, __m512 acc[4][TMAX], float *y, size_t ys, size_t yr) {
  if (R == 4) {
    _Pragma("GCC unroll 4") for (int t = 0; t < T; t++) {
      const __m128 v = reduce_add4(acc[0][t], acc[1][t], acc[2][t], acc[3][t]);
      float *yt = y + (size_t)t * ys;
      if (yr == 1) {
        _mm_storeu_ps(yt, v);
      } else {
        _mm_store_ss(yt, v);
        _mm_store_ss(yt + yr, _mm_shuffle_ps(v, v, 1));
        _mm_store_ss(yt + 2 * yr, _mm_shuffle_ps(v, v, 2));
        _mm_store_ss(yt + 3 * yr, _mm_shuffle_ps(v, v, 3));
      }
    }
  } else if (R == 2) {
    int t = 0;
    _Pragma("GCC unroll 4") for (; t + 2 <= T; t += 2) {
      const __m128 v = reduce_add4(acc[0][t], acc[1][t], acc[0][t + 1], acc[1][t + 1]);
      _mm_storel_pi((__m64 *)(y + (size_t)t * ys), v);
      _mm_storeh_pi((__m64 *)(y + (size_t)(t + 1) * ys), v);
    }
    if (t < T) {
      y[(size_t)t * ys] = _mm512_reduce_add_ps(acc[0][t]);
      y[(size_t)t * ys + 1] = _mm512_reduce_add_ps(acc[1][t]);
    }
  } else {
    _Pragma("GCC unroll 4") for (int r = 0; r < R; r++)
      _Pragma("GCC unroll 8") for (int t = 0; t < T; t++) y[(size_t)t * ys + r] = _mm512_reduce_add_ps(acc[r][t]);
  }
}

/* rows rs bytes apart, results yr apart (1 but for streams) */
AI void gemm_tile(const int kind, const int R, const int T, int64_t nb, const uint8_t *w, size_t rs, size_t pfd,
                  const uint8_t *xp, size_t xrow, float *y, size_t ys, size_t yr) {
  const int wsz = sym_wsz(kind);
  __m512 acc[4][TMAX];
  tile_zero(R, T, acc);
  const uint8_t *wb = w, *xb = xp;
  int64_t b = 0;
  for (; b + 4 <= nb; b += 4, wb += 4 * wsz, xb += XQUAD) gemm_quad(kind, R, T, 4, wb, rs, pfd, xb, xrow, acc);
  if (b < nb) gemm_quad(kind, R, T, (int)(nb - b), wb, rs, pfd, xb, xrow, acc);
  tile_out(R, T, acc, y, ys, yr);
}

/* ---- the same tiles over unpacked rows (many tokens) --------------------
 * With 8 or more tokens each weight quad would be unpacked once per group
 * of 4 tokens; instead a block of rows is unpacked once into a buffer, per
 * quad w_quad's vectors (UQUAD bytes), and the tiles read those. Both paths
 * run row_tokens per (row, quad) in the same order, so every result is
 * bit-identical to the packed path's. */
#define GEMM_UNPACK_TOKENS 32
#define GEMM_UNPACK_BYTES (128u << 10)

/* unpacked bytes per quad: a, b and d */
#define UQUAD 192

AI void unpack_rows(const int kind, int64_t nb, const uint8_t *w, size_t w_row, int nr, uint8_t *u, size_t u_row) {
  const int wsz = sym_wsz(kind);
  for (int r = 0; r < nr; r++) {
    const uint8_t *wp = w + (size_t)r * w_row;
    uint8_t *up = u + (size_t)r * u_row;
    for (int64_t b = 0; b < nb; b += 4, wp += 4 * wsz, up += UQUAD) {
      const wquad q = b + 4 <= nb ? w_quad(wp, kind, 4) : w_quad(wp, kind, (int)(nb - b));
      _mm512_store_si512(up, q.a);
      _mm512_store_si512(up + 64, q.b);
      _mm512_store_ps(up + 128, q.d);
    }
  }
}

AI void gemm_tile_u(const int R, const int T, int64_t np, const uint8_t *u, size_t u_row, const uint8_t *xp,
                    size_t xrow, float *y, size_t ys) {
  __m512 acc[4][TMAX];
  tile_zero(R, T, acc);
  for (int64_t p = 0; p < np; p++, u += UQUAD, xp += XQUAD) {
    __m512i nc[4];
    tok_corr(T, xp, xrow, nc);
    _Pragma("GCC unroll 4") for (int r = 0; r < R; r++) {
      const uint8_t *ur = u + (size_t)r * u_row;
      wquad q;
      q.a = _mm512_load_si512(ur);
      q.b = _mm512_load_si512(ur + 64);
      q.d = _mm512_load_ps(ur + 128);
      row_tokens(T, &q, nc, xp, xrow, acc[r]);
    }
  }
  tile_out(R, T, acc, y, ys, 1);
}

#define GTU(R, T)                                                                                  \
  case (R) * 8 + (T): gemm_tile_u(R, T, np, ur, u_row, xt, xp_row, yt, ys); break;

/* rows [0, nr) through the unpacked path, in blocks that fit the buffer;
 * returns 0 (nothing done) when not even 4 rows fit */
AI int gemm_sym_u(const int kind, int64_t n, const void *w, size_t w_row, int nr, const void *xp, size_t xp_row,
                  int nt, float *y, size_t ys) {
  const int64_t nb = n / 32, np = (nb + 3) / 4;
  const size_t u_row = (size_t)np * UQUAD;
  int ub = (int)(GEMM_UNPACK_BYTES / u_row) / 4 * 4;
  if (ub < 4) return 0;
  uint8_t buf[GEMM_UNPACK_BYTES] __attribute__((aligned(64)));
  for (int b0 = 0; b0 < nr; b0 += ub) {
    const int nbr = nr - b0 < ub ? nr - b0 : ub;
    unpack_rows(kind, nb, (const uint8_t *)w + (size_t)b0 * w_row, w_row, nbr, buf, u_row);
    for (int t0 = 0; t0 < nt; t0 += 4) {
      const int T = nt - t0 < 4 ? nt - t0 : 4;
      const uint8_t *xt = (const uint8_t *)xp + (size_t)t0 * xp_row;
      for (int r0 = 0; r0 < nbr;) {
        const int R = nbr - r0 < 4 ? nbr - r0 : 4;
        const uint8_t *ur = buf + (size_t)r0 * u_row;
        float *yt = y + (size_t)t0 * ys + b0 + r0;
        switch (R * 8 + T) {
          GTU(1, 1) GTU(1, 2) GTU(1, 3) GTU(1, 4) GTU(2, 1) GTU(2, 2) GTU(2, 3) GTU(2, 4)
          GTU(3, 1) GTU(3, 2) GTU(3, 3) GTU(3, 4) GTU(4, 1) GTU(4, 2) GTU(4, 3) GTU(4, 4)
        }
        r0 += R;
      }
    }
  }
  return 1;
}
#undef GTU

#define GT(R, T)                                                                                   \
  case (R) * 16 + (T): gemm_tile(kind, R, T, nb, wr, w_row, (T) > 4 ? pfd_wide : pfd, xt, xp_row, yt, ys, 1); break;

/* four streams (traits.h): tiles of rows v + k * seg, k < 4, each row's
 * prefetches GEMM_STREAM_PF_ROWS rows on in its own stream, or as many as
 * make GEMM_STREAM_PF_BYTES. Four streams prefetched 16 rows on each (as
 * one stream is) keep about 40 KB in flight, near the size of L1; 2 rows
 * on measured +7% against 16 (and against none), 3 rows +3-5%, 1 row
 * +1-2% (0.5B Q4_K_M shape, decode steps alternated in one process, both
 * orders). Counted in bytes: the shape's 616-byte Q5_0 rows 3 rows on
 * (1.8 KB) +0.4-1.0% against 2, where its 952-byte Q8_0 rows 3 on measured
 * 0.4-1.2% slower than 2, and 2.5 KB on for both 2% slower. */
#define GEMM_STREAM_PF_ROWS 2
#define GEMM_STREAM_PF_BYTES 1800
AI void gemm_streams(const int kind, int64_t nb, const uint8_t *w, size_t w_row, int nr, size_t seg,
                     const uint8_t *xp, size_t xp_row, int nt, float *y, size_t ys) {
  const size_t pf_rows = (GEMM_STREAM_PF_BYTES + w_row - 1) / w_row;
  const size_t rs = seg * w_row, pfd = (pf_rows > GEMM_STREAM_PF_ROWS ? pf_rows : GEMM_STREAM_PF_ROWS) * w_row;
  for (int v = 0; v < nr; v++) {
    const uint8_t *wr = w + (size_t)v * w_row;
    switch (nt) {
      case 1: gemm_tile(kind, 4, 1, nb, wr, rs, pfd, xp, xp_row, y + v, ys, seg); break;
      case 2: gemm_tile(kind, 4, 2, nb, wr, rs, pfd, xp, xp_row, y + v, ys, seg); break;
      case 3: gemm_tile(kind, 4, 3, nb, wr, rs, pfd, xp, xp_row, y + v, ys, seg); break;
      default: gemm_tile(kind, 4, 4, nb, wr, rs, pfd, xp, xp_row, y + v, ys, seg); break;
    }
  }
}

AI void gemm_sym(const int kind, int64_t n, const void *w, size_t w_row, int nr, size_t seg, const void *xp,
                 size_t xp_row, int nt, float *y, size_t ys, unsigned flags) {
  const int64_t nb = n / 32;
  if (seg) {
    gemm_streams(kind, nb, w, w_row, nr, seg, xp, xp_row, nt, y, ys);
    return;
  }
  const size_t pfd = GEMM_PF_ROWS * w_row, pfd_wide = GEMM_WIDE_PF_ROWS * w_row;
  if (nt >= GEMM_UNPACK_TOKENS && gemm_sym_u(kind, n, w, w_row, nr, xp, xp_row, nt, y, ys)) return;
  const int tmax = (size_t)TMAX * xp_row <= GEMM_WIDE_X_BYTES ? TMAX : 4;
  for (int t0 = 0; t0 < nt;) {
    /* groups of up to 4 tokens (4-row tiles) or of 5..8 (2-row tiles) */
    const int T = nt - t0 < tmax ? nt - t0 : tmax;
    const uint8_t *xt = (const uint8_t *)xp + (size_t)t0 * xp_row;
    /* up to 4 tokens streamed from memory: one row at a time streams best
     * (0.5B shape, passes of 1 / 2 / 3 / 4 tokens alternated in one
     * process: 2-4 tokens 11% / 3% / 3% faster than 4-row tiles); a 5..8
     * group keeps its 2-row tiles, and a group left over after one does
     * too (both measured slower one row at a time) */
    const int rmax = T > 4 ? 2 : nt <= 4 && !(flags & PW_GEMM_RESIDENT) ? 1 : 4;
    for (int r0 = 0; r0 < nr;) {
      const int R = nr - r0 < rmax ? nr - r0 : rmax;
      const uint8_t *wr = (const uint8_t *)w + (size_t)r0 * w_row;
      float *yt = y + (size_t)t0 * ys + r0;
      switch (R * 16 + T) {
        GT(1, 1) GT(1, 2) GT(1, 3) GT(1, 4) GT(2, 1) GT(2, 2) GT(2, 3) GT(2, 4)
        GT(3, 1) GT(3, 2) GT(3, 3) GT(3, 4) GT(4, 1) GT(4, 2) GT(4, 3) GT(4, 4)
        GT(1, 5) GT(1, 6) GT(1, 7) GT(1, 8) GT(2, 5) GT(2, 6) GT(2, 7) GT(2, 8)
      }
      r0 += R;
    }
    t0 += T;
  }
}
#undef GT

static void gemm_pack_q8_0(const float *x, void *xp, int64_t n) { gemm_pack_quad(x, xp, n, sym_shift(LQ8_0)); }
static void gemm_pack_q4_0(const float *x, void *xp, int64_t n) { gemm_pack_quad(x, xp, n, sym_shift(LQ4_0)); }
static void gemm_pack_q5_0(const float *x, void *xp, int64_t n) { gemm_pack_quad(x, xp, n, sym_shift(LQ5_0)); }

static void gemm_q8_0(int64_t n, const void *w, size_t w_row, int nr, size_t seg, const void *xp, size_t xp_row,
                      int nt, float *y, size_t ys, unsigned flags) {
  gemm_sym(LQ8_0, n, w, w_row, nr, seg, xp, xp_row, nt, y, ys, flags);
}
static void gemm_q4_0(int64_t n, const void *w, size_t w_row, int nr, size_t seg, const void *xp, size_t xp_row,
                      int nt, float *y, size_t ys, unsigned flags) {
  gemm_sym(LQ4_0, n, w, w_row, nr, seg, xp, xp_row, nt, y, ys, flags);
}
static void gemm_q5_0(int64_t n, const void *w, size_t w_row, int nr, size_t seg, const void *xp, size_t xp_row,
                      int nt, float *y, size_t ys, unsigned flags) {
  gemm_sym(LQ5_0, n, w, w_row, nr, seg, xp, xp_row, nt, y, ys, flags);
}

void gemm_fill_avx512vbmi(pw_traits *t) {
  g_q8_0_from = t[PW_DT_Q8_0].from_float;
  const uint32_t sym[3] = {PW_DT_Q8_0, PW_DT_Q4_0, PW_DT_Q5_0};
  const pw_gemm_fn gf[3] = {gemm_q8_0, gemm_q4_0, gemm_q5_0};
  /* one pack per type: each holds its own weight offset's corrections */
  const pw_gemm_pack_fn gp[3] = {gemm_pack_q8_0, gemm_pack_q4_0, gemm_pack_q5_0};
  for (int i = 0; i < 3; i++) {
    t[sym[i]].gemm = gf[i];
    t[sym[i]].gemm_pack = gp[i];
    t[sym[i]].gemm_xrow = gemm_xrow_quad;
  }
}
