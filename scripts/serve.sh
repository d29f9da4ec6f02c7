#!/bin/sh
# Serves on 127.0.0.1:11434: $POWER_MODEL when set; else every model of the
# store ($POWER_HOME, default ~/.power) when it holds any; else the default
# model of ../shared/models (the development models beside the checkout).
set -eu
bin=${1:-build/power}
port=${POWER_PORT:-11434}
if [ -z "${POWER_MODEL:-}" ] && [ -z "$("$bin" list 2>/dev/null | tail -n +2)" ]; then
  for m in codelm-py-Q8_0.gguf syn-qwen2-Q4_K_M.gguf syn-llama3-Q8_0.gguf; do
    if [ -r "../shared/models/$m" ]; then
      echo "serve: the store is empty; serving ../shared/models/$m (power pull adds models to the store)" >&2
      exec "$bin" serve --model "../shared/models/$m" --host 127.0.0.1 --port "$port"
    fi
  done
  echo "serve: no model: the store is empty and ../shared/models has none; try: $bin pull URL" >&2
fi
exec "$bin" serve --host 127.0.0.1 --port "$port"
