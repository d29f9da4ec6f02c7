/* peer_client.h - a test's one long-lived llama.cpp peer: node running
 * tests/peer/llamacpp-serve.mjs, asked one request at a time over pipes
 * (a line of JSON each way). llama.cpp's backend loads once per test
 * instead of once per model checked (about two seconds each).
 *
 * peer_call() starts the server on first use and again after it died; its
 * stderr goes to a file, and a failed request prints what the server
 * wrote there during that request. Header-only: each test that uses it
 * includes it once. */
#ifndef PW_TESTS_PEER_CLIENT_H
#define PW_TESTS_PEER_CLIENT_H

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

typedef struct peer_client {
  pid_t pid; /* 0: not running */
  FILE *to, *from;
  char script[1200], err_path[600];
} peer_client;

static peer_client g_peer_client;

/* The server script in the peer directory dir; its stderr to err_path. */
static void peer_client_init(const char *dir, const char *err_path) {
  snprintf(g_peer_client.script, sizeof g_peer_client.script, "%s/llamacpp-serve.mjs", dir);
  snprintf(g_peer_client.err_path, sizeof g_peer_client.err_path, "%s", err_path);
}

/* kill: a server that failed a request may be stuck; else the end of its
 * input ends it */
static void peer_client_stop_ex(int kill_it) {
  peer_client *pc = &g_peer_client;
  if (!pc->pid) return;
  if (kill_it) kill(pc->pid, SIGKILL);
  if (pc->to) fclose(pc->to);
  if (pc->from) fclose(pc->from);
  pc->to = pc->from = NULL;
  int st;
  while (waitpid(pc->pid, &st, 0) < 0 && errno == EINTR) {
  }
  pc->pid = 0;
}

static void peer_client_stop(void) { peer_client_stop_ex(0); }

static int peer_client_start(void) {
  peer_client *pc = &g_peer_client;
  int in[2], out[2];
  signal(SIGPIPE, SIG_IGN); /* a dead server is a failed write, not a dead test */
  if (pipe(in) || pipe(out)) return -1;
  pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    int e = open(pc->err_path, O_WRONLY | O_CREAT | O_APPEND, 0600);
    if (e >= 0) dup2(e, 2);
    dup2(in[0], 0);
    dup2(out[1], 1);
    close(in[0]);
    close(in[1]);
    close(out[0]);
    close(out[1]);
    execlp("node", "node", pc->script, (char *)NULL);
    _exit(127);
  }
  close(in[0]);
  close(out[1]);
  pc->pid = pid;
  pc->to = fdopen(in[1], "w");
  pc->from = fdopen(out[0], "r");
  if (!pc->to || !pc->from) {
    peer_client_stop();
    return -1;
  }
  return 0;
}

static long peer_client_err_size(void) {
  struct stat st;
  return stat(g_peer_client.err_path, &st) == 0 ? (long)st.st_size : 0;
}

/* prints what the server wrote to its stderr from offset at on */
static void peer_client_print_err(long at, const char *what) {
  FILE *e = fopen(g_peer_client.err_path, "r");
  char line[512];
  fprintf(stderr, "peer %s failed:\n", what);
  if (e && fseek(e, at, SEEK_SET) == 0)
    while (fgets(line, sizeof line, e)) fputs(line, stderr);
  if (e) fclose(e);
}

/* Runs op ("logits", "embed") with the script's arguments argv (a JSON
 * array of strings, consumed); returns the result object, or NULL (with
 * the server's messages printed) on an error or a dead server. */
static json_t *peer_call(const char *op, json_t *argv) {
  peer_client *pc = &g_peer_client;
  const long at = peer_client_err_size();
  json_t *req = json_pack("{s:s, s:o}", "op", op, "argv", argv);
  if (!req) return NULL;
  char *line = json_dumps(req, JSON_COMPACT);
  json_decref(req);
  if (!line) return NULL;
  json_t *res = NULL;
  if (pc->pid || peer_client_start() == 0) {
    if (fputs(line, pc->to) >= 0 && fputc('\n', pc->to) != EOF && fflush(pc->to) == 0) {
      char *buf = NULL;
      size_t cap = 0;
      if (getline(&buf, &cap, pc->from) > 0) {
        json_error_t je;
        res = json_loads(buf, 0, &je);
      }
      free(buf);
    }
    if (!res) peer_client_stop_ex(1); /* died or spoke nonsense: a new one next time */
  }
  free(line);
  if (res && json_object_get(res, "error")) {
    json_decref(res);
    res = NULL;
  }
  if (!res) peer_client_print_err(at, op);
  return res;
}

#endif
