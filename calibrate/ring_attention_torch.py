#!/usr/bin/env python3
"""Times one rank's share of ring (context-parallel) attention on one GPU, as PyTorch runs it.

PyTorch's context parallelism (torch.distributed.tensor.experimental.context_parallel, which
torchtitan uses) splits the sequence over cp ranks, each holding a head and a tail chunk (load
balancing), and runs cp attention calls a rank: the causal diagonal on its own tokens, then for
each other rank's keys and values an unmasked block, either all its queries against the first
half of the keys or the second half of its queries against all the keys. Each block's output is
merged into an fp32 running output by its log-sum-exp; backward runs the cp calls again, adding
the query gradients into fp32 and the key/value gradients into an fp32 buffer that travels the
ring. This script runs that work on one GPU with the communication left out, so what it times is
the kernels and merges one rank runs, to set against cp times one causal call.

  ring_attention_torch.py --output ring.json [--tokens 32768] [--heads 32] [--head-dim 128]

Needs only torch. Uses the FlashAttention-2 kernel behind SDPA's flash backend
(aten._scaled_dot_product_flash_attention and its backward, the calls PyTorch's ring makes).
"""
import argparse
import json
import sys

try:
    import torch
    import torch.nn.functional as F
except ImportError:  # the step schedule is tested without torch
    torch = F = None


def flash_forward(q, k, v, causal):
    out, lse, cum_q, cum_k, max_q, max_k, seed, offset, _ = torch.ops.aten._scaled_dot_product_flash_attention(
        q, k, v, 0.0, causal, False)
    return out, lse, (cum_q, cum_k, max_q, max_k, seed, offset)


def flash_backward(grad_out, q, k, v, out, lse, rest, causal):
    cum_q, cum_k, max_q, max_k, seed, offset = rest
    return torch.ops.aten._scaled_dot_product_flash_attention_backward(
        grad_out, q, k, v, out, lse, cum_q, cum_k, max_q, max_k, 0.0, causal, seed, offset)


def blocks(cp, rank):
    """(query half, key half, causal) of each step for one rank: None is the whole."""
    steps = [(None, None, True)]
    for step in range(1, cp):
        source = (rank - step) % cp
        steps.append((None, 0, False) if source < rank else (1, None, False))
    return steps


def half(x, which):
    return x if which is None else x.chunk(2, dim=2)[which]


def ring_forward(q, k, v, cp, rank, merge):
    """Runs the rank's steps; returns the merged output (bf16), its log-sum-exp and what backward needs."""
    out, lse, saved = None, None, []
    for query_half, key_half, causal in blocks(cp, rank):
        qs, ks, vs = half(q, query_half), half(k, key_half), half(v, key_half)
        block_out, block_lse, rest = flash_forward(qs, ks, vs, causal)
        saved.append((query_half, key_half, causal, rest))
        if out is None:
            out, lse = block_out.float(), block_lse
            continue
        if not merge:
            continue
        target_out, target_lse = half(out, query_half), half(lse, query_half)
        block_lse = block_lse.unsqueeze(-1)
        running = target_lse.unsqueeze(-1)
        target_out.sub_(torch.sigmoid(block_lse - running) * (target_out - block_out))
        target_lse.sub_(F.logsigmoid(target_lse - block_lse.squeeze(-1)))
    return out.to(q.dtype), lse, saved


def ring_backward(grad_out, q, k, v, out, lse, saved):
    grad_q = torch.zeros(q.shape, device=q.device, dtype=torch.float32)
    grad_kv = torch.zeros((2,) + k.shape, device=k.device, dtype=torch.float32)
    for query_half, key_half, causal, rest in saved:
        qs, ks, vs = half(q, query_half), half(k, key_half), half(v, key_half)
        dq, dk, dv = flash_backward(half(grad_out, query_half), qs, ks, vs, half(out, query_half),
                                    half(lse, query_half).contiguous(), rest, causal)
        half(grad_q, query_half).add_(dq)
        half(grad_kv[0], key_half).add_(dk)
        half(grad_kv[1], key_half).add_(dv)
    return grad_q.to(q.dtype), grad_kv.to(q.dtype)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--output", required=True)
    parser.add_argument("--tokens", type=int, default=32768, help="tokens a rank holds")
    parser.add_argument("--heads", type=int, default=32)
    parser.add_argument("--head-dim", type=int, default=128)
    parser.add_argument("--cp", type=int, nargs="+", default=[1, 2, 4, 8])
    args = parser.parse_args()
    if torch is None or not torch.cuda.is_available():
        print("ring_attention_torch.py: no CUDA GPU", file=sys.stderr)
        return 2
    from layer_torch import median_ms, run_meta  # needs torch, which the step schedule's test has not

    torch.manual_seed(0)
    shape = (1, args.heads, args.tokens, args.head_dim)
    q, k, v = (torch.randn(shape, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    grad_out = torch.randn_like(q)
    rows = []
    for cp in args.cp:
        for merge in (True, False):
            if cp == 1 and not merge:
                continue
            try:
                # Every rank does the same work under load balancing; rank cp-1 is timed.
                rank = cp - 1
                state = {}

                def forward():
                    state["out"], state["lse"], state["saved"] = ring_forward(q, k, v, cp, rank, merge)

                forward_ms = median_ms(forward, 2, 5)[0]
                backward_ms = median_ms(lambda: ring_backward(grad_out, q, k, v, state["out"], state["lse"],
                                                              state["saved"]), 2, 5)[0]
                causal_flop = 4.0 * args.heads * args.tokens * args.tokens * args.head_dim * 0.5
                flop = causal_flop * cp  # the diagonal plus cp-1 half-masked-sized blocks
                rows.append({"cp": cp, "merge": merge, "tokens": args.tokens, "heads": args.heads,
                             "head_dim": args.head_dim, "forward_s": forward_ms / 1e3,
                             "backward_s": backward_ms / 1e3,
                             "forward_tflops": flop / forward_ms / 1e9,
                             "backward_tflops": 2.5 * flop / backward_ms / 1e9})
                print(f"cp {cp} merge {merge}: forward {forward_ms:.2f} ms ({rows[-1]['forward_tflops']:.0f} TFLOP/s),"
                      f" backward {backward_ms:.2f} ms ({rows[-1]['backward_tflops']:.0f} TFLOP/s)", flush=True)
                state.clear()
            except Exception as e:  # one failing size must not lose the others
                rows.append({"cp": cp, "merge": merge, "error": f"{type(e).__name__}: {e}"})
                print(f"cp {cp}: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
    meta = run_meta(__doc__, timer="CUDA events, median of 5 after 2 warm-up")
    with open(args.output, "w") as out:
        json.dump({"meta": meta, "ring": rows}, out, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
