#!/bin/sh
# Installs the Debian packages Power needs to build and test, when missing.
# Safe to run repeatedly: it only calls apt-get when something is absent.
set -eu
PKGS="build-essential cmake pkg-config libjansson-dev libssl-dev libmicrohttpd-dev libcurl4-openssl-dev unicode-data"
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
