#!/usr/bin/env bash
# End-to-end tests of `mpirun -np N nightshift run` (issue 18) with the MPI build (build-mpi/, made by
# `make test` through check-mpi when mpicc is on PATH): results of 2 and 3 ranks equal the single process's
# (greedy and seeded requests, bad lines, folded duplicates), the run record has every rank's figures; a
# worker rank killed with SIGKILL mid-run, then the whole job killed, each followed by a rerun with another
# N: every line in exactly one file once, the results equal the clean run's, the store's integrity holds.
. tests/lib.sh
model=$SHARED/models/stories260K.gguf
check="python3 tests/run_check.py"
MPI_NS=${NIGHTSHIFT_MPI_BIN:-build-mpi/nightshift}
if [ ! -x "$MPI_NS" ] || ! command -v mpirun >/dev/null 2>&1; then
    skip mpi "no MPI build ($MPI_NS) or no mpirun (scripts/install-deps mpi; make check-mpi)"
    exit 0
fi
if [ ! -f "$model" ]; then skip mpi "no $model"; exit 0; fi
export NIGHTSHIFT_CACHE_DIR=$e2e_tmp/cache OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl=self,vader OMPI_MCA_rmaps_base_oversubscribe=1
mpi() { local n=$1; shift; timeout 120 mpirun --oversubscribe -np "$n" "$MPI_NS" "$@"; }
T=$e2e_tmp
backlog=$T/backlog.jsonl
$check backlog "$backlog" 300 11 || { fail mpi_backlog "cannot write the backlog"; exit 1; }
flags=(-m "$model" --max-seqs 8 --threads 1 --kv-memory 16M -q)

# --- the single process (the MPI build, no mpirun) is the reference ---
mkdir -p "$T/one" "$T/np2" "$T/np3"
$MPI_NS run "$backlog" -o "$T/one/out.jsonl" "${flags[@]}" 2>"$T/one.log" ||
    { fail mpi_single "$(tail -3 "$T/one.log")"; exit 1; }
for n in 2 3; do
    if mpi $n run "$backlog" -o "$T/np$n/out.jsonl" "${flags[@]}" >"$T/np$n.log" 2>&1 &&
        $check same "$T/one/out.jsonl" "$T/one/out.jsonl.errors.jsonl" "$T/np$n/out.jsonl" "$T/np$n/out.jsonl.errors.jsonl" >"$T/same$n" &&
        $check files "$backlog" "$T/np$n/out.jsonl" "$T/np$n/out.jsonl.errors.jsonl" >>"$T/same$n"; then
        ok mpi_np${n}_equals_single_process
    else
        fail mpi_np${n}_equals_single_process "$(tail -3 "$T/np$n.log") $(head -5 "$T/same$n")"
    fi
done
ranks=$(python3 -c '
import json, sys
r = json.load(open(sys.argv[1]))["distributed"]
ranks = r["ranks"]
assert r["n_ranks"] == 3 and [x["rank"] for x in ranks] == [0, 1, 2], r
assert all(x["requests"] > 0 and x["gen_tokens"] > 0 and 0 < x["busy_fraction"] <= 1 and x["peak_rss_bytes"] > 0 for x in ranks), ranks
print(sum(x["requests"] for x in ranks))
' "$T/np3/out.jsonl.record.json" 2>&1)
[ $? = 0 ] && ok mpi_record_has_every_rank || fail mpi_record_has_every_rank "$ranks"

# --- kills: every step of every rank sleeps 20 ms so that a run lasts (~5 s); kill when results are written ---
export NIGHTSHIFT_TEST_STEP_DELAY_US=20000
lines() { [ -f "$1" ] && wc -l <"$1" || echo 0; }
out=$T/crash/out.jsonl
mkdir -p "$T/crash"
# starts an N-rank run in the background, waits until it has written results; sets job (mpirun's pid)
start_and_wait() {
    mpi "$1" run "$backlog" -o "$out" "${flags[@]}" --commit-interval 0.05 >>"$T/crash.log" 2>&1 &
    job=$!
    local before
    before=$(lines "$out")
    for _ in $(seq 1 500); do
        [ "$(lines "$out")" -gt $((before + 10)) ] && [ -n "$(ranks_of $job)" ] && return 0
        kill -0 $job 2>/dev/null || return 1
        sleep 0.02
    done
    return 1
}
# the nightshift processes under process $1 (timeout -> mpirun -> the ranks)
ranks_of() {
    local c
    for c in $(pgrep -P "$1"); do
        [ "$(cat /proc/$c/comm 2>/dev/null)" = nightshift ] && echo $c
        ranks_of $c
    done
}

if start_and_wait 3; then
    worker=""
    for p in $(ranks_of $job); do # rank 1, found by the rank MPI gave it
        tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx OMPI_COMM_WORLD_RANK=1 && worker=$p
    done
    n_before=$(lines "$out")
    kill -9 $worker 2>/dev/null
    wait $job
    rc=$?
    n_after=$(lines "$out")
    if [ $rc -ne 0 ] && [ "$n_after" -lt 300 ]; then ok mpi_worker_kill_fails_job
    else fail mpi_worker_kill_fails_job "rc $rc, $n_before -> $n_after lines"; fi
else
    fail mpi_worker_kill_fails_job "the run ended before it could be killed"
    wait $job
fi
# the whole job: every rank at once
if start_and_wait 2; then
    victims="$(ranks_of $job)"
    kill -9 $victims 2>/dev/null
    wait $job
    n=$(lines "$out")
    [ -n "$victims" ] && [ "$n" -lt 300 ] && ok mpi_whole_job_killed || fail mpi_whole_job_killed "ranks '$victims', $n lines"
else
    fail mpi_whole_job_killed "the run ended before it could be killed"
    wait $job
fi
unset NIGHTSHIFT_TEST_STEP_DELAY_US
# rerun with yet another N finishes the job
mpi 3 run "$backlog" -o "$out" "${flags[@]}" >"$T/resume.log" 2>&1 || fail mpi_resume "$(tail -3 "$T/resume.log")"
grep -q "already done" "$T/resume.log" || true
if $check files "$backlog" "$out" "$out.errors.jsonl" >"$T/files" &&
    $check same "$T/one/out.jsonl" "$T/one/out.jsonl.errors.jsonl" "$out" "$out.errors.jsonl" >>"$T/files"; then
    ok mpi_resume_after_kills_exactly_once
else
    fail mpi_resume_after_kills_exactly_once "$(head -5 "$T/files")"
fi
r=$($MPI_NS run --check-store "$out.nightshift.db" 2>&1)
[ "$r" = ok ] && $check integrity "$out.nightshift.db" >/dev/null && ok mpi_store_integrity || fail mpi_store_integrity "$r"

# --- the plain build refuses an MPI launch it cannot join ---
if [ -x "$NS" ] && [ "$NS" != "$MPI_NS" ]; then
    OMPI_COMM_WORLD_SIZE=2 expect_err mpi_plain_build_refuses nz "built without MPI" \
        "$NS" run "$backlog" -o "$T/plain.jsonl" "${flags[@]}"
fi
exit $E2E_FAILED
