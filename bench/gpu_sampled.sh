#!/bin/bash
# bench/gpu_sampled.sh — one device call for sampled draws on the device: test_cuda*, then `nightshift bench` on
# synth llama-8b bf16 (vocab 102,400), 1,024 in / 300 out, c64: temperature 1 (the walk over every token),
# temperature 0.8 + top-k 40 (sorted candidates), the same with NIGHTSHIFT_CUDA_SAMPLING=host (every row's
# logits to the host, as before), and temperature 0.8 + top-p 0.9 (a nucleus that may not fit: declined rows).
set -u
. "$(dirname "$0")/cuda_tests.sh" # cuda_tests: every D/test_cuda* binary
D=tmp/cuda
export LD_LIBRARY_PATH=$PWD/$D/lib:/usr/local/cuda/lib64 NIGHTSHIFT_SHARED=$PWD/$D/shared
S=$(date +%s)
el() { echo "== [t=$(( $(date +%s) - S ))s] $*"; }
el "test_cuda*"
cuda_tests $OUT/test_cuda.log 170; echo "test_cuda rc=$CUDA_TESTS_RC"
grep -E "^(FAIL|skip)|differ|sample" $OUT/test_cuda.log | head -20; echo "$(grep -c '^ok' $OUT/test_cuda.log) ok"
el synth
timeout 90 $D/nightshift synth --shape llama-8b --type bf16 --vocab $D/shared/vocab/ggml-vocab-deepseek-llm.gguf -o /tmp/l8b.gguf 2>&1 | tail -1
B="$D/nightshift bench -m /tmp/l8b.gguf --backend cuda --prompt-len 1024 --gen-len 300 --concurrency 64"
for r in "--temperature 1" "--temperature 0.8 --top-k 40" "host --temperature 0.8 --top-k 40" "--temperature 0.8 --top-p 0.9"; do
    el "bench $r"
    if [ "${r%% *}" = host ]; then NIGHTSHIFT_CUDA_SAMPLING=host timeout 100 $B ${r#host } 2>&1 | grep -v "^\s*$" | tail -1
    else timeout 100 $B $r 2>&1 | grep -v "^\s*$" | tail -1; fi
done
el done
