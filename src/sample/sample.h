/* sample.h - sampler chain on float logits, one pw_sampler per request.
 *
 * Turns one row of model logits into one token id. The chain, in order:
 *   1. NaN logits are treated as -inf (never sampled); +inf as the largest
 *      finite float, so such a token wins but softmax stays defined.
 *   2. logit_bias: logit += bias; a bias of -inf or <= -100 bans the token.
 *   3. penalties over the last repeat_last_n accepted tokens, per distinct
 *      token with count c in that window:
 *        repeat (llama.cpp):  logit = logit > 0 ? logit / r : logit * r
 *        OpenAI:              logit -= c * frequency + (c > 0) * presence
 *   4. temperature <= 0: greedy argmax (ties -> lowest token id). Done.
 *   5. otherwise, as llama.cpp's default chain: top_k -> top_p -> min_p ->
 *      temperature -> softmax -> one draw. The three filters therefore see
 *      the untempered distribution (temperature reshapes only what survives);
 *      top_p renormalises over the top_k survivors; each filter keeps at
 *      least one token. Sorting is by logit desc, then token id asc.
 *
 * RNG consumption is part of the contract: every successful non-greedy
 * pw_sampler_sample makes exactly ONE pw_rng_uniform draw (even if a single
 * candidate survives); greedy sampling and failed calls make none. Speculative
 * decoding relies on this to replay a request's RNG stream exactly. The
 * result depends only on the seed, the parameters, the accepted history and
 * the logits: not on threads, batch composition or other requests.
 *
 * Not here: grammar/JSON constraints, stop strings (chat/), detokenisation.
 * No allocation after pw_sampler_create: all scratch is sized for n_vocab. */
#ifndef PW_SAMPLE_SAMPLE_H
#define PW_SAMPLE_SAMPLE_H

#include <stdint.h>

#include "base/rng.h"

/* OpenAI caps top_logprobs at 20. */
#define PW_SAMPLE_MAX_PROBS 20
/* Largest repeat_last_n accepted (tokens). */
#define PW_SAMPLE_MAX_LAST_N (1 << 20)

typedef struct pw_logit_bias {
  int32_t token; /* in [0, n_vocab) */
  float bias;    /* added to the logit; -inf or <= -100 bans the token */
} pw_logit_bias;

typedef struct pw_sampler_params {
  float temperature;       /* [0, 100]; 0 = greedy argmax */
  int32_t top_k;           /* keep the k most likely; <= 0 = disabled */
  float top_p;             /* (0, 1]; keep the smallest prefix reaching this mass; 1 = disabled */
  float min_p;             /* [0, 1]; keep p >= min_p * p_max; 0 = disabled */
  float repeat_penalty;    /* > 0; 1 = disabled */
  int32_t repeat_last_n;   /* [0, PW_SAMPLE_MAX_LAST_N] tokens of history for all
                            * three penalties; 0 disables them. Callers map
                            * "whole context" (-1 in llama.cpp) themselves. */
  float frequency_penalty; /* [-2, 2]; 0 = disabled */
  float presence_penalty;  /* [-2, 2]; 0 = disabled */
  const pw_logit_bias *logit_bias; /* borrowed; copied by pw_sampler_create.
                                    * Duplicate tokens add up. */
  int32_t n_logit_bias;
  uint64_t seed;   /* RNG seed; callers pick a random one when the client gave none */
  int32_t n_probs; /* [0, PW_SAMPLE_MAX_PROBS] alternatives the caller will
                    * report with pw_sampler_logprobs; not used by sampling */
} pw_sampler_params;

/* One surviving candidate of the chain, see pw_sampler_dist. */
typedef struct pw_candidate {
  int32_t token;
  float logit; /* after bias and penalties, before temperature */
  float p;     /* after filters, temperature and softmax; sums to 1 */
} pw_candidate;

typedef struct pw_logprob {
  int32_t token;
  float logprob; /* natural log of the probability */
} pw_logprob;

typedef struct pw_sampler pw_sampler;

/* Neutral OpenAI defaults: temperature 1, no filters, no penalties,
 * repeat_last_n 64, no bias, seed 0, n_probs 0. */
void pw_sampler_params_default(pw_sampler_params *p);

/* 0, or PW_EINVAL with a message naming the offending field. Negative top_k
 * is accepted (disabled). Token ids of logit_bias are checked by create,
 * which knows n_vocab. */
int pw_sampler_params_validate(const pw_sampler_params *p, char *err);

/* Validates p, copies it (and its logit_bias list) and allocates all scratch
 * for n_vocab tokens (about 28 bytes per token, plus 4 per token when
 * penalties are on). Seeds the RNG with p->seed. NULL on failure with the
 * reason in err (PW_ERRMAX bytes, may be NULL). The caller owns the result. */
pw_sampler *pw_sampler_create(const pw_sampler_params *p, int n_vocab, char *err);
void pw_sampler_destroy(pw_sampler *s);

/* Forgets the penalty history and reseeds the RNG with the params' seed. */
void pw_sampler_reset(pw_sampler *s);

/* Appends token to the penalty history (evicting the oldest beyond
 * repeat_last_n). pw_sampler_sample never calls it: the caller accepts each
 * generated token, and the prompt tokens too when penalties should cover the
 * prompt, as llama.cpp does. No-op when penalties are disabled.
 * 0, or PW_EINVAL when token is outside [0, n_vocab). */
int pw_sampler_accept(pw_sampler *s, int32_t token);

/* Runs the chain on logits[n_vocab] (not modified) and draws a token.
 * Returns the token id, or PW_ERANGE (no draw made) when bias, penalties or
 * NaNs left no token with a logit above -inf. */
int32_t pw_sampler_sample(pw_sampler *s, const float *logits);

/* Runs the chain without drawing (no RNG use) and points *out at the
 * surviving candidates: a view into the sampler, valid until its next call.
 * Order: logit desc then token asc when top_k, top_p or min_p is active,
 * token order otherwise; greedy gives the single argmax with p = 1. This is
 * the distribution pw_sampler_sample draws from, walking the list in this
 * order: exactly, except that without bias, penalties and filters the draw
 * weighs tokens with the installed vector exp (a few ulp from expf, see
 * tensor/ops.h), so a draw at a rounding boundary may pick a neighbour.
 * Returns the count (>= 1) or PW_ERANGE as above. */
int pw_sampler_dist(pw_sampler *s, const float *logits, const pw_candidate **out);

/* The sampler's parameters; logit_bias points into the sampler. */
const pw_sampler_params *pw_sampler_get_params(const pw_sampler *s);

/* Snapshot / restore of the RNG stream, e.g. to roll back a speculative
 * step. */
void pw_sampler_get_rng(const pw_sampler *s, pw_rng *out);
void pw_sampler_set_rng(pw_sampler *s, const pw_rng *rng);

/* Index of the largest logit; ties -> lowest index; NaN is skipped. Returns 0
 * when no value exceeds -inf, -1 when n <= 0. */
int32_t pw_argmax(const float *logits, int n);

/* OpenAI-style logprobs: log-softmax over the ORIGINAL model logits (pass
 * them before bias, penalties and temperature; NaN counts as -inf). Writes
 * the min(n_top, n_vocab) most likely tokens to out_top (sorted by logprob
 * desc, then token asc; out_top may be NULL when n_top is 0) and the
 * chosen token's logprob to *out_chosen (may be NULL). Uses out_top as its
 * only scratch: no allocation. Returns the number written, or PW_EINVAL for
 * bad arguments, PW_ERANGE when every logit is -inf or NaN. */
int pw_sampler_logprobs(const float *logits, int n_vocab, int32_t chosen, int n_top,
                        pw_logprob *out_top, float *out_chosen);

#endif
