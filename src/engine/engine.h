/* engine.h - the inference engine: sequences, a scheduler thread running
 * continuous batching, admission, deadlines, cancellation.
 *
 * One engine thread runs steps. Each step is ONE batched model_forward over
 * every active sequence: one decode token per generating sequence plus
 * prompt chunks of sequences still prefilling (chunked prefill under a
 * per-step token budget), so a long prompt never stalls other streams. New
 * requests join at the next step. A request's tokens never depend on what
 * else is in the batch (the model's forward pass is batch-invariant and each
 * request samples with its own RNG). Decode tokens are scheduled first; the
 * rest of the budget goes to prompt chunks, oldest request first. Embedding
 * prompts take a slot like generations; their chunks run in a second
 * forward call of the same step that returns hidden states but no logits.
 *
 * Admission: at most max_active sequences run, at most max_queue wait. When
 * both are full, engine_submit fails at once with PW_EBUSY (never a silent
 * drop). KV for a sequence's whole budget (prompt + max_tokens, capped by
 * the context) is reserved when it is admitted to run, so an admitted
 * request cannot fail later for lack of KV.
 *
 * Context budget: a generation's prompt must leave room for at least one
 * generated token (n_prompt <= n_ctx - 1, an embedding's n_prompt <= n_ctx),
 * else engine_submit fails with PW_ECONTEXT. max_tokens is then capped to
 * n_ctx - n_prompt (never an error); reaching it ends with
 * ENGINE_FINISH_LENGTH. Each running sequence owns one KV slot of n_ctx
 * positions, so the budget always fits.
 *
 * Deadlines: a request carries a monotonic admission deadline; if it cannot
 * start before it, it ends with PW_ETIMEOUT. Cancellation (engine_cancel or
 * engine_release) makes the sequence leave the batch within one step and
 * frees its KV.
 *
 * Slow consumers: each request's event queue holds at most
 * engine_opts.max_events undelivered events. The engine never waits for a
 * consumer: a request whose consumer falls that far behind is cancelled and
 * ends with ERROR PW_ELIMIT (a slot is always kept for that final event).
 *
 * Text: TOKEN events carry the text each token completes after holding back
 * incomplete UTF-8 characters and possible beginnings of stop strings; a
 * matched stop string and everything after it are never emitted. What is
 * still held back when generation ends (a stop-string prefix that never
 * completed) comes in DONE's text; consumers append it.
 *
 * Threads: every function may be called from any thread; one request's
 * events should be read by one consumer at a time.
 *
 * No sockets and no JSON here: the server and the CLI both drive this API.
 * Tokens and text come back through a per-request event queue with a wakeup. */
#ifndef PW_ENGINE_ENGINE_H
#define PW_ENGINE_ENGINE_H

#include "grammar/grammar.h"
#include "power.h"
#include "sample/sample.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct engine engine;
typedef struct engine_req engine_req; /* one submitted request (handle) */

/* The ranges and defaults of engine_opts, stated once: the CLI's options
 * and the server's flags take them from here. */
#define ENGINE_MAX_THREADS 512
#define ENGINE_DEFAULT_THREADS 2
#define ENGINE_MAX_ACTIVE 1024
#define ENGINE_DEFAULT_ACTIVE 4
#define ENGINE_MAX_QUEUE (1 << 20)
#define ENGINE_DEFAULT_QUEUE 16
#define ENGINE_MIN_CTX 16
#define ENGINE_MAX_CTX (1 << 22)
#define ENGINE_DEFAULT_CTX 4096 /* at most; less when the model was trained on less */
#define ENGINE_SPEC_MAX_K 32
#define ENGINE_DEFAULT_SPEC_K 7

typedef struct engine_opts {
  const char *model_path; /* GGUF file (required) */
  const char *model_id;   /* id reported to clients (a store name); NULL: the file name without .gguf */
  int n_threads;          /* kernel threads, 1..ENGINE_MAX_THREADS; 0 = ENGINE_DEFAULT_THREADS */
  /* Where the weights come from (weights/weights.h), for the model and a
   * draft model alike. */
  int weights_io;               /* weights_io: 0 = mmap, 1 = pread, 2 = direct */
  const char *weights_key_file; /* key of encrypted containers; NULL = plain files */
  /* KV cache types of the model (not of a draft model, which keeps F16):
   * model_kv_type_parse ids (F16, Q8_0, Q4_0); 0 = F16. Speculation and
   * prefix reuse stay exact with any type: a position's K/V rows are
   * stored once and read back the same whoever reads them. */
  uint32_t kv_type_k, kv_type_v;
  /* The model's alone (not a draft model's): a memory budget (bytes, or a
   * share of the file in (0, 1]; 0 = all resident), the residency policy
   * under it, and host controls of the weights' memory (weights.h). */
  uint64_t weights_mem_budget;
  double weights_mem_budget_frac;
  int weights_residency;  /* weights_residency_policy */
  bool weights_mlock;
  bool weights_hugepages;
  /* May be NULL: asked between pieces of the load (weights_opts.cancel);
   * true abandons it and engine_create returns PW_ECANCELED. */
  bool (*load_cancel)(void *arg);
  void *load_cancel_arg;
  int max_active;         /* sequences decoding at once (KV slots), 1..ENGINE_MAX_ACTIVE; 0 = the default */
  int max_queue;          /* requests waiting for a slot, 0..ENGINE_MAX_QUEUE; 0 = the default */
  int n_ctx;              /* context per sequence, ENGINE_MIN_CTX..ENGINE_MAX_CTX;
                           * 0 = min(model's, ENGINE_DEFAULT_CTX) */
  int step_tokens;        /* token budget of one step (decode + prefill chunks); 0 = 512;
                           * raised to max_active if smaller. Also what a
                           * sliding-window layer's KV ring holds beyond its
                           * window (model_kv_opts.max_pass): a prompt-cache
                           * entry cut back by more than this is a miss */
  bool swa_full;          /* sliding-window layers keep every position of the context
                           * instead of that ring: a prompt-cache entry can be cut back
                           * anywhere (reuse after any divergence), for the memory of
                           * full layers; outputs are the same either way */
  int max_events;         /* undelivered events per request before it is cancelled
                           * with PW_ELIMIT (slow consumer); 0 = 256 */
  /* Exact speculative decoding (see "Speculation" below). */
  int spec_mode;                /* engine_spec_mode; 0 = ENGINE_SPEC_OFF */
  const char *spec_draft_model; /* GGUF of the draft model for ENGINE_SPEC_DRAFT */
  int spec_draft_max;           /* K: most proposals per round, 1..ENGINE_SPEC_MAX_K; 0 = the default */
  int spec_policy;              /* engine_spec_policy; 0 = ENGINE_SPEC_POLICY_COST */
  double spec_probe_budget;     /* cost policy: the share of a request's decode time that the
                                 * probes of a drafter it declines may cost, in (0, 1]; 0 = 0.015 */
  /* Keyed prefix reuse (see "Prefix cache" below). */
  int prompt_cache_entries;     /* most cached sequences; 0 = 8; -1 = disabled */
  size_t prompt_cache_bytes;    /* most KV bytes held by entries; 0 = 1 GiB */
  double prompt_cache_ttl_s;    /* idle time before an entry expires; 0 = 600 */
  int prompt_cache_owner_entries;   /* most entries one owner (engine_params.cache_owner) holds;
                                     * 0 = no bound of its own (the global bounds apply) */
  size_t prompt_cache_owner_bytes;  /* most KV bytes one owner's entries hold; 0 = no bound of its own */
  /* Testing: target forward pass number fail_pass (1 = the first) fails as
   * if the model had (PW_EINTERNAL), so tests can check what a failed
   * batch leaves behind. 0 = never. */
  long fail_pass;
  /* Testing: the cost policy takes spec_cost_fixed[n - 1] as the time of a
   * target pass of n entries (n <= spec_cost_n; larger n cost the last)
   * instead of measuring passes, so its choices are reproducible. NULL =
   * measure. */
  const double *spec_cost_fixed;
  int spec_cost_n;
  /* Testing: the same for the drafter: spec_draft_cost_fixed[k - 1] is the
   * time of the drafter's passes in a step whose longest round has k
   * proposals (k <= spec_draft_cost_n; larger k cost the last), in the
   * units of spec_cost_fixed. NULL = measure (drafters without passes of
   * their own, prompt lookup and n-gram, cost nothing). */
  const double *spec_draft_cost_fixed;
  int spec_draft_cost_n;
} engine_opts;

/* Speculation: each round proposes up to K tokens, verifies the committed
 * token plus the proposals in ONE target forward pass (batched with the
 * other sequences), accepts the longest prefix on which the target's own
 * choice agrees, emits the accepted tokens plus one correction or bonus
 * token, and truncates target (and draft) KV to what was committed. Output
 * is byte-identical to ENGINE_SPEC_OFF: greedy, and seeded sampling too
 * (the target's choice at each position is drawn exactly as without
 * speculation, with the same RNG consumption). K adapts per request
 * under one of two policies:
 * - cost (the default): the engine times its target passes by their number
 *   of entries and the drafter's passes (draft model, MTP block) by the
 *   proposals asked of them, keeps each request's rate of accepted
 *   proposals (a decayed count of accepted tokens and of rejections), and
 *   gives a request each round the width that maximises the step's
 *   expected tokens per second, drafting and verifying counted, which is
 *   no proposals at all when drafting and verifying them costs more than
 *   they are expected to save. A request that gets no proposals keeps probing
 *   with a short round after 16, 32, ... (at most 256) steps without one,
 *   so a copy-heavy stretch later in the output is still found; the
 *   probes are the only price speculation can cost, and they are priced:
 *   a probe whose measured cost over a plain step is X steps comes no
 *   sooner than X / spec_probe_budget steps after the last, and a request
 *   whose next probe would come after its last token stops speculating. A
 *   new request starts from the drafter's acceptance over the engine's
 *   recent rounds (an optimistic 3 in 4 before any), so a drafter that
 *   is never right on this traffic is not tried again on every request.
 * - acceptance: K grows after a fully accepted round and moves towards
 *   accepted + 1 after a rejection; a request whose acceptance stays below
 *   20% over its last 8 rounds with proposals falls back to target-only
 *   decoding for the rest of it (spec_fallbacks_total).
 * Either way, which tokens come out never depends on the policy, only how
 * many target passes they take. Prompt-lookup and n-gram look for the last 4-,
 * then 3-, 2-, 1-gram (latest occurrence first); no match = a plain decode
 * step. Verification entries count toward step_tokens: each generating
 * sequence first gets its decode entry, proposals then share what is left
 * (at most half of it while prompts are waiting, so prefill keeps moving).
 * The draft model must have the target's vocabulary (same size, same token
 * texts), else engine_create fails; its KV cache mirrors the target's slots
 * (cache entries included) and catches up lazily, batched across sequences. */
typedef enum engine_spec_mode {
  ENGINE_SPEC_OFF = 0,
  ENGINE_SPEC_PROMPT_LOOKUP = 1, /* copy what followed the last n-gram's match in the prompt */
  ENGINE_SPEC_NGRAM = 2,         /* the same over prompt and generated text */
  ENGINE_SPEC_DRAFT = 3,         /* a smaller GGUF with the same vocabulary, greedy */
  ENGINE_SPEC_MTP = 4,           /* the model's own MTP block (qwen35/qwen35moe nextn), greedy; a model
                                  * without one is an engine_create error */
} engine_spec_mode;

typedef enum engine_spec_policy {
  ENGINE_SPEC_POLICY_COST = 0,       /* widths from measured pass costs and acceptance */
  ENGINE_SPEC_POLICY_ACCEPTANCE = 1, /* widths from acceptance alone, with a fallback */
} engine_spec_policy;

/* "cost", "acceptance" -> policy; -1 if unknown. */
int engine_spec_policy_parse(const char *name);
const char *engine_spec_policy_name(int policy);

/* "off", "prompt-lookup", "ngram", "draft", "mtp" -> mode; -1 if unknown. */
int engine_spec_parse(const char *name);
const char *engine_spec_name(int mode);

#define ENGINE_MAX_STOP 8        /* stop strings per request */
#define ENGINE_MAX_STOP_LEN 256  /* bytes per stop string */

typedef struct engine_params {
  const int32_t *prompt;  /* borrowed during engine_submit, copied */
  int n_prompt;           /* >= 1 */
  int max_tokens;         /* generated tokens; <= 0 = up to the context */
  pw_sampler_params sampling;
  const char *stop[ENGINE_MAX_STOP]; /* NUL-terminated; copied; trimmed from the text */
  int n_stop;
  int n_logprobs;         /* 0 = no logprobs; 1..PW_SAMPLE_MAX_PROBS alternatives (+ chosen) */
  bool want_logprobs;
  bool ignore_eos;        /* keep generating past end-of-generation tokens */
  bool embedding;         /* compute a pooled embedding of the prompt instead of generating */
  uint64_t deadline_ns;   /* monotonic (pw_now_ns) deadline for admission; 0 = none */
  bool spec_off;          /* this request decodes without speculation */
  /* Prefix cache: a request with a key reuses the longest common token
   * prefix with the entry of that key and evaluates only the rest; after
   * it, the entry holds this request's prompt and output. The key is the
   * caller's scoped identity digest (the server hashes the tenant, the
   * endpoint, the model and the client's prompt_cache_key); the engine never
   * sees raw keys. An entry in use by a running request is never evicted or
   * shared: a second request with the same key runs uncached. The request
   * that finishes last owns the key's entry: it replaces an idle entry, but
   * leaves one that another running request is extending alone. An entry
   * holds the positions whose KV is valid: prompt and output but the last
   * emitted token. A cancelled request still stores what it committed; a
   * failed one drops its entry. Embedding requests ignore the key. When the
   * whole prompt matches, all but its last token are reused (its logits are
   * needed). Entries are evicted least recently used first, to stay within
   * prompt_cache_entries (entries in use count) and prompt_cache_bytes
   * (positions x KV bytes per position, target and draft), and after
   * prompt_cache_ttl_s idle. Each entry keeps its own KV slot, besides the
   * max_active ones, so caching never lowers the running capacity. */
  bool has_cache_key;
  uint8_t cache_key[32];
  /* Who the entry counts against (the server: the tenant's API key
   * digest; all zero = the anonymous owner). An owner at its quota
   * (prompt_cache_owner_entries / _bytes) evicts its own least recently
   * used entries, never another owner's; the global bounds still apply
   * to all entries together. */
  uint8_t cache_owner[32];
  /* Constrained decoding: the generated text follows this grammar (NULL =
   * none). Before the sampler chain runs, every token the grammar does not
   * allow next gets logit -inf (logprobs still describe the model's raw
   * logits); end-of-generation tokens are allowed only where the grammar
   * can end (never with ignore_eos). The request ends with STOP as soon as
   * the grammar is complete and nothing can follow, at an allowed
   * end-of-generation token, or with LENGTH at max_tokens (the text is
   * then a prefix of a valid document). Speculative proposals are cut at
   * the first token the grammar refuses; the output stays identical to
   * non-speculative decoding under the same grammar. Stop strings still
   * apply and may end the text early.
   * Ownership: borrowed during engine_submit, which takes its own
   * reference (grammar_ref) for the request and drops it when the request
   * is freed; the caller may destroy its reference as soon as
   * engine_submit returns. The first request with a grammar builds the
   * vocabulary's token trie (once per engine). */
  grammar *grammar;
  /* Control tokens (other than end-of-generation ones) appear in the text
   * as their token text: for tool-call formats whose markers are control
   * tokens, so the caller's parser can see them. */
  bool render_special;
} engine_params;
/* Notes: sampling.seed is used as given. Penalties (repeat/frequency/
 * presence) also count the last repeat_last_n prompt tokens, as llama.cpp
 * does. Logprobs are computed when want_logprobs or n_logprobs > 0, over the
 * model's raw logits. An end-of-generation token ends the request with STOP,
 * counts as a completion token and is not emitted (unless ignore_eos, when it
 * is an ordinary token). Embeddings finish with STOP and 0 completion
 * tokens. */

typedef enum engine_ev_type {
  ENGINE_EV_TOKEN = 1, /* a generated token and the text it completes (may be empty) */
  ENGINE_EV_DONE = 2,  /* finished: finish reason and usage are set; last event */
  ENGINE_EV_ERROR = 3, /* failed: status and message are set; last event */
} engine_ev_type;

typedef enum engine_finish {
  ENGINE_FINISH_NONE = 0,
  ENGINE_FINISH_STOP = 1,   /* end-of-generation token or stop string */
  ENGINE_FINISH_LENGTH = 2, /* max_tokens or context reached */
  ENGINE_FINISH_CANCEL = 3, /* cancelled (engine_cancel) */
} engine_finish;

typedef struct engine_usage {
  int prompt_tokens;
  int completion_tokens;
  int cached_tokens; /* prompt tokens whose KV was reused */
  /* speculation, per request */
  int spec_drafted;  /* tokens proposed */
  int spec_accepted; /* proposals the target agreed with */
  int spec_emitted;  /* tokens emitted by speculative rounds (accepted + one each) */
  int target_passes; /* target forward passes that produced this request's tokens */
} engine_usage;

typedef struct engine_event {
  engine_ev_type type;
  int32_t token;              /* TOKEN */
  char text[1024];            /* TOKEN: UTF-8 text now safe to emit (held-back bytes come later);
                               * DONE: the last held-back text (usually empty). NUL-terminated */
  int text_len;
  float logprob;              /* TOKEN with want_logprobs: of the chosen token */
  pw_logprob top[PW_SAMPLE_MAX_PROBS]; /* TOKEN with n_logprobs */
  int n_top;
  engine_finish finish;       /* DONE */
  int stop_index;             /* DONE with STOP: the stop string (engine_params.stop index) that
                               * ended the text; -1 = none (an end-of-generation token, a
                               * complete grammar) */
  engine_usage usage;         /* DONE */
  int status;                 /* ERROR: negative PW_E*: PW_ETIMEOUT (admission deadline),
                               * PW_ELIMIT (consumer too slow), PW_ECANCELED (engine stopped),
                               * PW_ERANGE (sampling impossible), others from the model */
  char message[256];          /* ERROR */
  double time_s;              /* pw_now_s() when the engine queued it: a reader on a busy
                               * machine may receive events in bursts, so rates are timed
                               * from these, not from when events are read */
} engine_event;

/* Upper bounds of the batch-size buckets of engine_stats. */
#define ENGINE_BATCH_BUCKETS 10
extern const int engine_batch_le[ENGINE_BATCH_BUCKETS];

typedef struct engine_stats {
  int active;      /* sequences running */
  int queued;      /* waiting for admission */
  int max_active, max_queue;
  uint64_t requests_total;     /* accepted by engine_submit */
  uint64_t requests_rejected;  /* PW_EBUSY from engine_submit */
  uint64_t requests_timeout;   /* ended with PW_ETIMEOUT */
  uint64_t requests_cancelled; /* ended with ENGINE_FINISH_CANCEL */
  uint64_t prompt_tokens_total, generated_tokens_total; /* evaluated / sampled */
  uint64_t steps_total;        /* scheduler steps run */
  uint64_t batch_entries_total; /* model entries over all steps (batch size = this / steps) */
  /* steps by model entries: [i] counts steps with at most engine_batch_le[i]
   * entries (and more than the bound before); the last, the rest */
  uint64_t batch_steps_by_size[ENGINE_BATCH_BUCKETS + 1];
  size_t kv_bytes_in_use;      /* KV bytes of the positions held by running sequences and cache entries */
  size_t kv_bytes_total;       /* the model's KV cache as allocated (all slots, all positions) */
  size_t kv_bytes_f16;         /* what it would take with F16 K and V (the saving is the difference) */
  const char *kv_type_k, *kv_type_v; /* "f16", "q8_0", "q4_0" (static strings) */
  /* speculation */
  uint64_t spec_drafted_total, spec_accepted_total, spec_emitted_total;
  uint64_t spec_target_passes_total; /* target passes giving tokens to requests still speculating */
  uint64_t spec_rounds_total;        /* rounds with at least one proposal */
  uint64_t spec_fallbacks_total;     /* requests that stopped speculating (low acceptance; cost
                                      * policy: no probe due before their last token) */
  uint64_t spec_declined_total;      /* cost policy: decode steps of speculating requests given no
                                      * proposals because verifying them would cost more than
                                      * they are expected to save */
  uint64_t spec_probes_total;        /* cost policy: short rounds after declined steps */
  uint64_t spec_rollbacks_total;     /* recurrent-state models: rounds whose state went back to the
                                      * snapshot before the pass and re-ran the accepted prefix */
  uint64_t spec_draft_passes_total;  /* the drafter's forward passes that made proposals (draft model
                                      * or MTP block; one per chained proposal position per step) */
  uint64_t spec_draft_catchup_total; /* MTP block passes over committed positions only (its deferred
                                      * backlog, no proposals) */
  /* prefix cache: requests with a key; hits reuse >= 1 token; reused and
   * evaluated prompt tokens of those requests; entries and bytes held
   * (an entry in use counts as an entry, its KV as a running sequence's) */
  uint64_t cache_requests_total, cache_hits_total, cache_misses_total;
  uint64_t cache_reused_tokens_total, cache_evaluated_tokens_total, cache_evictions_total;
  int cache_entries;
  size_t cache_bytes;
} engine_stats;

/* Loads the model and vocabulary and starts the engine thread. */
int engine_create(const engine_opts *opts, engine **out, char *err);
/* Stops the thread: what is still running or queued ends with ERROR
 * PW_ECANCELED; frees everything. Requests still held by callers stay valid
 * (their remaining events can be read) until engine_release. */
void engine_destroy(engine *e);
/* Graceful shutdown: from now on engine_submit fails with PW_EBUSY; waits up
 * to grace_ms (< 0 = forever, 0 = not at all) for running and queued
 * requests to end. 0 when none is left, PW_ETIMEOUT otherwise (then cancel
 * them or call engine_destroy). */
int engine_drain(engine *e, int grace_ms);

/* Model facts for API layers (borrowed, valid for the engine's life). */
const struct tok_vocab *engine_vocab(const engine *e);
const char *engine_model_id(const engine *e);     /* opts.model_id, else the file name without .gguf */
const char *engine_chat_template(const engine *e); /* the model's template; NULL = none (prompt.h
                                                    * then uses ChatML) */
int engine_n_ctx(const engine *e);
int engine_n_embd(const engine *e);
/* SHA-256 of the model file as hex: computed on the first call (one read
 * of the mapping, or none when this process already hashed the same file,
 * see pw_sha256_cache_get), then kept. */
const char *engine_model_sha256(const engine *e);
/* Size of the model file in bytes. */
uint64_t engine_model_size(const engine *e);
/* Bytes of the KV cache reserved at creation (every slot, cache entries
 * included): with engine_model_size, what the engine holds in memory. */
size_t engine_kv_bytes(const engine *e);
/* The kernel level in use ("scalar", "avx2", "avx512", "avx512-vbmi"):
 * receipts name it, since bits may differ across levels. Static string. */
const char *engine_kernels(void);

/* Queues a request. PW_EBUSY when active and queue are full; PW_EINVAL for
 * bad parameters; PW_ECONTEXT when the prompt does not fit the context (the
 * message names the prompt's token count and the limit). */
int engine_submit(engine *e, const engine_params *p, engine_req **out, char *err);
/* Waits up to timeout_ms (-1 = forever, 0 = poll) for the next event.
 * Returns 0 with *ev filled, or PW_ETIMEOUT if none arrived in time. After
 * DONE/ERROR no more events come: further calls return PW_EINVAL at once. */
int engine_next(engine_req *r, engine_event *ev, int timeout_ms);
/* How an embedding is pooled. Decoders: the mean over the prompt. Encoders
 * (bert, nomic-bert) as their metadata says; they compute embeddings only:
 * a request that is not an embedding fails with PW_EINVAL, each prompt is
 * evaluated whole in one pass (bidirectional attention), and the prompt
 * cache and speculation do not apply. */
typedef enum engine_pooling {
  ENGINE_POOL_MEAN = 1, /* mean over the prompt's final states */
  ENGINE_POOL_CLS = 2,  /* the first token's state */
  ENGINE_POOL_LAST = 3, /* the last token's state */
  ENGINE_POOL_RANK = 4, /* a reranker: the classification head's scores */
} engine_pooling;
bool engine_is_encoder(const engine *e);
engine_pooling engine_get_pooling(const engine *e);
/* Values engine_embedding gives: n_embd, or the head's score count for
 * ENGINE_POOL_RANK. */
int engine_embedding_dim(const engine *e);
/* For embedding requests after DONE: the L2-normalised pooled vector
 * (engine_embedding_dim floats, borrowed until release); with
 * ENGINE_POOL_RANK the raw scores of the classification head, not
 * normalised (the relevance score is the first, as llama.cpp's). */
const float *engine_embedding(const engine_req *r);
/* Asks the engine to stop the request; it leaves the batch within a step
 * and ends with DONE (finish CANCEL). Never blocks. */
void engine_cancel(engine_req *r);
/* Cancels if still running and frees the handle (r may be NULL). Never
 * blocks; unread events are dropped. */
void engine_release(engine_req *r);
void engine_get_stats(engine *e, engine_stats *out);

#endif
