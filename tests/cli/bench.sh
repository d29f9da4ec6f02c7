#!/bin/sh
# power bench: output shape and error handling (no timing thresholds: the
# figures depend on the machine; only that they are measured and positive).
# usage: bench.sh POWER_BIN SHARED_DIR
set -u
bin=$1
shared=$2
. "$(dirname "$0")/../cli-lib.sh"
# field FILE NAME: the number after "NAME": in a one-line JSON object.
field() {
  sed -n "s/.*\"$2\":\([-0-9.eE+]*\).*/\1/p" "$1"
}
positive() { # positive VALUE
  [ -n "$1" ] && awk -v v="$1" 'BEGIN { exit !(v + 0 > 0) }'
}
# count FILE NAME: elements of the array "NAME":[...].
count() {
  sed -n "s/.*\"$2\":\[\([^]]*\)\].*/\1/p" "$1" | tr ',' '\n' | grep -c .
}
model=$shared/models/syn-llama-Q4_0.gguf
qwen=$shared/models/syn-qwen2-Q4_K_M.gguf
for f in "$model" "$qwen"; do
  [ -f "$f" ] || { echo "FAIL: missing test asset $f"; exit 1; }
done

# the type column is the file's own label (general.file_type), not the type
# of its largest tensors (Q5_0 in this Q4_K_M file), and stderr stays empty
"$bin" bench --model "$qwen" -p 4 -n 2 -r 1 >"$tmp/out" 2>"$tmp/err"
check "bench names the file's type" grep -q "| syn-qwen2-Q4_K_M.gguf | Q4_K_M |" "$tmp/out"
check "bench text keeps stderr empty" [ ! -s "$tmp/err" ]
"$bin" bench --bandwidth --bandwidth-mib 16 >"$tmp/out" 2>"$tmp/err"
check "bench --bandwidth text prints no debug line" [ ! -s "$tmp/err" ]

# json: one object with positive medians and one value per repetition
"$bin" bench --model "$model" -p 16 -n 8 -r 2 -o json >"$tmp/out" 2>"$tmp/err"
check "bench json exits 0" [ $? -eq 0 ]
check "bench json prints one line" [ "$(wc -l <"$tmp/out")" -eq 1 ]
check "bench json is an object" grep -q '^{.*}$' "$tmp/out"
check "bench json pp_tok_s > 0" positive "$(field "$tmp/out" pp_tok_s)"
check "bench json tg_tok_s > 0" positive "$(field "$tmp/out" tg_tok_s)"
check "bench json has 2 pp reps" [ "$(count "$tmp/out" pp_reps)" -eq 2 ]
check "bench json has 2 tg reps" [ "$(count "$tmp/out" tg_reps)" -eq 2 ]
check "bench json names the model" grep -q '"model":"syn-llama-Q4_0.gguf"' "$tmp/out"
check "bench json gives p, n, r, threads" grep -q '"threads":2,"p":16,"n":8,"r":2' "$tmp/out"
check "bench json gives the bytes read per token" positive "$(field "$tmp/out" weight_bytes_per_token)"
hp=$(sed -n 's/.*"weight_bytes_in_2mib_pages":\([0-9]*\|null\).*/\1/p' "$tmp/out")
check "bench json gives the bytes mapped in 2 MiB pages (or null)" [ -n "$hp" ]
[ "$hp" != null ] && check "bench json: 2 MiB-page bytes within the file" awk -v h="$hp" -v s="$(field "$tmp/out" size)" 'BEGIN { exit !(h >= 0 && h <= s) }'
check "bench json without --batch has no batch figure" [ -z "$(field "$tmp/out" batch_tg_tok_s)" ]
check "bench json keeps stderr empty" [ ! -s "$tmp/err" ]
kern=$(sed -n 's/.*"kernels":"\([a-z0-9-]*\)".*/\1/p' "$tmp/out")
check "bench json names the kernels ($kern)" sh -c 'case "$1" in scalar|avx2|avx2vnni|avx512|avx512-vbmi) ;; *) exit 1 ;; esac' - "$kern"
POWER_SIMD=scalar "$bin" bench --model "$model" -p 0 -n 1 -r 1 -o json >"$tmp/out2" 2>"$tmp/err"
check "bench json: POWER_SIMD=scalar runs the scalar kernels" grep -q '"kernels":"scalar"' "$tmp/out2"
if [ "$kern" != scalar ]; then
  POWER_SIMD=avx2 "$bin" bench --model "$model" -p 0 -n 1 -r 1 -o json >"$tmp/out2" 2>"$tmp/err"
  check "bench json: POWER_SIMD=avx2 runs the AVX2 kernels" grep -q '"kernels":"avx2"' "$tmp/out2"
  # avx2vnni where the CPU has AVX-VNNI, else the AVX2 level
  POWER_SIMD=avx2vnni "$bin" bench --model "$model" -p 0 -n 1 -r 1 -o json >"$tmp/out2" 2>"$tmp/err"
  want=avx2
  grep -q '^flags.* avx_vnni' /proc/cpuinfo 2>/dev/null && want=avx2vnni
  check "bench json: POWER_SIMD=avx2vnni runs the $want kernels" grep -q "\"kernels\":\"$want\"" "$tmp/out2"
fi
med=$(field "$tmp/out" tg_tok_s)
lo=$(field "$tmp/out" tg_min)
hi=$(field "$tmp/out" tg_max)
check "bench tg median lies within min..max" awk -v m="$med" -v a="$lo" -v b="$hi" 'BEGIN { exit !(a <= m && m <= b) }'

# --batch adds the aggregate decode rate and its ratio to one sequence
"$bin" bench --model "$model" -p 0 -n 4 -r 1 --batch 4 -o json >"$tmp/out" 2>"$tmp/err"
check "bench --batch exits 0" [ $? -eq 0 ]
check "bench --batch batch_tg_tok_s > 0" positive "$(field "$tmp/out" batch_tg_tok_s)"
check "bench --batch gives the ratio" positive "$(field "$tmp/out" batch_tg_ratio)"
check "bench -p 0 skips pp" [ -z "$(field "$tmp/out" pp_tok_s)" ]

# prompts longer than one 512-token batch are processed in chunks
"$bin" bench --model "$qwen" -p 600 -n 2 -r 1 --threads 1 -o json >"$tmp/out" 2>"$tmp/err"
check "bench -p 600 exits 0" [ $? -eq 0 ]
check "bench -p 600 pp_tok_s > 0" positive "$(field "$tmp/out" pp_tok_s)"
check "bench reports the architecture" grep -q '"arch":"qwen2"' "$tmp/out"

# --depth: tg after that many cached tokens (more than one 512-token batch)
"$bin" bench --model "$qwen" -p 0 -n 4 -r 1 --depth 600 -o json >"$tmp/out" 2>"$tmp/err"
check "bench --depth exits 0" [ $? -eq 0 ]
check "bench --depth tg_tok_s > 0" positive "$(field "$tmp/out" tg_tok_s)"
check "bench --depth is reported" grep -q '"depth":600' "$tmp/out"
"$bin" bench --model "$model" -p 0 -n 2 -r 1 -d 5 >"$tmp/out" 2>"$tmp/err"
check "bench md names the depth" grep -q '| tg2 @ d5 |' "$tmp/out"
# prefill at depth: the prompt follows the cached tokens
"$bin" bench --model "$model" -p 4 -n 0 -r 1 -d 5 >"$tmp/out" 2>"$tmp/err"
check "bench pp at depth exits 0" [ $? -eq 0 ]
check "bench md names pp at depth" grep -q '| pp4 @ d5 |' "$tmp/out"
"$bin" bench --model "$qwen" -p 520 -n 0 -r 1 --depth 600 -o json >"$tmp/out" 2>"$tmp/err"
check "bench pp at depth 600 (two chunks) pp_tok_s > 0" positive "$(field "$tmp/out" pp_tok_s)"

# markdown table
"$bin" bench --model "$model" -p 8 -n 4 -r 1 --batch 2 >"$tmp/out" 2>"$tmp/err"
check "bench md exits 0" [ $? -eq 0 ]
check "bench md has a header" grep -q '^| model |' "$tmp/out"
check "bench md has a pp8 row" grep -q '| pp8 |' "$tmp/out"
check "bench md has a tg4 row" grep -q '| tg4 |' "$tmp/out"
check "bench md has a batch row" grep -q '| tg4 x 2 seqs |' "$tmp/out"
check "bench md names the kernels" grep -q ' kernels; weights read per decode step' "$tmp/out"

# --spec: the engine's generation with and without speculation, on the
# trained model (copyable code), the same tokens both ways
code=$shared/models/codelm-py-Q8_0.gguf
printf '    def get_name(self):\n        return self._name\n\n    def set_name(self, value):\n        self._name = value\n\n    def get_' \
  >"$tmp/prompt.txt"
"$bin" bench --model "$code" -p 0 -n 48 -r 2 --spec ngram --prompt-file "$tmp/prompt.txt" -o json \
  >"$tmp/out" 2>"$tmp/err"
check "bench --spec exits 0" [ $? -eq 0 ]
check "bench --spec names the mode" grep -q '"tg_spec":{"mode":"ngram"' "$tmp/out"
check "bench --spec outputs are identical" grep -q '"parity":true' "$tmp/out"
check "bench --spec off rate > 0" positive "$(field "$tmp/out" off_tok_s)"
check "bench --spec rate > 0" positive "$(field "$tmp/out" spec_tok_s)"
check "bench --spec ratio > 0" positive "$(field "$tmp/out" ratio)"
check "bench --spec emits more than one token per pass" \
  awk -v v="$(field "$tmp/out" tokens_per_target_pass)" 'BEGIN { exit !(v + 0 > 1) }'
check "bench --spec acceptance in (0, 1]" \
  awk -v v="$(field "$tmp/out" acceptance)" 'BEGIN { exit !(v + 0 > 0 && v + 0 <= 1) }'
check "bench --spec counts the prompt file's tokens" \
  [ "$(field "$tmp/out" prompt_tokens)" = "$("$bin" tokenize --model "$code" --ids --file "$tmp/prompt.txt" |
    tr ', ' '\n\n' | grep -c '[0-9]')" ]
"$bin" bench --model "$code" -p 0 -n 8 -r 1 --spec prompt-lookup >"$tmp/out" 2>"$tmp/err"
check "bench --spec md has both engine rows" \
  sh -c "grep -q '| tg8 engine, spec off |' '$tmp/out' && grep -q '| tg8 engine, spec prompt-lookup |' '$tmp/out'"
"$bin" bench --model "$code" -n 1 --spec ngram >/dev/null 2>"$tmp/err"
check "bench --spec with one token exits 2" [ $? -eq 2 ]
"$bin" bench --model "$code" --spec draft >/dev/null 2>"$tmp/err"
check "bench --spec draft without a draft model exits 2" [ $? -eq 2 ]
"$bin" bench --model "$code" --prompt-file "$tmp/prompt.txt" >/dev/null 2>"$tmp/err"
check "bench --prompt-file without --spec exits 2" [ $? -eq 2 ]
"$bin" bench --model "$code" -p 0 -n 8 -r 1 --spec ngram --prompt-file "$tmp/none.txt" >/dev/null 2>"$tmp/err"
check "bench --spec with a missing prompt file exits 1" [ $? -eq 1 ]

# bandwidth probe
"$bin" bench --bandwidth --bandwidth-mib 16 -o json >"$tmp/out" 2>"$tmp/err"
check "bench --bandwidth exits 0" [ $? -eq 0 ]
check "bench --bandwidth GB/s > 0" positive "$(field "$tmp/out" bandwidth_gbs)"

# errors: usage errors exit 2, a bad model exits 1 with one line
"$bin" bench --model "$model" --frobnicate >/dev/null 2>"$tmp/err"
check "bench unknown option exits 2" [ $? -eq 2 ]
"$bin" bench --model "$model" -o xml >/dev/null 2>"$tmp/err"
check "bench bad format exits 2" [ $? -eq 2 ]
"$bin" bench --model "$model" -r 0 >/dev/null 2>"$tmp/err"
check "bench -r 0 exits 2" [ $? -eq 2 ]
"$bin" bench --model "$model" -p 0 -n 0 >/dev/null 2>"$tmp/err"
check "bench with nothing to measure exits 2" [ $? -eq 2 ]
"$bin" bench --model "$tmp/missing.gguf" -p 4 -n 2 -r 1 >"$tmp/out" 2>"$tmp/err"
check "bench missing model exits 1" [ $? -eq 1 ]
check "bench missing model is one line" [ "$(wc -l <"$tmp/err")" -eq 1 ]
check "bench missing model prints nothing on stdout" [ ! -s "$tmp/out" ]

[ $fail -eq 0 ] && echo "cli bench: all checks passed"
exit $fail
