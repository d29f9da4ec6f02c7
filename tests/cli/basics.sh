#!/bin/sh
# CLI behaviour: exit codes, stdout/stderr separation, one-line errors.
# usage: basics.sh POWER_BIN SHARED_DIR
set -u
bin=$1
shared=$2
. "$(dirname "$0")/../cli-lib.sh"
model=$shared/models/syn-llama-Q4_0.gguf
[ -f "$model" ] || { echo "FAIL: missing test asset $model"; exit 1; }

# --version: the version and the kernels, which POWER_SIMD caps
check "--version names the kernels" sh -c "'$bin' --version | grep -Eq '^kernels: (scalar|avx2|avx2vnni|avx512|avx512-vbmi)\$'"
check "--version under POWER_SIMD=scalar names the scalar kernels" sh -c "POWER_SIMD=scalar '$bin' --version | grep -q '^kernels: scalar\$'"

# inspect: valid file
"$bin" inspect "$model" >"$tmp/out" 2>"$tmp/err"
check "inspect exits 0" [ $? -eq 0 ]
check "inspect names the architecture" grep -q "architecture: llama" "$tmp/out"
check "inspect counts tensors by type" grep -q "Q4_0" "$tmp/out"
check "inspect states the file's quantization" grep -q "^quantization: Q4_0 (general.file_type 2)" "$tmp/out"
check "inspect gives the size in human units" grep -Eq "^size: +[0-9.]+ MiB \([0-9]+ bytes\)" "$tmp/out"
check "inspect gives tensor bytes in human units" grep -Eq "^  Q4_0 +[0-9]+ tensors +[0-9.]+ (KiB|MiB)" "$tmp/out"
k_m=$shared/models/syn-qwen2-Q4_K_M.gguf
"$bin" inspect "$k_m" >"$tmp/out" 2>"$tmp/err"
check "inspect names Q4_K_M, not its fallback types" grep -q "^quantization: Q4_K_M " "$tmp/out"

# inspect -o json: one valid object with the same facts
"$bin" inspect "$model" -o json --kv --tensors --sha256 >"$tmp/out.json" 2>"$tmp/err"
check "inspect -o json exits 0" [ $? -eq 0 ]
check "inspect -o json keeps stderr empty" [ ! -s "$tmp/err" ]
want=$(sha256sum "$model" | cut -d' ' -f1)
check "inspect -o json is valid JSON with the facts" node -e '
  const d = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8"));
  const ok = d.architecture === "llama" && d.file_type.name === "Q4_0" && d.file_type.id === 2 &&
    d.size_bytes === Number(process.argv[2]) && d.metadata["general.architecture"] === "llama" &&
    d.metadata["tokenizer.ggml.tokens"].length === 32000 && d.tensors.length === d.gguf.tensors &&
    d.tensor_types.some(t => t.type === "Q4_0") && d.sha256 === process.argv[3];
  process.exit(ok ? 0 : 1);' "$tmp/out.json" "$(wc -c <"$model")" "$want"
"$bin" inspect "$model" -o yaml >"$tmp/out" 2>"$tmp/err"
check "inspect -o yaml is refused" [ $? -eq 2 ]
check "inspect -o yaml names the value" grep -q "'yaml'" "$tmp/err"

# inspect --sha256 equals sha256sum
"$bin" inspect "$model" --sha256 >"$tmp/out" 2>&1
want=$(sha256sum "$model" | cut -d' ' -f1)
check "inspect --sha256 matches sha256sum" grep -q "$want" "$tmp/out"

# inspect: truncated file -> non-zero, exactly one line naming the defect
head -c 100000 "$model" >"$tmp/trunc.gguf"
"$bin" inspect "$tmp/trunc.gguf" >"$tmp/out" 2>"$tmp/err"
rc=$?
check "inspect truncated exits non-zero" [ $rc -ne 0 ]
check "inspect truncated prints one line" [ "$(wc -l <"$tmp/err")" -eq 1 ]
check "inspect truncated says truncated" grep -q "truncated" "$tmp/err"
check "inspect truncated prints nothing on stdout" [ ! -s "$tmp/out" ]

# not a GGUF file
echo "hello world, this is not a model file at all......" >"$tmp/bad.gguf"
"$bin" inspect "$tmp/bad.gguf" >/dev/null 2>"$tmp/err"
check "inspect non-gguf fails" [ $? -ne 0 ]
check "inspect non-gguf names the magic" grep -q "magic" "$tmp/err"

# run: ids out on stdout only, deterministic
"$bin" run --model "$model" --prompt-ids "1,9038,2501" -n 8 >"$tmp/a" 2>"$tmp/err"
check "run exits 0" [ $? -eq 0 ]
check "run prints 8 ids" [ "$(wc -w <"$tmp/a")" -eq 8 ]
check "run prints only digits and spaces" [ -z "$(tr -d '0-9 \n' <"$tmp/a")" ]
"$bin" run --model "$model" --prompt-ids "1,9038,2501" -n 8 --threads 1 >"$tmp/b" 2>/dev/null
check "run greedy is the same at 1 and 2 threads" cmp -s "$tmp/a" "$tmp/b"
"$bin" run --model "$model" --prompt-ids "1,9038,2501" -n 8 --temperature 0.9 --seed 7 >"$tmp/c" 2>/dev/null
"$bin" run --model "$model" --prompt-ids "1,9038,2501" -n 8 --temperature 0.9 --seed 7 --threads 1 >"$tmp/d" 2>/dev/null
check "run seeded sampling is reproducible across thread counts" cmp -s "$tmp/c" "$tmp/d"

# run: errors
POWER_MODEL= "$bin" run --model "$tmp/missing.gguf" --prompt-ids 1 >/dev/null 2>"$tmp/err"
check "run missing model fails" [ $? -ne 0 ]
check "run missing model is one line" [ "$(wc -l <"$tmp/err")" -eq 1 ]
"$bin" run --model "$model" --prompt-ids "1,x" >/dev/null 2>"$tmp/err"
check "run bad ids fails" [ $? -ne 0 ]
"$bin" run --model "$model" --prompt-ids "1,99999999" >/dev/null 2>"$tmp/err"
check "run out-of-vocabulary id fails" [ $? -ne 0 ]
check "run out-of-vocabulary id says so" grep -q "vocabulary" "$tmp/err"
"$bin" run --model "$model" --prompt-ids "1" --temperature -1 >/dev/null 2>"$tmp/err"
check "run negative temperature fails" [ $? -ne 0 ]

# run: text modes stream text; chat goes through the template
qwen=$shared/models/syn-qwen2-Q4_K_M.gguf
"$bin" run --model "$qwen" --prompt "Hello there" -n 6 --seed 1 >"$tmp/t1" 2>"$tmp/err"
check "run --prompt exits 0" [ $? -eq 0 ]
check "run --prompt prints text" [ -s "$tmp/t1" ]
"$bin" run --model "$qwen" --chat "Hi" --system "Be brief" -n 6 >"$tmp/t2" 2>"$tmp/err"
check "run --chat exits 0" [ $? -eq 0 ]
"$bin" run --model "$qwen" --chat "Hi" --prompt "x" >/dev/null 2>"$tmp/err"
check "run with two prompt kinds fails" [ $? -ne 0 ]
"$bin" run --model "$qwen" --prompt "Hello there" -n 12 --temperature 0.8 --seed 5 >"$tmp/s1" 2>/dev/null
"$bin" run --model "$qwen" --prompt "Hello there" -n 12 --temperature 0.8 --seed 5 --threads 1 >"$tmp/s2" 2>/dev/null
check "run --prompt seeded is reproducible" cmp -s "$tmp/s1" "$tmp/s2"
printf 'hello\n/reset\nagain\n/exit\n' | "$bin" chat --model "$qwen" -n 4 >"$tmp/c1" 2>"$tmp/err"
check "chat exits 0 on /exit" [ $? -eq 0 ]
check "chat acknowledges /reset" grep -q "cleared" "$tmp/err"

# chat: each turn reuses the conversation's prefix (-v reports it)
printf 'hello\nagain\n/exit\n' | "$bin" chat --model "$qwen" -n 4 --seed 1 -v >/dev/null 2>"$tmp/err"
check "chat -v exits 0" [ $? -eq 0 ]
check "chat -v reports cached and evaluated counts" grep -q "(0 cached, [0-9]* evaluated)" "$tmp/err"
check "chat second turn reuses the prefix" grep -Eq "\(([1-9][0-9]*) cached, [0-9]+ evaluated\)" "$tmp/err"

# speculation options: errors are one line, before anything loads
for cmd in serve run chat; do
  extra=
  [ $cmd = run ] && extra="--prompt-ids 1"
  "$bin" $cmd --model "$model" --spec bogus $extra </dev/null >"$tmp/out" 2>"$tmp/err"
  rc=$?
  check "$cmd unknown --spec mode fails" [ $rc -ne 0 ]
  check "$cmd unknown --spec mode is one line" [ "$(wc -l <"$tmp/err")" -eq 1 ]
  check "$cmd unknown --spec mode names it" grep -q "bogus" "$tmp/err"
  "$bin" $cmd --model "$model" --spec draft $extra </dev/null >"$tmp/out" 2>"$tmp/err"
  rc=$?
  check "$cmd --spec draft without a draft model fails" [ $rc -ne 0 ]
  check "$cmd --spec draft without a draft model is one line" [ "$(wc -l <"$tmp/err")" -eq 1 ]
  check "$cmd --spec draft names --spec-draft-model" grep -q -- "--spec-draft-model" "$tmp/err"
done
"$bin" run --model "$model" --spec ngram --spec-draft-model "$model" --prompt-ids 1 >/dev/null 2>"$tmp/err"
check "run --spec-draft-model without --spec draft fails" [ $? -ne 0 ]
"$bin" run --model "$model" --spec ngram --spec-draft-max 33 --prompt-ids 1 >/dev/null 2>"$tmp/err"
check "run --spec-draft-max out of range fails" [ $? -ne 0 ]
# a draft model the engine rejects (another vocabulary): one line, non-zero
code=$shared/models/codelm-py-Q8_0.gguf
"$bin" run --model "$code" --spec draft --spec-draft-model "$model" --prompt "x" -n 2 >/dev/null 2>"$tmp/err"
check "run with an incompatible draft model fails" [ $? -ne 0 ]
check "run with an incompatible draft model is one line" [ "$(wc -l <"$tmp/err")" -eq 1 ]
"$bin" serve --model "$code" --port 0 --spec draft --spec-draft-model "$model" >/dev/null 2>"$tmp/err"
check "serve with an incompatible draft model fails" [ $? -ne 0 ]
check "serve with an incompatible draft model is one line" [ "$(wc -l <"$tmp/err")" -eq 1 ]
# speculation keeps greedy output byte-identical
"$bin" run --model "$code" --prompt "def add(a, b):
    return a + b


def sub(a, b):
" -n 24 >"$tmp/g0" 2>/dev/null
"$bin" run --model "$code" --spec prompt-lookup --prompt "def add(a, b):
    return a + b


def sub(a, b):
" -n 24 >"$tmp/g1" 2>/dev/null
check "run --spec prompt-lookup gives the same text as off" cmp -s "$tmp/g0" "$tmp/g1"
check "run greedy text is not empty" [ -s "$tmp/g0" ]
# prefix-cache options
"$bin" serve --model "$model" --prompt-cache-entries 0 >/dev/null 2>"$tmp/err"
check "serve --prompt-cache-entries 0 fails" [ $? -ne 0 ]
"$bin" serve --model "$model" --prompt-cache-bytes 12Q >/dev/null 2>"$tmp/err"
check "serve --prompt-cache-bytes with a bad suffix fails" [ $? -ne 0 ]
check "serve bad --prompt-cache-bytes is one line" [ "$(wc -l <"$tmp/err")" -eq 1 ]
"$bin" serve --model "$model" --prompt-cache-ttl -5 >/dev/null 2>"$tmp/err"
check "serve negative --prompt-cache-ttl fails" [ $? -ne 0 ]

# no model anywhere: a clear one-line error saying how to give one
mkdir -p "$tmp/empty/bin"
cp "$bin" "$tmp/empty/bin/power"
(cd "$tmp/empty" && POWER_MODEL= ./bin/power run --prompt-ids 1 >/dev/null 2>"$tmp/err")
check "no model fails" [ $? -ne 0 ]
check "no model says how to give one" grep -q -- "--model" "$tmp/err"
check "no model mentions POWER_MODEL" grep -q "POWER_MODEL" "$tmp/err"

[ $fail -eq 0 ] && echo "cli basics: all checks passed"
exit $fail
