#!/bin/sh
# The chat page in a real browser: headless Chromium (Debian package
# chromium) driven by puppeteer-core (tests/e2e/ui.browser.mjs). Prints the
# paths of the light and dark screenshots it saves.
# usage: e2e_browser.sh POWER_BIN SHARED_DIR
set -u
bin=$1
shared=$2
root=$(cd "$(dirname "$0")/../.." && pwd)
e2e=$root/tests/e2e
case $bin in /*) ;; *) bin=$(pwd)/$bin ;; esac
command -v node >/dev/null 2>&1 || { echo "FAIL: node is not installed (Debian package nodejs)"; exit 1; }
[ -x "${CHROMIUM_BIN:-/usr/bin/chromium}" ] || { echo "FAIL: Chromium is not installed (Debian package chromium; run scripts/install-deps.sh)"; exit 1; }
[ -f "$e2e/node_modules/puppeteer-core/package.json" ] || { echo "FAIL: puppeteer-core is not installed; run scripts/install-node-deps.sh"; exit 1; }
[ -f "$shared/models/syn-qwen2-Q4_K_M.gguf" ] || { echo "FAIL: missing test asset $shared/models/syn-qwen2-Q4_K_M.gguf"; exit 1; }
cd "$e2e" || exit 1
POWER_BIN=$bin POWER_SHARED_DIR=$shared timeout 400 node --test --test-concurrency=1 --test-timeout=180000 \
  --test-reporter=spec ./ui.browser.mjs
rc=$?
[ $rc -eq 124 ] && echo "FAIL: the browser tests did not finish within 400 s"
[ $rc -eq 0 ] && echo "e2e browser: all tests passed"
exit $rc
