/* engine.c - the inference engine: request handles and their event queues,
 * admission (bounded queue, deadlines), the engine thread that runs
 * continuous-batching steps with chunked prefill, sampling,
 * detokenisation and stop strings, exact speculative decoding
 * (prompt-lookup, n-gram and draft-model proposals verified in the batched
 * target pass) and the keyed prefix cache.
 *
 * Not here: HTTP, JSON, chat templating, how cache keys are derived.
 *
 * Threads and locks. Callers (many threads) and the one engine thread share:
 *   - engine.mu: the admission queue, the counters and the flags stop/drain.
 *   - engine_req.mu: one request's event ring, its reference count and its
 *     "ended" flags. A handle outlives the engine when the caller still
 *     holds it (engine_destroy before engine_release), so nothing a caller
 *     touches after submit lives in the engine.
 * The two locks are never held together. Everything else about a running
 * sequence (slot, positions, sampler, text state, speculation state) and
 * the prefix cache belong to the engine thread alone. Cancellation is an
 * atomic flag read once per step.
 *
 * KV slots. The KV cache has max_active + prompt_cache_entries sequences
 * ("slots"). A running request holds one; an idle cache entry holds one.
 * At most max_active requests run and at most prompt_cache_entries entries
 * exist, so an admitted request always finds a free slot and caching never
 * lowers the running capacity. The draft model's KV cache (draft mode) has
 * the same slots, so a cache entry carries the draft's KV too.
 *
 * Speculation round of one sequence (all inside one step):
 *   1. propose up to k tokens (k from the adaptive width, the remaining
 *      max_tokens and the step budget): n-gram lookup, or k greedy passes
 *      of the draft model batched over the speculating sequences;
 *   2. the target pass gets entries (last, p0, ..., p(k-1)) at consecutive
 *      positions, each wanting logits, in the same batch as everyone else;
 *   3. row i is sampled exactly as a non-speculative step would sample it
 *      (same sampler state: penalties see every emitted token in order, one
 *      RNG draw per emitted token), the token is emitted (stop strings, EOG,
 *      max_tokens apply as usual), and the round continues to row i+1 only
 *      while the sampled token equals p(i);
 *   4. target KV is truncated to what was committed (the positions of the
 *      tokens fed whose successors were emitted), the draft's KV too.
 * So the emitted tokens are the ones non-speculative decoding emits, and a
 * round that ends early (stop, error, cancel) leaves the last commit.
 *
 * Allocation happens in engine_create (batch, logits and hidden buffers,
 * KV caches, cache records) and engine_submit (per-request sampler, event
 * ring, token and text buffers); the step loop and the per-token path
 * allocate nothing. */
#include "engine/engine.h"

#include "base/clock.h"
#include "base/error.h"
#include "base/log.h"
#include "base/sha256.h"
#include "chat/chat.h"
#include "chat/stop.h"
#include "model/model.h"
#include "tok/tok.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define EV_TEXT_CAP ((int)sizeof(((engine_event *)0)->text))

#define SPEC_MAX_K 32      /* upper bound of spec_draft_max (header: <= 32) */
#define SPEC_NGRAM_MAX 4   /* lookup tries n-grams of this length down to 1 */
#define SPEC_WINDOW 8      /* rounds with proposals judged for the fallback */
#define SPEC_MIN_RATE 0.2  /* acceptance below this over a full window: stop speculating */
#define SPEC_DRAFT_PMIN 0.3 /* a draft model proposes only tokens it gives at least this probability */
#define CACHE_MAX_ENTRIES 4096

_Static_assert(ENGINE_MAX_STOP <= STOP_MAX_STRINGS && ENGINE_MAX_STOP_LEN <= STOP_MAX_LEN,
               "the stop matcher must hold every request's stop strings");

typedef enum req_state { REQ_QUEUED, REQ_ACTIVE, REQ_ENDED } req_state;

/* A prefix-cache entry: the tokens whose KV a slot holds. While a running
 * request extends it (busy), the slot is that request's and toks/n_tok are
 * the state it started from. */
typedef struct cache_ent {
  bool used;        /* the record holds an entry */
  bool busy;        /* taken by a running request */
  uint8_t key[32];
  int slot;         /* KV slot (the running request's while busy) */
  int n_tok;
  int32_t *toks;    /* [n_ctx], owned */
  uint64_t last_ns; /* monotonic time it became idle (LRU and TTL) */
} cache_ent;

struct engine_req {
  /* ---- fixed at submit ---- */
  int32_t *toks;   /* [n_prompt + max_tokens] prompt, then generated tokens; owned */
  const int32_t *prompt; /* = toks */
  int n_prompt;
  int max_tokens; /* effective: capped so that prompt + max_tokens <= n_ctx */
  bool embedding, ignore_eos, want_logprobs;
  int n_logprobs;
  uint64_t deadline_ns; /* 0 = none */
  int ring_cap; /* events; one slot is kept for the final DONE/ERROR */
  bool has_key;
  uint8_t key[32];

  /* ---- shared with callers, guarded by mu ---- */
  pthread_mutex_t mu;
  pthread_cond_t cv;
  engine_event *ring; /* [ring_cap], owned */
  int ring_head, ring_count;
  int refs;           /* 1 for the caller's handle + 1 while the engine holds it */
  bool released;      /* the caller called engine_release */
  bool end_pushed;    /* DONE/ERROR is in the ring (or was dropped after release) */
  bool end_taken;     /* the caller has received DONE/ERROR */
  bool embd_ready;    /* embd holds the result */
  atomic_bool cancel; /* set by callers, read by the engine thread */

  /* ---- engine thread only (next: guarded by engine.mu while queued) ---- */
  engine_req *next; /* admission queue link */
  req_state state;
  int slot;          /* KV sequence while active, else -1 */
  int n_fed;         /* positions in the KV cache: prompt, then generated */
  int n_gen;         /* tokens sampled */
  int32_t last;      /* last sampled token, fed by the next decode entry (= toks[n_fed]) */
  pw_sampler *smp;   /* owned; NULL for embeddings */
  tok_detok dt;      /* streaming detokenizer state */
  bool has_stop;     /* sm is in use */
  stop_matcher sm;   /* stop strings and their held-back prefix */
  char *txt;         /* [txt_cap] text ready for the next event, owned */
  int txt_len, txt_cap;
  double *embd_acc;  /* [n_embd] running sum of final hidden states, owned */
  float *embd;       /* [n_embd] the result, owned */
  cache_ent *ent;    /* the cache entry this request took (busy), or NULL */
  engine_usage u;    /* cached_tokens and the speculation counters */
  /* speculation */
  bool spec;         /* still speculating (mode on, not spec_off, no fallback) */
  int spec_k;        /* adaptive width in [1, K] */
  int win_d[SPEC_WINDOW], win_a[SPEC_WINDOW]; /* drafted/accepted of recent rounds */
  int win_n, win_pos;
  /* ---- per step scratch ---- */
  int32_t prop[SPEC_MAX_K]; /* this round's proposals */
  int n_prop;
  int step_n;        /* entries in this step's generation batch */
  int step_rows;     /* logits rows wanted (decode: 1 + n_prop; last prompt chunk: 1) */
  int step_row;      /* first of them */
  int draft_row;     /* row in the draft's logits of the current draft pass, -1 = none */
};

/* Counters added to engine.st at the end of a step (under engine.mu). */
typedef struct stat_delta {
  uint64_t prompt_tokens, generated_tokens, batch_entries;
  uint64_t spec_drafted, spec_accepted, spec_emitted, spec_target_passes, spec_rounds, spec_fallbacks;
  uint64_t cache_requests, cache_hits, cache_misses, cache_reused, cache_evaluated, cache_evictions;
} stat_delta;

struct engine {
  engine_opts o; /* resolved options (paths are not kept) */
  model *m;
  tok_vocab *vocab;
  model_kv *kv;
  model_ctx *ctx;
  int n_vocab, n_embd, n_ctx;
  long n_passes;       /* target forward passes run (engine thread) */
  int n_slots;         /* KV sequences: max_active + cache entries */
  size_t tok_bytes;    /* KV bytes of one position (target + draft) */
  char model_id[256];
  char sha256[65];     /* hex SHA-256 of the model file, computed on first use */
  bool sha_done;
  pthread_mutex_t sha_mu;
  bool have_file_id;    /* file_id was read at create */
  pw_file_id file_id;   /* the model file's identity, key of the digest cache */
  char *chat_template; /* owned copy of the model's template; NULL = default */
  /* draft model (ENGINE_SPEC_DRAFT), else NULL */
  model *dm;
  model_kv *dkv;
  model_ctx *dctx;
  float *dlogits;      /* [max_active][n_vocab] */
  model_entry *dents;  /* [step_tokens] */

  /* ---- shared, guarded by mu ---- */
  pthread_mutex_t mu;
  pthread_cond_t work_cv; /* engine thread: new work or stop */
  pthread_cond_t idle_cv; /* engine_drain: a request ended */
  engine_req *q_head, *q_tail;
  int n_queued, n_active;
  bool stop, draining;
  engine_stats st;

  /* ---- engine thread only ---- */
  pthread_t thread;
  bool thread_started;
  engine_req **run;    /* [max_active] active requests in admission order */
  int n_run;
  engine_req **part;   /* [max_active] requests in this step's generation batch */
  int n_part;
  int *free_slots;     /* [n_slots] stack of unused KV sequences */
  int n_free;
  cache_ent *cache;    /* [n_cache] records */
  int n_cache;         /* 0 = prefix cache disabled */
  model_entry *ents;   /* [step_tokens] generation batch */
  model_entry *eents;  /* [step_tokens] embedding batch */
  engine_req **eowner; /* [step_tokens] */
  float *logits;       /* [rows_cap][n_vocab] */
  int rows_cap;
  float *hidden;       /* [step_tokens][n_embd] final hidden states of an embedding batch */
  char *dbuf;          /* [dbuf_cap] detokenizer output of one token */
  size_t dbuf_cap;
  char *sbuf;          /* [STOP_OUT_CAP(dbuf_cap)] stop matcher output of one token */
  stat_delta d;        /* counters not yet added to st */
  engine_event ev;     /* scratch: built here, then copied into a ring */
  char err[PW_ERRMAX];
};

/* ---- small helpers ------------------------------------------------------- */

static void cond_init_monotonic(pthread_cond_t *c) {
  pthread_condattr_t a;
  pthread_condattr_init(&a);
  pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
  pthread_cond_init(c, &a);
  pthread_condattr_destroy(&a);
}

/* Absolute CLOCK_MONOTONIC time ns from now. */
static struct timespec abs_after_ns(uint64_t ns) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  ts.tv_sec += (time_t)(ns / 1000000000ull);
  ts.tv_nsec += (long)(ns % 1000000000ull);
  if (ts.tv_nsec >= 1000000000L) {
    ts.tv_sec++;
    ts.tv_nsec -= 1000000000L;
  }
  return ts;
}

static void req_free(engine_req *r) {
  pw_sampler_destroy(r->smp);
  free(r->toks);
  free(r->ring);
  free(r->txt);
  free(r->embd_acc);
  free(r->embd);
  pthread_mutex_destroy(&r->mu);
  pthread_cond_destroy(&r->cv);
  free(r);
}

/* Drops one reference (the caller's or the engine's); frees on the last. */
static void req_unref(engine_req *r) {
  pthread_mutex_lock(&r->mu);
  bool last = --r->refs == 0;
  pthread_mutex_unlock(&r->mu);
  if (last) req_free(r);
}

/* Copies an event without the unused tail of its text buffer. */
static void ev_copy(engine_event *dst, const engine_event *src) {
  memcpy(dst, src, offsetof(engine_event, text));
  memcpy(dst->text, src->text, (size_t)src->text_len);
  dst->text[src->text_len] = 0;
  size_t rest = offsetof(engine_event, text_len);
  memcpy((char *)dst + rest, (const char *)src + rest, sizeof *src - rest);
}

/* Appends ev to r's ring. A TOKEN needs a free slot besides the one kept for
 * the final event; false when the consumer is that far behind (the engine
 * then ends the request). A final event always fits. */
static bool req_push(engine_req *r, const engine_event *ev) {
  bool final = ev->type != ENGINE_EV_TOKEN;
  bool ok = true;
  pthread_mutex_lock(&r->mu);
  if (r->end_pushed) {
    ok = false;
  } else if (r->released) {
    if (final) r->end_pushed = true; /* nobody reads it any more */
  } else if (!final && r->ring_count >= r->ring_cap - 1) {
    ok = false;
  } else {
    engine_event *slot = &r->ring[(r->ring_head + r->ring_count) % r->ring_cap];
    ev_copy(slot, ev);
    slot->time_s = pw_now_s();
    r->ring_count++;
    if (final) r->end_pushed = true;
    pthread_cond_signal(&r->cv);
  }
  pthread_mutex_unlock(&r->mu);
  return ok;
}

static void ev_clear(engine_event *ev, engine_ev_type type) {
  ev->type = type;
  ev->token = -1;
  ev->text[0] = 0;
  ev->text_len = 0;
  ev->logprob = 0;
  ev->n_top = 0;
  ev->finish = ENGINE_FINISH_NONE;
  memset(&ev->usage, 0, sizeof ev->usage);
  ev->status = 0;
  ev->message[0] = 0;
}

/* Moves up to one event's worth of r->txt into ev->text, cut at a UTF-8
 * character boundary; the rest waits for the next event. */
static void take_text(engine_req *r, engine_event *ev) {
  int n = r->txt_len;
  if (n > EV_TEXT_CAP - 1) {
    n = EV_TEXT_CAP - 1;
    while (n > 0 && ((unsigned char)r->txt[n] & 0xC0) == 0x80) n--;
  }
  memcpy(ev->text, r->txt, (size_t)n);
  ev->text[n] = 0;
  ev->text_len = n;
  memmove(r->txt, r->txt + n, (size_t)(r->txt_len - n));
  r->txt_len -= n;
}

/* Appends text for the next event. The buffer holds an event's worth plus
 * the most one token can release, so it only overflows if a vocabulary has
 * pieces near a kilobyte; such excess is dropped with a warning rather than
 * allocating on the token path. */
static void txt_append(engine_req *r, const char *s, size_t n) {
  size_t room = (size_t)(r->txt_cap - r->txt_len);
  if (n > room) {
    pw_log(PW_LOG_WARN, "engine: %zu bytes of generated text dropped (event buffer full)", n - room);
    n = room;
  }
  memcpy(r->txt + r->txt_len, s, n);
  r->txt_len += (int)n;
}

/* Runs a token's detokenized bytes through the stop matcher (if any) into
 * r->txt; true when a stop string completed. */
static bool txt_feed(engine *e, engine_req *r, const char *s, size_t n) {
  bool matched = false;
  if (r->has_stop) {
    size_t k = stop_feed(&r->sm, s, n, e->sbuf, &matched);
    txt_append(r, e->sbuf, k);
  } else {
    txt_append(r, s, n);
  }
  return matched;
}

/* ---- engine thread: KV slots and the prefix cache ------------------------ */

static void slot_free(engine *e, int slot) {
  model_kv_truncate(e->kv, slot, 0);
  if (e->dkv) model_kv_truncate(e->dkv, slot, 0);
  PW_ASSERT(e->n_free < e->n_slots);
  e->free_slots[e->n_free++] = slot;
}

static cache_ent *cache_find(engine *e, const uint8_t key[32]) {
  for (int i = 0; i < e->n_cache; i++)
    if (e->cache[i].used && memcmp(e->cache[i].key, key, 32) == 0) return &e->cache[i];
  return NULL;
}

/* Drops an idle entry and returns its slot to the pool. */
static void cache_drop(engine *e, cache_ent *ce, bool eviction) {
  PW_ASSERT(ce->used && !ce->busy);
  slot_free(e, ce->slot);
  ce->used = false;
  ce->n_tok = 0;
  if (eviction) e->d.cache_evictions++;
}

/* The least recently used idle entry, or NULL. */
static cache_ent *cache_lru(engine *e) {
  cache_ent *best = NULL;
  for (int i = 0; i < e->n_cache; i++) {
    cache_ent *c = &e->cache[i];
    if (c->used && !c->busy && (!best || c->last_ns < best->last_ns)) best = c;
  }
  return best;
}

/* KV bytes of the idle entries (a busy entry's KV is a running sequence's). */
static size_t cache_bytes(const engine *e) {
  size_t n = 0;
  for (int i = 0; i < e->n_cache; i++)
    if (e->cache[i].used && !e->cache[i].busy) n += (size_t)e->cache[i].n_tok * e->tok_bytes;
  return n;
}

/* Evicts idle entries idle for the TTL; returns the monotonic time of the
 * next expiry (0 = none). Bounded: one pass over the records. */
static uint64_t cache_expire(engine *e, uint64_t now) {
  uint64_t ttl = (uint64_t)(e->o.prompt_cache_ttl_s * 1e9), next = 0;
  for (int i = 0; i < e->n_cache; i++) {
    cache_ent *c = &e->cache[i];
    if (!c->used || c->busy) continue;
    if (now - c->last_ns >= ttl) {
      cache_drop(e, c, true);
    } else {
      uint64_t at = c->last_ns + ttl;
      if (!next || at < next) next = at;
    }
  }
  return next;
}

/* Admission of a keyed request: take its idle entry's slot and keep the
 * longest common prefix (at least the last prompt token is evaluated, for
 * its logits). A busy entry is never shared: the request runs uncached. */
static void cache_take(engine *e, engine_req *r) {
  e->d.cache_requests++;
  cache_ent *ce = cache_find(e, r->key);
  int c = 0;
  if (ce && !ce->busy) {
    int lim = ce->n_tok < r->n_prompt - 1 ? ce->n_tok : r->n_prompt - 1;
    while (c < lim && ce->toks[c] == r->prompt[c]) c++;
    ce->busy = true;
    r->ent = ce;
    r->slot = ce->slot;
    PW_ASSERT(model_kv_len(e->kv, r->slot) >= c);
    model_kv_truncate(e->kv, r->slot, c);
    if (e->dkv && model_kv_len(e->dkv, r->slot) > c) model_kv_truncate(e->dkv, r->slot, c);
  }
  r->n_fed = c;
  r->u.cached_tokens = c;
  if (c > 0)
    e->d.cache_hits++;
  else
    e->d.cache_misses++;
  e->d.cache_reused += (uint64_t)c;
  e->d.cache_evaluated += (uint64_t)(r->n_prompt - c);
}

/* The end of a keyed request decides where its slot goes. Kept: the
 * positions whose KV is valid (n_fed: prompt and output but the last
 * token), after a normal end or a cancellation; an error drops what the
 * request touched. The latest request to finish owns the key's entry: it
 * replaces an idle one; if another running request holds the entry, the
 * finishing one (which ran uncached) leaves it alone. */
static void cache_store(engine *e, engine_req *r, int status) {
  int slot = r->slot;
  int n = r->n_fed;
  PW_ASSERT(model_kv_len(e->kv, slot) >= n);
  bool keep = status == 0 && n > 0 && (size_t)n * e->tok_bytes <= e->o.prompt_cache_bytes;
  cache_ent *ce = r->ent ? r->ent : cache_find(e, r->key);
  r->slot = -1;
  if (ce && ce->busy && ce != r->ent) { /* someone else's running entry */
    slot_free(e, slot);
    return;
  }
  if (ce == r->ent && ce) { /* ours: it comes back idle or goes */
    ce->busy = false;
    r->ent = NULL;
    if (!keep) {
      cache_drop(e, ce, false);
      return;
    }
  } else if (ce) { /* an idle entry of the same key: replaced */
    if (!keep) {
      slot_free(e, slot);
      return;
    }
    slot_free(e, ce->slot);
    ce->slot = slot;
  } else {
    if (!keep) {
      slot_free(e, slot);
      return;
    }
    for (int i = 0; i < e->n_cache && !ce; i++)
      if (!e->cache[i].used) ce = &e->cache[i];
    if (!ce) {
      cache_ent *old = cache_lru(e);
      if (!old) { /* every entry is in use */
        slot_free(e, slot);
        return;
      }
      cache_drop(e, old, true);
      ce = old;
    }
    ce->used = true;
    ce->busy = false;
    memcpy(ce->key, r->key, 32);
  }
  ce->slot = slot;
  ce->n_tok = n;
  memcpy(ce->toks, r->toks, (size_t)n * sizeof *ce->toks);
  model_kv_truncate(e->kv, slot, n);
  if (e->dkv && model_kv_len(e->dkv, slot) > n) model_kv_truncate(e->dkv, slot, n);
  ce->last_ns = pw_now_ns();
  /* The byte bound: least recently used first (this entry is the most
   * recent, and fits alone by the check above). */
  while (cache_bytes(e) > e->o.prompt_cache_bytes) {
    cache_ent *old = cache_lru(e);
    if (!old) break;
    cache_drop(e, old, true);
  }
}

/* Gives r a KV slot: its key's entry's (keeping the common prefix) or a
 * free one. */
static void slot_take(engine *e, engine_req *r) {
  r->slot = -1;
  r->n_fed = 0;
  if (r->has_key && !r->embedding && e->n_cache > 0) cache_take(e, r);
  if (r->slot < 0) {
    PW_ASSERT(e->n_free > 0);
    r->slot = e->free_slots[--e->n_free];
    PW_ASSERT(model_kv_len(e->kv, r->slot) == 0);
  }
}

static void slot_release(engine *e, engine_req *r, int status) {
  if (r->slot < 0) return;
  if (r->has_key && !r->embedding && e->n_cache > 0) {
    cache_store(e, r, status);
  } else {
    slot_free(e, r->slot);
    r->slot = -1;
  }
}

const int engine_batch_le[ENGINE_BATCH_BUCKETS] = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512};

/* Adds the step's counters to the shared statistics; e->mu held. */
static void stats_flush_locked(engine *e) {
  engine_stats *s = &e->st;
  stat_delta *d = &e->d;
  s->prompt_tokens_total += d->prompt_tokens;
  s->generated_tokens_total += d->generated_tokens;
  s->batch_entries_total += d->batch_entries;
  s->spec_drafted_total += d->spec_drafted;
  s->spec_accepted_total += d->spec_accepted;
  s->spec_emitted_total += d->spec_emitted;
  s->spec_target_passes_total += d->spec_target_passes;
  s->spec_rounds_total += d->spec_rounds;
  s->spec_fallbacks_total += d->spec_fallbacks;
  s->cache_requests_total += d->cache_requests;
  s->cache_hits_total += d->cache_hits;
  s->cache_misses_total += d->cache_misses;
  s->cache_reused_tokens_total += d->cache_reused;
  s->cache_evaluated_tokens_total += d->cache_evaluated;
  s->cache_evictions_total += d->cache_evictions;
  memset(d, 0, sizeof *d);
  int n_ent = 0;
  size_t held = 0;
  for (int i = 0; i < e->n_cache; i++)
    if (e->cache[i].used) {
      n_ent++;
      if (!e->cache[i].busy) held += (size_t)e->cache[i].n_tok;
    }
  for (int i = 0; i < e->n_run; i++) held += (size_t)e->run[i]->n_fed;
  s->cache_entries = n_ent;
  s->cache_bytes = cache_bytes(e);
  s->kv_bytes_in_use = held * e->tok_bytes;
}

/* ---- engine thread: ending requests ------------------------------------ */

/* Ends r (already out of the run list or the queue): hands its KV slot to
 * the pool or the prefix cache, pushes DONE (status 0) or ERROR (status <
 * 0), updates the counters and drops the engine's reference. */
static void seq_end(engine *e, engine_req *r, engine_finish finish, int status, const char *msg) {
  req_state was = r->state;
  slot_release(e, r, status);
  r->state = REQ_ENDED;
  engine_event *ev = &e->ev;
  if (status < 0) {
    ev_clear(ev, ENGINE_EV_ERROR);
    ev->status = status;
    snprintf(ev->message, sizeof ev->message, "%s", msg ? msg : pw_strerror(status));
  } else {
    ev_clear(ev, ENGINE_EV_DONE);
    ev->finish = finish;
    ev->usage = r->u;
    ev->usage.prompt_tokens = r->n_prompt;
    ev->usage.completion_tokens = r->n_gen;
    if (!r->embedding && finish != ENGINE_FINISH_CANCEL) {
      /* Text still held back (an unfinished UTF-8 character, a stop-string
       * prefix that never completed) is released with DONE. */
      int n = tok_detok_flush(&r->dt, e->dbuf, e->dbuf_cap);
      bool matched = txt_feed(e, r, e->dbuf, n > 0 ? (size_t)n : 0);
      if (r->has_stop && !matched) txt_append(r, e->sbuf, stop_flush(&r->sm, e->sbuf));
      take_text(r, ev);
    }
    if (r->embedding && finish == ENGINE_FINISH_STOP) {
      pthread_mutex_lock(&r->mu);
      r->embd_ready = true;
      pthread_mutex_unlock(&r->mu);
    }
  }
  /* Counters first: a consumer that sees the final event and submits again
   * at once must find the slot free and the statistics current. */
  pthread_mutex_lock(&e->mu);
  if (was == REQ_ACTIVE) e->n_active--;
  if (status == PW_ETIMEOUT) e->st.requests_timeout++;
  if (finish == ENGINE_FINISH_CANCEL) e->st.requests_cancelled++;
  stats_flush_locked(e);
  pthread_cond_broadcast(&e->idle_cv);
  pthread_mutex_unlock(&e->mu);
  req_push(r, ev);
  req_unref(r);
}

/* Ends r, which is in the run list (keeps admission order of the rest). */
static void run_end_req(engine *e, engine_req *r, engine_finish finish, int status, const char *msg) {
  int i = 0;
  while (i < e->n_run && e->run[i] != r) i++;
  PW_ASSERT(i < e->n_run);
  memmove(e->run + i, e->run + i + 1, (size_t)(e->n_run - i - 1) * sizeof *e->run);
  e->n_run--;
  seq_end(e, r, finish, status, msg);
}

/* ---- engine thread: one token ------------------------------------------ */

/* Samples from r's logits row and emits the token (exactly what a
 * non-speculative step does with that row). *tok gets the token. Returns
 * true while r keeps generating; false once it has ended (the caller
 * removes it). */
static bool seq_emit(engine *e, engine_req *r, const float *row, int32_t *tok_out, engine_finish *finish,
                     int *status, const char **msg) {
  int32_t tok = pw_sampler_sample(r->smp, row);
  *tok_out = tok;
  if (tok < 0) {
    *status = PW_ERANGE;
    *msg = "sampling failed: logit_bias and penalties left no token to choose";
    return false;
  }
  engine_event *ev = &e->ev;
  ev_clear(ev, ENGINE_EV_TOKEN);
  ev->token = tok;
  if (r->want_logprobs || r->n_logprobs > 0) {
    int n = pw_sampler_logprobs(row, e->n_vocab, tok, r->n_logprobs, ev->top, &ev->logprob);
    ev->n_top = n > 0 ? n : 0;
  }
  pw_sampler_accept(r->smp, tok);
  r->toks[r->n_prompt + r->n_gen] = tok;
  r->n_gen++;
  e->d.generated_tokens++;
  r->last = tok;
  if (!r->ignore_eos && tok_is_eog(e->vocab, tok)) {
    /* End of generation: not emitted as text. */
    *finish = ENGINE_FINISH_STOP;
    return false;
  }
  int n = tok_detok_feed(&r->dt, tok, e->dbuf, e->dbuf_cap);
  bool matched = txt_feed(e, r, e->dbuf, n > 0 ? (size_t)n : 0);
  take_text(r, ev);
  if (!req_push(r, ev)) {
    *status = PW_ELIMIT;
    *msg = "the client fell too far behind the generated events; request cancelled";
    return false;
  }
  if (matched) {
    *finish = ENGINE_FINISH_STOP;
    return false;
  }
  if (r->n_gen >= r->max_tokens) {
    *finish = ENGINE_FINISH_LENGTH;
    return false;
  }
  return true;
}

/* ---- engine thread: speculation ------------------------------------------- */

/* Most proposals r may get this round before the step budget: its width,
 * and one less than the tokens it may still emit (a round emits the
 * accepted proposals plus one). Positions stay inside the context because
 * n_prompt + max_tokens <= n_ctx. */
static int spec_want(const engine *e, const engine_req *r) {
  if (!r->spec) return 0;
  int k = r->spec_k;
  int left = r->max_tokens - r->n_gen - 1;
  if (k > left) k = left;
  (void)e;
  return k > 0 ? k : 0;
}

/* Prompt-lookup / n-gram proposals: find the sequence's last n-gram
 * (n = SPEC_NGRAM_MAX down to 1) in the prompt (prompt-lookup) or in
 * everything before it (n-gram), latest occurrence first, and copy up to k
 * tokens that followed it. Allocation-free; O(n * length). */
static int spec_lookup(const engine *e, engine_req *r, int k) {
  int len = r->n_prompt + r->n_gen; /* toks[len - 1] = last */
  int end = e->o.spec_mode == ENGINE_SPEC_PROMPT_LOOKUP ? r->n_prompt : len;
  const int32_t *t = r->toks;
  for (int n = len < SPEC_NGRAM_MAX ? len : SPEC_NGRAM_MAX; n >= 1; n--) {
    const int32_t *suf = t + len - n;
    /* i + n < end: at least one token follows the match; this also keeps
     * the suffix from matching itself. */
    for (int i = end - n - 1; i >= 0; i--) {
      if (t[i] != suf[0] || memcmp(t + i, suf, (size_t)n * sizeof *t) != 0) continue;
      int c = end - (i + n);
      if (c > k) c = k;
      memcpy(r->prop, t + i + n, (size_t)c * sizeof *t);
      return c;
    }
  }
  return 0;
}

/* Draft-model proposals for every run-list sequence with n_prop > 0 (the
 * planned count): pass 0 feeds what the draft has not seen yet (prompt,
 * committed tokens, and the last token, whose logits give p0), pass j feeds
 * p(j-1) to get p(j); each pass is one batched draft forward over the
 * sequences still drafting. Greedy. A sequence whose catch-up does not fit
 * the draft batch feeds part of it and proposes nothing this round; a
 * failed draft pass only shortens the proposals. */
/* The draft's greedy choice from its logits, if it is confident enough to
 * propose it: its softmax probability at least SPEC_DRAFT_PMIN. Proposals
 * the draft itself doubts are mostly rejected and each costs a draft pass
 * and a verified position. */
static bool draft_pick(const engine *e, const float *l, int32_t *tok) {
  float lp;
  *tok = pw_argmax(l, e->n_vocab);
  return pw_sampler_logprobs(l, e->n_vocab, *tok, 0, NULL, &lp) >= 0 && lp >= logf((float)SPEC_DRAFT_PMIN);
}

static void spec_draft(engine *e) {
  int cap = e->o.step_tokens, n = 0, rows = 0, kmax = 0;
  for (int i = 0; i < e->n_run; i++) {
    engine_req *r = e->run[i];
    r->draft_row = -1;
    if (r->n_prop <= 0 || n >= cap) {
      r->n_prop = 0;
      continue;
    }
    int have = model_kv_len(e->dkv, r->slot);
    int need = r->n_fed + 1 - have; /* toks[have .. n_fed] */
    PW_ASSERT(have <= r->n_fed && need >= 1);
    int c = need;
    if (n + c > cap) {
      c = cap - n < need - 1 ? cap - n : need - 1;
      r->n_prop = 0;
    } else {
      r->draft_row = rows++;
      if (r->n_prop > kmax) kmax = r->n_prop;
    }
    for (int j = 0; j < c; j++)
      e->dents[n++] = (model_entry){.seq = r->slot, .pos = have + j, .token = r->toks[have + j],
                                    .want_logits = j == need - 1};
  }
  if (n == 0) return;
  int rc = model_forward(e->dctx, e->dkv, e->dents, n, e->dlogits, NULL, e->err);
  if (rc < 0) {
    pw_log(PW_LOG_WARN, "engine: draft pass failed: %s", e->err);
    for (int i = 0; i < e->n_run; i++) e->run[i]->n_prop = 0;
    return;
  }
  for (int i = 0; i < e->n_run; i++) {
    engine_req *r = e->run[i];
    if (r->draft_row >= 0 && !draft_pick(e, e->dlogits + (size_t)r->draft_row * e->n_vocab, &r->prop[0]))
      r->n_prop = 0;
  }
  for (int j = 1; j < kmax; j++) {
    n = 0;
    for (int i = 0; i < e->n_run; i++) {
      engine_req *r = e->run[i];
      r->draft_row = -1;
      if (r->n_prop <= j) continue;
      r->draft_row = n;
      e->dents[n++] = (model_entry){.seq = r->slot, .pos = r->n_fed + j, .token = r->prop[j - 1], .want_logits = true};
    }
    if (n == 0) break;
    rc = model_forward(e->dctx, e->dkv, e->dents, n, e->dlogits, NULL, e->err);
    for (int i = 0; i < e->n_run; i++) {
      engine_req *r = e->run[i];
      if (r->draft_row < 0) continue;
      if (rc < 0 || !draft_pick(e, e->dlogits + (size_t)r->draft_row * e->n_vocab, &r->prop[j])) r->n_prop = j;
    }
    if (rc < 0) {
      pw_log(PW_LOG_WARN, "engine: draft pass failed: %s", e->err);
      break;
    }
  }
}

/* The adaptive width after a round of k proposals with a accepted: grow
 * after full acceptance, move towards a + 1 after a rejection; fall back to
 * target-only decoding when the acceptance over the last SPEC_WINDOW rounds
 * stays below SPEC_MIN_RATE, so speculation never makes a request much
 * slower than without it. */
static void spec_adapt(engine *e, engine_req *r, int k, int a) {
  int K = e->o.spec_draft_max;
  if (a >= k) {
    r->spec_k += r->spec_k / 2 > 1 ? r->spec_k / 2 : 1;
    if (r->spec_k > K) r->spec_k = K;
  } else {
    r->spec_k = (r->spec_k + a + 1) / 2;
    if (r->spec_k < 1) r->spec_k = 1;
  }
  r->win_d[r->win_pos] = k;
  r->win_a[r->win_pos] = a;
  r->win_pos = (r->win_pos + 1) % SPEC_WINDOW;
  if (r->win_n < SPEC_WINDOW) r->win_n++;
  if (r->win_n == SPEC_WINDOW) {
    int sd = 0, sa = 0;
    for (int i = 0; i < SPEC_WINDOW; i++) {
      sd += r->win_d[i];
      sa += r->win_a[i];
    }
    if (sa < SPEC_MIN_RATE * sd) {
      r->spec = false;
      e->d.spec_fallbacks++;
    }
  }
}

/* Verifies a decode round of r: rows [1 + n_prop][n_vocab] are the target's
 * logits after last, p0, ..., p(n_prop-1). Emits tokens while the target's
 * choice agrees with the proposal, then one more (correction or bonus),
 * stopping early when the request ends, and truncates the KV to the commit.
 * Returns false when r has ended. */
static bool seq_verify(engine *e, engine_req *r, const float *rows, engine_finish *fin, int *st, const char **msg) {
  int k = r->n_prop, m = 0, a = 0;
  int base = r->n_fed; /* position of last */
  bool alive = true;
  r->u.target_passes++;
  if (r->spec || k > 0) e->d.spec_target_passes++;
  for (int i = 0; i <= k; i++) {
    int32_t tok;
    alive = seq_emit(e, r, rows + (size_t)i * e->n_vocab, &tok, fin, st, msg);
    m++;
    bool agree = i < k && tok == r->prop[i];
    if (agree) a++;
    if (!alive || !agree) break;
  }
  /* Committed: last and the emitted tokens but the newest one (whose KV is
   * not written yet, or was written for a proposal that lost). */
  r->n_fed = base + m;
  model_kv_truncate(e->kv, r->slot, r->n_fed);
  if (e->dkv && model_kv_len(e->dkv, r->slot) > r->n_fed) model_kv_truncate(e->dkv, r->slot, r->n_fed);
  if (k > 0) {
    r->u.spec_drafted += k;
    r->u.spec_accepted += a;
    r->u.spec_emitted += m;
    e->d.spec_drafted += (uint64_t)k;
    e->d.spec_accepted += (uint64_t)a;
    e->d.spec_emitted += (uint64_t)m;
    e->d.spec_rounds++;
    if (alive && r->spec) spec_adapt(e, r, k, a);
  }
  return alive;
}

/* Adds the final hidden states of a chunk (positions in order) to the
 * running sum; the order of additions is the prompt order whatever the
 * chunking, so the result does not depend on the batch. */
static void embd_accumulate(engine *e, engine_req *r, const float *rows, int n) {
  for (int t = 0; t < n; t++) {
    const float *h = rows + (size_t)t * e->n_embd;
    for (int i = 0; i < e->n_embd; i++) r->embd_acc[i] += h[i];
  }
}

static void embd_finish(engine *e, engine_req *r) {
  double ss = 0;
  for (int i = 0; i < e->n_embd; i++) {
    double v = r->embd_acc[i] / r->n_prompt;
    r->embd_acc[i] = v;
    ss += v * v;
  }
  double inv = ss > 0 ? 1.0 / sqrt(ss) : 0.0;
  for (int i = 0; i < e->n_embd; i++) r->embd[i] = (float)(r->embd_acc[i] * inv);
}

/* ---- engine thread: one step --------------------------------------------- */

/* One scheduler step over the run list: drop cancelled sequences; plan the
 * batch: one decode entry per generating sequence first, then speculative
 * proposals (at most half the remaining budget while prompts wait, so
 * prefill keeps moving), then prompt chunks oldest first within the step
 * budget; draft if in draft mode; run the batch; verify and sample.
 * Embedding prompts go in a second batch of the same step that asks for
 * hidden states but no logits. */
static void engine_step(engine *e) {
  for (int i = 0; i < e->n_run;) {
    if (atomic_load(&e->run[i]->cancel))
      run_end_req(e, e->run[i], ENGINE_FINISH_CANCEL, 0, NULL);
    else
      i++;
  }
  if (e->n_run == 0) return;

  int budget = e->o.step_tokens;
  int n_dec = 0;
  bool waiting = false;
  for (int i = 0; i < e->n_run; i++) {
    engine_req *r = e->run[i];
    r->n_prop = 0;
    r->step_n = r->step_rows = 0;
    if (r->embedding || r->n_fed < r->n_prompt)
      waiting = true;
    else
      n_dec++;
  }
  budget -= n_dec;
  int extra = waiting ? budget / 2 : budget;
  if (e->o.spec_mode != ENGINE_SPEC_OFF) {
    for (int i = 0; i < e->n_run && extra > 0; i++) {
      engine_req *r = e->run[i];
      if (r->embedding || r->n_fed < r->n_prompt) continue;
      int k = spec_want(e, r);
      if (k > extra) k = extra;
      if (k > 0 && e->o.spec_mode != ENGINE_SPEC_DRAFT) k = spec_lookup(e, r, k);
      r->n_prop = k;
      extra -= k;
    }
    if (e->o.spec_mode == ENGINE_SPEC_DRAFT) spec_draft(e);
  }

  int n = 0, ne = 0, rows = 0, n_prefill_tokens = 0;
  e->n_part = 0;
  for (int i = 0; i < e->n_run; i++) {
    engine_req *r = e->run[i];
    if (r->embedding || r->n_fed < r->n_prompt) continue;
    r->step_row = rows;
    r->step_n = r->step_rows = 1 + r->n_prop;
    rows += r->step_rows;
    e->ents[n++] = (model_entry){.seq = r->slot, .pos = r->n_fed, .token = r->last, .want_logits = true};
    for (int j = 0; j < r->n_prop; j++)
      e->ents[n++] = (model_entry){.seq = r->slot, .pos = r->n_fed + 1 + j, .token = r->prop[j], .want_logits = true};
    budget -= r->n_prop;
    e->part[e->n_part++] = r;
  }
  PW_ASSERT(budget >= 0);
  for (int i = 0; i < e->n_run && budget > 0; i++) {
    engine_req *r = e->run[i];
    if (r->n_fed >= r->n_prompt) continue;
    int c = r->n_prompt - r->n_fed;
    if (c > budget) c = budget;
    budget -= c;
    n_prefill_tokens += c;
    bool last_chunk = r->n_fed + c == r->n_prompt;
    if (!r->embedding) {
      r->step_n = c;
      r->step_rows = last_chunk ? 1 : 0;
      r->step_row = rows;
      rows += r->step_rows;
      e->part[e->n_part++] = r;
    }
    for (int k = 0; k < c; k++) {
      int pos = r->n_fed + k;
      model_entry en = {.seq = r->slot, .pos = pos, .token = r->prompt[pos],
                        .want_logits = r->embedding || pos == r->n_prompt - 1};
      if (r->embedding) {
        e->eents[ne] = en;
        e->eowner[ne++] = r;
      } else {
        e->ents[n++] = en;
      }
    }
  }
  PW_ASSERT(rows <= e->rows_cap);
  e->d.prompt_tokens += (uint64_t)n_prefill_tokens;
  e->d.batch_entries += (uint64_t)(n + ne);

  int rc = 0;
  if (n > 0) {
    e->n_passes++;
    if (e->o.fail_pass > 0 && e->n_passes == e->o.fail_pass)
      rc = pw_seterr(e->err, PW_EINTERNAL, "forward pass %ld failed (injected)", e->n_passes);
    else
      rc = model_forward(e->ctx, e->kv, e->ents, n, e->logits, NULL, e->err);
    if (rc < 0) {
      /* A failed batch fails its sequences (each stays at its last commit
       * until it ends); the others carry on. */
      pw_log(PW_LOG_ERROR, "engine: forward failed: %s", e->err);
      for (int p = 0; p < e->n_part; p++) run_end_req(e, e->part[p], ENGINE_FINISH_NONE, rc, e->err);
    } else {
      for (int p = 0; p < e->n_part; p++) {
        engine_req *r = e->part[p];
        const float *lg = e->logits + (size_t)r->step_row * e->n_vocab;
        engine_finish fin = ENGINE_FINISH_NONE;
        int st = 0;
        const char *msg = NULL;
        bool alive = true;
        if (r->n_fed < r->n_prompt) { /* a prompt chunk */
          r->n_fed += r->step_n;
          if (r->step_rows > 0) {
            int32_t tok;
            r->u.target_passes++;
            if (r->spec) e->d.spec_target_passes++;
            alive = seq_emit(e, r, lg, &tok, &fin, &st, &msg);
          }
        } else {
          alive = seq_verify(e, r, lg, &fin, &st, &msg);
        }
        if (!alive) run_end_req(e, r, fin, st, msg);
      }
    }
  }
  if (ne > 0) {
    rc = model_forward(e->ctx, e->kv, e->eents, ne, NULL, e->hidden, e->err);
    for (int t = 0; t < ne;) {
      engine_req *r = e->eowner[t];
      int c = 0;
      while (t + c < ne && e->eowner[t + c] == r) c++;
      if (rc == 0) {
        embd_accumulate(e, r, e->hidden + (size_t)t * e->n_embd, c);
        r->n_fed += c;
      }
      if (rc < 0 || r->n_fed == r->n_prompt) {
        if (rc == 0) embd_finish(e, r);
        run_end_req(e, r, ENGINE_FINISH_STOP, rc, rc < 0 ? e->err : NULL);
      }
      t += c;
    }
  }

  pthread_mutex_lock(&e->mu);
  e->st.steps_total++;
  int bk = 0;
  while (bk < ENGINE_BATCH_BUCKETS && n + ne > engine_batch_le[bk]) bk++;
  e->st.batch_steps_by_size[bk]++;
  stats_flush_locked(e);
  pthread_mutex_unlock(&e->mu);
}

/* ---- engine thread: admission and the loop ------------------------------- */

static void seq_start(engine *e, engine_req *r) {
  PW_ASSERT(e->n_run < e->o.max_active);
  slot_take(e, r);
  r->state = REQ_ACTIVE;
  e->run[e->n_run++] = r;
}

static void *engine_main(void *arg) {
  engine *e = arg;
  pthread_mutex_lock(&e->mu);
  for (;;) {
    /* Idle: sleep until work arrives, waking for cache expiries (so idle
     * entries leave on time and the statistics say so). */
    for (;;) {
      uint64_t next = e->n_cache > 0 ? cache_expire(e, pw_now_ns()) : 0;
      stats_flush_locked(e);
      if (e->stop || e->q_head || e->n_run > 0) break;
      if (!next) {
        pthread_cond_wait(&e->work_cv, &e->mu);
      } else {
        uint64_t now = pw_now_ns();
        struct timespec ts = abs_after_ns(next > now ? next - now : 0);
        pthread_cond_timedwait(&e->work_cv, &e->mu, &ts);
      }
    }
    if (e->stop) break;
    /* Under the lock: take cancelled and expired requests out of the queue,
     * then admit the oldest waiting ones into free run places. */
    uint64_t now = pw_now_ns();
    engine_req *gone = NULL, *admit = NULL, **gone_tail = &gone, **admit_tail = &admit;
    engine_req **pp = &e->q_head;
    e->q_tail = NULL;
    while (*pp) {
      engine_req *r = *pp;
      bool expired = r->deadline_ns && now >= r->deadline_ns;
      if (atomic_load(&r->cancel) || expired) {
        *pp = r->next;
        r->next = NULL;
        *gone_tail = r;
        gone_tail = &r->next;
        e->n_queued--;
      } else {
        e->q_tail = r;
        pp = &r->next;
      }
    }
    int n_admit = 0;
    while (e->q_head && n_admit < e->o.max_active - e->n_run) {
      engine_req *r = e->q_head;
      e->q_head = r->next;
      if (!e->q_head) e->q_tail = NULL;
      r->next = NULL;
      *admit_tail = r;
      admit_tail = &r->next;
      e->n_queued--;
      e->n_active++;
      n_admit++;
    }
    pthread_mutex_unlock(&e->mu);

    for (engine_req *r = gone, *nx; r; r = nx) {
      nx = r->next;
      if (atomic_load(&r->cancel)) {
        seq_end(e, r, ENGINE_FINISH_CANCEL, 0, NULL);
      } else {
        snprintf(e->err, sizeof e->err, "deadline passed while waiting for a free slot (%d active)", e->n_run);
        seq_end(e, r, ENGINE_FINISH_NONE, PW_ETIMEOUT, e->err);
      }
    }
    for (engine_req *r = admit, *nx; r; r = nx) {
      nx = r->next;
      r->next = NULL;
      seq_start(e, r);
    }
    engine_step(e);
    pthread_mutex_lock(&e->mu);
  }
  pthread_mutex_unlock(&e->mu);

  /* Stopping: everything still running or waiting ends with an error. */
  while (e->n_run > 0) run_end_req(e, e->run[e->n_run - 1], ENGINE_FINISH_NONE, PW_ECANCELED, "the engine stopped");
  pthread_mutex_lock(&e->mu);
  engine_req *q = e->q_head;
  e->q_head = e->q_tail = NULL;
  e->n_queued = 0;
  pthread_mutex_unlock(&e->mu);
  for (engine_req *r = q, *nx; r; r = nx) {
    nx = r->next;
    seq_end(e, r, ENGINE_FINISH_NONE, PW_ECANCELED, "the engine stopped");
  }
  return NULL;
}

/* ---- lifecycle ------------------------------------------------------------- */

static void model_id_from_path(const char *path, char *out, size_t cap) {
  const char *b = strrchr(path, '/');
  b = b ? b + 1 : path;
  size_t n = strlen(b);
  if (n > 5 && strcmp(b + n - 5, ".gguf") == 0) n -= 5;
  if (n >= cap) n = cap - 1;
  memcpy(out, b, n);
  out[n] = 0;
}

int engine_spec_parse(const char *name) {
  if (!name) return -1;
  for (int m = ENGINE_SPEC_OFF; m <= ENGINE_SPEC_DRAFT; m++)
    if (strcmp(name, engine_spec_name(m)) == 0) return m;
  return -1;
}

const char *engine_spec_name(int mode) {
  switch (mode) {
  case ENGINE_SPEC_OFF: return "off";
  case ENGINE_SPEC_PROMPT_LOOKUP: return "prompt-lookup";
  case ENGINE_SPEC_NGRAM: return "ngram";
  case ENGINE_SPEC_DRAFT: return "draft";
  default: return "unknown";
  }
}

/* Loads the draft model and checks that it speaks the target's vocabulary:
 * the same size and the same text for every token (so a proposed id means
 * the same piece to both models). */
static int draft_load(engine *e, const char *path, int n_threads, char *err) {
  char derr[PW_ERRMAX] = "";
  model_opts mo = {.n_threads = n_threads, .pool = model_pool(e->m)};
  int rc = model_load(path, &mo, &e->dm, derr);
  if (rc < 0) return pw_seterr(err, rc, "engine: draft model %s: %s", path, derr);
  tok_vocab *dv = NULL;
  if ((rc = tok_vocab_load(model_gguf(e->dm), &dv, derr)) < 0)
    return pw_seterr(err, rc, "engine: draft model %s: %s", path, derr);
  int32_t nt = tok_n_vocab(e->vocab), nd = tok_n_vocab(dv);
  if (nd != nt || model_hp(e->dm)->n_vocab != e->n_vocab) {
    rc = pw_seterr(err, PW_EUNSUPPORTED,
                   "engine: draft model %s has a different vocabulary (%d tokens, the target has %d): "
                   "speculative decoding needs the same tokenizer",
                   path, nd, nt);
    goto out;
  }
  for (int32_t id = 0; id < nt; id++) {
    size_t la = 0, lb = 0;
    const char *a = tok_text(e->vocab, id, &la), *b = tok_text(dv, id, &lb);
    if (la != lb || (la > 0 && memcmp(a, b, la) != 0)) {
      rc = pw_seterr(err, PW_EUNSUPPORTED,
                     "engine: draft model %s has a different vocabulary (token %d is \"%.*s\", the target's is "
                     "\"%.*s\"): speculative decoding needs the same tokenizer",
                     path, id, (int)(lb < 40 ? lb : 40), b ? b : "", (int)(la < 40 ? la : 40), a ? a : "");
      goto out;
    }
  }
  rc = 0;
out:
  tok_vocab_destroy(dv);
  return rc;
}

int engine_create(const engine_opts *opts, engine **out, char *err) {
  *out = NULL;
  if (!opts || !opts->model_path || !*opts->model_path) return pw_seterr(err, PW_EINVAL, "engine: no model path");
  engine_opts o = *opts;
  if (o.n_threads == 0) o.n_threads = 2;
  if (o.max_active == 0) o.max_active = 4;
  if (o.max_queue == 0) o.max_queue = 16;
  if (o.step_tokens == 0) o.step_tokens = 512;
  if (o.max_events == 0) o.max_events = 256;
  /* 7: a verification pass of 1 + 7 tokens fills the kernels' 8-token
   * groups; a 9th token costs a second pass over the weights (measured
   * 20% more time for that one token on a 0.5B model) */
  if (o.spec_draft_max == 0) o.spec_draft_max = 7;
  if (o.prompt_cache_entries == 0) o.prompt_cache_entries = 8;
  if (o.prompt_cache_bytes == 0) o.prompt_cache_bytes = (size_t)1 << 30;
  if (o.prompt_cache_ttl_s == 0) o.prompt_cache_ttl_s = 600;
  if (o.n_threads < 1 || o.n_threads > 512)
    return pw_seterr(err, PW_EINVAL, "engine: n_threads %d out of range [1, 512]", o.n_threads);
  if (o.max_active < 1 || o.max_active > 1024)
    return pw_seterr(err, PW_EINVAL, "engine: max_active %d out of range [1, 1024]", o.max_active);
  if (o.max_queue < 0 || o.max_queue > 1 << 20)
    return pw_seterr(err, PW_EINVAL, "engine: max_queue %d out of range", o.max_queue);
  if (o.n_ctx < 0 || o.n_ctx > 1 << 22) return pw_seterr(err, PW_EINVAL, "engine: n_ctx %d out of range", o.n_ctx);
  if (o.step_tokens < 1 || o.step_tokens > 65536)
    return pw_seterr(err, PW_EINVAL, "engine: step_tokens %d out of range [1, 65536]", o.step_tokens);
  if (o.max_events < 2 || o.max_events > 1 << 20)
    return pw_seterr(err, PW_EINVAL, "engine: max_events %d out of range [2, 1048576]", o.max_events);
  if (o.spec_mode < ENGINE_SPEC_OFF || o.spec_mode > ENGINE_SPEC_DRAFT)
    return pw_seterr(err, PW_EINVAL, "engine: unknown speculation mode %d", o.spec_mode);
  if (o.spec_draft_max < 1 || o.spec_draft_max > SPEC_MAX_K)
    return pw_seterr(err, PW_EINVAL, "engine: spec_draft_max %d out of range [1, %d]", o.spec_draft_max, SPEC_MAX_K);
  if (o.spec_mode == ENGINE_SPEC_DRAFT && (!o.spec_draft_model || !*o.spec_draft_model))
    return pw_seterr(err, PW_EINVAL, "engine: speculation mode \"draft\" needs a draft model");
  if (o.prompt_cache_entries < -1 || o.prompt_cache_entries > CACHE_MAX_ENTRIES)
    return pw_seterr(err, PW_EINVAL, "engine: prompt_cache_entries %d out of range [-1, %d]", o.prompt_cache_entries,
                     CACHE_MAX_ENTRIES);
  if (!(o.prompt_cache_ttl_s > 0) || o.prompt_cache_ttl_s > 1e9)
    return pw_seterr(err, PW_EINVAL, "engine: prompt_cache_ttl_s %g out of range", o.prompt_cache_ttl_s);
  /* Every active sequence must fit its decode token into one step. */
  if (o.step_tokens < o.max_active) o.step_tokens = o.max_active;

  engine *e = calloc(1, sizeof *e);
  if (!e) return pw_seterr(err, PW_ENOMEM, "engine: out of memory");
  pthread_mutex_init(&e->mu, NULL);
  pthread_mutex_init(&e->sha_mu, NULL);
  cond_init_monotonic(&e->work_cv);
  cond_init_monotonic(&e->idle_cv);
  int rc;
  model_opts mo = {.n_threads = o.n_threads};
  if ((rc = model_load(o.model_path, &mo, &e->m, err)) < 0) goto fail;
  const model_hparams *hp = model_hp(e->m);
  if ((rc = tok_vocab_load(model_gguf(e->m), &e->vocab, err)) < 0) goto fail;
  e->n_vocab = hp->n_vocab;
  e->n_embd = hp->n_embd;
  e->n_ctx = o.n_ctx ? o.n_ctx : (hp->n_ctx_train < 4096 ? hp->n_ctx_train : 4096);
  o.n_ctx = e->n_ctx;
  e->n_cache = o.prompt_cache_entries > 0 ? o.prompt_cache_entries : 0;
  e->n_slots = o.max_active + e->n_cache;
  if ((rc = model_kv_create(e->m, e->n_slots, e->n_ctx, &e->kv, err)) < 0) goto fail;
  if ((rc = model_ctx_create(e->m, o.step_tokens, e->n_ctx, &e->ctx, err)) < 0) goto fail;
  e->tok_bytes = model_kv_bytes(e->kv) / ((size_t)e->n_slots * e->n_ctx);
  if (o.spec_mode == ENGINE_SPEC_DRAFT) {
    if ((rc = draft_load(e, o.spec_draft_model, o.n_threads, err)) < 0) goto fail;
    if ((rc = model_kv_create(e->dm, e->n_slots, e->n_ctx, &e->dkv, err)) < 0) goto fail;
    if ((rc = model_ctx_create(e->dm, o.step_tokens, e->n_ctx, &e->dctx, err)) < 0) goto fail;
    e->tok_bytes += model_kv_bytes(e->dkv) / ((size_t)e->n_slots * e->n_ctx);
    e->dlogits = malloc((size_t)o.max_active * e->n_vocab * sizeof *e->dlogits);
    e->dents = calloc((size_t)o.step_tokens, sizeof *e->dents);
    if (!e->dlogits || !e->dents) {
      rc = pw_seterr(err, PW_ENOMEM, "engine: out of memory for draft buffers");
      goto fail;
    }
  }
  /* Logits rows: one per sequence, or up to 1 + K for a speculating one;
   * never more than the entries of a step. */
  e->rows_cap = o.max_active;
  if (o.spec_mode != ENGINE_SPEC_OFF) {
    long want = (long)o.max_active * (o.spec_draft_max + 1);
    e->rows_cap = want < o.step_tokens ? (int)want : o.step_tokens;
  }
  e->run = calloc((size_t)o.max_active, sizeof *e->run);
  e->part = calloc((size_t)o.max_active, sizeof *e->part);
  e->free_slots = calloc((size_t)e->n_slots, sizeof *e->free_slots);
  e->ents = calloc((size_t)o.step_tokens, sizeof *e->ents);
  e->eents = calloc((size_t)o.step_tokens, sizeof *e->eents);
  e->eowner = calloc((size_t)o.step_tokens, sizeof *e->eowner);
  e->logits = malloc((size_t)e->rows_cap * e->n_vocab * sizeof *e->logits);
  e->hidden = malloc((size_t)o.step_tokens * e->n_embd * sizeof *e->hidden);
  e->dbuf_cap = tok_detok_max_out(e->vocab);
  e->dbuf = malloc(e->dbuf_cap);
  e->sbuf = malloc(STOP_OUT_CAP(e->dbuf_cap));
  e->cache = e->n_cache ? calloc((size_t)e->n_cache, sizeof *e->cache) : NULL;
  if (!e->sbuf || !e->run || !e->part || !e->free_slots || !e->ents || !e->eents || !e->eowner || !e->logits ||
      !e->hidden || !e->dbuf || (e->n_cache && !e->cache)) {
    rc = pw_seterr(err, PW_ENOMEM, "engine: out of memory for batch buffers");
    goto fail;
  }
  for (int i = 0; i < e->n_cache; i++) {
    e->cache[i].slot = -1;
    if (!(e->cache[i].toks = malloc((size_t)e->n_ctx * sizeof *e->cache[i].toks))) {
      rc = pw_seterr(err, PW_ENOMEM, "engine: out of memory for prompt cache records");
      goto fail;
    }
  }
  for (int i = 0; i < e->n_slots; i++) e->free_slots[i] = e->n_slots - 1 - i;
  e->n_free = e->n_slots;

  model_id_from_path(o.model_path, e->model_id, sizeof e->model_id);
  e->have_file_id = pw_file_id_of(o.model_path, &e->file_id, NULL) == 0;
  gguf_str tmpl;
  if (gguf_get_str(model_gguf(e->m), "tokenizer.chat_template", &tmpl) && tmpl.len > 0) {
    e->chat_template = malloc(tmpl.len + 1);
    if (!e->chat_template) {
      rc = pw_seterr(err, PW_ENOMEM, "engine: out of memory");
      goto fail;
    }
    memcpy(e->chat_template, tmpl.ptr, tmpl.len);
    e->chat_template[tmpl.len] = 0;
  }
  o.model_path = NULL;
  o.spec_draft_model = NULL;
  e->o = o;
  e->st.max_active = o.max_active;
  e->st.max_queue = o.max_queue;
  if (pthread_create(&e->thread, NULL, engine_main, e) != 0) {
    rc = pw_seterr(err, PW_EINTERNAL, "engine: cannot start the engine thread");
    goto fail;
  }
  e->thread_started = true;
  *out = e;
  return 0;
fail:
  engine_destroy(e);
  return rc;
}

void engine_destroy(engine *e) {
  if (!e) return;
  if (e->thread_started) {
    pthread_mutex_lock(&e->mu);
    e->stop = true;
    pthread_cond_broadcast(&e->work_cv);
    pthread_mutex_unlock(&e->mu);
    pthread_join(e->thread, NULL);
  }
  model_ctx_destroy(e->ctx);
  model_kv_destroy(e->kv);
  model_ctx_destroy(e->dctx);
  model_kv_destroy(e->dkv);
  model_destroy(e->dm);
  tok_vocab_destroy(e->vocab);
  model_destroy(e->m);
  if (e->cache)
    for (int i = 0; i < e->n_cache; i++) free(e->cache[i].toks);
  free(e->cache);
  free(e->run);
  free(e->part);
  free(e->free_slots);
  free(e->ents);
  free(e->eents);
  free(e->eowner);
  free(e->logits);
  free(e->dlogits);
  free(e->dents);
  free(e->hidden);
  free(e->dbuf);
  free(e->sbuf);
  free(e->chat_template);
  pthread_cond_destroy(&e->work_cv);
  pthread_cond_destroy(&e->idle_cv);
  pthread_mutex_destroy(&e->mu);
  pthread_mutex_destroy(&e->sha_mu);
  free(e);
}

int engine_drain(engine *e, int grace_ms) {
  pthread_mutex_lock(&e->mu);
  e->draining = true;
  struct timespec ts = abs_after_ns(grace_ms > 0 ? (uint64_t)grace_ms * 1000000ull : 0);
  int rc = 0;
  while (e->n_active + e->n_queued > 0) {
    if (grace_ms == 0) {
      rc = PW_ETIMEOUT;
    } else if (grace_ms < 0) {
      pthread_cond_wait(&e->idle_cv, &e->mu);
      continue;
    } else if (pthread_cond_timedwait(&e->idle_cv, &e->mu, &ts) == 0) {
      continue;
    } else if (e->n_active + e->n_queued > 0) {
      rc = PW_ETIMEOUT;
    }
    break;
  }
  pthread_mutex_unlock(&e->mu);
  return rc;
}

/* ---- model facts ------------------------------------------------------------ */

const struct tok_vocab *engine_vocab(const engine *e) { return e->vocab; }
const char *engine_model_id(const engine *e) { return e->model_id; }
const char *engine_chat_template(const engine *e) {
  return e->chat_template ? e->chat_template : chat_default_template();
}
int engine_n_ctx(const engine *e) { return e->n_ctx; }
int engine_n_embd(const engine *e) { return e->n_embd; }
/* The identity is the SHA-256 of the file bytes, hashed from the mapping
 * (the same bytes) on first use, so commands that never ask don't pay for
 * reading a multi-GB file at start-up; and once per file identity (device,
 * inode, size, mtime) in the process, so a second engine on the same file
 * (power ab, replays) does not read it again. */
const char *engine_model_sha256(const engine *ce) {
  engine *e = (engine *)(uintptr_t)ce;
  pthread_mutex_lock(&e->sha_mu);
  if (!e->sha_done) {
    uint8_t dig[32];
    if (!e->have_file_id || !pw_sha256_cache_get(&e->file_id, dig)) {
      const gguf_file *f = model_gguf(e->m);
      pw_sha256(gguf_base(f), (size_t)gguf_size(f), dig);
      if (e->have_file_id && e->file_id.size == (uint64_t)gguf_size(f)) pw_sha256_cache_put(&e->file_id, dig);
    }
    pw_hex(dig, 32, e->sha256);
    e->sha_done = true;
  }
  pthread_mutex_unlock(&e->sha_mu);
  return e->sha256;
}

uint64_t engine_model_size(const engine *e) { return (uint64_t)gguf_size(model_gguf(e->m)); }

/* ---- requests ------------------------------------------------------------------ */

static int validate_params(const engine *e, const engine_params *p, char *err) {
  if (!p) return pw_seterr(err, PW_EINVAL, "no request parameters");
  if (!p->prompt || p->n_prompt < 1) return pw_seterr(err, PW_EINVAL, "the prompt is empty");
  for (int i = 0; i < p->n_prompt; i++)
    if (p->prompt[i] < 0 || p->prompt[i] >= e->n_vocab)
      return pw_seterr(err, PW_EINVAL, "prompt token %d at position %d is outside the vocabulary of %d",
                       p->prompt[i], i, e->n_vocab);
  if (p->n_stop < 0 || p->n_stop > ENGINE_MAX_STOP)
    return pw_seterr(err, PW_EINVAL, "%d stop strings (at most %d)", p->n_stop, ENGINE_MAX_STOP);
  for (int i = 0; i < p->n_stop; i++) {
    size_t len = p->stop[i] ? strlen(p->stop[i]) : 0;
    if (len == 0) return pw_seterr(err, PW_EINVAL, "stop string %d is empty", i);
    if (len > ENGINE_MAX_STOP_LEN)
      return pw_seterr(err, PW_EINVAL, "stop string %d has %zu bytes (at most %d)", i, len, ENGINE_MAX_STOP_LEN);
  }
  if (p->n_logprobs < 0 || p->n_logprobs > PW_SAMPLE_MAX_PROBS)
    return pw_seterr(err, PW_EINVAL, "n_logprobs %d out of range [0, %d]", p->n_logprobs, PW_SAMPLE_MAX_PROBS);
  /* A generation needs room for at least one generated token's position
   * after the prompt; an embedding only for the prompt. */
  int limit = p->embedding ? e->n_ctx : e->n_ctx - 1;
  if (p->n_prompt > limit)
    return pw_seterr(err, PW_ECONTEXT,
                     "the prompt has %d tokens but the context holds %d (%d for the prompt when generating)",
                     p->n_prompt, e->n_ctx, e->n_ctx - 1);
  return 0;
}

/* Full when running + waiting requests reach both bounds; e->mu held. */
static int admission_check(engine *e, char *err) {
  if (e->stop || e->draining) {
    e->st.requests_rejected++;
    return pw_seterr(err, PW_EBUSY, "the engine is shutting down and accepts no new requests");
  }
  if (e->n_active + e->n_queued >= e->o.max_active + e->o.max_queue) {
    e->st.requests_rejected++;
    return pw_seterr(err, PW_EBUSY, "overloaded: %d requests running and %d waiting (limits %d and %d)",
                     e->n_active, e->n_queued, e->o.max_active, e->o.max_queue);
  }
  return 0;
}

int engine_submit(engine *e, const engine_params *p, engine_req **out, char *err) {
  *out = NULL;
  int rc = validate_params(e, p, err);
  if (rc < 0) return rc;
  /* Fail fast before allocating anything; checked again when queueing. */
  pthread_mutex_lock(&e->mu);
  rc = admission_check(e, err);
  pthread_mutex_unlock(&e->mu);
  if (rc < 0) return rc;

  engine_req *r = calloc(1, sizeof *r);
  if (!r) return pw_seterr(err, PW_ENOMEM, "out of memory for a request");
  pthread_mutex_init(&r->mu, NULL);
  cond_init_monotonic(&r->cv);
  atomic_init(&r->cancel, false);
  r->slot = -1;
  r->n_prompt = p->n_prompt;
  r->has_key = p->has_cache_key;
  if (p->has_cache_key) memcpy(r->key, p->cache_key, sizeof r->key);
  r->spec = e->o.spec_mode != ENGINE_SPEC_OFF && !p->spec_off && !p->embedding;
  r->spec_k = e->o.spec_draft_max;
  r->embedding = p->embedding;
  r->ignore_eos = p->ignore_eos;
  r->want_logprobs = p->want_logprobs;
  r->n_logprobs = p->n_logprobs;
  r->deadline_ns = p->deadline_ns;
  r->ring_cap = e->o.max_events + 1;
  int room = e->n_ctx - p->n_prompt;
  r->max_tokens = p->embedding ? 0 : (p->max_tokens <= 0 || p->max_tokens > room ? room : p->max_tokens);
  /* The prompt and every token the request may generate. */
  r->toks = malloc((size_t)(p->n_prompt + r->max_tokens) * sizeof *r->toks);
  r->ring = malloc((size_t)r->ring_cap * sizeof *r->ring);
  if (!r->toks || !r->ring) goto nomem;
  memcpy(r->toks, p->prompt, (size_t)p->n_prompt * sizeof *r->toks);
  r->prompt = r->toks;
  if (p->embedding) {
    r->embd_acc = calloc((size_t)e->n_embd, sizeof *r->embd_acc);
    r->embd = calloc((size_t)e->n_embd, sizeof *r->embd);
    if (!r->embd_acc || !r->embd) goto nomem;
  } else {
    r->smp = pw_sampler_create(&p->sampling, e->n_vocab, err);
    if (!r->smp) {
      req_free(r);
      return PW_EINVAL;
    }
    /* Penalties see the prompt too, as llama.cpp's do (no-op without). */
    int last_n = p->sampling.repeat_last_n;
    for (int i = last_n < p->n_prompt ? p->n_prompt - last_n : 0; i < p->n_prompt; i++)
      pw_sampler_accept(r->smp, p->prompt[i]);
    tok_detok_init(&r->dt, e->vocab, 0);
    r->txt_cap = 2 * EV_TEXT_CAP + (int)STOP_OUT_CAP(e->dbuf_cap);
    r->txt = malloc((size_t)r->txt_cap);
    if (!r->txt) goto nomem;
    if (p->n_stop > 0) {
      if ((rc = stop_init(&r->sm, p->stop, NULL, p->n_stop, err)) < 0) {
        req_free(r);
        return rc;
      }
      r->has_stop = true;
    }
  }
  r->refs = 2;
  r->state = REQ_QUEUED;

  pthread_mutex_lock(&e->mu);
  rc = admission_check(e, err);
  if (rc == 0) {
    if (e->q_tail)
      e->q_tail->next = r;
    else
      e->q_head = r;
    e->q_tail = r;
    e->n_queued++;
    e->st.requests_total++;
    pthread_cond_signal(&e->work_cv);
  }
  pthread_mutex_unlock(&e->mu);
  if (rc < 0) {
    req_free(r);
    return rc;
  }
  *out = r;
  return 0;
nomem:
  req_free(r);
  return pw_seterr(err, PW_ENOMEM, "out of memory for a request");
}

int engine_next(engine_req *r, engine_event *ev, int timeout_ms) {
  pthread_mutex_lock(&r->mu);
  struct timespec ts = abs_after_ns(timeout_ms > 0 ? (uint64_t)timeout_ms * 1000000ull : 0);
  int rc = 0;
  while (r->ring_count == 0) {
    if (r->end_taken) {
      rc = PW_EINVAL; /* the request has ended: no more events */
      break;
    }
    if (timeout_ms == 0) {
      rc = PW_ETIMEOUT;
      break;
    }
    if (timeout_ms < 0) {
      pthread_cond_wait(&r->cv, &r->mu);
    } else if (pthread_cond_timedwait(&r->cv, &r->mu, &ts) != 0 && r->ring_count == 0) {
      rc = PW_ETIMEOUT;
      break;
    }
  }
  if (rc == 0) {
    ev_copy(ev, &r->ring[r->ring_head]);
    r->ring_head = (r->ring_head + 1) % r->ring_cap;
    r->ring_count--;
    if (ev->type != ENGINE_EV_TOKEN) r->end_taken = true;
  }
  pthread_mutex_unlock(&r->mu);
  return rc;
}

const float *engine_embedding(const engine_req *r) {
  engine_req *m = (engine_req *)r; /* the lock is not part of the value */
  pthread_mutex_lock(&m->mu);
  const float *v = m->embd_ready ? m->embd : NULL;
  pthread_mutex_unlock(&m->mu);
  return v;
}

void engine_cancel(engine_req *r) {
  if (r) atomic_store(&r->cancel, true);
}

void engine_release(engine_req *r) {
  if (!r) return;
  atomic_store(&r->cancel, true);
  pthread_mutex_lock(&r->mu);
  r->released = true;
  r->ring_count = 0;
  bool last = --r->refs == 0;
  pthread_mutex_unlock(&r->mu);
  if (last) req_free(r);
}

void engine_get_stats(engine *e, engine_stats *out) {
  pthread_mutex_lock(&e->mu);
  *out = e->st;
  out->active = e->n_active;
  out->queued = e->n_queued;
  out->max_active = e->o.max_active;
  out->max_queue = e->o.max_queue;
  pthread_mutex_unlock(&e->mu);
}
