#!/usr/bin/env bash
# bench/gpu_lookup.sh — issue 17's workloads on the GPU: prompt lookup off and on (`--lookup 0` / `--lookup 8`),
# interleaved in pairs so that a host whose speed drifts affects both alike; one line per run (what the draft rule
# saw: proposals, held steps, the timed steps' cost a token without / with drafts, the engine's planning and
# settling seconds), then each workload's pair ratios (gen tok/s on / off) and their median.
#
#   NS=build-cuda/nightshift SMOL=models/SmolLM2-135M-Instruct.Q4_1.gguf bench/gpu_lookup.sh [REPS]
#
# SMOL empty or missing: stories260K alone (from NIGHTSHIFT_SHARED or ../shared). c1 and c4 run twice, the c64
# workloads REPS times (default 3). Needs a GPU (--backend cuda).
set -u
NS=${NS:-build-cuda/nightshift}
SMOL=${SMOL:-}
ST=${NIGHTSHIFT_SHARED:-../shared}/models/stories260K.gguf
REPS=${1:-3}
out=$(mktemp)
trap 'rm -f "$out"' EXIT
one() { # WORKLOAD MODEL LOOKUP ARGS...: one run, one line (also into $out)
    local w=$1 m=$2 l=$3 line
    shift 3
    line=$("$NS" bench -m "$m" --backend cuda --json --lookup "$l" "$@" 2>/dev/null | python3 -c '
import json, sys
l = json.load(sys.stdin)["levels"][0]
print("gen %9.1f wall %6.3f steps %5d tok/step %.3f acc %.2f proposals %6d held %4d us/tok %.2f %.2f plan %.3f settle %.3f" % (
    l["gen_tok_s"], l["wall_s"], l["steps"], l["tokens_per_step"], l["draft_acceptance"], l["proposals"],
    l["draft_held_steps"], *l["timed_us_per_token"], l["plan_s"], l["settle_s"]))') || line="failed"
    printf "%-5s lookup %s %s\n" "$w" "$l" "$line" | tee -a "$out"
}
CP1="--workload copy --prompt-len 96 --gen-len 160 --concurrency 1 --requests 16"
CP4="--workload copy --prompt-len 96 --gen-len 160 --concurrency 4 --requests 32"
RA1="--prompt-len 128 --gen-len 128 --concurrency 1 --requests 8"
RA4="--prompt-len 128 --gen-len 128 --concurrency 4 --requests 32"
CP64="--workload copy --prompt-len 96 --gen-len 160 --concurrency 64 --requests 512"
RA64="--prompt-len 128 --gen-len 128 --concurrency 64 --requests 512"
ST64="--prompt-len 128 --gen-len 128 --concurrency 64 --requests 1024"
if [ -n "$SMOL" ] && [ -s "$SMOL" ]; then
    for r in 1 2; do
        for w in CP1 CP4 RA1 RA4; do for l in 0 8; do one "$w" "$SMOL" "$l" ${!w}; done; done
    done
fi
for r in $(seq "$REPS"); do
    for l in 0 8; do one ST64 "$ST" "$l" $ST64; done
    [ -n "$SMOL" ] && [ -s "$SMOL" ] || continue
    for w in CP64 RA64; do for l in 0 8; do one "$w" "$SMOL" "$l" ${!w}; done; done
done
python3 - "$out" <<'EOF'
import statistics, sys
runs = {}
for line in open(sys.argv[1]):
    f = line.split()
    if "gen" in f:
        runs.setdefault((f[0], f[2]), []).append(float(f[f.index("gen") + 1]))
for w in sorted({w for w, _ in runs}):
    off, on = runs.get((w, "0"), []), runs.get((w, "8"), [])
    r = [b / a for a, b in zip(off, on) if a > 0]
    if r:
        print("%-5s pairs on/off: %s; median %.3f" % (w, " ".join("%.3f" % x for x in r), statistics.median(r)))
EOF
