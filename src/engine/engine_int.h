/* engine_int.h - what the engine's files share: the request and engine
 * structs, the drafter interface and the functions one file calls in
 * another. Not part of the API (engine.h is).
 *
 * The engine's files:
 *   engine.c        lifecycle (create, destroy, drain), model facts
 *   request.c       request handles, their event rings, submit/next/release
 *   sched.c         the engine thread: admission, one step, emitting tokens
 *   prefix_cache.c  KV slots and the keyed prefix cache
 *   spec.c          speculation: planning proposals, verification, the
 *                   adaptive width and the drafter table
 *   draft_*.c       one drafter each (spec.c's table lists them)
 *   embed.c         pooled embeddings
 */
#ifndef PW_ENGINE_ENGINE_INT_H
#define PW_ENGINE_ENGINE_INT_H

#include "engine/engine.h"
#include "base/sha256.h"

#include "chat/stop.h"
#include "grammar/grammar.h"
#include "model/model.h"
#include "tok/tok.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

typedef struct drafter_ops drafter_ops;

#define EV_TEXT_CAP ((int)sizeof(((engine_event *)0)->text))

#define SPEC_MAX_K ENGINE_SPEC_MAX_K /* upper bound of spec_draft_max */
#define SPEC_NGRAM_MAX 4   /* lookup tries n-grams of this length down to 1 */
#define SPEC_WINDOW 8      /* rounds with proposals judged for the fallback */
#define SPEC_MIN_RATE 0.2  /* acceptance below this over a full window: stop speculating */
/* cost policy (spec.c) */
#define SPEC_PRIOR_N 2.0f  /* prior verified ... */
#define SPEC_PRIOR_A 1.5f  /* ... and accepted proposals at each position of a new request */
#define SPEC_DECAY 0.8f    /* weight of the older rounds in acc_n/acc_a per round */
#define SPEC_MARGIN 1.03   /* proposals must promise this much more tokens per second */
#define SPEC_PROBE_MIN 16  /* declined steps before the first probe ... */
#define SPEC_PROBE_MAX 256 /* ... doubling after each probe, up to this, or further (priced probes) */
#define SPEC_PROBE_K 3     /* most proposals of a probe */
#define SPEC_PROBE_BUDGET 0.015 /* default engine_opts.spec_probe_budget */
#define SPEC_PROBE_FAR (1 << 20) /* a probe spacing that means never */
#define SPEC_COST_STALE 64 /* passes after which a size's measured time counts as not seen */
#define SPEC_HIST_DECAY 0.95f /* weight of the older rounds in the engine's acceptance per round */
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
  uint8_t owner[32]; /* engine_params.cache_owner of the request that stored it */
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
  uint8_t owner[32]; /* engine_params.cache_owner */

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
  grammar_matcher *gm; /* owned; NULL without a grammar */
  grammar *g_ref;    /* the request's reference to its grammar (grammar_ref), or NULL */
  tok_detok dt;      /* streaming detokenizer state */
  bool has_stop;     /* sm is in use */
  stop_matcher sm;   /* stop strings and their held-back prefix */
  char *txt;         /* [txt_cap] text ready for the next event, owned */
  int txt_len, txt_cap;
  double *embd_acc;  /* [n_embd] running sum (mean pooling) or the chosen state, owned */
  float *embd;       /* [max(n_embd, n_scores)] the result, owned */
  cache_ent *ent;    /* the cache entry this request took (busy), or NULL */
  engine_usage u;    /* cached_tokens and the speculation counters */
  /* speculation */
  bool spec;         /* still speculating (mode on, not spec_off, no fallback) */
  int spec_k;        /* adaptive width in [1, K] */
  int win_d[SPEC_WINDOW], win_a[SPEC_WINDOW]; /* drafted/accepted of recent rounds */
  int win_n, win_pos;
  /* cost policy: per proposal position i, decayed counts of rounds that
   * verified it (all before it accepted) and of those that accepted it */
  float acc_n[SPEC_MAX_K], acc_a[SPEC_MAX_K];
  int spec_idle;     /* cost policy: steps since this request last had proposals */
  int spec_gap;      /* cost policy: idle steps before the next probe (before its price) */
  bool spec_primed;  /* cost policy: acc_n/acc_a hold the engine's acceptance as their prior */
  bool spec_on;      /* cost policy: its last round was given proposals (not a probe) */
  /* ---- per step scratch ---- */
  int32_t prop[SPEC_MAX_K]; /* this round's proposals */
  int n_prop;
  const void *snap;  /* this step's recurrent-state snapshot before the pass, or NULL */
  int step_n;        /* entries in this step's generation batch */
  int step_rows;     /* logits rows wanted (decode: 1 + n_prop; last prompt chunk: 1) */
  int step_row;      /* first of them */
  int draft_row;     /* row in the draft's logits of the current draft pass, -1 = none */
};

/* Counters added to engine.st at the end of a step (under engine.mu). */
typedef struct stat_delta {
  uint64_t prompt_tokens, generated_tokens, batch_entries;
  uint64_t spec_drafted, spec_accepted, spec_emitted, spec_target_passes, spec_rounds, spec_fallbacks;
  uint64_t spec_declined, spec_probes;
  uint64_t spec_refeeds;
  uint64_t spec_draft_passes, spec_draft_catchups;
  uint64_t cache_requests, cache_hits, cache_misses, cache_reused, cache_evaluated, cache_evictions;
} stat_delta;

struct engine {
  engine_opts o; /* resolved options (paths are not kept) */
  model *m;
  tok_vocab *vocab;
  model_kv *kv;
  model_ctx *ctx;
  int n_vocab, n_embd, n_ctx;
  /* an encoder (model_is_encoder): embeddings only, each prompt in one
   * pass; its pooling (engine_pooling values) and score count */
  bool encoder;
  int pooling, n_scores;
  long n_passes;       /* target forward passes run (engine thread) */
  int n_slots;         /* KV sequences: max_active + cache entries */
  /* KV bytes of the positions held (eng_seq_bytes): the target's cache
   * and the draft model's by model_kv_seq_bytes (a sliding-window layer's
   * ring costs at most its size), plus tok_bytes per position for a
   * drafter's own full-length cache (the MTP block's) */
  size_t tok_bytes;
  const model_kv *dkv; /* the draft model's cache (borrowed), or NULL */
  char model_id[256];
  char sha256[65];     /* hex SHA-256 of the model file, computed on first use */
  bool sha_done;
  pthread_mutex_t sha_mu;
  bool have_file_id;   /* file_id was read at create */
  pw_file_id file_id;  /* the model file's identity, key of the digest cache */
  char *chat_template; /* owned copy of the model's template; NULL = none */
  /* constrained decoding: the vocabulary's token trie, built by the first
   * request with a grammar (under gv_mu), then read-only */
  grammar_vocab *gv;
  pthread_mutex_t gv_mu;
  float *grow;         /* [n_vocab] engine thread: a logits row with the grammar's mask applied */
  const drafter_ops *drafter; /* the speculation mode's drafter; NULL = off */
  void *dstate;        /* the drafter's own state (owned by the drafter) */

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
  /* a recurrent model with speculation: this step's state snapshots, one
   * per generation-batch member ([max_active][snap_bytes]), and the
   * entries that re-run an accepted prefix ([SPEC_MAX_K + 1]); NULL
   * otherwise */
  uint8_t *snap;
  size_t snap_bytes;
  model_entry *rents;
  int rows_cap;
  /* cost policy: the time of a generation step by its entries, [n] for n
   * in 1..step_tokens (an average that follows the latest passes; 0 = no
   * pass of n entries seen yet), or the fixed test costs (owned copies) */
  double *pass_ns;
  long *pass_seen;     /* [step_tokens + 1] n_passes when pass_ns[n] was last updated */
  double *cost_fixed;
  int n_cost_fixed;
  /* cost policy: the time of the drafter's passes in a step by the most
   * proposals a round of the step asked for, [k] for k in 1..SPEC_MAX_K
   * (an average as pass_ns; 0 = not seen), or the fixed test costs (owned
   * copies) */
  double draft_ns[SPEC_MAX_K + 1];
  /* cost policy: the drafter's acceptance per proposal position over the
   * recent rounds of all requests, decayed by SPEC_HIST_DECAY per round:
   * the prior of a new request (a drafter that is never right here starts
   * a request declined, not on the optimistic SPEC_PRIOR_A) */
  float acc_n[SPEC_MAX_K], acc_a[SPEC_MAX_K];
  /* time the drafter spent this step on its passes over committed
   * positions (the MTP block's backlog), kept out of the target's and the
   * drafter's measured costs: that work is the same whatever the policy
   * chooses */
  uint64_t draft_aside_ns;
  double *draft_fixed;
  int n_draft_fixed;
  int draft_passes;    /* set by propose_batch: the chained passes it ran this step */
  float *hidden;       /* [step_tokens][n_embd] final hidden states of an embedding batch */
  char *dbuf;          /* [dbuf_cap] detokenizer output of one token */
  size_t dbuf_cap;
  char *sbuf;          /* [STOP_OUT_CAP(dbuf_cap)] stop matcher output of one token */
  stat_delta d;        /* counters not yet added to st */
  engine_event ev;     /* scratch: built here, then copied into a ring */
  char err[PW_ERRMAX];
};


/* ---- drafters ---------------------------------------------------------------
 * A drafter proposes tokens that the target then verifies (spec.c); the
 * output never depends on what it proposes. Each drafter is one file
 * (draft_*.c) and one row of spec.c's table. Hooks may be NULL. */
struct drafter_ops {
  int mode;         /* engine_spec_mode */
  const char *name; /* as engine_spec_parse takes it */
  bool needs_model; /* engine_opts.spec_draft_model is required */
  /* engine_create, after the target is loaded: load what the drafter needs
   * into e->dstate and account for the KV it keeps per position (a
   * draft model's cache in e->dkv, a full-length one's bytes per position
   * added to e->tok_bytes). 0 or a PW_E* status with err set. */
  int (*create)(engine *e, const engine_opts *o, char *err);
  void (*destroy)(engine *e);
  /* Proposes at once for one sequence: up to k tokens into r->prop;
   * returns how many. */
  int (*propose)(engine *e, engine_req *r, int k);
  /* Proposes for every run-list sequence whose r->n_prop (planned) is > 0,
   * batched; may lower n_prop (to 0: no proposal this round). Sets
   * e->draft_passes to the chained forward passes it ran (the cost policy
   * times them). */
  void (*propose_batch)(engine *e);
  /* The target committed r's tokens up to r->n_fed after verifying a
   * round of r->n_prop proposals with `accepted` of them accepted. */
  void (*observe_commit)(engine *e, engine_req *r, int accepted);
  /* After each successful target pass over the generation batch ents[n],
   * before its verification: e->ctx still holds the pass
   * (model_ctx_hidden). */
  void (*observe_pass)(engine *e, const model_entry *ents, int n);
  /* The KV of slot was cut back to n positions (a commit after
   * verification, prefix reuse, a slot freed with n = 0): drop what the
   * drafter holds past n for that slot. */
  void (*rollback)(engine *e, int slot, int n);
};

/* NULL-terminated, one row per drafter (spec.c). */
extern const drafter_ops *const engine_drafters[];
const drafter_ops *eng_drafter(int mode);
extern const drafter_ops eng_draft_prompt_lookup, eng_draft_ngram, eng_draft_model, eng_draft_mtp;
/* Testing only (draft_mtp.c): when set, called with each request's MTP
 * proposals after they are made, and may overwrite them (not their count),
 * so tests can force chosen proposals to be accepted or rejected. NULL in
 * the product. */
extern void (*eng_mtp_test_hook)(engine_req *r, int32_t *prop, int n);
/* the MTP drafter's backlog per slot (-1: its default; 0: the block runs
 * after every target pass), for tests comparing the two */
extern int eng_mtp_backlog;

/* ---- shared between the engine's files ------------------------------------ */

/* request.c */
void eng_cond_init_monotonic(pthread_cond_t *c);
struct timespec eng_abs_after_ns(uint64_t ns);
void eng_req_free(engine_req *r);
void eng_req_unref(engine_req *r);
bool eng_req_push(engine_req *r, const engine_event *ev);
void eng_ev_clear(engine_event *ev, engine_ev_type type);
void eng_take_text(engine_req *r, engine_event *ev);
void eng_txt_append(engine_req *r, const char *s, size_t n);
bool eng_txt_feed(engine *e, engine_req *r, const char *s, size_t n);

/* prefix_cache.c */
void eng_slot_take(engine *e, engine_req *r);
void eng_slot_release(engine *e, engine_req *r, int status);
size_t eng_cache_bytes(const engine *e);
/* KV bytes a sequence of n positions holds (target, draft model, drafter) */
size_t eng_seq_bytes(const engine *e, int n);
uint64_t eng_cache_expire(engine *e, uint64_t now);
/* Cuts slot's KV (target and drafter) back to n positions. */
void eng_kv_rollback(engine *e, int slot, int n);

/* sched.c */
void *eng_main(void *arg);
void eng_stats_flush_locked(engine *e);
void eng_run_end_req(engine *e, engine_req *r, engine_finish finish, int status, const char *msg);
bool eng_seq_emit(engine *e, engine_req *r, const float *row, int32_t *tok_out, engine_finish *finish, int *status,
                  const char **msg);

/* spec.c */
void eng_spec_plan(engine *e, int extra);
void eng_spec_observe_pass(engine *e, int n, uint64_t ns);
bool eng_seq_verify(engine *e, engine_req *r, const float *rows, engine_finish *fin, int *st, const char **msg);

/* embed.c */
void eng_embd_accumulate(engine *e, engine_req *r, const float *rows, int n);
void eng_embd_finish(engine *e, engine_req *r);

#endif
