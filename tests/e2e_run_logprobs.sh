#!/usr/bin/env bash
# e2e_run_logprobs — logprobs, echo and scoring through `nightshift run` (issue 11 item 4): the result lines
# have OpenAI's shapes for both endpoints (tests/oai_batch_check.py schema, which checks logprobs objects);
# greedy tokens are their rows' best alternative; a scoring line (echo, max_tokens 0) returns its prompt as
# text with a null first logprob and finish_reason "length"; the logprobs of a line are bit for bit the same
# at --max-seqs 1 and 8 (other requests in the batch); a scoring line whose prefix the prefix cache served
# (cached_tokens > 0) has the values of a run without the prefix cache; a second run over the same store
# rebuilds byte-identical files; still-unsupported and inconsistent fields fail their line with the field
# named; a chat line and a completion line that fold into one computation each get their endpoint's shape.
. tests/lib.sh
model=$SHARED/models/stories260K.gguf
if [ ! -f "$model" ]; then skip run_logprobs "no $model"; exit 0; fi
T=${KEEP_TMP:-$e2e_tmp}
python3 - "$T/b.jsonl" <<'PY'
import json, sys
story = "Once upon a time there was a little girl named Lily who loved to play in the park with her dog. " * 2
def req(cid, body, url="/v1/completions"):
    return json.dumps({"custom_id": cid, "method": "POST", "url": url, "body": body})
def chat(cid, text, **kw):
    return req(cid, dict(messages=[{"role": "user", "content": text}], max_tokens=5, **kw), "/v1/chat/completions")
L = [req("score", {"prompt": story, "max_tokens": 0, "echo": True, "logprobs": 2})]
L += [req("fill%d" % i, {"prompt": "The dog number %d" % i, "max_tokens": 8 + i, "temperature": 0.7, "seed": i})
      for i in range(6)]
L += [
    req("target", {"prompt": "Lily and her dog went", "max_tokens": 6, "logprobs": 3}),
    chat("chat", "Tell me a story", logprobs=True, top_logprobs=2),
    req("scoreB", {"prompt": story + "Then the sun went down.", "max_tokens": 0, "echo": True, "logprobs": 2}),
    req("echo", {"prompt": "The cat", "max_tokens": 3, "echo": True}),
    req("bad_zero", {"prompt": "x", "max_tokens": 0}),
    req("bad_many", {"prompt": "x", "logprobs": 6}),
    chat("bad_echo", "x", echo=True),
    chat("bad_top", "x", top_logprobs=2),
    req("bad_suffix", {"prompt": "x", "suffix": "y"}),
]
open(sys.argv[1], "w").write("\n".join(L) + "\n")
PY
# LOGPROBS_BACKEND=cuda runs it on another backend (by hand). The comparisons across batch compositions and the
# prefix cache are bit for bit on the cpu backend; elsewhere (GPU GEMMs pick kernels by row count) every
# logprob within LOGPROBS_TOL (default 0.02 there) with the same tokens, and the largest difference printed.
args=(-m "$model" --chat-template chatml --temperature 0 --threads 2 --kv-memory 8M -q --backend "${LOGPROBS_BACKEND:-cpu}")
run() { # NAME extra-args...: a run with its own store
    local n=$1
    shift
    NIGHTSHIFT_CACHE_DIR=$T/cache-$n $NS run "$T/b.jsonl" -o "$T/$n.jsonl" "${args[@]}" "$@" 2>"$T/$n.log"
}
if run one --max-seqs 1 && run eight --max-seqs 8 && run cold --max-seqs 8 --no-prefix-cache; then
    ok run_logprobs_runs
else
    fail run_logprobs_runs "$(tail -3 "$T"/*.log)"
fi
for n in one eight cold; do
    out=$(python3 tests/oai_batch_check.py schema "$T/$n.jsonl" "$T/$n.jsonl.errors.jsonl") && ok run_logprobs_schema_$n ||
        fail run_logprobs_schema_$n "$out"
done

TOL=${LOGPROBS_TOL:-$([ "${LOGPROBS_BACKEND:-cpu}" = cpu ] && echo 0 || echo 0.02)}
python3 - "$T" "$TOL" <<'PY' && ok run_logprobs_values || E2E_FAILED=1
import json, sys
T, TOL = sys.argv[1], float(sys.argv[2])
worst = [0.0]
def same(a, b):
    """a == b, numbers within TOL (bit for bit when TOL is 0); keeps the largest difference seen."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, float) and isinstance(b, float):
        worst[0] = max(worst[0], abs(a - b))
        return abs(a - b) <= TOL
    return a == b
def load(n):
    return {o["custom_id"]: o for o in map(json.loads, open("%s/%s.jsonl" % (T, n)))}
def errors(n):
    return {o["custom_id"]: o["response"]["body"]["error"] for o in map(json.loads, open("%s/%s.jsonl.errors.jsonl" % (T, n)))}
one, eight, cold = load("one"), load("eight"), load("cold")
bad = []
body = lambda r, c: r[c]["response"]["body"]
choice = lambda r, c: body(r, c)["choices"][0]
# bit for bit at --max-seqs 1 and 8 on the cpu (17 significant digits print the double exactly)
for c in ("target", "chat", "score", "scoreB"):
    if not same(choice(one, c)["logprobs"], choice(eight, c)["logprobs"]):
        bad.append("%s: logprobs differ between --max-seqs 1 and 8" % c)
# greedy: each generated token is its row's best alternative
t = choice(one, "target")["logprobs"]
if len(t["tokens"]) != 6 or any(max(d.values()) != lp or d.get(tok) != lp
                                 for tok, lp, d in zip(t["tokens"], t["token_logprobs"], t["top_logprobs"])):
    bad.append("target: greedy tokens are not their best alternatives: %s" % t)
if any(len(d) != 3 for d in t["top_logprobs"]) or t["text_offset"][0] != 0:
    bad.append("target: 3 alternatives each, text_offset from 0: %s" % t)
ch = choice(one, "chat")["logprobs"]["content"]
if len(ch) != body(one, "chat")["usage"]["completion_tokens"] or any(
        len(x["top_logprobs"]) != 2 or x["top_logprobs"][0]["token"] != x["token"] for x in ch):
    bad.append("chat: one entry per token, 2 alternatives, the greedy token first: %s" % ch)
# scoring: the prompt as text, its tokens' logprobs (the first null), nothing generated
for c in ("score", "scoreB"):
    x, u = choice(one, c), body(one, c)["usage"]
    lp = x["logprobs"]
    if x["finish_reason"] != "length" or u["completion_tokens"] != 0 or len(lp["tokens"]) != u["prompt_tokens"]:
        bad.append("%s: finish %s, usage %s, %d tokens" % (c, x["finish_reason"], u, len(lp["tokens"])))
    if lp["token_logprobs"][0] is not None or lp["top_logprobs"][0] is not None or None in lp["token_logprobs"][1:]:
        bad.append("%s: only the first logprob is null" % c)
    if not x["text"].startswith("Once upon a time there was"):
        bad.append("%s: text %r is not the prompt" % (c, x["text"][:40]))
e = choice(one, "echo")
if not e["text"].startswith("The cat") or e["logprobs"] is not None or len(e["text"]) <= len("The cat"):
    bad.append("echo: %r" % e)
# the prefix cache: scoreB shares score's prompt; whichever ran second was served from the cache, with the
# values the run without the cache computed
cached = [body(one, c)["usage"]["prompt_tokens_details"]["cached_tokens"] for c in ("score", "scoreB")]
if max(cached) <= 0 or any(body(cold, c)["usage"]["prompt_tokens_details"]["cached_tokens"] for c in ("score", "scoreB")):
    bad.append("cached_tokens: %s with the prefix cache, want > 0 (and 0 without)" % cached)
for c in ("score", "scoreB"):
    if not same(choice(one, c)["logprobs"], choice(cold, c)["logprobs"]):
        bad.append("%s: cached and uncached logprobs differ" % c)
a, b = choice(one, "score")["logprobs"], choice(one, "scoreB")["logprobs"]
n = len(a["tokens"]) - 1  # the last token's text may merge with what follows in scoreB
if not same(a["token_logprobs"][1:n], b["token_logprobs"][1:n]) or a["token_logprobs"][0] != b["token_logprobs"][0]:
    bad.append("score and scoreB differ on their shared prefix")
want = {"bad_zero": ("invalid_value", "max_tokens"), "bad_many": ("invalid_value", "logprobs"),
        "bad_echo": ("unsupported_parameter", "echo"), "bad_top": ("invalid_value", "top_logprobs"),
        "bad_suffix": ("unsupported_parameter", "suffix")}
got = errors("one")
for c, (code, param) in want.items():
    if c not in got or got[c]["code"] != code or got[c]["param"] != param:
        bad.append("%s: %s, want %s %s" % (c, got.get(c), code, param))
for x in bad:
    print("FAIL run_logprobs_values:", x)
if TOL:
    print("# logprobs across batch compositions and the prefix cache: largest difference %.3g (tolerance %g)" % (worst[0], TOL))
sys.exit(1 if bad else 0)
PY

# a second run over the same store: the lines are rebuilt from it (logprobs stored with the text), unchanged
cp "$T/one.jsonl" "$T/one.first"
cp "$T/one.jsonl.errors.jsonl" "$T/one.errors.first"
if run one --max-seqs 1 && cmp -s "$T/one.jsonl" "$T/one.first" && cmp -s "$T/one.jsonl.errors.jsonl" "$T/one.errors.first" &&
    rm "$T/one.jsonl" && run one --max-seqs 1 && cmp -s "$T/one.jsonl" "$T/one.first"; then
    ok run_logprobs_store_rebuilds_identical
else
    fail run_logprobs_store_rebuilds_identical "$(tail -3 "$T/one.log")"
fi

# a chat line and a completion line of the same tokens and parameters fold into one computation; each line
# gets the logprobs in its own endpoint's shape (results are stored in a form of no endpoint)
python3 - "$T/fold.jsonl" <<'PY'
import json, sys
chat = {"messages": [{"role": "user", "content": "Tell me"}], "max_tokens": 4, "logprobs": True}
comp = {"prompt": "<|im_start|>user\nTell me<|im_end|>\n<|im_start|>assistant\n", "max_tokens": 4, "logprobs": 0}
L = [{"custom_id": "chat", "method": "POST", "url": "/v1/chat/completions", "body": chat},
     {"custom_id": "comp", "method": "POST", "url": "/v1/completions", "body": comp}]
open(sys.argv[1], "w").write("".join(json.dumps(x) + "\n" for x in L))
PY
if NIGHTSHIFT_CACHE_DIR=$T/cache-fold $NS run "$T/fold.jsonl" -o "$T/fold.out" "${args[@]:0:10}" --backend "${LOGPROBS_BACKEND:-cpu}" 2>"$T/fold.log" &&
    grep -q "1 folded duplicates" "$T/fold.log" && python3 tests/oai_batch_check.py schema "$T/fold.out" "$T/fold.out.errors.jsonl" &&
    python3 - "$T/fold.out" <<'PY'; then
import json, sys
r = {o["custom_id"]: o["response"]["body"]["choices"][0]["logprobs"] for o in map(json.loads, open(sys.argv[1]))}
assert set(r["chat"]) == {"content", "refusal"} and set(r["comp"]) == {"tokens", "token_logprobs", "top_logprobs", "text_offset"}, r
assert [x["logprob"] for x in r["chat"]["content"]] == r["comp"]["token_logprobs"], r
PY
    ok run_logprobs_fold_across_endpoints
else
    fail run_logprobs_fold_across_endpoints "$(tail -3 "$T/fold.log")"
fi
exit $E2E_FAILED
