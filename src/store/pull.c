/* pull.c - downloads GGUF files into the store with libcurl: sources,
 * the Hugging Face file list, resumable verified transfers, the per-file
 * download lock (behaviour in pull.h). Not the store's layout (store.c)
 * nor any display (the caller's progress callback). */
#include "store/pull.h"

#include "base/error.h"
#include "base/log.h"
#include "base/sha256.h"
#include "power.h"

#include <ctype.h>
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#define HF_DEFAULT_ENDPOINT "https://huggingface.co"
#define HF_LIST_MAX_BYTES (16 << 20) /* file list of one repository */
#define BACKOFF_FIRST_MS 1000
#define BACKOFF_MAX_MS 30000
#define PROGRESS_EVERY_S 0.1

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cancelled(const store_pull_opts *o) { return o->cancel && *o->cancel; }

/* Sleeps ms in slices so a cancel is seen within 100 ms; 1 when cancelled. */
static int sleep_ms(const store_pull_opts *o, long ms) {
  while (ms > 0) {
    if (cancelled(o)) return 1;
    long step = ms < 100 ? ms : 100;
    struct timespec ts = {0, step * 1000000L};
    nanosleep(&ts, NULL);
    ms -= step;
  }
  return cancelled(o);
}

static int is_hex64_ci(const char *h, size_t n) {
  if (n != 64) return 0;
  for (size_t i = 0; i < n; i++)
    if (!isxdigit((unsigned char)h[i])) return 0;
  return 1;
}

static void lower_copy(char *dst, const char *src, size_t n) {
  for (size_t i = 0; i < n; i++) dst[i] = (char)tolower((unsigned char)src[i]);
  dst[n] = 0;
}

int store_parse_source(const char *source, store_source *out, char *err) {
  memset(out, 0, sizeof *out);
  if (!source || !*source) return pw_seterr(err, PW_EINVAL, "empty source");
  size_t len = strlen(source);
  if (len >= sizeof out->url) return pw_seterr(err, PW_EINVAL, "source longer than %zu bytes", sizeof out->url - 1);
  char buf[2048];
  memcpy(buf, source, len + 1);
  char *at = strstr(buf, "@sha256:");
  if (at) {
    const char *h = at + 8;
    if (!is_hex64_ci(h, strlen(h)))
      return pw_seterr(err, PW_EINVAL, "pin must be @sha256: followed by 64 hex digits");
    lower_copy(out->pin, h, 64);
    *at = 0;
  }
  if (!strncmp(buf, "http://", 7) || !strncmp(buf, "https://", 8)) {
    out->kind = 0;
    for (const char *p = buf; *p; p++)
      if ((unsigned char)*p <= ' ' || *p == 0x7f) return pw_seterr(err, PW_EINVAL, "URL contains spaces or control bytes");
    snprintf(out->url, sizeof out->url, "%s", buf);
    return PW_OK;
  }
  const char *rest = NULL;
  if (!strncmp(buf, "hf.co/", 6)) rest = buf + 6;
  else if (!strncmp(buf, "huggingface.co/", 15)) rest = buf + 15;
  if (!rest)
    return pw_seterr(err, PW_EINVAL, "source '%s' is neither an http(s) URL nor hf.co/ORG/REPO[:QUANT]", source);
  out->kind = 1;
  const char *slash = strchr(rest, '/');
  const char *colon = strchr(rest, ':');
  if (!slash || slash == rest) return pw_seterr(err, PW_EINVAL, "expected hf.co/ORG/REPO[:QUANT]");
  size_t lo = (size_t)(slash - rest);
  const char *repo = slash + 1;
  size_t lr = colon ? (size_t)(colon - repo) : strlen(repo);
  if (colon && colon < slash) return pw_seterr(err, PW_EINVAL, "expected hf.co/ORG/REPO[:QUANT]");
  if (lo >= sizeof out->org || lr == 0 || lr >= sizeof out->repo)
    return pw_seterr(err, PW_EINVAL, "organization or repository name empty or too long");
  for (const char *p = rest; p < repo + lr; p++) {
    if (p == slash) continue;
    if (!isalnum((unsigned char)*p) && *p != '-' && *p != '_' && *p != '.')
      return pw_seterr(err, PW_EINVAL, "invalid character in hf.co/ORG/REPO: '%c'", *p);
  }
  if (!strncmp(rest, "..", 2) || !strncmp(repo, "..", 2) || rest[0] == '.' || repo[0] == '.')
    return pw_seterr(err, PW_EINVAL, "invalid organization or repository name");
  memcpy(out->org, rest, lo);
  memcpy(out->repo, repo, lr);
  if (colon) {
    const char *q = colon + 1;
    size_t lq = strlen(q);
    if (lq == 0 || lq >= sizeof out->quant) return pw_seterr(err, PW_EINVAL, "quantization after ':' empty or too long");
    for (size_t i = 0; i < lq; i++)
      if (!isalnum((unsigned char)q[i]) && q[i] != '_' && q[i] != '-')
        return pw_seterr(err, PW_EINVAL, "invalid quantization '%s'", q);
    memcpy(out->quant, q, lq);
  }
  return PW_OK;
}

int store_split_part(const char *name, int *part, int *count) {
  size_t n = strlen(name);
  /* "-00001-of-00003.gguf" is 20 bytes */
  if (n < 20 || strcasecmp(name + n - 5, ".gguf")) return 0;
  const char *p = name + n - 20;
  int a, b;
  char tail[8];
  if (p[0] != '-' || sscanf(p, "-%5d-of-%5d%7s", &a, &b, tail) != 3 || strcasecmp(tail, ".gguf")) return 0;
  for (int i = 1; i < 6; i++)
    if (!isdigit((unsigned char)p[i]) || !isdigit((unsigned char)p[i + 9])) return 0;
  if (a < 1 || b < 1 || a > b) return 0;
  *part = a;
  *count = b;
  return 1;
}

int store_hf_match(const char *path, const char *quant) {
  size_t n = strlen(path), q = strlen(quant);
  if (n < 5 || strcasecmp(path + n - 5, ".gguf") || q == 0) return 0;
  for (size_t i = 0; i + q <= n; i++) {
    if (strncasecmp(path + i, quant, q)) continue;
    char before = i ? path[i - 1] : '/';
    char after = path[i + q];
    if (!strchr("/.-_", before)) continue;
    /* After the label: the extension, a split suffix, a '-' or a '/'
     * (quantization folders); not '_' (Q4_K must not match Q4_K_M). */
    if (after == '.' || after == '-' || after == '/') return 1;
  }
  return 0;
}

/* ---- HTTP ---- */

typedef struct xfer {
  const store_pull_opts *o;
  CURL *curl;
  int fd;                /* the partial file, -1 for memory transfers */
  char *mem;             /* memory transfers: body (malloc'ed), mem_len bytes */
  size_t mem_len, mem_cap;
  const char *dir;       /* for the free-space check */
  uint64_t offset;       /* bytes in the file */
  pw_sha256_ctx *h;      /* covers [0, hashed) of the file */
  uint64_t hashed;
  unsigned char head[4]; /* the file's first bytes, as they arrive */
  int began;             /* body checks done for this response */
  int discard;           /* error status: body not written */
  long status;
  uint64_t total;        /* whole file size, 0 when unknown */
  /* headers of the response being received */
  int64_t content_length; /* -1 when absent */
  char content_range[96];
  char etag[160], linked_etag[160];
  /* errors not to retry: set by callbacks */
  int hard;
  char herr[PW_ERRMAX];
  /* progress */
  const char *file;
  const char *expect;    /* the digest it must have, or NULL */
  int part, n_parts;
  double t_last, t_rate, t_start;
  uint64_t rate_bytes, start_bytes; /* t_start, start_bytes: this attempt's */
  double rate;
} xfer;

static void trim_value(char *dst, size_t cap, const char *v, size_t n) {
  while (n && (*v == ' ' || *v == '\t')) v++, n--;
  while (n && (v[n - 1] == '\r' || v[n - 1] == '\n' || v[n - 1] == ' ')) n--;
  if (n >= cap) n = cap - 1;
  memcpy(dst, v, n);
  dst[n] = 0;
}

static size_t on_header(char *buf, size_t size, size_t nitems, void *ud) {
  xfer *x = ud;
  size_t n = size * nitems;
  if (n >= 5 && !strncmp(buf, "HTTP/", 5)) {
    /* A new response (after a redirect): its own length, range and etag.
     * X-Linked-Etag stays: Hugging Face sends it on the redirect. */
    x->content_length = -1;
    x->content_range[0] = 0;
    x->etag[0] = 0;
    return n;
  }
  const char *colon = memchr(buf, ':', n);
  if (!colon) return n;
  size_t k = (size_t)(colon - buf);
  const char *v = colon + 1;
  size_t vn = n - k - 1;
  char val[160];
  if (k == 14 && !strncasecmp(buf, "content-length", k)) {
    trim_value(val, sizeof val, v, vn);
    char *end;
    unsigned long long cl = strtoull(val, &end, 10);
    if (*val && !*end) x->content_length = (int64_t)cl;
  } else if (k == 13 && !strncasecmp(buf, "content-range", k)) {
    trim_value(x->content_range, sizeof x->content_range, v, vn);
  } else if (k == 4 && !strncasecmp(buf, "etag", k)) {
    trim_value(x->etag, sizeof x->etag, v, vn);
  } else if (k == 13 && !strncasecmp(buf, "x-linked-etag", k)) {
    trim_value(x->linked_etag, sizeof x->linked_etag, v, vn);
  }
  return n;
}

/* A SHA-256 hex digest out of an ETag ("…", W/"…"), lower-cased; 0 if not. */
static int etag_digest(const char *etag, char *out) {
  if (!strncmp(etag, "W/", 2)) etag += 2;
  size_t n = strlen(etag);
  if (n >= 2 && etag[0] == '"' && etag[n - 1] == '"') etag++, n -= 2;
  if (!is_hex64_ci(etag, n)) return 0;
  lower_copy(out, etag, 64);
  return 1;
}

static int set_hard(xfer *x, int code, const char *fmt, const char *a) {
  if (!x->hard) {
    x->hard = code;
    snprintf(x->herr, sizeof x->herr, fmt, a);
  }
  return 0;
}

static void report(xfer *x, int finished, int force) {
  const store_pull_opts *o = x->o;
  if (!o->progress || x->fd < 0) return;
  double t = now_s();
  if (t - x->t_rate >= 0.5) { /* rate over the last half second or more */
    double inst = (double)(x->offset - x->rate_bytes) / (t - x->t_rate);
    x->rate = x->rate > 0 ? 0.7 * x->rate + 0.3 * inst : inst;
    x->t_rate = t;
    x->rate_bytes = x->offset;
  }
  /* the last line gives the attempt's average (a file done in under half
   * a second has had no rate yet) */
  if (finished && t > x->t_start && x->offset > x->start_bytes)
    x->rate = (double)(x->offset - x->start_bytes) / (t - x->t_start);
  if (!force && !finished && t - x->t_last < PROGRESS_EVERY_S) return;
  x->t_last = t;
  store_progress p = {x->file, x->part, x->n_parts, x->offset, x->total, x->rate, 0, finished, x->expect};
  o->progress(o->progress_ud, &p);
}

static int truncate_partial(xfer *x) {
  if (ftruncate(x->fd, 0) != 0 || lseek(x->fd, 0, SEEK_SET) != 0) return -1;
  x->offset = 0;
  pw_sha256_free(x->h);
  x->h = pw_sha256_begin();
  x->hashed = 0;
  return x->h ? 0 : -1;
}

/* First bytes of a response body: status, range and free space checks. */
static int begin_body(xfer *x) {
  x->began = 1;
  curl_easy_getinfo(x->curl, CURLINFO_RESPONSE_CODE, &x->status);
  if (x->status < 200 || x->status >= 300) {
    x->discard = 1;
    return 1;
  }
  if (x->fd < 0) return 1;
  if (x->status == 200) {
    if (x->offset > 0) { /* the server ignored the Range: start over */
      pw_log(PW_LOG_INFO, "pull: server sent the whole file; restarting %s", x->file);
      if (truncate_partial(x)) return set_hard(x, PW_EIO, "cannot truncate the partial file: %s", strerror(errno));
    }
    x->total = x->content_length >= 0 ? (uint64_t)x->content_length : 0;
  } else if (x->status == 206) {
    unsigned long long a, b, n;
    if (sscanf(x->content_range, "bytes %llu-%llu/%llu", &a, &b, &n) != 3 || a != x->offset || b < a || n <= b)
      return set_hard(x, PW_EIO, "server answered with an unexpected range '%s'", x->content_range);
    x->total = n;
  } else {
    return set_hard(x, PW_EIO, "unexpected HTTP status for %s", x->file);
  }
  if (x->total) {
    struct statvfs sv;
    uint64_t need = x->total - x->offset;
    if (statvfs(x->dir, &sv) == 0 && (uint64_t)sv.f_bavail * sv.f_frsize < need) {
      char msg[160];
      snprintf(msg, sizeof msg, "need %llu bytes, %llu free", (unsigned long long)need,
               (unsigned long long)sv.f_bavail * sv.f_frsize);
      return set_hard(x, PW_EIO, "not enough disk space in the store: %s", msg);
    }
  }
  return 1;
}

static size_t on_body(char *buf, size_t size, size_t nmemb, void *ud) {
  xfer *x = ud;
  size_t n = size * nmemb;
  if (!x->began && !begin_body(x)) return 0;
  if (x->hard) return 0;
  if (x->discard) return n;
  if (x->fd < 0) { /* memory transfer */
    if (x->mem_len + n > HF_LIST_MAX_BYTES) return set_hard(x, PW_ELIMIT, "%s: answer too large", x->file);
    if (x->mem_len + n + 1 > x->mem_cap) {
      size_t nc = (x->mem_len + n + 1) * 2;
      char *m = realloc(x->mem, nc);
      if (!m) return set_hard(x, PW_ENOMEM, "%s", "out of memory");
      x->mem = m;
      x->mem_cap = nc;
    }
    memcpy(x->mem + x->mem_len, buf, n);
    x->mem_len += n;
    x->mem[x->mem_len] = 0;
    return n;
  }
  if (x->offset < 4) {
    size_t k = n < 4 - x->offset ? n : (size_t)(4 - x->offset);
    memcpy(x->head + x->offset, buf, k);
    if (x->offset + k == 4 && memcmp(x->head, "GGUF", 4)) return set_hard(x, PW_EFORMAT, "%s is not a GGUF file (no GGUF magic in its first bytes)", x->file);
  }
  if (x->total && x->offset + n > x->total) return set_hard(x, PW_EIO, "%s: server sent more bytes than announced", x->file);
  for (size_t off = 0; off < n;) {
    ssize_t w = write(x->fd, buf + off, n - off);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return set_hard(x, PW_EIO, "cannot write to the store: %s", errno == ENOSPC ? "disk full" : strerror(errno));
    off += (size_t)w;
  }
  pw_sha256_update(x->h, buf, n);
  x->offset += n;
  x->hashed += n;
  report(x, 0, 0);
  return n;
}

static int on_xferinfo(void *ud, curl_off_t dt, curl_off_t dn, curl_off_t ut, curl_off_t un) {
  (void)dt, (void)dn, (void)ut, (void)un;
  xfer *x = ud;
  if (cancelled(x->o)) return 1;
  report(x, 0, 0);
  return 0;
}

static CURL *make_curl(xfer *x, const char *url, const char *token) {
  CURL *c = curl_easy_init();
  if (!c) return NULL;
  const store_pull_opts *o = x->o;
  curl_easy_setopt(c, CURLOPT_URL, url);
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 1L);
  curl_easy_setopt(c, CURLOPT_MAXREDIRS, 10L);
  curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(c, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, o->connect_timeout_s > 0 ? o->connect_timeout_s : 30L);
  curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1L);
  curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, o->stall_timeout_s > 0 ? o->stall_timeout_s : 60L);
  char ua[64];
  snprintf(ua, sizeof ua, "power/%s", pw_version());
  curl_easy_setopt(c, CURLOPT_USERAGENT, ua);
  if (token && *token) {
    /* libcurl sends credentials set this way only to the host of the first
     * request (CURLOPT_UNRESTRICTED_AUTH stays off): a redirect to a CDN
     * does not get the token. */
    curl_easy_setopt(c, CURLOPT_HTTPAUTH, CURLAUTH_BEARER);
    curl_easy_setopt(c, CURLOPT_XOAUTH2_BEARER, token);
  }
  curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
  curl_easy_setopt(c, CURLOPT_HEADERDATA, x);
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, x);
  curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
  curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, on_xferinfo);
  curl_easy_setopt(c, CURLOPT_XFERINFODATA, x);
  return c;
}

static int transient_status(long st) { return st == 408 || st == 429 || st >= 500; }

static int status_error(long st, const char *url, char *err) {
  if (st == 404 || st == 410) return pw_seterr(err, PW_ENOTFOUND, "%s: not found (HTTP %ld)", url, st);
  if (st == 401 || st == 403)
    return pw_seterr(err, PW_EIO, "%s: access denied (HTTP %ld); a gated or private repository needs HF_TOKEN or --token",
                     url, st);
  return pw_seterr(err, PW_EIO, "%s: HTTP %ld", url, st);
}

static int retries_of(const store_pull_opts *o) { return o->retries < 0 ? 5 : o->retries; }

static long backoff_ms(int attempt) {
  long ms = BACKOFF_FIRST_MS;
  for (int i = 0; i < attempt && ms < BACKOFF_MAX_MS; i++) ms *= 2;
  return ms < BACKOFF_MAX_MS ? ms : BACKOFF_MAX_MS;
}

/* GET url into memory (the Hugging Face API), with retries. *body malloc'ed. */
static int http_get_mem(const store_pull_opts *o, const char *url, const char *token, char **body, char *err) {
  *body = NULL;
  for (int attempt = 0;; attempt++) {
    xfer x = {0};
    x.o = o;
    x.fd = -1;
    x.file = url;
    x.content_length = -1;
    CURL *c = x.curl = make_curl(&x, url, token);
    if (!c) return pw_seterr(err, PW_ENOMEM, "out of memory");
    curl_easy_setopt(c, CURLOPT_TIMEOUT, 120L);
    CURLcode cc = curl_easy_perform(c);
    long st = 0;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &st);
    curl_easy_cleanup(c);
    int retry = 0;
    if (x.hard) {
      free(x.mem);
      return pw_seterr(err, x.hard, "%s", x.herr);
    }
    if (cc == CURLE_ABORTED_BY_CALLBACK || cancelled(o)) {
      free(x.mem);
      return pw_seterr(err, PW_ECANCELED, "cancelled");
    }
    if (cc != CURLE_OK) {
      pw_seterr(err, PW_EIO, "%s: %s", url, curl_easy_strerror(cc));
      retry = cc != CURLE_UNSUPPORTED_PROTOCOL && cc != CURLE_URL_MALFORMAT;
    } else if (st < 200 || st >= 300) {
      status_error(st, url, err);
      retry = transient_status(st);
    } else {
      *body = x.mem ? x.mem : strdup("");
      return *body ? PW_OK : pw_seterr(err, PW_ENOMEM, "out of memory");
    }
    free(x.mem);
    if (!retry || attempt >= retries_of(o)) return st == 404 || st == 410 ? PW_ENOTFOUND : PW_EIO;
    pw_log(PW_LOG_WARN, "pull: %s; retrying", err);
    if (sleep_ms(o, backoff_ms(attempt))) return pw_seterr(err, PW_ECANCELED, "cancelled");
  }
}

/* ---- what to download ---- */

typedef struct target {
  char url[2048];
  char file[256];    /* file name, for messages */
  char expect[65];   /* digest it must have, "" when unknown */
  uint64_t size;     /* from the file list, 0 when unknown */
} target;

static const char *base_name(const char *path) {
  const char *s = strrchr(path, '/');
  return s ? s + 1 : path;
}

/* The quantization label at the end of a file stem ("model-Q4_K_M"), as a
 * pointer to the separator before it, or NULL. */
static const char *stem_quant(const char *stem, size_t n) {
  for (size_t i = n; i-- > 0;) {
    if (stem[i] != '-' && stem[i] != '.' && stem[i] != '_') continue;
    const char *lab = stem + i + 1;
    size_t ln = n - i - 1;
    for (uint32_t ft = 0; ft < 64; ft++) {
      const char *l = store_ftype_label(ft);
      if (l && strlen(l) == ln && !strncasecmp(l, lab, ln)) return stem + i;
    }
    if ((ln == 4 && (!strncasecmp(lab, "q4_k", 4) || !strncasecmp(lab, "q5_k", 4) || !strncasecmp(lab, "q3_k", 4))))
      return stem + i;
  }
  return NULL;
}

/* A store name from a repository or file stem plus a tag: lower case,
 * characters outside the name alphabet become '-'. */
static void make_name(const char *base, size_t n, const char *tag, char *out) {
  char b[64];
  size_t k = 0;
  for (size_t i = 0; i < n && k < 60; i++) {
    int c = tolower((unsigned char)base[i]);
    b[k++] = (char)(isalnum(c) || c == '.' || c == '_' || c == '-' ? c : '-');
  }
  while (k && (b[k - 1] == '-' || b[k - 1] == '.')) k--;
  b[k] = 0;
  if (!k) snprintf(b, sizeof b, "model");
  char t[40];
  size_t tk = 0;
  for (const char *p = tag; *p && tk < sizeof t - 1; p++) {
    int c = tolower((unsigned char)*p);
    t[tk++] = (char)(isalnum(c) || c == '.' || c == '_' || c == '-' ? c : '-');
  }
  t[tk] = 0;
  snprintf(out, STORE_NAME_MAX + 1, "%.60s:%.39s", b, tk ? t : "latest");
}

/* Targets of a plain URL: the file, or every part of a split GGUF. */
static int url_targets(const store_source *src, target *t, int *n, char *name, char *quant, char *err) {
  char path[2048];
  snprintf(path, sizeof path, "%s", src->url);
  char *q = strpbrk(path, "?#");
  if (q) *q = 0;
  const char *file = base_name(path);
  if (!*file) return pw_seterr(err, PW_EINVAL, "URL %s names no file", src->url);
  int part, count;
  size_t stem_len = strlen(file);
  if (stem_len > 5 && !strcasecmp(file + stem_len - 5, ".gguf")) stem_len -= 5;
  if (store_split_part(file, &part, &count)) {
    if (count > STORE_MAX_PARTS) return pw_seterr(err, PW_ELIMIT, "split GGUF of %d parts (at most %d)", count, STORE_MAX_PARTS);
    if (src->pin[0] && count > 1) return pw_seterr(err, PW_EINVAL, "a @sha256 pin needs a single-file model");
    stem_len = strlen(file) - 20;
    /* Offset of "-00001" in the URL (the query string, if any, follows). */
    size_t at = (size_t)(file - path) + stem_len;
    for (int i = 0; i < count; i++) {
      snprintf(t[i].url, sizeof t[i].url, "%s", src->url);
      char num[16];
      snprintf(num, sizeof num, "%05d", i + 1);
      memcpy(t[i].url + at + 1, num, 5);
      snprintf(t[i].file, sizeof t[i].file, "%.*s-%05d-of-%05d.gguf", (int)(stem_len > 200 ? 200 : stem_len), file, i + 1,
               count);
    }
    *n = count;
  } else {
    snprintf(t[0].url, sizeof t[0].url, "%s", src->url);
    snprintf(t[0].file, sizeof t[0].file, "%.255s", file);
    snprintf(t[0].expect, sizeof t[0].expect, "%s", src->pin);
    *n = 1;
  }
  const char *qs = stem_quant(file, stem_len);
  if (qs) {
    size_t ql = stem_len - (size_t)(qs - file) - 1;
    snprintf(quant, 32, "%.*s", (int)(ql < 31 ? ql : 31), qs + 1);
    for (char *p = quant; *p; p++) *p = (char)toupper((unsigned char)*p);
    make_name(file, (size_t)(qs - file), quant, name);
  } else {
    make_name(file, stem_len, "", name);
  }
  return PW_OK;
}

static const char *hf_endpoint(char *buf, size_t cap) {
  const char *e = getenv("POWER_HF_ENDPOINT");
  snprintf(buf, cap, "%s", e && *e ? e : HF_DEFAULT_ENDPOINT);
  size_t n = strlen(buf);
  while (n && buf[n - 1] == '/') buf[--n] = 0;
  return buf;
}

typedef struct hf_file {
  const char *path;
  const char *oid; /* LFS sha256, may be NULL */
  uint64_t size;
} hf_file;

static int cmp_hf(const void *a, const void *b) { return strcmp(((const hf_file *)a)->path, ((const hf_file *)b)->path); }

/* The "group" of a GGUF path: the path without a split suffix. */
static size_t group_len(const char *path) {
  int a, b;
  size_t n = strlen(path);
  return store_split_part(path, &a, &b) ? n - 20 : n - 5;
}

/* Targets of hf.co/ORG/REPO[:QUANT] from the repository's file list. */
static int hf_targets(const store_pull_opts *o, const store_source *src, const char *token, target *t, int *n,
                      char *name, char *quant, char *err) {
  char ep[1024], url[2048];
  hf_endpoint(ep, sizeof ep);
  snprintf(url, sizeof url, "%s/api/models/%s/%s/tree/main?recursive=true", ep, src->org, src->repo);
  char *body;
  int rc = http_get_mem(o, url, token, &body, err);
  if (rc == PW_ENOTFOUND)
    return pw_seterr(err, PW_ENOTFOUND, "repository %s/%s not found (or private: set HF_TOKEN)", src->org, src->repo);
  if (rc) return rc;
  json_error_t je;
  json_t *root = json_loads(body, 0, &je);
  free(body);
  hf_file *files = NULL;
  if (!json_is_array(root)) {
    rc = pw_seterr(err, PW_EFORMAT, "%s: file list is not a JSON array", url);
    goto fail;
  }
  size_t nf = 0, na = json_array_size(root);
  files = calloc(na ? na : 1, sizeof *files);
  if (!files) {
    rc = pw_seterr(err, PW_ENOMEM, "out of memory");
    goto fail;
  }
  for (size_t i = 0; i < na; i++) {
    json_t *e = json_array_get(root, i);
    const char *type = json_string_value(json_object_get(e, "type"));
    const char *path = json_string_value(json_object_get(e, "path"));
    if (!path || (type && strcmp(type, "file"))) continue;
    size_t pl = strlen(path);
    if (pl < 6 || pl > 250 || strcasecmp(path + pl - 5, ".gguf") || strstr(path, "..") || path[0] == '/') continue;
    if (strcasestr(path, "mmproj")) continue; /* vision projectors are not models */
    json_t *lfs = json_object_get(e, "lfs");
    const char *oid = json_string_value(json_object_get(lfs, "oid"));
    if (oid && !is_hex64_ci(oid, strlen(oid))) oid = NULL;
    json_int_t sz = json_integer_value(json_object_get(lfs ? lfs : e, "size"));
    files[nf++] = (hf_file){path, oid, sz > 0 ? (uint64_t)sz : 0};
  }
  if (nf == 0) {
    rc = pw_seterr(err, PW_ENOTFOUND, "repository %s/%s has no GGUF file", src->org, src->repo);
    goto fail;
  }
  qsort(files, nf, sizeof *files, cmp_hf);
  /* Groups (a model = one file or the parts of one split) that match the
   * quantization; with none asked: the only model, else the Q4_K_M one. */
  const char *want = src->quant[0] ? src->quant : NULL;
  const char *pick = NULL;
  size_t pick_len = 0;
  int n_match = 0;
  char names[1024] = "";
  char all_names[1024] = "";
  int n_all = 0;
  for (int pass = 0; pass < 2 && n_match != 1; pass++) {
    const char *q = want ? want : pass == 0 ? NULL : "Q4_K_M";
    if (want && pass == 1) break;
    if (pass == 1) { /* keep the full list for the error message */
      n_all = n_match;
      memcpy(all_names, names, sizeof names);
    }
    n_match = 0;
    names[0] = 0;
    for (size_t i = 0; i < nf; i++) {
      size_t gl = group_len(files[i].path);
      if (i > 0 && group_len(files[i - 1].path) == gl && !strncmp(files[i - 1].path, files[i].path, gl)) continue;
      if (q && !store_hf_match(files[i].path, q)) continue;
      n_match++;
      pick = files[i].path;
      pick_len = gl;
      size_t used = strlen(names);
      if (used < sizeof names - 80)
        snprintf(names + used, sizeof names - used, "%s%.*s", used ? ", " : "", (int)gl, files[i].path);
    }
  }
  if (n_match == 0 && n_all > 1) { /* several models, none of them Q4_K_M */
    n_match = n_all;
    memcpy(names, all_names, sizeof names);
  }
  if (n_match == 0) {
    rc = pw_seterr(err, PW_ENOTFOUND, "%s/%s has no GGUF of quantization %s", src->org, src->repo, want ? want : "Q4_K_M");
    goto fail;
  }
  if (n_match > 1) {
    rc = pw_seterr(err, PW_EINVAL, "%s/%s has several GGUFs%s%s (%s); name one with :QUANT", src->org, src->repo,
                   want ? " of quantization " : "", want ? want : "", names);
    goto fail;
  }
  *n = 0;
  for (size_t i = 0; i < nf; i++) {
    if (strncmp(files[i].path, pick, pick_len) || group_len(files[i].path) != pick_len) continue;
    if (*n >= STORE_MAX_PARTS) {
      rc = pw_seterr(err, PW_ELIMIT, "split GGUF of more than %d parts", STORE_MAX_PARTS);
      goto fail;
    }
    target *x = &t[(*n)++];
    /* Path segments are plain names (checked above); escape each. */
    char esc[1024] = "";
    char tmp[256];
    snprintf(tmp, sizeof tmp, "%s", files[i].path);
    char *save = NULL;
    for (char *seg = strtok_r(tmp, "/", &save); seg; seg = strtok_r(NULL, "/", &save)) {
      char *e = curl_easy_escape(NULL, seg, 0);
      if (!e) {
        rc = pw_seterr(err, PW_ENOMEM, "out of memory");
        goto fail;
      }
      size_t used = strlen(esc);
      snprintf(esc + used, sizeof esc - used, "%s%s", used ? "/" : "", e);
      curl_free(e);
    }
    if (snprintf(x->url, sizeof x->url, "%s/%s/%s/resolve/main/%s", ep, src->org, src->repo, esc) >= (int)sizeof x->url) {
      rc = pw_seterr(err, PW_ELIMIT, "download URL of %s is too long", files[i].path);
      goto fail;
    }
    snprintf(x->file, sizeof x->file, "%s", base_name(files[i].path));
    if (files[i].oid) lower_copy(x->expect, files[i].oid, 64);
    x->size = files[i].size;
  }
  if (src->pin[0]) {
    if (*n > 1) {
      rc = pw_seterr(err, PW_EINVAL, "a @sha256 pin needs a single-file model");
      goto fail;
    }
    if (t[0].expect[0] && strcmp(t[0].expect, src->pin)) {
      rc = pw_seterr(err, PW_EIO, "%s has digest %s, not the pinned %s", t[0].file, t[0].expect, src->pin);
      goto fail;
    }
    memcpy(t[0].expect, src->pin, 65);
  }
  /* Name: the repository without a -GGUF suffix, tagged with the quantization. */
  size_t rl = strlen(src->repo);
  if (rl > 5 && (!strcasecmp(src->repo + rl - 5, "-gguf") || !strcasecmp(src->repo + rl - 5, "_gguf"))) rl -= 5;
  const char *qs = stem_quant(pick, pick_len);
  if (want) snprintf(quant, 32, "%s", want);
  else if (qs) snprintf(quant, 32, "%.*s", (int)(pick_len - (size_t)(qs - pick) - 1), qs + 1);
  for (char *p = quant; *p; p++) *p = (char)toupper((unsigned char)*p);
  make_name(src->repo, rl, quant, name);
  rc = PW_OK;
fail:
  free(files);
  json_decref(root);
  return rc;
}

/* ---- one file ---- */

/* Hashes [0, size) of the partial file into a fresh context. */
static int rehash(xfer *x, char *err) {
  pw_sha256_free(x->h);
  x->h = pw_sha256_begin();
  x->hashed = 0;
  if (!x->h) return pw_seterr(err, PW_ENOMEM, "out of memory");
  char *buf = malloc(1 << 20);
  if (!buf) return pw_seterr(err, PW_ENOMEM, "out of memory");
  if (lseek(x->fd, 0, SEEK_SET) != 0) {
    free(buf);
    return pw_seterr(err, PW_EIO, "cannot read the partial file: %s", strerror(errno));
  }
  while (x->hashed < x->offset) {
    size_t want = x->offset - x->hashed < (1u << 20) ? (size_t)(x->offset - x->hashed) : (1u << 20);
    ssize_t r = read(x->fd, buf, want);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      free(buf);
      return pw_seterr(err, PW_EIO, "cannot read the partial file: %s", r < 0 ? strerror(errno) : "short");
    }
    if (x->hashed < 4) memcpy(x->head + x->hashed, buf, (size_t)r < 4 - x->hashed ? (size_t)r : 4 - x->hashed);
    pw_sha256_update(x->h, buf, (size_t)r);
    x->hashed += (uint64_t)r;
  }
  free(buf);
  return PW_OK;
}

/* Downloads t into partial (resuming), verifies, leaves it complete.
 * digest: 65 bytes out. The caller holds the file's download lock. */
static int fetch_file(store *s, const store_pull_opts *o, const target *t, const char *token, const char *partial,
                      int part, int n_parts, char *digest, uint64_t *size, char *err) {
  char dir[STORE_PATH_MAX];
  snprintf(dir, sizeof dir, "%s/blobs", store_home(s));
  xfer x = {0};
  x.o = o;
  x.dir = dir;
  x.file = t->file;
  x.expect = t->expect[0] ? t->expect : NULL;
  x.part = part;
  x.n_parts = n_parts;
  x.fd = open(partial, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (x.fd < 0) return pw_seterr(err, PW_EIO, "store %s is not writable: %s", store_home(s), strerror(errno));
  int rc = PW_OK, remove_partial = 0;
  char prev_etag[160] = "";
  struct stat st;
  if (fstat(x.fd, &st) != 0) {
    rc = pw_seterr(err, PW_EIO, "%s: %s", partial, strerror(errno));
    goto fail;
  }
  x.offset = (uint64_t)st.st_size;
  if (t->size && x.offset > t->size) x.offset = 0, (void)!ftruncate(x.fd, 0);
  if ((rc = rehash(&x, err))) goto fail;
  if (x.offset >= 4 && memcmp(x.head, "GGUF", 4)) { /* not ours: start over */
    if (truncate_partial(&x)) {
      rc = pw_seterr(err, PW_EIO, "cannot truncate %s", partial);
      goto fail;
    }
  }
  if (x.offset) pw_log(PW_LOG_INFO, "pull: resuming %s at byte %llu", t->file, (unsigned long long)x.offset);
  for (int attempt = 0;; attempt++) {
    if (lseek(x.fd, (off_t)x.offset, SEEK_SET) < 0) {
      rc = pw_seterr(err, PW_EIO, "%s: %s", partial, strerror(errno));
      goto fail;
    }
    x.began = x.discard = 0;
    x.status = 0;
    x.content_length = -1;
    x.content_range[0] = x.etag[0] = x.linked_etag[0] = 0;
    x.t_rate = x.t_start = now_s();
    x.rate_bytes = x.start_bytes = x.offset;
    x.curl = make_curl(&x, t->url, token);
    if (!x.curl) {
      rc = pw_seterr(err, PW_ENOMEM, "out of memory");
      goto fail;
    }
    char range[48];
    if (x.offset) {
      snprintf(range, sizeof range, "%llu-", (unsigned long long)x.offset);
      curl_easy_setopt(x.curl, CURLOPT_RANGE, range);
    }
    report(&x, 0, 1);
    CURLcode cc = curl_easy_perform(x.curl);
    if (!x.began) begin_body(&x); /* no body at all: still look at the status */
    curl_easy_cleanup(x.curl);
    x.curl = NULL;
    if (x.hard) {
      rc = pw_seterr(err, x.hard, "%s", x.herr);
      remove_partial = x.hard == PW_EFORMAT;
      goto fail;
    }
    if (cc == CURLE_ABORTED_BY_CALLBACK || cancelled(o)) {
      rc = pw_seterr(err, PW_ECANCELED, "cancelled; %llu bytes of %s kept, the next pull resumes",
                     (unsigned long long)x.offset, t->file);
      goto fail;
    }
    const char *tag = x.linked_etag[0] ? x.linked_etag : x.etag;
    if (prev_etag[0] && tag[0] && strcmp(prev_etag, tag)) {
      /* The file changed on the server between attempts: the bytes we
       * kept belong to the old one. */
      pw_log(PW_LOG_WARN, "pull: %s changed on the server; restarting", t->file);
      truncate_partial(&x);
      cc = CURLE_PARTIAL_FILE;
    }
    if (tag[0]) snprintf(prev_etag, sizeof prev_etag, "%s", tag);
    int retry = 0;
    if (cc == CURLE_OK && x.status == 416 && x.offset > 0) {
      unsigned long long whole;
      if (sscanf(x.content_range, "bytes */%llu", &whole) == 1 && whole == x.offset) {
        x.total = whole; /* the partial already holds the whole file */
      } else {
        truncate_partial(&x);
        pw_seterr(err, PW_EIO, "%s: range not satisfiable; restarting", t->file);
        retry = 1;
      }
    } else if (cc == CURLE_OK && (x.status < 200 || x.status >= 300)) {
      status_error(x.status, t->url, err);
      if (!transient_status(x.status)) {
        rc = x.status == 404 || x.status == 410 ? PW_ENOTFOUND : PW_EIO;
        goto fail;
      }
      retry = 1;
    } else if (cc != CURLE_OK) {
      pw_seterr(err, PW_EIO, "%s: %s", t->url, curl_easy_strerror(cc));
      if (cc == CURLE_UNSUPPORTED_PROTOCOL || cc == CURLE_URL_MALFORMAT || cc == CURLE_TOO_MANY_REDIRECTS ||
          cc == CURLE_COULDNT_RESOLVE_HOST) {
        rc = PW_EIO;
        goto fail;
      }
      retry = 1;
    } else if (x.total && x.offset != x.total) {
      pw_seterr(err, PW_EIO, "%s: connection closed at byte %llu of %llu", t->file, (unsigned long long)x.offset,
                (unsigned long long)x.total);
      retry = 1;
    }
    if (!retry) break;
    if (attempt >= retries_of(o)) {
      rc = PW_EIO;
      goto fail;
    }
    pw_log(PW_LOG_WARN, "pull: %s; retrying (%d of %d)", err, attempt + 1, retries_of(o));
    if (sleep_ms(o, backoff_ms(attempt))) {
      rc = pw_seterr(err, PW_ECANCELED, "cancelled; the next pull resumes");
      goto fail;
    }
  }
  if (x.offset < 4 || memcmp(x.head, "GGUF", 4)) {
    rc = pw_seterr(err, PW_EFORMAT, "%s is not a GGUF file", t->file);
    remove_partial = 1;
    goto fail;
  }
  uint8_t d[32];
  pw_sha256_end(x.h, d);
  x.h = NULL;
  pw_hex(d, 32, digest);
  *size = x.offset;
  char advertised[65] = "";
  const char *tag = x.linked_etag[0] ? x.linked_etag : x.etag;
  if (!etag_digest(tag, advertised)) advertised[0] = 0;
  const char *expect = t->expect[0] ? t->expect : advertised[0] ? advertised : NULL;
  if (expect && strcmp(expect, digest)) {
    rc = pw_seterr(err, PW_EIO, "digest mismatch for %s: expected sha256:%s, got sha256:%s (download removed)", t->file,
                   expect, digest);
    remove_partial = 1;
    goto fail;
  }
  if (t->expect[0] && advertised[0] && strcmp(advertised, digest)) {
    rc = pw_seterr(err, PW_EIO, "digest mismatch for %s: the server's ETag says sha256:%s, got sha256:%s (download removed)",
                   t->file, advertised, digest);
    remove_partial = 1;
    goto fail;
  }
  if (fsync(x.fd) != 0) {
    rc = pw_seterr(err, PW_EIO, "cannot write %s: %s", partial, strerror(errno));
    goto fail;
  }
  report(&x, 1, 1);
fail:
  pw_sha256_free(x.h);
  /* An empty partial is nothing to resume: leave no trace of it. */
  if (rc && fstat(x.fd, &st) == 0 && st.st_size == 0) remove_partial = 1;
  close(x.fd);
  if (remove_partial) unlink(partial);
  return rc;
}

/* Takes the download lock of key, waiting (and reporting the partial's
 * growth) while another process holds it. Returns the lock fd or -1. */
static int take_lock(store *s, const store_pull_opts *o, const target *t, const char *key, int part, int n_parts,
                     char *err) {
  char lock[STORE_PATH_MAX], partial[STORE_PATH_MAX];
  snprintf(lock, sizeof lock, "%s/blobs/partial-%s.lock", store_home(s), key);
  snprintf(partial, sizeof partial, "%s/blobs/partial-%s", store_home(s), key);
  int fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) {
    pw_seterr(err, PW_EIO, "store %s is not writable: %s", store_home(s), strerror(errno));
    return -1;
  }
  int said = 0;
  uint64_t last = 0;
  double t_last = now_s();
  double rate = 0;
  while (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    if (errno != EWOULDBLOCK && errno != EINTR) {
      pw_seterr(err, PW_EIO, "cannot lock %s: %s", lock, strerror(errno));
      close(fd);
      return -1;
    }
    if (!said) pw_log(PW_LOG_INFO, "pull: %s is being downloaded by another process; waiting", t->file);
    said = 1;
    struct stat st;
    uint64_t done = stat(partial, &st) == 0 ? (uint64_t)st.st_size : 0;
    double now = now_s();
    if (now - t_last >= 1.0) {
      rate = done > last ? (double)(done - last) / (now - t_last) : rate;
      last = done;
      t_last = now;
    }
    if (o->progress) {
      store_progress p = {t->file, part, n_parts, done, t->size, rate, 1, 0, t->expect[0] ? t->expect : NULL};
      o->progress(o->progress_ud, &p);
    }
    if (sleep_ms(o, 200)) {
      pw_seterr(err, PW_ECANCELED, "cancelled while waiting for another download of %s", t->file);
      close(fd);
      return -1;
    }
  }
  return fd;
}

int store_pull(store *s, const store_pull_opts *o, store_manifest *out, char *err) {
  static int curl_ready = 0;
  if (!curl_ready) { /* not thread-safe before 7.84; pull runs on one thread */
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != 0) return pw_seterr(err, PW_EINTERNAL, "libcurl failed to start");
    curl_ready = 1;
  }
  store_source src;
  int rc = store_parse_source(o->source, &src, err);
  if (rc) return rc;
  target *t = calloc(STORE_MAX_PARTS, sizeof *t);
  char **paths = calloc(STORE_MAX_PARTS, sizeof *paths);
  const char **urls = calloc(STORE_MAX_PARTS, sizeof *urls);
  int locks[STORE_MAX_PARTS];
  char keys[STORE_MAX_PARTS][65];
  for (int i = 0; i < STORE_MAX_PARTS; i++) locks[i] = -1;
  store_manifest *m = calloc(1, sizeof *m);
  int n = 0;
  if (!t || !paths || !urls || !m) {
    rc = pw_seterr(err, PW_ENOMEM, "out of memory");
    goto fail;
  }
  char ep[1024];
  hf_endpoint(ep, sizeof ep);
  const char *hf_token = getenv("HF_TOKEN");
  const char *token = o->token;
  if (!token && hf_token && *hf_token &&
      (src.kind == 1 || (!strncmp(src.url, ep, strlen(ep)) && strchr("/?", src.url[strlen(ep)]))))
    token = hf_token; /* HF_TOKEN only for the Hugging Face host */
  char name[STORE_NAME_MAX + 1] = "", quant[32] = "";
  rc = src.kind == 1 ? hf_targets(o, &src, token, t, &n, name, quant, err)
                     : url_targets(&src, t, &n, name, quant, err);
  if (rc) goto fail;
  if (o->name && *o->name) snprintf(name, sizeof name, "%s", o->name);
  if ((rc = store_name_check(name, m->name, err))) goto fail;
  snprintf(m->source, sizeof m->source, "%s", o->source);
  m->n_blobs = n;
  for (int i = 0; i < n; i++) {
    char *key = keys[i];
    if (t[i].expect[0]) memcpy(key, t[i].expect, 65);
    else {
      uint8_t h[32];
      pw_sha256(t[i].url, strlen(t[i].url), h);
      pw_hex(h, 32, key);
    }
    urls[i] = t[i].url;
    if ((locks[i] = take_lock(s, o, &t[i], key, i + 1, n, err)) < 0) {
      rc = cancelled(o) ? PW_ECANCELED : PW_EIO;
      goto fail;
    }
    /* Already here: by digest, or downloaded from this URL before (also
     * what a pull that waited for another one finds). */
    store_blob *b = &m->blobs[i];
    int have = 0;
    if (t[i].expect[0] && store_blob_exists(s, t[i].expect)) {
      char p[STORE_PATH_MAX];
      store_blob_path(s, t[i].expect, p);
      struct stat st;
      have = stat(p, &st) == 0;
      memcpy(b->digest, t[i].expect, 65);
      b->size = have ? (uint64_t)st.st_size : 0;
    } else if (!t[i].expect[0]) {
      have = store_find_url(s, t[i].url, b->digest, &b->size);
    }
    if (have) {
      if (o->progress) {
        store_progress p = {t[i].file, i + 1, n, b->size, b->size, 0, 0, 1, b->digest};
        o->progress(o->progress_ud, &p);
      }
      continue;
    }
    if (!(paths[i] = malloc(STORE_PATH_MAX))) {
      rc = pw_seterr(err, PW_ENOMEM, "out of memory");
      goto fail;
    }
    snprintf(paths[i], STORE_PATH_MAX, "%s/blobs/partial-%s", store_home(s), key);
    if ((rc = fetch_file(s, o, &t[i], token, paths[i], i + 1, n, b->digest, &b->size, err))) goto fail;
  }
  /* Architecture and quantization from the first part's header; a file
   * that is not a valid GGUF is refused before it enters the store. */
  char first[STORE_PATH_MAX];
  if (paths[0]) snprintf(first, sizeof first, "%s", paths[0]);
  else store_blob_path(s, m->blobs[0].digest, first);
  if ((rc = store_describe_gguf(first, m, err))) {
    for (int i = 0; i < n; i++)
      if (paths[i]) unlink(paths[i]);
    goto fail;
  }
  if (!m->quantization[0]) snprintf(m->quantization, sizeof m->quantization, "%s", quant);
  if ((rc = store_commit(s, m, paths, urls, err))) goto fail;
  *out = *m;
fail:
  for (int i = 0; i < STORE_MAX_PARTS; i++) {
    if (locks[i] >= 0) {
      /* Done with this file (committed, or its partial removed): drop the
       * lock file too. A process already waiting on it re-checks the store
       * once it gets the lock. A kept partial keeps its lock file. */
      struct stat st;
      if (!paths || !paths[i] || stat(paths[i], &st) != 0) {
        char lock[STORE_PATH_MAX + 128];
        snprintf(lock, sizeof lock, "%s/blobs/partial-%s.lock", store_home(s), keys[i]);
        unlink(lock);
      }
      close(locks[i]);
    }
    if (paths) free(paths[i]);
  }
  free(t);
  free(paths);
  free(urls);
  free(m);
  return rc;
}
