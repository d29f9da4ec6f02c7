#!/bin/sh
# simd-level.sh - runs a test with its kernels capped at one SIMD level
# (POWER_SIMD), or skips it (exit 77) where that would repeat another run
# or cannot be done: the CPU lacks the level (the cap would fall back to a
# lower one), or the level is the CPU's own (the test's plain run covers
# it). `power --version` says which kernels a cap selects.
#   usage: simd-level.sh LEVEL POWER TEST [ARGS...]
set -eu
level=$1
power=$2
shift 2
want=$level
[ "$level" = avx512novbmi ] && want=avx512
got=$(POWER_SIMD=$level "$power" --version | sed -n 's/^kernels: //p')
own=$(env -u POWER_SIMD "$power" --version | sed -n 's/^kernels: //p')
if [ -z "$got" ] || [ -z "$own" ]; then
  echo "simd-level: '$power --version' names no kernels" >&2
  exit 1
fi
if [ "$got" != "$want" ]; then
  echo "skipped: this CPU has no $level level (its kernels: $own)"
  exit 77
fi
if [ "$got" = "$own" ]; then
  echo "skipped: $level is this CPU's own level, which the plain run of the test covers"
  exit 77
fi
POWER_SIMD=$level exec "$@"
