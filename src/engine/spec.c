/* spec.c - exact speculative decoding: planning each round's proposals,
 * verifying them in the batched target pass, the adaptive width with its
 * fallback, and the table of drafters. See engine.h ("Speculation").
 *
 * Not here: how proposals are made (draft_*.c, one file per drafter). A
 * new drafter is one file and one row of engine_drafters. */
#include "engine/engine_int.h"

#include "base/clock.h"
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
  int k = e->o.spec_policy == ENGINE_SPEC_POLICY_COST ? e->o.spec_draft_max : r->spec_k;
  int left = r->max_tokens - r->n_gen - 1;
  if (k > left) k = left;
  return k > 0 ? k : 0;
}


/* Acceptance policy: the adaptive width after a round of k proposals with
 * a accepted: grow after full acceptance, move towards a + 1 after a
 * rejection; fall back to target-only decoding when the acceptance over
 * the last SPEC_WINDOW rounds stays below SPEC_MIN_RATE. */
static void spec_adapt_acceptance(engine *e, engine_req *r, int k, int a) {
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

/* ---- cost policy ------------------------------------------------------------ */

/* After a round of k proposals with a accepted: positions 1..a were
 * verified and accepted, position a + 1 (if a < k) verified and refused.
 * Kept per position because acceptance comes in runs (a copied stretch
 * is right for many tokens or wrong from the first), which one rate for
 * all positions would miss; older rounds weigh less, so a request that
 * starts or stops copying is followed. */
static void spec_adapt_cost(engine *e, engine_req *r, int k, int a) {
  for (int i = 0; i < k && i <= a; i++) {
    r->acc_n[i] = r->acc_n[i] * SPEC_DECAY + 1;
    r->acc_a[i] = r->acc_a[i] * SPEC_DECAY + (i < a ? 1 : 0);
    e->acc_n[i] = e->acc_n[i] * SPEC_HIST_DECAY + 1;
    e->acc_a[i] = e->acc_a[i] * SPEC_HIST_DECAY + (i < a ? 1 : 0);
  }
}

/* A request's prior, on its first planned round (the engine thread owns
 * e->acc_*): SPEC_PRIOR_N rounds at the engine's recent rate, itself
 * pulled towards SPEC_PRIOR_A / SPEC_PRIOR_N by as many rounds, so a
 * fresh engine starts optimistic and one whose drafter has been refused
 * on every round lately starts a request declined. */
static void spec_prime(const engine *e, engine_req *r) {
  if (r->spec_primed) return;
  r->spec_primed = true;
  for (int i = 0; i < SPEC_MAX_K; i++) {
    const float rate = (e->acc_a[i] + SPEC_PRIOR_A) / (e->acc_n[i] + SPEC_PRIOR_N);
    r->acc_n[i] = SPEC_PRIOR_N;
    r->acc_a[i] = SPEC_PRIOR_N * rate;
  }
}

static void spec_adapt(engine *e, engine_req *r, int k, int a) {
  if (e->o.spec_policy == ENGINE_SPEC_POLICY_COST)
    spec_adapt_cost(e, r, k, a);
  else
    spec_adapt_acceptance(e, r, k, a);
}

/* Records the time of a generation step of n entries (sched.c). A time
 * more than twice the average counts as twice it: one step slowed by
 * something else on the machine must not make a width look expensive for
 * long (a real rise still gets through, doubling per step). */
void eng_spec_observe_pass(engine *e, int n, uint64_t ns) {
  if (n < 1 || n > e->o.step_tokens || ns == 0) return;
  double *c = &e->pass_ns[n], x = (double)ns;
  if (*c > 0 && x > 2 * *c) x = 2 * *c;
  *c = *c > 0 ? *c + 0.25 * (x - *c) : x;
  e->pass_seen[n] = e->n_passes;
}

/* The time of a generation step of n entries: the fixed test cost, the
 * measured average, or, for a size never seen, the time of the largest
 * smaller size seen (else of the smallest larger one): optimistic, so a
 * width that was never tried looks cheap, is tried, and is then
 * measured. With explore, a size not seen in the last SPEC_COST_STALE
 * passes counts as never seen, so a width that once looked expensive
 * (a step slowed by something else) is tried again while proposals pay;
 * without it (deciding whether to propose at all, pricing a probe) the
 * last measurement stands, so a request that stopped proposing is not
 * talked into it again by forgetting what proposals cost. 0 = no step
 * seen at all. */
static double pass_cost(const engine *e, int n, bool explore) {
  if (e->cost_fixed) return e->cost_fixed[(n < e->n_cost_fixed ? n : e->n_cost_fixed) - 1];
  int cap = e->o.step_tokens;
  if (n > cap) n = cap;
  const double *c = e->pass_ns;
  long fresh = explore ? e->n_passes - SPEC_COST_STALE : 0;
  for (int i = n; i >= 1; i--)
    if (c[i] > 0 && (i < n || e->pass_seen[i] >= fresh)) return c[i];
  for (int i = n + 1; i <= cap; i++)
    if (c[i] > 0) return c[i];
  return 0;
}

/* Records the time of the drafter's k chained passes in one step (the
 * batched passes of its draft model or MTP block); outliers clamped as
 * the target's. */
static void spec_observe_draft(engine *e, int k, uint64_t ns) {
  if (k < 1 || k > SPEC_MAX_K || ns == 0) return;
  double *c = &e->draft_ns[k], x = (double)ns;
  if (*c > 0 && x > 2 * *c) x = 2 * *c;
  *c = *c > 0 ? *c + 0.25 * (x - *c) : x;
}

/* The time of the drafter's passes for a step whose longest round has k
 * proposals (k chained passes): the fixed test cost, the measured
 * average, or the nearest measured length scaled to k passes (a pass of
 * the chain costs about the same as the others); 0 for k = 0, for a
 * drafter never timed (tried, then measured), and for the fixed target
 * costs of a test without fixed drafter costs (its units are not time). */
static double draft_cost(const engine *e, int k) {
  if (k <= 0) return 0;
  if (e->draft_fixed) return e->draft_fixed[(k < e->n_draft_fixed ? k : e->n_draft_fixed) - 1];
  if (e->cost_fixed) return 0;
  if (k > SPEC_MAX_K) k = SPEC_MAX_K;
  const double *c = e->draft_ns;
  if (c[k] > 0) return c[k];
  for (int i = k - 1; i >= 1; i--)
    if (c[i] > 0) return c[i] * k / i;
  for (int i = k + 1; i <= SPEC_MAX_K; i++)
    if (c[i] > 0) return c[i] * k / i;
  return 0;
}

/* Expected tokens of a round of k proposals for r: one, plus the chance
 * that proposals 1..j are all accepted, for each j <= k. */
static double spec_expect(const engine_req *r, int k) {
  double sum = 1, t = 1;
  for (int i = 0; i < k; i++) sum += (t *= (double)r->acc_a[i] / r->acc_n[i]);
  return sum;
}

/* Expected tokens of a round of k proposals at the prior rate. */
static double prior_expect(int k) {
  double sum = 1, t = 1;
  for (int i = 0; i < k; i++) sum += (t *= (double)SPEC_PRIOR_A / SPEC_PRIOR_N);
  return sum;
}

/* The time of a step of n entries (t expected tokens so far, fixed and dk
 * as for spec_cost_width) in which r gets j proposals. */
static double step_cost(const engine *e, int n, bool fixed, int dk, int j, bool explore) {
  return (fixed ? pass_cost(e, n, false) : pass_cost(e, n + j, explore)) + draft_cost(e, j > dk ? j : dk);
}

/* The probe of a request r that gets no proposals: *kp of at most k, the
 * width that would pay best were proposals accepted at the prior rate
 * again (a cheap verification probes wide, a costly one with one
 * proposal), and the declined steps to wait for it: r's back-off, or
 * longer when the probe's price, what its step costs over a plain one
 * less what it is expected to gain, in plain steps (measured costs, r's
 * current rate), would be more than spec_probe_budget of the plain steps
 * in between. A probe that is never accepted thus costs a fixed share of
 * the time however expensive the drafter is. Capped at SPEC_PROBE_FAR. */
static double spec_probe_gap(const engine *e, const engine_req *r, int k, int n, double t, bool fixed, int dk,
                             int *kp) {
  const double c0 = pass_cost(e, n, false), base = c0 + draft_cost(e, dk);
  int km = k < SPEC_PROBE_K ? k : SPEC_PROBE_K;
  double bv = -1, bc = base;
  *kp = km;
  for (int j = 1; j <= km; j++) {
    double cj = step_cost(e, n, fixed, dk, j, false), v = (t - 1 + prior_expect(j)) / cj;
    if (v > bv) {
      bv = v;
      bc = cj;
      *kp = j;
    }
  }
  double gap = r->spec_gap;
  if (c0 > 0) {
    double x = (bc - base) / c0 - (spec_expect(r, *kp) - 1);
    if (x > 0 && x / e->o.spec_probe_budget > gap) gap = x / e->o.spec_probe_budget;
  }
  return gap < SPEC_PROBE_FAR ? gap : SPEC_PROBE_FAR;
}

/* Cost policy: of 0..k proposals for r, the number that gives the step the
 * most expected tokens per unit of time, where the step has n entries
 * and t expected tokens so far (fixed = prompts fill the step whatever
 * the proposals, so they cost no verification time of their own), and
 * its drafter runs dk chained passes for the rounds planned so far (a
 * round of j > dk proposals makes it j: the drafter's passes are batched
 * over the step's requests). Proposals must beat none by SPEC_MARGIN.
 * Stale widths look cheap only while r is proposing (see pass_cost).
 * No step measured yet: k. */
static int spec_best(const engine *e, const engine_req *r, int k, int n, double t, bool fixed, int dk) {
  double c0 = pass_cost(e, n, false);
  if (c0 <= 0) return k;
  double bv = t / (c0 + draft_cost(e, dk)) * SPEC_MARGIN;
  int best = 0;
  for (int j = 1; j <= k; j++) {
    double v = (t - 1 + spec_expect(r, j)) / step_cost(e, n, fixed, dk, j, r->spec_on);
    if (v > bv) {
      best = j;
      bv = v;
    }
  }
  return best;
}

/* r's width this round (spec_best). None for long enough: a probe
 * (spec_probe_gap). None until r's last token: r stops speculating, so
 * its drafter stops following it (the MTP block's passes over its
 * positions, kept for the next proposal). */
static int spec_cost_width(engine *e, engine_req *r, int k, int n, double t, bool fixed, int dk) {
  if (k == 0) return 0;
  spec_prime(e, r);
  const int best = spec_best(e, r, k, n, t, fixed, dk);
  r->spec_on = best > 0;
  if (best > 0) {
    r->spec_idle = 0;
    r->spec_gap = SPEC_PROBE_MIN;
    return best;
  }
  e->d.spec_declined++;
  int kp;
  const double gap = spec_probe_gap(e, r, k, n, t, fixed, dk, &kp);
  if (++r->spec_idle < gap) {
    /* a step emits at least one token: no probe before the last one */
    if (gap - r->spec_idle >= r->max_tokens - r->n_gen) {
      r->spec = false;
      e->d.spec_fallbacks++;
    }
    return 0;
  }
  r->spec_idle = 0;
  r->spec_gap = r->spec_gap * 2 < SPEC_PROBE_MAX ? r->spec_gap * 2 : SPEC_PROBE_MAX;
  e->d.spec_probes++;
  return kp;
}

/* A request whose prompt is about to be evaluated, on its first plan: when
 * it would get no proposals on its first round (alone in the step) and
 * its first probe would come after its last token, it stops speculating
 * now, before its prompt goes through the drafter (the MTP block runs over
 * every prompt it may later draft for). */
static void spec_screen(engine *e, engine_req *r) {
  spec_prime(e, r);
  const int k = spec_want(e, r);
  int kp;
  if (k == 0 || spec_best(e, r, k, 1, 1, false, 0) > 0) return;
  if (spec_probe_gap(e, r, k, 1, 1, false, 0, &kp) >= r->max_tokens) {
    r->spec = false;
    e->d.spec_fallbacks++;
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
  bool cost = e->o.spec_policy == ENGINE_SPEC_POLICY_COST, waiting = false;
  int n = 0; /* entries of the step so far: one per generating sequence */
  for (int i = 0; i < e->n_run; i++) {
    engine_req *r = e->run[i];
    if (r->embedding || r->n_fed < r->n_prompt) {
      waiting = waiting || !r->embedding;
      if (cost && r->spec && !r->spec_primed) spec_screen(e, r);
    } else {
      n++;
    }
  }
  double t = n; /* expected tokens of the step so far */
  int dk = 0;    /* the longest round planned so far: the drafter's chained passes */
  if (waiting) n += extra;
  for (int i = 0; i < e->n_run && extra > 0; i++) {
    engine_req *r = e->run[i];
    if (r->embedding || r->n_fed < r->n_prompt) continue;
    int k = spec_want(e, r);
    if (k > extra) k = extra;
    if (cost && r->spec) k = spec_cost_width(e, r, k, n, t, waiting, dk);
    if (k > 0 && d->propose) k = d->propose(e, r, k);
    r->n_prop = k;
    extra -= k;
    if (k > dk) dk = k;
    if (cost && k > 0) {
      if (!waiting) n += k;
      t += spec_expect(r, k) - 1;
    }
  }
  if (d->propose_batch && dk > 0) {
    /* the drafter's passes are timed as the target's steps are (sched.c),
     * by how many it chained */
    const uint64_t t0 = pw_now_ns();
    e->draft_passes = 0;
    e->draft_aside_ns = 0;
    d->propose_batch(e);
    const uint64_t dt = pw_now_ns() - t0;
    spec_observe_draft(e, e->draft_passes, dt > e->draft_aside_ns ? dt - e->draft_aside_ns : 0);
    e->d.spec_draft_passes += (uint64_t)e->draft_passes;
  }
  /* Proposals the grammar refuses would be rejected anyway: cut them. */
  for (int i = 0; i < e->n_run; i++)
    if (e->run[i]->gm && e->run[i]->n_prop > 0)
      e->run[i]->n_prop = grammar_matcher_prefix(e->run[i]->gm, e->run[i]->prop, e->run[i]->n_prop);
}
