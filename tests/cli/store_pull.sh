#!/bin/sh
# power pull against a loopback HTTP server (tests/store/httpd.mjs): resume
# after a dropped connection, digest refusals leave nothing in blobs/, Ctrl-C
# then pull again resumes, two concurrent pulls download once, the Hugging
# Face file list, redirects and the token, split GGUFs.
# usage: store_pull.sh POWER_BIN SHARED_DIR
set -u
bin=$1
shared=$2
. "$(dirname "$0")/../cli-lib.sh"
here=$(cd "$(dirname "$0")/.." && pwd)
command -v node >/dev/null || { echo "FAIL: node is needed for the test HTTP server"; exit 1; }
for f in syn-llama-Q4_0.gguf llama2-tiny-random.gguf codelm-py-Q8_0.gguf codelm-py-draft-F32.gguf; do
  [ -f "$shared/models/$f" ] || { echo "FAIL: missing test asset $shared/models/$f"; exit 1; }
done

# Payload: copies of small models (never written into the repository).
www=$tmp/www
mkdir -p "$www/files" "$www/hf/org/Tiny-GGUF" "$www/hf/org/Gated-GGUF" "$www/hf/org/Split-GGUF" "$www/hf/org/Empty"
cp "$shared/models/syn-llama-Q4_0.gguf" "$www/files/big.gguf"
cp "$shared/models/llama2-tiny-random.gguf" "$www/files/tiny.gguf"
cp "$shared/models/llama2-tiny-random.gguf" "$www/files/tiny2-Q8_0.gguf"
printf '<html><body>not a model</body></html>%01000d' 0 >"$www/files/page.gguf"
# a real split (power split writes llama.cpp's gguf-split layout)
"$bin" split --parts 2 "$shared/models/codelm-py-Q8_0.gguf" "$www/files/sp" >/dev/null ||
  { echo "FAIL: power split"; exit 1; }
cp "$shared/models/llama2-tiny-random.gguf" "$www/hf/org/Tiny-GGUF/tiny-F16.gguf"
cp "$shared/models/codelm-py-Q8_0.gguf" "$www/hf/org/Tiny-GGUF/tiny-Q8_0.gguf"
echo "# readme" >"$www/hf/org/Tiny-GGUF/README.md"
cp "$shared/models/llama2-tiny-random.gguf" "$www/hf/org/Gated-GGUF/gated-Q4_K_M.gguf"
touch "$www/hf/org/Gated-GGUF/.gated"
cp "$www/files/sp-00001-of-00002.gguf" "$www/hf/org/Split-GGUF/m-Q8_0-00001-of-00002.gguf"
cp "$www/files/sp-00002-of-00002.gguf" "$www/hf/org/Split-GGUF/m-Q8_0-00002-of-00002.gguf"
echo "# readme" >"$www/hf/org/Empty/README.md"
d_big=$(sha256sum "$www/files/big.gguf" | cut -d' ' -f1)
d_tiny=$(sha256sum "$www/files/tiny.gguf" | cut -d' ' -f1)
d_q8=$(sha256sum "$www/hf/org/Tiny-GGUF/tiny-Q8_0.gguf" | cut -d' ' -f1)

log=$tmp/requests.log
: >"$log"
node "$here/store/httpd.mjs" "$www" "$tmp/port" "$log" 2>"$tmp/httpd.err" &
srv=$!
trap 'kill $srv 2>/dev/null; rm -rf "$tmp"' EXIT
i=0
while [ ! -s "$tmp/port" ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
[ -s "$tmp/port" ] || { echo "FAIL: test HTTP server did not start"; cat "$tmp/httpd.err"; exit 1; }
port=$(cat "$tmp/port")
base=http://127.0.0.1:$port
export POWER_HF_ENDPOINT=$base
unset HF_TOKEN

home=$tmp/home
export POWER_HOME=$home
# Requests whose path is exactly $1.
count() { grep -c "\"path\":\"$1\"" "$log"; }
blob_digest() { ls "$home/blobs" | grep -c "^sha256-$1\$"; }
# No partial downloads, lock files or other leftovers besides verified blobs.
blobs_clean() { [ -z "$(ls -A "$home/blobs" 2>/dev/null | grep -v '^sha256-[0-9a-f]\{64\}$')" ]; }

# --- plain URL, with the digest checked against sha256sum ---
"$bin" pull "$base/files/big.gguf" --quiet >"$tmp/out" 2>"$tmp/err"
check "pull URL exits 0" [ $? -eq 0 ]
check "pull --quiet prints nothing" [ ! -s "$tmp/err" ]
check "pull --quiet prints nothing [2]" [ ! -s "$tmp/out" ]
check "pulled blob is named by its sha256" [ "$(blob_digest "$d_big")" -eq 1 ]
check "pulled blob has the right bytes" cmp -s "$home/blobs/sha256-$d_big" "$www/files/big.gguf"
check "default name from the file" [ -f "$home/manifests/big:latest.json" ]
check "manifest records the source URL" grep -q "$base/files/big.gguf" "$home/manifests/big:latest.json"
check "nothing else left in blobs" blobs_clean
"$bin" run --model big:latest --prompt-ids "1,9038,2501" -n 4 >"$tmp/a" 2>/dev/null
"$bin" run --model "$www/files/big.gguf" --prompt-ids "1,9038,2501" -n 4 >"$tmp/b" 2>/dev/null
check "run --model NAME equals run --model PATH" cmp -s "$tmp/a" "$tmp/b"
check "run --model NAME generated ids" [ -s "$tmp/a" ]

# --- resume after a dropped connection (the same process retries with Range) ---
"$bin" pull "$base/drop/3000000/big.gguf" --name dropped >"$tmp/out" 2>"$tmp/err"
check "pull after a drop exits 0" [ $? -eq 0 ]
check "resume asked for a Range from where it stopped" grep -q '"path":"/drop/3000000/big.gguf".*"range":"bytes=[1-9][0-9]*-"' "$log"
check "resumed download has the right digest" grep -q "sha256:$d_big" "$home/manifests/dropped.json"
check "two names share one blob" [ "$(ls "$home/blobs" | grep -c '^sha256-')" -eq 1 ]
check "non-terminal progress prints plain lines" grep -q "pulled big.gguf" "$tmp/err"

# --- wrong digests are refused and leave nothing behind ---
rm -rf "$home"
"$bin" pull "$base/wrong/tiny.gguf" >"$tmp/out" 2>"$tmp/err"
check "wrong bytes: pull fails" [ $? -ne 0 ]
check "wrong bytes: says digest mismatch" grep -q "digest mismatch" "$tmp/err"
check "wrong bytes: nothing in blobs" [ -z "$(ls -A "$home/blobs")" ]
check "wrong bytes: no manifest" [ -z "$(ls -A "$home/manifests")" ]
"$bin" pull "$base/badetag/tiny.gguf" >"$tmp/out" 2>"$tmp/err"
rc=$?
check "wrong ETag: pull fails" [ $rc -ne 0 ]
check "wrong ETag: pull fails [2]" grep -q "digest mismatch" "$tmp/err"
check "wrong ETag: nothing in blobs" [ -z "$(ls -A "$home/blobs")" ]
"$bin" pull "$base/files/tiny.gguf@sha256:$(printf '0%.0s' $(seq 64))" >"$tmp/out" 2>"$tmp/err"
rc=$?
check "wrong pin: pull fails" [ $rc -ne 0 ]
check "wrong pin: pull fails [2]" grep -q "digest mismatch" "$tmp/err"
check "wrong pin: nothing in blobs" [ -z "$(ls -A "$home/blobs")" ]
"$bin" pull "$base/etag/tiny.gguf@sha256:$d_tiny" --name pinned --quiet
rc=$?
check "right pin and ETag: pull succeeds" [ $rc -eq 0 ]
check "right pin and ETag: pull succeeds [2]" [ "$(blob_digest "$d_tiny")" -eq 1 ]
n0=$(count "/etag/tiny.gguf")
"$bin" pull "$base/etag/tiny.gguf@sha256:$d_tiny" --name pinned2 --quiet
check "pinned blob already present: no download" [ "$(count "/etag/tiny.gguf")" -eq "$n0" ]
check "pinned blob already present: second name" [ -f "$home/manifests/pinned2.json" ]

# --- other refusals ---
"$bin" pull "$base/files/page.gguf" >"$tmp/out" 2>"$tmp/err"
rc=$?
check "not a GGUF: fails" [ $rc -ne 0 ]
check "not a GGUF: fails [2]" grep -q "not a GGUF" "$tmp/err"
check "not a GGUF: nothing left" blobs_clean
"$bin" pull "$base/files/missing.gguf" >"$tmp/out" 2>"$tmp/err"
rc=$?
check "404: fails, says not found" [ $rc -ne 0 ]
check "404: fails, says not found [2]" grep -q "not found" "$tmp/err"
"$bin" pull "$base/huge/tiny.gguf" >"$tmp/out" 2>"$tmp/err"
rc=$?
check "too large for the disk: fails before downloading" [ $rc -ne 0 ]
check "too large for the disk: fails before downloading [2]" grep -q "not enough disk space" "$tmp/err"
check "too large: nothing left" blobs_clean
"$bin" pull "$base/files/tiny.gguf" --name ../evil >"$tmp/out" 2>"$tmp/err"
rc=$?
check "bad --name rejected" [ $rc -ne 0 ]
check "bad --name rejected [2]" grep -q "invalid model name" "$tmp/err"
"$bin" pull "ftp://127.0.0.1/x.gguf" >"$tmp/out" 2>"$tmp/err"
check "unknown source kind rejected" [ $? -ne 0 ]
"$bin" pull "$base/auth/tiny.gguf" --name authed --retries 0 >"$tmp/out" 2>"$tmp/err"
rc=$?
check "401 without a token fails" [ $rc -ne 0 ]
check "401 without a token fails [2]" grep -q "access denied" "$tmp/err"
"$bin" pull "$base/auth/tiny.gguf" --name authed --token secret --quiet
rc=$?
check "--token is sent as a bearer token" [ $rc -eq 0 ]
check "--token is sent as a bearer token [2]" [ -f "$home/manifests/authed.json" ]

# --- redirects: followed; the token only goes to the first host ---
"$bin" pull "$base/redirect/files/tiny2-Q8_0.gguf" --token secret >"$tmp/out" 2>"$tmp/err"
rc=$?
check "redirect followed" [ $rc -eq 0 ]
check "redirect followed [2]" grep -q '"path":"/files/tiny2-Q8_0.gguf","host":"localhost' "$log"
check "token sent to the first host" grep -q '"path":"/redirect/files/tiny2-Q8_0.gguf".*"auth":"Bearer secret"' "$log"
check "token not sent to the redirect target" grep -q '"path":"/files/tiny2-Q8_0.gguf","host":"localhost[^"]*","range":"","auth":""' "$log"
check "default name and tag from the file's quantization" [ -f "$home/manifests/tiny2:q8_0.json" ]

# --- Ctrl-C during a pull, then pull again: resumes ---
rm -rf "$home"
url=$base/slowfirst/200000/big.gguf
"$bin" pull "$url" --name interrupted >"$tmp/out" 2>"$tmp/err" &
pid=$!
i=0
while [ $i -lt 200 ]; do
  sz=$(stat -c %s "$home"/blobs/partial-* 2>/dev/null | head -1)
  [ "${sz:-0}" -gt 1000000 ] && break
  sleep 0.1
  i=$((i + 1))
done
kill -INT $pid
wait $pid
rc=$?
check "SIGINT: pull exits 130" [ $rc -eq 130 ]
check "SIGINT: says the next pull resumes" grep -q "resumes" "$tmp/err"
kept=$(stat -c %s "$home"/blobs/partial-[0-9a-f]* 2>/dev/null | grep -v lock | head -1)
check "SIGINT: the partial file is kept" [ "${kept:-0}" -gt 0 ]
check "SIGINT: no manifest" [ ! -f "$home/manifests/interrupted.json" ]
"$bin" pull "$url" --name interrupted --quiet
check "pull again after SIGINT succeeds" [ $? -eq 0 ]
check "pull again sent a Range from the kept bytes" grep -q "\"path\":\"/slowfirst/200000/big.gguf\".*\"range\":\"bytes=$kept-\"" "$log"
check "resumed after SIGINT: right digest" grep -q "sha256:$d_big" "$home/manifests/interrupted.json"
check "resumed after SIGINT: blob is right" cmp -s "$home/blobs/sha256-$d_big" "$www/files/big.gguf"
check "resumed after SIGINT: nothing left" blobs_clean

# --- two concurrent pulls of the same file: one download ---
rm -rf "$home"
url=$base/slow/150000/tiny.gguf
"$bin" pull "$url" --name c1 >"$tmp/c1.out" 2>"$tmp/c1.err" &
p1=$!
"$bin" pull "$url" --name c2 >"$tmp/c2.out" 2>"$tmp/c2.err" &
p2=$!
wait $p1
r1=$?
wait $p2
r2=$?
check "concurrent pulls both succeed" [ $r1 -eq 0 ]
check "concurrent pulls both succeed [2]" [ $r2 -eq 0 ]
check "concurrent pulls: the server sent the file once" [ "$(count /slow/150000/tiny.gguf)" -eq 1 ]
check "concurrent pulls: one waited for the other" grep -q "waiting for another pull" "$tmp/c1.err" "$tmp/c2.err"
check "concurrent pulls: both names" [ -f "$home/manifests/c1.json" ]
check "concurrent pulls: both names [2]" [ -f "$home/manifests/c2.json" ]
check "concurrent pulls: one blob" [ "$(ls "$home/blobs" | grep -c '^sha256-')" -eq 1 ]
check "concurrent pulls: the right blob" [ "$(blob_digest "$d_tiny")" -eq 1 ]
check "concurrent pulls: nothing left" blobs_clean

# --- Hugging Face: file list, quantization choice, X-Linked-Etag, token ---
rm -rf "$home"
"$bin" pull hf.co/org/Tiny-GGUF:Q8_0 >"$tmp/out" 2>"$tmp/err"
check "hf pull exits 0" [ $? -eq 0 ]
check "hf pull read the file list" [ "$(count /api/models/org/Tiny-GGUF/tree/main)" -ge 1 ]
check "hf pull resolved the file" [ "$(count /org/Tiny-GGUF/resolve/main/tiny-Q8_0.gguf)" -eq 1 ]
check "hf pull fetched from the redirect target" [ "$(count /cdn/org/Tiny-GGUF/tiny-Q8_0.gguf)" -eq 1 ]
check "hf name: repository without -GGUF, tag = quantization" [ -f "$home/manifests/tiny:q8_0.json" ]
check "hf pull: right digest" grep -q "sha256:$d_q8" "$home/manifests/tiny:q8_0.json"
check "hf pull: quantization recorded" grep -q '"quantization": "Q8_0"' "$home/manifests/tiny:q8_0.json"
"$bin" pull hf.co/org/Tiny-GGUF:q8_0 --quiet --name again
check "hf pull of a blob already present: no second download" [ "$(count /cdn/org/Tiny-GGUF/tiny-Q8_0.gguf)" -eq 1 ]
"$bin" pull hf.co/org/Tiny-GGUF >"$tmp/out" 2>"$tmp/err"
rc=$?
check "hf: two models and no quantization named is an error listing them" [ $rc -ne 0 ]
check "hf: two models and no quantization named is an error listing them [2]" grep -q "tiny-F16" "$tmp/err"
"$bin" pull hf.co/org/Tiny-GGUF:Q2_K >"$tmp/out" 2>"$tmp/err"
rc=$?
check "hf: unknown quantization is not found" [ $rc -ne 0 ]
check "hf: unknown quantization is not found [2]" grep -q "no GGUF of quantization Q2_K" "$tmp/err"
"$bin" pull hf.co/org/Nope:Q8_0 >"$tmp/out" 2>"$tmp/err"
rc=$?
check "hf: unknown repository is not found" [ $rc -ne 0 ]
check "hf: unknown repository is not found [2]" grep -q "not found" "$tmp/err"
"$bin" pull hf.co/org/Empty >"$tmp/out" 2>"$tmp/err"
rc=$?
check "hf: repository without GGUF" [ $rc -ne 0 ]
check "hf: repository without GGUF [2]" grep -q "no GGUF" "$tmp/err"
"$bin" pull "hf.co/org/Tiny-GGUF:Q8_0@sha256:$d_tiny" >"$tmp/out" 2>"$tmp/err"
rc=$?
check "hf: pin that disagrees with the listed digest is refused" [ $rc -ne 0 ]
check "hf: pin that disagrees with the listed digest is refused [2]" grep -q "pinned" "$tmp/err"
"$bin" pull hf.co/org/Gated-GGUF --retries 0 >"$tmp/out" 2>"$tmp/err"
check "hf gated without a token fails" [ $? -ne 0 ]
HF_TOKEN=secret "$bin" pull hf.co/org/Gated-GGUF --quiet
rc=$?
check "hf gated with HF_TOKEN succeeds (the only model)" [ $rc -eq 0 ]
check "hf gated with HF_TOKEN succeeds (the only model) [2]" [ -f "$home/manifests/gated:q4_k_m.json" ]
check "HF_TOKEN sent to the API" grep -q '"path":"/api/models/org/Gated-GGUF/tree/main".*"auth":"Bearer secret"' "$log"
check "HF_TOKEN not sent to the CDN host" grep -q '"path":"/cdn/org/Gated-GGUF/gated-Q4_K_M.gguf","host":"localhost[^"]*","range":"","auth":""' "$log"
HF_TOKEN=secret "$bin" pull "$base/files/tiny.gguf" --name notoken --quiet
check "HF_TOKEN not sent to other hosts" grep -q '"path":"/files/tiny.gguf".*"auth":""' "$log"

# --- split GGUFs: pulled as one model ---
"$bin" pull "$base/files/sp-00001-of-00002.gguf" --quiet
rc=$?
check "split URL: pulled" [ $rc -eq 0 ]
check "split URL: pulled [2]" [ -f "$home/manifests/sp:latest.json" ]
check "split URL: both parts fetched" [ "$(count /files/sp-00002-of-00002.gguf)" -eq 1 ]
check "split URL: manifest lists two blobs" [ "$(grep -c '"digest"' "$home/manifests/sp:latest.json")" -eq 2 ]
"$bin" pull hf.co/org/Split-GGUF:Q8_0 --quiet
rc=$?
check "split hf: pulled as one model" [ $rc -eq 0 ]
check "split hf: pulled as one model [2]" [ "$(grep -c '"digest"' "$home/manifests/split:q8_0.json")" -eq 2 ]
"$bin" run --model "$shared/models/codelm-py-Q8_0.gguf" --prompt-ids 1,2,3 -n 6 --temperature 0 >"$tmp/ref" 2>"$tmp/err"
"$bin" run --model split:q8_0 --prompt-ids 1,2,3 -n 6 --temperature 0 >"$tmp/out" 2>"$tmp/err"
rc=$?
check "split model: loads as one model" [ $rc -eq 0 ]
check "split model: the unsplit file's tokens" cmp -s "$tmp/ref" "$tmp/out"
"$bin" run --model sp:latest --prompt-ids 1,2,3 -n 6 --temperature 0 --weights-io pread --mem-budget 80% >"$tmp/out" 2>"$tmp/err"
check "split model: the same under a memory budget" cmp -s "$tmp/ref" "$tmp/out"
check "list shows the pulled models" [ "$("$bin" list | grep -c 'q8_0')" -ge 2 ]

# --- POST /v1/models/pull on a running server (the same pull code) ---
rm -rf "$home"
srv_up() { # $1: log file; the rest: serve options. Sets spid and surl.
  slog=$1
  shift
  "$bin" serve --port 0 --no-request-log "$@" >/dev/null 2>"$slog" &
  spid=$!
  i=0
  while ! grep -q "serving" "$slog" 2>/dev/null && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
  surl=$(sed -n 's/.* on \(http:[^ ]*\).*/\1/p' "$slog" | head -1)
}
srv_down() { kill -TERM $spid 2>/dev/null; wait $spid 2>/dev/null; }
# pull BODY [curl options...]: the answer in $tmp/p.body, headers in $tmp/p.hdr
vpull() {
  b=$1
  shift
  curl -s -D "$tmp/p.hdr" -o "$tmp/p.body" --max-time 60 -H 'content-type: application/json' "$@" \
    "$surl/v1/models/pull" -d "$b"
}
srv_up "$tmp/s1.log"
vpull "{\"model\":\"$base/files/tiny.gguf\"}"
check "server pull without --allow-pull is 403" grep -q "^HTTP/1.1 403" "$tmp/p.hdr"
check "server pull without --allow-pull: nothing stored" [ -z "$(ls "$home/manifests" 2>/dev/null)" ]
srv_down
srv_up "$tmp/s2.log" --allow-pull
check "server with --allow-pull starts" [ -n "$surl" ]
# SSE (the default): data: lines, then the success event with the digest
vpull "{\"model\":\"$base/files/tiny.gguf\",\"name\":\"web-tiny\"}"
check "SSE pull: 200 text/event-stream" grep -qi "^content-type: text/event-stream" "$tmp/p.hdr"
check "SSE pull: every line is an event or the blank line between" [ -z "$(grep -v '^data: {.*}$' "$tmp/p.body" | tr -d '\r\n')" ]
check "SSE pull: progress with completed and total" grep -q '^data: {"status":"pulling tiny.gguf","total":[0-9]*,"completed":[0-9]*' "$tmp/p.body"
check "SSE pull: the last event is success with the digest" sh -c "grep '^data:' '$tmp/p.body' | tail -n 1 | grep -q '\"status\":\"success\",\"model\":\"web-tiny\",\"digest\":\"sha256:$d_tiny\"'"
curl -s --max-time 10 "$surl/v1/models" >"$tmp/models.json"
check "the pulled model is in /v1/models" grep -q '"id":"web-tiny"' "$tmp/models.json"
curl -s --max-time 30 "$surl/v1/completions" -H 'content-type: application/json' \
  -d '{"model":"web-tiny","prompt":"hi","max_tokens":2}' >"$tmp/c.json"
check "the pulled model answers" grep -q '"text"' "$tmp/c.json"
# Ollama's /api/pull: its clients send the source as a lone "name" (the
# older spelling of "model")
curl -s -o "$tmp/op.body" --max-time 60 -H 'content-type: application/json' "$surl/api/pull" \
  -d "{\"name\":\"$base/files/tiny.gguf\",\"stream\":false}"
check "Ollama pull: a lone name is the source" grep -q "\"status\":\"success\".*\"digest\":\"sha256:$d_tiny\"" "$tmp/op.body"
# NDJSON when asked for; a Hugging Face source with its LFS digest in the progress
vpull '{"model":"hf.co/org/Tiny-GGUF:Q8_0"}' -H 'Accept: application/x-ndjson'
check "NDJSON pull: application/x-ndjson" grep -qi "^content-type: application/x-ndjson" "$tmp/p.hdr"
check "NDJSON pull: one JSON object a line" [ -z "$(grep -v '^{.*}$' "$tmp/p.body")" ]
check "NDJSON pull: progress names the digest it expects" grep -q "\"digest\":\"sha256:$d_q8\"" "$tmp/p.body"
check "NDJSON pull: ends in success" sh -c "tail -n 1 '$tmp/p.body' | grep -q '\"status\":\"success\"'"
# not streamed: one JSON at the end, its status the pull's
vpull "{\"model\":\"$base/files/big.gguf\",\"name\":\"web-big\",\"stream\":false}"
check "non-streamed pull: 200 and one JSON" grep -q "^HTTP/1.1 200" "$tmp/p.hdr"
check "non-streamed pull: success with the digest" grep -q "^{\"status\":\"success\",\"model\":\"web-big\",\"digest\":\"sha256:$d_big\"" "$tmp/p.body"
vpull "{\"model\":\"$base/files/nosuch.gguf\",\"stream\":false}"
check "non-streamed pull of a missing file: 404" grep -q "^HTTP/1.1 404" "$tmp/p.hdr"
check "non-streamed pull of a missing file: an error body" grep -q '"error"' "$tmp/p.body"
vpull '{"model":"hf.co/org/Tiny-GGUF:Q8_0","insecure":true}'
check "an unknown field is 400 naming it" sh -c "grep -q '^HTTP/1.1 400' '$tmp/p.hdr' && grep -q insecure '$tmp/p.body'"
vpull '{"name":"x"}'
check "no source is 400" grep -q "^HTTP/1.1 400" "$tmp/p.hdr"
# the client goes away mid-pull: the pull stops, its partial stays, the next resumes
url=$base/slowfirst/200000/big.gguf
curl -s -N --max-time 1 -o "$tmp/gone.body" -H 'content-type: application/json' "$surl/v1/models/pull" \
  -d "{\"model\":\"$url\",\"name\":\"web-gone\"}"
i=0
while ! grep -q "pull of .*slowfirst.*cancelled" "$tmp/s2.log" && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
check "a gone client cancels the pull" grep -q "pull of .*slowfirst.*cancelled" "$tmp/s2.log"
kept=$(stat -c %s "$home"/blobs/partial-[0-9a-f]* 2>/dev/null | grep -v lock | head -1)
check "a gone client: the partial stays" [ "${kept:-0}" -gt 0 ]
check "a gone client: no manifest" [ ! -f "$home/manifests/web-gone.json" ]
vpull "{\"model\":\"$url\",\"name\":\"web-gone\",\"stream\":false}"
check "pull again resumes from the kept bytes" grep -q "\"path\":\"/slowfirst/200000/big.gguf\".*\"range\":\"bytes=$kept-\"" "$log"
check "pull again: right digest" grep -q "sha256:$d_big" "$home/manifests/web-gone.json"
# at most two pulls at once
cpids=
for f in big.gguf tiny2-Q8_0.gguf; do
  curl -s -N --max-time 20 -o /dev/null -H 'content-type: application/json' "$surl/v1/models/pull" \
    -d "{\"model\":\"$base/slow/50000/$f\"}" &
  cpids="$cpids $!"
done
i=0
while { [ "$(count /slow/50000/big.gguf)" -lt 1 ] || [ "$(count /slow/50000/tiny2-Q8_0.gguf)" -lt 1 ]; } && [ $i -lt 100 ]; do
  sleep 0.1
  i=$((i + 1))
done
vpull '{"model":"hf.co/org/Tiny-GGUF:Q8_0"}'
check "a third pull at once is 429" grep -q "^HTTP/1.1 429" "$tmp/p.hdr"
kill $cpids 2>/dev/null # (their pulls are cancelled)
wait $cpids 2>/dev/null
srv_down

# --- the progress bar on a terminal (tmux gives the pull a terminal) ---
if command -v tmux >/dev/null; then
  sock=power-pull-test-$$
  rm -rf "$home"
  tmux -L "$sock" new-session -d -x 160 -y 10 \
    "POWER_HOME='$home' '$bin' pull '$base/slow/400000/big.gguf' --name bar; sleep 30"
  i=0
  while [ $i -lt 100 ]; do
    tmux -L "$sock" capture-pane -p >"$tmp/pane" 2>/dev/null
    grep -q "%.*/s" "$tmp/pane" && break
    sleep 0.1
    i=$((i + 1))
  done
  check "terminal: a progress bar with percent and rate" grep -q "pulling big.gguf \[#*\.*\] *[0-9.]*% .* / 12.1 MiB .*/s" "$tmp/pane"
  i=0
  while [ $i -lt 300 ] && ! grep -q "^bar:latest\|^bar " "$tmp/pane"; do
    sleep 0.1
    tmux -L "$sock" capture-pane -p >"$tmp/pane" 2>/dev/null
    i=$((i + 1))
  done
  check "terminal: the bar ends at 100%" grep -q "pulled big.gguf \[#*\] 100.0%" "$tmp/pane"
  cp "$tmp/pane" "$tmp/pane.final"
  tmux -L "$sock" kill-server 2>/dev/null
fi

# The server stays within loopback and is stopped by the trap.
exit $fail
