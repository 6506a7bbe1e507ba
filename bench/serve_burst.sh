#!/usr/bin/env bash
# bench/serve_burst.sh — the connection limits of `nightshift serve` (issue 35) at full size, for bench/NOTES.md:
# a default server (stories260K, --backend cpu) on 127.0.0.1 (free port) and tests/serve_burst.py against it:
# 1,000 connections at once (each gets a status, all counted in /metrics, the server answers right after),
# then 600 slow-header connections while one client sends 50 requests one after another (p99 within 1 s of
# its own time), held past the header deadline (each slow one answered 408).
# Usage: bench/serve_burst.sh [BINARY] [-- extra serve flags]   (default BINARY: build/nightshift, built)
set -u
cd "$(dirname "$0")/.."
bin=${1:-build/nightshift}
shift $(( $# < 1 ? $# : 1 ))
[ "${1:-}" = "--" ] && shift
[ "$bin" = build/nightshift ] && { make -s -j2 build/nightshift || exit 1; }
model=${NIGHTSHIFT_SHARED:-../shared}/models/stories260K.gguf
log=$(mktemp)
"$bin" serve -m "$model" --backend cpu --host 127.0.0.1 --port 0 --no-batches "$@" >/dev/null 2>"$log" &
pid=$!
trap 'kill -TERM $pid 2>/dev/null; wait $pid 2>/dev/null; rm -f "$log"' EXIT
port=
for _ in $(seq 1 300); do
    grep -q "ready:" "$log" &&
        port=$(grep -o 'listening on http://127.0.0.1:[0-9]*' "$log" | grep -o '[0-9]*$') && break
    sleep 0.1
done
[ -n "$port" ] || { cat "$log"; exit 1; }
echo "== $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg); serve $*"
grep "http: open files\|ready:" "$log"
timeout 600 python3 tests/serve_burst.py "http://127.0.0.1:$port" --burst 1000 --slow 600 --requests 50 \
    --max-tokens 64 --hold-past 12
