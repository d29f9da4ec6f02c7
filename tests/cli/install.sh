#!/bin/sh
# make install's work (cmake --install with DESTDIR and a prefix) puts a
# working power and its man page where PATH and man look; power help CMD
# is CMD --help.
power=$1
. "$(dirname "$0")/../cli-lib.sh"
build=$(dirname "$power")
check "install into a staging root" sh -c "DESTDIR='$tmp/root' cmake --install '$build' --prefix /opt/pw >'$tmp/log' 2>&1"
check "the installed binary runs" sh -c "'$tmp/root/opt/pw/bin/power' --version | grep -q '^power '"
check "the man page is installed" test -s "$tmp/root/opt/pw/share/man/man1/power.1"
check "the man page names every command" sh -c "for c in run chat serve bench ab inspect tokenize template; do grep -q \"^.B \$c\\|\$c\" '$tmp/root/opt/pw/share/man/man1/power.1' || exit 1; done"
check "power help serve is serve --help" sh -c "'$power' help serve > '$tmp/a'; '$power' serve --help > '$tmp/b'; cmp -s '$tmp/a' '$tmp/b' && grep -q -- '--port' '$tmp/a'"
check "power help with an unknown command fails" sh -c "! '$power' help nosuch 2>/dev/null"
check "power help lists the commands" sh -c "'$power' help | grep -q 'serve'"
exit $fail
