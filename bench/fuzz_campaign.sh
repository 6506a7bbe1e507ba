#!/bin/bash
# bench/fuzz_campaign.sh start|wait — the long libFuzzer campaign of issue 13 on a many-core machine (the H200
# device machine's host), beside other work. start: unpacks tmp/fuzz/bundle.tar.xz (bin/fuzz_* built here by
# `make fuzz`: ASan + UBSan; shared/ with testdata/vocab and stories260K) and starts one worker per target, plus
# EXTRA targets given a second worker, each pinned to its own core from FIRST_CORE up, for FUZZ_SECONDS (480),
# corpora seeded from fuzz/corpus/NAME, fuzz/seed-jinja, fuzz/seeds-grammar and the shared files. wait: waits
# for every worker, then prints per worker its executions (libFuzzer's final stats) and its crash, leak and
# timeout artifacts, and the totals; artifacts are copied to $OUT/fuzz/.
set -u
W=/tmp/nsfuzz
case "${1:-}" in
start)
    rm -rf $W && mkdir -p $W/logs $W/art && tar -xJf tmp/fuzz/bundle.tar.xz -C $W || exit 1
    export NIGHTSHIFT_SHARED=$W/shared LD_LIBRARY_PATH=$PWD/tmp/cuda/lib:${LD_LIBRARY_PATH:-}
    core=${FIRST_CORE:-2}
    for t in $(ls $W/bin | sed 's/^fuzz_//') ${EXTRA:-gguf chat jinja}; do
        c=$W/corpus-$t
        if [ ! -d $c ]; then
            mkdir -p $c
            for s in fuzz/corpus/$t fuzz/seed-$t fuzz/seeds-$t; do [ -d $s ] && cp -r $s/. $c/; done
            [ $t = gguf ] && cp $W/shared/models/*.gguf $W/shared/testdata/vocab/ggml-vocab-llama-spm.gguf $c/ 2>/dev/null
        fi
        k=0; while [ -e $W/logs/$t.$k.log ]; do k=$((k + 1)); done
        setsid nohup taskset -c $((core % $(nproc))) $W/bin/fuzz_$t $c -max_total_time=${FUZZ_SECONDS:-480} -print_final_stats=1 \
            -artifact_prefix=$W/art/$t.$k- > $W/logs/$t.$k.log 2>&1 < /dev/null &
        echo $! > $W/logs/$t.$k.pid
        core=$((core + 1))
    done
    echo "fuzz: $(ls $W/logs/*.pid | wc -l) workers started for ${FUZZ_SECONDS:-480} s"
    ;;
wait)
    for p in $W/logs/*.pid; do while kill -0 $(cat $p) 2>/dev/null; do sleep 2; done; done
    total=0; bad=0
    for l in $W/logs/*.log; do
        n=$(grep -oE "stat::number_of_executed_units: [0-9]+" $l | grep -oE "[0-9]+$" | tail -1)
        w=$(basename $l .log); a=$(ls $W/art 2>/dev/null | grep -c "^$w-")
        echo "$w: ${n:-?} executions, $a artifacts; $(grep -E '^Done|ERROR' $l | head -2 | tr '\n' ' ')"
        total=$((total + ${n:-0})); bad=$((bad + a))
    done
    echo "fuzz total: $total executions, $bad crash/leak/timeout artifacts"
    mkdir -p $OUT/fuzz && cp $W/art/* $OUT/fuzz/ 2>/dev/null
    for l in $W/logs/*.log; do tail -5 $l > $OUT/fuzz/$(basename $l); done
    ;;
*) sed -n '2,8p' "$0"; exit 2 ;;
esac
