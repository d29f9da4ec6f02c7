/* test_base.c - base layer: SHA-256 known answers, RNG determinism, the
 * worker pool (every index runs exactly once per run, for many runs and
 * thread counts; run under TSan too), spans to prefetch between runs,
 * status strings. */
#include "base/error.h"
#include "base/pool.h"
#include "base/rng.h"
#include "base/sha256.h"
#include "test.h"

#include <stdatomic.h>
#include <stdint.h>
#include <unistd.h>

static void test_sha256(void) {
  uint8_t d[32];
  char hex[65];
  pw_sha256("abc", 3, d);
  pw_hex(d, 32, hex);
  CHECK_STR(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  pw_sha256("", 0, d);
  pw_hex(d, 32, hex);
  CHECK_STR(hex, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  char tmp[] = "/tmp/power-sha-XXXXXX";
  int fd = mkstemp(tmp);
  CHECK(fd >= 0);
  /* 3 MiB + 1 so the streamed reader crosses chunk boundaries. */
  size_t n = (3u << 20) + 1;
  uint8_t *buf = malloc(n);
  for (size_t i = 0; i < n; i++) buf[i] = (uint8_t)(i * 31 + 7);
  CHECK(write(fd, buf, n) == (ssize_t)n);
  close(fd);
  uint8_t a[32], b[32];
  char err[PW_ERRMAX];
  CHECK(pw_sha256_file(tmp, a, err) == 0);
  pw_sha256(buf, n, b);
  CHECK(memcmp(a, b, 32) == 0);
  unlink(tmp);
  free(buf);
  CHECK(pw_sha256_file("/nonexistent/file", a, err) == PW_EIO);
}

static void test_rng(void) {
  pw_rng a, b;
  pw_rng_seed(&a, 42);
  pw_rng_seed(&b, 42);
  for (int i = 0; i < 1000; i++) CHECK(pw_rng_next(&a) == pw_rng_next(&b));
  pw_rng_seed(&b, 43);
  CHECK(pw_rng_next(&a) != pw_rng_next(&b));
  double sum = 0;
  for (int i = 0; i < 100000; i++) {
    double u = pw_rng_uniform(&a);
    CHECK(u >= 0 && u < 1);
    sum += u;
  }
  CHECK_NEAR(sum / 100000, 0.5, 0.01);
}

typedef struct pool_ctx {
  _Atomic int hits[64];
  _Atomic long total;
} pool_ctx;

static void pool_fn(void *ctx, int ith, int nth) {
  pool_ctx *c = ctx;
  atomic_fetch_add(&c->hits[ith], 1);
  long lo, hi;
  pw_split(1000, ith, nth, &lo, &hi);
  long s = 0;
  for (long i = lo; i < hi; i++) s += i;
  atomic_fetch_add(&c->total, s);
}

static void test_pool(void) {
  for (int nt = 1; nt <= 4; nt++) {
    pw_pool *p = pw_pool_create(nt);
    CHECK(p != NULL && pw_pool_size(p) == nt);
    pool_ctx c;
    memset(&c, 0, sizeof c);
    for (int r = 0; r < 2000; r++) pw_pool_run(p, pool_fn, &c);
    for (int i = 0; i < nt; i++) CHECK_EQ_INT(atomic_load(&c.hits[i]), 2000);
    CHECK_EQ_INT(atomic_load(&c.total), 2000L * 499500L);
    /* runs far enough apart that the workers go to sleep in between (they
     * spin for well under 2 ms), and a run right after each */
    for (int r = 0; r < 20; r++) {
      usleep(2000);
      pw_pool_run(p, pool_fn, &c);
      pw_pool_run(p, pool_fn, &c);
    }
    for (int i = 0; i < nt; i++) CHECK_EQ_INT(atomic_load(&c.hits[i]), 2040);
    CHECK_EQ_INT(atomic_load(&c.total), 2040L * 499500L);
    /* spans to prefetch after a run, rewritten between runs: real memory,
     * and addresses nothing is mapped at (a prefetch never faults); more
     * spans than kept, and worker indices out of range, are ignored; the
     * runs go on as before */
    static char buf[1 << 20];
    const pw_span spans[PW_POOL_SPANS + 2] = {{buf, sizeof buf},          {NULL, (size_t)1 << 40},
                                              {(void *)64, 4096},          {(void *)(uintptr_t)-4096, 1 << 20},
                                              {buf + 4096, 100},           {buf, 0},
                                              {buf + 1, sizeof buf - 1},   {(void *)(uintptr_t)1, 1},
                                              {buf, sizeof buf},           {buf, sizeof buf}};
    for (int r = 0; r < 200; r++) {
      for (int i = -1; i <= nt; i++) pw_pool_prefetch(p, i, spans + r % 3, PW_POOL_SPANS + 2 - r % 3);
      pw_pool_run(p, pool_fn, &c);
    }
    for (int i = 0; i < nt; i++) CHECK_EQ_INT(atomic_load(&c.hits[i]), 2240);
    CHECK_EQ_INT(atomic_load(&c.total), 2240L * 499500L);
    usleep(2000); /* destroyed while its workers sleep */
    pw_pool_destroy(p);
  }
  pw_pool_prefetch(NULL, 1, NULL, 0);
  pool_ctx c;
  memset(&c, 0, sizeof c);
  pw_pool_run(NULL, pool_fn, &c);
  CHECK_EQ_INT(atomic_load(&c.total), 499500);
  pw_pool_destroy(NULL);
  /* pw_split covers the range exactly. */
  for (int nth = 1; nth < 7; nth++) {
    long covered = 0, prev_hi = 0;
    for (int i = 0; i < nth; i++) {
      long lo, hi;
      pw_split(10, i, nth, &lo, &hi);
      CHECK(lo == prev_hi && hi >= lo);
      covered += hi - lo;
      prev_hi = hi;
    }
    CHECK_EQ_INT(covered, 10);
  }
}

int main(void) {
  CHECK_STR(pw_strerror(PW_EFORMAT), "malformed file");
  CHECK_STR(pw_strerror(12345), "unknown status");
  test_sha256();
  test_rng();
  test_pool();
  TEST_DONE();
}
