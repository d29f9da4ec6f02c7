#!/bin/sh
# `power synth` and `power quantize` on the command line: exit codes, one-line
# errors on stderr, nothing on stdout, deterministic output files that
# `power inspect` and `power run` accept.
# usage: synth.sh POWER_BIN SHARED_DIR
set -u
bin=$1
shared=$2
. "$(dirname "$0")/../cli-lib.sh"
vocab=$shared/tokenizer/ggml-vocab-llama-spm.gguf
f32=$shared/models/codelm-py-F32.gguf
for f in "$vocab" "$f32"; do
  [ -f "$f" ] || { echo "FAIL: missing test asset $f"; exit 1; }
done

# help goes to stdout and exits 0
"$bin" synth --help >"$tmp/out" 2>"$tmp/err"
check "synth --help exits 0" [ $? -eq 0 ]
check "synth --help lists the architectures" grep -q "qwen2.5-0.5b" "$tmp/out"
"$bin" quantize --help >"$tmp/out" 2>"$tmp/err"
check "quantize --help exits 0" [ $? -eq 0 ]
check "quantize --help lists Q4_K_M" grep -q "Q4_K_M" "$tmp/out"
check "quantize --help lists IQ4_XS, IQ4_NL and MXFP4_MOE" grep -q "IQ4_NL, IQ4_XS, MXFP4_MOE" "$tmp/out"
check "quantize --help documents --pure" grep -q -- "--pure" "$tmp/out"

# synth: a small file, progress on stderr only, same bytes at 1 and 2 threads
"$bin" synth --arch qwen3-0.6b --vocab "$vocab" --out "$tmp/a.gguf" --type Q4_K_M --layers 1 --seed 3 \
  >"$tmp/out" 2>"$tmp/err"
check "synth exits 0" [ $? -eq 0 ]
check "synth prints nothing on stdout" [ ! -s "$tmp/out" ]
check "synth reports progress on stderr" grep -q "blk.0.ffn_up.weight" "$tmp/err"
check "synth leaves no partial file" [ ! -e "$tmp/a.gguf.part" ]
"$bin" synth --arch qwen3-0.6b --vocab "$vocab" --out "$tmp/b.gguf" --type Q4_K_M --layers 1 --seed 3 \
  --threads 1 --quiet >"$tmp/out" 2>"$tmp/err"
check "synth --quiet is quiet" [ ! -s "$tmp/err" ]
check "synth output is the same at 1 and 2 threads" cmp -s "$tmp/a.gguf" "$tmp/b.gguf"
"$bin" synth --arch qwen3-0.6b --vocab "$vocab" --out "$tmp/c.gguf" --type Q4_K_M --layers 1 --seed 4 --quiet
check "another seed gives other weights" sh -c "! cmp -s '$tmp/a.gguf' '$tmp/c.gguf'"
"$bin" inspect "$tmp/a.gguf" >"$tmp/out" 2>&1
check "inspect reads a synth file" grep -q "architecture: qwen3" "$tmp/out"
check "synth file has Q4_K weights" grep -q "Q4_K" "$tmp/out"
"$bin" run --model "$tmp/a.gguf" --prompt-ids "1,450,4996" -n 4 >"$tmp/out" 2>"$tmp/err"
check "run generates from a synth file" [ "$(wc -w <"$tmp/out")" -eq 4 ]

# synth errors: exit 2, one line
"$bin" synth --arch nope --vocab "$vocab" --out "$tmp/x.gguf" >/dev/null 2>"$tmp/err"
check "synth unknown arch exits 2" [ $? -eq 2 ]
check "synth unknown arch is one line" [ "$(wc -l <"$tmp/err")" -eq 1 ]
"$bin" synth --arch qwen3-0.6b --vocab "$vocab" >/dev/null 2>"$tmp/err"
check "synth without --out fails" [ $? -ne 0 ]
"$bin" synth --arch qwen3-0.6b --vocab "$tmp/missing.gguf" --out "$tmp/x.gguf" >/dev/null 2>"$tmp/err"
check "synth missing vocab fails" [ $? -ne 0 ]
check "synth missing vocab is one line" [ "$(wc -l <"$tmp/err")" -eq 1 ]
"$bin" synth --arch qwen3-0.6b --vocab "$f32" --out "$tmp/x.gguf" --layers 0 >/dev/null 2>"$tmp/err"
check "synth --layers 0 fails" [ $? -ne 0 ]
"$bin" synth --arch gpt-oss-20b --vocab "$vocab" --out "$tmp/x.gguf" --embd 100 >/dev/null 2>"$tmp/err"
check "synth --embd 100 exits 2" [ $? -eq 2 ]
check "synth --embd 100 is one line" [ "$(wc -l <"$tmp/err")" -eq 1 ]
check "synth --embd 100 says why" grep -q "multiple of 32" "$tmp/err"
"$bin" synth --arch qwen2.5-0.5b --vocab "$vocab" --out "$tmp/x.gguf" --embd 256 >/dev/null 2>"$tmp/err"
check "synth --embd on qwen2 exits 2" [ $? -eq 2 ]
check "synth --embd on qwen2 says why" grep -q "heads x head size (896)" "$tmp/err"
# gpt-oss: a small file with its tensors and YaRN metadata, and a run of it
"$bin" synth --arch gpt-oss-20b --vocab "$vocab" --out "$tmp/g.gguf" --type MXFP4_MOE --layers 2 --experts 4 \
  --embd 64 --quiet 2>"$tmp/err"
check "synth gpt-oss-20b exits 0" [ $? -eq 0 ]
"$bin" inspect "$tmp/g.gguf" --kv --tensors >"$tmp/out" 2>&1
check "gpt-oss file is gpt-oss" grep -q "architecture: gpt-oss" "$tmp/out"
check "gpt-oss file has YaRN scaling" grep -q "rope.scaling.type.*yarn" "$tmp/out"
check "gpt-oss file has the original context 4096" grep -q "original_context_length.*4096" "$tmp/out"
check "gpt-oss file has sinks" grep -q "blk.1.attn_sinks.weight" "$tmp/out"
check "gpt-oss file has expert biases" grep -q "blk.1.ffn_down_exps.bias" "$tmp/out"
check "gpt-oss experts are MXFP4" grep -q "MXFP4" "$tmp/out"
"$bin" run --model "$tmp/g.gguf" --prompt-ids "1,2,3" -n 4 >"$tmp/out" 2>"$tmp/err"
check "run generates from a gpt-oss file" [ $? -eq 0 ]
rm -f "$tmp/g.gguf"

# quantize: round trip and errors
"$bin" quantize "$f32" "$tmp/q.gguf" Q8_0 >"$tmp/out" 2>"$tmp/err"
check "quantize exits 0" [ $? -eq 0 ]
check "quantize prints nothing on stdout" [ ! -s "$tmp/out" ]
check "quantize shows tensor i/n" grep -q "\[  56/  56\]" "$tmp/err"
"$bin" quantize "$tmp/q.gguf" "$tmp/q2.gguf" Q4_K_M >/dev/null 2>"$tmp/err"
check "quantize of a quantized file fails" [ $? -ne 0 ]
check "quantize of a quantized file says so" grep -q "already quantized" "$tmp/err"
check "quantize of a quantized file is one line" [ "$(wc -l <"$tmp/err")" -eq 1 ]
check "quantize failure leaves no output" [ ! -e "$tmp/q2.gguf" ]
"$bin" quantize "$f32" "$tmp/q2.gguf" Q7_X >/dev/null 2>"$tmp/err"
check "quantize unknown type exits 2" [ $? -eq 2 ]
check "quantize unknown type is one line" [ "$(wc -l <"$tmp/err")" -eq 1 ]
"$bin" quantize "$f32" "$tmp/nodir/q.gguf" Q8_0 --quiet >/dev/null 2>"$tmp/err"
check "quantize unwritable output fails" [ $? -ne 0 ]
check "quantize unwritable output names the path" grep -q "nodir/q.gguf" "$tmp/err"
check "quantize unwritable output is one line" [ "$(wc -l <"$tmp/err")" -eq 1 ]
"$bin" quantize "$f32" >/dev/null 2>"$tmp/err"
check "quantize with too few arguments exits 2" [ $? -eq 2 ]

[ $fail -eq 0 ] && echo "cli synth: all checks passed"
exit $fail
