#!/bin/sh
# bench/vs-llamacpp: that it runs both engines on one small file and prints
# the table with positive figures and ratios, that --json holds the same,
# that --batch B measures B sequences on both engines, that --simd avx2 makes both engines run their AVX2 kernels (where the CPU
# has AVX2), and that bad arguments are refused. No timing thresholds.
# usage: vs_llamacpp.sh POWER_BIN SHARED_DIR
set -u
bin=$1
shared=$2
. "$(dirname "$0")/../cli-lib.sh"
vs=$(cd "$(dirname "$0")/../.." && pwd)/bench/vs-llamacpp
model=$shared/models/syn-llama-Q4_0.gguf
[ -f "$model" ] || { echo "FAIL: missing test asset $model"; exit 1; }
positive() { [ -n "$1" ] && awk -v v="$1" 'BEGIN { exit !(v + 0 > 0) }'; }
# ratio ROW FILE: the bold Power/llama.cpp ratio of the table row ROW
ratio() { sed -n "s/^| $1 | [^|]* | [^|]* | \*\*\([0-9.]*\)\*\* |.*/\1/p" "$2"; }

node "$vs" --power "$bin" --rounds 2 --reps 1 -p 16 -n 4 --json "$tmp/vs.json" "$model" >"$tmp/out" 2>"$tmp/err"
check "vs-llamacpp exits 0 ($(tail -1 "$tmp/err"))" [ $? -eq 0 ]
check "vs-llamacpp prints its header" grep -q '^# Power vs llama.cpp (node-llama-cpp 3.21.1, CPU backend ' "$tmp/out"
check "vs-llamacpp names Power's kernels" grep -Eq 'Power kernels (scalar|avx2|avx512|avx512-vbmi)\)' "$tmp/out"
check "vs-llamacpp has a model section" grep -q '^## syn-llama-Q4_0.gguf (llama, ' "$tmp/out"
check "vs-llamacpp tg4 ratio > 0" positive "$(ratio tg4 "$tmp/out")"
check "vs-llamacpp pp16 ratio > 0" positive "$(ratio pp16 "$tmp/out")"
check "vs-llamacpp prints the paired share of the bound" grep -q '^| tg4 Power % of bound, each round against the probe' "$tmp/out"
check "vs-llamacpp reports progress per round" [ "$(grep -c 'round [12]/2 done' "$tmp/err")" -eq 2 ]
check "vs-llamacpp --json holds the tg ratio" node -e '
  const j = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8"));
  const m = j.summary.models[0].depths[0];
  if (!(m.tg.ratio > 0 && m.pp.ratio > 0 && m.tg.round_ratios.length === 2 && j.results[0].at[0].power.length === 2)) process.exit(1);
' "$tmp/vs.json"

# depths and a quantized KV cache: a row per depth and figure, each against
# depth 0, and the bound counting the cache; with 3 sequences decoding
# together beside them (llamacpp-bench.mjs stops unless llama.cpp ran one
# decode of 3 tokens per step)
node "$vs" --power "$bin" --rounds 1 --reps 1 -p 8 -n 2 --depth 0,48 --kv-type q8_0 --batch 3 --json "$tmp/vsd.json" "$model" >"$tmp/out" 2>"$tmp/err"
check "vs-llamacpp --depth 0,48 --kv-type q8_0 --batch 3 exits 0 ($(tail -1 "$tmp/err"))" [ $? -eq 0 ]
check "vs-llamacpp --batch 3: aggregate ratio > 0" positive "$(ratio 'tg2 x 3 seqs (aggregate)' "$tmp/out")"
check "vs-llamacpp --batch 3 prints the per-sequence row" grep -q '^| tg2 x 3 seqs per sequence | ' "$tmp/out"
check "vs-llamacpp --batch 3 prints each engine over its own tg" grep -q '^| tg2 x 3 seqs over its own tg2 ' "$tmp/out"
check "vs-llamacpp --batch 3 --json: both engines' batch figures, from the first depth's runs only" node -e '
  const j = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8"));
  const b = j.summary.models[0].batch;
  if (!(b.batch === 3 && b.power > 0 && b.llamacpp > 0 && b.ratio > 0 && b.power_over_tg > 0 && b.llamacpp_over_tg > 0)) process.exit(1);
  const [a0, a48] = j.results[0].at;
  if (!(a0.llama[0].batch === 3 && a0.llama[0].batch_decodes_per_step === 1 && a0.power[0].batch === 3)) process.exit(1);
  if (a48.llama[0].batch_tg_reps || a48.power[0].batch_tg_reps) process.exit(1);
' "$tmp/vsd.json"
check "vs-llamacpp prints the depth rows" grep -q '^| tg2 @ d48 | ' "$tmp/out"
check "vs-llamacpp prints prefill at depth" grep -q '^| pp8 @ d48 | ' "$tmp/out"
check "vs-llamacpp depth ratio > 0" positive "$(ratio 'tg2 @ d48' "$tmp/out")"
check "vs-llamacpp names the KV cache type" grep -q 'KV cache q8_0' "$tmp/out"
check "vs-llamacpp --json: the step at depth reads the KV cache too" node -e '
  const j = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8"));
  const m = j.summary.models[0];
  const [d0, d48] = m.depths;
  if (!(m.kv_bytes_per_position > 0 && d48.step_bytes > d0.step_bytes && d48.tg.power_vs_d0 > 0 && d48.pp.ratio > 0)) process.exit(1);
  if (j.results[0].at[1].llama[0].kv_type_k !== "q8_0") process.exit(1);
' "$tmp/vsd.json"

if grep -q ' avx2 ' /proc/cpuinfo 2>/dev/null && grep -q ' fma ' /proc/cpuinfo && grep -q ' f16c ' /proc/cpuinfo; then
  mkdir "$tmp/t"
  TMPDIR=$tmp/t node "$vs" --power "$bin" --simd avx2 --rounds 1 --reps 1 -p 8 -n 2 "$model" >"$tmp/out" 2>"$tmp/err"
  check "vs-llamacpp --simd avx2 exits 0 ($(tail -1 "$tmp/err"))" [ $? -eq 0 ]
  check "vs-llamacpp --simd avx2: llama.cpp runs its Haswell build, Power its AVX2 kernels" \
    grep -q 'CPU backend haswell, .*Power kernels avx2)' "$tmp/out"
  check "vs-llamacpp --simd avx2: tg2 ratio > 0" positive "$(ratio tg2 "$tmp/out")"
  check "vs-llamacpp --simd avx2 leaves no temporary install" [ -z "$(ls -A "$tmp/t")" ]
fi

node "$vs" --power "$bin" --simd avx9 "$model" >"$tmp/out" 2>"$tmp/err"
check "vs-llamacpp --simd avx9 exits 2" [ $? -eq 2 ]
check "vs-llamacpp --simd avx9 says why" grep -q "invalid value for --simd: 'avx9'" "$tmp/err"
node "$vs" --power "$bin" "$tmp/missing.gguf" >"$tmp/out" 2>"$tmp/err"
check "vs-llamacpp on a missing file exits 1" [ $? -eq 1 ]
check "vs-llamacpp names the missing file" grep -q 'no such model file' "$tmp/err"
node "$vs" --power "$bin" -p 0 -n 0 "$model" >"$tmp/out" 2>"$tmp/err"
check "vs-llamacpp with nothing to measure exits 2" [ $? -eq 2 ]
node "$vs" --power "$bin" --batch 0 "$model" >"$tmp/out" 2>"$tmp/err"
check "vs-llamacpp --batch 0 exits 2" [ $? -eq 2 ]
check "vs-llamacpp --batch 0 says why" grep -q "invalid value for --batch: '0'" "$tmp/err"
node "$vs" --power "$bin" --batch 8 -n 0 "$model" >"$tmp/out" 2>"$tmp/err"
check "vs-llamacpp --batch without generated tokens exits 2" [ $? -eq 2 ]
exit $fail
