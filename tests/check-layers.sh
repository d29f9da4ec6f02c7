#!/bin/sh
# Checks that no source file includes a header of a higher layer.
# Order (low to high): base < tensor < gguf < tok, chat, grammar, sample, model < engine < server < cli
src=${1:-src}
rank() {
  case "$1" in
    base) echo 0 ;; tensor) echo 1 ;; gguf) echo 2 ;;
    tok|chat|grammar|sample|model) echo 3 ;; engine) echo 4 ;; server) echo 5 ;; cli) echo 6 ;;
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
    if [ "$ir" -gt "$lr" ] || { [ "$ir" = "$lr" ] && [ "$inc" != "$layer" ] && [ "$lr" = 3 ]; }; then
      echo "layer violation: $f includes $inc/"
      bad=1
    fi
  done
done
exit $bad
