#!/usr/bin/env bash
# bench/bench_tok.sh — builds build/bench/bench_tok (make) and measures tokenizer
# throughput on ~1 MB of generated English (median of 5) for the shared vocabs and, when fetched, SmolLM2.
set -eu
cd "$(dirname "$0")/.."
make -s -j2 build/bench/bench_tok
shared=${NIGHTSHIFT_SHARED:-../shared}
for v in gpt-2 llama-spm deepseek-llm; do
    build/bench/bench_tok "$shared/testdata/vocab/ggml-vocab-$v.gguf" "${1:-1}"
done
if [ -f models/SmolLM2-135M-Instruct.Q4_1.gguf ]; then
    build/bench/bench_tok models/SmolLM2-135M-Instruct.Q4_1.gguf "${1:-1}"
fi
