#!/bin/sh
# Installs the Debian packages Power needs to build and test, when missing.
# Safe to run repeatedly: it only calls apt-get when something is absent.
#   scripts/install-deps.sh [fuzz]
# fuzz: also clang and its runtime (libFuzzer, sanitizers), which only the
# fuzz harnesses (`make fuzz`) need.
set -eu
# python3-jsonschema: the independent validator of the grammar property test.
# chromium: the headless browser of the chat page's end-to-end test.
# haproxy: the scale-out recipe (deploy/) and its test.
PKGS="build-essential cmake pkg-config libjansson-dev libssl-dev libmicrohttpd-dev libcurl4-openssl-dev unicode-data curl python3-jsonschema chromium haproxy"
for extra in "$@"; do
  case $extra in
    fuzz) PKGS="$PKGS clang libclang-rt-dev" ;;
    *) echo "install-deps: unknown group '$extra' (known: fuzz)" >&2; exit 2 ;;
  esac
done
# Node.js runs the end-to-end client tests and the llama.cpp peer; a machine
# that already has node and npm keeps its own.
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  PKGS="$PKGS nodejs npm"
fi
missing=""
for p in $PKGS; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing="$missing $p"
  fi
done
if [ -n "$missing" ]; then
  echo "install-deps: installing:$missing" >&2
  SUDO=""
  if [ "$(id -u)" != "0" ]; then SUDO="sudo"; fi
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends $missing
fi
