/* test_registry.c - the server's model registry with a counting fake
 * loader and an injected clock: LRU eviction, in-flight protection, the
 * byte budget, keep-alive expiry, one load for concurrent first requests,
 * a failed load shared by its waiters, waits bounded by deadlines. */
#include "base/clock.h"
#include "base/error.h"
#include "server/registry.h"
#include "test.h"

#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

typedef struct fake {
  atomic_int loads, unloads, live;
  atomic_ullong clock;  /* ns; the registry's clock */
  int load_ms;          /* each load sleeps this long */
  uint64_t bytes;       /* what each load reports */
  atomic_int gate;      /* loads wait until it is nonzero (when gated) */
  bool gated;
  atomic_int abandons;  /* loads that stopped because nobody waited */
} fake;

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

static int fake_load(void *ctx, const char *name, bool (*abandoned)(void *arg), void *abandoned_arg, void **model,
                     uint64_t *bytes, char *err) {
  fake *f = ctx;
  atomic_fetch_add(&f->loads, 1);
  /* a gated load is a load of many pieces: it asks between them */
  for (int i = 0; f->gated && !atomic_load(&f->gate) && i < 1000; i++) {
    if (abandoned(abandoned_arg)) {
      atomic_fetch_add(&f->abandons, 1);
      return pw_seterr(err, PW_ECANCELED, "stopped between pieces");
    }
    sleep_ms(5);
  }
  if (f->load_ms) sleep_ms(f->load_ms);
  if (!strncmp(name, "bad", 3)) return pw_seterr(err, PW_EFORMAT, "cannot load '%s': broken file", name);
  char *m = strdup(name);
  if (!m) return PW_ENOMEM;
  *model = m;
  *bytes = f->bytes;
  atomic_fetch_add(&f->live, 1);
  return 0;
}

static void fake_unload(void *ctx, void *model) {
  fake *f = ctx;
  atomic_fetch_add(&f->unloads, 1);
  atomic_fetch_sub(&f->live, 1);
  free(model);
}

static uint64_t fake_now(void *ctx) { return atomic_load(&((fake *)ctx)->clock); }

static registry *mk(fake *f, int max_loaded, uint64_t budget, double keep) {
  registry_opts o = {max_loaded, budget, keep, true};
  registry_ops ops = {f, fake_load, fake_unload, fake_now};
  registry *r = NULL;
  char err[PW_ERRMAX];
  CHECK(registry_create(&o, &ops, &r, err) == 0);
  return r;
}

static bool loaded(registry *r, const char *name) {
  registry_info i;
  return registry_get(r, name, &i) == 0 && i.loaded;
}

static int use(registry *r, const char *name) {
  registry_ref *ref = NULL;
  char err[PW_ERRMAX];
  int rc = registry_acquire(r, name, 10, 0, &ref, err);
  if (rc == 0) {
    CHECK_STR((const char *)registry_model(ref), name);
    registry_release(r, ref, false, 0);
  }
  return rc;
}

static void test_lru(void) {
  fake f = {0};
  f.clock = 1000;
  f.bytes = 10;
  registry *r = mk(&f, 2, 0, -1);
  CHECK(use(r, "a") == 0);
  f.clock += 10;
  CHECK(use(r, "b") == 0);
  f.clock += 10;
  CHECK(use(r, "a") == 0); /* a is now the most recently used */
  f.clock += 10;
  CHECK(use(r, "c") == 0); /* evicts b, the least recently used */
  CHECK(loaded(r, "a") && loaded(r, "c") && !loaded(r, "b"));
  registry_info i;
  CHECK(registry_get(r, "b", &i) == 0);
  CHECK_EQ_INT(i.evictions, 1);
  CHECK_EQ_INT(i.loads, 1);
  CHECK_EQ_INT(atomic_load(&f.loads), 3);
  CHECK_EQ_INT(atomic_load(&f.live), 2);
  int nl, ng;
  uint64_t by;
  registry_counts(r, &nl, &ng, &by);
  CHECK_EQ_INT(nl, 2);
  CHECK_EQ_INT(ng, 0);
  CHECK_EQ_INT(by, 20);
  registry_destroy(r);
  CHECK_EQ_INT(atomic_load(&f.live), 0);
}

typedef struct waiter {
  registry *r;
  const char *name;
  uint64_t deadline;
  int rc;
  char err[PW_ERRMAX];
  void *model;
  registry_ref *ref;
  bool release;
} waiter;

static void *waiter_main(void *arg) {
  waiter *w = arg;
  w->rc = registry_acquire(w->r, w->name, 10, w->deadline, &w->ref, w->err);
  if (!w->rc) {
    w->model = registry_model(w->ref);
    if (w->release) {
      registry_release(w->r, w->ref, false, 0);
      w->ref = NULL;
    }
  }
  return NULL;
}

static void test_in_flight(void) {
  fake f = {0};
  f.clock = 1000;
  f.bytes = 10;
  registry *r = mk(&f, 1, 0, -1);
  registry_ref *a = NULL;
  char err[PW_ERRMAX];
  CHECK(registry_acquire(r, "a", 10, 0, &a, err) == 0);
  /* a is in use: b cannot evict it; the deadline (already reached on the
   * registry clock) ends the wait with a timeout naming the reason. */
  registry_ref *b = NULL;
  CHECK(registry_acquire(r, "b", 10, f.clock, &b, err) == PW_ETIMEOUT);
  CHECK(strstr(err, "no room") != NULL);
  CHECK(!b);
  CHECK(loaded(r, "a") && !loaded(r, "b"));
  /* A waiter with no deadline gets b once a is released. */
  waiter w = {r, "b", 0, -99, "", NULL, NULL, true};
  pthread_t t;
  pthread_create(&t, NULL, waiter_main, &w);
  sleep_ms(100);
  CHECK(loaded(r, "a")); /* still held */
  registry_release(r, a, false, 0);
  pthread_join(t, NULL);
  CHECK_EQ_INT(w.rc, 0);
  CHECK(w.model && !strcmp(w.model, "b"));
  CHECK(!loaded(r, "a") && loaded(r, "b"));
  /* Explicit unload while in use waits for the last release. */
  registry_ref *b2 = NULL;
  CHECK(registry_acquire(r, "b", 10, 0, &b2, err) == 0);
  CHECK(registry_unload(r, "b") == 0);
  CHECK(loaded(r, "b"));
  registry_release(r, b2, false, 0);
  CHECK(!loaded(r, "b"));
  CHECK(registry_unload(r, "b") == PW_ENOTFOUND);
  registry_destroy(r);
  CHECK_EQ_INT(atomic_load(&f.live), 0);
}

static void test_budget(void) {
  fake f = {0};
  f.clock = 1000;
  f.bytes = 60;
  registry *r = mk(&f, 4, 100, -1);
  registry_ref *ref = NULL;
  char err[PW_ERRMAX];
  CHECK(registry_acquire(r, "a", 60, 0, &ref, err) == 0);
  registry_release(r, ref, false, 0);
  f.clock += 10;
  CHECK(registry_acquire(r, "b", 60, 0, &ref, err) == 0); /* 60 + 60 > 100: a goes */
  registry_release(r, ref, false, 0);
  CHECK(!loaded(r, "a") && loaded(r, "b"));
  CHECK(registry_acquire(r, "huge", 150, 0, &ref, err) == PW_ELIMIT);
  CHECK(strstr(err, "budget") != NULL);
  CHECK(loaded(r, "b")); /* refusing huge evicted nothing */
  registry_destroy(r);
}

static void test_keep_alive(void) {
  fake f = {0};
  f.clock = 1000;
  f.bytes = 10;
  registry *r = mk(&f, 4, 0, 300);
  registry_ref *ref = NULL;
  char err[PW_ERRMAX];
  /* The request's keep-alive: 10 s. */
  CHECK(registry_acquire(r, "a", 10, 0, &ref, err) == 0);
  registry_release(r, ref, true, 10);
  registry_info i;
  CHECK(registry_get(r, "a", &i) == 0);
  CHECK_NEAR(i.expires_in_s, 10, 1e-6);
  f.clock += 5000000000ull;
  CHECK_EQ_INT(registry_tick(r), 0);
  CHECK(loaded(r, "a"));
  f.clock += 6000000000ull;
  CHECK_EQ_INT(registry_tick(r), 1);
  CHECK(!loaded(r, "a"));
  CHECK(registry_get(r, "a", &i) == 0);
  CHECK_EQ_INT(i.unloads, 1);
  CHECK_EQ_INT(i.evictions, 0);
  /* No keep-alive in the request: the default (300 s). */
  CHECK(registry_acquire(r, "a", 10, 0, &ref, err) == 0);
  registry_release(r, ref, false, 0);
  f.clock += 299000000000ull;
  CHECK_EQ_INT(registry_tick(r), 0);
  f.clock += 2000000000ull;
  CHECK_EQ_INT(registry_tick(r), 1);
  /* 0: unloaded as soon as the request ends. */
  CHECK(registry_acquire(r, "a", 10, 0, &ref, err) == 0);
  registry_release(r, ref, true, 0);
  CHECK(!loaded(r, "a"));
  /* 0 with another request still in flight: unloaded when the last leaves. */
  registry_ref *r1 = NULL, *r2 = NULL;
  CHECK(registry_acquire(r, "a", 10, 0, &r1, err) == 0);
  CHECK(registry_acquire(r, "a", 10, 0, &r2, err) == 0);
  CHECK(r1 == r2);
  registry_release(r, r1, true, 0);
  CHECK(loaded(r, "a"));
  registry_release(r, r2, true, 0);
  CHECK(!loaded(r, "a"));
  /* Negative: forever. */
  CHECK(registry_acquire(r, "a", 10, 0, &ref, err) == 0);
  registry_release(r, ref, true, -1);
  f.clock += 1000000ull * 1000000000ull;
  CHECK_EQ_INT(registry_tick(r), 0);
  CHECK(loaded(r, "a"));
  CHECK(registry_get(r, "a", &i) == 0);
  CHECK(i.expires_in_s < 0);
  CHECK_EQ_INT(i.loads, 5);
  registry_destroy(r);
  CHECK_EQ_INT(atomic_load(&f.live), 0);
}

#define N_THREADS 8

static void test_load_once(void) {
  fake f = {0};
  f.clock = 1000;
  f.bytes = 10;
  f.load_ms = 150;
  registry *r = mk(&f, 1, 0, -1);
  waiter w[N_THREADS];
  pthread_t t[N_THREADS];
  for (int i = 0; i < N_THREADS; i++) {
    w[i] = (waiter){r, "a", 0, -99, "", NULL, NULL, false};
    pthread_create(&t[i], NULL, waiter_main, &w[i]);
  }
  for (int i = 0; i < N_THREADS; i++) pthread_join(t[i], NULL);
  CHECK_EQ_INT(atomic_load(&f.loads), 1);
  for (int i = 0; i < N_THREADS; i++) {
    CHECK_EQ_INT(w[i].rc, 0);
    CHECK(w[i].model == w[0].model);
  }
  registry_info inf;
  CHECK(registry_get(r, "a", &inf) == 0);
  CHECK_EQ_INT(inf.in_flight, N_THREADS);
  CHECK_EQ_INT(inf.loads, 1);
  CHECK(inf.load_seconds > 0);
  for (int i = 0; i < N_THREADS; i++) registry_release(r, w[i].ref, false, 0);
  CHECK(registry_get(r, "a", &inf) == 0);
  CHECK_EQ_INT(inf.in_flight, 0);
  CHECK(inf.loaded);

  /* A load that fails: every waiter gets the loader's error. */
  f.gated = true;
  for (int i = 0; i < N_THREADS; i++) {
    w[i] = (waiter){r, "bad1", 0, -99, "", NULL, NULL, true};
    pthread_create(&t[i], NULL, waiter_main, &w[i]);
  }
  sleep_ms(200);
  atomic_store(&f.gate, 1);
  for (int i = 0; i < N_THREADS; i++) pthread_join(t[i], NULL);
  for (int i = 0; i < N_THREADS; i++) {
    CHECK_EQ_INT(w[i].rc, PW_EFORMAT);
    CHECK_STR(w[i].err, "cannot load 'bad1': broken file");
  }
  CHECK(registry_get(r, "bad1", &inf) == 0);
  CHECK(!inf.loaded && !inf.loading);
  CHECK(inf.load_failures >= 1 && inf.load_failures <= N_THREADS);
  /* The failed load held no room: a loads again without a wait. */
  CHECK(loaded(r, "a") || use(r, "a") == 0);
  registry_destroy(r);
  CHECK_EQ_INT(atomic_load(&f.live), 0);
}

/* A request that gives up while another loads the model leaves nothing
 * behind: the load completes and the model serves the next request. */
static void test_waiter_gives_up(void) {
  fake f = {0};
  f.clock = 1000;
  f.bytes = 10;
  f.gated = true;
  registry *r = mk(&f, 1, 0, -1);
  waiter loader = {r, "a", 0, -99, "", NULL, NULL, true};
  pthread_t t;
  pthread_create(&t, NULL, waiter_main, &loader);
  for (int i = 0; i < 200 && atomic_load(&f.loads) == 0; i++) sleep_ms(5);
  registry_ref *ref = NULL;
  char err[PW_ERRMAX];
  CHECK(registry_acquire(r, "a", 10, f.clock, &ref, err) == PW_ETIMEOUT);
  CHECK(strstr(err, "still loading") != NULL);
  atomic_store(&f.gate, 1);
  pthread_join(t, NULL);
  CHECK_EQ_INT(loader.rc, 0);
  registry_info inf;
  CHECK(registry_get(r, "a", &inf) == 0);
  CHECK_EQ_INT(inf.in_flight, 0);
  CHECK(use(r, "a") == 0);
  CHECK_EQ_INT(atomic_load(&f.loads), 1);
  registry_info *all = NULL;
  size_t n = 0;
  CHECK(registry_list(r, &all, &n) == 0);
  CHECK_EQ_INT(n, 1);
  free(all);
  registry_destroy(r);
}

/* The timer thread unloads an expired model without anyone calling tick. */
static void test_timer(void) {
  fake f = {0};
  f.clock = 1000;
  f.bytes = 10;
  registry_opts o = {2, 0, 1, false};
  registry_ops ops = {&f, fake_load, fake_unload, fake_now};
  registry *r = NULL;
  char err[PW_ERRMAX];
  CHECK(registry_create(&o, &ops, &r, err) == 0);
  CHECK(use(r, "a") == 0);
  f.clock += 2000000000ull;
  for (int i = 0; i < 400 && loaded(r, "a"); i++) sleep_ms(10);
  CHECK(!loaded(r, "a"));
  registry_destroy(r);
  o.max_loaded = 0;
  CHECK(registry_create(&o, &ops, &r, err) == PW_EINVAL);
}

static void test_parse_keep_alive(void) {
  double v = 99;
  CHECK(registry_parse_keep_alive("300", &v) == 0 && v == 300);
  CHECK(registry_parse_keep_alive("0", &v) == 0 && v == 0);
  CHECK(registry_parse_keep_alive("-1", &v) == 0 && v < 0);
  CHECK(registry_parse_keep_alive("-5m", &v) == 0 && v < 0);
  CHECK(registry_parse_keep_alive("5m", &v) == 0 && v == 300);
  CHECK(registry_parse_keep_alive("1h30m", &v) == 0 && v == 5400);
  CHECK(registry_parse_keep_alive("1.5s", &v) == 0 && v == 1.5);
  CHECK(registry_parse_keep_alive("250ms", &v) == 0 && fabs(v - 0.25) < 1e-12);
  CHECK(registry_parse_keep_alive("", &v) == PW_EINVAL);
  CHECK(registry_parse_keep_alive("5x", &v) == PW_EINVAL);
  CHECK(registry_parse_keep_alive("m", &v) == PW_EINVAL);
  CHECK(registry_parse_keep_alive("5m3", &v) == PW_EINVAL);
  CHECK(registry_parse_keep_alive("1e300h", &v) == PW_EINVAL);
  CHECK(registry_parse_keep_alive("nan", &v) == PW_EINVAL);
}

/* A caller that goes away (gone flag) while it waits or loads. */
typedef struct leaver {
  registry *r;
  const char *name;
  atomic_int gone;
  int rc;
  char err[PW_ERRMAX];
  registry_ref *ref;
} leaver;

static bool leaver_gone(void *arg) { return atomic_load(&((leaver *)arg)->gone) != 0; }

static void *leaver_main(void *arg) {
  leaver *l = arg;
  l->rc = registry_acquire_ex(l->r, l->name, 10, 0, leaver_gone, l, &l->ref, l->err);
  if (!l->rc) registry_release(l->r, l->ref, false, 0);
  return NULL;
}

/* Waits (bounded) until the registry shows `loading` loads in progress. */
static void until_loading(registry *r, int loading) {
  int nl = 0, ng = -1;
  uint64_t by;
  for (int i = 0; i < 400; i++) {
    registry_counts(r, &nl, &ng, &by);
    if (ng == loading) return;
    sleep_ms(5);
  }
  CHECK_MSG(0, "%d loads in progress, expected %d", ng, loading);
}

/* A request that leaves while it waits gives its place back at once; a
 * load goes on while anyone waits for it and stops between pieces when
 * its loader has gone and nobody else waits; the next caller loads anew. */
static void test_abandon(void) {
  fake f = {0};
  f.clock = 1000;
  f.bytes = 10;
  f.gated = true;
  registry *r = mk(&f, 1, 0, -1);
  leaver a = {.r = r, .name = "m"}, b = {.r = r, .name = "m"};
  pthread_t ta, tb;
  pthread_create(&ta, NULL, leaver_main, &a);
  until_loading(r, 1);
  pthread_create(&tb, NULL, leaver_main, &b);
  sleep_ms(20);
  atomic_store(&a.gone, 1); /* the loader's client left: b still waits */
  sleep_ms(60);
  CHECK_EQ_INT(atomic_load(&f.abandons), 0);
  atomic_store(&b.gone, 1); /* now nobody waits */
  pthread_join(tb, NULL);
  pthread_join(ta, NULL);
  CHECK_EQ_INT(b.rc, PW_ECANCELED);
  CHECK_EQ_INT(a.rc, PW_ECANCELED);
  CHECK_MSG(strstr(a.err, "abandoned") != NULL, "%s", a.err);
  CHECK_EQ_INT(atomic_load(&f.abandons), 1);
  int nl, ng;
  uint64_t by;
  registry_counts(r, &nl, &ng, &by);
  CHECK(nl == 0 && ng == 0 && by == 0);
  CHECK_EQ_INT(atomic_load(&f.live), 0);
  /* an abandoned load is no failure to share: the next caller loads it */
  atomic_store(&f.gate, 1);
  CHECK(use(r, "m") == 0);
  CHECK(loaded(r, "m"));
  /* waiting for room (m held, max_loaded 1), then leaving: its place goes */
  registry_ref *held_m = NULL;
  char err[PW_ERRMAX];
  CHECK(registry_acquire(r, "m", 10, 0, &held_m, err) == 0);
  leaver c = {.r = r, .name = "other"};
  pthread_t tc;
  pthread_create(&tc, NULL, leaver_main, &c);
  sleep_ms(30);
  atomic_store(&c.gone, 1);
  pthread_join(tc, NULL);
  CHECK_EQ_INT(c.rc, PW_ECANCELED);
  registry_counts(r, &nl, &ng, &by);
  CHECK(nl == 1 && ng == 0 && by == 10);
  registry_release(r, held_m, false, 0);
  /* the loader alone, gone: the load stops */
  registry_unload(r, "m");
  f.gate = 0;
  leaver d = {.r = r, .name = "m"};
  atomic_store(&d.gone, 1);
  pthread_t td;
  pthread_create(&td, NULL, leaver_main, &d);
  pthread_join(td, NULL);
  CHECK_EQ_INT(d.rc, PW_ECANCELED);
  CHECK_EQ_INT(atomic_load(&f.abandons), 2);
  registry_destroy(r);
  CHECK_EQ_INT(atomic_load(&f.live), 0);
}

int main(void) {
  test_parse_keep_alive();
  test_lru();
  test_in_flight();
  test_budget();
  test_keep_alive();
  test_load_once();
  test_waiter_gives_up();
  test_abandon();
  test_timer();
  TEST_DONE();
}
