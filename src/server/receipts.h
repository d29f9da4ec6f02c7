/* receipts.h - the server's side of receipts: fills the evidence layer's
 * plain structs from a validated request, its engine parameters and the
 * engine's events, and renders the result into the response identity
 * (oai_resp) so oai.c prints it.
 *
 * What it is: glue between oai.h/engine.h types and evidence/receipt.h.
 * What it is not: the receipt's schema or digests (evidence/receipt.c),
 * HTTP (server.c). */
#ifndef PW_SERVER_RECEIPTS_H
#define PW_SERVER_RECEIPTS_H

#include "engine/engine.h"
#include "evidence/receipt.h"
#include "server/oai.h"

#include <stdbool.h>
#include <stdint.h>

/* One response's receipt state: the builder, then the rendered receipt and
 * its timings text, which oai_resp borrows. */
typedef struct srv_receipt {
  ev_gen gen;
  ev_receipt rc;
  char timings[160];
  bool started, done;
} srv_receipt;

/* Who asked: the tenant digest, or anonymous (no API keys configured). */
typedef struct srv_caller {
  bool anonymous;
  const uint8_t *tenant; /* 32 bytes, borrowed (when !anonymous) */
} srv_caller;

/* Starts a generation's receipt: request digest over the raw body, the
 * caller's identity digest, the prompt (text may be NULL) and every
 * effective decoding parameter of p (max_tokens capped by n_ctx as the
 * engine caps it). 0, or a status with e set (500). */
int srv_receipt_begin(srv_receipt *s, const ev_model_info *m, oai_kind kind, const char *body, size_t body_len,
                      const srv_caller *who, const oai_request *r, const char *prompt_text, size_t prompt_len,
                      const engine_params *p, int n_ctx, const char *spec_mode, oai_error *e);
/* Starts an embeddings receipt (inputs and vectors added by the caller). */
int srv_receipt_begin_embed(srv_receipt *s, const ev_model_info *m, const char *body, size_t body_len,
                            const srv_caller *who, oai_error *e);
/* Ends it from the DONE event, renders and signs (key may be NULL) and
 * points o's evidence fields at it. t0/t_first/t_end: pw_now_ns readings
 * (t_first 0 = no token). 0, or a status with e set (500). */
int srv_receipt_end(srv_receipt *s, const engine_event *done, const ev_key *key, uint64_t t0, uint64_t t_first,
                    uint64_t t_end, oai_resp *o, oai_error *e);
void srv_receipt_free(srv_receipt *s);

#endif
