#!/usr/bin/env python3
"""bench/ref_gemma.py — an independent NumPy reference of the gemma3, gemma2 and phi3 forward passes (F32
GGUF only, e.g. `nightshift synth --shape gemma3-tiny --type f32`), to cross-check nightshift's greedy ids.
Written from the architectures' math as issue 11 states it (not from nightshift's C code): float64
throughout, no KV cache (the whole sequence is recomputed per token), NeoX RoPE pairs (i, i + n_rot/2).

  gemma3  x = embedding * sqrt(n_embd); per layer: x += post_attention_norm(attn(attn_norm(x))),
          x += post_ffw_norm(ffn(ffn_norm(x))) with ffn = down(gelu_tanh(gate(h)) * up(h)); per-head
          RMSNorm of q and k (attn_q_norm, attn_k_norm) before RoPE; every layer but every 6th is local:
          it sees only the last `sliding_window` positions and uses RoPE base 10,000 (global layers:
          rope.freq_base, angles divided by rope.scaling.factor when rope.scaling.type is "linear"); scores scaled by query_pre_attn_scalar^-1/2 (1/sqrt(head_dim) without the key);
          output head = token_embd (tied) unless output.weight exists. RMSNorm weights are used as stored.
  gemma2  as gemma3 without the q/k norms, one RoPE base, the even layers local; scores soft-capped
          c * tanh(s / c) (attn_logit_softcapping) before the mask, logits soft-capped likewise
          (final_logit_softcapping).
  phi3    Llama (SwiGLU, no post-norms, no embedding scale) with NeoX RoPE, q/k/v the row blocks of
          attn_qkv, gate/up the two row halves of ffn_up; every layer local when sliding_window is set.

    python3 bench/ref_gemma.py MODEL.gguf N ID ID ID ...   -> prints N greedy ids after the prompt ids
    python3 bench/ref_gemma.py --margins MODEL.gguf N ID ...  -> the same, each id with the gap between the
                                                              best and second-best logit (ties are fragile)
    python3 bench/ref_gemma.py --embed MODEL.gguf ID ID ...   -> the last position's final hidden state
                                                              (after the output norm), L2-normalised

Needs numpy; reads the file with bench/ref_llama.py's reader.
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ref_llama import read_gguf, rmsnorm  # noqa: E402


def gelu_tanh(x):
    return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x ** 3)))


def rope_neox(v, pos, base, n_rot, scale=1.0):
    """v: (T, heads, hd); rotates pairs (i, i + n_rot/2) of the first n_rot dims by scale * pos * base^(-2i/n_rot)."""
    half = n_rot // 2
    ang = pos[:, None] * scale * base ** (-np.arange(half) * 2.0 / n_rot)[None, :]  # (T, half)
    cos, sin = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
    v = v.copy()
    x0, x1 = v[..., :half].copy(), v[..., half:n_rot].copy()
    v[..., :half] = x0 * cos - x1 * sin
    v[..., half:n_rot] = x0 * sin + x1 * cos
    return v


def hidden_states(kv, W, ids):
    """(T, n_embd): the residual stream after the last layer through the output norm, every position."""
    a = kv["general.architecture"]
    assert a in ("gemma3", "gemma2", "phi3"), a
    g = lambda k, d=None: kv.get(a + "." + k, d)  # noqa: E731
    n_embd, n_head = g("embedding_length"), g("attention.head_count")
    n_kv = g("attention.head_count_kv", n_head)
    hd = g("attention.key_length", n_embd // n_head)
    n_rot = g("rope.dimension_count", hd)
    base = g("rope.freq_base", 10000.0)
    eps = g("attention.layer_norm_rms_epsilon", 1e-6)
    window = g("attention.sliding_window", 0)
    # gemma3 "linear" RoPE scaling (4B and up): the global layers' positions divided by the factor
    lin = 1.0 / g("rope.scaling.factor", 1.0) if a == "gemma3" and g("rope.scaling.type") == "linear" else 1.0
    n_ff = g("feed_forward_length")
    gemma = a.startswith("gemma")
    scale = g("attention.query_pre_attn_scalar", hd) ** -0.5
    att_cap = g("attn_logit_softcapping", 0.0) if a == "gemma2" else 0.0

    T = len(ids)
    pos = np.arange(T, dtype=np.float64)
    x = W["token_embd.weight"][ids]  # (T, n_embd)
    if gemma:
        x = x * np.sqrt(n_embd)
    causal = np.triu(np.full((T, T), -np.inf), 1)
    tt = np.arange(T)
    slide = np.where(tt[None, :] <= tt[:, None] - window, -np.inf, 0.0) if window else np.zeros((T, T))
    for il in range(g("block_count")):
        p = f"blk.{il}."
        if a == "gemma3":
            local = window > 0 and il % 6 != 5
        elif a == "gemma2":
            local = window > 0 and il % 2 == 0
        else:
            local = window > 0
        h = rmsnorm(x, W[p + "attn_norm.weight"], eps)
        if a == "phi3":
            qkv = h @ W[p + "attn_qkv.weight"].T
            q, k, v = qkv[:, :n_head * hd], qkv[:, n_head * hd:(n_head + n_kv) * hd], qkv[:, (n_head + n_kv) * hd:]
        else:
            q, k, v = (h @ W[p + "attn_q.weight"].T, h @ W[p + "attn_k.weight"].T, h @ W[p + "attn_v.weight"].T)
        q, k, v = q.reshape(T, n_head, hd), k.reshape(T, n_kv, hd), v.reshape(T, n_kv, hd)
        if a == "gemma3":
            q = rmsnorm(q, W[p + "attn_q_norm.weight"], eps)
            k = rmsnorm(k, W[p + "attn_k_norm.weight"], eps)
        b, sc = (10000.0, 1.0) if (a == "gemma3" and local) else (base, lin)
        q, k = rope_neox(q, pos, b, n_rot, sc), rope_neox(k, pos, b, n_rot, sc)
        mask = causal + (slide if local else 0.0)
        out = np.zeros((T, n_head, hd))
        grp = n_head // n_kv
        for hh in range(n_head):
            s = q[:, hh, :] @ k[:, hh // grp, :].T * scale
            if att_cap:
                s = att_cap * np.tanh(s / att_cap)
            s = s + mask
            s = np.exp(s - s.max(axis=1, keepdims=True))
            s /= s.sum(axis=1, keepdims=True)
            out[:, hh, :] = s @ v[:, hh // grp, :]
        o = out.reshape(T, -1) @ W[p + "attn_output.weight"].T
        if gemma:
            o = rmsnorm(o, W[p + "post_attention_norm.weight"], eps)
        x = x + o
        h = rmsnorm(x, W[p + "ffn_norm.weight"], eps)
        if a == "phi3":
            gu = h @ W[p + "ffn_up.weight"].T
            gate, up = gu[:, :n_ff], gu[:, n_ff:]
        else:
            gate, up = h @ W[p + "ffn_gate.weight"].T, h @ W[p + "ffn_up.weight"].T
        act = gelu_tanh(gate) if gemma else gate / (1 + np.exp(-gate))
        f = (act * up) @ W[p + "ffn_down.weight"].T
        if gemma:
            f = rmsnorm(f, W[p + "post_ffw_norm.weight"], eps)
        x = x + f
    return rmsnorm(x, W["output_norm.weight"], eps)


def logits_last(kv, W, ids):
    a = kv["general.architecture"]
    logits = W.get("output.weight", W["token_embd.weight"]) @ hidden_states(kv, W, ids)[-1]
    cap = kv.get(a + ".final_logit_softcapping", 0.0) if a == "gemma2" else 0.0
    if cap:
        logits = cap * np.tanh(logits / cap)
    return logits


def main():
    args = sys.argv[1:]
    if args[0] == "--embed":
        kv, W = read_gguf(args[1])
        v = hidden_states(kv, W, [int(t) for t in args[2:]])[-1]
        print("\n".join("%.17g" % x for x in v / np.linalg.norm(v)))
        return
    margins = args and args[0] == "--margins"
    if margins:
        args = args[1:]
    kv, W = read_gguf(args[0])
    n = int(args[1])
    ids = [int(t) for t in args[2:]]
    gen, out = [], []
    for _ in range(n):
        lg = logits_last(kv, W, ids + gen)
        best = int(np.argmax(lg))
        gen.append(best)
        top2 = np.sort(lg)[-2:]
        out.append("%d:%.3g" % (best, top2[1] - top2[0]) if margins else str(best))
    print(" ".join(out))


if __name__ == "__main__":
    main()
