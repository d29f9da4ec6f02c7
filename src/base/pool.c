/* pool.c - worker threads waiting on a generation counter. A run bumps the
 * generation; each worker runs its share and decrements `pending`; the
 * caller runs share 0 then waits for pending to reach zero. */
#include "base/pool.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

struct pw_pool {
  int n;                    /* threads including the caller */
  pthread_t *threads;       /* n-1 workers */
  pthread_mutex_t mu;
  pthread_cond_t cv_work;   /* signalled when generation changes */
  pthread_cond_t cv_done;   /* signalled when pending reaches 0 */
  _Atomic unsigned long gen;
  _Atomic int pending;
  int stop;
  pw_pool_fn fn;
  void *ctx;
};

typedef struct {
  pw_pool *p;
  int ith;
} worker_arg;

static void *worker_main(void *arg) {
  worker_arg wa = *(worker_arg *)arg;
  free(arg);
  pw_pool *p = wa.p;
  unsigned long seen = 0;
  for (;;) {
    /* Spin briefly: back-to-back kernel launches are the common case. */
    int spins = 0;
    while (atomic_load_explicit(&p->gen, memory_order_acquire) == seen && spins < 20000) spins++;
    pthread_mutex_lock(&p->mu);
    while (atomic_load(&p->gen) == seen && !p->stop) pthread_cond_wait(&p->cv_work, &p->mu);
    if (p->stop) {
      pthread_mutex_unlock(&p->mu);
      return NULL;
    }
    seen = atomic_load(&p->gen);
    pw_pool_fn fn = p->fn;
    void *ctx = p->ctx;
    pthread_mutex_unlock(&p->mu);
    fn(ctx, wa.ith, p->n);
    if (atomic_fetch_sub(&p->pending, 1) == 1) {
      pthread_mutex_lock(&p->mu);
      pthread_cond_signal(&p->cv_done);
      pthread_mutex_unlock(&p->mu);
    }
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
  if (!p->threads) goto fail;
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
  free(p);
}

int pw_pool_size(const pw_pool *p) { return p ? p->n : 1; }

void pw_pool_run(pw_pool *p, pw_pool_fn fn, void *ctx) {
  if (!p || p->n == 1) {
    fn(ctx, 0, 1);
    return;
  }
  pthread_mutex_lock(&p->mu);
  p->fn = fn;
  p->ctx = ctx;
  atomic_store(&p->pending, p->n - 1);
  atomic_fetch_add_explicit(&p->gen, 1, memory_order_release);
  pthread_cond_broadcast(&p->cv_work);
  pthread_mutex_unlock(&p->mu);
  fn(ctx, 0, p->n);
  int spins = 0;
  while (atomic_load_explicit(&p->pending, memory_order_acquire) > 0 && spins < 200000) spins++;
  if (atomic_load(&p->pending) > 0) {
    pthread_mutex_lock(&p->mu);
    while (atomic_load(&p->pending) > 0) pthread_cond_wait(&p->cv_done, &p->mu);
    pthread_mutex_unlock(&p->mu);
  }
}

void pw_split(long n, int ith, int nth, long *lo, long *hi) {
  long per = n / nth, rem = n % nth;
  *lo = ith * per + (ith < rem ? ith : rem);
  *hi = *lo + per + (ith < rem ? 1 : 0);
}
