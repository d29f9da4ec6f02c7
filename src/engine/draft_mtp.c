/* draft_mtp.c - the native MTP drafter: the target model's own
 * multi-token-prediction block (qwen35 "nextn", model_mtp_forward) proposes
 * tokens from the target's last hidden state, chained for k > 1 on its own
 * output; the target verifies them as with any drafter (spec.c).
 *
 * The block attends over its own KV cache, one layer with the target's
 * slots (cache entries included). Its position p holds the pair (target
 * hidden state at p - 1, token at p), as llama.cpp's MTP speculation keeps
 * it: after every target pass of the generation batch (observe_pass) the
 * block runs over that pass's entries with the hidden states the pass just
 * produced, so prompt and committed tokens are paired with the target's
 * states, never with the block's own. Draft positions (chained proposals)
 * are dropped before the verification pass's entries are written over
 * them, and a rollback cuts the cache with the target's; the recurrent
 * state of the target goes back through the engine's snapshots.
 *
 * The block's passes are deferred: a slot's (hidden state, token) pairs
 * wait in a backlog of up to MTP_BACKLOG positions and go through the block
 * in one batched pass when the slot next asks for proposals or the backlog
 * is full. A request the cost policy keeps from drafting then costs one
 * batched pass every MTP_BACKLOG positions instead of a pass per step (the
 * block is about a tenth of a small model's step); the cache it builds is
 * the same, position by position (model passes are batch-invariant).
 *
 * Per slot the drafter keeps the target's hidden state at the last
 * committed position (what the next proposal is paired with) and the
 * hidden states of the slot's entries in the latest pass (a verification
 * round commits a prefix of them). A slot whose history it cannot pair
 * (e.g. a state it never saw) proposes nothing until it restarts at 0.
 *
 * Not here: verification, the adaptive width (spec.c). */
#include "engine/engine_int.h"

#include "base/clock.h"
#include "base/error.h"
#include "base/log.h"
#include "sample/sample.h"

#include <stdlib.h>
#include <string.h>

void (*eng_mtp_test_hook)(engine_req *r, int32_t *prop, int n);
int eng_mtp_backlog = -1;

/* positions a slot may hold back from the block (see the top) */
#define MTP_BACKLOG 64

typedef struct mtp_state {
  int E;              /* n_embd */
  int rows;           /* hidden rows kept per slot: SPEC_MAX_K + 1 */
  model_kv *mkv;      /* [n_slots] sequences, one attention layer */
  model_ctx *mctx;    /* the block's passes (not the target's context) */
  float *hid;         /* [step_tokens][E] the target pass's hidden states */
  float *hin;         /* [step_tokens][E] the block's h inputs */
  model_entry *ments; /* [step_tokens] */
  float *logits;      /* [max_active][n_vocab] */
  float *hout;        /* [max_active][E] */
  float *pend;        /* [n_slots][E] target hidden state at pend_pos */
  int *pend_pos;      /* [n_slots] -1: none */
  bool *valid;        /* [n_slots] the block's cache pairs the slot's history */
  float *vrows;       /* [n_slots][rows][E] the slot's hidden states in the latest pass */
  int *vbase, *vn;    /* [n_slots] position of vrows' first row, rows held */
  engine_req **who;   /* [max_active] requests of the current draft pass */
  int bl_max;         /* backlog capacity per slot (0: every pass runs at once) */
  int32_t *bl_tok;    /* [n_slots][bl_max] tokens of the deferred positions */
  float *bl_hin;      /* [n_slots][bl_max][E] their h inputs */
  int *bl_n;          /* [n_slots] deferred positions, from model_kv_len(mkv) on */
  int cap;            /* rows of ments/hin */
} mtp_state;

static void destroy(engine *e) {
  mtp_state *s = e->dstate;
  if (!s) return;
  model_ctx_destroy(s->mctx);
  model_kv_destroy(s->mkv);
  free(s->hid);
  free(s->hin);
  free(s->ments);
  free(s->logits);
  free(s->hout);
  free(s->pend);
  free(s->pend_pos);
  free(s->valid);
  free(s->vrows);
  free(s->vbase);
  free(s->vn);
  free(s->who);
  free(s->bl_tok);
  free(s->bl_hin);
  free(s->bl_n);
  free(s);
  e->dstate = NULL;
}

static int create(engine *e, const engine_opts *o, char *err) {
  if (!model_has_mtp(e->m))
    return pw_seterr(err, PW_EUNSUPPORTED,
                     "engine: speculation mode \"mtp\" needs a model with an MTP block (nextn tensors); %s has none",
                     model_hp(e->m)->arch_name);
  mtp_state *s = calloc(1, sizeof *s);
  if (!s) return pw_seterr(err, PW_ENOMEM, "engine: out of memory");
  e->dstate = s;
  s->E = e->n_embd;
  s->rows = SPEC_MAX_K + 1;
  int rc;
  if ((rc = model_mtp_kv_create(e->m, e->n_slots, e->n_ctx, &s->mkv, err)) < 0) return rc;
  if ((rc = model_ctx_create(e->m, o->step_tokens, e->n_ctx, &s->mctx, err)) < 0) return rc;
  e->tok_bytes += model_kv_bytes(s->mkv) / ((size_t)e->n_slots * e->n_ctx);
  const size_t E = (size_t)s->E, T = (size_t)o->step_tokens, A = (size_t)o->max_active, S = (size_t)e->n_slots;
  s->bl_max = eng_mtp_backlog >= 0 ? eng_mtp_backlog : MTP_BACKLOG;
  const size_t B = (size_t)s->bl_max;
  s->cap = (int)(T + S * B);
  s->hid = malloc(T * E * sizeof(float));
  s->hin = malloc((size_t)s->cap * E * sizeof(float));
  s->ments = calloc((size_t)s->cap, sizeof *s->ments);
  s->bl_tok = malloc((S * B + 1) * sizeof(int32_t));
  s->bl_hin = malloc((S * B * E + 1) * sizeof(float));
  s->bl_n = calloc(S, sizeof(int));
  s->logits = malloc(A * e->n_vocab * sizeof(float));
  s->hout = malloc(A * E * sizeof(float));
  s->pend = calloc(S * E, sizeof(float));
  s->pend_pos = malloc(S * sizeof(int));
  s->valid = calloc(S, sizeof(bool));
  s->vrows = malloc(S * (size_t)s->rows * E * sizeof(float));
  s->vbase = calloc(S, sizeof(int));
  s->vn = calloc(S, sizeof(int));
  s->who = calloc(A, sizeof *s->who);
  if (!s->hid || !s->hin || !s->ments || !s->logits || !s->hout || !s->pend || !s->pend_pos || !s->valid ||
      !s->vrows || !s->vbase || !s->vn || !s->who || !s->bl_tok || !s->bl_hin || !s->bl_n)
    return pw_seterr(err, PW_ENOMEM, "engine: out of memory for the MTP drafter");
  for (size_t i = 0; i < S; i++) s->pend_pos[i] = -1;
  return 0;
}

static bool slot_speculates(const engine *e, int seq) {
  for (int p = 0; p < e->n_part; p++)
    if (e->part[p]->slot == seq) return e->part[p]->spec;
  return false;
}

/* Appends slot seq's backlog to ments/hin at m (positions from the block's
 * cache length on) and empties it; returns the new m. */
static int take_backlog(mtp_state *s, int seq, int m) {
  const size_t E = (size_t)s->E;
  const int base = model_kv_len(s->mkv, seq);
  for (int i = 0; i < s->bl_n[seq]; i++, m++) {
    const size_t row = (size_t)seq * s->bl_max + (size_t)i;
    s->ments[m] = (model_entry){.seq = seq, .pos = base + i, .token = s->bl_tok[row], .want_logits = false};
    memcpy(s->hin + (size_t)m * E, s->bl_hin + row * E, E * sizeof(float));
  }
  s->bl_n[seq] = 0;
  return m;
}

/* The block over ments[m] (no logits), in passes of at most the step's
 * entries (the backlogs of several slots can hold more); a slot's
 * positions stay in order, so its cache is the same. On failure the
 * slots of the failed pass and of those after it stop drafting. */
static void run_block(engine *e, mtp_state *s, int m) {
  char err[PW_ERRMAX];
  const uint64_t t0 = pw_now_ns();
  for (int i = 0; i < m;) {
    const int c = m - i < e->o.step_tokens ? m - i : e->o.step_tokens;
    e->d.spec_draft_catchups++;
    if (model_mtp_forward(s->mctx, s->mkv, s->ments + i, c, s->hin + (size_t)i * s->E, NULL, NULL, err) < 0) {
      pw_log(PW_LOG_WARN, "engine: MTP pass failed: %s", err);
      for (int j = i; j < m; j++) s->valid[s->ments[j].seq] = false;
      break;
    }
    i += c;
  }
  e->draft_aside_ns += pw_now_ns() - t0;
}

/* After a target pass over ents[n] (e->ctx still holds it): the block runs
 * over the same entries, each paired with the target's hidden state one
 * position before it, so its cache follows the target's. */
static void observe_pass(engine *e, const model_entry *ents, int n) {
  mtp_state *s = e->dstate;
  const size_t E = (size_t)s->E;
  model_ctx_hidden(e->ctx, n, s->hid);
  /* a request that stopped speculating (the adaptive fallback) will not
   * ask for proposals again: its slot is no longer followed */
  for (int p = 0; p < e->n_part; p++)
    if (!e->part[p]->spec) s->valid[e->part[p]->slot] = false;
  int m = 0;
  for (int t = 0; t < n;) {
    const int seq = ents[t].seq, p0 = ents[t].pos;
    int c = 1;
    while (t + c < n && ents[t + c].seq == seq) c++;
    bool ok;
    if (p0 == 0 && !slot_speculates(e, seq)) {
      ok = false;
    } else if (p0 == 0) {
      model_kv_truncate(s->mkv, seq, 0);
      s->bl_n[seq] = 0;
      s->valid[seq] = true;
      ok = true;
    } else {
      const int kl = model_kv_len(s->mkv, seq);
      ok = s->valid[seq] && s->pend_pos[seq] == p0 - 1 && kl + s->bl_n[seq] >= p0;
      if (ok && p0 < kl) { /* drop the chained drafts */
        model_kv_truncate(s->mkv, seq, p0);
        s->bl_n[seq] = 0;
      } else if (ok) {
        s->bl_n[seq] = p0 - kl;
      }
    }
    if (ok) {
      /* the pass's positions: into the backlog while it has room, else
       * through the block now, after what the backlog held */
      const bool defer = s->bl_n[seq] + c <= s->bl_max;
      const size_t brow = (size_t)seq * s->bl_max + (size_t)s->bl_n[seq];
      if (!defer) m = take_backlog(s, seq, m);
      for (int i = 0; i < c; i++) {
        const float *h = i > 0 ? s->hid + (size_t)(t + i - 1) * E : p0 == 0 ? NULL : s->pend + (size_t)seq * E;
        float *dst = defer ? s->bl_hin + (brow + (size_t)i) * E : s->hin + (size_t)(m + i) * E;
        if (h)
          memcpy(dst, h, E * sizeof(float));
        else
          memset(dst, 0, E * sizeof(float));
        if (defer)
          s->bl_tok[brow + (size_t)i] = ents[t + i].token;
        else
          s->ments[m + i] = (model_entry){.seq = seq, .pos = p0 + i, .token = ents[t + i].token, .want_logits = false};
      }
      if (defer)
        s->bl_n[seq] += c;
      else
        m += c;
      /* the hidden states a verification may commit: the last rows */
      const int keep = c < s->rows ? c : s->rows;
      memcpy(s->vrows + (size_t)seq * s->rows * E, s->hid + (size_t)(t + c - keep) * E, keep * E * sizeof(float));
      s->vbase[seq] = p0 + c - keep;
      s->vn[seq] = keep;
      memcpy(s->pend + (size_t)seq * E, s->hid + (size_t)(t + c - 1) * E, E * sizeof(float));
      s->pend_pos[seq] = p0 + c - 1;
    } else {
      s->valid[seq] = false;
    }
    t += c;
  }
  run_block(e, s, m);
}

/* A verification committed r up to n_fed: the next proposal pairs with
 * the target's hidden state at n_fed - 1, one of the pass's rows. */
static void observe_commit(engine *e, engine_req *r, int accepted) {
  (void)accepted;
  mtp_state *s = e->dstate;
  const int seq = r->slot, want = r->n_fed - 1;
  if (seq < 0) return;
  if (want >= s->vbase[seq] && want < s->vbase[seq] + s->vn[seq]) {
    memcpy(s->pend + (size_t)seq * s->E, s->vrows + ((size_t)seq * s->rows + (size_t)(want - s->vbase[seq])) * s->E,
           (size_t)s->E * sizeof(float));
    s->pend_pos[seq] = want;
  } else if (want >= 0) {
    s->valid[seq] = false;
  }
}

static void rollback(engine *e, int slot, int n) {
  mtp_state *s = e->dstate;
  const int kl = model_kv_len(s->mkv, slot);
  if (kl > n) {
    model_kv_truncate(s->mkv, slot, n);
    s->bl_n[slot] = 0;
  } else if (kl + s->bl_n[slot] > n) {
    s->bl_n[slot] = n - kl;
  }
}

/* Proposals for every run-list sequence with n_prop > 0 (the planned
 * count): pass 0 pairs the last token with the target's hidden state
 * before it; pass j feeds proposal j - 1 with the block's own output
 * state. Greedy; each pass is batched over the sequences still drafting. */
static void propose_batch(engine *e) {
  mtp_state *s = e->dstate;
  const size_t E = (size_t)s->E;
  int n = 0, kmax = 0;
  char err[PW_ERRMAX];
  /* the deferred positions of the sequences about to draft, first */
  int m = 0;
  for (int i = 0; i < e->n_run; i++)
    if (e->run[i]->n_prop > 0 && e->run[i]->slot >= 0 && s->valid[e->run[i]->slot])
      m = take_backlog(s, e->run[i]->slot, m);
  run_block(e, s, m);
  for (int i = 0; i < e->n_run; i++) {
    engine_req *r = e->run[i];
    r->draft_row = -1;
    if (r->n_prop <= 0) continue;
    const int seq = r->slot;
    if (!s->valid[seq] || s->pend_pos[seq] != r->n_fed - 1 || model_kv_len(s->mkv, seq) != r->n_fed) {
      r->n_prop = 0;
      continue;
    }
    r->draft_row = n;
    s->who[n] = r;
    s->ments[n] = (model_entry){.seq = seq, .pos = r->n_fed, .token = r->last, .want_logits = true};
    memcpy(s->hin + (size_t)n * E, s->pend + (size_t)seq * E, E * sizeof(float));
    if (r->n_prop > kmax) kmax = r->n_prop;
    n++;
  }
  for (int j = 0; j < kmax && n > 0; j++) {
    int rc = model_mtp_forward(s->mctx, s->mkv, s->ments, n, s->hin, s->logits, s->hout, err);
    e->draft_passes++;
    if (rc < 0) {
      pw_log(PW_LOG_WARN, "engine: MTP draft pass failed: %s", err);
      for (int i = 0; i < n; i++) s->who[i]->n_prop = j;
      break;
    }
    int nn = 0;
    for (int i = 0; i < n; i++) {
      engine_req *r = s->who[i];
      r->prop[j] = (int32_t)pw_argmax(s->logits + (size_t)i * e->n_vocab, e->n_vocab);
      if (r->n_prop <= j + 1) continue;
      s->who[nn] = r;
      s->ments[nn] = (model_entry){.seq = r->slot, .pos = r->n_fed + 1 + j, .token = r->prop[j], .want_logits = true};
      memcpy(s->hin + (size_t)nn * E, s->hout + (size_t)i * E, E * sizeof(float));
      nn++;
    }
    n = nn;
  }
  if (eng_mtp_test_hook)
    for (int i = 0; i < e->n_run; i++)
      if (e->run[i]->draft_row >= 0 && e->run[i]->n_prop > 0) eng_mtp_test_hook(e->run[i], e->run[i]->prop, e->run[i]->n_prop);
}

const drafter_ops eng_draft_mtp = {.mode = ENGINE_SPEC_MTP,
                                   .name = "mtp",
                                   .create = create,
                                   .destroy = destroy,
                                   .propose_batch = propose_batch,
                                   .observe_pass = observe_pass,
                                   .observe_commit = observe_commit,
                                   .rollback = rollback};
