#!/bin/sh
# Serves the default model (or $POWER_MODEL) on 127.0.0.1:11434.
set -eu
bin=${1:-build/power}
exec "$bin" serve --host 127.0.0.1 --port "${POWER_PORT:-11434}"
