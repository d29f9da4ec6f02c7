/* ops_avx2.c - AVX2/FMA variants of the f32 vector ops (ops.h). Compiled
 * with -mavx2 -mfma -mf16c and only called after pw_tensor_init saw those
 * features. exp is a Cephes-style polynomial (within a few ulp of expf;
 * inputs below -86.5 give 0), so silu/softmax/exp_sum differ from the scalar
 * references by a few ulp, as ggml's vectorized exp does from expf. */
#include "tensor/ops.h"

#include "tensor/arch/exp_avx2.h"

#include <immintrin.h>
#include <math.h>

static inline float hsum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

static inline double hsum4d(__m256d v) {
  __m128d s = _mm_add_pd(_mm256_castpd256_pd128(v), _mm256_extractf128_pd(v, 1));
  s = _mm_add_sd(s, _mm_unpackhi_pd(s, s));
  return _mm_cvtsd_f64(s);
}

static inline __m256 silu8(__m256 x) {
  __m256 e = exp8(_mm256_sub_ps(_mm256_setzero_ps(), x));
  return _mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1.0f), e));
}

static inline float silu1(float v) { return v / (1.0f + expf(-v)); }

/* adds the 8 floats of v to two double accumulators */
static inline void acc_d(__m256d *a0, __m256d *a1, __m256 v) {
  *a0 = _mm256_add_pd(*a0, _mm256_cvtps_pd(_mm256_castps256_ps128(v)));
  *a1 = _mm256_add_pd(*a1, _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)));
}

static void v_rmsnorm(float *y, const float *x, const float *w, int64_t n, float eps) {
  __m256d a0 = _mm256_setzero_pd(), a1 = _mm256_setzero_pd();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 v = _mm256_loadu_ps(x + i);
    acc_d(&a0, &a1, _mm256_mul_ps(v, v));
  }
  double sum = hsum4d(_mm256_add_pd(a0, a1));
  for (; i < n; i++) sum += (double)(x[i] * x[i]);
  const float mean = (float)(sum / n);
  const float scale = 1.0f / sqrtf(mean + eps);
  __m256 vs = _mm256_set1_ps(scale);
  i = 0;
  if (w) {
    for (; i + 8 <= n; i += 8)
      _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(x + i), vs), _mm256_loadu_ps(w + i)));
    for (; i < n; i++) y[i] = (x[i] * scale) * w[i];
  } else {
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), vs));
    for (; i < n; i++) y[i] = x[i] * scale;
  }
}

static void v_softmax(float *y, const float *x, int64_t n) {
  __m256 vm = _mm256_set1_ps(-INFINITY);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) vm = _mm256_max_ps(vm, _mm256_loadu_ps(x + i));
  __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(vm), _mm256_extractf128_ps(vm, 1));
  m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
  m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
  float max = _mm_cvtss_f32(m4);
  for (; i < n; i++) max = fmaxf(max, x[i]);
  __m256 vmax = _mm256_set1_ps(max);
  __m256d a0 = _mm256_setzero_pd(), a1 = _mm256_setzero_pd();
  for (i = 0; i + 8 <= n; i += 8) {
    __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i), vmax));
    _mm256_storeu_ps(y + i, e);
    acc_d(&a0, &a1, e);
  }
  double sum = hsum4d(_mm256_add_pd(a0, a1));
  for (; i < n; i++) {
    y[i] = expf(x[i] - max);
    sum += (double)y[i];
  }
  const float inv = (float)(1.0 / sum);
  __m256 vi = _mm256_set1_ps(inv);
  for (i = 0; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_loadu_ps(y + i), vi));
  for (; i < n; i++) y[i] *= inv;
}

static void v_silu(float *y, const float *x, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, silu8(_mm256_loadu_ps(x + i)));
  for (; i < n; i++) y[i] = silu1(x[i]);
}

static void v_swiglu(float *out, const float *g, const float *u, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(out + i, _mm256_mul_ps(silu8(_mm256_loadu_ps(g + i)), _mm256_loadu_ps(u + i)));
  for (; i < n; i++) out[i] = silu1(g[i]) * u[i];
}

static void v_add(float *y, const float *a, const float *b, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_add_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i)));
  for (; i < n; i++) y[i] = a[i] + b[i];
}

static void v_mul(float *y, const float *a, const float *b, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i)));
  for (; i < n; i++) y[i] = a[i] * b[i];
}

static void v_scale(float *y, const float *x, float s, int64_t n) {
  __m256 vs = _mm256_set1_ps(s);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), vs));
  for (; i < n; i++) y[i] = x[i] * s;
}

static float v_dot(int64_t n, const float *a, const float *b) {
  __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
    s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), s1);
    s2 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 16), _mm256_loadu_ps(b + i + 16), s2);
    s3 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 24), _mm256_loadu_ps(b + i + 24), s3);
  }
  for (; i + 8 <= n; i += 8) s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
  float s = hsum8(_mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
  for (; i < n; i++) s += a[i] * b[i];
  return s;
}

static void v_axpy(float *y, float a, const float *x, int64_t n) {
  __m256 va = _mm256_set1_ps(a);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
  for (; i < n; i++) y[i] += a * x[i];
}

/* Each lane keeps the first maximum of its own elements (strict >, so NaN
 * never wins and a lane's ties keep its earlier index); the answer is then
 * the lowest index among lanes holding the overall maximum, which is the
 * first maximum. Four accumulators hide the compare latency. Lane indices
 * are int32, so longer vectors go in chunks. */
#define ARGMAX_CHUNK ((int64_t)1 << 30)

#define ARGMAX_STEP(v, b, c, off)                                                                  \
  do {                                                                                             \
    __m256 a = _mm256_loadu_ps(x + i + (off));                                                     \
    __m256 gt = _mm256_cmp_ps(a, v, _CMP_GT_OQ);                                                   \
    v = _mm256_blendv_ps(v, a, gt);                                                                \
    b = _mm256_castps_si256(_mm256_blendv_ps(_mm256_castsi256_ps(b), _mm256_castsi256_ps(c), gt)); \
    c = _mm256_add_epi32(c, step);                                                                 \
  } while (0)

static int64_t argmax_chunk(const float *x, int64_t n, float *out) {
  const __m256 ninf = _mm256_set1_ps(-INFINITY);
  __m256 v0 = ninf, v1 = ninf, v2 = ninf, v3 = ninf;
  __m256i b0 = _mm256_setzero_si256(), b1 = b0, b2 = b0, b3 = b0;
  __m256i c0 = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  __m256i c1 = _mm256_add_epi32(c0, _mm256_set1_epi32(8)), c2 = _mm256_add_epi32(c0, _mm256_set1_epi32(16)),
          c3 = _mm256_add_epi32(c0, _mm256_set1_epi32(24));
  const __m256i step = _mm256_set1_epi32(32);
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    ARGMAX_STEP(v0, b0, c0, 0);
    ARGMAX_STEP(v1, b1, c1, 8);
    ARGMAX_STEP(v2, b2, c2, 16);
    ARGMAX_STEP(v3, b3, c3, 24);
  }
  float vv[32];
  int32_t bb[32];
  _mm256_storeu_ps(vv, v0);
  _mm256_storeu_ps(vv + 8, v1);
  _mm256_storeu_ps(vv + 16, v2);
  _mm256_storeu_ps(vv + 24, v3);
  _mm256_storeu_si256((__m256i *)bb, b0);
  _mm256_storeu_si256((__m256i *)(bb + 8), b1);
  _mm256_storeu_si256((__m256i *)(bb + 16), b2);
  _mm256_storeu_si256((__m256i *)(bb + 24), b3);
  float bv = -INFINITY;
  int64_t best = 0;
  for (int k = 0; k < 32; k++) {
    if (vv[k] > bv || (vv[k] == bv && bb[k] < best)) {
      bv = vv[k];
      best = bb[k];
    }
  }
  for (; i < n; i++) { /* after every lane's elements: strict > keeps the first */
    if (x[i] > bv) {
      bv = x[i];
      best = i;
    }
  }
  *out = bv;
  return best;
}
#undef ARGMAX_STEP

static int64_t v_argmax(const float *x, int64_t n) {
  int64_t best = 0;
  float bv = -INFINITY;
  for (int64_t base = 0; base < n; base += ARGMAX_CHUNK) {
    float v;
    int64_t k = argmax_chunk(x + base, n - base < ARGMAX_CHUNK ? n - base : ARGMAX_CHUNK, &v);
    if (v > bv) {
      bv = v;
      best = base + k;
    }
  }
  return best;
}

/* (x - mx) * s <= 0, so exp8_nonpos serves; NaN and -inf x are masked to 0
 * after it. Pairs of results are added in float before the conversion to
 * double, which halves the conversions. */
static inline __m256 exp_sum8(float *y, const float *x, __m256 vm, __m256 vs) {
  __m256 v = _mm256_loadu_ps(x);
  __m256 e = exp8_nonpos(_mm256_mul_ps(_mm256_sub_ps(v, vm), vs));
  e = _mm256_and_ps(e, _mm256_cmp_ps(v, _mm256_set1_ps(-INFINITY), _CMP_GT_OQ));
  _mm256_storeu_ps(y, e);
  return e;
}

static double v_exp_sum(float *y, const float *x, float mx, float s, int64_t n) {
  const __m256 vm = _mm256_set1_ps(mx), vs = _mm256_set1_ps(s);
  __m256d a0 = _mm256_setzero_pd(), a1 = _mm256_setzero_pd();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m256 e = exp_sum8(y + i, x + i, vm, vs), f = exp_sum8(y + i + 8, x + i + 8, vm, vs);
    acc_d(&a0, &a1, _mm256_add_ps(e, f));
  }
  for (; i + 8 <= n; i += 8) acc_d(&a0, &a1, exp_sum8(y + i, x + i, vm, vs));
  double sum = hsum4d(_mm256_add_pd(a0, a1));
  for (; i < n; i++) {
    y[i] = x[i] > -INFINITY ? expf((x[i] - mx) * s) : 0.0f;
    sum += (double)y[i];
  }
  return sum;
}

void ops_fill_avx2(pw_ops *t) {
  t->rmsnorm = v_rmsnorm;
  t->softmax = v_softmax;
  t->silu = v_silu;
  t->swiglu = v_swiglu;
  t->add = v_add;
  t->mul = v_mul;
  t->scale = v_scale;
  t->dot = v_dot;
  t->axpy = v_axpy;
  t->argmax = v_argmax;
  t->exp_sum = v_exp_sum;
  t->impl = "avx2";
}
