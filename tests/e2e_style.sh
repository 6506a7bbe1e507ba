#!/usr/bin/env bash
# The house numbers (STYLE.md): scripts/style-check passes on the tree, and fails, naming each, on a line over
# 120 columns, a function over 120 lines and a file over 1,000 lines; a kernel it names is accepted; a kernel
# entry without a reason, or one that names no long function, is refused. The cases run in a temporary tree
# (--root) with their own kernel list (--kernels).
. tests/lib.sh
check=scripts/style-check

# --- the tree itself ---
if out=$($check 2>&1); then
    ok style_tree
else
    fail style_tree "$(printf '%s\n' "$out" | tail -25)"
fi

T=$e2e_tmp/tree
mkdir -p "$T/src/lib" "$T/tests" "$T/bench" "$T/fuzz"
: >"$T/kernels"
# line N columns wide: "//" and N - 2 x's
wide() { printf '//%*s\n' "$(($1 - 2))" '' | tr ' ' x; }
# a function NAME of N lines in all (signature, braces, N - 3 statements)
func() {
    printf 'int %s(void)\n{\n' "$1"
    for ((i = 0; i < $2 - 3; i++)); do printf '    (void)0;\n'; done
    printf '}\n'
}
# run the checker on the temporary tree; its output in $T.out, its status in $rc
run_check() { $check --root "$T" --kernels "$T/kernels" "$@" >"$T.out" 2>&1; rc=$?; }
clean() { rm -f "$T"/src/lib/* "$T"/tests/* "$T"/bench/* "$T"/fuzz/*; : >"$T/kernels"; }

# --- within the limits: 120 columns, a 120-line function, a 1,000-line file ---
{ wide 120; func at_limit 120; for ((i = 0; i < 1000 - 121; i++)); do echo; done; } >"$T/src/lib/ok.c"
run_check
[ "$rc" = 0 ] && grep -q '^style-check: 0 violations in 1 files' "$T.out" && ok style_limits_pass ||
    fail style_limits_pass "rc=$rc $(cat "$T.out")"
[ "$(wc -l <"$T/src/lib/ok.c")" = 1000 ] || fail style_limits_pass "the fixture has $(wc -l <"$T/src/lib/ok.c") lines"

# --- a line of 121 columns (in a .c, a .h under tests/, a .cuh under fuzz/, a bench .c) ---
clean
{ echo 'int x;'; wide 121; } >"$T/src/lib/a.c"
wide 125 >"$T/tests/b.h"
wide 130 >"$T/fuzz/c.cuh"
wide 121 >"$T/bench/d.c"
run_check
[ "$rc" = 1 ] && grep -q '^src/lib/a.c:2: line is 121 columns (limit 120)$' "$T.out" &&
    grep -q '^tests/b.h:1: line is 125 columns' "$T.out" && grep -q '^fuzz/c.cuh:1: line is 130 columns' "$T.out" &&
    grep -q '^bench/d.c:1: line is 121 columns' "$T.out" && grep -q '^style-check: 4 violations in 4 files' "$T.out" &&
    ok style_fails_on_wide_line || fail style_fails_on_wide_line "rc=$rc $(cat "$T.out")"

# --- a function of 121 lines (and one of 121 under a macro-made name, as TEST(name) makes) ---
clean
{ echo '#include <stdio.h>'; echo; func too_long 121; } >"$T/src/lib/f.c"
{ echo '#define TEST(name) static void name(void)'; func x 121 | sed '1s/.*/TEST(long_test)/'; } >"$T/tests/t.c"
run_check
[ "$rc" = 1 ] && grep -q '^src/lib/f.c:3: function too_long is 121 lines (limit 120' "$T.out" &&
    grep -q '^tests/t.c:2: function long_test is 121 lines' "$T.out" &&
    grep -q '^style-check: 2 violations' "$T.out" && ok style_fails_on_long_function ||
    fail style_fails_on_long_function "rc=$rc $(cat "$T.out")"

# --- a file of 1,001 lines ---
clean
for ((i = 0; i < 1001; i++)); do echo "int v$i;"; done >"$T/src/lib/big.c"
run_check
[ "$rc" = 1 ] && grep -q '^src/lib/big.c:1001: file is 1001 lines (limit 1000)$' "$T.out" &&
    grep -q '^style-check: 1 violation in 1 files' "$T.out" && ok style_fails_on_long_file ||
    fail style_fails_on_long_file "rc=$rc $(cat "$T.out")"

# --- a kernel on the list is accepted; the others in its file are not ---
clean
{ func kern 150; func other 122; } >"$T/src/lib/k.c"
echo "src/lib/k.c kern  a test kernel: its accumulators stay in registers" >"$T/kernels"
run_check
[ "$rc" = 1 ] && ! grep -q 'function kern ' "$T.out" && grep -q '^src/lib/k.c:151: function other is 122' "$T.out" &&
    ok style_kernel_accepted || fail style_kernel_accepted "rc=$rc $(cat "$T.out")"
func kern 150 >"$T/src/lib/k.c"
run_check
[ "$rc" = 0 ] && ok style_kernel_alone_passes || fail style_kernel_alone_passes "rc=$rc $(cat "$T.out")"

# --- kernel entries: one without a reason, one that names no long function ---
printf 'src/lib/k.c kern  why\nsrc/lib/k.c gone  shrank long ago\nsrc/lib/k.c kern2\n' >"$T/kernels"
run_check
[ "$rc" = 1 ] && grep -q 'kernels:3: kernel entry without a reason' "$T.out" &&
    grep -q 'kernels:2: kernel src/lib/k.c gone names no function over 120 lines' "$T.out" &&
    ok style_kernel_list_checked || fail style_kernel_list_checked "rc=$rc $(cat "$T.out")"

# --- named files are checked alone; comments and strings do not open functions ---
clean
cat >"$T/src/lib/s.c" <<'EOF'
/* a { in a comment */
static const char *s = "{ not a brace";
static const char c = '{';
struct p { int x; };
static const int t[] = {1, 2};
EOF
func long_one 130 >>"$T/src/lib/s.c"
run_check src/lib/s.c
[ "$rc" = 1 ] && grep -q '^src/lib/s.c:6: function long_one is 130 lines' "$T.out" &&
    grep -q '^style-check: 1 violation in 1 files' "$T.out" && ok style_scanner_skips_comments_and_strings ||
    fail style_scanner_skips_comments_and_strings "rc=$rc $(cat "$T.out")"

exit $E2E_FAILED
