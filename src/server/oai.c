/* oai.c - OpenAI request validation and response rendering. See oai.h. */
#include "server/oai.h"

#include <errno.h>
#include <math.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

/* ---- errors ---------------------------------------------------------- */

static const char *type_for_status(int status) {
  switch (status) {
  case 401: return "authentication_error";
  case 404: return "invalid_request_error";
  case 408: return "timeout_error";
  case 429:
  case 503: return "server_overloaded";
  case 500: return "server_error";
  default: return "invalid_request_error";
  }
}

int oai_seterr(oai_error *e, int status, const char *code, const char *param, const char *fmt, ...) {
  e->status = status;
  snprintf(e->type, sizeof e->type, "%s", type_for_status(status));
  snprintf(e->code, sizeof e->code, "%s", code ? code : "");
  snprintf(e->param, sizeof e->param, "%s", param ? param : "");
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(e->message, sizeof e->message, fmt, ap);
  va_end(ap);
  return PW_EINVAL;
}

void oai_error_from_prompt(oai_error *e, const prompt_error *pe) {
  switch (pe->status) {
  case PW_ENOMEM:
    oai_seterr(e, 500, "internal_error", NULL, "%s", pe->message);
    break;
  case PW_ETEMPLATE:
    oai_seterr(e, 400, "template_error", pe->param, "%s", pe->message);
    break;
  default:
    oai_seterr(e, 400, "invalid_value", pe->param, "%s", pe->message);
    break;
  }
}

void oai_error_from_status(oai_error *e, int status, const char *message) {
  const char *m = message && *message ? message : pw_strerror(status);
  switch (status) {
  case PW_EBUSY:
    oai_seterr(e, 503, "overloaded", NULL, "server overloaded: %s; retry later", m);
    break;
  case PW_ETIMEOUT:
    oai_seterr(e, 408, "timeout", NULL, "request was not admitted before its deadline: %s", m);
    break;
  case PW_ECONTEXT:
    oai_seterr(e, 400, "context_length_exceeded", "messages", "%s", m);
    break;
  case PW_ELIMIT: /* only mid-stream: the client read too slowly */
    oai_seterr(e, 500, "client_too_slow", NULL, "the client did not keep up with the stream: %s", m);
    break;
  case PW_EINVAL:
  case PW_ERANGE:
    oai_seterr(e, 400, "invalid_value", NULL, "%s", m);
    break;
  case PW_ETEMPLATE:
    oai_seterr(e, 400, "template_error", "messages", "chat template failed: %s", m);
    break;
  case PW_ECANCELED: /* the engine stopped under the request: shutdown */
    oai_seterr(e, 503, "shutting_down", NULL, "the server is shutting down: %s", m);
    break;
  default:
    oai_seterr(e, 500, "internal_error", NULL, "%s", m);
    break;
  }
}

static void put_str_or_null(sbuf *out, const char *s) {
  if (s && *s) sbuf_json_str(out, s, strlen(s));
  else sbuf_puts(out, "null");
}

void oai_render_error(const oai_error *e, sbuf *out) {
  sbuf_puts(out, "{\"error\":{\"message\":");
  sbuf_json_str(out, e->message, strlen(e->message));
  sbuf_puts(out, ",\"type\":");
  sbuf_json_str(out, e->type, strlen(e->type));
  sbuf_puts(out, ",\"param\":");
  put_str_or_null(out, e->param);
  sbuf_puts(out, ",\"code\":");
  put_str_or_null(out, e->code);
  sbuf_puts(out, "}}");
}

/* ---- unknown members ---------------------------------------------------- */

const char *oai_unknown_member(json_t *obj, const char *const *known) {
  const char *key;
  json_t *v;
  json_object_foreach(obj, key, v) {
    if (json_is_null(v)) continue; /* null asks for nothing, as for the known fields */
    bool found = false;
    for (int i = 0; known[i] && !found; i++) found = !strcmp(key, known[i]);
    if (!found) return key;
  }
  return NULL;
}

int oai_unknown_field(oai_error *e, const char *key) {
  return oai_seterr(e, 400, "unknown_field", key,
                    "'%.64s' is not a field of this request: this server refuses the fields it does not know "
                    "rather than ignore them",
                    key);
}

int oai_check_fields(json_t *obj, const char *const *known, oai_error *e) {
  const char *key = oai_unknown_member(obj, known);
  return key ? oai_unknown_field(e, key) : 0;
}

/* ---- field getters ----------------------------------------------------- */

/* Absent and JSON null both mean "not given": clients send null for unset. */
static json_t *field(json_t *root, const char *key) {
  json_t *v = json_object_get(root, key);
  return json_is_null(v) ? NULL : v;
}

static int get_bool(json_t *root, const char *key, bool *out, oai_error *e) {
  json_t *v = field(root, key);
  if (!v) return 0;
  if (!json_is_boolean(v)) return oai_seterr(e, 400, "invalid_type", key, "'%s' must be a boolean", key);
  *out = json_is_true(v);
  return 0;
}

static int get_num(json_t *root, const char *key, double lo, double hi, double *out, bool *given,
                   oai_error *e) {
  json_t *v = field(root, key);
  if (given) *given = v != NULL;
  if (!v) return 0;
  if (!json_is_number(v)) return oai_seterr(e, 400, "invalid_type", key, "'%s' must be a number", key);
  double d = json_number_value(v);
  if (!(d >= lo && d <= hi))
    return oai_seterr(e, 400, "invalid_value", key, "'%s' must be between %g and %g", key, lo, hi);
  *out = d;
  return 0;
}

/* Integers, also written as an integral real (5.0), within [lo, hi]. */
static int int_value(json_t *v, long long lo, long long hi, long long *out) {
  if (json_is_integer(v)) {
    json_int_t x = json_integer_value(v);
    if (x < lo || x > hi) return PW_ERANGE;
    *out = x;
    return 0;
  }
  if (json_is_real(v)) {
    double d = json_real_value(v);
    if (d != floor(d)) return PW_EINVAL;
    /* Only [-2^63, 2^63) converts to long long; (double)INT64_MAX rounds
     * up to 2^63, so comparing against (double)hi would let 2^63 through
     * into an undefined conversion. Bound first, then compare exactly. */
    if (!(d >= -0x1p63 && d < 0x1p63)) return PW_ERANGE;
    long long x = (long long)d;
    if (x < lo || x > hi) return PW_ERANGE;
    *out = x;
    return 0;
  }
  return PW_EINVAL;
}

static int get_int(json_t *root, const char *key, long long lo, long long hi, long long *out, bool *given,
                   oai_error *e) {
  json_t *v = field(root, key);
  if (given) *given = v != NULL;
  if (!v) return 0;
  int rc = int_value(v, lo, hi, out);
  if (rc == PW_ERANGE)
    return oai_seterr(e, 400, "invalid_value", key, "'%s' must be between %lld and %lld", key, lo, hi);
  if (rc) return oai_seterr(e, 400, "invalid_type", key, "'%s' must be an integer", key);
  return 0;
}

/* ---- unsupported fields ------------------------------------------------ */

static int unsupported(oai_error *e, const char *key, const char *why) {
  char code[48];
  snprintf(code, sizeof code, "unsupported_%s", key);
  return oai_seterr(e, 400, code, key, "'%s' is not supported by this server%s", key, why);
}

static int check_nonempty_array_unsupported(json_t *root, const char *key, oai_error *e) {
  json_t *v = field(root, key);
  if (!v) return 0;
  if (json_is_array(v) && json_array_size(v) == 0) return 0;
  return unsupported(e, key, " (the legacy functions API; use 'tools')");
}

/* Fields llama.cpp's server takes that this server does not implement.
 * Clients written for it send them; ignoring them would change what the
 * client gets without telling it, so each is refused by name unless its
 * value is the neutral one (which asks for nothing). */
typedef struct foreign_field {
  const char *name;
  unsigned kinds;  /* 1 << OAI_CHAT | 1 << OAI_COMPLETION */
  int neutral;     /* 0: any value is refused; 1: this number is accepted; 2: this boolean */
  double num;      /* the neutral number, or the neutral boolean (0 / 1) */
} foreign_field;

#define FF_GEN ((1u << OAI_CHAT) | (1u << OAI_COMPLETION))
#define FF_CHAT (1u << OAI_CHAT)
static const foreign_field k_foreign[] = {
    {"chat_template", FF_CHAT, 0, 0},        {"reasoning_format", FF_CHAT, 0, 0},
    {"enable_thinking", FF_CHAT, 0, 0},      {"continue_final_message", FF_CHAT, 2, 0},
    {"add_generation_prompt", FF_CHAT, 2, 1}, {"parse_tool_calls", FF_CHAT, 2, 0},
    {"modalities", FF_CHAT, 0, 0},           {"audio", FF_CHAT, 0, 0},
    {"prediction", FF_CHAT, 0, 0},           {"web_search_options", FF_CHAT, 0, 0},
    {"mirostat", FF_GEN, 1, 0},              {"mirostat_tau", FF_GEN, 0, 0},
    {"mirostat_eta", FF_GEN, 0, 0},          {"typical_p", FF_GEN, 1, 1},
    {"tfs_z", FF_GEN, 1, 1},                 {"top_n_sigma", FF_GEN, 1, -1},
    {"dynatemp_range", FF_GEN, 1, 0},        {"dynatemp_exponent", FF_GEN, 0, 0},
    {"xtc_probability", FF_GEN, 1, 0},       {"xtc_threshold", FF_GEN, 0, 0},
    {"dry_multiplier", FF_GEN, 1, 0},        {"dry_base", FF_GEN, 0, 0},
    {"dry_allowed_length", FF_GEN, 0, 0},    {"dry_penalty_last_n", FF_GEN, 0, 0},
    {"dry_sequence_breakers", FF_GEN, 0, 0}, {"repeat_last_n", FF_GEN, 0, 0},
    {"penalty_last_n", FF_GEN, 0, 0},        {"penalize_nl", FF_GEN, 2, 0},
    {"n_probs", FF_GEN, 1, 0},
    {"n_keep", FF_GEN, 0, 0},                {"min_keep", FF_GEN, 0, 0},
    {"n_indent", FF_GEN, 0, 0},              {"id_slot", FF_GEN, 1, -1},
    {"slot_id", FF_GEN, 1, -1},              {"samplers", FF_GEN, 0, 0},
    {"t_max_predict_ms", FF_GEN, 0, 0},      {"image_data", FF_GEN, 0, 0},
    {"lora", FF_GEN, 0, 0},                  {"return_tokens", FF_GEN, 2, 0},
    {"post_sampling_probs", FF_GEN, 2, 0},   {"timings_per_token", FF_GEN, 2, 0},
    {"response_fields", FF_GEN, 0, 0},       {"json_schema", FF_GEN, 0, 0}, /* response_format is the way */
};

static int check_foreign_fields(oai_kind kind, json_t *root, oai_error *e) {
  for (size_t i = 0; i < sizeof k_foreign / sizeof k_foreign[0]; i++) {
    const foreign_field *f = &k_foreign[i];
    if (!(f->kinds & (1u << kind))) continue;
    json_t *v = field(root, f->name);
    if (!v) continue;
    if (f->neutral == 1 && json_is_number(v) && json_number_value(v) == f->num) continue;
    if (f->neutral == 2 && json_is_boolean(v) && json_is_true(v) == (f->num != 0)) continue;
    return unsupported(e, f->name, " (see the README's list of accepted fields)");
  }
  /* llama.cpp's name for max_tokens: honoured (below) when a number; and
   * cache_prompt, a hint about implicit KV reuse that never changes the
   * output, accepted as a boolean (reuse here is explicit:
   * prompt_cache_key). */
  json_t *cp = field(root, "cache_prompt");
  if (cp && !json_is_boolean(cp))
    return oai_seterr(e, 400, "invalid_type", "cache_prompt", "'cache_prompt' must be a boolean");
  return 0;
}

/* OpenAI's chat fields for stored completions, service tiers, moderation,
 * verbosity and the newer prompt-caching controls: accepted where the
 * value asks for nothing this server does not do (metadata and
 * safety_identifier, like user, never change the answer), else refused by
 * name. */
static int check_chat_service_fields(json_t *root, oai_error *e) {
  bool store = false;
  if (get_bool(root, "store", &store, e)) return PW_EINVAL;
  if (store) return unsupported(e, "store", " (chat completions are not stored; /v1/responses keeps its responses)");
  json_t *md = field(root, "metadata");
  if (md && !json_is_object(md)) return oai_seterr(e, 400, "invalid_type", "metadata", "'metadata' must be an object");
  json_t *si = field(root, "safety_identifier");
  if (si && !json_is_string(si))
    return oai_seterr(e, 400, "invalid_type", "safety_identifier", "'safety_identifier' must be a string");
  json_t *tier = field(root, "service_tier");
  if (tier && !json_is_string(tier))
    return oai_seterr(e, 400, "invalid_type", "service_tier", "'service_tier' must be a string");
  if (tier && strcmp(json_string_value(tier), "auto") && strcmp(json_string_value(tier), "default"))
    return unsupported(e, "service_tier", " (one tier here: only \"auto\" and \"default\")");
  json_t *ret = field(root, "prompt_cache_retention");
  if (ret && !json_is_string(ret))
    return oai_seterr(e, 400, "invalid_type", "prompt_cache_retention", "'prompt_cache_retention' must be a string");
  if (ret && strcmp(json_string_value(ret), "in_memory"))
    return unsupported(e, "prompt_cache_retention", " (only \"in_memory\": the prefix cache lives in memory)");
  static const char *const refused[] = {"moderation", "verbosity", "prompt_cache_options", NULL};
  for (int i = 0; refused[i]; i++) {
    json_t *v = field(root, refused[i]);
    if (v && !(json_is_object(v) && json_object_size(v) == 0)) return unsupported(e, refused[i], "");
  }
  return 0;
}

static int check_common_unsupported(oai_kind kind, json_t *root, oai_error *e) {
  if ((kind == OAI_CHAT || kind == OAI_COMPLETION) && check_foreign_fields(kind, root, e)) return PW_EINVAL;
  if (kind == OAI_CHAT) {
    if (check_chat_service_fields(root, e)) return PW_EINVAL;
    if (check_nonempty_array_unsupported(root, "functions", e)) return PW_EINVAL;
    json_t *fc = field(root, "function_call");
    if (fc && !(json_is_string(fc) && (!strcmp(json_string_value(fc), "none") ||
                                      !strcmp(json_string_value(fc), "auto"))))
      return unsupported(e, "function_call", " (no function calling)");
  } else if (kind == OAI_COMPLETION) {
    json_t *s = field(root, "suffix");
    if (s && !(json_is_string(s) && json_string_length(s) == 0)) return unsupported(e, "suffix", "");
    bool echo = false;
    if (get_bool(root, "echo", &echo, e)) return PW_EINVAL;
    if (echo) return unsupported(e, "echo", "");
    long long best_of = 1;
    if (get_int(root, "best_of", 1, 1LL << 30, &best_of, NULL, e)) return PW_EINVAL;
    if (best_of > 1) return unsupported(e, "best_of", " (only best_of = 1)");
  }
  return 0;
}

/* ---- messages / prompt ------------------------------------------------- */

/* Text of a message's content: a string, or an array of text parts joined
 * by newlines (as llama.cpp does for templates that take plain strings). */
static int message_text(json_t *content, size_t i, json_t **out, oai_error *e) {
  char param[64];
  snprintf(param, sizeof param, "messages[%zu].content", i);
  if (json_is_string(content)) {
    *out = json_incref(content);
    return 0;
  }
  if (!json_is_array(content))
    return oai_seterr(e, 400, "invalid_type", param, "'%s' must be a string or an array of text parts", param);
  sbuf b = {0};
  size_t j;
  json_t *part;
  json_array_foreach(content, j, part) {
    char pp[96];
    snprintf(pp, sizeof pp, "%s[%zu]", param, j);
    json_t *type = json_is_object(part) ? json_object_get(part, "type") : NULL;
    if (!json_is_string(type)) {
      sbuf_free(&b);
      return oai_seterr(e, 400, "invalid_type", pp, "'%s' must be an object with a 'type'", pp);
    }
    if (strcmp(json_string_value(type), "text")) {
      sbuf_free(&b);
      return oai_seterr(e, 400, "unsupported_content_part", pp, "content part type '%.40s' is not supported (text only)",
                        json_string_value(type));
    }
    json_t *t = json_object_get(part, "text");
    if (!json_is_string(t)) {
      sbuf_free(&b);
      return oai_seterr(e, 400, "invalid_type", pp, "'%s.text' must be a string", pp);
    }
    if (j > 0) sbuf_put(&b, "\n", 1);
    sbuf_put(&b, json_string_value(t), json_string_length(t));
  }
  if (b.oom) {
    sbuf_free(&b);
    return oai_seterr(e, 500, "internal_error", NULL, "out of memory");
  }
  *out = json_stringn(b.data ? b.data : "", b.len);
  sbuf_free(&b);
  if (!*out) return oai_seterr(e, 500, "internal_error", NULL, "out of memory");
  return 0;
}

/* The name of the earlier assistant tool call with this id, or NULL. */
static json_t *call_name_for(json_t *msgs, const char *id) {
  for (size_t i = json_array_size(msgs); i-- > 0;) {
    json_t *calls = json_object_get(json_array_get(msgs, i), "tool_calls");
    size_t j;
    json_t *c;
    json_array_foreach(calls, j, c) {
      if (json_is_string(json_object_get(c, "id")) && !strcmp(json_string_value(json_object_get(c, "id")), id))
        return json_object_get(json_object_get(c, "function"), "name");
    }
  }
  return NULL;
}

/* An assistant message's tool_calls, as templates take them: the OpenAI
 * form, with `arguments` (a JSON string in the API) parsed into an object
 * when it holds one, as Hugging Face's templates expect (they print it with
 * tojson or iterate over it). */
static int message_tool_calls(json_t *calls, const char *param, json_t **out, oai_error *e) {
  if (!json_is_array(calls)) return oai_seterr(e, 400, "invalid_type", param, "'%s' must be an array", param);
  if (json_array_size(calls) > TC_MAX_CALLS)
    return oai_seterr(e, 400, "invalid_value", param, "'%s' holds at most %d calls", param, TC_MAX_CALLS);
  json_t *arr = json_array();
  if (!arr) return oai_seterr(e, 500, "internal_error", NULL, "out of memory");
  size_t i;
  json_t *c;
  json_array_foreach(calls, i, c) {
    json_t *fn = json_is_object(c) ? json_object_get(c, "function") : NULL;
    json_t *id = json_is_object(c) ? json_object_get(c, "id") : NULL;
    json_t *type = json_is_object(c) ? json_object_get(c, "type") : NULL;
    json_t *name = json_object_get(fn, "name"), *args = json_object_get(fn, "arguments");
    if (!json_is_object(fn) || !json_is_string(name) || (id && !json_is_string(id)) ||
        (type && !(json_is_string(type) && !strcmp(json_string_value(type), "function"))) ||
        (args && !json_is_string(args) && !json_is_object(args))) {
      json_decref(arr);
      return oai_seterr(e, 400, "invalid_value", param,
                        "'%s[%zu]' must be {\"id\", \"type\": \"function\", \"function\": {\"name\", \"arguments\"}}",
                        param, i);
    }
    json_t *a = NULL;
    if (json_is_string(args)) a = json_loadb(json_string_value(args), json_string_length(args), 0, NULL);
    if (!json_is_object(a)) {
      json_decref(a);
      a = args ? json_incref(args) : json_object();
    }
    json_t *one = json_pack("{s:s,s:{s:O,s:o}}", "type", "function", "function", "name", name, "arguments", a);
    if (one && id) json_object_set(one, "id", id);
    if (!one || json_array_append_new(arr, one)) {
      json_decref(arr);
      return oai_seterr(e, 500, "internal_error", NULL, "out of memory");
    }
  }
  *out = arr;
  return 0;
}

static int parse_messages(json_t *root, oai_request *r, oai_error *e) {
  json_t *msgs = field(root, "messages");
  if (!msgs) return oai_seterr(e, 400, "missing_field", "messages", "'messages' is required");
  if (!json_is_array(msgs)) return oai_seterr(e, 400, "invalid_type", "messages", "'messages' must be an array");
  if (json_array_size(msgs) == 0)
    return oai_seterr(e, 400, "invalid_value", "messages", "'messages' must not be empty");
  r->messages = json_array();
  if (!r->messages) return oai_seterr(e, 500, "internal_error", NULL, "out of memory");
  size_t i;
  json_t *m;
  json_array_foreach(msgs, i, m) {
    char param[64];
    snprintf(param, sizeof param, "messages[%zu]", i);
    if (!json_is_object(m)) return oai_seterr(e, 400, "invalid_type", param, "'%s' must be an object", param);
    json_t *role = json_object_get(m, "role");
    snprintf(param, sizeof param, "messages[%zu].role", i);
    if (!role) return oai_seterr(e, 400, "missing_field", param, "'%s' is required", param);
    if (!json_is_string(role)) return oai_seterr(e, 400, "invalid_type", param, "'%s' must be a string", param);
    const char *rs = json_string_value(role);
    if (!strcmp(rs, "function"))
      return oai_seterr(e, 400, "unsupported_function_role", param, "'function' role messages (the legacy functions API) are not supported; use 'tool'");
    if (strcmp(rs, "system") && strcmp(rs, "user") && strcmp(rs, "assistant") && strcmp(rs, "developer") &&
        strcmp(rs, "tool"))
      return oai_seterr(e, 400, "invalid_value", param, "'%s' must be system, developer, user, assistant or tool", param);
    json_t *content = field(m, "content");
    json_t *text = NULL;
    json_t *calls = field(m, "tool_calls");
    if (!content) {
      if (strcmp(rs, "assistant")) {
        snprintf(param, sizeof param, "messages[%zu].content", i);
        return oai_seterr(e, 400, "missing_field", param, "'%s' is required", param);
      }
      text = json_string("");
    } else if (message_text(content, i, &text, e)) {
      return PW_EINVAL;
    }
    /* Templates know system/user/assistant; "developer" is OpenAI's newer
     * name for system instructions. */
    json_t *out = json_pack("{s:s,s:o}", "role", strcmp(rs, "developer") ? rs : "system", "content", text);
    if (!out || json_array_append_new(r->messages, out))
      return oai_seterr(e, 500, "internal_error", NULL, "out of memory");
    if (calls && (!json_is_array(calls) || json_array_size(calls) > 0)) {
      snprintf(param, sizeof param, "messages[%zu].tool_calls", i);
      if (strcmp(rs, "assistant"))
        return oai_seterr(e, 400, "invalid_value", param, "'%s' is only allowed on assistant messages", param);
      json_t *tc = NULL;
      if (message_tool_calls(calls, param, &tc, e)) return PW_EINVAL;
      json_object_set_new(out, "tool_calls", tc);
    }
    json_t *rc = field(m, "reasoning_content");
    if (rc && !strcmp(rs, "assistant")) {
      snprintf(param, sizeof param, "messages[%zu].reasoning_content", i);
      if (!json_is_string(rc)) return oai_seterr(e, 400, "invalid_type", param, "'%s' must be a string", param);
      json_object_set(out, "reasoning_content", rc);
    }
    if (!strcmp(rs, "tool")) {
      json_t *id = field(m, "tool_call_id");
      snprintf(param, sizeof param, "messages[%zu].tool_call_id", i);
      if (!id) return oai_seterr(e, 400, "missing_field", param, "'%s' is required", param);
      if (!json_is_string(id) || json_string_length(id) == 0 || json_string_length(id) > 256)
        return oai_seterr(e, 400, "invalid_type", param, "'%s' must be a string of 1..256 bytes", param);
      json_object_set(out, "tool_call_id", id);
      /* The tool's name, as some templates print it: given, or that of the
       * call with this id. */
      json_t *nm = field(m, "name");
      if (nm && !json_is_string(nm)) {
        snprintf(param, sizeof param, "messages[%zu].name", i);
        return oai_seterr(e, 400, "invalid_type", param, "'%s' must be a string", param);
      }
      if (!nm) nm = call_name_for(r->messages, json_string_value(id));
      if (nm) json_object_set(out, "name", nm);
    }
  }
  return 0;
}

/* Token ids of a JSON array; param names the field for errors. */
static int parse_ids(json_t *arr, const char *param, int32_t **out, int *n_out, oai_error *e) {
  size_t n = json_array_size(arr);
  if (n > OAI_MAX_TOKENS_IN)
    return oai_seterr(e, 400, "invalid_value", param, "'%s' has more than %d tokens", param, OAI_MAX_TOKENS_IN);
  int32_t *ids = malloc((n ? n : 1) * sizeof *ids);
  if (!ids) return oai_seterr(e, 500, "internal_error", NULL, "out of memory");
  for (size_t i = 0; i < n; i++) {
    long long x;
    if (int_value(json_array_get(arr, i), 0, INT32_MAX, &x)) {
      free(ids);
      return oai_seterr(e, 400, "invalid_type", param, "'%s' must hold non-negative integer token ids", param);
    }
    ids[i] = (int32_t)x;
  }
  *out = ids;
  *n_out = (int)n;
  return 0;
}

static bool all_ints(json_t *arr) {
  size_t i;
  json_t *v;
  json_array_foreach(arr, i, v) if (!json_is_integer(v)) return false;
  return true;
}

static int parse_prompt(json_t *root, oai_request *r, oai_error *e) {
  json_t *p = field(root, "prompt");
  if (!p) return oai_seterr(e, 400, "missing_field", "prompt", "'prompt' is required");
  if (json_is_string(p)) {
    r->text = json_string_value(p);
    r->text_len = json_string_length(p);
    return 0;
  }
  if (!json_is_array(p))
    return oai_seterr(e, 400, "invalid_type", "prompt", "'prompt' must be a string or an array of token ids");
  if (json_array_size(p) == 0) return oai_seterr(e, 400, "invalid_value", "prompt", "'prompt' must not be empty");
  if (all_ints(p)) return parse_ids(p, "prompt", &r->tokens, &r->n_tokens, e);
  if (json_array_size(p) > 1) {
    /* Several prompts: strings and/or arrays of token ids, one choice (or
     * n) each; the server tokenizes and checks them one at a time. */
    if (json_array_size(p) > OAI_MAX_CHOICES)
      return oai_seterr(e, 400, "invalid_value", "prompt", "'prompt' holds at most %d prompts", OAI_MAX_CHOICES);
    size_t i;
    json_t *v;
    json_array_foreach(p, i, v) {
      bool ok = (json_is_string(v) && json_string_length(v) > 0) ||
                (json_is_array(v) && json_array_size(v) > 0 && json_array_size(v) <= OAI_MAX_TOKENS_IN && all_ints(v));
      if (ok && json_is_array(v)) {
        size_t j;
        json_t *t;
        json_array_foreach(v, j, t) if (json_integer_value(t) < 0 || json_integer_value(t) > INT32_MAX) ok = false;
      }
      if (!ok)
        return oai_seterr(e, 400, "invalid_type", "prompt",
                          "'prompt' items must be non-empty strings or arrays of non-negative token ids");
    }
    r->prompts = json_incref(p);
    return 0;
  }
  json_t *one = json_array_get(p, 0);
  if (json_is_string(one)) {
    r->text = json_string_value(one);
    r->text_len = json_string_length(one);
    return 0;
  }
  if (json_is_array(one) && json_array_size(one) > 0 && all_ints(one))
    return parse_ids(one, "prompt", &r->tokens, &r->n_tokens, e);
  return oai_seterr(e, 400, "invalid_type", "prompt", "'prompt' must be a string or an array of token ids");
}

/* ---- sampling ---------------------------------------------------------- */

static int parse_stop(json_t *root, oai_request *r, oai_error *e) {
  json_t *s = field(root, "stop");
  if (!s) return 0;
  if (json_is_string(s)) {
    if (json_string_length(s) == 0) return 0;
    if (json_string_length(s) >= ENGINE_MAX_STOP_LEN)
      return oai_seterr(e, 400, "invalid_value", "stop", "'stop' strings must be shorter than %d bytes", ENGINE_MAX_STOP_LEN);
    r->stop[r->n_stop++] = json_string_value(s);
    return 0;
  }
  if (!json_is_array(s)) return oai_seterr(e, 400, "invalid_type", "stop", "'stop' must be a string or an array of strings");
  if (json_array_size(s) > ENGINE_MAX_STOP)
    return oai_seterr(e, 400, "invalid_value", "stop", "'stop' holds at most %d strings", ENGINE_MAX_STOP);
  size_t i;
  json_t *v;
  json_array_foreach(s, i, v) {
    if (!json_is_string(v)) return oai_seterr(e, 400, "invalid_type", "stop", "'stop' must be a string or an array of strings");
    if (json_string_length(v) >= ENGINE_MAX_STOP_LEN)
      return oai_seterr(e, 400, "invalid_value", "stop", "'stop' strings must be shorter than %d bytes", ENGINE_MAX_STOP_LEN);
    if (json_string_length(v) == 0) continue; /* an empty stop string would end every request at once */
    r->stop[r->n_stop++] = json_string_value(v);
  }
  return 0;
}

static int parse_logit_bias(json_t *root, oai_request *r, oai_error *e) {
  json_t *lb = field(root, "logit_bias");
  if (!lb) return 0;
  if (!json_is_object(lb))
    return oai_seterr(e, 400, "invalid_type", "logit_bias", "'logit_bias' must be an object of token id to bias");
  size_t n = json_object_size(lb);
  if (n > 4096) return oai_seterr(e, 400, "invalid_value", "logit_bias", "'logit_bias' holds at most 4096 entries");
  if (n == 0) return 0;
  r->logit_bias = calloc(n, sizeof *r->logit_bias);
  if (!r->logit_bias) return oai_seterr(e, 500, "internal_error", NULL, "out of memory");
  const char *key;
  json_t *v;
  int k = 0;
  json_object_foreach(lb, key, v) {
    char *end;
    errno = 0;
    long id = strtol(key, &end, 10);
    if (!*key || *end || errno || id < 0 || id > INT32_MAX)
      return oai_seterr(e, 400, "invalid_value", "logit_bias", "'logit_bias' keys must be token ids, got '%.32s'", key);
    if (!json_is_number(v))
      return oai_seterr(e, 400, "invalid_type", "logit_bias", "'logit_bias' values must be numbers");
    double b = json_number_value(v);
    if (!(b >= -100 && b <= 100))
      return oai_seterr(e, 400, "invalid_value", "logit_bias", "'logit_bias' values must be between -100 and 100");
    r->logit_bias[k].token = (int32_t)id;
    r->logit_bias[k].bias = (float)b;
    k++;
  }
  r->sampling.logit_bias = r->logit_bias;
  r->sampling.n_logit_bias = k;
  return 0;
}

/* Seeds of requests without one come from OpenSSL's CSPRNG (the receipt
 * records them, so the answer can still be replayed); getrandom and then
 * the clock only if it fails. */
static uint64_t random_u64(void) {
  uint64_t x = 0;
  if (RAND_bytes((unsigned char *)&x, sizeof x) != 1 && getrandom(&x, sizeof x, 0) != (ssize_t)sizeof x) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    x = (uint64_t)ts.tv_nsec * 0x9E3779B97F4A7C15ull ^ (uint64_t)ts.tv_sec;
  }
  return x;
}

/* Decodes the UTF-8 code point at s[i] (valid UTF-8, as jansson guarantees)
 * and returns its length in bytes. */
static int utf8_at(const unsigned char *s, size_t i, uint32_t *cp) {
  unsigned char c = s[i];
  if (c < 0x80) return *cp = c, 1;
  if (c < 0xE0) return *cp = (uint32_t)(c & 0x1F) << 6 | (s[i + 1] & 0x3F), 2;
  if (c < 0xF0) return *cp = (uint32_t)(c & 0x0F) << 12 | (uint32_t)(s[i + 1] & 0x3F) << 6 | (s[i + 2] & 0x3F), 3;
  *cp = (uint32_t)(c & 0x07) << 18 | (uint32_t)(s[i + 1] & 0x3F) << 12 | (uint32_t)(s[i + 2] & 0x3F) << 6 |
        (s[i + 3] & 0x3F);
  return 4;
}

/* Unicode White_Space (the property, not just ASCII). */
static bool is_uspace(uint32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

/* C0, DEL and C1 controls. */
static bool is_control(uint32_t c) { return c < 0x20 || (c >= 0x7F && c <= 0x9F); }

/* prompt_cache_key: 1..OAI_CACHE_KEY_MAX bytes of UTF-8 without control
 * characters or surrounding white space. The key is a client-chosen handle,
 * so the messages never echo it. */
static int parse_cache_key(json_t *root, oai_request *r, oai_error *e) {
  static const char *k = "prompt_cache_key", *code = "invalid_prompt_cache_key";
  json_t *v = field(root, k);
  if (!v) return 0;
  if (!json_is_string(v)) return oai_seterr(e, 400, code, k, "'%s' must be a string", k);
  size_t n = json_string_length(v);
  const unsigned char *s = (const unsigned char *)json_string_value(v);
  if (n == 0) return oai_seterr(e, 400, code, k, "'%s' must not be empty", k);
  if (n > OAI_CACHE_KEY_MAX)
    return oai_seterr(e, 400, code, k, "'%s' must be at most %d bytes (got %zu)", k, OAI_CACHE_KEY_MAX, n);
  uint32_t cp = 0;
  for (size_t i = 0; i < n;) {
    int len = utf8_at(s, i, &cp);
    if (is_control(cp)) return oai_seterr(e, 400, code, k, "'%s' must not contain control characters", k);
    if (i == 0 && is_uspace(cp))
      return oai_seterr(e, 400, code, k, "'%s' must not start or end with white space", k);
    i += (size_t)len;
  }
  if (is_uspace(cp)) return oai_seterr(e, 400, code, k, "'%s' must not start or end with white space", k);
  r->cache_key = (const char *)s;
  r->cache_key_len = n;
  return 0;
}

/* Constrained output: response_format {type: text | json_object |
 * json_schema} or llama.cpp's `grammar` (GBNF text), compiled here so a
 * bad schema or grammar is a 400 naming the problem. */
static int parse_constraint(json_t *root, oai_request *r, oai_error *e) {
  json_t *rf = field(root, "response_format"), *gr = field(root, "grammar");
  char err[PW_ERRMAX];
  if (gr) {
    if (!json_is_string(gr)) return oai_seterr(e, 400, "invalid_type", "grammar", "'grammar' must be a string (GBNF)");
    if (rf && !(json_is_object(rf) && json_is_string(json_object_get(rf, "type")) &&
                !strcmp(json_string_value(json_object_get(rf, "type")), "text")))
      return oai_seterr(e, 400, "invalid_value", "grammar", "'grammar' and 'response_format' cannot both constrain the output");
    if (json_string_length(gr) == 0) return 0; /* llama.cpp: empty = none */
    if (grammar_parse(json_string_value(gr), json_string_length(gr), &r->grammar, err) < 0)
      return oai_seterr(e, 400, "invalid_grammar", "grammar", "%s", err);
    return 0;
  }
  if (!rf) return 0;
  if (!json_is_object(rf)) return oai_seterr(e, 400, "invalid_type", "response_format", "'response_format' must be an object");
  json_t *t = json_object_get(rf, "type");
  if (!json_is_string(t))
    return oai_seterr(e, 400, "invalid_type", "response_format.type", "'response_format.type' must be a string");
  const char *ts = json_string_value(t);
  if (!strcmp(ts, "text")) return 0;
  if (!strcmp(ts, "json_object")) {
    const char *g = grammar_json_object_gbnf();
    if (grammar_parse(g, strlen(g), &r->grammar, err) < 0) return oai_seterr(e, 500, "internal_error", NULL, "%s", err);
    return 0;
  }
  if (strcmp(ts, "json_schema"))
    return oai_seterr(e, 400, "invalid_value", "response_format.type",
                      "'response_format.type' must be text, json_object or json_schema");
  json_t *js = json_object_get(rf, "json_schema");
  if (!json_is_object(js))
    return oai_seterr(e, 400, "missing_field", "response_format.json_schema",
                      "'response_format.json_schema' must be an object with a 'schema'");
  json_t *name = json_object_get(js, "name"), *strict = json_object_get(js, "strict");
  if (name && !json_is_string(name))
    return oai_seterr(e, 400, "invalid_type", "response_format.json_schema.name", "'response_format.json_schema.name' must be a string");
  if (strict && !json_is_boolean(strict) && !json_is_null(strict))
    return oai_seterr(e, 400, "invalid_type", "response_format.json_schema.strict", "'response_format.json_schema.strict' must be a boolean");
  json_t *schema = json_object_get(js, "schema");
  /* Whether strict or not, the output follows the schema exactly. */
  if (!schema) schema = json_object(); /* OpenAI: no schema = any JSON value */
  else json_incref(schema);
  char *txt = schema ? json_dumps(schema, JSON_ENCODE_ANY | JSON_COMPACT) : NULL;
  json_decref(schema);
  if (!txt) return oai_seterr(e, 500, "internal_error", NULL, "out of memory");
  char bad[64];
  int rc = grammar_from_schema(txt, strlen(txt), &r->grammar, bad, err);
  free(txt);
  if (rc == PW_EUNSUPPORTED && bad[0])
    return oai_seterr(e, 400, "unsupported_schema_keyword", "response_format.json_schema.schema", "%s", err);
  if (rc < 0)
    return oai_seterr(e, 400, "invalid_schema", "response_format.json_schema.schema", "%s", err);
  return 0;
}

bool oai_valid_tool_name(const char *s, size_t n) {
  if (n == 0 || n > TC_MAX_NAME) return false;
  for (size_t i = 0; i < n; i++)
    if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') || (s[i] >= '0' && s[i] <= '9') ||
          s[i] == '_' || s[i] == '-' || s[i] == '.'))
      return false;
  return true;
}

int oai_check_function(json_t *fn, const char *param, const char *where, oai_error *e) {
  json_t *name = json_object_get(fn, "name"), *params = json_object_get(fn, "parameters");
  json_t *desc = json_object_get(fn, "description");
  if (!json_is_string(name) || !oai_valid_tool_name(json_string_value(name), json_string_length(name)))
    return oai_seterr(e, 400, "invalid_value", param,
                      "'%s.name' must be 1..%d characters of a-z, A-Z, 0-9, '_', '-' and '.'", where, TC_MAX_NAME);
  if (desc && !json_is_string(desc) && !json_is_null(desc))
    return oai_seterr(e, 400, "invalid_type", param, "'%s.description' must be a string", where);
  if (params && !json_is_object(params) && !json_is_null(params))
    return oai_seterr(e, 400, "invalid_type", param, "'%s.parameters' must be a JSON Schema object", where);
  return 0;
}

json_t *oai_find_tool(json_t *tools, size_t n, const char *name) {
  size_t i;
  json_t *tool;
  json_array_foreach(tools, i, tool) {
    if (i >= n) break;
    json_t *tn = json_object_get(json_object_get(tool, "function"), "name");
    if (!strcmp(json_string_value(tn), name)) return tn;
  }
  return NULL;
}

int oai_convert_tools(json_t *tools, oai_tool_fn one, json_t **out, oai_error *e) {
  *out = NULL;
  json_t *arr = json_array();
  if (!arr) return oai_seterr(e, 500, "internal_error", NULL, "out of memory");
  size_t i;
  json_t *tool;
  json_array_foreach(tools, i, tool) {
    if (one(tool, i, arr, e)) {
      json_decref(arr);
      return PW_EINVAL;
    }
  }
  if (json_array_size(arr)) *out = arr;
  else json_decref(arr);
  return 0;
}

/* tools, tool_choice, parallel_tool_calls, reasoning_effort and
 * chat_template_kwargs: validated here; what the model's template makes of
 * them is oai_chat_prepare's. */
static int parse_tools(json_t *root, oai_request *r, oai_error *e) {
  r->tool_choice = OAI_TOOLS_AUTO;
  r->parallel_tool_calls = true;
  if (get_bool(root, "parallel_tool_calls", &r->parallel_tool_calls, e)) return PW_EINVAL;
  json_t *t = field(root, "tools");
  if (t) {
    if (!json_is_array(t)) return oai_seterr(e, 400, "invalid_type", "tools", "'tools' must be an array");
    if (json_array_size(t) > TC_MAX_TOOLS)
      return oai_seterr(e, 400, "invalid_value", "tools", "'tools' holds at most %d tools", TC_MAX_TOOLS);
    size_t i;
    json_t *tool;
    json_array_foreach(t, i, tool) {
      char param[64];
      snprintf(param, sizeof param, "tools[%zu]", i);
      json_t *type = json_is_object(tool) ? json_object_get(tool, "type") : NULL;
      json_t *fn = json_is_object(tool) ? json_object_get(tool, "function") : NULL;
      if (!json_is_string(type) || strcmp(json_string_value(type), "function") || !json_is_object(fn))
        return oai_seterr(e, 400, "invalid_value", param, "'%s' must be {\"type\": \"function\", \"function\": {...}}", param);
      char where[80];
      snprintf(where, sizeof where, "%s.function", param);
      if (oai_check_function(fn, param, where, e)) return PW_EINVAL;
      json_t *name = json_object_get(fn, "name");
      if (oai_find_tool(t, i, json_string_value(name)))
        return oai_seterr(e, 400, "invalid_value", param, "tool name '%s' is given twice", json_string_value(name));
    }
    if (json_array_size(t)) r->tools = json_incref(t);
  }
  json_t *tc = field(root, "tool_choice");
  if (tc) {
    if (json_is_string(tc)) {
      const char *v = json_string_value(tc);
      if (!strcmp(v, "none")) r->tool_choice = OAI_TOOLS_NONE;
      else if (!strcmp(v, "auto")) r->tool_choice = OAI_TOOLS_AUTO;
      else if (!strcmp(v, "required")) r->tool_choice = OAI_TOOLS_REQUIRED;
      else return oai_seterr(e, 400, "invalid_value", "tool_choice", "'tool_choice' must be none, auto, required or a function");
    } else {
      json_t *fn = json_is_object(tc) ? json_object_get(tc, "function") : NULL;
      json_t *type = json_is_object(tc) ? json_object_get(tc, "type") : NULL;
      json_t *name = json_object_get(fn, "name");
      if (!json_is_string(type) || strcmp(json_string_value(type), "function") || !json_is_string(name))
        return oai_seterr(e, 400, "invalid_value", "tool_choice",
                          "'tool_choice' must be none, auto, required or {\"type\": \"function\", \"function\": {\"name\": ...}}");
      r->tool_choice = OAI_TOOLS_NAMED;
      r->tool_name = json_string_value(name);
      if (!oai_find_tool(r->tools, SIZE_MAX, r->tool_name))
        return oai_seterr(e, 400, "invalid_value", "tool_choice", "'tool_choice' names '%.64s', which is not in 'tools'",
                          r->tool_name);
    }
    if (!r->tools && (r->tool_choice == OAI_TOOLS_REQUIRED || r->tool_choice == OAI_TOOLS_NAMED))
      return oai_seterr(e, 400, "invalid_value", "tool_choice", "'tool_choice' required or a function needs 'tools'");
  }
  json_t *re = field(root, "reasoning_effort");
  if (re) {
    const char *v = json_is_string(re) ? json_string_value(re) : "";
    if (strcmp(v, "minimal") && strcmp(v, "low") && strcmp(v, "medium") && strcmp(v, "high"))
      return oai_seterr(e, 400, "invalid_value", "reasoning_effort", "'reasoning_effort' must be minimal, low, medium or high");
    r->reasoning_effort = v;
  }
  json_t *kw = field(root, "chat_template_kwargs");
  if (kw) {
    static const char *const reserved[] = {"messages", "tools", "add_generation_prompt", "bos_token", "eos_token", NULL};
    if (!json_is_object(kw))
      return oai_seterr(e, 400, "invalid_type", "chat_template_kwargs", "'chat_template_kwargs' must be an object");
    if (json_object_size(kw) > 64)
      return oai_seterr(e, 400, "invalid_value", "chat_template_kwargs", "'chat_template_kwargs' holds at most 64 keys");
    for (int i = 0; reserved[i]; i++)
      if (json_object_get(kw, reserved[i]))
        return oai_seterr(e, 400, "invalid_value", "chat_template_kwargs",
                          "'chat_template_kwargs' must not set '%s' (the request gives it)", reserved[i]);
    r->template_kwargs = kw;
  }
  return 0;
}

int oai_chat_prepare(oai_request *r, const tc_syntax *sx, oai_error *e) {
  if (r->kind != OAI_CHAT) return 0;
  if (!(r->tpl_vars = json_object())) return oai_seterr(e, 500, "internal_error", NULL, "out of memory");
  if (r->template_kwargs && json_object_update(r->tpl_vars, r->template_kwargs))
    return oai_seterr(e, 500, "internal_error", NULL, "out of memory");
  if (r->reasoning_effort) {
    if (!sx->reasoning_effort)
      return oai_seterr(e, 400, "unsupported_reasoning_effort", "reasoning_effort",
                        "'reasoning_effort' is not supported: the model's chat template does not take it");
    json_object_set_new(r->tpl_vars, "reasoning_effort", json_string(r->reasoning_effort));
  }
  if (!r->tools || r->tool_choice == OAI_TOOLS_NONE) return 0;
  if (sx->format == TC_NONE)
    return oai_seterr(e, 400, "unsupported_tools", "tools",
                      "'tools' is not supported for this model: its chat template has no tool-call format this server "
                      "recognizes (hermes/qwen <tool_call>, qwen3-coder, llama3, mistral, devstral, granite, gpt-oss)");
  if (r->grammar)
    return oai_seterr(e, 400, "invalid_value", "response_format",
                      "'response_format' and 'grammar' cannot be combined with 'tools'");
  json_object_set(r->tpl_vars, "tools", r->tools);
  bool lazy = r->tool_choice == OAI_TOOLS_AUTO;
  char err[PW_ERRMAX] = "", bad[64] = "";
  int rc = 0;
  if (!(lazy && sx->format == TC_HARMONY))
    rc = tc_grammar(sx, r->tools, r->tool_choice == OAI_TOOLS_NAMED ? r->tool_name : NULL, r->parallel_tool_calls,
                    lazy, &r->grammar, bad, err);
  if (rc == PW_EUNSUPPORTED && bad[0])
    return oai_seterr(e, 400, "unsupported_schema_keyword", "tools", "tool parameters: %s", err);
  if (rc == PW_EUNSUPPORTED && lazy) rc = 0; /* auto: the calls are parsed, not constrained */
  if (rc == PW_EUNSUPPORTED)
    return oai_seterr(e, 400, "unsupported_tool_choice", "tool_choice",
                      "'tool_choice' required or a function is not supported for this model: %s", err);
  if (rc == PW_ENOMEM) return oai_seterr(e, 500, "internal_error", NULL, "out of memory");
  if (rc < 0) return oai_seterr(e, 400, "invalid_schema", "tools", "tool parameters: %s", err);
  r->tools_active = true;
  r->render_special = sx->special_markers;
  r->bare_call = !lazy && !sx->open_is_text;
  return 0;
}

static int parse_generation(oai_kind kind, json_t *root, oai_request *r, oai_error *e) {
  pw_sampler_params *sp = &r->sampling;
  pw_sampler_params_default(sp);
  double d;
  long long x;
  bool given;
  if (get_num(root, "temperature", 0, 2, &d, &given, e)) return PW_EINVAL;
  if (given) sp->temperature = (float)d;
  if (get_num(root, "top_p", 0, 1, &d, &given, e)) return PW_EINVAL;
  if (given) sp->top_p = d > 0 ? (float)d : 1e-9f; /* top_p 0 keeps just the best token */
  if (get_int(root, "top_k", -1, 1 << 30, &x, &given, e)) return PW_EINVAL;
  if (given) sp->top_k = (int32_t)x;
  if (get_num(root, "min_p", 0, 1, &d, &given, e)) return PW_EINVAL;
  if (given) sp->min_p = (float)d;
  if (get_num(root, "presence_penalty", -2, 2, &d, &given, e)) return PW_EINVAL;
  if (given) sp->presence_penalty = (float)d;
  if (get_num(root, "frequency_penalty", -2, 2, &d, &given, e)) return PW_EINVAL;
  if (given) sp->frequency_penalty = (float)d;
  if (get_num(root, "repeat_penalty", 0, 10, &d, &given, e)) return PW_EINVAL;
  if (given) {
    if (d <= 0) return oai_seterr(e, 400, "invalid_value", "repeat_penalty", "'repeat_penalty' must be > 0");
    sp->repeat_penalty = (float)d;
  }
  if (get_int(root, "seed", INT64_MIN, INT64_MAX, &x, &r->seed_given, e)) return PW_EINVAL;
  sp->seed = r->seed_given ? (uint64_t)x : random_u64();
  /* llama.cpp's ignore_eos: end-of-generation tokens are generated as any
   * other until max_tokens (or the context) ends the answer */
  if (get_bool(root, "ignore_eos", &r->ignore_eos, e)) return PW_EINVAL;

  long long mt = 0, mct = 0;
  bool has_mt, has_mct;
  if (get_int(root, "max_tokens", 1, 1 << 30, &mt, &has_mt, e)) return PW_EINVAL;
  if (get_int(root, "max_completion_tokens", 1, 1 << 30, &mct, &has_mct, e)) return PW_EINVAL;
  long long np = 0;
  bool has_np;
  /* llama.cpp's n_predict: -1 means "until the context ends", as omitting max_tokens does. */
  if (get_int(root, "n_predict", -1, 1 << 30, &np, &has_np, e)) return PW_EINVAL;
  if (has_np && np == 0) return oai_seterr(e, 400, "invalid_value", "n_predict", "'n_predict' must be -1 or positive");
  r->max_tokens = has_mct ? (int)mct : has_mt ? (int)mt : has_np && np > 0 ? (int)np : 0;

  long long n = 1;
  size_t n_prompts = r->prompts ? json_array_size(r->prompts) : 1;
  if (get_int(root, "n", 1, OAI_MAX_CHOICES, &n, NULL, e)) return PW_EINVAL;
  if ((size_t)n * n_prompts > OAI_MAX_CHOICES)
    return oai_seterr(e, 400, "invalid_value", "n", "'n' times the number of prompts must be at most %d",
                      OAI_MAX_CHOICES);
  r->n_choices = (int)n;

  if (get_bool(root, "stream", &r->stream, e)) return PW_EINVAL;

  json_t *so = field(root, "stream_options");
  if (so) {
    if (!json_is_object(so))
      return oai_seterr(e, 400, "invalid_type", "stream_options", "'stream_options' must be an object");
    json_t *iu = field(so, "include_usage");
    if (iu && !json_is_boolean(iu))
      return oai_seterr(e, 400, "invalid_type", "stream_options.include_usage", "'stream_options.include_usage' must be a boolean");
    r->include_usage = iu && json_is_true(iu);
  }

  if (kind == OAI_CHAT) {
    if (get_bool(root, "logprobs", &r->logprobs, e)) return PW_EINVAL;
    if (get_int(root, "top_logprobs", 0, PW_SAMPLE_MAX_PROBS, &x, &given, e)) return PW_EINVAL;
    if (given) {
      if (x > 0 && !r->logprobs)
        return oai_seterr(e, 400, "invalid_value", "top_logprobs", "'top_logprobs' needs 'logprobs': true");
      r->top_logprobs = (int)x;
    }
  } else {
    json_t *lp = field(root, "logprobs");
    if (lp && json_is_boolean(lp)) { /* some clients send the chat form here */
      r->logprobs = json_is_true(lp);
    } else {
      if (get_int(root, "logprobs", 0, PW_SAMPLE_MAX_PROBS, &x, &given, e)) return PW_EINVAL;
      if (given) {
        r->logprobs = true;
        r->top_logprobs = (int)x;
      }
    }
  }
  sp->n_probs = r->top_logprobs;

  json_t *user = field(root, "user");
  if (user && !json_is_string(user)) return oai_seterr(e, 400, "invalid_type", "user", "'user' must be a string");
  if (parse_stop(root, r, e)) return PW_EINVAL;
  if (parse_logit_bias(root, r, e)) return PW_EINVAL;
  if (parse_cache_key(root, r, e)) return PW_EINVAL;
  if (parse_constraint(root, r, e)) return PW_EINVAL;
  if (kind == OAI_CHAT && parse_tools(root, r, e)) return PW_EINVAL;
  return 0;
}

/* ---- embeddings / tokenize --------------------------------------------- */

static int parse_embedding(json_t *root, oai_request *r, oai_error *e) {
  json_t *in = field(root, "input");
  if (!in) return oai_seterr(e, 400, "missing_field", "input", "'input' is required");
  r->inputs = json_array();
  if (!r->inputs) return oai_seterr(e, 500, "internal_error", NULL, "out of memory");
  if (json_is_string(in)) {
    if (json_string_length(in) == 0) return oai_seterr(e, 400, "invalid_value", "input", "'input' must not be empty");
    json_array_append(r->inputs, in);
  } else if (json_is_array(in)) {
    size_t n = json_array_size(in);
    if (n == 0) return oai_seterr(e, 400, "invalid_value", "input", "'input' must not be empty");
    if (all_ints(in)) {
      json_array_append(r->inputs, in);
    } else {
      if (n > OAI_MAX_INPUTS)
        return oai_seterr(e, 400, "invalid_value", "input", "'input' holds at most %d items", OAI_MAX_INPUTS);
      size_t i;
      json_t *v;
      json_array_foreach(in, i, v) {
        bool ok = (json_is_string(v) && json_string_length(v) > 0) ||
                  (json_is_array(v) && json_array_size(v) > 0 && all_ints(v));
        if (!ok)
          return oai_seterr(e, 400, "invalid_type", "input",
                            "'input' items must be non-empty strings or arrays of token ids");
        json_array_append(r->inputs, v);
      }
    }
  } else {
    return oai_seterr(e, 400, "invalid_type", "input", "'input' must be a string or an array of strings");
  }
  /* Token arrays are checked once here so the server can trust them. */
  size_t i;
  json_t *v;
  json_array_foreach(r->inputs, i, v) {
    if (!json_is_array(v)) continue;
    size_t j;
    json_t *t;
    if (json_array_size(v) > OAI_MAX_TOKENS_IN)
      return oai_seterr(e, 400, "invalid_value", "input", "'input' has more than %d tokens", OAI_MAX_TOKENS_IN);
    json_array_foreach(v, j, t) {
      if (json_integer_value(t) < 0 || json_integer_value(t) > INT32_MAX)
        return oai_seterr(e, 400, "invalid_value", "input", "'input' token ids must be non-negative");
    }
  }
  json_t *fmt = field(root, "encoding_format");
  if (fmt) {
    if (!json_is_string(fmt))
      return oai_seterr(e, 400, "invalid_type", "encoding_format", "'encoding_format' must be a string");
    if (!strcmp(json_string_value(fmt), "base64")) r->base64 = true;
    else if (strcmp(json_string_value(fmt), "float"))
      return oai_seterr(e, 400, "invalid_value", "encoding_format", "'encoding_format' must be float or base64");
  }
  long long dim;
  bool given;
  if (get_int(root, "dimensions", 1, 1 << 20, &dim, &given, e)) return PW_EINVAL;
  if (given) r->dimensions = (int)dim;
  json_t *user = field(root, "user");
  if (user && !json_is_string(user)) return oai_seterr(e, 400, "invalid_type", "user", "'user' must be a string");
  return 0;
}

static int parse_tokenize(json_t *root, oai_request *r, oai_error *e) {
  json_t *c = field(root, "content");
  if (!c) return oai_seterr(e, 400, "missing_field", "content", "'content' is required");
  if (!json_is_string(c)) return oai_seterr(e, 400, "invalid_type", "content", "'content' must be a string");
  r->text = json_string_value(c);
  r->text_len = json_string_length(c);
  r->parse_special = true;
  if (get_bool(root, "add_special", &r->add_special, e)) return PW_EINVAL;
  if (get_bool(root, "parse_special", &r->parse_special, e)) return PW_EINVAL;
  if (get_bool(root, "with_pieces", &r->with_pieces, e)) return PW_EINVAL;
  return 0;
}

static int parse_detokenize(json_t *root, oai_request *r, oai_error *e) {
  json_t *t = field(root, "tokens");
  if (!t) return oai_seterr(e, 400, "missing_field", "tokens", "'tokens' is required");
  if (!json_is_array(t)) return oai_seterr(e, 400, "invalid_type", "tokens", "'tokens' must be an array of token ids");
  return parse_ids(t, "tokens", &r->tokens, &r->n_tokens, e);
}

/* ---- parse ------------------------------------------------------------- */

/* The top-level members of each request: every name the parsers above
 * read, honoured or refused by name (server.c reads keep_alive through
 * api_keep_alive, and model to choose the model). Chat and completions
 * also take the llama.cpp fields of k_foreign for their kind. A member
 * outside these is 400 unknown_field: keep each list in step with its
 * parser. */
static const char *const k_chat_fields[] = {
    "model", "keep_alive", "messages",
    /* parse_generation */
    "temperature", "top_p", "top_k", "min_p", "presence_penalty", "frequency_penalty", "repeat_penalty", "seed",
    "ignore_eos", "max_tokens", "max_completion_tokens", "n_predict", "n", "stream", "stream_options", "logprobs",
    "top_logprobs", "user", "stop", "logit_bias", "prompt_cache_key", "response_format", "grammar",
    /* parse_tools */
    "tools", "tool_choice", "parallel_tool_calls", "reasoning_effort", "chat_template_kwargs",
    /* check_foreign_fields, check_common_unsupported, check_chat_service_fields */
    "cache_prompt", "functions", "function_call", "store", "metadata", "safety_identifier", "service_tier",
    "prompt_cache_retention", "moderation", "verbosity", "prompt_cache_options", NULL};
static const char *const k_completion_fields[] = {
    "model", "keep_alive", "prompt",
    /* parse_generation */
    "temperature", "top_p", "top_k", "min_p", "presence_penalty", "frequency_penalty", "repeat_penalty", "seed",
    "ignore_eos", "max_tokens", "max_completion_tokens", "n_predict", "n", "stream", "stream_options", "logprobs",
    "user", "stop", "logit_bias", "prompt_cache_key", "response_format", "grammar",
    /* check_foreign_fields, check_common_unsupported */
    "cache_prompt", "suffix", "echo", "best_of", NULL};
static const char *const k_embedding_fields[] = {"model", "keep_alive", "input", "encoding_format", "dimensions",
                                                 "user", NULL};
static const char *const k_tokenize_fields[] = {"model", "content", "add_special", "parse_special", "with_pieces",
                                                NULL};
static const char *const k_detokenize_fields[] = {"model", "tokens", NULL};

const char *const *oai_fields(oai_kind kind) {
  switch (kind) {
  case OAI_CHAT: return k_chat_fields;
  case OAI_COMPLETION: return k_completion_fields;
  case OAI_EMBEDDING: return k_embedding_fields;
  case OAI_TOKENIZE: return k_tokenize_fields;
  case OAI_DETOKENIZE: return k_detokenize_fields;
  }
  return NULL;
}

static bool known_member(oai_kind kind, const char *key) {
  const char *const *names = oai_fields(kind);
  for (int i = 0; names && names[i]; i++)
    if (!strcmp(key, names[i])) return true;
  for (size_t i = 0; i < sizeof k_foreign / sizeof k_foreign[0]; i++)
    if ((k_foreign[i].kinds & (1u << kind)) && !strcmp(key, k_foreign[i].name)) return true;
  return false;
}

static int check_members(oai_kind kind, json_t *root, oai_error *e) {
  const char *key;
  json_t *v;
  json_object_foreach(root, key, v) {
    if (!json_is_null(v) && !known_member(kind, key)) return oai_unknown_field(e, key);
  }
  return 0;
}

int oai_parse(oai_kind kind, const char *body, size_t len, oai_request *r, oai_error *e) {
  memset(r, 0, sizeof *r);
  r->kind = kind;
  json_error_t je;
  /* jansson validates UTF-8 (invalid bytes and lone surrogates fail),
   * rejects \u0000, bounds nesting depth and rejects out-of-range numbers:
   * all become 400 here. Duplicate keys are allowed (last one wins). */
  r->root = json_loadb(body ? body : "", len, 0, &je);
  if (!r->root) {
    oai_seterr(e, 400, "invalid_json", NULL, "malformed JSON body: %s (at byte %d)", je.text, je.position);
    return PW_EINVAL;
  }
  if (!json_is_object(r->root)) {
    oai_seterr(e, 400, "invalid_json", NULL, "the request body must be a JSON object");
    goto fail;
  }
  if (!oai_fields(kind)) {
    oai_seterr(e, 500, "internal_error", NULL, "unknown request kind");
    goto fail;
  }
  if (check_members(kind, r->root, e)) goto fail;
  /* Every endpoint names its model the same way (serving the store, it
   * chooses one; tokenize and detokenize too). */
  json_t *m = field(r->root, "model");
  if (m && !json_is_string(m)) {
    oai_seterr(e, 400, "invalid_type", "model", "'model' must be a string");
    goto fail;
  }
  r->model = m ? json_string_value(m) : NULL;
  int rc = 0;
  switch (kind) {
  case OAI_CHAT:
    rc = check_common_unsupported(kind, r->root, e);
    if (!rc) rc = parse_messages(r->root, r, e);
    if (!rc) rc = parse_generation(kind, r->root, r, e);
    break;
  case OAI_COMPLETION:
    rc = check_common_unsupported(kind, r->root, e);
    if (!rc) rc = parse_prompt(r->root, r, e);
    if (!rc) rc = parse_generation(kind, r->root, r, e);
    break;
  case OAI_EMBEDDING: rc = parse_embedding(r->root, r, e); break;
  case OAI_TOKENIZE: rc = parse_tokenize(r->root, r, e); break;
  case OAI_DETOKENIZE: rc = parse_detokenize(r->root, r, e); break;
  default: rc = oai_seterr(e, 500, "internal_error", NULL, "unknown request kind");
  }
  if (rc) goto fail;
  return 0;
fail:
  oai_request_free(r);
  return PW_EINVAL;
}

void oai_request_free(oai_request *r) {
  if (!r) return;
  json_decref(r->root);
  json_decref(r->messages);
  json_decref(r->inputs);
  json_decref(r->tools);
  json_decref(r->tpl_vars);
  json_decref(r->prompts);
  grammar_destroy(r->grammar);
  free(r->tokens);
  free(r->logit_bias);
  memset(r, 0, sizeof *r);
}

void oai_engine_params(const oai_request *r, const int32_t *prompt, int n_prompt, engine_params *p) {
  memset(p, 0, sizeof *p);
  p->prompt = prompt;
  p->n_prompt = n_prompt;
  p->max_tokens = r->max_tokens;
  p->sampling = r->sampling;
  for (int i = 0; i < r->n_stop; i++) p->stop[i] = r->stop[i];
  p->n_stop = r->n_stop;
  p->ignore_eos = r->ignore_eos;
  p->want_logprobs = r->logprobs;
  p->n_logprobs = r->logprobs ? r->top_logprobs : 0;
  p->embedding = r->kind == OAI_EMBEDDING;
  p->grammar = r->grammar; /* engine_submit takes its own reference */
  p->render_special = r->render_special;
}

int oai_digest_parts(const oai_part *parts, int n, uint8_t out[32]) {
  EVP_MD_CTX *ctx = EVP_MD_CTX_new();
  if (!ctx) return PW_ENOMEM;
  int ok = EVP_DigestInit_ex(ctx, EVP_sha256(), NULL);
  for (int i = 0; ok && i < n; i++) {
    uint64_t len = parts[i].len;
    unsigned char le[8];
    for (int b = 0; b < 8; b++) le[b] = (unsigned char)(len >> (8 * b));
    ok = EVP_DigestUpdate(ctx, le, sizeof le) && (len == 0 || EVP_DigestUpdate(ctx, parts[i].data, parts[i].len));
  }
  unsigned int dl = 0;
  if (ok) ok = EVP_DigestFinal_ex(ctx, out, &dl) && dl == 32;
  EVP_MD_CTX_free(ctx);
  return ok ? 0 : PW_EINTERNAL;
}

int oai_cache_scope(const void *tenant, size_t tenant_len, oai_kind kind, const char *model, const char *key,
                    size_t key_len, uint8_t out[32]) {
  const char *ep = kind == OAI_CHAT ? "chat" : "completions";
  if (!model) model = "";
  oai_part parts[4] = {{tenant, tenant_len}, {ep, strlen(ep)}, {model, strlen(model)}, {key, key_len}};
  return oai_digest_parts(parts, 4, out);
}

int oai_parse_timeout(const char *v, double *out_s) {
  if (!v || !*v) return PW_EINVAL;
  char *end;
  errno = 0;
  double d = strtod(v, &end);
  while (*end == ' ' || *end == '\t') end++;
  if (*end || errno || !(d > 0 && d <= 86400)) return PW_EINVAL;
  *out_s = d;
  return 0;
}

/* ---- responses --------------------------------------------------------- */

void oai_new_id(const char *prefix, char *out, size_t cap) {
  static const char k_alnum[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  if (!cap) return;
  unsigned char rnd[24];
  if (getrandom(rnd, sizeof rnd, 0) != (ssize_t)sizeof rnd) {
    uint64_t x = random_u64();
    for (size_t i = 0; i < sizeof rnd; i++) rnd[i] = (unsigned char)(x >> (8 * (i % 8))) ^ (unsigned char)(i * 37);
  }
  int n = snprintf(out, cap, "%s", prefix);
  if (n < 0 || (size_t)n >= cap) return;
  size_t i = 0;
  for (; i < sizeof rnd && (size_t)n + i + 1 < cap; i++) out[(size_t)n + i] = k_alnum[rnd[i] % (sizeof k_alnum - 1)];
  out[(size_t)n + i] = 0;
}

void oai_resp_init(oai_resp *o, oai_kind kind, const char *model, const char *sha) {
  memset(o, 0, sizeof *o);
  o->kind = kind;
  o->model = model ? model : "";
  o->created = (long long)time(NULL);
  oai_new_id(kind == OAI_CHAT ? "chatcmpl-" : "cmpl-", o->id, sizeof o->id);
  if (sha && strlen(sha) >= 10) snprintf(o->fingerprint, sizeof o->fingerprint, "fp_%.10s", sha);
  else snprintf(o->fingerprint, sizeof o->fingerprint, "fp_unknown");
}

const char *oai_finish_str(engine_finish f) { return f == ENGINE_FINISH_LENGTH ? "length" : "stop"; }

void oai_put_head(const oai_resp *o, bool chunk, sbuf *out) {
  sbuf_puts(out, "{\"id\":");
  sbuf_json_str(out, o->id, strlen(o->id));
  sbuf_puts(out, ",\"object\":");
  sbuf_puts(out, o->kind == OAI_CHAT ? (chunk ? "\"chat.completion.chunk\"" : "\"chat.completion\"")
                                    : "\"text_completion\"");
  sbuf_printf(out, ",\"created\":%lld,\"model\":", o->created);
  sbuf_json_str(out, o->model, strlen(o->model));
  sbuf_puts(out, ",\"system_fingerprint\":");
  sbuf_json_str(out, o->fingerprint, strlen(o->fingerprint));
}

void oai_render_usage(const engine_usage *u, sbuf *out) {
  sbuf_printf(out,
              "{\"prompt_tokens\":%d,\"completion_tokens\":%d,\"total_tokens\":%d,"
              "\"prompt_tokens_details\":{\"cached_tokens\":%d}}",
              u->prompt_tokens, u->completion_tokens, u->prompt_tokens + u->completion_tokens, u->cached_tokens);
}

void oai_render_speculation(const char *mode, const engine_usage *u, sbuf *out) {
  sbuf_puts(out, "{\"mode\":");
  sbuf_json_str(out, mode, strlen(mode));
  sbuf_printf(out, ",\"drafted\":%d,\"accepted\":%d,\"emitted\":%d,\"target_passes\":%d}", u->spec_drafted,
              u->spec_accepted, u->spec_emitted, u->target_passes);
}

static void put_speculation(const oai_resp *o, const engine_usage *u, sbuf *out) {
  if (!o->spec_mode) return;
  sbuf_puts(out, ",\"speculation\":");
  oai_render_speculation(o->spec_mode, u, out);
}

void oai_put_receipt(const oai_resp *o, sbuf *out) {
  if (!o->receipt) return;
  sbuf_puts(out, ",\"receipt\":");
  sbuf_puts(out, o->receipt);
  sbuf_puts(out, ",\"receipt_sha256\":");
  sbuf_json_str(out, o->receipt_sha256, strlen(o->receipt_sha256));
  if (o->timings) {
    sbuf_puts(out, ",\"timings\":");
    sbuf_puts(out, o->timings);
  }
}

void oai_sse_role(const oai_resp *o, sbuf *out) {
  sbuf_puts(out, "data: ");
  oai_put_head(o, true, out);
  sbuf_printf(out,
              ",\"choices\":[{\"index\":%d,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},"
              "\"logprobs\":null,\"finish_reason\":null}]}\n\n",
              o->index);
}

/* The opening of choices[o->index] up to and including its logprobs: chat puts the
 * text in `content` of the object opened by chat_open (delta or message),
 * completions in `text`. */
static void put_choice_body(const oai_resp *o, const char *chat_open, const char *text, size_t n,
                            const oai_logprobs *lp, sbuf *out);

static void put_choice_text(const oai_resp *o, const char *chat_open, const char *text, size_t n,
                            const oai_logprobs *lp, sbuf *out) {
  sbuf_printf(out, ",\"choices\":[{\"index\":%d,", o->index);
  put_choice_body(o, chat_open, text, n, lp, out);
}

/* A choice after its "index": the message (chat) or text, and logprobs. */
static void put_choice_body(const oai_resp *o, const char *chat_open, const char *text, size_t n,
                            const oai_logprobs *lp, sbuf *out) {
  if (o->kind == OAI_CHAT) {
    sbuf_puts(out, chat_open);
    sbuf_puts(out, "\"content\":");
    sbuf_json_str(out, text, n);
    sbuf_puts(out, "},\"logprobs\":");
  } else {
    sbuf_puts(out, "\"text\":");
    sbuf_json_str(out, text, n);
    sbuf_puts(out, ",\"logprobs\":");
  }
  if (lp) oai_logprobs_render(lp, out);
  else sbuf_puts(out, "null");
}

void oai_sse_delta(const oai_resp *o, const char *text, size_t n, const oai_logprobs *lp, sbuf *out) {
  sbuf_puts(out, "data: ");
  oai_put_head(o, true, out);
  put_choice_text(o, "\"delta\":{", text, n, lp, out);
  sbuf_puts(out, ",\"finish_reason\":null}]}\n\n");
}

void oai_sse_finish(const oai_resp *o, engine_finish f, sbuf *out) { oai_sse_finish_reason(o, oai_finish_str(f), out); }

void oai_sse_finish_reason(const oai_resp *o, const char *reason, sbuf *out) {
  sbuf_puts(out, "data: ");
  oai_put_head(o, true, out);
  if (o->kind == OAI_CHAT) sbuf_printf(out, ",\"choices\":[{\"index\":%d,\"delta\":{},", o->index);
  else sbuf_printf(out, ",\"choices\":[{\"index\":%d,\"text\":\"\",", o->index);
  sbuf_printf(out, "\"logprobs\":null,\"finish_reason\":\"%s\"}]", reason);
  oai_put_receipt(o, out);
  sbuf_puts(out, "}\n\n");
}

void oai_sse_usage(const oai_resp *o, const engine_usage *u, sbuf *out) {
  sbuf_puts(out, "data: ");
  oai_put_head(o, true, out);
  sbuf_puts(out, ",\"choices\":[],\"usage\":");
  oai_render_usage(u, out);
  put_speculation(o, u, out);
  oai_put_receipt(o, out);
  sbuf_puts(out, "}\n\n");
}

void oai_sse_error(const oai_error *e, sbuf *out) {
  sbuf_puts(out, "data: ");
  oai_render_error(e, out);
  sbuf_puts(out, "\n\n");
}

void oai_sse_done(sbuf *out) { sbuf_puts(out, "data: [DONE]\n\n"); }

void oai_sse_keepalive(sbuf *out) { sbuf_puts(out, ": keep-alive\n\n"); }

void oai_render_completion(const oai_resp *o, const char *text, size_t n, const oai_logprobs *lp,
                           engine_finish f, const engine_usage *u, sbuf *out) {
  oai_put_head(o, false, out);
  put_choice_text(o, "\"message\":{\"role\":\"assistant\",", text, n, lp, out);
  sbuf_printf(out, ",\"finish_reason\":\"%s\"}],\"usage\":", oai_finish_str(f));
  oai_render_usage(u, out);
  put_speculation(o, u, out);
  oai_put_receipt(o, out);
  sbuf_puts(out, "}");
}

void oai_render_completion_choices(const oai_resp *o, const oai_choice *c, int n, const engine_usage *u,
                                   sbuf *out) {
  oai_put_head(o, false, out);
  sbuf_puts(out, ",\"choices\":[");
  for (int i = 0; i < n; i++) {
    sbuf_printf(out, "%s{\"index\":%d,", i ? "," : "", i);
    put_choice_body(o, "\"message\":{\"role\":\"assistant\",", c[i].text ? c[i].text : "", c[i].len, c[i].lp, out);
    sbuf_printf(out, ",\"finish_reason\":\"%s\"}", oai_finish_str(c[i].finish));
  }
  sbuf_puts(out, "],\"usage\":");
  oai_render_usage(u, out);
  put_speculation(o, u, out);
  sbuf_puts(out, "}");
}

void oai_render_model(const char *id, long long created, sbuf *out) {
  sbuf_puts(out, "{\"id\":");
  sbuf_json_str(out, id, strlen(id));
  sbuf_printf(out, ",\"object\":\"model\",\"created\":%lld,\"owned_by\":\"power\"}", created);
}

void oai_render_model_list(const char *id, long long created, sbuf *out) {
  sbuf_puts(out, "{\"object\":\"list\",\"data\":[");
  oai_render_model(id, created, out);
  sbuf_puts(out, "]}");
}

void oai_render_health(bool ok, sbuf *out) {
  sbuf_puts(out, ok ? "{\"status\":\"ok\"}" : "{\"status\":\"shutting_down\"}");
}

static void put_base64(sbuf *b, const unsigned char *p, size_t n) {
  static const char k[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  sbuf_put(b, "\"", 1);
  for (size_t i = 0; i < n; i += 3) {
    unsigned v = (unsigned)p[i] << 16 | (i + 1 < n ? (unsigned)p[i + 1] << 8 : 0) | (i + 2 < n ? p[i + 2] : 0);
    char q[4] = {k[v >> 18 & 63], k[v >> 12 & 63], i + 1 < n ? k[v >> 6 & 63] : '=', i + 2 < n ? k[v & 63] : '='};
    sbuf_put(b, q, 4);
  }
  sbuf_put(b, "\"", 1);
}

void oai_render_embeddings_begin(sbuf *out) { sbuf_puts(out, "{\"object\":\"list\",\"data\":["); }

void oai_render_embedding(size_t index, const float *vec, int n, bool base64, sbuf *out) {
  sbuf_printf(out, "%s{\"object\":\"embedding\",\"index\":%zu,\"embedding\":", index ? "," : "", index);
  if (base64) {
    put_base64(out, (const unsigned char *)vec, (size_t)n * sizeof(float));
  } else {
    sbuf_put(out, "[", 1);
    for (int j = 0; j < n; j++) {
      if (j) sbuf_put(out, ",", 1);
      sbuf_json_num(out, vec[j]);
    }
    sbuf_put(out, "]", 1);
  }
  sbuf_put(out, "}", 1);
}

void oai_render_embeddings_end(const char *model, long long prompt_tokens, const oai_resp *ro, sbuf *out) {
  sbuf_puts(out, "],\"model\":");
  sbuf_json_str(out, model, strlen(model));
  sbuf_printf(out, ",\"usage\":{\"prompt_tokens\":%lld,\"total_tokens\":%lld}", prompt_tokens, prompt_tokens);
  if (ro) oai_put_receipt(ro, out);
  sbuf_put(out, "}", 1);
}

void oai_render_receipt_key(const char *pem, const char *fingerprint, sbuf *out) {
  sbuf_puts(out, "{\"alg\":\"ed25519\",\"public_key_pem\":");
  sbuf_json_str(out, pem, strlen(pem));
  sbuf_puts(out, ",\"key_sha256\":");
  sbuf_json_str(out, fingerprint, strlen(fingerprint));
  sbuf_put(out, "}", 1);
}

void oai_render_tokens(const int32_t *ids, int n, oai_piece_fn piece, void *ctx, sbuf *out) {
  sbuf_puts(out, "{\"tokens\":[");
  for (int i = 0; i < n; i++) {
    if (i) sbuf_put(out, ",", 1);
    if (piece) {
      char buf[256];
      int pn = piece(ctx, ids[i], buf, (int)sizeof buf);
      sbuf_printf(out, "{\"id\":%d,\"piece\":", ids[i]);
      sbuf_json_str(out, buf, (size_t)(pn > 0 ? pn : 0));
      sbuf_put(out, "}", 1);
    } else {
      sbuf_printf(out, "%d", ids[i]);
    }
  }
  sbuf_puts(out, "]}");
}

void oai_render_content(const char *text, size_t n, sbuf *out) {
  sbuf_puts(out, "{\"content\":");
  sbuf_json_str(out, text, n);
  sbuf_puts(out, "}");
}

/* ---- logprobs ---------------------------------------------------------- */

void oai_logprobs_reset(oai_logprobs *l, oai_kind kind) {
  l->kind = kind;
  l->n = 0;
  l->text_offset = 0;
  sbuf_clear(&l->a);
  sbuf_clear(&l->b);
  sbuf_clear(&l->c);
  sbuf_clear(&l->d);
}

void oai_logprobs_free(oai_logprobs *l) {
  if (!l) return;
  sbuf_free(&l->a);
  sbuf_free(&l->b);
  sbuf_free(&l->c);
  sbuf_free(&l->d);
}

static void put_bytes(sbuf *out, const char *s, int n) {
  sbuf_put(out, "[", 1);
  for (int i = 0; i < n; i++) sbuf_printf(out, i ? ",%u" : "%u", (unsigned)(unsigned char)s[i]);
  sbuf_put(out, "]", 1);
}

void oai_logprobs_add(oai_logprobs *l, oai_piece_fn piece, void *ctx, int32_t token, float logprob,
                      const pw_logprob *top, int n_top, size_t text_len) {
  char buf[256];
  int n = piece(ctx, token, buf, (int)sizeof buf);
  if (n < 0) n = 0;
  if (n > (int)sizeof buf) n = (int)sizeof buf;
  if (l->kind == OAI_CHAT) {
    sbuf *a = &l->a;
    if (l->n) sbuf_put(a, ",", 1);
    sbuf_puts(a, "{\"token\":");
    sbuf_json_str(a, buf, (size_t)n);
    sbuf_puts(a, ",\"logprob\":");
    sbuf_json_num(a, logprob);
    sbuf_puts(a, ",\"bytes\":");
    put_bytes(a, buf, n);
    sbuf_puts(a, ",\"top_logprobs\":[");
    for (int i = 0; i < n_top; i++) {
      char tb[256];
      int tn = piece(ctx, top[i].token, tb, (int)sizeof tb);
      if (tn < 0) tn = 0;
      if (tn > (int)sizeof tb) tn = (int)sizeof tb;
      sbuf_puts(a, i ? ",{\"token\":" : "{\"token\":");
      sbuf_json_str(a, tb, (size_t)tn);
      sbuf_puts(a, ",\"logprob\":");
      sbuf_json_num(a, top[i].logprob);
      sbuf_puts(a, ",\"bytes\":");
      put_bytes(a, tb, tn);
      sbuf_puts(a, "}");
    }
    sbuf_puts(a, "]}");
  } else {
    const char *sep = l->n ? "," : "";
    sbuf_puts(&l->a, sep);
    sbuf_json_str(&l->a, buf, (size_t)n);
    sbuf_puts(&l->b, sep);
    sbuf_json_num(&l->b, logprob);
    sbuf_puts(&l->c, sep);
    sbuf_puts(&l->c, "{");
    for (int i = 0; i < n_top; i++) {
      char tb[256];
      int tn = piece(ctx, top[i].token, tb, (int)sizeof tb);
      if (tn < 0) tn = 0;
      if (tn > (int)sizeof tb) tn = (int)sizeof tb;
      if (i) sbuf_puts(&l->c, ",");
      sbuf_json_str(&l->c, tb, (size_t)tn);
      sbuf_puts(&l->c, ":");
      sbuf_json_num(&l->c, top[i].logprob);
    }
    sbuf_puts(&l->c, "}");
    sbuf_printf(&l->d, "%s%zu", sep, l->text_offset);
  }
  l->text_offset += text_len;
  l->n++;
}

static void put_buf(sbuf *out, const sbuf *b) { sbuf_put(out, b->data ? b->data : "", b->len); }

void oai_logprobs_render(const oai_logprobs *l, sbuf *out) {
  if (l->kind == OAI_CHAT) {
    sbuf_puts(out, "{\"content\":[");
    put_buf(out, &l->a);
    sbuf_puts(out, "]}");
    return;
  }
  sbuf_puts(out, "{\"tokens\":[");
  put_buf(out, &l->a);
  sbuf_puts(out, "],\"token_logprobs\":[");
  put_buf(out, &l->b);
  sbuf_puts(out, "],\"top_logprobs\":[");
  put_buf(out, &l->c);
  sbuf_puts(out, "],\"text_offset\":[");
  put_buf(out, &l->d);
  sbuf_puts(out, "]}");
}
