#!/usr/bin/env bash
# bench/mpi_cpu.sh — `mpirun -np 2 --threads 1` against `-np 1 --threads 1` on this machine (issue 18):
# REPS interleaved pairs on one backlog, each from a fresh output; prints every run's wall time and the
# record's per-rank busy fractions and coordinator share, then the medians and the scaling.
#
#   bench/mpi_cpu.sh [N] [GEN] [REPS]     N requests (default 120) of short story prompts, GEN tokens each
#                                          (default 32, greedy, EOS ignored so every run does the same work)
# Environment: NS (an MPI build, default build-mpi/nightshift), MODEL (default models/SmolLM2-135M-Instruct.Q4_1.gguf),
# FLAGS (more run flags, default "--max-seqs 16": every rank then runs full batches on a backlog of N >= 64;
# with fewer requests than max_seqs x ranks, splitting them only makes every rank's batches smaller).
set -eu
cd "$(dirname "$0")/.."
N=${1:-120} GEN=${2:-32} REPS=${3:-3}
NS=${NS:-build-mpi/nightshift}
MODEL=${MODEL:-models/SmolLM2-135M-Instruct.Q4_1.gguf}
tmp=${TMPDIR:-/tmp}/ns_mpi_bench
mkdir -p "$tmp"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader
python3 - "$N" "$GEN" "$tmp/backlog.jsonl" <<'PY'
import json, random, sys
n, gen, path = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
rnd = random.Random(18)
names = ["Lily", "Tom", "Max", "Sue", "Ben", "Mia", "Sam", "Anna", "Tim", "Lucy"]
verbs = ["went to", "saw", "found", "played in", "looked at", "ran to", "liked", "wanted"]
objs = ["the park", "a big tree", "a red ball", "the sea", "a little bird", "the garden", "a toy", "the sun"]
with open(path, "w") as f:
    for i in range(n):
        p = "Write one sentence about %s, who %s %s." % (rnd.choice(names), rnd.choice(verbs), rnd.choice(objs))
        f.write(json.dumps({"id": "m%05d" % i, "prompt": p, "max_tokens": gen, "temperature": 0,
                            "ignore_eos": True}) + "\n")
PY
one() {
    local np=$1
    rm -rf "$tmp/np$np" && mkdir -p "$tmp/np$np"
    /usr/bin/time -o "$tmp/time" -f "%U %S" mpirun --oversubscribe --bind-to none -np "$np" "$NS" run "$tmp/backlog.jsonl" -m "$MODEL" --threads 1 \
        ${FLAGS:---max-seqs 16} -o "$tmp/np$np/out.jsonl" -q >"$tmp/np$np.log" 2>&1 || { echo "np $np failed: $(tail -2 "$tmp/np$np.log")"; return 1; }
    python3 - "$np" "$tmp/np$np/out.jsonl.record.json" "$N" "$tmp/np$np/out.jsonl" "$tmp/time" <<'PY' | tee -a "$tmp/runs"
import json, sys
np_, rec, n, out = sys.argv[1], json.load(open(sys.argv[2])), int(sys.argv[3]), sys.argv[4]
cpu = sum(map(float, open(sys.argv[5]).read().split()))
ids = [json.loads(l)["custom_id"] for l in open(out)]
assert len(ids) == n and len(set(ids)) == n, "not every id exactly once"
t = rec["time"]
line = f"np {np_} wall {t['wall_s']:.2f} s cpu {cpu:.2f} s gen_tok_s {rec['throughput']['gen_tok_s']:.0f}"
d = rec.get("distributed")
if d:
    line += f" coordinator {100 * d['coordinator_share']:.2f}% (serve {d['serve_s']:.3f} s)"
    line += " ranks " + " ".join(f"{r['rank']}:{r['requests']}req/busy{100 * r['busy_fraction']:.0f}%" for r in d["ranks"])
else:
    line += f" store+plan {100 * t['store_and_plan_fraction']:.2f}%"
print(line)
PY
}
: >"$tmp/runs"
for r in $(seq 1 "$REPS"); do
    one 1
    one 2
done
python3 - "$tmp/runs" <<'PY'
import statistics, sys
w, c = {}, {}
for l in open(sys.argv[1]):
    f = l.split()
    w.setdefault(f[1], []).append(float(f[3]))
    c.setdefault(f[1], []).append(float(f[6]))
m1, m2 = statistics.median(w["1"]), statistics.median(w["2"])
c1, c2 = statistics.median(c["1"]), statistics.median(c["2"])
print(f"median wall: np 1 {m1:.2f} s, np 2 {m2:.2f} s -> scaling {m1 / m2:.2f}x ({len(w['1'])} pairs, interleaved)")
print(f"median cpu (all processes): np 1 {c1:.2f} s, np 2 {c2:.2f} s: the work costs {c2 / c1:.2f}x the cpu time "
      f"split over 2 ranks; on 2 free cores the wall scaling would be about {2 * c1 / c2:.2f}x times the busy fraction")
PY
