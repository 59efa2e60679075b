"""paceline.search: the same report as `paceline search --json`, a ranked DataFrame, counts that
add up."""

import concurrent.futures
import json
import os
import re
import signal
import subprocess
import threading

import pytest
import yaml

import paceline

CLI = os.environ.get("PACELINE_CLI")


def test_ranked_layouts_and_counts(gpt_8gpus):
    result = paceline.search(gpt_8gpus, top=5)
    assert len(result.top) == 5
    assert list(result.top["rank"]) == [1, 2, 3, 4, 5]
    assert result.top["tokens_per_s"].is_monotonic_decreasing
    assert result.top["fits"].all()
    assert result.gpus == 8 and result.global_batch == 16
    assert result.considered == result.pruned_memory + result.pruned_bound + result.simulated
    assert result.fit <= result.simulated
    assert "layouts considered" in repr(result)


def test_a_search_that_finds_nothing_has_the_columns_and_its_dict_is_a_copy(gpt_8gpus):
    # GPT-3 175B on one GPU: no layout fits.
    nothing = paceline.search({"model": "gpt3-175b", "cluster": {"gpu": "a100-sxm4-80gb"},
                               "training": {"global_batch": 8}})
    assert nothing.top.empty
    assert list(nothing.top.columns) == list(paceline.search(gpt_8gpus, top=1).top.columns)
    nothing.to_dict()["considered"] = -5
    assert nothing.to_dict()["considered"] == nothing.considered


def test_the_best_layout_simulates_as_reported(gpt_8gpus):
    best = paceline.search(gpt_8gpus, top=1).top.iloc[0]
    scenario = dict(gpt_8gpus)
    scenario["parallelism"] = {key: best[key].item() if hasattr(best[key], "item") else best[key]
                               for key in ["tp", "pp", "dp", "cp", "ep", "virtual_stages", "schedule", "zero",
                                           "sequence_parallel"]}
    scenario["training"] = dict(gpt_8gpus["training"], micro_batch=int(best["micro_batch"]),
                                recompute=best["recompute"])
    r = paceline.simulate(scenario)
    assert r.tokens_per_s == best["tokens_per_s"]
    assert (r.peak_memory_bytes, r.peak_reserved_bytes) == (best["peak_memory_bytes"], best["peak_reserved_bytes"])


@pytest.mark.skipif(not CLI, reason="PACELINE_CLI (the paceline executable) not given")
def test_same_report_as_the_cli(gpt_8gpus, tmp_path):
    path = tmp_path / "gpt.yaml"
    path.write_text(yaml.safe_dump(gpt_8gpus))
    cli = json.loads(subprocess.run([CLI, "search", str(path), "--gpus", "4", "--top", "3", "--json"],
                                    check=True, capture_output=True, text=True).stdout)
    ours = paceline.search(path, gpus=4, top=3, threads=1).to_dict()
    del cli["wall_s"], ours["wall_s"]
    assert ours == cli


def test_bad_gpu_counts_are_value_errors(scenario_path):
    with pytest.raises(ValueError, match="search on 3 GPUs"):
        paceline.search("model: gpt-1.7b\ncluster: {gpu: a100-sxm4-80gb, gpus_per_node: 8}\n"
                        "training: {global_batch: 8}\n", gpus=3)
    # Counts that are not whole numbers in range are ValueErrors naming the argument.
    for arguments in ({"top": None}, {"top": 1.5}, {"top": 2**40}, {"gpus": 2**40}, {"threads": -1},
                      {"threads": True}):
        name, value = next(iter(arguments.items()))
        with pytest.raises(ValueError, match=re.escape(f"{name} = {value!r}: expected")):
            paceline.search(scenario_path, **arguments)
    with pytest.raises(ValueError, match=r"^threads = 0: expected None or a whole number from 1"):
        paceline.sweep(scenario_path, {"training.micro_batch": [1]}, threads=0)
    with pytest.raises(ValueError, match=r"^max_memory_bytes = 1000\d* must be a finite number"):
        paceline.simulate(scenario_path, max_memory_bytes=10**400)


def test_an_exception_from_progress_stops_the_search(gpt_8gpus, monkeypatch, capsys):
    # Ctrl-C in a notebook raises KeyboardInterrupt in the progress callback, the one place the
    # search hands Python control; the search stops there.
    calls = []

    def interrupt(line):
        calls.append(line)
        raise KeyboardInterrupt

    from paceline import _paceline
    from paceline._scenario import source
    text, file = source(gpt_8gpus)
    with pytest.raises(KeyboardInterrupt):
        _paceline.search(text, file, 0, 5, 2, interrupt)
    assert len(calls) == 1 and calls[0].startswith("search: ")
    # paceline.search shows how far it is as it goes, and ends the line.
    result = paceline.search(gpt_8gpus, top=2, progress=True)
    shown = capsys.readouterr().err
    assert "layer graphs built" in shown and f"of {result.considered} layouts bounded" in shown
    assert re.search(rf"\rsearch: {result.simulated} layouts simulated *\n$", shown), shown


def test_ctrl_c_stops_a_search_while_it_bounds_layouts(scenario_path):
    # GPT-3 175B on 1,024 A100s: seconds of bounding 276,660 layouts before the first simulation.
    # A SIGINT 0.5 s in stops it there with KeyboardInterrupt.
    timer = threading.Timer(0.5, lambda: os.kill(os.getpid(), signal.SIGINT))
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            paceline.search(os.path.join(os.path.dirname(scenario_path), "gpt3-175b-1024xa100.yaml"))
    finally:
        timer.cancel()


def test_a_search_from_another_thread_runs_there(gpt_8gpus):
    # Python's signals reach only its main thread: elsewhere the search runs on the calling thread.
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        assert pool.submit(paceline.search, gpt_8gpus, top=3).result().top["tokens_per_s"].is_monotonic_decreasing
