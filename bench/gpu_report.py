#!/usr/bin/env python3
"""bench/gpu_report.py — the arithmetic and the summary of bench/gpu.sh (plain Python, no torch).

    python3 bench/gpu_report.py --info INFO.json [--peaks PEAKS.json] [--bench BENCH.json ...]
                                [--hf HF.json] [--mem LABEL=MiB ...] [--prompt-len P --gen-len G]

INFO.json is `nightshift info --json MODEL` (the shape and the weight bytes), PEAKS.json bench/gpu_peaks.py's
ceilings, BENCH.json `nightshift bench --json` output (any number; every level is a row), HF.json
bench/hf_generate.py's. --mem gives the peak device memory seen during a bench file (LABEL = its
concurrency levels joined by ',', e.g. 1,64). Without --bench, P and G come from --prompt-len/--gen-len.

Workload FLOPs per request, P prompt tokens and G generated ones (EOS ignored), from the model's shape
(hd = head dim, n_kv = KV heads):
  rows through the layers R = P + G - 1 (the G-th token is sampled and never fed back)
  linear  = 2 * N_body * R,  N_body = n_layer * (n_embd*n_head*hd [q] + 2*n_embd*n_kv*hd [k, v]
                                               + n_head*hd*n_embd [o] + 3*n_embd*n_ff [gate, up, down])
  head    = 2 * n_vocab * n_embd * G  (logits for the last prompt row and the G - 1 decode rows only)
  attn    = 4 * n_layer * n_head * hd * sum_{p=0}^{R-1} (p + 1)  (row p attends to p + 1 positions;
            QK^T and PV each 2 * hd FLOP per head and position)
Norms, RoPE, SwiGLU and softmax are O(n_embd) per row (< 0.1%) and left out. Llama-3.1-8B at 1,024 / 300:
18.467 + 0.315 + 0.459 = 19.242 TFLOP; the issue's "~19.25" counts R = P + G = 1,324 rows (19.256: +0.07%).

Fraction of the roofline = requests * FLOPs per request / GEMM rate / wall time. Batch-1 decode limit =
copy bandwidth (bytes read + written per second, as measured) / weight bytes of the GGUF (every tensor,
token_embd included, as the issue's "~264 tok/s at 4.24 TB/s" for 16.06 GB; a decode step gathers one
embedding row, so the true limit is ~7% higher).
"""
import argparse
import json
import sys


def shape_of(info):
    """The Llama-family shape from `nightshift info --json` (hparams keys without the arch prefix)."""
    h = info["hparams"]
    n_embd, n_head = h["embedding_length"], h["attention.head_count"]
    hd = h.get("attention.key_length") or n_embd // n_head
    return {
        "n_embd": n_embd, "n_layer": h["block_count"], "n_head": n_head,
        "n_kv": h.get("attention.head_count_kv", n_head), "hd": hd, "n_ff": h["feed_forward_length"],
        "n_vocab": h.get("vocab_size") or info["vocab"]["size"],
    }


def request_flops(s, P, G):
    """(linear, head, attention) FLOPs of one request: the formula at the top of this file."""
    R = P + G - 1
    q, kv = s["n_head"] * s["hd"], s["n_kv"] * s["hd"]
    n_body = s["n_layer"] * (s["n_embd"] * q + 2 * s["n_embd"] * kv + q * s["n_embd"] + 3 * s["n_embd"] * s["n_ff"])
    linear = 2 * n_body * R
    head = 2 * s["n_vocab"] * s["n_embd"] * G
    attn = 4 * s["n_layer"] * s["n_head"] * s["hd"] * R * (R + 1) // 2
    return linear, head, attn, n_body


def load(path):
    with open(path) as f:
        return json.load(f)


def fmt(x, nd=1):
    return "-" if x is None else f"{x:,.{nd}f}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--info", required=True)
    ap.add_argument("--peaks")
    ap.add_argument("--bench", nargs="*", default=[])
    ap.add_argument("--hf")
    ap.add_argument("--mem", nargs="*", default=[])
    ap.add_argument("--prompt-len", type=int, default=1024)
    ap.add_argument("--gen-len", type=int, default=300)
    o = ap.parse_args()
    info = load(o.info)
    s = shape_of(info)
    benches = [load(p) for p in o.bench]
    P = benches[0]["prompt_len"] if benches else o.prompt_len
    G = benches[0]["gen_len"] if benches else o.gen_len
    for b in benches:
        if (b["prompt_len"], b["gen_len"]) != (P, G):
            sys.exit(f"gpu_report: bench files of different workloads ({P}/{G} and {b['prompt_len']}/{b['gen_len']})")
    linear, head, attn, n_body = request_flops(s, P, G)
    F = linear + head + attn
    print(f"== workload: {P} prompt + {G} generated tokens per request; shape n_embd {s['n_embd']}, "
          f"{s['n_layer']} layers, {s['n_head']}/{s['n_kv']} heads x {s['hd']}, n_ff {s['n_ff']}, "
          f"n_vocab {s['n_vocab']}")
    print(f"   body {n_body / 1e9:.3f} B params, head {s['n_vocab'] * s['n_embd'] / 1e9:.3f} B; per request: linear "
          f"{linear / 1e12:.3f} + head {head / 1e12:.3f} + attention {attn / 1e12:.3f} = {F / 1e12:.3f} TFLOP")

    peaks = load(o.peaks) if o.peaks else {}
    gemm, copy = peaks.get("gemm_tflops"), peaks.get("copy_gbs")
    wbytes = info["tensors"]["bytes"]
    limit = copy * 1e9 / wbytes if copy else None
    print(f"== ceilings: BF16 GEMM {fmt(gemm)} TFLOP/s, copy {fmt(copy, 0)} GB/s (read + written); weights "
          f"{wbytes / 1e9:.2f} GB -> batch-1 decode limit {fmt(limit)} tok/s")

    mem = dict(m.split("=", 1) for m in o.mem)
    rows = []
    for path, b in zip(o.bench, benches):
        label = ",".join(str(lv["concurrency"]) for lv in b["levels"])
        for lv in b["levels"]:
            rows.append(("nightshift", lv["concurrency"], lv["requests"], lv["wall_s"], lv["gen_tok_s"],
                         lv["total_tok_s"], lv["requests"] * F / lv["wall_s"] / 1e12, mem.get(label), lv))
    hf = load(o.hf) if o.hf else None
    if hf:
        hf_f = hf["batch"] * sum(request_flops(s, hf["prompt_len"], hf["gen_len"])[:3])
        rows.append(("HF static generate", hf["batch"], hf["batch"], hf["wall_s"], hf["gen_tok_s"], hf["total_tok_s"],
                     hf_f / hf["wall_s"] / 1e12, f"{hf['peak_mem_gib'] * 1024:.0f}", None))

    print("== results")
    print("| engine | conc | reqs | wall s | output tok/s | total tok/s | TFLOP/s | % of roofline | peak MiB |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for name, c, n, wall, gen, tot, tf, m, _ in rows:
        roof = f"{100 * tf / gemm:.1f}%" if gemm else "-"
        print(f"| {name} | {c} | {n} | {wall:.2f} | {gen:,.1f} | {tot:,.1f} | {tf:.1f} | {roof} | {m or '-'} |")

    ours = [r for r in rows if r[0] == "nightshift"]
    if hf and ours:
        print("== nightshift / HF static generate (batch %d): %s" % (hf["batch"], ", ".join(
            f"c{c}: output {gen / hf['gen_tok_s']:.2f}x, total {tot / hf['total_tok_s']:.2f}x"
            for _, c, _, _, gen, tot, _, _, _ in ours)))
    one = [r for r in ours if r[1] == 1]
    if one:
        d = one[0][8]["decode_tok_s"]
        print(f"== batch-1 decode: {d:.1f} tok/s" + (f" = {100 * d / limit:.1f}% of the {limit:.1f} tok/s limit "
                                                   f"(target 80%: {0.8 * limit:.1f})" if limit else ""))
    if ours and gemm:
        best = max(ours, key=lambda r: r[6])
        print(f"== best: c{best[1]} ({best[2]} requests) {100 * best[6] / gemm:.1f}% of the roofline "
              f"(target 50% = {0.5 * gemm * 1e12 / F * G:,.0f} output tok/s; goal 75% = "
              f"{0.75 * gemm * 1e12 / F * G:,.0f})")


if __name__ == "__main__":
    main()
