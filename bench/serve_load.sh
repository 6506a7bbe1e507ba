#!/usr/bin/env bash
# bench/serve_load.sh — load test of `nightshift serve` (issue 16) for bench/NOTES.md: a server on 127.0.0.1
# (free port) and tests/serve_load.py against it: capacity (closed loop), 10x the capacity (open loop: every
# response a completion or a 429 with Retry-After, rejections under 50 ms at p99 with --strict, every admitted
# request completes), half the capacity (no 429), and the server's peak RSS.
# Usage: bench/serve_load.sh [MODEL] [SECONDS] [-- extra serve flags]
#   default MODEL: models/SmolLM2-135M-Instruct.Q4_1.gguf; SECONDS per phase: 10;
#   default serve flags: -t 1 --max-queue 16 --max-wait 2 --kv-memory 256M (queue and wait tight enough that
#   the overload shows admission control at work; the KV budget fixed so that RSS is comparable).
set -u
cd "$(dirname "$0")/.."
model=${1:-models/SmolLM2-135M-Instruct.Q4_1.gguf}
secs=${2:-10}
shift $(( $# < 2 ? $# : 2 ))
[ "${1:-}" = "--" ] && shift
flags=("$@")
[ ${#flags[@]} -eq 0 ] && flags=(-t 1 --max-queue 16 --max-wait 2 --kv-memory 256M)
make -s -j2 build/nightshift || exit 1
log=$(mktemp)
build/nightshift serve -m "$model" --host 127.0.0.1 --port 0 "${flags[@]}" >/dev/null 2>"$log" &
pid=$!
trap 'kill -TERM $pid 2>/dev/null; wait $pid 2>/dev/null; rm -f "$log"' EXIT
port=
for _ in $(seq 1 300); do
    grep -q "ready:" "$log" && port=$(grep -o 'listening on http://127.0.0.1:[0-9]*' "$log" | grep -o '[0-9]*$') && break
    sleep 0.1
done
[ -n "$port" ] || { cat "$log"; exit 1; }
echo "== $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg); serve ${flags[*]}"
grep "ready:\|admission:" "$log"
python3 tests/serve_load.py "http://127.0.0.1:$port" --pid $pid --duration "$secs" --max-tokens 32 --strict
