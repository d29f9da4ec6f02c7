#!/bin/sh
# BERT-family encoders on the command line: `power synth` of the embedding
# and reranker shapes and its --pooling option (exit codes, one-line
# errors), `power inspect` and `power tokenize` on what it wrote, and
# `power run` refusing to generate with an encoder. The WordPiece
# vocabulary is llama.cpp's bert-bge, which the peer_assets fixture copies
# beside the binary (build/peer-assets).
# usage: bert.sh POWER_BIN SHARED_DIR
set -u
bin=$1
. "$(dirname "$0")/../cli-lib.sh"
vocab=$(dirname "$bin")/peer-assets/ggml-vocab-bert-bge.gguf
[ -f "$vocab" ] || { echo "FAIL: missing $vocab (the peer_assets test extracts it)"; exit 1; }

"$bin" synth --help >"$tmp/out" 2>&1
check "synth --help lists the encoders" grep -q "bge-small-en-v1.5 nomic-embed-text-v1.5 ms-marco-minilm-l6-v2" "$tmp/out"
check "synth --help documents --pooling" grep -q -- "--pooling" "$tmp/out"

"$bin" synth --arch bge-small-en-v1.5 --vocab "$vocab" --out "$tmp/b.gguf" --layers 1 --pooling mean --quiet \
  >"$tmp/out" 2>"$tmp/err"
check "synth bge-small exits 0" [ $? -eq 0 ]
check "synth bge-small is quiet" [ ! -s "$tmp/out" ] && [ ! -s "$tmp/err" ]
"$bin" inspect "$tmp/b.gguf" --kv >"$tmp/out" 2>&1
check "inspect: architecture bert" grep -q "architecture: bert" "$tmp/out"
check "inspect: the WordPiece tokenizer" grep -q "tokenizer:    bert" "$tmp/out"
check "inspect: mean pooling" grep -q "bert.pooling_type.*1" "$tmp/out"
check "inspect: bidirectional" grep -q "bert.attention.causal.*false" "$tmp/out"

"$bin" tokenize --model "$tmp/b.gguf" "Hello, World" >"$tmp/out" 2>"$tmp/err"
check "tokenize exits 0" [ $? -eq 0 ]
check "tokenize: [CLS] hello , world [SEP]" grep -q "101" "$tmp/out"

"$bin" run --model "$tmp/b.gguf" --prompt "hello" -n 2 >"$tmp/out" 2>"$tmp/err"
check "run on an encoder fails" [ $? -ne 0 ]
check "run says why" grep -q "embedding model" "$tmp/err"

for bad in "--pooling rank" "--pooling max"; do
  "$bin" synth --arch bge-small-en-v1.5 --vocab "$vocab" --out "$tmp/x.gguf" $bad >/dev/null 2>"$tmp/err"
  check "synth $bad exits 2" [ $? -eq 2 ]
  check "synth $bad is one line" [ "$(wc -l <"$tmp/err")" -eq 1 ]
done
"$bin" synth --arch qwen3-0.6b --vocab "$vocab" --out "$tmp/x.gguf" --pooling mean >/dev/null 2>"$tmp/err"
check "synth --pooling on a decoder exits 2" [ $? -eq 2 ]
check "no file after a refused synth" [ ! -e "$tmp/x.gguf" ]

"$bin" synth --arch ms-marco-minilm-l6-v2 --vocab "$vocab" --out "$tmp/r.gguf" --layers 1 --quiet
check "synth the reranker exits 0" [ $? -eq 0 ]
"$bin" inspect "$tmp/r.gguf" --tensors >"$tmp/out" 2>&1
check "the reranker has its head" grep -q "cls.output.weight" "$tmp/out"

[ $fail -eq 0 ] && echo "bert: all checks passed"
exit $fail
