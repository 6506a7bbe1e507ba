#!/usr/bin/env bash
# Crash test for `nightshift run` (issue 5): a backlog of 500 requests is run once without interruption
# (the reference), then again from scratch while being killed with SIGKILL at >= 5 random moments, each
# time restarted with the same command. At the end: every backlog line is in exactly one of the two files,
# every result equals the uninterrupted run's (text, finish_reason, usage; errors by code, message, line),
# and PRAGMA integrity_check says ok (through the binary and through python's sqlite3).
. tests/lib.sh
model=$SHARED/models/stories260K.gguf
check="python3 tests/run_check.py"
if [ ! -f "$model" ]; then skip run_crash "no $model"; exit 0; fi
export NIGHTSHIFT_CACHE_DIR=$e2e_tmp/cache
backlog=$e2e_tmp/backlog.jsonl
$check backlog "$backlog" 500 7 || { fail run_crash_backlog "cannot write the backlog"; exit 1; }

# Small concurrency and frequent commits make an uninterrupted run last long enough to be hit mid-run.
flags=(-m "$model" --max-seqs 8 --threads 1 --kv-memory 16M --commit-interval 0.02 -q)

mkdir -p "$e2e_tmp/clean" "$e2e_tmp/crash"
t0=$(date +%s.%N)
if ! $NS run "$backlog" -o "$e2e_tmp/clean/out.jsonl" "${flags[@]}" 2>"$e2e_tmp/clean.log"; then
    fail run_crash_clean "the uninterrupted run failed: $(tail -3 "$e2e_tmp/clean.log")"
    exit 1
fi
t1=$(date +%s.%N)
expect run_crash_clean_files $check files "$backlog" "$e2e_tmp/clean/out.jsonl" "$e2e_tmp/clean/out.jsonl.errors.jsonl"

out=$e2e_tmp/crash/out.jsonl
kills=0 attempts=0 finished=0
# Random kills need a run that lasts: every engine step sleeps 2 ms (the results do not change), so an
# uninterrupted run takes a few seconds however fast the machine is.
export NIGHTSHIFT_TEST_STEP_DELAY_US=2000
lines() { [ -f "$1" ] && wc -l <"$1" || echo 0; }
while [ $attempts -lt 40 ]; do
    attempts=$((attempts + 1))
    before=$(( $(lines "$out") + $(lines "$out.errors.jsonl") ))
    $NS run "$backlog" -o "$out" "${flags[@]}" 2>>"$e2e_tmp/crash.log" &
    pid=$!
    # wait until this attempt has made progress (or has finished), then a random extra moment
    for _ in $(seq 1 200); do
        now=$(( $(lines "$out") + $(lines "$out.errors.jsonl") ))
        [ "$now" -gt "$before" ] && break
        kill -0 $pid 2>/dev/null || break
        sleep 0.01
    done
    sleep "0.$((RANDOM % 3))$((RANDOM % 10))"
    if kill -9 $pid 2>/dev/null; then
        wait $pid 2>/dev/null
        kills=$((kills + 1))
        [ $kills -ge 5 ] && break
        continue
    fi
    if wait $pid; then finished=1; break; fi
done
rkills=$kills
export NIGHTSHIFT_TEST_STEP_DELAY_US=500
# The riskiest moments, deterministically (random kills rarely land there): right after a commit before
# its lines are written, with half a batch written, and after the write. Then the run is finished.
if [ $finished = 0 ]; then
    for point in after_commit:2 mid_write:1 mid_write:3 after_write:2 after_commit:1; do
        # in a subshell, so that its "Killed" notice goes to the log
        (NIGHTSHIFT_TEST_CRASH=$point $NS run "$backlog" -o "$out" "${flags[@]}"; exit $?) 2>>"$e2e_tmp/crash.log"
        rc=$?
        if [ $rc = 137 ]; then kills=$((kills + 1)); elif [ $rc = 0 ]; then finished=1; break; else
            fail run_crash_point "$point: exit $rc: $(tail -2 "$e2e_tmp/crash.log")"; fi
    done
    while [ $finished = 0 ] && [ $attempts -lt 60 ]; do
        attempts=$((attempts + 1))
        if $NS run "$backlog" -o "$out" "${flags[@]}" 2>>"$e2e_tmp/crash.log"; then finished=1; fi
    done
fi
unset NIGHTSHIFT_TEST_STEP_DELAY_US
t2=$(date +%s.%N)
if [ $rkills -ge 5 ] && [ $finished = 1 ]; then ok run_crash_killed_5_times; else
    fail run_crash_killed_5_times "kills=$kills finished=$finished after $attempts attempts: $(tail -3 "$e2e_tmp/crash.log")"; fi
expect run_crash_every_line_once $check files "$backlog" "$out" "$out.errors.jsonl"
expect run_crash_same_results $check same "$e2e_tmp/clean/out.jsonl" "$e2e_tmp/clean/out.jsonl.errors.jsonl" \
    "$out" "$out.errors.jsonl"
if [ "$($NS run --check-store "$out.nightshift.db")" = ok ]; then ok run_crash_check_store; else
    fail run_crash_check_store "$($NS run --check-store "$out.nightshift.db")"; fi
expect run_crash_integrity_python $check integrity "$out.nightshift.db"
# one more run does nothing and leaves the files as they are
cp "$out" "$e2e_tmp/before"
$NS run "$backlog" -o "$out" "${flags[@]}" 2>>"$e2e_tmp/crash.log"
if cmp -s "$out" "$e2e_tmp/before"; then ok run_crash_rerun_idempotent; else fail run_crash_rerun_idempotent "files changed"; fi
# --order input survives the same kill points: results stay in backlog order, nothing lost or doubled.
head -150 "$backlog" >"$e2e_tmp/small.jsonl"
iflags=("${flags[@]}" --order input)
$NS run "$e2e_tmp/small.jsonl" -o "$e2e_tmp/clean/in.jsonl" "${iflags[@]}" 2>>"$e2e_tmp/clean.log"
ik=0
for point in mid_write:2 after_commit:3 after_write:1 mid_write:4; do
    (NIGHTSHIFT_TEST_STEP_DELAY_US=1000 NIGHTSHIFT_TEST_CRASH=$point $NS run "$e2e_tmp/small.jsonl" -o "$e2e_tmp/crash/in.jsonl" "${iflags[@]}"; exit $?) \
        2>>"$e2e_tmp/crash.log"
    [ $? = 137 ] && ik=$((ik + 1))
done
$NS run "$e2e_tmp/small.jsonl" -o "$e2e_tmp/crash/in.jsonl" "${iflags[@]}" 2>>"$e2e_tmp/crash.log" ||
    fail run_crash_input_order "the final run failed"
order_ok=$(python3 -c '
import json, sys
ids = [json.loads(l)["custom_id"] for l in open(sys.argv[1])]
print(int(ids == sorted(ids) and len(ids) > 100))' "$e2e_tmp/crash/in.jsonl")
if [ $ik -ge 3 ] && [ "$order_ok" = 1 ] &&
    $check files "$e2e_tmp/small.jsonl" "$e2e_tmp/crash/in.jsonl" "$e2e_tmp/crash/in.jsonl.errors.jsonl" &&
    $check same "$e2e_tmp/clean/in.jsonl" "$e2e_tmp/clean/in.jsonl.errors.jsonl" "$e2e_tmp/crash/in.jsonl" \
        "$e2e_tmp/crash/in.jsonl.errors.jsonl"; then ok run_crash_input_order; else
    fail run_crash_input_order "kills=$ik in-order=$order_ok"; fi
echo "# crash test: clean run $(awk "BEGIN{print $t1 - $t0}") s; $rkills random + $((kills - rkills)) deterministic kills, crash phase $(awk "BEGIN{print $t2 - $t1}") s"
exit $E2E_FAILED
