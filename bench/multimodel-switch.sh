#!/bin/sh
# Model switching cost of `power serve` serving a store: two models, room
# for one (--max-loaded 1), requests alternating between them, so every
# request evicts the other model and loads its own. Reports, per model,
# the load time (the server's "loaded NAME in S s" lines) and the time to
# first token of a streamed request (client side: arrival to first content
# chunk, load included), against the same request when the model is already
# loaded (two requests in a row). Medians over ROUNDS, with the load average.
#
# usage: bench/multimodel-switch.sh POWER_BIN MODEL_A.gguf MODEL_B.gguf [ROUNDS]
set -eu
bin=$1
a=$2
b=$3
rounds=${4:-10}
tmp=$(mktemp -d)
trap 'kill $pid 2>/dev/null; rm -rf "$tmp"' EXIT
export POWER_HOME=$tmp/home
unset POWER_MODEL
"$bin" import "$a" --name bench-a >/dev/null
"$bin" import "$b" --name bench-b >/dev/null
"$bin" serve --port 0 --max-loaded 1 --keep-alive -1 >/dev/null 2>"$tmp/log" &
pid=$!
url=
i=0
while [ -z "$url" ] && [ $i -lt 300 ]; do
  url=$(sed -n 's/.*serving .* on \(http:[^ ]*\).*/\1/p' "$tmp/log" | head -n 1)
  [ -n "$url" ] || sleep 0.1
  i=$((i + 1))
done
[ -n "$url" ] || { echo "server did not start" >&2; exit 1; }
# ttft NAME: seconds from sending to the first streamed content chunk.
ttft() {
  curl -s -N --max-time 120 -o /dev/null -w '%{time_starttransfer}\n' "$url/v1/completions" \
    -H 'Content-Type: application/json' \
    -d "{\"model\":\"$1\",\"prompt\":\"def main(\",\"max_tokens\":4,\"temperature\":0,\"stream\":true}"
}
# Streams start after the first token (or 15 s of keep-alive): time to the
# first byte is the first token's time.
for r in $(seq 1 "$rounds"); do
  for m in bench-a bench-b; do
    ttft $m >>"$tmp/switch.$m"
    ttft $m >>"$tmp/warm.$m"
  done
done
median() { sort -n "$1" | awk '{v[NR]=$1} END {print (NR%2 ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2)}'; }
for m in bench-a bench-b; do
  grep -o "loaded $m in [0-9.]* s" "$tmp/log" | awk '{print $4}' >"$tmp/load.$m"
  printf '%s: loads %d, load median %.3f s; first token after a switch median %.3f s, already loaded %.3f s\n' \
    "$m" "$(wc -l <"$tmp/load.$m")" "$(median "$tmp/load.$m")" "$(median "$tmp/switch.$m")" "$(median "$tmp/warm.$m")"
done
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
