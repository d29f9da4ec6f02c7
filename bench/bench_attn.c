/* bench_attn.c - one decode step's attention at depth, kernel by kernel:
 * the query heads of a GQA group (7 per KV head, head size 64: the
 * Qwen2.5-0.5B shape) over D cached positions of each KV head, as
 * (a) the unsplit F16 kernel over the whole prefix (what a decode step ran
 * before the split), (b) the split: spans of PW_ATTN_SPLIT positions with
 * the span kernel and the fold in span order, (b') the same with the long
 * prefixes' kernel (f32 accumulator: what runs past PW_ATTN_LONG), and (c)
 * the kernel for quantized caches with each K/V type. Prints the time per step (median
 * of the repetitions, one thread) and the bytes of K/V each reads; under
 * `valgrind --tool=callgrind` the instruction counts of each part can be
 * compared (toggle-collect on bench_one).
 *
 *   build/bench_attn [DEPTH [KV_HEADS [REPS [TOKENS [ROW]]]]]   (default 4096 2 5 1)
 *
 * TOKENS > 1: a prefill chunk of that many tokens at the depth instead of
 * a decode step; ROW: only the row of that name ("f16 split"). */
#include "base/mem.h"
#include "base/clock.h"
#include "tensor/attn.h"
#include "tensor/dtype.h"
#include "tensor/quants.h"
#include "tensor/traits.h"

#include <math.h>
#include <stdio.h>
#include <time.h>
#include <stdlib.h>
#include <string.h>

enum { HD = 64, GQA = 7 };

static uint64_t g_rng = 7;
static float frand(void) {
  g_rng = g_rng * 6364136223846793005ull + 1442695040888963407ull;
  return (float)((double)(g_rng >> 11) * 0x1.0p-53 * 2.0 - 1.0);
}

/* the thread's CPU time: on a shared machine it leaves out the time other
 * processes held the core (the wall-clock median is printed beside it) */
static double cpu_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

typedef struct cache {
  uint32_t tk, tv;
  size_t rk, rv;
  uint8_t *k, *v; /* [kv_heads][depth] rows */
} cache;

/* kind 0: unsplit F16; 1: split F16; 2: quantized-cache kernel (split);
 * 3: split F16 with the long prefixes' kernel (what a prefix of more than
 * PW_ATTN_LONG positions takes; the others are timed as they would run at
 * that depth before it).
 * T new tokens (T = 1: a decode step) in groups of G tokens, as the model
 * batches them: one kernel call holds a group's G x GQA queries for one KV
 * head (and one span); token t sees depth + t positions. */
__attribute__((noinline)) static void bench_one(int kind, const cache *c, int depth, int T, int kv_heads,
                                                const float *q, float *out, float *acc, float *ms) {
  enum { G = PW_ATTN_GROUP_MAX / GQA > 0 ? PW_ATTN_GROUP_MAX / GQA : 1, NQ = G * GQA };
  pw_attn_multi_fn multi = pw_attn_multi_get();
  pw_attn_part_fn part = kind == 3 ? pw_attn_part_long_get() : pw_attn_part_get();
  const float scale = 1.0f / sqrtf((float)HD);
  const int rows = depth + T;
  for (int hk = 0; hk < kv_heads; hk++)
    for (int t0 = 0; t0 < T; t0 += G) {
      const int nt = T - t0 < G ? T - t0 : G, nq = nt * GQA;
      const float *qp[NQ];
      float *op[NQ];
      int np[NQ], nfull[NQ];
      const uint8_t *k0 = c->k + (size_t)hk * rows * c->rk, *v0 = c->v + (size_t)hk * rows * c->rv;
      for (int i = 0; i < nq; i++) {
        const int t = t0 + i / GQA, h = hk * GQA + i % GQA;
        qp[i] = q + ((size_t)t * kv_heads * GQA + h) * HD;
        op[i] = out + ((size_t)t * kv_heads * GQA + h) * HD;
        np[i] = nfull[i] = depth + t;
      }
      if (kind == 0) {
        multi(qp, np, nq, (const uint16_t *)k0, (const uint16_t *)v0, HD, HD, scale, op);
        continue;
      }
      const int spans = pw_attn_spans(depth + t0 + nt - 1);
      float racc[NQ][HD], rms[NQ][2];
      for (int i = 0; i < nq; i++) {
        memset(racc[i], 0, sizeof racc[i]);
        rms[i][0] = -INFINITY;
        rms[i][1] = 0;
      }
      for (int si = 0; si < spans; si++) {
        const int p0 = si * PW_ATTN_SPLIT;
        const float *qs[NQ];
        float *ap[NQ];
        int idx[NQ], n = 0;
        for (int i = 0; i < nq; i++) {
          if (nfull[i] <= p0) continue;
          qs[n] = qp[i];
          ap[n] = acc + (size_t)n * HD;
          np[n] = nfull[i] - p0 < PW_ATTN_SPLIT ? nfull[i] - p0 : PW_ATTN_SPLIT;
          idx[n++] = i;
        }
        if (kind == 1 || kind == 3) {
          part(qs, np, n, (const uint16_t *)(k0 + (size_t)p0 * c->rk), (const uint16_t *)(v0 + (size_t)p0 * c->rv),
               HD, HD, scale, ap, ms);
        } else {
          const pw_attn_kv a = {k0 + (size_t)p0 * c->rk, v0 + (size_t)p0 * c->rv, c->rk, c->rv, c->tk, c->tv};
          pw_attn_kvq(&a, qs, np, n, HD, scale, 0.0f, ap, ms, 0);
        }
        for (int i = 0; i < n; i++) pw_attn_fold(racc[idx[i]], rms[idx[i]], ap[i], ms + 2 * i, HD);
      }
      for (int i = 0; i < nq; i++) {
        pw_attn_finish(racc[i], rms[i], HD);
        memcpy(op[i], racc[i], sizeof racc[i]);
      }
    }
}

static void make_cache(cache *c, uint32_t tk, uint32_t tv, int depth, int kv_heads) {
  const pw_traits *a = pw_traits_get(tk), *b = pw_traits_get(tv);
  c->tk = tk;
  c->tv = tv;
  c->rk = HD / a->blck * a->type_size;
  c->rv = HD / b->blck * b->type_size;
  const size_t rows = (size_t)depth * kv_heads;
  /* in 2 MiB pages, as the model's cache (model.c) */
  c->k = pw_alloc_huge(rows * c->rk);
  c->v = pw_alloc_huge(rows * c->rv);
  float row[HD];
  for (size_t r = 0; r < rows; r++) {
    for (int i = 0; i < HD; i++) row[i] = frand() * 2;
    a->from_float(row, c->k + r * c->rk, HD);
    for (int i = 0; i < HD; i++) row[i] = frand();
    b->from_float(row, c->v + r * c->rv, HD);
  }
}

int main(int argc, char **argv) {
  const int depth = argc > 1 ? atoi(argv[1]) : 4096, kv_heads = argc > 2 ? atoi(argv[2]) : 2,
            reps = argc > 3 ? atoi(argv[3]) : 5, T = argc > 4 ? atoi(argv[4]) : 1;
  const char *only = argc > 5 ? argv[5] : NULL;
  if (depth < 1 || kv_heads < 1 || reps < 1 || reps > 1000 || T < 1 || T > 4096) {
    fprintf(stderr, "usage: bench_attn [DEPTH [KV_HEADS [REPS [TOKENS [ROW]]]]]\n");
    return 2;
  }
  const size_t nqall = (size_t)T * kv_heads * GQA;
  float *q = malloc(sizeof(float) * nqall * HD), *out = malloc(sizeof(float) * nqall * HD);
  float acc[PW_ATTN_GROUP_MAX * HD], ms[2 * PW_ATTN_GROUP_MAX];
  for (size_t i = 0; i < nqall * HD; i++) q[i] = frand() * 3;
  static const struct {
    const char *name;
    int kind;
    uint32_t tk, tv;
  } rows[] = {{"f16 unsplit", 0, PW_DT_F16, PW_DT_F16},
              {"f16 split", 1, PW_DT_F16, PW_DT_F16},
              {"f16 long split", 3, PW_DT_F16, PW_DT_F16},
              {"q8_0/q8_0 split", 2, PW_DT_Q8_0, PW_DT_Q8_0},
              {"q4_0/q4_0 split", 2, PW_DT_Q4_0, PW_DT_Q4_0},
              {"q8_0/f16 split", 2, PW_DT_Q8_0, PW_DT_F16}};
  printf("attention of %d new token%s: %d KV heads x %d query heads, head size %d, depth %d; %s kernels, 1 thread\n",
         T, T > 1 ? "s (a prefill chunk)" : " (a decode step)", kv_heads, GQA, HD, depth, pw_tensor_kernels());
  printf("| kernel | us per step (median of %d) | CPU us (least) | K+V MiB | GB/s |\n| --- | ---: | ---: | ---: | ---: |\n",
         reps);
  for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++) {
    if (only && strcmp(only, rows[r].name) != 0) continue;
    cache c;
    make_cache(&c, rows[r].tk, rows[r].tv, depth + T, kv_heads);
    double t[1000], cpu_min = 1e30;
    bench_one(rows[r].kind, &c, depth, T, kv_heads, q, out, acc, ms); /* warm-up */
    for (int i = 0; i < reps; i++) {
      const double t0 = pw_now_s(), c0 = cpu_s();
      bench_one(rows[r].kind, &c, depth, T, kv_heads, q, out, acc, ms);
      t[i] = pw_now_s() - t0;
      if (cpu_s() - c0 < cpu_min) cpu_min = cpu_s() - c0;
    }
    qsort(t, (size_t)reps, sizeof t[0], cmp_double);
    const double bytes = (double)depth * kv_heads * (double)(c.rk + c.rv);
    printf("| %s | %.1f | %.1f | %.2f | %.2f |\n", rows[r].name, t[reps / 2] * 1e6, cpu_min * 1e6, bytes / 1048576.0,
           bytes / t[reps / 2] / 1e9);
    free(c.k);
    free(c.v);
  }
  free(q);
  free(out);
  return 0;
}
