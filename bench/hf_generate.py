#!/usr/bin/env python3
"""bench/hf_generate.py — the Hugging Face baseline of issue 10: transformers' LlamaForCausalLM in
Llama-3.1-8B's shape (hidden 4096, 32 layers, 32 heads, 8 KV heads, intermediate 14336, vocabulary 128,256,
RoPE theta 500,000, untied head) with random BF16 weights made on the GPU, static-cache `generate` of
BATCH (256) random prompts of PROMPT (1,024) tokens, exactly GEN (300) new tokens each (greedy; no EOS in
the config, min_new_tokens = max_new_tokens), timed after a warm-up.

    python3 bench/hf_generate.py [--batch 256] [--prompt-len 1024] [--gen-len 300] [--compile 0|1]
                                 [--attn sdpa] [--json OUT.json]

--compile 0 (default) passes disable_compile=True: transformers would otherwise compile the decode step
for a static cache on its own, which takes minutes of a 600 s device call; --compile 1 leaves that on
and then warms up with the timed run's own shapes (batch, prompt, cache length), stopped after 2 tokens,
so the compile happens outside the timing. With --compile 0 the warm-up is small (2 x 32 tokens, 4 new).

Prints the wall time, output tok/s (BATCH x GEN / wall), total tok/s (BATCH x (PROMPT + GEN) / wall), the
prefill (time to the first token) and the decode rate after it, peak allocated GPU memory; --json writes
the same as one object. Needs torch with CUDA and transformers (4.5x or 5.x); the weights never touch
the host: nothing is downloaded.
"""
import argparse
import json
import sys
import time

import torch
import transformers
from transformers import LlamaConfig, LlamaForCausalLM, LogitsProcessor, LogitsProcessorList
from transformers import StoppingCriteria, StoppingCriteriaList


def make_config(vocab, attn):
    """Llama-3.1-8B's shape; transformers 5.x takes RoPE as rope_parameters, 4.x as rope_theta."""
    shape = dict(vocab_size=vocab, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                 num_attention_heads=32, num_key_value_heads=8, head_dim=128, max_position_embeddings=131072,
                 rms_norm_eps=1e-5, tie_word_embeddings=False, bos_token_id=1, eos_token_id=None, pad_token_id=0)
    if int(transformers.__version__.split(".")[0]) >= 5:
        cfg = LlamaConfig(rope_parameters={"rope_type": "default", "rope_theta": 500000.0}, **shape)
    else:
        cfg = LlamaConfig(rope_theta=500000.0, **shape)
    try:
        cfg._attn_implementation = attn
    except Exception as ex:  # the attention kernel changes the timing, never the result: go on and say so
        print(f"hf: cannot set attention implementation {attn}: {ex}", file=sys.stderr)
    return cfg


def make_model(cfg):
    """Random BF16 weights created on the GPU (transformers' own init, normal std 0.02, runs there)."""
    torch.set_default_dtype(torch.bfloat16)
    with torch.device("cuda"):
        model = LlamaForCausalLM(cfg)
    torch.set_default_dtype(torch.float32)
    return model.eval()


class FirstTokenTime(LogitsProcessor):
    """Records when the first new token's scores exist (the prefill's end): one synchronize, once."""

    def __init__(self):
        self.t = None

    def __call__(self, input_ids, scores):
        if self.t is None:
            torch.cuda.synchronize()
            self.t = time.perf_counter()
        return scores


class StopAfter(StoppingCriteria):
    """Stops every row once the sequences are n tokens long (the warm-up of the compiled shapes)."""

    def __init__(self, n):
        self.n = n

    def __call__(self, input_ids, scores, **kwargs):
        return torch.full((input_ids.shape[0],), input_ids.shape[1] >= self.n, dtype=torch.bool,
                          device=input_ids.device)


def generate(model, ids, gen, compile_on, **extra):
    kw = dict(attention_mask=torch.ones_like(ids), max_new_tokens=gen, min_new_tokens=gen, do_sample=False,
              cache_implementation="static", pad_token_id=0, **extra)
    if not compile_on:
        kw["disable_compile"] = True
    with torch.inference_mode():
        return model.generate(ids, **kw)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--prompt-len", type=int, default=1024)
    ap.add_argument("--gen-len", type=int, default=300)
    ap.add_argument("--vocab", type=int, default=128256)
    ap.add_argument("--compile", type=int, default=0)
    ap.add_argument("--attn", default="sdpa")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json")
    o = ap.parse_args()
    B, P, G = o.batch, o.prompt_len, o.gen_len
    print(f"hf: transformers {transformers.__version__}, torch {torch.__version__}, "
          f"{torch.cuda.get_device_name()}; batch {B}, {P} prompt + {G} new tokens, compile {o.compile}, "
          f"attention {o.attn}", flush=True)
    t0 = time.perf_counter()
    cfg = make_config(o.vocab, o.attn)
    model = make_model(cfg)
    torch.cuda.synchronize()
    n_params = sum(p.numel() for p in model.parameters())
    rope = getattr(model.config, "rope_parameters", None) or {"rope_theta": getattr(model.config, "rope_theta", "?")}
    print(f"hf: model {n_params / 1e9:.3f} B params ({next(model.parameters()).dtype}, rope {rope}, "
          f"attention {getattr(model.config, '_attn_implementation', '?')}) built in "
          f"{time.perf_counter() - t0:.1f} s", flush=True)

    g = torch.Generator(device="cuda").manual_seed(o.seed)
    ids = torch.randint(2, o.vocab, (B, P), device="cuda", generator=g)
    t0 = time.perf_counter()
    if o.compile:
        generate(model, ids, G, True, stopping_criteria=StoppingCriteriaList([StopAfter(P + 2)]))
    else:
        generate(model, ids[:2, :32], 4, False)
    torch.cuda.synchronize()
    print(f"hf: warm-up {time.perf_counter() - t0:.1f} s", flush=True)

    torch.cuda.reset_peak_memory_stats()
    first = FirstTokenTime()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    out = generate(model, ids, G, bool(o.compile), logits_processor=LogitsProcessorList([first]))
    torch.cuda.synchronize()
    t1 = time.perf_counter()
    new = out.shape[1] - P
    wall = t1 - t0
    prefill = (first.t or t1) - t0
    res = {
        "batch": B, "prompt_len": P, "gen_len": G, "generated_per_row": int(new), "compile": o.compile,
        "attn": getattr(model.config, "_attn_implementation", o.attn), "wall_s": wall, "prefill_s": prefill,
        "gen_tok_s": B * new / wall, "total_tok_s": B * (P + new) / wall,
        "decode_tok_s": B * (new - 1) / (wall - prefill) if wall > prefill and new > 1 else 0.0,
        "peak_mem_gib": torch.cuda.max_memory_allocated() / (1 << 30), "params": n_params,
        "transformers": transformers.__version__, "torch": torch.__version__,
    }
    print(f"hf: {B} x ({P} + {new}) tokens in {wall:.2f} s: {res['gen_tok_s']:.1f} output tok/s, "
          f"{res['total_tok_s']:.1f} total tok/s; prefill {prefill:.2f} s ({B * P / prefill:.0f} tok/s), "
          f"decode {res['decode_tok_s']:.1f} tok/s; peak {res['peak_mem_gib']:.1f} GiB", flush=True)
    if new != G:
        print(f"hf: WARNING: {new} new tokens per row, not {G}", flush=True)
    if o.json:
        with open(o.json, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
