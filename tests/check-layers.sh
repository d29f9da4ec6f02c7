#!/bin/sh
# Checks src/ against layers.map: every include (quoted ones resolved as the
# compiler does: next to the including file first, then src/ and include/)
# and every call of another layer's functions must be allowed by the map.
# Usage: check-layers.sh [ROOT]   (ROOT holds layers.map, src/ and include/)
# Exit 0 when the tree keeps the map, 1 with one line per violation, 2 when
# the map itself is malformed.
root=${1:-.}
[ -f "$root/layers.map" ] || { echo "check-layers: no $root/layers.map" >&2; exit 2; }
files=$(cd "$root" && find src -name '*.[ch]' | sort)
[ -n "$files" ] || { echo "check-layers: no sources under $root/src" >&2; exit 2; }
cd "$root" && exec awk '
function fail_map(msg) { print "layers.map:" FNR ": " msg > "/dev/stderr"; bad_map = 1 }
function exists(p,   l, r) { r = (getline l < p); close(p); return r >= 0 }
# Normalises a path: drops "." and resolves ".." components.
function norm(p,   n, a, i, out, k, o) {
  n = split(p, a, "/"); k = 0
  for (i = 1; i <= n; i++) {
    if (a[i] == "" || a[i] == ".") continue
    if (a[i] == "..") { if (k > 0) k--; else return ""; continue }
    o[++k] = a[i]
  }
  out = ""
  for (i = 1; i <= k; i++) out = out (i > 1 ? "/" : "") o[i]
  return out
}
function layer_of(p,   a) { if (p !~ /^src\//) return ""; split(p, a, "/"); return a[2] }
function may_use(l, t) { return l == t || ((l SUBSEP t) in dep) }
function report(msg) { print FILENAME ":" FNR ": " msg; bad = 1 }
FNR == 1 { nfile++ }
nfile == 1 {
  sub(/#.*/, "")
  if (NF == 0) next
  if ($1 == "layer") { known[$2] = 1; for (i = 3; i <= NF; i++) { if (!($i in known)) fail_map("layer " $2 " uses " $i ", which is not defined above it"); dep[$2, $i] = 1 } }
  else if ($1 == "only") { if (NF < 4) fail_map("only needs a layer, a layer and headers"); for (i = 4; i <= NF; i++) { only[$2, $3] = 1; onlyh[$2, $3, $i] = 1 } }
  else if ($1 == "forbid") { for (i = 3; i <= NF; i++) forbid[$2, $i] = 1 }
  else if ($1 == "prefix") { for (i = 3; i <= NF; i++) { npfx++; pfx[npfx] = $i; pfxl[npfx] = $2 } }
  else fail_map("unknown directive " $1)
  next
}
FNR == 1 {
  if (bad_map) exit 2
  L = layer_of(FILENAME); dir = FILENAME; sub(/\/[^\/]*$/, "", dir); incomment = 0
  if (!(L in known)) report("layer " L "/ is not in layers.map")
}
/^[ \t]*#[ \t]*include[ \t]*"/ {
  h = $0; sub(/^[^"]*"/, "", h); sub(/".*/, "", h)
  r = norm(dir "/" h)
  if (r == "" || !exists(r)) { r = norm("src/" h); if (r == "" || !exists(r)) r = norm("include/" h) }
  if (r == "" || !exists(r)) { report("includes \"" h "\", which is not in the tree"); next }
  t = layer_of(r)
  if (t == "") next  # include/power.h
  if (!may_use(L, t)) report(L "/ may not include " r " (" t "/)")
  else if (t != L && ((L SUBSEP t) in only) && !((L SUBSEP t SUBSEP substr(r, 5)) in onlyh))
    report(L "/ may include only the listed headers of " t "/, not " r)
  next
}
/^[ \t]*#[ \t]*include[ \t]*</ {
  h = $0; sub(/^[^<]*/, "", h); sub(/>.*/, ">", h)
  if ((L SUBSEP h) in forbid) report(L "/ may not include " h)
  next
}
{
  s = $0
  # Drop comments and string and character literals before looking for calls.
  if (incomment) { if (s ~ /\*\//) { sub(/^.*\*\//, "", s); incomment = 0 } else next }
  gsub(/\/\*([^*]|\*+[^*\/])*\*+\//, "", s)
  if (s ~ /\/\*/) { sub(/\/\*.*/, "", s); incomment = 1 }
  sub(/\/\/.*/, "", s)
  gsub(/"([^"\\]|\\.)*"/, "\"\"", s); gsub(/\047([^\047\\]|\\.)*\047/, "0", s)
  for (i = 1; i <= npfx; i++) {
    if (index(s, pfx[i]) == 0 || may_use(L, pfxl[i])) continue
    rest = s
    while (match(rest, "(^|[^A-Za-z0-9_])" pfx[i] "[A-Za-z0-9_]*[ \t]*\\(")) {
      name = substr(rest, RSTART, RLENGTH); sub(/^[^A-Za-z_]/, "", name); sub(/[ \t]*\($/, "", name)
      report(L "/ uses " name "() of " pfxl[i] "/")
      rest = substr(rest, RSTART + RLENGTH)
    }
  }
}
END { if (bad_map) exit 2; exit bad }
' layers.map $files
