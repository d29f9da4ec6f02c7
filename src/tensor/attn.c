/* attn.c - scalar reference of the F16 flash-attention kernel and dispatch. */
#include "tensor/attn.h"

#include "base/error.h"
#include "tensor/quants.h"
#include "tensor/traits.h"

#include <math.h>

void pw_attn_ref(const float *q, const uint16_t *k, const uint16_t *v, size_t stride, int n_pos, int hd,
                 float scale, float *out) {
  PW_ASSERT(hd > 0 && hd <= PW_ATTN_MAX_HD && n_pos >= 1);
  float qh[PW_ATTN_MAX_HD];
  uint16_t acc[PW_ATTN_MAX_HD];
  for (int i = 0; i < hd; i++) {
    qh[i] = pw_fp16_to_fp32(pw_fp32_to_fp16(q[i]));
    acc[i] = 0;
  }
  float S = 0, M = -INFINITY;
  for (int p = 0; p < n_pos; p++) {
    const uint16_t *kr = k + (size_t)p * stride, *vr = v + (size_t)p * stride;
    float s = 0;
    for (int i = 0; i < hd; i++) s += qh[i] * pw_fp16_to_fp32(kr[i]);
    s *= scale;
    float ms = 1.0f, vs = 1.0f;
    if (s > M) {
      float m_old = M;
      M = s;
      ms = expf(m_old - M);
      for (int i = 0; i < hd; i++) acc[i] = pw_fp32_to_fp16(pw_fp16_to_fp32(acc[i]) * ms);
    } else {
      vs = expf(s - M);
    }
    for (int i = 0; i < hd; i++) acc[i] = pw_fp32_to_fp16(pw_fp16_to_fp32(acc[i]) + pw_fp16_to_fp32(vr[i]) * vs);
    S = S * ms + vs;
  }
  float inv = 1.0f / S;
  for (int i = 0; i < hd; i++) out[i] = pw_fp16_to_fp32(acc[i]) * inv;
}

pw_attn_fn pw_attn_get(void) {
  pw_tensor_init();
  const int lvl = pw_tensor_level();
  return lvl >= PW_IMPL_AVX512 ? attn_avx512 : lvl >= PW_IMPL_AVX2 ? attn_avx2 : pw_attn_ref;
}

static void attn_ref_multi(const float *const *q, const int *n_pos, int nq, const uint16_t *k, const uint16_t *v,
                           size_t stride, int hd, float scale, float *const *out) {
  for (int h = 0; h < nq; h++) pw_attn_ref(q[h], k, v, stride, n_pos[h], hd, scale, out[h]);
}

pw_attn_multi_fn pw_attn_multi_get(void) {
  pw_tensor_init();
  const int lvl = pw_tensor_level();
  return lvl >= PW_IMPL_AVX512 ? attn_avx512_multi : lvl >= PW_IMPL_AVX2 ? attn_avx2_multi : attn_ref_multi;
}
