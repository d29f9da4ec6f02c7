/* request.c - request handles: submit, the per-request event ring that
 * carries tokens and text to the caller, cancellation and release. See
 * engine.h for the contract and engine_int.h for the structs.
 *
 * Not here: what the engine thread does with a request (sched.c). */
#include "engine/engine_int.h"

#include "base/clock.h"
#include "base/error.h"
#include "base/log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- small helpers ------------------------------------------------------- */

void eng_cond_init_monotonic(pthread_cond_t *c) {
  pthread_condattr_t a;
  pthread_condattr_init(&a);
  pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
  pthread_cond_init(c, &a);
  pthread_condattr_destroy(&a);
}

/* Absolute CLOCK_MONOTONIC time ns from now. */
struct timespec eng_abs_after_ns(uint64_t ns) {
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

void eng_req_free(engine_req *r) {
  pw_sampler_destroy(r->smp);
  grammar_matcher_destroy(r->gm);
  grammar_destroy(r->g_ref);
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
void eng_req_unref(engine_req *r) {
  pthread_mutex_lock(&r->mu);
  bool last = --r->refs == 0;
  pthread_mutex_unlock(&r->mu);
  if (last) eng_req_free(r);
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
bool eng_req_push(engine_req *r, const engine_event *ev) {
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

void eng_ev_clear(engine_event *ev, engine_ev_type type) {
  ev->type = type;
  ev->token = -1;
  ev->text[0] = 0;
  ev->text_len = 0;
  ev->logprob = 0;
  ev->n_top = 0;
  ev->finish = ENGINE_FINISH_NONE;
  ev->stop_index = -1;
  memset(&ev->usage, 0, sizeof ev->usage);
  ev->status = 0;
  ev->message[0] = 0;
}

/* Moves up to one event's worth of r->txt into ev->text, cut at a UTF-8
 * character boundary; the rest waits for the next event. */
void eng_take_text(engine_req *r, engine_event *ev) {
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
void eng_txt_append(engine_req *r, const char *s, size_t n) {
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
bool eng_txt_feed(engine *e, engine_req *r, const char *s, size_t n) {
  bool matched = false;
  if (r->has_stop) {
    size_t k = stop_feed(&r->sm, s, n, e->sbuf, &matched);
    eng_txt_append(r, e->sbuf, k);
  } else {
    eng_txt_append(r, s, n);
  }
  return matched;
}


/* ---- requests ------------------------------------------------------------------ */

/* The vocabulary's token trie for grammars, built on first use. */
static int grammar_vocab_get(engine *e, grammar_vocab **out, char *err) {
  int rc = 0;
  pthread_mutex_lock(&e->gv_mu);
  if (!e->gv) {
    const char **pieces = malloc((size_t)e->n_vocab * sizeof *pieces);
    size_t *lens = malloc((size_t)e->n_vocab * sizeof *lens);
    bool *eog = malloc((size_t)e->n_vocab * sizeof *eog);
    if (!pieces || !lens || !eog) {
      rc = pw_seterr(err, PW_ENOMEM, "engine: out of memory for the grammar vocabulary");
    } else {
      /* The bytes the streaming detokenizer emits for each token (flags 0):
       * what the grammar sees is what the client gets. */
      for (int32_t i = 0; i < e->n_vocab; i++) {
        lens[i] = tok_piece_ref(e->vocab, i, false, &pieces[i]);
        eog[i] = tok_is_eog(e->vocab, i);
      }
      rc = grammar_vocab_create(e->n_vocab, pieces, lens, eog, &e->gv, err);
    }
    free(pieces);
    free(lens);
    free(eog);
  }
  *out = e->gv;
  pthread_mutex_unlock(&e->gv_mu);
  return rc;
}

static int validate_params(const engine *e, const engine_params *p, char *err) {
  if (!p) return pw_seterr(err, PW_EINVAL, "no request parameters");
  if (!p->prompt || p->n_prompt < 1) return pw_seterr(err, PW_EINVAL, "the prompt is empty");
  if (p->grammar && p->embedding) return pw_seterr(err, PW_EINVAL, "an embedding request cannot carry a grammar");
  if (e->encoder && !p->embedding)
    return pw_seterr(err, PW_EINVAL, "model %s is an embedding model: it does not generate text", e->model_id);
  if (e->encoder && p->n_prompt > e->o.step_tokens)
    return pw_seterr(err, PW_ECONTEXT, "the input has %d tokens but an encoder's pass holds %d", p->n_prompt,
                     e->o.step_tokens);
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
  eng_cond_init_monotonic(&r->cv);
  atomic_init(&r->cancel, false);
  r->slot = -1;
  r->n_prompt = p->n_prompt;
  r->has_key = p->has_cache_key;
  if (p->has_cache_key) memcpy(r->key, p->cache_key, sizeof r->key);
  if (p->has_cache_key) memcpy(r->owner, p->cache_owner, sizeof r->owner);
  r->spec = e->o.spec_mode != ENGINE_SPEC_OFF && !p->spec_off && !p->embedding;
  r->spec_k = e->o.spec_draft_max;
  /* Cost policy prior: as if 3 of 4 proposals were accepted at every
   * position, so a new request speculates and the measurements start. */
  for (int i = 0; i < SPEC_MAX_K; i++) {
    r->acc_n[i] = SPEC_PRIOR_N;
    r->acc_a[i] = SPEC_PRIOR_A;
  }
  r->spec_gap = SPEC_PROBE_MIN;
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
    r->embd = calloc((size_t)(e->n_scores > e->n_embd ? e->n_scores : e->n_embd), sizeof *r->embd);
    if (!r->embd_acc || !r->embd) goto nomem;
  } else {
    r->smp = pw_sampler_create(&p->sampling, e->n_vocab, err);
    if (!r->smp) {
      eng_req_free(r);
      return PW_EINVAL;
    }
    /* Penalties see the prompt too, as llama.cpp's do (no-op without). */
    int last_n = p->sampling.repeat_last_n;
    for (int i = last_n < p->n_prompt ? p->n_prompt - last_n : 0; i < p->n_prompt; i++)
      pw_sampler_accept(r->smp, p->prompt[i]);
    tok_detok_init(&r->dt, e->vocab, p->render_special ? TOK_DETOK_SPECIAL : 0);
    r->txt_cap = 2 * EV_TEXT_CAP + (int)STOP_OUT_CAP(e->dbuf_cap);
    r->txt = malloc((size_t)r->txt_cap);
    if (!r->txt) goto nomem;
    if (p->n_stop > 0) {
      if ((rc = stop_init(&r->sm, p->stop, NULL, p->n_stop, err)) < 0) {
        eng_req_free(r);
        return rc;
      }
      r->has_stop = true;
    }
    if (p->grammar) {
      grammar_vocab *gv;
      r->g_ref = grammar_ref(p->grammar);
      if ((rc = grammar_vocab_get(e, &gv, err)) < 0 || (rc = grammar_matcher_create(p->grammar, gv, &r->gm, err)) < 0) {
        eng_req_free(r);
        return rc;
      }
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
    eng_req_free(r);
    return rc;
  }
  *out = r;
  return 0;
nomem:
  eng_req_free(r);
  return pw_seterr(err, PW_ENOMEM, "out of memory for a request");
}

int engine_next(engine_req *r, engine_event *ev, int timeout_ms) {
  pthread_mutex_lock(&r->mu);
  struct timespec ts = eng_abs_after_ns(timeout_ms > 0 ? (uint64_t)timeout_ms * 1000000ull : 0);
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
  if (last) eng_req_free(r);
}

void engine_get_stats(engine *e, engine_stats *out) {
  pthread_mutex_lock(&e->mu);
  *out = e->st;
  out->active = e->n_active;
  out->queued = e->n_queued;
  out->max_active = e->o.max_active;
  out->max_queue = e->o.max_queue;
  pthread_mutex_unlock(&e->mu);
  /* fixed at creation: no lock needed */
  out->kv_bytes_total = model_kv_bytes(e->kv);
  out->kv_bytes_f16 = model_kv_bytes_f16(e->kv);
  out->kv_type_k = model_kv_type_name(model_kv_type_k(e->kv));
  out->kv_type_v = model_kv_type_name(model_kv_type_v(e->kv));
}
