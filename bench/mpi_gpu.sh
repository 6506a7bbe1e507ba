#!/bin/bash
# bench/mpi_gpu.sh — the multi-GPU measurement of issue 19 as one invocation on the two-GPU device machine
# (`nvidia-h200-x2`): one backlog over 1 rank then 2 ranks (one per GPU), back to back, same backlog.
#
#   1. installs OpenMPI if mpicc is missing (scripts/install-deps mpi; root) and builds with CUDA=1 MPI=1
#      into build-cuda-mpi/ (or uses NS=path/to/nightshift if given: a binary built that way)
#   2. synth llama-8b bf16 (vocabulary VOCAB, default the deepseek-llm one under ../shared or $SHARED,
#      padded to Llama 3's 128,256 tokens by synth)
#   3. writes N (default 4000) requests of PROMPT (1024) random token ids each, GEN (300) tokens, greedy, EOS
#      ignored: every request costs the same, so the scaling is the engine's and the protocol's alone
#   4. mpirun -np 1, then -np 2 (--backend cuda; rank r takes GPU r), each from a fresh output
#   5. prints wall times, the scaling, every rank's busy fraction and requests, the coordinator's share,
#      and checks every id exactly once in each run's output (and the two runs' texts equal)
# Usage (device):  bash bench/mpi_gpu.sh        env: N PROMPT GEN NPS ("1 2") OUT (/tmp/mpi_gpu) TIMEOUT (s per run)
set -u
N=${N:-4000} PROMPT=${PROMPT:-1024} GEN=${GEN:-300} NPS=${NPS:-"1 2"} OUT=${OUT:-/tmp/mpi_gpu}
SHARED=${SHARED:-$(cd .. && pwd)/shared}
VOCAB=${VOCAB:-$SHARED/testdata/vocab/ggml-vocab-deepseek-llm.gguf}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mkdir -p "$OUT"
nvidia-smi --query-gpu=index,name,memory.total --format=csv,noheader
if [ -z "${NS:-}" ]; then
    command -v mpicc >/dev/null 2>&1 || scripts/install-deps mpi || { echo "no OpenMPI"; exit 1; }
    make -j"$(nproc)" CUDA=1 MPI=1 BUILD=build-cuda-mpi build-cuda-mpi/nightshift >"$OUT/build.log" 2>&1 ||
        { tail -20 "$OUT/build.log"; exit 1; }
    NS=$PWD/build-cuda-mpi/nightshift
fi
M=$OUT/l8b.gguf
[ -f "$M" ] || "$NS" synth --shape llama-8b --type bf16 --vocab "$VOCAB" -o "$M" 2>&1 | tail -1
python3 - "$OUT/backlog.jsonl" "$N" "$PROMPT" "$GEN" <<'PY'
import json, random, sys
path, n, plen, gen = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
rnd = random.Random(19)
with open(path, "w") as f:
    for i in range(n):
        ids = [rnd.randrange(1000, 100000) for _ in range(plen)]
        f.write(json.dumps({"id": "g%05d" % i, "prompt": ids, "max_tokens": gen, "temperature": 0,
                            "ignore_eos": True}) + "\n")
PY
for np in $NPS; do
    rm -rf "$OUT/np$np" && mkdir -p "$OUT/np$np"
    t0=$(date +%s.%N)
    timeout "${TIMEOUT:-3000}" mpirun -np "$np" --bind-to none "$NS" run "$OUT/backlog.jsonl" -m "$M" --backend cuda \
        -o "$OUT/np$np/out.jsonl" -q >"$OUT/np$np.log" 2>&1
    echo "np $np: rc $? in $(echo "$(date +%s.%N) - $t0" | bc) s (mpirun wall)"
done
python3 - "$OUT" "$N" $NPS <<'PY'
import json, sys
out, n, nps = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
walls, texts = {}, {}
for np_ in nps:
    d = f"{out}/np{np_}"
    ids = [json.loads(l)["custom_id"] for l in open(f"{d}/out.jsonl")]
    errs = sum(1 for _ in open(f"{d}/out.jsonl.errors.jsonl"))
    once = len(ids) == n and len(set(ids)) == n and errs == 0
    texts[np_] = {json.loads(l)["custom_id"]: json.loads(l)["response"]["body"]["choices"][0]["text"]
                  for l in open(f"{d}/out.jsonl")}
    rec = json.load(open(f"{d}/out.jsonl.record.json"))
    walls[np_] = rec["time"]["wall_s"]
    print(f"np {np_}: {len(ids)} results, {len(set(ids))} distinct ids, {errs} errors: "
          f"{'every id exactly once' if once else 'NOT exactly once'}; record wall {walls[np_]} s")
    dist = rec.get("distributed")
    if dist:
        print(f"  coordinator {dist['coordinator_s']:.2f} s = {100 * dist['coordinator_share']:.2f}% of wall "
              f"(serving the ranks {dist['serve_s']:.2f} s)")
        for r in dist["ranks"]:
            print(f"  rank {r['rank']}: {r['requests']} requests, {r['gen_tokens']} gen tokens, "
                  f"{r['gen_tok_s']:.0f} gen tok/s, busy {100 * r['busy_fraction']:.1f}%, "
                  f"peak rss {r['peak_rss_bytes'] / 2**30:.1f} GiB")
if len(nps) >= 2 and all(walls.get(x) for x in nps[:2]):
    a, b = nps[0], nps[1]
    print(f"scaling np {a} -> np {b}: {walls[a] / walls[b]:.2f}x")
    same = sum(texts[a][k] == texts[b].get(k) for k in texts[a])
    print(f"identical texts across the two runs: {same} of {len(texts[a])}")
PY
