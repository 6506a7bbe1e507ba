#!/usr/bin/env bash
# e2e_gguf_py — K-quant files written by `nightshift synth` load in another GGUF reader: the `gguf` package
# from PyPI, installed on first use into a venv next to the binary (NIGHTSHIFT_GGUF_VENV overrides it);
# skipped cleanly when it cannot be installed (no network, no python3-venv). For every mix on tiny-256
# (K-quants) and tiny (llama.cpp's fallback types), every tensor has the type and shape nightshift wrote,
# and its values, dequantized by gguf-py's own code, are within the type's error bound of the same seed's
# F32 file (relative rms error of uniform values; the bounds are 1.4-1.6x what nightshift reaches).
. tests/lib.sh

venv=${NIGHTSHIFT_GGUF_VENV:-$(dirname "$NS")/gguf-venv}
if ! "$venv/bin/python" -c 'import gguf' 2>/dev/null; then
    python3 -m venv "$venv" >/dev/null 2>&1 && timeout 180 "$venv/bin/pip" install -q --retries 0 --timeout 15 gguf >/dev/null 2>&1
fi
if ! "$venv/bin/python" -c 'import gguf' 2>/dev/null; then
    skip gguf_py_reads_kquants "the gguf package could not be installed into $venv (no network?)"
    exit 0
fi

cat >"$e2e_tmp/check.py" <<'PY'
import sys
import numpy as np
import gguf
from gguf import quants

BOUND = {"Q2_K": 0.32, "Q3_K": 0.17, "Q4_K": 0.08, "Q5_K": 0.04, "Q6_K": 0.02, "Q4_0": 0.10,
         "Q5_0": 0.05, "Q5_1": 0.05, "Q8_0": 0.01, "IQ4_NL": 0.09, "F32": 0.0}
ref = {t.name: t for t in gguf.GGUFReader(sys.argv[1]).tensors}
r = gguf.GGUFReader(sys.argv[2])
bad, worst = [], {}
for t in r.tensors:
    f = ref[t.name]
    if list(t.shape) != list(f.shape):
        bad.append(f"{t.name}: shape {list(t.shape)} vs {list(f.shape)}")
        continue
    x = np.asarray(quants.dequantize(t.data, t.tensor_type), dtype=np.float64).reshape(-1)
    y = np.asarray(f.data, dtype=np.float64).reshape(-1)
    err = float(np.sqrt(np.sum((x - y) ** 2) / np.sum(y ** 2)))
    name = t.tensor_type.name
    worst[name] = max(worst.get(name, 0.0), err)
    if name not in BOUND or err > BOUND[name]:
        bad.append(f"{t.name} ({name}): relative rms error {err:.4f}")
print(" ".join(f"{k} {v:.4f}" for k, v in sorted(worst.items())))
if bad:
    print("; ".join(bad[:5]))
    sys.exit(1)
PY

for shape in tiny-256 tiny; do
    "$NS" synth --shape "$shape" --type f32 --seed 3 -o "$e2e_tmp/f32.gguf" 2>/dev/null
    for t in q2_k q3_k_m q4_k_m q5_k_m q6_k; do
        if "$NS" synth --shape "$shape" --type "$t" --seed 3 -o "$e2e_tmp/k.gguf" 2>"$e2e_tmp/err" &&
            "$venv/bin/python" "$e2e_tmp/check.py" "$e2e_tmp/f32.gguf" "$e2e_tmp/k.gguf" >"$e2e_tmp/out" 2>&1; then
            ok "gguf_py_reads_${shape}_${t}"
            echo "# $shape $t worst relative rms error by type: $(head -1 "$e2e_tmp/out")"
        else
            fail "gguf_py_reads_${shape}_${t}" "$(tail -c 600 "$e2e_tmp/out" "$e2e_tmp/err" 2>/dev/null)"
        fi
    done
done
exit $E2E_FAILED
