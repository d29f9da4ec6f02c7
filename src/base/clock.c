/* clock.c - CLOCK_MONOTONIC wrappers. */
#include "base/clock.h"
#include <time.h>
uint64_t pw_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}
double pw_now_s(void) { return (double)pw_now_ns() * 1e-9; }
