#!/usr/bin/env bash
# End-to-end test of what a backlog line costs resident (issue 33): `nightshift run` of 10^5 one-word lines
# on stories260K, its peak RSS (the record's memory.peak_rss_bytes) against a 1,000-line run's, per line.
# Measured 190 bytes a line at 10^5 (the fixed costs not yet spread: ~88 a line at 10^6, bench/NOTES.md
# 2026-12-08); the bound, 400, fails on the regressions seen before: SQLite's page cache at 32 MiB (565 a
# line here, checked), a commit that builds every line a folded result finishes at once (1,065 on main).
. tests/lib.sh
model=$SHARED/models/stories260K.gguf
if [ ! -f "$model" ]; then skip run_memory "no $model"; exit 0; fi
export NIGHTSHIFT_CACHE_DIR=$e2e_tmp/cache
T=$e2e_tmp
words() { python3 -c "import sys; w=['Once','Lily','dog','The','sun','tree','happy','One','She','cat']
n=int(sys.argv[1]); open(sys.argv[2],'w').write(''.join(w[i % 10] + '\n' for i in range(n)))" "$@"; }
peak() { python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['memory']['peak_rss_bytes'])" "$1"; }
words 1000 "$T/small.txt"
words 100000 "$T/big.txt"
# distinct: seeds from the ids, nothing folds; folded: greedy, ten requests for 10^5 lines
for mode in distinct folded; do
    extra=()
    [ $mode = folded ] && extra=(--temperature 0)
    for n in small big; do
        $NS run "$T/$n.txt" -o "$T/$n-$mode.out" -m "$model" --threads 1 --max-tokens 1 -q "${extra[@]}" \
            2>"$T/log" || fail run_memory_$mode "$(tail -n 2 "$T/log")"
    done
    per=$(( ($(peak "$T/big-$mode.out.record.json") - $(peak "$T/small-$mode.out.record.json")) / 99000 ))
    [ "$(wc -l <"$T/big-$mode.out")" = 100000 ] && [ "$per" -lt 400 ] && ok run_memory_$mode ||
        fail run_memory_$mode "$per bytes resident a backlog line (bound 400), $(wc -l <"$T/big-$mode.out") results"
done
# a kill between the transactions of one commit (the ten results, stored in its first, finish 10^5 lines:
# ~66 MB of lines, built 1 MiB a transaction; seen: 3,154 lines in the file, 4,731 rows), then a resume
# (the rows' lines written again, the rest queued by reconcile): every line once
(NIGHTSHIFT_TEST_CRASH=after_commit:3 $NS run "$T/big.txt" -o "$T/crash.out" -m "$model" --threads 1 \
    --max-tokens 1 --temperature 0 -q; exit $?) 2>"$T/crash.log"
partial=$(wc -l <"$T/crash.out")
$NS run "$T/big.txt" -o "$T/crash.out" -m "$model" --threads 1 --max-tokens 1 --temperature 0 -q 2>"$T/log" ||
    fail run_memory_chunked_commit_resume "$(tail -n 2 "$T/log")"
once=$(python3 -c "import json,sys; ids=[json.loads(l)['custom_id'] for l in open(sys.argv[1])]
print(len(ids), len(set(ids)))" "$T/crash.out")
[ "$partial" -gt 0 ] && [ "$partial" -lt 100000 ] && [ "$once" = "100000 100000" ] && ok run_memory_chunked_commit_resume ||
    fail run_memory_chunked_commit_resume "$partial lines before the kill; lines, distinct ids after: $once"
