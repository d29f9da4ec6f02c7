/* pool.c - worker threads waiting on a generation counter. A run bumps the
 * generation; each worker runs its share and decrements `pending`; the
 * caller runs share 0 then waits for pending to reach zero. */
#include "base/pool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

typedef struct {
  pw_pool_fn fn;
  void *ctx;
} fn_and_ctx;

/* what a worker prefetches after the next run (pw_pool_prefetch) */
typedef struct {
  pw_span s[PW_POOL_SPANS];
  int n;
} span_set;

struct pw_pool {
  int n;                    /* threads including the caller */
  pthread_t *threads;       /* n-1 workers */
  pthread_mutex_t mu;
  pthread_cond_t cv_work;   /* signalled when generation changes */
  pthread_cond_t cv_done;   /* signalled when pending reaches 0 */
  _Atomic unsigned long gen;
  _Atomic int pending;
  _Atomic int sleepers;     /* workers in (or entering) cv_work */
  _Atomic int waiting;      /* the runner is in (or entering) cv_done */
  int stop;                 /* under mu */
  fn_and_ctx job;           /* written before gen is bumped */
  span_set *pf;             /* per worker index; written between runs, read
                             * by the worker when it takes the next run */
};

typedef struct {
  pw_pool *p;
  int ith;
} worker_arg;

/* Spin this long (wall clock) for the next run or for the workers to
 * finish before sleeping: a forward pass launches runs back to back, and
 * between decode steps the gap is usually shorter than a futex round trip.
 * At each clock check (every 1024 pauses) the spinning thread yields: with
 * more runnable threads than cores (another process's, or the pool's own
 * beside another pool) the thread it waits for then gets the core, instead
 * of waiting out the spin (two engine tests at once on two cores ran 2.4x
 * faster). Alone on its core, a yield returns at once. */
#define SPIN_NS 300000L

static long now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1000000000L + ts.tv_nsec;
}

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

/* spins until *v != old or SPIN_NS passed; returns the last value read */
static unsigned long spin_while_eq(_Atomic unsigned long *v, unsigned long old) {
  unsigned long cur;
  long t0 = 0;
  for (unsigned i = 0;; i++) {
    cur = atomic_load_explicit(v, memory_order_acquire);
    if (cur != old) return cur;
    if ((i & 1023) == 1023) {
      long t = now_ns();
      if (!t0) t0 = t;
      else if (t - t0 > SPIN_NS) return cur;
      sched_yield();
    }
    cpu_relax();
  }
}

/* Prefetches the spans a line of each in turn (as a pass that reads them
 * side by side will), into L2, until PW_POOL_PREFETCH_BYTES or the next run
 * (checked every 8 lines). A prefetch never faults, whatever the address. */
static void prefetch_spans(pw_pool *p, unsigned long seen, const span_set *pf) {
  size_t longest = 0, budget = PW_POOL_PREFETCH_BYTES;
  for (int i = 0; i < pf->n; i++)
    if (pf->s[i].n > longest) longest = pf->s[i].n;
  for (size_t off = 0, k = 0; off < longest && budget; off += 64) {
    for (int i = 0; i < pf->n && budget; i++) {
      if (off >= pf->s[i].n) continue;
      __builtin_prefetch((const void *)((uintptr_t)pf->s[i].p + off), 0, 2);
      budget = budget > 64 ? budget - 64 : 0;
      if ((++k & 7) == 0 && atomic_load_explicit(&p->gen, memory_order_relaxed) != seen) return;
    }
  }
}

static void *worker_main(void *arg) {
  worker_arg wa = *(worker_arg *)arg;
  free(arg);
  pw_pool *p = wa.p;
  unsigned long seen = 0;
  for (;;) {
    unsigned long g = spin_while_eq(&p->gen, seen);
    if (g == seen) {
      /* sleep; pw_pool_run signals when it sees a sleeper (both sides use
       * sequentially consistent atomics, so either the runner sees this
       * count or this thread sees the new generation) */
      pthread_mutex_lock(&p->mu);
      atomic_fetch_add(&p->sleepers, 1);
      while (atomic_load(&p->gen) == seen && !p->stop) pthread_cond_wait(&p->cv_work, &p->mu);
      atomic_fetch_sub(&p->sleepers, 1);
      const int stop = p->stop;
      pthread_mutex_unlock(&p->mu);
      if (stop) return NULL;
      g = atomic_load(&p->gen);
    }
    seen = g;
    /* fn, ctx and the spans were published before the generation
     * (release/acquire); the spans are copied before this run is counted
     * done, after which the caller may write the next ones */
    fn_and_ctx fc = p->job;
    const span_set pf = p->pf[wa.ith];
    fc.fn(fc.ctx, wa.ith, p->n);
    if (atomic_fetch_sub(&p->pending, 1) == 1 && atomic_load(&p->waiting)) {
      pthread_mutex_lock(&p->mu);
      pthread_cond_signal(&p->cv_done);
      pthread_mutex_unlock(&p->mu);
    }
    if (pf.n) prefetch_spans(p, seen, &pf);
  }
}

pw_pool *pw_pool_create(int n_threads) {
  if (n_threads < 1) n_threads = 1;
  if (n_threads > 256) n_threads = 256;
  pw_pool *p = calloc(1, sizeof *p);
  if (!p) return NULL;
  p->n = n_threads;
  pthread_mutex_init(&p->mu, NULL);
  pthread_cond_init(&p->cv_work, NULL);
  pthread_cond_init(&p->cv_done, NULL);
  p->threads = calloc((size_t)n_threads, sizeof(pthread_t));
  p->pf = calloc((size_t)n_threads, sizeof *p->pf);
  if (!p->threads || !p->pf) goto fail;
  for (int i = 1; i < n_threads; i++) {
    worker_arg *wa = malloc(sizeof *wa);
    if (!wa) goto fail_threads;
    wa->p = p;
    wa->ith = i;
    if (pthread_create(&p->threads[i - 1], NULL, worker_main, wa) != 0) {
      free(wa);
      goto fail_threads;
    }
    continue;
  fail_threads:
    p->n = i; /* only i-1 workers exist */
    pw_pool_destroy(p);
    return NULL;
  }
  return p;
fail:
  free(p->threads);
  free(p->pf);
  free(p);
  return NULL;
}

void pw_pool_destroy(pw_pool *p) {
  if (!p) return;
  pthread_mutex_lock(&p->mu);
  p->stop = 1;
  pthread_cond_broadcast(&p->cv_work);
  pthread_mutex_unlock(&p->mu);
  for (int i = 1; i < p->n; i++) pthread_join(p->threads[i - 1], NULL);
  pthread_mutex_destroy(&p->mu);
  pthread_cond_destroy(&p->cv_work);
  pthread_cond_destroy(&p->cv_done);
  free(p->threads);
  free(p->pf);
  free(p);
}

int pw_pool_size(const pw_pool *p) { return p ? p->n : 1; }

void pw_pool_prefetch(pw_pool *p, int ith, const pw_span *spans, int n) {
  if (!p || ith < 1 || ith >= p->n) return;
  if (n > PW_POOL_SPANS) n = PW_POOL_SPANS;
  for (int i = 0; i < n; i++) p->pf[ith].s[i] = spans[i];
  p->pf[ith].n = n > 0 ? n : 0;
}

void pw_pool_run(pw_pool *p, pw_pool_fn fn, void *ctx) {
  if (!p || p->n == 1) {
    fn(ctx, 0, 1);
    return;
  }
  p->job.fn = fn;
  p->job.ctx = ctx;
  atomic_store(&p->pending, p->n - 1);
  atomic_fetch_add(&p->gen, 1); /* seq_cst: publishes job, ordered before the sleeper check */
  if (atomic_load(&p->sleepers) > 0) {
    pthread_mutex_lock(&p->mu);
    pthread_cond_broadcast(&p->cv_work);
    pthread_mutex_unlock(&p->mu);
  }
  fn(ctx, 0, p->n);
  long t0 = 0;
  for (unsigned i = 0; atomic_load_explicit(&p->pending, memory_order_acquire) > 0; i++) {
    if ((i & 1023) == 1023) {
      long t = now_ns();
      if (!t0) t0 = t;
      else if (t - t0 > SPIN_NS) break;
      sched_yield();
    }
    cpu_relax();
  }
  if (atomic_load(&p->pending) > 0) {
    pthread_mutex_lock(&p->mu);
    atomic_store(&p->waiting, 1);
    while (atomic_load(&p->pending) > 0) pthread_cond_wait(&p->cv_done, &p->mu);
    atomic_store(&p->waiting, 0);
    pthread_mutex_unlock(&p->mu);
  }
  /* every worker took its spans when it took this run */
  for (int i = 1; i < p->n; i++) p->pf[i].n = 0;
}

void pw_split(long n, int ith, int nth, long *lo, long *hi) {
  long per = n / nth, rem = n % nth;
  *lo = ith * per + (ith < rem ? ith : rem);
  *hi = *lo + per + (ith < rem ? 1 : 0);
}
