/* pool.h - persistent worker pool for data-parallel kernels.
 *
 * pw_pool_run(pool, fn, ctx, n) calls fn(ctx, i, nth) for every worker index
 * i in [0, nth) (the caller thread is worker 0) and returns when all are done.
 * Workers spin briefly then sleep on a condition variable, so an idle pool
 * costs no CPU. Work splitting is the caller's: a deterministic function of
 * (i, nth), so results never depend on scheduling. Not reentrant: one run at
 * a time per pool. */
#ifndef PW_BASE_POOL_H
#define PW_BASE_POOL_H

#include <stddef.h>

typedef struct pw_pool pw_pool;
typedef void (*pw_pool_fn)(void *ctx, int ith, int nth);

/* n_threads >= 1 (including the caller). NULL on failure. */
pw_pool *pw_pool_create(int n_threads);
void pw_pool_destroy(pw_pool *p);
int pw_pool_size(const pw_pool *p);
/* p may be NULL: runs fn(ctx, 0, 1) on the caller. */
void pw_pool_run(pw_pool *p, pw_pool_fn fn, void *ctx);

/* Bytes of memory, for pw_pool_prefetch. */
typedef struct pw_span {
  const void *p;
  size_t n;
} pw_span;
#define PW_POOL_SPANS 8
/* at most this many bytes are prefetched after one run */
#define PW_POOL_PREFETCH_BYTES (128u << 10)

/* The memory worker ith (1 <= ith < size) will read first in the run after
 * the next one. After its share of the next pw_pool_run, while it waits for
 * the run after, it prefetches up to n (<= PW_POOL_SPANS) spans, a cache
 * line of each in turn, PW_POOL_PREFETCH_BYTES in all, and stops as soon
 * as that run arrives: so the time the caller spends on serial work between
 * two runs also brings the next run's data in. Applies to the next run only;
 * call between runs, from the thread that runs them. No-op without workers. */
void pw_pool_prefetch(pw_pool *p, int ith, const pw_span *spans, int n);
/* Splits [0, n) into nth contiguous ranges; range ith is [*lo, *hi). */
void pw_split(long n, int ith, int nth, long *lo, long *hi);

#endif
