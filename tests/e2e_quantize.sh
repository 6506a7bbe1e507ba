#!/usr/bin/env bash
# e2e_quantize — `nightshift quantize` through the real binary: usage errors exit 2 with the message, runtime
# errors exit 1, the report names the types and fallbacks, the output loads (`info`, `generate`), and
# another GGUF reader (the `gguf` package from PyPI, in the venv e2e_gguf_py.sh installs; skipped without
# it) reads every type written from stories260K with values within the type's error bound of the F32
# source. SmolLM2 (Q4_1) parts are skipped when the model is not fetched.
. tests/lib.sh

src="$SHARED/models/stories260K.gguf"
smol=models/SmolLM2-135M-Instruct.Q4_1.gguf

"$NS" quantize --help >"$e2e_tmp/help" 2>&1 && grep -q "q4_k_m" "$e2e_tmp/help" && ok quantize_help ||
    fail quantize_help "$(head -3 "$e2e_tmp/help")"
expect_err quantize_missing_args 2 "give IN.gguf OUT.gguf TYPE" "$NS" quantize "$src" "$e2e_tmp/x.gguf"
expect_err quantize_unknown_type 2 "unknown type 'q4_k' (types: f32, f16" "$NS" quantize "$src" "$e2e_tmp/x.gguf" q4_k
expect_err quantize_unknown_flag 2 "unknown flag '--bogus'" "$NS" quantize "$src" "$e2e_tmp/x.gguf" q8_0 --bogus
expect_err quantize_bad_threads 2 "--threads expects an integer" "$NS" quantize "$src" "$e2e_tmp/x.gguf" q8_0 --threads 0
expect_err quantize_same_file 1 "is the input file" "$NS" quantize "$src" "$src" q8_0
echo "not a gguf" >"$e2e_tmp/bad.gguf"
expect_err quantize_not_gguf 1 "bad.gguf" "$NS" quantize "$e2e_tmp/bad.gguf" "$e2e_tmp/x.gguf" q8_0
[ ! -e "$e2e_tmp/x.gguf" ] && ok quantize_failures_write_nothing || fail quantize_failures_write_nothing "x.gguf exists"

# stories260K: rows of 64 and 172 -> K-quant fallbacks, F16 for ffn_down (172 is not whole 32-blocks)
if "$NS" quantize "$src" "$e2e_tmp/q4km.gguf" q4_k_m >"$e2e_tmp/out" 2>"$e2e_tmp/err"; then
    if grep -q "^tensors: 48: 37 converted, 11 copied" "$e2e_tmp/out" && grep -q "^  Q5_0 " "$e2e_tmp/out" &&
        grep -q "note: blk.0.ffn_down.weight: rows of 172 are not whole 256-element blocks of Q" "$e2e_tmp/err"; then
        ok quantize_report
    else
        fail quantize_report "$(cat "$e2e_tmp/out" "$e2e_tmp/err" | head -20)"
    fi
else
    fail quantize_report "exit $?: $(tail -3 "$e2e_tmp/err")"
fi
"$NS" info "$e2e_tmp/q4km.gguf" 2>/dev/null | grep -q "Q4_K_M (15)" && ok quantize_file_type ||
    fail quantize_file_type "info does not show Q4_K_M (15)"
out=$("$NS" generate -m "$e2e_tmp/q4km.gguf" -p "Once upon a time" -n 8 2>/dev/null)
[ -n "$out" ] && ok quantize_output_generates || fail quantize_output_generates "no completion"

# OUT is replaced whole: an existing file is overwritten, and nothing is left next to it
echo old >"$e2e_tmp/over.gguf"
"$NS" quantize "$src" "$e2e_tmp/over.gguf" q8_0 >/dev/null 2>&1 && [ "$(head -c 4 "$e2e_tmp/over.gguf")" = GGUF ] &&
    [ -z "$(ls "$e2e_tmp" | grep partial)" ] && ok quantize_replaces_out || fail quantize_replaces_out "$(ls "$e2e_tmp")"

if [ -f "$smol" ]; then
    "$NS" quantize "$smol" "$e2e_tmp/smol.gguf" q4_1 >"$e2e_tmp/out" 2>&1 && cmp -s "$smol" "$e2e_tmp/smol.gguf" &&
        ok quantize_smollm2_same_type_same_bytes || fail quantize_smollm2_same_type_same_bytes "$(tail -3 "$e2e_tmp/out")"
    if "$NS" quantize "$smol" "$e2e_tmp/smol.gguf" q4_k_m >"$e2e_tmp/out" 2>&1 &&
        grep -q "^  Q6_K " "$e2e_tmp/out" && grep -q "^  Q4_K " "$e2e_tmp/out" && grep -q "^  Q4_1 .* 0$" "$e2e_tmp/out"; then
        ok quantize_smollm2_q4_k_m
    else
        fail quantize_smollm2_q4_k_m "$(tail -12 "$e2e_tmp/out")"
    fi
else
    skip quantize_smollm2 "no $smol (scripts/fetch-model)"
fi

venv=${NIGHTSHIFT_GGUF_VENV:-$(dirname "$NS")/gguf-venv}
if ! "$venv/bin/python" -c 'import gguf' 2>/dev/null; then
    skip quantize_gguf_py "the gguf package is not installed in $venv (tests/e2e_gguf_py.sh installs it)"
    exit $E2E_FAILED
fi
cat >"$e2e_tmp/check.py" <<'PY'
import sys
import numpy as np
import gguf
from gguf import quants

# relative rms error bounds of each type against the F32 source's real weights
BOUND = {"F32": 0.0, "F16": 0.001, "BF16": 0.005, "Q8_0": 0.01, "Q6_K": 0.02, "Q5_0": 0.065, "Q5_1": 0.065,
         "Q5_K": 0.04, "Q4_0": 0.12, "Q4_1": 0.10, "Q4_K": 0.08, "Q3_K": 0.17, "Q2_K": 0.32, "IQ4_NL": 0.10,
         "IQ4_XS": 0.10}
ref = {t.name: t for t in gguf.GGUFReader(sys.argv[1]).tensors}
r = gguf.GGUFReader(sys.argv[2])
want = int(sys.argv[3])
ft = r.fields["general.file_type"]
bad, worst = [], {}
if int(ft.parts[ft.data[0]][0]) != want:
    bad.append(f"general.file_type {int(ft.parts[ft.data[0]][0])} != {want}")
for t in r.tensors:
    f = ref[t.name]
    x = np.asarray(quants.dequantize(t.data, t.tensor_type), dtype=np.float64).reshape(-1)
    y = np.asarray(f.data, dtype=np.float64).reshape(-1)
    err = float(np.sqrt(np.sum((x - y) ** 2) / np.sum(y ** 2)))
    name = t.tensor_type.name
    worst[name] = max(worst.get(name, 0.0), err)
    if list(t.shape) != list(f.shape) or name not in BOUND or err > BOUND[name]:
        bad.append(f"{t.name} ({name}, shape {list(t.shape)}): relative rms error {err:.4f}")
print(" ".join(f"{k} {v:.4f}" for k, v in sorted(worst.items())))
if bad:
    print("; ".join(bad[:5]))
    sys.exit(1)
PY
# stories260K's real weights (rows of 64 and 172: the K-quants fall back), and synth's tiny-256 F32 file
# (rows of 256: real K-quant super-blocks)
"$NS" synth --shape tiny-256 --type f32 --seed 3 -o "$e2e_tmp/t256.gguf" 2>/dev/null
check() { # LABEL SOURCE TYPE FILE_TYPE
    if "$NS" quantize "$2" "$e2e_tmp/t.gguf" "$3" >/dev/null 2>"$e2e_tmp/err" &&
        "$venv/bin/python" "$e2e_tmp/check.py" "$2" "$e2e_tmp/t.gguf" "$4" >"$e2e_tmp/out" 2>&1; then
        ok "quantize_gguf_py_reads_${1}_$3"
        echo "# $1 $3 worst relative rms error by type: $(head -1 "$e2e_tmp/out")"
    else
        fail "quantize_gguf_py_reads_${1}_$3" "$(tail -c 600 "$e2e_tmp/out" "$e2e_tmp/err" 2>/dev/null)"
    fi
}
for t in f16:1 bf16:32 q8_0:7 q5_1:9 q4_0:2 q4_1:3 q2_k:10 q4_k_m:15; do
    check stories260k "$src" "${t%%:*}" "${t##*:}"
done
for t in q2_k:10 q3_k_m:12 q4_k_s:14 q4_k_m:15 q5_k_m:17 q6_k:18; do
    check tiny256 "$e2e_tmp/t256.gguf" "${t%%:*}" "${t##*:}"
done
exit $E2E_FAILED
