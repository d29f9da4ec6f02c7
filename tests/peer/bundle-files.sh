#!/bin/sh
# bundle-files.sh - copies files out of llama.cpp's source, as the npm package
# node-llama-cpp ships it (a git bundle), into a directory: vocabularies and
# their tokenizer conformance vectors for tests that need llama.cpp's own
# data. Files already there are kept; nothing is downloaded.
#   usage: bundle-files.sh OUTDIR PATH-IN-LLAMA.CPP...
# Exits 1 with a message when node deps are not installed
# (scripts/install-node-deps.sh) or a path is not in the bundle.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
bundle=$here/node_modules/node-llama-cpp/llama/gitRelease.bundle
out=$1
shift
mkdir -p "$out"
need=0
for p in "$@"; do [ -s "$out/$(basename "$p")" ] || need=1; done
[ $need -eq 0 ] && exit 0
if [ ! -f "$bundle" ]; then
  echo "bundle-files: $bundle is missing (run scripts/install-node-deps.sh)" >&2
  exit 1
fi
git_dir=$out/.llama-src.git
if [ ! -d "$git_dir" ]; then
  git init -q --bare "$git_dir.tmp"
  git --git-dir="$git_dir.tmp" fetch -q "$bundle" "HEAD:refs/heads/src"
  mv "$git_dir.tmp" "$git_dir"
fi
for p in "$@"; do
  f=$out/$(basename "$p")
  [ -s "$f" ] && continue
  if ! git --git-dir="$git_dir" show "src:$p" >"$f.part" 2>/dev/null; then
    rm -f "$f.part"
    echo "bundle-files: $p is not in llama.cpp's source bundle" >&2
    exit 1
  fi
  mv "$f.part" "$f"
done
