/* fuzz_common.c - helpers shared by the fuzz harnesses (not a harness). */
#include "fuzz.h"

#include <stdlib.h>

#ifndef POWER_SHARED_DIR
#define POWER_SHARED_DIR "../shared"
#endif

const char *fuzz_shared_dir(void) {
  const char *d = getenv("POWER_SHARED_DIR");
  return d && *d ? d : POWER_SHARED_DIR;
}
