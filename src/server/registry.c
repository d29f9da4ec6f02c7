/* registry.c - the loaded-model table of a store-serving server: loads on
 * first use, one load per model however many requests arrive at once,
 * LRU eviction of idle models under a count and a byte bound, keep-alive
 * expiry. See registry.h. One mutex guards the table; loads and unloads
 * run outside it (they take seconds), with the entry marked LOADING or
 * UNLOADING so that it still counts against the bounds. */
#include "server/registry.h"

#include "base/clock.h"
#include "base/error.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define WAIT_SLICE_NS 50000000ull /* waits re-read the (possibly injected) clock this often */
#define TIMER_TICK_MS 250         /* how often the timer thread looks for expired models */

typedef enum reg_state { RS_UNLOADED = 0, RS_LOADING, RS_READY, RS_UNLOADING } reg_state;

struct registry_entry {
  char name[REGISTRY_NAME_MAX + 1];
  reg_state state;
  void *model;          /* RS_READY / RS_UNLOADING: ops.load's result */
  uint64_t bytes;       /* held while LOADING (the estimate), READY, UNLOADING */
  uint64_t last_bytes;  /* size of the last load, kept after unload */
  int refs;             /* requests holding it */
  int callers;          /* registry_acquire calls inside for it (waiting or loading) */
  bool unload_when_idle; /* registry_unload while requests were in flight */
  double keep_s;        /* keep-alive in force (set by each release) */
  uint64_t expires_ns;  /* READY and idle: when it goes; 0 = never */
  uint64_t last_used;   /* registry clock, for LRU */
  uint64_t load_gen;    /* load attempts started */
  uint64_t fail_gen;    /* the attempt that failed last (load_gen's value), 0 = none */
  int fail_rc;
  char fail_msg[PW_ERRMAX];
  uint64_t loads, load_failures, evictions, unloads;
  double load_seconds;
};

struct registry {
  registry_opts o;
  registry_ops ops;
  pthread_mutex_t mu;
  pthread_cond_t cv; /* CLOCK_MONOTONIC: any state change */
  struct registry_entry **e;
  size_t n, cap;
  pthread_t timer;
  bool timer_on;
  bool stop; /* under mu */
};

static uint64_t now_ns(registry *r) { return r->ops.now_ns ? r->ops.now_ns(r->ops.ctx) : pw_now_ns(); }

static struct registry_entry *find(registry *r, const char *name) {
  for (size_t i = 0; i < r->n; i++)
    if (!strcmp(r->e[i]->name, name)) return r->e[i];
  return NULL;
}

/* Models and bytes counted against the bounds: loading, loaded, unloading. */
static void held(registry *r, int *count, uint64_t *bytes) {
  *count = 0;
  *bytes = 0;
  for (size_t i = 0; i < r->n; i++)
    if (r->e[i]->state != RS_UNLOADED) {
      (*count)++;
      *bytes += r->e[i]->bytes;
    }
}

static bool has_room(registry *r, uint64_t est) {
  int c;
  uint64_t b;
  held(r, &c, &b);
  return c < r->o.max_loaded && (!r->o.mem_budget || b + est <= r->o.mem_budget);
}

/* Waits on the condition for at most one slice (real time); the caller
 * re-checks its deadline on the registry clock. PW_ETIMEOUT when the
 * deadline has passed. Called with mu held. */
static int wait_slice(registry *r, uint64_t deadline_ns) {
  if (deadline_ns && now_ns(r) >= deadline_ns) return PW_ETIMEOUT;
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  uint64_t t = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec + WAIT_SLICE_NS;
  ts.tv_sec = (time_t)(t / 1000000000ull);
  ts.tv_nsec = (long)(t % 1000000000ull);
  pthread_cond_timedwait(&r->cv, &r->mu, &ts);
  return 0;
}

/* Unloads e (READY, idle) outside the lock; mu held on entry and exit. */
static void unload_locked(registry *r, struct registry_entry *e) {
  void *m = e->model;
  e->state = RS_UNLOADING;
  pthread_mutex_unlock(&r->mu);
  r->ops.unload(r->ops.ctx, m);
  pthread_mutex_lock(&r->mu);
  e->model = NULL;
  e->bytes = 0;
  e->state = RS_UNLOADED;
  e->unload_when_idle = false;
  pthread_cond_broadcast(&r->cv);
}

/* The least recently used idle loaded model other than skip, or NULL. */
static struct registry_entry *lru_idle(registry *r, const struct registry_entry *skip) {
  struct registry_entry *best = NULL;
  for (size_t i = 0; i < r->n; i++) {
    struct registry_entry *e = r->e[i];
    if (e == skip || e->state != RS_READY || e->refs) continue;
    if (!best || e->last_used < best->last_used) best = e;
  }
  return best;
}

static void *timer_main(void *arg) {
  registry *r = arg;
  pthread_mutex_lock(&r->mu);
  while (!r->stop) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_nsec += TIMER_TICK_MS * 1000000L;
    if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
    pthread_cond_timedwait(&r->cv, &r->mu, &ts);
    if (r->stop) break;
    pthread_mutex_unlock(&r->mu);
    registry_tick(r);
    pthread_mutex_lock(&r->mu);
  }
  pthread_mutex_unlock(&r->mu);
  return NULL;
}

int registry_create(const registry_opts *o, const registry_ops *ops, registry **out, char *err) {
  *out = NULL;
  if (o->max_loaded < 1) return pw_seterr(err, PW_EINVAL, "max_loaded must be at least 1, got %d", o->max_loaded);
  if (!ops->load || !ops->unload) return pw_seterr(err, PW_EINVAL, "registry: load and unload are required");
  registry *r = calloc(1, sizeof *r);
  if (!r) return pw_seterr(err, PW_ENOMEM, "out of memory");
  r->o = *o;
  r->ops = *ops;
  pthread_mutex_init(&r->mu, NULL);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&r->cv, &ca);
  pthread_condattr_destroy(&ca);
  if (!o->no_timer) {
    if (pthread_create(&r->timer, NULL, timer_main, r)) {
      registry_destroy(r);
      return pw_seterr(err, PW_ENOMEM, "cannot start the model registry's timer");
    }
    r->timer_on = true;
  }
  *out = r;
  return 0;
}

void registry_destroy(registry *r) {
  if (!r) return;
  pthread_mutex_lock(&r->mu);
  r->stop = true;
  pthread_cond_broadcast(&r->cv);
  pthread_mutex_unlock(&r->mu);
  if (r->timer_on) pthread_join(r->timer, NULL);
  for (size_t i = 0; i < r->n; i++) {
    if (r->e[i]->state == RS_READY) r->ops.unload(r->ops.ctx, r->e[i]->model);
    free(r->e[i]);
  }
  free(r->e);
  pthread_mutex_destroy(&r->mu);
  pthread_cond_destroy(&r->cv);
  free(r);
}

static struct registry_entry *entry_add(registry *r, const char *name) {
  if (r->n == r->cap) {
    if (r->cap >= REGISTRY_MAX_ENTRIES) {
      /* Forget a name that holds nothing (its counters go with it). */
      for (size_t i = 0; i < r->n; i++)
        if (r->e[i]->state == RS_UNLOADED && !r->e[i]->refs) {
          struct registry_entry *old = r->e[i];
          /* Nobody can be waiting on it: waiters wait on LOADING or UNLOADING entries. */
          r->e[i] = r->e[--r->n];
          free(old);
          break;
        }
      if (r->n == r->cap) return NULL;
    } else {
      size_t nc = r->cap ? r->cap * 2 : 16;
      struct registry_entry **ne = realloc(r->e, nc * sizeof *ne);
      if (!ne) return NULL;
      r->e = ne;
      r->cap = nc;
    }
  }
  struct registry_entry *e = calloc(1, sizeof *e);
  if (!e) return NULL;
  snprintf(e->name, sizeof e->name, "%s", name);
  e->keep_s = r->o.keep_alive_s;
  r->e[r->n++] = e;
  return e;
}

/* What the loader's abandoned() looks at. */
typedef struct load_watch {
  registry *r;
  struct registry_entry *e;
  bool (*gone)(void *arg);
  void *gone_arg;
} load_watch;

static bool load_abandoned(void *arg) {
  load_watch *w = arg;
  if (!w->gone || !w->gone(w->gone_arg)) return false;
  pthread_mutex_lock(&w->r->mu);
  const bool alone = w->e->callers <= 1; /* the loader's own call only */
  pthread_mutex_unlock(&w->r->mu);
  return alone;
}

int registry_acquire(registry *r, const char *name, uint64_t est_bytes, uint64_t deadline_ns, registry_ref **out,
                     char *err) {
  return registry_acquire_ex(r, name, est_bytes, deadline_ns, NULL, NULL, out, err);
}

int registry_acquire_ex(registry *r, const char *name, uint64_t est_bytes, uint64_t deadline_ns,
                        bool (*gone)(void *arg), void *gone_arg, registry_ref **out, char *err) {
  *out = NULL;
  if (strlen(name) > REGISTRY_NAME_MAX) return pw_seterr(err, PW_EINVAL, "model name too long");
  if (r->o.mem_budget && est_bytes > r->o.mem_budget)
    return pw_seterr(err, PW_ELIMIT, "model '%s' needs about %llu bytes, more than the memory budget of %llu", name,
                     (unsigned long long)est_bytes, (unsigned long long)r->o.mem_budget);
  pthread_mutex_lock(&r->mu);
  uint64_t seen_gen = 0; /* the load attempt this caller waited for */
  int rc = 0;
  struct registry_entry *counted = NULL; /* the entry whose callers counts this call */
  for (;;) {
    if (r->stop) {
      rc = pw_seterr(err, PW_ECANCELED, "the server is stopping");
      break;
    }
    struct registry_entry *e = find(r, name);
    if (!e && !(e = entry_add(r, name))) {
      rc = pw_seterr(err, PW_ENOMEM, "out of memory (or %d model names tracked)", REGISTRY_MAX_ENTRIES);
      break;
    }
    if (!counted) {
      counted = e;
      e->callers++;
    }
    if (e->state == RS_READY) {
      e->refs++;
      e->last_used = now_ns(r);
      e->expires_ns = 0;
      *out = e;
      break;
    }
    if (e->state == RS_LOADING || e->state == RS_UNLOADING) {
      if (e->state == RS_LOADING) seen_gen = e->load_gen;
      if ((rc = wait_slice(r, deadline_ns))) {
        pw_seterr(err, rc, "model '%s' is still %s", name, e->state == RS_LOADING ? "loading" : "unloading");
        break;
      }
      if (gone && gone(gone_arg)) {
        rc = pw_seterr(err, PW_ECANCELED, "the request ended while waiting for model '%s'", name);
        break;
      }
      continue;
    }
    /* RS_UNLOADED: the load this caller waited for failed: share its error. */
    if (seen_gen && e->fail_gen == seen_gen) {
      rc = pw_seterr(err, e->fail_rc, "%s", e->fail_msg);
      break;
    }
    if (has_room(r, est_bytes)) {
      e->state = RS_LOADING;
      e->bytes = est_bytes;
      uint64_t gen = ++e->load_gen;
      uint64_t t0 = pw_now_ns();
      pthread_mutex_unlock(&r->mu);
      void *m = NULL;
      uint64_t bytes = est_bytes;
      char lerr[PW_ERRMAX] = "";
      load_watch lw = {r, e, gone, gone_arg};
      int lrc = r->ops.load(r->ops.ctx, name, load_abandoned, &lw, &m, &bytes, lerr);
      double secs = (double)(pw_now_ns() - t0) * 1e-9;
      pthread_mutex_lock(&r->mu);
      e->load_seconds += secs;
      if (lrc == PW_ECANCELED) {
        /* abandoned: not a failure to share; a caller that came since
         * loads it again */
        e->state = RS_UNLOADED;
        e->bytes = 0;
        rc = pw_seterr(err, lrc, "the load of model '%s' was abandoned: %s", name, lerr[0] ? lerr : "nobody waits for it");
      } else if (lrc) {
        e->state = RS_UNLOADED;
        e->bytes = 0;
        e->fail_gen = gen;
        e->fail_rc = lrc;
        snprintf(e->fail_msg, sizeof e->fail_msg, "%s", lerr[0] ? lerr : pw_strerror(lrc));
        e->load_failures++;
        rc = pw_seterr(err, lrc, "%s", e->fail_msg);
      } else {
        e->state = RS_READY;
        e->model = m;
        e->bytes = e->last_bytes = bytes;
        e->loads++;
        e->refs++;
        e->last_used = now_ns(r);
        e->expires_ns = 0;
        *out = e;
      }
      pthread_cond_broadcast(&r->cv);
      break;
    }
    struct registry_entry *victim = lru_idle(r, e);
    if (victim) {
      victim->evictions++;
      unload_locked(r, victim);
      continue;
    }
    if ((rc = wait_slice(r, deadline_ns))) {
      int c;
      uint64_t b;
      held(r, &c, &b);
      pw_seterr(err, PW_ETIMEOUT,
                "no room to load model '%s': %d model(s) holding %llu bytes are loaded or loading and all are in use",
                name, c, (unsigned long long)b);
      break;
    }
    if (gone && gone(gone_arg)) {
      rc = pw_seterr(err, PW_ECANCELED, "the request ended while waiting for room to load model '%s'", name);
      break;
    }
  }
  if (counted) counted->callers--;
  pthread_mutex_unlock(&r->mu);
  return rc;
}

void *registry_model(const registry_ref *ref) { return ref->model; }
const char *registry_ref_name(const registry_ref *ref) { return ref->name; }

void registry_release(registry *r, registry_ref *e, bool has_keep, double keep_alive_s) {
  if (!e) return;
  pthread_mutex_lock(&r->mu);
  e->keep_s = has_keep ? keep_alive_s : r->o.keep_alive_s;
  if (--e->refs == 0 && e->state == RS_READY) {
    uint64_t now = now_ns(r);
    e->last_used = now;
    if (e->unload_when_idle || e->keep_s == 0) {
      e->unloads++;
      unload_locked(r, e);
    } else {
      e->expires_ns = e->keep_s < 0 ? 0 : now + (uint64_t)(e->keep_s * 1e9);
      if (e->keep_s > 0 && !e->expires_ns) e->expires_ns = 1;
    }
  }
  pthread_cond_broadcast(&r->cv); /* a waiter for room may evict it now */
  pthread_mutex_unlock(&r->mu);
}

int registry_unload(registry *r, const char *name) {
  pthread_mutex_lock(&r->mu);
  struct registry_entry *e = find(r, name);
  int rc = 0;
  if (!e || (e->state != RS_READY && e->state != RS_LOADING)) {
    rc = PW_ENOTFOUND;
  } else if (e->state == RS_LOADING || e->refs) {
    e->unload_when_idle = true;
  } else {
    e->unloads++;
    unload_locked(r, e);
  }
  pthread_mutex_unlock(&r->mu);
  return rc;
}

int registry_tick(registry *r) {
  int n = 0;
  pthread_mutex_lock(&r->mu);
  /* Bounded: each pass unloads one model and the table only shrinks in
   * loaded models while we hold the lock between passes. */
  for (size_t guard = 0; guard <= r->n && !r->stop; guard++) {
    uint64_t now = now_ns(r);
    struct registry_entry *exp = NULL;
    for (size_t i = 0; i < r->n; i++) {
      struct registry_entry *e = r->e[i];
      if (e->state == RS_READY && !e->refs && e->expires_ns && now >= e->expires_ns) {
        exp = e;
        break;
      }
    }
    if (!exp) break;
    exp->unloads++;
    unload_locked(r, exp);
    n++;
  }
  pthread_mutex_unlock(&r->mu);
  return n;
}

static void info_of(registry *r, const struct registry_entry *e, uint64_t now, registry_info *o) {
  (void)r;
  memset(o, 0, sizeof *o);
  snprintf(o->name, sizeof o->name, "%s", e->name);
  o->loaded = e->state == RS_READY;
  o->loading = e->state == RS_LOADING;
  o->in_flight = e->refs;
  o->bytes = e->state == RS_UNLOADED ? e->last_bytes : e->bytes;
  o->keep_alive_s = e->keep_s;
  if (o->loaded && !e->refs)
    o->expires_in_s = e->expires_ns ? (e->expires_ns > now ? (double)(e->expires_ns - now) * 1e-9 : 0) : -1;
  else
    o->expires_in_s = e->keep_s;
  o->loads = e->loads;
  o->load_failures = e->load_failures;
  o->evictions = e->evictions;
  o->unloads = e->unloads;
  o->load_seconds = e->load_seconds;
}

static int by_name(const void *a, const void *b) {
  return strcmp(((const registry_info *)a)->name, ((const registry_info *)b)->name);
}

int registry_list(registry *r, registry_info **out, size_t *n) {
  pthread_mutex_lock(&r->mu);
  registry_info *v = malloc((r->n ? r->n : 1) * sizeof *v);
  if (!v) {
    pthread_mutex_unlock(&r->mu);
    return PW_ENOMEM;
  }
  uint64_t now = now_ns(r);
  for (size_t i = 0; i < r->n; i++) info_of(r, r->e[i], now, &v[i]);
  *n = r->n;
  pthread_mutex_unlock(&r->mu);
  qsort(v, *n, sizeof *v, by_name);
  *out = v;
  return 0;
}

int registry_get(registry *r, const char *name, registry_info *out) {
  pthread_mutex_lock(&r->mu);
  struct registry_entry *e = find(r, name);
  if (e) info_of(r, e, now_ns(r), out);
  pthread_mutex_unlock(&r->mu);
  return e ? 0 : PW_ENOTFOUND;
}

void registry_counts(registry *r, int *loaded, int *loading, uint64_t *bytes) {
  pthread_mutex_lock(&r->mu);
  int a = 0, b = 0;
  uint64_t by = 0;
  for (size_t i = 0; i < r->n; i++) {
    if (r->e[i]->state == RS_READY) a++;
    if (r->e[i]->state == RS_LOADING) b++;
    if (r->e[i]->state != RS_UNLOADED) by += r->e[i]->bytes;
  }
  pthread_mutex_unlock(&r->mu);
  if (loaded) *loaded = a;
  if (loading) *loading = b;
  if (bytes) *bytes = by;
}

void registry_each(registry *r, void (*fn)(void *arg, const char *name, void *model), void *arg) {
  pthread_mutex_lock(&r->mu);
  for (size_t i = 0; i < r->n; i++)
    if (r->e[i]->state == RS_READY) fn(arg, r->e[i]->name, r->e[i]->model);
  pthread_mutex_unlock(&r->mu);
}

#define KEEP_MAX_S (10.0 * 365 * 86400)

int registry_parse_keep_alive(const char *text, double *out_s) {
  const char *p = text;
  bool neg = false;
  if (*p == '-' || *p == '+') neg = *p++ == '-';
  if (!*p) return PW_EINVAL;
  double total = 0;
  int terms = 0;
  while (*p && terms < 16) {
    if (!((*p >= '0' && *p <= '9') || *p == '.')) return PW_EINVAL;
    char *end;
    double v = strtod(p, &end);
    if (end == p || v != v) return PW_EINVAL;
    p = end;
    double unit;
    if (!*p && terms == 0) unit = 1; /* a bare number: seconds */
    else if (!strncmp(p, "ns", 2)) unit = 1e-9, p += 2;
    else if (!strncmp(p, "us", 2)) unit = 1e-6, p += 2;
    else if (!strncmp(p, "ms", 2)) unit = 1e-3, p += 2;
    else if (*p == 's') unit = 1, p++;
    else if (*p == 'm') unit = 60, p++;
    else if (*p == 'h') unit = 3600, p++;
    else return PW_EINVAL;
    total += v * unit;
    terms++;
    if (total > KEEP_MAX_S) return PW_EINVAL;
  }
  if (*p) return PW_EINVAL;
  *out_s = neg && total > 0 ? -1 : total;
  return 0;
}
