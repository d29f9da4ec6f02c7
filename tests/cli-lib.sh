# cli-lib.sh - sourced by tests/cli/*.sh: a scratch folder removed on exit,
# and check DESC COND... which records a failure without stopping the run.
fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
check() {
  desc=$1
  shift
  if "$@"; then :; else
    echo "FAIL: $desc"
    fail=1
  fi
}
