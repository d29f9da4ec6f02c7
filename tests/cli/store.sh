#!/bin/sh
# The model store without a network: import (hard link and copy), list,
# show, cp, rm (the blob goes with the last name), name validation, and
# --model NAME in run, inspect, tokenize and serve.
# usage: store.sh POWER_BIN SHARED_DIR
set -u
bin=$1
shared=$2
. "$(dirname "$0")/../cli-lib.sh"
for f in syn-llama-Q4_0.gguf llama2-tiny-random.gguf; do
  [ -f "$shared/models/$f" ] || { echo "FAIL: missing test asset $shared/models/$f"; exit 1; }
done
cp "$shared/models/syn-llama-Q4_0.gguf" "$tmp/a.gguf"
cp "$shared/models/llama2-tiny-random.gguf" "$tmp/b.gguf"
d_a=$(sha256sum "$tmp/a.gguf" | cut -d' ' -f1)
d_b=$(sha256sum "$tmp/b.gguf" | cut -d' ' -f1)
export POWER_HOME=$tmp/home
nblobs() { ls "$home/blobs" | grep -c '^sha256-'; }
home=$POWER_HOME

# An empty (absent) store lists nothing and is not created by reading it.
"$bin" list >"$tmp/out" 2>"$tmp/err"
check "list on no store exits 0" [ $? -eq 0 ]
check "list on no store prints only the header" [ "$(wc -l <"$tmp/out")" -eq 1 ]
check "reading does not create the store" [ ! -d "$home" ]

# import: hashed, named, metadata read from the header
"$bin" import "$tmp/a.gguf" --name Syn-Llama:Q4_0 >"$tmp/out" 2>"$tmp/err"
check "import exits 0" [ $? -eq 0 ]
check "import names the blob by its sha256" [ -f "$home/blobs/sha256-$d_a" ]
check "import folds the name to lower case" [ -f "$home/manifests/syn-llama:q4_0.json" ]
check "import records architecture" grep -q '"architecture": "llama"' "$home/manifests/syn-llama:q4_0.json"
check "import records quantization" grep -q '"quantization": "Q4_0"' "$home/manifests/syn-llama:q4_0.json"
check "imported blob has the same bytes" cmp -s "$home/blobs/sha256-$d_a" "$tmp/a.gguf"
check "import on the same file system is a hard link" [ "$(stat -c %h "$tmp/a.gguf")" -eq 2 ]
# A file on another file system (tmpfs) cannot be hard-linked: copied.
if [ -d /dev/shm ] && [ -w /dev/shm ]; then
  shm=$(mktemp -d /dev/shm/power-store-test.XXXXXX)
  cp "$tmp/b.gguf" "$shm/b.gguf"
  "$bin" import "$shm/b.gguf" --name tiny >"$tmp/out" 2>"$tmp/err"
  check "import across file systems (copy) exits 0" [ $? -eq 0 ]
  check "import across file systems is a copy" [ "$(stat -c %h "$home/blobs/sha256-$d_b")" -eq 1 ]
  rm -rf "$shm"
else
  "$bin" import "$tmp/b.gguf" --name tiny >"$tmp/out" 2>"$tmp/err"
  check "import exits 0" [ $? -eq 0 ]
fi
check "copied blob is named by its sha256" [ -f "$home/blobs/sha256-$d_b" ]
check "copied blob has the right bytes" cmp -s "$home/blobs/sha256-$d_b" "$tmp/b.gguf"
check "nothing but blobs in blobs/" [ -z "$(ls -A "$home/blobs" | grep -v '^sha256-[0-9a-f]\{64\}$')" ]

# import refusals
"$bin" import "$tmp/a.gguf" --name tiny >"$tmp/out" 2>"$tmp/err"
check "import over an existing name fails" [ $? -ne 0 ]
check "import over an existing name says so" grep -q "already exists" "$tmp/err"
head -c 100000 "$tmp/a.gguf" >"$tmp/trunc.gguf"
"$bin" import "$tmp/trunc.gguf" --name trunc >"$tmp/out" 2>"$tmp/err"
check "import of a truncated GGUF fails" [ $? -ne 0 ]
check "import of a truncated GGUF leaves no manifest" [ ! -f "$home/manifests/trunc.json" ]
echo "not a model" >"$tmp/text.gguf"
"$bin" import "$tmp/text.gguf" --name text >"$tmp/out" 2>"$tmp/err"
check "import of a non-GGUF fails" [ $? -ne 0 ]
check "import of a non-GGUF says so" grep -q "not a valid GGUF" "$tmp/err"
check "failed imports leave nothing in blobs/" [ "$(ls -A "$home/blobs" | wc -l)" -eq 2 ]
"$bin" import "$tmp/missing.gguf" --name x >"$tmp/out" 2>"$tmp/err"
check "import of a missing file fails" [ $? -ne 0 ]

# bad names are rejected everywhere, before touching anything
for bad in "../evil" "a/b" ".hidden" "a:b:c" "x:" "-x" "a b" "" \
  "$(printf 'n%.0s' $(seq 101))"; do
  "$bin" import "$tmp/a.gguf" --name "$bad" >"$tmp/out" 2>"$tmp/err"
  rc=$?
  check "import rejects name '$bad'" [ $rc -ne 0 ]
  check "import names the bad name '$bad'" grep -q "name" "$tmp/err"
  "$bin" cp tiny "$bad" >"$tmp/out" 2>"$tmp/err"
  check "cp rejects name '$bad'" [ $? -ne 0 ]
done
check "no manifest escaped manifests/" [ ! -e "$tmp/evil.json" ]
check "no manifest escaped manifests/ [2]" [ ! -e "$home/evil.json" ]
check "only the two good manifests exist" [ "$(ls "$home/manifests" | grep -c '\.json$')" -eq 2 ]

# cp: a second name for the same blob
"$bin" cp tiny tiny:v2 >"$tmp/out" 2>"$tmp/err"
check "cp exits 0" [ $? -eq 0 ]
check "cp adds a manifest" [ -f "$home/manifests/tiny:v2.json" ]
check "cp shares the blob" [ "$(nblobs)" -eq 2 ]
"$bin" cp tiny tiny:v2 >"$tmp/out" 2>"$tmp/err"
check "cp onto an existing name fails" [ $? -ne 0 ]
"$bin" cp nosuch other >"$tmp/out" 2>"$tmp/err"
check "cp of an unknown name fails" [ $? -ne 0 ]
check "cp of an unknown name says not found" grep -q "not found" "$tmp/err"

# list and show
"$bin" list >"$tmp/out" 2>"$tmp/err"
check "list exits 0" [ $? -eq 0 ]
check "list shows three names" [ "$(tail -n +2 "$tmp/out" | wc -l)" -eq 3 ]
check "list shows the digest prefix" grep -q "^syn-llama:q4_0 .* $(echo "$d_a" | cut -c1-12) " "$tmp/out"
check "list shows the quantization" grep -q "Q4_0" "$tmp/out"
check "list is sorted by name" [ "$(tail -n +2 "$tmp/out" | cut -d' ' -f1 | tr '\n' ' ')" = "syn-llama:q4_0 tiny tiny:v2 " ]
"$bin" show syn-llama:q4_0 >"$tmp/out" 2>"$tmp/err"
check "show exits 0" [ $? -eq 0 ]
check "show prints the full digest" grep -q "sha256:$d_a" "$tmp/out"
check "show prints the architecture" grep -q "architecture: *llama" "$tmp/out"
check "show prints the parameter count" grep -q "^parameters:" "$tmp/out"
check "show prints the context length" grep -q "context_length" "$tmp/out"
check "show prints the source" grep -q "import:.*a.gguf" "$tmp/out"
"$bin" show nosuch >"$tmp/out" 2>"$tmp/err"
check "show of an unknown name fails" [ $? -ne 0 ]
check "show of an unknown name is one line" [ "$(wc -l <"$tmp/err")" -eq 1 ]

# --model NAME in every command that takes a model
"$bin" run --model syn-llama:q4_0 --prompt-ids "1,9038,2501" -n 6 >"$tmp/a" 2>"$tmp/err"
check "run --model NAME exits 0" [ $? -eq 0 ]
"$bin" run --model "$tmp/a.gguf" --prompt-ids "1,9038,2501" -n 6 >"$tmp/b" 2>/dev/null
check "run --model NAME equals the file's output" cmp -s "$tmp/a" "$tmp/b"
check "run --model NAME produced ids" [ "$(wc -w <"$tmp/a")" -eq 6 ]
POWER_MODEL=syn-llama:q4_0 "$bin" run --prompt-ids "1,9038,2501" -n 6 >"$tmp/c" 2>/dev/null
check "POWER_MODEL=NAME works too" cmp -s "$tmp/a" "$tmp/c"
"$bin" inspect syn-llama:q4_0 >"$tmp/out" 2>&1
check "inspect NAME works" grep -q "architecture: llama" "$tmp/out"
"$bin" tokenize --model tiny --ids "hello" >"$tmp/out" 2>&1
check "tokenize --model NAME works" [ $? -eq 0 ]
"$bin" run --model nosuch:tag --prompt-ids 1 -n 1 >"$tmp/out" 2>"$tmp/err"
check "run --model unknown name fails" [ $? -ne 0 ]
check "run --model unknown name: one line naming the store" [ "$(wc -l <"$tmp/err")" -eq 1 ]
check "run --model unknown name: says so" grep -q "no such name in the model store" "$tmp/err"

# serve --model NAME: the name is the model id clients see
"$bin" serve --model syn-llama:q4_0 --port 0 --no-request-log >"$tmp/serve.out" 2>"$tmp/serve.err" &
spid=$!
i=0
while ! grep -q "serving" "$tmp/serve.err" && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
check "serve --model NAME starts" grep -q "serving syn-llama:q4_0 on" "$tmp/serve.err"
url=$(sed -n 's/.* on \(http:[^ ]*\).*/\1/p' "$tmp/serve.err" | head -1)
if [ -n "$url" ] && command -v curl >/dev/null; then
  curl -s --max-time 10 "$url/v1/models" >"$tmp/models.json"
  check "/v1/models lists the store name" grep -q '"syn-llama:q4_0"' "$tmp/models.json"
fi
kill -TERM $spid 2>/dev/null
wait $spid

# a split model: import brings every part, and it loads and serves as one
mkdir -p "$tmp/parts"
"$bin" split --parts 3 "$tmp/b.gguf" "$tmp/parts/b" >/dev/null 2>"$tmp/err"
check "split writes 3 parts" [ -f "$tmp/parts/b-00003-of-00003.gguf" ]
"$bin" import "$tmp/parts/b-00001-of-00003.gguf" --name tiny-split >"$tmp/out" 2>"$tmp/err"
check "import of a split exits 0" [ $? -eq 0 ]
check "import of a split: three blobs in the manifest" [ "$(grep -c '"digest"' "$home/manifests/tiny-split.json")" -eq 3 ]
"$bin" run --model "$tmp/b.gguf" --prompt-ids "1,9038,2501" -n 6 >"$tmp/a" 2>/dev/null
"$bin" run --model tiny-split --prompt-ids "1,9038,2501" -n 6 >"$tmp/b" 2>"$tmp/err"
check "run --model SPLIT-NAME equals the unsplit file's output" cmp -s "$tmp/a" "$tmp/b"
"$bin" inspect tiny-split >"$tmp/out" 2>&1
check "inspect of a split lists its parts" grep -q "3/3 .*model-00003-of-00003.gguf" "$tmp/out"
"$bin" inspect "$tmp/parts/b-00001-of-00003.gguf" -o json >"$tmp/out" 2>&1
check "inspect -o json lists the parts" grep -q '"file": ".*/b-00003-of-00003.gguf"' "$tmp/out"
"$bin" split --parts 2 "$tmp/parts/b-00001-of-00003.gguf" "$tmp/parts/again" >/dev/null 2>"$tmp/err"
check "split of a split is refused" grep -q "already split" "$tmp/err"
"$bin" split --parts 999 "$tmp/b.gguf" "$tmp/parts/many" >/dev/null 2>"$tmp/err"
check "more parts than tensors is refused" grep -q "cannot fill" "$tmp/err"
"$bin" split --merge "$tmp/parts/b-00001-of-00003.gguf" "$tmp/joined.gguf" >/dev/null 2>"$tmp/err"
"$bin" run --model "$tmp/joined.gguf" --prompt-ids "1,9038,2501" -n 6 >"$tmp/b" 2>"$tmp/err"
check "split --merge gives the model back" cmp -s "$tmp/a" "$tmp/b"
"$bin" inspect "$tmp/joined.gguf" >"$tmp/out" 2>&1
check "a merged file is no split" sh -c "! grep -q '^split:' '$tmp/out'"
"$bin" run --model "$tmp/parts/b-00002-of-00003.gguf" --prompt-ids 1 -n 1 >"$tmp/out" 2>"$tmp/err"
check "run of a split's second part is refused" grep -q "give the first part" "$tmp/err"
"$bin" serve --port 0 --no-request-log >"$tmp/serve-store.out" 2>"$tmp/serve-store.err" &
spid=$!
i=0
while ! grep -q "serving" "$tmp/serve-store.err" 2>/dev/null && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
url=$(sed -n 's/.* on \(http:[^ ]*\).*/\1/p' "$tmp/serve-store.err" | head -1)
if [ -n "$url" ] && command -v curl >/dev/null; then
  curl -s --max-time 30 "$url/v1/completions" -H 'content-type: application/json' \
    -d '{"model":"tiny-split","prompt":[1,9038,2501],"max_tokens":4,"temperature":0}' >"$tmp/split.json"
  curl -s --max-time 30 "$url/v1/completions" -H 'content-type: application/json' \
    -d '{"model":"tiny","prompt":[1,9038,2501],"max_tokens":4,"temperature":0}' >"$tmp/whole.json"
  check "serve: the split model answers" grep -q '"text"' "$tmp/split.json"
  t1=$(sed 's/.*"text": *"\([^"]*\)".*/\1/' "$tmp/split.json")
  t2=$(sed 's/.*"text": *"\([^"]*\)".*/\1/' "$tmp/whole.json")
  check "serve: the split model answers as the unsplit one" [ -n "$t1" ] && [ "$t1" = "$t2" ]
else
  check "serve of the store starts" false
fi
kill -TERM $spid 2>/dev/null
wait $spid
"$bin" rm tiny-split >/dev/null 2>&1
check "rm of a split removes its parts' blobs and links" [ -z "$(ls -A "$home/splits" 2>/dev/null)" ]

# rm: the blob goes with its last name only
"$bin" rm tiny >"$tmp/out" 2>"$tmp/err"
check "rm exits 0" [ $? -eq 0 ]
check "rm removes the manifest" [ ! -f "$home/manifests/tiny.json" ]
check "rm keeps a blob another name uses" [ -f "$home/blobs/sha256-$d_b" ]
"$bin" rm tiny:v2 >"$tmp/out" 2>"$tmp/err"
check "rm of the last name exits 0" [ $? -eq 0 ]
check "rm of the last name removes the blob" [ ! -f "$home/blobs/sha256-$d_b" ]
check "rm leaves the other model's blob" [ -f "$home/blobs/sha256-$d_a" ]
check "rm never touches the imported original" cmp -s "$tmp/a.gguf" "$shared/models/syn-llama-Q4_0.gguf"
"$bin" rm tiny >"$tmp/out" 2>"$tmp/err"
check "rm of an unknown name fails" [ $? -ne 0 ]
check "rm of an unknown name says not found" grep -q "not found" "$tmp/err"
"$bin" rm ../../etc >"$tmp/out" 2>"$tmp/err"
check "rm of a bad name fails" [ $? -ne 0 ]
"$bin" rm syn-llama:q4_0 >/dev/null 2>&1
check "no blob after the last rm" [ -z "$(ls -A "$home/blobs" | grep -v '^\.')" ]
check "no manifest after the last rm" [ -z "$(ls "$home/manifests")" ]

# An unwritable store is a clear error (not as root: root writes anyway).
if [ "$(id -u)" -ne 0 ]; then
  chmod 0555 "$home/blobs" "$home/manifests"
  "$bin" import "$tmp/a.gguf" --name ro >"$tmp/out" 2>"$tmp/err"
  check "import into a read-only store fails" [ $? -ne 0 ]
  chmod 0755 "$home/blobs" "$home/manifests"
fi

exit $fail
