/* http_client.h - a raw HTTP/1.1 client for the server tests: sockets from
 * a chosen loopback address, bytes sent as given (pipelining, trickles,
 * malformed requests), answers read with a time bound. Loopback only;
 * every wait is bounded. Header-only (static functions). */
#ifndef PW_TESTS_HTTP_CLIENT_H
#define PW_TESTS_HTTP_CLIENT_H

#include "base/clock.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

/* A socket connected to 127.0.0.1:port from src ("127.0.0.2" makes the
 * server see another client address; NULL = any), or -1. */
static inline int hc_connect_from(const char *src, int port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  if (src) {
    struct sockaddr_in b = {.sin_family = AF_INET};
    inet_pton(AF_INET, src, &b.sin_addr);
    if (bind(fd, (struct sockaddr *)&b, sizeof b)) {
      close(fd);
      return -1;
    }
  }
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, (struct sockaddr *)&a, sizeof a)) {
    close(fd);
    return -1;
  }
  return fd;
}

static inline int hc_connect(int port) { return hc_connect_from(NULL, port); }

static inline bool hc_send(int fd, const void *p, size_t n) {
  const char *c = p;
  while (n) {
    ssize_t w = send(fd, c, n, MSG_NOSIGNAL);
    if (w <= 0) return false;
    c += w;
    n -= (size_t)w;
  }
  return true;
}

static inline bool hc_send_str(int fd, const char *s) { return hc_send(fd, s, strlen(s)); }

/* Reads into a growing NUL-terminated buffer until the peer closes, until
 * `until` (a substring, counted `count` times) has arrived, or timeout_ms.
 * *eof tells whether the peer closed. Returns the malloc'ed text. */
static inline char *hc_read(int fd, int timeout_ms, const char *until, int count, size_t *len, bool *eof) {
  size_t cap = 1 << 14, n = 0;
  char *buf = malloc(cap + 1);
  if (eof) *eof = false;
  uint64_t end = pw_now_ns() + (uint64_t)timeout_ms * 1000000u;
  while (buf && pw_now_ns() < end) {
    if (until) {
      int seen = 0;
      buf[n] = 0;
      for (const char *p = buf; (p = strstr(p, until)); p += strlen(until)) seen++;
      if (seen >= count) break;
    }
    struct pollfd p = {.fd = fd, .events = POLLIN};
    if (poll(&p, 1, 50) <= 0) continue;
    if (n == cap) {
      char *nb = realloc(buf, (cap *= 2) + 1);
      if (!nb) break;
      buf = nb;
    }
    ssize_t k = recv(fd, buf + n, cap - n, 0);
    if (k == 0 || (k < 0 && errno != EINTR && errno != EAGAIN)) {
      if (eof) *eof = true;
      break;
    }
    if (k > 0) n += (size_t)k;
  }
  if (buf) buf[n] = 0;
  if (len) *len = n;
  return buf;
}

/* Status of the first answer in text, or -1. */
static inline int hc_status(const char *text) {
  int st = -1;
  if (!text || sscanf(text, "HTTP/1.%*d %d", &st) != 1) return -1;
  return st;
}

/* How many answers (status lines) text holds. */
static inline int hc_count(const char *text, const char *what) {
  int n = 0;
  for (const char *p = text; p && (p = strstr(p, what)); p += strlen(what)) n++;
  return n;
}

/* One request on a fresh connection (Connection: close), the whole answer
 * as text (malloc'ed), bounded by timeout_ms. */
static inline char *hc_request(int port, const char *method, const char *path, const char *hdrs, const char *body,
                               int timeout_ms) {
  int fd = hc_connect(port);
  if (fd < 0) return NULL;
  char head[1024];
  size_t blen = body ? strlen(body) : 0;
  snprintf(head, sizeof head, "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n%sContent-Length: %zu\r\n\r\n",
           method, path, hdrs ? hdrs : "", blen);
  char *out = NULL;
  if (hc_send_str(fd, head) && (!blen || hc_send(fd, body, blen))) out = hc_read(fd, timeout_ms, NULL, 0, NULL, NULL);
  close(fd);
  return out;
}

/* The value of header name in an answer's head (static buffer), or NULL. */
static inline const char *hc_header(const char *text, const char *name) {
  static __thread char v[256];
  char key[80];
  snprintf(key, sizeof key, "\r\n%s:", name);
  const char *end = text ? strstr(text, "\r\n\r\n") : NULL;
  const char *h = text ? strcasestr(text, key) : NULL;
  if (!h || (end && h > end)) return NULL;
  h += strlen(key);
  while (*h == ' ') h++;
  size_t n = strcspn(h, "\r\n");
  snprintf(v, sizeof v, "%.*s", (int)n, h);
  return v;
}

/* The body of the first answer (after the blank line), or "". */
static inline const char *hc_body(const char *text) {
  const char *b = text ? strstr(text, "\r\n\r\n") : NULL;
  return b ? b + 4 : "";
}

#endif
