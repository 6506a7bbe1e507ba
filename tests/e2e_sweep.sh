#!/usr/bin/env bash
# e2e_sweep — `nightshift sweep` on stories260K: a small stratified sample at a few levels; the table, the CSV,
# JSON and SVG files, a recommended `nightshift run` command that runs as printed, nothing written beside
# the backlog; clear errors for bad flags.
. tests/lib.sh
M=$SHARED/models/stories260K.gguf
B=$e2e_tmp/backlog.jsonl
python3 - "$B" <<'EOF2'
import json, random, sys
r = random.Random(5)
w = "once upon a time there was a little girl named lily she liked to play with her cat in the park".split()
with open(sys.argv[1], "w") as f:
    for i in range(120):
        n = r.choice([2, 6, 12, 24, 48])
        f.write(json.dumps({"id": "q%d" % i, "prompt": " ".join(r.choice(w) for _ in range(n)), "max_tokens": 24}) + "\n")
    f.write("not json\n")
EOF2
mkdir -p "$e2e_tmp/cwd"
before=$(ls "$e2e_tmp" | sort)
out=$(cd "$e2e_tmp/cwd" && "$NS" sweep "$B" -m "$M" --sample 24 --concurrency 1,2,4 --point-seconds 0.5 \
    --out "$e2e_tmp/sw" --temperature 0 2>&1)
rc=$?
if [ $rc -eq 0 ] && echo "$out" | grep -q "24 of 120 requests" && echo "$out" | grep -Eq "^ +1 +[0-9]+ " &&
    echo "$out" | grep -q "nightshift run .*backlog.jsonl -m .*--max-seqs [124] --temperature 0 -o backlog.results.jsonl" &&
    echo "$out" | grep -q "^  confidence: " && echo "$out" | grep -Eq "^ +2 +[0-9]+ .* 3$"; then
    ok sweep_table
else
    fail sweep_table "rc=$rc: $out"
fi
if python3 - "$e2e_tmp/sw" <<'EOF2'
import csv, json, sys
p = sys.argv[1]
rows = list(csv.DictReader(open(p + ".csv")))
d = json.load(open(p + ".json"))
assert len(rows) == len(d["points"]) >= 1, rows
assert [int(r["concurrency"]) for r in rows] == [q["concurrency"] for q in d["points"]]
for q in d["points"]:
    assert q["total_tok_s"] > 0 and q["gen_tok_s"] > 0 and q["peak_rss_bytes"] > 0 and q["requests"] >= 1, q
    assert q["latency_p95_s"] >= q["latency_p50_s"] >= 0 and q["failed"] == 0, q
assert d["points"][0]["rel_cost"] == 1.0
for r, q in zip(rows, d["points"]):  # each point measured at least twice, its spread reported
    assert int(r["runs"]) >= 2 and len(q["run_total_tok_s"]) == q["runs"], q
    assert q["total_tok_s_lo"] <= q["total_tok_s_hi"] and q["spread"] >= 0, q
    assert abs(float(r["spread"]) - q["spread"]) < 1e-3, (r, q)
assert d["confidence"] and isinstance(d["confident"], bool) and d["auto"] is False and d["auto_max_seqs"] >= 1
assert d["sampled"] == 24 and d["usable_lines"] == 120
rec = d["points"][d["recommended"]]
best = max(q["total_tok_s"] for q in d["points"] if not q["over_headroom"])
assert rec["total_tok_s"] >= 0.95 * best
assert "--max-seqs %d" % rec["concurrency"] in d["command"]
svg = open(p + ".svg").read()
assert svg.startswith("<svg ") and svg.rstrip().endswith("</svg>") and "knee: %d" % rec["concurrency"] in svg
assert "nightshift sweep: backlog.jsonl" in svg
EOF2
then ok sweep_files; else fail sweep_files "$(ls "$e2e_tmp")"; fi
# nothing beside the backlog nor in the working directory
after=$(ls "$e2e_tmp" | grep -v '^sw\.' | sort)
if [ "$before" = "$after" ] && [ -z "$(ls "$e2e_tmp/cwd")" ]; then ok sweep_writes_nothing_else; else
    fail sweep_writes_nothing_else "before: $before after: $after"; fi
# the recommended command runs as printed
cmd=$(echo "$out" | grep "^  nightshift run" | sed 's/^  nightshift //')
if (cd "$e2e_tmp/cwd" && eval "\"$NS\" $cmd --quiet" >/dev/null 2>&1) && [ "$(wc -l <"$e2e_tmp/cwd/backlog.results.jsonl")" = 120 ]; then
    ok sweep_command_runs
else
    fail sweep_command_runs "$cmd"
fi
# token budgets: every level runs each; the command names the recommended budget
out=$("$NS" sweep "$B" -m "$M" --sample 16 --concurrency 2,4 --max-batch-tokens 64,256 --point-seconds 0.3 \
    --out "$e2e_tmp/mbt" 2>&1)
if [ "$(grep -c . "$e2e_tmp/mbt.csv")" = 5 ] && echo "$out" | grep -Eq "^ +4 +256 " &&
    echo "$out" | grep -Eq "nightshift run .* --max-seqs [24] --max-batch-tokens (64|256) "; then
    ok sweep_token_budgets
else
    fail sweep_token_budgets "$out"
fi
# -o / --output is every command's output flag; --out (the older spelling) still works: the same files
for spell in -o --output; do
    if (cd "$e2e_tmp/cwd" && "$NS" sweep "$B" -m "$M" --sample 8 --concurrency 1 --point-seconds 0.2 \
        $spell "$e2e_tmp/o$spell" --temperature 0 >/dev/null 2>&1) && [ -s "$e2e_tmp/o$spell.csv" ] && [ -s "$e2e_tmp/o$spell.json" ] &&
        [ -s "$e2e_tmp/o$spell.svg" ]; then
        ok "sweep_output_flag$spell"
    else
        fail "sweep_output_flag$spell" "no $e2e_tmp/o$spell.{csv,json,svg}"
    fi
done
expect_err sweep_batch_list_range 2 "--max-batch-tokens expects an integer in \[1, 65536\]" \
    "$NS" sweep "$B" -m "$M" --batch 0
expect_err sweep_bad_levels 2 "concurrency" "$NS" sweep "$B" -m "$M" --concurrency 1,x
expect_err sweep_no_backlog 2 "no backlog" "$NS" sweep -m "$M"
expect_err sweep_unknown_flag 2 "unknown option" "$NS" sweep "$B" --frobnicate
exit $E2E_FAILED
