#!/usr/bin/env python3
"""bench/gpu_peaks.py — the two ceilings bench/gpu.sh divides by, measured on this GPU in the same call:

  gemm_tflops  BF16 matrix product rate: C = A @ B with A, B of N x N (default 8192) random normal values,
               2 N^3 FLOP per product; the median of REPS (20) products timed one by one with CUDA events,
               after WARM (5) untimed ones.
  copy_gbs     device memory bandwidth: a device-to-device copy of SIZE bytes (default 4 GiB) into a second
               buffer, counting the bytes read AND the bytes written (2 x SIZE per copy), as KINDS.md's
               "about 4.3 TB/s" does; the median of REPS copies after WARM. A decode step reads its weights
               at about this total rate (HBM serves reads and writes from one budget), so the batch-1
               limit is copy_gbs / weight bytes, not half of it.

    python3 bench/gpu_peaks.py [--json OUT.json] [--n 8192] [--copy-gib 4] [--reps 20] [--warm 5]

Needs torch with CUDA (the device machine's python3). Prints one line per ceiling and, with --json, writes
{"gpu", "gemm_tflops", "gemm_tflops_all", "copy_gbs", "copy_gbs_all", ...}.
"""
import argparse
import json
import statistics

import torch


def time_ms(fn, reps, warm):
    """Each of reps calls of fn timed alone with CUDA events (ms), after warm untimed calls."""
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    out = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        out.append(a.elapsed_time(b))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json")
    ap.add_argument("--n", type=int, default=8192)
    ap.add_argument("--copy-gib", type=float, default=4.0)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--warm", type=int, default=5)
    o = ap.parse_args()
    dev = torch.device("cuda")
    name = torch.cuda.get_device_name(dev)

    g = torch.Generator(device=dev).manual_seed(10)
    a = torch.randn(o.n, o.n, device=dev, dtype=torch.bfloat16, generator=g)
    b = torch.randn(o.n, o.n, device=dev, dtype=torch.bfloat16, generator=g)
    c = torch.empty(o.n, o.n, device=dev, dtype=torch.bfloat16)
    ms = time_ms(lambda: torch.matmul(a, b, out=c), o.reps, o.warm)
    flop = 2.0 * o.n ** 3
    gemm = [flop / (t * 1e-3) / 1e12 for t in ms]
    del a, b, c

    n_bytes = int(o.copy_gib * (1 << 30))
    src = torch.empty(n_bytes, device=dev, dtype=torch.uint8).fill_(1)
    dst = torch.empty_like(src)
    ms = time_ms(lambda: dst.copy_(src), o.reps, o.warm)
    copy = [2.0 * n_bytes / (t * 1e-3) / 1e9 for t in ms]
    del src, dst
    torch.cuda.empty_cache()

    res = {
        "gpu": name,
        "torch": torch.__version__,
        "gemm_n": o.n,
        "gemm_tflops": statistics.median(gemm),
        "gemm_tflops_all": [round(x, 1) for x in gemm],
        "copy_bytes": n_bytes,
        "copy_gbs": statistics.median(copy),
        "copy_gbs_all": [round(x, 1) for x in copy],
    }
    print(f"{name}, torch {torch.__version__}")
    print(f"BF16 GEMM {o.n}^3: median {res['gemm_tflops']:.1f} TFLOP/s of {o.reps} "
          f"(range {min(gemm):.1f}-{max(gemm):.1f})")
    print(f"device copy of {n_bytes / (1 << 30):.1f} GiB: median {res['copy_gbs']:.0f} GB/s read+written of "
          f"{o.reps} (range {min(copy):.0f}-{max(copy):.0f})")
    if o.json:
        with open(o.json, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
