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

# bad flags: exit 2 with a message that names the problem
bad() { # NAME PATTERN ARGS...
    local name=$1 pat=$2
    shift 2
    local msg
    msg=$("$NS" bench -m "$M" --prompt-len 8 --gen-len 4 --concurrency 1 "$@" 2>&1 >/dev/null)
    local rc=$?
    if [ $rc -eq 2 ] && echo "$msg" | grep -q -- "$pat"; then ok "$name"; else fail "$name" "rc=$rc msg=$msg"; fi
}
bad bench_concurrency_zero "--concurrency" --concurrency 0
bad bench_concurrency_garbage "--concurrency" --concurrency 1,,4
bad bench_concurrency_huge "--concurrency" --concurrency 100000
bad bench_kv_memory_zero "one request needs" --kv-memory 0
bad bench_kv_memory_garbage "--kv-memory" --kv-memory lots
bad bench_kv_memory_too_small "holds 16 KV tokens" --kv-memory 10K --prompt-len 40
bad bench_kv_block_not_pow2 "power of two" --kv-block 7
bad bench_kv_block_huge "--kv-block" --kv-block 4096
bad bench_kv_type "--kv-type" --kv-type q4
bad bench_prompt_len_zero "--prompt-len" --prompt-len 0
bad bench_gen_len_absurd "--gen-len" --gen-len 99999999999
bad bench_over_context "exceeds the model context" --prompt-len 2000 --gen-len 100
bad bench_requests_negative "--requests" --requests -3
bad bench_max_batch_zero "--max-batch-tokens" --max-batch-tokens 0
bad bench_unknown_flag "unknown flag" --bogus
bad bench_missing_value "needs a value" --gen-len
bad bench_reps_zero "--reps" --reps 0
bad bench_reps_huge "--reps" --reps 5000

"$NS" bench -m "$e2e_tmp/nope.gguf" --concurrency 1 >/dev/null 2>"$e2e_tmp/err"
rc=$?
if [ $rc -eq 1 ] && grep -q "nope.gguf" "$e2e_tmp/err"; then ok bench_missing_model; else fail bench_missing_model "rc=$rc $(cat "$e2e_tmp/err")"; fi

if "$NS" bench --help | grep -q -- "--shared-prefix"; then ok bench_help; else fail bench_help "no --shared-prefix in --help"; fi
exit $E2E_FAILED
