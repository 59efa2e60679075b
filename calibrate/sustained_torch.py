#!/usr/bin/env python3
"""Measures how a GPU's throughput settles under minutes of load: the sustained-power factor.

Short microbenchmarks (paceline-calibrate) time kernels at the clock a cool GPU boosts to; a
training run holds the board at its power limit for hours, where the clock is lower. This script
runs, one after the other: a training loop of a Llama-shaped model (embedding, decoder blocks of
layer_torch.py, head, cross-entropy, fused AdamW), an idle pause, back-to-back bf16 GEMMs,
back-to-back fp8 GEMMs and back-to-back causal attention (forward and backward) through PyTorch's
FlashAttention-2 and cuDNN backends, timing every iteration or one-second window while
nvidia-smi samples the SM clock, power and temperature twice a second. It also records the
caching allocator's peak allocated and reserved bytes of the training loop. A kernel that keeps
the tensor cores less busy than a GEMM may draw less power and hold a higher clock at the limit:
the attention phases measure how much of its short-burst speed each backend keeps.

  sustained_torch.py --output sustained.json [--train-s 120] [--idle-s 20] [--gemm-s 90] [--fp8-s 45]
                     [--attention-s 40]

Needs only torch and nvidia-smi. Clocks are left as they are.
"""
import argparse
import json
import statistics
import subprocess
import sys
import threading
import time

import torch
import torch.nn.functional as F

from layer_torch import Block, run_meta

SMI_FIELDS = "clocks.sm,power.draw,temperature.gpu"


class Sampler:
    """nvidia-smi's clock, power and temperature, stamped with the script's clock."""

    def __init__(self, origin):
        self.origin, self.samples = origin, []
        self.process = subprocess.Popen(
            ["nvidia-smi", f"--query-gpu={SMI_FIELDS}", "--format=csv,noheader,nounits", "-lms", "500"],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self):
        for line in self.process.stdout:
            try:
                clock_mhz, power_w, temperature_c = (float(x) for x in line.split(","))
            except ValueError:
                continue
            self.samples.append({"t_s": time.monotonic() - self.origin, "sm_clock_mhz": clock_mhz,
                                 "power_w": power_w, "temperature_c": temperature_c})

    def stop(self):
        self.process.terminate()
        self.process.wait(timeout=10)
        self.thread.join(timeout=10)


class Model(torch.nn.Module):
    def __init__(self, layers, hidden, heads, kv_heads, ffn, vocab, seq):
        super().__init__()
        self.embedding = torch.nn.Embedding(vocab, hidden)
        self.blocks = torch.nn.ModuleList(
            Block(hidden, heads, kv_heads, ffn, True, "rmsnorm", True, seq) for _ in range(layers))
        self.norm = torch.nn.RMSNorm(hidden)
        self.head = torch.nn.Linear(hidden, vocab, bias=False)

    def forward(self, tokens, labels):
        x = self.embedding(tokens)
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.norm(x))
        return F.cross_entropy(logits.float().flatten(0, 1), labels.flatten())


def run_training(args, origin, seconds, capacity_margin=None):
    """The training loop for `seconds`; with capacity_margin, the allocator is capped at that
    multiple of the uncapped loop's peak allocated bytes (torch.cuda.set_per_process_memory_fraction)."""
    torch.manual_seed(0)
    model = Model(args.layers, 4096, 32, 8, 14336, 128256, args.seq).cuda().to(torch.bfloat16)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5, fused=True)
    tokens = torch.randint(0, 128256, (1, args.seq), device="cuda")
    labels = torch.randint(0, 128256, (1, args.seq), device="cuda")
    parameters = sum(p.numel() for p in model.parameters())
    capacity = torch.cuda.get_device_properties(0).total_memory
    if capacity_margin is not None:
        torch.cuda.set_per_process_memory_fraction(min(1.0, capacity_margin * args.peak_allocated / capacity))
    iterations, memory = [], {}
    torch.cuda.reset_peak_memory_stats()
    try:
        started = time.monotonic()
        while time.monotonic() - started < seconds:
            begin = time.monotonic()
            marks = [torch.cuda.Event(enable_timing=True) for _ in range(3)]
            marks[0].record()
            model(tokens, labels).backward()
            marks[1].record()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            marks[2].record()
            torch.cuda.synchronize()
            iterations.append({"t_s": begin - origin, "seconds": time.monotonic() - begin,
                               "forward_backward_s": marks[0].elapsed_time(marks[1]) / 1e3,
                               "optimizer_s": marks[1].elapsed_time(marks[2]) / 1e3})
            if len(iterations) == 3:
                memory["after_3_iterations"] = allocator_state()
        memory["end"] = allocator_state()
    finally:
        # An out-of-memory error under a cap must not leave the cap, the model or its cache behind.
        del model, optimizer
        torch.cuda.empty_cache()
        torch.cuda.set_per_process_memory_fraction(1.0)
    if capacity_margin is None:
        args.peak_allocated = memory["end"]["max_allocated_bytes"]
    return {"layers": args.layers, "hidden": 4096, "heads": 32, "kv_heads": 8, "ffn_hidden": 14336,
            "vocab": 128256, "seq": args.seq, "micro_batch": 1, "parameters": parameters,
            "dtype": "bf16 parameters, fused AdamW", "capacity_margin": capacity_margin,
            "iterations": iterations, "memory": memory}


def allocator_state():
    stats = torch.cuda.memory_stats()
    return {"max_allocated_bytes": torch.cuda.max_memory_allocated(),
            "max_reserved_bytes": torch.cuda.max_memory_reserved(),
            "alloc_retries": stats.get("num_alloc_retries", 0)}


def run_windows(kernel, flop_per_call, seconds, origin):
    """Calls kernel back to back; one row per window of about a second."""
    for _ in range(3):
        kernel()
    torch.cuda.synchronize()
    windows, calls = [], 8
    started = time.monotonic()
    while time.monotonic() - started < seconds:
        begin = time.monotonic()
        for _ in range(calls):
            kernel()
        torch.cuda.synchronize()
        elapsed = time.monotonic() - begin
        windows.append({"t_s": begin - origin, "seconds": elapsed, "tflops": calls * flop_per_call / elapsed / 1e12})
        calls = max(1, int(calls / elapsed))  # about one second a window
    return windows


def gemm_bf16(n):
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    out = torch.empty(n, n, device="cuda", dtype=torch.bfloat16)
    return lambda: torch.matmul(a, b, out=out)


def gemm_fp8(n):
    a = torch.randn(n, n, device="cuda").to(torch.float8_e4m3fn)
    b = torch.randn(n, n, device="cuda").to(torch.float8_e4m3fn).t()  # column-major, as _scaled_mm needs
    one = torch.ones((), device="cuda")
    return lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16, use_fast_accum=True)


def attention(backend, heads, seq, head_dim=128):
    """Causal bf16 attention, forward then backward, through one SDPA backend ("flash" is
    FlashAttention-2, "cudnn" cuDNN's fused kernel)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    chosen = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION}[backend]
    q, k, v = (torch.randn(1, heads, seq, head_dim, device="cuda", dtype=torch.bfloat16, requires_grad=True)
               for _ in range(3))
    grad = torch.randn(1, heads, seq, head_dim, device="cuda", dtype=torch.bfloat16)

    def call():
        with sdpa_kernel(chosen):
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        torch.autograd.grad(out, (q, k, v), grad)
    return call


def attention_flop(heads, seq, head_dim=128):
    """The causal half of QK^T and PV forward (2 s^2 d a head), and backward 2.5 times that."""
    return 3.5 * 2.0 * heads * seq * seq * head_dim


def summary(rows, value, first_s=5.0, last_s=30.0):
    """Medians over the first and over the last seconds of a phase."""
    if not rows:
        return None
    start, end = rows[0]["t_s"], rows[-1]["t_s"]
    first = [r[value] for r in rows if r["t_s"] - start <= first_s]
    last = [r[value] for r in rows if end - r["t_s"] <= last_s]
    return {"first_median": statistics.median(first), "last_median": statistics.median(last),
            "first_s": first_s, "last_s": last_s}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--output", required=True)
    parser.add_argument("--train-s", type=float, default=120.0)
    parser.add_argument("--idle-s", type=float, default=20.0)
    parser.add_argument("--gemm-s", type=float, default=90.0)
    parser.add_argument("--fp8-s", type=float, default=45.0)
    parser.add_argument("--attention-s", type=float, default=40.0, help="seconds for each attention backend")
    parser.add_argument("--attention-heads", type=int, default=32)
    parser.add_argument("--attention-seq", type=int, default=16384)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--seq", type=int, default=8192)
    parser.add_argument("--gemm-n", type=int, default=8192)
    parser.add_argument("--capacity-margins", type=float, nargs="*", default=[],
                        help="rerun the loop with the allocator capped at these multiples of its peak allocated bytes")
    parser.add_argument("--capped-s", type=float, default=30.0)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("sustained_torch.py: no CUDA GPU", file=sys.stderr)
        return 2
    origin = time.monotonic()
    sampler = Sampler(origin)
    result = {"meta": {**run_meta(__doc__), "arguments": dict(vars(args))}}
    phases = [("training", lambda: run_training(args, origin, args.train_s))]
    if args.idle_s > 0:
        phases.append(("idle", lambda: time.sleep(args.idle_s)))
    if args.gemm_s > 0:
        phases.append(("gemm_bf16", lambda: run_windows(gemm_bf16(args.gemm_n), 2.0 * args.gemm_n ** 3, args.gemm_s,
                                                        origin)))
    if args.fp8_s > 0:
        phases.append(("gemm_fp8", lambda: run_windows(gemm_fp8(args.gemm_n), 2.0 * args.gemm_n ** 3, args.fp8_s,
                                                       origin)))
    if args.attention_s > 0:
        flop = attention_flop(args.attention_heads, args.attention_seq)
        for backend in ("flash", "cudnn"):
            phases.append((f"attention_{backend}",
                           lambda backend=backend: run_windows(attention(backend, args.attention_heads,
                                                                         args.attention_seq),
                                                               flop, args.attention_s, origin)))
    for margin in args.capacity_margins:
        phases.append((f"training_capped_{margin}",
                       lambda margin=margin: run_training(args, origin, args.capped_s, margin)))
    for name, phase in phases:
        begin = time.monotonic() - origin
        try:
            result[name] = phase()
        except Exception as e:  # one failing phase must not lose the others
            result[name] = {"error": f"{type(e).__name__}: {e}"}
            print(f"{name}: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
        torch.cuda.empty_cache()
        end = time.monotonic() - origin
        # Clocks from the first timed iteration or window on, not from the model's construction.
        outcome = result[name]
        rows = outcome if isinstance(outcome, list) else (outcome or {}).get("iterations")
        first = rows[0]["t_s"] if rows else begin
        clocks = [s for s in sampler.samples if first <= s["t_s"] <= end]
        result.setdefault("phases", []).append({"name": name, "start_s": begin, "end_s": end})
        shown = {"sm_clock_mhz": summary(clocks, "sm_clock_mhz"), "power_w": summary(clocks, "power_w")}
        if name.startswith("training") and "iterations" in result[name]:
            for value in ("seconds", "forward_backward_s", "optimizer_s"):
                shown[value] = summary(result[name]["iterations"], value)
            shown["memory"] = result[name]["memory"]
        elif name.startswith(("gemm", "attention")) and isinstance(result[name], list):
            shown["tflops"] = summary(result[name], "tflops")
        result.setdefault("summary", {})[name] = shown
        print(f"{name} ({begin:.0f}-{end:.0f} s): {json.dumps(shown)}", flush=True)
    sampler.stop()
    result["samples"] = sampler.samples
    with open(args.output, "w") as out:
        json.dump(result, out, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
