/* draft_model.c - the draft-model drafter: a smaller GGUF with the
 * target's vocabulary proposes greedily, batched over the speculating
 * sequences. Its KV cache has the target's slots (cache entries included)
 * and catches up lazily. */
#include "engine/engine_int.h"

#include "base/error.h"
#include "base/log.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define SPEC_DRAFT_PMIN 0.3 /* a draft model proposes only tokens it gives at least this probability */

typedef struct draft_state {
  model *dm;
  model_kv *dkv;      /* [n_slots] sequences, as the target's */
  model_ctx *dctx;
  float *dlogits;     /* [max_active][n_vocab] */
  model_entry *dents; /* [step_tokens] */
} draft_state;

/* The draft's greedy choice from its logits, if it is confident enough to
 * propose it: its softmax probability at least SPEC_DRAFT_PMIN. Proposals
 * the draft itself doubts are mostly rejected and each costs a draft pass
 * and a verified position. */
static bool draft_pick(const engine *e, const float *l, int32_t *tok) {
  float lp;
  *tok = pw_argmax(l, e->n_vocab);
  return pw_sampler_logprobs(l, e->n_vocab, *tok, 0, NULL, &lp) >= 0 && lp >= logf((float)SPEC_DRAFT_PMIN);
}

/* Draft-model proposals for every run-list sequence with n_prop > 0 (the
 * planned count): pass 0 feeds what the draft has not seen yet (prompt,
 * committed tokens, and the last token, whose logits give p0), pass j feeds
 * p(j-1) to get p(j); each pass is one batched draft forward over the
 * sequences still drafting. Greedy. A sequence whose catch-up does not fit
 * the draft batch feeds part of it and proposes nothing this round; a
 * failed draft pass only shortens the proposals. */
static void propose_batch(engine *e) {
  draft_state *ds = e->dstate;
  int cap = e->o.step_tokens, n = 0, rows = 0, kmax = 0;
  for (int i = 0; i < e->n_run; i++) {
    engine_req *r = e->run[i];
    r->draft_row = -1;
    if (r->n_prop <= 0 || n >= cap) {
      r->n_prop = 0;
      continue;
    }
    int have = model_kv_len(ds->dkv, r->slot);
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
      ds->dents[n++] = (model_entry){.seq = r->slot, .pos = have + j, .token = r->toks[have + j],
                                    .want_logits = j == need - 1};
  }
  if (n == 0) return;
  int rc = model_forward(ds->dctx, ds->dkv, ds->dents, n, ds->dlogits, NULL, e->err);
  e->draft_passes = 1;
  if (rc < 0) {
    pw_log(PW_LOG_WARN, "engine: draft pass failed: %s", e->err);
    for (int i = 0; i < e->n_run; i++) e->run[i]->n_prop = 0;
    return;
  }
  for (int i = 0; i < e->n_run; i++) {
    engine_req *r = e->run[i];
    if (r->draft_row >= 0 && !draft_pick(e, ds->dlogits + (size_t)r->draft_row * e->n_vocab, &r->prop[0]))
      r->n_prop = 0;
  }
  for (int j = 1; j < kmax; j++) {
    n = 0;
    for (int i = 0; i < e->n_run; i++) {
      engine_req *r = e->run[i];
      r->draft_row = -1;
      if (r->n_prop <= j) continue;
      r->draft_row = n;
      ds->dents[n++] = (model_entry){.seq = r->slot, .pos = r->n_fed + j, .token = r->prop[j - 1], .want_logits = true};
    }
    if (n == 0) break;
    rc = model_forward(ds->dctx, ds->dkv, ds->dents, n, ds->dlogits, NULL, e->err);
    e->draft_passes++;
    for (int i = 0; i < e->n_run; i++) {
      engine_req *r = e->run[i];
      if (r->draft_row < 0) continue;
      if (rc < 0 || !draft_pick(e, ds->dlogits + (size_t)r->draft_row * e->n_vocab, &r->prop[j])) r->n_prop = j;
    }
    if (rc < 0) {
      pw_log(PW_LOG_WARN, "engine: draft pass failed: %s", e->err);
      break;
    }
  }
}


/* Loads the draft model and checks that it speaks the target's vocabulary:
 * the same size and the same text for every token (so a proposed id means
 * the same piece to both models). */
static int draft_load(engine *e, draft_state *ds, const engine_opts *o, char *err) {
  char derr[PW_ERRMAX] = "";
  const char *path = o->spec_draft_model;
  model_opts mo = {.n_threads = o->n_threads,
                   .pool = model_pool(e->m),
                   .weights = {.io = o->weights_io, .key_file = o->weights_key_file}};
  int rc = model_load(path, &mo, &ds->dm, derr);
  if (rc < 0) return pw_seterr(err, rc, "engine: draft model %s: %s", path, derr);
  tok_vocab *dv = NULL;
  if ((rc = tok_vocab_load(model_gguf(ds->dm), &dv, derr)) < 0)
    return pw_seterr(err, rc, "engine: draft model %s: %s", path, derr);
  int32_t nt = tok_n_vocab(e->vocab), nd = tok_n_vocab(dv);
  if (nd != nt || model_hp(ds->dm)->n_vocab != e->n_vocab) {
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

static void destroy(engine *e) {
  draft_state *ds = e->dstate;
  if (!ds) return;
  model_ctx_destroy(ds->dctx);
  e->dkv = NULL;
  model_kv_destroy(ds->dkv);
  model_destroy(ds->dm);
  free(ds->dlogits);
  free(ds->dents);
  free(ds);
  e->dstate = NULL;
}

static int create(engine *e, const engine_opts *o, char *err) {
  draft_state *ds = calloc(1, sizeof *ds);
  if (!ds) return pw_seterr(err, PW_ENOMEM, "engine: out of memory");
  e->dstate = ds;
  int rc;
  if ((rc = draft_load(e, ds, o, err)) < 0) return rc;
  if (model_has_recurrent(ds->dm))
    return pw_seterr(err, PW_EUNSUPPORTED, "engine: a draft model with a recurrent state (%s) is not supported",
                     model_hp(ds->dm)->arch_name);
  /* its passes are at most step_tokens positions too (the batch's size);
   * its windowed layers keep every position too with swa_full */
  const model_kv_opts ko = {.max_pass = o->swa_full ? 0 : o->step_tokens};
  if ((rc = model_kv_create_ex(ds->dm, e->n_slots, e->n_ctx, &ko, &ds->dkv, err)) < 0) return rc;
  if ((rc = model_ctx_create(ds->dm, o->step_tokens, e->n_ctx, &ds->dctx, err)) < 0) return rc;
  e->dkv = ds->dkv;
  ds->dlogits = malloc((size_t)o->max_active * e->n_vocab * sizeof *ds->dlogits);
  ds->dents = calloc((size_t)o->step_tokens, sizeof *ds->dents);
  if (!ds->dlogits || !ds->dents) return pw_seterr(err, PW_ENOMEM, "engine: out of memory for draft buffers");
  return 0;
}

/* The draft catches up lazily, so its KV may be shorter than n already;
 * a cut its sliding-window rings cannot make exactly starts it over (it
 * catches up from 0). */
static void rollback(engine *e, int slot, int n) {
  draft_state *ds = e->dstate;
  if (model_kv_len(ds->dkv, slot) <= n) return;
  model_kv_truncate(ds->dkv, slot, model_kv_truncate_exact(ds->dkv, slot, n) ? n : 0);
}

const drafter_ops eng_draft_model = {.mode = ENGINE_SPEC_DRAFT,
                                     .name = "draft",
                                     .needs_model = true,
                                     .create = create,
                                     .destroy = destroy,
                                     .propose_batch = propose_batch,
                                     .rollback = rollback};
