#!/bin/bash
# bench/gpu_ab.sh — one device call for an A/B of two builds: test_cuda* of the new build, then on synth llama-8b
# bf16 (128,256 token rows, as bench/gpu.sh) bench_cuda steps (prefill 2048; decode B=1,256 at context 1,030) and
# `nightshift bench` 1,024 in / 300 out at RUNS (default: c256 with 2,048 requests, c1 with 4), each run old then
# new, interleaved. Carried folder tmp/cuda: the new nightshift, test_cuda*, bench_cuda, lib/, shared/, and the
# old build's nightshift and bench_cuda in tmp/cuda/old/ — or, with OLD_ENV="VAR=value ...", the new build run
# with that environment as the old side (an A/B of a switch).
set -u
. "$(dirname "$0")/cuda_tests.sh" # cuda_tests: every D/test_cuda* binary
D=tmp/cuda
export LD_LIBRARY_PATH=$PWD/$D/lib:/usr/local/cuda/lib64 NIGHTSHIFT_SHARED=$PWD/$D/shared
S=$(date +%s)
el() { echo "== [t=$(( $(date +%s) - S ))s] $*"; }
old_bin() { if [ -n "${OLD_ENV:-}" ]; then echo "env $OLD_ENV $D/$1"; else echo "$D/old/$1"; fi; }
[ -n "${SKIP_TESTS:-}" ] || {
el "test_cuda*"
cuda_tests $OUT/test_cuda.log 170; echo "test_cuda rc=$CUDA_TESTS_RC"
grep -E "^(FAIL|skip)|differ|worst" $OUT/test_cuda.log | head -30; echo "$(grep -c '^ok' $OUT/test_cuda.log) ok"
}
el synth
timeout 90 $D/nightshift synth --shape llama-8b --type bf16 -o /tmp/l8b.gguf 2>&1 | tail -1
for b in old new; do
    bin=$D/bench_cuda; [ $b = old ] && bin=$(old_bin bench_cuda)
    el "bench_cuda $b"
    timeout 120 $bin /tmp/l8b.gguf -L 1024 -B ${STEP_B:-1,256} -N 2048 --steps 8 2>&1 | tee $OUT/bench_cuda_$b.log | grep -E "^(prefill|decode|    )"
done
echo "${RUNS:---concurrency 256 --requests 2048;--concurrency 1 --requests 4}" | tr ';' '\n' | while read -r r; do
    for b in old new; do
        bin=$D/nightshift; [ $b = old ] && bin=$(old_bin nightshift)
        el "bench $b $r"
        timeout 200 $bin bench -m /tmp/l8b.gguf --backend cuda --prompt-len 1024 --gen-len 300 --json $r \
            > $OUT/bench_$b.json 2>$OUT/bench_$b.err < /dev/null
        python3 -c "import json,sys; l=json.load(open(sys.argv[1]))['levels'][0]; print('$b', l['concurrency'], l['requests'], 'total %.1f gen %.1f decode %.1f wall %.2f steps %d' % (l['total_tok_s'], l['gen_tok_s'], l.get('decode_tok_s', 0), l['wall_s'], l['steps']))" $OUT/bench_$b.json 2>&1 | tail -1
    done
done
el done
