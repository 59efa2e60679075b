#!/usr/bin/env python3
"""Tests calibrate/ring_attention_torch.py without a GPU or torch: the steps it runs for a rank
are exactly the causally visible blocks of PyTorch's load-balanced split, and its log-sum-exp
merge and its backward, run on numpy stand-ins for torch and the flash kernel, give the output
and gradients of one softmax over every key the steps show the queries."""

import os
import sys
import types
import unittest

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "calibrate"))
import ring_attention_torch as ring  # noqa: E402


def chunks(cp, rank):
    """The two sequence chunks (of 2·cp) a rank holds: its head and its mirrored tail."""
    return [rank, 2 * cp - 1 - rank]


class RingSteps(unittest.TestCase):
    def test_steps_cover_exactly_the_visible_chunks(self):
        for cp in (2, 3, 4, 8):
            for rank in range(cp):
                steps = ring.blocks(cp, rank)
                self.assertEqual(len(steps), cp)
                self.assertEqual(steps[0], (None, None, True))  # the rank's own tokens, causal
                for step, (query_half, key_half, causal) in enumerate(steps[1:], start=1):
                    self.assertFalse(causal)
                    source = (rank - step) % cp
                    queries = [c for i, c in enumerate(chunks(cp, rank)) if query_half in (None, i)]
                    keys = [c for i, c in enumerate(chunks(cp, source)) if key_half in (None, i)]
                    ran = {(q, k) for q in queries for k in keys}
                    visible = {(q, k) for q in chunks(cp, rank) for k in chunks(cp, source) if k < q}
                    # Every block it runs is wholly visible, and it runs all that is.
                    self.assertEqual(ran, visible, f"cp {cp} rank {rank} step {step}")

    def test_every_step_after_the_first_is_half_a_diagonal_of_work(self):
        for cp in (2, 4, 8):
            for rank in range(cp):
                for query_half, key_half, _ in ring.blocks(cp, rank)[1:]:
                    self.assertEqual((query_half is None) + (key_half is None), 1)


class Array(np.ndarray):
    """The few torch.Tensor methods the ring functions call, on a numpy array (views stay views)."""

    device = "cpu"

    def float(self):
        return self.copy()

    def to(self, dtype):
        return self.astype(dtype)

    def chunk(self, pieces, dim):
        return np.split(self, pieces, axis=dim)

    def unsqueeze(self, dim):
        return np.expand_dims(self, dim)

    def squeeze(self, dim):
        return np.ndarray.squeeze(self, axis=dim)

    def contiguous(self):
        return np.ascontiguousarray(self).view(Array)

    def sub_(self, other):
        np.subtract(self, other, out=self)
        return self

    def add_(self, other):
        np.add(self, other, out=self)
        return self


def scores(q, k, causal):
    s = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
    if causal:
        s = np.where(np.tril(np.ones(s.shape[-2:], dtype=bool)), s, -np.inf)
    return s


def reference_forward(q, k, v, causal):
    """One attention call as the flash kernel returns it: output, log-sum-exp, and no RNG state."""
    s = scores(q, k, causal)
    lse = np.log(np.exp(s - s.max(-1, keepdims=True)).sum(-1)) + s.max(-1)
    return (np.exp(s - lse[..., None]) @ v).view(Array), lse.view(Array), None


def reference_backward(grad_out, q, k, v, out, lse, rest, causal):
    """The flash backward of one block, given the merged output and log-sum-exp of all blocks."""
    p = np.exp(scores(q, k, causal) - lse[..., None])
    grad_p = grad_out @ np.swapaxes(v, -1, -2)
    grad_s = p * (grad_p - (grad_out * out).sum(-1, keepdims=True)) / np.sqrt(q.shape[-1])
    return grad_s @ k, np.swapaxes(grad_s, -1, -2) @ q, np.swapaxes(p, -1, -2) @ grad_out


def union_attention(q, k, v, cp, rank):
    """Each query against every key some step of the rank shows it, in one softmax; every step
    reads the same keys and values (the ring's transfers are left out)."""
    tokens = q.shape[2]
    rows = np.arange(tokens)
    halves = {None: np.ones(tokens, bool), 0: rows < tokens // 2, 1: rows >= tokens // 2}
    keys, values, visible = [], [], []
    for query_half, key_half, causal in ring.blocks(cp, rank):
        keys.append(k[:, :, halves[key_half]])
        values.append(v[:, :, halves[key_half]])
        shown = np.outer(halves[query_half], np.ones(halves[key_half].sum(), bool))
        if causal:
            shown &= np.tril(np.ones((tokens, tokens), bool))
        visible.append(shown)
    s = q @ np.swapaxes(np.concatenate(keys, 2), -1, -2) / np.sqrt(q.shape[-1])
    s = np.where(np.concatenate(visible, 1), s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    return (p / p.sum(-1, keepdims=True)) @ np.concatenate(values, 2)


class RingMerge(unittest.TestCase):
    def setUp(self):
        self.saved = (ring.torch, ring.F, ring.flash_forward, ring.flash_backward)
        # float32 buffers held in float64, so the comparison is of the algebra, not of rounding.
        ring.torch = types.SimpleNamespace(
            float32=np.float64, sigmoid=lambda x: 1.0 / (1.0 + np.exp(-x)),
            zeros=lambda shape, device, dtype: np.zeros(shape, dtype).view(Array))
        ring.F = types.SimpleNamespace(logsigmoid=lambda x: -np.logaddexp(0.0, -x))
        ring.flash_forward = reference_forward
        ring.flash_backward = reference_backward
        self.rng = np.random.default_rng(0)

    def tearDown(self):
        ring.torch, ring.F, ring.flash_forward, ring.flash_backward = self.saved

    def tensors(self, tokens=8, heads=2, head_dim=4):
        return [self.rng.standard_normal((1, heads, tokens, head_dim)).view(Array) for _ in range(4)]

    def test_merged_output_is_one_softmax_over_the_visible_keys(self):
        for cp in (1, 2, 4):
            for rank in range(cp):
                q, k, v, _ = self.tensors()
                out, lse, _ = ring.ring_forward(q, k, v, cp, rank, merge=True)
                np.testing.assert_allclose(out, union_attention(q, k, v, cp, rank), rtol=1e-12, atol=1e-12)

    def test_without_the_merge_the_output_is_the_diagonal_alone(self):
        q, k, v, _ = self.tensors()
        out, _, _ = ring.ring_forward(q, k, v, 4, 1, merge=False)
        np.testing.assert_allclose(out, union_attention(q, k, v, 1, 0), rtol=1e-12, atol=1e-12)
        self.assertGreater(np.abs(out - union_attention(q, k, v, 4, 1)).max(), 1e-3)

    def test_gradients_match_finite_differences_of_the_union(self):
        cp, rank, step = 4, 2, 1e-6
        q, k, v, grad_out = self.tensors(tokens=4, heads=1, head_dim=3)
        out, lse, saved = ring.ring_forward(q, k, v, cp, rank, merge=True)
        grad_q, grad_kv = ring.ring_backward(grad_out, q, k, v, out, lse, saved)

        def loss():
            return float((union_attention(q, k, v, cp, rank) * grad_out).sum())

        for tensor, grad in ((q, grad_q), (k, grad_kv[0]), (v, grad_kv[1])):
            numeric = np.zeros(tensor.shape)
            for index in np.ndindex(tensor.shape):
                kept = tensor[index]
                tensor[index] = kept + step
                up = loss()
                tensor[index] = kept - step
                numeric[index] = (up - loss()) / (2 * step)
                tensor[index] = kept
            np.testing.assert_allclose(grad, numeric, rtol=1e-6, atol=1e-8)


if __name__ == "__main__":
    unittest.main()
