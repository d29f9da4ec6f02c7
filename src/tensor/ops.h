/* ops.h - elementwise and reduction kernels on f32 vectors used by the
 * forward pass and the sampler: RMS norm, softmax, SiLU/SwiGLU, add, mul,
 * scale, dot, axpy, argmax, exp_sum.
 * Each has a scalar reference (pw_ops_ref) and, where it pays, an AVX2
 * variant installed by pw_tensor_init (traits.h). Numerics follow ggml
 * (double accumulation in rmsnorm and softmax sums). Not thread-parallel:
 * callers split work. Pointers are borrowed; outputs may alias inputs
 * exactly (y == x) but must not partially overlap. Nothing allocates. */
#ifndef PW_TENSOR_OPS_H
#define PW_TENSOR_OPS_H

#include <stdint.h>

typedef struct pw_ops {
  /* y[i] = (x[i] * (1/sqrtf(mean(x^2) + eps))) * w[i]; w may be NULL. */
  void (*rmsnorm)(float *y, const float *x, const float *w, int64_t n, float eps);
  /* y = exp(x - max) / sum; n >= 1; -INFINITY entries give 0. */
  void (*softmax)(float *y, const float *x, int64_t n);
  /* y[i] = x[i] / (1 + exp(-x[i])) */
  void (*silu)(float *y, const float *x, int64_t n);
  /* out[i] = silu(gate[i]) * up[i] */
  void (*swiglu)(float *out, const float *gate, const float *up, int64_t n);
  void (*add)(float *y, const float *a, const float *b, int64_t n);
  void (*mul)(float *y, const float *a, const float *b, int64_t n);
  void (*scale)(float *y, const float *x, float s, int64_t n);
  float (*dot)(int64_t n, const float *a, const float *b);
  /* y[i] += a * x[i] */
  void (*axpy)(float *y, float a, const float *x, int64_t n);
  /* Index of the first maximum; NaN never wins; 0 when no element is above
   * -inf or n <= 0. */
  int64_t (*argmax)(const float *x, int64_t n);
  /* y[i] = exp((x[i] - mx) * s), exactly 0 for NaN and -inf x[i]; returns
   * the sum of y in double. mx finite and >= every x[i], s > 0. */
  double (*exp_sum)(float *y, const float *x, float mx, float s, int64_t n);
  const char *impl; /* "scalar" or "avx2" */
} pw_ops;

/* The installed (fastest) table and the scalar references. Static. */
const pw_ops *pw_ops_get(void);
const pw_ops *pw_ops_ref(void);

/* Convenience wrappers over pw_ops_get(). */
void pw_rmsnorm(float *y, const float *x, const float *w, int64_t n, float eps);
void pw_softmax(float *y, const float *x, int64_t n);
void pw_silu(float *y, const float *x, int64_t n);
void pw_swiglu(float *out, const float *gate, const float *up, int64_t n);
void pw_add(float *y, const float *a, const float *b, int64_t n);
void pw_mul(float *y, const float *a, const float *b, int64_t n);
void pw_scale(float *y, const float *x, float s, int64_t n);
float pw_dot_f32(int64_t n, const float *a, const float *b);
void pw_axpy(float *y, float a, const float *x, int64_t n);
int64_t pw_argmax_f32(const float *x, int64_t n);
double pw_exp_sum(float *y, const float *x, float mx, float s, int64_t n);

/* out = gelu(gate) * up as ggml computes it on the CPU: gate rounded to F16
 * and looked up in a table of F16 gelu values (tanh form), 0 below -10 and
 * gate itself above 10. out may be gate. */
void pw_geglu(float *out, const float *gate, const float *up, int64_t n);
/* The tanh form of gelu in f32 (ggml's formula; the table's source). */
float pw_gelu_tanh(float x);
/* y = gelu(x) through the same F16 table (ggml's CPU gelu); y may be x. */
void pw_gelu(float *y, const float *x, int64_t n);
/* Layer normalization of one row: (x - mean) / sqrt(var + eps) * w + b,
 * mean and variance summed in double as ggml's norm (w, b may be NULL). */
void pw_layernorm(float *y, const float *x, const float *w, const float *b, int64_t n, float eps);

/* Internal: called once by pw_tensor_init. */
void ops_select(int simd);
void ops_fill_avx2(pw_ops *t);

#endif
