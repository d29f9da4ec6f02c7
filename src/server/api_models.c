/* api_models.c - the endpoints that manage the served models:
 *   GET    /v1/ps                      loaded models: memory, requests in
 *                                      flight, keep-alive and expiry
 *   POST   /v1/models/{id}/load        load (body optional: {"keep_alive":...})
 *   POST   /v1/models/{id}/unload      unload now, or when its requests end
 *   DELETE /v1/models/{id}             remove from the store (admin)
 *   POST   /v1/models/pull             pull into the store (admin): progress
 *                                      as SSE events, or NDJSON lines with
 *                                      Accept: application/x-ndjson, or one
 *                                      JSON at the end ("stream": false)
 *   POST   /api/pull                   Ollama: pull into the store, progress
 *                                      as NDJSON lines (admin)
 *   DELETE /api/delete                 Ollama: remove from the store (admin)
 * Admin endpoints answer 403 unless the server was started with
 * --allow-pull, and need an API key when keys are configured (every
 * non-public route does). With one model (--model) there is no store:
 * /api/pull and /api/delete are 404 as they always were, DELETE and unload
 * of /v1/models/{id} and /v1/models/pull answer 400 no_store; /v1/ps and
 * load describe the one model. A pull runs on its own thread (models.c),
 * at most SRV_MAX_PULLS at once, and is cancelled when its client goes
 * away (the partial file stays for the next pull to resume).
 * What it is not: the store or the registry (models.c, registry.c). */
#include "server/api.h"

#include "base/error.h"
#include "server/sbuf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* How long a pull's answer waits for a progress line before it looks
 * whether the client is still there (a gone client cancels the pull). */
#define PULL_WAIT_MS 250

static int no_store(const char *what, oai_error *e) {
  return oai_seterr(e, 400, "no_store", NULL,
                    "%s needs a server that serves a model store (started without --model)", what);
}

/* The one model of a single-model server, as /v1/ps shows a loaded model. */
static void put_single(conn *k, sbuf *out) {
  engine *en = srv_engine(k);
  const char *id = engine_model_id(en);
  sbuf_puts(out, "{\"id\":");
  sbuf_json_str(out, id, strlen(id));
  sbuf_printf(out,
              ",\"object\":\"model\",\"loaded\":true,\"bytes\":%llu,\"file_bytes\":%llu,\"kv_bytes\":%llu,"
              "\"context_length\":%d,\"sha256\":\"%s\",\"expires_in_s\":null,\"expires_at\":null,\"keep_alive_s\":-1,"
              "\"loaded_at\":%lld}",
              (unsigned long long)(engine_model_size(en) + engine_kv_bytes(en)),
              (unsigned long long)engine_model_size(en), (unsigned long long)engine_kv_bytes(en), engine_n_ctx(en),
              engine_model_sha256(en), srv_started(srv_server(k)));
}

enum MHD_Result models_ps(conn *k, struct MHD_Connection *c) {
  sbuf out = {0};
  srv_models *sm = srv_store(srv_server(k));
  if (sm) {
    srv_models_render_ps(sm, false, &out);
  } else {
    sbuf_puts(&out, "{\"object\":\"list\",\"data\":[");
    put_single(k, &out);
    sbuf_puts(&out, "]}");
  }
  return srv_reply_json(k, c, 200, &out);
}

/* The keep_alive member of an optional JSON body. */
static int body_keep_alive(conn *k, oai_error *e) {
  size_t len;
  const char *body = srv_body(k, &len);
  if (!len) return 0;
  json_error_t je;
  json_t *root = json_loadb(body, len, 0, &je);
  if (!root || !json_is_object(root)) {
    json_decref(root);
    return oai_seterr(e, 400, "invalid_json", NULL, "the body must be a JSON object (or empty)");
  }
  int rc = 0;
  void *it = json_object_iter(root);
  for (; it && !rc; it = json_object_iter_next(root, it))
    if (strcmp(json_object_iter_key(it), "keep_alive"))
      rc = oai_seterr(e, 400, "unsupported_field", json_object_iter_key(it), "'%.60s' is not a field of this endpoint",
                      json_object_iter_key(it));
  bool given;
  double v;
  if (!rc) rc = api_keep_alive(k, root, &given, &v, e);
  json_decref(root);
  return rc;
}

/* DELETE /v1/models/{id}. */
enum MHD_Result models_delete(conn *k, struct MHD_Connection *c) {
  srv_models *sm = srv_store(srv_server(k));
  const char *arg = srv_arg(k);
  oai_error e;
  sbuf out = {0};
  if (!sm) no_store("DELETE /v1/models/{id}", &e);
  else if (!srv_models_admin_check(sm, "Deleting models", &e) && !srv_models_delete(sm, arg, &e)) {
    sbuf_puts(&out, "{\"id\":");
    sbuf_json_str(&out, arg, strlen(arg));
    sbuf_puts(&out, ",\"object\":\"model\",\"deleted\":true}");
    return srv_reply_json(k, c, 200, &out);
  }
  return srv_reply_error(k, c, &e);
}

/* POST /v1/models/{id}/load and /unload. */
enum MHD_Result models_action(conn *k, struct MHD_Connection *c) {
  srv_models *sm = srv_store(srv_server(k));
  const char *arg = srv_arg(k);
  oai_error e;
  sbuf out = {0};
  size_t n = strlen(arg);
  bool load = n > 5 && !strcmp(arg + n - 5, "/load");
  bool unload = n > 7 && !strcmp(arg + n - 7, "/unload");
  if (!load && !unload) {
    oai_seterr(&e, 404, "unknown_url", NULL, "Unknown request URL: POST /v1/models/%.100s (use .../load or .../unload)",
               arg);
    return srv_reply_error(k, c, &e);
  }
  char name[REGISTRY_NAME_MAX + 1];
  size_t nl = n - (load ? 5 : 7);
  if (nl > REGISTRY_NAME_MAX) nl = REGISTRY_NAME_MAX;
  memcpy(name, arg, nl);
  name[nl] = 0;
  if (body_keep_alive(k, &e)) return srv_reply_error(k, c, &e);
  if (unload) {
    if (!sm) no_store("Unloading", &e);
    else if (!srv_models_unload(sm, name, &e)) {
      sbuf_puts(&out, "{\"id\":");
      sbuf_json_str(&out, name, strlen(name));
      sbuf_puts(&out, ",\"object\":\"model\",\"unloading\":true}");
      return srv_reply_json(k, c, 200, &out);
    }
    return srv_reply_error(k, c, &e);
  }
  /* Load: bound to this request (its keep_alive applies when it ends). */
  if (srv_use_model(k, c, name, false, &e)) return srv_reply_error(k, c, &e);
  if (!sm) {
    put_single(k, &out);
    return srv_reply_json(k, c, 200, &out);
  }
  const char *id = engine_model_id(srv_engine(k));
  if (srv_models_render_one(sm, id, &out, &e)) return srv_reply_error(k, c, &e);
  return srv_reply_json(k, c, 200, &out);
}

/* ---- Ollama ---------------------------------------------------------------- */

/* With one model, Ollama's store endpoints are not there, as before. */
static enum MHD_Result unknown_url(const char *what, conn *k, struct MHD_Connection *c) {
  oai_error e;
  oai_seterr(&e, 404, "unknown_url", NULL, "Unknown request URL: %s", what);
  return srv_reply_error(k, c, &e);
}

/* The members of Ollama's delete and pull requests ("name" is Ollama's
 * older spelling of "model"; its clients still send it), and of
 * POST /v1/models/pull. */
static const char *const k_delete_fields[] = {"model", "name", NULL};
static const char *const k_ollama_pull_fields[] = {"model", "name", "stream", "insecure", NULL};
static const char *const k_pull_fields[] = {"model", "name", "stream", NULL};

/* A model name from "model" (or Ollama's older "name"). */
static int ollama_name(json_t *root, const char **out, oai_error *e) {
  if (api_str(root, "model", "model", out, e)) return PW_EINVAL;
  if (!*out && api_str(root, "name", "name", out, e)) return PW_EINVAL;
  if (!*out || !**out) return oai_seterr(e, 400, "missing_field", "model", "'model' is required");
  return 0;
}

enum MHD_Result ollama_delete(conn *k, struct MHD_Connection *c) {
  srv_models *sm = srv_store(srv_server(k));
  oai_error e;
  oai_request r;
  size_t len;
  const char *body = srv_body(k, &len);
  const char *name;
  if (!sm) return unknown_url("DELETE /api/delete", k, c);
  if (srv_models_admin_check(sm, "Deleting models", &e)) return srv_reply_error(k, c, &e);
  if (api_parse_body(body, len, OAI_CHAT, &r, &e)) return srv_reply_error(k, c, &e);
  int rc = oai_check_fields(r.root, k_delete_fields, &e) || ollama_name(r.root, &name, &e) ||
           srv_models_delete(sm, name, &e);
  oai_request_free(&r);
  if (rc) return srv_reply_error(k, c, &e);
  sbuf out = {0};
  return srv_reply(k, c, 200, NULL, &out); /* Ollama: an empty 200 */
}

typedef struct pull_stream {
  srv_pull *p;
  struct MHD_Connection *c; /* the client's, polled for a hangup */
  bool stream;  /* false: only the final line */
  bool sse;     /* each line as an SSE event (data: LINE, blank line) */
  bool ended;
  sbuf out;     /* being sent */
  size_t pos;
  sbuf last;    /* stream false: the latest line */
} pull_stream;

static ssize_t pull_reader(void *cls, uint64_t pos, char *buf, size_t max) {
  (void)pos;
  pull_stream *ps = cls;
  /* Bounded: a pull that never ends is cut by its stall timeout. */
  for (int guard = 0; guard < 1000000; guard++) {
    if (ps->pos < ps->out.len) {
      size_t n = ps->out.len - ps->pos;
      if (n > max) n = max;
      memcpy(buf, ps->out.data + ps->pos, n);
      ps->pos += n;
      return (ssize_t)n;
    }
    if (ps->ended) return MHD_CONTENT_READER_END_OF_STREAM;
    sbuf_clear(&ps->out);
    ps->pos = 0;
    ps->ended = srv_pull_read(ps->p, &ps->out, PULL_WAIT_MS) != 0;
    if (ps->out.oom) return MHD_CONTENT_READER_END_WITH_ERROR;
    /* a client that left cancels the pull (pull_free); its partial file
     * stays for the next pull to resume */
    if (!ps->ended && srv_client_gone(ps->c)) return MHD_CONTENT_READER_END_WITH_ERROR;
    if (ps->sse && ps->out.len) {
      sbuf ev = {0};
      for (size_t a = 0; a < ps->out.len;) {
        size_t b = a;
        while (b < ps->out.len && ps->out.data[b] != '\n') b++;
        sbuf_puts(&ev, "data: ");
        sbuf_put(&ev, ps->out.data + a, b - a);
        sbuf_puts(&ev, "\n\n");
        a = b + 1;
      }
      if (ev.oom) {
        sbuf_free(&ev);
        return MHD_CONTENT_READER_END_WITH_ERROR;
      }
      sbuf_clear(&ps->out);
      sbuf_put(&ps->out, ev.data, ev.len);
      sbuf_free(&ev);
    }
    if (!ps->stream) {
      /* Keep only the last complete line; send it at the end. */
      if (ps->out.len) {
        size_t end = ps->out.len - 1, start = end;
        while (start > 0 && ps->out.data[start - 1] != '\n') start--;
        sbuf_clear(&ps->last);
        sbuf_put(&ps->last, ps->out.data + start, end - start + 1);
      }
      sbuf_clear(&ps->out);
      if (ps->ended) sbuf_put(&ps->out, ps->last.data ? ps->last.data : "", ps->last.len);
    }
  }
  return MHD_CONTENT_READER_END_WITH_ERROR;
}

static void pull_free(void *cls) {
  pull_stream *ps = cls;
  srv_pull_free(ps->p); /* cancels a pull whose client went away; the partial file stays */
  sbuf_free(&ps->out);
  sbuf_free(&ps->last);
  free(ps);
}

/* A pull request's body, parsed and started: model (the source), name
 * (the store's name for it; in Ollama's API, alone, the source), stream,
 * and in Ollama's API insecure (refused when true); any other field
 * is refused (unsupported_field here, unknown_field in Ollama's API, as
 * for its other endpoints). On success *out owns the started pull and
 * *stream is the request's choice. */
static int pull_begin(conn *k, struct MHD_Connection *c, srv_models *sm, bool ollama, pull_stream **out, bool *stream,
                      oai_error *e) {
  oai_request r;
  size_t len;
  const char *body = srv_body(k, &len);
  *out = NULL;
  *stream = true;
  if (srv_models_admin_check(sm, "Pulling models", e)) return -1;
  if (api_parse_body(body, len, OAI_CHAT, &r, e)) return -1;
  const char *source = NULL, *name = NULL, *key;
  bool insecure = false;
  pull_stream *ps = NULL;
  if (ollama && oai_check_fields(r.root, k_ollama_pull_fields, e)) goto fail;
  if (!ollama && (key = oai_unknown_member(r.root, k_pull_fields))) {
    oai_seterr(e, 400, "unsupported_field", key, "'%.64s' is not a field of a pull (model, name, stream)", key);
    goto fail;
  }
  if (api_str(r.root, "model", "model", &source, e) || api_str(r.root, "name", "name", &name, e) ||
      api_bool(r.root, "stream", "stream", stream, e) ||
      (ollama && api_bool(r.root, "insecure", "insecure", &insecure, e)))
    goto fail;
  if (insecure) {
    oai_seterr(e, 400, "unsupported_field", "insecure", "'insecure' is not supported: every pull is verified");
    goto fail;
  }
  /* Ollama's API takes the model to pull as "model" or, its older
   * spelling, "name" (which its official clients still send alone): there
   * a lone name is the source, named in the store as any source is. */
  if (ollama && !source && name) {
    source = name;
    name = NULL;
  }
  if (!(ps = calloc(1, sizeof *ps))) {
    oai_seterr(e, 500, "internal_error", NULL, "out of memory");
    goto fail;
  }
  ps->c = c;
  if (srv_pull_start(sm, source, name && *name ? name : NULL, &ps->p, e)) goto fail;
  oai_request_free(&r);
  *out = ps;
  return 0;
fail:
  free(ps);
  oai_request_free(&r);
  return -1;
}

/* The pull's progress as the body of a 200 of this content type. */
static enum MHD_Result pull_reply_stream(conn *k, struct MHD_Connection *c, pull_stream *ps, const char *type) {
  struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, pull_reader, ps, pull_free);
  if (!resp) {
    pull_free(ps);
    return MHD_NO;
  }
  MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, type);
  MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
  return srv_reply_raw(k, c, 200, resp);
}

enum MHD_Result ollama_pull(conn *k, struct MHD_Connection *c) {
  srv_models *sm = srv_store(srv_server(k));
  oai_error e;
  pull_stream *ps;
  bool stream;
  if (!sm) return unknown_url("POST /api/pull", k, c);
  if (pull_begin(k, c, sm, true, &ps, &stream, &e)) return srv_reply_error(k, c, &e);
  ps->stream = stream;
  return pull_reply_stream(k, c, ps, stream ? "application/x-ndjson" : "application/json");
}

/* ---- POST /v1/models/pull ------------------------------------------------------ */

/* The HTTP status of a pull that failed with rc. */
static int pull_status(int rc) {
  switch (rc) {
    case PW_EINVAL: return 400;
    case PW_ENOTFOUND: return 404;
    case PW_EFORMAT: return 422;
    case PW_ECANCELED: return 499;
    default: return 502; /* the source, the network or the disk */
  }
}

enum MHD_Result models_pull(conn *k, struct MHD_Connection *c) {
  srv_models *sm = srv_store(srv_server(k));
  oai_error e;
  pull_stream *ps;
  bool stream;
  if (!sm) {
    no_store("Pulling models", &e);
    return srv_reply_error(k, c, &e);
  }
  if (pull_begin(k, c, sm, false, &ps, &stream, &e)) return srv_reply_error(k, c, &e);
  ps->stream = true;
  const char *accept = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_ACCEPT);
  ps->sse = !(accept && strstr(accept, "application/x-ndjson"));
  if (!stream) {
    /* one answer at the end, its status the pull's: wait here (this
     * connection's thread; pulls are bounded by SRV_MAX_PULLS), and stop
     * when the client leaves */
    sbuf lines = {0}, last = {0}, out = {0};
    bool gone = false;
    for (;;) {
      sbuf_clear(&lines);
      const bool ended = srv_pull_read(ps->p, &lines, PULL_WAIT_MS);
      if (lines.len > 1) { /* keep the last line: the final event */
        size_t end = lines.len - 1, start = end;
        while (start > 0 && lines.data[start - 1] != '\n') start--;
        sbuf_clear(&last);
        sbuf_put(&last, lines.data + start, end - start);
      }
      if (ended) break;
      if (!lines.len && srv_client_gone(c)) {
        gone = true;
        break;
      }
    }
    sbuf_free(&lines);
    char msg[PW_ERRMAX];
    const int rc = gone ? PW_ECANCELED : srv_pull_status(ps->p, msg);
    if (!gone && !rc) {
      /* the success line is the last one read */
      json_t *root = last.len ? json_loadb(last.data, last.len, 0, NULL) : NULL;
      char *txt = root ? json_dumps(root, JSON_COMPACT) : NULL;
      json_decref(root);
      if (txt) sbuf_puts(&out, txt);
      else sbuf_puts(&out, "{\"status\":\"success\"}");
      free(txt);
    }
    sbuf_free(&last);
    pull_free(ps);
    if (gone) return MHD_NO;
    if (rc) {
      oai_seterr(&e, pull_status(rc), rc == PW_ENOTFOUND ? "not_found" : "pull_failed", "model", "%s", msg);
      return srv_reply_error(k, c, &e);
    }
    return srv_reply_json(k, c, 200, &out);
  }
  return pull_reply_stream(k, c, ps, ps->sse ? "text/event-stream" : "application/x-ndjson");
}
