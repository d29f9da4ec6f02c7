/* gemm_iq4_avx2_impl.h - the register-tiled GEMM of the non-linear 4-bit
 * types (IQ4_NL, MXFP4 against q8_0; IQ4_XS against q8_K) of the 256-bit
 * levels (traits.h gemm), included by gemm_avx2_impl.h after
 * gemm_kq_avx2_impl.h (so compiled by gemm_avx2.c and gemm_avxvnni.c, with
 * their VD_DPBUSD and VD_DPWSSD). Not the few-token passes: up to
 * PW_GEMM_STREAM_TOKENS tokens go to the level's vec_dot (and vec_dot4)
 * through gemm_few, as the K-quants' do.
 *
 * Same bits as vec_dot. Every (row, token) result takes exactly the float
 * operations of the level's vec_dot (vecdot_avx2.h): IQ4_NL/MXFP4 per
 * block one FMA of the eight int32 lanes of the block's integer dot by dx
 * * dw, then hsum8; IQ4_XS per super-block one FMA of the eight lanes of
 * its scaled integer sum by dw * dx, then hsum8 plus hsum4 of vec_dot's
 * empty mins (+ 0.0f). The int32 lane L holds the same integer as in
 * vec_dot (the products of elements 4L..4L+3 of each group; integer sums
 * are exact in any order), so a row's result is vec_dot's whatever the
 * tile or the token count, and the batch invariance holds with decode
 * steps on vec_dot.
 *
 * IQ4_NL and MXFP4: one row against a tile of up to NL_T = 8 tokens, the
 * eight accumulators in registers; the block's values (a pshufb of the
 * nibbles) and their magnitudes unpacked once per tile; per token the
 * sign, maddubs and madd (one vpdpbusd with AVX-VNNI) of vec_dot, but the
 * token's scale packed as a float (a broadcast load and one multiply
 * instead of vec_dot's fp16 load, convert, scalar multiply and broadcast).
 *
 * IQ4_XS: the K-quants' step (two maddubs added as int16, then one madd
 * by the scales) would overflow here (four products reach 4 * 127 * 127
 * > 2^15), so vec_dot takes per (row, token, group) a sign, a maddubs and
 * a madd by the group's scale. Here the row's super-block is unpacked
 * once per tile of XS_T = 16 tokens into int16 values times the group's
 * scale (|v * ls| <= 4064) and the tokens' quants are packed as int16:
 * per (row, token, group) two madds (two vpdpwssd) and no sign, the int16
 * words ordered so that madd lane L of the two vectors takes elements 4L,
 * 4L + 1 and 4L + 2, 4L + 3 (vec_dot's lane L). The sums of a tile's
 * tokens go eight at a time, each weight vector loaded once per eight
 * tokens. The multiplies per (row, token, super-block) stay 16 (maddubs
 * and madd before, two madds now); what goes is the sign, vec_dot's
 * scalar work per token and the unpack per 8 tokens. On a Zen 4 core,
 * whose two multiply pipes bound both, bench_kernels (4096-wide, 32
 * tokens against vec_dot's 8, a loaded machine): IQ4_XS avx2 21-22 ->
 * 24-25.5 GB/s, avx2vnni 24.5-25.5 -> 30; IQ4_NL avx2 16.3 -> 18.5,
 * avx2vnni 18 -> 22; MXFP4 avx2 15.6 -> 18.5, avx2vnni 17.3 -> 22. A
 * 64-token prefill of a llama-3.2-1b-shaped IQ4_XS file at the AVX2 level
 * (power bench -p 64 -n 0 -r 1, callgrind, whole process): 43.1 G
 * instructions -> 32.2 G, the IQ4_XS kernel 40.6 G -> 30.0 G.
 *
 * The AVX-512 level keeps vec_dot for IQ4_XS: its vec_dot takes per token
 * and 64 elements one masked negate, one maddubs and one vpdpwssd, and a
 * tile under the same-bits rule (the integer lanes and one FMA per
 * super-block fixed) still needs eight 512-bit multiplies a super-block
 * (int16 products) against vec_dot's eight, so it would save the negate
 * and the unpack alone. Its IQ4_NL GEMM is the VBMI one
 * (gemm_avx512vbmi.c).
 *
 * Rows and tokens are walked as the K-quants' are (gemm_kq_avx2_impl.h): a
 * block of IQ_ROWS rows takes a chunk of (super-)blocks whose activations
 * for the tile fit in L1, the accumulators kept per (row, token) between
 * chunks. */
#ifndef PW_GEMM_IQ4_AVX2_IMPL_H
#define PW_GEMM_IQ4_AVX2_IMPL_H

#include "tensor/arch/avx2_util.h"
#include "tensor/quants.h"
#include "tensor/traits.h"

#if !defined(VD_DPBUSD) || !defined(VD_DPWSSD) || !defined(PW_GEMM_KQ_AVX2_IMPL_H)
#error "include gemm_iq4_avx2_impl.h from gemm_avx2_impl.h"
#endif

#include <stddef.h>
#include <stdint.h>
#include <string.h>

enum { IQ_NL, IQ_MX, IQ_XS, IQ_COUNT };

/* tokens per tile of the 32-element types and of IQ4_XS */
#define NL_T 8
#define XS_T 16
/* rows per block, and the activation bytes of a tile's chunk */
#define IQ_ROWS 16
#define IQ_CHUNK_BYTES (16u << 10)
/* the weight row is prefetched this far ahead (vec_dot's distance) */
#define IQ_PF_BYTES 4096

/* set by gemm_fill_iq4 from the level's own table */
static pw_from_float_fn iq_q8_0_from, iq_q8_k_from;
static pw_vec_dot_fn iq_vd[IQ_COUNT];
static pw_vec_dot4_fn iq_vd4[IQ_COUNT];

/* ---- packs ----------------------------------------------------------------
 * Up to PW_GEMM_STREAM_TOKENS tokens: token t's q8_0 (q8_K) row at t *
 * xrow, as vec_dot reads it. More: groups of NL_T (XS_T) tokens, the last
 * one k tokens, at g * T * xrow; in a group block b of token j has its
 * quants at (b * k + j) * QB and its scale as a float at nb * k * QB + (b *
 * k + j) * 4, so a tile's tokens are at fixed offsets from one pointer.
 * QB: 32 bytes (q8_0 quants), or 512 (a q8_K super-block's quants as
 * int16, in xs_unpack's word order). */

#define NL_XB 36 /* 32 quants and a float */
#define XS_QB 512
#define XS_XB (XS_QB + 4)

static size_t nl_xrow(int64_t n) { return ((size_t)(n / 32) * NL_XB + 63) / 64 * 64; }
static size_t xs_xrow(int64_t n) { return ((size_t)(n / QK_K) * XS_XB + 63) / 64 * 64; }

/* group g of a pack of nt tokens in groups of T: its base, its token count
 * k and token t's index j in it */
AI uint8_t *iq_group(uint8_t *xp, size_t xrow, int T, int t, int nt, int *k, int *j) {
  const int g = t / T;
  *j = t % T;
  *k = nt - g * T < T ? nt - g * T : T;
  return xp + (size_t)g * (size_t)T * xrow;
}

static void nl_pack(const float *x, void *xp, int64_t n, int t, int nt) {
  const int64_t nb = n / 32;
  const size_t xrow = nl_xrow(n);
  if (nt <= PW_GEMM_STREAM_TOKENS) {
    iq_q8_0_from(x, (uint8_t *)xp + (size_t)t * xrow, n);
    return;
  }
  int k, j;
  uint8_t *gb = iq_group(xp, xrow, NL_T, t, nt, &k, &j);
  float *d = (float *)(gb + (size_t)nb * (size_t)k * 32);
  for (int64_t b = 0; b < nb; b++) {
    block_q8_0 q;
    iq_q8_0_from(x + 32 * b, &q, 32); /* the level's quantizer: vec_dot's quants and scale */
    const size_t bj = (size_t)b * (size_t)k + (size_t)j;
    memcpy(gb + bj * 32, q.qs, 32);
    d[bj] = h2f(q.d);
  }
}

/* a q8_K super-block's 256 quants as int16 in xs_unpack's order: group g's
 * vector 2g word 2L + p is element 32g + 4L + p, vector 2g + 1 word 2L + p
 * element 32g + 4L + 2 + p */
static void xs_pack(const float *x, void *xp, int64_t n, int t, int nt) {
  const int64_t nsb = n / QK_K;
  const size_t xrow = xs_xrow(n);
  if (nt <= PW_GEMM_STREAM_TOKENS) {
    iq_q8_k_from(x, (uint8_t *)xp + (size_t)t * xrow, n);
    return;
  }
  int k, j;
  uint8_t *gb = iq_group(xp, xrow, XS_T, t, nt, &k, &j);
  float *d = (float *)(gb + (size_t)nsb * (size_t)k * XS_QB);
  for (int64_t i = 0; i < nsb; i++) {
    block_q8_K q;
    iq_q8_k_from(x + QK_K * i, &q, QK_K);
    const size_t ij = (size_t)i * (size_t)k + (size_t)j;
    int16_t v[QK_K];
    for (int g = 0; g < QK_K / 32; g++)
      for (int h = 0; h < 2; h++)
        for (int l = 0; l < 8; l++)
          for (int p = 0; p < 2; p++) v[32 * g + 16 * h + 2 * l + p] = q.qs[32 * g + 4 * l + 2 * h + p];
    memcpy(gb + ij * XS_QB, v, sizeof v);
    d[ij] = q.d;
  }
}

/* ---- tiles ------------------------------------------------------------- */

AI size_t nl_bsz(const int kind) { return kind == IQ_MX ? sizeof(block_mxfp4) : sizeof(block_iq4_nl); }

/* One row's blocks b0..b1 - 1 (w: the row) against T tokens j0.. of a
 * group of k at gb (nb blocks a token), into acc_io[t]. */
AI void nl_tile(const int kind, const int T, const int64_t nb, const int64_t b0, const int64_t b1, const uint8_t *w,
                const uint8_t *gb, const int k, const int j0, __m256 *acc_io) {
  const int mx = kind == IQ_MX;
  const size_t bsz = nl_bsz(kind);
  const __m256i tab = table32(mx ? pw_kvalues_mxfp4 : pw_kvalues_iq4nl);
  const int8_t *xq = (const int8_t *)gb + ((size_t)b0 * (size_t)k + (size_t)j0) * 32;
  const float *xd = (const float *)(gb + (size_t)nb * (size_t)k * 32) + (size_t)b0 * (size_t)k + (size_t)j0;
  __m256 acc[NL_T];
  _Pragma("GCC unroll 8") for (int t = 0; t < T; t++) acc[t] = acc_io[t];
  for (int64_t b = b0; b < b1; b++, xq += 32 * k, xd += k) {
    const uint8_t *blk = w + (size_t)b * bsz;
    if ((b & 3) == 0) _mm_prefetch((const char *)blk + IQ_PF_BYTES, _MM_HINT_T0);
    const __m256i qw = _mm256_shuffle_epi8(tab, nibbles32(blk + (mx ? 1 : 2)));
    const __m256i aw = _mm256_sign_epi8(qw, qw);
    float dw;
    if (mx) {
      dw = pw_e8m0_half(blk[0]);
    } else {
      pw_half h;
      memcpy(&h, blk, 2);
      dw = h2f(h);
    }
    const __m256 dwv = _mm256_set1_ps(dw);
    _Pragma("GCC unroll 8") for (int t = 0; t < T; t++) {
      const __m256i p = VD_DPBUSD(_mm256_setzero_si256(), aw, _mm256_sign_epi8(loadu256(xq + 32 * t), qw));
      /* vec_dot's dx * dw, then its FMA */
      acc[t] = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_broadcast_ss(xd + t), dwv), _mm256_cvtepi32_ps(p), acc[t]);
    }
  }
  _Pragma("GCC unroll 8") for (int t = 0; t < T; t++) acc_io[t] = acc[t];
}

/* IQ4_XS super-block w: group g's values times its scale as int16, words
 * in xs_pack's order, into W[2g], W[2g + 1] */
AI void xs_unpack(const block_iq4_xs *w, __m256i *W) {
  const __m256i tab = table32(pw_kvalues_iq4nl);
  /* in each 128-bit lane: elements 0, 1, 4, 5, .. 12, 13, then 2, 3, 6, 7,
   * .. 14, 15 (each lane holds 16 of the group's 32) */
  const __m256i perm = _mm256_broadcastsi128_si256(_mm_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15));
  const __m256i sc = iq4xs_scales(w);
  _Pragma("GCC unroll 4") for (int g2 = 0; g2 < QK_K / 32; g2 += 2) {
    __m256i nb[2];
    nibbles32x2(w->qs + 16 * g2, &nb[0], &nb[1]);
    _Pragma("GCC unroll 2") for (int h = 0; h < 2; h++) {
      const int g = g2 + h;
      const __m256i v = _mm256_shuffle_epi8(tab, _mm256_shuffle_epi8(nb[h], perm));
      const __m256i ls = scale_k(sc, g);
      /* bytes to int16 with their sign: each byte into a word's high
       * byte, then an arithmetic shift */
      const __m256i a = _mm256_srai_epi16(_mm256_unpacklo_epi8(v, v), 8);
      const __m256i b = _mm256_srai_epi16(_mm256_unpackhi_epi8(v, v), 8);
      _mm256_store_si256(W + 2 * g, _mm256_mullo_epi16(a, ls));
      _mm256_store_si256(W + 2 * g + 1, _mm256_mullo_epi16(b, ls));
    }
  }
}

/* One row's super-blocks i0..i1 - 1 against T tokens j0.. of a group of k
 * at gb (nsb super-blocks a token), into acc_io[t]; the tokens' sums
 * eight at a time (eight int32 accumulators in registers, each weight
 * vector loaded once for them) */
AI void xs_tile(const int T, const int64_t nsb, const int64_t i0, const int64_t i1, const block_iq4_xs *w,
                const uint8_t *gb, const int k, const int j0, __m256 *acc_io) {
  const uint8_t *xq = gb + ((size_t)i0 * (size_t)k + (size_t)j0) * XS_QB;
  const float *xd = (const float *)(gb + (size_t)nsb * (size_t)k * XS_QB) + (size_t)i0 * (size_t)k + (size_t)j0;
  _Alignas(32) __m256i W[16];
  for (int64_t i = i0; i < i1; i++, xq += (size_t)k * XS_QB, xd += k) {
    for (size_t o = 0; o < sizeof *w; o += 64) _mm_prefetch((const char *)(w + i) + IQ_PF_BYTES + o, _MM_HINT_T0);
    xs_unpack(w + i, W);
    const __m256 dwv = _mm256_set1_ps(h2f(w[i].d));
    _Pragma("GCC unroll 2") for (int h = 0; h < T; h += 8) {
      const int H = T - h < 8 ? T - h : 8;
      __m256i s[8];
      _Pragma("GCC unroll 8") for (int t = 0; t < H; t++) s[t] = _mm256_setzero_si256();
      /* a rolled loop over the weight vectors, the sums pinned to their
       * registers: unrolled, gcc did all 128 madds of a half first,
       * through the stack, and recomputed W per half instead of loading
       * it; without the pins it copied every sum once per step */
      _Pragma("GCC unroll 1") for (int v = 0; v < 16; v += 2) {
        const __m256i w0 = _mm256_load_si256(W + v), w1 = _mm256_load_si256(W + v + 1);
        const uint8_t *xv = xq + (size_t)h * XS_QB + 32 * (size_t)v;
        _Pragma("GCC unroll 8") for (int t = 0; t < H; t++) {
          s[t] = VD_DPWSSD(s[t], w0, loadu256(xv + (size_t)t * XS_QB));
          KEEP_IN_REG(s[t]);
        }
        _Pragma("GCC unroll 8") for (int t = 0; t < H; t++) {
          s[t] = VD_DPWSSD(s[t], w1, loadu256(xv + (size_t)t * XS_QB + 32));
          KEEP_IN_REG(s[t]);
        }
      }
      /* vec_dot's dw * dx, then its FMA */
      _Pragma("GCC unroll 8") for (int t = 0; t < H; t++) acc_io[h + t] = _mm256_fmadd_ps(
          _mm256_mul_ps(dwv, _mm256_broadcast_ss(xd + h + t)), _mm256_cvtepi32_ps(s[t]), acc_io[h + t]);
    }
  }
}

#define XS_CASE(T)                                                                                        \
  case T:                                                                                                 \
    for (int v = 0; v < R; v++)                                                                           \
      xs_tile(T, nb, i0, i1, (const block_iq4_xs *)((const uint8_t *)w + (size_t)(r0 + v) * w_row), gb, k, j0, \
              acc[v]);                                                                                    \
    break;
#define NL_CASE(T)                                                                                        \
  case T:                                                                                                 \
    for (int v = 0; v < R; v++) nl_tile(kind, T, nb, i0, i1, (const uint8_t *)w + (size_t)(r0 + v) * w_row, gb, k, j0, acc[v]); \
    break;

AI void gemm_iq4(const int kind, int64_t n, const void *w, size_t w_row, int nr, size_t seg, const void *vxp, int nt,
                 float *y, size_t ys) {
  const int xs4 = kind == IQ_XS;
  const size_t xs = xs4 ? xs_xrow(n) : nl_xrow(n);
  const uint8_t *xp = vxp;
  if (nt <= PW_GEMM_STREAM_TOKENS) {
    gemm_few(iq_vd[kind], iq_vd4[kind], n, w, w_row, nr, seg, xp, xs, nt, y, ys);
    return;
  }
  const int GT = xs4 ? XS_T : NL_T;
  const int64_t nb = xs4 ? n / QK_K : n / 32; /* (super-)blocks a row */
  const size_t tb = xs4 ? XS_XB : NL_XB;     /* activation bytes per token and (super-)block */
  _Alignas(32) __m256 acc[IQ_ROWS][XS_T];
  for (int t0 = 0; t0 < nt;) {
    const int g = t0 / GT, j0 = t0 % GT, k = nt - g * GT < GT ? nt - g * GT : GT;
    const int left = k - j0;
    /* 16, 8, or what is left of a group (IQ4_XS: 16 or 8 then 1..8) */
    const int T = left >= GT ? GT : left > 8 ? 8 : left;
    const uint8_t *gb = xp + (size_t)g * (size_t)GT * xs;
    const int64_t chunk = IQ_CHUNK_BYTES / ((size_t)T * tb) > 0 ? (int64_t)(IQ_CHUNK_BYTES / ((size_t)T * tb)) : 1;
    for (int r0 = 0; r0 < nr; r0 += IQ_ROWS) {
      const int R = nr - r0 < IQ_ROWS ? nr - r0 : IQ_ROWS;
      for (int v = 0; v < R; v++)
        for (int t = 0; t < T; t++) acc[v][t] = _mm256_setzero_ps();
      for (int64_t i0 = 0; i0 < nb; i0 += chunk) {
        const int64_t i1 = nb - i0 < chunk ? nb : i0 + chunk;
        if (xs4) {
          switch (T) {
            XS_CASE(16) XS_CASE(8) XS_CASE(7) XS_CASE(6) XS_CASE(5) XS_CASE(4) XS_CASE(3) XS_CASE(2) XS_CASE(1)
          default: break;
          }
        } else {
          switch (T) {
            NL_CASE(8) NL_CASE(7) NL_CASE(6) NL_CASE(5) NL_CASE(4) NL_CASE(3) NL_CASE(2) NL_CASE(1)
          default: break;
          }
        }
      }
      /* IQ4_XS: vec_dot adds its (empty) mins' hsum4, +0.0f */
      for (int v = 0; v < R; v++)
        for (int t = 0; t < T; t++)
          y[(size_t)(t0 + t) * ys + (size_t)(r0 + v)] = xs4 ? hsum8(acc[v][t]) + 0.0f : hsum8(acc[v][t]);
    }
    t0 += T;
  }
}
#undef XS_CASE
#undef NL_CASE

#define IQ_ENTRY(name, kind)                                                                                   \
  static void name(int64_t n, const void *w, size_t w_row, int nr, size_t seg, const void *xp, int nt, float *y, \
                   size_t ys, unsigned flags) {                                                                \
    (void)flags;                                                                                               \
    gemm_iq4(kind, n, w, w_row, nr, seg, xp, nt, y, ys);                                                       \
  }
IQ_ENTRY(gemm_iq4_nl, IQ_NL)
IQ_ENTRY(gemm_mxfp4, IQ_MX)
IQ_ENTRY(gemm_iq4_xs, IQ_XS)
#undef IQ_ENTRY

/* the non-linear types' GEMM into t (after the level's vec_dot kernels and
 * quantizers are in t) */
AI void gemm_fill_iq4(pw_traits *t) {
  const struct {
    uint32_t dtype;
    pw_gemm_fn gemm;
    pw_gemm_pack_fn pack;
    pw_gemm_xrow_fn xrow;
  } tab[IQ_COUNT] = {{PW_DT_IQ4_NL, gemm_iq4_nl, nl_pack, nl_xrow},
                     {PW_DT_MXFP4, gemm_mxfp4, nl_pack, nl_xrow},
                     {PW_DT_IQ4_XS, gemm_iq4_xs, xs_pack, xs_xrow}};
  iq_q8_0_from = t[PW_DT_Q8_0].from_float;
  iq_q8_k_from = t[PW_DT_Q8_K].from_float;
  for (int k = 0; k < IQ_COUNT; k++) {
    iq_vd[k] = t[tab[k].dtype].vec_dot;
    iq_vd4[k] = t[tab[k].dtype].vec_dot4;
    t[tab[k].dtype].gemm = tab[k].gemm;
    t[tab[k].dtype].gemm_pack = tab[k].pack;
    t[tab[k].dtype].gemm_xrow = tab[k].xrow;
  }
}

#endif
