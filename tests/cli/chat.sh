#!/bin/sh
# power chat with piped input: the commands (/help, /system, /save, /reset,
# unknown ones), dropping the oldest turns when the conversation outgrows
# the context (the system prompt stays), and the notes on replies cut by the
# -n limit or by the context. The terminal side (line editing, history,
# Ctrl-R) is test_chat_pty's.
# usage: chat.sh POWER_BIN SHARED_DIR
set -u
bin=$1
shared=$2
. "$(dirname "$0")/../cli-lib.sh"
model=$shared/models/syn-llama-Q4_0.gguf
[ -f "$model" ] || { echo "FAIL: missing test asset $model"; exit 1; }
chat() { "$bin" chat --model "$model" --temp 0 --seed 1 --threads 1 "$@"; }
roles() { # roles FILE: the saved roles, space-separated
  sed -n 's/.*"role": "\([a-z]*\)".*/\1/p' "$1" | tr '\n' ' '
}

# commands
printf 'hello\n/help\n/system Be brief.\nsecond\n/save %s\n/bogus\n/reset\n/save %s\n/system\n/save %s\n/exit\nnever sent\n' \
  "$tmp/a.json" "$tmp/b.json" "$tmp/c.json" | chat -n 4 >"$tmp/out" 2>"$tmp/err"
check "chat exits 0" [ $? -eq 0 ]
check "/help lists the commands" grep -q "/save FILE" "$tmp/err"
check "/system is acknowledged" grep -q "(system prompt set)" "$tmp/err"
check "/save reports the count" grep -q "(saved 5 messages to $tmp/a.json)" "$tmp/err"
check "/save keeps the order, system first" [ "$(roles "$tmp/a.json")" = "system user assistant user assistant " ]
check "/save writes the system text" grep -q '"content": "Be brief."' "$tmp/a.json"
check "/save writes the user text" grep -q '"content": "second"' "$tmp/a.json"
check "unknown commands are named" grep -q "unknown command '/bogus'" "$tmp/err"
check "/reset keeps the system prompt" [ "$(roles "$tmp/b.json")" = "system " ]
check "/system alone removes it" grep -q "\"messages\": \[\]" "$tmp/c.json"
check "/exit stops reading" [ "$(grep -c "reply cut" "$tmp/err")" -eq 2 ]
check "a reply cut by -n says so" grep -q "(reply cut at the -n limit of 4 tokens)" "$tmp/err"

# /save to a place that cannot be written: a note, the chat goes on
printf '/save %s/none/x.json\n/save %s\n' "$tmp" "$tmp/d.json" | chat -n 2 >/dev/null 2>"$tmp/err"
check "/save failure is reported" grep -q "(cannot write $tmp/none/x.json" "$tmp/err"
check "the chat goes on after it" [ -s "$tmp/d.json" ]

# a conversation longer than the context: the oldest turns go, the system
# prompt stays, every turn is answered
printf 'one two three\nfour five six\nseven eight nine\nten eleven twelve\n/save %s\n' "$tmp/e.json" |
  chat --ctx 128 -n 8 --system "Sys." >"$tmp/out" 2>"$tmp/err"
check "long chat exits 0" [ $? -eq 0 ]
check "dropping turns is announced" grep -q "(the conversation outgrew the context of 128 tokens: dropped the oldest 2 messages)" "$tmp/err"
check "every turn is answered" [ "$(grep -c "reply cut at the -n limit" "$tmp/err")" -eq 4 ]
check "the system prompt and the newest turns stay" [ "$(roles "$tmp/e.json")" = "system user assistant user assistant " ]
check "the newest message is kept" grep -q '"content": "ten eleven twelve"' "$tmp/e.json"
check "the oldest message is gone" [ "$(grep -c '"content": "one two three"' "$tmp/e.json")" -eq 0 ]

# a reply cut by the context says so, and the next turn still works
printf 'one two three\nfour\n' | chat --ctx 64 >"$tmp/out" 2>"$tmp/err"
check "a reply cut by the context says so" grep -q "(reply cut: the context of 64 tokens is full" "$tmp/err"
check "the turn after it is answered" [ "$(grep -c "reply cut: the context" "$tmp/err")" -eq 2 ]
check "no turn was refused" [ "$(grep -c "power chat:" "$tmp/err")" -eq 0 ]

# a single message larger than the context: refused with the sizes
long_msg=$(awk 'BEGIN { for (i = 0; i < 100; i++) printf "word "; }')
printf '%s\nshort\n' "$long_msg" | chat --ctx 64 -n 2 >"$tmp/out" 2>"$tmp/err"
check "an oversized message is refused with its size" grep -q "(this message is [0-9]* tokens with the template; the context holds 64" "$tmp/err"
check "the next message is answered" grep -q "(reply cut at the -n limit of 2 tokens)" "$tmp/err"

if [ $fail -eq 0 ]; then echo "cli chat: all checks passed"; fi
exit $fail
