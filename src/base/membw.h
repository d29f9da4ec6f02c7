/* membw.h - a STREAM-like memory read-bandwidth probe: every pool thread
 * sums its slice of a buffer (in 2 MiB pages where the kernel gives them,
 * as the weights are mapped) with wide loads, several passes after a
 * warm-up. Decode reads every weight once per token, so bandwidth divided
 * by a model's weight bytes per token bounds single-sequence decode; the
 * benchmarks report that bound beside their figures.
 *
 * Not here: what the figures are compared with (cli/cmd_bench.c). */
#ifndef PW_BASE_MEMBW_H
#define PW_BASE_MEMBW_H

#include <stddef.h>
#include <stdint.h>

#define PW_MEMBW_MAX_PASSES 64

typedef struct pw_membw_result {
  double gbs[PW_MEMBW_MAX_PASSES]; /* GB/s (1e9 bytes) of each timed pass */
  int n;                            /* passes */
  const char *kernel;               /* "avx2" or "scalar" (static) */
  uint64_t checksum;                /* sum of what was read: the reads cannot be optimised away */
} pw_membw_result;

/* Runs the probe over mib MiB with threads threads (1..256) for passes
 * timed passes (1..PW_MEMBW_MAX_PASSES). 0, or PW_EINVAL / PW_ENOMEM with
 * err set. */
int pw_membw_probe(int threads, size_t mib, int passes, pw_membw_result *out, char *err);

#endif
