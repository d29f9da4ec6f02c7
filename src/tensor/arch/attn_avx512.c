/* attn_avx512.c - the F16 flash-attention kernel (attn.h) with 16-lane
 * AVX-512 vectors: the same algorithm and code as attn_avx2.c (both expand
 * arch/attn_impl.h), so each F16 accumulator update, the largest part, is
 * half the instructions. Head sizes that are not a multiple of 16 go to the
 * AVX2 kernel. Installed only when the CPU has the AVX-512 level. */
#include "tensor/attn.h"

#include <immintrin.h>

#define VT __m512
#define VW 16
#define V_LOAD(p) _mm512_load_ps(p)
#define V_LOADU(p) _mm512_loadu_ps(p)
#define V_STORE(p, v) _mm512_store_ps(p, v)
#define V_STOREU(p, v) _mm512_storeu_ps(p, v)
#define V_MUL(a, b) _mm512_mul_ps(a, b)
#define V_FMA(a, b, c) _mm512_fmadd_ps(a, b, c)
#define V_SET1(x) _mm512_set1_ps(x)
#define V_LOAD_PH(p) _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(p)))
#define V_ROUND16(v) _mm512_cvtph_ps(_mm512_cvtps_ph(v, RND))
#define V_TO8(v) _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1))
#define ATTN_GROUP attn_group512
#define ATTN_MULTI attn_avx512_multi
#define ATTN_SINGLE attn_avx512
#define ATTN_NARROW attn_avx2_multi
#define ATTN_PART attn_avx512_part
#define ATTN_NARROW_PART attn_avx2_part

#include "tensor/arch/attn_impl.h"
