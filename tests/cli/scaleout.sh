#!/bin/sh
# The scale-out recipe end to end: deploy/run-local starts 3 replicas and
# HAProxy (deploy/haproxy/power.cfg) on loopback; tests/e2e/scaleout.mjs
# measures prefix reuse with and without affinity and checks a replica
# crash, a rolling restart and a full replica's 503 being retried.
# usage: scaleout.sh POWER_BIN SHARED_DIR
# Needs haproxy and curl (scripts/install-deps.sh), node >= 20 and the e2e
# packages (scripts/install-node-deps.sh).
set -u
bin=$1
shared=$2
root=$(cd "$(dirname "$0")/../.." && pwd)
case $bin in /*) ;; *) bin=$(pwd)/$bin ;; esac
for tool in haproxy curl node; do
  command -v $tool >/dev/null 2>&1 || { echo "FAIL: $tool is not installed (run scripts/install-deps.sh)"; exit 1; }
done
[ -f "$root/tests/e2e/node_modules/openai/package.json" ] ||
  { echo "FAIL: tests/e2e/node_modules is missing; run scripts/install-node-deps.sh"; exit 1; }
[ -x "$bin" ] || { echo "FAIL: $bin is not an executable"; exit 1; }
[ -f "$shared/models/syn-qwen2-Q4_K_M.gguf" ] || { echo "FAIL: missing test asset $shared/models/syn-qwen2-Q4_K_M.gguf"; exit 1; }
cd "$root/tests/e2e" || exit 1
POWER_BIN=$bin POWER_SHARED_DIR=$shared timeout 570 node scaleout.mjs
rc=$?
[ $rc -eq 124 ] && echo "FAIL: the scale-out test did not finish within 570 s"
exit $rc
