/* error.c - the status table's messages and error helpers. */
#include "base/error.h"

#include <stdio.h>
#include <stdlib.h>

const char *pw_strerror(int status) {
  switch (status) {
#define PW_X_CASE(name, value, msg) \
  case value:                       \
    return msg;
    PW_STATUS_TABLE(PW_X_CASE)
#undef PW_X_CASE
  default:
    return "unknown status";
  }
}

const char *pw_version(void) { return "0.1.0"; }

int pw_seterr(char *err, int status, const char *fmt, ...) {
  if (err) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, PW_ERRMAX, fmt, ap);
    va_end(ap);
  }
  return status;
}

void pw_assert_fail(const char *expr, const char *file, int line) {
  fprintf(stderr, "power: internal assertion failed: %s (%s:%d)\n", expr, file, line);
  abort();
}
