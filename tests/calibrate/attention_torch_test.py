#!/usr/bin/env python3
"""Tests calibrate/attention_torch.py without a GPU or torch: its YAML matches
paceline-calibrate's layout byte for byte, its statistics match calibrate/stats.cc, its grid
matches calibrate/grid.cc's quick grid, and its merge decision."""

import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "calibrate"))
import attention_torch as at  # noqa: E402

try:
    import yaml
except ImportError:  # pragma: no cover
    yaml = None

# A profile as calibrate/profile.cc writes it (to_yaml).
CANONICAL = """\
# paceline kernel profile: measured kernel and link times.
# Format: docs/profile-format.md. Times in seconds, sizes in bytes.
format: paceline-profile/1
device:
  name: "NVIDIA H200"
  compute_capability: "9.0"
  memory_bytes: 150754820096
  power_limit_w: 700.0
method:
  mode: quick
  warmup: 3
  repetitions: 10
gemm:
  method: "cuBLASLt"
  key: [dtype, transa, transb, m, "n", k]
  interpolate: [m, "n", k]
  axes: {dtype: [bf16], transa: ["T"], transb: ["N"], m: [256], n: [1024], k: [1024]}
  rows:
    - {dtype: bf16, transa: "T", transb: "N", m: 256, n: 1024, k: 1024, time_s: 0.0003, flop_per_s: 612345678900000.0}
attention:
  method: "cuDNN 91900 fused SDPA"
  key: [direction, dtype, causal, head_dim, group, batch, heads, seq]
  interpolate: [heads, seq]
  axes: {direction: [forward, backward], dtype: [bf16], causal: [true], head_dim: [128], group: [1, 8], batch: [1], heads: [8, 32, 128], seq: [1024, 4096, 16384]}
  rows:
    - {direction: forward, dtype: bf16, causal: true, head_dim: 128, group: 1, batch: 1, heads: 8, kv_heads: 8, seq: 1024, time_s: 1.2345e-05, spread: 0.0123, kernel: "sdpa<128, true>"}
    - {direction: backward, dtype: bf16, causal: true, head_dim: 128, group: 1, batch: 1, heads: 8, kv_heads: 8, seq: 1024, time_s: null, error: "no engine: \\"x\\""}
skipped:
  collectives: "1 GPU: NCCL collectives need at least 2"
"""


class AttentionTorchTest(unittest.TestCase):
    def test_reals_are_written_as_calibrate_writes_them(self):
        # Same expectations as tests/calibrate/yaml_subset_test.cc (format_real).
        cases = {1e-5: "1.0e-05", 1.5e-5: "1.5e-05", 3.0: "3.0", 0.1: "0.1", 1.2e20: "1.2e+20",
                 3e-4: "0.0003", -2.5e-7: "-2.5e-07", 1e16: "1.0e+16", float("nan"): "null"}
        for value, text in cases.items():
            self.assertEqual(at.yaml_scalar(value), text)
        self.assertEqual(at.yaml_scalar("T"), '"T"')
        self.assertEqual(at.yaml_scalar("bf16"), "bf16")
        self.assertEqual(at.yaml_scalar('a "b"\n'), '"a \\"b\\"\\n"')
        self.assertEqual(at.yaml_scalar(True), "true")
        self.assertEqual(at.yaml_scalar(None), "null")

    @unittest.skipIf(yaml is None, "PyYAML is not installed")
    def test_round_trip_is_byte_identical(self):
        self.assertEqual(at.emit_profile(yaml.safe_load(CANONICAL)), CANONICAL)

    @unittest.skipIf(yaml is None, "PyYAML is not installed")
    def test_atomic_write_and_load(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "p.yaml")
            self.assertIsNone(at.load_profile(path, yaml))
            at.write_atomically(path, CANONICAL)
            self.assertEqual(os.listdir(d), ["p.yaml"])
            self.assertEqual(at.load_profile(path, yaml)["device"]["name"], "NVIDIA H200")

    def test_subset_reader_needs_no_pyyaml(self):
        profile = at.parse_subset(CANONICAL, "canonical.yaml")
        self.assertEqual(at.emit_profile(profile), CANONICAL)
        self.assertEqual(profile["attention"]["rows"][1]["error"], 'no engine: "x"')
        self.assertIsNone(profile["attention"]["rows"][1]["time_s"])
        self.assertEqual(profile["gemm"]["rows"][0]["transa"], "T")
        self.assertEqual(profile["gemm"]["rows"][0]["time_s"], 0.0003)
        if yaml is not None:
            self.assertEqual(profile, yaml.safe_load(CANONICAL))
        # PyYAML's style: block sequences at their key's indentation, comments.
        self.assertEqual(at.parse_subset("a:\n- {x: [1, .5]}  # c\n- \"#\"\nb: {}\n"),
                         {"a": [{"x": [1, 0.5]}, "#"], "b": {}})
        with self.assertRaises(at.SubsetError):
            at.parse_subset("a: {x: 1\n")

    def test_statistics_match_calibrate(self):
        # Samples 1..10: median 5.5, p10 1.9, p90 9.1 (tests/calibrate/stats_test.cc).
        median, spread = at.summarize([10, 1, 9, 2, 8, 3, 7, 4, 6, 5])
        self.assertAlmostEqual(median, 5.5)
        self.assertAlmostEqual(spread, (9.1 - 1.9) / 5.5)

    def test_default_grid_is_calibrates_quick_grid(self):
        # 2 directions × 2 groups × 3 head counts × 3 sequence lengths (grid_test.cc).
        points = at.attention_points(at.DEFAULT_AXES)
        self.assertEqual(len(points), 36)
        self.assertEqual(points[0]["direction"], "forward")
        self.assertEqual(points[1]["direction"], "backward")
        self.assertEqual(points[-1]["kv_heads"], 128 // 8)

    @unittest.skipIf(yaml is None, "PyYAML is not installed")
    def test_incomplete_attention_is_replaced(self):
        profile = yaml.safe_load(CANONICAL)
        points = at.attention_points(at.DEFAULT_AXES)
        complete, why = at.attention_complete(profile, points)
        self.assertFalse(complete)
        self.assertEqual(why, "1 failed and 34 missing points")
        del profile["attention"]
        profile["skipped"]["attention"] = "cuDNN has no engine"
        self.assertEqual(at.attention_complete(profile, points), (False, "cuDNN has no engine"))

    def test_rows_paceline_cannot_time_become_holes(self):
        point = at.attention_points(at.DEFAULT_AXES)[-1]
        measured = dict(point, time_s=1e-3, spread=0.01, kernels=1, kernel="flash_fwd_kernel",
                        backend="flash", flop_per_s=1e15)
        self.assertIs(at.as_attention_row(measured), measured)
        failed = dict(point, time_s=None, error="OutOfMemoryError", backend="default")
        self.assertIs(at.as_attention_row(failed), failed)

        efficient = dict(measured, kernel="fmha_cutlassF_bf16", backend="efficient")
        hole = at.as_attention_row(efficient)
        self.assertIsNone(hole["time_s"])
        self.assertEqual(hole["backend"], "efficient")
        self.assertIn("fmha_cutlassF_bf16", hole["error"])
        self.assertNotIn("flop_per_s", hole)
        self.assertEqual({k: hole[k] for k in at.ATTENTION_KEY}, {k: point[k] for k in at.ATTENTION_KEY})

        expanded = at.as_attention_row(dict(measured, kv_layout="expanded"))
        self.assertIsNone(expanded["time_s"])
        self.assertNotIn("kv_layout", expanded)
        self.assertIn("copied to every query head", expanded["error"])


if __name__ == "__main__":
    unittest.main()
