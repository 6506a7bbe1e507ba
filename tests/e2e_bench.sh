#!/usr/bin/env bash
# e2e_bench — `nightshift bench` on stories260K: the table, --json, the shared-prefix cache, and clear
# errors (exit 2) for bad flags and budgets that cannot hold a request.
. tests/lib.sh
M=$SHARED/models/stories260K.gguf

out=$("$NS" bench -m "$M" --prompt-len 16 --gen-len 8 --concurrency 1,4 --requests 4 2>&1)
rc=$?
if [ $rc -eq 0 ] && echo "$out" | grep -q "^KV pool: .* tokens" && echo "$out" | grep -Eq "^ +1 +4 " &&
    echo "$out" | grep -Eq "^ +4 +4 " && echo "$out" | grep -q "gen tok/s"; then
    ok bench_table
else
    fail bench_table "rc=$rc: $out"
fi

json=$("$NS" bench -m "$M" --prompt-len 16 --gen-len 8 --concurrency 2,3 --json 2>"$e2e_tmp/err")
if python3 - "$json" <<'EOF'
import json, sys
d = json.loads(sys.argv[1])
lv = d["levels"]
assert [l["concurrency"] for l in lv] == [2, 3], lv
assert [l["requests"] for l in lv] == [4, 6], lv          # default: 2 x concurrency
for l in lv:
    assert l["gen_tokens"] == l["requests"] * 8, l         # EOS ignored: exactly gen-len each
    assert l["prompt_tokens"] == l["requests"] * 16, l
    assert l["total_tok_s"] > 0 and l["wall_s"] > 0 and l["peak_kv_tokens"] > 0 and l["peak_rss_bytes"] > 0
    assert l["failed"] == 0
assert d["kv_tokens"] >= 6 * 32 and d["kv_block"] == 16
EOF
then ok bench_json; else fail bench_json "$json $(cat "$e2e_tmp/err")"; fi

# --reps: every level runs R times; it reports its median run and the list of all runs' total tok/s
json=$("$NS" bench -m "$M" --prompt-len 16 --gen-len 8 --concurrency 1,3 --requests 3 --reps 3 --json 2>"$e2e_tmp/err")
table=$("$NS" bench -m "$M" --prompt-len 16 --gen-len 8 --concurrency 2 --requests 2 --reps 2 2>&1)
if python3 - "$json" <<'EOF'
import json, sys
d = json.loads(sys.argv[1])
for l in d["levels"]:
    runs = l["total_tok_s_runs"]
    assert len(runs) == 3 and runs == sorted(runs), l
    assert abs(l["total_tok_s"] - runs[1]) <= 1e-6 * runs[1], l     # the median run's own numbers
    assert l["gen_tokens"] == 3 * 8 and l["requests"] == 3 and l["failed"] == 0, l
EOF
then ok bench_reps_json; else fail bench_reps_json "$json $(cat "$e2e_tmp/err")"; fi
if echo "$table" | grep -q "total range" && echo "$table" | grep -Eq "^ +2 +2 .* [0-9.]+-[0-9.]+$"; then ok bench_reps_table
else fail bench_reps_table "$table"; fi

# shared prefix: later requests hit the cache; without the cache nothing is cached
json=$("$NS" bench -m "$M" --shared-prefix 64 --prompt-len 8 --gen-len 4 --concurrency 4 --requests 16 --max-batch-tokens 64 --json 2>/dev/null)
json2=$("$NS" bench -m "$M" --shared-prefix 64 --prompt-len 8 --gen-len 4 --concurrency 4 --requests 16 --max-batch-tokens 64 --no-prefix-cache --json 2>/dev/null)
if python3 - "$json" "$json2" <<'EOF'
import json, sys
a = json.loads(sys.argv[1])["levels"][0]
b = json.loads(sys.argv[2])["levels"][0]
assert a["prompt_tokens_cached"] >= 12 * 64, a
assert b["prompt_tokens_cached"] == 0, b
assert a["prompt_tokens_computed"] * 3 < b["prompt_tokens_computed"], (a, b)
EOF
then ok bench_shared_prefix; else fail bench_shared_prefix "$json / $json2"; fi

# --flag=value: bench's own flags and the engine flags, the same as "--flag value"
json=$("$NS" bench --model="$M" --prompt-len=12 --gen-len=3 --shared-prefix=4 --concurrency=2,1 --requests=3 --reps=2 \
    --seed=9 --max-batch-tokens=32 --kv-block=32 --no-prefix-cache --json 2>"$e2e_tmp/err")
if python3 - "$json" <<'EOF'
import json, sys
d = json.loads(sys.argv[1])
assert (d["prompt_len"], d["gen_len"], d["shared_prefix"]) == (12, 3, 4), d
assert (d["max_batch_tokens"], d["kv_block"], d["prefix_cache"]) == (32, 32, False), d
assert [l["concurrency"] for l in d["levels"]] == [2, 1], d["levels"]
for l in d["levels"]:
    assert l["requests"] == 3 and len(l["total_tok_s_runs"]) == 2 and l["gen_tokens"] == 9, l
EOF
then ok bench_flag_equals_value; else fail bench_flag_equals_value "$json $(cat "$e2e_tmp/err")"; fi
# the copy workload (chat-less model: plain prompts) with prompt lookup: same tokens generated with it off;
# the table and the JSON give tokens per step and the draft acceptance
json=$("$NS" bench -m "$M" --workload copy --prompt-len 24 --gen-len 16 --concurrency 1,2 --requests 2 --lookup 0 --json 2>/dev/null)
json2=$("$NS" bench -m "$M" --workload copy --prompt-len 24 --gen-len 16 --concurrency 1,2 --requests 2 --lookup 4 --lookup-always --json 2>/dev/null)
table=$("$NS" bench -m "$M" --workload copy --prompt-len 24 --gen-len 16 --concurrency 1 --requests 2 --lookup 4 2>&1)
if python3 - "$json" "$json2" <<'EOF'
import json, sys
a, b = json.loads(sys.argv[1]), json.loads(sys.argv[2])
assert a["workload"] == "copy" and a["lookup"] == 0 and b["lookup"] == 4 and not b["lookup_adaptive"], (a, b)
for la, lb in zip(a["levels"], b["levels"]):
    assert la["gen_tokens"] == lb["gen_tokens"] and la["prompt_tokens"] == lb["prompt_tokens"] > 2 * 24, (la, lb)
    assert la["tokens_per_step"] == 1.0 and la["draft_tokens"] == 0, la
    assert lb["draft_tokens"] > 0 and 0 <= lb["draft_acceptance"] <= 1 and lb["seq_steps"] > 0, lb
EOF
then ok bench_copy_lookup_json; else fail bench_copy_lookup_json "$json / $json2"; fi
if echo "$table" | grep -q "copy workload" && echo "$table" | grep -q "tok/step draft acc" &&
    echo "$table" | grep -Eq "^ +1 +2 .* [0-9.]+%$"; then ok bench_copy_lookup_table; else fail bench_copy_lookup_table "$table"; fi

# bad flags: exit 2 with a message that names the problem
base=("$NS" bench -m "$M" --prompt-len 8 --gen-len 4 --concurrency 1)
expect_err bench_concurrency_zero 2 "--concurrency" "${base[@]}" --concurrency 0
expect_err bench_concurrency_garbage 2 "--concurrency" "${base[@]}" --concurrency 1,,4
expect_err bench_concurrency_huge 2 "--concurrency" "${base[@]}" --concurrency 100000
expect_err bench_kv_memory_zero 2 "one request needs" "${base[@]}" --kv-memory 0
expect_err bench_kv_memory_garbage 2 "--kv-memory" "${base[@]}" --kv-memory lots
expect_err bench_kv_memory_too_small 2 "holds 16 KV tokens" "${base[@]}" --kv-memory 10K --prompt-len 40
expect_err bench_kv_block_not_pow2 2 "power of two" "${base[@]}" --kv-block 7
expect_err bench_kv_block_huge 2 "--kv-block" "${base[@]}" --kv-block 4096
expect_err bench_kv_type 2 "--kv-type" "${base[@]}" --kv-type q4
expect_err bench_prompt_len_zero 2 "--prompt-len" "${base[@]}" --prompt-len 0
expect_err bench_gen_len_absurd 2 "--gen-len" "${base[@]}" --gen-len 99999999999
expect_err bench_over_context 2 "exceeds the model context" "${base[@]}" --prompt-len 2000 --gen-len 100
expect_err bench_requests_negative 2 "--requests" "${base[@]}" --requests -3
expect_err bench_max_batch_zero 2 "--max-batch-tokens" "${base[@]}" --max-batch-tokens 0
expect_err bench_unknown_flag 2 "unknown flag" "${base[@]}" --bogus
expect_err bench_missing_value 2 "needs a value" "${base[@]}" --gen-len
expect_err bench_reps_zero 2 "--reps" "${base[@]}" --reps 0
expect_err bench_reps_huge 2 "--reps" "${base[@]}" --reps 5000
expect_err bench_reps_equals_bad 2 "--reps expects an integer in \\[1, 1000\\], got '0'" "${base[@]}" --reps=0
expect_err bench_concurrency_equals_bad 2 "--concurrency" "${base[@]}" --concurrency=4,x
expect_err bench_seed_bad 2 "--seed expects a non-negative integer" "${base[@]}" --seed=-1
expect_err bench_json_with_value 2 "--json takes no value" "${base[@]}" --json=1
expect_err bench_workload_unknown 2 "expected random or copy" "${base[@]}" --workload json
expect_err bench_copy_shared_prefix 2 "random workload only" "${base[@]}" --workload copy --shared-prefix 8
expect_err bench_lookup_range 2 "--lookup" "${base[@]}" --lookup 65

expect_err bench_missing_model 1 "nope.gguf" "$NS" bench -m "$e2e_tmp/nope.gguf" --concurrency 1

if "$NS" bench --help | grep -q -- "--shared-prefix"; then ok bench_help; else fail bench_help "no --shared-prefix in --help"; fi
exit $E2E_FAILED
