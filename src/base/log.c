/* log.c - stderr logging with a process-wide level. */
#include "base/log.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int g_level = -1;
static pthread_mutex_t g_log_mu = PTHREAD_MUTEX_INITIALIZER;

int pw_log_level(void) {
  if (g_level < 0) {
    const char *e = getenv("POWER_LOG");
    int lv = PW_LOG_WARN;
    if (e) {
      if (!strcmp(e, "error")) lv = PW_LOG_ERROR;
      else if (!strcmp(e, "info")) lv = PW_LOG_INFO;
      else if (!strcmp(e, "debug")) lv = PW_LOG_DEBUG;
    }
    g_level = lv;
  }
  return g_level;
}

void pw_log_set_level(int level) { g_level = level; }

void pw_log(int level, const char *fmt, ...) {
  static const char *names[] = {"error", "warn", "info", "debug"};
  if (level > pw_log_level()) return;
  if (level < 0 || level > 3) level = 3;
  va_list ap;
  va_start(ap, fmt);
  pthread_mutex_lock(&g_log_mu);
  fprintf(stderr, "power: %s: ", names[level]);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  pthread_mutex_unlock(&g_log_mu);
  va_end(ap);
}
