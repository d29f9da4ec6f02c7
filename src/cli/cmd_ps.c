/* cmd_ps.c - `power ps`: what a running server has loaded, asked over HTTP
 * (GET /v1/ps) and shown as a table (or the JSON itself with -o json).
 * Wiring and display only: the answer is the server's (src/server). */
#include "cli/cmd_ps.h"

#include "cli/cli.h"

#include <curl/curl.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PS_MAX_BODY (4 << 20)

typedef struct body {
  char *data;
  size_t len;
  bool too_big;
} body;

static size_t on_data(char *p, size_t sz, size_t n, void *ud) {
  body *b = ud;
  size_t k = sz * n;
  if (b->len + k > PS_MAX_BODY) {
    b->too_big = true;
    return 0;
  }
  char *nd = realloc(b->data, b->len + k + 1);
  if (!nd) return 0;
  memcpy(nd + b->len, p, k);
  b->data = nd;
  b->len += k;
  b->data[b->len] = 0;
  return k;
}

static void ps_usage(FILE *out) {
  fprintf(out,
          "usage: power ps [--host ADDR] [--port N] [-o table|json]\n"
          "Shows the models a running `power serve` has loaded: memory (weights + KV),\n"
          "requests in flight, and when each is unloaded if it stays idle.\n"
          "  --host ADDR   the server's address (default 127.0.0.1)\n"
          "  --port N      its port (default 11434)\n"
          "  -o FORMAT     table (default) or json (the server's GET /v1/ps answer)\n"
          "  --timeout S   give up after S seconds (default 10)\n"
          "Environment: POWER_API_KEY, sent as a bearer token when the server has keys.\n");
}

static void human(double b, char *out, size_t cap) {
  const char *u[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int i = 0;
  while (b >= 1024 && i < 4) b /= 1024, i++;
  snprintf(out, cap, i ? "%.1f %s" : "%.0f %s", b, u[i]);
}

static void until(json_t *m, char *out, size_t cap) {
  json_t *x = json_object_get(m, "expires_in_s");
  if (!json_is_number(x)) {
    snprintf(out, cap, "forever");
    return;
  }
  double s = json_number_value(x);
  long in_flight = (long)json_integer_value(json_object_get(m, "in_flight"));
  if (in_flight > 0) snprintf(out, cap, "busy, then %.0fs", s);
  else if (s < 120) snprintf(out, cap, "in %.0f s", s);
  else if (s < 7200) snprintf(out, cap, "in %.0f min", s / 60);
  else snprintf(out, cap, "in %.1f h", s / 3600);
}

int cmd_ps(int argc, char **argv) {
  const char *host = "127.0.0.1", *format = "table";
  long port = 11434;
  double timeout = 10;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      ps_usage(stdout);
      return 0;
    }
    if (!v) {
      fprintf(stderr, "power ps: unknown option or missing value: %s (try --help)\n", a);
      return 2;
    }
    i++;
    if (!strcmp(a, "--host")) host = v;
    else if (!strcmp(a, "--port")) {
      if (cli_parse_long("ps", a, v, 1, 65535, &port)) return 2;
    } else if (!strcmp(a, "--timeout")) {
      if (cli_parse_double("ps", a, v, 0.1, 3600, &timeout)) return 2;
    } else if (!strcmp(a, "-o") || !strcmp(a, "--output")) {
      if (strcmp(v, "table") && strcmp(v, "json")) {
        fprintf(stderr, "power ps: invalid value for -o: '%s' (table or json)\n", v);
        return 2;
      }
      format = v;
    } else {
      fprintf(stderr, "power ps: unknown option %s (try --help)\n", a);
      return 2;
    }
  }
  char url[512];
  snprintf(url, sizeof url, strchr(host, ':') ? "http://[%s]:%ld/v1/ps" : "http://%s:%ld/v1/ps", host, port);
  CURL *c = curl_easy_init();
  if (!c) {
    fprintf(stderr, "power ps: cannot start the HTTP client\n");
    return 1;
  }
  body b = {0};
  struct curl_slist *hdr = NULL;
  const char *key = getenv("POWER_API_KEY");
  char auth[1024];
  if (key && *key) {
    snprintf(auth, sizeof auth, "Authorization: Bearer %s", key);
    hdr = curl_slist_append(hdr, auth);
  }
  curl_easy_setopt(c, CURLOPT_URL, url);
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_data);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &b);
  curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, (long)(timeout * 1000));
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http");
  if (hdr) curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdr);
  CURLcode cr = curl_easy_perform(c);
  long status = 0;
  curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
  curl_slist_free_all(hdr);
  curl_easy_cleanup(c);
  int rc = 0;
  json_t *root = NULL;
  if (cr != CURLE_OK) {
    fprintf(stderr, "power ps: %s: %s\n", url, b.too_big ? "answer too large" : curl_easy_strerror(cr));
    rc = 1;
    goto done;
  }
  json_error_t je;
  root = b.data ? json_loadb(b.data, b.len, 0, &je) : NULL;
  if (status != 200) {
    json_t *msg = json_object_get(json_object_get(root, "error"), "message");
    fprintf(stderr, "power ps: %s answered %ld%s%s\n", url, status, msg ? ": " : "",
            msg ? json_string_value(msg) : "");
    rc = 1;
    goto done;
  }
  json_t *data = json_object_get(root, "data");
  if (!json_is_array(data)) {
    fprintf(stderr, "power ps: %s did not answer a model list (is it a power server?)\n", url);
    rc = 1;
    goto done;
  }
  if (!strcmp(format, "json")) {
    fwrite(b.data, 1, b.len, stdout);
    if (b.len && b.data[b.len - 1] != '\n') putchar('\n');
    goto done;
  }
  printf("%-40s %10s %10s %9s %8s  %s\n", "NAME", "SIZE", "KV", "IN-FLIGHT", "CONTEXT", "UNLOADED");
  size_t i;
  json_t *m;
  json_array_foreach(data, i, m) {
    char size[32], kv[32], u[48];
    human(json_number_value(json_object_get(m, "bytes")), size, sizeof size);
    human(json_number_value(json_object_get(m, "kv_bytes")), kv, sizeof kv);
    until(m, u, sizeof u);
    const char *id = json_string_value(json_object_get(m, "id"));
    printf("%-40s %10s %10s %9lld %8lld  %s\n", id ? id : "?", size, kv,
           (long long)json_integer_value(json_object_get(m, "in_flight")),
           (long long)json_integer_value(json_object_get(m, "context_length")), u);
  }
done:
  json_decref(root);
  free(b.data);
  return rc;
}
