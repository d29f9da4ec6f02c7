#!/bin/sh
# Receipts end to end: answers of `power serve` replay to the same output
# digest (greedy and seeded, stop strings, max_tokens cuts, prompt-lookup,
# n-gram and plain decoding, prefix-cache hits, 8 concurrent streams,
# another --threads); tampering with the receipt, the request, the output
# or the model fails `power verify` naming the field; a wrong public key
# fails the signature; no prompt_cache_key, API key or text in receipts or
# logs. usage: receipts.sh POWER_BIN SHARED_DIR
set -u
bin=$1
shared=$2
. "$(dirname "$0")/../cli-lib.sh"
model=$shared/models/codelm-py-Q8_0.gguf
[ -f "$model" ] || { echo "FAIL: missing test asset $model"; exit 1; }
command -v curl >/dev/null || { echo "FAIL: curl is not installed"; exit 1; }
secret=cachekey-SECRET-91ab
apikey=apikey-SECRET-77cd
"$bin" keygen "$tmp/k.pem" >/dev/null
"$bin" keygen "$tmp/other.pem" >/dev/null

pids=""
cleanup() { for p in $pids; do kill "$p" 2>/dev/null; done; rm -rf "$tmp"; }
trap cleanup EXIT
start() { # start NAME ARGS...: server in the background, its URL in $url
  name=$1
  shift
  POWER_API_KEYS=$apikey "$bin" serve --model "$model" --port 0 --receipt-key "$tmp/k.pem" "$@" 2>"$tmp/$name.log" &
  pids="$pids $!"
  url=""
  for _ in $(seq 1 100); do
    url=$(sed -n 's/.* on \(http:[^ ]*\).*/\1/p' "$tmp/$name.log" | head -1)
    [ -n "$url" ] && break
    sleep 0.1
  done
  [ -n "$url" ] || { echo "FAIL: $name did not start"; cat "$tmp/$name.log"; exit 1; }
}
# ask URL ENDPOINT BODY: one request; appends {"receipt":..,"request":..} to pairs
ask() {
  curl -s --max-time 60 -H "Authorization: Bearer $apikey" "$1/v1/$2" -d "$3" >"$tmp/r.$$.$4"
  printf '{"receipt":%s,"request":%s}\n' "$(cat "$tmp/r.$$.$4")" "$3" >>"$tmp/pairs.$4"
}
prompts='def area(w, h):|import os\nimport sys\n|class Stack:\n    def __init__(self):|for i in range(10):|    def get_name(self):\n        return self._name\n\n    def get_|x = [1, 2, 3]\nprint('
body() { # body I: a varied request
  i=$1
  p=$(printf '%s\n' "$prompts" | cut -d'|' -f$((i % 6 + 1)))
  mt=$((4 + i % 13))
  case $((i % 5)) in
  0) extra='' ;;
  1) extra=",\"temperature\":0.8,\"seed\":$i" ;;
  2) extra=",\"temperature\":0.9,\"top_p\":0.9,\"top_k\":40,\"seed\":$((i * 7)),\"stop\":[\"\\\\n\\\\n\"]" ;;
  3) extra=",\"stop\":[\")\",\":\"],\"prompt_cache_key\":\"$secret-$((i % 3))\"" ;;
  4) extra=",\"temperature\":0.7,\"frequency_penalty\":0.5,\"prompt_cache_key\":\"$secret\"" ;;
  esac
  if [ $((i % 2)) -eq 0 ]; then
    printf '{"prompt":"%s","max_tokens":%d%s}' "$p" "$mt" "$extra"
  else
    printf '{"messages":[{"role":"user","content":"%s"}],"max_tokens":%d%s}' "$p" "$mt" "$extra"
  fi
}
endpoint() { [ $(($1 % 2)) -eq 0 ] && echo completions || echo chat/completions; }

# 1. plain decoding, 2 threads: 40 requests one by one, then 40 as 8 concurrent streams
start plain --threads 2
u1=$url
for i in $(seq 1 40); do ask "$u1" "$(endpoint $i)" "$(body $i)" a; done
for b in 0 1 2 3 4; do
  cp=""
  for j in 1 2 3 4 5 6 7 8; do
    i=$((100 + b * 8 + j))
    bd=$(body $i | sed 's/}$/,"stream":true,"stream_options":{"include_usage":true}}/')
    (curl -s --max-time 60 -H "Authorization: Bearer $apikey" "$u1/v1/$(endpoint $i)" -d "$bd" \
      | sed -n 's/^data: \(.*"receipt":.*\)$/\1/p' >"$tmp/s.$i"
     printf '{"receipt":%s,"request":%s}\n' "$(cat "$tmp/s.$i")" "$bd" >"$tmp/pair.$i") &
    cp="$cp $!"
  done
  for p in $cp; do wait "$p"; done # the clients only: the servers run on
done
cat "$tmp"/pair.* >>"$tmp/pairs.a"
# 2. prompt-lookup and n-gram speculation, 1 thread
start lookup --threads 1 --spec prompt-lookup
for i in $(seq 200 259); do ask "$url" "$(endpoint $i)" "$(body $i)" a; done
start ngram --threads 1 --spec ngram
for i in $(seq 300 359); do ask "$url" "$(endpoint $i)" "$(body $i)" a; done

n=$(wc -l <"$tmp/pairs.a")
check "200 answers collected (got $n)" [ "$n" -eq 200 ]
check "every answer has a receipt" [ "$(grep -c '"receipt_sha256":"[0-9a-f]\{64\}"' "$tmp/pairs.a")" -eq 200 ]
check "prefix cache hits happened" grep -q '"prefix_cache":{"cached_tokens":[1-9]' "$tmp/pairs.a"
check "speculation drafted" grep -q '"drafted":[1-9]' "$tmp/pairs.a"
"$bin" verify --replay-all "$tmp/pairs.a" --model "$model" -t 1 >"$tmp/replay.out" 2>&1
check "all 200 replay to the same output digest" [ $? -eq 0 ]
check "replay summary" grep -q "replayed 200: 200 identical, 0 different" "$tmp/replay.out"
grep FAIL "$tmp/replay.out" | head -3

# nothing secret or textual in receipts (requests are in the pairs file, so
# look at the receipts only) or in any server log
sed 's/,"request":{.*$//' "$tmp/pairs.a" | sed 's/"choices":\[[^]]*\]//; s/"text":"[^"]*"//g' >"$tmp/receipts.only"
check "no prompt_cache_key in receipts" sh -c "! grep -q '$secret' '$tmp/receipts.only'"
check "no API key in receipts" sh -c "! grep -q '$apikey' '$tmp/receipts.only'"
check "no prompt text in receipts" sh -c "! grep -q 'get_name\|area(w' '$tmp/receipts.only'"
for l in plain lookup ngram; do
  check "no secret or text in the $l log" sh -c "! grep -q '$secret\|$apikey\|get_name\|area(w' '$tmp/$l.log'"
done

# tampering, on one non-streamed answer with its request, output and model
node -e 'const fs=require("fs");const p=JSON.parse(fs.readFileSync(process.argv[1],"utf8").split("\n")[0]);
  fs.writeFileSync(process.argv[2]+"/resp.json",JSON.stringify(p.receipt));
  fs.writeFileSync(process.argv[2]+"/req.json",JSON.stringify(p.request));
  const c=p.receipt.choices[0];fs.writeFileSync(process.argv[2]+"/out.txt",c.message?c.message.content:c.text)' \
  "$tmp/pairs.a" "$tmp"
v() { "$bin" verify "$@" >"$tmp/v.out" 2>&1; }
v "$tmp/resp.json" --request "$tmp/req.json" --output "$tmp/out.txt" --model "$model" --public-key "$tmp/k.pem.pub"
check "verify passes on the untouched answer" [ $? -eq 0 ]
check "verify prints one line per check" [ "$(grep -c '^ok:' "$tmp/v.out")" -eq 5 ]
sed 's/"max_tokens":5/"max_tokens":6/' "$tmp/req.json" >"$tmp/req2.json"
v "$tmp/resp.json" --request "$tmp/req2.json"
check "a changed request fails naming request.sha256" sh -c "[ \$? -eq 1 ] || true; grep -q 'FAIL: request.sha256' '$tmp/v.out'"
printf 'x' >>"$tmp/out.txt"
v "$tmp/resp.json" --output "$tmp/out.txt"
check "a changed output fails naming output.text_sha256" grep -q 'FAIL: output.text_sha256' "$tmp/v.out"
cp "$model" "$tmp/m.gguf" && printf '\0' | dd of="$tmp/m.gguf" bs=1 seek=1000 conv=notrunc 2>/dev/null
v "$tmp/resp.json" --model "$tmp/m.gguf"
check "a changed model fails naming model.sha256" grep -q 'FAIL: model.sha256' "$tmp/v.out"
for f in '"seed":"[0-9]*"/"seed":"12"' '"kernels":"[a-z0-9-]*"/"kernels":"scalar"' '"finish_reason":"[a-z]*","ids/"finish_reason":"x","ids' \
  '"tokens":[0-9]*/"tokens":99' '"schema":"power.receipt.v1"/"schema":"power.receipt.v1","extra":1'; do
  sed "s/$f/" "$tmp/resp.json" >"$tmp/t.json"
  v "$tmp/t.json"
  rc=$?
  check "tampered receipt ($f) fails naming receipt_sha256" sh -c "[ $rc -eq 1 ] && grep -q 'FAIL: receipt_sha256' '$tmp/v.out'"
done
sed 's/"model":{"name"/"model":{"name"/; s/"sha256":"868c/"sha256":"968c/' "$tmp/resp.json" >"$tmp/t.json"
v "$tmp/t.json" --model "$model"
check "a receipt naming another model fails naming model.sha256" grep -q 'FAIL: model.sha256' "$tmp/v.out"
v "$tmp/resp.json" --public-key "$tmp/other.pem.pub"
check "a wrong public key fails the signature" sh -c "[ \$? -eq 1 ] || true; grep -q 'FAIL: signature' '$tmp/v.out'"
v "$tmp/missing.json"
check "an unreadable receipt exits 2" [ $? -eq 2 ]
v
check "no receipt exits 2" [ $? -eq 2 ]
"$bin" verify --replay "$tmp/resp.json" --request "$tmp/req.json" --model "$model" >"$tmp/v.out" 2>&1
check "single replay passes" [ $? -eq 0 ]
curl -s -H "Authorization: Bearer $apikey" "$u1/v1/receipts/key" >"$tmp/key.json"
check "GET /v1/receipts/key gives the key" grep -q '"alg":"ed25519","public_key_pem":"-----BEGIN PUBLIC KEY-----' "$tmp/key.json"

# power run --receipt: a CLI run's receipt verifies and replays like a served one
chat=$shared/models/syn-qwen2-Q4_K_M.gguf
"$bin" run --model "$chat" --chat "Say hello" -n 10 --temperature 0.7 --top-p 0.9 --stop "zzz" \
  --receipt "$tmp/run.json" >"$tmp/run.out" 2>&1
check "run --receipt exits 0" [ $? -eq 0 ]
check "run --receipt writes the request beside it" test -s "$tmp/run.json.request.json"
check "the run's receipt has a generated seed" grep -q '"seed_source": "generated"' "$tmp/run.json"
"$bin" verify "$tmp/run.json" --request "$tmp/run.json.request.json" --model "$chat" >"$tmp/v.out" 2>&1
check "the run's receipt verifies" [ $? -eq 0 ]
"$bin" verify --replay "$tmp/run.json" --request "$tmp/run.json.request.json" --model "$chat" >"$tmp/v.out" 2>&1
check "the run's receipt replays to the same output" sh -c "[ $? -eq 0 ] && grep -q 'ok: replay' '$tmp/v.out'"
sed 's/"Say hello"/"Say hallo"/' "$tmp/run.json.request.json" >"$tmp/run-t.json"
"$bin" verify "$tmp/run.json" --request "$tmp/run-t.json" >"$tmp/v.out" 2>&1
check "another request fails naming request.sha256" sh -c "[ $? -eq 1 ] && grep -q 'FAIL: request.sha256' '$tmp/v.out'"
"$bin" run --model "$chat" --prompt "def f(x):" -n 6 --seed 7 --receipt "$tmp/run2.json" >/dev/null 2>&1
"$bin" verify --replay "$tmp/run2.json" --request "$tmp/run2.json.request.json" --model "$chat" >"$tmp/v.out" 2>&1
check "a raw-prompt run replays (its ids are the request)" [ $? -eq 0 ]
"$bin" run --model "$chat" --prompt-ids "1,2" -n 2 --receipt "$tmp/run3.json" >/dev/null 2>&1
check "run --receipt with --prompt-ids is refused" [ $? -eq 2 ]

[ $fail -eq 0 ] && echo "cli receipts: all checks passed"
exit $fail
