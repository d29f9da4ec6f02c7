/* log.c - stderr logging with a process-wide level and format. See log.h. */
#include "base/log.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int g_level = -1;
static int g_format = PW_LOG_TEXT;
static pthread_mutex_t g_log_mu = PTHREAD_MUTEX_INITIALIZER;
static const char *const k_names[] = {"error", "warn", "info", "debug"};

int pw_log_parse_level(const char *s) {
  for (int i = 0; s && i < 4; i++)
    if (!strcmp(s, k_names[i])) return i;
  return -1;
}

int pw_log_check_env(void) {
  const char *e = getenv("POWER_LOG");
  return !e || pw_log_parse_level(e) >= 0 ? 0 : -1;
}

int pw_log_level(void) {
  int lv = __atomic_load_n(&g_level, __ATOMIC_RELAXED);
  if (lv < 0) {
    lv = pw_log_parse_level(getenv("POWER_LOG"));
    if (lv < 0) lv = PW_LOG_WARN;
    __atomic_store_n(&g_level, lv, __ATOMIC_RELAXED);
  }
  return lv;
}

void pw_log_set_level(int level) { __atomic_store_n(&g_level, level, __ATOMIC_RELAXED); }
void pw_log_set_format(int format) { __atomic_store_n(&g_format, format, __ATOMIC_RELAXED); }
int pw_log_format(void) { return __atomic_load_n(&g_format, __ATOMIC_RELAXED); }

char *pw_log_time(char *buf, size_t cap) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  struct tm tm;
  gmtime_r(&ts.tv_sec, &tm);
  snprintf(buf, cap, "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
           tm.tm_hour, tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000000L);
  return buf;
}

void pw_log_write(const char *line, size_t len) {
  pthread_mutex_lock(&g_log_mu);
  fwrite(line, 1, len, stderr);
  if (!len || line[len - 1] != '\n') fputc('\n', stderr);
  fflush(stderr);
  pthread_mutex_unlock(&g_log_mu);
}

/* JSON string body of s (quotes not included), bounded by cap. */
static size_t json_escape(const char *s, char *out, size_t cap) {
  size_t o = 0;
  for (; *s && o + 7 < cap; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\') {
      out[o++] = '\\';
      out[o++] = (char)c;
    } else if (c < 0x20) {
      o += (size_t)snprintf(out + o, cap - o, "\\u%04x", c);
    } else {
      out[o++] = (char)c;
    }
  }
  out[o] = 0;
  return o;
}

static void emit(const char *level, const char *fmt, va_list ap) {
  char msg[2048], t[40], line[4608];
  vsnprintf(msg, sizeof msg, fmt, ap);
  pw_log_time(t, sizeof t);
  int n;
  if (pw_log_format() == PW_LOG_JSON) {
    char esc[4200];
    json_escape(msg, esc, sizeof esc);
    n = snprintf(line, sizeof line, "{\"time\":\"%s\",\"level\":\"%s\",\"msg\":\"%s\"}\n", t, level, esc);
  } else {
    n = snprintf(line, sizeof line, "%s power: %s: %s\n", t, level, msg);
  }
  if (n > (int)sizeof line - 1) n = (int)sizeof line - 1;
  pw_log_write(line, (size_t)n);
}

void pw_log(int level, const char *fmt, ...) {
  if (level > pw_log_level()) return;
  if (level < 0 || level > 3) level = 3;
  va_list ap;
  va_start(ap, fmt);
  emit(k_names[level], fmt, ap);
  va_end(ap);
}

void pw_log_notice(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  emit("info", fmt, ap);
  va_end(ap);
}
