/* gemm_avx2_impl.h - the register-tiled GEMM of the symmetric 32-element
 * weight types (Q8_0, Q4_0, Q5_0) of the 256-bit levels (traits.h gemm),
 * written once and compiled by gemm_avx2.c (AVX2/FMA/F16C) and
 * gemm_avxvnni.c (the same with AVX-VNNI). The including file defines
 * VD_DPBUSD(acc, u, s) as in vecdot_avx2.h: a block's integer products
 * are maddubs + madd with ones on AVX2, one vpdpbusd with AVX-VNNI, the
 * same int32 lanes either way (no operand range here saturates maddubs),
 * so both levels give bit-identical results.
 *
 * Packed activations. Each token row is quantized as q8_0 (the same quants
 * and the same fp16-rounded scales as the q8_0 quantizer); tokens go in
 * groups of 8 (x_group), with each token's quants, the scales as floats
 * with a block's scales of the group's tokens side by side, and each
 * token's block sums times its scales, padded with zeros to a multiple of
 * 8 blocks. One pack serves all three types.
 *
 * Per block, the integer products come from maddubs (unsigned by signed
 * bytes): Q4_0 and Q5_0 take their unsigned codes u (q = u - 8, u - 16)
 * against the activation quants as they are, and the offset comes back
 * once per row and token as 8 (16) times the sum over blocks of dw * (dx *
 * sum of x's quants), eight blocks per float vector; Q8_0 takes |w|
 * against x with w's sign. Then per (row, token, block), on eight lanes:
 * Q4_0/Q5_0 convert, times dx (broadcast from the pack: a load, not an
 * ALU operation), fused multiply-add with dw (converted once per row and
 * block, for all tokens); Q8_0 convert and a fused multiply-add with dw *
 * dx, which a row's block gets for eight tokens from one vector multiply
 * of the group's scales (+8-12% prefill of the 0.5B Q8_0 shape against
 * Q4_0's sequence; Q5_0 measured the same either way). ggml's AVX2 dot
 * product spends four more operations a block on the scales (fp16
 * conversion of dx, dw * dx, broadcast).
 *
 * Tiles: with many tokens, one row at a time against 8 tokens, so a
 * weight block is unpacked once per 8 tokens (Q5_0's unpacking costs more
 * than a token's products); up to 4 tokens, 4 rows (the four streams, or 4
 * adjacent rows) against 1 or 2 tokens at a time. Each (row, token)
 * result goes through the same float operations in the same order in any
 * tile, so it is bit-identical whatever nr, nt and seg are (the gemm
 * contract). */
#ifndef PW_GEMM_AVX2_IMPL_H
#define PW_GEMM_AVX2_IMPL_H

#include "tensor/arch/avx2_util.h"
#include "tensor/traits.h"

#ifndef VD_DPBUSD
#error "define VD_DPBUSD before including gemm_avx2_impl.h"
#endif

#include <stddef.h>
#include <stdint.h>

/* blocks per chunk: a chunk's weight scales are kept as floats, from which
 * Q4_0/Q5_0 sum their offsets at the end of the chunk */
#define CHUNK 32

/* The tiles of one or two tokens (a decode step: four streams, or four
 * adjacent rows) prefetch each row this far ahead, one prefetch per block,
 * as the four-row kernels of the K-quants do (the distance the AVX-512
 * level measured best for four streams, quants_avx512.c). */
#define STREAM_PF_BYTES 2048

/* the loops over a tile's rows and tokens, unrolled so the accumulators
 * stay in registers */
#define UNROLL _Pragma("GCC unroll 8")

enum { KQ8_0, KQ4_0, KQ5_0 };

AI int64_t padded(int64_t nb) { return (nb + 7) / 8 * 8; }

/* bytes per packed row, a multiple of 64 */
static size_t gemm_xrow(int64_t n) {
  const int64_t nb = n / 32;
  return (size_t)((nb * 32 + padded(nb) * 8 + 63) / 64 * 64);
}

/* Tokens are packed in groups of 8 (the last group: what is left), group
 * g at g * 8 rows: the k tokens' quants (nb * 32 bytes each), then the
 * scales as floats block by block, the k tokens' scales of a block side by
 * side (so eight tokens' scales of a block are one vector), then each
 * token's block sums, padded(nb) floats per token. */
typedef struct {
  const int8_t *q[8];  /* each token's quants */
  const float *d;      /* block b, the tile's token t: d[b * k + t] */
  const float *c[8];   /* each token's block sums */
  int k;
} xgroup;

/* tokens [t0, t0 + T) of one group */
AI xgroup x_group(const uint8_t *xp, int64_t n, int nt, int t0, int T) {
  const int64_t nb = n / 32, g = t0 / 8;
  xgroup x;
  x.k = nt - 8 * (int)g < 8 ? nt - 8 * (int)g : 8;
  const uint8_t *base = xp + (size_t)g * 8 * gemm_xrow(n);
  const float *d = (const float *)(base + (size_t)x.k * (size_t)nb * 32);
  x.d = d + (t0 - 8 * g);
  for (int t = 0; t < T; t++) {
    const int j = t0 + t - 8 * (int)g;
    x.q[t] = (const int8_t *)(base + (size_t)j * (size_t)nb * 32);
    x.c[t] = d + (size_t)padded(nb) * (size_t)x.k + (size_t)j * (size_t)padded(nb);
  }
  return x;
}

static void gemm_pack(const float *x, void *xp, int64_t n, int t, int nt) {
  const int64_t nb = n / 32, nbp = padded(nb);
  const xgroup g = x_group(xp, n, nt, t, 1);
  const int k = g.k;
  float *d = (float *)(uintptr_t)g.d, *c = (float *)(uintptr_t)g.c[0]; /* d: this token's first scale */
  int8_t *q = (int8_t *)(uintptr_t)g.q[0];
  for (int64_t b = 0; b < nb; b++) {
    pw_half dh;
    float df;
    const int sum = q8_block(x + 32 * b, &dh, q + 32 * b, &df);
    d[b * k] = h2f(dh); /* the scale q8_0 stores */
    c[b] = d[b * k] * (float)sum;
  }
  for (int64_t b = nb; b < nbp; b++) d[b * k] = c[b] = 0;
}

AI size_t wblock(const int kind) { return kind == KQ8_0 ? 34 : kind == KQ4_0 ? 18 : 22; }

/* block b's unsigned codes (Q4_0, Q5_0) or quants (Q8_0) */
AI __m256i wcodes(const int kind, const uint8_t *blk) {
  if (kind == KQ8_0) return loadu256(blk + 2);
  if (kind == KQ4_0) return nibbles32(blk + 2);
  return _mm256_or_si256(nibbles32(blk + 6), _mm256_and_si256(bits32(blk + 2), _mm256_set1_epi8(0x10)));
}

/* R rows (wr[r]) by T tokens of one group, results y[t * ys + yo[r]] */
AI void tile(const int kind, const int R, const int T, const int64_t nb, const uint8_t *const *wr, const xgroup *x,
             float *y, size_t ys, const size_t *yo) {
  const size_t bs = wblock(kind);
  __m256 acc[4][8], corr[4][8];
  _Alignas(32) float dw[4][CHUNK];
  UNROLL
  for (int r = 0; r < R; r++)
    UNROLL
    for (int t = 0; t < T; t++) acc[r][t] = corr[r][t] = _mm256_setzero_ps();
  for (int64_t b0 = 0; b0 < nb; b0 += CHUNK) {
    const int nc = nb - b0 < CHUNK ? (int)(nb - b0) : CHUNK;
    if (kind != KQ8_0)
      UNROLL
      for (int r = 0; r < R; r++)
        for (int b = nc; b < (nc + 7) / 8 * 8; b++) dw[r][b] = 0;
    for (int b = 0; b < nc; b++) {
      __m256i u[4], s[4];
      float d[4];
      UNROLL
      for (int r = 0; r < R; r++) {
        const __m256i q = wcodes(kind, wr[r] + (size_t)(b0 + b) * bs);
        if (T <= 2) _mm_prefetch((const char *)wr[r] + (size_t)(b0 + b) * bs + STREAM_PF_BYTES, _MM_HINT_T0);
        u[r] = kind == KQ8_0 ? _mm256_sign_epi8(q, q) : q;
        s[r] = q;
        d[r] = h2f(*(const pw_half *)(wr[r] + (size_t)(b0 + b) * bs));
        if (kind != KQ8_0) dw[r][b] = d[r];
      }
      /* Q8_0: a row's products dw * dx with eight tokens in one multiply,
       * which the tokens take with broadcast loads (no ALU operation) */
      _Alignas(32) float s8[8];
      const int vec8 = kind == KQ8_0 && R == 1 && T == 8;
      if (vec8) _mm256_store_ps(s8, _mm256_mul_ps(_mm256_set1_ps(d[0]), _mm256_loadu_ps(x->d + (b0 + b) * 8)));
      UNROLL
      for (int t = 0; t < T; t++) {
        const __m256i xq = loadu256(x->q[t] + 32 * (b0 + b));
        const float dx = x->d[(b0 + b) * x->k + t];
        UNROLL
        for (int r = 0; r < R; r++) {
          const __m256 f = _mm256_cvtepi32_ps(
              VD_DPBUSD(_mm256_setzero_si256(), u[r], kind == KQ8_0 ? _mm256_sign_epi8(xq, s[r]) : xq));
          if (kind == KQ8_0) /* f * (dw * dx) */
            acc[r][t] = _mm256_fmadd_ps(f, vec8 ? _mm256_broadcast_ss(&s8[t]) : _mm256_set1_ps(d[r] * dx), acc[r][t]);
          else /* (f * dx) * dw */
            acc[r][t] = _mm256_fmadd_ps(_mm256_mul_ps(f, _mm256_set1_ps(dx)), _mm256_set1_ps(d[r]), acc[r][t]);
        }
      }
    }
    if (kind != KQ8_0)
      UNROLL
      for (int t = 0; t < T; t++) {
        const float *c = x->c[t] + b0;
        for (int b = 0; b < nc; b += 8) {
          const __m256 cv = _mm256_loadu_ps(c + b);
          UNROLL
          for (int r = 0; r < R; r++) corr[r][t] = _mm256_fmadd_ps(_mm256_load_ps(&dw[r][b]), cv, corr[r][t]);
        }
      }
  }
  const float off = kind == KQ4_0 ? 8.0f : 16.0f;
  UNROLL
  for (int r = 0; r < R; r++)
    UNROLL
    for (int t = 0; t < T; t++)
      y[(size_t)t * ys + yo[r]] = kind == KQ8_0 ? hsum8(acc[r][t]) : hsum8(acc[r][t]) - off * hsum8(corr[r][t]);
}

#define TILE_CASE(R, T)                                                                                      \
  case (R) * 16 + (T): tile(kind, R, T, nb, wr, &xg, yt, ys, yo); break;

AI void gemm_sym(const int kind, int64_t n, const void *w, size_t w_row, int nr, size_t seg, const void *vxp, int nt,
                 float *y, size_t ys) {
  const int64_t nb = n / 32;
  const uint8_t *xp = vxp;
  /* up to 4 tokens: 4 rows (the four streams of each row v, or 4 adjacent
   * rows) against 2 tokens at a time; else 1 row against 8 */
  const int few = nt <= PW_GEMM_STREAM_TOKENS;
  for (int v = 0; v < nr;) {
    const int R = seg ? 4 : few ? (nr - v < 4 ? nr - v : 4) : 1;
    const uint8_t *wr[4];
    size_t yo[4];
    for (int r = 0; r < R; r++) {
      const size_t row = seg ? (size_t)v + (size_t)r * seg : (size_t)(v + r);
      wr[r] = (const uint8_t *)w + row * w_row;
      yo[r] = row;
    }
    for (int t0 = 0; t0 < nt;) {
      const int tmax = few ? 2 : 8, T = nt - t0 < tmax ? nt - t0 : tmax;
      const xgroup xg = x_group(xp, n, nt, t0, T);
      float *yt = y + (size_t)t0 * ys;
      switch (R * 16 + T) {
        TILE_CASE(1, 1) TILE_CASE(1, 2) TILE_CASE(1, 3) TILE_CASE(1, 4) TILE_CASE(1, 5) TILE_CASE(1, 6)
        TILE_CASE(1, 7) TILE_CASE(1, 8) TILE_CASE(2, 1) TILE_CASE(2, 2) TILE_CASE(3, 1) TILE_CASE(3, 2)
        TILE_CASE(4, 1) TILE_CASE(4, 2)
      default: break;
      }
      t0 += T;
    }
    v += seg ? 1 : R;
  }
}
#undef TILE_CASE

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

/* the GEMM of this level into t */
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
}

#endif
