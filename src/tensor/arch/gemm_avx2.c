/* gemm_avx2.c - the AVX2 level's register-tiled GEMM of Q8_0, Q4_0, Q5_0,
 * the K-quants, IQ4_NL, IQ4_XS and MXFP4 (gemm_avx2_impl.h,
 * gemm_kq_avx2_impl.h, gemm_iq4_avx2_impl.h) with maddubs +
 * madd as a block's integer products. Compiled with -mavx2 -mfma -mf16c. */
#include "tensor/traits.h"

#include <immintrin.h>

#define VD_DPBUSD(acc, u, s) _mm256_add_epi32((acc), _mm256_madd_epi16(_mm256_maddubs_epi16((u), (s)), _mm256_set1_epi16(1)))
/* two maddubs added as int16 (no saturation for the 4- and 5-bit codes:
 * at most 2 * 2 * 31 * 127), then one madd */
#define VD_DOT2S(u0, s0, u1, s1)                                                                                  \
  _mm256_madd_epi16(_mm256_add_epi16(_mm256_maddubs_epi16((u0), (s0)), _mm256_maddubs_epi16((u1), (s1))),         \
                    _mm256_set1_epi16(1))
#define VD_DPWSSD(acc, a, b) _mm256_add_epi32((acc), _mm256_madd_epi16((a), (b)))
#include "tensor/arch/gemm_avx2_impl.h"

void gemm_fill_avx2(pw_traits *t) { gemm_fill(t); }
