#!/usr/bin/env bash
# bench/kv_quality.sh [MODEL] [N_GEN] — builds bench/kv_quality.c against build/libnightshift.a and runs it:
# greedy agreement and logit error of KV f16 / q8_0 against f32. Run `make` first.
set -e
cd "$(dirname "$0")/.."
mkdir -p build/bench
cc -std=c11 -O2 -mavx2 -mfma -mf16c -D_GNU_SOURCE -Isrc bench/kv_quality.c build/libnightshift.a -o build/bench/kv_quality \
    -lsqlite3 -ljansson -lpcre2-8 -lcrypto -lxxhash -lpthread -lm
exec build/bench/kv_quality "$@"
