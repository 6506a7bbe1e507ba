#!/bin/bash
# bench/gpu_e2e.sh — one device call: the CUDA backend end to end through the registry (`--backend cuda`).
# Runs on the GPU machine from a carried folder D (default tmp/cuda) holding, built here with
# `make CUDA=1 BUILD=build-cuda`: nightshift, test_cuda, lib/ (the Debian libraries they link), shared/
# (stories260K, testdata/golden, the deepseek-llm vocab), stories.txt (examples/). Prints:
#   1. test_cuda (kernels and full steps against the CPU oracle, golden greedy, c1 vs c64);
#   2. `run` of examples/stories.txt on stories260K, greedy, cuda vs cpu: identical results?
#   3. `bench --backend cuda` on synth llama-8b bf16 (vocabulary from ggml-vocab-deepseek-llm.gguf, 102,400
#      tokens) at 1,024 prompt / 300 generated tokens, EOS ignored, concurrency LEVELS (2 x concurrency requests each).
# Usage (device): D=tmp/cuda LEVELS=1,64,256 bash bench/gpu_e2e.sh
set -u
D=${D:-tmp/cuda}
OUT=${OUT:-/tmp}
export LD_LIBRARY_PATH=$PWD/$D/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-} NIGHTSHIFT_SHARED=$PWD/$D/shared
NS=$PWD/$D/nightshift
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
echo "== test_cuda"
timeout 300 "$D/test_cuda" > "$OUT/test_cuda.log" 2>&1; echo "test_cuda rc=$?"
grep -E "^(FAIL|skip)" "$OUT/test_cuda.log"; echo "$(grep -c '^ok' "$OUT/test_cuda.log") ok"
echo "== run stories.txt on stories260K: cuda vs cpu (greedy)"
M=$D/shared/models/stories260K.gguf
for b in cuda cpu; do
    rm -f /tmp/st_$b.*
    "$NS" run "$D/stories.txt" -o /tmp/st_$b.jsonl -m "$M" --backend $b --temperature 0 --max-tokens 64 2>&1 | tail -2
done
python3 - <<'PY'
import json
def texts(p): return {o["custom_id"]: o["response"]["body"]["choices"][0]["text"] for o in map(json.loads, open(p))}
a, b = texts("/tmp/st_cuda.jsonl"), texts("/tmp/st_cpu.jsonl")
same = sum(a[k] == b.get(k) for k in a)
print(f"{len(a)} results on cuda, {len(b)} on cpu, {same} identical")
PY
echo "== bench: synth llama-8b bf16, 1024 in / 300 out"
t0=$(date +%s)
"$NS" synth --shape llama-8b --type bf16 --vocab "$D/shared/vocab/ggml-vocab-deepseek-llm.gguf" -o /tmp/l8b.gguf 2>&1 | tail -1
echo "synth in $(( $(date +%s) - t0 )) s"
timeout ${BENCH_TIMEOUT:-400} "$NS" bench -m /tmp/l8b.gguf --backend cuda --prompt-len 1024 --gen-len 300 \
    --concurrency "${LEVELS:-1,64,256}" 2>&1 | tee "$OUT/bench_8b.log"
nvidia-smi --query-gpu=memory.used --format=csv,noheader
rm -f /tmp/l8b.gguf
