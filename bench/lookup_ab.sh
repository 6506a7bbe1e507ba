#!/usr/bin/env bash
# bench/lookup_ab.sh — prompt-lookup decoding on vs off, interleaved (off, on, off, on, ...) so that a
# machine whose speed drifts affects both alike; prints each run and the medians.
#
#   bench/lookup_ab.sh REPS LOOKUP BENCH_ARGS...
#   e.g. bench/lookup_ab.sh 5 8 -m models/SmolLM2-135M-Instruct.Q4_1.gguf --workload copy --concurrency 1 --requests 4
#
# One concurrency level per call (the medians are per level). NS: the binary (default build/nightshift); on a GPU
# NS=build-cuda/nightshift and --backend cuda among the bench arguments (issue 17's table in bench/NOTES.md,
# 2026-12-02 10:35). Each run also prints what the draft rule did: proposals made, steps it held drafts back,
# and the engine's planning seconds.
set -eu
reps=$1 lookup=$2
shift 2
NS=${NS:-build/nightshift}
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for r in $(seq "$reps"); do
    for l in 0 "$lookup"; do
        "$NS" bench "$@" --lookup "$l" --json 2>/dev/null | sed "s/^/$l /" >>"$out"
    done
done
python3 - "$out" <<'EOF'
import json, sys, statistics
runs = {}
for line in open(sys.argv[1]):
    l, js = line.split(" ", 1)
    for lv in json.loads(js)["levels"]:
        runs.setdefault((lv["concurrency"], int(l)), []).append(lv)
keys = ["gen_tok_s", "decode_tok_s", "total_tok_s"]
for (c, l), lvs in sorted(runs.items()):
    for lv in lvs:
        print("c%-3d lookup %-2d gen %8.1f decode %8.1f total %8.1f tok/step %.2f acc %.3f proposals %d held %d "
              "plan %.3f s" % (c, l, lv["gen_tok_s"], lv["decode_tok_s"], lv["total_tok_s"], lv["tokens_per_step"],
              lv["draft_acceptance"], lv["proposals"], lv["draft_held_steps"], lv["plan_s"]))
for c in sorted({c for c, _ in runs}):
    med = {l: {k: statistics.median(lv[k] for lv in lvs) for k in keys + ["tokens_per_step", "draft_acceptance"]}
           for (cc, l), lvs in runs.items() if cc == c}
    off, on = med[0], [v for l, v in med.items() if l][0]
    print("c%d medians: gen %.1f -> %.1f (x%.3f), decode %.1f -> %.1f (x%.3f), total %.1f -> %.1f (x%.3f); "
          "tok/step %.2f, acceptance %.3f" % (c, off["gen_tok_s"], on["gen_tok_s"], on["gen_tok_s"] / off["gen_tok_s"],
          off["decode_tok_s"], on["decode_tok_s"], on["decode_tok_s"] / max(off["decode_tok_s"], 1e-9),
          off["total_tok_s"], on["total_tok_s"], on["total_tok_s"] / off["total_tok_s"], on["tokens_per_step"],
          on["draft_acceptance"]))
EOF
