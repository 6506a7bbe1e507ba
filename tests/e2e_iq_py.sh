#!/usr/bin/env bash
# e2e_iq_py — the codebook, lattice and ternary types (IQ4_NL, IQ4_XS, IQ3_XXS, IQ3_S, IQ2_XXS, IQ2_XS, IQ2_S,
# IQ1_S, IQ1_M, TQ1_0, TQ2_0) and Q8_K, dequantized by nightshift, against an independent reader of the
# format: the `gguf` package from PyPI (its NumPy dequantizers), installed on first use into a venv next to
# the binary as e2e_gguf_py.sh does (NIGHTSHIFT_GGUF_VENV overrides it); skipped cleanly when it cannot be
# installed. gguf-py writes a file of random blocks of every type (finite scales); `nightshift quantize ...
# f32` dequantizes every tensor through the table of types; the values must equal gguf-py's bit for bit
# (every type's d * s * g is exact in f32, quant_iq.h). Then nightshift's IQ4_NL and IQ4_XS quantizers,
# read back by gguf-py, stay within their error bounds of the F32 input.
. tests/lib.sh

venv=${NIGHTSHIFT_GGUF_VENV:-$(dirname "$NS")/gguf-venv}
if ! "$venv/bin/python" -c 'import gguf' 2>/dev/null; then
    python3 -m venv "$venv" >/dev/null 2>&1 &&
        timeout 180 "$venv/bin/pip" install -q --retries 0 --timeout 15 gguf >/dev/null 2>&1
fi
if ! "$venv/bin/python" -c 'import gguf' 2>/dev/null; then
    skip iq_py_dequantize "the gguf package could not be installed into $venv (no network?)"
    exit 0
fi

cat >"$e2e_tmp/write.py" <<'PY'
import sys
import numpy as np
import gguf
from gguf import GGMLQuantizationType as T

# where each type keeps its f16 scale (None: see below), so random bytes there can be made finite
D_AT = {"IQ4_NL": 0, "IQ4_XS": 0, "IQ3_XXS": 0, "IQ3_S": 0, "IQ2_XXS": 0, "IQ2_XS": 0, "IQ2_S": 0,
        "IQ1_S": 0, "TQ1_0": 52, "TQ2_0": 64, "IQ1_M": None, "Q8_K": None}
rng = np.random.default_rng(7)
w = gguf.GGUFWriter(sys.argv[1], "llama")
w.add_block_count(1)
for i, name in enumerate(D_AT):
    qt = T[name]
    bs, tb = gguf.GGML_QUANT_SIZES[qt]
    n_rows, n_cols = 4, 512
    nb = n_rows * n_cols // bs
    blocks = rng.integers(0, 256, size=(nb, tb), dtype=np.uint8)
    d = (rng.standard_normal(nb) * 0.05).astype(np.float16)
    if name == "IQ1_M":  # the f16 is the top nibbles of the four u16 scales at 48
        sc = blocks[:, 48:56].copy().view(np.uint16)
        h = d.view(np.uint16)
        for k in range(4):
            sc[:, k] = (sc[:, k] & 0x0FFF) | (((h >> (4 * k)) & 0xF) << 12)
        blocks[:, 48:56] = sc.view(np.uint8)
    elif name == "Q8_K":
        blocks[:, 0:4] = (rng.standard_normal(nb) * 0.01).astype(np.float32).view(np.uint8).reshape(nb, 4)
    else:
        blocks[:, D_AT[name]:D_AT[name] + 2] = d.view(np.uint8).reshape(nb, 2)
    w.add_tensor(f"blk.0.t{i}_{name.lower()}.weight", blocks.reshape(n_rows, -1), raw_dtype=qt)
w.write_header_to_file()
w.write_kv_data_to_file()
w.write_tensors_to_file()
w.close()
PY

cat >"$e2e_tmp/compare.py" <<'PY'
import sys
import numpy as np
import gguf
from gguf import quants

src = {t.name: t for t in gguf.GGUFReader(sys.argv[1]).tensors}
bad = []
for t in gguf.GGUFReader(sys.argv[2]).tensors:
    s = src[t.name]
    if s.tensor_type.name == "Q8_K":  # gguf-py has no Q8_K dequantizer: {f32 d; int8 q[256]; int16 bsums[16]}
        b = np.asarray(s.data, dtype=np.uint8).reshape(-1, 292)
        ref = (b[:, 0:4].copy().view(np.float32) * b[:, 4:260].view(np.int8).astype(np.float32)).reshape(-1)
    else:
        ref = np.asarray(quants.dequantize(s.data, s.tensor_type), dtype=np.float32).reshape(-1)
    got = np.asarray(t.data, dtype=np.float32).reshape(-1)
    same = ref.view(np.uint32) == got.view(np.uint32)
    name = s.tensor_type.name
    if t.tensor_type.name != "F32" or not same.all():
        i = int(np.argmin(same))
        bad.append(f"{name}: {int((~same).sum())} of {ref.size} differ, first at {i}: {got[i]!r} vs {ref[i]!r}")
    else:
        print(f"# {name}: {ref.size} values equal gguf-py's bit for bit")
if bad:
    print("\n".join(bad))
    sys.exit(1)
PY

cat >"$e2e_tmp/bound.py" <<'PY'
import sys
import numpy as np
import gguf
from gguf import quants

BOUND = {"IQ4_NL": 0.10, "IQ4_XS": 0.10}
ref = {t.name: t for t in gguf.GGUFReader(sys.argv[1]).tensors}
bad, seen = [], set()
for t in gguf.GGUFReader(sys.argv[2]).tensors:
    name = t.tensor_type.name
    if name not in BOUND:
        continue
    seen.add(name)
    x = np.asarray(quants.dequantize(t.data, t.tensor_type), dtype=np.float64).reshape(-1)
    y = np.asarray(ref[t.name].data, dtype=np.float64).reshape(-1)
    err = float(np.sqrt(np.sum((x - y) ** 2) / np.sum(y ** 2)))
    print(f"# {t.name} ({name}): relative rms error {err:.4f}")
    if err > BOUND[name]:
        bad.append(f"{t.name} ({name}): relative rms error {err:.4f} > {BOUND[name]}")
if sys.argv[3] not in seen:
    bad.append(f"no {sys.argv[3]} tensor written")
if bad:
    print("; ".join(bad))
    sys.exit(1)
PY

if "$venv/bin/python" "$e2e_tmp/write.py" "$e2e_tmp/iq.gguf" >"$e2e_tmp/out" 2>&1 &&
    "$NS" quantize "$e2e_tmp/iq.gguf" "$e2e_tmp/f32.gguf" f32 >>"$e2e_tmp/out" 2>&1 &&
    "$venv/bin/python" "$e2e_tmp/compare.py" "$e2e_tmp/iq.gguf" "$e2e_tmp/f32.gguf" >"$e2e_tmp/cmp" 2>&1; then
    ok iq_py_dequantize_bit_exact
    cat "$e2e_tmp/cmp"
else
    fail iq_py_dequantize_bit_exact "$(tail -c 1500 "$e2e_tmp/out" "$e2e_tmp/cmp" 2>/dev/null)"
fi

for shape in tiny-256 tiny; do
    "$NS" synth --shape "$shape" --type f32 --seed 3 -o "$e2e_tmp/s32.gguf" 2>/dev/null
    for t in iq4_nl iq4_xs; do
        T=$(echo "$t" | tr a-z A-Z)
        [ "$shape" = tiny ] && T=IQ4_NL # rows of 64: IQ4_XS falls back to IQ4_NL, as llama.cpp does
        if "$NS" quantize "$e2e_tmp/s32.gguf" "$e2e_tmp/q.gguf" "$t" >"$e2e_tmp/qout" 2>&1 &&
            "$venv/bin/python" "$e2e_tmp/bound.py" "$e2e_tmp/s32.gguf" "$e2e_tmp/q.gguf" "$T" >"$e2e_tmp/out" 2>&1; then
            ok "iq_py_reads_quantized_${shape}_${t}"
            grep -m 2 "relative" "$e2e_tmp/out"
        else
            fail "iq_py_reads_quantized_${shape}_${t}" "$(tail -c 800 "$e2e_tmp/qout" "$e2e_tmp/out" 2>/dev/null)"
        fi
    done
done
exit $E2E_FAILED
