/* registry.h - the models a store-serving server has loaded: which are
 * loaded, which are loading, who is using each, and when each goes.
 *
 * What it is: a table of named models with their lifecycle. A request
 * acquires a model by name (loading it on first use) and releases it when
 * its answer is done. Bounds: at most max_loaded models and mem_budget
 * bytes (each model's weights + KV reservation) are held at once; loads in
 * progress and unloads not yet finished count against both, so a burst of
 * first requests never overshoots. Room is made by unloading the least
 * recently used idle model (no request in flight); a model with a request
 * in flight is never unloaded. When there is no room and nothing is idle,
 * acquire waits (a release or unload wakes it) until its deadline.
 *
 * Concurrent first requests for one model load it once: the first becomes
 * the loader (the load runs on its thread, outside the lock), the others
 * wait for that load and share its result, its failure included (each gets
 * the loader's message). A waiter that gives up (deadline, or its caller
 * gives up between bounded waits) leaves nothing behind.
 *
 * Keep-alive (Ollama's semantics): each release sets the model's keep-alive
 * (seconds; < 0 = forever, 0 = unload as soon as no request uses it), the
 * request's own or, when it gave none, the registry default: the last
 * request to finish decides. When the last request leaves, the model
 * expires keep_alive seconds later; registry_tick unloads expired idle
 * models (a timer thread calls it, or tests do, with their own clock).
 *
 * What it is not: a model loader. Loading and unloading are callbacks
 * (registry_ops), so the server decides what a loaded model is (an engine
 * with its prompt builder) and tests can count and delay loads. Names are
 * taken as given (the server resolves store names first).
 *
 * Threads: every function may be called from any thread. Callbacks run
 * without the registry's lock held. */
#ifndef PW_SERVER_REGISTRY_H
#define PW_SERVER_REGISTRY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define REGISTRY_NAME_MAX 128
#define REGISTRY_MAX_ENTRIES 4096 /* distinct names tracked (loaded or with counters) */

typedef struct registry registry;
typedef struct registry_entry registry_ref; /* an acquired model (a view, valid until release) */

typedef struct registry_ops {
  void *ctx;
  /* Loads name: *model (opaque, owned by the registry until unload) and
   * *bytes (memory it holds). 0, or a negative PW_E* with err set.
   * abandoned(abandoned_arg), asked between pieces of the load, turns true
   * when nobody waits for it any more (the loading request's caller has
   * gone and no other request waits for the model): the load may then
   * stop and return PW_ECANCELED. */
  int (*load)(void *ctx, const char *name, bool (*abandoned)(void *arg), void *abandoned_arg, void **model,
              uint64_t *bytes, char *err);
  /* Frees a loaded model. */
  void (*unload)(void *ctx, void *model);
  /* Monotonic nanoseconds; NULL = pw_now_ns. Tests inject their clock. */
  uint64_t (*now_ns)(void *ctx);
} registry_ops;

typedef struct registry_opts {
  int max_loaded;        /* models held at once (loading ones included), >= 1 */
  uint64_t mem_budget;   /* bytes held at once; 0 = no byte bound */
  double keep_alive_s;   /* default keep-alive: < 0 = forever, 0 = unload when idle */
  bool no_timer;         /* no timer thread: the caller runs registry_tick (tests) */
} registry_opts;

/* What registry_list reports of one name. */
typedef struct registry_info {
  char name[REGISTRY_NAME_MAX + 1];
  bool loaded;          /* ready to serve */
  bool loading;         /* a load is in progress */
  int in_flight;        /* requests holding it */
  uint64_t bytes;       /* memory held while loaded (else the last known size) */
  double expires_in_s;  /* seconds until it is unloaded when idle; < 0 = never; only when loaded and idle,
                         * else the keep-alive that will apply */
  double keep_alive_s;  /* the keep-alive now in force */
  uint64_t loads;       /* completed loads */
  uint64_t load_failures;
  uint64_t evictions;   /* unloaded to make room for another model */
  uint64_t unloads;     /* unloaded when idle: keep-alive expired, keep_alive 0, or asked */
  double load_seconds;  /* total time spent loading it */
} registry_info;

/* ops is copied. PW_EINVAL for bad options, PW_ENOMEM. */
int registry_create(const registry_opts *o, const registry_ops *ops, registry **out, char *err);
/* Unloads everything (requests must have released their models) and frees
 * r. NULL is a no-op. */
void registry_destroy(registry *r);

/* Acquires name, loading it when needed. est_bytes: what the model is
 * expected to hold (for the budget before it is loaded). deadline_ns:
 * monotonic time (the registry's clock) to give up waiting; 0 = wait as
 * long as it takes. Returns 0 with *out set; PW_ETIMEOUT when the deadline
 * passed while waiting for room or for another request's load of the same
 * model; PW_ELIMIT when est_bytes alone exceeds the budget; the load's
 * error (err set) when it failed. */
int registry_acquire(registry *r, const char *name, uint64_t est_bytes, uint64_t deadline_ns, registry_ref **out,
                     char *err);
/* The same, for a caller that may go away while it waits: gone(gone_arg)
 * (may be NULL) is asked about every 50 ms of waiting and, when true, the
 * call returns PW_ECANCELED leaving nothing behind (its place in the
 * admission counts is given back at once). When this caller is the one
 * loading, its load is abandoned once it is gone and no other caller waits
 * for the same model (ops.load's abandoned); a caller that comes later
 * then loads the model afresh instead of sharing a cancellation. */
int registry_acquire_ex(registry *r, const char *name, uint64_t est_bytes, uint64_t deadline_ns,
                        bool (*gone)(void *arg), void *gone_arg, registry_ref **out, char *err);
/* The loaded model of an acquired ref (what ops.load returned). */
void *registry_model(const registry_ref *ref);
const char *registry_ref_name(const registry_ref *ref);
/* Releases ref. has_keep: the request gave a keep-alive (keep_alive_s, as
 * in registry_opts); else the default applies. With keep-alive 0 and no
 * other request in flight the model is unloaded here, on the caller's
 * thread. */
void registry_release(registry *r, registry_ref *ref, bool has_keep, double keep_alive_s);

/* Unloads name now if it is loaded and idle; if requests are in flight,
 * when the last one leaves. 0, or PW_ENOTFOUND when it is not loaded. */
int registry_unload(registry *r, const char *name);
/* Unloads the idle models whose keep-alive expired. The number unloaded. */
int registry_tick(registry *r);

/* A snapshot of every name the registry knows, sorted by name: *out is
 * malloc'ed (caller frees), *n its count. 0 or PW_ENOMEM. */
int registry_list(registry *r, registry_info **out, size_t *n);
/* One name's snapshot: 0, or PW_ENOTFOUND when never seen. */
int registry_get(registry *r, const char *name, registry_info *out);
/* Calls fn for every loaded (ready) model with the registry's lock held:
 * fn must be quick and must not call the registry. */
void registry_each(registry *r, void (*fn)(void *arg, const char *name, void *model), void *arg);
/* Models loaded (ready) and loads in progress now. */
void registry_counts(registry *r, int *loaded, int *loading, uint64_t *bytes);

/* A keep-alive as Ollama takes it: a number of seconds ("300", "-1",
 * "0.5") or a duration of decimal numbers with units ns, us, ms, s, m, h
 * ("5m", "1h30m", "-1s"); any negative value means forever (-1 out).
 * 0, or PW_EINVAL for anything else (empty, unknown unit, over 10 years). */
int registry_parse_keep_alive(const char *text, double *out_s);

#endif
