/* gemm_kq_avx2_impl.h - the register-tiled GEMM of the K-quants (Q2_K,
 * Q3_K, Q4_K, Q5_K, Q6_K) of the 256-bit levels (traits.h gemm), included
 * by gemm_avx2_impl.h (so compiled by gemm_avx2.c and gemm_avxvnni.c),
 * which defines VD_DPWSSD as vecdot_avx2.h does (madd + add on AVX2, one
 * vpdpwssd with AVX-VNNI). Not the one-token kernels: a pass of up to
 * PW_GEMM_STREAM_TOKENS tokens goes to the level's vec_dot and vec_dot4.
 *
 * Same bits as vec_dot. Every (row, token) result takes exactly the float
 * operations of the level's vec_dot kernel (vecdot_avx2.h): per
 * super-block one FMA of the eight int32 lanes of the integer sum by dw *
 * dx (and for Q4_K/Q5_K one of the four lanes of the mins by -(dx * dmin),
 * for Q2_K one of the eight lanes of its mins first), then hsum8 of the
 * lanes plus hsum4 of the mins' lanes. The integer sums are exact in any
 * order. So a row's result is the vec_dot bits whatever the tile, the
 * token count or the level (AVX2 or AVX-VNNI): the few-token passes (a
 * decode step) take vec_dot as they did, and batch invariance holds.
 *
 * Where the time goes instead. vec_dot with eight tokens keeps 24
 * accumulators and the super-block's codes and scales in 16 registers and
 * spills, and redoes per (row, token) the token's pair sums of its bsums
 * and its scale products: 54.5 instructions per (row, token, super-block)
 * for Q4_K at the AVX2 level, 48.9 for Q6_K (callgrind, 16 rows x 32
 * tokens, 4096-wide). A tile here is one weight row against up to KQ_T =
 * 16 tokens: the row's super-block is unpacked once per tile, then its
 * first half (four code vectors, two scale vectors, in registers) meets
 * every token of the tile, then its second half; each token takes the
 * integer products of ks_pair (8 maddubs, 4 int16 adds, 4 madd or
 * vpdpwssd), one convert and one FMA, plus for Q4_K/Q5_K half of a
 * two-token mins step whose pair sums and scales are in the pack: 39.6
 * and 37.8 instructions before the halves were split.
 * Wall-clock matters more than the count here: maddubs, madd, the convert
 * and the FMAs share two ports on Intel cores, so ks_pair's four fewer
 * madds are most of the gain (bench_kernels, 4096-wide, AVX2, 32 tokens
 * against vec_dot's 8: Q4_K +18%, Q5_K +21%, Q6_K +9%, on a loaded
 * machine). The offsets of Q3_K and Q6_K (-4, -32) come in as the first
 * link of a chain: the row's scales times -4 (-32) by the token's bsums,
 * one madd.
 *
 * Rows and tokens are walked in chunks of super-blocks whose activations
 * for a tile's tokens fit in L1 (KQ_CHUNK_BYTES), each row of a block of
 * KQ_ROWS taking the chunk in turn, the accumulators kept per (row, token)
 * between chunks (the float operations of a row stay in super-block order).
 * One pack for the five types (kq_pack). */
#ifndef PW_GEMM_KQ_AVX2_IMPL_H
#define PW_GEMM_KQ_AVX2_IMPL_H

#include "tensor/arch/avx2_util.h"
#include "tensor/quants.h"
#include "tensor/traits.h"

#if !defined(VD_DPWSSD)
#error "define VD_DPWSSD before including gemm_kq_avx2_impl.h"
#endif

#include <stddef.h>
#include <stdint.h>
#include <string.h>

enum { KS_Q2_K, KS_Q3_K, KS_Q4_K, KS_Q5_K, KS_Q6_K, KS_COUNT };

/* tokens per tile: a weight super-block is unpacked once for this many */
#define KQ_T 16

/* the tiles prefetch the weight row this far ahead (the vec_dot kernels'
 * distance, vecdot_avx2.h) */
#define KQ_PF_BYTES 4096

/* set by gemm_fill from the level's own table: its q8_K quantizer and the
 * vec_dot kernels the few-token passes take */
static pw_from_float_fn kq_q8k_from;
static pw_vec_dot_fn kq_vd[KS_COUNT];
static pw_vec_dot4_fn kq_vd4[KS_COUNT];

/* the types whose blocks carry mins (their dot adds a second, min term) */
AI int ks_mins4(const int kind) { return kind == KS_Q4_K || kind == KS_Q5_K; }

AI size_t ks_bsz(const int kind) {
  return kind == KS_Q2_K   ? sizeof(block_q2_K)
         : kind == KS_Q3_K ? sizeof(block_q3_K)
         : kind == KS_Q4_K ? sizeof(block_q4_K)
         : kind == KS_Q5_K ? sizeof(block_q5_K)
                           : sizeof(block_q6_K);
}

/* A packed q8_K super-block takes KQ_QB bytes, the block itself at
 * KQ_QO: its quants then start 32 bytes in (and KQ_QB is five cache
 * lines), so every 256-bit load of them is aligned. Packed as they are
 * stored (292 bytes apart, quants at 4), half of those loads crossed a
 * cache line: about 9% of the Q4_K tile's time (a 4096-wide, 16-row,
 * 16-token call, L1-resident, on an AVX2-only Zen 3: medians of 5
 * alternations 13.6 -> 12.4 cycles per row, token and super-block). */
#define KQ_QB 320
#define KQ_QO (32 - (int)offsetof(block_q8_K, qs))
_Static_assert(sizeof(block_q8_K) + KQ_QO <= KQ_QB, "a packed q8_K super-block fits its slot");

/* bytes per packed token row, a multiple of 64: a q8_K super-block's slot,
 * its eight pair sums and its scale four times (see kq_pack) */
#define KQ_SB (KQ_QB + 32)
static size_t kq_xrow(int64_t n) { return ((size_t)(n / QK_K) * KQ_SB + 63) / 64 * 64; }

/* Up to PW_GEMM_STREAM_TOKENS tokens: token t's q8_K row at t * xrow (as
 * vec_dot reads it). More: groups of KQ_T tokens (the last one k <= KQ_T)
 * at g * KQ_T * xrow, and in a group of k tokens super-block i of token j
 * at (i * k + j) * KQ_QB + KQ_QO, its pair sums at Sg + (i * k + j) * 16
 * and its scale four times at Sg + nsb * k * 16 + (i * k + j) * 16 (Sg:
 * nsb * k * KQ_QB): a tile's tokens are then at fixed offsets from one
 * pointer, and two tokens' pair sums (and scales) make one 256-bit load. */
static void kq_pack(const float *x, void *xp, int64_t n, int t, int nt) {
  const int64_t nsb = n / QK_K;
  const size_t xrow = kq_xrow(n);
  if (nt <= PW_GEMM_STREAM_TOKENS) {
    kq_q8k_from(x, (uint8_t *)xp + (size_t)t * xrow, n);
    return;
  }
  const int g = t / KQ_T, j = t % KQ_T, k = nt - g * KQ_T < KQ_T ? nt - g * KQ_T : KQ_T;
  uint8_t *gb = (uint8_t *)xp + (size_t)g * KQ_T * xrow;
  uint8_t *ps = gb + (size_t)nsb * (size_t)k * KQ_QB, *pd = ps + (size_t)nsb * (size_t)k * 16;
  for (int64_t i = 0; i < nsb; i++) {
    const size_t ij = (size_t)i * (size_t)k + (size_t)j;
    block_q8_K b;
    kq_q8k_from(x + i * QK_K, &b, QK_K);
    /* parts 2a and 2a + 1 (64 quants) word-interleaved (ks_pair) */
    block_q8_K p = b;
    for (int a = 0; a < 4; a++)
      for (int l = 0; l < 8; l++)
        for (int h = 0; h < 2; h++) {
          memcpy(p.qs + 64 * a + 32 * h + 4 * l, b.qs + 64 * a + 4 * l + 2 * h, 2);
          memcpy(p.qs + 64 * a + 32 * h + 4 * l + 2, b.qs + 64 * a + 32 + 4 * l + 2 * h, 2);
        }
    memcpy(gb + ij * KQ_QB + KQ_QO, &p, sizeof p);
    int16_t s[8];
    for (int m = 0; m < 8; m++) s[m] = (int16_t)(b.bsums[2 * m] + b.bsums[2 * m + 1]);
    memcpy(ps + ij * 16, s, 16);
    const float d4[4] = {b.d, b.d, b.d, b.d};
    memcpy(pd + ij * 16, d4, 16);
  }
}

/* A pass of up to PW_GEMM_STREAM_TOKENS tokens (a decode step), whose
 * pack is the vec_dot type's rows xs bytes apart: the level's vec_dot (and
 * vec_dot4 for the four streams of one token where the type has it; else
 * vec_dot row by row), so a decode step keeps its streaming kernels. Shared
 * with gemm_iq4_avx2_impl.h. */
static void gemm_few(pw_vec_dot_fn vd, pw_vec_dot4_fn vd4, int64_t n, const void *w, size_t w_row, int nr,
                     size_t seg, const void *xp, size_t xs, int nt, float *y, size_t ys) {
  float out[PW_GEMM_STREAM_TOKENS];
  if (seg && nt == 1 && vd4) {
    for (int v = 0; v < nr; v++) {
      vd4(n, (const uint8_t *)w + (size_t)v * w_row, seg * w_row, xp, out);
      for (int q = 0; q < PW_GEMM_STREAMS; q++) y[(size_t)v + (size_t)q * seg] = out[q];
    }
    return;
  }
  const int rows = seg ? PW_GEMM_STREAMS : 1;
  for (int v = 0; v < nr; v++)
    for (int q = 0; q < rows; q++) {
      const size_t r = (size_t)v + (size_t)q * seg;
      vd(n, (const uint8_t *)w + r * w_row, xp, xs, nt, out);
      for (int t = 0; t < nt; t++) y[(size_t)t * ys + r] = out[t];
    }
}

/* One weight super-block unpacked: codes q[j] against activation quants
 * 32j..32j+31, int16 scales s[j] for the madd of their pair sums; c the
 * scales times the offset (Q3_K, Q6_K) against the bsums; m the mins
 * (Q4_K/Q5_K: 8 int16 against the pair sums of the bsums; Q2_K: 16 against
 * the bsums); d, dmin the float scales. */
typedef struct {
  __m256i q[8];
  __m256i c, m2;
  __m128i m;
  float d, dmin;
} ksb;

AI void ks_unpack_parts(const int kind, const uint8_t *blk, ksb *u, __m256i *s) {
  if (ks_mins4(kind)) {
    const __m256i m4 = _mm256_set1_epi8(0xF), m1 = _mm256_set1_epi8(1);
    const block_q4_K *w4 = (const block_q4_K *)blk;
    const block_q5_K *w5 = (const block_q5_K *)blk;
    const int five = kind == KS_Q5_K;
    const uint8_t *qs = five ? w5->qs : w4->qs;
    uint32_t a[4];
    k4_unpack(five ? w5->scales : w4->scales, a);
    const __m128i su = _mm_loadu_si128((const __m128i *)a);
    u->m = _mm_cvtepu8_epi16(_mm_unpackhi_epi64(su, su));
    const __m256i sc = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(su));
    u->d = h2f(w4->d);
    u->dmin = h2f(w4->dmin);
    __m256i hb = five ? loadu256(w5->qh) : _mm256_setzero_si256();
    _Pragma("GCC unroll 4") for (int c = 0; c < 4; c++) {
      const __m256i bits = loadu256(qs + 32 * c);
      __m256i lo = _mm256_and_si256(bits, m4), hi = _mm256_and_si256(_mm256_srli_epi16(bits, 4), m4);
      if (five) {
        lo = _mm256_or_si256(lo, _mm256_slli_epi16(_mm256_and_si256(hb, m1), 4));
        hi = _mm256_or_si256(hi, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 1), m1), 4));
        hb = _mm256_srli_epi16(hb, 2);
      }
      u->q[2 * c] = lo;
      u->q[2 * c + 1] = hi;
      s[2 * c] = scale_k(sc, 2 * c);
      s[2 * c + 1] = scale_k(sc, 2 * c + 1);
    }
    return;
  }
  __m256i sc16;
  if (kind == KS_Q6_K) {
    const block_q6_K *w = (const block_q6_K *)blk;
    const __m256i m4 = _mm256_set1_epi8(0xF), m30 = _mm256_set1_epi8(0x30);
    sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)w->scales));
    u->d = h2f(w->d);
    /* value = q - 32: -32 * sum(sc * bsum); |sc * 32| <= 4096 */
    u->c = _mm256_sub_epi16(_mm256_setzero_si256(), _mm256_slli_epi16(sc16, 5));
    _Pragma("GCC unroll 2") for (int h = 0; h < 2; h++) {
      const __m256i l0 = loadu256(w->ql + 64 * h), l1 = loadu256(w->ql + 64 * h + 32);
      const __m256i hh = loadu256(w->qh + 32 * h);
      _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++) {
        const __m256i lb = k & 1 ? l1 : l0;
        const __m256i lo = _mm256_and_si256(k < 2 ? lb : _mm256_srli_epi16(lb, 4), m4);
        const __m256i hs = k == 0   ? _mm256_slli_epi16(hh, 4)
                           : k == 1 ? _mm256_slli_epi16(hh, 2)
                           : k == 2 ? hh
                                    : _mm256_srli_epi16(hh, 2);
        u->q[4 * h + k] = _mm256_or_si256(lo, _mm256_and_si256(hs, m30));
      }
    }
  } else if (kind == KS_Q3_K) {
    const block_q3_K *w = (const block_q3_K *)blk;
    const __m256i m3 = _mm256_set1_epi8(3), m1 = _mm256_set1_epi8(1);
    uint32_t a[4];
    k3_unpack(w->scales, a);
    sc16 = _mm256_cvtepi8_epi16(_mm_sub_epi8(_mm_loadu_si128((const __m128i *)a), _mm_set1_epi8(32)));
    u->d = h2f(w->d);
    /* value = (low | hbit << 2) - 4: -4 * sum(sc * bsum) */
    u->c = _mm256_sub_epi16(_mm256_setzero_si256(), _mm256_slli_epi16(sc16, 2));
    const __m256i hbits = loadu256(w->hmask);
    _Pragma("GCC unroll 2") for (int h = 0; h < 2; h++) {
      const __m256i bits = loadu256(w->qs + 32 * h);
      _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++) {
        const __m256i lo = _mm256_and_si256(_mm256_srli_epi16(bits, 2 * k), m3);
        const __m256i hb = _mm256_and_si256(_mm256_srli_epi16(hbits, 4 * h + k), m1);
        u->q[4 * h + k] = _mm256_or_si256(lo, _mm256_slli_epi16(hb, 2));
      }
    }
  } else { /* Q2_K */
    const block_q2_K *w = (const block_q2_K *)blk;
    const __m256i m3 = _mm256_set1_epi8(3);
    const __m128i sc128 = _mm_loadu_si128((const __m128i *)w->scales);
    u->m2 = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(sc128, 4), _mm_set1_epi8(0x0F)));
    sc16 = _mm256_cvtepu8_epi16(_mm_and_si128(sc128, _mm_set1_epi8(0x0F)));
    u->d = h2f(w->d);
    u->dmin = h2f(w->dmin);
    _Pragma("GCC unroll 2") for (int h = 0; h < 2; h++) {
      const __m256i bits = loadu256(w->qs + 32 * h);
      _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++)
        u->q[4 * h + k] = _mm256_and_si256(_mm256_srli_epi16(bits, 2 * k), m3);
    }
  }
  /* a scale per 16: part k of half h takes scales 8h + 2k and 8h + 2k + 1 */
  _Pragma("GCC unroll 2") for (int h = 0; h < 2; h++) {
    const __m256i sch = scales_half(sc16, h);
    _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++)
      s[4 * h + k] = scale_pair_v(sch, 2 * k, 2 * k + 1);
  }
}

/* The codes of parts 2a and 2a + 1 word-interleaved into two vectors:
 * int16 lane 2L + p of vector h takes the quants 4L + 2h, 4L + 2h + 1 of
 * part 2a + p, and the activations are packed the same way, so the two
 * maddubs of a pair add as int16 (at most 4 * 63 * 127 < 2^15, Q6_K's
 * 6-bit codes) and one madd by the pair's scales (word 2L + p: part 2a +
 * p's) gives int32 lane L exactly vec_dot's two madds' sum in lane L. Per
 * token and super-block: 8 maddubs, 4 int16 adds and 4 madds instead of 8
 * and 8 (maddubs and madd share two ports on Intel cores). */
AI void ks_unpack(const int kind, const uint8_t *blk, ksb *u, __m256i *s4) {
  __m256i s[8];
  ks_unpack_parts(kind, blk, u, s);
  _Pragma("GCC unroll 4") for (int a = 0; a < 4; a++) {
    const __m256i q0 = u->q[2 * a], q1 = u->q[2 * a + 1];
    u->q[2 * a] = _mm256_blend_epi16(q0, _mm256_slli_epi32(q1, 16), 0xAA);
    u->q[2 * a + 1] = _mm256_blend_epi16(_mm256_srli_epi32(q0, 16), q1, 0xAA);
    _mm256_store_si256(s4 + a, _mm256_blend_epi16(s[2 * a], s[2 * a + 1], 0xAA));
  }
}

/* one pair of interleaved parts (ks_unpack) against its activations */
AI __m256i ks_pair(const __m256i *q, const int8_t *y) {
  return _mm256_add_epi16(_mm256_maddubs_epi16(q[0], loadu256(y)), _mm256_maddubs_epi16(q[1], loadu256(y + 32)));
}

/* One weight row's super-blocks i0..i1 - 1 (w: the row) against T
 * tokens, tokens j0..j0 + T - 1 of a group of k at gb (nsb super-blocks
 * a token), into the row's accumulators acc[t] and accm[t / 2] (the mins'
 * four lanes of two tokens share a vector: lane-wise the same
 * operations). */
AI void ks_tile(const int kind, const int T, const int64_t nsb, const int64_t i0, const int64_t i1, const uint8_t *w,
                const uint8_t *gb, const int k, const int j0, __m256 *acc_io, __m256 *accm_io) {
  /* the first chunk starts from zero instead of reading acc_io: the
   * block's 12 KB of accumulators were cleared by a memset each time
   * (2.7% of an AVX2 prompt's profile on the 1B-shaped file) */
  const int first = i0 == 0;
  const size_t bsz = ks_bsz(kind), qb = KQ_QB;
  const int mins4 = ks_mins4(kind);
  const size_t ystep = (size_t)k * qb, sstep = (size_t)k * 16;
  const uint8_t *yq = gb + KQ_QO + (size_t)j0 * qb + (size_t)i0 * ystep;
  const uint8_t *ps = gb + (size_t)nsb * (size_t)k * qb + (size_t)j0 * 16 + (size_t)i0 * sstep;
  const uint8_t *pd = ps + (size_t)nsb * (size_t)k * 16;
  __m256 acc[KQ_T], accm[KQ_T / 2];
  _Alignas(32) __m256i s[4];
  _Pragma("GCC unroll 16") for (int t = 0; t < T; t++) acc[t] = first ? _mm256_setzero_ps() : acc_io[t];
  if (mins4)
    _Pragma("GCC unroll 8") for (int t = 0; t < (T + 1) / 2; t++) accm[t] = first ? _mm256_setzero_ps() : accm_io[t];
  for (int64_t i = i0; i < i1; i++, yq += ystep, ps += sstep, pd += sstep) {
    const uint8_t *blk = w + (size_t)i * bsz;
    for (size_t o = 0; o < bsz; o += 64) _mm_prefetch((const char *)blk + KQ_PF_BYTES + o, _MM_HINT_T0);
    ksb u;
    ks_unpack(kind, blk, &u, s);
    const __m256 dwv = _mm256_set1_ps(u.d), ndm = _mm256_set1_ps(-u.dmin);
    /* Half a super-block at a time: its four code vectors and two scale
     * vectors stay in registers while the tile's tokens stream past (all
     * eight codes, the sixteen accumulators and the scales do not fit the
     * sixteen registers: the codes and scales were reloaded per token);
     * the first half's integer sums wait on the stack (integer, so exact
     * in any order). The L1-resident call above: 12.3 -> 12.1 cycles,
     * within that machine's noise; kept for the reloads it removes. */
    _Alignas(32) __m256i isum[KQ_T];
    {
      const __m256i s0 = _mm256_load_si256(s), s1 = _mm256_load_si256(s + 1);
      _Pragma("GCC unroll 16") for (int t = 0; t < T; t++) {
        const block_q8_K *yb = (const block_q8_K *)(yq + (size_t)t * qb);
        __m256i a = kind == KS_Q3_K || kind == KS_Q6_K ? _mm256_madd_epi16(u.c, loadu256(yb->bsums))
                                                        : _mm256_setzero_si256();
        a = VD_DPWSSD(a, ks_pair(u.q, yb->qs), s0);
        a = VD_DPWSSD(a, ks_pair(u.q + 2, yb->qs + 64), s1);
        KEEP_IN_REG(a);
        isum[t] = a;
      }
    }
    const __m256i s2 = _mm256_load_si256(s + 2), s3 = _mm256_load_si256(s + 3);
    _Pragma("GCC unroll 16") for (int t = 0; t < T; t++) {
      const block_q8_K *yb = (const block_q8_K *)(yq + (size_t)t * qb);
      __m256i a = VD_DPWSSD(isum[t], ks_pair(u.q + 4, yb->qs + 128), s2);
      a = VD_DPWSSD(a, ks_pair(u.q + 6, yb->qs + 192), s3);
      KEEP_IN_REG(a);
      const __m256 dx = _mm256_broadcast_ss(&yb->d);
      if (kind == KS_Q2_K) /* -(dx * dmin) */
        acc[t] = _mm256_fmadd_ps(_mm256_mul_ps(ndm, dx), _mm256_cvtepi32_ps(_mm256_madd_epi16(u.m2, loadu256(yb->bsums))),
                                 acc[t]);
      acc[t] = _mm256_fmadd_ps(_mm256_mul_ps(dwv, dx), _mm256_cvtepi32_ps(a), acc[t]);
      if (mins4 && (t & 1) == 0) { /* tokens t and t + 1 (or t alone) */
        __m256i bs;
        __m256 d4;
        if (t + 1 < T) {
          bs = loadu256(ps + 16 * t);
          d4 = _mm256_loadu_ps((const float *)(pd + 16 * t));
        } else {
          bs = _mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(ps + 16 * t)));
          d4 = _mm256_castps128_ps256(_mm_loadu_ps((const float *)(pd + 16 * t)));
        }
        const __m256i mm = _mm256_broadcastsi128_si256(u.m);
        accm[t / 2] = _mm256_fmadd_ps(_mm256_mul_ps(ndm, d4), _mm256_cvtepi32_ps(_mm256_madd_epi16(mm, bs)),
                                      accm[t / 2]);
      }
    }
  }
  _Pragma("GCC unroll 16") for (int t = 0; t < T; t++) acc_io[t] = acc[t];
  if (mins4)
    _Pragma("GCC unroll 8") for (int t = 0; t < (T + 1) / 2; t++) accm_io[t] = accm[t];
}

/* rows per block of the many-token path, and the activation bytes of a
 * chunk of super-blocks of a tile's tokens: a block's rows take a chunk in
 * turn while the chunk's activations stay in L1 (the tile's activations
 * whole, 16 tokens of 4096-wide rows, are 83 KB: from L2, 16 tokens
 * measured slower than vec_dot's 8 from L1) */
#define KQ_ROWS 16
#define KQ_CHUNK_BYTES (16u << 10)

#define KS_CASE(T)                                                                                        \
  case T:                                                                                               \
    for (int v = 0; v < R; v++)                                                                         \
      ks_tile(kind, T, nsb, i0, i1, (const uint8_t *)w + (size_t)(r0 + v) * w_row, gb, k, j0, acc[v], accm[v]); \
    break;

AI void gemm_kq(const int kind, int64_t n, const void *w, size_t w_row, int nr, size_t seg, const void *vxp, int nt,
                float *y, size_t ys) {
  const int64_t nsb = n / QK_K;
  const size_t xs = kq_xrow(n);
  const uint8_t *xp = vxp;
  if (nt <= PW_GEMM_STREAM_TOKENS) {
    gemm_few(kq_vd[kind], kq_vd4[kind], n, w, w_row, nr, seg, xp, xs, nt, y, ys);
    return;
  }
  /* each group of KQ_T tokens in tiles of 16 (or 8, then 1..8: a batch
   * of 5..8 tokens reads each row once); a
   * block of rows against a tile chunk by chunk, a row's super-block
   * unpacked once per tile */
  _Alignas(32) __m256 acc[KQ_ROWS][KQ_T], accm[KQ_ROWS][KQ_T / 2];
  for (int t0 = 0; t0 < nt;) {
    const int g = t0 / KQ_T, j0 = t0 % KQ_T, k = nt - g * KQ_T < KQ_T ? nt - g * KQ_T : KQ_T;
    const int left = k - j0;
    const int T = left >= 16 ? 16 : left > 8 ? 8 : left;
    const uint8_t *gb = xp + (size_t)g * KQ_T * xs;
    const int64_t chunk = KQ_CHUNK_BYTES / ((size_t)T * KQ_SB) > 0 ? KQ_CHUNK_BYTES / ((size_t)T * KQ_SB) : 1;
    for (int r0 = 0; r0 < nr; r0 += KQ_ROWS) {
      const int R = nr - r0 < KQ_ROWS ? nr - r0 : KQ_ROWS;
      for (int64_t i0 = 0; i0 < nsb; i0 += chunk) {
        const int64_t i1 = nsb - i0 < chunk ? nsb : i0 + chunk;
        switch (T) {
          KS_CASE(16) KS_CASE(8) KS_CASE(7) KS_CASE(6) KS_CASE(5) KS_CASE(4) KS_CASE(3) KS_CASE(2) KS_CASE(1)
        default: break;
        }
      }
      /* the types without mins add the hsum4 of zeros vec_dot adds, +0.0f */
      const int mins4 = ks_mins4(kind);
      for (int v = 0; v < R; v++)
        for (int t = 0; t < T; t++) {
          const __m128 m = t & 1 ? _mm256_extractf128_ps(accm[v][t / 2], 1) : _mm256_castps256_ps128(accm[v][t / 2]);
          y[(size_t)(t0 + t) * ys + (size_t)(r0 + v)] = hsum8(acc[v][t]) + (mins4 ? hsum4(m) : 0.0f);
        }
    }
    t0 += T;
  }
}
#undef KS_CASE

#define KS_ENTRY(name, kind)                                                                                   \
  static void name(int64_t n, const void *w, size_t w_row, int nr, size_t seg, const void *xp, int nt, float *y, \
                   size_t ys, unsigned flags) {                                                                \
    (void)flags;                                                                                               \
    gemm_kq(kind, n, w, w_row, nr, seg, xp, nt, y, ys);                                                        \
  }
KS_ENTRY(gemm_q2_k, KS_Q2_K)
KS_ENTRY(gemm_q3_k, KS_Q3_K)
KS_ENTRY(gemm_q4_k, KS_Q4_K)
KS_ENTRY(gemm_q5_k, KS_Q5_K)
KS_ENTRY(gemm_q6_k, KS_Q6_K)
#undef KS_ENTRY

/* the K-quants' GEMM into t (after the level's vec_dot kernels and q8_K
 * quantizer are in t) */
AI void gemm_fill_kq(pw_traits *t) {
  const struct {
    uint32_t dtype;
    pw_gemm_fn gemm;
  } tab[KS_COUNT] = {{PW_DT_Q2_K, gemm_q2_k},
                     {PW_DT_Q3_K, gemm_q3_k},
                     {PW_DT_Q4_K, gemm_q4_k},
                     {PW_DT_Q5_K, gemm_q5_k},
                     {PW_DT_Q6_K, gemm_q6_k}};
  kq_q8k_from = t[PW_DT_Q8_K].from_float;
  for (int k = 0; k < KS_COUNT; k++) {
    kq_vd[k] = t[tab[k].dtype].vec_dot;
    kq_vd4[k] = t[tab[k].dtype].vec_dot4;
    t[tab[k].dtype].gemm = tab[k].gemm;
    t[tab[k].dtype].gemm_pack = kq_pack;
    t[tab[k].dtype].gemm_xrow = kq_xrow;
  }
}

#endif
