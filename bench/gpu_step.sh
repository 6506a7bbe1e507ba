#!/bin/bash
# bench/gpu_step.sh — one device call after a kernel change: test_cuda*, then on synth llama-8b bf16 (vocab
# 102,400): bench_cuda steps (prefill 2048; decode B=1,64,256 at context 1,030; per-phase profile) and
# `nightshift bench` 1,024 in / 300 out at RUNS (default: c256, c256 --lookup 0, c1, c1 --lookup 0).
# Carried folder tmp/cuda (nightshift, test_cuda*, bench_cuda, lib/, shared/) as for gpu_e2e.sh.
set -u
. "$(dirname "$0")/cuda_tests.sh" # cuda_tests: every D/test_cuda* binary
D=tmp/cuda
export LD_LIBRARY_PATH=$PWD/$D/lib:/usr/local/cuda/lib64 NIGHTSHIFT_SHARED=$PWD/$D/shared
S=$(date +%s)
el() { echo "== [t=$(( $(date +%s) - S ))s] $*"; }
[ -n "${SKIP_STEPS:-}" ] || {
el "test_cuda*"
cuda_tests $OUT/test_cuda.log 170; echo "test_cuda rc=$CUDA_TESTS_RC"
grep -E "^(FAIL|skip)|differ|rows split" $OUT/test_cuda.log | head -20; echo "$(grep -c '^ok' $OUT/test_cuda.log) ok"
el synth
timeout 90 $D/nightshift synth --shape llama-8b --type bf16 --vocab $D/shared/vocab/ggml-vocab-deepseek-llm.gguf -o /tmp/l8b.gguf 2>&1 | tail -1
el bench_cuda
timeout 120 $D/bench_cuda /tmp/l8b.gguf -L 1024 -B ${STEP_B:-1,64,256} -N 2048 --steps 8 2>&1 | tee $OUT/bench_cuda.log | grep -v '^ceil'
}
[ -f /tmp/l8b.gguf ] || timeout 90 $D/nightshift synth --shape llama-8b --type bf16 --vocab $D/shared/vocab/ggml-vocab-deepseek-llm.gguf -o /tmp/l8b.gguf 2>&1 | tail -1
B="$D/nightshift bench -m /tmp/l8b.gguf --backend cuda --prompt-len 1024 --gen-len 300"
echo "${RUNS:---concurrency 256;--concurrency 256 --lookup 0;--concurrency 1;--concurrency 1 --lookup 0}" | tr ';' '\n' |
while read -r r; do
    el "bench $r"
    timeout 150 $B $r 2>&1 < /dev/null | tee -a $OUT/bench.log | grep -v "^\s*$" | tail -1
done
el done
