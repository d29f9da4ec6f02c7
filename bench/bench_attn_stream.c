/* bench_attn_stream.c - a decode step's attention over every layer of a
 * long context, split over the kernel pool as the model runs it: per
 * layer, work items (KV head, span of PW_ATTN_SPLIT positions) taken from
 * a shared counter, each one call of the long kernel (the Qwen2.5-0.5B
 * shape: 7 query heads per KV head, head size 64). Two runs alternate:
 *   "memory": every layer has a cache of its own (at 16K depth and 24
 *   layers, 201 MB of F16 K and V: from memory, as in the model);
 *   "cached": every layer reads layer 0's cache (resident in L2/L3),
 * so the difference is what the reads from memory add to the step. Set
 * against their transfer time at the machine's bandwidth (power bench
 * --bandwidth), it says how much of them overlap with the arithmetic
 * (none: memory = cached + bytes / bandwidth; all: memory = max(cached,
 * bytes / bandwidth)). The fold of the span states is left out (it is the
 * same in both). Prints the medians and the least of each.
 *
 *   build/bench_attn_stream [DEPTH [LAYERS [THREADS [ROUNDS [STEPS]]]]]
 *   (default 16384 24 2 5 10)
 */
#include "base/clock.h"
#include "base/mem.h"
#include "base/pool.h"
#include "tensor/attn.h"
#include "tensor/dtype.h"
#include "tensor/traits.h"

#include <math.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { HD = 64, GQA = 7, KVH = 2 };

static uint64_t g_rng = 11;
static float frand(void) {
  g_rng = g_rng * 6364136223846793005ull + 1442695040888963407ull;
  return (float)((double)(g_rng >> 11) * 0x1.0p-53 * 2.0 - 1.0);
}

typedef struct {
  uint16_t **k, **v; /* per layer: [KVH][depth] rows of HD */
  int depth, layers, cached;
  const float *q; /* [layers][KVH * GQA][HD] */
  float *out, *ms; /* per item: [GQA][HD] and [GQA][2] */
  pw_attn_part_fn part;
  int layer;
  _Atomic long next;
} job;

static void worker(void *ctx, int ith, int nth) {
  job *j = ctx;
  (void)ith;
  (void)nth;
  const int spans = pw_attn_spans(j->depth + 1);
  const long items = (long)KVH * spans;
  const int l = j->cached ? 0 : j->layer;
  const float scale = 1.0f / sqrtf((float)HD);
  for (long w; (w = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed)) < items;) {
    const int hk = (int)(w / spans), si = (int)(w % spans), p0 = si * PW_ATTN_SPLIT;
    const int n = j->depth + 1 - p0 < PW_ATTN_SPLIT ? j->depth + 1 - p0 : PW_ATTN_SPLIT;
    const float *qp[GQA];
    float *op[GQA];
    int np[GQA];
    for (int i = 0; i < GQA; i++) {
      qp[i] = j->q + ((size_t)j->layer * KVH * GQA + (size_t)hk * GQA + (size_t)i) * HD;
      op[i] = j->out + ((size_t)w * GQA + (size_t)i) * HD;
      np[i] = n;
    }
    const size_t row0 = (size_t)hk * (size_t)(j->depth + 1) + (size_t)p0;
    j->part(qp, np, GQA, j->k[l] + row0 * HD, j->v[l] + row0 * HD, HD, HD, scale, op, j->ms + (size_t)w * GQA * 2);
  }
}

/* one decode step over every layer: seconds */
static double step(pw_pool *pool, job *j, int cached) {
  j->cached = cached;
  const double t0 = pw_now_s();
  for (int l = 0; l < j->layers; l++) {
    j->layer = l;
    atomic_store(&j->next, 0);
    pw_pool_run(pool, worker, j);
  }
  return pw_now_s() - t0;
}

static int cmp_double(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
  const int depth = argc > 1 ? atoi(argv[1]) : 16384, layers = argc > 2 ? atoi(argv[2]) : 24,
            threads = argc > 3 ? atoi(argv[3]) : 2, rounds = argc > 4 ? atoi(argv[4]) : 5,
            steps = argc > 5 ? atoi(argv[5]) : 10;
  if (depth <= PW_ATTN_LONG || depth > (1 << 20) || layers < 1 || layers > 256 || threads < 1 || threads > 64 ||
      rounds < 1 || rounds > 100 || steps < 1 || steps > 100) {
    fprintf(stderr, "usage: bench_attn_stream [DEPTH (> %d) [LAYERS [THREADS [ROUNDS [STEPS]]]]]\n", PW_ATTN_LONG);
    return 2;
  }
  const size_t rows = (size_t)KVH * (size_t)(depth + 1), bytes = rows * HD * sizeof(uint16_t);
  job j = {0};
  j.depth = depth;
  j.layers = layers;
  j.part = pw_attn_part_long_get();
  j.k = calloc((size_t)layers, sizeof *j.k);
  j.v = calloc((size_t)layers, sizeof *j.v);
  const int spans = pw_attn_spans(depth + 1);
  float *q = malloc(sizeof(float) * (size_t)layers * KVH * GQA * HD);
  j.out = malloc(sizeof(float) * (size_t)KVH * spans * GQA * HD);
  j.ms = malloc(sizeof(float) * (size_t)KVH * spans * GQA * 2);
  pw_pool *pool = pw_pool_create(threads);
  if (!j.k || !j.v || !q || !j.out || !j.ms || !pool) {
    fprintf(stderr, "bench_attn_stream: out of memory\n");
    return 1;
  }
  for (size_t i = 0; i < (size_t)layers * KVH * GQA * HD; i++) q[i] = frand() * 3;
  j.q = q;
  /* F16 K and V with the values of a real cache's range, written once
   * (layer 0) and copied to the other layers */
  const pw_traits *f16 = pw_traits_get(PW_DT_F16);
  for (int l = 0; l < layers; l++) {
    j.k[l] = pw_alloc_huge(bytes);
    j.v[l] = pw_alloc_huge(bytes);
    if (!j.k[l] || !j.v[l]) {
      fprintf(stderr, "bench_attn_stream: out of memory\n");
      return 1;
    }
    if (l) {
      memcpy(j.k[l], j.k[0], bytes);
      memcpy(j.v[l], j.v[0], bytes);
      continue;
    }
    float row[HD];
    for (size_t r = 0; r < rows; r++) {
      for (int i = 0; i < HD; i++) row[i] = frand() * 2;
      f16->from_float(row, j.k[0] + r * HD, HD);
      for (int i = 0; i < HD; i++) row[i] = frand();
      f16->from_float(row, j.v[0] + r * HD, HD);
    }
  }
  printf("decode-step attention at depth %d: %d layers x %d KV heads x %d query heads, head size %d, %d threads, "
         "%s kernels; %.1f MB of K+V a step\n",
         depth, layers, KVH, GQA, HD, threads, pw_tensor_kernels(), 2.0 * bytes * layers / 1e6);
  printf("| round | memory ms (median, least) | cached ms (median, least) | added by memory ms | GB/s of the added time |\n"
         "| --- | ---: | ---: | ---: | ---: |\n");
  double tm[100], tc[100]; /* steps <= 100 */
  step(pool, &j, 0);
  step(pool, &j, 1);
  for (int r = 0; r < rounds; r++) {
    /* interleaved, so a change in the machine's state reaches both */
    for (int s = 0; s < steps; s++) {
      tm[s] = step(pool, &j, 0);
      tc[s] = step(pool, &j, 1);
    }
    qsort(tm, (size_t)steps, sizeof *tm, cmp_double);
    qsort(tc, (size_t)steps, sizeof *tc, cmp_double);
    const double dm = tm[steps / 2] - tc[steps / 2];
    printf("| %d | %.2f, %.2f | %.2f, %.2f | %.2f | %.1f |\n", r + 1, tm[steps / 2] * 1e3, tm[0] * 1e3,
           tc[steps / 2] * 1e3, tc[0] * 1e3, dm * 1e3, dm > 0 ? 2.0 * bytes * layers / dm / 1e9 : 0.0);
  }
  for (int l = 0; l < layers; l++) {
    free(j.k[l]);
    free(j.v[l]);
  }
  pw_pool_destroy(pool);
  free(j.k);
  free(j.v);
  free(q);
  free(j.out);
  free(j.ms);
  return 0;
}
