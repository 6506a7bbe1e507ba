#!/usr/bin/env bash
# Paths and signals of `nightshift run` (issue 13): the backlog must be a regular file (a device, a
# directory are refused, saying why; a pipe is spooled like standard input); every path the run writes is checked before any work
# starts (a directory, a missing directory), refused with a message naming the flag and leaving nothing
# behind; an output file is locked like the store (two runs with the same -o and different stores cannot
# both write it); SIGTERM stops a run cleanly with exit status 143 (SIGINT: 130).
. tests/lib.sh
model=$SHARED/models/stories260K.gguf
if [ ! -f "$model" ]; then skip run_paths "no $model"; exit 0; fi
export NIGHTSHIFT_CACHE_DIR=$e2e_tmp/cache
T=$e2e_tmp
base=(-m "$model" --threads 1 --kv-memory 16M -q --max-tokens 4)
printf 'Once upon a time\nThe little dog\nLily and Tom\n' >"$T/s.txt"

# --- -o a directory: refused before work, no store left behind ---
mkdir "$T/d"
expect_err run_output_is_a_directory 2 "-o $T/d: is a directory" $NS run "$T/s.txt" -o "$T/d" "${base[@]}"
[ ! -e "$T/d.nightshift.db" ] && [ -z "$(ls -A "$T/d")" ] && ok run_output_directory_leaves_nothing ||
    fail run_output_directory_leaves_nothing "$(ls "$T")"
expect_err run_output_trailing_slash 2 "is a directory" $NS run "$T/s.txt" -o "$T/new/" "${base[@]}"
# --- the errors file, the store and the record: a directory, or a directory that does not exist ---
expect_err run_errors_is_a_directory 2 "\-\-errors $T/d: is a directory" $NS run "$T/s.txt" -o "$T/e.out" --errors "$T/d" "${base[@]}"
expect_err run_store_is_a_directory 2 "\-\-store $T/d: is a directory" $NS run "$T/s.txt" -o "$T/e.out" --store "$T/d" "${base[@]}"
expect_err run_record_dir_missing 2 "\-\-record $T/nope/r.json: its directory $T/nope" $NS run "$T/s.txt" -o "$T/e.out" --record "$T/nope/r.json" "${base[@]}"
[ ! -e "$T/e.out" ] && [ ! -e "$T/e.out.nightshift.db" ] && ok run_bad_paths_leave_nothing ||
    fail run_bad_paths_leave_nothing "$(ls "$T")"

# --- a backlog that is not a regular file is refused before work, saying what is supported: a device, a
# directory (standard input "-", a named pipe and a process substitution are spooled:
# tests/e2e_run_stream.sh); a missing one names the path ---
expect_err run_backlog_device 2 "backlog /dev/null: is a device" $NS run /dev/null -o "$T/p.out" "${base[@]}"
expect_err run_backlog_directory 2 "backlog $T/d: is a directory" $NS run "$T/d" -o "$T/p.out" "${base[@]}"
expect_err run_backlog_missing 2 "backlog $T/nope.txt: No such file" $NS run "$T/nope.txt" -o "$T/p.out" "${base[@]}"
[ ! -e "$T/p.out" ] && [ ! -e "$T/p.out.nightshift.db" ] && ok run_bad_backlog_leaves_nothing ||
    fail run_bad_backlog_leaves_nothing "$(ls "$T")"

# --- two runs, the same -o, different stores: the second is refused while the first writes ---
NIGHTSHIFT_TEST_STEP_DELAY_US=200000 $NS run "$T/s.txt" -o "$T/two.out" --store "$T/a.db" "${base[@]}" >"$T/a.log" 2>&1 &
pid=$!
for _ in $(seq 200); do [ -e "$T/a.db" ] && break; sleep 0.05; done # the first has its files
sleep 0.2
expect_err run_output_locked 1 "two.out: the file is being written by another nightshift process" \
    $NS run "$T/s.txt" -o "$T/two.out" --store "$T/b.db" "${base[@]}"
wait $pid
rc=$?
ids=$(python3 -c 'import json,sys; print(" ".join(sorted(json.loads(l)["custom_id"] for l in open(sys.argv[1]))))' "$T/two.out")
[ $rc = 0 ] && [ "$ids" = "1 2 3" ] && [ ! -s "$T/two.out.errors.jsonl" ] && ok run_first_writer_intact ||
    fail run_first_writer_intact "rc=$rc ids=$ids $(tail -1 "$T/a.log")"

# --- SIGTERM: a clean stop, exit 143; SIGINT stays 130; the rerun finishes ---
for sig in TERM INT; do
    rm -f "$T/sig.out"*
    NIGHTSHIFT_TEST_STEP_DELAY_US=300000 $NS run "$T/s.txt" -o "$T/sig.out" "${base[@]}" --max-tokens 30 >"$T/sig.log" 2>&1 &
    pid=$!
    for _ in $(seq 200); do [ -e "$T/sig.out.nightshift.db" ] && break; sleep 0.05; done
    sleep 0.5
    kill -$sig $pid
    wait $pid
    rc=$?
    want=$([ $sig = TERM ] && echo 143 || echo 130)
    $NS run "$T/s.txt" -o "$T/sig.out" "${base[@]}" --max-tokens 30 >/dev/null 2>&1
    n=$(wc -l <"$T/sig.out")
    [ $rc = $want ] && [ "$n" = 3 ] && [ "$($NS run --check-store "$T/sig.out.nightshift.db")" = ok ] &&
        ok run_sig${sig,,}_exit_$want || fail run_sig${sig,,}_exit_$want "rc=$rc lines=$n $(tail -1 "$T/sig.log")"
done

exit $E2E_FAILED
