"""paceline.sweep: rows in product order equal to single simulations, invalid configurations as
rows, the same frame on any thread count, and the progress bar."""

import itertools
import os
import signal
import sys
import threading
import time

import numpy as np
import pandas as pd
import pytest

import paceline
from conftest import with_overrides

GRID = {"parallelism.tp": [1, 2, 4, 8], "training.micro_batch": [1, 2, 3]}


def test_rows_follow_the_product_of_the_grid(gpt_8gpus):
    df = paceline.sweep(gpt_8gpus, GRID, progress=False)
    assert list(df.columns) == ["parallelism.tp", "training.micro_batch", "iteration_time_s", "tokens_per_s",
                                "tokens_per_s_per_gpu", "mfu", "hfu", "peak_memory_bytes", "peak_reserved_bytes",
                                "fits", "error", "warnings"]
    assert list(zip(df["parallelism.tp"], df["training.micro_batch"])) == list(itertools.product(*GRID.values()))


def test_rows_equal_single_simulations(gpt_8gpus):
    df = paceline.sweep(gpt_8gpus, GRID, progress=False)
    for row in df.itertuples(index=False):
        overrides = {"parallelism.tp": row[0], "training.micro_batch": row[1]}
        scenario = with_overrides(gpt_8gpus, overrides)
        try:
            r = paceline.simulate(scenario)
        except ValueError as e:
            # Invalid: the row carries the reason (its lines differ: the sweep cites the base).
            assert row.error is not None and str(e).split(": ", 1)[1] == row.error.split(": ", 1)[1]
            assert np.isnan(row.tokens_per_s)
            assert row.peak_memory_bytes is pd.NA and row.peak_reserved_bytes is pd.NA and row.fits is pd.NA
            continue
        assert row.error is None
        assert row.iteration_time_s == r.iteration_time_s
        assert row.tokens_per_s == r.tokens_per_s
        assert row.tokens_per_s_per_gpu == r.tokens_per_s_per_gpu
        assert row.mfu == r.mfu and row.hfu == r.hfu
        assert row.peak_memory_bytes == r.peak_memory_bytes
        assert row.peak_reserved_bytes == r.peak_reserved_bytes
        assert row.fits == r.fits


def test_invalid_configurations_are_rows_not_exceptions(gpt_8gpus):
    # micro_batch 3 does not divide the 16 sequences per step.
    df = paceline.sweep(gpt_8gpus, {"training.micro_batch": [2, 3]}, progress=False)
    assert df["error"].isna().tolist() == [True, False]
    assert "training.global_batch = 16 is not a multiple of micro_batch·dp = 3·4" in df["error"][1]
    assert df["error"][1].startswith("<dict>:")
    assert df["peak_memory_bytes"].dtype == df["peak_reserved_bytes"].dtype == "Int64"
    assert df["fits"].dtype == "boolean"


def test_two_sweeps_are_identical_on_any_thread_count(gpt_8gpus):
    grid = {"parallelism.pp": [1, 2], "training.recompute": ["none", "selective", "full"],
            "training.micro_batch": [1, 2]}
    one = paceline.sweep(gpt_8gpus, grid, threads=1, progress=False)
    two = paceline.sweep(gpt_8gpus, grid, threads=2, progress=False)
    again = paceline.sweep(gpt_8gpus, grid, threads=2, progress=False)
    pd.testing.assert_frame_equal(one, two)
    pd.testing.assert_frame_equal(two, again)


def test_values_may_be_strings_and_mappings(gpt_8gpus):
    df = paceline.sweep(gpt_8gpus, {"cluster.intra_node": [{"bandwidth": "300 GB/s"}, {"bandwidth": "600 GB/s"}],
                                    "training.precision": ["bf16", "fp32"]}, progress=False)
    assert df["error"].isna().all()
    # Faster links never slow a step down.
    assert (df["iteration_time_s"][2:].to_numpy() <= df["iteration_time_s"][:2].to_numpy()).all()


def test_progress_bar_without_tqdm_falls_back_to_a_line(gpt_8gpus, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "tqdm", None)  # import tqdm now raises ImportError
    paceline.sweep(gpt_8gpus, {"training.micro_batch": [1, 2]}, progress=True)
    assert "sweep: 2/2 configurations" in capsys.readouterr().err


def test_progress_bar_with_tqdm(gpt_8gpus, capsys):
    pytest.importorskip("tqdm")
    paceline.sweep(gpt_8gpus, {"training.micro_batch": [1, 2]}, progress=True)
    assert "2/2" in capsys.readouterr().err


def test_empty_axes_are_refused(gpt_8gpus):
    with pytest.raises(ValueError, match="parallelism.tp has no values"):
        paceline.sweep(gpt_8gpus, {"parallelism.tp": []}, progress=False)


def test_a_sweep_of_which_no_configuration_reads_is_refused(gpt_8gpus):
    # A misspelt path breaks every configuration: an error, as `paceline sweep` gives, not a
    # frame of error rows.
    with pytest.raises(ValueError, match="<dict> with parallelism.tpp=1: unknown key 'tpp' in parallelism"):
        paceline.sweep(gpt_8gpus, {"parallelism.tpp": [1, 2]}, progress=False)


def test_a_grid_is_a_dict_of_paths_to_lists(gpt_8gpus):
    # A string would otherwise be swept character by character ("12": tp 1, then tp 2).
    for grid in ({"parallelism.tp": "12"}, {"parallelism.tp": 2}, {"parallelism.tp": {"a": 1}}):
        with pytest.raises(ValueError, match="is not a list of values"):
            paceline.sweep(gpt_8gpus, grid, progress=False)
    with pytest.raises(ValueError, match="key 1 is not a field path"):
        paceline.sweep(gpt_8gpus, {1: [1]}, progress=False)
    with pytest.raises(TypeError, match="sweep grid is a dict"):
        paceline.sweep(gpt_8gpus, [("parallelism.tp", [1])], progress=False)


def test_ctrl_c_stops_a_sweep_inside_a_configuration(scenario_path):
    # One configuration: GPT-3 175B on 1,024 GPUs, every rank simulated, at 4x the global batch,
    # about 16 s of engine work. A SIGINT 0.3 s in stops it inside that simulation, where it once
    # waited for the configuration to end.
    scenario = os.path.join(os.path.dirname(scenario_path), "gpt3-175b-1024xa100.yaml")
    grid = {"simulation": [{"fidelity": "full", "fold_symmetric_peers": False}], "training.global_batch": [6144]}
    timer = threading.Timer(0.3, lambda: os.kill(os.getpid(), signal.SIGINT))
    started = time.monotonic()
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            paceline.sweep(scenario, grid, progress=False)
    finally:
        timer.cancel()
    assert time.monotonic() - started < 8.0
