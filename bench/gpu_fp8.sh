#!/bin/bash
# bench/gpu_fp8.sh — one device call for issue 31 (FP8 on Hopper): BF16 and FP8 weights side by side in the
# same call, on the same card. Carried folder D (default tmp/cuda, bench/gpu_carry.sh fills it). Phases:
#   tests   every D/test_cuda* binary (bench/cuda_tests.sh; SKIP_TESTS=1 skips); their FP8 lines printed
#   ppl     `nightshift perplexity` of stories260K on stories.txt: cpu, cuda bf16 (its F32 matrices stay
#           F32: the exact path), cuda fp8; and of every GGUF in D/models/ (cpu, cuda, cuda fp8)
#   synth   synth --shape SHAPE (llama-8b) --type bf16, unless an earlier call on this machine left it
#   bench   `nightshift bench` 1,024 in / 300 out, --lookup 0: concurrency 1 (C1_REQS requests) for each of
#           C1_CONFIGS and BEST (256, BEST_REQS requests) for each of CONFIGS, interleaved by level; a config
#           is NAME:FLAGS, configs separated by commas (default bf16, fp8 weights, fp8 weights + fp8 KV)
#   profile NIGHTSHIFT_CUDA_PROFILE=1 at BEST with PROF_REQS requests per config: device ms a step by phase
# Usage (device): bash bench/gpu_fp8.sh
# env: D OUT SHAPE BEST BEST_REQS C1_REQS PROF_REQS CONFIGS C1_CONFIGS SKIP_TESTS SKIP_PPL
set -u
. "$(dirname "$0")/cuda_tests.sh" # cuda_tests: every D/test_cuda* binary
D=${D:-tmp/cuda} OUT=${OUT:-/tmp/gpu} SHAPE=${SHAPE:-llama-8b} BEST=${BEST:-256} BEST_REQS=${BEST_REQS:-512}
C1_REQS=${C1_REQS:-2} PROF_REQS=${PROF_REQS:-0}
CONFIGS=${CONFIGS:-bf16:--gpu-weights bf16,fp8:--gpu-weights fp8,fp8kv:--gpu-weights fp8 --kv-type fp8}
C1_CONFIGS=${C1_CONFIGS:-bf16:--gpu-weights bf16,fp8:--gpu-weights fp8}
case $D in /*) ;; *) D=$PWD/$D ;; esac
export LD_LIBRARY_PATH=$D/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-} NIGHTSHIFT_SHARED=$D/shared
NS=$D/nightshift MODEL=/tmp/nightshift-$SHAPE-bf16.gguf
S=$(date +%s)
el() { echo "== [t=$(($(date +%s) - S)) s] $*"; }
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
echo "commit: $(cat "$D/COMMIT" 2>/dev/null || echo unknown)"
if [ "${SKIP_TESTS:-0}" != 1 ]; then
    el "test_cuda*"
    cuda_tests "$OUT/test_cuda.log" 200
    echo "test_cuda rc=$CUDA_TESTS_RC: $(grep -c '^ok' "$OUT/test_cuda.log") ok, $(grep -c '^FAIL' "$OUT/test_cuda.log") failed"
    grep -E '^FAIL|fp8' "$OUT/test_cuda.log" | cut -c1-220
fi
if [ "${SKIP_PPL:-0}" != 1 ]; then
el perplexity
ppl() { # ppl NAME MODEL TEXT FLAGS...
    local name=$1 m=$2 t=$3
    shift 3
    timeout 120 "$NS" perplexity -m "$m" -f "$t" --json "$@" >"$OUT/ppl_$name.json" 2>"$OUT/ppl_$name.err"
    echo "$name: rc=$? $(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print("PPL %.4f +/- %.4f, %d tokens, %.0f tok/s" % (d["ppl"], d["ppl_error"], d["tokens_scored"], d["tokens_per_second"]))' "$OUT/ppl_$name.json" 2>&1 | tail -1)"
}
st=$D/shared/models/stories260K.gguf
ppl stories_cpu "$st" "$D/stories.txt" --backend cpu --ctx 256
ppl stories_cuda "$st" "$D/stories.txt" --backend cuda --ctx 256
ppl stories_cuda_fp8 "$st" "$D/stories.txt" --backend cuda --ctx 256 --gpu-weights fp8
for m in "$D"/models/*.gguf; do
    [ -s "$m" ] || continue
    b=$(basename "$m" .gguf)
    ppl "${b}_cpu" "$m" README.md --backend cpu
    ppl "${b}_cuda" "$m" README.md --backend cuda
    ppl "${b}_cuda_fp8" "$m" README.md --backend cuda --gpu-weights fp8
done
fi
el "synth $SHAPE bf16"
[ -s "$MODEL" ] || timeout 200 "$NS" synth --shape "$SHAPE" --type bf16 -o "$MODEL" 2>&1 | tail -1
bench() { # bench NAME FLAGS...: one level; prints a line
    local name=$1
    shift
    timeout 300 "$NS" bench -m "$MODEL" --backend cuda --prompt-len 1024 --gen-len 300 --lookup 0 --json "$@" \
        >"$OUT/bench_$name.json" 2>"$OUT/bench_$name.err" </dev/null
    local rc=$?
    grep -E 'cuda backend: .*weights|cuda profile' "$OUT/bench_$name.err" | cut -c1-400
    python3 -c 'import json,sys; l=json.load(open(sys.argv[1]))["levels"][0]; print("%s: c%d %d requests (%d failed) %.2f s: output %.1f tok/s, total %.1f tok/s, decode %.1f tok/s" % (sys.argv[2], l["concurrency"], l["requests"], l["failed"], l["wall_s"], l["gen_tok_s"], l["total_tok_s"], l.get("decode_tok_s", 0)))' "$OUT/bench_$name.json" "$name" 2>&1 | tail -1
    [ $rc = 0 ] || echo "$name: rc=$rc"
}
# each NAME:FLAGS of a comma-separated list, as "NAME FLAGS" lines
configs() { echo "$1" | tr ',' '\n' | sed 's/:/ /'; }
# shellcheck disable=SC2086 # flags are lists
configs "$C1_CONFIGS" | while read -r name flags; do
    el "c1 $name"; bench "c1_$name" --concurrency 1 --requests "$C1_REQS" $flags
done
configs "$CONFIGS" | while read -r name flags; do
    el "c$BEST $name"; bench "c${BEST}_$name" --concurrency "$BEST" --requests "$BEST_REQS" $flags
done
if [ "$PROF_REQS" -gt 0 ]; then
    configs "$CONFIGS" | while read -r name flags; do
        el "profile c$BEST $name"
        NIGHTSHIFT_CUDA_PROFILE=1 bench "prof_$name" --concurrency "$BEST" --requests "$PROF_REQS" $flags
    done
fi
el done
