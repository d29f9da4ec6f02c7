#!/bin/sh
# End-to-end tests of `power serve` with the official clients: openai, and
# ollama and @anthropic-ai/sdk for those APIs (tests/e2e/*.test.mjs, run by
# node's built-in test runner; the browser test is e2e_browser.sh).
# usage: e2e_openai.sh POWER_BIN SHARED_DIR
# Needs node (>= 20) and the pinned client: npm ci --prefix tests/e2e
set -u
bin=$1
shared=$2
root=$(cd "$(dirname "$0")/../.." && pwd)
e2e=$root/tests/e2e
case $bin in /*) ;; *) bin=$(pwd)/$bin ;; esac

if ! command -v node >/dev/null 2>&1; then
  echo "FAIL: node is not installed (Debian package nodejs); then run: npm ci --prefix tests/e2e"
  exit 1
fi
major=$(node -p 'process.versions.node.split(".")[0]')
if [ "$major" -lt 20 ]; then
  echo "FAIL: node $(node --version) is too old, the end-to-end tests need node >= 20"
  exit 1
fi
for pkg in openai ollama @anthropic-ai/sdk; do
  if [ ! -f "$e2e/node_modules/$pkg/package.json" ]; then
    echo "FAIL: the $pkg client is not installed in tests/e2e/node_modules; run: npm ci --prefix tests/e2e"
    exit 1
  fi
done
[ -x "$bin" ] || { echo "FAIL: $bin is not an executable"; exit 1; }
for m in syn-qwen2-Q4_K_M.gguf codelm-py-Q8_0.gguf; do
  [ -f "$shared/models/$m" ] || { echo "FAIL: missing test asset $shared/models/$m"; exit 1; }
done

cd "$e2e" || exit 1
# Files run one after another (each starts its own servers); every test has
# its own timeout, and the whole run is bounded too.
POWER_BIN=$bin POWER_SHARED_DIR=$shared timeout 540 node --test --test-concurrency=1 --test-timeout=180000 \
  --test-reporter=spec ./*.test.mjs
rc=$?
[ $rc -eq 124 ] && echo "FAIL: the end-to-end tests did not finish within 540 s"
[ $rc -eq 0 ] && echo "e2e openai: all tests passed"
exit $rc
