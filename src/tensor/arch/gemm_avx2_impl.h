/* gemm_avx2_impl.h - the register-tiled GEMM of the symmetric 32-element
 * weight types (Q8_0, Q4_0, Q5_0) of the 256-bit levels (traits.h gemm;
 * the K-quants': gemm_kq_avx2_impl.h, the non-linear 4-bit types' (IQ4_NL,
 * IQ4_XS, MXFP4): gemm_iq4_avx2_impl.h, both included below),
 * written once and compiled by gemm_avx2.c (AVX2/FMA/F16C) and
 * gemm_avxvnni.c (the same with AVX-VNNI). The including file defines
 *   VD_DPBUSD(acc, u, s) as in vecdot_avx2.h (maddubs + madd with ones +
 *     add on AVX2, one vpdpbusd with AVX-VNNI), and
 *   VD_DOT2S(u0, s0, u1, s1): the int32 lanes of VD_DPBUSD(VD_DPBUSD(0,
 *     u0, s0), u1, s1) where no int16 pair sum of the two can saturate
 *     (Q4_0/Q5_0 codes: on AVX2 the two maddubs are added as int16 and
 *     take one madd);
 *   VD_DPWSSD(acc, a, b) as in vecdot_avx2.h (for the K-quants).
 * Every lane is an exact integer either way (no operand range here
 * saturates maddubs), so both levels give bit-identical results.
 *
 * Half-vector lanes. A block's dot is not spread over eight int32 lanes
 * (which would cost a convert, a scale product and an FMA per (row, token,
 * block)) but over four: lane j of a (row, token) pair holds the products
 * of elements 4j..4j+3 and 16+4j..16+4j+3, as two vpdpbusd give it when
 * one 128-bit half of the operands holds elements 0..15 and the other
 * 16..31. Each 256-bit vector then carries two (row, token) pairs, so one
 * convert, multiply and FMA serve two. Two tile shapes fill the halves:
 * - many tokens: one row against a group of up to G = 16 tokens, the halves
 *   two tokens of a pair (the weight block's 16-byte halves broadcast to
 *   both 128-bit lanes, the pair's quants packed interleaved: A's elements
 *   0..15, B's 0..15, A's 16..31, B's 16..31), so a weight block is
 *   unpacked once per 16 tokens;
 * - up to 4 tokens (a decode step: the four streams, or 4 adjacent rows):
 *   two rows per vector (their 16-byte halves side by side, one lane
 *   shuffle per half), the token's halves broadcast from the pack (a load,
 *   no ALU operation), four rows against 1 or 2 tokens at a time.
 * Per lane, either shape does the same float operations in the same order:
 * Q4_0/Q5_0 (f * dx) * dw + acc, Q8_0 f * (dx * dw) + acc, then the four
 * lanes of the half are added as hsum4, so each (row, token) result is
 * bit-identical whatever nr, nt and seg are (the gemm contract).
 * The Q5_0 loop over a block at the AVX2 level (objdump): 71 instructions
 * for 8 tokens before (a row against 8 tokens, eight lanes a pair), 79 for
 * 16 after.
 *
 * Q4_0 and Q5_0 take their unsigned codes u (q = u - 8, u - 16) against
 * the activation quants as they are, and the offset comes back once per
 * row and token as 8 (16) times the sum over blocks of dw * (dx * sum of
 * x's quants), eight blocks per float vector; Q8_0 takes |w| against x
 * with w's sign.
 *
 * Packed activations. Each token row is quantized as q8_0 (the same quants
 * and the same fp16-rounded scales as the q8_0 quantizer). Tokens go in
 * groups of G (the last group: what is left, k tokens) at g * G * xrow
 * bytes, and a group in units of two tokens (the last one alone when k is
 * odd): block by block, the k tokens' quants (k * 32 bytes: unit u's 64
 * at u * 64, two tokens A, B as A 0..15, B 0..15, A 16..31, B 16..31, one
 * token as its 32), then block by block the k tokens' scales (k * 4
 * floats: unit u's at u * 8, A's scale four times then B's, or the one
 * token's four times), then each token's block sums times its scale,
 * padded with zeros to a multiple of 8 blocks. A tile of many tokens then
 * reads one run of quants and one of scales. One pack serves all three
 * types. */
#ifndef PW_GEMM_AVX2_IMPL_H
#define PW_GEMM_AVX2_IMPL_H

#include "tensor/arch/avx2_util.h"
#include "tensor/traits.h"

#if !defined(VD_DPBUSD) || !defined(VD_DOT2S) || !defined(VD_DPWSSD)
#error "define VD_DPBUSD, VD_DOT2S and VD_DPWSSD before including gemm_avx2_impl.h"
#endif

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* blocks per chunk: a chunk's weight scales are kept as floats, from which
 * Q4_0/Q5_0 sum their offsets at the end of the chunk */
#define CHUNK 32

/* The tiles of one or two tokens (a decode step: four streams, or four
 * adjacent rows) prefetch each row this far ahead, one prefetch per block,
 * as the four-row kernels of the K-quants do (the distance the AVX-512
 * level measured best for four streams, quants_avx512.c). */
#define STREAM_PF_BYTES 2048

/* many tokens: up to this many bytes of a group's pack and the rows of a
 * call, the rows go inside the loop over groups (see gemm_sym) */
#define GROUPS_OUT_BYTES (32u << 10)

/* the loops over a tile's rows and tokens, unrolled so the accumulators
 * stay in registers */
#define UNROLL _Pragma("GCC unroll 8")

enum { KQ8_0, KQ4_0, KQ5_0 };

/* packed bytes per token and block: 32 quants and 4 scale floats */
#define XB 48
/* tokens per group: the many-token tiles take a group, a weight block
 * unpacked once for G tokens */
#define G 16

AI int64_t padded(int64_t nb) { return (nb + 7) / 8 * 8; }

/* bytes per packed row, a multiple of 64 */
static size_t gemm_xrow(int64_t n) {
  const int64_t nb = n / 32;
  return (size_t)((nb * XB + padded(nb) * 4 + 63) / 64 * 64);
}

/* One token as the tiles read it: block b's quants 0..15 at q + b * qs,
 * 16..31 at q + b * qs + hi; its scale at d[b * ds] (and the next three
 * floats); its block sums c. */
typedef struct {
  const int8_t *q;
  const float *d;
  const float *c;
  int qs, hi, ds;
} xtok;

/* A group as the many-token tiles read it: block b's quants at q + b * k
 * * 32, its scales at d + b * k * 4, token j's block sums c[j]. */
typedef struct {
  const int8_t *q;
  const float *d;
  const float *c[G];
} xgroup;

/* group g of a pack of nt tokens: its base and token count */
AI const uint8_t *x_base(const uint8_t *xp, int64_t n, int nt, int g, int *k) {
  *k = nt - G * g < G ? nt - G * g : G;
  return xp + (size_t)g * G * gemm_xrow(n);
}

/* token t of a pack of nt tokens */
AI xtok x_tok(const uint8_t *xp, int64_t n, int nt, int t) {
  const int64_t nb = n / 32;
  const int j = t % G;
  int k;
  const uint8_t *base = x_base(xp, n, nt, t / G, &k);
  const int pair = (j | 1) < k, h = j & 1, u = j / 2;
  xtok x;
  x.q = (const int8_t *)base + 64 * u + (pair ? 16 * h : 0);
  x.qs = 32 * k;
  x.hi = pair ? 32 : 16;
  x.d = (const float *)(base + (size_t)nb * 32 * (size_t)k) + 8 * u + (pair ? 4 * h : 0);
  x.ds = 4 * k;
  x.c = (const float *)(base + (size_t)nb * XB * (size_t)k) + (size_t)j * (size_t)padded(nb);
  return x;
}

/* group g */
AI xgroup x_group(const uint8_t *xp, int64_t n, int nt, int g) {
  const int64_t nb = n / 32;
  int k;
  const uint8_t *base = x_base(xp, n, nt, g, &k);
  xgroup x;
  x.q = (const int8_t *)base;
  x.d = (const float *)(base + (size_t)nb * 32 * (size_t)k);
  for (int j = 0; j < k; j++) x.c[j] = (const float *)(base + (size_t)nb * XB * (size_t)k) + (size_t)j * (size_t)padded(nb);
  return x;
}

static void gemm_pack(const float *x, void *xp, int64_t n, int t, int nt) {
  const int64_t nb = n / 32, nbp = padded(nb);
  const xtok o = x_tok(xp, n, nt, t);
  int8_t *q = (int8_t *)(uintptr_t)o.q;
  float *d = (float *)(uintptr_t)o.d, *c = (float *)(uintptr_t)o.c;
  for (int64_t b = 0; b < nb; b++) {
    pw_half dh;
    float df;
    _Alignas(32) int8_t qb[32];
    const int sum = q8_block(x + 32 * b, &dh, qb, &df);
    memcpy(q + b * o.qs, qb, 16);
    memcpy(q + b * o.qs + o.hi, qb + 16, 16);
    const float dq = h2f(dh); /* the scale q8_0 stores */
    for (int l = 0; l < 4; l++) d[b * o.ds + l] = dq;
    c[b] = dq * (float)sum;
  }
  for (int64_t b = nb; b < nbp; b++) c[b] = 0;
}

AI size_t wblock(const int kind) { return kind == KQ8_0 ? 34 : kind == KQ4_0 ? 18 : 22; }

/* block b's unsigned codes (Q4_0, Q5_0) or quants (Q8_0): elements 0..15
 * in the low 128-bit half, 16..31 in the high one */
AI __m256i wcodes(const int kind, const uint8_t *blk) {
  if (kind == KQ8_0) return loadu256(blk + 2);
  if (kind == KQ4_0) return nibbles32(blk + 2);
  return _mm256_or_si256(nibbles32(blk + 6), _mm256_and_si256(bits32(blk + 2), _mm256_set1_epi8(0x10)));
}

/* the codes of blocks a and b of two rows side by side: w0 elements 0..15
 * (a's in the low 128-bit half, b's in the high one), w1 elements 16..31;
 * the same bytes as wcodes of each with the halves exchanged, but the
 * nibbles of both rows split by one mask and one shift, and their Q5_0
 * high bits spread from one 64-bit broadcast (one pshufb per half) */
AI void wcodes2(const int kind, const uint8_t *a, const uint8_t *b, __m256i *w0, __m256i *w1) {
  if (kind == KQ8_0) {
    *w0 = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(a + 2))),
                                  _mm_loadu_si128((const __m128i *)(b + 2)), 1);
    *w1 = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(a + 18))),
                                  _mm_loadu_si128((const __m128i *)(b + 18)), 1);
    return;
  }
  const int o = kind == KQ4_0 ? 2 : 6;
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  const __m256i qs = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(a + o))),
                                             _mm_loadu_si128((const __m128i *)(b + o)), 1);
  *w0 = _mm256_and_si256(qs, m4);
  *w1 = _mm256_and_si256(_mm256_srli_epi16(qs, 4), m4);
  if (kind == KQ5_0) {
    uint32_t ha, hb;
    memcpy(&ha, a + 2, 4);
    memcpy(&hb, b + 2, 4);
    /* bytes 0..3 a's high bits, 4..7 b's, in every 64-bit lane; byte j of
     * a half takes the byte holding its element's bit, the or leaves it
     * all ones exactly when that bit is set (as bits32) */
    const __m256i h = _mm256_set1_epi64x((long long)((uint64_t)hb << 32 | ha));
    const __m256i sel0 = _mm256_setr_epi64x(0, 0x0101010101010101, 0x0404040404040404, 0x0505050505050505);
    const __m256i sel1 = _mm256_setr_epi64x(0x0202020202020202, 0x0303030303030303, 0x0606060606060606,
                                            0x0707070707070707);
    const __m256i bm = _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe), ones = _mm256_set1_epi64x(-1);
    const __m256i m10 = _mm256_set1_epi8(0x10);
    const __m256i h0 = _mm256_cmpeq_epi8(_mm256_or_si256(_mm256_shuffle_epi8(h, sel0), bm), ones);
    const __m256i h1 = _mm256_cmpeq_epi8(_mm256_or_si256(_mm256_shuffle_epi8(h, sel1), bm), ones);
    *w0 = _mm256_or_si256(*w0, _mm256_and_si256(h0, m10));
    *w1 = _mm256_or_si256(*w1, _mm256_and_si256(h1, m10));
  }
}

/* the int32 lanes of one (row, token) pair per half: weight halves w0
 * (elements 0..15 of each half's row) and w1 (16..31) against activation
 * halves x0 and x1 */
AI __m256i dot2(const int kind, __m256i w0, __m256i w1, __m256i x0, __m256i x1) {
  if (kind == KQ8_0) {
    const __m256i z = _mm256_setzero_si256();
    return VD_DPBUSD(VD_DPBUSD(z, _mm256_sign_epi8(w0, w0), _mm256_sign_epi8(x0, w0)), _mm256_sign_epi8(w1, w1),
                     _mm256_sign_epi8(x1, w1));
  }
  return VD_DOT2S(w0, x0, w1, x1);
}

/* acc + the block's float step on every lane: dxv, dwv the lanes' scales */
AI __m256 fstep(const int kind, __m256i p, __m256 dxv, __m256 dwv, __m256 acc) {
  const __m256 f = _mm256_cvtepi32_ps(p);
  if (kind == KQ8_0) return _mm256_fmadd_ps(f, _mm256_mul_ps(dxv, dwv), acc);
  return _mm256_fmadd_ps(_mm256_mul_ps(f, dxv), dwv, acc);
}

AI float half_sum(__m256 v, const int h) { return hsum4(h ? _mm256_extractf128_ps(v, 1) : _mm256_castps256_ps128(v)); }

/* the Q4_0/Q5_0 offsets of one (row, token) pair over a chunk: dw the
 * row's scales (zero past nc, to a multiple of 8), c the token's block
 * sums from the chunk's first block */
AI __m256 corr_step(const float *dw, const float *c, const int nc, __m256 corr) {
  for (int b = 0; b < nc; b += 8) corr = _mm256_fmadd_ps(_mm256_load_ps(dw + b), _mm256_loadu_ps(c + b), corr);
  return corr;
}

AI float finish(const int kind, float s, __m256 corr) {
  const float off = kind == KQ4_0 ? 8.0f : 16.0f;
  return kind == KQ8_0 ? s : s - off * hsum8(corr);
}

/* Many tokens: one row wr against a group of 2U - S tokens, U units (the
 * last one a single token when S), results y[t * ys + yo] for the
 * group's tokens t (from 0) */
AI void tile_tokens(const int kind, const int U, const int S, const int64_t nb, const uint8_t *wr, const xgroup *x,
                    float *y, size_t ys, size_t yo) {
  const size_t bs = wblock(kind);
  const int K = 2 * U - S;
  __m256 acc[G / 2], corr[G];
  _Alignas(32) float dw[CHUNK];
  UNROLL
  for (int u = 0; u < U; u++) acc[u] = _mm256_setzero_ps();
  UNROLL
  for (int j = 0; j < K; j++) corr[j] = _mm256_setzero_ps();
  for (int64_t b0 = 0; b0 < nb; b0 += CHUNK) {
    const int nc = nb - b0 < CHUNK ? (int)(nb - b0) : CHUNK;
    if (kind != KQ8_0)
      for (int b = nc; b < (nc + 7) / 8 * 8; b++) dw[b] = 0;
    for (int b = 0; b < nc; b++) {
      const int64_t bb = b0 + b;
      const __m256i cw = wcodes(kind, wr + (size_t)bb * bs);
      const __m256i w0 = _mm256_permute4x64_epi64(cw, 0x44), w1 = _mm256_permute4x64_epi64(cw, 0xEE);
      const float d = h2f(*(const pw_half *)(wr + (size_t)bb * bs));
      if (kind != KQ8_0) dw[b] = d;
      const __m256 dwv = _mm256_set1_ps(d);
      const int8_t *xq = x->q + bb * 32 * K;
      const float *xd = x->d + bb * 4 * K;
      UNROLL
      for (int u = 0; u < U; u++) {
        __m256i x0, x1;
        __m256 dxv;
        if (S && u == U - 1) {
          x0 = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(xq + 64 * u)));
          x1 = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(xq + 64 * u + 16)));
          dxv = _mm256_broadcast_ps((const __m128 *)(xd + 8 * u));
        } else {
          x0 = loadu256(xq + 64 * u);
          x1 = loadu256(xq + 64 * u + 32);
          dxv = _mm256_loadu_ps(xd + 8 * u);
        }
        acc[u] = fstep(kind, dot2(kind, w0, w1, x0, x1), dxv, dwv, acc[u]);
      }
    }
    if (kind != KQ8_0)
      UNROLL
      for (int j = 0; j < K; j++) corr[j] = corr_step(dw, x->c[j] + b0, nc, corr[j]);
  }
  UNROLL
  for (int j = 0; j < K; j++) y[(size_t)j * ys + yo] = finish(kind, half_sum(acc[j / 2], j & 1), corr[j]);
}

/* Up to 4 tokens: R rows (wr[0..R), two per vector; with R odd the last
 * pair takes wr[R] too, a repeated row whose result is dropped) against T
 * tokens x[0..T), results y[t * ys + yo[r]] */
AI void tile_rows(const int kind, const int R, const int T, const int64_t nb, const uint8_t *const *wr,
                  const xtok *x, float *y, size_t ys, const size_t *yo) {
  const size_t bs = wblock(kind);
  const int P = (R + 1) / 2; /* row pairs */
  __m256 acc[2][2], corr[4][2];
  _Alignas(32) float dw[4][CHUNK];
  UNROLL
  for (int p = 0; p < P; p++)
    UNROLL
    for (int t = 0; t < T; t++) acc[p][t] = _mm256_setzero_ps();
  UNROLL
  for (int r = 0; r < R; r++)
    UNROLL
    for (int t = 0; t < T; t++) corr[r][t] = _mm256_setzero_ps();
  for (int64_t b0 = 0; b0 < nb; b0 += CHUNK) {
    const int nc = nb - b0 < CHUNK ? (int)(nb - b0) : CHUNK;
    if (kind != KQ8_0)
      UNROLL
      for (int r = 0; r < R; r++)
        for (int b = nc; b < (nc + 7) / 8 * 8; b++) dw[r][b] = 0;
    for (int b = 0; b < nc; b++) {
      const int64_t bb = b0 + b;
      __m256i w0[2], w1[2];
      __m256 dwv[2];
      UNROLL
      for (int p = 0; p < P; p++) {
        const uint8_t *ba = wr[2 * p] + (size_t)bb * bs, *bb2 = wr[2 * p + 1] + (size_t)bb * bs;
        _mm_prefetch((const char *)ba + STREAM_PF_BYTES, _MM_HINT_T0);
        if (2 * p + 1 < R) _mm_prefetch((const char *)bb2 + STREAM_PF_BYTES, _MM_HINT_T0);
        wcodes2(kind, ba, bb2, &w0[p], &w1[p]);
        const float da = h2f(*(const pw_half *)ba), db = h2f(*(const pw_half *)bb2);
        dwv[p] = _mm256_set_m128(_mm_set1_ps(db), _mm_set1_ps(da));
        if (kind != KQ8_0) {
          if (2 * p < R) dw[2 * p][b] = da;
          if (2 * p + 1 < R) dw[2 * p + 1][b] = db;
        }
      }
      UNROLL
      for (int t = 0; t < T; t++) {
        const int8_t *xq = x[t].q + bb * x[t].qs;
        const __m256i x0 = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)xq));
        const __m256i x1 = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(xq + x[t].hi)));
        const __m256 dxv = _mm256_broadcast_ss(x[t].d + bb * x[t].ds);
        UNROLL
        for (int p = 0; p < P; p++) acc[p][t] = fstep(kind, dot2(kind, w0[p], w1[p], x0, x1), dxv, dwv[p], acc[p][t]);
      }
    }
    if (kind != KQ8_0)
      UNROLL
      for (int r = 0; r < R; r++)
        UNROLL
        for (int t = 0; t < T; t++) corr[r][t] = corr_step(dw[r], x[t].c + b0, nc, corr[r][t]);
  }
  UNROLL
  for (int r = 0; r < R; r++)
    UNROLL
    for (int t = 0; t < T; t++) y[(size_t)t * ys + yo[r]] = finish(kind, half_sum(acc[r / 2][t], r & 1), corr[r][t]);
}

#define ROWS_CASE(R, T)                                                                                      \
  case (R) * 16 + (T): tile_rows(kind, R, T, nb, wr, xt, yt, ys, yo); break;
#define TOKENS_CASE(U, S)                                                                                    \
  case (U) * 2 + (S): tile_tokens(kind, U, S, nb, w0, &xg, yt, ys, (size_t)v); break;

AI void gemm_sym(const int kind, int64_t n, const void *w, size_t w_row, int nr, size_t seg, const void *vxp, int nt,
                 float *y, size_t ys) {
  const int64_t nb = n / 32;
  const uint8_t *xp = vxp;
  if (nt > PW_GEMM_STREAM_TOKENS) {
    /* one row at a time against each group of G tokens; the groups
     * outside when a group's pack and the rows fit in L1 together (every
     * read then hits L1 after the first), else the rows outside (a row
     * stays in L1 while the groups stream from L2) */
    const int ng = (nt + G - 1) / G;
    const int groups_out = G * gemm_xrow(n) + (size_t)nr * w_row <= GROUPS_OUT_BYTES;
    for (int i = 0; i < ng * nr; i++) {
      const int g = groups_out ? i / nr : i % ng, v = groups_out ? i % nr : i / ng, t0 = G * g;
      const int k = nt - t0 < G ? nt - t0 : G, U = (k + 1) / 2, S = k & 1;
      const xgroup xg = x_group(xp, n, nt, g);
      float *yt = y + (size_t)t0 * ys;
      const uint8_t *w0 = (const uint8_t *)w + (size_t)v * w_row;
      switch (U * 2 + S) {
        TOKENS_CASE(1, 1) TOKENS_CASE(1, 0) TOKENS_CASE(2, 1) TOKENS_CASE(2, 0) TOKENS_CASE(3, 1)
        TOKENS_CASE(3, 0) TOKENS_CASE(4, 1) TOKENS_CASE(4, 0) TOKENS_CASE(5, 1) TOKENS_CASE(5, 0)
        TOKENS_CASE(6, 1) TOKENS_CASE(6, 0) TOKENS_CASE(7, 1) TOKENS_CASE(7, 0) TOKENS_CASE(8, 1)
        TOKENS_CASE(8, 0)
      default: break;
      }
    }
    return;
  }
  /* up to 4 tokens: 4 rows (the four streams of each row v, or 4 adjacent
   * rows) against 2 tokens at a time */
  for (int v = 0; v < nr;) {
    const int R = seg ? 4 : (nr - v < 4 ? nr - v : 4);
    const uint8_t *wr[4];
    size_t yo[4];
    for (int r = 0; r < 4; r++) {
      const int rr = r < R ? r : R - 1; /* past the tile: its last row again, the result dropped */
      const size_t row = seg ? (size_t)v + (size_t)rr * seg : (size_t)(v + rr);
      wr[r] = (const uint8_t *)w + row * w_row;
      yo[r] = row;
    }
    for (int t0 = 0; t0 < nt;) {
      const int T = nt - t0 < 2 ? nt - t0 : 2;
      xtok xt[2];
      for (int t = 0; t < T; t++) xt[t] = x_tok(xp, n, nt, t0 + t);
      float *yt = y + (size_t)t0 * ys;
      switch (R * 16 + T) {
        ROWS_CASE(1, 1) ROWS_CASE(1, 2) ROWS_CASE(2, 1) ROWS_CASE(2, 2) ROWS_CASE(3, 1) ROWS_CASE(3, 2)
        ROWS_CASE(4, 1) ROWS_CASE(4, 2)
      default: break;
      }
      t0 += T;
    }
    v += seg ? 1 : R;
  }
}
#undef ROWS_CASE
#undef TOKENS_CASE

#define GEMM_ENTRY(name, kind)                                                                                 \
  static void name(int64_t n, const void *w, size_t w_row, int nr, size_t seg, const void *xp, int nt, float *y, \
                   size_t ys, unsigned flags) {                                                                \
    (void)flags;                                                                                               \
    gemm_sym(kind, n, w, w_row, nr, seg, xp, nt, y, ys);                                                       \
  }
GEMM_ENTRY(gemm_q8_0, KQ8_0)
GEMM_ENTRY(gemm_q4_0, KQ4_0)
GEMM_ENTRY(gemm_q5_0, KQ5_0)
#undef GEMM_ENTRY

#include "tensor/arch/gemm_kq_avx2_impl.h"
#include "tensor/arch/gemm_iq4_avx2_impl.h"

/* the GEMM of this level into t (after its vec_dot kernels) */
AI void gemm_fill(pw_traits *t) {
  const struct {
    uint32_t dtype;
    pw_gemm_fn gemm;
  } tab[] = {{PW_DT_Q8_0, gemm_q8_0}, {PW_DT_Q4_0, gemm_q4_0}, {PW_DT_Q5_0, gemm_q5_0}};
  for (size_t i = 0; i < sizeof tab / sizeof tab[0]; i++) {
    t[tab[i].dtype].gemm = tab[i].gemm;
    t[tab[i].dtype].gemm_pack = gemm_pack;
    t[tab[i].dtype].gemm_xrow = gemm_xrow;
  }
  gemm_fill_kq(t);
  gemm_fill_iq4(t);
}

#endif
