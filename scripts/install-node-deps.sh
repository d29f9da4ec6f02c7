#!/bin/sh
# Installs the pinned npm packages used by tests and benchmarks (the openai
# client for end-to-end tests, node-llama-cpp as the llama.cpp peer), from
# each folder's package-lock.json. Skips folders already installed.
set -eu
cd "$(dirname "$0")/.."
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  echo "install-node-deps: node and npm are required (Debian packages nodejs and npm)" >&2
  exit 1
fi
for dir in tests/e2e tests/peer bench; do
  [ -f "$dir/package-lock.json" ] || continue
  if [ -d "$dir/node_modules" ] && [ "$dir/node_modules/.package-lock.json" -nt "$dir/package-lock.json" ]; then
    continue
  fi
  echo "install-node-deps: npm ci in $dir" >&2
  # node-llama-cpp ships prebuilt llama.cpp binaries as optional npm
  # packages; never build or download anything else.
  NODE_LLAMA_CPP_SKIP_DOWNLOAD=true NODE_LLAMA_CPP_POSTINSTALL=skip \
    npm ci --prefix "$dir" --no-audit --no-fund --loglevel=error
done
