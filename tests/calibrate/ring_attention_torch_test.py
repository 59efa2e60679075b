#!/usr/bin/env python3
"""Tests calibrate/ring_attention_torch.py without a GPU or torch: the steps it runs for a rank
are exactly the causally visible blocks of PyTorch's load-balanced split."""

import os
import sys
import unittest

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


if __name__ == "__main__":
    unittest.main()
