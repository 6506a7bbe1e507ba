#!/usr/bin/env bash
# End-to-end tests of `nightshift run` on stories260K: formats, resume, folding, input order, greedy results
# equal to `nightshift generate`, the settings guard and --force, a store from an older request-key version,
# --retry-failed, chat via --chat-template, the run record.
. tests/lib.sh
model=$SHARED/models/stories260K.gguf
if [ ! -f "$model" ]; then skip run "no $model"; exit 0; fi
export NIGHTSHIFT_CACHE_DIR=$e2e_tmp/cache
T=$e2e_tmp
base=(-m "$model" --threads 1 --kv-memory 16M -q)
jq_py() { python3 -c "import json,sys; $1" "${@:2}"; }

# --- plain text: one prompt per line, id = line number; resume computes nothing ---
printf 'Once upon a time\nThe little dog\n\nLily and Tom\nOnce upon a time\n' >"$T/s.txt"
$NS run "$T/s.txt" -o "$T/s.out" "${base[@]}" --max-tokens 12 --temperature 0 2>"$T/log" ||
    fail run_text "$(tail -2 "$T/log")"
n=$(wc -l <"$T/s.out")
ids=$(jq_py 'print(" ".join(sorted(json.loads(l)["custom_id"] for l in open(sys.argv[1]))))' "$T/s.out")
[ "$n" = 4 ] && [ "$ids" = "1 2 4 5" ] && ok run_text_ids_are_line_numbers || fail run_text_ids_are_line_numbers "$n lines, ids $ids"
folded=$(jq_py 'r=json.load(open(sys.argv[1])); print(r["counts"]["folded_duplicates"], r["counts"]["unique_requests"])' "$T/s.out.record.json")
[ "$folded" = "1 3" ] && ok run_folds_duplicates || fail run_folds_duplicates "folded/unique: $folded"
# lines, requests, distinct requests and completions counted apart: a line with n: 3 is one request
python3 -c 'import json
for i in range(10):
    print(json.dumps({"id": "c%d" % i, "prompt": "Once upon a time %d" % (i % 4), "max_tokens": 4, "temperature": 0,
                      "n": 3 if i % 2 else 1}))
print("not json")' >"$T/counts.jsonl"
$NS run "$T/counts.jsonl" -o "$T/counts.out" -m "$model" --threads 1 --kv-memory 16M >"$T/counts.sum" 2>&1
counts=$(jq_py 'c=json.load(open(sys.argv[1]))["counts"]; print(c["lines"], c["requests"], c["distinct_requests"],
    c["completions"], c["unique_requests"], c["folded_duplicates"])' "$T/counts.out.record.json")
[ "$counts" = "11 10 4 20 8 12" ] &&
    grep -q "11 lines: 1 bad, 10 requests (4 distinct) for 20 completions: 8 unique" "$T/counts.sum" &&
    grep -q "10 requests (4 distinct) for 20 completions: 8 unique (8 computed now, 0 already done), 12 folded" "$T/counts.sum" &&
    ok run_counts_lines_requests_completions || fail run_counts_lines_requests_completions "$counts: $(cat "$T/counts.sum")"
cp "$T/s.out" "$T/s.before"
$NS run "$T/s.txt" -o "$T/s.out" -m "$model" --threads 1 --kv-memory 16M --max-tokens 12 --temperature 0 >"$T/sum" 2>&1
grep -q "0 computed now, 3 already done" "$T/sum" && cmp -s "$T/s.out" "$T/s.before" && ok run_resume_skips_done ||
    fail run_resume_skips_done "$(cat "$T/sum")"
grep -q "KV pool 26208 tokens (1638 blocks x 16, f16" "$T/sum" && ok run_prints_kv_capacity || fail run_prints_kv_capacity "$(head -1 "$T/sum")"

# --- an existing output with a new store is refused (nothing is silently overwritten); --force overwrites ---
if $NS run "$T/s.txt" -o "$T/s.out" --store "$T/other.db" "${base[@]}" --max-tokens 12 --temperature 0 2>"$T/log"; then
    fail run_refuses_foreign_output "exit 0"
elif grep -q "already holds" "$T/log" && cmp -s "$T/s.out" "$T/s.before"; then
    ok run_refuses_foreign_output
else
    fail run_refuses_foreign_output "$(tail -1 "$T/log")"
fi
texts() { jq_py 'print(sorted((o["custom_id"], o["response"]["body"]["choices"][0]["text"]) for o in map(json.loads, open(sys.argv[1]))))' "$1"; }
$NS run "$T/s.txt" -o "$T/s.out" --store "$T/other.db" "${base[@]}" --max-tokens 12 --temperature 0 --force 2>"$T/log" &&
    [ "$(texts "$T/s.out")" = "$(texts "$T/s.before")" ] && [ "$(wc -l <"$T/s.out")" = 4 ] &&
    ok run_force_rebuilds_output || fail run_force_rebuilds_output "$(tail -1 "$T/log")"

# --- greedy results equal nightshift generate (same KV type) ---
same=1
for p in "Once upon a time" "The little dog" "Lily and Tom"; do
    want=$($NS generate -m "$model" -p "$p" -n 12 --kv-type f32 --threads 1 2>/dev/null)
    printf '%s\n' "$p" >"$T/one.txt"
    rm -f "$T/one.out"*
    $NS run "$T/one.txt" -o "$T/one.out" "${base[@]}" --max-tokens 12 --temperature 0 --kv-type f32 2>/dev/null
    got=$(jq_py 'print(json.loads(open(sys.argv[1]).readline())["response"]["body"]["choices"][0]["text"], end="")' "$T/one.out")
    [ "$got" = "$want" ] || { same=0; echo "# '$p': run '$got' vs generate '$want'"; }
done
[ $same = 1 ] && ok run_greedy_equals_generate || fail run_greedy_equals_generate "see above"

# --- OpenAI batch format, chat via --chat-template, n > 1, input order ---
python3 - "$T/oa.jsonl" <<'PY'
import json, sys
with open(sys.argv[1], "w") as f:
    for i in range(30):
        if i % 3 == 0:
            body = {"model": "tiny", "messages": [{"role": "system", "content": "Tell a story."},
                                                   {"role": "user", "content": "A story about a cat %d" % i}]}
            url = "/v1/chat/completions"
        else:
            body = {"prompt": "Once upon a time, " * (1 + i % 4) + "there was", "n": 1 + (i % 5 == 1)}
            url = "/v1/completions"
        body["max_tokens"] = 4 + i % 7
        body["temperature"] = 0.7
        f.write(json.dumps({"custom_id": "req-%02d" % i, "method": "POST", "url": url, "body": body}) + "\n")
PY
$NS run "$T/oa.jsonl" -o "$T/oa.out" "${base[@]}" --chat-template chatml --order input 2>"$T/log" ||
    fail run_openai "$(tail -2 "$T/log")"
jq_py '
import json
rows = [json.loads(l) for l in open(sys.argv[1])]
ids = [r["custom_id"] for r in rows]
assert ids == ["req-%02d" % i for i in range(30)], ids
for i, r in enumerate(rows):
    b = r["response"]["body"]
    assert r["error"] is None and r["response"]["status_code"] == 200
    if i % 3 == 0:
        assert b["object"] == "chat.completion" and b["model"] == "llama", b  # the served model (general.name)
        assert b["choices"][0]["message"]["role"] == "assistant"
    else:
        assert b["object"] == "text_completion", b
        assert len(b["choices"]) == 1 + (i % 5 == 1), b
    assert b["usage"]["completion_tokens"] <= (4 + i % 7) * len(b["choices"])
    assert b["usage"]["total_tokens"] == b["usage"]["prompt_tokens"] + b["usage"]["completion_tokens"]
' "$T/oa.out" && ok run_openai_chat_n_input_order || fail run_openai_chat_n_input_order "bad output"
# sampled requests without a seed are reproducible: same results from a fresh store
$NS run "$T/oa.jsonl" -o "$T/oa2.out" "${base[@]}" --chat-template chatml --order input --sort descending 2>/dev/null
expect run_sampled_reproducible python3 tests/run_check.py same "$T/oa.out" "$T/oa.out.errors.jsonl" "$T/oa2.out" "$T/oa2.out.errors.jsonl"

# --- the settings guard: other defaults are refused, --force reuses the store ---
if $NS run "$T/s.txt" -o "$T/s.out" "${base[@]}" --max-tokens 5 --temperature 0 2>"$T/log"; then
    fail run_settings_guard "accepted other defaults"
elif grep -q "default.max_tokens 12 (now 5)" "$T/log"; then ok run_settings_guard; else
    fail run_settings_guard "message: $(cat "$T/log")"; fi
$NS run "$T/s.txt" -o "$T/s.out" "${base[@]}" --max-tokens 5 --temperature 0 --force 2>"$T/log" ||
    fail run_force "$(tail -2 "$T/log")"
jq_py '
rows = [json.loads(l) for l in open(sys.argv[1])]
assert len(rows) == 4, len(rows)
assert all(r["response"]["body"]["usage"]["completion_tokens"] <= 5 for r in rows)
' "$T/s.out" && ok run_force_rewrites_outputs || fail run_force_rewrites_outputs "$(head -c 300 "$T/s.out")"

# --- a store from before the request-key version bump (v1: seeded sampling drew from a per-request stream) is
# refused with the reason; --force computes every request again. Simulated from a v2 store: no key.version
# setting, and every result key and line digest replaced (a v1 store's keys never match v2 keys). ---
sampled=(--max-tokens 10 --temperature 0.8 --seed 3)
$NS run "$T/s.txt" -o "$T/v.out" "${base[@]}" "${sampled[@]}" 2>"$T/log" || fail run_key_version "$(tail -2 "$T/log")"
cp "$T/v.out" "$T/v.want"
python3 - "$T/v.out.nightshift.db" <<'PY'
import hashlib, sqlite3, sys
db = sqlite3.connect(sys.argv[1])
db.execute("DELETE FROM meta WHERE k = 'key.version'")
for table, col in (("results", "key"), ("lines", "digest")):
    for rowid, v in db.execute("SELECT id, %s FROM %s" % (col, table)).fetchall():
        db.execute("UPDATE %s SET %s = ? WHERE id = ?" % (table, col), (hashlib.sha256(b"v1" + v).digest(), rowid))
db.execute("UPDATE results SET text = CAST('OLD' AS BLOB)")
db.commit()
PY
if $NS run "$T/s.txt" -o "$T/v.out" "${base[@]}" "${sampled[@]}" 2>"$T/log"; then
    fail run_key_version_refused "accepted a v1 store"
elif grep -q "made by an older nightshift (request key version 1, this one 2) whose sampling differs" "$T/log" &&
    grep -q -- "--force" "$T/log" && cmp -s "$T/v.out" "$T/v.want"; then
    ok run_key_version_refused
else
    fail run_key_version_refused "message: $(cat "$T/log")"
fi
$NS run "$T/s.txt" -o "$T/v.out" -m "$model" --threads 1 --kv-memory 16M "${sampled[@]}" --force >"$T/log" 2>&1 ||
    fail run_key_version_force "$(tail -2 "$T/log")"
grep -q "3 computed now, 0 already done" "$T/log" && [ "$(texts "$T/v.out")" = "$(texts "$T/v.want")" ] &&
    [ "$(wc -l <"$T/v.out")" = 4 ] && ! grep -q OLD "$T/v.out" && ok run_key_version_force_recomputes ||
    fail run_key_version_force_recomputes "$(grep computed "$T/log"); $(texts "$T/v.out")"
$NS run "$T/s.txt" -o "$T/v.out" -m "$model" --threads 1 --kv-memory 16M "${sampled[@]}" >"$T/log" 2>&1 &&
    grep -q "0 computed now, 3 already done" "$T/log" && ok run_key_version_then_resumes ||
    fail run_key_version_then_resumes "$(grep computed "$T/log")"

# --- a request that can never fit the KV pool is refused when the backlog is read (request_too_large), not
# stored as an engine failure: a run with a bigger pool computes it, without --retry-failed ---
python3 -c 'print("{\"id\":\"big\",\"prompt\":\"%s\",\"max_tokens\":8}" % ("the dog ran " * 60)); print("{\"id\":\"small\",\"prompt\":\"Hi\",\"max_tokens\":4}")' >"$T/f.jsonl"
$NS run "$T/f.jsonl" -o "$T/f.out" -m "$model" --threads 1 --kv-memory 40K --kv-block 16 -q --temperature 0 2>"$T/log" ||
    fail run_too_large "$(tail -2 "$T/log")"
grep -q '"code":"context_length_exceeded"' "$T/f.out.errors.jsonl" && grep -q '"custom_id":"big"' "$T/f.out.errors.jsonl" &&
    ! grep -q '"engine_error"' "$T/f.out.errors.jsonl" && [ "$(wc -l <"$T/f.out")" = 1 ] &&
    ok run_too_large_refused_at_read_time || fail run_too_large_refused_at_read_time "$(cat "$T/f.out.errors.jsonl")"
$NS run "$T/f.jsonl" -o "$T/f.out" -m "$model" --threads 1 --kv-memory 16M -q --temperature 0 2>"$T/log" ||
    fail run_bigger_pool "$(tail -2 "$T/log")"
[ "$(wc -l <"$T/f.out")" = 2 ] && [ ! -s "$T/f.out.errors.jsonl" ] && ok run_bigger_pool_computes_it ||
    fail run_bigger_pool_computes_it "results $(wc -l <"$T/f.out"), errors: $(cat "$T/f.out.errors.jsonl")"

# --- the record ---
jq_py '
r = json.load(open(sys.argv[1]))
need = ["nightshift", "command", "flags", "model", "backend", "backlog", "counts", "tokens", "time", "throughput",
        "latency_s", "memory", "kv", "prefix_cache", "energy"]
missing = [k for k in need if k not in r]
assert not missing, missing
assert len(r["model"]["sha256"]) == 64 and r["model"]["size"] > 0
assert r["backlog"]["lines"] == 30 and len(r["backlog"]["sha256"]) == 64
assert r["counts"]["results"] == 30
assert r["latency_s"]["p50"] <= r["latency_s"]["p95"] <= r["latency_s"]["max"]
assert r["memory"]["peak_rss_bytes"] > 0 and r["kv"]["capacity_tokens"] > 0
assert r["energy"] == "unavailable" or r["energy"]["joules"] >= 0
assert r["time"]["start"].endswith("Z") and r["time"]["wall_s"] > 0
' "$T/oa.out.record.json" && ok run_record_fields || fail run_record_fields "$(head -c 400 "$T/oa.out.record.json")"

# --- memory is a budget: a --kv-memory larger than the machine has is capped with a warning, and the
# backlog's book is counted in the budget (the record shows both) ---
$NS run "$T/s.txt" -o "$T/km.out" "${base[@]}" --kv-memory 100T 2>"$T/km.log" >/dev/null || fail run_kv_memory_capped "$(tail -2 "$T/km.log")"
grep -q "is more than the cpu backend has for the KV cache: capped" "$T/km.log" && jq_py '
r = json.load(open(sys.argv[1]))
b = r["flags"]["kv_budget"]
assert b["capped"] and b["kv_bytes"] == b["kv_free"] < 100 << 40, b
assert b["backlog"] > 0 and r["memory"]["backlog_bytes"] > 0, b
' "$T/km.out.record.json" && ok run_kv_memory_capped || fail run_kv_memory_capped "$(grep -o '"kv_budget": {[^}]*}' "$T/km.out.record.json"); $(tail -1 "$T/km.log")"

# --- refuses to write over the backlog ---
if $NS run "$T/s.txt" -o "$T/s.txt" "${base[@]}" 2>/dev/null; then fail run_protects_backlog "overwrote"; else
    ok run_protects_backlog; fi
# --- SIGINT while a large backlog is still being read: stops at once, stores nothing, exit 130 ---
python3 -c "
with open('$T/big.txt', 'w') as f:
    for i in range(600000): f.write('Once upon a time there was a dog number %d\\n' % i)
"
$NS run "$T/big.txt" -o "$T/big.out" -m "$model" --max-tokens 4 >"$T/big.log" 2>&1 &
pid=$!
for _ in $(seq 100); do grep -q "text format" "$T/big.log" 2>/dev/null && break; sleep 0.05; done # reading began
kill -INT $pid
wait $pid
rc=$?
if [ $rc = 130 ] && grep -q "interrupted while reading the backlog" "$T/big.log" && [ ! -e "$T/big.out" ]; then
    ok run_sigint_while_reading
else
    fail run_sigint_while_reading "rc=$rc $(tail -1 "$T/big.log")"
fi

# --- generation parameters through the one table: --flag=value, a line's own ignore_eos ---
# (a logit bias on EOS, id 2, makes it the first token: b stops at once, a runs to max_tokens)
printf '{"id":"a","prompt":"Once upon a time","ignore_eos":true,"logit_bias":{"2":100}}\n{"id":"b","prompt":"Once upon a time","logit_bias":{"2":100}}\n' >"$T/ie.jsonl"
$NS run "$T/ie.jsonl" -o "$T/ie.out" "${base[@]}" --max-tokens=40 --temperature=0 2>"$T/log" || fail run_line_ignore_eos "$(tail -1 "$T/log")"
got=$(jq_py 'd={o["custom_id"]: (o["response"]["body"]["usage"]["completion_tokens"], o["response"]["body"]["choices"][0]["finish_reason"]) for o in map(json.loads, open(sys.argv[1]))}; print(*d["a"], *d["b"])' "$T/ie.out")
[ "$got" = "40 length 1 stop" ] && ok run_line_ignore_eos || fail run_line_ignore_eos "tokens and finish of a, b: $got"
grep -q '"max_tokens": 40' "$T/ie.out.record.json" && ok run_record_generation_table || fail run_record_generation_table "$(grep -o '"generation": {[^}]*}' "$T/ie.out.record.json")"

# --- prompt lookup: the same results greedy and sampled; the record counts the drafts ---
printf 'Once upon a time\nThe little dog\nOnce upon a time there was a girl. Once upon a time there was a\n' >"$T/lk.txt"
lk_same=1
for sampling in "--temperature 0" "--temperature 0.9 --top-p 0.9 --repeat-penalty 1.1"; do
    rm -f "$T"/lk[01].out*
    # shellcheck disable=SC2086
    $NS run "$T/lk.txt" -o "$T/lk0.out" "${base[@]}" --max-tokens 48 $sampling --lookup 0 2>/dev/null
    # shellcheck disable=SC2086
    $NS run "$T/lk.txt" -o "$T/lk1.out" "${base[@]}" --max-tokens 48 $sampling --lookup 6 --lookup-always 2>/dev/null
    [ -s "$T/lk0.out" ] && [ "$(texts "$T/lk0.out")" = "$(texts "$T/lk1.out")" ] || { lk_same=0; echo "# differs: $sampling"; }
done
[ $lk_same = 1 ] && ok run_lookup_same_results || fail run_lookup_same_results "see above"
got=$(jq_py 'r=json.load(open(sys.argv[1]))["lookup"]; print(r["max_draft"], r["draft_tokens"] > 0, r["tokens_per_step"] >= 1)' "$T/lk1.out.record.json")
off=$(jq_py 'r=json.load(open(sys.argv[1]))["lookup"]; print(r["max_draft"], r["draft_tokens"], r["tokens_per_step"])' "$T/lk0.out.record.json")
[ "$got" = "6 True True" ] && [ "$off" = "0 0 1.0" ] && ok run_record_lookup || fail run_record_lookup "on: $got, off: $off"

exit $E2E_FAILED
