/* clock.h - monotonic time. */
#ifndef PW_BASE_CLOCK_H
#define PW_BASE_CLOCK_H
#include <stdint.h>
/* Monotonic nanoseconds since an arbitrary origin. */
uint64_t pw_now_ns(void);
/* Monotonic seconds as a double, for measurements. */
double pw_now_s(void);
#endif
