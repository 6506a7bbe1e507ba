#!/bin/bash
# bench/gpu_carry.sh — fills the carried folder D (default tmp/cuda, git-ignored) that bench/gpu.sh and the
# other bench/gpu_*.sh scripts expect on the GPU machine, from a CUDA build made here:
#   nightshift, test_cuda and bench_cuda (stripped: the device needs no debug info, and the carry is capped
#   at 64 MiB), lib/ (the shared libraries they link that are not the C library's own, so that the
#   device's image needs none of the Debian packages), shared/ (stories260K, golden completions
#   ), stories.txt, COMMIT, and with MODELS=1 the SmolLM2 model from models/.
# Usage (here): make CUDA=1 BUILD=build-cuda all build-cuda/bench/bench_cuda && bash bench/gpu_carry.sh
set -eu
B=${B:-build-cuda} D=${D:-tmp/cuda} SHARED=${SHARED:-../shared}
rm -rf "$D"
mkdir -p "$D/lib" "$D/shared/models" "$D/shared/testdata"
for f in nightshift tests/test_cuda bench/bench_cuda; do
    [ -x "$B/$f" ] && strip -o "$D/$(basename "$f")" "$B/$f"
done
ldd "$B/nightshift" | awk '/=> \// {print $3}' | grep -v -E '/(libc|libm|libpthread|libdl|librt|ld-linux[^/]*)\.so' |
    grep -v -E 'libcu|libnv' | while read -r l; do cp -L "$l" "$D/lib/"; done
cp "$SHARED/models/stories260K.gguf" "$D/shared/models/"
cp -r "$SHARED/testdata/golden" "$D/shared/testdata/"
cp examples/stories.txt "$D/"
git rev-parse --short HEAD >"$D/COMMIT"
if [ "${MODELS:-0}" = 1 ]; then mkdir -p "$D/models" && cp models/SmolLM2-135M-Instruct.Q4_1.gguf "$D/models/"; fi
du -sh "$D"
