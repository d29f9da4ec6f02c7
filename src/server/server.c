/* server.c - libmicrohttpd glue: routing, auth, body limits, and driving
 * engine requests for the OpenAI endpoints. See server.h. */
#include "server/server.h"

#include "base/clock.h"
#include "base/error.h"
#include "base/log.h"
#include "server/auth.h"
#include "server/metrics.h"
#include "server/oai.h"
#include "server/receipts.h"
#include "server/sbuf.h"
#include "tok/tok.h"

#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define WAIT_SLICE_MS 100    /* engine_next wait between hangup/shutdown checks */
#define STOP_GRACE_MS 5000   /* after a cancel, how long to wait for the engine's last event */
#define STREAM_BLOCK 16384   /* MHD buffer size for streamed responses */

struct server {
  struct MHD_Daemon *d;
  engine *e;         /* borrowed */
  auth_keys *keys;   /* owned */
  prompt_builder pb; /* owned */
  metrics m;
  size_t max_body;
  double timeout_s;
  int keepalive_ms;
  int retry_after_s;
  const char *spec_mode; /* borrowed (server_opts); NULL = speculation off */
  int log_requests;      /* server_opts.log_requests */
  FILE *log_out;         /* borrowed */
  pthread_mutex_t log_mu; /* one request line at a time */
  int port;
  int quiesced_fd;   /* listen socket handed back by MHD_quiesce_daemon; -1 = none */
  int stopping;      /* atomic flag: server_stop in progress */
  int quiescing;     /* atomic flag: not accepting any more */
  int draining;      /* atomic flag: /health says "draining" (server_drain_notice) */
  char replica[SERVER_REPLICA_ID_MAX + 1]; /* X-Power-Replica */
  int inflight;      /* atomic: requests between arrival and completion */
  long long started; /* Unix seconds, the model's "created" */
  ev_model_info evm; /* the model facts every receipt names */
  ev_key *receipt_key; /* owned; NULL = receipts unsigned */
};

typedef enum route {
  R_NONE = 0,
  R_CHAT,
  R_COMPLETIONS,
  R_EMBEDDINGS,
  R_TOKENIZE,
  R_DETOKENIZE,
  R_MODELS,
  R_MODEL,
  R_HEALTH,
  R_METRICS,
  R_RECEIPT_KEY
} route;

/* What the request log says about one request. Owned by the conn, then
 * by the stream for streamed answers (which end after the conn's callback
 * may have run). */
typedef struct req_log {
  char id[48];            /* X-Request-Id: the response id for generations */
  metrics_endpoint ep;
  int status;             /* HTTP status sent (0 = none) */
  char code[48];          /* error code of an error answer or a failed stream; "" = none */
  bool have_usage;
  engine_usage usage;
  engine_finish finish;
  bool gone;              /* the client went away before the end */
  uint64_t t0, t_first;   /* pw_now_ns: arrival, first generated token (0 = none) */
  char *prompt;           /* owned, log_requests >= 2 only: prompt text (chat: messages JSON) */
  sbuf output;            /* log_requests >= 2 only: generated text */
} req_log;

/* Per-request state (MHD's con_cls). */
typedef struct conn {
  server *s;
  route rt;
  metrics_endpoint ep;
  sbuf body;
  bool too_large;
  bool answered; /* a response was queued */
  bool streamed; /* the log record moved to a stream */
  bool anonymous;       /* no API keys configured: tenant "anonymous" */
  uint8_t tenant[32];   /* the caller's API key digest (when !anonymous) */
  uint64_t t0;   /* pw_now_ns at arrival */
  req_log log;
} conn;

static bool flag(const int *p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE) != 0; }

/* ---- request log ------------------------------------------------------- */

static void log_free(req_log *l) {
  free(l->prompt);
  l->prompt = NULL;
  sbuf_free(&l->output);
}

/* Writes the request's line (key=value, values without spaces or quoted as
 * JSON strings) and frees the record's texts. Never the prompt_cache_key. */
static void log_emit(server *s, req_log *l) {
  if (s->log_requests <= 0) {
    log_free(l);
    return;
  }
  uint64_t now = pw_now_ns();
  sbuf b = {0};
  sbuf_printf(&b, "power: request id=%s endpoint=%s status=%d", l->id[0] ? l->id : "-",
              metrics_endpoint_name(l->ep), l->status);
  if (l->code[0]) sbuf_printf(&b, " error=%s", l->code);
  if (l->have_usage)
    sbuf_printf(&b, " prompt_tokens=%d completion_tokens=%d cached_tokens=%d", l->usage.prompt_tokens,
                l->usage.completion_tokens, l->usage.cached_tokens);
  if (l->have_usage && s->spec_mode)
    sbuf_printf(&b, " spec_drafted=%d spec_accepted=%d target_passes=%d", l->usage.spec_drafted,
                l->usage.spec_accepted, l->usage.target_passes);
  if (l->t_first) sbuf_printf(&b, " ttft_ms=%.1f", (double)(l->t_first - l->t0) * 1e-6);
  sbuf_printf(&b, " total_ms=%.1f", (double)(now - l->t0) * 1e-6);
  if (l->have_usage) sbuf_printf(&b, " finish=%s", l->finish == ENGINE_FINISH_CANCEL ? "cancel" : oai_finish_str(l->finish));
  if (l->gone) sbuf_puts(&b, " client_gone=1");
  if (s->log_requests >= 2) {
    if (l->prompt) {
      sbuf_puts(&b, " prompt=");
      sbuf_json_str(&b, l->prompt, strlen(l->prompt));
    }
    if (l->output.len || l->have_usage) {
      sbuf_puts(&b, " output=");
      sbuf_json_str(&b, l->output.data ? l->output.data : "", l->output.len);
    }
  }
  sbuf_put(&b, "\n", 1);
  if (!b.oom) {
    FILE *f = s->log_out ? s->log_out : stderr;
    pthread_mutex_lock(&s->log_mu);
    fwrite(b.data, 1, b.len, f);
    fflush(f);
    pthread_mutex_unlock(&s->log_mu);
  }
  sbuf_free(&b);
  log_free(l);
}

/* ---- responses --------------------------------------------------------- */

static enum MHD_Result queue(conn *k, struct MHD_Connection *c, int status, const char *ctype, sbuf *b,
                             const char *hname, const char *hval) {
  if (b->oom) {
    sbuf_free(b);
    status = 500;
    ctype = "application/json";
    sbuf_puts(b, "{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\",\"param\":null,"
                 "\"code\":\"internal_error\"}}");
  }
  size_t len = b->len;
  char *data = b->data;
  b->data = NULL;
  sbuf_free(b);
  struct MHD_Response *r = MHD_create_response_from_buffer(len, data ? data : (char *)"", data ? MHD_RESPMEM_MUST_FREE : MHD_RESPMEM_PERSISTENT);
  if (!r) {
    free(data);
    return MHD_NO;
  }
  MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
  if (hname) MHD_add_response_header(r, hname, hval);
  MHD_add_response_header(r, "X-Request-Id", k->log.id);
  MHD_add_response_header(r, "X-Power-Replica", k->s->replica);
  enum MHD_Result ok = MHD_queue_response(c, (unsigned)status, r);
  MHD_destroy_response(r);
  k->answered = true;
  k->log.status = status;
  metrics_request(&k->s->m, k->ep, status);
  return ok;
}

static enum MHD_Result queue_json(conn *k, struct MHD_Connection *c, int status, sbuf *b) {
  return queue(k, c, status, "application/json", b, NULL, NULL);
}

static enum MHD_Result queue_error(conn *k, struct MHD_Connection *c, const oai_error *e) {
  sbuf b = {0};
  snprintf(k->log.code, sizeof k->log.code, "%s", e->code);
  metrics_refusal_count(&k->s->m, metrics_refusal_for(e->status, e->code));
  oai_render_error(e, &b);
  char retry[16];
  const char *hn = NULL, *hv = NULL;
  if (e->status == 503) {
    snprintf(retry, sizeof retry, "%d", k->s->retry_after_s);
    hn = MHD_HTTP_HEADER_RETRY_AFTER;
    hv = retry;
  } else if (e->status == 401) {
    hn = MHD_HTTP_HEADER_WWW_AUTHENTICATE;
    hv = "Bearer";
  } else if (e->status == 405) {
    hn = MHD_HTTP_HEADER_ALLOW;
    hv = (k->rt == R_MODELS || k->rt == R_MODEL || k->rt == R_HEALTH || k->rt == R_METRICS) ? "GET, HEAD" : "POST";
  }
  return queue(k, c, e->status, "application/json", &b, hn, hv);
}

/* ---- client liveness --------------------------------------------------- */

static int conn_fd(struct MHD_Connection *c) {
  const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
  return ci ? ci->connect_fd : -1;
}

/* True when the peer has closed or reset the connection. A client that only
 * half-closes its side counts as gone: HTTP clients do not do that while
 * waiting for an answer. */
static bool client_gone(int fd) {
  if (fd < 0) return false;
  struct pollfd p = {.fd = fd, .events = POLLIN | POLLRDHUP};
  if (poll(&p, 1, 0) <= 0) return false;
  if (p.revents & (POLLHUP | POLLERR | POLLRDHUP | POLLNVAL)) return true;
  if (p.revents & POLLIN) {
    char ch;
    ssize_t n = recv(fd, &ch, 1, MSG_PEEK | MSG_DONTWAIT);
    return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
  }
  return false;
}

/* Waits for the request's next event up to wait_ms (-1: until one comes).
 * Returns 0 with ev filled, PW_ETIMEOUT when wait_ms passed, PW_ECANCELED
 * when the client went away (the request has been cancelled) or the server
 * is stopping and the engine did not end the request in time. */
static int wait_event(server *s, engine_req *req, int fd, engine_event *ev, int wait_ms, bool *cancelled) {
  uint64_t start = pw_now_ns();
  uint64_t cancel_at = 0;
  for (;;) {
    int rc = engine_next(req, ev, WAIT_SLICE_MS);
    if (rc == 0) return 0;
    uint64_t now = pw_now_ns();
    if (client_gone(fd)) {
      engine_cancel(req);
      *cancelled = true;
      return PW_ECANCELED;
    }
    if (flag(&s->stopping)) {
      if (!cancel_at) {
        engine_cancel(req);
        *cancelled = true;
        cancel_at = now;
      } else if (now - cancel_at > (uint64_t)STOP_GRACE_MS * 1000000u) {
        return PW_ECANCELED;
      }
      continue;
    }
    if (wait_ms >= 0 && now - start >= (uint64_t)wait_ms * 1000000u) return PW_ETIMEOUT;
  }
}

/* ---- generation -------------------------------------------------------- */

/* Streaming state, owned by the MHD response (freed by stream_free). */
typedef struct stream {
  server *s;
  engine_req *req;
  int fd;
  oai_resp o;
  bool include_usage;
  bool want_lp;
  bool sent_role;
  bool have_ev;   /* ev holds an event not yet rendered */
  bool finished;  /* the terminal event has been rendered */
  bool gone;      /* the client went away */
  uint64_t t0, t_last;
  int n_tokens;
  oai_logprobs lp;
  sbuf out;
  size_t out_pos;
  req_log log;    /* moved from the conn; written by stream_free */
  srv_receipt rcpt; /* moved from handle_generate */
  engine_event ev;
} stream;

static void note_token(server *s, req_log *l, uint64_t t0, uint64_t *t_last, int *n_tokens) {
  uint64_t now = pw_now_ns();
  if (*n_tokens == 0) {
    metrics_ttft(&s->m, now - t0);
    l->t_first = now;
  } else {
    metrics_itl(&s->m, now - *t_last);
  }
  *t_last = now;
  (*n_tokens)++;
}

/* Renders one event into st->out. */
static void stream_render(stream *st) {
  engine_event *ev = &st->ev;
  if (ev->type == ENGINE_EV_TOKEN) {
    note_token(st->s, &st->log, st->t0, &st->t_last, &st->n_tokens);
    if (st->s->log_requests >= 2) sbuf_put(&st->log.output, ev->text, (size_t)ev->text_len);
    if (st->want_lp) {
      /* Each chunk carries one token; text_offset keeps counting across
       * chunks as in the non-streamed answer. */
      size_t offset = st->lp.text_offset;
      oai_logprobs_reset(&st->lp, st->o.kind);
      st->lp.text_offset = offset;
      oai_logprobs_add(&st->lp, prompt_piece, &st->s->pb, ev->token, ev->logprob, ev->top, ev->n_top,
                       (size_t)ev->text_len);
    }
    ev_gen_token(&st->rcpt.gen, ev->token, ev->text, (size_t)ev->text_len);
    if (ev->text_len > 0 || st->want_lp)
      oai_sse_delta(&st->o, ev->text, (size_t)ev->text_len, st->want_lp ? &st->lp : NULL, &st->out);
  } else if (ev->type == ENGINE_EV_DONE) {
    /* Text held back for a stop string that never completed. */
    if (ev->text_len > 0) oai_sse_delta(&st->o, ev->text, (size_t)ev->text_len, NULL, &st->out);
    if (st->s->log_requests >= 2) sbuf_put(&st->log.output, ev->text, (size_t)ev->text_len);
    st->log.have_usage = true;
    st->log.usage = ev->usage;
    st->log.finish = ev->finish;
    metrics_tokens(&st->s->m, (uint64_t)ev->usage.completion_tokens);
    /* The receipt rides on the final chunk: the usage chunk when asked for. */
    ev_gen_text(&st->rcpt.gen, ev->text, (size_t)ev->text_len);
    oai_error re;
    if (srv_receipt_end(&st->rcpt, ev, st->s->receipt_key, st->t0, st->log.t_first, pw_now_ns(), &st->o, &re))
      fprintf(st->s->log_out ? st->s->log_out : stderr, "power: request id=%s: %s\n", st->log.id, re.message);
    oai_resp fin = st->o;
    if (st->include_usage) fin.receipt = NULL;
    oai_sse_finish(&fin, ev->finish, &st->out);
    if (st->include_usage) oai_sse_usage(&st->o, &ev->usage, &st->out);
    oai_sse_done(&st->out);
    st->finished = true;
  } else {
    oai_error e;
    oai_error_from_status(&e, ev->status, ev->message);
    snprintf(st->log.code, sizeof st->log.code, "%s", e.code);
    metrics_refusal_count(&st->s->m, metrics_refusal_for(e.status, e.code));
    oai_sse_error(&e, &st->out);
    oai_sse_done(&st->out);
    st->finished = true;
  }
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max) {
  (void)pos;
  stream *st = cls;
  for (int guard = 0; guard < 1000000; guard++) {
    if (st->out_pos < st->out.len) {
      size_t n = st->out.len - st->out_pos;
      if (n > max) n = max;
      memcpy(buf, st->out.data + st->out_pos, n);
      st->out_pos += n;
      return (ssize_t)n;
    }
    if (st->out.oom) return MHD_CONTENT_READER_END_WITH_ERROR;
    if (st->finished) return MHD_CONTENT_READER_END_OF_STREAM;
    sbuf_clear(&st->out);
    st->out_pos = 0;
    if (!st->sent_role) {
      st->sent_role = true;
      if (st->o.kind == OAI_CHAT) oai_sse_role(&st->o, &st->out);
      continue;
    }
    if (!st->have_ev) {
      bool cancelled = false;
      int rc = wait_event(st->s, st->req, st->fd, &st->ev, st->s->keepalive_ms, &cancelled);
      if (rc == PW_ETIMEOUT) {
        oai_sse_keepalive(&st->out);
        continue;
      }
      if (rc) {
        if (!flag(&st->s->stopping)) {
          st->gone = true;
          metrics_disconnect(&st->s->m);
        }
        return MHD_CONTENT_READER_END_WITH_ERROR;
      }
    }
    st->have_ev = false;
    stream_render(st);
  }
  return MHD_CONTENT_READER_END_WITH_ERROR;
}

/* Called when MHD is done with the response: sent, failed or aborted. */
static void stream_free(void *cls) {
  stream *st = cls;
  if (!st->finished && !st->gone && !flag(&st->s->stopping)) metrics_disconnect(&st->s->m);
  st->log.gone = st->gone || !st->finished;
  log_emit(st->s, &st->log);
  engine_release(st->req); /* cancels a sequence still running */
  srv_receipt_free(&st->rcpt);
  oai_logprobs_free(&st->lp);
  sbuf_free(&st->out);
  free(st);
}

static enum MHD_Result start_stream(conn *k, struct MHD_Connection *c, engine_req *req, const oai_request *r,
                                    const oai_resp *o, const engine_event *first, bool have_first,
                                    srv_receipt *rcpt) {
  stream *st = calloc(1, sizeof *st);
  if (!st) {
    srv_receipt_free(rcpt);
    engine_release(req);
    oai_error e;
    oai_seterr(&e, 500, "internal_error", NULL, "out of memory");
    return queue_error(k, c, &e);
  }
  st->s = k->s;
  st->req = req;
  st->fd = conn_fd(c);
  st->o = *o;
  st->rcpt = *rcpt; /* moved: the stream frees it */
  memset(rcpt, 0, sizeof *rcpt);
  st->include_usage = r->include_usage;
  st->want_lp = r->logprobs;
  st->t0 = k->t0;
  /* The log record travels with the stream: MHD may finish the connection
   * before it frees the response. */
  st->log = k->log;
  memset(&k->log.output, 0, sizeof k->log.output);
  k->log.prompt = NULL;
  k->streamed = true;
  if (have_first) {
    st->ev = *first;
    st->have_ev = true;
  }
  sbuf_reserve(&st->out, 8192); /* sized once; chunks rarely need more */
  struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, STREAM_BLOCK, stream_read, st,
                                                                stream_free);
  if (!resp) {
    stream_free(st);
    return MHD_NO;
  }
  MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
  MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
  MHD_add_response_header(resp, "X-Accel-Buffering", "no");
  MHD_add_response_header(resp, "X-Request-Id", st->log.id);
  MHD_add_response_header(resp, "X-Power-Replica", st->s->replica);
  st->log.status = 200;
  enum MHD_Result ok = MHD_queue_response(c, MHD_HTTP_OK, resp);
  MHD_destroy_response(resp);
  k->answered = true;
  metrics_request(&k->s->m, k->ep, 200);
  return ok;
}

/* The admission deadline: X-Request-Timeout, else the server default. */
static int request_deadline(conn *k, struct MHD_Connection *c, uint64_t *deadline, oai_error *e) {
  const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-Request-Timeout");
  double sec = k->s->timeout_s;
  if (h && oai_parse_timeout(h, &sec))
    return oai_seterr(e, 400, "invalid_value", "X-Request-Timeout",
                      "X-Request-Timeout must be a number of seconds in (0, 86400], got '%.40s'", h);
  *deadline = sec > 0 ? k->t0 + (uint64_t)(sec * 1e9) : 0;
  return 0;
}

static int check_model(server *s, const oai_request *r, oai_error *e) {
  const char *id = engine_model_id(s->e);
  if (r->model && *r->model && strcmp(r->model, id))
    return oai_seterr(e, 404, "model_not_found", "model", "The model '%.100s' does not exist; this server serves '%.100s'",
                      r->model, id);
  return 0;
}

static int submit(server *s, const engine_params *p, const char *param, engine_req **req, oai_error *e) {
  char err[PW_ERRMAX] = "";
  int rc = engine_submit(s->e, p, req, err);
  if (rc) {
    oai_error_from_status(e, rc, err);
    if (rc == PW_ECONTEXT) snprintf(e->param, sizeof e->param, "%s", param);
  }
  return rc;
}

static enum MHD_Result handle_generate(conn *k, struct MHD_Connection *c) {
  server *s = k->s;
  oai_kind kind = k->rt == R_CHAT ? OAI_CHAT : OAI_COMPLETION;
  oai_request r;
  oai_error e;
  prompt_error pe;
  int32_t *prompt = NULL;
  int n_prompt = 0;
  engine_req *req = NULL;
  enum MHD_Result res;
  engine_event *ev = NULL;
  sbuf text = {0}, out = {0};
  oai_logprobs lp = {0};
  srv_receipt rcpt = {0};
  char *ptext = NULL; /* chat: the rendered template */
  size_t plen = 0;
  oai_resp o;
  oai_resp_init(&o, kind, engine_model_id(s->e), engine_model_sha256(s->e));
  o.spec_mode = s->spec_mode;
  snprintf(k->log.id, sizeof k->log.id, "%s", o.id);

  if (oai_parse(kind, k->body.data, k->body.len, &r, &e)) return queue_error(k, c, &e);
  if (s->log_requests >= 2) {
    if (kind == OAI_CHAT) k->log.prompt = json_dumps(r.messages, JSON_COMPACT);
    else if (r.text) k->log.prompt = strndup(r.text, r.text_len);
  }
  if (check_model(s, &r, &e)) goto fail;
  for (int i = 0; i < r.sampling.n_logit_bias; i++)
    if (r.logit_bias[i].token >= tok_n_vocab(s->pb.vocab)) {
      oai_seterr(&e, 400, "invalid_value", "logit_bias", "'logit_bias' names token %d, outside the vocabulary of %d",
                 r.logit_bias[i].token, tok_n_vocab(s->pb.vocab));
      goto fail;
    }
  if (kind == OAI_CHAT) {
    prompt_chat_opts po = {0};
    po.rendered = &ptext; /* the receipt hashes the rendered text */
    po.rendered_len = &plen;
    if (prompt_chat(&s->pb, r.messages, &po, &prompt, &n_prompt, &pe)) goto prompt_fail;
  } else if (r.tokens) {
    if (prompt_check_ids(&s->pb, r.tokens, r.n_tokens, "prompt", &pe)) goto prompt_fail;
    prompt = r.tokens;
    n_prompt = r.n_tokens;
    r.tokens = NULL;
  } else if (prompt_tokenize(&s->pb, r.text, r.text_len, true, true, "prompt", &prompt, &n_prompt, &pe)) {
    goto prompt_fail;
  }
  if (n_prompt < 1) {
    oai_seterr(&e, 400, "invalid_value", kind == OAI_CHAT ? "messages" : "prompt", "the prompt is empty");
    goto fail;
  }
  engine_params p;
  oai_engine_params(&r, prompt, n_prompt, &p);
  if (r.cache_key) {
    /* The engine only ever sees the scoped digest. */
    const void *tenant = k->anonymous ? (const void *)OAI_TENANT_ANONYMOUS : (const void *)k->tenant;
    size_t tenant_len = k->anonymous ? strlen(OAI_TENANT_ANONYMOUS) : sizeof k->tenant;
    if (oai_cache_scope(tenant, tenant_len, kind, engine_model_id(s->e), r.cache_key, r.cache_key_len,
                        p.cache_key)) {
      oai_seterr(&e, 500, "internal_error", NULL, "cannot hash the prompt cache key");
      goto fail;
    }
    p.has_cache_key = true;
  }
  if (request_deadline(k, c, &p.deadline_ns, &e)) goto fail;
  srv_caller who = {k->anonymous, k->tenant};
  if (srv_receipt_begin(&rcpt, &s->evm, kind, k->body.data, k->body.len, &who, &r,
                        kind == OAI_CHAT ? ptext : r.text, kind == OAI_CHAT ? plen : r.text_len, &p,
                        engine_n_ctx(s->e), s->spec_mode, &e))
    goto fail;
  rcpt.gen.replica = s->replica;
  if (submit(s, &p, kind == OAI_CHAT ? "messages" : "prompt", &req, &e)) goto fail;
  free(prompt);
  prompt = NULL;

  ev = malloc(sizeof *ev);
  if (!ev) {
    oai_seterr(&e, 500, "internal_error", NULL, "out of memory");
    goto fail;
  }
  int fd = conn_fd(c);
  bool cancelled = false;

  if (r.stream) {
    /* Wait a little for the first event so that admission failures (deadline)
     * still get a proper status; past the keep-alive interval the stream
     * starts anyway and keeps the client informed with comments. */
    int rc = wait_event(s, req, fd, ev, s->keepalive_ms, &cancelled);
    if (rc == PW_ECANCELED) goto gone;
    if (rc == 0 && ev->type == ENGINE_EV_ERROR) {
      oai_error_from_status(&e, ev->status, ev->message);
      goto fail;
    }
    res = start_stream(k, c, req, &r, &o, ev, rc == 0, &rcpt);
    req = NULL; /* owned by the stream */
    goto done;
  }

  oai_logprobs_reset(&lp, kind);
  sbuf_reserve(&text, 4096);
  uint64_t t_last = 0;
  int n_tok = 0;
  for (;;) {
    int rc = wait_event(s, req, fd, ev, -1, &cancelled);
    if (rc) goto gone;
    if (ev->type == ENGINE_EV_TOKEN) {
      note_token(s, &k->log, k->t0, &t_last, &n_tok);
      ev_gen_token(&rcpt.gen, ev->token, ev->text, (size_t)ev->text_len);
      sbuf_put(&text, ev->text, (size_t)ev->text_len);
      if (r.logprobs)
        oai_logprobs_add(&lp, prompt_piece, &s->pb, ev->token, ev->logprob, ev->top, ev->n_top, (size_t)ev->text_len);
      continue;
    }
    if (ev->type == ENGINE_EV_ERROR) {
      oai_error_from_status(&e, ev->status, ev->message);
      goto fail;
    }
    sbuf_put(&text, ev->text, (size_t)ev->text_len); /* DONE: last held-back text */
    ev_gen_text(&rcpt.gen, ev->text, (size_t)ev->text_len);
    break;
  }
  if (cancelled) goto gone;
  k->log.have_usage = true;
  k->log.usage = ev->usage;
  k->log.finish = ev->finish;
  if (s->log_requests >= 2) sbuf_put(&k->log.output, text.data ? text.data : "", text.len);
  metrics_tokens(&s->m, (uint64_t)ev->usage.completion_tokens);
  if (srv_receipt_end(&rcpt, ev, s->receipt_key, k->t0, k->log.t_first, pw_now_ns(), &o, &e)) goto fail;
  oai_render_completion(&o, text.data ? text.data : "", text.len, r.logprobs ? &lp : NULL, ev->finish, &ev->usage, &out);
  res = queue_json(k, c, 200, &out);
  goto done;

gone:
  if (!flag(&s->stopping)) metrics_disconnect(&s->m);
  k->log.gone = true;
  res = MHD_NO; /* closes the connection */
  goto done;
prompt_fail:
  oai_error_from_prompt(&e, &pe);
fail:
  res = queue_error(k, c, &e);
done:
  engine_release(req);
  srv_receipt_free(&rcpt);
  free(ptext);
  free(prompt);
  free(ev);
  sbuf_free(&text);
  sbuf_free(&out);
  oai_logprobs_free(&lp);
  oai_request_free(&r);
  return res;
}

/* ---- embeddings, tokenize, detokenize ---------------------------------- */

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

static enum MHD_Result handle_embeddings(conn *k, struct MHD_Connection *c) {
  server *s = k->s;
  oai_request r;
  oai_error e;
  prompt_error pe;
  engine_event *ev = NULL;
  engine_req *req = NULL;
  int32_t *ids = NULL;
  sbuf out = {0};
  srv_receipt rcpt = {0};
  enum MHD_Result res;
  if (oai_parse(OAI_EMBEDDING, k->body.data, k->body.len, &r, &e)) return queue_error(k, c, &e);
  if (check_model(s, &r, &e)) goto fail;
  srv_caller who = {k->anonymous, k->tenant};
  if (srv_receipt_begin_embed(&rcpt, &s->evm, k->body.data, k->body.len, &who, &e)) goto fail;
  rcpt.gen.replica = s->replica;
  int n_embd = engine_n_embd(s->e);
  if (r.dimensions && r.dimensions != n_embd) {
    oai_seterr(&e, 400, "unsupported_dimensions", "dimensions",
               "'dimensions' must be omitted or equal the model's embedding size %d", n_embd);
    goto fail;
  }
  uint64_t deadline;
  if (request_deadline(k, c, &deadline, &e)) goto fail;
  if (!(ev = malloc(sizeof *ev))) {
    oai_seterr(&e, 500, "internal_error", NULL, "out of memory");
    goto fail;
  }
  int fd = conn_fd(c);
  long long total = 0;
  sbuf_puts(&out, "{\"object\":\"list\",\"data\":[");
  size_t i;
  json_t *in;
  /* One input at a time: a big batch never crowds out other clients' slots
   * or fails itself with PW_EBUSY. */
  json_array_foreach(r.inputs, i, in) {
    int n = 0;
    if (json_is_string(in)) {
      if (prompt_tokenize(&s->pb, json_string_value(in), json_string_length(in), true, true, "input", &ids, &n, &pe))
        goto prompt_fail;
    } else {
      n = (int)json_array_size(in);
      ids = malloc((size_t)(n ? n : 1) * sizeof *ids);
      if (!ids) {
        oai_seterr(&e, 500, "internal_error", NULL, "out of memory");
        goto fail;
      }
      for (int j = 0; j < n; j++) ids[j] = (int32_t)json_integer_value(json_array_get(in, (size_t)j));
      if (prompt_check_ids(&s->pb, ids, n, "input", &pe)) goto prompt_fail;
    }
    if (n < 1) {
      oai_seterr(&e, 400, "invalid_value", "input", "input %zu has no tokens", i);
      goto fail;
    }
    engine_params p;
    memset(&p, 0, sizeof p);
    p.prompt = ids;
    p.n_prompt = n;
    p.max_tokens = 1;
    pw_sampler_params_default(&p.sampling);
    p.embedding = true;
    p.deadline_ns = deadline;
    ev_gen_embedding_input(&rcpt.gen, ids, n);
    if (submit(s, &p, "input", &req, &e)) goto fail;
    free(ids);
    ids = NULL;
    bool cancelled = false;
    for (;;) {
      if (wait_event(s, req, fd, ev, -1, &cancelled)) {
        if (!flag(&s->stopping)) metrics_disconnect(&s->m);
        k->log.gone = true;
        res = MHD_NO;
        goto done;
      }
      if (ev->type != ENGINE_EV_TOKEN) break;
    }
    if (ev->type == ENGINE_EV_ERROR) {
      oai_error_from_status(&e, ev->status, ev->message);
      goto fail;
    }
    const float *vec = engine_embedding(req);
    if (!vec) {
      oai_seterr(&e, 500, "internal_error", NULL, "the engine returned no embedding");
      goto fail;
    }
    total += ev->usage.prompt_tokens ? ev->usage.prompt_tokens : n;
    ev_gen_vector(&rcpt.gen, vec, n_embd);
    sbuf_printf(&out, "%s{\"object\":\"embedding\",\"index\":%zu,\"embedding\":", i ? "," : "", i);
    if (r.base64) {
      put_base64(&out, (const unsigned char *)vec, (size_t)n_embd * sizeof(float));
    } else {
      sbuf_put(&out, "[", 1);
      for (int j = 0; j < n_embd; j++) {
        if (j) sbuf_put(&out, ",", 1);
        sbuf_json_num(&out, vec[j]);
      }
      sbuf_put(&out, "]", 1);
    }
    sbuf_put(&out, "}", 1);
    engine_release(req);
    req = NULL;
  }
  sbuf_puts(&out, "],\"model\":");
  sbuf_json_str(&out, engine_model_id(s->e), strlen(engine_model_id(s->e)));
  sbuf_printf(&out, ",\"usage\":{\"prompt_tokens\":%lld,\"total_tokens\":%lld}", total, total);
  oai_resp ro;
  memset(&ro, 0, sizeof ro);
  if (srv_receipt_end(&rcpt, NULL, s->receipt_key, k->t0, 0, pw_now_ns(), &ro, &e)) goto fail;
  oai_put_receipt(&ro, &out);
  sbuf_put(&out, "}", 1);
  res = queue_json(k, c, 200, &out);
  goto done;
prompt_fail:
  oai_error_from_prompt(&e, &pe);
fail:
  res = queue_error(k, c, &e);
done:
  engine_release(req);
  srv_receipt_free(&rcpt);
  free(ids);
  free(ev);
  sbuf_free(&out);
  oai_request_free(&r);
  return res;
}

static enum MHD_Result handle_tokenize(conn *k, struct MHD_Connection *c) {
  server *s = k->s;
  oai_request r;
  oai_error e;
  prompt_error pe;
  int32_t *ids = NULL;
  int n = 0;
  sbuf out = {0};
  enum MHD_Result res;
  if (oai_parse(OAI_TOKENIZE, k->body.data, k->body.len, &r, &e)) return queue_error(k, c, &e);
  if (prompt_tokenize(&s->pb, r.text, r.text_len, r.add_special, r.parse_special, "content", &ids, &n, &pe)) {
    oai_error_from_prompt(&e, &pe);
    res = queue_error(k, c, &e);
    goto done;
  }
  sbuf_puts(&out, "{\"tokens\":[");
  for (int i = 0; i < n; i++) {
    if (i) sbuf_put(&out, ",", 1);
    if (r.with_pieces) {
      char piece[256];
      int pn = prompt_piece(&s->pb, ids[i], piece, (int)sizeof piece);
      sbuf_printf(&out, "{\"id\":%d,\"piece\":", ids[i]);
      sbuf_json_str(&out, piece, (size_t)pn);
      sbuf_put(&out, "}", 1);
    } else {
      sbuf_printf(&out, "%d", ids[i]);
    }
  }
  sbuf_puts(&out, "]}");
  res = queue_json(k, c, 200, &out);
done:
  free(ids);
  sbuf_free(&out);
  oai_request_free(&r);
  return res;
}

static enum MHD_Result handle_detokenize(conn *k, struct MHD_Connection *c) {
  server *s = k->s;
  oai_request r;
  oai_error e;
  prompt_error pe;
  sbuf out = {0};
  char *text = NULL;
  enum MHD_Result res;
  if (oai_parse(OAI_DETOKENIZE, k->body.data, k->body.len, &r, &e)) return queue_error(k, c, &e);
  if (prompt_check_ids(&s->pb, r.tokens, r.n_tokens, "tokens", &pe)) goto prompt_fail;
  size_t need = 0, cap = (size_t)r.n_tokens * 16 + 16;
  char err[PW_ERRMAX];
  for (int attempt = 0; attempt < 2; attempt++) {
    free(text);
    if (!(text = malloc(cap))) {
      oai_seterr(&e, 500, "internal_error", NULL, "out of memory");
      goto fail;
    }
    int rc = tok_decode(s->pb.vocab, r.tokens, (size_t)r.n_tokens, TOK_DETOK_SPECIAL, text, cap, &need, err);
    if (rc == 0) break;
    if (rc != PW_ERANGE || attempt) {
      oai_seterr(&e, 400, "invalid_value", "tokens", "cannot detokenize: %s", err);
      goto fail;
    }
    cap = need + 1;
  }
  sbuf_puts(&out, "{\"content\":");
  sbuf_json_str(&out, text, need);
  sbuf_puts(&out, "}");
  res = queue_json(k, c, 200, &out);
  goto done;
prompt_fail:
  oai_error_from_prompt(&e, &pe);
fail:
  res = queue_error(k, c, &e);
done:
  free(text);
  sbuf_free(&out);
  oai_request_free(&r);
  return res;
}

/* ---- GET endpoints ----------------------------------------------------- */

static enum MHD_Result handle_get(conn *k, struct MHD_Connection *c, const char *url) {
  server *s = k->s;
  sbuf out = {0};
  oai_error e;
  const char *id = engine_model_id(s->e);
  switch (k->rt) {
  case R_HEALTH:
    if (flag(&s->quiescing)) {
      sbuf_puts(&out, "{\"status\":\"shutting_down\"}");
      return queue_json(k, c, 503, &out);
    }
    if (flag(&s->draining)) {
      sbuf_puts(&out, "{\"status\":\"draining\"}");
      return queue_json(k, c, 503, &out);
    }
    sbuf_puts(&out, "{\"status\":\"ok\"}");
    return queue_json(k, c, 200, &out);
  case R_METRICS: {
    engine_stats st;
    engine_get_stats(s->e, &st);
    metrics_render(&s->m, &st, &out);
    return queue(k, c, 200, "text/plain; version=0.0.4; charset=utf-8", &out, NULL, NULL);
  }
  case R_MODELS:
    sbuf_puts(&out, "{\"object\":\"list\",\"data\":[");
    oai_render_model(id, s->started, &out);
    sbuf_puts(&out, "]}");
    return queue_json(k, c, 200, &out);
  case R_MODEL: {
    const char *want = strstr(url, "/models/") + strlen("/models/");
    if (strcmp(want, id)) {
      oai_seterr(&e, 404, "model_not_found", "model", "The model '%.100s' does not exist", want);
      return queue_error(k, c, &e);
    }
    oai_render_model(id, s->started, &out);
    return queue_json(k, c, 200, &out);
  }
  case R_RECEIPT_KEY: {
    char *pem = NULL, fp[65], err[PW_ERRMAX];
    if (!s->receipt_key) {
      oai_seterr(&e, 404, "no_receipt_key", NULL, "this server does not sign receipts (start it with --receipt-key)");
      return queue_error(k, c, &e);
    }
    if (ev_key_public_pem(s->receipt_key, &pem, err) || ev_key_fingerprint(s->receipt_key, fp, err)) {
      free(pem);
      oai_seterr(&e, 500, "internal_error", NULL, "%s", err);
      return queue_error(k, c, &e);
    }
    sbuf_puts(&out, "{\"alg\":\"ed25519\",\"public_key_pem\":");
    sbuf_json_str(&out, pem, strlen(pem));
    sbuf_printf(&out, ",\"key_sha256\":\"%s\"}", fp);
    free(pem);
    return queue_json(k, c, 200, &out);
  }
  default:
    oai_seterr(&e, 500, "internal_error", NULL, "no handler");
    return queue_error(k, c, &e);
  }
}

/* ---- routing ----------------------------------------------------------- */

static route find_route(const char *url, metrics_endpoint *ep) {
  const char *u = url;
  if (!strncmp(u, "/v1/", 4)) u += 3;
  *ep = MEP_OTHER;
  if (!strcmp(u, "/chat/completions")) return *ep = MEP_CHAT, R_CHAT;
  if (!strcmp(u, "/completions")) return *ep = MEP_COMPLETIONS, R_COMPLETIONS;
  if (!strcmp(u, "/embeddings")) return *ep = MEP_EMBEDDINGS, R_EMBEDDINGS;
  if (!strcmp(u, "/models")) return *ep = MEP_MODELS, R_MODELS;
  if (!strcmp(u, "/receipts/key")) return *ep = MEP_OTHER, R_RECEIPT_KEY;
  if (!strncmp(u, "/models/", 8) && u[8]) return *ep = MEP_MODELS, R_MODEL;
  if (!strcmp(url, "/health")) return *ep = MEP_HEALTH, R_HEALTH;
  if (!strcmp(url, "/metrics")) return *ep = MEP_METRICS, R_METRICS;
  if (!strcmp(url, "/tokenize")) return *ep = MEP_TOKENIZE, R_TOKENIZE;
  if (!strcmp(url, "/detokenize")) return *ep = MEP_DETOKENIZE, R_DETOKENIZE;
  return R_NONE;
}

static bool is_get_route(route r) {
  return r == R_MODELS || r == R_MODEL || r == R_HEALTH || r == R_METRICS || r == R_RECEIPT_KEY;
}

typedef struct hdr_count {
  int content_length, transfer_encoding, host;
} hdr_count;

static enum MHD_Result count_header(void *cls, enum MHD_ValueKind kind, const char *key, const char *value) {
  (void)kind;
  (void)value;
  hdr_count *h = cls;
  if (!strcasecmp(key, MHD_HTTP_HEADER_CONTENT_LENGTH)) h->content_length++;
  else if (!strcasecmp(key, MHD_HTTP_HEADER_TRANSFER_ENCODING)) h->transfer_encoding++;
  else if (!strcasecmp(key, MHD_HTTP_HEADER_HOST)) h->host++;
  return MHD_YES;
}

/* Framing that intermediaries could read differently (request smuggling):
 * more than one Content-Length, Content-Length with Transfer-Encoding, and
 * HTTP/1.1 without exactly one Host. NULL when the request is fine. */
static const char *bad_framing(struct MHD_Connection *c, const char *version) {
  hdr_count h = {0, 0, 0};
  MHD_get_connection_values(c, MHD_HEADER_KIND, count_header, &h);
  if (h.content_length > 1) return "more than one Content-Length header";
  if (h.content_length && h.transfer_encoding) return "both Content-Length and Transfer-Encoding";
  if (version && !strcmp(version, MHD_HTTP_VERSION_1_1) && h.host != 1) return "HTTP/1.1 needs exactly one Host header";
  return NULL;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *upload_data, size_t *upload_data_size,
                                  void **con_cls) {
  server *s = cls;
  conn *k = *con_cls;
  oai_error e;
  if (!k) {
    /* First call: headers only. Everything that can be decided without the
     * body is decided here, before any of it is read. */
    if (!(k = calloc(1, sizeof *k))) return MHD_NO;
    k->s = s;
    k->t0 = pw_now_ns();
    *con_cls = k;
    __atomic_fetch_add(&s->inflight, 1, __ATOMIC_ACQ_REL);
    k->rt = find_route(url, &k->ep);
    k->log.ep = k->ep;
    k->log.t0 = k->t0;
    oai_new_id("req-", k->log.id, sizeof k->log.id);
    bool get = !strcmp(method, "GET") || !strcmp(method, "HEAD");
    bool post = !strcmp(method, "POST");
    const char *framing = bad_framing(c, version);
    if (framing) {
      oai_seterr(&e, 400, "invalid_http", NULL, "Malformed request: %s", framing);
      return queue_error(k, c, &e);
    }
    if (k->rt == R_NONE) {
      oai_seterr(&e, 404, "unknown_url", NULL, "Unknown request URL: %.16s %.200s", method, url);
      return queue_error(k, c, &e);
    }
    if (is_get_route(k->rt) ? !get : !post) {
      oai_seterr(&e, 405, "method_not_allowed", NULL, "Method %.16s is not allowed for %.200s", method, url);
      return queue_error(k, c, &e);
    }
    if (k->rt != R_HEALTH) {
      auth_result who = auth_identify(
          s->keys, MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION), k->tenant);
      if (who == AUTH_DENIED) {
        oai_seterr(&e, 401, "invalid_api_key", NULL,
                   "Missing or incorrect API key: pass it as 'Authorization: Bearer <key>'");
        return queue_error(k, c, &e);
      }
      k->anonymous = who == AUTH_OPEN;
    }
    const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    if (cl && strtoull(cl, NULL, 10) > s->max_body) {
      /* A client that sent the body without waiting for 100-continue only
       * reads our answer after its write completes: drain (and drop) a
       * moderately oversized body, then answer 413. Absurd sizes, or
       * clients that wait, get the answer at once. */
      const char *expect = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_EXPECT);
      unsigned long long want = strtoull(cl, NULL, 10);
      if (!expect && want <= (unsigned long long)s->max_body * 8) {
        k->too_large = true;
        return MHD_YES;
      }
      oai_seterr(&e, 413, "request_too_large", NULL, "The request body exceeds the limit of %zu bytes", s->max_body);
      return queue_error(k, c, &e);
    }
    if (get) return handle_get(k, c, url);
    return MHD_YES;
  }
  if (*upload_data_size) {
    /* Body bytes: kept up to the limit, then dropped (answered with 413). */
    if (!k->answered && !k->too_large) {
      if (k->body.len + *upload_data_size > s->max_body) {
        k->too_large = true;
        sbuf_free(&k->body);
      } else {
        sbuf_put(&k->body, upload_data, *upload_data_size);
      }
    }
    *upload_data_size = 0;
    return MHD_YES;
  }
  if (k->answered) return MHD_YES;
  if (k->too_large) {
    oai_seterr(&e, 413, "request_too_large", NULL, "The request body exceeds the limit of %zu bytes", s->max_body);
    return queue_error(k, c, &e);
  }
  if (k->body.oom) {
    oai_seterr(&e, 500, "internal_error", NULL, "out of memory");
    return queue_error(k, c, &e);
  }
  switch (k->rt) {
  case R_CHAT:
  case R_COMPLETIONS: return handle_generate(k, c);
  case R_EMBEDDINGS: return handle_embeddings(k, c);
  case R_TOKENIZE: return handle_tokenize(k, c);
  case R_DETOKENIZE: return handle_detokenize(k, c);
  default: return handle_get(k, c, url);
  }
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe) {
  (void)cls;
  (void)c;
  conn *k = *con_cls;
  if (!k) return;
  if (!k->streamed) {
    if (toe != MHD_REQUEST_TERMINATED_COMPLETED_OK) k->log.gone = true;
    log_emit(k->s, &k->log);
  }
  __atomic_fetch_sub(&k->s->inflight, 1, __ATOMIC_ACQ_REL);
  sbuf_free(&k->body);
  free(k);
  *con_cls = NULL;
}

static void mhd_log(void *cls, const char *fmt, va_list ap) {
  (void)cls;
  if (pw_log_level() < PW_LOG_DEBUG) return;
  char msg[512];
  vsnprintf(msg, sizeof msg, fmt, ap);
  pw_log(PW_LOG_DEBUG, "http: %s", msg);
}

/* ---- lifecycle --------------------------------------------------------- */

/* The replica's name: the given one when it is a valid header value and
 * Prometheus label (a short token, nothing to escape), else the host name
 * and port. out holds SERVER_REPLICA_ID_MAX + 1 bytes. */
static int replica_name(const char *want, int port, char *out, char *err) {
  static const char ok[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._:@/+-";
  if (want) {
    size_t n = strlen(want);
    if (n < 1 || n > SERVER_REPLICA_ID_MAX || strspn(want, ok) != n)
      return pw_seterr(err, PW_EINVAL, "invalid replica id '%.120s' (1..%d characters of A-Z a-z 0-9 . _ : @ / + -)",
                       want, SERVER_REPLICA_ID_MAX);
    memcpy(out, want, n + 1);
    return 0;
  }
  char host[256] = "";
  if (gethostname(host, sizeof host - 1)) host[0] = 0;
  size_t n = strspn(host, ok); /* a host name is a token already; keep its valid start */
  if (n > SERVER_REPLICA_ID_MAX - 6) n = SERVER_REPLICA_ID_MAX - 6;
  if (!n) snprintf(out, SERVER_REPLICA_ID_MAX + 1, "localhost:%d", port);
  else snprintf(out, SERVER_REPLICA_ID_MAX + 1, "%.*s:%d", (int)n, host, port);
  return 0;
}

int server_start(const server_opts *o, engine *e, server **out, char *err) {
  *out = NULL;
  server *s = calloc(1, sizeof *s);
  if (!s) return pw_seterr(err, PW_ENOMEM, "out of memory");
  s->e = e;
  s->quiesced_fd = -1;
  s->max_body = o->max_body ? o->max_body : SERVER_DEFAULT_MAX_BODY;
  s->timeout_s = o->request_timeout_s > 0 ? o->request_timeout_s : 0;
  s->keepalive_ms = o->keepalive_ms > 0 ? o->keepalive_ms : 15000;
  s->retry_after_s = o->retry_after_s > 0 ? o->retry_after_s : 1;
  s->spec_mode = o->spec_mode && *o->spec_mode && strcmp(o->spec_mode, "off") ? o->spec_mode : NULL;
  s->log_requests = o->log_requests;
  s->log_out = o->log_out;
  pthread_mutex_init(&s->log_mu, NULL);
  s->started = (long long)time(NULL);
  metrics_init(&s->m);
  int rc = auth_keys_create(o->api_key_file, o->api_keys, &s->keys, err);
  if (rc) goto fail;
  rc = prompt_builder_init(&s->pb, engine_vocab(e), engine_chat_template(e), err);
  if (rc) goto fail;
  const tok_vocab *voc = engine_vocab(e);
  rc = ev_model_info_init(&s->evm, engine_model_id(e), engine_model_sha256(e), engine_model_size(e),
                          s->pb.template_src, tok_kind(voc), tok_pre(voc), tok_n_vocab(voc), err);
  if (rc) goto fail;
  if (o->receipt_key_path && (rc = ev_key_load_private(o->receipt_key_path, &s->receipt_key, err))) goto fail;

  const char *host = o->host && *o->host ? o->host : "127.0.0.1";
  struct sockaddr_storage ss;
  memset(&ss, 0, sizeof ss);
  unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ITC | MHD_USE_POLL |
                   MHD_USE_ERROR_LOG;
  if (o->port < 0 || o->port > 65535) {
    rc = pw_seterr(err, PW_EINVAL, "invalid port %d", o->port);
    goto fail;
  }
  struct sockaddr_in *a4 = (struct sockaddr_in *)&ss;
  struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)&ss;
  if (inet_pton(AF_INET, host, &a4->sin_addr) == 1) {
    a4->sin_family = AF_INET;
    a4->sin_port = htons((uint16_t)o->port);
  } else if (inet_pton(AF_INET6, host, &a6->sin6_addr) == 1) {
    a6->sin6_family = AF_INET6;
    a6->sin6_port = htons((uint16_t)o->port);
    flags |= MHD_USE_IPv6;
  } else {
    rc = pw_seterr(err, PW_EINVAL, "invalid listen address '%s' (give an IPv4 or IPv6 literal)", host);
    goto fail;
  }
  s->d = MHD_start_daemon(flags, (uint16_t)o->port, NULL, NULL, on_request, s,
                          MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&ss,
                          MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
                          MHD_OPTION_CONNECTION_LIMIT, (unsigned)(o->max_connections > 0 ? o->max_connections : 256),
                          MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)120,
                          MHD_OPTION_LISTENING_ADDRESS_REUSE, (unsigned)1,
                          MHD_OPTION_EXTERNAL_LOGGER, mhd_log, s,
                          MHD_OPTION_END);
  if (!s->d) {
    rc = pw_seterr(err, PW_EIO, "cannot listen on %s:%d (address in use or not permitted)", host, o->port);
    goto fail;
  }
  const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->d, MHD_DAEMON_INFO_LISTEN_FD);
  struct sockaddr_storage bound;
  socklen_t bl = sizeof bound;
  if (!di || getsockname(di->listen_fd, (struct sockaddr *)&bound, &bl)) {
    rc = pw_seterr(err, PW_EIO, "cannot read the listening port");
    goto fail;
  }
  s->port = bound.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)&bound)->sin6_port)
                                        : ntohs(((struct sockaddr_in *)&bound)->sin_port);
  if ((rc = replica_name(o->replica_id, s->port, s->replica, err))) goto fail;
  metrics_set_replica(&s->m, s->replica);
  *out = s;
  return 0;
fail:
  if (s->d) MHD_stop_daemon(s->d);
  prompt_builder_free(&s->pb);
  ev_key_destroy(s->receipt_key);
  auth_keys_destroy(s->keys);
  pthread_mutex_destroy(&s->log_mu);
  free(s);
  return rc;
}

int server_port(const server *s) { return s->port; }

void server_drain_notice(server *s) {
  if (s) __atomic_store_n(&s->draining, 1, __ATOMIC_RELEASE);
}

void server_quiesce(server *s) {
  if (!s || __atomic_exchange_n(&s->quiescing, 1, __ATOMIC_ACQ_REL)) return;
  MHD_socket fd = MHD_quiesce_daemon(s->d);
  s->quiesced_fd = fd == MHD_INVALID_SOCKET ? -1 : fd;
  /* Stop listening now (shutdown takes effect at once; close would wait
   * for the HTTP thread to leave its poll): otherwise the kernel completes
   * handshakes that nobody answers until exit, and with SO_REUSEPORT a
   * successor bound to the same port would share connections with us. */
  if (s->quiesced_fd >= 0) shutdown(s->quiesced_fd, SHUT_RDWR);
}

int server_drain(server *s, int grace_ms) {
  uint64_t end = pw_now_ns() + (uint64_t)(grace_ms > 0 ? grace_ms : 0) * 1000000u;
  for (;;) {
    if (__atomic_load_n(&s->inflight, __ATOMIC_ACQUIRE) == 0) return 0;
    if (pw_now_ns() >= end) return PW_ETIMEOUT;
    struct timespec ts = {0, 10 * 1000000L};
    nanosleep(&ts, NULL);
  }
}

void server_stop(server *s) {
  if (!s) return;
  __atomic_store_n(&s->stopping, 1, __ATOMIC_RELEASE);
  server_quiesce(s);
  MHD_stop_daemon(s->d);
  /* After quiesce the listen socket is ours to close. */
  if (s->quiesced_fd >= 0) close(s->quiesced_fd);
  prompt_builder_free(&s->pb);
  ev_key_destroy(s->receipt_key);
  auth_keys_destroy(s->keys);
  pthread_mutex_destroy(&s->log_mu);
  free(s);
}
