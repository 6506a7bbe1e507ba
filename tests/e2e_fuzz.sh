#!/usr/bin/env bash
# Smoke pass of every libFuzzer target (fuzz/fuzz_*.c): each runs a few seconds from its seed corpus
# (fuzz/corpus/NAME, copied: the repository's corpus is not changed) and must find nothing. Needs clang with
# libFuzzer; without it every target is reported as skipped. The first pass builds build-fuzz/ (the
# library with coverage and sanitizers: a few minutes once, incremental after). FUZZ_SMOKE_SECONDS (default
# 3) sets the time per target.
. tests/lib.sh
seconds=${FUZZ_SMOKE_SECONDS:-3}
targets=$(for f in fuzz/fuzz_*.c; do basename "$f" .c; done)
probe=$e2e_tmp/probe
printf '#include <stdint.h>\n#include <stddef.h>\nint LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { (void)d; (void)n; return 0; }\n' >"$probe.c"
if ! command -v clang >/dev/null 2>&1 || ! clang -fsanitize=fuzzer "$probe.c" -o "$probe" >/dev/null 2>&1; then
    for t in $targets; do skip "$t" "no clang with libFuzzer"; done
    exit 0
fi
if ! make --no-print-directory -j2 fuzz-bins >"$e2e_tmp/build.log" 2>&1; then
    fail fuzz_build "$(grep -m3 -E 'error|Error' "$e2e_tmp/build.log")"
    exit $E2E_FAILED
fi
export NIGHTSHIFT_SHARED=${NIGHTSHIFT_SHARED:-$SHARED}
for t in $targets; do
    name=${t#fuzz_}
    corpus=$e2e_tmp/corpus-$name
    mkdir -p "$corpus"
    [ -d "fuzz/corpus/$name" ] && cp "fuzz/corpus/$name"/* "$corpus"/
    if [ "$name" = gguf ] && [ -f "$SHARED/models/stories260K.gguf" ]; then cp "$SHARED/models/stories260K.gguf" "$corpus"/; fi
    log=$e2e_tmp/$t.log
    if "build-fuzz/bin/$t" -max_total_time="$seconds" -max_len=65536 -rss_limit_mb=2048 -timeout=10 \
        -artifact_prefix="$e2e_tmp/" -print_final_stats=1 "$corpus" >"$log" 2>&1; then
        n=$(grep -o 'number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$')
        echo "# $t: ${n:-?} executions in ${seconds} s, no crash"
        ok "$t"
    else
        fail "$t" "$(grep -m5 -E 'ERROR|SUMMARY|Test unit written|deadly' "$log" | tr '\n' ' ')"
    fi
done
exit $E2E_FAILED
