#!/bin/bash
# bench/gpu.sh — THE device call of issue 10 (it replaces gpu_e2e.sh): everything the issue measures on the
# H200, in one command of at most 600 s, each phase timed and fitted into BUDGET.
#
# Runs from the repository root on the GPU machine, with a carried folder D (default tmp/cuda, git-ignored;
# bench/gpu_carry.sh fills it) holding, built here: nightshift and the test_cuda* binaries (`make CUDA=1
# BUILD=build-cuda`), lib/ (the Debian .so files they link), shared/ (models/stories260K.gguf,
# testdata/golden, vocab/), stories.txt (examples/), and optionally COMMIT (the commit they were built
# from; printed). Phases, in order:
#   gpu      name, driver, memory; the settings used
#   peaks    bench/gpu_peaks.py: BF16 GEMM rate (8192^3, median of 20) and device copy bandwidth (4 GiB,
#            read + written), the ceilings of the report
#   tests    every D/test_cuda* binary (bench/cuda_tests.sh): ok / FAIL / skip counts summed over them and
#            the FAIL lines (SKIP_TESTS=1 skips)
#   e2e      `run` of stories.txt on stories260K, greedy, cuda vs cpu: identical texts? (E2E=0 skips)
#   synth    `synth --shape SHAPE --type TYPE` (llama-8b bf16: 128,256 token rows) to MODEL, unless an
#            earlier call on this (warm) machine left it there
#   bench    `nightshift bench` PROMPT / GEN tokens (1,024 / 300, random ids, EOS ignored) at LEVELS (1,64;
#            2 x level requests each) with LEVEL_EXTRA flags (default `--lookup 0`: batch-1 decode is then one
#            token a step, the terms of the bandwidth limit; with lookup, greedy continuations of random
#            weights repeat themselves and drafts inflate it), peak device memory sampled by nvidia-smi
#            every 0.5 s
#   steps    bench_cuda's step timings at PROMPT context, batches 1, 64 and BEST (STEPS=1 runs it; needs
#            D/bench_cuda from `make CUDA=1 BUILD=build-cuda build-cuda/bench/bench_cuda`)
#   hf       bench/hf_generate.py: transformers' static generate in the same shape, batch HF_BATCH (256),
#            random BF16 weights (SKIP_HF=1 skips)
#   best     `nightshift bench` at concurrency BEST (256) with BEST_REQS (2,048) requests — reduced, and said
#            so, when the rate measured at the highest LEVEL says they would not finish in the time left
#            (FIT=0 keeps BEST_REQS and lets the timeout cut the run; SKIP_BEST=1 skips)
#   report   bench/gpu_report.py: per-request FLOPs, output and total tok/s, % of the roofline, batch-1
#            decode against the bandwidth limit, peak memory, nightshift vs HF
# Logs and JSON under OUT (default $OUT, else /tmp/gpu); the model stays in /tmp (never under OUT).
#
# Usage (device):  bash bench/gpu.sh
#   the full measurement of ~2,000 requests at the best level: SKIP_TESTS=1 E2E=0 bash bench/gpu.sh
# env: D OUT BUDGET (580 s) SHAPE (llama-8b) TYPE (bf16) VOCAB (a --vocab GGUF; default built-in, padded)
#      MODEL (/tmp/nightshift-SHAPE-TYPE[-VOCAB].gguf) BACKEND (cuda) PROMPT GEN LEVELS LEVEL_EXTRA BEST BEST_REQS FIT
#      EXTRA (more bench flags, e.g. "--lookup 0") HF_BATCH HF_COMPILE (0: transformers' auto-compile off,
#      see hf_generate.py) HF_TIMEOUT (200) TEST_TIMEOUT (150) SKIP_TESTS E2E SKIP_HF SKIP_BEST STEPS DEVICE
set -u
. "$(dirname "$0")/cuda_tests.sh" # cuda_tests: every D/test_cuda* binary
S=$(date +%s)
D=${D:-tmp/cuda}
OUT=${OUT:-/tmp/gpu}
BUDGET=${BUDGET:-580}
SHAPE=${SHAPE:-llama-8b} TYPE=${TYPE:-bf16} VOCAB=${VOCAB:-} BACKEND=${BACKEND:-cuda} DEVICE=${DEVICE:-0}
MODEL=${MODEL:-/tmp/nightshift-$SHAPE-$TYPE${VOCAB:+-$(basename "$VOCAB" .gguf)}.gguf}
PROMPT=${PROMPT:-1024} GEN=${GEN:-300} LEVELS=${LEVELS:-1,64} EXTRA=${EXTRA:-} LEVEL_EXTRA=${LEVEL_EXTRA:---lookup 0}
BEST=${BEST:-256} BEST_REQS=${BEST_REQS:-2048} FIT=${FIT:-1}
HF_BATCH=${HF_BATCH:-256} HF_COMPILE=${HF_COMPILE:-0} HF_TIMEOUT=${HF_TIMEOUT:-200}
TEST_TIMEOUT=${TEST_TIMEOUT:-150} SKIP_TESTS=${SKIP_TESTS:-0} E2E=${E2E:-1} SKIP_HF=${SKIP_HF:-0}
SKIP_BEST=${SKIP_BEST:-0} STEPS=${STEPS:-0}
END=$((S + BUDGET))
mkdir -p "$OUT"
case $D in /*) ;; *) D=$PWD/$D ;; esac
export LD_LIBRARY_PATH=$D/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-} NIGHTSHIFT_SHARED=$D/shared
NS=$D/nightshift
PH=$S
rem() { echo $((END - $(date +%s))); }
# phase NAME: closes the previous phase (its seconds) and opens NAME
phase() {
    local now
    now=$(date +%s)
    echo "== [t=$((now - S)) s; previous phase $((now - PH)) s] $*"
    PH=$now
}
# cap A B: the smaller of A and B, at least 5
cap() { local x=$(($1 < $2 ? $1 : $2)); echo $((x < 5 ? 5 : x)); }
# json_ok FILE: FILE holds a JSON object
json_ok() { [ -s "$1" ] && python3 -c 'import json,sys; json.load(open(sys.argv[1]))' "$1" 2>/dev/null; }

phase gpu
nvidia-smi -i "$DEVICE" --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv,noheader
echo "commit: $(cat "$D/COMMIT" 2>/dev/null || git rev-parse --short HEAD 2>/dev/null || echo unknown)"
echo "settings: SHAPE=$SHAPE TYPE=$TYPE VOCAB=${VOCAB:-built-in} MODEL=$MODEL BACKEND=$BACKEND PROMPT=$PROMPT" \
    "GEN=$GEN LEVELS=$LEVELS BEST=$BEST BEST_REQS=$BEST_REQS FIT=$FIT EXTRA='$EXTRA' LEVEL_EXTRA='$LEVEL_EXTRA' HF_BATCH=$HF_BATCH" \
    "HF_COMPILE=$HF_COMPILE SKIP_TESTS=$SKIP_TESTS E2E=$E2E SKIP_HF=$SKIP_HF SKIP_BEST=$SKIP_BEST STEPS=$STEPS" \
    "BUDGET=$BUDGET"
[ -x "$NS" ] || { echo "no $NS: build with make CUDA=1 BUILD=build-cuda and carry $D"; exit 1; }

phase peaks
CUDA_VISIBLE_DEVICES=$DEVICE timeout 120 python3 bench/gpu_peaks.py --json "$OUT/peaks.json" 2>&1 | tail -4

if [ "$SKIP_TESTS" != 1 ]; then
    phase "tests (test_cuda*, timeout $TEST_TIMEOUT s in all)"
    cuda_tests "$OUT/test_cuda.log" "$TEST_TIMEOUT"
    echo "test_cuda rc=$CUDA_TESTS_RC: $(grep -c '^ok' "$OUT/test_cuda.log") ok, $(grep -c '^FAIL' "$OUT/test_cuda.log")" \
        "failed, $(grep -c '^skip' "$OUT/test_cuda.log") skipped"
    grep -E '^(FAIL|skip)' "$OUT/test_cuda.log" | cut -c1-300
fi

if [ "$E2E" = 1 ]; then
    phase "e2e: run stories.txt on stories260K, cuda vs cpu, greedy"
    for b in cuda cpu; do
        rm -f "$OUT"/st_$b.*
        timeout 60 "$NS" run "$D/stories.txt" -o "$OUT/st_$b.jsonl" -m "$D/shared/models/stories260K.gguf" \
            --backend $b --temperature 0 --max-tokens 64 >"$OUT/st_$b.log" 2>&1
        echo "run --backend $b rc=$?: $(tail -1 "$OUT/st_$b.log")"
    done
    python3 - "$OUT/st_cuda.jsonl" "$OUT/st_cpu.jsonl" <<'PY'
import json, sys
def texts(p):
    try:
        return {o["custom_id"]: o["response"]["body"]["choices"][0]["text"] for o in map(json.loads, open(p))}
    except (OSError, ValueError, KeyError) as ex:
        print(f"{p}: {ex}")
        return {}
a, b = texts(sys.argv[1]), texts(sys.argv[2])
print(f"{len(a)} results on cuda, {len(b)} on cpu, {sum(a[k] == b.get(k) for k in a)} identical")
PY
fi

phase "synth $SHAPE $TYPE -> $MODEL"
if [ -s "$MODEL" ]; then
    echo "reusing $MODEL (written by an earlier call on this machine; rm it for a fresh one)"
else
    timeout "$(cap 240 $(($(rem) - 60)))" "$NS" synth --shape "$SHAPE" --type "$TYPE" ${VOCAB:+--vocab "$VOCAB"} \
        -o "$MODEL.part" 2>&1 | tail -2
    if [ "${PIPESTATUS[0]}" = 0 ]; then mv "$MODEL.part" "$MODEL"; else echo "synth failed"; rm -f "$MODEL.part"; fi
fi
rm -f "$OUT/info.json"
if [ -s "$MODEL" ] && ! "$NS" info --json "$MODEL" >"$OUT/info.json" 2>"$OUT/info.err"; then
    cat "$OUT/info.err"
    rm -f "$OUT/info.json"
fi
json_ok "$OUT/info.json" && python3 - "$OUT/info.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
h = d["hparams"]
print(f"model: {d['name']}, {h['block_count']} layers, n_embd {h['embedding_length']}, n_vocab {h['vocab_size']}, "
      f"{d['tensors']['bytes'] / 1e9:.2f} GB of weights")
PY

MEMPID=
mem_start() {
    nvidia-smi -i "$DEVICE" --query-gpu=memory.used --format=csv,noheader,nounits -lms 500 >"$1" 2>/dev/null &
    MEMPID=$!
}
mem_stop() { # prints the largest sample, in MiB
    kill "$MEMPID" 2>/dev/null
    wait "$MEMPID" 2>/dev/null
    sort -n "$1" | tail -1
}
# run_bench NAME TIMEOUT FLAGS...: one `nightshift bench --json` into OUT/bench_NAME.json; sets PEAK (MiB)
run_bench() {
    local name=$1 t=$2 rc
    shift 2
    mem_start "$OUT/mem_$name.log"
    # shellcheck disable=SC2086 # EXTRA is a list of flags
    timeout "$t" "$NS" bench -m "$MODEL" --backend "$BACKEND" --device "$DEVICE" --prompt-len "$PROMPT" \
        --gen-len "$GEN" --json $EXTRA "$@" >"$OUT/bench_$name.json" 2>"$OUT/bench_$name.err"
    rc=$?
    PEAK=$(mem_stop "$OUT/mem_$name.log")
    grep -v '^\s*$' "$OUT/bench_$name.err" | tail -4 | cut -c1-300
    echo "bench $name rc=$rc (timeout $t s); peak device memory ${PEAK:-?} MiB"
    json_ok "$OUT/bench_$name.json" && python3 - "$OUT/bench_$name.json" <<'PY'
import json, sys
for lv in json.load(open(sys.argv[1]))["levels"]:
    print(f"  c{lv['concurrency']}: {lv['requests']} requests ({lv['failed']} failed) in {lv['wall_s']:.2f} s: "
          f"{lv['gen_tok_s']:.1f} output tok/s, {lv['total_tok_s']:.1f} total tok/s, decode {lv['decode_tok_s']:.1f} "
          f"tok/s, {lv.get('tokens_per_step', 1):.2f} tokens/step")
PY
}

BENCHES=() MEMS=()
if [ -s "$OUT/info.json" ]; then
    phase "bench $PROMPT/$GEN at concurrency $LEVELS"
    hf_t=$([ "$SKIP_HF" = 1 ] && echo 0 || echo "$HF_TIMEOUT")
    # shellcheck disable=SC2086 # LEVEL_EXTRA is a list of flags
    run_bench levels "$(cap 240 $(($(rem) - hf_t - 30)))" --concurrency "$LEVELS" $LEVEL_EXTRA
    json_ok "$OUT/bench_levels.json" && BENCHES+=("$OUT/bench_levels.json") MEMS+=("$LEVELS=$PEAK")
else
    echo "no model: the bench phases are skipped"
fi

if [ "$STEPS" = 1 ] && [ -x "$D/bench_cuda" ] && [ -s "$OUT/info.json" ]; then
    phase "steps: bench_cuda, context $PROMPT, batches 1,64,$BEST"
    timeout "$(cap 120 $(($(rem) - 200)))" "$D/bench_cuda" "$MODEL" -L "$PROMPT" -B "1,64,$BEST" -N 2048 --steps 8 \
        >"$OUT/bench_cuda.log" 2>&1
    echo "bench_cuda rc=$?"
    grep -v '^\s*$' "$OUT/bench_cuda.log" | tail -20 | cut -c1-200
fi

if [ "$SKIP_HF" != 1 ]; then
    phase "hf: transformers static generate, batch $HF_BATCH, $PROMPT + $GEN tokens"
    CUDA_VISIBLE_DEVICES=$DEVICE timeout "$(cap "$HF_TIMEOUT" $(($(rem) - 20)))" python3 bench/hf_generate.py \
        --batch "$HF_BATCH" --prompt-len "$PROMPT" --gen-len "$GEN" --compile "$HF_COMPILE" --json "$OUT/hf.json" \
        >"$OUT/hf.log" 2>&1
    echo "hf rc=$?"
    grep -E '^hf:|Error|error' "$OUT/hf.log" | tail -8 | cut -c1-300
fi

if [ "$SKIP_BEST" != 1 ] && [ -s "$OUT/info.json" ]; then
    phase "best: concurrency $BEST"
    n=$BEST_REQS
    # the total tok/s of the highest level measured: a floor for BEST's rate (a larger batch is not slower)
    rate=$(json_ok "$OUT/bench_levels.json" && python3 -c 'import json,sys
lv = max(json.load(open(sys.argv[1]))["levels"], key=lambda l: l["concurrency"]); print(int(lv["total_tok_s"]))' \
        "$OUT/bench_levels.json")
    left=$(($(rem) - 40)) # load and report
    if [ "$FIT" = 1 ] && [ -n "$rate" ] && [ "$rate" -gt 0 ]; then
        fit=$((left * rate / (PROMPT + GEN) / BEST * BEST))
        if [ "$fit" -lt "$n" ]; then
            n=$fit
            echo "BEST_REQS $BEST_REQS would take ~$((BEST_REQS * (PROMPT + GEN) / rate)) s at $rate tok/s;" \
                "$left s are left: $n requests (SKIP_TESTS=1 E2E=0 SKIP_HF=1 leave room for more)"
        fi
    fi
    if [ "$n" -ge "$BEST" ]; then
        echo "BEST=$BEST BEST_REQS=$n"
        run_bench best "$(cap $(($(rem) - 15)) 100000)" --concurrency "$BEST" --requests "$n"
        json_ok "$OUT/bench_best.json" && BENCHES+=("$OUT/bench_best.json") MEMS+=("$BEST=$PEAK")
    else
        echo "too little time left for $BEST requests at concurrency $BEST: skipped"
    fi
fi

phase report
if [ -s "$OUT/info.json" ]; then
    args=(--info "$OUT/info.json" --prompt-len "$PROMPT" --gen-len "$GEN")
    json_ok "$OUT/peaks.json" && args+=(--peaks "$OUT/peaks.json")
    json_ok "$OUT/hf.json" && args+=(--hf "$OUT/hf.json")
    [ ${#BENCHES[@]} -gt 0 ] && args+=(--bench "${BENCHES[@]}" --mem "${MEMS[@]}")
    python3 bench/gpu_report.py "${args[@]}"
fi
phase "done ($(($(date +%s) - S)) s of the $BUDGET s budget)"
