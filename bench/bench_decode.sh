#!/usr/bin/env bash
# bench/bench_decode.sh — single-stream and batched decode speed of the CPU backend next to the memory
# bandwidth limit (issue 3). Builds bench/bandwidth.c, bench/bench_decode.c and bench/bench_matmul.c with
# `make build/bench/NAME` (run `make` first for build/nightshift), then:
#   1. read bandwidth of this machine (1 and 2 threads),
#   2. `nightshift generate` decode tok/s on SmolLM2-135M-Instruct Q4_1 (models/, scripts/fetch-model),
#      median of 3 runs of 128 tokens,
#   3. bench_matmul: the matmul kernel alone (GMAC/s, 1 thread, Q8_0 and Q4_1, 1/4/16 rows),
#   4. bench_decode on `synth --shape llama-1b --type q8_0` (written to $NS_BENCH_TMP, default /tmp, ~1 GB):
#      decode tok/s at 1 and 16 concurrent sequences (one row each per step).
# Usage: bench/bench_decode.sh [THREADS]
set -eu
cd "$(dirname "$0")/.."
threads=${1:-0}
tmp=${NS_BENCH_TMP:-/tmp}
make -s -j2 build/bench/bandwidth build/bench/bench_decode build/bench/bench_matmul
echo "== machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), load $(cut -d' ' -f1-3 /proc/loadavg)"
bw=$(build/bench/bandwidth | tee /dev/stderr | sed 's/.*: \([0-9.]*\) GB\/s.*/\1/' | sort -g | tail -1)

smol=models/SmolLM2-135M-Instruct.Q4_1.gguf
if [ -f "$smol" ]; then
    prompt=$'<|im_start|>user\nWrite a long story about a cat.<|im_end|>\n<|im_start|>assistant\n'
    rates=()
    for i in 1 2 3; do
        r=$(build/nightshift generate -m "$smol" -p "$prompt" -n 128 --ignore-eos $( [ "$threads" != 0 ] && echo "-t $threads" ) 2>&1 >/dev/null |
            sed 's/.*decode \([0-9.]*\) tok\/s.*/\1/')
        rates+=("$r")
    done
    med=$(printf '%s\n' "${rates[@]}" | sort -g | sed -n 2p)
    bytes=$(build/bench/bench_decode "$smol" -s 1 -n 0 2>/dev/null | sed -n 's/.*per step \([0-9.]*\) MB.*/\1/p')
    echo "== SmolLM2-135M Q4_1 generate decode: runs ${rates[*]} tok/s, median $med tok/s;" \
        "weights $bytes MB -> limit $(awk -v b="$bw" -v m="$bytes" 'BEGIN{printf "%.0f", b*1000/m}') tok/s"
else
    echo "== SmolLM2: $smol absent (scripts/fetch-model)"
fi

echo "== matmul kernel alone (8192 x 2048, 1 thread; compute, weights mostly in L3):"
for ty in 8 3; do for r in 1 4 16; do build/bench/bench_matmul $r 1 $ty; done; done

l1b=$tmp/llama-1b-q8_0.gguf
# --n-vocab 0: the built-in 589-token vocabulary, as in the NOTES.md numbers (not Llama 3's 128,256)
[ -f "$l1b" ] || build/nightshift synth --shape llama-1b --type q8_0 --n-vocab 0 -o "$l1b"
echo "== llama-1b q8_0 (synthetic):"
build/bench/bench_decode "$l1b" -s 1,16 -n 8 -p 32 $( [ "$threads" != 0 ] && echo "-t $threads" ) --bw "$bw"
