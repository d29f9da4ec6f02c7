#!/bin/sh
# `power serve` configuration: invalid settings are errors (exit status and
# a line naming the setting), a port in use is an error, names resolve,
# --port 0 prints the port it got, --log-format json writes JSON lines.
# usage: serve_config.sh POWER_BIN SHARED_DIR
set -u
bin=$1
shared=$2
. "$(dirname "$0")/../cli-lib.sh"
model=$shared/models/syn-qwen2-Q4_K_M.gguf
[ -f "$model" ] || { echo "FAIL: missing test asset $model"; exit 1; }

POWER_LOG=bogus "$bin" serve --model "$model" --port 0 >/dev/null 2>"$tmp/err"
check "POWER_LOG=bogus exits 2" [ $? -eq 2 ]
check "POWER_LOG=bogus is named" grep -q "POWER_LOG='bogus'" "$tmp/err"

POWER_LOG=verbose "$bin" tokenize --help >/dev/null 2>"$tmp/err"
check "POWER_LOG=verbose is an error for every command" [ $? -eq 2 ]

POWER_API_KEYS=" , " "$bin" serve --model "$model" --port 0 >/dev/null 2>"$tmp/err"
check "blank POWER_API_KEYS exits 1" [ $? -eq 1 ]
check "blank POWER_API_KEYS is explained" grep -q "holds no key" "$tmp/err"

"$bin" serve --model "$model" --model "$model" --port 0 >/dev/null 2>"$tmp/err"
check "serve --model twice exits 2" [ $? -eq 2 ]
check "serve --model twice is named" grep -q -- "--model given more than once" "$tmp/err"
"$bin" serve -m "$model" --port 1 --port 0 >/dev/null 2>"$tmp/err"
check "serve --port twice exits 2" [ $? -eq 2 ]
"$bin" run --model "$model" -m "$model" --prompt hi -n 1 >/dev/null 2>"$tmp/err"
check "run --model / -m twice exits 2" [ $? -eq 2 ]
check "run --model twice is named" grep -q -- "--model given more than once" "$tmp/err"
"$bin" serve --model "$model" --log-format yaml >/dev/null 2>"$tmp/err"
check "serve --log-format yaml exits 2" [ $? -eq 2 ]
"$bin" serve --model "$model" --responses-max 0 >/dev/null 2>"$tmp/err"
check "serve --responses-max 0 exits 2" [ $? -eq 2 ]
"$bin" serve --model "$model" --responses-bytes 12Q >/dev/null 2>"$tmp/err"
check "serve --responses-bytes 12Q exits 2" [ $? -eq 2 ]
"$bin" serve --model "$model" --cors "ftp://x" --port 0 >/dev/null 2>"$tmp/err"
check "serve --cors with a bad origin exits 1" [ $? -eq 1 ]

# A name for --host, an ephemeral port, JSON logs.
"$bin" serve --model "$model" --host localhost --port 0 --log-format json >/dev/null 2>"$tmp/first" &
pid=$!
port=
i=0
while [ $i -lt 100 ] && [ -z "$port" ]; do
  port=$(sed -n 's/.*serving [^ ]* on http:\/\/localhost:\([0-9][0-9]*\).*/\1/p' "$tmp/first" | head -n 1)
  [ -n "$port" ] || sleep 0.1
  i=$((i + 1))
done
check "serve --port 0 prints the port it got" [ -n "$port" ]
check "json log lines are JSON objects with an RFC 3339 time" \
  grep -Eq '^\{"time":"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3}Z","level":"info","msg":"serving ' "$tmp/first"
if [ -n "$port" ]; then
  # The same port again, through the address "localhost" resolved to.
  timeout 60 "$bin" serve --model "$model" --host 127.0.0.1 --port "$port" >/dev/null 2>"$tmp/second"
  rc=$?
  check "a port in use exits 1" [ $rc -eq 1 ]
  check "a port in use is named" grep -q "already in use" "$tmp/second"
fi
"$bin" serve --model "$model" --host no-such-host.invalid --port 0 >/dev/null 2>"$tmp/err"
check "an unresolvable --host exits 1" [ $? -eq 1 ]
check "an unresolvable --host is named" grep -q "cannot resolve listen address 'no-such-host.invalid'" "$tmp/err"
kill "$pid" 2>/dev/null
wait "$pid" 2>/dev/null
exit $fail
