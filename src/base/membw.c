/* membw.c - the memory read-bandwidth probe. See membw.h. */
#include "base/membw.h"

#include "base/clock.h"
#include "base/error.h"
#include "base/mem.h"
#include "base/pool.h"

#include <stdint.h>
#include <stdlib.h>

#if defined(__x86_64__) || defined(__i386__)
#define MEMBW_X86 1
#include <immintrin.h>
#endif


typedef struct bw_job {
  const uint64_t *buf;
  long n_words; /* uint64 words in buf, a multiple of 16 */
  uint64_t sums[256];
} bw_job;

#ifdef MEMBW_X86
__attribute__((target("avx2"))) static uint64_t bw_sum_avx2(const uint64_t *p, long n) {
  /* Four independent accumulators keep several loads in flight. */
  __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
  for (long i = 0; i < n; i += 16) {
    a0 = _mm256_add_epi64(a0, _mm256_load_si256((const __m256i *)(p + i)));
    a1 = _mm256_add_epi64(a1, _mm256_load_si256((const __m256i *)(p + i + 4)));
    a2 = _mm256_add_epi64(a2, _mm256_load_si256((const __m256i *)(p + i + 8)));
    a3 = _mm256_add_epi64(a3, _mm256_load_si256((const __m256i *)(p + i + 12)));
  }
  __m256i s = _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3));
  uint64_t out[4];
  _mm256_storeu_si256((__m256i *)out, s);
  return out[0] + out[1] + out[2] + out[3];
}
#endif

static uint64_t bw_sum_scalar(const uint64_t *p, long n) {
  uint64_t a0 = 0, a1 = 0, a2 = 0, a3 = 0;
  for (long i = 0; i < n; i += 4) {
    a0 += p[i];
    a1 += p[i + 1];
    a2 += p[i + 2];
    a3 += p[i + 3];
  }
  return a0 + a1 + a2 + a3;
}

static int g_have_avx2;

static void bw_read_fn(void *ctx, int ith, int nth) {
  bw_job *j = ctx;
  long lo, hi;
  /* Split in 16-word units so every slice stays 128-byte aligned. */
  pw_split(j->n_words / 16, ith, nth, &lo, &hi);
  const uint64_t *p = j->buf + lo * 16;
  long n = (hi - lo) * 16;
#ifdef MEMBW_X86
  if (g_have_avx2) {
    j->sums[ith & 255] = bw_sum_avx2(p, n);
    return;
  }
#endif
  j->sums[ith & 255] = bw_sum_scalar(p, n);
}

static void bw_fill_fn(void *ctx, int ith, int nth) {
  bw_job *j = ctx;
  long lo, hi;
  pw_split(j->n_words / 16, ith, nth, &lo, &hi);
  /* Each thread touches its own slice first, so pages land near it. */
  uint64_t *p = (uint64_t *)j->buf;
  for (long i = lo * 16; i < hi * 16; i++) p[i] = (uint64_t)i;
}

int pw_membw_probe(int threads, size_t mib, int passes, pw_membw_result *out, char *err) {
  if (threads < 1 || threads > 256) return pw_seterr(err, PW_EINVAL, "membw: %d threads (1..256)", threads);
  if (mib < 1 || mib > ((size_t)1 << 20)) return pw_seterr(err, PW_EINVAL, "membw: %zu MiB (1..1048576)", mib);
  if (passes < 1 || passes > PW_MEMBW_MAX_PASSES)
    return pw_seterr(err, PW_EINVAL, "membw: %d passes (1..%d)", passes, PW_MEMBW_MAX_PASSES);
#ifdef MEMBW_X86
  __builtin_cpu_init();
  g_have_avx2 = __builtin_cpu_supports("avx2");
#endif
  size_t bytes = mib << 20;
  /* in 2 MiB pages where the kernel gives them, as the weights are mapped
   * (gguf_make_resident): the bound is then the same kind of read */
  uint64_t *buf = pw_alloc_huge(bytes);
  pw_pool *pool = pw_pool_create(threads);
  if (!buf || !pool) {
    free(buf);
    pw_pool_destroy(pool);
    return pw_seterr(err, PW_ENOMEM, "cannot allocate the %zu MiB probe buffer", mib);
  }
  bw_job job = {.buf = buf, .n_words = (long)(bytes / 8)};
  pw_pool_run(pool, bw_fill_fn, &job);
  uint64_t check = 0;
  pw_pool_run(pool, bw_read_fn, &job); /* warm-up pass */
  for (int k = 0; k < passes; k++) {
    double t0 = pw_now_s();
    pw_pool_run(pool, bw_read_fn, &job);
    double dt = pw_now_s() - t0;
    out->gbs[k] = (double)bytes / dt / 1e9;
    for (int i = 0; i < pw_pool_size(pool) && i < 256; i++) check += job.sums[i];
  }
  out->n = passes;
  out->kernel = g_have_avx2 ? "avx2" : "scalar";
  out->checksum = check;
  free(buf);
  pw_pool_destroy(pool);
  return 0;
}
