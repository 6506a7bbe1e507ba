#!/bin/sh
# bench/device_cpu_scaling.sh — issue 4's stories260K benchmark (128/128, total tok/s at concurrency 64 vs
# 1) on a many-core host, at several thread counts, for two builds side by side. CPU only: the GPU of the
# device machine is not used. Expects, under tmp/devbin (git-ignored, built on the VM and carried):
#   nightshift-new, nightshift-old   the builds to compare
#   lib/                             their shared libraries (Debian 12's)
#   models/stories260K.gguf
#   test_cpu_kernels, test_backend, test_engine    run first, as a correctness check on this CPU
# Usage (on the device machine, from the repository root): sh bench/device_cpu_scaling.sh [REPS=3]
set -u
D=tmp/devbin
REPS=${1:-3}
export LD_LIBRARY_PATH="$PWD/$D/lib"
OUT=${OUT:-/tmp}
echo "== host"; nproc; grep -m1 'model name' /proc/cpuinfo; grep -o -m1 'avx512f' /proc/cpuinfo | head -1
echo "== correctness on this CPU (stories260K; SmolLM2 cases skip: not carried)"
NIGHTSHIFT_SHARED="$PWD/$D" "$D/test_cpu_kernels" > "$OUT/test_cpu_kernels.log" 2>&1; echo "test_cpu_kernels rc $?"
tail -1 "$OUT/test_cpu_kernels.log"
NIGHTSHIFT_SHARED="$PWD/$D" "$D/test_backend" > "$OUT/test_backend.log" 2>&1; echo "test_backend rc $?"; tail -1 "$OUT/test_backend.log"
NIGHTSHIFT_SHARED="$PWD/$D" "$D/test_engine" > "$OUT/test_engine.log" 2>&1; echo "test_engine rc $?"; tail -1 "$OUT/test_engine.log"
M="$D/models/stories260K.gguf"
run() { # build threads conc requests [env]
    env $5 "$D/nightshift-$1" bench -m "$M" --prompt-len 128 --gen-len 128 --concurrency "$3" --requests "$4" -t "$2" \
        --json 2>/dev/null | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["levels"][0]["total_tok_s"])'
}
echo "== total tok/s, stories260K, prompt 128 + gen 128, medians of $REPS (c1: 64 requests; c64: 512)"
printf '%-4s %-3s %10s %10s %7s\n' build T c1 c64 ratio
for T in ${TLIST:-1 2 4 8 16}; do
    for b in old new; do
        c1s=""; c64s=""
        for r in $(seq "$REPS"); do
            c1s="$c1s $(run $b $T 1 64 X=1)"; c64s="$c64s $(run $b $T 64 512 X=1)"
        done
        python3 - "$b" "$T" "$c1s" "$c64s" <<'EOF'
import sys, statistics as st
b, t, a, c = sys.argv[1], sys.argv[2], [float(x) for x in sys.argv[3].split()], [float(x) for x in sys.argv[4].split()]
m1, m64 = st.median(a), st.median(c)
print(f"{b:<4} {t:<3} {m1:10.0f} {m64:10.0f} {m64 / m1:7.2f}   (c1 {' '.join(f'{x:.0f}' for x in a)}; c64 {' '.join(f'{x:.0f}' for x in c)})")
EOF
    done
done
echo "== new build, plain AVX2 kernels (NIGHTSHIFT_CPU_KERNELS=avx2), T 16"
echo "c1 $(run new 16 1 64 NIGHTSHIFT_CPU_KERNELS=avx2) c64 $(run new 16 64 512 NIGHTSHIFT_CPU_KERNELS=avx2)"
