"""Shared fixtures of the Python suites: small scenarios that simulate in milliseconds.

Run by ctest with PYTHONPATH=<build>/python from the repository root (tests/python/CMakeLists.txt);
by hand: PYTHONPATH=build/python /usr/bin/python3 -m pytest tests/python
"""

import os

import matplotlib
import pytest

matplotlib.use("Agg")

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture
def gpt_8gpus():
    """GPT 1.7B on one node of 8 A100s, as a dict."""
    return {
        "name": "gpt-1.7b on 8 A100",
        "model": "gpt-1.7b",
        "cluster": {"gpu": "a100-sxm4-80gb", "nodes": 1, "gpus_per_node": 8},
        "parallelism": {"tp": 2},
        "training": {"global_batch": 16, "seq_len": 1024},
    }


@pytest.fixture
def scenario_path():
    """A ready scenario file, by its path from the repository root."""
    return os.path.join(REPO, "scenarios", "gpt-1.7b-1xa100.yaml")


def with_overrides(scenario, overrides):
    """A copy of a scenario dict with {dotted path: value} set, as sweeps apply them."""
    import copy

    result = copy.deepcopy(scenario)
    for path, value in overrides.items():
        node = result
        *parents, last = path.split(".")
        for key in parents:
            node = node.setdefault(key, {})
        node[last] = value
    return result
