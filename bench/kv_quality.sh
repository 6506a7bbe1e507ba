#!/usr/bin/env bash
# bench/kv_quality.sh [MODEL] [N_GEN] — builds build/bench/kv_quality (make) and runs it: greedy agreement
# and logit error of KV f16 / q8_0 against f32.
set -e
cd "$(dirname "$0")/.."
make -s -j2 build/bench/kv_quality
exec build/bench/kv_quality "$@"
