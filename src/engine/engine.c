/* engine.c - the inference engine: request handles and their event queues,
 * admission (bounded queue, deadlines), and the engine thread that runs
 * continuous-batching steps with chunked prefill, sampling,
 * detokenisation and stop strings.
 *
 * Not here: HTTP, JSON, chat templating, prefix caching, speculation.
 *
 * Threads and locks. Callers (many threads) and the one engine thread share:
 *   - engine.mu: the admission queue, the counters and the flags stop/drain.
 *   - engine_req.mu: one request's event ring, its reference count and its
 *     "ended" flags. A handle outlives the engine when the caller still
 *     holds it (engine_destroy before engine_release), so nothing a caller
 *     touches after submit lives in the engine.
 * The two locks are never held together. Everything else about a running
 * sequence (slot, positions, sampler, text state) belongs to the engine
 * thread alone. Cancellation is an atomic flag read once per step.
 *
 * Allocation happens in engine_create (batch, logits and hidden buffers,
 * KV cache) and engine_submit (per-request sampler, event ring, text
 * buffers); the step loop and the per-token path allocate nothing. */
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

_Static_assert(ENGINE_MAX_STOP <= STOP_MAX_STRINGS && ENGINE_MAX_STOP_LEN <= STOP_MAX_LEN,
               "the stop matcher must hold every request's stop strings");

typedef enum req_state { REQ_QUEUED, REQ_ACTIVE, REQ_ENDED } req_state;

struct engine_req {
  /* ---- fixed at submit ---- */
  int32_t *prompt; /* [n_prompt], owned */
  int n_prompt;
  int max_tokens; /* effective: capped so that prompt + max_tokens <= n_ctx */
  bool embedding, ignore_eos, want_logprobs;
  int n_logprobs;
  uint64_t deadline_ns; /* 0 = none */
  int ring_cap; /* events; one slot is kept for the final DONE/ERROR */

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
  int32_t last;      /* last sampled token, fed by the next decode entry */
  pw_sampler *smp;   /* owned; NULL for embeddings */
  tok_detok dt;      /* streaming detokenizer state */
  bool has_stop;     /* sm is in use */
  stop_matcher sm;   /* stop strings and their held-back prefix */
  char *txt;         /* [txt_cap] text ready for the next event, owned */
  int txt_len, txt_cap;
  double *embd_acc;  /* [n_embd] running sum of final hidden states, owned */
  float *embd;       /* [n_embd] the result, owned */
};

struct engine {
  engine_opts o; /* resolved options (o.model_path is not kept) */
  model *m;
  tok_vocab *vocab;
  model_kv *kv;
  model_ctx *ctx;
  int n_vocab, n_embd, n_ctx;
  char model_id[256];
  char sha256[65];
  char *chat_template; /* owned copy of the model's template; NULL = default */

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
  int *free_slots;     /* [max_active] stack of unused KV sequences */
  int n_free;
  model_entry *ents;   /* [step_tokens] generation batch */
  engine_req **owner;  /* [step_tokens] request of each entry */
  model_entry *eents;  /* [step_tokens] embedding batch */
  engine_req **eowner; /* [step_tokens] */
  float *logits;       /* [max_active][n_vocab]: at most one wanted row per sequence */
  float *hidden;       /* [step_tokens][n_embd] final hidden states of an embedding batch */
  char *dbuf;          /* [dbuf_cap] detokenizer output of one token */
  size_t dbuf_cap;
  char *sbuf;          /* [STOP_OUT_CAP(dbuf_cap)] stop matcher output of one token */
  int step_gen;        /* tokens sampled in the current step */
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
  free(r->prompt);
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
    ev_copy(&r->ring[(r->ring_head + r->ring_count) % r->ring_cap], ev);
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

/* ---- engine thread: ending requests ------------------------------------ */

/* Ends r (already out of the run list or the queue): frees its KV slot,
 * pushes DONE (status 0) or ERROR (status < 0), updates the counters and
 * drops the engine's reference. */
static void seq_end(engine *e, engine_req *r, engine_finish finish, int status, const char *msg) {
  req_state was = r->state;
  if (r->slot >= 0) {
    model_kv_truncate(e->kv, r->slot, 0);
    e->free_slots[e->n_free++] = r->slot;
    r->slot = -1;
  }
  r->state = REQ_ENDED;
  engine_event *ev = &e->ev;
  if (status < 0) {
    ev_clear(ev, ENGINE_EV_ERROR);
    ev->status = status;
    snprintf(ev->message, sizeof ev->message, "%s", msg ? msg : pw_strerror(status));
  } else {
    ev_clear(ev, ENGINE_EV_DONE);
    ev->finish = finish;
    ev->usage.prompt_tokens = r->n_prompt;
    ev->usage.completion_tokens = r->n_gen;
    ev->usage.cached_tokens = 0;
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
   * at once must find the slot free. */
  pthread_mutex_lock(&e->mu);
  if (was == REQ_ACTIVE) e->n_active--;
  if (status == PW_ETIMEOUT) e->st.requests_timeout++;
  if (finish == ENGINE_FINISH_CANCEL) e->st.requests_cancelled++;
  pthread_cond_broadcast(&e->idle_cv);
  pthread_mutex_unlock(&e->mu);
  req_push(r, ev);
  req_unref(r);
}

/* Ends the run-list entry i (keeps admission order of the rest). */
static void run_end(engine *e, int i, engine_finish finish, int status, const char *msg) {
  engine_req *r = e->run[i];
  memmove(e->run + i, e->run + i + 1, (size_t)(e->n_run - i - 1) * sizeof *e->run);
  e->n_run--;
  seq_end(e, r, finish, status, msg);
}

/* ---- engine thread: one token ------------------------------------------ */

/* Samples from r's logits row and emits the token. Returns true while r
 * keeps generating; false once it has ended (the caller removes it). */
static bool seq_on_logits(engine *e, engine_req *r, const float *row, engine_finish *finish, int *status,
                          const char **msg) {
  int32_t tok = pw_sampler_sample(r->smp, row);
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
  r->n_gen++;
  e->step_gen++;
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

/* One scheduler step over the run list: drop cancelled sequences, build the
 * batch (decode entries first, then prompt chunks oldest first within the
 * step budget), run it, and sample. Embedding prompts go in a second batch
 * of the same step that asks for hidden states but no logits. */
static void engine_step(engine *e) {
  for (int i = 0; i < e->n_run;) {
    if (atomic_load(&e->run[i]->cancel))
      run_end(e, i, ENGINE_FINISH_CANCEL, 0, NULL);
    else
      i++;
  }
  if (e->n_run == 0) return;

  int budget = e->o.step_tokens;
  int n = 0, ne = 0, n_prefill_tokens = 0;
  for (int i = 0; i < e->n_run; i++) {
    engine_req *r = e->run[i];
    if (r->embedding || r->n_fed < r->n_prompt) continue;
    e->ents[n] = (model_entry){.seq = r->slot, .pos = r->n_fed, .token = r->last, .want_logits = true};
    e->owner[n++] = r;
  }
  budget -= n;
  for (int i = 0; i < e->n_run && budget > 0; i++) {
    engine_req *r = e->run[i];
    if (r->n_fed >= r->n_prompt) continue;
    int c = r->n_prompt - r->n_fed;
    if (c > budget) c = budget;
    budget -= c;
    n_prefill_tokens += c;
    for (int k = 0; k < c; k++) {
      int pos = r->n_fed + k;
      model_entry en = {.seq = r->slot, .pos = pos, .token = r->prompt[pos],
                        .want_logits = r->embedding || pos == r->n_prompt - 1};
      if (r->embedding) {
        e->eents[ne] = en;
        e->eowner[ne++] = r;
      } else {
        e->ents[n] = en;
        e->owner[n++] = r;
      }
    }
  }

  int rc = 0;
  if (n > 0) {
    rc = model_forward(e->ctx, e->kv, e->ents, n, e->logits, NULL, e->err);
    if (rc < 0) {
      /* A failed batch fails its sequences; the others carry on. */
      pw_log(PW_LOG_ERROR, "engine: forward failed: %s", e->err);
      for (int i = 0; i < e->n_run;) {
        engine_req *r = e->run[i];
        bool in = false;
        for (int t = 0; t < n && !in; t++) in = e->owner[t] == r;
        if (in)
          run_end(e, i, ENGINE_FINISH_NONE, rc, e->err);
        else
          i++;
      }
    } else {
      int row = 0;
      for (int t = 0; t < n; t++) {
        engine_req *r = e->owner[t];
        r->n_fed++;
        if (!e->ents[t].want_logits) continue;
        const float *lg = e->logits + (size_t)row++ * e->n_vocab;
        engine_finish fin = ENGINE_FINISH_NONE;
        int st = 0;
        const char *msg = NULL;
        if (!seq_on_logits(e, r, lg, &fin, &st, &msg)) {
          for (int i = 0; i < e->n_run; i++)
            if (e->run[i] == r) {
              run_end(e, i, fin, st, msg);
              break;
            }
        }
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
        for (int i = 0; i < e->n_run; i++)
          if (e->run[i] == r) {
            run_end(e, i, ENGINE_FINISH_STOP, rc, rc < 0 ? e->err : NULL);
            break;
          }
      }
      t += c;
    }
  }

  pthread_mutex_lock(&e->mu);
  e->st.steps_total++;
  e->st.prompt_tokens_total += (uint64_t)n_prefill_tokens;
  e->st.generated_tokens_total += (uint64_t)e->step_gen;
  pthread_mutex_unlock(&e->mu);
  e->step_gen = 0;
}

/* ---- engine thread: admission and the loop ------------------------------- */

static void seq_start(engine *e, engine_req *r) {
  PW_ASSERT(e->n_free > 0 && e->n_run < e->o.max_active);
  r->slot = e->free_slots[--e->n_free];
  PW_ASSERT(model_kv_len(e->kv, r->slot) == 0);
  r->state = REQ_ACTIVE;
  r->n_fed = 0;
  e->run[e->n_run++] = r;
}

static void *engine_main(void *arg) {
  engine *e = arg;
  pthread_mutex_lock(&e->mu);
  for (;;) {
    while (!e->stop && !e->q_head && e->n_run == 0) pthread_cond_wait(&e->work_cv, &e->mu);
    if (e->stop) break;
    /* Under the lock: take cancelled and expired requests out of the queue,
     * then admit the oldest waiting ones into free slots. */
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
    while (e->q_head && n_admit < e->n_free) {
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
  while (e->n_run > 0) run_end(e, e->n_run - 1, ENGINE_FINISH_NONE, PW_ECANCELED, "the engine stopped");
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

int engine_create(const engine_opts *opts, engine **out, char *err) {
  *out = NULL;
  if (!opts || !opts->model_path || !*opts->model_path) return pw_seterr(err, PW_EINVAL, "engine: no model path");
  engine_opts o = *opts;
  if (o.n_threads == 0) o.n_threads = 2;
  if (o.max_active == 0) o.max_active = 4;
  if (o.max_queue == 0) o.max_queue = 16;
  if (o.step_tokens == 0) o.step_tokens = 512;
  if (o.max_events == 0) o.max_events = 256;
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
  /* Every active sequence must fit its decode token into one step. */
  if (o.step_tokens < o.max_active) o.step_tokens = o.max_active;

  engine *e = calloc(1, sizeof *e);
  if (!e) return pw_seterr(err, PW_ENOMEM, "engine: out of memory");
  pthread_mutex_init(&e->mu, NULL);
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
  if ((rc = model_kv_create(e->m, o.max_active, e->n_ctx, &e->kv, err)) < 0) goto fail;
  if ((rc = model_ctx_create(e->m, o.step_tokens, e->n_ctx, &e->ctx, err)) < 0) goto fail;
  e->run = calloc((size_t)o.max_active, sizeof *e->run);
  e->free_slots = calloc((size_t)o.max_active, sizeof *e->free_slots);
  e->ents = calloc((size_t)o.step_tokens, sizeof *e->ents);
  e->owner = calloc((size_t)o.step_tokens, sizeof *e->owner);
  e->eents = calloc((size_t)o.step_tokens, sizeof *e->eents);
  e->eowner = calloc((size_t)o.step_tokens, sizeof *e->eowner);
  e->logits = malloc((size_t)o.max_active * e->n_vocab * sizeof *e->logits);
  e->hidden = malloc((size_t)o.step_tokens * e->n_embd * sizeof *e->hidden);
  e->dbuf_cap = tok_detok_max_out(e->vocab);
  e->dbuf = malloc(e->dbuf_cap);
  e->sbuf = malloc(STOP_OUT_CAP(e->dbuf_cap));
  if (!e->sbuf || !e->run || !e->free_slots || !e->ents || !e->owner || !e->eents || !e->eowner || !e->logits || !e->hidden ||
      !e->dbuf) {
    rc = pw_seterr(err, PW_ENOMEM, "engine: out of memory for batch buffers");
    goto fail;
  }
  for (int i = 0; i < o.max_active; i++) e->free_slots[i] = o.max_active - 1 - i;
  e->n_free = o.max_active;

  model_id_from_path(o.model_path, e->model_id, sizeof e->model_id);
  uint8_t dig[32];
  if ((rc = pw_sha256_file(o.model_path, dig, err)) < 0) goto fail;
  pw_hex(dig, 32, e->sha256);
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
  tok_vocab_destroy(e->vocab);
  model_destroy(e->m);
  free(e->run);
  free(e->free_slots);
  free(e->ents);
  free(e->owner);
  free(e->eents);
  free(e->eowner);
  free(e->logits);
  free(e->hidden);
  free(e->dbuf);
  free(e->sbuf);
  free(e->chat_template);
  pthread_cond_destroy(&e->work_cv);
  pthread_cond_destroy(&e->idle_cv);
  pthread_mutex_destroy(&e->mu);
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
const char *engine_model_sha256(const engine *e) { return e->sha256; }

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
  r->embedding = p->embedding;
  r->ignore_eos = p->ignore_eos;
  r->want_logprobs = p->want_logprobs;
  r->n_logprobs = p->n_logprobs;
  r->deadline_ns = p->deadline_ns;
  r->ring_cap = e->o.max_events + 1;
  int room = e->n_ctx - p->n_prompt;
  r->max_tokens = p->embedding ? 0 : (p->max_tokens <= 0 || p->max_tokens > room ? room : p->max_tokens);
  r->prompt = malloc((size_t)p->n_prompt * sizeof *r->prompt);
  r->ring = malloc((size_t)r->ring_cap * sizeof *r->ring);
  if (!r->prompt || !r->ring) goto nomem;
  memcpy(r->prompt, p->prompt, (size_t)p->n_prompt * sizeof *r->prompt);
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
