#!/bin/bash
# bench/gpu_decode.sh — one device call for decode attention (split items a warp each): test_cuda*, then on
# synth llama-8b bf16 (vocab 102,400): bench_cuda steps (prefill 2048, decode B=1,64,256 at context 1,030,
# per-phase profile), `nightshift bench` 1,024 in / 300 out at c256 and c384, and the prefix cache: 256
# requests sharing a 1,024-token prefix. Carried folder tmp/cuda (nightshift, test_cuda*, bench_cuda, lib/,
# shared/) as for gpu_e2e.sh. Usage (device): bash bench/gpu_decode.sh  (logs under $OUT)
set -u
. "$(dirname "$0")/cuda_tests.sh" # cuda_tests: every D/test_cuda* binary
D=tmp/cuda
export LD_LIBRARY_PATH=$PWD/$D/lib:/usr/local/cuda/lib64 NIGHTSHIFT_SHARED=$PWD/$D/shared
S=$(date +%s)
el() { echo "== [t=$(( $(date +%s) - S ))s] $*"; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
el "test_cuda*"
cuda_tests $OUT/test_cuda.log 170; echo "test_cuda rc=$CUDA_TESTS_RC"
grep -E "^(FAIL|skip|ok)|differ|concurrency|attention tc" $OUT/test_cuda.log | head -40
el synth
timeout 90 $D/nightshift synth --shape llama-8b --type bf16 --vocab $D/shared/vocab/ggml-vocab-deepseek-llm.gguf -o /tmp/l8b.gguf 2>&1 | tail -1
el bench_cuda
timeout 120 $D/bench_cuda /tmp/l8b.gguf -L 1024 -B 1,64,256 -N 2048 --steps 8 2>&1 | tee $OUT/bench_cuda.log
B="$D/nightshift bench -m /tmp/l8b.gguf --backend cuda"
for c in ${LEVELS:-256 384}; do
    el bench c$c
    timeout 150 $B --prompt-len 1024 --gen-len 300 --concurrency $c 2>&1 | tee $OUT/c$c.log | grep -v "^\s*$" | tail -2
done
el prefix cache: 256 requests, 1024 shared + 16 unique tokens
timeout 60 $B --shared-prefix 1024 --prompt-len 16 --gen-len 16 --concurrency 256 --requests 256 2>&1 | tee $OUT/prefix.log | grep -v "^\s*$" | tail -3
el done
