/* gemm_avxvnni.c - the AVX-VNNI level's register-tiled GEMM of Q8_0,
 * Q4_0, Q5_0, the K-quants, IQ4_NL, IQ4_XS and MXFP4 (gemm_avx2_impl.h,
 * gemm_kq_avx2_impl.h, gemm_iq4_avx2_impl.h)
 * with one vpdpbusd (vpdpwssd) as a block's integer products;
 * bit-identical to the AVX2 level's. Compiled with -mavx2 -mfma -mf16c
 * -mavxvnni. */
#include "tensor/traits.h"

#include <immintrin.h>

#define VD_DPBUSD(acc, u, s) _mm256_dpbusd_avx_epi32((acc), (u), (s))
#define VD_DOT2S(u0, s0, u1, s1) VD_DPBUSD(VD_DPBUSD(_mm256_setzero_si256(), (u0), (s0)), (u1), (s1))
#define VD_DPWSSD(acc, a, b) _mm256_dpwssd_avx_epi32((acc), (a), (b))
#include "tensor/arch/gemm_avx2_impl.h"

void gemm_fill_avxvnni(pw_traits *t) { gemm_fill(t); }
