/* receipt.h - `power.receipt.v1`: what binds one answer to the model bytes,
 * the request, the prompt, the decoding settings and the output.
 *
 * What it is: a builder over plain structs that the server and the CLI
 * fill as a request runs (token by token for the output digests), then one
 * call that renders the receipt as canonical JSON (RFC 8785) and its
 * receipt_sha256, optionally signed; and the checks `power verify` runs.
 * What it is not: HTTP, the engine or the prompt path; it hashes what the
 * callers hand it.
 *
 * The receipt (members sorted as JCS sorts them when rendered):
 *   schema    "power.receipt.v1"
 *   endpoint  "chat.completions" | "completions" | "embeddings" | "cli.run"
 *   model     {name, sha256 (of the GGUF file bytes), size (bytes),
 *              template_sha256 (of the chat template source used; null when
 *              none was), tokenizer {kind, pre, n_vocab}}
 *   request   {sha256: of the canonical JSON of the request body as
 *              received, its prompt_cache_key (when a string) replaced by
 *              that string's SHA-256 in hex; identity_sha256: SHA-256 of
 *              "power.identity.v1\0" + the caller's API key digest, or null
 *              when the server has no keys}
 *   prompt    {text_sha256: of the text tokenized (the rendered template
 *              for chat, the prompt string for completions; null for token
 *              ids and embeddings), ids_sha256 (token-id digest, see
 *              digest.h; embeddings: over each input's LE u32 count then
 *              ids), tokens, cached_tokens}
 *   decoding  every effective sampling parameter as the sampler saw it
 *              (floats as their exact double value), seed as a decimal
 *              string (u64) with seed_source "request" or "generated"
 *              (from the CSPRNG), max_tokens after the context cap,
 *              stop_count and stop_sha256 (of the canonical JSON array of
 *              the stop strings; null when none), logit_bias_count and
 *              logit_bias_sha256 (of the canonical [[token, bias], ...]),
 *              ignore_eos, logprobs, top_logprobs. Absent for embeddings.
 *   runtime   {power_version, source_revision, kernels (the kernel level),
 *              replica (the serving replica's name, power serve
 *              --replica-id; absent when the caller gives none),
 *              speculation {mode, drafted, accepted, emitted,
 *              target_passes}, prefix_cache {keyed, cached_tokens}}
 *   output    generations: {ids_sha256 (digest of the emitted token ids),
 *              text_sha256 (of the text returned), tokens (emitted ids),
 *              completion_tokens (as usage counts them), finish_reason};
 *              embeddings: {vectors, dimensions, float32_sha256}
 *   signature (optional) {alg "ed25519", key_sha256 (fingerprint), value
 *              (base64 over the ASCII hex of receipt_sha256)}
 * receipt_sha256 = SHA-256 of the canonical JSON of the receipt without
 * "signature". Timings never enter the receipt. No prompt or output text,
 * no raw prompt_cache_key and no API key appear in it: only digests. */
#ifndef PW_EVIDENCE_RECEIPT_H
#define PW_EVIDENCE_RECEIPT_H

#include "evidence/digest.h"
#include "evidence/sign.h"
#include "sample/sample.h"

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#define EV_RECEIPT_SCHEMA "power.receipt.v1"
#define EV_IDENTITY_DOMAIN "power.identity.v1" /* hashed with its NUL */

/* Facts about the loaded model, filled once (ev_model_info_init). */
typedef struct ev_model_info {
  char name[128];
  char sha256[65];         /* hex of the file bytes */
  uint64_t size;           /* bytes */
  char template_sha256[65]; /* of the chat template source ("" = none) */
  char tok_kind[16], tok_pre[64];
  int32_t n_vocab;
} ev_model_info;

/* Fills m; template_src may be NULL (no template). sha256_hex borrowed. */
int ev_model_info_init(ev_model_info *m, const char *name, const char *sha256_hex, uint64_t size,
                       const char *template_src, const char *tok_kind, const char *tok_pre, int32_t n_vocab,
                       char *err);

/* One request's receipt in the making. Plain fields are filled by the
 * caller; the hashers by the ev_gen_* calls. */
typedef struct ev_gen {
  const char *endpoint;        /* static string */
  const ev_model_info *model;  /* borrowed */
  bool template_used;          /* chat: the template rendered the prompt */
  char request_sha256[65];     /* ev_request_sha256 */
  bool has_identity;
  char identity_sha256[65];    /* ev_identity_sha256 */
  /* prompt */
  bool has_prompt_text;
  uint8_t prompt_text_sha256[32];
  ev_hasher prompt_ids;        /* started by ev_gen_init */
  int n_prompt;
  /* decoding (generations) */
  pw_sampler_params sampling;  /* set by ev_gen_decoding; logit_bias NULL */
  bool seed_generated;
  int max_tokens;              /* effective */
  int n_stop;                  /* ev_gen_decoding */
  char stop_sha256[65];        /* "" = no stop strings */
  char logit_bias_sha256[65];  /* "" = no bias */
  bool ignore_eos, logprobs;
  int top_logprobs;
  /* runtime */
  const char *spec_mode;       /* "off", ... (static) */
  const char *replica;         /* borrowed until ev_gen_receipt: the replica's name; NULL = none */
  int drafted, accepted, emitted, target_passes;
  bool cache_keyed;
  int cached_tokens;
  /* output */
  ev_hasher out_ids, out_text, out_vec;
  int n_out;                   /* emitted ids */
  int completion_tokens;
  const char *finish;          /* "stop" | "length" | "cancel" (static) */
  int n_vectors, dims;         /* embeddings */
} ev_gen;

/* Zeroes g and starts its hashers. 0 or PW_ENOMEM. */
int ev_gen_init(ev_gen *g, const char *endpoint, const ev_model_info *model);
void ev_gen_free(ev_gen *g); /* NULL-safe; frees the hashers only */
/* The sampling parameters and stop strings (both borrowed only during the
 * call: their digests are taken now). 0 or a status with err set. */
int ev_gen_decoding(ev_gen *g, const pw_sampler_params *sp, const char *const *stop, int n_stop, char *err);
/* The prompt: text (may be NULL) and ids. For embeddings call once per
 * input (then each input's count is hashed before its ids). */
void ev_gen_prompt(ev_gen *g, const char *text, size_t len, const int32_t *ids, int n);
void ev_gen_embedding_input(ev_gen *g, const int32_t *ids, int n);
/* One emitted token and the text it released (may be empty). */
void ev_gen_token(ev_gen *g, int32_t id, const char *text, size_t len);
/* Text released without a token (held-back text at the end). */
void ev_gen_text(ev_gen *g, const char *text, size_t len);
void ev_gen_vector(ev_gen *g, const float *v, int n);

/* A rendered receipt. */
typedef struct ev_receipt {
  json_t *obj;          /* owned: the receipt object (signature included) */
  char *json;           /* owned: its canonical JSON */
  size_t json_len;
  char sha256[65];      /* receipt_sha256 */
} ev_receipt;

/* Ends the hashers and renders. key (may be NULL) signs. r owned by the
 * caller (ev_receipt_free). 0 or PW_ENOMEM / PW_EINTERNAL with err set. */
int ev_gen_receipt(ev_gen *g, const ev_key *key, ev_receipt *r, char *err);
void ev_receipt_free(ev_receipt *r);

/* SHA-256 of the canonical request body (prompt_cache_key hashed). 0, or
 * PW_EINVAL (not JSON / not canonicalizable) with err set. */
int ev_request_sha256(const char *body, size_t len, char hex[65], char *err);
int ev_request_sha256_json(const json_t *body, char hex[65], char *err);
/* SHA-256 of EV_IDENTITY_DOMAIN\0 + the identity bytes. */
void ev_identity_sha256(const void *id, size_t n, char hex[65]);

/* receipt_sha256 of a receipt object (its "signature" left out). */
int ev_receipt_digest(const json_t *receipt, char hex[65], char *err);

#endif
