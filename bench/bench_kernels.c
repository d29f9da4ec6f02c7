/* bench_kernels.c - microbenchmark of the installed vec_dot kernels against
 * the scalar references: GB/s of weight streamed for a 4096-wide row, with
 * 1 and 4 activation rows per pass. Build:
 *   cc -O2 -Iinclude -Isrc bench/bench_kernels.c -Lbuild -lpower -lm -lpthread */
#include "tensor/dtype.h"
#include "tensor/quants.h"
#include "tensor/traits.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static double run(const pw_traits *t, int64_t n, const void *w, const void *xq, size_t xs, int nx, int rows) {
  size_t wr = (size_t)pw_dtype_row_size(t->dtype, (uint64_t)n);
  float out[4];
  volatile float sink = 0;
  double t0 = now();
  for (int r = 0; r < rows; r++) {
    t->vec_dot(n, (const char *)w + (size_t)(r % 64) * wr, xq, xs, nx, out);
    sink += out[0];
  }
  (void)sink;
  return (now() - t0) / rows * 1e9; /* ns per row pass */
}

int main(void) {
  static const uint32_t types[] = {PW_DT_F16,  PW_DT_Q4_0, PW_DT_Q4_1, PW_DT_Q5_0, PW_DT_Q5_1, PW_DT_Q8_0,
                                   PW_DT_Q2_K, PW_DT_Q3_K, PW_DT_Q4_K, PW_DT_Q5_K, PW_DT_Q6_K};
  const int64_t n = 4096;
  float *x = malloc(sizeof(float) * n * 64);
  for (int64_t i = 0; i < n * 64; i++) x[i] = (float)((i * 7919) % 2001 - 1000) / 500.0f;
  uint8_t *w = malloc((size_t)n * 64 * 4), *xq = malloc((size_t)n * 4 * 4 + 64);
  printf("%-5s %12s %12s %12s %8s\n", "type", "scalar ns", "simd ns", "simd4 ns/tok", "speedup");
  for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
    const pw_traits *t = pw_traits_get(types[i]), *r = pw_traits_ref(types[i]);
    pw_ref_quantize(types[i], x, w, n * 64);
    size_t xs = (size_t)pw_dtype_row_size(t->vec_dot_type, (uint64_t)n);
    for (int j = 0; j < 4; j++) pw_ref_quantize(t->vec_dot_type, x + j * n, xq + j * xs, n);
    double ts = run(r, n, w, xq, xs, 1, 2000);
    double tv = run(t, n, w, xq, xs, 1, 50000);
    double t4 = run(t, n, w, xq, xs, 4, 20000) / 4;
    printf("%-5s %12.0f %12.0f %12.0f %7.1fx\n", t->name, ts, tv, t4, ts / tv);
  }
  return 0;
}
