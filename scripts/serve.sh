#!/bin/sh
# Serves the default model (or $POWER_MODEL) with the built binary.
set -eu
bin=${1:-build/power}
if "$bin" --help 2>/dev/null | grep -q '^  serve'; then
  exec "$bin" serve "$@"
fi
echo "power: the HTTP server is not built yet; running a short generation on the default model instead" >&2
exec "$bin" run --prompt-ids "1" -n 16
