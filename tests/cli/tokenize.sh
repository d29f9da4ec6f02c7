#!/bin/sh
# power tokenize: conformance-style ids (--raw --ids), specials, files, stdin.
# usage: tokenize.sh POWER_BIN SHARED_DIR
set -u
bin=$1
shared=$2
. "$(dirname "$0")/../cli-lib.sh"
vocab=$shared/tokenizer/ggml-vocab-llama-bpe.gguf
[ -f "$vocab" ] || { echo "FAIL: missing test asset $vocab"; exit 1; }
# First conformance vector of the Llama 3 vocabulary, through the CLI.
out=$("$bin" tokenize --model "$vocab" --raw --ids "Hello world")
check "raw ids of 'Hello world'" [ "$out" = "9906 1917" ]
# Default mode adds BOS (128000) and parses special tokens.
out=$("$bin" tokenize --model "$vocab" --ids "<|eot_id|>x")
check "BOS added and special parsed" [ "$out" = "128000 128009 87" ]
out=$("$bin" tokenize --model "$vocab" --ids --raw "<|eot_id|>")
check "raw keeps special text as text" [ "$(echo "$out" | wc -w)" -gt 1 ]
printf 'Hello world' >"$tmp/in.txt"
out=$("$bin" tokenize --model "$vocab" --raw --ids --file "$tmp/in.txt")
check "--file" [ "$out" = "9906 1917" ]
out=$(printf 'Hello world' | "$bin" tokenize --model "$vocab" --raw --ids --file -)
check "--file -" [ "$out" = "9906 1917" ]
"$bin" tokenize --model "$vocab" "Hello" >"$tmp/pieces"
check "pieces listed with ids" grep -q "Hello" "$tmp/pieces"
"$bin" tokenize --model "$tmp/none.gguf" "x" >/dev/null 2>"$tmp/err"
check "missing vocab fails" [ $? -ne 0 ]
check "missing vocab one line" [ "$(wc -l <"$tmp/err")" -eq 1 ]
printf '\377\376 bad utf8 \000 nul' >"$tmp/bad.txt"
"$bin" tokenize --model "$vocab" --ids --file "$tmp/bad.txt" >/dev/null 2>&1
check "invalid UTF-8 and NUL do not crash" [ $? -lt 128 ]
[ $fail -eq 0 ] && echo "cli tokenize: all checks passed"
exit $fail
