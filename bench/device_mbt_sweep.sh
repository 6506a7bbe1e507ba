#!/bin/sh
# bench/device_mbt_sweep.sh — stories260K 128/128 at concurrency 64 on a many-core host: total tok/s by
# thread count and --max-batch-tokens (rows per engine step), and concurrency 1 at each thread count, so
# that the best c1 can be set against the best c64. Same tmp/devbin bundle as device_cpu_scaling.sh.
# Usage: sh bench/device_mbt_sweep.sh [BUILD=new] [REPS=3]
set -u
D=tmp/devbin
B=${1:-new}
REPS=${2:-3}
export LD_LIBRARY_PATH="$PWD/$D/lib"
M="$D/models/stories260K.gguf"
one() { # threads conc requests max_batch_tokens
    "$D/nightshift-$B" bench -m "$M" --prompt-len 128 --gen-len 128 --concurrency "$2" --requests "$3" -t "$1" \
        --max-batch-tokens "$4" --json 2>/dev/null | python3 -c 'import json,sys; print(json.load(sys.stdin)["levels"][0]["total_tok_s"])'
}
med() { python3 -c 'import sys,statistics as s; v=[float(x) for x in sys.argv[1:]]; print("%9.0f  (%s)" % (s.median(v), " ".join("%.0f" % x for x in v)))' "$@"; }
echo "== $B: c1 (64 requests, max-batch-tokens 512) by threads"
for T in 1 2 4 8 16; do
    v=""; for r in $(seq "$REPS"); do v="$v $(one $T 1 64 512)"; done
    echo "T $T c1 $(med $v)"
done
echo "== $B: c64 (1024 requests) by threads x max-batch-tokens"
for T in 2 4 8 16; do
    for R in 512 1024 2048 4096; do
        v=""; for r in $(seq "$REPS"); do v="$v $(one $T 64 1024 $R)"; done
        echo "T $T mbt $R c64 $(med $v)"
    done
done
