#!/usr/bin/env bash
# Bad-input test for `nightshift run` (issue 5): a backlog mixing valid lines with every class of bad
# line; the valid ones complete, each bad one is in the error file with its line number and a reason.
. tests/lib.sh
model=$SHARED/models/stories260K.gguf
if [ ! -f "$model" ]; then skip run_badinput "no $model"; exit 0; fi
export NIGHTSHIFT_CACHE_DIR=$e2e_tmp/cache
b=$e2e_tmp/bad.jsonl
python3 - "$b" <<'PY'
import sys
long_prompt = "the little dog ran " * 700          # > 2048 tokens, < --max-line-bytes
huge = '{"id": "huge", "prompt": "' + "x" * 30000 + '"}'   # > --max-line-bytes
L = [
    ('ok', '{"id": "ok-1", "prompt": "Once upon a time"}'),
    ('invalid_json', '{"id": "broken", "prompt": "Once upon'),
    ('invalid_utf8', b'{"id": "utf8", "prompt": "caf\xc3 au lait"}'),
    ('line_too_long', huge),
    ('missing_id', '{"prompt": "no id here"}'),
    ('duplicate_custom_id', '{"id": "ok-1", "prompt": "same id again"}'),
    ('invalid_type', '{"id": "wrongtype", "prompt": "x", "max_tokens": "ten"}'),
    ('invalid_type', '{"id": "wrongtype2", "prompt": 42}'),
    ('invalid_value', '{"id": "nan", "prompt": "x", "temperature": NaN}'),
    ('invalid_value', '{"id": "inf", "prompt": "x", "top_p": 1e400}'),
    ('invalid_value', '{"id": "range", "prompt": "x", "temperature": 3.5}'),
    ('invalid_value', '{"id": "range2", "prompt": "x", "max_tokens": 0}'),
    ('context_length_exceeded', '{"id": "toolong", "prompt": "%s"}' % long_prompt),
    ('invalid_value', '{"id": "vocab", "prompt": [1, 99999]}'),
    ('invalid_value', '{"id": "bias", "prompt": "x", "logit_bias": {"100000": 5}}'),
    ('missing_required_parameter', '{"id": "noprompt", "max_tokens": 5}'),
    ('ok', '{"id": "ok-2", "prompt": "The little dog", "max_tokens": 5, "user": "u", "metadata": {"k": "v"}}'),
    ('ok', '{"id": 3, "prompt": [1, 403, 407], "max_tokens": 4}'),
    ('ok', '{"id": "ok-4", "prompt": "Lily", "max_tokens": 3, "temperature": 0.5, "seed": 9, "n": 2}'),
    ('unknown_parameter', '{"id": "unk", "prompt": "x", "unknown_field": 1}'),
    ('unsupported_parameter', '{"id": "tools", "prompt": "x", "tools": [{"type": "function"}]}'),
    ('invalid_value', '{"id": "lp", "prompt": "x", "logprobs": true, "top_logprobs": 2}'),  # top_logprobs: chat only
]
with open(sys.argv[1], "wb") as f:
    for want, line in L:
        f.write(line if isinstance(line, bytes) else line.encode())
        f.write(b"\n")
with open(sys.argv[1] + ".want", "w") as f:
    for i, (want, _) in enumerate(L):
        f.write("%d %s\n" % (i + 1, want))
PY
out=$e2e_tmp/out.jsonl
if $NS run "$b" -m "$model" -o "$out" --max-tokens 6 --temperature 0 --max-line-bytes 20000 --threads 1 \
    --kv-memory 16M -q 2>"$e2e_tmp/log"; then ok run_badinput_completes; else
    fail run_badinput_completes "$(tail -3 "$e2e_tmp/log")"; fi
python3 - "$b.want" "$out" "$out.errors.jsonl" "$b" <<'PY'
import json, sys
want = {int(l.split()[0]): l.split()[1] for l in open(sys.argv[1])}
res = [json.loads(l) for l in open(sys.argv[2])]
err = [json.loads(l) for l in open(sys.argv[3])]
# a failed request is found by its custom_id (the line's id; a duplicate id's line comes after the first);
# a line that cannot be read as a request by the line number in its top-level error
id_lines = {}
for i, raw in enumerate(open(sys.argv[4], "rb").read().split(b"\n")):
    try:
        id_lines.setdefault(str(json.loads(raw)["id"]), []).append(i + 1)
    except Exception:
        pass
for o in res:
    id_lines[o["custom_id"]].pop(0)
bad = 0
got, msgs, params = {}, {}, {}
for o in err:
    if o["error"] is not None:
        line, code, msg = o["error"]["line"], o["error"]["code"], o["error"]["message"]
        if o["response"] is not None or o["custom_id"] is not None:
            print("FAIL run_badinput_shape: line %d: an unreadable line has a response or an id" % line); bad = 1
    else:
        line = id_lines[o["custom_id"]].pop(0)
        e = o["response"]["body"]["error"]
        code, msg, params[line] = e["code"], e["message"], e["param"]
        if o["response"]["status_code"] != 400 or e["type"] != "invalid_request_error":
            print("FAIL run_badinput_shape: line %d: %s" % (line, o["response"])); bad = 1
    if line in got:
        print("FAIL run_badinput_once: line %d twice" % line); bad = 1
    got[line], msgs[line] = code, msg
    if not msg:
        print("FAIL run_badinput_reason: line %d has no message" % line); bad = 1
ids = {o["custom_id"] for o in res}
for line, code in sorted(want.items()):
    if code == "ok":
        continue
    if got.get(line) != code:
        print("FAIL run_badinput_line_%d: want %s, got %s" % (line, code, got.get(line))); bad = 1
n_ok = sum(1 for c in want.values() if c == "ok")
if len(res) != n_ok or ids != {"ok-1", "ok-2", "3", "ok-4"}:
    print("FAIL run_badinput_valid_complete: %d results %s" % (len(res), sorted(ids))); bad = 1
if len(res) + len(err) != len(want):
    print("FAIL run_badinput_every_line: %d + %d lines for %d" % (len(res), len(err), len(want))); bad = 1
n2 = [o for o in res if o["custom_id"] == "ok-4"]
if n2 and len(n2[0]["response"]["body"]["choices"]) != 2:
    print("FAIL run_badinput_n2: n=2 gave %d choices" % len(n2[0]["response"]["body"]["choices"])); bad = 1
for line, needle in ((9, "NaN"), (11, "temperature"), (13, "context"), (6, "first on line 1"), (4, "max-line-bytes"),
                     (20, "unknown field 'unknown_field'"), (21, "'tools' is not supported")):
    if needle not in msgs.get(line, ""):
        print("FAIL run_badinput_message_%d: %r lacks %r" % (line, msgs.get(line), needle)); bad = 1
for line, param in ((7, "max_tokens"), (11, "temperature"), (13, "prompt"), (20, "unknown_field"), (21, "tools"),
                    (22, "top_logprobs")):
    if params.get(line) != param:
        print("FAIL run_badinput_param_%d: param %r, want %r" % (line, params.get(line), param)); bad = 1
if not bad:
    print("ok run_badinput_each_bad_line_reported")
    print("ok run_badinput_valid_complete")
    print("ok run_badinput_unsupported_fields_fail")
sys.exit(bad)
PY
[ $? = 0 ] || E2E_FAILED=1
grep -q "unknown field 'unknown_field': lines with it fail" "$e2e_tmp/log" && ok run_badinput_unknown_field_warned ||
    fail run_badinput_unknown_field_warned "no warning in: $(head -3 "$e2e_tmp/log")"

# chat input on a model without a chat template: those lines fail (400, naming the choices), the rest runs
printf '%s\n' '{"id": "c1", "messages": [{"role": "user", "content": "hi"}]}' \
    '{"id": "p1", "prompt": "Once upon", "max_tokens": 3}' >"$e2e_tmp/chat.jsonl"
if ! $NS run "$e2e_tmp/chat.jsonl" -m "$model" -o "$e2e_tmp/chat.out" --threads 1 2>"$e2e_tmp/chat.log"; then
    fail run_chat_without_template "the run failed: $(tail -2 "$e2e_tmp/chat.log")"
elif grep -q "chatml, llama2, llama3, mistral, phi3, gemma, zephyr" "$e2e_tmp/chat.log" &&
    grep -q '"custom_id":"p1"' "$e2e_tmp/chat.out" && [ "$(wc -l <"$e2e_tmp/chat.out")" = 1 ] &&
    grep -q '"custom_id":"c1","response":{"status_code":400,.*"param":"messages","code":"chat_template"' \
        "$e2e_tmp/chat.out.errors.jsonl"; then ok run_chat_without_template; else
    fail run_chat_without_template "log: $(cat "$e2e_tmp/chat.log"); errors: $(cat "$e2e_tmp/chat.out.errors.jsonl")"; fi
exit $E2E_FAILED
