/* spec.c - exact speculative decoding: planning each round's proposals,
 * verifying them in the batched target pass, the adaptive width with its
 * fallback, and the table of drafters. See engine.h ("Speculation").
 *
 * Not here: how proposals are made (draft_*.c, one file per drafter). A
 * new drafter is one file and one row of engine_drafters. */
#include "engine/engine_int.h"

#include "base/error.h"
#include "base/log.h"

#include <string.h>

const drafter_ops *const engine_drafters[] = {&eng_draft_prompt_lookup, &eng_draft_ngram, &eng_draft_model,
                                                     &eng_draft_mtp,           NULL};

const drafter_ops *eng_drafter(int mode) {
  for (int i = 0; engine_drafters[i]; i++)
    if (engine_drafters[i]->mode == mode) return engine_drafters[i];
  return NULL;
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
bool eng_seq_verify(engine *e, engine_req *r, const float *rows, engine_finish *fin, int *st, const char **msg) {
  int k = r->n_prop, m = 0, a = 0;
  int base = r->n_fed; /* position of last */
  bool alive = true;
  r->u.target_passes++;
  if (r->spec || k > 0) e->d.spec_target_passes++;
  for (int i = 0; i <= k; i++) {
    int32_t tok;
    alive = eng_seq_emit(e, r, rows + (size_t)i * e->n_vocab, &tok, fin, st, msg);
    m++;
    bool agree = i < k && tok == r->prop[i];
    if (agree) a++;
    if (!alive || !agree) break;
  }
  /* Committed: last and the emitted tokens but the newest one (whose KV is
   * not written yet, or was written for a proposal that lost). */
  r->n_fed = base + m;
  eng_kv_rollback(e, r->slot, r->n_fed);
  if (r->snap && m < k + 1) {
    /* Exact rollback of a recurrent state: back to the snapshot before the
     * pass, then the committed entries again (last and the accepted
     * proposals, = toks[base..base+m)); their logits are known already.
     * The entries of a sequence give the same state whatever the batch. */
    char err[PW_ERRMAX];
    int rc = model_kv_state_restore(e->kv, r->slot, r->snap, err);
    for (int i = 0; rc == 0 && i < m; i++)
      e->rents[i] = (model_entry){.seq = r->slot, .pos = base + i, .token = r->toks[base + i], .want_logits = false};
    if (rc == 0) rc = model_forward(e->ctx, e->kv, e->rents, m, NULL, NULL, err);
    if (rc < 0) {
      pw_log(PW_LOG_ERROR, "engine: re-running an accepted prefix failed: %s", err);
      model_kv_truncate(e->kv, r->slot, 0); /* nothing stale survives */
      r->n_fed = 0;
      if (alive) {
        *fin = ENGINE_FINISH_NONE;
        *st = rc;
        *msg = "recurrent state rollback failed";
      }
      alive = false;
    }
    e->d.spec_refeeds++;
  }
  r->snap = NULL;
  if (e->drafter && e->drafter->observe_commit) e->drafter->observe_commit(e, r, a);
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


/* Plans this step's proposals: each generating sequence that still
 * speculates may get up to its width, within `extra` entries of the step
 * budget, oldest request first; then batched drafters propose for all. */
void eng_spec_plan(engine *e, int extra) {
  const drafter_ops *d = e->drafter;
  for (int i = 0; i < e->n_run && extra > 0; i++) {
    engine_req *r = e->run[i];
    if (r->embedding || r->n_fed < r->n_prompt) continue;
    int k = spec_want(e, r);
    if (k > extra) k = extra;
    if (k > 0 && d->propose) k = d->propose(e, r, k);
    r->n_prop = k;
    extra -= k;
  }
  if (d->propose_batch) d->propose_batch(e);
  /* Proposals the grammar refuses would be rejected anyway: cut them. */
  for (int i = 0; i < e->n_run; i++)
    if (e->run[i]->gm && e->run[i]->n_prop > 0)
      e->run[i]->n_prop = grammar_matcher_prefix(e->run[i]->gm, e->run[i]->prop, e->run[i]->n_prop);
}
