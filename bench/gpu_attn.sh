#!/bin/bash
# bench/gpu_attn.sh — one device call for the tensor-core attention: test_cuda*, compute-sanitizer memcheck
# of its kernel test, synth llama-8b bf16 (vocab 102,400 padded to 128,256), bench_cuda and `nightshift bench` at c64 with
# the new kernel (tc-lds or cores if the test found the ldmatrix path or both wrong), then bench_cuda with
# the CUDA-core kernel (NIGHTSHIFT_CUDA_ATTN=cores) for comparison if time remains. Budget: 385 s.
# Runs from a carried folder tmp/cuda holding nightshift, test_cuda*, bench_cuda (built here with
# `make CUDA=1 BUILD=build-cuda all build-cuda/bench/bench_cuda`), lib/ and shared/ as for gpu.sh (which replaced gpu_e2e.sh).
# Usage (device): bash bench/gpu_attn.sh  (logs under $OUT)
set -u
. "$(dirname "$0")/cuda_tests.sh" # cuda_tests: every D/test_cuda* binary
D=tmp/cuda
export LD_LIBRARY_PATH=$PWD/$D/lib:/usr/local/cuda/lib64 NIGHTSHIFT_SHARED=$PWD/$D/shared
S=$(date +%s); END=$((S + 385))
rem() { echo $((END - $(date +%s))); }
el() { echo "== [t=$(( $(date +%s) - S ))s] $*"; }
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm --format=csv,noheader
el "test_cuda*"
cuda_tests $OUT/test_cuda.log 150; echo "test_cuda rc=$CUDA_TESTS_RC"
grep -E "^(FAIL|skip)|^# (attention|tc verdict|llama bf16|qwen3 f16|stories|golden)|differ|concurrency|passed|failed" $OUT/test_cuda.log | head -70
ATT=tc
if ! grep -q "tc verdict" $OUT/test_cuda.log; then ATT=cores
elif grep -q "ldmatrix bad" $OUT/test_cuda.log; then
  if grep -q "plain loads bad" $OUT/test_cuda.log; then ATT=cores; else ATT=tc-lds; fi
fi
export NIGHTSHIFT_CUDA_ATTN=$ATT; echo "benches with NIGHTSHIFT_CUDA_ATTN=$ATT"
el memcheck kernel_attention_tc
TEST_CUDA_ONLY=kernel_attention_tc timeout 60 compute-sanitizer --tool memcheck --print-limit 5 $D/test_cuda_attn > $OUT/memcheck.log 2>&1; echo "memcheck rc=$?"
grep -E "ERROR SUMMARY|Invalid|^FAIL|^ok" $OUT/memcheck.log | head -12
el synth
timeout 90 $D/nightshift synth --shape llama-8b --type bf16 --vocab $D/shared/vocab/ggml-vocab-deepseek-llm.gguf -o /tmp/l8b.gguf 2>&1 | tail -1
el bench_cuda $ATT
t=$(rem); t=$((t < 140 ? t - 100 : 120)); timeout $((t < 20 ? 20 : t)) $D/bench_cuda /tmp/l8b.gguf -L 1024 -B 1,64,256 -N 2048 --steps 8 2>&1 | tee $OUT/bench_cuda.log
el nightshift bench c64 $ATT
t=$(rem); t=$((t < 160 ? t - 10 : 150)); timeout $((t < 20 ? 20 : t)) $D/nightshift bench -m /tmp/l8b.gguf --backend cuda --prompt-len 1024 --gen-len 300 --concurrency 64 2>&1 | tee $OUT/bench_8b.log | grep -v "^\s*$" | tail -25
t=$(rem)
if [ "$ATT" != cores ] && [ $t -gt 50 ]; then
  el bench_cuda cores, for comparison
  NIGHTSHIFT_CUDA_ATTN=cores timeout $((t - 5)) $D/bench_cuda /tmp/l8b.gguf -L 1024 -B 256 -N 2048 --steps 4 2>&1 | tee $OUT/bench_cuda_cores.log
fi
nvidia-smi --query-gpu=memory.used --format=csv,noheader
el done
