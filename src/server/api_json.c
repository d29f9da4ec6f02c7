/* api_json.c - request-reading helpers shared by the API adapters
 * (api_ollama.c, api_anthropic.c, api_responses.c): typed, range-checked
 * members, stop lists, grammars from JSON schemas, message lists in the
 * form the prompt path takes. See api.h.
 *
 * What it is not: the OpenAI parser (oai.c keeps its own, with its own
 * error codes), or a renderer. */
#include "server/api.h"

#include "base/error.h"

#include <math.h>
#include <openssl/rand.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

static json_t *member(json_t *obj, const char *key) {
  json_t *v = json_object_get(obj, key);
  return v && !json_is_null(v) ? v : NULL;
}

int api_num(json_t *obj, const char *key, const char *param, double lo, double hi, double *out, bool *given,
            oai_error *e) {
  json_t *v = member(obj, key);
  if (given) *given = v != NULL;
  if (!v) return 0;
  if (!json_is_number(v)) return oai_seterr(e, 400, "invalid_type", param, "'%s' must be a number", param);
  double d = json_number_value(v);
  if (!(d >= lo && d <= hi))
    return oai_seterr(e, 400, "invalid_value", param, "'%s' must be between %g and %g", param, lo, hi);
  *out = d;
  return 0;
}

int api_int(json_t *obj, const char *key, const char *param, long long lo, long long hi, long long *out, bool *given,
            oai_error *e) {
  json_t *v = member(obj, key);
  if (given) *given = v != NULL;
  if (!v) return 0;
  long long x;
  if (json_is_integer(v)) {
    x = json_integer_value(v);
  } else if (json_is_real(v) && floor(json_real_value(v)) == json_real_value(v) && fabs(json_real_value(v)) < 9e15) {
    x = (long long)json_real_value(v);
  } else {
    return oai_seterr(e, 400, "invalid_type", param, "'%s' must be an integer", param);
  }
  if (x < lo || x > hi)
    return oai_seterr(e, 400, "invalid_value", param, "'%s' must be between %lld and %lld", param, lo, hi);
  *out = x;
  return 0;
}

int api_bool(json_t *obj, const char *key, const char *param, bool *out, oai_error *e) {
  json_t *v = member(obj, key);
  if (!v) return 0;
  if (!json_is_boolean(v)) return oai_seterr(e, 400, "invalid_type", param, "'%s' must be a boolean", param);
  *out = json_is_true(v);
  return 0;
}

int api_str(json_t *obj, const char *key, const char *param, const char **out, oai_error *e) {
  json_t *v = member(obj, key);
  *out = NULL;
  if (!v) return 0;
  if (!json_is_string(v)) return oai_seterr(e, 400, "invalid_type", param, "'%s' must be a string", param);
  *out = json_string_value(v);
  return 0;
}

static int add_stop(json_t *v, const char *param, oai_request *r, oai_error *e) {
  if (!json_is_string(v)) return oai_seterr(e, 400, "invalid_type", param, "'%s' must hold strings", param);
  if (json_string_length(v) >= ENGINE_MAX_STOP_LEN)
    return oai_seterr(e, 400, "invalid_value", param, "'%s' strings must be shorter than %d bytes", param,
                      ENGINE_MAX_STOP_LEN);
  if (json_string_length(v) == 0) return 0; /* an empty stop string would end every answer at once */
  if (r->n_stop == ENGINE_MAX_STOP)
    return oai_seterr(e, 400, "invalid_value", param, "'%s' holds at most %d strings", param, ENGINE_MAX_STOP);
  r->stop[r->n_stop++] = json_string_value(v);
  return 0;
}

int api_stops(json_t *v, const char *param, oai_request *r, oai_error *e) {
  if (!v || json_is_null(v)) return 0;
  if (json_is_string(v)) return add_stop(v, param, r, e);
  if (!json_is_array(v)) return oai_seterr(e, 400, "invalid_type", param, "'%s' must be an array of strings", param);
  size_t i;
  json_t *x;
  json_array_foreach(v, i, x) if (add_stop(x, param, r, e)) return PW_EINVAL;
  return 0;
}

int api_schema_grammar(json_t *schema, const char *param, grammar **out, oai_error *e) {
  char err[PW_ERRMAX], bad[64] = "";
  char *txt = json_dumps(schema, JSON_ENCODE_ANY | JSON_COMPACT);
  if (!txt) return oai_seterr(e, 500, "internal_error", NULL, "out of memory");
  int rc = grammar_from_schema(txt, strlen(txt), out, bad, err);
  free(txt);
  if (rc == PW_EUNSUPPORTED && bad[0]) return oai_seterr(e, 400, "unsupported_schema_keyword", param, "%s", err);
  if (rc < 0) return oai_seterr(e, 400, "invalid_schema", param, "%s", err);
  return 0;
}

int api_json_grammar(grammar **out, oai_error *e) {
  char err[PW_ERRMAX];
  const char *g = grammar_json_object_gbnf();
  if (grammar_parse(g, strlen(g), out, err) < 0) return oai_seterr(e, 500, "internal_error", NULL, "%s", err);
  return 0;
}

uint64_t api_random_seed(void) {
  uint64_t x = 0;
  if (RAND_bytes((unsigned char *)&x, sizeof x) != 1 && getrandom(&x, sizeof x, 0) != (ssize_t)sizeof x) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    x = (uint64_t)ts.tv_nsec * 0x9E3779B97F4A7C15ull ^ (uint64_t)ts.tv_sec;
  }
  return x;
}

int api_content_text(json_t *content, const char *param, const char *const *text_types, json_t **out, oai_error *e) {
  *out = NULL;
  if (json_is_string(content)) {
    *out = json_incref(content);
    return 0;
  }
  if (!json_is_array(content))
    return oai_seterr(e, 400, "invalid_type", param, "'%s' must be a string or an array of content blocks", param);
  /* Several text blocks are one text, joined as they come. */
  size_t total = 0, i;
  json_t *b;
  json_array_foreach(content, i, b) {
    json_t *t = json_is_object(b) ? json_object_get(b, "type") : NULL;
    if (!json_is_string(t))
      return oai_seterr(e, 400, "invalid_type", param, "'%s[%zu]' must be an object with a string 'type'", param, i);
    bool ok = false;
    for (int j = 0; text_types[j]; j++) ok |= !strcmp(json_string_value(t), text_types[j]);
    if (!ok)
      return oai_seterr(e, 400, "unsupported_content", param,
                        "'%s[%zu]' is a '%.40s' block: this server takes text blocks only", param, i,
                        json_string_value(t));
    json_t *tx = json_object_get(b, "text");
    if (!json_is_string(tx))
      return oai_seterr(e, 400, "invalid_type", param, "'%s[%zu].text' must be a string", param, i);
    total += json_string_length(tx);
  }
  char *buf = malloc(total + 1);
  if (!buf) return oai_seterr(e, 500, "internal_error", NULL, "out of memory");
  size_t off = 0;
  json_array_foreach(content, i, b) {
    json_t *tx = json_object_get(b, "text");
    memcpy(buf + off, json_string_value(tx), json_string_length(tx));
    off += json_string_length(tx);
  }
  *out = json_stringn_nocheck(buf, off);
  free(buf);
  if (!*out) return oai_seterr(e, 500, "internal_error", NULL, "out of memory");
  return 0;
}

int api_add_message(oai_request *r, const char *role, json_t *text_owned, oai_error *e) {
  if (!r->messages && !(r->messages = json_array())) {
    json_decref(text_owned);
    return oai_seterr(e, 500, "internal_error", NULL, "out of memory");
  }
  json_t *m = json_pack("{s:s,s:o}", "role", role, "content", text_owned);
  if (!m || json_array_append_new(r->messages, m)) return oai_seterr(e, 500, "internal_error", NULL, "out of memory");
  return 0;
}

/* The key is kept under a member name no client member can shadow: the
 * adapter sets it after reading the body. */
int api_set_cache_key(oai_request *r, const char *key, oai_error *e) {
  if (json_object_set_new(r->root, " cache_key", json_string(key)))
    return oai_seterr(e, 500, "internal_error", NULL, "out of memory");
  json_t *v = json_object_get(r->root, " cache_key");
  r->cache_key = json_string_value(v);
  r->cache_key_len = json_string_length(v);
  return 0;
}

int api_parse_body(const char *body, size_t len, oai_kind kind, oai_request *r, oai_error *e) {
  memset(r, 0, sizeof *r);
  r->kind = kind;
  r->n_choices = 1;
  pw_sampler_params_default(&r->sampling);
  json_error_t je;
  r->root = json_loadb(body ? body : "", len, 0, &je);
  if (!r->root)
    return oai_seterr(e, 400, "invalid_json", NULL, "malformed JSON body: %s (at byte %d)", je.text, je.position);
  if (!json_is_object(r->root)) {
    oai_request_free(r);
    return oai_seterr(e, 400, "invalid_json", NULL, "the request body must be a JSON object");
  }
  return 0;
}

int api_keep_alive(conn *k, json_t *root, bool *given, double *out, oai_error *e) {
  json_t *ka = json_object_get(root, "keep_alive");
  *given = false;
  if (!ka || json_is_null(ka)) return 0;
  double v;
  if (json_is_number(ka)) {
    v = json_number_value(ka);
    if (v != v || v > 10.0 * 365 * 86400)
      return oai_seterr(e, 400, "invalid_value", "keep_alive", "'keep_alive' is out of range (at most 10 years)");
    if (v < 0) v = -1;
  } else if (!json_is_string(ka) || registry_parse_keep_alive(json_string_value(ka), &v)) {
    return oai_seterr(e, 400, json_is_string(ka) ? "invalid_value" : "invalid_type", "keep_alive",
                      "'keep_alive' must be a number of seconds or a duration such as \"5m\", \"1h30m\", \"-1\"");
  }
  *given = true;
  *out = v;
  srv_set_keep_alive(k, v);
  return 0;
}
