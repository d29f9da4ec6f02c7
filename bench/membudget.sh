#!/bin/sh
# membudget.sh - decode speed under memory budgets, against the bound the
# read bandwidth of the streamed bytes gives.
#
#   bench/membudget.sh MODEL.gguf [POWER] [N_GEN] [REPS] [STRATEGIES] [BUDGETS]
#
# defaults: POWER=build/power, N_GEN=8, REPS=2, STRATEGIES="pread mmap",
# BUDGETS="100% 50% 25% 10%". The file is read once first so it is in the
# page cache. The bound: a pass under a budget must read its streamed bytes
# S (power bench reports them per decode step), so it cannot beat
# BW / S tokens per second, BW being the rate read(2) copies this file out
# of the page cache, measured here with dd at two buffer sizes (4 MiB, the
# pool's granule, and 64 MiB, larger than any cache; the higher rate is the
# bound, the stricter one). A budget below the file's minimum (the resident
# base plus two buffers of its largest streamed unit) is refused by power
# with that minimum, and the script then runs at the minimum instead.
# RESIDENCY=lfru in the environment passes --residency lfru.
# Load averages are printed beside every figure: on a shared machine they
# say how much the figures can be trusted.
set -eu
MODEL=${1:?usage: membudget.sh MODEL.gguf [POWER] [N_GEN] [REPS] [STRATEGIES] [BUDGETS]}
POWER=${2:-build/power}
N=${3:-8}
R=${4:-2}
STRATS=${5:-"pread mmap"}
BUDGETS=${6:-"100% 50% 25% 10%"}

load() { cut -d' ' -f1-3 /proc/loadavg; }

cat "$MODEL" >/dev/null
bw() { # bytes/s of dd reading MODEL with block size $1
  dd if="$MODEL" of=/dev/null bs="$1" 2>&1 | awk '/bytes/ { for (i = 1; i <= NF; i++) if ($i ~ /^s,?$/ || $i == "s,") t = $(i-1); b = $1 } END { printf "%.0f", b / t }'
}
BW4=$(bw 4M)
BW64=$(bw 64M)
BW=$BW4
[ "$BW64" -gt "$BW" ] && BW=$BW64
printf 'page-cache read bandwidth: %.2f GB/s (4 MiB reads), %.2f GB/s (64 MiB reads); bound uses %.2f GB/s; load %s\n' \
  "$(echo "$BW4 / 1000000000" | bc -l)" "$(echo "$BW64 / 1000000000" | bc -l)" "$(echo "$BW / 1000000000" | bc -l)" "$(load)"
printf '| strategy | budget | resident MiB | streamed MiB/step | tg t/s | bound t/s | of bound | reader GB/s | load avg |\n'
printf '| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |\n'
for s in $STRATS; do
  for b in $BUDGETS; do
    l=$(load)
    out=$("$POWER" bench --model "$MODEL" -p 0 -n "$N" -r "$R" --weights-io "$s" --mem-budget "$b" ${RESIDENCY:+--residency "$RESIDENCY"} 2>&1) || {
      min=$(printf '%s\n' "$out" | sed -n 's/.*minimum of \([0-9.]*\) MiB.*/\1/p')
      if [ -z "$min" ]; then printf '%s\n' "$out" >&2; exit 1; fi
      printf '| %s | %s | refused: below the minimum of %s MiB | | | | | | %s |\n' "$s" "$b" "$min" "$l"
      b=$(echo "$min" | awk '{ printf "%dK", $1 * 1024 + 1 }')
      l=$(load)
      out=$("$POWER" bench --model "$MODEL" -p 0 -n "$N" -r "$R" --weights-io "$s" --mem-budget "$b" \
        ${RESIDENCY:+--residency "$RESIDENCY"} 2>&1)
    }
    tps=$(printf '%s\n' "$out" | awk -F'|' '/ tg[0-9]+ / { gsub(/ /, "", $8); print $8 }')
    line=$(printf '%s\n' "$out" | grep '^memory budget' || true)
    if [ -z "$line" ]; then
      printf '| %s | %s | all | 0 | %s | - | - | - | %s |\n' "$s" "$b" "$tps" "$l"
      continue
    fi
    res=$(printf '%s\n' "$line" | sed -n 's/memory budget \([0-9.]*\) MiB.*/\1/p')
    step=$(printf '%s\n' "$line" | sed -n 's/.*(\([0-9.]*\) MiB per decode step).*/\1/p')
    rate=$(printf '%s\n' "$line" | sed -n 's/.* at \([0-9.]*\) GB\/s while reading.*/\1/p')
    bound=$(echo "$BW / ($step * 1048576)" | bc -l)
    frac=$(echo "100 * $tps / $bound" | bc -l)
    printf '| %s | %s | %s | %s | %s | %.2f | %.0f%% | %s | %s |\n' "$s" "$b" "$res" "$step" "$tps" "$bound" "$frac" "$rate" "$l"
  done
done
