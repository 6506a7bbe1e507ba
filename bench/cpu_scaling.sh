#!/usr/bin/env bash
# bench/cpu_scaling.sh [BIN] [REPS] [extra bench flags] — the issue-4 acceptance run (stories260K, 128 prompt +
# 128 generated, concurrency 1 and 64, 64 requests), one summary line per repetition: total tok/s (and
# decode t/s) at each level, their ratio, CPU seconds (user+sys) and wall of the whole run, and the load.
# Results: bench/NOTES.md ("CPU backend: batched attention ...").
set -eu
cd "$(dirname "$0")/.."
BIN=${1:-build/nightshift}
REPS=${2:-3}
shift $(($# < 2 ? $# : 2))
for _ in $(seq "$REPS"); do
    load=$(cut -d' ' -f1 /proc/loadavg)
    /usr/bin/time -f "TIME %U %S %e" "$BIN" bench -m ../shared/models/stories260K.gguf --prompt-len 128 --gen-len 128 \
        --concurrency 1,64 --requests 64 "$@" 2>&1 | python3 -c "
import sys
c, t = {}, None
for l in sys.stdin:
    f = l.split()
    if l.startswith('TIME'): t = f[1:]
    elif len(f) > 6 and f[0] in ('1', '64') and f[1].isdigit(): c[f[0]] = (float(f[4]), float(f[5]), float(f[6]))
print('c1 %.0f (decode %.0f) c64 %.0f (decode %.0f) ratio %.2f | cpu %.2fs wall %.2fs | load $load' % (
    c['1'][0], c['1'][2], c['64'][0], c['64'][2], c['64'][0] / c['1'][0], float(t[0]) + float(t[1]), float(t[2])))
"
done
