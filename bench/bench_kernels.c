/* bench_kernels.c - microbenchmark of the vec_dot kernels of every
 * implementation level the CPU has (scalar, avx2, avx2vnni, avx512vnni): GB/s of
 * weight bytes streamed per core for 4096-wide rows (BENCH_N=896 in the
 * environment: 896-wide, as in a 0.5B model; types whose blocks do not
 * divide the width are left out), with 1 activation row
 * per pass (decode) and PW_VEC_DOT_MAX_NX rows per pass (batched decode,
 * prefill; weight bytes counted once per token, so it reads as "effective"
 * GB/s). 64 weight rows (in L2) are cycled so this measures the kernel, not
 * DRAM. Each figure is the median of several repetitions, levels
 * interleaved, timed in thread CPU time because the machine may be shared.
 *   build/bench_kernels [type ...]   e.g. build/bench_kernels Q5_0 Q8_0
 * The tiled gemm path's packed activations are cache-line aligned, as the
 * model's scratch is. The last table is decode's own shape: one token
 * against four rows far apart (four streams), for the types that have it. */
#include "tensor/dtype.h"
#include "tensor/quants.h"
#include "tensor/traits.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define REPS 7
#define ROWS 64

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ns per pass over one weight row */
static double run(const pw_traits *t, int64_t n, const void *w, const void *xq, size_t xs, int nx, int passes) {
  const size_t wr = (size_t)pw_dtype_row_size(t->dtype, (uint64_t)n);
  float out[PW_VEC_DOT_MAX_NX];
  volatile float sink = 0;
  const double t0 = now();
  for (int r = 0; r < passes; r++) {
    t->vec_dot(n, (const char *)w + (size_t)(r % ROWS) * wr, xq, xs, nx, out);
    sink += out[0];
  }
  (void)sink;
  return (now() - t0) / passes * 1e9;
}

/* ns per weight row of the tiled gemm path (what pw_matmul takes for the
 * types that have one): all ROWS rows against nt packed activation rows */
static double run_gemm(const pw_traits *t, int64_t n, const void *w, const void *xp, int nt,
                       unsigned flags, int passes) {
  const size_t wr = (size_t)pw_dtype_row_size(t->dtype, (uint64_t)n);
  static float y[ROWS * 32]; /* up to 32 tokens */
  volatile float sink = 0;
  const double t0 = now();
  for (int r = 0; r < passes; r++) {
    t->gemm(n, w, wr, ROWS, 0, xp, nt, y, ROWS, flags);
    sink += y[r % ROWS];
  }
  (void)sink;
  return (now() - t0) / passes / ROWS * 1e9;
}

/* ns per weight row of decode's one-token pass where the type has one:
 * four streams (traits.h) of ROWS / 4 rows, through the gemm (gemm: xq
 * packed for it) or vec_dot4 (xq in the vec_dot type) */
static double run_streams(const pw_traits *t, int gemm, int64_t n, const void *w, const void *xq, int passes) {
  const size_t wr = (size_t)pw_dtype_row_size(t->dtype, (uint64_t)n);
  const int seg = ROWS / PW_GEMM_STREAMS;
  static float y[ROWS];
  float out[PW_GEMM_STREAMS];
  volatile float sink = 0;
  const double t0 = now();
  for (int r = 0; r < passes; r++) {
    if (gemm) {
      t->gemm(n, w, wr, seg, (size_t)seg, xq, 1, y, ROWS, 0);
      sink += y[r % ROWS];
    } else {
      for (int v = 0; v < seg; v++) t->vec_dot4(n, (const char *)w + (size_t)v * wr, (size_t)seg * wr, xq, out);
      sink += out[0];
    }
  }
  (void)sink;
  return (now() - t0) / passes / ROWS * 1e9;
}

/* no type arguments: every type; else the named ones */
static int wanted(int argc, char **argv, const char *name) {
  if (argc <= 1) return 1;
  for (int a = 1; a < argc; a++)
    if (strcmp(argv[a], name) == 0) return 1;
  return 0;
}

static int cmp_d(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
  static const uint32_t types[] = {PW_DT_F16,  PW_DT_Q4_0, PW_DT_Q4_1, PW_DT_Q5_0, PW_DT_Q5_1, PW_DT_Q8_0,
                                   PW_DT_Q2_K, PW_DT_Q3_K, PW_DT_Q4_K, PW_DT_Q5_K, PW_DT_Q6_K,
                                   PW_DT_IQ4_NL, PW_DT_IQ4_XS, PW_DT_MXFP4};
  static const char *lvl_name[PW_IMPL_COUNT] = {"scalar", "avx2", "avx2vnni", "avx512"};
  const int64_t n = getenv("BENCH_N") ? atoll(getenv("BENCH_N")) : 4096;
  if (n < 32 || n % 32) {
    fprintf(stderr, "bench_kernels: BENCH_N must be a positive multiple of 32\n");
    return 2;
  }
  const int nxm = PW_VEC_DOT_MAX_NX;
  float *x = malloc(sizeof(float) * n * ROWS);
  uint8_t *w = malloc((size_t)n * ROWS * 4), *xq = malloc((size_t)n * 4 * nxm + 64);
  if (!x || !w || !xq) return 1;
  for (int64_t i = 0; i < n * ROWS; i++) x[i] = (float)((i * 7919) % 2001 - 1000) / 500.0f;
  printf("GB/s of weight bytes per core, n=%lld, median of %d; nx=%d counts weight bytes once per token\n",
         (long long)n, REPS, nxm);
  printf("%-5s", "type");
  for (int l = 0; l < PW_IMPL_COUNT; l++)
    if (pw_traits_get_impl(PW_DT_Q8_0, l)) printf(" %9s-1 %9s-%d", lvl_name[l], lvl_name[l], nxm);
  printf("\n");
  for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
    const pw_traits *t = pw_traits_get(types[i]);
    if (!wanted(argc, argv, t->name) || n % t->blck) continue;
    pw_ref_quantize(types[i], x, w, n * ROWS);
    const size_t xs = (size_t)pw_dtype_row_size(t->vec_dot_type, (uint64_t)n);
    const double wbytes = (double)pw_dtype_row_size(t->dtype, (uint64_t)n);
    for (int j = 0; j < nxm; j++) pw_ref_quantize(t->vec_dot_type, x + j * n, xq + j * xs, n);
    double res[PW_IMPL_COUNT][2][REPS];
    for (int r = 0; r < REPS; r++)
      for (int l = 0; l < PW_IMPL_COUNT; l++) {
        const pw_traits *tl = pw_traits_get_impl(types[i], l);
        if (!tl) continue;
        const int passes = l == PW_IMPL_SCALAR ? 300 : 5000;
        res[l][0][r] = run(tl, n, w, xq, xs, 1, passes);
        res[l][1][r] = run(tl, n, w, xq, xs, nxm, passes / 2) / nxm;
      }
    printf("%-5s", t->name);
    for (int l = 0; l < PW_IMPL_COUNT; l++) {
      if (!pw_traits_get_impl(types[i], l)) continue;
      for (int k = 0; k < 2; k++) {
        qsort(res[l][k], REPS, sizeof(double), cmp_d);
        printf(" %11.2f", wbytes / res[l][k][REPS / 2]);
      }
    }
    printf("\n");
  }
  /* the gemm path: one token streamed (one row at a time), one token
   * resident (4-row tiles), then 4, 5 and nxm tokens (a verification pass
   * of 1 + K tokens takes these shapes), and 32 (a prefill's shape) */
  static const int gemm_nt[] = {1, 1, 4, 5, PW_VEC_DOT_MAX_NX, 32};
  enum { NG = sizeof gemm_nt / sizeof gemm_nt[0] };
  printf("\ngemm path, same units: %-8s %9s %9s %9s %9s %9s %9s\n", "level", "1", "1-res", "4", "5", "8", "32");
  for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
    const pw_traits *t = pw_traits_get(types[i]);
    if (!t->gemm) continue;
    if (!wanted(argc, argv, t->name) || n % t->blck) continue;
    pw_ref_quantize(types[i], x, w, n * ROWS);
    const double wbytes = (double)pw_dtype_row_size(t->dtype, (uint64_t)n);
    /* the packed layout may depend on the token count: one pack per pass */
    const size_t xps = t->gemm_xrow(n);
    uint8_t *xp[NG];
    for (int k = 0; k < NG; k++) {
      xp[k] = aligned_alloc(64, (xps * (size_t)gemm_nt[k] + 63) / 64 * 64);
      if (!xp[k]) return 1;
      for (int j = 0; j < gemm_nt[k]; j++) t->gemm_pack(x + j * n, xp[k], n, j, gemm_nt[k]);
    }
    double res[NG][REPS];
    for (int r = 0; r < REPS; r++)
      for (int k = 0; k < NG; k++)
        res[k][r] = run_gemm(t, n, w, xp[k], gemm_nt[k], k == 1 ? PW_GEMM_RESIDENT : 0, 100 / gemm_nt[k] + 20) /
                    gemm_nt[k];
    printf("%-5s %25s", t->name, lvl_name[pw_tensor_level()]);
    for (int k = 0; k < NG; k++) {
      qsort(res[k], REPS, sizeof(double), cmp_d);
      printf(" %9.2f", wbytes / res[k][REPS / 2]);
    }
    printf("\n");
    for (int k = 0; k < NG; k++) free(xp[k]);
  }
  /* decode's shape: one token, four rows far apart at a time (matmul.c);
   * the gemm path's "1" column above is the one-row-at-a-time shape that
   * short matrices keep */
  printf("\none token, four streams: %-8s %9s %9s\n", "level", "gemm", "vec_dot4");
  for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
    const pw_traits *t = pw_traits_get(types[i]);
    if ((!t->gemm && !t->vec_dot4) || !wanted(argc, argv, t->name) || n % t->blck) continue;
    pw_ref_quantize(types[i], x, w, n * ROWS);
    printf("%-5s %27s", t->name, lvl_name[pw_tensor_level()]);
    /* both paths where the type has both (levels in turn, as above) */
    for (int g = 1; g >= 0; g--) {
      if (!(g ? t->gemm != NULL : t->vec_dot4 != NULL)) {
        printf(" %9s", "-");
        continue;
      }
      const size_t xsz = g ? t->gemm_xrow(n) : (size_t)pw_dtype_row_size(t->vec_dot_type, (uint64_t)n);
      uint8_t *xs4 = aligned_alloc(64, (xsz + 63) / 64 * 64);
      if (!xs4) return 1;
      if (g) t->gemm_pack(x, xs4, n, 0, 1);
      else pw_ref_quantize(t->vec_dot_type, x, xs4, n);
      double res[REPS];
      for (int r = 0; r < REPS; r++) res[r] = run_streams(t, g, n, w, xs4, 120);
      qsort(res, REPS, sizeof(double), cmp_d);
      printf(" %9.2f", (double)pw_dtype_row_size(t->dtype, (uint64_t)n) / res[REPS / 2]);
      free(xs4);
    }
    printf("\n");
  }
  free(x);
  free(w);
  free(xq);
  return 0;
}
