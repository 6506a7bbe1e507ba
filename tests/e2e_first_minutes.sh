#!/usr/bin/env bash
# The first ten minutes (issue 12, item 5): `nightshift info` says whether the file can run and on which
# backends (and why not: an unsupported architecture); the auto KV pool of `run` holds what the backlog can
# use, not what the machine has (max_seqs x (longest line + template slack + max_tokens) in blocks, a
# quarter more), and a line whose max_tokens cannot be read gives the context's cap; one flag set: -n is
# --max-tokens in run, generate and bench, --completions is the request's n (--n is refused, naming both);
# --flag=value works; generate --chat renders a user message with the model's template; generate ends the
# text with a newline only on a terminal.
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
printf '{"id": "1", "prompt": "hi", "max_tokens": "4"}\n' >"$T/q.jsonl" # a max_tokens not a plain number: no bound
$NS run "$T/q.jsonl" -o "$T/q.out" -m "$model" --threads 1 -q --max-seqs 8
ctx=$($NS info --json "$model" | python3 -c 'import json,sys; print(json.load(sys.stdin)["hparams"]["context_length"])')
[ "$(kv "$T/q.out.record.json")" = $((ctx * 8 * 2)) ] && ok run_auto_kv_unbounded_line_gets_the_context ||
    fail run_auto_kv_unbounded_line_gets_the_context "kv_tokens $(kv "$T/q.out.record.json") ctx $ctx"
$NS run "$T/s.txt" -o "$T/g.out" -m "$model" --threads 1 -q --max-tokens 4 --max-seqs 8 --kv-memory 1M
[ "$(kv "$T/g.out.record.json")" != $((190 * 16)) ] && ok run_given_kv_memory_is_kept || fail run_given_kv_memory_is_kept ""

exit $E2E_FAILED
