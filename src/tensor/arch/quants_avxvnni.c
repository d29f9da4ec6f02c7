/* quants_avxvnni.c - the AVX-VNNI level's quantized dot products: the
 * AVX2 level's (vecdot_avx2.h) with their integer steps on the
 * VEX-encoded vpdpbusd and vpdpwssd (one instruction where AVX2 takes
 * maddubs + madd + add, or madd + add). Their results are bit-identical to
 * the AVX2 level's (see vecdot_avx2.h). Compiled with -mavx2 -mfma -mf16c
 * -mavxvnni; installed by pw_tensor_init only on a CPU with AVX-VNNI
 * (Alder Lake, Sapphire Rapids, Zen 5 and later). Everything else of the
 * level (quantizers, float rows) is the AVX2 level's. */
#include "tensor/traits.h"

#include <immintrin.h>

#define VD_DPBUSD(acc, u, s) _mm256_dpbusd_avx_epi32((acc), (u), (s))
#define VD_DPWSSD(acc, a, b) _mm256_dpwssd_avx_epi32((acc), (a), (b))
#include "tensor/arch/vecdot_avx2.h"

void quants_fill_avxvnni(pw_traits *t) {
  vd_fill(t);
  for (int i = 0; i < PW_DT_COUNT; i++)
    if (t[i].to_float) t[i].impl = "avx2vnni";
}
