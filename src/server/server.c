/* server.c - libmicrohttpd glue: the route table, auth, connection
 * deadlines, body limits, CORS, the request log, and the one generation
 * core (prompt -> engine -> events, with disconnect detection) that every
 * API drives through api.h. Bodies are rendered by the adapters: oai.c
 * (OpenAI), api_ollama.c, api_anthropic.c, api_responses.c. See server.h. */
#include "server/server.h"

#include "base/clock.h"
#include "base/error.h"
#include "base/log.h"
#include "server/api.h"
#include "server/auth.h"
#include "server/chatout.h"
#include "server/metrics.h"
#include "server/models.h"
#include "server/oai.h"
#include "server/receipts.h"
#include "server/sbuf.h"
#include "tok/tok.h"

#include <arpa/inet.h>
#include <errno.h>
#include <malloc.h>
#include <microhttpd.h>
#include <netdb.h>
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
#define IDLE_TIMEOUT_S 120   /* MHD's inactivity timeout once a request is being answered */
#define WATCH_TICK_MS 200    /* how often the deadline watchdog looks */
#define TRIM_AFTER_BYTES ((size_t)1 << 20) /* bodies this large hand their memory back (malloc_trim) */
#define MAX_CORS_ORIGINS 16

typedef struct conn conn;
typedef enum MHD_Result (*route_fn)(conn *k, struct MHD_Connection *c);

enum { RM_GET = 1u, RM_POST = 2u, RM_DELETE = 4u }; /* GET implies HEAD */
enum { RP_ROOT = 1u, RP_V1 = 2u };  /* where a path is served: /x, /v1/x */

/* One row per endpoint. A new endpoint is one row and one handler: the
 * dispatch, 404/405, the Allow header, CORS preflights, auth and the
 * metrics label all come from here. */
typedef struct route {
  const char *path;   /* without the /v1 prefix; a trailing "{id}" matches one or more bytes */
  unsigned prefixes;  /* RP_*: under which prefixes the path is served */
  unsigned methods;   /* RM_* */
  const char *metric; /* the endpoint label of power_http_requests_total */
  bool is_public;     /* answered without an API key */
  route_fn fn;        /* runs once the body (if any) is in */
  api_error_fn err;   /* error bodies in the route's API shape; NULL = OpenAI's */
} route;

static enum MHD_Result handle_chat(conn *k, struct MHD_Connection *c);
static enum MHD_Result handle_completions(conn *k, struct MHD_Connection *c);
static enum MHD_Result handle_embeddings(conn *k, struct MHD_Connection *c);
static enum MHD_Result handle_tokenize(conn *k, struct MHD_Connection *c);
static enum MHD_Result handle_detokenize(conn *k, struct MHD_Connection *c);
static enum MHD_Result handle_models(conn *k, struct MHD_Connection *c);
static enum MHD_Result handle_model(conn *k, struct MHD_Connection *c);
static enum MHD_Result handle_health(conn *k, struct MHD_Connection *c);
static enum MHD_Result handle_metrics(conn *k, struct MHD_Connection *c);
static enum MHD_Result handle_receipt_key(conn *k, struct MHD_Connection *c);

static const route k_routes[] = {
    {"/chat/completions", RP_ROOT | RP_V1, RM_POST, "chat_completions", false, handle_chat, NULL},
    {"/completions", RP_ROOT | RP_V1, RM_POST, "completions", false, handle_completions, NULL},
    {"/embeddings", RP_ROOT | RP_V1, RM_POST, "embeddings", false, handle_embeddings, NULL},
    {"/rerank", RP_ROOT | RP_V1, RM_POST, "rerank", false, rerank_handle, NULL},
    {"/reranking", RP_ROOT | RP_V1, RM_POST, "rerank", false, rerank_handle, NULL},
    {"/models", RP_ROOT | RP_V1, RM_GET, "models", false, handle_models, NULL},
    {"/models/pull", RP_ROOT | RP_V1, RM_POST, "models_pull", false, models_pull, NULL},
    {"/models/{id}", RP_ROOT | RP_V1, RM_GET, "models", false, handle_model, NULL},
    {"/models/{id}", RP_ROOT | RP_V1, RM_POST, "models_admin", false, models_action, NULL},   /* .../load, /unload */
    {"/models/{id}", RP_ROOT | RP_V1, RM_DELETE, "models_admin", false, models_delete, NULL},
    {"/ps", RP_V1, RM_GET, "ps", false, models_ps, NULL},
    {"/health", RP_ROOT, RM_GET, "health", true, handle_health, NULL},
    {"/metrics", RP_ROOT, RM_GET, "metrics", false, handle_metrics, NULL},
    {"/tokenize", RP_ROOT, RM_POST, "tokenize", false, handle_tokenize, NULL},
    {"/detokenize", RP_ROOT, RM_POST, "detokenize", false, handle_detokenize, NULL},
    {"/receipts/key", RP_ROOT | RP_V1, RM_GET, "receipts_key", false, handle_receipt_key, NULL},
    /* Ollama */
    {"/api/chat", RP_ROOT, RM_POST, "ollama_chat", false, ollama_chat, ollama_render_error},
    {"/api/generate", RP_ROOT, RM_POST, "ollama_generate", false, ollama_generate, ollama_render_error},
    {"/api/embed", RP_ROOT, RM_POST, "ollama_embed", false, ollama_embed, ollama_render_error},
    {"/api/embeddings", RP_ROOT, RM_POST, "ollama_embed", false, ollama_embeddings, ollama_render_error},
    {"/api/tags", RP_ROOT, RM_GET, "ollama_tags", false, ollama_tags, ollama_render_error},
    {"/api/show", RP_ROOT, RM_POST, "ollama_show", false, ollama_show, ollama_render_error},
    {"/api/ps", RP_ROOT, RM_GET, "ollama_ps", false, ollama_ps, ollama_render_error},
    {"/api/version", RP_ROOT, RM_GET, "ollama_version", false, ollama_version, ollama_render_error},
    {"/api/pull", RP_ROOT, RM_POST, "ollama_pull", false, ollama_pull, ollama_render_error},
    {"/api/delete", RP_ROOT, RM_DELETE, "ollama_delete", false, ollama_delete, ollama_render_error},
    /* Anthropic Messages */
    {"/messages", RP_V1, RM_POST, "messages", false, anth_messages, anth_render_error},
    {"/messages/count_tokens", RP_V1, RM_POST, "messages_count_tokens", false, anth_count_tokens, anth_render_error},
    /* OpenAI Responses */
    {"/responses", RP_V1, RM_POST, "responses", false, resp_create, NULL},
    {"/responses/{id}", RP_V1, RM_GET, "responses", false, resp_get, NULL},
    /* The chat page: public, it asks for the API key itself */
    {"/", RP_ROOT, RM_GET, "ui", true, ui_page, NULL},
    {"/ui/{id}", RP_ROOT, RM_GET, "ui", true, ui_asset, NULL},
};
#define N_ROUTES ((int)(sizeof k_routes / sizeof k_routes[0]))

/* Per-TCP-connection state (MHD's socket context): the deadline the
 * watchdog enforces. Linked in server.watch while the connection lives. */
typedef enum watch_phase {
  W_HEADERS = 0, /* waiting for (the rest of) a request's headers, or idle between requests */
  W_BODY,        /* headers in, body arriving */
  W_BUSY         /* being answered: no deadline here (admission deadlines, stream keep-alives) */
} watch_phase;

typedef struct watch {
  struct watch *prev, *next;
  int fd;
  watch_phase phase;
  uint64_t deadline; /* pw_now_ns by which the phase must end; 0 = none */
  bool cut;          /* the watchdog shut the socket down */
  int requests;      /* requests whose headers arrived on this connection */
} watch;

/* An error answer written straight to the socket, for a request MHD has
 * not handed to us yet. Best effort: the connection closes anyway. */
static void send_raw_error(int fd, const char *status, const char *type, const char *code, const char *msg) {
  char body[256], all[512];
  int bn = snprintf(body, sizeof body,
                    "{\"error\":{\"message\":\"%s\",\"type\":\"%s\",\"param\":null,\"code\":\"%s\"}}", msg, type,
                    code);
  int n = snprintf(all, sizeof all,
                   "HTTP/1.1 %s\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
                   status, bn, body);
  if (n > 0 && n < (int)sizeof all) {
    ssize_t w = send(fd, all, (size_t)n, MSG_NOSIGNAL | MSG_DONTWAIT);
    (void)w;
  }
}

struct server {
  struct MHD_Daemon *d;
  srv_model single;  /* one-model serving: the model (its engine borrowed) */
  srv_models *models; /* store serving (owned); NULL = one model */
  auth_keys *keys;   /* owned */
  metrics m;
  metrics_endpoint route_ep[N_ROUTES]; /* each row's metrics label */
  size_t max_body;
  double timeout_s;
  int keepalive_ms;
  int retry_after_s;
  uint64_t header_ns, body_ns; /* deadlines: headers complete / body complete */
  const char *spec_mode; /* borrowed (server_opts); NULL = speculation off */
  int log_requests;      /* server_opts.log_requests */
  bool log_json;         /* server_opts.log_json */
  FILE *log_out;         /* borrowed; NULL = the process log (stderr) */
  pthread_mutex_t log_mu; /* one request line at a time on log_out */
  char *cors;            /* owned copy of server_opts.cors_origins; NULL = CORS off */
  const char *cors_list[MAX_CORS_ORIGINS]; /* views into cors */
  int n_cors;            /* 0 with cors set = "*" */
  int port;
  int listen_fd;     /* ours until MHD owns it (MHD_OPTION_LISTEN_SOCKET) */
  int quiesced_fd;   /* listen socket handed back by MHD_quiesce_daemon; -1 = none */
  int stopping;      /* atomic flag: server_stop in progress */
  int quiescing;     /* atomic flag: not accepting any more */
  int draining;      /* atomic flag: /health says "draining" (server_drain_notice) */
  char replica[SERVER_REPLICA_ID_MAX + 1]; /* X-Power-Replica */
  int inflight;      /* atomic: requests between arrival and completion */
  long long started; /* Unix seconds, the model's "created" */
  ev_key *receipt_key; /* owned; NULL = receipts unsigned */
  resp_store *responses; /* owned: finished Responses-API answers */
  pthread_mutex_t watch_mu; /* guards the watch list and every watch's fields */
  pthread_cond_t watch_cv;
  watch *watch;             /* live connections */
  pthread_t watchdog;
  bool watchdog_on;
  bool watch_stop;          /* under watch_mu */
};

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
struct conn {
  server *s;
  const route *rt;      /* NULL: no route matched */
  char *arg;            /* owned: the "{id}" part of the path */
  metrics_endpoint ep;
  watch *w;             /* borrowed: the connection's watch (may be NULL) */
  sbuf body;
  size_t body_seen;     /* bytes received, kept or not */
  bool too_large;
  bool answered;        /* a response was queued */
  bool streamed;        /* the log record moved to a stream */
  bool anonymous;       /* no API keys configured: tenant "anonymous" */
  bool has_pending;     /* an error decided at the headers, answered once the (empty) body is in */
  unsigned preflight;   /* a CORS preflight: the path's RM_* methods; 0 = not one */
  unsigned allow;       /* a 405: every RM_* method of the path's rows (the Allow header) */
  api_error_fn err;     /* error bodies' shape when no row matched (Ollama's under /api/); NULL = OpenAI's */
  oai_error pending;
  const char *origin;   /* the allowed Origin to echo (view, valid during the request); NULL = none */
  uint8_t tenant[32];   /* the caller's API key digest (when !anonymous) */
  uint64_t t0;          /* pw_now_ns at arrival */
  req_log log;
  srv_model *m;         /* the request's model: the server's one, or once bound (srv_use_model) a
                         * store model held through ref; NULL = not bound yet */
  registry_ref *ref;    /* store serving: the held model, released when the request ends (or moved
                         * to its stream) */
  bool has_keep;        /* the request gave a keep_alive (keep_s seconds) */
  double keep_s;
  uint64_t load_ns;     /* store serving: time spent acquiring a model that was not loaded */
};

static bool flag(const int *p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE) != 0; }

/* ---- connection deadlines ---------------------------------------------- */

/* libmicrohttpd's own timeout is an inactivity timeout that every byte
 * resets, so a client trickling one header line every few seconds could
 * hold a connection (and its thread) forever. The watchdog gives the
 * headers and the body their own absolute deadlines: a connection that
 * misses one has its socket shut down, which makes MHD close it. */

static void watch_set(server *s, watch *w, watch_phase ph, uint64_t after_ns) {
  if (!w) return;
  pthread_mutex_lock(&s->watch_mu);
  w->phase = ph;
  w->deadline = after_ns ? pw_now_ns() + after_ns : 0;
  pthread_mutex_unlock(&s->watch_mu);
}

static void on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                          enum MHD_ConnectionNotificationCode toe) {
  server *s = cls;
  if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
    watch *w = calloc(1, sizeof *w);
    metrics_connections(&s->m, 1);
    *socket_context = w;
    if (!w) return; /* no deadline for this one; MHD's timeout still applies */
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    w->fd = ci ? ci->connect_fd : -1;
    w->phase = W_HEADERS;
    w->deadline = pw_now_ns() + s->header_ns;
    pthread_mutex_lock(&s->watch_mu);
    w->next = s->watch;
    if (s->watch) s->watch->prev = w;
    s->watch = w;
    pthread_mutex_unlock(&s->watch_mu);
  } else if (toe == MHD_CONNECTION_NOTIFY_CLOSED) {
    /* MHD closes the socket after this returns: unlinking under the lock
     * keeps the watchdog from shutting down an fd number reused later. */
    watch *w = *socket_context;
    metrics_connections(&s->m, -1);
    *socket_context = NULL;
    if (!w) return;
    pthread_mutex_lock(&s->watch_mu);
    if (w->prev) w->prev->next = w->next;
    else s->watch = w->next;
    if (w->next) w->next->prev = w->prev;
    pthread_mutex_unlock(&s->watch_mu);
    free(w);
  }
}

static void *watchdog_main(void *arg) {
  server *s = arg;
  pthread_mutex_lock(&s->watch_mu);
  while (!s->watch_stop) {
    uint64_t now = pw_now_ns();
    for (watch *w = s->watch; w; w = w->next) {
      if (w->cut || !w->deadline || now < w->deadline || w->fd < 0) continue;
      /* A request in progress gets a 408; an idle keep-alive connection
       * is just closed (an unsolicited answer would confuse its client). */
      if (w->phase == W_BODY || !w->requests)
        send_raw_error(w->fd, "408 Request Timeout", "timeout_error", "timeout",
                       w->phase == W_BODY ? "The request body did not arrive within its deadline"
                                          : "The request headers did not arrive within their deadline");
      shutdown(w->fd, SHUT_RDWR);
      w->cut = true;
      metrics_deadline_cut(&s->m);
    }
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += WATCH_TICK_MS * 1000000L;
    if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
    pthread_cond_timedwait(&s->watch_cv, &s->watch_mu, &ts);
  }
  pthread_mutex_unlock(&s->watch_mu);
  return NULL;
}

static watch *conn_watch(struct MHD_Connection *c) {
  const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
  return ci ? ci->socket_context : NULL;
}

/* ---- request log ------------------------------------------------------- */

static void log_free(req_log *l) {
  free(l->prompt);
  l->prompt = NULL;
  sbuf_free(&l->output);
}

/* One field of the request line: key=value in text, "key":value in JSON.
 * str: value is text (quoted in JSON; in text only when it may hold
 * spaces, i.e. quoted = true). */
static void log_field(sbuf *b, bool json, const char *key, const char *val, bool str, bool quoted) {
  if (json) {
    sbuf_printf(b, ",\"%s\":", key);
    if (str) sbuf_json_str(b, val, strlen(val));
    else sbuf_puts(b, val);
  } else {
    sbuf_printf(b, " %s=", key);
    if (quoted) sbuf_json_str(b, val, strlen(val));
    else sbuf_puts(b, val);
  }
}

static void log_num(sbuf *b, bool json, const char *key, const char *fmt, double v) {
  char num[48];
  snprintf(num, sizeof num, fmt, v);
  log_field(b, json, key, num, false, false);
}

/* Writes the request's line and frees the record's texts. Never the
 * prompt_cache_key; prompt and output text only with log_requests >= 2. */
static void log_emit(server *s, req_log *l) {
  if (s->log_requests <= 0) {
    log_free(l);
    return;
  }
  bool js = s->log_json;
  uint64_t now = pw_now_ns();
  char t[40];
  pw_log_time(t, sizeof t);
  sbuf b = {0};
  if (js) sbuf_printf(&b, "{\"time\":\"%s\",\"level\":\"info\",\"msg\":\"request\"", t);
  else sbuf_printf(&b, "%s power: request", t);
  log_field(&b, js, "id", l->id[0] ? l->id : "-", true, false);
  log_field(&b, js, "endpoint", metrics_endpoint_name(&s->m, l->ep), true, false);
  log_num(&b, js, "status", "%.0f", l->status);
  if (l->code[0]) log_field(&b, js, "error", l->code, true, false);
  if (l->have_usage) {
    log_num(&b, js, "prompt_tokens", "%.0f", l->usage.prompt_tokens);
    log_num(&b, js, "completion_tokens", "%.0f", l->usage.completion_tokens);
    log_num(&b, js, "cached_tokens", "%.0f", l->usage.cached_tokens);
    if (s->spec_mode) {
      log_num(&b, js, "spec_drafted", "%.0f", l->usage.spec_drafted);
      log_num(&b, js, "spec_accepted", "%.0f", l->usage.spec_accepted);
      log_num(&b, js, "target_passes", "%.0f", l->usage.target_passes);
    }
  }
  if (l->t_first) log_num(&b, js, "ttft_ms", "%.1f", (double)(l->t_first - l->t0) * 1e-6);
  log_num(&b, js, "total_ms", "%.1f", (double)(now - l->t0) * 1e-6);
  if (l->have_usage)
    log_field(&b, js, "finish", l->finish == ENGINE_FINISH_CANCEL ? "cancel" : oai_finish_str(l->finish), true, false);
  if (l->gone) log_field(&b, js, "client_gone", js ? "true" : "1", false, false);
  if (s->log_requests >= 2) {
    if (l->prompt) log_field(&b, js, "prompt", l->prompt, true, true);
    if (l->output.len || l->have_usage) {
      sbuf_put(&l->output, "", 1); /* NUL-terminate */
      log_field(&b, js, "output", l->output.data ? l->output.data : "", true, true);
    }
  }
  if (js) sbuf_put(&b, "}", 1);
  sbuf_put(&b, "\n", 1);
  if (!b.oom) {
    if (s->log_out) {
      pthread_mutex_lock(&s->log_mu);
      fwrite(b.data, 1, b.len, s->log_out);
      fflush(s->log_out);
      pthread_mutex_unlock(&s->log_mu);
    } else {
      pw_log_write(b.data, b.len);
    }
  }
  sbuf_free(&b);
  log_free(l);
}

/* ---- responses --------------------------------------------------------- */

/* The allowed-methods list of every row serving the request's path, e.g.
 * "GET, HEAD" (the Allow header and the CORS preflight answer). */
static void methods_str(unsigned m, bool options, char *out, size_t cap) {
  snprintf(out, cap, "%s%s%s%s%s%s", m & RM_GET ? "GET, HEAD" : "", (m & RM_GET) && (m & RM_POST) ? ", " : "",
           m & RM_POST ? "POST" : "", (m & RM_DELETE) && (m & (RM_GET | RM_POST)) ? ", " : "",
           m & RM_DELETE ? "DELETE" : "", options ? ", OPTIONS" : "");
}

static void add_cors(conn *k, struct MHD_Response *r) {
  if (!k->origin) return;
  MHD_add_response_header(r, "Access-Control-Allow-Origin", k->origin);
  MHD_add_response_header(r, "Access-Control-Expose-Headers", "X-Request-Id, X-Power-Replica, Retry-After");
  if (strcmp(k->origin, "*")) MHD_add_response_header(r, "Vary", "Origin");
}

static enum MHD_Result queue_resp(conn *k, struct MHD_Connection *c, int status, struct MHD_Response *r) {
  MHD_add_response_header(r, "X-Request-Id", k->log.id);
  MHD_add_response_header(r, "X-Power-Replica", k->s->replica);
  add_cors(k, r);
  enum MHD_Result ok = MHD_queue_response(c, (unsigned)status, r);
  MHD_destroy_response(r);
  k->answered = true;
  k->log.status = status;
  metrics_request(&k->s->m, k->ep, status);
  return ok;
}

static enum MHD_Result queue(conn *k, struct MHD_Connection *c, int status, const char *ctype, sbuf *b,
                             const char *hname, const char *hval) {
  if (b->oom) {
    sbuf_free(b);
    oai_error e;
    oai_seterr(&e, 500, "internal_error", NULL, "out of memory");
    oai_render_error(&e, b);
    status = 500;
    ctype = "application/json";
    hname = NULL;
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
  if (ctype) MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
  if (hname) MHD_add_response_header(r, hname, hval);
  return queue_resp(k, c, status, r);
}

static enum MHD_Result queue_json(conn *k, struct MHD_Connection *c, int status, sbuf *b) {
  return queue(k, c, status, "application/json", b, NULL, NULL);
}

static unsigned path_methods(const char *url);

static enum MHD_Result queue_error(conn *k, struct MHD_Connection *c, const oai_error *e) {
  sbuf b = {0};
  snprintf(k->log.code, sizeof k->log.code, "%s", e->code);
  metrics_refusal_count(&k->s->m, metrics_refusal_for(e->status, e->code));
  api_error_fn err = k->rt ? k->rt->err : k->err;
  if (err) err(e, &b);
  else oai_render_error(e, &b);
  char hv[64];
  const char *hn = NULL;
  if (e->status == 503) {
    snprintf(hv, sizeof hv, "%d", k->s->retry_after_s);
    hn = MHD_HTTP_HEADER_RETRY_AFTER;
  } else if (e->status == 401) {
    snprintf(hv, sizeof hv, "Bearer");
    hn = MHD_HTTP_HEADER_WWW_AUTHENTICATE;
  } else if (e->status == 405) {
    methods_str(k->allow ? k->allow : k->rt ? k->rt->methods : 0, k->s->cors != NULL, hv, sizeof hv);
    hn = MHD_HTTP_HEADER_ALLOW;
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
 * waiting for an answer. Bytes waiting to be read (a pipelined request)
 * are not a hangup. */
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

bool srv_client_gone(struct MHD_Connection *c) { return client_gone(conn_fd(c)); }

/* A request waiting for its model: gone when its client left or the
 * server stops. */
typedef struct acquire_watch {
  server *s;
  int fd;
} acquire_watch;

static bool acquire_gone(void *arg) {
  const acquire_watch *w = arg;
  return client_gone(w->fd) || flag(&w->s->stopping);
}

/* Waits for the request's next event up to wait_ms (-1: until one comes).
 * Returns 0 with ev filled, PW_ETIMEOUT when wait_ms passed, PW_ECANCELED
 * when the client went away (the request has been cancelled) or the server
 * is stopping and the engine did not end the request in time. The client
 * is checked after every event as well as every WAIT_SLICE_MS of silence,
 * so a request whose client left stops within a step even while tokens
 * keep coming (a poll without waiting costs about a microsecond). */
static int wait_event(server *s, engine_req *req, int fd, engine_event *ev, int wait_ms, bool *cancelled) {
  uint64_t start = pw_now_ns();
  uint64_t cancel_at = 0;
  for (;;) {
    int rc = engine_next(req, ev, WAIT_SLICE_MS);
    if (rc == 0 && (cancel_at || ev->type != ENGINE_EV_TOKEN || !client_gone(fd))) return 0;
    uint64_t now = pw_now_ns();
    if (!cancel_at && client_gone(fd)) {
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

static int build_prompt(const srv_model *m, oai_kind kind, oai_request *r, size_t pi, int32_t **out, int *n_out,
                        char **rendered, size_t *rendered_len, oai_error *e);
static int submit(srv_model *m, const engine_params *p, const char *param, engine_req **req, oai_error *e);
static void usage_add(engine_usage *sum, const engine_usage *u, bool with_prompt);

/* Streaming state, owned by the MHD response (freed by stream_free).
 * Several choices stream one after the other: when one ends, the next is
 * submitted and its chunks carry its index. */
typedef struct stream {
  server *s;
  engine_req *req;
  int fd;
  oai_resp o;
  oai_request r;  /* owned: the request (its stop strings, logit bias and grammar back p) */
  int32_t *prompt; /* owned: the current prompt's ids (p.prompt) */
  int n_prompt;
  engine_params p; /* the current choice's parameters */
  int per, total;  /* choices per prompt, and in all */
  engine_usage sum; /* usage of the finished choices */
  bool include_usage;
  bool want_lp;
  bool sent_role;
  bool have_ev;   /* ev holds an event not yet rendered */
  bool finished;  /* the terminal event has been rendered */
  bool gone;      /* the client went away */
  uint64_t t0, t_last;
  int n_tokens;
  oai_logprobs lp;
  chatout co;     /* chat: content, reasoning and tool-call deltas */
  sbuf out;
  size_t out_pos;
  req_log log;    /* moved from the conn; written by stream_free */
  srv_receipt rcpt; /* moved from srv_generate; used when the stream has one choice */
  const gen_api *api; /* the API's renderers */
  void *ctx;          /* owned: the adapter's state (api->ctx_free) */
  srv_model *m;       /* the request's model */
  registry_ref *ref;  /* moved from the conn: released by stream_free */
  bool has_keep;
  double keep_s;
  engine_event ev;
} stream;

/* What the renderers see of a stream now. */
static void stream_view(const stream *st, gen_view *v) {
  memset(v, 0, sizeof *v);
  v->r = &st->r;
  v->o = &st->o;
  v->n_prompt = st->n_prompt;
  v->usage = st->sum;
  v->finish = st->log.finish;
  v->stop_index = st->ev.type == ENGINE_EV_DONE ? st->ev.stop_index : -1;
  v->t0 = st->t0;
  v->t_first = st->log.t_first;
  v->ctx = st->ctx;
}

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

/* Submits the stream's next choice (a new prompt every `per` choices;
 * choice j of a prompt samples with seed + j). 0, or PW_EINVAL with e set. */
static int stream_next(stream *st, oai_error *e) {
  int idx = st->o.index + 1, choice = idx % st->per;
  if (choice == 0) {
    free(st->prompt);
    st->prompt = NULL;
    if (build_prompt(st->m, st->o.kind, &st->r, (size_t)(idx / st->per), &st->prompt, &st->n_prompt, NULL, NULL, e))
      return PW_EINVAL;
    if (st->n_prompt < 1) return oai_seterr(e, 400, "invalid_value", "prompt", "the prompt is empty");
    st->p.prompt = st->prompt;
    st->p.n_prompt = st->n_prompt;
  }
  st->p.sampling.seed = st->r.sampling.seed + (uint64_t)choice;
  chatout_free(&st->co); /* each choice is parsed on its own */
  if (chatout_init(&st->co, &st->m->tc, &st->r)) return oai_seterr(e, 500, "internal_error", NULL, "out of memory");
  engine_release(st->req);
  st->req = NULL;
  if (submit(st->m, &st->p, st->o.kind == OAI_CHAT ? "messages" : "prompt", &st->req, e)) return PW_EINVAL;
  st->o.index = idx;
  return 0;
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
      oai_logprobs_add(&st->lp, prompt_piece, &st->m->pb, ev->token, ev->logprob, ev->top, ev->n_top,
                       (size_t)ev->text_len);
    }
    if (st->total == 1) ev_gen_token(&st->rcpt.gen, ev->token, ev->text, (size_t)ev->text_len);
    if (st->api == &oai_gen_api) { /* OpenAI: content, reasoning and tool-call deltas */
      chatout_stream(&st->co, &st->o, ev->text, (size_t)ev->text_len, false, st->want_lp ? &st->lp : NULL,
                     &st->out);
    } else if (ev->text_len > 0 || st->want_lp) {
      gen_view v;
      stream_view(st, &v);
      st->api->delta(&v, ev->text, (size_t)ev->text_len, st->want_lp ? &st->lp : NULL, &st->out);
    }
  } else if (ev->type == ENGINE_EV_DONE) {
    gen_view v;
    /* Text held back for a stop string that never completed. */
    if (st->api == &oai_gen_api) {
      chatout_stream(&st->co, &st->o, ev->text, (size_t)ev->text_len, true, NULL, &st->out);
    } else if (ev->text_len > 0) {
      stream_view(st, &v);
      st->api->delta(&v, ev->text, (size_t)ev->text_len, NULL, &st->out);
    }
    if (st->s->log_requests >= 2) sbuf_put(&st->log.output, ev->text, (size_t)ev->text_len);
    usage_add(&st->sum, &ev->usage, st->o.index % st->per == 0);
    st->log.have_usage = true;
    st->log.usage = st->sum;
    st->log.finish = ev->finish;
    metrics_tokens(&st->s->m, (uint64_t)ev->usage.completion_tokens);
    uint64_t t_end = pw_now_ns();
    if (st->total == 1) {
      /* The receipt rides on the final event (OpenAI: the usage chunk when asked for). */
      ev_gen_text(&st->rcpt.gen, ev->text, (size_t)ev->text_len);
      oai_error re;
      if (srv_receipt_end(&st->rcpt, ev, st->s->receipt_key, st->t0, st->log.t_first, t_end, &st->o, &re))
        pw_log(PW_LOG_ERROR, "request id=%s: %s", st->log.id, re.message);
    }
    stream_view(st, &v);
    v.t_end = t_end;
    if (st->api == &oai_gen_api) {
      /* The receipt rides on the finish chunk unless a usage chunk follows. */
      oai_resp fin = st->o;
      if (st->include_usage) fin.receipt = NULL;
      oai_sse_finish_reason(&fin, chatout_finish(&st->co, ev->finish), &st->out);
    } else if (st->api->choice_end) {
      st->api->choice_end(&v, &st->out);
    }
    if (st->o.index + 1 < st->total) {
      oai_error e;
      if (stream_next(st, &e) == 0) {
        stream_view(st, &v);
        st->api->begin(&v, &st->out);
        return;
      }
      snprintf(st->log.code, sizeof st->log.code, "%s", e.code);
      metrics_refusal_count(&st->s->m, metrics_refusal_for(e.status, e.code));
      st->api->error(&v, &e, &st->out);
      st->finished = true;
      return;
    }
    st->api->end(&v, &st->out);
    st->finished = true;
  } else {
    oai_error e;
    gen_view v;
    oai_error_from_status(&e, ev->status, ev->message);
    snprintf(st->log.code, sizeof st->log.code, "%s", e.code);
    metrics_refusal_count(&st->s->m, metrics_refusal_for(e.status, e.code));
    stream_view(st, &v);
    st->api->error(&v, &e, &st->out);
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
      gen_view v;
      st->sent_role = true;
      stream_view(st, &v);
      st->api->begin(&v, &st->out);
      continue;
    }
    if (!st->have_ev) {
      bool cancelled = false;
      int rc = wait_event(st->s, st->req, st->fd, &st->ev, st->s->keepalive_ms, &cancelled);
      if (rc == PW_ETIMEOUT) {
        gen_view v;
        stream_view(st, &v);
        if (st->api->keepalive) st->api->keepalive(&v, &st->out);
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
  if (st->ref) registry_release(srv_models_registry(st->s->models), st->ref, st->has_keep, st->keep_s);
  srv_receipt_free(&st->rcpt);
  oai_logprobs_free(&st->lp);
  chatout_free(&st->co);
  sbuf_free(&st->out);
  free(st->prompt);
  oai_request_free(&st->r);
  if (st->api->ctx_free) st->api->ctx_free(st->ctx);
  free(st);
}

/* Starts the streamed answer of req, the first choice. The stream takes
 * req, the request *r and the receipt *rcpt (moved: left empty), the
 * prompt ids, p and ctx. */
static enum MHD_Result start_stream(conn *k, struct MHD_Connection *c, engine_req *req, oai_request *r,
                                    int32_t *prompt, int n_prompt, const engine_params *p, int per, int total,
                                    const oai_resp *o, const engine_event *first, bool have_first,
                                    srv_receipt *rcpt, const gen_api *api, void *ctx) {
  stream *st = calloc(1, sizeof *st);
  if (!st) {
    srv_receipt_free(rcpt);
    engine_release(req);
    free(prompt);
    if (api->ctx_free) api->ctx_free(ctx);
    oai_error e;
    oai_seterr(&e, 500, "internal_error", NULL, "out of memory");
    return queue_error(k, c, &e);
  }
  st->s = k->s;
  st->api = api;
  st->ctx = ctx;
  st->req = req;
  st->fd = conn_fd(c);
  st->o = *o;
  st->rcpt = *rcpt; /* moved: the stream frees it */
  memset(rcpt, 0, sizeof *rcpt);
  st->include_usage = r->include_usage;
  st->want_lp = r->logprobs;
  st->r = *r;
  memset(r, 0, sizeof *r);
  st->prompt = prompt;
  st->n_prompt = n_prompt;
  st->p = *p;
  st->p.prompt = prompt;
  st->per = per;
  st->total = total;
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
  /* The stream holds the request's model until it ends: MHD may free the
   * response after the request's completion callback. */
  st->m = k->m;
  st->ref = k->ref;
  st->has_keep = k->has_keep;
  st->keep_s = k->keep_s;
  k->ref = NULL;
  if (chatout_init(&st->co, &k->m->tc, &st->r)) {
    stream_free(st);
    return MHD_NO;
  }
  struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, STREAM_BLOCK, stream_read, st,
                                                                stream_free);
  if (!resp) {
    stream_free(st);
    return MHD_NO;
  }
  MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, api->stream_ctype);
  MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
  MHD_add_response_header(resp, "X-Accel-Buffering", "no");
  st->log.status = 200;
  return queue_resp(k, c, MHD_HTTP_OK, resp);
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

/* Store serving: resolves name and holds its model for the request,
 * loading it when needed. The wait (for room, or for another request's
 * load of it) is bounded by the request's deadline (X-Request-Timeout,
 * --timeout), else by the server's load wait, and ends early when the
 * client goes away. */
static int bind_store_model(conn *k, struct MHD_Connection *c, const char *name, oai_error *e) {
  server *s = k->s;
  if (k->m) return 0; /* bound by the adapter already */
  char canon[REGISTRY_NAME_MAX + 1], err[PW_ERRMAX] = "";
  uint64_t size = 0, deadline = 0;
  if (srv_models_resolve(s->models, name, canon, &size, e) || request_deadline(k, c, &deadline, e)) return PW_EINVAL;
  if (!deadline) deadline = k->t0 + (uint64_t)(srv_models_load_wait(s->models) * 1e9);
  /* A model larger than the budget streams within it (models.c). */
  uint64_t budget = srv_models_mem_budget(s->models);
  if (budget && size > budget) size = budget;
  registry *reg = srv_models_registry(s->models);
  int fd = conn_fd(c), rc;
  registry_ref *ref = NULL;
  registry_info before;
  bool was_loaded = registry_get(reg, canon, &before) == 0 && before.loaded;
  uint64_t t_acq = pw_now_ns();
  /* one wait, asking about the client as it goes: a request that leaves
   * gives its place back, and a load only it waited for is abandoned */
  acquire_watch aw = {s, fd};
  rc = registry_acquire_ex(reg, canon, size, deadline, acquire_gone, &aw, &ref, err);
  if (rc == PW_ETIMEOUT || rc == PW_ECANCELED)
    return oai_seterr(e, 503, "model_busy", "model", "%s; try again later", err);
  if (rc == PW_ELIMIT) return oai_seterr(e, 503, "model_too_large", "model", "%s (--mem-budget)", err);
  if (rc == PW_ENOTFOUND)
    return oai_seterr(e, 404, "model_not_found", "model", "The model '%.100s' cannot be loaded: %s", name, err);
  if (rc) return oai_seterr(e, 500, "model_load_failed", "model", "cannot load model '%s': %s", canon, err);
  k->ref = ref;
  k->m = registry_model(ref);
  if (!was_loaded) k->load_ns = pw_now_ns() - t_acq;
  return 0;
}

/* OpenAI's endpoints: one model: a named model other than the served one
 * is 404, none means the served one; store serving: bind_store_model. */
static int check_model(conn *k, struct MHD_Connection *c, const char *name, oai_error *e) {
  server *s = k->s;
  if (s->models) return bind_store_model(k, c, name, e);
  const char *id = engine_model_id(s->single.e);
  if (name && *name && strcmp(name, id))
    return oai_seterr(e, 404, "model_not_found", "model", "The model '%.100s' does not exist; this server serves '%.100s'",
                      name, id);
  return 0;
}

/* Refuses, before tokenizing, text that cannot fit the context whatever it
 * tokenizes to. A token stands for at most tok_max_piece bytes of text, so
 * more than n_ctx * max_piece bytes means more than n_ctx tokens. The
 * factor 2 is a margin for special tokens that absorb the white space next
 * to them (lstrip/rstrip), the one way a token covers more bytes than its
 * piece. Without this bound an 8 MiB body cost seconds of tokenizing and
 * ~100 MB of scratch before being refused as too long. */
static int prompt_fits(const srv_model *m, size_t bytes, const char *param, oai_error *e) {
  size_t piece = tok_max_piece(m->pb.vocab);
  size_t n_ctx = (size_t)engine_n_ctx(m->e);
  size_t bound = 2 * (n_ctx + 1) * (piece ? piece : 1);
  if (bytes > bound)
    return oai_seterr(e, 400, "context_length_exceeded", param,
                      "the prompt (%zu bytes) cannot fit the context of %zu tokens (at most %zu bytes of text "
                      "for this vocabulary)",
                      bytes, n_ctx, bound);
  return 0;
}

static size_t messages_bytes(json_t *messages) {
  size_t total = 0, i;
  json_t *m;
  json_array_foreach(messages, i, m) total += json_string_length(json_object_get(m, "content"));
  return total;
}

static int submit(srv_model *m, const engine_params *p, const char *param, engine_req **req, oai_error *e) {
  char err[PW_ERRMAX] = "";
  int rc = engine_submit(m->e, p, req, err);
  if (rc) {
    oai_error_from_status(e, rc, err);
    if (rc == PW_ECONTEXT) snprintf(e->param, sizeof e->param, "%s", param);
  }
  return rc;
}

/* The prompt ids of prompt number pi of r (chat: its messages), in a
 * malloc'ed array the caller frees; for chat, when rendered is set, the
 * rendered template text too (malloc'ed; receipts hash it). 0, or
 * PW_EINVAL with e set. */
static int build_prompt(const srv_model *m, oai_kind kind, oai_request *r, size_t pi, int32_t **out, int *n_out,
                        char **rendered, size_t *rendered_len, oai_error *e) {
  const char *param = kind == OAI_CHAT ? "messages" : "prompt";
  prompt_error pe;
  int rc = 0;
  *out = NULL;
  *n_out = 0;
  json_t *item = r->prompts ? json_array_get(r->prompts, pi) : NULL;
  if (kind == OAI_CHAT) {
    if (prompt_fits(m, messages_bytes(r->messages), param, e)) return PW_EINVAL;
    char *text = NULL;
    size_t tl = 0;
    prompt_chat_opts po = {0};
    po.rendered = &text;
    po.rendered_len = &tl;
    po.extra_vars = r->tpl_vars;
    rc = prompt_chat(&m->pb, r->messages, &po, out, n_out, &pe);
    /* a generation prompt that opens <think>: the answer starts in reasoning */
    if (!rc) r->in_reasoning = tc_prompt_opens_reasoning(text, tl);
    if (rendered) {
      *rendered = text;
      if (rendered_len) *rendered_len = tl;
    } else {
      free(text);
    }
  } else if (item && json_is_array(item)) { /* validated by oai_parse */
    int n = (int)json_array_size(item);
    int32_t *ids = malloc((size_t)(n ? n : 1) * sizeof *ids);
    if (!ids) return oai_seterr(e, 500, "internal_error", NULL, "out of memory");
    for (int j = 0; j < n; j++) ids[j] = (int32_t)json_integer_value(json_array_get(item, (size_t)j));
    if ((rc = prompt_check_ids(&m->pb, ids, n, param, &pe))) {
      free(ids);
    } else {
      *out = ids;
      *n_out = n;
    }
  } else if (!item && r->tokens) {
    if (!(rc = prompt_check_ids(&m->pb, r->tokens, r->n_tokens, param, &pe))) {
      *out = r->tokens;
      *n_out = r->n_tokens;
      r->tokens = NULL;
    }
  } else {
    const char *text = item ? json_string_value(item) : r->text;
    size_t len = item ? json_string_length(item) : r->text_len;
    if (prompt_fits(m, len, param, e)) return PW_EINVAL;
    rc = prompt_tokenize(&m->pb, text, len, true, true, param, out, n_out, &pe);
  }
  if (rc) {
    oai_error_from_prompt(e, &pe);
    return PW_EINVAL;
  }
  return 0;
}

/* Engine parameters for one choice: the request's sampling (seed + choice
 * for choice > 0), the admission deadline and the scoped cache key. */
static int choice_params(conn *k, struct MHD_Connection *c, oai_kind kind, const oai_request *r, const int32_t *prompt,
                         int n_prompt, int choice, engine_params *p, oai_error *e) {
  oai_engine_params(r, prompt, n_prompt, p);
  p->sampling.seed = r->sampling.seed + (uint64_t)choice;
  if (r->cache_key) {
    /* The engine only ever sees the scoped digest. */
    const void *tenant = k->anonymous ? (const void *)OAI_TENANT_ANONYMOUS : (const void *)k->tenant;
    size_t tenant_len = k->anonymous ? strlen(OAI_TENANT_ANONYMOUS) : sizeof k->tenant;
    if (oai_cache_scope(tenant, tenant_len, kind, engine_model_id(k->m->e), r->cache_key, r->cache_key_len,
                        p->cache_key))
      return oai_seterr(e, 500, "internal_error", NULL, "cannot hash the prompt cache key");
    p->has_cache_key = true;
    /* Quotas count per API key; without keys everyone is one owner. */
    if (!k->anonymous) memcpy(p->cache_owner, k->tenant, sizeof p->cache_owner);
  }
  return request_deadline(k, c, &p->deadline_ns, e);
}

/* One non-streamed choice, collected to its end. */
typedef struct gen_out {
  sbuf text;
  oai_logprobs lp;
  engine_finish finish;
  engine_usage usage;
} gen_out;

/* Waits for req's events to the end into g. 0; PW_ECANCELED when the
 * client left or the server is stopping; PW_EINVAL with e set for an
 * error event. */
static int collect(conn *k, const oai_request *r, engine_req *req, int fd, engine_event *ev, gen_out *g,
                   ev_gen *gen, uint64_t *t_last, int *n_tok, oai_error *e) {
  server *s = k->s;
  bool cancelled = false;
  oai_logprobs_reset(&g->lp, r->kind);
  sbuf_reserve(&g->text, 4096);
  for (;;) {
    if (wait_event(s, req, fd, ev, -1, &cancelled)) return PW_ECANCELED;
    if (ev->type == ENGINE_EV_TOKEN) {
      note_token(s, &k->log, k->t0, t_last, n_tok);
      if (gen) ev_gen_token(gen, ev->token, ev->text, (size_t)ev->text_len);
      sbuf_put(&g->text, ev->text, (size_t)ev->text_len);
      if (r->logprobs)
        oai_logprobs_add(&g->lp, prompt_piece, &k->m->pb, ev->token, ev->logprob, ev->top, ev->n_top,
                         (size_t)ev->text_len);
      continue;
    }
    if (ev->type == ENGINE_EV_ERROR) {
      oai_error_from_status(e, ev->status, ev->message);
      return PW_EINVAL;
    }
    sbuf_put(&g->text, ev->text, (size_t)ev->text_len); /* DONE: last held-back text */
    if (gen) ev_gen_text(gen, ev->text, (size_t)ev->text_len);
    break;
  }
  if (cancelled) return PW_ECANCELED;
  g->finish = ev->finish;
  g->usage = ev->usage;
  return 0;
}

static void usage_add(engine_usage *sum, const engine_usage *u, bool with_prompt) {
  if (with_prompt) {
    sum->prompt_tokens += u->prompt_tokens;
    sum->cached_tokens += u->cached_tokens;
  }
  sum->completion_tokens += u->completion_tokens;
  sum->spec_drafted += u->spec_drafted;
  sum->spec_accepted += u->spec_accepted;
  sum->spec_emitted += u->spec_emitted;
  sum->target_passes += u->target_passes;
}

/* The generation core of every API (api.h). Choices (OpenAI's n, several
 * prompts) run one after the other, so a request never holds more than one
 * slot, streamed or not. */
enum MHD_Result srv_generate(conn *k, struct MHD_Connection *c, oai_request *rin, const oai_resp *oin,
                             const gen_api *api, void *ctx) {
  server *s = k->s;
  oai_request r = *rin;
  memset(rin, 0, sizeof *rin);
  oai_kind kind = r.kind;
  oai_error e;
  int32_t *prompt = NULL;
  int n_prompt = 0;
  engine_req *req = NULL;
  enum MHD_Result res;
  engine_event *ev = NULL;
  gen_out *gs = NULL;
  oai_choice *cs = NULL;
  sbuf out = {0};
  int n_gs = 0;
  srv_receipt rcpt = {0};
  char *ptext = NULL; /* chat: the rendered template */
  size_t plen = 0;
  oai_resp o = *oin;
  snprintf(k->log.id, sizeof k->log.id, "%s", o.id);
  if (s->log_requests >= 2) {
    if (kind == OAI_CHAT) k->log.prompt = json_dumps(r.messages, JSON_COMPACT);
    else if (r.text) k->log.prompt = strndup(r.text, r.text_len);
    else if (r.prompts) k->log.prompt = json_dumps(r.prompts, JSON_COMPACT);
  }
  if (!k->m && check_model(k, c, r.model, &e)) goto fail;
  srv_model *m = k->m;
  if (engine_is_encoder(m->e)) {
    oai_seterr(&e, 400, "unsupported_model", "model",
               "model '%.100s' is an encoder: it does not generate text (it serves %s)", engine_model_id(m->e),
               engine_get_pooling(m->e) == ENGINE_POOL_RANK ? "/v1/rerank" : "/v1/embeddings");
    goto fail;
  }
  /* The identity of the model that answers: adapters may have made o
   * before the request was bound to its model. */
  o.model = engine_model_id(m->e);
  const char *sha = engine_model_sha256(m->e);
  if (sha && strlen(sha) >= 10) snprintf(o.fingerprint, sizeof o.fingerprint, "fp_%.10s", sha);
  for (int i = 0; i < r.sampling.n_logit_bias; i++)
    if (r.logit_bias[i].token >= tok_n_vocab(m->pb.vocab)) {
      oai_seterr(&e, 400, "invalid_value", "logit_bias", "'logit_bias' names token %d, outside the vocabulary of %d",
                 r.logit_bias[i].token, tok_n_vocab(m->pb.vocab));
      goto fail;
    }
  if (kind == OAI_CHAT && oai_chat_prepare(&r, &m->tc, &e)) goto fail;
  size_t n_prompts = r.prompts ? json_array_size(r.prompts) : 1;
  int per = r.n_choices > 0 ? r.n_choices : 1;
  n_gs = (int)n_prompts * per;
  if (!(ev = malloc(sizeof *ev)) || !(gs = calloc((size_t)n_gs, sizeof *gs)) ||
      !(cs = calloc((size_t)n_gs, sizeof *cs))) {
    oai_seterr(&e, 500, "internal_error", NULL, "out of memory");
    goto fail;
  }
  int fd = conn_fd(c);
  uint64_t t_last = 0;
  int n_tok = 0;
  engine_usage total;
  memset(&total, 0, sizeof total);
  for (int idx = 0; idx < n_gs; idx++) {
    int choice = idx % per;
    if (choice == 0) {
      free(prompt);
      if (build_prompt(m, kind, &r, (size_t)(idx / per), &prompt, &n_prompt, n_gs == 1 ? &ptext : NULL,
                       n_gs == 1 ? &plen : NULL, &e))
        goto fail;
      if (n_prompt < 1) {
        oai_seterr(&e, 400, "invalid_value", kind == OAI_CHAT ? "messages" : "prompt", "the prompt is empty");
        goto fail;
      }
    }
    engine_params p;
    if (choice_params(k, c, kind, &r, prompt, n_prompt, choice, &p, &e)) goto fail;
    if (n_gs == 1) {
      /* A receipt covers one generation: responses with several choices
       * carry none (yet). */
      srv_caller who = {k->anonymous, k->tenant};
      if (srv_receipt_begin(&rcpt, &m->evm, kind, k->body.data, k->body.len, &who, &r,
                            kind == OAI_CHAT ? ptext : r.text, kind == OAI_CHAT ? plen : r.text_len, &p,
                            engine_n_ctx(m->e), s->spec_mode, &e))
        goto fail;
      if (api->receipt_endpoint) rcpt.gen.endpoint = api->receipt_endpoint;
      rcpt.gen.replica = s->replica;
    }
    if (submit(m, &p, kind == OAI_CHAT ? "messages" : "prompt", &req, &e)) goto fail;
    if (r.stream) {
      /* Wait a little for the first event so that admission failures
       * (deadline) still get a proper status; past the keep-alive interval
       * the stream starts anyway and keeps the client informed with
       * comments. */
      bool cancelled = false;
      int rc = wait_event(s, req, fd, ev, s->keepalive_ms, &cancelled);
      if (rc == PW_ECANCELED) goto gone;
      if (rc == 0 && ev->type == ENGINE_EV_ERROR) {
        oai_error_from_status(&e, ev->status, ev->message);
        goto fail;
      }
      res = start_stream(k, c, req, &r, prompt, n_prompt, &p, per, n_gs, &o, ev, rc == 0, &rcpt, api, ctx);
      req = NULL; /* owned by the stream, as are r, prompt and ctx */
      prompt = NULL;
      ctx = NULL;
      goto done;
    }
    int rc = collect(k, &r, req, fd, ev, &gs[idx], n_gs == 1 ? &rcpt.gen : NULL, &t_last, &n_tok, &e);
    if (rc == PW_ECANCELED) goto gone;
    if (rc) goto fail;
    engine_release(req);
    req = NULL;
    usage_add(&total, &gs[idx].usage, choice == 0);
    if (s->log_requests >= 2) sbuf_put(&k->log.output, gs[idx].text.data ? gs[idx].text.data : "", gs[idx].text.len);
    cs[idx].text = gs[idx].text.data ? gs[idx].text.data : "";
    cs[idx].len = gs[idx].text.len;
    cs[idx].lp = r.logprobs ? &gs[idx].lp : NULL;
    cs[idx].finish = gs[idx].finish;
  }
  k->log.have_usage = true;
  k->log.usage = total;
  k->log.finish = gs[n_gs - 1].finish;
  metrics_tokens(&s->m, (uint64_t)total.completion_tokens);
  uint64_t t_end = pw_now_ns();
  if (n_gs == 1 && srv_receipt_end(&rcpt, ev, s->receipt_key, k->t0, k->log.t_first, t_end, &o, &e)) goto fail;
  if (api == &oai_gen_api && o.kind == OAI_CHAT) {
    /* content, reasoning_content and tool_calls from each choice's text */
    if (chatout_render_choices(&m->tc, &r, &o, cs, n_gs, &total, &out)) {
      oai_seterr(&e, 500, "internal_error", NULL, "out of memory");
      goto fail;
    }
  } else {
    gen_view v;
    memset(&v, 0, sizeof v);
    v.r = &r;
    v.o = &o;
    v.n_prompt = n_prompt;
    v.usage = total;
    v.finish = cs[n_gs - 1].finish;
    v.stop_index = ev->type == ENGINE_EV_DONE ? ev->stop_index : -1;
    v.t0 = k->t0;
    v.t_first = k->log.t_first;
    v.t_end = t_end;
    v.text = cs[0].text;
    v.text_len = cs[0].len;
    v.lp = cs[0].lp;
    v.ctx = ctx;
    if (n_gs == 1 || !api->complete_choices) api->complete(&v, &out);
    else api->complete_choices(&v, cs, n_gs, &out);
  }
  res = queue_json(k, c, 200, &out);
  goto done;

gone:
  if (!flag(&s->stopping)) metrics_disconnect(&s->m);
  k->log.gone = true;
  res = MHD_NO; /* closes the connection */
  goto done;
fail:
  res = queue_error(k, c, &e);
done:
  engine_release(req);
  srv_receipt_free(&rcpt);
  free(ptext);
  free(prompt);
  free(ev);
  for (int i = 0; gs && i < n_gs; i++) {
    sbuf_free(&gs[i].text);
    oai_logprobs_free(&gs[i].lp);
  }
  free(gs);
  free(cs);
  sbuf_free(&out);
  oai_request_free(&r);
  if (ctx && api->ctx_free) api->ctx_free(ctx);
  return res;
}

/* ---- OpenAI chat/completions rendering --------------------------------- */

static void oai_gen_begin(const gen_view *v, sbuf *out) {
  if (v->o->kind == OAI_CHAT) oai_sse_role(v->o, out);
}
static void oai_gen_delta(const gen_view *v, const char *text, size_t n, const oai_logprobs *lp, sbuf *out) {
  oai_sse_delta(v->o, text, n, lp, out);
}
/* The receipt rides on the finish chunk unless a usage chunk follows. */
static void oai_gen_choice_end(const gen_view *v, sbuf *out) {
  oai_resp fin = *v->o;
  if (v->r->include_usage) fin.receipt = NULL;
  oai_sse_finish(&fin, v->finish, out);
}
static void oai_gen_end(const gen_view *v, sbuf *out) {
  if (v->r->include_usage) oai_sse_usage(v->o, &v->usage, out);
  oai_sse_done(out);
}
static void oai_gen_error(const gen_view *v, const oai_error *e, sbuf *out) {
  (void)v;
  oai_sse_error(e, out);
  oai_sse_done(out);
}
static void oai_gen_keepalive(const gen_view *v, sbuf *out) {
  (void)v;
  oai_sse_keepalive(out);
}
static void oai_gen_complete(const gen_view *v, sbuf *out) {
  oai_render_completion(v->o, v->text, v->text_len, v->lp, v->finish, &v->usage, out);
}
static void oai_gen_choices(const gen_view *v, const oai_choice *c, int n, sbuf *out) {
  oai_render_completion_choices(v->o, c, n, &v->usage, out);
}

const gen_api oai_gen_api = {
    .stream_ctype = "text/event-stream",
    .begin = oai_gen_begin,
    .delta = oai_gen_delta,
    .choice_end = oai_gen_choice_end,
    .end = oai_gen_end,
    .error = oai_gen_error,
    .keepalive = oai_gen_keepalive,
    .complete = oai_gen_complete,
    .complete_choices = oai_gen_choices,
};

/* Chat and completions: parse, then the core. */
static enum MHD_Result handle_generate(conn *k, struct MHD_Connection *c, oai_kind kind) {
  server *s = k->s;
  oai_request r;
  oai_error e;
  oai_resp o;
  bool has_keep;
  double keep;
  if (oai_parse(kind, k->body.data, k->body.len, &r, &e)) return queue_error(k, c, &e);
  if (api_keep_alive(k, r.root, &has_keep, &keep, &e) || check_model(k, c, r.model, &e)) {
    oai_request_free(&r);
    return queue_error(k, c, &e);
  }
  oai_resp_init(&o, kind, engine_model_id(k->m->e), engine_model_sha256(k->m->e));
  o.spec_mode = s->spec_mode;
  snprintf(k->log.id, sizeof k->log.id, "%s", o.id);
  return srv_generate(k, c, &r, &o, &oai_gen_api, NULL);
}

static enum MHD_Result handle_chat(conn *k, struct MHD_Connection *c) { return handle_generate(k, c, OAI_CHAT); }
static enum MHD_Result handle_completions(conn *k, struct MHD_Connection *c) {
  return handle_generate(k, c, OAI_COMPLETION);
}

/* ---- embeddings, tokenize, detokenize ---------------------------------- */

/* The embeddings core of every API (api.h). */
enum MHD_Result srv_embed(conn *k, struct MHD_Connection *c, oai_request *rin, bool truncate, const embed_api *api,
                          void *ctx) {
  server *s = k->s;
  oai_request r = *rin;
  memset(rin, 0, sizeof *rin);
  oai_error e;
  prompt_error pe;
  engine_event *ev = NULL;
  engine_req *req = NULL;
  int32_t *ids = NULL;
  sbuf out = {0};
  srv_receipt rcpt = {0};
  enum MHD_Result res;
  if (!k->m && check_model(k, c, r.model, &e)) goto fail;
  srv_model *m = k->m;
  srv_caller who = {k->anonymous, k->tenant};
  if ((engine_get_pooling(m->e) == ENGINE_POOL_RANK) != (api == &rerank_embed_api)) {
    oai_seterr(&e, 400, "unsupported_model", "model",
               api == &rerank_embed_api ? "model '%.100s' is not a reranker"
                                        : "model '%.100s' is a reranker: it scores documents at /v1/rerank, it has "
                                          "no embeddings",
               engine_model_id(m->e));
    goto fail;
  }
  if (srv_receipt_begin_embed(&rcpt, &m->evm, k->body.data, k->body.len, &who, &e)) goto fail;
  rcpt.gen.replica = s->replica;
  int n_embd = engine_embedding_dim(m->e);
  if (r.dimensions && r.dimensions != n_embd) {
    /* Truncating an embedding is only meaningful for models trained for it
     * (Matryoshka representation learning), which a GGUF file does not
     * declare; a cut vector of any other model is not an embedding. */
    oai_seterr(&e, 400, "unsupported_dimensions", "dimensions",
               "'dimensions' must be omitted or equal the model's embedding size %d: this model does not declare "
               "embeddings that can be truncated",
               n_embd);
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
  int n_ctx = engine_n_ctx(m->e);
  api->begin(ctx, &out);
  size_t i;
  json_t *in;
  /* One input at a time: a big batch never crowds out other clients' slots
   * or fails itself with PW_EBUSY. */
  json_array_foreach(r.inputs, i, in) {
    int n = 0;
    if (json_is_string(in)) {
      if (!truncate && prompt_fits(m, json_string_length(in), "input", &e)) goto fail;
      if (prompt_tokenize(&m->pb, json_string_value(in), json_string_length(in), true, true, "input", &ids, &n, &pe))
        goto prompt_fail;
    } else {
      n = (int)json_array_size(in);
      ids = malloc((size_t)(n ? n : 1) * sizeof *ids);
      if (!ids) {
        oai_seterr(&e, 500, "internal_error", NULL, "out of memory");
        goto fail;
      }
      for (int j = 0; j < n; j++) ids[j] = (int32_t)json_integer_value(json_array_get(in, (size_t)j));
      if (prompt_check_ids(&m->pb, ids, n, "input", &pe)) goto prompt_fail;
    }
    if (n < 1) {
      oai_seterr(&e, 400, "invalid_value", "input", "input %zu has no tokens", i);
      goto fail;
    }
    if (truncate && n > n_ctx) n = n_ctx; /* the client asked for the head of a long input */
    engine_params p;
    memset(&p, 0, sizeof p);
    p.prompt = ids;
    p.n_prompt = n;
    p.max_tokens = 1;
    pw_sampler_params_default(&p.sampling);
    p.embedding = true;
    p.deadline_ns = deadline;
    ev_gen_embedding_input(&rcpt.gen, ids, n);
    if (submit(m, &p, "input", &req, &e)) goto fail;
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
    api->item(ctx, i, vec, n_embd, &out);
    engine_release(req);
    req = NULL;
  }
  oai_resp ro;
  memset(&ro, 0, sizeof ro);
  uint64_t t_end = pw_now_ns();
  if (srv_receipt_end(&rcpt, NULL, s->receipt_key, k->t0, 0, t_end, &ro, &e)) goto fail;
  api->end(ctx, total, k->t0, t_end, &ro, &out);
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

/* OpenAI's embeddings list. */
typedef struct oai_embed_ctx {
  const char *model;
  bool base64;
} oai_embed_ctx;
static void oai_embed_begin(void *ctx, sbuf *out) {
  (void)ctx;
  oai_render_embeddings_begin(out);
}
static void oai_embed_item(void *ctx, size_t index, const float *vec, int n, sbuf *out) {
  oai_embed_ctx *x = ctx;
  oai_render_embedding(index, vec, n, x->base64, out);
}
static void oai_embed_end(void *ctx, long long prompt_tokens, uint64_t t0, uint64_t t_end, const oai_resp *ro,
                          sbuf *out) {
  oai_embed_ctx *x = ctx;
  (void)t0;
  (void)t_end;
  oai_render_embeddings_end(x->model, prompt_tokens, ro, out);
}
static const embed_api oai_embed_api = {oai_embed_begin, oai_embed_item, oai_embed_end};

static enum MHD_Result handle_embeddings(conn *k, struct MHD_Connection *c) {
  oai_request r;
  oai_error e;
  bool has_keep;
  double keep;
  if (oai_parse(OAI_EMBEDDING, k->body.data, k->body.len, &r, &e)) return queue_error(k, c, &e);
  if (api_keep_alive(k, r.root, &has_keep, &keep, &e) || check_model(k, c, r.model, &e)) {
    oai_request_free(&r);
    return queue_error(k, c, &e);
  }
  oai_embed_ctx x = {engine_model_id(k->m->e), r.base64};
  return srv_embed(k, c, &r, false, &oai_embed_api, &x);
}

static enum MHD_Result handle_tokenize(conn *k, struct MHD_Connection *c) {
  oai_request r;
  oai_error e;
  prompt_error pe;
  int32_t *ids = NULL;
  int n = 0;
  sbuf out = {0};
  enum MHD_Result res;
  if (oai_parse(OAI_TOKENIZE, k->body.data, k->body.len, &r, &e)) return queue_error(k, c, &e);
  /* "model": the store's model to use; with one model, its id (or none). */
  if (check_model(k, c, r.model, &e)) {
    res = queue_error(k, c, &e);
    goto done;
  }
  const prompt_builder *pb = &k->m->pb;
  if (prompt_tokenize(pb, r.text, r.text_len, r.add_special, r.parse_special, "content", &ids, &n, &pe)) {
    oai_error_from_prompt(&e, &pe);
    res = queue_error(k, c, &e);
    goto done;
  }
  oai_render_tokens(ids, n, r.with_pieces ? prompt_piece : NULL, (void *)pb, &out);
  res = queue_json(k, c, 200, &out);
done:
  free(ids);
  sbuf_free(&out);
  oai_request_free(&r);
  return res;
}

static enum MHD_Result handle_detokenize(conn *k, struct MHD_Connection *c) {
  oai_request r;
  oai_error e;
  prompt_error pe;
  sbuf out = {0};
  char *text = NULL;
  enum MHD_Result res;
  if (oai_parse(OAI_DETOKENIZE, k->body.data, k->body.len, &r, &e)) return queue_error(k, c, &e);
  if (check_model(k, c, r.model, &e)) goto fail;
  const prompt_builder *pb = &k->m->pb;
  if (prompt_check_ids(pb, r.tokens, r.n_tokens, "tokens", &pe)) goto prompt_fail;
  size_t need = 0, cap = (size_t)r.n_tokens * 16 + 16;
  char err[PW_ERRMAX];
  for (int attempt = 0; attempt < 2; attempt++) {
    free(text);
    if (!(text = malloc(cap))) {
      oai_seterr(&e, 500, "internal_error", NULL, "out of memory");
      goto fail;
    }
    int rc = tok_decode(pb->vocab, r.tokens, (size_t)r.n_tokens, TOK_DETOK_SPECIAL, text, cap, &need, err);
    if (rc == 0) break;
    if (rc != PW_ERANGE || attempt) {
      oai_seterr(&e, 400, "invalid_value", "tokens", "cannot detokenize: %s", err);
      goto fail;
    }
    cap = need + 1;
  }
  oai_render_content(text, need, &out);
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

static enum MHD_Result handle_health(conn *k, struct MHD_Connection *c) {
  sbuf out = {0};
  bool ok = !flag(&k->s->quiescing);
  if (ok && flag(&k->s->draining)) {
    /* server_drain_notice: still serving, but leaving a balancer's pool. */
    sbuf_puts(&out, "{\"status\":\"draining\"}");
    return queue_json(k, c, 503, &out);
  }
  oai_render_health(ok, &out);
  return queue_json(k, c, ok ? 200 : 503, &out);
}

static enum MHD_Result handle_metrics(conn *k, struct MHD_Connection *c) {
  sbuf out = {0};
  engine_stats st;
  if (k->s->models) srv_models_engine_stats(k->s->models, &st); /* every model's engine, past ones included */
  else engine_get_stats(k->s->single.e, &st);
  metrics_render(&k->s->m, &st, &out);
  if (k->s->models) srv_models_metrics(k->s->models, &out);
  return queue(k, c, 200, "text/plain; version=0.0.4; charset=utf-8", &out, NULL, NULL);
}

static enum MHD_Result handle_models(conn *k, struct MHD_Connection *c) {
  sbuf out = {0};
  if (k->s->models) srv_models_render_list(k->s->models, &out);
  else oai_render_model_list(engine_model_id(k->s->single.e), k->s->started, &out);
  return queue_json(k, c, 200, &out);
}

/* The receipt signing key's public half (404 when receipts are unsigned). */
static enum MHD_Result handle_receipt_key(conn *k, struct MHD_Connection *c) {
  server *s = k->s;
  oai_error e;
  sbuf out = {0};
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
  oai_render_receipt_key(pem, fp, &out);
  free(pem);
  return queue_json(k, c, 200, &out);
}

static enum MHD_Result handle_model(conn *k, struct MHD_Connection *c) {
  sbuf out = {0};
  if (k->s->models) {
    oai_error e;
    if (srv_models_render_one(k->s->models, k->arg, &out, &e)) return queue_error(k, c, &e);
    return queue_json(k, c, 200, &out);
  }
  const char *id = engine_model_id(k->s->single.e);
  if (strcmp(k->arg, id)) {
    oai_error e;
    oai_seterr(&e, 404, "model_not_found", "model", "The model '%.100s' does not exist", k->arg);
    return queue_error(k, c, &e);
  }
  oai_render_model(id, k->s->started, &out);
  return queue_json(k, c, 200, &out);
}

/* ---- what adapters see (api.h) ---------------------------------------- */

server *srv_server(conn *k) { return k->s; }
const char *srv_body(conn *k, size_t *len) {
  *len = k->body.len;
  return k->body.data ? k->body.data : "";
}
const char *srv_arg(conn *k) { return k->arg; }
srv_caller srv_who(conn *k) { return (srv_caller){k->anonymous, k->tenant}; }
uint64_t srv_t0(conn *k) { return k->t0; }
void srv_set_id(conn *k, const char *id) { snprintf(k->log.id, sizeof k->log.id, "%s", id); }
enum MHD_Result srv_reply(conn *k, struct MHD_Connection *c, int status, const char *ctype, sbuf *b) {
  return queue(k, c, status, ctype, b, NULL, NULL);
}
enum MHD_Result srv_reply_json(conn *k, struct MHD_Connection *c, int status, sbuf *b) {
  return queue_json(k, c, status, b);
}
enum MHD_Result srv_reply_raw(conn *k, struct MHD_Connection *c, int status, struct MHD_Response *r) {
  return queue_resp(k, c, status, r);
}
enum MHD_Result srv_reply_error(conn *k, struct MHD_Connection *c, const oai_error *e) {
  return queue_error(k, c, e);
}
engine *srv_engine(conn *k) { return k->m->e; }
const prompt_builder *srv_prompt(conn *k) { return &k->m->pb; }
srv_models *srv_store(server *s) { return s->models; }
uint64_t srv_load_ns(conn *k) { return k->load_ns; }
void srv_set_keep_alive(conn *k, double seconds) {
  k->has_keep = true;
  k->keep_s = seconds;
}
long long srv_started(server *s) { return s->started; }
int srv_keepalive_ms(server *s) { return s->keepalive_ms; }
resp_store *srv_responses(server *s) { return s->responses; }

int srv_use_model(conn *k, struct MHD_Connection *c, const char *name, bool allow_empty, oai_error *e) {
  server *s = k->s;
  if (s->models) return bind_store_model(k, c, name, e);
  const char *id = engine_model_id(s->single.e);
  if (!name || !*name) {
    if (allow_empty) return 0;
    return oai_seterr(e, 400, "missing_field", "model", "'model' is required");
  }
  size_t n = strlen(id);
  if (!strcmp(name, id) || (!strncmp(name, id, n) && !strcmp(name + n, ":latest"))) return 0;
  return oai_seterr(e, 404, "model_not_found", "model", "model '%.100s' not found; this server serves '%.100s'", name,
                    id);
}

int srv_count_chat(conn *k, json_t *messages, int *n_tokens, oai_error *e) {
  prompt_error pe;
  int32_t *ids = NULL;
  *n_tokens = 0;
  if (prompt_fits(k->m, messages_bytes(messages), "messages", e)) return PW_EINVAL;
  if (prompt_chat(&k->m->pb, messages, NULL, &ids, n_tokens, &pe)) {
    oai_error_from_prompt(e, &pe);
    return PW_EINVAL;
  }
  free(ids);
  return 0;
}

const tc_syntax *srv_tool_syntax(conn *k) { return &k->m->tc; }

int srv_count_chat_request(conn *k, oai_request *r, int *n_tokens, oai_error *e) {
  prompt_error pe;
  int32_t *ids = NULL;
  *n_tokens = 0;
  if (oai_chat_prepare(r, &k->m->tc, e)) return PW_EINVAL;
  if (prompt_fits(k->m, messages_bytes(r->messages), "messages", e)) return PW_EINVAL;
  prompt_chat_opts po = {0};
  po.extra_vars = r->tpl_vars;
  if (prompt_chat(&k->m->pb, r->messages, &po, &ids, n_tokens, &pe)) {
    oai_error_from_prompt(e, &pe);
    return PW_EINVAL;
  }
  free(ids);
  return 0;
}

void api_iso_time(char *out, size_t cap) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  struct tm tm;
  gmtime_r(&ts.tv_sec, &tm);
  char d[32];
  strftime(d, sizeof d, "%Y-%m-%dT%H:%M:%S", &tm);
  snprintf(out, cap, "%s.%09ldZ", d, ts.tv_nsec);
}

/* ---- routing ----------------------------------------------------------- */

/* Whether row r serves url (a path: MHD strips the query string); *arg
 * gets the "{id}" part. */
static bool route_matches(const route *r, const char *url, const char **arg) {
  const char *u = url;
  unsigned where = RP_ROOT;
  if (!strncmp(u, "/v1/", 4)) {
    u += 3;
    where = RP_V1;
  }
  if (!(r->prefixes & where)) return false;
  const char *brace = strstr(r->path, "{id}");
  if (!brace) return !strcmp(u, r->path);
  size_t n = (size_t)(brace - r->path);
  if (strncmp(u, r->path, n) || !u[n]) return false;
  if (arg) *arg = u + n;
  return true;
}

/* The methods any row serves url with (0: unknown path). */
static unsigned path_methods(const char *url) {
  unsigned m = 0;
  for (int i = 0; i < N_ROUTES; i++)
    if (route_matches(&k_routes[i], url, NULL)) m |= k_routes[i].methods;
  return m;
}

/* The row serving method on url, or NULL; *any_row gets a row serving the
 * path with another method (for 405 and preflights). */
static const route *find_route(const char *url, unsigned method, const char **arg, const route **any_row) {
  *any_row = NULL;
  for (int i = 0; i < N_ROUTES; i++) {
    if (!route_matches(&k_routes[i], url, arg)) continue;
    if (k_routes[i].methods & method) return &k_routes[i];
    *any_row = &k_routes[i];
  }
  return NULL;
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
  if (h.transfer_encoding > 1) return "more than one Transfer-Encoding header";
  if (version && !strcmp(version, MHD_HTTP_VERSION_1_1) && h.host != 1) return "HTTP/1.1 needs exactly one Host header";
  return NULL;
}

/* The Origin to echo when CORS is on and the request's Origin is allowed. */
static const char *cors_origin(server *s, struct MHD_Connection *c) {
  if (!s->cors) return NULL;
  if (!s->n_cors) return "*";
  const char *o = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Origin");
  if (!o) return NULL;
  for (int i = 0; i < s->n_cors; i++)
    if (!strcmp(o, s->cors_list[i])) return o;
  return NULL;
}

static enum MHD_Result answer_preflight(conn *k, struct MHD_Connection *c, unsigned methods) {
  struct MHD_Response *r = MHD_create_response_from_buffer(0, (char *)"", MHD_RESPMEM_PERSISTENT);
  if (!r) return MHD_NO;
  char m[64];
  methods_str(methods, true, m, sizeof m);
  MHD_add_response_header(r, "Access-Control-Allow-Methods", m);
  MHD_add_response_header(r, "Access-Control-Allow-Headers", "Authorization, Content-Type, X-Request-Timeout, x-api-key, anthropic-version");
  MHD_add_response_header(r, "Access-Control-Max-Age", "600");
  return queue_resp(k, c, 204, r);
}

/* First call of a request: headers only. Everything that can be decided
 * without the body is decided here, before any of it is read. An error
 * for a request without a body is answered after the (empty) body phase,
 * which keeps the connection alive; with a body on the way it is answered
 * at once and the connection closes after it. */
static enum MHD_Result on_headers(server *s, conn *k, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version) {
  oai_error e;
  const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
  const char *te = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_TRANSFER_ENCODING);
  bool has_body = te || (cl && strtoull(cl, NULL, 10) > 0);
  k->origin = cors_origin(s, c);
  const char *framing = bad_framing(c, version);
  if (framing) {
    oai_seterr(&e, 400, "invalid_http", NULL, "Malformed request: %s", framing);
    return queue_error(k, c, &e);
  }
  if (te && strcasecmp(te, "chunked")) {
    /* Without this the server would wait for a body it cannot frame. */
    oai_seterr(&e, 501, "unsupported_transfer_encoding", NULL,
               "Transfer-Encoding '%.40s' is not supported: send the body with Content-Length or chunked", te);
    return queue_error(k, c, &e);
  }
  unsigned m = !strcmp(method, "GET") || !strcmp(method, "HEAD") ? RM_GET
               : !strcmp(method, "POST")                        ? RM_POST
               : !strcmp(method, "DELETE")                      ? RM_DELETE
                                                                : 0;
  if (!strncmp(url, "/api/", 5)) k->err = ollama_render_error; /* an unknown /api/ path answers as Ollama does */
  const char *arg = NULL;
  const route *other = NULL;
  k->rt = find_route(url, m, &arg, &other);
  if (k->rt) {
    k->ep = k->log.ep = s->route_ep[k->rt - k_routes];
    if (arg && !(k->arg = strdup(arg))) return MHD_NO;
  } else if (other) {
    k->ep = k->log.ep = s->route_ep[other - k_routes];
  }
  if (!k->rt && other && s->cors && !strcmp(method, "OPTIONS")) {
    k->rt = other;
    k->preflight = path_methods(url);
  } else if (!k->rt) {
    if (other) {
      oai_seterr(&k->pending, 405, "method_not_allowed", NULL, "Method %.16s is not allowed for %.200s", method, url);
      k->allow = path_methods(url);
    }
    else
      oai_seterr(&k->pending, 404, "unknown_url", NULL, "Unknown request URL: %.16s %.200s", method, url);
    k->rt = other; /* the Allow header of a 405 */
    k->has_pending = true;
  } else if (!k->rt->is_public) {
    /* Anthropic's clients send the key as x-api-key; either header works
     * on every route. */
    const char *authz = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    const char *xkey = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "x-api-key");
    auth_result who = !authz && xkey ? auth_identify_key(s->keys, xkey, k->tenant) : auth_identify(s->keys, authz, k->tenant);
    if (who == AUTH_DENIED) {
      if (k->rt->err) /* the other APIs' clients may send x-api-key */
        oai_seterr(&k->pending, 401, "invalid_api_key", NULL,
                   "Missing or incorrect API key: pass it as 'Authorization: Bearer <key>' or 'x-api-key: <key>'");
      else
        oai_seterr(&k->pending, 401, "invalid_api_key", NULL,
                   "Missing or incorrect API key: pass it as 'Authorization: Bearer <key>'");
      k->has_pending = true;
    }
    k->anonymous = who == AUTH_OPEN;
  }
  if (k->has_pending && has_body) return queue_error(k, c, &k->pending);
  if (cl && strtoull(cl, NULL, 10) > s->max_body) {
    /* A client that sent the body without waiting for 100-continue only
     * reads our answer after its write completes: drain (and drop) a
     * moderately oversized body, then answer 413. Absurd sizes, or
     * clients that wait, get the answer at once. */
    const char *expect = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_EXPECT);
    unsigned long long want = strtoull(cl, NULL, 10);
    if (!expect && want <= (unsigned long long)s->max_body * 8) {
      k->too_large = true;
      watch_set(s, k->w, W_BODY, s->body_ns);
      return MHD_YES;
    }
    oai_seterr(&e, 413, "request_too_large", NULL, "The request body exceeds the limit of %zu bytes", s->max_body);
    return queue_error(k, c, &e);
  }
  /* The body buffer sized once from Content-Length: growing it by
   * doubling held two copies at the moment of each copy (large bodies in
   * parallel peaked far above their size). Pages are only resident once
   * written, so a declared but unsent body costs address space only. */
  if (cl && !k->has_pending) sbuf_reserve(&k->body, (size_t)strtoull(cl, NULL, 10) + 1);
  watch_set(s, k->w, has_body ? W_BODY : W_BUSY, has_body ? s->body_ns : 0);
  return MHD_YES;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *upload_data, size_t *upload_data_size,
                                  void **con_cls) {
  server *s = cls;
  conn *k = *con_cls;
  oai_error e;
  if (!k) {
    if (!(k = calloc(1, sizeof *k))) return MHD_NO;
    k->s = s;
    k->t0 = pw_now_ns();
    k->ep = k->log.ep = MEP_OTHER;
    k->w = conn_watch(c);
    if (k->w) {
      /* The headers are in: no header deadline from here on (an early
       * answer must never meet a 408 written over it). */
      pthread_mutex_lock(&s->watch_mu);
      k->w->requests++;
      k->w->phase = W_BUSY;
      k->w->deadline = 0;
      pthread_mutex_unlock(&s->watch_mu);
    }
    k->m = s->models ? NULL : &s->single; /* store serving: bound once the body names it */
    *con_cls = k;
    __atomic_fetch_add(&s->inflight, 1, __ATOMIC_ACQ_REL);
    metrics_inflight(&s->m, 1);
    k->log.t0 = k->t0;
    oai_new_id("req-", k->log.id, sizeof k->log.id);
    return on_headers(s, k, c, url, method, version);
  }
  if (*upload_data_size) {
    /* Body bytes: kept up to the limit, then dropped (answered with 413). */
    k->body_seen += *upload_data_size;
    if (!k->answered && !k->too_large && !k->has_pending) {
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
  watch_set(s, k->w, W_BUSY, 0);
  if (k->answered) return MHD_YES;
  if (k->has_pending) return queue_error(k, c, &k->pending);
  if (k->preflight) return answer_preflight(k, c, k->preflight);
  if (k->too_large) {
    oai_seterr(&e, 413, "request_too_large", NULL, "The request body exceeds the limit of %zu bytes", s->max_body);
    return queue_error(k, c, &e);
  }
  if (k->body.oom) {
    oai_seterr(&e, 500, "internal_error", NULL, "out of memory");
    return queue_error(k, c, &e);
  }
  return k->rt->fn(k, c);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe) {
  server *s = cls;
  conn *k = *con_cls;
  if (!k) return;
  if (!k->streamed) {
    if (toe != MHD_REQUEST_TERMINATED_COMPLETED_OK) k->log.gone = true;
    log_emit(s, &k->log);
  }
  /* The connection may carry another request: its headers get a fresh
   * deadline (which also bounds how long an idle keep-alive connection
   * holds its thread). */
  watch_set(s, conn_watch(c), W_HEADERS, s->header_ns);
  if (k->ref) registry_release(srv_models_registry(s->models), k->ref, k->has_keep, k->keep_s);
  bool trim = k->body_seen >= TRIM_AFTER_BYTES;
  sbuf_free(&k->body);
  free(k->arg);
  free(k);
  *con_cls = NULL;
  /* Large bodies leave megabytes in this thread's malloc arena; hand them
   * back so parallel large requests do not ratchet the resident size up. */
  if (trim) malloc_trim(0);
  metrics_inflight(&s->m, -1);
  __atomic_fetch_sub(&s->inflight, 1, __ATOMIC_ACQ_REL);
}

static void mhd_log(void *cls, const char *fmt, va_list ap) {
  (void)cls;
  if (pw_log_level() < PW_LOG_DEBUG) return;
  char msg[512];
  vsnprintf(msg, sizeof msg, fmt, ap);
  pw_log(PW_LOG_DEBUG, "http: %s", msg);
}

/* ---- lifecycle --------------------------------------------------------- */

/* Resolves host (a name such as "localhost" or an address literal) and
 * binds a listening socket. SO_REUSEADDR only lets the port be rebound
 * while old connections sit in TIME_WAIT; unlike SO_REUSEPORT it never
 * lets a second server share a port that one is listening on. */
static int open_listener(const char *host, int port, int *fd_out, bool *v6, char *err) {
  struct addrinfo hints, *res = NULL;
  memset(&hints, 0, sizeof hints);
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  char ps[16];
  snprintf(ps, sizeof ps, "%d", port);
  int g = getaddrinfo(host, ps, &hints, &res);
  if (g) return pw_seterr(err, PW_EINVAL, "cannot resolve listen address '%s': %s", host, gai_strerror(g));
  const struct addrinfo *ai = res;
  for (const struct addrinfo *p = res; p; p = p->ai_next)
    if (p->ai_family == AF_INET) { /* "localhost": the IPv4 loopback most clients try */
      ai = p;
      break;
    }
  int rc = 0;
  int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) {
    rc = pw_seterr(err, PW_EIO, "cannot create a socket: %s", strerror(errno));
    goto done;
  }
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (bind(fd, ai->ai_addr, ai->ai_addrlen)) {
    int en = errno;
    if (en == EADDRINUSE)
      rc = pw_seterr(err, PW_EIO, "cannot listen on %s port %d: the port is already in use", host, port);
    else
      rc = pw_seterr(err, PW_EIO, "cannot listen on %s port %d: %s", host, port, strerror(en));
    goto done;
  }
  if (listen(fd, 256)) {
    rc = pw_seterr(err, PW_EIO, "cannot listen on %s port %d: %s", host, port, strerror(errno));
    goto done;
  }
  *v6 = ai->ai_family == AF_INET6;
  *fd_out = fd;
  fd = -1;
done:
  if (fd >= 0) close(fd);
  freeaddrinfo(res);
  return rc;
}

/* Splits "a,b,c" (or "*") into the allowed origins. */
static int parse_cors(server *s, const char *origins, char *err) {
  if (!(s->cors = strdup(origins))) return pw_seterr(err, PW_ENOMEM, "out of memory");
  char *save = NULL;
  for (char *t = strtok_r(s->cors, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
    while (*t == ' ') t++;
    size_t n = strlen(t);
    while (n && t[n - 1] == ' ') t[--n] = 0;
    if (!n) continue;
    if (!strcmp(t, "*")) {
      s->n_cors = 0;
      return 0;
    }
    if (strncmp(t, "http://", 7) && strncmp(t, "https://", 8))
      return pw_seterr(err, PW_EINVAL, "CORS origin '%s' must be '*' or start with http:// or https://", t);
    if (s->n_cors == MAX_CORS_ORIGINS) return pw_seterr(err, PW_EINVAL, "at most %d CORS origins", MAX_CORS_ORIGINS);
    s->cors_list[s->n_cors++] = t;
  }
  if (!s->n_cors) return pw_seterr(err, PW_EINVAL, "the CORS origin list '%s' names no origin", origins);
  return 0;
}

static void server_free(server *s) {
  if (s->watchdog_on) {
    pthread_mutex_lock(&s->watch_mu);
    s->watch_stop = true;
    pthread_cond_signal(&s->watch_cv);
    pthread_mutex_unlock(&s->watch_mu);
    pthread_join(s->watchdog, NULL);
  }
  srv_model_free(&s->single);
  srv_models_destroy(s->models);
  resp_store_destroy(s->responses);
  ev_key_destroy(s->receipt_key);
  auth_keys_destroy(s->keys);
  pthread_mutex_destroy(&s->log_mu);
  pthread_mutex_destroy(&s->watch_mu);
  pthread_cond_destroy(&s->watch_cv);
  free(s->cors);
  free(s);
}

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
  s->quiesced_fd = -1;
  s->listen_fd = -1;
  s->max_body = o->max_body ? o->max_body : SERVER_DEFAULT_MAX_BODY;
  s->timeout_s = o->request_timeout_s > 0 ? o->request_timeout_s : 0;
  s->keepalive_ms = o->keepalive_ms > 0 ? o->keepalive_ms : 15000;
  s->retry_after_s = o->retry_after_s > 0 ? o->retry_after_s : 1;
  s->header_ns = (uint64_t)((o->header_timeout_s > 0 ? o->header_timeout_s : SERVER_DEFAULT_HEADER_TIMEOUT) * 1e9);
  s->body_ns = (uint64_t)((o->body_timeout_s > 0 ? o->body_timeout_s : SERVER_DEFAULT_BODY_TIMEOUT) * 1e9);
  s->spec_mode = o->spec_mode && *o->spec_mode && strcmp(o->spec_mode, "off") ? o->spec_mode : NULL;
  s->log_requests = o->log_requests;
  s->log_json = o->log_json;
  s->log_out = o->log_out;
  pthread_mutex_init(&s->log_mu, NULL);
  pthread_mutex_init(&s->watch_mu, NULL);
  pthread_cond_init(&s->watch_cv, NULL);
  s->started = (long long)time(NULL);
  metrics_init(&s->m);
  for (int i = 0; i < N_ROUTES; i++) s->route_ep[i] = metrics_endpoint_add(&s->m, k_routes[i].metric);
  int rc = 0;
  if (o->port < 0 || o->port > 65535) {
    rc = pw_seterr(err, PW_EINVAL, "invalid port %d", o->port);
    goto fail;
  }
  if (o->cors_origins && (rc = parse_cors(s, o->cors_origins, err))) goto fail;
  if ((rc = auth_keys_create(o->api_key_file, o->api_keys, &s->keys, err))) goto fail;
  if (e) {
    if ((rc = srv_model_init(&s->single, e, o->chat_template, err))) goto fail;
  } else if (!o->store) {
    rc = pw_seterr(err, PW_EINVAL, "server_start: no engine and no store to serve");
    goto fail;
  } else {
    if (o->chat_template) {
      rc = pw_seterr(err, PW_EINVAL, "a chat template file applies to one model: give --model with it");
      goto fail;
    }
    if ((rc = srv_models_create(o->store, &s->models, err))) goto fail;
  }
  if (o->receipt_key_path && (rc = ev_key_load_private(o->receipt_key_path, &s->receipt_key, err))) goto fail;
  if ((rc = resp_store_create(o->responses_max > 0 ? o->responses_max : SERVER_DEFAULT_RESPONSES,
                              o->responses_max_bytes ? o->responses_max_bytes : SERVER_DEFAULT_RESPONSES_BYTES,
                              &s->responses, err)))
    goto fail;
  const char *host = o->host && *o->host ? o->host : "127.0.0.1";
  bool v6 = false;
  if ((rc = open_listener(host, o->port, &s->listen_fd, &v6, err))) goto fail;
  if (pthread_create(&s->watchdog, NULL, watchdog_main, s)) {
    rc = pw_seterr(err, PW_ENOMEM, "cannot start the connection watchdog");
    goto fail;
  }
  s->watchdog_on = true;
  /* One thread per connection: request handlers block on their engine
   * queue, and a stream's content reader blocks for its next token. The
   * thread count stays bounded by the connection limit, the per-client
   * limit and the header/body deadlines. */
  unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ITC | MHD_USE_POLL |
                   MHD_USE_ERROR_LOG | (v6 ? MHD_USE_IPv6 : 0);
  unsigned max_conn = (unsigned)(o->max_connections > 0 ? o->max_connections : 256);
  unsigned per_client = (unsigned)(o->max_per_client > 0 ? o->max_per_client : (int)(max_conn / 4 ? max_conn / 4 : 1));
  s->d = MHD_start_daemon(flags, (uint16_t)o->port, NULL, NULL, on_request, s,
                          MHD_OPTION_LISTEN_SOCKET, (MHD_socket)s->listen_fd,
                          MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
                          MHD_OPTION_NOTIFY_CONNECTION, on_connection, s,
                          MHD_OPTION_CONNECTION_LIMIT, max_conn,
                          MHD_OPTION_PER_IP_CONNECTION_LIMIT, per_client,
                          MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)IDLE_TIMEOUT_S,
                          MHD_OPTION_EXTERNAL_LOGGER, mhd_log, s,
                          MHD_OPTION_END);
  if (!s->d) {
    rc = pw_seterr(err, PW_EIO, "cannot start the HTTP server on %s port %d", host, o->port);
    goto fail;
  }
  struct sockaddr_storage bound;
  socklen_t bl = sizeof bound;
  if (getsockname(s->listen_fd, (struct sockaddr *)&bound, &bl)) {
    rc = pw_seterr(err, PW_EIO, "cannot read the listening port");
    goto fail;
  }
  s->listen_fd = -1; /* MHD's now */
  s->port = bound.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)&bound)->sin6_port)
                                        : ntohs(((struct sockaddr_in *)&bound)->sin_port);
  if ((rc = replica_name(o->replica_id, s->port, s->replica, err))) goto fail;
  metrics_set_replica(&s->m, s->replica);
  *out = s;
  return 0;
fail:
  if (s->d) MHD_stop_daemon(s->d); /* closes the listening socket */
  else if (s->listen_fd >= 0) close(s->listen_fd);
  server_free(s);
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
  server_free(s);
}
