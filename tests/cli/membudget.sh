#!/bin/sh
# Memory budgets and host controls through the CLI: the same ids under
# --mem-budget with each read strategy and residency policy; a budget below
# the minimum, an encrypted model with a budget, --residency without a
# budget and bad values are one-line errors; power inspect --residency
# prints the policy and the resident set; --mlock, --hugepages,
# --cpu-affinity and --priority are honoured or refused, never ignored.
# usage: membudget.sh POWER_BIN SHARED_DIR
set -u
bin=$1
shared=$2
. "$(dirname "$0")/../cli-lib.sh"
model=$shared/models/syn-llama-Q4_K_M.gguf
[ -f "$model" ] || { echo "FAIL: missing test asset $model"; exit 1; }
ids="1 2 3 4 5"

"$bin" run --model "$model" --prompt-ids "$ids" -n 8 >"$tmp/ref" 2>"$tmp/err"
check "reference run" [ $? -eq 0 -a -s "$tmp/ref" ]
for io in mmap pread direct; do
  for b in 50% 2M; do
    for p in lru lfru; do
      "$bin" run --model "$model" --weights-io $io --mem-budget $b --residency $p --prompt-ids "$ids" -n 8 \
        >"$tmp/out" 2>"$tmp/err"
      check "run --weights-io $io --mem-budget $b --residency $p exits 0" [ $? -eq 0 ]
      check "run --weights-io $io --mem-budget $b --residency $p gives the same ids" cmp -s "$tmp/ref" "$tmp/out"
    done
  done
done
POWER_LOG=info "$bin" run --model "$model" --mem-budget 40% --prompt-ids "$ids" -n 2 >/dev/null 2>"$tmp/err"
check "the load log states the budget" grep -q "memory budget .* pinned" "$tmp/err"

"$bin" run --model "$model" --mem-budget 100K --prompt-ids "$ids" -n 2 >"$tmp/out" 2>"$tmp/err"
check "a budget below the minimum fails" [ $? -ne 0 ]
check "it names the minimum" grep -q "below this model's minimum" "$tmp/err"
check "in one line" [ "$(wc -l <"$tmp/err")" -eq 1 ]
"$bin" run --model "$model" --mem-budget 12Q --prompt-ids "$ids" -n 2 >"$tmp/out" 2>"$tmp/err"
check "a bad budget exits 2" [ $? -eq 2 ]
"$bin" run --model "$model" --residency lfru --prompt-ids "$ids" -n 2 >"$tmp/out" 2>"$tmp/err"
check "--residency without a budget exits 2" [ $? -eq 2 ]
check "and says why" grep -q "give a budget" "$tmp/err"
"$bin" run --model "$model" --mem-budget 50% --residency mru --prompt-ids "$ids" -n 2 >"$tmp/out" 2>"$tmp/err"
check "an unknown policy exits 2" [ $? -eq 2 ]

hex=8f14e45fceea167a5a36dedd4bea2543c4ca4238a0b923820dcc509a6f75849b
printf '%s\n' "$hex" >"$tmp/key"
chmod 600 "$tmp/key"
"$bin" encrypt --key-file "$tmp/key" "$model" "$tmp/m.pwe" 2>"$tmp/err"
"$bin" run --model "$tmp/m.pwe" --weights-key-file "$tmp/key" --mem-budget 50% --prompt-ids "$ids" -n 2 \
  >"$tmp/out" 2>"$tmp/err"
check "an encrypted model with a budget is refused" [ $? -ne 0 ]
check "saying why" grep -q "cannot stream under a memory budget" "$tmp/err"

"$bin" inspect "$model" --residency --mem-budget 40% --residency-policy lfru >"$tmp/out" 2>"$tmp/err"
check "inspect --residency exits 0" [ $? -eq 0 ]
check "inspect --residency prints the policy" grep -q "evicted by lfru" "$tmp/out"
check "inspect --residency lists pinned units" grep -q "pinned$" "$tmp/out"
check "inspect --residency lists streamed units" grep -q "blk.0 .*streamed$" "$tmp/out"
"$bin" inspect "$model" --residency >"$tmp/out" 2>"$tmp/err"
check "inspect --residency without a budget exits 2" [ $? -eq 2 ]

# host controls
"$bin" run --model "$model" --cpu-affinity 0 --prompt-ids "$ids" -n 8 >"$tmp/out" 2>"$tmp/err"
check "--cpu-affinity 0 runs" [ $? -eq 0 ]
check "--cpu-affinity 0 gives the same ids" cmp -s "$tmp/ref" "$tmp/out"
"$bin" run --model "$model" --cpu-affinity 4095 --prompt-ids "$ids" -n 2 >"$tmp/out" 2>"$tmp/err"
check "--cpu-affinity on a CPU that is not there fails" [ $? -ne 0 ]
"$bin" run --model "$model" --cpu-affinity 0-x --prompt-ids "$ids" -n 2 >"$tmp/out" 2>"$tmp/err"
check "a bad CPU list fails" [ $? -ne 0 ]
check "naming the option" grep -q "cpu-affinity" "$tmp/err"
"$bin" run --model "$model" --priority 5 --prompt-ids "$ids" -n 8 >"$tmp/out" 2>"$tmp/err"
check "--priority 5 runs" [ $? -eq 0 ]
check "--priority 5 gives the same ids" cmp -s "$tmp/ref" "$tmp/out"
"$bin" run --model "$model" --priority 40 --prompt-ids "$ids" -n 2 >"$tmp/out" 2>"$tmp/err"
check "--priority out of range fails" [ $? -ne 0 ]
for io in mmap pread; do
  "$bin" run --model "$model" --weights-io $io --mlock --prompt-ids "$ids" -n 8 >"$tmp/out" 2>"$tmp/err"
  rc=$?
  # honoured (same ids) or refused naming RLIMIT_MEMLOCK; never ignored
  if [ $rc -eq 0 ]; then
    check "--mlock ($io) gives the same ids" cmp -s "$tmp/ref" "$tmp/out"
  else
    check "--mlock ($io) refused names RLIMIT_MEMLOCK" grep -q "RLIMIT_MEMLOCK" "$tmp/err"
  fi
done
(ulimit -l 64 2>/dev/null && "$bin" run --model "$model" --weights-io pread --mlock --prompt-ids "$ids" -n 2 \
  >"$tmp/out" 2>"$tmp/err")
rc=$?
if [ "$(id -u)" -ne 0 ]; then
  check "--mlock over a 64 KiB RLIMIT_MEMLOCK fails" [ $rc -ne 0 ]
  check "naming RLIMIT_MEMLOCK" grep -q "RLIMIT_MEMLOCK" "$tmp/err"
fi
"$bin" run --model "$model" --hugepages --prompt-ids "$ids" -n 2 >"$tmp/out" 2>"$tmp/err"
check "--hugepages with mmap is refused" [ $? -ne 0 ]
check "saying what it applies to" grep -q "owned weight buffers" "$tmp/err"
"$bin" run --model "$model" --weights-io pread --hugepages --prompt-ids "$ids" -n 8 >"$tmp/out" 2>"$tmp/err"
rc=$?
if grep -q "\[never\]" /sys/kernel/mm/transparent_hugepage/enabled 2>/dev/null; then
  check "--hugepages where THP is off is refused" [ $rc -ne 0 ]
else
  check "--hugepages (pread) gives the same ids" cmp -s "$tmp/ref" "$tmp/out"
fi
exit $fail
