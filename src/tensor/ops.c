/* ops.c - scalar references for the f32 vector ops and the dispatch
 * wrappers. The AVX2 variants are in arch/ops_avx2.c. */
#include "tensor/ops.h"
#include "tensor/quants.h"

#include "tensor/traits.h"

#include <math.h>
#include <pthread.h>

static void r_rmsnorm(float *y, const float *x, const float *w, int64_t n, float eps) {
  double sum = 0; /* ggml accumulates in double */
  for (int64_t i = 0; i < n; i++) sum += (double)(x[i] * x[i]);
  const float mean = (float)(sum / n);
  const float scale = 1.0f / sqrtf(mean + eps);
  /* two roundings, as ggml's rms_norm followed by a separate mul */
  if (w)
    for (int64_t i = 0; i < n; i++) y[i] = (x[i] * scale) * w[i];
  else
    for (int64_t i = 0; i < n; i++) y[i] = x[i] * scale;
}

static void r_softmax(float *y, const float *x, int64_t n) {
  float max = -INFINITY;
  for (int64_t i = 0; i < n; i++) max = fmaxf(max, x[i]);
  double sum = 0;
  for (int64_t i = 0; i < n; i++) {
    y[i] = expf(x[i] - max);
    sum += (double)y[i];
  }
  const float inv = (float)(1.0 / sum);
  for (int64_t i = 0; i < n; i++) y[i] *= inv;
}

static inline float silu1(float v) { return v / (1.0f + expf(-v)); }

static void r_silu(float *y, const float *x, int64_t n) {
  for (int64_t i = 0; i < n; i++) y[i] = silu1(x[i]);
}
static void r_swiglu(float *out, const float *g, const float *u, int64_t n) {
  for (int64_t i = 0; i < n; i++) out[i] = silu1(g[i]) * u[i];
}
static void r_add(float *y, const float *a, const float *b, int64_t n) {
  for (int64_t i = 0; i < n; i++) y[i] = a[i] + b[i];
}
static void r_mul(float *y, const float *a, const float *b, int64_t n) {
  for (int64_t i = 0; i < n; i++) y[i] = a[i] * b[i];
}
static void r_scale(float *y, const float *x, float s, int64_t n) {
  for (int64_t i = 0; i < n; i++) y[i] = x[i] * s;
}
static float r_dot(int64_t n, const float *a, const float *b) {
  double s = 0;
  for (int64_t i = 0; i < n; i++) s += (double)(a[i] * b[i]);
  return (float)s;
}
static void r_axpy(float *y, float a, const float *x, int64_t n) {
  for (int64_t i = 0; i < n; i++) y[i] += a * x[i];
}

static int64_t r_argmax(const float *x, int64_t n) {
  int64_t best = 0;
  float bv = -INFINITY;
  for (int64_t i = 0; i < n; i++) {
    if (x[i] > bv) { /* strict: ties keep the lowest index; NaN never wins */
      bv = x[i];
      best = i;
    }
  }
  return best;
}
static double r_exp_sum(float *y, const float *x, float mx, float s, int64_t n) {
  double sum = 0;
  for (int64_t i = 0; i < n; i++) {
    y[i] = x[i] > -INFINITY ? expf((x[i] - mx) * s) : 0.0f; /* NaN fails the test too */
    sum += (double)y[i];
  }
  return sum;
}

static const pw_ops g_ref = {r_rmsnorm, r_softmax, r_silu, r_swiglu, r_add,     r_mul,
                             r_scale,   r_dot,     r_axpy, r_argmax, r_exp_sum, "scalar"};
static pw_ops g_ops;

void ops_select(int simd) {
  g_ops = g_ref;
  if (simd) ops_fill_avx2(&g_ops);
}

const pw_ops *pw_ops_get(void) {
  pw_tensor_init();
  return &g_ops;
}
const pw_ops *pw_ops_ref(void) { return &g_ref; }

void pw_rmsnorm(float *y, const float *x, const float *w, int64_t n, float eps) {
  pw_ops_get()->rmsnorm(y, x, w, n, eps);
}
void pw_softmax(float *y, const float *x, int64_t n) { pw_ops_get()->softmax(y, x, n); }
void pw_silu(float *y, const float *x, int64_t n) { pw_ops_get()->silu(y, x, n); }
void pw_swiglu(float *out, const float *gate, const float *up, int64_t n) {
  pw_ops_get()->swiglu(out, gate, up, n);
}
void pw_add(float *y, const float *a, const float *b, int64_t n) { pw_ops_get()->add(y, a, b, n); }
void pw_mul(float *y, const float *a, const float *b, int64_t n) { pw_ops_get()->mul(y, a, b, n); }
void pw_scale(float *y, const float *x, float s, int64_t n) { pw_ops_get()->scale(y, x, s, n); }
float pw_dot_f32(int64_t n, const float *a, const float *b) { return pw_ops_get()->dot(n, a, b); }
void pw_axpy(float *y, float a, const float *x, int64_t n) { pw_ops_get()->axpy(y, a, x, n); }
int64_t pw_argmax_f32(const float *x, int64_t n) { return pw_ops_get()->argmax(x, n); }
double pw_exp_sum(float *y, const float *x, float mx, float s, int64_t n) {
  return pw_ops_get()->exp_sum(y, x, mx, s, n);
}

/* ---- GeGLU as ggml's CPU backend computes it --------------------------------- */

float pw_gelu_tanh(float x) {
  const float a = 0.044715f, s = 0.79788456080286535587989211986876f; /* sqrt(2/pi) */
  return 0.5f * x * (1.0f + tanhf(s * x * (1.0f + a * x * x)));
}

static uint16_t g_gelu16[65536]; /* F16 gelu of every F16 input */
static pthread_once_t g_gelu_once = PTHREAD_ONCE_INIT;

static void gelu_table_init(void) {
  for (uint32_t i = 0; i < 65536; i++) g_gelu16[i] = pw_fp32_to_fp16(pw_gelu_tanh(pw_fp16_to_fp32((uint16_t)i)));
}

void pw_gelu(float *y, const float *x, int64_t n) {
  pthread_once(&g_gelu_once, gelu_table_init);
  for (int64_t i = 0; i < n; i++) {
    const float v = x[i];
    y[i] = v <= -10.0f ? 0.0f : v >= 10.0f ? v : pw_fp16_to_fp32(g_gelu16[pw_fp32_to_fp16(v)]);
  }
}

void pw_layernorm(float *y, const float *x, const float *w, const float *b, int64_t n, float eps) {
  double sum = 0;
  for (int64_t i = 0; i < n; i++) sum += x[i];
  const float mean = (float)(sum / (double)n);
  double sum2 = 0;
  for (int64_t i = 0; i < n; i++) {
    const float v = x[i] - mean;
    y[i] = v;
    sum2 += (double)(v * v);
  }
  const float scale = 1.0f / sqrtf((float)(sum2 / (double)n) + eps);
  for (int64_t i = 0; i < n; i++) {
    float v = y[i] * scale;
    if (w) v *= w[i];
    if (b) v += b[i];
    y[i] = v;
  }
}

void pw_geglu(float *out, const float *gate, const float *up, int64_t n) {
  pthread_once(&g_gelu_once, gelu_table_init);
  for (int64_t i = 0; i < n; i++) {
    const float x = gate[i];
    if (x <= -10.0f)
      out[i] = 0.0f;
    else if (x >= 10.0f)
      out[i] = x * up[i];
    else
      out[i] = pw_fp16_to_fp32(g_gelu16[pw_fp32_to_fp16(x)]) * up[i];
  }
}
