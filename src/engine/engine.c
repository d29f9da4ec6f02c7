/* engine.c - the inference engine's lifecycle and model facts. The engine
 * as a whole (engine_int.h lists its files): request handles and their event queues,
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
#include "engine/engine_int.h"

#include "base/error.h"
#include "base/log.h"
#include "base/sha256.h"
#include "tensor/traits.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
  if (strcmp(name, "off") == 0) return ENGINE_SPEC_OFF;
  for (int i = 0; engine_drafters[i]; i++)
    if (strcmp(name, engine_drafters[i]->name) == 0) return engine_drafters[i]->mode;
  return -1;
}

int engine_spec_policy_parse(const char *name) {
  if (!name) return -1;
  if (strcmp(name, "cost") == 0) return ENGINE_SPEC_POLICY_COST;
  if (strcmp(name, "acceptance") == 0) return ENGINE_SPEC_POLICY_ACCEPTANCE;
  return -1;
}

const char *engine_spec_policy_name(int policy) {
  return policy == ENGINE_SPEC_POLICY_COST ? "cost" : policy == ENGINE_SPEC_POLICY_ACCEPTANCE ? "acceptance" : "unknown";
}

const char *engine_spec_name(int mode) {
  if (mode == ENGINE_SPEC_OFF) return "off";
  const drafter_ops *d = eng_drafter(mode);
  return d ? d->name : "unknown";
}

/* Fills in the defaults of opts and checks every range; *d gets the
 * speculation mode's drafter (NULL = off). */
static int resolve_opts(const engine_opts *opts, engine_opts *out, const drafter_ops **d, char *err) {
  engine_opts o = *opts;
  if (o.n_threads == 0) o.n_threads = ENGINE_DEFAULT_THREADS;
  if (o.max_active == 0) o.max_active = ENGINE_DEFAULT_ACTIVE;
  if (o.max_queue == 0) o.max_queue = ENGINE_DEFAULT_QUEUE;
  if (o.step_tokens == 0) o.step_tokens = 512;
  if (o.max_events == 0) o.max_events = 256;
  /* 7: a verification pass of 1 + 7 tokens fills the kernels' 8-token
   * groups; a 9th token costs a second pass over the weights (measured
   * 20% more time for that one token on a 0.5B model) */
  if (o.spec_draft_max == 0) o.spec_draft_max = ENGINE_DEFAULT_SPEC_K;
  if (o.prompt_cache_entries == 0) o.prompt_cache_entries = 8;
  if (o.prompt_cache_bytes == 0) o.prompt_cache_bytes = (size_t)1 << 30;
  if (o.prompt_cache_ttl_s == 0) o.prompt_cache_ttl_s = 600;
  if (o.weights_io < 0 || o.weights_io >= WEIGHTS_IO_COUNT)
    return pw_seterr(err, PW_EINVAL, "engine: unknown weights read strategy %d", o.weights_io);
  if (o.n_threads < 1 || o.n_threads > ENGINE_MAX_THREADS)
    return pw_seterr(err, PW_EINVAL, "engine: n_threads %d out of range [1, %d]", o.n_threads, ENGINE_MAX_THREADS);
  if (o.max_active < 1 || o.max_active > ENGINE_MAX_ACTIVE)
    return pw_seterr(err, PW_EINVAL, "engine: max_active %d out of range [1, %d]", o.max_active, ENGINE_MAX_ACTIVE);
  if (o.max_queue < 0 || o.max_queue > ENGINE_MAX_QUEUE)
    return pw_seterr(err, PW_EINVAL, "engine: max_queue %d out of range [0, %d]", o.max_queue, ENGINE_MAX_QUEUE);
  if (o.n_ctx != 0 && (o.n_ctx < ENGINE_MIN_CTX || o.n_ctx > ENGINE_MAX_CTX))
    return pw_seterr(err, PW_EINVAL, "engine: n_ctx %d out of range [%d, %d]", o.n_ctx, ENGINE_MIN_CTX, ENGINE_MAX_CTX);
  if (o.step_tokens < 1 || o.step_tokens > 65536)
    return pw_seterr(err, PW_EINVAL, "engine: step_tokens %d out of range [1, 65536]", o.step_tokens);
  if (o.max_events < 2 || o.max_events > 1 << 20)
    return pw_seterr(err, PW_EINVAL, "engine: max_events %d out of range [2, 1048576]", o.max_events);
  const drafter_ops *drafter = *d = o.spec_mode == ENGINE_SPEC_OFF ? NULL : eng_drafter(o.spec_mode);
  if (o.spec_mode != ENGINE_SPEC_OFF && !drafter)
    return pw_seterr(err, PW_EINVAL, "engine: unknown speculation mode %d", o.spec_mode);
  if (o.spec_policy != ENGINE_SPEC_POLICY_COST && o.spec_policy != ENGINE_SPEC_POLICY_ACCEPTANCE)
    return pw_seterr(err, PW_EINVAL, "engine: unknown spec_policy %d", o.spec_policy);
  if (o.spec_cost_fixed) {
    if (o.spec_cost_n < 1 || o.spec_cost_n > 4096)
      return pw_seterr(err, PW_EINVAL, "engine: spec_cost_n %d out of range [1, 4096]", o.spec_cost_n);
    for (int i = 0; i < o.spec_cost_n; i++)
      if (!(o.spec_cost_fixed[i] > 0 && o.spec_cost_fixed[i] < 1e300))
        return pw_seterr(err, PW_EINVAL, "engine: spec_cost_fixed[%d] is not a positive number", i);
  }
  if (o.spec_draft_cost_fixed) {
    if (o.spec_draft_cost_n < 1 || o.spec_draft_cost_n > SPEC_MAX_K)
      return pw_seterr(err, PW_EINVAL, "engine: spec_draft_cost_n %d out of range [1, %d]", o.spec_draft_cost_n,
                       SPEC_MAX_K);
    for (int i = 0; i < o.spec_draft_cost_n; i++)
      if (!(o.spec_draft_cost_fixed[i] >= 0 && o.spec_draft_cost_fixed[i] < 1e300))
        return pw_seterr(err, PW_EINVAL, "engine: spec_draft_cost_fixed[%d] is not a number >= 0", i);
  }
  if (o.spec_probe_budget == 0) o.spec_probe_budget = SPEC_PROBE_BUDGET;
  if (!(o.spec_probe_budget > 0 && o.spec_probe_budget <= 1))
    return pw_seterr(err, PW_EINVAL, "engine: spec_probe_budget %g out of range (0, 1]", o.spec_probe_budget);
  if (o.spec_draft_max < 1 || o.spec_draft_max > SPEC_MAX_K)
    return pw_seterr(err, PW_EINVAL, "engine: spec_draft_max %d out of range [1, %d]", o.spec_draft_max, SPEC_MAX_K);
  if (drafter && drafter->needs_model && (!o.spec_draft_model || !*o.spec_draft_model))
    return pw_seterr(err, PW_EINVAL, "engine: speculation mode \"%s\" needs a draft model", drafter->name);
  if (o.prompt_cache_entries < -1 || o.prompt_cache_entries > CACHE_MAX_ENTRIES)
    return pw_seterr(err, PW_EINVAL, "engine: prompt_cache_entries %d out of range [-1, %d]", o.prompt_cache_entries,
                     CACHE_MAX_ENTRIES);
  if (!(o.prompt_cache_ttl_s > 0) || o.prompt_cache_ttl_s > 1e9)
    return pw_seterr(err, PW_EINVAL, "engine: prompt_cache_ttl_s %g out of range", o.prompt_cache_ttl_s);
  if (o.prompt_cache_owner_entries < 0 || o.prompt_cache_owner_entries > CACHE_MAX_ENTRIES)
    return pw_seterr(err, PW_EINVAL, "engine: prompt_cache_owner_entries %d out of range [0, %d]",
                     o.prompt_cache_owner_entries, CACHE_MAX_ENTRIES);
  /* Every active sequence must fit its decode token into one step. */
  if (o.step_tokens < o.max_active) o.step_tokens = o.max_active;

  *out = o;
  return 0;
}

/* The step's batch, logits and text buffers and the cache records, sized
 * once from the resolved options (nothing is allocated per step). */
static int alloc_buffers(engine *e, const engine_opts *o, char *err) {
  /* Logits rows: one per sequence, or up to 1 + K for a speculating one;
   * never more than the entries of a step. */
  e->rows_cap = o->max_active;
  if (o->spec_mode != ENGINE_SPEC_OFF) {
    long want = (long)o->max_active * (o->spec_draft_max + 1);
    e->rows_cap = want < o->step_tokens ? (int)want : o->step_tokens;
  }
  e->run = calloc((size_t)o->max_active, sizeof *e->run);
  e->part = calloc((size_t)o->max_active, sizeof *e->part);
  e->free_slots = calloc((size_t)e->n_slots, sizeof *e->free_slots);
  e->ents = calloc((size_t)o->step_tokens, sizeof *e->ents);
  e->eents = calloc((size_t)o->step_tokens, sizeof *e->eents);
  e->eowner = calloc((size_t)o->step_tokens, sizeof *e->eowner);
  e->logits = malloc((size_t)e->rows_cap * e->n_vocab * sizeof *e->logits);
  e->hidden = malloc((size_t)o->step_tokens * e->n_embd * sizeof *e->hidden);
  e->dbuf_cap = tok_detok_max_out(e->vocab);
  e->dbuf = malloc(e->dbuf_cap);
  e->sbuf = malloc(STOP_OUT_CAP(e->dbuf_cap));
  e->grow = malloc((size_t)e->n_vocab * sizeof *e->grow);
  e->cache = e->n_cache ? calloc((size_t)e->n_cache, sizeof *e->cache) : NULL;
  e->pass_ns = calloc((size_t)o->step_tokens + 1, sizeof *e->pass_ns);
  e->pass_seen = calloc((size_t)o->step_tokens + 1, sizeof *e->pass_seen);
  if (o->spec_cost_fixed) {
    e->n_cost_fixed = o->spec_cost_n;
    if ((e->cost_fixed = malloc((size_t)o->spec_cost_n * sizeof *e->cost_fixed)))
      memcpy(e->cost_fixed, o->spec_cost_fixed, (size_t)o->spec_cost_n * sizeof *e->cost_fixed);
  }
  if (o->spec_draft_cost_fixed) {
    e->n_draft_fixed = o->spec_draft_cost_n;
    if ((e->draft_fixed = malloc((size_t)o->spec_draft_cost_n * sizeof *e->draft_fixed)))
      memcpy(e->draft_fixed, o->spec_draft_cost_fixed, (size_t)o->spec_draft_cost_n * sizeof *e->draft_fixed);
  }
  if (!e->pass_ns || !e->pass_seen || (o->spec_cost_fixed && !e->cost_fixed) ||
      (o->spec_draft_cost_fixed && !e->draft_fixed) || !e->sbuf || !e->grow || !e->run || !e->part || !e->free_slots || !e->ents || !e->eents || !e->eowner || !e->logits ||
      !e->hidden || !e->dbuf || (e->n_cache && !e->cache))
    return pw_seterr(err, PW_ENOMEM, "engine: out of memory for batch buffers");
  for (int i = 0; i < e->n_cache; i++) {
    e->cache[i].slot = -1;
    if (!(e->cache[i].toks = malloc((size_t)e->n_ctx * sizeof *e->cache[i].toks)))
      return pw_seterr(err, PW_ENOMEM, "engine: out of memory for prompt cache records");
  }
  for (int i = 0; i < e->n_slots; i++) e->free_slots[i] = e->n_slots - 1 - i;
  e->n_free = e->n_slots;
  return 0;
}

/* An encoder's options: no speculation (nothing is generated) and no
 * prompt cache (every pass starts a sequence over); a pass holds a whole
 * context (each input is evaluated at once); absolute position embeddings
 * bound the context. */
static int eng_encoder_opts(engine *e, engine_opts *o, bool spec, char *err) {
  const model_hparams *hp = model_hp(e->m);
  if (spec)
    return pw_seterr(err, PW_EINVAL, "engine: speculative decoding needs a generative model (%s is an encoder)",
                     hp->arch_name);
  if (hp->arch == MODEL_ARCH_BERT && e->n_ctx > hp->n_ctx_train)
    return pw_seterr(err, PW_EINVAL, "engine: a context of %d exceeds the %d positions of this %s model", e->n_ctx,
                     hp->n_ctx_train, hp->arch_name);
  o->prompt_cache_entries = -1;
  if (o->step_tokens < e->n_ctx) o->step_tokens = e->n_ctx;
  return 0;
}

int engine_create(const engine_opts *opts, engine **out, char *err) {
  *out = NULL;
  if (!opts || !opts->model_path || !*opts->model_path) return pw_seterr(err, PW_EINVAL, "engine: no model path");
  engine_opts o;
  const drafter_ops *drafter = NULL;
  int rc = resolve_opts(opts, &o, &drafter, err);
  if (rc < 0) return rc;

  engine *e = calloc(1, sizeof *e);
  if (!e) return pw_seterr(err, PW_ENOMEM, "engine: out of memory");
  pthread_mutex_init(&e->mu, NULL);
  pthread_mutex_init(&e->sha_mu, NULL);
  pthread_mutex_init(&e->gv_mu, NULL);
  eng_cond_init_monotonic(&e->work_cv);
  eng_cond_init_monotonic(&e->idle_cv);
  model_opts mo = {.n_threads = o.n_threads,
                   .weights = {.io = o.weights_io,
                               .key_file = o.weights_key_file,
                               .mem_budget = o.weights_mem_budget,
                               .mem_budget_frac = o.weights_mem_budget_frac,
                               .residency = o.weights_residency,
                               .mlock = o.weights_mlock,
                               .hugepages = o.weights_hugepages,
                               .cancel = o.load_cancel,
                               .cancel_arg = o.load_cancel_arg}};
  if ((rc = model_load(o.model_path, &mo, &e->m, err)) < 0) goto fail;
  const model_hparams *hp = model_hp(e->m);
  if ((rc = tok_vocab_load(model_gguf(e->m), &e->vocab, err)) < 0) goto fail;
  e->n_vocab = hp->n_vocab;
  e->n_embd = hp->n_embd;
  e->n_ctx = o.n_ctx ? o.n_ctx : (hp->n_ctx_train < ENGINE_DEFAULT_CTX ? hp->n_ctx_train : ENGINE_DEFAULT_CTX);
  o.n_ctx = e->n_ctx;
  e->encoder = model_is_encoder(e->m);
  e->pooling = e->encoder ? (int)model_get_pooling(e->m) : ENGINE_POOL_MEAN;
  e->n_scores = e->pooling == ENGINE_POOL_RANK ? model_n_cls_out(e->m) : 0;
  if (e->encoder) {
    if ((rc = eng_encoder_opts(e, &o, drafter != NULL, err)) < 0) goto fail;
    drafter = NULL;
  }
  e->n_cache = o.prompt_cache_entries > 0 ? o.prompt_cache_entries : 0;
  e->n_slots = o.max_active + e->n_cache;
  /* a pass adds at most step_tokens positions to a sequence (the batch's
   * size): the sliding-window layers keep rings of their window plus that,
   * or every position with swa_full */
  const model_kv_opts ko = {o.kv_type_k, o.kv_type_v, o.swa_full ? 0 : o.step_tokens};
  if ((rc = model_kv_create_ex(e->m, e->n_slots, e->n_ctx, &ko, &e->kv, err)) < 0) goto fail;
  if ((rc = model_ctx_create(e->m, o.step_tokens, e->n_ctx, &e->ctx, err)) < 0) goto fail;
  e->tok_bytes = 0; /* the target's positions: eng_seq_bytes */
  if (model_has_recurrent(e->m) && drafter) {
    /* speculation over a recurrent state: a snapshot per running request
     * before each verification pass, restored on a rejection */
    e->snap_bytes = model_kv_state_bytes(e->kv);
    e->snap = malloc((size_t)o.max_active * e->snap_bytes);
    e->rents = calloc((size_t)SPEC_MAX_K + 1, sizeof *e->rents);
    if (!e->snap || !e->rents) {
      rc = pw_seterr(err, PW_ENOMEM, "engine: out of memory for %d recurrent-state snapshots of %zu MiB",
                     o.max_active, e->snap_bytes >> 20);
      goto fail;
    }
  }
  if (drafter && drafter->create) {
    e->drafter = drafter; /* set first: destroy undoes a partial create */
    if ((rc = drafter->create(e, &o, err)) < 0) goto fail;
  }
  e->drafter = drafter;
  if ((rc = alloc_buffers(e, &o, err)) < 0) goto fail;
  if (o.model_id && *o.model_id) snprintf(e->model_id, sizeof e->model_id, "%s", o.model_id);
  else model_id_from_path(o.model_path, e->model_id, sizeof e->model_id);
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
  e->o.spec_cost_fixed = NULL; /* the caller's array is not kept (e->cost_fixed is) */
  e->o.spec_draft_cost_fixed = NULL;
  e->o.load_cancel = NULL; /* only the load asked it */
  e->o.load_cancel_arg = NULL;
  e->st.max_active = o.max_active;
  e->st.max_queue = o.max_queue;
  if (pthread_create(&e->thread, NULL, eng_main, e) != 0) {
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
  if (e->drafter && e->drafter->destroy) e->drafter->destroy(e);
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
  free(e->snap);
  free(e->rents);
  free(e->eowner);
  free(e->logits);
  free(e->pass_ns);
  free(e->pass_seen);
  free(e->cost_fixed);
  free(e->draft_fixed);
  free(e->hidden);
  free(e->dbuf);
  free(e->sbuf);
  free(e->chat_template);
  grammar_vocab_destroy(e->gv);
  free(e->grow);
  pthread_cond_destroy(&e->work_cv);
  pthread_cond_destroy(&e->idle_cv);
  pthread_mutex_destroy(&e->mu);
  pthread_mutex_destroy(&e->sha_mu);
  pthread_mutex_destroy(&e->gv_mu);
  free(e);
}

int engine_drain(engine *e, int grace_ms) {
  pthread_mutex_lock(&e->mu);
  e->draining = true;
  struct timespec ts = eng_abs_after_ns(grace_ms > 0 ? (uint64_t)grace_ms * 1000000ull : 0);
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
  return e->chat_template;
}
int engine_n_ctx(const engine *e) { return e->n_ctx; }
int engine_n_embd(const engine *e) { return e->n_embd; }
bool engine_is_encoder(const engine *e) { return e->encoder; }
engine_pooling engine_get_pooling(const engine *e) { return (engine_pooling)e->pooling; }
int engine_embedding_dim(const engine *e) { return e->pooling == ENGINE_POOL_RANK ? e->n_scores : e->n_embd; }
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
      char err[PW_ERRMAX];
      /* under a memory budget the bytes are not all resident: re-read */
      const bool ok = weights_sha256(model_weights(e->m), dig, err) == 0;
      if (!ok) {
        pw_log(PW_LOG_ERROR, "model digest: %s", err);
        memset(dig, 0, sizeof dig);
      }
      if (ok && e->have_file_id && e->file_id.size == (uint64_t)gguf_size(f)) pw_sha256_cache_put(&e->file_id, dig);
    }
    pw_hex(dig, 32, e->sha256);
    e->sha_done = true;
  }
  pthread_mutex_unlock(&e->sha_mu);
  return e->sha256;
}

uint64_t engine_model_size(const engine *e) { return (uint64_t)gguf_size(model_gguf(e->m)); }
size_t engine_kv_bytes(const engine *e) { return model_kv_bytes(e->kv); }
const char *engine_kernels(void) { return pw_tensor_kernels(); }

