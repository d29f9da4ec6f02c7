#!/bin/sh
# Many models in one server: two models imported into a scratch store,
# `power serve` without --model and --max-loaded 1. Requests for both (and
# both at once) answer exactly what a single-model server answers; /api/ps
# shows the switch; receipts name each model's digest; an unknown model is
# a 404 naming it; keep_alive 0 unloads; /metrics counts loads and
# evictions; `power ps` reads the server; pull/delete are refused without
# --allow-pull and allowed with it.
# usage: multimodel.sh POWER_BIN SHARED_DIR
set -u
bin=$1
shared=$2
. "$(dirname "$0")/../cli-lib.sh"
for f in codelm-py-Q8_0.gguf syn-llama-Q4_0.gguf; do
  [ -f "$shared/models/$f" ] || { echo "FAIL: missing test asset $shared/models/$f"; exit 1; }
done
command -v curl >/dev/null || { echo "FAIL: curl is needed"; exit 1; }
export POWER_HOME=$tmp/home
unset POWER_MODEL POWER_API_KEYS
"$bin" import "$shared/models/codelm-py-Q8_0.gguf" --name codelm:q8 >/dev/null 2>"$tmp/err" ||
  { echo "FAIL: import: $(cat "$tmp/err")"; exit 1; }
"$bin" import "$shared/models/syn-llama-Q4_0.gguf" --name llama:q4 >/dev/null 2>"$tmp/err" ||
  { echo "FAIL: import: $(cat "$tmp/err")"; exit 1; }
d_a=$(sha256sum "$shared/models/codelm-py-Q8_0.gguf" | cut -d' ' -f1)
d_b=$(sha256sum "$shared/models/syn-llama-Q4_0.gguf" | cut -d' ' -f1)

pids=
# start NAME ARGS...: starts a server logging to $tmp/NAME.log; sets url.
start() {
  name=$1
  shift
  "$bin" serve --port 0 "$@" >/dev/null 2>"$tmp/$name.log" &
  pids="$pids $!"
  i=0
  url=
  while [ -z "$url" ] && [ $i -lt 300 ]; do
    url=$(sed -n 's/.*serving .* on \(http:[^ ]*\).*/\1/p' "$tmp/$name.log" | head -n 1)
    [ -n "$url" ] || sleep 0.1
    i=$((i + 1))
  done
  [ -n "$url" ] || { echo "FAIL: $name did not start: $(cat "$tmp/$name.log")"; }
}
stop_all() {
  for p in $pids; do kill -TERM "$p" 2>/dev/null; done
  for p in $pids; do wait "$p" 2>/dev/null; done
  pids=
}
post() { curl -s --max-time 60 "$1$2" -H 'Content-Type: application/json' -d "$3"; }
req_a='{"model":"codelm:q8","prompt":"def parse_args(argv):\n","max_tokens":12,"temperature":0}'
req_b='{"model":"llama:q4","prompt":"Once upon a time","max_tokens":12,"temperature":0}'
# The deterministic part of an answer: the text and the receipt's output digests.
out_of() { sed -n 's/.*"text":\("[^"]*"\).*"output":\({[^}]*}\).*/\1 \2/p' "$1"; }
sha_of() { sed -n 's/.*"model":{"name":"[^"]*","sha256":"\([0-9a-f]*\)".*/\1/p' "$1"; }

# What one-model servers answer.
start single_a --model codelm:q8 --no-request-log
url_a=$url
start single_b --model llama:q4 --no-request-log
url_b=$url
post "$url_a" /v1/completions "$req_a" >"$tmp/sa.json"
post "$url_b" /v1/completions "$req_b" >"$tmp/sb.json"
# A one-model server keeps refusing other models as before.
post "$url_a" /v1/completions "$req_b" >"$tmp/s_other.json"
check "one model: another model is still 404" grep -q '"code":"model_not_found"' "$tmp/s_other.json"
check "one model: the message names the served model" grep -q "this server serves 'codelm:q8'" "$tmp/s_other.json"
curl -s --max-time 10 "$url_a/v1/ps" >"$tmp/s_ps.json"
check "one model: /v1/ps shows it, never expiring" grep -q '"id":"codelm:q8".*"expires_in_s":null' "$tmp/s_ps.json"
code=$(curl -s -o "$tmp/s_unload.json" -w '%{http_code}' --max-time 10 -X POST "$url_a/v1/models/codelm:q8/unload")
check "one model: unload is 400 no_store" sh -c "[ $code = 400 ] && grep -q no_store '$tmp/s_unload.json'"
stop_all
check "single-model answers have outputs" [ -n "$(out_of "$tmp/sa.json")" ] && [ -n "$(out_of "$tmp/sb.json")" ]

# The store, one model at a time.
start multi --max-loaded 1
check "serve without --model serves the store" grep -q "serving the store (max 1 loaded" "$tmp/multi.log"
curl -s --max-time 10 "$url/v1/models" >"$tmp/models.json"
check "/v1/models lists both models" sh -c "grep -q '\"id\":\"codelm:q8\"' '$tmp/models.json' && grep -q '\"id\":\"llama:q4\"' '$tmp/models.json'"
check "/v1/models: none loaded yet" sh -c "! grep -q '\"loaded\":true' '$tmp/models.json'"
curl -s --max-time 10 "$url/api/tags" >"$tmp/tags.json"
check "/api/tags lists the store" sh -c "grep -q '\"name\":\"codelm:q8\"' '$tmp/tags.json' && grep -q '\"name\":\"llama:q4\"' '$tmp/tags.json'"

post "$url" /v1/completions "$req_a" >"$tmp/ma1.json"
curl -s --max-time 10 "$url/api/ps" >"$tmp/ps1.json"
check "/api/ps after a: a is loaded" grep -q '"name":"codelm:q8"' "$tmp/ps1.json"
check "/api/ps after a: b is not" sh -c "! grep -q 'llama:q4' '$tmp/ps1.json'"
post "$url" /v1/completions "$req_b" >"$tmp/mb1.json"
curl -s --max-time 10 "$url/api/ps" >"$tmp/ps2.json"
check "/api/ps after b: the switch (b loaded)" grep -q '"name":"llama:q4"' "$tmp/ps2.json"
check "/api/ps after b: a was evicted" sh -c "! grep -q 'codelm:q8' '$tmp/ps2.json'"
# a again, after its eviction: loaded anew, same answer.
post "$url" /v1/completions "$req_a" >"$tmp/ma2.json"
check "a through the store = a alone" [ "$(out_of "$tmp/ma1.json")" = "$(out_of "$tmp/sa.json")" ]
check "b through the store = b alone" [ "$(out_of "$tmp/mb1.json")" = "$(out_of "$tmp/sb.json")" ]
check "a after its eviction = a alone" [ "$(out_of "$tmp/ma2.json")" = "$(out_of "$tmp/sa.json")" ]
check "a's receipt names a's digest" [ "$(sha_of "$tmp/ma2.json")" = "$d_a" ]
check "b's receipt names b's digest" [ "$(sha_of "$tmp/mb1.json")" = "$d_b" ]
check "the answer names the model" grep -q '"model":"llama:q4"' "$tmp/mb1.json"

# Both at once with room for one: the second waits for the first to finish.
post "$url" /v1/completions "$req_b" >"$tmp/mc_b.json" &
cb=$!
post "$url" /v1/completions "$req_a" >"$tmp/mc_a.json" &
ca=$!
wait $cb
wait $ca
check "concurrent a = a alone" [ "$(out_of "$tmp/mc_a.json")" = "$(out_of "$tmp/sa.json")" ]
check "concurrent b = b alone" [ "$(out_of "$tmp/mc_b.json")" = "$(out_of "$tmp/sb.json")" ]

# The name without its tag (one tag exists), and through Ollama's API.
post "$url" /v1/completions '{"model":"llama","prompt":"Once upon a time","max_tokens":12,"temperature":0}' >"$tmp/notag.json"
check "a name without its tag picks the one tag" [ "$(out_of "$tmp/notag.json")" = "$(out_of "$tmp/sb.json")" ]
post "$url" /api/generate '{"model":"codelm","prompt":"import os\n","raw":true,"stream":false,"options":{"temperature":0,"num_predict":4}}' >"$tmp/ol.json"
check "Ollama generate through the store" grep -q '"done":true' "$tmp/ol.json"
check "Ollama's load_duration counts the load it waited for" grep -Eq '"load_duration":[1-9]' "$tmp/ol.json"

# Unknown model: 404 naming it, in OpenAI's and Ollama's shapes.
post "$url" /v1/chat/completions '{"model":"no-such-model","messages":[{"role":"user","content":"hi"}]}' >"$tmp/404.json"
code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 10 "$url/v1/chat/completions" -d '{"model":"no-such-model","messages":[{"role":"user","content":"hi"}]}')
check "unknown model is 404" [ "$code" = 404 ]
check "unknown model: code model_not_found" grep -q '"code":"model_not_found"' "$tmp/404.json"
check "unknown model: named" grep -q "no-such-model" "$tmp/404.json"
post "$url" /api/chat '{"model":"nope:1b","messages":[{"role":"user","content":"hi"}]}' >"$tmp/404o.json"
check "unknown model (Ollama): named" grep -q '"error":".*nope:1b' "$tmp/404o.json"
code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 10 "$url/v1/completions" -d '{"prompt":"hi"}')
check "no model in the request is 400 when serving the store" [ "$code" = 400 ]

# keep_alive 0: unloaded after the request; the load convention loads again.
post "$url" /api/generate '{"model":"llama:q4","prompt":"x","stream":false,"keep_alive":0,"options":{"num_predict":1}}' >/dev/null
curl -s --max-time 10 "$url/api/ps" >"$tmp/ps3.json"
check "keep_alive 0 unloads after the request" grep -q '"models":\[\]' "$tmp/ps3.json"
post "$url" /v1/chat/completions '{"model":"codelm:q8","messages":[{"role":"user","content":"x"}],"max_tokens":1,"keep_alive":0}' >/dev/null
curl -s --max-time 10 "$url/v1/ps" >"$tmp/ps3b.json"
check "keep_alive 0 in an OpenAI request unloads too" grep -q '"data":\[\]' "$tmp/ps3b.json"
post "$url" /api/generate '{"model":"codelm:q8","keep_alive":"-1"}' >"$tmp/load.json"
check "an empty prompt loads (done_reason load)" grep -q '"done_reason":"load"' "$tmp/load.json"
"$bin" ps --port "${url##*:}" >"$tmp/ps.txt" 2>&1
check "power ps shows the loaded model" grep -q '^codelm:q8 .* forever$' "$tmp/ps.txt"
post "$url" /api/generate '{"model":"codelm:q8","keep_alive":0}' >"$tmp/unload.json"
check "keep_alive 0 with an empty prompt unloads (done_reason unload)" grep -q '"done_reason":"unload"' "$tmp/unload.json"
curl -s --max-time 10 "$url/v1/ps" >"$tmp/ps4.json"
check "/v1/ps is empty after the unload" grep -q '"data":\[\]' "$tmp/ps4.json"
post "$url" /api/generate '{"model":"codelm:q8","keep_alive":"5 minutes"}' >"$tmp/badka.json"
check "a bad keep_alive is 400 naming it" grep -q "keep_alive" "$tmp/badka.json"

curl -s --max-time 10 "$url/metrics" >"$tmp/metrics.txt"
check "metrics: a loaded again after evictions" grep -Eq '^power_model_loads_total\{model="codelm:q8"\} [3-9]$' "$tmp/metrics.txt"
check "metrics: a evicted" grep -Eq '^power_model_evictions_total\{model="codelm:q8"\} [1-9]' "$tmp/metrics.txt"
check "metrics: loaded count" grep -q '^power_models_loaded 0$' "$tmp/metrics.txt"
# 9 generations went to engines, most of them unloaded since: none is lost.
check "metrics: engine counters of unloaded models kept" grep -q '^power_engine_requests_total 9$' "$tmp/metrics.txt"

# Admin endpoints are refused without --allow-pull.
code=$(curl -s -o "$tmp/del.json" -w '%{http_code}' --max-time 10 -X DELETE "$url/api/delete" -d '{"model":"llama:q4"}')
check "delete without --allow-pull is 403" [ "$code" = 403 ]
code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 10 "$url/api/pull" -d '{"model":"http://127.0.0.1:1/x.gguf"}')
check "pull without --allow-pull is 403" [ "$code" = 403 ]
code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 10 "$url/v1/models/pull" -d '{"model":"http://127.0.0.1:1/x.gguf"}')
check "POST /v1/models/pull without --allow-pull is 403" [ "$code" = 403 ]
check "the store still has llama:q4" [ -f "$POWER_HOME/manifests/llama:q4.json" ]

# Load and eviction figures from the log.
grep -o 'loaded [a-z0-9:._-]* in [0-9.]* s' "$tmp/multi.log" | sed 's/^/  /'
grep 'endpoint=completions status=200' "$tmp/multi.log" | sed -n 's/.*\(ttft_ms=[0-9.]*\).*/  \1/p'
stop_all

# With --allow-pull (and API keys): delete works and needs the key.
printf 'k1\n' >"$tmp/keys"
start admin --allow-pull --api-key-file "$tmp/keys"
code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 10 -X DELETE "$url/api/delete" -d '{"model":"llama:q4"}')
check "delete without the key is 401" [ "$code" = 401 ]
code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 10 "$url/v1/models/pull" -d '{"model":"http://127.0.0.1:1/x.gguf"}')
check "POST /v1/models/pull without the key is 401" [ "$code" = 401 ]
code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 10 -X DELETE -H 'Authorization: Bearer k1' "$url/api/delete" -d '{"model":"llama:q4"}')
check "delete with the key is 200" [ "$code" = 200 ]
check "delete removed the manifest" [ ! -f "$POWER_HOME/manifests/llama:q4.json" ]
code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 10 -X DELETE -H 'Authorization: Bearer k1' "$url/api/delete" -d '{"model":"llama:q4"}')
check "deleting it again is 404" [ "$code" = 404 ]
# A source that is not a GGUF (this server's /health): refused from its first bytes.
curl -s --max-time 30 -H 'Authorization: Bearer k1' "$url/api/pull" -d "{\"model\":\"$url/health\",\"name\":\"x\"}" >"$tmp/pull.txt"
check "a failed pull streams its progress, then the error" sh -c "head -n 1 '$tmp/pull.txt' | grep -q '\"status\":\"pulling manifest\"' && tail -n 1 '$tmp/pull.txt' | grep -q '\"error\"'"
stop_all

# A budget smaller than a model: serving the store, that model streams its
# layers within the budget and answers the same.
start budget --mem-budget 2M --weights-io pread --no-request-log
post "$url" /v1/completions "$req_a" >"$tmp/mbud.json"
check "a model over the store budget streams and = a alone" [ "$(out_of "$tmp/mbud.json")" = "$(out_of "$tmp/sa.json")" ]
stop_all
"$bin" serve --mem-budget 50% --port 0 >/dev/null 2>"$tmp/err"
check "a share as the store budget exits 2" [ $? -eq 2 ]
check "... and says to give bytes" grep -q "give bytes" "$tmp/err"

# Flags that only apply to store serving are refused with --model.
"$bin" serve --model codelm:q8 --max-loaded 2 --port 0 >/dev/null 2>"$tmp/err"
check "--max-loaded with --model exits 2" [ $? -eq 2 ]
"$bin" serve --keep-alive 5q --port 0 >/dev/null 2>"$tmp/err"
check "a bad --keep-alive exits 2" [ $? -eq 2 ]
exit $fail
