#!/usr/bin/env bash
# Streams and Ctrl-C in `nightshift run` (issue 12, item 5): "-" reads the backlog from standard input and
# -o - writes the results to standard output (the files then in the current directory, named after the
# backlog: stdin.*); a rerun with the same input resumes (computes nothing) and writes every result to
# standard output again; other input replaces the spool with a warning and the files hold only its results;
# gzip and zstd backlogs (files or standard input) give the same results as the plain file, a truncated one
# is refused naming the problem; a process substitution (<(zcat x.gz)) and a named pipe are spooled like
# standard input (the same results; a rerun through a pipe resumes); Ctrl-C lets the running sequences finish and commits them (exit 130), a
# second Ctrl-C stops at once; the rerun finishes the backlog.
. tests/lib.sh
model=$SHARED/models/stories260K.gguf
if [ ! -f "$model" ]; then skip run_stream "no $model"; exit 0; fi
if ! command -v gzip >/dev/null || ! command -v zstd >/dev/null; then skip run_stream "no gzip / zstd"; exit 0; fi
export NIGHTSHIFT_CACHE_DIR=$e2e_tmp/cache
T=$e2e_tmp
NS=$(cd "$(dirname "$NS")" && pwd)/$(basename "$NS")
model=$(cd "$(dirname "$model")" && pwd)/$(basename "$model")
loud=(-m "$model" --threads 1 --kv-memory 16M --max-tokens 4)
base=("${loud[@]}" -q)
printf 'Once upon a time\nThe little dog\nLily and Tom\n' >"$T/s.txt"
ids() { python3 -c 'import json,sys; print(" ".join(sorted(json.loads(l)["custom_id"] for l in open(sys.argv[1]))))' "$1"; }
texts() { python3 -c 'import json,sys
for l in sorted(open(sys.argv[1]), key=lambda l: json.loads(l)["custom_id"]):
    print(json.loads(l)["response"]["body"]["choices"][0]["text"])' "$1"; }
$NS run "$T/s.txt" -o "$T/ref.out" "${base[@]}" || fail run_stream_reference "rc=$?"

# --- run - -o -: standard input in, standard output out; only JSONL on stdout; the files in the cwd ---
mkdir "$T/cwd" && cd "$T/cwd" || exit 1
$NS run - -o - "${base[@]}" <"$T/s.txt" >"$T/o1" 2>"$T/e1"
rc=$?
[ $rc = 0 ] && [ "$(ids "$T/o1")" = "1 2 3" ] && [ "$(texts "$T/o1")" = "$(texts "$T/ref.out")" ] &&
    cmp -s "$T/o1" stdin.results.jsonl && ok run_stdin_to_stdout || fail run_stdin_to_stdout "rc=$rc $(head -c 300 "$T/e1")"
[ -f stdin.nightshift.db ] && [ -f stdin.errors.jsonl ] && [ -f stdin.record.json ] && cmp -s stdin.nightshift.db.backlog "$T/s.txt" &&
    [ -z "$(ls | grep tmp)" ] && ok run_stdin_files_named_after_backlog || fail run_stdin_files_named_after_backlog "$(ls)"
# without -q the summary goes to stderr: stdout stays JSONL
$NS run - -o - "${loud[@]}" <"$T/s.txt" >"$T/o2" 2>"$T/e2"
python3 -c 'import json,sys; [json.loads(l) for l in open(sys.argv[1])]' "$T/o2" && grep -q "0 computed now, 3 already done" "$T/e2" &&
    cmp -s "$T/o1" "$T/o2" && ok run_stdout_rerun_writes_all_again || fail run_stdout_rerun_writes_all_again "$(cat "$T/e2" | tail -3)"
# other input: a warning, and the files hold only the new input's results
printf 'Another one\n' | $NS run - -o - "${base[@]}" >"$T/o3" 2>"$T/e3"
[ "$(ids "$T/o3")" = "1" ] && [ "$(wc -l <stdin.results.jsonl)" = 1 ] && grep -q "differs from the one the last run" "$T/e3" &&
    ok run_stdin_other_input_not_mixed || fail run_stdin_other_input_not_mixed "$(cat "$T/e3")"
# -o - with a file backlog: named after its file name, in the cwd
$NS run "$T/s.txt" -o - "${base[@]}" >"$T/o4" && [ -f s.txt.nightshift.db ] && [ ! -e s.txt.nightshift.db.backlog ] &&
    [ "$(texts "$T/o4")" = "$(texts "$T/ref.out")" ] && ok run_file_to_stdout || fail run_file_to_stdout "$(ls)"
cd "$T" || exit 1

# --- gzip / zstd: files and standard input, same results; a truncated file refused ---
gzip -c "$T/s.txt" >"$T/s.txt.gz"
zstd -q -c "$T/s.txt" >"$T/s.txt.zst"
{ gzip -c "$T/s.txt"; } >"$T/multi.gz" # one member; a second appended below
printf 'A fourth\n' | gzip -c >>"$T/multi.gz"
$NS run "$T/s.txt.gz" -o "$T/gz.out" "${base[@]}" && [ "$(texts "$T/gz.out")" = "$(texts "$T/ref.out")" ] &&
    ok run_gzip_backlog || fail run_gzip_backlog "$(ls "$T")"
$NS run "$T/s.txt.zst" -o "$T/zst.out" "${base[@]}" && [ "$(texts "$T/zst.out")" = "$(texts "$T/ref.out")" ] &&
    ok run_zstd_backlog || fail run_zstd_backlog "$(ls "$T")"
$NS run - -o "$T/zin.out" "${base[@]}" <"$T/s.txt.zst" && [ "$(texts "$T/zin.out")" = "$(texts "$T/ref.out")" ] &&
    ok run_zstd_stdin || fail run_zstd_stdin ""
$NS run "$T/multi.gz" -o "$T/multi.out" "${base[@]}" && [ "$(ids "$T/multi.out")" = "1 2 3 4" ] &&
    ok run_gzip_members || fail run_gzip_members "$(ids "$T/multi.out")"
# --- a process substitution and a named pipe: spooled like standard input ---
$NS run <(gzip -dc "$T/s.txt.gz") -o "$T/ps.out" "${base[@]}" 2>"$T/ps.err" && [ "$(texts "$T/ps.out")" = "$(texts "$T/ref.out")" ] &&
    [ -f "$T/ps.out.nightshift.db.backlog" ] && ok run_process_substitution || fail run_process_substitution "$(cat "$T/ps.err")"
mkfifo "$T/fifo"
{ cat "$T/s.txt" >"$T/fifo"; } &
$NS run "$T/fifo" -o "$T/fifo.out" "${base[@]}" 2>"$T/fifo.err" && [ "$(texts "$T/fifo.out")" = "$(texts "$T/ref.out")" ] &&
    ok run_named_pipe || fail run_named_pipe "$(cat "$T/fifo.err")"
wait
{ cat "$T/s.txt" >"$T/fifo"; } &
$NS run "$T/fifo" -o "$T/fifo.out" "${loud[@]}" >/dev/null 2>"$T/fifo2.err" && grep -q " 0 to run" "$T/fifo2.err" &&
    [ "$(texts "$T/fifo.out")" = "$(texts "$T/ref.out")" ] && ok run_named_pipe_resumes || fail run_named_pipe_resumes "$(cat "$T/fifo2.err")"
wait
# resuming a compressed backlog: nothing computed again
$NS run "$T/s.txt.gz" -o "$T/gz.out" "${loud[@]}" >"$T/gz2.log" 2>&1 && grep -q "0 computed now, 3 already done" "$T/gz2.log" &&
    ok run_gzip_resume || fail run_gzip_resume "$(tail -3 "$T/gz2.log")"
head -c 30 "$T/s.txt.gz" >"$T/cut.gz"
expect_err run_gzip_truncated 2 "backlog $T/cut.gz: the gzip data ends early" $NS run "$T/cut.gz" -o "$T/cut.out" "${base[@]}"
printf '\x28\xb5\x2f\xfd garbage' >"$T/bad.zst"
expect_err run_zstd_corrupt 2 "backlog $T/bad.zst: corrupt zstd data" $NS run "$T/bad.zst" -o "$T/bad.out" "${base[@]}"
[ ! -e "$T/cut.out.nightshift.db.backlog" ] && [ -z "$(ls "$T" | grep '\.tmp\.')" ] && ok run_bad_spool_leaves_nothing ||
    fail run_bad_spool_leaves_nothing "$(ls "$T")"

# --- Ctrl-C: 6 requests, 2 at a time, 30 tokens at 0.1 s a step: the 2 running finish (about 3 s) and are
# committed, nothing else starts; exit 130; a second Ctrl-C stops at once; the rerun finishes ---
for i in 1 2 3 4 5 6; do echo "Story number $i"; done >"$T/six.txt"
slow_loud=(-m "$model" --threads 1 --kv-memory 16M --max-tokens 30 --ignore-eos --max-seqs 2)
slow=("${slow_loud[@]}" -q)
NIGHTSHIFT_TEST_STEP_DELAY_US=100000 $NS run "$T/six.txt" -o "$T/int.out" "${slow[@]}" >"$T/int.log" 2>&1 &
pid=$!
for _ in $(seq 200); do [ -e "$T/int.out.nightshift.db" ] && break; sleep 0.05; done
sleep 1 # the first 2 are running (each needs 30 steps of 0.1 s), none finished
t0=$(date +%s.%N)
kill -INT $pid
wait $pid
rc=$?
dt=$(python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.1f}')" "$t0" "$(date +%s.%N)")
n=$(wc -l <"$T/int.out")
[ $rc = 130 ] && [ "$n" = 2 ] && python3 -c "import sys; sys.exit(not float(sys.argv[1]) < 6)" "$dt" &&
    [ "$($NS run --check-store "$T/int.out.nightshift.db")" = ok ] && ok run_sigint_drains_running ||
    fail run_sigint_drains_running "rc=$rc lines=$n after ${dt}s $(tail -2 "$T/int.log")"
NIGHTSHIFT_TEST_STEP_DELAY_US=100000 $NS run "$T/six.txt" -o "$T/int2.out" "${slow[@]}" >"$T/int2.log" 2>&1 &
pid=$!
for _ in $(seq 200); do [ -e "$T/int2.out.nightshift.db" ] && break; sleep 0.05; done
sleep 0.5
t0=$(date +%s.%N)
kill -INT $pid
sleep 0.2
kill -INT $pid
wait $pid
rc=$?
dt=$(python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.1f}')" "$t0" "$(date +%s.%N)")
n=$(wc -l <"$T/int2.out")
[ $rc = 130 ] && [ "$n" = 0 ] && python3 -c "import sys; sys.exit(not float(sys.argv[1]) < 1.5)" "$dt" &&
    ok run_second_sigint_stops_at_once || fail run_second_sigint_stops_at_once "rc=$rc lines=$n after ${dt}s"
$NS run "$T/six.txt" -o "$T/int.out" "${slow_loud[@]}" >"$T/int3.log" 2>&1
[ $? = 0 ] && [ "$(ids "$T/int.out")" = "1 2 3 4 5 6" ] && grep -q "4 computed now, 2 already done" "$T/int3.log" &&
    ok run_sigint_rerun_finishes || fail run_sigint_rerun_finishes "$(tail -3 "$T/int3.log")"

exit $E2E_FAILED
