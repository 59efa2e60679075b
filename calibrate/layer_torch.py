#!/usr/bin/env python3
"""Times whole transformer blocks in PyTorch on one GPU: the end-to-end check of a profile.

paceline predicts a block's time as the sum of its kernels, each priced from the kernel profile.
This script measures real blocks — eager PyTorch, bf16, SDPA attention, the layer shapes of
common models — forward, and forward plus backward, with CUDA events (median of the timed
iterations after warm-up), so the kernel-sum can be compared with what a framework achieves.

  layer_torch.py --output layers.json [--budget-s 60]

Needs only torch. Each block is a pre-norm decoder layer: norm, fused QKV projection, rotary
embedding (Llama) or none (GPT), causal SDPA, output projection, residual, norm, MLP (SwiGLU or
GeLU), residual. Weights are random, inputs random normal; clocks are left as they are.
"""
import argparse
import json
import math
import statistics
import sys
import time

import torch
import torch.nn.functional as F

# (name, hidden, heads, kv_heads, ffn_hidden, gated, norm, rotary, micro_batch, seq)
BLOCKS = [
    ("llama3-8b", 4096, 32, 8, 14336, True, "rmsnorm", True, 1, 8192),
    ("llama3-8b", 4096, 32, 8, 14336, True, "rmsnorm", True, 2, 4096),
    ("llama3-70b-tp8", 1024, 8, 1, 3584, True, "rmsnorm", True, 1, 8192),
    ("gpt-1.7b", 2048, 16, 16, 8192, False, "layernorm", False, 1, 4096),
    ("gpt-1.7b", 2048, 16, 16, 8192, False, "layernorm", False, 4, 2048),
    ("gpt3-175b-tp8", 1536, 12, 12, 6144, False, "layernorm", False, 1, 2048),
    ("gpt-7b", 4096, 32, 32, 16384, False, "layernorm", False, 1, 4096),
]


def rotary(x, cos, sin):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2 :]
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin


class Block(torch.nn.Module):
    def __init__(self, hidden, heads, kv_heads, ffn, gated, norm, use_rotary, seq):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, hidden // heads
        self.gated, self.use_rotary = gated, use_rotary
        make_norm = (lambda: torch.nn.RMSNorm(hidden)) if norm == "rmsnorm" else (lambda: torch.nn.LayerNorm(hidden))
        self.norm1, self.norm2 = make_norm(), make_norm()
        self.qkv = torch.nn.Linear(hidden, (heads + 2 * kv_heads) * self.head_dim, bias=not use_rotary)
        self.proj = torch.nn.Linear(heads * self.head_dim, hidden, bias=not use_rotary)
        self.fc1 = torch.nn.Linear(hidden, (2 if gated else 1) * ffn, bias=not gated)
        self.fc2 = torch.nn.Linear(ffn, hidden, bias=not gated)
        inv = 1.0 / (10000 ** (torch.arange(0, self.head_dim, 2).float() / self.head_dim))
        angles = torch.outer(torch.arange(seq).float(), inv)
        emb = torch.cat((angles, angles), dim=-1)
        self.register_buffer("cos", emb.cos()[None, None], persistent=False)
        self.register_buffer("sin", emb.sin()[None, None], persistent=False)

    def forward(self, x):
        b, s, _ = x.shape
        q, k, v = self.qkv(self.norm1(x)).split(
            [self.heads * self.head_dim, self.kv_heads * self.head_dim, self.kv_heads * self.head_dim], dim=-1)
        q = q.view(b, s, self.heads, self.head_dim).transpose(1, 2)
        k = k.view(b, s, self.kv_heads, self.head_dim).transpose(1, 2)
        v = v.view(b, s, self.kv_heads, self.head_dim).transpose(1, 2)
        if self.use_rotary:
            q, k = rotary(q, self.cos, self.sin), rotary(k, self.cos, self.sin)
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=self.kv_heads != self.heads)
        x = x + self.proj(o.transpose(1, 2).reshape(b, s, -1))
        h = self.fc1(self.norm2(x))
        if self.gated:
            gate, up = h.chunk(2, dim=-1)
            h = F.silu(gate) * up
        else:
            h = F.gelu(h, approximate="tanh")
        return x + self.fc2(h)


def median_ms(step, warmup, iterations):
    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    times = []
    for _ in range(iterations):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        step()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times), (max(times) - min(times)) / statistics.median(times)


def run_meta(doc, **extra):
    """What ran the measurement, and how (the second paragraph of the script's docstring)."""
    return {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "cuda": torch.version.cuda,
            **extra, "method": doc.strip().split("\n\n")[1].replace("\n", " ")}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--output", required=True)
    parser.add_argument("--budget-s", type=float, default=60.0)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("layer_torch.py: no CUDA GPU", file=sys.stderr)
        return 2
    started = time.monotonic()
    rows = []
    for name, hidden, heads, kv_heads, ffn, gated, norm, use_rotary, batch, seq in BLOCKS:
        if time.monotonic() - started > args.budget_s:
            rows.append({"name": name, "error": "budget exhausted"})
            continue
        try:
            torch.manual_seed(0)
            block = Block(hidden, heads, kv_heads, ffn, gated, norm, use_rotary, seq).cuda().to(torch.bfloat16)
            x = torch.randn(batch, seq, hidden, device="cuda", dtype=torch.bfloat16, requires_grad=True)
            grad = torch.randn_like(x)

            def forward():
                with torch.no_grad():
                    block(x)

            def training_step():
                block(x).backward(grad)

            forward_ms, forward_spread = median_ms(forward, 3, 10)
            step_ms, step_spread = median_ms(training_step, 3, 10)
            rows.append({
                "name": name, "hidden": hidden, "heads": heads, "kv_heads": kv_heads, "ffn_hidden": ffn,
                "activation": "swiglu" if gated else "gelu", "norm": norm, "rotary": use_rotary,
                "micro_batch": batch, "seq": seq, "forward_s": forward_ms / 1e3, "forward_spread": forward_spread,
                "forward_backward_s": step_ms / 1e3, "forward_backward_spread": step_spread,
            })
            print(f"{name} b{batch} s{seq}: forward {forward_ms:.3f} ms, forward+backward {step_ms:.3f} ms")
            del block, x, grad
            torch.cuda.empty_cache()
        except Exception as e:  # one failing block must not lose the others
            rows.append({"name": name, "micro_batch": batch, "seq": seq, "error": f"{type(e).__name__}: {e}"})
            print(f"{name}: {type(e).__name__}: {e}", file=sys.stderr)
    meta = run_meta(__doc__, cudnn=torch.backends.cudnn.version(), timer="CUDA events, median of 10 after 3 warm-up")
    with open(args.output, "w") as out:
        json.dump({"meta": meta, "blocks": rows}, out, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
