#!/usr/bin/env bash
# bench/engine_bench.sh [scaling|llama1b|prefix|batch|all] — the engine benchmarks of issue 4 (results and
# commands in bench/NOTES.md). Run `make` first. Each prints `nightshift bench` tables; nothing is timed as
# a test. llama1b makes /tmp/llama1b-q8.gguf with `nightshift synth` when it is missing (~1 GiB).
set -e
cd "$(dirname "$0")/.."
NS=${NS:-build/nightshift}
STORIES=${STORIES:-../shared/models/stories260K.gguf}
SMOL=${SMOL:-models/SmolLM2-135M-Instruct.Q4_1.gguf}
L1B=${L1B:-/tmp/llama1b-q8.gguf}
what=${1:-all}
echo "# $(date -u +%FT%TZ) load: $(cut -d' ' -f1-3 /proc/loadavg)"

if [ "$what" = scaling ] || [ "$what" = all ]; then
    # stories260K, 128 prompt / 128 generated: concurrency 64 vs 1 (issue 4's ratio), 5 runs per level
    # taking turns, medians; then the 1,4,16,64 curve (requests = 2 x concurrency)
    "$NS" bench -m "$STORIES" --prompt-len 128 --gen-len 128 --concurrency 1,64 --requests 64 --reps 5
    "$NS" bench -m "$STORIES" --prompt-len 128 --gen-len 128 --concurrency 1,4,16,64
fi

if [ "$what" = llama1b ] || [ "$what" = all ]; then
    # --n-vocab 0: the built-in 589-token vocabulary, as in the NOTES.md numbers (not Llama 3's 128,256)
    [ -f "$L1B" ] || "$NS" synth --shape llama-1b --type q8_0 --n-vocab 0 -o "$L1B"
    # one request alone vs 16 at once (one wave each); generation rate = weights read once per step
    "$NS" bench -m "$L1B" --prompt-len 32 --gen-len 32 --concurrency 1 --requests 2
    "$NS" bench -m "$L1B" --prompt-len 32 --gen-len 32 --concurrency 16 --requests 16
fi

if [ "$what" = prefix ] || [ "$what" = all ]; then
    # 256 requests sharing a 1,024-token prefix, 32 unique tokens each: with and without the prefix cache
    "$NS" bench -m "$STORIES" --shared-prefix 1024 --prompt-len 32 --gen-len 16 --requests 256 --concurrency 64
    "$NS" bench -m "$STORIES" --shared-prefix 1024 --prompt-len 32 --gen-len 16 --requests 256 --concurrency 64 --no-prefix-cache
fi

if [ "$what" = batch ] || [ "$what" = all ]; then
    # max_batch_tokens on a prompt-heavy load (the cpu default is 512)
    for mbt in 128 256 512 1024 2048; do
        echo "## --max-batch-tokens $mbt"
        "$NS" bench -m "$SMOL" --prompt-len 256 --gen-len 8 --concurrency 16 --requests 16 --max-batch-tokens "$mbt" | tail -1
    done
fi
