#!/usr/bin/env bash
# e2e_gpu_sh — bench/gpu.sh's logic without a GPU (the device call must not fail on a shell slip): the FLOP
# count of bench/gpu_report.py for Llama-3.1-8B at 1,024 / 300 and its bandwidth limit, then gpu.sh end to
# end on the CPU backend with a tiny padded model, a stub nvidia-smi and two stub test_cuda* binaries (their
# counts summed), and once with a budget too short for the best level.
. tests/lib.sh

# the arithmetic: Llama-3.1-8B's shape as `nightshift info --json` gives it
cat >"$e2e_tmp/info8b.json" <<'EOF'
{"name": "synth-Llama-3.1-8B", "hparams": {"embedding_length": 4096, "block_count": 32, "feed_forward_length": 14336,
 "attention.head_count": 32, "attention.head_count_kv": 8, "vocab_size": 128256},
 "tensors": {"bytes": 16060522496}, "vocab": {"size": 128256}}
EOF
echo '{"gemm_tflops": 800.0, "copy_gbs": 4240.0}' >"$e2e_tmp/peaks.json"
python3 bench/gpu_report.py --info "$e2e_tmp/info8b.json" --peaks "$e2e_tmp/peaks.json" >"$e2e_tmp/r8b" 2>&1
if grep -q "linear 18.467 + head 0.315 + attention 0.459 = 19.242 TFLOP" "$e2e_tmp/r8b" &&
    grep -q "batch-1 decode limit 264.0 tok/s" "$e2e_tmp/r8b"; then
    ok gpu_report_8b_flops
else
    fail gpu_report_8b_flops "$(head -5 "$e2e_tmp/r8b")"
fi

# gpu.sh on the CPU: D holds the binaries as the device's carried folder does
d=$e2e_tmp/d
mkdir -p "$d" "$e2e_tmp/bin"
ln -s "$(cd "$(dirname "$NS")" && pwd)/$(basename "$NS")" "$d/nightshift"
ln -s "$(cd "$SHARED" && pwd)" "$d/shared"
printf '#!/bin/sh\necho "ok kernel_a"\necho "ok kernel_b"\necho "FAIL step_c: off by one"\n' >"$d/test_cuda"
printf '#!/bin/sh\necho "ok engine_d"\necho "skip engine_e: no model"\n' >"$d/test_cuda_engine"
cat >"$e2e_tmp/bin/nvidia-smi" <<'EOF'
#!/bin/bash
case "$*" in
*-lms*) while :; do echo 2048; sleep 0.2; done ;;
*) echo "Stub GPU, 143771 MiB, 580.00, 1980 MHz" ;;
esac
EOF
chmod +x "$d/test_cuda" "$d/test_cuda_engine" "$e2e_tmp/bin/nvidia-smi"
"$NS" synth --shape tiny --type bf16 --n-vocab 4096 -o "$e2e_tmp/m.gguf" 2>/dev/null
run_gpu_sh() {
    PATH=$e2e_tmp/bin:$PATH D=$d MODEL=$e2e_tmp/m.gguf BACKEND=cpu PROMPT=32 GEN=8 LEVELS=1,4 BEST=8 E2E=0 \
        SKIP_HF=1 EXTRA="-t 1" "$@" bash bench/gpu.sh
}
OUT=$e2e_tmp/out BEST_REQS=16 BUDGET=120 run_gpu_sh >"$e2e_tmp/log" 2>&1
log=$e2e_tmp/log
expect gpu_sh_phases grep -q "done (.* s of the 120 s budget)" "$log"
expect gpu_sh_test_counts grep -q "test_cuda rc=0: 3 ok, 1 failed, 1 skipped" "$log"
expect gpu_sh_reuses_model grep -q "reusing $e2e_tmp/m.gguf" "$log"
if grep -q "^| nightshift | 1 | 2 | " "$log" && grep -q "^| nightshift | 4 | 8 | " "$log" &&
    grep -q "^| nightshift | 8 | 16 | .* | 2048 |$" "$log" && grep -q "^== batch-1 decode: " "$log"; then
    ok gpu_sh_report_rows
else
    fail gpu_sh_report_rows "$(grep -A8 '== results' "$log")"
fi
OUT=$e2e_tmp/out2 BEST_REQS=100000 BUDGET=30 SKIP_TESTS=1 run_gpu_sh >"$e2e_tmp/log2" 2>&1
if grep -q "too little time left for 8 requests at concurrency 8: skipped" "$e2e_tmp/log2" &&
    grep -q "^| nightshift | 4 | 8 | " "$e2e_tmp/log2"; then
    ok gpu_sh_best_fits_budget
else
    fail gpu_sh_best_fits_budget "$(tail -12 "$e2e_tmp/log2")"
fi

exit $E2E_FAILED
