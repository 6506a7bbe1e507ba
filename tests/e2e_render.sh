#!/usr/bin/env bash
# e2e_render — the sweep's SVG chart and the run report's HTML page rendered by headless Chromium (Debian's
# chromium, from `scripts/install-deps render`; skipped when it is not installed): the screenshots are not
# blank (many colours, pixel variance, neither all white nor all ink) and the rendered DOM has the titles.
. tests/lib.sh
M=$SHARED/models/stories260K.gguf
CHROME=$(command -v chromium || command -v chromium-browser || true)
if [ -z "$CHROME" ]; then
    skip render_sweep_svg "chromium is not installed (scripts/install-deps render)"
    skip render_report_html "chromium is not installed (scripts/install-deps render)"
    exit 0
fi
D=$e2e_tmp
shot() { # shot URL PNG W H
    timeout 120 "$CHROME" --headless --no-sandbox --disable-gpu --hide-scrollbars --user-data-dir="$D/chrome" \
        --screenshot="$2" --window-size="$3,$4" "$1" >/dev/null 2>&1
}
dom() { timeout 120 "$CHROME" --headless --no-sandbox --disable-gpu --user-data-dir="$D/chrome" --dump-dom "$1" 2>/dev/null; }
# not blank: > 20 colours, grey-level stddev > 5, 1%..95% of the sampled pixels not white
not_blank() {
    python3 tests/png_stats.py "$1" | awk '{ exit !($3 > 20 && $4 > 5 && $5 > 0.01 && $5 < 0.95) }'
}
python3 - "$D/b.jsonl" <<'EOF2'
import json, sys
with open(sys.argv[1], "w") as f:
    for i in range(40):
        f.write(json.dumps({"id": "q%d" % i, "prompt": "once upon a time " * (1 + i % 5), "max_tokens": 16}) + "\n")
EOF2
(cd "$D" && "$NS" sweep b.jsonl -m "$M" --sample 16 --concurrency 1,2,4 --point-seconds 0.3 --out sw >/dev/null 2>&1)
if [ -s "$D/sw.svg" ] && shot "file://$D/sw.svg" "$D/sw.png" 760 420 && not_blank "$D/sw.png" &&
    dom "file://$D/sw.svg" | grep -q "nightshift sweep: b.jsonl" && dom "file://$D/sw.svg" | grep -q "knee: "; then
    ok render_sweep_svg
else
    fail render_sweep_svg "$(python3 tests/png_stats.py "$D/sw.png" 2>&1)"
fi
(cd "$D" && "$NS" run b.jsonl -m "$M" -o out.jsonl --sample-interval 0.005 -q >/dev/null 2>&1 &&
    "$NS" report out.jsonl.record.json -o report.html >/dev/null)
if [ -s "$D/report.html" ] && shot "file://$D/report.html" "$D/report.png" 1000 2400 && not_blank "$D/report.png" &&
    dom "file://$D/report.html" | grep -q "<h1>nightshift run report</h1>" &&
    dom "file://$D/report.html" | grep -q "Throughput over time"; then
    ok render_report_html
else
    fail render_report_html "$(python3 tests/png_stats.py "$D/report.png" 2>&1)"
fi
# keep the screenshots when asked (bench/ holds one of each)
if [ -n "${NIGHTSHIFT_RENDER_KEEP:-}" ]; then cp "$D/sw.png" "$D/report.png" "$NIGHTSHIFT_RENDER_KEEP/"; fi
exit $E2E_FAILED
