# Sourced by tests/e2e_*.sh: `. tests/lib.sh`. End each script with `exit $E2E_FAILED`.
# ok/fail print the lines tests/run counts; NS is the binary under test; SHARED the shared folder.
NS=${NIGHTSHIFT_BIN:-build/nightshift}
SHARED=${NIGHTSHIFT_SHARED:-../shared}
E2E_FAILED=0
ok() { echo "ok $1"; }
fail() { echo "FAIL $1: $2"; E2E_FAILED=1; }
skip() { echo "skip $1: $2"; }
# expect NAME CMD...: passes when CMD exits 0
expect() { local n=$1; shift; if "$@"; then ok "$n"; else fail "$n" "command failed: $*"; fi; }
e2e_tmp=$(mktemp -d)
trap 'rm -rf "$e2e_tmp"' EXIT
