#!/usr/bin/env bash
# bench/bench_tok.sh — builds bench/bench_tok against build/libnightshift.a and measures tokenizer
# throughput on ~1 MB of generated English (median of 5) for the shared vocabs and, when fetched, SmolLM2.
set -eu
cd "$(dirname "$0")/.."
make -s -j2 build/libnightshift.a
mkdir -p build/bench
cc -std=c11 -D_GNU_SOURCE -O2 -Isrc bench/bench_tok.c build/libnightshift.a -o build/bench/bench_tok \
    -lsqlite3 -ljansson -lpcre2-8 -lcrypto -lxxhash -lpthread -lm
shared=${NIGHTSHIFT_SHARED:-../shared}
for v in gpt-2 llama-spm deepseek-llm; do
    build/bench/bench_tok "$shared/testdata/vocab/ggml-vocab-$v.gguf" "${1:-1}"
done
if [ -f models/SmolLM2-135M-Instruct.Q4_1.gguf ]; then
    build/bench/bench_tok models/SmolLM2-135M-Instruct.Q4_1.gguf "${1:-1}"
fi
