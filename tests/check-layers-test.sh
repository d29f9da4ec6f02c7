#!/bin/sh
# Proves that tests/check-layers.sh fails on trees that break the map: each
# case copies the real layers.map, adds one offending file to a minimal
# tree and expects exit 1 naming it; the untouched tree must pass.
set -u
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
check="$here/check-layers.sh"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0

mktree() { # a small tree that keeps the map
  rm -rf "$tmp/t" && mkdir -p "$tmp/t/src/base" "$tmp/t/src/tensor" "$tmp/t/src/engine" "$tmp/t/src/server" "$tmp/t/include"
  cp "$repo/layers.map" "$tmp/t/"
  printf '#include "power.h"\nint pw_base_x(void);\n' > "$tmp/t/src/base/x.h"
  printf 'void pw_matmul(void);\n' > "$tmp/t/src/tensor/ops.h"
  printf '#include "base/x.h"\n#include "tensor/ops.h"\nint engine_go(void);\n' > "$tmp/t/src/engine/engine.h"
  printf '#include "engine/engine.h"\n#include <jansson.h>\nstatic int f(void) { return engine_go(); }\n' > "$tmp/t/src/server/server.c"
  printf '/* power.h */\n' > "$tmp/t/include/power.h"
}

expect() { # expect WANT_RC PATTERN DESCRIPTION
  out=$(sh "$check" "$tmp/t" 2>&1); rc=$?
  if [ "$rc" != "$1" ] || ! printf '%s\n' "$out" | grep -q -- "$2"; then
    echo "FAIL: $3: rc=$rc (want $1), output: $out"
    fails=$((fails + 1))
  else
    echo "ok: $3"
  fi
}

mktree
expect 0 "" "a tree that keeps the map passes"

mktree
printf '#include "../server/server.h"\n' > "$tmp/t/src/engine/bad.c"
printf 'int server_x(void);\n' > "$tmp/t/src/server/server.h"
expect 1 "engine/ may not include src/server/server.h" "a relative include of a higher layer fails"

mktree
printf '#include "engine.h"\n#include "../engine/./../server/server.h"\n' > "$tmp/t/src/engine/bad2.c"
printf 'int server_x(void);\n' > "$tmp/t/src/server/server.h"
expect 1 "engine/ may not include src/server/server.h" "a roundabout relative include is resolved and fails"

mktree
printf '#include "nothere.h"\n' > "$tmp/t/src/engine/bad3.c"
expect 1 "which is not in the tree" "an include that resolves nowhere fails"

mktree
printf '#include "tensor/ops.h"\n' > "$tmp/t/src/server/bad.c"
expect 1 "server/ may not include src/tensor/ops.h" "the server including a kernel header fails"

mktree
printf '#include "engine/engine_int.h"\n' > "$tmp/t/src/server/bad.c"
printf '#include "engine/engine.h"\n' > "$tmp/t/src/engine/engine_int.h"
expect 1 "may include only the listed headers of engine/" "the server including an engine header other than engine.h fails"

mktree
printf '#include <jansson.h>\n' > "$tmp/t/src/engine/bad.c"
expect 1 "engine/ may not include <jansson.h>" "JSON in the engine fails"

mktree
printf 'int oai_parse(const char *s);\nint g(void) { return oai_parse(""); }\n' > "$tmp/t/src/engine/bad.c"
expect 1 "engine/ uses oai_parse() of server/" "a hand-written prototype of a higher layer fails"

mktree
printf '/* oai_parse(x) in a comment */\nconst char *s = "oai_parse(";\n' > "$tmp/t/src/engine/ok.c"
expect 0 "" "names in comments and strings are not calls"

mktree
mkdir -p "$tmp/t/src/nowhere" && printf 'int x;\n' > "$tmp/t/src/nowhere/x.c"
expect 1 "layer nowhere/ is not in layers.map" "a directory outside the map fails"

mktree
echo "layer bogus undefined_layer" >> "$tmp/t/layers.map"
expect 2 "not defined above it" "a malformed map is an error"

echo "real tree:"
sh "$check" "$repo" || fails=$((fails + 1))
[ "$fails" = 0 ] && echo "all layer-check cases passed"
exit "$fails"
