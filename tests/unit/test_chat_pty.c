/* test_chat_pty.c - `power chat` on a pseudo-terminal, typed at as a person
 * would: line editing (arrows, Ctrl-A/E, Delete on a multi-byte
 * character), history (Up), reverse search (Ctrl-R), Ctrl-C at the prompt,
 * then /save; the saved conversation must hold exactly the edited lines.
 * Each key sequence is sent only once the chat shows its prompt, so no
 * keystroke reaches the terminal while it is still in cooked mode. Every
 * wait is bounded. */
#include "test.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef POWER_BIN
#define POWER_BIN "power"
#endif

#define WAIT_S 120 /* a generous bound per step: the machine may be shared */

static char g_out[1 << 18];
static size_t g_n;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Reads the terminal's output until `want` appears after offset `from`;
 * returns the offset just past it, or -1 on timeout or end of output. */
static long wait_for(int fd, size_t from, const char *want) {
  double end = now_s() + WAIT_S;
  for (;;) {
    g_out[g_n] = 0;
    const char *hit = from <= g_n ? strstr(g_out + from, want) : NULL;
    if (hit) return (long)(hit - g_out) + (long)strlen(want);
    double left = end - now_s();
    if (left <= 0 || g_n + 1 >= sizeof g_out) return -1;
    struct pollfd p = {.fd = fd, .events = POLLIN};
    int r = poll(&p, 1, (int)(left * 1000) + 1);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return -1;
    ssize_t k = read(fd, g_out + g_n, sizeof g_out - 1 - g_n);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return -1;
    g_n += (size_t)k;
  }
}

static void send_keys(int fd, const char *keys) {
  size_t n = strlen(keys);
  while (n) {
    ssize_t w = write(fd, keys, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return;
    keys += w;
    n -= (size_t)w;
  }
}

int main(void) {
  const char *model = POWER_SHARED_DIR "/models/syn-llama-Q4_0.gguf";
  CHECK_MSG(access(model, R_OK) == 0, "missing test asset %s", model);
  char save[] = "/tmp/power-chat-pty-XXXXXX";
  int sfd = mkstemp(save);
  CHECK(sfd >= 0);
  if (sfd >= 0) close(sfd);
  int fd = -1;
  pid_t pid = forkpty(&fd, NULL, NULL, NULL);
  if (pid == 0) {
    execl(POWER_BIN, "power", "chat", "--model", model, "-n", "4", "--temp", "0", "--seed", "1", "--threads", "1",
          (char *)NULL);
    _exit(127);
  }
  CHECK(pid > 0);
  if (pid < 0) TEST_DONE();

  /* the prompt is redrawn as "\r> " on every key: a step is done when the
   * reply's end note is printed and a fresh prompt follows it */
  long at = wait_for(fd, 0, "(/help for commands)");
  CHECK_MSG(at >= 0, "no banner: %s", g_out);
  static const struct {
    const char *keys, *after; /* keys to type, then what ends the step */
  } steps[] = {
      {"abc\x1b[D\x1b[DX\x05Y\x01Z\r", "(reply cut"},  /* ZaXbcY */
      {"\x1b[A\r", "(reply cut"},                     /* the same line from history */
      {"second line\r", "(reply cut"},
      {"partial\x03", "(type /exit to quit)"},        /* abandoned */
      {"\x12" "sec\r", "(reply cut"},                 /* found by Ctrl-R */
      {"h\xc3\xa9llo\x1b[D\x7f\x1b[D\x1b[D\x1b[3~\r", "(reply cut"}, /* hlo */
  };
  for (size_t i = 0; i < sizeof steps / sizeof steps[0] && at >= 0; i++) {
    at = wait_for(fd, (size_t)at, "> ");
    CHECK_MSG(at >= 0, "step %zu: no prompt", i);
    if (at < 0) break;
    send_keys(fd, steps[i].keys);
    at = wait_for(fd, (size_t)at, steps[i].after);
    CHECK_MSG(at >= 0, "step %zu: '%s' never came; output:\n%s", i, steps[i].after, g_out);
  }
  char cmd[128];
  snprintf(cmd, sizeof cmd, "/save %s\r", save);
  if (at >= 0) at = wait_for(fd, (size_t)at, "> ");
  if (at >= 0) {
    send_keys(fd, cmd);
    at = wait_for(fd, (size_t)at, "(saved ");
    CHECK_MSG(at >= 0, "no save note: %s", g_out);
  }
  if (at >= 0) at = wait_for(fd, (size_t)at, "> ");
  send_keys(fd, "/exit\r");
  /* the child leaves; bounded wait, then it is killed */
  int status = -1;
  double end = now_s() + WAIT_S;
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (now_s() > end) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      CHECK_MSG(0, "power chat did not exit after /exit");
      break;
    }
    char sink[4096];
    struct pollfd p = {.fd = fd, .events = POLLIN};
    if (poll(&p, 1, 100) > 0 && read(fd, sink, sizeof sink) <= 0) usleep(10000);
  }
  CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0, "exit status %d", status);
  close(fd);

  json_error_t je;
  json_t *doc = json_load_file(save, 0, &je);
  CHECK_MSG(doc != NULL, "saved file: %s", je.text);
  static const char *const want[] = {"ZaXbcY", "ZaXbcY", "second line", "second line", "hlo"};
  json_t *msgs = json_object_get(doc, "messages");
  size_t nu = 0, i;
  json_t *m;
  json_array_foreach(msgs, i, m) {
    if (strcmp(json_string_value(json_object_get(m, "role")), "user")) continue;
    const char *c = json_string_value(json_object_get(m, "content"));
    CHECK_MSG(nu < 5 && c && !strcmp(c, want[nu]), "user message %zu is '%s', want '%s'", nu, c ? c : "(null)",
              nu < 5 ? want[nu] : "(none)");
    nu++;
  }
  CHECK_EQ_INT(nu, 5);
  CHECK_EQ_INT(json_array_size(msgs), 10); /* each with its reply */
  json_decref(doc);
  unlink(save);
  TEST_DONE();
}
