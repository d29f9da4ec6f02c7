/* log.h - leveled diagnostics to stderr. Never used for program output.
 *
 * Every line starts with an RFC 3339 UTC timestamp (millisecond
 * precision). Two formats: text ("<time> power: <level>: <message>") and
 * JSON, one object per line ({"time":...,"level":...,"msg":...}), for log
 * collectors. */
#ifndef PW_BASE_LOG_H
#define PW_BASE_LOG_H

#include <stddef.h>

enum { PW_LOG_ERROR = 0, PW_LOG_WARN = 1, PW_LOG_INFO = 2, PW_LOG_DEBUG = 3 };
enum { PW_LOG_TEXT = 0, PW_LOG_JSON = 1 };

/* Messages above this level are dropped. Default PW_LOG_WARN; the
 * POWER_LOG environment variable (error|warn|info|debug) overrides. */
void pw_log_set_level(int level);
int pw_log_level(void);
/* The level named by s ("error", "warn", "info", "debug"), or -1. */
int pw_log_parse_level(const char *s);
/* 0 when $POWER_LOG is unset or names a level, else -1 (a misconfiguration
 * callers report instead of ignoring). */
int pw_log_check_env(void);
/* PW_LOG_TEXT (default) or PW_LOG_JSON, process-wide. */
void pw_log_set_format(int format);
int pw_log_format(void);
/* "2026-01-02T03:04:05.678Z" (now, UTC) into buf; returns buf. cap >= 32. */
char *pw_log_time(char *buf, size_t cap);
void pw_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A line shown whatever the level (startup banners: address, port). */
void pw_log_notice(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Writes one pre-formatted line (no trailing newline needed) under the
 * logging lock, so lines of different threads never interleave. */
void pw_log_write(const char *line, size_t len);

#endif
