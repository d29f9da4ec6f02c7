/* log.h - leveled diagnostics to stderr. Never used for program output. */
#ifndef PW_BASE_LOG_H
#define PW_BASE_LOG_H

enum { PW_LOG_ERROR = 0, PW_LOG_WARN = 1, PW_LOG_INFO = 2, PW_LOG_DEBUG = 3 };

/* Messages above this level are dropped. Default PW_LOG_WARN; the
 * POWER_LOG environment variable (error|warn|info|debug) overrides. */
void pw_log_set_level(int level);
int pw_log_level(void);
void pw_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
