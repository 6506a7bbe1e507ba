#!/usr/bin/env bash
# End-to-end structured output with `nightshift run` on SmolLM2 (skipped without models/): an extraction
# backlog of 60 chat requests with a JSON schema (response_format json_schema, half greedy, half sampled):
# every output parses and validates against the schema with an independent validator (Python's jsonschema;
# the test is skipped when it is neither installed nor installable); a classification backlog with
# guided_choice: every output is exactly one of the choices; a bad schema fails its line alone with the
# keyword named; the constraint enters the key (resume computes nothing, a changed schema recomputes).
# NIGHTSHIFT_E2E_LINES=N changes the backlog size (bench/NOTES.md uses 500).
. tests/lib.sh
model=models/SmolLM2-135M-Instruct.Q4_1.gguf
if [ ! -f "$model" ]; then skip structured "no $model"; exit 0; fi
if ! python3 -c "import jsonschema" 2>/dev/null; then
    python3 -m pip install -q jsonschema >/dev/null 2>&1 || true
fi
if ! python3 -c "import jsonschema" 2>/dev/null; then skip structured "Python's jsonschema is not available"; exit 0; fi
export NIGHTSHIFT_CACHE_DIR=$e2e_tmp/cache
T=$e2e_tmp
N=${NIGHTSHIFT_E2E_LINES:-60}
base=(-m "$model" -q --max-seqs 64)

# --- extraction: a JSON schema on every line ---
python3 - "$T/extract.jsonl" "$N" <<'PY'
import json, random, sys
random.seed(7)
first = ["Anna", "Ben", "Chloe", "David", "Emma", "Farid", "Grace", "Hugo", "Ines", "Jonas", "Kenji", "Lena"]
last = ["Smith", "Garcia", "Muller", "Rossi", "Nguyen", "Kowalski", "Dubois", "Silva", "Tanaka", "Okafor"]
cities = ["Paris", "Berlin", "Lagos", "Osaka", "Lima", "Toronto", "Madrid", "Cairo", "Oslo", "Perth"]
jobs = ["teacher", "nurse", "engineer", "baker", "pilot", "lawyer", "farmer", "chef"]
schema = {"type": "object", "additionalProperties": False, "required": ["name", "age", "city", "occupation"],
          "properties": {"name": {"type": "string", "maxLength": 40},
                         "age": {"type": "integer", "minimum": 0, "maximum": 120},
                         "city": {"type": "string", "maxLength": 30},
                         "occupation": {"type": "string", "maxLength": 30},
                         "email": {"type": "string", "format": "email"},
                         "married": {"type": "boolean"}}}
with open(sys.argv[1], "w") as f:
    for i in range(int(sys.argv[2])):
        n, a, c, j = random.choice(first) + " " + random.choice(last), random.randint(18, 90), random.choice(cities), random.choice(jobs)
        text = "%s is a %d-year-old %s who lives in %s." % (n, a, j, c)
        body = {"messages": [{"role": "system", "content": "Extract the person as JSON."}, {"role": "user", "content": text}],
                "response_format": {"type": "json_schema", "json_schema": {"name": "person", "strict": True, "schema": schema}},
                "max_tokens": 400}
        if i % 2:
            body["temperature"] = 0.7
            body["seed"] = i
        else:
            body["temperature"] = 0
        f.write(json.dumps(dict(id="x%d" % i, **body)) + "\n")
    # a bad schema fails its line alone
    bad = {"type": "object", "properties": {"a": {"type": "string", "patternProperties": {}}}}
    f.write(json.dumps({"id": "bad", "prompt": "x", "response_format": {"type": "json_schema", "json_schema": {"schema": bad}}}) + "\n")
PY
$NS run "$T/extract.jsonl" -o "$T/extract.out" "${base[@]}" 2>"$T/log" || fail structured_run "$(tail -2 "$T/log")"
python3 - "$T/extract.jsonl" "$T/extract.out" "$N" <<'PY' && ok structured_schema_outputs_validate || fail structured_schema_outputs_validate "see above"
import json, sys, jsonschema
reqs = {}
for l in open(sys.argv[1]):
    o = json.loads(l)
    if "messages" in o: reqs[o["id"]] = o["response_format"]["json_schema"]["schema"]
n_ok = n_len = 0
bad = []
for l in open(sys.argv[2]):
    o = json.loads(l)
    ch = o["response"]["body"]["choices"][0]
    text = ch["message"]["content"]
    if ch["finish_reason"] != "stop":
        bad.append((o["custom_id"], "finish_reason " + ch["finish_reason"], text)); continue
    try:
        jsonschema.validate(json.loads(text), reqs[o["custom_id"]], format_checker=jsonschema.FormatChecker())
        n_ok += 1
    except Exception as e:
        bad.append((o["custom_id"], str(e)[:200], text))
print("# %d of %d outputs valid" % (n_ok, int(sys.argv[3])))
for b in bad[:5]: print("#", b)
sys.exit(0 if n_ok == int(sys.argv[3]) and not bad else 1)
PY
python3 - "$T/extract.out.errors.jsonl" <<'PY' && ok structured_bad_schema_fails_alone || fail structured_bad_schema_fails_alone "$(cat "$T/extract.out.errors.jsonl")"
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
e = lines[0]["response"]["body"]["error"] if len(lines) == 1 and lines[0]["error"] is None else {}
ok = len(lines) == 1 and lines[0]["custom_id"] == "bad" and lines[0]["response"]["status_code"] == 400 and \
    e.get("code") == "invalid_value" and e.get("param") == "response_format.json_schema.schema" and \
    "'patternProperties' at /properties/a" in e.get("message", "")
sys.exit(0 if ok else 1)
PY
cp "$T/extract.out" "$T/extract.before"
$NS run "$T/extract.jsonl" -o "$T/extract.out" -m "$model" --max-seqs 64 >"$T/sum" 2>&1
grep -q "0 computed now" "$T/sum" && cmp -s "$T/extract.out" "$T/extract.before" && ok structured_resume_computes_nothing ||
    fail structured_resume_computes_nothing "$(tail -2 "$T/sum")"

# --- classification: guided_choice, and the same as a run-wide default (--guided-choice) ---
python3 - "$T/cls.jsonl" "$T/cls_plain.jsonl" "$N" <<'PY'
import json, random, sys
random.seed(3)
good = ["I love this product, it works great", "Fantastic service and friendly staff", "Best purchase this year"]
badr = ["Terrible, it broke after one day", "The worst support I have ever had", "Do not buy this, waste of money"]
meh = ["It arrived on Tuesday", "The box is blue", "I used it twice"]
with open(sys.argv[1], "w") as f, open(sys.argv[2], "w") as g:
    for i in range(int(sys.argv[3])):
        t = random.choice(random.choice([good, badr, meh])) + " (ticket %d)" % i
        msgs = [{"role": "user", "content": "Classify the sentiment of this review: " + t}]
        f.write(json.dumps({"id": "c%d" % i, "messages": msgs, "guided_choice": ["positive", "negative", "neutral"],
                            "temperature": 0.8 if i % 2 else 0, "seed": i}) + "\n")
        g.write(json.dumps({"id": "c%d" % i, "messages": msgs, "temperature": 0}) + "\n")
PY
check_choices() {
    python3 - "$1" "$2" <<'PY'
import json, sys
outs = [json.loads(l)["response"]["body"]["choices"][0] for l in open(sys.argv[1])]
ok = len(outs) == int(sys.argv[2]) and all(c["message"]["content"] in ("positive", "negative", "neutral") and c["finish_reason"] == "stop" for c in outs)
kinds = sorted(set(c["message"]["content"] for c in outs))
print("# %d outputs, labels %s" % (len(outs), kinds))
sys.exit(0 if ok else 1)
PY
}
$NS run "$T/cls.jsonl" -o "$T/cls.out" "${base[@]}" --max-tokens 8 2>"$T/log" && check_choices "$T/cls.out" "$N" &&
    ok structured_guided_choice_exact || fail structured_guided_choice_exact "$(tail -2 "$T/log")"
$NS run "$T/cls_plain.jsonl" -o "$T/cls2.out" "${base[@]}" --max-tokens 8 --guided-choice positive \
    --guided-choice negative --guided-choice neutral 2>"$T/log" && check_choices "$T/cls2.out" "$N" &&
    python3 -c "import json,sys; r=json.load(open(sys.argv[1])); sys.exit(0 if r['flags']['generation']['guided_choice']==['positive','negative','neutral'] else 1)" "$T/cls2.out.record.json" &&
    ok structured_choice_default_flag || fail structured_choice_default_flag "$(tail -2 "$T/log")"

# --- generate: a regex and a grammar ---
got=$($NS generate -m "$model" -p "Call me at" --guided-regex '\(\d{3}\) \d{3}-\d{4}' -n 30 2>/dev/null)
echo "$got" | grep -Eqx '\([0-9]{3}\) [0-9]{3}-[0-9]{4}' && ok structured_generate_regex || fail structured_generate_regex "'$got'"
expect_err structured_generate_bad_regex 2 "lookaround" $NS generate -m "$model" -p x --guided-regex 'a(?=b)'
exit $E2E_FAILED
