#!/bin/sh
# Weight read strategies and encrypted models through the CLI: the same ids
# with --weights-io mmap|pread|direct, plain or encrypted; power encrypt /
# decrypt round trip; tampering and wrong keys are one-line errors naming
# the chunk; the key is never in argv (/proc/PID/cmdline) or in the logs.
# usage: weights.sh POWER_BIN SHARED_DIR
set -u
bin=$1
shared=$2
. "$(dirname "$0")/../cli-lib.sh"
model=$shared/models/syn-qwen2-Q4_K_M.gguf
[ -f "$model" ] || { echo "FAIL: missing test asset $model"; exit 1; }
hex=8f14e45fceea167a5a36dedd4bea2543c4ca4238a0b923820dcc509a6f75849b
printf '%s\n' "$hex" >"$tmp/key"
chmod 600 "$tmp/key"
head -c 32 /dev/zero >"$tmp/wrong"
chmod 600 "$tmp/wrong"
ids="1 2 3 4 5"

"$bin" run --model "$model" --prompt-ids "$ids" -n 8 >"$tmp/ref" 2>"$tmp/err"
check "reference run" [ $? -eq 0 -a -s "$tmp/ref" ]
for io in mmap pread direct; do
  "$bin" run --model "$model" --weights-io $io --prompt-ids "$ids" -n 8 >"$tmp/out" 2>"$tmp/err"
  check "run --weights-io $io exits 0" [ $? -eq 0 ]
  check "run --weights-io $io gives the same ids" cmp -s "$tmp/ref" "$tmp/out"
done
"$bin" run --model "$model" --weights-io mmapp --prompt-ids "$ids" -n 2 >"$tmp/out" 2>"$tmp/err"
check "unknown --weights-io exits 2" [ $? -eq 2 ]
check "unknown --weights-io names the choices" grep -q "mmap, pread or direct" "$tmp/err"

# encrypt, decrypt, identity
"$bin" encrypt --key-file "$tmp/key" --chunk-size 64K "$model" "$tmp/m.pwe" 2>"$tmp/err"
check "encrypt exits 0" [ $? -eq 0 ]
"$bin" decrypt --key-file "$tmp/key" "$tmp/m.pwe" "$tmp/back.gguf" 2>"$tmp/err"
check "decrypt exits 0" [ $? -eq 0 ]
check "decrypt gives the file back" cmp -s "$model" "$tmp/back.gguf"
"$bin" encrypt --key-file "$tmp/key" --chunk-size 3000 "$model" "$tmp/x.pwe" 2>"$tmp/err"
check "a chunk size that is not a power of two is refused" [ $? -eq 2 ]
for io in mmap pread direct; do
  POWER_LOG=debug "$bin" run --model "$tmp/m.pwe" --weights-key-file "$tmp/key" --weights-io $io --prompt-ids "$ids" \
    -n 8 >"$tmp/out" 2>"$tmp/log"
  check "encrypted run ($io) exits 0" [ $? -eq 0 ]
  check "encrypted run ($io) gives the same ids" cmp -s "$tmp/ref" "$tmp/out"
  check "encrypted run ($io): no key in the log" sh -c "! grep -qi '$hex' '$tmp/log'"
done
POWER_WEIGHTS_KEY_FILE=$tmp/key "$bin" run --model "$tmp/m.pwe" --prompt-ids "$ids" -n 8 >"$tmp/out" 2>"$tmp/err"
check "POWER_WEIGHTS_KEY_FILE is the key" cmp -s "$tmp/ref" "$tmp/out"
"$bin" run --model "$tmp/m.pwe" --prompt-ids "$ids" -n 2 >"$tmp/out" 2>"$tmp/err"
check "an encrypted model without a key fails" [ $? -ne 0 ]
check "... saying no key was given" grep -q "no key file" "$tmp/err"

# faults: one line on stderr, naming the chunk, no key
"$bin" run --model "$tmp/m.pwe" --weights-key-file "$tmp/wrong" --prompt-ids "$ids" -n 2 >"$tmp/out" 2>"$tmp/err"
check "wrong key fails" [ $? -ne 0 ]
check "wrong key names chunk 0" grep -q "chunk 0 of" "$tmp/err"
check "wrong key: one line" [ "$(wc -l <"$tmp/err")" -eq 1 ]
"$bin" decrypt --key-file "$tmp/wrong" "$tmp/m.pwe" "$tmp/back2.gguf" 2>"$tmp/err"
check "decrypt with a wrong key fails and writes nothing" [ $? -eq 1 -a ! -e "$tmp/back2.gguf" ]
# flip one ciphertext byte of chunk 3 (64 KiB chunks: 64 + 3 * (65536 + 28) + 12 + 5)
cp "$tmp/m.pwe" "$tmp/bad.pwe"
printf 'Z' | dd of="$tmp/bad.pwe" bs=1 seek=$((64 + 3 * 65564 + 17)) conv=notrunc 2>/dev/null
for io in mmap pread direct; do
  "$bin" run --model "$tmp/bad.pwe" --weights-key-file "$tmp/key" --weights-io $io --prompt-ids "$ids" -n 2 \
    >"$tmp/out" 2>"$tmp/err"
  check "tampered chunk fails ($io)" [ $? -ne 0 ]
  check "tampered chunk is named ($io)" grep -q "chunk 3 of" "$tmp/err"
done
head -c 200000 "$tmp/m.pwe" >"$tmp/cut.pwe"
"$bin" run --model "$tmp/cut.pwe" --weights-key-file "$tmp/key" --prompt-ids "$ids" -n 2 >"$tmp/out" 2>"$tmp/err"
check "truncated container fails" [ $? -ne 0 ]
check "truncated container names the chunk" grep -q "truncated container: chunk 3 of" "$tmp/err"

# the key is not in a running server's argv or log
POWER_LOG=debug "$bin" serve --model "$tmp/m.pwe" --weights-key-file "$tmp/key" --weights-io pread --host 127.0.0.1 \
  --port 0 >"$tmp/serve.out" 2>"$tmp/serve.log" &
pid=$!
i=0
while [ $i -lt 300 ] && ! grep -q "serving" "$tmp/serve.log" 2>/dev/null; do
  sleep 0.1
  i=$((i + 1))
done
check "encrypted serve starts" grep -q "serving" "$tmp/serve.log"
tr '\0' ' ' <"/proc/$pid/cmdline" >"$tmp/cmdline" 2>/dev/null
check "serve argv names the key file" grep -q "weights-key-file" "$tmp/cmdline"
check "serve argv has no key" sh -c "! grep -qi '$hex' '$tmp/cmdline'"
kill "$pid" 2>/dev/null
wait "$pid" 2>/dev/null
check "serve log has no key" sh -c "! grep -qi '$hex' '$tmp/serve.log'"

# cold start benchmark: a row per strategy, the cache checked
cp "$model" "$tmp/cold.gguf"
"$bin" bench --cold --model "$tmp/cold.gguf" -r 1 >"$tmp/out" 2>"$tmp/err"
check "bench --cold exits 0" [ $? -eq 0 ]
check "bench --cold has three strategies" [ "$(grep -c '| cold.gguf |' "$tmp/out")" -eq 3 ]
check "bench --cold reports the cache it checked" grep -q "mincore" "$tmp/out"
exit $fail
