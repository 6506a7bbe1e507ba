#!/usr/bin/env bash
# e2e_demo — `make demo`'s own script (scripts/demo) runs to the end offline on the bundled stories260K
# (NIGHTSHIFT_DEMO_OFFLINE=1: the path it takes when the instruct model cannot be fetched) with exit status
# 0: it shows the three sample results, one line per failed request in OpenAI's error shape (by custom_id)
# and per unreadable line (by line number), the rerun that finds everything done, and its closing line.
# (It broke once when the error lines changed shape: this test plays the script itself.)
. tests/lib.sh
model=$SHARED/models/stories260K.gguf
if [ ! -f "$model" ]; then skip demo "no $model"; exit 0; fi
export NIGHTSHIFT_CACHE_DIR=$e2e_tmp/cache
T=$e2e_tmp
abs() { (cd "$(dirname "$1")" && echo "$(pwd)/$(basename "$1")"); }
NIGHTSHIFT_BIN=$(abs "$NS") NIGHTSHIFT_SHARED=$(cd "$SHARED" && pwd) NIGHTSHIFT_DEMO_OUT=$T/out NIGHTSHIFT_DEMO_OFFLINE=1 \
    timeout 300 bash scripts/demo >"$T/demo.out" 2>"$T/demo.err"
rc=$?
[ $rc = 0 ] && ok demo_exits_0 || fail demo_exits_0 "rc=$rc $(tail -5 "$T/demo.err")"
grep -q "^== three sample results" "$T/demo.out" && [ "$(grep -c "^$T/out/[a-z]*.jsonl  " "$T/demo.out")" = 3 ] &&
    ok demo_shows_three_results || fail demo_shows_three_results "$(sed -n '/three sample/,$p' "$T/demo.out" | head -8)"
grep -q "errors.jsonl [^ ]*: 400 [a-z_]*: " "$T/demo.out" && grep -q "errors.jsonl line [0-9]*: [a-z_]*: " "$T/demo.out" &&
    ok demo_shows_error_lines || fail demo_shows_error_lines "$(grep errors.jsonl "$T/demo.out" | head -5)"
grep -q "already done" "$T/demo.out" && sed -n '/everything is already done/{n;p}' "$T/demo.out" | grep -q "0 computed now, [0-9]* already done" &&
    ok demo_rerun_skips_done || fail demo_rerun_skips_done "$(sed -n '/everything is already done/,$p' "$T/demo.out")"
tail -1 "$T/demo.out" | grep -q "^demo: cleared [0-9]* example lines in [0-9]* s" && ok demo_ends_with_summary ||
    fail demo_ends_with_summary "$(tail -2 "$T/demo.out")"
[ ! -e out/stories.jsonl.nightshift.db ] || [ out/stories.jsonl.nightshift.db -ot "$T/demo.out" ] &&
    ok demo_writes_only_its_out_folder || fail demo_writes_only_its_out_folder "out/ was written"
exit $E2E_FAILED
