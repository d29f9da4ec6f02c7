/* receipt.c - power.receipt.v1 builder. See receipt.h. */
#include "evidence/receipt.h"

#include "base/error.h"
#include "base/sha256.h"
#include "evidence/jcs.h"
#include "engine/engine.h"

#include "power.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef POWER_SOURCE_REVISION
#define POWER_SOURCE_REVISION "unknown"
#endif

int ev_model_info_init(ev_model_info *m, const char *name, const char *sha256_hex, uint64_t size,
                       const char *template_src, const char *tok_kind, const char *tok_pre, int32_t n_vocab,
                       char *err) {
  memset(m, 0, sizeof *m);
  if (!sha256_hex || strlen(sha256_hex) != 64) return pw_seterr(err, PW_EINVAL, "the model's SHA-256 is unknown");
  snprintf(m->name, sizeof m->name, "%s", name ? name : "");
  memcpy(m->sha256, sha256_hex, 65);
  m->size = size;
  if (template_src) {
    uint8_t d[32];
    pw_sha256(template_src, strlen(template_src), d);
    pw_hex(d, 32, m->template_sha256);
  }
  snprintf(m->tok_kind, sizeof m->tok_kind, "%s", tok_kind ? tok_kind : "");
  snprintf(m->tok_pre, sizeof m->tok_pre, "%s", tok_pre ? tok_pre : "");
  m->n_vocab = n_vocab;
  return 0;
}

int ev_gen_init(ev_gen *g, const char *endpoint, const ev_model_info *model) {
  memset(g, 0, sizeof *g);
  g->endpoint = endpoint;
  g->model = model;
  g->spec_mode = "off";
  g->finish = "stop";
  if (ev_hasher_init_ids(&g->prompt_ids) || ev_hasher_init_ids(&g->out_ids) || ev_hasher_init(&g->out_text) ||
      ev_hasher_init(&g->out_vec)) {
    ev_gen_free(g);
    return PW_ENOMEM;
  }
  return 0;
}

void ev_gen_free(ev_gen *g) {
  if (!g) return;
  ev_hasher_free(&g->prompt_ids);
  ev_hasher_free(&g->out_ids);
  ev_hasher_free(&g->out_text);
  ev_hasher_free(&g->out_vec);
}

void ev_gen_prompt(ev_gen *g, const char *text, size_t len, const int32_t *ids, int n) {
  if (text) {
    pw_sha256(text, len, g->prompt_text_sha256);
    g->has_prompt_text = true;
  }
  ev_hasher_ids(&g->prompt_ids, ids, (size_t)n);
  g->n_prompt += n;
}

void ev_gen_embedding_input(ev_gen *g, const int32_t *ids, int n) {
  int32_t count = n;
  ev_hasher_ids(&g->prompt_ids, &count, 1);
  ev_hasher_ids(&g->prompt_ids, ids, (size_t)n);
  g->n_prompt += n;
}

void ev_gen_token(ev_gen *g, int32_t id, const char *text, size_t len) {
  ev_hasher_ids(&g->out_ids, &id, 1);
  ev_hasher_update(&g->out_text, text, len);
  g->n_out++;
}

void ev_gen_text(ev_gen *g, const char *text, size_t len) { ev_hasher_update(&g->out_text, text, len); }

void ev_gen_vector(ev_gen *g, const float *v, int n) {
  ev_hasher_floats(&g->out_vec, v, (size_t)n);
  g->n_vectors++;
  g->dims = n;
}

static json_t *hexstr(const uint8_t d[32]) {
  char h[65];
  pw_hex(d, 32, h);
  return json_string(h);
}

static json_t *str_or_null(const char *s) { return s && *s ? json_string(s) : json_null(); }

int ev_gen_decoding(ev_gen *g, const pw_sampler_params *sp, const char *const *stop, int n_stop, char *err) {
  g->sampling = *sp;
  g->sampling.logit_bias = NULL;
  g->n_stop = n_stop;
  g->stop_sha256[0] = g->logit_bias_sha256[0] = 0;
  int rc = 0;
  if (n_stop > 0) {
    json_t *a = json_array();
    for (int i = 0; i < n_stop; i++) json_array_append_new(a, json_string(stop[i]));
    rc = jcs_sha256_hex(a, g->stop_sha256, err);
    json_decref(a);
  }
  if (!rc && sp->n_logit_bias > 0) {
    json_t *a = json_array();
    for (int i = 0; i < sp->n_logit_bias; i++)
      json_array_append_new(a, json_pack("[I,f]", (json_int_t)sp->logit_bias[i].token, (double)sp->logit_bias[i].bias));
    rc = jcs_sha256_hex(a, g->logit_bias_sha256, err);
    json_decref(a);
  }
  return rc;
}

static json_t *decoding_json(const ev_gen *g) {
  const pw_sampler_params *s = &g->sampling;
  json_t *d = json_object();
  char seed[24];
  snprintf(seed, sizeof seed, "%" PRIu64, s->seed);
  json_object_set_new(d, "temperature", json_real(s->temperature));
  json_object_set_new(d, "top_k", json_integer(s->top_k));
  json_object_set_new(d, "top_p", json_real(s->top_p));
  json_object_set_new(d, "min_p", json_real(s->min_p));
  json_object_set_new(d, "repeat_penalty", json_real(s->repeat_penalty));
  json_object_set_new(d, "repeat_last_n", json_integer(s->repeat_last_n));
  json_object_set_new(d, "frequency_penalty", json_real(s->frequency_penalty));
  json_object_set_new(d, "presence_penalty", json_real(s->presence_penalty));
  json_object_set_new(d, "seed", json_string(seed));
  json_object_set_new(d, "seed_source", json_string(g->seed_generated ? "generated" : "request"));
  json_object_set_new(d, "max_tokens", json_integer(g->max_tokens));
  json_object_set_new(d, "ignore_eos", json_boolean(g->ignore_eos));
  json_object_set_new(d, "logprobs", json_boolean(g->logprobs));
  json_object_set_new(d, "top_logprobs", json_integer(g->top_logprobs));
  json_object_set_new(d, "stop_count", json_integer(g->n_stop));
  json_object_set_new(d, "stop_sha256", str_or_null(g->stop_sha256));
  json_object_set_new(d, "logit_bias_count", json_integer(s->n_logit_bias));
  json_object_set_new(d, "logit_bias_sha256", str_or_null(g->logit_bias_sha256));
  return d;
}

int ev_gen_receipt(ev_gen *g, const ev_key *key, ev_receipt *r, char *err) {
  memset(r, 0, sizeof *r);
  const ev_model_info *m = g->model;
  bool embed = g->n_vectors > 0 || !strcmp(g->endpoint, "embeddings");
  uint8_t prompt_ids[32], out_ids[32], out_text[32], out_vec[32];
  ev_hasher_final(&g->prompt_ids, prompt_ids);
  ev_hasher_final(&g->out_ids, out_ids);
  ev_hasher_final(&g->out_text, out_text);
  ev_hasher_final(&g->out_vec, out_vec);

  json_t *root = json_object();
  json_object_set_new(root, "schema", json_string(EV_RECEIPT_SCHEMA));
  json_object_set_new(root, "endpoint", json_string(g->endpoint));
  json_t *jm = json_object();
  json_object_set_new(jm, "name", json_string(m->name));
  json_object_set_new(jm, "sha256", json_string(m->sha256));
  json_object_set_new(jm, "size", json_integer((json_int_t)m->size));
  json_object_set_new(jm, "template_sha256", g->template_used ? str_or_null(m->template_sha256) : json_null());
  json_object_set_new(jm, "tokenizer", json_pack("{s:s,s:s,s:i}", "kind", m->tok_kind, "pre", m->tok_pre, "n_vocab",
                                                 (int)m->n_vocab));
  json_object_set_new(root, "model", jm);
  json_t *jr = json_object();
  json_object_set_new(jr, "sha256", json_string(g->request_sha256));
  json_object_set_new(jr, "identity_sha256", g->has_identity ? json_string(g->identity_sha256) : json_null());
  json_object_set_new(root, "request", jr);
  json_t *jp = json_object();
  json_object_set_new(jp, "text_sha256", g->has_prompt_text ? hexstr(g->prompt_text_sha256) : json_null());
  json_object_set_new(jp, "ids_sha256", hexstr(prompt_ids));
  json_object_set_new(jp, "tokens", json_integer(g->n_prompt));
  json_object_set_new(jp, "cached_tokens", json_integer(g->cached_tokens));
  json_object_set_new(root, "prompt", jp);
  int rc = 0;
  if (!embed) json_object_set_new(root, "decoding", decoding_json(g));
  json_t *rt = json_object();
  json_object_set_new(rt, "power_version", json_string(pw_version()));
  json_object_set_new(rt, "source_revision", json_string(POWER_SOURCE_REVISION));
  json_object_set_new(rt, "kernels", json_string(engine_kernels()));
  if (g->replica) json_object_set_new(rt, "replica", json_string(g->replica));
  json_object_set_new(rt, "speculation",
                      json_pack("{s:s,s:i,s:i,s:i,s:i}", "mode", g->spec_mode ? g->spec_mode : "off", "drafted",
                                g->drafted, "accepted", g->accepted, "emitted", g->emitted, "target_passes",
                                g->target_passes));
  json_object_set_new(rt, "prefix_cache",
                      json_pack("{s:b,s:i}", "keyed", (int)g->cache_keyed, "cached_tokens", g->cached_tokens));
  json_object_set_new(root, "runtime", rt);
  json_t *jo = json_object();
  if (embed) {
    json_object_set_new(jo, "vectors", json_integer(g->n_vectors));
    json_object_set_new(jo, "dimensions", json_integer(g->dims));
    json_object_set_new(jo, "float32_sha256", hexstr(out_vec));
  } else {
    json_object_set_new(jo, "ids_sha256", hexstr(out_ids));
    json_object_set_new(jo, "text_sha256", hexstr(out_text));
    json_object_set_new(jo, "tokens", json_integer(g->n_out));
    json_object_set_new(jo, "completion_tokens", json_integer(g->completion_tokens));
    json_object_set_new(jo, "finish_reason", json_string(g->finish));
  }
  json_object_set_new(root, "output", jo);
  if ((rc = jcs_sha256_hex(root, r->sha256, err))) goto fail;
  if (key) {
    char sig[96], fp[65];
    if ((rc = ev_sign(key, r->sha256, 64, sig, sizeof sig, err)) || (rc = ev_key_fingerprint(key, fp, err))) goto fail;
    json_object_set_new(root, "signature",
                        json_pack("{s:s,s:s,s:s}", "alg", "ed25519", "key_sha256", fp, "value", sig));
  }
  if ((rc = jcs_encode(root, &r->json, &r->json_len, err))) goto fail;
  r->obj = root;
  return 0;
fail:
  json_decref(root);
  free(r->json);
  memset(r, 0, sizeof *r);
  return rc ? rc : PW_ENOMEM;
}

void ev_receipt_free(ev_receipt *r) {
  if (!r) return;
  json_decref(r->obj);
  free(r->json);
  memset(r, 0, sizeof *r);
}

int ev_request_sha256_json(const json_t *body, char hex[65], char *err) {
  json_t *key = json_is_object(body) ? json_object_get(body, "prompt_cache_key") : NULL;
  if (!json_is_string(key)) return jcs_sha256_hex(body, hex, err);
  /* The raw key never enters a digest that leaves the server. */
  json_t *copy = json_copy((json_t *)body);
  if (!copy) return pw_seterr(err, PW_ENOMEM, "out of memory");
  uint8_t d[32];
  char kh[65];
  pw_sha256(json_string_value(key), json_string_length(key), d);
  pw_hex(d, 32, kh);
  json_object_set_new(copy, "prompt_cache_key", json_string(kh));
  int rc = jcs_sha256_hex(copy, hex, err);
  json_decref(copy);
  return rc;
}

int ev_request_sha256(const char *body, size_t len, char hex[65], char *err) {
  json_error_t je;
  json_t *v = json_loadb(body ? body : "", len, JSON_DECODE_ANY | JSON_ALLOW_NUL | JSON_DECODE_INT_AS_REAL, &je);
  if (!v) return pw_seterr(err, PW_EINVAL, "the request is not JSON: %s", je.text);
  int rc = ev_request_sha256_json(v, hex, err);
  json_decref(v);
  return rc;
}

void ev_identity_sha256(const void *id, size_t n, char hex[65]) {
  ev_hasher h;
  uint8_t d[32];
  if (ev_hasher_init(&h)) PW_ASSERT(!"out of memory hashing an identity"); /* libcrypto cannot start a digest */
  ev_hasher_update(&h, EV_IDENTITY_DOMAIN, sizeof EV_IDENTITY_DOMAIN);
  ev_hasher_update(&h, id, n);
  ev_hasher_final(&h, d);
  pw_hex(d, 32, hex);
}

int ev_receipt_digest(const json_t *receipt, char hex[65], char *err) {
  if (!json_is_object(receipt)) return pw_seterr(err, PW_EINVAL, "the receipt is not a JSON object");
  if (!json_object_get(receipt, "signature")) return jcs_sha256_hex(receipt, hex, err);
  json_t *copy = json_copy((json_t *)receipt);
  if (!copy) return pw_seterr(err, PW_ENOMEM, "out of memory");
  json_object_del(copy, "signature");
  int rc = jcs_sha256_hex(copy, hex, err);
  json_decref(copy);
  return rc;
}
