#!/bin/sh
# Checks that no source file includes a header of a higher layer.
# Order (low to high): base < tensor < gguf < tok, chat, sample, model < engine, evidence < server < cli
# (layers of one rank above base never include each other)
src=${1:-src}
rank() {
  case "$1" in
    base) echo 0 ;; tensor) echo 1 ;; gguf) echo 2 ;;
    tok|chat|sample|model) echo 3 ;; engine|evidence) echo 4 ;; server) echo 5 ;; cli) echo 6 ;;
    *) echo 99 ;;
  esac
}
bad=0
for f in $(find "$src" -name '*.[ch]'); do
  layer=$(echo "${f#$src/}" | cut -d/ -f1)
  lr=$(rank "$layer")
  for inc in $(sed -n 's/^#include "\([a-z]*\)\/.*/\1/p' "$f"); do
    ir=$(rank "$inc")
    [ "$ir" = 99 ] && continue
    if [ "$ir" -gt "$lr" ] || { [ "$ir" = "$lr" ] && [ "$inc" != "$layer" ] && { [ "$lr" = 3 ] || [ "$lr" = 4 ]; }; }; then
      echo "layer violation: $f includes $inc/"
      bad=1
    fi
  done
done
exit $bad
