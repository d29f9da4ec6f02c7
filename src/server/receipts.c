/* receipts.c - fills receipts from requests and engine events. See
 * receipts.h. */
#include "server/receipts.h"

#include "base/error.h"

#include <stdio.h>
#include <string.h>

static int start(srv_receipt *s, const ev_model_info *m, const char *endpoint, const char *body, size_t body_len,
                 const srv_caller *who, oai_error *e) {
  memset(s, 0, sizeof *s);
  if (ev_gen_init(&s->gen, endpoint, m)) return oai_seterr(e, 500, "internal_error", NULL, "out of memory");
  s->started = true;
  char err[PW_ERRMAX];
  if (ev_request_sha256(body, body_len, s->gen.request_sha256, err))
    return oai_seterr(e, 500, "internal_error", NULL, "cannot digest the request: %s", err);
  if (who && !who->anonymous && who->tenant) {
    ev_identity_sha256(who->tenant, 32, s->gen.identity_sha256);
    s->gen.has_identity = true;
  }
  return 0;
}

int srv_receipt_begin(srv_receipt *s, const ev_model_info *m, oai_kind kind, const char *body, size_t body_len,
                      const srv_caller *who, const oai_request *r, const char *prompt_text, size_t prompt_len,
                      const engine_params *p, int n_ctx, const char *spec_mode, oai_error *e) {
  int rc = start(s, m, kind == OAI_CHAT ? "chat.completions" : "completions", body, body_len, who, e);
  if (rc) return rc;
  ev_gen *g = &s->gen;
  g->template_used = kind == OAI_CHAT;
  ev_gen_prompt(g, prompt_text, prompt_len, p->prompt, p->n_prompt);
  char err[PW_ERRMAX];
  if (ev_gen_decoding(g, &p->sampling, p->stop, p->n_stop, err))
    return oai_seterr(e, 500, "internal_error", NULL, "cannot digest the decoding parameters: %s", err);
  g->seed_generated = !r->seed_given;
  int room = n_ctx - p->n_prompt;
  g->max_tokens = p->max_tokens > 0 && p->max_tokens < room ? p->max_tokens : room;
  g->ignore_eos = p->ignore_eos;
  g->logprobs = p->want_logprobs;
  g->top_logprobs = p->n_logprobs;
  g->spec_mode = spec_mode && *spec_mode && !p->spec_off ? spec_mode : "off";
  g->cache_keyed = p->has_cache_key;
  return 0;
}

int srv_receipt_begin_embed(srv_receipt *s, const ev_model_info *m, const char *body, size_t body_len,
                            const srv_caller *who, oai_error *e) {
  return start(s, m, "embeddings", body, body_len, who, e);
}

static const char *finish_name(engine_finish f) {
  return f == ENGINE_FINISH_LENGTH ? "length" : f == ENGINE_FINISH_CANCEL ? "cancel" : "stop";
}

int srv_receipt_end(srv_receipt *s, const engine_event *done, const ev_key *key, uint64_t t0, uint64_t t_first,
                    uint64_t t_end, oai_resp *o, oai_error *e) {
  ev_gen *g = &s->gen;
  if (done) {
    const engine_usage *u = &done->usage;
    g->cached_tokens += u->cached_tokens;
    g->drafted = u->spec_drafted;
    g->accepted = u->spec_accepted;
    g->emitted = u->spec_emitted;
    g->target_passes = u->target_passes;
    g->completion_tokens = u->completion_tokens;
    g->finish = finish_name(done->finish);
  }
  char err[PW_ERRMAX];
  int rc = ev_gen_receipt(g, key, &s->rc, err);
  if (rc) return oai_seterr(e, 500, "internal_error", NULL, "cannot make the receipt: %s", err);
  s->done = true;
  double total = (double)(t_end - t0) / 1e6;
  if (t_first) snprintf(s->timings, sizeof s->timings, "{\"ttft_ms\":%.3f,\"total_ms\":%.3f}",
                        (double)(t_first - t0) / 1e6, total);
  else snprintf(s->timings, sizeof s->timings, "{\"total_ms\":%.3f}", total);
  o->receipt = s->rc.json;
  o->receipt_sha256 = s->rc.sha256;
  o->timings = s->timings;
  return 0;
}

void srv_receipt_free(srv_receipt *s) {
  if (!s) return;
  if (s->started) ev_gen_free(&s->gen);
  ev_receipt_free(&s->rc);
  memset(s, 0, sizeof *s);
}
