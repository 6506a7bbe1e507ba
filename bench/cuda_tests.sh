# bench/cuda_tests.sh — sourced by bench/gpu.sh and the other bench/gpu_*.sh scripts (not run on its own):
# the device tests are several binaries (D/test_cuda*: kernels, attention, steps, engine, ...), and
#   cuda_tests LOG SECONDS
# runs every one of them in D in turn, within SECONDS in all, their lines into LOG (emptied first), each
# after a line "== NAME" and, when its status N is not 0, followed by "NAME exited with status N"; so grep -c
# '^ok' / '^FAIL' / '^skip' on LOG sums their counts. A binary that the time does not reach gets "skip NAME:
# ...". Sets CUDA_TESTS_RC: 0 when every binary exited 0, else the last non-zero status (124: its timeout),
# 127 when D holds none. The environment (TEST_CUDA_ONLY, ...) passes through. The binaries come from
# D/cuda_tests.tar.xz (bench/gpu_carry.sh packs them so) when D holds no test_cuda yet: cuda_tests_unpack
# (also for a script that runs one of them itself).
cuda_tests_unpack() {
    local a=$D/cuda_tests.tar.xz
    [ -f "$a" ] && [ ! -x "$D/test_cuda" ] || return 0
    tar -xJf "$a" -C "$D" 2>/dev/null ||
        python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' "$a" "$D"
}
cuda_tests() {
    local log=$1 end=$(($(date +%s) + $2)) t name left rc
    CUDA_TESTS_RC=127
    : >"$log"
    cuda_tests_unpack >>"$log" 2>&1
    for t in "$D"/test_cuda*; do
        [ -f "$t" ] && [ -x "$t" ] || continue
        name=$(basename "$t")
        [ "$CUDA_TESTS_RC" = 127 ] && CUDA_TESTS_RC=0
        echo "== $name" >>"$log"
        left=$((end - $(date +%s)))
        if [ "$left" -le 0 ]; then
            echo "skip $name: the tests' $2 s ran out before it" >>"$log"
            CUDA_TESTS_RC=124
            continue
        fi
        timeout "$left" "$t" >>"$log" 2>&1
        rc=$?
        if [ "$rc" != 0 ]; then
            CUDA_TESTS_RC=$rc
            echo "$name exited with status $rc$([ "$rc" = 124 ] && echo ": the tests' $2 s ran out")" >>"$log"
        fi
    done
    [ "$CUDA_TESTS_RC" = 127 ] && echo "no $D/test_cuda* binaries (bench/gpu_carry.sh fills D)" >>"$log"
}
