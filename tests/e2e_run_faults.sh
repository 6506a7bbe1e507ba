#!/usr/bin/env bash
# I/O fault injection for `nightshift run` (issue 13): an LD_PRELOAD shim (tests/faultio.c) makes the Nth
# write or fsync on a regular file fail (nightshift's own output files, record and cache, and SQLite's
# database and WAL), swept over N from the first call to the last of a clean run; then the Nth read. Each failure must end
# with a clear error (a "nightshift run:" line) and a non-zero exit, not a crash (or, for a write whose
# failure is harmless, a complete run); the rerun without a fault must finish with every id exactly once,
# in one of the two files, the same results as a clean run, and a store that passes --check-store. (The last
# calls of a run are SQLite's checkpoint when the store closes, after everything is committed: their failure
# is harmless, and the run ends well.)
. tests/lib.sh
model=$SHARED/models/stories260K.gguf
if [ ! -f "$model" ]; then skip run_faults "no $model"; exit 0; fi
if ! command -v cc >/dev/null 2>&1; then skip run_faults "no C compiler for the shim"; exit 0; fi
T=$e2e_tmp
export NIGHTSHIFT_CACHE_DIR=$T/cache
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0" # the shim comes before libasan
cc -shared -fPIC -O1 tests/faultio.c -o "$T/faultio.so" -ldl || { fail run_faults_shim "cannot build tests/faultio.c"; exit 1; }
python3 - "$T/b.jsonl" <<'PY'
import json, sys
with open(sys.argv[1], "w") as f:
    for i in range(8):
        f.write(json.dumps({"id": "r%d" % i, "prompt": "Once upon a time %d" % i, "max_tokens": 3 + i % 3}) + "\n")
    f.write('{"id": "bad", "prompt": 5}\n')
PY
args=("$T/b.jsonl" -m "$model" --threads 1 --kv-memory 16M -q --temperature 0 --commit-interval 0 --max-seqs 3)
run() { # run OUT [ENV...]: one run writing OUT, the files beside it
    local out=$1; shift
    env "$@" "$NS" run "${args[@]}" -o "$out" >"$out.stdout" 2>"$out.stderr"
}
# the ids of both files of OUT, then the texts of its results by id (created times differ between runs)
outcome() { python3 - "$1" <<'PY'
import json, sys
out = [json.loads(l) for l in open(sys.argv[1])]
err = [json.loads(l) for l in open(sys.argv[1] + ".errors.jsonl")]
print(" ".join(sorted(o["custom_id"] for o in out + err)))
print(sorted((o["custom_id"], o["response"]["body"]["choices"][0]["text"]) for o in out))
PY
}

run "$T/clean.out" || { fail run_faults_clean "$(tail -2 "$T/clean.out.stderr")"; exit 1; } # warms the cache too
rm -f "$T"/clean.out*
run "$T/clean.out" LD_PRELOAD="$T/faultio.so" FAULTIO_COUNT="$T/count" || { fail run_faults_count "$(tail -2 "$T/clean.out.stderr")"; exit 1; }
total=$(cat "$T/count")
want=$(outcome "$T/clean.out")
[ "$total" -gt 10 ] && [ "$(head -1 <<<"$want")" = "bad r0 r1 r2 r3 r4 r5 r6 r7" ] && ok run_faults_clean_run ||
    fail run_faults_clean_run "$total calls, ids: $(head -1 <<<"$want")"

# every N up to 12 (opening the store), then 20 spread over the rest (FAULTIO_ALL=1: every N)
step=$(((total - 12) / 20 + 1))
[ -n "${FAULTIO_ALL:-}" ] && step=1
Ns=$(seq 1 $((total < 12 ? total : 12)); [ "$total" -gt 12 ] && seq 13 $step "$total")
n_fail=0 n_clean=0 bad=""
for N in $Ns; do
    for errno in EIO; do
        out=$T/f$N.out
        run "$out" LD_PRELOAD="$T/faultio.so" FAULTIO_AT=$N FAULTIO_ERRNO=$errno
        rc=$?
        msg=$(grep "^nightshift run: " "$out.stderr" | tail -1)
        # clear: names the cause, and no SQL text in place of what was being done
        if [ $rc -ge 128 ] || { [ $rc != 0 ] && { ! grep -qiE "I/O error|Input/output error|disk|space" <<<"$msg" || grep -qE "PRAGMA|CREATE|SELECT|INSERT" <<<"$msg"; }; }; then
            bad+=" N=$N: rc=$rc $(tail -1 "$out.stderr")"
            continue
        fi
        [ $rc = 0 ] && n_clean=$((n_clean + 1)) || n_fail=$((n_fail + 1))
        if ! run "$out"; then bad+=" N=$N: the rerun failed: $(tail -1 "$out.stderr")"; continue; fi
        got=$(outcome "$out")
        check=$("$NS" run --check-store "$out.nightshift.db" 2>&1)
        if [ "$got" != "$want" ] || [ "$check" != ok ]; then
            bad+=" N=$N: after the rerun: ids '$(head -1 <<<"$got")', store '$check'"
        fi
        rm -f "$out"*
    done
done
echo "# faults: $total counted calls in a clean run; $(echo $Ns | wc -w) faults injected: $n_fail ended with an error, $n_clean were harmless"
[ -z "$bad" ] && [ $n_fail -gt 0 ] && ok run_faults_each_ends_clean_and_resumes || fail run_faults_each_ends_clean_and_resumes "$bad"

# --- reads: the backlog (read, and read again when works are submitted and lines built), the store's
# pages, the output files under repair; the same promises, over a spread of the read calls ---
rm -f "$T"/clean.out*
run "$T/clean.out" LD_PRELOAD="$T/faultio.so" FAULTIO_KIND=read FAULTIO_COUNT="$T/rcount" ||
    fail run_faults_read_count "$(tail -2 "$T/clean.out.stderr")"
rtotal=$(cat "$T/rcount")
bad="" n_fail=0
rstep=$(((rtotal + 9) / 10))
[ -n "${FAULTIO_ALL:-}" ] && rstep=1
for N in $(seq 1 $rstep "$rtotal"); do
    out=$T/r$N.out
    run "$out" LD_PRELOAD="$T/faultio.so" FAULTIO_KIND=read FAULTIO_AT=$N
    rc=$?
    if [ $rc -ge 128 ] || { [ $rc != 0 ] && ! grep -q "^nightshift run: " "$out.stderr"; }; then
        bad+=" N=$N: rc=$rc $(tail -1 "$out.stderr")"
        continue
    fi
    [ $rc = 0 ] || n_fail=$((n_fail + 1))
    run "$out" && [ "$(outcome "$out")" = "$want" ] && [ "$("$NS" run --check-store "$out.nightshift.db" 2>&1)" = ok ] ||
        bad+=" N=$N: the rerun: $(tail -1 "$out.stderr")"
    rm -f "$out"*
done
echo "# read faults: $rtotal counted reads in a clean run; $n_fail of the injected ones ended with an error"
[ -z "$bad" ] && [ $n_fail -gt 0 ] && ok run_faults_reads_end_clean_and_resume || fail run_faults_reads_end_clean_and_resume "$bad"

# a full disk while committing: the message says so
out=$T/nospc.out
mid=$((total / 2))
run "$out" LD_PRELOAD="$T/faultio.so" FAULTIO_AT=$mid FAULTIO_ERRNO=ENOSPC
rc=$?
{ [ $rc = 0 ] || grep -qiE "space|full" "$out.stderr"; } && run "$out" && [ "$(outcome "$out")" = "$want" ] &&
    ok run_faults_disk_full || fail run_faults_disk_full "rc=$rc $(tail -1 "$out.stderr")"
exit $E2E_FAILED
