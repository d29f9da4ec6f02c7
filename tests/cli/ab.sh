#!/bin/sh
# power ab: report shape, output parity between configurations that must
# produce the same tokens, and argument errors. No timing thresholds: speed
# depends on the machine; only that figures are measured and positive.
# usage: ab.sh POWER_BIN SHARED_DIR
set -u
bin=$1
shared=$2
. "$(dirname "$0")/../cli-lib.sh"
# num FILE PATH: the number at "k1":{"k2":N (one or two keys) in one-line JSON.
num() {
  if [ $# -eq 2 ]; then
    sed -n "s/.*\"$2\":\([-0-9.eE+]*\)[,}].*/\1/p" "$1"
  else
    sed -n "s/.*\"$2\":{[^{}]*\"$3\":\([-0-9.eE+]*\)[,}].*/\1/p" "$1"
  fi
}
positive() { # positive VALUE
  [ -n "$1" ] && awk -v v="$1" 'BEGIN { exit !(v + 0 > 0) }'
}
equals() { # equals VALUE WANT
  [ -n "$1" ] && awk -v v="$1" -v w="$2" 'BEGIN { exit !(v + 0 == w + 0) }'
}
model=$shared/models/codelm-py-Q8_0.gguf
draft=$shared/models/codelm-py-draft-F32.gguf
for f in "$model" "$draft"; do
  [ -f "$f" ] || { echo "FAIL: missing test asset $f"; exit 1; }
done

# A tiny workload: copyable code, a seeded sampled request, a two-turn
# conversation under one cache key, and chat messages.
cat >"$tmp/w.jsonl" <<'EOF'
{"id": "copy", "prompt": "    def get_name(self):\n        return self._name\n\n    def get_value(self):\n        return self._value\n\n    def get_", "max_tokens": 16}
{"id": "sampled", "prompt": "import ", "max_tokens": 8, "temperature": 0.8, "top_p": 0.95, "seed": 3}

{"id": "turn1", "cache_key": "conv", "prompt": "def area(w, h):\n    return w * h\n", "max_tokens": 6}
{"id": "turn2", "cache_key": "conv", "prompt": "def area(w, h):\n    return w * h\n\n\ndef perimeter(w, h):\n", "max_tokens": 6}
{"id": "chat", "messages": [{"role": "user", "content": "def f():"}], "max_tokens": 4}
EOF
ab() { # ab BASELINE CANDIDATE: json report in $tmp/out, stderr in $tmp/err
  "$bin" ab --model "$model" --workload "$tmp/w.jsonl" --baseline "$1" --candidate "$2" --rounds 2 -o json \
    >"$tmp/out" 2>"$tmp/err"
}

# off vs off: the report's fields, parity, ratios near nothing in particular
ab "spec=off" "spec=off"
check "ab off/off exits 0" [ $? -eq 0 ]
check "ab json prints one line" [ "$(wc -l <"$tmp/out")" -eq 1 ]
check "ab json is an object" grep -q '^{.*}$' "$tmp/out"
check "ab off/off parity is true" grep -q '"parity":true' "$tmp/out"
for k in tokens_per_target_pass acceptance decode_tok_s e2e_tok_s per_order self_ratio paired_ratio ttft_ms \
  cached_tokens samples gain model_sha256 workload_sha256 latency_ms; do
  check "ab json has $k" grep -q "\"$k\":" "$tmp/out"
done
check "ab json names the model" grep -q '"model":"codelm-py-Q8_0.gguf"' "$tmp/out"
# the baseline's request times: TTFT median <= p99, latency median <= p99,
# TTFT median <= latency median
bt() { sed -n "s/.*\"$1\":{\"baseline\":{[^{}]*\"$2\":\([-0-9.eE+]*\)[,}].*/\1/p" "$tmp/out"; }
check "ab TTFT and latency medians and p99 are ordered" awk -v tm="$(bt ttft_ms median)" -v tp="$(bt ttft_ms p99)" \
  -v lm="$(bt latency_ms median)" -v lp="$(bt latency_ms p99)" \
  'BEGIN { exit !(tm + 0 > 0 && tp + 0 >= tm + 0 && lm + 0 >= tm + 0 && lp + 0 >= lm + 0) }'
check "ab json gives the model's sha256" \
  grep -q "\"model_sha256\":\"$(sha256sum "$model" | cut -c1-64)\"" "$tmp/out"
check "ab json gives the workload's sha256" \
  grep -q "\"workload_sha256\":\"$(sha256sum "$tmp/w.jsonl" | cut -c1-64)\"" "$tmp/out"
# gain: the lower of the two order-specific decode ratios
r1=$(sed -n 's/.*"baseline_first":{"decode_tok_s":{[^{}]*"ratio":\([-0-9.eE+]*\)}.*/\1/p' "$tmp/out")
r2=$(sed -n 's/.*"candidate_first":{"decode_tok_s":{[^{}]*"ratio":\([-0-9.eE+]*\)}.*/\1/p' "$tmp/out")
check "ab gain is the lower order-specific decode ratio" \
  equals "$(num "$tmp/out" gain)" "$(awk -v a="$r1" -v b="$r2" 'BEGIN { print (a + 0 < b + 0) ? a : b }')"
check "ab json gives the configurations" grep -q '"baseline":"spec=off","candidate":"spec=off"' "$tmp/out"
check "ab json gives the rounds" equals "$(num "$tmp/out" rounds)" 2
check "ab json counts the requests" equals "$(num "$tmp/out" requests)" 5
check "ab baseline decode tok/s > 0" positive "$(num "$tmp/out" decode_tok_s baseline)"
check "ab candidate decode tok/s > 0" positive "$(num "$tmp/out" decode_tok_s candidate)"
check "ab decode ratio > 0" positive "$(num "$tmp/out" decode_tok_s ratio)"
check "ab e2e ratio > 0" positive "$(num "$tmp/out" e2e_tok_s ratio)"
check "ab per order has both orders" grep -q '"baseline_first":{.*"candidate_first":{' "$tmp/out"
check "ab self ratio of the baseline > 0" grep -q '"self_ratio":{"baseline":{"decode":[0-9]' "$tmp/out"
check "ab lists 8 runs" [ "$(grep -o '"config":"' "$tmp/out" | wc -l)" -eq 8 ]
check "ab without speculation: 1 token per target pass" \
  equals "$(num "$tmp/out" tokens_per_target_pass baseline)" 1
check "ab without speculation: nothing drafted" grep -q '"acceptance":{"baseline":null,"candidate":null}' "$tmp/out"
check "ab without cache: nothing cached" equals "$(num "$tmp/out" cached_tokens candidate)" 0

# speculation must not change a single token, greedy or seeded (the draft
# model under the acceptance policy, which proposes by rule: the cost
# policy counts its passes and, on a draft model about as slow per pass as
# its tiny target, declines it or not as the machine's timings say)
for cand in "spec=prompt-lookup" "spec=ngram,k=4" "spec=draft,draft=$draft,policy=acceptance"; do
  ab "spec=off" "$cand"
  check "ab off vs $cand exits 0" [ $? -eq 0 ]
  check "ab off vs $cand parity is true" grep -q '"parity":true' "$tmp/out"
  check "ab $cand tokens per target pass > 0" positive "$(num "$tmp/out" tokens_per_target_pass candidate)"
done
check "ab draft mode drafts" grep -q '"spec_per_run":{"baseline":{[^{}]*},"candidate":{"drafted":[1-9]' "$tmp/out"

# prefix cache and concurrency must not change tokens either
ab "cache=off" "cache=on"
check "ab cache on vs off exits 0" [ $? -eq 0 ]
check "ab cache on vs off parity is true" grep -q '"parity":true' "$tmp/out"
check "ab cache on reuses the first turn" positive "$(num "$tmp/out" cached_tokens candidate)"
check "ab cache off reuses nothing" equals "$(num "$tmp/out" cached_tokens baseline)" 0
ab "spec=off" "parallel=3"
check "ab parallel=3 vs 1 exits 0" [ $? -eq 0 ]
check "ab parallel=3 vs 1 parity is true" grep -q '"parity":true' "$tmp/out"

# the readable report
"$bin" ab --model "$model" --workload "$tmp/w.jsonl" --baseline "spec=off" --candidate "spec=prompt-lookup" \
  --rounds 2 >"$tmp/out" 2>"$tmp/err"
check "ab md exits 0" [ $? -eq 0 ]
check "ab md states parity" grep -q '^parity: true' "$tmp/out"
check "ab md has the decode row" grep -q '| decode tok/s | pooled |' "$tmp/out"

# errors: one line, exit 2
"$bin" ab --model "$model" --workload "$tmp/w.jsonl" --baseline spec=off --candidate spec=off --rounds 1 \
  >"$tmp/out" 2>"$tmp/err"
check "ab --rounds 1 exits 2" [ $? -eq 2 ]
check "ab --rounds 1 says at least 2" grep -q "at least 2" "$tmp/err"
"$bin" ab --model "$model" --workload "$tmp/w.jsonl" --baseline spec=off --candidate spec=fast >/dev/null 2>"$tmp/err"
check "ab unknown spec mode exits 2" [ $? -eq 2 ]
check "ab unknown spec mode is one line" [ "$(wc -l <"$tmp/err")" -eq 1 ]
"$bin" ab --model "$model" --workload "$tmp/w.jsonl" --baseline spec=off --candidate speed=2 >/dev/null 2>"$tmp/err"
check "ab unknown config key exits 2" [ $? -eq 2 ]
"$bin" ab --model "$model" --workload "$tmp/w.jsonl" --baseline spec=off --candidate spec=draft >/dev/null 2>"$tmp/err"
check "ab spec=draft without a draft exits 2" [ $? -eq 2 ]
printf '{"prompt": "x", "max_tokens": 2}\n{"prompt": \n' >"$tmp/bad.jsonl"
"$bin" ab --model "$model" --workload "$tmp/bad.jsonl" --baseline spec=off --candidate spec=off >/dev/null 2>"$tmp/err"
check "ab bad workload line exits 2" [ $? -eq 2 ]
check "ab bad workload names the line" grep -q "line 2" "$tmp/err"
printf '{"max_tokens": 2}\n' >"$tmp/bad.jsonl"
"$bin" ab --model "$model" --workload "$tmp/bad.jsonl" --baseline spec=off --candidate spec=off >/dev/null 2>"$tmp/err"
check "ab request without a prompt exits 2" [ $? -eq 2 ]
"$bin" ab --model "$model" --baseline spec=off --candidate spec=off >/dev/null 2>"$tmp/err"
check "ab without --workload exits 2" [ $? -eq 2 ]

# verification-cost curve: one entry per K, cost(0)/cost(0) = 1
"$bin" ab --verify-curve --model "$model" --kmax 3 --reps 2 --prompt-len 32 -o json >"$tmp/out" 2>"$tmp/err"
check "ab --verify-curve exits 0" [ $? -eq 0 ]
check "ab --verify-curve has K = 0..3" [ "$(grep -o '"k":' "$tmp/out" | wc -l)" -eq 4 ]
check "ab --verify-curve ratio of K=0 is 1" grep -q '"k":0,"ms":[0-9.e+-]*,"ratio":1\.0' "$tmp/out"
"$bin" ab --verify-curve --model "$model" --kmax 8 --reps 1 --prompt-len 300 >/dev/null 2>"$tmp/err"
check "ab --verify-curve past the context exits 2" [ $? -eq 2 ]

[ $fail -eq 0 ] && echo "cli ab: all checks passed"
exit $fail
