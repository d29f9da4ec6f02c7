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

typedef struct pw_pool pw_pool;
typedef void (*pw_pool_fn)(void *ctx, int ith, int nth);

/* n_threads >= 1 (including the caller). NULL on failure. */
pw_pool *pw_pool_create(int n_threads);
void pw_pool_destroy(pw_pool *p);
int pw_pool_size(const pw_pool *p);
/* p may be NULL: runs fn(ctx, 0, 1) on the caller. */
void pw_pool_run(pw_pool *p, pw_pool_fn fn, void *ctx);
/* Splits [0, n) into nth contiguous ranges; range ith is [*lo, *hi). */
void pw_split(long n, int ith, int nth, long *lo, long *hi);

#endif
