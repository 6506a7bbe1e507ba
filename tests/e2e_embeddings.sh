#!/usr/bin/env bash
# e2e_embeddings — /v1/embeddings backlog lines (issue 12 item 4) on stories260K, checked against an
# independent computation: bench/ref_llama.py --embed (NumPy, float64, written from the math) pools the
# final normed hidden states of the same token ids. stories260K has no pooling_type (last token, the
# decoder-only default); copies of it with llama.pooling_type = 1 (mean) and 2 (CLS) added cover the other
# two. Inputs of 1 to 70 tokens run with --max-batch-tokens 16 (so mean pooling sums across prefill chunks)
# beside a completion sharing a prefix (the prefix cache must not serve an embedding). Tolerance: max
# |nightshift - reference| < 2e-5 per value with an F32 KV cache (float32 arithmetic against float64;
# measured ~1e-6), < 5e-3 with the default F16 KV. Also: base64 is the same float32 values as the list,
# dimensions N is the first N values normalised again, the line shapes pass tests/oai_batch_check.py, bad
# lines are 400s naming their field, and a second run recomputes nothing and writes the same bytes.
# NumPy comes from the venv tests/e2e_gguf_py.sh makes (NIGHTSHIFT_GGUF_VENV), installed here if missing;
# without it the reference checks are skipped and the rest still runs.
. tests/lib.sh
model=$SHARED/models/stories260K.gguf
if [ ! -f "$model" ]; then skip embeddings "no $model"; exit 0; fi
export NIGHTSHIFT_CACHE_DIR=$e2e_tmp/cache
T=$e2e_tmp
venv=${NIGHTSHIFT_GGUF_VENV:-$(dirname "$NS")/gguf-venv}
if ! "$venv/bin/python" -c 'import numpy' 2>/dev/null; then
    python3 -m venv "$venv" >/dev/null 2>&1 && timeout 180 "$venv/bin/pip" install -q --retries 0 --timeout 15 numpy >/dev/null 2>&1
fi
py=python3
"$venv/bin/python" -c 'import numpy' 2>/dev/null && py=$venv/bin/python

# the model with <arch>.pooling_type added (a u32 key appended to the metadata; tensors re-aligned)
cat >"$T/pool.py" <<'PY'
import struct, sys
src, dst, pooling = sys.argv[1], sys.argv[2], int(sys.argv[3])
b = open(src, "rb").read()
n_t, n_kv = struct.unpack_from("<QQ", b, 8)
o, align = 24, 32
sizes = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
def skip(t):
    global o
    if t == 8:
        o += 8 + struct.unpack_from("<Q", b, o)[0]
    elif t == 9:
        at, n = struct.unpack_from("<IQ", b, o)
        o += 12
        for _ in range(n): skip(at)
    else:
        o += sizes[t]
for _ in range(n_kv):
    n = struct.unpack_from("<Q", b, o)[0]
    key = b[o + 8:o + 8 + n].decode()
    o += 8 + n
    t = struct.unpack_from("<I", b, o)[0]
    o += 4
    if key == "general.alignment": align = struct.unpack_from("<I", b, o)[0]
    skip(t)
kv_end = o
for _ in range(n_t):
    n = struct.unpack_from("<Q", b, o)[0]
    o += 8 + n
    nd = struct.unpack_from("<I", b, o)[0]
    o += 4 + 8 * nd + 12
base = (o + align - 1) // align * align
key = b"llama.pooling_type"
head = b[:16] + struct.pack("<Q", n_kv + 1) + b[24:kv_end] + struct.pack("<Q", len(key)) + key + struct.pack("<II", 4, pooling) + b[kv_end:o]
head += b"\0" * ((-len(head)) % align)
open(dst, "wb").write(head + b[base:])
PY

# inputs: token-id arrays (BOS first, as a text prompt gets it), 1 to 70 tokens; and one text
python3 - "$T/ids" <<'PY'
import random, sys
r = random.Random(5)
lines = [[1] + [r.randrange(3, 512) for _ in range(n - 1)] for n in (1, 5, 16, 17, 33, 70)]
open(sys.argv[1], "w").write("\n".join(" ".join(map(str, l)) for l in lines) + "\n")
PY
python3 - "$T/ids" "$T/b.jsonl" <<'PY'
import json, sys
ids = [list(map(int, l.split())) for l in open(sys.argv[1])]
def req(cid, body, url="/v1/embeddings"):
    return json.dumps({"custom_id": cid, "method": "POST", "url": url, "body": body})
L = [
    req("pre", {"prompt": ids[5][:40], "max_tokens": 3}, "/v1/completions"),  # shares ids[5]'s first blocks
    req("ids", {"input": ids, "model": "m", "user": "u"}),
    req("b64", {"input": ids[3:5], "encoding_format": "base64"}),
    req("dim", {"input": [ids[4]], "dimensions": 8, "encoding_format": "float"}),
    req("one", {"input": ids[2]}),
    req("text", {"input": "Once upon a time"}),
    req("empty", {"input": []}),
    req("blank", {"input": ["a", ""]}),
    req("dims_big", {"input": "a", "dimensions": 65}),
    req("dims_type", {"input": "a", "dimensions": "8"}),
    req("fmt", {"input": "a", "encoding_format": "hex"}),
    req("noinput", {"model": "m"}),
    req("badid", {"input": [1, 99999]}),
    req("long", {"input": "the dog ran " * 800}),  # over the 2048-token context
    req("temp", {"input": "a", "temperature": 0.5}),
]
open(sys.argv[2], "w").write("\n".join(L) + "\n")
PY

cat >"$T/check.py" <<'PY'
import base64, json, struct, subprocess, sys
res, ids_path, model, pooling, tol, py = sys.argv[1:7]
tol = float(tol)
ids = [list(map(int, l.split())) for l in open(ids_path)]
out = {}
for line in open(res):
    o = json.loads(line)
    out[o["custom_id"]] = o["response"]["body"]
def vec(d):
    e = d["embedding"]
    return list(struct.unpack("<%df" % (len(e) * 3 // 4 // 4), base64.b64decode(e))) if isinstance(e, str) else e
worst, problems = 0.0, []
def ref(toks):
    r = subprocess.run([py, "bench/ref_llama.py", "--embed", model, pooling] + list(map(str, toks)),
                       capture_output=True, text=True, check=True)
    return [float(x) for x in r.stdout.split()]
def cmp(name, got, want):
    global worst
    if len(got) != len(want):
        problems.append("%s: %d values, reference %d" % (name, len(got), len(want)))
        return
    d = max(abs(a - b) for a, b in zip(got, want))
    worst = max(worst, d)
    if d > tol: problems.append("%s: max |diff| %.3g > %g" % (name, d, tol))
refs = [ref(t) for t in ids]
for i, d in enumerate(out["ids"]["data"]): cmp("ids[%d]" % i, vec(d), refs[i])
for i, d in enumerate(out["b64"]["data"]): cmp("b64[%d]" % i, vec(d), refs[3 + i])
cmp("one", vec(out["one"]["data"][0]), refs[2])
first = refs[4][:8]
n = sum(x * x for x in first) ** 0.5
cmp("dim", vec(out["dim"]["data"][0]), [x / n for x in first])
if vec(out["b64"]["data"][0]) != [struct.unpack("<f", struct.pack("<f", x))[0] for x in vec(out["ids"]["data"][3])]:
    problems.append("b64[0] is not the same float32 values as ids[3]")
u = out["ids"]["usage"]
if u["prompt_tokens"] != sum(map(len, ids)): problems.append("usage %r, inputs hold %d tokens" % (u, sum(map(len, ids))))
print("max |nightshift - reference| %.3g over %d embeddings (tolerance %g)" % (worst, len(ids) + 4, tol))
for p in problems[:5]: print(p)
sys.exit(1 if problems else 0)
PY

args=(--threads 1 --kv-memory 4M --max-batch-tokens 16 --max-seqs 3 -q)
for pooling in last mean cls; do
    m=$model
    case $pooling in
    mean) python3 "$T/pool.py" "$model" "$T/mean.gguf" 1 && m=$T/mean.gguf ;;
    cls) python3 "$T/pool.py" "$model" "$T/cls.gguf" 2 && m=$T/cls.gguf ;;
    esac
    for kv in f32 f16; do
        o=$T/o_${pooling}_$kv.jsonl
        if ! $NS run "$T/b.jsonl" -m "$m" -o "$o" --kv-type $kv "${args[@]}" 2>"$T/log"; then
            fail "embeddings_${pooling}_${kv}_runs" "$(tail -3 "$T/log")"
            continue
        fi
        tol=2e-5
        [ $kv = f16 ] && tol=5e-3
        if [ "$py" = python3 ]; then
            skip "embeddings_${pooling}_${kv}_reference" "numpy is not installed in $venv (no network?)"
        elif out=$($py "$T/check.py" "$o" "$T/ids" "$m" $pooling $tol "$py" 2>&1); then
            ok "embeddings_${pooling}_${kv}_reference"
            echo "# $pooling pooling, $kv KV: $out"
        else
            fail "embeddings_${pooling}_${kv}_reference" "$out"
        fi
    done
done

R=$T/o_last_f16.jsonl
E=$R.errors.jsonl
out=$(python3 tests/oai_batch_check.py schema "$R" "$E") && ok embeddings_shape_schema || fail embeddings_shape_schema "$out"
python3 tests/oai_batch_check.py script "$T/b.jsonl" "$R" "$E" >"$T/script"
cat >"$T/want" <<'EOF'
b64	ok	2 embeddings
badid	error	invalid_value
blank	error	invalid_value
dim	ok	1 embeddings
dims_big	error	invalid_value
dims_type	error	invalid_type
empty	error	invalid_value
fmt	error	invalid_value
ids	ok	6 embeddings
long	error	context_length_exceeded
noinput	error	missing_required_parameter
one	ok	1 embeddings
temp	error	unknown_parameter
text	ok	1 embeddings
EOF
grep -v '^pre' "$T/script" | diff "$T/want" - >"$T/diff" && ok embeddings_script_answers || fail embeddings_script_answers "$(cat "$T/diff")"
params=$(python3 -c '
import json, sys
for l in open(sys.argv[1]):
    o = json.loads(l); e = o["response"]["body"]["error"]
    print(o["custom_id"], e["param"])' "$E" | sort | tr '\n' ' ')
[ "$params" = "badid input blank input[1] dims_big dimensions dims_type dimensions empty input fmt encoding_format long input noinput None temp temperature " ] &&
    ok embeddings_error_params || fail embeddings_error_params "$params"
text=$(python3 -c '
import json, sys
for l in open(sys.argv[1]):
    o = json.loads(l)
    if o["custom_id"] == "text": print(len(o["response"]["body"]["data"][0]["embedding"]), o["response"]["body"]["usage"]["prompt_tokens"])' "$R")
[ "$text" = "64 5" ] && ok embeddings_text_input || fail embeddings_text_input "$text"

# a second run: nothing computed, the same bytes
cp "$R" "$T/first"
$NS run "$T/b.jsonl" -m "$model" -o "$R" --kv-type f16 --threads 1 --kv-memory 4M --max-batch-tokens 16 --max-seqs 3 >/dev/null 2>"$T/log2"
if grep -q " 0 to run" "$T/log2" && cmp -s "$R" "$T/first"; then ok embeddings_resume_same_bytes
else fail embeddings_resume_same_bytes "$(grep unique "$T/log2"; cmp "$R" "$T/first")"; fi
exit $E2E_FAILED
