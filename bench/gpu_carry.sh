#!/bin/bash
# bench/gpu_carry.sh — fills the carried folder D (default tmp/cuda, git-ignored) that bench/gpu.sh and the
# other bench/gpu_*.sh scripts expect on the GPU machine, from a CUDA build made here:
#   nightshift and bench_cuda (stripped: the device needs no debug info, and the carry is capped at 64 MiB),
#   every tests/test_cuda* binary, stripped, in one archive cuda_tests.tar.xz (each holds the same ~11 MB of
#   device code: copied, the five would take the carry past its cap; under xz -9 they are ~2.5 MB, and
#   bench/cuda_tests.sh unpacks them into D on the device before it runs them), lib/ (the shared
#   libraries they link that are not the C library's own, so that the device's image needs none of the
#   Debian packages), shared/ (stories260K, golden completions), stories.txt, COMMIT, and with MODELS=1 the
#   SmolLM2 model from models/.
# Usage (here): make CUDA=1 BUILD=build-cuda all build-cuda/bench/bench_cuda && bash bench/gpu_carry.sh
set -eu
B=${B:-build-cuda} D=${D:-tmp/cuda} SHARED=${SHARED:-../shared}
rm -rf "$D"
mkdir -p "$D/lib" "$D/shared/models" "$D/shared/testdata"
for f in nightshift bench/bench_cuda; do
    if [ -x "$B/$f" ]; then strip -o "$D/$(basename "$f")" "$B/$f"; fi
done
t=$(mktemp -d)
for f in "$B"/tests/test_cuda*; do
    case "$f" in *.o | *.d) continue ;; esac
    if [ -f "$f" ] && [ -x "$f" ]; then strip -o "$t/$(basename "$f")" "$f"; fi
done
if ls "$t"/test_cuda* >/dev/null 2>&1; then (cd "$t" && tar -cf - test_cuda*) | xz -9 -T1 >"$D/cuda_tests.tar.xz"; fi
rm -rf "$t"
ldd "$B/nightshift" | awk '/=> \// {print $3}' | grep -v -E '/(libc|libm|libpthread|libdl|librt|ld-linux[^/]*)\.so' |
    grep -v -E 'libcu|libnv' | while read -r l; do cp -L "$l" "$D/lib/"; done
cp "$SHARED/models/stories260K.gguf" "$D/shared/models/"
cp -r "$SHARED/testdata/golden" "$D/shared/testdata/"
cp examples/stories.txt "$D/"
git rev-parse --short HEAD >"$D/COMMIT"
if [ "${MODELS:-0}" = 1 ]; then mkdir -p "$D/models" && cp models/SmolLM2-135M-Instruct.Q4_1.gguf "$D/models/"; fi
du -sh "$D"
