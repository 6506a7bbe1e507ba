#!/bin/bash
# bench/gpu_ncu.sh — one device call: test_cuda*, bench_cuda on synth llama-8b bf16 (vocab 102,400; prefill 2048,
# decode B=64,256 at context 1,030, per-phase profile), then Nsight Compute on one decode launch of the split
# attention kernel and of the SwiGLU and RMSNorm kernels (B=256), or of the kernels NCU_SPECS names ("REGEX SKIP
# COUNT BENCH_ARGS;..." with _ for spaces in BENCH_ARGS). Carried folder tmp/cuda as for gpu_step.sh.
set -u
. "$(dirname "$0")/cuda_tests.sh" # cuda_tests: every D/test_cuda* binary
D=tmp/cuda
export LD_LIBRARY_PATH=$PWD/$D/lib:/usr/local/cuda/lib64 NIGHTSHIFT_SHARED=$PWD/$D/shared
S=$(date +%s)
el() { echo "== [t=$(( $(date +%s) - S ))s] $*"; }
el "test_cuda*"
cuda_tests $OUT/test_cuda.log 170; echo "test_cuda rc=$CUDA_TESTS_RC"
grep -E "^(FAIL|skip)|swiglu|differ" $OUT/test_cuda.log | head; echo "$(grep -c '^ok' $OUT/test_cuda.log) ok"
el synth
timeout 90 $D/nightshift synth --shape llama-8b --type bf16 --vocab $D/shared/vocab/ggml-vocab-deepseek-llm.gguf -o /tmp/l8b.gguf 2>&1 | tail -1
el bench_cuda
timeout 100 $D/bench_cuda /tmp/l8b.gguf -L 1024 -B 64,256 -N 2048 --steps 8 2>&1 | tee $OUT/bench_cuda.log | grep -v '^ceil'
SEC="--section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats --section MemoryWorkloadAnalysis"
SEC="$SEC --section SchedulerStats --section InstructionStats --section ComputeWorkloadAnalysis"
echo "${NCU_SPECS:-attn_tc_split 20 1 -B_256;swiglu|rmsnorm 200 3 -B_64}" | tr ';' '\n' | while read -r spec; do
    set -- $spec
    el "ncu $1 (skip $2, count $3)"
    timeout 150 ncu --clock-control none -k regex:"$1" --launch-skip $2 --launch-count $3 $SEC \
        $D/bench_cuda /tmp/l8b.gguf -L 1024 ${4//_/ } -N 2048 --steps 2 > $OUT/ncu_$2.log 2>&1; echo "ncu rc=$?"
    grep -E "cuda_k_|Duration|DRAM Throughput|Memory Throughput|Achieved Occupancy|Theoretical Occupancy|Block Limit|Registers Per|Stall|Warp Cycles Per Issued|Compute \(SM\)|L1/TEX Hit|Dynamic Shared|Issued Ipc|Executed Instructions  |No Eligible|Pipe" $OUT/ncu_$2.log | head -80
done
el done
