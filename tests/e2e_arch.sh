#!/usr/bin/env bash
# e2e_arch — the gemma3, gemma2 and phi3 architectures (issue 11 item 3) on tiny synthetic F32 files
# (`synth --shape gemma3-tiny|gemma2-tiny|phi3-tiny`, sliding windows of 8 positions), checked against an
# independent computation: bench/ref_gemma.py (NumPy, float64, written from the math).
#  - greedy ids: `generate --ids` on prompts of 4, 21 and 53 tokens (past the window, and past a whole
#    32-position attention chunk plus the window, where local layers skip chunks) must equal the
#    reference's greedy ids;
#  - hidden states: /v1/embeddings (last-token pooling: the final normed hidden state) of id inputs of 1 to
#    70 tokens through `nightshift run` with --max-batch-tokens 16 (prefill split across steps, windows
#    reaching into earlier steps' KV) within 2e-5 of the reference per value (F32 KV);
#  - the CUDA backend refuses these architectures (`info` says so when it is built and usable).
# NumPy comes from the venv tests/e2e_gguf_py.sh makes (NIGHTSHIFT_GGUF_VENV), installed here if missing;
# without it the reference checks are skipped (the files are still made and run).
. tests/lib.sh
T=$e2e_tmp
export NIGHTSHIFT_CACHE_DIR=$T/cache
venv=${NIGHTSHIFT_GGUF_VENV:-$(dirname "$NS")/gguf-venv}
if ! "$venv/bin/python" -c 'import numpy' 2>/dev/null; then
    python3 -m venv "$venv" >/dev/null 2>&1 && timeout 180 "$venv/bin/pip" install -q --retries 0 --timeout 15 numpy >/dev/null 2>&1
fi
py=
"$venv/bin/python" -c 'import numpy' 2>/dev/null && py=$venv/bin/python

prompts=("once upon a time"
         "once upon a time the little girl named lily went to the park with her mom"
         "the big dog saw a ball in the tree and wanted to play with it so he ran to the tree and looked up at the ball but it was very high and he could not get it")

python3 - "$T/ids" "$T/b.jsonl" <<'PY'
import json, random, sys
r = random.Random(11)
ids = [[1] + [r.randrange(3, 589) for _ in range(n - 1)] for n in (1, 7, 9, 16, 17, 40, 70)]
open(sys.argv[1], "w").write("\n".join(" ".join(map(str, l)) for l in ids) + "\n")
open(sys.argv[2], "w").write(json.dumps({"custom_id": "e", "method": "POST", "url": "/v1/embeddings",
                                         "body": {"input": ids}}) + "\n")
PY

cat >"$T/check.py" <<'PY'
import json, subprocess, sys
res, ids_path, model, py = sys.argv[1:5]
ids = [list(map(int, l.split())) for l in open(ids_path)]
data = json.loads(open(res).readline())["response"]["body"]["data"]
worst = 0.0
for toks, d in zip(ids, data):
    r = subprocess.run([py, "bench/ref_gemma.py", "--embed", model] + list(map(str, toks)),
                       capture_output=True, text=True, check=True)
    want = [float(x) for x in r.stdout.split()]
    got = d["embedding"]
    if len(got) != len(want): sys.exit("%d tokens: %d values, reference %d" % (len(toks), len(got), len(want)))
    worst = max(worst, max(abs(a - b) for a, b in zip(got, want)))
print("max |nightshift - reference| %.3g over %d inputs" % (worst, len(ids)))
sys.exit(0 if worst < 2e-5 and len(data) == len(ids) else 1)
PY

for shape in gemma3-tiny gemma2-tiny phi3-tiny; do
    m=$T/$shape.gguf
    if ! $NS synth --shape $shape --type f32 -o "$m" 2>"$T/log"; then
        fail "arch_${shape}_synth" "$(tail -2 "$T/log")"
        continue
    fi
    arch=$($NS info "$m" 2>/dev/null | awk '$1 == "architecture" {print $2}')
    [ "$arch" = "${shape%-tiny}" ] && ok "arch_${shape}_info" || fail "arch_${shape}_info" "architecture '$arch'"
    # greedy ids against the reference
    for i in 0 1 2; do
        p=${prompts[$i]}
        got=$($NS generate -m "$m" -p "$p" -n 12 --ids --threads 2 2>"$T/log")
        if [ -z "$got" ]; then
            fail "arch_${shape}_greedy_$i" "generate: $(tail -2 "$T/log")"
            continue
        fi
        if [ -z "$py" ]; then
            skip "arch_${shape}_greedy_$i" "numpy is not installed in $venv (no network?)"
            continue
        fi
        ids=$(printf '%s' "$p" | $NS tokenize -m "$m" --bos)
        want=$($py bench/ref_gemma.py "$m" 12 $ids)
        [ "$got" = "$want" ] && ok "arch_${shape}_greedy_$i" ||
            fail "arch_${shape}_greedy_$i" "nightshift '$got', reference '$want' ($(echo $ids | wc -w) prompt tokens)"
    done
    # final hidden states against the reference
    o=$T/o_$shape.jsonl
    if ! $NS run "$T/b.jsonl" -m "$m" -o "$o" --kv-type f32 --threads 2 --kv-memory 4M --max-batch-tokens 16 \
        --max-seqs 3 -q 2>"$T/log"; then
        fail "arch_${shape}_hidden" "run: $(tail -3 "$T/log")"
    elif [ -z "$py" ]; then
        skip "arch_${shape}_hidden" "numpy is not installed in $venv (no network?)"
    elif out=$($py "$T/check.py" "$o" "$T/ids" "$m" "$py" 2>&1); then
        ok "arch_${shape}_hidden"
        echo "# $shape: $out"
    else
        fail "arch_${shape}_hidden" "$out"
    fi
done

# the CUDA backend refuses them at load and in info (when built and usable here)
if $NS info "$T/gemma3-tiny.gguf" --json 2>/dev/null | python3 -c '
import json, sys
b = {x["name"]: x for x in json.load(sys.stdin)["backends"]}
sys.exit(0 if "cuda" in b and b["cuda"]["usable"] else 1)'; then
    expect_err arch_cuda_refuses 1 "architecture gemma3 is not supported by the cuda backend yet; use --backend cpu" \
        $NS generate -m "$T/gemma3-tiny.gguf" -p "once" -n 2 --backend cuda
    # without --backend, the default picks cpu for a model the GPU backend does not run, and says so
    out=$($NS generate -m "$T/gemma3-tiny.gguf" -p "once" -n 2 2>&1) && grep -q "backend cuda does not run this model (gemma3); using cpu" <<<"$out" &&
        ok arch_auto_falls_back_to_cpu || fail arch_auto_falls_back_to_cpu "$out"
    $NS info "$T/gemma3-tiny.gguf" | grep -q "can run  *yes, on cpu" && ok arch_cuda_info ||
        fail arch_cuda_info "$($NS info "$T/gemma3-tiny.gguf" | tail -2)"
else
    skip arch_cuda_refuses "no usable cuda backend here"
    skip arch_auto_falls_back_to_cpu "no usable cuda backend here"
fi
exit $E2E_FAILED
