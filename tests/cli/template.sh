#!/bin/sh
# `power template`: exact rendered bytes on stdout, one-line errors.
# usage: template.sh POWER_BIN SHARED_DIR
set -u
bin=$1
shared=$2
. "$(dirname "$0")/../cli-lib.sh"
tdir=$shared/chat-templates
for f in "$tdir/Qwen-Qwen2.5-7B-Instruct.jinja" "$tdir/google-gemma-2-2b-it.jinja" \
  "$tdir/meta-llama-Llama-3.2-3B-Instruct.jinja" "$shared/models/syn-qwen2-Q4_K_M.gguf" \
  "$shared/models/syn-llama-Q4_0.gguf"; do
  [ -f "$f" ] || { echo "FAIL: missing test asset $f"; exit 1; }
done

# the "user" and "system_user" cases of cases.json
printf '%s' '{"messages": [{"role": "user", "content": "Hello!"}], "add_generation_prompt": true, "bos_token": "<s>", "eos_token": "</s>"}' >"$tmp/user.json"
printf '%s' '{"messages": [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "What is 2+2?"}], "add_generation_prompt": true, "bos_token": "<s>", "eos_token": "</s>"}' >"$tmp/sys.json"

# exact bytes (no newline added)
printf '<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n<|im_start|>user\nHello!<|im_end|>\n<|im_start|>assistant\n' >"$tmp/want"
"$bin" template --template "$tdir/Qwen-Qwen2.5-7B-Instruct.jinja" --vars "$tmp/user.json" >"$tmp/out" 2>"$tmp/err"
check "template exits 0" [ $? -eq 0 ]
check "template output is exact" cmp -s "$tmp/want" "$tmp/out"
check "template prints nothing on stderr" [ ! -s "$tmp/err" ]

# --date fixes strftime_now
printf '<s><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\nToday Date: 04 Jul 2026\n\nYou are terse.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nWhat is 2+2?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n' >"$tmp/want"
"$bin" template --template "$tdir/meta-llama-Llama-3.2-3B-Instruct.jinja" --vars "$tmp/sys.json" --date 2026-07-04T12:00:00 >"$tmp/out" 2>"$tmp/err"
check "template --date exits 0" [ $? -eq 0 ]
check "template --date output is exact" cmp -s "$tmp/want" "$tmp/out"

# the model's own template (Qwen2's adds a default system turn) ...
"$bin" template --model "$shared/models/syn-qwen2-Q4_K_M.gguf" --vars "$tmp/user.json" >"$tmp/out" 2>"$tmp/err"
check "template --model exits 0" [ $? -eq 0 ]
check "template --model renders the model's template" grep -q "<|im_start|>system" "$tmp/out"
# ... and a model without one gets ChatML
printf '<|im_start|>user\nHello!<|im_end|>\n<|im_start|>assistant\n' >"$tmp/want"
"$bin" template --model "$shared/models/syn-llama-Q4_0.gguf" --vars "$tmp/user.json" >"$tmp/out" 2>"$tmp/err"
check "template --model without a template exits 0" [ $? -eq 0 ]
check "template --model without a template uses ChatML" cmp -s "$tmp/want" "$tmp/out"
"$bin" template --model "$tmp/user.json" --vars "$tmp/user.json" >/dev/null 2>"$tmp/err"
check "template --model on a non-GGUF file exits 1" [ $? -eq 1 ]
check "template --model on a non-GGUF file prints one line" [ "$(wc -l <"$tmp/err")" -eq 1 ]

# a template that raises: exit 1, one line naming the template's message
"$bin" template --template "$tdir/google-gemma-2-2b-it.jinja" --vars "$tmp/sys.json" >"$tmp/out" 2>"$tmp/err"
check "raising template exits 1" [ $? -eq 1 ]
check "raising template prints one line" [ "$(wc -l <"$tmp/err")" -eq 1 ]
check "raising template names the reason" grep -q "System role not supported" "$tmp/err"
check "raising template prints nothing on stdout" [ ! -s "$tmp/out" ]

# a syntax error names the line
printf 'ok\n{%% if x %%}\n{{ x | nosuch }}\n{%% endif %%}\n' >"$tmp/bad.jinja"
"$bin" template --template "$tmp/bad.jinja" --vars "$tmp/user.json" >"$tmp/out" 2>"$tmp/err"
check "bad template exits 1" [ $? -eq 1 ]
check "bad template names the line" grep -q "template line 3: unknown filter 'nosuch'" "$tmp/err"
check "bad template prints one line" [ "$(wc -l <"$tmp/err")" -eq 1 ]

# bad input files and usage
"$bin" template --template "$tmp/missing.jinja" --vars "$tmp/user.json" >/dev/null 2>"$tmp/err"
check "missing template exits 1" [ $? -eq 1 ]
check "missing template prints one line" [ "$(wc -l <"$tmp/err")" -eq 1 ]
printf '{"messages": [' >"$tmp/broken.json"
"$bin" template --template "$tdir/Qwen-Qwen2.5-7B-Instruct.jinja" --vars "$tmp/broken.json" >/dev/null 2>"$tmp/err"
check "broken vars exits 1" [ $? -eq 1 ]
check "broken vars prints one line" [ "$(wc -l <"$tmp/err")" -eq 1 ]
"$bin" template --vars "$tmp/user.json" >/dev/null 2>"$tmp/err"
check "no template source is a usage error" [ $? -eq 2 ]
"$bin" template --template "$tdir/Qwen-Qwen2.5-7B-Instruct.jinja" --vars "$tmp/user.json" --date yesterday >/dev/null 2>"$tmp/err"
check "bad --date is a usage error" [ $? -eq 2 ]

[ $fail -eq 0 ] && echo "cli template: all checks passed"
exit $fail
