/* api_ollama.c - the Ollama-compatible API: POST /api/chat, /api/generate
 * (NDJSON streams by default, one object with "stream": false),
 * /api/embed, /api/embeddings, /api/show; GET /api/tags, /api/ps,
 * /api/version. Requests become an oai_request and run through the one
 * generation core (api.h); this file only reads Ollama's fields and writes
 * Ollama's bodies: durations in nanoseconds, errors as {"error": "..."}.
 *
 * Policy, as for the OpenAI API: a field is honoured or refused with a 400
 * naming it. options honoured: temperature, top_k, top_p, min_p, seed,
 * num_predict, stop, repeat_penalty, repeat_last_n, presence_penalty,
 * frequency_penalty, num_ctx (only the server's own context size);
 * typical_p, tfs_z, mirostat, penalize_newline only at their neutral
 * values; load-time options (num_gpu, num_thread, ...) are refused, as is
 * any option this file does not know. keep_alive (seconds, or a duration
 * such as "5m"; 0 = unload after this request, negative = keep loaded) is
 * honoured when the server serves a store; with one model it stays loaded
 * for the server's life. A generate or chat request with nothing to
 * generate only loads the model (done_reason "load"), or with keep_alive 0
 * unloads it ("unload"), as Ollama does. Top-level fields: each endpoint
 * lists those it reads (k_chat_fields, ...); think, logprobs,
 * top_logprobs, truncate and shift only at the value that asks for what
 * this server does (false, 0); any other field is a 400 naming it.
 * What it is not: the store's pull and delete (api_models.c), or a
 * multi-model router (models.c, registry.c). */
#include "server/api.h"

#include "base/error.h"
#include "server/sbuf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define OL_MODEL_MAX 256 /* bytes of a model name echoed back */

void ollama_render_error(const oai_error *e, sbuf *out) {
  sbuf_puts(out, "{\"error\":");
  sbuf_json_str(out, e->message, strlen(e->message));
  sbuf_puts(out, "}");
}

/* ---- requests ---------------------------------------------------------- */

/* options a client may send that change nothing at their neutral value. */
typedef struct neutral_opt {
  const char *key;
  double value;
} neutral_opt;
static const neutral_opt k_neutral[] = {
    {"typical_p", 1.0}, {"tfs_z", 1.0}, {"mirostat", 0}, {"penalize_newline", 0}, {"num_keep", -1},
};
/* Settings of the running server, fixed when it started. */
static const char *const k_load_time[] = {"num_gpu",  "main_gpu",   "num_thread", "num_batch", "use_mmap",
                                          "use_mlock", "low_vram",  "numa",       "f16_kv",    "vocab_only",
                                          "logits_all", "num_gqa",  "rope_frequency_base", "rope_frequency_scale",
                                          NULL};
static const char *const k_known[] = {"temperature",     "top_k",          "top_p",         "min_p",
                                      "seed",            "num_predict",    "stop",          "repeat_penalty",
                                      "repeat_last_n",   "presence_penalty", "frequency_penalty", "num_ctx",
                                      NULL};

static int parse_options(conn *k, json_t *o, oai_request *r, oai_error *e) {
  pw_sampler_params *sp = &r->sampling;
  /* Ollama's defaults, which its clients expect when they send none. */
  sp->temperature = 0.8f;
  sp->top_k = 40;
  sp->top_p = 0.9f;
  sp->min_p = 0.0f;
  sp->repeat_penalty = 1.1f;
  sp->repeat_last_n = 64;
  sp->seed = api_random_seed();
  r->seed_given = false;
  if (!o || json_is_null(o)) return 0;
  if (!json_is_object(o)) return oai_seterr(e, 400, "invalid_type", "options", "'options' must be an object");
  const char *key;
  json_t *v;
  json_object_foreach(o, key, v) {
    if (json_is_null(v)) continue;
    bool known = false;
    for (int i = 0; k_known[i]; i++) known |= !strcmp(key, k_known[i]);
    if (known) continue;
    char param[96];
    snprintf(param, sizeof param, "options.%.80s", key);
    for (size_t i = 0; i < sizeof k_neutral / sizeof k_neutral[0]; i++)
      if (!strcmp(key, k_neutral[i].key)) {
        double d = json_is_boolean(v) ? (json_is_true(v) ? 1 : 0) : json_is_number(v) ? json_number_value(v) : -99;
        if (d == k_neutral[i].value) goto next;
        return oai_seterr(e, 400, "unsupported_option", param, "option '%s' is not supported (only %g is accepted)",
                          key, k_neutral[i].value);
      }
    for (int i = 0; k_load_time[i]; i++)
      if (!strcmp(key, k_load_time[i]))
        return oai_seterr(e, 400, "unsupported_option", param,
                          "option '%s' is a load-time setting of this server (set when it starts), not a request option",
                          key);
    return oai_seterr(e, 400, "unsupported_option", param, "option '%.80s' is not supported", key);
  next:;
  }
  double d;
  long long x;
  bool given;
  if (api_num(o, "temperature", "options.temperature", 0, 100, &d, &given, e)) return PW_EINVAL;
  if (given) sp->temperature = (float)d;
  if (api_int(o, "top_k", "options.top_k", 0, 1 << 30, &x, &given, e)) return PW_EINVAL;
  if (given) sp->top_k = (int32_t)x;
  if (api_num(o, "top_p", "options.top_p", 0, 1, &d, &given, e)) return PW_EINVAL;
  if (given) sp->top_p = d > 0 ? (float)d : 1e-9f;
  if (api_num(o, "min_p", "options.min_p", 0, 1, &d, &given, e)) return PW_EINVAL;
  if (given) sp->min_p = (float)d;
  if (api_num(o, "repeat_penalty", "options.repeat_penalty", 0, 10, &d, &given, e)) return PW_EINVAL;
  if (given) {
    if (d <= 0) return oai_seterr(e, 400, "invalid_value", "options.repeat_penalty", "'options.repeat_penalty' must be > 0");
    sp->repeat_penalty = (float)d;
  }
  int n_ctx = engine_n_ctx(srv_engine(k));
  if (api_int(o, "repeat_last_n", "options.repeat_last_n", -1, PW_SAMPLE_MAX_LAST_N, &x, &given, e)) return PW_EINVAL;
  if (given) sp->repeat_last_n = x < 0 ? n_ctx : (int32_t)x; /* -1: the whole context, as Ollama */
  if (api_num(o, "presence_penalty", "options.presence_penalty", -2, 2, &d, &given, e)) return PW_EINVAL;
  if (given) sp->presence_penalty = (float)d;
  if (api_num(o, "frequency_penalty", "options.frequency_penalty", -2, 2, &d, &given, e)) return PW_EINVAL;
  if (given) sp->frequency_penalty = (float)d;
  if (api_int(o, "seed", "options.seed", INT64_MIN, INT64_MAX, &x, &given, e)) return PW_EINVAL;
  if (given) {
    sp->seed = (uint64_t)x;
    r->seed_given = true;
  }
  /* -1: until the end of the context; -2: fill the context (the same here,
   * as this server never shifts the context). */
  if (api_int(o, "num_predict", "options.num_predict", -2, 1 << 30, &x, &given, e)) return PW_EINVAL;
  if (given) {
    if (x == 0)
      return oai_seterr(e, 400, "invalid_value", "options.num_predict", "'options.num_predict' must be -1, -2 or positive");
    r->max_tokens = x > 0 ? (int)x : 0;
  }
  if (api_stops(json_object_get(o, "stop"), "options.stop", r, e)) return PW_EINVAL;
  if (api_int(o, "num_ctx", "options.num_ctx", 1, 1 << 30, &x, &given, e)) return PW_EINVAL;
  if (given && x != n_ctx)
    return oai_seterr(e, 400, "unsupported_option", "options.num_ctx",
                      "'options.num_ctx' is %lld but this server runs the model with a context of %d tokens "
                      "(set it with --ctx when starting the server)",
                      x, n_ctx);
  return 0;
}

/* format: "" / absent (free text), "json", or a JSON schema object. */
static int parse_format(json_t *root, oai_request *r, oai_error *e) {
  json_t *f = json_object_get(root, "format");
  if (!f || json_is_null(f)) return 0;
  if (json_is_string(f)) {
    if (!json_string_length(f)) return 0;
    if (strcmp(json_string_value(f), "json"))
      return oai_seterr(e, 400, "invalid_value", "format", "'format' must be \"json\" or a JSON schema object");
    return api_json_grammar(&r->grammar, e);
  }
  if (!json_is_object(f)) return oai_seterr(e, 400, "invalid_type", "format", "'format' must be \"json\" or a JSON schema object");
  return api_schema_grammar(f, "format", &r->grammar, e);
}

static bool nonempty(json_t *v) {
  return v && !json_is_null(v) &&
         !((json_is_array(v) && json_array_size(v) == 0) || (json_is_string(v) && json_string_length(v) == 0));
}

/* The top-level members each endpoint reads (honoured, or refused by name
 * unless neutral); any other is a 400 naming it. */
static const char *const k_chat_fields[] = {
    "model", "messages", "stream", "format", "keep_alive", "options", "think", "tools", "logprobs", "top_logprobs",
    "truncate", "shift", NULL};
static const char *const k_generate_fields[] = {
    "model", "prompt", "system", "raw", "stream", "format", "keep_alive", "options", "think", "tools", "logprobs",
    "top_logprobs", "truncate", "shift", "images", "suffix", "template", "context", NULL};
static const char *const k_embed_fields[] = {"model", "input", "truncate", "dimensions", "keep_alive", "options", NULL};
static const char *const k_embeddings_fields[] = {"model", "prompt", "truncate", "dimensions", "keep_alive", "options",
                                                  NULL};
static const char *const k_show_fields[] = {"model", "name", "verbose", "system", "template", "options", NULL};

/* A member that asks for something this server does not do unless its
 * value is false (or 0): think (no reasoning mode), logprobs and
 * top_logprobs (not reported here), truncate and shift (a prompt over the
 * context is a 400 and an answer ends at the context, as Ollama does with
 * both false). */
static int check_neutral(json_t *root, oai_error *e) {
  static const char *const k_off[] = {"think", "logprobs", "top_logprobs", "truncate", "shift", NULL};
  for (int i = 0; k_off[i]; i++) {
    json_t *v = json_object_get(root, k_off[i]);
    if (!v || json_is_null(v) || json_is_false(v) || (json_is_number(v) && json_number_value(v) == 0)) continue;
    char code[48];
    snprintf(code, sizeof code, "unsupported_%s", k_off[i]);
    return oai_seterr(e, 400, code, k_off[i], "'%s' is not supported by this server (only false%s)", k_off[i],
                      strcmp(k_off[i], "top_logprobs") ? "" : " or 0");
  }
  return 0;
}

/* What both generation endpoints share: model, stream, options, format,
 * keep_alive, think, tools. nothing: the request has nothing to generate;
 * then, serving a store, keep_alive 0 sets *unload and the model is not
 * loaded. */
static int parse_common(conn *k, struct MHD_Connection *c, oai_request *r, const char *const *known, char *model,
                        bool nothing, bool *unload, oai_error *e) {
  json_t *root = r->root;
  const char *m;
  bool has_keep;
  double keep = 0;
  *unload = false;
  if (oai_check_fields(root, known, e) || check_neutral(root, e)) return PW_EINVAL;
  if (api_str(root, "model", "model", &m, e)) return PW_EINVAL;
  if (!m || !*m) return srv_use_model(k, c, m, false, e); /* 400: 'model' is required */
  snprintf(model, OL_MODEL_MAX, "%s", m);
  r->stream = true; /* Ollama streams unless told not to */
  if (api_bool(root, "stream", "stream", &r->stream, e)) return PW_EINVAL;
  if (api_keep_alive(k, root, &has_keep, &keep, e)) return PW_EINVAL;
  if (nothing && has_keep && keep == 0 && srv_store(srv_server(k))) {
    *unload = true;
    return srv_models_unload(srv_store(srv_server(k)), m, e);
  }
  if (srv_use_model(k, c, m, false, e)) return PW_EINVAL;
  if (nonempty(json_object_get(root, "tools")))
    return oai_seterr(e, 400, "unsupported_tools", "tools", "'tools' is not supported yet (no tool calling)");
  if (parse_options(k, json_object_get(root, "options"), r, e)) return PW_EINVAL;
  return parse_format(root, r, e);
}

/* ---- rendering ---------------------------------------------------------- */

typedef struct ol_ctx {
  char model[OL_MODEL_MAX]; /* the name the client asked for, echoed */
  bool chat;                /* /api/chat (message) or /api/generate (response) */
  uint64_t load_ns;         /* time this request waited for its model to load (store serving) */
} ol_ctx;

static void put_head(const ol_ctx *x, sbuf *out) {
  char t[48];
  api_iso_time(t, sizeof t);
  sbuf_puts(out, "{\"model\":");
  sbuf_json_str(out, x->model, strlen(x->model));
  sbuf_printf(out, ",\"created_at\":\"%s\"", t);
}

static void put_text(const ol_ctx *x, const char *text, size_t n, sbuf *out) {
  if (x->chat) {
    sbuf_puts(out, ",\"message\":{\"role\":\"assistant\",\"content\":");
    sbuf_json_str(out, text, n);
    sbuf_puts(out, "}");
  } else {
    sbuf_puts(out, ",\"response\":");
    sbuf_json_str(out, text, n);
  }
}

/* done, done_reason and the counters; durations in nanoseconds. The
 * prompt's evaluation is timed from arrival to the first token (queueing
 * included), generation from there to the end. */
static void put_done(const gen_view *v, sbuf *out) {
  const ol_ctx *x = v->ctx;
  uint64_t total = v->t_end > v->t0 ? v->t_end - v->t0 : 0;
  uint64_t first = v->t_first ? v->t_first - v->t0 : total;
  sbuf_printf(out,
              ",\"done_reason\":\"%s\",\"done\":true,\"total_duration\":%llu,\"load_duration\":%llu,"
              "\"prompt_eval_count\":%d,\"prompt_eval_duration\":%llu,\"eval_count\":%d,\"eval_duration\":%llu",
              v->finish == ENGINE_FINISH_LENGTH ? "length" : "stop", (unsigned long long)total,
              (unsigned long long)(x ? x->load_ns : 0),
              v->usage.prompt_tokens, (unsigned long long)first, v->usage.completion_tokens,
              (unsigned long long)(total - first));
  oai_put_receipt(v->o, out);
}

static void ol_begin(const gen_view *v, sbuf *out) {
  (void)v;
  (void)out;
}
static void ol_delta(const gen_view *v, const char *text, size_t n, const oai_logprobs *lp, sbuf *out) {
  (void)lp;
  if (!n) return;
  put_head(v->ctx, out);
  put_text(v->ctx, text, n, out);
  sbuf_puts(out, ",\"done\":false}\n");
}
static void ol_end(const gen_view *v, sbuf *out) {
  put_head(v->ctx, out);
  put_text(v->ctx, "", 0, out);
  put_done(v, out);
  sbuf_puts(out, "}\n");
}
static void ol_error(const gen_view *v, const oai_error *e, sbuf *out) {
  (void)v;
  ollama_render_error(e, out);
  sbuf_puts(out, "\n");
}
static void ol_complete(const gen_view *v, sbuf *out) {
  put_head(v->ctx, out);
  put_text(v->ctx, v->text, v->text_len, out);
  put_done(v, out);
  sbuf_puts(out, "}");
}

static const gen_api ol_api = {
    .stream_ctype = "application/x-ndjson",
    .begin = ol_begin,
    .delta = ol_delta,
    .end = ol_end,
    .error = ol_error,
    .keepalive = NULL, /* NDJSON has no comment line: silence until the next token */
    .complete = ol_complete,
    .ctx_free = free,
    .receipt_endpoint = "ollama",
};

/* The answer Ollama gives to a request with nothing to generate: it only
 * loads the model (done_reason "load"), or unloads it (keep_alive 0). */
static enum MHD_Result load_only(conn *k, struct MHD_Connection *c, const ol_ctx *x, bool unload) {
  sbuf out = {0};
  put_head(x, &out);
  put_text(x, "", 0, &out);
  sbuf_printf(&out, ",\"done_reason\":\"%s\",\"done\":true}", unload ? "unload" : "load");
  return srv_reply_json(k, c, 200, &out);
}

static enum MHD_Result run(conn *k, struct MHD_Connection *c, oai_request *r, ol_ctx *x) {
  oai_resp o;
  x->load_ns = srv_load_ns(k);
  oai_resp_init(&o, r->kind, engine_model_id(srv_engine(k)), engine_model_sha256(srv_engine(k)));
  return srv_generate(k, c, r, &o, &ol_api, x);
}

enum MHD_Result ollama_chat(conn *k, struct MHD_Connection *c) {
  oai_request r;
  oai_error e;
  size_t len;
  const char *body = srv_body(k, &len);
  ol_ctx *x = calloc(1, sizeof *x);
  if (!x) {
    oai_seterr(&e, 500, "internal_error", NULL, "out of memory");
    return srv_reply_error(k, c, &e);
  }
  x->chat = true;
  bool unload;
  if (api_parse_body(body, len, OAI_CHAT, &r, &e)) goto fail;
  json_t *msgs = json_object_get(r.root, "messages");
  if (msgs && !json_is_null(msgs) && !json_is_array(msgs)) {
    oai_seterr(&e, 400, "invalid_type", "messages", "'messages' must be an array");
    goto fail;
  }
  bool nothing = !msgs || json_is_null(msgs) || json_array_size(msgs) == 0;
  if (parse_common(k, c, &r, k_chat_fields, x->model, nothing, &unload, &e)) goto fail;
  if (nothing) {
    enum MHD_Result res = load_only(k, c, x, unload);
    free(x);
    oai_request_free(&r);
    return res;
  }
  size_t i;
  json_t *m;
  json_array_foreach(msgs, i, m) {
    char param[64];
    snprintf(param, sizeof param, "messages[%zu]", i);
    if (!json_is_object(m)) {
      oai_seterr(&e, 400, "invalid_type", param, "'%s' must be an object", param);
      goto fail;
    }
    const char *role, *content;
    char p2[80];
    snprintf(p2, sizeof p2, "%s.role", param);
    if (api_str(m, "role", p2, &role, &e)) goto fail;
    if (!role || (strcmp(role, "system") && strcmp(role, "user") && strcmp(role, "assistant"))) {
      oai_seterr(&e, 400, role && !strcmp(role, "tool") ? "unsupported_tools" : "invalid_value", p2,
                 "'%s' must be system, user or assistant", p2);
      goto fail;
    }
    snprintf(p2, sizeof p2, "%s.images", param);
    if (nonempty(json_object_get(m, "images"))) {
      oai_seterr(&e, 400, "unsupported_images", p2, "images are not supported: this server runs text-only models");
      goto fail;
    }
    snprintf(p2, sizeof p2, "%s.tool_calls", param);
    if (nonempty(json_object_get(m, "tool_calls"))) {
      oai_seterr(&e, 400, "unsupported_tools", p2, "'%s' is not supported yet (no tool calling)", p2);
      goto fail;
    }
    snprintf(p2, sizeof p2, "%s.content", param);
    if (api_str(m, "content", p2, &content, &e)) goto fail;
    if (api_add_message(&r, role, json_string(content ? content : ""), &e)) goto fail;
  }
  return run(k, c, &r, x);
fail:
  free(x);
  oai_request_free(&r);
  return srv_reply_error(k, c, &e);
}

enum MHD_Result ollama_generate(conn *k, struct MHD_Connection *c) {
  oai_request r;
  oai_error e;
  size_t len;
  const char *body = srv_body(k, &len);
  ol_ctx *x = calloc(1, sizeof *x);
  if (!x) {
    oai_seterr(&e, 500, "internal_error", NULL, "out of memory");
    return srv_reply_error(k, c, &e);
  }
  if (api_parse_body(body, len, OAI_CHAT, &r, &e)) goto fail;
  json_t *root = r.root;
  json_t *pj = json_object_get(root, "prompt");
  bool unload, nothing = !pj || json_is_null(pj) || (json_is_string(pj) && !json_string_length(pj));
  if (parse_common(k, c, &r, k_generate_fields, x->model, nothing, &unload, &e)) goto fail;
  static const char *const refused[] = {"images", "suffix", "template", "context", NULL};
  for (int i = 0; refused[i]; i++)
    if (nonempty(json_object_get(root, refused[i]))) {
      oai_seterr(&e, 400, !strcmp(refused[i], "images") ? "unsupported_images" : "unsupported_field", refused[i],
                 !strcmp(refused[i], "images") ? "images are not supported: this server runs text-only models"
                                               : "'%s' is not supported by this server",
                 refused[i]);
      goto fail;
    }
  const char *prompt, *system;
  bool raw = false;
  if (api_str(root, "prompt", "prompt", &prompt, &e) || api_str(root, "system", "system", &system, &e) ||
      api_bool(root, "raw", "raw", &raw, &e))
    goto fail;
  if (!prompt || !*prompt) {
    enum MHD_Result res = load_only(k, c, x, unload);
    free(x);
    oai_request_free(&r);
    return res;
  }
  if (raw) {
    /* The prompt as it is, no template: a text completion. */
    if (system && *system) {
      oai_seterr(&e, 400, "invalid_value", "system", "'system' cannot be used with 'raw' (no template is applied)");
      goto fail;
    }
    r.kind = OAI_COMPLETION;
    r.text = prompt;
    r.text_len = json_string_length(json_object_get(root, "prompt"));
  } else {
    if (system && *system && api_add_message(&r, "system", json_string(system), &e)) goto fail;
    if (api_add_message(&r, "user", json_incref(json_object_get(root, "prompt")), &e)) goto fail;
  }
  return run(k, c, &r, x);
fail:
  free(x);
  oai_request_free(&r);
  return srv_reply_error(k, c, &e);
}

/* ---- embeddings ---------------------------------------------------------- */

typedef struct ol_embed {
  const char *model; /* view */
  bool legacy;       /* /api/embeddings: one "embedding" */
  uint64_t load_ns;  /* time waited for the model to load */
} ol_embed;

static void emb_begin(void *ctx, sbuf *out) {
  ol_embed *x = ctx;
  sbuf_puts(out, x->legacy ? "{\"embedding\":" : "{\"model\":");
  if (!x->legacy) {
    sbuf_json_str(out, x->model, strlen(x->model));
    sbuf_puts(out, ",\"embeddings\":[");
  }
}
static void emb_item(void *ctx, size_t index, const float *vec, int n, sbuf *out) {
  ol_embed *x = ctx;
  if (index && !x->legacy) sbuf_puts(out, ",");
  sbuf_puts(out, "[");
  for (int i = 0; i < n; i++) {
    if (i) sbuf_puts(out, ",");
    sbuf_json_num(out, vec[i]);
  }
  sbuf_puts(out, "]");
}
static void emb_end(void *ctx, long long prompt_tokens, uint64_t t0, uint64_t t_end, const oai_resp *ro, sbuf *out) {
  ol_embed *x = ctx;
  if (!x->legacy)
    sbuf_printf(out, "],\"total_duration\":%llu,\"load_duration\":%llu,\"prompt_eval_count\":%lld",
                (unsigned long long)(t_end - t0), (unsigned long long)x->load_ns, prompt_tokens);
  oai_put_receipt(ro, out);
  sbuf_puts(out, "}");
}
static const embed_api ol_embed_api = {emb_begin, emb_item, emb_end};

static enum MHD_Result embed(conn *k, struct MHD_Connection *c, bool legacy) {
  oai_request r;
  oai_error e;
  size_t len;
  const char *body = srv_body(k, &len);
  if (api_parse_body(body, len, OAI_EMBEDDING, &r, &e)) return srv_reply_error(k, c, &e);
  if (oai_check_fields(r.root, legacy ? k_embeddings_fields : k_embed_fields, &e)) {
    oai_request_free(&r);
    return srv_reply_error(k, c, &e);
  }
  const char *m;
  bool truncate = true;
  long long dims;
  bool has_dims = false;
  const char *key = legacy ? "prompt" : "input";
  json_t *in = json_object_get(r.root, key);
  bool has_keep;
  double keep;
  if (api_str(r.root, "model", "model", &m, &e) || api_keep_alive(k, r.root, &has_keep, &keep, &e) ||
      srv_use_model(k, c, m, false, &e))
    goto fail;
  if (api_bool(r.root, "truncate", "truncate", &truncate, &e)) goto fail;
  if (api_int(r.root, "dimensions", "dimensions", 1, 1 << 20, &dims, &has_dims, &e)) goto fail;
  if (has_dims && dims != engine_n_embd(srv_engine(k))) {
    oai_seterr(&e, 400, "unsupported_dimensions", "dimensions",
               "'dimensions' must be omitted or equal the model's embedding size %d", engine_n_embd(srv_engine(k)));
    goto fail;
  }
  json_t *opts = json_object_get(r.root, "options");
  if (opts && !json_is_null(opts) && (!json_is_object(opts) || json_object_size(opts))) {
    oai_seterr(&e, 400, "unsupported_option", "options", "'options' do not apply to embeddings here; omit them");
    goto fail;
  }
  if (!(r.inputs = json_array())) {
    oai_seterr(&e, 500, "internal_error", NULL, "out of memory");
    goto fail;
  }
  if (json_is_string(in) && json_string_length(in)) {
    json_array_append(r.inputs, in);
  } else if (!legacy && json_is_array(in) && json_array_size(in) > 0 && json_array_size(in) <= OAI_MAX_INPUTS) {
    size_t i;
    json_t *v;
    json_array_foreach(in, i, v) {
      if (!json_is_string(v) || !json_string_length(v)) {
        oai_seterr(&e, 400, "invalid_type", "input", "'input' must be a non-empty string or an array of them");
        goto fail;
      }
      json_array_append(r.inputs, v);
    }
  } else {
    oai_seterr(&e, 400, in ? "invalid_value" : "missing_field", key,
               legacy ? "'prompt' must be a non-empty string"
                      : "'input' must be a non-empty string or an array of at most 2048 of them");
    goto fail;
  }
  ol_embed x = {m, legacy, srv_load_ns(k)};
  return srv_embed(k, c, &r, truncate, &ol_embed_api, &x);
fail:
  oai_request_free(&r);
  return srv_reply_error(k, c, &e);
}

enum MHD_Result ollama_embed(conn *k, struct MHD_Connection *c) { return embed(k, c, false); }
enum MHD_Result ollama_embeddings(conn *k, struct MHD_Connection *c) { return embed(k, c, true); }

/* ---- model listings ------------------------------------------------------ */

/* Ollama names carry a tag; a name without one is "<name>:latest". */
static void put_name(const char *id, sbuf *out) {
  char name[OL_MODEL_MAX + 8];
  snprintf(name, sizeof name, strchr(id, ':') ? "%s" : "%s:latest", id);
  sbuf_puts(out, "\"name\":");
  sbuf_json_str(out, name, strlen(name));
  sbuf_puts(out, ",\"model\":");
  sbuf_json_str(out, name, strlen(name));
}

static void put_time(long long unix_s, const char *key, sbuf *out) {
  time_t t = (time_t)unix_s;
  struct tm tm;
  gmtime_r(&t, &tm);
  char d[40];
  strftime(d, sizeof d, "%Y-%m-%dT%H:%M:%SZ", &tm);
  sbuf_printf(out, ",\"%s\":\"%s\"", key, d);
}

/* What a GGUF-served model can say of itself through the engine. */
static void put_model(conn *k, bool running, sbuf *out) {
  server *s = srv_server(k);
  engine *en = srv_engine(k);
  sbuf_puts(out, "{");
  put_name(engine_model_id(en), out);
  if (!running) put_time(srv_started(s), "modified_at", out);
  sbuf_printf(out, ",\"size\":%llu,\"digest\":\"%s\"", (unsigned long long)engine_model_size(en), engine_model_sha256(en));
  sbuf_puts(out, ",\"details\":{\"parent_model\":\"\",\"format\":\"gguf\",\"family\":\"\",\"families\":null,"
                 "\"parameter_size\":\"\",\"quantization_level\":\"\"}");
  if (running) {
    /* Loaded for the server's life: no expiry to report but a far one. */
    sbuf_printf(out, ",\"expires_at\":\"2999-12-31T23:59:59Z\",\"size_vram\":0,\"context_length\":%d",
                engine_n_ctx(en));
  }
  sbuf_puts(out, "}");
}

enum MHD_Result ollama_tags(conn *k, struct MHD_Connection *c) {
  sbuf out = {0};
  if (srv_store(srv_server(k))) {
    srv_models_render_tags(srv_store(srv_server(k)), &out);
    return srv_reply_json(k, c, 200, &out);
  }
  sbuf_puts(&out, "{\"models\":[");
  put_model(k, false, &out);
  sbuf_puts(&out, "]}");
  return srv_reply_json(k, c, 200, &out);
}

enum MHD_Result ollama_ps(conn *k, struct MHD_Connection *c) {
  sbuf out = {0};
  if (srv_store(srv_server(k))) {
    srv_models_render_ps(srv_store(srv_server(k)), true, &out);
    return srv_reply_json(k, c, 200, &out);
  }
  sbuf_puts(&out, "{\"models\":[");
  put_model(k, true, &out);
  sbuf_puts(&out, "]}");
  return srv_reply_json(k, c, 200, &out);
}

enum MHD_Result ollama_version(conn *k, struct MHD_Connection *c) {
  sbuf out = {0};
  sbuf_printf(&out, "{\"version\":\"%s\"}", pw_version());
  return srv_reply_json(k, c, 200, &out);
}

enum MHD_Result ollama_show(conn *k, struct MHD_Connection *c) {
  server *s = srv_server(k);
  oai_request r;
  oai_error e;
  size_t len;
  const char *body = srv_body(k, &len);
  if (api_parse_body(body, len, OAI_CHAT, &r, &e)) return srv_reply_error(k, c, &e);
  const char *m = NULL, *name = NULL;
  bool verbose = false;
  /* system, template and options would change what Ollama shows (its
   * modelfile and parameters): refused unless empty. */
  static const char *const refused[] = {"system", "template", "options", NULL};
  int rc = oai_check_fields(r.root, k_show_fields, &e);
  for (int i = 0; !rc && refused[i]; i++) {
    json_t *v = json_object_get(r.root, refused[i]);
    if (nonempty(v) && !(json_is_object(v) && !json_object_size(v)))
      rc = oai_seterr(&e, 400, "unsupported_field", refused[i], "'%s' is not supported by /api/show here", refused[i]);
  }
  if (rc || api_str(r.root, "model", "model", &m, &e) || api_str(r.root, "name", "name", &name, &e) ||
      api_bool(r.root, "verbose", "verbose", &verbose, &e) || srv_use_model(k, c, m ? m : name, false, &e)) {
    oai_request_free(&r);
    return srv_reply_error(k, c, &e);
  }
  oai_request_free(&r);
  engine *en = srv_engine(k);
  const prompt_builder *pb = srv_prompt(k);
  sbuf out = {0};
  sbuf_puts(&out, "{\"license\":\"\",\"modelfile\":");
  char mf[OL_MODEL_MAX + 64];
  snprintf(mf, sizeof mf, "FROM %s\n", engine_model_id(en));
  sbuf_json_str(&out, mf, strlen(mf));
  sbuf_puts(&out, ",\"parameters\":\"\",\"template\":");
  const char *t = pb->template_src ? pb->template_src : "";
  sbuf_json_str(&out, t, strlen(t));
  sbuf_puts(&out, ",\"details\":{\"parent_model\":\"\",\"format\":\"gguf\",\"family\":\"\",\"families\":null,"
                  "\"parameter_size\":\"\",\"quantization_level\":\"\"}");
  sbuf_puts(&out, ",\"model_info\":{\"general.name\":");
  sbuf_json_str(&out, engine_model_id(en), strlen(engine_model_id(en)));
  sbuf_printf(&out, ",\"general.file_sha256\":\"%s\",\"power.context_length\":%d,\"power.embedding_length\":%d}",
              engine_model_sha256(en), engine_n_ctx(en), engine_n_embd(en));
  /* an encoder embeds (or, a reranker, scores) but does not generate */
  sbuf_puts(&out, !engine_is_encoder(en)                         ? ",\"capabilities\":[\"completion\",\"embedding\"]"
                  : engine_get_pooling(en) == ENGINE_POOL_RANK ? ",\"capabilities\":[]"
                                                               : ",\"capabilities\":[\"embedding\"]");
  put_time(srv_started(s), "modified_at", &out);
  sbuf_puts(&out, "}");
  return srv_reply_json(k, c, 200, &out);
}
