#!/usr/bin/env bash
# bench/run_bench.sh — benchmarks of `nightshift run` (issue 5). Results go to bench/NOTES.md by hand.
#
#   bench/run_bench.sh backlog N LONG OUT.jsonl   write a backlog of N short story prompts (simple JSONL);
#                                                 LONG=1 mixes in prompt lengths from 5 to ~250 tokens
#   bench/run_bench.sh run BACKLOG [run flags]    one fresh `nightshift run` on stories260K; prints the
#                                                 record's time split, throughput and store+plan share
#   bench/run_bench.sh sort BACKLOG REPS [flags]  ascending vs descending vs input order, REPS times each,
#                                                 interleaved (the machine is shared and noisy)
#
# Environment: NS (binary, default build/nightshift), MODEL (default ../shared/models/stories260K.gguf).
set -eu
cd "$(dirname "$0")/.."
NS=${NS:-build/nightshift}
MODEL=${MODEL:-../shared/models/stories260K.gguf}
tmp=${TMPDIR:-/tmp}/ns_run_bench
mkdir -p "$tmp"

make_backlog() {
    python3 - "$@" <<'PY'
import json, random, sys
n, long_mix, path = int(sys.argv[1]), sys.argv[2] == "1", sys.argv[3]
rnd = random.Random(1)
names = ["Lily", "Tom", "Max", "Sue", "Ben", "Mia", "Sam", "Anna", "Tim", "Lucy", "the dog", "the cat", "a girl", "a boy"]
verbs = ["went to", "saw", "found", "played in", "looked at", "ran to", "liked", "wanted"]
objs = ["the park", "a big tree", "a red ball", "the sea", "a little bird", "the garden", "a toy", "the sun", "a cake"]
def sentence():
    return "%s %s %s." % (rnd.choice(names).capitalize(), rnd.choice(verbs), rnd.choice(objs))
with open(path, "w") as f:
    for i in range(n):
        k = rnd.random()
        if long_mix and k < 0.5:
            p = " ".join(sentence() for _ in range(rnd.randint(1, 40)))
        elif k < 0.3:
            p = "Once upon a time, %s %s %s" % (rnd.choice(names), rnd.choice(verbs), rnd.choice(objs))
        else:
            p = sentence()
        f.write(json.dumps({"id": "q%06d" % i, "prompt": p}) + "\n")
PY
}

one_run() {
    local backlog=$1
    shift
    rm -f "$tmp/out.jsonl"*
    /usr/bin/time -o "$tmp/time" -f "%e %U %S %M" "$NS" run "$backlog" -m "$MODEL" -o "$tmp/out.jsonl" -q "$@"
    read -r t_wall t_user t_sys rss_kib <"$tmp/time"
    echo -n "cpu $(awk "BEGIN{printf \"%.2f\", $t_user + $t_sys}") s | "
    python3 - "$tmp/out.jsonl.record.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
t, th, c = r["time"], r["throughput"], r["counts"]
print("wall %.2f s | parse %.3f plan %.3f store %.3f output %.3f engine %.2f | store+plan+output %.2f%% | "
      "prompt %.0f gen %.0f total %.0f tok/s | %d done, %d folded | p50 %.3f p95 %.3f s | rss %.0f MiB" % (
      t["wall_s"], t["parse_s"], t["plan_s"], t["store_s"], t["output_s"], t["engine_s"],
      100 * t["store_and_plan_fraction"], th["prompt_tok_s"], th["gen_tok_s"], th["total_tok_s"], c["done"],
      c["folded_duplicates"], r["latency_s"]["p50"], r["latency_s"]["p95"], r["memory"]["peak_rss_bytes"] / 2**20))
PY
}

case "${1:-}" in
backlog) make_backlog "$2" "$3" "$4" ;;
run)
    b=$2
    shift 2
    one_run "$b" "$@"
    ;;
sort)
    b=$2 reps=$3
    shift 3
    for r in $(seq 1 "$reps"); do
        for s in ascending descending input; do
            echo -n "rep $r sort $s: "
            one_run "$b" --sort "$s" "$@" 2>&1 | grep wall | tail -1
        done
    done
    ;;
*)
    sed -n '2,12p' "$0"
    exit 2
    ;;
esac
