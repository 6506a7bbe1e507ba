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
# expect_err [-i] NAME RC PATTERN CMD...: passes when CMD exits with status RC (a number, or nz: any non-zero)
# and its stderr matches PATTERN (grep; -i ignores case). CMD reads the caller's stdin; its stdout is not looked at.
expect_err() {
    local icase=
    if [ "$1" = -i ]; then icase=-i; shift; fi
    local n=$1 want=$2 pat=$3
    shift 3
    "$@" >"$e2e_tmp/expect_err.out" 2>"$e2e_tmp/expect_err.err"
    local rc=$?
    if { [ "$want" = nz ] && [ $rc -ne 0 ]; } || [ "$rc" = "$want" ]; then
        if grep -q $icase -- "$pat" "$e2e_tmp/expect_err.err"; then ok "$n"; return; fi
    fi
    fail "$n" "rc=$rc (want $want) stderr: $(head -c 300 "$e2e_tmp/expect_err.err")"
}
e2e_tmp=$(mktemp -d)
trap 'rm -rf "$e2e_tmp"' EXIT
