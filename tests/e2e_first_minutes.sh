#!/usr/bin/env bash
# The first ten minutes (issue 12, item 5): `nightshift info` says whether the file can run and on which
# backends (and why not: an unsupported architecture); the auto KV pool of `run` holds what the backlog can
# use, not what the machine has (max_seqs x (longest line + template slack + max_tokens) in blocks, a
# quarter more), and a bad line (a max_tokens that is not a number) widens nothing, nor changes --max-seqs
# auto's choice; an explicit --max-seqs wins, and the record says which it was; one flag set: -n is
# --max-tokens in run, generate and bench, --completions is the request's n (--n is refused, naming both);
# --flag=value works; generate --chat renders a user message with the model's template; generate ends the
# text with a newline only on a terminal; a rerun whose flags changed only a default that every line
# overrides is not refused (one that a line uses still is, with the differing setting named).
. tests/lib.sh
model=$SHARED/models/stories260K.gguf
if [ ! -f "$model" ]; then skip first_minutes "no $model"; exit 0; fi
export NIGHTSHIFT_CACHE_DIR=$e2e_tmp/cache
T=$e2e_tmp

# --- info: can run, on which backends ---
$NS info "$model" >"$T/info.txt" 2>&1
grep -q "^can run            yes, on cpu" "$T/info.txt" && ok info_can_run_on_cpu || fail info_can_run_on_cpu "$(tail -3 "$T/info.txt")"
$NS info --json "$model" | python3 -c 'import json,sys; r=json.load(sys.stdin); c=[b for b in r["backends"] if b["name"]=="cpu"][0]
sys.exit(not (r["can_run"] is True and c["runs"] is True and c["usable"] is True))' && ok info_json_can_run || fail info_json_can_run ""
python3 - "$model" "$T/bad_arch.gguf" <<'PY'
import sys
d = bytearray(open(sys.argv[1], 'rb').read())
i = d.index(b'general.architecture') + len('general.architecture') + 4 + 8
assert d[i:i + 5] == b'llama'
d[i:i + 5] = b'llamx'
open(sys.argv[2], 'wb').write(d)
PY
$NS info "$T/bad_arch.gguf" >"$T/info2.txt" 2>&1
grep -q "^can run            no: unsupported architecture 'llamx'" "$T/info2.txt" && ok info_cannot_run_says_why ||
    fail info_cannot_run_says_why "$(tail -2 "$T/info2.txt")"
$NS info --json "$T/bad_arch.gguf" | python3 -c 'import json,sys; r=json.load(sys.stdin); sys.exit(r["can_run"] is not False)' &&
    ok info_json_cannot_run || fail info_json_cannot_run ""

# --- the auto KV pool: what the backlog can use ---
printf 'Once upon a time\nThe little dog\nLily and Tom\n' >"$T/s.txt" # longest line 17 bytes
$NS run "$T/s.txt" -o "$T/a.out" -m "$model" --threads 1 -q --max-tokens 4 --max-seqs 8
kv() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["flags"]["kv_budget"]["kv_tokens"])' "$1"; }
# 17 + 256 + 4 = 277 tokens: 17 blocks + 2 = 19 a sequence, x 8 = 152, + 38 = 190 blocks of 16
[ "$(kv "$T/a.out.record.json")" = $((190 * 16)) ] && ok run_auto_kv_takes_what_the_backlog_uses ||
    fail run_auto_kv_takes_what_the_backlog_uses "kv_tokens $(kv "$T/a.out.record.json")"
printf '{"id": "1", "prompt": "hi", "max_tokens": "4"}\n' >"$T/q.jsonl" # a max_tokens not a number: a bad line
$NS run "$T/q.jsonl" -o "$T/q.out" -m "$model" --threads 1 -q --max-seqs 8
# no good line: 1 token, 0 blocks + 2 a sequence, x 8 = 16, + 4 = 20 blocks of 16
[ "$(kv "$T/q.out.record.json")" = $((20 * 16)) ] && ok run_auto_kv_bad_line_widens_nothing ||
    fail run_auto_kv_bad_line_widens_nothing "kv_tokens $(kv "$T/q.out.record.json")"
# examples/simple.jsonl with one malformed line more: the same pool and the same auto choice (start-up lines)
cp examples/simple.jsonl "$T/simple.jsonl"
cp examples/simple.jsonl "$T/simple_bad.jsonl"
printf '{"id": "bad-max", "prompt": "%02000d", "max_tokens": "many"}\n' 0 >>"$T/simple_bad.jsonl"
startup() { grep -E "KV pool|^max-seqs" "$1" | sed 's/[0-9.]* s$//'; }
$NS run "$T/simple.jsonl" -o "$T/sa.out" -m "$model" --threads 1 >"$T/sa.log" 2>&1
$NS run "$T/simple_bad.jsonl" -o "$T/sb.out" -m "$model" --threads 1 >"$T/sb.log" 2>&1
grep -q "^max-seqs [0-9]* (auto: " "$T/sa.log" && [ "$(startup "$T/sa.log")" = "$(startup "$T/sb.log")" ] &&
    [ "$(kv "$T/sa.out.record.json")" = "$(kv "$T/sb.out.record.json")" ] && ok run_bad_line_keeps_pool_and_max_seqs ||
    fail run_bad_line_keeps_pool_and_max_seqs "$(startup "$T/sa.log") / $(startup "$T/sb.log")"
seqs() { python3 -c 'import json,sys; m=json.load(open(sys.argv[1]))["max_seqs"]; print(m["value"], m["auto"])' "$1"; }
[ "$(seqs "$T/sa.out.record.json")" = "$(grep -o '^max-seqs [0-9]*' "$T/sa.log" | cut -d' ' -f2) True" ] &&
    ok run_record_says_auto || fail run_record_says_auto "$(seqs "$T/sa.out.record.json")"
$NS run "$T/simple.jsonl" -o "$T/sc.out" -m "$model" --threads 1 --max-seqs 3 >"$T/sc.log" 2>&1
grep -q "max-seqs 3 (given)" "$T/sc.log" && [ "$(seqs "$T/sc.out.record.json")" = "3 False" ] &&
    ok run_explicit_max_seqs_wins || fail run_explicit_max_seqs_wins "$(grep max-seqs "$T/sc.log")"
texts() { python3 -c 'import json,sys
ls = map(json.loads, open(sys.argv[1]))
print(sorted((l["custom_id"], [c["text"] for c in l["response"]["body"]["choices"]]) for l in ls))' "$1"; }
[ "$(texts "$T/sa.out")" = "$(texts "$T/sc.out")" ] && ok run_auto_same_results || fail run_auto_same_results ""
$NS run "$T/s.txt" -o "$T/g.out" -m "$model" --threads 1 -q --max-tokens 4 --max-seqs 8 --kv-memory 1M
[ "$(kv "$T/g.out.record.json")" != $((190 * 16)) ] && ok run_given_kv_memory_is_kept || fail run_given_kv_memory_is_kept ""

# --- one flag set: -n is --max-tokens everywhere, --completions the request's n, --n refused naming both ---
expect_err run_double_dash_n_refused 2 "\-\-n=2: say \-\-completions N .* or \-n / \-\-max-tokens N" \
    $NS run "$T/s.txt" -o "$T/n.out" -m "$model" -q --n=2
expect_err generate_double_dash_n_refused 2 "\-\-n: say \-\-completions N" $NS generate -m "$model" -p Once -n 4 --n 2
$NS run "$T/s.txt" -o "$T/c.out" -m "$model" --threads 1 -q --completions=2 -n 3
python3 -c 'import json,sys; ls=[json.loads(l) for l in open(sys.argv[1])]
sys.exit(not (len(ls) == 3 and all(len(l["response"]["body"]["choices"]) == 2 for l in ls) and
    all(l["response"]["body"]["usage"]["completion_tokens"] <= 6 for l in ls)))' "$T/c.out" &&
    ok run_completions_and_short_n || fail run_completions_and_short_n "$(head -c 300 "$T/c.out")"
$NS bench -m "$model" --threads 1 --prompt-len 8 -n 4 --concurrency 1 --requests 1 --temp 0 >"$T/bench.txt" 2>&1 &&
    grep -q "8 prompt tokens (0 shared) + 4 generated" "$T/bench.txt" && ok bench_short_n_is_max_tokens ||
    fail bench_short_n_is_max_tokens "$(head -5 "$T/bench.txt")"
$NS bench --help | grep -q -- "-n, --max-tokens N" && $NS generate --help | grep -q -- "-n is --max-tokens" &&
    $NS run --help | grep -q -- "--completions N" && ok help_documents_n || fail help_documents_n ""

# --- generate --chat: one user message rendered as run renders a chat line ---
chatml=$'<|im_start|>user\nHello there<|im_end|>\n<|im_start|>assistant\n'
$NS generate -m "$model" --chat "Hello there" --chat-template chatml -n 8 >"$T/chat.txt" 2>"$T/chat.err"
$NS generate -m "$model" -p "$chatml" -n 8 >"$T/plain.txt" 2>"$T/plain.err"
p1=$(grep -o "prompt [0-9]* tokens" "$T/chat.err")
p2=$(grep -o "prompt [0-9]* tokens" "$T/plain.err")
[ -s "$T/chat.txt" ] && cmp -s "$T/chat.txt" "$T/plain.txt" && [ -n "$p1" ] && [ "$p1" = "$p2" ] && ok generate_chat_renders_the_template ||
    fail generate_chat_renders_the_template "'$p1' vs '$p2' $(cat "$T/chat.err" | head -2)"
expect_err generate_chat_without_template 1 "\-\-chat: chat messages, but the model has no chat template" \
    $NS generate -m "$model" --chat "Hello" -n 4
expect_err generate_one_prompt_source 2 "exactly one of -p TEXT, -f FILE or \-\-chat TEXT" \
    $NS generate -m "$model" --chat "Hello" -p x

# --- generate: a newline after the text on a terminal only ---
if command -v script >/dev/null; then
    script -qc "$NS generate -m $model -p Once -n 5 --threads 1 2>/dev/null" /dev/null >"$T/tty.txt"
    $NS generate -m "$model" -p Once -n 5 --threads 1 2>/dev/null >"$T/pipe.txt"
    [ "$(tail -c 1 "$T/tty.txt" | od -An -c | tr -d ' ')" = '\n' ] && [ "$(tail -c 1 "$T/pipe.txt" | od -An -c | tr -d ' ')" != '\n' ] &&
        [ "$(tr -d '\r\n' <"$T/tty.txt")" = "$(cat "$T/pipe.txt")" ] && ok generate_newline_on_terminal_only ||
        fail generate_newline_on_terminal_only "$(od -c "$T/tty.txt" | tail -2) / $(od -c "$T/pipe.txt" | tail -2)"
else
    skip generate_newline_on_terminal_only "no script(1)"
fi

# --- a changed default that every line overrides: not a different setting ---
printf '{"id":"a","prompt":"Once upon","temperature":0}\n{"id":"b","prompt":"The dog","temperature":0.5,"seed":1}\n' >"$T/d.jsonl"
dargs=(-m "$model" --threads 1 --kv-memory 16M --max-tokens 3 -q)
$NS run "$T/d.jsonl" -o "$T/d.out" "${dargs[@]}" && cp "$T/d.out" "$T/d.first" || fail run_default_all_override_first ""
$NS run "$T/d.jsonl" -o "$T/d.out" "${dargs[@]}" --temperature 0.9 2>"$T/d.err" && cmp -s "$T/d.out" "$T/d.first" &&
    ok run_changed_default_every_line_overrides || fail run_changed_default_every_line_overrides "$(cat "$T/d.err")"
printf '{"id":"c","prompt":"Lily"}\n' >>"$T/d.jsonl" # falls back to the default temperature
expect_err run_changed_default_a_line_uses 1 "other settings: default.temperature 1 (now 0.899999976)" \
    $NS run "$T/d.jsonl" -o "$T/d.out" "${dargs[@]}" --temperature 0.9

exit $E2E_FAILED
