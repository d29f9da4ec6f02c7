/* gemm_avx512vbmi.c - the register-tiled GEMM of the symmetric 32-element
 * weight types (Q8_0, Q4_0, Q5_0, and IQ4_NL, which is Q4_0's block with
 * a table lookup of the nibbles) and of the K-quants Q4_K, Q5_K and Q6_K
 * with AVX-512 VNNI, VBMI and BITALG (the byte permute and bit shuffle of
 * the weight unpack). Installed by pw_tensor_init on top of the AVX-512
 * vec_dot kernels when the CPU has those too (Ice Lake, Zen 4 and later);
 * without them the matmul uses the vec_dot kernels for these types.
 *
 * Against the K-quants' vec_dot kernels, 8 sequences decoding together
 * measured 1B Q4_K_M shape +33% and 0.5B Q4_K_M shape +4.7% (K-quants
 * only in its ffn_down), 512-token prefill +50% and +8% (alternated runs,
 * both orders). One token: four streams from L2 (bench_kernels, 2048-wide
 * rows) Q4_K 42 -> 54 GB/s per core, Q6_K 71 -> 70-72; 1B decode +3.5%
 * (with matmul.c's larger steal claims, which alone took back 4-5%). */
#include "tensor/dtype.h"
#include "tensor/quants.h"
#include "tensor/traits.h"
#include "tensor/arch/kquant_avx512.h"

#include <immintrin.h>
#include <stddef.h>
#include <string.h>

#define AI static inline __attribute__((always_inline))

enum { LQ8_0, LQ4_0, LQ5_0, LIQ4_NL, LQ4_K, LQ5_K, LQ6_K };

/* Q4_0's block layout (fp16 d, then 16 bytes of nibbles) */
AI int q4_layout(const int kind) { return kind == LQ4_0 || kind == LIQ4_NL; }

/* the K-quants (256-element super-blocks; see "K-quants" below) */
AI int is_k(const int kind) { return kind >= LQ4_K; }
AI size_t k_bsz(const int kind) { return kind == LQ4_K ? 144 : kind == LQ5_K ? 176 : 210; }

/* block bytes of the symmetric 32-element types */
AI int sym_wsz(const int kind) { return kind == LQ8_0 ? 34 : q4_layout(kind) ? 18 : 22; }

/* The GEMM walks each weight row in quads of 32-element blocks, and every
 * (row, token) result is, per quad, four exact integer block dots (the
 * block's quants times the activation's q8_0 quants, plus the offset
 * correction below), each scaled by its weight d times activation d and
 * added by one FMA to its own lane of an accumulator over the quads in
 * order; the four lanes are then added as (0 + 2) + (1 + 3). Every tile
 * shape applies exactly these float operations to a (row, token) pair, so
 * the result never depends on the tile (the gemm contract), and a block's
 * integer dot is one lane before any scaling: one convert, scale product
 * and FMA serve four (row, token) pairs.
 *
 * Weights enter vpdpbusd unsigned: Q4_0 and Q5_0 as their stored values
 * q + 8 and q + 16, Q8_0 as q + 128 (xor 0x80), IQ4_NL as its table value
 * + 128 (a vpshufb of the nibbles into the table shifted by 128, 1..241:
 * so it shares Q8_0's pack); the offset times the
 * negated activation sum depends on the token alone, is packed with it (so
 * each weight type has its own pack) and is the initial value of the
 * integer dot.
 *
 * A Q4_0/Q5_0 quad's weights are two loads (72 or 88 bytes; the rest
 * masked off), one byte permute that puts each block's 16 quant bytes in
 * its 128-bit lane (a: quants 0..15, b: 16..31), and one word permute that
 * gathers the four fp16 scales (and Q5_0's fifth-bit words) into the lanes
 * that use them; Q5_0's fifth bits become byte masks with vpshufbitqmb.
 * Q8_0 loads each block's 32 quants and splits halves with two 128-bit
 * lane shuffles.
 *
 * Two ways to get a block's dot into one lane:
 * - one token (the pack of a pass of one token, XQUAD bytes a quad: the
 *   quants as a and b, the lane scales, the lane corrections): four rows
 *   take two vpdpbusd each into four lanes per block, and the four vectors
 *   are transposed and added (tr_add4) so lane j of block k holds row j's
 *   block dot.
 * - two or more tokens (GQUAD bytes a quad per group of four tokens): lane
 *   j of block k is token j of the group. Eight vpdpbusd per (row, group)
 *   each take dword (j + i) & 3 of the block's a (i < 4) or b (i >= 4) in
 *   lane j: the weight vector rotated within its 128-bit lanes (vpshufd),
 *   against activations packed in that order. The activations of a group
 *   stay in registers while the rows of a tile pass.
 * Against two vpdpbusd, a convert, a scale product and an FMA per (row,
 * token, quad) with every lane scaled (the previous tiles), measured with a
 * scratch harness: one token in four streams 34.3 -> 39.5 GB/s per core
 * from L2 and 30.5 -> 34.5 from memory; 2 rows x 8 tokens from L2 140 ->
 * 178 G multiply-adds/s, from memory 122-124 -> 133-144. */

#define XQUAD 256
#define GQUAD 640
/* packed bytes per token and quad: enough for either layout (a group of
 * four tokens takes GQUAD, and a pass of two tokens one group) */
#define XROW_QUAD 320
/* a quad unpacked (the many-token path): a, b and d (and the K-quants' e,
 * or Q6_K's ia and ib): uquad(kind) bytes */
#define UQUAD 192
AI size_t uquad(const int kind) { return kind == LQ6_K ? 320 : kind >= LQ4_K ? 256 : UQUAD; }

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

static size_t gemm_xrow_quad(int64_t n) { return (size_t)((n / 32 + 3) / 4) * XROW_QUAD; }

/* the lane corrections of a quad's quants v and v2: the negated lane sums
 * times the weight offset (2^shift) */
AI __m512i lane_corr(__m512i v, __m512i v2, const int shift) {
  const __m512i zero = _mm512_setzero_si512(), one = _mm512_set1_epi8(1);
  const __m512i sums = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(zero, one, v), one, v2);
  return _mm512_sub_epi32(zero, _mm512_slli_epi32(sums, shift));
}

/* the one-token layout: quads of XQUAD bytes, quants 0..15 of block 4i+k
 * in 128-bit lane k, then quants 16..31 the same way, the 16 lane scales
 * (block 4i+k's d in lanes 4k..4k+3, as floats) and the 16 lane
 * corrections. shift: log2 of the weight offset of the type the rows are
 * packed for (sym_shift) */
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

/* the group layout: per group of four tokens, quads of GQUAD bytes: eight
 * vectors X_i whose lane j of block k holds token j's quants 16 (i / 4) + 4
 * ((j + i) & 3) .. + 3 of block k, then the block corrections (lane j of
 * block k: token j's) and the block scales as floats. Token slot j of the
 * group whose quads start at g; x == NULL writes zeros (the slots past the
 * last token, so they compute zeros) */
/* X_i's lane j of block k is dword 8k + 4 (i / 4) + ((j + i) & 3) of the
 * quad's 128 quant bytes (nat: dword 16 (i / 4) + 4k + ((j + i) & 3), the
 * natural order, for Q6_K's halves of 16): one permute (idx[i], slot_idx)
 * and one masked store per X_i */
AI void slot_idx(const int j, __m512i idx[8], const int nat) {
  for (int i = 0; i < 8; i++) {
    int32_t v[16] = {0};
    for (int k = 0; k < 4; k++)
      v[4 * k + j] = nat ? 16 * (i >> 2) + 4 * k + ((j + i) & 3) : 8 * k + 4 * (i >> 2) + ((j + i) & 3);
    idx[i] = _mm512_loadu_si512(v);
  }
}

/* a quad's 128 quant bytes qs (block k at 32k) into token slot j of X_0..7
 * at g */
AI void scatter_x(uint8_t *g, const int8_t *qs, const __m512i idx[8], const int j) {
  const __mmask16 slot = (__mmask16)(0x1111u << j);
  const __m512i A = _mm512_loadu_si512(qs), B = _mm512_loadu_si512(qs + 64);
  _Pragma("GCC unroll 8") for (int i = 0; i < 8; i++)
    _mm512_mask_storeu_epi32(g + 64 * i, slot, _mm512_permutex2var_epi32(A, idx[i], B));
}

AI void pack_slot(uint8_t *g, const float *x, int64_t n, const int j, const int shift) {
  const int64_t nb = n / 32;
  __m512i idx[8];
  slot_idx(j, idx, 0);
  for (int64_t b = 0; b < nb; b += 4, g += GQUAD) {
    const int cnt = nb - b < 4 ? (int)(nb - b) : 4;
    block_q8_0 q[4];
    memset(q, 0, sizeof q);
    if (x) g_q8_0_from(x + b * 32, q, cnt * 32);
    _Alignas(64) int8_t qs[128];
    for (int k = 0; k < 4; k++) memcpy(qs + 32 * k, q[k].qs, 32);
    scatter_x(g, qs, idx, j);
    for (int k = 0; k < 4; k++) {
      uint8_t *p = g + 16 * k + 4 * j;
      int32_t s = 0;
      for (int i = 0; i < 32; i++) s += qs[32 * k + i];
      const int32_t nc = -s * (1 << shift);
      const float d = _cvtsh_ss(q[k].d);
      memcpy(p + 512, &nc, 4);
      memcpy(p + 576, &d, 4);
    }
  }
}

/* token t of a pass of nt: the one-token layout for nt == 1, else slot t %
 * 4 of group t / 4 (groups nq * GQUAD bytes apart); the last token also
 * zeroes the empty slots of its group */
AI void gemm_pack_sym(const float *x, void *xp, int64_t n, int t, int nt, const int shift) {
  if (nt == 1) {
    gemm_pack_quad(x, xp, n, shift);
    return;
  }
  const int64_t nq = (n / 32 + 3) / 4;
  uint8_t *g = (uint8_t *)xp + (size_t)(t / 4) * (size_t)nq * GQUAD;
  pack_slot(g, x, n, t % 4, shift);
  if (t == nt - 1)
    for (int j = t % 4 + 1; j < 4; j++) pack_slot(g, NULL, n, j, shift);
}

/* ---- K-quants: packed activations ---------------------------------------
 * A quad of the K-quants is half h of a 256-element super-block, and each
 * (row, token) result is, per quad and 128-bit lane k, an exact integer
 * dot scaled in its own float lane:
 *   Q4_K/Q5_K: lane k is block k (32 elements, 0..15 in a, 16..31 in b):
 *     acc += (d sc_k * dx) * dot_k, then acc += dmin m_k * nc_k (nc_k =
 *     -(sum of the token's block quants) * dx, a float made once at pack
 *     time: the mins term);
 *   Q6_K (a scale per 16): a holds the quad's elements 0..63 and b 64..127
 *     in their natural order (as q6_quants unpacks them), so lane k of a
 *     is group 8h + k and of b group 8h + 4 + k, and the scales are
 *     applied in integers: acc += (d * dx) * (sc_a (dot_a - 32 sum_a) +
 *     sc_b (dot_b - 32 sum_b)), |.| < 2^24. One token takes it as vec_dot
 *     does (int16 pairs of four products, less 32 times their activations,
 *     times the scales with vpdpwssd), groups with two vpmulld; with a
 *     float product per group of 16 instead, one token measured 64 against
 *     vec_dot4's 71 GB/s per core, now 70-72 (bench_kernels, 2048-wide).
 * dx is the token's q8_K scale (one per super-block; the activations of
 * vec_dot), d sc and dmin m are exact float products. The one-token form
 * and the group form apply exactly these operations, as the symmetric
 * types' do, so the gemm contract holds (and the lanes are added as (0 +
 * 2) + (1 + 3) at the end, as theirs are). The sums differ from the
 * vec_dot kernels' (one integer per super-block and lane group there), by
 * float rounding only.
 *
 * Layouts: one token, XQUAD_K bytes a quad: the quants as a and b, dx in
 * all 16 lanes, then c1 and c2 (lane 4k + r: lane k's; Q6_K: int16 8k + i
 * of c1 is -32 times the sum of dword i of a's lane k, i < 4, or of dword
 * i - 4 of b's, and c2 is unused); a group of four tokens, GQUAD_K bytes
 * a quad: X_0..7 as above (Q6_K's from the natural order), c1, c2 and dx
 * (lane 4k + j: token j's). c1, c2 of a group: Q4_K/Q5_K nc_k and zero,
 * Q6_K -32 sum_a and -32 sum_b (int32). */
#define XQUAD_K 320
#define GQUAD_K 704
#define XROW_QUAD_K 352 /* a pass of two tokens is one group */

static pw_from_float_fn g_q8_k_from; /* the installed q8_K quantizer */

static size_t gemm_xrow_k(int64_t n) { return (size_t)(n / 128) * XROW_QUAD_K; }

/* c1, c2 of lane k of quad h of the q8_K super-block q */
AI void k_corr(const block_q8_K *q, const int h, const int k, const int six, uint8_t *c1, uint8_t *c2) {
  if (six) {
    const int32_t sa = q->bsums[8 * h + k], sb = q->bsums[8 * h + 4 + k];
    const int32_t a = -32 * sa, b = -32 * sb;
    memcpy(c1, &a, 4);
    memcpy(c2, &b, 4);
  } else {
    const float f = (float)-(q->bsums[8 * h + 2 * k] + q->bsums[8 * h + 2 * k + 1]) * q->d;
    memcpy(c1, &f, 4);
    memset(c2, 0, 4);
  }
}

AI void kpack_one(const float *x, uint8_t *xp, int64_t n, const int six) {
  for (int64_t s = 0; s < n / QK_K; s++) {
    block_q8_K q;
    g_q8_k_from(x + s * QK_K, &q, QK_K);
    for (int h = 0; h < 2; h++, xp += XQUAD_K) {
      for (int k = 0; k < 4; k++) {
        /* Q6_K: the natural order */
        memcpy(xp + 16 * k, q.qs + 128 * h + (six ? 16 * k : 32 * k), 16);
        memcpy(xp + 64 + 16 * k, q.qs + 128 * h + (six ? 64 + 16 * k : 32 * k + 16), 16);
        if (six) { /* int16 8k + i: -32 times the sum of dword i of a (i < 4)
                    * or of dword i - 4 of b in lane k */
          for (int i = 0; i < 8; i++) {
            const int8_t *v = q.qs + 128 * h + (i < 4 ? 0 : 64) + 16 * k + 4 * (i & 3);
            const int16_t c = (int16_t)(-32 * (v[0] + v[1] + v[2] + v[3]));
            memcpy(xp + 192 + 16 * k + 2 * i, &c, 2);
          }
          memset(xp + 256 + 16 * k, 0, 16);
          continue;
        }
        for (int r = 0; r < 4; r++) k_corr(&q, h, k, six, xp + 192 + 16 * k + 4 * r, xp + 256 + 16 * k + 4 * r);
      }
      _mm512_storeu_ps(xp + 128, _mm512_set1_ps(q.d));
    }
  }
}

/* token slot j of the groups at g (x == NULL: zeros) */
AI void kpack_slot(uint8_t *g, const float *x, int64_t n, const int j, const int six) {
  __m512i idx[8];
  slot_idx(j, idx, six);
  for (int64_t s = 0; s < n / QK_K; s++) {
    block_q8_K q;
    memset(&q, 0, sizeof q);
    if (x) g_q8_k_from(x + s * QK_K, &q, QK_K);
    for (int h = 0; h < 2; h++, g += GQUAD_K) {
      scatter_x(g, q.qs + 128 * h, idx, j);
      for (int k = 0; k < 4; k++) {
        uint8_t *p = g + 16 * k + 4 * j;
        k_corr(&q, h, k, six, p + 512, p + 576);
        memcpy(p + 640, &q.d, 4);
      }
    }
  }
}

/* gemm_pack_sym for the K-quants (six: Q6_K's corrections) */
AI void gemm_pack_k(const float *x, void *xp, int64_t n, int t, int nt, const int six) {
  if (nt == 1) {
    kpack_one(x, xp, n, six);
    return;
  }
  uint8_t *g = (uint8_t *)xp + (size_t)(t / 4) * (size_t)(n / 128) * GQUAD_K;
  kpack_slot(g, x, n, t % 4, six);
  if (t == nt - 1)
    for (int j = t % 4 + 1; j < 4; j++) kpack_slot(g, NULL, n, j, six);
}

/* log2 of the weight offset of the unsigned weights */
AI int sym_shift(const int kind) { return kind == LQ8_0 || kind == LIQ4_NL ? 7 : kind == LQ4_0 ? 3 : 4; }

/* one quad of one weight row as the dots take it: a and b the unsigned
 * quants (low and high 16 of each block), d the lane scales */
typedef struct {
  __m512i a, b;
  __m512 d;
  __m512 e;  /* Q4_K, Q5_K: dmin m_k lanes (d: d sc_k) */
  __m512i ia, ib; /* Q6_K: the int scales of a's and b's lanes (d: d) */
  __m512i h; /* the quad's fp16 scales, d_k at word dpos(kind, k) */
} wquad;

/* where w_quad leaves d_k in h */
AI int dpos(const int kind, const int k) { return kind == LQ8_0 ? 4 * k : q4_layout(kind) ? 9 * k : 8 * k; }

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
    u.h = _mm512_permutex2var_epi16(l0, didx, l1);
    u.d = _mm512_cvtph_ps(_mm512_castsi512_si256(u.h));
    return u;
  }
  const int wsz = sym_wsz(kind), nbytes = cnt * wsz;
  const __m512i lo = nbytes >= 64 ? _mm512_loadu_si512(wp) : _mm512_maskz_loadu_epi8(low_bytes(nbytes), wp);
  const __m512i hi = nbytes > 64 ? _mm512_maskz_loadu_epi8(low_bytes(nbytes - 64), wp + 64) : _mm512_setzero_si512();
  /* block k's 16 quant bytes (at k * wsz + 2, or + 6 after Q5_0's qh) into
   * lane k */
  const int qo = q4_layout(kind) ? 2 : 6;
  __m512i qidx;
  if (q4_layout(kind))
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
  if (kind == LIQ4_NL) {
    const __m512i tab = _mm512_add_epi8(_mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)pw_kvalues_iq4nl)),
                                        _mm512_set1_epi8((char)0x80));
    u.a = _mm512_shuffle_epi8(tab, u.a);
    u.b = _mm512_shuffle_epi8(tab, u.b);
  }
  if (q4_layout(kind)) {
    /* words [d0 x 4, d1 x 4, d2 x 4, d3 x 4] (d_k at word 9k) */
    const __m512i didx = _mm512_set_epi16(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                                          27, 27, 27, 27, 18, 18, 18, 18, 9, 9, 9, 9, 0, 0, 0, 0);
    u.d = _mm512_cvtph_ps(_mm512_castsi512_si256(_mm512_permutexvar_epi16(didx, lo)));
    u.h = lo;
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
  u.h = bq;
  return u;
}

/* ---- K-quants: weights --------------------------------------------------- */

AI uint32_t ld32(const uint8_t *p) {
  uint32_t v;
  memcpy(&v, p, 4);
  return v;
}
AI uint16_t ld16(const uint8_t *p) {
  uint16_t v;
  memcpy(&v, p, 2);
  return v;
}

/* a super-block's scales: Q4_K/Q5_K the 16 products d sc_0..7 and dmin
 * m_0..7 as floats, Q6_K the 16 scales as int32 (the bits of the result) */
AI __m512 wk_f(const uint8_t *blk, const int kind) {
  if (kind == LQ6_K)
    return _mm512_castsi512_ps(
        _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)((const block_q6_K *)blk)->scales)));
  /* d, dmin at bytes 0 and 2, the scales from byte 4 */
  const __m128i u =
      _mm512_castsi512_si128(k4_unpack_lanes(_mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)(blk + 4)))));
  const __m512 dmv = _mm512_permutexvar_ps(_mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1),
                                           _mm512_castps128_ps512(_mm_cvtph_ps(_mm_cvtsi32_si128((int)ld32(blk)))));
  return _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(u)), dmv);
}

/* lane 4k + j of the result: lane o + step * k of f */
AI __m512 f_lanes(__m512 f, const int o, const int step) {
  const __m512i idx =
      _mm512_setr_epi32(o, o, o, o, o + step, o + step, o + step, o + step, o + 2 * step, o + 2 * step, o + 2 * step,
                        o + 2 * step, o + 3 * step, o + 3 * step, o + 3 * step, o + 3 * step);
  return _mm512_permutexvar_ps(idx, f);
}

/* quad h of the super-block at blk: the quants as a (quants 0..15 of
 * block k in 128-bit lane k) and b (16..31), unsigned */
AI void wk_quants(const uint8_t *blk, const int kind, const int h, __m512i *a, __m512i *b) {
  if (kind == LQ6_K) { /* the natural order: a quants 0..63, b 64..127 */
    *a = q6_quants((const block_q6_K *)blk, h, 0);
    *b = q6_quants((const block_q6_K *)blk, h, 1);
    return;
  }
  /* 64 bytes: low nibbles blocks 0 (bytes 0..31) and 2, high nibbles
   * blocks 1 and 3 */
  const __m512i v = _mm512_loadu_si512(blk + (kind == LQ4_K ? 16 : 48) + 64 * h), m0f = _mm512_set1_epi8(0x0F);
  __m512i lo = _mm512_and_si512(v, m0f), hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m0f);
  if (kind == LQ5_K) { /* block 2h' + c (c: 0 low, 1 high nibbles) of the
                        * 32-byte chunk 2h + h' takes bit 4h + 2h' + c of
                        * qh[byte] */
    const __m512i qh = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(blk + 16)));
    const __m512i sel =
        _mm512_inserti64x4(_mm512_set1_epi8((char)(1 << 4 * h)), _mm256_set1_epi8((char)(4 << 4 * h)), 1);
    const __m512i s16 = _mm512_set1_epi8(16);
    lo = _mm512_mask_add_epi8(lo, _mm512_test_epi8_mask(qh, sel), lo, s16);
    hi = _mm512_mask_add_epi8(hi, _mm512_test_epi8_mask(qh, _mm512_add_epi8(sel, sel)), hi, s16);
  }
  *a = _mm512_permutex2var_epi64(lo, _mm512_setr_epi64(0, 1, 8, 9, 4, 5, 12, 13), hi);
  *b = _mm512_permutex2var_epi64(lo, _mm512_setr_epi64(2, 3, 10, 11, 6, 7, 14, 15), hi);
}

/* the quad as the group tiles take it (f: wk_f of its super-block) */
AI wquad wk_quad(const uint8_t *blk, const int kind, const int h, __m512 f) {
  wquad u;
  wk_quants(blk, kind, h, &u.a, &u.b);
  u.h = _mm512_setzero_si512();
  if (kind == LQ6_K) {
    u.ia = _mm512_castps_si512(f_lanes(f, 8 * h, 1));
    u.ib = _mm512_castps_si512(f_lanes(f, 8 * h + 4, 1));
    u.d = _mm512_set1_ps(_cvtsh_ss(ld16(blk + offsetof(block_q6_K, d))));
    u.e = _mm512_setzero_ps();
    return u;
  }
  u.d = f_lanes(f, 4 * h, 1);
  u.e = f_lanes(f, 8 + 4 * h, 1);
  u.ia = u.ib = u.h;
  return u;
}

/* a super-block's lines, dist bytes on */
AI void k_prefetch(const uint8_t *blk, const int kind, size_t dist) {
  const char *p = (const char *)blk + dist;
  for (size_t o = 0; o < k_bsz(kind); o += 64) _mm_prefetch(p + o, _MM_HINT_T0);
  _mm_prefetch(p + k_bsz(kind) - 1, _MM_HINT_T0);
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

/* ---- one token: four rows, block dots by transpose-add ------------------ */

/* four vectors of four lanes per block (row j's in vector j) -> lane j of
 * each block: row j's block sum */
AI __m512i tr_add4(__m512i r0, __m512i r1, __m512i r2, __m512i r3) {
  /* [0a+0c, 1a+1c, 0b+0d, 1b+1d] per 128-bit lane, lanes a..d */
  const __m512i s01 = _mm512_add_epi32(_mm512_unpacklo_epi32(r0, r1), _mm512_unpackhi_epi32(r0, r1));
  const __m512i s23 = _mm512_add_epi32(_mm512_unpacklo_epi32(r2, r3), _mm512_unpackhi_epi32(r2, r3));
  return _mm512_add_epi32(_mm512_unpacklo_epi64(s01, s23), _mm512_unpackhi_epi64(s01, s23));
}

/* the lanes of each block added as (0 + 2) + (1 + 3): lane j of block 0
 * holds the (row, token) result of lane j */
AI __m512 lanes_out(__m512 acc) {
  const __m512 v = _mm512_add_ps(acc, _mm512_shuffle_f32x4(acc, acc, 0x4E));
  return _mm512_add_ps(v, _mm512_shuffle_f32x4(v, v, 0xB1));
}

/* the same for four accumulators at once: 128-bit lane m of the result is
 * accumulator m's four results, bit-identical to lanes_out of each */
AI __m512 lanes_out4(__m512 a, __m512 b, __m512 c, __m512 d) {
  const __m512 ab = _mm512_add_ps(_mm512_shuffle_f32x4(a, b, 0x44), _mm512_shuffle_f32x4(a, b, 0xEE));
  const __m512 cd = _mm512_add_ps(_mm512_shuffle_f32x4(c, d, 0x44), _mm512_shuffle_f32x4(c, d, 0xEE));
  return _mm512_add_ps(_mm512_shuffle_f32x4(ab, cd, 0x88), _mm512_shuffle_f32x4(ab, cd, 0xDD));
}

/* one quad (cnt blocks of it present) of R (<= 4) rows rs bytes apart
 * against one token */
AI __m512 quad_one(const int kind, const int R, const int cnt, const uint8_t *w, size_t rs, size_t pfd,
                   const uint8_t *xp, __m512 acc) {
  const __m512i nc = _mm512_loadu_si512(xp + 192), xv = _mm512_loadu_si512(xp), x2 = _mm512_loadu_si512(xp + 64);
  __m512i d[4], h[4];
  _Pragma("GCC unroll 4") for (int r = 0; r < 4; r++) {
    if (r >= R) {
      d[r] = h[r] = _mm512_setzero_si512();
      continue;
    }
    const uint8_t *wp = w + (size_t)r * rs;
    w_prefetch(wp, pfd, kind);
    const wquad q = w_quad(wp, kind, cnt);
    d[r] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(nc, q.a, xv), q.b, x2);
    h[r] = q.h;
  }
  /* lane j of block k: row j's scale, the four rows' fp16 scales gathered
   * by two word permutes and a blend before one convert */
  const int p0 = dpos(kind, 0), p1 = dpos(kind, 1), p2 = dpos(kind, 2), p3 = dpos(kind, 3);
  const __m512i i01 = _mm512_set_epi16(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 32 + p3, p3, 0, 0,
                                       32 + p2, p2, 0, 0, 32 + p1, p1, 0, 0, 32 + p0, p0);
  const __m512i i23 = _mm512_set_epi16(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 32 + p3, p3, 0, 0,
                                       32 + p2, p2, 0, 0, 32 + p1, p1, 0, 0, 32 + p0, p0, 0, 0);
  const __m512i h4 = _mm512_mask_blend_epi16(0xCCCCCCCCu, _mm512_permutex2var_epi16(h[0], i01, h[1]),
                                             _mm512_permutex2var_epi16(h[2], i23, h[3]));
  return _mm512_fmadd_ps(_mm512_cvtepi32_ps(tr_add4(d[0], d[1], d[2], d[3])),
                         _mm512_mul_ps(_mm512_cvtph_ps(_mm512_castsi512_si256(h4)), _mm512_loadu_ps(xp + 128)), acc);
}

/* the results of a one-token tile: row r's in lane r of lanes_out(acc) */
AI void store_one(__m512 acc, const int R, float *y, size_t yr) {
  const __m512 v = lanes_out(acc);
  if (R == 4 && yr == 1) {
    _mm_storeu_ps(y, _mm512_castps512_ps128(v));
    return;
  }
  float o[16];
  _mm512_storeu_ps(o, v);
  for (int r = 0; r < R; r++) y[(size_t)r * yr] = o[r];
}

/* R (<= 4) rows rs bytes apart against one token: results y[j * yr] */
AI void tile_one(const int kind, const int R, int64_t nb, const uint8_t *w, size_t rs, size_t pfd, const uint8_t *xp,
                 float *y, size_t yr) {
  const int wsz = sym_wsz(kind);
  __m512 acc = _mm512_setzero_ps();
  int64_t b = 0;
  for (; b + 4 <= nb; b += 4, w += 4 * wsz, xp += XQUAD) acc = quad_one(kind, R, 4, w, rs, pfd, xp, acc);
  if (b < nb) acc = quad_one(kind, R, (int)(nb - b), w, rs, pfd, xp, acc);
  store_one(acc, R, y, yr);
}

/* K-quants, one token: the scale vectors of both quads of the super-blocks
 * at b[0..3] (lane 4k + r: row r's lane k), as wk_quad's d and e; Q6_K:
 * d the rows' d (both quads), s16[r] row r's 16 scales as int16 */
AI void k_one_scales(const int kind, const uint8_t *const b[4], __m512 d[2], __m512 e[2], __m512i s16[4]) {
  /* byte 4k + r of a 16-byte run: byte 16 r + o + step * k of v */
#define RUN(o, step)                                                                                                  \
  (16 * 0 + (o)), (16 * 1 + (o)), (16 * 2 + (o)), (16 * 3 + (o)), (16 * 0 + (o) + (step)), (16 * 1 + (o) + (step)), \
      (16 * 2 + (o) + (step)), (16 * 3 + (o) + (step)), (16 * 0 + (o) + 2 * (step)), (16 * 1 + (o) + 2 * (step)),   \
      (16 * 2 + (o) + 2 * (step)), (16 * 3 + (o) + 2 * (step)), (16 * 0 + (o) + 3 * (step)),                        \
      (16 * 1 + (o) + 3 * (step)), (16 * 2 + (o) + 3 * (step)), (16 * 3 + (o) + 3 * (step))
  const __m512i r4 = _mm512_setr_epi32(0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3);
  if (kind == LQ6_K) {
    const size_t od = offsetof(block_q6_K, d), os = offsetof(block_q6_K, scales);
    const __m128i dw = _mm_setr_epi16((short)ld16(b[0] + od), (short)ld16(b[1] + od), (short)ld16(b[2] + od),
                                      (short)ld16(b[3] + od), 0, 0, 0, 0);
    d[0] = d[1] = _mm512_permutexvar_ps(r4, _mm512_castps128_ps512(_mm_cvtph_ps(dw)));
    e[0] = e[1] = _mm512_setzero_ps();
    _Pragma("GCC unroll 4") for (int r = 0; r < 4; r++)
      s16[r] = _mm512_castsi256_si512(_mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(b[r] + os))));
    return;
  }
  const __m512i v = k4_unpack_lanes(k4_load4(b[0] + 4, b[1] + 4, b[2] + 4, b[3] + 4));
  /* [d0, dmin0, d1, dmin1, ...] */
  const __m128i dm = _mm_setr_epi32((int)ld32(b[0]), (int)ld32(b[1]), (int)ld32(b[2]), (int)ld32(b[3]));
  const __m512 dm8 = _mm512_castps256_ps512(_mm256_cvtph_ps(dm));
  const __m512 d4 = _mm512_permutexvar_ps(_mm512_add_epi32(r4, r4), dm8);
  const __m512 m4 = _mm512_permutexvar_ps(_mm512_add_epi32(_mm512_add_epi32(r4, r4), _mm512_set1_epi32(1)), dm8);
  for (int h = 0; h < 2; h++) {
    const __m512i sel =
        _mm512_permutexvar_epi8(_mm512_castsi256_si512(_mm256_setr_epi8(RUN(4 * h, 1), RUN(8 + 4 * h, 1))), v);
    d[h] = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm512_castsi512_si128(sel))), d4);
    e[h] = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm512_extracti32x4_epi32(sel, 1))), m4);
  }
#undef RUN
}

/* quad h of R (<= 4) rows' super-blocks b[] against one token (s16:
 * k_one_scales') */
AI __m512 quad_one_k(const int kind, const int R, const uint8_t *const b[4], const int h, __m512 d, __m512 e,
                     const __m512i s16[4], const uint8_t *xp, __m512 acc) {
  const __m512i xa = _mm512_loadu_si512(xp), xb = _mm512_loadu_si512(xp + 64), z = _mm512_setzero_si512();
  /* Q6_K: int16 8k + i: scale 8h + k (i < 4) or 8h + 4 + k */
  const __m512i sidx = _mm512_set_epi16(7, 7, 7, 7, 3, 3, 3, 3, 6, 6, 6, 6, 2, 2, 2, 2, 5, 5, 5, 5, 1, 1, 1, 1, 4, 4,
                                        4, 4, 0, 0, 0, 0);
  __m512i da[4];
  _Pragma("GCC unroll 4") for (int r = 0; r < 4; r++) {
    if (r >= R) {
      da[r] = z;
      continue;
    }
    __m512i a, bq;
    wk_quants(b[r], kind, h, &a, &bq);
    if (kind == LQ6_K) {
      /* the int16 pairs of four products each less 32 times their
       * activations (xp + 192), times the scales: lane k of the sum of
       * the lanes is sc_a (dot_a - 32 sum_a) + sc_b (dot_b - 32 sum_b) */
      const __m512i p =
          _mm512_add_epi16(_mm512_packs_epi32(_mm512_dpbusd_epi32(z, a, xa), _mm512_dpbusd_epi32(z, bq, xb)),
                           _mm512_loadu_si512(xp + 192));
      da[r] = _mm512_dpwssd_epi32(
          z, p, _mm512_permutexvar_epi16(_mm512_add_epi16(sidx, _mm512_set1_epi16((short)(8 * h))), s16[r]));
    } else {
      da[r] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(z, a, xa), bq, xb);
    }
  }
  const __m512 dx = _mm512_loadu_ps(xp + 128);
  if (kind == LQ6_K)
    return _mm512_fmadd_ps(_mm512_cvtepi32_ps(tr_add4(da[0], da[1], da[2], da[3])), _mm512_mul_ps(d, dx), acc);
  acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(tr_add4(da[0], da[1], da[2], da[3])), _mm512_mul_ps(d, dx), acc);
  return _mm512_fmadd_ps(e, _mm512_loadu_ps(xp + 192), acc);
}

/* tile_one of the K-quants (ns super-blocks a row) */
AI void tile_one_k(const int kind, const int R, int64_t ns, const uint8_t *w, size_t rs, size_t pfd,
                   const uint8_t *xp, float *y, size_t yr) {
  __m512 acc = _mm512_setzero_ps();
  const size_t bsz = k_bsz(kind);
  for (int64_t s = 0; s < ns; s++, w += bsz, xp += 2 * XQUAD_K) {
    /* rows past R read row 0 (their lanes are never stored) */
    const uint8_t *b[4];
    _Pragma("GCC unroll 4") for (int r = 0; r < 4; r++) {
      b[r] = w + (size_t)(r < R ? r : 0) * rs;
      if (r < R) k_prefetch(b[r], kind, pfd);
    }
    __m512 d[2], e[2];
    __m512i s16[4];
    k_one_scales(kind, b, d, e, s16);
    acc = quad_one_k(kind, R, b, 0, d[0], e[0], s16, xp, acc);
    acc = quad_one_k(kind, R, b, 1, d[1], e[1], s16, xp + XQUAD_K, acc);
  }
  store_one(acc, R, y, yr);
}

/* ---- two or more tokens: lanes are the tokens of a group ----------------- */

typedef struct {
  __m512i x[8], nc;
  __m512i c2; /* K-quants: c2 (nc is their c1) */
  __m512 dx;
} xgroup;

AI void load_group(const uint8_t *p, xgroup *g, const int kind) {
  _Pragma("GCC unroll 8") for (int i = 0; i < 8; i++) g->x[i] = _mm512_loadu_si512(p + 64 * i);
  g->nc = _mm512_loadu_si512(p + 512);
  if (is_k(kind)) {
    g->dx = _mm512_loadu_ps(p + 640);
    if (kind == LQ6_K) {
      g->c2 = _mm512_loadu_si512(p + 576);
      __asm__("" : "+v"(g->c2));
    }
  } else {
    g->dx = _mm512_loadu_ps(p + 576);
  }
  /* in registers for every row of the tile: left to itself the compiler
   * takes them as memory operands of each vpdpbusd, and those loads per
   * (row, group) made the tile slower from memory */
  __asm__("" : "+v"(g->x[0]), "+v"(g->x[1]), "+v"(g->x[2]), "+v"(g->x[3]), "+v"(g->x[4]), "+v"(g->x[5]),
          "+v"(g->x[6]), "+v"(g->x[7]), "+v"(g->nc), "+v"(g->dx));
}

/* one (row, group, quad): eight dots in two chains, then the convert,
 * scale product and FMA */
AI __m512 group_fma(const wquad *w, const xgroup *g, __m512 acc, const int kind) {
  if (kind == LQ6_K) { /* a and b in their own chains, each scaled */
    __m512i sa = _mm512_dpbusd_epi32(g->nc, w->a, g->x[0]);
    __m512i sb = _mm512_dpbusd_epi32(g->c2, w->b, g->x[4]);
    sa = _mm512_dpbusd_epi32(sa, _mm512_shuffle_epi32(w->a, 0x39), g->x[1]);
    sb = _mm512_dpbusd_epi32(sb, _mm512_shuffle_epi32(w->b, 0x39), g->x[5]);
    sa = _mm512_dpbusd_epi32(sa, _mm512_shuffle_epi32(w->a, 0x4E), g->x[2]);
    sb = _mm512_dpbusd_epi32(sb, _mm512_shuffle_epi32(w->b, 0x4E), g->x[6]);
    sa = _mm512_dpbusd_epi32(sa, _mm512_shuffle_epi32(w->a, 0x93), g->x[3]);
    sb = _mm512_dpbusd_epi32(sb, _mm512_shuffle_epi32(w->b, 0x93), g->x[7]);
    const __m512i si = _mm512_add_epi32(_mm512_mullo_epi32(sa, w->ia), _mm512_mullo_epi32(sb, w->ib));
    return _mm512_fmadd_ps(_mm512_cvtepi32_ps(si), _mm512_mul_ps(w->d, g->dx), acc);
  }
  const int k45 = is_k(kind);
  __m512i s0 = _mm512_dpbusd_epi32(k45 ? _mm512_setzero_si512() : g->nc, w->a, g->x[0]);
  __m512i s1 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_shuffle_epi32(w->a, 0x39), g->x[1]);
  s0 = _mm512_dpbusd_epi32(s0, _mm512_shuffle_epi32(w->a, 0x4E), g->x[2]);
  s1 = _mm512_dpbusd_epi32(s1, _mm512_shuffle_epi32(w->a, 0x93), g->x[3]);
  s0 = _mm512_dpbusd_epi32(s0, w->b, g->x[4]);
  s1 = _mm512_dpbusd_epi32(s1, _mm512_shuffle_epi32(w->b, 0x39), g->x[5]);
  s0 = _mm512_dpbusd_epi32(s0, _mm512_shuffle_epi32(w->b, 0x4E), g->x[6]);
  s1 = _mm512_dpbusd_epi32(s1, _mm512_shuffle_epi32(w->b, 0x93), g->x[7]);
  acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(s0, s1)), _mm512_mul_ps(w->d, g->dx), acc);
  return k45 ? _mm512_fmadd_ps(w->e, _mm512_castsi512_ps(g->nc), acc) : acc;
}

/* where a tile's weight quads come from: a row's packed blocks (rows rs
 * bytes apart, cnt blocks of the quad present), or the unpacked buffer
 * (rows rs bytes apart, UQUAD bytes a quad) */
AI wquad tile_quad(const int kind, const int U, const int cnt, const uint8_t *w, int r, size_t rs, size_t pfd,
                   const int l2, const int h, const __m512 *f) {
  const uint8_t *wp = w + (size_t)r * rs;
  if (U) {
    wquad q;
    q.a = _mm512_load_si512(wp);
    q.b = _mm512_load_si512(wp + 64);
    q.d = _mm512_load_ps(wp + 128);
    if (kind == LQ6_K) {
      q.ia = _mm512_load_si512(wp + 192);
      q.ib = _mm512_load_si512(wp + 256);
    } else if (is_k(kind)) {
      q.e = _mm512_load_ps(wp + 192);
    }
    return q;
  }
  if (is_k(kind)) return wk_quad(wp, kind, h, f[r]); /* prefetched per super-block */
  w_prefetch(wp, pfd, kind);
  if (l2) w_prefetch_l2(wp, GEMM_WIDE_L2_PF_ROWS * rs, kind);
  return w_quad(wp, kind, cnt);
}

/* one quad of R rows x G groups (groups gs bytes apart); K-quants: quad
 * h of the super-blocks at w, f[r]: row r's wk_f */
AI void quad_groups(const int kind, const int U, const int R, const int G, const int cnt, const uint8_t *w, size_t rs,
                    size_t pfd, const uint8_t *xg, size_t gs, __m512 acc[4][2], const int h, const __m512 *f) {
  const int l2 = G == 2 && (q4_layout(kind) || kind == LQ5_0) && !U;
  if (G == 1) { /* the group in registers, each row's quad in turn */
    xgroup x;
    load_group(xg, &x, kind);
    _Pragma("GCC unroll 4") for (int r = 0; r < R; r++) {
      const wquad q = tile_quad(kind, U, cnt, w, r, rs, pfd, l2, h, f);
      acc[r][0] = group_fma(&q, &x, acc[r][0], kind);
    }
    return;
  }
  /* both rows' quads, then each group in turn */
  wquad q[2];
  _Pragma("GCC unroll 2") for (int r = 0; r < R; r++) q[r] = tile_quad(kind, U, cnt, w, r, rs, pfd, l2, h, f);
  _Pragma("GCC unroll 2") for (int g = 0; g < G; g++) {
    xgroup x;
    load_group(xg + g * gs, &x, kind);
    _Pragma("GCC unroll 2") for (int r = 0; r < R; r++) acc[r][g] = group_fma(&q[r], &x, acc[r][g], kind);
  }
}

/* R rows x G (1 or 2) groups, T tokens of them present: results y[t * ys +
 * r * yr]; xg: the tile's first group, groups gs bytes apart */
AI void tile_groups(const int kind, const int U, const int R, const int G, int T, int64_t nb, const uint8_t *w,
                    size_t rs, size_t pfd, const uint8_t *xg, size_t gs, float *y, size_t ys, size_t yr) {
  __m512 acc[4][2];
  _Pragma("GCC unroll 4") for (int r = 0; r < R; r++) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
  if (is_k(kind) && !U) { /* super-blocks: each row's scales, then both quads */
    for (int64_t s = 0; s < nb / 8; s++, w += k_bsz(kind), xg += 2 * GQUAD_K) {
      __m512 f[4];
      _Pragma("GCC unroll 4") for (int r = 0; r < R; r++) {
        k_prefetch(w + (size_t)r * rs, kind, pfd);
        f[r] = wk_f(w + (size_t)r * rs, kind);
      }
      quad_groups(kind, 0, R, G, 4, w, rs, pfd, xg, gs, acc, 0, f);
      quad_groups(kind, 0, R, G, 4, w, rs, pfd, xg + GQUAD_K, gs, acc, 1, f);
    }
  } else {
    const size_t wstep = U ? uquad(kind) : 4 * (size_t)sym_wsz(kind);
    const size_t xstep = is_k(kind) ? GQUAD_K : GQUAD;
    int64_t b = 0;
    for (; b + 4 <= nb; b += 4, w += wstep, xg += xstep)
      quad_groups(kind, U, R, G, 4, w, rs, pfd, xg, gs, acc, 0, NULL);
    if (b < nb) quad_groups(kind, U, R, G, (int)(nb - b), w, rs, pfd, xg, gs, acc, 0, NULL);
  }
  /* 128-bit lane m of o[] is (row, group) m's four tokens */
  float o[2][16];
  if (G == 1) {
    _mm512_storeu_ps(o[0], lanes_out4(acc[0][0], R > 1 ? acc[1][0] : acc[0][0], R > 2 ? acc[2][0] : acc[0][0],
                                      R > 3 ? acc[3][0] : acc[0][0]));
    if (R == 4 && yr == 1) { /* four rows of each token in one store */
      const __m512 v = _mm512_permutexvar_ps(_mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15),
                                             _mm512_loadu_ps(o[0]));
      _mm512_storeu_ps(o[1], v);
      for (int t = 0; t < T; t++) memcpy(y + (size_t)t * ys, o[1] + 4 * t, 16);
      return;
    }
    for (int r = 0; r < R; r++)
      for (int t = 0; t < T; t++) y[(size_t)t * ys + (size_t)r * yr] = o[0][4 * r + t];
    return;
  }
  /* G == 2: R rows of groups 0 and 1 */
  _mm512_storeu_ps(o[0],
                   lanes_out4(acc[0][0], R > 1 ? acc[1][0] : acc[0][0], acc[0][1], R > 1 ? acc[1][1] : acc[0][1]));
  for (int t = 0; t < T; t++) {
    const float *ot = o[0] + (t < 4 ? t : 8 + t - 4);
    for (int r = 0; r < R; r++) y[(size_t)t * ys + (size_t)r * yr] = ot[4 * r];
  }
}

/* ---- the same tiles over unpacked rows (many tokens) --------------------
 * With many tokens each weight quad would be unpacked once per group pair;
 * instead a block of rows is unpacked once into a buffer, per quad
 * w_quad's vectors (UQUAD bytes), and the tiles read those: the same
 * values, so the same results as the packed path's. */
#define GEMM_UNPACK_TOKENS 32
#define GEMM_UNPACK_BYTES (128u << 10)

AI void unpack_rows(const int kind, int64_t nb, const uint8_t *w, size_t w_row, int nr, uint8_t *u, size_t u_row) {
  if (is_k(kind)) { /* wk_quad's vectors of both quads of each super-block */
    for (int r = 0; r < nr; r++) {
      const uint8_t *wp = w + (size_t)r * w_row;
      uint8_t *up = u + (size_t)r * u_row;
      for (int64_t s = 0; s < nb / 8; s++, wp += k_bsz(kind)) {
        const __m512 f = wk_f(wp, kind);
        for (int h = 0; h < 2; h++, up += uquad(kind)) {
          const wquad q = wk_quad(wp, kind, h, f);
          _mm512_store_si512(up, q.a);
          _mm512_store_si512(up + 64, q.b);
          _mm512_store_ps(up + 128, q.d);
          if (kind == LQ6_K) {
            _mm512_store_si512(up + 192, q.ia);
            _mm512_store_si512(up + 256, q.ib);
          } else {
            _mm512_store_ps(up + 192, q.e);
          }
        }
      }
    }
    return;
  }
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

#define GTU(R)                                                                                     \
  case R: tile_groups(kind, 1, R, 1, T, nb, ur, u_row, 0, xt, 0, yt, ys, 1); break;

/* rows [0, nr) through the unpacked path, in blocks that fit the buffer;
 * returns 0 (nothing done) when not even 4 rows fit */
AI int gemm_sym_u(const int kind, int64_t n, const void *w, size_t w_row, int nr, const uint8_t *xp, int nt,
                  float *y, size_t ys) {
  const int64_t nb = n / 32, np = (nb + 3) / 4;
  const size_t u_row = (size_t)np * uquad(kind), gs = (size_t)np * (is_k(kind) ? GQUAD_K : GQUAD);
  int ub = (int)(GEMM_UNPACK_BYTES / u_row) / 4 * 4;
  if (ub < 4) return 0;
  uint8_t buf[GEMM_UNPACK_BYTES] __attribute__((aligned(64)));
  for (int b0 = 0; b0 < nr; b0 += ub) {
    const int nbr = nr - b0 < ub ? nr - b0 : ub;
    unpack_rows(kind, nb, (const uint8_t *)w + (size_t)b0 * w_row, w_row, nbr, buf, u_row);
    for (int t0 = 0; t0 < nt; t0 += 4) {
      const int T = nt - t0 < 4 ? nt - t0 : 4;
      const uint8_t *xt = xp + (size_t)(t0 / 4) * gs;
      for (int r0 = 0; r0 < nbr;) {
        const int R = nbr - r0 < 4 ? nbr - r0 : 4;
        const uint8_t *ur = buf + (size_t)r0 * u_row;
        float *yt = y + (size_t)t0 * ys + b0 + r0;
        switch (R) { GTU(1) GTU(2) GTU(3) GTU(4) }
        r0 += R;
      }
    }
  }
  return 1;
}
#undef GTU

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

/* the K-quants' streams: as the vec_dot4 kernels' (quants_avx512.c) */
#define GEMM_K_STREAM_PF_BYTES 2048

/* the prefetch distance of a stream of w_row-byte rows */
AI size_t stream_pfd(size_t w_row, const int kind) {
  if (is_k(kind)) return GEMM_K_STREAM_PF_BYTES;
  const size_t pf_rows = (GEMM_STREAM_PF_BYTES + w_row - 1) / w_row;
  return (pf_rows > GEMM_STREAM_PF_ROWS ? pf_rows : GEMM_STREAM_PF_ROWS) * w_row;
}

/* Tiles of two or more tokens are 4 rows x 1 group (or 1 row, streamed:
 * below), or 2 rows x 2 groups when two groups' activations fit in L1
 * together (GEMM_WIDE_X_BYTES): one unpack of a weight quad then serves up
 * to 8 tokens instead of 4. */
#define GEMM_WIDE_X_BYTES (24u << 10)

#define T1(R)                                                                                      \
  case R:                                                                                          \
    if (is_k(kind))                                                                                \
      tile_one_k(kind, R, nb / 8, wr, rs, pfd, xp, yv, yr);                                        \
    else                                                                                           \
      tile_one(kind, R, nb, wr, rs, pfd, xp, yv, yr);                                              \
    break;
#define TG(R, G)                                                                                   \
  case (R) * 4 + (G): tile_groups(kind, 0, R, G, T, nb, wr, w_row, (G) == 2 ? pfd_wide : pfd, xt, gs, yt, ys, 1); break;

AI void gemm_sym(const int kind, int64_t n, const void *w, size_t w_row, int nr, size_t seg, const void *vxp, int nt,
                 float *y, size_t ys, unsigned flags) {
  const int64_t nb = n / 32, nq = (nb + 3) / 4;
  const uint8_t *xp = vxp;
  if (nt == 1) { /* four streams, else rows in turn (four adjacent rows at
                  * a time when resident: from memory, 896-wide rows, one
                  * thread, four adjacent rows ran Q5_0 at 17-22 G
                  * multiply-adds/s against 39 one at a time, Q8_0 33-34
                  * against 35-38; from L2 Q5_0 70 against 41) */
    const int step = seg || (flags & PW_GEMM_RESIDENT) || is_k(kind) ? 4 : 1;
    const size_t rs = seg ? seg * w_row : w_row, pfd = seg ? stream_pfd(w_row, kind) : GEMM_PF_ROWS * w_row,
                 yr = seg ? seg : 1;
    for (int v = 0; v < nr; v += seg ? 1 : step) {
      const int R = seg ? 4 : nr - v >= step ? step : nr - v;
      const uint8_t *wr = (const uint8_t *)w + (size_t)v * w_row;
      float *yv = y + v;
      switch (R) { T1(1) T1(2) T1(3) T1(4) }
    }
    return;
  }
  const size_t gs = (size_t)nq * (is_k(kind) ? GQUAD_K : GQUAD);
  if (seg) { /* four streams, one group */
    const size_t rs = seg * w_row, pfd = stream_pfd(w_row, kind);
    for (int v = 0; v < nr; v++)
      tile_groups(kind, 0, 4, 1, nt, nb, (const uint8_t *)w + (size_t)v * w_row, rs, pfd, xp, 0, y + v, ys, seg);
    return;
  }
  if (nt >= GEMM_UNPACK_TOKENS && gemm_sym_u(kind, n, w, w_row, nr, xp, nt, y, ys)) return;
  const size_t pfd = GEMM_PF_ROWS * w_row, pfd_wide = GEMM_WIDE_PF_ROWS * w_row;
  const int gmax = 2 * gs <= GEMM_WIDE_X_BYTES ? 2 : 1;
  for (int t0 = 0; t0 < nt;) {
    /* one group, or two (2-row tiles) */
    const int G = (nt - t0 + 3) / 4 < gmax ? (nt - t0 + 3) / 4 : gmax, T = nt - t0 < 4 * G ? nt - t0 : 4 * G;
    const uint8_t *xt = xp + (size_t)(t0 / 4) * gs;
    /* up to 4 tokens of Q4_0/Q5_0 streamed from memory: one row at a time
     * streams best (896-wide Q5_0 rows from memory, one thread: 2 / 3 / 4
     * tokens 54 / 80 / 105 G multiply-adds/s against 40 / 33 / 80 in 4-row
     * tiles); Q8_0 rows are faster in 4-row tiles (71 / 102 / 136 against
     * 59 / 85 / 117 one row at a time); a group left over after a pair keeps
     * 4-row tiles */
    const int rmax = G == 2 ? 2 : nt <= 4 && !(flags & PW_GEMM_RESIDENT) && (q4_layout(kind) || kind == LQ5_0) ? 1 : 4;
    for (int r0 = 0; r0 < nr;) {
      const int R = nr - r0 < rmax ? nr - r0 : rmax;
      const uint8_t *wr = (const uint8_t *)w + (size_t)r0 * w_row;
      float *yt = y + (size_t)t0 * ys + r0;
      switch (R * 4 + G) { TG(1, 1) TG(2, 1) TG(3, 1) TG(4, 1) TG(1, 2) TG(2, 2) }
      r0 += R;
    }
    t0 += T;
  }
}
#undef T1
#undef TG

static void gemm_pack_q8_0(const float *x, void *xp, int64_t n, int t, int nt) {
  gemm_pack_sym(x, xp, n, t, nt, sym_shift(LQ8_0));
}
static void gemm_pack_q4_0(const float *x, void *xp, int64_t n, int t, int nt) {
  gemm_pack_sym(x, xp, n, t, nt, sym_shift(LQ4_0));
}
static void gemm_pack_q5_0(const float *x, void *xp, int64_t n, int t, int nt) {
  gemm_pack_sym(x, xp, n, t, nt, sym_shift(LQ5_0));
}

/* Q4_K and Q5_K share a pack (the same corrections) */
static void gemm_pack_k45(const float *x, void *xp, int64_t n, int t, int nt) { gemm_pack_k(x, xp, n, t, nt, 0); }
static void gemm_pack_q6_k(const float *x, void *xp, int64_t n, int t, int nt) { gemm_pack_k(x, xp, n, t, nt, 1); }

/* each kind's gemm entry */
#define GEMM_ENTRY(name, kind)                                                                                     \
  static void name(int64_t n, const void *w, size_t w_row, int nr, size_t seg, const void *xp, int nt, float *y, \
                   size_t ys, unsigned flags) {                                                                  \
    gemm_sym(kind, n, w, w_row, nr, seg, xp, nt, y, ys, flags);                                                  \
  }
GEMM_ENTRY(gemm_q8_0, LQ8_0)
GEMM_ENTRY(gemm_q4_0, LQ4_0)
GEMM_ENTRY(gemm_q5_0, LQ5_0)
GEMM_ENTRY(gemm_iq4_nl, LIQ4_NL)
GEMM_ENTRY(gemm_q4_k, LQ4_K)
GEMM_ENTRY(gemm_q5_k, LQ5_K)
GEMM_ENTRY(gemm_q6_k, LQ6_K)
#undef GEMM_ENTRY

void gemm_fill_avx512vbmi(pw_traits *t) {
  g_q8_0_from = t[PW_DT_Q8_0].from_float;
  g_q8_k_from = t[PW_DT_Q8_K].from_float;
  /* one pack per symmetric type (each holds its own weight offset's
   * corrections), one for Q4_K and Q5_K, one for Q6_K */
  static const struct {
    uint32_t dtype;
    pw_gemm_fn gemm;
    pw_gemm_pack_fn pack;
    pw_gemm_xrow_fn xrow;
  } tab[] = {
      {PW_DT_Q8_0, gemm_q8_0, gemm_pack_q8_0, gemm_xrow_quad}, {PW_DT_Q4_0, gemm_q4_0, gemm_pack_q4_0, gemm_xrow_quad},
      {PW_DT_Q5_0, gemm_q5_0, gemm_pack_q5_0, gemm_xrow_quad}, {PW_DT_Q4_K, gemm_q4_k, gemm_pack_k45, gemm_xrow_k},
      {PW_DT_Q5_K, gemm_q5_k, gemm_pack_k45, gemm_xrow_k},     {PW_DT_Q6_K, gemm_q6_k, gemm_pack_q6_k, gemm_xrow_k},
      /* IQ4_NL's weights enter with Q8_0's offset (128): its pack */
      {PW_DT_IQ4_NL, gemm_iq4_nl, gemm_pack_q8_0, gemm_xrow_quad},
  };
  for (size_t i = 0; i < sizeof tab / sizeof tab[0]; i++) {
    t[tab[i].dtype].gemm = tab[i].gemm;
    t[tab[i].dtype].gemm_pack = tab[i].pack;
    t[tab[i].dtype].gemm_xrow = tab[i].xrow;
  }
}
