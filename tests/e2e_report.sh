#!/usr/bin/env bash
# e2e_report — `nightshift report` on the record of a real run on stories260K (with a time series and a
# memory watchdog driven by a fake /proc that reports pressure): one self-contained HTML page with the
# sections, sample outputs beside their prompts, failures by reason; the record's owner, retest date and
# watchdog events.
. tests/lib.sh
M=$SHARED/models/stories260K.gguf
D=$e2e_tmp
python3 - "$D/b.jsonl" <<'EOF2'
import json, sys
with open(sys.argv[1], "w") as f:
    for i in range(80):
        f.write(json.dumps({"id": "q%d" % i, "prompt": "once upon a time <%d> & a cat" % i, "max_tokens": 20}) + "\n")
    f.write(json.dumps({"id": "bad1", "prompt": "x", "max_tokens": -1}) + "\n")
    f.write("not json\n")
EOF2
mkdir -p "$D/proc/pressure"
printf 'some avg10=60.00 avg60=0.00 avg300=0.00 total=1\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n' >"$D/proc/pressure/memory"
printf 'pswpin 0\npswpout 0\n' >"$D/proc/vmstat"
(cd "$D" && NIGHTSHIFT_PROC_ROOT="$D/proc" "$NS" run b.jsonl -m "$M" -o out.jsonl --max-seqs 8 --sample-interval 0.005 \
    --owner night-owl --retest-after 30 -q 2>"$D/run.err")
if python3 - "$D/out.jsonl.record.json" <<'EOF2'
import json, sys, datetime
d = json.load(open(sys.argv[1]))
assert d["owner"] == "night-owl"
assert d["retest_after"]["days"] == 30
when = datetime.datetime.strptime(d["retest_after"]["date"], "%Y-%m-%dT%H:%M:%SZ")
assert 29 <= (when - datetime.datetime.utcnow()).days <= 30, when
tl = d["timeline"]
assert tl["columns"][0] == "t_s" and len(tl["samples"]) >= 2
assert tl["samples"][-1][tl["columns"].index("done")] == 80
w = d["watchdog"]
assert w["lowered"] >= 1 and w["events"][0]["from"] == 8 and w["events"][0]["to"] == 4, w
assert sum(d["latency_s"]["histogram"]["counts"]) == d["latency_s"]["n"]
EOF2
then ok report_record_fields; else fail report_record_fields "$(cat "$D/run.err")"; fi
if grep -q "memory watchdog: .*capped at 4 (was 8)" "$D/run.err"; then ok report_watchdog_logged; else
    fail report_watchdog_logged "$(cat "$D/run.err")"; fi
out=$("$NS" report "$D/out.jsonl.record.json" 2>&1)
H=$D/out.jsonl.record.html
if [ $? -eq 0 ] && [ -s "$H" ] && python3 - "$H" <<'EOF2'
import sys, re
h = open(sys.argv[1]).read()
assert h.startswith("<!DOCTYPE html>") and h.rstrip().endswith("</html>")
assert "<script" not in h and "http://" not in h.replace("http://www.w3.org/2000/svg", ""), "not self-contained"
for s in ["Throughput over time", "KV use over time", "Preemptions and running sequences", "Prefix-cache hit rate",
          "Request latency", "Prompt tokens per request", "Generated tokens per request", "Failures by reason",
          "Sample outputs", "night-owl"]:
    assert s in h, s
assert h.count("<svg") == 7, h.count("<svg")
assert "once upon a time &lt;" in h and "&amp; a cat" in h      # prompts beside outputs, escaped
assert "invalid_value" in h and "invalid_json" in h             # failures by reason
EOF2
then ok report_html; else fail report_html "$out"; fi
# -o, an interrupted-style record without a time series, and errors
python3 -c "
import json,sys; d=json.load(open('$D/out.jsonl.record.json')); del d['timeline']; d['status']='interrupted'
json.dump(d, open('$D/old.json','w'))"
if "$NS" report "$D/old.json" -o "$D/old.html" >/dev/null && grep -q "no time series" "$D/old.html" &&
    grep -q "interrupted" "$D/old.html"; then ok report_without_timeline; else fail report_without_timeline "see $D/old.html"; fi
expect_err report_missing 1 "nope.json" "$NS" report "$D/nope.json"
echo '[1,2]' >"$D/notrec.json"
expect_err report_not_a_record 1 "not a nightshift run record" "$NS" report "$D/notrec.json"
expect_err report_no_args 2 "no record" "$NS" report
exit $E2E_FAILED
