/* attn.c - scalar reference of the F16 flash-attention kernel and dispatch,
 * the merge of split spans, and the kernel for quantized K/V caches. */
#include "tensor/attn.h"

#include "base/error.h"
#include "tensor/dtype.h"
#include "tensor/quants.h"
#include "tensor/traits.h"

#include <math.h>
#include <stdbool.h>
#include <string.h>

/* The online softmax over n_pos keys from an empty state; acc gets the
 * f32 values of the F16 accumulator. */
static void ref_state(const float *q, const uint16_t *k, const uint16_t *v, size_t stride, int n_pos, int hd,
                      float scale, float *acc_out, float *m_out, float *s_out) {
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
  for (int i = 0; i < hd; i++) acc_out[i] = pw_fp16_to_fp32(acc[i]);
  *m_out = M;
  *s_out = S;
}

void pw_attn_ref_part(const float *q, const uint16_t *k, const uint16_t *v, size_t stride, int n_pos, int hd,
                      float scale, float *acc, float *ms) {
  ref_state(q, k, v, stride, n_pos, hd, scale, acc, &ms[0], &ms[1]);
}

void pw_attn_ref(const float *q, const uint16_t *k, const uint16_t *v, size_t stride, int n_pos, int hd,
                 float scale, float *out) {
  float M, S;
  ref_state(q, k, v, stride, n_pos, hd, scale, out, &M, &S);
  const float inv = 1.0f / S;
  for (int i = 0; i < hd; i++) out[i] *= inv;
}

/* The long prefixes' chunked online softmax (attn.h) over n_pos keys from
 * an empty state; acc gets the unnormalised f32 accumulator. */
static void ref_long_state(const float *q, const uint16_t *k, const uint16_t *v, size_t stride, int n_pos, int hd,
                           float scale, float *acc, float *m_out, float *s_out) {
  PW_ASSERT(hd > 0 && hd <= PW_ATTN_MAX_HD && n_pos >= 1);
  for (int i = 0; i < hd; i++) acc[i] = 0;
  float S = 0, M = -INFINITY, w[PW_ATTN_CHUNK];
  for (int p0 = 0; p0 < n_pos; p0 += PW_ATTN_CHUNK) {
    const int np = n_pos - p0 < PW_ATTN_CHUNK ? n_pos - p0 : PW_ATTN_CHUNK;
    float cm = -INFINITY;
    for (int p = 0; p < np; p++) {
      const uint16_t *kr = k + (size_t)(p0 + p) * stride;
      float s = 0;
      for (int i = 0; i < hd; i++) s += q[i] * pw_fp16_to_fp32(kr[i]);
      w[p] = s * scale;
      if (w[p] > cm) cm = w[p];
    }
    const float mn = cm > M ? cm : M;
    if (mn > M) {
      const float f = expf(M - mn);
      for (int i = 0; i < hd; i++) acc[i] *= f;
      S *= f;
    }
    M = mn;
    float cs = 0;
    for (int p = 0; p < np; p++) cs += w[p] = expf(w[p] - M);
    S += cs;
    for (int p = 0; p < np; p++) {
      const uint16_t *vr = v + (size_t)(p0 + p) * stride;
      for (int i = 0; i < hd; i++) acc[i] = fmaf(w[p], pw_fp16_to_fp32(vr[i]), acc[i]);
    }
  }
  *m_out = M;
  *s_out = S;
}

void pw_attn_ref_long_part(const float *q, const uint16_t *k, const uint16_t *v, size_t stride, int n_pos, int hd,
                           float scale, float *acc, float *ms) {
  ref_long_state(q, k, v, stride, n_pos, hd, scale, acc, &ms[0], &ms[1]);
}

void pw_attn_ref_long(const float *q, const uint16_t *k, const uint16_t *v, size_t stride, int n_pos, int hd,
                      float scale, float *out) {
  float M, S;
  ref_long_state(q, k, v, stride, n_pos, hd, scale, out, &M, &S);
  const float inv = 1.0f / S;
  for (int i = 0; i < hd; i++) out[i] *= inv;
}

/* four lanes of the fold's arithmetic: the scalar loop's operations lane
 * by lane (so its bits), which -O2 left one element at a time (at 16K
 * depth a decode step folds 32 spans per head and layer: 3.3% of the
 * step's profile) */
typedef float fold_v4 __attribute__((vector_size(16)));

void pw_attn_fold(float *racc, float *rms, const float *acc, const float *ms, int hd) {
  const float mc = ms[0], sc = ms[1];
  if (sc == 0.0f) return;
  /* one of the two differences is exactly 0 (whichever max is the new
   * one), and expf(0) is exactly 1: one expf a fold, the same bits */
  const float M = rms[0], mn = mc > M ? mc : M, d_o = M - mn, d_n = mc - mn;
  const float so = d_o == 0.0f ? 1.0f : expf(d_o), sn = d_n == 0.0f ? 1.0f : expf(d_n);
  const fold_v4 vo = {so, so, so, so}, vn = {sn, sn, sn, sn};
  int i = 0;
  for (; i + 4 <= hd; i += 4) {
    fold_v4 a, b;
    memcpy(&a, racc + i, sizeof a);
    memcpy(&b, acc + i, sizeof b);
    a = a * vo + b * vn;
    memcpy(racc + i, &a, sizeof a);
  }
  for (; i < hd; i++) racc[i] = racc[i] * so + acc[i] * sn;
  rms[1] = rms[1] * so + sc * sn;
  rms[0] = mn;
}

void pw_attn_finish(float *racc, const float *rms, int hd) {
  const float inv = rms[1] != 0.0f ? 1.0f / rms[1] : 0.0f;
  for (int i = 0; i < hd; i++) racc[i] *= inv;
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

static void attn_ref_part(const float *const *q, const int *n_pos, int nq, const uint16_t *k, const uint16_t *v,
                          size_t stride, int hd, float scale, float *const *out, float *ms) {
  for (int h = 0; h < nq; h++) pw_attn_ref_part(q[h], k, v, stride, n_pos[h], hd, scale, out[h], ms + 2 * h);
}

pw_attn_part_fn pw_attn_part_get(void) {
  pw_tensor_init();
  const int lvl = pw_tensor_level();
  return lvl >= PW_IMPL_AVX512 ? attn_avx512_part : lvl >= PW_IMPL_AVX2 ? attn_avx2_part : attn_ref_part;
}

static void attn_ref_long_multi(const float *const *q, const int *n_pos, int nq, const uint16_t *k,
                                const uint16_t *v, size_t stride, int hd, float scale, float *const *out) {
  for (int h = 0; h < nq; h++) pw_attn_ref_long(q[h], k, v, stride, n_pos[h], hd, scale, out[h]);
}

static void attn_ref_long_parts(const float *const *q, const int *n_pos, int nq, const uint16_t *k,
                                const uint16_t *v, size_t stride, int hd, float scale, float *const *out,
                                float *ms) {
  for (int h = 0; h < nq; h++) pw_attn_ref_long_part(q[h], k, v, stride, n_pos[h], hd, scale, out[h], ms + 2 * h);
}

pw_attn_multi_fn pw_attn_multi_long_get(void) {
  pw_tensor_init();
  const int lvl = pw_tensor_level();
  return lvl >= PW_IMPL_AVX512 ? attn_avx512_multi_long : lvl >= PW_IMPL_AVX2 ? attn_avx2_multi_long : attn_ref_long_multi;
}

pw_attn_part_fn pw_attn_part_long_get(void) {
  pw_tensor_init();
  const int lvl = pw_tensor_level();
  return lvl >= PW_IMPL_AVX512 ? attn_avx512_part_long : lvl >= PW_IMPL_AVX2 ? attn_avx2_part_long : attn_ref_long_parts;
}

pw_attn_multi_fn pw_attn_multi_get(void) {
  pw_tensor_init();
  const int lvl = pw_tensor_level();
  return lvl >= PW_IMPL_AVX512 ? attn_avx512_multi : lvl >= PW_IMPL_AVX2 ? attn_avx2_multi : attn_ref_multi;
}

static inline float round16(float x) { return pw_fp16_to_fp32(pw_fp32_to_fp16(x)); }

/* a key's score from its q.K dot product: scaled, or (softcap > 0) capped
 * as ggml caps it: the scale divided by the cap once, then
 * cap * tanh(dot * that) */
static inline float kvq_score(float dot, float scale, float softcap, float cap_scale) {
  return softcap > 0 ? softcap * tanhf(dot * cap_scale) : dot * scale;
}

void pw_attn_kvq(const pw_attn_kv *kv, const float *const *q, const int *n_pos, int nq, int hd, float scale,
                 float softcap, float *const *out, float *ms, int ref) {
  enum { NX = PW_VEC_DOT_MAX_NX };
  const pw_traits *tk = ref ? pw_traits_ref(kv->k_type) : pw_traits_get(kv->k_type);
  const pw_traits *tv = ref ? pw_traits_ref(kv->v_type) : pw_traits_get(kv->v_type);
  PW_ASSERT(tk && tv && tk->vec_dot && nq >= 1 && nq <= PW_ATTN_GROUP_MAX && hd > 0 && hd <= PW_ATTN_KVQ_MAX_HD);
  const pw_traits *tq = ref ? pw_traits_ref(tk->vec_dot_type) : pw_traits_get(tk->vec_dot_type);
  PW_ASSERT(tq && hd % (int)tk->blck == 0 && hd % (int)tv->blck == 0 && hd % (int)tq->blck == 0);
  const bool v16 = kv->v_type == PW_DT_F16;
  /* where the CPU has vectors: chunks of keys, the weights from the
   * vector exp and the accumulator updates in vectors
   * (attn_avx2_kvq_chunk); else key by key with expf */
  const bool vec = !ref && pw_tensor_level() >= PW_IMPL_AVX2 && hd % 8 == 0;
  /* q in K's dot-product type: one row per query (F16 rows are the widest) */
  const size_t qrow = (size_t)hd / tq->blck * tq->type_size;
  _Alignas(64) uint8_t qq[PW_ATTN_GROUP_MAX * PW_ATTN_KVQ_MAX_HD * 2];
  _Alignas(64) float acc[PW_ATTN_GROUP_MAX][PW_ATTN_KVQ_MAX_HD];
  _Alignas(64) float vf[PW_ATTN_KVQ_MAX_HD];
  float M[PW_ATTN_GROUP_MAX], S[PW_ATTN_GROUP_MAX], s[PW_ATTN_GROUP_MAX];
  int n_max = 0;
  for (int h = 0; h < nq; h++) {
    tq->from_float(q[h], qq + (size_t)h * qrow, hd);
    memset(acc[h], 0, sizeof(float) * (size_t)hd);
    M[h] = -INFINITY;
    S[h] = 0;
    if (n_pos[h] > n_max) n_max = n_pos[h];
  }
  const float cap_scale = softcap > 0 ? scale / softcap : 0.0f;
  const uint8_t *kr = kv->k, *vr = kv->v;
  if (vec) {
    enum { CH = PW_ATTN_KVQ_CHUNK };
    _Alignas(64) float scs[PW_ATTN_GROUP_MAX][CH];
    _Alignas(64) float vfc[CH * PW_ATTN_KVQ_MAX_HD];
    int lim[PW_ATTN_GROUP_MAX];
    for (int p0 = 0; p0 < n_max; p0 += CH) {
      const int np = n_max - p0 < CH ? n_max - p0 : CH;
      for (int p = 0; p < np; p++, kr += kv->k_row, vr += kv->v_row) {
        __builtin_prefetch(kr + 8 * kv->k_row);
        __builtin_prefetch(vr + 8 * kv->v_row);
        for (int h = 0; h < nq; h += NX)
          tk->vec_dot(hd, kr, qq + (size_t)h * qrow, qrow, nq - h < NX ? nq - h : NX, s + h);
        for (int h = 0; h < nq; h++) scs[h][p] = kvq_score(s[h], scale, softcap, cap_scale);
        tv->to_float(vr, vfc + (size_t)p * hd, hd);
      }
      for (int h = 0; h < nq; h++) {
        const int nh = n_pos[h] - p0;
        lim[h] = nh < 0 ? 0 : nh < np ? nh : np;
      }
      attn_avx2_kvq_chunk(acc, M, S, scs, vfc, lim, nq, hd, np, v16);
    }
  } else {
    for (int p = 0; p < n_max; p++, kr += kv->k_row, vr += kv->v_row) {
      /* the next rows on their way (the cache streams from memory) */
      __builtin_prefetch(kr + 8 * kv->k_row);
      __builtin_prefetch(vr + 8 * kv->v_row);
      for (int h = 0; h < nq; h += NX) tk->vec_dot(hd, kr, qq + (size_t)h * qrow, qrow, nq - h < NX ? nq - h : NX, s + h);
      tv->to_float(vr, vf, hd);
      for (int h = 0; h < nq; h++) {
        if (p >= n_pos[h]) continue;
        const float sc = kvq_score(s[h], scale, softcap, cap_scale);
        float *a = acc[h], msc = 1.0f, vs = 1.0f;
        if (sc > M[h]) {
          msc = expf(M[h] - sc);
          M[h] = sc;
          if (v16)
            for (int i = 0; i < hd; i++) a[i] = round16(a[i] * msc);
          else
            for (int i = 0; i < hd; i++) a[i] *= msc;
        } else {
          vs = expf(sc - M[h]);
        }
        if (v16)
          for (int i = 0; i < hd; i++) a[i] = round16(fmaf(vf[i], vs, a[i]));
        else
          for (int i = 0; i < hd; i++) a[i] = fmaf(vf[i], vs, a[i]);
        S[h] = S[h] * msc + vs;
      }
    }
  }
  for (int h = 0; h < nq; h++) {
    if (ms) {
      memcpy(out[h], acc[h], sizeof(float) * (size_t)hd);
      ms[2 * h] = M[h];
      ms[2 * h + 1] = S[h];
    } else {
      const float inv = 1.0f / S[h];
      for (int i = 0; i < hd; i++) out[h][i] = acc[h][i] * inv;
    }
  }
}
