#!/bin/bash
# bench/gpu_sample.sh — one device call for greedy draws on the device (the backend op sample): test_cuda*,
# stories260K `run` cuda vs cpu, then `nightshift bench` on synth llama-8b bf16 (vocab 102,400) at 1,024 in /
# 300 out: c64 with draws on the device, c64 with NIGHTSHIFT_CUDA_SAMPLING=host (every logit row to the host,
# as before), then c256 on the device. Budget ~480 s. Carried folder tmp/cuda as for gpu_e2e.sh.
# Usage (device): bash bench/gpu_sample.sh  (logs under $OUT)
set -u
. "$(dirname "$0")/cuda_tests.sh" # cuda_tests: every D/test_cuda* binary
D=tmp/cuda
export LD_LIBRARY_PATH=$PWD/$D/lib:/usr/local/cuda/lib64 NIGHTSHIFT_SHARED=$PWD/$D/shared
S=$(date +%s)
el() { echo "== [t=$(( $(date +%s) - S ))s] $*"; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
el "test_cuda*"
cuda_tests $OUT/test_cuda.log 170; echo "test_cuda rc=$CUDA_TESTS_RC"
grep -E "^(FAIL|skip|ok)|differ|concurrency" $OUT/test_cuda.log | head -40
el run stories.txt cuda vs cpu
M=$D/shared/models/stories260K.gguf
for b in cuda cpu; do
    $D/nightshift run $D/stories.txt -o /tmp/st_$b.jsonl -m $M --backend $b --temperature 0 --max-tokens 64 --repeat-penalty 1.2 2>&1 | tail -1
done
python3 - <<'PY'
import json
def texts(p): return {o["custom_id"]: o["response"]["body"]["choices"][0]["text"] for o in map(json.loads, open(p))}
a, b = texts("/tmp/st_cuda.jsonl"), texts("/tmp/st_cpu.jsonl")
print(f"{len(a)} results on cuda, {len(b)} on cpu, {sum(a[k] == b.get(k) for k in a)} identical")
PY
el synth
timeout 90 $D/nightshift synth --shape llama-8b --type bf16 --vocab $D/shared/vocab/ggml-vocab-deepseek-llm.gguf -o /tmp/l8b.gguf 2>&1 | tail -1
B="$D/nightshift bench -m /tmp/l8b.gguf --backend cuda --prompt-len 1024 --gen-len 300"
el bench c64, draws on the device
timeout 100 $B --concurrency 64 2>&1 | tee $OUT/c64_dev.log | grep -v "^\s*$" | tail -6
el bench c64, NIGHTSHIFT_CUDA_SAMPLING=host
NIGHTSHIFT_CUDA_SAMPLING=host timeout 100 $B --concurrency 64 2>&1 | tee $OUT/c64_host.log | grep -v "^\s*$" | tail -6
el bench c256, draws on the device
timeout 150 $B --concurrency 256 2>&1 | tee $OUT/c256_dev.log | grep -v "^\s*$" | tail -6
nvidia-smi --query-gpu=memory.used --format=csv,noheader
el done
