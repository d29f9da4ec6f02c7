/* sched.c - the engine thread: admission from the queue, one scheduler
 * step (continuous batching with chunked prefill), sampling and emitting
 * tokens, ending requests, and the statistics the steps produce.
 *
 * Not here: speculation's proposals and verification (spec.c), slots and
 * the prefix cache (prefix_cache.c), embeddings' pooling (embed.c). */
#include "engine/engine_int.h"

#include "base/clock.h"
#include "base/error.h"
#include "base/log.h"

#include <stdio.h>
#include <string.h>

const int engine_batch_le[ENGINE_BATCH_BUCKETS] = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512};

/* Adds the step's counters to the shared statistics; e->mu held. */
void eng_stats_flush_locked(engine *e) {
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
  s->spec_declined_total += d->spec_declined;
  s->spec_probes_total += d->spec_probes;
  s->spec_rollbacks_total += d->spec_refeeds;
  s->spec_draft_passes_total += d->spec_draft_passes;
  s->spec_draft_catchup_total += d->spec_draft_catchups;
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
      if (!e->cache[i].busy) held += eng_seq_bytes(e, e->cache[i].n_tok);
    }
  for (int i = 0; i < e->n_run; i++) held += eng_seq_bytes(e, e->run[i]->n_fed);
  s->cache_entries = n_ent;
  s->cache_bytes = eng_cache_bytes(e);
  s->kv_bytes_in_use = held;
}


/* ---- engine thread: ending requests ------------------------------------ */

/* Ends r (already out of the run list or the queue): hands its KV slot to
 * the pool or the prefix cache, pushes DONE (status 0) or ERROR (status <
 * 0), updates the counters and drops the engine's reference. */
static void seq_end(engine *e, engine_req *r, engine_finish finish, int status, const char *msg) {
  req_state was = r->state;
  eng_slot_release(e, r, status);
  r->state = REQ_ENDED;
  engine_event *ev = &e->ev;
  if (status < 0) {
    eng_ev_clear(ev, ENGINE_EV_ERROR);
    ev->status = status;
    snprintf(ev->message, sizeof ev->message, "%s", msg ? msg : pw_strerror(status));
  } else {
    eng_ev_clear(ev, ENGINE_EV_DONE);
    ev->finish = finish;
    ev->usage = r->u;
    ev->usage.prompt_tokens = r->n_prompt;
    ev->usage.completion_tokens = r->n_gen;
    if (!r->embedding && finish != ENGINE_FINISH_CANCEL) {
      /* Text still held back (an unfinished UTF-8 character, a stop-string
       * prefix that never completed) is released with DONE. */
      int n = tok_detok_flush(&r->dt, e->dbuf, e->dbuf_cap);
      bool matched = eng_txt_feed(e, r, e->dbuf, n > 0 ? (size_t)n : 0);
      if (r->has_stop && !matched) eng_txt_append(r, e->sbuf, stop_flush(&r->sm, e->sbuf));
      eng_take_text(r, ev);
      if (r->has_stop && r->sm.stopped && finish == ENGINE_FINISH_STOP) ev->stop_index = r->sm.which;
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
  eng_stats_flush_locked(e);
  pthread_cond_broadcast(&e->idle_cv);
  pthread_mutex_unlock(&e->mu);
  eng_req_push(r, ev);
  eng_req_unref(r);
}

/* Ends r, which is in the run list (keeps admission order of the rest). */
void eng_run_end_req(engine *e, engine_req *r, engine_finish finish, int status, const char *msg) {
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
bool eng_seq_emit(engine *e, engine_req *r, const float *row, int32_t *tok_out, engine_finish *finish,
                     int *status, const char **msg) {
  const float *srow = row;
  *tok_out = -1;
  if (r->gm) { /* the grammar's mask goes before the whole sampler chain */
    memcpy(e->grow, row, (size_t)e->n_vocab * sizeof *row);
    int na = grammar_matcher_apply(r->gm, e->grow, !r->ignore_eos);
    if (na <= 0) {
      *status = na < 0 ? na : PW_ERANGE;
      *msg = na < 0 ? "grammar: out of memory" : "the grammar allows no token here";
      return false;
    }
    srow = e->grow;
  }
  int32_t tok = pw_sampler_sample(r->smp, srow);
  *tok_out = tok;
  if (tok < 0) {
    *status = PW_ERANGE;
    *msg = r->gm ? "sampling failed: the grammar, logit_bias and penalties left no token to choose"
                 : "sampling failed: logit_bias and penalties left no token to choose";
    return false;
  }
  if (r->gm && grammar_matcher_accept_token(r->gm, tok) < 0) {
    *status = PW_EINTERNAL;
    *msg = "grammar: a sampled token was not accepted by the grammar";
    return false;
  }
  engine_event *ev = &e->ev;
  eng_ev_clear(ev, ENGINE_EV_TOKEN);
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
  bool matched = eng_txt_feed(e, r, e->dbuf, n > 0 ? (size_t)n : 0);
  eng_take_text(r, ev);
  if (!eng_req_push(r, ev)) {
    *status = PW_ELIMIT;
    *msg = "the client fell too far behind the generated events; request cancelled";
    return false;
  }
  if (matched || (r->gm && grammar_matcher_done(r->gm))) {
    *finish = ENGINE_FINISH_STOP;
    return false;
  }
  if (r->n_gen >= r->max_tokens) {
    *finish = ENGINE_FINISH_LENGTH;
    return false;
  }
  return true;
}


/* ---- engine thread: one step --------------------------------------------- */

/* What one step feeds the model: the generation batch (decode and
 * verification entries, prompt chunks) and the embedding batch. */
typedef struct step_plan {
  int n, ne;   /* entries of e->ents and e->eents */
  int rows;    /* logits rows wanted */
  int prefill; /* prompt tokens evaluated */
} step_plan;

/* Drops cancelled sequences; false when nothing is left to run. */
static bool step_reap(engine *e) {
  for (int i = 0; i < e->n_run;) {
    if (atomic_load(&e->run[i]->cancel))
      eng_run_end_req(e, e->run[i], ENGINE_FINISH_CANCEL, 0, NULL);
    else
      i++;
  }
  return e->n_run > 0;
}

/* Plans the batch: one decode entry per generating sequence first, then
 * speculative proposals (at most half the remaining budget while prompts
 * wait, so prefill keeps moving), then prompt chunks oldest first within
 * the step budget. */
static step_plan step_plan_batch(engine *e) {
  step_plan sp = {0};
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
  if (e->drafter) eng_spec_plan(e, extra);

  e->n_part = 0;
  for (int i = 0; i < e->n_run; i++) {
    engine_req *r = e->run[i];
    if (r->embedding || r->n_fed < r->n_prompt) continue;
    r->step_row = sp.rows;
    r->step_n = r->step_rows = 1 + r->n_prop;
    sp.rows += r->step_rows;
    e->ents[sp.n++] = (model_entry){.seq = r->slot, .pos = r->n_fed, .token = r->last, .want_logits = true};
    for (int j = 0; j < r->n_prop; j++)
      e->ents[sp.n++] =
          (model_entry){.seq = r->slot, .pos = r->n_fed + 1 + j, .token = r->prop[j], .want_logits = true};
    budget -= r->n_prop;
    e->part[e->n_part++] = r;
  }
  PW_ASSERT(budget >= 0);
  for (int i = 0; i < e->n_run && budget > 0; i++) {
    engine_req *r = e->run[i];
    if (r->n_fed >= r->n_prompt) continue;
    int c = r->n_prompt - r->n_fed;
    if (e->encoder && c > budget) continue; /* its whole input, in a later step */
    if (c > budget) c = budget;
    budget -= c;
    sp.prefill += c;
    bool last_chunk = r->n_fed + c == r->n_prompt;
    if (!r->embedding) {
      r->step_n = c;
      r->step_rows = last_chunk ? 1 : 0;
      r->step_row = sp.rows;
      sp.rows += r->step_rows;
      e->part[e->n_part++] = r;
    }
    for (int k = 0; k < c; k++) {
      int pos = r->n_fed + k;
      model_entry en = {.seq = r->slot, .pos = pos, .token = r->prompt[pos],
                        .want_logits = r->embedding || pos == r->n_prompt - 1};
      if (r->embedding) {
        e->eents[sp.ne] = en;
        e->eowner[sp.ne++] = r;
      } else {
        e->ents[sp.n++] = en;
      }
    }
  }
  PW_ASSERT(sp.rows <= e->rows_cap);
  return sp;
}

/* Runs the generation batch and hands each sequence its logits rows: a
 * prompt chunk advances (its last one samples the first token), a decode
 * round is verified. A failed batch fails its sequences (each stays at its
 * last commit until it ends); the others carry on. */
static void step_generate(engine *e, int n) {
  int rc;
  uint64_t t0 = pw_now_ns();
  e->n_passes++;
  if (e->o.fail_pass > 0 && e->n_passes == e->o.fail_pass)
    rc = pw_seterr(e->err, PW_EINTERNAL, "forward pass %ld failed (injected)", e->n_passes);
  else {
    /* A recurrent state cannot be cut back to the commit after a rejected
     * proposal: keep it as it is before the pass (spec.c) */
    for (int p = 0; p < e->n_part; p++) {
      engine_req *r = e->part[p];
      r->snap = NULL;
      if (e->snap && r->n_fed >= r->n_prompt && r->n_prop > 0) {
        model_kv_state_save(e->kv, r->slot, e->snap + (size_t)p * e->snap_bytes);
        r->snap = e->snap + (size_t)p * e->snap_bytes;
      }
    }
    rc = model_forward(e->ctx, e->kv, e->ents, n, e->logits, NULL, e->err);
  }
  if (rc < 0) {
    pw_log(PW_LOG_ERROR, "engine: forward failed: %s", e->err);
    for (int p = 0; p < e->n_part; p++) eng_run_end_req(e, e->part[p], ENGINE_FINISH_NONE, rc, e->err);
    return;
  }
  e->draft_aside_ns = 0;
  if (e->drafter && e->drafter->observe_pass) e->drafter->observe_pass(e, e->ents, n);
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
        alive = eng_seq_emit(e, r, lg, &tok, &fin, &st, &msg);
      }
    } else {
      alive = eng_seq_verify(e, r, lg, &fin, &st, &msg);
    }
    if (!alive) eng_run_end_req(e, r, fin, st, msg);
  }
  /* The cost policy's measure: the whole step (snapshots, forward pass,
   * verification and any re-run after a rejection) by its entries, but
   * for the drafter's passes over committed positions (draft_aside_ns). */
  const uint64_t dt = pw_now_ns() - t0;
  eng_spec_observe_pass(e, n, dt > e->draft_aside_ns ? dt - e->draft_aside_ns : 0);
}

/* Runs the embedding batch: hidden states, no logits. */
static void step_embed(engine *e, int ne) {
  int rc = model_forward(e->ctx, e->kv, e->eents, ne, NULL, e->hidden, e->err);
  for (int t = 0; t < ne;) {
    engine_req *r = e->eowner[t];
    int c = 0;
    while (t + c < ne && e->eowner[t + c] == r) c++;
    if (rc == 0) {
      eng_embd_accumulate(e, r, e->hidden + (size_t)t * e->n_embd, c);
      r->n_fed += c;
    }
    if (rc < 0 || r->n_fed == r->n_prompt) {
      if (rc == 0) eng_embd_finish(e, r);
      eng_run_end_req(e, r, ENGINE_FINISH_STOP, rc, rc < 0 ? e->err : NULL);
    }
    t += c;
  }
}

/* One scheduler step over the run list: reap, plan, draft (inside the
 * plan), run the generation batch and verify or sample, run the embedding
 * batch, count. */
static void engine_step(engine *e) {
  if (!step_reap(e)) return;
  step_plan sp = step_plan_batch(e);
  e->d.prompt_tokens += (uint64_t)sp.prefill;
  e->d.batch_entries += (uint64_t)(sp.n + sp.ne);
  if (sp.n > 0) step_generate(e, sp.n);
  if (sp.ne > 0) step_embed(e, sp.ne);

  pthread_mutex_lock(&e->mu);
  e->st.steps_total++;
  int bk = 0;
  while (bk < ENGINE_BATCH_BUCKETS && sp.n + sp.ne > engine_batch_le[bk]) bk++;
  e->st.batch_steps_by_size[bk]++;
  eng_stats_flush_locked(e);
  pthread_mutex_unlock(&e->mu);
}

/* ---- engine thread: admission and the loop ------------------------------- */

static void seq_start(engine *e, engine_req *r) {
  PW_ASSERT(e->n_run < e->o.max_active);
  eng_slot_take(e, r);
  r->state = REQ_ACTIVE;
  e->run[e->n_run++] = r;
}

void *eng_main(void *arg) {
  engine *e = arg;
  pthread_mutex_lock(&e->mu);
  for (;;) {
    /* Idle: sleep until work arrives, waking for cache expiries (so idle
     * entries leave on time and the statistics say so). */
    for (;;) {
      uint64_t next = e->n_cache > 0 ? eng_cache_expire(e, pw_now_ns()) : 0;
      eng_stats_flush_locked(e);
      if (e->stop || e->q_head || e->n_run > 0) break;
      if (!next) {
        pthread_cond_wait(&e->work_cv, &e->mu);
      } else {
        uint64_t now = pw_now_ns();
        struct timespec ts = eng_abs_after_ns(next > now ? next - now : 0);
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
  while (e->n_run > 0) eng_run_end_req(e, e->run[e->n_run - 1], ENGINE_FINISH_NONE, PW_ECANCELED, "the engine stopped");
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

