#!/usr/bin/env python3
"""bench/ref_llama.py — an independent NumPy reference of the Llama forward pass (F32 GGUF only, e.g.
stories260K), used to cross-check `nightshift generate` greedy ids on prompts beyond the golden file.
Written from the math in issue 3 (not from nightshift's C code): float64 throughout, no KV cache (the
whole sequence is recomputed per token), normal (non-NeoX) RoPE pairs.

    python3 bench/ref_llama.py MODEL.gguf N ID ID ID ...    -> prints N greedy ids after the prompt ids
    python3 bench/ref_llama.py --embed MODEL.gguf POOLING ID ID ID ...
        -> prints the embedding of the ids: the final hidden states (after the output norm) pooled by POOLING
           (mean, cls: the first token's, last: the last token's), L2-normalised, one value per line

Needs numpy (pip install numpy). `make test` runs the --embed mode in tests/e2e_embeddings.sh where numpy
can be had.
"""
import struct
import sys

import numpy as np


def read_gguf(path):
    b = open(path, "rb").read()
    o = 8
    n_t, n_kv = struct.unpack_from("<QQ", b, o)
    o += 16
    scal = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}

    def val(t):
        nonlocal o
        if t == 8:
            n = struct.unpack_from("<Q", b, o)[0]
            s = b[o + 8:o + 8 + n].decode("utf-8", "replace")
            o += 8 + n
            return s
        if t == 9:
            at, n = struct.unpack_from("<IQ", b, o)
            o += 12
            return [val(at) for _ in range(n)]
        v = struct.unpack_from("<" + scal[t], b, o)[0]
        o += struct.calcsize(scal[t])
        return v

    kv = {}
    for _ in range(n_kv):
        n = struct.unpack_from("<Q", b, o)[0]
        k = b[o + 8:o + 8 + n].decode()
        o += 8 + n
        t = struct.unpack_from("<I", b, o)[0]
        o += 4
        kv[k] = val(t)
    infos = []
    for _ in range(n_t):
        n = struct.unpack_from("<Q", b, o)[0]
        name = b[o + 8:o + 8 + n].decode()
        o += 8 + n
        nd = struct.unpack_from("<I", b, o)[0]
        ne = struct.unpack_from("<%dQ" % nd, b, o + 4)
        o += 4 + 8 * nd
        t, off = struct.unpack_from("<IQ", b, o)
        o += 12
        infos.append((name, ne, t, off))
    align = kv.get("general.alignment", 32)
    base = (o + align - 1) // align * align
    tensors = {}
    for name, ne, t, off in infos:
        assert t == 0, f"{name}: only F32 is supported by this reference"
        cnt = int(np.prod(ne))
        a = np.frombuffer(b, dtype="<f4", count=cnt, offset=base + off).astype(np.float64)
        tensors[name] = a.reshape(tuple(reversed(ne)))  # (ne1, ne0): rows are output units
    return kv, tensors


def rmsnorm(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def hidden_states(kv, W, ids):
    """(T, n_embd): the residual stream after the last layer through the output norm, every position."""
    a = kv["general.architecture"]
    n_head = kv[a + ".attention.head_count"]
    n_kv = kv.get(a + ".attention.head_count_kv", n_head)
    n_embd = kv[a + ".embedding_length"]
    hd = n_embd // n_head
    n_rot = kv.get(a + ".rope.dimension_count", hd)
    base = kv.get(a + ".rope.freq_base", 10000.0)
    eps = kv.get(a + ".attention.layer_norm_rms_epsilon", 1e-5)
    T = len(ids)
    x = W["token_embd.weight"][ids]  # (T, n_embd)
    pos = np.arange(T)[:, None]
    inv = base ** (-np.arange(0, n_rot, 2) / n_rot)
    ang = pos * inv[None, :]  # (T, n_rot/2)
    cos, sin = np.cos(ang), np.sin(ang)

    def rope(v):  # (T, heads, hd), pairs (2i, 2i+1)
        v = v.copy()
        x0, x1 = v[..., 0:n_rot:2].copy(), v[..., 1:n_rot:2].copy()
        v[..., 0:n_rot:2] = x0 * cos[:, None, :] - x1 * sin[:, None, :]
        v[..., 1:n_rot:2] = x0 * sin[:, None, :] + x1 * cos[:, None, :]
        return v

    mask = np.triu(np.full((T, T), -np.inf), 1)
    for il in range(kv[a + ".block_count"]):
        p = f"blk.{il}."
        h = rmsnorm(x, W[p + "attn_norm.weight"], eps)
        q = rope((h @ W[p + "attn_q.weight"].T).reshape(T, n_head, hd))
        k = rope((h @ W[p + "attn_k.weight"].T).reshape(T, n_kv, hd))
        v = (h @ W[p + "attn_v.weight"].T).reshape(T, n_kv, hd)
        out = np.zeros((T, n_head, hd))
        g = n_head // n_kv
        for hh in range(n_head):
            s = q[:, hh, :] @ k[:, hh // g, :].T / np.sqrt(hd) + mask
            s = np.exp(s - s.max(axis=1, keepdims=True))
            s /= s.sum(axis=1, keepdims=True)
            out[:, hh, :] = s @ v[:, hh // g, :]
        x = x + out.reshape(T, -1) @ W[p + "attn_output.weight"].T
        h = rmsnorm(x, W[p + "ffn_norm.weight"], eps)
        gate = h @ W[p + "ffn_gate.weight"].T
        up = h @ W[p + "ffn_up.weight"].T
        x = x + (gate / (1 + np.exp(-gate)) * up) @ W[p + "ffn_down.weight"].T
    return rmsnorm(x, W["output_norm.weight"], eps)


def forward(kv, W, ids):
    """Logits of the last position."""
    out_w = W.get("output.weight", W["token_embd.weight"])
    return out_w @ hidden_states(kv, W, ids)[-1]


def embed(kv, W, pooling, ids):
    h = hidden_states(kv, W, ids)
    v = {"mean": lambda: h.mean(axis=0), "cls": lambda: h[0], "last": lambda: h[-1]}[pooling]()
    return v / np.linalg.norm(v)


def main():
    if sys.argv[1] == "--embed":
        kv, W = read_gguf(sys.argv[2])
        v = embed(kv, W, sys.argv[3], [int(t) for t in sys.argv[4:]])
        print("\n".join("%.17g" % x for x in v))
        return
    kv, W = read_gguf(sys.argv[1])
    n = int(sys.argv[2])
    ids = [int(t) for t in sys.argv[3:]]
    gen = []
    for _ in range(n):
        logits = forward(kv, W, ids + gen)
        gen.append(int(np.argmax(logits)))
    print(" ".join(map(str, gen)))


if __name__ == "__main__":
    main()
